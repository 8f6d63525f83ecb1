//! Prometheus metrics of the anchor daemon, all labelled with the component.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

pub struct Metrics {
    registry: Registry,
    /// Files written because the inputs changed.
    pub writes: Counter,
    /// Files rewritten because the node drifted from what was written.
    pub repairs: Counter,
    pub rollbacks: Counter,
    pub sync_errors: Counter,
    pub last_sync: Gauge<f64, AtomicU64>,
    pub converged: Gauge,
    pub last_known_good_failing: Gauge,
}

impl Metrics {
    pub fn new(component: &str) -> Self {
        let mut m = Self::unregistered(component);
        let registry = &mut m.registry;
        registry.register("writes", "Files written because the inputs changed", m.writes.clone());
        registry.register("repairs", "Files rewritten because the node drifted", m.repairs.clone());
        registry.register(
            "rollbacks",
            "Rollbacks to the last-known-good version",
            m.rollbacks.clone(),
        );
        registry.register("sync_errors", "Syncs that failed", m.sync_errors.clone());
        registry.register(
            "last_successful_sync_timestamp_seconds",
            "Unix time of the last sync that left the node as wanted",
            m.last_sync.clone(),
        );
        registry.register(
            "converged",
            "1 when the static pod runs what was written",
            m.converged.clone(),
        );
        registry.register(
            "last_known_good_failing",
            "1 when the last-known-good version, held in place of a bad one, fails as well",
            m.last_known_good_failing.clone(),
        );
        m
    }

    /// The same prefix and labels with nothing registered: for a daemon with metrics of its own
    /// (the checkpointer), added with [`Metrics::register`].
    pub fn unregistered(component: &str) -> Self {
        Self {
            registry: Registry::with_prefix_and_labels(
                "kube_anchor",
                [("component".into(), component.to_owned().into())].into_iter(),
            ),
            writes: Counter::default(),
            repairs: Counter::default(),
            rollbacks: Counter::default(),
            sync_errors: Counter::default(),
            last_sync: Gauge::default(),
            converged: Gauge::default(),
            last_known_good_failing: Gauge::default(),
        }
    }

    pub fn register(&mut self, name: &str, help: &str, metric: impl prometheus_client::registry::Metric) {
        self.registry.register(name, help, metric);
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("writing to a String");
        out
    }
}
