//! One control-plane node (kubeadm's default shape, and every cluster in its first minutes),
//! brought up from nothing with the example script and taken over by every chart. A push that
//! breaks kube-apiserver or etcd takes the only API server down with it, so nothing the API says
//! can judge it: the anchor judges it from what the node's container runtime shows (over the CRI
//! socket, as it would containerd's), rolls it back, and the API comes back. A good version
//! passes its trial despite the outage its own restart causes.
//!
//! Two beds, one node each, run side by side (on one node every API outage leaves the
//! controller-manager in a longer crash-loop back-off, which holds up the DaemonSet rollouts the
//! next push needs, so each bed has at most two pushed outages):
//! - kube-apiserver: a good change passes its trial; then a flag it refuses, and the node loses
//!   power a few seconds into its trial: the kubelet's pre-start step puts last-known-good back
//!   before the kubelet starts, the API answers with no human step, and the anchor tries the
//!   version again and rolls it back with no API (the bad hash in the ledger, the Warning Event
//!   judged from the runtime once the API is back);
//! - etcd: `kube-anchor rollback` on the node during a kube-scheduler trial brings the previous
//!   version back and the anchor keeps it; a good etcd change passes its trial; a flag etcd
//!   refuses (the API goes down with it) with a power cut in its trial, the same way.
//!
//! `KUBE_ANCHOR_GOOD_PUSHES=N` repeats each good push N times.

mod support;

use std::fs;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams};
use support::fixture::succeeded;
use support::processes::test_dir;
use support::selfhosted::{SelfHosted, script};

/// Trials short enough for a test, long enough for a restart on one node. The runtime's view
/// makes a minute safe for kube-apiserver: its mirror pod's late status no longer counts once the
/// runtime runs it and it serves. etcd needs a minute too: while it restarts the API hangs, and
/// the kubelet's deletion of the old mirror pod waits on it (about 20 s here) before it starts
/// the new etcd, time in which no version runs.
const TRIALS: [(&str, &str); 4] = [
    ("etcd", "anchor: {trialPeriod: 60s, logFormat: plain}\n"),
    (
        "kube-apiserver",
        "anchor: {trialPeriod: 60s, crashLoopThreshold: 2, logFormat: plain}\n",
    ),
    (
        "kube-controller-manager",
        "anchor: {trialPeriod: 25s, logFormat: plain}\n",
    ),
    ("kube-scheduler", "anchor: {trialPeriod: 25s, logFormat: plain}\n"),
];

fn upgrade(cluster: &SelfHosted, chart: &str, set: &str) {
    succeeded(
        &format!("cluster.sh upgrade {chart} --set {set}"),
        &script("upgrade", &cluster.dir, &[chart, "--set", set], &[]),
    );
}

fn ledger(cluster: &SelfHosted, component: &str) -> serde_json::Value {
    let path = cluster.nodes[0]
        .host()
        .join(format!("var/lib/kube-anchor/v1/{component}.json"));
    fs::read(&path)
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .map(|v| v["ledger"].clone())
        .unwrap_or_default()
}

fn bad_hashes(cluster: &SelfHosted, component: &str) -> Vec<String> {
    ledger(cluster, component)["bad"]
        .as_array()
        .map(|a| a.iter().filter_map(|b| b["hash"].as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}

/// What a bad push with a power cut in its trial did, as the test saw it.
#[derive(Debug)]
struct RebootedInTrial {
    tried: String,
    /// From the power coming back to the API answering, with no human step.
    boot_to_api: Duration,
    /// From the push to the API answering after the boot.
    push_to_api: Duration,
    /// From the API answering after the boot to the version, tried again by its anchor, being
    /// rolled back and the API answering again.
    retry_rolled_back_after: Duration,
    /// What the kubelet's pre-start step said.
    step: String,
}

/// Pushes `set` to `component`'s chart; once the anchor has written it, a few seconds into its
/// trial (it exits at start: the only API server goes with it), the node loses power and boots
/// again. The kubelet's pre-start step (installed by `cluster.sh node`, run before the kubelet as
/// the drop-in has it) puts last-known-good back: the API must answer again with no human step.
/// The anchor, started once it does, tries the version again (a reboot is no verdict) and rolls
/// it back with no API, the kubelet replacing the static pod since it has reached an API server.
async fn bad_push_rebooted_in_its_trial(cluster: &mut SelfHosted, component: &str, set: &str) -> RebootedInTrial {
    let good = cluster.nodes[0].written_hash(component).expect("a version on the node");
    assert_eq!(
        ledger(cluster, component)["lastKnownGood"].as_str(),
        Some(good.as_str()),
        "{component}: the version before the push is last-known-good"
    );
    let pushed = Instant::now();
    upgrade(cluster, component, set);
    // The push waits for the DaemonSet to replace the anchor pod, which waits for a
    // controller-manager that an earlier outage may have left in back-off.
    let tried = support::poll::eventually(
        Duration::from_secs(420),
        &format!("{component}: the pushed version written"),
        || async { cluster.nodes[0].written_hash(component).filter(|h| *h != good) },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let at_cut = ledger(cluster, component);
    assert_eq!(
        at_cut["contentHash"].as_str(),
        Some(tried.as_str()),
        "{component}: still on trial at the power cut: {at_cut}"
    );
    assert!(!bad_hashes(cluster, component).contains(&tried), "{at_cut}");

    let (_, dead) = cluster.reboot(&[0]).await;
    let node = &cluster.nodes[0];
    support::poll::eventually(
        Duration::from_secs(300),
        &format!(
            "{component}: the API answering after the boot, logs in {}",
            cluster.dir.display()
        ),
        || async { cluster.readyz(node).ok() },
    )
    .await;
    let api_back = Instant::now();
    let boot_to_api = dead.elapsed();
    let push_to_api = pushed.elapsed();
    let l = ledger(cluster, component);
    assert_eq!(
        l["interrupted"]["hash"].as_str(),
        Some(tried.as_str()),
        "{component}: the step recorded the trial as interrupted: {l}"
    );
    let step = fs::read_to_string(cluster.dir.join(format!("pre-start-{}.log", node.name))).unwrap_or_default();
    assert!(step.contains("put back to last-known-good"), "{step}");

    support::poll::eventually(
        Duration::from_secs(420),
        &format!(
            "{component}: {tried}, tried again, rolled back and the API answering; logs in {}",
            cluster.dir.display()
        ),
        || async {
            (bad_hashes(cluster, component).contains(&tried)
                && node.written_hash(component).as_deref() == Some(good.as_str())
                && cluster.readyz(node).is_ok())
            .then_some(())
        },
    )
    .await;
    RebootedInTrial {
        tried,
        boot_to_api,
        push_to_api,
        retry_rolled_back_after: api_back.elapsed(),
        step,
    }
}

/// Pushes a good change and waits until the node has promoted it; nothing may be recorded as bad.
/// Returns how long that took and how long the API was seen down meanwhile.
async fn good_push(cluster: &SelfHosted, component: &str, set: &str) -> (Duration, Duration) {
    let node = &cluster.nodes[0];
    let bad_before = bad_hashes(cluster, component);
    let before = node.written_hash(component).unwrap();
    let pushed = Instant::now();
    upgrade(cluster, component, set);
    let mut down = Duration::ZERO;
    loop {
        let looked = Instant::now();
        let answers = cluster.readyz(node).is_ok();
        let l = ledger(cluster, component);
        let hash = l["contentHash"].as_str().unwrap_or_default().to_owned();
        assert_eq!(
            bad_hashes(cluster, component),
            bad_before,
            "{component}: a good version ({set}) was recorded as bad; logs in {}",
            cluster.dir.display()
        );
        if answers && hash != before && l["lastKnownGood"].as_str() == Some(hash.as_str()) {
            return (pushed.elapsed(), down);
        }
        assert!(
            pushed.elapsed() < Duration::from_secs(480),
            "{component}: the good version ({set}) was not promoted: {l}; logs in {}",
            cluster.dir.display()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
        if !answers {
            down += looked.elapsed();
        }
    }
}

/// The anchor's Warning Event for the rollback, published once the API answered again; its
/// note says the runtime showed the crash loop.
async fn rolled_back_event(cluster: &SelfHosted, component: &str, hash: &str) -> String {
    let client = cluster.client(0).await;
    let events: Api<Event> = Api::namespaced(client, "kube-system");
    support::poll::eventually(
        Duration::from_secs(60),
        &format!("{component}: a RolledBack Warning Event naming {hash}"),
        || {
            let events = events.clone();
            async move {
                let list = events.list(&ListParams::default()).await.ok()?;
                list.items.into_iter().find_map(|e| {
                    let note = e.message.clone().unwrap_or_default();
                    (e.reason.as_deref() == Some("RolledBack")
                        && e.type_.as_deref() == Some("Warning")
                        && note.contains(hash))
                    .then_some(note)
                })
            }
        },
    )
    .await
}

/// A bed of one process node at `ip` with every chart installed.
async fn bed(name: &str, ip: &str) -> SelfHosted {
    let dir = test_dir().join(name);
    println!(
        "{name}: cluster dir (logs of every process; kept when the test fails): {}",
        dir.display()
    );
    let cluster = SelfHosted::bootstrap(&dir, &[(name, ip)], &TRIALS).await;
    cluster.install();
    cluster.wait_anchors_ready(Duration::from_secs(300)).await;
    cluster
}

/// The good changes to push to `component`, `KUBE_ANCHOR_GOOD_PUSHES` of them.
fn good_pushes(component: &'static str) -> Vec<(&'static str, String)> {
    (0..support::selfhosted::env_or("KUBE_ANCHOR_GOOD_PUSHES", 1))
        .map(|round| {
            let set = match component {
                "etcd" => format!("component.extraArgs.log-level={}", ["warn", "info"][round as usize % 2]),
                _ => format!("component.extraArgs.v={}", round + 2),
            };
            (component, set)
        })
        .collect()
}

async fn run_good_pushes(cluster: &SelfHosted, component: &'static str) {
    for (component, set) in good_pushes(component) {
        let (took, down) = good_push(cluster, component, &set).await;
        println!(
            "good {component} push ({set}): last-known-good {:.0}s after the push, the API down {:.0}s meanwhile",
            took.as_secs_f64(),
            down.as_secs_f64()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_good_kube_apiserver_passes_and_a_bad_one_is_rolled_back_with_no_api() {
    let mut cluster = bed("solo-a", "127.0.4.1").await;
    cluster.wait_promoted("kube-apiserver", Duration::from_secs(180)).await;
    run_good_pushes(&cluster, "kube-apiserver").await;

    // A kube-apiserver that exits at start: the only API server is gone; the node reboots in
    // its trial.
    let apiserver =
        bad_push_rebooted_in_its_trial(&mut cluster, "kube-apiserver", "component.extraArgs.no-such-flag=1").await;
    let note = rolled_back_event(&cluster, "kube-apiserver", &apiserver.tried).await;
    assert!(note.contains("container runtime"), "judged from the runtime: {note}");
    println!(
        "bad kube-apiserver push, power cut in its trial: API back {:.0}s after the boot, {:.0}s after the push; tried again and rolled back {:.0}s later; step: {}; {note}",
        apiserver.boot_to_api.as_secs_f64(),
        apiserver.push_to_api.as_secs_f64(),
        apiserver.retry_rolled_back_after.as_secs_f64(),
        apiserver.step.trim()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_rollback_a_good_etcd_and_a_bad_etcd_rolled_back_with_no_api() {
    let mut cluster = bed("solo-b", "127.0.4.2").await;
    let node = &cluster.nodes[0];

    // The operator's lever, while the anchors run: a new kube-scheduler version on trial is
    // rolled back by hand; the previous one runs again and stays.
    cluster.wait_promoted("kube-scheduler", Duration::from_secs(120)).await;
    let first = node.written_hash("kube-scheduler").unwrap();
    upgrade(&cluster, "kube-scheduler", "component.extraArgs.v=3");
    let second = support::poll::eventually(
        Duration::from_secs(180),
        "the new kube-scheduler version written",
        || async { node.written_hash("kube-scheduler").filter(|h| *h != first) },
    )
    .await;
    let out = std::process::Command::new(support::fixture::BIN)
        .args(["rollback", "--component", "kube-scheduler", "--host-root"])
        .arg(node.host())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("rolled back to last-known-good {first}")),
        "{stdout}"
    );
    assert!(bad_hashes(&cluster, "kube-scheduler").contains(&second));
    let client = cluster.client(0).await;
    let mirror = format!("kube-scheduler-{}", node.name);
    support::poll::eventually(
        Duration::from_secs(120),
        "the previous kube-scheduler running again",
        || async { (cluster.static_pod_hash(&client, &mirror).await.as_deref() == Some(first.as_str())).then_some(()) },
    )
    .await;
    cluster.wait_promoted("etcd", Duration::from_secs(120)).await;
    run_good_pushes(&cluster, "etcd").await;
    // The anchor kept the previous scheduler all along (its inputs' version is recorded as bad):
    // through the good etcd push, over a minute, longer than its full resync.
    assert_eq!(node.written_hash("kube-scheduler").as_deref(), Some(first.as_str()));
    let l = ledger(&cluster, "kube-scheduler");
    assert_eq!(l["lastKnownGood"].as_str(), Some(first.as_str()), "{l}");

    // An etcd that exits at start: the API goes down with it; the node reboots in its trial.
    let etcd = bad_push_rebooted_in_its_trial(&mut cluster, "etcd", "component.extraArgs.no-such-flag=1").await;
    let note = rolled_back_event(&cluster, "etcd", &etcd.tried).await;
    println!(
        "bad etcd push, power cut in its trial: API back {:.0}s after the boot, {:.0}s after the push; tried again and rolled back {:.0}s later; step: {}; {note}",
        etcd.boot_to_api.as_secs_f64(),
        etcd.push_to_api.as_secs_f64(),
        etcd.retry_rolled_back_after.as_secs_f64(),
        etcd.step.trim()
    );
}
