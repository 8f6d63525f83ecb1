//! The file engine every mode stands on: load inputs, decide ([`kube_anchor_core::plan`]), carry out
//! ([`kube_anchor_host::hostfs`]), remember ([`kube_anchor_core::ledger`]). One-shot verbs and the daemon call these.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use kube_anchor_core::config::{self, Anchor, ConfigError, FileMode, Role};
use kube_anchor_core::desired::{self, Desired, DesiredError};
use kube_anchor_core::digest::sha256_hex;
use kube_anchor_core::hostpath::{AllowedRoots, HostPath, HostPathError};
use kube_anchor_core::ledger::{Ledger, LedgerEntry, Original, Paused, Snapshot};
use kube_anchor_core::plan::{self, FileStatus, Notice, Op, PlanError, WriteReason};
use kube_anchor_core::render::Variables;
use kube_anchor_host::hostfs::{
    Done, FileIdentity, Follow, HostFs, HostFsError, MAX_INPUT_BYTES, MAX_TOTAL_INPUT_BYTES, SetAside, identity,
    read_regular_identified, reader,
};

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("{}: cannot read ({field} of {}): {source}", .path.display(), .config.display())]
    Source {
        path: PathBuf,
        field: String,
        config: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Desired(#[from] DesiredError),
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error("refusing this version, nothing written: {0}")]
    Credentials(Box<kube_anchor_core::credentials::CredentialError>),
    #[error(transparent)]
    HostFs(#[from] HostFsError),
    #[error(transparent)]
    Path(#[from] HostPathError),
    /// The files are in place and the intent record covers them (`remove` takes them), but the
    /// final record could not be stored; the next apply completes it.
    #[error("{component}: {written} file(s) were written, but the ledger could not be updated: {source}")]
    LedgerAfterWrite {
        component: String,
        written: usize,
        source: HostFsError,
    },
    /// `run`: a ConfigMap/Secret volume swapped `..data` during every read of the inputs.
    #[error("{}: the inputs changed during each of {reads} reads (a volume swapping `..data`); the node keeps what it has until they settle", .config.display())]
    InputsChanging { config: PathBuf, reads: usize },
    /// `spec.etcdMember`: this node is not a member yet, so no manifest can be rendered.
    #[error("{component}: etcd membership: {reason}; nothing written yet")]
    MembershipPending { component: String, reason: String },
    /// A promotion or rollback that raced another writer of the node (an operator's `rollback`
    /// while the anchor runs): nothing recorded.
    #[error("{component}: {hash}: {reason}")]
    NotWhatTheNodeRuns {
        component: String,
        hash: String,
        reason: String,
    },
    /// `rollback --to` names no version this node can go back to.
    #[error("{component}: {reason}")]
    NoRevision { component: String, reason: String },
    #[error("{component} was decommissioned on this node at {at} ({reason}); not writing it again")]
    Decommissioned {
        component: String,
        at: String,
        reason: String,
    },
    #[error(
        "{component} is paused on this node since {at} ({reason}); an anchor writes nothing until `kube-anchor resume --component {component}`"
    )]
    Paused {
        component: String,
        at: String,
        reason: String,
    },
}

impl EngineError {
    /// An error of the inputs (the config, a source, the version they render, a volume that
    /// keeps swapping): it stops a new version, not the repair of the version accepted before.
    pub fn is_input(&self) -> bool {
        matches!(
            self,
            Self::Config(_) | Self::Source { .. } | Self::Desired(_) | Self::InputsChanging { .. }
        )
    }
}

/// Where the engine works: the node's filesystem and the state dir on it.
#[derive(Debug, Clone)]
pub struct Engine {
    pub fs: HostFs,
    pub state_dir: HostPath,
    /// How many passed and failed versions the revision history keeps.
    pub retention: kube_anchor_core::history::Retention,
    /// The paths whose leftover temp files this process has looked for: only a killed writer
    /// leaves one, so once per path is enough (not a directory listing at every sync).
    temps_cleaned: std::sync::Arc<std::sync::Mutex<std::collections::BTreeSet<HostPath>>>,
}

/// What an apply did, file by file.
#[derive(Debug, Clone, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ApplyReport {
    pub component: String,
    pub content_hash: String,
    pub written: Vec<(HostPath, WriteReason)>,
    pub removed: Vec<HostPath>,
    /// Files kube-anchor did not write that this apply replaced: kept in the state dir, put
    /// back by `remove`.
    pub replaced: Vec<HostPath>,
    /// Paths given back their kept original (with `--prune`).
    pub restored: Vec<HostPath>,
    pub unchanged: Vec<HostPath>,
    /// Among `unchanged`: files that already held what the config wants and are now recorded
    /// as written by kube-anchor (no ledger entry, or a stale one).
    pub adopted: Vec<HostPath>,
    /// Credentials renewed on the node and kept (design.md, "Renewals made on the node").
    pub renewed: Vec<HostPath>,
    /// Credentials changed on the node whose repair waits (`Engine::apply_holding`).
    #[serde(skip)]
    pub held: Vec<HostPath>,
    #[serde(skip)]
    pub notices: Vec<Notice>,
    #[serde(skip)]
    pub set_aside: Option<SetAside>,
    pub cleaned_temps: Vec<HostPath>,
}

impl ApplyReport {
    pub fn changed(&self) -> bool {
        !self.written.is_empty() || !self.removed.is_empty() || !self.restored.is_empty()
    }
}

/// What `apply --dry-run` shows.
#[derive(Debug, Clone)]
pub struct Preview {
    pub component: String,
    pub content_hash: String,
    pub changes: Vec<PreviewChange>,
    pub notices: Vec<Notice>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreviewAction {
    Write(WriteReason),
    Remove,
    /// A removal that puts back the file the path held before kube-anchor wrote it.
    Restore,
}

#[derive(Debug, Clone)]
pub struct PreviewChange {
    pub path: HostPath,
    pub role: Role,
    pub action: PreviewAction,
    /// The write replaces a file kube-anchor did not write; it would be kept first.
    pub keeps_original: bool,
    pub before: Option<Vec<u8>>,
    pub before_mode: Option<config::FileMode>,
    pub after: Option<Vec<u8>>,
    pub after_mode: Option<config::FileMode>,
}

#[derive(Debug, Clone, Default)]
pub struct RemoveReport {
    pub component: String,
    pub removed: Vec<HostPath>,
    /// Paths given back the file they held before kube-anchor first wrote them.
    pub restored: Vec<HostPath>,
    /// Manifests removed whose original (the static pod there before kube-anchor's) is not put
    /// back: where it is kept, to copy back by hand.
    pub originals_kept: Vec<(HostPath, HostPath)>,
    pub notices: Vec<Notice>,
    pub set_aside: Option<SetAside>,
}

#[derive(Debug, Clone)]
pub struct StatusReport {
    pub component: String,
    pub content_hash: String,
    pub recorded_hash: Option<String>,
    pub last_known_good: Option<String>,
    pub bad: Vec<kube_anchor_core::ledger::BadVersion>,
    pub last_known_good_failing: Option<kube_anchor_core::ledger::BadVersion>,
    /// `kube-anchor pause` holds the component's anchors on this node.
    pub paused: Option<Paused>,
    /// The kubelet's pre-start step put this version back after a reboot in its trial.
    pub interrupted: Option<kube_anchor_core::ledger::Interrupted>,
    /// The revision history, newest first.
    pub history: Vec<kube_anchor_core::history::Revision>,
    pub files: Vec<FileStatus>,
    pub set_aside: Option<SetAside>,
    /// The certificates of the credentials the component has on the node.
    pub certificates: Vec<kube_anchor_core::credentials::Expiry>,
}

impl StatusReport {
    /// Every file holds what the config wants, or a renewal of it kept on purpose.
    pub fn in_sync(&self) -> bool {
        self.files
            .iter()
            .all(|f| matches!(f.state, plan::FileState::InSync | plan::FileState::RenewedOnNode))
    }
}

/// A loaded config and the bytes of its sources: everything read before any decision.
#[derive(Debug, Clone)]
pub struct Inputs {
    pub anchor: Anchor,
    pub sources: Vec<Vec<u8>>,
    /// Variable values given on the command line (`bootstrap`'s node name and address), which
    /// take the place of the environment's.
    pub given: std::collections::BTreeMap<String, String>,
    /// The files read: the config's and each source's identity when it was read.
    pub read: Vec<(PathBuf, FileIdentity)>,
}

impl Inputs {
    pub fn load(config_path: &Path, roots: &AllowedRoots) -> Result<Self, EngineError> {
        let (anchor, config_read) = load_config_identified(config_path, roots)?;
        let mut read = vec![(config_path.to_path_buf(), config_read)];
        let mut sources = Vec::with_capacity(anchor.files.len());
        let credentials = anchor.files.iter().filter(|f| f.role == Role::Credential).count();
        let mut total = 0u64;
        for (i, spec) in anchor.files.iter().enumerate() {
            let unreadable = |source| EngineError::Source {
                path: spec.source.clone(),
                field: if i < credentials {
                    format!("spec.files[{i}].source")
                } else {
                    "spec.manifest.source".into()
                },
                config: config_path.into(),
                source,
            };
            // Mounted ConfigMap and Secret files are symlinks into `..data`: followed.
            let left = MAX_INPUT_BYTES.min(MAX_TOTAL_INPUT_BYTES - total);
            let (bytes, identity) = read_regular_identified(&spec.source, left, Follow::Yes).map_err(|e| {
                unreadable(
                    if left < MAX_INPUT_BYTES && e.kind() == std::io::ErrorKind::InvalidData {
                        std::io::Error::new(
                            e.kind(),
                            format!("the sources together are larger than the limit of {MAX_TOTAL_INPUT_BYTES} bytes"),
                        )
                    } else {
                        e
                    },
                )
            })?;
            total += bytes.len() as u64;
            sources.push(bytes);
            read.push((spec.source.clone(), identity));
        }
        Ok(Self {
            anchor,
            sources,
            given: Default::default(),
            read,
        })
    }

    /// Whether every file read still is the file it was (the same identity): else it may hold
    /// other bytes, even with no event in a watched directory (a source symlinked from
    /// elsewhere, a file replaced inside a volume's generation).
    pub fn unchanged(&self) -> bool {
        self.read
            .iter()
            .all(|(path, read)| identity(path, Follow::Yes) == Some(*read))
    }

    /// The variables the config allows, with their values from the process environment.
    pub fn environment_variables(&self) -> Variables {
        self.variables(None)
    }

    /// The variables from the environment (or [`Inputs::given`]), except the initial-cluster pair of `spec.etcdMember`,
    /// which only the membership record gives (never the environment).
    pub fn variables(&self, membership: Option<&kube_anchor_core::membership::Record>) -> Variables {
        use kube_anchor_core::config::{ETCD_INITIAL_CLUSTER, ETCD_INITIAL_CLUSTER_STATE};
        let managed = self.anchor.etcd_member.is_some();
        Variables::new(self.anchor.variables.iter().cloned(), |name| match name {
            ETCD_INITIAL_CLUSTER if managed => membership.map(|r| r.initial_cluster.clone()),
            ETCD_INITIAL_CLUSTER_STATE if managed => membership.map(|r| r.initial_cluster_state.clone()),
            _ => self.given.get(name).cloned().or_else(|| std::env::var(name).ok()),
        })
    }

    pub fn desired(&self, vars: &Variables) -> Result<Desired, DesiredError> {
        desired::build(&self.anchor, &self.sources, vars)
    }
}

/// Reads and validates the config at `path`: a regular file of at most [`MAX_INPUT_BYTES`];
/// relative sources resolve against its directory.
pub fn load_config(path: &Path, roots: &AllowedRoots) -> Result<Anchor, ConfigError> {
    load_config_identified(path, roots).map(|(anchor, _)| anchor)
}

/// [`load_config`], with the identity of the file read.
fn load_config_identified(path: &Path, roots: &AllowedRoots) -> Result<(Anchor, FileIdentity), ConfigError> {
    let unreadable = |source| ConfigError::Read {
        path: path.into(),
        source,
    };
    let (bytes, read) = read_regular_identified(path, MAX_INPUT_BYTES, Follow::Yes).map_err(unreadable)?;
    let text = String::from_utf8(bytes)
        .map_err(|e| unreadable(std::io::Error::new(std::io::ErrorKind::InvalidData, e.utf8_error())))?;
    Ok((config::parse(path, &text, roots)?, read))
}

/// Who writes a version: an anchor holds off while the component is paused, an operator's
/// verb does not.
#[derive(Debug, Clone, Copy)]
enum Writer {
    Operator,
    Anchor { hold_credential_drift: bool },
}

pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

impl Engine {
    /// `--allowed-root`s plus the state dir, which only kube-anchor itself writes.
    pub fn new(host_root: &Path, state_dir: &str, allowed: &[String]) -> Result<Self, EngineError> {
        let state_dir = HostPath::parse(state_dir)?;
        let roots = allowed
            .iter()
            .map(|raw| HostPath::parse(raw))
            .collect::<Result<Vec<_>, _>>()?;
        let fs = HostFs::new(host_root, AllowedRoots::with_state_dir(state_dir.clone(), roots)?)?;
        Ok(Self {
            fs,
            state_dir,
            retention: Default::default(),
            temps_cleaned: Default::default(),
        })
    }

    /// Held, shared, by a running anchor of `component` for its whole life: the lock file
    /// `<state-dir>/v1/<component>.anchor.lock`, on the host, so a verb run on the host or in
    /// another container sees it. Shared, because two anchors of one component may overlap on a
    /// node (a renamed release, a `perNode` toggle).
    pub fn hold_anchor_presence(&self, component: &str) -> Result<std::fs::File, EngineError> {
        let (path, file) = self
            .fs
            .open_lock_file(&self.state_dir, &anchor_presence_lock(component))?;
        file.lock_shared().map_err(|source| HostFsError::Io {
            path,
            op: "lock",
            source,
        })?;
        Ok(file)
    }

    /// The presence lock's path when an anchor of `component` runs on this node (holds it); an
    /// anchor between two restarts of a crash loop holds nothing.
    pub fn running_anchor(&self, component: &str) -> Result<Option<HostPath>, EngineError> {
        Ok(self.fs.lock_held(&self.state_dir, &anchor_presence_lock(component))?)
    }

    /// Where the kubelet's pre-start step keeps its binary (`<state-dir>/bin/kube-anchor`), and
    /// beside it the build that binary is (`kube-anchor --version`), so an anchor can tell
    /// without reading it.
    pub fn pre_start_binary(&self) -> Result<(HostPath, HostPath), EngineError> {
        let bin = self
            .state_dir
            .join(kube_anchor_core::kubelet_start::BINARY_IN_STATE_DIR)?;
        let build = self.state_dir.join(&format!(
            "{}.version",
            kube_anchor_core::kubelet_start::BINARY_IN_STATE_DIR
        ))?;
        Ok((bin, build))
    }

    /// Installs the kubelet's pre-start step: `binary` (of `build`) at
    /// [`Self::pre_start_binary`] (0755), then the drop-in (`kubelet_start::DROP_IN`, 0644) that
    /// `drop_in` makes for that path, each written atomically. Returns both paths.
    pub fn install_kubelet_pre_start(
        &self,
        binary: &[u8],
        build: &str,
        drop_in: impl FnOnce(&HostPath) -> String,
    ) -> Result<[HostPath; 2], EngineError> {
        let bin = self.write_pre_start_binary(binary, build)?;
        let unit = HostPath::parse(kube_anchor_core::kubelet_start::DROP_IN)?;
        let dir = unit.parent().expect("the drop-in is in a directory");
        let fs = HostFs::new(self.fs.host_root(), AllowedRoots::new([dir]))?;
        fs.write_file(&unit, drop_in(&bin).as_bytes(), FileMode(0o644), Role::Credential)?;
        Ok([bin, unit])
    }

    /// Writes the step's binary and its build beside it; returns the binary's path.
    fn write_pre_start_binary(&self, binary: &[u8], build: &str) -> Result<HostPath, EngineError> {
        let (bin, version) = self.pre_start_binary()?;
        self.fs.write_file(&bin, binary, FileMode(0o755), Role::Credential)?;
        self.fs.write_file(
            &version,
            format!("{build}\n").as_bytes(),
            FileMode(0o644),
            Role::Credential,
        )?;
        Ok(bin)
    }

    /// Keeps an installed pre-start step the anchors' own build: when the build recorded beside
    /// it is not `build`, `binary` is read and written in its place. Left alone when the step
    /// is not installed. True when written.
    pub fn refresh_pre_start_binary(
        &self,
        build: &str,
        binary: impl FnOnce() -> std::io::Result<Vec<u8>>,
    ) -> Result<bool, EngineError> {
        let (bin, version) = self.pre_start_binary()?;
        if !matches!(self.fs.observe(&bin)?, plan::Observed::File { .. }) {
            return Ok(false);
        }
        let recorded = self.fs.read(&version)?.unwrap_or_default();
        if String::from_utf8_lossy(&recorded).trim() == build {
            return Ok(false);
        }
        let binary = binary().map_err(|source| HostFsError::Io {
            path: bin.clone(),
            op: "read this binary to refresh",
            source,
        })?;
        self.write_pre_start_binary(&binary, build)?;
        Ok(true)
    }

    /// The components with a ledger on this node (what `apply` or `run` recorded), by name.
    pub fn recorded_components(&self) -> Vec<String> {
        let Ok(dir) = self.state_dir.join(kube_anchor_core::state_layout::STATE_SUBDIR) else {
            return Vec::new();
        };
        let mut names: Vec<String> = self
            .fs
            .file_names(&dir)
            .into_iter()
            .filter_map(|name| {
                let component = name.strip_suffix(".json")?;
                (!component.contains('.') && kube_anchor_core::config::is_component_name(component))
                    .then(|| component.to_owned())
            })
            .collect();
        names.sort();
        names
    }

    pub fn roots(&self) -> &AllowedRoots {
        self.fs.roots()
    }

    /// Makes the node hold `desired`: writes what differs (credentials, then the manifest) and
    /// records it. With `prune`, removes files this component wrote that it no longer wants.
    pub fn apply(&self, desired: &Desired, prune: bool) -> Result<ApplyReport, EngineError> {
        self.apply_by(desired, prune, Writer::Operator)
    }

    /// [`Engine::apply`] as an anchor (`run`) writes: refused while the component is paused on
    /// the node (checked under the ledger's lock, so nothing lands once `pause` has returned);
    /// with `hold_credential_drift`, credentials whose content changed on the node are not
    /// repaired yet (`plan::hold_credential_drift`) but listed in `held`.
    pub fn apply_as_anchor(
        &self,
        desired: &Desired,
        prune: bool,
        hold_credential_drift: bool,
    ) -> Result<ApplyReport, EngineError> {
        self.apply_by(desired, prune, Writer::Anchor { hold_credential_drift })
    }

    fn apply_by(&self, desired: &Desired, prune: bool, writer: Writer) -> Result<ApplyReport, EngineError> {
        let hold_credential_drift = matches!(
            writer,
            Writer::Anchor {
                hold_credential_drift: true
            }
        );
        let _lock = self.fs.lock(&self.state_dir, &desired.component)?;
        let loaded = self.fs.load_ledger(&self.state_dir, &desired.component)?;
        let mut ledger = loaded.ledger;
        if let (Writer::Anchor { .. }, Some(p)) = (writer, &ledger.paused) {
            return Err(EngineError::Paused {
                component: desired.component.clone(),
                at: p.at.clone(),
                reason: p.reason.clone(),
            });
        }
        // The ledger as it is on disk, when that is known to survive a power cut: a repair of
        // what it records needs no intent record.
        let durable = loaded.durable.then(|| ledger.clone());
        if let Some(d) = &ledger.decommissioned {
            return Err(EngineError::Decommissioned {
                component: desired.component.clone(),
                at: d.at.clone(),
                reason: d.reason.clone(),
            });
        }
        let mut report = ApplyReport {
            component: desired.component.clone(),
            content_hash: desired.content_hash.clone(),
            set_aside: loaded.set_aside,
            ..Default::default()
        };
        let paths = paths_of(desired, &ledger);
        let state_files = self.state_files(&desired.component)?;
        let not_looked_at: Vec<&HostPath> = {
            let mut cleaned = self.temps_cleaned.lock().unwrap_or_else(|e| e.into_inner());
            paths
                .iter()
                .chain(&state_files)
                .filter(|p| cleaned.insert((*p).clone()))
                .collect()
        };
        report.cleaned_temps = self.fs.clean_stale_temps(not_looked_at);
        plan::check_readable(desired, &reader())?;
        let observations = self.fs.observe_all(&paths)?;
        let mut plan = plan::plan_apply(desired, &observations, &ledger, prune)?;
        plan::keep_renewed(
            &mut plan,
            &self.renewed_on_node(desired, &observations, &ledger),
            &observations,
        );
        if hold_credential_drift {
            plan::hold_credential_drift(&mut plan, &ledger);
        }
        report.notices = plan.notices;
        report.unchanged = plan.unchanged;
        report.renewed = plan.renewed;
        report.held = plan.held;
        let reasons: Vec<Option<WriteReason>> = plan
            .ops
            .iter()
            .map(|op| match op {
                Op::Write { reason, .. } => Some(*reason),
                Op::Remove { .. } => None,
            })
            .collect();
        let now = now_rfc3339();
        report.adopted = plan::adopt(&mut ledger, desired, &observations, &report.unchanged, &now);
        // Files kube-anchor replaces without having written them are kept first: `remove`
        // puts them back.
        let originals = plan::originals(&ledger, &plan.ops, &observations);
        self.keep_originals(&desired.component, &originals)?;
        report.replaced = originals.iter().map(|(p, _)| p.clone()).collect();
        let (ops, restores) = self.restoring(&desired.component, &ledger, plan.ops, &mut report.notices);
        // The intent is on disk before the first rename, so no crash strands a file we wrote;
        // unless the ledger on disk, durable, already records every write's content.
        let recorded = durable.is_some_and(|on_disk| plan::writes_recorded(&on_disk, &ops));
        let intent = if !recorded && ops.iter().any(|op| matches!(op, Op::Write { .. })) {
            let intent = plan::intent(&ledger, &ops, &observations, &now);
            Some((
                HostFs::ledger_path(&self.state_dir, &desired.component)?,
                intent.encode(),
            ))
        } else {
            None
        };
        let result = self.fs.execute_with_intent(&ops, intent);
        let (done, error) = match result {
            Ok(done) => (done, None),
            Err((e, done)) => (done, Some(e)),
        };
        let wrote = done.iter().filter(|d| matches!(d, Done::Wrote { .. })).count();
        for (d, reason) in done.into_iter().zip(reasons) {
            match d {
                Done::Wrote { path, .. } if restores.iter().any(|(p, _)| *p == path) => {
                    ledger.forget(&path);
                    report.restored.push(path);
                }
                Done::Wrote {
                    path,
                    sha256,
                    mode,
                    owner,
                    role,
                } => {
                    report
                        .written
                        .push((path.clone(), reason.expect("a write has a reason")));
                    let mut entry = entry_for(path, sha256, mode, owner, role, &now);
                    entry.original = originals.iter().find(|(p, _)| *p == entry.path).map(|(_, o)| o.clone());
                    ledger.record(entry);
                }
                Done::Removed { path } => {
                    ledger.forget(&path);
                    report.removed.push(path);
                }
            }
        }
        plan::adopt_renewed(&mut ledger, desired, &observations, &report.renewed, &now);
        let mut let_go = Vec::new();
        if error.is_none() {
            ledger.content_hash = Some(desired.content_hash.clone());
            kube_anchor_core::history::applied(&mut ledger.history, &desired.content_hash, &now);
            let_go = ledger.prune_history(self.retention);
        }
        // Record what was done even when a later step failed: `remove` relies on it.
        let stored = self.fs.store_ledger(&self.state_dir, &ledger);
        if stored.is_ok() {
            self.drop_revisions(&desired.component, &let_go);
        }
        self.drop_originals(&desired.component, &ledger, &restores, &report.restored);
        match (error, stored) {
            (Some(e), _) => Err(e.into()),
            (None, Err(source)) if wrote > 0 => Err(EngineError::LedgerAfterWrite {
                component: desired.component.clone(),
                written: wrote,
                source,
            }),
            (None, stored) => stored.map(|()| report).map_err(Into::into),
        }
    }

    /// Refuses a new version whose credentials would break the component
    /// (`credentials::check`), before anything is written. Versions read back from the ledger
    /// (last-known-good, rollback) are not judged again: they ran here.
    pub fn check_credentials(&self, desired: &Desired) -> Result<(), EngineError> {
        let ledger = self
            .fs
            .read_ledger(&self.state_dir, &desired.component)?
            .unwrap_or_else(|_| Ledger::new(&desired.component));
        self.check_credentials_with(desired, &ledger)
    }

    /// [`Engine::check_credentials`] with the ledger the caller read.
    pub fn check_credentials_with(&self, desired: &Desired, ledger: &Ledger) -> Result<(), EngineError> {
        use kube_anchor_core::credentials::{self, Context, File};
        let observations = self.fs.observe_all(desired.files.iter().map(|f| &f.path))?;
        // A renewal made on the node is kept, not written over: its file does not change.
        let renewed = self.renewed_on_node(desired, &observations, ledger);
        let files: Vec<File> = desired
            .files
            .iter()
            .map(|f| File {
                path: &f.path,
                content: &f.content,
                changes: !renewed.iter().any(|r| r.path == f.path)
                    && !matches!(
                        observations.get(&f.path),
                        Some(plan::Observed::File { sha256, .. }) if *sha256 == kube_anchor_core::digest::sha256_hex(&f.content)
                    ),
            })
            .collect();
        let (manifest, credentials) = files.split_last().expect("the manifest is always last");
        let on_node = |path: &HostPath| self.fs.read(path).ok().flatten();
        let clients_on_node = || self.clients_on_node();
        let components_on_node = || self.components_on_node(&desired.component);
        credentials::check(
            credentials,
            manifest,
            &Context {
                now: unix_now(),
                node_ip: desired.node_ip,
                on_node: &on_node,
                clients_on_node: &clients_on_node,
                dropped_names: &desired.dropped_serving_names,
                components_on_node: &components_on_node,
            },
        )
        .map_err(|e| EngineError::Credentials(Box::new(e)))
    }

    /// What the version skew policy judges before `desired` takes its turn
    /// (`kube_anchor_core::skew`): its release, this component's on the node and every other
    /// recorded component's, each as written (the manifest on the node) and as last-known-good
    /// (its snapshot, read only where it is not what the node holds as recorded). A manifest
    /// that names no release is left out.
    pub fn skew_facts(&self, desired: &Desired) -> kube_anchor_core::skew::SkewFacts {
        use kube_anchor_core::config::Role;
        use kube_anchor_core::skew::{Beside, SkewFacts, release};
        let Some(to) = release(&desired.manifest().content) else {
            return SkewFacts::default();
        };
        let on_node = |component: &str| {
            let Ok(ledger) = self.ledger(component) else {
                return (None, None);
            };
            let manifest = ledger
                .entries()
                .iter()
                .find(|e| e.role == Role::Manifest)
                .and_then(|e| {
                    let content = self.fs.read(&e.path).ok()??;
                    Some((
                        kube_anchor_core::digest::sha256_hex(&content) == e.sha256,
                        release(&content),
                    ))
                });
            let written = manifest.and_then(|(_, r)| r);
            // A settled component whose manifest on the node is still the one its ledger
            // recorded: that is its last-known-good's too, no snapshot to read.
            let settled = ledger.last_known_good.is_some() && ledger.last_known_good == ledger.content_hash;
            let good = if settled && manifest.is_some_and(|(as_recorded, _)| as_recorded) {
                written
            } else {
                self.last_known_good(component)
                    .ok()
                    .flatten()
                    .and_then(|d| release(&d.manifest().content))
            };
            (written, good)
        };
        let (written, good) = on_node(&desired.component);
        SkewFacts {
            to: Some(to),
            from: [written, good].into_iter().flatten().map(|(_, m)| m).collect(),
            beside: self
                .recorded_components()
                .into_iter()
                .filter(|c| *c != desired.component)
                .filter_map(|c| {
                    let (written, good) = on_node(&c);
                    Some(Beside {
                        kind: written.or(good)?.0,
                        written: written.map(|(_, m)| m),
                        last_known_good: good.map(|(_, m)| m),
                    })
                })
                .collect(),
        }
    }

    /// The versions the other anchors on this node wrote, from their ledgers: each manifest and
    /// certificate the node still holds as that version wrote it (private keys are not read).
    fn components_on_node(&self, this: &str) -> Vec<kube_anchor_core::credentials::Written> {
        use kube_anchor_core::config::Role;
        use kube_anchor_core::credentials::{Written, holds_clients};
        self.recorded_components()
            .into_iter()
            .filter(|component| component != this)
            .filter_map(|component| {
                let ledger = self.fs.read_ledger(&self.state_dir, &component).ok()?.ok()?;
                let manifest = ledger.entries().iter().find(|e| e.role == Role::Manifest)?.path.clone();
                let files = ledger
                    .entries()
                    .iter()
                    .filter(|e| e.path == manifest || e.path.file_name().is_some_and(holds_clients))
                    .filter_map(|e| {
                        let content = self.fs.read(&e.path).ok()??;
                        (kube_anchor_core::digest::sha256_hex(&content) == e.sha256).then(|| (e.path.clone(), content))
                    })
                    .collect();
                Some(Written {
                    component,
                    manifest,
                    files,
                })
            })
            .collect()
    }

    /// The files on the node where its clients keep their certificates and servers
    /// (`credentials::CLIENT_DIRS`, `credentials::CLIENT_FILES`), as far as the allowed roots
    /// reach; private keys are not read.
    fn clients_on_node(&self) -> Vec<(HostPath, Vec<u8>)> {
        use kube_anchor_core::credentials::{CLIENT_DIRS, CLIENT_FILES, holds_clients};
        let in_dirs = CLIENT_DIRS
            .iter()
            .filter_map(|d| HostPath::parse(d).ok())
            .flat_map(|dir| {
                let mut names = self.fs.file_names(&dir);
                names.sort();
                names
                    .into_iter()
                    .filter(|n| holds_clients(n))
                    .filter_map(move |n| dir.join(&n).ok())
            });
        let files = CLIENT_FILES.iter().filter_map(|f| HostPath::parse(f).ok());
        in_dirs
            .chain(files)
            .filter_map(|path| Some((path.clone(), self.fs.read(&path).ok()??)))
            .collect()
    }

    /// What [`Engine::apply`] would do, changing nothing: each write or removal with the bytes
    /// before and after (for a diff; the caller decides what may be shown).
    pub fn preview(&self, desired: &Desired, prune: bool) -> Result<Preview, EngineError> {
        let ledger = self
            .fs
            .read_ledger(&self.state_dir, &desired.component)?
            .unwrap_or_else(|_| Ledger::new(&desired.component));
        let paths = paths_of(desired, &ledger);
        plan::check_readable(desired, &reader())?;
        let observations = self.fs.observe_all(&paths)?;
        let mut plan = plan::plan_apply(desired, &observations, &ledger, prune)?;
        plan::keep_renewed(
            &mut plan,
            &self.renewed_on_node(desired, &observations, &ledger),
            &observations,
        );
        let originals = plan::originals(&ledger, &plan.ops, &observations);
        let restorations = plan::restorations(&ledger, &plan.ops);
        let mut changes = Vec::new();
        for op in &plan.ops {
            let path = op.path().clone();
            let before_mode = match observations.get(&path) {
                Some(plan::Observed::File { mode, .. }) => Some(*mode),
                _ => None,
            };
            let before = match before_mode {
                Some(_) => self.fs.read(&path)?,
                None => None,
            };
            let change = match op {
                Op::Write { file, reason, .. } => PreviewChange {
                    role: file.role,
                    keeps_original: originals.iter().any(|(p, _)| *p == path),
                    action: PreviewAction::Write(*reason),
                    before,
                    before_mode,
                    after: Some(file.content.clone()),
                    after_mode: Some(file.mode),
                    path,
                },
                Op::Remove { role, .. } => PreviewChange {
                    role: *role,
                    keeps_original: false,
                    action: if restorations.iter().any(|(p, _)| *p == path) {
                        PreviewAction::Restore
                    } else {
                        PreviewAction::Remove
                    },
                    before,
                    before_mode,
                    after: None,
                    after_mode: None,
                    path,
                },
            };
            changes.push(change);
        }
        Ok(Preview {
            component: desired.component.clone(),
            content_hash: desired.content_hash.clone(),
            changes,
            notices: plan.notices,
        })
    }

    /// Removes what the ledger says this component wrote and what still holds it, the
    /// manifest first. Idempotent: missing files are success.
    pub fn remove(&self, component: &str) -> Result<RemoveReport, EngineError> {
        self.remove_roles(component, &[Role::Manifest, Role::Credential])
    }

    /// [`Engine::remove`] limited to files of `roles` (`pre-stop` removes the manifest, waits
    /// for the pod to stop, then the credentials).
    pub fn remove_roles(&self, component: &str, roles: &[Role]) -> Result<RemoveReport, EngineError> {
        let _lock = self.fs.lock(&self.state_dir, component)?;
        let loaded = self.fs.load_ledger(&self.state_dir, component)?;
        let mut ledger = loaded.ledger;
        // Every entry is observed, not only those of `roles`: a kept manifest keeps credentials.
        let paths: Vec<HostPath> = ledger.entries().iter().map(|e| e.path.clone()).collect();
        self.fs
            .clean_stale_temps(paths.iter().chain(&self.state_files(component)?));
        let observations = self.fs.observe_all(&paths)?;
        let plan::RemovePlan { plan, keep } = plan::plan_remove(&ledger, roles, &observations);
        let mut report = RemoveReport {
            component: component.into(),
            notices: plan.notices,
            set_aside: loaded.set_aside,
            ..Default::default()
        };
        let (ops, restores) = self.restoring(component, &ledger, plan.ops, &mut report.notices);
        for op in &ops {
            if let Op::Remove { path, .. } = op
                && let Some(original) = ledger.get(path).and_then(|e| e.original.as_ref())
            {
                report
                    .originals_kept
                    .push((path.clone(), self.state_dir.join(&original.file_name(component))?));
            }
        }
        let (done, error) = match self.fs.execute(&ops) {
            Ok(done) => (done, None),
            Err((e, done)) => (done, Some(e)),
        };
        for d in done {
            match d {
                Done::Removed { path } => {
                    ledger.forget(&path);
                    report.removed.push(path);
                }
                // Only restores write here.
                Done::Wrote { path, .. } => {
                    ledger.forget(&path);
                    report.restored.push(path);
                }
            }
        }
        if error.is_none() {
            // What is left was missing already or changed by someone else: no longer ours.
            let selected: Vec<HostPath> = ledger
                .entries()
                .iter()
                .filter(|e| roles.contains(&e.role) && !keep.contains(&e.path))
                .map(|e| e.path.clone())
                .collect();
            for path in selected {
                ledger.forget(&path);
            }
        }
        // The snapshots hold keys: they go with the files, the history with them.
        let kept_revisions: Vec<String> = if ledger.has_files() {
            Vec::new()
        } else {
            std::mem::take(&mut ledger.history)
                .into_iter()
                .map(|r| r.hash)
                .collect()
        };
        let stored = self.fs.store_ledger(&self.state_dir, &ledger);
        self.drop_originals(component, &ledger, &restores, &report.restored);
        if !ledger.has_files() {
            self.fs.remove_snapshot(&self.state_dir, component)?;
            for hash in &kept_revisions {
                self.fs
                    .remove_snapshot_at(&HostFs::revision_path(&self.state_dir, component, hash)?)?;
            }
        }
        match error {
            Some(e) => Err(e.into()),
            None => stored.map(|()| report).map_err(Into::into),
        }
    }

    /// Holds the component's anchors on this node (`kube-anchor pause`); returns the pause already
    /// in force, if any (kept as it was).
    pub fn pause(&self, component: &str, reason: &str) -> Result<Option<Paused>, EngineError> {
        self.update_ledger(component, |l| match &l.paused {
            Some(p) => Some(p.clone()),
            None => {
                l.paused = Some(Paused {
                    at: now_rfc3339(),
                    reason: reason.into(),
                });
                None
            }
        })
    }

    /// Lifts the hold (`kube-anchor resume`); returns the pause lifted, if there was one.
    pub fn resume(&self, component: &str) -> Result<Option<Paused>, EngineError> {
        if self.ledger(component)?.paused.is_none() {
            return Ok(None);
        }
        self.update_ledger(component, |l| l.paused.take())
    }

    /// Marks the component decommissioned: from now on `apply` refuses to write it.
    pub fn decommission(&self, component: &str, reason: &str, by_pod: Option<&str>) -> Result<(), EngineError> {
        let marker = kube_anchor_core::ledger::Decommissioned {
            at: now_rfc3339(),
            reason: reason.into(),
            by_pod: by_pod.map(Into::into),
        };
        self.update_ledger(component, |l| l.decommissioned = Some(marker))
    }

    /// Lifts a decommission marker so the component may be written again: always when `pod` is
    /// `None` (an explicit `apply`), else only when another pod set it (a new deployment).
    /// Returns whether a marker was lifted.
    pub fn recommission(&self, component: &str, pod: Option<&str>) -> Result<bool, EngineError> {
        let ledger = self.ledger(component)?;
        let Some(marker) = &ledger.decommissioned else {
            return Ok(false);
        };
        if pod.is_some() && marker.by_pod.as_deref() == pod {
            return Ok(false);
        }
        self.update_ledger(component, |l| l.decommissioned = None)?;
        Ok(true)
    }

    /// Keeps the content of each file in `originals` in the state dir (private, 0600: a
    /// replaced file may hold a key) before anything replaces it. The bytes are checked against
    /// what was observed: a file changed since is not replaced.
    fn keep_originals(&self, component: &str, originals: &[(HostPath, Original)]) -> Result<(), EngineError> {
        for (path, original) in originals {
            let bytes = self.fs.read(path)?.unwrap_or_default();
            if sha256_hex(&bytes) != original.sha256 {
                return Err(HostFsError::Changed { path: path.clone() }.into());
            }
            let kept = self.state_dir.join(&original.file_name(component))?;
            self.fs
                .write_file(&kept, &bytes, config::FileMode(0o600), Role::Credential)?;
        }
        Ok(())
    }

    /// `ops` with each removal of a path that has a kept original replaced by a write of that
    /// original (its content, mode and owner), and the restorations made. An original that is
    /// gone from the state dir, or no longer holds its bytes, cannot be put back: the path is
    /// removed as before, and a notice says so.
    fn restoring(
        &self,
        component: &str,
        ledger: &Ledger,
        mut ops: Vec<Op>,
        notices: &mut Vec<Notice>,
    ) -> (Vec<Op>, Vec<(HostPath, Original)>) {
        let mut restores = Vec::new();
        for (path, original) in plan::restorations(ledger, &ops) {
            let kept = self.state_dir.join(&original.file_name(component)).ok();
            let content = kept
                .as_ref()
                .and_then(|k| self.fs.read(k).ok().flatten())
                .filter(|bytes| sha256_hex(bytes) == original.sha256);
            let Some(content) = content else {
                notices.push(Notice::OriginalLost { path });
                continue;
            };
            let role = ledger.get(&path).map_or(Role::Credential, |e| e.role);
            let op = ops
                .iter_mut()
                .find(|op| *op.path() == path)
                .expect("a removal of this path");
            *op = Op::Write {
                sha256: original.sha256.clone(),
                file: kube_anchor_core::desired::DesiredFile {
                    path: path.clone(),
                    content,
                    mode: original.mode,
                    owner: Some(original.owner),
                    role,
                },
                reason: WriteReason::Content,
            };
            restores.push((path, original));
        }
        (ops, restores)
    }

    /// Deletes the kept originals put back, unless another recorded path still needs the same
    /// content.
    fn drop_originals(
        &self,
        component: &str,
        ledger: &Ledger,
        restores: &[(HostPath, Original)],
        restored: &[HostPath],
    ) {
        for (_, original) in restores.iter().filter(|(p, _)| restored.contains(p)) {
            let needed = ledger
                .entries()
                .iter()
                .any(|e| e.original.as_ref().is_some_and(|o| o.sha256 == original.sha256));
            if needed {
                continue;
            }
            if let Ok(kept) = self.state_dir.join(&original.file_name(component)) {
                // Its directory only when that leaves it empty: the component's other originals stay.
                self.fs.remove_with_empty_dir(&kept);
            }
        }
    }

    /// The component's own state files (ledger, last-known-good snapshot), whose crash leftovers
    /// are cleaned like those of the files it writes.
    fn state_files(&self, component: &str) -> Result<Vec<HostPath>, EngineError> {
        Ok(vec![
            HostFs::ledger_path(&self.state_dir, component)?,
            HostFs::snapshot_path(&self.state_dir, component)?,
        ])
    }

    /// Changes the ledger under the component's lock.
    pub fn update_ledger<T>(&self, component: &str, change: impl FnOnce(&mut Ledger) -> T) -> Result<T, EngineError> {
        let _lock = self.fs.lock(&self.state_dir, component)?;
        let mut ledger = self.fs.load_ledger(&self.state_dir, component)?.ledger;
        let out = change(&mut ledger);
        self.fs.store_ledger(&self.state_dir, &ledger)?;
        Ok(out)
    }

    /// The ledger, read only: an unusable one reads as empty and stays where it is, for the
    /// next `apply` or `remove` to set aside and report.
    pub fn ledger(&self, component: &str) -> Result<Ledger, EngineError> {
        Ok(self
            .fs
            .read_ledger(&self.state_dir, component)?
            .unwrap_or_else(|_| Ledger::new(component)))
    }

    /// `desired` survived its trial: keep its files as the last-known-good.
    /// Refused, recording nothing, when the node no longer runs it or it was recorded as bad
    /// meanwhile (an operator's `rollback` while the anchor judged it).
    pub fn promote(&self, desired: &Desired) -> Result<(), EngineError> {
        let _lock = self.fs.lock(&self.state_dir, &desired.component)?;
        let mut ledger = self.fs.load_ledger(&self.state_dir, &desired.component)?.ledger;
        let refuse = |reason: &str| EngineError::NotWhatTheNodeRuns {
            component: desired.component.clone(),
            hash: desired.content_hash.clone(),
            reason: reason.into(),
        };
        if ledger.content_hash.as_deref() != Some(desired.content_hash.as_str()) {
            return Err(refuse("not what the node runs any more: not promoted"));
        }
        if ledger.bad_version(&desired.content_hash).is_some() {
            return Err(refuse("recorded as bad meanwhile: not promoted"));
        }
        let snapshot = Snapshot::of(desired);
        self.fs.store_snapshot_at(
            &HostFs::revision_path(&self.state_dir, &desired.component, &desired.content_hash)?,
            &snapshot,
        )?;
        self.fs.store_snapshot(&self.state_dir, &snapshot)?;
        ledger.mark_good(&desired.content_hash, &now_rfc3339());
        let let_go = ledger.prune_history(self.retention);
        self.fs.store_ledger(&self.state_dir, &ledger)?;
        self.drop_revisions(&desired.component, &let_go);
        Ok(())
    }

    /// Removes the snapshots of versions the history let go. A leftover is only disk: warned.
    fn drop_revisions(&self, component: &str, hashes: &[String]) {
        for hash in hashes {
            let removed = HostFs::revision_path(&self.state_dir, component, hash)
                .map_err(HostFsError::from)
                .and_then(|path| self.fs.remove_snapshot_at(&path));
            if let Err(e) = removed {
                tracing::warn!(component, hash = %hash, error = %e, "cannot remove the snapshot of a version the revision history let go");
            }
        }
    }

    /// The version `wanted` (a hash, or a unique prefix of its hex digits) from the revision
    /// history: one that passed its trial here and whose snapshot is intact.
    pub fn revision(&self, component: &str, wanted: &str) -> Result<Desired, EngineError> {
        let no = |reason: String| EngineError::NoRevision {
            component: component.into(),
            reason,
        };
        let ledger = self.ledger(component)?;
        let revision =
            kube_anchor_core::history::find_passed(&ledger.history, wanted).map_err(|e| no(e.to_string()))?;
        let path = HostFs::revision_path(&self.state_dir, component, &revision.hash)?;
        match self.fs.load_snapshot_at(&path)? {
            Some(Ok(snapshot)) if snapshot.content_hash == revision.hash => snapshot
                .to_desired()
                .map_err(|e| no(format!("{}: snapshot {path} unusable: {e}", revision.hash))),
            Some(Ok(_)) => Err(no(format!("{}: snapshot {path} holds another version", revision.hash))),
            Some(Err(e)) => Err(no(format!("{}: snapshot {path} corrupt: {e}", revision.hash))),
            None => Err(no(format!("{}: its snapshot {path} is gone", revision.hash))),
        }
    }

    /// The last-known-good version, when the ledger names one and its snapshot is intact; when
    /// that snapshot is gone, corrupt or holds another version, the same version's snapshot in
    /// the revision history, with a warning (both are written when a version passes).
    pub fn last_known_good(&self, component: &str) -> Result<Option<Desired>, EngineError> {
        let Some(hash) = self.ledger(component)?.last_known_good else {
            return Ok(None);
        };
        let path = HostFs::snapshot_path(&self.state_dir, component)?;
        let why = match self.fs.load_snapshot(&self.state_dir, component)? {
            Some(Ok(snapshot)) if snapshot.content_hash == hash => match snapshot.to_desired() {
                Ok(desired) => return Ok(Some(desired)),
                Err(e) => format!("{path} unusable: {e}"),
            },
            Some(Ok(snapshot)) => format!("{path} holds {}, not {hash}", snapshot.content_hash),
            Some(Err(e)) => format!("{path} corrupt: {e}"),
            None => format!("{path} is gone"),
        };
        match self.revision(component, &hash) {
            Ok(desired) => {
                tracing::warn!(component, %hash, reason = %why, "last-known-good snapshot unusable: using the same version's history snapshot");
                Ok(Some(desired))
            }
            Err(e) => {
                tracing::warn!(component, %hash, reason = %why, history = %e, "last-known-good snapshot unusable, and no history snapshot of the version either");
                Ok(None)
            }
        }
    }

    /// The credentials this component wrote that the node now holds renewed
    /// (`credentials::renewed_on_node`), among `plan::renewal_candidates`: a file kube-anchor
    /// never wrote is replaced as before, its original kept.
    fn renewed_on_node(
        &self,
        desired: &Desired,
        observations: &plan::Observations,
        ledger: &Ledger,
    ) -> Vec<kube_anchor_core::credentials::Renewed> {
        let candidates = plan::renewal_candidates(desired, observations, ledger);
        if candidates.is_empty() {
            return Vec::new();
        }
        let credentials: Vec<&desired::DesiredFile> =
            desired.files.iter().filter(|f| f.role == Role::Credential).collect();
        // What the node holds: read for a candidate; known to be the wanted bytes where the hash
        // says so; not needed otherwise.
        let on_node: Vec<Option<Vec<u8>>> = credentials
            .iter()
            .map(|f| match observations.get(&f.path) {
                _ if candidates.contains(&&f.path) => self.fs.read(&f.path).ok().flatten(),
                Some(plan::Observed::File { sha256, .. }) if *sha256 == sha256_hex(&f.content) => {
                    Some(f.content.clone())
                }
                _ => None,
            })
            .collect();
        let held: Vec<kube_anchor_core::credentials::OnNode> = credentials
            .iter()
            .zip(&on_node)
            .map(|(f, on_node)| kube_anchor_core::credentials::OnNode {
                path: &f.path,
                wanted: &f.content,
                on_node: on_node.as_deref(),
            })
            .collect();
        kube_anchor_core::credentials::renewed_on_node(&held, unix_now())
    }

    pub fn status(&self, desired: &Desired) -> Result<StatusReport, EngineError> {
        // Read-only: an unusable ledger is reported but left where it is.
        let (ledger, set_aside) = match self.fs.read_ledger(&self.state_dir, &desired.component)? {
            Ok(ledger) => (ledger, None),
            Err(reason) => (
                Ledger::new(&desired.component),
                Some(SetAside {
                    path: HostFs::ledger_path(&self.state_dir, &desired.component)?,
                    moved_to: None,
                    reason,
                }),
            ),
        };
        let paths = paths_of(desired, &ledger);
        let observations = self.fs.observe_all(&paths)?;
        Ok(StatusReport {
            component: desired.component.clone(),
            content_hash: desired.content_hash.clone(),
            recorded_hash: ledger.content_hash.clone(),
            last_known_good: ledger.last_known_good.clone(),
            bad: ledger.bad.clone(),
            history: ledger.history.clone(),
            last_known_good_failing: ledger.last_known_good_failing.clone(),
            paused: ledger.paused.clone(),
            interrupted: ledger.interrupted.clone(),
            files: plan::status(
                desired,
                &observations,
                &ledger,
                &self.renewed_on_node(desired, &observations, &ledger),
            ),
            set_aside,
            certificates: self.certificates_of(&ledger),
        })
    }

    /// The certificates of every credential `component` has on the node (its ledger), read
    /// from disk; none when it has no usable ledger.
    pub fn certificates(&self, component: &str) -> Result<Vec<kube_anchor_core::credentials::Expiry>, EngineError> {
        Ok(match self.fs.read_ledger(&self.state_dir, component)? {
            Ok(ledger) => self.certificates_of(&ledger),
            Err(_) => Vec::new(),
        })
    }

    fn certificates_of(&self, ledger: &Ledger) -> Vec<kube_anchor_core::credentials::Expiry> {
        ledger
            .entries()
            .iter()
            .filter(|e| e.role == Role::Credential)
            .filter_map(|e| Some((e, self.fs.read(&e.path).ok()??)))
            .flat_map(|(e, bytes)| kube_anchor_core::credentials::expiries(&e.path, &bytes))
            .collect()
    }
}

/// Seconds since the epoch.
/// The name of a component's presence lock ([`Engine::hold_anchor_presence`]).
fn anchor_presence_lock(component: &str) -> String {
    format!("{component}.anchor")
}

pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Every path the config wants or the ledger remembers.
fn paths_of(desired: &Desired, ledger: &Ledger) -> Vec<HostPath> {
    desired
        .files
        .iter()
        .map(|f| f.path.clone())
        .chain(ledger.entries().iter().map(|e| e.path.clone()))
        .collect()
}

fn entry_for(
    path: HostPath,
    sha256: String,
    mode: config::FileMode,
    owner: Option<config::Owner>,
    role: Role,
    now: &str,
) -> LedgerEntry {
    LedgerEntry {
        path,
        sha256,
        mode,
        owner,
        role,
        written_at: now.into(),
        previous_sha256: None,
        original: None,
        renewed_on_node: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_inputs_stand_only_while_every_file_read_is_the_file_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("anchor.yaml");
        fs_write(
            &config,
            "apiVersion: kube-anchor.io/v1alpha1\nkind: Anchor\nmetadata: {name: c}\nspec:\n  files:\n  - {source: a, path: /etc/kubernetes/a, mode: \"0600\"}\n  manifest: {source: pod.yaml, path: /etc/kubernetes/manifests/c.yaml}\n",
        );
        fs_write(&dir.path().join("a"), "one");
        fs_write(&dir.path().join("pod.yaml"), "pod");
        let roots = AllowedRoots::new([HostPath::parse("/etc/kubernetes").unwrap()]);
        let inputs = Inputs::load(&config, &roots).unwrap();
        assert_eq!(inputs.read.len(), 3);
        assert!(inputs.unchanged());
        // A source replaced (a new file of the same bytes), written in place, or gone: read again.
        let source = dir.path().join("a");
        fs_write(&dir.path().join("a.new"), "one");
        std::fs::rename(dir.path().join("a.new"), &source).unwrap();
        assert!(!inputs.unchanged());
        let inputs = Inputs::load(&config, &roots).unwrap();
        assert!(inputs.unchanged());
        std::fs::OpenOptions::new()
            .append(true)
            .open(&source)
            .and_then(|mut f| std::io::Write::write_all(&mut f, b" more"))
            .unwrap();
        assert!(!inputs.unchanged());
        let inputs = Inputs::load(&config, &roots).unwrap();
        std::fs::remove_file(dir.path().join("pod.yaml")).unwrap();
        assert!(!inputs.unchanged());
    }

    fn fs_write(path: &Path, text: &str) {
        std::fs::write(path, text).unwrap();
    }
}
