//! `kube-anchor pre-stop` against the real control plane. The kubemark kubelet does not run
//! exec hooks, so each test does what the kubelet would: it starts the hook (as a process, with
//! the downward-API environment of the anchor pod) while the pod is terminating. A finalizer in
//! the pod template keeps terminating pods visible in the API for as long as a real preStop
//! hook would run. Anchor DaemonSets carry the charts' labels (`app.kubernetes.io/name`,
//! `app.kubernetes.io/component`): pre-stop finds the other anchors of a component by them.

mod support;

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PropagationPolicy};
use support::control_plane::{self, ControlPlane};
use support::daemon::{Daemon, anchor_config, wait_until};
use support::fixture::BIN;
use support::helm::helm_ok;
use support::nodes::NodeHandle;
use support::poll::eventually;

const WAIT: Duration = Duration::from_secs(90);
const HOLD: &str = "kube-anchor.io/test-hold";
/// A static pod component outside every guard's list (the kube-up clusters' addon manager ran
/// as one).
const PLAIN_COMPONENT: &str = "kube-addon-manager";

struct Scenario {
    cp: &'static ControlPlane,
    component: String,
    admin: kube::Client,
    ns: String,
    node: NodeHandle,
    label: String,
    work: tempfile::TempDir,
    kubeconfig: PathBuf,
}

impl Scenario {
    /// A scenario of a component no guard covers under `--quorum-guard auto` (the
    /// decommission rules alone; the guards have tests of their own).
    async fn new(name: &str) -> Self {
        Self::with_component(name, PLAIN_COMPONENT).await
    }

    /// A scenario whose anchor keeps `component` (its static pod is named after it).
    async fn with_component(name: &str, component: &str) -> Self {
        let cp = control_plane::shared().await;
        cp.start_controllers();
        let label = format!("kube-anchor.io/{name}");
        let node = cp.add_node(&format!("{name}-node"), &[(&label, "enabled")]).await;
        let ns = cp.namespace(name).await;
        // Bound to a pod on the node, as a projected token is: the rollout Lease takes no other.
        let kubeconfig = cp.anchor_kubeconfig_on(&node.name).await;
        let work = tempfile::tempdir().unwrap();
        let admin = cp.admin().await;
        let s = Self {
            cp,
            component: component.into(),
            admin,
            ns,
            node,
            label,
            work,
            kubeconfig,
        };
        s.write_config();
        s
    }

    fn config(&self) -> PathBuf {
        self.work.path().join("anchor.yaml")
    }

    /// `kube-anchor run` as the anchor container of `pod` runs it.
    fn start_anchor(&self, pod: &str) -> Daemon {
        let args: Vec<String> = [
            "--kubeconfig",
            self.kubeconfig.to_str().unwrap(),
            "--pod-name",
            pod,
            "--pod-namespace",
            &self.ns,
        ]
        .iter()
        .map(|x| x.to_string())
        .collect();
        Daemon::start(
            &self.config(),
            &self.node.host_root(),
            &self.node.name,
            &args,
            &self.work.path().join("daemon.log"),
        )
    }

    fn write_config(&self) {
        let dir = self.work.path();
        fs::write(
            dir.join("anchor.yaml"),
            anchor_config(
                &self.component,
                &[("scheduler.conf", "/etc/kubernetes/scheduler.conf", "0600")],
                &format!("/etc/kubernetes/manifests/{}.yaml", self.component),
            ),
        )
        .unwrap();
        fs::write(dir.join("scheduler.conf"), "kubeconfig").unwrap();
        let pod = format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {}, namespace: {}}}\nspec:\n  hostNetwork: true\n  containers: [{{name: s, image: 'registry.k8s.io/kube-scheduler:v1.36.3'}}]\n",
            self.component, self.ns
        );
        fs::write(dir.join("pod.yaml"), pod).unwrap();
    }

    fn host(&self, path: &str) -> PathBuf {
        self.node.host_root().join(path.trim_start_matches('/'))
    }

    fn files_present(&self) -> (bool, bool) {
        self.files_present_on(&self.node)
    }

    fn files_present_on(&self, node: &NodeHandle) -> (bool, bool) {
        let host = |path: &str| node.host_root().join(path.trim_start_matches('/'));
        (
            host(&format!("/etc/kubernetes/manifests/{}.yaml", self.component)).exists(),
            host("/etc/kubernetes/scheduler.conf").exists(),
        )
    }

    /// The anchor DaemonSet (a stand-in image: the kubelet's runtime is a fake).
    async fn create_daemonset(&self) -> String {
        self.create_anchor_daemonset("addon-manager-anchor", serde_json::json!({&self.label: "enabled"}), &[])
            .await;
        self.running_pod(None).await
    }

    /// An anchor DaemonSet `name` of the scenario's component, as the charts label it, its pods
    /// held by the [`HOLD`] finalizer; `finalizers` on the DaemonSet itself.
    async fn create_anchor_daemonset(&self, name: &str, node_selector: serde_json::Value, finalizers: &[&str]) {
        self.create_anchor_daemonset_with(name, node_selector, finalizers, serde_json::json!({}))
            .await;
    }

    /// [`Scenario::create_anchor_daemonset`] with `spec` merged into the pod template's spec.
    async fn create_anchor_daemonset_with(
        &self,
        name: &str,
        node_selector: serde_json::Value,
        finalizers: &[&str],
        spec: serde_json::Value,
    ) {
        let mut pod_spec = serde_json::json!({
            "nodeSelector": node_selector,
            "automountServiceAccountToken": false,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "anchor", "image": "registry.example/kube-anchor:test"}]
        });
        if let (Some(pod_spec), Some(extra)) = (pod_spec.as_object_mut(), spec.as_object()) {
            pod_spec.extend(extra.clone());
        }
        let labels = serde_json::json!({
            "app": "anchor",
            "app.kubernetes.io/name": "kube-anchor",
            "app.kubernetes.io/component": self.component,
            "kube-anchor.io/daemonset": name,
        });
        let ds: DaemonSet = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": labels, "finalizers": finalizers},
            "spec": {
                "selector": {"matchLabels": {"kube-anchor.io/daemonset": name}},
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}},
                "template": {
                    "metadata": {"labels": labels, "finalizers": [HOLD]},
                    "spec": pod_spec
                }
            }
        }))
        .unwrap();
        self.daemonsets().create(&Default::default(), &ds).await.unwrap();
    }

    /// The name of the pod of DaemonSet `ds` on `node` once it runs.
    async fn pod_of(&self, ds: &str, node: &str) -> String {
        let pods: Api<Pod> = Api::namespaced(self.admin.clone(), &self.ns);
        let selector = format!("kube-anchor.io/daemonset={ds}");
        eventually(WAIT, "the DaemonSet's pod Running on the node", || {
            let pods = pods.clone();
            let selector = selector.clone();
            async move {
                let list = pods.list(&ListParams::default().labels(&selector)).await.ok()?;
                list.items.into_iter().find_map(|p| {
                    let running = p.status.as_ref()?.phase.as_deref() == Some("Running");
                    let on_node = p.spec.as_ref()?.node_name.as_deref() == Some(node);
                    (running && on_node && p.metadata.deletion_timestamp.is_none()).then_some(p.metadata.name?)
                })
            }
        })
        .await
    }

    /// Waits until `pod` is terminating: the kubelet runs the preStop hook only then (or on a
    /// container restart, in a pod that stays).
    async fn wait_terminating(&self, pod: &str) {
        let pods: Api<Pod> = Api::namespaced(self.admin.clone(), &self.ns);
        eventually(WAIT, "the anchor pod terminating", || {
            let pods = pods.clone();
            async move {
                let p = pods.get_opt(pod).await.ok()??;
                p.metadata.deletion_timestamp.map(|_| ())
            }
        })
        .await;
    }

    fn daemonsets(&self) -> Api<DaemonSet> {
        Api::namespaced(self.admin.clone(), &self.ns)
    }

    /// The name of a Running anchor pod on the node other than `not`.
    async fn running_pod(&self, not: Option<&str>) -> String {
        let pods: Api<Pod> = Api::namespaced(self.admin.clone(), &self.ns);
        let node = self.node.name.clone();
        let not = not.map(str::to_owned);
        eventually(WAIT, "an anchor pod Running on the node", || {
            let pods = pods.clone();
            let node = node.clone();
            let not = not.clone();
            async move {
                let list = pods.list(&ListParams::default().labels("app=anchor")).await.ok()?;
                list.items.into_iter().find_map(|p| {
                    let name = p.metadata.name.clone()?;
                    let running = p.status.as_ref()?.phase.as_deref() == Some("Running");
                    let on_node = p.spec.as_ref()?.node_name.as_deref() == Some(node.as_str());
                    (running && on_node && p.metadata.deletion_timestamp.is_none() && not.as_deref() != Some(&name))
                        .then_some(name)
                })
            }
        })
        .await
    }

    /// What the anchor daemon would have done: the files on the node and the mirror pod up.
    async fn anchor_the_component(&self) {
        self.anchor_on(&self.node).await;
    }

    async fn anchor_on(&self, node: &NodeHandle) {
        let out = Command::new(BIN)
            .arg("apply")
            .arg("--config")
            .arg(self.config())
            .arg("--host-root")
            .arg(node.host_root())
            .env("NODE_NAME", &node.name)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        self.wait_mirror_on(&node.name, true).await;
    }

    async fn wait_mirror(&self, present: bool) {
        self.wait_mirror_on(&self.node.name, present).await;
    }

    async fn wait_mirror_on(&self, node: &str, present: bool) {
        let pods: Api<Pod> = Api::namespaced(self.admin.clone(), &self.ns);
        let name = format!("{}-{node}", self.component);
        eventually(WAIT, "the mirror pod", || {
            let pods = pods.clone();
            let name = name.clone();
            async move { (pods.get_opt(&name).await.ok()?.is_some() == present).then_some(()) }
        })
        .await;
    }

    /// Runs the hook for `pod` as the kubelet would, with the chart's RBAC.
    fn pre_stop(&self, pod: &str, kubeconfig: &std::path::Path, extra: &[&str]) -> (Output, serde_json::Value) {
        self.pre_stop_on(&self.node, pod, kubeconfig, extra)
    }

    fn pre_stop_command(&self, node: &NodeHandle, pod: &str, kubeconfig: &std::path::Path, extra: &[&str]) -> Command {
        self.pre_stop_command_of(&self.config(), node, pod, kubeconfig, extra)
    }

    /// The hook of the anchor whose config is `config`.
    fn pre_stop_command_of(
        &self,
        config: &std::path::Path,
        node: &NodeHandle,
        pod: &str,
        kubeconfig: &std::path::Path,
        extra: &[&str],
    ) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.args(["pre-stop", "--output", "json", "--config"])
            .arg(config)
            .arg("--host-root")
            .arg(node.host_root())
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(extra)
            .args(if extra.contains(&"--timeout") {
                &[][..]
            } else {
                &["--timeout", "20s"][..]
            })
            .env("POD_NAME", pod)
            .env("POD_NAMESPACE", &self.ns)
            .env("NODE_NAME", &node.name)
            .env("NO_COLOR", "1");
        cmd
    }

    fn pre_stop_on(
        &self,
        node: &NodeHandle,
        pod: &str,
        kubeconfig: &std::path::Path,
        extra: &[&str],
    ) -> (Output, serde_json::Value) {
        parse_output(self.pre_stop_command(node, pod, kubeconfig, extra).output().unwrap())
    }

    /// An anchor DaemonSet of `component` whose `--depends-on` names `depends_on` (the charts
    /// set it from `anchor.dependsOn`), as kube-apiserver's does for etcd, selecting the nodes
    /// labelled `label`; the name of its pod on `node`. Its pods are held by the [`HOLD`]
    /// finalizer too, as a running preStop hook holds a real one.
    async fn create_dependent_daemonset(&self, component: &str, label: &str, depends_on: &str, node: &str) -> String {
        let name = format!("{component}-anchor");
        let labels = serde_json::json!({
            "app.kubernetes.io/name": "kube-anchor",
            "app.kubernetes.io/component": component,
            "kube-anchor.io/daemonset": name,
        });
        let ds: DaemonSet = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "selector": {"matchLabels": {"kube-anchor.io/daemonset": name}},
                "template": {
                    "metadata": {"labels": labels, "finalizers": [HOLD]},
                    "spec": {
                        "nodeSelector": {label: "enabled"},
                        "automountServiceAccountToken": false,
                        "tolerations": [{"operator": "Exists"}],
                        "containers": [{"name": "anchor", "image": "registry.example/kube-anchor:test",
                            "env": [{"name": "KUBE_ANCHOR_DEPENDS_ON", "value": depends_on}]}]
                    }
                }
            }
        }))
        .unwrap();
        self.daemonsets().create(&Default::default(), &ds).await.unwrap();
        self.pod_of(&name, node).await
    }

    async fn release_pods(&self) {
        let pods: Api<Pod> = Api::namespaced(self.admin.clone(), &self.ns);
        for p in pods.list(&ListParams::default()).await.unwrap().items {
            let patch = serde_json::json!({"metadata": {"finalizers": null}});
            let _ = pods
                .patch(
                    p.metadata.name.as_deref().unwrap(),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await;
        }
    }
}

/// Whether pod `name`'s Ready condition is True; `None` when it cannot be read.
async fn pod_ready(pods: Api<Pod>, name: String) -> Option<bool> {
    let conditions = pods.get(&name).await.ok()?.status?.conditions?;
    Some(conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn parse_output(out: Output) -> (Output, serde_json::Value) {
    let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}\nstdout: {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out, json)
}

fn removed(json: &serde_json::Value) -> Vec<String> {
    json["removed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_owned())
        .collect()
}

/// `with_before_remove`: a failing `--before-remove` is tried first (nothing goes), then one
/// that succeeds (it runs before the removal).
async fn delete_daemonset_and_check_removal(name: &str, propagation: PropagationPolicy, with_before_remove: bool) {
    let s = Scenario::new(name).await;
    let pod = s.create_daemonset().await;
    s.anchor_the_component().await;
    let dp = DeleteParams {
        propagation_policy: Some(propagation),
        ..Default::default()
    };
    s.daemonsets().delete("addon-manager-anchor", &dp).await.unwrap();
    s.wait_terminating(&pod).await;
    let mut extra = vec![];
    let ran = s.work.path().join("before-remove-ran");
    let touch = format!("touch {}", ran.display());
    if with_before_remove {
        // A failing --before-remove stops the hook before anything goes, loudly.
        let (out, json) = s.pre_stop(&pod, &s.kubeconfig, &["--before-remove", "exit 3"]);
        assert!(!out.status.success(), "{json}");
        assert_eq!(json["decision"], "failed", "{json}");
        let reason = json["reason"].as_str().unwrap();
        assert!(
            reason.contains("--before-remove failed") && reason.contains("every file is kept"),
            "{json}"
        );
        assert_eq!(s.files_present(), (true, true));
        extra = vec!["--before-remove", &touch];
    }
    let (out, json) = s.pre_stop(&pod, &s.kubeconfig, &extra);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(json["decision"], "remove", "{json}");
    assert_eq!(ran.exists(), with_before_remove);
    assert!(
        json["reason"]
            .as_str()
            .unwrap()
            .contains("DaemonSet addon-manager-anchor is"),
        "{json}"
    );
    assert_eq!(
        removed(&json),
        [
            "/etc/kubernetes/manifests/kube-addon-manager.yaml",
            "/etc/kubernetes/scheduler.conf"
        ],
        "manifest first"
    );
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(
        log.contains("the static pod is gone"),
        "credentials went only after the mirror pod did:\n{log}"
    );
    assert_eq!(s.files_present(), (false, false));
    s.wait_mirror(false).await;
    s.release_pods().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn daemonset_deleted_in_the_background_removes_the_files_in_order() {
    delete_daemonset_and_check_removal("bg-delete", PropagationPolicy::Background, false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn daemonset_deleted_in_the_foreground_removes_the_files_in_order() {
    delete_daemonset_and_check_removal("fg-delete", PropagationPolicy::Foreground, true).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn node_no_longer_selected_removes_the_files() {
    let s = Scenario::new("relabel").await;
    let pod = s.create_daemonset().await;
    s.anchor_the_component().await;
    let nodes: Api<Node> = Api::all(s.admin.clone());
    let patch = serde_json::json!({"metadata": {"labels": {&s.label: null}}});
    nodes
        .patch(&s.node.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    s.wait_terminating(&pod).await;
    // The node was mid-rollout: it holds the rollout turn for this component and for another
    // one, which no other node would ever take over on a timer; and an earlier anchor left it
    // holding the component's own Lease.
    let leases: Api<Lease> = Api::namespaced(s.admin.clone(), &s.ns);
    let own_lease = format!("kube-anchor-{}", s.component);
    for (name, annotations) in [
        (
            "kube-anchor-control-plane".to_owned(),
            serde_json::json!({"kube-anchor.io/turn-components": format!("kube-apiserver,{}", s.component)}),
        ),
        (own_lease.clone(), serde_json::json!({})),
    ] {
        let held = serde_json::json!({
            "metadata": {"name": name, "annotations": annotations},
            "spec": {"holderIdentity": s.node.name, "leaseDurationSeconds": 300}
        });
        leases
            .create(&Default::default(), &serde_json::from_value(held).unwrap())
            .await
            .unwrap();
    }
    let (out, json) = s.pre_stop(&pod, &s.kubeconfig, &[]);
    assert!(out.status.success());
    assert_eq!(json["decision"], "remove", "{json}");
    assert!(
        json["reason"].as_str().unwrap().contains("no longer selected"),
        "{json}"
    );
    assert_eq!(s.files_present(), (false, false));
    let holder = |lease: Lease| lease.spec.and_then(|s| s.holder_identity);
    assert_eq!(
        holder(leases.get(&own_lease).await.unwrap()),
        None,
        "the leaving node gave its turn on the component's own Lease back"
    );
    // The turn stays the node's for the other component, and only for it.
    let shared = leases.get("kube-anchor-control-plane").await.unwrap();
    assert_eq!(
        shared
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("kube-anchor.io/turn-components"))
            .map(String::as_str),
        Some("kube-apiserver"),
        "{shared:?}"
    );
    assert_eq!(holder(shared), Some(s.node.name.clone()));
    s.release_pods().await;
}

/// The Node's pause annotation, read from the real API: a node no longer selected (a proven
/// decommission) keeps everything while its anchors are paused, and says so.
#[tokio::test(flavor = "multi_thread")]
async fn a_paused_node_keeps_the_files_on_a_proven_decommission() {
    let s = Scenario::new("paused").await;
    let pod = s.create_daemonset().await;
    s.anchor_the_component().await;
    let mut patch = unlabel(&s);
    patch["metadata"]["annotations"] = serde_json::json!({"kube-anchor.io/paused": "restoring etcd"});
    patch_node(&s, &s.node.name.clone(), patch).await;
    s.wait_terminating(&pod).await;
    let (out, json) = s.pre_stop(&pod, &s.kubeconfig, &[]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(json["decision"], "held", "{json}");
    let reason = json["reason"].as_str().unwrap();
    assert!(
        reason.contains("kube-anchor.io/paused") && reason.contains("restoring etcd"),
        "{json}"
    );
    assert_eq!(s.files_present(), (true, true));
    s.release_pods().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn rolling_update_keeps_the_files_and_the_new_pod_adopts_them_without_a_restart() {
    let s = Scenario::new("rollout").await;
    let old_pod = s.create_daemonset().await;
    s.anchor_the_component().await;
    let mirror_name = format!("{}-{}", s.component, s.node.name);
    let pods: Api<Pod> = Api::namespaced(s.admin.clone(), &s.ns);
    let mirror_uid = pods.get(&mirror_name).await.unwrap().metadata.uid;
    let manifest = s.host(&format!("/etc/kubernetes/manifests/{}.yaml", s.component));
    let inode = std::os::unix::fs::MetadataExt::ino(&fs::metadata(&manifest).unwrap());

    // A template change rolls the DaemonSet: the old pod is deleted, a new one created.
    let patch = serde_json::json!({"spec": {"template": {"metadata": {"annotations": {"rollout": "2"}}}}});
    s.daemonsets()
        .patch("addon-manager-anchor", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    s.wait_terminating(&old_pod).await;
    let (out, json) = s.pre_stop(&old_pod, &s.kubeconfig, &[]);
    assert!(out.status.success());
    assert_eq!(json["decision"], "keep", "{json}");
    assert_eq!(s.files_present(), (true, true));
    s.release_pods().await;

    // The new pod's anchor finds everything in place: no write, no static pod restart.
    let new_pod = s.running_pod(Some(&old_pod)).await;
    let d = s.start_anchor(&new_pod);
    wait_until(WAIT, "the new anchor ready", &d, || {
        d.get("/readyz").is_some_and(|(c, _)| c == 200)
    });
    assert_eq!(d.metric("kube_anchor_writes_total"), 0.0);
    assert_eq!(
        std::os::unix::fs::MetadataExt::ino(&fs::metadata(&manifest).unwrap()),
        inode
    );
    assert_eq!(
        pods.get(&mirror_name).await.unwrap().metadata.uid,
        mirror_uid,
        "the static pod was not restarted"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn pod_deleted_or_evicted_keeps_the_files() {
    let s = Scenario::new("evict").await;
    let pod = s.create_daemonset().await;
    s.anchor_the_component().await;
    let pods: Api<Pod> = Api::namespaced(s.admin.clone(), &s.ns);
    pods.delete(&pod, &DeleteParams::default()).await.unwrap();
    let (out, json) = s.pre_stop(&pod, &s.kubeconfig, &[]);
    assert!(out.status.success());
    assert_eq!(json["decision"], "keep", "{json}");
    assert!(json["reason"].as_str().unwrap().contains("still selects"), "{json}");
    assert_eq!(s.files_present(), (true, true));

    // A kubeconfig without the chart's RBAC: refused lookups are not evidence either.
    let sa: k8s_openapi::api::core::v1::ServiceAccount =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "unbound"}})).unwrap();
    Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(s.admin.clone(), &s.ns)
        .create(&Default::default(), &sa)
        .await
        .unwrap();
    let (_, unbound) = s.cp.service_account_client(&s.ns, "unbound").await;
    s.daemonsets()
        .delete("addon-manager-anchor", &DeleteParams::default())
        .await
        .unwrap();
    let (out, json) = s.pre_stop(&pod, &unbound, &[]);
    assert!(out.status.success());
    assert_eq!(json["decision"], "keep", "{json}");
    assert!(json["reason"].as_str().unwrap().contains("not evidence"), "{json}");
    assert_eq!(s.files_present(), (true, true));
    s.release_pods().await;
}

async fn delete_daemonset(s: &Scenario, name: &str) {
    s.daemonsets().delete(name, &DeleteParams::default()).await.unwrap();
}

/// A renamed release or a `perNode` toggle: Helm creates the new DaemonSet of the component,
/// then deletes the old one. The old pod's hook sees its DaemonSet gone, but the component is
/// wanted by the new anchor on this node: the files stay. The last anchor, deleted alone,
/// still removes them.
#[tokio::test(flavor = "multi_thread")]
async fn a_new_daemonset_of_the_component_keeps_the_files_when_the_old_one_is_deleted() {
    let s = Scenario::new("rename").await;
    let old_pod = s.create_daemonset().await;
    s.anchor_the_component().await;

    // perNode: one DaemonSet per node, pinned by hostname.
    let nodes: Api<Node> = Api::all(s.admin.clone());
    let hostname = nodes.get(&s.node.name).await.unwrap().metadata.labels.unwrap()["kubernetes.io/hostname"].clone();
    let new_ds = format!("sched-{}", s.node.name);
    s.create_anchor_daemonset(&new_ds, serde_json::json!({"kubernetes.io/hostname": hostname}), &[])
        .await;
    let new_pod = s.pod_of(&new_ds, &s.node.name).await;
    delete_daemonset(&s, "addon-manager-anchor").await;
    s.wait_terminating(&old_pod).await;
    let (out, json) = s.pre_stop(&old_pod, &s.kubeconfig, &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(json["decision"], "keep", "{json}");
    assert!(
        json["reason"].as_str().unwrap().contains(&new_pod) || json["reason"].as_str().unwrap().contains(&new_ds),
        "{json}"
    );
    assert_eq!(s.files_present(), (true, true));

    // The new anchor is now the last one: deleted alone, it removes the component (the old pod,
    // still terminating, wants nothing).
    delete_daemonset(&s, &new_ds).await;
    s.wait_terminating(&new_pod).await;
    let (out, json) = s.pre_stop(&new_pod, &s.kubeconfig, &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(json["decision"], "remove", "{json}");
    assert_eq!(s.files_present(), (false, false));
    s.release_pods().await;
}

/// A liveness kill restarts the anchor container and runs the preStop hook in a pod that stays.
/// Here the owning DaemonSet is being deleted (a finalizer holds it; its pods are deleted only
/// once it is gone): the hook must not decommission, and the restarted container (same pod
/// name) must keep the component. Once the pod itself is deleted, the hook removes.
#[tokio::test(flavor = "multi_thread")]
async fn a_container_restart_never_decommissions_and_the_restarted_anchor_is_not_blocked() {
    const DS_HOLD: &str = "kube-anchor.io/test-hold-daemonset";
    let s = Scenario::new("restart").await;
    s.create_anchor_daemonset(
        "addon-manager-anchor",
        serde_json::json!({&s.label: "enabled"}),
        &[DS_HOLD],
    )
    .await;
    let pod = s.running_pod(None).await;
    s.anchor_the_component().await;
    delete_daemonset(&s, "addon-manager-anchor").await;

    let (out, json) = s.pre_stop(&pod, &s.kubeconfig, &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(json["decision"], "keep", "{json}");
    assert!(json["reason"].as_str().unwrap().contains("not being deleted"), "{json}");
    assert_eq!(s.files_present(), (true, true));

    // The restarted container of the same pod runs its anchor: nothing blocks it.
    let d = s.start_anchor(&pod);
    wait_until(WAIT, "the restarted anchor ready", &d, || {
        d.get("/readyz").is_some_and(|(c, _)| c == 200)
    });
    drop(d);

    // The DaemonSet goes; garbage collection deletes the pod: now it is a decommission.
    let release = serde_json::json!({"metadata": {"finalizers": null}});
    s.daemonsets()
        .patch("addon-manager-anchor", &PatchParams::default(), &Patch::Merge(&release))
        .await
        .unwrap();
    s.wait_terminating(&pod).await;
    let (out, json) = s.pre_stop(&pod, &s.kubeconfig, &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(json["decision"], "remove", "{json}");
    assert_eq!(s.files_present(), (false, false));
    s.release_pods().await;
}

/// `kubectl replace --force` deletes the DaemonSet and creates it again: a hook that looks
/// only once, inside that window, sees a 404. The second look, after the confirm interval,
/// sees the new DaemonSet and keeps.
#[tokio::test(flavor = "multi_thread")]
async fn a_daemonset_replaced_within_the_confirm_interval_keeps_the_files() {
    let s = Scenario::new("replace").await;
    let pod = s.create_daemonset().await;
    s.anchor_the_component().await;
    delete_daemonset(&s, "addon-manager-anchor").await;
    s.wait_terminating(&pod).await;

    let mut child = s
        .pre_stop_command(&s.node, &pod, &s.kubeconfig, &["--confirm-interval", "5s"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (looked, first_look) = std::sync::mpsc::channel();
    let log = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut all = String::new();
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains("looking again") {
                let _ = looked.send(());
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    first_look
        .recv_timeout(Duration::from_secs(20))
        .expect("the hook saw the DaemonSet gone and waits to look again");
    s.create_daemonset().await;
    let out = child.wait_with_output().unwrap();
    let log = log.join().unwrap();
    let (_, json) = parse_output(out);
    assert_eq!(json["decision"], "keep", "{json}\n{log}");
    assert!(json["reason"].as_str().unwrap().contains("did not hold"), "{json}");
    assert_eq!(s.files_present(), (true, true));
    s.release_pods().await;
}

/// Three nodes of `component` (named `name`), each with a Ready anchor pod of DaemonSet
/// `<component>-anchor` and the component's files: the scenario, the two other nodes and the
/// pods on the three nodes.
async fn three_ready_copies(name: &str, component: &str) -> (Scenario, [NodeHandle; 2], [String; 3]) {
    let s = Scenario::with_component(name, component).await;
    let n2 = s.cp.add_node(&format!("{name}-node-2"), &[(&s.label, "enabled")]).await;
    let n3 = s.cp.add_node(&format!("{name}-node-3"), &[(&s.label, "enabled")]).await;
    let ds = format!("{component}-anchor");
    s.create_anchor_daemonset(&ds, serde_json::json!({&s.label: "enabled"}), &[])
        .await;
    let p1 = s.pod_of(&ds, &s.node.name).await;
    let p2 = s.pod_of(&ds, &n2.name).await;
    let p3 = s.pod_of(&ds, &n3.name).await;
    for n in [&s.node, &n2, &n3] {
        s.anchor_on(n).await;
    }
    let pods: Api<Pod> = Api::namespaced(s.admin.clone(), &s.ns);
    for p in [&p1, &p2, &p3] {
        eventually(WAIT, "the anchor pod Ready", || {
            let pods = pods.clone();
            async move {
                let pod = pods.get(p).await.ok()?;
                let conditions = pod.status?.conditions?;
                conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
                    .then_some(())
            }
        })
        .await;
    }
    (s, [n2, n3], [p1, p2, p3])
}

async fn patch_node(s: &Scenario, node: &str, patch: serde_json::Value) {
    let nodes: Api<Node> = Api::all(s.admin.clone());
    nodes
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

fn unlabel(s: &Scenario) -> serde_json::Value {
    serde_json::json!({"metadata": {"labels": {&s.label: null}}})
}

fn consent() -> serde_json::Value {
    serde_json::json!({"metadata": {"annotations": {"kube-anchor.io/decommission": "true"}}})
}

/// etcd on three nodes (the quorum guard is on for it by default). One node deselected while a
/// kube-apiserver anchor there depends on etcd and its DaemonSet still selects the node: held
/// (the lifecycle run, seed 4, operation 17: etcd taken off a node stopped that node's API
/// server, its kubelet went dark and never started the anchor that would have brought etcd
/// back). Once kube-apiserver's DaemonSet no longer selects the node either, two other Ready
/// copies remain and etcd is removed. (That a deselected dependent lets go before its pod is
/// marked for deletion, whichever hook runs first, is `decommission::tests`' to show: here the
/// DaemonSet controller deletes that pod within a second.) The DaemonSet deleted: every anchor terminates at once, no
/// copy would remain Ready, nothing is removed and a Warning Event says why — until the Node
/// carries the decommission annotation.
#[tokio::test(flavor = "multi_thread")]
async fn the_quorum_guard_holds_the_last_copies_until_the_decommission_is_explicit() {
    let (s, [n2, n3], [p1, p2, p3]) = three_ready_copies("quorum", "etcd").await;
    let apiserver_label = format!("{}-apiserver", s.label);
    patch_node(
        &s,
        &s.node.name,
        serde_json::json!({"metadata": {"labels": {&apiserver_label: "enabled"}}}),
    )
    .await;
    s.create_dependent_daemonset("kube-apiserver", &apiserver_label, "etcd", &s.node.name)
        .await;

    // One node leaves, its kube-apiserver anchor stays: etcd is held there.
    patch_node(&s, &s.node.name, unlabel(&s)).await;
    s.wait_terminating(&p1).await;
    let (out, json) = s.pre_stop_on(&s.node, &p1, &s.kubeconfig, &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(json["decision"], "held", "{json}");
    assert!(
        json["reason"]
            .as_str()
            .unwrap()
            .contains("kube-apiserver runs on this node"),
        "{json}"
    );
    assert_eq!(s.files_present_on(&s.node), (true, true));

    // kube-apiserver leaves the node too: two of three copies stay Ready, etcd goes.
    patch_node(
        &s,
        &s.node.name,
        serde_json::json!({"metadata": {"labels": {&apiserver_label: null}}}),
    )
    .await;
    let (out, json) = s.pre_stop_on(&s.node, &p1, &s.kubeconfig, &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(json["decision"], "remove", "{json}");
    assert_eq!(s.files_present_on(&s.node), (false, false));

    // The DaemonSet goes: every other anchor is terminating too.
    delete_daemonset(&s, "etcd-anchor").await;
    s.wait_terminating(&p2).await;
    s.wait_terminating(&p3).await;
    let (out, json) = s.pre_stop_on(&n2, &p2, &s.kubeconfig, &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(json["decision"], "held", "{json}");
    assert!(json["reason"].as_str().unwrap().contains("quorum"), "{json}");
    assert_eq!(s.files_present_on(&n2), (true, true));
    let event = control_plane::event(&s.admin, &s.ns, "DecommissionHeld", Some(&p2), WAIT).await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert!(event.note.unwrap_or_default().contains("quorum"));

    // The operator says so for node 2; node 3 still holds.
    patch_node(&s, &n2.name, consent()).await;
    let (_, json) = s.pre_stop_on(&n2, &p2, &s.kubeconfig, &[]);
    assert_eq!(json["decision"], "remove", "{json}");
    assert_eq!(s.files_present_on(&n2), (false, false));
    let (_, json) = s.pre_stop_on(&n3, &p3, &s.kubeconfig, &[]);
    assert_eq!(json["decision"], "held", "{json}");
    assert_eq!(s.files_present_on(&n3), (true, true));
    s.release_pods().await;
}

/// A node leaving every chart at once runs every anchor's hook in the same second (the
/// lifecycle run, seed 41, operation 4: etcd's hook removed the member and its files while the
/// kube-apiserver hook still gathered its evidence through the node's own API server, which had
/// just lost its etcd; that hook kept kube-apiserver's manifest and keys on the node for good).
/// etcd's hook now waits until kube-apiserver's hook has taken kube-apiserver off the node.
/// First the kube-apiserver hook finds no decommission it may carry out (its guard: no
/// other copy), keeps its files, and its pod goes: etcd stays under it. Then, the node leaving
/// again, the kube-apiserver hook removes kube-apiserver, and only then etcd goes. The two
/// go by names of their own (`order-etcd`, `order-apiserver`, the latter's `--depends-on`
/// naming the former): the guards count a component's anchors across the cluster, and the
/// tests beside this one run etcd and kube-apiserver anchors of their own.
#[tokio::test(flavor = "multi_thread")]
async fn a_node_leaving_every_chart_removes_etcd_only_after_kube_apiserver() {
    const ETCD: &str = "order-etcd";
    const APISERVER: &str = "order-apiserver";
    let s = Scenario::with_component("order", ETCD).await;
    s.create_anchor_daemonset("order-etcd-anchor", serde_json::json!({&s.label: "enabled"}), &[])
        .await;
    let p1 = s.pod_of("order-etcd-anchor", &s.node.name).await;
    s.anchor_the_component().await;
    // kube-apiserver on the node, written by its own anchor config into the same state dir.
    let apiserver = s.work.path().join("apiserver");
    fs::create_dir_all(&apiserver).unwrap();
    let apiserver_config = apiserver.join("anchor.yaml");
    fs::write(
        &apiserver_config,
        anchor_config(
            APISERVER,
            &[("apiserver.key", "/etc/kubernetes/pki/apiserver.key", "0600")],
            "/etc/kubernetes/manifests/kube-apiserver.yaml",
        ),
    )
    .unwrap();
    fs::write(apiserver.join("apiserver.key"), "key").unwrap();
    let pod = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: kube-apiserver, namespace: {}}}\nspec:\n  hostNetwork: true\n  containers: [{{name: a, image: 'registry.k8s.io/kube-apiserver:v1.36.3'}}]\n",
        s.ns
    );
    fs::write(apiserver.join("pod.yaml"), pod).unwrap();
    let out = Command::new(BIN)
        .args(["apply", "--config"])
        .arg(&apiserver_config)
        .arg("--host-root")
        .arg(s.node.host_root())
        .env("NODE_NAME", &s.node.name)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let apiserver_files = || {
        (
            s.host("/etc/kubernetes/manifests/kube-apiserver.yaml").exists(),
            s.host("/etc/kubernetes/pki/apiserver.key").exists(),
        )
    };
    assert_eq!(apiserver_files(), (true, true));
    let apiserver_label = format!("{}-apiserver", s.label);
    let both =
        |value: Option<&str>| serde_json::json!({"metadata": {"labels": {&s.label: value, &apiserver_label: value}}});
    patch_node(&s, &s.node.name, both(Some("enabled"))).await;
    let dependent = s
        .create_dependent_daemonset(APISERVER, &apiserver_label, ETCD, &s.node.name)
        .await;
    let pods: Api<Pod> = Api::namespaced(s.admin.clone(), &s.ns);

    // The etcd hook, started as the kubelet starts it, beside the kube-apiserver hook.
    let start_etcd_hook = |log: &str| {
        let log = s.work.path().join(log);
        let child = s
            .pre_stop_command(&s.node, &p1, &s.kubeconfig, &["--timeout", "40s"])
            .stdout(std::process::Stdio::piped())
            .stderr(fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        (child, log)
    };
    // Until the etcd hook says it waits; it must not finish first.
    let waiting = async |child: &mut std::process::Child, log: &std::path::Path| {
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            let text = fs::read_to_string(log).unwrap_or_default();
            if text.contains("removing in dependency order") {
                return;
            }
            if let Some(status) = child.try_wait().unwrap() {
                panic!("the etcd hook finished ({status}) before kube-apiserver's ran:\n{text}");
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the etcd hook did not wait:\n{text}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    let finish = |child: std::process::Child, log: &std::path::Path| {
        let out = child.wait_with_output().unwrap();
        let log = fs::read_to_string(log).unwrap();
        assert!(out.status.success(), "{log}");
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        (json, log)
    };

    // 1. The node leaves both charts; the kube-apiserver hook keeps (its guard: no other copy)
    //    and its pod goes: etcd stays under the API server that needs it.
    patch_node(&s, &s.node.name, both(None)).await;
    s.wait_terminating(&p1).await;
    s.wait_terminating(&dependent).await;
    let (mut etcd_hook, log) = start_etcd_hook("etcd-hook-1.log");
    waiting(&mut etcd_hook, &log).await;
    assert_eq!(s.files_present(), (true, true), "etcd waits");
    let (out, json) = parse_output(
        s.pre_stop_command_of(
            &apiserver_config,
            &s.node,
            &dependent,
            &s.kubeconfig,
            &["--quorum-guard", "last-copy"],
        )
        .output()
        .unwrap(),
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(json["decision"], "held", "{json}");
    let release = serde_json::json!({"metadata": {"finalizers": null}});
    pods.patch(&dependent, &PatchParams::default(), &Patch::Merge(&release))
        .await
        .unwrap();
    let (json, log) = tokio::task::spawn_blocking(move || finish(etcd_hook, &log))
        .await
        .unwrap();
    assert_eq!(json["decision"], "held", "{json}\n{log}");
    assert!(
        json["reason"]
            .as_str()
            .unwrap()
            .contains("order-apiserver depends on it and stays"),
        "{json}"
    );
    assert_eq!(s.files_present(), (true, true));
    assert_eq!(apiserver_files(), (true, true));

    // 2. The node is selected again and leaves again; this time the kube-apiserver hook
    //    removes kube-apiserver (no guard covers the name), and etcd follows it.
    patch_node(
        &s,
        &s.node.name,
        serde_json::json!({"metadata": {"labels": {&apiserver_label: "enabled"}}}),
    )
    .await;
    let dependent = s.pod_of("order-apiserver-anchor", &s.node.name).await;
    patch_node(&s, &s.node.name, both(None)).await;
    s.wait_terminating(&dependent).await;
    let (mut etcd_hook, log) = start_etcd_hook("etcd-hook-2.log");
    waiting(&mut etcd_hook, &log).await;
    assert_eq!(s.files_present(), (true, true), "etcd waits");
    let (out, json) = parse_output(
        s.pre_stop_command_of(&apiserver_config, &s.node, &dependent, &s.kubeconfig, &[])
            .output()
            .unwrap(),
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(json["decision"], "remove", "{json}");
    assert_eq!(apiserver_files(), (false, false));
    let (json, log) = tokio::task::spawn_blocking(move || finish(etcd_hook, &log))
        .await
        .unwrap();
    assert_eq!(json["decision"], "remove", "{json}\n{log}");
    assert_eq!(s.files_present(), (false, false));
    s.release_pods().await;
}

/// kube-scheduler on three nodes under the default guard (the last copy). Two nodes deselected
/// one after the other lose it (one Ready copy is enough, unlike etcd's quorum). Then the
/// anchor DaemonSet is deleted — what the lifecycle run found with seed 4: before the guard,
/// every hook removed the scheduler, and the re-created DaemonSet's pods stayed Pending with no
/// scheduler to place them. Now the last node keeps it, says so with a Warning Event, and the
/// re-created DaemonSet's pod runs beside it; the Node's annotation lets it go.
#[tokio::test(flavor = "multi_thread")]
async fn the_last_copy_of_the_scheduler_stays_when_its_daemonset_is_deleted() {
    let (s, [n2, n3], [p1, p2, p3]) = three_ready_copies("lastcopy", "kube-scheduler").await;

    for (node, pod) in [(&s.node, &p1), (&n2, &p2)] {
        patch_node(&s, &node.name, unlabel(&s)).await;
        s.wait_terminating(pod).await;
        let (out, json) = s.pre_stop_on(node, pod, &s.kubeconfig, &[]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(json["decision"], "remove", "{json}");
        assert_eq!(s.files_present_on(node), (false, false));
    }

    delete_daemonset(&s, "kube-scheduler-anchor").await;
    s.wait_terminating(&p3).await;
    let (out, json) = s.pre_stop_on(&n3, &p3, &s.kubeconfig, &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(json["decision"], "held", "{json}");
    assert!(
        json["reason"].as_str().unwrap().contains("no other Ready copy"),
        "{json}"
    );
    assert_eq!(s.files_present_on(&n3), (true, true));
    let event = control_plane::event(&s.admin, &s.ns, "DecommissionHeld", Some(&p3), WAIT).await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));

    // Re-created: its pod runs on the node that kept the scheduler, whose files are untouched.
    s.create_anchor_daemonset("kube-scheduler-anchor", serde_json::json!({&s.label: "enabled"}), &[])
        .await;
    let p3_new = s.pod_of("kube-scheduler-anchor", &n3.name).await;
    assert_eq!(s.files_present_on(&n3), (true, true));

    // A real decommission of the last copy, said so on the Node.
    patch_node(&s, &n3.name, consent()).await;
    let (_, json) = s.pre_stop_on(&n3, &p3, &s.kubeconfig, &[]);
    assert_eq!(
        json["decision"], "keep",
        "the new DaemonSet's pod wants the node: {json}"
    );
    delete_daemonset(&s, "kube-scheduler-anchor").await;
    s.wait_terminating(&p3_new).await;
    let (_, json) = s.pre_stop_on(&n3, &p3_new, &s.kubeconfig, &[]);
    assert_eq!(json["decision"], "remove", "{json}");
    assert_eq!(s.files_present_on(&n3), (false, false));
    s.release_pods().await;
}

/// The lifecycle run, seed 11: a never-healthy kube-scheduler version rolled back on one node,
/// whose anchor then held the rollout back, not Ready, while the scheduler it kept ran Ready;
/// another node was powered off; a third was relabelled out of the scheduler's selector. The
/// last-copy guard counted Ready anchors only, found none, and held the scheduler on a node no
/// DaemonSet selected any more, where no anchor would ever take it off. A copy whose static pod
/// is Ready counts now. (Here the other anchor is kept from Ready by a readiness gate nothing
/// opens, as one holding a rollout back is by its probe.)
#[tokio::test(flavor = "multi_thread")]
async fn a_copy_whose_static_pod_is_ready_under_an_anchor_that_is_not_counts_for_the_last_copy_guard() {
    let s = Scenario::with_component("heldback", "kube-scheduler").await;
    let n2 = s.cp.add_node("heldback-node-2", &[(&s.label, "enabled")]).await;
    let ds = "kube-scheduler-anchor";
    let never_ready = serde_json::json!({"readinessGates": [{"conditionType": "example.com/held-back"}]});
    s.create_anchor_daemonset_with(ds, serde_json::json!({&s.label: "enabled"}), &[], never_ready)
        .await;
    let p1 = s.pod_of(ds, &s.node.name).await;
    let p2 = s.pod_of(ds, &n2.name).await;
    for n in [&s.node, &n2] {
        s.anchor_on(n).await;
    }
    let pods: Api<Pod> = Api::namespaced(s.admin.clone(), &s.ns);
    let ready = |name: String| pod_ready(pods.clone(), name);
    let mirror = format!("{}-{}", s.component, n2.name);
    eventually(WAIT, "the scheduler's static pod Ready on node 2", || {
        let ready = ready(mirror.clone());
        async move { ready.await.filter(|r| *r).map(drop) }
    })
    .await;
    assert_eq!(ready(p2.clone()).await, Some(false), "node 2's anchor is not Ready");

    patch_node(&s, &s.node.name, unlabel(&s)).await;
    s.wait_terminating(&p1).await;
    let (out, json) = s.pre_stop_on(&s.node, &p1, &s.kubeconfig, &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(json["decision"], "remove", "{json}");
    assert_eq!(s.files_present(), (false, false));
    s.release_pods().await;
}

/// A TCP proxy in front of the API server that can be made to hold every byte from then on: the
/// API turning slow in the middle of the hook (a real server cannot be slowed on demand).
struct StallingProxy {
    port: u16,
    stalled: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl StallingProxy {
    async fn start(upstream: String) -> Self {
        use std::sync::atomic::Ordering;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let stalled = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stalled.clone();
        tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else {
                    continue;
                };
                let (client_r, client_w) = client.into_split();
                let (server_r, server_w) = server.into_split();
                for (mut from, mut to) in [(client_r, server_w), (server_r, client_w)] {
                    let flag = flag.clone();
                    tokio::spawn(async move {
                        let mut buf = vec![0u8; 16 * 1024];
                        loop {
                            let n = match from.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => n,
                            };
                            while flag.load(Ordering::SeqCst) {
                                tokio::time::sleep(Duration::from_millis(100)).await;
                            }
                            if to.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                    });
                }
            }
        });
        Self { port, stalled }
    }

    fn stall(&self) {
        self.stalled.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// A copy of `kubeconfig` that reaches the server through this proxy.
    fn kubeconfig(&self, kubeconfig: &std::path::Path, dir: &std::path::Path) -> PathBuf {
        let text = fs::read_to_string(kubeconfig).unwrap();
        let server = server_of(&text);
        let proxied = text.replace(
            &format!("https://{server}"),
            &format!("https://127.0.0.1:{}", self.port),
        );
        let path = dir.join("proxied.kubeconfig");
        fs::write(&path, proxied).unwrap();
        path
    }
}

/// host:port of the server a kubeconfig names.
fn server_of(kubeconfig: &str) -> String {
    kubeconfig
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("server:"))
        .unwrap()
        .trim()
        .trim_start_matches("https://")
        .to_owned()
}

/// The API answers the evidence, then hangs once the manifest is gone: the credentials still go
/// before the hook's deadline (each probe of the wait is bounded by what is left).
#[tokio::test(flavor = "multi_thread")]
async fn an_api_that_hangs_after_the_manifest_is_gone_still_lets_the_credentials_go() {
    let s = Scenario::new("hang").await;
    let pod = s.create_daemonset().await;
    s.anchor_the_component().await;
    delete_daemonset(&s, "addon-manager-anchor").await;
    s.wait_terminating(&pod).await;

    let proxy = StallingProxy::start(server_of(&fs::read_to_string(&s.kubeconfig).unwrap())).await;
    let kubeconfig = proxy.kubeconfig(&s.kubeconfig, s.work.path());
    let started = std::time::Instant::now();
    let child = s
        .pre_stop_command(
            &s.node,
            &pod,
            &kubeconfig,
            &["--confirm-interval", "1s", "--timeout", "16s"],
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let manifest = s.host(&format!("/etc/kubernetes/manifests/{}.yaml", s.component));
    while manifest.exists() && started.elapsed() < Duration::from_secs(16) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    proxy.stall();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{log}");
    let (_, json) = parse_output(out);
    assert_eq!(json["decision"], "remove", "{json}\n{log}");
    assert_eq!(s.files_present(), (false, false), "{log}");
    assert!(log.contains("did not stop in time"), "{log}");
    assert!(
        started.elapsed() < Duration::from_secs(16),
        "the hook ended within its timeout"
    );
    s.release_pods().await;
}

/// The real chart, as an operator uses it: `helm upgrade` toggling `perNode` (a new DaemonSet
/// per node, the shared one deleted), then the release renamed (`helm install` under the new
/// name, `helm uninstall` of the old one). At every step the old anchor's hook runs on its
/// terminating pod and must keep the component; only the last anchor's uninstall removes it,
/// once the Node consents (the scheduler's last copy is guarded).
#[tokio::test(flavor = "multi_thread")]
async fn helm_per_node_toggle_and_release_rename_keep_the_component() {
    let cp = control_plane::shared().await;
    cp.start_controllers();
    let label = "kube-anchor.io/helm-rename";
    let node = cp.add_node("helm-rename-node", &[(label, "enabled")]).await;
    let ns = cp.namespace("helm-rename").await;
    let admin = cp.admin().await;
    let work = tempfile::tempdir().unwrap();
    let kubeconfig = cp.admin_kubeconfig.display().to_string();
    let chart = support::helm::chart("kube-scheduler");
    let hostname = Api::<Node>::all(admin.clone())
        .get(&node.name)
        .await
        .unwrap()
        .metadata
        .labels
        .unwrap()["kubernetes.io/hostname"]
        .clone();
    let shared = work.path().join("shared.yaml");
    fs::write(
        &shared,
        format!(
            "nodeSelector: {{{label}: enabled, node-role.kubernetes.io/control-plane: null}}\nanchor: {{healthURL: \"\"}}\ncomponent: {{namespace: {ns}}}\ncredentials: {{scheduler.conf: \"kubeconfig v1\"}}\n"
        ),
    )
    .unwrap();
    let per_node = work.path().join("per-node.yaml");
    fs::write(&per_node, format!("perNode: {{{hostname}: {{credentials: {{}}}}}}\n")).unwrap();
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    let hold = |pod: String, on: bool| {
        let pods = pods.clone();
        async move {
            let finalizers = if on {
                serde_json::json!([HOLD])
            } else {
                serde_json::Value::Null
            };
            let patch = serde_json::json!({"metadata": {"finalizers": finalizers}});
            pods.patch(&pod, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .unwrap();
        }
    };
    let pod_of = |ds: String| {
        let pods = pods.clone();
        let node = node.name.clone();
        async move {
            eventually(WAIT, "the DaemonSet's pod Running on the node", || {
                let (pods, node) = (pods.clone(), node.clone());
                let selector = format!("kube-anchor.io/daemonset={ds}");
                async move {
                    let list = pods.list(&ListParams::default().labels(&selector)).await.ok()?;
                    list.items.into_iter().find_map(|p| {
                        let running = p.status.as_ref()?.phase.as_deref() == Some("Running");
                        let on_node = p.spec.as_ref()?.node_name.as_deref() == Some(node.as_str());
                        (running && on_node && p.metadata.deletion_timestamp.is_none()).then_some(p.metadata.name?)
                    })
                }
            })
            .await
        }
    };
    let terminating = |pod: String| {
        let pods = pods.clone();
        async move {
            eventually(WAIT, "the old anchor pod terminating", || {
                let (pods, pod) = (pods.clone(), pod.clone());
                async move { pods.get(&pod).await.ok()?.metadata.deletion_timestamp.map(|_| ()) }
            })
            .await
        }
    };
    let manifest = node.host_root().join("etc/kubernetes/manifests/kube-scheduler.yaml");
    let credential = node.host_root().join("etc/kubernetes/scheduler.conf");
    // The hook as the kubelet runs it in the pod, with the release's own ServiceAccount.
    let pre_stop = |pod: &str, release: &str, config: &std::path::Path| {
        let account = format!("{release}-anchor");
        let (ns, node) = (ns.clone(), node.clone());
        let (pod, config) = (pod.to_owned(), config.to_owned());
        async move {
            let sa = cp.service_account_client(&ns, &account).await.1;
            let out = Command::new(BIN)
                .args(["pre-stop", "--output", "json", "--config"])
                .arg(&config)
                .arg("--host-root")
                .arg(node.host_root())
                .arg("--kubeconfig")
                .arg(&sa)
                .env("POD_NAME", &pod)
                .env("POD_NAMESPACE", &ns)
                .env("NODE_NAME", &node.name)
                .env("NODE_IP", "127.0.0.1")
                .output()
                .unwrap();
            parse_output(out).1
        }
    };

    // Install; the anchor writes the component (as `apply` with the release's config).
    helm_ok(&[
        "install",
        "sched",
        &chart,
        "-n",
        &ns,
        "-f",
        shared.to_str().unwrap(),
        "--kubeconfig",
        &kubeconfig,
        "--wait=false",
    ]);
    let first = pod_of("sched-anchor".into()).await;
    hold(first.clone(), true).await;
    let config = project(&admin, &ns, "sched-anchor", &work.path().join("sched")).await;
    let out = Command::new(BIN)
        .arg("apply")
        .arg("--config")
        .arg(&config)
        .arg("--host-root")
        .arg(node.host_root())
        .env("NODE_NAME", &node.name)
        .env("NODE_IP", "127.0.0.1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(manifest.exists() && credential.exists());

    // perNode on: Helm creates sched-anchor-<node> and deletes sched-anchor.
    helm_ok(&[
        "upgrade",
        "sched",
        &chart,
        "-n",
        &ns,
        "-f",
        shared.to_str().unwrap(),
        "-f",
        per_node.to_str().unwrap(),
        "--kubeconfig",
        &kubeconfig,
        "--wait=false",
    ]);
    let second = pod_of(format!("sched-anchor-{hostname}")).await;
    hold(second.clone(), true).await;
    terminating(first.clone()).await;
    let json = pre_stop(&first, "sched", &config).await;
    assert_eq!(json["decision"], "keep", "perNode toggle: {json}");
    assert!(manifest.exists() && credential.exists());

    // The release renamed: install sched2 (shared DaemonSet), uninstall sched.
    helm_ok(&[
        "install",
        "sched2",
        &chart,
        "-n",
        &ns,
        "-f",
        shared.to_str().unwrap(),
        "--kubeconfig",
        &kubeconfig,
        "--wait=false",
    ]);
    let third = pod_of("sched2-anchor".into()).await;
    hold(third.clone(), true).await;
    helm_ok(&[
        "uninstall",
        "sched",
        "-n",
        &ns,
        "--kubeconfig",
        &kubeconfig,
        "--wait=false",
    ]);
    terminating(second.clone()).await;
    let json = pre_stop(&second, "sched", &config).await;
    assert_eq!(json["decision"], "keep", "release renamed: {json}");
    assert!(manifest.exists() && credential.exists());

    // The last anchor goes: now the component leaves the node.
    helm_ok(&[
        "uninstall",
        "sched2",
        "-n",
        &ns,
        "--kubeconfig",
        &kubeconfig,
        "--wait=false",
    ]);
    terminating(third.clone()).await;
    // The last copy of the scheduler: kept until the Node says the decommission is meant.
    let json = pre_stop(&third, "sched2", &config).await;
    assert_eq!(json["decision"], "held", "last anchor uninstalled: {json}");
    assert!(manifest.exists() && credential.exists());
    let consent = serde_json::json!({"metadata": {"annotations": {"kube-anchor.io/decommission": "true"}}});
    Api::<Node>::all(admin.clone())
        .patch(&node.name, &PatchParams::default(), &Patch::Merge(&consent))
        .await
        .unwrap();
    let json = pre_stop(&third, "sched2", &config).await;
    assert_eq!(
        json["decision"], "remove",
        "last anchor uninstalled, the Node annotated: {json}"
    );
    assert!(!manifest.exists() && !credential.exists());
    for pod in [first, second, third] {
        hold(pod, false).await;
    }
}

/// The release's ConfigMap and Secret written out as the kubelet projects them (`config/`,
/// `secrets/` side by side); returns the anchor config's path.
async fn project(client: &kube::Client, ns: &str, name: &str, dir: &std::path::Path) -> PathBuf {
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    let cm = Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .unwrap();
    let secret = Api::<Secret>::namespaced(client.clone(), ns).get(name).await.unwrap();
    fs::create_dir_all(dir.join("config")).unwrap();
    fs::create_dir_all(dir.join("secrets")).unwrap();
    for (k, v) in cm.data.unwrap_or_default() {
        fs::write(dir.join("config").join(k), v).unwrap();
    }
    for (k, v) in secret.data.unwrap_or_default() {
        fs::write(dir.join("secrets").join(k), v.0).unwrap();
    }
    dir.join("config/anchor.yaml")
}

/// The fleet simulation's `a-node-leaves-just-after-another-lost-power`, on real kubelets. Three
/// copies of kube-apiserver (the quorum guard's component by default): node 1's, and one on
/// each of two process nodes, whose static pod serves its readiness probe on the node's own
/// address as the chart's kube-apiserver does (`${NODE_IP}:<port>/readyz`). Node 2 loses power:
/// its pods still read Ready in the API (the node lifecycle controller waits out its grace), but
/// asked at its readiness URL its copy does not answer. Node 1 leaving is held, naming node 2;
/// counting the Ready node 2 last posted, the hook took kube-apiserver off node 1 with one live
/// copy left.
#[tokio::test(flavor = "multi_thread")]
async fn a_copy_on_a_node_that_just_lost_power_does_not_count_though_its_pods_still_read_ready() {
    let s = Scenario::with_component("silent", "kube-apiserver").await;
    let n2 = s.cp.add_process_node("silent-node-2", &[(&s.label, "enabled")]).await;
    let n3 = s.cp.add_process_node("silent-node-3", &[(&s.label, "enabled")]).await;
    // A stand-in for kube-apiserver: /readyz answers 200 on the node's address.
    let port = support::processes::free_port();
    let server = "import http.server, sys\n\
class H(http.server.BaseHTTPRequestHandler):\n    \
def do_GET(self):\n        self.send_response(200); self.end_headers(); self.wfile.write(b'ok')\n    \
def log_message(self, *a): pass\n\
http.server.ThreadingHTTPServer((sys.argv[1], int(sys.argv[2])), H).serve_forever()\n";
    let pod = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": s.component, "namespace": s.ns},
        "spec": {"hostNetwork": true, "containers": [{
            "name": "kube-apiserver",
            "image": "registry.k8s.io/kube-apiserver:v1.36.3",
            "command": ["python3", "-c", server, "${NODE_IP}", port.to_string()],
            "readinessProbe": {
                "httpGet": {"host": "${NODE_IP}", "path": "/readyz", "port": port, "scheme": "HTTP"},
                "periodSeconds": 1,
            },
        }]},
    });
    let work = s.work.path();
    fs::write(work.join("pod.yaml"), serde_yaml_ng::to_string(&pod).unwrap()).unwrap();
    let config = anchor_config(
        &s.component,
        &[("scheduler.conf", "/etc/kubernetes/scheduler.conf", "0600")],
        &format!("/etc/kubernetes/manifests/{}.yaml", s.component),
    )
    .replace("variables: [NODE_NAME]", "variables: [NODE_NAME, NODE_IP]");
    fs::write(s.config(), config).unwrap();
    // Anchor pods that run on a process node too (its runtime runs real processes).
    let ds = "kube-apiserver-anchor";
    let sleeper = serde_json::json!({"hostNetwork": true, "containers": [{
        "name": "anchor",
        "image": "registry.k8s.io/kube-apiserver:v1.36.3",
        "command": ["python3", "-c", "import time; time.sleep(86400)"],
    }]});
    s.create_anchor_daemonset_with(ds, serde_json::json!({&s.label: "enabled"}), &[], sleeper)
        .await;
    let p1 = s.pod_of(ds, &s.node.name).await;
    for n in [&s.node, &n2, &n3] {
        let out = Command::new(BIN)
            .args(["apply", "--config"])
            .arg(s.config())
            .arg("--host-root")
            .arg(n.host_root())
            .env("NODE_NAME", &n.name)
            .env("NODE_IP", &n.ip)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    s.pod_of(ds, &n2.name).await;
    s.pod_of(ds, &n3.name).await;
    let pods: Api<Pod> = Api::namespaced(s.admin.clone(), &s.ns);
    let ready = |name: String| pod_ready(pods.clone(), name);
    let mirror = |n: &NodeHandle| format!("{}-{}", s.component, n.name);
    for n in [&n2, &n3] {
        eventually(WAIT, "the stand-in's static pod Ready", || {
            let ready = ready(mirror(n));
            async move { ready.await.filter(|r| *r).map(drop) }
        })
        .await;
    }

    patch_node(&s, &s.node.name, unlabel(&s)).await;
    s.wait_terminating(&p1).await;
    s.cp.stop_kubelet(&n2.name);
    let (out, json) = s.pre_stop(&p1, &s.kubeconfig, &[]);
    // The precondition: node 2's copy still read Ready in the API while the hook looked.
    assert_eq!(
        ready(mirror(&n2)).await,
        Some(true),
        "node 2's mirror pod still reads Ready"
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(json["decision"], "held", "{json}");
    let reason = json["reason"].as_str().unwrap();
    assert!(
        reason.contains("only 1 other Ready copies of 3")
            && reason.contains(&format!("the copy on {} did not answer at its readiness URL", n2.name)),
        "{json}"
    );
    assert_eq!(s.files_present(), (true, true));
    s.release_pods().await;
}
