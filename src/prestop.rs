//! `kube-anchor pre-stop`, the anchor DaemonSet's preStop hook: remove the component from the
//! node only on a real decommission, in a safe order, within a bounded time.
//!
//! 1. Gather evidence (own pod → owning DaemonSet, Node) and [`decide`].
//! 2. Keep: log why and exit 0 — the files stay for the next pod or the next boot.
//! 3. Remove: mark the ledger decommissioned (the daemon in this pod then refuses to write, with
//!    no need for a writable root filesystem), run `--before-remove`, remove the manifest, wait
//!    until the mirror pod is gone or the health URL stops answering, remove the credentials.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::Api;
use serde_json::json;

use crate::cli::{OutputFormat, PreStopArgs};
use crate::config::Role;
use crate::decommission::{self, CleanupMode, Decision, Evidence, Lookup};
use crate::engine::Engine;
use crate::hostpath::HostPath;
use crate::kubeapi::{self, API_TIMEOUT, HealthCheck};
use crate::staticpod;

/// Kept free at the end of --timeout for removing the credentials.
const FINAL_STEP: Duration = Duration::from_secs(2);

pub async fn run(args: PreStopArgs) -> anyhow::Result<ExitCode> {
    let deadline = Instant::now() + args.timeout;
    match tokio::time::timeout(args.timeout, run_inner(&args, deadline)).await {
        Ok(result) => result,
        Err(_) => anyhow::bail!(
            "pre-stop did not finish within {}; stopped where it was",
            humantime::format_duration(args.timeout)
        ),
    }
}

fn remaining(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

async fn run_inner(args: &PreStopArgs, deadline: Instant) -> anyhow::Result<ExitCode> {
    let engine = Engine::new(&args.node.host_root, &args.node.state_dir, &args.node.allowed_roots)?;
    let component = crate::commands::component_name(&args.component, &engine)?;
    // One client for the evidence and for watching the static pod stop; why there is none is
    // itself part of the evidence ("no API client" keeps everything).
    let client: Result<kube::Client, String> = match tokio::time::timeout(
        remaining(deadline),
        kubeapi::client(args.identity.kubeconfig.as_deref()),
    )
    .await
    {
        Ok(Ok(Some(client))) => Ok(client),
        Ok(Ok(None)) => Err("no API client configured".into()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("timed out building the client".into()),
    };
    let decision = match args.cleanup {
        CleanupMode::Guarded => decommission::decide(CleanupMode::Guarded, &gather(args, &client, deadline).await),
        mode => decommission::decide(
            mode,
            &Evidence {
                owner: Lookup::NotFound,
                daemonset: None,
                node: Lookup::NotFound,
            },
        ),
    };
    let reason = match &decision {
        Decision::Keep(reason) => {
            tracing::info!(%component, decision = "keep", %reason, "pre-stop: keeping the component on this node");
            report(args.output, &component, "keep", reason, &[]);
            return Ok(ExitCode::SUCCESS);
        }
        Decision::Remove(reason) => reason.clone(),
    };
    tracing::warn!(%component, decision = "remove", %reason, "pre-stop: decommissioning the component on this node");
    engine.decommission(&component, &reason, args.identity.pod_name.as_deref())?;

    if let Some(command) = &args.before_remove {
        let budget = remaining(deadline).saturating_sub(FINAL_STEP);
        run_hook(command, budget).await?;
    }
    let mirror = mirror_of(&engine, &component, args.identity.node_name.as_deref());
    let manifests = engine.remove_roles(&component, &[Role::Manifest])?;
    wait_stopped(args, client.as_ref().ok(), mirror, deadline).await;
    let credentials = engine.remove_roles(&component, &[Role::Credential])?;
    let removed: Vec<HostPath> = manifests.removed.into_iter().chain(credentials.removed).collect();
    for notice in manifests.notices.iter().chain(&credentials.notices) {
        tracing::warn!(%component, "{notice:?}");
    }
    tracing::info!(%component, removed = removed.len(), "pre-stop: removed");
    report(args.output, &component, "remove", &reason, &removed);
    Ok(ExitCode::SUCCESS)
}

/// Own pod → its DaemonSet owner → that DaemonSet; and the Node. Each lookup is bounded.
async fn gather(args: &PreStopArgs, client: &Result<kube::Client, String>, deadline: Instant) -> Evidence {
    let unavailable = |why: &str| Evidence {
        owner: Lookup::Unavailable(why.into()),
        daemonset: None,
        node: Lookup::Unavailable(why.into()),
    };
    let client = match client {
        Ok(client) => client.clone(),
        Err(why) => return unavailable(why),
    };
    let budget = || API_TIMEOUT.min(remaining(deadline).saturating_sub(FINAL_STEP));
    let (Some(pod_name), Some(namespace), Some(node_name)) = (
        &args.identity.pod_name,
        &args.identity.pod_namespace,
        &args.identity.node_name,
    ) else {
        return unavailable("POD_NAME, POD_NAMESPACE and NODE_NAME are needed to look anything up");
    };
    let node = kubeapi::lookup(&Api::<Node>::all(client.clone()), node_name, budget())
        .await
        .map(|n| decommission::node_facts(&n));
    let owner = kubeapi::lookup(&Api::<Pod>::namespaced(client.clone(), namespace), pod_name, budget())
        .await
        .map(|p| decommission::daemonset_owner(&p));
    let daemonset = match &owner {
        Lookup::Found(Some(owner)) => Some(
            kubeapi::lookup(&Api::<DaemonSet>::namespaced(client, namespace), &owner.name, budget())
                .await
                .map(|d| decommission::daemonset_facts(&d)),
        ),
        _ => None,
    };
    let evidence = Evidence { owner, daemonset, node };
    tracing::debug!(?evidence, "pre-stop evidence");
    evidence
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
fn mirror_of(engine: &Engine, component: &str, node: Option<&str>) -> Option<(String, String)> {
    let ledger = engine.ledger(component).ok()?;
    let entry = ledger.entries().iter().find(|e| e.role == Role::Manifest)?;
    let bytes = engine.fs.read(&entry.path).ok()??;
    let pod = staticpod::parse(entry.path.as_path(), std::str::from_utf8(&bytes).ok()?).ok()?;
    Some((pod.namespace, format!("{}-{}", pod.name, node?.to_lowercase())))
}

/// Waits (bounded) until the static pod has stopped: its mirror pod is gone, or the health URL
/// stops answering. With neither to look at, there is nothing to wait for.
async fn wait_stopped(
    args: &PreStopArgs,
    client: Option<&kube::Client>,
    mirror: Option<(String, String)>,
    deadline: Instant,
) {
    let health = args
        .health_url
        .as_deref()
        .and_then(|u| HealthCheck::new(u, args.health_ca_file.as_deref()).ok());
    let client = client.filter(|_| mirror.is_some());
    if client.is_none() && health.is_none() {
        return;
    }
    let until = deadline - FINAL_STEP.min(remaining(deadline));
    while Instant::now() < until {
        if let Some(h) = &health
            && h.check().await.is_err()
        {
            tracing::info!(url = h.url(), "the component stopped answering");
            return;
        }
        if let (Some(c), Some((ns, name))) = (&client, &mirror) {
            let pods: Api<Pod> = Api::namespaced((*c).clone(), ns);
            if let Lookup::NotFound = kubeapi::lookup(&pods, name, API_TIMEOUT.min(remaining(deadline))).await {
                tracing::info!(mirror_pod = %name, "the static pod is gone");
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    tracing::warn!("the static pod did not stop in time; removing the credentials anyway");
}

fn report(format: OutputFormat, component: &str, decision: &str, reason: &str, removed: &[HostPath]) {
    match format {
        OutputFormat::Json => println!(
            "{}",
            json!({"component": component, "decision": decision, "reason": reason, "removed": removed})
        ),
        OutputFormat::Text => {
            println!("{component}: {decision} ({reason})");
            for p in removed {
                println!("  removed    {p}");
            }
        }
    }
}
