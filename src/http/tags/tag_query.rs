//! The query string of a signed ad tag (`/i`, `/c`), read strictly: `s` is the last parameter
//! and its value the signature of every byte before `&s=`; every other parameter is listed by
//! the endpoint, present once, and required unless the endpoint says it is optional. Anything
//! else is refused before a secret is looked up, so no unsigned byte can reach a count or a
//! redirect (a `&url=` appended after `s`, a second `url`: the open redirect of CVE-2021-22873).

use std::collections::HashMap;

/// The parameters one endpoint accepts.
pub(crate) struct TagShape {
    pub(crate) required: &'static [&'static str],
    pub(crate) optional: &'static [&'static str],
}

/// `GET /i`: the impression pixel (`d`, the `user_data`, optional).
pub(crate) const PIXEL: TagShape = TagShape {
    required: &["a", "c", "ad", "imp", "u", "t", "k"],
    optional: &["d"],
};

/// `GET /c`: the click redirect.
pub(crate) const CLICK: TagShape = TagShape {
    required: &["a", "c", "ad", "imp", "t", "url", "k"],
    optional: &[],
};

/// A tag's query as signed: the bytes the signature covers, the signature, the parameters.
#[derive(Debug)]
pub(crate) struct SignedQuery<'a> {
    pub(crate) signed: &'a [u8],
    pub(crate) signature: &'a str,
    params: HashMap<&'static str, String>,
}

impl SignedQuery<'_> {
    /// A parameter of the shape (required ones are always present).
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.params.get(name).map(String::as_str)
    }
}

/// Why a tag's query is not one this endpoint reads. The messages name the parameter, never
/// echo a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum QueryRefusal {
    #[error("the signature s is missing or is not the last parameter")]
    Unsigned,
    #[error("the parameter {0} is repeated")]
    Repeated(&'static str),
    #[error("the parameter {0} is not one this endpoint takes")]
    Unlisted(String),
    #[error("the parameter {0} follows the signature s, which must be the last parameter")]
    AfterSignature(String),
    #[error("the parameter {0} is missing")]
    Missing(&'static str),
    #[error("the query string is malformed")]
    Malformed,
}

/// Reads `query` (the raw bytes after `?`) in `shape`.
pub(crate) fn parse<'a>(query: &'a str, shape: &TagShape) -> Result<SignedQuery<'a>, QueryRefusal> {
    let (signed, signature) = split_signature(query)?;
    let mut params = HashMap::new();
    for pair in signed.split('&') {
        let (raw_name, raw_value) = pair.split_once('=').unwrap_or((pair, ""));
        let name = shape
            .required
            .iter()
            .chain(shape.optional)
            .find(|listed| **listed == raw_name)
            .ok_or_else(|| QueryRefusal::Unlisted(parameter_name(raw_name)))?;
        let value = decode(raw_value).ok_or(QueryRefusal::Malformed)?;
        if params.insert(*name, value).is_some() {
            return Err(QueryRefusal::Repeated(name));
        }
    }
    if let Some(missing) = shape
        .required
        .iter()
        .find(|name| !params.contains_key(**name))
    {
        return Err(QueryRefusal::Missing(missing));
    }
    Ok(SignedQuery {
        signed: signed.as_bytes(),
        signature,
        params,
    })
}

/// The signed bytes and the signature: the last pair must be `s=…` and the only `s`.
fn split_signature(query: &str) -> Result<(&str, &str), QueryRefusal> {
    let start = query.rfind("&s=").ok_or(QueryRefusal::Unsigned)?;
    let (signed, signature) = (&query[..start], &query[start + 3..]);
    if let Some((_, after)) = signature.split_once('&') {
        let name = after.split(['=', '&']).next().unwrap_or_default();
        return Err(QueryRefusal::AfterSignature(parameter_name(name)));
    }
    // A signature is base64url: '&' or '=' in it means something follows `s`, or padding.
    let is_base64url = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    if signature.is_empty() || !signature.chars().all(is_base64url) {
        return Err(QueryRefusal::Unsigned);
    }
    let names_s = |pair: &str| pair == "s" || pair.starts_with("s=");
    if signed.is_empty() || signed.split('&').any(names_s) {
        return Err(QueryRefusal::Repeated("s"));
    }
    Ok((signed, signature))
}

/// A parameter name a client chose, as an error repeats it: cut short, never a value.
fn parameter_name(raw: &str) -> String {
    crate::domain::echo::cut(raw, 32)
}

/// A query value decoded: percent escapes, and `+` as a space (form encoding); text only.
fn decode(raw: &str) -> Option<String> {
    let spaced = raw.replace('+', " ");
    percent_encoding::percent_decode_str(&spaced)
        .decode_utf8()
        .ok()
        .map(|text| text.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIGNED: &str = "a=1&c=2&ad=3&imp=4&t=5&url=https%3A%2F%2Fexample.com%2Fx%3Fy%3D1&k=6";

    #[test]
    fn a_well_formed_click_reads_its_parameters_and_signed_bytes() {
        let query = format!("{SIGNED}&s=abc_-9");
        let parsed = parse(&query, &CLICK).expect("well formed");
        assert_eq!(parsed.signed, SIGNED.as_bytes());
        assert_eq!(parsed.signature, "abc_-9");
        assert_eq!(parsed.get("url"), Some("https://example.com/x?y=1"));
        assert_eq!(parsed.get("k"), Some("6"));
    }

    #[test]
    fn anything_after_s_a_repeat_an_unlisted_or_a_missing_parameter_is_refused() {
        for (query, refusal) in [
            (
                format!("{SIGNED}&s=abc&url=https://evil.example"),
                QueryRefusal::AfterSignature("url".to_owned()),
            ),
            (
                format!("{SIGNED}&s=abc&url2=x"),
                QueryRefusal::AfterSignature("url2".to_owned()),
            ),
            (
                format!("{SIGNED}&url=https://evil.example&s=abc"),
                QueryRefusal::Repeated("url"),
            ),
            (format!("{SIGNED}&s=abc&s=abd"), QueryRefusal::Repeated("s")),
            (format!("s=x&{SIGNED}&s=abc"), QueryRefusal::Repeated("s")),
            (
                format!("{SIGNED}&u=7&s=abc"),
                QueryRefusal::Unlisted("u".to_owned()),
            ),
            (
                format!("{SIGNED}&url2=x&s=abc"),
                QueryRefusal::Unlisted("url2".to_owned()),
            ),
            (format!("{SIGNED}&s=abc="), QueryRefusal::Unsigned),
            (SIGNED.to_owned(), QueryRefusal::Unsigned),
            (
                "a=1&c=2&ad=3&imp=4&t=5&k=6&s=abc".to_owned(),
                QueryRefusal::Missing("url"),
            ),
            ("&s=abc".to_owned(), QueryRefusal::Repeated("s")),
        ] {
            assert_eq!(
                parse(&query, &CLICK).map(|_| ()),
                Err(refusal.clone()),
                "{query}"
            );
        }
    }

    #[test]
    fn the_pixel_takes_an_optional_d_and_no_url() {
        let base = "a=1&c=2&ad=3&imp=4&u=5&t=6&k=7";
        assert!(parse(&format!("{base}&s=x"), &PIXEL).is_ok());
        let with_data = format!("{base}&d=%7B%22k%22%3A%22v%22%7D&s=x");
        let parsed = parse(&with_data, &PIXEL).expect("with d");
        assert_eq!(parsed.get("d"), Some("{\"k\":\"v\"}"));
        assert_eq!(
            parse(&format!("{base}&url=x&s=x"), &PIXEL).map(|_| ()),
            Err(QueryRefusal::Unlisted("url".to_owned()))
        );
    }
}
