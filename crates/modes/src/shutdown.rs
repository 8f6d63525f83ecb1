//! Two-phase shutdown: the first SIGTERM or SIGINT asks the daemon to drain (readiness goes
//! false, the current step finishes, the process exits 0); a second one aborts: the daemon's
//! work is dropped where it waits and [`Aborted`] goes back to `main`, which exits 143.
//! A signal never deletes anything: removal is `pre-stop`'s job, behind its own guard.

use std::future::Future;

use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::{oneshot, watch};

/// Exit code of an aborted run (128 + SIGTERM).
pub(crate) const ABORT_EXIT_CODE: u8 = 143;

/// A second signal arrived while the daemon was draining.
#[derive(Debug, thiserror::Error)]
#[error("aborted by a second signal ({signal}) while draining")]
pub(crate) struct Aborted {
    pub(crate) signal: &'static str,
}

/// What a second signal ends: see [`Abort::around`].
pub(crate) struct Abort(oneshot::Receiver<&'static str>);

impl Abort {
    /// Runs `work` to its end, or until a second signal, which drops it where it waits.
    pub(crate) async fn around<T>(self, work: impl Future<Output = T>) -> Result<T, Aborted> {
        let second = async {
            match self.0.await {
                Ok(signal) => signal,
                // The signal task never ends before a second signal; never abort without one.
                Err(_) => std::future::pending().await,
            }
        };
        tokio::select! {
            done = work => Ok(done),
            signal = second => Err(Aborted { signal }),
        }
    }
}

/// `draining` turns true on the first signal; the [`Abort`] fires on the second.
pub(crate) fn install() -> std::io::Result<(watch::Receiver<bool>, Abort)> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let (drain_tx, drain_rx) = watch::channel(false);
    let (abort_tx, abort_rx) = oneshot::channel();
    tokio::spawn(async move {
        let next = async |term: &mut Signal, int: &mut Signal| {
            tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
            }
        };
        let first = next(&mut term, &mut int).await;
        tracing::info!(
            signal = first,
            "draining: readiness is now false; a second signal aborts"
        );
        let _ = drain_tx.send(true);
        let second = next(&mut term, &mut int).await;
        tracing::warn!(signal = second, "second signal: aborting");
        let _ = abort_tx.send(second);
    });
    Ok((drain_rx, Abort(abort_rx)))
}
