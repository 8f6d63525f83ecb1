//! Is the static pod running what we wrote, and does a new version survive its trial? Pure.
//!
//! The model follows the Kubelet's dynamic-config last-known-good design: a newly written
//! content hash is on trial; it becomes last-known-good only after it has been observed
//! converged for the whole trial period; crash loops or a trial spent not converged fail it.
//! Time without evidence (API unreachable and no health URL) does not count: an outage is never
//! taken as proof that a version is bad.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

use crate::runtime::{self, Local, RuntimeView};
use crate::staticpod::CONTENT_HASH_ANNOTATION;

/// What the node shows about the version we wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionView {
    /// Whether there is an API client at all (no kubeconfig and not in a cluster: none).
    pub api_configured: bool,
    /// The mirror pod as the API shows it; `None` when the API cannot be asked.
    pub mirror: Option<MirrorPod>,
    /// The component's own health endpoint; `None` when none is configured.
    pub health: Option<Result<(), HealthFailure>>,
    /// The container runtime's view of the static pod; `None` when no runtime is configured.
    pub runtime: Option<RuntimeView>,
    /// Restarts of the version's containers within this trial, as the runtime counts them
    /// (see [`Trial::runtime_restarts`]); 0 outside a trial.
    pub runtime_restarts: u32,
    /// A component this one needs that kube-anchor runs on this node (`--depends-on`: etcd for
    /// kube-apiserver) and that does not run or does not answer its health URL, with what shows.
    pub dependency_down: Option<String>,
    /// The component's clients on this node, each asked as it asks (`--client-check`).
    pub clients: Vec<ClientView>,
    /// The version has run converged for less than [`CLIENT_RECONNECT_GRACE`] (filled in by the
    /// machine): a client it refuses may still be reconnecting.
    pub clients_reconnecting: bool,
}

/// How long a client may be refused after the version first runs converged before that counts
/// against it: a kube-apiserver's etcd client redials with gRPC's back-off (up to 120 s), and the
/// kubelet restarts a kube-apiserver whose `/livez` fails on etcd after 80 s. On one node, where
/// both restart, a good etcd version was once rolled back for its kube-apiserver's slow return.
pub const CLIENT_RECONNECT_GRACE: Duration = Duration::from_secs(180);

/// A client of the component on this node (kube-apiserver of etcd; the anchor's own token of
/// kube-apiserver; a controller's kubeconfig), asked the way it asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientView {
    pub client: String,
    pub answer: ClientAnswer,
    /// The version before this trial served it (filled in by the machine, from its last
    /// evaluation outside a trial): only a client that was served can be broken by a version.
    pub served_before: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientAnswer {
    /// Served: 2xx.
    Served,
    /// The component answered and did not serve it: 401, 403, a readiness check failing (a
    /// kube-apiserver's `[-]etcd`).
    Refused(String),
    /// No answer (refused connection, timeout): the client may be restarting.
    NoAnswer(String),
}

/// A health check that did not pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthFailure {
    /// The endpoint answered (an HTTP error status) rather than refusing, resetting or timing out.
    pub answered: bool,
    pub reason: String,
}

impl HealthFailure {
    pub fn answered(reason: impl Into<String>) -> Self {
        Self {
            answered: true,
            reason: reason.into(),
        }
    }

    pub fn no_answer(reason: impl Into<String>) -> Self {
        Self {
            answered: false,
            reason: reason.into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MirrorPod {
    /// The API answered: there is no mirror pod (yet).
    Absent,
    /// The API answered the anchor's own request with 401 or 403 (its token rejected, its
    /// RBAC gone): an API that answers, so no outage, yet no word on the version either.
    Refused(String),
    Present {
        hash: Option<String>,
        phase: Option<String>,
        ready: bool,
        restarts: u32,
    },
}

impl MirrorPod {
    /// The API answered with what it shows (the pod, or none): its word on the version. A
    /// refusal of the anchor gives none.
    pub fn is_word(&self) -> bool {
        matches!(self, MirrorPod::Absent | MirrorPod::Present { .. })
    }

    /// Restarts are evidence only within a trial; past it, a version is judged by Running and
    /// Ready alone (restarts from reboots and from components exiting while the API was down
    /// add up on a mirror pod for good).
    pub fn forget_restarts(&mut self) {
        if let MirrorPod::Present { restarts, .. } = self {
            *restarts = 0;
        }
    }

    pub fn from_pod(pod: &Pod) -> Self {
        let hash = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(CONTENT_HASH_ANNOTATION))
            .cloned();
        let status = pod.status.as_ref();
        let phase = crate::pod_status::phase(pod).map(str::to_owned);
        let ready = crate::pod_status::is_ready(pod);
        let restarts = status
            .and_then(|s| s.container_statuses.as_ref())
            .map(|cs| cs.iter().map(|c| c.restart_count.max(0) as u32).sum())
            .unwrap_or(0);
        MirrorPod::Present {
            hash,
            phase,
            ready,
            restarts,
        }
    }
}

/// The verdict on one observation of the version `hash`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Assessment {
    /// Converged: the mirror pod runs our hash Running and Ready, or the runtime runs every
    /// container of our hash's sandbox and the health URL answers; and the health URL (if any)
    /// answers 2xx.
    Converged,
    /// Evidence that it does not (yet) run as it should.
    NotConverged(String),
    /// Evidence of a crash loop: fail the trial now.
    CrashLooping(String),
    /// No evidence either way, and none expected (no API answers, a dependency is down, an
    /// alarm is raised): the trial's clocks pause.
    Unknown(String),
    /// No evidence although an API answers (a mirror pod that does not show what the runtime
    /// runs, a client that does not answer, etcd saying it lacks a leader): counted, and a
    /// trial period of it fails the version.
    Unproven(String),
}

impl Assessment {
    pub fn reason(&self) -> Option<&str> {
        match self {
            Assessment::Converged => None,
            Assessment::NotConverged(r)
            | Assessment::CrashLooping(r)
            | Assessment::Unknown(r)
            | Assessment::Unproven(r) => Some(r),
        }
    }
}

/// What the mirror pod says, before health and the runtime are weighed.
enum FromApi {
    Converged,
    NotConverged(String),
    CrashLooping(String),
    Unknown(String),
}

fn from_api(observation: &VersionView, hash: &str, crash_loop_threshold: u32) -> FromApi {
    match &observation.mirror {
        None if !observation.api_configured => FromApi::Unknown("no API client: cannot see the mirror pod".into()),
        None => FromApi::Unknown("API unreachable: cannot see the mirror pod".into()),
        Some(MirrorPod::Absent) => FromApi::NotConverged("no mirror pod yet".into()),
        // The API's refusal of the anchor's own credentials gives no word on the version: the
        // other sources judge, as with no API (a kube-apiserver that refuses the tokens it
        // accepted is caught by its client check, the anchor's own token).
        Some(MirrorPod::Refused(why)) => {
            FromApi::Unknown(format!("the API refuses the anchor ({why}): cannot see the mirror pod"))
        }
        Some(MirrorPod::Present {
            hash: running,
            phase,
            ready,
            restarts,
        }) => {
            if running.as_deref() != Some(hash) {
                let running = running.as_deref().unwrap_or("no hash");
                return FromApi::NotConverged(format!("mirror pod runs {running}, not {hash} yet"));
            }
            if *restarts > crash_loop_threshold {
                return FromApi::CrashLooping(format!(
                    "containers restarted {restarts} times (threshold {crash_loop_threshold})"
                ));
            }
            match (phase.as_deref(), ready) {
                (Some("Running"), true) => FromApi::Converged,
                (Some("Running"), false) => FromApi::NotConverged("mirror pod Running but not Ready".into()),
                (phase, _) => FromApi::NotConverged(format!("mirror pod phase {}", phase.unwrap_or("unknown"))),
            }
        }
    }
}

/// The API answered the mirror pod's watch with its word ([`MirrorPod::is_word`]); no API
/// gives none.
fn gives_word(observation: &VersionView) -> bool {
    observation.mirror.as_ref().is_some_and(MirrorPod::is_word)
}

/// etcd's `/health` fails on every member while an alarm is raised (`checkAlarms` in etcd's
/// etcdhttp: "ALARM NOSPACE", "ALARM CORRUPT").
fn is_alarm(failure: &HealthFailure) -> bool {
    failure.reason.contains("\"ALARM ")
}

/// A failing health check counts against a version only when it cannot be blamed on the rest of
/// the control plane: with the component saying it lacks etcd (or etcd saying it lacks a
/// leader), or with the API unreachable and the component answering with an error (a
/// controller-manager that lost its leader lease), a perfectly good version fails its health
/// check too. With the API unreachable, an endpoint that does not answer at all is evidence only
/// when the runtime shows what runs: a component that runs and never serves (on one node, the
/// API server on trial is the outage), or one that does not run.
fn health_failure_is_evidence(
    observation: &VersionView,
    local: Option<&Local>,
    failure: &HealthFailure,
) -> Result<(), String> {
    const QUORUM_SIGNS: [&str; 3] = ["[-]etcd", "NO LEADER", "etcdserver: request timed out"];
    let reason = &failure.reason;
    if QUORUM_SIGNS.iter().any(|sign| reason.contains(sign)) {
        return Err(format!("etcd unavailable ({reason}): not evidence against the version"));
    }
    // An alarm is the cluster's, raised before the version and cleared by hand (`etcdctl alarm
    // disarm`); the version pushed to fix it (a larger quota) must not fail for it.
    if is_alarm(failure) {
        return Err(format!(
            "etcd alarm raised ({reason}): cluster state, not evidence against the version"
        ));
    }
    if let Some(Local::PreviousStopping(what)) = local {
        return Err(format!("{what}; health check failing meanwhile ({reason})"));
    }
    if observation.api_configured && !gives_word(observation) {
        let runtime_sees = matches!(local, Some(Local::Running | Local::NotRunning(_)));
        if failure.answered || !runtime_sees {
            return Err(format!(
                "API unreachable, health check failing ({reason}): not evidence against the version"
            ));
        }
    }
    Ok(())
}

/// One set of rules for both sources; the table is in design.md ("Evidence"). A failure while a
/// component this one needs is down on the node (a kube-apiserver exits when its etcd is gone)
/// is no evidence against this one's version. A version that runs converged and refuses a client
/// it served before is not converged. Time without evidence while an API answers is
/// [`Assessment::Unproven`], unless a dependency is down or an alarm is raised.
pub fn assess(observation: &VersionView, hash: &str, crash_loop_threshold: u32) -> Assessment {
    let verdict = match assess_sources(observation, hash, crash_loop_threshold) {
        Assessment::Converged => weigh_clients(
            &observation.clients,
            observation.clients_reconnecting,
            gives_word(observation),
        ),
        verdict => verdict,
    };
    let verdict = match (verdict, &observation.dependency_down) {
        (Assessment::NotConverged(why) | Assessment::CrashLooping(why), Some(down)) => {
            return Assessment::Unknown(format!("{why}, while {down}: not evidence against the version"));
        }
        (verdict, _) => verdict,
    };
    let api_answers = gives_word(observation);
    let alarm = matches!(&observation.health, Some(Err(failure)) if is_alarm(failure));
    match verdict {
        Assessment::Unknown(why) if api_answers && observation.dependency_down.is_none() && !alarm => {
            Assessment::Unproven(why)
        }
        verdict => verdict,
    }
}

/// The version runs and serves by its own sources: the mirror pod shows it converged, or the
/// runtime runs every container of it and its health URL answers (a late mirror pod aside).
/// From then on its clients have [`CLIENT_RECONNECT_GRACE`] to come back.
pub fn runs_on_its_own(observation: &VersionView, hash: &str, crash_loop_threshold: u32) -> bool {
    let api_converged = matches!(from_api(observation, hash, crash_loop_threshold), FromApi::Converged);
    let health = &observation.health;
    let runtime_runs = observation
        .runtime
        .as_ref()
        .is_some_and(|view| runtime::judge(view, hash, 0, u32::MAX) == Local::Running);
    (api_converged && !matches!(health, Some(Err(_)))) || (runtime_runs && matches!(health, Some(Ok(()))))
}

/// A converged `hash` was started by a kubelet that replaces static pods again: it reports the
/// version's mirror pod Running and Ready, so it has reached an API server since it started (a
/// kubelet that reaches none replaces none). With no API client at all there is no mirror pod to
/// ask, and a kubelet with no API source has none to wait for: converged is enough.
pub fn kubelet_replaces_with(observation: &VersionView, hash: &str, crash_loop_threshold: u32) -> bool {
    !observation.api_configured || matches!(from_api(observation, hash, crash_loop_threshold), FromApi::Converged)
}

/// A converged version judged by the clients it served before: the first one it refuses makes it
/// not converged; one that does not answer leaves it without evidence.
fn weigh_clients(clients: &[ClientView], reconnecting: bool, api_answers: bool) -> Assessment {
    let before = || clients.iter().filter(|c| c.served_before);
    if let Some((client, why)) = before().find_map(|c| match &c.answer {
        ClientAnswer::Refused(why) => Some((&c.client, why)),
        _ => None,
    }) {
        if reconnecting {
            return Assessment::Unknown(format!("{client} is refused ({why}); it may still be reconnecting"));
        }
        return Assessment::NotConverged(format!("{client} is refused ({why}), and was served before"));
    }
    if let Some((client, why)) = before().find_map(|c| match &c.answer {
        ClientAnswer::NoAnswer(why) => Some((&c.client, why)),
        _ => None,
    }) {
        // A client that was served and is still silent once the reconnect grace is over broke
        // with the version: a kube-apiserver that cannot reach its etcd exits, again and again,
        // into the kubelet's crash-loop back-off, answering nothing (on one node that is the
        // whole API; with other API servers answering, the bed saw it for 9 minutes).
        if !reconnecting {
            let api = if api_answers { "" } else { " and no API answers" };
            return Assessment::NotConverged(format!(
                "{client} gets no answer ({why}){api}, though it was served before"
            ));
        }
        return Assessment::Unknown(format!("{client} gets no answer ({why})"));
    }
    Assessment::Converged
}

fn assess_sources(observation: &VersionView, hash: &str, crash_loop_threshold: u32) -> Assessment {
    let api = from_api(observation, hash, crash_loop_threshold);
    let local = observation
        .runtime
        .as_ref()
        .map(|view| runtime::judge(view, hash, observation.runtime_restarts, crash_loop_threshold));
    if let FromApi::CrashLooping(reason) = &api {
        return Assessment::CrashLooping(reason.clone());
    }
    if let Some(Local::CrashLooping(reason)) = &local {
        return Assessment::CrashLooping(format!("{reason} (container runtime)"));
    }
    if let Some(Err(failure)) = &observation.health {
        return match health_failure_is_evidence(observation, local.as_ref(), failure) {
            Ok(()) => {
                let runtime = match &local {
                    Some(Local::NotRunning(what)) => format!("; container runtime: {what}"),
                    Some(Local::Running) => "; container runtime: it runs".into(),
                    _ => String::new(),
                };
                Assessment::NotConverged(format!("health check failing: {}{runtime}", failure.reason))
            }
            Err(why) => Assessment::Unknown(why),
        };
    }
    let health_answers = matches!(observation.health, Some(Ok(())));
    match (api, local) {
        (FromApi::Converged, _) => Assessment::Converged,
        // The kubelet is still stopping the previous version: whatever the mirror pod says
        // (the old hash), this version has not had its turn to run yet.
        (_, Some(Local::PreviousStopping(what))) => Assessment::Unknown(what),
        // The runtime runs it and it serves: a mirror pod that shows otherwise may be late, and
        // is waited for (bounded, as the API answers); with no API the runtime has the word.
        (FromApi::NotConverged(reason), Some(Local::Running)) if health_answers => {
            // A client it refuses is evidence all the same: a kubelet locked out by this very
            // version is why its mirror pod lags.
            match weigh_clients(
                &observation.clients,
                observation.clients_reconnecting,
                gives_word(observation),
            ) {
                Assessment::NotConverged(refused) => Assessment::NotConverged(refused),
                _ => Assessment::Unknown(format!(
                    "{reason}, though the container runtime runs it and its health URL answers"
                )),
            }
        }

        (_, Some(Local::Running)) if health_answers => Assessment::Converged,
        // Nothing but the runtime can be asked, and it runs it.
        (FromApi::Unknown(_), Some(Local::Running)) if observation.health.is_none() => Assessment::Converged,
        // A mirror pod may lag behind the node: what the runtime shows goes with it.
        (FromApi::NotConverged(reason), Some(Local::NotRunning(what))) => {
            Assessment::NotConverged(format!("{reason}; container runtime: {what}"))
        }
        (FromApi::NotConverged(reason), _) => Assessment::NotConverged(reason),
        (_, Some(Local::NotRunning(reason))) => Assessment::NotConverged(reason),
        (FromApi::Unknown(api), Some(Local::Unknown(local))) => Assessment::Unknown(format!("{api}; {local}")),
        (FromApi::Unknown(api), _) if health_answers => Assessment::Unknown(format!("{api} (health URL answers)")),
        (FromApi::Unknown(api), _) => Assessment::Unknown(api),
        (FromApi::CrashLooping(_), _) => unreachable!("returned above"),
    }
}

/// A version on trial, judged over the whole trial rather than by one sample at its end: it
/// passes after running converged without a break for the trial period, and fails on a crash
/// loop or once it has spent a whole trial period (in total) not converged. Only time with
/// evidence counts; time without (API unreachable, etcd down) pauses both clocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trial {
    pub hash: String,
    /// Time with evidence, converged or not.
    pub observed: Duration,
    /// Converged time since the last evidence of not being converged.
    pub converged_streak: Duration,
    /// Time with evidence of not being converged, in total.
    pub not_converged: Duration,
    /// Time without evidence while an API answered ([`Assessment::Unproven`]), in total.
    pub unproven: Duration,
    /// When the version first ran converged by its own sources (its clients aside).
    pub first_converged: Option<Duration>,
    last_step: Duration,
    /// The mirror pod's restart count when the trial first saw it run this version: restarts
    /// from before (an earlier process of the anchor, a reboot, a component that exited while
    /// the control plane was down) are not this trial's evidence.
    pub restarts_before: Option<u32>,
    /// The same for the runtime: the sandbox the trial first saw run its version and its
    /// containers' restarts then. Another sandbox of the version (after a reboot) starts over.
    pub runtime_restarts_before: Option<(String, u32)>,
}

/// How long a version on trial may go without evidence while an API answers
/// ([`Assessment::Unproven`]) before it fails: twice its trial period, and at least ten minutes,
/// as a kubelet may post a mirror pod's status minutes late (its connection to a kube-apiserver
/// that restarted lingers until it times out). Never promoted meanwhile, the version holds the
/// rollout turn: it reaches no other node.
pub fn unproven_limit(period: Duration) -> Duration {
    (period * 2).max(Duration::from_secs(600))
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TrialOutcome {
    Pending,
    /// Survived the trial: becomes last-known-good.
    Passed,
    Failed(String),
}

impl Trial {
    /// `now` is any monotonic clock reading.
    pub fn start(hash: &str, now: Duration) -> Self {
        Self {
            hash: hash.into(),
            observed: Duration::ZERO,
            converged_streak: Duration::ZERO,
            not_converged: Duration::ZERO,
            unproven: Duration::ZERO,
            first_converged: None,
            last_step: now,
            restarts_before: None,
            runtime_restarts_before: None,
        }
    }

    /// The restarts of this version's containers, as the runtime counts them, since this trial
    /// first saw their sandbox.
    pub fn runtime_restarts(&mut self, view: Option<&RuntimeView>) -> u32 {
        let Some(RuntimeView::Pod(pod)) = view else {
            return 0;
        };
        if pod.content_hash.as_deref() != Some(self.hash.as_str()) {
            return 0;
        }
        let now = pod.restarts();
        match &self.runtime_restarts_before {
            Some((sandbox, before)) if *sandbox == pod.sandbox_id => now.saturating_sub(*before),
            _ => {
                self.runtime_restarts_before = Some((pod.sandbox_id.clone(), now));
                0
            }
        }
    }

    /// Restarts while a component this one needs is down are that component's doing: the counts
    /// are taken anew at the next observation.
    pub fn forget_restarts_before(&mut self) {
        self.restarts_before = None;
        self.runtime_restarts_before = None;
    }

    /// Counts only the restarts since this trial first saw the mirror pod run its version.
    pub fn restarts_in_trial(&mut self, mirror: &mut Option<MirrorPod>) {
        if let Some(MirrorPod::Present {
            hash: Some(hash),
            restarts,
            ..
        }) = mirror
            && *hash == self.hash
        {
            let before = *self.restarts_before.get_or_insert(*restarts);
            *restarts = restarts.saturating_sub(before);
        }
    }

    /// Counts the time since the last step as what `assessment` shows now.
    pub fn step(&mut self, assessment: &Assessment, now: Duration, period: Duration) -> TrialOutcome {
        let elapsed = now.saturating_sub(self.last_step);
        self.last_step = now;
        match assessment {
            Assessment::CrashLooping(reason) => TrialOutcome::Failed(reason.clone()),
            Assessment::Unknown(_) => TrialOutcome::Pending,
            Assessment::Unproven(reason) => {
                self.unproven += elapsed;
                let limit = unproven_limit(period);
                if self.unproven >= limit {
                    TrialOutcome::Failed(format!(
                        "no evidence that it works for {} of its trial while an API answered: {reason}",
                        humantime::format_duration(limit)
                    ))
                } else {
                    TrialOutcome::Pending
                }
            }
            Assessment::Converged => {
                self.observed += elapsed;
                self.converged_streak += elapsed;
                if self.converged_streak >= period {
                    TrialOutcome::Passed
                } else {
                    TrialOutcome::Pending
                }
            }
            Assessment::NotConverged(reason) => {
                self.observed += elapsed;
                self.converged_streak = Duration::ZERO;
                self.not_converged += elapsed;
                if self.not_converged >= period {
                    TrialOutcome::Failed(format!(
                        "not converged for {} of its trial: {reason}",
                        humantime::format_duration(period)
                    ))
                } else {
                    TrialOutcome::Pending
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mirror pod keeps its restart count across anchor restarts and node reboots (the static
    /// pod keeps its UID); a restarted anchor's trial of the same version once read 5 restarts
    /// from before it started as a crash loop, failed at every evaluation, and never let the
    /// version pass.
    #[test]
    fn restarts_from_before_the_trial_are_not_a_crash_loop() {
        let period = Duration::from_secs(25);
        let mut trial = Trial::start(H, Duration::ZERO);
        let observe = |trial: &mut Trial, restarts: u32| {
            let mut mirror = present(H, "Running", true, restarts);
            trial.restarts_in_trial(&mut mirror);
            let observation = VersionView {
                api_configured: true,
                mirror,
                health: None,
                runtime: None,
                runtime_restarts: 0,
                dependency_down: None,
                clients: Vec::new(),
                clients_reconnecting: false,
            };
            assess(&observation, H, 3)
        };
        assert_eq!(observe(&mut trial, 5), Assessment::Converged, "5 restarts from before");
        assert_eq!(
            trial.step(&Assessment::Converged, Duration::from_secs(1), period),
            TrialOutcome::Pending
        );
        assert_eq!(
            observe(&mut trial, 8),
            Assessment::Converged,
            "3 in the trial: at the threshold"
        );
        assert!(
            matches!(observe(&mut trial, 9), Assessment::CrashLooping(_)),
            "4 in the trial"
        );
        // Past its trial a version with many restarts behind it is Ready when it runs Ready.
        let mut promoted = present(H, "Running", true, 12);
        if let Some(m) = promoted.as_mut() {
            m.forget_restarts();
        }
        let observation = VersionView {
            api_configured: true,
            mirror: promoted,
            health: None,
            runtime: None,
            runtime_restarts: 0,
            dependency_down: None,
            clients: Vec::new(),
            clients_reconnecting: false,
        };
        assert_eq!(assess(&observation, H, 3), Assessment::Converged);
        // Another version's mirror pod is left alone (it is not this trial's).
        let mut other = present("sha256:old", "Running", true, 7);
        trial.restarts_in_trial(&mut other);
        assert_eq!(other, present("sha256:old", "Running", true, 7));
    }

    const H: &str = "sha256:new";

    fn present(hash: &str, phase: &str, ready: bool, restarts: u32) -> Option<MirrorPod> {
        Some(MirrorPod::Present {
            hash: Some(hash.into()),
            phase: Some(phase.into()),
            ready,
            restarts,
        })
    }

    fn obs(mirror: Option<MirrorPod>, health: Option<Result<(), HealthFailure>>) -> VersionView {
        VersionView {
            api_configured: true,
            mirror,
            health,
            runtime: None,
            runtime_restarts: 0,
            dependency_down: None,
            clients: Vec::new(),
            clients_reconnecting: false,
        }
    }

    #[test]
    fn assessment_table() {
        let ok = Some(Ok(()));
        let bad = Some(Err(HealthFailure::answered("HTTP 500")));
        type Case = (VersionView, fn(&Assessment) -> bool);
        let cases: Vec<Case> = vec![
            (obs(present(H, "Running", true, 0), None), |a| {
                *a == Assessment::Converged
            }),
            (obs(present(H, "Running", true, 0), ok.clone()), |a| {
                *a == Assessment::Converged
            }),
            (
                obs(present(H, "Running", true, 0), bad.clone()),
                |a| matches!(a, Assessment::NotConverged(r) if r.contains("500")),
            ),
            (
                obs(present(H, "Running", false, 0), None),
                |a| matches!(a, Assessment::NotConverged(r) if r.contains("not Ready")),
            ),
            (
                obs(present(H, "Pending", false, 0), None),
                |a| matches!(a, Assessment::NotConverged(r) if r.contains("Pending")),
            ),
            (
                obs(present("sha256:old", "Running", true, 0), None),
                |a| matches!(a, Assessment::NotConverged(r) if r.contains("sha256:old")),
            ),
            (obs(present(H, "Running", true, 4), None), |a| {
                matches!(a, Assessment::CrashLooping(_))
            }),
            (obs(present(H, "Running", true, 3), None), |a| {
                *a == Assessment::Converged
            }),
            (obs(present("sha256:old", "Running", false, 9), None), |a| {
                matches!(a, Assessment::NotConverged(_))
            }),
            (obs(Some(MirrorPod::Absent), None), |a| {
                matches!(a, Assessment::NotConverged(_))
            }),
            (obs(None, None), |a| matches!(a, Assessment::Unknown(_))),
            (obs(None, ok), |a| matches!(a, Assessment::Unknown(_))),
            (obs(None, bad.clone()), |a| matches!(a, Assessment::Unknown(_))),
            (
                VersionView {
                    api_configured: false,
                    mirror: None,
                    health: None,
                    runtime: None,
                    runtime_restarts: 0,
                    dependency_down: None,
                    clients: Vec::new(),
                    clients_reconnecting: false,
                },
                |a| matches!(a, Assessment::Unknown(r) if r.contains("no API client")),
            ),
            (
                VersionView {
                    api_configured: false,
                    mirror: None,
                    health: bad,
                    runtime: None,
                    runtime_restarts: 0,
                    dependency_down: None,
                    clients: Vec::new(),
                    clients_reconnecting: false,
                },
                |a| matches!(a, Assessment::NotConverged(_)),
            ),
        ];
        for (i, (o, check)) in cases.iter().enumerate() {
            let a = assess(o, H, 3);
            assert!(check(&a), "case {i}: {o:?} -> {a:?}");
        }
    }

    /// design.md, "Evidence": the API, the runtime and the health URL weighed together.
    #[test]
    fn evidence_from_api_runtime_and_health() {
        use crate::runtime::ContainerState::{Created, Exited, Running};
        use crate::runtime::tests::{container, pod};
        let unavailable = || RuntimeView::Unavailable {
            reason: "connect: no such file".into(),
        };
        let runs = || pod(H, true, vec![container("c", 0, Running)]);
        let refused = || Some(Err(HealthFailure::no_answer("connection refused")));
        let answered = |body: &str| Some(Err(HealthFailure::answered(format!("HTTP 500: {body}"))));
        let view = |mirror: Option<MirrorPod>, health, runtime: Option<RuntimeView>, restarts| VersionView {
            api_configured: true,
            mirror,
            health,
            runtime,
            runtime_restarts: restarts,
            dependency_down: None,
            clients: Vec::new(),
            clients_reconnecting: false,
        };
        type Case = (&'static str, VersionView, fn(&Assessment) -> bool);
        let cases: Vec<Case> = vec![
            (
                "no API, the version exits again and again (a flag it refuses)",
                view(None, refused(), Some(pod(H, true, vec![container("c", 4, Exited)])), 4),
                |a| matches!(a, Assessment::CrashLooping(r) if r.contains("container runtime")),
            ),
            (
                "no API, it runs and never serves (on one node: the outage is the version)",
                view(None, refused(), Some(runs()), 0),
                |a| matches!(a, Assessment::NotConverged(r) if r.contains("refused")),
            ),
            (
                "no API, it exited once and does not answer",
                view(None, refused(), Some(pod(H, true, vec![container("c", 1, Exited)])), 1),
                |a| matches!(a, Assessment::NotConverged(_)),
            ),
            (
                "no API, it runs and answers with an error: may be the outage's doing",
                view(None, answered("[-]leaderElection failed"), Some(runs()), 0),
                |a| matches!(a, Assessment::Unknown(r) if r.contains("API unreachable")),
            ),
            (
                "no API, a kube-apiserver waiting for etcd",
                view(None, answered("[-]etcd failed"), Some(runs()), 0),
                |a| matches!(a, Assessment::Unknown(r) if r.contains("etcd")),
            ),
            (
                "no API, an etcd alone after a reboot",
                view(None, answered("RAFT NO LEADER"), Some(runs()), 0),
                |a| matches!(a, Assessment::Unknown(_)),
            ),
            (
                "no API, it runs and serves (a good kube-apiserver on one node)",
                view(None, Some(Ok(())), Some(runs()), 0),
                |a| *a == Assessment::Converged,
            ),
            (
                "no API, it runs, no health URL",
                view(None, None, Some(runs()), 0),
                |a| *a == Assessment::Converged,
            ),
            (
                "the API refuses the anchor (401), the version runs and serves: the runtime judges, as with no API",
                view(
                    Some(MirrorPod::Refused("401 Unauthorized".into())),
                    Some(Ok(())),
                    Some(runs()),
                    0,
                ),
                |a| *a == Assessment::Converged,
            ),
            (
                "the API refuses the anchor (403), no runtime: no word, and not counted against the version",
                view(Some(MirrorPod::Refused("403 Forbidden".into())), Some(Ok(())), None, 0),
                |a| matches!(a, Assessment::Unknown(r) if r.contains("refuses the anchor (403")),
            ),
            (
                "the API refuses the anchor, the runtime shows it stopped: evidence",
                view(
                    Some(MirrorPod::Refused("401 Unauthorized".into())),
                    None,
                    Some(RuntimeView::NoSandbox),
                    0,
                ),
                |a| matches!(a, Assessment::NotConverged(_)),
            ),
            (
                "no API, the runtime holds no sandbox of it (the kubelet dropped the file)",
                view(None, None, Some(RuntimeView::NoSandbox), 0),
                |a| matches!(a, Assessment::NotConverged(r) if r.contains("no sandbox")),
            ),
            (
                "no API, the old version still runs and answers: the kubelet stops it first",
                view(
                    None,
                    Some(Ok(())),
                    Some(pod("sha256:old", true, vec![container("c", 0, Running)])),
                    0,
                ),
                |a| matches!(a, Assessment::Unknown(r) if r.contains("sha256:old")),
            ),
            (
                "the mirror pod shows the old version while the kubelet stops it, health refused",
                view(
                    present("sha256:old", "Running", true, 0),
                    refused(),
                    Some(pod("sha256:old", true, vec![container("c", 0, Running)])),
                    0,
                ),
                |a| matches!(a, Assessment::Unproven(r) if r.contains("stops it")),
            ),
            (
                "no API, the old version stopped and nothing new started",
                view(
                    None,
                    refused(),
                    Some(pod("sha256:old", false, vec![container("c", 0, Exited)])),
                    0,
                ),
                |a| matches!(a, Assessment::NotConverged(r) if r.contains("sha256:old")),
            ),
            (
                "no API, created and never started (image missing, start error)",
                view(None, refused(), Some(pod(H, true, vec![container("c", 0, Created)])), 0),
                |a| matches!(a, Assessment::NotConverged(_)),
            ),
            (
                "no API, runtime socket unusable, health refused",
                view(None, refused(), Some(unavailable()), 0),
                |a| matches!(a, Assessment::Unknown(r) if r.contains("API unreachable")),
            ),
            (
                "no API, runtime socket unusable, no health URL",
                view(None, None, Some(unavailable()), 0),
                |a| matches!(a, Assessment::Unknown(r) if r.contains("no such file")),
            ),
            (
                "no API, no runtime configured, health refused: as before",
                view(None, refused(), None, 0),
                |a| matches!(a, Assessment::Unknown(_)),
            ),
            (
                "a late mirror pod (Pending) while the runtime runs it and it serves: the API has the last word",
                view(present(H, "Pending", false, 0), Some(Ok(())), Some(runs()), 0),
                |a| matches!(a, Assessment::Unproven(r) if r.contains("container runtime runs it")),
            ),
            (
                "a late mirror pod of the old version while the runtime runs the new one and it serves",
                view(present("sha256:old", "Running", true, 0), Some(Ok(())), Some(runs()), 0),
                |a| matches!(a, Assessment::Unproven(r) if r.contains("sha256:old")),
            ),
            (
                "a late mirror pod, and the runtime sees a crash loop",
                view(
                    present(H, "Pending", false, 0),
                    refused(),
                    Some(pod(H, true, vec![container("c", 5, Exited)])),
                    5,
                ),
                |a| matches!(a, Assessment::CrashLooping(_)),
            ),
            (
                "a late mirror pod of the old version, the runtime shows the new one exited: both named",
                view(
                    present("sha256:old", "Running", true, 0),
                    Some(Ok(())),
                    Some(pod(H, true, vec![container("c", 1, Exited)])),
                    1,
                ),
                |a| matches!(a, Assessment::NotConverged(r) if r.contains("sha256:old") && r.contains("container runtime: container c exited")),
            ),
            (
                "mirror pod Running but not Ready, the runtime runs it, no health URL: the mirror pod decides",
                view(present(H, "Running", false, 0), None, Some(runs()), 0),
                |a| matches!(a, Assessment::NotConverged(r) if r.contains("not Ready")),
            ),
            (
                "mirror pod converged, runtime socket unusable",
                view(present(H, "Running", true, 0), None, Some(unavailable()), 0),
                |a| *a == Assessment::Converged,
            ),
            (
                "no API client at all, the runtime runs it",
                VersionView {
                    api_configured: false,
                    mirror: None,
                    health: None,
                    runtime: Some(runs()),
                    runtime_restarts: 0,
                    dependency_down: None,
                    clients: Vec::new(),
                    clients_reconnecting: false,
                },
                |a| *a == Assessment::Converged,
            ),
        ];
        for (name, v, check) in &cases {
            let a = assess(v, H, 3);
            assert!(check(&a), "{name}: {v:?} -> {a:?}");
        }
    }

    /// On one node, a good kube-apiserver on trial exits because a bad etcd push took etcd
    /// away: while etcd does not run there, neither its exits nor its silence count.
    #[test]
    fn a_failure_while_a_needed_component_is_down_is_no_evidence() {
        use crate::runtime::ContainerState::Exited;
        use crate::runtime::tests::{container, pod};
        let view = |restarts, down: Option<&str>| VersionView {
            api_configured: true,
            mirror: None,
            health: Some(Err(HealthFailure::no_answer("connection refused"))),
            runtime: Some(pod(H, true, vec![container("c", restarts, Exited)])),
            runtime_restarts: restarts,
            dependency_down: down.map(Into::into),
            clients: Vec::new(),
            clients_reconnecting: false,
        };
        let etcd = Some("etcd does not run on this node (container etcd exited 2 (Error), attempt 1)");
        assert!(matches!(assess(&view(0, None), H, 3), Assessment::NotConverged(_)));
        assert!(matches!(assess(&view(5, None), H, 3), Assessment::CrashLooping(_)));
        for restarts in [0, 5] {
            assert!(
                matches!(assess(&view(restarts, etcd), H, 3), Assessment::Unknown(r) if r.contains("etcd does not run")),
                "{restarts} restarts"
            );
        }
        // Converged stays converged.
        let mut ok = view(0, etcd);
        ok.mirror = present(H, "Running", true, 0);
        ok.health = None;
        assert_eq!(assess(&ok, H, 3), Assessment::Converged);
    }

    /// The selfhosted failure this settles: a good kube-apiserver ran and served 46 s after its
    /// write, the kubelet posted its mirror pod's status minutes late, and a 75 s trial failed
    /// it. A mirror pod that lags behind what the runtime runs is waited for while the API
    /// answers (neither promoted nor failed: the API has the last word), up to
    /// [`unproven_limit`]; the same lag under a crash-looping version still fails.
    #[test]
    fn a_late_mirror_pod_does_not_fail_a_good_version_nor_save_a_bad_one() {
        use crate::runtime::ContainerState::{Exited, Running};
        use crate::runtime::tests::{container, pod};
        let period = secs(75);
        let run = |crash: bool, mirror_late_until: u64| {
            let mut trial = Trial::start(H, secs(0));
            for t in (1..=1200).step_by(3) {
                let (runtime, health) = match (t, crash) {
                    (..46, _) => (pod("sha256:old", false, vec![container("c", 0, Exited)]), None),
                    (_, false) => (pod(H, true, vec![container("c", 0, Running)]), Some(Ok(()))),
                    (_, true) => {
                        let attempt = (t - 46) / 20;
                        let state = if (t - 46) % 20 < 3 { Running } else { Exited };
                        (
                            pod(H, true, vec![container("c", attempt as u32, state)]),
                            Some(Err(HealthFailure::no_answer("connection refused"))),
                        )
                    }
                };
                let mirror = if t < mirror_late_until || crash {
                    present(H, "Pending", false, 0)
                } else {
                    present(H, "Running", true, 0)
                };
                let mut v = VersionView {
                    api_configured: true,
                    mirror,
                    health,
                    runtime: Some(runtime),
                    runtime_restarts: 0,
                    dependency_down: None,
                    clients: Vec::new(),
                    clients_reconnecting: false,
                };
                v.runtime_restarts = trial.runtime_restarts(v.runtime.as_ref());
                let outcome = trial.step(&assess(&v, H, 3), secs(t), period);
                if outcome != TrialOutcome::Pending {
                    return (t, outcome);
                }
            }
            (1200, TrialOutcome::Pending)
        };
        // Three minutes late: passes a trial period after the mirror pod shows it.
        let (at, good) = run(false, 180);
        assert_eq!(good, TrialOutcome::Passed, "at {at}s");
        assert!((180 + 70..180 + 80).contains(&at), "passed at {at}s");
        // Never shown: not promoted on the runtime's word; failed past the limit, with why.
        let (at, never) = run(false, u64::MAX);
        assert!(
            matches!(&never, TrialOutcome::Failed(r) if r.contains("no evidence") && r.contains("container runtime runs it")),
            "{never:?}"
        );
        assert!((46 + 595..46 + 605).contains(&at), "failed at {at}s");
        let (_, bad) = run(true, 0);
        assert!(matches!(bad, TrialOutcome::Failed(_)), "{bad:?}");
    }

    #[test]
    fn runtime_restarts_count_from_the_sandbox_the_trial_first_saw() {
        use crate::runtime::ContainerState::Running;
        use crate::runtime::tests::{container, pod};
        let mut trial = Trial::start(H, secs(0));
        let at = |attempt, sandbox: &str| {
            let mut view = pod(H, true, vec![container("c", attempt, Running)]);
            if let RuntimeView::Pod(p) = &mut view {
                p.sandbox_id = sandbox.into();
            }
            view
        };
        assert_eq!(trial.runtime_restarts(Some(&at(2, "a"))), 0, "restarts from before");
        assert_eq!(trial.runtime_restarts(Some(&at(5, "a"))), 3);
        assert_eq!(
            trial.runtime_restarts(Some(&at(0, "b"))),
            0,
            "a new sandbox starts over"
        );
        assert_eq!(trial.runtime_restarts(Some(&at(1, "b"))), 1);
        let other = pod("sha256:old", true, vec![container("c", 9, Running)]);
        assert_eq!(trial.runtime_restarts(Some(&other)), 0, "another version's");
        assert_eq!(trial.runtime_restarts(None), 0);
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn passes_only_after_a_full_period_converged_without_a_break() {
        let period = secs(300);
        let mut t = Trial::start(H, secs(0));
        assert_eq!(
            t.step(&Assessment::NotConverged("starting".into()), secs(10), period),
            TrialOutcome::Pending
        );
        assert_eq!(t.step(&Assessment::Converged, secs(309), period), TrialOutcome::Pending);
        assert_eq!(t.step(&Assessment::Converged, secs(310), period), TrialOutcome::Passed);
    }

    #[test]
    fn one_converged_sample_at_the_end_does_not_pass_a_version() {
        // Not converged for most of the trial, converged at the moment it ends.
        let period = secs(300);
        let mut t = Trial::start(H, secs(0));
        assert_eq!(
            t.step(&Assessment::NotConverged("not Ready".into()), secs(290), period),
            TrialOutcome::Pending
        );
        assert_eq!(t.step(&Assessment::Converged, secs(300), period), TrialOutcome::Pending);
        assert_eq!(t.step(&Assessment::Converged, secs(301), period), TrialOutcome::Pending);
        // A break in the streak starts it over.
        assert!(matches!(
            t.step(&Assessment::NotConverged("not Ready".into()), secs(311), period),
            TrialOutcome::Failed(r) if r.contains("not converged for 5m")
        ));
    }

    #[test]
    fn a_flapping_version_fails_once_a_period_not_converged_adds_up() {
        let period = secs(300);
        let mut t = Trial::start(H, secs(0));
        let mut now = 0;
        let mut outcome = TrialOutcome::Pending;
        while outcome == TrialOutcome::Pending {
            now += 60;
            outcome = t.step(&Assessment::Converged, secs(now), period);
            assert_eq!(
                outcome,
                TrialOutcome::Pending,
                "a minute converged never passes a 5m trial"
            );
            now += 60;
            outcome = t.step(&Assessment::NotConverged("x".into()), secs(now), period);
        }
        assert!(matches!(outcome, TrialOutcome::Failed(_)));
        assert_eq!(t.not_converged, period);
    }

    #[test]
    fn fails_when_a_period_is_spent_unconverged_or_at_once_on_a_crash_loop() {
        let period = secs(300);
        let mut t = Trial::start(H, secs(0));
        assert_eq!(t.step(&Assessment::Converged, secs(100), period), TrialOutcome::Pending);
        assert_eq!(
            t.step(&Assessment::NotConverged("x".into()), secs(399), period),
            TrialOutcome::Pending
        );
        assert!(
            matches!(t.step(&Assessment::NotConverged("x".into()), secs(400), period), TrialOutcome::Failed(r) if r.contains("5m"))
        );
        let mut t = Trial::start(H, secs(0));
        assert!(matches!(
            t.step(&Assessment::CrashLooping("r".into()), secs(1), period),
            TrialOutcome::Failed(_)
        ));
    }

    #[test]
    fn a_health_failure_blamed_on_the_control_plane_is_no_evidence() {
        let running = || present(H, "Running", true, 0);
        let failing = |body: &str| {
            Some(Err(HealthFailure::answered(format!(
                "HTTP 500 from https://127.0.0.1:6443/readyz: {body}"
            ))))
        };
        // API unreachable: whatever the health URL says is not held against the version.
        assert!(
            matches!(assess(&obs(None, failing("readyz check failed")), H, 3), Assessment::Unknown(r) if r.contains("API unreachable"))
        );
        // The API answers, but the component says etcd is what fails; or etcd has no leader:
        // no evidence, but counted towards the limit while the API answers.
        let etcd_down = "[+]ping ok\n[-]etcd failed: reason withheld\nreadyz check failed";
        assert!(
            matches!(assess(&obs(running(), failing(etcd_down)), H, 3), Assessment::Unproven(r) if r.contains("etcd"))
        );
        let no_leader = r#"{"health":"false","reason":"RAFT NO LEADER"}"#;
        assert!(matches!(
            assess(&obs(running(), failing(no_leader)), H, 3),
            Assessment::Unproven(_)
        ));
        // An etcd alarm is the cluster's: the version on trial waits until it is cleared.
        for alarm in ["NOSPACE", "CORRUPT"] {
            let body = format!(r#"{{"health":"false","reason":"ALARM {alarm}"}}"#);
            assert!(
                matches!(assess(&obs(running(), failing(&body)), H, 3), Assessment::Unknown(r) if r.contains("alarm raised")),
                "{alarm}"
            );
        }
        // Anything else is evidence.
        let own = "[-]poststarthook/start-apiextensions-controllers failed: reason withheld";
        assert!(matches!(
            assess(&obs(running(), failing(own)), H, 3),
            Assessment::NotConverged(_)
        ));
    }

    /// A version that runs and answers its health URL, judged by the clients it served before:
    /// an etcd whose listen URL left out 127.0.0.1 (its kube-apiserver's `/readyz/etcd` fails),
    /// a kube-apiserver that refuses the tokens it accepted.
    #[test]
    fn a_version_that_refuses_a_client_it_served_before_is_not_converged() {
        let client = |answer: ClientAnswer, served_before: bool| ClientView {
            client: "kube-apiserver (/readyz/etcd)".into(),
            answer,
            served_before,
        };
        let refused = || ClientAnswer::Refused("500: [-]etcd failed".into());
        let silent = || ClientAnswer::NoAnswer("connection refused".into());
        let with = |clients: Vec<ClientView>| {
            let mut v = obs(present(H, "Running", true, 0), Some(Ok(())));
            v.clients = clients;
            v
        };
        // No API, and the runtime runs it.
        let no_api = |mut v: VersionView| {
            use crate::runtime::tests::{container, pod};
            v.mirror = None;
            v.runtime = Some(pod(
                H,
                true,
                vec![container("c", 0, crate::runtime::ContainerState::Running)],
            ));
            v
        };
        type Case = (&'static str, VersionView, fn(&Assessment) -> bool);
        let cases: Vec<Case> = vec![
            ("served", with(vec![client(ClientAnswer::Served, true)]), |a| {
                *a == Assessment::Converged
            }),
            (
                "refused, served before",
                with(vec![client(refused(), true)]),
                |a| matches!(a, Assessment::NotConverged(r) if r.contains("kube-apiserver (/readyz/etcd) is refused") && r.contains("[-]etcd")),
            ),
            (
                "refused, never served: not this version's doing",
                with(vec![client(refused(), false)]),
                |a| *a == Assessment::Converged,
            ),
            (
                "refused within the reconnect grace: the client may still be redialling",
                {
                    let mut v = with(vec![client(refused(), true)]);
                    v.clients_reconnecting = true;
                    v
                },
                |a| matches!(a, Assessment::Unproven(r) if r.contains("reconnecting")),
            ),
            (
                "no answer, served before, the API answers elsewhere, past the grace: broken with the version (a kube-apiserver crash-looping without its etcd)",
                with(vec![client(silent(), true)]),
                |a| matches!(a, Assessment::NotConverged(r) if r.contains("no answer") && !r.contains("no API answers")),
            ),
            (
                "no answer, served before, the API answers elsewhere, within the grace: counted towards the limit",
                {
                    let mut v = with(vec![client(silent(), true)]);
                    v.clients_reconnecting = true;
                    v
                },
                |a| matches!(a, Assessment::Unproven(r) if r.contains("no answer")),
            ),
            (
                "refused while a component it needs is down: excused",
                {
                    let mut v = with(vec![client(refused(), true)]);
                    v.dependency_down = Some("etcd fails its health check (RAFT NO LEADER)".into());
                    v
                },
                |a| matches!(a, Assessment::Unknown(r) if r.contains("RAFT NO LEADER")),
            ),
            (
                "no answer, and no API, past the reconnect grace: the outage is the version's",
                no_api(with(vec![client(silent(), true)])),
                |a| matches!(a, Assessment::NotConverged(r) if r.contains("no API answers")),
            ),
            (
                "no answer, and no API, within the reconnect grace: no evidence, not counted",
                {
                    let mut v = no_api(with(vec![client(silent(), true)]));
                    v.clients_reconnecting = true;
                    v
                },
                |a| matches!(a, Assessment::Unknown(_)),
            ),
        ];
        for (name, v, check) in cases {
            let a = assess(&v, H, 3);
            assert!(check(&a), "{name}: {a:?}");
        }
    }

    #[test]
    fn time_without_evidence_while_an_api_answers_is_bounded() {
        let period = secs(300);
        assert_eq!(unproven_limit(period), secs(600));
        assert_eq!(unproven_limit(secs(25)), secs(600));
        assert_eq!(unproven_limit(secs(900)), secs(1800));
        let mut t = Trial::start(H, secs(0));
        let unproven = Assessment::Unproven("mirror pod runs sha256:old".into());
        assert_eq!(t.step(&unproven, secs(599), period), TrialOutcome::Pending);
        // Paused time and evidence in between do not reset it.
        assert_eq!(
            t.step(&Assessment::Unknown("API unreachable".into()), secs(3000), period),
            TrialOutcome::Pending
        );
        assert_eq!(
            t.step(&Assessment::Converged, secs(3010), period),
            TrialOutcome::Pending
        );
        assert!(matches!(
            t.step(&unproven, secs(3011), period),
            TrialOutcome::Failed(r) if r.contains("10m") && r.contains("sha256:old")
        ));
    }

    #[test]
    fn time_without_evidence_does_not_count() {
        let period = secs(300);
        let mut t = Trial::start(H, secs(0));
        // An hour of API outage with no health URL: still pending, clock paused.
        assert_eq!(
            t.step(&Assessment::Unknown("api down".into()), secs(3600), period),
            TrialOutcome::Pending
        );
        assert_eq!(t.observed, Duration::ZERO);
        assert_eq!(
            t.step(&Assessment::NotConverged("x".into()), secs(3700), period),
            TrialOutcome::Pending
        );
        assert_eq!(t.observed, secs(100));
    }

    #[test]
    fn mirror_pod_from_a_real_pod_shape() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "kube-apiserver-n1", "annotations": {CONTENT_HASH_ANNOTATION: H}},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
                        "containerStatuses": [{"name": "a", "restartCount": 2, "ready": true, "image": "i", "imageID": ""},
                                              {"name": "b", "restartCount": 1, "ready": true, "image": "i", "imageID": ""}]}
        }))
        .unwrap();
        assert_eq!(MirrorPod::from_pod(&pod), present(H, "Running", true, 3).unwrap());
    }
}
