//! Change notification for the daemon: inotify on the input directories (mounted ConfigMaps and
//! Secrets change by an atomic `..data` symlink swap in their directory) and on the host
//! directories of the managed files (drift: a file deleted or edited by hand). Which events
//! complete an update is the pure `change::classify`; events that arrive while a sync runs wait
//! in the kernel's queue and are read together afterwards: at most one more sync, whatever
//! their number.
//!
//! The `inotify` crate's event stream: no thread of its own (tokio's reactor), and the exact
//! kernel masks, which `classify` needs to tell `close_write` from `modify`.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use futures::{FutureExt, StreamExt};
use inotify::{EventMask, EventStream, Inotify, WatchDescriptor, WatchMask};
use kube_anchor_core::change::{self, Event, IN_MOVED_FROM, IN_MOVED_TO, IN_Q_OVERFLOW, Reaction};

/// What every directory is watched for (reads and opens are never asked for: our own hashing
/// of every file would otherwise wake us up).
fn watch_mask() -> WatchMask {
    WatchMask::MODIFY
        | WatchMask::ATTRIB
        | WatchMask::CLOSE_WRITE
        | WatchMask::MOVED_FROM
        | WatchMask::MOVED_TO
        | WatchMask::CREATE
        | WatchMask::DELETE
        | WatchMask::DELETE_SELF
        | WatchMask::MOVE_SELF
        | WatchMask::ONLYDIR
}

/// What a watched directory is watched for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DirRole {
    /// It holds inputs.
    pub input: bool,
    /// The names of the managed host files in it.
    pub managed: BTreeSet<OsString>,
}

impl DirRole {
    pub fn input() -> Self {
        Self {
            input: true,
            managed: BTreeSet::new(),
        }
    }
}

struct Watched {
    wd: WatchDescriptor,
    role: DirRole,
}

pub struct DirWatcher {
    events: EventStream<Vec<u8>>,
    dirs: BTreeMap<PathBuf, Watched>,
    /// The last `IN_MOVED_FROM` (watch, cookie, name), to pair with its `IN_MOVED_TO`.
    moved_from: Option<(WatchDescriptor, u32, OsString)>,
    /// What the events read since [`DirWatcher::take_touched`] touched.
    touched: Touched,
}

/// What events touched: whatever the daemon keeps of what it read or observed there is stale.
/// Every event counts, also one that asks for no sync (a write in progress, a chmod of an
/// input): the sync it waits for must not take the old read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Touched {
    /// Something changed in an input directory.
    pub inputs: bool,
    /// The real paths of the managed files events named.
    pub managed: BTreeSet<PathBuf>,
    /// Events were lost (the queue overflowed) or a watched directory went away: anything may
    /// have changed.
    pub everything: bool,
}

/// What a sync must read afresh rather than take from the syncs before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stale {
    /// The inputs and every managed file.
    Everything,
    /// The inputs (when `inputs`) and the managed files named.
    Some { inputs: bool, managed: BTreeSet<PathBuf> },
}

impl Touched {
    /// What is stale: all when events were lost or the periodic resync is due; the inputs also
    /// while an input directory is not watched (a change there would go unseen).
    pub fn stale(self, resync_due: bool, inputs_watched: bool) -> Stale {
        if self.everything || resync_due {
            return Stale::Everything;
        }
        Stale::Some {
            inputs: self.inputs || !inputs_watched,
            managed: self.managed,
        }
    }
}

impl DirWatcher {
    /// Needs a tokio runtime (the descriptor is registered with its reactor).
    pub fn new() -> io::Result<Self> {
        // Room for many records; one is at most 16 bytes plus NAME_MAX + 1.
        let events = Inotify::init()?.into_event_stream(vec![0; 4096])?;
        Ok(Self {
            events,
            dirs: BTreeMap::new(),
            moved_from: None,
            touched: Touched::default(),
        })
    }

    /// Whether every one of `dirs` is watched now (a change in one that is not goes unseen).
    pub fn watches_all<'a>(&self, mut dirs: impl Iterator<Item = &'a PathBuf>) -> bool {
        dirs.all(|d| self.dirs.contains_key(d))
    }

    /// Reads the events already queued, without waiting, and returns what every event read
    /// since the last call touched.
    pub fn take_touched(&mut self) -> Touched {
        while let Some(next) = self.events.next().now_or_never() {
            match next {
                Some(Ok(event)) => {
                    self.handle(event);
                }
                // Nothing can be known of what was lost.
                _ => {
                    self.touched.everything = true;
                    break;
                }
            }
        }
        std::mem::take(&mut self.touched)
    }

    /// Makes the watched directories exactly `wanted` (non-recursive watches), with their roles.
    /// Missing directories are skipped and tried again on the next call; a directory deleted or
    /// moved away is watched again once its watch is gone. Returns whether a watch was added: a
    /// change there before this call went unseen.
    pub fn ensure(&mut self, wanted: BTreeMap<PathBuf, DirRole>) -> bool {
        let gone: Vec<PathBuf> = self.dirs.keys().filter(|d| !wanted.contains_key(*d)).cloned().collect();
        for dir in gone {
            if let Some(w) = self.dirs.remove(&dir) {
                self.release(w.wd);
            }
        }
        let mut added = false;
        for (dir, role) in wanted {
            if let Some(w) = self.dirs.get_mut(&dir) {
                w.role = role;
                continue;
            }
            match self.events.watches().add(&dir, watch_mask()) {
                Ok(wd) => {
                    self.dirs.insert(dir, Watched { wd, role });
                    added = true;
                }
                Err(e) => tracing::debug!(dir = %dir.display(), error = %e, "not watching (yet)"),
            }
        }
        added
    }

    /// Returns once an event asks for a sync, having read every event queued so far (they are
    /// all covered by that sync). Cancel-safe: an event is classified as soon as it is read.
    pub async fn changed(&mut self) -> io::Result<()> {
        loop {
            let first = self
                .events
                .next()
                .await
                .ok_or_else(|| io::Error::other("inotify stream ended"))??;
            let mut sync = self.handle(first);
            // Everything already queued, without waiting for more.
            while let Some(next) = self.events.next().now_or_never() {
                let event = next.ok_or_else(|| io::Error::other("inotify stream ended"))??;
                sync |= self.handle(event);
            }
            if sync {
                return Ok(());
            }
        }
    }

    /// Drops the kernel watch `wd` unless another watched path still uses it (two paths to one
    /// directory share a watch).
    fn release(&mut self, wd: WatchDescriptor) {
        if !self.dirs.values().any(|w| w.wd == wd) {
            // An already removed watch is EINVAL: nothing to do.
            let _ = self.events.watches().remove(wd);
        }
    }

    /// Classifies one event; returns whether it asks for a sync.
    fn handle(&mut self, raw: inotify::Event<OsString>) -> bool {
        let mask = raw.mask.bits();
        let name = raw.name.as_deref().map(|n| n.as_bytes()).unwrap_or_default();
        let moved_from = match (mask & IN_MOVED_TO != 0, &self.moved_from) {
            (true, Some((wd, cookie, from))) if *wd == raw.wd && *cookie == raw.cookie => Some(from.clone()),
            _ => None,
        };
        if mask & IN_MOVED_FROM != 0 {
            self.moved_from = Some((raw.wd.clone(), raw.cookie, raw.name.clone().unwrap_or_default()));
        }
        let mut dir = None;
        let mut input = false;
        let mut managed = false;
        for (path, w) in self.dirs.iter().filter(|(_, w)| w.wd == raw.wd) {
            dir.get_or_insert(path);
            input |= w.role.input;
            managed |= raw.name.as_ref().is_some_and(|n| w.role.managed.contains(n));
        }
        if dir.is_none() && mask & IN_Q_OVERFLOW == 0 {
            return false; // a watch removed meanwhile
        }
        self.touched.inputs |= input;
        if mask & IN_Q_OVERFLOW != 0 {
            self.touched.everything = true;
        }
        // The managed files named: the event's own name and, for a rename, the name it had.
        for name in [raw.name.as_ref(), moved_from.as_ref()].into_iter().flatten() {
            for (path, w) in self.dirs.iter().filter(|(_, w)| w.wd == raw.wd) {
                if w.role.managed.contains(name) {
                    self.touched.managed.insert(path.join(name));
                }
            }
        }
        let event = Event {
            mask,
            name,
            moved_from: moved_from.as_ref().map(|n| n.as_bytes()),
            input,
            managed,
        };
        let action = match change::classify(&event) {
            Reaction::SyncIfSymlink => {
                let entry = dir
                    .expect("checked above")
                    .join(raw.name.as_deref().unwrap_or_default());
                if std::fs::symlink_metadata(entry).is_ok_and(|m| m.file_type().is_symlink()) {
                    Reaction::Sync
                } else {
                    Reaction::Ignore
                }
            }
            a => a,
        };
        tracing::trace!(mask = format_args!("{mask:#x}"), name = %String::from_utf8_lossy(name), ?action, "inotify");
        if raw
            .mask
            .intersects(EventMask::IGNORED | EventMask::DELETE_SELF | EventMask::MOVE_SELF)
        {
            // The directory is gone or elsewhere: watch its path again at the next sync.
            self.touched.everything = true;
            let stale: Vec<PathBuf> = self
                .dirs
                .iter()
                .filter(|(_, w)| w.wd == raw.wd)
                .map(|(p, _)| p.clone())
                .collect();
            for path in stale {
                self.dirs.remove(&path);
            }
            self.release(raw.wd);
        }
        action == Reaction::Sync
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_read_afresh() {
        let named: BTreeSet<PathBuf> = [PathBuf::from("/h/f.conf")].into();
        let touched = |inputs, everything| Touched {
            inputs,
            managed: named.clone(),
            everything,
        };
        let some = |inputs| Stale::Some {
            inputs,
            managed: named.clone(),
        };
        // (inputs touched, events lost, resync due, inputs watched) -> stale
        let table = [
            ((false, false, false, true), some(false)),
            ((true, false, false, true), some(true)),
            ((false, false, false, false), some(true)),
            ((false, true, false, true), Stale::Everything),
            ((false, false, true, true), Stale::Everything),
            ((true, true, true, false), Stale::Everything),
        ];
        for ((inputs, lost, resync, watched), want) in table {
            assert_eq!(
                touched(inputs, lost).stale(resync, watched),
                want,
                "{inputs} {lost} {resync} {watched}"
            );
        }
    }

    /// A temp dir with an input directory `in` and a host directory `host` holding `managed`,
    /// and the roles to watch them with.
    fn input_and_host(managed: &[&str]) -> (tempfile::TempDir, PathBuf, PathBuf, BTreeMap<PathBuf, DirRole>) {
        let dir = tempfile::tempdir().unwrap();
        let input_dir = dir.path().join("in");
        let host_dir = dir.path().join("host");
        std::fs::create_dir_all(&input_dir).unwrap();
        std::fs::create_dir_all(&host_dir).unwrap();
        let host = DirRole {
            input: false,
            managed: managed.iter().map(OsString::from).collect(),
        };
        let wanted = [(input_dir.clone(), DirRole::input()), (host_dir.clone(), host)].into();
        (dir, input_dir, host_dir, wanted)
    }

    /// What the events so far touched, once the runtime has seen them arrive.
    async fn touched(w: &mut DirWatcher) -> Touched {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        w.take_touched()
    }

    #[tokio::test]
    async fn every_event_says_what_it_touched_also_one_that_asks_for_no_sync() {
        use std::io::Write;
        let (dir, input_dir, host_dir, wanted) = input_and_host(&["f.conf", "g.conf"]);
        let mut w = DirWatcher::new().unwrap();
        w.ensure(wanted.clone());
        assert!(w.watches_all(wanted.keys()));
        assert!(!w.watches_all([dir.path().join("elsewhere")].iter()));
        assert_eq!(touched(&mut w).await, Touched::default(), "nothing yet");

        // Another component's file, and a write in progress in an input directory (no sync).
        std::fs::write(host_dir.join("other.yaml"), "y").unwrap();
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(input_dir.join("plain"))
            .unwrap();
        let t = touched(&mut w).await;
        assert!(t.inputs);
        assert!(t.managed.is_empty() && !t.everything);
        assert_eq!(touched(&mut w).await, Touched::default(), "taken");

        // A managed file deleted, another written in place, our own commit over a third name.
        std::fs::write(host_dir.join("f.conf"), "x").unwrap();
        std::fs::write(host_dir.join("g.conf"), "x").unwrap();
        touched(&mut w).await;
        std::fs::remove_file(host_dir.join("f.conf")).unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(host_dir.join("g.conf"))
            .unwrap()
            .write_all(b"more")
            .unwrap();
        let t = touched(&mut w).await;
        assert_eq!(t.managed, [host_dir.join("f.conf"), host_dir.join("g.conf")].into());
        assert!(!t.inputs && !t.everything);

        // A watched directory gone: anything may have changed.
        std::fs::remove_dir_all(&host_dir).unwrap();
        assert!(touched(&mut w).await.everything);
        assert!(!w.watches_all(wanted.keys()));
    }

    #[tokio::test]
    async fn a_configmap_swap_wakes_once_and_our_own_commit_not_at_all() {
        let (_dir, input_dir, host_dir, wanted) = input_and_host(&["f.conf"]);
        let mut w = DirWatcher::new().unwrap();
        assert!(w.ensure(wanted.clone()));
        assert!(!w.ensure(wanted.clone()), "nothing new to watch");
        let quick = std::time::Duration::from_millis(200);

        // Our own commit: temp file written, renamed over the target.
        let tmp = host_dir.join(".f.conf.Ab12Z.kube-anchor.tmp");
        std::fs::write(&tmp, "x").unwrap();
        std::fs::rename(&tmp, host_dir.join("f.conf")).unwrap();
        // Another component's file.
        std::fs::write(host_dir.join("other.yaml"), "y").unwrap();
        // The steps of a volume update before the swap.
        std::fs::create_dir(input_dir.join("..2026_11_22_00_00_01.1")).unwrap();
        std::os::unix::fs::symlink("..2026_11_22_00_00_01.1", input_dir.join("..data_tmp")).unwrap();
        assert!(
            tokio::time::timeout(quick, w.changed()).await.is_err(),
            "woke for nothing"
        );

        std::fs::rename(input_dir.join("..data_tmp"), input_dir.join("..data")).unwrap();
        tokio::time::timeout(quick, w.changed())
            .await
            .expect("the swap")
            .unwrap();

        std::fs::remove_file(host_dir.join("f.conf")).unwrap();
        tokio::time::timeout(quick, w.changed())
            .await
            .expect("a deletion")
            .unwrap();

        // Many changes queued while "syncing": one wake-up covers them all.
        for i in 0..50 {
            std::fs::write(input_dir.join("plain"), format!("{i}")).unwrap();
        }
        tokio::time::timeout(quick, w.changed())
            .await
            .expect("the writes")
            .unwrap();
        assert!(tokio::time::timeout(quick, w.changed()).await.is_err(), "folded");

        // A watched directory deleted and recreated is watched again.
        std::fs::remove_dir_all(&input_dir).unwrap();
        tokio::time::timeout(quick, w.changed())
            .await
            .expect("dir gone")
            .unwrap();
        std::fs::create_dir_all(&input_dir).unwrap();
        let _ = tokio::time::timeout(quick, w.changed()).await;
        assert!(w.ensure(wanted.clone()), "watched again");
        std::fs::write(input_dir.join("plain"), "again").unwrap();
        tokio::time::timeout(quick, w.changed())
            .await
            .expect("the new dir")
            .unwrap();
    }
}
