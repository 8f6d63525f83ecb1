//! `kube-anchor run` against the real control plane and a kubemark node: readiness follows the
//! mirror pod, and a version that fails its trial is rolled back with an Event; a version that
//! crash-loops on a node whose containers are real processes is rolled back without being taken
//! for a failing last-known-good one.

mod support;

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use support::control_plane;
use support::daemon::*;
use support::fixture::BIN;
use support::nodes::NodeHandle;
use support::poll::Poll;

const WAIT: Duration = Duration::from_secs(90);

fn pod_yaml(namespace: &str, marker: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: kube-scheduler, namespace: {namespace}}}\nspec:\n  hostNetwork: true\n  containers: [{{name: s, image: 'registry.k8s.io/kube-scheduler:v1.36.3', args: ['--node=${{NODE_NAME}}', '--marker={marker}']}}]\n"
    )
}

fn volume_files(namespace: &str, marker: &str) -> Vec<(&'static str, Vec<u8>)> {
    vec![
        (
            "anchor.yaml",
            anchor_config(
                "kube-scheduler",
                &[("scheduler.conf", "/etc/kubernetes/scheduler.conf", "0600")],
                "/etc/kubernetes/manifests/kube-scheduler.yaml",
            )
            .into_bytes(),
        ),
        ("pod.yaml", pod_yaml(namespace, marker).into_bytes()),
        ("scheduler.conf", b"kubeconfig".to_vec()),
    ]
}

fn status_json(config: &Path, node: &NodeHandle) -> serde_json::Value {
    let out = Command::new(BIN)
        .args(["status", "--output", "json", "--config"])
        .arg(config)
        .arg("--host-root")
        .arg(node.host_root())
        .env("NODE_NAME", &node.name)
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// `kube-anchor run` for `node` as the anchor pod `pod` would run it, judged by the mirror pod
/// and the health server on `health_port`, with the further arguments `extra`.
#[allow(clippy::too_many_arguments)]
fn start_anchor(
    node: &NodeHandle,
    ns: &str,
    kubeconfig: &Path,
    pod: &str,
    trial: &str,
    health_port: u16,
    volume: &ConfigVolume,
    work: &Path,
    extra: &[&str],
) -> Daemon {
    let args: Vec<String> = [
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--pod-name",
        pod,
        "--pod-namespace",
        ns,
        "--trial-period",
        trial,
        "--health-interval",
        "1s",
        "--health-url",
        &format!("http://127.0.0.1:{health_port}/readyz"),
    ]
    .iter()
    .chain(extra)
    .map(|s| s.to_string())
    .collect();
    Daemon::start(
        &volume.config(),
        &node.host_root(),
        &node.name,
        &args,
        &work.join("daemon.log"),
    )
}

async fn wait_ready(d: &Daemon) {
    Poll::new(WAIT, "/readyz 200")
        .context(|| format!("/readyz: {:?}\n{}", d.get("/readyz"), d.log_text()))
        .until_async(|| async { matches!(d.get("/readyz"), Some((200, _))) })
        .await
}

#[tokio::test(flavor = "multi_thread")]
async fn readiness_follows_the_mirror_pod_and_a_failed_trial_rolls_back() {
    let cp = control_plane::shared().await;
    let node = cp.add_node("anchor-node", &[]).await;
    let ns = cp.namespace("anchor").await;
    // Bound to a pod on the node, as a projected token is: the rollout Lease takes no other.
    let kubeconfig = cp.anchor_kubeconfig_on(&node.name).await;
    let work = tempfile::tempdir().unwrap();
    let mut volume = ConfigVolume::new(&work.path().join("config"), &refs(&volume_files(&ns, "good")));
    // The component's health endpoint: failing while the "bad" version is on the node.
    let manifest = node.host_root().join("etc/kubernetes/manifests/kube-scheduler.yaml");
    let watched = manifest.clone();
    let health_port = health_server(move || {
        if fs::read_to_string(&watched).unwrap_or_default().contains("marker=bad") {
            500
        } else {
            200
        }
    });

    // The kubelet's status manager reports a new static pod within ~10 s (its batch period).
    let d = start_anchor(
        &node,
        &ns,
        &kubeconfig,
        "kube-scheduler-anchor-test",
        "25s",
        health_port,
        &volume,
        work.path(),
        &[],
    );

    // Written -> mirror pod with our hash, Running and Ready -> /readyz 200.
    wait_ready(&d).await;
    let good = status_json(&volume.config(), &node);
    let good_hash = good["contentHash"].as_str().unwrap().to_owned();
    let pods: Api<Pod> = Api::namespaced(cp.admin().await, &ns);
    let mirror = pods.get(&format!("kube-scheduler-{}", node.name)).await.unwrap();
    assert_eq!(
        mirror.metadata.annotations.unwrap()["kube-anchor.io/content-hash"],
        good_hash
    );
    assert_eq!(d.metric("kube_anchor_converged"), 1.0);

    // It survives its trial and becomes last-known-good.
    let lkg = Poll::new(WAIT, "the version last-known-good after its 25 s trial")
        .every(Duration::from_millis(250))
        .until_async(|| async {
            Some(status_json(&volume.config(), &node)).filter(|s| s["lastKnownGoodHash"] == good_hash)
        })
        .await;
    let good_manifest = fs::read_to_string(&manifest).unwrap();
    assert!(lkg["badVersions"].as_array().is_none_or(|b| b.is_empty()));

    // A push whose static pod never becomes healthy is rolled back within its trial.
    volume.update(&refs(&volume_files(&ns, "bad")));
    let deadline = Instant::now() + WAIT;
    let bad = Poll::by(deadline, "a rollback")
        .every(Duration::from_millis(250))
        .context(|| format!("log:\n{}", d.log_text()))
        .until_async(|| async {
            let s = status_json(&volume.config(), &node);
            s["badVersions"].as_array().is_some_and(|b| !b.is_empty()).then_some(s)
        })
        .await;
    let bad_hash = bad["badVersions"][0]["hash"].as_str().unwrap().to_owned();
    assert_ne!(bad_hash, good_hash);
    assert_eq!(
        bad["contentHash"].as_str(),
        Some(bad_hash.as_str()),
        "the inputs still name the bad version"
    );
    assert!(
        bad["badVersions"][0]["reason"].as_str().unwrap().contains("HTTP 500"),
        "{bad}"
    );
    // The bad version is recorded first (a crash in between still rolls back at the next
    // start), then the last-known-good manifest is written, then readiness says so.
    Poll::by(deadline, "the last-known-good manifest restored")
        .every(Duration::from_millis(100))
        .context(|| format!("manifest:\n{}", fs::read_to_string(&manifest).unwrap_or_default()))
        .until(|| fs::read_to_string(&manifest).is_ok_and(|m| m == good_manifest));
    let (code, body) = Poll::by(deadline, "readiness to report the rollback")
        .every(Duration::from_millis(100))
        .until(|| d.get("/readyz").filter(|(_, body)| body.contains("failed its trial")));
    assert_eq!(code, 503);
    assert!(body.contains(&good_hash), "{body}");
    assert_eq!(d.metric("kube_anchor_rollbacks_total"), 1.0);

    // The Warning Event on the anchor's pod.
    let events: Api<Event> = Api::namespaced(cp.admin().await, &ns);
    let found = Poll::by(deadline, "a RolledBack event")
        .every(Duration::from_millis(250))
        .until_async(|| async {
            let list = events.list(&ListParams::default()).await.unwrap();
            list.items
                .into_iter()
                .find(|e| e.reason.as_deref() == Some("RolledBack"))
        })
        .await;
    assert_eq!(found.type_.as_deref(), Some("Warning"));
    assert_eq!(
        found.regarding.unwrap().name.as_deref(),
        Some("kube-scheduler-anchor-test")
    );

    // The known-bad version is not written again; new inputs are tried.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(fs::read_to_string(&manifest).unwrap(), good_manifest);
    volume.update(&refs(&volume_files(&ns, "fixed")));
    wait_ready(&d).await;
    assert!(fs::read_to_string(&manifest).unwrap().contains("marker=fixed"));
}

/// A last-known-good version that fails as well, while it is held in place of a bad one, is
/// reported (Warning Event, metric, `/readyz` reason) rather than kept silently.
#[tokio::test(flavor = "multi_thread")]
async fn a_failing_last_known_good_is_reported_loudly() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let cp = control_plane::shared().await;
    let node = cp.add_node("lkg-node", &[]).await;
    let ns = cp.namespace("lkg").await;
    // Bound to a pod on the node, as a projected token is: the rollout Lease takes no other.
    let kubeconfig = cp.anchor_kubeconfig_on(&node.name).await;
    let work = tempfile::tempdir().unwrap();
    let mut volume = ConfigVolume::new(&work.path().join("config"), &refs(&volume_files(&ns, "good")));
    let manifest = node.host_root().join("etc/kubernetes/manifests/kube-scheduler.yaml");
    let everything_down = Arc::new(AtomicBool::new(false));
    let (watched, down) = (manifest.clone(), everything_down.clone());
    let health_port = health_server(move || {
        let bad = fs::read_to_string(&watched).unwrap_or_default().contains("marker=bad");
        if bad || down.load(Ordering::SeqCst) { 500 } else { 200 }
    });
    let d = start_anchor(
        &node,
        &ns,
        &kubeconfig,
        "lkg-anchor",
        "15s",
        health_port,
        &volume,
        work.path(),
        &[],
    );
    wait_ready(&d).await;
    let good_hash = status_json(&volume.config(), &node)["contentHash"]
        .as_str()
        .unwrap()
        .to_owned();
    let log = || format!("log:\n{}", d.log_text());
    let deadline = Instant::now() + WAIT;
    Poll::by(deadline, "the version last-known-good")
        .every(Duration::from_millis(250))
        .context(log)
        .until_async(|| async { status_json(&volume.config(), &node)["lastKnownGoodHash"] == good_hash })
        .await;
    volume.update(&refs(&volume_files(&ns, "bad")));
    Poll::by(deadline, "a rollback")
        .every(Duration::from_millis(250))
        .context(log)
        .until_async(|| async { d.metric("kube_anchor_rollbacks_total") >= 1.0 })
        .await;
    assert_eq!(d.metric("kube_anchor_last_known_good_failing"), 0.0);

    // Now the last-known-good version fails too (its health endpoint answers 500).
    everything_down.store(true, Ordering::SeqCst);
    let deadline = Instant::now() + WAIT;
    Poll::by(deadline, "the failing last-known-good reported")
        .every(Duration::from_millis(250))
        .context(log)
        .until_async(|| async { d.metric("kube_anchor_last_known_good_failing") >= 1.0 })
        .await;
    let (code, body) = d.get("/readyz").unwrap();
    assert_eq!(code, 503);
    assert!(body.contains("failing too") && body.contains(&good_hash), "{body}");
    assert!(
        fs::read_to_string(&manifest).unwrap().contains("marker=good"),
        "kept, not rolled back further"
    );
    let failing = status_json(&volume.config(), &node)["lastKnownGoodFailing"].clone();
    assert_eq!(failing["hash"], good_hash.as_str(), "status shows it: {failing}");
    let event = control_plane::event(&cp.admin().await, &ns, "LastKnownGoodFailing", Some("lkg-anchor"), WAIT).await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));

    // It recovers: after a full period converged the alarm is cleared.
    everything_down.store(false, Ordering::SeqCst);
    Poll::by(deadline, "the alarm cleared")
        .every(Duration::from_millis(250))
        .context(log)
        .until_async(|| async { d.metric("kube_anchor_last_known_good_failing") <= 0.0 })
        .await;
    assert!(status_json(&volume.config(), &node)["lastKnownGoodFailing"].is_null());
}

/// The files of an anchor whose static pod, on a process node, runs `command` as a real process.
fn process_volume_files(namespace: &str, command: &str) -> Vec<(&'static str, Vec<u8>)> {
    let pod = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: kube-scheduler, namespace: {namespace}}}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 1\n  containers: [{{name: s, image: 'kube-anchor/kube-anchor:0.1.0', command: {command}}}]\n"
    );
    let mut files = volume_files(namespace, "unused");
    files[1].1 = pod.into_bytes();
    files
}

/// A crash-looping push rolled back to the last-known-good version: a good version (a process
/// that keeps running) becomes last-known-good; a push whose container exits 1 soon after it
/// starts is restarted by the kubelet past `--crash-loop-threshold` and rolled back. The evaluation that
/// rolls it back must not judge that crash loop as the last-known-good version's own: no
/// `LastKnownGoodFailing` Event, no `lastKnownGoodFailing` naming the bad hash in the ledger,
/// `kube_anchor_last_known_good_failing` 0 and no such reason in `/readyz`, over several
/// evaluations after the rollback.
#[tokio::test(flavor = "multi_thread")]
async fn a_crash_looping_push_is_rolled_back_without_a_false_last_known_good_failing() {
    let started = Instant::now();
    let cp = control_plane::shared().await;
    let node = cp.add_process_node("crash-node", &[]).await;
    let ns = cp.namespace("crash").await;
    // Bound to a pod on the node, as a projected token is: the rollout Lease takes no other.
    let kubeconfig = cp.anchor_kubeconfig_on(&node.name).await;
    let work = tempfile::tempdir().unwrap();
    let mut volume = ConfigVolume::new(
        &work.path().join("config"),
        &refs(&process_volume_files(&ns, "[sleep, infinity]")),
    );
    let manifest = node.host_root().join("etc/kubernetes/manifests/kube-scheduler.yaml");
    let pod = "crash-anchor";
    // A crash loop is more than one restart within the trial. The bad container below runs 2 s,
    // so the trial sees it first with no restart; the kubelet restarts it at once, then after a
    // 10 s back-off: a crash loop ~15 s after the kubelet starts the new pod (itself ~15 s after
    // the push), well before a trial period spent not converged would fail it instead.
    let d = start_anchor(
        &node,
        &ns,
        &kubeconfig,
        pod,
        "45s",
        health_server(|| 200),
        &volume,
        work.path(),
        &["--crash-loop-threshold", "1"],
    );
    let log = || format!("log:\n{}", d.log_text());
    let deadline = Instant::now() + WAIT;
    wait_ready(&d).await;
    let good_hash = status_json(&volume.config(), &node)["contentHash"]
        .as_str()
        .unwrap()
        .to_owned();
    Poll::by(deadline, "the running version last-known-good")
        .every(Duration::from_millis(250))
        .context(log)
        .until_async(|| async { status_json(&volume.config(), &node)["lastKnownGoodHash"] == good_hash })
        .await;
    let good_manifest = fs::read_to_string(&manifest).unwrap();
    eprintln!("last-known-good after {:?}", started.elapsed());

    // The push: its container exits 1 after 2 s, and the kubelet restarts it.
    volume.update(&refs(&process_volume_files(&ns, "[sh, -c, 'sleep 2; exit 1']")));
    let deadline = Instant::now() + WAIT;
    let bad = Poll::by(deadline, "the crash-looping version rolled back")
        .every(Duration::from_millis(250))
        .context(log)
        .until_async(|| async {
            let s = status_json(&volume.config(), &node);
            s["badVersions"].as_array().is_some_and(|b| !b.is_empty()).then_some(s)
        })
        .await;
    eprintln!("rolled back after {:?}", started.elapsed());
    let bad_hash = bad["badVersions"][0]["hash"].as_str().unwrap().to_owned();
    assert_ne!(bad_hash, good_hash);
    let reason = bad["badVersions"][0]["reason"].as_str().unwrap();
    assert!(reason.contains("restarted"), "failed by its crash loop: {bad}");
    assert_eq!(
        fs::read_to_string(&manifest).unwrap(),
        good_manifest,
        "last-known-good manifest restored"
    );
    assert_eq!(d.metric("kube_anchor_rollbacks_total"), 1.0);
    let rolled_back = control_plane::event(&cp.admin().await, &ns, "RolledBack", Some(pod), WAIT).await;
    assert!(
        rolled_back.note.as_deref().unwrap_or_default().contains(&good_hash),
        "{rolled_back:?}"
    );

    // The evaluation that rolled back, and those after it, judge the last-known-good version by
    // its own runs: nothing reports it failing.
    let events: Api<Event> = Api::namespaced(cp.admin().await, &ns);
    let until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < until {
        assert_eq!(
            d.metric("kube_anchor_last_known_good_failing"),
            0.0,
            "the rolled-back version taken for a failing last-known-good; {}",
            log()
        );
        let status = status_json(&volume.config(), &node);
        let failing = &status["lastKnownGoodFailing"];
        assert!(
            failing.is_null(),
            "the ledger records a failing last-known-good: {failing}"
        );
        let (_, body) = d.get("/readyz").unwrap();
        assert!(!body.contains("failing too"), "/readyz: {body}");
        let list = events.list(&ListParams::default()).await.unwrap();
        let false_alarm = list
            .items
            .iter()
            .find(|e| e.reason.as_deref() == Some("LastKnownGoodFailing"));
        assert!(false_alarm.is_none(), "a LastKnownGoodFailing Event: {false_alarm:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(d.metric("kube_anchor_rollbacks_total"), 1.0);
    assert_eq!(fs::read_to_string(&manifest).unwrap(), good_manifest);
    eprintln!("done after {:?}", started.elapsed());
}

/// Local truth when the kubelet's reports lag behind: a kubelet cut off from the API server (its
/// path to it severed while the server answers everyone else) runs every version the anchor
/// writes, but the mirror pod the anchor reads keeps what the kubelet last posted. While the API
/// answers it has the last word: a good version the runtime runs and whose health URL answers is
/// neither promoted nor rolled back while its mirror pod lags, and passes once the kubelet
/// reports it; a crash-looping one is rolled back on the runtime's view, named in its reason,
/// with the mirror pod never showing it.
#[tokio::test(flavor = "multi_thread")]
async fn a_kubelet_whose_reports_lag_does_not_decide_the_trial() {
    let cp = control_plane::shared().await;
    let node = cp.add_process_node("lag-node", &[]).await;
    let ns = cp.namespace("lag").await;
    // Bound to a pod on the node, as a projected token is: the rollout Lease takes no other.
    let kubeconfig = cp.anchor_kubeconfig_on(&node.name).await;
    let work = tempfile::tempdir().unwrap();
    let mut volume = ConfigVolume::new(
        &work.path().join("config"),
        &refs(&process_volume_files(&ns, "[sleep, infinity]")),
    );
    let manifest = node.host_root().join("etc/kubernetes/manifests/kube-scheduler.yaml");
    let d = start_anchor(
        &node,
        &ns,
        &kubeconfig,
        "lag-anchor",
        "20s",
        health_server(|| 200),
        &volume,
        work.path(),
        &["--crash-loop-threshold", "1"],
    );
    let log = || format!("log:\n{}", d.log_text());
    wait_ready(&d).await;
    let first = status_json(&volume.config(), &node)["contentHash"]
        .as_str()
        .unwrap()
        .to_owned();
    Poll::new(WAIT, "the first version last-known-good")
        .every(Duration::from_millis(250))
        .context(log)
        .until_async(|| async { status_json(&volume.config(), &node)["lastKnownGoodHash"] == first })
        .await;

    // The kubelet's path to the API goes through a proxy the test cuts once the kubelet has
    // posted the pod it started again (a kubelet that never reached an API since it started
    // does not replace a static pod at all, so it would show nothing).
    let server: std::net::SocketAddr = cp.server.trim_start_matches("https://").parse().unwrap();
    let path = support::severable::Severable::start(server);
    let restarted = k8s_openapi::jiff::Timestamp::now();
    cp.stop_kubelet(&node.name);
    cp.start_kubelet_through(&node.name, &path.url()).await;
    let pods: Api<Pod> = Api::namespaced(cp.admin().await, &ns);
    Poll::new(WAIT, "the restarted kubelet's report of the pod it started again")
        .every(Duration::from_millis(250))
        .context(log)
        .until_async(|| async {
            let Ok(Some(pod)) = pods.get_opt(&format!("kube-scheduler-{}", node.name)).await else {
                return false;
            };
            let started = pod
                .status
                .and_then(|s| s.container_statuses)
                .and_then(|c| c.first()?.state.clone()?.running?.started_at);
            // startedAt has whole seconds.
            started.is_some_and(|t| t.0.as_second() >= restarted.as_second())
        })
        .await;
    path.sever();
    let mirror_hash = || async {
        pods.get_opt(&format!("kube-scheduler-{}", node.name))
            .await
            .unwrap()
            .and_then(|p| p.metadata.annotations)
            .and_then(|a| a.get("kube-anchor.io/content-hash").cloned())
    };

    // A good version: not promoted on the runtime's word while the API answers and the mirror
    // pod does not show it, nor rolled back (the lag is no evidence against it).
    volume.update(&refs(&process_volume_files(&ns, "[sleep, '1000000']")));
    let good = Poll::new(WAIT, "the good version written")
        .every(Duration::from_millis(250))
        .context(log)
        .until_async(|| async {
            let s = status_json(&volume.config(), &node);
            (s["contentHash"] != first.as_str()).then(|| s["contentHash"].as_str().unwrap().to_owned())
        })
        .await;
    // Three trial periods.
    tokio::time::sleep(Duration::from_secs(60)).await;
    let s = status_json(&volume.config(), &node);
    assert_eq!(
        s["lastKnownGoodHash"],
        first.as_str(),
        "promoted over the API's word: {s}\n{}",
        log()
    );
    assert!(
        s["badVersions"].as_array().is_none_or(|b| b.is_empty()),
        "{s}\n{}",
        log()
    );
    assert_ne!(
        mirror_hash().await.as_deref(),
        Some(good.as_str()),
        "the kubelet's reports did lag"
    );
    let (_, readyz) = d.get("/readyz").unwrap();
    assert!(readyz.contains("container runtime runs it"), "/readyz: {readyz}");
    // The kubelet reaches the API again: its report is the API's word, and the version passes.
    path.restore();
    Poll::new(WAIT, "the good version last-known-good once its mirror pod shows it")
        .every(Duration::from_millis(250))
        .context(log)
        .until_async(|| async { status_json(&volume.config(), &node)["lastKnownGoodHash"] == good.as_str() })
        .await;
    assert_eq!(mirror_hash().await.as_deref(), Some(good.as_str()));
    let good_manifest = fs::read_to_string(&manifest).unwrap();
    path.sever();

    // A crash-looping version under the same lag: rolled back, the runtime's view named.
    volume.update(&refs(&process_volume_files(&ns, "[sh, -c, 'sleep 2; exit 1']")));
    let bad = Poll::new(WAIT, "the crash-looping version rolled back without its mirror pod")
        .every(Duration::from_millis(250))
        .context(|| {
            format!(
                "/readyz: {:?}\nstatus: {}\n{}",
                d.get("/readyz"),
                status_json(&volume.config(), &node),
                log()
            )
        })
        .until_async(|| async {
            let s = status_json(&volume.config(), &node);
            s["badVersions"].as_array().is_some_and(|b| !b.is_empty()).then_some(s)
        })
        .await;
    // Failed with what the node shows beside what the stale mirror pod says: the runtime's view
    // of the container (not converged, or a crash loop once restarted often enough).
    let reason = bad["badVersions"][0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("container runtime"),
        "failed on the runtime's word: {bad}"
    );
    assert_eq!(
        fs::read_to_string(&manifest).unwrap(),
        good_manifest,
        "last-known-good restored"
    );
    let shown = mirror_hash().await;
    assert!(
        shown.as_deref() == Some(good.as_str()) || shown.as_deref() == Some(first.as_str()),
        "the mirror pod showed the crash-looping version: {shown:?}"
    );
    cp.stop_kubelet(&node.name);
}

/// A kubeconfig (`<name>-forged.kubeconfig` in the control plane's dir) whose token the API
/// server did not sign: header {"alg":"RS256"}, the API server's issuer, a signature of nothing.
fn forged_token_kubeconfig(cp: &control_plane::ControlPlane, name: &str) -> std::path::PathBuf {
    use support::pki::{Identity, write_kubeconfig};
    let path = cp.dir.join(format!("{name}-forged.kubeconfig"));
    let forged =
        "eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiJodHRwczovL2t1YmVybmV0ZXMuZGVmYXVsdC5zdmMiLCJzdWIiOiJ4In0.c2lnbmF0dXJl";
    write_kubeconfig(&path, &cp.server, &cp.pki.ca(), &Identity::Token(forged.into()));
    path
}

/// `--client-checks` against the real kube-apiserver and etcd: each way of asking is served
/// with credentials the API server accepts, and refused (not "no answer") with ones it does
/// not: a client certificate of another CA, a token it did not sign, a server CA the client
/// does not trust. These refusals are what fail a version on trial that locks its clients out.
#[tokio::test]
async fn client_checks_ask_a_real_api_server_as_its_clients_do() {
    use kube_anchor_core::trial::ClientAnswer;
    use kube_anchor_k8s::client_check::{ClientCheck, ClientCheckSpec};
    use support::pki::Pki;
    let cp = control_plane::shared().await;
    let root = Path::new("/");
    let spec = |name: &str, path: &str| ClientCheckSpec {
        name: name.into(),
        url: format!("{}{path}", cp.server),
        ca_file: Some(cp.pki.ca()),
        cert_file: None,
        key_file: None,
        kubeconfig: None,
        anchor_credentials: false,
    };
    let answer = |spec: ClientCheckSpec, anchor_kubeconfig: Option<&Path>| {
        let check = ClientCheck::new(spec, root, anchor_kubeconfig);
        async move { check.ask().await.answer }
    };
    let served = ClientAnswer::Served;
    let refused_with = |a: &ClientAnswer, what: &str| matches!(a, ClientAnswer::Refused(why) if why.contains(what));

    // kube-apiserver's own readiness of etcd, asked as the etcd chart asks it: with the anchor's
    // token, which the chart's ClusterRole lets read that path (anonymous users may not).
    let anchor = cp.anchor_service_account().await;
    let readyz_etcd = spec("etcd's client", "/readyz/etcd");
    let a = answer(readyz_etcd.clone(), None).await;
    assert!(refused_with(&a, "403"), "anonymous: {a:?}");
    let with_token = ClientCheckSpec {
        anchor_credentials: true,
        ..readyz_etcd
    };
    assert_eq!(answer(with_token, Some(&anchor)).await, served);

    // A client certificate of the cluster CA, and one of a CA the API server does not trust.
    let pki = &cp.pki.dir;
    let ours = ClientCheckSpec {
        cert_file: Some(pki.join("apiserver-kubelet-client.crt")),
        key_file: Some(pki.join("apiserver-kubelet-client.key")),
        ..spec("a client certificate of the cluster CA", "/api")
    };
    assert_eq!(answer(ours.clone(), None).await, served);
    let stranger_ca = Pki::new(&cp.dir.join("client-checks-other-ca"));
    let (cert, key) = stranger_ca.issue("stranger", "stranger", None, &[]);
    let theirs = ClientCheckSpec {
        cert_file: Some(cert),
        key_file: Some(key),
        ..ours.clone()
    };
    let a = answer(theirs, None).await;
    assert!(refused_with(&a, "401"), "{a:?}");

    // The anchor's own token, and a token the API server did not sign.
    let own = ClientCheckSpec {
        anchor_credentials: true,
        ..spec("the anchor's service account", "/api")
    };
    assert_eq!(answer(own.clone(), Some(&anchor)).await, served);
    let forged_kubeconfig = forged_token_kubeconfig(cp, "client-checks");
    let a = answer(own, Some(&forged_kubeconfig)).await;
    assert!(refused_with(&a, "401"), "{a:?}");

    // A controller's kubeconfig, at the server it names.
    let controller = ClientCheckSpec {
        url: "/api".into(),
        ca_file: None,
        kubeconfig: Some(cp.admin_kubeconfig.clone()),
        ..spec("a controller", "")
    };
    assert_eq!(answer(controller, None).await, served);

    // The server's certificate verified with a CA that did not sign it: refused, as the client
    // would be.
    let untrusted_server = ClientCheckSpec {
        ca_file: Some(stranger_ca.ca()),
        ..spec("a client of another CA bundle", "/readyz")
    };
    let a = answer(untrusted_server, None).await;
    assert!(refused_with(&a, "certificate"), "{a:?}");
}

/// The mirror pod's watch against the real kube-apiserver with credentials it rejects (a token
/// it did not sign: 401) and with an identity it knows but does not authorize (a client
/// certificate of the cluster CA with no RBAC: 403): each is the API answering, shown as a
/// refusal with its status, never as "API unreachable" (which would excuse a version on trial
/// and let the runtime promote it alone).
#[tokio::test]
async fn a_mirror_pod_watch_the_api_refuses_is_an_answer_not_an_outage() {
    use kube_anchor_core::trial::MirrorPod;
    use kube_anchor_k8s::kubeapi::watch_mirror_pod;
    use support::pki::{Identity, client_from_kubeconfig, write_kubeconfig};
    let cp = control_plane::shared().await;
    let forged_kubeconfig = forged_token_kubeconfig(cp, "mirror-watch");
    let (cert, key) = cp
        .pki
        .issue("mirror-watch-nobody", "kube-anchor-test-nobody", None, &[]);
    let nobody_kubeconfig = cp.dir.join("mirror-watch-nobody.kubeconfig");
    write_kubeconfig(
        &nobody_kubeconfig,
        &cp.server,
        &cp.pki.ca(),
        &Identity::Cert { cert, key },
    );
    for (who, kubeconfig, status) in [
        ("a token the API server did not sign", &forged_kubeconfig, "401"),
        ("a known client without RBAC", &nobody_kubeconfig, "403"),
    ] {
        let client = client_from_kubeconfig(kubeconfig).await;
        let (mut rx, task) = watch_mirror_pod(client, "kube-system", "kube-apiserver-nowhere");
        let shown = tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                if let Some(shown) = rx.borrow_and_update().clone() {
                    return shown;
                }
                rx.changed().await.unwrap();
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{who}: the watch showed nothing within 30 s"));
        task.abort();
        assert!(
            matches!(&shown, MirrorPod::Refused(why) if why.starts_with(status)),
            "{who}: {shown:?}"
        );
    }
}
