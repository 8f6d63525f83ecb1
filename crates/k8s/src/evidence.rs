//! The removal evidence: what the API says about this pod, its DaemonSet, its Node and the
//! component's anchors, gathered within a deadline and judged by the pure
//! `decommission::decide`. Shared by the anchors' preStop hook and the checkpointer's.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::Api;
use kube_anchor_core::decommission::{
    self, AnchorPod, Anchors, CleanupMode, Decision, Evidence, FilesHere, Guard, Looks, Lookup, NextLook,
    StaticPodName, ThisPod,
};

use crate::kubeapi::{self, API_TIMEOUT};

/// What is left of the time until `deadline`.
pub fn remaining(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

/// The decision of a preStop hook (the anchors' and the checkpointer's): under `guarded`, the
/// evidence gathered by `evidence_until`; when it says remove, in dependency order
/// ([`decommission::removal_order`]: each dependent that goes with the component has left this
/// node first, `files_here` reading their ledgers on it), then gathered again
/// `confirm_interval` later and confirmed. `static_pod` names the component's static pod, whose
/// mirror pods on the other nodes the guard counts as Ready copies too.
#[allow(clippy::too_many_arguments)]
pub async fn decide_with_evidence(
    cleanup: CleanupMode,
    guard: Guard,
    confirm_interval: Duration,
    this: Option<&ThisPod>,
    client: &Result<kube::Client, String>,
    component: &str,
    static_pod: Option<&StaticPodName>,
    evidence_until: Instant,
    files_here: &(dyn Fn(&str) -> FilesHere + Sync),
) -> Decision {
    match (cleanup, this, client) {
        (CleanupMode::Guarded, None, _) => {
            Decision::Keep("POD_NAME, POD_NAMESPACE and NODE_NAME are needed to look anything up".into())
        }
        (CleanupMode::Guarded, Some(_), Err(why)) => Decision::Keep(format!("{why}: no evidence")),
        (CleanupMode::Guarded, Some(this), Ok(client)) => {
            // The looks' order and timing are `decommission::Looks`'s; here only the evidence
            // is gathered and the pauses slept.
            let started = Instant::now();
            let mut looks = Looks::new(
                this.clone(),
                guard,
                confirm_interval,
                evidence_until.saturating_duration_since(started),
            );
            let mut said = false;
            loop {
                let evidence = gather(client, this, component, static_pod, evidence_until).await;
                tracing::debug!(?evidence, "pre-stop evidence");
                match looks.look(&evidence, files_here, started.elapsed()) {
                    NextLook::Decided(decision) => return decision,
                    NextLook::Again { at, waiting_for } => {
                        match waiting_for {
                            Some(why) if !std::mem::replace(&mut said, true) => {
                                tracing::info!(waiting_for = %why, "pre-stop: removing in dependency order")
                            }
                            Some(_) => {}
                            None => tracing::info!("pre-stop: looking again before removing"),
                        }
                        tokio::time::sleep_until((started + at).into()).await;
                    }
                }
            }
        }
        (CleanupMode::Never, _, _) => Decision::Keep("--cleanup never".into()),
        (CleanupMode::Always, _, _) => Decision::Remove("--cleanup always".into()),
    }
}

/// How long a copy asked at its readiness URL may take to answer: a node that lost power
/// answers nothing, and a connect to it runs into this bound.
const COPY_PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// The other nodes with a live anchor pod of the component whose mirror pod of `static_pod` is
/// Running and Ready, and those whose copy, asked at its own readiness URL (as the kubelet's
/// probe asks it: [`kube_anchor_core::pod_status::readiness_url`], the certificate not
/// verified), did not answer 2xx within [`COPY_PROBE_TIMEOUT`]: a Ready posted before a power
/// loss stays in the API for the node lifecycle controller's grace. A lookup that fails counts
/// the node out.
async fn other_copies(
    client: &kube::Client,
    static_pod: &StaticPodName,
    this: &ThisPod,
    pods: &[AnchorPod],
    until: Instant,
) -> (std::collections::BTreeSet<String>, std::collections::BTreeSet<String>) {
    let api = Api::<Pod>::namespaced(client.clone(), &static_pod.namespace);
    let nodes: std::collections::BTreeSet<&str> = pods
        .iter()
        .filter(|p| !p.terminating)
        .filter_map(|p| p.node.as_deref())
        .filter(|n| *n != this.node)
        .collect();
    let looks = nodes.iter().map(|node| {
        let (api, name) = (api.clone(), static_pod.mirror_pod(node));
        async move {
            let found = kubeapi::lookup(&api, &name, API_TIMEOUT.min(remaining(until))).await;
            let Lookup::Found(pod) = found else {
                return (false, false);
            };
            let ready = static_pod.ready_on(&pod, node);
            let silent = match kube_anchor_core::pod_status::readiness_url(&pod) {
                Some(url) => !copy_answers(&url, COPY_PROBE_TIMEOUT.min(remaining(until))).await,
                None => false,
            };
            (ready, silent)
        }
    });
    let answers = futures::future::join_all(looks).await;
    let pick = |which: fn(&(bool, bool)) -> bool| {
        nodes
            .iter()
            .zip(&answers)
            .filter(|(_, a)| which(a))
            .map(|(n, _)| n.to_string())
            .collect()
    };
    (pick(|a| a.0), pick(|a| a.1))
}

/// Whether `url` answers 2xx within `timeout`.
async fn copy_answers(url: &str, timeout: Duration) -> bool {
    let Ok(check) = crate::direct::HealthCheck::new(url, None) else {
        return false;
    };
    match tokio::time::timeout(timeout, check.check()).await {
        Ok(Ok(())) => true,
        Ok(Err(why)) => {
            tracing::debug!(%url, ?why, "pre-stop: another copy did not answer Ready at its readiness URL");
            false
        }
        Err(_) => {
            tracing::debug!(%url, "pre-stop: another copy did not answer at its readiness URL in time");
            false
        }
    }
}

/// Own pod → its DaemonSet owner → that DaemonSet; the Node; every anchor DaemonSet and pod of
/// the component; every anchor DaemonSet and pod (of any component), for those on this node
/// that depend on this one and whether they stay. Every lookup ends by `until`.
async fn gather(
    client: &kube::Client,
    this: &ThisPod,
    component: &str,
    static_pod: Option<&StaticPodName>,
    until: Instant,
) -> Evidence {
    let budget = || API_TIMEOUT.min(remaining(until));
    let selector = decommission::anchor_selector(component);
    let (nodes, own_pods) = (
        Api::<Node>::all(client.clone()),
        Api::<Pod>::namespaced(client.clone(), &this.namespace),
    );
    let (all_daemonsets, all_pods) = (Api::<DaemonSet>::all(client.clone()), Api::<Pod>::all(client.clone()));
    let every_anchor = decommission::every_anchor_selector();
    let (node, pod, daemonsets, pods, every_pod, every_daemonset) = futures::join!(
        kubeapi::lookup(&nodes, &this.node, budget()),
        kubeapi::lookup(&own_pods, &this.name, budget()),
        kubeapi::list_all(&all_daemonsets, &selector, budget()),
        kubeapi::list_all(&all_pods, &selector, budget()),
        kubeapi::list_all(&all_pods, &every_anchor, budget()),
        kubeapi::list_all(&all_daemonsets, &every_anchor, budget()),
    );
    let node = node.map(|n| decommission::node_facts(&n));
    let node_labels = match &node {
        Lookup::Found(n) => Some(&n.labels),
        _ => None,
    };
    let dependents = match (every_pod, every_daemonset) {
        (Lookup::Found(pods), Lookup::Found(daemonsets)) => Lookup::Found(decommission::dependents(
            component,
            &this.node,
            node_labels,
            &pods,
            &daemonsets,
        )),
        (Lookup::Unavailable(why), _) | (_, Lookup::Unavailable(why)) => Lookup::Unavailable(why),
        _ => Lookup::Unavailable("a list answered 404".into()),
    };
    let pod = pod.map(|p| decommission::pod_facts(&p));
    let anchors = match (daemonsets, pods) {
        (Lookup::Found(daemonsets), Lookup::Found(pods)) => {
            let pods: Vec<AnchorPod> = pods.iter().map(decommission::anchor_pod).collect();
            let (static_pods_ready, silent_copies) = match static_pod {
                Some(static_pod) => other_copies(client, static_pod, this, &pods, until).await,
                None => Default::default(),
            };
            Lookup::Found(Anchors {
                daemonsets: daemonsets.iter().map(decommission::daemonset_facts).collect(),
                pods,
                static_pods_ready,
                silent_copies,
            })
        }
        (Lookup::Unavailable(why), _) | (_, Lookup::Unavailable(why)) => Lookup::Unavailable(why),
        _ => Lookup::Unavailable("a list answered 404".into()),
    };
    let daemonset = match &pod {
        Lookup::Found(decommission::PodFacts { owner: Some(owner), .. }) => Some(
            kubeapi::lookup(
                &Api::<DaemonSet>::namespaced(client.clone(), &this.namespace),
                &owner.name,
                budget(),
            )
            .await
            .map(|d| decommission::daemonset_facts(&d)),
        ),
        _ => None,
    };
    Evidence {
        pod,
        daemonset,
        node,
        anchors: Some(anchors),
        dependents: Some(dependents),
    }
}
