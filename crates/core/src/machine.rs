//! The anchor of one component on one node (`kube-anchor run`) as one pure machine: the version
//! written and its trial ([`Version`]), the judgement of a last-known-good version kept in place of
//! a bad one ([`LkgCheck`]) and the rollout turn ([`Turn`]), composed in the order a sync and an
//! evaluation take them.
//!
//! `step(input) -> effects`: an input is what an executor observed (the inputs' version and the
//! node's ledger at a sync, the Lease's answer, what the node shows of the version written at an
//! evaluation, an effect's outcome); an effect is what it must do (write a version, ask for or give
//! back the turn, record a promotion or a rollback, say why it is not Ready). No field is a handle
//! and nothing reads a clock: the fleet simulator (`kube-anchor-sim`) runs this machine in a
//! modelled control plane, node by node.

use std::collections::BTreeSet;
use std::time::{Duration, Instant, SystemTime};

use crate::ledger::Ledger;
use crate::lifecycle::{LkgAction, LkgCheck, LkgEvaluated, LkgFailure, Version, VersionAction, VersionEvent};
use crate::margin::{Margin, MarginFacts};
use crate::rollout;
use crate::skew::SkewFacts;
use crate::trial::{Assessment, ClientAnswer, VersionView, assess};
use crate::turn::{Answer, Turn, TurnAction, TurnEvent, Waiting};

/// What does not change while the anchor runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub component: String,
    pub trial_period: Duration,
    pub crash_loop_threshold: u32,
    /// An anchor pod with an API: replacing what the node runs waits for the rollout turn.
    pub in_fleet: bool,
    /// The component's clients are asked (`--client-checks`).
    pub client_checks: bool,
    /// Replacing the version the node runs restarts an etcd member or a kube-apiserver: the
    /// cluster must afford losing it for a while ([`Effect::CheckMargin`]) before the turn is
    /// asked for.
    pub restart_needs_margin: bool,
    /// A new version waits for the version skew policy on this node ([`crate::skew`]) before
    /// the turn is asked for ([`Effect::CheckMargin`] brings the facts).
    pub skew_gate: bool,
    /// A new version waits until its images are on the node (pulled through the container
    /// runtime) before the turn is asked for ([`Effect::CheckMargin`] brings the facts).
    pub image_gate: bool,
}

/// The anchor's state between steps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Anchor {
    pub settings: Settings,
    pub turn: Turn,
    pub version: Version,
    pub lkg: LkgCheck,
    /// The version this process last accepted from its inputs.
    pub accepted: Option<String>,
    /// The version written on the node (what is judged).
    pub written: Option<String>,
    /// The last evaluation found `written` converged.
    pub converged: bool,
    /// The clients the version on the node served outside a trial ([`Ledger::clients_served`]):
    /// those a version on trial must go on serving. `None`: no record yet.
    pub clients_served: Option<BTreeSet<String>>,
    /// The first sync has read [`Anchor::clients_served`] from the ledger.
    clients_read: bool,
    /// A [`Effect::Write`] not reported done yet.
    writing: Option<Writing>,
    /// The version last logged as going ahead where no margin can exist.
    no_margin_said: Option<String>,
    /// The waiting version the skew gate last held ([`Settings::skew_gate`]).
    skew_held: Option<String>,
    /// The last margin check held the waiting version for its images.
    images_held: bool,
    /// A first write's word from the rollout Lease.
    first_write: Option<FirstWriteGate>,
    /// Why an operator holds this anchor, as last seen (a sync or an evaluation).
    pub paused: Option<String>,
    /// Since when the runtime shows the version before the one written still running (the
    /// kubelet stopping it), and whether that was reported as stuck.
    previous_stopping: Option<(Duration, bool)>,
    /// A version the kubelet's pre-start step put back ([`Ledger::interrupted`]), held with
    /// last-known-good written in its place until the kubelet is seen replacing static pods.
    interrupted: Option<InterruptedHold>,
}

/// A version put back before the kubelet started (at `at`, as the ledger records it), and
/// whether the kubelet has been seen running last-known-good through an API server since
/// ([`crate::trial::kubelet_replaces_with`]): only then is it written again. Written before, a
/// kubelet that has reached no API server would never replace it should it fail (it deletes no
/// pod before all its sources are ready). It goes again on the turn held for it, so a restart
/// the cluster must afford is looked at first (`affords`), as before any turn is asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
struct InterruptedHold {
    version: String,
    at: String,
    last_known_good: String,
    kubelet_replaces: bool,
    affords: bool,
    /// Why the cluster cannot afford the restart yet, as last said.
    short: Option<String>,
}

impl InterruptedHold {
    /// The kubelet replaces static pods again, and the cluster has not yet been found to afford
    /// the restart of writing the version again.
    fn awaits_margin(&self) -> bool {
        self.kubelet_replaces && !self.affords
    }
}

/// How long the kubelet may take to stop the version before one written (a kube-apiserver uses
/// up its 30 s grace period) before the anchor says it is stuck: a kubelet that has not reached
/// an API server since it started stops no static pod (`kubelet_start`).
pub const PREVIOUS_STOPPING_LIMIT: Duration = Duration::from_secs(120);

/// Where a first write of a component on the node stands ([`rollout::first_write`]): it takes
/// no turn (it restarts nothing), but asks the Lease before it starts a version.
#[derive(Debug, Clone, PartialEq, Eq)]
enum FirstWriteGate {
    /// Waiting for the Lease's word on the version (why, for `/readyz`).
    Waiting(Waiting),
    /// This version may be written.
    Cleared(String),
}

/// The Lease's word on a first write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FirstWriteAnswer {
    /// No API to ask.
    NoLease,
    /// The Leases as read (or the error reading them: no word against the write).
    Lease {
        lease: String,
        word: Result<rollout::FirstWrite, String>,
    },
}

/// What a write asked for becomes once it is done.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Writing {
    version: String,
    last_known_good: bool,
    held_back: Option<String>,
}

/// What a sync pass sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncFacts<'a> {
    /// The version the inputs name (`None`: no inputs this pod may apply).
    pub desired: Option<&'a str>,
    /// The credentials check of the version to write (the inputs', or the one this process
    /// accepted), refused with its message.
    pub desired_refused: Option<String>,
    pub ledger: &'a Ledger,
    /// The last-known-good version at hand to write (its snapshot readable): the one the
    /// ledger names, or none.
    pub last_known_good: Option<&'a str>,
    /// A static pod kube-anchor did not write sits where the manifest goes.
    pub unrecorded_manifest: bool,
    /// An operator holds this anchor ([`crate::pause::Pause::describe`]): nothing is written.
    pub paused: Option<String>,
    pub now: Duration,
}

/// What an evaluation sees of the version written. `view.runtime_restarts` is filled in here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvaluateFacts {
    pub view: VersionView,
    /// `view.dependency_down` was looked at (it is only when there is something to excuse: see
    /// [`Effect::LookAtDependency`]).
    pub dependency_looked: bool,
    /// Why the last sync wrote nothing or failed (first in `/readyz`).
    pub input_error: Option<String>,
    /// Why this pod may not be Ready yet although its version runs (after a waiting turn).
    pub pending: Option<String>,
    /// An operator holds this anchor: nothing is judged, promoted or rolled back.
    pub paused: Option<String>,
    pub now: Duration,
}

// An input is built for one `step` and consumed there, never stored: its size costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input<'a> {
    Sync(SyncFacts<'a>),
    /// [`Effect::Write`] was done (`Ok`) or failed: nothing changes then, the next sync tries again.
    Written {
        done: bool,
        now: Duration,
    },
    /// The answer to [`Effect::RecoverTurn`]: whether the Lease names this node as its holder.
    Recovered {
        held_here: bool,
        ledger: &'a Ledger,
        instant: Instant,
    },
    /// [`Effect::GiveBackEarlierTurn`] was done.
    EarlierGivenBack,
    /// The rollout Lease's answer to asking for the waiting version's turn.
    Asked {
        answer: Answer,
        instant: Instant,
        wall: SystemTime,
    },
    /// The rollout Lease's word on a first write ([`Effect::AskFirstWrite`]).
    FirstWriteAsked {
        version: String,
        answer: FirstWriteAnswer,
    },
    Evaluate(EvaluateFacts),
    /// [`Effect::RollBack`] was done: `to` is written in place of the failed version.
    RolledBack {
        to: String,
        note: String,
    },
    /// [`Effect::RollBack`] found no last-known-good version to go back to: the failed version
    /// stays, on a trial started again.
    NoLastKnownGood {
        now: Duration,
    },
    /// After an evaluation's effects: the held turn reviewed against the ledger (while the API
    /// answers: a renewal missed meanwhile is no loss, no other node takes a turn over on a timer).
    Review {
        ledger: &'a Ledger,
        instant: Instant,
    },
    /// The answer to [`Effect::CheckMargin`]: the margin's facts (looked at only where
    /// [`Settings::restart_needs_margin`]) and the skew policy's (where [`Settings::skew_gate`]),
    /// and why the waiting version's images are not on the node yet (being pulled, or a pull
    /// failed; `None` once they are, or where the runtime cannot be asked): a restart waits for
    /// its images, so an image the node cannot pull stops nothing that runs.
    MarginChecked {
        facts: MarginFacts,
        skew: SkewFacts,
        images: Option<String>,
        instant: Instant,
        wall: SystemTime,
    },
    /// The answers to [`Effect::AskClients`].
    ClientsAsked {
        clients: Vec<crate::trial::ClientView>,
    },
    /// [`Effect::GiveBackTurn`] was done.
    GivenBack,
    /// [`Effect::RenewTurn`] was done.
    Renewed {
        instant: Instant,
    },
}

/// What is worth a log line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Note {
    /// `version` waits for this node's turn.
    Waiting { version: String },
    /// `version` is on trial.
    OnTrial { version: String },
    /// This node holds the turn an earlier process took for `version`, on trial: kept.
    Resumed { version: String },
    /// It is this node's turn to roll `version` out.
    TurnGiven { version: String, lease: String },
    /// Why the waiting version waits (it changed).
    NotYet { why: String },
    /// The waiting version waits because the cluster cannot afford its restart now (the
    /// reason changed): a Warning, since a member of the cluster is not healthy.
    NoMargin { why: String },
    /// `version` restarts the component where no margin can ever exist (a single etcd
    /// member): it goes ahead, judged by the node's own evidence.
    NoMarginCanExist { version: String, why: String },
    /// The waiting version would break the version skew policy on this node (the reason
    /// changed): a Warning, since the operator's order of upgrades is at fault.
    SkewHeld { why: String },
    /// The waiting version's images are not on the node yet (the reason changed).
    ImagesNotReady { why: String },
    /// The last-known-good version runs converged again.
    ConvergedAgain,
    /// The turn taken for `version` is given back after its failure though the last-known-good
    /// version it went back to fails too: the node runs nothing good, and other nodes may take
    /// the turn (an error: the node needs a look).
    TurnGivenUp { version: String },
    /// An operator holds the anchor (why, and how to let it go on).
    Paused { why: String },
    /// The hold was lifted.
    Unpaused,
    /// The version before `version` has been stopping for longer than
    /// [`PREVIOUS_STOPPING_LIMIT`]: the kubelet is not replacing the static pod (why and what to
    /// do).
    StillStopping { version: String, why: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Write `version`'s files (or repair them); then [`Input::Written`].
    Write {
        version: String,
    },
    /// The credentials of the inputs' version were refused: nothing written.
    Refused {
        reason: String,
    },
    /// Ask the Lease whether an earlier process on this node left it holding the turn; the
    /// answer comes back as [`Input::Recovered`].
    RecoverTurn,
    /// Give back a turn an earlier process held for nothing written here.
    GiveBackEarlierTurn,
    /// Ask the Lease for the turn of the waiting `version`; the answer comes back as
    /// [`Input::Asked`].
    AskTurn {
        version: String,
    },
    /// Ask the Lease, taking nothing, whether `version` may be written for the first time on
    /// the node; the answer comes back as [`Input::FirstWriteAsked`].
    AskFirstWrite {
        version: String,
    },
    /// Sync again now (the turn was given).
    Resync,
    /// Look whether a component this one needs is down, and evaluate again with what was found.
    LookAtDependency,
    /// Record in the ledger the clients the version on the node serves
    /// ([`Ledger::clients_served`]).
    RecordClientsServed {
        clients: BTreeSet<String>,
    },
    /// Look at what the rest of the cluster can afford before the waiting `version` restarts
    /// the component ([`Settings::restart_needs_margin`]), and what the version skew policy
    /// says of it beside the node's other components ([`Settings::skew_gate`]); the facts come
    /// back as [`Input::MarginChecked`].
    CheckMargin {
        version: String,
    },
    /// Ask the component's clients (of the version on the node, before a new one is written);
    /// the answers come back as [`Input::ClientsAsked`].
    AskClients,
    /// Record `version` as last-known-good.
    Promote {
        version: String,
    },
    /// Record `failed` as bad and write the last-known-good version in its place; then
    /// [`Input::RolledBack`], or [`Input::NoLastKnownGood`] when there is none to write.
    RollBack {
        failed: String,
        reason: String,
    },
    /// Give the turn back: recording the input revision as failed when `failed`; clearing a
    /// failure recorded for it when `ran` (the version the inputs describe runs converged here).
    GiveBackTurn {
        version: String,
        failed: bool,
        ran: bool,
    },
    RenewTurn,
    /// The last-known-good version fails too: an error for operators (a Warning Event).
    LkgFailing {
        note: String,
    },
    /// Record the last-known-good version's failure (`None`: clear it); `if_different`: only
    /// where the ledger's record names another hash.
    RecordLkgFailing {
        failing: Option<LkgFailure>,
        if_different: bool,
    },
    Log(Note),
    /// `/readyz`.
    Ready {
        ready: bool,
        reason: String,
    },
}

impl Anchor {
    pub fn new(settings: Settings) -> Self {
        Anchor {
            settings,
            turn: Turn::default(),
            version: Version::default(),
            lkg: LkgCheck::default(),
            accepted: None,
            written: None,
            converged: false,
            clients_served: None,
            clients_read: false,
            writing: None,
            no_margin_said: None,
            skew_held: None,
            images_held: false,
            first_write: None,
            paused: None,
            previous_stopping: None,
            interrupted: None,
        }
    }

    /// The version waiting for this node's turn.
    pub fn waiting(&self) -> Option<&str> {
        self.turn.waiting.as_ref().map(|w| w.version.as_str())
    }

    /// Whether the version waiting for its turn is held by the skew gate (the last margin check
    /// found it would break the version skew policy), rather than by the cluster's margin.
    pub fn skew_holds(&self) -> bool {
        self.turn.waiting.is_some() && self.skew_held.is_some()
    }

    /// Whether the version waiting for its turn is held for its images (the last margin check
    /// found them not on the node yet).
    pub fn images_hold(&self) -> bool {
        self.turn.waiting.is_some() && self.images_held
    }

    /// Whether a version waits for the rollout Lease: for this node's turn, for its word on a
    /// first write, or for the margin to write again a version put back before the kubelet
    /// started (the executor asks again every few seconds).
    pub fn waits_for_lease(&self) -> bool {
        self.turn.waiting.is_some()
            || matches!(self.first_write, Some(FirstWriteGate::Waiting(_)))
            || self
                .interrupted
                .as_ref()
                .is_some_and(|h| h.awaits_margin() && self.settings.restart_needs_margin)
    }

    /// Evaluated every trial tick while a version is on trial or not converged, or a turn is held.
    pub fn busy(&self) -> bool {
        self.version.trial().is_some() || (!self.converged && self.written.is_some()) || self.turn.holding().is_some()
    }

    /// Why what is written is the last-known-good version kept in place of the inputs' (and why
    /// that one fails too).
    pub fn held_back(&self) -> Option<String> {
        match (self.version.held_back(), self.lkg.failing()) {
            (Some(h), Some(failing)) => Some(format!("{failing}; {h}")),
            (h, _) => h.map(str::to_owned),
        }
    }

    pub fn step(&mut self, input: Input<'_>) -> Vec<Effect> {
        match input {
            Input::Sync(facts) => self.sync(facts),
            Input::ClientsAsked { clients } => {
                let served: BTreeSet<String> = clients
                    .into_iter()
                    .filter(|c| c.answer == ClientAnswer::Served)
                    .map(|c| c.client)
                    .collect();
                self.clients_served = Some(served.clone());
                vec![Effect::RecordClientsServed { clients: served }, Effect::Resync]
            }
            Input::Written { done, now } => {
                let Some(w) = self.writing.take().filter(|_| done) else {
                    return vec![];
                };
                let announce = self.step_version(VersionEvent::Written {
                    hash: &w.version,
                    last_known_good: w.last_known_good,
                    held_back: w.held_back,
                    now,
                });
                self.written = Some(w.version);
                announce
                    .into_iter()
                    .filter_map(|a| match a {
                        VersionAction::AnnounceTrial { hash } => Some(Effect::Log(Note::OnTrial { version: hash })),
                        _ => None,
                    })
                    .collect()
            }
            Input::Recovered {
                held_here,
                ledger,
                instant,
            } => {
                let accepted = self.accepted.clone();
                let event = if held_here {
                    TurnEvent::HeldHere {
                        ledger,
                        accepted: accepted.as_deref(),
                        now: instant,
                    }
                } else {
                    TurnEvent::NotHeldHere
                };
                self.step_turn(event)
                    .into_iter()
                    .filter_map(|a| match a {
                        TurnAction::GiveBackEarlier => Some(Effect::GiveBackEarlierTurn),
                        TurnAction::Resume { version } => Some(Effect::Log(Note::Resumed { version })),
                        _ => None,
                    })
                    .collect()
            }
            Input::EarlierGivenBack => {
                self.step_turn(TurnEvent::EarlierGivenBack);
                vec![]
            }
            Input::Asked { answer, instant, wall } => {
                let actions = self.step_turn(TurnEvent::Asked {
                    answer,
                    now: instant,
                    wall,
                });
                let mut effects = Vec::new();
                for action in actions {
                    match action {
                        // The turn is this node's: the sync that follows writes the version.
                        TurnAction::Go { version, lease } => {
                            effects.push(Effect::Log(Note::TurnGiven { version, lease }));
                            effects.push(Effect::Resync);
                        }
                        TurnAction::NotYet { why } => effects.push(Effect::Log(Note::NotYet { why })),
                        _ => {}
                    }
                }
                effects
            }
            Input::MarginChecked {
                facts,
                skew,
                images,
                instant,
                wall,
            } => {
                if self.turn.waiting.is_none()
                    && let Some(hold) = self.interrupted.as_mut().filter(|h| h.awaits_margin())
                {
                    return match facts.judge() {
                        Margin::Affords | Margin::CannotExist(_) => {
                            hold.affords = true;
                            hold.short = None;
                            vec![Effect::Resync]
                        }
                        Margin::Short(why) if hold.short.as_deref() == Some(why.as_str()) => vec![],
                        Margin::Short(why) => {
                            hold.short = Some(why.clone());
                            vec![Effect::Log(Note::NoMargin { why })]
                        }
                    };
                }
                let Some(version) = self.turn.waiting.as_ref().map(|w| w.version.clone()) else {
                    return vec![];
                };
                let skew_held = self
                    .settings
                    .skew_gate
                    .then(|| crate::skew::judge(&skew).err())
                    .flatten();
                self.skew_held = skew_held.is_some().then(|| version.clone());
                // The policy first (the operator's to fix), then the images (the node's).
                let images_held = images.filter(|_| skew_held.is_none());
                self.images_held = images_held.is_some();
                let verdict = match (skew_held.clone(), images_held.clone()) {
                    (Some(why), _) | (None, Some(why)) => Margin::Short(why),
                    (None, None) if self.settings.restart_needs_margin => facts.judge(),
                    (None, None) => Margin::Affords,
                };
                match verdict {
                    Margin::Affords => vec![Effect::AskTurn { version }],
                    Margin::CannotExist(why) => {
                        // Said once per version, not at every ask.
                        let said = self.no_margin_said.replace(version.clone());
                        let note = (said.as_deref() != Some(version.as_str())).then(|| {
                            Effect::Log(Note::NoMarginCanExist {
                                version: version.clone(),
                                why,
                            })
                        });
                        note.into_iter().chain([Effect::AskTurn { version }]).collect()
                    }
                    Margin::Short(why) => self
                        .step_turn(TurnEvent::Asked {
                            answer: Answer::NoMargin(why),
                            now: instant,
                            wall,
                        })
                        .into_iter()
                        .filter_map(|a| match a {
                            TurnAction::NotYet { why } if skew_held.is_some() => {
                                Some(Effect::Log(Note::SkewHeld { why }))
                            }
                            TurnAction::NotYet { why } if images_held.is_some() => {
                                Some(Effect::Log(Note::ImagesNotReady { why }))
                            }
                            TurnAction::NotYet { why } => Some(Effect::Log(Note::NoMargin { why })),
                            _ => None,
                        })
                        .collect(),
                }
            }
            Input::FirstWriteAsked { version, answer } => {
                let Some(FirstWriteGate::Waiting(w)) = &self.first_write else {
                    return vec![];
                };
                if w.version != version {
                    return vec![];
                }
                let component = &self.settings.component;
                let why = match answer {
                    // No word against it: a first write restarts nothing, and a node whose
                    // API is away (a bootstrap) must start its components.
                    FirstWriteAnswer::NoLease | FirstWriteAnswer::Lease { word: Err(_), .. } => None,
                    FirstWriteAnswer::Lease {
                        word: Ok(rollout::FirstWrite::Go),
                        ..
                    } => None,
                    FirstWriteAnswer::Lease {
                        lease,
                        word: Ok(rollout::FirstWrite::OnTrialElsewhere { by, .. }),
                    } => Some(format!(
                        "version {version} waits: {by} is trying a version of {component} on its turn (Lease {lease}); a first write here waits for that trial"
                    )),
                    FirstWriteAnswer::Lease {
                        lease,
                        word: Ok(rollout::FirstWrite::FailedElsewhere { node }),
                    } => Some(format!(
                        "version {version} waits: this input revision was rolled back on {node} (Lease {lease}); not starting it here until it runs on {node} (fix the values and helm upgrade, or kube-anchor retry on {node})"
                    )),
                };
                match why {
                    None => {
                        self.first_write = Some(FirstWriteGate::Cleared(version));
                        vec![Effect::Resync]
                    }
                    Some(why) if why == w.why => vec![],
                    Some(why) => {
                        self.first_write = Some(FirstWriteGate::Waiting(Waiting {
                            version,
                            why: why.clone(),
                        }));
                        vec![Effect::Log(Note::NotYet { why })]
                    }
                }
            }
            Input::Evaluate(facts) => self.evaluate(facts),
            Input::RolledBack { to, note } => {
                self.step_version(VersionEvent::RolledBack { note });
                self.written = Some(to);
                vec![]
            }
            Input::NoLastKnownGood { now } => {
                self.step_version(VersionEvent::NoLastKnownGood { now });
                vec![]
            }
            Input::Review { ledger, instant } => {
                // A held anchor neither gives the turn back nor gives it up: the other nodes wait
                // for it as for a trial.
                if self.paused.is_some() {
                    return match self.turn.holding() {
                        Some(h) if instant.saturating_duration_since(h.renewed) >= crate::turn::TURN_RENEW => {
                            vec![Effect::RenewTurn]
                        }
                        _ => vec![],
                    };
                }
                let written = self.written.clone();
                // A version put back before the kubelet started is still owed its trial here: the
                // turn taken for it is kept through the hold (given back, the next node would try
                // it before this one has judged it).
                let retry_owed = self.interrupted.as_ref().is_some_and(|hold| {
                    ledger.interrupted_version(&hold.version).is_some()
                        && written.as_deref() == Some(hold.last_known_good.as_str())
                        && self.accepted.as_deref() == Some(hold.version.as_str())
                        && self.turn.holding().is_some_and(|h| h.version == hold.version)
                });
                let runs = written.clone().filter(|_| self.converged && !retry_owed);
                let lkg_failing = self.lkg.failing().is_some();
                // The inputs' own version runs converged: their revision is proven here.
                let ran = runs.is_some() && runs == self.accepted;
                self.step_turn(TurnEvent::Review {
                    ledger,
                    written: written.as_deref(),
                    runs: runs.as_deref(),
                    lkg_failing,
                    now: instant,
                })
                .into_iter()
                .flat_map(|action| match action {
                    TurnAction::GiveBack { version, failed } => vec![Effect::GiveBackTurn {
                        version,
                        failed,
                        ran: ran && !failed,
                    }],
                    TurnAction::GiveUp { version } => vec![
                        Effect::Log(Note::TurnGivenUp {
                            version: version.clone(),
                        }),
                        Effect::GiveBackTurn {
                            version,
                            failed: true,
                            ran: false,
                        },
                    ],
                    TurnAction::Renew => vec![Effect::RenewTurn],
                    _ => vec![],
                })
                .collect()
            }
            Input::GivenBack => {
                self.step_turn(TurnEvent::GivenBack);
                vec![]
            }
            Input::Renewed { instant } => {
                self.step_turn(TurnEvent::Renewed { now: instant });
                vec![]
            }
        }
    }

    /// Takes the hold as last seen; the note when it starts or ends.
    fn see_pause(&mut self, paused: Option<String>) -> Option<Effect> {
        let was = std::mem::replace(&mut self.paused, paused);
        match (&was, &self.paused) {
            (None, Some(why)) => Some(Effect::Log(Note::Paused { why: why.clone() })),
            (Some(_), None) => Some(Effect::Log(Note::Unpaused)),
            _ => None,
        }
    }

    fn sync(&mut self, f: SyncFacts<'_>) -> Vec<Effect> {
        let note = self.see_pause(f.paused.clone());
        if self.paused.is_some() {
            return note.into_iter().collect();
        }
        let mut effects = self.sync_unpaused(f);
        effects.splice(0..0, note);
        effects
    }

    /// Why `desired`, put back by the kubelet's pre-start step with last-known-good written in
    /// its place, is not written again yet; `None` once the kubelet is seen replacing static pods
    /// (see [`InterruptedHold`]), or when it was not put back.
    fn hold_interrupted(&mut self, desired: &str, f: &SyncFacts<'_>) -> Option<String> {
        let Some(put_back) = f.ledger.interrupted_version(desired) else {
            self.interrupted = None;
            return None;
        };
        let lkg = f.last_known_good?;
        // Written again already (its second trial goes on), or another version since: a later
        // put-back is a hold of its own.
        if f.ledger.content_hash.as_deref() != Some(lkg) {
            self.interrupted = None;
            return None;
        }
        match &self.interrupted {
            Some(hold) if hold.version == desired && hold.at == put_back.at && hold.last_known_good == lkg => {
                if hold.kubelet_replaces {
                    return None;
                }
            }
            _ => {
                self.interrupted = Some(InterruptedHold {
                    version: desired.to_owned(),
                    at: put_back.at.clone(),
                    last_known_good: lkg.to_owned(),
                    kubelet_replaces: false,
                    affords: false,
                    short: None,
                });
            }
        }
        Some(format!(
            "version {desired} was put back to last-known-good {lkg} before the kubelet started ({}, no API server answering it); it is tried again once the kubelet runs {lkg} through an API server",
            put_back.at
        ))
    }

    /// While this process's own version cannot be written (refused, or held by the skew gate,
    /// possibly for long), it takes up the version on the node in place (no change on disk):
    /// a trial an earlier pod left running is judged to its end, and a turn held for it, or for
    /// a version since abandoned, goes back once the node runs a known-good version, instead of
    /// blocking every other rollout. `None` once taken up (or while a write is under way).
    fn take_up_on_node(&mut self, f: &SyncFacts<'_>, own: &str) -> Option<Effect> {
        let running =
            f.ledger.content_hash.clone().filter(|v| {
                v != own && self.written.as_deref() != Some(v.as_str()) && f.ledger.bad_version(v).is_none()
            })?;
        if self.writing.is_some() {
            return None;
        }
        self.writing = Some(Writing {
            version: running.clone(),
            last_known_good: f.ledger.last_known_good.as_deref() == Some(running.as_str()),
            held_back: None,
        });
        Some(Effect::Write { version: running })
    }

    fn sync_unpaused(&mut self, f: SyncFacts<'_>) -> Vec<Effect> {
        if !self.clients_read {
            self.clients_served = f.ledger.clients_served.clone();
            self.clients_read = true;
        }
        // As after every pass: an earlier process may have left the turn held.
        let recover = (self.settings.in_fleet && self.turn.needs_recovery()).then_some(Effect::RecoverTurn);
        let desired = match f.desired {
            Some(d) => {
                self.accepted = Some(d.to_owned());
                d.to_owned()
            }
            // Keep what this process accepted (drift is still repaired); after a restart only the
            // last-known-good version is at hand, and only if it is what the node runs.
            None => match (&self.accepted, f.last_known_good) {
                (Some(a), _) => a.clone(),
                (None, Some(lkg)) if f.ledger.content_hash.as_deref() == Some(lkg) => lkg.to_owned(),
                _ => return recover.into_iter().collect(),
            },
        };
        let interrupted = self.hold_interrupted(&desired, &f);
        let (target, held_back) = match (f.ledger.bad_version(&desired), f.last_known_good) {
            (Some(bad), Some(lkg)) => (
                lkg.to_owned(),
                Some(format!(
                    "the inputs are version {} which failed its trial at {} ({}); keeping last-known-good {lkg}",
                    bad.hash, bad.at, bad.reason
                )),
            ),
            (None, Some(lkg)) if interrupted.is_some() => (lkg.to_owned(), interrupted),
            _ => (desired, None),
        };
        // Before the rollout turn: a refused version takes no turn and goes no further.
        if held_back.is_none()
            && let Some(reason) = f.desired_refused.clone()
        {
            // Nothing to try again: the turn kept for it goes back once last-known-good runs.
            self.interrupted = None;
            // The version on the node is judged meanwhile (a trial an earlier pod left running).
            let take_up = self.take_up_on_node(&f, &target);
            return [Effect::Refused { reason }]
                .into_iter()
                .chain(take_up)
                .chain(recover)
                .collect();
        }
        // Replacing the version the node runs waits for this node's turn; a static pod
        // kube-anchor did not write (a kubeadm node taken over) counts as one.
        let on_node = f
            .ledger
            .content_hash
            .clone()
            .or_else(|| f.unrecorded_manifest.then(|| "an unrecorded manifest".to_owned()));
        // A first write takes no turn but asks the Lease's word (a revision rolled back or on
        // trial elsewhere is not started here).
        if self.settings.in_fleet && on_node.is_none() && held_back.is_none() {
            match &self.first_write {
                Some(FirstWriteGate::Cleared(v)) if *v == target => {}
                Some(FirstWriteGate::Waiting(w)) if w.version == target => {
                    return [Effect::AskFirstWrite { version: target }]
                        .into_iter()
                        .chain(recover)
                        .collect();
                }
                _ => {
                    self.first_write = Some(FirstWriteGate::Waiting(Waiting {
                        version: target.clone(),
                        why: format!("version {target} waits for the rollout Lease's word on a first write"),
                    }));
                    return [Effect::AskFirstWrite { version: target }]
                        .into_iter()
                        .chain(recover)
                        .collect();
                }
            }
        }
        let needed = self.settings.in_fleet
            && rollout::needs_turn(on_node.as_deref(), &target, f.ledger.last_known_good.as_deref());
        let mut effects: Vec<Effect> = self
            .step_turn(TurnEvent::Gate {
                version: &target,
                needed,
            })
            .into_iter()
            .filter_map(|a| match a {
                TurnAction::AnnounceWaiting { version } => Some(Effect::Log(Note::Waiting { version })),
                _ => None,
            })
            .collect();
        if let Some(w) = &self.turn.waiting {
            // A restart the cluster must afford is looked at before the Lease is asked: a turn
            // taken is a turn another node cannot have.
            let version = w.version.clone();
            // A version the skew gate holds may wait for long (until the operator upgrades in
            // order): meanwhile this process takes up the version on the node in place (no
            // change on disk), so a trial left running by an earlier pod ends, and a turn held
            // for it, or for a version since abandoned, goes back once the node runs a
            // known-good version, instead of blocking every other rollout.
            if self.skew_held.as_deref() == Some(version.as_str()) {
                effects.extend(self.take_up_on_node(&f, &version));
            }
            let ask = if self.settings.restart_needs_margin || self.settings.skew_gate || self.settings.image_gate {
                Effect::CheckMargin { version }
            } else {
                Effect::AskTurn { version }
            };
            effects.extend(recover);
            effects.push(ask);
            return effects;
        }
        // A version put back before the kubelet started goes again on the turn kept for it: the
        // restart is looked at first, as before a turn is asked for.
        if self.settings.restart_needs_margin
            && let Some(hold) = &self.interrupted
            && hold.version == target
            && hold.awaits_margin()
        {
            effects.push(Effect::CheckMargin { version: target });
            effects.extend(recover);
            return effects;
        }
        // A new version is judged by the clients the one on the node serves: with no record of
        // them yet (a push that reaches an anchor pod before its first evaluation), they are
        // asked first.
        let replaces = held_back.is_none() && on_node.as_deref().is_some_and(|v| v != target);
        if replaces && self.settings.client_checks && self.clients_served.is_none() {
            effects.push(Effect::AskClients);
            effects.extend(recover);
            return effects;
        }
        self.writing = Some(Writing {
            version: target.clone(),
            last_known_good: f.ledger.last_known_good.as_deref() == Some(target.as_str()),
            held_back,
        });
        effects.push(Effect::Write { version: target });
        effects.extend(recover);
        effects
    }

    fn evaluate(&mut self, mut f: EvaluateFacts) -> Vec<Effect> {
        let was = self.paused.clone();
        let note = self.see_pause(f.paused.take());
        if let Some(why) = &self.paused {
            return note
                .into_iter()
                .chain([Effect::Ready {
                    ready: false,
                    reason: why.clone(),
                }])
                .collect();
        }
        let mut effects = self.evaluate_unpaused(f);
        if effects == [Effect::LookAtDependency] {
            // Asked again with the dependency looked at: the note goes with that answer.
            self.paused = was;
            return effects;
        }
        effects.splice(0..0, note);
        effects
    }

    fn evaluate_unpaused(&mut self, f: EvaluateFacts) -> Vec<Effect> {
        let Some(written) = self.written.clone() else {
            let first_write = match &self.first_write {
                Some(FirstWriteGate::Waiting(w)) => Some(w.why.clone()),
                _ => None,
            };
            let reason = f
                .input_error
                .or_else(|| self.turn.waiting.as_ref().map(|w| w.why.clone()))
                .or(first_write)
                .or(f.pending)
                .unwrap_or_else(|| "nothing written yet".into());
            return vec![Effect::Ready { ready: false, reason }];
        };
        let mut view = f.view;
        let on_trial = self.version.trial().is_some();
        if on_trial && let Some(served) = &self.clients_served {
            for client in &mut view.clients {
                client.served_before = served.contains(&client.client);
            }
        }
        // Restarts are a trial's evidence, and only those it saw.
        match self.version.trial_mut().or(self.lkg.check_mut()) {
            Some(trial) => {
                if view.dependency_down.is_some() {
                    trial.forget_restarts_before();
                }
                trial.restarts_in_trial(&mut view.mirror);
                view.runtime_restarts = trial.runtime_restarts(view.runtime.as_ref());
            }
            None => {
                if let Some(mirror) = view.mirror.as_mut() {
                    mirror.forget_restarts();
                }
            }
        }
        // A refused client counts only once the version has run converged by its own sources
        // for the reconnect grace.
        if let Some(trial) = self.version.trial_mut() {
            if trial.first_converged.is_none()
                && crate::trial::runs_on_its_own(&view, &written, self.settings.crash_loop_threshold)
            {
                trial.first_converged = Some(f.now);
            }
            view.clients_reconnecting = trial
                .first_converged
                .is_none_or(|at| f.now < at + crate::trial::CLIENT_RECONNECT_GRACE);
        }
        let assessment = assess(&view, &written, self.settings.crash_loop_threshold);
        // The components it needs are looked at when there is something to excuse, and all
        // through a trial (restarts while one is down are not the version's).
        let to_excuse = !matches!(assessment, Assessment::Converged | Assessment::Unknown(_));
        if !f.dependency_looked && (to_excuse || on_trial) {
            return vec![Effect::LookAtDependency];
        }
        let mut effects = Vec::new();
        if !on_trial && self.settings.client_checks {
            // Served adds a client, refused takes it away; no answer (it may be restarting) leaves
            // it as it was. The first evaluation makes the record.
            let before = self.clients_served.clone();
            let served = self.clients_served.get_or_insert_default();
            for client in &view.clients {
                match client.answer {
                    ClientAnswer::Served => served.insert(client.client.clone()),
                    ClientAnswer::Refused(_) => served.remove(&client.client),
                    ClientAnswer::NoAnswer(_) => false,
                };
            }
            if before.as_ref() != Some(served) {
                effects.push(Effect::RecordClientsServed {
                    clients: served.clone(),
                });
            }
        }
        let stuck = self.see_previous_stopping(&view, &written, f.now, &mut effects);
        let mut rolled_back = false;
        for action in self.step_version(VersionEvent::Assessed {
            assessment: &assessment,
            now: f.now,
            period: self.settings.trial_period,
        }) {
            match action {
                VersionAction::Promote => effects.push(Effect::Promote {
                    version: written.clone(),
                }),
                VersionAction::RollBack { reason } => {
                    effects.push(Effect::RollBack {
                        failed: written.clone(),
                        reason,
                    });
                    rolled_back = true;
                }
                VersionAction::AnnounceTrial { .. } => {} // only when written
            }
        }
        // What was assessed is the version rolled back, not the last-known-good one written in
        // its place: that one is judged from the next evaluation on, by its own hash.
        if !rolled_back {
            let (lkg, actions) = std::mem::take(&mut self.lkg).step(LkgEvaluated {
                held_back: self.version.held_back().is_some(),
                hash: &written,
                assessment: &assessment,
                now: f.now,
                period: self.settings.trial_period,
            });
            self.lkg = lkg;
            for action in actions {
                effects.push(match action {
                    LkgAction::Report { note } => Effect::LkgFailing { note },
                    LkgAction::Record { failing, if_different } => Effect::RecordLkgFailing { failing, if_different },
                    LkgAction::ConvergedAgain => Effect::Log(Note::ConvergedAgain),
                });
            }
        }
        self.converged = assessment == Assessment::Converged;
        // The kubelet runs last-known-good through an API server: it replaces static pods again,
        // and the version put back before it started is written again.
        if let Some(hold) = self.interrupted.as_mut()
            && !hold.kubelet_replaces
            && hold.last_known_good == written
            && assessment == Assessment::Converged
            && crate::trial::kubelet_replaces_with(&view, &written, self.settings.crash_loop_threshold)
        {
            hold.kubelet_replaces = true;
            effects.push(Effect::Resync);
        }
        let reason = f
            .input_error
            .or_else(|| self.turn.waiting.as_ref().map(|w| w.why.clone()))
            .or(f.pending)
            .or_else(|| self.interrupted.as_ref().and_then(|h| h.short.clone()))
            .or_else(|| self.held_back())
            .or(stuck)
            .or_else(|| assessment.reason().map(str::to_owned));
        effects.push(Effect::Ready {
            ready: reason.is_none(),
            reason: reason.unwrap_or_default(),
        });
        effects
    }

    /// Keeps the clock of the previous version stopping (as the runtime shows it); past
    /// [`PREVIOUS_STOPPING_LIMIT`] the reason for `/readyz`, reported once as a note.
    fn see_previous_stopping(
        &mut self,
        view: &VersionView,
        written: &str,
        now: Duration,
        effects: &mut Vec<Effect>,
    ) -> Option<String> {
        let stopping = view.runtime.as_ref().is_some_and(|r| {
            matches!(
                crate::runtime::judge(r, written, view.runtime_restarts, self.settings.crash_loop_threshold),
                crate::runtime::Local::PreviousStopping(_)
            )
        });
        if !stopping {
            self.previous_stopping = None;
            return None;
        }
        let (since, reported) = self.previous_stopping.get_or_insert((now, false));
        let for_ = now.saturating_sub(*since);
        if for_ < PREVIOUS_STOPPING_LIMIT {
            return None;
        }
        let why = format!(
            "the kubelet has been stopping the version before {written} for {}: a kubelet that has not reached an API \
             server since it started stops and replaces no static pod. Install the kubelet's pre-start step \
             (`kube-anchor kubelet-pre-start --install`, then `systemctl daemon-reload`) and restart the kubelet: it \
             puts last-known-good back first; or see README, \"After a reboot, or a kubelet restart, during a trial\"",
            humantime::format_duration(Duration::from_secs(for_.as_secs()))
        );
        if !*reported {
            *reported = true;
            effects.push(Effect::Log(Note::StillStopping {
                version: written.to_owned(),
                why: why.clone(),
            }));
        }
        Some(why)
    }

    fn step_turn(&mut self, event: TurnEvent<'_>) -> Vec<TurnAction> {
        let (turn, actions) = std::mem::take(&mut self.turn).step(event);
        self.turn = turn;
        actions
    }

    fn step_version(&mut self, event: VersionEvent<'_>) -> Vec<VersionAction> {
        let (version, actions) = std::mem::take(&mut self.version).step(event);
        self.version = version;
        actions
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::LeaseAnswer;
    use crate::trial::{ClientAnswer, MirrorPod};

    const PERIOD: Duration = Duration::from_secs(300);

    fn anchor() -> Anchor {
        Anchor::new(Settings {
            component: "kube-apiserver".into(),
            trial_period: PERIOD,
            crash_loop_threshold: 3,
            in_fleet: true,
            client_checks: false,
            restart_needs_margin: false,
            skew_gate: false,
            image_gate: false,
        })
    }

    /// An anchor with `--client-checks`.
    fn anchor_with_clients() -> Anchor {
        let mut a = anchor();
        a.settings.client_checks = true;
        a
    }

    fn ledger(on_node: Option<&str>, lkg: Option<&str>) -> Ledger {
        let mut ledger = Ledger::new("kube-apiserver");
        ledger.content_hash = on_node.map(str::to_owned);
        ledger.last_known_good = lkg.map(str::to_owned);
        ledger
    }

    /// A sync whose write (if any) is done.
    /// A sync, its write done; a first write cleared by the Lease (its gate has a test of its own).
    fn synced(a: &mut Anchor, desired: &str, ledger: &Ledger, s: u64) -> Vec<Effect> {
        let mut effects = a.step(sync(desired, ledger, s));
        if let Some(version) = effects.iter().find_map(|e| match e {
            Effect::AskFirstWrite { version } => Some(version.clone()),
            _ => None,
        }) {
            let answer = FirstWriteAnswer::Lease {
                lease: "kube-anchor-control-plane".into(),
                word: Ok(rollout::FirstWrite::Go),
            };
            assert_eq!(a.step(Input::FirstWriteAsked { version, answer }), vec![Effect::Resync]);
            effects = a.step(sync(desired, ledger, s));
        }
        if effects.iter().any(|e| matches!(e, Effect::Write { .. })) {
            effects.extend(a.step(Input::Written {
                done: true,
                now: Duration::from_secs(s),
            }));
        }
        effects
    }

    fn sync<'a>(desired: &'a str, ledger: &'a Ledger, s: u64) -> Input<'a> {
        Input::Sync(SyncFacts {
            desired: Some(desired),
            desired_refused: None,
            ledger,
            last_known_good: ledger.last_known_good.as_deref(),
            unrecorded_manifest: false,
            paused: None,
            now: Duration::from_secs(s),
        })
    }

    fn running(hash: &str, restarts: u32) -> VersionView {
        VersionView {
            api_configured: true,
            mirror: Some(MirrorPod::Present {
                hash: Some(hash.into()),
                phase: Some("Running".into()),
                ready: true,
                restarts,
            }),
            health: Some(Ok(())),
            runtime: None,
            runtime_restarts: 0,
            dependency_down: None,
            clients: Vec::new(),
            clients_reconnecting: false,
        }
    }

    fn evaluate(view: VersionView, s: u64) -> Input<'static> {
        Input::Evaluate(EvaluateFacts {
            view,
            dependency_looked: true,
            input_error: None,
            pending: None,
            paused: None,
            now: Duration::from_secs(s),
        })
    }

    fn review(ledger: &Ledger, t0: Instant, s: u64) -> Input<'_> {
        Input::Review {
            ledger,
            instant: t0 + Duration::from_secs(s),
        }
    }

    fn asked(turn: LeaseAnswer, t0: Instant) -> Input<'static> {
        Input::Asked {
            answer: Answer::Lease {
                lease: "kube-anchor-kube-apiserver".into(),
                turn: Ok(turn),
            },
            instant: t0,
            wall: SystemTime::UNIX_EPOCH,
        }
    }

    fn ready(effects: &[Effect]) -> Option<(bool, String)> {
        effects.iter().find_map(|e| match e {
            Effect::Ready { ready, reason } => Some((*ready, reason.clone())),
            _ => None,
        })
    }

    fn etcd_member(id: u64, name: &str) -> crate::membership::Member {
        crate::membership::Member {
            id,
            name: name.into(),
            peer_urls: vec![format!("https://{name}:2380")],
            client_urls: vec![],
            is_learner: false,
        }
    }

    /// cp-1's margin among three voters, of which those `answering` (by ID) say they are healthy
    /// and caught up.
    fn three_voters_answering(answering: &[u64]) -> MarginFacts {
        use crate::membership::{Me, MemberList, PeerStatus};
        MarginFacts::Etcd {
            me: Me {
                name: "cp-1".into(),
                peer_url: "https://cp-1:2380".into(),
            },
            observed: MemberList::Members(vec![
                etcd_member(1, "cp-1"),
                etcd_member(2, "cp-2"),
                etcd_member(3, "cp-3"),
            ]),
            peers: answering
                .iter()
                .map(|&id| {
                    (
                        id,
                        PeerStatus {
                            raft_applied_index: 100,
                            healthy: true,
                        },
                    )
                })
                .collect(),
        }
    }

    fn margin_checked(facts: MarginFacts, t0: Instant) -> Input<'static> {
        Input::MarginChecked {
            facts,
            skew: SkewFacts::default(),
            images: None,
            instant: t0,
            wall: SystemTime::UNIX_EPOCH,
        }
    }

    /// The runtime shows the version before the one written still running: the kubelet stopping
    /// it is no evidence either way, but past [`PREVIOUS_STOPPING_LIMIT`] the anchor says the
    /// kubelet is not replacing the pod and what to do, once as a note, then in `/readyz`.
    #[test]
    fn a_previous_version_stopping_for_too_long_is_reported_with_what_to_do() {
        use crate::runtime::{ContainerState, LocalContainer, LocalPod, RuntimeView};
        let mut a = anchor();
        synced(&mut a, "A", &ledger(None, None), 0);
        let old_still_running = |s: u64| {
            let mut view = running("A", 0);
            view.mirror = None;
            view.health = None;
            view.api_configured = false;
            view.runtime = Some(RuntimeView::Pod(LocalPod {
                sandbox_id: "s0".into(),
                content_hash: Some("OLD".into()),
                ready: true,
                created_at: 0,
                containers: vec![LocalContainer {
                    name: "a".into(),
                    attempt: 0,
                    state: ContainerState::Running,
                    started_at: Some(0),
                    finished_at: None,
                    exit_code: None,
                    reason: None,
                }],
            }));
            evaluate(view, s)
        };
        let effects = a.step(old_still_running(10));
        assert!(!ready(&effects).unwrap().1.contains("pre-start"), "{effects:?}");
        let effects = a.step(old_still_running(10 + PREVIOUS_STOPPING_LIMIT.as_secs()));
        let (is_ready, why) = ready(&effects).unwrap();
        assert!(!is_ready && why.contains("kubelet-pre-start --install"), "{why}");
        assert!(why.contains("2m"), "{why}");
        let notes = |e: &[Effect]| {
            e.iter()
                .filter(|e| matches!(e, Effect::Log(Note::StillStopping { .. })))
                .count()
        };
        assert_eq!(notes(&effects), 1);
        let effects = a.step(old_still_running(200));
        assert_eq!(notes(&effects), 0, "reported once");
        assert!(ready(&effects).unwrap().1.contains("pre-start"));
        assert!(a.version.trial().is_some(), "no verdict on a version that never ran");
        // Replaced at last: the clock stops.
        let effects = a.step(evaluate(running("A", 0), 210));
        assert!(!ready(&effects).unwrap().1.contains("pre-start"), "{effects:?}");
    }

    #[test]
    fn a_first_version_is_written_without_a_turn_and_promoted_after_its_trial() {
        let mut a = anchor();
        let fresh = ledger(None, None);
        let effects = synced(&mut a, "A", &fresh, 0);
        assert_eq!(effects[0], Effect::Write { version: "A".into() });
        assert!(a.version.trial().is_some(), "on trial");
        let effects = a.step(evaluate(running("A", 0), 100));
        assert_eq!(ready(&effects), Some((true, String::new())));
        assert!(!effects.iter().any(|e| matches!(e, Effect::Promote { .. })));
        let effects = a.step(evaluate(running("A", 0), 100 + PERIOD.as_secs()));
        assert!(
            effects.contains(&Effect::Promote { version: "A".into() }),
            "{effects:?}"
        );
    }

    #[test]
    fn an_upgrade_waits_for_the_turn_and_gives_it_back_once_promoted() {
        let t0 = Instant::now();
        let mut a = anchor();
        let on_node = ledger(Some("A"), Some("A"));
        let effects = synced(&mut a, "B", &on_node, 0);
        assert!(
            effects.contains(&Effect::AskTurn { version: "B".into() }),
            "{effects:?}"
        );
        assert!(
            !effects.iter().any(|e| matches!(e, Effect::Write { .. })),
            "nothing written before the turn"
        );
        let held = LeaseAnswer::Held {
            by: "cp-2".into(),
            rolling_out: vec!["etcd".into()],
            renewed: None,
        };
        assert!(
            matches!(&a.step(asked(held, t0))[..], [Effect::Log(Note::NotYet { why })] if why.contains("cp-2 is rolling out etcd")),
            "held by another node"
        );
        assert_eq!(a.waiting(), Some("B"));
        assert_eq!(a.step(asked(LeaseAnswer::Take, t0)).last(), Some(&Effect::Resync));
        let effects = synced(&mut a, "B", &on_node, 1);
        assert_eq!(effects[0], Effect::Write { version: "B".into() });
        a.step(evaluate(running("B", 0), 2));
        let effects = a.step(evaluate(running("B", 0), 2 + PERIOD.as_secs()));
        assert!(
            effects.contains(&Effect::Promote { version: "B".into() }),
            "{effects:?}"
        );
        // The executor records the promotion; the next evaluation gives the turn back.
        let promoted = ledger(Some("B"), Some("B"));
        a.step(evaluate(running("B", 0), 3 + PERIOD.as_secs()));
        let effects = a.step(review(&promoted, t0, 3 + PERIOD.as_secs()));
        assert!(
            effects.contains(&Effect::GiveBackTurn {
                version: "B".into(),
                failed: false,
                ran: true,
            }),
            "{effects:?}"
        );
    }

    #[test]
    fn a_version_whose_images_are_not_on_the_node_asks_for_no_turn() {
        let t0 = Instant::now();
        let mut a = anchor();
        a.settings.component = "kube-scheduler".into();
        a.settings.image_gate = true;
        let on_node = ledger(Some("A"), Some("A"));
        let effects = synced(&mut a, "B", &on_node, 0);
        assert!(
            effects.contains(&Effect::CheckMargin { version: "B".into() }),
            "{effects:?}"
        );
        let checked = |images: Option<&str>| Input::MarginChecked {
            facts: MarginFacts::Unknown("not asked".into()),
            skew: SkewFacts::default(),
            images: images.map(Into::into),
            instant: t0,
            wall: SystemTime::UNIX_EPOCH,
        };
        // The node cannot pull the new image: nothing asked, nothing written, /readyz says why.
        let why = "cannot pull image registry.example/kube-scheduler:v9 on this node: not found";
        let effects = a.step(checked(Some(why)));
        assert!(
            matches!(&effects[..], [Effect::Log(Note::ImagesNotReady { why: said })] if said.contains("cannot pull image")),
            "{effects:?}"
        );
        assert!(a.images_hold() && !a.skew_holds());
        let effects = a.step(evaluate(running("A", 0), 10));
        assert!(
            matches!(ready(&effects), Some((false, reason)) if reason.contains("cannot pull image")),
            "{effects:?}"
        );
        // Pulled: the turn is asked for.
        synced(&mut a, "B", &on_node, 20);
        assert_eq!(a.step(checked(None)), vec![Effect::AskTurn { version: "B".into() }]);
        assert!(!a.images_hold());
    }

    #[test]
    fn a_version_that_breaks_the_skew_policy_on_the_node_asks_for_no_turn() {
        use crate::skew::{Beside, Kind, Minor};
        let t0 = Instant::now();
        let mut a = anchor();
        a.settings.component = "kube-controller-manager".into();
        a.settings.skew_gate = true;
        let on_node = ledger(Some("A"), Some("A"));
        let effects = synced(&mut a, "B", &on_node, 0);
        assert!(
            effects.contains(&Effect::CheckMargin { version: "B".into() }),
            "{effects:?}"
        );
        let minor = |minor| Minor { major: 1, minor };
        let facts = |api: u32| SkewFacts {
            to: Some((Kind::ControllerManager, minor(37))),
            from: vec![minor(36)],
            beside: vec![Beside {
                kind: Kind::ApiServer,
                written: Some(minor(api)),
                last_known_good: Some(minor(api)),
            }],
        };
        let checked = |skew: SkewFacts| Input::MarginChecked {
            // Not looked at: a controller-manager's restart needs no margin.
            facts: MarginFacts::Unknown("not asked".into()),
            skew,
            images: None,
            instant: t0,
            wall: SystemTime::UNIX_EPOCH,
        };
        // kube-apiserver still at 1.36 here: held, said as skew, no turn asked.
        let effects = a.step(checked(facts(36)));
        assert!(
            matches!(&effects[..], [Effect::Log(Note::SkewHeld { why })] if why.contains("would be newer than kube-apiserver 1.36")),
            "{effects:?}"
        );
        // Held by the skew gate, not by the margin (the two metrics and alerts tell them apart).
        assert!(a.skew_holds());
        let effects = a.step(evaluate(running("A", 0), 10));
        assert!(
            matches!(ready(&effects), Some((false, why)) if why.contains("version skew")),
            "{effects:?}"
        );
        // kube-apiserver promoted at 1.37: the turn is asked for.
        let effects = synced(&mut a, "B", &on_node, 20);
        assert!(effects.contains(&Effect::CheckMargin { version: "B".into() }));
        assert_eq!(
            a.step(checked(facts(37))),
            vec![Effect::AskTurn { version: "B".into() }]
        );
        assert!(!a.skew_holds());
        // A pod that starts while the version on the node (A) is still on trial, and its own
        // version is held: A is taken up in place and judged, so a turn held for it can go back.
        let mut fresh = anchor();
        fresh.settings.component = "kube-controller-manager".into();
        fresh.settings.skew_gate = true;
        let on_trial = ledger(Some("A"), Some("Z"));
        synced(&mut fresh, "B", &on_trial, 0);
        let effects = fresh.step(checked(facts(36)));
        assert!(
            matches!(&effects[..], [Effect::Log(Note::SkewHeld { .. })]),
            "{effects:?}"
        );
        let effects = synced(&mut fresh, "B", &on_trial, 2);
        assert_eq!(effects[0], Effect::Write { version: "A".into() }, "{effects:?}");
        assert!(effects.contains(&Effect::CheckMargin { version: "B".into() }));
        fresh.step(Input::Written {
            done: true,
            now: Duration::from_secs(2),
        });
        assert_eq!(fresh.written.as_deref(), Some("A"));
        assert!(fresh.version.trial().is_some(), "A is on trial in this pod");
        // Judged once: the next sync writes nothing more.
        let effects = synced(&mut fresh, "B", &on_trial, 4);
        assert!(
            !effects.iter().any(|e| matches!(e, Effect::Write { .. })),
            "{effects:?}"
        );
        // The gate off: the same facts ask for the turn at once.
        let mut off = anchor();
        let effects = synced(&mut off, "B", &on_node, 0);
        assert!(
            effects.contains(&Effect::AskTurn { version: "B".into() }),
            "{effects:?}"
        );
    }

    #[test]
    fn an_etcd_upgrade_asks_for_the_turn_only_where_etcd_can_lose_the_member() {
        use crate::membership::{Me, MemberList};
        let t0 = Instant::now();
        let mut a = anchor();
        a.settings.component = "etcd".into();
        a.settings.restart_needs_margin = true;
        let on_node = ledger(Some("A"), Some("A"));
        let effects = synced(&mut a, "B", &on_node, 0);
        assert!(
            effects.contains(&Effect::CheckMargin { version: "B".into() }),
            "{effects:?}"
        );
        assert!(
            !effects
                .iter()
                .any(|e| matches!(e, Effect::AskTurn { .. } | Effect::Write { .. }))
        );
        // cp-3 is powered off: no turn asked, nothing written, and /readyz says why.
        let effects = a.step(margin_checked(three_voters_answering(&[2]), t0));
        assert!(
            matches!(&effects[..], [Effect::Log(Note::NoMargin { why })] if why.contains("cp-3 (3) does not answer")),
            "{effects:?}"
        );
        assert!(!a.skew_holds(), "a restart the cluster cannot afford is no skew hold");
        let effects = a.step(evaluate(running("A", 0), 10));
        assert!(
            matches!(ready(&effects), Some((false, why)) if why.contains("etcd cannot lose this member now")),
            "{effects:?}"
        );
        // The next sync looks again; cp-3 is back: the turn is asked for.
        let effects = synced(&mut a, "B", &on_node, 20);
        assert!(effects.contains(&Effect::CheckMargin { version: "B".into() }));
        assert_eq!(
            a.step(margin_checked(three_voters_answering(&[2, 3]), t0)),
            vec![Effect::AskTurn { version: "B".into() }]
        );
        let effects = a.step(asked(LeaseAnswer::Take, t0));
        assert!(effects.contains(&Effect::Resync), "{effects:?}");
        let effects = synced(&mut a, "B", &on_node, 30);
        assert_eq!(effects[0], Effect::Write { version: "B".into() });
        // A single member: no margin can ever exist; it goes ahead, said once.
        let mut single = anchor();
        single.settings.restart_needs_margin = true;
        synced(&mut single, "B", &on_node, 0);
        let alone = MarginFacts::Etcd {
            me: Me {
                name: "cp-1".into(),
                peer_url: "https://cp-1:2380".into(),
            },
            observed: MemberList::Members(vec![etcd_member(1, "cp-1")]),
            peers: Default::default(),
        };
        let effects = single.step(margin_checked(alone.clone(), t0));
        assert!(
            matches!(
                &effects[..],
                [Effect::Log(Note::NoMarginCanExist { .. }), Effect::AskTurn { .. }]
            ),
            "{effects:?}"
        );
        assert_eq!(
            single.step(margin_checked(alone, t0)),
            vec![Effect::AskTurn { version: "B".into() }]
        );
    }

    /// A runs as last-known-good; B, the inputs' version, took the turn and is on trial from 1 s.
    fn b_on_trial_with_the_turn(t0: Instant) -> (Anchor, Ledger) {
        let mut a = anchor();
        let on_node = ledger(Some("A"), Some("A"));
        synced(&mut a, "B", &on_node, 0);
        a.step(asked(LeaseAnswer::Take, t0));
        synced(&mut a, "B", &on_node, 1);
        a.step(evaluate(running("B", 0), 2));
        (a, on_node)
    }

    #[test]
    fn a_crash_loop_rolls_back_and_gives_the_turn_back_as_failed_once_last_known_good_runs() {
        let t0 = Instant::now();
        let (mut a, _) = b_on_trial_with_the_turn(t0);
        let effects = a.step(evaluate(running("B", 4), 40));
        assert!(
            matches!(&effects[0], Effect::RollBack { failed, .. } if failed == "B"),
            "{effects:?}"
        );
        // The executor marks B bad and writes A, then reviews the turn.
        let mut rolled_back = ledger(Some("A"), Some("A"));
        rolled_back.mark_bad(crate::ledger::BadVersion {
            hash: "B".into(),
            at: "2026-01-01T00:00:00Z".into(),
            reason: "crash loop".into(),
        });
        a.step(Input::RolledBack {
            to: "A".into(),
            note: "B failed".into(),
        });
        // A restarts as an upgrade does: the turn is kept until it runs.
        let effects = a.step(review(&rolled_back, t0, 40));
        assert!(
            !effects.iter().any(|e| matches!(e, Effect::GiveBackTurn { .. })),
            "{effects:?}"
        );
        assert_eq!(a.written.as_deref(), Some("A"));
        assert_eq!(a.version.held_back(), Some("B failed"));
        a.step(evaluate(running("A", 0), 45));
        let effects = a.step(review(&rolled_back, t0, 45));
        assert!(
            effects.contains(&Effect::GiveBackTurn {
                version: "B".into(),
                failed: true,
                ran: false,
            }),
            "{effects:?}"
        );
    }

    /// A kubelet restart with no API server answering: the pre-start step put B back to A and
    /// recorded it interrupted. The anchor, still running, keeps A and the turn until the kubelet
    /// reports A's mirror pod (it reaches an API server, so it replaces static pods again), then
    /// writes B again on the same turn. Written at once, a B that fails would never be replaced.
    #[test]
    fn a_version_put_back_before_the_kubelet_started_is_tried_again_once_the_kubelet_replaces_pods() {
        let t0 = Instant::now();
        let (mut a, _) = b_on_trial_with_the_turn(t0);
        let mut put_back = ledger(Some("A"), Some("A"));
        put_back.interrupted = Some(crate::ledger::Interrupted {
            hash: "B".into(),
            at: "2026-12-07T10:00:00Z".into(),
            reason: "on trial when the kubelet started".into(),
            boots: 1,
        });
        let effects = synced(&mut a, "B", &put_back, 10);
        assert_eq!(effects[0], Effect::Write { version: "A".into() }, "{effects:?}");
        let why = a.held_back().expect("A is held in B's place");
        assert!(why.contains("tried again once the kubelet runs A"), "{why}");
        // The orphaned B still runs, the API does not answer: A is kept, and so is the turn.
        let mut no_api = running("A", 0);
        no_api.mirror = None;
        let effects = a.step(evaluate(no_api, 12));
        assert!(!effects.contains(&Effect::Resync), "{effects:?}");
        assert_eq!(
            synced(&mut a, "B", &put_back, 13)[0],
            Effect::Write { version: "A".into() }
        );
        // A's mirror pod shows B still (the kubelet has not replaced it): not yet.
        let effects = a.step(evaluate(running("B", 0), 14));
        assert!(!effects.contains(&Effect::Resync), "{effects:?}");
        // A runs converged and the kubelet reports it: the turn is kept, and B goes again.
        let effects = a.step(evaluate(running("A", 0), 60));
        assert!(effects.contains(&Effect::Resync), "{effects:?}");
        let effects = a.step(review(&put_back, t0, 60));
        assert!(
            !effects.iter().any(|e| matches!(e, Effect::GiveBackTurn { .. })),
            "the turn is kept for B's second trial: {effects:?}"
        );
        let effects = synced(&mut a, "B", &put_back, 61);
        assert_eq!(effects[0], Effect::Write { version: "B".into() }, "{effects:?}");
        assert!(a.version.trial().is_some_and(|t| t.hash == "B"));
        // The same hold after a reboot: a new process, no evidence yet.
        let mut fresh = anchor();
        let effects = synced(&mut fresh, "B", &put_back, 0);
        assert!(effects.contains(&Effect::Write { version: "A".into() }), "{effects:?}");
        // A verdict ends the interruption (`Ledger::mark_bad`): B is held back as bad.
        put_back.mark_bad(crate::ledger::BadVersion {
            hash: "B".into(),
            at: "2026-12-07T10:05:00Z".into(),
            reason: "put back by a second reboot".into(),
        });
        assert_eq!(put_back.interrupted, None);
        synced(&mut fresh, "B", &put_back, 1);
        assert!(fresh.held_back().is_some_and(|w| w.contains("failed its trial")));
    }

    /// The version put back goes again on the turn kept for it, but only where the cluster
    /// affords the restart (an etcd member here: cp-3 silent, it waits); a later put-back (a
    /// second kubelet restart) is a hold of its own; a version since refused is not tried again,
    /// and the turn goes back.
    #[test]
    fn a_version_put_back_goes_again_only_with_margin_and_each_put_back_holds_anew() {
        let t0 = Instant::now();
        let (mut a, _) = b_on_trial_with_the_turn(t0);
        a.settings.restart_needs_margin = true;
        let put_back_at = |at: &str| {
            let mut l = ledger(Some("A"), Some("A"));
            l.interrupted = Some(crate::ledger::Interrupted {
                hash: "B".into(),
                at: at.into(),
                reason: "on trial when the kubelet started".into(),
                boots: 0,
            });
            l
        };
        let first = put_back_at("2026-12-07T10:00:00Z");
        assert_eq!(
            synced(&mut a, "B", &first, 10)[0],
            Effect::Write { version: "A".into() }
        );
        assert!(a.step(evaluate(running("A", 0), 60)).contains(&Effect::Resync));
        // The kubelet replaces pods again; cp-3's member is silent: nothing written.
        let effects = synced(&mut a, "B", &first, 61);
        assert!(
            effects.contains(&Effect::CheckMargin { version: "B".into() }),
            "{effects:?}"
        );
        assert!(
            !effects.iter().any(|e| matches!(e, Effect::Write { .. })),
            "{effects:?}"
        );
        assert!(a.waits_for_lease(), "looked at again every few seconds");
        let effects = a.step(margin_checked(three_voters_answering(&[2]), t0));
        assert!(
            matches!(&effects[..], [Effect::Log(Note::NoMargin { .. })]),
            "{effects:?}"
        );
        assert_eq!(
            a.step(margin_checked(three_voters_answering(&[2]), t0)),
            vec![],
            "said once"
        );
        let effects = a.step(evaluate(running("A", 0), 62));
        assert!(
            matches!(ready(&effects), Some((false, why)) if why.contains("etcd cannot lose this member now")),
            "{effects:?}"
        );
        assert!(
            !a.step(review(&first, t0, 62))
                .iter()
                .any(|e| matches!(e, Effect::GiveBackTurn { .. }))
        );
        // cp-3 is back: B goes again, on the turn kept for it.
        assert!(synced(&mut a, "B", &first, 70).contains(&Effect::CheckMargin { version: "B".into() }));
        assert_eq!(
            a.step(margin_checked(three_voters_answering(&[2, 3]), t0)),
            vec![Effect::Resync]
        );
        assert_eq!(
            synced(&mut a, "B", &first, 71)[0],
            Effect::Write { version: "B".into() }
        );
        // A second kubelet restart puts it back again: held anew, until the kubelet replaces pods.
        let second = put_back_at("2026-12-07T10:20:00Z");
        assert_eq!(
            synced(&mut a, "B", &second, 80)[0],
            Effect::Write { version: "A".into() }
        );
        assert!(a.held_back().is_some_and(|w| w.contains("10:20:00")));
        assert!(a.step(evaluate(running("A", 0), 90)).contains(&Effect::Resync));
        // B's credentials are refused now: nothing to try again, and the turn goes back.
        let effects = a.step(Input::Sync(SyncFacts {
            desired_refused: Some("serving certificate expired".into()),
            ..match sync("B", &second, 91) {
                Input::Sync(f) => f,
                _ => unreachable!(),
            }
        }));
        assert!(matches!(&effects[0], Effect::Refused { .. }), "{effects:?}");
        let effects = a.step(review(&second, t0, 92));
        assert!(
            effects
                .iter()
                .any(|e| matches!(e, Effect::GiveBackTurn { version, failed: false, .. } if version == "B")),
            "{effects:?}"
        );
    }

    #[test]
    fn a_paused_anchor_writes_judges_and_gives_back_nothing_until_resumed() {
        let t0 = Instant::now();
        let (mut a, on_node) = b_on_trial_with_the_turn(t0);
        let why = "paused on this node since 2026-12-07T03:00:00Z (restore)".to_owned();
        let paused = |view, s| {
            Input::Evaluate(EvaluateFacts {
                view,
                dependency_looked: true,
                input_error: None,
                pending: None,
                paused: Some(why.clone()),
                now: Duration::from_secs(s),
            })
        };
        // A crash loop that would roll B back: held, the anchor only says why it is not Ready.
        assert_eq!(
            a.step(paused(running("B", 4), 40)),
            vec![
                Effect::Log(Note::Paused { why: why.clone() }),
                Effect::Ready {
                    ready: false,
                    reason: why.clone()
                }
            ]
        );
        assert_eq!(
            a.step(paused(running("B", 9), 400)),
            vec![Effect::Ready {
                ready: false,
                reason: why.clone()
            }]
        );
        // A sync (a deleted manifest, a new version) writes nothing.
        let mut sync_facts = SyncFacts {
            desired: Some("C"),
            desired_refused: None,
            ledger: &on_node,
            last_known_good: Some("A"),
            unrecorded_manifest: false,
            paused: Some(why.clone()),
            now: Duration::from_secs(401),
        };
        assert_eq!(a.step(Input::Sync(sync_facts.clone())), vec![]);
        // The turn is kept (renewed), never given back or given up.
        let mut rolled_back = ledger(Some("B"), Some("A"));
        rolled_back.mark_bad(crate::ledger::BadVersion {
            hash: "B".into(),
            at: "2026-01-01T00:00:00Z".into(),
            reason: "crash loop".into(),
        });
        assert_eq!(a.step(review(&rolled_back, t0, 400)), vec![Effect::RenewTurn]);
        assert_eq!(a.turn.holding().map(|h| h.version.as_str()), Some("B"));
        // Resumed: the same crash loop is judged at once.
        sync_facts.paused = None;
        sync_facts.desired = Some("B");
        let effects = a.step(Input::Sync(sync_facts));
        assert_eq!(effects.first(), Some(&Effect::Log(Note::Unpaused)), "{effects:?}");
        let effects = a.step(evaluate(running("B", 12), 402));
        assert!(
            effects
                .iter()
                .any(|e| matches!(e, Effect::RollBack { failed, .. } if failed == "B")),
            "{effects:?}"
        );
    }

    #[test]
    fn a_first_write_asks_the_lease_and_starts_no_revision_rolled_back_elsewhere() {
        let mut a = anchor();
        let fresh = ledger(None, None);
        let effects = a.step(sync("B", &fresh, 0));
        assert!(
            effects.contains(&Effect::AskFirstWrite { version: "B".into() }),
            "{effects:?}"
        );
        assert!(
            !effects.iter().any(|e| matches!(e, Effect::Write { .. })),
            "{effects:?}"
        );
        let word = |word| Input::FirstWriteAsked {
            version: "B".into(),
            answer: FirstWriteAnswer::Lease {
                lease: "kube-anchor-control-plane".into(),
                word,
            },
        };
        let effects = a.step(word(Ok(rollout::FirstWrite::FailedElsewhere { node: "cp-1".into() })));
        assert!(
            matches!(&effects[..], [Effect::Log(Note::NotYet { why })] if why.contains("rolled back on cp-1")),
            "{effects:?}"
        );
        // Still nothing written, and `/readyz` says why.
        let effects = a.step(sync("B", &fresh, 1));
        assert_eq!(effects[0], Effect::AskFirstWrite { version: "B".into() }, "asked again");
        assert!(
            !effects.iter().any(|e| matches!(e, Effect::Write { .. })),
            "{effects:?}"
        );
        let effects = a.step(evaluate(running("B", 0), 2));
        assert!(
            matches!(&effects[..], [Effect::Ready { ready: false, reason }] if reason.contains("rolled back on cp-1")),
            "{effects:?}"
        );
        // Another node on trial with this component: still waits.
        let effects = a.step(word(Ok(rollout::FirstWrite::OnTrialElsewhere {
            by: "cp-2".into(),
            renewed: None,
        })));
        assert!(
            matches!(&effects[..], [Effect::Log(Note::NotYet { why })] if why.contains("cp-2 is trying")),
            "{effects:?}"
        );
        // The Lease has no word against it (or cannot be read): written.
        assert_eq!(a.step(word(Err("connection refused".into()))), vec![Effect::Resync]);
        assert_eq!(a.step(sync("B", &fresh, 3))[0], Effect::Write { version: "B".into() });

        // Without an API a first write goes ahead (a bootstrap).
        let mut b = anchor();
        b.step(sync("A", &fresh, 0));
        assert_eq!(
            b.step(Input::FirstWriteAsked {
                version: "A".into(),
                answer: FirstWriteAnswer::NoLease
            }),
            vec![Effect::Resync]
        );
        assert_eq!(b.step(sync("A", &fresh, 1))[0], Effect::Write { version: "A".into() });
    }

    #[test]
    fn a_refused_version_is_not_written_and_says_why() {
        let mut a = anchor();
        let fresh = ledger(None, None);
        let effects = a.step(Input::Sync(SyncFacts {
            desired: Some("A"),
            desired_refused: Some("tls.key does not match tls.crt".into()),
            ledger: &fresh,
            last_known_good: None,
            unrecorded_manifest: false,
            paused: None,
            now: Duration::ZERO,
        }));
        assert_eq!(
            effects,
            vec![
                Effect::Refused {
                    reason: "tls.key does not match tls.crt".into()
                },
                // Whether an earlier process held the turn is asked all the same.
                Effect::RecoverTurn
            ]
        );
        assert_eq!(a.written, None, "nothing written");
        let effects = a.step(Input::Evaluate(EvaluateFacts {
            view: running("A", 0),
            dependency_looked: false,
            input_error: Some("credentials refused, nothing written: tls.key does not match tls.crt".into()),
            pending: None,
            paused: None,
            now: Duration::from_secs(1),
        }));
        let (ready, reason) = ready(&effects).expect("a readiness");
        assert!(!ready);
        assert!(reason.contains("tls.key does not match"), "{reason}");
    }

    #[test]
    fn a_dependency_is_looked_at_through_a_trial_and_when_there_is_something_to_excuse() {
        let mut a = anchor();
        let settled = ledger(Some("A"), Some("A"));
        synced(&mut a, "A", &settled, 0);
        let mut facts = EvaluateFacts {
            view: running("A", 0),
            dependency_looked: false,
            input_error: None,
            pending: None,
            paused: None,
            now: Duration::from_secs(1),
        };
        let effects = a.step(Input::Evaluate(facts.clone()));
        assert!(
            !effects.contains(&Effect::LookAtDependency),
            "settled, converged: {effects:?}"
        );
        // On trial: restarts while a dependency is down are not the version's, so it is looked
        // at every time.
        let mut a = anchor();
        let fresh = ledger(None, None);
        synced(&mut a, "A", &fresh, 0);
        assert_eq!(a.step(Input::Evaluate(facts.clone())), vec![Effect::LookAtDependency]);
        facts.view.mirror = Some(MirrorPod::Absent);
        facts.view.health = Some(Err(crate::trial::HealthFailure::no_answer("connection refused")));
        assert_eq!(a.step(Input::Evaluate(facts.clone())), vec![Effect::LookAtDependency]);
        facts.dependency_looked = true;
        facts.view.dependency_down = Some("etcd does not run on this node".into());
        let effects = a.step(Input::Evaluate(facts));
        let (ready, reason) = ready(&effects).expect("a readiness");
        assert!(
            !ready && reason.contains("not evidence against the version"),
            "{reason}"
        );
    }

    fn with_client(mut view: VersionView, answer: ClientAnswer) -> VersionView {
        view.clients = vec![crate::trial::ClientView {
            client: "kube-apiserver (/readyz/etcd)".into(),
            answer,
            served_before: false,
        }];
        view
    }

    fn recorded(effects: &[Effect]) -> Option<Vec<String>> {
        effects.iter().find_map(|e| match e {
            Effect::RecordClientsServed { clients } => Some(clients.iter().cloned().collect()),
            _ => None,
        })
    }

    /// The clients the version on the node served are recorded in the ledger (once, when they
    /// change), and judge the next version in the anchor pod replaced for it.
    #[test]
    fn the_clients_served_outlive_the_process_and_judge_the_next_version() {
        let client = "kube-apiserver (/readyz/etcd)".to_owned();
        let mut a = anchor_with_clients();
        let mut on_node = ledger(Some("A"), Some("A"));
        synced(&mut a, "A", &on_node, 0);
        let served = a.step(evaluate(with_client(running("A", 0), ClientAnswer::Served), 1));
        assert_eq!(recorded(&served), Some(vec![client.clone()]));
        let again = a.step(evaluate(with_client(running("A", 0), ClientAnswer::Served), 2));
        assert_eq!(recorded(&again), None, "unchanged: no ledger write");
        let silent = ClientAnswer::NoAnswer("connection refused".into());
        let restarting = a.step(evaluate(with_client(running("A", 0), silent), 3));
        assert_eq!(recorded(&restarting), None, "no answer keeps it");
        on_node.clients_served = Some([client.clone()].into());

        // The pod replaced for version B: a new process.
        let mut b = anchor_with_clients();
        synced(&mut b, "B", &on_node, 10);
        assert_eq!(
            b.step(asked(LeaseAnswer::Take, Instant::now())).last(),
            Some(&Effect::Resync)
        );
        let effects = synced(&mut b, "B", &on_node, 10);
        assert!(effects.contains(&Effect::Write { version: "B".into() }), "{effects:?}");
        let refused = ClientAnswer::Refused("500: [-]etcd failed".into());
        let mut rolled_back = None;
        let grace = crate::trial::CLIENT_RECONNECT_GRACE.as_secs();
        for s in (11..=11 + grace + PERIOD.as_secs() + 5).step_by(5) {
            let effects = b.step(evaluate(with_client(running("B", 0), refused.clone()), s));
            assert!(
                !effects.iter().any(|e| matches!(e, Effect::Promote { .. })),
                "{effects:?}"
            );
            if let Some(reason) = effects.iter().find_map(|e| match e {
                Effect::RollBack { reason, .. } => Some(reason.clone()),
                _ => None,
            }) {
                rolled_back = Some(reason);
                break;
            }
        }
        let reason = rolled_back.expect("rolled back after the reconnect grace and a trial period");
        assert!(
            reason.contains("[-]etcd failed") && reason.contains("served before"),
            "{reason}"
        );

        // Outside a trial, a refusal takes it away.
        let gone = a.step(evaluate(with_client(running("A", 0), refused), 20));
        assert_eq!(recorded(&gone), Some(vec![]));
    }

    /// A push that reaches an anchor pod before its first evaluation (a new kube-anchor release
    /// and a new version in one `helm upgrade`): the clients of the version on the node are asked
    /// and recorded before the new one is written, so it is judged by them too.
    #[test]
    fn with_no_record_the_clients_are_asked_before_a_new_version_is_written() {
        let mut a = anchor_with_clients();
        let on_node = ledger(Some("A"), Some("A"));
        assert_eq!(on_node.clients_served, None);
        synced(&mut a, "B", &on_node, 0);
        assert_eq!(
            a.step(asked(LeaseAnswer::Take, Instant::now())).last(),
            Some(&Effect::Resync)
        );
        let effects = synced(&mut a, "B", &on_node, 1);
        assert!(effects.contains(&Effect::AskClients), "{effects:?}");
        assert!(
            !effects.iter().any(|e| matches!(e, Effect::Write { .. })),
            "{effects:?}"
        );
        let served = with_client(running("A", 0), ClientAnswer::Served).clients;
        let effects = a.step(Input::ClientsAsked { clients: served });
        assert_eq!(
            recorded(&effects),
            Some(vec!["kube-apiserver (/readyz/etcd)".to_owned()])
        );
        assert_eq!(effects.last(), Some(&Effect::Resync));
        let effects = synced(&mut a, "B", &on_node, 2);
        assert!(effects.contains(&Effect::Write { version: "B".into() }), "{effects:?}");
        // And the version on trial that refuses it is not converged.
        let refused = ClientAnswer::Refused("500: [-]etcd failed".into());
        a.step(evaluate(with_client(running("B", 0), refused.clone()), 3));
        assert!(!a.converged);
        // A first version on a node (nothing to replace) is written without asking.
        let mut fresh = anchor_with_clients();
        let effects = synced(&mut fresh, "A", &ledger(None, None), 0);
        assert!(effects.contains(&Effect::Write { version: "A".into() }), "{effects:?}");
    }

    /// A kube-apiserver on trial piles up restarts while its etcd has no leader: they are not
    /// the version's. Counting starts anew from the last look at which etcd was down.
    #[test]
    fn restarts_while_a_dependency_is_down_are_not_the_versions() {
        let mut a = anchor_with_clients();
        let fresh = ledger(None, None);
        synced(&mut a, "A", &fresh, 0);
        let mut down = running("A", 0);
        down.dependency_down = Some("etcd fails its health check (RAFT NO LEADER)".into());
        a.step(evaluate(running("A", 0), 1));
        for (s, restarts) in [(10, 2), (20, 6), (30, 9)] {
            let mut v = down.clone();
            v.mirror = running("A", restarts).mirror;
            a.step(evaluate(v, s));
        }
        let effects = a.step(evaluate(running("A", 9), 40));
        assert!(
            !effects.iter().any(|e| matches!(e, Effect::RollBack { .. })),
            "{effects:?}"
        );
        let effects = a.step(evaluate(running("A", 12), 50));
        assert!(
            !effects.iter().any(|e| matches!(e, Effect::RollBack { .. })),
            "3 since: {effects:?}"
        );
        let effects = a.step(evaluate(running("A", 13), 60));
        assert!(
            effects
                .iter()
                .any(|e| matches!(e, Effect::RollBack { reason, .. } if reason.contains("restarted 4 times"))),
            "{effects:?}"
        );
    }

    #[test]
    fn a_failed_write_changes_nothing_and_the_next_sync_writes_again() {
        let mut a = anchor();
        let on_node = ledger(Some("A"), Some("A"));
        // Settled on A; a repair pass writes A again.
        synced(&mut a, "A", &on_node, 0);
        assert_eq!(a.version, Version::Settled);
        let fresh = ledger(None, None);
        let mut b = anchor();
        b.step(sync("B", &fresh, 0));
        b.step(Input::FirstWriteAsked {
            version: "B".into(),
            answer: FirstWriteAnswer::NoLease,
        });
        let effects = b.step(sync("B", &fresh, 0));
        assert_eq!(effects[0], Effect::Write { version: "B".into() });
        b.step(Input::Written {
            done: false,
            now: Duration::ZERO,
        });
        assert_eq!(b.written, None, "nothing written");
        assert_eq!(b.version, Version::Settled, "nothing on trial");
        let effects = synced(&mut b, "B", &fresh, 1);
        assert_eq!(effects[0], Effect::Write { version: "B".into() });
        assert_eq!(b.written.as_deref(), Some("B"));
        assert!(b.version.trial().is_some());
    }
}
