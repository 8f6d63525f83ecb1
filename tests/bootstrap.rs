//! `kube-anchor bootstrap` and the example bootstrap script (examples/bootstrap/cluster.sh):
//! - bad `helm template` output (a component missing, a Secret without a key the config needs,
//!   two anchors claiming one host path) is refused with a clear message before anything is
//!   written;
//! - on three empty process nodes the script's commands bring up etcd ×3, kube-apiserver ×3,
//!   controller-manager and scheduler with no API server anywhere; `/readyz` answers through
//!   every node; `helm install` of the same charts with the same values then starts anchors that
//!   adopt everything: no static pod restarts, no host file is rewritten, every anchor is Ready.

mod support;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use support::fixture::{BIN, succeeded};
use support::poll::eventually;
use support::processes::{repo_root, test_dir, tool};
use support::selfhosted::{COMPONENTS, SelfHosted, files_under, prepare, stat_all};

const NODES: [(&str, &str); 3] = [("cp-1", "127.0.2.1"), ("cp-2", "127.0.2.2"), ("cp-3", "127.0.2.3")];

/// One prepared directory shared by the bad-input tests (they only read it).
fn shared_bed() -> &'static Path {
    static BED: OnceLock<PathBuf> = OnceLock::new();
    BED.get_or_init(|| {
        let dir = test_dir().join("bootstrap-bed");
        fs::create_dir_all(&dir).unwrap();
        prepare(&dir, &NODES);
        dir
    })
}

/// The documents of `helm template` output, each with the chart it came from.
fn documents(text: &str) -> Vec<(String, String)> {
    text.split("\n---\n")
        .filter(|d| !d.trim().is_empty())
        .map(|d| {
            let chart = d
                .lines()
                .find_map(|l| l.strip_prefix("# Source: "))
                .and_then(|s| s.split('/').next())
                .unwrap_or_default()
                .to_owned();
            (chart, d.to_owned())
        })
        .collect()
}

/// `helm template` of one chart with the bed's values, the one-host overrides and `extra`.
fn render(bed: &Path, chart: &str, values: &Path, extra: &[&str]) -> String {
    let dir = repo_root().join("charts").join(chart);
    let mut cmd = Command::new(tool("helm"));
    cmd.args(["template", chart])
        .arg(&dir)
        .args(["--namespace", "kube-system", "-f"])
        .arg(values)
        .arg("-f")
        .arg(
            repo_root()
                .join("examples/bootstrap/one-host")
                .join(format!("{chart}.yaml")),
        )
        .args(extra);
    let _ = bed;
    succeeded(&format!("helm template {chart}"), &cmd.output().unwrap())
}

/// The bed's `helm template` output with `chart`'s documents replaced by `replacement`.
fn with_chart(bed: &Path, chart: &str, replacement: &str) -> String {
    let text = fs::read_to_string(bed.join("cluster.yaml")).unwrap();
    let mut out: Vec<String> = documents(&text)
        .into_iter()
        .filter(|(c, _)| c != chart)
        .map(|(_, d)| d)
        .collect();
    out.push(replacement.to_owned());
    out.join("\n---\n")
}

fn bootstrap(input: &Path, host_root: &Path, extra: &[&str]) -> Output {
    Command::new(BIN)
        .args(["bootstrap", "--from"])
        .arg(input)
        .args(["--node-name", "cp-1", "--node-ip", "127.0.2.1", "--host-root"])
        .arg(host_root)
        .args(extra)
        .output()
        .unwrap()
}

/// Runs bootstrap on `input` and expects it to fail with `message` and write nothing.
fn refused(name: &str, input: &str, message: &str) {
    let work = tempfile::tempdir().unwrap();
    let file = work.path().join(format!("{name}.yaml"));
    fs::write(&file, input).unwrap();
    let root = work.path().join("root");
    fs::create_dir_all(&root).unwrap();
    let out = bootstrap(&file, &root, &["--wait-timeout", "1s"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "{name}: bootstrap succeeded:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(stderr.contains(message), "{name}: want {message:?} in:\n{stderr}");
    assert_eq!(
        files_under(&root),
        Vec::<PathBuf>::new(),
        "{name}: something was written"
    );
}

#[test]
fn template_output_missing_a_component_is_refused_before_anything_is_written() {
    let bed = shared_bed();
    let text = fs::read_to_string(bed.join("cluster.yaml")).unwrap();
    let without: Vec<String> = documents(&text)
        .into_iter()
        .filter(|(c, _)| c != "kube-controller-manager")
        .map(|(_, d)| d)
        .collect();
    refused(
        "missing-component",
        &without.join("\n---\n"),
        "kube-controller-manager: no anchor DaemonSet in the input selects node cp-1; the input holds anchors for: etcd, kube-apiserver, kube-scheduler",
    );
}

#[test]
fn a_secret_without_a_key_the_config_needs_is_refused_before_anything_is_written() {
    let bed = shared_bed();
    // The chart refuses values without sa.pub; output edited by hand may still lack it: the
    // Secret without that key (its marker unchanged), while the anchor config still lists the
    // file.
    let apiserver = render(bed, "kube-apiserver", &bed.join("values/kube-apiserver.yaml"), &[]);
    let apiserver: Vec<String> = documents(&apiserver)
        .into_iter()
        .map(|(_, d)| {
            if d.contains("\nkind: Secret\n") && d.contains("\n  name: kube-apiserver-anchor\n") {
                let kept: Vec<&str> = d.lines().filter(|l| !l.starts_with("  sa.pub: ")).collect();
                assert!(kept.len() < d.lines().count(), "no sa.pub in the shared Secret:\n{d}");
                kept.join("\n")
            } else {
                d
            }
        })
        .collect();
    let apiserver = apiserver.join("\n---\n");
    refused(
        "missing-key",
        &with_chart(bed, "kube-apiserver", &apiserver),
        "DaemonSet kube-system/kube-apiserver-anchor-cp-1: its config's spec.files[8].source is /etc/kube-anchor/config/../secrets/sa.pub, but no volume of the pod holds sa.pub (it mounts ConfigMap kube-apiserver-anchor, Secret kube-apiserver-anchor, Secret kube-apiserver-anchor-cp-1)",
    );
}

#[test]
fn two_anchors_claiming_one_host_path_are_refused_before_anything_is_written() {
    let bed = shared_bed();
    // kube-scheduler's kubeconfig aimed at the cluster CA's path, which kube-apiserver writes.
    let scheduler = render(
        bed,
        "kube-scheduler",
        &bed.join("values/kube-scheduler.yaml"),
        &[
            "--set",
            "files[0].name=scheduler.conf",
            "--set",
            "files[0].path=/etc/kubernetes/pki/ca.crt",
            "--set",
            "files[0].mode=0600",
        ],
    );
    refused(
        "one-path-twice",
        &with_chart(bed, "kube-scheduler", &scheduler),
        "/etc/kubernetes/pki/ca.crt: claimed by kube-apiserver and by kube-scheduler with different content",
    );
}

#[test]
fn bootstrap_twice_rewrites_nothing_and_reports_progress_as_json() {
    let bed = shared_bed();
    // No health URLs: nothing runs here, so there is nothing to wait for.
    let mut parts = Vec::new();
    for chart in COMPONENTS {
        parts.push(render(
            bed,
            chart,
            &bed.join(format!("values/{chart}.yaml")),
            &["--set", "anchor.healthURL="],
        ));
    }
    let work = tempfile::tempdir().unwrap();
    let input = work.path().join("cluster.yaml");
    fs::write(&input, parts.join("\n---\n")).unwrap();
    let root = work.path().join("root");
    fs::create_dir_all(&root).unwrap();
    let first = succeeded("bootstrap", &bootstrap(&input, &root, &["--output", "json"]));
    let events: Vec<serde_json::Value> = first.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let kinds: Vec<&str> = events.iter().map(|e| e["event"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "checked",
            "applied",
            "notWaited",
            "applied",
            "notWaited",
            "applied",
            "notWaited",
            "applied",
            "notWaited",
            "done"
        ],
        "{first}"
    );
    let applied: Vec<&str> = events
        .iter()
        .filter(|e| e["event"] == "applied")
        .map(|e| e["component"].as_str().unwrap())
        .collect();
    assert_eq!(applied, COMPONENTS, "boot order");
    let written = events
        .iter()
        .filter_map(|e| e["apply"]["files"].as_array())
        .flatten()
        .filter(|f| f["action"] == "written")
        .count();
    assert!(
        written >= 18,
        "every component's files are written the first time: {first}"
    );
    let manifests = files_under(&root.join("etc/kubernetes/manifests"));
    assert_eq!(manifests.len(), 4, "{manifests:?}");
    let before = stat_all(&root.join("etc/kubernetes"));

    let second = succeeded("bootstrap again", &bootstrap(&input, &root, &["--output", "json"]));
    let rewritten: Vec<serde_json::Value> = second
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|e| e["event"] == "applied" && e["apply"]["changed"] != false)
        .collect();
    assert!(rewritten.is_empty(), "the second run changed something: {second}");
    assert_eq!(stat_all(&root.join("etc/kubernetes")), before, "files were touched");
}

// ---------------------------------------------------------------------------------------------
// Three empty process nodes to a control plane the charts manage

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_empty_nodes_become_a_control_plane_the_charts_then_adopt() {
    let dir = test_dir().join("self-hosted");
    println!(
        "cluster dir (logs of every process; kept when the test fails): {}",
        dir.display()
    );
    let cluster = SelfHosted::bootstrap(&dir, &NODES, &[]).await;
    println!(
        "empty nodes → every component healthy on 3 nodes: {:.1}s; /readyz ok through every node: {:.1}s",
        cluster.bootstrapped.as_secs_f64(),
        cluster.readyz_everywhere.as_secs_f64()
    );
    let client = cluster.client(0).await;
    let before = eventually(
        Duration::from_secs(180),
        "every control-plane mirror pod Running and Ready",
        || {
            let client = client.clone();
            let cluster = &cluster;
            async move { cluster.static_pod_starts(&client).await }
        },
    )
    .await;
    assert!(
        before.values().all(|(restarts, _)| *restarts == 0),
        "restarts during bootstrap: {before:?}"
    );
    let files_before: Vec<_> = cluster
        .nodes
        .iter()
        .map(|n| stat_all(&n.host().join("etc/kubernetes")))
        .collect();

    // `helm install` of the same charts with the same values.
    let install_started = Instant::now();
    cluster.install();
    let ready_anchors = cluster.wait_anchors_ready(Duration::from_secs(240)).await;
    println!(
        "helm install → {ready_anchors} anchors Ready: {:.1}s",
        install_started.elapsed().as_secs_f64()
    );

    let after = cluster
        .static_pod_starts(&client)
        .await
        .expect("every mirror pod still Running and Ready");
    assert_eq!(after, before, "a static pod restarted when the charts took over");
    for (n, files) in cluster.nodes.iter().zip(&files_before) {
        assert_eq!(
            &stat_all(&n.host().join("etc/kubernetes")),
            files,
            "a host file on {} was rewritten when the charts took over",
            n.name
        );
        assert_eq!(cluster.readyz(n).as_deref().map(str::trim), Ok("ok"));
    }
    drop(cluster);
    let _ = fs::remove_dir_all(&dir);
}
