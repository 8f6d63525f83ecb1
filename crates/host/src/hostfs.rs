//! The node's filesystem: path resolution under `--host-root`, observation, and the one
//! executor that carries out a [`Plan`](kube_anchor_core::plan::Plan).
//!
//! Writes are atomic, durable and private: a dot-prefixed temp file in the destination
//! directory (the kubelet ignores dot-files and runs every other file in its manifest directory)
//! is created with the final mode, owned, written in full and fsynced, then renamed over the
//! target, and the directory is fsynced. A plan is carried out in two phases: every write is
//! staged as a temp file first, and only when all of them are on disk are they renamed into
//! place. A full disk or a refused write therefore leaves every host file as it was.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};
use tempfile::{NamedTempFile, TempPath};

use kube_anchor_core::config::{FileMode, Owner, Role};
use kube_anchor_core::hostpath::{AllowedRoots, HostPath, HostPathError, TEMP_SUFFIX};
use kube_anchor_core::ledger::{CorruptLedger, Ledger, Snapshot, decode_checked, encode_checked};
use kube_anchor_core::plan::{Observations, Observed, Op, Reader};
use kube_anchor_core::state_layout::STATE_SUBDIR;

const LEDGER_MODE: FileMode = FileMode(0o600);
/// The most bytes read from one input: the config file and each `source:`. Checked while
/// reading, so a device or a growing file costs no more than this.
pub const MAX_INPUT_BYTES: u64 = 16 * 1024 * 1024;
/// The most bytes all sources of one config may hold together, so that the last-known-good
/// snapshot (base64 of every file) stays readable within [`MAX_STATE_BYTES`].
pub const MAX_TOTAL_INPUT_BYTES: u64 = 32 * 1024 * 1024;
/// The most bytes read from one state file (ledger, last-known-good snapshot) or host file.
pub(crate) const MAX_STATE_BYTES: u64 = 64 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum HostFsError {
    #[error(transparent)]
    Path(#[from] HostPathError),
    #[error("host root {}: {source}", .path.display())]
    HostRoot { path: PathBuf, source: io::Error },
    #[error("{path}: a parent directory resolves to {}, outside {allowed}", .resolved.display())]
    Escape {
        path: HostPath,
        resolved: PathBuf,
        allowed: String,
    },
    #[error("{path}: cannot {op}: {source}")]
    Io {
        path: HostPath,
        op: &'static str,
        source: io::Error,
    },
    #[error("{path}: changed since it was checked; left in place")]
    Changed { path: HostPath },
    #[error(
        "{path}: cannot read it (owner {owner}, mode {mode}): {source}; kube-anchor reads back every file it manages, and root reads another user's private file only with CAP_DAC_READ_SEARCH (the charts grant it)"
    )]
    Unreadable {
        path: HostPath,
        owner: Owner,
        mode: FileMode,
        source: io::Error,
    },
}

/// This process as a reader of the files it writes (for `plan::check_readable`). A failed
/// capability query counts as no capability: the check then errs on the side of refusing.
pub fn reader() -> Reader {
    use rustix::thread::CapabilitySet;
    let euid = rustix::process::geteuid().as_raw();
    let mut gids = vec![rustix::process::getegid().as_raw()];
    gids.extend(
        rustix::process::getgroups()
            .unwrap_or_default()
            .into_iter()
            .map(|g| g.as_raw()),
    );
    let reads_any = rustix::thread::capabilities(None)
        .map(|c| {
            c.effective
                .intersects(CapabilitySet::DAC_READ_SEARCH | CapabilitySet::DAC_OVERRIDE)
        })
        .unwrap_or(false);
    Reader {
        uid: euid,
        gids,
        reads_any,
    }
}

/// Whether another process holds a write lock on `path` (a POSIX record lock or an open file
/// description lock, which conflict with each other): asks for a shared lock without waiting
/// and lets go at once. Needs only read access. A missing file is not locked.
pub fn write_locked(path: &Path) -> io::Result<bool> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    match rustix::fs::fcntl_lock(&file, rustix::fs::FlockOperation::NonBlockingLockShared) {
        // Closing the file (its last descriptor in this process) releases the lock.
        Ok(()) => Ok(false),
        Err(e) if e == rustix::io::Errno::AGAIN || e == rustix::io::Errno::ACCESS => Ok(true),
        Err(e) => Err(e.into()),
    }
}

fn io_err<'a>(path: &'a HostPath, op: &'static str) -> impl FnOnce(io::Error) -> HostFsError + 'a {
    move |source| HostFsError::Io {
        path: path.clone(),
        op,
        source,
    }
}

/// What happened to one op.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Done {
    Wrote {
        path: HostPath,
        sha256: String,
        mode: FileMode,
        owner: Option<Owner>,
        role: Role,
    },
    Removed {
        path: HostPath,
    },
}

/// The ledger as found on disk.
#[derive(Debug)]
pub struct LoadedLedger {
    pub ledger: Ledger,
    /// Set when a corrupt or unreadable ledger was found and moved aside.
    pub set_aside: Option<SetAside>,
    /// These are the very bytes this process last stored there, fsynced with their directory:
    /// they survive a power cut.
    pub durable: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetAside {
    pub path: HostPath,
    pub moved_to: Option<HostPath>,
    pub reason: String,
}

#[derive(Debug, Clone)]
pub struct HostFs {
    root: PathBuf,
    roots: AllowedRoots,
    dir_mode: u32,
    /// Directories below the root found plain (every component a directory, none a symlink),
    /// with the device and inode each had then. One `lstat` of the whole path shows that it is
    /// still that directory, instead of one per component at every resolution (a sync resolves
    /// each managed path several times).
    plain_dirs: Arc<Mutex<BTreeMap<PathBuf, DirId>>>,
    /// What observing each file found, by real path, with the `lstat` it was found under: a
    /// later observation whose `lstat` is the same takes it instead of reading and hashing the
    /// file again (see [`Unchanged`]).
    observed: Arc<Mutex<BTreeMap<PathBuf, (Unchanged, Observed)>>>,
    /// The last ledger read or stored at each path: bytes, what they decode to, and whether
    /// this process stored them itself (fsynced). Bytes read again that are the same are not
    /// decoded again.
    ledgers: Arc<Mutex<BTreeMap<HostPath, KnownLedger>>>,
    /// [`SETTLED`] (tests take less).
    settled: std::time::Duration,
}

#[derive(Debug)]
struct KnownLedger {
    bytes: Vec<u8>,
    ledger: Ledger,
    /// The `lstat` of the file this process stored and fsynced (with its directory): a read of
    /// that very file is durable.
    stored: Option<Unchanged>,
}

/// A directory's device and inode.
type DirId = (u64, u64);

/// At most this many directories are remembered as plain (a component has a handful).
const MAX_PLAIN_DIRS: usize = 256;
/// At most this many observations are remembered (a component manages a few dozen files).
const MAX_OBSERVED: usize = 1024;
/// A file changed more recently than this before it was observed is read again at every
/// observation: a write in the same tick of the file system's clock (coarse, and whole
/// seconds on some file systems) can leave every field of its `lstat` as it was.
const SETTLED: std::time::Duration = std::time::Duration::from_secs(2);

/// The fields of a file's `lstat` that any change of the file changes: a replacement (a new
/// inode: every write kube-anchor makes), a write in place (size, modification and change
/// time), a chmod, chown or link (change time). An observation is taken again only while its
/// file still shows the very same fields and had been left alone for [`SETTLED`] before it was
/// read; the daemon also forgets the observation of every file an inotify event names
/// ([`HostFs::forget_observed`]), and every observation at its periodic resync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Unchanged {
    dev: u64,
    ino: u64,
    size: u64,
    mode: u32,
    uid: u32,
    gid: u32,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Unchanged {
    fn of(meta: &fs::Metadata) -> Self {
        Self {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mode: meta.mode(),
            uid: meta.uid(),
            gid: meta.gid(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }

    /// Whether the file had been left alone for `settled` at `now` (seconds and nanoseconds
    /// since the epoch, read before the file was).
    fn settled_at(&self, now: (i64, i64), settled: std::time::Duration) -> bool {
        let nanos = |(s, ns): (i64, i64)| i128::from(s) * 1_000_000_000 + i128::from(ns);
        let last = nanos(self.mtime).max(nanos(self.ctime));
        nanos(now) - last >= settled.as_nanos() as i128
    }
}

fn wall_clock() -> (i64, i64) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (now.as_secs() as i64, i64::from(now.subsec_nanos()))
}

impl HostFs {
    /// `host_root` must exist; every host path is resolved below it.
    pub fn new(host_root: &Path, roots: AllowedRoots) -> Result<Self, HostFsError> {
        let root = fs::canonicalize(host_root).map_err(|source| HostFsError::HostRoot {
            path: host_root.into(),
            source,
        })?;
        Ok(Self {
            root,
            roots,
            dir_mode: 0o755,
            plain_dirs: Arc::default(),
            observed: Arc::default(),
            ledgers: Arc::default(),
            settled: SETTLED,
        })
    }

    /// Mode for directories this writer creates (default 0755).
    pub fn with_dir_mode(mut self, mode: u32) -> Self {
        self.dir_mode = mode;
        self
    }

    /// The canonical `--host-root`.
    pub fn host_root(&self) -> &Path {
        &self.root
    }

    pub fn roots(&self) -> &AllowedRoots {
        &self.roots
    }

    /// The real path of `path`, after checking that it lies below an allowed root and that no
    /// existing parent directory is a symlink leading elsewhere. The last component is not
    /// followed: a symlink there is replaced, never written through.
    pub fn resolve(&self, path: &HostPath) -> Result<PathBuf, HostFsError> {
        let allowed = self.roots.root_of(path).ok_or_else(|| {
            HostFsError::Path(HostPathError::OutsideAllowedRoots {
                path: path.clone(),
                roots: self.roots.to_string(),
            })
        })?;
        let real = self.root.join(path.relative());
        let parent = real.parent().expect("below an allowed root");
        let file_name = real.file_name().expect("host paths name a file");
        // The common case, no symlink between the host root and the file: nothing can lead
        // elsewhere, and one `lstat` per directory below the root proves it (a full
        // `canonicalize` reads every link from `/`, twice per path).
        if let Some(resolved) = self
            .plain_parent(parent)
            .map_err(io_err(path, "resolve parent directory"))?
        {
            return Ok(resolved.join(file_name));
        }
        let resolved = canonicalize_existing_prefix(parent).map_err(io_err(path, "resolve parent directory"))?;
        let real_allowed = canonicalize_existing_prefix(&self.root.join(allowed.relative()))
            .map_err(io_err(path, "resolve allowed root"))?;
        if !resolved.starts_with(&self.root) || !resolved.starts_with(&real_allowed) {
            return Err(HostFsError::Escape {
                path: path.clone(),
                resolved,
                allowed: allowed.to_string(),
            });
        }
        Ok(resolved.join(file_name))
    }

    /// `parent` (the root joined with a relative path) when no existing component below the
    /// root is a symlink or anything but a directory, as [`plain_below`] finds; a directory found
    /// so before is taken when one `lstat` of its whole path gives the same device and inode
    /// (that is, the very directory that was checked).
    fn plain_parent(&self, parent: &Path) -> io::Result<Option<PathBuf>> {
        let known = self.plain_dirs.lock().ok().and_then(|dirs| dirs.get(parent).copied());
        // Any other answer walks from the root again, whose finding replaces the entry.
        if let Some(id) = known
            && fs::symlink_metadata(parent).is_ok_and(|m| m.is_dir() && (m.dev(), m.ino()) == id)
        {
            return Ok(Some(parent.to_path_buf()));
        }
        let below = parent.strip_prefix(&self.root).expect("joined to the root");
        let walked = plain_below(&self.root, below)?;
        if let Some((resolved, Some(id))) = &walked
            && let Ok(mut dirs) = self.plain_dirs.lock()
        {
            if dirs.len() >= MAX_PLAIN_DIRS {
                dirs.clear();
            }
            dirs.insert(resolved.clone(), *id);
        }
        Ok(walked.map(|(resolved, _)| resolved))
    }

    /// What is at `path` now: missing, a regular file (its sha256, mode, owner), or something
    /// else. A file whose `lstat` shows it unchanged since it was last hashed (see
    /// [`Unchanged`]) is not read again.
    pub fn observe(&self, path: &HostPath) -> Result<Observed, HostFsError> {
        let real = self.resolve(path)?;
        let now = wall_clock();
        let meta = match fs::symlink_metadata(&real) {
            Ok(meta) => meta,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Observed::Missing),
            Err(e) => return Err(io_err(path, "inspect")(e)),
        };
        let key = Unchanged::of(&meta);
        if meta.is_file()
            && let Some(known) = self.observed.lock().ok().and_then(|cache| {
                cache
                    .get(&real)
                    .filter(|(k, _)| *k == key && k.settled_at(now, self.settled))
                    .map(|(_, o)| o.clone())
            })
        {
            return Ok(known);
        }
        let (observed, read) = observe_meta(path, &real, meta)?;
        if let (Some(read), Ok(mut cache)) = (read, self.observed.lock()) {
            if read.settled_at(now, self.settled) {
                if cache.len() >= MAX_OBSERVED {
                    cache.clear();
                }
                cache.insert(real, (read, observed.clone()));
            } else {
                cache.remove(&real);
            }
        }
        Ok(observed)
    }

    /// Forgets what observing the files at these real paths found (an inotify event named
    /// them): the next observation reads them again.
    pub fn forget_observed<'a>(&self, real: impl IntoIterator<Item = &'a Path>) {
        if let Ok(mut cache) = self.observed.lock() {
            for path in real {
                cache.remove(path);
            }
        }
    }

    /// Forgets every observation (the periodic resync; events lost).
    pub fn forget_all_observed(&self) {
        if let Ok(mut cache) = self.observed.lock() {
            cache.clear();
        }
    }

    pub fn observe_all<'a>(&self, paths: impl IntoIterator<Item = &'a HostPath>) -> Result<Observations, HostFsError> {
        paths.into_iter().map(|p| Ok((p.clone(), self.observe(p)?))).collect()
    }

    /// The bytes of a regular file at `path` (a symlink there is not followed), at most
    /// [`MAX_STATE_BYTES`]; `None` when nothing is there.
    pub fn read(&self, path: &HostPath) -> Result<Option<Vec<u8>>, HostFsError> {
        let real = self.resolve(path)?;
        match read_regular(&real, MAX_STATE_BYTES, Follow::No) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err(path, "read")(e)),
        }
    }

    /// The names (UTF-8 ones) in the directory at `dir`; none when it cannot be listed.
    pub fn file_names(&self, dir: &HostPath) -> Vec<String> {
        // Resolved as the directory of a file in it: an allowed root itself (`/etc/kubernetes`)
        // is no path below one, its files are.
        let real = dir
            .join("entry")
            .ok()
            .and_then(|entry| self.resolve(&entry).ok())
            .and_then(|real| real.parent().map(Path::to_path_buf));
        let Some(entries) = real.and_then(|real| fs::read_dir(real).ok()) else {
            return Vec::new();
        };
        entries.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect()
    }

    /// Removes the state file at `path` (a kept original no longer needed), then its directory
    /// if that leaves it empty. Best effort: what cannot be removed stays, unreported.
    pub fn remove_with_empty_dir(&self, path: &HostPath) {
        if let Ok(real) = self.resolve(path) {
            let _ = fs::remove_file(&real);
            if let Some(dir) = real.parent() {
                let _ = fs::remove_dir(dir);
            }
        }
    }

    /// Removes temp files a killed writer left next to `paths`. Only our own names are touched:
    /// `.<file name>.<random>.kube-anchor.tmp` for the given files.
    pub fn clean_stale_temps<'a>(&self, paths: impl IntoIterator<Item = &'a HostPath>) -> Vec<HostPath> {
        // One directory listing per directory, however many of our files it holds.
        let mut by_dir: BTreeMap<PathBuf, (HostPath, BTreeSet<String>)> = BTreeMap::new();
        for path in paths {
            let (Ok(real), Some(name), Some(parent)) = (self.resolve(path), path.file_name(), path.parent()) else {
                continue;
            };
            let dir = real.parent().expect("resolved file has a parent").to_path_buf();
            by_dir
                .entry(dir)
                .or_insert_with(|| (parent, BTreeSet::new()))
                .1
                .insert(name.to_owned());
        }
        let mut removed = Vec::new();
        for (dir, (host_dir, names)) in by_dir {
            let Ok(entries) = fs::read_dir(&dir) else { continue };
            for entry in entries.flatten() {
                let file_name = entry.file_name();
                let Some(file_name) = file_name.to_str() else { continue };
                let Some(stem) = file_name.strip_prefix('.').and_then(|n| n.strip_suffix(TEMP_SUFFIX)) else {
                    continue;
                };
                // `<file name>.<random>`: ours when the part before the last dot names one of ours.
                let ours = stem.rsplit_once('.').is_some_and(|(name, _)| names.contains(name));
                if ours && fs::remove_file(entry.path()).is_ok() {
                    removed.extend(host_dir.join(file_name).ok());
                }
            }
        }
        removed
    }

    /// Carries out `ops` in order: all writes staged first, then committed; removes re-check
    /// the content they expect just before unlinking. Stops at the first error; what was done
    /// before it is returned in the error's companion list.
    pub fn execute(&self, ops: &[Op]) -> Result<Vec<Done>, (HostFsError, Vec<Done>)> {
        self.execute_with_intent(ops, None)
    }

    /// [`HostFs::execute`], storing `intent` (a ledger: its state-dir path and bytes) once every
    /// write is staged and before the first rename; when that fails, nothing else is renamed
    /// and the node is as it was. The intent's temp file is staged and fsynced together with
    /// the writes (one round of concurrent fsyncs), then renamed into place and its directory
    /// fsynced.
    pub fn execute_with_intent(
        &self,
        ops: &[Op],
        intent: Option<(HostPath, Vec<u8>)>,
    ) -> Result<Vec<Done>, (HostFsError, Vec<Done>)> {
        let mut created_dirs = Vec::new();
        let intent_op = intent.map(|(path, bytes)| Op::Write {
            sha256: kube_anchor_core::digest::sha256_hex(&bytes),
            file: kube_anchor_core::desired::DesiredFile {
                path,
                content: bytes,
                mode: LEDGER_MODE,
                owner: None,
                role: Role::Credential,
            },
            reason: kube_anchor_core::plan::WriteReason::Content,
        });
        let staged = match self
            .stage_writes(intent_op.iter().chain(ops), &mut created_dirs)
            .and_then(|mut staged| {
                if let Some(op) = &intent_op {
                    let (temp, real) = staged.remove(0);
                    temp.persist(&real)
                        .map_err(|e| io_err(op.path(), "rename into place")(e.error))?;
                    sync_dir(op.path(), real.parent().expect("file has a parent"))?;
                }
                Ok(staged)
            }) {
            Ok(staged) => staged,
            Err(e) => {
                // Nothing was renamed yet: dropping the temps and our new dirs restores the node.
                for dir in created_dirs.iter().rev() {
                    let _ = fs::remove_dir(dir);
                }
                return Err((e, Vec::new()));
            }
        };
        let mut staged = staged.into_iter();
        let mut done = Vec::new();
        let mut unsynced_dirs: Vec<(HostPath, PathBuf)> = Vec::new();
        let mut previous_role = None;
        for op in ops {
            let role = match op {
                Op::Write { file, .. } => file.role,
                Op::Remove { role, .. } => *role,
            };
            // Make earlier steps durable before a step of the other kind (the manifest after
            // its credentials, credentials after their manifest is gone).
            if previous_role.is_some_and(|r| r != role)
                && let Err(e) = sync_dirs(&mut unsynced_dirs)
            {
                return Err((e, done));
            }
            previous_role = Some(role);
            let result = match op {
                Op::Write { file, sha256, .. } => {
                    let (temp, real) = staged.next().expect("one staged temp per write");
                    temp.persist(&real)
                        .map_err(|e| io_err(&file.path, "rename into place")(e.error))
                        .map(|_| Done::Wrote {
                            path: file.path.clone(),
                            sha256: sha256.clone(),
                            mode: file.mode,
                            owner: file.owner,
                            role: file.role,
                        })
                        .map(|d| (d, real))
                }
                Op::Remove {
                    path, expected_sha256, ..
                } => self.remove_checked(path, expected_sha256),
            };
            match result {
                Ok((d, real)) => {
                    let dir = real.parent().expect("file has a parent").to_path_buf();
                    let host_dir = op.path().parent().expect("file has a parent");
                    if !unsynced_dirs.iter().any(|(_, d)| *d == dir) {
                        unsynced_dirs.push((host_dir, dir));
                    }
                    done.push(d);
                }
                Err(e) => {
                    let _ = sync_dirs(&mut unsynced_dirs);
                    return Err((e, done));
                }
            }
        }
        match sync_dirs(&mut unsynced_dirs) {
            Ok(()) => Ok(done),
            Err(e) => Err((e, done)),
        }
    }

    /// Writes a temp file for every write, then fsyncs them all at once (concurrently: the
    /// disk serves them together instead of one after the other) and closes them.
    fn stage_writes<'a>(
        &self,
        ops: impl IntoIterator<Item = &'a Op>,
        created_dirs: &mut Vec<PathBuf>,
    ) -> Result<Vec<(TempPath, PathBuf)>, HostFsError> {
        let mut staged = Vec::new();
        let mut paths = Vec::new();
        for op in ops {
            let Op::Write { file, .. } = op else { continue };
            let real = self.resolve(&file.path)?;
            let dir = real.parent().expect("resolved file has a parent");
            self.create_dirs(&file.path, dir, created_dirs)?;
            let temp = match stage(&file.path, &real, &file.content, file.mode, file.owner) {
                // A concurrent run that failed removed the (empty) directory it had created
                // just after we found it: create it again, once.
                Err(HostFsError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                    self.create_dirs(&file.path, dir, created_dirs)?;
                    stage(&file.path, &real, &file.content, file.mode, file.owner)?
                }
                result => result?,
            };
            staged.push((temp, real));
            paths.push(&file.path);
        }
        let files: Vec<(&HostPath, &File)> = paths.into_iter().zip(staged.iter().map(|(t, _)| t.as_file())).collect();
        sync_files(&files)?;
        // Closed before the rename, so the `close_write` a watcher sees names the temp file.
        Ok(staged.into_iter().map(|(t, real)| (t.into_temp_path(), real)).collect())
    }

    fn create_dirs(&self, path: &HostPath, dir: &Path, created: &mut Vec<PathBuf>) -> Result<(), HostFsError> {
        let mut missing = Vec::new();
        let mut cursor = dir;
        while fs::symlink_metadata(cursor).is_err() {
            missing.push(cursor.to_path_buf());
            cursor = cursor.parent().expect("the host root exists");
        }
        for d in missing.into_iter().rev() {
            match fs::DirBuilder::new().mode(self.dir_mode).create(&d) {
                Ok(()) => {}
                // Another run (another component, or the daemon) created it first: fine when it
                // is a directory, and not ours to set a mode on or to remove on failure.
                Err(e)
                    if e.kind() == io::ErrorKind::AlreadyExists
                        && fs::symlink_metadata(&d).is_ok_and(|m| m.is_dir()) =>
                {
                    continue;
                }
                Err(e) => return Err(io_err(path, "create parent directory")(e)),
            }
            fs::set_permissions(&d, fs::Permissions::from_mode(self.dir_mode))
                .map_err(io_err(path, "set directory mode"))?;
            created.push(d);
        }
        Ok(())
    }

    fn remove_checked(&self, path: &HostPath, expected_sha256: &str) -> Result<(Done, PathBuf), HostFsError> {
        let real = self.resolve(path)?;
        match observe_real(path, &real)? {
            Observed::Missing => return Ok((Done::Removed { path: path.clone() }, real)),
            Observed::File { sha256, .. } if sha256 == expected_sha256 => {}
            _ => return Err(HostFsError::Changed { path: path.clone() }),
        }
        match fs::remove_file(&real) {
            Ok(()) => Ok((Done::Removed { path: path.clone() }, real)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok((Done::Removed { path: path.clone() }, real)),
            Err(e) => Err(io_err(path, "remove")(e)),
        }
    }

    /// Writes one file atomically (the same path as a plan's writes take).
    pub fn write_file(&self, path: &HostPath, content: &[u8], mode: FileMode, role: Role) -> Result<(), HostFsError> {
        let op = Op::Write {
            file: kube_anchor_core::desired::DesiredFile {
                path: path.clone(),
                content: content.to_vec(),
                mode,
                owner: None,
                role,
            },
            sha256: kube_anchor_core::digest::sha256_hex(content),
            reason: kube_anchor_core::plan::WriteReason::Content,
        };
        self.execute(std::slice::from_ref(&op)).map(|_| ()).map_err(|(e, _)| e)
    }

    pub fn ledger_path(state_dir: &HostPath, component: &str) -> Result<HostPath, HostPathError> {
        state_dir.join(&format!("{STATE_SUBDIR}/{}", Ledger::file_name(component)))
    }

    /// The one ledger reader for every verb: the ledger, or why the file there is unusable
    /// (corrupt, another component's, not a regular file, unreadable). Moves nothing.
    pub fn read_ledger(&self, state_dir: &HostPath, component: &str) -> Result<Result<Ledger, String>, HostFsError> {
        Ok(self.read_ledger_known(state_dir, component)?.map(|(ledger, _)| ledger))
    }

    /// [`HostFs::read_ledger`], and whether the bytes read are the ones this process last
    /// stored (durable).
    fn read_ledger_known(
        &self,
        state_dir: &HostPath,
        component: &str,
    ) -> Result<Result<(Ledger, bool), String>, HostFsError> {
        let path = Self::ledger_path(state_dir, component)?;
        let (bytes, meta) = match read_regular_meta(&self.resolve(&path)?, MAX_STATE_BYTES, Follow::No) {
            Ok(read) => read,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Ok((Ledger::new(component), false))),
            Err(source) => return Ok(Err(format!("unreadable: {source}"))),
        };
        let mut known = self.ledgers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(k) = known.get(&path).filter(|k| k.bytes == bytes) {
            let durable = k.stored.is_some_and(|stored| stored == Unchanged::of(&meta));
            return Ok(Ok((k.ledger.clone(), durable)));
        }
        Ok(match Ledger::decode(&bytes) {
            Ok(ledger) if ledger.component == component => {
                known.insert(
                    path,
                    KnownLedger {
                        bytes,
                        ledger: ledger.clone(),
                        stored: None,
                    },
                );
                Ok((ledger, false))
            }
            Ok(ledger) => Err(format!("belongs to component {:?}", ledger.component)),
            Err(CorruptLedger { reason }) => Err(reason),
        })
    }

    /// Reads the ledger; an unusable one is moved aside and reported, never fatal.
    pub fn load_ledger(&self, state_dir: &HostPath, component: &str) -> Result<LoadedLedger, HostFsError> {
        let path = Self::ledger_path(state_dir, component)?;
        let problem = match self.read_ledger_known(state_dir, component)? {
            Ok((ledger, durable)) => {
                return Ok(LoadedLedger {
                    ledger,
                    set_aside: None,
                    durable,
                });
            }
            Err(problem) => problem,
        };
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or_default();
        // A fresh name, never over an earlier one set aside in the same second (this runs
        // under the component's lock).
        let moved_to = (0..100).find_map(|n| {
            let suffix = if n == 0 { String::new() } else { format!("-{n}") };
            let aside = path
                .parent()?
                .join(&format!("{}.corrupt-{stamp}{suffix}", Ledger::file_name(component)))
                .ok()?;
            let (from, to) = (self.resolve(&path).ok()?, self.resolve(&aside).ok()?);
            if fs::symlink_metadata(&to).is_ok() {
                return None;
            }
            fs::rename(from, to).ok().map(|()| aside)
        });
        Ok(LoadedLedger {
            ledger: Ledger::new(component),
            set_aside: Some(SetAside {
                path,
                moved_to,
                reason: problem,
            }),
            durable: false,
        })
    }

    /// Writes the ledger, or removes its file when it is empty. Skips the write when the bytes
    /// on disk are already these.
    pub fn store_ledger(&self, state_dir: &HostPath, ledger: &Ledger) -> Result<(), HostFsError> {
        let path = Self::ledger_path(state_dir, &ledger.component)?;
        if ledger.is_empty() {
            let real = self.resolve(&path)?;
            return match fs::remove_file(&real) {
                Ok(()) => sync_dir(&path, real.parent().expect("has a parent")),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(io_err(&path, "remove")(e)),
            };
        }
        let bytes = ledger.encode();
        if self.read(&path)?.as_deref() == Some(&bytes[..]) {
            return Ok(());
        }
        let mut known = self.ledgers.lock().unwrap_or_else(|e| e.into_inner());
        // Until it is stored, nothing is known of what is there.
        known.remove(&path);
        self.write_file(&path, &bytes, LEDGER_MODE, Role::Credential)?;
        let stored = fs::symlink_metadata(self.resolve(&path)?)
            .ok()
            .map(|m| Unchanged::of(&m));
        known.insert(
            path,
            KnownLedger {
                bytes,
                ledger: ledger.clone(),
                stored,
            },
        );
        Ok(())
    }

    pub fn snapshot_path(state_dir: &HostPath, component: &str) -> Result<HostPath, HostPathError> {
        state_dir.join(&format!("{STATE_SUBDIR}/{}", Snapshot::file_name(component)))
    }

    /// Where a version kept in the revision history has its files (`Revision::snapshot_name`).
    pub fn revision_path(state_dir: &HostPath, component: &str, hash: &str) -> Result<HostPath, HostPathError> {
        state_dir.join(&kube_anchor_core::history::Revision::snapshot_name(component, hash))
    }

    /// Stores the last-known-good files, private (they hold keys).
    pub fn store_snapshot(&self, state_dir: &HostPath, snapshot: &Snapshot) -> Result<(), HostFsError> {
        self.store_snapshot_at(&Self::snapshot_path(state_dir, &snapshot.component)?, snapshot)
    }

    /// Stores a snapshot at `path` in the state dir, private (it holds keys).
    pub fn store_snapshot_at(&self, path: &HostPath, snapshot: &Snapshot) -> Result<(), HostFsError> {
        self.write_file(path, &encode_checked(snapshot), LEDGER_MODE, Role::Credential)
    }

    /// The last-known-good snapshot; a corrupt one is reported as `Err` inside `Ok`, never fatal.
    pub fn load_snapshot(
        &self,
        state_dir: &HostPath,
        component: &str,
    ) -> Result<Option<Result<Snapshot, CorruptLedger>>, HostFsError> {
        self.load_snapshot_at(&Self::snapshot_path(state_dir, component)?)
    }

    /// The snapshot at `path`; a corrupt one is reported as `Err` inside `Ok`, never fatal.
    pub fn load_snapshot_at(&self, path: &HostPath) -> Result<Option<Result<Snapshot, CorruptLedger>>, HostFsError> {
        Ok(self.read(path)?.map(|bytes| decode_checked(&bytes)))
    }

    pub fn remove_snapshot(&self, state_dir: &HostPath, component: &str) -> Result<(), HostFsError> {
        self.remove_snapshot_at(&Self::snapshot_path(state_dir, component)?)
    }

    /// Removes the snapshot at `path`; one already gone is fine.
    pub fn remove_snapshot_at(&self, path: &HostPath) -> Result<(), HostFsError> {
        match fs::remove_file(self.resolve(path)?) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_err(path, "remove")(e)),
        }
    }

    /// Makes `path` a root-owned directory of exactly `mode` (its missing parents get the usual
    /// directory mode), after the same path checks as a write. A symlink or a file there is an
    /// error, never followed or replaced.
    pub fn ensure_dir(&self, path: &HostPath, mode: u32) -> Result<(), HostFsError> {
        let real = self.resolve(path)?;
        let parent = real.parent().expect("below a root");
        self.create_dirs(path, parent, &mut Vec::new())?;
        match fs::DirBuilder::new().mode(mode).create(&real) {
            Ok(()) => sync_dir(path, parent)?,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io_err(path, "create directory")(e)),
        }
        let meta = fs::symlink_metadata(&real).map_err(io_err(path, "inspect"))?;
        if !meta.is_dir() {
            return Err(HostFsError::Io {
                path: path.clone(),
                op: "create directory",
                source: io::Error::other("something else is in the way"),
            });
        }
        // Also after the create: the umask may have narrowed it.
        if meta.mode() & 0o7777 != mode {
            fs::set_permissions(&real, fs::Permissions::from_mode(mode)).map_err(io_err(path, "set directory mode"))?;
        }
        Ok(())
    }

    /// Removes a directory tree we own (checkpoint secrets), after the same path checks as a
    /// write; symlinks inside are removed, never followed. A missing tree is success.
    pub fn remove_tree(&self, path: &HostPath) -> Result<(), HostFsError> {
        let real = self.resolve(path)?;
        match fs::symlink_metadata(&real) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io_err(path, "inspect")(e)),
            Ok(m) if !m.is_dir() => {
                return Err(HostFsError::Io {
                    path: path.clone(),
                    op: "remove tree",
                    source: io::Error::other("not a directory"),
                });
            }
            Ok(_) => {}
        }
        fs::remove_dir_all(&real).map_err(io_err(path, "remove tree"))?;
        sync_dir(path, real.parent().expect("below a root"))
    }

    /// An exclusive lock per component, held while a command changes its files, so that a
    /// one-shot `apply` and the daemon never interleave.
    pub fn lock(&self, state_dir: &HostPath, component: &str) -> Result<File, HostFsError> {
        let (path, file) = self.open_lock_file(state_dir, component)?;
        file.lock().map_err(io_err(&path, "lock"))?;
        Ok(file)
    }

    /// The lock file `<state-dir>/v1/<name>.lock`, opened (created when missing) but not locked:
    /// callers that must not block (the checkpointer polls, so a drain is never stuck behind a
    /// blocked thread) take it with `try_lock`.
    pub fn open_lock_file(&self, state_dir: &HostPath, name: &str) -> Result<(HostPath, File), HostFsError> {
        let path = state_dir.join(&format!("{STATE_SUBDIR}/{name}.lock"))?;
        let real = self.resolve(&path)?;
        self.create_dirs(&path, real.parent().expect("has a parent"), &mut Vec::new())?;
        // Never through a symlink: that would create a file wherever it points.
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&real)
            .map_err(io_err(&path, "open lock file"))?;
        match file.metadata() {
            Ok(m) if m.is_file() => {}
            Ok(_) => {
                return Err(io_err(&path, "open lock file")(io::Error::other("not a regular file")));
            }
            Err(e) => return Err(io_err(&path, "inspect lock file")(e)),
        }
        Ok((path, file))
    }

    /// Whether another process holds `<state-dir>/v1/<name>.lock` (any lock): asks for it
    /// exclusively without waiting, and lets go at once. A missing lock file is held by nobody
    /// and is not created.
    pub fn lock_held(&self, state_dir: &HostPath, name: &str) -> Result<Option<HostPath>, HostFsError> {
        let path = state_dir.join(&format!("{STATE_SUBDIR}/{name}.lock"))?;
        let real = self.resolve(&path)?;
        let file = match fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&real)
        {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err(&path, "open lock file")(e)),
        };
        match file.try_lock() {
            // Dropping the file lets go.
            Ok(()) => Ok(None),
            Err(fs::TryLockError::WouldBlock) => Ok(Some(path)),
            Err(fs::TryLockError::Error(e)) => Err(io_err(&path, "lock")(e)),
        }
    }
}

/// At most this many fsyncs run at once.
const MAX_CONCURRENT_FSYNCS: usize = 16;
/// Up to this many files are fsynced one after the other: a daemon's change (its intent
/// record, a file, the manifest) costs no thread start, whose cost is that of an fsync.
const SEQUENTIAL_FSYNCS: usize = 4;

/// fsyncs `files`: one after the other when there are few, else concurrently (scoped threads
/// with small stacks; the calling thread takes one share itself).
fn sync_files(files: &[(&HostPath, &File)]) -> Result<(), HostFsError> {
    if files.len() <= SEQUENTIAL_FSYNCS {
        return files
            .iter()
            .try_for_each(|(path, f)| f.sync_all().map_err(io_err(path, "fsync")));
    }
    let threads = files.len().min(MAX_CONCURRENT_FSYNCS);
    let share = move |k: usize| {
        files
            .iter()
            .skip(k)
            .step_by(threads)
            .try_for_each(|(path, f)| f.sync_all().map_err(io_err(path, "fsync")))
    };
    std::thread::scope(|scope| {
        let handles: Vec<_> = (1..threads)
            .map(|k| {
                std::thread::Builder::new()
                    .stack_size(64 * 1024)
                    .spawn_scoped(scope, move || share(k))
            })
            .collect();
        let mut result = share(0);
        for (k, handle) in (1..threads).zip(handles) {
            let outcome = match handle {
                Ok(h) => h.join().expect("an fsync thread does not panic"),
                // No thread to be had: that share is done here.
                Err(_) => share(k),
            };
            if result.is_ok() {
                result = outcome;
            }
        }
        result
    })?;
    Ok(())
}

/// Creates the temp file beside `real` with its final mode and owner and writes it (the caller
/// fsyncs it).
fn stage(
    path: &HostPath,
    real: &Path,
    content: &[u8],
    mode: FileMode,
    owner: Option<Owner>,
) -> Result<NamedTempFile, HostFsError> {
    stage_file(real, mode, owner, |file| file.write_all(content)).map_err(|(op, e)| io_err(path, op)(e))
}

/// The first half of the one atomic write: a dot-prefixed temp file in `target`'s directory
/// (`.<name>.<random>.kube-anchor.tmp`), created with its final mode (never a moment of wider
/// permissions) and owner, then filled by `fill`. Removed on drop unless [`commit_file`] (or the
/// executor) renames it. On error: the step that failed and why.
pub fn stage_file(
    target: &Path,
    mode: FileMode,
    owner: Option<Owner>,
    fill: impl FnOnce(&mut File) -> io::Result<()>,
) -> Result<NamedTempFile, (&'static str, io::Error)> {
    let dir = target.parent().ok_or((
        "create temp file",
        io::Error::new(io::ErrorKind::InvalidInput, "no parent directory"),
    ))?;
    let name = target.file_name().unwrap_or_default().to_string_lossy();
    let mut temp = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(TEMP_SUFFIX)
        .permissions(fs::Permissions::from_mode(mode.0))
        .tempfile_in(dir)
        .map_err(|e| ("create temp file", e))?;
    let file = temp.as_file_mut();
    // Again on the open file: creation applied the umask.
    file.set_permissions(fs::Permissions::from_mode(mode.0))
        .map_err(|e| ("set mode", e))?;
    if let Some(owner) = owner {
        std::os::unix::fs::fchown(&*file, Some(owner.uid), Some(owner.gid)).map_err(|e| ("set owner", e))?;
    }
    fill(file).map_err(|e| ("write", e))?;
    Ok(temp)
}

/// The second half, for a file written on its own: fsync the temp file, rename it over
/// `target`, fsync the directory. (The executor does the same for a whole plan, with its fsyncs
/// batched.)
pub fn commit_file(temp: NamedTempFile, target: &Path) -> Result<(), (&'static str, io::Error)> {
    temp.as_file().sync_all().map_err(|e| ("fsync", e))?;
    temp.persist(target).map_err(|e| ("rename", e.error))?;
    let dir = target.parent().expect("staged beside it");
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| ("fsync directory", e))
}

fn observe_real(path: &HostPath, real: &Path) -> Result<Observed, HostFsError> {
    let meta = match fs::symlink_metadata(real) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Observed::Missing),
        Err(e) => return Err(io_err(path, "inspect")(e)),
    };
    observe_meta(path, real, meta).map(|(observed, _)| observed)
}

/// What `meta` (the `lstat` of `real`) shows; a regular file is read and hashed, and then also
/// returned is the `lstat` of what was read when it is the file `meta` described and nothing
/// changed it while it was read (else `None`: not to be remembered).
fn observe_meta(
    path: &HostPath,
    real: &Path,
    meta: fs::Metadata,
) -> Result<(Observed, Option<Unchanged>), HostFsError> {
    let kind = meta.file_type();
    if kind.is_symlink() {
        return Ok((Observed::Symlink, None));
    }
    if !kind.is_file() {
        return Ok((
            Observed::Other {
                kind: if kind.is_dir() { "directory" } else { "special file" },
            },
            None,
        ));
    }
    // Checked again on the open file: whatever was swapped in since is never read through.
    let (mut file, _) = open_regular(real, Follow::No).map_err(|source| match source.kind() {
        io::ErrorKind::PermissionDenied => HostFsError::Unreadable {
            path: path.clone(),
            owner: Owner {
                uid: meta.uid(),
                gid: meta.gid(),
            },
            mode: FileMode(meta.mode() & 0o7777),
            source,
        },
        _ => io_err(path, "open")(source),
    })?;
    let mut hasher = Sha256::new();
    let mut buf = [0u8; 64 * 1024];
    loop {
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => hasher.update(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_err(path, "read")(e)),
        }
    }
    let before = Unchanged::of(&meta);
    let read = file
        .metadata()
        .ok()
        .map(|m| Unchanged::of(&m))
        .filter(|after| *after == before);
    Ok((
        Observed::File {
            sha256: hex::encode(hasher.finalize()),
            mode: FileMode(meta.mode() & 0o7777),
            owner: Owner {
                uid: meta.uid(),
                gid: meta.gid(),
            },
        },
        read,
    ))
}

/// Whether the last component of a path may be a symlink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Follow {
    /// Inputs from mounted ConfigMaps and Secrets are symlinks into `..data`.
    Yes,
    /// Host files and state are never read through a symlink.
    No,
}

/// Opens a file for reading only when it is a regular file. Non-blocking, so a FIFO with no
/// writer never hangs the open; `fstat` on the open file refuses FIFOs, devices, sockets and
/// directories, naming what was found.
pub(crate) fn open_regular(path: &Path, follow: Follow) -> io::Result<(File, fs::Metadata)> {
    let mut flags = libc::O_NONBLOCK;
    if follow == Follow::No {
        flags |= libc::O_NOFOLLOW;
    }
    let file = fs::OpenOptions::new().read(true).custom_flags(flags).open(path)?;
    let meta = file.metadata()?;
    let kind = meta.file_type();
    if kind.is_file() {
        return Ok((file, meta));
    }
    let what = if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "a special file"
    };
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("is {what}, not a regular file"),
    ))
}

/// Reads a regular file (see [`open_regular`]) of at most `limit` bytes. The bound holds while
/// reading, so a file that grows is refused as soon as it passes the limit.
pub fn read_regular(path: &Path, limit: u64, follow: Follow) -> io::Result<Vec<u8>> {
    read_regular_meta(path, limit, follow).map(|(bytes, _)| bytes)
}

/// Which file a path leads to and its state (device, inode, size, mode, owner, times): what
/// was read from it stands while its identity is the same (the daemon's kept inputs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileIdentity(Unchanged);

/// [`read_regular`], with the identity of the file read (its `fstat` before the read): a later
/// [`identity`] that differs means it may hold other bytes.
pub fn read_regular_identified(path: &Path, limit: u64, follow: Follow) -> io::Result<(Vec<u8>, FileIdentity)> {
    read_regular_meta(path, limit, follow).map(|(bytes, meta)| (bytes, FileIdentity(Unchanged::of(&meta))))
}

/// The identity of the file at `path` now (symlinks followed with [`Follow::Yes`]); `None` when
/// there is none to be had.
pub fn identity(path: &Path, follow: Follow) -> Option<FileIdentity> {
    let meta = match follow {
        Follow::Yes => fs::metadata(path),
        Follow::No => fs::symlink_metadata(path),
    };
    meta.ok().map(|m| FileIdentity(Unchanged::of(&m)))
}

/// [`read_regular`], with the `fstat` of the file read.
fn read_regular_meta(path: &Path, limit: u64, follow: Follow) -> io::Result<(Vec<u8>, fs::Metadata)> {
    let (file, meta) = open_regular(path, follow)?;
    let too_large = || {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("larger than the limit of {limit} bytes"),
        )
    };
    let size = meta.len();
    if size > limit {
        return Err(too_large());
    }
    let mut bytes = Vec::with_capacity(size as usize);
    file.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(too_large());
    }
    Ok((bytes, meta))
}

fn sync_dir(path: &HostPath, dir: &Path) -> Result<(), HostFsError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(path, "fsync directory"))
}

fn sync_dirs(dirs: &mut Vec<(HostPath, PathBuf)>) -> Result<(), HostFsError> {
    for (host, real) in dirs.drain(..) {
        sync_dir(&host, &real)?;
    }
    Ok(())
}

/// `root` (canonical) joined with `rel` when no existing component of `rel` is a symlink or
/// anything but a directory, the missing tail appended as [`canonicalize_existing_prefix`] does,
/// with the device and inode of the last component when every one exists; `None` otherwise
/// (that path then decides).
fn plain_below(root: &Path, rel: &Path) -> io::Result<Option<(PathBuf, Option<DirId>)>> {
    let mut out = root.to_path_buf();
    let mut components = rel.components();
    let mut id = None;
    while let Some(component) = components.next() {
        let std::path::Component::Normal(name) = component else {
            return Ok(None);
        };
        out.push(name);
        match fs::symlink_metadata(&out) {
            Ok(m) if m.is_dir() => id = Some((m.dev(), m.ino())),
            Ok(_) => return Ok(None),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                out.extend(components);
                return Ok(Some((out, None)));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(Some((out, id)))
}

/// `canonicalize` for a path whose tail may not exist yet: the deepest existing ancestor is
/// canonicalized (following symlinks) and the missing components are appended.
fn canonicalize_existing_prefix(path: &Path) -> io::Result<PathBuf> {
    let mut existing = path;
    let mut tail = Vec::new();
    loop {
        match fs::canonicalize(existing) {
            Ok(real) => {
                let mut out = real;
                out.extend(tail.iter().rev());
                return Ok(out);
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                tail.push(existing.file_name().ok_or(e)?.to_owned());
                existing = existing
                    .parent()
                    .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;
    use kube_anchor_core::desired::DesiredFile;
    use kube_anchor_core::digest::sha256_hex;
    use kube_anchor_core::plan::WriteReason;

    struct Node {
        dir: tempfile::TempDir,
        fs: HostFs,
    }

    fn node() -> Node {
        let dir = tempfile::tempdir().unwrap();
        let roots = AllowedRoots::new([hp("/etc/kubernetes"), hp("/var/lib/kube-anchor")]);
        let fs = HostFs::new(dir.path(), roots).unwrap();
        Node { dir, fs }
    }

    fn hp(s: &str) -> HostPath {
        HostPath::parse(s).unwrap()
    }

    fn write_op(path: &str, content: &str, mode: u32, role: Role) -> Op {
        Op::Write {
            file: DesiredFile {
                path: hp(path),
                content: content.into(),
                mode: FileMode(mode),
                owner: None,
                role,
            },
            sha256: sha256_hex(content.as_bytes()),
            reason: WriteReason::Create,
        }
    }

    impl Node {
        fn real(&self, p: &str) -> PathBuf {
            self.dir.path().join(p.trim_start_matches('/'))
        }
    }

    #[test]
    fn ensure_dir_gives_the_leaf_its_own_mode_and_never_follows_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let roots = AllowedRoots::new([hp("/etc/kubernetes")]);
        let fs = HostFs::new(dir.path(), roots).unwrap().with_dir_mode(0o700);
        let mode = |p: &str| fs::metadata(dir.path().join(p)).unwrap().mode() & 0o7777;
        fs.ensure_dir(&hp("/etc/kubernetes/cs/ns/pod/vol"), 0o755).unwrap();
        assert_eq!(mode("etc/kubernetes/cs/ns/pod"), 0o700);
        assert_eq!(mode("etc/kubernetes/cs/ns/pod/vol"), 0o755);
        // An existing directory of another mode is set to it.
        fs::set_permissions(
            dir.path().join("etc/kubernetes/cs/ns/pod/vol"),
            fs::Permissions::from_mode(0o700),
        )
        .unwrap();
        fs.ensure_dir(&hp("/etc/kubernetes/cs/ns/pod/vol"), 0o755).unwrap();
        assert_eq!(mode("etc/kubernetes/cs/ns/pod/vol"), 0o755);
        // A symlink in its place is an error; what it points at keeps its mode.
        let elsewhere = dir.path().join("elsewhere");
        fs::create_dir(&elsewhere).unwrap();
        fs::set_permissions(&elsewhere, fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::symlink(&elsewhere, dir.path().join("etc/kubernetes/cs/ns/pod/link")).unwrap();
        assert!(fs.ensure_dir(&hp("/etc/kubernetes/cs/ns/pod/link"), 0o755).is_err());
        assert_eq!(mode("elsewhere"), 0o700);
    }

    #[test]
    fn writes_with_exact_mode_and_creates_parents() {
        let n = node();
        let done =
            n.fs.execute(&[write_op("/etc/kubernetes/pki/key", "K", 0o600, Role::Credential)])
                .unwrap();
        assert_eq!(done.len(), 1);
        let meta = fs::metadata(n.real("/etc/kubernetes/pki/key")).unwrap();
        assert_eq!(meta.mode() & 0o7777, 0o600);
        assert_eq!(fs::read(n.real("/etc/kubernetes/pki/key")).unwrap(), b"K");
        assert_eq!(
            fs::metadata(n.real("/etc/kubernetes/pki")).unwrap().mode() & 0o777,
            0o755
        );
        // Modes wider than the umask allows at creation are still exact.
        n.fs.execute(&[write_op("/etc/kubernetes/pki/ca", "C", 0o664, Role::Credential)])
            .unwrap();
        assert_eq!(
            fs::metadata(n.real("/etc/kubernetes/pki/ca")).unwrap().mode() & 0o7777,
            0o664
        );
    }

    #[test]
    fn symlinked_parent_leading_outside_is_refused() {
        let n = node();
        let outside = tempfile::tempdir().unwrap();
        fs::create_dir_all(n.real("/etc/kubernetes")).unwrap();
        symlink(outside.path(), n.real("/etc/kubernetes/pki")).unwrap();
        let err =
            n.fs.execute(&[write_op("/etc/kubernetes/pki/key", "K", 0o600, Role::Credential)])
                .unwrap_err()
                .0;
        assert!(matches!(err, HostFsError::Escape { .. }), "{err}");
        assert!(
            fs::read_dir(outside.path()).unwrap().next().is_none(),
            "nothing written outside"
        );
    }

    /// A directory checked once is taken again only while its path still leads to that very
    /// directory: swapped for a symlink leading outside, at its own place or above it, after
    /// a write through it, it is refused as on the first look.
    #[test]
    fn a_directory_found_plain_once_and_swapped_for_a_symlink_is_refused() {
        for swapped in ["/etc/kubernetes/pki", "/etc/kubernetes"] {
            let n = node();
            let outside = tempfile::tempdir().unwrap();
            fs::create_dir_all(outside.path().join("pki")).unwrap();
            // The first write creates the directories, the second finds them plain.
            for content in ["K0", "K1"] {
                n.fs.execute(&[write_op("/etc/kubernetes/pki/key", content, 0o600, Role::Credential)])
                    .unwrap();
            }
            fs::rename(n.real(swapped), n.dir.path().join("moved")).unwrap();
            let target = if swapped.ends_with("pki") {
                outside.path().join("pki")
            } else {
                outside.path().to_path_buf()
            };
            symlink(&target, n.real(swapped)).unwrap();
            let err =
                n.fs.execute(&[write_op("/etc/kubernetes/pki/key", "K2", 0o600, Role::Credential)])
                    .unwrap_err()
                    .0;
            assert!(matches!(err, HostFsError::Escape { .. }), "{swapped}: {err}");
            assert!(
                fs::read_dir(outside.path().join("pki")).unwrap().next().is_none(),
                "{swapped}: nothing written outside"
            );
        }
    }

    #[test]
    fn symlinked_allowed_root_leading_outside_the_host_root_is_refused() {
        let n = node();
        let outside = tempfile::tempdir().unwrap();
        fs::create_dir_all(n.real("/etc")).unwrap();
        symlink(outside.path(), n.real("/etc/kubernetes")).unwrap();
        let err = n.fs.resolve(&hp("/etc/kubernetes/manifests/a.yaml")).unwrap_err();
        assert!(matches!(err, HostFsError::Escape { .. }), "{err}");
    }

    #[test]
    fn symlink_at_destination_is_replaced_not_followed() {
        let n = node();
        let outside = tempfile::tempdir().unwrap();
        let victim = outside.path().join("victim");
        fs::write(&victim, "precious").unwrap();
        fs::create_dir_all(n.real("/etc/kubernetes")).unwrap();
        symlink(&victim, n.real("/etc/kubernetes/key")).unwrap();
        assert_eq!(n.fs.observe(&hp("/etc/kubernetes/key")).unwrap(), Observed::Symlink);
        n.fs.execute(&[write_op("/etc/kubernetes/key", "K", 0o600, Role::Credential)])
            .unwrap();
        assert_eq!(fs::read(&victim).unwrap(), b"precious");
        assert!(fs::symlink_metadata(n.real("/etc/kubernetes/key")).unwrap().is_file());
    }

    #[test]
    fn a_failing_stage_leaves_everything_as_it_was() {
        let n = node();
        n.fs.execute(&[write_op("/etc/kubernetes/a", "old", 0o600, Role::Credential)])
            .unwrap();
        // The second write cannot be staged: a directory stands where its parent should be... a file.
        fs::write(n.real("/etc/kubernetes/blocker"), "x").unwrap();
        let ops = [
            write_op("/etc/kubernetes/a", "new", 0o600, Role::Credential),
            write_op("/etc/kubernetes/new-dir/b", "b", 0o600, Role::Credential),
            write_op("/etc/kubernetes/blocker/c", "c", 0o600, Role::Manifest),
        ];
        let (err, done) = n.fs.execute(&ops).unwrap_err();
        assert!(done.is_empty());
        assert!(err.to_string().starts_with("/etc/kubernetes/blocker/c: "), "{err}");
        assert_eq!(fs::read(n.real("/etc/kubernetes/a")).unwrap(), b"old");
        assert!(
            !n.real("/etc/kubernetes/new-dir").exists(),
            "created dirs are rolled back"
        );
        let names: Vec<_> = fs::read_dir(n.real("/etc/kubernetes"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 2, "no temp files left: {names:?}");
    }

    #[test]
    fn remove_rechecks_content() {
        let n = node();
        n.fs.execute(&[write_op("/etc/kubernetes/a", "mine", 0o600, Role::Credential)])
            .unwrap();
        fs::write(n.real("/etc/kubernetes/a"), "theirs").unwrap();
        let op = Op::Remove {
            path: hp("/etc/kubernetes/a"),
            role: Role::Credential,
            expected_sha256: sha256_hex(b"mine"),
        };
        let (err, _) = n.fs.execute(&[op]).unwrap_err();
        assert!(matches!(err, HostFsError::Changed { .. }));
        assert_eq!(fs::read(n.real("/etc/kubernetes/a")).unwrap(), b"theirs");
    }

    #[test]
    fn stale_temps_of_our_files_only_are_cleaned() {
        let n = node();
        fs::create_dir_all(n.real("/etc/kubernetes/manifests")).unwrap();
        let ours = n.real("/etc/kubernetes/manifests/.a.yaml.XyZ12.kube-anchor.tmp");
        let other_file = n.real("/etc/kubernetes/manifests/.b.yaml.XyZ12.kube-anchor.tmp");
        let foreign = n.real("/etc/kubernetes/manifests/.a.yaml.swp");
        for f in [&ours, &other_file, &foreign] {
            fs::write(f, "x").unwrap();
        }
        let removed = n.fs.clean_stale_temps([&hp("/etc/kubernetes/manifests/a.yaml")]);
        assert_eq!(removed.len(), 1);
        assert!(!ours.exists() && other_file.exists() && foreign.exists());
    }

    #[test]
    fn an_observation_is_taken_again_only_while_the_file_shows_the_same_lstat() {
        let mut n = node();
        n.fs.settled = std::time::Duration::ZERO;
        let path = hp("/etc/kubernetes/a.conf");
        let real = n.real("/etc/kubernetes/a.conf");
        fs::create_dir_all(real.parent().unwrap()).unwrap();
        fs::write(&real, "one").unwrap();
        let one = n.fs.observe(&path).unwrap();
        assert!(matches!(&one, Observed::File { sha256, .. } if *sha256 == sha256_hex(b"one")));
        // What is remembered is what the next observation gives, unread: a stand-in shows it.
        let stand_in = Observed::Other { kind: "remembered" };
        n.fs.observed.lock().unwrap().get_mut(&real).unwrap().1 = stand_in.clone();
        assert_eq!(n.fs.observe(&path).unwrap(), stand_in);
        // Replaced (a new inode), written in place, chmod: read again.
        fs::write(n.real("/etc/kubernetes/.new"), "two").unwrap();
        fs::rename(n.real("/etc/kubernetes/.new"), &real).unwrap();
        assert!(matches!(n.fs.observe(&path).unwrap(), Observed::File { sha256, .. } if sha256 == sha256_hex(b"two")));
        n.fs.observed.lock().unwrap().get_mut(&real).unwrap().1 = stand_in.clone();
        fs::write(&real, "three!").unwrap();
        assert!(
            matches!(n.fs.observe(&path).unwrap(), Observed::File { sha256, .. } if sha256 == sha256_hex(b"three!"))
        );
        n.fs.observed.lock().unwrap().get_mut(&real).unwrap().1 = stand_in.clone();
        fs::set_permissions(&real, fs::Permissions::from_mode(0o640)).unwrap();
        assert!(matches!(n.fs.observe(&path).unwrap(), Observed::File { mode, .. } if mode == FileMode(0o640)));
        // Forgotten (an event named it, or the resync): read again.
        n.fs.observed.lock().unwrap().get_mut(&real).unwrap().1 = stand_in.clone();
        n.fs.forget_observed([real.as_path()]);
        assert!(matches!(n.fs.observe(&path).unwrap(), Observed::File { .. }));
        n.fs.observed.lock().unwrap().get_mut(&real).unwrap().1 = stand_in.clone();
        n.fs.forget_all_observed();
        assert!(matches!(n.fs.observe(&path).unwrap(), Observed::File { .. }));
        // Deleted: missing, whatever was remembered.
        fs::remove_file(&real).unwrap();
        assert_eq!(n.fs.observe(&path).unwrap(), Observed::Missing);
        // A file changed less than the settle time before it was read is read every time: a
        // write in the same tick of the file system's clock would leave its lstat as it was.
        n.fs.settled = SETTLED;
        fs::write(&real, "four").unwrap();
        n.fs.observe(&path).unwrap();
        assert!(n.fs.observed.lock().unwrap().get(&real).is_none());
    }

    /// A ledger of component `c` with one entry.
    fn a_ledger() -> Ledger {
        let mut l = Ledger::new("c");
        l.content_hash = Some("x".into());
        l.record(kube_anchor_core::ledger::LedgerEntry {
            path: hp("/etc/kubernetes/a"),
            sha256: "s".into(),
            mode: FileMode(0o600),
            owner: None,
            role: Role::Credential,
            written_at: "t".into(),
            previous_sha256: None,
            original: None,
            renewed_on_node: false,
        });
        l
    }

    #[test]
    fn a_ledger_is_durable_only_as_the_very_file_this_process_stored() {
        let n = node();
        let state = hp("/var/lib/kube-anchor");
        let l = a_ledger();
        assert!(!n.fs.load_ledger(&state, "c").unwrap().durable, "none stored yet");
        n.fs.store_ledger(&state, &l).unwrap();
        let loaded = n.fs.load_ledger(&state, "c").unwrap();
        assert!(loaded.durable);
        assert_eq!(loaded.ledger, l);
        // The same bytes stored by another writer (another process): not known to be durable.
        let file = n.real("/var/lib/kube-anchor/v1/c.json");
        let bytes = fs::read(&file).unwrap();
        fs::remove_file(&file).unwrap();
        fs::write(&file, &bytes).unwrap();
        let loaded = n.fs.load_ledger(&state, "c").unwrap();
        assert!(!loaded.durable);
        assert_eq!(loaded.ledger, l);
        // Another ledger there: read as it is, not as remembered.
        let mut other = l.clone();
        other.content_hash = Some("y".into());
        let other_fs = HostFs::new(n.dir.path(), n.fs.roots.clone()).unwrap();
        other_fs.store_ledger(&state, &other).unwrap();
        let loaded = n.fs.load_ledger(&state, "c").unwrap();
        assert!(!loaded.durable);
        assert_eq!(loaded.ledger, other);
    }

    #[test]
    fn corrupt_ledger_is_set_aside() {
        let n = node();
        let state = hp("/var/lib/kube-anchor");
        let l = a_ledger();
        n.fs.store_ledger(&state, &l).unwrap();
        assert_eq!(n.fs.load_ledger(&state, "c").unwrap().ledger, l);
        let file = n.real("/var/lib/kube-anchor/v1/c.json");
        assert_eq!(fs::metadata(&file).unwrap().mode() & 0o777, 0o600);
        fs::write(&file, "{garbage").unwrap();
        let loaded = n.fs.load_ledger(&state, "c").unwrap();
        assert!(loaded.ledger.is_empty());
        let aside = loaded.set_aside.unwrap();
        assert!(
            aside
                .moved_to
                .unwrap()
                .to_string()
                .starts_with("/var/lib/kube-anchor/v1/c.json.corrupt-")
        );
        assert!(!file.exists());
        // Another one set aside in the same second keeps the first, and a directory there too.
        fs::write(&file, "{more garbage").unwrap();
        let second =
            n.fs.load_ledger(&state, "c")
                .unwrap()
                .set_aside
                .unwrap()
                .moved_to
                .unwrap();
        fs::create_dir(&file).unwrap();
        let third =
            n.fs.load_ledger(&state, "c")
                .unwrap()
                .set_aside
                .unwrap()
                .moved_to
                .unwrap();
        let names: BTreeSet<String> = fs::read_dir(n.real("/var/lib/kube-anchor/v1"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.starts_with("c.json.corrupt-"))
            .collect();
        assert_eq!(names.len(), 3, "{names:?} ({second}, {third})");
        assert!(!file.exists());
    }

    #[test]
    #[allow(unsafe_code)] // one fcntl to take etcd's kind of lock, which std does not offer
    fn a_write_lock_such_as_etcds_is_seen_and_none_is_left_behind() {
        use std::os::fd::AsRawFd;
        let dir = tempfile::tempdir().unwrap();
        let wal = dir.path().join("0000000000000000-0000000000000000.wal");
        fs::write(&wal, b"wal").unwrap();
        assert!(!write_locked(&wal).unwrap());
        assert!(!write_locked(&dir.path().join("missing.wal")).unwrap());
        // etcd's lock: an open file description write lock (F_OFD_SETLK), which conflicts with
        // the record lock asked for even from the same process.
        let holder = fs::OpenOptions::new().write(true).open(&wal).unwrap();
        // SAFETY: a zeroed `flock` is a valid value; fcntl only reads it.
        let mut lock: libc::flock = unsafe { std::mem::zeroed() };
        lock.l_type = libc::F_WRLCK as _;
        lock.l_whence = libc::SEEK_SET as _;
        // SAFETY: a valid descriptor and a valid `flock`.
        assert_eq!(unsafe { libc::fcntl(holder.as_raw_fd(), libc::F_OFD_SETLK, &lock) }, 0);
        assert!(write_locked(&wal).unwrap());
        drop(holder);
        assert!(!write_locked(&wal).unwrap(), "released with its holder");
    }
}
