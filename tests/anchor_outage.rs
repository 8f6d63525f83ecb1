//! `kube-anchor run` while the API server is down: files keep being kept in sync, nothing is
//! deleted, readiness says why, and it recovers when the API returns; an anchor started during
//! the outage publishes its node's AnchorStatus once the API answers. (Its own test binary: it
//! stops the API server of its control plane.)

mod support;

use std::fs;
use std::time::{Duration, Instant};

use support::control_plane;
use support::daemon::*;
use support::pki;

const MANIFEST: &str = "etc/kubernetes/manifests/kube-controller-manager.yaml";
const KUBECONFIG: &str = "etc/kubernetes/controller-manager.conf";

#[tokio::test(flavor = "multi_thread")]
async fn api_outage_keeps_files_in_sync_and_deletes_nothing() {
    let cp = control_plane::shared().await;
    cp.anchor_service_account().await; // the AnchorStatus CRD
    let node = cp.add_node("outage-node", &[]).await;
    let ns = cp.namespace("outage").await;
    let work = tempfile::tempdir().unwrap();
    let pod = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: kube-controller-manager, namespace: {ns}}}\nspec:\n  hostNetwork: true\n  containers: [{{name: c, image: 'registry.k8s.io/kube-controller-manager:v1.36.3'}}]\n"
    );
    let config = anchor_config(
        "kube-controller-manager",
        &[("kcm.conf", "/etc/kubernetes/controller-manager.conf", "0600")],
        "/etc/kubernetes/manifests/kube-controller-manager.yaml",
    );
    let volume = ConfigVolume::new(
        &work.path().join("config"),
        &[
            ("anchor.yaml", config.as_bytes()),
            ("pod.yaml", pod.as_bytes()),
            ("kcm.conf", b"kubeconfig"),
        ],
    );
    let start = |pod: &str| {
        let args: Vec<String> = [
            "--kubeconfig",
            cp.admin_kubeconfig.to_str().unwrap(),
            "--trial-period",
            "1h",
            "--pod-name",
            pod,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        Daemon::start(
            &volume.config(),
            &node.host_root(),
            &node.name,
            &args,
            &work.path().join(format!("{pod}.log")),
        )
    };
    let d = start("outage-anchor-1");
    let host = |p: &str| node.host_root().join(p);
    wait_until(Duration::from_secs(90), "ready before the outage", &d, || {
        d.get("/readyz").is_some_and(|(c, _)| c == 200)
    });
    let ledger_hash = || {
        let bytes = fs::read(
            node.host_root()
                .join("var/lib/kube-anchor/v1/kube-controller-manager.json"),
        )
        .unwrap();
        kube_anchor_core::ledger::Ledger::decode(&bytes).unwrap().content_hash
    };
    let published = || {
        let out = support::kubectl::kubectl(
            &cp.admin_kubeconfig,
            &[
                "get",
                "anchorstatus",
                &format!("{}.kube-controller-manager", node.name),
                "-o",
                "jsonpath={.status.pod} {.status.appliedHash} {.status.state} {.status.ready}",
            ],
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let on_trial_by = |pod: &str| format!("{pod} {} on-trial true", ledger_hash().unwrap());
    wait_until(
        Duration::from_secs(30),
        "the AnchorStatus before the outage",
        &d,
        || published() == on_trial_by("outage-anchor-1"),
    );

    cp.stop_apiserver();
    wait_until(Duration::from_secs(60), "readiness to report the outage", &d, || {
        d.get("/readyz")
            .is_some_and(|(c, body)| c == 503 && body.contains("API unreachable"))
    });
    // Drift is still repaired with no API...
    fs::remove_file(host(KUBECONFIG)).unwrap();
    fs::write(host(MANIFEST), "tampered").unwrap();
    wait_until(Duration::from_secs(10), "repair during the outage", &d, || {
        fs::read(host(KUBECONFIG)).is_ok_and(|c| c == b"kubeconfig")
            && fs::read_to_string(host(MANIFEST)).is_ok_and(|m| m.contains("kube-anchor.io/content-hash"))
    });
    // ...and nothing is ever deleted, however long it lasts.
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        assert!(host(MANIFEST).exists() && host(KUBECONFIG).exists());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(d.metric("kube_anchor_rollbacks_total"), 0.0);
    // The node's anchor pod is replaced while there is no API: the new one keeps the state in
    // its ledger and has nobody to tell.
    drop(d);
    let d = start("outage-anchor-2");
    wait_until(Duration::from_secs(30), "the new anchor's first sync", &d, || {
        d.get("/readyz").is_some_and(|(c, _)| c == 503)
    });

    // The preStop hook in an outage keeps everything, and returns within its timeout: with the
    // API server stopped (connection refused), and with one that accepts but never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_kubeconfig = work.path().join("silent.kubeconfig");
    pki::write_kubeconfig(
        &silent_kubeconfig,
        &format!("https://{}", silent.local_addr().unwrap()),
        &cp.pki.ca(),
        &pki::Identity::Token("x".into()),
    );
    for kubeconfig in [cp.admin_kubeconfig.clone(), silent_kubeconfig] {
        let start = Instant::now();
        let out = std::process::Command::new(support::fixture::BIN)
            .args(["pre-stop", "--output", "json", "--timeout", "4s", "--config"])
            .arg(volume.config())
            .arg("--host-root")
            .arg(node.host_root())
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .env("POD_NAME", "anchor-pod")
            .env("POD_NAMESPACE", &ns)
            .env("NODE_NAME", &node.name)
            .output()
            .unwrap();
        let took = start.elapsed();
        assert!(took < Duration::from_secs(6), "pre-stop took {took:?}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("\"decision\":\"keep\""),
            "{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(host(MANIFEST).exists() && host(KUBECONFIG).exists());
    }
    drop(silent);

    cp.restart_apiserver().await;
    wait_until(Duration::from_secs(90), "ready again after the outage", &d, || {
        d.get("/readyz").is_some_and(|(c, _)| c == 200)
    });
    // Published once the API answers: the new pod's view, the ledger's version.
    wait_until(Duration::from_secs(30), "the AnchorStatus after the outage", &d, || {
        published() == on_trial_by("outage-anchor-2")
    });
}
