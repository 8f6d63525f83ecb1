//! The daemon's HTTP endpoints: `/healthz` (the loop is alive), `/readyz` (the static pod runs
//! what was written; 503 with the reason otherwise), `/metrics` (Prometheus text).
//!
//! The probes reach them over a unix socket in the pod's own emptyDir (`kube-anchor probe`):
//! two anchors of one component on a node (a renamed release, a `perNode` toggle) or a
//! checkpointer and its static copy run side by side on the host network, and a TCP port would
//! let the second one crash-loop, or answer the first one's probes. TCP (`--listen`) is for
//! metrics scraping, and, with a socket, a port already taken is retried, never fatal.

use std::net::SocketAddr;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::metrics::Metrics;

/// A sync running longer than this means the loop is stuck.
const STUCK_AFTER: Duration = Duration::from_secs(120);

#[derive(Debug, Clone)]
pub(crate) struct Status {
    pub draining: bool,
    pub ready: bool,
    /// Why it is not ready (shown in the 503 body).
    pub reason: String,
    pub sync_started: Option<Instant>,
}

pub(crate) struct Shared {
    pub status: Mutex<Status>,
    pub metrics: Metrics,
}

impl Shared {
    pub(crate) fn new(metrics: Metrics) -> Arc<Self> {
        Arc::new(Self {
            status: Mutex::new(Status {
                draining: false,
                ready: false,
                reason: "starting".into(),
                sync_started: None,
            }),
            metrics,
        })
    }

    pub(crate) fn update(&self, change: impl FnOnce(&mut Status)) {
        change(&mut self.status.lock().expect("status lock"));
    }

    pub(crate) fn snapshot(&self) -> Status {
        self.status.lock().expect("status lock").clone()
    }
}

/// How often a TCP address that is taken is tried again.
const REBIND_INTERVAL: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub(crate) enum ServerError {
    #[error("{}: cannot serve the health endpoints: {source}", .path.display())]
    Socket { path: PathBuf, source: std::io::Error },
    #[error("{}: exists and is not a socket; refusing to replace it", .path.display())]
    NotASocket { path: PathBuf },
    #[error("listening on {addr}: {source}")]
    Listen { addr: SocketAddr, source: std::io::Error },
}

fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(shared)
}

/// Starts serving on `socket` and on `listen`. With a socket, the probes use it and a TCP port
/// another process holds is retried in the background; without one, `listen` is the probe
/// endpoint and must be ours, so failing to bind it is an error (else the probes would ask
/// whoever holds it).
pub(crate) async fn start(
    socket: Option<&Path>,
    listen: Option<SocketAddr>,
    shared: Arc<Shared>,
) -> Result<(), ServerError> {
    if let Some(path) = socket {
        let listener = bind_socket(path)?;
        tracing::info!(socket = %path.display(), "serving /healthz, /readyz, /metrics");
        let app = router(shared.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
    }
    match (listen, socket) {
        (Some(addr), Some(_)) => {
            tokio::spawn(serve_tcp(addr, router(shared)));
        }
        (Some(addr), None) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|source| ServerError::Listen { addr, source })?;
            let bound = listener.local_addr().unwrap_or(addr);
            tracing::info!(addr = %bound, "serving /healthz, /readyz, /metrics");
            let app = router(shared);
            tokio::spawn(async move { axum::serve(listener, app).await });
        }
        (None, _) => {}
    }
    Ok(())
}

/// Binds `path`, replacing a socket left by an earlier container of the same pod.
fn bind_socket(path: &Path) -> Result<tokio::net::UnixListener, ServerError> {
    let err = |source| ServerError::Socket {
        path: path.to_owned(),
        source,
    };
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => std::fs::remove_file(path).map_err(err)?,
        Ok(_) => return Err(ServerError::NotASocket { path: path.to_owned() }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(err(e)),
    }
    tokio::net::UnixListener::bind(path).map_err(err)
}

async fn serve_tcp(addr: SocketAddr, app: Router) {
    let mut warned = false;
    loop {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(listener) => {
                let bound = listener.local_addr().unwrap_or(addr);
                tracing::info!(addr = %bound, "serving /healthz, /readyz, /metrics");
                if let Err(e) = axum::serve(listener, app.clone()).await {
                    tracing::warn!(addr = %bound, error = %e, "HTTP server stopped");
                }
            }
            Err(e) if !warned => {
                tracing::warn!(%addr, error = %e, "cannot listen (another process holds the port?); the probes use the socket; retrying every {}s", REBIND_INTERVAL.as_secs());
                warned = true;
            }
            Err(_) => {}
        }
        tokio::time::sleep(REBIND_INTERVAL).await;
    }
}

/// What a probe got: the HTTP status and the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProbeAnswer {
    pub status: u16,
    pub body: String,
}

/// `GET <path>` over the unix socket, bounded by `timeout` (the kubelet's exec probe has its
/// own timeout, but a hung daemon must fail the probe, not hang it). hyper's HTTP/1 client, the
/// same stack the daemon serves with.
pub(crate) async fn probe(socket: &Path, path: &str, timeout: Duration) -> std::io::Result<ProbeAnswer> {
    use http_body_util::BodyExt;
    let ask = async {
        let stream = tokio::net::UnixStream::connect(socket).await?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(std::io::Error::other)?;
        let request = http::Request::get(path)
            .header(header::HOST, "localhost")
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .map_err(std::io::Error::other)?;
        // The connection is driven beside the request; dropped with the runtime when done.
        tokio::spawn(connection);
        let response = sender.send_request(request).await.map_err(std::io::Error::other)?;
        let status = response.status().as_u16();
        // The answers are a few lines; a bound keeps a confused peer from growing the probe.
        let body = http_body_util::Limited::new(response.into_body(), 64 * 1024)
            .collect()
            .await
            .map_err(std::io::Error::other)?
            .to_bytes();
        Ok(ProbeAnswer {
            status,
            body: String::from_utf8_lossy(&body).into_owned(),
        })
    };
    tokio::time::timeout(timeout, ask)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer in time"))?
}

async fn healthz(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    match shared.snapshot().sync_started {
        Some(started) if started.elapsed() > STUCK_AFTER => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("sync running for {:?}\n", started.elapsed()),
        ),
        _ => (StatusCode::OK, "ok\n".to_string()),
    }
}

async fn readyz(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    let status = shared.snapshot();
    if status.draining {
        (StatusCode::SERVICE_UNAVAILABLE, "draining\n".to_string())
    } else if status.ready {
        (StatusCode::OK, "ready\n".to_string())
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, format!("{}\n", status.reason))
    }
}

async fn metrics(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        shared.metrics.encode(),
    )
}
