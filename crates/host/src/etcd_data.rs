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

/// A scheduled snapshot being written: a temp file (0600) in the snapshot dir, renamed into
/// place only once it is whole and etcd's integrity hash checks out, so a failed or cut-off
/// transfer leaves the earlier snapshots as they were and no partial file under a snapshot's
/// name.
pub struct SnapshotSink {
    temp: tempfile::NamedTempFile,
    target: PathBuf,
    written: u64,
    max_bytes: u64,
}

/// What was checked of a snapshot file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    pub bytes: u64,
    /// sha256 of the whole file, hex.
    pub sha256: String,
}

impl SnapshotSink {
    /// Creates `dir` (0700) when missing and a temp file in it for `name`; removes the temp
    /// files of transfers cut off by a killed process (one writer per dir: the node's anchor).
    pub fn create(dir: &Path, name: &str, max_bytes: u64) -> Result<Self, DataDirError> {
        match fs::DirBuilder::new().mode(0o700).create(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(failed(dir, "create snapshot dir")(e)),
        }
        for entry in fs::read_dir(dir).map_err(failed(dir, "list snapshots"))?.flatten() {
            let file_name = entry.file_name();
            let file_name = file_name.to_string_lossy();
            if file_name.starts_with('.') && file_name.ends_with(kube_anchor_core::hostpath::TEMP_SUFFIX) {
                let _ = fs::remove_file(entry.path());
            }
        }
        let target = dir.join(name);
        let temp = stage_file(&target, FileMode(0o600), None, |_| Ok(())).map_err(|(op, e)| failed(&target, op)(e))?;
        Ok(Self {
            temp,
            target,
            written: 0,
            max_bytes,
        })
    }

    pub fn write(&mut self, chunk: &[u8]) -> io::Result<()> {
        self.written += chunk.len() as u64;
        if self.written > self.max_bytes {
            return Err(io::Error::other(format!("above snapshots.maxBytes {}", self.max_bytes)));
        }
        io::Write::write_all(self.temp.as_file_mut(), chunk)
    }

    /// Reads the file back and checks etcd's integrity hash, then renames it into place
    /// (fsynced, and its directory). Dropping the sink instead removes the temp file.
    pub fn finish(self) -> Result<(PathBuf, Verified), DataDirError> {
        self.temp
            .as_file()
            .sync_all()
            .map_err(failed(&self.target, "fsync snapshot"))?;
        let verified = verify_snapshot(self.temp.path()).map_err(|e| DataDirError {
            path: self.target.clone(),
            ..e
        })?;
        commit_file(self.temp, &self.target).map_err(|(op, e)| failed(&self.target, op)(e))?;
        Ok((self.target, verified))
    }
}

/// Checks a snapshot file as `etcdutl snapshot restore` does before it trusts one: its last 32
/// bytes are the sha256 of everything before them. Reads the file once.
pub fn verify_snapshot(path: &Path) -> Result<Verified, DataDirError> {
    use kube_anchor_core::etcd_snapshot::{INTEGRITY_HASH_LEN, has_integrity_hash};
    use sha2::{Digest, Sha256};
    let bad = |reason: String| DataDirError {
        path: path.to_path_buf(),
        op: "verify snapshot",
        source: io::Error::new(io::ErrorKind::InvalidData, reason),
    };
    let mut file = fs::File::open(path).map_err(failed(path, "open snapshot"))?;
    let bytes = file.metadata().map_err(failed(path, "inspect snapshot"))?.len();
    if !has_integrity_hash(bytes) {
        return Err(bad(format!(
            "{bytes} bytes: not a database with etcd's integrity hash after it (cut off, or not a snapshot)"
        )));
    }
    let body = bytes - INTEGRITY_HASH_LEN;
    let mut whole = Sha256::new();
    let mut database = Sha256::new();
    let mut buffer = vec![0u8; 1 << 16];
    let mut read = 0u64;
    let mut trailer = Vec::with_capacity(INTEGRITY_HASH_LEN as usize);
    loop {
        let n = io::Read::read(&mut file, &mut buffer).map_err(failed(path, "read snapshot"))?;
        if n == 0 {
            break;
        }
        let chunk = &buffer[..n];
        whole.update(chunk);
        let in_body = body.saturating_sub(read).min(n as u64) as usize;
        database.update(&chunk[..in_body]);
        trailer.extend_from_slice(&chunk[in_body..]);
        read += n as u64;
    }
    if read != bytes {
        return Err(bad(format!("changed while read ({read} of {bytes} bytes)")));
    }
    if database.finalize().as_slice() != trailer.as_slice() {
        return Err(bad(
            "etcd's integrity hash does not match its database: the file is damaged".into(),
        ));
    }
    Ok(Verified {
        bytes,
        sha256: hex::encode(whole.finalize()),
    })
}

/// The snapshot files (`*.db`, not temp files) in `dir`, oldest first; none when it is missing.
pub fn list_snapshots(dir: &Path) -> Result<Vec<String>, DataDirError> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(failed(dir, "list snapshots")(e)),
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".db") && !n.starts_with('.'))
        .collect();
    names.sort();
    Ok(names)
}

/// Removes the snapshots `names` in `dir`, each with its record (`<name>.json`).
pub fn remove_snapshots(dir: &Path, names: &[String]) -> Result<(), DataDirError> {
    for name in names {
        for path in [dir.join(name), dir.join(format!("{name}.json"))] {
            match fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(failed(&path, "remove old snapshot")(e)),
            }
        }
    }
    let _ = fs::File::open(dir).and_then(|d| d.sync_all());
    Ok(())
}

/// Writes `bytes` to `path` atomically (0600).
pub fn write_record(path: &Path, bytes: &[u8]) -> Result<(), DataDirError> {
    let temp = stage_file(path, FileMode(0o600), None, |f| io::Write::write_all(f, bytes))
        .map_err(|(op, e)| failed(path, op)(e))?;
    commit_file(temp, path).map_err(|(op, e)| failed(path, op)(e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};

    /// Two pages of "database" and etcd's hash after them, as the Snapshot RPC sends them.
    fn snapshot_bytes() -> Vec<u8> {
        let mut bytes: Vec<u8> = (0..1024u32).map(|i| (i % 251) as u8).collect();
        let hash = Sha256::digest(&bytes);
        bytes.extend_from_slice(&hash);
        bytes
    }

    #[test]
    fn a_whole_snapshot_is_renamed_into_place_and_verifies() {
        let dir = tempfile::tempdir().unwrap();
        let snapshots = dir.path().join("snaps");
        let bytes = snapshot_bytes();
        let mut sink = SnapshotSink::create(&snapshots, "a.db", 1 << 20).unwrap();
        for chunk in bytes.chunks(100) {
            sink.write(chunk).unwrap();
        }
        let (path, verified) = sink.finish().unwrap();
        assert_eq!(path, snapshots.join("a.db"));
        assert_eq!(verified.bytes, 1056);
        assert_eq!(verified.sha256, hex::encode(Sha256::digest(&bytes)));
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(fs::metadata(&snapshots).unwrap().permissions().mode() & 0o777, 0o700);
        assert_eq!(list_snapshots(&snapshots).unwrap(), vec!["a.db".to_string()]);
    }

    #[test]
    fn a_damaged_or_cut_off_snapshot_is_refused_and_leaves_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut damaged = snapshot_bytes();
        damaged[10] ^= 1;
        let mut cut = snapshot_bytes();
        cut.truncate(1000);
        for (bytes, says) in [(damaged, "does not match"), (cut, "not a database")] {
            let mut sink = SnapshotSink::create(dir.path(), "b.db", 1 << 20).unwrap();
            sink.write(&bytes).unwrap();
            let e = sink.finish().unwrap_err().to_string();
            assert!(e.contains("b.db") && e.contains(says), "{e}");
            assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0, "{e}");
        }
        // A cut-off transfer's temp file goes with the next one.
        let left = SnapshotSink::create(dir.path(), "d.db", 1 << 20).unwrap();
        std::mem::forget(left);
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
        drop(SnapshotSink::create(dir.path(), "e.db", 1 << 20).unwrap());
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
        // Above the bound: refused while written.
        let mut sink = SnapshotSink::create(dir.path(), "c.db", 100).unwrap();
        assert!(
            sink.write(&snapshot_bytes())
                .unwrap_err()
                .to_string()
                .contains("maxBytes")
        );
    }

    #[test]
    fn old_snapshots_go_with_their_records() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["1.db", "1.db.json", "2.db", "2.db.json", ".3.db.tmp"] {
            fs::write(dir.path().join(name), b"x").unwrap();
        }
        assert_eq!(list_snapshots(dir.path()).unwrap(), vec!["1.db", "2.db"]);
        remove_snapshots(dir.path(), &["1.db".into()]).unwrap();
        let mut left: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, vec![".3.db.tmp", "2.db", "2.db.json"]);
        assert!(list_snapshots(&dir.path().join("missing")).unwrap().is_empty());
    }
}
