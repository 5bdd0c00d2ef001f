//! The segment tags a column's default (or generated) expression draws
//! from: the constant arguments of its `segment_nextval(...)` calls, read
//! from the expression as PostgreSQL prints it (`pg_get_expr`), so that
//! `segment_drop` can refuse to drop a tag a column still uses, as `DROP
//! SEQUENCE` refuses, and a default naming a tag that does not exist can
//! be warned about.
//!
//! `pg_get_expr` prints a constant argument as a string literal (quotes
//! doubled; backslashes doubled too while `standard_conforming_strings` is
//! off, never as `E''`), with its casts (`'orders'::text`,
//! `('orders'::character varying)::text`) and `COLLATE`, after the
//! function's name, schema-qualified or not, and `tag =>` when the call
//! named its argument. A tag that is not a constant
//! (`segment_nextval(current_setting('app.tag'))`), or one cast to a type
//! with a length (which may cut it), is not a dependency anyone can know
//! of, and is skipped.

/// The function whose calls are looked for.
const FUNCTION: &str = "segment_nextval(";

/// Every constant tag `expression` passes to `segment_nextval`, in order.
/// `backslashes_doubled`: `standard_conforming_strings` was off when
/// `pg_get_expr` printed it.
pub fn constant_tags(expression: &str, backslashes_doubled: bool) -> Vec<String> {
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
        let argument = arguments.strip_prefix("tag => ").unwrap_or(arguments);
        if let Some((tag, after)) = constant(argument, backslashes_doubled) {
            if after.starts_with(')') {
                tags.push(tag);
            }
        }
    }
    tags
}

/// The string constant `text` starts with — a literal, or one in
/// parentheses, with casts and a `COLLATE` — and what follows it.
fn constant(text: &str, backslashes_doubled: bool) -> Option<(String, &str)> {
    let (mut value, mut rest) = match text.strip_prefix('(') {
        Some(inner) => {
            let (value, after) = constant(inner, backslashes_doubled)?;
            (value, after.strip_prefix(')')?)
        }
        None => literal(text, backslashes_doubled)?,
    };
    loop {
        if let Some(cast) = rest.strip_prefix("::") {
            let end = cast.find([')', ':', ' ', '(']).unwrap_or(cast.len());
            let (mut type_name, mut after) = cast.split_at(end);
            // Type names of two words: `character varying`, `double precision`.
            if let Some(second) = after
                .strip_prefix(' ')
                .filter(|a| !a.starts_with("COLLATE"))
            {
                let end = second.find([')', ':', ' ', '(']).unwrap_or(second.len());
                type_name = &cast[..type_name.len() + 1 + end];
                after = &second[end..];
            }
            if after.starts_with("(") || type_name.ends_with(']') {
                return None; // a length (which may cut the text), or an array
            }
            if type_name == "bpchar" || type_name == "character" {
                value.truncate(value.trim_end_matches(' ').len());
            }
            rest = after;
        } else if let Some(collate) = rest.strip_prefix(" COLLATE ") {
            let end = collate.find([')', ':']).unwrap_or(collate.len());
            rest = &collate[end..];
        } else {
            return Some((value, rest));
        }
    }
}

/// The string literal `text` starts with, and what follows it.
fn literal(text: &str, backslashes_doubled: bool) -> Option<(String, &str)> {
    let body = text.strip_prefix('\'')?;
    let mut value = String::new();
    let mut chars = body.char_indices().peekable();
    loop {
        let (i, c) = chars.next()?;
        match c {
            '\'' if chars.peek().map(|&(_, next)| next) == Some('\'') => {
                chars.next();
                value.push('\'');
            }
            '\'' => return Some((value, &body[i + 1..])),
            '\\' if backslashes_doubled => {
                chars.next().filter(|&(_, next)| next == '\\')?;
                value.push('\\');
            }
            c => value.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(expression: &str) -> Vec<String> {
        constant_tags(expression, false)
    }

    #[test]
    fn reads_the_constant_tag_of_a_default_as_postgres_prints_it() {
        assert_eq!(tags("segment_nextval('orders'::text)"), ["orders"]);
        assert_eq!(tags("public.segment_nextval('orders'::text)"), ["orders"]);
        assert_eq!(
            tags("\"My Schema\".segment_nextval('o''brien'::text)"),
            ["o'brien"]
        );
        assert_eq!(tags(r"segment_nextval('a\b'::text)"), [r"a\b"]);
        assert_eq!(
            constant_tags(r"segment_nextval('a\\b'::text)", true),
            [r"a\b"]
        );
        assert_eq!(
            tags("(segment_nextval('a'::text) + segment_nextval('b'::text))"),
            ["a", "b"]
        );
        assert_eq!(tags("segment_nextval('日本'::text)"), ["日本"]);
    }

    #[test]
    fn reads_it_through_casts_collations_and_a_named_argument() {
        assert_eq!(tags("segment_nextval(tag => 'x'::text)"), ["x"]);
        assert_eq!(
            tags("segment_nextval(('x'::character varying)::text)"),
            ["x"]
        );
        assert_eq!(tags("segment_nextval(('x '::bpchar)::text)"), ["x"]);
        assert_eq!(tags("segment_nextval(('x'::name)::text)"), ["x"]);
        assert_eq!(tags("segment_nextval(('x'::text COLLATE \"C\"))"), ["x"]);
        assert_eq!(tags("segment_nextval('x'::text COLLATE \"C\")"), ["x"]);
        assert_eq!(
            tags("segment_nextval((('x'::character varying)::text COLLATE \"POSIX\"))"),
            ["x"]
        );
    }

    #[test]
    fn skips_what_is_not_a_constant_tag_of_this_function() {
        assert!(tags("my_segment_nextval('orders'::text)").is_empty());
        assert!(tags("segment_nextval(current_setting('app.tag'::text))").is_empty());
        assert!(tags("segment_nextval(('a'::text || 'b'::text))").is_empty());
        assert!(tags("nextval('orders_id_seq'::regclass)").is_empty());
        assert!(tags("segment_nextval('unterminated").is_empty());
        assert!(tags("segment_nextval(('abcdef'::character varying(3))::text)").is_empty());
        assert!(constant_tags(r"segment_nextval('a\b'::text)", true).is_empty());
        assert!(tags("").is_empty());
    }
}
