//! `Connection: close` on every answer given before its request's body was read to the end
//! (a refused key, a rate limit, a body over its size or time): hyper cannot find where such a
//! body ends without reading it, so it closes the connection after the answer. Saying so lets
//! a keep-alive client open a new connection for its next request instead of failing it on
//! one that is gone.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::Response;
use bytes::Bytes;
use http_body::Frame;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

/// Marks the answer `Connection: close` when the request declared a body that was not read
/// to its end.
pub(crate) async fn close_after_unread_body(request: Request, next: Next) -> Response {
    if !declares_body(&request) {
        return next.run(request).await;
    }
    let ended = Arc::new(AtomicBool::new(false));
    let request = request.map(|body| {
        Body::new(Watched {
            body,
            ended: Arc::clone(&ended),
        })
    });
    let mut response = next.run(request).await;
    if !ended.load(Ordering::Acquire) {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// Whether the head announces body bytes: chunks, or a length above zero.
fn declares_body(request: &Request) -> bool {
    let headers = request.headers();
    headers.contains_key(header::TRANSFER_ENCODING)
        || headers
            .get(header::CONTENT_LENGTH)
            .is_some_and(|length| length.as_bytes() != b"0")
}

/// A request body that notes when it has been read to its end.
struct Watched {
    body: Body,
    ended: Arc<AtomicBool>,
}

impl http_body::Body for Watched {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let frame = Pin::new(&mut self.body).poll_frame(cx);
        if matches!(frame, Poll::Ready(None)) || self.body.is_end_stream() {
            self.ended.store(true, Ordering::Release);
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
