//! Change notification for the daemon: inotify on the input directories (mounted ConfigMaps and
//! Secrets change by an atomic `..data` symlink swap in their directory) and on the host
//! directories of the managed files (drift: a file deleted or edited by hand). Every event just
//! asks for a sync; [`debounce`] folds bursts into one.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;

pub struct DirWatcher {
    watcher: notify::RecommendedWatcher,
    watched: BTreeSet<PathBuf>,
}

impl DirWatcher {
    /// Events are delivered as `()` on the returned receiver.
    pub fn new() -> notify::Result<(Self, mpsc::Receiver<()>)> {
        let (tx, rx) = mpsc::channel(1);
        let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            // Reads (our own hashing of every file) are not changes; reacting to them would loop.
            if event.is_ok_and(|e| !matches!(e.kind, notify::EventKind::Access(_))) {
                // A full channel already holds a pending wake-up: nothing is lost.
                let _ = tx.try_send(());
            }
        })?;
        Ok((
            Self {
                watcher,
                watched: BTreeSet::new(),
            },
            rx,
        ))
    }

    /// Watches each of `dirs` not watched yet (non-recursively). Missing directories are skipped
    /// and tried again on the next call; a directory deleted and recreated is watched again too.
    /// Returns whether a watch was added: a change there before this call went unseen.
    pub fn ensure<'a>(&mut self, dirs: impl IntoIterator<Item = &'a Path>) -> bool {
        let mut added = false;
        for dir in dirs {
            if self.watched.contains(dir) && dir.is_dir() {
                continue;
            }
            let _ = self.watcher.unwatch(dir);
            match self.watcher.watch(dir, RecursiveMode::NonRecursive) {
                Ok(()) => {
                    self.watched.insert(dir.to_path_buf());
                    added = true;
                }
                Err(e) => {
                    self.watched.remove(dir);
                    tracing::debug!(dir = %dir.display(), error = %e, "not watching (yet)");
                }
            }
        }
        added
    }
}

/// After a first wake-up, waits until `quiet` passes with no further one, or `max` in all.
pub async fn debounce(rx: &mut mpsc::Receiver<()>, quiet: Duration, max: Duration) {
    let deadline = tokio::time::Instant::now() + max;
    loop {
        let until = (tokio::time::Instant::now() + quiet).min(deadline);
        match tokio::time::timeout_at(until, rx.recv()).await {
            Ok(Some(())) if tokio::time::Instant::now() < deadline => continue,
            _ => return,
        }
    }
}
