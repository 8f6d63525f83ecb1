//! The version lifecycle of `kube-anchor run`: what the node's version is going through, and the
//! judgement of a last-known-good version kept in place of a bad one. Pure.
//!
//! Each is a state and a `step(state, event) -> (state, actions)`: the daemon observes (reads
//! the ledger, the mirror pod, the health URL), steps, and carries the actions out (writes,
//! Events, log lines); an action whose outcome matters comes back as an event.
//!
//! [`Version`] moves at a sync (a version written) and at an evaluation (its trial judged);
//! [`LkgCheck`] only at an evaluation, so a check outlives the hold it judged until the next one.

use std::time::Duration;

use crate::trial::{Assessment, Trial, TrialOutcome};

/// What the version written is going through.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Version {
    /// Nothing on trial: what is written is last-known-good (or nothing is written yet).
    #[default]
    Settled,
    /// A new version on trial.
    OnTrial(Trial),
    /// The inputs name a known-bad version (or the one on trial was just rolled back): the
    /// last-known-good one is kept. `why`: the `/readyz` reason.
    HeldBack { why: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionEvent<'a> {
    /// A sync wrote (or found in place) `hash`. `last_known_good`: the ledger names it so;
    /// `held_back`: why it is the last-known-good one kept in place of the inputs' bad one.
    Written {
        hash: &'a str,
        last_known_good: bool,
        held_back: Option<String>,
        now: Duration,
    },
    /// An evaluation of what is written.
    Assessed {
        assessment: &'a Assessment,
        now: Duration,
        period: Duration,
    },
    /// [`VersionAction::RollBack`] wrote the last-known-good version back; `note` says so.
    RolledBack { note: String },
    /// [`VersionAction::RollBack`] found no last-known-good version to go back to: the failed
    /// one is kept, and tried again.
    NoLastKnownGood { now: Duration },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionAction {
    /// Log that `hash` is on trial now.
    AnnounceTrial { hash: String },
    /// The version on trial survived it: record it as last-known-good and say so.
    Promote,
    /// The version on trial failed it: mark it bad and write the last-known-good one back.
    RollBack { reason: String },
}

impl Version {
    pub fn trial(&self) -> Option<&Trial> {
        match self {
            Version::OnTrial(trial) => Some(trial),
            _ => None,
        }
    }

    pub fn trial_mut(&mut self) -> Option<&mut Trial> {
        match self {
            Version::OnTrial(trial) => Some(trial),
            _ => None,
        }
    }

    /// Why the last-known-good version is kept, while it is.
    pub fn held_back(&self) -> Option<&str> {
        match self {
            Version::HeldBack { why } => Some(why),
            _ => None,
        }
    }

    pub fn step(self, event: VersionEvent<'_>) -> (Self, Vec<VersionAction>) {
        match (self, event) {
            (
                state,
                VersionEvent::Written {
                    hash,
                    last_known_good,
                    held_back,
                    now,
                },
            ) => {
                // A version held back is the last-known-good one: not on trial.
                if let Some(why) = held_back {
                    return (Version::HeldBack { why }, vec![]);
                }
                match state {
                    _ if last_known_good => (Version::Settled, vec![]),
                    Version::OnTrial(trial) if trial.hash == hash => (Version::OnTrial(trial), vec![]),
                    _ => (
                        Version::OnTrial(Trial::start(hash, now)),
                        vec![VersionAction::AnnounceTrial { hash: hash.to_owned() }],
                    ),
                }
            }
            (
                Version::OnTrial(mut trial),
                VersionEvent::Assessed {
                    assessment,
                    now,
                    period,
                },
            ) => match trial.step(assessment, now, period) {
                TrialOutcome::Pending => (Version::OnTrial(trial), vec![]),
                TrialOutcome::Passed => (Version::Settled, vec![VersionAction::Promote]),
                // Stays on trial until the rollback is done (it is retried while it fails).
                TrialOutcome::Failed(reason) => (Version::OnTrial(trial), vec![VersionAction::RollBack { reason }]),
            },
            (Version::OnTrial(_), VersionEvent::RolledBack { note }) => (Version::HeldBack { why: note }, vec![]),
            (Version::OnTrial(trial), VersionEvent::NoLastKnownGood { now }) => {
                (Version::OnTrial(Trial::start(&trial.hash, now)), vec![])
            }
            // Nothing on trial: nothing to judge or to roll back.
            (
                state,
                VersionEvent::Assessed { .. } | VersionEvent::RolledBack { .. } | VersionEvent::NoLastKnownGood { .. },
            ) => (state, vec![]),
        }
    }
}

/// The judgement of the last-known-good version while it is kept in place of a bad one: judged
/// like a version on trial; one that fails too is reported loudly rather than kept silently. It
/// is not rolled back further: there is nothing older known to be good.
///
/// `recorded`: whether the ledger's record of a failing last-known-good has been brought in line
/// with this process's judgement. The first judgement compares with what an earlier process left
/// (read first: no ledger write at every start); later ones only record a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LkgCheck {
    /// Nothing held back: nothing judged.
    Idle { recorded: bool },
    /// Judging the kept version; it has not failed.
    Judging { check: Trial, recorded: bool },
    /// The kept version failed too (`note` says so; recorded and reported); judged again from
    /// scratch, and back to [`LkgCheck::Judging`] once it passes.
    Failing { check: Trial, note: String },
}

impl Default for LkgCheck {
    fn default() -> Self {
        LkgCheck::Idle { recorded: false }
    }
}

/// One evaluation of what is written (`hash`): `held_back` while [`Version::HeldBack`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LkgEvaluated<'a> {
    pub held_back: bool,
    pub hash: &'a str,
    pub assessment: &'a Assessment,
    pub now: Duration,
    pub period: Duration,
}

/// A failing last-known-good version as the ledger records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LkgFailure {
    pub hash: String,
    pub note: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LkgAction {
    /// The kept version fails too: log `note` as an error and publish it as a Warning Event.
    Report { note: String },
    /// Log that the last-known-good version runs converged again.
    ConvergedAgain,
    /// Record `failing` (`None`: clear the record) in the ledger; `if_different`: only where
    /// the ledger's record names another hash (the first record of this process).
    Record {
        failing: Option<LkgFailure>,
        if_different: bool,
    },
}

impl LkgCheck {
    pub fn check_mut(&mut self) -> Option<&mut Trial> {
        match self {
            LkgCheck::Idle { .. } => None,
            LkgCheck::Judging { check, .. } | LkgCheck::Failing { check, .. } => Some(check),
        }
    }

    /// The note of a failing last-known-good version.
    pub fn failing(&self) -> Option<&str> {
        match self {
            LkgCheck::Failing { note, .. } => Some(note),
            _ => None,
        }
    }

    fn recorded(&self) -> bool {
        match self {
            LkgCheck::Idle { recorded } | LkgCheck::Judging { recorded, .. } => *recorded,
            LkgCheck::Failing { .. } => true,
        }
    }

    pub fn step(self, event: LkgEvaluated<'_>) -> (Self, Vec<LkgAction>) {
        let LkgEvaluated {
            held_back,
            hash,
            assessment,
            now,
            period,
        } = event;
        if !held_back {
            let actions = clear_record(self.failing().is_some(), self.recorded());
            return (LkgCheck::Idle { recorded: true }, actions);
        }
        let recorded = self.recorded();
        let (mut check, failing) = match self {
            LkgCheck::Judging { check, .. } if check.hash == hash => (check, None),
            LkgCheck::Failing { check, note } if check.hash == hash => (check, Some(note)),
            LkgCheck::Failing { note, .. } => (Trial::start(hash, now), Some(note)),
            _ => (Trial::start(hash, now), None),
        };
        match check.step(assessment, now, period) {
            TrialOutcome::Pending => match failing {
                Some(note) => (LkgCheck::Failing { check, note }, vec![]),
                None => (LkgCheck::Judging { check, recorded }, vec![]),
            },
            TrialOutcome::Passed => (
                LkgCheck::Judging { check, recorded: true },
                clear_record(failing.is_some(), recorded),
            ),
            TrialOutcome::Failed(reason) => {
                let check = Trial::start(hash, now);
                match failing {
                    // Reported once, until it runs converged again.
                    Some(note) => (LkgCheck::Failing { check, note }, vec![]),
                    None => {
                        let note = format!(
                            "last-known-good {hash} is failing too ({reason}); kept, as nothing older is known to be good: the node needs an operator"
                        );
                        let actions = vec![
                            LkgAction::Report { note: note.clone() },
                            LkgAction::Record {
                                failing: Some(LkgFailure {
                                    hash: hash.to_owned(),
                                    note: note.clone(),
                                }),
                                if_different: !recorded,
                            },
                        ];
                        (LkgCheck::Failing { check, note }, actions)
                    }
                }
            }
        }
    }
}

/// What it takes to record that no last-known-good version is failing (`failing`: one was).
fn clear_record(failing: bool, recorded: bool) -> Vec<LkgAction> {
    if failing {
        vec![
            LkgAction::ConvergedAgain,
            LkgAction::Record {
                failing: None,
                if_different: false,
            },
        ]
    } else if !recorded {
        vec![LkgAction::Record {
            failing: None,
            if_different: true,
        }]
    } else {
        vec![]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: &str = "sha256:new";
    const O: &str = "sha256:other";
    const L: &str = "sha256:lkg";
    const PERIOD: Duration = Duration::from_secs(300);

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    /// `trial` after one step at `now`.
    fn stepped(mut trial: Trial, assessment: &Assessment, now: u64) -> Trial {
        trial.step(assessment, secs(now), PERIOD);
        trial
    }

    #[test]
    fn version_transitions() {
        use VersionAction::*;
        let converged = Assessment::Converged;
        let crash = Assessment::CrashLooping("restarted 4 times".into());
        let started = |hash: &str, at: u64| Trial::start(hash, secs(at));
        let on_trial = |hash: &str, at: u64| Version::OnTrial(started(hash, at));
        let held = |why: &str| Version::HeldBack { why: why.into() };
        let written = |hash: &'static str, last_known_good: bool, held_back: Option<&str>| VersionEvent::Written {
            hash,
            last_known_good,
            held_back: held_back.map(str::to_owned),
            now: secs(5),
        };
        let assessed = |assessment, now| VersionEvent::Assessed {
            assessment,
            now: secs(now),
            period: PERIOD,
        };
        let rolled_back = || VersionEvent::RolledBack {
            note: "rolled back".into(),
        };
        let no_lkg = || VersionEvent::NoLastKnownGood { now: secs(7) };
        let announce = |hash: &str| vec![AnnounceTrial { hash: hash.into() }];
        let table: Vec<(&str, Version, VersionEvent, Version, Vec<VersionAction>)> = vec![
            // A sync wrote a version.
            (
                "new version",
                Version::Settled,
                written(H, false, None),
                on_trial(H, 5),
                announce(H),
            ),
            (
                "same version still on trial",
                on_trial(H, 0),
                written(H, false, None),
                on_trial(H, 0),
                vec![],
            ),
            (
                "another version replaces the one on trial",
                on_trial(O, 0),
                written(H, false, None),
                on_trial(H, 5),
                announce(H),
            ),
            (
                "last-known-good again",
                on_trial(H, 0),
                written(L, true, None),
                Version::Settled,
                vec![],
            ),
            (
                "last-known-good stays",
                Version::Settled,
                written(L, true, None),
                Version::Settled,
                vec![],
            ),
            (
                "inputs name a bad version",
                Version::Settled,
                written(L, true, Some("bad")),
                held("bad"),
                vec![],
            ),
            (
                "rolled back, then the inputs' bad version is seen",
                held("rolled back"),
                written(L, true, Some("bad")),
                held("bad"),
                vec![],
            ),
            (
                "inputs back to the last-known-good",
                held("bad"),
                written(L, true, None),
                Version::Settled,
                vec![],
            ),
            (
                "inputs move on from a bad version",
                held("bad"),
                written(H, false, None),
                on_trial(H, 5),
                announce(H),
            ),
            // An evaluation judged what is written.
            (
                "trial pending",
                on_trial(H, 0),
                assessed(&converged, 10),
                Version::OnTrial(stepped(started(H, 0), &converged, 10)),
                vec![],
            ),
            (
                "trial passed",
                on_trial(H, 0),
                assessed(&converged, 300),
                Version::Settled,
                vec![Promote],
            ),
            (
                "trial failed: rolled back, on trial until that is done",
                on_trial(H, 0),
                assessed(&crash, 10),
                Version::OnTrial(stepped(started(H, 0), &crash, 10)),
                vec![RollBack {
                    reason: "restarted 4 times".into(),
                }],
            ),
            (
                "nothing on trial",
                Version::Settled,
                assessed(&crash, 10),
                Version::Settled,
                vec![],
            ),
            (
                "held back: not on trial",
                held("bad"),
                assessed(&crash, 10),
                held("bad"),
                vec![],
            ),
            // The outcome of a rollback.
            (
                "rolled back",
                on_trial(H, 0),
                rolled_back(),
                held("rolled back"),
                vec![],
            ),
            (
                "nothing to roll back to: tried again",
                Version::OnTrial(stepped(started(H, 0), &crash, 3)),
                no_lkg(),
                on_trial(H, 7),
                vec![],
            ),
            (
                "rolled back with nothing on trial",
                Version::Settled,
                rolled_back(),
                Version::Settled,
                vec![],
            ),
            (
                "no last-known-good with nothing on trial",
                held("bad"),
                no_lkg(),
                held("bad"),
                vec![],
            ),
        ];
        for (name, state, event, want_state, want_actions) in table {
            let (state, actions) = state.step(event);
            assert_eq!((state, actions), (want_state, want_actions), "{name}");
        }
    }

    #[test]
    fn last_known_good_check_transitions() {
        use LkgAction::*;
        let converged = Assessment::Converged;
        let pending = Assessment::NotConverged("not Ready".into());
        let unknown = Assessment::Unknown("API unreachable".into());
        let crash = Assessment::CrashLooping("restarted 4 times".into());
        let note = format!(
            "last-known-good {L} is failing too (restarted 4 times); kept, as nothing older is known to be good: the node needs an operator"
        );
        let failure = || LkgFailure {
            hash: L.into(),
            note: note.clone(),
        };
        let check = |hash: &str| Trial::start(hash, secs(0));
        let judging = |check: Trial, recorded| LkgCheck::Judging { check, recorded };
        let failing = |check: Trial| LkgCheck::Failing {
            check,
            note: "failing".into(),
        };
        let idle = |recorded| LkgCheck::Idle { recorded };
        let clear = |if_different| Record {
            failing: None,
            if_different,
        };
        // (name, state, held back, hash written, assessment, now, expected state, expected actions)
        #[allow(clippy::type_complexity)]
        let table: Vec<(&str, LkgCheck, bool, &str, &Assessment, u64, LkgCheck, Vec<LkgAction>)> = vec![
            // Nothing held back: nothing to judge; the first judgement clears an earlier process's record.
            (
                "first look",
                idle(false),
                false,
                H,
                &converged,
                5,
                idle(true),
                vec![clear(true)],
            ),
            (
                "nothing held back",
                idle(true),
                false,
                H,
                &converged,
                5,
                idle(true),
                vec![],
            ),
            (
                "hold over, record not looked at",
                judging(check(L), false),
                false,
                H,
                &converged,
                5,
                idle(true),
                vec![clear(true)],
            ),
            (
                "hold over",
                judging(check(L), true),
                false,
                H,
                &converged,
                5,
                idle(true),
                vec![],
            ),
            (
                "hold over while failing",
                failing(check(L)),
                false,
                H,
                &converged,
                5,
                idle(true),
                vec![ConvergedAgain, clear(false)],
            ),
            // Held back: judged.
            (
                "judging starts",
                idle(false),
                true,
                L,
                &pending,
                5,
                judging(stepped(Trial::start(L, secs(5)), &pending, 5), false),
                vec![],
            ),
            (
                "judging starts, recorded",
                idle(true),
                true,
                L,
                &pending,
                5,
                judging(stepped(Trial::start(L, secs(5)), &pending, 5), true),
                vec![],
            ),
            (
                "no evidence",
                judging(check(L), true),
                true,
                L,
                &unknown,
                5,
                judging(stepped(check(L), &unknown, 5), true),
                vec![],
            ),
            (
                "another version written: judged afresh",
                judging(check(O), true),
                true,
                L,
                &pending,
                5,
                judging(stepped(Trial::start(L, secs(5)), &pending, 5), true),
                vec![],
            ),
            (
                "passes",
                judging(check(L), true),
                true,
                L,
                &converged,
                300,
                judging(stepped(check(L), &converged, 300), true),
                vec![],
            ),
            (
                "passes, record not looked at",
                judging(check(L), false),
                true,
                L,
                &converged,
                300,
                judging(stepped(check(L), &converged, 300), true),
                vec![clear(true)],
            ),
            (
                "fails",
                judging(check(L), true),
                true,
                L,
                &crash,
                5,
                LkgCheck::Failing {
                    check: Trial::start(L, secs(5)),
                    note: note.clone(),
                },
                vec![
                    Report { note: note.clone() },
                    Record {
                        failing: Some(failure()),
                        if_different: false,
                    },
                ],
            ),
            (
                "fails, record not looked at",
                judging(check(L), false),
                true,
                L,
                &crash,
                5,
                LkgCheck::Failing {
                    check: Trial::start(L, secs(5)),
                    note: note.clone(),
                },
                vec![
                    Report { note: note.clone() },
                    Record {
                        failing: Some(failure()),
                        if_different: true,
                    },
                ],
            ),
            (
                "fails at once",
                idle(true),
                true,
                L,
                &crash,
                5,
                LkgCheck::Failing {
                    check: Trial::start(L, secs(5)),
                    note: note.clone(),
                },
                vec![
                    Report { note: note.clone() },
                    Record {
                        failing: Some(failure()),
                        if_different: false,
                    },
                ],
            ),
            // Failing: reported once; cleared when it passes.
            (
                "still failing",
                failing(check(L)),
                true,
                L,
                &pending,
                5,
                failing(stepped(check(L), &pending, 5)),
                vec![],
            ),
            (
                "fails again: judged afresh, not reported again",
                failing(check(L)),
                true,
                L,
                &crash,
                5,
                failing(Trial::start(L, secs(5))),
                vec![],
            ),
            (
                "failing, another version written",
                failing(check(O)),
                true,
                L,
                &pending,
                5,
                failing(stepped(Trial::start(L, secs(5)), &pending, 5)),
                vec![],
            ),
            (
                "converged again",
                failing(check(L)),
                true,
                L,
                &converged,
                300,
                judging(stepped(check(L), &converged, 300), true),
                vec![ConvergedAgain, clear(false)],
            ),
        ];
        for (name, state, held_back, hash, assessment, now, want_state, want_actions) in table {
            let event = LkgEvaluated {
                held_back,
                hash,
                assessment,
                now: secs(now),
                period: PERIOD,
            };
            assert_eq!(state.step(event), (want_state, want_actions), "{name}");
        }
    }
}
