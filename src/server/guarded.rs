//! A connection's socket, guarding the head of each HTTP/1 request: once a request's first
//! byte arrives its head must be complete within the head timeout and the head size limit.
//! Hyper's own header timeout also runs while a keep-alive connection waits idle for its next
//! request, so it serves as the idle timeout; this guard gives the shorter bound to the head
//! itself, and answers its refusals (408, 431) in the API's JSON error shape before closing.
//!
//! The guard finds a head's end by its blank line (`\r\n\r\n`): it sees bytes, not requests,
//! and only looks for the first blank line after a request's first byte, so bodies (which
//! may hold any bytes) are never scanned. A new request starts with the first byte read after
//! a response was written.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// Bounds on a request's head.
#[derive(Debug, Clone, Copy)]
pub struct HeadLimits {
    /// From a request's first byte to the end of its head.
    pub timeout: Duration,
    /// The request line and headers, in bytes.
    pub max_bytes: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Before a request's first byte (a new connection, or between keep-alive requests).
    Idle,
    /// Reading a request's head.
    Head,
    /// The head is complete: the body, the handler, the response.
    Request,
    /// Refused: the refusal is being written, then the connection ends.
    Refusing,
}

pub struct Guarded<IO> {
    io: IO,
    limits: HeadLimits,
    phase: Phase,
    /// How many of the last bytes read match the start of `\r\n\r\n`.
    matched: usize,
    head_bytes: usize,
    deadline: Pin<Box<Sleep>>,
    /// Whether the current request's response has started.
    responded: bool,
    /// The refusal still to write.
    refusal: &'static [u8],
}

/// An answer written straight to the socket, in the API's error shape, before the connection
/// is closed: the request never reached the router. `extra` adds header lines.
pub fn raw_answer(status: &str, code: &str, message: &str, extra: &str) -> &'static [u8] {
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

impl<IO> Guarded<IO> {
    pub fn new(io: IO, limits: HeadLimits) -> Self {
        Self {
            io,
            limits,
            phase: Phase::Idle,
            matched: 0,
            head_bytes: 0,
            // Armed when a request starts.
            deadline: Box::pin(tokio::time::sleep_until(Instant::now())),
            responded: false,
            refusal: &[],
        }
    }

    /// Follows the head through newly read bytes; returns a refusal if the head broke a limit.
    fn scan(&mut self, bytes: &[u8]) -> Option<&'static [u8]> {
        if bytes.is_empty() {
            return None;
        }
        if self.phase == Phase::Idle || (self.phase == Phase::Request && self.responded) {
            self.phase = Phase::Head;
            self.matched = 0;
            self.head_bytes = 0;
            self.responded = false;
            self.deadline
                .as_mut()
                .reset(Instant::now() + self.limits.timeout);
        }
        if self.phase != Phase::Head {
            return None;
        }
        const END: &[u8; 4] = b"\r\n\r\n";
        for (index, byte) in bytes.iter().enumerate() {
            self.matched = match (self.matched, *byte) {
                (matched, byte) if byte == END[matched] => matched + 1,
                (_, b'\r') => 1,
                _ => 0,
            };
            if self.matched == END.len() {
                self.head_bytes += index + 1;
                self.phase = Phase::Request;
                return (self.head_bytes > self.limits.max_bytes).then(head_too_large);
            }
        }
        self.head_bytes += bytes.len();
        (self.head_bytes > self.limits.max_bytes).then(head_too_large)
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> Guarded<IO> {
    /// Writes what is left of the refusal, then ends the connection for the server.
    fn poll_refuse(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.refusal.is_empty() {
            let written = ready!(Pin::new(&mut self.io).poll_write(cx, self.refusal))?;
            if written == 0 {
                break;
            }
            self.refusal = &self.refusal[written..];
        }
        ready!(Pin::new(&mut self.io).poll_flush(cx))?;
        let _ = ready!(Pin::new(&mut self.io).poll_shutdown(cx));
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "request head refused",
        )))
    }

    fn refuse(&mut self, answer: &'static [u8], cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.phase = Phase::Refusing;
        self.refusal = answer;
        self.poll_refuse(cx)
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncRead for Guarded<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.phase == Phase::Refusing {
            return this.poll_refuse(cx);
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => match this.scan(&buf.filled()[before..]) {
                Some(answer) => {
                    buf.set_filled(before);
                    this.refuse(answer, cx)
                }
                None => Poll::Ready(Ok(())),
            },
            Poll::Ready(Err(error)) => Poll::Ready(Err(error)),
            Poll::Pending => {
                if this.phase == Phase::Head && this.deadline.as_mut().poll(cx).is_ready() {
                    return this.refuse(head_timeout(), cx);
                }
                Poll::Pending
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
        if this.phase == Phase::Request {
            this.responded = true;
        }
        Pin::new(&mut this.io).poll_write(cx, data)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.phase == Phase::Request {
            this.responded = true;
        }
        Pin::new(&mut this.io).poll_write_vectored(cx, bufs)
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
    async fn a_complete_head_passes_and_a_body_is_never_scanned() {
        let (client, server) = tokio::io::duplex(1024);
        let mut guarded = Guarded::new(server, LIMITS);
        let mut client = client;
        client
            .write_all(b"POST / HTTP/1.1\r\nHost: x\r\n\r\nbody with \r\n\r\n and more than sixty-four bytes of anything at all")
            .await
            .expect("written");
        let mut read = vec![0; 512];
        let n = guarded.read(&mut read).await.expect("read");
        assert!(n > 30, "{n}");
        assert_eq!(guarded.phase, Phase::Request);
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
        client.write_all(b"GET /again HTT").await.expect("written");
        let part = guarded
            .read(&mut read)
            .await
            .expect("part of the next head");
        assert!(part > 0);
        assert_eq!(guarded.phase, Phase::Head);
    }
}
