//! A real Kubernetes control plane for integration tests: etcd, kube-apiserver (Node,RBAC
//! authorization, NodeRestriction), and on demand kube-controller-manager and kube-scheduler.
//! Its nodes (kubelets, each with its own static pod directory) are in [`super::nodes`].
//!
//! One control plane is shared per test binary ([`shared`]); each test takes a namespace of its
//! own ([`ControlPlane::namespace`]). Logs and state are in the test binary's [`test_dir`], kept
//! for failed runs; the directory is printed at start.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use kube::Client;
use kube::api::{Api, PostParams};

use super::nodes::TestNode;
use super::pki::{Identity, Pki, client_from_kubeconfig, write_kubeconfig};
use super::poll::{Poll, eventually};
use super::processes::{Process, TOOLS, free_port, repo_root, rss_kib, test_dir, tool};

/// Metadata of every request except the kubelets', logged at `RequestReceived` only.
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [ResponseStarted, ResponseComplete, Panic]
rules:
  - level: None
    userGroups: [\"system:nodes\"]
  - level: Metadata
";

/// For the anchors the tests run in namespaces of their own as kube-system's `kube-anchor`
/// (`manifests/rbac.yaml`, whose Role grants the rollout Lease in kube-system only): the Lease
/// in any namespace. Not what the chart grants; the chart's own RBAC is tested in tests/charts.rs.
const TEST_LEASES: &str = "apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: kube-anchor-test-leases}
rules:
  - {apiGroups: [coordination.k8s.io], resources: [leases], verbs: [get, create, update]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: kube-anchor-test-leases}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: kube-anchor-test-leases}
subjects:
  - {kind: ServiceAccount, name: kube-anchor, namespace: kube-system}
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
    pub(super) nodes: Mutex<BTreeMap<String, TestNode>>,
    anchor_rbac: tokio::sync::OnceCell<()>,
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
        pki.issue("admin", "kube-anchor-test-admin", Some("system:masters"), &[]);
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
        let mut cp = Self {
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
        cp.write_admin_kubeconfig();
        cp.start_etcd();
        // The port was free when picked; something beside this binary (another test binary, a
        // test bed) may take it before kube-apiserver binds it. A start that ends before
        // kube-apiserver is ready is retried on a new port, saying how it ended.
        for attempt in 1.. {
            cp.spawn_apiserver();
            match cp.ready_or_exited(Duration::from_secs(60)).await {
                Ok(()) => break,
                Err(ended) if attempt < 3 => {
                    eprintln!("kube-apiserver ended while starting, starting it on a new port: {ended}");
                    cp.apiserver_port = free_port();
                    cp.server = format!("https://127.0.0.1:{}", cp.apiserver_port);
                    cp.write_admin_kubeconfig();
                }
                Err(ended) => panic!("kube-apiserver ended while starting, three times: {ended}"),
            }
        }
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

    fn write_admin_kubeconfig(&self) {
        let identity = Identity::Cert {
            cert: self.pki.dir.join("admin.crt"),
            key: self.pki.dir.join("admin.key"),
        };
        write_kubeconfig(&self.admin_kubeconfig, &self.server, &self.pki.ca(), &identity);
    }

    fn spawn_apiserver(&self) {
        let process = Process::start("kube-apiserver", self.apiserver_command(), &self.dir);
        *self.apiserver.lock().unwrap() = Some(process);
    }

    async fn start_apiserver(&self) {
        self.spawn_apiserver();
        self.wait_ready(Duration::from_secs(60)).await;
    }

    /// Polls `/readyz` as admin until it answers `ok`.
    pub async fn wait_ready(&self, timeout: Duration) {
        if let Err(ended) = self.ready_or_exited(timeout).await {
            panic!("kube-apiserver ended: {ended}");
        }
    }

    /// Polls `/readyz` as admin until it answers `ok` (`Ok`) or kube-apiserver ends (`Err`, how
    /// it ended and its log tail).
    async fn ready_or_exited(&self, timeout: Duration) -> Result<(), String> {
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
                    return Some(Ok(()));
                }
                let ended = self.apiserver.lock().unwrap().as_mut().and_then(Process::exit_status);
                ended.map(|status| Err(format!("{status}; {}", log_tail())))
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
        let token = self.token(namespace, name, None).await;
        let path = self.dir.join(format!("sa-{namespace}-{name}.kubeconfig"));
        write_kubeconfig(&path, &self.server, &self.pki.ca(), &Identity::Token(token));
        (client_from_kubeconfig(&path).await, path)
    }

    /// A token of a ServiceAccount from the TokenRequest API, bound to `bound` when given.
    async fn token(&self, namespace: &str, name: &str, bound: Option<BoundObjectReference>) -> String {
        let accounts: Api<ServiceAccount> = Api::namespaced(self.admin().await, namespace);
        let request = TokenRequest {
            spec: Some(TokenRequestSpec {
                expiration_seconds: Some(3600),
                bound_object_ref: bound,
                ..Default::default()
            }),
            ..Default::default()
        };
        accounts
            .create_token_request(name, &PostParams::default(), &request)
            .await
            .unwrap_or_else(|e| panic!("TokenRequest for {namespace}/{name}: {e}"))
            .status
            .expect("token status")
            .token
            .expect("a token")
    }

    /// Applies `manifests/rbac.yaml` with the real kubectl (once per control plane: concurrent
    /// applies of the same objects race) and returns a kubeconfig for its ServiceAccount.
    ///
    /// The tests run anchors as pods of their own namespace with this kube-system identity; the
    /// chart grants the rollout Lease only in the anchors' own namespace (a Role), so the bed
    /// grants it in every namespace too ([`TEST_LEASES`]).
    pub async fn anchor_service_account(&self) -> PathBuf {
        self.anchor_rbac
            .get_or_init(|| async {
                for (what, manifest) in [
                    (
                        "the AnchorStatus CRD",
                        fs::read_to_string(repo_root().join("manifests/anchorstatuses-crd.yaml")).unwrap(),
                    ),
                    (
                        "manifests/rbac.yaml",
                        fs::read_to_string(repo_root().join("manifests/rbac.yaml")).unwrap(),
                    ),
                    ("the test bed's Lease grant", TEST_LEASES.to_owned()),
                ] {
                    let mut child = Command::new(tool("kubectl"))
                        .arg(format!("--kubeconfig={}", self.admin_kubeconfig.display()))
                        .args(["apply", "-f", "-"])
                        .stdin(std::process::Stdio::piped())
                        .stdout(std::process::Stdio::piped())
                        .stderr(std::process::Stdio::piped())
                        .spawn()
                        .unwrap();
                    use std::io::Write as _;
                    child.stdin.take().unwrap().write_all(manifest.as_bytes()).unwrap();
                    let out = child.wait_with_output().unwrap();
                    assert!(
                        out.status.success(),
                        "kubectl apply {what}: {}",
                        String::from_utf8_lossy(&out.stderr)
                    );
                }
            })
            .await;
        self.service_account_client("kube-system", "kube-anchor").await.1
    }

    /// A kubeconfig of the anchors' ServiceAccount whose token is bound to a pod on `node`, as
    /// the token the kubelet projects into an anchor pod is: the API server then names the node
    /// in the user's extra `authentication.kubernetes.io/node-name`, which the charts'
    /// ValidatingAdmissionPolicy keeps each anchor's AnchorStatus writes to. The pod (in
    /// kube-system, named after the node) stands for the anchor pod; the node must exist.
    pub async fn anchor_kubeconfig_on(&self, node: &str) -> PathBuf {
        self.anchor_service_account().await;
        self.kubeconfig_bound_on("kube-system", "kube-anchor", node).await
    }

    /// A kubeconfig of ServiceAccount `account` in `namespace` whose token is bound to a pod on
    /// `node` (`kube-anchor-identity-<node>`, created in `namespace`), as a projected token is.
    pub async fn kubeconfig_bound_on(&self, namespace: &str, account: &str, node: &str) -> PathBuf {
        let pods: Api<Pod> = Api::namespaced(self.admin().await, namespace);
        let name = format!("kube-anchor-identity-{node}");
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {
                "nodeName": node,
                "serviceAccountName": account,
                "automountServiceAccountToken": false,
                "containers": [{"name": "anchor", "image": "kube-anchor/kube-anchor:test"}],
                "tolerations": [{"operator": "Exists"}],
            },
        }))
        .unwrap();
        let pod = match pods.create(&PostParams::default(), &pod).await {
            Ok(pod) => pod,
            Err(kube::Error::Api(e)) if e.code == 409 => pods.get(&name).await.unwrap(),
            Err(e) => panic!("pod {namespace}/{name}: {e}"),
        };
        let bound = BoundObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(name.clone()),
            uid: pod.metadata.uid.clone(),
        };
        let token = self.token(namespace, account, Some(bound)).await;
        let path = self.dir.join(format!("sa-{namespace}-{account}-{node}.kubeconfig"));
        write_kubeconfig(&path, &self.server, &self.pki.ca(), &Identity::Token(token));
        path
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

    /// Resident memory of etcd, kube-apiserver and the controllers of this control plane, in KiB.
    pub fn control_plane_rss_kib(&self) -> u64 {
        let mut pids: Vec<u32> = self.controllers.lock().unwrap().iter().map(Process::pid).collect();
        pids.extend(self.etcd.lock().unwrap().as_ref().map(Process::pid));
        pids.extend(self.apiserver.lock().unwrap().as_ref().map(Process::pid));
        pids.iter().map(|p| rss_kib(&p.to_string())).sum()
    }

    /// Starts kube-apiserver again after [`ControlPlane::stop_apiserver`].
    pub async fn start_apiserver_again(&self) {
        self.start_apiserver().await;
    }

    pub fn log_of(&self, process: &str) -> PathBuf {
        self.dir.join(format!("{process}.log"))
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
