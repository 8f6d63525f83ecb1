//! `kube-anchor bootstrap` and the example bootstrap script (examples/bootstrap/cluster.sh):
//! - bad `helm template` output (a component missing, a Secret without a key the config needs,
//!   two anchors claiming one host path) is refused with a clear message before anything is
//!   written;
//! - on three empty process nodes the script's commands bring up etcd ×3, kube-apiserver ×3,
//!   controller-manager and scheduler with no API server anywhere; `/readyz` answers through
//!   every node; `helm install` of the same charts with the same values then starts anchors that
//!   adopt everything: no static pod restarts, no host file is rewritten, every anchor is Ready.

mod support;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams};
use support::cluster::{
    Process, client_from_kubeconfig, eventually, free_port, link_images, namespace_init, process_kubelet_args,
    repo_root, test_dir, tool, wait_namespace_gone,
};
use support::fixture::BIN;

const NODES: [(&str, &str); 3] = [("cp-1", "127.0.2.1"), ("cp-2", "127.0.2.2"), ("cp-3", "127.0.2.3")];
const COMPONENTS: [&str; 4] = ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"];

/// `examples/bootstrap/cluster.sh VERB DIR ARGS…` with the test bed's tools and overrides.
fn script(verb: &str, dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(repo_root().join("examples/bootstrap/cluster.sh"));
    cmd.arg(verb)
        .arg(dir)
        .args(args)
        .env("HELM", tool("helm"))
        .env("KUBECTL", tool("kubectl"))
        .env("KUBE_ANCHOR", BIN)
        .env("OVERRIDES", repo_root().join("examples/bootstrap/one-host"));
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn succeeded(what: &str, out: &Output) -> String {
    assert!(
        out.status.success(),
        "{what} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A PKI, values and `helm template` output for three nodes, made by the example script.
fn prepare(dir: &Path) {
    let nodes: Vec<String> = NODES.iter().map(|(n, ip)| format!("{n}={ip}")).collect();
    let nodes: Vec<&str> = nodes.iter().map(String::as_str).collect();
    succeeded("cluster.sh pki", &script("pki", dir, &nodes, &[]));
    succeeded("cluster.sh values", &script("values", dir, &[], &[]));
    succeeded("cluster.sh template", &script("template", dir, &[], &[]));
}

/// One prepared directory shared by the bad-input tests (they only read it).
fn shared_bed() -> &'static Path {
    static BED: OnceLock<PathBuf> = OnceLock::new();
    BED.get_or_init(|| {
        let dir = tempfile::Builder::new()
            .prefix("kube-anchor-bootstrap-")
            .tempdir()
            .unwrap()
            .keep();
        prepare(&dir);
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

/// Every regular file under `dir`.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = fs::read_dir(dir) else { return out };
    for entry in entries.flatten() {
        let path = entry.path();
        if entry.file_type().unwrap().is_dir() {
            out.extend(files_under(&path));
        } else {
            out.push(path);
        }
    }
    out.sort();
    out
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
    // The values without sa.pub: the chart renders a Secret without that key (and markers that
    // match it), while the anchor config still lists the file.
    let values_text = fs::read_to_string(bed.join("values/kube-apiserver.yaml")).unwrap();
    let mut values: serde_yaml_ng::Value = serde_yaml_ng::from_str(&values_text).unwrap();
    values["credentials"]
        .as_mapping_mut()
        .unwrap()
        .remove("sa.pub")
        .unwrap();
    let work = tempfile::tempdir().unwrap();
    let file = work.path().join("kube-apiserver.yaml");
    fs::write(&file, serde_yaml_ng::to_string(&values).unwrap()).unwrap();
    let apiserver = render(bed, "kube-apiserver", &file, &[]);
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

/// Identity and timestamps of every file under `dir`: a rewrite (temp file and rename) changes
/// the inode, an in-place write the mtime, a chmod or chown the ctime.
fn stat_all(dir: &Path) -> BTreeMap<PathBuf, (u64, i64, i64, i64, i64)> {
    files_under(dir)
        .into_iter()
        .map(|p| {
            let m = fs::metadata(&p).unwrap();
            let key = (m.ino(), m.mtime(), m.mtime_nsec(), m.ctime(), m.ctime_nsec());
            (p, key)
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Three empty process nodes to a control plane the charts manage

struct SelfHostedNode {
    name: &'static str,
    ip: &'static str,
    root: PathBuf,
    kubelet: Option<Process>,
}

impl SelfHostedNode {
    fn host(&self) -> PathBuf {
        self.root.join("host")
    }
}

impl Drop for SelfHostedNode {
    fn drop(&mut self) {
        if let Some(p) = self.kubelet.take() {
            let init = namespace_init(p.pid());
            p.stop();
            wait_namespace_gone(init);
        }
    }
}

/// (restartCount, startedAt) of the one container of each control-plane mirror pod.
async fn static_pod_starts(client: &kube::Client) -> Option<BTreeMap<String, (i32, String)>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "kube-system");
    let mut out = BTreeMap::new();
    for (node, _) in NODES {
        for component in COMPONENTS {
            let name = format!("{component}-{node}");
            let pod = pods.get_opt(&name).await.ok()??;
            let status = pod.status?.container_statuses?.into_iter().next()?;
            let started = status.state?.running?.started_at?.0.to_string();
            if !status.ready {
                return None;
            }
            out.insert(name, (status.restart_count, started));
        }
    }
    Some(out)
}

fn kubectl_readyz(dir: &Path, ip: &str) -> Result<String, String> {
    let out = Command::new(tool("kubectl"))
        .arg("--kubeconfig")
        .arg(dir.join("admin.conf"))
        .args(["--server", &format!("https://{ip}:6443"), "get", "--raw", "/readyz"])
        .output()
        .unwrap();
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_empty_nodes_become_a_control_plane_the_charts_then_adopt() {
    let dir = tempfile::Builder::new()
        .prefix("kube-anchor-selfhosted-")
        .tempdir()
        .unwrap()
        .keep();
    println!("cluster dir (logs of every process, kept): {}", dir.display());
    prepare(&dir);
    let images = dir.join("images");
    link_images(&images);

    // Empty nodes: a kubelet each (the machine's provisioning), nothing else.
    let started = Instant::now();
    let mut nodes = Vec::new();
    for (name, ip) in NODES {
        let root = dir.join("nodes").join(name);
        fs::create_dir_all(root.join("host/etc/kubernetes/manifests")).unwrap();
        let args = process_kubelet_args(
            name,
            ip,
            &root,
            &dir.join(format!("pki/nodes/{name}/kubelet.conf")),
            &dir.join("pki/ca.crt"),
            &images,
            free_port(),
        );
        let mut cmd = Command::new("unshare");
        cmd.args(&args);
        let kubelet = Process::start(&format!("kubelet-{name}"), cmd, &dir);
        nodes.push(SelfHostedNode {
            name,
            ip,
            root,
            kubelet: Some(kubelet),
        });
    }

    // `cluster.sh node` on every node at once, as each node's own bootstrap would run.
    let runs: Vec<_> = nodes
        .iter()
        .map(|n| {
            let (dir, name, ip, host) = (dir.clone(), n.name, n.ip, n.host());
            std::thread::spawn(move || {
                let host = host.display().to_string();
                script(
                    "node",
                    &dir,
                    &[name, ip],
                    &[("HOST_ROOT", host.as_str()), ("BOOTSTRAP_ARGS", "--wait-timeout 4m")],
                )
            })
        })
        .collect();
    for (run, node) in runs.into_iter().zip(&nodes) {
        let out = run.join().unwrap();
        let stdout = succeeded(&format!("cluster.sh node {}", node.name), &out);
        fs::write(dir.join(format!("bootstrap-{}.log", node.name)), &stdout).unwrap();
    }
    let bootstrapped = started.elapsed();
    for n in &nodes {
        let answer = kubectl_readyz(&dir, n.ip).unwrap_or_else(|e| panic!("/readyz through {}: {e}", n.name));
        assert_eq!(answer.trim(), "ok", "/readyz through {}", n.name);
    }
    let ready = started.elapsed();
    println!(
        "empty nodes → every component healthy on 3 nodes: {:.1}s; /readyz ok through every node: {:.1}s",
        bootstrapped.as_secs_f64(),
        ready.as_secs_f64()
    );

    // The kubelets register with their own API servers; give the Nodes their addresses as a
    // cloud provider would (the kubelet does not report a loopback address), which the anchors'
    // NODE_IP (status.hostIP) comes from.
    let client = client_from_kubeconfig(&dir.join("admin.conf")).await;
    let node_api: Api<Node> = Api::all(client.clone());
    for n in &nodes {
        eventually(Duration::from_secs(120), &format!("Node {}", n.name), || {
            let api = node_api.clone();
            async move { api.get_opt(n.name).await.ok().flatten() }
        })
        .await;
        let status = serde_json::json!({"status": {"addresses": [
            {"type": "InternalIP", "address": n.ip}, {"type": "Hostname", "address": n.name}
        ]}});
        node_api
            .patch_status(n.name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap();
    }
    let before = eventually(
        Duration::from_secs(180),
        "every control-plane mirror pod Running and Ready",
        || {
            let client = client.clone();
            async move { static_pod_starts(&client).await }
        },
    )
    .await;
    assert!(
        before.values().all(|(restarts, _)| *restarts == 0),
        "restarts during bootstrap: {before:?}"
    );
    let files_before: Vec<_> = nodes
        .iter()
        .map(|n| stat_all(&n.host().join("etc/kubernetes")))
        .collect();

    // `helm install` of the same charts with the same values.
    let install_started = Instant::now();
    succeeded("cluster.sh install", &script("install", &dir, &[], &[]));
    let daemonsets: Api<DaemonSet> = Api::namespaced(client.clone(), "kube-system");
    let ready_anchors = eventually(Duration::from_secs(240), "every anchor DaemonSet fully Ready", || {
        let api = daemonsets.clone();
        async move {
            let list = api.list(&ListParams::default()).await.ok()?;
            let mut ready = 0;
            for ds in &list.items {
                let s = ds.status.as_ref()?;
                if s.desired_number_scheduled == 0 || s.number_ready != s.desired_number_scheduled {
                    return None;
                }
                ready += s.number_ready;
            }
            // etcd and kube-apiserver: one DaemonSet per node (per-node credentials).
            (list.items.len() == 8 && ready == 12).then_some(ready)
        }
    })
    .await;
    println!(
        "helm install → {ready_anchors} anchors Ready: {:.1}s",
        install_started.elapsed().as_secs_f64()
    );

    let after = static_pod_starts(&client)
        .await
        .expect("every mirror pod still Running and Ready");
    assert_eq!(after, before, "a static pod restarted when the charts took over");
    for (n, files) in nodes.iter().zip(&files_before) {
        assert_eq!(
            &stat_all(&n.host().join("etc/kubernetes")),
            files,
            "a host file on {} was rewritten when the charts took over",
            n.name
        );
        assert_eq!(kubectl_readyz(&dir, n.ip).as_deref().map(str::trim), Ok("ok"));
    }
    // The anchors say so themselves: every component adopted, in sync, on every node.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "kube-system");
    let anchors = pods
        .list(&ListParams::default().labels("app.kubernetes.io/managed-by=Helm"))
        .await
        .unwrap();
    assert_eq!(anchors.items.len(), 12);
    drop(nodes);
    let _ = fs::remove_dir_all(&dir);
}
