//! etcd membership, carried out: observe (member list, data dir, record), decide
//! ([`kube_anchor_core::membership`]), act (add learner, promote, remove) and record, for `apply`, `run` and
//! `pre-stop` of a component whose config has `spec.etcdMember`.
//!
//! Join: before the manifest is first written the node is a member (added as a learner, or part
//! of a new cluster's initial list), and the `--initial-cluster` pair it renders with is recorded
//! once in `<state-dir>/v1/<component>.membership.json`; the learner is promoted once etcd runs
//! and has caught up. Leave: the member is removed only when the voters that remain keep a
//! healthy quorum; the data dir goes only after a snapshot of its database is saved.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use crate::engine::{Engine, Inputs, now_rfc3339};
use kube_anchor_core::config::{EtcdMember, FileMode, Role};
use kube_anchor_core::hostpath::HostPath;
use kube_anchor_core::join_steps::{Action, JoinEnd, JoinStart, JoinStep, Observation};
use kube_anchor_core::ledger::{decode_checked, encode_checked};
use kube_anchor_core::margin::MarginFacts;
use kube_anchor_core::membership::{
    self, Attempt, Founding, HandOff, Join, LearnerProgress, Leave, LeaveFacts, LeaveIntent, Me, MemberList,
    PeerStatus, Phase, Record,
};
use kube_anchor_core::prestop_steps::LeaveAnswer;
use kube_anchor_core::state_layout::STATE_SUBDIR;
use kube_anchor_host::etcd_data;
use kube_anchor_host::hostfs::HostFsError;
use kube_anchor_k8s::etcd::{Cluster, Credentials, Endpoint, EtcdError};

/// How long one etcd call may take (a membership change commits through raft, with an fsync
/// on a quorum of members).
pub(crate) const ETCD_TIMEOUT: Duration = Duration::from_secs(10);
const RECORD_MODE: FileMode = FileMode(0o600);

#[derive(Debug, thiserror::Error)]
pub(crate) enum MemberError {
    #[error(transparent)]
    Etcd(#[from] EtcdError),
    #[error(transparent)]
    HostFs(#[from] HostFsError),
    #[error("{path}: {reason}")]
    Record { path: HostPath, reason: String },
    #[error("spec.etcdMember.{field}: {source}")]
    Render {
        field: &'static str,
        source: kube_anchor_core::render::RenderError,
    },
    #[error(transparent)]
    DataDir(#[from] etcd_data::DataDirError),
}

/// A learner waiting for its promotion.
#[derive(Debug, Clone)]
pub(crate) struct LearnerReport {
    pub id: u64,
    /// The leader's view of it, or why there is none.
    pub progress: Result<LearnerProgress, String>,
    /// When it was added (or found), from the record: the catch-up bound counts from here,
    /// across restarts of the anchor.
    pub since: Option<SystemTime>,
}

impl LearnerReport {
    /// The learner a join step ended with, if any.
    pub(crate) fn of(end: &JoinEnd) -> Option<LearnerReport> {
        let (id, progress) = end.learner.clone()?;
        let since = end
            .record
            .as_ref()
            .and_then(|r| r.last_join.as_ref())
            .and_then(|o| humantime::parse_rfc3339_weak(&o.at).ok());
        Some(LearnerReport { id, progress, since })
    }

    /// How long it has waited, by the record's clock; `None` when the record says nothing usable.
    pub(crate) fn waited(&self) -> Option<Duration> {
        SystemTime::now().duration_since(self.since?).ok()
    }
}

/// The leader's record of learner `id` (see [`Endpoint::raft_status`]): each voter's client
/// URL is asked until the leader answers.
pub(crate) async fn learner_progress(
    members: &[membership::Member],
    id: u64,
    creds: &Credentials,
) -> Result<LearnerProgress, String> {
    let mut last = "no voting member answered".to_owned();
    for m in members.iter().filter(|m| !m.is_learner) {
        for url in &m.client_urls {
            let Ok(endpoint) = Endpoint::new(url, creds, Duration::from_secs(2)) else {
                continue;
            };
            match endpoint.raft_status().await {
                Ok(s) if s.lead == s.id => {
                    return Ok(LearnerProgress {
                        leader_index: s.matched.get(&s.id).copied().unwrap_or(s.commit),
                        matched: s.matched.get(&id).copied(),
                    });
                }
                Ok(_) => break, // a follower: the next member may lead
                Err(e) => last = e.to_string(),
            }
        }
    }
    Err(last)
}

/// For `status`: the leader's record of this node's learner, asked within `budget`; `None`
/// when the record is not a learner's.
pub(crate) async fn learner_status(
    inputs: &Inputs,
    record: &Record,
    budget: Duration,
) -> Option<Result<LearnerProgress, String>> {
    if record.phase != Phase::Learner {
        return None;
    }
    let id: u64 = record.member_id.as_deref()?.parse().ok()?;
    let member = inputs.anchor.etcd_member.as_ref()?;
    let ask = async {
        let creds = credentials(member).map_err(|e| e.to_string())?;
        let cluster = Cluster::new(&member.endpoints, &creds, budget).map_err(|e| e.to_string())?;
        let members = cluster.member_list().await.map_err(|e| e.to_string())?;
        learner_progress(&members, id, &creds).await
    };
    Some(match tokio::time::timeout(budget, ask).await {
        Ok(progress) => progress,
        Err(_) => Err(format!(
            "etcd did not answer within {}",
            humantime::format_duration(budget)
        )),
    })
}

pub(crate) fn record_path(state_dir: &HostPath, component: &str) -> Result<HostPath, MemberError> {
    state_dir
        .join(&format!("{STATE_SUBDIR}/{}", Record::file_name(component)))
        .map_err(|e| MemberError::Record {
            path: state_dir.clone(),
            reason: e.to_string(),
        })
}

/// The record, `None` when there is none. A record that fails its checksum is an error: the node
/// keeps what it has until someone looks.
pub(crate) fn load_record(engine: &Engine, component: &str) -> Result<Option<Record>, MemberError> {
    let path = record_path(&engine.state_dir, component)?;
    match engine.fs.read(&path)? {
        None => Ok(None),
        Some(bytes) => decode_checked(&bytes).map(Some).map_err(|e| MemberError::Record {
            path,
            reason: format!(
                "unusable membership record ({}); check the cluster and remove it by hand",
                e.reason
            ),
        }),
    }
}

pub(crate) fn store_record(engine: &Engine, component: &str, record: &Record) -> Result<(), MemberError> {
    let path = record_path(&engine.state_dir, component)?;
    engine
        .fs
        .write_file(&path, &encode_checked(record), RECORD_MODE, Role::Credential)?;
    Ok(())
}

/// This node's name and peer URL, rendered like the manifest.
pub(crate) fn me(inputs: &Inputs, member: &EtcdMember) -> Result<Me, MemberError> {
    let vars = inputs.environment_variables();
    let render = |field: &'static str, text: &str| {
        kube_anchor_core::render::render(Path::new(field), text.as_bytes(), &vars)
            .map_err(|source| MemberError::Render { field, source })
    };
    Ok(Me {
        name: render("name", &member.name)?,
        peer_url: render("peerURL", &member.peer_url)?,
    })
}

pub(crate) fn own_client_url(inputs: &Inputs, member: &EtcdMember) -> Result<String, MemberError> {
    kube_anchor_core::render::render(
        Path::new("clientURL"),
        member.client_url.as_bytes(),
        &inputs.environment_variables(),
    )
    .map_err(|source| MemberError::Render {
        field: "clientURL",
        source,
    })
}

pub(crate) fn credentials(member: &EtcdMember) -> Result<Credentials, MemberError> {
    Ok(Credentials::read(
        &member.client_ca,
        &member.client_cert,
        &member.client_key,
    )?)
}

/// The data dir on this machine (below `--host-root`), refused when it is a symlink.
fn data_dir(engine: &Engine, member: &EtcdMember) -> Result<PathBuf, MemberError> {
    Ok(etcd_data::data_dir(
        engine.fs.host_root().join(member.data_dir.relative()),
    )?)
}

fn outcome(action: &str, result: impl Into<String>) -> Option<Attempt> {
    Some(Attempt {
        at: now_rfc3339(),
        action: action.into(),
        result: result.into(),
    })
}

/// For the one-shot verbs: one join step, and the record the manifest renders with, or an
/// error saying why there is none yet (nothing may be written then). `None` without
/// `spec.etcdMember`.
/// `rejoin_consented`: `apply --rejoin` (see [`JoinStart::rejoin_consented`]).
pub(crate) async fn join_before_write(
    engine: &Engine,
    inputs: &Inputs,
    rejoin_consented: bool,
) -> anyhow::Result<Option<Record>> {
    use anyhow::Context;
    if inputs.anchor.etcd_member.is_none() {
        return Ok(None);
    }
    let component = &inputs.anchor.name;
    // Writing the component by hand means it is wanted here: a leave still pending is given up.
    if let Some(intent) = give_up_leave(
        engine,
        component,
        "`apply` writes the component on this node again",
        |_| true,
    )? {
        tracing::warn!(%component, since = %intent.since, attempts = intent.attempts, "the etcd member's pending leave is cancelled: `apply` writes the component on this node again");
    }
    let report = join_step(engine, inputs, Founding::WhenNoneAnswers, rejoin_consented)
        .await
        .with_context(|| format!("{component}: etcd membership"))?;
    tracing::info!(%component, membership = %report.summary, pending = report.pending, "etcd membership");
    // What the running anchor waits on, a verb says with its exit code too.
    if matches!(report.decision, Join::AwaitRejoinConsent { .. }) {
        return Err(crate::engine::EngineError::MembershipPending {
            component: component.clone(),
            reason: report.summary,
        }
        .into());
    }
    match report.record {
        Some(record) => Ok(Some(record)),
        None => Err(crate::engine::EngineError::MembershipPending {
            component: component.clone(),
            reason: report.summary,
        }
        .into()),
    }
}

/// One join step ([`JoinStep`]), performed: the member list, the calls it decides, the record.
/// Removes nothing but this node's own stale member (see [`Join::Rejoin`]). A failed call ends
/// the step with its error.
pub(crate) async fn join_step(
    engine: &Engine,
    inputs: &Inputs,
    founding: Founding,
    rejoin_consented: bool,
) -> Result<JoinEnd, MemberError> {
    let member = inputs
        .anchor
        .etcd_member
        .as_ref()
        .expect("join_step is called only with spec.etcdMember");
    let component = &inputs.anchor.name;
    // One writer of the record at a time (a one-shot apply and the daemon).
    let _lock = engine.fs.lock(&engine.state_dir, &format!("{component}.membership"))?;
    let (mut join, mut action) = JoinStep::new(JoinStart {
        me: me(inputs, member)?,
        record: load_record(engine, component)?,
        data_dir_has_member: etcd_data::has_member(&data_dir(engine, member)?),
        initial_cluster: member.initial_cluster.clone(),
        founding,
        rejoin_consented,
        at: now_rfc3339(),
    });
    let cluster = || -> Result<Cluster, MemberError> {
        Ok(Cluster::new(&member.endpoints, &credentials(member)?, ETCD_TIMEOUT)?)
    };
    loop {
        let observation = match action {
            Action::Done(end) => {
                tracing::debug!(%component, decision = ?end.decision, "membership decision");
                if end.is_notable() {
                    tracing::warn!(%component, membership = %end.summary, "etcd membership");
                } else if !matches!(end.decision, Join::Keep) {
                    tracing::info!(%component, membership = %end.summary, "etcd membership");
                }
                return Ok(end);
            }
            Action::ListMembers => Observation::Members(cluster()?.observe_members().await),
            Action::ProbeHealth { members } => {
                Observation::Healthy(healthy_members(&members, &credentials(member)?).await)
            }
            Action::AddLearner { peer_url } => {
                // A lost answer may still have added it: the next step finds it by peer URL.
                let (added, members) = cluster()?.add_learner(&peer_url).await?;
                Observation::Added { id: added.id, members }
            }
            Action::Promote { id } => Observation::Promoted(cluster()?.promote(id).await.map_err(|e| e.to_string())),
            Action::RemoveStale { id } => {
                cluster()?.remove(id).await?;
                Observation::Removed
            }
            Action::Store(record) => {
                store_record(engine, component, &record)?;
                Observation::Stored
            }
            Action::AskProgress { id, members } => Observation::Progress(match credentials(member) {
                Ok(creds) => learner_progress(&members, id, &creds).await,
                Err(_) => Err("no etcd client credentials".into()),
            }),
        };
        (join, action) = join.step(observation, now_rfc3339());
    }
}

/// Removes this node's member when [`membership::decide_leave`] allows it. Called by pre-stop
/// once the decommission is proved (and [`ask_leave`] has recorded the intent), before
/// anything is removed from the node. A member removed, or found gone, ends the intent; a
/// refusal is the caller's to record ([`hold_leave`]), with whatever else kept it.
pub(crate) async fn leave_step(
    engine: &Engine,
    inputs: &Inputs,
    member: &EtcdMember,
) -> Result<LeaveAnswer, MemberError> {
    let component = &inputs.anchor.name;
    let me = me(inputs, member)?;
    let creds = credentials(member)?;
    let cluster = Cluster::new(&member.endpoints, &creds, ETCD_TIMEOUT)?;
    let observed = cluster.observe_members().await;
    let healthy = match observed.members() {
        Some(members) => healthy_members(members, &creds).await,
        None => BTreeSet::new(),
    };
    let decision = membership::decide_leave(&LeaveFacts {
        me: &me,
        observed: &observed,
        healthy: &healthy,
    });
    let mut handed_off = None;
    let report = match decision {
        Leave::Refuse(refusal) => LeaveAnswer::Refused {
            reason: refusal.to_string(),
            may_pass_later: refusal.may_pass_later(),
        },
        Leave::NotAMember => LeaveAnswer::NotAMember,
        Leave::Remove { id } => {
            // A leader removed from under the cluster stalls every write for an election.
            let hand_off = hand_off_leadership(inputs, member, HAND_OFF_BUDGET).await;
            tracing::info!(%component, hand_off = %hand_off.summary, "before leaving");
            handed_off = hand_off.moved_to.map(|_| hand_off.summary);
            let own_urls = observed
                .members()
                .and_then(|members| members.iter().find(|m| m.id == id))
                .map(|m| m.client_urls.clone())
                .unwrap_or_default();
            match cluster.remove_through_others(id, &own_urls).await {
                Ok(()) => LeaveAnswer::Removed { id },
                Err(e) => match cluster.member_list().await {
                    // An answer lost after etcd applied the removal (the others then answer
                    // "member not found"): a list without the member is the proof it left.
                    Ok(members) if !members.iter().any(|m| m.id == id) => {
                        tracing::info!(%component, member = %format!("{id:x}"), error = %e,
                            "the removal's answer was lost; the member list no longer has the member");
                        LeaveAnswer::Removed { id }
                    }
                    // etcd's own check (--strict-reconfig-check) may refuse what the member
                    // list allowed a moment before, when another node left meanwhile: asked
                    // again, the decision sees the new list.
                    _ => LeaveAnswer::Refused {
                        reason: format!("removing member {id:x} failed: {e}"),
                        may_pass_later: true,
                    },
                },
            }
        }
    };
    let result = match &report {
        LeaveAnswer::Removed { id } => match &handed_off {
            Some(moved) => format!("removed {id:x} ({moved} first)"),
            None => format!("removed {id:x}"),
        },
        LeaveAnswer::NotAMember => "not a member".into(),
        // Not left: the caller records why, with whatever else kept it.
        LeaveAnswer::Refused { .. } | LeaveAnswer::Failed(_) | LeaveAnswer::NoAnswer { .. } => return Ok(report),
    };
    let recorded = update_record(engine, component, |r| {
        r.phase = Phase::Removed;
        r.leave_pending = None;
        r.last_leave = outcome("remove member", result);
    });
    if let Err(e) = recorded {
        tracing::warn!(%component, error = %e, "could not record the leave");
    }
    Ok(report)
}

/// One [`leave_step`] within `budget`: an error or the budget running out is the answer too.
pub(crate) async fn leave_within(
    engine: &Engine,
    inputs: &Inputs,
    member: &EtcdMember,
    budget: Duration,
) -> LeaveAnswer {
    match tokio::time::timeout(budget, leave_step(engine, inputs, member)).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(e)) => LeaveAnswer::Failed(crate::logging::error_chain(&anyhow::Error::from(e))),
        Err(_) => LeaveAnswer::NoAnswer { within: budget },
    }
}

/// Changes the record under its lock; `false` when there is none (a member this node never
/// recorded: nothing to keep).
fn update_record(engine: &Engine, component: &str, change: impl FnOnce(&mut Record)) -> Result<bool, MemberError> {
    let _lock = engine.fs.lock(&engine.state_dir, &format!("{component}.membership"))?;
    match load_record(engine, component)? {
        Some(mut r) => {
            change(&mut r);
            store_record(engine, component, &r)?;
            Ok(true)
        }
        None => Ok(false),
    }
}

/// Before each leave attempt: the intent is on disk first, so a hook killed in the middle of
/// the leave leaves it behind for the next one and for `status`.
pub(crate) fn ask_leave(engine: &Engine, component: &str, pod: Option<&str>) -> Result<bool, MemberError> {
    update_record(engine, component, |r| {
        let intent = r.leave_pending.get_or_insert_with(|| LeaveIntent {
            since: now_rfc3339(),
            pod: None,
            attempts: 0,
            last_refusal: None,
        });
        intent.pod = pod.map(str::to_owned);
        intent.attempts += 1;
    })
}

/// The leave did not happen: why, kept with the intent.
pub(crate) fn hold_leave(engine: &Engine, component: &str, why: &str) -> Result<bool, MemberError> {
    update_record(engine, component, |r| {
        if let Some(intent) = &mut r.leave_pending {
            intent.last_refusal = Some(why.to_owned());
        }
        r.last_leave = outcome("remove member", format!("refused: {why}"));
    })
}

/// Gives up a pending leave when `gives_up` says so (the component is wanted on this node
/// again), saying so in the record; the intent given up, if any.
pub(crate) fn give_up_leave(
    engine: &Engine,
    component: &str,
    why: &str,
    gives_up: impl FnOnce(&LeaveIntent) -> bool,
) -> Result<Option<LeaveIntent>, MemberError> {
    let _lock = engine.fs.lock(&engine.state_dir, &format!("{component}.membership"))?;
    let Some(mut r) = load_record(engine, component)? else {
        return Ok(None);
    };
    let Some(intent) = r.leave_pending.take_if(|i| gives_up(i)) else {
        return Ok(None);
    };
    r.last_leave = outcome(
        "cancel leave",
        format!(
            "cancelled: {why} (asked since {}, {} attempt(s){})",
            intent.since,
            intent.attempts,
            intent
                .last_refusal
                .as_deref()
                .map(|w| format!("; last refused: {w}"))
                .unwrap_or_default()
        ),
    );
    store_record(engine, component, &r)?;
    Ok(Some(intent))
}

/// How long a leadership hand-off may hold up a write or a leave: etcd's MoveLeader takes at
/// most an election timeout (1 s by default) once the transferee has caught up.
pub(crate) const HAND_OFF_BUDGET: Duration = Duration::from_secs(15);

/// One leave attempt of `remove` (a one-shot verb has no hook budget): the hand-off's budget
/// and the removal's own calls.
pub(crate) const LEAVE_BUDGET: Duration = Duration::from_secs(30);

/// What the hand-off found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HandOffReport {
    /// The member that leads now, when leadership was moved.
    pub moved_to: Option<u64>,
    /// In words, for logs, output and Events.
    pub summary: String,
    /// This member led and still does (no candidate, or the move failed).
    pub still_leads: bool,
}

/// Before this node's etcd restarts (a new manifest) or leaves: when its member leads, hand
/// leadership to a healthy, caught-up voter ([`membership::hand_off`]), bounded by `budget`.
/// Never an error: whatever fails is reported and the write or leave goes on, as it would
/// have without a hand-off (etcd then elects a leader itself, after an election timeout).
pub(crate) async fn hand_off_leadership(inputs: &Inputs, member: &EtcdMember, budget: Duration) -> HandOffReport {
    let not_moved = |summary: String, still_leads: bool| HandOffReport {
        moved_to: None,
        summary,
        still_leads,
    };
    if !member.hand_off_leadership {
        return not_moved(
            "leadership is not handed off (spec.etcdMember.handOffLeadership: false)".into(),
            false,
        );
    }
    match tokio::time::timeout(budget, hand_off_steps(inputs, member, budget)).await {
        Ok(Ok(report)) => report,
        Ok(Err(e)) => not_moved(
            format!(
                "leadership not handed off: {}",
                crate::logging::error_chain(&anyhow::Error::from(e))
            ),
            false,
        ),
        Err(_) => not_moved(
            format!(
                "leadership not handed off: no answer within {}",
                humantime::format_duration(budget)
            ),
            true,
        ),
    }
}

async fn hand_off_steps(inputs: &Inputs, member: &EtcdMember, budget: Duration) -> Result<HandOffReport, MemberError> {
    let creds = credentials(member)?;
    let own = Endpoint::new(&own_client_url(inputs, member)?, &creds, ETCD_TIMEOUT)?;
    // This member's own word: `leader` is the ID of the member it follows, or its own.
    let status = match own.status().await {
        Ok(s) => s,
        Err(e) => {
            return Ok(HandOffReport {
                moved_to: None,
                summary: format!("this member does not answer ({e}); nothing to hand off"),
                still_leads: false,
            });
        }
    };
    let members = own.member_list().await?;
    let peers = peer_statuses(&members, status.member_id, &creds).await;
    let me = status.member_id;
    let report = |moved_to, summary, still_leads| HandOffReport {
        moved_to,
        summary,
        still_leads,
    };
    Ok(
        match membership::hand_off(me, status.leader, status.raft_index, &members, &peers) {
            HandOff::NotLeader => report(None, format!("member {me:x} does not lead; nothing to hand off"), false),
            HandOff::NoCandidate(why) => report(None, format!("member {me:x} leads and keeps leading: {why}"), true),
            HandOff::MoveTo { id, name } => {
                own.move_leader(id).await?;
                // etcd answered that the transfer is done; confirm it from this member.
                let deadline = Instant::now() + budget;
                loop {
                    match own.status().await {
                        Ok(s) if s.leader == id => {
                            break report(
                                Some(id),
                                format!("leadership moved from member {me:x} to {name} ({id:x})"),
                                false,
                            );
                        }
                        _ if Instant::now() >= deadline => {
                            break report(
                                None,
                                format!("asked member {me:x} to hand leadership to {name} ({id:x}); not confirmed"),
                                true,
                            );
                        }
                        _ => tokio::time::sleep(Duration::from_millis(200)).await,
                    }
                }
            }
        },
    )
}

/// Before this node's member restarts: the member list and what each other voter says about
/// itself, for [`membership::restart_margin`]. Whatever cannot be asked is said in the facts.
pub(crate) async fn margin_facts(inputs: &Inputs, member: &EtcdMember) -> MarginFacts {
    let me = match me(inputs, member) {
        Ok(me) => me,
        Err(e) => return MarginFacts::Unknown(e.to_string()),
    };
    let creds = match credentials(member) {
        Ok(creds) => creds,
        Err(e) => return MarginFacts::Unknown(format!("etcd client credentials: {e}")),
    };
    let observed = match Cluster::new(&member.endpoints, &creds, ETCD_TIMEOUT) {
        Ok(cluster) => cluster.observe_members().await,
        Err(e) => MemberList::Unreachable(e.to_string()),
    };
    let peers = match observed.members() {
        Some(members) => {
            let own = membership::find_me(&me, members).ok().flatten().map_or(0, |m| m.id);
            peer_statuses(members, own, &creds).await
        }
        None => BTreeMap::new(),
    };
    MarginFacts::Etcd { me, observed, peers }
}

/// What `m` says about itself, asked at its own client URLs (the first that answers as `m`).
pub(crate) async fn member_status(
    m: &membership::Member,
    creds: &Credentials,
) -> Option<kube_anchor_k8s::etcd::EndpointStatus> {
    for url in &m.client_urls {
        let Ok(endpoint) = Endpoint::new(url, creds, Duration::from_secs(2)) else {
            continue;
        };
        if let Ok(s) = endpoint.status().await
            && s.member_id == m.id
        {
            return Some(s);
        }
    }
    None
}

/// What each other voter says about itself, asked at its own client URL.
async fn peer_statuses(members: &[membership::Member], me: u64, creds: &Credentials) -> BTreeMap<u64, PeerStatus> {
    let checks = members
        .iter()
        .filter(|m| m.id != me && !m.is_learner)
        .map(|m| async move {
            let s = member_status(m, creds).await?;
            Some((
                m.id,
                PeerStatus {
                    raft_applied_index: s.raft_applied_index,
                    healthy: s.healthy(),
                },
            ))
        });
    futures::future::join_all(checks).await.into_iter().flatten().collect()
}

/// Members whose own client URL answers a status with a leader and no errors but alarms
/// ([`kube_anchor_k8s::etcd::EndpointStatus::healthy`]).
pub(crate) async fn healthy_members(members: &[membership::Member], creds: &Credentials) -> BTreeSet<u64> {
    let checks = members.iter().map(|m| async move {
        member_status(m, creds)
            .await
            .filter(kube_anchor_k8s::etcd::EndpointStatus::healthy)
            .map(|_| m.id)
    });
    futures::future::join_all(checks).await.into_iter().flatten().collect()
}

/// Waits until etcd has stopped, at most until `until`: its client URL no longer answers, and
/// no process holds its WAL. etcd closes its listeners first and keeps writing its data dir
/// until it exits (a data dir deleted in between came back as a partial one); it holds a write
/// lock on its WAL files (`pkg/fileutil`) for as long as it runs.
pub(crate) async fn wait_etcd_stopped(engine: &Engine, inputs: &Inputs, member: &EtcdMember, until: Instant) -> bool {
    let (Ok(url), Ok(creds), Ok(data)) = (
        own_client_url(inputs, member),
        credentials(member),
        data_dir(engine, member),
    ) else {
        return false;
    };
    let Ok(endpoint) = Endpoint::new(&url, &creds, Duration::from_secs(1)) else {
        return false;
    };
    let mut silent = false;
    while Instant::now() < until {
        if !silent {
            match tokio::time::timeout(until.saturating_duration_since(Instant::now()), endpoint.status()).await {
                // etcd itself answering with an error is still etcd running.
                Ok(Err(EtcdError::Call { reason, .. })) if reason.contains("etcdserver:") => {}
                Ok(Err(_)) => silent = true,
                Ok(Ok(_)) => {}
                Err(_) => break,
            }
        }
        if silent {
            match etcd_data::wal_held(&data) {
                Ok(false) => return true,
                Ok(true) => {}
                Err(e) => {
                    tracing::warn!(data_dir = %data.display(), error = %e, "cannot tell whether etcd still holds its WAL; its data dir is kept");
                    return false;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    false
}

/// `<state-dir>/v1/<name>` on this machine (below `--host-root`).
pub(crate) fn state_subdir(engine: &Engine, name: &str) -> Result<PathBuf, MemberError> {
    let dir = engine
        .state_dir
        .join(&format!("{STATE_SUBDIR}/{name}"))
        .map_err(|e| MemberError::Record {
            path: engine.state_dir.clone(),
            reason: e.to_string(),
        })?;
    Ok(engine.fs.resolve(&dir)?)
}

/// Saves `member/snap/db` under `<state-dir>/v1/<component>-snapshots/` (fsynced, at most
/// `snapshots.maxBytes`, the newest `snapshots.keep` kept), then deletes the data dir. Any
/// failure keeps the data dir.
pub(crate) fn save_and_remove_data_dir(
    engine: &Engine,
    component: &str,
    member: &EtcdMember,
) -> Result<Option<etcd_data::Saved>, MemberError> {
    let data = data_dir(engine, member)?;
    let snapshots = state_subdir(engine, &format!("{component}-snapshots"))?;
    let (saved, left) = etcd_data::save_and_remove(&data, &snapshots, member.snapshot_max_bytes, |names| {
        membership::snapshots_to_prune(names, member.snapshots_keep)
    })?;
    match left {
        etcd_data::DirLeft::Gone => {}
        etcd_data::DirLeft::NotEmpty => {
            tracing::warn!(path = %data.display(), "the data dir holds more than etcd's member/: kept, with what is in it");
        }
        etcd_data::DirLeft::MountPoint => {
            tracing::info!(path = %data.display(), "the data dir is a mount point here: emptied of etcd's member/, the directory stays");
        }
    }
    Ok(saved)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn member(max_bytes: u64, keep: usize) -> EtcdMember {
        EtcdMember {
            endpoints: vec!["https://127.0.0.1:2379".into()],
            name: "n".into(),
            peer_url: "https://127.0.0.1:2380".into(),
            client_url: "https://127.0.0.1:2379".into(),
            client_ca: "ca".into(),
            client_cert: "crt".into(),
            client_key: "key".into(),
            data_dir: HostPath::parse("/var/lib/etcd").unwrap(),
            snapshots_keep: keep,
            snapshot_max_bytes: max_bytes,
            snapshot_schedule: None,
            defrag: None,
            initial_cluster: None,
            learner_catch_up_timeout: kube_anchor_core::config::DEFAULT_LEARNER_CATCH_UP_TIMEOUT,
            hand_off_leadership: true,
        }
    }

    fn node() -> (tempfile::TempDir, Engine) {
        let root = tempfile::tempdir().unwrap();
        let engine = Engine::new(root.path(), "/var/lib/kube-anchor", &["/etc/kubernetes".into()]).unwrap();
        (root, engine)
    }

    fn data(root: &Path, db: &[u8]) -> PathBuf {
        let dir = root.join("var/lib/etcd");
        fs::create_dir_all(dir.join("member/snap")).unwrap();
        fs::create_dir_all(dir.join("member/wal")).unwrap();
        fs::write(dir.join("member/snap/db"), db).unwrap();
        dir
    }

    fn snapshots(root: &Path) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = fs::read_dir(root.join("var/lib/kube-anchor/v1/etcd-snapshots"))
            .map(|d| d.map(|e| e.unwrap().path()).collect())
            .unwrap_or_default();
        v.sort();
        v
    }

    #[test]
    fn the_data_dir_goes_only_after_its_database_is_saved() {
        let (root, engine) = node();
        fs::create_dir_all(root.path().join("var/lib/kube-anchor/v1")).unwrap();
        let dir = data(root.path(), b"database bytes");
        let saved = save_and_remove_data_dir(&engine, "etcd", &member(1 << 20, 2))
            .unwrap()
            .unwrap();
        assert!(!dir.exists());
        assert_eq!(fs::read(&saved.snapshot).unwrap(), b"database bytes");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            fs::metadata(&saved.snapshot).unwrap().permissions().mode() & 0o777,
            0o600
        );
        // Kept N: the oldest go.
        for i in 0..3 {
            data(root.path(), format!("db {i}").as_bytes());
            save_and_remove_data_dir(&engine, "etcd", &member(1 << 20, 2)).unwrap();
        }
        let left = snapshots(root.path());
        assert_eq!(left.len(), 2, "{left:?}");
        assert_eq!(fs::read(&left[1]).unwrap(), b"db 2");
    }

    #[test]
    fn a_database_above_the_bound_keeps_the_data_dir() {
        let (root, engine) = node();
        fs::create_dir_all(root.path().join("var/lib/kube-anchor/v1")).unwrap();
        let dir = data(root.path(), &[7u8; 2048]);
        let e = save_and_remove_data_dir(&engine, "etcd", &member(1024, 2)).unwrap_err();
        assert!(e.to_string().contains("above snapshots.maxBytes"), "{e}");
        assert!(dir.join("member/snap/db").exists(), "data dir kept");
        assert!(snapshots(root.path()).is_empty());
    }

    #[test]
    fn only_what_etcd_wrote_goes_with_the_data_dir() {
        // A dataDir pointed by mistake at a directory that holds other files.
        let (root, engine) = node();
        fs::create_dir_all(root.path().join("var/lib/kube-anchor/v1")).unwrap();
        let dir = data(root.path(), b"database bytes");
        fs::write(dir.join("not-etcd.conf"), b"keep me").unwrap();
        save_and_remove_data_dir(&engine, "etcd", &member(1 << 20, 2)).unwrap();
        assert!(!dir.join("member").exists());
        assert_eq!(fs::read(dir.join("not-etcd.conf")).unwrap(), b"keep me");
    }

    #[test]
    fn a_symlinked_data_dir_is_not_followed() {
        let (root, engine) = node();
        let elsewhere = root.path().join("elsewhere");
        fs::create_dir_all(elsewhere.join("member")).unwrap();
        fs::create_dir_all(root.path().join("var/lib")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, root.path().join("var/lib/etcd")).unwrap();
        assert!(save_and_remove_data_dir(&engine, "etcd", &member(1 << 20, 2)).is_err());
        assert!(elsewhere.join("member").exists());
    }
}
