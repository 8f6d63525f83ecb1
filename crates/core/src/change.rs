//! Which filesystem change events complete an update the daemon must act on. Pure: the host
//! crate's watcher feeds it the kernel's inotify events.
//!
//! No fixed debounce: [`classify`] picks the events that *complete* an update — the `..data`
//! rename, the `close_write` or `moved_to` of a plain file, a deletion or change of a managed
//! host file — and the daemon syncs at once on the first of them. Steps of an update in
//! progress (the kubelet's timestamped directory, `..data_tmp`, the creation of a plain file
//! before it is written) and our own writes (temp files and their rename over the target) ask
//! for nothing.

use crate::hostpath::is_our_temp;

/// The kernel's inotify mask bits (`<sys/inotify.h>`) that [`classify`] reads.
pub const IN_MODIFY: u32 = 0x0000_0002;
pub(crate) const IN_ATTRIB: u32 = 0x0000_0004;
pub(crate) const IN_CLOSE_WRITE: u32 = 0x0000_0008;
pub const IN_MOVED_FROM: u32 = 0x0000_0040;
pub const IN_MOVED_TO: u32 = 0x0000_0080;
pub const IN_CREATE: u32 = 0x0000_0100;
pub(crate) const IN_DELETE: u32 = 0x0000_0200;
pub const IN_DELETE_SELF: u32 = 0x0000_0400;
pub const IN_MOVE_SELF: u32 = 0x0000_0800;
pub const IN_Q_OVERFLOW: u32 = 0x0000_4000;
pub const IN_IGNORED: u32 = 0x0000_8000;
pub(crate) const IN_ISDIR: u32 = 0x4000_0000;

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
pub enum Reaction {
    Ignore,
    /// Sync only if the new entry is a symbolic link (a link is complete once created; a
    /// regular file is complete at its `close_write`). The watcher checks with `lstat`.
    SyncIfSymlink,
    Sync,
}

/// Whether an event completes a change the daemon must act on. Pure.
pub fn classify(e: &Event) -> Reaction {
    // Lost events, or the watch itself gone (directory deleted or moved): look again.
    if e.mask & (IN_Q_OVERFLOW | IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF) != 0 {
        return Reaction::Sync;
    }
    if e.name.is_empty() || is_our_temp(e.name) {
        return Reaction::Ignore;
    }
    // Our own commit: a temp file renamed over its target.
    if e.mask & IN_MOVED_TO != 0 && e.moved_from.is_some_and(is_our_temp) {
        return Reaction::Ignore;
    }
    let input = if !e.input {
        Reaction::Ignore
    } else if e.name.starts_with(b"..") {
        // The kubelet writes a new timestamped directory, points `..data_tmp` at it and renames
        // that over `..data`: only the last step publishes anything.
        if e.name == DATA_LINK.as_bytes() && e.mask & (IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_MOVED_FROM) != 0 {
            Reaction::Sync
        } else {
            Reaction::Ignore
        }
    } else {
        completes(e.mask, false)
    };
    let host = if e.managed {
        completes(e.mask, true)
    } else {
        Reaction::Ignore
    };
    input.max(host)
}

/// The rule for a plain entry: a rename, deletion or finished write completes a change; a
/// creation completes one only for a link (or, on the host, a directory in a file's place); an
/// `IN_MODIFY` waits for its `close_write`. A mode change matters only on the host.
fn completes(mask: u32, host: bool) -> Reaction {
    if mask & (IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE) != 0 || (host && mask & IN_ATTRIB != 0) {
        Reaction::Sync
    } else if mask & IN_CREATE != 0 {
        if host && mask & IN_ISDIR != 0 {
            Reaction::Sync
        } else if mask & IN_ISDIR != 0 {
            Reaction::Ignore
        } else {
            Reaction::SyncIfSymlink
        }
    } else {
        Reaction::Ignore
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
        use Reaction::*;
        let tmp = ".scheduler.conf.Ab12Z.kube-anchor.tmp";
        let cases: Vec<(Event, Reaction, &str)> = vec![
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
}
