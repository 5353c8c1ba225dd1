//! The `X-Request-Id` a caller sends is kept and echoed back only when it is a quotable
//! token: at most 128 printable ASCII characters. Anything else is replaced by the server's
//! own id, so a caller cannot make every answer (and log line) carry kilobytes of its text.

use axum::http::{HeaderName, Request};

/// The longest caller's request id kept.
const MAX_REQUEST_ID: usize = 128;

/// Removes a request id that is too long or not printable ASCII; one is then made.
pub(crate) fn drop_unquotable_request_id<B>(
    mut request: Request<B>,
    name: &HeaderName,
) -> Request<B> {
    let quotable = request.headers().get(name).is_none_or(|id| {
        id.len() <= MAX_REQUEST_ID
            && id
                .as_bytes()
                .iter()
                .all(|byte| (b' '..=b'~').contains(byte))
    });
    if !quotable {
        request.headers_mut().remove(name);
    }
    request
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_short_printable_ids_are_kept() {
        let name = HeaderName::from_static("x-request-id");
        let with = |id: &[u8]| {
            let request = Request::builder()
                .header(&name, id)
                .body(())
                .expect("request");
            drop_unquotable_request_id(request, &name)
                .headers()
                .get(&name)
                .map(|id| id.as_bytes().to_vec())
        };
        assert_eq!(with(b"trace-42"), Some(b"trace-42".to_vec()));
        assert_eq!(with(&[b'a'; 128]), Some(vec![b'a'; 128]));
        assert_eq!(with(&[b'a'; 129]), None);
        assert_eq!(with("caf\u{e9}".as_bytes()), None);
        assert_eq!(with(b"tab\there"), None);
    }
}
