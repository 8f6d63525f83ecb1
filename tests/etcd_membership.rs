//! etcd membership against real etcd (tools/bin/etcd) with TLS on loopback: three members
//! started by the test are the existing cluster; the node under test is a host root driven by
//! the real `kube-anchor` binary (`apply`, `run`, `pre-stop`).
//!
//! On a process node the kubelet runs etcd from the manifest the anchor wrote. The other tests
//! need no kubelet for membership: they start etcd from the command in that manifest (host paths
//! mapped under the node's host root) and, playing the kubelet, stop it once the manifest is
//! gone. Member lists are checked with curl against etcd's JSON
//! gateway, not with the code under test.

mod support;

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::fixture::BIN;
use support::pki::Pki;
use support::poll::Poll;
use support::processes::{Process, free_port, tail, tool};

const IP: &str = "127.0.0.1";

/// `<name>.crt`/`<name>.key`, good for serving (on `ip` and 127.0.0.1), peering and as a client.
fn issue(pki: &Pki, name: &str, ip: &str) -> (PathBuf, PathBuf) {
    pki.issue_server_and_client(name, &[ip, IP, "localhost"])
}

struct Ports {
    ip: String,
    client: u16,
    peer: u16,
}

impl Ports {
    fn new() -> Self {
        Self::on(IP)
    }
    fn on(ip: &str) -> Self {
        Self {
            ip: ip.into(),
            client: free_port(),
            peer: free_port(),
        }
    }
    fn client_url(&self) -> String {
        format!("https://{}:{}", self.ip, self.client)
    }
    fn peer_url(&self) -> String {
        format!("https://{}:{}", self.ip, self.peer)
    }
}

/// An etcd started by the test (the existing members).
fn etcd(bed: &Bed, name: &str, ports: &Ports, initial_cluster: &str) -> Process {
    let (crt, key) = issue(&bed.pki, name, &ports.ip);
    let ca = bed.pki.ca();
    let mut cmd = Command::new(tool("etcd"));
    cmd.args([
        format!("--name={name}"),
        format!("--data-dir={}", bed.dir.path().join(format!("{name}.etcd")).display()),
        format!("--listen-client-urls={}", ports.client_url()),
        format!("--advertise-client-urls={}", ports.client_url()),
        format!("--listen-peer-urls={}", ports.peer_url()),
        format!("--initial-advertise-peer-urls={}", ports.peer_url()),
        format!("--initial-cluster={initial_cluster}"),
        "--initial-cluster-state=new".into(),
        "--client-cert-auth=true".into(),
        format!("--trusted-ca-file={}", ca.display()),
        format!("--cert-file={}", crt.display()),
        format!("--key-file={}", key.display()),
        "--peer-client-cert-auth=true".into(),
        format!("--peer-trusted-ca-file={}", ca.display()),
        format!("--peer-cert-file={}", crt.display()),
        format!("--peer-key-file={}", key.display()),
    ]);
    Process::start(name, cmd, bed.dir.path())
}

struct Bed {
    dir: tempfile::TempDir,
    pki: Pki,
    ports: Vec<Ports>,
    members: Vec<Option<Process>>,
    client: (PathBuf, PathBuf),
}

impl Bed {
    /// `started` of the `n` members n1..nN are started by the test; all are in the initial
    /// cluster.
    fn new(n: usize, started: usize) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki::new(&dir.path().join("pki"));
        let client = issue(&pki, "anchor-client", IP);
        let ports: Vec<Ports> = (0..n).map(|_| Ports::new()).collect();
        let mut bed = Self {
            dir,
            pki,
            ports,
            members: Vec::new(),
            client,
        };
        let initial = bed.initial_cluster();
        for i in 0..started {
            let p = etcd(&bed, &format!("n{}", i + 1), &bed.ports[i], &initial);
            bed.members.push(Some(p));
        }
        bed
    }

    fn initial_cluster(&self) -> String {
        self.ports
            .iter()
            .enumerate()
            .map(|(i, p)| format!("n{}={}", i + 1, p.peer_url()))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn endpoints(&self) -> Vec<String> {
        self.ports.iter().map(Ports::client_url).collect()
    }

    /// POST to etcd's JSON gateway with curl, a member list from the first endpoint that
    /// gives one; `None` when none did.
    fn gateway(&self, path: &str, body: &str) -> Option<serde_json::Value> {
        self.endpoints().iter().find_map(|url| {
            self.post_within(url, path, body, 3)
                .filter(|v| v.get("members").is_some())
        })
    }

    /// POST to one endpoint's JSON gateway with curl.
    fn post(&self, url: &str, path: &str, body: &str) -> Option<serde_json::Value> {
        self.post_within(url, path, body, 10)
    }

    fn post_within(&self, url: &str, path: &str, body: &str, seconds: u32) -> Option<serde_json::Value> {
        let out = Command::new("curl")
            .args(["-sS", "--max-time", &seconds.to_string(), "--cacert"])
            .arg(self.pki.ca())
            .arg("--cert")
            .arg(&self.client.0)
            .arg("--key")
            .arg(&self.client.1)
            .args(["-X", "POST", "-d", body])
            .arg(format!("{url}{path}"))
            .output()
            .unwrap();
        serde_json::from_slice(&out.stdout)
            .ok()
            .filter(|_| out.status.success())
    }

    /// The leader's member ID (decimal, as the gateway writes it) and its client URL, asked of
    /// each started member in turn.
    fn leader(&self, urls: &[String]) -> Option<(String, String)> {
        let status: Vec<(String, serde_json::Value)> = urls
            .iter()
            .filter_map(|u| Some((u.clone(), self.post(u, "/v3/maintenance/status", "{}")?)))
            .collect();
        let leader = status
            .iter()
            .find_map(|(_, s)| s["leader"].as_str().map(str::to_owned))?;
        let url = status
            .iter()
            .find(|(_, s)| s["header"]["member_id"].as_str() == Some(leader.as_str()))?
            .0
            .clone();
        Some((leader, url))
    }

    /// Moves leadership to member `to` (decimal ID) with etcd's MoveLeader, asked of the leader.
    fn move_leader(&self, urls: &[String], to: &str) {
        Poll::new(Duration::from_secs(30), format!("member {to} to lead")).until(|| {
            let Some((leader, url)) = self.leader(urls) else {
                return false;
            };
            if leader == to {
                return true;
            }
            self.post(
                &url,
                "/v3/maintenance/transfer-leadership",
                &format!(r#"{{"targetID":"{to}"}}"#),
            );
            false
        })
    }

    /// Writes `key` through the first member that takes it.
    fn gateway_put(&self, key: &str) {
        use base64::Engine as _;
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let body = format!(r#"{{"key":"{}","value":"{}"}}"#, b64(key), b64("v"));
        assert!(
            self.endpoints().iter().any(|url| self
                .post(url, "/v3/kv/put", &body)
                .is_some_and(|v| v.get("header").is_some())),
            "no member took the write of {key}"
        );
    }

    /// (ID, peer URLs, learner) of every member.
    fn members(&self) -> Vec<(String, Vec<String>, bool)> {
        let v = self
            .gateway("/v3/cluster/member/list", r#"{"linearizable":true}"#)
            .expect("some member answers");
        v["members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    m["ID"].as_str().unwrap().to_owned(),
                    m["peerURLs"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|u| u.as_str().unwrap().to_owned())
                        .collect(),
                    m["isLearner"].as_bool().unwrap_or(false),
                )
            })
            .collect()
    }

    fn member_ids(&self) -> BTreeSet<String> {
        self.members().into_iter().map(|m| m.0).collect()
    }

    fn wait_healthy(&self, voters: usize) {
        Poll::new(Duration::from_secs(30), format!("etcd to have {voters} voters")).until(|| {
            let Some(v) = self.gateway("/v3/cluster/member/list", r#"{"linearizable":true}"#) else {
                return false;
            };
            let n = v["members"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|m| !m["isLearner"].as_bool().unwrap_or(false))
                .count();
            n == voters
        })
    }
}

/// The node under test: a host root, the anchor's inputs, its own ports.
struct Node {
    name: String,
    root: PathBuf,
    config_dir: PathBuf,
    ports: Ports,
    etcd: Option<Process>,
    log_dir: PathBuf,
}

const POD: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: etcd
  namespace: kube-system
spec:
  hostNetwork: true
  containers:
    - name: etcd
      image: registry.k8s.io/etcd:3.6.8
      command:
        - etcd
        - --name=${NODE_NAME}
        - --data-dir=/var/lib/etcd
        - --listen-client-urls=https://${NODE_IP}:${CLIENT_PORT}
        - --advertise-client-urls=https://${NODE_IP}:${CLIENT_PORT}
        - --listen-peer-urls=https://${NODE_IP}:${PEER_PORT}
        - --initial-advertise-peer-urls=https://${NODE_IP}:${PEER_PORT}
        - --initial-cluster=${ETCD_INITIAL_CLUSTER}
        - --initial-cluster-state=${ETCD_INITIAL_CLUSTER_STATE}
        - --client-cert-auth=true
        - --trusted-ca-file=/etc/kubernetes/pki/etcd/ca.crt
        - --cert-file=/etc/kubernetes/pki/etcd/server.crt
        - --key-file=/etc/kubernetes/pki/etcd/server.key
        - --peer-client-cert-auth=true
        - --peer-trusted-ca-file=/etc/kubernetes/pki/etcd/ca.crt
        - --peer-cert-file=/etc/kubernetes/pki/etcd/server.crt
        - --peer-key-file=/etc/kubernetes/pki/etcd/server.key
      volumeMounts:
        - {name: data, mountPath: /var/lib/etcd}
        - {name: pki, mountPath: /etc/kubernetes/pki/etcd, readOnly: true}
  volumes:
    - name: data
      hostPath: {path: /var/lib/etcd, type: DirectoryOrCreate}
    - name: pki
      hostPath: {path: /etc/kubernetes/pki/etcd, type: DirectoryOrCreate}
"#;

impl Node {
    /// `apply` until the manifest is written (a join may need a few: an add whose answer is lost
    /// on a busy machine is found by its peer URL the next time); fails after 30 s of errors.
    fn apply_until_written(&self) {
        let start = Instant::now();
        while !self.manifest().exists() {
            let out = self.apply();
            assert!(
                out.status.success() || start.elapsed() < Duration::from_secs(30),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    fn new(bed: &Bed, name: &str, ports: Ports, initial_cluster: Option<&str>) -> Self {
        Self::with_root(
            bed,
            name,
            ports,
            initial_cluster,
            bed.dir.path().join(format!("{name}-root")),
        )
    }

    fn with_root(bed: &Bed, name: &str, ports: Ports, initial_cluster: Option<&str>, root: PathBuf) -> Self {
        let config_dir = bed.dir.path().join(format!("{name}-config"));
        fs::create_dir_all(&root).unwrap();
        fs::create_dir_all(&config_dir).unwrap();
        let (crt, key) = issue(&bed.pki, name, &ports.ip);
        fs::copy(bed.pki.ca(), config_dir.join("ca.crt")).unwrap();
        fs::copy(crt, config_dir.join("server.crt")).unwrap();
        fs::copy(key, config_dir.join("server.key")).unwrap();
        fs::copy(&bed.client.0, config_dir.join("client.crt")).unwrap();
        fs::copy(&bed.client.1, config_dir.join("client.key")).unwrap();
        fs::write(config_dir.join("pod.yaml"), POD).unwrap();
        let node = Self {
            name: name.into(),
            root,
            config_dir,
            ports,
            etcd: None,
            log_dir: bed.dir.path().into(),
        };
        node.write_config(bed, initial_cluster);
        node
    }

    fn write_config(&self, bed: &Bed, initial_cluster: Option<&str>) {
        let endpoints = bed.endpoints().join(", ");
        let initial = initial_cluster
            .map(|ic| format!("    initialCluster: {ic}\n"))
            .unwrap_or_default();
        let config = format!(
            r#"apiVersion: kube-anchor.io/v1alpha1
kind: Anchor
metadata: {{name: etcd}}
spec:
  variables: [NODE_NAME, NODE_IP, CLIENT_PORT, PEER_PORT]
  files:
    - {{source: ca.crt, path: /etc/kubernetes/pki/etcd/ca.crt, mode: "0644"}}
    - {{source: server.crt, path: /etc/kubernetes/pki/etcd/server.crt, mode: "0644"}}
    - {{source: server.key, path: /etc/kubernetes/pki/etcd/server.key, mode: "0600"}}
  manifest: {{source: pod.yaml, path: /etc/kubernetes/manifests/etcd.yaml}}
  etcdMember:
    endpoints: [{endpoints}]
    name: ${{NODE_NAME}}
    peerURL: https://${{NODE_IP}}:${{PEER_PORT}}
    clientURL: https://${{NODE_IP}}:${{CLIENT_PORT}}
    clientCA: ca.crt
    clientCert: client.crt
    clientKey: client.key
    dataDir: /var/lib/etcd
    snapshots: {{keep: 2, maxBytes: 104857600}}
{initial}"#
        );
        fs::write(self.config_dir.join("anchor.yaml"), config).unwrap();
    }

    /// The node's own client URL first among its config's endpoints.
    fn list_own_endpoint_first(&self) {
        let path = self.config_dir.join("anchor.yaml");
        let config = fs::read_to_string(&path).unwrap();
        let own = format!("endpoints: [{}, ", self.ports.client_url());
        fs::write(&path, config.replacen("endpoints: [", &own, 1)).unwrap();
    }

    fn command(&self, verb: &str) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.arg(verb)
            .arg("--host-root")
            .arg(&self.root)
            .env("KUBE_ANCHOR_CONFIG", self.config_dir.join("anchor.yaml"))
            .env("NODE_NAME", &self.name)
            .env("NODE_IP", &self.ports.ip)
            .env("CLIENT_PORT", self.ports.client.to_string())
            .env("PEER_PORT", self.ports.peer.to_string())
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdin(Stdio::null());
        cmd
    }

    /// An upgrade: the pod's command gains `flag`.
    fn add_flag(&self, flag: &str) {
        let pod = POD.replace("        - --name=", &format!("        - {flag}\n        - --name="));
        fs::write(self.config_dir.join("pod.yaml"), pod).unwrap();
    }

    fn apply(&self) -> std::process::Output {
        self.command("apply").output().unwrap()
    }

    fn manifest(&self) -> PathBuf {
        self.root.join("etc/kubernetes/manifests/etcd.yaml")
    }

    fn data_dir(&self) -> PathBuf {
        self.root.join("var/lib/etcd")
    }

    fn state(&self) -> PathBuf {
        self.root.join("var/lib/kube-anchor/v1")
    }

    fn record(&self) -> Option<serde_json::Value> {
        let bytes = fs::read(self.state().join("etcd.membership.json")).ok()?;
        let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        Some(v["ledger"].clone())
    }

    /// Plays the kubelet: starts etcd from the command in the manifest on disk, host paths
    /// mapped under the host root.
    fn start_etcd(&mut self) {
        let text = fs::read_to_string(self.manifest()).expect("a manifest to start etcd from");
        let pod: serde_json::Value = serde_yaml_ng::from_str(&text).unwrap();
        let command: Vec<String> = pod["spec"]["containers"][0]["command"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_owned())
            .collect();
        let mut cmd = Command::new(tool("etcd"));
        for arg in &command[1..] {
            match arg.split_once('=') {
                Some((flag, value)) if value.starts_with('/') => {
                    cmd.arg(format!("{flag}={}", self.root.join(&value[1..]).display()));
                }
                _ => {
                    cmd.arg(arg);
                }
            }
        }
        self.etcd = Some(Process::start(&format!("{}-etcd", self.name), cmd, &self.log_dir));
    }

    /// Where the node's etcd writes (every start appends).
    fn etcd_log(&self) -> PathBuf {
        self.log_dir.join(format!("{}-etcd.log", self.name))
    }

    /// As the kubelet does with a container that exited (e.g. its port taken by another
    /// process's outgoing connection in the moment it was down): start it again.
    fn restart_etcd_if_exited(&mut self) {
        if self.etcd.as_mut().is_some_and(|p| !p.is_running()) {
            eprintln!(
                "{}'s etcd exited; starting it again:\n{}",
                self.name,
                tail(&self.etcd_log(), 10)
            );
            self.stop_etcd();
            self.start_etcd();
        }
    }

    fn stop_etcd(&mut self) {
        if let Some(p) = self.etcd.take() {
            p.stop();
        }
    }

    fn my_entries(&self, bed: &Bed) -> Vec<(String, Vec<String>, bool)> {
        bed.members()
            .into_iter()
            .filter(|m| m.1.contains(&self.ports.peer_url()))
            .collect()
    }

    /// Runs `kube-anchor apply` until this node's member is a voter.
    fn apply_until_voter(&self, bed: &Bed) {
        let stderr = RefCell::new(String::new());
        Poll::new(Duration::from_secs(40), "the member promoted")
            .every(Duration::from_millis(500))
            .context(|| format!("last apply's stderr: {}", stderr.borrow()))
            .until(|| {
                let out = self.apply();
                assert!(out.status.success(), "apply: {}", String::from_utf8_lossy(&out.stderr));
                *stderr.borrow_mut() = String::from_utf8_lossy(&out.stderr).into_owned();
                let mine = self.my_entries(bed);
                assert_eq!(mine.len(), 1, "exactly one member for this node: {mine:?}");
                !mine[0].2
            })
    }

    /// `kube-anchor pre-stop --cleanup always` (the decommission proved), playing the kubelet:
    /// etcd is stopped as soon as the manifest is gone. Returns (stdout, how long it took).
    fn pre_stop(&mut self, timeout: &str) -> (String, Duration, std::process::ExitStatus) {
        self.pre_stop_with(timeout, &[])
    }

    fn pre_stop_with(&mut self, timeout: &str, env: &[(&str, &str)]) -> (String, Duration, std::process::ExitStatus) {
        let started = Instant::now();
        let mut child = self
            .command("pre-stop")
            .envs(env.iter().copied())
            .args(["--cleanup", "always", "--timeout", timeout, "--output", "json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        while child.try_wait().unwrap().is_none() {
            if self.etcd.is_some() && !self.manifest().exists() {
                self.stop_etcd();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let took = started.elapsed();
        let out = child.wait_with_output().unwrap();
        eprintln!("pre-stop stderr: {}", String::from_utf8_lossy(&out.stderr));
        (String::from_utf8_lossy(&out.stdout).into_owned(), took, out.status)
    }
}

/// A `kube-anchor run` process, killed when dropped (also when a test panics).
struct Daemon(std::process::Child);

impl Daemon {
    fn kill(mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn validate_status(doc: &serde_json::Value) {
    let (schemas, index) = support::fixture::status_schema();
    if let Err(e) = schemas.validate(doc, index) {
        panic!("{doc:#} does not match schemas/status.v1.json: {e:#}");
    }
}

fn arg_of(manifest: &Path, flag: &str) -> String {
    let text = fs::read_to_string(manifest).unwrap();
    let prefix = format!("- {flag}=");
    text.lines()
        .find_map(|l| l.trim().strip_prefix(&prefix).map(|v| v.trim_matches('\'').to_owned()))
        .unwrap_or_else(|| panic!("{flag} not in {text}"))
}

#[test]
fn a_fourth_node_joins_as_learner_is_promoted_upgrades_without_churn_and_leaves_on_decommission() {
    let bed = Bed::new(3, 3);
    bed.wait_healthy(3);
    let before = bed.member_ids();
    let mut node = Node::new(&bed, "n4", Ports::new(), None);
    // As the charts' values list them: every member's endpoint, the node's own among them (here
    // first, where it answers as a learner until promoted, and only for itself).
    node.list_own_endpoint_first();
    let mut endpoints = bed.endpoints();
    endpoints.push(node.ports.client_url());
    let mut checked = Vec::new();

    // Join: added as a learner before the manifest is written; the manifest joins "existing".
    // (An add whose answer is lost on a busy machine is found by its peer URL next time.)
    let history = History::start(&bed, "learner join and promotion", &endpoints);
    node.apply_until_written();
    let mine = node.my_entries(&bed);
    assert_eq!(mine.len(), 1);
    assert!(mine[0].2, "added as a learner: {mine:?}");
    assert_eq!(arg_of(&node.manifest(), "--initial-cluster-state"), "existing");
    let initial = arg_of(&node.manifest(), "--initial-cluster");
    assert_eq!(initial.split(',').count(), 4, "{initial}");
    assert!(initial.contains(&format!("n4={}", node.ports.peer_url())), "{initial}");
    assert_eq!(node.record().unwrap()["phase"], "learner");

    // etcd runs from the manifest; the next applies promote it once it has caught up.
    node.start_etcd();
    node.apply_until_voter(&bed);
    bed.wait_healthy(4);
    checked.push(history.stop());
    assert_eq!(node.record().unwrap()["phase"], "voter");
    // `status` shows the member, in the documented schema.
    let out = node.command("status").args(["--output", "json"]).output().unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["etcdMember"]["phase"], "voter", "{doc}");
    assert_eq!(doc["etcdMember"]["peerUrl"], node.ports.peer_url());
    assert_eq!(doc["etcdMember"]["lastJoin"]["action"], "promote");
    validate_status(&doc);
    let out = node.command("status").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("etcd member   n4 voter id "), "{text}");
    let joined = bed.member_ids();
    assert_eq!(joined.len(), 4);
    assert!(before.is_subset(&joined));

    // Upgrade (a new flag): the manifest changes, the membership does not.
    let history = History::start(&bed, "a voter's restart with a new flag", &endpoints);
    let hash_before = fs::read(node.manifest()).unwrap();
    node.add_flag("--snapshot-count=5000");
    let out = node.apply();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_ne!(fs::read(node.manifest()).unwrap(), hash_before);
    assert_eq!(
        arg_of(&node.manifest(), "--initial-cluster"),
        initial,
        "the recorded initial cluster is reused"
    );
    node.stop_etcd();
    node.start_etcd(); // the kubelet restarts etcd with the new flag
    bed.wait_healthy(4);
    let out = node.apply();
    assert!(out.status.success());
    assert_eq!(bed.member_ids(), joined, "no membership change on upgrade");
    checked.push(history.stop());

    // Decommission: the member leaves (3 healthy voters remain), then the files, then the data
    // dir once its database is saved.
    let history = History::start(&bed, "leave on decommission (pre-stop)", &endpoints);
    let (stdout, _, status) = node.pre_stop("30s");
    assert!(status.success(), "{stdout}");
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(report["decision"], "remove", "{stdout}");
    assert_eq!(bed.member_ids(), before, "back to the three original members");
    checked.push(history.stop());
    print_checked("etcd membership, a fourth member", &checked);
    assert!(!node.manifest().exists());
    assert!(!node.data_dir().exists(), "data dir removed");
    let snapshots: Vec<_> = fs::read_dir(node.state().join("etcd-snapshots"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(snapshots.len(), 1, "{snapshots:?}");
    assert!(fs::metadata(&snapshots[0]).unwrap().len() > 0);
    assert_eq!(node.record().unwrap()["phase"], "removed");
    assert!(
        node.record().unwrap()["lastLeave"]["result"]
            .as_str()
            .unwrap()
            .starts_with("removed")
    );
}

/// Anchor pods (named `names`) in a new namespace of the shared control plane, for the Events
/// pre-stop and run publish on their own pod; the admin client and the namespace.
async fn anchor_pods(names: &[&str]) -> (kube::Client, String, String) {
    let cp = support::control_plane::shared().await;
    let ns = cp.namespace("etcd-member").await;
    let admin = cp.admin().await;
    // No controllers run here: the namespace's default ServiceAccount is created by hand.
    let sa: k8s_openapi::api::core::v1::ServiceAccount =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "default"}})).unwrap();
    kube::Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(admin.clone(), &ns)
        .create(&Default::default(), &sa)
        .await
        .unwrap();
    for name in names {
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {"containers": [{"name": "anchor", "image": "kube-anchor"}]}
        }))
        .unwrap();
        kube::Api::<k8s_openapi::api::core::v1::Pod>::namespaced(admin.clone(), &ns)
            .create(&Default::default(), &pod)
            .await
            .unwrap();
    }
    (admin, ns, cp.admin_kubeconfig.display().to_string())
}

/// k0sproject/k0s#8141: a leave that fails must not be forgotten. Refused (quorum) or with etcd
/// unreachable, pre-stop keeps every file, exits non-zero, publishes an Event and keeps the
/// intent in the record; the next hook, with the cluster healthy again, finishes the leave.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_leave_is_loud_kept_and_finished_by_the_next_hook() {
    let (admin, ns, kubeconfig) = anchor_pods(&["etcd-anchor-n3"]).await;
    let identity = [
        ("KUBECONFIG", kubeconfig.as_str()),
        ("POD_NAME", "etcd-anchor-n3"),
        ("POD_NAMESPACE", ns.as_str()),
    ];

    // n1 and n2 run; n3 is the node under test and bootstraps with them (initial cluster).
    let mut bed = Bed::new(3, 2);
    let ports = Ports {
        ip: IP.into(),
        client: bed.ports[2].client,
        peer: bed.ports[2].peer,
    };
    let mut node = Node::new(&bed, "n3", ports, Some(&bed.initial_cluster()));
    let out = node.apply();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(arg_of(&node.manifest(), "--initial-cluster-state"), "new");
    assert_eq!(node.record().unwrap()["phase"], "voter");
    node.start_etcd();
    bed.wait_healthy(3);
    let ids = bed.member_ids();
    let kept = |node: &Node| {
        assert!(node.manifest().exists(), "manifest kept");
        assert!(node.data_dir().join("member").exists(), "data dir kept");
        assert!(
            node.root.join("etc/kubernetes/pki/etcd/server.key").exists(),
            "credentials kept"
        );
    };

    // One of the two other members stops: removing n3 would leave n1 and n2 with one healthy.
    // Asked again while time is left (a member may come back), then held.
    bed.members[1].take().unwrap().stop();
    let (stdout, took, status) = node.pre_stop_with("20s", &identity);
    assert_eq!(status.code(), Some(1), "a held leave fails the hook: {stdout}");
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(report["decision"], "held", "{stdout}");
    let reason = report["reason"].as_str().unwrap();
    assert!(reason.contains("quorum needs 2"), "{reason}");
    assert!(took < Duration::from_secs(20), "returned within its timeout: {took:?}");
    kept(&node);
    assert_eq!(bed.member_ids(), ids, "no member removed");
    let record = node.record().unwrap();
    let intent = &record["leavePending"];
    assert_eq!(intent["pod"], "etcd-anchor-n3", "{record}");
    assert!(intent["attempts"].as_u64().unwrap() >= 2, "asked again: {record}");
    assert!(
        intent["lastRefusal"].as_str().unwrap().contains("quorum needs 2"),
        "{record}"
    );
    let since = intent["since"].clone();
    let event = support::control_plane::event(
        &admin,
        &ns,
        "MembershipHeld",
        Some("etcd-anchor-n3"),
        Duration::from_secs(10),
    )
    .await;
    let note = event.note.unwrap_or_default();
    assert!(
        note.contains("quorum needs 2") && note.contains("every file is kept"),
        "{note}"
    );
    // `status` says so, in the documented schema.
    let out = node.command("status").args(["--output", "json"]).output().unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["etcdMember"]["leavePending"]["pod"], "etcd-anchor-n3", "{doc}");
    validate_status(&doc);
    let out = node.command("status").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("leave pending since"), "{text}");

    // etcd unreachable: every member stopped. Nothing is removed, within the timeout; the
    // intent stays, from the same first attempt.
    node.stop_etcd();
    bed.members[0].take().unwrap().stop();
    let (stdout, took, status) = node.pre_stop("15s");
    assert_eq!(status.code(), Some(1), "{stdout}");
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(report["decision"], "held", "{stdout}");
    assert!(report["reason"].as_str().unwrap().contains("unreachable"), "{stdout}");
    assert!(took < Duration::from_secs(15), "{took:?}");
    kept(&node);
    let record = node.record().unwrap();
    assert_eq!(record["leavePending"]["since"], since, "{record}");
    assert!(
        record["leavePending"].get("pod").is_none(),
        "asked outside a pod: {record}"
    );

    // The cluster back: the next hook finishes the leave and the intent ends with it.
    let initial = bed.initial_cluster();
    for i in 0..2 {
        bed.members[i] = Some(etcd(&bed, &format!("n{}", i + 1), &bed.ports[i], &initial));
    }
    node.start_etcd();
    bed.wait_healthy(3);
    let (stdout, _, status) = node.pre_stop_with("30s", &identity);
    assert!(status.success(), "{stdout}");
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(report["decision"], "remove", "{stdout}");
    assert_eq!(bed.member_ids().len(), 2);
    assert!(!node.manifest().exists());
    let record = node.record().unwrap();
    assert_eq!(record["phase"], "removed", "{record}");
    assert!(record.get("leavePending").is_none(), "{record}");
}

/// `pre-stop` on all three nodes in the same minute (a `helm uninstall`): the members leave one
/// by one while the others keep a quorum, the last voter stays and says so loudly, and the
/// cluster takes writes throughout. An anchor of a new pod on the held node (the component
/// wanted again) then gives the leave up, with an Event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pre_stop_on_every_node_at_once_never_goes_below_quorum() {
    let pods = ["etcd-anchor-n1", "etcd-anchor-n2", "etcd-anchor-n3"];
    let (admin, ns, kubeconfig) = anchor_pods(&[pods[0], pods[1], pods[2], "etcd-anchor-again"]).await;
    let bed = Bed::new(3, 0);
    let nodes = three_anchored_members(&bed);
    let history = History::start(&bed, "pre-stop on three members at once", &bed.endpoints());

    let hooks: Vec<_> = nodes
        .into_iter()
        .zip(pods)
        .map(|(mut node, pod)| {
            let (kubeconfig, ns) = (kubeconfig.clone(), ns.clone());
            std::thread::spawn(move || {
                let identity = [
                    ("KUBECONFIG", kubeconfig.as_str()),
                    ("POD_NAME", pod),
                    ("POD_NAMESPACE", ns.as_str()),
                ];
                let outcome = node.pre_stop_with("40s", &identity);
                (node, pod, outcome)
            })
        })
        .collect();
    let mut removed = Vec::new();
    let mut held = Vec::new();
    for hook in hooks {
        let (node, pod, (stdout, took, status)) = hook.join().unwrap();
        let report: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
        eprintln!("{pod}: {} in {took:?}: {}", report["decision"], report["reason"]);
        match report["decision"].as_str() {
            Some("remove") => {
                assert!(status.success(), "{stdout}");
                assert!(!node.manifest().exists());
                removed.push(node);
            }
            Some("held") => {
                assert_eq!(status.code(), Some(1), "{stdout}");
                held.push((node, pod, report));
            }
            other => panic!("{pod}: {other:?}: {stdout}"),
        }
    }
    print_checked("etcd membership", &[history.stop()]);
    assert_eq!(removed.len(), 2, "two members leave");
    assert_eq!(held.len(), 1, "the last voter stays");
    let (mut node, pod, report) = held.pop().unwrap();
    assert!(
        report["reason"].as_str().unwrap().contains("last voting member"),
        "{report}"
    );
    assert!(node.manifest().exists() && node.data_dir().join("member").exists());
    let members = bed.members();
    assert_eq!(members.len(), 1, "{members:?}");
    assert!(members[0].1.contains(&node.ports.peer_url()), "{members:?}");
    assert!(
        bed.post(
            &node.ports.client_url(),
            "/v3/kv/put",
            r#"{"key":"a2V5","value":"bGFzdA=="}"#
        )
        .is_some_and(|v| v.get("header").is_some()),
        "the last member takes writes"
    );
    let event = support::control_plane::event(&admin, &ns, "MembershipHeld", Some(pod), Duration::from_secs(10)).await;
    assert!(event.note.unwrap_or_default().contains("last voting member"));
    assert!(node.record().unwrap()["leavePending"]["attempts"].as_u64().unwrap() >= 1);

    // The component wanted on the node again: a new anchor pod gives the leave up, loudly.
    let log = fs::File::create(node.log_dir.join("n-again-anchor.log")).unwrap();
    let daemon = Daemon(
        node.command("run")
            .arg("--health-socket")
            .arg(node.log_dir.join("n-again.sock"))
            .env("KUBECONFIG", &kubeconfig)
            .env("POD_NAME", "etcd-anchor-again")
            .env("POD_NAMESPACE", &ns)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    Poll::new(Duration::from_secs(20), "the pending leave given up")
        .every(Duration::from_millis(100))
        .until(|| node.record().is_some_and(|r| r.get("leavePending").is_none()));
    let record = node.record().unwrap();
    let result = record["lastLeave"]["result"].as_str().unwrap();
    assert!(
        result.starts_with("cancelled: anchor pod etcd-anchor-again runs the component"),
        "{record}"
    );
    let event = support::control_plane::event(
        &admin,
        &ns,
        "LeaveCancelled",
        Some("etcd-anchor-again"),
        Duration::from_secs(20),
    )
    .await;
    assert!(event.note.unwrap_or_default().contains(&format!("asked by pod {pod}")));
    daemon.kill();
    node.stop_etcd();
}

#[test]
fn an_anchor_killed_between_adding_the_learner_and_promoting_it_is_resumed_without_a_second_member() {
    let bed = Bed::new(3, 3);
    bed.wait_healthy(3);
    let mut node = Node::new(&bed, "n4", Ports::new(), None);
    let socket = node.log_dir.join("n4.sock");
    let log = fs::File::create(node.log_dir.join("n4-anchor-1.log")).unwrap();
    let daemon = Daemon(
        node.command("run")
            .arg("--health-socket")
            .arg(&socket)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    // SIGKILL as soon as the learner exists (etcd is not running: it cannot be promoted yet).
    Poll::new(Duration::from_secs(20), "the daemon to add the learner")
        .every(Duration::from_millis(20))
        .until(|| !node.my_entries(&bed).is_empty());
    daemon.kill();
    let mine = node.my_entries(&bed);
    assert_eq!(mine.len(), 1);
    assert!(mine[0].2, "still a learner");
    // The worst moment of the crash: the learner added, nothing recorded yet.
    let _ = fs::remove_file(node.state().join("etcd.membership.json"));
    let _ = fs::remove_file(node.manifest());

    // The next anchor finds the learner by its peer URL and resumes the join.
    let log = fs::File::create(node.log_dir.join("n4-anchor-2.log")).unwrap();
    let metrics_port = free_port();
    let daemon = Daemon(
        node.command("run")
            .arg("--health-socket")
            .arg(&socket)
            .arg("--listen")
            .arg(format!("127.0.0.1:{metrics_port}"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    Poll::new(Duration::from_secs(20), "the manifest written")
        .every(Duration::from_millis(50))
        .until(|| node.manifest().exists());
    assert_eq!(node.record().unwrap()["lastJoin"]["action"], "resume");
    node.start_etcd();
    Poll::new(Duration::from_secs(40), "the member promoted").until(|| {
        let members = bed.members();
        let mine: Vec<_> = members
            .iter()
            .filter(|m| m.1.contains(&node.ports.peer_url()))
            .collect();
        assert_eq!(mine.len(), 1, "never two entries for the node: {members:?}");
        assert!(members.len() <= 4, "{members:?}");
        !mine[0].2
    });
    bed.wait_healthy(4);
    Poll::new(Duration::from_secs(10), "the record to say voter")
        .every(Duration::from_millis(50))
        .until(|| node.record().unwrap()["phase"] == "voter");
    // /metrics shows the member once the daemon has looked again (every resync at most).
    let text = RefCell::new(String::new());
    Poll::new(Duration::from_secs(10), "a voter in /metrics")
        .context(|| format!("/metrics: {}", text.borrow()))
        .until(|| {
            let out = Command::new("curl")
                .args(["-s", &format!("http://127.0.0.1:{metrics_port}/metrics")])
                .output()
                .unwrap();
            let mut text = text.borrow_mut();
            *text = String::from_utf8_lossy(&out.stdout).into_owned();
            let line = text.lines().find(|l| l.starts_with("kube_anchor_etcd_member_info{"));
            let Some(line) = line.filter(|l| l.contains("role=\"voter\"")) else {
                return false;
            };
            assert!(
                line.contains(&format!("peer_url=\"{}\"", node.ports.peer_url())),
                "{line}"
            );
            assert!(
                text.contains("kube_anchor_etcd_join_pending{component=\"etcd\"} 0"),
                "{text}"
            );
            true
        });

    // Decommission while the daemon still runs, as the kubelet runs the preStop hook before it
    // stops the container: the member leaves, and the daemon's next syncs (the hook's writes
    // wake it at once) must not add it back as a learner (the lifecycle run saw a replaced
    // node's member re-added within a second, which then kept its data dir).
    let (stdout, _, status) = node.pre_stop("30s");
    assert!(status.success(), "{stdout}");
    assert_eq!(bed.member_ids().len(), 3, "the member left");
    let held = Instant::now();
    while held.elapsed() < Duration::from_secs(5) {
        assert!(
            node.my_entries(&bed).is_empty(),
            "the draining daemon added the member back: {:?}",
            bed.members()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(!node.data_dir().exists(), "the data dir went after its snapshot");
    daemon.kill();
    node.stop_etcd();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_process_node_the_kubelet_runs_the_joined_member_and_stops_it_when_it_leaves() {
    // The node under test is a process node: its kubelet runs etcd from the manifest the anchor
    // writes (hostPath volumes under the node's host root) and stops it when the manifest goes.
    let cp = support::control_plane::shared().await;
    let pn = cp.add_process_node("etcd-pn", &[]).await;
    let bed = Bed::new(3, 3);
    bed.wait_healthy(3);
    let before = bed.member_ids();
    let mut node = Node::with_root(&bed, &pn.name, Ports::on(&pn.ip), None, pn.host_root());
    node.apply_until_written();
    assert_eq!(node.my_entries(&bed).len(), 1);
    // No start_etcd: the kubelet starts it.
    node.apply_until_voter(&bed);
    bed.wait_healthy(4);
    assert_eq!(bed.member_ids().len(), 4);

    let (stdout, _, status) = node.pre_stop("40s");
    assert!(status.success(), "{stdout}");
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(report["decision"], "remove", "{stdout}");
    assert_eq!(bed.member_ids(), before);
    assert!(!node.manifest().exists());
    assert!(
        !node.data_dir().exists(),
        "the kubelet stopped etcd, and the data dir went after its snapshot"
    );
    assert_eq!(fs::read_dir(node.state().join("etcd-snapshots")).unwrap().count(), 1);
}

/// kubernetes/kubeadm#2991: restarting the leader stalls every write until a new election. A
/// member that leads hands leadership to a caught-up voter before its new manifest is written
/// (`apply`; `run` does the same when its turn comes) and before it leaves (`pre-stop`).
#[test]
fn a_leading_member_hands_off_leadership_before_its_restart_and_before_it_leaves() {
    let bed = Bed::new(3, 3);
    let mut node = fourth_voter(&bed);
    let mut urls = bed.endpoints();
    urls.push(node.ports.client_url());
    let n4 = node.my_entries(&bed)[0].0.clone();
    let history = History::start(&bed, "leadership hand-off, a restart and a leave", &urls);

    // A new flag while n4 leads: leadership moves before the manifest is written.
    bed.move_leader(&urls, &n4);
    node.add_flag("--snapshot-count=5000");
    let out = node.apply();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let hex = format!("{:x}", n4.parse::<u64>().unwrap());
    assert!(
        stdout.contains(&format!("etcd: leadership moved from member {hex} to n")),
        "{stdout}"
    );
    let (leader, _) = bed.leader(&urls).expect("a leader");
    assert_ne!(leader, n4, "leadership moved away before the restart");
    node.stop_etcd();
    node.start_etcd(); // the kubelet restarts etcd with the new flag
    bed.wait_healthy(4);

    // Nothing to hand off when another member leads.
    let out = node.apply();
    assert!(out.status.success());
    assert!(!String::from_utf8_lossy(&out.stdout).contains("leadership moved"));

    // The leave: leadership first, then the member goes.
    bed.move_leader(&urls, &n4);
    let (stdout, _, status) = node.pre_stop("60s");
    assert!(status.success(), "{stdout}");
    let record = node.record().unwrap();
    let result = record["lastLeave"]["result"].as_str().unwrap();
    assert!(
        result.starts_with("removed") && result.contains(&format!("leadership moved from member {hex}")),
        "{record}"
    );
    assert_eq!(bed.member_ids().len(), 3);
    print_checked("etcd membership", &[history.stop()]);
}

/// kubernetes/kubernetes#100677, k3s-io/k3s#13498: a node re-imaged under the same name comes
/// back with nothing, while its old member is still listed. It removes that member (quorum
/// allowing) and joins again as a learner, is promoted, and the member list never holds two
/// entries for it. With quorum lost meanwhile it waits, then rejoins.
#[test]
fn a_reimaged_node_removes_its_stale_member_and_joins_again() {
    let mut bed = Bed::new(3, 3);
    let mut node = fourth_voter(&bed);

    let mut old_ids = vec![node.my_entries(&bed)[0].0.clone()];
    let mut endpoints = bed.endpoints();
    endpoints.push(node.ports.client_url());
    let mut checked = Vec::new();
    for quorum_lost in [false, true] {
        let history = History::start(
            &bed,
            if quorum_lost {
                "rejoin after re-image, quorum lost meanwhile"
            } else {
                "rejoin after re-image"
            },
            &endpoints,
        );
        // Hard-killed and re-imaged: no manifest, no state, no data.
        node.stop_etcd();
        fs::remove_dir_all(&node.root).unwrap();
        fs::create_dir_all(&node.root).unwrap();
        if quorum_lost {
            // Two of four voters down: nothing can be removed. The node waits, writes nothing,
            // removes nothing.
            let down: Vec<Process> = bed.members[..2].iter_mut().map(|m| m.take().unwrap()).collect();
            for p in down {
                p.stop();
            }
            for _ in 0..3 {
                let out = node.apply();
                assert!(!out.status.success(), "nothing to write without a member");
                assert!(!node.manifest().exists());
            }
            let initial = bed.initial_cluster();
            for i in 0..2 {
                bed.members[i] = Some(etcd(&bed, &format!("n{}", i + 1), &bed.ports[i], &initial));
            }
            bed.wait_healthy(4);
            assert_eq!(node.my_entries(&bed).len(), 1, "the stale member is still there");
        }
        // Each step: never two entries for this node.
        let start = Instant::now();
        while !node.manifest().exists() {
            let out = node.apply();
            let mine = node.my_entries(&bed);
            assert!(mine.len() <= 1, "two entries for one node: {mine:?}");
            assert!(
                out.status.success() || start.elapsed() < Duration::from_secs(30),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let mine = node.my_entries(&bed);
        assert_eq!(mine.len(), 1, "{mine:?}");
        assert!(mine[0].2, "joined again as a learner: {mine:?}");
        assert!(
            !old_ids.contains(&mine[0].0),
            "a new member, not the stale one: {mine:?}"
        );
        let record = node.record().unwrap();
        assert_eq!(record["phase"], "learner", "{record}");
        node.start_etcd();
        node.apply_until_voter(&bed);
        bed.wait_healthy(4);
        checked.push(history.stop());
        old_ids.push(node.my_entries(&bed)[0].0.clone());
    }
    print_checked("etcd membership, a re-imaged member", &checked);
}

/// [F4] The cluster was first created on this node alone (the values still name it alone in
/// `initialCluster`, state `new`) and has grown; the node is re-imaged, and its anchor's etcd
/// client certificate is one the members do not trust (expired, or of a CA rotated since). The
/// member list is refused by the TLS handshake, which is not "unreachable": neither `apply` nor
/// `run` founds a cluster; nothing is written, and each says why. Before, every failed list was
/// "unreachable", and a node named in the initial cluster founded a new single-member cluster.
#[test]
fn a_node_of_the_initial_cluster_whose_client_is_refused_founds_no_cluster() {
    let bed = Bed::new(2, 2);
    bed.wait_healthy(2);
    let node = Node::new(&bed, "n3", Ports::new(), None);
    node.write_config(&bed, Some(&format!("n3={}", node.ports.peer_url())));
    let other = Pki::new(&bed.dir.path().join("rotated-pki"));
    let (crt, key) = issue(&other, "anchor-client", IP);
    fs::copy(crt, node.config_dir.join("client.crt")).unwrap();
    fs::copy(key, node.config_dir.join("client.key")).unwrap();
    let written = || node.manifest().exists() || node.record().is_some();

    let out = node.apply();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("etcd refused this node's client"), "{stderr}");
    assert!(!written(), "apply wrote a manifest or a record: {stderr}");

    let log_path = node.log_dir.join("n3-refused-anchor.log");
    let log = fs::File::create(&log_path).unwrap();
    let daemon = Daemon(
        node.command("run")
            .arg("--health-socket")
            .arg(node.log_dir.join("n3-refused.sock"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    Poll::new(Duration::from_secs(30), "the running anchor to say why it waits")
        .every(Duration::from_millis(100))
        .until(|| fs::read_to_string(&log_path).is_ok_and(|l| l.contains("etcd refused this node's client")));
    assert!(!written(), "run wrote a manifest or a record:\n{}", tail(&log_path, 20));
    daemon.kill();
    // The members still form the one cluster they were.
    assert_eq!(bed.members().len(), 2);
}

/// [F9, issue 55 item 3] A recorded voter whose data dir reads empty while its record survives
/// (a data disk mounted after the anchor looked, data wiped by hand) removes nothing: `apply`
/// waits, says why and names `--rejoin`; the stale member stays listed. Once the operator says
/// the data is gone (`apply --rejoin`), the stale member is removed and the node joins again as
/// a learner, then votes. (A re-imaged node, whose record is gone too, rejoins by itself:
/// `a_reimaged_node_removes_its_stale_member_and_joins_again`.)
#[test]
fn a_recorded_voter_whose_data_dir_reads_empty_rejoins_only_when_told() {
    let bed = Bed::new(3, 3);
    let mut node = fourth_voter(&bed);
    let stale = node.my_entries(&bed)[0].0.clone();

    node.stop_etcd();
    fs::remove_dir_all(node.data_dir()).unwrap();
    for _ in 0..2 {
        let out = node.apply();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{stderr}");
        assert!(
            stderr.contains("data dir holds no member") && stderr.contains("apply --rejoin"),
            "{stderr}"
        );
    }
    assert_eq!(bed.members().len(), 4, "nothing removed");
    assert_eq!(node.my_entries(&bed)[0].0, stale);
    assert_eq!(node.record().unwrap()["phase"], "voter");

    let out = node.command("apply").arg("--rejoin").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        node.my_entries(&bed).iter().all(|m| m.0 != stale),
        "the stale member removed: {stderr}"
    );
    // The next step adds the learner (as on a re-imaged node) and writes its manifest.
    Poll::new(Duration::from_secs(30), "the node joined again as a learner")
        .every(Duration::from_millis(200))
        .until(|| {
            let _ = node.apply();
            node.record().is_some_and(|r| r["phase"] == "learner")
        });
    let mine = node.my_entries(&bed);
    assert!(mine.len() == 1 && mine[0].2, "joined again as a learner: {mine:?}");
    assert_eq!(arg_of(&node.manifest(), "--initial-cluster-state"), "existing");
    node.start_etcd();
    node.apply_until_voter(&bed);
    bed.wait_healthy(4);
}

/// kubernetes/kubeadm#3287, siderolabs/talos#13710: a learner that never catches up hangs the
/// join with no explanation. Here the learner's etcd does not run (its peer traffic stopped):
/// past `learnerCatchUpTimeout`, and not before, a Warning Event says how far behind the leader
/// it is; the metric and `status` show the lag; nothing is removed, and once etcd runs the
/// learner is promoted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_learner_that_does_not_catch_up_is_reported_after_its_bound() {
    let (admin, ns, kubeconfig) = anchor_pods(&["etcd-anchor-n4"]).await;
    let bed = Bed::new(3, 3);
    bed.wait_healthy(3);
    let mut node = Node::new(&bed, "n4", Ports::new(), None);
    let mut config = fs::read_to_string(node.config_dir.join("anchor.yaml")).unwrap();
    config.push_str("    learnerCatchUpTimeout: 6s\n");
    fs::write(node.config_dir.join("anchor.yaml"), config).unwrap();
    // Entries the learner lacks.
    for i in 0..50 {
        bed.gateway_put(&format!("k{i}"));
    }
    let metrics_port = free_port();
    let log = fs::File::create(node.log_dir.join("n4-learner-anchor.log")).unwrap();
    let daemon = Daemon(
        node.command("run")
            .arg("--health-socket")
            .arg(node.log_dir.join("n4-learner.sock"))
            .arg("--listen")
            .arg(format!("127.0.0.1:{metrics_port}"))
            .env("KUBECONFIG", &kubeconfig)
            .env("POD_NAME", "etcd-anchor-n4")
            .env("POD_NAMESPACE", &ns)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    // The join and the first write's word from the API: tens of seconds when the bed beside
    // loads the machine.
    Poll::new(Duration::from_secs(60), "the learner added and its manifest written")
        .every(Duration::from_millis(50))
        .until(|| node.manifest().exists());
    let added = Instant::now();
    let id = node.my_entries(&bed)[0].0.parse::<u64>().unwrap();
    let hex = format!("{id:x}");

    // Within the bound: the lag is visible, no Event yet.
    let metric = |text: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix("kube_anchor_etcd_learner_behind_entries{component=\"etcd\"} "))
            .and_then(|v| v.trim().parse::<i64>().ok())
    };
    let text = RefCell::new(String::new());
    Poll::new(Duration::from_secs(10), "the learner's lag in /metrics")
        .context(|| format!("/metrics: {}", text.borrow()))
        .until(|| {
            *text.borrow_mut() = curl_text(&format!("http://127.0.0.1:{metrics_port}/metrics"));
            metric(&text.borrow()).is_some_and(|n| n >= 50)
        });
    let out = node.command("status").args(["--output", "json"]).output().unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let progress = &doc["etcdMember"]["learnerProgress"];
    assert!(progress["behind"].as_u64().unwrap() >= 50, "{doc}");
    assert_eq!(progress["matchedIndex"], 0, "{doc}");
    validate_status(&doc);
    let out = node.command("status").output().unwrap();
    let text_status = String::from_utf8_lossy(&out.stdout);
    assert!(text_status.contains("entries behind the leader"), "{text_status}");

    // Past the bound: a Warning Event names the learner and how far behind it is.
    let event = support::control_plane::event(
        &admin,
        &ns,
        "LearnerNotCatchingUp",
        Some("etcd-anchor-n4"),
        Duration::from_secs(30),
    )
    .await;
    let seen = added.elapsed();
    let note = event.note.clone().unwrap_or_default();
    assert!(
        note.starts_with(&format!("learner {hex} has not caught up within 6s"))
            && note.contains("entries behind the leader (it matches up to index 0 of "),
        "{note}"
    );
    assert!(seen >= Duration::from_secs(5), "not before the bound: {seen:?}");
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(node.my_entries(&bed).len(), 1, "nothing removed");
    assert!(node.manifest().exists());

    // etcd runs: the learner catches up and is promoted; the lag goes to 0.
    node.start_etcd();
    Poll::new(Duration::from_secs(40), "the learner promoted")
        .every(Duration::from_millis(200))
        .until(|| node.my_entries(&bed).first().is_some_and(|m| !m.2));
    Poll::new(Duration::from_secs(10), "no lag in /metrics")
        .until(|| metric(&curl_text(&format!("http://127.0.0.1:{metrics_port}/metrics"))) == Some(0));
    daemon.kill();
    node.stop_etcd();
}

fn curl_text(url: &str) -> String {
    let out = Command::new("curl").args(["-s", url]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The outside check of a membership operation (issue 55): `etcd-linearizability`
/// (tools/linearizability, etcd's Go client and porcupine, no code of this project) writes and
/// reads keys through every endpoint in `endpoints` from the moment it starts until it is
/// stopped, then checks the recorded history against one register per key.
struct History {
    operation: String,
    child: std::process::Child,
    history: PathBuf,
    view: PathBuf,
}

/// What the check of one operation found.
struct Checked {
    operation: String,
    operations: u64,
    puts_ok: u64,
    puts_failed: u64,
    gets_ok: u64,
    gets_failed: u64,
    longest_stall: f64,
}

impl History {
    fn start(bed: &Bed, operation: &str, endpoints: &[String]) -> Self {
        let slug: String = operation
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        let history = bed.dir.path().join(format!("history-{slug}.json"));
        let view = bed.dir.path().join(format!("history-{slug}.html"));
        let child = Command::new(tool("etcd-linearizability"))
            .arg("--endpoints")
            .arg(endpoints.join(","))
            .arg("--cacert")
            .arg(bed.pki.ca())
            .arg("--cert")
            .arg(&bed.client.0)
            .arg("--key")
            .arg(&bed.client.1)
            .arg("--history")
            .arg(&history)
            .arg("--visualize")
            .arg(&view)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Some history before the operation begins.
        std::thread::sleep(Duration::from_millis(500));
        Self {
            operation: operation.into(),
            child,
            history,
            view,
        }
    }

    /// Stops the clients (their standard input closes) and asserts the history linearizable.
    fn stop(mut self) -> Checked {
        drop(self.child.stdin.take());
        let out = self.child.wait_with_output().unwrap();
        let report = String::from_utf8_lossy(&out.stdout);
        let doc: serde_json::Value = serde_json::from_str(report.trim()).unwrap_or_else(|e| {
            panic!(
                "{}: no report ({e}): {report}{}",
                self.operation,
                String::from_utf8_lossy(&out.stderr)
            )
        });
        assert!(
            out.status.success() && doc["result"] == "Ok",
            "{}: the history is not linearizable: {doc}; history {}, porcupine's view {}",
            self.operation,
            self.history.display(),
            self.view.display()
        );
        let count = |field: &str| doc[field].as_u64().unwrap();
        let checked = Checked {
            operation: self.operation,
            operations: count("operations"),
            puts_ok: count("putsOk"),
            puts_failed: count("putsFailed"),
            gets_ok: count("getsOk"),
            gets_failed: count("getsFailed"),
            longest_stall: doc["longestWriteStallSeconds"].as_f64().unwrap(),
        };
        assert!(
            checked.puts_ok > 0 && checked.gets_ok > 0,
            "{}: the clients wrote and read nothing: {doc}",
            checked.operation
        );
        checked
    }
}

/// Prints the checks' table (docs/testing.md keeps it).
fn print_checked(title: &str, rows: &[Checked]) {
    eprintln!("{title}, linearizable (porcupine):");
    eprintln!(
        "  {:<44} {:>10} {:>8} {:>11} {:>8} {:>11} {:>13}",
        "operation", "operations", "puts", "puts failed", "gets", "gets failed", "longest stall"
    );
    for r in rows {
        eprintln!(
            "  {:<44} {:>10} {:>8} {:>11} {:>8} {:>11} {:>12.2}s",
            r.operation, r.operations, r.puts_ok, r.puts_failed, r.gets_ok, r.gets_failed, r.longest_stall
        );
    }
}

/// n4 joined to the bed's three running members with `apply` (learner, then promoted), its
/// etcd running: four voters.
fn fourth_voter(bed: &Bed) -> Node {
    bed.wait_healthy(3);
    let mut node = Node::new(bed, "n4", Ports::new(), None);
    node.apply_until_written();
    node.start_etcd();
    node.apply_until_voter(bed);
    bed.wait_healthy(4);
    node
}

/// Three anchored members bootstrapped together, running.
fn three_anchored_members(bed: &Bed) -> Vec<Node> {
    let initial = bed.initial_cluster();
    let mut nodes: Vec<Node> = (0..3)
        .map(|i| {
            let ports = Ports {
                ip: IP.into(),
                client: bed.ports[i].client,
                peer: bed.ports[i].peer,
            };
            Node::new(bed, &format!("n{}", i + 1), ports, Some(&initial))
        })
        .collect();
    for node in &mut nodes {
        let out = node.apply();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        node.start_etcd();
    }
    bed.wait_healthy(3);
    nodes
}

/// `remove` of an etcd member, with real etcd (issue 53): run on two of three nodes and then the
/// last, quorum is never lost. Each member leaves before its files go (two voters remain, then
/// one); once the kubelet (the test) has stopped etcd its database is saved and its data dir
/// removed. The last voter may not leave: nothing is removed, and `--keep-member` is refused as
/// well (no margin). Without the config nothing reaches etcd, so nothing is removed either.
#[test]
fn remove_of_an_etcd_member_leaves_first_and_never_takes_quorum() {
    let bed = Bed::new(3, 0);
    let mut nodes = three_anchored_members(&bed);
    let remove = |node: &mut Node| {
        let child = node
            .command("remove")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let manifest = node.manifest();
        Poll::new(Duration::from_secs(60), "the manifest removed")
            .every(Duration::from_millis(50))
            .until(|| !manifest.exists());
        // The kubelet stops the static pod whose manifest went.
        node.stop_etcd();
        child.wait_with_output().unwrap()
    };

    // No config: the verb cannot reach etcd, so it removes nothing.
    let out = nodes[2]
        .command("remove")
        .env_remove("KUBE_ANCHOR_CONFIG")
        .args(["--component", "etcd"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("--config"), "{stderr}");
    assert!(nodes[2].manifest().exists());

    for (i, voters) in [(2, 2), (1, 1)] {
        let name = nodes[i].name.clone();
        let out = remove(&mut nodes[i]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{name}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.contains("left the cluster") && stdout.contains("removed the etcd data dir"),
            "{name}: {stdout}"
        );
        assert!(nodes[i].my_entries(&bed).is_empty(), "{name} is still a member");
        bed.wait_healthy(voters);
        assert!(!nodes[i].data_dir().join("member").exists(), "{name}'s data dir");
        let saved = fs::read_dir(nodes[i].state().join("etcd-snapshots")).unwrap().count();
        assert_eq!(saved, 1, "{name}: one database saved");
    }
    // The last voter: refused, nothing removed; --keep-member too.
    for extra in [&[][..], &["--keep-member"][..]] {
        let out = nodes[0].command("remove").args(extra).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{extra:?}: {stderr}");
        assert!(stderr.contains("nothing removed"), "{extra:?}: {stderr}");
        assert!(nodes[0].manifest().exists() && nodes[0].data_dir().join("member").exists());
    }
    assert!(
        bed.post(
            &nodes[0].ports.client_url(),
            "/v3/kv/put",
            r#"{"key":"a2V5","value":"bGFzdA=="}"#
        )
        .is_some_and(|v| v.get("header").is_some()),
        "the last member takes writes"
    );
    nodes[0].stop_etcd();
}

/// kubernetes/kubeadm#2991, measured: a rolling etcd upgrade (a changed flag, node by node:
/// `apply`, then the kubelet restarts etcd) with a client writing throughout, once with the
/// hand-off off and once on, the leader's node first both times. Without it the leader is
/// restarted while it leads; with it, never. Each pass's history is linearizable; its longest
/// write stall and failed requests are printed side by side (docs/testing.md keeps them).
#[test]
fn a_rolling_etcd_upgrade_with_and_without_the_leadership_hand_off() {
    let bed = Bed::new(3, 0);
    let mut nodes = three_anchored_members(&bed);
    let urls = bed.endpoints();
    let mut rows = Vec::new();
    for (pass, hand_off) in [("without hand-off", false), ("with hand-off", true)] {
        for node in &nodes {
            node.write_config(&bed, Some(&bed.initial_cluster()));
            if !hand_off {
                let path = node.config_dir.join("anchor.yaml");
                let mut config = fs::read_to_string(&path).unwrap();
                config.push_str("    handOffLeadership: false\n");
                fs::write(path, config).unwrap();
            }
        }
        // The leader's node first: the case the hand-off is for.
        let (leader, _) = bed.leader(&urls).expect("a leader");
        let ids: Vec<String> = nodes.iter().map(|n| n.my_entries(&bed)[0].0.clone()).collect();
        let first = ids.iter().position(|id| *id == leader).unwrap();
        nodes.rotate_left(first);
        let history = History::start(&bed, &format!("rolling upgrade, {pass}"), &urls);
        let mut restarted_leaders = 0;
        for node in &mut nodes {
            node.add_flag(if hand_off {
                "--snapshot-count=6000"
            } else {
                "--snapshot-count=5000"
            });
            let out = node.apply();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            let mine = node.my_entries(&bed)[0].0.clone();
            if bed.leader(&urls).is_some_and(|(l, _)| l == mine) {
                restarted_leaders += 1;
            }
            node.stop_etcd();
            node.start_etcd(); // the kubelet restarts etcd with the new flag
            bed.wait_healthy(3);
            let log = node.etcd_log();
            Poll::new(Duration::from_secs(30), "the restarted member to answer")
                .context(|| format!("its log:\n{}", tail(&log, 30)))
                .until(|| {
                    node.restart_etcd_if_exited();
                    bed.post(&node.ports.client_url(), "/v3/maintenance/status", "{}")
                        .is_some_and(|s| s["leader"].as_str().is_some_and(|l| l != "0"))
                });
        }
        std::thread::sleep(Duration::from_secs(1));
        rows.push(history.stop());
        if hand_off {
            assert_eq!(restarted_leaders, 0, "a leader was restarted while it led");
        } else {
            assert!(restarted_leaders >= 1, "the leader's node went first while it led");
        }
    }
    print_checked("rolling etcd upgrade, 3 members, the leader's node first", &rows);
    for node in &mut nodes {
        node.stop_etcd();
    }
}

/// `apply` of a manifest that restarts an etcd member, with real etcd: written while a NOSPACE
/// alarm is raised (every member lists it among its status errors, and still votes); refused
/// while another voter is down (nothing written, the message names the member that does not
/// answer, exit non-zero), written with `--force`, and written without it once the member
/// answers again.
#[test]
fn apply_restarts_a_member_only_where_etcd_can_lose_it() {
    let bed = Bed::new(3, 0);
    let mut nodes = three_anchored_members(&bed);
    let urls = bed.endpoints();
    let id = nodes[1].my_entries(&bed)[0].0.clone();
    let alarm = |action: &str| {
        let body = format!(r#"{{"action":"{action}","memberID":"{id}","alarm":"NOSPACE"}}"#);
        bed.post(&urls[0], "/v3/maintenance/alarm", &body)
            .unwrap_or_else(|| panic!("alarm {action}"))
    };
    alarm("ACTIVATE");
    let status = bed.post(&urls[2], "/v3/maintenance/status", "{}").unwrap();
    assert!(status["errors"].to_string().contains("NOSPACE"), "{status}");
    nodes[0].add_flag("--snapshot-count=6500");
    let out = nodes[0].apply();
    assert!(
        out.status.success(),
        "refused under an alarm: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    nodes[0].stop_etcd();
    nodes[0].start_etcd();
    bed.wait_healthy(3);
    alarm("DEACTIVATE");

    nodes[2].stop_etcd();
    let before = fs::read(nodes[0].manifest()).unwrap();
    nodes[0].add_flag("--snapshot-count=7000");
    let out = nodes[0].apply();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "written with n3 down: {stderr}");
    assert!(
        stderr.contains("nothing written") && stderr.contains("n3 (") && stderr.contains("does not answer"),
        "{stderr}"
    );
    assert_eq!(
        fs::read(nodes[0].manifest()).unwrap(),
        before,
        "the manifest was changed"
    );

    // --force writes it (and says why it should not have).
    let out = nodes[0].command("apply").arg("--force").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("--force: writing although"));
    assert_ne!(fs::read(nodes[0].manifest()).unwrap(), before);
    nodes[0].stop_etcd();
    nodes[0].start_etcd();

    // n3 back: the next member's restart is written without --force.
    nodes[2].start_etcd();
    bed.wait_healthy(3);
    nodes[1].add_flag("--snapshot-count=7000");
    let out = Poll::new(Duration::from_secs(30), "n2's apply once every other voter answers").until(|| {
        let out = nodes[1].apply();
        out.status.success().then_some(out)
    });
    assert!(out.status.success());
    for node in &mut nodes {
        node.stop_etcd();
    }
}

/// The outside check can fail: a read of an overwritten value after the overwrite returned is
/// not linearizable, and a failed put that a later read observed is (it may have been applied).
#[test]
fn the_linearizability_check_finds_a_stale_read() {
    let dir = tempfile::tempdir().unwrap();
    let check = |name: &str, ops: &str| {
        let path = dir.path().join(name);
        fs::write(&path, format!("[{ops}]")).unwrap();
        let out = Command::new(tool("etcd-linearizability"))
            .arg("--check")
            .arg(&path)
            .output()
            .unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        (out.status.code(), doc["result"].as_str().unwrap().to_owned())
    };
    let put = |client: u32, value: &str, call: u64, ok: bool| {
        format!(
            r#"{{"client":{client},"kind":"put","key":"k","value":"{value}","call":{call},"return":{},"ok":{ok}}}"#,
            call + 10
        )
    };
    let get = |client: u32, value: &str, call: u64| {
        format!(
            r#"{{"client":{client},"kind":"get","key":"k","value":"{value}","call":{call},"return":{},"ok":true}}"#,
            call + 10
        )
    };
    let stale = [put(0, "a", 0, true), put(1, "b", 20, true), get(0, "a", 40)].join(",");
    assert_eq!(check("stale.json", &stale), (Some(1), "Illegal".into()));
    let ambiguous = [
        put(0, "a", 0, true),
        put(1, "b", 20, false),
        get(0, "b", 40),
        get(2, "b", 60),
    ]
    .join(",");
    assert_eq!(check("ambiguous.json", &ambiguous), (Some(0), "Ok".into()));
    let lost = [put(0, "a", 0, true), put(1, "b", 20, true), get(0, "", 40)].join(",");
    assert_eq!(check("lost.json", &lost), (Some(1), "Illegal".into()));
}

/// The scheduled snapshots of one node, as (file name, when taken), read from the directory.
fn scheduled_snapshots(node: &Node) -> Vec<(String, u64)> {
    let dir = node.state().join("etcd-scheduled-snapshots");
    let mut found: Vec<(String, u64)> = fs::read_dir(&dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| n.ends_with(".db") && !n.starts_with('.'))
                .map(|n| {
                    let t = humantime::parse_rfc3339(&format!(
                        "{}-{}-{}T{}:{}:{}Z",
                        &n[0..4],
                        &n[4..6],
                        &n[6..8],
                        &n[9..11],
                        &n[11..13],
                        &n[13..15]
                    ))
                    .unwrap_or_else(|e| panic!("{n}: {e}"));
                    (n, t.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs())
                })
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found
}

/// Checks a snapshot file as etcdutl does (its last 32 bytes are the sha256 of the rest), with
/// the test's own code, and returns its record.
fn check_snapshot(node: &Node, name: &str) -> serde_json::Value {
    use sha2::Digest as _;
    let dir = node.state().join("etcd-scheduled-snapshots");
    let bytes = fs::read(dir.join(name)).unwrap();
    assert_eq!(bytes.len() % 512, 32, "{name}: {} bytes", bytes.len());
    let (db, hash) = bytes.split_at(bytes.len() - 32);
    assert_eq!(
        sha2::Sha256::digest(db).as_slice(),
        hash,
        "{name}: etcd's integrity hash"
    );
    let record: serde_json::Value =
        serde_json::from_slice(&fs::read(dir.join(format!("{name}.json"))).unwrap()).unwrap();
    assert_eq!(record["sha256"], hex::encode(sha2::Sha256::digest(&bytes)), "{name}");
    assert_eq!(record["bytes"], bytes.len() as u64, "{name}");
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(
        fs::metadata(dir.join(name)).unwrap().permissions().mode() & 0o777,
        0o600
    );
    record
}

/// Scheduled snapshots (issue 57) on three real members, each node's anchor `run` with a 2 s
/// schedule and 2 kept. The nodes take the slots in turn: never two snapshots of one slot, and
/// more than one node takes some. Each file passes etcd's integrity check (computed here) and
/// its record names the cluster and a revision at least the last write's. Each node keeps 2. A
/// member stopped: its slots go to the others. A damaged file is named by `status`. A node
/// whose snapshots outgrow `maxBytes` fails loudly (the failures metric) and keeps the ones it
/// had.
#[test]
fn scheduled_snapshots_rotate_over_the_healthy_members_verify_and_keep_the_count() {
    let bed = Bed::new(3, 0);
    let mut nodes = three_anchored_members(&bed);
    for i in 0..20 {
        bed.gateway_put(&format!("/registry/before-{i}"));
    }
    let status = bed.post(&bed.endpoints()[0], "/v3/maintenance/status", "{}").unwrap();
    let cluster_id = status["header"]["cluster_id"].as_str().unwrap().to_owned();
    let revision_before: i64 = status["header"]["revision"].as_str().unwrap().parse().unwrap();
    let schedule = |node: &Node, max_bytes: u64| {
        let path = node.config_dir.join("anchor.yaml");
        let config = fs::read_to_string(&path).unwrap();
        let config = if config.contains("schedule:") {
            config.replace("maxBytes: 104857600,", &format!("maxBytes: {max_bytes},"))
        } else {
            config.replace(
                "snapshots: {keep: 2, maxBytes: 104857600}",
                &format!("snapshots: {{keep: 2, maxBytes: {max_bytes}, schedule: {{every: 2s, keep: 2}}}}"),
            )
        };
        assert!(
            config.contains(&format!("maxBytes: {max_bytes}, schedule: {{every: 2s")),
            "{config}"
        );
        fs::write(&path, config).unwrap();
    };
    // n1's anchor is an anchor pod of the shared control plane: its AnchorStatus and Events.
    let (_, ns, kubeconfig) = tokio::runtime::Runtime::new().unwrap().block_on(async {
        // The AnchorStatus CRD.
        support::control_plane::shared().await.anchor_service_account().await;
        anchor_pods(&["etcd-anchor-snapshots"]).await
    });
    let mut metrics_ports = Vec::new();
    let mut daemons = Vec::new();
    for node in &nodes {
        schedule(node, 104_857_600);
        let port = free_port();
        metrics_ports.push(port);
        let log = fs::File::create(node.log_dir.join(format!("{}-snapshots-anchor.log", node.name))).unwrap();
        let mut command = node.command("run");
        if node.name == "n1" {
            command
                .env("KUBECONFIG", &kubeconfig)
                .env("POD_NAME", "etcd-anchor-snapshots")
                .env("POD_NAMESPACE", &ns);
        }
        daemons.push(Daemon(
            command
                .arg("--listen")
                .arg(format!("127.0.0.1:{port}"))
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .unwrap(),
        ));
    }
    // Every snapshot any node held, by node: (name, taken at).
    let seen: RefCell<Vec<BTreeSet<(String, u64)>>> = RefCell::new(vec![BTreeSet::new(); 3]);
    let look = |nodes: &[Node]| {
        let mut seen = seen.borrow_mut();
        for (i, node) in nodes.iter().enumerate() {
            let now = scheduled_snapshots(node);
            // A new one is in place a moment before the oldest goes.
            assert!(now.len() <= 3, "{}: more than 2 kept: {now:?}", node.name);
            seen[i].extend(now);
        }
    };
    Poll::new(Duration::from_secs(60), "a node to have taken 3 snapshots (one pruned)")
        .every(Duration::from_millis(200))
        .context(|| format!("seen: {:?}", seen.borrow()))
        .until(|| {
            look(&nodes);
            seen.borrow().iter().any(|s| s.len() >= 3)
        });
    // Between one node's snapshots, 2 on it.
    Poll::new(Duration::from_secs(10), "every node to hold at most 2")
        .every(Duration::from_millis(100))
        .until(|| nodes.iter().all(|n| scheduled_snapshots(n).len() <= 2));
    {
        let seen = seen.borrow();
        let mut slots = BTreeMap::new();
        for (i, taken) in seen.iter().enumerate() {
            for (name, at) in taken {
                if let Some(other) = slots.insert(at / 2, (i, name.clone())) {
                    panic!("slot {} taken twice: {other:?} and {:?}", at / 2, (i, name));
                }
            }
        }
        let takers = seen.iter().filter(|s| !s.is_empty()).count();
        assert!(takers >= 2, "the slots go round the nodes: {seen:?}");
        println!("snapshots by node: {seen:?}");
    }
    for node in &nodes {
        for (name, _) in scheduled_snapshots(node) {
            let record = check_snapshot(node, &name);
            assert_eq!(record["clusterID"], cluster_id.as_str());
            assert_eq!(record["member"], node.name.as_str());
            assert!(record["revision"].as_i64().unwrap() >= revision_before, "{record}");
        }
    }
    let taken = |port: u16| {
        let text = curl_text(&format!("http://127.0.0.1:{port}/metrics"));
        let value = |name: &str| {
            text.lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .unwrap_or_else(|| panic!("{name} not in {text}"))
        };
        (
            value("kube_anchor_etcd_snapshot_interval_seconds{"),
            value("kube_anchor_etcd_snapshot_last_success_timestamp_seconds{"),
            value("kube_anchor_etcd_snapshot_failures_total{"),
        )
    };
    let newest = *metrics_ports
        .iter()
        .map(|p| taken(*p))
        .inspect(|(every, _, failures)| assert_eq!((*every, *failures), (2.0, 0.0)))
        .map(|(_, at, _)| at as u64)
        .collect::<Vec<_>>()
        .iter()
        .max()
        .unwrap();
    assert!(newest > 0);
    // n1's newest in its AnchorStatus (`kube-anchor fleet` shows it), and an Event per snapshot.
    let kubeconfig = PathBuf::from(&kubeconfig);
    let published = RefCell::new(String::new());
    Poll::new(Duration::from_secs(30), "n1's newest snapshot in its AnchorStatus")
        .every(Duration::from_millis(500))
        .context(|| published.borrow().clone())
        .until(|| {
            let out = support::kubectl::kubectl(
                &kubeconfig,
                &[
                    "get",
                    "anchorstatus",
                    "n1.etcd",
                    "-o",
                    "jsonpath={.status.pod}|{.status.lastSnapshot}",
                ],
            );
            *published.borrow_mut() = String::from_utf8_lossy(&out.stdout).into_owned();
            let published = published.borrow();
            let Some((pod, last)) = published.split_once('|') else {
                return false;
            };
            let newest_here = scheduled_snapshots(&nodes[0]).last().map(|(n, _)| n.clone());
            pod == "etcd-anchor-snapshots"
                && newest_here.is_some_and(|n| {
                    let record = check_snapshot(&nodes[0], &n);
                    last == format!(
                        "{} revision {}",
                        record["takenAt"].as_str().unwrap(),
                        record["revision"]
                    )
                })
        });
    let events = support::kubectl::kubectl_ok(
        &kubeconfig,
        &[
            "get",
            "events",
            "-n",
            &ns,
            "--field-selector",
            "reason=EtcdSnapshotTaken",
            "-o",
            "jsonpath={.items[*].message}",
        ],
    );
    assert!(
        events.contains("integrity hash verified") && events.contains(&format!("cluster {cluster_id}")),
        "{events}"
    );

    // n2's member stopped: the next snapshots are all n1's and n3's, still one per slot.
    nodes[1].stop_etcd();
    let stopped_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    // A slot for the health looks to see it gone.
    std::thread::sleep(Duration::from_secs(3));
    let settled = stopped_at + 3;
    let after = || -> Vec<(usize, u64)> {
        seen.borrow()
            .iter()
            .enumerate()
            .flat_map(|(i, s)| s.iter().map(move |(_, at)| (i, *at)))
            .filter(|(_, at)| *at >= settled)
            .collect()
    };
    Poll::new(Duration::from_secs(30), "three snapshots with n2 stopped")
        .every(Duration::from_millis(200))
        .context(|| format!("seen: {:?}", seen.borrow()))
        .until(|| {
            look(&nodes);
            after().len() >= 3
        });
    let taken_after = after();
    assert!(
        taken_after.iter().all(|(i, _)| *i != 1),
        "n2's member is down: {taken_after:?}"
    );
    let mut slots: Vec<u64> = taken_after.iter().map(|(_, at)| at / 2).collect();
    slots.sort();
    let n = slots.len();
    slots.dedup();
    assert_eq!(slots.len(), n, "one snapshot per slot: {taken_after:?}");

    // A damaged snapshot (a byte flipped in n1's oldest): `status --verify-snapshots` reads
    // every one, names it and offers another as the last good one; plain `status` reads the
    // newest until one checks out and compares the older ones' sizes with their records.
    let victim = scheduled_snapshots(&nodes[0]);
    let (damaged, _) = victim.first().expect("n1 holds snapshots").clone();
    daemons[0].0.kill().unwrap();
    let _ = daemons[0].0.wait();
    let path = nodes[0].state().join("etcd-scheduled-snapshots").join(&damaged);
    let mut bytes = fs::read(&path).unwrap();
    bytes[4096] ^= 0xff;
    fs::write(&path, bytes).unwrap();
    let status_json = |extra: &[&str]| {
        let out = nodes[0]
            .command("status")
            .args(["--output", "json"])
            .args(extra)
            .output()
            .unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        validate_status(&doc);
        doc
    };
    let integrity_of = |doc: &serde_json::Value| {
        doc["etcdSnapshots"]["snapshots"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["file"].as_str().unwrap().ends_with(&damaged))
            .unwrap()["integrity"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let named = |doc: &serde_json::Value| {
        doc["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().contains(&damaged))
    };
    let doc = status_json(&["--verify-snapshots"]);
    assert!(integrity_of(&doc).contains("does not match"), "{doc:#}");
    assert!(named(&doc), "{doc:#}");
    let last_good = &doc["etcdSnapshots"]["lastGood"];
    if victim.len() > 1 {
        assert!(!last_good["file"].as_str().unwrap().ends_with(&damaged), "{doc:#}");
        assert_eq!(last_good["integrity"], "verified");
        let doc = status_json(&[]);
        assert!(integrity_of(&doc).contains("not read"), "{doc:#}");
        assert!(!named(&doc), "{doc:#}");
        assert_eq!(doc["etcdSnapshots"]["lastGood"], *last_good);
    }
    let text = nodes[0].command("status").arg("--verify-snapshots").output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("cannot be restored from") && text.contains(&damaged),
        "{text}"
    );
    // Cut off: found by its size alone.
    let bytes = fs::read(&path).unwrap();
    fs::write(&path, &bytes[..bytes.len() - 100]).unwrap();
    let doc = status_json(&[]);
    assert!(
        integrity_of(&doc).contains("cut off") || integrity_of(&doc).contains("not a database"),
        "{doc:#}"
    );
    assert!(named(&doc), "{doc:#}");

    // n3's snapshots outgrow maxBytes: each attempt fails, counted, and the ones on the node stay.
    let kept = scheduled_snapshots(&nodes[2]);
    assert!(!kept.is_empty(), "n3 took some: {:?}", seen.borrow());
    schedule(&nodes[2], 1024);
    Poll::new(Duration::from_secs(30), "n3's failures counted")
        .every(Duration::from_millis(500))
        .context(|| tail(&nodes[2].log_dir.join("n3-snapshots-anchor.log"), 30))
        .until(|| taken(metrics_ports[2]).2 >= 1.0);
    let left: Vec<String> = fs::read_dir(nodes[2].state().join("etcd-scheduled-snapshots"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| !n.ends_with(".json"))
        .collect();
    let kept_names: Vec<String> = scheduled_snapshots(&nodes[2]).into_iter().map(|(n, _)| n).collect();
    assert!(
        kept.iter().all(|(n, _)| kept_names.contains(n)) || kept_names.len() == 2,
        "n3's snapshots kept: {kept:?} then {kept_names:?}"
    );
    assert_eq!(left.len(), kept_names.len(), "no partial file left: {left:?}");
    drop(daemons);

    // An operator's snapshot (`kube-anchor snapshot`) from n1, kept with the scheduled ones.
    let before = scheduled_snapshots(&nodes[0]);
    let out = nodes[0].command("snapshot").args(["--keep", "5"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("integrity hash verified"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = scheduled_snapshots(&nodes[0]);
    assert_eq!(after.len(), before.len() + 1, "{before:?} then {after:?}");
    check_snapshot(&nodes[0], &after.last().unwrap().0);
    for node in &mut nodes {
        node.stop_etcd();
    }
}

/// (dbSize, dbSizeInUse, leads) of the member at `url`, from its own status.
fn db_of(bed: &Bed, url: &str) -> Option<(u64, u64, bool)> {
    let s = bed.post_within(url, "/v3/maintenance/status", "{}", 2)?;
    let n = |v: &serde_json::Value| v.as_str().and_then(|s| s.parse::<u64>().ok());
    Some((
        n(&s["dbSize"])?,
        n(&s["dbSizeInUse"])?,
        s["leader"] == s["header"]["member_id"],
    ))
}

/// Grows and fragments every member's database: 384 values of 64 KiB written (about 24 MB),
/// deleted and compacted away physically, then small writes until each member's status shows
/// the pages free. Returns each member's (dbSize, dbSizeInUse, leads).
fn fragment(bed: &Bed, urls: &[String]) -> Vec<(u64, u64, bool)> {
    use base64::Engine as _;
    let b64 = |s: &[u8]| base64::engine::general_purpose::STANDARD.encode(s);
    // Grow: 384 values of 64 KiB, then delete them and compact physically.
    let body = bed.dir.path().join("put.json");
    let value = b64(&vec![b'x'; 64 << 10]);
    for i in 0..384 {
        fs::write(
            &body,
            format!(
                r#"{{"key":"{}","value":"{value}"}}"#,
                b64(format!("/grow/{i:04}").as_bytes())
            ),
        )
        .unwrap();
        assert!(
            bed.post(&urls[i % 3], "/v3/kv/put", &format!("@{}", body.display()))
                .is_some_and(|v| v.get("header").is_some()),
            "put {i}"
        );
    }
    let deleted = bed
        .post(
            &urls[0],
            "/v3/kv/deleterange",
            &format!(r#"{{"key":"{}","range_end":"{}"}}"#, b64(b"/grow/"), b64(b"/grow0")),
        )
        .unwrap();
    let revision = deleted["header"]["revision"].as_str().unwrap().to_owned();
    bed.post(
        &urls[0],
        "/v3/kv/compaction",
        &format!(r#"{{"revision":"{revision}","physical":true}}"#),
    )
    .unwrap();
    // The compaction's pages count as free once later commits (of later writes) have run.
    let before: RefCell<Vec<Option<(u64, u64, bool)>>> = RefCell::new(Vec::new());
    let writes = std::cell::Cell::new(0);
    Poll::new(Duration::from_secs(20), "the compaction's pages freed on every member")
        .every(Duration::from_millis(200))
        .context(|| format!("{:?}", before.borrow()))
        .until(|| {
            writes.set(writes.get() + 1);
            bed.gateway_put(&format!("/after-compaction/{}", writes.get()));
            *before.borrow_mut() = urls.iter().map(|u| db_of(bed, u)).collect();
            before
                .borrow()
                .iter()
                .all(|b| b.is_some_and(|(size, in_use, _)| size > 16 << 20 && in_use * 2 < size))
        });
    let before: Vec<(u64, u64, bool)> = before.into_inner().into_iter().flatten().collect();
    before
}

/// Rolling defrag (issue 57) on three real members grown and fragmented by the test (about 24 MB
/// written, deleted and compacted away), each node's anchor `run` with `defrag` (1 MiB, 45 %
/// free, looked at every second) while etcd's Go client writes and reads through every member:
/// every database shrinks (etcd's status); one member at a time (no two of the anchors' defrag
/// calls overlap); the member that led at the start goes last and no longer leads when it does
/// (asserted from etcd's status); the history is linearizable, with no failed write. The longest write stall is
/// printed (docs/testing.md keeps it).
#[test]
fn a_rolling_defrag_shrinks_every_member_one_at_a_time_the_leader_last() {
    let bed = Bed::new(3, 0);
    let mut nodes = three_anchored_members(&bed);
    let urls = bed.endpoints();
    let before = fragment(&bed, &urls);
    let leader_at_start = before.iter().position(|b| b.2).expect("a leader");

    let history = History::start(&bed, "rolling defrag of 3 members", &urls);
    let mut daemons = Vec::new();
    for node in &nodes {
        let path = node.config_dir.join("anchor.yaml");
        let mut config = fs::read_to_string(&path).unwrap();
        config.push_str("    defrag: {every: 1s, minBytes: 1048576, minFreePercent: 45}\n");
        fs::write(&path, config).unwrap();
        let log = fs::File::create(node.log_dir.join(format!("{}-defrag-anchor.log", node.name))).unwrap();
        daemons.push(Daemon(
            node.command("run")
                // Nothing here can judge the version `apply` wrote (no API, runtime or health
                // URL): its trial never ends, and holds nothing.
                .args(["--runtime-endpoint", "none"])
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .unwrap(),
        ));
    }
    // When each member's database was first seen small, and whether it led then.
    let mut shrunk: Vec<Option<(Instant, bool)>> = vec![None; 3];
    let started = Instant::now();
    while shrunk.iter().any(Option::is_none) {
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "not every member defragmented: {shrunk:?}\n{}",
            nodes
                .iter()
                .map(|n| tail(&n.log_dir.join(format!("{}-defrag-anchor.log", n.name)), 10))
                .collect::<Vec<_>>()
                .join("\n")
        );
        for (i, url) in urls.iter().enumerate() {
            if shrunk[i].is_none()
                && let Some((size, _, leads)) = db_of(&bed, url)
                && size < 8 << 20
            {
                shrunk[i] = Some((Instant::now(), leads));
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_secs(1));
    let checked = history.stop();
    drop(daemons);
    let mut order: Vec<usize> = (0..3).collect();
    order.sort_by_key(|i| shrunk[*i].unwrap().0);
    eprintln!(
        "defrag order {order:?} (the leader at the start: {leader_at_start}); sizes before {:?}, after {:?}",
        before.iter().map(|b| b.0).collect::<Vec<_>>(),
        urls.iter().map(|u| db_of(&bed, u).map(|d| d.0)).collect::<Vec<_>>()
    );
    // One at a time: each anchor logs when it asked its member for the defrag and when etcd
    // answered; no two of those windows overlap.
    let mut windows: Vec<(std::time::SystemTime, std::time::SystemTime, String)> = nodes
        .iter()
        .map(|n| {
            let log = fs::read_to_string(n.log_dir.join(format!("{}-defrag-anchor.log", n.name))).unwrap();
            let at = |needle: &str| {
                let line = log
                    .lines()
                    .find(|l| l.contains(needle))
                    .unwrap_or_else(|| panic!("{}: no {needle:?} in {log}", n.name));
                humantime::parse_rfc3339(line.split_whitespace().next().unwrap()).unwrap()
            };
            (
                at("defragmenting this node's etcd member"),
                at("etcd member defragmented"),
                n.name.clone(),
            )
        })
        .collect();
    windows.sort();
    for pair in windows.windows(2) {
        assert!(pair[0].1 <= pair[1].0, "two defrags at once: {windows:?}");
    }
    eprintln!(
        "defrags: {}",
        windows
            .iter()
            .map(|(from, to, name)| format!("{name} {} ms", to.duration_since(*from).unwrap_or_default().as_millis()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    assert_eq!(order[2], leader_at_start, "the leader goes last");
    assert!(
        !shrunk[leader_at_start].unwrap().1,
        "the leader was defragmented while it led"
    );
    assert_eq!(checked.puts_failed, 0, "a write failed during the rolling defrag");
    print_checked("rolling defrag, 3 members, a client writing throughout", &[checked]);
    for node in &nodes {
        let log = fs::read_to_string(node.log_dir.join(format!("{}-defrag-anchor.log", node.name))).unwrap();
        assert!(log.contains("etcd member defragmented"), "{}: {log}", node.name);
    }

    // An operator's defrag (`kube-anchor defrag`): below the thresholds it goes on; with another
    // member down it is refused, naming it, and the member keeps answering.
    bed.wait_healthy(3);
    let out = nodes[1].command("defrag").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("defragmented member n2"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    nodes[2].stop_etcd();
    let out = nodes[1].command("defrag").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("member n3 is not healthy") && stderr.contains("not defragmented"),
        "{stderr}"
    );
    for node in &mut nodes {
        node.stop_etcd();
    }
}

/// A defrag by an anchor pod (issue 57) holds the control plane's rollout turn, as a restart
/// does, and gives it back. On a process node whose kubelet runs the joined fourth member (so the
/// anchor's trial of it ends, through its mirror pod), the bed's three members defragmented
/// first by the test: while another node holds the rollout Lease the anchor waits
/// (`kube_anchor_etcd_defrag_waiting`); once it is free the member is defragmented, the Lease
/// (deleted by the test, so only the anchor writes it) exists again with no holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_defrag_takes_the_rollout_turn_and_gives_it_back() {
    let cp = support::control_plane::shared().await;
    cp.anchor_service_account().await;
    let pn = cp.add_process_node("etcd-defrag-pn", &[]).await;
    let (admin, ns, kubeconfig) = anchor_pods(&["etcd-anchor-defrag"]).await;
    let bed = Bed::new(3, 3);
    bed.wait_healthy(3);
    let node = Node::with_root(&bed, &pn.name, Ports::on(&pn.ip), None, pn.host_root());
    node.apply_until_written();
    node.apply_until_voter(&bed);
    bed.wait_healthy(4);
    let mut urls = bed.endpoints();
    urls.push(node.ports.client_url());
    fragment(&bed, &urls);
    // The operator's defrag of the bed's members: the node's is the only one above the thresholds.
    for url in &urls[..3] {
        bed.post(url, "/v3/maintenance/defragment", "{}").expect("defragment");
    }
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> = kube::Api::namespaced(admin.clone(), &ns);
    let held: k8s_openapi::api::coordination::v1::Lease = serde_json::from_value(serde_json::json!({
        "metadata": {"name": kube_anchor_core::rollout::LEASE},
        "spec": {"holderIdentity": "another-node", "renewTime": "2030-01-01T00:00:00.000000Z"}
    }))
    .unwrap();
    leases.create(&Default::default(), &held).await.unwrap();

    let path = node.config_dir.join("anchor.yaml");
    let mut config = fs::read_to_string(&path).unwrap();
    config.push_str("    defrag: {every: 1s, minBytes: 1048576, minFreePercent: 45}\n");
    fs::write(&path, config).unwrap();
    let metrics_port = free_port();
    let log_path = node.log_dir.join("defrag-pn-anchor.log");
    let log = fs::File::create(&log_path).unwrap();
    let _daemon = Daemon(
        node.command("run")
            .args(["--trial-period", "1s", "--listen"])
            .arg(format!("127.0.0.1:{metrics_port}"))
            .env("KUBECONFIG", &kubeconfig)
            .env("POD_NAME", "etcd-anchor-defrag")
            .env("POD_NAMESPACE", &ns)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    let metric = |name: &str| {
        let text = curl_text(&format!("http://127.0.0.1:{metrics_port}/metrics"));
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
    };
    // The version `apply` wrote is on trial first (until its mirror pod shows it running).
    Poll::new(
        Duration::from_secs(120),
        "the defrag waiting for the turn another node holds",
    )
    .every(Duration::from_millis(500))
    .context(|| tail(&log_path, 20))
    .until(|| {
        metric("kube_anchor_etcd_defrag_waiting{") == Some(1.0)
            && fs::read_to_string(&log_path)
                .unwrap()
                .contains("node another-node holds the rollout turn")
    });
    assert_eq!(metric("kube_anchor_etcd_defrags_total{"), Some(0.0));
    let (size, _, _) = db_of(&bed, &node.ports.client_url()).unwrap();
    assert!(size > 16 << 20, "{size}");

    leases
        .delete(kube_anchor_core::rollout::LEASE, &Default::default())
        .await
        .unwrap();
    Poll::new(Duration::from_secs(60), "the node's member defragmented")
        .every(Duration::from_millis(500))
        .context(|| tail(&log_path, 20))
        .until(|| db_of(&bed, &node.ports.client_url()).is_some_and(|(size, _, _)| size < 8 << 20));
    Poll::new(Duration::from_secs(30), "the defrag's turn given back")
        .every(Duration::from_millis(200))
        .context(|| tail(&log_path, 20))
        .until(|| {
            fs::read_to_string(&log_path)
                .unwrap()
                .contains("gave back the rollout turn of the defrag")
        });
    let lease = leases
        .get(kube_anchor_core::rollout::LEASE)
        .await
        .expect("the Lease the defrag took");
    let holder = lease.spec.and_then(|s| s.holder_identity).unwrap_or_default();
    assert!(holder.is_empty(), "still held by {holder:?}");
    assert_eq!(metric("kube_anchor_etcd_defrags_total{"), Some(1.0));
}
