//! A self-hosted control plane on three process nodes, built from nothing with the example
//! bootstrap script (examples/bootstrap/cluster.sh): etcd ×3, kube-apiserver ×3,
//! controller-manager and scheduler as static pods, each node's kubelet talking to its own
//! node's API server. No harness API server: the cluster is its own.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams};

use super::fixture::{BIN, succeeded};
use super::helm::{helm, ok};
use super::kubectl::kubectl_ok;
use super::nodes::{link_images, namespace_init, namespace_rss_kib, process_kubelet_args, wait_namespace_gone};
use super::pki::client_from_kubeconfig;
use super::poll::eventually;
use super::processes::{Process, repo_root, tool};

/// The kubelets' serving port, on each node's own address.
pub const KUBELET_PORT: u16 = 10250;

/// A whole number from the environment variable `name`, else `default`.
pub fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The kube-apiserver trial of [`SHORT_TRIALS`], in seconds. An API server takes about 47 s
/// here from its new manifest to Ready on its mirror pod: 30 s for the old one to stop (the
/// kubelet's default grace period, which it uses up), then its start. The anchor sees Ready only
/// once the kubelet posts it, and a kubelet whose pod watch is in client-go's reconnect back-off
/// (up to 60 s after its API server returns) posts late: on a loaded machine a good version
/// spent over 75 s "Pending". All of that is time not converged, which a trial allows only up to
/// its own length, so the trial leaves about 100 s of margin over the restart.
pub const APISERVER_TRIAL_S: u64 = 150;

/// Values for beds that must move fast: short trials, so a scenario takes minutes, not hours.
/// A trial shorter than the restart fails good versions (see [`APISERVER_TRIAL_S`]).
pub const SHORT_TRIALS: [(&str, &str); 4] = [
    ("etcd", "anchor: {trialPeriod: 25s, logFormat: plain}\n"),
    (
        "kube-apiserver",
        "anchor: {trialPeriod: 150s, crashLoopThreshold: 2, logFormat: plain}\n",
    ),
    (
        "kube-controller-manager",
        "anchor: {trialPeriod: 25s, logFormat: plain}\n",
    ),
    ("kube-scheduler", "anchor: {trialPeriod: 25s, logFormat: plain}\n"),
];

pub const COMPONENTS: [&str; 4] = ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"];

/// `examples/bootstrap/cluster.sh VERB DIR ARGS…` with the test bed's tools; `overrides` are
/// values directories applied after `examples/bootstrap/one-host`.
pub fn script(verb: &str, dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut overrides = repo_root().join("examples/bootstrap/one-host").display().to_string();
    let extra = dir.join("test-values");
    if extra.is_dir() {
        overrides = format!("{overrides}:{}", extra.display());
    }
    let mut cmd = Command::new(repo_root().join("examples/bootstrap/cluster.sh"));
    cmd.arg(verb)
        .arg(dir)
        .args(args)
        .env("HELM", tool("helm"))
        .env("KUBECTL", tool("kubectl"))
        .env("KUBE_ANCHOR", BIN)
        .env("OVERRIDES", overrides);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

/// A PKI, values and `helm template` output for `nodes`, made by the example script.
pub fn prepare(dir: &Path, nodes: &[(&str, &str)]) {
    let nodes: Vec<String> = nodes.iter().map(|(n, ip)| format!("{n}={ip}")).collect();
    let nodes: Vec<&str> = nodes.iter().map(String::as_str).collect();
    succeeded("cluster.sh pki", &script("pki", dir, &nodes, &[]));
    succeeded("cluster.sh values", &script("values", dir, &[], &[]));
    succeeded("cluster.sh template", &script("template", dir, &[], &[]));
}

/// Every regular file under `dir`.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
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

/// Identity and timestamps of every file under `dir`: a rewrite (temp file and rename) changes
/// the inode, an in-place write the mtime, a chmod or chown the ctime.
pub fn stat_all(dir: &Path) -> BTreeMap<PathBuf, (u64, i64, i64, i64, i64)> {
    files_under(dir)
        .into_iter()
        .map(|p| {
            let m = fs::metadata(&p).unwrap();
            let key = (m.ino(), m.mtime(), m.mtime_nsec(), m.ctime(), m.ctime_nsec());
            (p, key)
        })
        .collect()
}

pub struct SelfHostedNode {
    pub name: String,
    pub ip: String,
    pub root: PathBuf,
    kubelet: Option<Process>,
    command: Vec<String>,
    /// PID 1 of the node's namespace after [`SelfHostedNode::kill_now`], until it is gone.
    dying: Option<u32>,
}

impl SelfHostedNode {
    /// A process node whose `/` is `root/host` and whose kubelet, once booted, talks to the API
    /// server `kubeconfig` names. Its kubelet serves on the node's address at the usual port,
    /// 10250, trusting `client_ca`, as on a real node (the pod-checkpointer asks it there).
    pub fn new(name: &str, ip: &str, root: PathBuf, kubeconfig: &Path, client_ca: &Path, images: &Path) -> Self {
        let command = process_kubelet_args(name, ip, &root, kubeconfig, client_ca, images, KUBELET_PORT);
        Self {
            name: name.to_string(),
            ip: ip.to_string(),
            root,
            kubelet: None,
            command,
            dying: None,
        }
    }

    /// The log of the node's running kubelet (its process runtime's too), kept across boots.
    pub fn kubelet_log(&self) -> Option<&Path> {
        self.kubelet.as_ref().map(|p| p.log.as_path())
    }

    /// The directory that plays the node's `/`.
    pub fn host(&self) -> PathBuf {
        self.root.join("host")
    }

    /// Power cut: the kubelet and every process of the node die at once.
    pub fn kill(&mut self) {
        self.kill_now();
        self.wait_dead();
    }

    /// Power cut without waiting for the node's last process (to cut several nodes at once).
    pub fn kill_now(&mut self) {
        if let Some(p) = self.kubelet.take() {
            self.dying = namespace_init(p.pid());
            p.stop();
        }
    }

    pub fn wait_dead(&mut self) {
        wait_namespace_gone(self.dying.take());
    }

    /// Resident memory of every process of the node, in KiB.
    pub fn rss_kib(&self) -> u64 {
        self.kubelet.as_ref().map(|p| namespace_rss_kib(p.pid())).unwrap_or(0)
    }

    /// Power on: the kubelet's pre-start step where installed, then the kubelet starts again
    /// from the node's disk.
    pub fn boot(&mut self, log_dir: &Path) {
        assert!(self.kubelet.is_none(), "{} is running", self.name);
        self.kubelet_pre_start(log_dir);
        let mut cmd = Command::new("unshare");
        cmd.args(&self.command);
        self.kubelet = Some(Process::start(&format!("kubelet-{}", self.name), cmd, log_dir));
    }

    /// The drop-in `kube-anchor kubelet-pre-start --install` wrote (by `cluster.sh node`), run
    /// as systemd runs it before the kubelet: its `ExecStartPre` line, the binary and every path
    /// below the node's `/` (`KUBE_ANCHOR_HOST_ROOT`). Its output is appended to
    /// `<log_dir>/pre-start-<node>.log`; like systemd's `-`, a failure does not stop the boot.
    fn kubelet_pre_start(&self, log_dir: &Path) {
        let unit = self
            .host()
            .join("etc/systemd/system/kubelet.service.d/05-kube-anchor-pre-start.conf");
        let Ok(text) = fs::read_to_string(&unit) else {
            return;
        };
        let Some(line) = text.lines().find_map(|l| l.strip_prefix("ExecStartPre=-")) else {
            panic!("{}: no ExecStartPre=- line:\n{text}", unit.display());
        };
        let out = super::fixture::run_exec_start_pre(line, &self.host());
        let mut log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log_dir.join(format!("pre-start-{}.log", self.name)))
            .unwrap();
        use std::io::Write as _;
        let _ = log.write_all(&out.stdout);
        let _ = log.write_all(&out.stderr);
        let said = String::from_utf8_lossy(&out.stdout);
        if !said.trim().is_empty() || !out.status.success() {
            println!(
                "{}: kubelet pre-start step ({}): {}",
                self.name,
                out.status,
                said.trim()
            );
        }
    }

    /// The content hash the node's anchors last wrote for `component` (its ledger).
    pub fn written_hash(&self, component: &str) -> Option<String> {
        self.ledger(component)?["contentHash"].as_str().map(str::to_owned)
    }

    /// The ledger of `component` on the node's disk, as JSON.
    pub fn ledger(&self, component: &str) -> Option<serde_json::Value> {
        let path = self.host().join(format!("var/lib/kube-anchor/v1/{component}.json"));
        let v: serde_json::Value = serde_json::from_slice(&fs::read(path).ok()?).ok()?;
        Some(v["ledger"].clone())
    }

    /// Whether the node's kubelet runs (the node is powered on).
    pub fn is_up(&self) -> bool {
        self.kubelet.is_some()
    }

    /// How many processes of the node are named `comm` (`/proc/<pid>/comm`, at most 15 bytes).
    pub fn processes_named(&self, comm: &str) -> usize {
        self.pids_named(comm).len()
    }

    /// The pids (as this machine sees them) of the node's processes whose command is `comm`.
    pub fn pids_named(&self, comm: &str) -> Vec<i32> {
        let Some(unshare) = self.kubelet.as_ref().map(|p| p.pid()) else {
            return vec![];
        };
        let Some(ns) = namespace_init(unshare).and_then(|pid| fs::read_link(format!("/proc/{pid}/ns/pid")).ok()) else {
            return vec![];
        };
        let Ok(entries) = fs::read_dir("/proc") else {
            return vec![];
        };
        entries
            .flatten()
            .filter(|e| fs::read_link(e.path().join("ns/pid")).ok().as_ref() == Some(&ns))
            .filter(|e| fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim_end() == comm))
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .collect()
    }
}

impl Drop for SelfHostedNode {
    fn drop(&mut self) {
        self.kill();
    }
}

pub struct SelfHosted {
    pub dir: PathBuf,
    pub nodes: Vec<SelfHostedNode>,
    /// How long the bootstrap of the three nodes took, and until `/readyz` answered on each.
    pub bootstrapped: Duration,
    pub readyz_everywhere: Duration,
}

impl SelfHosted {
    /// Three empty process nodes (a kubelet each, nothing else) brought up with the example
    /// script's `node` step on every node at once. `test_values` (chart → YAML) go after the
    /// one-host overrides.
    pub async fn bootstrap(dir: &Path, nodes: &[(&str, &str)], test_values: &[(&str, &str)]) -> Self {
        Self::bootstrap_with(dir, nodes, test_values, "").await
    }

    /// As [`SelfHosted::bootstrap`], with `bootstrap_args` added to every node's
    /// `kube-anchor bootstrap` (e.g. the node's labels).
    pub async fn bootstrap_with(
        dir: &Path,
        nodes: &[(&str, &str)],
        test_values: &[(&str, &str)],
        bootstrap_args: &str,
    ) -> Self {
        fs::create_dir_all(dir).unwrap();
        if !test_values.is_empty() {
            fs::create_dir_all(dir.join("test-values")).unwrap();
            for (chart, yaml) in test_values {
                fs::write(dir.join("test-values").join(format!("{chart}.yaml")), yaml).unwrap();
            }
        }
        prepare(dir, nodes);
        let images = dir.join("images");
        link_images(&images);
        let started = Instant::now();
        let mut out = Vec::new();
        for (name, ip) in nodes {
            // Each node's kubelet, and so its pods' in-cluster config (there is no kube-proxy
            // here), reaches the API through its own node's API server.
            let kubeconfig = dir.join(format!("pki/nodes/{name}/kubelet.conf"));
            let root = dir.join("nodes").join(name);
            fs::create_dir_all(root.join("host/etc/kubernetes/manifests")).unwrap();
            let mut node = SelfHostedNode::new(name, ip, root, &kubeconfig, &dir.join("pki/ca.crt"), &images);
            node.boot(dir);
            out.push(node);
        }
        // `cluster.sh node` on every node at once, as each node's own bootstrap would run.
        let runs: Vec<_> = out
            .iter()
            .map(|n| {
                let (dir, name, ip, host) = (dir.to_owned(), n.name.clone(), n.ip.clone(), n.host());
                let args = format!("--wait-timeout 4m {bootstrap_args}");
                std::thread::spawn(move || {
                    let host = host.display().to_string();
                    let env = [("HOST_ROOT", host.as_str()), ("BOOTSTRAP_ARGS", args.as_str())];
                    script("node", &dir, &[&name, &ip], &env)
                })
            })
            .collect();
        for (run, node) in runs.into_iter().zip(&out) {
            let result = run.join().unwrap();
            let stdout = succeeded(&format!("cluster.sh node {}", node.name), &result);
            fs::write(dir.join(format!("bootstrap-{}.log", node.name)), &stdout).unwrap();
        }
        let bootstrapped = started.elapsed();
        let cluster = Self {
            dir: dir.to_owned(),
            nodes: out,
            bootstrapped,
            readyz_everywhere: Duration::ZERO,
        };
        for n in &cluster.nodes {
            let answer = cluster
                .readyz(n)
                .unwrap_or_else(|e| panic!("/readyz through {}: {e}", n.name));
            assert_eq!(answer.trim(), "ok", "/readyz through {}", n.name);
        }
        let readyz_everywhere = started.elapsed();
        let mut cluster = cluster;
        cluster.readyz_everywhere = readyz_everywhere;
        cluster.register_nodes().await;
        cluster
    }

    /// A full-cluster power cut: every process of every node killed at once, disks kept; then
    /// node `i` booted `delays[i]` seconds after the last one died. Returns, once every node is
    /// booted, when they were all dead (wall clock and monotonic).
    pub async fn reboot(&mut self, delays: &[u64]) -> (SystemTime, Instant) {
        for n in &mut self.nodes {
            n.kill_now();
        }
        for n in &mut self.nodes {
            n.wait_dead();
        }
        let since = SystemTime::now();
        let start = Instant::now();
        let mut order: Vec<usize> = (0..self.nodes.len()).collect();
        order.sort_by_key(|&i| delays[i]);
        for &i in &order {
            tokio::time::sleep_until((start + Duration::from_secs(delays[i])).into()).await;
            let log_dir = self.dir.clone();
            self.nodes[i].boot(&log_dir);
        }
        (since, start)
    }

    /// A bed for the scenarios: three nodes bootstrapped with [`SHORT_TRIALS`], every component
    /// chart installed, every anchor Ready. Prints where the logs are.
    pub async fn with_charts(dir: &Path, nodes: &[(&str, &str)]) -> Self {
        println!(
            "cluster dir (logs of every process of every node; kept when the test fails): {}",
            dir.display()
        );
        assert!(
            SHORT_TRIALS[1]
                .1
                .contains(&format!("trialPeriod: {APISERVER_TRIAL_S}s")),
            "SHORT_TRIALS and APISERVER_TRIAL_S disagree"
        );
        let cluster = Self::bootstrap(dir, nodes, &SHORT_TRIALS).await;
        cluster.install();
        cluster.wait_anchors_ready(Duration::from_secs(240)).await;
        cluster
    }

    /// `kubectl get --raw /readyz` through the API server of `node`.
    pub fn readyz(&self, node: &SelfHostedNode) -> Result<String, String> {
        let out = Command::new(tool("kubectl"))
            .arg("--kubeconfig")
            .arg(self.dir.join("admin.conf"))
            .args([
                "--server",
                &format!("https://{}:6443", node.ip),
                "get",
                "--raw",
                "/readyz",
            ])
            .args(["--request-timeout", "5s"])
            .output()
            .unwrap();
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// An admin kubeconfig for the API server of node `i`.
    pub fn admin_kubeconfig(&self, i: usize) -> PathBuf {
        let path = self.dir.join(format!("admin-{}.conf", self.nodes[i].name));
        if !path.exists() {
            let text = fs::read_to_string(self.dir.join("admin.conf")).unwrap();
            let first = format!("https://{}:6443", self.nodes[0].ip);
            fs::write(
                &path,
                text.replace(&first, &format!("https://{}:6443", self.nodes[i].ip)),
            )
            .unwrap();
        }
        path
    }

    /// `kubectl ARGS…` as the cluster's admin; its stdout.
    pub fn kubectl(&self, args: &[&str]) -> String {
        kubectl_ok(&self.dir.join("admin.conf"), args)
    }

    /// `helm ARGS…` in kube-system as the cluster's admin.
    pub fn helm(&self, args: &[&str]) {
        let admin = self.dir.join("admin.conf");
        let mut args = args.to_vec();
        args.extend(["--namespace", "kube-system", "--kubeconfig", admin.to_str().unwrap()]);
        ok(&helm(&args));
    }

    /// An admin kubeconfig for each node's API server.
    pub fn admin_kubeconfigs(&self) -> Vec<PathBuf> {
        (0..self.nodes.len()).map(|i| self.admin_kubeconfig(i)).collect()
    }

    /// An admin client through the API server of node `i`.
    pub async fn client(&self, i: usize) -> kube::Client {
        client_from_kubeconfig(&self.admin_kubeconfig(i)).await
    }

    /// The kubelets register with their own API servers; the Nodes get their addresses as a
    /// cloud provider would give them (the kubelet does not report a loopback address), which
    /// the anchors' NODE_IP (status.hostIP) comes from.
    pub async fn register_nodes(&self) {
        for i in 0..self.nodes.len() {
            self.register_node(i, 0).await.unwrap();
        }
    }

    /// [`SelfHosted::register_nodes`] for node `i` alone, through the API server of node `via`.
    pub async fn register_node(&self, i: usize, via: usize) -> Result<(), String> {
        let node_api: Api<Node> = Api::all(self.client(via).await);
        let n = &self.nodes[i];
        let name = n.name.clone();
        eventually(Duration::from_secs(120), &format!("Node {name}"), || {
            let (api, name) = (node_api.clone(), name.clone());
            async move { api.get_opt(&name).await.ok().flatten() }
        })
        .await;
        let status = serde_json::json!({"status": {"addresses": [
            {"type": "InternalIP", "address": n.ip}, {"type": "Hostname", "address": n.name}
        ]}});
        node_api
            .patch_status(&n.name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .map(drop)
            .map_err(|e| format!("Node {name}: its addresses: {e}"))
    }

    /// (restartCount, startedAt) of each control-plane mirror pod's container, once all are
    /// Running and Ready.
    pub async fn static_pod_starts(&self, client: &kube::Client) -> Option<BTreeMap<String, (i32, String)>> {
        let pods: Api<Pod> = Api::namespaced(client.clone(), "kube-system");
        let mut out = BTreeMap::new();
        for n in &self.nodes {
            for component in COMPONENTS {
                let name = format!("{component}-{}", n.name);
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

    /// The content hash the mirror pod `name` runs (the annotation the anchors write).
    pub async fn static_pod_hash(&self, client: &kube::Client, name: &str) -> Option<String> {
        let pods: Api<Pod> = Api::namespaced(client.clone(), "kube-system");
        let pod = pods.get_opt(name).await.ok()??;
        pod.metadata.annotations?.remove("kube-anchor.io/content-hash")
    }

    /// `cluster.sh install`: label the nodes, helm install every component chart.
    pub fn install(&self) {
        succeeded("cluster.sh install", &script("install", &self.dir, &[], &[]));
    }

    /// The number of anchor pods Ready when every anchor DaemonSet is fully rolled out and
    /// Ready (etcd and kube-apiserver have one DaemonSet per node).
    pub async fn anchors_ready(&self, client: &kube::Client) -> Option<i32> {
        self.anchors_not_ready(client).await.ok()
    }

    /// As [`SelfHosted::anchors_ready`], or which DaemonSet is not.
    pub async fn anchors_not_ready(&self, client: &kube::Client) -> Result<i32, String> {
        let api: Api<DaemonSet> = Api::namespaced(client.clone(), "kube-system");
        let list = api.list(&ListParams::default()).await.map_err(|e| e.to_string())?;
        let mut ready = 0;
        let mut unready = Vec::new();
        for ds in &list.items {
            let name = ds.metadata.name.clone().unwrap_or_default();
            let Some(s) = ds.status.as_ref() else {
                unready.push(format!("{name}: no status"));
                continue;
            };
            let generation = ds.metadata.generation.unwrap_or_default();
            if s.observed_generation != Some(generation)
                || s.desired_number_scheduled == 0
                || s.number_ready != s.desired_number_scheduled
                || s.updated_number_scheduled != Some(s.desired_number_scheduled)
            {
                unready.push(format!(
                    "{name}: generation {generation} observed {:?}, desired {}, ready {}, updated {:?}",
                    s.observed_generation, s.desired_number_scheduled, s.number_ready, s.updated_number_scheduled
                ));
            }
            ready += s.number_ready;
        }
        if !unready.is_empty() {
            return Err(unready.join("; "));
        }
        if ready == 4 * self.nodes.len() as i32 {
            Ok(ready)
        } else {
            Err(format!("{ready} anchor pods Ready"))
        }
    }

    /// Until every node's anchor of `component` has promoted what it wrote to last-known-good.
    pub async fn wait_promoted(&self, component: &str, timeout: Duration) {
        eventually(
            timeout,
            &format!("{component} last-known-good on every node"),
            || async move {
                self.nodes
                    .iter()
                    .all(|n| {
                        let path = n.host().join(format!("var/lib/kube-anchor/v1/{component}.json"));
                        let v: serde_json::Value = fs::read(path)
                            .ok()
                            .and_then(|b| serde_json::from_slice(&b).ok())
                            .unwrap_or_default();
                        v["ledger"]["contentHash"].is_string()
                            && v["ledger"]["contentHash"] == v["ledger"]["lastKnownGood"]
                    })
                    .then_some(())
            },
        )
        .await
    }

    /// The names in etcd's member list ([`SelfHosted::etcd_members`]).
    pub fn etcd_member_names(&self) -> Result<Vec<String>, String> {
        Ok(self.etcd_members()?.into_iter().map(|(name, _)| name).collect())
    }

    /// etcd's member list, each member's name and whether it is a learner, from the first
    /// node's member that answers.
    pub fn etcd_members(&self) -> Result<Vec<(String, bool)>, String> {
        let pki = self.dir.join("pki");
        let mut last = String::from("no node");
        for n in &self.nodes {
            let out = Command::new("curl")
                .args(["-sS", "--fail", "--max-time", "5", "--cacert"])
                .arg(pki.join("etcd/ca.crt"))
                .arg("--cert")
                .arg(pki.join("etcd/anchor-client.crt"))
                .arg("--key")
                .arg(pki.join("etcd/anchor-client.key"))
                .args(["-X", "POST", "-d", "{}"])
                .arg(format!("https://{}:2379/v3/cluster/member/list", n.ip))
                .output()
                .map_err(|e| e.to_string())?;
            let list: serde_json::Value = match serde_json::from_slice(&out.stdout) {
                Ok(list) if out.status.success() => list,
                Ok(_) | Err(_) => {
                    last = format!("{}: {}", n.name, String::from_utf8_lossy(&out.stderr).trim());
                    continue;
                }
            };
            return Ok(list["members"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|m| {
                    (
                        m["name"].as_str().unwrap_or_default().to_owned(),
                        m["isLearner"].as_bool().unwrap_or(false),
                    )
                })
                .collect());
        }
        Err(format!("member list: {last}"))
    }

    /// Members in etcd's list whose own `/health` says true.
    pub fn etcd_healthy_members(&self) -> Result<usize, String> {
        let members = self.etcd_member_names()?;
        Ok(self
            .nodes
            .iter()
            .filter(|n| members.contains(&n.name) && etcd_health(&n.ip))
            .count())
    }

    pub async fn wait_anchors_ready(&self, timeout: Duration) -> i32 {
        let client = self.client(0).await;
        eventually(timeout, "every anchor DaemonSet fully rolled out and Ready", || {
            let client = client.clone();
            async move { self.anchors_ready(&client).await }
        })
        .await
    }
}

/// Whether the etcd member on `ip` says it is healthy (its plain-HTTP metrics listener, 2381:
/// `/health` is true only while the member sees a leader, so only while the cluster has a
/// quorum).
pub fn etcd_health(ip: &str) -> bool {
    use std::io::{Read, Write};
    let Ok(addr) = format!("{ip}:2381").parse() else {
        return false;
    };
    let Ok(mut stream) = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let request = format!("GET /health HTTP/1.0\r\nHost: {ip}\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
    serde_json::from_str::<serde_json::Value>(body).is_ok_and(|v| v["health"] == "true")
}
