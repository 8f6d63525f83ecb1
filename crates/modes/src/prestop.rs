//! `kube-anchor pre-stop`, the anchor DaemonSet's preStop hook: remove the component from the
//! node only on a real decommission, in a safe order, within a bounded time.
//!
//! The order and the deadlines are [`Hook`]'s (pure, `kube_anchor_core::prestop_steps`); this module performs
//! its actions: the evidence (own pod → owning DaemonSet, Node, every anchor of the component,
//! [`decide_with_evidence`]), the Warning Events, the etcd member's leave and its record, the
//! ledger's mark, the rollout turn, `--before-remove`, the removals, and the waits for the static
//! pod and etcd to stop.

use crate::output::outln;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

use crate::cli::{OutputFormat, PreStopArgs};
use crate::engine::{Engine, Inputs};
use crate::etcd_member;
use kube_anchor_core::config::EtcdMember;
use kube_anchor_core::config::Role;
use kube_anchor_core::decommission::{self, Decision, FilesHere, Lookup, ThisPod};
use kube_anchor_core::hostpath::HostPath;
use kube_anchor_core::pause::Pause;
use kube_anchor_core::plan::Notice;
use kube_anchor_core::prestop_steps::{Action, Exit, Hook, LeaveAnswer, Limits, MemberConfig, Observation};
use kube_anchor_core::runtime::RuntimeView;
use kube_anchor_core::staticpod;
use kube_anchor_k8s::cri::{RuntimeObserver, StaticPodRef};
use kube_anchor_k8s::direct::HealthCheck;
use kube_anchor_k8s::evidence::{decide_with_evidence, remaining};
use kube_anchor_k8s::kubeapi::{self, API_TIMEOUT, EventSink};

pub(crate) async fn run(args: PreStopArgs) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    match tokio::time::timeout(args.timeout, run_inner(&args, started)).await {
        Ok(result) => result,
        Err(_) => anyhow::bail!(
            "pre-stop did not finish within {}; stopped where it was",
            humantime::format_duration(args.timeout)
        ),
    }
}

/// Performs the hook's actions ([`Hook`] decides them) and feeds back what each gave.
async fn run_inner(args: &PreStopArgs, started: Instant) -> anyhow::Result<ExitCode> {
    let engine = args.node.engine()?;
    let component = args.component.name(engine.roots())?;
    let limits = Limits { timeout: args.timeout };
    let at = |since_start: Duration| started + since_start;
    let deadline = at(limits.timeout);
    // One client for the evidence and for watching the static pod stop; why there is none is
    // itself part of the evidence ("no API client" keeps everything).
    let client: Result<kube::Client, String> = match tokio::time::timeout(
        remaining(at(limits.evidence_until())),
        kubeapi::client(
            args.identity.kubeconfig(),
            &args.identity.api_servers,
            &kubeapi::user_agent(&format!("pre-stop {component}"), args.identity.node_name.as_deref()),
        ),
    )
    .await
    {
        Ok(Ok(Some(client))) => Ok(client),
        Ok(Ok(None)) => Err("no API client configured".into()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("timed out building the client".into()),
    };
    let this = args.identity.this_pod();
    let guard = decommission::QuorumGuard::from(args.quorum_guard).guard_for(&component);
    // Read before anything is removed: the manifest names the static pod whose copies on the
    // other nodes the guard counts, and whose stop is waited for below.
    let mut pod = static_pod_of(&engine, &component, args.identity.node_name.as_deref());
    let static_pod = pod.as_ref().map(|p| decommission::StaticPodName {
        namespace: p.namespace.clone(),
        name: p.name.clone(),
    });
    let (etcd, member) = match etcd_member(args, &engine) {
        Ok(Some(etcd)) => (Some(etcd), MemberConfig::Configured),
        Ok(None) => (None, MemberConfig::NotConfigured),
        Err(why) => (None, MemberConfig::Unreadable(why)),
    };
    // An operator's hold keeps everything, whatever the evidence says: the node's own marker
    // now, the Node's annotation below, asked only of a decision to remove.
    let paused = engine
        .ledger(&component)
        .ok()
        .and_then(|ledger| Pause::of(ledger.paused.as_ref(), None, None).map(|p| p.describe(&component)));
    let mut hook = Hook::new(limits, member, args.before_remove.is_some()).paused(paused);
    let mut observation = Observation::Began;
    let mut removed: Vec<HostPath> = Vec::new();
    let mut notices = Vec::new();
    loop {
        let (next, action) = hook.step(observation, started.elapsed());
        hook = next;
        observation = match action {
            Action::GatherEvidence { until } => {
                let decision = decide_with_evidence(
                    args.cleanup.into(),
                    guard,
                    args.confirm_interval,
                    this.as_ref(),
                    &client,
                    &component,
                    static_pod.as_ref(),
                    at(until),
                    // Every anchor on the node shares the state dir: a dependent's ledger says
                    // whether its own hook has taken it off the node yet.
                    &|dependent| match engine.ledger(dependent) {
                        Ok(ledger) => FilesHere::of(&ledger),
                        Err(e) => FilesHere::Unreadable(e.to_string()),
                    },
                )
                .await;
                if let (Decision::Remove(_), Ok(client), Some(node)) =
                    (&decision, &client, args.identity.node_name.as_deref())
                    && let Ok(Ok(Some(reason))) =
                        tokio::time::timeout(remaining(at(until)), kubeapi::node_pause(client, node)).await
                {
                    hook = hook.paused(Pause::of(None, Some(node), Some(&reason)).map(|p| p.describe(&component)));
                }
                Observation::Decided(decision)
            }
            Action::Warn { code, reason } => {
                warn_event(&client, this.as_ref(), code.as_str(), &component, &reason, deadline).await;
                Observation::Done
            }
            Action::RecordIntentToLeave { attempt } => {
                match etcd_member::ask_leave(&engine, &component, args.identity.pod_name.as_deref()) {
                    Ok(_) => Observation::Done,
                    Err(e) => {
                        tracing::warn!(%component, attempt, error = %e, "pre-stop: cannot record the intent to leave");
                        Observation::Failed(e.to_string())
                    }
                }
            }
            Action::Leave { budget } => {
                let (inputs, member) = etcd.as_ref().expect("a leave is asked only with a member config");
                Observation::Left(leave(inputs, &engine, member, budget).await)
            }
            Action::Pause { pause, why } => {
                tracing::info!(%component, reason = %why, "pre-stop: the etcd member may not leave yet; asking again");
                tokio::time::sleep(pause).await;
                Observation::Done
            }
            Action::RecordLeaveHeld { why } => match etcd_member::hold_leave(&engine, &component, &why) {
                Ok(_) => Observation::Done,
                Err(e) => {
                    tracing::warn!(%component, error = %e, "pre-stop: cannot record why the member did not leave");
                    Observation::Failed(e.to_string())
                }
            },
            Action::MarkDecommissioned { reason } => {
                tracing::warn!(%component, decision = "remove", %reason, "pre-stop: decommissioning the component on this node");
                match engine.decommission(&component, &reason, args.identity.pod_name.as_deref()) {
                    Ok(()) => Observation::Done,
                    Err(e) => Observation::Failed(crate::logging::error_chain(&anyhow::Error::from(e))),
                }
            }
            Action::GiveBackTurn { budget } => {
                give_back_turn(args, client.as_ref().ok(), &component, budget).await;
                Observation::Done
            }
            Action::RunBeforeRemove { budget } => {
                let command = args.before_remove.as_deref().expect("asked only with --before-remove");
                match run_hook(command, budget).await {
                    Ok(()) => Observation::Done,
                    Err(why) => Observation::Failed(why),
                }
            }
            Action::RemoveManifest => remove_role(&engine, &component, Role::Manifest, &mut removed, &mut notices),
            Action::RemoveCredentials => remove_role(&engine, &component, Role::Credential, &mut removed, &mut notices),
            Action::WaitStopped { until } => {
                wait_stopped(args, client.as_ref().ok(), pod.take(), at(until)).await;
                Observation::Done
            }
            Action::WaitEtcdStopped { until } => {
                let (inputs, member) = etcd.as_ref().expect("asked only with a member config");
                let stopped = etcd_member::wait_etcd_stopped(&engine, inputs, member, at(until)).await;
                if !stopped {
                    tracing::warn!(%component, data_dir = %member.data_dir, "pre-stop: etcd still answers; its data dir is kept");
                }
                Observation::EtcdStopped(stopped)
            }
            Action::SaveAndRemoveDataDir => {
                let (_, member) = etcd.as_ref().expect("asked only with a member config");
                // The data dir goes only once etcd has stopped and its database is saved.
                match etcd_member::save_and_remove_data_dir(&engine, &component, member) {
                    Ok(saved) => {
                        if let Some(s) = &saved {
                            tracing::info!(%component, snapshot = %s.snapshot.display(), pruned = s.pruned.len(), "pre-stop: saved the etcd database");
                        }
                        tracing::info!(%component, data_dir = %member.data_dir, "pre-stop: removed the etcd data dir");
                        removed.push(member.data_dir.clone());
                        Observation::Done
                    }
                    Err(e) => {
                        tracing::warn!(%component, error = %e, "pre-stop: the etcd data dir is kept");
                        Observation::Failed(e.to_string())
                    }
                }
            }
            Action::Exit(exit) => {
                for notice in &notices {
                    tracing::warn!(%component, "{notice:?}");
                }
                let reason = exit.reason();
                match &exit {
                    Exit::Keep(_) => {
                        tracing::info!(%component, decision = "keep", %reason, "pre-stop: keeping the component on this node")
                    }
                    Exit::Held(_) => {
                        tracing::warn!(%component, decision = "held", %reason, "pre-stop: the guard keeps the component on this node")
                    }
                    Exit::MemberStays(_) => {
                        tracing::error!(%component, decision = "held", %reason, "pre-stop: etcd membership keeps the component on this node")
                    }
                    Exit::Removed(_) => tracing::info!(%component, removed = removed.len(), "pre-stop: removed"),
                    Exit::Failed(_) => {
                        tracing::error!(%component, %reason, removed = removed.len(), "pre-stop: stopped where a step failed")
                    }
                }
                report(args.output, &component, exit.decision(), reason, &removed);
                return Ok(if exit.success() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                });
            }
        };
    }
}

/// Removes the files of `role`, adding them and the notices to the hook's report.
fn remove_role(
    engine: &Engine,
    component: &str,
    role: Role,
    removed: &mut Vec<HostPath>,
    notices: &mut Vec<Notice>,
) -> Observation {
    match engine.remove_roles(component, &[role]) {
        Ok(report) => {
            removed.extend(report.removed);
            notices.extend(report.notices);
            Observation::Done
        }
        Err(e) => Observation::Failed(crate::logging::error_chain(&anyhow::Error::from(e))),
    }
}

/// One attempt to leave the etcd cluster, within `budget`.
async fn leave(inputs: &Inputs, engine: &Engine, member: &EtcdMember, budget: Duration) -> LeaveAnswer {
    let component = &inputs.anchor.name;
    let answer = etcd_member::leave_within(engine, inputs, member, budget).await;
    match &answer {
        LeaveAnswer::Removed { id } => {
            tracing::warn!(%component, member_id = %format!("{id:x}"), "pre-stop: removed this node's etcd member")
        }
        LeaveAnswer::NotAMember => tracing::info!(%component, "pre-stop: this node is not an etcd member"),
        _ => {}
    }
    answer
}

/// A node leaving mid-rollout gives its turn back: no other node takes a turn over on a timer,
/// and this node's Node object stays. Best effort, within a few seconds of the hook's budget.
async fn give_back_turn(args: &PreStopArgs, client: Option<&kube::Client>, component: &str, budget: Duration) {
    let (Some(client), Some(node), Some(namespace)) = (
        client,
        args.identity.node_name.as_deref(),
        args.identity.pod_namespace.as_deref(),
    ) else {
        return;
    };
    let lease = kubeapi::RolloutLease::new(client.clone(), namespace, component, node, Duration::ZERO);
    match tokio::time::timeout(budget, lease.release(kube_anchor_core::rollout::TurnEnd::Neither)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::warn!(%component, lease = lease.name(), error = %e, "pre-stop: cannot give back this node's rollout turn")
        }
        Err(_) => {
            tracing::warn!(%component, lease = lease.name(), "pre-stop: the rollout Lease did not answer in time")
        }
    }
}

/// The config and its `spec.etcdMember`, when pre-stop runs with `--config` and the config
/// has one.
fn etcd_member(args: &PreStopArgs, engine: &Engine) -> Result<Option<(Inputs, EtcdMember)>, String> {
    let Some(config) = args.component.config.as_ref() else {
        return Ok(None);
    };
    let anchor = crate::engine::load_config(config, engine.roots()).map_err(|e| e.to_string())?;
    if anchor.etcd_member.is_none() {
        return Ok(None);
    }
    let inputs = Inputs::load(config, engine.roots()).map_err(|e| e.to_string())?;
    let member = inputs.anchor.etcd_member.clone().expect("checked above");
    Ok(Some((inputs, member)))
}

/// A Warning Event on this pod, within the hook's time.
async fn warn_event(
    client: &Result<kube::Client, String>,
    this: Option<&ThisPod>,
    reason_code: &str,
    component: &str,
    reason: &str,
    deadline: Instant,
) {
    if let (Ok(client), Some(this)) = (client, this) {
        let events = EventSink::new(client.clone(), &this.namespace, &this.name);
        let note = format!("{component} kept on node {}: {reason}", this.node);
        let publish = events.publish(true, reason_code, "PreStop", note);
        if tokio::time::timeout(remaining(deadline), publish).await.is_err() {
            tracing::warn!("could not publish the Event in time");
        }
    }
}

/// Runs `--before-remove`; why it did not succeed otherwise.
async fn run_hook(command: &str, budget: Duration) -> Result<(), String> {
    tracing::info!(command, "pre-stop: running --before-remove");
    let mut child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("--before-remove could not run: {e}"))?;
    match tokio::time::timeout(budget, child.wait()).await {
        Ok(Ok(status)) if status.success() => Ok(()),
        Ok(Ok(status)) => Err(format!("--before-remove failed ({status})")),
        Ok(Err(e)) => Err(format!("--before-remove could not run: {e}")),
        Err(_) => Err(format!(
            "--before-remove did not finish within {}",
            humantime::format_duration(budget)
        )),
    }
}

/// (namespace, name) of the mirror pod of the manifest on disk, read before it is removed.
/// The static pod this component's manifest describes on this node.
fn static_pod_of(engine: &Engine, component: &str, node: Option<&str>) -> Option<StaticPodRef> {
    let ledger = engine.ledger(component).ok()?;
    let entry = ledger.entries().iter().find(|e| e.role == Role::Manifest)?;
    let bytes = engine.fs.read(&entry.path).ok()??;
    let pod = staticpod::parse(entry.path.as_path(), std::str::from_utf8(&bytes).ok()?).ok()?;
    Some(StaticPodRef {
        name: pod.name,
        namespace: pod.namespace,
        node: Some(node?.to_owned()),
    })
}

/// Waits (bounded) until the static pod has stopped. The container runtime says so best: no
/// sandbox of the pod, or its sandbox stopped (the kubelet stops the sandbox only once it has
/// dropped the pod; a component that merely exited is restarted in the same sandbox, as etcd is
/// after its member is removed). Without an answer from the runtime: the mirror pod gone, or the
/// health URL silent. With nothing to look at, there is nothing to wait for.
async fn wait_stopped(args: &PreStopArgs, client: Option<&kube::Client>, pod: Option<StaticPodRef>, until: Instant) {
    let health = args
        .health_url
        .as_deref()
        .and_then(|u| HealthCheck::new(u, args.health_ca_file.as_deref()).ok());
    let runtime = pod
        .as_ref()
        .and_then(|_| RuntimeObserver::new(&args.node.host_root, args.runtime.endpoint()));
    let mirror = pod.as_ref().and_then(|p| {
        Some((
            p.namespace.clone(),
            format!("{}-{}", p.name, p.node.as_ref()?.to_lowercase()),
        ))
    });
    let client = client.filter(|_| mirror.is_some());
    if client.is_none() && health.is_none() && runtime.is_none() {
        return;
    }
    while Instant::now() < until {
        if let (Some(observer), Some(pod)) = (&runtime, &pod) {
            match observer.observe(pod).await {
                RuntimeView::NoSandbox => {
                    tracing::info!(pod = %pod.name, "the static pod is gone from the container runtime");
                    return;
                }
                RuntimeView::Pod(p) if !p.ready => {
                    tracing::info!(pod = %pod.name, "the static pod's sandbox is stopped");
                    return;
                }
                RuntimeView::Pod(_) => {
                    // Still there: a silent health URL may be a container about to be restarted.
                    tokio::time::sleep(Duration::from_millis(250).min(remaining(until))).await;
                    continue;
                }
                // No runtime to ask, and nothing else to look at: nothing to wait for.
                RuntimeView::Unavailable { .. } if client.is_none() && health.is_none() => return,
                RuntimeView::Unavailable { .. } => {}
            }
        }
        // Each probe ends by `until`: the credentials go after it, whatever the API does.
        if let Some(h) = &health
            && !matches!(tokio::time::timeout(remaining(until), h.check()).await, Ok(Ok(())))
        {
            if Instant::now() < until {
                tracing::info!(url = h.url(), "the component stopped answering");
                return;
            }
            break;
        }
        if let (Some(c), Some((ns, name))) = (&client, &mirror)
            && let Lookup::NotFound = kubeapi::lookup_in::<Pod>(c, ns, name, API_TIMEOUT.min(remaining(until))).await
        {
            tracing::info!(mirror_pod = %name, "the static pod is gone");
            return;
        }
        tokio::time::sleep(Duration::from_millis(250).min(remaining(until))).await;
    }
    tracing::warn!("the static pod did not stop in time; removing the credentials anyway");
}

fn report(format: OutputFormat, component: &str, decision: &str, reason: &str, removed: &[HostPath]) {
    match format {
        OutputFormat::Json => outln!(
            "{}",
            json!({"component": component, "decision": decision, "reason": reason, "removed": removed})
        ),
        OutputFormat::Text => {
            outln!("{component}: {decision} ({reason})");
            for p in removed {
                outln!("  removed    {p}");
            }
        }
    }
}
