//! Revision history: the versions of a component this node has run, newest first, with how each
//! ended (kept in the ledger, `Ledger::history`). A version that passed its trial keeps a
//! snapshot of its files in the state dir (`Revision::snapshot_name`), so `rollback --to` can go
//! back to any kept good version, not only the last. Pure: the engine stores the ledger and
//! removes the snapshots [`prune`] lets go.

use serde::{Deserialize, Serialize};

/// One version as this node ran it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Revision {
    /// The version's content hash (`sha256:<hex>`).
    pub hash: String,
    /// RFC 3339, UTC: when it was last written onto the node.
    pub applied_at: String,
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// How a version's time on the node ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "camelCase")]
pub enum Outcome {
    /// Written, not judged yet (or replaced before its trial ended).
    Trial,
    /// Survived its trial; its files are kept for a rollback.
    Passed { at: String },
    /// Failed its trial, or was rolled back by hand.
    Failed { at: String, reason: String },
}

impl Outcome {
    pub fn as_str(&self) -> &'static str {
        match self {
            Outcome::Trial => "trial",
            Outcome::Passed { .. } => "passed",
            Outcome::Failed { .. } => "failed",
        }
    }
}

impl Revision {
    /// Where a passed version's files are kept, below the state dir: by the hash's hex digits,
    /// so no path needs escaping.
    pub fn snapshot_name(component: &str, hash: &str) -> String {
        let hex: String = hash
            .strip_prefix("sha256:")
            .unwrap_or(hash)
            .chars()
            .filter(char::is_ascii_hexdigit)
            .collect();
        let hex = if hex.is_empty() { "none".into() } else { hex };
        format!("{}/history/{component}/{hex}.json", crate::state_layout::STATE_SUBDIR)
    }
}

/// How many revisions to keep besides the current and the last-known-good one (OpenShift's
/// static pod operators keep 5 of each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    pub succeeded: usize,
    pub failed: usize,
}

impl Default for Retention {
    fn default() -> Self {
        Self {
            succeeded: 5,
            failed: 5,
        }
    }
}

/// `hash` was written at `now`: it becomes the newest revision. Written again (a rollback to a
/// version that passed) it moves to the front and keeps its outcome; a failed one written again
/// (after `retry`) is on trial anew.
pub fn applied(history: &mut Vec<Revision>, hash: &str, now: &str) {
    if history.first().is_some_and(|r| r.hash == hash) {
        return;
    }
    let outcome = match take(history, hash) {
        Some(Revision {
            outcome: passed @ Outcome::Passed { .. },
            ..
        }) => passed,
        _ => Outcome::Trial,
    };
    history.insert(
        0,
        Revision {
            hash: hash.into(),
            applied_at: now.into(),
            outcome,
        },
    );
}

/// `hash` survived its trial at `now`.
pub fn passed(history: &mut Vec<Revision>, hash: &str, now: &str) {
    set(history, hash, now, Outcome::Passed { at: now.into() });
}

/// `hash` failed (or was rolled back by hand) at `at`, for `reason`.
pub fn failed(history: &mut Vec<Revision>, hash: &str, at: &str, reason: &str) {
    set(
        history,
        hash,
        at,
        Outcome::Failed {
            at: at.into(),
            reason: reason.into(),
        },
    );
}

/// Keeps `current` and `last_known_good` always, then the newest `retention.succeeded` passed
/// and `retention.failed` failed revisions; a version replaced before its trial ended is not
/// kept. Returns the revisions let go, whose snapshots go too (a version that passed and was
/// rolled back by hand later has one).
pub fn prune(
    history: &mut Vec<Revision>,
    retention: Retention,
    current: Option<&str>,
    last_known_good: Option<&str>,
) -> Vec<String> {
    let (mut succeeded, mut failed) = (0, 0);
    let mut dropped = Vec::new();
    history.retain(|r| {
        let pinned = Some(r.hash.as_str()) == current || Some(r.hash.as_str()) == last_known_good;
        let keep = match &r.outcome {
            Outcome::Passed { .. } => {
                succeeded += 1;
                pinned || succeeded <= retention.succeeded
            }
            Outcome::Failed { .. } => {
                failed += 1;
                pinned || failed <= retention.failed
            }
            Outcome::Trial => pinned,
        };
        if !keep {
            dropped.push(r.hash.clone());
        }
        keep
    });
    dropped
}

/// The kept revision `wanted` names: a whole hash, or a unique prefix of its hex digits (as
/// `status` shows them).
pub fn find<'a>(history: &'a [Revision], wanted: &str) -> Result<&'a Revision, FindError> {
    let wanted_hex = wanted.strip_prefix("sha256:").unwrap_or(wanted);
    if wanted_hex.is_empty() {
        return Err(FindError::NotKept(wanted.into()));
    }
    let matches: Vec<&Revision> = history
        .iter()
        .filter(|r| {
            r.hash
                .strip_prefix("sha256:")
                .unwrap_or(&r.hash)
                .starts_with(wanted_hex)
        })
        .collect();
    match matches.as_slice() {
        [one] => Ok(one),
        [] => Err(FindError::NotKept(wanted.into())),
        _ => Err(FindError::Ambiguous(wanted.into(), matches.len())),
    }
}

/// The kept revision `wanted` names that `rollback --to` may go back to: one that passed its
/// trial on this node.
pub fn find_passed<'a>(history: &'a [Revision], wanted: &str) -> Result<&'a Revision, FindError> {
    let revision = find(history, wanted)?;
    match revision.outcome {
        Outcome::Passed { .. } => Ok(revision),
        _ => Err(FindError::NotPassed(revision.hash.clone(), revision.outcome.as_str())),
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FindError {
    #[error("{0} is not a revision kept on this node")]
    NotKept(String),
    #[error("{0} names {1} kept revisions: give more of the hash")]
    Ambiguous(String, usize),
    #[error("{0} did not pass a trial on this node ({1}): only a version that did can be gone back to")]
    NotPassed(String, &'static str),
}

fn take(history: &mut Vec<Revision>, hash: &str) -> Option<Revision> {
    let i = history.iter().position(|r| r.hash == hash)?;
    Some(history.remove(i))
}

/// Sets `hash`'s outcome; a version with no revision yet (written before the node kept
/// history) is added as the newest.
fn set(history: &mut Vec<Revision>, hash: &str, now: &str, outcome: Outcome) {
    match history.iter_mut().find(|r| r.hash == hash) {
        Some(r) => r.outcome = outcome,
        None => history.insert(
            0,
            Revision {
                hash: hash.into(),
                applied_at: now.into(),
                outcome,
            },
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hashes(history: &[Revision]) -> Vec<(&str, &'static str)> {
        history.iter().map(|r| (r.hash.as_str(), r.outcome.as_str())).collect()
    }

    #[test]
    fn a_version_written_judged_and_written_again() {
        let mut h = Vec::new();
        applied(&mut h, "A", "t1");
        applied(&mut h, "A", "t2");
        assert_eq!(h[0].applied_at, "t1", "the same version again is no new revision");
        passed(&mut h, "A", "t3");
        applied(&mut h, "B", "t4");
        failed(&mut h, "B", "t5", "crash loop");
        // The rollback writes A again: it moves to the front, still passed.
        applied(&mut h, "A", "t6");
        assert_eq!(hashes(&h), [("A", "passed"), ("B", "failed")]);
        assert_eq!(h[0].applied_at, "t6");
        // B retried: on trial anew.
        applied(&mut h, "B", "t7");
        assert_eq!(hashes(&h), [("B", "trial"), ("A", "passed")]);
        // Failed without having a revision (written before history was kept): added.
        failed(&mut h, "Z", "t8", "by hand");
        assert_eq!(hashes(&h)[0], ("Z", "failed"));
    }

    #[test]
    fn prune_keeps_the_newest_of_each_and_never_the_current_or_last_known_good() {
        let retention = Retention {
            succeeded: 2,
            failed: 1,
        };
        let mut h = Vec::new();
        for (hash, ok) in [
            ("P1", true),
            ("F1", false),
            ("P2", true),
            ("T1", false),
            ("P3", true),
            ("F2", false),
            ("P4", true),
        ] {
            applied(&mut h, hash, hash);
            match (ok, hash.starts_with('T')) {
                (true, _) => passed(&mut h, hash, hash),
                (false, false) => failed(&mut h, hash, hash, "crash loop"),
                (false, true) => {}
            }
        }
        applied(&mut h, "T2", "now");
        // Newest first: T2 P4 F2 P3 T1 P2 F1 P1. P1 is the last-known-good, T2 current.
        let dropped = prune(&mut h, retention, Some("T2"), Some("P1"));
        assert_eq!(
            hashes(&h),
            [
                ("T2", "trial"),
                ("P4", "passed"),
                ("F2", "failed"),
                ("P3", "passed"),
                ("P1", "passed")
            ]
        );
        assert_eq!(dropped, ["T1", "P2", "F1"]);
        // Idempotent.
        assert!(prune(&mut h, retention, Some("T2"), Some("P1")).is_empty());
        assert_eq!(h.len(), 5);
    }

    #[test]
    fn find_by_hash_or_unique_prefix() {
        let mut h = Vec::new();
        for hash in ["sha256:abc1", "sha256:abd2", "sha256:ffff"] {
            applied(&mut h, hash, "t");
        }
        assert_eq!(find(&h, "sha256:ffff").unwrap().hash, "sha256:ffff");
        assert_eq!(find(&h, "abc").unwrap().hash, "sha256:abc1");
        assert_eq!(find(&h, "ab"), Err(FindError::Ambiguous("ab".into(), 2)));
        assert_eq!(find(&h, "0"), Err(FindError::NotKept("0".into())));
        assert_eq!(find(&h, ""), Err(FindError::NotKept("".into())));
    }

    #[test]
    fn only_a_revision_that_passed_can_be_gone_back_to() {
        let mut h = Vec::new();
        for hash in ["sha256:aa", "sha256:bb", "sha256:cc"] {
            applied(&mut h, hash, "t");
        }
        passed(&mut h, "sha256:aa", "t");
        failed(&mut h, "sha256:bb", "t", "crash loop");
        assert_eq!(find_passed(&h, "aa").unwrap().hash, "sha256:aa");
        assert_eq!(
            find_passed(&h, "bb"),
            Err(FindError::NotPassed("sha256:bb".into(), "failed"))
        );
        assert_eq!(
            find_passed(&h, "cc"),
            Err(FindError::NotPassed("sha256:cc".into(), "trial"))
        );
        assert_eq!(find_passed(&h, "dd"), Err(FindError::NotKept("dd".into())));
    }

    #[test]
    fn snapshot_names_stay_in_their_directory() {
        assert_eq!(
            Revision::snapshot_name("etcd", "sha256:00ff"),
            "v1/history/etcd/00ff.json"
        );
        assert_eq!(Revision::snapshot_name("etcd", "../../x"), "v1/history/etcd/none.json");
    }

    #[test]
    fn revisions_round_trip_with_their_outcome() {
        let r = Revision {
            hash: "sha256:1".into(),
            applied_at: "t".into(),
            outcome: Outcome::Failed {
                at: "u".into(),
                reason: "crash loop".into(),
            },
        };
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["result"], "failed");
        assert_eq!(json["reason"], "crash loop");
        assert_eq!(serde_json::from_value::<Revision>(json).unwrap(), r);
    }
}
