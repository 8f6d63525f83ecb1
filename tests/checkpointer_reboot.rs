//! A cold reboot of the whole test bed with the checkpointer (own control plane: the API server
//! is stopped). In steady state the checkpointer's own checkpoint is active beside its
//! DaemonSet copy; then the power goes: the kubelet, the API server and the DaemonSet copy
//! stop, the boot id changes, the kubelet comes back with no API, and the static copy is run as
//! a process from the checkpoint on disk — with the kubelet URL of its pod template (which it
//! cannot use: no credentials) and an in-cluster config without service-account files. It must
//! activate the app's checkpoint from disk alone, then hand over to the DaemonSet copy once that
//! runs, which steps the app's checkpoint aside for the app's own pod.
//!
//! The kubemark kubelet runs no containers, so the test runs both copies of the checkpointer
//! as processes itself; the later real-process nodes will run the static copy from the kubelet.

mod support;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use support::checkpointer::{CheckpointFiles, CheckpointerProcess, ready};
use support::control_plane;
use support::fixture::BIN;
use support::poll::{Poll, eventually};
use support::processes;

const WAIT: Duration = Duration::from_secs(120);

const WINDOWS: [&str; 10] = [
    "--ready-window",
    "1s",
    "--stable-window",
    "4s",
    "--handoff-timeout",
    "30s",
    "--retire-grace",
    "4s",
    "--interval",
    "300ms",
];

fn wait_until(what: &str, logs: &[&CheckpointerProcess], check: impl FnMut() -> bool) {
    let logs = || {
        let logs: Vec<String> = logs.iter().map(|c| c.log()).collect();
        format!("checkpointer logs:\n{}", logs.join("\n-----\n"))
    };
    Poll::new(WAIT, what)
        .every(Duration::from_millis(100))
        .context(logs)
        .until(check)
}

/// Runs the container of a checkpoint on disk as the kubelet would: its args, its literal env,
/// its downward-API env resolved from the static pod (annotations from the file, the name as
/// the kubelet names a static pod), plus the given overrides (the host root, the boot id).
fn run_static_copy(file: &Path, node: &str, overrides: &[(&str, String)], log: PathBuf) -> CheckpointerProcess {
    let pod: Pod = serde_json::from_slice(&fs::read(file).unwrap()).unwrap();
    let container = &pod.spec.as_ref().unwrap().containers[0];
    let mut cmd = Command::new(BIN);
    cmd.args(container.args.clone().unwrap_or_default());
    cmd.env_clear();
    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    for e in container.env.clone().unwrap_or_default() {
        let value = match (&e.value, e.value_from.as_ref().and_then(|v| v.field_ref.as_ref())) {
            (Some(v), _) => v.clone(),
            (None, Some(f)) if f.field_path == "metadata.name" => {
                format!("{}-{node}", pod.metadata.name.as_deref().unwrap())
            }
            (None, Some(f)) if f.field_path == "metadata.namespace" => pod.metadata.namespace.clone().unwrap(),
            (None, Some(f)) if f.field_path == "spec.nodeName" => node.to_owned(),
            (None, Some(f)) => {
                let key = f
                    .field_path
                    .strip_prefix("metadata.annotations['")
                    .and_then(|k| k.strip_suffix("']"))
                    .unwrap_or_else(|| panic!("unexpected fieldRef {}", f.field_path));
                annotations.get(key).cloned().unwrap_or_default()
            }
            _ => continue,
        };
        cmd.env(&e.name, value);
    }
    // Every pod gets the API's service address from the kubelet; the copy has no token files.
    cmd.env("KUBERNETES_SERVICE_HOST", "127.0.0.1");
    cmd.env("KUBERNETES_SERVICE_PORT", "1");
    for (k, v) in overrides {
        cmd.env(k, v);
    }
    cmd.env("NO_COLOR", "1");
    let child = cmd
        .stdout(Stdio::null())
        .stderr(fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    CheckpointerProcess { child, log }
}

#[tokio::test(flavor = "multi_thread")]
async fn after_a_cold_reboot_the_checkpointer_starts_from_disk_and_hands_over_to_its_daemonset_copy() {
    let cp = control_plane::shared().await;
    cp.start_controllers();
    let node = cp.add_node("reboot-node", &[]).await;
    let ns = cp.namespace("reboot").await;
    let admin = cp.admin().await;
    let daemonsets: Api<DaemonSet> = Api::namespaced(admin.clone(), &ns);
    // The port the static copy's kubelet URL names: nothing it can use answers there.
    let blind_kubelet = format!("https://127.0.0.1:{}", processes::free_port());
    let args: Vec<&str> = ["checkpointer"].into_iter().chain(WINDOWS).collect();
    let checkpointer: DaemonSet = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "pod-checkpointer"},
        "spec": {
            "selector": {"matchLabels": {"app": "pod-checkpointer"}},
            "template": {
                "metadata": {"labels": {"app": "pod-checkpointer"}, "annotations": {"checkpointer.alpha.coreos.com/checkpoint": "true"}},
                "spec": {
                    "hostNetwork": true,
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [{"name": "checkpointer", "image": "kube-anchor/kube-anchor:0.1.0",
                        "command": ["kube-anchor"], "args": args,
                        "env": [
                            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                            {"name": "KUBE_ANCHOR_KUBELET_URL", "value": blind_kubelet},
                            {"name": "KUBE_ANCHOR_CHECKPOINT_OF", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['checkpointer.alpha.coreos.com/checkpoint-of']"}}}
                        ]}]
                }
            }
        }
    }))
    .unwrap();
    daemonsets.create(&PostParams::default(), &checkpointer).await.unwrap();
    let app: DaemonSet = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "app"},
        "spec": {
            "selector": {"matchLabels": {"app": "app"}},
            "template": {
                "metadata": {"labels": {"app": "app"}, "annotations": {"checkpointer.alpha.coreos.com/checkpoint": "true"}},
                "spec": {"hostNetwork": true, "tolerations": [{"operator": "Exists"}],
                    "containers": [{"name": "app", "image": "registry.example/app:1"}]}
            }
        }
    }))
    .unwrap();
    daemonsets.create(&PostParams::default(), &app).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    let pod_of = |label: &'static str| {
        let pods = pods.clone();
        let node = node.name.clone();
        move || {
            let (pods, node) = (pods.clone(), node.clone());
            async move {
                let list = pods
                    .list(&ListParams::default().labels(&format!("app={label}")))
                    .await
                    .ok()?;
                list.items.into_iter().find(|p| {
                    p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node.as_str())
                        && ready(p)
                        && p.metadata.deletion_timestamp.is_none()
                })
            }
        }
    };
    let me = eventually(WAIT, "the checkpointer's DaemonSet pod", pod_of("pod-checkpointer"))
        .await
        .metadata
        .name
        .unwrap();
    let app_pod = eventually(WAIT, "the app's pod", pod_of("app"))
        .await
        .metadata
        .name
        .unwrap();

    let work = tempfile::tempdir().unwrap();
    // Both copies are given the same metrics port, as on one host network.
    let listen = format!("127.0.0.1:{}", processes::free_port());
    let boot_id = work.path().join("boot_id");
    fs::write(&boot_id, "boot-1\n").unwrap();
    let daemonset_copy = |log: &str| {
        let log = work.path().join(log);
        let child = Command::new(BIN)
            .arg("checkpointer")
            .args(WINDOWS)
            .arg("--host-root")
            .arg(node.host_root())
            .args(["--node-name", &node.name, "--kubeconfig"])
            .arg(&cp.admin_kubeconfig)
            .args(["--kubelet-url", &format!("http://127.0.0.1:{}", node.kubelet_port)])
            .arg("--boot-id-file")
            .arg(&boot_id)
            .arg("--health-socket")
            .arg(work.path().join("daemonset-copy.sock"))
            .args(["--listen", &listen])
            .env("POD_NAME", &me)
            .env("POD_NAMESPACE", &ns)
            .env_remove("KUBE_ANCHOR_CHECKPOINT_OF")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        CheckpointerProcess { child, log }
    };
    let files = CheckpointFiles::new(&node, &ns);
    let (inactive, active) = (|pod: &str| files.inactive(pod), |pod: &str| files.active(pod));

    // Steady state: both checkpointed; the app's inactive beside its pod, the checkpointer's own
    // active beside its DaemonSet copy (the copy that will take over after a reboot).
    let ds_copy = daemonset_copy("daemonset-copy-1.log");
    wait_until("both checkpoints", &[&ds_copy], || {
        inactive(&me).exists() && inactive(&app_pod).exists()
    });
    wait_until("the checkpointer's own checkpoint to be active", &[&ds_copy], || {
        active(&me).exists()
    });
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        active(&me).exists(),
        "the self-checkpoint stays active beside its DaemonSet copy"
    );
    assert!(
        !active(&app_pod).exists(),
        "the app's checkpoint is inactive while its pod runs"
    );

    // The power goes: everything on the node stops, and the API with it.
    drop(ds_copy);
    cp.stop_kubelet(&node.name);
    cp.stop_apiserver();
    fs::write(&boot_id, "boot-2\n").unwrap();
    cp.start_kubelet(&node.name);
    let mut static_copy = run_static_copy(
        &active(&me),
        &node.name,
        &[
            ("KUBE_ANCHOR_HOST_ROOT", node.host_root().display().to_string()),
            ("KUBE_ANCHOR_BOOT_ID_FILE", boot_id.display().to_string()),
            (
                "KUBE_ANCHOR_HEALTH_SOCKET",
                work.path().join("static-copy.sock").display().to_string(),
            ),
            ("KUBE_ANCHOR_LISTEN", listen.clone()),
        ],
        work.path().join("static-copy.log"),
    );
    wait_until(
        "the static copy to activate the app's checkpoint with no API",
        &[&static_copy],
        || active(&app_pod).exists(),
    );
    assert!(
        static_copy.running(),
        "the static copy keeps running:\n{}",
        static_copy.log()
    );
    assert!(active(&me).exists());
    assert!(
        static_copy.log().contains("unknown"),
        "a failed kubelet query is unknown:\n{}",
        static_copy.log()
    );

    // The API is back and the kubelet restarts the node's pods; the static copy still cannot
    // see them and keeps the app's checkpoint.
    cp.start_apiserver_again().await;
    eventually(WAIT, "the app's pod Ready again", pod_of("app")).await;
    std::thread::sleep(Duration::from_secs(2));
    assert!(active(&app_pod).exists(), "nothing is stepped aside blind");

    // Its DaemonSet copy runs again: the static copy hands over, the DaemonSet copy sees the
    // app's pod and steps its checkpoint aside; the checkpointer's own checkpoint stays active.
    let ds_copy = daemonset_copy("daemonset-copy-2.log");
    wait_until("the hand-over to the DaemonSet copy", &[&static_copy, &ds_copy], || {
        static_copy.log().contains("lock handed over") && ds_copy.log().contains("checkpointer lock held")
    });
    wait_until("the app's checkpoint to step aside", &[&static_copy, &ds_copy], || {
        !active(&app_pod).exists()
    });
    assert!(inactive(&app_pod).exists(), "kept for the next boot");
    assert!(active(&me).exists(), "the self-checkpoint stays active");
    assert!(
        static_copy.running(),
        "the static copy stands by:\n{}",
        static_copy.log()
    );

    // Both serve their probes over their own sockets and never fight over the TCP port: the
    // lock holder is ready after a clean pass, the standby copy is ready while it waits.
    let probe = |socket: &str| {
        Command::new(BIN)
            .args(["probe", "readyz", "--socket"])
            .arg(work.path().join(socket))
            .output()
            .unwrap()
    };
    for socket in ["daemonset-copy.sock", "static-copy.sock"] {
        let out = probe(socket);
        assert!(
            out.status.success(),
            "{socket}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let metrics = {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(&listen).unwrap();
        write!(stream, "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n").unwrap();
        let mut text = String::new();
        stream.read_to_string(&mut text).unwrap();
        text
    };
    assert!(metrics.contains("kube_anchor_checkpointer_lock_held"), "{metrics}");
    assert!(static_copy.running(), "{}", static_copy.log());
}
