//! Where each HTTP/1 message on a connection begins and ends, followed byte by byte in one
//! direction: a head up to its blank line, then a body framed as the head says (a length,
//! chunks, or none). The connection guard uses it twice: on the bytes a client sends, so each
//! pipelined request's head is bounded from its own first byte however the responses go, and
//! on the bytes the server writes, so a refusal is never written in the middle of the answer
//! to an earlier request. Interim answers (`100 Continue`) are heads without bodies that end
//! no request.
//!
//! The heads are parsed with `httparse`, the parser hyper itself uses, so the guard and the
//! server agree on where a message ends; a head the guard cannot frame is one hyper would
//! refuse too.

/// What a parsed head says about the rest of its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Body {
    /// No body: the next message starts with the next byte.
    Empty,
    /// `Content-Length` bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked(Chunks),
    /// A response without a length, ended by closing the connection.
    UntilClose,
}

impl Body {
    /// Follows the body through `bytes`: how many of them belong to it, and whether it ended
    /// there. `None`: the chunked framing is broken (hyper refuses such a body and closes).
    pub(crate) fn advance(&mut self, bytes: &[u8]) -> Option<(usize, bool)> {
        match self {
            Self::Empty => Some((0, true)),
            Self::Length(left) => {
                let taken = usize::try_from(*left)
                    .unwrap_or(usize::MAX)
                    .min(bytes.len());
                *left -= taken as u64;
                Some((taken, *left == 0))
            }
            Self::Chunked(chunks) => chunks.advance(bytes),
            Self::UntilClose => Some((bytes.len(), false)),
        }
    }
}

/// Where a chunked body is: `size [; extensions] CRLF data CRLF … 0 CRLF [trailers] CRLF`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Chunks {
    state: ChunkState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    /// The hex digits of a chunk's size, `size` so far.
    Size { size: u64, digits: u8 },
    /// After the size: extensions (skipped) up to the line's end.
    Extension { size: u64 },
    /// Data still to come.
    Data { left: u64 },
    /// The line end after a chunk's data.
    DataEnd,
    /// The trailer section after the last chunk; `line_start`: at the start of a line.
    Trailers { line_start: bool },
}

impl Default for Chunks {
    fn default() -> Self {
        Self {
            state: ChunkState::Size { size: 0, digits: 0 },
        }
    }
}

impl Chunks {
    fn advance(&mut self, bytes: &[u8]) -> Option<(usize, bool)> {
        let mut at = 0;
        while at < bytes.len() {
            let byte = bytes[at];
            self.state = match self.state {
                ChunkState::Data { left } => {
                    let taken = usize::try_from(left)
                        .unwrap_or(usize::MAX)
                        .min(bytes.len() - at);
                    at += taken;
                    let left = left - taken as u64;
                    self.state = if left == 0 {
                        ChunkState::DataEnd
                    } else {
                        ChunkState::Data { left }
                    };
                    continue;
                }
                ChunkState::Size { size, digits } => match byte {
                    b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => {
                        // 16 hex digits hold any u64; more is no size a server takes.
                        if digits >= 16 {
                            return None;
                        }
                        let digit = (byte as char).to_digit(16).map_or(0, u64::from);
                        ChunkState::Size {
                            size: size * 16 + digit,
                            digits: digits + 1,
                        }
                    }
                    _ if digits == 0 => return None,
                    b'\r' => ChunkState::Size { size, digits },
                    b'\n' => Self::after_size_line(size),
                    _ => ChunkState::Extension { size },
                },
                ChunkState::Extension { size } => match byte {
                    b'\n' => Self::after_size_line(size),
                    _ => ChunkState::Extension { size },
                },
                ChunkState::DataEnd => match byte {
                    b'\r' => ChunkState::DataEnd,
                    b'\n' => ChunkState::Size { size: 0, digits: 0 },
                    _ => return None,
                },
                ChunkState::Trailers { line_start } => match byte {
                    b'\n' if line_start => return Some((at + 1, true)),
                    b'\n' => ChunkState::Trailers { line_start: true },
                    b'\r' => ChunkState::Trailers { line_start },
                    _ => ChunkState::Trailers { line_start: false },
                },
            };
            at += 1;
        }
        Some((at, false))
    }

    fn after_size_line(size: u64) -> ChunkState {
        if size == 0 {
            ChunkState::Trailers { line_start: true }
        } else {
            ChunkState::Data { left: size }
        }
    }
}

/// Finds the blank line that ends a head, across reads.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct HeadEnd {
    /// 1 just after a line feed, 2 after a line feed and a carriage return.
    after_line_feed: u8,
}

impl HeadEnd {
    /// The index just past the blank line in `bytes`, if it is there. Like httparse, a bare
    /// line feed ends a line too.
    pub(crate) fn find(&mut self, bytes: &[u8]) -> Option<usize> {
        for (index, &byte) in bytes.iter().enumerate() {
            self.after_line_feed = match (byte, self.after_line_feed) {
                (b'\n', 1 | 2) => {
                    self.after_line_feed = 0;
                    return Some(index + 1);
                }
                (b'\n', _) => 1,
                (b'\r', 1) => 2,
                _ => 0,
            };
        }
        None
    }
}

/// Why a request head cannot be served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unframed {
    /// More header lines than the server reads.
    TooManyHeaders,
    /// Not an HTTP/1 request head, or a body framing hyper refuses.
    Malformed,
}

/// A request head as far as framing goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RequestHead {
    /// A `HEAD` request: its answer has no body whatever its `Content-Length` says.
    pub(crate) is_head: bool,
    pub(crate) body: Body,
}

/// Header lines hyper reads in a request by default; a head with more is refused (431).
const MAX_HEADERS: usize = 100;

/// Parses a complete request head (ending with its blank line).
pub(crate) fn request_head(head: &[u8]) -> Result<RequestHead, Unframed> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    match request.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Err(httparse::Error::TooManyHeaders) => return Err(Unframed::TooManyHeaders),
        Ok(httparse::Status::Partial) | Err(_) => return Err(Unframed::Malformed),
    }
    let method = request.method.unwrap_or_default();
    if method.eq_ignore_ascii_case("CONNECT") {
        // A tunnel: no later request would be HTTP. The API serves none.
        return Err(Unframed::Malformed);
    }
    let body = match body_framing(request.headers)? {
        Some(body) => body,
        None => Body::Empty,
    };
    Ok(RequestHead {
        is_head: method == "HEAD",
        body,
    })
}

/// What a response head says: an interim answer, or the start of the final one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResponseHead {
    /// `100 Continue` and its kind: the final answer is still to come.
    Interim,
    /// The final answer to the oldest unanswered request, with its body.
    Final(Body),
}

/// Parses a complete response head written by the server; `to_head_request`: the request it
/// answers is a `HEAD`. A head the guard cannot read is treated as running until the
/// connection closes, which makes it wait rather than interleave.
pub(crate) fn response_head(head: &[u8], to_head_request: bool) -> ResponseHead {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    if !matches!(response.parse(head), Ok(httparse::Status::Complete(_))) {
        return ResponseHead::Final(Body::UntilClose);
    }
    let code = response.code.unwrap_or_default();
    match code {
        // 101 switches protocols: nothing after it is HTTP/1.
        101 => ResponseHead::Final(Body::UntilClose),
        100..=199 => ResponseHead::Interim,
        204 | 304 => ResponseHead::Final(Body::Empty),
        _ if to_head_request => ResponseHead::Final(Body::Empty),
        _ => match body_framing(response.headers) {
            Ok(Some(body)) => ResponseHead::Final(body),
            Ok(None) | Err(_) => ResponseHead::Final(Body::UntilClose),
        },
    }
}

/// The body a message's headers announce (`None`: neither a length nor chunks), by the rules
/// hyper applies: chunked when `Transfer-Encoding` ends with `chunked` (another final coding
/// is refused), else the `Content-Length`, whose repeated values must agree.
fn body_framing(headers: &[httparse::Header<'_>]) -> Result<Option<Body>, Unframed> {
    let mut chunked = None;
    let mut length: Option<u64> = None;
    for header in headers {
        if header.name.eq_ignore_ascii_case("transfer-encoding") {
            let value = std::str::from_utf8(header.value).map_err(|_| Unframed::Malformed)?;
            let last = value.rsplit(',').next().unwrap_or_default().trim();
            chunked = Some(last.eq_ignore_ascii_case("chunked"));
        } else if header.name.eq_ignore_ascii_case("content-length") {
            let value = std::str::from_utf8(header.value).map_err(|_| Unframed::Malformed)?;
            for part in value.split(',') {
                let part = part.trim();
                if part.is_empty() || !part.bytes().all(|byte| byte.is_ascii_digit()) {
                    return Err(Unframed::Malformed);
                }
                let parsed = part.parse::<u64>().map_err(|_| Unframed::Malformed)?;
                if length.is_some_and(|known| known != parsed) {
                    return Err(Unframed::Malformed);
                }
                length = Some(parsed);
            }
        }
    }
    match (chunked, length) {
        (Some(true), _) => Ok(Some(Body::Chunked(Chunks::default()))),
        (Some(false), _) => Err(Unframed::Malformed),
        (None, Some(0)) => Ok(Some(Body::Empty)),
        (None, Some(length)) => Ok(Some(Body::Length(length))),
        (None, None) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_ends_at_its_blank_line_across_reads_with_or_without_carriage_returns() {
        let mut end = HeadEnd::default();
        assert_eq!(end.find(b"GET / HTTP/1.1\r\nHost: x\r"), None);
        assert_eq!(end.find(b"\n\r"), None);
        assert_eq!(end.find(b"\nbody"), Some(1));
        let mut end = HeadEnd::default();
        assert_eq!(end.find(b"GET / HTTP/1.1\nHost: x\n\nnext"), Some(24));
        let mut end = HeadEnd::default();
        assert_eq!(end.find(b"GET / HTTP/1.1\r\nX: a\rb\r\n"), None);
    }

    #[test]
    fn request_heads_give_their_body_framing() {
        let head = |text: &str| request_head(text.as_bytes());
        assert_eq!(
            head("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"),
            Ok(RequestHead {
                is_head: false,
                body: Body::Empty
            })
        );
        assert_eq!(
            head("POST /v1/impressions HTTP/1.1\r\ncontent-length: 12\r\n\r\n").map(|h| h.body),
            Ok(Body::Length(12))
        );
        assert_eq!(
            head("POST / HTTP/1.1\r\nContent-Length: 7, 7\r\n\r\n").map(|h| h.body),
            Ok(Body::Length(7))
        );
        assert_eq!(
            head(
                "POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\nContent-Length: 3\r\n\r\n"
            )
            .map(|h| h.body),
            Ok(Body::Chunked(Chunks::default()))
        );
        assert_eq!(
            head("HEAD /t.js HTTP/1.1\r\n\r\n").map(|h| h.is_head),
            Ok(true)
        );
        for refused in [
            "POST / HTTP/1.1\r\nContent-Length: 7, 8\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: +7\r\n\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
            "CONNECT x:443 HTTP/1.1\r\n\r\n",
            "not http at all\r\n\r\n",
        ] {
            assert_eq!(head(refused), Err(Unframed::Malformed), "{refused}");
        }
        let crowded = format!("GET / HTTP/1.1\r\n{}\r\n", "X: y\r\n".repeat(101));
        assert_eq!(head(&crowded), Err(Unframed::TooManyHeaders));
    }

    #[test]
    fn response_heads_tell_interim_answers_and_bodiless_ones() {
        assert_eq!(
            response_head(b"HTTP/1.1 100 Continue\r\n\r\n", false),
            ResponseHead::Interim
        );
        assert_eq!(
            response_head(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n", false),
            ResponseHead::Final(Body::Length(5))
        );
        assert_eq!(
            response_head(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n", true),
            ResponseHead::Final(Body::Empty)
        );
        assert_eq!(
            response_head(b"HTTP/1.1 204 No Content\r\n\r\n", false),
            ResponseHead::Final(Body::Empty)
        );
        assert_eq!(
            response_head(
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n",
                false
            ),
            ResponseHead::Final(Body::Chunked(Chunks::default()))
        );
        assert_eq!(
            response_head(b"HTTP/1.0 200 OK\r\n\r\n", false),
            ResponseHead::Final(Body::UntilClose)
        );
    }

    #[test]
    fn a_chunked_body_ends_after_its_last_chunk_and_trailers_in_any_split() {
        let body = b"5;name=x\r\nhello\r\n1A\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nX-Trailer: 1\r\n\r\nGET /next";
        let ends_at = body.len() - b"GET /next".len();
        for split in 0..ends_at {
            let mut chunks = Chunks::default();
            let (first, done) = chunks.advance(&body[..split]).expect("well formed");
            assert_eq!(first, split);
            assert!(!done);
            let (second, done) = chunks.advance(&body[split..]).expect("well formed");
            assert!(done, "split at {split}");
            assert_eq!(split + second, ends_at, "split at {split}");
        }
        let mut chunks = Chunks::default();
        assert_eq!(chunks.advance(b"0\r\n\r\n"), Some((5, true)));
        for broken in [&b"x\r\n"[..], b"5\r\nhelloX", b"11111111111111111\r\n"] {
            assert_eq!(Chunks::default().advance(broken), None, "{broken:?}");
        }
    }

    #[test]
    fn a_length_body_takes_its_bytes_and_no_more() {
        let mut body = Body::Length(5);
        assert_eq!(body.advance(b"abc"), Some((3, false)));
        assert_eq!(body.advance(b"deGET"), Some((2, true)));
        assert_eq!(Body::Empty.advance(b"GET"), Some((0, true)));
    }
}
