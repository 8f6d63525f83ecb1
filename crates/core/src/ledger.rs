//! The ledger: per component, what kube-anchor wrote on this node. Pure data and its encoding;
//! the host crate's `hostfs` stores it with the same atomic writer as everything else.
//!
//! On disk (`<state-dir>/v1/<component>.json`) it is an envelope
//! `{"schemaVersion": 1, "checksum": "sha256:<hex>", "ledger": {...}}` whose checksum covers the
//! exact bytes of `ledger`. A file that fails to parse or to verify is never trusted.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::config::{FileMode, Owner, Role};
use crate::digest::sha256_hex;
use crate::hostpath::HostPath;
use crate::state_layout::STATE_SUBDIR;

pub(crate) const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LedgerEntry {
    pub path: HostPath,
    pub sha256: String,
    pub mode: FileMode,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<Owner>,
    pub role: Role,
    /// RFC 3339, UTC.
    pub written_at: String,
    /// Set only in the intent record stored just before a write is renamed into place: the
    /// content (also ours) the path held before. A crash between that record and the final one
    /// leaves either content on disk, and both count as ours.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_sha256: Option<String>,
    /// The file the path held before kube-anchor first wrote it, when kube-anchor did not write
    /// that one (a hand-made `pki/ca.crt`): its content is kept in the state dir
    /// ([`Original::file_name`]) and put back when kube-anchor removes the path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original: Option<Original>,
    /// The content is a renewal made on the node that kube-anchor keeps
    /// (`credentials::renewed_on_node`), not what it wrote: still judged as one at each sync.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub renewed_on_node: bool,
}

/// A file kube-anchor replaced without having written it: what to put back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Original {
    pub sha256: String,
    pub mode: FileMode,
    pub owner: Owner,
}

impl Original {
    /// Where its content is kept, below the state dir: by content, so no path needs escaping
    /// and one file serves every path that held the same bytes.
    pub fn file_name(&self, component: &str) -> String {
        format!("{STATE_SUBDIR}/originals/{component}/{}", self.sha256)
    }
}

impl LedgerEntry {
    /// The record of `file` holding `sha256`, written (or adopted) at `now`.
    pub fn written(file: &crate::desired::DesiredFile, sha256: String, now: &str) -> Self {
        Self {
            path: file.path.clone(),
            sha256,
            mode: file.mode,
            owner: file.owner,
            role: file.role,
            written_at: now.into(),
            previous_sha256: None,
            original: None,
            renewed_on_node: false,
        }
    }

    /// True when `sha256` is content this entry says we wrote.
    pub fn is_ours(&self, sha256: &str) -> bool {
        self.sha256 == sha256 || self.previous_sha256.as_deref() == Some(sha256)
    }
}

/// A version that failed its trial: not written again until the inputs change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BadVersion {
    pub hash: String,
    /// RFC 3339, UTC.
    pub at: String,
    pub reason: String,
}

/// [`Ledger::rollback_plan`]'s decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RollbackPlan {
    /// The version the node is on, to record as bad (`None`: the node is on the target, or
    /// nothing was written here yet).
    pub mark_bad: Option<String>,
    /// The target becomes last-known-good.
    pub promote: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ledger {
    pub component: String,
    /// The content hash of the last successful apply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_hash: Option<String>,
    /// The last version that survived its trial (its files are in the LKG snapshot).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_known_good: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bad: Vec<BadVersion>,
    /// Set by `pre-stop` on a real decommission: no daemon writes this component again until a
    /// new anchor pod (or an explicit `apply`) takes it back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decommissioned: Option<Decommissioned>,
    /// Set by `kube-anchor pause`: no anchor writes, repairs, rolls back, joins or removes this
    /// component on the node until `kube-anchor resume` (the operator's own verbs still do).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<Paused>,
    /// Set by `run` while the last-known-good version, held in place of a bad one, fails as
    /// well (so `status` can say so); cleared once it runs converged again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_known_good_failing: Option<BadVersion>,
    /// Set by the kubelet's pre-start step (`kubelet_start`) when it put a version on trial back
    /// to last-known-good (a reboot or a kubelet restart, no API server answering the kubelet):
    /// the anchor tries that version again; put back by a second reboot, it is recorded as bad.
    /// Cleared when a version passes, or when this one is recorded as bad.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<Interrupted>,
    /// The versions this node has run, newest first, pruned to the engine's retention
    /// (`history`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<crate::history::Revision>,
    /// The clients (`--client-check` names) the version on the node has served outside a trial,
    /// and not refused since: those a version on trial must go on serving. Kept here so that the
    /// anchor pod replaced for a new version still knows them.
    /// `None`: never recorded (no anchor with client checks has evaluated the version yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clients_served: Option<std::collections::BTreeSet<String>>,
    /// Sorted by path.
    files: Vec<LedgerEntry>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Decommissioned {
    /// RFC 3339, UTC.
    pub at: String,
    pub reason: String,
    /// The anchor pod whose termination decommissioned the component.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by_pod: Option<String>,
}

/// A trial the kubelet's pre-start step ended before it was judged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Interrupted {
    pub hash: String,
    /// RFC 3339, UTC.
    pub at: String,
    pub reason: String,
    /// How many boots put this version back (kubelet restarts do not count: no static pod makes
    /// the kubelet restart). A record from before the count was a boot's.
    #[serde(default = "one_boot")]
    pub boots: u32,
}

fn one_boot() -> u32 {
    1
}

/// An operator's hold on the anchors of one component on one node (`kube-anchor pause`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Paused {
    /// RFC 3339, UTC.
    pub at: String,
    pub reason: String,
}

/// The files of the last-known-good version, kept so a rollback can restore them exactly.
/// Stored private (0600) in the state dir: it holds keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    pub component: String,
    pub content_hash: String,
    pub pod_name: String,
    pub pod_namespace: String,
    pub files: Vec<SnapshotFile>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotFile {
    pub path: HostPath,
    pub mode: FileMode,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<Owner>,
    pub role: Role,
    /// Base64.
    pub content: String,
}

impl Snapshot {
    pub fn of(desired: &crate::desired::Desired) -> Self {
        use base64::Engine as _;
        Self {
            component: desired.component.clone(),
            content_hash: desired.content_hash.clone(),
            pod_name: desired.pod_name.clone(),
            pod_namespace: desired.pod_namespace.clone(),
            files: desired
                .files
                .iter()
                .map(|f| SnapshotFile {
                    path: f.path.clone(),
                    mode: f.mode,
                    owner: f.owner,
                    role: f.role,
                    content: base64::engine::general_purpose::STANDARD.encode(&f.content),
                })
                .collect(),
        }
    }

    pub fn to_desired(&self) -> Result<crate::desired::Desired, CorruptLedger> {
        use base64::Engine as _;
        let files = self
            .files
            .iter()
            .map(|f| {
                let content = base64::engine::general_purpose::STANDARD
                    .decode(&f.content)
                    .map_err(|e| CorruptLedger {
                        reason: format!("{}: bad base64: {e}", f.path),
                    })?;
                Ok(crate::desired::DesiredFile {
                    path: f.path.clone(),
                    content,
                    mode: f.mode,
                    owner: f.owner,
                    role: f.role,
                })
            })
            .collect::<Result<Vec<_>, CorruptLedger>>()?;
        if files.last().map(|f| f.role) != Some(Role::Manifest) {
            return Err(CorruptLedger {
                reason: "snapshot does not end with its manifest".into(),
            });
        }
        Ok(crate::desired::Desired {
            component: self.component.clone(),
            files,
            content_hash: self.content_hash.clone(),
            pod_name: self.pod_name.clone(),
            pod_namespace: self.pod_namespace.clone(),
            node_ip: None,
            dropped_serving_names: Vec::new(),
        })
    }

    pub fn file_name(component: &str) -> String {
        format!("{component}.lkg.json")
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{reason}")]
pub struct CorruptLedger {
    pub reason: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct EnvelopeOut<'a> {
    schema_version: u32,
    checksum: String,
    ledger: &'a RawValue,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct EnvelopeIn<'a> {
    schema_version: u32,
    checksum: String,
    #[serde(borrow)]
    ledger: &'a RawValue,
}

impl Ledger {
    pub fn new(component: &str) -> Self {
        Self {
            component: component.into(),
            content_hash: None,
            last_known_good: None,
            bad: Vec::new(),
            decommissioned: None,
            paused: None,
            last_known_good_failing: None,
            interrupted: None,
            history: Vec::new(),
            clients_served: Default::default(),
            files: Vec::new(),
        }
    }

    pub fn bad_version(&self, hash: &str) -> Option<&BadVersion> {
        self.bad.iter().find(|b| b.hash == hash)
    }

    /// `hash`'s interruption, when the kubelet's pre-start step put it back ([`Ledger::interrupted`]).
    pub fn interrupted_version(&self, hash: &str) -> Option<&Interrupted> {
        self.interrupted.as_ref().filter(|i| i.hash == hash)
    }

    /// `hash` has been neither promoted (last-known-good) nor recorded as bad here: a version
    /// written is on trial until it is one or the other.
    pub fn is_unjudged(&self, hash: &str) -> bool {
        self.last_known_good.as_deref() != Some(hash) && self.bad_version(hash).is_none()
    }

    /// Remembers `hash` as bad (once; the latest reason wins). The list is bounded: the oldest
    /// entries go first.
    pub fn mark_bad(&mut self, bad: BadVersion) {
        crate::history::failed(&mut self.history, &bad.hash, &bad.at, &bad.reason);
        // A verdict ends an interruption: `retry` starts the version afresh.
        if self.interrupted_version(&bad.hash).is_some() {
            self.interrupted = None;
        }
        self.bad.retain(|b| b.hash != bad.hash);
        self.bad.push(bad);
        let excess = self.bad.len().saturating_sub(MAX_BAD_VERSIONS);
        self.bad.drain(..excess);
    }

    /// What `rollback` does to go back to `target` (last-known-good, or a kept revision that
    /// passed its trial): the version the node is on is recorded as bad unless it is the
    /// target, and the target becomes last-known-good unless it is already.
    pub fn rollback_plan(&self, target: &str) -> RollbackPlan {
        RollbackPlan {
            mark_bad: self.content_hash.clone().filter(|current| current != target),
            promote: self.last_known_good.as_deref() != Some(target),
        }
    }

    /// `retry`: forgets the bad versions `hash` names (every one when `None`), so an anchor tries
    /// them again; returns those forgotten.
    pub fn forget_bad(&mut self, hash: Option<&str>) -> Vec<BadVersion> {
        let (forget, keep) = std::mem::take(&mut self.bad)
            .into_iter()
            .partition::<Vec<_>, _>(|b| hash.is_none_or(|h| h == b.hash));
        self.bad = keep;
        forget
    }

    /// Whether last-known-good may be written in `hash`'s place: `hash` is recorded bad, or was
    /// put back before the kubelet started and waits to be tried again ([`Ledger::interrupted`]).
    pub fn may_hold_back(&self, hash: &str) -> bool {
        self.bad_version(hash).is_some() || self.interrupted_version(hash).is_some()
    }

    /// `hash` survived its trial at `now`: the last-known-good version.
    pub fn mark_good(&mut self, hash: &str, now: &str) {
        crate::history::passed(&mut self.history, hash, now);
        self.last_known_good = Some(hash.into());
        self.interrupted = None;
    }

    /// Prunes the history to `retention` (the current and last-known-good versions stay):
    /// the versions let go, whose snapshots go too.
    pub fn prune_history(&mut self, retention: crate::history::Retention) -> Vec<String> {
        crate::history::prune(
            &mut self.history,
            retention,
            self.content_hash.as_deref(),
            self.last_known_good.as_deref(),
        )
    }

    pub fn file_name(component: &str) -> String {
        format!("{component}.json")
    }

    /// Nothing worth keeping: no files, no decommission or pause marker.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty() && self.decommissioned.is_none() && self.paused.is_none()
    }

    pub fn has_files(&self) -> bool {
        !self.files.is_empty()
    }

    pub fn entries(&self) -> &[LedgerEntry] {
        &self.files
    }

    pub fn get(&self, path: &HostPath) -> Option<&LedgerEntry> {
        self.files
            .binary_search_by(|e| e.path.cmp(path))
            .ok()
            .map(|i| &self.files[i])
    }

    /// Records `entry`; the original the path held before kube-anchor's first write stays with
    /// the path until it is put back.
    pub fn record(&mut self, mut entry: LedgerEntry) {
        match self.files.binary_search_by(|e| e.path.cmp(&entry.path)) {
            Ok(i) => {
                if entry.original.is_none() {
                    entry.original = self.files[i].original.take();
                }
                self.files[i] = entry;
            }
            Err(i) => self.files.insert(i, entry),
        }
    }

    pub fn forget(&mut self, path: &HostPath) {
        self.files.retain(|e| &e.path != path);
    }

    /// Manifests first (a pod must stop before its files go), then the rest, each by path.
    pub(crate) fn entries_in_removal_order(&self) -> impl Iterator<Item = &LedgerEntry> {
        let manifests = self.files.iter().filter(|e| e.role == Role::Manifest);
        manifests.chain(self.files.iter().filter(|e| e.role != Role::Manifest))
    }

    pub fn encode(&self) -> Vec<u8> {
        encode_checked(self)
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, CorruptLedger> {
        let mut ledger: Ledger = decode_checked(bytes)?;
        ledger.files.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(ledger)
    }
}

const MAX_BAD_VERSIONS: usize = 16;

/// `{"schemaVersion", "checksum", "ledger"}` around any state: the checksum covers the exact
/// bytes of the body.
pub fn encode_checked<T: Serialize>(value: &T) -> Vec<u8> {
    let body = serde_json::to_string_pretty(value).expect("state always serializes");
    let raw = RawValue::from_string(body).expect("serde_json output is valid JSON");
    let envelope = EnvelopeOut {
        schema_version: SCHEMA_VERSION,
        checksum: format!("sha256:{}", sha256_hex(raw.get().as_bytes())),
        ledger: &raw,
    };
    let mut out = serde_json::to_vec(&envelope).expect("an envelope always serializes");
    out.push(b'\n');
    out
}

pub fn decode_checked<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, CorruptLedger> {
    let corrupt = |reason: String| CorruptLedger { reason };
    let envelope: EnvelopeIn = serde_json::from_slice(bytes).map_err(|e| corrupt(format!("not a state file: {e}")))?;
    if envelope.schema_version != SCHEMA_VERSION {
        return Err(corrupt(format!(
            "schema version {} (this build reads {SCHEMA_VERSION})",
            envelope.schema_version
        )));
    }
    let actual = format!("sha256:{}", sha256_hex(envelope.ledger.get().as_bytes()));
    if actual != envelope.checksum {
        return Err(corrupt(format!(
            "checksum mismatch: recorded {}, computed {actual}",
            envelope.checksum
        )));
    }
    serde_json::from_str(envelope.ledger.get()).map_err(|e| corrupt(format!("bad body: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Ledger {
        let mut l = Ledger::new("kube-apiserver");
        l.content_hash = Some("sha256:abc".into());
        for (path, role) in [
            ("/etc/kubernetes/z", Role::Credential),
            ("/etc/kubernetes/m.yaml", Role::Manifest),
            ("/etc/kubernetes/a", Role::Credential),
        ] {
            l.record(LedgerEntry {
                path: HostPath::parse(path).unwrap(),
                sha256: sha256_hex(path.as_bytes()),
                mode: FileMode(0o600),
                owner: Some(Owner { uid: 0, gid: 0 }),
                role,
                written_at: "2026-11-22T13:00:00Z".into(),
                previous_sha256: None,
                original: None,
                renewed_on_node: false,
            });
        }
        l
    }

    fn bad(hash: &str) -> BadVersion {
        BadVersion {
            hash: hash.into(),
            at: "t".into(),
            reason: "r".into(),
        }
    }

    #[test]
    fn rollback_records_the_current_version_bad_and_the_target_good_only_when_they_differ() {
        let mut l = Ledger::new("etcd");
        l.content_hash = Some("b".into());
        l.last_known_good = Some("a".into());
        // Back to last-known-good from a version on trial.
        assert_eq!(
            l.rollback_plan("a"),
            RollbackPlan {
                mark_bad: Some("b".into()),
                promote: false,
            }
        );
        // `--to` an older revision than last-known-good: both change.
        assert_eq!(
            l.rollback_plan("z"),
            RollbackPlan {
                mark_bad: Some("b".into()),
                promote: true,
            }
        );
        // Already on the target, which is not last-known-good yet: nothing is bad.
        assert_eq!(
            l.rollback_plan("b"),
            RollbackPlan {
                mark_bad: None,
                promote: true,
            }
        );
        // Nothing written here yet.
        l.content_hash = None;
        assert_eq!(l.rollback_plan("a").mark_bad, None);
    }

    #[test]
    fn retry_forgets_the_bad_version_named_or_every_one() {
        let mut l = Ledger::new("etcd");
        l.mark_bad(bad("x"));
        l.mark_bad(bad("y"));
        assert!(l.forget_bad(Some("z")).is_empty());
        assert_eq!(l.forget_bad(Some("x")), vec![bad("x")]);
        assert_eq!(l.bad, vec![bad("y")]);
        l.mark_bad(bad("x"));
        assert_eq!(l.forget_bad(None).len(), 2);
        assert!(l.bad.is_empty());
    }

    #[test]
    fn round_trips() {
        let l = sample();
        assert_eq!(Ledger::decode(&l.encode()).unwrap(), l);
        let text = String::from_utf8(l.encode()).unwrap();
        assert!(
            text.contains("\"schemaVersion\":1") && text.contains("\"mode\": \"0600\""),
            "{text}"
        );
    }

    #[test]
    fn record_replaces_and_keeps_order() {
        let mut l = sample();
        let paths: Vec<_> = l.entries_in_removal_order().map(|e| e.path.to_string()).collect();
        assert_eq!(
            paths,
            ["/etc/kubernetes/m.yaml", "/etc/kubernetes/a", "/etc/kubernetes/z"]
        );
        let mut e = l.entries()[0].clone();
        e.sha256 = "new".into();
        l.record(e.clone());
        assert_eq!(l.entries().len(), 3);
        assert_eq!(l.get(&e.path).unwrap().sha256, "new");
        l.forget(&e.path);
        assert!(l.get(&e.path).is_none());
    }

    #[test]
    fn any_flipped_byte_is_detected() {
        let bytes = sample().encode();
        let mut detected = 0;
        let mut survived = Vec::new();
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x01;
            match Ledger::decode(&b) {
                Err(_) => detected += 1,
                // A flip that only touches JSON whitespace or key case may still decode to the
                // same ledger; it must never decode to a different one.
                Ok(l) => survived.push((i, l)),
            }
        }
        assert!(detected > bytes.len() * 9 / 10, "{detected}/{}", bytes.len());
        for (i, l) in survived {
            assert_eq!(l, sample(), "flip at {i} changed the content undetected");
        }
    }

    #[test]
    fn truncation_and_wrong_versions_are_corrupt() {
        let bytes = sample().encode();
        assert!(Ledger::decode(&bytes[..bytes.len() / 2]).is_err());
        assert!(Ledger::decode(b"").is_err());
        let v2 = String::from_utf8(bytes)
            .unwrap()
            .replace("\"schemaVersion\":1", "\"schemaVersion\":2");
        assert!(
            Ledger::decode(v2.as_bytes())
                .unwrap_err()
                .reason
                .contains("schema version 2")
        );
    }
}
