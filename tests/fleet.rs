//! `helm upgrade` against a three-node fleet: the kubelet refreshes the ConfigMap and Secret
//! volumes of every *running* anchor pod within a minute, so without a pin every node would
//! apply the new version at once. Here every node's anchor runs as a process over volumes laid
//! out from the chart's real `helm template` output, against the real control plane and a
//! kubemark kubelet per node (mirror pods). The test refreshes every node's volumes at once, as
//! the kubelet does, then replaces the anchors one node at a time, each only once the previous
//! one is Ready, as the DaemonSet controller does with `maxUnavailable: 1`. (The kubemark kubelet
//! fakes its probes, so the DaemonSet controller itself cannot be gated by an anchor's readiness
//! on this test bed.)

mod support;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_yaml_ng::Value;
use support::control_plane;
use support::daemon::*;
use support::helm::*;
use support::nodes::NodeHandle;
use support::poll::Poll;

const WAIT: Duration = Duration::from_secs(90);
/// The anchors' trial period. A kubemark kubelet here takes about 13 s (more on a busy machine)
/// to show a rewritten static pod Running and Ready, all of which counts as not converged: 20 s
/// failed good versions now and then.
const TRIAL: Duration = Duration::from_secs(30);
/// Long enough for a version that converged at once to pass its trial.
const PROMOTED: Duration = Duration::from_secs(TRIAL.as_secs() + 2);
const MANIFEST: &str = "etc/kubernetes/manifests/kube-scheduler.yaml";

/// One chart revision as an anchor pod would see it.
struct Revision {
    config: BTreeMap<String, Vec<u8>>,
    secrets: BTreeMap<String, Vec<u8>>,
    expect_inputs: String,
}

fn revision(ns: &str, values: &Path, flag: &str) -> Revision {
    let docs = template(
        "fleet",
        "kube-scheduler",
        &[
            "-f",
            values.to_str().unwrap(),
            "--set",
            &format!("component.namespace={ns}"),
            "--set",
            &format!("component.extraArgs.marker={flag}"),
        ],
    );
    let ds = of_kind(&docs, "DaemonSet")[0];
    Revision {
        config: configmap_files(of_kind(&docs, "ConfigMap")[0]),
        secrets: secret_files(of_kind(&docs, "Secret").into_iter().collect::<Vec<&Value>>()),
        expect_inputs: template_annotation(ds, "kube-anchor.io/expect-inputs"),
    }
}

/// A node's anchor pod: its volumes, and the `kube-anchor run` process standing for its container.
struct Node {
    handle: NodeHandle,
    /// The anchors' ServiceAccount with a token bound to a pod on this node, as in an anchor pod.
    kubeconfig: PathBuf,
    work: PathBuf,
    config: ConfigVolume,
    secrets: ConfigVolume,
    health_port: u16,
    anchor: Option<Daemon>,
    pods: u32,
}

impl Node {
    fn manifest(&self) -> String {
        fs::read_to_string(self.handle.host_root().join(MANIFEST)).unwrap_or_default()
    }

    /// The kubelet refreshing the volumes of the running pod.
    fn refresh(&mut self, rev: &Revision) {
        self.config.update(&refs(&rev.config));
        self.secrets.update(&refs(&rev.secrets));
    }

    /// The DaemonSet controller replacing the anchor pod with one of `rev`'s template.
    fn replace_pod(&mut self, rev: &Revision, ns: &str) {
        self.anchor = None; // the old container is killed (its pre-stop keeps everything)
        self.refresh(rev);
        self.pods += 1;
        // The pod's paths /etc/kube-anchor/{config,secrets} are this node's work dirs.
        let expect = rev
            .expect_inputs
            .replace("/etc/kube-anchor/", &format!("{}/", self.work.display()));
        let args: Vec<String> = [
            "--kubeconfig",
            self.kubeconfig.to_str().unwrap(),
            "--pod-namespace",
            ns,
            "--pod-name",
            &format!("fleet-anchor-{}-{}", self.handle.name, self.pods),
            "--trial-period",
            &format!("{}s", TRIAL.as_secs()),
            "--health-url",
            &format!("http://127.0.0.1:{}/healthz", self.health_port),
            "--health-interval",
            "1s",
            "--expect-inputs",
            &expect,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        self.anchor = Some(Daemon::start_with_env(
            &self.config.config(),
            &self.handle.host_root(),
            &self.handle.name,
            &args,
            &[("NODE_IP".into(), "127.0.0.1".into())],
            &self.work.join(format!("anchor-{}.log", self.pods)),
        ));
    }

    fn ready(&self) -> bool {
        self.anchor
            .as_ref()
            .is_some_and(|d| matches!(d.get("/readyz"), Some((200, _))))
    }

    fn log(&self) -> String {
        self.anchor.as_ref().map(Daemon::log_text).unwrap_or_default()
    }
}

/// Three nodes with `rev`'s volumes and no anchor pod yet; each node's component health endpoint
/// fails while the node runs the "crash" version.
async fn three_nodes(cp: &control_plane::ControlPlane, prefix: &str, work: &Path, rev: &Revision) -> Vec<Node> {
    let mut nodes = Vec::new();
    for i in 1..=3 {
        let handle = cp.add_node(&format!("{prefix}-{i}"), &[]).await;
        let kubeconfig = cp.anchor_kubeconfig_on(&handle.name).await;
        let dir = work.join(&handle.name);
        let manifest = handle.host_root().join(MANIFEST);
        let health_port = health_server(move || {
            if fs::read_to_string(&manifest)
                .unwrap_or_default()
                .contains("--marker=crash")
            {
                500
            } else {
                200
            }
        });
        nodes.push(Node {
            config: ConfigVolume::new(&dir.join("config"), &refs(&rev.config)),
            secrets: ConfigVolume::new(&dir.join("secrets"), &refs(&rev.secrets)),
            handle,
            kubeconfig,
            work: dir,
            health_port,
            anchor: None,
            pods: 0,
        });
    }
    nodes
}

/// helm install: every node gets its anchor pod at once; waits until each is Ready and `rev`
/// has become last-known-good everywhere (the trial is `TRIAL` of evidence).
async fn install(nodes: &mut [Node], rev: &Revision, ns: &str) {
    for node in nodes.iter_mut() {
        node.replace_pod(rev, ns);
    }
    for node in nodes.iter() {
        wait_ready(node).await;
    }
    tokio::time::sleep(PROMOTED).await;
}

async fn wait_ready(node: &Node) {
    let readyz = || {
        format!(
            "/readyz: {:?}\n{}",
            node.anchor.as_ref().and_then(|d| d.get("/readyz")),
            node.log()
        )
    };
    Poll::new(WAIT, format!("{}: anchor Ready", node.handle.name))
        .context(readyz)
        .until_async(|| async { node.ready() })
        .await
}

/// Samples the fleet: a node "in transition" has left `baseline` and its anchor is not Ready
/// (the new version is not proven there yet). A rollout has at most one at a time; a push that
/// reaches every node at once has several.
#[derive(Default)]
struct Violations(Vec<String>);

fn sample(nodes: &[Node], baseline: &str, seen: &Arc<Mutex<Violations>>) {
    let in_transition: Vec<&str> = nodes
        .iter()
        .filter(|n| !n.manifest().contains(baseline) && !n.ready())
        .map(|n| n.handle.name.as_str())
        .collect();
    if in_transition.len() >= 2 {
        let mut seen = seen.lock().unwrap();
        let v = format!("{in_transition:?} left {baseline} and are not Ready at once");
        if !seen.0.contains(&v) {
            seen.0.push(v);
        }
    }
}

/// Samples the fleet every 50 ms for `period`.
async fn hold_for(nodes: &[Node], period: Duration, baseline: &str, seen: &Arc<Mutex<Violations>>) {
    let end = Instant::now() + period;
    while Instant::now() < end {
        sample(nodes, baseline, seen);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upgrade_reaches_nodes_only_through_the_rollout_and_a_bad_push_stops_at_the_first() {
    let cp = control_plane::shared().await;
    let ns = cp.namespace("fleet").await;
    let work = tempfile::tempdir().unwrap();
    let values = work.path().join("values.yaml");
    fs::write(&values, "credentials: {scheduler.conf: \"kubeconfig v1\"}\n").unwrap();
    let rev1 = revision(&ns, &values, "one");
    let rev2 = revision(&ns, &values, "two");
    let bad = revision(&ns, &values, "crash");
    assert_ne!(
        rev1.expect_inputs, rev2.expect_inputs,
        "a new flag changes the pod template"
    );

    let mut nodes = three_nodes(cp, "fleet", work.path(), &rev1).await;
    install(&mut nodes, &rev1, &ns).await;
    for node in &nodes {
        assert!(node.manifest().contains("--marker=one"), "{}", node.manifest());
    }
    // The fleet view: every node settled on the version its ledger records.
    let settled = [("settled", true); 3];
    fleet_agrees(cp, &nodes, &ns, &settled, 0).await;
    tables_show_every_node(cp, &nodes, &ns);
    // A deleted AnchorStatus comes back (the anchor watches its own), and an anchor may write
    // only its own node's.
    support::kubectl::kubectl_ok(
        &cp.admin_kubeconfig,
        &[
            "delete",
            "anchorstatus",
            &format!("{}.kube-scheduler", nodes[1].handle.name),
        ],
    );
    fleet_agrees(cp, &nodes, &ns, &settled, 0).await;
    anchors_write_only_their_own_node(cp, &nodes).await;

    // helm upgrade: the kubelet refreshes every running pod's volumes within the same minute.
    let seen = Arc::new(Mutex::new(Violations::default()));
    for node in &mut nodes {
        node.refresh(&rev2);
    }
    hold_for(&nodes, Duration::from_secs(3), "--marker=one", &seen).await;
    for node in &nodes {
        assert!(
            node.manifest().contains("--marker=one"),
            "{}: the refreshed volume reached the node without its pod being replaced:\n{}\n{}",
            node.handle.name,
            node.manifest(),
            node.log()
        );
        assert!(
            node.ready(),
            "{}: a pod waiting for its replacement stays Ready",
            node.handle.name
        );
    }
    // Drift is still repaired, with the version the pod applied.
    fs::remove_file(nodes[1].handle.host_root().join(MANIFEST)).unwrap();
    hold_for(&nodes, Duration::from_secs(2), "--marker=one", &seen).await;
    assert!(nodes[1].manifest().contains("--marker=one"), "{}", nodes[1].log());

    // The rollout: one node at a time, the next only once the previous anchor is Ready.
    for i in 0..nodes.len() {
        nodes[i].replace_pod(&rev2, &ns);
        Poll::new(WAIT, format!("{}: anchor Ready", nodes[i].handle.name))
            .every(Duration::from_millis(50))
            .context(|| nodes[i].log())
            .until_async(|| async {
                let ready = nodes[i].ready();
                if !ready {
                    sample(&nodes, "--marker=one", &seen);
                }
                ready
            })
            .await;
        assert!(nodes[i].manifest().contains("--marker=two"));
        for later in &nodes[i + 1..] {
            assert!(later.manifest().contains("--marker=one"), "{}", later.handle.name);
        }
        if i == 0 {
            // Mid-rollout: the first node tries the new version and holds the rollout Lease,
            // the others are settled on the old one.
            let doc = fleet_agrees(
                cp,
                &nodes,
                &ns,
                &[("on-trial", true), ("settled", true), ("settled", true)],
                0,
            )
            .await;
            let rollout = doc["rollouts"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["component"] == "kube-scheduler")
                .unwrap_or_else(|| panic!("no rollout Lease in {doc:#}"));
            assert_eq!(rollout["holder"], nodes[0].handle.name.as_str(), "{doc:#}");
            assert!(rollout["heldSeconds"].as_u64().is_some(), "{doc:#}");
        }
    }
    assert_eq!(seen.lock().unwrap().0, Vec::<String>::new());
    tokio::time::sleep(PROMOTED).await; // rev2 becomes last-known-good
    fleet_agrees(cp, &nodes, &ns, &settled, 0).await;

    // A bad push: every volume refreshed, the rollout starts at the first node and stops there.
    for node in &mut nodes {
        node.refresh(&bad);
    }
    nodes[0].replace_pod(&bad, &ns);
    Poll::new(Duration::from_secs(90), "the bad version rolled back")
        .context(|| nodes[0].log())
        .until_async(|| async {
            nodes[0].manifest().contains("--marker=two") && nodes[0].log().contains("rolled back")
        })
        .await;
    // It stays unready, so the rollout goes no further; the others never saw the bad version.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(!nodes[0].ready());
    let (_, reason) = nodes[0].anchor.as_ref().unwrap().get("/readyz").unwrap();
    assert!(reason.contains("failed its trial"), "{reason}");
    for node in &nodes[1..] {
        assert!(node.manifest().contains("--marker=two"), "{}", node.handle.name);
        assert!(node.ready(), "{}", node.handle.name);
    }
    // The fleet view: the first node holds the bad version back, recorded with its reason; exit 3.
    let doc = fleet_agrees(
        cp,
        &nodes,
        &ns,
        &[("held-back", false), ("settled", true), ("settled", true)],
        3,
    )
    .await;
    let first = &doc["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node"] == nodes[0].handle.name.as_str())
        .unwrap();
    assert!(
        first["badVersions"][0]["reason"]
            .as_str()
            .is_some_and(|r| !r.is_empty())
            && first["reason"].as_str().is_some_and(|r| r.contains("failed its trial")),
        "{doc:#}"
    );
}

/// Through the charts' ValidatingAdmissionPolicy: an anchor's pod-bound token may write its own
/// node's AnchorStatus and no other node's; a token bound to no pod may write none.
async fn anchors_write_only_their_own_node(cp: &control_plane::ControlPlane, nodes: &[Node]) {
    let status_of = |node: &str| {
        format!(
            "apiVersion: kube-anchor.io/v1alpha1\nkind: AnchorStatus\nmetadata: {{name: {node}.kube-scheduler}}\nstatus: {{node: {node}, component: kube-scheduler, state: settled, ready: true}}\n"
        )
    };
    let apply = |kubeconfig: &Path, doc: String| {
        let file = nodes[0].work.join("status.yaml");
        fs::write(&file, doc).unwrap();
        support::kubectl::kubectl(
            kubeconfig,
            &[
                "apply",
                "--server-side",
                "--dry-run=server",
                "--field-manager=kube-anchor",
                "--force-conflicts",
                "-f",
                file.to_str().unwrap(),
            ],
        )
    };
    let own = apply(&nodes[0].kubeconfig, status_of(&nodes[0].handle.name));
    assert!(own.status.success(), "{}", String::from_utf8_lossy(&own.stderr));
    let other = apply(&nodes[0].kubeconfig, status_of(&nodes[1].handle.name));
    let err = String::from_utf8_lossy(&other.stderr);
    assert!(
        !other.status.success() && err.contains("writes only the AnchorStatus of its own node"),
        "{}: {err}",
        nodes[0].handle.name
    );
    let unbound = apply(&cp.anchor_service_account().await, status_of(&nodes[0].handle.name));
    assert!(
        !unbound.status.success(),
        "a token bound to no pod wrote an AnchorStatus"
    );
}

/// Waits until every node's anchor is Ready, sampling the fleet meanwhile.
async fn all_ready_sampling(nodes: &[Node], baseline: &str, seen: &Arc<Mutex<Violations>>, timeout: Duration) {
    let logs = || {
        let logs: Vec<String> = nodes.iter().map(Node::log).collect();
        logs.join("\n----\n")
    };
    Poll::new(timeout, "every anchor Ready")
        .every(Duration::from_millis(50))
        .context(logs)
        .until_async(|| async {
            let ready = nodes.iter().all(Node::ready);
            if !ready {
                sample(nodes, baseline, seen);
            }
            ready
        })
        .await
}

/// A chart with per-node credentials has one DaemonSet per node, and `helm upgrade` changes all
/// of them at once: every DaemonSet replaces its only pod at the same moment, so no
/// `maxUnavailable` orders the nodes. The anchors' rollout Lease must: one node at a time, the
/// next only once the previous one's version passed its trial; and a version rolled back on one
/// node is tried on no other.
// The binary's longest test, named to sort first: libtest starts tests in name order, and
// started beside the short one it leaves the second thread to the other two.
#[tokio::test(flavor = "multi_thread")]
async fn a_fleet_of_per_node_daemonsets_replaced_at_once_still_rolls_one_node_at_a_time() {
    let cp = control_plane::shared().await;
    let ns = cp.namespace("pernode").await;
    let work = tempfile::tempdir().unwrap();
    let values = work.path().join("values.yaml");
    fs::write(&values, "credentials: {scheduler.conf: \"kubeconfig v1\"}\n").unwrap();
    let rev1 = revision(&ns, &values, "one");
    let rev2 = revision(&ns, &values, "two");
    let bad = revision(&ns, &values, "crash");
    let mut nodes = three_nodes(cp, "pernode", work.path(), &rev1).await;
    install(&mut nodes, &rev1, &ns).await;

    // helm upgrade: all three DaemonSets replace their pod at once.
    let seen = Arc::new(Mutex::new(Violations::default()));
    for node in &mut nodes {
        node.replace_pod(&rev2, &ns);
    }
    all_ready_sampling(&nodes, "--marker=one", &seen, Duration::from_secs(240)).await;
    for node in &nodes {
        assert!(node.manifest().contains("--marker=two"), "{}", node.log());
    }
    assert_eq!(
        seen.lock().unwrap().0,
        Vec::<String>::new(),
        "nodes left the old version together"
    );
    let waited = nodes
        .iter()
        .filter(|n| n.log().contains("not this node's turn yet"))
        .count();
    assert_eq!(waited, 2, "two nodes waited for the first");
    tokio::time::sleep(PROMOTED).await; // the last node's rev2 becomes last-known-good

    // A bad push reaching all three at once: one node tries it and rolls it back; the others
    // never write it.
    for node in &mut nodes {
        node.replace_pod(&bad, &ns);
    }
    let tried = Poll::new(Duration::from_secs(90), "a rollback")
        .every(Duration::from_millis(100))
        .until_async(|| async {
            sample(&nodes, "--marker=two", &seen);
            nodes
                .iter()
                .position(|n| n.log().contains("rolled back to last-known-good"))
        })
        .await;
    hold_for(&nodes, Duration::from_secs(8), "--marker=two", &seen).await;
    assert_eq!(
        seen.lock().unwrap().0,
        Vec::<String>::new(),
        "the bad version reached two nodes at once"
    );
    for node in &nodes {
        assert!(
            node.manifest().contains("--marker=two"),
            "{}: {}",
            node.handle.name,
            node.log()
        );
        assert!(!node.ready(), "{}: Ready with the bad inputs", node.handle.name);
    }
    // The node that tried it keeps the turn until its last-known-good version runs Ready again
    // (the return restarts the component as an upgrade does); then the others say why they do
    // not try the version.
    for node in nodes.iter().enumerate().filter(|(i, _)| *i != tried).map(|(_, n)| n) {
        Poll::new(WAIT, format!("{}: the rollback named", node.handle.name))
            .every(Duration::from_millis(200))
            .context(|| node.log())
            .until_async(|| async {
                sample(&nodes, "--marker=two", &seen);
                let (_, reason) = node.anchor.as_ref().unwrap().get("/readyz").unwrap();
                reason.contains("was rolled back on")
            })
            .await;
    }

    // The holder falls silent mid-trial (its anchor container killed; as when a bad
    // kube-apiserver push blinds the anchor of the node that took it). Its Lease looks long
    // expired; the others must still wait (a turn is never taken over on a timer), and the
    // holder's next anchor picks its turn up and finishes the rollout.
    let rev3 = revision(&ns, &values, "three");
    for node in &mut nodes {
        node.replace_pod(&rev3, &ns);
    }
    let holder = Poll::new(Duration::from_secs(60), "a node to take the turn for rev3")
        .every(Duration::from_millis(50))
        .until_async(|| async {
            sample(&nodes, "--marker=two", &seen);
            nodes.iter().position(|n| n.manifest().contains("--marker=three"))
        })
        .await;
    nodes[holder].anchor = None;
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> = kube::Api::namespaced(cp.admin().await, &ns);
    let long_ago = k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_hours(1);
    leases
        .patch(
            "kube-anchor-control-plane",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({
                "spec": {"renewTime": long_ago.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string(), "leaseDurationSeconds": 1}
            })),
        )
        .await
        .unwrap();
    hold_for(&nodes, Duration::from_secs(10), "--marker=two", &seen).await;
    for (i, node) in nodes.iter().enumerate() {
        if i != holder {
            assert!(
                node.manifest().contains("--marker=two"),
                "{} took the turn of a silent holder:\n{}",
                node.handle.name,
                node.log()
            );
        }
    }
    nodes[holder].replace_pod(&rev3, &ns);
    all_ready_sampling(&nodes, "--marker=two", &seen, Duration::from_secs(240)).await;
    assert!(
        nodes[holder]
            .log()
            .contains("this node holds the rollout turn for the version on trial"),
        "{}",
        nodes[holder].log()
    );
    for node in &nodes {
        assert!(node.manifest().contains("--marker=three"), "{}", node.log());
    }
    assert_eq!(
        seen.lock().unwrap().0,
        Vec::<String>::new(),
        "two nodes in transition at once"
    );
}

/// The scheduler's test PKI: a CA and a client certificate that expires in 10 days (inside the
/// anchors' default warning horizon of 30 days).
struct SchedulerPki {
    ca: rcgen::CertificateParams,
    ca_key: rcgen::KeyPair,
    ca_pem: String,
    cert: String,
    key: String,
    other_key: String,
}

fn scheduler_pki() -> &'static SchedulerPki {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    static PKI: std::sync::OnceLock<SchedulerPki> = std::sync::OnceLock::new();
    PKI.get_or_init(|| {
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.distinguished_name.push(DnType::CommonName, "kubernetes");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_key = KeyPair::generate().unwrap();
        let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
        let key = KeyPair::generate().unwrap();
        let cert = scheduler_certificate(&ca, &ca_key, &key, 10);
        SchedulerPki {
            ca,
            ca_key,
            ca_pem,
            cert,
            key: key.serialize_pem(),
            other_key: KeyPair::generate().unwrap().serialize_pem(),
        }
    })
}

/// The scheduler's client certificate for `key`, valid until `days` from today.
fn scheduler_certificate(
    ca: &rcgen::CertificateParams,
    ca_key: &rcgen::KeyPair,
    key: &rcgen::KeyPair,
    days: u64,
) -> String {
    let mut client = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    client
        .distinguished_name
        .push(rcgen::DnType::CommonName, "system:kube-scheduler");
    let until = humantime::format_rfc3339_seconds(std::time::SystemTime::now() + Duration::from_secs(days * 86_400))
        .to_string();
    client.not_after = rcgen::date_time_ymd(
        until[0..4].parse().unwrap(),
        until[5..7].parse().unwrap(),
        until[8..10].parse().unwrap(),
    );
    client
        .signed_by(key, &rcgen::Issuer::from_params(ca, ca_key))
        .unwrap()
        .pem()
}

fn kubeconfig_with(ca: &str, cert: &str, key: &str) -> String {
    use base64::Engine as _;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: \"https://127.0.0.1:6443\", certificate-authority-data: {}}}\nusers:\n- name: scheduler\n  user: {{client-certificate-data: {}, client-key-data: {}}}\ncontexts:\n- name: c\n  context: {{cluster: c, user: scheduler}}\ncurrent-context: c\n",
        b64(ca),
        b64(cert),
        b64(key)
    )
}

/// A kubeconfig whose embedded client certificate belongs to its key; `wrong_key` embeds
/// another key instead (a Secret updated with one half of a renewal).
fn scheduler_kubeconfig(wrong_key: bool) -> String {
    let pki = scheduler_pki();
    kubeconfig_with(
        &pki.ca_pem,
        &pki.cert,
        if wrong_key { &pki.other_key } else { &pki.key },
    )
}

/// The same kubeconfig as `kubeadm certs renew scheduler.conf` leaves it: a new key and a
/// certificate for it valid a year longer.
fn renewed_scheduler_kubeconfig() -> String {
    let pki = scheduler_pki();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = scheduler_certificate(&pki.ca, &pki.ca_key, &key, 375);
    kubeconfig_with(&pki.ca_pem, &cert, &key.serialize_pem())
}

/// A `helm upgrade` whose Secret carries a key of another certificate: the first node's anchor
/// refuses it before anything is written (its static pod never restarts), says so on `/readyz`
/// and in a Warning Event, and takes no rollout turn; no other node sees it. Then the Events of
/// the other anchors: a certificate expiring soon, and a renewal made on a node, kept.
#[tokio::test(flavor = "multi_thread")]
async fn a_push_with_a_mismatched_key_is_refused_by_the_first_anchor_before_anything_restarts() {
    let cp = control_plane::shared().await;
    let ns = cp.namespace("badkey").await;
    let work = tempfile::tempdir().unwrap();
    let values = |name: &str, wrong_key: bool| {
        let path = work.path().join(name);
        let mut credentials = serde_yaml_ng::Mapping::new();
        credentials.insert("scheduler.conf".into(), scheduler_kubeconfig(wrong_key).into());
        let mut doc = serde_yaml_ng::Mapping::new();
        doc.insert("credentials".into(), credentials.into());
        fs::write(&path, serde_yaml_ng::to_string(&doc).unwrap()).unwrap();
        path
    };
    let good = revision(&ns, &values("good.yaml", false), "one");
    let bad = revision(&ns, &values("bad.yaml", true), "two");
    let mut nodes = three_nodes(cp, "badkey", work.path(), &good).await;
    install(&mut nodes, &good, &ns).await;
    let before: Vec<(String, String)> = nodes
        .iter()
        .map(|n| {
            let conf = fs::read_to_string(n.handle.host_root().join("etc/kubernetes/scheduler.conf")).unwrap();
            (n.manifest(), conf)
        })
        .collect();

    for node in &mut nodes {
        node.refresh(&bad);
    }
    nodes[0].replace_pod(&bad, &ns);
    let event = control_plane::event(
        &cp.admin().await,
        &ns,
        "CredentialsRefused",
        Some(&format!("fleet-anchor-{}-{}", nodes[0].handle.name, nodes[0].pods)),
        WAIT,
    )
    .await;
    let note = event.note.unwrap_or_default();
    assert!(
        note.contains(
            "/etc/kubernetes/scheduler.conf (user scheduler: client-key-data): the private key does not belong"
        ) && note.contains("CN=system:kube-scheduler"),
        "{note}"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!nodes[0].ready(), "{}", nodes[0].log());
    let (_, reason) = nodes[0].anchor.as_ref().unwrap().get("/readyz").unwrap();
    assert!(reason.contains("credentials refused"), "{reason}");
    assert!(
        !nodes[0].log().contains("waiting for this node's turn")
            && !nodes[0].log().contains("this node's turn: rolling out"),
        "{}",
        nodes[0].log()
    );
    for (node, (manifest, conf)) in nodes.iter().zip(&before) {
        assert_eq!(
            &node.manifest(),
            manifest,
            "{}: the static pod was not touched",
            node.handle.name
        );
        assert_eq!(
            &fs::read_to_string(node.handle.host_root().join("etc/kubernetes/scheduler.conf")).unwrap(),
            conf,
            "{}",
            node.handle.name
        );
    }
    for node in &nodes[1..] {
        assert!(node.ready(), "{}: {}", node.handle.name, node.log());
    }

    // The other nodes' anchors warn of the client certificate expiring in 10 days, each from its
    // own node's files, through the real API server.
    let admin = cp.admin().await;
    let pod = |node: &Node| format!("fleet-anchor-{}-{}", node.handle.name, node.pods);
    for node in &nodes[1..] {
        let event = control_plane::event(&admin, &ns, "CertificateExpiresSoon", Some(&pod(node)), WAIT).await;
        let note = event.note.unwrap_or_default();
        assert!(
            note.starts_with(
                "/etc/kubernetes/scheduler.conf (user scheduler: client-certificate-data) (CN=system:kube-scheduler) expires at "
            ),
            "{note}"
        );
    }

    // `kubeadm certs renew scheduler.conf` on the second node: kept, not put back, and said.
    let conf = nodes[1].handle.host_root().join("etc/kubernetes/scheduler.conf");
    let renewed = renewed_scheduler_kubeconfig();
    fs::write(&conf, &renewed).unwrap();
    let event = control_plane::event(&admin, &ns, "CertificateRenewedOnNode", Some(&pod(&nodes[1])), WAIT).await;
    let note = event.note.unwrap_or_default();
    assert!(
        note.starts_with("/etc/kubernetes/scheduler.conf: CN=system:kube-scheduler renewed on the node: valid until ")
            && note.contains(", with a new key"),
        "{note}"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(fs::read_to_string(&conf).unwrap(), renewed, "{}", nodes[1].log());
    assert!(nodes[1].ready(), "{}", nodes[1].log());
}

/// One node's state as its ledger on disk has it (read by the test, not by kube-anchor).
#[derive(Debug, PartialEq)]
struct OnDisk {
    applied: Option<String>,
    last_known_good: Option<String>,
    bad: Vec<String>,
}

fn on_disk(node: &Node) -> OnDisk {
    let path = node
        .handle
        .host_root()
        .join("var/lib/kube-anchor/v1/kube-scheduler.json");
    let ledger = kube_anchor_core::ledger::Ledger::decode(&fs::read(&path).unwrap()).unwrap();
    OnDisk {
        applied: ledger.content_hash,
        last_known_good: ledger.last_known_good,
        bad: ledger.bad.into_iter().map(|b| b.hash).collect(),
    }
}

/// What the API shows of one node: (state, ready, what it says the ledger holds).
type Shown = (String, bool, OnDisk);

fn shown(status: &serde_json::Value) -> Shown {
    let text = |key: &str| status[key].as_str().map(str::to_owned);
    (
        text("state").unwrap_or_default(),
        status["ready"].as_bool().unwrap_or_default(),
        OnDisk {
            applied: text("appliedHash"),
            last_known_good: text("lastKnownGoodHash"),
            bad: status["badVersions"]
                .as_array()
                .map(|b| b.iter().map(|v| v["hash"].as_str().unwrap().to_owned()).collect())
                .unwrap_or_default(),
        },
    )
}

/// `kube-anchor fleet` for these nodes: its exit code and JSON document.
fn fleet(cp: &control_plane::ControlPlane, nodes: &[Node], ns: &str) -> (i32, serde_json::Value) {
    let names: Vec<&str> = nodes.iter().map(|n| n.handle.name.as_str()).collect();
    let out = std::process::Command::new(support::fixture::BIN)
        .args(["fleet", "--output", "json", "-n", ns, "-l"])
        .arg(format!("kube-anchor.io/node in ({})", names.join(",")))
        .arg("--kubeconfig")
        .arg(&cp.admin_kubeconfig)
        .output()
        .unwrap();
    let doc = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("fleet: {e}: {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code().unwrap(), doc)
}

/// Waits until `kubectl get anchorstatuses` and `kube-anchor fleet` both show every node in
/// `states` (with its readiness) and agree with the ledger on its disk; then `fleet` exits with
/// `exit` and its document fits schemas/fleet.v1.json. Returns that document.
async fn fleet_agrees(
    cp: &control_plane::ControlPlane,
    nodes: &[Node],
    ns: &str,
    states: &[(&str, bool)],
    exit: i32,
) -> serde_json::Value {
    let look = || {
        let disk: Vec<OnDisk> = nodes.iter().map(on_disk).collect();
        let names: Vec<&str> = nodes.iter().map(|n| n.handle.name.as_str()).collect();
        let objects = support::kubectl::kubectl_ok(
            &cp.admin_kubeconfig,
            &[
                "get",
                "anchorstatuses",
                "-o",
                "json",
                "-l",
                &format!("kube-anchor.io/node in ({})", names.join(",")),
            ],
        );
        let objects: serde_json::Value = serde_json::from_str(&objects).unwrap();
        let by_kubectl: Vec<Option<Shown>> = names
            .iter()
            .map(|n| {
                objects["items"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|o| o["metadata"]["name"] == format!("{n}.kube-scheduler"))
                    .map(|o| shown(&o["status"]))
            })
            .collect();
        let (code, doc) = fleet(cp, nodes, ns);
        let by_fleet: Vec<Option<Shown>> = names
            .iter()
            .map(|n| {
                doc["nodes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|s| s["node"] == *n && s["component"] == "kube-scheduler")
                    .map(shown)
            })
            .collect();
        let wanted: Vec<Option<Shown>> = disk
            .into_iter()
            .zip(states)
            .map(|(d, (state, ready))| Some((state.to_string(), *ready, d)))
            .collect();
        (
            by_kubectl == wanted && by_fleet == wanted && code == exit,
            code,
            doc,
            by_kubectl,
            wanted,
        )
    };
    let mut last = None;
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        let (agree, code, doc, by_kubectl, wanted) = look();
        if agree {
            let (schemas, index) = support::fixture::schema("fleet.v1.json");
            if let Err(e) = schemas.validate(&doc, index) {
                panic!("{doc:#}\ndoes not match schemas/fleet.v1.json: {e:#}");
            }
            return doc;
        }
        last = Some(format!(
            "kubectl: {by_kubectl:#?}\nwanted (ledgers): {wanted:#?}\nfleet exit {code}: {doc:#}"
        ));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let logs: Vec<String> = nodes.iter().map(Node::log).collect();
    panic!(
        "the fleet view does not agree with the ledgers:\n{}\n{}",
        last.unwrap_or_default(),
        logs.join("\n----\n")
    );
}

/// The columns `kubectl get anchorstatuses` and `kube-anchor fleet` print: each node's row names
/// its short applied version (as its ledger has it), its state and readiness.
fn tables_show_every_node(cp: &control_plane::ControlPlane, nodes: &[Node], ns: &str) {
    let names: Vec<&str> = nodes.iter().map(|n| n.handle.name.as_str()).collect();
    let selector = format!("kube-anchor.io/node in ({})", names.join(","));
    let by_kubectl = support::kubectl::kubectl_ok(&cp.admin_kubeconfig, &["get", "anchorstatuses", "-l", &selector]);
    let by_fleet = std::process::Command::new(support::fixture::BIN)
        .args(["fleet", "-n", ns, "-l", &selector, "--kubeconfig"])
        .arg(&cp.admin_kubeconfig)
        .output()
        .unwrap();
    assert!(by_fleet.status.success(), "{by_fleet:?}");
    let by_fleet = String::from_utf8_lossy(&by_fleet.stdout).into_owned();
    for (table, header, ready) in [
        (
            &by_kubectl,
            [
                "NAME",
                "NODE",
                "COMPONENT",
                "APPLIED",
                "LAST-KNOWN-GOOD",
                "STATE",
                "SINCE",
                "READY",
                "BAD",
            ]
            .as_slice(),
            "true",
        ),
        (
            &by_fleet,
            [
                "NODE",
                "COMPONENT",
                "APPLIED",
                "LAST-KNOWN-GOOD",
                "STATE",
                "SINCE",
                "READY",
                "BAD",
            ]
            .as_slice(),
            "yes",
        ),
    ] {
        let head: Vec<&str> = table.lines().next().unwrap_or_default().split_whitespace().collect();
        assert_eq!(head, header, "{table}");
        for node in nodes {
            let applied = on_disk(node).applied.unwrap();
            let short = &applied["sha256:".len().."sha256:".len() + 12];
            let row = table
                .lines()
                .find(|l| l.split_whitespace().any(|c| c == node.handle.name))
                .unwrap_or_else(|| panic!("{}: no row in\n{table}", node.handle.name));
            assert!(
                row.contains(short) && row.contains("settled") && row.split_whitespace().any(|c| c == ready),
                "{}: {row}\n{table}",
                node.handle.name
            );
        }
    }
    println!("kubectl get anchorstatuses:\n{by_kubectl}\nkube-anchor fleet:\n{by_fleet}");
}

/// The control plane's rollout Lease against the real API server, as the anchors of several
/// components on several nodes use it: one node holds the turn at a time, for one component at a
/// time; a first write elsewhere waits for a trial of its component and refuses a
/// failed revision; a failure recorded for one component stops only that component's revision
/// elsewhere, until it runs on the node that failed it; two nodes racing for a free turn get one
/// winner (the write carries the resourceVersion it read), and the holder renewing while another
/// node asks keeps it; and a turn an earlier anchor holds on its component's own Lease is
/// honoured and given back.
#[tokio::test]
async fn one_node_and_one_component_at_a_time_hold_the_turn() {
    use k8s_openapi::api::coordination::v1::Lease;
    use kube_anchor_core::rollout::{FirstWrite, LeaseAnswer, TurnEnd};
    use kube_anchor_k8s::kubeapi::RolloutLease;
    let cp = control_plane::shared().await;
    let ns = cp.namespace("turns").await;
    let client = cp.admin().await;
    let anchor = |component: &str, node: &str| RolloutLease::new(client.clone(), &ns, component, node, TRIAL);
    let leases: kube::Api<Lease> = kube::Api::namespaced(client.clone(), &ns);
    let listed = |lease: &Lease| {
        lease
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("kube-anchor.io/turn-components").cloned())
    };
    let held_by = |answer: &LeaseAnswer| match answer {
        LeaseAnswer::Held { by, rolling_out, .. } => Some((by.clone(), rolling_out.join(","))),
        _ => None,
    };

    // Two nodes race for the free turn: exactly one wins.
    let (etcd_1, apiserver_2) = (anchor("etcd", "cp-1"), anchor("kube-apiserver", "cp-2"));
    let (one, two) = tokio::join!(etcd_1.ask(Some("e2")), apiserver_2.ask(None));
    let (one, two) = (one.unwrap(), two.unwrap());
    assert_eq!(
        [&one, &two].iter().filter(|a| ***a == LeaseAnswer::Take).count(),
        1,
        "{one:?} {two:?}"
    );
    let (winner, loser) = if one == LeaseAnswer::Take {
        (anchor("etcd", "cp-1"), anchor("kube-apiserver", "cp-2"))
    } else {
        (anchor("kube-apiserver", "cp-2"), anchor("etcd", "cp-1"))
    };
    winner.release(TurnEnd::Neither).await.unwrap();
    assert!(!winner.held_here().await.unwrap());
    assert_eq!(loser.ask(None).await.unwrap(), LeaseAnswer::Take);
    loser.release(TurnEnd::Neither).await.unwrap();

    // cp-1 rolls etcd out: cp-2's kube-apiserver waits, and so does cp-1's own; a fresh cp-3
    // starts no etcd while cp-1 tries one, and may start its kube-apiserver.
    assert_eq!(anchor("etcd", "cp-1").ask(Some("e2")).await.unwrap(), LeaseAnswer::Take);
    for node in ["cp-2", "cp-1"] {
        let waiting = anchor("kube-apiserver", node).ask(Some("a2")).await.unwrap();
        assert_eq!(
            held_by(&waiting),
            Some(("cp-1".into(), "etcd".into())),
            "{node}: {waiting:?}"
        );
    }
    assert!(matches!(
        anchor("etcd", "cp-3").first_write(Some("e2")).await.unwrap(),
        FirstWrite::OnTrialElsewhere { by, .. } if by == "cp-1"
    ));
    assert_eq!(
        anchor("kube-apiserver", "cp-3").first_write(Some("a2")).await.unwrap(),
        FirstWrite::Go
    );
    let lease = leases.get("kube-anchor-control-plane").await.unwrap();
    assert_eq!(listed(&lease).as_deref(), Some("etcd"));
    assert!(anchor("etcd", "cp-1").held_here().await.unwrap());
    assert!(!anchor("kube-apiserver", "cp-1").held_here().await.unwrap());
    assert!(!anchor("etcd", "cp-2").held_here().await.unwrap());
    // cp-1's renewal and cp-2's ask at the same moment: cp-1 keeps the turn.
    let (etcd_1, apiserver_2) = (anchor("etcd", "cp-1"), anchor("kube-apiserver", "cp-2"));
    let (a, b) = tokio::join!(etcd_1.ask(Some("e2")), apiserver_2.ask(Some("a2")));
    assert_eq!(a.unwrap(), LeaseAnswer::Take);
    assert_eq!(held_by(&b.unwrap()).map(|(by, _)| by), Some("cp-1".into()));

    // etcd's revision fails on cp-1: the turn is free, with the failure recorded.
    anchor("etcd", "cp-1").release(TurnEnd::Failed("e2")).await.unwrap();
    let lease = leases.get("kube-anchor-control-plane").await.unwrap();
    assert_eq!(lease.spec.as_ref().and_then(|s| s.holder_identity.clone()), None);
    assert_eq!(listed(&lease), None);
    // The failure stops that revision of etcd elsewhere, a first write included, and nothing else.
    assert_eq!(
        anchor("etcd", "cp-2").ask(Some("e2")).await.unwrap(),
        LeaseAnswer::FailedElsewhere { node: "cp-1".into() }
    );
    assert_eq!(
        anchor("etcd", "cp-3").first_write(Some("e2")).await.unwrap(),
        FirstWrite::FailedElsewhere { node: "cp-1".into() }
    );
    assert_eq!(
        anchor("kube-apiserver", "cp-2").ask(Some("e2")).await.unwrap(),
        LeaseAnswer::Take
    );
    anchor("kube-apiserver", "cp-2")
        .release(TurnEnd::Neither)
        .await
        .unwrap();
    // cp-1 may try it again (fixed credentials of its own, or a retry); once it runs there, the
    // failure is cleared and the others go on.
    assert_eq!(anchor("etcd", "cp-1").ask(Some("e2")).await.unwrap(), LeaseAnswer::Take);
    anchor("etcd", "cp-1").release(TurnEnd::Ran("e2")).await.unwrap();
    let lease = leases.get("kube-anchor-control-plane").await.unwrap();
    assert!(
        !lease
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key("kube-anchor.io/failed-revision.etcd")
    );
    assert_eq!(
        anchor("etcd", "cp-3").first_write(Some("e2")).await.unwrap(),
        FirstWrite::Go
    );
    assert_eq!(anchor("etcd", "cp-2").ask(Some("e2")).await.unwrap(), LeaseAnswer::Take);
    anchor("etcd", "cp-2").release(TurnEnd::Neither).await.unwrap();

    // An earlier anchor on cp-3 holds etcd's own Lease (renewed now: a live holder).
    let now = k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string();
    let own: Lease = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "kube-anchor-etcd"},
        "spec": {"holderIdentity": "cp-3", "renewTime": now, "leaseDurationSeconds": 30}
    }))
    .unwrap();
    leases.create(&Default::default(), &own).await.unwrap();
    let waiting = anchor("etcd", "cp-2").ask(Some("e3")).await.unwrap();
    assert_eq!(held_by(&waiting).map(|(by, _)| by), Some("cp-3".into()), "{waiting:?}");
    assert!(anchor("etcd", "cp-3").held_here().await.unwrap());
    anchor("etcd", "cp-3").release(TurnEnd::Neither).await.unwrap();
    let own = leases.get("kube-anchor-etcd").await.unwrap();
    assert_eq!(own.spec.and_then(|s| s.holder_identity), None);
    assert_eq!(anchor("etcd", "cp-2").ask(Some("e3")).await.unwrap(), LeaseAnswer::Take);
}

/// `--api-server-margin`: the anchors of the component on other nodes are listed with the
/// anchors' own credentials, and each node's API server is asked at that node's address
/// (`status.hostIP`, the health URL's port and path, the cluster CA). This bed's API server binds
/// 127.0.0.1 only, so a node at 127.0.0.2 has nothing listening there: no answer.
#[tokio::test]
async fn a_kube_apiserver_restarts_only_while_another_node_serves() {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Patch, PatchParams, PostParams};
    use kube_anchor_core::margin::{Margin, MarginFacts, PeerAnswer};
    let cp = control_plane::shared().await;
    let ns = cp.namespace("apimargin").await;
    let admin = cp.admin().await;
    let anchor = support::pki::client_from_kubeconfig(&cp.anchor_service_account().await).await;
    // A component name of this test alone: the anchors are listed in every namespace.
    let component = format!("kube-apiserver-{ns}");
    let pods: kube::Api<Pod> = kube::Api::namespaced(admin.clone(), &ns);
    // No controller-manager creates it here.
    let accounts: kube::Api<k8s_openapi::api::core::v1::ServiceAccount> = kube::Api::namespaced(admin.clone(), &ns);
    let default: k8s_openapi::api::core::v1::ServiceAccount =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "default"}})).unwrap();
    accounts.create(&PostParams::default(), &default).await.unwrap();
    let place = |node: &str, ip: &str| {
        let (pods, component, node, ip) = (pods.clone(), component.clone(), node.to_owned(), ip.to_owned());
        async move {
            let name = format!("anchor-{node}");
            let pod: Pod = serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "labels": {
                    "app.kubernetes.io/name": "kube-anchor",
                    "app.kubernetes.io/component": component,
                }},
                "spec": {
                    "nodeName": node,
                    "automountServiceAccountToken": false,
                    "containers": [{"name": "anchor", "image": "kube-anchor/kube-anchor:test"}],
                    "tolerations": [{"operator": "Exists"}],
                },
            }))
            .unwrap();
            pods.create(&PostParams::default(), &pod).await.unwrap();
            // No kubelet runs these: the address a kubelet would report is set by hand.
            let status = serde_json::json!({"status": {"hostIP": ip}});
            pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                .await
                .unwrap();
        }
    };
    let health_url = format!("https://127.0.0.1:{}/readyz", cp.apiserver_port);
    let ca = cp.pki.ca();
    let ask = || {
        let (anchor, component, health_url, ca) = (anchor.clone(), component.clone(), health_url.clone(), ca.clone());
        async move { kube_anchor_k8s::margin::api_server_peers(&anchor, &component, "cp-1", &health_url, Some(&ca)).await }
    };

    // This node alone: no margin can exist, so nothing waits.
    place("cp-1", "127.0.0.1").await;
    assert_eq!(ask().await, MarginFacts::ApiServers { peers: vec![] });
    assert!(matches!(ask().await.judge(), Margin::CannotExist(_)));

    // cp-3's API server does not answer; cp-2's (this bed's, at 127.0.0.1) serves.
    place("cp-2", "127.0.0.1").await;
    place("cp-3", "127.0.0.2").await;
    let facts = ask().await;
    let MarginFacts::ApiServers { peers } = &facts else {
        panic!("{facts:?}");
    };
    let answers: BTreeMap<&str, &PeerAnswer> = peers.iter().map(|p| (p.node.as_str(), &p.answer)).collect();
    assert_eq!(
        answers.keys().copied().collect::<Vec<_>>(),
        ["cp-2", "cp-3"],
        "{facts:?}"
    );
    assert_eq!(answers["cp-2"], &PeerAnswer::Serving);
    assert!(
        matches!(answers["cp-3"], PeerAnswer::NoAnswer(why) if why.contains("127.0.0.2")),
        "{facts:?}"
    );
    assert_eq!(facts.judge(), Margin::Affords);

    // The one-shot verbs ask the same with `--api-server-margin` (the anchor container's
    // environment): a first write and, while cp-2 serves, a restart go ahead.
    let host = tempfile::tempdir().unwrap();
    let config = host.path().join("config");
    fs::create_dir_all(&config).unwrap();
    fs::create_dir_all(host.path().join("node")).unwrap();
    const MANIFEST: &str = "/etc/kubernetes/manifests/kube-apiserver.yaml";
    fs::write(
        config.join("anchor.yaml"),
        anchor_config(
            &component,
            &[("extra.conf", "/etc/kubernetes/extra.conf", "0600")],
            MANIFEST,
        ),
    )
    .unwrap();
    fs::write(config.join("extra.conf"), "extra").unwrap();
    let anchor_kubeconfig = cp.anchor_service_account().await;
    let apply = |verbosity: u32, extra: &[&str]| {
        let pod = format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: kube-apiserver, namespace: kube-system}}\nspec:\n  hostNetwork: true\n  containers: [{{name: a, image: 'registry.k8s.io/kube-apiserver:v1.36.3', args: ['--v={verbosity}']}}]\n"
        );
        fs::write(config.join("pod.yaml"), pod).unwrap();
        let out = std::process::Command::new(support::fixture::BIN)
            .arg("apply")
            .arg("--config")
            .arg(config.join("anchor.yaml"))
            .arg("--host-root")
            .arg(host.path().join("node"))
            .args(["--api-server-margin", "--health-url", &health_url, "--health-ca-file"])
            .arg(&ca)
            .arg("--kubeconfig")
            .arg(&anchor_kubeconfig)
            .env("NODE_NAME", "cp-1")
            .args(extra)
            .output()
            .unwrap();
        let manifest = fs::read_to_string(host.path().join("node").join(MANIFEST.trim_start_matches('/')));
        (out, manifest.unwrap_or_default())
    };
    for verbosity in [1, 2] {
        let (out, manifest) = apply(verbosity, &[]);
        assert!(out.status.success(), "{out:?}");
        assert!(manifest.contains(&format!("--v={verbosity}")), "{manifest}");
    }

    // cp-2 leaves: only the silent one is left, so a restart here would leave no API.
    // No kubelet confirms a graceful deletion here.
    pods.delete("anchor-cp-2", &kube::api::DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    let gone = Poll::new(Duration::from_secs(30), "cp-2's anchor pod gone from the list")
        .until_async(|| async {
            match ask().await.judge() {
                Margin::Short(why) => Some(why),
                _ => None,
            }
        })
        .await;
    assert!(gone.contains("cp-3 does not answer"), "{gone}");
    // The verb refuses, naming it, and writes nothing; --force writes, saying so.
    let (out, manifest) = apply(3, &[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("nothing written")
            && stderr.contains("kube-apiserver")
            && stderr.contains("cp-3 does not answer"),
        "{stderr}"
    );
    assert!(manifest.contains("--v=2"), "{manifest}");
    let (out, manifest) = apply(3, &["--force"]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("--force: writing although"),
        "{out:?}"
    );
    assert!(manifest.contains("--v=3"), "{manifest}");

    // A CA that did not sign cp-2's serving certificate (a CA replaced without a bundle): no
    // answer either, whatever /readyz would say.
    place("cp-2", "127.0.0.1").await;
    let stranger = support::pki::Pki::new(&cp.dir.join(format!("{ns}-stranger"))).ca();
    let facts =
        kube_anchor_k8s::margin::api_server_peers(&anchor, &component, "cp-1", &health_url, Some(&stranger)).await;
    assert!(
        matches!(facts.judge(), Margin::Short(why) if why.contains("cp-2 does not answer")),
        "{facts:?}"
    );
}

/// The charts' ValidatingAdmissionPolicy on the rollout Leases (`manifests/rbac.yaml`, applied
/// to this API server): an anchor, with its pod-bound token, takes and gives back only its own
/// node's turn and records failures only in its own node's name; a token bound to no pod writes
/// nothing. Each refused write is one the Lease code would make for another node.
#[tokio::test]
async fn an_anchor_writes_the_rollout_turn_only_for_its_own_node() {
    use k8s_openapi::api::core::v1::Node;
    use kube::api::PostParams;
    use kube_anchor_core::rollout::{LeaseAnswer, TurnEnd};
    use kube_anchor_k8s::kubeapi::RolloutLease;
    let cp = control_plane::shared().await;
    let ns = cp.namespace("leasepolicy").await;
    let admin = cp.admin().await;
    let nodes: kube::Api<Node> = kube::Api::all(admin.clone());
    let (a, b) = (format!("{ns}-a"), format!("{ns}-b"));
    for name in [&a, &b] {
        let node: Node = serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
        nodes.create(&PostParams::default(), &node).await.unwrap();
    }
    let on_a = support::pki::client_from_kubeconfig(&cp.anchor_kubeconfig_on(&a).await).await;
    let on_b = support::pki::client_from_kubeconfig(&cp.anchor_kubeconfig_on(&b).await).await;
    let unbound = support::pki::client_from_kubeconfig(&cp.anchor_service_account().await).await;
    // `client` writes as the anchor of `node` would (which may not be its own).
    let lease =
        |client: &kube::Client, node: &str| RolloutLease::new(client.clone(), &ns, "kube-scheduler", node, TRIAL);
    let refused = |result: Result<LeaseAnswer, kube::Error>, what: &str| match result {
        Err(kube::Error::Api(e)) => assert!(
            (e.code == 403 || e.code == 422) && e.message.contains("rollout-lease"),
            "{what}: expected the policy's refusal, got {e:?}"
        ),
        other => panic!("{what}: expected the policy's refusal, got {other:?}"),
    };

    // A token bound to no pod names no node: refused even for a free turn.
    refused(lease(&unbound, &a).ask(Some("r1")).await, "unbound token");
    // B's anchor takes no turn in A's name.
    refused(lease(&on_b, &a).ask(Some("r1")).await, "B taking A's turn");
    // A takes its own; B cannot give it back for A, nor record a failure in A's name.
    assert_eq!(lease(&on_a, &a).ask(Some("r1")).await.unwrap(), LeaseAnswer::Take);
    let release_refused = |result: Result<(), kube::Error>, what: &str| {
        refused(result.map(|()| LeaseAnswer::Take), what);
    };
    release_refused(
        lease(&on_b, &a).release(TurnEnd::Neither).await,
        "B giving back A's turn",
    );
    release_refused(
        lease(&on_b, &a).release(TurnEnd::Failed("r1")).await,
        "B failing r1 in A's name",
    );
    assert!(
        lease(&admin, &a).held_here().await.unwrap(),
        "A's turn survives B's attempts"
    );
    // B may record what failed on B (a first write takes no turn) while A holds it.
    lease(&on_b, &b).release(TurnEnd::Failed("r0")).await.unwrap();
    // A fails r1 and gives the turn back; B clears that record by running r1.
    lease(&on_a, &a).release(TurnEnd::Failed("r1")).await.unwrap();
    assert!(matches!(
        lease(&on_b, &b).ask(Some("r1")).await.unwrap(),
        LeaseAnswer::FailedElsewhere { .. }
    ));
    lease(&on_b, &b).release(TurnEnd::Ran("r1")).await.unwrap();
    assert_eq!(lease(&on_b, &b).ask(Some("r1")).await.unwrap(), LeaseAnswer::Take);
    lease(&on_b, &b).release(TurnEnd::Neither).await.unwrap();
}
