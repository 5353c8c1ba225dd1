//! Quoting a client's value in an error message: enough of it to see which value it was,
//! never enough to make an answer as large as a hostile request (a 2 MB id must not come back
//! as a 4 MB error).

/// The most characters of a client's value an error repeats.
pub(crate) const MAX_ECHO_CHARS: usize = 64;

/// `text` quoted, cut to [`MAX_ECHO_CHARS`] characters (an ellipsis marks a cut).
pub(crate) fn echo(text: &str) -> String {
    let mut chars = text.chars();
    let head: String = chars.by_ref().take(MAX_ECHO_CHARS).collect();
    if chars.next().is_some() {
        format!("{head:?}…")
    } else {
        format!("{head:?}")
    }
}

/// `text` cut to `max` characters, unquoted (an ellipsis marks a cut): a field or parameter
/// name a client chose.
pub(crate) fn cut(text: &str, max: usize) -> String {
    let mut chars = text.chars();
    let head: String = chars.by_ref().take(max).collect();
    if chars.next().is_some() {
        format!("{head}…")
    } else {
        head
    }
}

/// `message` with every run it quotes (in `"` or `` ` ``) cut to [`MAX_ECHO_CHARS`]
/// characters: a backstop for messages that quote a client's value whole (a parser's, say).
pub(crate) fn cut_quoted(message: &str) -> String {
    let mut shown = String::with_capacity(message.len().min(1024));
    let mut chars = message.chars();
    while let Some(quote) = chars.next() {
        shown.push(quote);
        if quote != '"' && quote != '`' {
            continue;
        }
        let (mut inside, mut escaped) = (0, false);
        let mut closed = false;
        for c in chars.by_ref() {
            if c == quote && !escaped {
                closed = true;
                break;
            }
            escaped = quote == '"' && c == '\\' && !escaped;
            inside += 1;
            if inside <= MAX_ECHO_CHARS {
                shown.push(c);
            }
        }
        if inside > MAX_ECHO_CHARS {
            shown.push('…');
        }
        if closed {
            shown.push(quote);
        }
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_values_are_cut_short_values_kept() {
        assert_eq!(echo("eight"), "\"eight\"");
        let long = "x".repeat(2_000_000);
        assert_eq!(echo(&long).chars().count(), MAX_ECHO_CHARS + 3);
        assert_eq!(cut("name", 2), "na…");
    }

    #[test]
    fn quoted_runs_are_cut_and_the_rest_of_the_message_kept() {
        let long = "Q".repeat(300);
        let message = format!("invalid type: string \"{long}\", expected a map at line 1");
        let shown = cut_quoted(&message);
        assert_eq!(
            shown,
            format!(
                "invalid type: string \"{}…\", expected a map at line 1",
                "Q".repeat(MAX_ECHO_CHARS)
            )
        );
        let unknown = format!("unknown field `{long}`, expected one of `tz`, `buckets`");
        assert!(cut_quoted(&unknown).ends_with("…`, expected one of `tz`, `buckets`"));
        // An escaped quote stays inside its run; short runs and unquoted text are kept.
        assert_eq!(cut_quoted(r#"bad "a\"b" here"#), r#"bad "a\"b" here"#);
        assert_eq!(cut_quoted("no quotes"), "no quotes");
        assert_eq!(
            cut_quoted(&format!("open \"{long}")),
            format!("open \"{}…", "Q".repeat(MAX_ECHO_CHARS))
        );
    }
}
