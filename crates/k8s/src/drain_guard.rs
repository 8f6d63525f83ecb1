//! The drain guard in the API ([`kube_anchor_core::drain_guard`] decides): this node's guard
//! pod, the Node's cordon, the component's DaemonSet and the chart's PodDisruptionBudget.

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use kube_anchor_core::decommission::Lookup;
use kube_anchor_core::drain_guard::{GuardFacts, SPEC_ANNOTATION, SeenGuard};

use crate::kubeapi::{API_TIMEOUT, bounded, lookup};

#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    #[error("reading {kind} {name}: {reason}")]
    Read {
        kind: &'static str,
        name: String,
        reason: String,
    },
    #[error("the anchor pod {0} has no DaemonSet controlling it")]
    NoDaemonSet(String),
    #[error("{action} {kind} {name}: {reason}")]
    Write {
        action: &'static str,
        kind: &'static str,
        name: String,
        reason: String,
    },
}

/// The label that tells a release's DaemonSets apart (the chart's `kube-anchor.io/daemonset`).
const DAEMONSET_LABEL: &str = "kube-anchor.io/daemonset";

/// Where the guard of one component on one node lives.
#[derive(Debug, Clone)]
pub struct GuardPlace {
    pub namespace: String,
    pub node: String,
    /// The chart's PodDisruptionBudget over the component's guards.
    pub budget: String,
    /// This anchor pod (the guard's controller; its DaemonSet says how many nodes there are).
    pub anchor_pod: String,
    pub guard: String,
}

/// What [`observe`] read besides the facts: the anchor pod's UID, for the guard's owner.
#[derive(Debug, Clone)]
pub struct Observed {
    pub facts: GuardFacts,
    pub anchor_uid: String,
    /// Whether the budget exists: without it a guard would guard nothing.
    pub budget_exists: bool,
}

fn read<T>(kind: &'static str, name: &str, lookup: Lookup<T>) -> Result<Option<T>, GuardError> {
    match lookup {
        Lookup::Found(t) => Ok(Some(t)),
        Lookup::NotFound => Ok(None),
        Lookup::Unavailable(reason) => Err(GuardError::Read {
            kind,
            name: name.to_owned(),
            reason,
        }),
    }
}

/// Reads the Node, this anchor pod and its DaemonSet, the budget and the guard. `wanted` is
/// left `None`: the caller knows what the node runs.
pub async fn observe(client: &Client, place: &GuardPlace) -> Result<Observed, GuardError> {
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), &place.namespace);
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &place.namespace);
    let (node, anchor, budget, guard) = futures::join!(
        lookup(&nodes, &place.node, API_TIMEOUT),
        lookup(&pods, &place.anchor_pod, API_TIMEOUT),
        lookup(&budgets, &place.budget, API_TIMEOUT),
        lookup(&pods, &place.guard, API_TIMEOUT),
    );
    let node = read("Node", &place.node, node)?;
    let anchor = read("Pod", &place.anchor_pod, anchor)?.ok_or_else(|| GuardError::Read {
        kind: "Pod",
        name: place.anchor_pod.clone(),
        reason: "not found".into(),
    })?;
    let budget = read("PodDisruptionBudget", &place.budget, budget)?;
    let guard = read("Pod", &place.guard, guard)?;
    let daemonset = anchor
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true) && o.kind == "DaemonSet")
        .map(|o| o.name.clone())
        .ok_or_else(|| GuardError::NoDaemonSet(place.anchor_pod.clone()))?;
    // Every DaemonSet of the release (a chart with perNode values has one per node), found by
    // this one's selector without its own name.
    let daemonsets: Api<DaemonSet> = Api::namespaced(client.clone(), &place.namespace);
    let own = read(
        "DaemonSet",
        &daemonset,
        lookup(&daemonsets, &daemonset, API_TIMEOUT).await,
    )?;
    let release: Vec<String> = own
        .as_ref()
        .and_then(|d| d.spec.as_ref()?.selector.match_labels.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, _)| k != DAEMONSET_LABEL)
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let nodes = match own {
        None => None,
        Some(_) if release.is_empty() => None,
        Some(_) => {
            let listed = bounded(daemonsets.list(&ListParams::default().labels(&release.join(","))))
                .await
                .map_err(|reason| GuardError::Read {
                    kind: "DaemonSet",
                    name: release.join(","),
                    reason,
                })?;
            Some(
                listed
                    .items
                    .iter()
                    .filter_map(|d| d.status.as_ref())
                    .map(|s| s.desired_number_scheduled)
                    .sum(),
            )
        }
    };
    let facts = GuardFacts {
        wanted: None,
        seen: guard.map(|g| SeenGuard {
            digest: g
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(SPEC_ANNOTATION).cloned()),
            terminating: g.metadata.deletion_timestamp.is_some(),
        }),
        cordoned: node.and_then(|n| n.spec?.unschedulable).unwrap_or(false),
        nodes,
        min_available: budget
            .as_ref()
            .and_then(|b| b.spec.as_ref()?.min_available.clone())
            .and_then(|m| match m {
                IntOrString::Int(n) => Some(n),
                IntOrString::String(_) => None,
            }),
    };
    Ok(Observed {
        facts,
        anchor_uid: anchor.metadata.uid.unwrap_or_default(),
        budget_exists: budget.is_some(),
    })
}

/// A request bounded by [`API_TIMEOUT`], the API's own status code kept.
async fn answered<T>(
    request: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, (Option<u16>, String)> {
    match tokio::time::timeout(API_TIMEOUT, request).await {
        Ok(Ok(t)) => Ok(t),
        Ok(Err(kube::Error::Api(status))) => Err((Some(status.code), status.message)),
        Ok(Err(e)) => Err((None, e.to_string())),
        Err(_) => Err((
            None,
            format!("no answer within {}", humantime::format_duration(API_TIMEOUT)),
        )),
    }
}

pub async fn create(client: &Client, place: &GuardPlace, guard: &Pod) -> Result<(), GuardError> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &place.namespace);
    match answered(pods.create(&PostParams::default(), guard)).await {
        // 409: another pass got there first.
        Ok(_) | Err((Some(409), _)) => Ok(()),
        Err((_, reason)) => Err(GuardError::Write {
            action: "creating",
            kind: "Pod",
            name: place.guard.clone(),
            reason,
        }),
    }
}

pub async fn delete(client: &Client, place: &GuardPlace) -> Result<(), GuardError> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &place.namespace);
    match answered(pods.delete(&place.guard, &DeleteParams::default())).await {
        Ok(_) | Err((Some(404), _)) => Ok(()),
        Err((_, reason)) => Err(GuardError::Write {
            action: "deleting",
            kind: "Pod",
            name: place.guard.clone(),
            reason,
        }),
    }
}

/// Sets the budget's `spec.minAvailable` (every anchor of the component writes the same value).
pub async fn set_min_available(client: &Client, place: &GuardPlace, min_available: i32) -> Result<(), GuardError> {
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &place.namespace);
    let patch = serde_json::json!({"spec": {"minAvailable": min_available}});
    bounded(budgets.patch(&place.budget, &PatchParams::default(), &Patch::Merge(&patch)))
        .await
        .map(|_| ())
        .map_err(|reason| GuardError::Write {
            action: "setting minAvailable of",
            kind: "PodDisruptionBudget",
            name: place.budget.clone(),
            reason,
        })
}
