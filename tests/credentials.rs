//! Credentials checked before they are written, through the real binary: each bad credential
//! is refused with exit 1 and a message naming the file and the certificate, and the node
//! keeps every file as it was; rotations pass.

mod support;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, date_time_ymd};
use support::fixture::*;

const CERT: &str = "/etc/kubernetes/pki/apiserver.crt";
const KEY: &str = "/etc/kubernetes/pki/apiserver.key";
const CA: &str = "/etc/kubernetes/pki/ca.crt";

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
