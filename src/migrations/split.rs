//! Splits a migration file into single CQL statements: the native protocol runs one statement
//! per request, and a file holds several.

/// The statements of `text`, comments removed, each without its terminating `;`.
///
/// Understands what can hide a `;` or a comment marker in CQL: `'single-quoted'` strings (with
/// `''` escapes), `"quoted identifiers"`, `$$dollar strings$$`, `--` and `//` line comments
/// and `/* block comments */`.
pub(crate) fn split_statements(text: &str) -> Vec<String> {
    let mut statements = Vec::new();
    let mut current = String::new();
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if rest.starts_with("--") || rest.starts_with("//") {
            rest = rest.find('\n').map_or("", |end| &rest[end..]);
        } else if let Some(body) = rest.strip_prefix("/*") {
            rest = body.find("*/").map_or("", |end| &body[end + 2..]);
            current.push(' ');
        } else if rest.starts_with("$$") {
            let end = rest[2..].find("$$").map_or(rest.len(), |end| end + 4);
            current.push_str(&rest[..end]);
            rest = &rest[end..];
        } else if c == '\'' || c == '"' {
            let end = quoted_len(rest, c);
            current.push_str(&rest[..end]);
            rest = &rest[end..];
        } else if c == ';' {
            push_statement(&mut statements, &mut current);
            rest = &rest[1..];
        } else {
            current.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    push_statement(&mut statements, &mut current);
    statements
}

/// Length of the quoted token at the start of `text`, quotes included; a doubled quote
/// character inside is an escaped quote, not the end.
fn quoted_len(text: &str, quote: char) -> usize {
    let mut chars = text.char_indices().skip(1).peekable();
    while let Some((i, c)) = chars.next() {
        if c == quote {
            if chars.peek().is_some_and(|&(_, next)| next == quote) {
                chars.next();
            } else {
                return i + 1;
            }
        }
    }
    text.len()
}

fn push_statement(statements: &mut Vec<String>, current: &mut String) {
    let statement = current.trim();
    if !statement.is_empty() {
        statements.push(statement.to_owned());
    }
    current.clear();
}

#[cfg(test)]
mod tests {
    use super::split_statements;

    #[test]
    fn splits_on_semicolons_and_drops_comments() {
        let text = "-- a table\nCREATE TABLE a (k int PRIMARY KEY); // trailing\n/* b */ CREATE TABLE b (k int PRIMARY KEY);\n";
        assert_eq!(
            split_statements(text),
            [
                "CREATE TABLE a (k int PRIMARY KEY)",
                "CREATE TABLE b (k int PRIMARY KEY)"
            ]
        );
    }

    #[test]
    fn keeps_semicolons_and_comment_markers_inside_strings() {
        let text = "INSERT INTO t (k, v) VALUES (1, 'a;b -- c ''d''');\nSELECT \"odd;name\" FROM t;\nCREATE FUNCTION f() RETURNS int LANGUAGE java AS $$ return 1; $$;";
        assert_eq!(
            split_statements(text),
            [
                "INSERT INTO t (k, v) VALUES (1, 'a;b -- c ''d''')",
                "SELECT \"odd;name\" FROM t",
                "CREATE FUNCTION f() RETURNS int LANGUAGE java AS $$ return 1; $$",
            ]
        );
    }

    #[test]
    fn a_last_statement_without_semicolon_counts_and_blank_input_has_none() {
        assert_eq!(split_statements("SELECT 1 FROM t"), ["SELECT 1 FROM t"]);
        assert!(split_statements("  -- only a comment\n ; ;").is_empty());
    }
}
