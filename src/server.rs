//! The daemon's HTTP endpoints: `/healthz` (the loop is alive), `/readyz` (the static pod runs
//! what was written; 503 with the reason otherwise), `/metrics` (Prometheus text).

use std::net::SocketAddr;
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
pub struct Status {
    pub draining: bool,
    pub ready: bool,
    /// Why it is not ready (shown in the 503 body).
    pub reason: String,
    pub sync_started: Option<Instant>,
}

pub struct Shared {
    pub status: Mutex<Status>,
    pub metrics: Metrics,
}

impl Shared {
    pub fn new(metrics: Metrics) -> Arc<Self> {
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

    pub fn update(&self, change: impl FnOnce(&mut Status)) {
        change(&mut self.status.lock().expect("status lock"));
    }

    pub fn snapshot(&self) -> Status {
        self.status.lock().expect("status lock").clone()
    }
}

pub async fn serve(listener: tokio::net::TcpListener, shared: Arc<Shared>) -> std::io::Result<()> {
    let app = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(shared);
    axum::serve(listener, app).await
}

pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
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
