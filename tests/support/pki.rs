//! The tests' certificate authority, the certificates and keys it issues, and kubeconfigs
//! that use them.

#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use rcgen::{
    CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};

pub struct Pki {
    pub dir: PathBuf,
    ca_key: KeyPair,
    ca_params: CertificateParams,
}

impl Pki {
    pub fn new(dir: &Path) -> Self {
        fs::create_dir_all(dir).unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name = dn("kube-anchor-test-ca", None);
        params.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        fs::write(dir.join("ca.crt"), cert.pem()).unwrap();
        let sa = KeyPair::generate().unwrap();
        fs::write(dir.join("sa.key"), sa.serialize_pem()).unwrap();
        fs::write(dir.join("sa.pub"), sa.public_key_pem()).unwrap();
        Self {
            dir: dir.into(),
            ca_key: key,
            ca_params: params,
        }
    }

    pub fn ca(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    /// Issues `<name>.crt`/`<name>.key`; a client cert when `sans` is empty.
    pub fn issue(
        &self,
        name: &str,
        common_name: &str,
        organization: Option<&str>,
        sans: &[&str],
    ) -> (PathBuf, PathBuf) {
        let usage = if sans.is_empty() {
            ExtendedKeyUsagePurpose::ClientAuth
        } else {
            ExtendedKeyUsagePurpose::ServerAuth
        };
        self.issue_for(name, common_name, organization, sans, vec![usage])
    }

    /// Issues `<name>.crt`/`<name>.key` good for serving on `sans` and as a client (an etcd
    /// member's server, peer and client certificate in one).
    pub fn issue_server_and_client(&self, name: &str, sans: &[&str]) -> (PathBuf, PathBuf) {
        let usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        self.issue_for(name, name, None, sans, usages)
    }

    fn issue_for(
        &self,
        name: &str,
        common_name: &str,
        organization: Option<&str>,
        sans: &[&str],
        usages: Vec<ExtendedKeyUsagePurpose>,
    ) -> (PathBuf, PathBuf) {
        let mut params = CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        params.distinguished_name = dn(common_name, organization);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        params.extended_key_usages = usages;
        let key = KeyPair::generate().unwrap();
        let issuer = Issuer::from_params(&self.ca_params, &self.ca_key);
        let cert = params.signed_by(&key, &issuer).unwrap();
        let (crt, key_path) = (
            self.dir.join(format!("{name}.crt")),
            self.dir.join(format!("{name}.key")),
        );
        fs::write(&crt, cert.pem()).unwrap();
        fs::write(&key_path, key.serialize_pem()).unwrap();
        (crt, key_path)
    }
}

fn dn(common_name: &str, organization: Option<&str>) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    if let Some(o) = organization {
        dn.push(DnType::OrganizationName, o);
    }
    dn
}

pub enum Identity {
    Cert { cert: PathBuf, key: PathBuf },
    Token(String),
}

pub fn write_kubeconfig(path: &Path, server: &str, ca: &Path, identity: &Identity) {
    let user = match identity {
        Identity::Cert { cert, key } => format!(
            "    client-certificate: {}\n    client-key: {}\n",
            cert.display(),
            key.display()
        ),
        Identity::Token(token) => format!("    token: {token}\n"),
    };
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {server}\n    certificate-authority: {}\ncontexts:\n- name: test\n  context: {{cluster: test, user: test}}\ncurrent-context: test\nusers:\n- name: test\n  user:\n{user}",
        ca.display()
    );
    // Atomically: tests running in parallel may write the same identity's kubeconfig.
    let mut temp = tempfile::NamedTempFile::new_in(path.parent().unwrap()).unwrap();
    std::io::Write::write_all(&mut temp, text.as_bytes()).unwrap();
    temp.persist(path).unwrap();
}

pub async fn client_from_kubeconfig(path: &Path) -> Client {
    let kubeconfig = Kubeconfig::read_from(path).unwrap();
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    Client::try_from(config).unwrap()
}
