//! A real Kubernetes control plane for integration tests: etcd, kube-apiserver (Node,RBAC
//! authorization, NodeRestriction), and on demand kube-controller-manager, kube-scheduler and
//! kubelets, each with its own static pod directory. A node runs kubemark's fake runtime
//! ([`ControlPlane::add_node`]) or the process runtime of `tools/kube`, whose containers are real
//! processes ([`ControlPlane::add_process_node`]): such a node has an address of its own
//! (127.0.1.N), lives in a PID namespace of its own, and can be hard-killed and started again.
//!
//! The binaries come from `tools/build.sh`. One control plane is shared per test binary
//! ([`shared`]); each test takes a namespace of its own ([`ControlPlane::namespace`]).
//! Every process is started with `PR_SET_PDEATHSIG` from a thread that lives as long as the test
//! binary, so nothing outlives it, even when a test panics. Logs are kept under
//! `target/test-clusters/<binary>-<pid>/` for failed runs; the directory is printed at start.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, Node, ServiceAccount};
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use rcgen::{
    CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};

use super::poll::{Poll, eventually};

pub const TOOLS: &[&str] = &[
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "kubectl",
    "helm",
];

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Path of a tool built by `tools/build.sh`; panics with the fix when it is missing.
pub fn tool(name: &str) -> PathBuf {
    let path = repo_root().join("tools/bin").join(name);
    if !path.exists() {
        panic!(
            "{} is missing: run tools/build.sh first (it builds the real Kubernetes components from Go modules)",
            path.display()
        );
    }
    path
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
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

// ---------------------------------------------------------------------------------------------
// Processes

/// Children are forked from this one long-lived thread: PR_SET_PDEATHSIG fires when the forking
/// *thread* exits, and test threads exit early.
fn spawn(mut cmd: Command) -> std::io::Result<Child> {
    type Request = (Command, mpsc::Sender<std::io::Result<Child>>);
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<Request>>> = OnceLock::new();
    let sender = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("cluster-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    unsafe {
                        cmd.pre_exec(|| {
                            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                                return Err(std::io::Error::last_os_error());
                            }
                            Ok(())
                        });
                    }
                    let _ = reply.send(cmd.spawn());
                }
            })
            .unwrap();
        Mutex::new(tx)
    });
    cmd.stdin(Stdio::null());
    let (tx, rx) = mpsc::channel();
    sender.lock().unwrap().send((cmd, tx)).unwrap();
    rx.recv().unwrap()
}

pub struct Process {
    pub name: String,
    pub log: PathBuf,
    child: Child,
}

impl Process {
    pub fn start(name: &str, mut cmd: Command, log_dir: &Path) -> Self {
        let log = log_dir.join(format!("{name}.log"));
        let out = fs::OpenOptions::new().create(true).append(true).open(&log).unwrap();
        cmd.stdout(out.try_clone().unwrap()).stderr(out);
        let child = spawn(cmd).unwrap_or_else(|e| panic!("starting {name}: {e}"));
        Self {
            name: name.into(),
            log,
            child,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub fn stop(mut self) {
        self.kill();
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn log_tail(&self, lines: usize) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

// ---------------------------------------------------------------------------------------------
// Certificates

pub struct Pki {
    pub dir: PathBuf,
    ca_key: KeyPair,
    ca_params: CertificateParams,
}

impl Pki {
    pub fn new(dir: &Path) -> Self {
        fs::create_dir_all(dir).unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name = dn("kube-anchor-test-ca", None);
        params.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        fs::write(dir.join("ca.crt"), cert.pem()).unwrap();
        let sa = KeyPair::generate().unwrap();
        fs::write(dir.join("sa.key"), sa.serialize_pem()).unwrap();
        fs::write(dir.join("sa.pub"), sa.public_key_pem()).unwrap();
        Self {
            dir: dir.into(),
            ca_key: key,
            ca_params: params,
        }
    }

    pub fn ca(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    /// Issues `<name>.crt`/`<name>.key`; a client cert when `sans` is empty.
    pub fn issue(
        &self,
        name: &str,
        common_name: &str,
        organization: Option<&str>,
        sans: &[&str],
    ) -> (PathBuf, PathBuf) {
        let usage = if sans.is_empty() {
            ExtendedKeyUsagePurpose::ClientAuth
        } else {
            ExtendedKeyUsagePurpose::ServerAuth
        };
        self.issue_for(name, common_name, organization, sans, vec![usage])
    }

    /// Issues `<name>.crt`/`<name>.key` good for serving on `sans` and as a client (an etcd
    /// member's server, peer and client certificate in one).
    pub fn issue_server_and_client(&self, name: &str, sans: &[&str]) -> (PathBuf, PathBuf) {
        let usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        self.issue_for(name, name, None, sans, usages)
    }

    fn issue_for(
        &self,
        name: &str,
        common_name: &str,
        organization: Option<&str>,
        sans: &[&str],
        usages: Vec<ExtendedKeyUsagePurpose>,
    ) -> (PathBuf, PathBuf) {
        let mut params = CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        params.distinguished_name = dn(common_name, organization);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        params.extended_key_usages = usages;
        let key = KeyPair::generate().unwrap();
        let issuer = Issuer::from_params(&self.ca_params, &self.ca_key);
        let cert = params.signed_by(&key, &issuer).unwrap();
        let (crt, key_path) = (
            self.dir.join(format!("{name}.crt")),
            self.dir.join(format!("{name}.key")),
        );
        fs::write(&crt, cert.pem()).unwrap();
        fs::write(&key_path, key.serialize_pem()).unwrap();
        (crt, key_path)
    }
}

fn dn(common_name: &str, organization: Option<&str>) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    if let Some(o) = organization {
        dn.push(DnType::OrganizationName, o);
    }
    dn
}

pub enum Identity {
    Cert { cert: PathBuf, key: PathBuf },
    Token(String),
}

pub fn write_kubeconfig(path: &Path, server: &str, ca: &Path, identity: &Identity) {
    let user = match identity {
        Identity::Cert { cert, key } => format!(
            "    client-certificate: {}\n    client-key: {}\n",
            cert.display(),
            key.display()
        ),
        Identity::Token(token) => format!("    token: {token}\n"),
    };
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {server}\n    certificate-authority: {}\ncontexts:\n- name: test\n  context: {{cluster: test, user: test}}\ncurrent-context: test\nusers:\n- name: test\n  user:\n{user}",
        ca.display()
    );
    // Atomically: tests running in parallel may write the same identity's kubeconfig.
    let mut temp = tempfile::NamedTempFile::new_in(path.parent().unwrap()).unwrap();
    std::io::Write::write_all(&mut temp, text.as_bytes()).unwrap();
    temp.persist(path).unwrap();
}

pub async fn client_from_kubeconfig(path: &Path) -> Client {
    let kubeconfig = Kubeconfig::read_from(path).unwrap();
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    Client::try_from(config).unwrap()
}

// ---------------------------------------------------------------------------------------------
// The control plane

/// Metadata of every request except the kubelets', logged at `RequestReceived` only.
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [ResponseStarted, ResponseComplete, Panic]
rules:
  - level: None
    userGroups: [\"system:nodes\"]
  - level: Metadata
";

/// One line of the API server's audit log (the fields the tests read).
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditedRequest {
    pub verb: String,
    #[serde(rename = "requestURI")]
    pub request_uri: String,
    #[serde(default)]
    pub user_agent: String,
    pub request_received_timestamp: String,
}

pub struct ControlPlane {
    pub dir: PathBuf,
    pub server: String,
    pub apiserver_port: u16,
    pub pki: Pki,
    pub admin_kubeconfig: PathBuf,
    etcd: Mutex<Option<Process>>,
    apiserver: Mutex<Option<Process>>,
    controllers: Mutex<Vec<Process>>,
    nodes: Mutex<BTreeMap<String, TestNode>>,
    anchor_rbac: tokio::sync::OnceCell<()>,
}

pub struct TestNode {
    pub name: String,
    pub static_pod_dir: PathBuf,
    pub root: PathBuf,
    pub kubelet_port: u16,
    /// `None` while stopped ([`ControlPlane::stop_kubelet`]).
    process: Option<Process>,
    program: PathBuf,
    command: Vec<String>,
}

/// How a node runs its containers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runtime {
    /// kubemark's fake runtime: every container "runs" and reports Running; no process starts.
    Fake,
    /// `tools/kube`'s process runtime: containers are real processes (see procruntime.go).
    Process,
}

/// The control plane of this test binary, started on first use.
pub async fn shared() -> &'static ControlPlane {
    static SHARED: tokio::sync::OnceCell<ControlPlane> = tokio::sync::OnceCell::const_new();
    SHARED.get_or_init(ControlPlane::start).await
}

fn test_binary_name() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "test".into())
}

impl ControlPlane {
    pub async fn start() -> Self {
        for name in TOOLS {
            tool(name);
        }
        let dir = test_dir();
        eprintln!(
            "test control plane for {}: logs and state in {}",
            test_binary_name(),
            dir.display()
        );
        let pki = Pki::new(&dir.join("pki"));
        pki.issue(
            "apiserver",
            "kube-apiserver",
            None,
            &["127.0.0.1", "localhost", "kubernetes.default.svc"],
        );
        let (admin_crt, admin_key) = pki.issue("admin", "kube-anchor-test-admin", Some("system:masters"), &[]);
        // The API server's identity toward kubelets (logs, exec), as kubeadm issues it.
        pki.issue(
            "apiserver-kubelet-client",
            "kube-apiserver-kubelet-client",
            Some("system:masters"),
            &[],
        );
        let apiserver_port = free_port();
        let server = format!("https://127.0.0.1:{apiserver_port}");
        let admin_kubeconfig = dir.join("admin.kubeconfig");
        write_kubeconfig(
            &admin_kubeconfig,
            &server,
            &pki.ca(),
            &Identity::Cert {
                cert: admin_crt,
                key: admin_key,
            },
        );
        let cp = Self {
            dir,
            server,
            apiserver_port,
            pki,
            admin_kubeconfig,
            etcd: Mutex::new(None),
            apiserver: Mutex::new(None),
            controllers: Mutex::new(Vec::new()),
            nodes: Mutex::new(BTreeMap::new()),
            anchor_rbac: tokio::sync::OnceCell::new(),
        };
        cp.start_etcd();
        cp.start_apiserver().await;
        cp
    }

    fn start_etcd(&self) {
        let client = free_port();
        let peer = free_port();
        let mut cmd = Command::new(tool("etcd"));
        cmd.args([
            "--name=default",
            &format!("--data-dir={}", self.dir.join("etcd").display()),
            &format!("--listen-client-urls=http://127.0.0.1:{client}"),
            &format!("--advertise-client-urls=http://127.0.0.1:{client}"),
            &format!("--listen-peer-urls=http://127.0.0.1:{peer}"),
            &format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer}"),
            &format!("--initial-cluster=default=http://127.0.0.1:{peer}"),
            "--unsafe-no-fsync=true",
            "--log-level=warn",
        ]);
        fs::write(self.dir.join("etcd.port"), client.to_string()).unwrap();
        *self.etcd.lock().unwrap() = Some(Process::start("etcd", cmd, &self.dir));
    }

    fn apiserver_command(&self) -> Command {
        let etcd_port = fs::read_to_string(self.dir.join("etcd.port")).unwrap();
        let pki = &self.pki.dir;
        let mut cmd = Command::new(tool("kube-apiserver"));
        cmd.args([
            format!("--etcd-servers=http://127.0.0.1:{etcd_port}"),
            format!("--secure-port={}", self.apiserver_port),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            format!("--cert-dir={}", self.dir.join("apiserver-certs").display()),
            format!("--tls-cert-file={}", pki.join("apiserver.crt").display()),
            format!("--tls-private-key-file={}", pki.join("apiserver.key").display()),
            format!("--client-ca-file={}", self.pki.ca().display()),
            "--service-account-issuer=https://kubernetes.default.svc".into(),
            format!("--service-account-key-file={}", pki.join("sa.pub").display()),
            format!("--service-account-signing-key-file={}", pki.join("sa.key").display()),
            "--service-cluster-ip-range=10.0.0.0/24".into(),
            "--authorization-mode=Node,RBAC".into(),
            "--enable-admission-plugins=NodeRestriction".into(),
            "--allow-privileged=true".into(),
            format!(
                "--kubelet-client-certificate={}",
                pki.join("apiserver-kubelet-client.crt").display()
            ),
            format!(
                "--kubelet-client-key={}",
                pki.join("apiserver-kubelet-client.key").display()
            ),
            // Node names do not resolve here; `kubectl logs` reaches a kubelet by its address.
            "--kubelet-preferred-address-types=InternalIP,Hostname".into(),
            "--profiling=false".into(),
            "--v=1".into(),
        ]);
        // Every request but the kubelets' is audited once, when received: what a kube-anchor
        // process costs the API is counted from here (by its user agent), not from its own word.
        let policy = self.dir.join("audit-policy.yaml");
        fs::write(&policy, AUDIT_POLICY).unwrap();
        cmd.arg(format!("--audit-policy-file={}", policy.display()))
            .arg(format!("--audit-log-path={}", self.audit_log().display()))
            .args(["--audit-log-format=json", "--audit-log-mode=blocking"]);
        cmd
    }

    pub fn audit_log(&self) -> PathBuf {
        self.dir.join("audit.log")
    }

    /// The audited requests so far whose user agent starts with `agent` (e.g.
    /// `kube-anchor/0.1.0 (checkpointer)`; see `kube_anchor_k8s::kubeapi::user_agent`).
    pub fn audited_requests(&self, agent: &str) -> Vec<AuditedRequest> {
        let text = fs::read_to_string(self.audit_log()).unwrap_or_default();
        text.lines()
            .filter_map(|line| serde_json::from_str::<AuditedRequest>(line).ok())
            .filter(|r| r.user_agent.starts_with(agent))
            .collect()
    }

    async fn start_apiserver(&self) {
        let process = Process::start("kube-apiserver", self.apiserver_command(), &self.dir);
        *self.apiserver.lock().unwrap() = Some(process);
        self.wait_ready(Duration::from_secs(60)).await;
    }

    /// Polls `/readyz` as admin until it answers `ok`.
    pub async fn wait_ready(&self, timeout: Duration) {
        let client = self.admin().await;
        let log_tail = || {
            let tail = self
                .apiserver
                .lock()
                .unwrap()
                .as_ref()
                .map(|p| p.log_tail(30))
                .unwrap_or_default();
            format!("log tail:\n{tail}")
        };
        Poll::new(timeout, "kube-apiserver ready")
            .context(log_tail)
            .until_async(|| async {
                let request = http::Request::get("/readyz").body(Vec::new()).unwrap();
                if client.request_text(request).await.is_ok_and(|body| body.trim() == "ok") {
                    return true;
                }
                let running = self.apiserver.lock().unwrap().as_mut().is_some_and(Process::is_running);
                assert!(running, "kube-apiserver exited; {}", log_tail());
                false
            })
            .await
    }

    /// Stops kube-apiserver (etcd and the nodes keep running), to test behaviour in an outage.
    pub fn stop_apiserver(&self) {
        if let Some(p) = self.apiserver.lock().unwrap().take() {
            p.stop();
        }
    }

    pub async fn restart_apiserver(&self) {
        self.stop_apiserver();
        self.start_apiserver().await;
    }

    pub async fn admin(&self) -> Client {
        client_from_kubeconfig(&self.admin_kubeconfig).await
    }

    /// A kubeconfig and client for a ServiceAccount, with a token from the TokenRequest API.
    pub async fn service_account_client(&self, namespace: &str, name: &str) -> (Client, PathBuf) {
        let admin = self.admin().await;
        let accounts: Api<ServiceAccount> = Api::namespaced(admin, namespace);
        let request = TokenRequest {
            spec: Some(TokenRequestSpec {
                expiration_seconds: Some(3600),
                ..Default::default()
            }),
            ..Default::default()
        };
        let token = accounts
            .create_token_request(name, &PostParams::default(), &request)
            .await
            .unwrap_or_else(|e| panic!("TokenRequest for {namespace}/{name}: {e}"))
            .status
            .expect("token status")
            .token
            .expect("a token");
        let path = self.dir.join(format!("sa-{namespace}-{name}.kubeconfig"));
        write_kubeconfig(&path, &self.server, &self.pki.ca(), &Identity::Token(token));
        (client_from_kubeconfig(&path).await, path)
    }

    /// Applies `manifests/rbac.yaml` with the real kubectl (once per control plane: concurrent
    /// applies of the same objects race) and returns a kubeconfig for its ServiceAccount.
    pub async fn anchor_service_account(&self) -> PathBuf {
        self.anchor_rbac
            .get_or_init(|| async {
                let out = Command::new(tool("kubectl"))
                    .arg(format!("--kubeconfig={}", self.admin_kubeconfig.display()))
                    .args(["apply", "-f"])
                    .arg(repo_root().join("manifests/rbac.yaml"))
                    .output()
                    .unwrap();
                assert!(
                    out.status.success(),
                    "kubectl apply manifests/rbac.yaml: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            })
            .await;
        self.service_account_client("kube-system", "kube-anchor").await.1
    }

    /// A fresh namespace for one test.
    pub async fn namespace(&self, prefix: &str) -> String {
        let admin = self.admin().await;
        let name = format!("{prefix}-{}", fastrand::u32(..) % 1_000_000);
        let ns = Namespace {
            metadata: kube::api::ObjectMeta {
                name: Some(name.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(admin)
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
        name
    }

    /// Starts kube-controller-manager and kube-scheduler once (DaemonSets, service accounts,
    /// garbage collection, scheduling).
    pub fn start_controllers(&self) {
        let mut controllers = self.controllers.lock().unwrap();
        if !controllers.is_empty() {
            return;
        }
        let kubeconfig = self.admin_kubeconfig.display().to_string();
        let mut kcm = Command::new(tool("kube-controller-manager"));
        kcm.args([
            format!("--kubeconfig={kubeconfig}"),
            "--leader-elect=false".into(),
            "--secure-port=0".into(),
            format!(
                "--service-account-private-key-file={}",
                self.pki.dir.join("sa.key").display()
            ),
            format!("--root-ca-file={}", self.pki.ca().display()),
            "--use-service-account-credentials=false".into(),
            "--controllers=*".into(),
            "--concurrent-gc-syncs=5".into(),
            "--v=1".into(),
        ]);
        controllers.push(Process::start("kube-controller-manager", kcm, &self.dir));
        let mut scheduler = Command::new(tool("kube-scheduler"));
        scheduler.args([
            format!("--kubeconfig={kubeconfig}"),
            "--leader-elect=false".into(),
            "--secure-port=0".into(),
            "--v=1".into(),
        ]);
        controllers.push(Process::start("kube-scheduler", scheduler, &self.dir));
    }

    /// Starts a kubelet with kubemark's fake runtime registering Node `name` with `labels`;
    /// waits until the Node is Ready.
    pub async fn add_node(&self, name: &str, labels: &[(&str, &str)]) -> NodeHandle {
        self.start_node(name, labels, Runtime::Fake, "127.0.0.1").await
    }

    /// Starts a node whose containers are real processes: a kubelet with the process runtime in
    /// a PID namespace of its own (everything of the node dies at once with its first process,
    /// as at a power cut), with the next free address 127.0.1.N. Images are the binaries in
    /// [`ControlPlane::image_dir`]. Waits until the Node is Ready.
    pub async fn add_process_node(&self, name: &str, labels: &[(&str, &str)]) -> NodeHandle {
        static NEXT: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(1);
        let ip = format!("127.0.1.{}", NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst));
        self.start_node(name, labels, Runtime::Process, &ip).await
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
        let kubelet_log = || {
            let tail = self
                .nodes
                .lock()
                .unwrap()
                .get(name)
                .and_then(|n| n.process.as_ref().map(|p| p.log_tail(40)))
                .unwrap_or_default();
            format!("kubelet log tail:\n{tail}")
        };
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
    }

    /// Resident memory of every process of a process node (kubelet and containers), in KiB.
    pub fn node_rss_kib(&self, name: &str) -> u64 {
        let unshare = self.nodes.lock().unwrap()[name].process.as_ref().map(Process::pid);
        unshare.map(namespace_rss_kib).unwrap_or(0)
    }

    /// Resident memory of etcd, kube-apiserver and the controllers of this control plane, in KiB.
    pub fn control_plane_rss_kib(&self) -> u64 {
        let mut pids: Vec<u32> = self.controllers.lock().unwrap().iter().map(Process::pid).collect();
        pids.extend(self.etcd.lock().unwrap().as_ref().map(Process::pid));
        pids.extend(self.apiserver.lock().unwrap().as_ref().map(Process::pid));
        pids.iter().map(|p| rss_kib(&p.to_string())).sum()
    }

    /// Starts a stopped kubelet again with its first command line; does not wait for the API.
    pub fn start_kubelet(&self, name: &str) {
        self.start_kubelet_with(name, None);
    }

    /// Starts a stopped kubelet again with a kubeconfig that points at an address where no API
    /// server answers: the node comes back on its own, as after a reboot with the control plane
    /// down (its containers see the same dead address).
    pub fn start_kubelet_without_api(&self, name: &str) {
        let root = self.nodes.lock().unwrap()[name].root.clone();
        let kubeconfig = root.join("kubelet.kubeconfig");
        let text = fs::read_to_string(&kubeconfig).unwrap();
        let dead = format!("https://127.0.0.1:{}", free_port());
        let offline = root.join("kubelet-offline.kubeconfig");
        fs::write(&offline, text.replace(&self.server, &dead)).unwrap();
        self.start_kubelet_with(name, Some(&offline));
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

    /// Starts kube-apiserver again after [`ControlPlane::stop_apiserver`].
    pub async fn start_apiserver_again(&self) {
        self.start_apiserver().await;
    }

    pub fn log_of(&self, process: &str) -> PathBuf {
        self.dir.join(format!("{process}.log"))
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

/// Resident memory of every process in the PID namespace of a process node whose `unshare` is
/// `unshare`, in KiB.
pub fn namespace_rss_kib(unshare: u32) -> u64 {
    let Some(ns) = namespace_init(unshare).and_then(|pid| fs::read_link(format!("/proc/{pid}/ns/pid")).ok()) else {
        return 0;
    };
    let mut total = 0;
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        if fs::read_link(entry.path().join("ns/pid")).ok().as_ref() == Some(&ns) {
            total += rss_kib(&entry.file_name().to_string_lossy());
        }
    }
    total
}

fn rss_kib(pid: &str) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// This test binary's directory for logs and state (`$TMPDIR/kube-anchor-test-<pid>`); those of
/// test binaries no longer running are removed first, so a failed run's logs stay until then.
pub fn test_dir() -> PathBuf {
    let base = std::env::temp_dir();
    remove_dead_cluster_dirs(&base);
    let dir = base.join(format!("kube-anchor-test-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    dir
}

/// Removes cluster dirs of test binaries that are no longer running.
fn remove_dead_cluster_dirs(base: &Path) {
    let Ok(entries) = fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("kube-anchor-test-")
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        if unsafe { libc::kill(pid, 0) } != 0 {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

/// Waits for an Event in `namespace` with `reason` (and, when given, regarding the object
/// named `regarding`), as kube-anchor publishes them.
pub async fn event(
    client: &Client,
    namespace: &str,
    reason: &str,
    regarding: Option<&str>,
    timeout: Duration,
) -> k8s_openapi::api::events::v1::Event {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), namespace);
    eventually(timeout, &format!("a {reason} Event"), || {
        let events = events.clone();
        async move {
            events
                .list(&kube::api::ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|e| {
                    e.reason.as_deref() == Some(reason)
                        && regarding
                            .is_none_or(|name| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
                })
        }
    })
    .await
}
