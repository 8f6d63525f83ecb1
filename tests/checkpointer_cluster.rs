//! `kube-anchor checkpointer` against the real control plane and a kubemark node: a DaemonSet
//! parent is checkpointed (files, modes), the checkpoint is activated when its pod is gone
//! locally, the old generation is retired only after the replacement has run Ready for the
//! stable window, and everything goes only once the owner is confirmed gone.

mod support;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use support::cluster::{self, eventually};
use support::fixture::BIN;

const WAIT: Duration = Duration::from_secs(90);

struct Checkpointer(Child, PathBuf);

impl Drop for Checkpointer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Checkpointer {
    fn log(&self) -> String {
        fs::read_to_string(&self.1).unwrap_or_default()
    }
}

fn ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_daemonset_parent_is_checkpointed_activated_and_retired_only_after_its_replacement_runs() {
    let cp = cluster::shared().await;
    cp.start_controllers();
    let node = cp.add_node("ckpt-node", &[]).await;
    let ns = cp.namespace("ckpt").await;
    let admin = cp.admin().await;
    let secret: Secret = serde_json::from_value(
        serde_json::json!({"metadata": {"name": "app-secret"}, "stringData": {"token": "s3cret"}}),
    )
    .unwrap();
    Api::<Secret>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let cm: ConfigMap =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "app-config"}, "data": {"app.conf": "x=1"}}))
            .unwrap();
    Api::<ConfigMap>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    let ds: DaemonSet = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "app"},
        "spec": {
            "selector": {"matchLabels": {"app": "ckpt"}},
            "template": {
                "metadata": {"labels": {"app": "ckpt"}, "annotations": {"checkpointer.alpha.coreos.com/checkpoint": "true"}},
                "spec": {
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [{"name": "app", "image": "registry.example/app:1",
                        "volumeMounts": [{"name": "secret", "mountPath": "/s"}, {"name": "config", "mountPath": "/c"}]}],
                    "volumes": [
                        {"name": "secret", "secret": {"secretName": "app-secret", "defaultMode": 0o644}},
                        {"name": "config", "configMap": {"name": "app-config"}}
                    ]
                }
            }
        }
    }))
    .unwrap();
    let daemonsets: Api<DaemonSet> = Api::namespaced(admin.clone(), &ns);
    daemonsets.create(&PostParams::default(), &ds).await.unwrap();
    // A parent that cannot run as a static pod (its env comes from a Secret): reported, not written.
    let refused: DaemonSet = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "refused"},
        "spec": {
            "selector": {"matchLabels": {"app": "refused"}},
            "template": {
                "metadata": {"labels": {"app": "refused"}, "annotations": {"checkpointer.alpha.coreos.com/checkpoint": "true"}},
                "spec": {
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [{"name": "app", "image": "registry.example/app:1",
                        "env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "app-secret", "key": "token"}}}]}]
                }
            }
        }
    }))
    .unwrap();
    daemonsets.create(&PostParams::default(), &refused).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    let running = |not: Option<String>| {
        let pods = pods.clone();
        let node = node.name.clone();
        move || {
            let (pods, node, not) = (pods.clone(), node.clone(), not.clone());
            async move {
                let list = pods.list(&ListParams::default().labels("app=ckpt")).await.ok()?;
                list.items.into_iter().find(|p| {
                    p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node.as_str())
                        && ready(p)
                        && p.metadata.deletion_timestamp.is_none()
                        && p.metadata.name != not
                })
            }
        }
    };
    let p1 = eventually(WAIT, "the parent Running and Ready", running(None))
        .await
        .metadata
        .name
        .unwrap();

    let work = tempfile::tempdir().unwrap();
    let log = work.path().join("checkpointer.log");
    let child = Command::new(BIN)
        .args(["checkpointer", "--host-root"])
        .arg(node.host_root())
        .args(["--node-name", &node.name, "--kubeconfig"])
        .arg(&cp.admin_kubeconfig)
        .args(["--kubelet-url", &format!("http://127.0.0.1:{}", node.kubelet_port)])
        .args([
            "--ready-window",
            "2s",
            "--stable-window",
            "6s",
            "--handoff-timeout",
            "20s",
            "--retire-grace",
            "4s",
            "--interval",
            "500ms",
        ])
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let c = Checkpointer(child, log);
    let host = |p: &str| node.host_root().join(p.trim_start_matches('/'));
    let inactive = |pod: &str| host(&format!("/etc/kubernetes/inactive-manifests/{ns}-{pod}.json"));
    let active = |pod: &str| host(&format!("/etc/kubernetes/manifests/{ns}-{pod}.json"));
    let secret_file = |pod: &str| {
        host(&format!(
            "/etc/kubernetes/checkpoint-secrets/{ns}/{pod}/app-secret/token"
        ))
    };
    let config_file = |pod: &str| {
        host(&format!(
            "/etc/kubernetes/checkpoint-configmaps/{ns}/{pod}/app-config/app.conf"
        ))
    };
    let wait_file = |path: PathBuf, present: bool, what: &str| {
        let deadline = Instant::now() + WAIT;
        while path.exists() != present {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; checkpointer log:\n{}",
                c.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };

    // Checkpointed, privately, and not active while the parent runs.
    wait_file(inactive(&p1), true, "the checkpoint of the parent");
    assert_eq!(fs::read_to_string(secret_file(&p1)).unwrap(), "s3cret");
    assert_eq!(fs::read_to_string(config_file(&p1)).unwrap(), "x=1");
    assert_eq!(
        fs::metadata(secret_file(&p1)).unwrap().mode() & 0o777,
        0o600,
        "0644 volume mode tightened to 0600"
    );
    assert_eq!(
        fs::metadata(secret_file(&p1).parent().unwrap()).unwrap().mode() & 0o777,
        0o700
    );
    let checkpoint: Pod = serde_json::from_slice(&fs::read(inactive(&p1)).unwrap()).unwrap();
    let volumes: Vec<String> = checkpoint
        .spec
        .unwrap()
        .volumes
        .unwrap()
        .iter()
        .map(|v| v.name.clone())
        .collect();
    assert_eq!(
        volumes,
        ["secret", "config"],
        "the service-account token volume is gone"
    );
    assert!(!active(&p1).exists());
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(admin.clone(), &ns);
    let event = eventually(WAIT, "a NotCheckpointable Event", || {
        let events = events.clone();
        async move {
            events
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|e| e.reason.as_deref() == Some("NotCheckpointable"))
        }
    })
    .await;
    assert!(event.note.unwrap_or_default().contains("secretKeyRef"));
    assert!(event.regarding.unwrap().name.unwrap().starts_with("refused-"));
    let inactive_dir = host("/etc/kubernetes/inactive-manifests");
    assert!(
        fs::read_dir(&inactive_dir)
            .unwrap()
            .all(|e| !e.unwrap().file_name().to_string_lossy().contains("-refused-"))
    );

    // The parent gone locally: the checkpoint is activated until the replacement is Ready.
    pods.delete(
        &p1,
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    wait_file(active(&p1), true, "the checkpoint to be activated");
    let p2 = eventually(WAIT, "the replacement Running and Ready", running(Some(p1.clone())))
        .await
        .metadata
        .name
        .unwrap();
    wait_file(
        active(&p1),
        false,
        "the checkpoint to step aside for the Ready replacement",
    );
    wait_file(inactive(&p2), true, "the replacement's own checkpoint");
    // The old generation stays until the replacement has run Ready for the stable window.
    wait_file(inactive(&p1), false, "the old generation to retire");
    // Measured from when the API shows the replacement Ready (the kubelet may see it Ready a
    // little earlier; second granularity): the stable window is 6 s.
    let p2_pod = pods.get(&p2).await.unwrap();
    let ready_at = p2_pod
        .status
        .unwrap()
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .unwrap()
        .last_transition_time
        .unwrap();
    let ready_for = std::time::SystemTime::now()
        .duration_since(ready_at.0.into())
        .unwrap_or_default();
    assert!(
        ready_for >= Duration::from_secs(4),
        "retired {ready_for:?} after the replacement became Ready"
    );
    assert!(
        !secret_file(&p1).exists() && !config_file(&p1).exists(),
        "its secrets and configmaps go with it"
    );
    assert!(secret_file(&p2).exists());

    // The owner deleted: everything goes, but only after two confirmations `retire-grace` apart.
    daemonsets.delete("app", &DeleteParams::default()).await.unwrap();
    let deleted_at = Instant::now();
    wait_file(inactive(&p2), false, "retirement of an owner that is gone");
    assert!(
        deleted_at.elapsed() >= Duration::from_secs(4),
        "retired before the grace: {:?}",
        deleted_at.elapsed()
    );
    assert!(!secret_file(&p2).exists());
    assert!(!active(&p2).exists());
}
