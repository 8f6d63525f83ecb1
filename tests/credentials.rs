//! Credentials checked before they are written, through the real binary: each bad credential
//! is refused with exit 1 and a message naming the file and the certificate, and the node
//! keeps every file as it was; rotations pass.

mod support;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, date_time_ymd};
use support::fixture::*;

const CERT: &str = "/etc/kubernetes/pki/apiserver.crt";
const KEY: &str = "/etc/kubernetes/pki/apiserver.key";
const CA: &str = "/etc/kubernetes/pki/ca.crt";
const MANIFEST_PATH: &str = "/etc/kubernetes/manifests/kube-apiserver.yaml";

struct Ca {
    params: CertificateParams,
    key: KeyPair,
    pem: String,
}

fn new_ca() -> Ca {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(DnType::CommonName, "kubernetes");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.not_before = date_time_ymd(2024, 1, 1);
    params.not_after = date_time_ymd(2124, 1, 1);
    let key = KeyPair::generate().unwrap();
    let pem = params.self_signed(&key).unwrap().pem();
    Ca { params, key, pem }
}

/// A serving certificate for the fixture's node address (10.0.0.10), valid `from`..`until`.
fn leaf(ca: &Ca, sans: &[&str], from: i32, until: i32, key: &KeyPair) -> String {
    let mut params = CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    params.distinguished_name.push(DnType::CommonName, "kube-apiserver");
    params.not_before = date_time_ymd(from, 1, 1);
    params.not_after = date_time_ymd(until, 1, 1);
    params
        .signed_by(key, &Issuer::from_params(&ca.params, &ca.key))
        .unwrap()
        .pem()
}

/// The fixture's kube-apiserver with a CA, a serving certificate and its key, served with
/// `--tls-cert-file` on the node's address.
fn fixture(ca: &Ca, cert: &str, key: &KeyPair) -> Fixture {
    let mut f = Fixture::new();
    f.files = vec![
        ("ca.crt".into(), CA.into(), "0644".into()),
        ("apiserver.crt".into(), CERT.into(), "0644".into()),
        ("apiserver.key".into(), KEY.into(), "0600".into()),
    ];
    f.write_config();
    f.source(
        "kube-apiserver.yaml",
        MANIFEST.replace(
            "--advertise-address=${NODE_IP}]",
            &format!("--advertise-address=${{NODE_IP}}, --tls-cert-file={CERT}, --tls-private-key-file={KEY}]"),
        ),
    );
    f.source("ca.crt", &ca.pem);
    f.source("apiserver.crt", cert);
    f.source("apiserver.key", key.serialize_pem());
    f
}

/// `kube-anchor run` on the fixture's node with no API server and no container runtime.
fn run_offline(f: &Fixture) -> support::daemon::Daemon {
    let missing = f.dir.path().join("missing.kubeconfig");
    support::daemon::Daemon::start_with_env(
        &f.config(),
        &f.node(),
        "cp-1",
        &[
            "--kubeconfig".into(),
            missing.display().to_string(),
            "--runtime-endpoint".into(),
            "none".into(),
        ],
        &[("NODE_IP".into(), "10.0.0.10".into())],
        &f.dir.path().join("run.log"),
    )
}

/// `apply` refuses: exit 1, the message names `file` and says `what`, the node is unchanged
/// (also with `--dry-run`).
fn refused(f: &Fixture, file: &str, what: &str) {
    let before = f.snapshot_files();
    for extra in [&[][..], &["--dry-run"][..]] {
        let out = f.run("apply", extra);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "apply {extra:?}: {err}");
        assert!(err.contains(file) && err.contains(what), "apply {extra:?}: {err}");
        assert!(err.contains("CN=kube-apiserver"), "names the certificate: {err}");
        assert_eq!(f.snapshot_files(), before, "apply {extra:?} changed the node");
    }
}

#[test]
fn bad_credentials_are_refused_and_the_node_keeps_what_it_has() {
    let ca = new_ca();
    let key = KeyPair::generate().unwrap();
    let good = leaf(&ca, &["10.0.0.10"], 2024, 2124, &key);
    let f = fixture(&ca, &good, &key);
    f.apply();

    // A key of another certificate.
    let other = KeyPair::generate().unwrap();
    f.source("apiserver.key", other.serialize_pem());
    refused(&f, KEY, "does not belong to the certificate");
    f.source("apiserver.key", key.serialize_pem());

    // Issued by another CA of the same name.
    let foreign = new_ca();
    f.source("apiserver.crt", leaf(&foreign, &["10.0.0.10"], 2024, 2124, &key));
    refused(&f, CERT, "does not chain to");

    // Without the node's address.
    f.source("apiserver.crt", leaf(&ca, &["10.0.0.11"], 2024, 2124, &key));
    refused(&f, CERT, "does not cover the node's address 10.0.0.10");

    // Expired, and not yet valid, while the node holds a valid one.
    f.source("apiserver.crt", leaf(&ca, &["10.0.0.10"], 2020, 2021, &key));
    refused(&f, CERT, "expired");
    f.source("apiserver.crt", leaf(&ca, &["10.0.0.10"], 2120, 2124, &key));
    refused(&f, CERT, "not valid yet");

    // A renewal (same key, later notAfter) passes; so does a CA rotated with its leaves.
    let renewed = leaf(&ca, &["10.0.0.10"], 2024, 2125, &key);
    f.source("apiserver.crt", &renewed);
    f.apply();
    assert_eq!(f.read(CERT), renewed);
    let ca2 = new_ca();
    let key2 = KeyPair::generate().unwrap();
    f.source("ca.crt", &ca2.pem);
    f.source("apiserver.crt", leaf(&ca2, &["10.0.0.10"], 2024, 2124, &key2));
    f.source("apiserver.key", key2.serialize_pem());
    f.apply();
    assert_eq!(f.read(CA), ca2.pem);
}

/// What a change would do to the component's clients, through the binary: a serving
/// certificate without the first service address every pod dials, a renewal that drops a name
/// the node's certificate has, and a client CA replaced while the kubelet's kubeconfig on the
/// node holds a certificate of the old one; each refused with exit 1, naming the file, the name
/// or CA and the client, and the node unchanged. The CA rotation in steps passes.
#[test]
fn changes_that_would_lock_out_a_client_are_refused() {
    use base64::Engine as _;
    let ca = new_ca();
    let key = KeyPair::generate().unwrap();
    let all = ["10.0.0.10", "10.96.0.1", "kubernetes.default.svc", "127.0.0.1"];
    let f = fixture(&ca, &leaf(&ca, &all, 2024, 2124, &key), &key);
    f.source(
        "kube-apiserver.yaml",
        MANIFEST.replace(
            "--advertise-address=${NODE_IP}]",
            &format!(
                "--advertise-address=${{NODE_IP}}, --tls-cert-file={CERT}, --tls-private-key-file={KEY}, --client-ca-file={CA}, --service-cluster-ip-range=10.96.0.0/12]"
            ),
        ),
    );
    f.apply();
    // The kubelet's kubeconfig on the node, another chart's file: a client certificate of the CA.
    let kubelet_key = KeyPair::generate().unwrap();
    let kubelet_cert = leaf(&ca, &[], 2024, 2100, &kubelet_key);
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let kubeconfig = |cert: &str, key: &KeyPair| {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://10.0.0.10:6443\nusers:\n- name: kubelet\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\n",
            b64(cert),
            b64(&key.serialize_pem())
        )
    };
    std::fs::write(
        f.host("/etc/kubernetes/kubelet.conf"),
        kubeconfig(&kubelet_cert, &kubelet_key),
    )
    .unwrap();

    // Without the first service address.
    f.source(
        "apiserver.crt",
        leaf(
            &ca,
            &["10.0.0.10", "kubernetes.default.svc", "127.0.0.1"],
            2024,
            2124,
            &key,
        ),
    );
    refused(
        &f,
        CERT,
        "does not cover 10.96.0.1, which every pod, through the kubernetes Service at 10.96.0.1",
    );
    // A renewal that drops 127.0.0.1, which the certificate on the node covers.
    f.source(
        "apiserver.crt",
        leaf(
            &ca,
            &["10.0.0.10", "10.96.0.1", "kubernetes.default.svc"],
            2024,
            2125,
            &key,
        ),
    );
    refused(&f, CERT, "drops 127.0.0.1");
    f.source("apiserver.crt", leaf(&ca, &all, 2024, 2124, &key));

    // The CA replaced by a new one, its serving certificate with it: the kubelet is locked out.
    let ca2 = new_ca();
    let key2 = KeyPair::generate().unwrap();
    f.source("ca.crt", &ca2.pem);
    f.source("apiserver.crt", leaf(&ca2, &all, 2024, 2124, &key2));
    f.source("apiserver.key", key2.serialize_pem());
    refused(
        &f,
        CA,
        "no longer trusts /etc/kubernetes/kubelet.conf (user kubelet: client-certificate-data)",
    );
    let out = f.run("apply", &[]);
    assert!(
        stderr(&out).contains("first a bundle of the old and the new CA"),
        "{}",
        stderr(&out)
    );

    // In steps: the bundle with both; the kubelet's certificate re-issued; the old CA dropped.
    f.source("ca.crt", format!("{}{}", ca.pem, ca2.pem));
    f.apply();
    let kubelet_cert2 = leaf(&ca2, &[], 2024, 2100, &kubelet_key);
    std::fs::write(
        f.host("/etc/kubernetes/kubelet.conf"),
        kubeconfig(&kubelet_cert2, &kubelet_key),
    )
    .unwrap();
    f.source("ca.crt", &ca2.pem);
    f.apply();
    assert_eq!(f.read(CA), ca2.pem);
}

/// kube-apiserver and etcd written by two anchors on one node (one state dir, one host root),
/// each checked against the version the other's ledger records: kube-apiserver's etcd client
/// certificate of a CA etcd does not trust is refused, and so is etcd's serving certificate of a
/// CA kube-apiserver's `--etcd-cafile` does not hold; each refusal names the file, the flag of
/// the other side and its manifest, exits 1 and changes nothing. The rotation in steps passes.
#[test]
fn kube_apiserver_and_etcd_on_one_node_are_checked_against_each_other() {
    const ETCD_CA: &str = "/etc/kubernetes/pki/etcd/ca.crt";
    const ETCD_SERVER: &str = "/etc/kubernetes/pki/etcd/server.crt";
    const ETCD_MANIFEST: &str = "/etc/kubernetes/manifests/etcd.yaml";
    const CLIENT: &str = "/etc/kubernetes/pki/apiserver-etcd-client.crt";
    const APISERVER_ETCD_CA: &str = "/etc/kubernetes/pki/apiserver-etcd-ca.crt";
    let ca = new_ca();
    let key = KeyPair::generate().unwrap();
    let mut f = fixture(&ca, &leaf(&ca, &["10.0.0.10"], 2024, 2124, &key), &key);
    f.files.extend([
        ("etcd-ca.crt".into(), APISERVER_ETCD_CA.into(), "0644".into()),
        ("etcd-client.crt".into(), CLIENT.into(), "0644".into()),
        (
            "etcd-client.key".into(),
            "/etc/kubernetes/pki/apiserver-etcd-client.key".into(),
            "0600".into(),
        ),
    ]);
    f.write_config();
    f.source(
        "kube-apiserver.yaml",
        MANIFEST.replace(
            "--advertise-address=${NODE_IP}]",
            &format!(
                "--advertise-address=${{NODE_IP}}, --tls-cert-file={CERT}, --tls-private-key-file={KEY}, --etcd-servers=https://127.0.0.1:2379, --etcd-cafile={APISERVER_ETCD_CA}, --etcd-certfile={CLIENT}, --etcd-keyfile=/etc/kubernetes/pki/apiserver-etcd-client.key]"
            ),
        ),
    );
    // etcd's anchor: another config on the same node.
    let etcd_dir = f.dir.path().join("etcd-config");
    std::fs::create_dir_all(&etcd_dir).unwrap();
    std::fs::write(
        etcd_dir.join("anchor.yaml"),
        format!(
            "apiVersion: kube-anchor.io/v1alpha1\nkind: Anchor\nmetadata:\n  name: etcd\nspec:\n  variables: [NODE_NAME, NODE_IP]\n  files:\n  - {{source: ca.crt, path: {ETCD_CA}, mode: \"0644\"}}\n  - {{source: server.crt, path: {ETCD_SERVER}, mode: \"0644\"}}\n  - {{source: server.key, path: /etc/kubernetes/pki/etcd/server.key, mode: \"0600\"}}\n  manifest:\n    source: etcd.yaml\n    path: {ETCD_MANIFEST}\n"
        ),
    )
    .unwrap();
    std::fs::write(
        etcd_dir.join("etcd.yaml"),
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: etcd\n  namespace: kube-system\nspec:\n  hostNetwork: true\n  containers:\n  - name: etcd\n    image: registry.k8s.io/etcd:3.6.8-0\n    command: [etcd, --listen-client-urls=https://127.0.0.1:2379, --advertise-client-urls=https://127.0.0.1:2379, --cert-file={ETCD_SERVER}, --key-file=/etc/kubernetes/pki/etcd/server.key, --trusted-ca-file={ETCD_CA}, --client-cert-auth=true]\n"
        ),
    )
    .unwrap();
    let etcd_source = |name: &str, content: &str| std::fs::write(etcd_dir.join(name), content).unwrap();
    let etcd_apply = |extra: &[&str]| {
        f.command_with("apply", &etcd_dir.join("anchor.yaml"))
            .args(extra)
            .output()
            .unwrap()
    };
    let etcd_ca = |name: &str| {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.not_before = date_time_ymd(2024, 1, 1);
        params.not_after = date_time_ymd(2124, 1, 1);
        let key = KeyPair::generate().unwrap();
        let pem = params.self_signed(&key).unwrap().pem();
        Ca { params, key, pem }
    };
    let (old, new) = (etcd_ca("etcd-ca"), etcd_ca("etcd-ca-2"));
    let server_key = KeyPair::generate().unwrap();
    let client_key = KeyPair::generate().unwrap();
    let server = |ca: &Ca| leaf(ca, &["127.0.0.1", "10.0.0.10"], 2024, 2124, &server_key);
    let client = |ca: &Ca| leaf(ca, &[], 2024, 2124, &client_key);
    etcd_source("ca.crt", &old.pem);
    etcd_source("server.crt", &server(&old));
    etcd_source("server.key", &server_key.serialize_pem());
    f.source("etcd-ca.crt", &old.pem);
    f.source("etcd-client.crt", client(&old));
    f.source("etcd-client.key", client_key.serialize_pem());
    assert_success(&etcd_apply(&[]));
    f.apply();

    // kube-apiserver's etcd client certificate of a new CA (its own files carrying both CAs),
    // which etcd does not trust.
    f.source("etcd-ca.crt", format!("{}{}", old.pem, new.pem));
    f.source("etcd-client.crt", client(&new));
    let before = f.snapshot_files();
    refused(
        &f,
        CLIENT,
        &format!(
            "{CLIENT}: etcd on this node would refuse kube-apiserver's etcd client certificate CN=kube-apiserver (issuer CN=etcd-ca-2, --etcd-certfile in {MANIFEST_PATH}): etcd's --trusted-ca-file {ETCD_CA} (in {ETCD_MANIFEST}) holds no CA that signed it"
        ),
    );
    f.source("etcd-ca.crt", &old.pem);
    f.source("etcd-client.crt", client(&old));

    // etcd's serving certificate of a CA kube-apiserver's --etcd-cafile does not hold (etcd
    // trusting both CAs for its clients).
    etcd_source("ca.crt", &format!("{}{}", old.pem, new.pem));
    etcd_source("server.crt", &server(&new));
    let out = etcd_apply(&[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("{ETCD_SERVER}: kube-apiserver on this node would refuse etcd's serving certificate CN=kube-apiserver (issuer CN=etcd-ca-2, --cert-file in {ETCD_MANIFEST}): kube-apiserver's --etcd-cafile {APISERVER_ETCD_CA} (in {MANIFEST_PATH}) holds no CA that signed it")),
        "{err}"
    );
    assert_eq!(f.snapshot_files(), before, "the refused etcd version changed the node");

    // In steps: etcd trusts both; kube-apiserver presents the new CA's certificate and trusts
    // both; etcd serves with the new CA's certificate; then each side drops the old CA.
    etcd_source("server.crt", &server(&old));
    assert_success(&etcd_apply(&[]));
    f.source("etcd-ca.crt", format!("{}{}", old.pem, new.pem));
    f.source("etcd-client.crt", client(&new));
    f.apply();
    let new_server = server(&new);
    etcd_source("server.crt", &new_server);
    assert_success(&etcd_apply(&[]));
    etcd_source("ca.crt", &new.pem);
    assert_success(&etcd_apply(&[]));
    f.source("etcd-ca.crt", &new.pem);
    f.apply();
    assert_eq!(f.read(ETCD_SERVER), new_server);
    assert_eq!(f.read(APISERVER_ETCD_CA), new.pem);
}

/// An expired certificate where the node holds none (or one no better) is written: a node
/// must be repairable whatever state its certificates are in.
#[test]
fn an_expired_certificate_is_written_where_the_node_has_nothing_better() {
    let ca = new_ca();
    let key = KeyPair::generate().unwrap();
    let expired = leaf(&ca, &["10.0.0.10"], 2020, 2021, &key);
    let f = fixture(&ca, &expired, &key);
    f.apply();
    assert_eq!(f.read(CERT), expired);
    // Deleted on the node: restored as it was.
    std::fs::remove_file(f.host(CERT)).unwrap();
    f.apply();
    assert_eq!(f.read(CERT), expired);
}

/// Expiry seen coming with no API: `status` and `check-expiration` list every certificate (also
/// those inside a kubeconfig) with its notAfter, `check-expiration` exits 3 once one is within
/// `--warn-within`, and `run` exports each file's earliest notAfter as a metric.
#[test]
fn expiry_is_visible_in_status_check_expiration_and_the_metric() {
    use base64::Engine as _;
    let ca = new_ca();
    let key = KeyPair::generate().unwrap();
    let cert = leaf(&ca, &["10.0.0.10"], 2024, 2124, &key);
    let mut f = fixture(&ca, &cert, &key);
    let client = KeyPair::generate().unwrap();
    let client_cert = leaf(&ca, &[], 2024, 2100, &client);
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    f.files.push((
        "scheduler.conf".into(),
        "/etc/kubernetes/scheduler.conf".into(),
        "0600".into(),
    ));
    f.write_config();
    f.source(
        "scheduler.conf",
        format!(
            "apiVersion: v1\nkind: Config\nusers:\n- name: s\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\n",
            b64(&client_cert),
            b64(&client.serialize_pem())
        ),
    );
    f.apply();

    let status = f.run("status", &["--output", "json", "--runtime-endpoint", "none"]);
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let places: Vec<(String, String)> = status["certificates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["place"].as_str().unwrap().into(),
                c["notAfter"].as_str().unwrap().into(),
            )
        })
        .collect();
    for expected in [
        (CA.to_owned(), "2124-01-01T00:00:00Z".to_owned()),
        (CERT.to_owned(), "2124-01-01T00:00:00Z".to_owned()),
        (
            "/etc/kubernetes/scheduler.conf (user s: client-certificate-data)".to_owned(),
            "2100-01-01T00:00:00Z".to_owned(),
        ),
    ] {
        assert!(places.contains(&expected), "{expected:?} in {places:?}");
    }

    let host_root = f.node();
    let node = ["--host-root", host_root.to_str().unwrap()];
    let check = |extra: &[&str]| {
        std::process::Command::new(BIN)
            .arg("check-expiration")
            .args(node)
            .args(extra)
            .output()
            .unwrap()
    };
    let out = check(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.lines()
            .nth(1)
            .unwrap()
            .contains("(user s: client-certificate-data)"),
        "soonest first:\n{text}"
    );
    // Within 100 years everything expires: exit 3, and the JSON says which.
    let out = check(&["--warn-within", "36600d", "--output", "json"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let certs = doc["certificates"].as_array().unwrap();
    assert_eq!(certs.len(), 3, "{doc:#}");
    assert!(
        certs
            .iter()
            .all(|c| c["component"] == "kube-apiserver" && c["expiresWithinWarning"] == true && c["expired"] == false)
    );

    // The daemon's metric: each file's earliest notAfter.
    let d = run_offline(&f);
    support::poll::Poll::new(std::time::Duration::from_secs(30), "the expiry metric")
        .every(std::time::Duration::from_millis(100))
        .context(|| format!("{}\n{:?}", d.log_text(), d.get("/metrics")))
        .until(|| {
            d.get("/metrics")
                .is_some_and(|(_, body)| body.contains("certificate_expiry"))
        });
    let (_, body) = d.get("/metrics").unwrap();
    let line = |path: &str| {
        body.lines()
            .find(|l| {
                l.starts_with("kube_anchor_certificate_expiry_timestamp_seconds")
                    && l.contains(&format!("path=\"{path}\""))
            })
            .unwrap_or_else(|| panic!("no expiry of {path} in:\n{body}"))
            .rsplit(' ')
            .next()
            .unwrap()
            .to_owned()
    };
    let seconds = |rfc3339: &str| {
        humantime::parse_rfc3339(rfc3339)
            .unwrap()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            .to_string()
    };
    assert_eq!(line(CERT), seconds("2124-01-01T00:00:00Z"));
    assert_eq!(line("/etc/kubernetes/scheduler.conf"), seconds("2100-01-01T00:00:00Z"));
}

/// Every series the charts' alerts select is one the daemon exports (a counter's samples carry
/// `_total`, its TYPE line does not; a family shows only once it has a sample): a renamed
/// metric would silence an alert.
fn assert_alerts_select_exported_metrics(metrics: &str) {
    let rules = std::fs::read_to_string(
        support::processes::repo_root().join("charts/kube-anchor-lib/templates/_prometheusrule.tpl"),
    )
    .unwrap();
    let mut names: Vec<&str> = rules
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("kube_anchor_"))
        .collect();
    names.sort_unstable();
    names.dedup();
    assert!(names.len() >= 7, "{names:?}");
    for name in names {
        let family = name.strip_suffix("_total").unwrap_or(name);
        assert!(
            metrics.contains(&format!("# TYPE {family} ")),
            "the alerts select {name}, which the daemon does not export:\n{metrics}"
        );
    }
}

/// A renewal made on the node the way `kubeadm certs renew` makes it (a new key written in
/// place, then its certificate) is kept by `run`, not reverted: the metric, `status` and
/// `apply` say so. A credential changed in a way that is no renewal is still repaired. Once
/// the config carries the renewal the node is in sync again, and `remove` takes the renewed
/// files, which kube-anchor now holds in its ledger.
#[test]
fn a_renewal_made_on_the_node_is_kept_until_the_config_carries_it() {
    use std::time::Duration;
    let ca = new_ca();
    let key = KeyPair::generate().unwrap();
    let cert = leaf(&ca, &["10.0.0.10"], 2024, 2100, &key);
    let f = fixture(&ca, &cert, &key);
    f.apply();
    let d = run_offline(&f);
    let metric = |d: &support::daemon::Daemon, path: &str| {
        d.get("/metrics").and_then(|(_, body)| {
            body.lines()
                .find(|l| {
                    l.starts_with("kube_anchor_credential_renewed_on_node") && l.contains(&format!("path=\"{path}\""))
                })
                .map(str::to_owned)
        })
    };
    support::poll::Poll::new(Duration::from_secs(30), "the first sync")
        .every(Duration::from_millis(100))
        .context(|| d.log_text())
        .until(|| {
            d.get("/metrics")
                .is_some_and(|(_, body)| body.contains("certificate_expiry"))
        });

    // kubeadm's order: the new key, then the certificate, each written in place.
    let new_key = KeyPair::generate().unwrap();
    let renewed = leaf(&ca, &["10.0.0.10", "cp-1"], 2024, 2110, &new_key);
    std::fs::write(f.host(KEY), new_key.serialize_pem()).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(f.host(CERT), &renewed).unwrap();
    support::poll::Poll::new(Duration::from_secs(30), "the renewal reported by the metric")
        .every(Duration::from_millis(100))
        .context(|| d.log_text())
        .until(|| metric(&d, CERT).is_some() && metric(&d, KEY).is_some());
    // Kept: well past the time a repair waits for a credential to settle.
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(f.read(CERT), renewed, "{}", d.log_text());
    assert_eq!(f.read(KEY), new_key.serialize_pem(), "{}", d.log_text());
    assert_eq!(d.metric("kube_anchor_repairs_total"), 0.0, "{}", d.log_text());
    // Every family has a sample now, the renewal's and the expiry's too.
    assert_alerts_select_exported_metrics(&d.get("/metrics").unwrap().1);
    let log = d.log_text();
    assert!(
        log.contains("CN=kube-apiserver renewed on the node: valid until 2110-01-01T00:00:00Z (the version's until 2100-01-01T00:00:00Z), with a new key"),
        "{log}"
    );
    drop(d);

    // The one-shot verbs agree: `status` in sync (exit 0) with the renewal named, `apply`
    // keeps it and says why.
    let out = f.run("status", &["--output", "json", "--runtime-endpoint", "none"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let state = |path: &str| {
        status["files"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["path"] == path)
            .map(|f| f["state"].as_str().unwrap().to_owned())
    };
    assert_eq!(state(CERT).as_deref(), Some("renewed-on-node"), "{status:#}");
    assert_eq!(state(KEY).as_deref(), Some("renewed-on-node"), "{status:#}");
    assert!(
        status["certificates"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["place"] == CERT && c["notAfter"] == "2110-01-01T00:00:00Z"),
        "status shows the certificate the node holds: {status:#}"
    );
    let out = f.apply();
    let text = stdout(&out);
    assert!(
        text.contains(&format!("renewed    {CERT}")) && text.contains("kept, not reverted"),
        "{text}"
    );
    assert_eq!(f.read(CERT), renewed);

    // A change that is no renewal (another CA's certificate for the same key) is repaired.
    let d = run_offline(&f);
    let foreign = new_ca();
    std::fs::write(f.host(CERT), leaf(&foreign, &["10.0.0.10"], 2024, 2120, &new_key)).unwrap();
    support::poll::Poll::new(Duration::from_secs(30), "the foreign certificate repaired")
        .every(Duration::from_millis(100))
        .context(|| d.log_text())
        .until(|| f.read(CERT) == cert && f.read(KEY) == key.serialize_pem());
    drop(d);

    // The config carries a renewal: written like any new version, in sync, nothing kept.
    std::fs::write(f.host(CERT), &renewed).unwrap();
    std::fs::write(f.host(KEY), new_key.serialize_pem()).unwrap();
    assert!(stdout(&f.apply()).contains("renewed    "));
    f.source("apiserver.crt", &renewed);
    f.source("apiserver.key", new_key.serialize_pem());
    let text = stdout(&f.apply());
    assert!(
        !text.contains("renewed") && text.contains(&format!("adopted    {CERT}")),
        "{text}"
    );
    let out = f.run("remove", &[]);
    assert_success(&out);
    assert!(!f.host(CERT).exists() && !f.host(KEY).exists(), "{}", stdout(&out));
}
