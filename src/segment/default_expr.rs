//! The segment tags a column's default (or generated) expression draws
//! from: the constant arguments of its `segment_nextval(...)` calls, read
//! from the expression as PostgreSQL prints it (`pg_get_expr`), so that
//! `segment_drop` can refuse to drop a tag a column still uses, as `DROP
//! SEQUENCE` refuses, and a default naming a tag that does not exist can
//! be warned about.
//!
//! `pg_get_expr` prints a text constant argument as `'orders'::text` (or
//! `E'...'` when it holds a backslash, quotes doubled either way), after
//! the function's name, schema-qualified or not. A tag that is not a
//! constant (`segment_nextval(current_setting('app.tag'))`) is not a
//! dependency anyone can know of, and is skipped.

/// The function whose calls are looked for.
const FUNCTION: &str = "segment_nextval(";

/// Every constant tag `expression` passes to `segment_nextval`, in order.
pub fn constant_tags(expression: &str) -> Vec<String> {
    let mut tags = Vec::new();
    let mut rest = expression;
    while let Some(at) = rest.find(FUNCTION) {
        let before = rest[..at].chars().next_back();
        let arguments = &rest[at + FUNCTION.len()..];
        rest = arguments;
        // `my_segment_nextval(` is another function; `x.segment_nextval(`
        // and `"x".segment_nextval(` are this one in a schema.
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        if let Some(tag) = leading_literal(arguments) {
            tags.push(tag);
        }
    }
    tags
}

/// The string literal `text` starts with, if it is followed by an optional
/// cast to a string type and the call's closing parenthesis.
fn leading_literal(text: &str) -> Option<String> {
    let (escaped, body) = match text.strip_prefix("E'") {
        Some(body) => (true, body),
        None => (false, text.strip_prefix('\'')?),
    };
    let mut value = String::new();
    let mut chars = body.char_indices().peekable();
    let end = loop {
        let (i, c) = chars.next()?;
        match c {
            '\'' if chars.peek().map(|&(_, next)| next) == Some('\'') => {
                chars.next();
                value.push('\'');
            }
            '\'' => break i + 1,
            '\\' if escaped => value.push(chars.next()?.1),
            c => value.push(c),
        }
    };
    let after = &body[end..];
    let after = ["::text", "::character varying", "::bpchar", "::name"]
        .iter()
        .find_map(|cast| after.strip_prefix(cast))
        .unwrap_or(after);
    after.starts_with(')').then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_constant_tag_of_a_default_as_postgres_prints_it() {
        assert_eq!(constant_tags("segment_nextval('orders'::text)"), ["orders"]);
        assert_eq!(
            constant_tags("public.segment_nextval('orders'::text)"),
            ["orders"]
        );
        assert_eq!(
            constant_tags("\"My Schema\".segment_nextval('o''brien'::text)"),
            ["o'brien"]
        );
        assert_eq!(constant_tags(r"segment_nextval(E'a\\b'::text)"), [r"a\b"]);
        assert_eq!(
            constant_tags("(segment_nextval('a'::text) + segment_nextval('b'::character varying))"),
            ["a", "b"]
        );
        assert_eq!(constant_tags("segment_nextval('日本'::text)"), ["日本"]);
    }

    #[test]
    fn skips_what_is_not_a_constant_tag_of_this_function() {
        assert!(constant_tags("my_segment_nextval('orders'::text)").is_empty());
        assert!(constant_tags("segment_nextval(current_setting('app.tag'::text))").is_empty());
        assert!(constant_tags("segment_nextval(('a'::text || 'b'::text))").is_empty());
        assert!(constant_tags("nextval('orders_id_seq'::regclass)").is_empty());
        assert!(constant_tags("segment_nextval('unterminated").is_empty());
        assert!(constant_tags("").is_empty());
    }
}
