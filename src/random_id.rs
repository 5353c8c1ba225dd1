//! Random (version 4) ids drawn from the thread's generator, for ids made on hot paths: a
//! request id per request, a writer id per new live sketch. `Uuid::new_v4` asks the kernel
//! for each one (a system call); the thread's generator is a CSPRNG seeded from the kernel.

use axum::http::{HeaderValue, Request};
use tower_http::request_id::{MakeRequestId, RequestId};
use uuid::Uuid;

/// A random version 4 UUID.
pub(crate) fn random_uuid() -> Uuid {
    uuid::Builder::from_random_bytes(rand::random()).into_uuid()
}

/// Makes a request's id when the caller sent none (`X-Request-Id`).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct MakeRandomRequestId;

impl MakeRequestId for MakeRandomRequestId {
    fn make_request_id<B>(&mut self, _: &Request<B>) -> Option<RequestId> {
        let text = random_uuid()
            .hyphenated()
            .encode_lower(&mut Uuid::encode_buffer())
            .to_owned();
        HeaderValue::from_str(&text).ok().map(RequestId::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_random_version_4_uuids() {
        let (first, second) = (random_uuid(), random_uuid());
        assert_eq!(first.get_version_num(), 4);
        assert_eq!(first.get_variant(), uuid::Variant::RFC4122);
        assert_ne!(first, second);
    }

    #[test]
    fn a_request_id_is_a_hyphenated_uuid() {
        let request = Request::new(());
        let id = MakeRandomRequestId
            .make_request_id(&request)
            .expect("an id");
        let text = id.header_value().to_str().expect("ascii");
        let parsed = Uuid::parse_str(text).expect("a uuid");
        assert_eq!(parsed.get_version_num(), 4);
        assert_eq!(text.len(), 36);
    }
}
