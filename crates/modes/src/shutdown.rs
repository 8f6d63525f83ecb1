//! Two-phase shutdown: the first SIGTERM or SIGINT asks the daemon to drain (readiness goes
//! false, the current step finishes, the process exits 0); a second one aborts at once.
//! A signal never deletes anything: removal is `pre-stop`'s job, behind its own guard.

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

/// Exit code of an aborted run (128 + SIGTERM).
pub(crate) const ABORT_EXIT_CODE: i32 = 143;

/// Resolves `draining` to true on the first signal; exits the process on the second.
pub(crate) fn install() -> std::io::Result<watch::Receiver<bool>> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        let next = async |term: &mut tokio::signal::unix::Signal, int: &mut tokio::signal::unix::Signal| {
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
        let _ = tx.send(true);
        let second = next(&mut term, &mut int).await;
        tracing::warn!(signal = second, "second signal: aborting");
        std::process::exit(ABORT_EXIT_CODE);
    });
    Ok(rx)
}
