//! etcd membership decisions (pure): whether this node joins, resumes a join, promotes its
//! learner, keeps what it has or waits, and whether its member may leave the cluster.
//!
//! Members are matched by peer URL (the identity etcd itself checks on `member add`) and, as a
//! cross-check, by name; never by text. Inputs are observed facts only: the member list (or why
//! there is none), whether the data dir holds a member, the record this node keeps in its state
//! dir, and which members answered a health check. `etcd_member` gathers them and carries the
//! decision out.

use std::collections::{BTreeMap, BTreeSet};

use crate::margin::Margin;

/// One member as `MemberList` reports it. A member added but not started yet has no name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub id: u64,
    pub name: String,
    pub peer_urls: Vec<String>,
    pub client_urls: Vec<String>,
    pub is_learner: bool,
}

/// This node's member, as its config renders it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Me {
    pub name: String,
    pub peer_url: String,
}

/// The member list, or why none could be had. Neither failure is evidence of who the members
/// are, and they are different observations: nobody answered, or a cluster answered and would
/// not serve this node's client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemberList {
    Members(Vec<Member>),
    /// No endpoint gave a list: none reached (connection refused, no answer in time), or etcd
    /// could not serve one (no leader, a request timed out).
    Unreachable(String),
    /// An endpoint refused this node's client: the TLS handshake or authentication failed
    /// (an expired or untrusted client certificate, a rotated CA). A cluster runs there and does
    /// not accept these credentials: a reason to wait, never to start a cluster of one's own.
    Refused(String),
}

impl MemberList {
    /// The members, when there is a list.
    pub fn members(&self) -> Option<&[Member]> {
        match self {
            MemberList::Members(m) => Some(m),
            MemberList::Unreachable(_) | MemberList::Refused(_) => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Added as a learner (or found as one); not promoted yet.
    Learner,
    /// A voting member.
    Voter,
    /// Removed from the cluster by this node's pre-stop: the record keeps only the history.
    Removed,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Learner => "learner",
            Phase::Voter => "voter",
            Phase::Removed => "removed",
        }
    }
}

/// An action and its outcome, for `status` and metrics.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Attempt {
    pub at: String,
    pub action: String,
    pub result: String,
}

/// What this node keeps about its membership (`<state-dir>/v1/<component>.membership.json`,
/// checksummed like the ledger). `initial_cluster` and `initial_cluster_state` are fixed once,
/// when the node joins or bootstraps, and every later render uses them: an upgrade, a reboot or
/// another node's join never changes this node's manifest through membership.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    pub name: String,
    pub peer_url: String,
    /// The member ID (decimal) once known; a bootstrapping node learns it later.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member_id: Option<String>,
    pub phase: Phase,
    pub initial_cluster: String,
    pub initial_cluster_state: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_join: Option<Attempt>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_leave: Option<Attempt>,
    /// A leave asked for and not done yet (see [`LeaveIntent`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leave_pending: Option<LeaveIntent>,
}

/// A decommission was proved and this node's member asked to leave, but it has not left
/// (refused, etcd unreachable, out of time). Kept in the record across restarts until the
/// member is removed (or found gone), or until an anchor of another pod runs the component on
/// this node again (the decommission undone) — never dropped silently.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaveIntent {
    /// When the first attempt was made.
    pub since: String,
    /// The anchor pod whose pre-stop asked last (`None`: run by hand, outside a pod).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    pub attempts: u32,
    /// Why the last attempt did not remove the member (`None` while the first one runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_refusal: Option<String>,
}

impl LeaveIntent {
    /// Whether an anchor running in `this_pod` gives up this leave: only an anchor of another
    /// pod of the component, which exists because the component is wanted on this node again.
    /// The pod whose own pre-stop asked keeps running until it is stopped and must not undo
    /// it; without pod names nothing tells the two apart, so nothing is given up.
    pub fn cancelled_by(&self, this_pod: Option<&str>) -> bool {
        matches!((self.pod.as_deref(), this_pod), (Some(asked), Some(this)) if asked != this)
    }
}

impl Record {
    pub fn file_name(component: &str) -> String {
        format!("{component}.membership.json")
    }
}

/// Everything the join side looks at.
#[derive(Debug, Clone)]
pub struct JoinFacts<'a> {
    pub me: &'a Me,
    pub observed: &'a MemberList,
    /// The data dir holds `member/` (etcd has run here, or a copy of a member is here).
    pub data_dir_has_member: bool,
    pub record: Option<&'a Record>,
    /// This node is named in the chart's `initialCluster` of a new cluster.
    pub may_bootstrap: bool,
    /// Whether this process may found that cluster when no endpoint answers.
    pub founding: Founding,
    /// The operator says this node's data is truly gone (`apply --rejoin`): a recorded voter
    /// with no data may have its member removed and join again.
    pub rejoin_consented: bool,
}

/// Whether a join step may found a new cluster when no etcd endpoint answers at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Founding {
    /// `run`: an anchor runs in a cluster, so an etcd cluster exists; a list it cannot read is
    /// a reason to wait, whatever the values' `initialCluster` says.
    Never,
    /// `bootstrap` and `apply`: an operator starts the control plane on this node. A cluster
    /// that refused this node's client is still never founded anew.
    WhenNoneAnswers,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Join {
    /// Part of a new cluster: record the configured initial cluster with state `new`.
    Bootstrap,
    /// Not a member: add this node as a learner, record the member list, then write.
    AddLearner,
    /// A learner with this node's peer URL exists but nothing is recorded (a join interrupted
    /// after the add): record it and carry on, never add a second one.
    Resume { id: u64 },
    /// The learner runs here: try to promote it (etcd refuses until it has caught up; retry).
    Promote { id: u64 },
    /// The member is a voter now: record that.
    RecordVoter { id: u64 },
    /// An existing member's data dir with no record (membership enabled on a running
    /// cluster): record the member as it is.
    Adopt { id: u64, learner: bool },
    /// A member with this node's peer URL and name has run (it published its client URLs) but this node holds
    /// no data for it: the node was re-imaged or its data dir lost. etcd cannot restart that
    /// member from an empty data dir; it must be removed (when the voters left keep a healthy
    /// quorum, checked by [`decide_leave`]) and this node joins again as a learner.
    Rejoin { stale: u64 },
    /// The record holds this node's member as a voter, but its data dir holds no member: a
    /// disk not mounted yet as this process sees it, or data lost. Nothing is removed and the
    /// manifest stays as recorded until the operator says the data is gone (`apply --rejoin`,
    /// which decides [`Join::Rejoin`] instead).
    AwaitRejoinConsent { stale: u64 },
    /// Nothing to change.
    Keep,
    /// Do nothing (and write no manifest unless a record already exists).
    Wait(String),
}

/// Who in `members` is this node: by peer URL; a name match with other peer URLs is a conflict.
pub fn find_me<'a>(me: &Me, members: &'a [Member]) -> Result<Option<&'a Member>, String> {
    if let Some(m) = members.iter().find(|m| m.peer_urls.iter().any(|u| u == &me.peer_url)) {
        if !m.name.is_empty() && m.name != me.name {
            return Err(format!(
                "member {:x} has this node's peer URL {} but the name {:?}, not {:?}",
                m.id, me.peer_url, m.name, me.name
            ));
        }
        return Ok(Some(m));
    }
    if let Some(m) = members.iter().find(|m| m.name == me.name) {
        return Err(format!(
            "member {:x} is named {:?} but has peer URLs {:?}, not {}",
            m.id, me.name, m.peer_urls, me.peer_url
        ));
    }
    Ok(None)
}

pub fn decide_join(f: &JoinFacts) -> Join {
    // A member this node removed is gone: it joins again like a new node (or waits, while its
    // old data dir is there).
    let record = f.record.filter(|r| r.phase != Phase::Removed);
    let f = &JoinFacts { record, ..f.clone() };
    if let Some(r) = f.record
        && (r.peer_url != f.me.peer_url || r.name != f.me.name)
    {
        return Join::Wait(format!(
            "the recorded member is {} at {}, but this node renders {} at {}; remove the record by hand only after checking the cluster",
            r.name, r.peer_url, f.me.name, f.me.peer_url
        ));
    }
    if stays_local(f.record, f.data_dir_has_member) {
        return Join::Keep;
    }
    let members = match f.observed {
        MemberList::Members(m) => m,
        // A learner being joined (a record): the manifest from the record keeps etcd running.
        MemberList::Refused(why) => {
            return Join::Wait(format!(
                "etcd refused this node's client ({why}): a cluster runs and does not accept the anchor's etcd client certificate; the join waits until it does (renew the certificate, or the CA etcd trusts it by)"
            ));
        }
        MemberList::Unreachable(why) => {
            return match (f.record, f.may_bootstrap, f.founding) {
                (Some(_), _, _) => Join::Wait(format!("etcd unreachable ({why}); the join resumes when it answers")),
                (None, true, Founding::WhenNoneAnswers) => Join::Bootstrap,
                (None, true, Founding::Never) => Join::Wait(format!(
                    "etcd unreachable ({why}); this node is in the initial cluster, but a running anchor never founds one (a cluster exists wherever it runs): it waits for the member list. `kube-anchor bootstrap` founds a new cluster"
                )),
                (None, false, _) => Join::Wait(format!(
                    "etcd unreachable ({why}) and this node is not in the initial cluster: it may not start a cluster of its own"
                )),
            };
        }
    };
    let mine = match find_me(f.me, members) {
        Ok(m) => m,
        Err(conflict) => return Join::Wait(conflict),
    };
    match (f.record, mine) {
        (Some(_), Some(m)) if m.is_learner => {
            if f.data_dir_has_member {
                Join::Promote { id: m.id }
            } else {
                Join::Keep // etcd has not started from the manifest yet
            }
        }
        // The record survived and the data did not: a disk not mounted yet (as this process
        // sees it), or data wiped by hand. Not evidence enough to remove a member whose data may
        // be back in a moment; an operator who knows it is gone says so. (A re-imaged node,
        // whose record went with the data, rejoins by itself below.)
        (Some(r), Some(m)) if data_lost(r, f.data_dir_has_member) && has_run(m) => {
            if f.rejoin_consented {
                Join::Rejoin { stale: m.id }
            } else {
                Join::AwaitRejoinConsent { stale: m.id }
            }
        }
        (Some(_), Some(m)) => Join::RecordVoter { id: m.id },
        (Some(_), None) => Join::Wait(format!(
            "recorded as a learner, but the cluster has no member with peer URL {}: it was removed; the data dir and the record must be cleared by hand before it joins again",
            f.me.peer_url
        )),
        (None, Some(m)) if f.data_dir_has_member => Join::Adopt {
            id: m.id,
            learner: m.is_learner,
        },
        // It ran (it published its client URLs) but left no data here: re-imaged.
        (None, Some(m)) if has_run(m) => Join::Rejoin { stale: m.id },
        (None, Some(m)) if m.is_learner => Join::Resume { id: m.id },
        // A voter that never started: a node of the initial cluster coming up late.
        (None, Some(_)) if f.may_bootstrap => Join::Bootstrap,
        (None, Some(m)) => Join::Wait(format!(
            "member {:x} with this node's peer URL is a voter, but this node has no data and is not in the initial cluster",
            m.id
        )),
        (None, None) if f.data_dir_has_member => Join::Wait(format!(
            "the data dir holds a member, but the cluster has no member with peer URL {}: it was removed; clear the data dir by hand",
            f.me.peer_url
        )),
        (None, None) => Join::AddLearner,
    }
}

/// A member that has started: it published its client URLs. (Its name is no sign: the members
/// of an initial cluster are named from `--initial-cluster` before they ever start.)
fn has_run(m: &Member) -> bool {
    !m.client_urls.is_empty()
}

/// A recorded voter whose data is here needs nothing of the cluster: upgrades, restarts and
/// reboots change nothing, and the join step does not even list the members. Only a recorded
/// member whose data is gone (a bootstrap record has no ID until etcd has run) asks further.
pub fn stays_local(record: Option<&Record>, data_dir_has_member: bool) -> bool {
    record.is_some_and(|r| r.phase == Phase::Voter && !data_lost(r, data_dir_has_member))
}

/// A recorded voter with a member ID (it has run) whose data dir holds no member.
fn data_lost(r: &Record, data_dir_has_member: bool) -> bool {
    r.phase == Phase::Voter && r.member_id.is_some() && !data_dir_has_member
}

/// The `--initial-cluster` value for a joining node: every member that has a name (started) or
/// is this node, `name=peerURL` in member order, this node under its own name.
pub fn initial_cluster(me: &Me, members: &[Member]) -> String {
    let mut parts = Vec::new();
    for m in members {
        let is_me = m.peer_urls.iter().any(|u| u == &me.peer_url);
        let name = if is_me { me.name.as_str() } else { m.name.as_str() };
        if name.is_empty() {
            continue; // another member added but never started: etcd refuses nameless entries
        }
        for u in &m.peer_urls {
            parts.push(format!("{name}={u}"));
        }
    }
    if !members.iter().any(|m| m.peer_urls.iter().any(|u| u == &me.peer_url)) {
        parts.push(format!("{}={}", me.name, me.peer_url));
    }
    parts.join(",")
}

/// Everything the leave side looks at.
#[derive(Debug, Clone)]
pub struct LeaveFacts<'a> {
    pub me: &'a Me,
    pub observed: &'a MemberList,
    /// IDs of the members that answered a health check (status with a leader).
    pub healthy: &'a BTreeSet<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Leave {
    Remove {
        id: u64,
    },
    /// The cluster has no member with this node's peer URL: nothing to remove.
    NotAMember,
    Refuse(Refusal),
}

/// Why this node's member may not leave now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No member list (never evidence of anything).
    Unreachable(String),
    /// etcd refused this node's client (TLS, authentication): no member list either.
    Refused(String),
    /// The member list disagrees with this node's name and peer URL: a person must look.
    Conflict(String),
    /// The last voting member: its data is the cluster's.
    LastVoter,
    /// The voters that remain would not keep a healthy quorum.
    Quorum {
        remaining: usize,
        healthy: usize,
        needed: usize,
    },
}

impl Refusal {
    /// Whether the same leave, asked again, may pass: etcd may answer again, a member come
    /// back to health. A conflict or the last voter does not change by waiting.
    pub fn may_pass_later(&self) -> bool {
        matches!(
            self,
            Refusal::Unreachable(_) | Refusal::Refused(_) | Refusal::Quorum { .. }
        )
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Unreachable(why) => write!(f, "etcd unreachable ({why}): membership unknown"),
            Refusal::Refused(why) => write!(f, "etcd refused this node's client ({why}): membership unknown"),
            Refusal::Conflict(conflict) => f.write_str(conflict),
            Refusal::LastVoter => f.write_str("this is the last voting member of the cluster"),
            Refusal::Quorum {
                remaining,
                healthy,
                needed,
            } => write!(
                f,
                "removing it would leave {remaining} voting members of which {healthy} are healthy; a quorum needs {needed}"
            ),
        }
    }
}

/// Remove this node's member only when the voters that remain keep a healthy quorum: after
/// removal there are n-1 voters, and the healthy ones among them must be at least
/// (n-1)/2+1. Never the last member. A learner does not vote and can always go.
pub fn decide_leave(f: &LeaveFacts) -> Leave {
    let members = match f.observed {
        MemberList::Members(m) => m,
        MemberList::Unreachable(why) => return Leave::Refuse(Refusal::Unreachable(why.clone())),
        MemberList::Refused(why) => return Leave::Refuse(Refusal::Refused(why.clone())),
    };
    let mine = match find_me(f.me, members) {
        Ok(Some(m)) => m,
        Ok(None) => return Leave::NotAMember,
        Err(conflict) => return Leave::Refuse(Refusal::Conflict(conflict)),
    };
    if mine.is_learner {
        return Leave::Remove { id: mine.id };
    }
    let voters: Vec<&Member> = members.iter().filter(|m| !m.is_learner).collect();
    let n = voters.len();
    if n <= 1 {
        return Leave::Refuse(Refusal::LastVoter);
    }
    let remaining = n - 1;
    let needed = remaining / 2 + 1;
    let healthy = voters
        .iter()
        .filter(|m| m.id != mine.id && f.healthy.contains(&m.id))
        .count();
    if healthy < needed {
        return Leave::Refuse(Refusal::Quorum {
            remaining,
            healthy,
            needed,
        });
    }
    Leave::Remove { id: mine.id }
}

/// Which snapshots to delete so that at most `keep` remain: the oldest first (names sort by
/// time).
pub fn snapshots_to_prune(names: &[String], keep: usize) -> Vec<String> {
    let mut sorted = names.to_vec();
    sorted.sort();
    let excess = sorted.len().saturating_sub(keep);
    sorted.into_iter().take(excess).collect()
}

/// What another member's own endpoint said about itself (`/v3/maintenance/status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerStatus {
    pub raft_applied_index: u64,
    /// It answered with no errors and knows a leader.
    pub healthy: bool,
}

/// How far behind the leader's raft index a transferee may be: etcd's own `MoveLeader` waits
/// for the transferee to catch up, within its election timeout, so one far behind would fail.
pub const HAND_OFF_MAX_LAG: u64 = 1000;

/// Before this node's etcd restarts (a new manifest) or leaves: where its leadership goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandOff {
    /// This member does not lead: nothing to hand off.
    NotLeader,
    /// Move leadership to this voter first.
    MoveTo { id: u64, name: String },
    /// This member leads and no voter can take over; the write goes on regardless (a single
    /// member, every other voter unhealthy or behind).
    NoCandidate(String),
}

/// Picks the voter to take over from `me` when `me` leads: another voter, healthy by its own
/// word, within [`HAND_OFF_MAX_LAG`] of the leader's index; the most caught-up one (then the
/// lowest ID, so every retry picks the same).
pub fn hand_off(
    me: u64,
    leader: u64,
    leader_index: u64,
    members: &[Member],
    peers: &BTreeMap<u64, PeerStatus>,
) -> HandOff {
    if leader != me {
        return HandOff::NotLeader;
    }
    let voters: Vec<&Member> = members.iter().filter(|m| m.id != me && !m.is_learner).collect();
    if voters.is_empty() {
        return HandOff::NoCandidate("no other voting member".into());
    }
    let best = voters
        .iter()
        .filter_map(|m| {
            peers
                .get(&m.id)
                .filter(|p| p.healthy)
                .map(|p| (m, p.raft_applied_index))
        })
        .filter(|(_, applied)| leader_index.saturating_sub(*applied) <= HAND_OFF_MAX_LAG)
        .max_by(|(a, ia), (b, ib)| ia.cmp(ib).then(b.id.cmp(&a.id)));
    match best {
        Some((m, _)) => HandOff::MoveTo {
            id: m.id,
            name: m.name.clone(),
        },
        None => HandOff::NoCandidate(format!(
            "none of the {} other voters is healthy and within {HAND_OFF_MAX_LAG} entries of the leader",
            voters.len()
        )),
    }
}

/// Before a voluntary restart of this node's member: every other voter must be healthy by its
/// own word (answers a status with a leader and no errors) and within [`HAND_OFF_MAX_LAG`]
/// entries of the most advanced one, so that while this one is down the others hold a quorum
/// that does not wait on a slow member. A member added but not started (no name) is a voter
/// that does not answer. Learners do not vote: they neither count nor block. The rule of
/// OpenShift's etcd operator (`ceohelpers.IsQuorumFaultTolerant`: a revision only where etcd
/// can lose a member), per member instead of per count, so that a slow voter counts too.
pub fn restart_margin(me: &Me, observed: &MemberList, peers: &BTreeMap<u64, PeerStatus>) -> Margin {
    let members = match observed {
        MemberList::Members(m) => m,
        MemberList::Unreachable(why) | MemberList::Refused(why) => {
            return Margin::Short(format!(
                "etcd's member list cannot be read ({why}): whether it can lose this member is unknown"
            ));
        }
    };
    let mine = match find_me(me, members) {
        Ok(Some(m)) => m,
        Ok(None) => return Margin::CannotExist("this node has no member in the cluster: no vote to lose".into()),
        Err(conflict) => return Margin::Short(conflict),
    };
    if mine.is_learner {
        return Margin::CannotExist("this node's member is a learner: no vote to lose".into());
    }
    let others: Vec<&Member> = members.iter().filter(|m| !m.is_learner && m.id != mine.id).collect();
    // Two voters and a learner is a join under way (or a re-imaged node rejoining): once the
    // learner is promoted there is a margin, and a restart before that loses quorum.
    if others.len() == 1
        && let Some(learner) = members.iter().find(|m| m.is_learner)
    {
        let name = if learner.name.is_empty() {
            format!("{:x}", learner.id)
        } else {
            learner.name.clone()
        };
        return Margin::Short(format!(
            "etcd cannot lose this member now: 2 voting members, and {name} is a learner not promoted yet; a restart before it votes loses quorum"
        ));
    }
    if others.len() < 2 {
        return Margin::CannotExist(format!(
            "{} voting member{}: losing any one loses quorum, so no restart can keep it",
            others.len() + 1,
            if others.is_empty() { "" } else { "s" }
        ));
    }
    let front = others
        .iter()
        .filter_map(|m| peers.get(&m.id))
        .filter(|p| p.healthy)
        .map(|p| p.raft_applied_index)
        .max()
        .unwrap_or(0);
    let lacking: Vec<String> = others
        .iter()
        .filter_map(|m| {
            let name = if m.name.is_empty() {
                format!("{:x} (not started)", m.id)
            } else {
                format!("{} ({:x})", m.name, m.id)
            };
            match peers.get(&m.id) {
                None => Some(format!("{name} does not answer")),
                Some(p) if !p.healthy => Some(format!("{name} has no leader or reports errors")),
                Some(p) if front.saturating_sub(p.raft_applied_index) > HAND_OFF_MAX_LAG => {
                    Some(format!("{name} is {} entries behind", front - p.raft_applied_index))
                }
                Some(_) => None,
            }
        })
        .collect();
    if lacking.is_empty() {
        Margin::Affords
    } else {
        let voters = others.len() + 1;
        Margin::Short(format!(
            "etcd cannot lose this member now: {} of {voters} voting members would be left to hold a quorum of {}, and {}",
            others.len(),
            voters / 2 + 1,
            lacking.join(", ")
        ))
    }
}

/// A learner's place in the leader's log, as the leader records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LearnerProgress {
    /// The leader's own matched index (its last log entry).
    pub leader_index: u64,
    /// The last index of the learner's log that matches the leader's; `None` when the leader
    /// tracks nothing for it.
    pub matched: Option<u64>,
}

impl LearnerProgress {
    /// Entries the learner lacks of the leader's log.
    pub fn behind(&self) -> Option<u64> {
        self.matched.map(|m| self.leader_index.saturating_sub(m))
    }
}

impl std::fmt::Display for LearnerProgress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.matched {
            Some(m) => write!(
                f,
                "{} entries behind the leader (it matches up to index {m} of {}; etcd promotes it from index {})",
                self.leader_index.saturating_sub(m),
                self.leader_index,
                promotable_from(self.leader_index)
            ),
            None => write!(
                f,
                "the leader (at index {}) has no progress recorded for it",
                self.leader_index
            ),
        }
    }
}

/// The matched index from which etcd promotes a learner: 90 % of the leader's own matched
/// index (`readyPercentThreshold` in etcd's server, `isLearnerReady`).
pub fn promotable_from(leader_index: u64) -> u64 {
    // The least m with m >= 0.9 * L: L - floor(L / 10).
    leader_index - leader_index / 10
}

/// Whether a learner waiting `waited` for its promotion has overrun `bound`, and if so how
/// far behind it is, in words (the Warning Event's note). `progress` is the leader's view, or
/// why there is none.
pub fn learner_overdue(
    id: u64,
    progress: Result<&LearnerProgress, &str>,
    waited: std::time::Duration,
    bound: std::time::Duration,
) -> Option<String> {
    if waited < bound {
        return None;
    }
    let how_far = match progress {
        Ok(p) => p.to_string(),
        Err(why) => format!("how far behind it is is unknown ({why})"),
    };
    Some(format!(
        "learner {id:x} has not caught up within {} (waiting {}): {how_far}",
        humantime::format_duration(bound),
        humantime::format_duration(std::time::Duration::from_secs(waited.as_secs()))
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> Me {
        Me {
            name: "n4".into(),
            peer_url: "https://10.0.0.4:2380".into(),
        }
    }

    fn member(id: u64, name: &str, ip: u8, learner: bool) -> Member {
        Member {
            id,
            name: name.into(),
            peer_urls: vec![format!("https://10.0.0.{ip}:2380")],
            client_urls: vec![],
            is_learner: learner,
        }
    }

    fn three() -> Vec<Member> {
        vec![
            member(1, "n1", 1, false),
            member(2, "n2", 2, false),
            member(3, "n3", 3, false),
        ]
    }

    fn record(phase: Phase) -> Record {
        Record {
            name: "n4".into(),
            peer_url: "https://10.0.0.4:2380".into(),
            member_id: Some("4".into()),
            phase,
            initial_cluster: "x".into(),
            initial_cluster_state: "existing".into(),
            last_join: None,
            last_leave: None,
            leave_pending: None,
        }
    }

    fn join(observed: MemberList, data: bool, rec: Option<Phase>, boot: bool) -> Join {
        let me = me();
        let r = rec.map(record);
        decide_join(&JoinFacts {
            me: &me,
            observed: &observed,
            data_dir_has_member: data,
            record: r.as_ref(),
            may_bootstrap: boot,
            founding: Founding::WhenNoneAnswers,
            rejoin_consented: true,
        })
    }

    /// [F9, issue 55 item 3] A recorded voter whose data dir reads empty (a disk mounted after
    /// this process looked, data wiped by hand) is not removed on that alone: it waits, saying
    /// why, until the operator says the data is gone (`apply --rejoin`). A re-imaged node, with
    /// no record either, rejoins by itself.
    #[test]
    fn a_recorded_voter_without_data_rejoins_only_with_consent() {
        let me = me();
        let mut ran = member(4, "n4", 4, false);
        ran.client_urls = vec!["https://10.0.0.4:2379".into()];
        let observed = with(ran);
        let voter = record(Phase::Voter);
        let decide = |record: Option<&Record>, rejoin_consented| {
            decide_join(&JoinFacts {
                me: &me,
                observed: &observed,
                data_dir_has_member: false,
                record,
                may_bootstrap: false,
                founding: Founding::Never,
                rejoin_consented,
            })
        };
        assert_eq!(decide(Some(&voter), false), Join::AwaitRejoinConsent { stale: 4 });
        assert_eq!(decide(Some(&voter), true), Join::Rejoin { stale: 4 });
        assert_eq!(decide(None, false), Join::Rejoin { stale: 4 }, "re-imaged: no record");
    }

    fn with(extra: Member) -> MemberList {
        let mut m = three();
        m.push(extra);
        MemberList::Members(m)
    }

    fn down() -> MemberList {
        MemberList::Unreachable("connection refused".into())
    }

    fn is_wait(j: &Join) -> bool {
        matches!(j, Join::Wait(_))
    }

    #[test]
    fn join_table() {
        use Phase::*;
        let not_member = MemberList::Members(three());
        let learner = with(member(4, "", 4, true));
        let running = |mut m: Member| {
            m.client_urls = vec!["https://10.0.0.4:2379".into()];
            m
        };
        let started_learner = with(running(member(4, "n4", 4, true)));
        let voter = with(running(member(4, "n4", 4, false)));
        let unstarted_voter = with(member(4, "", 4, false));
        // A member of the initial cluster is named from the configuration before it starts.
        let named_unstarted_voter = with(member(4, "n4", 4, false));
        // (what, observed, data dir has member, record, may bootstrap) → decision
        type Case = (&'static str, MemberList, bool, Option<Phase>, bool, Join);
        let cases: Vec<Case> = vec![
            (
                "removed earlier, data dir gone, cluster up",
                not_member.clone(),
                false,
                Some(Removed),
                false,
                Join::AddLearner,
            ),
            (
                "new node, cluster up",
                not_member.clone(),
                false,
                None,
                false,
                Join::AddLearner,
            ),
            (
                "new node named in initial cluster but removed since",
                not_member.clone(),
                false,
                None,
                true,
                Join::AddLearner,
            ),
            (
                "crash after add, before record",
                learner.clone(),
                false,
                None,
                false,
                Join::Resume { id: 4 },
            ),
            (
                "crash after add, before record, bootstrap node",
                learner.clone(),
                false,
                None,
                true,
                Join::Resume { id: 4 },
            ),
            (
                "recorded learner, etcd not started",
                learner.clone(),
                false,
                Some(Learner),
                false,
                Join::Keep,
            ),
            (
                "recorded learner, etcd running",
                started_learner.clone(),
                true,
                Some(Learner),
                false,
                Join::Promote { id: 4 },
            ),
            (
                "recorded learner, promoted before a crash",
                voter.clone(),
                true,
                Some(Learner),
                false,
                Join::RecordVoter { id: 4 },
            ),
            (
                "recorded voter: upgrade, reboot",
                voter.clone(),
                true,
                Some(Voter),
                false,
                Join::Keep,
            ),
            (
                "recorded voter, etcd down",
                down(),
                true,
                Some(Voter),
                false,
                Join::Keep,
            ),
            // kubernetes/kubernetes#100677, k3s-io/k3s#13498: a member whose data is gone
            // cannot restart; it is removed and joins again.
            (
                "recorded voter, data dir lost",
                voter.clone(),
                false,
                Some(Voter),
                false,
                Join::Rejoin { stale: 4 },
            ),
            (
                "re-imaged node: no record, no data, its member listed",
                voter.clone(),
                false,
                None,
                false,
                Join::Rejoin { stale: 4 },
            ),
            (
                "re-imaged node of the initial cluster: not a second bootstrap",
                voter.clone(),
                false,
                None,
                true,
                Join::Rejoin { stale: 4 },
            ),
            (
                "initial-cluster node never started, named by the others' configuration",
                named_unstarted_voter.clone(),
                false,
                None,
                true,
                Join::Bootstrap,
            ),
            (
                "re-imaged node whose learner had started",
                started_learner.clone(),
                false,
                None,
                false,
                Join::Rejoin { stale: 4 },
            ),
            (
                "recorded voter, data dir lost, etcd down: the manifest from the record",
                down(),
                false,
                Some(Voter),
                false,
                Join::Wait("etcd unreachable (connection refused); the join resumes when it answers".into()),
            ),
            (
                "existing member, no record (enabled later)",
                voter.clone(),
                true,
                None,
                false,
                Join::Adopt { id: 4, learner: false },
            ),
            (
                "existing learner, no record, data",
                started_learner.clone(),
                true,
                None,
                false,
                Join::Adopt { id: 4, learner: true },
            ),
            (
                "initial-cluster node coming up late",
                unstarted_voter.clone(),
                false,
                None,
                true,
                Join::Bootstrap,
            ),
            (
                "bootstrap node, cluster down (first start)",
                down(),
                false,
                None,
                true,
                Join::Bootstrap,
            ),
            (
                "bootstrap node, data, no record, cluster down",
                down(),
                true,
                None,
                true,
                Join::Bootstrap,
            ),
        ];
        for (what, observed, data, rec, boot, want) in cases {
            assert_eq!(join(observed, data, rec, boot), want, "{what}");
        }
        let waits: Vec<(&str, MemberList, bool, Option<Phase>, bool)> = vec![
            ("cluster down, may not bootstrap", down(), false, None, false),
            ("cluster down, data, may not bootstrap", down(), true, None, false),
            ("recorded learner, cluster down", down(), true, Some(Learner), false),
            (
                "removed earlier, data dir still there",
                not_member.clone(),
                true,
                Some(Removed),
                false,
            ),
            ("removed earlier, cluster down", down(), false, Some(Removed), false),
            (
                "recorded learner, removed from outside",
                not_member.clone(),
                true,
                Some(Learner),
                false,
            ),
            ("data but not a member", not_member.clone(), true, None, false),
            (
                "data but not a member, bootstrap node",
                not_member.clone(),
                true,
                None,
                true,
            ),
            (
                "unstarted voter, may not bootstrap",
                unstarted_voter.clone(),
                false,
                None,
                false,
            ),
            (
                "same name, other peer URL",
                with(member(9, "n4", 9, false)),
                false,
                None,
                false,
            ),
            (
                "same peer URL, other name",
                with(member(9, "other", 4, false)),
                false,
                None,
                true,
            ),
        ];
        for (what, observed, data, rec, boot) in waits {
            let j = join(observed, data, rec, boot);
            assert!(is_wait(&j), "{what}: {j:?}");
        }
    }

    #[test]
    fn never_adds_when_any_member_has_this_peer_url() {
        // Exhaustive over the discrete inputs: a second entry for this node is never added.
        for learner in [false, true] {
            for name in ["", "n4"] {
                for data in [false, true] {
                    for rec in [None, Some(Phase::Learner), Some(Phase::Voter), Some(Phase::Removed)] {
                        for boot in [false, true] {
                            let j = join(with(member(4, name, 4, learner)), data, rec, boot);
                            assert_ne!(j, Join::AddLearner, "{learner} {name} {data} {rec:?} {boot}");
                        }
                    }
                }
            }
        }
        // Nor when etcd cannot be asked.
        for data in [false, true] {
            for rec in [None, Some(Phase::Learner), Some(Phase::Voter), Some(Phase::Removed)] {
                for boot in [false, true] {
                    assert_ne!(join(down(), data, rec, boot), Join::AddLearner);
                    // A cluster that refuses this node's client is never founded anew.
                    let refused = MemberList::Refused("tls: unknown certificate authority".into());
                    let j = join(refused, data, rec, boot);
                    assert!(matches!(j, Join::Wait(_) | Join::Keep), "{data} {rec:?} {boot}: {j:?}");
                }
            }
        }
    }

    #[test]
    fn a_record_of_another_member_waits() {
        let me = Me {
            name: "n4".into(),
            peer_url: "https://10.0.0.44:2380".into(),
        };
        let r = record(Phase::Voter);
        let j = decide_join(&JoinFacts {
            me: &me,
            observed: &MemberList::Members(three()),
            data_dir_has_member: true,
            record: Some(&r),
            may_bootstrap: false,
            founding: Founding::WhenNoneAnswers,
            rejoin_consented: false,
        });
        assert!(is_wait(&j), "{j:?}");
    }

    fn leave(members: Vec<Member>, healthy: &[u64]) -> Leave {
        let me = me();
        let healthy: BTreeSet<u64> = healthy.iter().copied().collect();
        decide_leave(&LeaveFacts {
            me: &me,
            observed: &MemberList::Members(members),
            healthy: &healthy,
        })
    }

    fn refused(l: &Leave) -> bool {
        matches!(l, Leave::Refuse(_))
    }

    #[test]
    fn leave_table() {
        let four = |learner| {
            let mut m = three();
            m.push(member(4, "n4", 4, learner));
            m
        };
        // 4 voters → 3 remain, 2 needed.
        assert_eq!(leave(four(false), &[1, 2, 3, 4]), Leave::Remove { id: 4 });
        assert_eq!(leave(four(false), &[1, 2]), Leave::Remove { id: 4 });
        assert!(refused(&leave(four(false), &[1, 4])));
        assert!(refused(&leave(four(false), &[4])));
        // Our own health does not count for the others.
        assert!(refused(&leave(four(false), &[1, 4])));
        // A learner can always go.
        assert_eq!(leave(four(true), &[]), Leave::Remove { id: 4 });
        // 3 voters with us → 2 remain, both must be healthy.
        let three_with_me = vec![
            member(1, "n1", 1, false),
            member(2, "n2", 2, false),
            member(4, "n4", 4, false),
        ];
        assert_eq!(leave(three_with_me.clone(), &[1, 2]), Leave::Remove { id: 4 });
        assert!(refused(&leave(three_with_me.clone(), &[1, 4])));
        // 2 voters → 1 remains and must be healthy: one of two healthy members left.
        let two = vec![member(1, "n1", 1, false), member(4, "n4", 4, false)];
        assert_eq!(leave(two.clone(), &[1]), Leave::Remove { id: 4 });
        assert!(refused(&leave(two, &[4])));
        // Never the last member.
        assert!(refused(&leave(vec![member(4, "n4", 4, false)], &[4])));
        // Learners do not count as voters that remain.
        let mut with_learner = vec![member(1, "n1", 1, true), member(4, "n4", 4, false)];
        assert!(refused(&leave(with_learner.clone(), &[1])));
        with_learner.push(member(2, "n2", 2, false));
        assert!(refused(&leave(with_learner.clone(), &[1])));
        assert_eq!(leave(with_learner, &[2]), Leave::Remove { id: 4 });
        // Not a member: nothing to remove.
        assert_eq!(leave(three(), &[1, 2, 3]), Leave::NotAMember);
        // A name conflict is never resolved by removing something.
        assert!(refused(&leave(
            vec![
                member(1, "n1", 1, false),
                member(2, "n2", 2, false),
                member(9, "n4", 9, false)
            ],
            &[1, 2, 9]
        )));
        // Unreachable: refuse.
        let me = me();
        let l = decide_leave(&LeaveFacts {
            me: &me,
            observed: &down(),
            healthy: &BTreeSet::new(),
        });
        assert!(refused(&l));
    }

    #[test]
    fn refusals_say_whether_asking_again_may_pass() {
        let last = leave(vec![member(4, "n4", 4, false)], &[4]);
        assert_eq!(last, Leave::Refuse(Refusal::LastVoter));
        let two = vec![member(1, "n1", 1, false), member(4, "n4", 4, false)];
        let quorum = leave(two, &[4]);
        assert_eq!(
            quorum,
            Leave::Refuse(Refusal::Quorum {
                remaining: 1,
                healthy: 0,
                needed: 1
            })
        );
        let conflict = leave(vec![member(1, "n1", 1, false), member(9, "n4", 9, false)], &[1, 9]);
        let me = me();
        let unreachable = decide_leave(&LeaveFacts {
            me: &me,
            observed: &down(),
            healthy: &BTreeSet::new(),
        });
        for (l, again) in [(last, false), (quorum, true), (conflict, false), (unreachable, true)] {
            let Leave::Refuse(r) = &l else { panic!("{l:?}") };
            assert_eq!(r.may_pass_later(), again, "{r}");
        }
    }

    #[test]
    fn a_leave_is_given_up_only_by_an_anchor_of_another_pod() {
        let intent = |pod: Option<&str>| LeaveIntent {
            since: "t".into(),
            pod: pod.map(str::to_owned),
            attempts: 1,
            last_refusal: None,
        };
        for (asked, this, cancelled) in [
            (Some("etcd-anchor-a"), Some("etcd-anchor-b"), true),
            (Some("etcd-anchor-a"), Some("etcd-anchor-a"), false),
            (Some("etcd-anchor-a"), None, false),
            (None, Some("etcd-anchor-b"), false),
            (None, None, false),
        ] {
            assert_eq!(intent(asked).cancelled_by(this), cancelled, "{asked:?} {this:?}");
        }
    }

    #[test]
    fn a_learner_is_overdue_only_past_the_bound_and_says_how_far_behind() {
        use std::time::Duration;
        let bound = Duration::from_secs(600);
        let p = LearnerProgress {
            leader_index: 10_000,
            matched: Some(4_000),
        };
        assert_eq!(p.behind(), Some(6_000));
        assert_eq!(learner_overdue(0x1a, Ok(&p), Duration::from_secs(599), bound), None);
        let note = learner_overdue(0x1a, Ok(&p), Duration::from_secs(601), bound).unwrap();
        assert!(
            note.starts_with("learner 1a has not caught up within 10m (waiting 10m 1s): 6000 entries behind the leader (it matches up to index 4000 of 10000; etcd promotes it from index 9000)"),
            "{note}"
        );
        let none = LearnerProgress {
            leader_index: 7,
            matched: None,
        };
        assert_eq!(none.behind(), None);
        let note = learner_overdue(0x1a, Ok(&none), bound, bound).unwrap();
        assert!(
            note.ends_with("the leader (at index 7) has no progress recorded for it"),
            "{note}"
        );
        let note = learner_overdue(0x1a, Err("no leader"), bound, bound).unwrap();
        assert!(note.ends_with("how far behind it is is unknown (no leader)"), "{note}");
        // etcd's 90 %, rounded up: a learner short of it is refused.
        for (commit, from) in [
            (0, 0),
            (1, 1),
            (10, 9),
            (11, 10),
            (19, 18),
            (1000, 900),
            (u64::MAX, u64::MAX - u64::MAX / 10),
        ] {
            assert_eq!(promotable_from(commit), from, "{commit}");
        }
    }

    #[test]
    fn leave_quorum_rule_exhaustive() {
        // n voters including us (1..=7), every subset of the others healthy.
        for n in 1..=7u64 {
            let members: Vec<Member> = (1..n)
                .map(|i| member(i, &format!("m{i}"), 10 + i as u8, false))
                .chain([member(100, "n4", 4, false)])
                .collect();
            for mask in 0..(1u64 << (n - 1)) {
                let healthy: Vec<u64> = (1..n).filter(|i| mask & (1 << (i - 1)) != 0).collect();
                let l = leave(members.clone(), &healthy);
                let remaining = n - 1;
                let ok = n > 1 && healthy.len() as u64 > remaining / 2;
                assert_eq!(
                    matches!(l, Leave::Remove { id: 100 }),
                    ok,
                    "n={n} healthy={healthy:?} {l:?}"
                );
            }
        }
    }

    #[test]
    fn initial_cluster_lists_started_members_and_this_node() {
        let me = me();
        let mut members = three();
        members.push(member(4, "", 4, true));
        members.push(member(5, "", 5, true)); // someone else's unstarted learner
        assert_eq!(
            initial_cluster(&me, &members),
            "n1=https://10.0.0.1:2380,n2=https://10.0.0.2:2380,n3=https://10.0.0.3:2380,n4=https://10.0.0.4:2380"
        );
        assert_eq!(
            initial_cluster(&me, &three()),
            "n1=https://10.0.0.1:2380,n2=https://10.0.0.2:2380,n3=https://10.0.0.3:2380,n4=https://10.0.0.4:2380"
        );
    }

    #[test]
    fn prunes_oldest_snapshots() {
        let names: Vec<String> = ["3.db", "1.db", "2.db"].iter().map(|s| s.to_string()).collect();
        assert_eq!(snapshots_to_prune(&names, 2), vec!["1.db".to_string()]);
        assert!(snapshots_to_prune(&names, 3).is_empty());
        assert_eq!(snapshots_to_prune(&names, 0).len(), 3);
    }

    #[test]
    fn leadership_goes_to_the_most_caught_up_healthy_voter() {
        let members = vec![
            member(1, "n1", 1, false),
            member(2, "n2", 2, false),
            member(3, "n3", 3, false),
            member(4, "n4", 4, true),
        ];
        let peer = |applied: u64, healthy: bool| PeerStatus {
            raft_applied_index: applied,
            healthy,
        };
        let peers = |list: &[(u64, PeerStatus)]| list.iter().copied().collect::<BTreeMap<_, _>>();
        let to = |id: u64, name: &str| HandOff::MoveTo { id, name: name.into() };
        let all = peers(&[(2, peer(990, true)), (3, peer(1000, true)), (4, peer(1000, true))]);
        // (leader, leader index, peers) → decision, with 1 as this member.
        let cases: Vec<(u64, u64, BTreeMap<u64, PeerStatus>, HandOff)> = vec![
            (2, 1000, all.clone(), HandOff::NotLeader),
            (1, 1000, all.clone(), to(3, "n3")),
            // A learner never leads; an unhealthy voter is no candidate.
            (
                1,
                1000,
                peers(&[(2, peer(990, true)), (3, peer(1000, false)), (4, peer(1000, true))]),
                to(2, "n2"),
            ),
            // Equal indexes: the lowest ID, so every retry picks the same.
            (
                1,
                1000,
                peers(&[(2, peer(1000, true)), (3, peer(1000, true))]),
                to(2, "n2"),
            ),
            // Too far behind to take over within etcd's election timeout.
            (
                1,
                5000,
                peers(&[(2, peer(4000, true)), (3, peer(1000, true))]),
                to(2, "n2"),
            ),
            (
                1,
                5000,
                peers(&[(2, peer(3000, true)), (3, peer(1000, true))]),
                HandOff::NoCandidate(
                    "none of the 2 other voters is healthy and within 1000 entries of the leader".into(),
                ),
            ),
            // No answer from any other voter.
            (
                1,
                1000,
                peers(&[]),
                HandOff::NoCandidate(
                    "none of the 2 other voters is healthy and within 1000 entries of the leader".into(),
                ),
            ),
        ];
        for (leader, index, peers, want) in cases {
            assert_eq!(
                hand_off(1, leader, index, &members, &peers),
                want,
                "leader {leader} index {index} {peers:?}"
            );
        }
        // A single member has nobody to hand off to.
        assert_eq!(
            hand_off(1, 1, 10, &members[..1], &BTreeMap::new()),
            HandOff::NoCandidate("no other voting member".into())
        );
    }

    #[test]
    fn a_member_restarts_only_where_etcd_can_lose_it() {
        // This node is n1 (10.0.0.1).
        let me = Me {
            name: "n1".into(),
            peer_url: "https://10.0.0.1:2380".into(),
        };
        let list = |members: Vec<Member>| MemberList::Members(members);
        let peer = |applied: u64, healthy: bool| PeerStatus {
            raft_applied_index: applied,
            healthy,
        };
        let peers = |list: &[(u64, PeerStatus)]| list.iter().copied().collect::<BTreeMap<_, _>>();
        let healthy = peers(&[(2, peer(1000, true)), (3, peer(990, true))]);
        fn short(m: &Margin, what: &str) -> bool {
            matches!(m, Margin::Short(why) if why.contains(what))
        }
        fn cannot(m: &Margin, what: &str) -> bool {
            matches!(m, Margin::CannotExist(why) if why.contains(what))
        }
        type Case = (&'static str, MemberList, BTreeMap<u64, PeerStatus>, fn(&Margin) -> bool);
        let cases: Vec<Case> = vec![
            (
                "three voters, the other two healthy and caught up",
                list(three()),
                healthy.clone(),
                |m| *m == Margin::Affords,
            ),
            (
                "cp-3 powered off: it does not answer",
                list(three()),
                peers(&[(2, peer(1000, true))]),
                |m| short(m, "n3 (3) does not answer") && short(m, "a quorum of 2"),
            ),
            (
                "a voter without a leader (cut off from the others)",
                list(three()),
                peers(&[(2, peer(1000, true)), (3, peer(1000, false))]),
                |m| short(m, "n3 (3) has no leader"),
            ),
            (
                "a voter far behind (a slow disk)",
                list(three()),
                peers(&[(2, peer(5000, true)), (3, peer(1000, true))]),
                |m| short(m, "n3 (3) is 4000 entries behind"),
            ),
            (
                "a voter added but not started",
                list(vec![
                    member(1, "n1", 1, false),
                    member(2, "n2", 2, false),
                    member(3, "", 3, false),
                ]),
                peers(&[(2, peer(1000, true))]),
                |m| short(m, "3 (not started) does not answer"),
            ),
            (
                "a learner catching up neither counts nor blocks",
                list(vec![
                    member(1, "n1", 1, false),
                    member(2, "n2", 2, false),
                    member(3, "n3", 3, false),
                    member(4, "n4", 4, true),
                ]),
                healthy.clone(),
                |m| *m == Margin::Affords,
            ),
            (
                "two voters and a learner: wait for the learner to vote",
                list(vec![
                    member(1, "n1", 1, false),
                    member(2, "n2", 2, false),
                    member(3, "n3", 3, true),
                ]),
                healthy.clone(),
                |m| short(m, "n3 is a learner not promoted yet"),
            ),
            (
                "two voters, no learner: no margin can exist",
                list(vec![member(1, "n1", 1, false), member(2, "n2", 2, false)]),
                healthy.clone(),
                |m| cannot(m, "2 voting members"),
            ),
            (
                "five voters, one down: every other voter must be able to stand in",
                list(vec![
                    member(1, "n1", 1, false),
                    member(2, "n2", 2, false),
                    member(3, "n3", 3, false),
                    member(5, "n5", 5, false),
                    member(6, "n6", 6, false),
                ]),
                peers(&[(2, peer(1000, true)), (3, peer(1000, true)), (5, peer(1000, true))]),
                |m| short(m, "n6 (6) does not answer") && short(m, "a quorum of 3"),
            ),
            (
                "a single member",
                list(vec![member(1, "n1", 1, false)]),
                peers(&[]),
                |m| cannot(m, "1 voting member:"),
            ),
            (
                "this node's member is a learner",
                list(vec![member(1, "n1", 1, true), member(2, "n2", 2, false)]),
                peers(&[]),
                |m| cannot(m, "learner"),
            ),
            (
                "this node has no member yet",
                list(vec![member(2, "n2", 2, false), member(3, "n3", 3, false)]),
                healthy.clone(),
                |m| cannot(m, "no member"),
            ),
            (
                "no member list: unknown is no margin",
                MemberList::Unreachable("context deadline exceeded".into()),
                peers(&[]),
                |m| short(m, "cannot be read (context deadline exceeded)"),
            ),
        ];
        for (what, observed, peers, ok) in cases {
            let margin = restart_margin(&me, &observed, &peers);
            assert!(ok(&margin), "{what}: {margin:?}");
        }
    }
}
