//! Change notification for the daemon: inotify on the input directories (mounted ConfigMaps and
//! Secrets change by an atomic `..data` symlink swap in their directory) and on the host
//! directories of the managed files (drift: a file deleted or edited by hand).
//!
//! No fixed debounce: [`classify`] (pure) picks the events that *complete* an update — the
//! `..data` rename, the `close_write` or `moved_to` of a plain file, a deletion or change of a
//! managed host file — and the daemon syncs at once on the first of them. Events that arrive
//! while a sync runs wait in the kernel's queue and are read together afterwards: at most one
//! more sync, whatever their number. Steps of an update in progress (the kubelet's timestamped
//! directory, `..data_tmp`, the creation of a plain file before it is written) and our own
//! writes (temp files and their rename over the target) ask for nothing.
//!
//! inotify is used directly (libc and tokio's `AsyncFd`): no thread of its own, and the exact
//! kernel masks, which [`classify`] needs to tell `close_write` from `modify`.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

use crate::hostfs::TEMP_SUFFIX;

pub const IN_MODIFY: u32 = 0x0000_0002;
pub const IN_ATTRIB: u32 = 0x0000_0004;
pub const IN_CLOSE_WRITE: u32 = 0x0000_0008;
pub const IN_MOVED_FROM: u32 = 0x0000_0040;
pub const IN_MOVED_TO: u32 = 0x0000_0080;
pub const IN_CREATE: u32 = 0x0000_0100;
pub const IN_DELETE: u32 = 0x0000_0200;
pub const IN_DELETE_SELF: u32 = 0x0000_0400;
pub const IN_MOVE_SELF: u32 = 0x0000_0800;
pub const IN_Q_OVERFLOW: u32 = 0x0000_4000;
pub const IN_IGNORED: u32 = 0x0000_8000;
pub const IN_ONLYDIR: u32 = 0x0100_0000;
pub const IN_ISDIR: u32 = 0x4000_0000;

/// What every directory is watched for (reads and opens are never asked for: our own hashing
/// of every file would otherwise wake us up).
const WATCH_MASK: u32 = IN_MODIFY
    | IN_ATTRIB
    | IN_CLOSE_WRITE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_CREATE
    | IN_DELETE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
    | IN_ONLYDIR;

/// The symlink whose atomic replacement publishes a new generation of a ConfigMap/Secret volume.
pub const DATA_LINK: &str = "..data";

/// One event as [`classify`] sees it: the kernel's mask and name plus what the watcher knows of
/// the directory it happened in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event<'a> {
    pub mask: u32,
    /// The entry's name in the watched directory (empty for events on the directory itself).
    pub name: &'a [u8],
    /// For `IN_MOVED_TO`: the name it had, when the matching `IN_MOVED_FROM` was in the same
    /// directory.
    pub moved_from: Option<&'a [u8]>,
    /// The directory holds inputs (the config, a source, a revision marker).
    pub input: bool,
    /// The directory holds managed host files and `name` is one of them.
    pub managed: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Action {
    Ignore,
    /// Sync only if the new entry is a symbolic link (a link is complete once created; a
    /// regular file is complete at its `close_write`). The watcher checks with `lstat`.
    SyncIfSymlink,
    Sync,
}

/// Whether an event completes a change the daemon must act on. Pure.
pub fn classify(e: &Event) -> Action {
    // Lost events, or the watch itself gone (directory deleted or moved): look again.
    if e.mask & (IN_Q_OVERFLOW | IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF) != 0 {
        return Action::Sync;
    }
    if e.name.is_empty() || is_our_temp(e.name) {
        return Action::Ignore;
    }
    // Our own commit: a temp file renamed over its target.
    if e.mask & IN_MOVED_TO != 0 && e.moved_from.is_some_and(is_our_temp) {
        return Action::Ignore;
    }
    let input = if !e.input {
        Action::Ignore
    } else if e.name.starts_with(b"..") {
        // The kubelet writes a new timestamped directory, points `..data_tmp` at it and renames
        // that over `..data`: only the last step publishes anything.
        if e.name == DATA_LINK.as_bytes() && e.mask & (IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_MOVED_FROM) != 0 {
            Action::Sync
        } else {
            Action::Ignore
        }
    } else {
        completes(e.mask, false)
    };
    let host = if e.managed {
        completes(e.mask, true)
    } else {
        Action::Ignore
    };
    input.max(host)
}

/// The rule for a plain entry: a rename, deletion or finished write completes a change; a
/// creation completes one only for a link (or, on the host, a directory in a file's place); an
/// `IN_MODIFY` waits for its `close_write`. A mode change matters only on the host.
fn completes(mask: u32, host: bool) -> Action {
    if mask & (IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE) != 0 || (host && mask & IN_ATTRIB != 0) {
        Action::Sync
    } else if mask & IN_CREATE != 0 {
        if host && mask & IN_ISDIR != 0 {
            Action::Sync
        } else if mask & IN_ISDIR != 0 {
            Action::Ignore
        } else {
            Action::SyncIfSymlink
        }
    } else {
        Action::Ignore
    }
}

/// `.<name>.<random>.kube-anchor.tmp`: the executor's temp files (see `hostfs`).
pub fn is_our_temp(name: &[u8]) -> bool {
    name.len() > 1 + TEMP_SUFFIX.len() && name.starts_with(b".") && name.ends_with(TEMP_SUFFIX.as_bytes())
}

/// One record of an inotify read buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawEvent<'a> {
    pub wd: i32,
    pub mask: u32,
    pub cookie: u32,
    /// Without the NUL padding.
    pub name: &'a [u8],
}

/// Splits an inotify read buffer into its records (`struct inotify_event`: wd, mask, cookie,
/// len, then `len` bytes of NUL-padded name). A truncated record ends the iteration. Pure.
pub fn parse_events(buf: &[u8]) -> impl Iterator<Item = RawEvent<'_>> {
    let mut rest = buf;
    std::iter::from_fn(move || {
        let header = rest.get(..16)?;
        let field = |i: usize| u32::from_ne_bytes(header[i..i + 4].try_into().expect("4 bytes"));
        let len = field(12) as usize;
        let name = rest.get(16..16usize.checked_add(len)?)?;
        rest = &rest[16 + len..];
        let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
        Some(RawEvent {
            wd: field(0) as i32,
            mask: field(4),
            cookie: field(8),
            name: &name[..end],
        })
    })
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
    wd: i32,
    role: DirRole,
}

pub struct DirWatcher {
    fd: AsyncFd<OwnedFd>,
    buf: Vec<u8>,
    state: State,
}

#[derive(Default)]
struct State {
    dirs: BTreeMap<PathBuf, Watched>,
    /// The last `IN_MOVED_FROM` (wd, cookie, name), to pair with its `IN_MOVED_TO`.
    moved_from: Option<(i32, u32, Vec<u8>)>,
}

impl DirWatcher {
    /// Needs a tokio runtime (the descriptor is registered with its reactor).
    pub fn new() -> io::Result<Self> {
        // SAFETY: inotify_init1 has no memory arguments; a non-negative result is a new fd.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just created and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: the descriptor is owned by the `AsyncFd` and never closed behind its back.
        let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }?;
        Ok(Self {
            fd,
            // Room for many records; one is at most 16 bytes plus NAME_MAX + 1.
            buf: vec![0; 4096],
            state: State::default(),
        })
    }

    /// Makes the watched directories exactly `wanted` (non-recursive watches), with their roles.
    /// Missing directories are skipped and tried again on the next call; a directory deleted or
    /// moved away is watched again once its watch is gone. Returns whether a watch was added: a
    /// change there before this call went unseen.
    pub fn ensure(&mut self, wanted: BTreeMap<PathBuf, DirRole>) -> bool {
        let fd = self.fd.as_raw_fd();
        let state = &mut self.state;
        let gone: Vec<PathBuf> = state
            .dirs
            .keys()
            .filter(|d| !wanted.contains_key(*d))
            .cloned()
            .collect();
        for dir in gone {
            if let Some(w) = state.dirs.remove(&dir) {
                state.release(fd, w.wd);
            }
        }
        let mut added = false;
        for (dir, role) in wanted {
            if let Some(w) = state.dirs.get_mut(&dir) {
                w.role = role;
                continue;
            }
            match add_watch(fd, &dir) {
                Ok(wd) => {
                    state.dirs.insert(dir, Watched { wd, role });
                    added = true;
                }
                Err(e) => tracing::debug!(dir = %dir.display(), error = %e, "not watching (yet)"),
            }
        }
        added
    }

    /// Returns once an event asks for a sync, having read every event queued so far (they are
    /// all covered by that sync). Cancel-safe: nothing read is kept across an `.await`.
    pub async fn changed(&mut self) -> io::Result<()> {
        loop {
            let mut guard = self.fd.readable().await?;
            let mut sync = false;
            loop {
                let fd = guard.get_inner().as_raw_fd();
                // SAFETY: reads at most `buf.len()` bytes into `buf`.
                let n = unsafe { libc::read(fd, self.buf.as_mut_ptr().cast(), self.buf.len()) };
                if n < 0 {
                    let e = io::Error::last_os_error();
                    match e.kind() {
                        io::ErrorKind::WouldBlock => {
                            guard.clear_ready();
                            break;
                        }
                        io::ErrorKind::Interrupted => continue,
                        _ => return Err(e),
                    }
                }
                sync |= self.state.handle(fd, &self.buf[..n as usize]);
            }
            if sync {
                return Ok(());
            }
        }
    }
}

fn add_watch(fd: RawFd, dir: &Path) -> io::Result<i32> {
    let path = CString::new(dir.as_os_str().as_bytes()).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // SAFETY: `path` is a valid NUL-terminated string for the duration of the call.
    let wd = unsafe { libc::inotify_add_watch(fd, path.as_ptr(), WATCH_MASK) };
    if wd < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(wd)
    }
}

impl State {
    /// Drops the kernel watch `wd` unless another watched path still uses it (two paths to one
    /// directory share a watch).
    fn release(&self, fd: RawFd, wd: i32) {
        if !self.dirs.values().any(|w| w.wd == wd) {
            // SAFETY: plain integer arguments; an already removed watch is EINVAL, ignored.
            unsafe { libc::inotify_rm_watch(fd, wd) };
        }
    }

    /// Classifies one read buffer; returns whether any event asks for a sync.
    fn handle(&mut self, fd: RawFd, buf: &[u8]) -> bool {
        let mut sync = false;
        for raw in parse_events(buf) {
            let moved_from = match (raw.mask & IN_MOVED_TO != 0, &self.moved_from) {
                (true, Some((wd, cookie, name))) if *wd == raw.wd && *cookie == raw.cookie => Some(name.clone()),
                _ => None,
            };
            if raw.mask & IN_MOVED_FROM != 0 {
                self.moved_from = Some((raw.wd, raw.cookie, raw.name.to_vec()));
            }
            let mut dir = None;
            let mut input = false;
            let mut managed = false;
            for (path, w) in self.dirs.iter().filter(|(_, w)| w.wd == raw.wd) {
                dir.get_or_insert(path);
                input |= w.role.input;
                managed |= w.role.managed.contains(OsStr::from_bytes(raw.name));
            }
            if dir.is_none() && raw.mask & IN_Q_OVERFLOW == 0 {
                continue; // a watch removed meanwhile
            }
            let event = Event {
                mask: raw.mask,
                name: raw.name,
                moved_from: moved_from.as_deref(),
                input,
                managed,
            };
            let action = match classify(&event) {
                Action::SyncIfSymlink => {
                    let entry = dir.expect("checked above").join(OsStr::from_bytes(raw.name));
                    if std::fs::symlink_metadata(entry).is_ok_and(|m| m.file_type().is_symlink()) {
                        Action::Sync
                    } else {
                        Action::Ignore
                    }
                }
                a => a,
            };
            tracing::trace!(wd = raw.wd, mask = format_args!("{:#x}", raw.mask), name = %String::from_utf8_lossy(raw.name), ?action, "inotify");
            sync |= action == Action::Sync;
            if raw.mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF) != 0 {
                // The directory is gone or elsewhere: watch its path again at the next sync.
                let stale: Vec<PathBuf> = self
                    .dirs
                    .iter()
                    .filter(|(_, w)| w.wd == raw.wd)
                    .map(|(p, _)| p.clone())
                    .collect();
                for path in stale {
                    self.dirs.remove(&path);
                }
                self.release(fd, raw.wd);
            }
        }
        sync
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(mask: u32, name: &str) -> Event<'_> {
        Event {
            mask,
            name: name.as_bytes(),
            moved_from: None,
            input: false,
            managed: false,
        }
    }

    fn input(mask: u32, name: &str) -> Event<'_> {
        Event {
            input: true,
            ..ev(mask, name)
        }
    }

    fn host(mask: u32, name: &str) -> Event<'_> {
        Event {
            managed: true,
            ..ev(mask, name)
        }
    }

    #[test]
    fn event_to_action_table() {
        use Action::*;
        let tmp = ".scheduler.conf.Ab12Z.kube-anchor.tmp";
        let cases: Vec<(Event, Action, &str)> = vec![
            // A ConfigMap/Secret volume update, step by step.
            (
                input(IN_CREATE | IN_ISDIR, "..2026_11_22_00_00_01.1"),
                Ignore,
                "new timestamped dir",
            ),
            (input(IN_CREATE, "..data_tmp"), Ignore, "..data_tmp link"),
            (input(IN_MOVED_FROM, "..data_tmp"), Ignore, "..data_tmp moved away"),
            (
                Event {
                    moved_from: Some(b"..data_tmp"),
                    ..input(IN_MOVED_TO, "..data")
                },
                Sync,
                "the ..data swap publishes",
            ),
            (input(IN_CREATE, "..data"), Sync, "first ..data"),
            (input(IN_DELETE, "..data"), Sync, "..data gone"),
            (
                input(IN_DELETE | IN_ISDIR, "..2026_11_22_00_00_00.0"),
                Ignore,
                "old generation removed",
            ),
            (input(IN_ATTRIB, "..data"), Ignore, "..data touched"),
            (input(IN_CREATE, "newkey"), SyncIfSymlink, "a new key's link"),
            // A plain input file.
            (input(IN_MODIFY, "pod.yaml"), Ignore, "write in progress"),
            (input(IN_CLOSE_WRITE, "pod.yaml"), Sync, "write finished"),
            (input(IN_MOVED_TO, "pod.yaml"), Sync, "replaced by rename"),
            (input(IN_MOVED_FROM, "pod.yaml"), Sync, "moved away"),
            (input(IN_DELETE, "pod.yaml"), Sync, "deleted"),
            (input(IN_ATTRIB, "pod.yaml"), Ignore, "an input's mode is not used"),
            (
                input(IN_CREATE | IN_ISDIR, "sub"),
                Ignore,
                "a directory in an input dir",
            ),
            // Managed host files.
            (host(IN_DELETE, "scheduler.conf"), Sync, "deleted on the host"),
            (host(IN_MOVED_FROM, "scheduler.conf"), Sync, "moved away on the host"),
            (host(IN_CLOSE_WRITE, "scheduler.conf"), Sync, "edited on the host"),
            (host(IN_MODIFY, "scheduler.conf"), Ignore, "edit in progress"),
            (host(IN_ATTRIB, "scheduler.conf"), Sync, "chmod/chown on the host"),
            (
                host(IN_MOVED_TO, "scheduler.conf"),
                Sync,
                "replaced by someone's rename",
            ),
            (
                host(IN_CREATE, "scheduler.conf"),
                SyncIfSymlink,
                "recreated: wait for close_write unless a link",
            ),
            (
                host(IN_CREATE | IN_ISDIR, "scheduler.conf"),
                Sync,
                "a directory in a file's place",
            ),
            // Our own writes.
            (host(IN_CREATE, tmp), Ignore, "our temp file"),
            (host(IN_CLOSE_WRITE, tmp), Ignore, "our temp file written"),
            (host(IN_ATTRIB, tmp), Ignore, "our temp file's fchmod"),
            (host(IN_MOVED_FROM, tmp), Ignore, "our temp renamed"),
            (
                Event {
                    moved_from: Some(tmp.as_bytes()),
                    ..host(IN_MOVED_TO, "scheduler.conf")
                },
                Ignore,
                "our commit",
            ),
            (
                Event {
                    moved_from: Some(b"scheduler.conf.new"),
                    ..host(IN_MOVED_TO, "scheduler.conf")
                },
                Sync,
                "someone else's rename",
            ),
            (ev(IN_DELETE, "other.yaml"), Ignore, "not ours, not an input"),
            (
                ev(IN_CLOSE_WRITE, "kube-apiserver.yaml"),
                Ignore,
                "another component's manifest",
            ),
            // The watch itself.
            (ev(IN_Q_OVERFLOW, ""), Sync, "events lost"),
            (ev(IN_IGNORED, ""), Sync, "watch gone"),
            (ev(IN_DELETE_SELF, ""), Sync, "dir deleted"),
            (ev(IN_MOVE_SELF, ""), Sync, "dir moved"),
            (input(IN_CLOSE_WRITE, ""), Ignore, "no name"),
            // A directory that is both (the config beside the host files).
            (
                Event {
                    managed: true,
                    ..input(IN_ATTRIB, "x")
                },
                Sync,
                "host rule wins",
            ),
        ];
        for (event, want, what) in cases {
            assert_eq!(classify(&event), want, "{what}: {event:?}");
        }
    }

    #[test]
    fn temp_names() {
        assert!(is_our_temp(b".a.yaml.XyZ12.kube-anchor.tmp"));
        assert!(!is_our_temp(b"a.yaml.kube-anchor.tmp"));
        assert!(!is_our_temp(b".kube-anchor.tmp"));
        assert!(!is_our_temp(b".a.yaml"));
    }

    fn record(wd: i32, mask: u32, cookie: u32, name: &str, len: u32) -> Vec<u8> {
        let mut b = Vec::new();
        for v in [wd as u32, mask, cookie, len] {
            b.extend_from_slice(&v.to_ne_bytes());
        }
        let mut n = name.as_bytes().to_vec();
        n.resize(len as usize, 0);
        b.extend(n);
        b
    }

    #[test]
    fn parses_records_and_stops_at_a_truncated_one() {
        let mut buf = record(1, IN_MOVED_FROM, 7, "..data_tmp", 16);
        buf.extend(record(1, IN_MOVED_TO, 7, "..data", 16));
        buf.extend(record(-1, IN_Q_OVERFLOW, 0, "", 0));
        let mut truncated = record(2, IN_DELETE, 0, "x", 16);
        truncated.truncate(20);
        buf.extend(truncated);
        let events: Vec<RawEvent> = parse_events(&buf).collect();
        assert_eq!(
            events,
            vec![
                RawEvent {
                    wd: 1,
                    mask: IN_MOVED_FROM,
                    cookie: 7,
                    name: b"..data_tmp"
                },
                RawEvent {
                    wd: 1,
                    mask: IN_MOVED_TO,
                    cookie: 7,
                    name: b"..data"
                },
                RawEvent {
                    wd: -1,
                    mask: IN_Q_OVERFLOW,
                    cookie: 0,
                    name: b""
                },
            ]
        );
        // A length beyond the buffer ends it.
        let mut huge = record(1, IN_DELETE, 0, "", 0);
        huge[12..16].copy_from_slice(&u32::MAX.to_ne_bytes());
        huge.extend_from_slice(b"name\0\0\0\0");
        assert_eq!(parse_events(&huge).count(), 0);
    }

    #[tokio::test]
    async fn a_configmap_swap_wakes_once_and_our_own_commit_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        let input_dir = dir.path().join("in");
        let host_dir = dir.path().join("host");
        std::fs::create_dir_all(&input_dir).unwrap();
        std::fs::create_dir_all(&host_dir).unwrap();
        let mut w = DirWatcher::new().unwrap();
        let mut wanted = BTreeMap::new();
        wanted.insert(input_dir.clone(), DirRole::input());
        wanted.insert(
            host_dir.clone(),
            DirRole {
                input: false,
                managed: [OsString::from("f.conf")].into(),
            },
        );
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
