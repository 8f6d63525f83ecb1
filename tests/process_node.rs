//! Nodes whose containers are real processes (the process runtime of `tools/kube`): a static
//! pod written by `kube-anchor apply` really runs and turns Ready through a real probe, a
//! command that exits crash-loops under the kubelet's own back-off, two hostNetwork processes
//! on one node really fight for a port while the same port on another node is free, containers
//! and their exec probes get the user and capabilities their securityContext asks for, a node
//! hard-killed and started again with no API server brings its static pods back from disk, and
//! the project's chart installed with helm runs `kube-anchor run` as a real DaemonSet pod that
//! writes its component, which then runs too; a bad `helm upgrade` really crash-loops the
//! component, and the replacement anchor rolls it back and holds the rollout.

mod support;

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::api::{Api, ListParams};
use support::control_plane::{self, ControlPlane};
use support::fixture::BIN;
use support::helm::{chart, configmap_files, helm, of_kind, ok, template};
use support::nodes::NodeHandle;
use support::poll::{Poll, eventually};
use support::processes::{self, free_port};

const WAIT: Duration = Duration::from_secs(120);

/// Writes `manifest` as the static pod `name` on `node` with `kube-anchor apply`.
fn apply(node: &NodeHandle, name: &str, manifest: &str) {
    let dir = node.root.join("anchors").join(name);
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join("pod.yaml"), manifest).unwrap();
    fs::write(
        dir.join("anchor.yaml"),
        format!(
            "apiVersion: kube-anchor.io/v1alpha1\nkind: Anchor\nmetadata:\n  name: {name}\nspec:\n  variables: [NODE_NAME, NODE_IP]\n  manifest:\n    source: pod.yaml\n    path: /etc/kubernetes/manifests/{name}.yaml\n"
        ),
    )
    .unwrap();
    let out = Command::new(BIN)
        .arg("apply")
        .arg("--config")
        .arg(dir.join("anchor.yaml"))
        .arg("--host-root")
        .arg(node.host_root())
        .env("NODE_NAME", &node.name)
        .env("NODE_IP", &node.ip)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "apply {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Three containers that write their own privileges (`/proc/self/status`) to a hostPath: one
/// as the anchors run (root, CHOWN alone, no escalation; its exec probe reports too), one as
/// user 65534, one with no securityContext.
fn privileges_pod() -> String {
    let report = |name: &str| format!("[sh, -c, \"cat /proc/self/status > /out/{name}; exec sleep 3600\"]");
    format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: privileges, namespace: kube-system}}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  volumes: [{{name: out, hostPath: {{path: /var/lib/privileges}}}}]
  containers:
  - name: confined
    image: kube-anchor/kube-anchor:0.1.0
    command: {confined}
    securityContext:
      runAsUser: 0
      allowPrivilegeEscalation: false
      capabilities: {{drop: [ALL], add: [CHOWN]}}
    readinessProbe:
      exec: {{command: [sh, -c, "cat /proc/self/status > /out/confined-probe"]}}
      periodSeconds: 1
    volumeMounts: [{{name: out, mountPath: /out}}]
  - name: nobody
    image: kube-anchor/kube-anchor:0.1.0
    command: {nobody}
    securityContext: {{runAsUser: 65534, runAsGroup: 65534}}
    volumeMounts: [{{name: out, mountPath: /out}}]
  - name: default
    image: kube-anchor/kube-anchor:0.1.0
    command: {default}
    volumeMounts: [{{name: out, mountPath: /out}}]
"#,
        confined = report("confined"),
        nobody = report("nobody"),
        default = report("default"),
    )
}

/// A single-member etcd on the node's address, with a real HTTP readiness probe.
fn etcd_manifest(name: &str, client: u16, peer: u16) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: kube-system
spec:
  hostNetwork: true
  containers:
  - name: etcd
    image: registry.k8s.io/etcd:3.6.8-0
    command:
    - etcd
    - --name=${{NODE_NAME}}
    - --data-dir=/var/lib/{name}
    - --listen-client-urls=http://${{NODE_IP}}:{client}
    - --advertise-client-urls=http://${{NODE_IP}}:{client}
    - --listen-peer-urls=http://${{NODE_IP}}:{peer}
    - --initial-advertise-peer-urls=http://${{NODE_IP}}:{peer}
    - --initial-cluster=${{NODE_NAME}}=http://${{NODE_IP}}:{peer}
    - --unsafe-no-fsync=true
    - --log-level=info
    readinessProbe:
      httpGet: {{host: "${{NODE_IP}}", port: {client}, path: /health}}
      periodSeconds: 1
    volumeMounts:
    - {{name: data, mountPath: /var/lib/{name}}}
  volumes:
  - {{name: data, hostPath: {{path: /var/lib/{name}, type: DirectoryOrCreate}}}}
"#
    )
}

fn container(pod: &Pod) -> Option<ContainerStatus> {
    pod.status.as_ref()?.container_statuses.as_ref()?.first().cloned()
}

fn ready(pod: &Pod) -> bool {
    let status = pod.status.as_ref();
    status.and_then(|s| s.phase.as_deref()) == Some("Running")
        && status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Waits until static pod `name` of `node` is Running and Ready; a timeout says what the API last
/// showed of it, what the kubelet logged about it and what its containers wrote.
async fn wait_ready(cp: &ControlPlane, pods: &Api<Pod>, node: &NodeHandle, name: &str) -> Pod {
    let last = std::sync::Mutex::new(String::from("no such pod"));
    Poll::new(WAIT, format!("{name} Running and Ready"))
        .context(|| {
            let kubelet = cp.kubelet_log_tail(&node.name, 5000);
            let naming: Vec<&str> = kubelet.lines().filter(|l| l.contains(name)).collect();
            format!(
                "the API last showed: {}\nthe kubelet's last lines naming it:\n{}\nits containers' log tails:\n{}",
                last.lock().unwrap(),
                naming[naming.len().saturating_sub(30)..].join("\n"),
                container_logs(node, name)
            )
        })
        .until_async(|| async {
            let pod = pods.get_opt(name).await;
            if let Ok(Some(pod)) = &pod {
                *last.lock().unwrap() = serde_json::to_string(&pod.status).unwrap_or_default();
            }
            pod.ok().flatten().filter(ready)
        })
        .await
}

/// The last lines of every log file of pod `name`'s containers on `node` (the process runtime's
/// pod log dir, and containerd's).
fn container_logs(node: &NodeHandle, name: &str) -> String {
    let prefix = format!("kube-system_{name}_");
    let mut out = String::new();
    for dir in [
        node.root.join("kubelet/pod-logs"),
        node.host_root().join("var/log/pods"),
    ] {
        for pod_dir in fs::read_dir(&dir).into_iter().flatten().flatten() {
            if !pod_dir.file_name().to_string_lossy().starts_with(&prefix) {
                continue;
            }
            for container in fs::read_dir(pod_dir.path()).into_iter().flatten().flatten() {
                for log in fs::read_dir(container.path()).into_iter().flatten().flatten() {
                    out += &format!("{}:\n{}\n", log.path().display(), processes::tail(&log.path(), 15));
                }
            }
        }
    }
    out
}

/// GET http://<addr>/health from the test: the real process answering, not the API's view.
fn etcd_health(addr: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect_timeout(&addr.parse().ok()?, Duration::from_secs(1)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(stream, "GET /health HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut body = String::new();
    stream.read_to_string(&mut body).ok()?;
    body.contains("\"health\":\"true\"").then_some(body)
}

/// `kubectl logs --previous`: through the API server and the kubelet, from the runtime's log file.
fn previous_log(kubeconfig: &Path, pod: &Pod) -> String {
    let out = Command::new(processes::tool("kubectl"))
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["logs", "-n", "kube-system"])
        .arg(pod.metadata.name.as_deref().unwrap())
        .arg("--previous")
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

#[tokio::test(flavor = "multi_thread")]
async fn static_pods_run_fight_for_ports_crash_loop_and_survive_a_hard_kill() {
    let cp = control_plane::shared().await;
    let n1 = cp.add_process_node("pn-1", &[]).await;
    let n2 = cp.add_process_node("pn-2", &[]).await;
    let pods: Api<Pod> = Api::namespaced(cp.admin().await, "kube-system");
    let (client, peer) = (free_port(), free_port());

    // The same ports on two nodes: both run, each on its own address.
    apply(&n1, "etcd", &etcd_manifest("etcd", client, peer));
    apply(&n2, "etcd", &etcd_manifest("etcd", client, peer));
    // A command that exits 2 at once.
    apply(
        &n2,
        "crasher",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: crasher\n  namespace: kube-system\nspec:\n  hostNetwork: true\n  containers:\n  - name: main\n    image: kube-anchor/kube-anchor:0.1.0\n    command: [kube-anchor, no-such-verb]\n",
    );
    // An image that is no binary of the node's "registry": the pull fails as a registry's would.
    apply(
        &n2,
        "unknown-image",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: unknown-image\n  namespace: kube-system\nspec:\n  hostNetwork: true\n  containers:\n  - name: main\n    image: registry.example/no-such-image:1\n",
    );

    // Privileges as runc enforces them: each container reports its own and its exec probe's.
    let out = n2.host_root().join("var/lib/privileges");
    fs::create_dir_all(&out).unwrap();
    fs::set_permissions(&out, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    apply(&n2, "privileges", &privileges_pod());

    for node in [&n1, &n2] {
        let pod = wait_ready(cp, &pods, node, &format!("etcd-{}", node.name)).await;
        assert_eq!(pod.status.as_ref().unwrap().pod_ip.as_deref(), Some(node.ip.as_str()));
        let addr = format!("{}:{client}", node.ip);
        assert!(
            etcd_health(&addr).is_some(),
            "etcd of {} does not answer on {addr}",
            node.name
        );
        assert!(
            node.host_root().join("var/lib/etcd/member").is_dir(),
            "etcd's data dir is the node's hostPath"
        );
    }
    eprintln!(
        "memory: control plane {} MiB; node with a kubelet and etcd: pn-1 {} MiB, pn-2 {} MiB",
        cp.control_plane_rss_kib() / 1024,
        cp.node_rss_kib(&n1.name) / 1024,
        cp.node_rss_kib(&n2.name) / 1024
    );
    wait_ready(cp, &pods, &n2, "privileges-pn-2").await;
    let report = |name: &str| {
        let text = fs::read_to_string(out.join(name)).unwrap_or_default();
        let field = |key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(key))
                .map(|v| v.split_whitespace().next().unwrap_or_default().to_owned())
                .unwrap_or_else(|| panic!("{name}: no {key} in {text:?}"))
        };
        (field("Uid:"), field("CapEff:"), field("NoNewPrivs:"))
    };
    let chown_only = ("0".to_owned(), "0000000000000001".to_owned(), "1".to_owned());
    assert_eq!(report("confined"), chown_only, "drop ALL, add CHOWN, no escalation");
    assert_eq!(report("confined-probe"), chown_only, "its exec probe runs as it does");
    assert_eq!(
        report("nobody"),
        ("65534".to_owned(), "0000000000000000".to_owned(), "0".to_owned()),
        "runAsUser 65534: no capabilities"
    );
    // containerd's default set, the same as Docker's.
    assert_eq!(
        report("default"),
        ("0".to_owned(), "00000000a80425fb".to_owned(), "0".to_owned())
    );
    apply(&n1, "etcd-twin", &etcd_manifest("etcd-twin", client, peer));
    // A second etcd on the same node and ports: it really fails to bind, and the kubelet
    // restarts it, its last run ended in a bind error.
    let twin = eventually(WAIT, "etcd-twin restarted after a failed bind", || {
        let pods = pods.clone();
        async move {
            let pod = pods.get_opt("etcd-twin-pn-1").await.ok()??;
            let c = container(&pod)?;
            let last = c.last_state.as_ref()?.terminated.as_ref()?;
            (c.restart_count >= 1 && last.exit_code != 0 && !c.ready).then_some(pod)
        }
    })
    .await;
    let log = previous_log(&cp.admin_kubeconfig, &twin);
    assert!(
        log.contains("address already in use"),
        "etcd-twin's log (kubectl logs --previous):\n{log}"
    );

    // The crasher: restartCount rises and the kubelet backs off (CrashLoopBackOff).
    let crasher = eventually(WAIT, "crasher in CrashLoopBackOff", || {
        let pods = pods.clone();
        async move {
            let pod = pods.get_opt("crasher-pn-2").await.ok()??;
            let c = container(&pod)?;
            let waiting = c.state.as_ref()?.waiting.as_ref()?.reason.clone()?;
            (c.restart_count >= 2 && waiting == "CrashLoopBackOff").then_some(c)
        }
    })
    .await;
    let last = crasher.last_state.unwrap().terminated.unwrap();
    assert_eq!(last.exit_code, 2, "kube-anchor's usage error exit code");

    let pull = eventually(WAIT, "unknown-image waiting on its pull", || {
        let pods = pods.clone();
        async move {
            let pod = pods.get_opt("unknown-image-pn-2").await.ok()??;
            let waiting = container(&pod)?.state?.waiting?;
            matches!(waiting.reason.as_deref(), Some("ErrImagePull" | "ImagePullBackOff")).then_some(waiting)
        }
    })
    .await;
    assert!(
        pull.message.as_deref().unwrap_or_default().contains("no-such-image"),
        "the pull error names the image: {pull:?}"
    );

    // Hard kill of pn-1 (kubelet and every container at once), then a start with no API server
    // reachable: etcd comes back from the manifest on disk.
    let addr = format!("{}:{client}", n1.ip);
    cp.stop_kubelet(&n1.name);
    assert!(etcd_health(&addr).is_none(), "etcd of pn-1 outlived its node");
    cp.start_kubelet_without_api(&n1.name);
    eventually(WAIT, "pn-1's etcd back without an API server", || {
        let addr = addr.clone();
        async move { etcd_health(&addr) }
    })
    .await;
    assert!(
        etcd_health(&format!("{}:{client}", n2.ip)).is_some(),
        "pn-2 was not touched"
    );
}

/// The kube-apiserver chart's probes, as rendered: (liveness, readiness, startup).
fn chart_probes() -> (serde_json::Value, serde_json::Value, serde_json::Value) {
    let values: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&fs::read_to_string(Path::new(&chart("kube-apiserver")).join("values.yaml")).unwrap())
            .unwrap();
    // Every credential the chart requires, as placeholders: only the manifest is used.
    let sets: Vec<String> = values["files"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|f| format!("credentials.{}=x", f["name"].as_str().unwrap().replace('.', "\\.")))
        .collect();
    let mut args = Vec::new();
    for set in &sets {
        args.extend(["--set-string", set.as_str()]);
    }
    let docs = template("probes", "kube-apiserver", &args);
    let pod: serde_json::Value =
        serde_yaml_ng::from_slice(&configmap_files(of_kind(&docs, "ConfigMap")[0])["pod.yaml"]).unwrap();
    let c = &pod["spec"]["containers"][0];
    (
        c["livenessProbe"].clone(),
        c["readinessProbe"].clone(),
        c["startupProbe"].clone(),
    )
}

/// A kube-apiserver stand-in whose health endpoints answer after 3 s, as a loaded one does.
fn slow_pod(name: &str, port: u16, probes: [(&str, serde_json::Value); 3]) -> String {
    let script = "import http.server, sys, time\n\
class H(http.server.BaseHTTPRequestHandler):\n    \
def do_GET(self):\n        time.sleep(3); self.send_response(200); self.end_headers(); self.wfile.write(b'ok')\n    \
def log_message(self, *a): pass\n\
http.server.ThreadingHTTPServer((sys.argv[1], int(sys.argv[2])), H).serve_forever()\n";
    let mut container = serde_json::json!({
        "name": "kube-apiserver",
        "image": "registry.k8s.io/kube-apiserver:v1.36.3",
        "command": ["python3", "-c", script, "${NODE_IP}", port.to_string()],
    });
    for (field, mut probe) in probes {
        if probe.is_null() {
            continue;
        }
        // The chart's probe, aimed at the stand-in: same timings, plain HTTP on its port.
        probe["httpGet"]["port"] = port.into();
        probe["httpGet"]["scheme"] = "HTTP".into();
        container[field] = probe;
    }
    serde_yaml_ng::to_string(&serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "kube-system"},
        "spec": {"hostNetwork": true, "containers": [container]},
    }))
    .unwrap()
}

/// A kube-apiserver slower than 1 s on its health endpoints is not killed by the chart's own
/// probes (kubeadm's timings: 15 s timeouts, a startup probe), while the 1 s timeout the charts
/// had fails on the same endpoint at once.
#[tokio::test(flavor = "multi_thread")]
async fn a_slow_health_endpoint_passes_the_charts_probes_and_fails_a_one_second_timeout() {
    let cp = control_plane::shared().await;
    let node = cp.add_process_node("pn-probe", &[]).await;
    let pods: Api<Pod> = Api::namespaced(cp.admin().await, "kube-system");
    let (liveness, readiness, startup) = chart_probes();
    for probe in [&liveness, &readiness, &startup] {
        assert!(probe["timeoutSeconds"].as_u64().unwrap() >= 15, "{probe}");
    }
    let one_second = |p: &serde_json::Value| {
        let mut p = p.clone();
        p["timeoutSeconds"] = 1.into();
        p
    };
    // The 1 s pod is killed at its first failed liveness probe rather than the eighth, so the
    // test sees the kill in seconds, not minutes.
    let mut one_second_liveness = one_second(&liveness);
    one_second_liveness["failureThreshold"] = 1.into();
    apply(
        &node,
        "slow-chart",
        &slow_pod(
            "slow-chart",
            free_port(),
            [
                ("livenessProbe", liveness.clone()),
                ("readinessProbe", readiness.clone()),
                ("startupProbe", startup),
            ],
        ),
    );
    apply(
        &node,
        "slow-1s",
        &slow_pod(
            "slow-1s",
            free_port(),
            [
                ("livenessProbe", one_second_liveness),
                ("readinessProbe", one_second(&readiness)),
                ("startupProbe", serde_json::Value::Null),
            ],
        ),
    );
    // The endpoint really is slow: with a 1 s timeout the kubelet kills the container.
    let restarts = |name: String| {
        let pods = pods.clone();
        async move {
            let pod = pods.get_opt(&name).await.ok().flatten()?;
            Some((container(&pod)?.restart_count, ready(&pod)))
        }
    };
    let one_second_pod = format!("slow-1s-{}", node.name);
    eventually(WAIT, "the 1 s liveness probe kills the slow container", || {
        let r = restarts(one_second_pod.clone());
        async move { r.await.filter(|(n, _)| *n >= 1) }
    })
    .await;
    assert_eq!(
        restarts(one_second_pod.clone()).await.map(|(_, r)| r),
        Some(false),
        "never Ready"
    );
    // The chart's probes pass on it: Ready, and never restarted, also three liveness periods
    // later (a span of time, so a wait: nothing is to happen in it).
    let chart_pod = format!("slow-chart-{}", node.name);
    wait_ready(cp, &pods, &node, &chart_pod).await;
    let period = liveness["periodSeconds"].as_u64().unwrap_or(10);
    tokio::time::sleep(Duration::from_secs(3 * period)).await;
    assert_eq!(restarts(chart_pod).await, Some((0, true)));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_chart_runs_a_real_anchor_that_writes_its_component_and_rolls_back_a_bad_push() {
    let cp = control_plane::shared().await;
    cp.start_controllers();
    let label = ("kube-anchor.io/process-chart", "yes");
    let node = cp.add_process_node("pn-chart", &[label]).await;
    let ns = cp.namespace("pn-chart").await;
    let pods: Api<Pod> = Api::namespaced(cp.admin().await, &ns);
    let system: Api<Pod> = Api::namespaced(cp.admin().await, "kube-system");

    // The real kube-scheduler's kubeconfig, with the identity the default RBAC knows and its
    // certificates inline (the file goes to the node through a Secret).
    let dir = tempfile::tempdir().unwrap();
    let (crt, key) = cp.pki.issue("scheduler", "system:kube-scheduler", None, &[]);
    let b64 = |path: &Path| {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(fs::read(path).unwrap())
    };
    let scheduler_conf = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster: {{server: \"{}\", certificate-authority-data: {}}}\nusers:\n- name: scheduler\n  user: {{client-certificate-data: {}, client-key-data: {}}}\ncontexts:\n- name: test\n  context: {{cluster: test, user: scheduler}}\ncurrent-context: test\n",
        cp.server,
        b64(&cp.pki.ca()),
        b64(&crt),
        b64(&key)
    );
    let values = dir.path().join("values.yaml");
    let indent = |text: String| text.lines().map(|l| format!("    {l}\n")).collect::<String>();
    fs::write(
        &values,
        format!(
            "nodeSelector:\n  node-role.kubernetes.io/control-plane: null\n  {}: \"{}\"\nanchor:\n  trialPeriod: 20s\n  port: 0\n  logFormat: plain\ncomponent:\n  extraArgs: {{leader-elect: \"false\"}}\ncredentials:\n  scheduler.conf: |\n{}",
            label.0,
            label.1,
            indent(scheduler_conf)
        ),
    )
    .unwrap();
    let chart = chart("kube-scheduler");
    // `helm <verb> sched <chart> -n <ns> -f <values> <extra…>` as admin, not waiting.
    let release = |verb: &str, extra: &[&str]| {
        let mut args = vec![verb, "sched", &chart, "-n", &ns, "-f", values.to_str().unwrap()];
        args.extend(extra);
        args.extend(["--kubeconfig", cp.admin_kubeconfig.to_str().unwrap(), "--wait=false"]);
        ok(&helm(&args));
    };
    release("install", &[]);

    // The anchor pod runs kube-anchor as a process with its volumes and in-cluster API access,
    // writes the manifest, the kubelet runs the real kube-scheduler from it, and the anchor's
    // exec readiness probe turns true once the mirror pod runs its hash and is Ready.
    let anchor = eventually(WAIT, "the anchor pod Running and Ready on the process node", || {
        let pods = pods.clone();
        async move {
            let list = pods.list(&ListParams::default()).await.ok()?;
            list.items.into_iter().find(ready)
        }
    })
    .await;
    assert_eq!(
        anchor.spec.as_ref().unwrap().node_name.as_deref(),
        Some(node.name.as_str())
    );
    let manifest = node.host_root().join("etc/kubernetes/manifests/kube-scheduler.yaml");
    let written = fs::read_to_string(&manifest).expect("the anchor wrote the manifest on its node");
    let scheduler = wait_ready(cp, &system, &node, &format!("kube-scheduler-{}", node.name)).await;
    let hash = scheduler.metadata.annotations.as_ref().unwrap()["kubernetes.io/config.hash"].clone();
    assert!(!hash.is_empty());
    assert!(written.contains("kube-scheduler"));
    eprintln!(
        "memory: node with a kubelet, an anchor and kube-scheduler: {} MiB",
        cp.node_rss_kib(&node.name) / 1024
    );
    let mode = fs::metadata(node.host_root().join("etc/kubernetes/scheduler.conf")).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
        0o600
    );

    // The version runs converged through its trial and becomes last-known-good.
    let ledger = node.host_root().join("var/lib/kube-anchor/v1/kube-scheduler.json");
    let read_ledger = move || -> Option<serde_json::Value> {
        let v: serde_json::Value = serde_json::from_slice(&fs::read(&ledger).ok()?).ok()?;
        Some(v["ledger"].clone())
    };
    let good = eventually(WAIT, "the first version promoted to last-known-good", || {
        let read_ledger = read_ledger.clone();
        async move {
            let l = read_ledger()?;
            (l["lastKnownGood"] == l["contentHash"]).then(|| l["contentHash"].as_str().map(str::to_owned))?
        }
    })
    .await;

    // A bad push: kube-scheduler refuses an unknown flag and exits. The real DaemonSet
    // controller replaces the anchor pod, the new anchor writes the version, the kubelet
    // crash-loops the real process, and the anchor rolls back to the last-known-good.
    release("upgrade", &["--set", "component.extraArgs.no-such-flag=1"]);
    let admin = cp.admin().await;
    let event = control_plane::event(&admin, &ns, "RolledBack", None, WAIT).await;
    let note = event.note.unwrap_or_default();
    assert!(
        note.contains(&good),
        "rolled back to the last-known-good {good}: {note}"
    );
    let back = read_ledger().unwrap();
    assert_eq!(
        back["contentHash"].as_str(),
        Some(good.as_str()),
        "the node runs the last-known-good again"
    );
    assert_eq!(
        back["bad"].as_array().map(Vec::len),
        Some(1),
        "the bad version recorded: {back}"
    );
    assert!(!fs::read_to_string(&manifest).unwrap().contains("no-such-flag"));
    wait_ready(cp, &system, &node, &format!("kube-scheduler-{}", node.name)).await;
    // The new anchor pod holds the rollout: it stays unready while the component runs.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let list = pods.list(&ListParams::default()).await.unwrap();
    let current: Vec<&Pod> = list
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    assert_eq!(current.len(), 1, "one anchor pod after the rollout step");
    assert!(!ready(current[0]), "the anchor that rolled back must not turn Ready");
    assert_ne!(
        current[0].metadata.uid, anchor.metadata.uid,
        "the DaemonSet controller replaced the pod"
    );

    // Uninstall: the anchor's preStop hook runs in the pod (exec through the runtime) and, the
    // DaemonSet being gone and the Node consenting (the scheduler's last copy is guarded),
    // removes the component; the real scheduler process stops.
    let consent = serde_json::json!({"metadata": {"annotations": {"kube-anchor.io/decommission": "true"}}});
    Api::<k8s_openapi::api::core::v1::Node>::all(admin.clone())
        .patch(
            &node.name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&consent),
        )
        .await
        .unwrap();
    ok(&helm(&[
        "uninstall",
        "sched",
        "-n",
        &ns,
        "--kubeconfig",
        cp.admin_kubeconfig.to_str().unwrap(),
        "--wait=false",
    ]));
    // Manifest first, then (the mirror pod gone) the credentials.
    let credential = node.host_root().join("etc/kubernetes/scheduler.conf");
    eventually(
        WAIT,
        "the manifest and credentials removed by the anchor's preStop hook",
        || {
            let (manifest, credential) = (manifest.clone(), credential.clone());
            async move { (!manifest.exists() && !credential.exists()).then_some(()) }
        },
    )
    .await;
    let mirror = format!("kube-scheduler-{}", node.name);
    eventually(WAIT, "the scheduler's mirror pod gone", || {
        let (system, mirror) = (system.clone(), mirror.clone());
        async move { system.get_opt(&mirror).await.ok()?.is_none().then_some(()) }
    })
    .await;
}

const PANIC_CHILD: &str = "KUBE_ANCHOR_TEST_PANIC_CHILD";

/// Run by [`nothing_outlives_a_panicking_test`] in a child process: a process node with a
/// running static pod, then a panic.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "the child half of nothing_outlives_a_panicking_test"]
async fn panic_with_a_process_node_running() {
    assert!(
        std::env::var_os(PANIC_CHILD).is_some(),
        "run by nothing_outlives_a_panicking_test"
    );
    let cp = control_plane::shared().await;
    let node = cp.add_process_node("pn-panic", &[]).await;
    let (client, peer) = (free_port(), free_port());
    apply(&node, "etcd", &etcd_manifest("etcd", client, peer));
    let addr = format!("{}:{client}", node.ip);
    eventually(WAIT, "etcd answering", || {
        let addr = addr.clone();
        async move { etcd_health(&addr) }
    })
    .await;
    panic!("etcd-at={addr} (a test failing with a node up)");
}

#[test]
fn nothing_outlives_a_panicking_test() {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "panic_with_a_process_node_running",
            "--nocapture",
        ])
        .env(PANIC_CHILD, "1")
        // The child's node runs beside this binary's own: on a network of its own.
        .env(support::nodes::PROCESS_NODE_NET, "127.0.3")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the child test must fail:\n{text}");
    let addr = text
        .split("etcd-at=")
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .unwrap_or_else(|| panic!("the child did not get its node up:\n{text}"))
        .to_owned();
    let dir = text
        .split("logs and state in ")
        .nth(1)
        .and_then(|t| t.lines().next())
        .unwrap()
        .trim()
        .to_owned();
    // The container (etcd on the node's address) and every process started for the child's
    // control plane (their command lines name its directory) are gone.
    let left_running = || {
        let survivors: Vec<String> = fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| fs::read(e.path().join("cmdline")).ok())
            .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
            .filter(|c| c.contains(&dir))
            .collect();
        (etcd_health(&addr).is_some(), survivors)
    };
    Poll::new(
        Duration::from_secs(10),
        "every process gone after the test binary exited",
    )
    .every(Duration::from_millis(100))
    .context(|| {
        let (etcd_up, survivors) = left_running();
        format!("left running: etcd up: {etcd_up}; {survivors:#?}")
    })
    .until(|| {
        let (etcd_up, survivors) = left_running();
        survivors.is_empty() && !etcd_up
    });
}
