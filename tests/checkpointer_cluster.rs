//! `kube-anchor checkpointer` against the real control plane and a kubemark node: a DaemonSet
//! parent is checkpointed (files, modes), the checkpoint is activated when its pod is gone
//! locally, the old generation is retired only after the replacement has run Ready for the
//! stable window, and everything goes only once the owner is confirmed gone.

mod support;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use support::checkpointer::{CheckpointFiles, CheckpointerProcess, ready};
use support::control_plane;
use support::fixture::BIN;
use support::helm::{chart, helm, ok};
use support::kubectl::kubectl;
use support::nodes;
use support::poll::{Poll, eventually};

const WAIT: Duration = Duration::from_secs(90);

#[tokio::test(flavor = "multi_thread")]
async fn a_daemonset_parent_is_checkpointed_activated_and_retired_only_after_its_replacement_runs() {
    let cp = control_plane::shared().await;
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
                    "nodeSelector": {"kubernetes.io/hostname": node.name},
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
                    "nodeSelector": {"kubernetes.io/hostname": node.name},
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
                        && !is_mirror(p)
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
    let c = CheckpointerProcess { child, log };
    let files = CheckpointFiles::new(&node, &ns);
    let host = |p: &str| files.host(p);
    let (inactive, active) = (|pod: &str| files.inactive(pod), |pod: &str| files.active(pod));
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
        Poll::new(WAIT, what)
            .every(Duration::from_millis(50))
            .context(|| format!("checkpointer log:\n{}", c.log()))
            .until(|| path.exists() == present)
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
    // The volume's own directory (its mount root in the copy) 0755, so that a pod not running
    // as root enters it; the directories above it 0700.
    let volume_dir = secret_file(&p1).parent().unwrap().to_path_buf();
    assert_eq!(fs::metadata(&volume_dir).unwrap().mode() & 0o777, 0o755);
    assert_eq!(
        fs::metadata(volume_dir.parent().unwrap()).unwrap().mode() & 0o777,
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
    let event = control_plane::event(&admin, &ns, "NotCheckpointable", None, WAIT).await;
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
    // Retirement removes the manifests, then the secret and configmap trees.
    wait_file(secret_file(&p2), false, "its secrets retired after its manifests");
    assert!(!active(&p2).exists());
}

/// Starts the checkpointer (the DaemonSet copy) for `node` with the test's short windows.
fn start_checkpointer(
    cp: &control_plane::ControlPlane,
    node: &nodes::NodeHandle,
    work: &std::path::Path,
    extra: &[&str],
) -> CheckpointerProcess {
    let windows = [
        "--ready-window",
        "1s",
        "--handoff-timeout",
        "20s",
        "--interval",
        "300ms",
    ];
    let args: Vec<&str> = windows.iter().chain(extra).copied().collect();
    CheckpointerProcess::start(node, &cp.admin_kubeconfig, work, &args)
}

/// A pod template for `node` only: every test of this binary adds its own node to the shared
/// control plane, and a DaemonSet placed everywhere would put its pods under the other tests'
/// checkpointers.
fn annotated_template(label: &str, node: &str, extra_spec: serde_json::Value) -> serde_json::Value {
    let mut spec = serde_json::json!({
        "nodeSelector": {"kubernetes.io/hostname": node},
        "tolerations": [{"operator": "Exists"}],
        "containers": [{"name": "app", "image": "registry.example/app:1"}]
    });
    for (k, v) in extra_spec.as_object().unwrap() {
        spec[k] = v.clone();
    }
    serde_json::json!({
        "metadata": {"labels": {"app": label}, "annotations": {"checkpointer.alpha.coreos.com/checkpoint": "true"}},
        "spec": spec
    })
}

/// Creates DaemonSet `name` (pods labelled `app=<name>`, annotated for checkpointing) and
/// returns the name of its pod once that runs Ready on `node`.
async fn create_annotated_daemonset(daemonsets: &Api<DaemonSet>, pods: &Api<Pod>, name: &str, node: &str) -> String {
    let ds: DaemonSet = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": {"app": name}}, "template": annotated_template(name, node, serde_json::json!({}))}
    }))
    .unwrap();
    daemonsets.create(&PostParams::default(), &ds).await.unwrap();
    eventually(WAIT, "the DaemonSet's pod Running and Ready", || {
        ready_pod(pods, name, node, &[])
    })
    .await
    .metadata
    .name
    .unwrap()
}

/// The Ready pod with `label` on `node`, other than `not`: the owner's own, never the mirror
/// pod of a checkpoint (it carries the same labels; a checkpoint is active while the kubelet's
/// own list does not show the owner's pod yet).
async fn ready_pod(pods: &Api<Pod>, label: &str, node: &str, not: &[String]) -> Option<Pod> {
    let list = pods
        .list(&ListParams::default().labels(&format!("app={label}")))
        .await
        .ok()?;
    list.items.into_iter().find(|p| {
        p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node)
            && !is_mirror(p)
            && ready(p)
            && p.metadata.deletion_timestamp.is_none()
            && !not.iter().any(|n| Some(n) == p.metadata.name.as_ref())
    })
}

fn is_mirror(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"))
}

fn ready_at(pod: &Pod) -> std::time::SystemTime {
    pod.status
        .as_ref()
        .unwrap()
        .conditions
        .as_ref()
        .unwrap()
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap()
        .last_transition_time
        .as_ref()
        .unwrap()
        .0
        .into()
}

/// `kubectl replace --force` of a DaemonSet: deleted and created again under the same name (a
/// new UID). Its new pod is the same owner's replacement: the old checkpoint steps aside for
/// it and is retired after the stable window, not kept active beside it until a timer ends.
#[tokio::test(flavor = "multi_thread")]
async fn a_daemonset_recreated_under_the_same_name_is_the_same_owner() {
    let cp = control_plane::shared().await;
    cp.start_controllers();
    let node = cp.add_node("ckpt-replace", &[]).await;
    let ns = cp.namespace("ckptreplace").await;
    let admin = cp.admin().await;
    let daemonsets: Api<DaemonSet> = Api::namespaced(admin.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    let ds: DaemonSet = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "agent"},
        "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": annotated_template("agent", &node.name, serde_json::json!({}))}
    }))
    .unwrap();
    daemonsets.create(&PostParams::default(), &ds).await.unwrap();
    let p1 = eventually(WAIT, "the first pod", || ready_pod(&pods, "agent", &node.name, &[]))
        .await
        .metadata
        .name
        .unwrap();
    let work = tempfile::tempdir().unwrap();
    fs::write(work.path().join("boot_id"), "b1").unwrap();
    let c = start_checkpointer(
        cp,
        &node,
        work.path(),
        &["--stable-window", "6s", "--retire-grace", "60s"],
    );
    let files = CheckpointFiles::new(&node, &ns);
    let (inactive, active) = (|pod: &str| files.inactive(pod), |pod: &str| files.active(pod));
    c.wait_for(WAIT, "the first checkpoint", &|| inactive(&p1).exists());

    daemonsets.delete("agent", &DeleteParams::foreground()).await.unwrap();
    eventually(WAIT, "the old DaemonSet gone", || {
        let daemonsets = daemonsets.clone();
        async move { daemonsets.get_opt("agent").await.ok()?.is_none().then_some(()) }
    })
    .await;
    daemonsets.create(&PostParams::default(), &ds).await.unwrap();
    let p2_pod = eventually(WAIT, "the new DaemonSet's pod", || {
        ready_pod(&pods, "agent", &node.name, std::slice::from_ref(&p1))
    })
    .await;
    let p2 = p2_pod.metadata.name.clone().unwrap();
    // Ready by the API's clock; give the checkpointer a few passes.
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        !active(&p1).exists(),
        "the old checkpoint is active beside the new DaemonSet's Ready pod; log:\n{}",
        c.log()
    );
    c.wait_for(WAIT, "the old generation retired", &|| !inactive(&p1).exists());
    let ready_for = std::time::SystemTime::now()
        .duration_since(ready_at(&p2_pod))
        .unwrap_or_default();
    assert!(
        ready_for >= Duration::from_secs(4),
        "retired {ready_for:?} after the replacement became Ready"
    );
    // The DaemonSet controller may have replaced its first pod meanwhile: the one running now.
    let current = ready_pod(&pods, "agent", &node.name, std::slice::from_ref(&p1))
        .await
        .and_then(|p| p.metadata.name)
        .unwrap_or(p2);
    c.wait_for(WAIT, "the new pod checkpointed", &|| inactive(&current).exists());
}

/// A Deployment rollout creates a new ReplicaSet: its pod on this node replaces the old one.
/// The old ReplicaSet's checkpoint is never left active beside it, and is retired once the new
/// pod has run Ready for the stable window.
#[tokio::test(flavor = "multi_thread")]
async fn a_deployment_rollout_retires_the_old_replicasets_checkpoint() {
    let cp = control_plane::shared().await;
    cp.start_controllers();
    let node = cp.add_node("ckpt-deploy", &[]).await;
    let ns = cp.namespace("ckptdeploy").await;
    let admin = cp.admin().await;
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> = Api::namespaced(admin.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    let template = |version: &str| {
        let mut t = annotated_template("web", &node.name, serde_json::json!({}));
        t["metadata"]["annotations"]["version"] = version.into();
        t
    };
    let deployment = serde_json::json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}}, "template": template("1")}
    });
    deployments
        .create(&PostParams::default(), &serde_json::from_value(deployment).unwrap())
        .await
        .unwrap();
    let p1 = eventually(WAIT, "the first pod", || ready_pod(&pods, "web", &node.name, &[]))
        .await
        .metadata
        .name
        .unwrap();
    let work = tempfile::tempdir().unwrap();
    fs::write(work.path().join("boot_id"), "b1").unwrap();
    let c = start_checkpointer(
        cp,
        &node,
        work.path(),
        &["--stable-window", "4s", "--retire-grace", "60s"],
    );
    let files = CheckpointFiles::new(&node, &ns);
    let (inactive, active) = (|pod: &str| files.inactive(pod), |pod: &str| files.active(pod));
    c.wait_for(WAIT, "the first checkpoint", &|| inactive(&p1).exists());

    let patch = serde_json::json!({"spec": {"template": template("2")}});
    deployments
        .patch(
            "web",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .unwrap();
    let p2 = eventually(WAIT, "the new ReplicaSet's pod", || {
        ready_pod(&pods, "web", &node.name, std::slice::from_ref(&p1))
    })
    .await
    .metadata
    .name
    .unwrap();
    c.wait_for(WAIT, &format!("the new pod {p2} checkpointed"), &|| {
        inactive(&p2).exists()
    });
    c.wait_for(WAIT, "the old ReplicaSet's checkpoint retired", &|| {
        !inactive(&p1).exists()
    });
    assert!(!active(&p1).exists() && !active(&p2).exists(), "log:\n{}", c.log());
}

async fn set_finalizer(pods: &Api<Pod>, name: &str, on: bool) {
    let finalizers: Vec<&str> = if on { vec!["kube-anchor.io/test-hold"] } else { vec![] };
    let patch = serde_json::json!({"metadata": {"finalizers": finalizers}});
    pods.patch(
        name,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&patch),
    )
    .await
    .unwrap();
}

/// The checkpointer's DaemonSet deleted: its pre-stop hook proves the decommission, the copy
/// holding the lock retires inactive checkpoints and their copies at once, keeps an active one
/// until its owner's pod runs Ready here (the hook reports it: exit 1 and an Event), and retires
/// its own checkpoint last. The checkpointer and its hook run as the chart's ServiceAccount, with
/// exactly the RBAC `helm template` renders (the hook once could not list DaemonSets, and so
/// never proved a decommission).
#[tokio::test(flavor = "multi_thread")]
async fn a_decommissioned_checkpointer_retires_what_it_manages_then_itself() {
    let cp = control_plane::shared().await;
    cp.start_controllers();
    let node = cp.add_node("ckpt-decom", &[]).await;
    let ns = cp.namespace("ckptdecom").await;
    let admin = cp.admin().await;
    let daemonsets: Api<DaemonSet> = Api::namespaced(admin.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    let cm: ConfigMap =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "kept-config"}, "data": {"a.conf": "x"}}))
            .unwrap();
    Api::<ConfigMap>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    for (name, extra) in [
        ("self", serde_json::json!({})),
        (
            "kept",
            serde_json::json!({"volumes": [{"name": "config", "configMap": {"name": "kept-config"}}]}),
        ),
        ("held", serde_json::json!({})),
    ] {
        let mut template = annotated_template(name, &node.name, extra);
        if name == "self" {
            // The chart's labels: its checkpoint's mirror pod is then, to the hook, an anchor pod
            // of the component on this node (which once kept every checkpoint).
            template["metadata"]["labels"]["app.kubernetes.io/name"] = "kube-anchor".into();
            template["metadata"]["labels"]["app.kubernetes.io/component"] = "pod-checkpointer".into();
        }
        let ds: DaemonSet = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": {"app": name}}, "template": template,
                "updateStrategy": {"type": "OnDelete"}}
        }))
        .unwrap();
        daemonsets.create(&PostParams::default(), &ds).await.unwrap();
    }
    let mut names = BTreeMap::new();
    for name in ["self", "kept", "held"] {
        let pod = eventually(WAIT, "the pods", || ready_pod(&pods, name, &node.name, &[])).await;
        names.insert(name, pod.metadata.name.unwrap());
    }
    let work = tempfile::tempdir().unwrap();
    let kubeconfig = chart_service_account(cp, &ns, work.path()).await;
    fs::write(work.path().join("boot_id"), "b1").unwrap();
    let identity = [("POD_NAME", names["self"].clone()), ("POD_NAMESPACE", ns.clone())];
    let mut c = {
        let log = work.path().join("checkpointer.log");
        let mut cmd = Command::new(BIN);
        cmd.args(["checkpointer", "--host-root"])
            .arg(node.host_root())
            .args(["--node-name", &node.name, "--kubeconfig"])
            .arg(&kubeconfig)
            .args(["--kubelet-url", &format!("http://127.0.0.1:{}", node.kubelet_port)])
            .arg("--boot-id-file")
            .arg(work.path().join("boot_id"))
            .args(["--ready-window", "1s", "--stable-window", "3s", "--interval", "300ms"])
            .env("NO_COLOR", "1")
            .env_remove("KUBE_ANCHOR_CHECKPOINT_OF")
            .envs(identity.clone())
            .stdout(Stdio::null())
            .stderr(fs::File::create(&log).unwrap());
        CheckpointerProcess {
            child: cmd.spawn().unwrap(),
            log,
        }
    };
    let files = CheckpointFiles::new(&node, &ns);
    let host = |p: &str| files.host(p);
    let (inactive, active) = (|pod: &str| files.inactive(pod), |pod: &str| files.active(pod));
    let config_dir = |pod: &str| host(&format!("/etc/kubernetes/checkpoint-configmaps/{ns}/{pod}"));
    c.wait_for(WAIT, "the checkpoints", &|| {
        names.values().all(|p| inactive(p).exists())
    });
    c.wait_for(WAIT, "the checkpointer's own checkpoint active", &|| {
        active(&names["self"]).exists()
    });
    assert!(config_dir(&names["kept"]).exists());
    // Its static copy's mirror pod, with the chart's labels.
    let mirror = format!("{}-{}", names["self"], node.name);
    eventually(WAIT, "the checkpointer's static copy's mirror pod", || async {
        pods.get_opt(&mirror).await.ok().flatten()
    })
    .await;

    // "held" loses its pod here, and its replacement cannot be placed (it asks for more than
    // the node has): the owner still wants the node, nothing of it runs Ready here.
    let requests = |cpu: &str| {
        serde_json::json!({"spec": {"template": {"spec": {"containers": [
            {"name": "app", "image": "registry.example/app:1", "resources": {"requests": {"cpu": cpu}}}
        ]}}}})
    };
    daemonsets
        .patch(
            "held",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Strategic(&requests("1000")),
        )
        .await
        .unwrap();
    pods.delete(&names["held"], &DeleteParams::default()).await.unwrap();
    c.wait_for(WAIT, "the held owner's checkpoint active", &|| {
        active(&names["held"]).exists()
    });

    // The checkpointer's DaemonSet is deleted; its pod stays visible while its hook runs.
    set_finalizer(&pods, &names["self"], true).await;
    daemonsets.delete("self", &DeleteParams::background()).await.unwrap();
    // The kubelet runs the hook once the pod is terminating (the garbage collector deletes it).
    Poll::new(WAIT, "the checkpointer pod to start terminating")
        .every(Duration::from_millis(100))
        .until_async(|| async {
            pods.get(&names["self"])
                .await
                .unwrap()
                .metadata
                .deletion_timestamp
                .is_some()
        })
        .await;
    let out = Command::new(BIN)
        .args(["checkpointer", "pre-stop", "--timeout", "6s", "--host-root"])
        .arg(node.host_root())
        .args(["--node-name", &node.name, "--kubeconfig"])
        .arg(&kubeconfig)
        .envs(identity.clone())
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let hook_log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(1),
        "checkpoints had to be left:\n{hook_log}\n{}",
        c.log()
    );
    assert!(hook_log.contains(&format!("{ns}-{}", names["held"])), "{hook_log}");
    assert!(!inactive(&names["kept"]).exists(), "inactive: at once");
    assert!(!config_dir(&names["kept"]).exists(), "with its copies");
    assert!(
        active(&names["held"]).exists(),
        "active: kept while nothing replaces it"
    );
    assert!(active(&names["self"]).exists(), "its own: last");
    let event = control_plane::event(&admin, &ns, "CheckpointsLeft", None, WAIT).await;
    assert!(event.note.unwrap_or_default().contains(&names["held"]));

    // The held owner's pod runs Ready again: its checkpoint goes, then the checkpointer's own.
    daemonsets
        .patch(
            "held",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Strategic(&requests("10m")),
        )
        .await
        .unwrap();
    pods.delete_collection(&DeleteParams::default(), &ListParams::default().labels("app=held"))
        .await
        .unwrap();
    c.wait_for(WAIT, "the held owner's checkpoint retired", &|| {
        !inactive(&names["held"]).exists()
    });
    c.wait_for(WAIT, "the checkpointer's own checkpoint retired last", &|| {
        !inactive(&names["self"]).exists() && !active(&names["self"]).exists()
    });
    let leftovers = fs::read_dir(host("/etc/kubernetes/inactive-manifests"))
        .unwrap()
        .count();
    assert_eq!(leftovers, 0);
    assert!(matches!(c.child.try_wait(), Ok(None)));
    set_finalizer(&pods, &names["self"], false).await;
}

/// The pod-checkpointer chart's ServiceAccount and RBAC (only those: `helm template
/// --show-only templates/rbac.yaml`, the checkpoints' namespace `ns`) applied in `ns`; a
/// kubeconfig with a token of that ServiceAccount, written under `work`.
async fn chart_service_account(cp: &control_plane::ControlPlane, ns: &str, work: &std::path::Path) -> PathBuf {
    let name = format!("ckpt-{ns}");
    let rendered = ok(&helm(&[
        "template",
        "ckpt",
        &chart("pod-checkpointer"),
        "--namespace",
        ns,
        "--show-only",
        "templates/rbac.yaml",
        "--set",
        &format!("checkpointNamespaces[0]={ns}"),
        "--set",
        &format!("fullnameOverride={name}"),
    ]));
    let file = work.join("rbac.yaml");
    fs::write(&file, rendered).unwrap();
    ok(&kubectl(
        &cp.admin_kubeconfig,
        &["apply", "-n", ns, "-f", file.to_str().unwrap()],
    ));
    cp.service_account_client(ns, &name).await.1
}

/// A checkpoint in bootkube's format (no owner annotation) of a DaemonSet pod that no longer
/// exists: attributed to its DaemonSet from the labels, so the DaemonSet's running pod is its
/// replacement. It is never activated beside that pod, and retires as an older generation —
/// not as an unknown bare pod whose name left the API.
#[tokio::test(flavor = "multi_thread")]
async fn a_bootkube_checkpoint_belongs_to_its_daemonset() {
    let cp = control_plane::shared().await;
    cp.start_controllers();
    let node = cp.add_node("ckpt-bootkube", &[]).await;
    let ns = cp.namespace("ckptbootkube").await;
    let admin = cp.admin().await;
    let daemonsets: Api<DaemonSet> = Api::namespaced(admin.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    let running = create_annotated_daemonset(&daemonsets, &pods, "legacy", &node.name).await;
    let files = CheckpointFiles::new(&node, &ns);
    let (inactive, active) = (|pod: &str| files.inactive(pod), |pod: &str| files.active(pod));
    let old = "legacy-b00tk";
    let checkpoint = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": old, "namespace": ns,
            "labels": {"app": "legacy", "controller-revision-hash": "5f7c9", "pod-template-generation": "1"},
            "annotations": {"checkpointer.alpha.coreos.com/checkpoint-of": old}},
        "spec": {"containers": [{"name": "app", "image": "registry.example/app:0"}]}
    });
    fs::create_dir_all(inactive(old).parent().unwrap()).unwrap();
    fs::write(inactive(old), serde_json::to_vec(&checkpoint).unwrap()).unwrap();

    // The kubelet's own list lags the API a little: start once it shows the pod Ready too.
    let kubelet_ready = || {
        use std::io::{Read, Write};
        let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", node.kubelet_port)) else {
            return false;
        };
        let _ = write!(stream, "GET /pods HTTP/1.0\r\nHost: localhost\r\n\r\n");
        let mut text = String::new();
        let _ = stream.read_to_string(&mut text);
        let Some((_, body)) = text.split_once("\r\n\r\n") else {
            return false;
        };
        let Ok(list) = serde_json::from_str::<k8s_openapi::List<Pod>>(body) else {
            return false;
        };
        list.items.iter().any(|p| {
            p.metadata.name.as_deref() == Some(running.as_str())
                && ready(p)
                && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        })
    };
    Poll::new(WAIT, format!("the kubelet to show {running} Ready"))
        .every(Duration::from_millis(100))
        .until(kubelet_ready);
    let work = tempfile::tempdir().unwrap();
    fs::write(work.path().join("boot_id"), "b1").unwrap();
    let c = start_checkpointer(
        cp,
        &node,
        work.path(),
        &["--stable-window", "2s", "--retire-grace", "2s"],
    );
    Poll::new(WAIT, "bootkube's checkpoint retired and the running pod's written")
        .every(Duration::from_millis(20))
        .context(|| format!("log:\n{}", c.log()))
        .until(|| {
            let done = !inactive(old).exists() && inactive(&running).exists();
            if !done {
                assert!(
                    !active(old).exists(),
                    "bootkube's checkpoint activated beside its DaemonSet's Ready pod; log:\n{}",
                    c.log()
                );
            }
            done
        });
    assert!(c.log().contains(&format!("DaemonSet/{ns}/legacy")), "log:\n{}", c.log());
}

/// `kube-anchor pause --component pod-checkpointer` on the node, then the Node's pause annotation,
/// hold the checkpointer: a Ready parent is not checkpointed until both are lifted.
#[tokio::test(flavor = "multi_thread")]
async fn a_paused_checkpointer_checkpoints_nothing_until_resumed() {
    let cp = control_plane::shared().await;
    cp.start_controllers();
    let node = cp.add_node("ckpt-paused", &[]).await;
    let ns = cp.namespace("ckptpaused").await;
    let admin = cp.admin().await;
    let daemonsets: Api<DaemonSet> = Api::namespaced(admin.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(admin.clone());
    let verb = |verb: &str, extra: &[&str]| {
        let out = Command::new(BIN)
            .args([verb, "--component", "pod-checkpointer", "--host-root"])
            .arg(node.host_root())
            .args(extra)
            .output()
            .unwrap();
        assert!(out.status.success(), "{verb}: {out:?}");
    };
    verb("pause", &["--reason", "restoring etcd"]);
    let parent = create_annotated_daemonset(&daemonsets, &pods, "held", &node.name).await;
    let work = tempfile::tempdir().unwrap();
    fs::write(work.path().join("boot_id"), "b1").unwrap();
    let c = start_checkpointer(cp, &node, work.path(), &[]);
    let files = CheckpointFiles::new(&node, &ns);
    // A pass every 300 ms, the parent Ready for more than the 1 s window: it would be written.
    c.wait_for(WAIT, "the pause in the log", &|| c.log().contains("restoring etcd"));
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        !files.inactive(&parent).exists(),
        "checkpointed while paused on the node"
    );

    let annotate = |value: serde_json::Value| {
        let nodes = nodes.clone();
        let name = node.name.clone();
        async move {
            let patch = serde_json::json!({"metadata": {"annotations": {"kube-anchor.io/paused": value}}});
            nodes
                .patch(&name, &Default::default(), &kube::api::Patch::Merge(&patch))
                .await
                .unwrap();
        }
    };
    annotate(serde_json::json!("node maintenance")).await;
    verb("resume", &[]);
    c.wait_for(WAIT, "the annotation's hold in the log", &|| {
        c.log().contains("node maintenance")
    });
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        !files.inactive(&parent).exists(),
        "checkpointed while the Node is annotated"
    );

    annotate(serde_json::Value::Null).await;
    c.wait_for(WAIT, "the checkpoint once resumed", &|| {
        files.inactive(&parent).exists()
    });
}

/// In steady state (parent Running and Ready here, checkpoint written) the checkpointer costs
/// the API its pod watch only: no GET or LIST per pass, counted from the API server's audit log.
/// bootkube's checkpointer LISTs every 5 s; an earlier version of this one GETs the Node and the
/// owner every pass.
#[tokio::test(flavor = "multi_thread")]
async fn a_steady_checkpointer_asks_the_api_nothing_between_watches() {
    let cp = control_plane::shared().await;
    cp.start_controllers();
    let node = cp.add_node("ckpt-quiet", &[]).await;
    let ns = cp.namespace("ckptquiet").await;
    let admin = cp.admin().await;
    let daemonsets: Api<DaemonSet> = Api::namespaced(admin.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    let parent = create_annotated_daemonset(&daemonsets, &pods, "quiet", &node.name).await;
    let work = tempfile::tempdir().unwrap();
    fs::write(work.path().join("boot_id"), "b1").unwrap();
    // A pass every 300 ms: 30 or more passes in the window below.
    let c = start_checkpointer(cp, &node, work.path(), &[]);
    let files = CheckpointFiles::new(&node, &ns);
    c.wait_for(WAIT, "the checkpoint", &|| files.inactive(&parent).exists());
    std::thread::sleep(Duration::from_secs(2));

    let agent = kube_anchor_k8s::kubeapi::user_agent("checkpointer", Some(&node.name));
    let before = cp.audited_requests(&agent);
    assert!(
        before.iter().any(|r| r.verb == "watch"),
        "the checkpointer's requests are not in the audit log (user agent {agent:?}): {before:?}"
    );
    std::thread::sleep(Duration::from_secs(10));
    let during: Vec<_> = cp.audited_requests(&agent).into_iter().skip(before.len()).collect();
    let periodic: Vec<_> = during.iter().filter(|r| r.verb != "watch").collect();
    assert!(
        periodic.is_empty(),
        "{} requests other than watches in 10 s of steady state: {periodic:#?}",
        periodic.len()
    );
    assert!(files.inactive(&parent).exists() && !files.active(&parent).exists());
}
