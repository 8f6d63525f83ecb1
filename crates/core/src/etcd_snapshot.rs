//! Scheduled etcd snapshots, decided: which node takes the snapshot of a schedule slot, what a
//! snapshot file is called and what is recorded beside it, and which old ones go.
//!
//! Time is cut into slots of `every` (counted from the Unix epoch, so every node cuts the same
//! slots). The snapshot of a slot is taken by one node: the healthy voters, sorted by member
//! name, take the slots in turn (slot number modulo their count). The cluster gets one snapshot
//! per slot, never one per node at once, and the newest copies are spread over the nodes: losing
//! one node's disk loses at most the slots it took. A node whose member is down or unhealthy is
//! left out of the turn, so its slots go to the others.
//!
//! Each node decides alone from what it sees; when two nodes see different healthy sets in the
//! same slot (a member failing mid-slot), both may take one, which costs disk, never data.

use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

/// `spec.etcdMember.snapshots.schedule`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    /// The slot length: one snapshot of the cluster per slot.
    pub every: Duration,
    /// Scheduled snapshots kept on each node, newest first.
    pub keep: usize,
}

/// What a node sees when it looks whether a snapshot is due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    /// Seconds since the Unix epoch.
    pub now: u64,
    pub every: Duration,
    /// This node's member name.
    pub me: String,
    /// Names of the voters whose own client URL answers healthy (a leader, no error but alarms).
    pub healthy_voters: Vec<String>,
    /// When the newest scheduled snapshot on this node was taken (seconds since the epoch).
    pub newest_here: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// This node takes the snapshot of `slot` now.
    Take { slot: u64 },
    /// This node already holds one taken in the current slot.
    TakenHere { slot: u64 },
    /// The slot is another node's.
    Elsewhere { slot: u64, taker: String },
    /// No voter answers healthy: no snapshot can be trusted to be current.
    NoHealthyVoter,
}

fn every_secs(every: Duration) -> u64 {
    every.as_secs().max(1)
}

/// The slot `now` falls in.
pub fn slot(now: u64, every: Duration) -> u64 {
    now / every_secs(every)
}

/// When slot `slot` starts (seconds since the epoch).
pub fn slot_start(slot: u64, every: Duration) -> u64 {
    slot.saturating_mul(every_secs(every))
}

pub fn decide(facts: &Facts) -> Decision {
    let slot = slot(facts.now, facts.every);
    if facts.newest_here.is_some_and(|t| t >= slot_start(slot, facts.every)) {
        return Decision::TakenHere { slot };
    }
    let mut voters = facts.healthy_voters.clone();
    voters.sort();
    voters.dedup();
    if voters.is_empty() {
        return Decision::NoHealthyVoter;
    }
    let taker = &voters[(slot % voters.len() as u64) as usize];
    if *taker == facts.me {
        Decision::Take { slot }
    } else {
        Decision::Elsewhere {
            slot,
            taker: taker.clone(),
        }
    }
}

/// Attempts a node makes at one slot's snapshot, each a look period after the one before
/// (each streams the whole database): a failure that lasts waits for the node's next slot.
pub const ATTEMPTS_PER_SLOT: u32 = 3;

/// How often a node looks whether a snapshot is due: a fifth of the slot, between 1 s and 30 s
/// (a node that takes over a slot from a failed member does so within this).
pub fn look_period(every: Duration) -> Duration {
    (every / 5).clamp(Duration::from_secs(1), Duration::from_secs(30))
}

/// The name of a snapshot taken at `taken_at` (seconds since the epoch): the UTC time, so names
/// sort by age, e.g. `20261207T230000Z.db`.
pub fn file_name(taken_at: u64) -> String {
    format!("{}.db", stamp(taken_at))
}

fn stamp(taken_at: u64) -> String {
    let time = SystemTime::UNIX_EPOCH + Duration::from_secs(taken_at);
    humantime::format_rfc3339_seconds(time)
        .to_string()
        .replace(['-', ':'], "")
}

/// When the snapshot named `name` was taken, for a name [`file_name`] made.
pub fn taken_at(name: &str) -> Option<u64> {
    let s = name.strip_suffix(".db")?;
    if s.len() != 16 || !s.is_ascii() {
        return None;
    }
    let rfc3339 = format!(
        "{}-{}-{}T{}:{}:{}Z",
        &s[0..4],
        &s[4..6],
        &s[6..8],
        &s[9..11],
        &s[11..13],
        &s[13..15]
    );
    let time = humantime::parse_rfc3339(&rfc3339).ok()?;
    let secs = time.duration_since(SystemTime::UNIX_EPOCH).ok()?.as_secs();
    (file_name(secs) == name).then_some(secs)
}

/// The record kept beside each snapshot (`<name>.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotRecord {
    /// RFC 3339.
    pub taken_at: String,
    /// The member it was taken from: its name and ID, and its cluster's ID (decimal, as etcd
    /// writes them).
    pub member: String,
    #[serde(rename = "memberID")]
    pub member_id: String,
    #[serde(rename = "clusterID")]
    pub cluster_id: String,
    /// The member's revision just before the snapshot: the snapshot holds at least this one.
    pub revision: i64,
    pub etcd_version: String,
    pub bytes: u64,
    /// sha256 of the whole file (etcd's own integrity hash is its last 32 bytes).
    pub sha256: String,
}

/// etcd's Snapshot RPC streams the database and then the sha256 of what it sent; a database is
/// a whole number of 512-byte pages, so a file with the hash is 32 bytes past one (the test
/// `etcdutl snapshot restore` makes before it trusts the hash).
pub const INTEGRITY_HASH_LEN: u64 = 32;

pub fn has_integrity_hash(bytes: u64) -> bool {
    bytes % 512 == INTEGRITY_HASH_LEN
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(now: u64, me: &str, healthy: &[&str], newest_here: Option<u64>) -> Facts {
        Facts {
            now,
            every: Duration::from_secs(3600),
            me: me.into(),
            healthy_voters: healthy.iter().map(|s| s.to_string()).collect(),
            newest_here,
        }
    }

    #[test]
    fn the_healthy_voters_take_the_slots_in_turn_one_node_per_slot() {
        let all = ["n2", "n1", "n3"];
        for slot in 0..6u64 {
            let now = slot * 3600 + 10;
            let takers: Vec<&str> = all
                .iter()
                .copied()
                .filter(|me| matches!(decide(&facts(now, me, &all, None)), Decision::Take { .. }))
                .collect();
            assert_eq!(takers.len(), 1, "slot {slot}: {takers:?}");
            assert_eq!(takers[0], ["n1", "n2", "n3"][(slot % 3) as usize]);
        }
    }

    #[test]
    fn an_unhealthy_members_slot_goes_to_a_healthy_one() {
        // Slot 1 would be n2's; n2 is down.
        let now = 3600 + 5;
        assert_eq!(
            decide(&facts(now, "n3", &["n1", "n3"], None)),
            Decision::Take { slot: 1 }
        );
        assert_eq!(
            decide(&facts(now, "n1", &["n1", "n3"], None)),
            Decision::Elsewhere {
                slot: 1,
                taker: "n3".into()
            }
        );
        assert_eq!(decide(&facts(now, "n1", &[], None)), Decision::NoHealthyVoter);
    }

    #[test]
    fn one_snapshot_per_slot_on_the_node_that_took_it() {
        let now = 7200 + 100;
        assert_eq!(
            decide(&facts(now, "n1", &["n1"], Some(7200))),
            Decision::TakenHere { slot: 2 }
        );
        // The one taken in the slot before does not count for this one.
        assert_eq!(
            decide(&facts(now, "n1", &["n1"], Some(7199))),
            Decision::Take { slot: 2 }
        );
    }

    #[test]
    fn names_sort_by_age_and_read_back() {
        let t = 1_796_684_400; // 2026-12-07T23:00:00Z
        assert_eq!(file_name(t), "20261207T230000Z.db");
        assert_eq!(taken_at(&file_name(t)), Some(t));
        assert!(file_name(t) < file_name(t + 1));
        assert!(file_name(999_999_999) < file_name(t));
        for bad in [
            "20261207T230000Z.json",
            "x.db",
            "20261307T230000Z.db",
            "2026-12-07T23:00:00Z.db",
        ] {
            assert_eq!(taken_at(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_look_period_is_a_fifth_of_the_slot_within_bounds() {
        assert_eq!(look_period(Duration::from_secs(6 * 3600)), Duration::from_secs(30));
        assert_eq!(look_period(Duration::from_secs(10)), Duration::from_secs(2));
        assert_eq!(look_period(Duration::from_secs(2)), Duration::from_secs(1));
    }

    #[test]
    fn a_file_with_etcds_hash_is_32_bytes_past_a_page() {
        assert!(has_integrity_hash(20512));
        assert!(!has_integrity_hash(20480));
        assert!(!has_integrity_hash(20511));
    }
}
