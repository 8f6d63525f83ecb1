//! What an anchor publishes of its node for its component: one cluster-scoped `AnchorStatus`
//! object per node and component (`kube-anchor.io/v1alpha1`, the CRD of the library chart),
//! named `<node>.<component>`, that `kubectl get anchorstatuses` and `kube-anchor fleet` show.
//!
//! Everything in it comes from the node's ledger and the daemon's own lifecycle, so a restarted
//! anchor publishes the same object, and one that could not reach the API publishes it as soon
//! as the API answers. Pure: the anchor compares what [`NodeStatus::of`] makes with what the API
//! holds and writes only a difference.

use serde::{Deserialize, Serialize};

use crate::history::Outcome;
use crate::ledger::{BadVersion, Ledger};
use crate::lifecycle::Version;

pub const GROUP: &str = "kube-anchor.io";
pub const VERSION: &str = "v1alpha1";
pub const KIND: &str = "AnchorStatus";
pub const PLURAL: &str = "anchorstatuses";

/// The object's name: node names and component names are DNS names, so this is one too.
pub fn object_name(node: &str, component: &str) -> String {
    format!("{node}.{component}")
}

/// How many hex digits of a content hash the short forms keep (what `kubectl get` shows, and
/// what `rollback --to` accepts).
const SHORT: usize = 12;

/// A content hash as people read it: its first hex digits.
pub fn short_hash(hash: &str) -> String {
    hash.strip_prefix("sha256:")
        .unwrap_or(hash)
        .chars()
        .take(SHORT)
        .collect()
}

/// Where the version the node runs stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum State {
    /// Nothing written on this node yet.
    NotWritten,
    /// What runs passed its trial (or nothing newer is being tried).
    Settled,
    /// A new version on trial.
    OnTrial,
    /// The inputs name a version that failed: the last-known-good one is kept in its place.
    HeldBack,
    /// The last-known-good version, kept in place of a bad one, fails too.
    #[serde(rename = "lkg-failing")]
    LastKnownGoodFailing,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::NotWritten => "not-written",
            State::Settled => "settled",
            State::OnTrial => "on-trial",
            State::HeldBack => "held-back",
            State::LastKnownGoodFailing => "lkg-failing",
        }
    }
}

/// The `status` of an `AnchorStatus` object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatus {
    pub node: String,
    pub component: String,
    /// The version written on the node (short, and whole).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_hash: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_known_good: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_known_good_hash: Option<String>,
    pub state: State,
    /// RFC 3339: since when the state holds, as the ledger recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// The anchor's readiness: the static pod runs what was written.
    pub ready: bool,
    /// Why it is not ready.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Versions recorded as bad (not written again until `kube-anchor retry`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bad_versions: Vec<BadVersion>,
    /// The bad versions' short hashes, for a column.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub bad: String,
    /// The anchor pod that published this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// The newest scheduled etcd snapshot on the node (`<taken at> revision <n>`), set by the
    /// daemon beside what the ledger says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_snapshot: Option<String>,
}

/// What the daemon knows beside the ledger.
#[derive(Debug, Clone, Copy)]
pub struct Daemon<'a> {
    pub node: &'a str,
    pub pod: Option<&'a str>,
    pub version: &'a Version,
    pub ready: bool,
    pub reason: &'a str,
}

impl NodeStatus {
    pub fn of(ledger: &Ledger, daemon: Daemon<'_>) -> Self {
        let applied = ledger.content_hash.as_deref();
        let revision = applied.and_then(|h| ledger.history.iter().find(|r| r.hash == h));
        let (state, since) = match (applied, &ledger.last_known_good_failing, daemon.version) {
            (None, _, _) => (State::NotWritten, None),
            (Some(_), Some(failing), _) => (State::LastKnownGoodFailing, Some(failing.at.clone())),
            (Some(_), None, Version::HeldBack { .. }) => {
                (State::HeldBack, ledger.bad.iter().map(|b| b.at.clone()).max())
            }
            (Some(_), None, Version::OnTrial(_)) => (State::OnTrial, revision.map(|r| r.applied_at.clone())),
            (Some(_), None, Version::Settled) => (
                State::Settled,
                revision.map(|r| match &r.outcome {
                    Outcome::Passed { at } => at.clone(),
                    _ => r.applied_at.clone(),
                }),
            ),
        };
        Self {
            node: daemon.node.into(),
            component: ledger.component.clone(),
            applied: applied.map(short_hash),
            applied_hash: applied.map(str::to_owned),
            last_known_good: ledger.last_known_good.as_deref().map(short_hash),
            last_known_good_hash: ledger.last_known_good.clone(),
            state,
            since,
            ready: daemon.ready,
            reason: if daemon.ready {
                String::new()
            } else {
                daemon.reason.into()
            },
            bad_versions: ledger.bad.clone(),
            bad: ledger
                .bad
                .iter()
                .map(|b| short_hash(&b.hash))
                .collect::<Vec<_>>()
                .join(","),
            pod: daemon.pod.map(str::to_owned),
            last_snapshot: None,
        }
    }

    /// Converged (a version on trial too), with nothing held back or bad: what
    /// `kube-anchor fleet` exits 0 for.
    pub fn healthy(&self) -> bool {
        self.ready && matches!(self.state, State::Settled | State::OnTrial) && self.bad_versions.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn daemon(version: &Version, ready: bool) -> Daemon<'_> {
        Daemon {
            node: "cp-1",
            pod: Some("anchor-x"),
            version,
            ready,
            reason: "not converged",
        }
    }

    #[test]
    fn states_and_since_come_from_the_ledger() {
        let mut ledger = Ledger::new("kube-scheduler");
        let settled = Version::Settled;
        let s = NodeStatus::of(&ledger, daemon(&settled, false));
        assert_eq!(
            (s.state, s.since.as_deref(), s.applied.as_deref()),
            (State::NotWritten, None, None)
        );
        assert_eq!(s.reason, "not converged");

        let a = format!("sha256:{}", "a".repeat(64));
        let b = format!("sha256:{}", "b".repeat(64));
        ledger.content_hash = Some(a.clone());
        crate::history::applied(&mut ledger.history, &a, "t1");
        let on_trial = Version::OnTrial(crate::trial::Trial::start(&a, std::time::Duration::ZERO));
        let s = NodeStatus::of(&ledger, daemon(&on_trial, true));
        assert_eq!((s.state, s.since.as_deref()), (State::OnTrial, Some("t1")));
        assert_eq!(s.applied.as_deref(), Some("aaaaaaaaaaaa"));
        assert_eq!(s.applied_hash.as_deref(), Some(a.as_str()));
        assert!(s.reason.is_empty(), "a ready anchor gives no reason");

        ledger.mark_good(&a, "t2");
        let s = NodeStatus::of(&ledger, daemon(&settled, true));
        assert_eq!((s.state, s.since.as_deref()), (State::Settled, Some("t2")));
        assert_eq!(s.last_known_good.as_deref(), Some("aaaaaaaaaaaa"));
        assert!(s.healthy());

        ledger.mark_bad(BadVersion {
            hash: b.clone(),
            at: "t3".into(),
            reason: "crash loop".into(),
        });
        let held = Version::HeldBack { why: "b failed".into() };
        let s = NodeStatus::of(&ledger, daemon(&held, false));
        assert_eq!((s.state, s.since.as_deref()), (State::HeldBack, Some("t3")));
        assert_eq!(s.bad, "bbbbbbbbbbbb");
        assert_eq!(s.bad_versions[0].reason, "crash loop");
        assert!(!s.healthy());

        ledger.last_known_good_failing = Some(BadVersion {
            hash: a,
            at: "t4".into(),
            reason: "health".into(),
        });
        let s = NodeStatus::of(&ledger, daemon(&held, false));
        assert_eq!((s.state, s.since.as_deref()), (State::LastKnownGoodFailing, Some("t4")));
    }

    #[test]
    fn names_and_short_hashes() {
        assert_eq!(object_name("cp-1", "etcd"), "cp-1.etcd");
        assert_eq!(short_hash("sha256:0123456789abcdef"), "0123456789ab");
        let json = serde_json::to_value(State::LastKnownGoodFailing).unwrap();
        assert_eq!(json, State::LastKnownGoodFailing.as_str());
        assert_eq!(serde_json::to_value(State::OnTrial).unwrap(), "on-trial");
    }
}
