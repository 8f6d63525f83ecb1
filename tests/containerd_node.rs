//! A node on the real container runtime: the real kubelet, containerd and runc, built from their
//! Go modules, in a root and a cgroup of the node's own (`tools/containerd-node.sh`), pulling every
//! image by digest from a local registry, as a production node does. runc enforces what the process runtime imitates:
//! the user, the capability sets, no_new_privs and the read-only root of the anchor's container
//! as the chart asks, in namespaces and cgroups of its own.
//!
//! One scenario on one node, the kube-scheduler chart:
//! - installed from the registry by image digest; the anchor runs under exactly the chart's
//!   securityContext (read from the running process), in its pod's cgroup of the kubelet's QoS
//!   tree below the node's, with the chart's memory limit, writes the manifest and the credential,
//!   and the kubelet runs the scheduler's image from it, Ready;
//! - a `helm upgrade` to an image the registry does not have: the anchor pulls it through the CRI
//!   before asking for its turn, the pull fails (a Warning Event `ImagePullFailed` names the
//!   image), and nothing is written or restarted; then an image the registry has and the node
//!   not yet: pulled by the anchor before its turn, rolled out and promoted;
//! - a bad `helm upgrade` (a flag the scheduler refuses), its anchor cut off from the API once the
//!   version is written: the crash loop is judged from containerd's CRI alone and rolled back;
//!   the Warning Event follows once the API is back;
//! - a hard reboot with no API server and no registry: containerd's own store and the manifest on
//!   disk bring the scheduler back;
//! - `helm uninstall`: the preStop hook runs in the container (a CRI exec, runc exec) and removes
//!   the manifest and the credential.

mod support;

use std::fs;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams};
use support::control_plane::{self, ControlPlane};
use support::helm::{chart, helm, ok};
use support::nodes::node_cgroup;
use support::poll::eventually;
use support::processes::tool;
use support::registry::Registry;
use support::severable::Severable;

const WAIT: Duration = Duration::from_secs(180);
const NODE: &str = "containerd-1";

fn ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// `image@digest` split in the chart's two values.
fn split(reference: &str) -> (&str, &str) {
    reference.split_once('@').unwrap()
}

/// The node's processes whose command line starts with `argv` (the program by its base name):
/// `["kube-anchor", "run"]` is the anchor, not the exec probes beside it.
fn processes(cp: &ControlPlane, argv: &[&str]) -> Vec<u32> {
    cp.node_pids(NODE)
        .into_iter()
        .filter(|pid| {
            let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let args: Vec<String> = cmdline
                .split(|b| *b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            let program = args
                .first()
                .and_then(|a| Path::new(a).file_name())
                .map(|n| n.to_string_lossy().into_owned());
            program.as_deref() == Some(argv[0]) && args.len() >= argv.len() && args[1..argv.len()] == argv[1..]
        })
        .collect()
}

/// `field` of `/proc/<pid>/status`.
fn status_field(pid: u32, field: &str) -> String {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("{field} in /proc/{pid}/status"))
        .trim()
        .to_owned()
}

/// The root mount of process `pid` is read-only.
fn root_read_only(pid: u32) -> bool {
    let mountinfo = fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
    mountinfo.lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.get(4) == Some(&"/") && f.get(5).is_some_and(|o| o.split(',').any(|o| o == "ro"))
    })
}

fn ledger(host: &Path) -> Option<serde_json::Value> {
    let path = host.join("var/lib/kube-anchor/v1/kube-scheduler.json");
    let v: serde_json::Value = serde_json::from_slice(&fs::read(path).ok()?).ok()?;
    Some(v["ledger"].clone())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_scheduler_chart_runs_on_containerd_and_runc() {
    let cp = control_plane::shared().await;
    cp.start_controllers();
    let registry = Registry::start(&cp.dir.join("registry"));
    let pause = registry.push_component("pause", &tool("runtime").join("pause"));
    let anchor_image = registry.push_kube_anchor();
    let scheduler_image = registry.push_component("kube-scheduler", &tool("kube-scheduler"));
    let label = ("kube-anchor.io/containerd", "yes");
    let node = cp.add_containerd_node(NODE, &[label], &registry, &pause).await;
    let host = node.host_root();
    let ns = cp.namespace("containerd").await;
    let admin = cp.admin().await;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    let system: Api<Pod> = Api::namespaced(admin.clone(), "kube-system");
    let mirror = format!("kube-scheduler-{NODE}");

    // The anchor reaches the API through a path the test can cut (the in-cluster address is a
    // Service IP that nothing routes here: no kube-proxy, as on a node bootstrapping its
    // control plane).
    let api = Severable::start(cp.server.trim_start_matches("https://").parse().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let (crt, key) = cp.pki.issue("containerd-scheduler", "system:kube-scheduler", None, &[]);
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
    let indent = |text: String| text.lines().map(|l| format!("    {l}\n")).collect::<String>();
    let (anchor_repo, anchor_digest) = split(&anchor_image);
    let (scheduler_repo, scheduler_digest) = split(&scheduler_image);
    let values = dir.path().join("values.yaml");
    fs::write(
        &values,
        format!(
            "image: {{repository: \"{anchor_repo}\", digest: \"{anchor_digest}\"}}\n\
             nodeSelector:\n  node-role.kubernetes.io/control-plane: null\n  {}: \"{}\"\n\
             anchor:\n  trialPeriod: 60s\n  crashLoopThreshold: 2\n  port: 0\n  logFormat: plain\n  apiServers: [\"{}\"]\n\
             component:\n  image: \"{scheduler_repo}\"\n  digest: \"{scheduler_digest}\"\n  extraArgs: {{leader-elect: \"false\"}}\n\
             credentials:\n  scheduler.conf: |\n{}",
            label.0,
            label.1,
            api.url(),
            indent(scheduler_conf)
        ),
    )
    .unwrap();
    let chart = chart("kube-scheduler");
    let release = |verb: &str, extra: &[&str]| {
        let mut args = vec![verb, "sched", &chart, "-n", &ns, "-f", values.to_str().unwrap()];
        args.extend(extra);
        args.extend(["--kubeconfig", cp.admin_kubeconfig.to_str().unwrap(), "--wait=false"]);
        ok(&helm(&args));
    };
    release("install", &[]);

    // The anchor pod, pulled by digest, runs under runc with exactly the chart's privileges.
    let anchor = eventually(WAIT, "the anchor pod Running and Ready on the containerd node", || {
        let pods = pods.clone();
        async move {
            let list = pods.list(&ListParams::default()).await.ok()?;
            list.items.into_iter().find(ready)
        }
    })
    .await;
    let status = anchor.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0].clone();
    assert!(
        status.image_id.ends_with(anchor_digest),
        "the anchor runs the pushed image: {}",
        status.image_id
    );
    let anchors = processes(cp, &["kube-anchor", "run"]);
    assert_eq!(anchors.len(), 1, "one kube-anchor process on the node");
    let pid = anchors[0];
    assert_eq!(status_field(pid, "Uid").split_whitespace().next(), Some("0"));
    // CHOWN (bit 0) and DAC_READ_SEARCH (bit 2), nothing else, in every set that grants.
    for set in ["CapEff", "CapPrm", "CapBnd"] {
        assert_eq!(status_field(pid, set), "0000000000000005", "{set} of the anchor");
    }
    assert_eq!(status_field(pid, "CapAmb"), "0000000000000000");
    assert_eq!(status_field(pid, "NoNewPrivs"), "1");
    assert!(root_read_only(pid), "the anchor's root filesystem is read-only");
    assert_ne!(
        fs::read_link(format!("/proc/{pid}/ns/pid")).unwrap(),
        fs::read_link(format!("/proc/{}/ns/pid", cp.node_pids(NODE)[0])).unwrap(),
        "the anchor has a PID namespace of its own"
    );
    // Its cgroup is one runc made below the node's cgroup root, with the chart's memory limit.
    let cgroups = fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let memory = cgroups
        .lines()
        .find_map(|l| l.split_once(":memory:").map(|(_, path)| path.to_owned()))
        .unwrap();
    // The kubelet's own QoS tree below the node's cgroup root: the anchor asks less than its
    // limit, so Burstable.
    let uid = anchor.metadata.uid.as_deref().unwrap().replace('-', "_");
    let pod_cgroup = format!("/{}/kubepods/burstable/pod{uid}/", node_cgroup(NODE));
    assert!(
        memory.contains(&pod_cgroup) || memory.contains(&pod_cgroup.replace('_', "-")),
        "the anchor's memory cgroup {memory} is its pod's in the kubelet's Burstable tier below the node's"
    );
    let limit = fs::read_to_string(format!("/sys/fs/cgroup/memory{memory}/memory.limit_in_bytes")).unwrap();
    assert_eq!(limit.trim(), (48u64 << 20).to_string(), "the chart's 48Mi memory limit");

    // It writes the manifest and the credential; the kubelet runs the scheduler's image.
    let manifest = host.join("etc/kubernetes/manifests/kube-scheduler.yaml");
    let credential = host.join("etc/kubernetes/scheduler.conf");
    let scheduler = eventually(WAIT, "the scheduler's mirror pod Ready", || {
        let (system, mirror) = (system.clone(), mirror.clone());
        async move { system.get_opt(&mirror).await.ok()?.filter(ready) }
    })
    .await;
    let image_id = scheduler.status.unwrap().container_statuses.unwrap()[0]
        .image_id
        .clone();
    assert!(
        image_id.ends_with(scheduler_digest),
        "the scheduler runs the pushed image: {image_id}"
    );
    assert!(fs::read_to_string(&manifest).unwrap().contains(scheduler_digest));
    let mode = fs::metadata(&credential).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
        0o600
    );
    eprintln!(
        "memory: containerd node with a kubelet, containerd, an anchor and kube-scheduler: {} MiB",
        cp.node_rss_kib(NODE) / 1024
    );
    let good = eventually(WAIT, "the first version promoted to last-known-good", || {
        let host = host.clone();
        async move {
            let l = ledger(&host)?;
            (l["lastKnownGood"] == l["contentHash"]).then(|| l["contentHash"].as_str().map(str::to_owned))?
        }
    })
    .await;

    // A version whose image the registry does not have: the anchor pulls it through the CRI
    // before asking for its turn, the pull fails, and nothing restarts: the manifest, the ledger
    // and the scheduler's container stay as they were, and a Warning Event names the image.
    let container = |pod: Pod| {
        let status = pod.status?.container_statuses?.into_iter().next()?;
        Some((status.container_id, status.restart_count))
    };
    let before = container(system.get(&mirror).await.unwrap());
    assert!(before.is_some(), "the scheduler's container");
    let missing = format!("sha256:{}", "0".repeat(64));
    release("upgrade", &["--set", &format!("component.digest={missing}")]);
    let event = control_plane::event(&admin, &ns, "ImagePullFailed", None, WAIT).await;
    let note = event.note.unwrap_or_default();
    assert!(
        note.contains(&missing) && note.contains("cannot pull image") && note.contains("nothing restarted"),
        "the Event names the image: {note}"
    );
    assert!(
        !fs::read_to_string(&manifest).unwrap().contains(&missing),
        "a version whose image is not on the node is not written"
    );
    let held = ledger(&host).unwrap();
    assert_eq!(held["contentHash"].as_str(), Some(good.as_str()), "{held}");
    assert!(
        held["bad"].as_array().is_none_or(|b| b.is_empty()),
        "nothing recorded bad: {held}"
    );
    assert_eq!(
        container(system.get(&mirror).await.unwrap()),
        before,
        "the scheduler was not restarted"
    );
    eprintln!("image pull failed, nothing restarted: {note}");
    // An image the registry has and the node not yet (a rebuild of the same scheduler, a few
    // bytes longer: another digest): the anchor pulls it before asking for its turn, then rolls
    // it out, and it passes its trial.
    let rebuilt = dir.path().join("kube-scheduler");
    fs::copy(tool("kube-scheduler"), &rebuilt).unwrap();
    std::io::Write::write_all(
        &mut fs::OpenOptions::new().append(true).open(&rebuilt).unwrap(),
        b"rebuilt",
    )
    .unwrap();
    let rebuilt_image = registry.push_component("kube-scheduler", &rebuilt);
    let (_, rebuilt_digest) = split(&rebuilt_image);
    assert_ne!(rebuilt_digest, scheduler_digest);
    release("upgrade", &["--set", &format!("component.digest={rebuilt_digest}")]);
    let good = eventually(WAIT, "the rebuilt scheduler written and promoted", || {
        let (host, manifest) = (host.clone(), manifest.clone());
        async move {
            let l = ledger(&host)?;
            let written = fs::read_to_string(&manifest).ok()?.contains(rebuilt_digest);
            (written && l["lastKnownGood"] == l["contentHash"]).then(|| l["contentHash"].as_str().map(str::to_owned))?
        }
    })
    .await;
    let anchor = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .find(ready)
        .expect("a Ready anchor pod");
    let log = pods
        .logs(anchor.metadata.name.as_deref().unwrap(), &Default::default())
        .await
        .unwrap();
    let pulled = log
        .lines()
        .position(|l| l.contains("image pulled") && l.contains(rebuilt_digest));
    let turn = log.lines().position(|l| l.contains("this node's turn: rolling out"));
    assert!(
        matches!((pulled, turn), (Some(p), Some(t)) if p < t),
        "the anchor pulled the image before its turn:\n{log}"
    );
    eprintln!("the rebuilt scheduler's image pulled by the anchor before its turn, then promoted");
    // The values name it from here on.
    let text = fs::read_to_string(&values).unwrap();
    fs::write(&values, text.replace(scheduler_digest, rebuilt_digest)).unwrap();

    // A bad push, judged with no API: once the new anchor has written the version, its path to
    // the API is cut, so only containerd's CRI shows the crash loop.
    release("upgrade", &["--set", "component.extraArgs.no-such-flag=1"]);
    eventually(WAIT, "the bad version written", || {
        let manifest = manifest.clone();
        async move {
            fs::read_to_string(&manifest)
                .ok()?
                .contains("no-such-flag")
                .then_some(())
        }
    })
    .await;
    api.sever();
    let back = eventually(WAIT, "the bad version rolled back with the API cut off", || {
        let (host, good) = (host.clone(), good.clone());
        async move {
            let l = ledger(&host)?;
            (l["contentHash"].as_str() == Some(good.as_str()) && l["bad"].as_array()?.len() == 1).then_some(l)
        }
    })
    .await;
    assert!(!fs::read_to_string(&manifest).unwrap().contains("no-such-flag"));
    let bad = back["bad"][0]["hash"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| back["bad"][0].to_string());
    api.restore();
    let event = control_plane::event(&admin, &ns, "RolledBack", None, WAIT).await;
    let note = event.note.unwrap_or_default();
    assert!(note.contains(&good), "rolled back to {good}: {note}");
    // A crash loop once the kubelet has restarted it past the threshold, or, on a machine slow
    // enough that its back-off leaves fewer attempts in the trial's first minute, not converged
    // with the runtime's word on the exited container: either way the CRI's evidence.
    assert!(
        note.contains("(container runtime)") || note.contains("container runtime: container kube-scheduler exited"),
        "judged from containerd's CRI: {note}"
    );
    eventually(WAIT, "the last-known-good scheduler Ready again", || {
        let (system, mirror) = (system.clone(), mirror.clone());
        async move { system.get_opt(&mirror).await.ok()?.filter(ready).map(|_| ()) }
    })
    .await;
    eprintln!("rolled back {bad} with the API cut off");

    // A hard reboot with no API server and no registry: the scheduler comes back from the
    // manifest on disk and the image in containerd's store.
    drop(registry);
    cp.stop_kubelet(NODE);
    assert!(processes(cp, &["kube-scheduler"]).is_empty());
    cp.start_kubelet_without_api(NODE);
    eventually(
        WAIT,
        "kube-scheduler running again after the reboot, with no API",
        || {
            let found = !processes(cp, &["kube-scheduler"]).is_empty();
            async move { found.then_some(()) }
        },
    )
    .await;
    assert!(
        processes(cp, &["kube-anchor", "run"]).is_empty(),
        "no DaemonSet pod without the API"
    );
    cp.stop_kubelet(NODE);
    cp.start_kubelet(NODE);
    // Once the API is back the anchor pod runs again; it stays unready, holding the rollout of
    // the version it rolled back.
    eventually(WAIT, "the anchor running again once the API is back", || {
        let found = processes(cp, &["kube-anchor", "run"]).len() == 1;
        async move { found.then_some(()) }
    })
    .await;

    // Uninstall: the preStop hook runs inside the container (CRI exec, runc exec) and, the Node
    // consenting (the scheduler's last copy is guarded), removes the component.
    let consent = serde_json::json!({"metadata": {"annotations": {"kube-anchor.io/decommission": "true"}}});
    Api::<Node>::all(admin.clone())
        .patch(NODE, &PatchParams::default(), &Patch::Merge(&consent))
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
    eventually(WAIT, "the manifest and credential removed by the preStop hook", || {
        let (manifest, credential) = (manifest.clone(), credential.clone());
        async move { (!manifest.exists() && !credential.exists()).then_some(()) }
    })
    .await;
    eventually(WAIT, "the scheduler gone from the node", || {
        let gone = processes(cp, &["kube-scheduler"]).is_empty();
        async move { gone.then_some(()) }
    })
    .await;
    // Stopped, the node's cgroups go too.
    cp.stop_kubelet(NODE);
}
