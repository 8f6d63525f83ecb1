//! A client polling the API throughout a scenario, round-robin over the API servers it is given
//! (one kubeconfig each), every 100 ms, each request (a GET of the kube-system Namespace) bounded
//! by 2 s. It does not retry: a failed request is counted, then the other servers are asked to
//! tell an API server's failure from an outage of the whole API.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::Api;

use super::background::Background;

#[derive(Debug, Default, Clone)]
pub struct PollReport {
    pub requests: u64,
    pub failed: u64,
    /// Requests that failed on every API server (an outage of the API).
    pub outage: u64,
    /// Moments two API servers failed within the same second.
    pub two_down: u64,
    /// Stretches of time in which every request to every API server failed: (start, length),
    /// from the first failed request to the first one that succeeded after it, the start counted
    /// from the poller's own.
    pub outage_windows: Vec<(Duration, Duration)>,
}

impl PollReport {
    pub fn longest_outage(&self) -> Duration {
        self.outage_windows.iter().map(|w| w.1).max().unwrap_or_default()
    }
}

/// The client, polling until [`Poller::finish`].
pub struct Poller(Background<PollReport>);

impl Poller {
    pub fn start(kubeconfigs: Vec<PathBuf>) -> Self {
        Self(Background::with_clients(kubeconfigs, poll))
    }

    pub fn finish(self) -> PollReport {
        self.0.finish()
    }
}

async fn poll(clients: Vec<kube::Client>, stop: Arc<AtomicBool>) -> PollReport {
    {
        // A GET of one object is read from etcd (no watch cache), so an answer needs the API
        // server and an etcd quorum.
        let ask = |c: kube::Client| async move {
            let namespaces: Api<Namespace> = Api::all(c);
            tokio::time::timeout(Duration::from_secs(2), namespaces.get("kube-system"))
                .await
                .is_ok_and(|r| r.is_ok())
        };
        let mut report = PollReport::default();
        let mut last_failure: Vec<Option<Instant>> = vec![None; clients.len()];
        let started = Instant::now();
        let mut down_since: Option<Instant> = None;
        let mut i = 0;
        while !stop.load(Ordering::Relaxed) {
            report.requests += 1;
            let asked = Instant::now();
            let mut answered = ask(clients[i].clone()).await;
            if !answered {
                report.failed += 1;
                let now = Instant::now();
                if last_failure
                    .iter()
                    .enumerate()
                    .any(|(j, t)| j != i && t.is_some_and(|t| now - t < Duration::from_secs(1)))
                {
                    report.two_down += 1;
                }
                last_failure[i] = Some(now);
                for j in (0..clients.len()).filter(|&j| j != i) {
                    if ask(clients[j].clone()).await {
                        answered = true;
                        break;
                    }
                }
                if !answered {
                    report.outage += 1;
                }
            }
            match (answered, down_since) {
                (false, None) => down_since = Some(asked),
                (true, Some(since)) => {
                    report.outage_windows.push((since - started, since.elapsed()));
                    down_since = None;
                }
                _ => {}
            }
            i = (i + 1) % clients.len();
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if let Some(since) = down_since {
            report.outage_windows.push((since - started, since.elapsed()));
        }
        report
    }
}
