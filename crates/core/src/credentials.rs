//! Credentials checked before they are written (design.md, "Credentials checked before they
//! are written"): a certificate that does not parse, a key that does not belong to its
//! certificate, a leaf that does not chain to the component's CA, a serving certificate that
//! does not cover a name its clients dial or drops one the node's certificate has, a CA bundle
//! that stops trusting a client the node holds, or a certificate outside its validity while the
//! node holds a valid one: each refuses the whole version, so nothing is written and the node
//! keeps what runs.
//!
//! What is recognised, from content alone: PEM `CERTIFICATE` blocks (the first is the file's
//! leaf, any others its chain or a CA bundle), PEM private keys (`RSA PRIVATE KEY` PKCS#1,
//! `PRIVATE KEY` PKCS#8 of RSA, P-256, P-384 or Ed25519), and kubeconfigs (`kind: Config`) with
//! embedded `client-certificate-data`/`client-key-data` and `certificate-authority-data`.
//! Other content (`sa.pub`, an encryption config, a SEC1 `EC PRIVATE KEY`) is not judged.
//!
//! Pure: the caller gives the files, the time, the node's address and a way to read what the
//! node holds now; X.509 is parsed by x509-parser and signatures and keys checked with ring.

mod clients;

/// The programs a static pod manifest runs: the base name of each container's first command
/// word, and of its image (`registry.k8s.io/etcd:3.6.8-0` runs `etcd` with `args` alone); none
/// when it does not parse as one.
pub fn programs(manifest: &[u8]) -> Vec<String> {
    let mut out: Vec<String> = clients::containers(manifest)
        .into_iter()
        .map(|c| c.program)
        .filter(|p| !p.is_empty() && !p.starts_with('-'))
        .collect();
    if let Ok(pod) = serde_yaml_ng::from_slice::<serde_yaml_ng::Value>(manifest)
        && let Some(list) = pod
            .get("spec")
            .and_then(|s| s.get("containers"))
            .and_then(|c| c.as_sequence())
    {
        for image in list.iter().filter_map(|c| c.get("image").and_then(|i| i.as_str())) {
            let name = image.split('@').next().unwrap_or(image);
            let name = name.rsplit('/').next().unwrap_or(name);
            let name = name.split(':').next().unwrap_or(name);
            out.push(name.to_owned());
        }
    }
    out
}

use std::net::IpAddr;

use x509_parser::certificate::X509Certificate;
use x509_parser::pem::Pem;

use crate::hostpath::HostPath;

/// Flags naming the certificate a component serves with (kube-apiserver, controller-manager and
/// scheduler: `--tls-cert-file`; etcd: `--cert-file`, `--peer-cert-file`).
const SERVING_FLAGS: [&str; 3] = ["tls-cert-file", "cert-file", "peer-cert-file"];

/// Flags naming the CA bundle a component verifies its clients with (kube-apiserver and the
/// controllers: `--client-ca-file`; etcd: `--trusted-ca-file`, `--peer-trusted-ca-file`).
const CLIENT_CA_FLAGS: [&str; 3] = ["client-ca-file", "trusted-ca-file", "peer-trusted-ca-file"];

/// Where a control-plane node's clients keep their kubeconfigs and client certificates
/// (kubeadm's layout): read when a serving certificate or a CA bundle changes.
pub const CLIENT_DIRS: [&str; 3] = ["/etc/kubernetes", "/etc/kubernetes/pki", "/etc/kubernetes/pki/etcd"];
/// The kubelet's rotated client certificate (its kubeconfig names it by path).
pub const CLIENT_FILES: [&str; 1] = ["/var/lib/kubelet/pki/kubelet-client-current.pem"];

/// Whether a file of that name in [`CLIENT_DIRS`] may hold a client's certificate or server: a
/// kubeconfig or a certificate, never a private key.
pub fn holds_clients(file_name: &str) -> bool {
    [".conf", ".kubeconfig", ".crt", ".pem"]
        .iter()
        .any(|ext| file_name.ends_with(ext))
}

/// How a CA is rotated without locking a client out, for the refusal that would.
const CA_ROTATION: &str = "rotate a CA in steps: first a bundle of the old and the new CA, then the certificates \
     re-issued by the new CA on every node, then the bundle without the old CA";

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
    #[error("{place}: serving certificate {subject} does not cover {name}, which {client} dials (its names: {names})")]
    MissingName {
        place: String,
        subject: String,
        name: String,
        client: String,
        names: String,
    },
    #[error(
        "{place}: serving certificate {subject} drops {name}, which the certificate on the node covers: a client that dials it would be refused (its names: {names}); to drop it on purpose, list it in spec.droppedServingNames"
    )]
    DroppedName {
        place: String,
        subject: String,
        name: String,
        names: String,
    },
    #[error(
        "{}: etcd on this node would refuse kube-apiserver's etcd client certificate {} (issuer {}, --etcd-certfile in {}): etcd's --trusted-ca-file {} (in {}) holds no CA that signed it, so kube-apiserver would lose etcd; {rotation}",
        .0.place, .0.subject, .0.issuer, .0.apiserver_manifest, .0.trust, .0.etcd_manifest,
        rotation = CA_ROTATION
    )]
    EtcdRefusesApiServer(Box<PairingBreak>),
    #[error(
        "{}: kube-apiserver on this node would refuse etcd's serving certificate {} (issuer {}, --cert-file in {}): kube-apiserver's --etcd-cafile {} (in {}) holds no CA that signed it, so kube-apiserver would lose etcd; {rotation}",
        .0.place, .0.subject, .0.issuer, .0.etcd_manifest, .0.trust, .0.apiserver_manifest,
        rotation = CA_ROTATION
    )]
    ApiServerRefusesEtcd(Box<PairingBreak>),
    #[error(
        "{place}: the CA bundle of {bundle} no longer trusts {client} (subject {subject}, issuer {issuer}), which the node holds and the bundle on the node trusts: that client would be locked out; {rotation}",
        rotation = CA_ROTATION
    )]
    DroppedTrust {
        place: String,
        /// The flag that names it and the manifest: `--client-ca-file in <path>`.
        bundle: String,
        client: String,
        subject: String,
        issuer: String,
    },
}

/// How kube-apiserver and etcd on one node would refuse each other.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PairingBreak {
    /// The file of this version that breaks the pairing (or its manifest).
    pub place: String,
    /// The refused certificate's subject and issuer.
    pub subject: String,
    pub issuer: String,
    pub apiserver_manifest: String,
    /// The bundle that holds no CA of the refused certificate.
    pub trust: String,
    pub etcd_manifest: String,
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
    /// What the node holds at a path now (the validity rule, the names a renewal keeps, the
    /// clients a CA bundle trusts).
    pub on_node: &'a dyn Fn(&HostPath) -> Option<Vec<u8>>,
    /// The files on the node that may hold a client's certificate or name a server a client
    /// dials (kubeconfigs, client certificates), with their content: read only when a serving
    /// certificate or a CA bundle changes.
    pub clients_on_node: &'a dyn Fn() -> Vec<(HostPath, Vec<u8>)>,
    /// Names a serving certificate may drop from the one on the node (`spec.droppedServingNames`).
    pub dropped_names: &'a [String],
    /// The versions the other anchors on this node wrote (their ledgers): read only when this
    /// version changes what kube-apiserver presents to etcd or trusts it by, or the reverse.
    pub components_on_node: &'a dyn Fn() -> Vec<Written>,
}

/// The version another anchor on this node wrote, as its component was started with it: its
/// manifest and credentials, each as the node holds it where that is still what the version
/// wrote (its ledger's hash), left out where it is not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub component: String,
    pub manifest: HostPath,
    /// Every file of the version the node still holds as written, the manifest included.
    pub files: Vec<(HostPath, Vec<u8>)>,
}

impl Written {
    fn file(&self, path: &str) -> Option<&[u8]> {
        self.files
            .iter()
            .find(|(p, _)| p.to_string() == path)
            .map(|(_, c)| c.as_slice())
    }
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
    let containers = clients::containers(manifest.content);
    // Whether a file a flag of `flags` names changes (the node's clients are read only then).
    let named_file_changes = |flags: &[&str]| {
        containers
            .iter()
            .flat_map(|c| flags.iter().filter_map(|f| c.flag(f)))
            .any(|path| files.iter().any(|f| f.changes && f.path.to_string() == path))
    };
    let serves = containers
        .iter()
        .any(|c| SERVING_FLAGS.iter().any(|f| c.flag(f).is_some()));
    let serving_changes = serves && manifest.changes || named_file_changes(&SERVING_FLAGS);
    let bundle_changes = named_file_changes(&CLIENT_CA_FLAGS);
    let held = if serving_changes || bundle_changes {
        held_clients(files, &(ctx.clients_on_node)())
    } else {
        Vec::new()
    };
    covers_clients(&leaves, &containers, manifest, &held, ctx)?;
    keeps_trust(files, &containers, manifest, &held, ctx)?;
    etcd_pairing(files, &containers, manifest, ctx)?;
    Ok(())
}

/// kube-apiserver's flags for etcd: the certificate it presents, and the bundle it verifies etcd's with.
const APISERVER_ETCD_FLAGS: [&str; 2] = ["etcd-certfile", "etcd-cafile"];
/// etcd's flags for its clients: the bundle it verifies them with, and the certificate it serves.
const ETCD_CLIENT_FLAGS: [&str; 2] = ["trusted-ca-file", "cert-file"];

/// One side's two files, by path.
struct Side<'p> {
    /// `--etcd-certfile` or `--trusted-ca-file`.
    first: &'p str,
    /// `--etcd-cafile` or `--cert-file`.
    second: &'p str,
}

fn side<'p>(containers: &'p [clients::Container], flags: [&str; 2]) -> Option<Side<'p>> {
    containers.iter().find_map(|c| {
        Some(Side {
            first: c.flag(flags[0])?,
            second: c.flag(flags[1])?,
        })
    })
}

/// Across charts on one node: the certificate kube-apiserver presents to etcd
/// (`--etcd-certfile`) must be signed by a CA etcd verifies clients with (`--trusted-ca-file`),
/// and the certificate etcd serves (`--cert-file`) by a CA of kube-apiserver's `--etcd-cafile`.
/// This version's side is judged as it writes it; the other side as its anchor's ledger says
/// the component was started with (a file two charts share may hold the other chart's newer
/// content, which the running component has not loaded). Refused only where the pairing as
/// the node holds it works: a version is not blamed for a break it does not make.
fn etcd_pairing(
    files: &[File],
    containers: &[clients::Container],
    manifest: &File,
    ctx: &Context,
) -> Result<(), CredentialError> {
    let apiserver = side(containers, APISERVER_ETCD_FLAGS);
    let etcd = side(containers, ETCD_CLIENT_FLAGS);
    let mine = match (&apiserver, &etcd) {
        (Some(s), _) | (None, Some(s)) => s,
        (None, None) => return Ok(()),
    };
    let changed = |path: &str| files.iter().any(|f| f.changes && f.path.to_string() == path);
    if !(manifest.changes || changed(mine.first) || changed(mine.second)) {
        return Ok(());
    }
    let on_node = |path: &str| HostPath::parse(path).ok().and_then(|p| (ctx.on_node)(&p));
    let as_written = |path: &str| {
        files
            .iter()
            .find(|f| f.path.to_string() == path)
            .map(|f| f.content.to_vec())
            .or_else(|| on_node(path))
    };
    for other in (ctx.components_on_node)() {
        let Some(text) = other.file(&other.manifest.to_string()) else {
            continue;
        };
        let theirs = clients::containers(text);
        let from_other = |path: &str| other.file(path).map(<[u8]>::to_vec);
        type Read<'r> = &'r dyn Fn(&str) -> Option<Vec<u8>>;
        // Each side's files: this version's (as written, or as the node holds them) and the
        // other anchor's as its ledger records them.
        let pairing = |a: &Side, e: &Side, apiserver_files: Read, etcd_files: Read, manifests: &[String; 2]| Pairing {
            client: apiserver_files(a.first),
            etcd_trust: etcd_files(e.first),
            serving: etcd_files(e.second),
            apiserver_trust: apiserver_files(a.second),
            paths: [a.first, e.first, e.second, a.second].map(str::to_owned),
            manifests: manifests.clone(),
        };
        let (new, held) = match (&apiserver, &etcd) {
            (Some(a), _) => {
                let Some(e) = side(&theirs, ETCD_CLIENT_FLAGS) else {
                    continue;
                };
                let manifests = [manifest.path.to_string(), other.manifest.to_string()];
                (
                    pairing(a, &e, &as_written, &from_other, &manifests),
                    pairing(a, &e, &on_node, &from_other, &manifests),
                )
            }
            (None, Some(e)) => {
                let Some(a) = side(&theirs, APISERVER_ETCD_FLAGS) else {
                    continue;
                };
                let manifests = [other.manifest.to_string(), manifest.path.to_string()];
                (
                    pairing(&a, e, &from_other, &as_written, &manifests),
                    pairing(&a, e, &from_other, &on_node, &manifests),
                )
            }
            (None, None) => unreachable!("returned above"),
        };
        if held.broken().is_some() {
            continue;
        }
        if let Some(broken) = new.broken() {
            let changes = |path: &str| changed(path).then(|| path.to_owned());
            let place = |a: &str, b: &str| {
                changes(a)
                    .or_else(|| changes(b))
                    .unwrap_or_else(|| manifest.path.to_string())
            };
            return Err(match broken {
                Broken::ClientRefused { subject, issuer } => {
                    CredentialError::EtcdRefusesApiServer(Box::new(PairingBreak {
                        place: place(&new.paths[0], &new.paths[1]),
                        subject,
                        issuer,
                        apiserver_manifest: new.manifests[0].clone(),
                        trust: new.paths[1].clone(),
                        etcd_manifest: new.manifests[1].clone(),
                    }))
                }
                Broken::ServerRefused { subject, issuer } => {
                    CredentialError::ApiServerRefusesEtcd(Box::new(PairingBreak {
                        place: place(&new.paths[2], &new.paths[3]),
                        subject,
                        issuer,
                        apiserver_manifest: new.manifests[0].clone(),
                        trust: new.paths[3].clone(),
                        etcd_manifest: new.manifests[1].clone(),
                    }))
                }
            });
        }
    }
    Ok(())
}

/// kube-apiserver and etcd on one node, each file's content where known.
struct Pairing {
    client: Option<Vec<u8>>,
    etcd_trust: Option<Vec<u8>>,
    serving: Option<Vec<u8>>,
    apiserver_trust: Option<Vec<u8>>,
    /// `--etcd-certfile`, `--trusted-ca-file`, `--cert-file`, `--etcd-cafile`.
    paths: [String; 4],
    /// kube-apiserver's, etcd's.
    manifests: [String; 2],
}

enum Broken {
    ClientRefused { subject: String, issuer: String },
    ServerRefused { subject: String, issuer: String },
}

impl Pairing {
    /// The first way the two would refuse each other; `None` when they would not, or when a
    /// file is not known (nothing to judge by).
    fn broken(&self) -> Option<Broken> {
        let refuses = |leaf: &Option<Vec<u8>>, leaf_path: &str, bundle: &Option<Vec<u8>>, bundle_path: &str| {
            let leaf = certificates_in_path(leaf_path, leaf.as_deref()?).into_iter().next()?;
            let cas = certificates_in_path(bundle_path, bundle.as_deref()?);
            let (_, parsed) = x509_parser::parse_x509_certificate(&leaf).ok()?;
            (!signed_by_any(&parsed, &cas)).then(|| (parsed.subject().to_string(), parsed.issuer().to_string()))
        };
        if let Some((subject, issuer)) = refuses(&self.client, &self.paths[0], &self.etcd_trust, &self.paths[1]) {
            return Some(Broken::ClientRefused { subject, issuer });
        }
        refuses(&self.serving, &self.paths[2], &self.apiserver_trust, &self.paths[3])
            .map(|(subject, issuer)| Broken::ServerRefused { subject, issuer })
    }
}

fn certificates_in_path(path: &str, bytes: &[u8]) -> Vec<Vec<u8>> {
    HostPath::parse(path)
        .map(|p| certificates_in(&p, bytes))
        .unwrap_or_default()
}

/// What the node's clients hold: each file as the node has it, or as this version writes it.
struct Held {
    path: HostPath,
    content: Vec<u8>,
}

fn held_clients(files: &[File<'_>], on_node: &[(HostPath, Vec<u8>)]) -> Vec<Held> {
    on_node
        .iter()
        .map(|(path, content)| Held {
            path: path.clone(),
            content: files
                .iter()
                .find(|f| f.path == path)
                .map_or_else(|| content.clone(), |f| f.content.to_vec()),
        })
        .collect()
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

/// A certificate the manifest serves with (by flag) must cover every name its clients dial:
/// those its own flags give (`clients::serving`), the node's address when the manifest uses it,
/// and, for kube-apiserver, the server of every kubeconfig on the node that dials this node
/// (loopback or its own address) at its secure port; and a new one may not drop a name the
/// node's certificate at that path covers, unless `spec.droppedServingNames` lists it.
fn covers_clients(
    leaves: &[Cert],
    containers: &[clients::Container],
    manifest: &File,
    held: &[Held],
    ctx: &Context,
) -> Result<(), CredentialError> {
    let manifest_path = manifest.path.to_string();
    let text = String::from_utf8_lossy(manifest.content);
    for container in containers {
        for (flag, mut dialed) in clients::serving(container, &manifest_path) {
            let Some(path) = container.flag(flag) else { continue };
            let Some(cert) = leaves.iter().find(|c| c.path.to_string() == path) else {
                continue;
            };
            if !cert.changes && !manifest.changes {
                continue;
            }
            if let Some(ip) = ctx.node_ip
                && text.contains(&ip.to_string())
            {
                dialed.push(clients::Dialed {
                    name: clients::Name::Ip(ip),
                    client: format!("a client of the node's address in {manifest_path}"),
                });
            }
            if container.program == "kube-apiserver" && flag == "tls-cert-file" {
                // Only a server that is this node dials this kube-apiserver: loopback, or the
                // node's own address (another node's address or a load balancer's name may be
                // served by another API server).
                let port = container.flag("secure-port").unwrap_or("6443");
                let own: Vec<clients::Name> = ctx
                    .node_ip
                    .into_iter()
                    .chain(container.flag("advertise-address").and_then(|a| a.parse().ok()))
                    .map(clients::Name::Ip)
                    .collect();
                dialed.extend(
                    held.iter()
                        .flat_map(|h| clients::kubeconfig_servers(&h.path, &h.content, port))
                        .filter(|d| d.name.is_loopback() || own.contains(&d.name)),
                );
            }
            let parsed = parse(cert)?;
            let sans = clients::names(&parsed);
            let listed = || {
                if sans.is_empty() {
                    "none".to_owned()
                } else {
                    sans.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
                }
            };
            if let Some(missing) = dialed.iter().find(|d| !clients::covers(&sans, &d.name)) {
                return Err(CredentialError::MissingName {
                    place: cert.place.clone(),
                    subject: parsed.subject().to_string(),
                    name: match missing.name {
                        clients::Name::Ip(ip) if Some(ip) == ctx.node_ip => format!("the node's address {ip}"),
                        ref name => name.to_string(),
                    },
                    client: missing.client.clone(),
                    names: listed(),
                });
            }
            if !cert.changes {
                continue;
            }
            let held_names: Vec<clients::Name> = (ctx.on_node)(cert.path)
                .and_then(|bytes| first_block(&bytes, |l| l == "CERTIFICATE"))
                .and_then(|der| {
                    x509_parser::parse_x509_certificate(&der)
                        .ok()
                        .filter(|(_, c)| !c.is_ca())
                        .map(|(_, c)| clients::names(&c))
                })
                .unwrap_or_default();
            let allowed = |name: &clients::Name| {
                ctx.dropped_names
                    .iter()
                    .any(|d| d.trim().eq_ignore_ascii_case(&name.to_string()))
            };
            if let Some(dropped) = held_names.iter().find(|n| !sans.contains(n) && !allowed(n)) {
                return Err(CredentialError::DroppedName {
                    place: cert.place.clone(),
                    subject: parsed.subject().to_string(),
                    name: dropped.to_string(),
                    names: listed(),
                });
            }
        }
    }
    Ok(())
}

/// A CA bundle the manifest verifies clients with (by flag), changed by this version, must
/// still trust every client certificate the node holds that the bundle on the node trusts
/// (signed by one of its CAs): a kubeconfig's client certificate, kube-apiserver's etcd client,
/// this member's peer certificate, as the node has them or as this version writes them.
fn keeps_trust(
    files: &[File],
    containers: &[clients::Container],
    manifest: &File,
    held: &[Held],
    ctx: &Context,
) -> Result<(), CredentialError> {
    for container in containers {
        for flag in CLIENT_CA_FLAGS {
            let Some(path) = container.flag(flag) else { continue };
            let Some(file) = files.iter().find(|f| f.changes && f.path.to_string() == path) else {
                continue;
            };
            let Some(before) = (ctx.on_node)(file.path) else {
                continue;
            };
            let old = certificates_in(file.path, &before);
            let new = certificates_in(file.path, file.content);
            for (place, der) in held.iter().flat_map(|h| client_certificates(&h.path, &h.content)) {
                let Ok((_, client)) = x509_parser::parse_x509_certificate(&der) else {
                    continue;
                };
                if signed_by_any(&client, &old) && !signed_by_any(&client, &new) {
                    return Err(CredentialError::DroppedTrust {
                        place: file.path.to_string(),
                        bundle: format!("--{flag} in {}", manifest.path),
                        client: place,
                        subject: client.subject().to_string(),
                        issuer: client.issuer().to_string(),
                    });
                }
            }
        }
    }
    Ok(())
}

/// Whether one of `cas` (DER) is `cert`'s issuer by name and verifies its signature.
fn signed_by_any(cert: &X509Certificate, cas: &[Vec<u8>]) -> bool {
    cas.iter().any(|der| {
        x509_parser::parse_x509_certificate(der).is_ok_and(|(_, ca)| {
            ca.subject().as_raw() == cert.issuer().as_raw() && cert.verify_signature(Some(ca.public_key())).is_ok()
        })
    })
}

/// The client certificates a file holds, each with its place: a PEM file's first certificate
/// when it is no CA and may authenticate a client (no extended key usage, or `clientAuth`), and
/// each kubeconfig user's embedded certificate.
fn client_certificates(path: &HostPath, content: &[u8]) -> Vec<(String, Vec<u8>)> {
    if let Some(blocks) = pem_blocks(content) {
        return blocks
            .into_iter()
            .find(|b| b.label == "CERTIFICATE")
            .filter(|b| {
                x509_parser::parse_x509_certificate(&b.contents).is_ok_and(|(_, c)| {
                    !c.is_ca()
                        && match c.extended_key_usage() {
                            Ok(Some(eku)) => eku.value.client_auth || eku.value.any,
                            Ok(None) => true,
                            Err(_) => false,
                        }
                })
            })
            .map(|b| (path.to_string(), b.contents))
            .into_iter()
            .collect();
    }
    let file = File {
        path,
        content,
        changes: false,
    };
    kubeconfig(&file)
        .into_iter()
        .flatten()
        .filter_map(|(cert, _, _)| cert)
        .map(|c| (c.place, c.der))
        .collect()
}

/// A credential the node holds in place of the version's because it was renewed there
/// (`kubeadm certs renew`): kept, not reverted, until the version carries it or a later one
/// (design.md, "Renewals made on the node").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Renewed {
    pub path: HostPath,
    /// What the node holds there.
    pub content: Vec<u8>,
    /// For the operator: which certificate, valid until when, against the version's date.
    pub detail: String,
}

/// A credential of the version next to what the node holds at its path.
pub struct OnNode<'a> {
    pub path: &'a HostPath,
    pub wanted: &'a [u8],
    pub on_node: Option<&'a [u8]>,
}

/// The files among `files` whose content on the node is a renewal of the version's, each
/// certificate in them being the version's with the same subject, issuer and CA flag, every
/// name it had, a later notAfter, valid at `now` and signed by the version's CA of that name
/// (where the version carries it); everything else in the file the same, except a private key
/// that belongs to the renewed certificate (kubeadm renews with a new key). A key file
/// (`x.key`) is kept with its renewed `x.crt` when it holds the renewed certificate's key, and
/// a renewed `x.crt` with a new key only when `x.key` holds that key.
pub fn renewed_on_node(files: &[OnNode<'_>], now: i64) -> Vec<Renewed> {
    let cas: Vec<Vec<u8>> = files
        .iter()
        .flat_map(|f| certificates_in(f.path, f.wanted))
        .filter(|der| x509_parser::parse_x509_certificate(der).is_ok_and(|(_, c)| c.is_ca()))
        .collect();
    let mut renewed: Vec<(Renewed, RenewedFile)> = files
        .iter()
        .filter_map(|f| {
            let node = f.on_node.filter(|n| *n != f.wanted)?;
            let found = match (pem_blocks(f.wanted), pem_blocks(node)) {
                (Some(wanted), Some(held)) => renewed_pem(&wanted, &held, &cas, now)?,
                (None, None) => renewed_kubeconfig(f.path, f.wanted, node, &cas, now)?,
                _ => return None,
            };
            Some((
                Renewed {
                    path: f.path.clone(),
                    content: node.to_vec(),
                    detail: String::new(),
                },
                found,
            ))
        })
        .collect();
    // The kubeadm pairing across files: a new key in `x.key` is kept with the renewed `x.crt`
    // it belongs to. `Some(None)`: the key file is managed but holds no key judged here.
    let key_beside = |cert: &HostPath| -> Option<(HostPath, Option<Vec<u8>>)> {
        let key_path = HostPath::parse(&format!("{}.key", cert.to_string().strip_suffix(".crt")?)).ok()?;
        let key = files.iter().find(|f| *f.path == key_path)?;
        Some((key_path, key.on_node.and_then(first_key)))
    };
    let kept_keys: Vec<(HostPath, String)> = renewed
        .iter()
        .filter_map(|(r, f)| {
            let leaf = f.certificates.first().filter(|c| c.new_key)?;
            let (key_path, key) = key_beside(&r.path)?;
            (key.as_ref() == Some(&leaf.public_key)).then(|| (key_path, r.path.to_string()))
        })
        .collect();
    renewed.retain_mut(|(r, f)| {
        if f.certificates.is_empty() {
            // A key alone: kept only beside its renewed certificate.
            return match kept_keys.iter().find(|(k, _)| *k == r.path) {
                Some((_, cert)) if f.new_keys.len() == 1 => {
                    r.detail = format!("the key of {cert}, renewed on the node with it");
                    true
                }
                _ => false,
            };
        }
        // A renewed certificate's new key must be there to sign with: in the same file, or in
        // `x.key` beside it (a key the component does not carry is not judged); and every new
        // key in the file belongs to a renewed certificate.
        let keys_found = f.certificates.iter().filter(|c| c.new_key).all(|c| {
            f.new_keys.contains(&c.public_key)
                || key_beside(&r.path).is_none_or(|(_, key)| key.as_ref() == Some(&c.public_key))
        });
        let keys_belong = f
            .new_keys
            .iter()
            .all(|k| f.certificates.iter().any(|c| c.public_key == *k));
        if !(keys_found && keys_belong) {
            return false;
        }
        r.detail = f
            .certificates
            .iter()
            .map(|c| {
                format!(
                    "{} renewed on the node: valid until {} (the version's until {}){}",
                    c.subject,
                    c.not_after,
                    c.wanted_not_after,
                    if c.new_key { ", with a new key" } else { "" }
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        true
    });
    renewed.into_iter().map(|(r, _)| r).collect()
}

/// What a renewed file holds that differs from the version's.
struct RenewedFile {
    certificates: Vec<RenewedCertificate>,
    /// Private keys in the file that differ from the version's: their public keys.
    new_keys: Vec<Vec<u8>>,
}

struct RenewedCertificate {
    subject: String,
    not_after: String,
    wanted_not_after: String,
    new_key: bool,
    public_key: Vec<u8>,
}

fn renewed_pem(wanted: &[Pem], held: &[Pem], cas: &[Vec<u8>], now: i64) -> Option<RenewedFile> {
    if wanted.len() != held.len() {
        return None;
    }
    let mut found = RenewedFile {
        certificates: Vec::new(),
        new_keys: Vec::new(),
    };
    for (w, h) in wanted.iter().zip(held) {
        if w.label != h.label {
            return None;
        }
        if w.contents == h.contents {
            continue;
        }
        if w.label == "CERTIFICATE" {
            found.certificates.push(renews(&w.contents, &h.contents, cas, now)?);
        } else if w.label.ends_with("PRIVATE KEY") {
            found.new_keys.push(public_key(&h.label, &h.contents)?);
        } else {
            return None;
        }
    }
    Some(found)
}

/// A kubeconfig whose only differences are its users' client certificates and keys.
fn renewed_kubeconfig(path: &HostPath, wanted: &[u8], held: &[u8], cas: &[Vec<u8>], now: i64) -> Option<RenewedFile> {
    let parse = |bytes: &[u8]| -> Option<serde_yaml_ng::Value> {
        let doc: serde_yaml_ng::Value = serde_yaml_ng::from_slice(bytes).ok()?;
        (doc.get("kind")?.as_str()? == "Config").then_some(doc)
    };
    let (wanted_doc, held_doc) = (parse(wanted)?, parse(held)?);
    if without_client_credentials(&wanted_doc) != without_client_credentials(&held_doc) {
        return None;
    }
    let wanted_file = File {
        path,
        content: wanted,
        changes: false,
    };
    let held_file = File {
        path,
        content: held,
        changes: false,
    };
    // The kubeconfig's own CA counts as the version's.
    let mut cas = cas.to_vec();
    cas.extend(
        kubeconfig(&wanted_file)?
            .into_iter()
            .filter_map(|(_, _, ca)| ca.map(|c| c.der)),
    );
    let mut found = RenewedFile {
        certificates: Vec::new(),
        new_keys: Vec::new(),
    };
    for ((w_cert, w_key, _), (h_cert, h_key, _)) in kubeconfig(&wanted_file)?.into_iter().zip(kubeconfig(&held_file)?) {
        let (w_cert, h_cert) = match (w_cert, h_cert) {
            (Some(w), Some(h)) => (w, h),
            (None, None) => continue,
            _ => return None,
        };
        if w_cert.der == h_cert.der {
            if w_key.map(|k| k.public) != h_key.map(|k| k.public) {
                return None;
            }
            continue;
        }
        let renewal = renews(&w_cert.der, &h_cert.der, &cas, now)?;
        if renewal.new_key {
            let key = h_key?.public?;
            if key != renewal.public_key {
                return None;
            }
            found.new_keys.push(key);
        } else if w_key.map(|k| k.public) != h_key.map(|k| k.public) {
            return None;
        }
        found.certificates.push(renewal);
    }
    Some(found)
}

/// The document with every user's embedded client certificate and key taken out.
fn without_client_credentials(doc: &serde_yaml_ng::Value) -> serde_yaml_ng::Value {
    let mut doc = doc.clone();
    if let Some(users) = doc.get_mut("users").and_then(|u| u.as_sequence_mut()) {
        for user in users {
            if let Some(auth) = user.get_mut("user").and_then(|a| a.as_mapping_mut()) {
                auth.remove("client-certificate-data");
                auth.remove("client-key-data");
            }
        }
    }
    doc
}

/// `held` renews `wanted` (see [`renewed_on_node`]).
fn renews(wanted: &[u8], held: &[u8], cas: &[Vec<u8>], now: i64) -> Option<RenewedCertificate> {
    let (_, w) = x509_parser::parse_x509_certificate(wanted).ok()?;
    let (_, h) = x509_parser::parse_x509_certificate(held).ok()?;
    let same = h.subject().as_raw() == w.subject().as_raw()
        && h.issuer().as_raw() == w.issuer().as_raw()
        && h.is_ca() == w.is_ca()
        && h.validity().not_after.timestamp() > w.validity().not_after.timestamp()
        && valid_at(&h, now).is_ok()
        && names(&w).iter().all(|n| names(&h).contains(n));
    if !same {
        return None;
    }
    let new_key = h.public_key().raw != w.public_key().raw;
    let signed = if h.subject().as_raw() == h.issuer().as_raw() {
        // A CA renewed in place keeps its key, or every certificate it signed breaks.
        !new_key && h.verify_signature(None).is_ok()
    } else {
        let named: Vec<X509Certificate> = cas
            .iter()
            .filter_map(|der| x509_parser::parse_x509_certificate(der).ok().map(|(_, c)| c))
            .filter(|ca| ca.subject().as_raw() == h.issuer().as_raw())
            .collect();
        named.is_empty() || named.iter().any(|ca| h.verify_signature(Some(ca.public_key())).is_ok())
    };
    signed.then(|| RenewedCertificate {
        subject: h.subject().to_string(),
        not_after: rfc3339(h.validity().not_after.timestamp()),
        wanted_not_after: rfc3339(w.validity().not_after.timestamp()),
        new_key,
        public_key: h.public_key().subject_public_key.data.to_vec(),
    })
}

/// A certificate's subject alternative names, as text.
fn names(c: &X509Certificate) -> Vec<String> {
    match c.subject_alternative_name() {
        Ok(Some(san)) => san.value.general_names.iter().map(|n| n.to_string()).collect(),
        _ => Vec::new(),
    }
}

/// The public key of the first private key in a PEM file; `None` inside when it is of a
/// format not judged.
fn first_key(pem: &[u8]) -> Option<Vec<u8>> {
    let block = pem_blocks(pem)?
        .into_iter()
        .find(|b| b.label.ends_with("PRIVATE KEY"))?;
    public_key(&block.label, &block.contents)
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

    /// The kube-apiserver manifest of these tests: serving on the node's address.
    fn apiserver_manifest(extra: &str) -> String {
        format!(
            "spec:\n  containers:\n  - command: [kube-apiserver, --advertise-address={NODE}, --tls-cert-file=/etc/kubernetes/pki/apiserver.crt{extra}]\n"
        )
    }

    /// Checks `files` (path, content), all of them changing, with `on_node` as the node's
    /// current content.
    fn check_with(files: &[(&str, String)], on_node: &[(&str, String)]) -> Result<(), CredentialError> {
        check_in(files, &apiserver_manifest(""), on_node, &[])
    }

    /// [`check_with`] with a manifest and `spec.droppedServingNames`; every file of `on_node`
    /// is also offered as a client's.
    fn check_in(
        files: &[(&str, String)],
        manifest_text: &str,
        on_node: &[(&str, String)],
        dropped: &[String],
    ) -> Result<(), CredentialError> {
        check_beside(files, MANIFEST, manifest_text, on_node, dropped, &[])
    }

    /// [`check_in`] of the manifest at `manifest_at`, with `others` as the versions the other
    /// anchors on the node wrote.
    fn check_beside(
        files: &[(&str, String)],
        manifest_at: &str,
        manifest_text: &str,
        on_node: &[(&str, String)],
        dropped: &[String],
        others: &[Written],
    ) -> Result<(), CredentialError> {
        let paths: Vec<HostPath> = files.iter().map(|(p, _)| hp(p)).collect();
        let manifest_path = hp(manifest_at);
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
        let clients = || node.clone();
        let ctx = Context {
            now: NOW,
            node_ip: Some(NODE.parse().unwrap()),
            on_node: &read,
            clients_on_node: &clients,
            dropped_names: dropped,
            components_on_node: &|| others.to_vec(),
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
                "/etc/kubernetes/pki/apiserver.crt: serving certificate CN=kube-apiserver does not cover the node's address {NODE}, which a client of --advertise-address={NODE} in {MANIFEST} dials (its names: 10.0.0.11, cp-1)"
            )
        );
    }

    #[test]
    fn a_serving_certificate_without_a_name_its_clients_dial_is_refused() {
        let ca = ca("kubernetes");
        let manifest = apiserver_manifest(", --service-cluster-ip-range=10.96.0.0/12");
        // A serving certificate of these names, with these files on the node.
        let serving = |sans: &[&str], on_node: &[(&str, String)]| {
            check_in(
                &apiserver(&ca, &leaf(&ca, sans, 2026, 2028, None)),
                &manifest,
                on_node,
                &[],
            )
        };
        let missing = |e: &CredentialError| match e {
            CredentialError::MissingName { name, .. } => name.clone(),
            other => panic!("{other}"),
        };
        // Every pod dials the first service address, and some dial the Service's name.
        let e = serving(&[NODE, "kubernetes.default.svc"], &[]).unwrap_err();
        assert_eq!(missing(&e), "10.96.0.1");
        assert!(
            e.to_string().contains("does not cover 10.96.0.1, which every pod, through the kubernetes Service at 10.96.0.1 (the first address of --service-cluster-ip-range=10.96.0.0/12 in /etc/kubernetes/manifests/kube-apiserver.yaml) dials"),
            "{e}"
        );
        assert_eq!(
            missing(&serving(&[NODE, "10.96.0.1"], &[]).unwrap_err()),
            "kubernetes.default.svc"
        );
        let all = [NODE, "10.96.0.1", "kubernetes.default.svc"];
        serving(&all, &[]).unwrap();
        // A kubeconfig on the node that dials 127.0.0.1 at the secure port.
        let client = leaf(&ca, &[], 2026, 2028, None);
        let local = kubeconfig_text(&ca, &client.0, &client.1)
            .replace(&format!("https://{NODE}:6443"), "https://127.0.0.1:6443");
        let e = serving(&all, &[("/etc/kubernetes/scheduler.conf", local.clone())]).unwrap_err();
        assert!(
            e.to_string().contains(
                "does not cover 127.0.0.1, which /etc/kubernetes/scheduler.conf (server https://127.0.0.1:6443) dials"
            ),
            "{e}"
        );
        // Another port is another server; so is another node's address (a load balancer's name
        // is for the values to declare).
        for other in ["127.0.0.1:7443", "10.0.0.11:6443", "api.example:6443"] {
            let elsewhere = local.replace("127.0.0.1:6443", other);
            serving(&all, &[("/etc/kubernetes/scheduler.conf", elsewhere)]).unwrap();
        }
    }

    #[test]
    fn an_etcd_certificate_must_cover_the_urls_it_listens_and_advertises_on() {
        let ca = ca("etcd-ca");
        let manifest = format!(
            "spec:\n  containers:\n  - command: [etcd, --cert-file=/etc/kubernetes/pki/etcd/server.crt, '--listen-client-urls=https://127.0.0.1:2379,https://{NODE}:2379', --advertise-client-urls=https://{NODE}:2379, --peer-cert-file=/etc/kubernetes/pki/etcd/peer.crt, --listen-peer-urls=https://0.0.0.0:2380, --initial-advertise-peer-urls=https://{NODE}:2380]\n"
        );
        let files = |server: &(String, String), peer: &(String, String)| {
            vec![
                ("/etc/kubernetes/pki/etcd/ca.crt", ca.pem.clone()),
                ("/etc/kubernetes/pki/etcd/server.crt", server.0.clone()),
                ("/etc/kubernetes/pki/etcd/server.key", server.1.clone()),
                ("/etc/kubernetes/pki/etcd/peer.crt", peer.0.clone()),
                ("/etc/kubernetes/pki/etcd/peer.key", peer.1.clone()),
            ]
        };
        let peer = leaf(&ca, &[NODE], 2026, 2028, None);
        let e = check_in(
            &files(&leaf(&ca, &[NODE], 2026, 2028, None), &peer),
            &manifest,
            &[],
            &[],
        )
        .unwrap_err();
        assert!(
            e.to_string().contains(&format!(
                "/etc/kubernetes/pki/etcd/server.crt: serving certificate CN=kube-apiserver does not cover 127.0.0.1, which a client of https://127.0.0.1:2379 (--listen-client-urls in {MANIFEST}) dials (its names: {NODE})"
            )),
            "{e}"
        );
        check_in(
            &files(&leaf(&ca, &["127.0.0.1", NODE], 2026, 2028, None), &peer),
            &manifest,
            &[],
            &[],
        )
        .unwrap();
        // The peer certificate: the advertised peer URL (an unspecified listen address names no one).
        let e = check_in(
            &files(
                &leaf(&ca, &["127.0.0.1", NODE], 2026, 2028, None),
                &leaf(&ca, &["10.0.0.99"], 2026, 2028, None),
            ),
            &manifest,
            &[],
            &[],
        )
        .unwrap_err();
        assert!(e.to_string().contains("--initial-advertise-peer-urls"), "{e}");
    }

    #[test]
    fn a_new_serving_certificate_keeps_every_name_of_the_one_on_the_node_unless_told() {
        let ca = ca("kubernetes");
        let held = apiserver(&ca, &leaf(&ca, &[NODE, "127.0.0.1", "api.example"], 2026, 2028, None));
        let renewed = apiserver(&ca, &leaf(&ca, &[NODE, "api.example"], 2026, 2029, None));
        let e = check_in(&renewed, &apiserver_manifest(""), &held, &[]).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "/etc/kubernetes/pki/apiserver.crt: serving certificate CN=kube-apiserver drops 127.0.0.1, which the certificate on the node covers: a client that dials it would be refused (its names: {NODE}, api.example); to drop it on purpose, list it in spec.droppedServingNames"
            )
        );
        check_in(&renewed, &apiserver_manifest(""), &held, &["127.0.0.1".into()]).unwrap();
        // Adding a name is always fine.
        let more = apiserver(
            &ca,
            &leaf(
                &ca,
                &[NODE, "127.0.0.1", "api.example", "api2.example"],
                2026,
                2029,
                None,
            ),
        );
        check_in(&more, &apiserver_manifest(""), &held, &[]).unwrap();
    }

    #[test]
    fn a_client_ca_bundle_keeps_trusting_the_clients_the_node_holds() {
        let old = ca("kubernetes");
        let new = ca("kubernetes-2");
        let manifest = apiserver_manifest(", --client-ca-file=/etc/kubernetes/pki/ca.crt");
        let serving = |ca: &Ca| leaf(ca, &[NODE], 2026, 2028, None);
        let kubelet = |ca: &Ca| {
            let c = leaf(ca, &[], 2026, 2028, None);
            ("/etc/kubernetes/kubelet.conf", kubeconfig_text(ca, &c.0, &c.1))
        };
        let version = |bundle: String, ca: &Ca| {
            let s = serving(ca);
            vec![
                ("/etc/kubernetes/pki/ca.crt", bundle),
                ("/etc/kubernetes/pki/apiserver.crt", s.0),
                ("/etc/kubernetes/pki/apiserver.key", s.1),
            ]
        };
        let on_node = |bundle: &str, client: (&'static str, String)| {
            vec![("/etc/kubernetes/pki/ca.crt", bundle.to_owned()), client]
        };
        // Replaced without a bundle while the kubelet holds a certificate of the old CA: refused.
        let e = check_in(
            &version(new.pem.clone(), &new),
            &manifest,
            &on_node(&old.pem, kubelet(&old)),
            &[],
        )
        .unwrap_err();
        assert!(
            matches!(&e, CredentialError::DroppedTrust { client, .. } if client.starts_with("/etc/kubernetes/kubelet.conf (user scheduler")),
            "{e}"
        );
        let text = e.to_string();
        assert!(
            text.starts_with(&format!("/etc/kubernetes/pki/ca.crt: the CA bundle of --client-ca-file in {MANIFEST} no longer trusts /etc/kubernetes/kubelet.conf (user scheduler: client-certificate-data) (subject CN=kube-apiserver, issuer CN=kubernetes)")),
            "{text}"
        );
        assert!(text.ends_with(CA_ROTATION), "{text}");
        // The steps: a bundle of both; leaves of the new CA; then the old CA dropped.
        let both = format!("{}{}", old.pem, new.pem);
        check_in(
            &version(both.clone(), &old),
            &manifest,
            &on_node(&old.pem, kubelet(&old)),
            &[],
        )
        .unwrap();
        check_in(
            &version(new.pem.clone(), &new),
            &manifest,
            &on_node(&both, kubelet(&new)),
            &[],
        )
        .unwrap();
        // A client this version writes itself is judged as written.
        let mut with_client = version(new.pem.clone(), &new);
        let (path, text) = kubelet(&new);
        with_client.push((path, text));
        check_in(&with_client, &manifest, &on_node(&old.pem, kubelet(&old)), &[]).unwrap();
        // A client the old bundle never trusted is none of its business.
        let other = ca("elsewhere");
        check_in(
            &version(new.pem.clone(), &new),
            &manifest,
            &on_node(&old.pem, kubelet(&other)),
            &[],
        )
        .unwrap();
    }

    const ETCD_MANIFEST: &str = "/etc/kubernetes/manifests/etcd.yaml";
    const ETCD_CA: &str = "/etc/kubernetes/pki/etcd/ca.crt";
    const ETCD_SERVER: &str = "/etc/kubernetes/pki/etcd/server.crt";
    const ETCD_CLIENT: &str = "/etc/kubernetes/pki/apiserver-etcd-client.crt";

    /// etcd's manifest as the charts write it, serving on 127.0.0.1 and the node's address.
    fn etcd_manifest() -> String {
        format!(
            "spec:\n  containers:\n  - command: [etcd, --listen-client-urls=https://127.0.0.1:2379\\,https://{NODE}:2379, --cert-file={ETCD_SERVER}, --key-file=/etc/kubernetes/pki/etcd/server.key, --trusted-ca-file={ETCD_CA}]\n"
        )
    }

    fn apiserver_etcd_manifest() -> String {
        apiserver_manifest(&format!(
            ", --etcd-servers=https://127.0.0.1:2379, --etcd-cafile={ETCD_CA}, --etcd-certfile={ETCD_CLIENT}, --etcd-keyfile=/etc/kubernetes/pki/apiserver-etcd-client.key"
        ))
    }

    /// An anchor's version on the node, each file written as the node holds it.
    fn written(component: &str, manifest_at: &str, manifest: String, files: &[(&str, String)]) -> Written {
        let mut all: Vec<(HostPath, Vec<u8>)> = files.iter().map(|(p, c)| (hp(p), c.as_bytes().to_vec())).collect();
        all.push((hp(manifest_at), manifest.into_bytes()));
        Written {
            component: component.into(),
            manifest: hp(manifest_at),
            files: all,
        }
    }

    fn both_pem(a: &Ca, b: &Ca) -> String {
        format!("{}{}", a.pem, b.pem)
    }

    #[test]
    fn kube_apiserver_and_etcd_on_one_node_keep_trusting_each_other() {
        let old = ca("etcd-ca");
        let new = ca("etcd-ca-2");
        let server = |ca: &Ca| leaf(ca, &["127.0.0.1", NODE], 2026, 2028, None);
        let client = |ca: &Ca| leaf(ca, &[], 2026, 2028, None);
        let (old_server, old_client) = (server(&old), client(&old));
        let etcd_files = |ca: &str, server: &(String, String)| {
            vec![
                (ETCD_CA, ca.to_owned()),
                (ETCD_SERVER, server.0.clone()),
                ("/etc/kubernetes/pki/etcd/server.key", server.1.clone()),
            ]
        };
        let apiserver_files = |ca: &str, client: &(String, String)| {
            vec![
                (ETCD_CA, ca.to_owned()),
                (ETCD_CLIENT, client.0.clone()),
                ("/etc/kubernetes/pki/apiserver-etcd-client.key", client.1.clone()),
            ]
        };
        let etcd_on_node = |ca: &str, server: &(String, String)| {
            written("etcd", ETCD_MANIFEST, etcd_manifest(), &etcd_files(ca, server))
        };
        let apiserver_on_node = |ca: &str, client: &(String, String)| {
            written(
                "kube-apiserver",
                MANIFEST,
                apiserver_etcd_manifest(),
                &apiserver_files(ca, client),
            )
        };
        let node = |files: Vec<(&'static str, String)>| files;
        let check_apiserver = |files: &[(&str, String)], held: &[(&str, String)], etcd: Written| {
            check_beside(files, MANIFEST, &apiserver_etcd_manifest(), held, &[], &[etcd])
        };
        let check_etcd = |files: &[(&str, String)], held: &[(&str, String)], apiserver: Written| {
            check_beside(files, ETCD_MANIFEST, &etcd_manifest(), held, &[], &[apiserver])
        };

        // kube-apiserver's new etcd client certificate, of a CA etcd does not trust: refused,
        // naming the certificate, the bundle etcd verifies it with and both manifests.
        let new_client = client(&new);
        let e = check_apiserver(
            &apiserver_files(&old.pem, &new_client),
            &node(apiserver_files(&old.pem, &old_client)),
            etcd_on_node(&old.pem, &old_server),
        )
        .unwrap_err();
        assert!(matches!(e, CredentialError::EtcdRefusesApiServer(_)), "{e}");
        let text = e.to_string();
        assert!(
            text.starts_with(&format!("{ETCD_CLIENT}: etcd on this node would refuse kube-apiserver's etcd client certificate CN=kube-apiserver (issuer CN=etcd-ca-2, --etcd-certfile in {MANIFEST}): etcd's --trusted-ca-file {ETCD_CA} (in {ETCD_MANIFEST}) holds no CA that signed it")),
            "{text}"
        );
        assert!(text.ends_with(CA_ROTATION), "{text}");
        // kube-apiserver's --etcd-cafile replaced by a CA that did not sign etcd's serving
        // certificate: refused, naming the bundle.
        let e = check_apiserver(
            &apiserver_files(&new.pem, &old_client),
            &node(apiserver_files(&old.pem, &old_client)),
            etcd_on_node(&old.pem, &old_server),
        )
        .unwrap_err();
        assert!(
            matches!(&e, CredentialError::ApiServerRefusesEtcd(b) if b.place == ETCD_CA && b.trust == ETCD_CA),
            "{e}"
        );
        // etcd's side: a serving certificate of a CA kube-apiserver does not trust, and a
        // --trusted-ca-file without the CA of kube-apiserver's client certificate.
        let e = check_etcd(
            &etcd_files(&format!("{}{}", old.pem, new.pem), &server(&new)),
            &node(etcd_files(&old.pem, &old_server)),
            apiserver_on_node(&old.pem, &old_client),
        )
        .unwrap_err();
        assert!(
            matches!(&e, CredentialError::ApiServerRefusesEtcd(b) if b.place == ETCD_SERVER),
            "{e}"
        );
        let e = check_etcd(
            &etcd_files(&new.pem, &server(&new)),
            &node(etcd_files(&old.pem, &old_server)),
            apiserver_on_node(&both_pem(&old, &new), &old_client),
        )
        .unwrap_err();
        assert!(
            matches!(&e, CredentialError::EtcdRefusesApiServer(b) if b.place == ETCD_CA),
            "{e}"
        );

        // The rotation in steps passes on both sides: etcd trusts both CAs first; then
        // kube-apiserver's client certificate of the new CA (and a bundle of both to verify
        // etcd by); then etcd's serving certificate of the new CA.
        let both = both_pem(&old, &new);
        check_etcd(
            &etcd_files(&both, &old_server),
            &node(etcd_files(&old.pem, &old_server)),
            apiserver_on_node(&old.pem, &old_client),
        )
        .unwrap();
        check_apiserver(
            &apiserver_files(&both, &new_client),
            &node(apiserver_files(&old.pem, &old_client)),
            etcd_on_node(&both, &old_server),
        )
        .unwrap();
        check_etcd(
            &etcd_files(&both, &server(&new)),
            &node(etcd_files(&both, &old_server)),
            apiserver_on_node(&both, &new_client),
        )
        .unwrap();

        // A pairing broken on the node already is not this version's doing; a side whose
        // files the node no longer holds as written (unknown) is not judged.
        check_apiserver(
            &apiserver_files(&old.pem, &new_client),
            &node(apiserver_files(&old.pem, &new_client)),
            etcd_on_node(&old.pem, &old_server),
        )
        .unwrap();
        let mut unknown = etcd_on_node(&old.pem, &old_server);
        unknown.files.retain(|(p, _)| p.to_string() != ETCD_CA);
        check_apiserver(
            &apiserver_files(&old.pem, &new_client),
            &node(apiserver_files(&old.pem, &old_client)),
            unknown,
        )
        .unwrap();
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
            clients_on_node: &|| Vec::new(),
            dropped_names: &[],
            components_on_node: &|| Vec::new(),
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

    /// `renewed_on_node` over the apiserver's files: the version holds `wanted`, the node `held`.
    fn kept(wanted: &[(&'static str, String)], held: &[(&'static str, String)]) -> Vec<String> {
        let paths: Vec<HostPath> = wanted.iter().map(|(p, _)| hp(p)).collect();
        let files: Vec<OnNode> = paths
            .iter()
            .zip(wanted)
            .map(|(path, (p, content))| OnNode {
                path,
                wanted: content.as_bytes(),
                on_node: held.iter().find(|(q, _)| q == p).map(|(_, c)| c.as_bytes()),
            })
            .collect();
        renewed_on_node(&files, NOW)
            .into_iter()
            .map(|r| {
                assert!(!r.detail.is_empty());
                r.path.to_string()
            })
            .collect()
    }

    const CRT: &str = "/etc/kubernetes/pki/apiserver.crt";
    const KEY: &str = "/etc/kubernetes/pki/apiserver.key";

    #[test]
    fn a_renewal_on_the_node_is_kept_with_its_key() {
        let ca = ca("kubernetes");
        let key = KeyPair::generate().unwrap();
        let wanted = apiserver(&ca, &leaf(&ca, &[NODE, "cp-1"], 2026, 2028, Some(&key)));
        // The same key, a later notAfter: the certificate is kept, the key was never different.
        let same_key = apiserver(&ca, &leaf(&ca, &[NODE, "cp-1"], 2026, 2029, Some(&key)));
        assert_eq!(kept(&wanted, &same_key), [CRT]);
        // kubeadm's way, a new key: both kept, together.
        let new_key = apiserver(&ca, &leaf(&ca, &[NODE, "cp-1", "more"], 2026, 2029, None));
        assert_eq!(kept(&wanted, &new_key), [CRT, KEY]);
        let renewed = kept(&wanted, &new_key);
        let detail = renewed_on_node(
            &[
                OnNode {
                    path: &hp(CRT),
                    wanted: wanted[1].1.as_bytes(),
                    on_node: Some(new_key[1].1.as_bytes()),
                },
                OnNode {
                    path: &hp(KEY),
                    wanted: wanted[2].1.as_bytes(),
                    on_node: Some(new_key[2].1.as_bytes()),
                },
            ],
            NOW,
        );
        assert_eq!(renewed.len(), detail.len());
        assert_eq!(
            detail[0].detail,
            "CN=kube-apiserver renewed on the node: valid until 2029-01-01T00:00:00Z (the version's until 2028-01-01T00:00:00Z), with a new key"
        );
        assert_eq!(
            detail[1].detail,
            format!("the key of {CRT}, renewed on the node with it")
        );
        assert_eq!(detail[1].content, new_key[2].1.as_bytes());
    }

    #[test]
    fn drift_that_is_no_renewal_is_not_kept() {
        let ca1 = ca("kubernetes");
        let key = KeyPair::generate().unwrap();
        let wanted = apiserver(&ca1, &leaf(&ca1, &[NODE, "cp-1"], 2026, 2028, Some(&key)));
        let with = |crt: &(String, String)| apiserver(&ca1, crt);
        let cases: Vec<(&str, Vec<(&'static str, String)>)> = vec![
            (
                "an earlier notAfter",
                with(&leaf(&ca1, &[NODE, "cp-1"], 2026, 2027, Some(&key))),
            ),
            ("a name dropped", with(&leaf(&ca1, &[NODE], 2026, 2029, Some(&key)))),
            (
                "not valid yet",
                with(&leaf(&ca1, &[NODE, "cp-1"], 2028, 2030, Some(&key))),
            ),
            ("signed by another CA of the same name", {
                let other = ca("kubernetes");
                with(&leaf(&other, &[NODE, "cp-1"], 2026, 2029, Some(&key)))
            }),
            ("a new key, the old key file", {
                let (cert, _) = leaf(&ca1, &[NODE, "cp-1"], 2026, 2029, None);
                with(&(cert, key.serialize_pem()))
            }),
            ("a new key that is not the certificate's", {
                let (cert, _) = leaf(&ca1, &[NODE, "cp-1"], 2026, 2029, None);
                with(&(cert, KeyPair::generate().unwrap().serialize_pem()))
            }),
            (
                "a key changed alone",
                with(&(wanted[1].1.clone(), KeyPair::generate().unwrap().serialize_pem())),
            ),
            (
                "a garbled certificate",
                with(&(wanted[1].1.replace("MII", "MIX"), key.serialize_pem())),
            ),
        ];
        for (case, held) in cases {
            assert!(
                kept(&wanted, &held).is_empty(),
                "{case}: kept {:?}",
                kept(&wanted, &held)
            );
        }
        // Another subject.
        let mut params = CertificateParams::new(vec![NODE.to_string(), "cp-1".into()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, "someone-else");
        params.not_before = date_time_ymd(2026, 1, 1);
        params.not_after = date_time_ymd(2029, 1, 1);
        let other = params
            .signed_by(&key, &Issuer::from_params(&ca1.params, &ca1.key))
            .unwrap();
        assert!(kept(&wanted, &with(&(other.pem(), key.serialize_pem()))).is_empty());
    }

    #[test]
    fn a_kubeconfig_renewed_on_the_node_is_kept_and_other_changes_are_not() {
        let ca = ca("kubernetes");
        let (cert, key) = leaf(&ca, &[], 2026, 2028, None);
        let (renewed, renewed_key) = leaf(&ca, &[], 2026, 2029, None);
        let path = "/etc/kubernetes/scheduler.conf";
        let wanted = [(path, kubeconfig_text(&ca, &cert, &key))];
        assert_eq!(
            kept(&wanted, &[(path, kubeconfig_text(&ca, &renewed, &renewed_key))]),
            [path]
        );
        // The renewed certificate with the old key, or another server: not kept.
        assert!(kept(&wanted, &[(path, kubeconfig_text(&ca, &renewed, &key))]).is_empty());
        let moved = kubeconfig_text(&ca, &renewed, &renewed_key).replace(":6443", ":7443");
        assert!(kept(&wanted, &[(path, moved)]).is_empty());
    }
}
