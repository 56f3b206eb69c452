//! The machine sleeps: every answer in flight when the provider is put to
//! sleep goes silent for good, as a stream does across a laptop's suspend
//! (the peer's or a NAT's state is gone: no byte and no FIN ever comes
//! again, a half-open socket). Answers started after the sleep are served as
//! usual, so an agent that detects the dead stream and retries recovers.

use axum::body::Body;
use axum::response::Response;
use futures_util::StreamExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Wrap `resp`'s body: it passes bytes until the sleep count moves past
/// the one it started with, then holds the connection open and silent until
/// shutdown (`cancel`), when it ends; an answer so silenced is counted in
/// `silenced`.
pub(super) fn gate(
    resp: Response,
    (sleeps, silenced): (watch::Receiver<u64>, Arc<AtomicU64>),
    cancel: CancellationToken,
) -> Response {
    let (parts, body) = resp.into_parts();
    let started = *sleeps.borrow();
    let stream = body.into_data_stream();
    let gated = futures_util::stream::unfold(
        (stream, sleeps, cancel, silenced),
        move |(mut stream, mut sleeps, cancel, silenced)| async move {
            let asleep = |s: &watch::Receiver<u64>| *s.borrow() != started;
            let silence = || async {
                silenced.fetch_add(1, Ordering::SeqCst);
                cancel.cancelled().await;
            };
            if asleep(&sleeps) {
                silence().await;
                return None;
            }
            let item = tokio::select! {
                item = stream.next() => item?,
                _ = slept(&mut sleeps, started) => {
                    silence().await;
                    return None;
                }
            };
            // A chunk read as the sleep began is not sent either.
            if asleep(&sleeps) {
                silence().await;
                return None;
            }
            Some((item, (stream, sleeps, cancel, silenced)))
        },
    );
    Response::from_parts(parts, Body::from_stream(gated))
}

/// Until the sleep count moves past `started` (never, once the provider is
/// gone).
async fn slept(sleeps: &mut watch::Receiver<u64>, started: u64) {
    loop {
        if *sleeps.borrow_and_update() != started {
            return;
        }
        if sleeps.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use std::time::Duration;

    fn slow_body() -> Response {
        let chunks = futures_util::stream::iter(0..100).then(|i| async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            Ok::<_, std::io::Error>(Bytes::from(format!("{i};")))
        });
        Response::new(Body::from_stream(chunks))
    }

    /// Bytes pass until the sleep; then nothing, and the body stays open
    /// (no end) until shutdown ends it.
    #[tokio::test]
    async fn an_answer_in_flight_goes_silent_at_the_sleep_and_stays_open() {
        let (tx, rx) = watch::channel(0u64);
        let cancel = CancellationToken::new();
        let silenced = Arc::new(AtomicU64::new(0));
        let mut body = gate(slow_body(), (rx.clone(), silenced.clone()), cancel.clone())
            .into_body()
            .into_data_stream();
        let first = body.next().await.unwrap().unwrap();
        assert_eq!(&first[..], b"0;");
        tx.send_replace(1);
        let silent = tokio::time::timeout(Duration::from_millis(300), body.next()).await;
        assert!(
            silent.is_err(),
            "no byte and no end after the sleep: {silent:?}"
        );
        cancel.cancel();
        assert!(body.next().await.is_none(), "shutdown ends it");
        assert_eq!(
            silenced.load(Ordering::SeqCst),
            1,
            "the silenced answer is counted"
        );
        // An answer started after the sleep is served in full, not counted.
        let after = gate(
            slow_body(),
            (rx, silenced.clone()),
            CancellationToken::new(),
        )
        .into_body();
        let all = axum::body::to_bytes(after, usize::MAX).await.unwrap();
        assert!(all.ends_with(b"99;"), "{all:?}");
        assert_eq!(silenced.load(Ordering::SeqCst), 1);
    }
}
