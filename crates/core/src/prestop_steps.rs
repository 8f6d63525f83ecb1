//! The pre-stop hook's order and timing as a pure machine: `step(hook, observation, now) ->
//! (hook, action)`, one action at a time. The hook (`kube-anchor pre-stop`) performs each action
//! and feeds back what it observed; `now` is the time since the hook started, its budget the
//! hook's `--timeout`.
//!
//! The order, and why:
//! 1. The evidence ([`crate::decommission`]) decides Keep, Held or Remove; it must be in by
//!    [`Limits::evidence_until`], so the removal keeps its reserve (an unanswered lookup is no
//!    evidence).
//! 2. Keep exits 0 with every file in place; Held does too, after a Warning Event on the pod.
//! 3. An etcd member leaves the cluster before any file goes: the intent is recorded before each
//!    attempt (a hook killed mid-way leaves it for the next one), a refusal that may pass is
//!    asked again while time is left, and one that stays is recorded, said in a Warning Event and
//!    exits 1 with every file kept.
//! 4. The ledger is marked decommissioned (the daemon in this pod then writes nothing back), the
//!    rollout turn is given back, `--before-remove` runs (a failure keeps every file), the
//!    manifest goes, the static pod is waited for, the credentials go, and last an etcd data dir
//!    once etcd has stopped (saved first; kept while etcd still answers).
//!
//! Every wait ends [`FINAL_STEP`] before the deadline, so a slow API never leaves the credentials
//! behind once the manifest is gone.

use std::time::Duration;

use crate::decommission::Decision;

/// Kept free at the end of the timeout for removing the credentials.
pub const FINAL_STEP: Duration = Duration::from_secs(2);
/// Kept free after the evidence (at most half of the timeout): the manifest, a short wait for
/// the static pod to stop, the credentials.
pub const REMOVAL_RESERVE: Duration = Duration::from_secs(5);
/// Pause between leave attempts whose refusal may pass when asked again.
pub const LEAVE_RETRY: Duration = Duration::from_secs(2);
/// The most the rollout turn's hand-back may take.
pub const TURN_RELEASE: Duration = Duration::from_secs(5);

/// The hook's deadlines, from its `--timeout`. Times are since the hook started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub timeout: Duration,
}

impl Limits {
    /// The evidence, and every leave attempt's start, end by then.
    pub fn evidence_until(&self) -> Duration {
        self.timeout.saturating_sub(REMOVAL_RESERVE.min(self.timeout / 2))
    }

    fn remaining(&self, now: Duration) -> Duration {
        self.timeout.saturating_sub(now)
    }

    /// A step's budget: what is left but the final step.
    fn budget(&self, now: Duration) -> Duration {
        self.remaining(now).saturating_sub(FINAL_STEP)
    }

    /// The end of a wait that the final step must follow.
    fn wait_until(&self, now: Duration) -> Duration {
        self.timeout - FINAL_STEP.min(self.remaining(now))
    }
}

/// Whether the component is an etcd member that must leave first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemberConfig {
    /// No `spec.etcdMember` (or no `--config`).
    NotConfigured,
    Configured,
    /// The config could not be read: whether a member must leave is not known, so nothing goes.
    Unreadable(String),
}

/// What one attempt to leave the etcd cluster gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaveAnswer {
    Removed {
        id: u64,
    },
    NotAMember,
    Refused {
        reason: String,
        may_pass_later: bool,
    },
    /// The attempt failed (etcd's error, a credential that cannot be read).
    Failed(String),
    /// etcd did not answer within the attempt's budget.
    NoAnswer {
        within: Duration,
    },
}

/// Where the hook ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    /// No decommission: every file stays (exit 0).
    Keep(String),
    /// A decommission the guard holds (a quorum, the last copy): every file stays (exit 0).
    Held(String),
    /// A decommission, but the etcd member does not leave: every file stays (exit 1).
    MemberStays(String),
    /// Removed.
    Removed(String),
    /// A step failed: the hook stops where it was (exit 1); what `reason` says was kept is.
    Failed(String),
}

impl Exit {
    /// The word the hook reports (`keep`, `held`, `remove`, `failed`).
    pub fn decision(&self) -> &'static str {
        match self {
            Exit::Keep(_) => "keep",
            Exit::Held(_) | Exit::MemberStays(_) => "held",
            Exit::Removed(_) => "remove",
            Exit::Failed(_) => "failed",
        }
    }

    pub fn reason(&self) -> &str {
        match self {
            Exit::Keep(r) | Exit::Held(r) | Exit::MemberStays(r) | Exit::Removed(r) | Exit::Failed(r) => r,
        }
    }

    pub fn success(&self) -> bool {
        matches!(self, Exit::Keep(_) | Exit::Held(_) | Exit::Removed(_))
    }
}

/// Why a Warning Event is published on the hook's pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WarningReason {
    DecommissionHeld,
    MembershipHeld,
}

impl WarningReason {
    pub fn as_str(self) -> &'static str {
        match self {
            WarningReason::DecommissionHeld => "DecommissionHeld",
            WarningReason::MembershipHeld => "MembershipHeld",
        }
    }
}

/// What the hook must do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Gather the evidence and decide ([`Observation::Decided`]), by `until`.
    GatherEvidence {
        until: Duration,
    },
    /// A Warning Event on this pod saying `reason`, by the deadline.
    Warn {
        code: WarningReason,
        reason: String,
    },
    /// Record the intent to leave in the membership record (attempt `attempt`).
    RecordIntentToLeave {
        attempt: u32,
    },
    /// One attempt to leave the etcd cluster ([`Observation::Left`]), within `budget`.
    Leave {
        budget: Duration,
    },
    /// Wait `pause`, then ask again: the last refusal (`why`) may pass.
    Pause {
        pause: Duration,
        why: String,
    },
    /// Record why the member did not leave, with the intent, for the next hook and `status`.
    RecordLeaveHeld {
        why: String,
    },
    /// Mark the ledger decommissioned.
    MarkDecommissioned {
        reason: String,
    },
    /// Give back this node's rollout turn, within `budget` (best effort).
    GiveBackTurn {
        budget: Duration,
    },
    /// Run `--before-remove`, within `budget`.
    RunBeforeRemove {
        budget: Duration,
    },
    RemoveManifest,
    /// Wait (at most until `until`) for the static pod to stop.
    WaitStopped {
        until: Duration,
    },
    RemoveCredentials,
    /// Wait (at most until `until`) for etcd to stop answering ([`Observation::EtcdStopped`]).
    WaitEtcdStopped {
        until: Duration,
    },
    /// Save the etcd database and remove the data dir.
    SaveAndRemoveDataDir,
    /// Report and exit.
    Exit(Exit),
}

/// What performing the last action gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observation {
    /// The hook starts (the first step).
    Began,
    Decided(Decision),
    Left(LeaveAnswer),
    /// Whether etcd stopped before the wait ended.
    EtcdStopped(bool),
    /// The action was carried out (or, for a best-effort one, tried).
    Done,
    /// The action failed, said how.
    Failed(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Pending {
    Start,
    Deciding,
    Warning(Exit),
    RecordingIntent { attempt: u32 },
    Leaving { attempt: u32 },
    Pausing { attempt: u32 },
    RecordingHeld { why: String },
    Marking,
    GivingBackTurn,
    RunningBeforeRemove,
    RemovingManifest,
    WaitingStopped,
    RemovingCredentials,
    WaitingEtcdStopped,
    SavingDataDir,
    Exited(Exit),
}

/// The hook, between two actions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hook {
    limits: Limits,
    member: MemberConfig,
    before_remove: bool,
    /// The decommission's reason, once proved.
    reason: String,
    /// An operator holds the component's anchors on the node (`kube_anchor_core::pause`): the
    /// hook removes nothing, whatever the evidence.
    paused: Option<String>,
    pending: Pending,
}

impl Hook {
    pub fn new(limits: Limits, member: MemberConfig, before_remove: bool) -> Self {
        Hook {
            limits,
            member,
            before_remove,
            reason: String::new(),
            paused: None,
            pending: Pending::Start,
        }
    }

    /// The hook of an anchor an operator holds ([`crate::pause::Pause::describe`]): known at the
    /// start (the node's own marker), it gathers no evidence; learned with the evidence (the
    /// Node's annotation, asked only of a decision to remove), it turns that decision into a hold.
    pub fn paused(mut self, why: Option<String>) -> Self {
        self.paused = why;
        self
    }

    /// Where the hook ended, once it has.
    pub fn exit(&self) -> Option<&Exit> {
        match &self.pending {
            Pending::Exited(exit) => Some(exit),
            _ => None,
        }
    }

    /// The next action, given what the last one gave at `now`.
    pub fn step(mut self, observation: Observation, now: Duration) -> (Hook, Action) {
        let limits = self.limits;
        let pending = std::mem::replace(&mut self.pending, Pending::Start);
        let (pending, action) = match (pending, observation) {
            (Pending::Start, _) if self.paused.is_some() => {
                let why = self.paused.clone().unwrap_or_default();
                warn(WarningReason::DecommissionHeld, Exit::Held(why))
            }
            (Pending::Start, _) => (
                Pending::Deciding,
                Action::GatherEvidence {
                    until: limits.evidence_until(),
                },
            ),
            (Pending::Deciding, Observation::Decided(Decision::Keep(reason))) => exit(Exit::Keep(reason)),
            (Pending::Deciding, Observation::Decided(Decision::Held(reason))) => {
                warn(WarningReason::DecommissionHeld, Exit::Held(reason))
            }
            // A hold learned with the evidence (the Node's annotation, asked only now).
            (Pending::Deciding, Observation::Decided(Decision::Remove(_))) if self.paused.is_some() => {
                let why = self.paused.clone().unwrap_or_default();
                warn(WarningReason::DecommissionHeld, Exit::Held(why))
            }
            (Pending::Deciding, Observation::Decided(Decision::Remove(reason))) => {
                self.reason = reason;
                match &self.member {
                    MemberConfig::NotConfigured => self.mark(),
                    MemberConfig::Configured => record_intent(1),
                    MemberConfig::Unreadable(why) => {
                        let why = format!("the etcd member's config cannot be read ({why})");
                        self.member_stays(&why)
                    }
                }
            }
            (Pending::RecordingIntent { attempt }, _) => (
                Pending::Leaving { attempt },
                Action::Leave {
                    budget: limits.budget(now),
                },
            ),
            (Pending::Leaving { attempt }, Observation::Left(answer)) => match answer {
                LeaveAnswer::Removed { .. } | LeaveAnswer::NotAMember => self.mark(),
                LeaveAnswer::Refused { reason, may_pass_later }
                    if may_pass_later && now + LEAVE_RETRY < limits.evidence_until() =>
                {
                    (
                        Pending::Pausing { attempt },
                        Action::Pause {
                            pause: LEAVE_RETRY,
                            why: reason,
                        },
                    )
                }
                LeaveAnswer::Refused { reason: why, .. } | LeaveAnswer::Failed(why) => record_held(attempt, &why),
                LeaveAnswer::NoAnswer { within } => record_held(
                    attempt,
                    &format!(
                        "etcd did not answer within {}",
                        humantime::format_duration(Duration::from_secs(within.as_secs()))
                    ),
                ),
            },
            (Pending::Pausing { attempt }, _) => record_intent(attempt + 1),
            (Pending::RecordingHeld { why }, _) => self.member_stays(&why),
            (Pending::Warning(exit_with), _) => exit(exit_with),
            (Pending::Marking, Observation::Failed(e)) => exit(Exit::Failed(format!(
                "cannot mark the component decommissioned: {e}; every file is kept"
            ))),
            (Pending::Marking, _) => (
                Pending::GivingBackTurn,
                Action::GiveBackTurn {
                    budget: limits.budget(now).min(TURN_RELEASE),
                },
            ),
            (Pending::GivingBackTurn, _) if self.before_remove => (
                Pending::RunningBeforeRemove,
                Action::RunBeforeRemove {
                    budget: limits.budget(now),
                },
            ),
            (Pending::GivingBackTurn, _) => (Pending::RemovingManifest, Action::RemoveManifest),
            (Pending::RunningBeforeRemove, Observation::Failed(e)) => {
                exit(Exit::Failed(format!("{e}; every file is kept")))
            }
            (Pending::RunningBeforeRemove, _) => (Pending::RemovingManifest, Action::RemoveManifest),
            (Pending::RemovingManifest, Observation::Failed(e)) => exit(Exit::Failed(format!(
                "cannot remove the manifest: {e}; the credentials are kept"
            ))),
            (Pending::RemovingManifest, _) => (
                Pending::WaitingStopped,
                Action::WaitStopped {
                    until: limits.wait_until(now),
                },
            ),
            (Pending::WaitingStopped, _) => (Pending::RemovingCredentials, Action::RemoveCredentials),
            (Pending::RemovingCredentials, Observation::Failed(e)) => exit(Exit::Failed(format!(
                "the manifest is removed, but not the credentials: {e}"
            ))),
            (Pending::RemovingCredentials, _) if self.member == MemberConfig::Configured => (
                Pending::WaitingEtcdStopped,
                Action::WaitEtcdStopped {
                    until: limits.wait_until(now),
                },
            ),
            (Pending::RemovingCredentials, _) => exit(Exit::Removed(self.reason.clone())),
            (Pending::WaitingEtcdStopped, Observation::EtcdStopped(true)) => {
                (Pending::SavingDataDir, Action::SaveAndRemoveDataDir)
            }
            // Still answering (or not known): the data dir is kept; the removal stands.
            (Pending::WaitingEtcdStopped, _) | (Pending::SavingDataDir, _) => exit(Exit::Removed(self.reason.clone())),
            (Pending::Exited(done), _) => exit(done),
            // An observation the action cannot give: stop, keeping what is left.
            (Pending::Deciding, other) => exit(Exit::Failed(format!(
                "the evidence gave no decision ({other:?}); every file is kept"
            ))),
            (Pending::Leaving { .. }, other) => exit(Exit::Failed(format!(
                "leaving the etcd cluster gave no answer ({other:?}); every file is kept"
            ))),
        };
        self.pending = pending;
        (self, action)
    }

    fn mark(&self) -> (Pending, Action) {
        (
            Pending::Marking,
            Action::MarkDecommissioned {
                reason: self.reason.clone(),
            },
        )
    }

    fn member_stays(&self, why: &str) -> (Pending, Action) {
        let reason = format!("{}, but the etcd member stays: {why}; every file is kept", self.reason);
        warn(WarningReason::MembershipHeld, Exit::MemberStays(reason))
    }
}

fn exit(exit: Exit) -> (Pending, Action) {
    (Pending::Exited(exit.clone()), Action::Exit(exit))
}

fn warn(code: WarningReason, exit: Exit) -> (Pending, Action) {
    let reason = exit.reason().to_owned();
    (Pending::Warning(exit), Action::Warn { code, reason })
}

/// Why the member did not leave, recorded with the number of attempts.
fn record_held(attempt: u32, why: &str) -> (Pending, Action) {
    let why = format!("{why} (asked {attempt} time(s))");
    (
        Pending::RecordingHeld { why: why.clone() },
        Action::RecordLeaveHeld { why },
    )
}

fn record_intent(attempt: u32) -> (Pending, Action) {
    (
        Pending::RecordingIntent { attempt },
        Action::RecordIntentToLeave { attempt },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMEOUT: Duration = Duration::from_secs(30);

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    /// Runs a hook, answering each action with `answer` at the time `clock` gives, until it
    /// exits; returns every action in order.
    fn run(
        member: MemberConfig,
        before_remove: bool,
        answer: impl FnMut(&Action, Duration) -> (Observation, Duration),
    ) -> Vec<Action> {
        run_hook(Hook::new(Limits { timeout: TIMEOUT }, member, before_remove), answer)
    }

    fn run_hook(mut hook: Hook, mut answer: impl FnMut(&Action, Duration) -> (Observation, Duration)) -> Vec<Action> {
        let (mut observation, mut now) = (Observation::Began, Duration::ZERO);
        let mut actions = Vec::new();
        loop {
            let (next, action) = hook.step(observation, now);
            hook = next;
            actions.push(action.clone());
            if let Action::Exit(exit) = &action {
                assert_eq!(hook.exit(), Some(exit));
                return actions;
            }
            assert!(actions.len() < 100, "the hook does not end: {actions:?}");
            (observation, now) = answer(&action, now);
        }
    }

    fn decided(decision: Decision) -> impl FnMut(&Action, Duration) -> (Observation, Duration) {
        move |action, now| match action {
            Action::GatherEvidence { .. } => (Observation::Decided(decision.clone()), now + secs(1)),
            Action::WaitEtcdStopped { .. } => (Observation::EtcdStopped(true), now + secs(1)),
            Action::Leave { .. } => (Observation::Left(LeaveAnswer::Removed { id: 7 }), now + secs(1)),
            _ => (Observation::Done, now + secs(1)),
        }
    }

    fn names(actions: &[Action]) -> Vec<&'static str> {
        actions
            .iter()
            .map(|a| match a {
                Action::GatherEvidence { .. } => "evidence",
                Action::Warn { .. } => "warn",
                Action::RecordIntentToLeave { .. } => "intent",
                Action::Leave { .. } => "leave",
                Action::Pause { .. } => "pause",
                Action::RecordLeaveHeld { .. } => "held-record",
                Action::MarkDecommissioned { .. } => "mark",
                Action::GiveBackTurn { .. } => "turn",
                Action::RunBeforeRemove { .. } => "before-remove",
                Action::RemoveManifest => "manifest",
                Action::WaitStopped { .. } => "wait-stopped",
                Action::RemoveCredentials => "credentials",
                Action::WaitEtcdStopped { .. } => "wait-etcd",
                Action::SaveAndRemoveDataDir => "data-dir",
                Action::Exit(_) => "exit",
            })
            .collect()
    }

    fn last_exit(actions: &[Action]) -> &Exit {
        match actions.last() {
            Some(Action::Exit(exit)) => exit,
            other => panic!("no exit: {other:?}"),
        }
    }

    #[test]
    fn the_order_for_each_decision() {
        let keep = run(
            MemberConfig::Configured,
            true,
            decided(Decision::Keep("not proved".into())),
        );
        assert_eq!(names(&keep), ["evidence", "exit"]);
        assert_eq!(last_exit(&keep), &Exit::Keep("not proved".into()));

        let held = run(
            MemberConfig::NotConfigured,
            false,
            decided(Decision::Held("quorum".into())),
        );
        assert_eq!(names(&held), ["evidence", "warn", "exit"]);
        assert!(matches!(
            held[1],
            Action::Warn {
                code: WarningReason::DecommissionHeld,
                ..
            }
        ));
        assert!(last_exit(&held).success());

        let plain = run(
            MemberConfig::NotConfigured,
            false,
            decided(Decision::Remove("deleted".into())),
        );
        assert_eq!(
            names(&plain),
            [
                "evidence",
                "mark",
                "turn",
                "manifest",
                "wait-stopped",
                "credentials",
                "exit"
            ]
        );
        assert_eq!(last_exit(&plain), &Exit::Removed("deleted".into()));

        let member = run(
            MemberConfig::Configured,
            true,
            decided(Decision::Remove("deleted".into())),
        );
        assert_eq!(
            names(&member),
            [
                "evidence",
                "intent",
                "leave",
                "mark",
                "turn",
                "before-remove",
                "manifest",
                "wait-stopped",
                "credentials",
                "wait-etcd",
                "data-dir",
                "exit"
            ]
        );
    }

    #[test]
    fn a_paused_anchor_removes_nothing_on_a_proven_decommission() {
        let hook = Hook::new(Limits { timeout: TIMEOUT }, MemberConfig::Configured, true)
            .paused(Some("paused on this node since 2026-12-07T03:00:00Z (restore)".into()));
        let actions = run_hook(hook, decided(Decision::Remove("deleted".into())));
        assert_eq!(names(&actions), ["warn", "exit"]);
        // Learned with the evidence: the decision to remove is held.
        let mut hook = Hook::new(Limits { timeout: TIMEOUT }, MemberConfig::Configured, true);
        let (next, action) = hook.step(Observation::Began, Duration::ZERO);
        assert!(matches!(action, Action::GatherEvidence { .. }), "{action:?}");
        hook = next.paused(Some("paused by the annotation (drain)".into()));
        let (_, action) = hook.step(Observation::Decided(Decision::Remove("deleted".into())), secs(1));
        assert!(
            matches!(&action, Action::Warn { code: WarningReason::DecommissionHeld, reason } if reason.contains("drain")),
            "{action:?}"
        );
        assert!(
            matches!(last_exit(&actions), Exit::Held(why) if why.contains("restore")),
            "{actions:?}"
        );
        assert!(last_exit(&actions).success());
    }

    #[test]
    fn a_member_that_does_not_leave_keeps_every_file_and_exits_non_zero() {
        for (answer, says) in [
            (
                LeaveAnswer::Refused {
                    reason: "would lose quorum".into(),
                    may_pass_later: false,
                },
                "would lose quorum (asked 1 time(s))",
            ),
            (
                LeaveAnswer::Failed("TLS: unknown authority".into()),
                "TLS: unknown authority",
            ),
            (
                LeaveAnswer::NoAnswer { within: secs(23) },
                "etcd did not answer within 23s",
            ),
        ] {
            let actions = run(MemberConfig::Configured, true, |action, now| match action {
                Action::GatherEvidence { .. } => (Observation::Decided(Decision::Remove("deleted".into())), now),
                Action::Leave { .. } => (Observation::Left(answer.clone()), now + secs(1)),
                _ => (Observation::Done, now),
            });
            assert_eq!(
                names(&actions),
                ["evidence", "intent", "leave", "held-record", "warn", "exit"]
            );
            let exit = last_exit(&actions);
            assert!(!exit.success());
            assert_eq!(exit.decision(), "held");
            assert!(
                exit.reason().starts_with("deleted, but the etcd member stays: "),
                "{exit:?}"
            );
            assert!(exit.reason().contains(says), "{exit:?}");
            assert!(exit.reason().ends_with("every file is kept"), "{exit:?}");
        }
        let unreadable = run(
            MemberConfig::Unreadable("anchor.yaml: no such file".into()),
            false,
            decided(Decision::Remove("deleted".into())),
        );
        assert_eq!(names(&unreadable), ["evidence", "warn", "exit"]);
        assert!(matches!(
            unreadable[1],
            Action::Warn {
                code: WarningReason::MembershipHeld,
                ..
            }
        ));
        assert!(
            last_exit(&unreadable)
                .reason()
                .contains("config cannot be read (anchor.yaml")
        );
    }

    /// A refusal that may pass is asked again every LEAVE_RETRY while the next attempt can still
    /// start before the evidence's end (the removal's reserve is kept); the intent is recorded
    /// before each attempt.
    #[test]
    fn a_refusal_that_may_pass_is_asked_again_while_the_reserve_allows() {
        let refusals = std::cell::Cell::new(0);
        let actions = run(MemberConfig::Configured, false, |action, now| match action {
            Action::GatherEvidence { .. } => (Observation::Decided(Decision::Remove("deleted".into())), now + secs(3)),
            Action::Leave { .. } => {
                refusals.set(refusals.get() + 1);
                let refused = LeaveAnswer::Refused {
                    reason: "a member is unhealthy".into(),
                    may_pass_later: true,
                };
                (Observation::Left(refused), now + secs(1))
            }
            Action::Pause { pause, .. } => (Observation::Done, now + *pause),
            _ => (Observation::Done, now),
        });
        // The evidence is in at 3 s; attempt n starts at 3n s and is refused at 3n + 1 s; a pause
        // follows while 3n + 1 + 2 s is before 25 s (30 s less the 5 s reserve): n ≤ 7, so 8.
        let attempts = refusals.get();
        let pauses = actions.iter().filter(|a| matches!(a, Action::Pause { .. })).count();
        assert_eq!(pauses as u32, attempts - 1);
        let intents: Vec<u32> = actions
            .iter()
            .filter_map(|a| match a {
                Action::RecordIntentToLeave { attempt } => Some(*attempt),
                _ => None,
            })
            .collect();
        assert_eq!(intents, (1..=attempts).collect::<Vec<_>>());
        assert_eq!(attempts, 8);
        assert!(
            last_exit(&actions)
                .reason()
                .contains(&format!("(asked {attempts} time(s))"))
        );
    }

    #[test]
    fn a_failed_step_stops_there_and_says_what_is_kept() {
        let failing = |step: &'static str| {
            move |action: &Action, now: Duration| {
                let name = names(std::slice::from_ref(action))[0];
                match action {
                    _ if name == step => (Observation::Failed("disk full".into()), now),
                    Action::GatherEvidence { .. } => (Observation::Decided(Decision::Remove("deleted".into())), now),
                    Action::Leave { .. } => (Observation::Left(LeaveAnswer::NotAMember), now),
                    _ => (Observation::Done, now),
                }
            }
        };
        for (step, kept) in [
            ("mark", "every file is kept"),
            ("before-remove", "every file is kept"),
            ("manifest", "the credentials are kept"),
            ("credentials", "not the credentials"),
        ] {
            let actions = run(MemberConfig::NotConfigured, true, failing(step));
            let names = names(&actions);
            assert_eq!(names[names.len() - 2], step, "{names:?}");
            let exit = last_exit(&actions);
            assert!(
                !exit.success() && exit.reason().contains("disk full") && exit.reason().contains(kept),
                "{exit:?}"
            );
        }
        // Best-effort steps do not stop the removal: the turn's hand-back, the records.
        for step in ["turn", "intent"] {
            let actions = run(MemberConfig::Configured, false, failing(step));
            assert_eq!(last_exit(&actions), &Exit::Removed("deleted".into()), "{step}");
        }
    }

    #[test]
    fn an_etcd_that_still_answers_keeps_its_data_dir() {
        let actions = run(MemberConfig::Configured, false, |action, now| match action {
            Action::GatherEvidence { .. } => (Observation::Decided(Decision::Remove("deleted".into())), now),
            Action::Leave { .. } => (Observation::Left(LeaveAnswer::Removed { id: 1 }), now),
            Action::WaitEtcdStopped { .. } => (Observation::EtcdStopped(false), now),
            _ => (Observation::Done, now),
        });
        assert!(!names(&actions).contains(&"data-dir"));
        assert_eq!(last_exit(&actions), &Exit::Removed("deleted".into()));
    }

    /// Every wait and budget leaves the final step free, whenever it is asked.
    #[test]
    fn budgets_keep_the_final_step() {
        let limits = Limits { timeout: TIMEOUT };
        assert_eq!(limits.evidence_until(), secs(25));
        assert_eq!(Limits { timeout: secs(6) }.evidence_until(), secs(3));
        for now in [0, 10, 27, 28, 29, 30, 40] {
            let now = secs(now);
            assert!(limits.budget(now) + now <= TIMEOUT - FINAL_STEP || limits.budget(now).is_zero());
            assert!(limits.wait_until(now) <= TIMEOUT - FINAL_STEP || limits.wait_until(now) <= now);
        }
        // Asked late, the turn's hand-back gets what is left, and never more than its cap.
        let late = run(MemberConfig::NotConfigured, false, |action, _| match action {
            Action::GatherEvidence { .. } => (Observation::Decided(Decision::Remove("deleted".into())), secs(26)),
            _ => (Observation::Done, secs(26)),
        });
        assert!(late.contains(&Action::GiveBackTurn { budget: secs(2) }), "{late:?}");
        let early = run(
            MemberConfig::NotConfigured,
            false,
            decided(Decision::Remove("deleted".into())),
        );
        assert!(
            early.contains(&Action::GiveBackTurn { budget: TURN_RELEASE }),
            "{early:?}"
        );
    }
}
