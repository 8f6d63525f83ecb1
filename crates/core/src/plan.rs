//! Decisions about files: what to write, what to remove, what state each file is in. Pure:
//! takes what is wanted, what the node holds and what the ledger remembers; returns data that
//! the host crate's `hostfs` carries out.

use std::collections::BTreeMap;

use crate::config::{FileMode, Owner, Role};
use crate::credentials::Renewed;
use crate::desired::{Desired, DesiredFile};
use crate::hostpath::HostPath;
use crate::ledger::{Ledger, LedgerEntry, Original};

/// What the node holds at a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observed {
    Missing,
    File {
        sha256: String,
        mode: FileMode,
        owner: Owner,
    },
    /// A symlink at the destination: replaced by a file, never written through.
    Symlink,
    /// A directory, socket, device...: never touched.
    Other {
        kind: &'static str,
    },
}

impl Observed {
    fn holds(&self, file: &DesiredFile, sha256: &str) -> bool {
        match self {
            Observed::File {
                sha256: have,
                mode,
                owner,
            } => have == sha256 && *mode == file.mode && file.owner.is_none_or(|want| want == *owner),
            _ => false,
        }
    }

    fn holds_recorded(&self, entry: &LedgerEntry) -> bool {
        self.recorded_sha256(entry).is_some()
    }

    /// The content this path holds when the ledger entry says we wrote it.
    fn recorded_sha256(&self, entry: &LedgerEntry) -> Option<&str> {
        match self {
            Observed::File { sha256, .. } if entry.is_ours(sha256) => Some(sha256),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WriteReason {
    Create,
    Content,
    Mode,
    Owner,
    ReplaceSymlink,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Write {
        file: DesiredFile,
        sha256: String,
        reason: WriteReason,
    },
    /// Remove a file we wrote; the executor re-checks `expected_sha256` just before.
    Remove {
        path: HostPath,
        role: Role,
        expected_sha256: String,
    },
}

impl Op {
    pub fn path(&self) -> &HostPath {
        match self {
            Op::Write { file, .. } => &file.path,
            Op::Remove { path, .. } => path,
        }
    }
}

/// Something the operator should hear about that is not an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// We wrote it, but someone changed it since: left in place.
    LeftModified { path: HostPath },
    /// The ledger has it, the config no longer does (see `--prune`).
    Orphaned { path: HostPath },
    /// Not removed: `manifest` was changed by hand and stays, and may need it.
    KeptForManifest { path: HostPath, manifest: HostPath },
    /// The file it held before kube-anchor first wrote it was kept, but is gone from the state
    /// dir (or changed there): removed without putting it back.
    OriginalLost { path: HostPath },
    /// A credential renewed on the node (`kubeadm certs renew`): kept, not reverted, until the
    /// config carries it or a later one.
    RenewedOnNode { path: HostPath, detail: String },
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlanError {
    #[error("{path}: is a {kind}, not a file; refusing to replace it")]
    NotAFile { path: HostPath, kind: &'static str },
    #[error(
        "{path}: refusing to write it as {owner} mode {mode}: this process ({reader}) could not read it back, so every later sync, status and removal of it would fail; grant the container CAP_DAC_READ_SEARCH (the charts do) or choose an owner or mode it can read"
    )]
    WouldNotReadBack {
        path: HostPath,
        owner: Owner,
        mode: FileMode,
        reader: Reader,
    },
}

/// Who reads the files back: kube-anchor reads every file it wrote again (drift repair,
/// `status`, the check before a removal), so it must never write one it cannot read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reader {
    pub uid: u32,
    /// The effective gid first, then the supplementary groups.
    pub gids: Vec<u32>,
    /// CAP_DAC_READ_SEARCH or CAP_DAC_OVERRIDE in the effective set: reads any file.
    pub reads_any: bool,
}

impl Reader {
    /// The kernel's rule: the owner's bits for the owner, else the group's for a member, else
    /// the others' (never a union of them).
    pub fn can_read(&self, owner: Owner, mode: FileMode) -> bool {
        let bits = if owner.uid == self.uid {
            mode.0 >> 6
        } else if self.gids.contains(&owner.gid) {
            mode.0 >> 3
        } else {
            mode.0
        };
        self.reads_any || bits & 0o4 != 0
    }
}

impl std::fmt::Display for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "uid {}", self.uid)?;
        if !self.reads_any {
            write!(f, " without CAP_DAC_READ_SEARCH")?;
        }
        Ok(())
    }
}

/// Refuses, before anything is written, a file that `reader` could not read back once written.
pub fn check_readable(desired: &Desired, reader: &Reader) -> Result<(), PlanError> {
    for file in &desired.files {
        // Without an owner the file is the writer's own.
        let owner = file.owner.unwrap_or(Owner {
            uid: reader.uid,
            gid: reader.gids.first().copied().unwrap_or(reader.uid),
        });
        if !reader.can_read(owner, file.mode) {
            return Err(PlanError::WouldNotReadBack {
                path: file.path.clone(),
                owner,
                mode: file.mode,
                reader: reader.clone(),
            });
        }
    }
    Ok(())
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// In execution order.
    pub ops: Vec<Op>,
    pub unchanged: Vec<HostPath>,
    /// Credentials renewed on the node, kept as they are (see [`keep_renewed`]).
    pub renewed: Vec<HostPath>,
    /// Credentials whose changed content is not repaired yet (see [`hold_credential_drift`]).
    pub held: Vec<HostPath>,
    pub notices: Vec<Notice>,
}

pub type Observations = BTreeMap<HostPath, Observed>;

fn observed<'a>(observations: &'a Observations, path: &HostPath) -> &'a Observed {
    observations.get(path).unwrap_or(&Observed::Missing)
}

/// Writes what differs, credentials before the manifest (the order of `desired.files`).
/// With `prune`, files the ledger has but the config dropped are removed after the manifest,
/// when they still hold what we wrote.
pub fn plan_apply(
    desired: &Desired,
    observations: &Observations,
    ledger: &Ledger,
    prune: bool,
) -> Result<Plan, PlanError> {
    let mut plan = Plan::default();
    for file in &desired.files {
        let sha256 = crate::digest::sha256_hex(&file.content);
        let have = observed(observations, &file.path);
        if have.holds(file, &sha256) {
            plan.unchanged.push(file.path.clone());
            continue;
        }
        let reason = match have {
            Observed::Missing => WriteReason::Create,
            Observed::Symlink => WriteReason::ReplaceSymlink,
            Observed::Other { kind } => {
                return Err(PlanError::NotAFile {
                    path: file.path.clone(),
                    kind,
                });
            }
            Observed::File { sha256: have, mode, .. } if *have == sha256 && *mode == file.mode => WriteReason::Owner,
            Observed::File { sha256: have, .. } if *have == sha256 => WriteReason::Mode,
            Observed::File { .. } => WriteReason::Content,
        };
        plan.ops.push(Op::Write {
            file: file.clone(),
            sha256,
            reason,
        });
    }
    let wanted: Vec<&HostPath> = desired.files.iter().map(|f| &f.path).collect();
    let orphans = ledger.entries_in_removal_order().filter(|e| !wanted.contains(&&e.path));
    for entry in orphans {
        let have = observed(observations, &entry.path);
        if !prune {
            plan.notices.push(Notice::Orphaned {
                path: entry.path.clone(),
            });
        } else if have.holds_recorded(entry) {
            plan.ops.push(remove(entry, have));
        } else if *have != Observed::Missing {
            plan.notices.push(Notice::LeftModified {
                path: entry.path.clone(),
            });
        }
    }
    Ok(plan)
}

/// Renewals made on the node (`credentials::renewed_on_node`) stand in for the writes that
/// would revert them: the write goes, or, where the node's mode or owner is not the wanted one,
/// becomes a write of the node's content with the wanted mode and owner. Each is noticed. The
/// ledger then takes the renewed content as its own ([`adopt`]), so `remove` removes it.
pub fn keep_renewed(plan: &mut Plan, renewed: &[Renewed], observations: &Observations) {
    let mut kept_as_is = Vec::new();
    for op in &mut plan.ops {
        let Op::Write {
            file,
            sha256,
            reason: reason @ WriteReason::Content,
        } = op
        else {
            continue;
        };
        let Some(kept) = renewed.iter().find(|r| r.path == file.path) else {
            continue;
        };
        plan.notices.push(Notice::RenewedOnNode {
            path: kept.path.clone(),
            detail: kept.detail.clone(),
        });
        *sha256 = crate::digest::sha256_hex(&kept.content);
        file.content = kept.content.clone();
        plan.renewed.push(file.path.clone());
        match observed(observations, &file.path) {
            Observed::File { mode, .. } if *mode != file.mode => *reason = WriteReason::Mode,
            Observed::File { owner, .. } if file.owner.is_some_and(|want| want != *owner) => {
                *reason = WriteReason::Owner
            }
            _ => kept_as_is.push(file.path.clone()),
        }
    }
    plan.ops.retain(|op| !kept_as_is.contains(op.path()));
}

/// The credentials whose content on the node may be a renewal made there: files kube-anchor
/// wrote that hold something else now, or a renewal it keeps already. Content the ledger says
/// kube-anchor wrote is never one: a version that goes back to an older certificate is judged
/// by `credentials::check` like any other.
pub fn renewal_candidates<'a>(desired: &'a Desired, observations: &Observations, ledger: &Ledger) -> Vec<&'a HostPath> {
    desired
        .files
        .iter()
        .filter(|f| f.role == Role::Credential)
        .filter(|f| match (observed(observations, &f.path), ledger.get(&f.path)) {
            (Observed::File { sha256, .. }, Some(entry)) => {
                *sha256 != crate::digest::sha256_hex(&f.content) && (!entry.is_ours(sha256) || entry.renewed_on_node)
            }
            _ => false,
        })
        .map(|f| &f.path)
        .collect()
}

/// Records the kept renewals as kube-anchor's, marked as renewals, so `remove` takes them and
/// the next sync judges them again (after any write of `keep_renewed`).
pub fn adopt_renewed(
    ledger: &mut Ledger,
    desired: &Desired,
    observations: &Observations,
    renewed: &[HostPath],
    now: &str,
) {
    for file in desired.files.iter().filter(|f| renewed.contains(&f.path)) {
        let Observed::File { sha256, .. } = observed(observations, &file.path) else {
            continue;
        };
        let current = ledger
            .get(&file.path)
            .is_some_and(|e| e.sha256 == *sha256 && e.renewed_on_node && e.previous_sha256.is_none());
        if !current {
            let mut entry = LedgerEntry::written(file, sha256.clone(), now);
            entry.renewed_on_node = true;
            ledger.record(entry);
        }
    }
}

/// Holds back the repair of credentials kube-anchor wrote whose content changed on the node:
/// a renewal is written one file at a time (kubeadm writes the new key, then the certificate,
/// each in place), so the first half alone looks like tampering, and reverting it would lose
/// the renewal. The daemon repairs them once the node has been left alone for a moment.
pub fn hold_credential_drift(plan: &mut Plan, ledger: &Ledger) {
    let held: Vec<HostPath> = plan
        .ops
        .iter()
        .filter_map(|op| match op {
            Op::Write {
                file,
                reason: WriteReason::Content,
                ..
            } if file.role == Role::Credential && ledger.get(&file.path).is_some() => Some(file.path.clone()),
            _ => None,
        })
        .collect();
    plan.ops.retain(|op| !held.contains(op.path()));
    plan.held = held;
}

fn remove(entry: &LedgerEntry, have: &Observed) -> Op {
    Op::Remove {
        path: entry.path.clone(),
        role: entry.role,
        expected_sha256: have.recorded_sha256(entry).unwrap_or(&entry.sha256).to_owned(),
    }
}

/// The files the writes of `ops` replace that kube-anchor did not write (no ledger entry): each
/// is kept before it is replaced, and put back when kube-anchor removes the path.
pub fn originals(ledger: &Ledger, ops: &[Op], observations: &Observations) -> Vec<(HostPath, Original)> {
    ops.iter()
        .filter_map(|op| match op {
            Op::Write { file, .. } if ledger.get(&file.path).is_none() => match observed(observations, &file.path) {
                Observed::File { sha256, mode, owner } => Some((
                    file.path.clone(),
                    Original {
                        sha256: sha256.clone(),
                        mode: *mode,
                        owner: *owner,
                    },
                )),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// Among the removals of `ops`, the credentials whose original is put back instead of leaving
/// nothing (the engine turns each into a write of the kept content). A manifest's original is
/// not: putting back a static pod the operator is removing (often an older version of it,
/// kubeadm's from before adoption) would start it again. It stays kept in the state dir.
pub fn restorations(ledger: &Ledger, ops: &[Op]) -> Vec<(HostPath, Original)> {
    ops.iter()
        .filter_map(|op| match op {
            Op::Remove { path, role, .. } if *role != Role::Manifest => ledger
                .get(path)
                .and_then(|e| e.original.clone())
                .map(|o| (path.clone(), o)),
            _ => None,
        })
        .collect()
}

/// What `remove` does, and which ledger entries stay ours afterwards.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RemovePlan {
    pub plan: Plan,
    /// Entries kept in the ledger although not removed: a hand-edited manifest that stays, and
    /// the credentials kept for it, so a later `remove` (once the manifest is gone) takes them.
    pub keep: Vec<HostPath>,
}

/// Removes what the ledger says we wrote and what still holds it, for the entries of `roles`:
/// the manifest first. A manifest changed by hand stays, and so does every credential of the
/// component: the pod it describes may read them.
pub fn plan_remove(ledger: &Ledger, roles: &[Role], observations: &Observations) -> RemovePlan {
    let mut out = RemovePlan::default();
    let kept_manifest = ledger.entries().iter().filter(|e| e.role == Role::Manifest).find(|e| {
        let have = observed(observations, &e.path);
        *have != Observed::Missing && !have.holds_recorded(e)
    });
    if let Some(manifest) = kept_manifest.filter(|_| ledger.entries().iter().any(|e| e.role == Role::Credential)) {
        out.keep.push(manifest.path.clone());
    }
    for entry in ledger.entries_in_removal_order().filter(|e| roles.contains(&e.role)) {
        let have = observed(observations, &entry.path);
        if let (Some(manifest), Role::Credential, true) = (kept_manifest, entry.role, have.holds_recorded(entry)) {
            out.keep.push(entry.path.clone());
            out.plan.notices.push(Notice::KeptForManifest {
                path: entry.path.clone(),
                manifest: manifest.path.clone(),
            });
        } else if have.holds_recorded(entry) {
            out.plan.ops.push(remove(entry, have));
        } else if *have != Observed::Missing {
            out.plan.notices.push(Notice::LeftModified {
                path: entry.path.clone(),
            });
        }
    }
    out
}

/// Files that already hold what the config wants become ours in the ledger: adopted when it
/// lacks them, corrected when its entry is stale (a crash or a failed ledger write after the
/// rename left the record of the content before).
/// Returns the paths recorded anew.
pub fn adopt(
    ledger: &mut Ledger,
    desired: &Desired,
    observations: &Observations,
    unchanged: &[HostPath],
    now: &str,
) -> Vec<HostPath> {
    let mut adopted = Vec::new();
    for file in desired.files.iter().filter(|f| unchanged.contains(&f.path)) {
        // Unchanged means the node holds the wanted bytes: their hash is already known.
        let Observed::File { sha256, .. } = observed(observations, &file.path) else {
            continue;
        };
        let current = ledger.get(&file.path).is_some_and(|e| {
            e.sha256 == *sha256
                && e.mode == file.mode
                && e.owner == file.owner
                && e.previous_sha256.is_none()
                && !e.renewed_on_node
        });
        if !current {
            ledger.record(LedgerEntry::written(file, sha256.clone(), now));
            adopted.push(file.path.clone());
        }
    }
    adopted
}

/// The ledger stored before the first rename: every write recorded with its new content, and
/// with the content it replaces when that was ours too. Whatever a crash leaves, the ledger
/// then covers it, so `remove` never strands a file we wrote.
pub fn intent(ledger: &Ledger, ops: &[Op], observations: &Observations, now: &str) -> Ledger {
    let mut intent = ledger.clone();
    let originals = originals(ledger, ops, observations);
    for op in ops {
        let Op::Write { file, sha256, .. } = op else { continue };
        let mut entry = LedgerEntry::written(file, sha256.clone(), now);
        entry.previous_sha256 = ledger
            .get(&file.path)
            .and_then(|e| observed(observations, &file.path).recorded_sha256(e))
            .filter(|previous| *previous != sha256)
            .map(str::to_owned);
        entry.original = originals.iter().find(|(p, _)| *p == file.path).map(|(_, o)| o.clone());
        intent.record(entry);
    }
    intent
}

/// Whether the ledger already records every write of `ops` with the very content it writes (a
/// repair: a file deleted or changed on the node put back as recorded). Then an intent record
/// would add nothing a crash could need: whichever of the old and the new content a crash
/// leaves at such a path, the ledger covers it.
pub fn writes_recorded(ledger: &Ledger, ops: &[Op]) -> bool {
    ops.iter().all(|op| match op {
        Op::Write { file, sha256, .. } => ledger.get(&file.path).is_some_and(|e| e.sha256 == *sha256),
        Op::Remove { .. } => true,
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FileState {
    /// We wrote it and it holds what the config wants.
    InSync,
    /// We wrote it, and it no longer holds what the config wants.
    Drifted,
    /// The config wants it and it is not there.
    Missing,
    /// It is there, but the ledger has no record of our writing it.
    Unmanaged,
    /// The ledger has it, the config no longer wants it.
    Orphaned,
    /// A credential renewed on the node, kept until the config carries it (counts as in sync).
    RenewedOnNode,
}

impl FileState {
    pub fn as_str(self) -> &'static str {
        match self {
            FileState::InSync => "in-sync",
            FileState::Drifted => "drifted",
            FileState::Missing => "missing",
            FileState::Unmanaged => "unmanaged",
            FileState::Orphaned => "orphaned",
            FileState::RenewedOnNode => "renewed-on-node",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FileStatus {
    pub path: HostPath,
    pub state: FileState,
    pub role: Role,
    /// Why it is not in sync, when it is not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

pub fn status(desired: &Desired, observations: &Observations, ledger: &Ledger, renewed: &[Renewed]) -> Vec<FileStatus> {
    let mut out = Vec::new();
    for file in &desired.files {
        let sha256 = crate::digest::sha256_hex(&file.content);
        let have = observed(observations, &file.path);
        let recorded = ledger.get(&file.path).is_some();
        let (state, detail) = match have {
            Observed::Missing => (FileState::Missing, None),
            _ if !recorded => (FileState::Unmanaged, Some(difference(file, &sha256, have))),
            _ if have.holds(file, &sha256) => (FileState::InSync, None),
            _ => match renewed.iter().find(|r| r.path == file.path) {
                Some(r) => (FileState::RenewedOnNode, Some(r.detail.clone())),
                None => (FileState::Drifted, Some(difference(file, &sha256, have))),
            },
        };
        let detail = detail.filter(|d| !d.is_empty());
        out.push(FileStatus {
            path: file.path.clone(),
            state,
            role: file.role,
            detail,
        });
    }
    let wanted: Vec<&HostPath> = desired.files.iter().map(|f| &f.path).collect();
    for entry in ledger.entries_in_removal_order().filter(|e| !wanted.contains(&&e.path)) {
        let detail = match observed(observations, &entry.path) {
            Observed::Missing => "already gone from the node",
            have if have.holds_recorded(entry) => {
                "still holds what was written; `apply --prune` or `remove` deletes it"
            }
            _ => "changed since it was written; will be left in place",
        };
        out.push(FileStatus {
            path: entry.path.clone(),
            state: FileState::Orphaned,
            role: entry.role,
            detail: Some(detail.into()),
        });
    }
    out
}

fn difference(file: &DesiredFile, sha256: &str, have: &Observed) -> String {
    match have {
        Observed::Missing => "missing".into(),
        Observed::Symlink => "a symlink stands at the path".into(),
        Observed::Other { kind } => format!("a {kind} stands at the path"),
        Observed::File {
            sha256: have,
            mode,
            owner,
        } => {
            let mut parts = Vec::new();
            if have != sha256 {
                parts.push("content differs".to_string());
            }
            if *mode != file.mode {
                parts.push(format!("mode {mode}, want {}", file.mode));
            }
            if let Some(want) = file.owner.filter(|w| w != owner) {
                parts.push(format!("owner {owner}, want {want}"));
            }
            parts.join("; ")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::LedgerEntry;

    fn hp(s: &str) -> HostPath {
        HostPath::parse(s).unwrap()
    }

    fn file(path: &str, content: &str, role: Role) -> DesiredFile {
        DesiredFile {
            path: hp(path),
            content: content.into(),
            mode: FileMode(0o600),
            owner: Some(Owner { uid: 0, gid: 0 }),
            role,
        }
    }

    fn desired() -> Desired {
        Desired {
            component: "c".into(),
            files: vec![
                file("/k/key", "KEY", Role::Credential),
                file("/k/m.yaml", "POD", Role::Manifest),
            ],
            content_hash: "sha256:x".into(),
            pod_name: "c".into(),
            pod_namespace: "kube-system".into(),
            node_ip: None,
            dropped_serving_names: Vec::new(),
        }
    }

    fn on_disk(content: &str) -> Observed {
        Observed::File {
            sha256: crate::digest::sha256_hex(content.as_bytes()),
            mode: FileMode(0o600),
            owner: Owner { uid: 0, gid: 0 },
        }
    }

    fn ledger_of(entries: &[(&str, &str, Role)]) -> Ledger {
        let mut l = Ledger::new("c");
        for (path, content, role) in entries {
            l.record(LedgerEntry {
                path: hp(path),
                sha256: crate::digest::sha256_hex(content.as_bytes()),
                mode: FileMode(0o600),
                owner: None,
                role: *role,
                written_at: "2026-01-01T00:00:00Z".into(),
                previous_sha256: None,
                original: None,
                renewed_on_node: false,
            });
        }
        l
    }

    #[test]
    fn a_renewal_on_the_node_replaces_the_repair_and_is_adopted() {
        let d = desired();
        let ledger = ledger_of(&[
            ("/k/key", "KEY", Role::Credential),
            ("/k/m.yaml", "POD", Role::Manifest),
        ]);
        let renewed = [Renewed {
            path: hp("/k/key"),
            content: b"RENEWED".to_vec(),
            detail: "renewed".into(),
        }];
        let mut obs = Observations::new();
        obs.insert(hp("/k/key"), on_disk("RENEWED"));
        obs.insert(hp("/k/m.yaml"), on_disk("POD"));
        let mut plan = plan_apply(&d, &obs, &ledger, false).unwrap();
        assert_eq!(plan.ops.len(), 1, "the repair");
        keep_renewed(&mut plan, &renewed, &obs);
        assert!(plan.ops.is_empty(), "{plan:?}");
        assert_eq!(plan.renewed, [hp("/k/key")]);
        assert_eq!(
            plan.notices,
            [Notice::RenewedOnNode {
                path: hp("/k/key"),
                detail: "renewed".into()
            }]
        );
        // The ledger takes the renewed content: `remove` removes it.
        let mut ledger = ledger;
        assert_eq!(renewal_candidates(&d, &obs, &ledger), [&hp("/k/key")]);
        adopt_renewed(&mut ledger, &d, &obs, &plan.renewed, "now");
        let entry = ledger.get(&hp("/k/key")).unwrap();
        assert!(entry.is_ours(&crate::digest::sha256_hex(b"RENEWED")) && entry.renewed_on_node);
        assert_eq!(renewal_candidates(&d, &obs, &ledger), [&hp("/k/key")], "judged again");
        // What kube-anchor wrote itself is never a candidate (a version going back to an older
        // certificate is judged by `credentials::check`).
        let wrote = ledger_of(&[("/k/key", "RENEWED", Role::Credential)]);
        assert!(renewal_candidates(&d, &obs, &wrote).is_empty());
        let removal = plan_remove(&ledger, &[Role::Credential, Role::Manifest], &obs);
        assert_eq!(removal.plan.ops.len(), 2, "{removal:?}");

        // With the mode changed as well: its own content written back with the wanted mode.
        obs.insert(
            hp("/k/key"),
            Observed::File {
                sha256: crate::digest::sha256_hex(b"RENEWED"),
                mode: FileMode(0o644),
                owner: Owner { uid: 0, gid: 0 },
            },
        );
        let mut plan = plan_apply(&d, &obs, &ledger, false).unwrap();
        keep_renewed(&mut plan, &renewed, &obs);
        match plan.ops.as_slice() {
            [Op::Write { file, reason, .. }] => {
                assert_eq!(
                    (file.content.as_slice(), file.mode, *reason),
                    (&b"RENEWED"[..], FileMode(0o600), WriteReason::Mode)
                );
            }
            ops => panic!("{ops:?}"),
        }
    }

    #[test]
    fn a_changed_credential_is_held_and_nothing_else() {
        let d = desired();
        let ledger = ledger_of(&[
            ("/k/key", "KEY", Role::Credential),
            ("/k/m.yaml", "POD", Role::Manifest),
        ]);
        let mut obs = Observations::new();
        obs.insert(hp("/k/key"), on_disk("HALF A RENEWAL"));
        obs.insert(hp("/k/m.yaml"), on_disk("EDITED"));
        let mut plan = plan_apply(&d, &obs, &ledger, false).unwrap();
        hold_credential_drift(&mut plan, &ledger);
        assert_eq!(plan.held, [hp("/k/key")]);
        assert_eq!(
            plan.ops.iter().map(|op| op.path().clone()).collect::<Vec<_>>(),
            [hp("/k/m.yaml")]
        );
        // Missing, or a file kube-anchor never wrote: not held.
        for (obs_key, ledger) in [
            (Observed::Missing, ledger.clone()),
            (on_disk("SOMEONE'S"), ledger_of(&[("/k/m.yaml", "POD", Role::Manifest)])),
        ] {
            let mut obs = obs.clone();
            obs.insert(hp("/k/key"), obs_key);
            let mut plan = plan_apply(&d, &obs, &ledger, false).unwrap();
            hold_credential_drift(&mut plan, &ledger);
            assert!(plan.held.is_empty() && plan.ops.len() == 2, "{plan:?}");
        }
    }

    #[test]
    fn a_file_is_written_only_when_the_writer_can_read_it_back() {
        let root = |reads_any| Reader {
            uid: 0,
            gids: vec![0],
            reads_any,
        };
        let other = Some(Owner { uid: 1000, gid: 1000 });
        let group = Some(Owner { uid: 1000, gid: 0 });
        // (owner, mode, root with CAP_DAC_READ_SEARCH, root without, a process of uid 1000)
        let table = [
            (None, 0o600, true, true, true),
            (None, 0o200, true, false, false),
            (other, 0o600, true, false, true),
            (other, 0o644, true, true, true),
            (other, 0o640, true, false, true),
            (group, 0o640, true, true, true),
            (group, 0o600, true, false, true),
            // The owner's bits alone count for the owner, however open the rest is.
            (other, 0o044, true, true, false),
        ];
        for (owner, mode, with_cap, without, user) in table {
            let mut d = desired();
            d.files[0].owner = owner;
            d.files[0].mode = FileMode(mode);
            let user_reader = Reader {
                uid: 1000,
                gids: vec![1000],
                reads_any: false,
            };
            let case = format!("{owner:?} {mode:04o}");
            assert_eq!(
                check_readable(&d, &root(true)).is_ok(),
                with_cap,
                "{case} root with the capability"
            );
            assert_eq!(check_readable(&d, &root(false)).is_ok(), without, "{case} root without");
            let e = check_readable(&d, &user_reader);
            // The manifest (0600, owned by 0:0) is unreadable to uid 1000 anyway: judge the key.
            let key_refused = matches!(&e, Err(PlanError::WouldNotReadBack { path, .. }) if *path == hp("/k/key"));
            assert_eq!(!key_refused, user, "{case} uid 1000: {e:?}");
        }
        let e = check_readable(
            &{
                let mut d = desired();
                d.files[0].owner = other;
                d
            },
            &root(false),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with(
                "/k/key: refusing to write it as 1000:1000 mode 0600: this process (uid 0 without CAP_DAC_READ_SEARCH)"
            ),
            "{e}"
        );
    }

    #[test]
    fn only_a_repair_of_recorded_content_needs_no_intent() {
        let d = desired();
        let ledger = ledger_of(&[
            ("/k/key", "KEY", Role::Credential),
            ("/k/m.yaml", "POD", Role::Manifest),
        ]);
        // The key deleted by hand: put back as recorded.
        let deleted: Observations = [(hp("/k/m.yaml"), on_disk("POD"))].into();
        let repair = plan_apply(&d, &deleted, &ledger, false).unwrap();
        assert_eq!(repair.ops.len(), 1);
        assert!(writes_recorded(&ledger, &repair.ops));
        // A new version of the key: the ledger has the old content only.
        let old = ledger_of(&[
            ("/k/key", "OLD KEY", Role::Credential),
            ("/k/m.yaml", "POD", Role::Manifest),
        ]);
        let held: Observations = [(hp("/k/key"), on_disk("OLD KEY")), (hp("/k/m.yaml"), on_disk("POD"))].into();
        let change = plan_apply(&d, &held, &old, false).unwrap();
        assert!(!writes_recorded(&old, &change.ops));
        // A file kube-anchor never wrote: no entry.
        let key_only = ledger_of(&[("/k/key", "KEY", Role::Credential)]);
        let first = plan_apply(&d, &Observations::new(), &key_only, false).unwrap();
        assert!(!writes_recorded(&key_only, &first.ops));
        // Nothing to write.
        assert!(writes_recorded(&Ledger::new("c"), &[]));
    }

    #[test]
    fn only_files_kube_anchor_did_not_write_are_kept_and_only_credentials_put_back() {
        let d = desired();
        // Both paths hold something else; only the key has no ledger entry.
        let ledger = ledger_of(&[("/k/m.yaml", "OLD POD", Role::Manifest)]);
        let obs: Observations = [(hp("/k/key"), on_disk("THEIRS")), (hp("/k/m.yaml"), on_disk("OLD POD"))].into();
        let plan = plan_apply(&d, &obs, &ledger, false).unwrap();
        let kept = originals(&ledger, &plan.ops, &obs);
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].0, hp("/k/key"));
        assert_eq!(kept[0].1.sha256, crate::digest::sha256_hex(b"THEIRS"));
        // A missing path has nothing to keep.
        let none: Observations = [(hp("/k/m.yaml"), on_disk("OLD POD"))].into();
        assert!(originals(&ledger, &plan_apply(&d, &none, &ledger, false).unwrap().ops, &none).is_empty());
        // The intent already carries it, so a crash right after the rename still knows it.
        let intent = intent(&ledger, &plan.ops, &obs, "now");
        assert_eq!(intent.get(&hp("/k/key")).unwrap().original, Some(kept[0].1.clone()));
        // On removal: the credential's original is put back, the manifest's is not.
        let mut after = ledger_of(&[
            ("/k/key", "KEY", Role::Credential),
            ("/k/m.yaml", "POD", Role::Manifest),
        ]);
        for path in ["/k/key", "/k/m.yaml"] {
            let mut e = after.get(&hp(path)).unwrap().clone();
            e.original = Some(kept[0].1.clone());
            after.record(e);
        }
        let held: Observations = [(hp("/k/key"), on_disk("KEY")), (hp("/k/m.yaml"), on_disk("POD"))].into();
        let removal = plan_remove(&after, &[Role::Manifest, Role::Credential], &held);
        let restored: Vec<HostPath> = restorations(&after, &removal.plan.ops)
            .into_iter()
            .map(|(p, _)| p)
            .collect();
        assert_eq!(restored, [hp("/k/key")]);
        // Recording a new write keeps the original with the path.
        let mut e = after.get(&hp("/k/key")).unwrap().clone();
        e.original = None;
        after.record(e);
        assert!(after.get(&hp("/k/key")).unwrap().original.is_some());
    }

    fn reasons(plan: &Plan) -> Vec<(String, WriteReason)> {
        plan.ops
            .iter()
            .filter_map(|op| match op {
                Op::Write { file, reason, .. } => Some((file.path.to_string(), *reason)),
                Op::Remove { .. } => None,
            })
            .collect()
    }

    #[test]
    fn nothing_to_do_when_everything_matches() {
        let obs = Observations::from([(hp("/k/key"), on_disk("KEY")), (hp("/k/m.yaml"), on_disk("POD"))]);
        let plan = plan_apply(&desired(), &obs, &Ledger::new("c"), false).unwrap();
        assert!(plan.ops.is_empty());
        assert_eq!(plan.unchanged.len(), 2);
    }

    #[test]
    fn writes_credentials_before_the_manifest_with_reasons() {
        let obs = Observations::from([(hp("/k/m.yaml"), on_disk("OLD"))]);
        let plan = plan_apply(&desired(), &obs, &Ledger::new("c"), false).unwrap();
        assert_eq!(
            reasons(&plan),
            [
                ("/k/key".into(), WriteReason::Create),
                ("/k/m.yaml".into(), WriteReason::Content)
            ]
        );
    }

    #[test]
    fn every_kind_of_difference_is_a_write() {
        let sha = crate::digest::sha256_hex(b"KEY");
        let cases = [
            (Observed::Missing, WriteReason::Create),
            (Observed::Symlink, WriteReason::ReplaceSymlink),
            (on_disk("OTHER"), WriteReason::Content),
            (
                Observed::File {
                    sha256: sha.clone(),
                    mode: FileMode(0o644),
                    owner: Owner { uid: 0, gid: 0 },
                },
                WriteReason::Mode,
            ),
            (
                Observed::File {
                    sha256: sha.clone(),
                    mode: FileMode(0o600),
                    owner: Owner { uid: 1, gid: 0 },
                },
                WriteReason::Owner,
            ),
        ];
        for (have, want) in cases {
            let obs = Observations::from([(hp("/k/key"), have.clone()), (hp("/k/m.yaml"), on_disk("POD"))]);
            let plan = plan_apply(&desired(), &obs, &Ledger::new("c"), false).unwrap();
            assert_eq!(reasons(&plan), [("/k/key".into(), want)], "{have:?}");
        }
    }

    #[test]
    fn owner_is_ignored_when_the_config_names_none() {
        let mut d = desired();
        d.files[0].owner = None;
        let have = Observed::File {
            sha256: crate::digest::sha256_hex(b"KEY"),
            mode: FileMode(0o600),
            owner: Owner { uid: 7, gid: 7 },
        };
        let obs = Observations::from([(hp("/k/key"), have), (hp("/k/m.yaml"), on_disk("POD"))]);
        assert!(plan_apply(&d, &obs, &Ledger::new("c"), false).unwrap().ops.is_empty());
    }

    #[test]
    fn a_directory_at_the_destination_is_refused() {
        let obs = Observations::from([(hp("/k/key"), Observed::Other { kind: "directory" })]);
        assert_eq!(
            plan_apply(&desired(), &obs, &Ledger::new("c"), false).unwrap_err(),
            PlanError::NotAFile {
                path: hp("/k/key"),
                kind: "directory"
            }
        );
    }

    #[test]
    fn orphans_are_reported_and_pruned_only_on_request_and_only_when_unchanged() {
        let ledger = ledger_of(&[
            ("/k/old", "OLD", Role::Credential),
            ("/k/touched", "T", Role::Credential),
            ("/k/gone", "G", Role::Credential),
        ]);
        let obs = Observations::from([
            (hp("/k/key"), on_disk("KEY")),
            (hp("/k/m.yaml"), on_disk("POD")),
            (hp("/k/old"), on_disk("OLD")),
            (hp("/k/touched"), on_disk("EDITED")),
        ]);
        let plan = plan_apply(&desired(), &obs, &ledger, false).unwrap();
        assert!(plan.ops.is_empty());
        assert_eq!(plan.notices.len(), 3);
        let plan = plan_apply(&desired(), &obs, &ledger, true).unwrap();
        assert_eq!(
            plan.ops.iter().map(|o| o.path().to_string()).collect::<Vec<_>>(),
            ["/k/old"]
        );
        assert_eq!(plan.notices, [Notice::LeftModified { path: hp("/k/touched") }]);
    }

    #[test]
    fn remove_takes_the_manifest_first_and_spares_modified_files() {
        let ledger = ledger_of(&[
            ("/k/a", "A", Role::Credential),
            ("/k/m.yaml", "POD", Role::Manifest),
            ("/k/b", "B", Role::Credential),
            ("/k/c", "C", Role::Credential),
        ]);
        let obs = Observations::from([
            (hp("/k/a"), on_disk("A")),
            (hp("/k/m.yaml"), on_disk("POD")),
            (hp("/k/b"), on_disk("CHANGED")),
        ]);
        let plan = plan_remove(&ledger, &[Role::Manifest, Role::Credential], &obs).plan;
        assert_eq!(
            plan.ops.iter().map(|o| o.path().to_string()).collect::<Vec<_>>(),
            ["/k/m.yaml", "/k/a"]
        );
        assert_eq!(plan.notices, [Notice::LeftModified { path: hp("/k/b") }]);
    }

    #[test]
    fn a_stale_entry_is_corrected_when_the_file_holds_what_is_wanted() {
        // The ledger still has the key written before; the node holds the new one (a crash or a
        // failed ledger write came between the rename and the record).
        let mut ledger = ledger_of(&[
            ("/k/key", "OLD KEY", Role::Credential),
            ("/k/m.yaml", "POD", Role::Manifest),
        ]);
        let obs = Observations::from([(hp("/k/key"), on_disk("KEY")), (hp("/k/m.yaml"), on_disk("POD"))]);
        let plan = plan_apply(&desired(), &obs, &ledger, false).unwrap();
        assert!(plan.ops.is_empty());
        let adopted = adopt(&mut ledger, &desired(), &obs, &plan.unchanged, "now");
        assert_eq!(
            adopted,
            [hp("/k/key"), hp("/k/m.yaml")],
            "mode/owner of the manifest entry differ too"
        );
        assert_eq!(
            ledger.get(&hp("/k/key")).unwrap().sha256,
            crate::digest::sha256_hex(b"KEY")
        );
        // Once current, nothing is recorded again (the no-op apply writes nothing).
        assert!(adopt(&mut ledger, &desired(), &obs, &plan.unchanged, "later").is_empty());
    }

    #[test]
    fn the_intent_covers_old_and_new_content_until_the_final_record() {
        let ledger = ledger_of(&[("/k/key", "OLD KEY", Role::Credential)]);
        let obs = Observations::from([
            (hp("/k/key"), on_disk("OLD KEY")),
            (hp("/k/m.yaml"), on_disk("FOREIGN")),
        ]);
        let plan = plan_apply(&desired(), &obs, &ledger, false).unwrap();
        let intent = intent(&ledger, &plan.ops, &obs, "now");
        let key = intent.get(&hp("/k/key")).unwrap();
        assert_eq!(key.sha256, crate::digest::sha256_hex(b"KEY"));
        assert_eq!(key.previous_sha256, Some(crate::digest::sha256_hex(b"OLD KEY")));
        // What the manifest held was not ours: only the new content will be.
        assert_eq!(intent.get(&hp("/k/m.yaml")).unwrap().previous_sha256, None);
        // Whichever content a crash leaves, remove takes it.
        for (key_on_disk, manifest_on_disk) in [("OLD KEY", Observed::Missing), ("KEY", on_disk("POD"))] {
            let obs = Observations::from([
                (hp("/k/key"), on_disk(key_on_disk)),
                (hp("/k/m.yaml"), manifest_on_disk),
            ]);
            let removed: Vec<String> = plan_remove(&intent, &[Role::Credential], &obs)
                .plan
                .ops
                .iter()
                .map(|o| o.path().to_string())
                .collect();
            assert_eq!(removed, ["/k/key"], "{key_on_disk}");
            let Op::Remove { expected_sha256, .. } = &plan_remove(&intent, &[Role::Credential], &obs).plan.ops[0]
            else {
                unreachable!()
            };
            assert_eq!(*expected_sha256, crate::digest::sha256_hex(key_on_disk.as_bytes()));
        }
    }

    #[test]
    fn a_hand_edited_manifest_keeps_the_credentials() {
        let ledger = ledger_of(&[
            ("/k/key", "KEY", Role::Credential),
            ("/k/m.yaml", "POD", Role::Manifest),
            ("/k/edited", "E", Role::Credential),
        ]);
        let obs = Observations::from([
            (hp("/k/key"), on_disk("KEY")),
            (hp("/k/m.yaml"), on_disk("EDITED POD")),
            (hp("/k/edited"), on_disk("CHANGED")),
        ]);
        for roles in [&[Role::Manifest, Role::Credential][..], &[Role::Credential]] {
            let RemovePlan { plan, keep } = plan_remove(&ledger, roles, &obs);
            assert!(plan.ops.is_empty(), "{roles:?}");
            assert!(plan.notices.contains(&Notice::KeptForManifest {
                path: hp("/k/key"),
                manifest: hp("/k/m.yaml")
            }));
            assert!(plan.notices.contains(&Notice::LeftModified { path: hp("/k/edited") }));
            assert!(keep.contains(&hp("/k/key")) && keep.contains(&hp("/k/m.yaml")));
        }
        // Once the manifest is gone, the credentials go too.
        let obs = Observations::from([(hp("/k/key"), on_disk("KEY"))]);
        let plan = plan_remove(&ledger, &[Role::Manifest, Role::Credential], &obs);
        assert_eq!(
            plan.plan.ops.iter().map(|o| o.path().to_string()).collect::<Vec<_>>(),
            ["/k/key"]
        );
        assert!(plan.keep.is_empty());
    }

    #[test]
    fn status_covers_every_state() {
        let mut d = desired();
        d.files.insert(0, file("/k/new", "NEW", Role::Credential));
        d.files.insert(0, file("/k/foreign", "F", Role::Credential));
        let ledger = ledger_of(&[
            ("/k/key", "KEY", Role::Credential),
            ("/k/m.yaml", "POD", Role::Manifest),
            ("/k/orphan", "O", Role::Credential),
        ]);
        let obs = Observations::from([
            (hp("/k/foreign"), on_disk("F")),
            (hp("/k/key"), on_disk("KEY")),
            (hp("/k/m.yaml"), on_disk("EDITED")),
            (hp("/k/orphan"), on_disk("O")),
        ]);
        let states: Vec<(String, FileState)> = status(&d, &obs, &ledger, &[])
            .into_iter()
            .map(|s| (s.path.to_string(), s.state))
            .collect();
        assert_eq!(
            states,
            [
                ("/k/foreign".into(), FileState::Unmanaged),
                ("/k/new".into(), FileState::Missing),
                ("/k/key".into(), FileState::InSync),
                ("/k/m.yaml".into(), FileState::Drifted),
                ("/k/orphan".into(), FileState::Orphaned),
            ]
        );
    }
}
