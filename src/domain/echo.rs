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
}
