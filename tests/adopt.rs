//! A running kubeadm control plane taken over by the charts, as the README's "Adopt a kubeadm
//! control plane" says: a process node whose /etc/kubernetes the pinned release's own kubeadm
//! wrote (certs, kubeconfigs, control-plane and etcd phases), its kubelet running kubeadm's
//! static pods as real processes; `kube-anchor import` of that node; the four component charts
//! installed with the imported values, staged behind a node label; the node labelled; the
//! charts upgraded back to their own node selector.
//!
//! What it proves, from sources that do not depend on the API being up:
//! - each component's manifest is written exactly once (its inode, sampled every 50 ms), and one
//!   new static pod of each component is started (the kubelet's own log of the containers it
//!   starts names the pod's UID, the kubelet's hash of the manifest); the upgrade back to the
//!   charts' node selector writes nothing;
//! - every other file under /etc/kubernetes is adopted as it is: same inode, same mtime, same
//!   bytes;
//! - every mirror pod ends Running and Ready with the hash its anchor wrote.
//!
//! And it measures what a single node cannot avoid: a client polls the API (a read from etcd)
//! throughout and reports its failed requests and every outage. The one API server's restart is
//! an outage, and so is etcd's: the kubelet starts the new etcd only after its request to delete
//! the old mirror pod gives up, which with no etcd behind the API server takes about 35 s. Starts
//! of an existing pod (a controller-manager or scheduler that exits when it loses its leader
//! lease during an outage, started again by the kubelet) are counted and printed: they follow
//! from the outages of a single node, not from a write.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::DaemonSet;
use kube::api::{Api, ListParams};
use support::background::Background;
use support::fixture::BIN;
use support::helm::chart;
use support::kubeadm::{kubeadm_node, run_ok};
use support::nodes::link_images;
use support::poll::eventually;
use support::poller::Poller;
use support::processes::test_dir;
use support::selfhosted::{COMPONENTS, SelfHosted, SelfHostedNode, files_under};

const NODE: (&str, &str) = ("cp-1", "127.0.4.1");
const ADOPT_LABEL: &str = "kube-anchor.io/adopt";

/// Short trials, so the takeover takes minutes (the charts' default is 5 minutes). An API server
/// takes about 47 s here from its new manifest to Ready; a trial must outlast that restart.
fn test_values(component: &str) -> &'static str {
    match component {
        "kube-apiserver" => "anchor: {trialPeriod: 75s, logFormat: plain}\n",
        _ => "anchor: {trialPeriod: 25s, logFormat: plain}\n",
    }
}

/// The static pod (its UID: the kubelet's hash of the manifest) of every start of each
/// component's container, in order, from the kubelet's log: the process runtime logs
/// `"container started" id="<pod>_<namespace>_<pod uid>_<n>_<container>_<attempt>"` for each.
fn container_starts(kubelet_log: &Path) -> BTreeMap<String, Vec<String>> {
    let text = fs::read_to_string(kubelet_log).unwrap();
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in text.lines().filter(|l| l.contains("\"container started\"")) {
        let Some((_, id)) = line.split_once(" id=\"") else {
            continue;
        };
        let id = id.split('"').next().unwrap_or_default();
        let parts: Vec<&str> = id.split('_').collect();
        if let [_, "kube-system", uid, _, container, _] = parts[..]
            && COMPONENTS.contains(&container)
        {
            out.entry(container.to_owned()).or_default().push(uid.to_owned());
        }
    }
    out
}

/// Every inode each component's manifest has had, and when it was first seen (from the
/// sampler's start), sampled every 50 ms until stopped.
fn manifest_inodes(host: &Path) -> Background<BTreeMap<String, Vec<(u64, Duration)>>> {
    let manifests: Vec<(String, PathBuf)> = COMPONENTS
        .iter()
        .map(|c| (c.to_string(), host.join(format!("etc/kubernetes/manifests/{c}.yaml"))))
        .collect();
    let started = Instant::now();
    Background::sample(Duration::from_millis(50), BTreeMap::new(), move |seen| {
        for (component, path) in &manifests {
            let ino = fs::metadata(path).map(|m| m.ino()).unwrap_or(0);
            let inodes: &mut Vec<(u64, Duration)> = seen.entry(component.clone()).or_default();
            if inodes.last().map(|(i, _)| *i) != Some(ino) {
                inodes.push((ino, started.elapsed()));
            }
        }
    })
}

/// `helm install|upgrade` of one component chart with the imported values and the test's own.
fn helm_release(cluster: &SelfHosted, verb: &str, component: &str, extra: &[&str]) {
    let chart_dir = chart(component);
    let imported = cluster.dir.join(format!("imported/{component}.yaml"));
    let test_values = cluster.dir.join(format!("test-values/{component}.yaml"));
    let mut args = vec![
        verb,
        component,
        chart_dir.as_str(),
        "-f",
        imported.to_str().unwrap(),
        "-f",
        test_values.to_str().unwrap(),
    ];
    args.extend(extra);
    cluster.helm(&args);
}

/// The anchor DaemonSets, once the DaemonSet controller has seen their latest generation:
/// (name, pods it wants scheduled).
async fn anchor_daemonsets(client: &kube::Client) -> Option<Vec<(String, i32)>> {
    let api: Api<DaemonSet> = Api::namespaced(client.clone(), "kube-system");
    let list = api.list(&ListParams::default()).await.ok()?;
    let mut out = Vec::new();
    for ds in list.items {
        let status = ds.status?;
        if status.observed_generation != ds.metadata.generation {
            return None;
        }
        out.push((ds.metadata.name?, status.desired_number_scheduled));
    }
    (out.len() == COMPONENTS.len()).then_some(out)
}

/// (inode, mtime) of every file under the node's /etc/kubernetes but the manifests.
fn credential_files(host: &Path) -> BTreeMap<PathBuf, (u64, i64, i64, Vec<u8>)> {
    let manifests = host.join("etc/kubernetes/manifests");
    files_under(&host.join("etc/kubernetes"))
        .into_iter()
        .filter(|p| !p.starts_with(&manifests))
        .map(|p| {
            let m = fs::metadata(&p).unwrap();
            let content = fs::read(&p).unwrap();
            (p, (m.ino(), m.mtime(), m.mtime_nsec(), content))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_kubeadm_control_plane_is_taken_over_by_the_charts() {
    let dir = test_dir().join("adopt");
    println!(
        "cluster dir (logs of every process; kept when the test fails): {}",
        dir.display()
    );
    let (name, ip) = NODE;
    let root = dir.join("nodes").join(name);
    let host = root.join("host");
    let started = Instant::now();
    let kubeadm = kubeadm_node(&host, name, ip, None);
    // kubeadm's admin.conf gets its rights from a ClusterRoleBinding that `kubeadm init` creates
    // in a later phase, through super-admin.conf (group system:masters); the test uses the latter.
    fs::copy(
        kubeadm.root.join("etc/kubernetes/super-admin.conf"),
        dir.join("admin.conf"),
    )
    .unwrap();
    let images = dir.join("images");
    link_images(&images);
    let mut node = SelfHostedNode::new(
        name,
        ip,
        root.clone(),
        &host.join("etc/kubernetes/kubelet.conf"),
        &host.join("etc/kubernetes/pki/ca.crt"),
        &images,
    );
    node.boot(&dir);
    let cluster = SelfHosted {
        dir: dir.clone(),
        nodes: vec![node],
        bootstrapped: Duration::ZERO,
        readyz_everywhere: Duration::ZERO,
    };
    eventually(Duration::from_secs(180), "/readyz of kubeadm's API server", || async {
        cluster.readyz(&cluster.nodes[0]).ok().filter(|a| a.trim() == "ok")
    })
    .await;
    cluster.register_nodes().await;
    // What kubeadm's mark-control-plane phase does: the charts' nodeSelector.
    cluster.kubectl(&["label", "node", name, "node-role.kubernetes.io/control-plane="]);
    let client = cluster.client(0).await;
    let mirror_before = eventually(
        Duration::from_secs(180),
        "kubeadm's static pods Running and Ready",
        || cluster.static_pod_starts(&client),
    )
    .await;
    let kubeadm_up = started.elapsed();
    let kubelet_log = cluster.nodes[0].kubelet_log().unwrap().to_owned();
    let starts_before = container_starts(&kubelet_log);
    for component in COMPONENTS {
        assert!(
            starts_before.contains_key(component),
            "{component}: no start in {}",
            kubelet_log.display()
        );
    }
    let credentials_before = credential_files(&host);

    // `kube-anchor import` of the running node.
    let imported = dir.join("imported");
    run_ok(
        Command::new(BIN)
            .args(["import", "--host-root"])
            .arg(&host)
            .arg("--output-dir")
            .arg(&imported)
            .output()
            .unwrap(),
        "kube-anchor import",
    );
    fs::create_dir_all(dir.join("test-values")).unwrap();
    for component in COMPONENTS {
        fs::write(
            dir.join(format!("test-values/{component}.yaml")),
            test_values(component),
        )
        .unwrap();
    }

    let sampler = manifest_inodes(&host);
    let poller = Poller::start(cluster.admin_kubeconfigs());
    let polling = Instant::now();

    // 1. Every chart, selecting only nodes labelled for adoption: no anchor starts.
    let staged = format!("nodeSelector.{}=true", ADOPT_LABEL.replace('.', "\\."));
    for component in COMPONENTS {
        helm_release(&cluster, "install", component, &["--set-string", &staged]);
    }
    let daemonsets = eventually(Duration::from_secs(60), "the anchor DaemonSets observed", || {
        anchor_daemonsets(&client)
    })
    .await;
    assert!(
        daemonsets.iter().all(|(_, desired)| *desired == 0),
        "an anchor was scheduled before the node was labelled: {daemonsets:?}"
    );

    // 2. The node labelled: its anchors take the components over and turn Ready only once the
    // static pods run what they wrote.
    let labelled = Instant::now();
    cluster.kubectl(&["label", "node", name, &format!("{ADOPT_LABEL}=true")]);
    cluster.wait_anchors_ready(Duration::from_secs(420)).await;
    for component in COMPONENTS {
        cluster.wait_promoted(component, Duration::from_secs(240)).await;
    }
    let adopted = labelled.elapsed();

    // 3. Back to the charts' own node selector (a rolling update of every anchor), then the
    // label dropped.
    let upgraded = Instant::now();
    for component in COMPONENTS {
        helm_release(&cluster, "upgrade", component, &[]);
    }
    cluster.wait_anchors_ready(Duration::from_secs(300)).await;
    cluster.kubectl(&["label", "node", name, &format!("{ADOPT_LABEL}-")]);
    // A decommission would start within moments of the label going; give it time to show.
    tokio::time::sleep(Duration::from_secs(10)).await;
    cluster.wait_anchors_ready(Duration::from_secs(120)).await;
    let rolled = upgraded.elapsed();

    let polled = poller.finish();
    let inodes = sampler.finish();
    let starts_after = container_starts(&kubelet_log);
    let mirror_after = eventually(Duration::from_secs(120), "every static pod Running and Ready", || {
        cluster.static_pod_starts(&client)
    })
    .await;

    println!("kubeadm node up (kubeadm phases, kubelet, /readyz, static pods Ready): {kubeadm_up:?}");
    println!(
        "label (at {:.0} s) -> every anchor Ready and every version last-known-good: {adopted:?}",
        (labelled - polling).as_secs_f64()
    );
    println!("upgrade back to the charts' node selector -> every anchor Ready: {rolled:?}");
    let windows: Vec<String> = polled
        .outage_windows
        .iter()
        .map(|(at, len)| format!("{:.1} s at {:.0} s", len.as_secs_f64(), at.as_secs_f64()))
        .collect();
    println!(
        "API poll (from the install on): {} requests, {} failed; outages: {}",
        polled.requests,
        polled.failed,
        windows.join(", ")
    );
    let mut failures = Vec::new();
    for component in COMPONENTS {
        // A start of a pod not seen before is a new manifest at work; one of the same pod is the
        // kubelet restarting an exited container.
        let before = &starts_before[component];
        let after = &starts_after[component][before.len()..];
        let pods: BTreeSet<&String> = after.iter().filter(|uid| !before.contains(uid)).collect();
        let restarted = after.len() - pods.len();
        let rewritten = pods.len();
        let mirror = format!("{component}-{name}");
        let written: Vec<String> = inodes[component][1..]
            .iter()
            .map(|(_, at)| format!("{:.0} s", at.as_secs_f64()))
            .collect();
        println!(
            "{component}: manifest written at {}; new static pods started {rewritten}, containers \
             restarted {restarted}; mirror pod (restartCount, startedAt) {:?} -> {:?}",
            written.join(", "),
            mirror_before[&mirror],
            mirror_after[&mirror]
        );
        // The first sample is kubeadm's manifest, the second the chart's; none after.
        if inodes[component].len() != 2 {
            failures.push(format!(
                "{component}: manifest written {} times",
                inodes[component].len() as i64 - 1
            ));
        }
        if rewritten != 1 {
            failures.push(format!("{component}: {rewritten} new static pods started, not one"));
        }
        let running = cluster.static_pod_hash(&client, &mirror).await;
        if running != cluster.nodes[0].written_hash(component) {
            failures.push(format!(
                "{mirror} runs {running:?}, its anchor wrote {:?}",
                cluster.nodes[0].written_hash(component)
            ));
        }
    }
    let credentials_after = credential_files(&host);
    for (path, before) in &credentials_before {
        match credentials_after.get(path) {
            Some(after) if after == before => {}
            Some(_) => failures.push(format!("{} was rewritten", path.display())),
            None => failures.push(format!("{} is gone", path.display())),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // One API server and one etcd member: the API is out while either restarts (each under a
    // minute here), never longer.
    assert!(polled.requests > 100, "{polled:?}");
    assert!(
        polled.longest_outage() < Duration::from_secs(150),
        "the API was out for {:?}",
        polled.longest_outage()
    );
}
