//! A component asked as one of its clients asks it (`run --client-checks`): kube-apiserver's
//! `/readyz/etcd` for etcd (kube-apiserver asking etcd with its own etcd client certificate),
//! the anchor's own token or a client certificate of the cluster CA for kube-apiserver, a
//! controller's kubeconfig for kube-controller-manager and kube-scheduler. The trial holds a
//! client the version before served and this one refuses against the version
//! (`kube_anchor_core::trial::ClientView`).
//!
//! Every file a check names is a path on the node (`/etc/kubernetes/...`), read below the host
//! root as it is now: the version on trial's own files, as its clients read them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use kube_anchor_core::trial::{ClientAnswer, ClientView};
use kube_anchor_host::hostfs::{Follow, MAX_INPUT_BYTES, read_regular};
use serde::{Deserialize, Serialize};

/// How long one check may take before it counts as no answer.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum ClientCheckError {
    #[error("--client-checks: {0}")]
    Json(#[from] serde_json::Error),
    #[error("--client-checks: check {name:?}: {problem}")]
    Invalid { name: String, problem: String },
}

/// One client of the component, and how it asks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClientCheckSpec {
    /// The client, as the trial's verdicts name it.
    pub name: String,
    /// What is asked (`https://127.0.0.1:6443/api`); with `kubeconfig`, a path (`/api`) asked at
    /// the server the kubeconfig names.
    pub url: String,
    /// The CA bundle (a file on the node) that verifies the server, as the client verifies it;
    /// without one the server's certificate is not verified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    /// A client certificate and its key (files on the node) presented as the client does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_file: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_file: Option<PathBuf>,
    /// The client's kubeconfig (a file on the node): its credentials, its CA and its server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig: Option<PathBuf>,
    /// The anchor's own API credentials (its `--kubeconfig`, else its service-account token):
    /// the tokens every pod holds.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub anchor_credentials: bool,
}

/// `--client-checks`: a JSON list of [`ClientCheckSpec`] (the charts' `anchor.clientChecks`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientChecks(pub Vec<ClientCheckSpec>);

impl std::str::FromStr for ClientChecks {
    type Err = ClientCheckError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.trim().is_empty() {
            return Ok(Self::default());
        }
        let specs: Vec<ClientCheckSpec> = serde_json::from_str(s)?;
        for spec in &specs {
            spec.validate().map_err(|problem| ClientCheckError::Invalid {
                name: spec.name.clone(),
                problem,
            })?;
        }
        let mut names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        names.sort_unstable();
        if let Some(twice) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(ClientCheckError::Invalid {
                name: twice[0].into(),
                problem: "named twice (the ledger keeps the clients served by name)".into(),
            });
        }
        Ok(Self(specs))
    }
}

impl ClientCheckSpec {
    fn validate(&self) -> Result<(), String> {
        if self.name.trim().is_empty() {
            return Err("no name".into());
        }
        let ways = [
            self.cert_file.is_some() || self.key_file.is_some(),
            self.kubeconfig.is_some(),
            self.anchor_credentials,
        ];
        if ways.iter().filter(|w| **w).count() > 1 {
            return Err("one way of asking: certFile and keyFile, kubeconfig, or anchorCredentials".into());
        }
        if self.cert_file.is_some() != self.key_file.is_some() {
            return Err("certFile and keyFile go together".into());
        }
        for path in [&self.ca_file, &self.cert_file, &self.key_file, &self.kubeconfig]
            .into_iter()
            .flatten()
        {
            if !path.is_absolute() {
                return Err(format!("{}: a path on the node is absolute", path.display()));
            }
        }
        if self.kubeconfig.is_some() {
            if !self.url.starts_with('/') {
                return Err(format!(
                    "url {:?}: with a kubeconfig, a path asked at its server (/api)",
                    self.url
                ));
            }
        } else {
            split_url(&self.url)?;
        }
        Ok(())
    }
}

/// `https://host:port/path` as its base and its path.
fn split_url(url: &str) -> Result<(http::Uri, String), String> {
    let uri: http::Uri = url.parse().map_err(|e| format!("url {url:?}: {e}"))?;
    let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
        return Err(format!("url {url:?}: no scheme or host"));
    };
    let base = format!("{scheme}://{authority}")
        .parse()
        .map_err(|e| format!("url {url:?}: {e}"))?;
    let path = uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
    Ok((base, path))
}

/// A check ready to ask, its files read below `host_root`.
#[derive(Debug, Clone)]
pub struct ClientCheck {
    spec: ClientCheckSpec,
    host_root: PathBuf,
    /// The anchor's own `--kubeconfig` (a path in the container), for `anchorCredentials`.
    anchor_kubeconfig: Option<PathBuf>,
}

impl ClientCheck {
    pub fn new(spec: ClientCheckSpec, host_root: &Path, anchor_kubeconfig: Option<&Path>) -> Self {
        Self {
            spec,
            host_root: host_root.to_owned(),
            anchor_kubeconfig: anchor_kubeconfig.map(ToOwned::to_owned),
        }
    }

    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// Asks once. Any 2xx is served; an HTTP error status (401, 403, a readiness check's 500)
    /// or a certificate either side refuses is refused; anything else (refused connection,
    /// timeout, a file not there yet) is no answer.
    pub async fn ask(&self) -> ClientView {
        let answer = match tokio::time::timeout(CHECK_TIMEOUT, self.request()).await {
            Ok(answer) => answer,
            Err(_) => ClientAnswer::NoAnswer(format!("{}: timed out", self.spec.url)),
        };
        ClientView {
            client: self.spec.name.clone(),
            answer,
            served_before: false,
        }
    }

    async fn request(&self) -> ClientAnswer {
        let (client, path) = match self.client().await {
            Ok(built) => built,
            Err(why) => return ClientAnswer::NoAnswer(why),
        };
        let request = http::Request::get(&path).body(Vec::new()).expect("a valid request");
        match client.request_text(request).await {
            Ok(_) => ClientAnswer::Served,
            Err(kube::Error::Api(status)) => {
                // A status and the names of failing checks (`[-]etcd failed`); no secrets.
                let body: String = status.message.chars().take(256).collect();
                ClientAnswer::Refused(format!("HTTP {} from {}: {}", status.code, self.spec.url, body.trim()))
            }
            Err(e) => {
                let why = format!("{}: {}", self.spec.url, error_chain(&e));
                if why.contains("certificate") {
                    ClientAnswer::Refused(why)
                } else {
                    ClientAnswer::NoAnswer(why)
                }
            }
        }
    }

    fn on_node(&self, path: &Path) -> PathBuf {
        self.host_root.join(path.strip_prefix("/").unwrap_or(path))
    }

    async fn client(&self) -> Result<(Client, String), String> {
        let spec = &self.spec;
        let (mut config, path) = if let Some(kubeconfig) = &spec.kubeconfig {
            (self.kubeconfig_config(kubeconfig).await?, spec.url.clone())
        } else {
            let (base, path) = split_url(&spec.url)?;
            let mut config = if spec.anchor_credentials {
                self.anchor_config().await?
            } else {
                Config::new(base.clone())
            };
            config.cluster_url = base;
            config.root_cert = None;
            config.root_cert_file = None;
            match &spec.ca_file {
                Some(ca) => {
                    let pem = read_regular(&self.on_node(ca), MAX_INPUT_BYTES, Follow::Yes)
                        .map_err(|e| format!("CA file {}: {e}", ca.display()))?;
                    config.root_cert = Some(crate::direct::pem_certificates(&pem));
                    config.accept_invalid_certs = false;
                }
                None => config.accept_invalid_certs = true,
            }
            if let (Some(cert), Some(key)) = (&spec.cert_file, &spec.key_file) {
                config.auth_info.client_certificate = Some(self.on_node(cert).display().to_string());
                config.auth_info.client_key = Some(self.on_node(key).display().to_string());
            }
            (config, path)
        };
        config.connect_timeout = Some(Duration::from_secs(2));
        config.read_timeout = Some(Duration::from_secs(3));
        let client = Client::try_from(config).map_err(|e| format!("{}: {}", spec.url, error_chain(&e)))?;
        Ok((client, path))
    }

    /// The client's kubeconfig as the client reads it, its file references below the host root.
    async fn kubeconfig_config(&self, kubeconfig: &Path) -> Result<Config, String> {
        let bytes = read_regular(&self.on_node(kubeconfig), MAX_INPUT_BYTES, Follow::Yes)
            .map_err(|e| format!("kubeconfig {}: {e}", kubeconfig.display()))?;
        let text = String::from_utf8(bytes).map_err(|_| format!("kubeconfig {}: not UTF-8", kubeconfig.display()))?;
        let mut parsed =
            Kubeconfig::from_yaml(&text).map_err(|e| format!("kubeconfig {}: {e}", kubeconfig.display()))?;
        let relocate = |p: &mut Option<String>| {
            if let Some(path) = p.as_mut() {
                *path = self.on_node(Path::new(path)).display().to_string();
            }
        };
        for cluster in parsed.clusters.iter_mut().filter_map(|c| c.cluster.as_mut()) {
            relocate(&mut cluster.certificate_authority);
        }
        for auth in parsed.auth_infos.iter_mut().filter_map(|a| a.auth_info.as_mut()) {
            relocate(&mut auth.client_certificate);
            relocate(&mut auth.client_key);
            relocate(&mut auth.token_file);
        }
        Config::from_custom_kubeconfig(parsed, &KubeConfigOptions::default())
            .await
            .map_err(|e| format!("kubeconfig {}: {e}", kubeconfig.display()))
    }

    /// The anchor's own credentials, as its API client has them.
    async fn anchor_config(&self) -> Result<Config, String> {
        match &self.anchor_kubeconfig {
            Some(path) => {
                let parsed = Kubeconfig::read_from(path).map_err(|e| format!("kubeconfig {}: {e}", path.display()))?;
                Config::from_custom_kubeconfig(parsed, &KubeConfigOptions::default())
                    .await
                    .map_err(|e| format!("kubeconfig {}: {e}", path.display()))
            }
            None => Config::incluster().map_err(|e| format!("in-cluster credentials: {e}")),
        }
    }
}

/// An error with its sources: a TLS alert is only in the innermost.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_charts_shapes_parse_and_a_bad_one_names_its_check() {
        let checks: ClientChecks = r#"[
            {"name": "kube-apiserver (/readyz/etcd)", "url": "https://127.0.0.1:6443/readyz/etcd"},
            {"name": "the anchor's service account", "url": "https://127.0.0.1:6443/api",
             "caFile": "/etc/kubernetes/pki/ca.crt", "anchorCredentials": true},
            {"name": "kube-controller-manager", "url": "/api",
             "kubeconfig": "/etc/kubernetes/controller-manager.conf"}
        ]"#
        .parse()
        .expect("valid");
        assert_eq!(checks.0.len(), 3);
        assert_eq!("".parse::<ClientChecks>().expect("none"), ClientChecks::default());
        for (json, says) in [
            (r#"[{"name": "a", "url": "/api"}]"#, "no scheme"),
            (
                r#"[{"name": "a", "url": "https://x/api", "kubeconfig": "/k"}]"#,
                "with a kubeconfig, a path",
            ),
            (
                r#"[{"name": "a", "url": "https://x/api", "certFile": "/c"}]"#,
                "go together",
            ),
            (
                r#"[{"name": "a", "url": "https://x/api", "certFile": "c", "keyFile": "/k"}]"#,
                "absolute",
            ),
            (
                r#"[{"name": "a", "url": "https://x/api", "anchorCredentials": true, "kubeconfig": "/k"}]"#,
                "one way",
            ),
            (
                r#"[{"name": "a", "url": "https://x/"}, {"name": "a", "url": "https://y/"}]"#,
                "named twice",
            ),
            (r#"[{"name": "a", "url": "https://x/", "token": "t"}]"#, "unknown field"),
        ] {
            let e = json.parse::<ClientChecks>().expect_err(json).to_string();
            assert!(e.contains(says), "{json}: {e}");
        }
    }

    /// What the answers are, against a listener that answers, one that refuses and none.
    #[tokio::test]
    async fn served_refused_and_no_answer_are_told_apart() {
        let root = tempfile::tempdir().expect("tempdir");
        let ask = |url: String| {
            let check = ClientCheck::new(
                ClientCheckSpec {
                    name: "a client".into(),
                    url,
                    ca_file: None,
                    cert_file: None,
                    key_file: None,
                    kubeconfig: None,
                    anchor_credentials: false,
                },
                root.path(),
                None,
            );
            async move { check.ask().await.answer }
        };
        let (ok, _) = crate::test_http::serve(200, "ok").await;
        assert_eq!(ask(format!("{ok}readyz/etcd")).await, ClientAnswer::Served);
        let (failing, _) = crate::test_http::serve(500, "[-]etcd failed: reason withheld").await;
        assert!(matches!(
            ask(format!("{failing}readyz/etcd")).await,
            ClientAnswer::Refused(why) if why.contains("500") && why.contains("[-]etcd failed")
        ));
        let (unauthorized, _) = crate::test_http::serve(401, "Unauthorized").await;
        assert!(matches!(
            ask(format!("{unauthorized}api")).await,
            ClientAnswer::Refused(why) if why.contains("401")
        ));
        let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = closed.local_addr().expect("addr");
        drop(closed);
        assert!(matches!(
            ask(format!("http://{addr}/api")).await,
            ClientAnswer::NoAnswer(_)
        ));
    }
}
