//! Reading a whole body into one `Bytes`, up to a limit.
//!
//! `http_body_util`'s `Limited::collect` gathers frames in a list and joins
//! them at the end: a list allocated for every body, and for the one-frame
//! body that a request or a plain answer usually is, bookkeeping around a
//! buffer that is already whole. Here the first frame is kept as it is and
//! returned without a copy when it is the only one; later frames are
//! appended to one buffer. Trailers are read and dropped.

use crate::error::BoxError;
use bytes::{Bytes, BytesMut};
use http_body::Body;
use std::future::Future;

/// Why a body could not be read whole.
#[derive(Debug)]
pub enum CollectError {
    /// More than the limit arrived (or was declared).
    TooLarge,
    /// The body failed before its end.
    Broken,
}

/// [`collect_limited`] by `until`: `Err` past it, else what was read and
/// whether the read had to wait. A body already whole (a small one that
/// came with its head) is read without arming a timer, which costs ~600
/// instructions to insert and remove.
pub async fn collect_until<B>(
    body: B,
    limit: usize,
    until: tokio::time::Instant,
) -> Result<(Result<Bytes, CollectError>, bool), tokio::time::error::Elapsed>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let mut read = std::pin::pin!(collect_limited(body, limit));
    let at_once = std::future::poll_fn(|cx| std::task::Poll::Ready(read.as_mut().poll(cx))).await;
    match at_once {
        std::task::Poll::Ready(read) => Ok((read, false)),
        std::task::Poll::Pending => Ok((tokio::time::timeout_at(until, read).await?, true)),
    }
}

/// Reads `body` to its end; more than `limit` bytes is an error.
pub async fn collect_limited<B>(body: B, limit: usize) -> Result<Bytes, CollectError>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    if body.size_hint().exact().is_some_and(|n| n > limit as u64) {
        return Err(CollectError::TooLarge);
    }
    let mut body = std::pin::pin!(body);
    let mut first: Option<Bytes> = None;
    let mut joined: Option<BytesMut> = None;
    let mut len = 0usize;
    // A body known to be longer than the limit (a chunk that declared
    // more) is refused before waiting for its bytes.
    // A body known to be longer than the limit (a chunk that declared
    // more than fits) is refused before waiting for its bytes.
    loop {
        let room = (limit - len.min(limit)) as u64;
        let frame = std::future::poll_fn(|cx| {
            if body.size_hint().lower() > room {
                return std::task::Poll::Ready(Some(Err(CollectError::TooLarge)));
            }
            body.as_mut()
                .poll_frame(cx)
                .map(|f| f.map(|r| r.map_err(|_| CollectError::Broken)))
        })
        .await;
        let Some(frame) = frame else { break };
        let frame = frame?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        len = len.saturating_add(data.len());
        if len > limit {
            return Err(CollectError::TooLarge);
        }
        if let Some(buf) = joined.as_mut() {
            buf.extend_from_slice(&data);
        } else if let Some(head) = first.take() {
            let hint = usize::try_from(body.size_hint().lower()).unwrap_or(0);
            let mut buf = BytesMut::with_capacity((len + hint).min(limit));
            buf.extend_from_slice(&head);
            buf.extend_from_slice(&data);
            joined = Some(buf);
        } else if !data.is_empty() {
            first = Some(data);
        }
    }
    Ok(match joined {
        Some(buf) => buf.freeze(),
        None => first.unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body::Frame;
    use http_body_util::{Full, StreamBody};
    use std::convert::Infallible;

    /// A body of one data frame per part.
    fn frames(parts: &[&'static [u8]]) -> impl Body<Data = Bytes, Error = Infallible> {
        let v: Vec<Result<Frame<Bytes>, Infallible>> = parts
            .iter()
            .map(|p| Ok(Frame::data(Bytes::from_static(p))))
            .collect();
        StreamBody::new(futures_util::stream::iter(v))
    }

    #[tokio::test]
    async fn one_frame_comes_back_as_it_was() {
        let data = Bytes::from_static(b"{\"model\":\"m\"}");
        let got = collect_limited(Full::new(data.clone()), 100).await.unwrap();
        assert_eq!(got, data);
        assert_eq!(got.as_ptr(), data.as_ptr(), "not copied");
    }

    #[tokio::test]
    async fn frames_are_joined_in_order_and_empty_ones_skipped() {
        let got = collect_limited(frames(&[b"", b"ab", b"", b"cd", b"e"]), 5)
            .await
            .unwrap();
        assert_eq!(&got[..], b"abcde");
        let got = collect_limited(frames(&[]), 5).await.unwrap();
        assert!(got.is_empty());
    }

    #[tokio::test]
    async fn more_than_the_limit_is_too_large() {
        let over = collect_limited(frames(&[b"ab", b"cd", b"ef"]), 5).await;
        assert!(matches!(over, Err(CollectError::TooLarge)));
        let declared = collect_limited(Full::new(Bytes::from_static(b"abcdef")), 5).await;
        assert!(matches!(declared, Err(CollectError::TooLarge)));
    }

    #[tokio::test]
    async fn a_failing_body_is_broken() {
        let v: Vec<Result<Frame<Bytes>, std::io::Error>> = vec![
            Ok(Frame::data(Bytes::from_static(b"ab"))),
            Err(std::io::Error::other("cut")),
        ];
        let body = StreamBody::new(futures_util::stream::iter(v));
        assert!(matches!(
            collect_limited(body, 10).await,
            Err(CollectError::Broken)
        ));
    }
}
