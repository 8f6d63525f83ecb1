//! Direct HTTPS clients of URLs on the node that are not the API server: the component's
//! health URL, and the kubelet's own `/pods`. No kubeconfig, an optional bearer token, short
//! timeouts.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::{Client, Config};
use kube_anchor_core::trial::HealthFailure;
use kube_anchor_host::hostfs::{Follow, MAX_INPUT_BYTES, read_regular};

#[derive(Debug, thiserror::Error)]
pub enum DirectError {
    #[error("health URL {url}: {reason}")]
    HealthUrl { url: String, reason: String },
    #[error("kubelet URL {url}: {reason}")]
    KubeletUrl { url: String, reason: String },
}

/// GETs the component's health URL (e.g. `https://127.0.0.1:6443/readyz`); 2xx is healthy.
#[derive(Clone)]
pub struct HealthCheck {
    client: Client,
    url: String,
    path: String,
}

impl HealthCheck {
    /// `ca_file` verifies the server; without it the certificate is not verified (the endpoint is
    /// on loopback and answers only a status).
    pub fn new(url: &str, ca_file: Option<&Path>) -> Result<Self, DirectError> {
        let bad = |reason: String| DirectError::HealthUrl {
            url: url.into(),
            reason,
        };
        let uri: http::Uri = url.parse().map_err(|e| bad(format!("{e}")))?;
        let base: http::Uri = format!(
            "{}://{}",
            uri.scheme_str().ok_or_else(|| bad("no scheme".into()))?,
            uri.authority().ok_or_else(|| bad("no host".into()))?
        )
        .parse()
        .map_err(|e| bad(format!("{e}")))?;
        let path = uri
            .path_and_query()
            .map(|p| p.as_str().to_owned())
            .unwrap_or_else(|| "/".into());
        let client = direct_client(base, ca_file, None, Duration::from_secs(3)).map_err(bad)?;
        Ok(Self {
            client,
            url: url.into(),
            path,
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub async fn check(&self) -> Result<(), HealthFailure> {
        let request = http::Request::get(&self.path)
            .body(Vec::new())
            .expect("a valid request");
        match tokio::time::timeout(Duration::from_secs(5), self.client.request_text(request)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(kube::Error::Api(status))) => {
                // The body names the failing checks (`[-]etcd failed`, `RAFT NO LEADER`), which
                // tells a broken version from a missing quorum; it holds no secrets.
                let body: String = status.message.chars().take(512).collect();
                Err(HealthFailure::answered(format!(
                    "HTTP {} from {}: {}",
                    status.code,
                    self.url,
                    body.trim()
                )))
            }
            Ok(Err(e)) => Err(HealthFailure::no_answer(format!("{}: {e}", self.url))),
            Err(_) => Err(HealthFailure::no_answer(format!("{}: timed out", self.url))),
        }
    }
}

/// A client for an endpoint that is not the API server (the component's health URL, the
/// kubelet): no kubeconfig, an optional bearer token, short timeouts; without `ca_file` the
/// server's certificate is not verified (loopback, usually self-signed).
fn direct_client(
    base: http::Uri,
    ca_file: Option<&Path>,
    token: Option<String>,
    read_timeout: Duration,
) -> Result<Client, String> {
    let mut config = Config::new(base);
    match ca_file {
        Some(ca) => {
            let pem =
                read_regular(ca, MAX_INPUT_BYTES, Follow::Yes).map_err(|e| format!("CA file {}: {e}", ca.display()))?;
            config.root_cert = Some(pem_certificates(&pem));
        }
        None => config.accept_invalid_certs = true,
    }
    config.connect_timeout = Some(Duration::from_secs(2));
    config.read_timeout = Some(read_timeout);
    config.auth_info = kube::config::AuthInfo {
        token: token.map(Into::into),
        ..Default::default()
    };
    Client::try_from(config).map_err(|e| e.to_string())
}

/// DER certificates from a PEM bundle.
pub(crate) fn pem_certificates(pem: &[u8]) -> Vec<Vec<u8>> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    CertificateDer::pem_slice_iter(pem)
        .filter_map(Result::ok)
        .map(|c| c.to_vec())
        .collect()
}

/// The kubelet's own API: `/pods` lists what the kubelet really runs (the API can lag, and
/// after a reboot it may be the checkpoint itself that answers).
#[derive(Clone)]
pub struct KubeletClient {
    client: Client,
    url: String,
}

impl KubeletClient {
    /// `token` is the service-account token (the kubelet authorizes `nodes/proxy`); without
    /// `ca_file` the kubelet's certificate is not verified (it is usually self-signed).
    pub fn new(url: &str, token: Option<String>, ca_file: Option<&Path>) -> Result<Self, DirectError> {
        let bad = |reason: String| DirectError::KubeletUrl {
            url: url.into(),
            reason,
        };
        let base = url.parse().map_err(|e| bad(format!("{e}")))?;
        let client = direct_client(base, ca_file, token, Duration::from_secs(5)).map_err(bad)?;
        Ok(Self {
            client,
            url: url.into(),
        })
    }

    pub async fn pods(&self) -> Result<Vec<Pod>, String> {
        let request = http::Request::get("/pods").body(Vec::new()).expect("a valid request");
        match tokio::time::timeout(
            Duration::from_secs(5),
            self.client.request::<k8s_openapi::List<Pod>>(request),
        )
        .await
        {
            Ok(Ok(list)) => Ok(list.items),
            Ok(Err(e)) => Err(format!("{}/pods: {e}", self.url)),
            Err(_) => Err(format!("{}/pods: timed out", self.url)),
        }
    }
}
