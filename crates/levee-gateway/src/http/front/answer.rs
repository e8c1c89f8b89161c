//! Writing the answer: its status line and header section, its body framed
//! by length, chunked or by the close, and the queue of bytes the
//! connection writes in as few system calls as it can.

use super::{date, line, Conn};
use crate::http::rawfields::RawFields;
use crate::http::respond::{Body, Stamp};
use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName};
use http::{Response, StatusCode, Version};
use http_body::Body as _;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite};

/// Answer data up to this size is copied behind what is already queued and
/// written with it; larger pieces are written from their own buffer.
const INLINE: usize = 16 * 1024;

impl<IO: AsyncRead + AsyncWrite + Unpin> Conn<IO> {
    /// Writes everything queued.
    pub(super) fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some(front) = self.queue.front_mut() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, front))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            if n == front.len() {
                self.queue.pop_front();
            } else {
                bytes::Buf::advance(front, n);
            }
        }
        while !self.out.is_empty() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.out))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            bytes::Buf::advance(&mut self.out, n);
        }
        Pin::new(&mut self.io).poll_flush(cx)
    }

    /// Queues answer bytes: copied behind `out` when small, else as a piece
    /// of their own (an 8.7 MB replayed answer is not copied).
    fn put(&mut self, data: Bytes) {
        if data.len() <= INLINE {
            self.out.extend_from_slice(&data);
        } else {
            if !self.out.is_empty() {
                self.queue.push_back(self.out.split().freeze());
            }
            self.queue.push_back(data);
        }
    }

    /// Writes the answer; `Ok(true)` when the connection can take another
    /// request.
    pub(super) async fn answer(
        &mut self,
        resp: Response<Body>,
        version: Version,
        head_only: bool,
        keep_alive: bool,
    ) -> io::Result<bool> {
        let (parts, mut body) = resp.into_parts();
        let raw = body.take_raw();
        let no_body = head_only
            || parts.status.is_informational()
            || parts.status == StatusCode::NO_CONTENT
            || parts.status == StatusCode::NOT_MODIFIED;
        let framing = if no_body {
            // A `HEAD` answer declares the length a `GET` would have had.
            let length = declared_length(&parts.headers).or(body.size_hint().exact());
            Out::Nothing(length.filter(|_| head_only))
        } else {
            Out::choose(&parts.headers, &body, version)
        };
        let keep_alive = keep_alive && !matches!(framing, Out::Close);
        self.encode_head(&parts, &raw, body.stamp(), framing, version, keep_alive);
        drop(raw);
        if no_body {
            std::future::poll_fn(|cx| self.poll_flush(cx)).await?;
            return Ok(keep_alive);
        }
        let mut body = std::pin::pin!(body);
        let mut framing = framing;
        let mut finished = false;
        std::future::poll_fn(|cx| loop {
            if finished || self.out.len() >= INLINE || !self.queue.is_empty() {
                ready!(self.poll_flush(cx))?;
                if finished {
                    return Poll::Ready(Ok(()));
                }
            }
            match body.as_mut().poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        self.frame(&mut framing, data)?;
                    }
                }
                Poll::Ready(Some(Err(never))) => match never {},
                Poll::Ready(None) => {
                    framing.end(&mut self.out)?;
                    finished = true;
                }
                Poll::Pending => {
                    if let Poll::Ready(Err(e)) = self.poll_flush(cx) {
                        return Poll::Ready(Err(e));
                    }
                    // The caller leaving ends a stream it can no longer read.
                    if self.read.buf.is_empty() && !self.read_closed {
                        match self.poll_fill(cx) {
                            Poll::Ready(Ok(0)) => {
                                return Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into()))
                            }
                            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                            Poll::Ready(Ok(_)) | Poll::Pending => {}
                        }
                    }
                    return Poll::Pending;
                }
            }
        })
        .await?;
        Ok(keep_alive)
    }

    /// Queues one data frame of the answer in its framing.
    fn frame(&mut self, framing: &mut Out, data: Bytes) -> io::Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        match framing {
            Out::Length(left) => {
                if data.len() as u64 > *left {
                    // More than the answer declared: the caller would read
                    // the excess as the next answer.
                    return Err(io::Error::other(
                        "answer body longer than its content-length",
                    ));
                }
                *left -= data.len() as u64;
                self.put(data);
            }
            Out::Chunked => {
                let mut line = [0u8; 18];
                let hex = hex_line(data.len(), &mut line);
                self.out.extend_from_slice(hex);
                self.put(data);
                self.out.extend_from_slice(b"\r\n");
            }
            Out::Close => self.put(data),
            Out::Nothing(_) => {}
        }
        Ok(())
    }

    /// The status line and header section.
    fn encode_head(
        &mut self,
        parts: &http::response::Parts,
        raw: &RawFields,
        stamp: &Stamp,
        framing: Out,
        version: Version,
        keep_alive: bool,
    ) {
        let out = &mut self.out;
        out.reserve(256);
        out.extend_from_slice(b"HTTP/1.1 ");
        out.extend_from_slice(parts.status.as_str().as_bytes());
        out.extend_from_slice(b" ");
        out.extend_from_slice(
            parts
                .status
                .canonical_reason()
                .unwrap_or("<unknown status code>")
                .as_bytes(),
        );
        out.extend_from_slice(b"\r\n");
        let mut dated = false;
        for (name, value) in &parts.headers {
            if !is_framing(name) {
                line(out, name.as_str().as_bytes(), value.as_bytes());
                dated |= name == header::DATE;
            }
        }
        out.extend_from_slice(raw.lines());
        stamp.write(out);
        if !dated && !raw.dated() {
            date::put(out);
        }
        match framing {
            Out::Length(n) | Out::Nothing(Some(n)) => {
                let mut digits = itoa::Buffer::new();
                line(out, b"content-length", digits.format(n).as_bytes());
            }
            Out::Chunked => line(out, b"transfer-encoding", b"chunked"),
            Out::Close | Out::Nothing(None) => {}
        }
        if !keep_alive {
            line(out, b"connection", b"close");
        } else if version == Version::HTTP_10 {
            line(out, b"connection", b"keep-alive");
        }
        out.extend_from_slice(b"\r\n");
    }
}

/// A chunk-size line for `len` bytes (`1a2b\r\n`).
fn hex_line(len: usize, line: &mut [u8; 18]) -> &[u8] {
    use crate::hex::HEX;
    let mut at = 16;
    let mut n = len;
    loop {
        at -= 1;
        line[at] = HEX[n & 0xf];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    line[16] = b'\r';
    line[17] = b'\n';
    &line[at..]
}

/// The answer's fields the connection writes itself.
fn is_framing(name: &HeaderName) -> bool {
    name == header::CONTENT_LENGTH
        || name == header::TRANSFER_ENCODING
        || name == header::CONNECTION
        || name.as_str() == "keep-alive"
}

/// How an answer's body is framed on the wire.
#[derive(Debug, Clone, Copy)]
enum Out {
    /// This many bytes still to come (`content-length`).
    Length(u64),
    Chunked,
    /// Until the connection closes (HTTP/1.0 callers, length unknown).
    Close,
    /// No body (`HEAD`, `204`, `304`, `1xx`); a `HEAD` answer's length.
    Nothing(Option<u64>),
}

impl Out {
    fn choose(headers: &HeaderMap, body: &Body, version: Version) -> Out {
        if let Some(n) = declared_length(headers) {
            return Out::Length(n);
        }
        if let Some(n) = body.size_hint().exact() {
            return Out::Length(n);
        }
        if version == Version::HTTP_11 {
            Out::Chunked
        } else {
            Out::Close
        }
    }

    /// The end of the body: the chunked terminator, or a check that the
    /// declared length was all sent.
    fn end(self, out: &mut BytesMut) -> io::Result<()> {
        match self {
            Out::Chunked => out.extend_from_slice(b"0\r\n\r\n"),
            Out::Length(left) if left > 0 => {
                return Err(io::Error::other(
                    "answer body shorter than its content-length",
                ))
            }
            _ => {}
        }
        Ok(())
    }
}

fn declared_length(headers: &HeaderMap) -> Option<u64> {
    crate::http::h1wire::field(headers, &header::CONTENT_LENGTH)
        .and_then(|v| crate::http::h1wire::parse_decimal(v.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_size_lines_are_lowercase_hex() {
        let mut line = [0u8; 18];
        assert_eq!(hex_line(0, &mut line), b"0\r\n");
        assert_eq!(hex_line(26, &mut line), b"1a\r\n");
        assert_eq!(hex_line(usize::MAX, &mut line), b"ffffffffffffffff\r\n");
    }
}
