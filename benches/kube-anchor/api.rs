//! What kube-anchor costs the API server in steady state, counted by the server itself: a real
//! control plane (tests/support/cluster.rs) with three kubemark nodes, on each an anchor
//! (`kube-anchor run`, its static pod running, so its mirror-pod watch sees a Running pod) and a
//! checkpointer (`kube-anchor checkpointer`, default `--interval` 5 s) with a checkpointed
//! DaemonSet pod. Once every checkpoint is written and every anchor Ready, the API server's audit
//! log (every request but the kubelets', logged once when received) is read before and after
//! `API_COST_SECONDS` (default 600; 20 in the smoke run), and the requests of each part are
//! counted by their user agent (`kube-anchor/<version> (<verb>…; node <node>)`).
//!
//! The checkpointer also asks the node's kubelet for `/pods` at every pass; that costs the
//! kubelet, not the API server, and its size and latency are measured here too.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::DaemonSet;
use kube::api::{Api, PostParams};

use crate::support::checkpointer::CheckpointerProcess;
use crate::support::control_plane::{AuditedRequest, ControlPlane};
use crate::support::daemon::{ConfigVolume, Daemon, anchor_config, http_get};
use crate::support::nodes::NodeHandle;
use crate::{Row, ms, percentiles};

const NODES: usize = 3;
/// bootkube's pod-checkpointer: one LIST of the node's pods every 5 s.
const BOOTKUBE_REQUESTS_PER_HOUR: u32 = 720;
const SETTLE: Duration = Duration::from_secs(120);

pub fn measure(quick: bool) -> Vec<Row> {
    let seconds: u64 = std::env::var("API_COST_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if quick { 20 } else { 600 });
    tokio::runtime::Runtime::new().unwrap().block_on(steady_state(seconds))
}

async fn steady_state(seconds: u64) -> Vec<Row> {
    let cp = ControlPlane::start().await;
    cp.start_controllers();
    let ns = cp.namespace("cost").await;
    let admin = cp.admin().await;
    let ds: DaemonSet = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "agent"},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {
                "metadata": {"labels": {"app": "agent"}, "annotations": {"checkpointer.alpha.coreos.com/checkpoint": "true"}},
                "spec": {"tolerations": [{"operator": "Exists"}], "containers": [{"name": "app", "image": "registry.example/app:1"}]}
            }
        }
    }))
    .unwrap();
    Api::<DaemonSet>::namespaced(admin, &ns)
        .create(&PostParams::default(), &ds)
        .await
        .unwrap();

    // The AnchorStatus CRD: each anchor writes its node's object once, then only watches it.
    cp.anchor_service_account().await;
    let work = tempfile::tempdir().unwrap();
    let mut nodes: Vec<NodeHandle> = Vec::new();
    let mut anchors: Vec<(Daemon, ConfigVolume)> = Vec::new();
    let mut checkpointers: Vec<CheckpointerProcess> = Vec::new();
    for i in 0..NODES {
        let node = cp.add_node(&format!("cost-{i}"), &[]).await;
        let dir = work.path().join(&node.name);
        std::fs::create_dir_all(&dir).unwrap();
        let pod = format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: kube-scheduler, namespace: {ns}}}\nspec:\n  hostNetwork: true\n  containers: [{{name: s, image: 'registry.k8s.io/kube-scheduler:v1.36.3'}}]\n"
        );
        let config = anchor_config(
            "kube-scheduler",
            &[("scheduler.conf", "/etc/kubernetes/scheduler.conf", "0600")],
            "/etc/kubernetes/manifests/kube-scheduler.yaml",
        );
        let volume = ConfigVolume::new(
            &dir.join("config"),
            &[
                ("anchor.yaml", config.as_bytes()),
                ("pod.yaml", pod.as_bytes()),
                ("scheduler.conf", b"kubeconfig"),
            ],
        );
        let kubeconfig = cp.admin_kubeconfig.display().to_string();
        let anchor = Daemon::start(
            &volume.config(),
            &node.host_root(),
            &node.name,
            &["--kubeconfig".into(), kubeconfig],
            &dir.join("run.log"),
        );
        anchors.push((anchor, volume));
        std::fs::write(dir.join("boot_id"), "boot-1").unwrap();
        checkpointers.push(CheckpointerProcess::start(
            &node,
            &cp.admin_kubeconfig,
            &dir,
            &["--ready-window", "1s"],
        ));
        nodes.push(node);
    }

    // Steady state: every anchor Ready (its mirror pod runs what it wrote), a checkpoint on every
    // node.
    let deadline = Instant::now() + SETTLE;
    loop {
        let ready = anchors.iter().all(|(d, _)| matches!(d.get("/readyz"), Some((200, _))));
        let checkpointed = nodes.iter().all(|n| {
            std::fs::read_dir(n.host_root().join("etc/kubernetes/inactive-manifests"))
                .is_ok_and(|mut d| d.next().is_some())
        });
        if ready && checkpointed {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no steady state within {SETTLE:?} (anchors ready: {ready}, checkpoints: {checkpointed}); logs in {}",
            work.path().display()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    tokio::time::sleep(Duration::from_secs(5)).await;

    // Requests of one part on this bed's nodes: (watches, every other request).
    let count = |verb: &str| {
        let agent = format!("kube-anchor/{} ({verb}", env!("CARGO_PKG_VERSION"));
        let ours = |r: &AuditedRequest| {
            nodes
                .iter()
                .any(|n| r.user_agent.ends_with(&format!("; node {})", n.name)))
        };
        let (watches, others): (Vec<_>, Vec<_>) = cp
            .audited_requests(&agent)
            .into_iter()
            .filter(ours)
            .partition(|r| r.verb == "watch");
        let others: Vec<String> = others.iter().map(|r| format!("{} {}", r.verb, r.request_uri)).collect();
        (watches.len(), others)
    };
    let before = [count("run "), count("checkpointer;")];
    for (part, (watches, _)) in ["run", "checkpointer"].iter().zip(&before) {
        // Each opened its watch on start: a count of nothing would measure nothing.
        assert!(
            *watches >= NODES,
            "{part}: {watches} watches in the audit log for {NODES} nodes"
        );
    }
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let after = [count("run "), count("checkpointer;")];

    // The kubelet side of the checkpointer's passes.
    let kubelet = nodes[0].kubelet_port;
    let mut polls = Vec::new();
    let mut bytes = 0;
    for _ in 0..50 {
        let start = Instant::now();
        let (status, body) = http_get(kubelet, "/pods").expect("the kubelet answers /pods");
        polls.push(start.elapsed());
        assert_eq!(status, 200, "{body}");
        bytes = body.len();
    }
    let (poll50, poll99) = percentiles(polls);

    let per_node_hour = |n: usize| n as f64 * 3600.0 / seconds as f64 / NODES as f64;
    let mut rows = Vec::new();
    for (i, part) in ["run", "checkpointer"].iter().enumerate() {
        let watches = after[i].0 - before[i].0;
        let others = &after[i].1[before[i].1.len()..];
        rows.push(Row::new(
            format!("API requests per node per hour, {part} ({NODES} nodes, {seconds} s)"),
            format!(
                "{:.1} ({:.1} watch, {:.1} other{})",
                per_node_hour(watches + others.len()),
                per_node_hour(watches),
                per_node_hour(others.len()),
                match others.first() {
                    Some(first) => format!(", e.g. {first}"),
                    None => String::new(),
                }
            ),
            "watches only",
        ));
    }
    rows.push(Row::new(
        "API requests per node per hour, bootkube checkpointer",
        format!("{BOOTKUBE_REQUESTS_PER_HOUR} LIST (one per 5 s)"),
        "reference",
    ));
    rows.push(Row::new(
        "kubelet /pods per checkpointer pass (720 per hour at 5 s)",
        format!("{bytes} B, p50 {}, p99 {}", ms(poll50), ms(poll99)),
        "kubelet cost, not API",
    ));
    drop(checkpointers);
    drop(anchors);
    rows
}
