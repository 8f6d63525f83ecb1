//! `kube-anchor pre-stop` against the real control plane. The kubemark kubelet does not run
//! exec hooks, so each test does what the kubelet would: it starts the hook (as a process, with
//! the downward-API environment of the anchor pod) while the pod is terminating. A finalizer in
//! the pod template keeps terminating pods visible in the API for as long as a real preStop
//! hook would run.

mod support;

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PropagationPolicy};
use support::cluster::{self, ControlPlane, NodeHandle, eventually};
use support::daemon::{Daemon, anchor_config, wait_until};
use support::fixture::BIN;

const WAIT: Duration = Duration::from_secs(90);
const HOLD: &str = "kube-anchor.io/test-hold";

struct Scenario {
    cp: &'static ControlPlane,
    admin: kube::Client,
    ns: String,
    node: NodeHandle,
    label: String,
    work: tempfile::TempDir,
    kubeconfig: PathBuf,
}

impl Scenario {
    async fn new(name: &str) -> Self {
        let cp = cluster::shared().await;
        cp.start_controllers();
        let label = format!("kube-anchor.io/{name}");
        let node = cp.add_node(&format!("{name}-node"), &[(&label, "enabled")]).await;
        let ns = cp.namespace(name).await;
        let kubeconfig = cp.anchor_service_account().await;
        let work = tempfile::tempdir().unwrap();
        let admin = cp.admin().await;
        let s = Self {
            cp,
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

    fn write_config(&self) {
        let dir = self.work.path();
        fs::write(
            dir.join("anchor.yaml"),
            anchor_config(
                "kube-scheduler",
                &[("scheduler.conf", "/etc/kubernetes/scheduler.conf", "0600")],
                "/etc/kubernetes/manifests/kube-scheduler.yaml",
            ),
        )
        .unwrap();
        fs::write(dir.join("scheduler.conf"), "kubeconfig").unwrap();
        let pod = format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: kube-scheduler, namespace: {}}}\nspec:\n  hostNetwork: true\n  containers: [{{name: s, image: 'registry.k8s.io/kube-scheduler:v1.36.3'}}]\n",
            self.ns
        );
        fs::write(dir.join("pod.yaml"), pod).unwrap();
    }

    fn host(&self, path: &str) -> PathBuf {
        self.node.host_root().join(path.trim_start_matches('/'))
    }

    fn files_present(&self) -> (bool, bool) {
        (
            self.host("/etc/kubernetes/manifests/kube-scheduler.yaml").exists(),
            self.host("/etc/kubernetes/scheduler.conf").exists(),
        )
    }

    /// The anchor DaemonSet (a stand-in image: the kubelet's runtime is a fake).
    async fn create_daemonset(&self) -> String {
        let ds: DaemonSet = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "kube-scheduler-anchor"},
            "spec": {
                "selector": {"matchLabels": {"app": "anchor"}},
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}},
                "template": {
                    "metadata": {"labels": {"app": "anchor"}, "finalizers": [HOLD]},
                    "spec": {
                        "nodeSelector": {&self.label: "enabled"},
                        "automountServiceAccountToken": false,
                        "tolerations": [{"operator": "Exists"}],
                        "containers": [{"name": "anchor", "image": "registry.example/kube-anchor:test"}]
                    }
                }
            }
        }))
        .unwrap();
        self.daemonsets().create(&Default::default(), &ds).await.unwrap();
        self.running_pod(None).await
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
        let out = Command::new(BIN)
            .arg("apply")
            .arg("--config")
            .arg(self.config())
            .arg("--host-root")
            .arg(self.node.host_root())
            .env("NODE_NAME", &self.node.name)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        self.wait_mirror(true).await;
    }

    async fn wait_mirror(&self, present: bool) {
        let pods: Api<Pod> = Api::namespaced(self.admin.clone(), &self.ns);
        let name = format!("kube-scheduler-{}", self.node.name);
        eventually(WAIT, "the mirror pod", || {
            let pods = pods.clone();
            let name = name.clone();
            async move { (pods.get_opt(&name).await.ok()?.is_some() == present).then_some(()) }
        })
        .await;
    }

    /// Runs the hook for `pod` as the kubelet would, with the chart's RBAC.
    fn pre_stop(&self, pod: &str, kubeconfig: &std::path::Path, extra: &[&str]) -> (Output, serde_json::Value) {
        let out = Command::new(BIN)
            .args(["pre-stop", "--output", "json", "--timeout", "20s", "--config"])
            .arg(self.config())
            .arg("--host-root")
            .arg(self.node.host_root())
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(extra)
            .env("POD_NAME", pod)
            .env("POD_NAMESPACE", &self.ns)
            .env("NODE_NAME", &self.node.name)
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "{e}\nstdout: {}\nstderr: {}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        (out, json)
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

fn removed(json: &serde_json::Value) -> Vec<String> {
    json["removed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_owned())
        .collect()
}

async fn delete_daemonset_and_check_removal(name: &str, propagation: PropagationPolicy) {
    let s = Scenario::new(name).await;
    let pod = s.create_daemonset().await;
    s.anchor_the_component().await;
    let dp = DeleteParams {
        propagation_policy: Some(propagation),
        ..Default::default()
    };
    s.daemonsets().delete("kube-scheduler-anchor", &dp).await.unwrap();
    let (out, json) = s.pre_stop(&pod, &s.kubeconfig, &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(json["decision"], "remove", "{json}");
    assert!(
        json["reason"]
            .as_str()
            .unwrap()
            .contains("DaemonSet kube-scheduler-anchor is"),
        "{json}"
    );
    assert_eq!(
        removed(&json),
        [
            "/etc/kubernetes/manifests/kube-scheduler.yaml",
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
    delete_daemonset_and_check_removal("bg-delete", PropagationPolicy::Background).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn daemonset_deleted_in_the_foreground_removes_the_files_in_order() {
    delete_daemonset_and_check_removal("fg-delete", PropagationPolicy::Foreground).await;
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
    let (out, json) = s.pre_stop(&pod, &s.kubeconfig, &[]);
    assert!(out.status.success());
    assert_eq!(json["decision"], "remove", "{json}");
    assert!(
        json["reason"].as_str().unwrap().contains("no longer selected"),
        "{json}"
    );
    assert_eq!(s.files_present(), (false, false));
    s.release_pods().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn rolling_update_keeps_the_files_and_the_new_pod_adopts_them_without_a_restart() {
    let s = Scenario::new("rollout").await;
    let old_pod = s.create_daemonset().await;
    s.anchor_the_component().await;
    let mirror_name = format!("kube-scheduler-{}", s.node.name);
    let pods: Api<Pod> = Api::namespaced(s.admin.clone(), &s.ns);
    let mirror_uid = pods.get(&mirror_name).await.unwrap().metadata.uid;
    let manifest = s.host("/etc/kubernetes/manifests/kube-scheduler.yaml");
    let inode = std::os::unix::fs::MetadataExt::ino(&fs::metadata(&manifest).unwrap());

    // A template change rolls the DaemonSet: the old pod is deleted, a new one created.
    let patch = serde_json::json!({"spec": {"template": {"metadata": {"annotations": {"rollout": "2"}}}}});
    s.daemonsets()
        .patch("kube-scheduler-anchor", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let (out, json) = s.pre_stop(&old_pod, &s.kubeconfig, &[]);
    assert!(out.status.success());
    assert_eq!(json["decision"], "keep", "{json}");
    assert_eq!(s.files_present(), (true, true));
    s.release_pods().await;

    // The new pod's anchor finds everything in place: no write, no static pod restart.
    let new_pod = s.running_pod(Some(&old_pod)).await;
    let args: Vec<String> = [
        "--kubeconfig",
        s.kubeconfig.to_str().unwrap(),
        "--pod-name",
        &new_pod,
        "--pod-namespace",
        &s.ns,
    ]
    .iter()
    .map(|x| x.to_string())
    .collect();
    let d = Daemon::start(
        &s.config(),
        &s.node.host_root(),
        &s.node.name,
        &args,
        &s.work.path().join("daemon.log"),
    );
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
        .delete("kube-scheduler-anchor", &DeleteParams::default())
        .await
        .unwrap();
    let (out, json) = s.pre_stop(&pod, &unbound, &[]);
    assert!(out.status.success());
    assert_eq!(json["decision"], "keep", "{json}");
    assert!(json["reason"].as_str().unwrap().contains("not evidence"), "{json}");
    assert_eq!(s.files_present(), (true, true));
    s.release_pods().await;
}
