//! The nodes of a test control plane: kubelets, each with its own static pod directory. A node
//! runs kubemark's fake runtime ([`ControlPlane::add_node`]) or the process runtime of
//! `tools/kube`, whose containers are real processes ([`ControlPlane::add_process_node`]): such a
//! node has an address of its own (127.0.1.N), lives in a PID namespace of its own, and can be
//! hard-killed and started again. A containerd node ([`ControlPlane::add_containerd_node`]) is
//! the same, as production runs it: the real kubelet, containerd and runc in a root and cgroup
//! tree of its own (`tools/containerd-node.sh`), pulling images from a local registry.

#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::api::Api;

use super::control_plane::ControlPlane;
use super::pki::{Identity, write_kubeconfig};
use super::poll::Poll;
use super::processes::{Process, free_port, repo_root, rss_kib, tool};
use super::registry::Registry;

pub struct TestNode {
    pub name: String,
    pub static_pod_dir: PathBuf,
    pub root: PathBuf,
    pub kubelet_port: u16,
    /// Where the kubelet's `--kubeconfig` files go, and the prefix its flag names them by: the
    /// node's dir; on a containerd node, the node's own `/etc/kubernetes` seen from inside.
    kubeconfig_dir: (PathBuf, PathBuf),
    /// A containerd node's cgroup, below the test binary's own in every hierarchy.
    cgroup: Option<String>,
    /// `None` while stopped ([`ControlPlane::stop_kubelet`]).
    process: Option<Process>,
    program: PathBuf,
    command: Vec<String>,
}

/// How a node runs its containers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Runtime {
    /// kubemark's fake runtime: every container "runs" and reports Running; no process starts.
    Fake,
    /// `tools/kube`'s process runtime: containers are real processes (see procruntime.go).
    Process,
    /// The real kubelet on containerd and runc (`tools/containerd-node.sh`); images from
    /// [`Registry`], the sandbox image being the reference given.
    Containerd { registry: String, pause: String },
}

/// Fills `dir` with the "images" of process nodes: links named like the last element of an
/// image's repository (`registry.k8s.io/etcd:3.6.8-0` runs `etcd`) to the binaries.
pub fn link_images(dir: &Path) {
    fs::create_dir_all(dir).unwrap();
    let kube_anchor = PathBuf::from(env!("CARGO_BIN_EXE_kube-anchor"));
    let mut images = vec![("kube-anchor".to_owned(), kube_anchor)];
    for name in [
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kubectl",
    ] {
        images.push((name.to_owned(), fs::canonicalize(tool(name)).unwrap()));
    }
    for (name, target) in images {
        std::os::unix::fs::symlink(target, dir.join(name)).unwrap();
    }
}

/// The command line of a process node's kubelet: the process runtime in a PID namespace of its
/// own (PID 1 of the namespace is the kubelet: when it dies the kernel kills every process of
/// the node, as at a power cut; --kill-child makes it die with unshare, which dies with the test
/// binary). `root/host` plays the node's `/`.
pub fn process_kubelet_args(
    name: &str,
    ip: &str,
    root: &Path,
    kubeconfig: &Path,
    client_ca: &Path,
    image_dir: &Path,
    port: u16,
) -> Vec<String> {
    let mut args: Vec<String> = ["--pid", "--fork", "--kill-child", "--mount-proc"]
        .map(String::from)
        .into_iter()
        .chain([tool("kubelet").display().to_string()])
        .collect();
    args.extend([
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--node-name={name}"),
        format!("--root-dir={}", root.join("kubelet").display()),
        format!(
            "--pod-manifest-path={}",
            root.join("host/etc/kubernetes/manifests").display()
        ),
        format!("--port={port}"),
        format!("--node-ip={ip}"),
        "--v=1".into(),
        "--runtime=process".into(),
        format!("--image-dir={}", image_dir.display()),
        format!("--host-root={}", root.join("host").display()),
        format!("--client-ca-file={}", client_ca.display()),
    ]);
    args
}

/// The cgroup of a containerd node: unique on the machine, as several test binaries may run
/// nodes of one name at once.
pub fn node_cgroup(name: &str) -> String {
    format!("kube-anchor-{}-{name}", std::process::id())
}

/// Removes a stopped containerd node's cgroup and the containers' cgroups below it (empty once
/// the node's processes are gone) in every hierarchy, deepest first.
fn remove_cgroups(cgroup: &str) {
    for dir in cgroup_parents() {
        remove_cgroup_tree(&dir.join(cgroup));
    }
}

/// Removes the cgroups of containerd nodes left by test binaries that are no longer running
/// (a test binary's nodes die with it, their cgroups stay).
fn remove_dead_node_cgroups() {
    for parent in cgroup_parents() {
        for entry in fs::read_dir(&parent).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let pid = name
                .strip_prefix("kube-anchor-")
                .and_then(|rest| rest.split('-').next()?.parse::<i32>().ok());
            // SAFETY: kill(2) with signal 0 only asks whether the process exists.
            if pid.is_some_and(|pid| unsafe { libc::kill(pid, 0) } != 0) {
                remove_cgroup_tree(&entry.path());
            }
        }
    }
}

fn remove_cgroup_tree(dir: &Path) {
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            remove_cgroup_tree(&entry.path());
        }
    }
    let _ = fs::remove_dir(dir);
}

/// The test binary's own cgroup in every v1 hierarchy: where its containerd nodes' cgroups go.
fn cgroup_parents() -> Vec<PathBuf> {
    let mut parents = Vec::new();
    let own = fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    for line in own.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (fields.next(), fields.next(), fields.next()) else {
            continue;
        };
        if controllers.is_empty() {
            continue;
        }
        let hierarchy = controllers.trim_start_matches("name=");
        parents.push(
            Path::new("/sys/fs/cgroup")
                .join(hierarchy)
                .join(path.trim_start_matches('/')),
        );
    }
    parents
}

/// The network of this binary's process and containerd nodes: 127.0.1 unless
/// [`PROCESS_NODE_NET`] names another (a test that runs its binary again as a child, beside
/// itself, gives the child one of its own: two beds never share an address).
fn next_process_node_address() -> String {
    static NEXT: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(1);
    let net = std::env::var(PROCESS_NODE_NET).unwrap_or_else(|_| "127.0.1".into());
    format!("{net}.{}", NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst))
}

/// The environment variable naming the network (`127.0.N`) of a test binary's process nodes.
pub const PROCESS_NODE_NET: &str = "KUBE_ANCHOR_TEST_PROCESS_NODE_NET";

/// The command line of a containerd node: `tools/containerd-node.sh` as PID 1 of a PID and mount
/// namespace of its own makes `root/host` the node's `/`, starts containerd there and becomes the
/// real kubelet (cmd/kubelet), with a real node's paths (/etc/kubernetes/kubelet.conf,
/// /var/lib/kubelet/config.yaml, containerd's socket) and the node's cgroup `cgroup`.
pub fn containerd_kubelet_args(name: &str, ip: &str, root: &Path, cgroup: &str) -> Vec<String> {
    let mut args: Vec<String> = ["--pid", "--fork", "--kill-child", "--mount-proc", "bash"]
        .map(String::from)
        .into();
    args.extend([
        repo_root().join("tools/containerd-node.sh").display().to_string(),
        root.join("host").display().to_string(),
        fs::canonicalize(tool("runtime")).unwrap().display().to_string(),
        fs::canonicalize(tool("kubelet")).unwrap().display().to_string(),
        cgroup.into(),
        "--".into(),
        "node-kubelet".into(),
        "--kubeconfig=/etc/kubernetes/kubelet.conf".into(),
        "--config=/var/lib/kubelet/config.yaml".into(),
        format!("--hostname-override={name}"),
        format!("--node-ip={ip}"),
        "--v=1".into(),
    ]);
    args
}

/// The kubelet's config on a node whose `/` is `host`: kubeadm's shape (cgroupfs, containerd's
/// socket, x509 and webhook authentication, webhook authorization), with the machine's facts:
/// cgroup v1 (`failCgroupV1: false`), the node's own address and kubelet port, and the test bed's
/// quick periods (as on the other nodes).
fn write_kubelet_config(host: &Path, ip: &str, port: u16) {
    let dir = host.join("var/lib/kubelet");
    fs::create_dir_all(&dir).unwrap();
    fs::write(
        dir.join("config.yaml"),
        format!(
            r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
staticPodPath: /etc/kubernetes/manifests
address: {ip}
port: {port}
readOnlyPort: 0
healthzPort: 0
authentication:
  x509: {{clientCAFile: /etc/kubernetes/pki/ca.crt}}
  webhook: {{enabled: true}}
  anonymous: {{enabled: false}}
authorization: {{mode: Webhook}}
resolvConf: /etc/resolv.conf
fileCheckFrequency: 2s
syncFrequency: 2s
nodeStatusUpdateFrequency: 2s
"#
        ),
    )
    .unwrap();
}

/// containerd's config on a node whose `/` is `host`: CRI images from `registry` over plain HTTP,
/// `pause` for sandboxes, runc from /opt/bin, the CNI loopback network (hostNetwork pods need no
/// CNI, but containerd reports its network ready only with a config, and the kubelet calls the
/// Node Ready only then). `restrict_oom_score_adj`: the machines here lack CAP_SYS_RESOURCE, so no
/// process may lower its OOM score below its parent's, and the kubelet asks -997 for critical pods.
fn write_containerd_config(host: &Path, registry: &str, pause: &str) {
    let etc = host.join("etc");
    let certs = etc.join("containerd/certs.d").join(registry);
    fs::create_dir_all(&certs).unwrap();
    fs::write(
        certs.join("hosts.toml"),
        format!(
            "server = \"http://{registry}\"\n[host.\"http://{registry}\"]\n  capabilities = [\"pull\", \"resolve\"]\n"
        ),
    )
    .unwrap();
    fs::write(
        etc.join("containerd/config.toml"),
        format!(
            r#"version = 3
root = "/var/lib/containerd"
state = "/run/containerd"
[grpc]
  address = "/run/containerd/containerd.sock"
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{pause}"
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = "/etc/containerd/certs.d"
[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["/opt/bin"]
    conf_dir = "/etc/cni/net.d"
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "/opt/bin/runc"
        SystemdCgroup = false
"#
        ),
    )
    .unwrap();
    let cni = etc.join("cni/net.d");
    fs::create_dir_all(&cni).unwrap();
    fs::write(
        cni.join("10-loopback.conflist"),
        r#"{"cniVersion": "1.0.0", "name": "loopback", "plugins": [{"type": "loopback"}]}"#,
    )
    .unwrap();
}

/// Waits until `init`, PID 1 of a process node's namespace, is gone (the kernel kills the rest of
/// the namespace first), at most 30 s.
pub fn wait_namespace_gone(init: Option<u32>) {
    if let Some(pid) = init {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl ControlPlane {
    /// Starts a kubelet with kubemark's fake runtime registering Node `name` with `labels`;
    /// waits until the Node is Ready.
    pub async fn add_node(&self, name: &str, labels: &[(&str, &str)]) -> NodeHandle {
        self.start_node(name, labels, Runtime::Fake, "127.0.0.1").await
    }

    /// Starts a node whose containers are real processes: a kubelet with the process runtime in
    /// a PID namespace of its own (everything of the node dies at once with its first process,
    /// as at a power cut), with the next free address of its binary's network (127.0.1.N).
    /// Images are the binaries in [`ControlPlane::image_dir`]. Waits until the Node is Ready.
    pub async fn add_process_node(&self, name: &str, labels: &[(&str, &str)]) -> NodeHandle {
        let ip = next_process_node_address();
        self.start_node(name, labels, Runtime::Process, &ip).await
    }

    /// Starts a node of the real kubelet on containerd and runc (`tools/containerd-node.sh`): its
    /// root dir is the node's `/`, images come from `registry`, and `pause` (a reference by digest) is every pod
    /// sandbox's image. Like a process node, it lives in a PID namespace of its own, with the
    /// next free address of its binary's network (127.0.1.N). Waits until the Node is Ready.
    pub async fn add_containerd_node(
        &self,
        name: &str,
        labels: &[(&str, &str)],
        registry: &Registry,
        pause: &str,
    ) -> NodeHandle {
        static SWEPT: OnceLock<()> = OnceLock::new();
        SWEPT.get_or_init(remove_dead_node_cgroups);
        let ip = next_process_node_address();
        let runtime = Runtime::Containerd {
            registry: registry.addr.clone(),
            pause: pause.to_owned(),
        };
        self.start_node(name, labels, runtime, &ip).await
    }

    /// The "registry" of process nodes: an image is the binary named like the last element of
    /// its repository (`registry.k8s.io/etcd:3.6.8-0` runs `etcd`).
    pub fn image_dir(&self) -> PathBuf {
        let dir = self.dir.join("images");
        static MADE: OnceLock<()> = OnceLock::new();
        MADE.get_or_init(|| link_images(&dir));
        dir
    }

    async fn start_node(&self, name: &str, labels: &[(&str, &str)], runtime: Runtime, ip: &str) -> NodeHandle {
        let containerd = matches!(runtime, Runtime::Containerd { .. });
        let root = self.dir.join("nodes").join(name);
        // The node's `/` for kube-anchor's --host-root: the kubelet reads /etc/kubernetes/manifests.
        let static_pod_dir = root.join("host/etc/kubernetes/manifests");
        fs::create_dir_all(&static_pod_dir).unwrap();
        let (crt, key) = self.pki.issue(
            &format!("node-{name}"),
            &format!("system:node:{name}"),
            Some("system:nodes"),
            &[],
        );
        let kubeconfig = root.join("kubelet.kubeconfig");
        let mut kubeconfig_dir = (root.clone(), root.clone());
        if containerd {
            // The node's own /etc/kubernetes/kubelet.conf and pki, as on a kubeadm node; the
            // kubelet runs inside the node's root and sees only those.
            let pki = root.join("host/etc/kubernetes/pki");
            fs::create_dir_all(&pki).unwrap();
            for (from, to) in [(&crt, "kubelet.crt"), (&key, "kubelet.key"), (&self.pki.ca(), "ca.crt")] {
                fs::copy(from, pki.join(to)).unwrap();
            }
            let inside = Path::new("/etc/kubernetes/pki");
            write_kubeconfig(
                &root.join("host/etc/kubernetes/kubelet.conf"),
                &self.server,
                &inside.join("ca.crt"),
                &Identity::Cert {
                    cert: inside.join("kubelet.crt"),
                    key: inside.join("kubelet.key"),
                },
            );
            kubeconfig_dir = (root.join("host/etc/kubernetes"), PathBuf::from("/etc/kubernetes"));
            // A node's identity for cAdvisor and the Node's systemUUID, as systemd writes it.
            let machine_id = format!("{:032x}", fastrand::u128(..));
            fs::write(root.join("host/etc/machine-id"), format!("{machine_id}\n")).unwrap();
        }
        write_kubeconfig(
            &kubeconfig,
            &self.server,
            &self.pki.ca(),
            &Identity::Cert { cert: crt, key },
        );
        let kubelet_port = free_port();
        let (program, mut args) = match runtime {
            Runtime::Fake => (
                tool("kubelet"),
                vec![
                    format!("--kubeconfig={}", kubeconfig.display()),
                    format!("--node-name={name}"),
                    format!("--root-dir={}", root.join("kubelet").display()),
                    format!("--pod-manifest-path={}", static_pod_dir.display()),
                    format!("--port={kubelet_port}"),
                    format!("--node-ip={ip}"),
                    "--v=1".into(),
                ],
            ),
            Runtime::Process => (
                PathBuf::from("unshare"),
                process_kubelet_args(
                    name,
                    ip,
                    &root,
                    &kubeconfig,
                    &self.pki.ca(),
                    &self.image_dir(),
                    kubelet_port,
                ),
            ),
            Runtime::Containerd { registry, pause } => {
                write_containerd_config(&root.join("host"), &registry, &pause);
                write_kubelet_config(&root.join("host"), ip, kubelet_port);
                (
                    PathBuf::from("unshare"),
                    containerd_kubelet_args(name, ip, &root, &node_cgroup(name)),
                )
            }
        };
        if !labels.is_empty() {
            let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
            args.push(format!("--node-labels={}", labels.join(",")));
        }
        let mut cmd = Command::new(&program);
        cmd.args(&args);
        let process = Process::start(&format!("kubelet-{name}"), cmd, &self.dir);
        let node = TestNode {
            name: name.into(),
            static_pod_dir: static_pod_dir.clone(),
            root: root.clone(),
            kubelet_port,
            kubeconfig_dir,
            cgroup: containerd.then(|| node_cgroup(name)),
            process: Some(process),
            program,
            command: args,
        };
        self.nodes.lock().unwrap().insert(name.into(), node);
        self.wait_node_ready(name, Duration::from_secs(60)).await;
        // The kubelet refuses to report a loopback node IP, and a pod's status.hostIP (the
        // downward API's NODE_IP, and a hostNetwork pod's IP) comes from the Node's addresses:
        // set them as a cloud provider would.
        let nodes: Api<Node> = Api::all(self.admin().await);
        let status = serde_json::json!({"status": {"addresses": [
            {"type": "InternalIP", "address": ip},
            {"type": "Hostname", "address": name}
        ]}});
        nodes
            .patch_status(
                name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&status),
            )
            .await
            .unwrap();
        NodeHandle {
            name: name.into(),
            static_pod_dir,
            root,
            kubelet_port,
            ip: ip.into(),
        }
    }

    async fn wait_node_ready(&self, name: &str, timeout: Duration) {
        let nodes: Api<Node> = Api::all(self.admin().await);
        let kubelet_log = || format!("kubelet log tail:\n{}", self.kubelet_log_tail(name, 40));
        Poll::new(timeout, format!("node {name} Ready"))
            .every(Duration::from_millis(250))
            .context(kubelet_log)
            .until_async(|| async {
                let Ok(Some(node)) = nodes.get_opt(name).await else {
                    return false;
                };
                node.status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
            })
            .await;
    }

    /// The last `lines` lines of a running node's kubelet log (its runtime's too on a process
    /// node); empty when the kubelet is stopped.
    pub fn kubelet_log_tail(&self, name: &str, lines: usize) -> String {
        self.nodes
            .lock()
            .unwrap()
            .get(name)
            .and_then(|n| n.process.as_ref().map(|p| p.log_tail(lines)))
            .unwrap_or_default()
    }

    /// Kills a node's kubelet, as a power loss would. On a process node every process of the
    /// node dies with it; returns once they all have.
    pub fn stop_kubelet(&self, name: &str) {
        let process = self.nodes.lock().unwrap().get_mut(name).and_then(|n| n.process.take());
        if let Some(p) = process {
            // unshare's child is PID 1 of the node's namespace; it is gone only after every
            // other process of the namespace is.
            let init = namespace_init(p.pid());
            p.stop();
            wait_namespace_gone(init);
        }
        let cgroup = self.nodes.lock().unwrap().get(name).and_then(|n| n.cgroup.clone());
        if let Some(cgroup) = cgroup {
            remove_cgroups(&cgroup);
        }
    }

    /// Resident memory of every process of a process or containerd node (kubelet, runtime and
    /// containers), in KiB.
    pub fn node_rss_kib(&self, name: &str) -> u64 {
        let unshare = self.nodes.lock().unwrap()[name].process.as_ref().map(Process::pid);
        unshare.map(namespace_rss_kib).unwrap_or(0)
    }

    /// Every process of a running process or containerd node: PID 1 of its namespace and all
    /// its descendants (containers in PID namespaces of their own among them), by host PID.
    pub fn node_pids(&self, name: &str) -> Vec<u32> {
        let unshare = self.nodes.lock().unwrap()[name].process.as_ref().map(Process::pid);
        unshare.and_then(namespace_init).map(descendants).unwrap_or_default()
    }

    /// Starts a stopped kubelet again with its first command line; does not wait for the API.
    pub fn start_kubelet(&self, name: &str) {
        self.start_kubelet_with(name, None);
    }

    /// Starts a stopped kubelet again with a kubeconfig that points at an address where no API
    /// server answers: the node comes back on its own, as after a reboot with the control plane
    /// down (its containers see the same dead address).
    pub fn start_kubelet_without_api(&self, name: &str) {
        let dead = format!("https://127.0.0.1:{}", free_port());
        let offline = self.kubeconfig_variant(name, "kubelet-offline.kubeconfig", &dead);
        self.start_kubelet_with(name, Some(&offline));
    }

    /// The node's kubelet kubeconfig with its API server at `server`, written beside it as
    /// `file`; returns the path its `--kubeconfig` flag names it by.
    fn kubeconfig_variant(&self, name: &str, file: &str, server: &str) -> PathBuf {
        let (dir, flag_dir) = self.nodes.lock().unwrap()[name].kubeconfig_dir.clone();
        let own = if dir.ends_with("etc/kubernetes") {
            "kubelet.conf"
        } else {
            "kubelet.kubeconfig"
        };
        let text = fs::read_to_string(dir.join(own)).unwrap();
        fs::write(dir.join(file), text.replace(&self.server, server)).unwrap();
        flag_dir.join(file)
    }

    /// Starts a stopped kubelet again with its API server reached at `server` instead (a
    /// [`super::severable::Severable`] path a test can cut later); waits until the Node is Ready.
    pub async fn start_kubelet_through(&self, name: &str, server: &str) {
        let through = self.kubeconfig_variant(name, "kubelet-through.kubeconfig", server);
        self.start_kubelet_with(name, Some(&through));
        self.wait_node_ready(name, Duration::from_secs(60)).await;
    }

    fn start_kubelet_with(&self, name: &str, kubeconfig: Option<&Path>) {
        let mut nodes = self.nodes.lock().unwrap();
        let node = nodes.get_mut(name).expect("a node of this control plane");
        assert!(node.process.is_none(), "kubelet {name} is running");
        let mut cmd = Command::new(&node.program);
        for arg in &node.command {
            match kubeconfig {
                Some(path) if arg.starts_with("--kubeconfig=") => cmd.arg(format!("--kubeconfig={}", path.display())),
                _ => cmd.arg(arg),
            };
        }
        node.process = Some(Process::start(&format!("kubelet-{name}"), cmd, &self.dir));
    }
}

/// What a test needs to know about a node.
#[derive(Debug, Clone)]
pub struct NodeHandle {
    pub name: String,
    pub static_pod_dir: PathBuf,
    pub root: PathBuf,
    pub kubelet_port: u16,
    /// The Node's InternalIP: 127.0.0.1 for fake-runtime nodes, 127.0.1.N for process nodes.
    pub ip: String,
}

impl NodeHandle {
    /// The directory that plays the node's `/` (pass it as `--host-root`).
    pub fn host_root(&self) -> PathBuf {
        self.root.join("host")
    }
}

/// PID 1 of a process node's namespace: the only child of its `unshare`.
pub fn namespace_init(unshare: u32) -> Option<u32> {
    let children = fs::read_to_string(format!("/proc/{unshare}/task/{unshare}/children")).ok()?;
    children.split_whitespace().next()?.parse().ok()
}

/// `pid` and every process below it, by parent links.
fn descendants(pid: u32) -> Vec<u32> {
    let mut parents: Vec<(u32, u32)> = Vec::new();
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let stat = fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        // After the command in parentheses: state, then the parent's PID.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse().ok());
        if let Some(ppid) = ppid {
            parents.push((p, ppid));
        }
    }
    let mut found = vec![pid];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(parents.iter().filter(|(_, pp)| *pp == parent).map(|(p, _)| *p));
        i += 1;
    }
    found
}

/// Resident memory of every process of a node whose `unshare` is `unshare` (PID 1 of its
/// namespace and all below it), in KiB.
pub fn namespace_rss_kib(unshare: u32) -> u64 {
    namespace_init(unshare)
        .map(descendants)
        .unwrap_or_default()
        .iter()
        .map(|pid| rss_kib(&pid.to_string()))
        .sum()
}
