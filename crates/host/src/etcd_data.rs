//! etcd's data dir on the node, as the membership steps handle it: whether etcd wrote a member
//! there and still holds its WAL, and a leaving member's snapshot saved before its data goes.

use std::fs;
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use kube_anchor_core::config::FileMode;

use crate::hostfs::{commit_file, stage_file, write_locked};

/// A step on the data dir or the snapshots that failed, with the path it failed on.
#[derive(Debug, thiserror::Error)]
#[error("{}: {op}: {source}", .path.display())]
pub struct DataDirError {
    pub path: PathBuf,
    pub op: &'static str,
    pub source: io::Error,
}

fn failed(path: &Path, op: &'static str) -> impl FnOnce(io::Error) -> DataDirError {
    let path = path.to_path_buf();
    move |source| DataDirError { path, op, source }
}

/// The data dir at `path`, refused when it is a symlink (never followed).
pub fn data_dir(path: PathBuf) -> Result<PathBuf, DataDirError> {
    match fs::symlink_metadata(&path) {
        Ok(m) if m.file_type().is_symlink() => Err(DataDirError {
            path,
            op: "inspect data dir",
            source: io::Error::other("is a symlink; not followed"),
        }),
        _ => Ok(path),
    }
}

/// Whether etcd wrote a member below `data` (its `member/` directory).
pub fn has_member(data: &Path) -> bool {
    fs::symlink_metadata(data.join("member")).is_ok_and(|m| m.is_dir())
}

/// Whether a process holds a lock on one of the WAL files below `data`.
pub fn wal_held(data: &Path) -> io::Result<bool> {
    let wal = data.join("member/wal");
    let entries = match fs::read_dir(&wal) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let path = entry?.path();
        if path.extension().is_some_and(|x| x == "wal") && write_locked(&path)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// A snapshot saved before the data went.
#[derive(Debug, Clone)]
pub struct Saved {
    pub snapshot: PathBuf,
    /// The older snapshots removed to keep the count.
    pub pruned: Vec<String>,
}

/// What became of the data dir itself once etcd's `member/` was removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirLeft {
    /// Removed, or not there.
    Gone,
    /// It holds more than etcd's `member/`: kept, with what is in it.
    NotEmpty,
    /// A mount point (the charts mount the data dir into the anchor's container): emptied of
    /// etcd's data, the directory stays on the host.
    MountPoint,
}

/// Copies `member/snap/db` below `data` into `snapshots` (created 0700; the copy fsynced and
/// renamed into place, at most `max_bytes`), removes the older ones `prune` names from the
/// list there, then removes etcd's `member/` and the data dir if that leaves it empty. Any
/// failure before the removal keeps the data. `None` saved: no data dir, or no database in it.
pub fn save_and_remove(
    data: &Path,
    snapshots: &Path,
    max_bytes: u64,
    prune: impl FnOnce(&[String]) -> Vec<String>,
) -> Result<(Option<Saved>, DirLeft), DataDirError> {
    if fs::symlink_metadata(data).is_err() {
        return Ok((None, DirLeft::Gone));
    }
    let db = data.join("member/snap/db");
    let saved = match fs::symlink_metadata(&db) {
        Ok(m) if m.is_file() => {
            if m.len() > max_bytes {
                return Err(DataDirError {
                    path: db,
                    op: "snapshot",
                    source: io::Error::other(format!(
                        "{} bytes, above snapshots.maxBytes {max_bytes}; the data dir is kept",
                        m.len()
                    )),
                });
            }
            match fs::DirBuilder::new().mode(0o700).create(snapshots) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(failed(snapshots, "create snapshot dir")(e)),
            }
            let stamp = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default();
            let name = format!("{:020}-{:09}.db", stamp.as_secs(), stamp.subsec_nanos());
            let target = snapshots.join(&name);
            let mut from = fs::File::open(&db).map_err(failed(&db, "open"))?;
            let temp = stage_file(&target, FileMode(0o600), None, |to| {
                let copied = io::copy(&mut io::Read::take(&mut from, max_bytes + 1), to)?;
                if copied > max_bytes {
                    return Err(io::Error::other("grew above snapshots.maxBytes while copied"));
                }
                Ok(())
            })
            .map_err(|(_, e)| failed(&target, "write snapshot")(e))?;
            commit_file(temp, &target).map_err(|(op, e)| failed(&target, op)(e))?;
            let names: Vec<String> = fs::read_dir(snapshots)
                .map_err(failed(snapshots, "list"))?
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| n.ends_with(".db") && !n.starts_with('.'))
                .collect();
            let pruned = prune(&names);
            for n in &pruned {
                let _ = fs::remove_file(snapshots.join(n));
            }
            Some(Saved {
                snapshot: target,
                pruned,
            })
        }
        // No database (etcd never wrote one): nothing to save.
        Ok(_) | Err(_) => None,
    };
    // Only what etcd writes there (`member/`), then the directory if that leaves it empty: a
    // dataDir set by mistake to a directory holding anything else loses nothing of it.
    let member_dir = data.join("member");
    if fs::symlink_metadata(&member_dir).is_ok_and(|m| m.is_dir()) {
        fs::remove_dir_all(&member_dir).map_err(failed(&member_dir, "remove etcd's member dir"))?;
    }
    let left = match fs::remove_dir(data) {
        Ok(()) => DirLeft::Gone,
        Err(e) if e.kind() == io::ErrorKind::NotFound => DirLeft::Gone,
        Err(e) if e.kind() == io::ErrorKind::DirectoryNotEmpty => DirLeft::NotEmpty,
        Err(e) if e.kind() == io::ErrorKind::ResourceBusy => DirLeft::MountPoint,
        Err(e) => return Err(failed(data, "remove data dir")(e)),
    };
    if let Some(parent) = data.parent() {
        let _ = fs::File::open(parent).and_then(|d| d.sync_all());
    }
    Ok((saved, left))
}
