//! One etcd join step as a pure machine: `step(join, observation, at) -> (join, action)`, one
//! action at a time. The executor (`etcd_member::join_step`, or the fleet simulator) performs each
//! action and feeds back what it observed and when (RFC 3339: the time an outcome is recorded
//! with, so a learner's catch-up bound counts from its add); a failed call (an add, a removal, the record's write)
//! ends the step with its error, and nothing after it happens: the next step looks again.
//!
//! The order, and why:
//! 1. A recorded voter whose data is here asks nothing: upgrades, restarts and reboots stay
//!    local. Anyone else lists the members (an unanswered list is no evidence of anything).
//! 2. [`membership::decide_join`] decides; each decision that changes the cluster makes its
//!    call first and records after (a lost answer to an add is found by peer URL at the next
//!    step, so the record never names a member that was not made).
//! 3. A rejoin (this node's member has run but its data is gone) probes every member's health
//!    first: a stale member that answers has its data somewhere (a disk not mounted yet) and
//!    stays; otherwise it is removed only under [`membership::decide_leave`]'s quorum rule, and
//!    the next step adds this node as a learner.
//! 4. A learner's progress, as the leader sees it, is asked last for readiness and `status`.

use std::collections::BTreeSet;

use crate::membership::{
    self, Attempt, Founding, Join, JoinFacts, LearnerProgress, Leave, LeaveFacts, Me, Member, MemberList, Phase, Record,
};

/// What the step starts from, read from the node.
#[derive(Debug, Clone)]
pub struct JoinStart {
    pub me: Me,
    /// The membership record; one that says `removed` counts as none.
    pub record: Option<Record>,
    /// The data dir holds `member/`.
    pub data_dir_has_member: bool,
    /// The chart's `initialCluster` of a new cluster, if any.
    pub initial_cluster: Option<String>,
    /// Whether this process may found that cluster when no endpoint answers.
    pub founding: Founding,
    /// `apply --rejoin`: this node's data is truly gone (see [`JoinFacts::rejoin_consented`]).
    pub rejoin_consented: bool,
    /// The time, RFC 3339, the step starts: for the outcomes recorded before any call.
    pub at: String,
}

impl JoinStart {
    /// Whether this node is named in the configured initial cluster under its name and peer URL.
    pub fn may_bootstrap(&self) -> bool {
        let pair = format!("{}={}", self.me.name, self.me.peer_url);
        self.initial_cluster
            .as_deref()
            .is_some_and(|ic| ic.split(',').any(|p| p == pair))
    }
}

/// What the executor does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// The member list from the configured endpoints → [`Observation::Members`].
    ListMembers,
    /// Which of `members` answer a status with a leader at their own client URL →
    /// [`Observation::Healthy`].
    ProbeHealth { members: Vec<Member> },
    /// `member add --learner` with this node's peer URL → [`Observation::Added`].
    AddLearner { peer_url: String },
    /// `member promote` → [`Observation::Promoted`] (etcd refuses a learner not caught up).
    Promote { id: u64 },
    /// `member remove` of this node's stale member → [`Observation::Removed`].
    RemoveStale { id: u64 },
    /// Write the record (under the lock the executor holds) → [`Observation::Stored`].
    Store(Record),
    /// The leader's view of learner `id` → [`Observation::Progress`].
    AskProgress { id: u64, members: Vec<Member> },
    /// The step is over.
    Done(JoinEnd),
}

/// What the executor observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observation {
    Members(MemberList),
    Healthy(BTreeSet<u64>),
    Added { id: u64, members: Vec<Member> },
    Promoted(Result<(), String>),
    Removed,
    Stored,
    Progress(Result<LearnerProgress, String>),
}

/// How the step ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinEnd {
    pub decision: Join,
    /// What the manifest renders with; `None`: write nothing yet.
    pub record: Option<Record>,
    /// The decision and what came of it, for logs and readiness.
    pub summary: String,
    /// The join is not finished (a learner to promote, or waiting): look again soon.
    pub pending: bool,
    /// This node's member is a learner not promoted yet: its ID and the leader's view of it.
    pub learner: Option<(u64, Result<LearnerProgress, String>)>,
}

impl JoinEnd {
    /// Worth a warning in the log: the cluster's view of this node was not what the record said.
    pub fn is_notable(&self) -> bool {
        matches!(self.decision, Join::Resume { .. } | Join::Rejoin { .. })
    }
}

#[derive(Debug, Clone)]
enum Stage {
    Listing,
    Adding,
    Promoting { id: u64 },
    Probing { stale: u64 },
    Removing { stale: u64 },
    Storing(Box<JoinEnd>),
    Asking { end: Box<JoinEnd>, id: u64 },
    Over,
}

/// One join step in progress.
#[derive(Debug, Clone)]
pub struct JoinStep {
    start: JoinStart,
    stage: Stage,
    observed: MemberList,
    decision: Join,
}

impl JoinStep {
    pub fn new(mut start: JoinStart) -> (JoinStep, Action) {
        start.record = start.record.filter(|r| r.phase != Phase::Removed);
        let local = membership::stays_local(start.record.as_ref(), start.data_dir_has_member);
        let join = JoinStep {
            start,
            stage: Stage::Listing,
            observed: MemberList::Unreachable("not asked: recorded as a voter".into()),
            decision: Join::Keep,
        };
        if local {
            join.decide()
        } else {
            (join, Action::ListMembers)
        }
    }

    pub fn step(mut self, observation: Observation, at: String) -> (JoinStep, Action) {
        self.start.at = at;
        let stage = std::mem::replace(&mut self.stage, Stage::Over);
        match (stage, observation) {
            (Stage::Listing, Observation::Members(list)) => {
                self.observed = list;
                self.decide()
            }
            (Stage::Adding, Observation::Added { id, members }) => {
                let r = self.joined(
                    id,
                    Phase::Learner,
                    &members,
                    "add learner",
                    format!("added as learner {id:x}"),
                );
                self.store(r, format!("added as learner {id:x}"), true)
            }
            (Stage::Promoting { id }, Observation::Promoted(Ok(()))) => {
                let mut r = self.start.record.clone().expect("decided with a record");
                r.phase = Phase::Voter;
                r.member_id = Some(id.to_string());
                r.last_join = self.outcome("promote", format!("promoted {id:x} to voter"));
                self.store(r, format!("promoted {id:x}"), false)
            }
            // etcd refuses a learner that has not caught up with the leader: try again.
            (Stage::Promoting { id }, Observation::Promoted(Err(e))) => {
                let record = self.start.record.clone();
                self.finish(record, format!("learner {id:x} not promoted yet: {e}"), true)
            }
            (Stage::Probing { stale }, Observation::Healthy(healthy)) => self.probed(stale, &healthy),
            (Stage::Removing { stale }, Observation::Removed) => {
                let prior = self.start.record.clone();
                let r = Record {
                    name: self.start.me.name.clone(),
                    peer_url: self.start.me.peer_url.clone(),
                    member_id: Some(stale.to_string()),
                    phase: Phase::Removed,
                    initial_cluster: prior.as_ref().map(|r| r.initial_cluster.clone()).unwrap_or_default(),
                    initial_cluster_state: "existing".into(),
                    last_join: prior.and_then(|r| r.last_join),
                    last_leave: self.outcome(
                        "remove stale member",
                        format!("removed {stale:x}: this node has no data for it; joining again as a learner"),
                    ),
                    leave_pending: None,
                };
                let end = JoinEnd {
                    decision: self.decision.clone(),
                    // No manifest from this record: the next step adds the learner.
                    record: None,
                    summary: format!("removed stale member {stale:x}; joining again as a learner"),
                    pending: true,
                    learner: None,
                };
                self.stage = Stage::Storing(Box::new(end));
                (self, Action::Store(r))
            }
            (Stage::Storing(end), Observation::Stored) => self.ask_progress(*end),
            (Stage::Asking { mut end, id }, Observation::Progress(progress)) => {
                end.learner = Some((id, progress));
                (self, Action::Done(*end))
            }
            (stage, observation) => panic!("join step: {observation:?} does not answer {stage:?}"),
        }
    }

    fn decide(mut self) -> (JoinStep, Action) {
        let start = &self.start;
        self.decision = membership::decide_join(&JoinFacts {
            me: &start.me,
            observed: &self.observed,
            data_dir_has_member: start.data_dir_has_member,
            record: start.record.as_ref(),
            may_bootstrap: start.may_bootstrap(),
            founding: start.founding,
            rejoin_consented: start.rejoin_consented,
        });
        match self.decision.clone() {
            Join::Keep => {
                // The step ends here: the record moves to its end (upgrades and reboots of a voter
                // come this way at every sync, so no copy).
                let record = self.start.record.take();
                let pending = record.as_ref().is_some_and(|r| r.phase == Phase::Learner);
                let summary = if pending {
                    "learner: waiting for etcd to start from the manifest"
                } else {
                    "member: nothing to change"
                };
                self.finish(record, summary.into(), pending)
            }
            Join::Wait(reason) => {
                let record = self.start.record.take();
                let pending = record.as_ref().is_none_or(|r| r.phase == Phase::Learner);
                self.finish(record, format!("waiting: {reason}"), pending)
            }
            Join::AwaitRejoinConsent { stale } => {
                let record = self.start.record.take();
                let why = format!(
                    "waiting: the record holds member {stale:x} as a voter here, but the data dir holds no member (a disk not mounted yet, or data lost?); nothing is removed. Once the data is known to be gone, `kube-anchor apply --rejoin` on this node removes the stale member and joins again"
                );
                self.finish(record, why, true)
            }
            Join::Bootstrap => {
                let r = Record {
                    name: self.start.me.name.clone(),
                    peer_url: self.start.me.peer_url.clone(),
                    member_id: None,
                    phase: Phase::Voter,
                    initial_cluster: self.start.initial_cluster.clone().expect("may_bootstrap checked it"),
                    initial_cluster_state: "new".into(),
                    last_join: self.outcome("bootstrap", "member of the initial cluster".into()),
                    last_leave: None,
                    leave_pending: None,
                };
                self.store(r, "bootstrap: member of the initial cluster".into(), false)
            }
            Join::AddLearner => {
                self.stage = Stage::Adding;
                let peer_url = self.start.me.peer_url.clone();
                (self, Action::AddLearner { peer_url })
            }
            Join::Resume { id } => {
                let members = self.members().to_vec();
                let r = self.joined(
                    id,
                    Phase::Learner,
                    &members,
                    "resume",
                    format!("found learner {id:x} of an interrupted join"),
                );
                self.store(r, format!("resumed the join of learner {id:x}"), true)
            }
            Join::Adopt { id, learner } => {
                let members = self.members().to_vec();
                let phase = if learner { Phase::Learner } else { Phase::Voter };
                let r = self.joined(id, phase, &members, "adopt", format!("existing member {id:x}"));
                self.store(r, format!("recorded existing member {id:x}"), learner)
            }
            Join::Rejoin { stale } => {
                self.stage = Stage::Probing { stale };
                let members = self.members().to_vec();
                (self, Action::ProbeHealth { members })
            }
            Join::RecordVoter { id } => {
                let mut r = self.start.record.clone().expect("decided with a record");
                r.phase = Phase::Voter;
                r.member_id = Some(id.to_string());
                r.last_join = self.outcome("promote", format!("{id:x} is a voter"));
                self.store(r, format!("member {id:x} is a voter"), false)
            }
            Join::Promote { id } => {
                self.stage = Stage::Promoting { id };
                (self, Action::Promote { id })
            }
        }
    }

    /// `Join::Rejoin`, once the members' health is known.
    fn probed(mut self, stale: u64, healthy: &BTreeSet<u64>) -> (JoinStep, Action) {
        let record = self.start.record.clone();
        if healthy.contains(&stale) {
            let why = format!(
                "member {stale:x} has this node's peer URL and answers, but this node holds no data for it; not removed (is the data dir's disk mounted?)"
            );
            return self.finish(record, format!("waiting: {why}"), true);
        }
        match membership::decide_leave(&LeaveFacts {
            me: &self.start.me,
            observed: &self.observed,
            healthy,
        }) {
            Leave::Remove { id } if id == stale => {
                self.stage = Stage::Removing { stale };
                (self, Action::RemoveStale { id })
            }
            Leave::Refuse(why) => self.finish(
                record,
                format!(
                    "waiting: this node's member {stale:x} has no data here and must be removed before it joins again, but {why}"
                ),
                true,
            ),
            other => self.finish(
                record,
                format!("waiting: the member list changed while rejoining ({other:?})"),
                true,
            ),
        }
    }

    fn members(&self) -> &[Member] {
        self.observed.members().unwrap_or_default()
    }

    fn outcome(&self, action: &str, result: String) -> Option<Attempt> {
        Some(Attempt {
            at: self.start.at.clone(),
            action: action.into(),
            result,
        })
    }

    /// The record of a member that joins an existing cluster.
    fn joined(&self, id: u64, phase: Phase, members: &[Member], action: &str, result: String) -> Record {
        Record {
            name: self.start.me.name.clone(),
            peer_url: self.start.me.peer_url.clone(),
            member_id: Some(id.to_string()),
            phase,
            initial_cluster: membership::initial_cluster(&self.start.me, members),
            initial_cluster_state: "existing".into(),
            last_join: self.outcome(action, result),
            last_leave: None,
            leave_pending: None,
        }
    }

    fn store(mut self, record: Record, summary: String, pending: bool) -> (JoinStep, Action) {
        let end = JoinEnd {
            decision: self.decision.clone(),
            record: Some(record.clone()),
            summary,
            pending,
            learner: None,
        };
        self.stage = Stage::Storing(Box::new(end));
        (self, Action::Store(record))
    }

    fn finish(self, record: Option<Record>, summary: String, pending: bool) -> (JoinStep, Action) {
        let end = JoinEnd {
            decision: self.decision.clone(),
            record,
            summary,
            pending,
            learner: None,
        };
        self.ask_progress(end)
    }

    /// A learner's progress is asked of the leader, unless etcd did not answer the list.
    fn ask_progress(mut self, mut end: JoinEnd) -> (JoinStep, Action) {
        let learner = end
            .record
            .as_ref()
            .filter(|r| r.phase == Phase::Learner)
            .and_then(|r| r.member_id.as_deref()?.parse::<u64>().ok());
        let Some(id) = learner else {
            return (self, Action::Done(end));
        };
        match &self.observed {
            MemberList::Unreachable(why) => {
                end.learner = Some((id, Err(format!("etcd unreachable: {why}"))));
                (self, Action::Done(end))
            }
            MemberList::Refused(why) => {
                end.learner = Some((id, Err(format!("etcd refused this node's client: {why}"))));
                (self, Action::Done(end))
            }
            MemberList::Members(members) => {
                let members = members.clone();
                self.stage = Stage::Asking { end: Box::new(end), id };
                (self, Action::AskProgress { id, members })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> Me {
        Me {
            name: "cp-2".into(),
            peer_url: "https://10.0.0.2:2380".into(),
        }
    }

    fn member(id: u64, n: u8, learner: bool, started: bool) -> Member {
        Member {
            id,
            name: if started { format!("cp-{n}") } else { String::new() },
            peer_urls: vec![format!("https://10.0.0.{n}:2380")],
            client_urls: if started {
                vec![format!("https://10.0.0.{n}:2379")]
            } else {
                vec![]
            },
            is_learner: learner,
        }
    }

    fn record(phase: Phase, id: Option<u64>) -> Record {
        Record {
            name: "cp-2".into(),
            peer_url: "https://10.0.0.2:2380".into(),
            member_id: id.map(|i| i.to_string()),
            phase,
            initial_cluster: "cp-1=https://10.0.0.1:2380,cp-2=https://10.0.0.2:2380".into(),
            initial_cluster_state: "existing".into(),
            last_join: None,
            last_leave: None,
            leave_pending: None,
        }
    }

    fn start(record: Option<Record>, data: bool, initial: Option<&str>) -> JoinStart {
        JoinStart {
            me: me(),
            record,
            data_dir_has_member: data,
            initial_cluster: initial.map(str::to_owned),
            founding: Founding::WhenNoneAnswers,
            rejoin_consented: true,
            at: "2026-11-29T00:00:00Z".into(),
        }
    }

    /// The short name of an action, for the tables.
    fn name(a: &Action) -> &'static str {
        match a {
            Action::ListMembers => "list",
            Action::ProbeHealth { .. } => "probe",
            Action::AddLearner { .. } => "add",
            Action::Promote { .. } => "promote",
            Action::RemoveStale { .. } => "remove",
            Action::Store(_) => "store",
            Action::AskProgress { .. } => "progress",
            Action::Done(_) => "done",
        }
    }

    /// Runs a step against a scripted cluster: each action gets the answer the world gives it.
    fn run(
        start: JoinStart,
        mut world: impl FnMut(&Action) -> Observation,
    ) -> (Vec<&'static str>, JoinEnd, Vec<Record>) {
        let (mut join, mut action) = JoinStep::new(start);
        let mut names = Vec::new();
        let mut stored = Vec::new();
        loop {
            names.push(name(&action));
            if let Action::Store(r) = &action {
                stored.push(r.clone());
            }
            if let Action::Done(end) = action {
                return (names, end, stored);
            }
            let observation = world(&action);
            (join, action) = join.step(observation, "2026-11-29T00:00:01Z".into());
        }
    }

    /// A cluster of `members`, with `healthy` answering health probes; adds get ID 9.
    fn cluster(members: Vec<Member>, healthy: &[u64]) -> impl FnMut(&Action) -> Observation {
        let healthy: BTreeSet<u64> = healthy.iter().copied().collect();
        move |a| match a {
            Action::ListMembers => Observation::Members(MemberList::Members(members.clone())),
            Action::ProbeHealth { .. } => Observation::Healthy(healthy.clone()),
            Action::AddLearner { .. } => {
                let mut after = members.clone();
                after.push(member(9, 2, true, false));
                Observation::Added { id: 9, members: after }
            }
            Action::Promote { .. } => Observation::Promoted(Ok(())),
            Action::RemoveStale { .. } => Observation::Removed,
            Action::Store(_) => Observation::Stored,
            Action::AskProgress { .. } => Observation::Progress(Ok(LearnerProgress {
                leader_index: 100,
                matched: Some(90),
            })),
            Action::Done(_) => unreachable!(),
        }
    }

    fn unreachable_cluster(a: &Action) -> Observation {
        match a {
            Action::ListMembers => Observation::Members(MemberList::Unreachable("connection refused".into())),
            Action::Store(_) => Observation::Stored,
            other => panic!("{other:?} asked of an unreachable cluster"),
        }
    }

    /// A cluster whose members answer, but not this node's client.
    fn refusing_cluster(a: &Action) -> Observation {
        match a {
            Action::ListMembers => Observation::Members(MemberList::Refused(
                "invalid peer certificate: certificate expired".into(),
            )),
            other => panic!("{other:?} asked of a cluster that refuses this client"),
        }
    }

    #[test]
    fn each_decision_makes_its_calls_in_order() {
        let voters = vec![member(1, 1, false, true), member(3, 3, false, true)];
        let with_learner = |started: bool| {
            let mut m = voters.clone();
            m.push(member(9, 2, true, started));
            m
        };
        let with_stale_voter = {
            let mut m = voters.clone();
            m.push(member(2, 2, false, true));
            m
        };
        // (case, start, members, healthy, actions, phase rendered, pending)
        type Case<'a> = (
            &'a str,
            JoinStart,
            Vec<Member>,
            &'a [u64],
            &'a [&'a str],
            Option<Phase>,
            bool,
        );
        let cases: Vec<Case> = vec![
            (
                "a recorded voter with its data asks nothing",
                start(Some(record(Phase::Voter, Some(2))), true, None),
                voters.clone(),
                &[],
                &["done"],
                Some(Phase::Voter),
                false,
            ),
            (
                "a new node is added as a learner, then recorded, then its progress asked",
                start(None, false, None),
                voters.clone(),
                &[],
                &["list", "add", "store", "progress", "done"],
                Some(Phase::Learner),
                true,
            ),
            (
                "an interrupted join is resumed, never added twice",
                start(None, false, None),
                with_learner(false),
                &[],
                &["list", "store", "progress", "done"],
                Some(Phase::Learner),
                true,
            ),
            (
                "a learner that runs here is promoted, then recorded a voter",
                start(Some(record(Phase::Learner, Some(9))), true, None),
                with_learner(true),
                &[],
                &["list", "promote", "store", "done"],
                Some(Phase::Voter),
                false,
            ),
            (
                "a learner that has not started waits for etcd",
                start(Some(record(Phase::Learner, Some(9))), false, None),
                with_learner(false),
                &[],
                &["list", "progress", "done"],
                Some(Phase::Learner),
                true,
            ),
            (
                "a re-imaged voter's stale member is removed when the others keep quorum",
                start(None, false, None),
                with_stale_voter.clone(),
                &[1, 3],
                &["list", "probe", "remove", "store", "done"],
                None,
                true,
            ),
            (
                "a stale member that answers stays (its disk is not mounted yet)",
                start(None, false, None),
                with_stale_voter.clone(),
                &[1, 2, 3],
                &["list", "probe", "done"],
                None,
                true,
            ),
            (
                "a stale member is kept when removing it would cost quorum",
                start(None, false, None),
                with_stale_voter,
                &[1],
                &["list", "probe", "done"],
                None,
                true,
            ),
        ];
        for (case, start, members, healthy, expected, phase, pending) in cases {
            let (actions, end, stored) = run(start, cluster(members, healthy));
            assert_eq!(actions, expected, "{case}");
            assert_eq!(end.record.as_ref().map(|r| r.phase), phase, "{case}: {end:?}");
            assert_eq!(end.pending, pending, "{case}: {end:?}");
            // What the manifest renders with is what was stored.
            if let (Some(r), Some(last)) = (&end.record, stored.last()) {
                assert_eq!(r, last, "{case}");
            }
        }
    }

    #[test]
    fn a_stale_member_removed_is_recorded_removed_and_renders_nothing() {
        let members = vec![
            member(1, 1, false, true),
            member(2, 2, false, true),
            member(3, 3, false, true),
        ];
        let (_, end, stored) = run(start(None, false, None), cluster(members, &[1, 3]));
        assert_eq!(end.decision, Join::Rejoin { stale: 2 });
        assert!(end.record.is_none());
        assert_eq!(stored.len(), 1);
        assert_eq!(stored[0].phase, Phase::Removed);
        assert_eq!(stored[0].member_id.as_deref(), Some("2"));
        assert!(end.summary.contains("joining again as a learner"), "{}", end.summary);
    }

    #[test]
    fn an_added_learner_records_the_members_it_renders_with() {
        let voters = vec![member(1, 1, false, true), member(3, 3, false, true)];
        let (_, end, _) = run(start(None, false, None), cluster(voters, &[]));
        let r = end.record.expect("recorded");
        assert_eq!(r.member_id.as_deref(), Some("9"));
        assert_eq!(
            r.initial_cluster,
            "cp-1=https://10.0.0.1:2380,cp-3=https://10.0.0.3:2380,cp-2=https://10.0.0.2:2380"
        );
        assert_eq!(r.initial_cluster_state, "existing");
        // Recorded when etcd answered the add, not when the step began.
        assert_eq!(
            r.last_join.as_ref().map(|o| o.at.as_str()),
            Some("2026-11-29T00:00:01Z")
        );
        assert_eq!(
            end.learner,
            Some((
                9,
                Ok(LearnerProgress {
                    leader_index: 100,
                    matched: Some(90)
                })
            ))
        );
    }

    #[test]
    fn a_refused_promotion_keeps_the_learner_and_asks_again_later() {
        let mut members = vec![member(1, 1, false, true)];
        members.push(member(9, 2, true, true));
        let mut world = cluster(members, &[]);
        let (actions, end, stored) = run(start(Some(record(Phase::Learner, Some(9))), true, None), |a| match a {
            Action::Promote { .. } => Observation::Promoted(Err(
                "etcdserver: can only promote a learner member which is in sync with leader".into(),
            )),
            other => world(other),
        });
        assert_eq!(actions, ["list", "promote", "progress", "done"]);
        assert!(stored.is_empty(), "nothing recorded: {stored:?}");
        assert!(end.pending);
        assert_eq!(end.record.map(|r| r.phase), Some(Phase::Learner));
        assert!(end.summary.contains("not promoted yet"), "{}", end.summary);
    }

    #[test]
    fn an_unreachable_cluster_founds_one_only_for_a_node_of_the_initial_cluster() {
        let initial = "cp-1=https://10.0.0.1:2380,cp-2=https://10.0.0.2:2380";
        let (actions, end, stored) = run(start(None, false, Some(initial)), unreachable_cluster);
        assert_eq!(actions, ["list", "store", "done"]);
        assert_eq!(end.decision, Join::Bootstrap);
        assert_eq!(stored[0].initial_cluster_state, "new");
        assert_eq!(stored[0].initial_cluster, initial);
        // Not in the initial cluster (another name at this peer URL counts as not in it).
        for initial in [None, Some("cp-1=https://10.0.0.1:2380,cp-9=https://10.0.0.2:2380")] {
            let (actions, end, _) = run(start(None, false, initial), unreachable_cluster);
            assert_eq!(actions, ["list", "done"], "{initial:?}");
            assert!(matches!(end.decision, Join::Wait(_)), "{initial:?}: {:?}", end.decision);
            assert!(end.record.is_none() && end.pending);
        }
        // A learner being joined keeps its record and says why there is no progress.
        let (_, end, _) = run(
            start(Some(record(Phase::Learner, Some(9))), true, None),
            unreachable_cluster,
        );
        assert_eq!(end.record.map(|r| r.phase), Some(Phase::Learner));
        assert_eq!(
            end.learner,
            Some((9, Err("etcd unreachable: connection refused".into())))
        );
    }

    /// [F4] A re-imaged node of the initial cluster whose anchor cannot read the member list
    /// founds nothing: not under `run`, whatever the error, and not under the one-shot verbs
    /// when a member refused this node's client (a cluster runs there).
    #[test]
    fn a_cluster_is_founded_only_by_a_verb_and_only_when_nobody_answers() {
        let initial = "cp-2=https://10.0.0.2:2380";
        let running = |founding| JoinStart {
            founding,
            ..start(None, false, Some(initial))
        };
        for (founding, world) in [
            (Founding::Never, unreachable_cluster as fn(&Action) -> Observation),
            (Founding::Never, refusing_cluster),
            (Founding::WhenNoneAnswers, refusing_cluster),
        ] {
            let (actions, end, stored) = run(running(founding), world);
            assert_eq!(actions, ["list", "done"], "{founding:?}");
            assert!(stored.is_empty(), "{founding:?}: {stored:?}");
            assert!(end.record.is_none() && end.pending, "{founding:?}: {end:?}");
            let Join::Wait(why) = &end.decision else {
                panic!("{founding:?}: {:?}", end.decision);
            };
            assert!(end.summary.contains(why.as_str()), "{}", end.summary);
        }
        let (_, end, _) = run(running(Founding::Never), unreachable_cluster);
        assert!(end.summary.contains("never founds"), "{}", end.summary);
        let (_, end, _) = run(running(Founding::WhenNoneAnswers), refusing_cluster);
        assert!(
            end.summary
                .contains("refused this node's client (invalid peer certificate: certificate expired)"),
            "{}",
            end.summary
        );
        // A learner being joined keeps rendering from its record.
        let (_, end, _) = run(
            start(Some(record(Phase::Learner, Some(9))), true, None),
            refusing_cluster,
        );
        assert_eq!(end.record.map(|r| r.phase), Some(Phase::Learner));
    }

    #[test]
    fn a_removed_record_counts_as_none() {
        let voters = vec![member(1, 1, false, true), member(3, 3, false, true)];
        let (actions, end, _) = run(
            start(Some(record(Phase::Removed, Some(2))), false, None),
            cluster(voters, &[]),
        );
        assert_eq!(actions, ["list", "add", "store", "progress", "done"]);
        assert_eq!(end.decision, Join::AddLearner);
    }
}
