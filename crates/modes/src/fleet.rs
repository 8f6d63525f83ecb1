//! `kube-anchor fleet`: the table of nodes × components the anchors publish (`AnchorStatus`),
//! and who holds the rollout turn for which components.

use std::collections::BTreeSet;
use std::process::ExitCode;
use std::time::SystemTime;

use anyhow::Context;
use k8s_openapi::api::coordination::v1::Lease;
use serde_json::json;

use crate::cli::{FleetArgs, OutputFormat};
use crate::output::EXIT_OUT_OF_SYNC;
use crate::output::outln;
use kube_anchor_core::node_status::{NodeStatus, short_hash};
use kube_anchor_core::rollout;
use kube_anchor_k8s::{anchor_status, kubeapi};

/// A component's rollout turn as `fleet` shows it.
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Rollout {
    component: String,
    lease: String,
    /// The node rolling a version out, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    holder: Option<String>,
    /// RFC 3339: since when it holds the turn.
    #[serde(skip_serializing_if = "Option::is_none")]
    since: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    held_seconds: Option<u64>,
    /// The input revision last rolled back, and on which node: no node tries it again.
    #[serde(skip_serializing_if = "Option::is_none")]
    failed_revision: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    failed_on: Option<String>,
}

const LEASE_PREFIX: &str = "kube-anchor-";

pub(crate) async fn fleet(args: FleetArgs) -> anyhow::Result<ExitCode> {
    let kubeconfig = args.kubeconfig.as_deref().filter(|p| !p.as_os_str().is_empty());
    let client = kubeapi::client(kubeconfig, &[], &kubeapi::user_agent("fleet", None))
        .await?
        .context("no kubeconfig and not in a cluster: give --kubeconfig (or KUBECONFIG)")?;
    let statuses = anchor_status::list(client.clone(), args.selector.as_deref())
        .await
        .context("listing AnchorStatus objects (installed with the charts' CRD, anchorstatuses.kube-anchor.io)")?;
    let rollouts: Vec<Rollout> = kubeapi::list_leases(&client, &args.namespace)
        .await
        .with_context(|| format!("listing the rollout Leases in namespace {}", args.namespace))?
        .into_iter()
        .flat_map(rollouts)
        .collect();
    let converged = statuses.iter().all(NodeStatus::healthy);
    match args.output {
        OutputFormat::Json => {
            // The document schemas/fleet.v1.json describes.
            outln!(
                "{}",
                json!({
                    "schemaVersion": 1,
                    "converged": converged,
                    "nodes": statuses,
                    "rollouts": rollouts,
                })
            );
        }
        OutputFormat::Text => print_table(&statuses, &rollouts),
    }
    Ok(if converged {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_OUT_OF_SYNC)
    })
}

/// The rollouts a Lease shows: on the control plane's, each component whose turn its holder
/// holds or whose failed revision it records; on a component's own (an earlier anchor's), that
/// component when it is held or records one.
fn rollouts(lease: Lease) -> Vec<Rollout> {
    let Some(name) = lease.metadata.name.clone() else {
        return vec![];
    };
    let since = lease
        .spec
        .as_ref()
        .and_then(|s| s.acquire_time.clone().filter(|_| s.holder_identity.is_some()));
    let view = if name == rollout::LEASE {
        kubeapi::shared_view(Some(&lease)).unwrap_or_default()
    } else if let Some(component) = name.strip_prefix(LEASE_PREFIX) {
        kubeapi::own_view(&lease, component)
    } else {
        return vec![];
    };
    let components: BTreeSet<&String> = view.components.iter().chain(view.failed.keys()).collect();
    components
        .into_iter()
        .map(|component| {
            let held = view.components.contains(component);
            let since = since.as_ref().filter(|_| held);
            let failed = view.failed.get(component);
            Rollout {
                component: component.clone(),
                holder: view.holder.clone().filter(|_| held),
                held_seconds: since
                    .and_then(|t| SystemTime::now().duration_since(SystemTime::from(t.0)).ok())
                    .map(|d| d.as_secs()),
                since: since.map(|t| humantime::format_rfc3339_seconds(SystemTime::from(t.0)).to_string()),
                failed_revision: failed.map(|f| f.revision.clone()),
                failed_on: failed.map(|f| f.node.clone()),
                lease: name.clone(),
            }
        })
        .collect()
}

fn print_table(statuses: &[NodeStatus], rollouts: &[Rollout]) {
    let rows: Vec<[String; 8]> = statuses
        .iter()
        .map(|s| {
            [
                s.node.clone(),
                s.component.clone(),
                s.applied.clone().unwrap_or_else(|| "-".into()),
                s.last_known_good.clone().unwrap_or_else(|| "-".into()),
                s.state.as_str().to_owned(),
                s.since.clone().unwrap_or_else(|| "-".into()),
                if s.ready { "yes" } else { "no" }.to_owned(),
                if s.bad_versions.is_empty() {
                    "-".into()
                } else {
                    s.bad_versions
                        .iter()
                        .map(|b| format!("{} ({})", short_hash(&b.hash), b.reason))
                        .collect::<Vec<_>>()
                        .join(", ")
                },
            ]
        })
        .collect();
    let header = [
        "NODE",
        "COMPONENT",
        "APPLIED",
        "LAST-KNOWN-GOOD",
        "STATE",
        "SINCE",
        "READY",
        "BAD",
    ];
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &[&str]| {
        let mut out = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == cells.len() {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<w$}  "));
            }
        }
        out
    };
    outln!("{}", line(&header));
    for row in &rows {
        outln!("{}", line(&row.each_ref().map(String::as_str)));
    }
    if statuses.is_empty() {
        outln!("(no AnchorStatus objects: no anchor has published yet)");
    }
    // The newest scheduled snapshot of each component, on whichever node holds it.
    let mut snapshots: Vec<&NodeStatus> = statuses.iter().filter(|s| s.last_snapshot.is_some()).collect();
    snapshots.sort_by(|a, b| (&a.component, &b.last_snapshot).cmp(&(&b.component, &a.last_snapshot)));
    snapshots.dedup_by(|a, b| a.component == b.component);
    for s in snapshots {
        outln!(
            "{}: newest scheduled snapshot {} on {}",
            s.component,
            s.last_snapshot.as_deref().unwrap_or_default(),
            s.node
        );
    }
    for s in statuses.iter().filter(|s| !s.ready && !s.reason.is_empty()) {
        outln!("{} {}: not ready: {}", s.node, s.component, s.reason);
    }
    for r in rollouts {
        let turn = match (&r.holder, r.held_seconds) {
            (Some(holder), Some(secs)) => format!("{holder} rolls it out, for {secs}s"),
            (Some(holder), None) => format!("{holder} rolls it out"),
            (None, _) => "free".into(),
        };
        let failed = match (&r.failed_revision, &r.failed_on) {
            (Some(rev), Some(node)) => format!("; revision {rev} rolled back on {node}"),
            _ => String::new(),
        };
        outln!("rollout {} (Lease {}): {turn}{failed}", r.component, r.lease);
    }
}
