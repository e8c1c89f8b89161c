//! Refusing a head that cannot be taken: Levee's JSON error, in the dialect
//! the bytes that arrived name, written whole before the connection closes.

use super::head::Refusal;
use super::{date, line, Conn, Settings};
use crate::http::h1wire::MAX_HEADERS;
use crate::http::respond::{should_retry, Why};
use tokio::io::{AsyncRead, AsyncWrite};

impl<IO: AsyncRead + AsyncWrite + Unpin> Conn<IO> {
    /// Answers a request the head of which could not be taken, and closes:
    /// Levee's JSON error in the dialect the request line's path (or an
    /// `anthropic-version` field in what arrived) names, so an SDK shows
    /// what was wrong instead of an empty body.
    pub(super) async fn refuse(&mut self, (refusal, why): Refusal, settings: &Settings) {
        let dialect = sniff_dialect(&self.read.buf);
        let row = refusal.row();
        let status = row.status;
        let message = if refusal == Why::HeadersTooLarge {
            format!(
                "levee: {why}: the limit is {} bytes (limits.max_header_bytes) and {MAX_HEADERS} fields",
                settings.max_header_bytes
            )
        } else {
            format!("levee: {why}")
        };
        let body = dialect.error_body(status.as_u16(), row.label, &message);
        self.out.clear();
        self.queue.clear();
        self.out.extend_from_slice(b"HTTP/1.1 ");
        self.out.extend_from_slice(status.as_str().as_bytes());
        self.out.extend_from_slice(b" ");
        self.out
            .extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
        self.out.extend_from_slice(b"\r\n");
        date::put(&mut self.out);
        line(&mut self.out, b"content-type", b"application/json");
        line(
            &mut self.out,
            b"x-should-retry",
            should_retry(row).as_bytes(),
        );
        line(&mut self.out, b"x-levee-reason", row.label.as_bytes());
        line(&mut self.out, b"x-levee-attempts", b"0");
        line(
            &mut self.out,
            b"content-length",
            body.len().to_string().as_bytes(),
        );
        self.out.extend_from_slice(b"connection: close\r\n\r\n");
        self.out.extend_from_slice(&body);
        let _ = std::future::poll_fn(|cx| self.poll_flush(cx)).await;
    }
}

/// The dialect of a request whose head was refused, from the bytes that
/// arrived: the request line's path, else an `anthropic-version` field.
fn sniff_dialect(buf: &[u8]) -> levee_wire::Dialect {
    use levee_wire::Dialect;
    let line = buf.split(|&b| b == b'\n').next().unwrap_or_default();
    let path = line.split(|&b| b == b' ').nth(1).unwrap_or_default();
    let path = std::str::from_utf8(path).unwrap_or_default();
    let path = path.split('?').next().unwrap_or_default();
    Dialect::of_path(path).unwrap_or_else(|| {
        let named = buf
            .windows(b"\nanthropic-version:".len())
            .any(|w| w.eq_ignore_ascii_case(b"\nanthropic-version:"));
        if named {
            Dialect::Anthropic
        } else {
            Dialect::OpenAi
        }
    })
}
