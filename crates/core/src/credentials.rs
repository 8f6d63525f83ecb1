//! Credentials checked before they are written (design.md, "Credentials checked before they
//! are written"): a certificate that does not parse, a key that does not belong to its
//! certificate, a leaf that does not chain to the component's CA, a serving certificate that
//! does not cover the node's address, or one outside its validity while the node holds a valid
//! one: each refuses the whole version, so nothing is written and the node keeps what runs.
//!
//! What is recognised, from content alone: PEM `CERTIFICATE` blocks (the first is the file's
//! leaf, any others its chain or a CA bundle), PEM private keys (`RSA PRIVATE KEY` PKCS#1,
//! `PRIVATE KEY` PKCS#8 of RSA, P-256, P-384 or Ed25519), and kubeconfigs (`kind: Config`) with
//! embedded `client-certificate-data`/`client-key-data` and `certificate-authority-data`.
//! Other content (`sa.pub`, an encryption config, a SEC1 `EC PRIVATE KEY`) is not judged.
//!
//! Pure: the caller gives the files, the time, the node's address and a way to read what the
//! node holds now; X.509 is parsed by x509-parser and signatures and keys checked with ring.

use std::net::IpAddr;

use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;
use x509_parser::pem::Pem;

use crate::hostpath::HostPath;

/// Flags naming the certificate a component serves with (kube-apiserver, controller-manager and
/// scheduler: `--tls-cert-file`; etcd: `--cert-file`, `--peer-cert-file`).
const SERVING_FLAGS: [&str; 3] = ["--tls-cert-file=", "--cert-file=", "--peer-cert-file="];

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialError {
    #[error("{place}: not a valid certificate: {reason}")]
    Unparseable { place: String, reason: String },
    #[error(
        "{place}: the private key does not belong to the certificate {cert} (subject {subject}, valid {not_before} to {not_after})"
    )]
    KeyMismatch {
        place: String,
        cert: String,
        subject: String,
        not_before: String,
        not_after: String,
    },
    #[error(
        "{place}: certificate {subject} is {when} (valid {not_before} to {not_after}) while the one on the node is valid; refusing to make it worse"
    )]
    OutsideValidity {
        place: String,
        subject: String,
        when: &'static str,
        not_before: String,
        not_after: String,
    },
    #[error("{place}: certificate {subject} (issuer {issuer}) does not chain to {cas}")]
    BrokenChain {
        place: String,
        subject: String,
        issuer: String,
        cas: String,
    },
    #[error(
        "{place}: serving certificate {subject} does not cover the node's address {address} that {manifest} uses (its names: {names})"
    )]
    MissingAddress {
        place: String,
        subject: String,
        address: IpAddr,
        manifest: String,
        names: String,
    },
}

/// One file of the version, rendered.
pub struct File<'a> {
    pub path: &'a HostPath,
    pub content: &'a [u8],
    /// This apply writes new content there (only such files can be refused; an unchanged file
    /// is never a reason to refuse the others, so a repair is never blocked).
    pub changes: bool,
}

pub struct Context<'a> {
    /// Seconds since the epoch.
    pub now: i64,
    /// `NODE_IP`, when the config declares it.
    pub node_ip: Option<IpAddr>,
    /// What the node holds at a path now (for the validity rule).
    pub on_node: &'a dyn Fn(&HostPath) -> Option<Vec<u8>>,
}

/// A certificate with where it came from.
struct Cert<'a> {
    place: String,
    path: &'a HostPath,
    der: Vec<u8>,
    changes: bool,
}

struct Key<'a> {
    place: String,
    path: &'a HostPath,
    public: Option<Vec<u8>>,
}

/// Checks a version's credentials; `manifest` is its rendered static pod (the last file).
pub fn check(files: &[File<'_>], manifest: &File<'_>, ctx: &Context<'_>) -> Result<(), CredentialError> {
    let mut leaves: Vec<Cert> = Vec::new();
    let mut cas: Vec<Cert> = Vec::new();
    let mut keys: Vec<Key> = Vec::new();
    // Kubeconfig users: (certificate, key) pairs judged on their own.
    let mut pairs: Vec<(Cert, Key)> = Vec::new();
    for file in files {
        let place = file.path.to_string();
        if let Some(blocks) = pem_blocks(file.content) {
            let mut first_cert = true;
            for block in blocks {
                match block.label.as_str() {
                    "CERTIFICATE" => {
                        let cert = Cert {
                            place: place.clone(),
                            path: file.path,
                            der: block.contents,
                            changes: file.changes,
                        };
                        let parsed = parse(&cert)?;
                        if parsed.is_ca() {
                            cas.push(cert);
                        } else if first_cert {
                            leaves.push(cert);
                        }
                        first_cert = false;
                    }
                    label if label.ends_with("PRIVATE KEY") => keys.push(Key {
                        place: place.clone(),
                        path: file.path,
                        public: public_key(label, &block.contents),
                    }),
                    _ => {}
                }
            }
        } else if let Some(users) = kubeconfig(file) {
            for (cert, key, ca) in users {
                if let Some(ca) = ca {
                    parse(&ca)?;
                    validity(&ca, ctx)?;
                }
                if let Some(cert) = cert {
                    parse(&cert)?;
                    validity(&cert, ctx)?;
                    if let Some(key) = key {
                        pairs.push((cert, key));
                    }
                }
            }
        }
    }
    for cert in leaves.iter().chain(&cas) {
        validity(cert, ctx)?;
    }
    // The kubeadm convention: `x.crt` and `x.key` side by side are a pair.
    for key in &keys {
        let key_path = key.path.to_string();
        let Some(stem) = key_path.strip_suffix(".key") else {
            continue;
        };
        let Some(cert) = leaves
            .iter()
            .chain(&cas)
            .find(|c| c.path.to_string() == format!("{stem}.crt"))
        else {
            continue;
        };
        if cert.changes || files.iter().any(|f| f.path == key.path && f.changes) {
            matches(cert, key)?;
        }
    }
    for (cert, key) in &pairs {
        if cert.changes {
            matches(cert, key)?;
        }
    }
    for leaf in &leaves {
        chains(leaf, &cas)?;
    }
    covers_node(&leaves, manifest, ctx)?;
    Ok(())
}

fn pem_blocks(content: &[u8]) -> Option<Vec<Pem>> {
    if !content.windows(11).any(|w| w == b"-----BEGIN ") {
        return None;
    }
    // A malformed block ends the walk; what came before it is judged.
    Some(Pem::iter_from_buffer(content).map_while(Result::ok).collect())
}

fn parse<'c>(cert: &'c Cert) -> Result<X509Certificate<'c>, CredentialError> {
    x509_parser::parse_x509_certificate(&cert.der)
        .map(|(_, c)| c)
        .map_err(|e| CredentialError::Unparseable {
            place: cert.place.clone(),
            reason: e.to_string(),
        })
}

fn dates(c: &X509Certificate) -> (String, String) {
    (c.validity().not_before.to_string(), c.validity().not_after.to_string())
}

/// Not yet valid or expired is refused only where the node holds a certificate that is valid
/// now: never block a repair, never make things worse.
fn validity(cert: &Cert, ctx: &Context) -> Result<(), CredentialError> {
    if !cert.changes {
        return Ok(());
    }
    let parsed = parse(cert)?;
    let when = match valid_at(&parsed, ctx.now) {
        Ok(()) => return Ok(()),
        Err(when) => when,
    };
    let node_holds_valid = (ctx.on_node)(cert.path).is_some_and(|bytes| {
        let ders = certificates_in(cert.path, &bytes);
        !ders.is_empty()
            && ders
                .iter()
                .all(|der| x509_parser::parse_x509_certificate(der).is_ok_and(|(_, c)| valid_at(&c, ctx.now).is_ok()))
    });
    if !node_holds_valid {
        return Ok(());
    }
    let (not_before, not_after) = dates(&parsed);
    Err(CredentialError::OutsideValidity {
        place: cert.place.clone(),
        subject: parsed.subject().to_string(),
        when,
        not_before,
        not_after,
    })
}

/// One certificate a managed file holds, for expiry reports (`status`, `check-expiration`, the
/// expiry metric and Event).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Expiry {
    /// The host path of the file.
    pub path: String,
    /// Where in it: the path, or the path and the kubeconfig field.
    pub place: String,
    pub subject: String,
    /// RFC 3339.
    pub not_after: String,
    /// Seconds since the epoch.
    pub not_after_seconds: i64,
}

/// The certificates `content` holds (PEM blocks or a kubeconfig's embedded ones), each with its
/// notAfter; nothing for content of another kind or that does not parse.
pub fn expiries(path: &HostPath, content: &[u8]) -> Vec<Expiry> {
    let mut places: Vec<(String, Vec<u8>)> = Vec::new();
    if let Some(blocks) = pem_blocks(content) {
        places.extend(
            blocks
                .into_iter()
                .filter(|b| b.label == "CERTIFICATE")
                .map(|b| (path.to_string(), b.contents)),
        );
    } else {
        let file = File {
            path,
            content,
            changes: false,
        };
        for (cert, _, ca) in kubeconfig(&file).into_iter().flatten() {
            places.extend(cert.into_iter().chain(ca).map(|c| (c.place, c.der)));
        }
    }
    places
        .into_iter()
        .filter_map(|(place, der)| {
            let (_, c) = x509_parser::parse_x509_certificate(&der).ok()?;
            Some(Expiry {
                path: path.to_string(),
                place,
                subject: c.subject().to_string(),
                not_after: rfc3339(c.validity().not_after.timestamp()),
                not_after_seconds: c.validity().not_after.timestamp(),
            })
        })
        .collect()
}

fn rfc3339(seconds: i64) -> String {
    let at = std::time::UNIX_EPOCH
        .checked_add(std::time::Duration::from_secs(seconds.max(0) as u64))
        .unwrap_or(std::time::UNIX_EPOCH);
    humantime::format_rfc3339_seconds(at).to_string()
}

/// Every certificate a file holds: its PEM blocks, or a kubeconfig's embedded ones.
fn certificates_in(path: &HostPath, bytes: &[u8]) -> Vec<Vec<u8>> {
    if let Some(blocks) = pem_blocks(bytes) {
        return blocks
            .into_iter()
            .filter(|b| b.label == "CERTIFICATE")
            .map(|b| b.contents)
            .collect();
    }
    let file = File {
        path,
        content: bytes,
        changes: false,
    };
    kubeconfig(&file)
        .into_iter()
        .flatten()
        .flat_map(|(cert, _, ca)| cert.into_iter().chain(ca))
        .map(|c| c.der)
        .collect()
}

fn valid_at(c: &X509Certificate, now: i64) -> Result<(), &'static str> {
    if now < c.validity().not_before.timestamp() {
        Err("not valid yet")
    } else if now > c.validity().not_after.timestamp() {
        Err("expired")
    } else {
        Ok(())
    }
}

/// The public key a private key belongs to, as a certificate's SubjectPublicKeyInfo holds it;
/// `None` for a format not judged (a SEC1 EC key, another curve).
fn public_key(label: &str, der: &[u8]) -> Option<Vec<u8>> {
    use ring::signature::{self, KeyPair};
    match label {
        "RSA PRIVATE KEY" => ring::rsa::KeyPair::from_der(der)
            .ok()
            .map(|k| k.public().as_ref().to_vec()),
        "PRIVATE KEY" => {
            if let Ok(k) = ring::rsa::KeyPair::from_pkcs8(der) {
                return Some(k.public().as_ref().to_vec());
            }
            let rng = ring::rand::SystemRandom::new();
            for alg in [
                &signature::ECDSA_P256_SHA256_ASN1_SIGNING,
                &signature::ECDSA_P384_SHA384_ASN1_SIGNING,
            ] {
                if let Ok(k) = signature::EcdsaKeyPair::from_pkcs8(alg, der, &rng) {
                    return Some(k.public_key().as_ref().to_vec());
                }
            }
            signature::Ed25519KeyPair::from_pkcs8_maybe_unchecked(der)
                .ok()
                .map(|k| k.public_key().as_ref().to_vec())
        }
        _ => None,
    }
}

fn matches(cert: &Cert, key: &Key) -> Result<(), CredentialError> {
    let Some(public) = &key.public else {
        return Ok(());
    };
    let parsed = parse(cert)?;
    if parsed.public_key().subject_public_key.data.as_ref() == public.as_slice() {
        return Ok(());
    }
    let (not_before, not_after) = dates(&parsed);
    Err(CredentialError::KeyMismatch {
        place: key.place.clone(),
        cert: cert.place.clone(),
        subject: parsed.subject().to_string(),
        not_before,
        not_after,
    })
}

/// A leaf must be signed by one of the component's CA certificates named as its issuer; a leaf
/// whose issuer is none of them is refused only where a CA sits in its own directory (kubeadm's
/// `pki/ca.crt` beside `pki/apiserver.crt`), since a component need not carry every CA.
fn chains(leaf: &Cert, cas: &[Cert]) -> Result<(), CredentialError> {
    let parsed = parse(leaf)?;
    let named: Vec<(&Cert, X509Certificate)> = cas
        .iter()
        .filter_map(|ca| parse(ca).ok().map(|p| (ca, p)))
        .filter(|(_, p)| p.subject().as_raw() == parsed.issuer().as_raw())
        .collect();
    if !leaf.changes && named.iter().all(|(ca, _)| !ca.changes) {
        return Ok(());
    }
    let candidates: Vec<String> = if named.is_empty() {
        let dir = leaf.path.parent();
        let beside: Vec<String> = cas
            .iter()
            .filter(|ca| ca.path.parent() == dir)
            .map(|ca| ca.place.clone())
            .collect();
        if beside.is_empty() {
            return Ok(());
        }
        beside
    } else if named
        .iter()
        .any(|(_, ca)| parsed.verify_signature(Some(ca.public_key())).is_ok())
    {
        return Ok(());
    } else {
        named.iter().map(|(ca, _)| ca.place.clone()).collect()
    };
    Err(CredentialError::BrokenChain {
        place: leaf.place.clone(),
        subject: parsed.subject().to_string(),
        issuer: parsed.issuer().to_string(),
        cas: candidates.join(", "),
    })
}

/// A certificate the manifest serves with (by flag) must name the node's address when the
/// manifest uses it.
fn covers_node(leaves: &[Cert], manifest: &File, ctx: &Context) -> Result<(), CredentialError> {
    let Some(ip) = ctx.node_ip else { return Ok(()) };
    let text = String::from_utf8_lossy(manifest.content);
    if !text.contains(&ip.to_string()) {
        return Ok(());
    }
    for flag in SERVING_FLAGS {
        for value in text.split(flag).skip(1) {
            let path: String = value
                .chars()
                .take_while(|c| !c.is_whitespace() && !matches!(c, '"' | '\'' | ',' | ']'))
                .collect();
            let Some(cert) = leaves.iter().find(|c| c.path.to_string() == path) else {
                continue;
            };
            if !cert.changes && !manifest.changes {
                continue;
            }
            let parsed = parse(cert)?;
            let mut names = Vec::new();
            let mut covered = false;
            if let Ok(Some(san)) = parsed.subject_alternative_name() {
                for name in &san.value.general_names {
                    match name {
                        GeneralName::IPAddress(bytes) => {
                            let addr = match bytes.len() {
                                4 => <[u8; 4]>::try_from(*bytes).ok().map(IpAddr::from),
                                16 => <[u8; 16]>::try_from(*bytes).ok().map(IpAddr::from),
                                _ => None,
                            };
                            covered |= addr == Some(ip);
                            names.extend(addr.map(|a| a.to_string()));
                        }
                        GeneralName::DNSName(dns) => {
                            covered |= *dns == ip.to_string();
                            names.push((*dns).to_owned());
                        }
                        _ => {}
                    }
                }
            }
            if !covered {
                return Err(CredentialError::MissingAddress {
                    place: cert.place.clone(),
                    subject: parsed.subject().to_string(),
                    address: ip,
                    manifest: manifest.path.to_string(),
                    names: if names.is_empty() {
                        "none".into()
                    } else {
                        names.join(", ")
                    },
                });
            }
        }
    }
    Ok(())
}

type User<'a> = (Option<Cert<'a>>, Option<Key<'a>>, Option<Cert<'a>>);

/// A kubeconfig's embedded credentials, per user: (client certificate, its key, the cluster CA
/// of the first cluster). `None` when the file is no kubeconfig.
fn kubeconfig<'a>(file: &File<'a>) -> Option<Vec<User<'a>>> {
    use base64::Engine as _;
    let text = std::str::from_utf8(file.content).ok()?;
    if !text.contains("kind: Config") {
        return None;
    }
    let doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(text).ok()?;
    if doc.get("kind")?.as_str()? != "Config" {
        return None;
    }
    let decode = |v: Option<&serde_yaml_ng::Value>| {
        v.and_then(|v| v.as_str())
            .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s.trim()).ok())
    };
    let ca = doc
        .get("clusters")
        .and_then(|c| c.as_sequence())
        .and_then(|c| c.first())
        .and_then(|c| decode(c.get("cluster")?.get("certificate-authority-data")));
    let ca_cert = ca
        .as_deref()
        .and_then(|pem| first_block(pem, |l| l == "CERTIFICATE"))
        .map(|der| Cert {
            place: format!("{} (certificate-authority-data)", file.path),
            path: file.path,
            der,
            changes: file.changes,
        });
    let mut users = Vec::new();
    for (i, user) in doc
        .get("users")
        .and_then(|u| u.as_sequence())
        .into_iter()
        .flatten()
        .enumerate()
    {
        let name = user
            .get("name")
            .and_then(|n| n.as_str())
            .map_or(i.to_string(), str::to_owned);
        let auth = user.get("user");
        let cert = decode(auth.and_then(|a| a.get("client-certificate-data")))
            .and_then(|pem| first_block(&pem, |l| l == "CERTIFICATE"))
            .map(|der| Cert {
                place: format!("{} (user {name}: client-certificate-data)", file.path),
                path: file.path,
                der,
                changes: file.changes,
            });
        let key = decode(auth.and_then(|a| a.get("client-key-data"))).and_then(|pem| {
            let blocks = pem_blocks(&pem)?;
            let block = blocks.into_iter().find(|b| b.label.ends_with("PRIVATE KEY"))?;
            Some(Key {
                place: format!("{} (user {name}: client-key-data)", file.path),
                path: file.path,
                public: public_key(&block.label, &block.contents),
            })
        });
        users.push((cert, key, if i == 0 { ca_cert.as_ref().map(clone_cert) } else { None }));
    }
    if users.is_empty() {
        users.push((None, None, ca_cert));
    }
    Some(users)
}

fn clone_cert<'a>(c: &Cert<'a>) -> Cert<'a> {
    Cert {
        place: c.place.clone(),
        path: c.path,
        der: c.der.clone(),
        changes: c.changes,
    }
}

/// The contents of the first PEM block whose label `wanted` accepts. A certificate that is
/// embedded but not PEM is reported by `parse` as unparseable (empty DER).
fn first_block(pem: &[u8], wanted: impl Fn(&str) -> bool) -> Option<Vec<u8>> {
    match pem_blocks(pem) {
        Some(blocks) => blocks.into_iter().find(|b| wanted(&b.label)).map(|b| b.contents),
        None => Some(Vec::new()),
    }
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, date_time_ymd};

    use super::*;

    const NOW: i64 = 1_800_000_000; // 2027-01-15
    const NODE: &str = "10.0.0.10";

    struct Ca {
        params: CertificateParams,
        key: KeyPair,
        pem: String,
    }

    fn ca(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.not_before = date_time_ymd(2025, 1, 1);
        params.not_after = date_time_ymd(2035, 1, 1);
        let key = KeyPair::generate().unwrap();
        let pem = params.self_signed(&key).unwrap().pem();
        Ca { params, key, pem }
    }

    /// (certificate, key) issued by `ca`, valid `years` around 2027.
    fn leaf(ca: &Ca, sans: &[&str], from: i32, until: i32, key: Option<&KeyPair>) -> (String, String) {
        let mut params = CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        params.distinguished_name.push(DnType::CommonName, "kube-apiserver");
        params.not_before = date_time_ymd(from, 1, 1);
        params.not_after = date_time_ymd(until, 1, 1);
        let fresh = KeyPair::generate().unwrap();
        let key = key.unwrap_or(&fresh);
        let cert = params
            .signed_by(key, &Issuer::from_params(&ca.params, &ca.key))
            .unwrap();
        (cert.pem(), key.serialize_pem())
    }

    fn hp(s: &str) -> HostPath {
        HostPath::parse(s).unwrap()
    }

    const MANIFEST: &str = "/etc/kubernetes/manifests/kube-apiserver.yaml";

    /// Checks `files` (path, content), all of them changing, with `on_node` as the node's
    /// current content.
    fn check_with(files: &[(&str, String)], on_node: &[(&str, String)]) -> Result<(), CredentialError> {
        let paths: Vec<HostPath> = files.iter().map(|(p, _)| hp(p)).collect();
        let manifest_text = format!(
            "spec:\n  containers:\n  - command: [kube-apiserver, --advertise-address={NODE}, --tls-cert-file=/etc/kubernetes/pki/apiserver.crt]\n"
        );
        let manifest_path = hp(MANIFEST);
        let list: Vec<File> = paths
            .iter()
            .zip(files)
            .map(|(path, (_, content))| File {
                path,
                content: content.as_bytes(),
                changes: true,
            })
            .collect();
        let manifest = File {
            path: &manifest_path,
            content: manifest_text.as_bytes(),
            changes: true,
        };
        let node: Vec<(HostPath, Vec<u8>)> = on_node.iter().map(|(p, c)| (hp(p), c.as_bytes().to_vec())).collect();
        let read = |p: &HostPath| node.iter().find(|(q, _)| q == p).map(|(_, c)| c.clone());
        let ctx = Context {
            now: NOW,
            node_ip: Some(NODE.parse().unwrap()),
            on_node: &read,
        };
        check(&list, &manifest, &ctx)
    }

    fn apiserver(ca: &Ca, cert: &(String, String)) -> Vec<(&'static str, String)> {
        vec![
            ("/etc/kubernetes/pki/ca.crt", ca.pem.clone()),
            ("/etc/kubernetes/pki/apiserver.crt", cert.0.clone()),
            ("/etc/kubernetes/pki/apiserver.key", cert.1.clone()),
        ]
    }

    #[test]
    fn a_matching_chained_covering_current_set_passes() {
        let ca = ca("kubernetes");
        let good = leaf(&ca, &[NODE, "cp-1"], 2026, 2028, None);
        check_with(&apiserver(&ca, &good), &[]).unwrap();
    }

    #[test]
    fn a_key_of_another_certificate_is_refused() {
        let ca = ca("kubernetes");
        let (cert, _) = leaf(&ca, &[NODE], 2026, 2028, None);
        let (_, other_key) = leaf(&ca, &[NODE], 2026, 2028, None);
        let e = check_with(&apiserver(&ca, &(cert, other_key)), &[]).unwrap_err();
        assert!(matches!(e, CredentialError::KeyMismatch { .. }), "{e}");
        let text = e.to_string();
        assert!(
            text.starts_with("/etc/kubernetes/pki/apiserver.key: the private key does not belong to the certificate /etc/kubernetes/pki/apiserver.crt (subject CN=kube-apiserver, valid "),
            "{text}"
        );
    }

    #[test]
    fn a_leaf_of_another_ca_of_the_same_name_is_refused() {
        let ours = ca("kubernetes");
        let theirs = ca("kubernetes");
        let foreign = leaf(&theirs, &[NODE], 2026, 2028, None);
        let e = check_with(&apiserver(&ours, &foreign), &[]).unwrap_err();
        assert!(
            matches!(&e, CredentialError::BrokenChain { cas, .. } if cas == "/etc/kubernetes/pki/ca.crt"),
            "{e}"
        );
        // Issued by a CA of another name, with a CA beside it: refused too.
        let other = ca("someone-else");
        let e = check_with(&apiserver(&ours, &leaf(&other, &[NODE], 2026, 2028, None)), &[]).unwrap_err();
        assert!(matches!(e, CredentialError::BrokenChain { .. }), "{e}");
        // No CA written beside it: not judged (a component need not carry every CA).
        let lone = leaf(&other, &[NODE], 2026, 2028, None);
        check_with(
            &[
                ("/etc/kubernetes/pki/apiserver.crt", lone.0),
                ("/etc/kubernetes/pki/apiserver.key", lone.1),
            ],
            &[],
        )
        .unwrap();
    }

    #[test]
    fn a_serving_certificate_without_the_node_address_is_refused() {
        let ca = ca("kubernetes");
        let e = check_with(
            &apiserver(&ca, &leaf(&ca, &["10.0.0.11", "cp-1"], 2026, 2028, None)),
            &[],
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "/etc/kubernetes/pki/apiserver.crt: serving certificate CN=kube-apiserver does not cover the node's address {NODE} that {MANIFEST} uses (its names: 10.0.0.11, cp-1)"
            )
        );
    }

    #[test]
    fn expired_or_not_yet_valid_is_refused_only_where_the_node_holds_a_valid_one() {
        let ca = ca("kubernetes");
        let valid = leaf(&ca, &[NODE], 2026, 2028, None);
        let holds_valid = apiserver(&ca, &valid);
        for (from, until, when) in [(2024, 2026, "expired"), (2028, 2030, "not valid yet")] {
            let bad = leaf(&ca, &[NODE], from, until, None);
            let e = check_with(&apiserver(&ca, &bad), &holds_valid).unwrap_err();
            assert!(
                matches!(&e, CredentialError::OutsideValidity { when: w, .. } if *w == when),
                "{e}"
            );
            assert!(e.to_string().contains("CN=kube-apiserver"), "{e}");
            // Nothing on the node, or something no better: written (never block a repair).
            check_with(&apiserver(&ca, &bad), &[]).unwrap();
            let old = leaf(&ca, &[NODE], 2020, 2021, None);
            check_with(&apiserver(&ca, &bad), &apiserver(&ca, &old)).unwrap();
        }
    }

    #[test]
    fn rotations_pass() {
        // A renewal: the same key, a later notAfter.
        let ca1 = ca("kubernetes");
        let key = KeyPair::generate().unwrap();
        let old = leaf(&ca1, &[NODE], 2026, 2028, Some(&key));
        let renewed = leaf(&ca1, &[NODE], 2026, 2030, Some(&key));
        check_with(&apiserver(&ca1, &renewed), &apiserver(&ca1, &old)).unwrap();
        // The CA rotated together with its leaves.
        let ca2 = ca("kubernetes");
        check_with(
            &apiserver(&ca2, &leaf(&ca2, &[NODE], 2026, 2030, None)),
            &apiserver(&ca1, &old),
        )
        .unwrap();
    }

    #[test]
    fn files_this_apply_does_not_change_are_no_reason_to_refuse() {
        let ca = ca("kubernetes");
        let (cert, _) = leaf(&ca, &[NODE], 2026, 2028, None);
        let (_, other_key) = leaf(&ca, &[NODE], 2026, 2028, None);
        let paths = [
            hp("/etc/kubernetes/pki/apiserver.crt"),
            hp("/etc/kubernetes/pki/apiserver.key"),
        ];
        let files = [
            File {
                path: &paths[0],
                content: cert.as_bytes(),
                changes: false,
            },
            File {
                path: &paths[1],
                content: other_key.as_bytes(),
                changes: false,
            },
        ];
        let manifest_path = hp(MANIFEST);
        let manifest = File {
            path: &manifest_path,
            content: b"spec: {}",
            changes: true,
        };
        let ctx = Context {
            now: NOW,
            node_ip: None,
            on_node: &|_| None,
        };
        check(&files, &manifest, &ctx).unwrap();
    }

    fn kubeconfig_text(ca: &Ca, cert: &str, key: &str) -> String {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://{NODE}:6443\n    certificate-authority-data: {}\nusers:\n- name: scheduler\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\n",
            b64(&ca.pem),
            b64(cert),
            b64(key)
        )
    }

    #[test]
    fn a_kubeconfig_with_a_bad_embedded_certificate_is_refused() {
        let ca = ca("kubernetes");
        let (cert, key) = leaf(&ca, &[], 2026, 2028, None);
        let path = "/etc/kubernetes/scheduler.conf";
        check_with(&[(path, kubeconfig_text(&ca, &cert, &key))], &[]).unwrap();
        let (_, other_key) = leaf(&ca, &[], 2026, 2028, None);
        let e = check_with(&[(path, kubeconfig_text(&ca, &cert, &other_key))], &[]).unwrap_err();
        assert!(
            e.to_string().starts_with(&format!(
                "{path} (user scheduler: client-key-data): the private key does not belong"
            )),
            "{e}"
        );
        let garbled = cert.replace("MII", "MIX");
        let e = check_with(&[(path, kubeconfig_text(&ca, &garbled, &key))], &[]).unwrap_err();
        assert!(matches!(e, CredentialError::Unparseable { .. }), "{e}");
        // Expired, while the node holds a valid one.
        let (old_cert, old_key) = leaf(&ca, &[], 2024, 2026, None);
        let e = check_with(
            &[(path, kubeconfig_text(&ca, &old_cert, &old_key))],
            &[(path, kubeconfig_text(&ca, &cert, &key))],
        )
        .unwrap_err();
        assert!(matches!(e, CredentialError::OutsideValidity { .. }), "{e}");
    }

    #[test]
    fn expiries_of_pem_files_and_kubeconfigs() {
        let ca = ca("kubernetes");
        let (cert, key) = leaf(&ca, &[NODE], 2026, 2028, None);
        let path = hp("/etc/kubernetes/pki/apiserver.crt");
        let found = expiries(&path, cert.as_bytes());
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].subject, "CN=kube-apiserver");
        assert_eq!(found[0].not_after, "2028-01-01T00:00:00Z");
        assert_eq!(found[0].not_after_seconds, 1_830_297_600);
        let conf = hp("/etc/kubernetes/scheduler.conf");
        let places: Vec<String> = expiries(&conf, kubeconfig_text(&ca, &cert, &key).as_bytes())
            .into_iter()
            .map(|e| format!("{} {}", e.place, e.not_after))
            .collect();
        assert_eq!(
            places,
            [
                "/etc/kubernetes/scheduler.conf (user scheduler: client-certificate-data) 2028-01-01T00:00:00Z",
                "/etc/kubernetes/scheduler.conf (certificate-authority-data) 2035-01-01T00:00:00Z"
            ]
        );
        assert!(expiries(&path, key.as_bytes()).is_empty());
    }

    #[test]
    fn a_garbled_pem_certificate_is_refused_and_other_content_is_not_judged() {
        let ca = ca("kubernetes");
        let good = leaf(&ca, &[NODE], 2026, 2028, None);
        let mut files = apiserver(&ca, &good);
        files[1].1 = files[1].1.replace("MII", "MIX");
        let e = check_with(&files, &[]).unwrap_err();
        assert!(
            matches!(&e, CredentialError::Unparseable { place, .. } if place == "/etc/kubernetes/pki/apiserver.crt"),
            "{e}"
        );
        check_with(
            &[
                (
                    "/etc/kubernetes/pki/sa.pub",
                    KeyPair::generate().unwrap().public_key_pem(),
                ),
                (
                    "/etc/kubernetes/encryption/config.yaml",
                    "kind: EncryptionConfiguration\n".into(),
                ),
            ],
            &[],
        )
        .unwrap();
    }
}
