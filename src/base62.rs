//! Base62 short codes for IDs (the segment-caching article's URL shortener; CosId's radix-62
//! converter): digits, then upper-case, then lower-case letters, so codes
//! of one length sort like the numbers they stand for. Pure: the SQL
//! functions `idgen_base62` and `idgen_base62_decode` (in `lib.rs`'s
//! neighbour `base62_sql`) wrap it.

/// The 62 digits, in ASCII order.
pub const ALPHABET: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// Why a number or a code cannot be converted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Base62Error {
    Negative(i64),
    Empty,
    /// `position` counts characters from 1.
    BadCharacter {
        character: char,
        position: usize,
    },
    /// Larger than `i64::MAX` (`AzL8n0Y58m7`).
    Overflow,
}

/// The code of `n` (`n >= 0`): `0` → `"0"`, `61` → `"z"`, `62` → `"10"`.
pub fn encode(n: i64) -> Result<String, Base62Error> {
    if n < 0 {
        return Err(Base62Error::Negative(n));
    }
    let mut rest = n as u64;
    let mut digits = Vec::with_capacity(11);
    loop {
        digits.push(ALPHABET[(rest % 62) as usize]);
        rest /= 62;
        if rest == 0 {
            break;
        }
    }
    digits.reverse();
    Ok(String::from_utf8(digits).expect("ASCII"))
}

fn digit_value(byte: u8) -> Option<u64> {
    match byte {
        b'0'..=b'9' => Some(u64::from(byte - b'0')),
        b'A'..=b'Z' => Some(u64::from(byte - b'A') + 10),
        b'a'..=b'z' => Some(u64::from(byte - b'a') + 36),
        _ => None,
    }
}

/// The number a code stands for. Leading zeros are allowed (`"007"` is 7).
pub fn decode(code: &str) -> Result<i64, Base62Error> {
    if code.is_empty() {
        return Err(Base62Error::Empty);
    }
    let mut value: u64 = 0;
    for (index, character) in code.chars().enumerate() {
        let digit = u8::try_from(character).ok().and_then(digit_value).ok_or(
            Base62Error::BadCharacter {
                character,
                position: index + 1,
            },
        )?;
        value = value
            .checked_mul(62)
            .and_then(|v| v.checked_add(digit))
            .filter(|&v| v <= i64::MAX as u64)
            .ok_or(Base62Error::Overflow)?;
    }
    Ok(value as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_numbers_and_the_ends_of_the_range() {
        assert_eq!(encode(0).unwrap(), "0");
        assert_eq!(encode(9).unwrap(), "9");
        assert_eq!(encode(10).unwrap(), "A");
        assert_eq!(encode(61).unwrap(), "z");
        assert_eq!(encode(62).unwrap(), "10");
        assert_eq!(encode(i64::MAX).unwrap(), "AzL8n0Y58m7");
        assert_eq!(decode("AzL8n0Y58m7").unwrap(), i64::MAX);
        assert_eq!(decode("007").unwrap(), 7);
        assert_eq!(decode("zz").unwrap(), 62 * 62 - 1);
    }

    #[test]
    fn bad_input_is_refused_with_what_is_wrong() {
        assert_eq!(encode(-1), Err(Base62Error::Negative(-1)));
        assert_eq!(encode(i64::MIN), Err(Base62Error::Negative(i64::MIN)));
        assert_eq!(decode(""), Err(Base62Error::Empty));
        assert_eq!(
            decode("ab-c"),
            Err(Base62Error::BadCharacter {
                character: '-',
                position: 3
            })
        );
        assert_eq!(
            decode("é"),
            Err(Base62Error::BadCharacter {
                character: 'é',
                position: 1
            })
        );
        assert_eq!(
            decode(" 1"),
            Err(Base62Error::BadCharacter {
                character: ' ',
                position: 1
            })
        );
        // One past the largest bigint, and far past it.
        assert_eq!(decode("AzL8n0Y58m8"), Err(Base62Error::Overflow));
        assert_eq!(decode("zzzzzzzzzzzz"), Err(Base62Error::Overflow));
        assert_eq!(decode(&"0".repeat(100)).unwrap(), 0);
    }

    /// Every code decodes to its number, across the whole bigint range
    /// (every power of 62 and its neighbours, and a million spread values),
    /// and codes of one length sort like their numbers.
    #[test]
    fn round_trips_over_the_whole_range() {
        let mut values = vec![0, 1, i64::MAX, i64::MAX - 1];
        let mut power: i64 = 1;
        while let Some(next) = power.checked_mul(62) {
            values.extend([power - 1, power, power + 1, next - 1]);
            power = next;
        }
        // A full-period 64-bit LCG, masked to 63 bits.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..1_000_000 {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            values.push((x >> 1) as i64);
            values.push((x >> (1 + (x % 62))) as i64);
        }
        let mut previous: Option<(i64, String)> = None;
        values.sort_unstable();
        for value in values {
            let code = encode(value).unwrap();
            assert_eq!(decode(&code).unwrap(), value, "{code}");
            if let Some((p, pcode)) = &previous {
                if pcode.len() == code.len() && p < &value {
                    assert!(pcode < &code, "{pcode} !< {code}");
                }
            }
            previous = Some((value, code));
        }
    }
}
