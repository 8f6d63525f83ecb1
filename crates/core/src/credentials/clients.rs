//! Who dials a component, read from its rendered static pod: the names a serving certificate
//! must cover for its clients, and the CA bundles whose clients the node holds.
//!
//! A certificate's names are matched as Go's `crypto/x509` `VerifyHostname` matches them (every
//! client of the control plane is Go): an address only against IP SANs, a name against DNS SANs
//! case-insensitively, a leading `*.` standing for exactly one label.

use std::net::IpAddr;

use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;

use crate::hostpath::HostPath;

/// One container's program (the base name of its first command word) and its `--flag=value`
/// arguments (also `--flag value`), in order.
pub(super) struct Container {
    pub program: String,
    pub flags: Vec<(String, String)>,
}

impl Container {
    pub fn flag(&self, name: &str) -> Option<&str> {
        self.flags
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The containers of a static pod manifest; none when it does not parse as one.
pub(super) fn containers(manifest: &[u8]) -> Vec<Container> {
    let Ok(pod) = serde_yaml_ng::from_slice::<serde_yaml_ng::Value>(manifest) else {
        return Vec::new();
    };
    let Some(list) = pod
        .get("spec")
        .and_then(|s| s.get("containers"))
        .and_then(|c| c.as_sequence())
    else {
        return Vec::new();
    };
    list.iter()
        .map(|c| {
            let words: Vec<&str> = ["command", "args"]
                .iter()
                .filter_map(|k| c.get(*k).and_then(|v| v.as_sequence()))
                .flatten()
                .filter_map(|w| w.as_str())
                .collect();
            let program = words
                .first()
                .map(|w| w.rsplit('/').next().unwrap_or(w).to_owned())
                .unwrap_or_default();
            let mut flags = Vec::new();
            let mut i = 0;
            while i < words.len() {
                if let Some(flag) = words[i].strip_prefix("--") {
                    match flag.split_once('=') {
                        Some((name, value)) => flags.push((name.to_owned(), value.to_owned())),
                        None if words.get(i + 1).is_some_and(|w| !w.starts_with('-')) => {
                            flags.push((flag.to_owned(), words[i + 1].to_owned()));
                            i += 1;
                        }
                        None => flags.push((flag.to_owned(), String::new())),
                    }
                }
                i += 1;
            }
            Container { program, flags }
        })
        .collect()
}

/// A name a client dials to reach a serving certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Name {
    Ip(IpAddr),
    Dns(String),
}

impl Name {
    fn of_host(host: &str) -> Self {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        bare.parse()
            .map_or_else(|_| Name::Dns(host.to_ascii_lowercase()), Name::Ip)
    }
}

impl Name {
    /// A loopback address, or `localhost`: this very host.
    pub fn is_loopback(&self) -> bool {
        match self {
            Name::Ip(ip) => ip.is_loopback(),
            Name::Dns(dns) => dns == "localhost",
        }
    }
}

impl std::fmt::Display for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Name::Ip(ip) => ip.fmt(f),
            Name::Dns(dns) => dns.fmt(f),
        }
    }
}

/// A name and who dials it, for the refusal.
#[derive(Debug, Clone)]
pub(super) struct Dialed {
    pub name: Name,
    pub client: String,
}

/// The serving-certificate flags of a container, each with the names its clients dial, from its
/// own flags (`manifest` names the file, for the messages):
/// - etcd `--cert-file`: the hosts of `--listen-client-urls` (an unspecified address listens on
///   every one: its clients' names come from elsewhere) and `--advertise-client-urls`;
/// - etcd `--peer-cert-file`: the same of `--listen-peer-urls` and
///   `--initial-advertise-peer-urls`;
/// - kube-apiserver `--tls-cert-file`: `--advertise-address`, a specific `--bind-address`, the
///   first address of `--service-cluster-ip-range` (the `kubernetes` Service every pod dials)
///   and `kubernetes.default.svc` (its name);
/// - kube-controller-manager and kube-scheduler `--tls-cert-file`: a specific `--bind-address`.
pub(super) fn serving(container: &Container, manifest: &str) -> Vec<(&'static str, Vec<Dialed>)> {
    let mut out = Vec::new();
    let hosts_of = |flag: &'static str| -> Vec<Dialed> {
        let Some(value) = container.flag(flag) else {
            return Vec::new();
        };
        value
            .split(',')
            .filter_map(|raw| {
                let url = url::Url::parse(raw.trim()).ok()?;
                if !matches!(url.scheme(), "https" | "http") {
                    return None;
                }
                let name = Name::of_host(url.host_str()?);
                (!unspecified(&name)).then(|| Dialed {
                    name,
                    client: format!("a client of {} (--{flag} in {manifest})", raw.trim()),
                })
            })
            .collect()
    };
    let address = |flag: &'static str| -> Option<Dialed> {
        let name = Name::of_host(container.flag(flag)?);
        (matches!(name, Name::Ip(_)) && !unspecified(&name)).then(|| Dialed {
            client: format!("a client of --{flag}={name} in {manifest}"),
            name,
        })
    };
    match container.program.as_str() {
        "etcd" => {
            if container.flag("cert-file").is_some() {
                let mut names = hosts_of("listen-client-urls");
                names.extend(hosts_of("advertise-client-urls"));
                out.push(("cert-file", names));
            }
            if container.flag("peer-cert-file").is_some() {
                let mut names = hosts_of("listen-peer-urls");
                names.extend(hosts_of("initial-advertise-peer-urls"));
                out.push(("peer-cert-file", names));
            }
        }
        "kube-apiserver" => {
            if container.flag("tls-cert-file").is_some() {
                let mut names: Vec<Dialed> = ["advertise-address", "bind-address"]
                    .into_iter()
                    .filter_map(address)
                    .collect();
                if let Some(range) = container.flag("service-cluster-ip-range")
                    && let Some(ip) = range.split(',').next().and_then(first_address)
                {
                    names.push(Dialed {
                        name: Name::Ip(ip),
                        client: format!(
                            "every pod, through the kubernetes Service at {ip} (the first address of --service-cluster-ip-range={range} in {manifest})"
                        ),
                    });
                    names.push(Dialed {
                        name: Name::Dns("kubernetes.default.svc".into()),
                        client: "a pod that dials the kubernetes Service by name".into(),
                    });
                }
                out.push(("tls-cert-file", names));
            }
        }
        _ => {
            if container.flag("tls-cert-file").is_some() {
                out.push(("tls-cert-file", address("bind-address").into_iter().collect()));
            }
        }
    }
    // Any other program's serving flags, checked for the node's address alone.
    for flag in super::SERVING_FLAGS {
        if container.flag(flag).is_some() && !out.iter().any(|(f, _)| *f == flag) {
            out.push((flag, Vec::new()));
        }
    }
    out
}

/// The servers a kubeconfig's clusters name at `port`, each a name its client dials.
pub(super) fn kubeconfig_servers(path: &HostPath, content: &[u8], port: &str) -> Vec<Dialed> {
    let Ok(doc) = serde_yaml_ng::from_slice::<serde_yaml_ng::Value>(content) else {
        return Vec::new();
    };
    if doc.get("kind").and_then(|k| k.as_str()) != Some("Config") {
        return Vec::new();
    }
    doc.get("clusters")
        .and_then(|c| c.as_sequence())
        .into_iter()
        .flatten()
        .filter_map(|c| c.get("cluster")?.get("server")?.as_str())
        .filter_map(|server| {
            let url = url::Url::parse(server).ok()?;
            let host = url.host_str()?;
            (url.scheme() == "https" && url.port_or_known_default()?.to_string() == port).then(|| Dialed {
                name: Name::of_host(host),
                client: format!("{path} (server {server})"),
            })
        })
        .collect()
}

fn unspecified(name: &Name) -> bool {
    matches!(name, Name::Ip(ip) if ip.is_unspecified())
}

/// Kubernetes' first service address: the range's network address plus one
/// (`GetIndexedIP(serviceIPRange, 1)` in kube-apiserver's `ServiceIPRange`).
fn first_address(cidr: &str) -> Option<IpAddr> {
    let (address, bits) = cidr.trim().split_once('/')?;
    let bits: u32 = bits.parse().ok()?;
    match address.parse::<IpAddr>().ok()? {
        IpAddr::V4(v4) if bits <= 32 => {
            let mask = u32::MAX.checked_shl(32 - bits).unwrap_or(0);
            Some(IpAddr::from((u32::from(v4) & mask).wrapping_add(1).to_be_bytes()))
        }
        IpAddr::V6(v6) if bits <= 128 => {
            let mask = u128::MAX.checked_shl(128 - bits).unwrap_or(0);
            Some(IpAddr::from((u128::from(v6) & mask).wrapping_add(1).to_be_bytes()))
        }
        _ => None,
    }
}

/// A certificate's subject alternative names, IP and DNS.
pub(super) fn names(c: &X509Certificate) -> Vec<Name> {
    let Ok(Some(san)) = c.subject_alternative_name() else {
        return Vec::new();
    };
    san.value
        .general_names
        .iter()
        .filter_map(|name| match name {
            GeneralName::IPAddress(bytes) => match bytes.len() {
                4 => <[u8; 4]>::try_from(*bytes).ok().map(|b| Name::Ip(IpAddr::from(b))),
                16 => <[u8; 16]>::try_from(*bytes).ok().map(|b| Name::Ip(IpAddr::from(b))),
                _ => None,
            },
            GeneralName::DNSName(dns) => Some(Name::Dns(dns.to_ascii_lowercase())),
            _ => None,
        })
        .collect()
}

/// Whether a certificate with `sans` verifies for a client dialing `name`.
pub(super) fn covers(sans: &[Name], name: &Name) -> bool {
    match name {
        Name::Ip(_) => sans.contains(name),
        Name::Dns(host) => sans.iter().any(|san| match san {
            Name::Dns(pattern) => match pattern.strip_prefix("*.") {
                Some(suffix) => host
                    .split_once('.')
                    .is_some_and(|(label, rest)| !label.is_empty() && rest == suffix),
                None => pattern == host,
            },
            Name::Ip(_) => false,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_service_address_is_the_network_plus_one() {
        for (range, first) in [
            ("10.96.0.0/12", "10.96.0.1"),
            ("10.100.7.9/16", "10.100.0.1"),
            ("fd00:10:96::/108", "fd00:10:96::1"),
            ("192.168.0.0/32", "192.168.0.1"),
        ] {
            assert_eq!(first_address(range), Some(first.parse().unwrap()), "{range}");
        }
        assert_eq!(first_address("10.96.0.0"), None);
        assert_eq!(first_address("10.96.0.0/33"), None);
    }

    #[test]
    fn names_match_as_go_verifies_them() {
        let sans = [
            Name::Dns("*.example.com".into()),
            Name::Dns("localhost".into()),
            Name::Ip("10.0.0.1".parse().unwrap()),
        ];
        for (dialed, ok) in [
            ("a.example.com", true),
            ("A.Example.com", true),
            ("a.b.example.com", false),
            ("example.com", false),
            ("localhost", true),
            ("10.0.0.1", true),
            ("10.0.0.2", false),
        ] {
            assert_eq!(covers(&sans, &Name::of_host(dialed)), ok, "{dialed}");
        }
        // An address is never matched by a DNS name that spells it.
        assert!(!covers(&[Name::Dns("10.0.0.1".into())], &Name::of_host("10.0.0.1")));
    }

    #[test]
    fn each_program_names_what_its_clients_dial() {
        let manifest = b"spec:\n  containers:\n  - command: [/usr/local/bin/etcd, --cert-file=/p/server.crt, --peer-cert-file=/p/peer.crt, '--listen-client-urls=https://127.0.0.1:2379,https://10.0.0.10:2379', --advertise-client-urls=https://10.0.0.10:2379, --listen-peer-urls=https://0.0.0.0:2380, --initial-advertise-peer-urls=https://cp-1.example:2380]\n  - command: [kube-apiserver]\n    args: [--advertise-address, 10.0.0.10, --bind-address=0.0.0.0, --tls-cert-file=/p/apiserver.crt, --service-cluster-ip-range=10.96.0.0/12]\n";
        let got: Vec<(String, &str, Vec<String>)> = containers(manifest)
            .iter()
            .flat_map(|c| {
                serving(c, "m.yaml")
                    .into_iter()
                    .map(|(flag, names)| {
                        (
                            c.program.clone(),
                            flag,
                            names.iter().map(|d| d.name.to_string()).collect(),
                        )
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    "etcd".into(),
                    "cert-file",
                    vec!["127.0.0.1".into(), "10.0.0.10".into(), "10.0.0.10".into()]
                ),
                ("etcd".into(), "peer-cert-file", vec!["cp-1.example".into()]),
                (
                    "kube-apiserver".into(),
                    "tls-cert-file",
                    vec!["10.0.0.10".into(), "10.96.0.1".into(), "kubernetes.default.svc".into()]
                ),
            ]
        );
    }
}
