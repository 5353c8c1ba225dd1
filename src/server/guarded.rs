//! A connection's socket, guarding the head of each HTTP/1 request: once a request's first
//! byte arrives its head must be complete within the head timeout and the head size limit.
//! Hyper's own header timeout also runs while a keep-alive connection waits idle for its next
//! request, so it serves as the idle timeout; this guard gives the shorter bound to the head
//! itself, and answers its refusals (400, 408, 431) in the API's JSON error shape before
//! closing.
//!
//! The guard follows the messages both ways ([`super::framing`]): the requests the client
//! sends, head and body, so a head is bounded from its own first byte whether it comes alone,
//! after a `100 Continue`, or pipelined behind earlier requests, and a body (which may hold any
//! bytes) is never taken for a head; and the answers the server writes, so a refusal of a
//! pipelined request waits until every earlier request has its answer, and is never written
//! into the middle of one.

use super::framing::{self, Body, HeadEnd, ResponseHead, Unframed};
use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker, ready};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// Bounds on a request's head.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HeadLimits {
    /// From a request's first byte to the end of its head.
    pub(crate) timeout: Duration,
    /// The request line and headers, in bytes.
    pub(crate) max_bytes: usize,
}

/// Where one direction of the connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Between messages (a new connection, or after a body).
    Between,
    /// Reading a message's head.
    Head,
    /// The head is complete; its body follows.
    Body(Body),
    /// Framing was lost (a broken chunked body, an answer that runs until the close): hyper
    /// ends such a connection, so nothing after it is followed.
    Lost,
}

/// One direction: its phase, the blank line being looked for, and the head so far when it
/// spans reads.
#[derive(Debug)]
struct Direction {
    phase: Phase,
    end: HeadEnd,
    /// The current head's bytes, kept only while it spans reads (most heads arrive whole).
    head: Vec<u8>,
    head_bytes: usize,
}

impl Direction {
    fn new() -> Self {
        Self {
            phase: Phase::Between,
            end: HeadEnd::default(),
            head: Vec::new(),
            head_bytes: 0,
        }
    }

    fn start_head(&mut self) {
        self.phase = Phase::Head;
        self.end = HeadEnd::default();
        self.head.clear();
        self.head_bytes = 0;
    }
}

/// A refusal of a request head.
#[derive(Debug, Clone, Copy)]
enum Refusal {
    None,
    /// Decided, waiting until every earlier request has its answer.
    Waiting(&'static [u8]),
    /// Being written; the connection ends after it.
    Writing(&'static [u8]),
}

/// The longest answer head the guard follows; the server's own are a few hundred bytes.
const MAX_ANSWER_HEAD: usize = 64 * 1024;

pub(crate) struct Guarded<IO> {
    io: IO,
    limits: HeadLimits,
    requests: Direction,
    answers: Direction,
    /// Requests whose head has passed and whose final answer is not written yet, oldest
    /// first: whether each is a `HEAD` (its answer has no body).
    unanswered: VecDeque<bool>,
    deadline: Pin<Box<Sleep>>,
    /// Whether `deadline` runs for the head being read: armed only when a head spans reads.
    deadline_armed: bool,
    refusal: Refusal,
    /// The reader waiting for the earlier answers before it writes a refusal.
    read_waker: Option<Waker>,
}

/// An answer written straight to the socket, in the API's error shape, before the connection
/// is closed: the request never reached the router. `extra` adds header lines.
pub(crate) fn raw_answer(status: &str, code: &str, message: &str, extra: &str) -> &'static [u8] {
    let body = format!(r#"{{"error":{{"code":"{code}","message":"{message}"}}}}"#);
    let response = format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{extra}connection: close\r\n\r\n{body}",
        body.len()
    );
    // A handful of fixed answers, made once per kind and kept for the process.
    Box::leak(response.into_boxed_str()).as_bytes()
}

fn head_timeout() -> &'static [u8] {
    static ANSWER: std::sync::OnceLock<&'static [u8]> = std::sync::OnceLock::new();
    ANSWER.get_or_init(|| {
        raw_answer(
            "408 Request Timeout",
            "request_timeout",
            "the request's headers did not arrive in time",
            "",
        )
    })
}

fn head_too_large() -> &'static [u8] {
    static ANSWER: std::sync::OnceLock<&'static [u8]> = std::sync::OnceLock::new();
    ANSWER.get_or_init(|| {
        raw_answer(
            "431 Request Header Fields Too Large",
            "headers_too_large",
            "the request line and headers are over the size limit",
            "",
        )
    })
}

fn head_malformed() -> &'static [u8] {
    static ANSWER: std::sync::OnceLock<&'static [u8]> = std::sync::OnceLock::new();
    ANSWER.get_or_init(|| {
        raw_answer(
            "400 Bad Request",
            "invalid_request",
            "the request line or headers are not HTTP/1.1, or frame the body in a way the server does not read",
            "",
        )
    })
}

impl<IO> Guarded<IO> {
    pub(crate) fn new(io: IO, limits: HeadLimits) -> Self {
        Self {
            io,
            limits,
            requests: Direction::new(),
            answers: Direction::new(),
            unanswered: VecDeque::new(),
            // Armed when a head spans reads.
            deadline: Box::pin(tokio::time::sleep_until(Instant::now())),
            deadline_armed: false,
            refusal: Refusal::None,
            read_waker: None,
        }
    }

    /// Follows the requests through newly read bytes. A refusal comes with how many of the
    /// bytes precede the refused head (earlier requests, which hyper still gets).
    fn follow_requests(&mut self, bytes: &[u8]) -> Option<(usize, &'static [u8])> {
        let mut at = 0;
        // Where the current head starts in `bytes` (0 when it started in an earlier read).
        let mut head_from = 0;
        while at < bytes.len() {
            match self.requests.phase {
                Phase::Between => {
                    // Line ends between requests start nothing (RFC 9112, section 2.2).
                    let skipped = bytes[at..]
                        .iter()
                        .position(|byte| !matches!(byte, b'\r' | b'\n'))?;
                    at += skipped;
                    head_from = at;
                    self.requests.start_head();
                }
                Phase::Head => {
                    let Some(length) = self.requests.end.find(&bytes[at..]) else {
                        self.requests.head_bytes += bytes.len() - at;
                        if self.requests.head_bytes > self.limits.max_bytes {
                            return Some((head_from, head_too_large()));
                        }
                        self.requests.head.extend_from_slice(&bytes[at..]);
                        if !self.deadline_armed {
                            self.deadline_armed = true;
                            self.deadline
                                .as_mut()
                                .reset(Instant::now() + self.limits.timeout);
                        }
                        return None;
                    };
                    let head = &bytes[at..at + length];
                    at += length;
                    self.requests.head_bytes += length;
                    self.deadline_armed = false;
                    if self.requests.head_bytes > self.limits.max_bytes {
                        return Some((head_from, head_too_large()));
                    }
                    let parsed = if self.requests.head.is_empty() {
                        framing::request_head(head)
                    } else {
                        self.requests.head.extend_from_slice(head);
                        framing::request_head(&self.requests.head)
                    };
                    self.requests.head.clear();
                    match parsed {
                        Ok(request) => {
                            self.unanswered.push_back(request.is_head);
                            self.requests.phase = match request.body {
                                Body::Empty => Phase::Between,
                                body => Phase::Body(body),
                            };
                        }
                        Err(Unframed::TooManyHeaders) => {
                            return Some((head_from, head_too_large()));
                        }
                        Err(Unframed::Malformed) => return Some((head_from, head_malformed())),
                    }
                }
                Phase::Body(mut body) => match body.advance(&bytes[at..]) {
                    Some((used, ended)) => {
                        at += used;
                        self.requests.phase = if ended {
                            Phase::Between
                        } else {
                            Phase::Body(body)
                        };
                    }
                    // hyper refuses the body and ends the connection.
                    None => self.requests.phase = Phase::Lost,
                },
                Phase::Lost => return None,
            }
        }
        None
    }

    /// Follows the answers through newly written bytes, noting each request answered.
    fn follow_answers(&mut self, bytes: &[u8]) {
        let mut at = 0;
        while at < bytes.len() {
            match self.answers.phase {
                Phase::Between => self.answers.start_head(),
                Phase::Head => {
                    let Some(length) = self.answers.end.find(&bytes[at..]) else {
                        self.answers.head_bytes += bytes.len() - at;
                        self.answers.head.extend_from_slice(&bytes[at..]);
                        if self.answers.head_bytes > MAX_ANSWER_HEAD {
                            self.answers.phase = Phase::Lost;
                        }
                        return;
                    };
                    let head = &bytes[at..at + length];
                    at += length;
                    let to_head_request = self.unanswered.front().copied().unwrap_or(false);
                    let parsed = if self.answers.head.is_empty() {
                        framing::response_head(head, to_head_request)
                    } else {
                        self.answers.head.extend_from_slice(head);
                        framing::response_head(&self.answers.head, to_head_request)
                    };
                    self.answers.head.clear();
                    match parsed {
                        ResponseHead::Interim => self.answers.phase = Phase::Between,
                        ResponseHead::Final(Body::Empty) => self.answered(),
                        ResponseHead::Final(Body::UntilClose) => self.answers.phase = Phase::Lost,
                        ResponseHead::Final(body) => self.answers.phase = Phase::Body(body),
                    }
                }
                Phase::Body(mut body) => match body.advance(&bytes[at..]) {
                    Some((used, true)) => {
                        at += used;
                        self.answered();
                    }
                    Some((used, false)) => {
                        at += used;
                        self.answers.phase = Phase::Body(body);
                    }
                    None => self.answers.phase = Phase::Lost,
                },
                Phase::Lost => return,
            }
        }
    }

    /// The oldest unanswered request has its whole answer: a refusal waiting for it may go.
    fn answered(&mut self) {
        self.answers.phase = Phase::Between;
        self.unanswered.pop_front();
        if self.unanswered.is_empty()
            && matches!(self.refusal, Refusal::Waiting(_))
            && let Some(reader) = self.read_waker.take()
        {
            reader.wake();
        }
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> Guarded<IO> {
    /// Writes what is left of the refusal, then ends the connection for the server.
    fn poll_refuse(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Refusal::Writing(left) = self.refusal
            && !left.is_empty()
        {
            let written = ready!(Pin::new(&mut self.io).poll_write(cx, left))?;
            if written == 0 {
                break;
            }
            self.refusal = Refusal::Writing(&left[written..]);
        }
        ready!(Pin::new(&mut self.io).poll_flush(cx))?;
        let _ = ready!(Pin::new(&mut self.io).poll_shutdown(cx));
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "request head refused",
        )))
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncRead for Guarded<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            match this.refusal {
                Refusal::Writing(_) => return this.poll_refuse(cx),
                Refusal::Waiting(answer) if this.unanswered.is_empty() => {
                    this.refusal = Refusal::Writing(answer);
                    return this.poll_refuse(cx);
                }
                Refusal::Waiting(_) => {
                    this.read_waker = Some(cx.waker().clone());
                    return Poll::Pending;
                }
                Refusal::None => {}
            }
            let before = buf.filled().len();
            match Pin::new(&mut this.io).poll_read(cx, buf) {
                Poll::Ready(Ok(())) => {
                    let Some((kept, answer)) = this.follow_requests(&buf.filled()[before..]) else {
                        return Poll::Ready(Ok(()));
                    };
                    buf.set_filled(before + kept);
                    this.refusal = Refusal::Waiting(answer);
                    // Earlier requests in the same read still go to the server; no bytes
                    // at all would read as the end of the stream.
                    if kept > 0 {
                        return Poll::Ready(Ok(()));
                    }
                }
                Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                Poll::Pending => {
                    if this.requests.phase == Phase::Head
                        && this.deadline_armed
                        && this.deadline.as_mut().poll(cx).is_ready()
                    {
                        this.refusal = Refusal::Waiting(head_timeout());
                        continue;
                    }
                    return Poll::Pending;
                }
            }
        }
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Guarded<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = ready!(Pin::new(&mut this.io).poll_write(cx, data))?;
        this.follow_answers(&data[..written]);
        Poll::Ready(Ok(written))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = ready!(Pin::new(&mut this.io).poll_write_vectored(cx, bufs))?;
        let mut left = written;
        for slice in bufs {
            if left == 0 {
                break;
            }
            let taken = slice.len().min(left);
            this.follow_answers(&slice[..taken]);
            left -= taken;
        }
        Poll::Ready(Ok(written))
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const LIMITS: HeadLimits = HeadLimits {
        timeout: Duration::from_millis(200),
        max_bytes: 64,
    };

    #[tokio::test]
    async fn a_complete_head_passes_and_its_body_is_never_scanned() {
        let (mut client, server) = tokio::io::duplex(1024);
        let mut guarded = Guarded::new(server, LIMITS);
        let body = "body with \r\n\r\n and more than sixty-four bytes of anything at all";
        let request = format!(
            "POST / HTTP/1.1\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        client.write_all(request.as_bytes()).await.expect("written");
        let mut read = vec![0; 512];
        let n = guarded.read(&mut read).await.expect("read");
        assert!(n > 100, "{n}");
        assert_eq!(guarded.requests.phase, Phase::Between);
        assert_eq!(guarded.unanswered.len(), 1);
    }

    #[tokio::test]
    async fn a_body_sent_after_an_interim_answer_is_not_taken_for_a_head() {
        let (mut client, server) = tokio::io::duplex(4096);
        let mut guarded = Guarded::new(server, LIMITS);
        client
            .write_all(b"POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 200\r\n\r\n")
            .await
            .expect("written");
        let mut read = vec![0; 1024];
        assert!(guarded.read(&mut read).await.expect("head") > 0);
        guarded
            .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
            .await
            .expect("interim");
        client.write_all(&[b'x'; 100]).await.expect("body");
        tokio::time::sleep(Duration::from_millis(300)).await;
        client.write_all(&[b'y'; 100]).await.expect("body");
        let mut body = 0;
        while body < 200 {
            body += guarded.read(&mut read).await.expect("body, not a refusal");
        }
        assert_eq!(guarded.requests.phase, Phase::Between);
        assert_eq!(
            guarded.unanswered.len(),
            1,
            "the interim answer ends no request"
        );
    }

    #[tokio::test]
    async fn a_stalled_head_is_answered_408_and_closed() {
        let (mut client, server) = tokio::io::duplex(1024);
        let mut guarded = Guarded::new(server, LIMITS);
        client
            .write_all(b"POST / HTTP/1.1\r\nHost: x\r\n")
            .await
            .expect("written");
        let mut read = vec![0; 512];
        let _ = guarded.read(&mut read).await;
        let outcome = guarded.read(&mut read).await;
        assert!(outcome.is_err(), "{outcome:?}");
        let mut answer = String::new();
        client.read_to_string(&mut answer).await.expect("answer");
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.contains("\"request_timeout\""), "{answer}");
    }

    #[tokio::test]
    async fn an_oversized_head_is_answered_431() {
        let (mut client, server) = tokio::io::duplex(1024);
        let mut guarded = Guarded::new(server, LIMITS);
        client
            .write_all(format!("GET / HTTP/1.1\r\nX-Big: {}\r\n\r\n", "a".repeat(100)).as_bytes())
            .await
            .expect("written");
        let mut read = vec![0; 512];
        assert!(guarded.read(&mut read).await.is_err());
        let mut answer = String::new();
        client.read_to_string(&mut answer).await.expect("answer");
        assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
        assert!(answer.contains("\"headers_too_large\""), "{answer}");
    }

    #[tokio::test]
    async fn a_pipelined_half_head_is_refused_after_the_earlier_answer_and_never_inside_it() {
        let (mut client, server) = tokio::io::duplex(4096);
        let mut guarded = Guarded::new(server, LIMITS);
        client
            .write_all(b"GET /first HTTP/1.1\r\n\r\nGET /second HTTP/1.1\r\nHost: x\r\n")
            .await
            .expect("written");
        let mut read = vec![0; 1024];
        assert!(guarded.read(&mut read).await.expect("both") > 20);
        assert_eq!(guarded.requests.phase, Phase::Head);
        // The head's time runs out while the first request is still being answered: the
        // refusal waits for that answer.
        let waiting =
            tokio::time::timeout(Duration::from_millis(400), guarded.read(&mut read)).await;
        assert!(waiting.is_err(), "{waiting:?}");
        guarded
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nfir")
            .await
            .expect("part of the answer");
        let still = tokio::time::timeout(Duration::from_millis(100), guarded.read(&mut read)).await;
        assert!(still.is_err(), "refused inside an answer: {still:?}");
        guarded.write_all(b"st").await.expect("the rest");
        assert!(guarded.read(&mut read).await.is_err());
        let mut answer = String::new();
        client.read_to_string(&mut answer).await.expect("answer");
        let (first, refusal) = answer.split_at(answer.find("first").expect("first") + 5);
        assert!(first.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(refusal.starts_with("HTTP/1.1 408"), "{answer}");
    }

    #[tokio::test]
    async fn a_pipelined_oversized_head_is_answered_431() {
        let (mut client, server) = tokio::io::duplex(4096);
        let mut guarded = Guarded::new(server, LIMITS);
        let requests = format!(
            "GET / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\nX-Big: {}\r\n\r\n",
            "a".repeat(100)
        );
        client
            .write_all(requests.as_bytes())
            .await
            .expect("written");
        let mut read = vec![0; 1024];
        let passed = guarded.read(&mut read).await.expect("the first request");
        assert_eq!(&read[..passed], b"GET / HTTP/1.1\r\n\r\n");
        guarded
            .write_all(b"HTTP/1.1 204 No Content\r\n\r\n")
            .await
            .expect("answer");
        assert!(guarded.read(&mut read).await.is_err());
        let mut answer = String::new();
        client.read_to_string(&mut answer).await.expect("answer");
        assert!(answer.starts_with("HTTP/1.1 204"), "{answer}");
        assert!(answer.contains("HTTP/1.1 431"), "{answer}");
    }

    #[tokio::test]
    async fn the_next_request_on_a_kept_alive_connection_is_guarded_again() {
        let (mut client, server) = tokio::io::duplex(1024);
        let mut guarded = Guarded::new(server, LIMITS);
        client
            .write_all(b"GET / HTTP/1.1\r\n\r\n")
            .await
            .expect("written");
        let mut read = vec![0; 512];
        let first = guarded.read(&mut read).await.expect("first head");
        assert!(first > 0);
        guarded
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
            .await
            .expect("response");
        assert!(guarded.unanswered.is_empty());
        client.write_all(b"GET /again HTT").await.expect("written");
        let part = guarded
            .read(&mut read)
            .await
            .expect("part of the next head");
        assert!(part > 0);
        assert_eq!(guarded.requests.phase, Phase::Head);
        assert!(guarded.deadline_armed);
    }
}
