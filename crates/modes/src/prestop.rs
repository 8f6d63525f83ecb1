//! `kube-anchor pre-stop`, the anchor DaemonSet's preStop hook: remove the component from the
//! node only on a real decommission, in a safe order, within a bounded time.
//!
//! 1. Gather evidence (own pod → owning DaemonSet, Node, every anchor of the component) and
//!    [`decide`]; on `Remove`, look again after `--confirm-interval` and [`confirm`].
//! 2. Keep: log why and exit 0 — the files stay for the next pod or the next boot. Held (the
//!    guard: a quorum, or the last copy): the same, plus a Warning Event on this pod.
//! 3. `spec.etcdMember`: the member leaves the cluster first, its intent recorded before each
//!    attempt and asked again while a refusal may pass. When it does not leave: a Warning
//!    Event, every file kept, exit 1, and the intent kept for the next hook.
//! 4. Remove: mark the ledger decommissioned (the daemon in this pod then refuses to write, with
//!    no need for a writable root filesystem), run `--before-remove`, remove the manifest, wait
//!    until the mirror pod is gone or the health URL stops answering, remove the credentials.
//!
//! Time: every lookup ends `REMOVAL_RESERVE` before the deadline (an unanswered one is no evidence),
//! and every later probe ends `FINAL_STEP` before the deadline, so a slow API never leaves the
//! credentials behind once the manifest is gone.
//!
//! [`decide`]: decommission::decide
//! [`confirm`]: decommission::confirm

use crate::output::outln;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

use crate::cli::{OutputFormat, PreStopArgs};
use crate::engine::{Engine, Inputs};
use crate::etcd_member::{self, LeaveReport};
use kube_anchor_core::config::EtcdMember;
use kube_anchor_core::config::Role;
use kube_anchor_core::decommission::{self, Decision, FilesHere, Lookup, ThisPod};
use kube_anchor_core::hostpath::HostPath;
use kube_anchor_core::runtime::RuntimeView;
use kube_anchor_core::staticpod;
use kube_anchor_k8s::cri::{RuntimeObserver, StaticPodRef};
use kube_anchor_k8s::direct::HealthCheck;
use kube_anchor_k8s::evidence::{decide_with_evidence, remaining};
use kube_anchor_k8s::kubeapi::{self, API_TIMEOUT, EventSink};

/// Kept free at the end of --timeout for removing the credentials.
const FINAL_STEP: Duration = Duration::from_secs(2);
/// Kept free after the evidence for the removal (at most half of --timeout): the manifest, a
/// short wait for the static pod to stop, the credentials.
const REMOVAL_RESERVE: Duration = Duration::from_secs(5);

pub(crate) async fn run(args: PreStopArgs) -> anyhow::Result<ExitCode> {
    let deadline = Instant::now() + args.timeout;
    match tokio::time::timeout(args.timeout, run_inner(&args, deadline)).await {
        Ok(result) => result,
        Err(_) => anyhow::bail!(
            "pre-stop did not finish within {}; stopped where it was",
            humantime::format_duration(args.timeout)
        ),
    }
}

async fn run_inner(args: &PreStopArgs, deadline: Instant) -> anyhow::Result<ExitCode> {
    let engine = args.node.engine()?;
    let component = args.component.name(engine.roots())?;
    let evidence_until = deadline
        .checked_sub(REMOVAL_RESERVE.min(args.timeout / 2))
        .unwrap_or_else(Instant::now);
    // One client for the evidence and for watching the static pod stop; why there is none is
    // itself part of the evidence ("no API client" keeps everything).
    let client: Result<kube::Client, String> = match tokio::time::timeout(
        remaining(evidence_until),
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
    let pod = static_pod_of(&engine, &component, args.identity.node_name.as_deref());
    let static_pod = pod.as_ref().map(|p| decommission::StaticPodName {
        namespace: p.namespace.clone(),
        name: p.name.clone(),
    });
    let decision = decide_with_evidence(
        args.cleanup.into(),
        guard,
        args.confirm_interval,
        this.as_ref(),
        &client,
        &component,
        static_pod.as_ref(),
        evidence_until,
        // Every anchor on the node shares the state dir: a dependent's ledger says whether its
        // own hook has taken it off the node yet.
        &|dependent| match engine.ledger(dependent) {
            Ok(ledger) => FilesHere::of(&ledger),
            Err(e) => FilesHere::Unreadable(e.to_string()),
        },
    )
    .await;
    let reason = match &decision {
        Decision::Keep(reason) => {
            tracing::info!(%component, decision = "keep", %reason, "pre-stop: keeping the component on this node");
            report(args.output, &component, "keep", reason, &[]);
            return Ok(ExitCode::SUCCESS);
        }
        Decision::Held(reason) => {
            tracing::warn!(%component, decision = "held", %reason, "pre-stop: the guard keeps the component on this node");
            warn_event(&client, this.as_ref(), "DecommissionHeld", &component, reason, deadline).await;
            report(args.output, &component, "held", reason, &[]);
            return Ok(ExitCode::SUCCESS);
        }
        Decision::Remove(reason) => reason.clone(),
    };
    // etcd: the member leaves the cluster before any file goes, and only with quorum to spare.
    let (etcd, unreadable) = match etcd_member(args, &engine) {
        Ok(etcd) => (etcd, None),
        Err(why) => (None, Some(why)),
    };
    let leave = async {
        let Some((inputs, member)) = &etcd else {
            return unreadable.map(|why| format!("the etcd member's config cannot be read ({why})"));
        };
        leave_cluster(args, &engine, inputs, member, deadline).await
    };
    if let Some(why) = leave.await {
        // Loud: a Warning Event, a non-zero exit (the kubelet adds its FailedPreStopHook Event)
        // and the intent kept in the membership record for the next hook and for `status`.
        let reason = format!("{reason}, but the etcd member stays: {why}; every file is kept");
        tracing::error!(%component, decision = "held", %reason, "pre-stop: etcd membership keeps the component on this node");
        warn_event(&client, this.as_ref(), "MembershipHeld", &component, &reason, deadline).await;
        report(args.output, &component, "held", &reason, &[]);
        return Ok(ExitCode::FAILURE);
    }
    tracing::warn!(%component, decision = "remove", %reason, "pre-stop: decommissioning the component on this node");
    engine.decommission(&component, &reason, args.identity.pod_name.as_deref())?;
    give_back_turn(args, client.as_ref().ok(), &component, deadline).await;

    if let Some(command) = &args.before_remove {
        let budget = remaining(deadline).saturating_sub(FINAL_STEP);
        run_hook(command, budget).await?;
    }
    let manifests = engine.remove_roles(&component, &[Role::Manifest])?;
    wait_stopped(args, client.as_ref().ok(), pod, deadline).await;
    let credentials = engine.remove_roles(&component, &[Role::Credential])?;
    let mut removed: Vec<HostPath> = manifests.removed.into_iter().chain(credentials.removed).collect();
    if let Some((inputs, member)) = &etcd {
        // The data dir goes only once etcd has stopped and its database is saved.
        let until = deadline - FINAL_STEP.min(remaining(deadline));
        if etcd_member::wait_etcd_stopped(&engine, inputs, member, until).await {
            match etcd_member::save_and_remove_data_dir(&engine, &component, member) {
                Ok(saved) => {
                    if let Some(s) = &saved {
                        tracing::info!(%component, snapshot = %s.snapshot.display(), pruned = s.pruned.len(), "pre-stop: saved the etcd database");
                    }
                    tracing::info!(%component, data_dir = %member.data_dir, "pre-stop: removed the etcd data dir");
                    removed.push(member.data_dir.clone());
                }
                Err(e) => tracing::warn!(%component, error = %e, "pre-stop: the etcd data dir is kept"),
            }
        } else {
            tracing::warn!(%component, data_dir = %member.data_dir, "pre-stop: etcd still answers; its data dir is kept");
        }
    }
    for notice in manifests.notices.iter().chain(&credentials.notices) {
        tracing::warn!(%component, "{notice:?}");
    }
    tracing::info!(%component, removed = removed.len(), "pre-stop: removed");
    report(args.output, &component, "remove", &reason, &removed);
    Ok(ExitCode::SUCCESS)
}

/// Pause between leave attempts that may pass when asked again.
const LEAVE_RETRY: Duration = Duration::from_secs(2);

/// The member leaves the cluster, asked again while the refusal may pass later (etcd answering
/// again, a member back to health) and time is left for the removal after it. `None` once it
/// has left (or was not a member); why not otherwise, recorded with the intent.
async fn leave_cluster(
    args: &PreStopArgs,
    engine: &Engine,
    inputs: &Inputs,
    member: &EtcdMember,
    deadline: Instant,
) -> Option<String> {
    let component = &inputs.anchor.name;
    let retry_until = deadline
        .checked_sub(REMOVAL_RESERVE.min(args.timeout / 2))
        .unwrap_or_else(Instant::now);
    let mut attempts = 0u32;
    let why = loop {
        attempts += 1;
        if let Err(e) = etcd_member::ask_leave(engine, component, args.identity.pod_name.as_deref()) {
            tracing::warn!(%component, error = %e, "pre-stop: cannot record the intent to leave");
        }
        let budget = remaining(deadline).saturating_sub(FINAL_STEP);
        match tokio::time::timeout(budget, etcd_member::leave_step(engine, inputs, member)).await {
            Ok(Ok(LeaveReport::Removed { id })) => {
                tracing::warn!(%component, member_id = %format!("{id:x}"), attempts, "pre-stop: removed this node's etcd member");
                return None;
            }
            Ok(Ok(LeaveReport::NotAMember)) => {
                tracing::info!(%component, "pre-stop: this node is not an etcd member");
                return None;
            }
            Ok(Ok(LeaveReport::Refused { reason, may_pass_later })) => {
                if may_pass_later && Instant::now() + LEAVE_RETRY < retry_until {
                    tracing::info!(%component, %reason, attempts, "pre-stop: the etcd member may not leave yet; asking again");
                    tokio::time::sleep(LEAVE_RETRY).await;
                    continue;
                }
                break reason;
            }
            Ok(Err(e)) => break crate::logging::error_chain(&anyhow::Error::from(e)),
            Err(_) => {
                break format!(
                    "etcd did not answer within {}",
                    humantime::format_duration(Duration::from_secs(budget.as_secs()))
                );
            }
        }
    };
    let why = format!("{why} (asked {attempts} time(s))");
    if let Err(e) = etcd_member::hold_leave(engine, component, &why) {
        tracing::warn!(%component, error = %e, "pre-stop: cannot record why the member did not leave");
    }
    Some(why)
}

/// A node leaving mid-rollout gives its turn back: no other node takes a turn over on a timer,
/// and this node's Node object stays. Best effort, within a few seconds of the hook's budget.
async fn give_back_turn(args: &PreStopArgs, client: Option<&kube::Client>, component: &str, deadline: Instant) {
    let (Some(client), Some(node), Some(namespace)) = (
        client,
        args.identity.node_name.as_deref(),
        args.identity.pod_namespace.as_deref(),
    ) else {
        return;
    };
    let lease = kubeapi::RolloutLease::new(client.clone(), namespace, component, node, Duration::ZERO);
    let budget = remaining(deadline)
        .saturating_sub(FINAL_STEP)
        .min(Duration::from_secs(5));
    match tokio::time::timeout(budget, lease.release(None)).await {
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

async fn run_hook(command: &str, budget: Duration) -> anyhow::Result<()> {
    tracing::info!(command, "pre-stop: running --before-remove");
    let mut child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .kill_on_drop(true)
        .spawn()?;
    match tokio::time::timeout(budget, child.wait()).await {
        Ok(Ok(status)) if status.success() => Ok(()),
        Ok(Ok(status)) => anyhow::bail!("--before-remove failed ({status}); every file is kept"),
        Ok(Err(e)) => anyhow::bail!("--before-remove could not run: {e}; every file is kept"),
        Err(_) => anyhow::bail!(
            "--before-remove did not finish within {}; every file is kept",
            humantime::format_duration(budget)
        ),
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
async fn wait_stopped(args: &PreStopArgs, client: Option<&kube::Client>, pod: Option<StaticPodRef>, deadline: Instant) {
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
    let until = deadline - FINAL_STEP.min(remaining(deadline));
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
