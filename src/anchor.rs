//! Anchor mode (`kube-anchor run`): the container of a per-component DaemonSet.
//!
//! Keeps the node in sync with the mounted inputs (on change notification, plus a periodic
//! resync), proves through `/readyz` that the static pod runs the version written, and rolls a
//! version that fails its trial back to the last-known-good one. Works with no API at all: the
//! files are still kept in sync; only the proof waits. A signal drains; it never deletes.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use kube::Client;
use tokio::sync::watch;

use crate::cli::RunArgs;
use crate::desired::Desired;
use crate::engine::{Engine, EngineError, Inputs, now_rfc3339};
use crate::kubeapi::{self, EventSink, HealthCheck};
use crate::ledger::BadVersion;
use crate::metrics::Metrics;
use crate::server::{self, Shared};
use crate::shutdown;
use crate::trial::{Assessment, MirrorPod, Observation, Trial, TrialOutcome, assess};
use crate::watch::{DirWatcher, debounce};

/// How often the version on trial (or one not converged yet) is looked at.
const TRIAL_TICK: Duration = Duration::from_secs(1);
/// Longest a burst of change events may delay a sync.
const MAX_DEBOUNCE: Duration = Duration::from_millis(200);

struct MirrorWatch {
    namespace: String,
    name: String,
    rx: watch::Receiver<Option<MirrorPod>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for MirrorWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Daemon {
    args: RunArgs,
    engine: Engine,
    component: String,
    shared: Arc<Shared>,
    client: Option<Client>,
    events: Option<EventSink>,
    health: Option<HealthCheck>,
    watcher: DirWatcher,
    mirror: Option<MirrorWatch>,
    /// What is on the node now, as far as this process wrote or adopted it.
    written: Option<Desired>,
    trial: Option<Trial>,
    /// Set while the inputs name a known-bad version and the last-known-good one is kept.
    held_back: Option<String>,
    input_error: Option<String>,
    converged: bool,
    started: Instant,
    input_dirs: BTreeSet<PathBuf>,
}

pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let engine = Engine::new(&args.node.host_root, &args.node.state_dir, &args.node.allowed_roots)?;
    // The component name comes from the config; a config unreadable at start is an error (the
    // node is left as it is and the pod restarts). Later bad pushes are reported, not fatal.
    let component = Inputs::load(&args.config, engine.roots())?.anchor.name;
    // A new anchor pod takes back a component an earlier pod decommissioned.
    if engine.recommission(&component, args.identity.pod_name.as_deref())? {
        tracing::info!(%component, "lifted the decommission marker of an earlier pod");
    }
    let draining = shutdown::install().context("installing signal handlers")?;
    let shared = Shared::new(Metrics::new(&component));
    if let Some(addr) = args.listen {
        let listener = server::bind(addr)
            .await
            .with_context(|| format!("listening on {addr}"))?;
        tracing::info!(%addr, "serving /healthz, /readyz, /metrics");
        tokio::spawn(server::serve(listener, shared.clone()));
    }
    let client = kubeapi::client(args.identity.kubeconfig.as_deref()).await?;
    if client.is_none() {
        tracing::warn!(
            "no kubeconfig and not in a cluster: keeping files in sync, but nothing can prove the static pod runs"
        );
    }
    let events = match (&client, &args.identity.pod_name, &args.identity.pod_namespace) {
        (Some(c), Some(name), Some(ns)) => Some(EventSink::new(c.clone(), ns, name)),
        _ => None,
    };
    let health = args
        .health_url
        .as_deref()
        .map(|url| HealthCheck::new(url, args.health_ca_file.as_deref()))
        .transpose()?;
    let (watcher, changes) = DirWatcher::new().context("starting inotify")?;
    let daemon = Daemon {
        args,
        engine,
        component,
        shared,
        client,
        events,
        health,
        watcher,
        mirror: None,
        written: None,
        trial: None,
        held_back: None,
        input_error: None,
        converged: false,
        started: Instant::now(),
        input_dirs: BTreeSet::new(),
    };
    daemon.run(changes, draining).await;
    Ok(())
}

impl Daemon {
    async fn run(mut self, mut changes: tokio::sync::mpsc::Receiver<()>, mut draining: watch::Receiver<bool>) {
        loop {
            self.sync().await;
            loop {
                let tick = self.evaluation_interval();
                let mirror_changed = async {
                    match self.mirror.as_mut() {
                        Some(m) => m.rx.changed().await.is_ok(),
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    Some(()) = changes.recv() => {
                        debounce(&mut changes, self.args.debounce, MAX_DEBOUNCE).await;
                        break;
                    }
                    _ = tokio::time::sleep(self.args.resync_period) => break,
                    true = mirror_changed => self.evaluate().await,
                    _ = sleep_opt(tick) => self.evaluate().await,
                    _ = draining.changed() => {
                        self.shared.update(|s| s.draining = true);
                        tracing::info!(component = %self.component, "drained; exiting (files stay on the node)");
                        return;
                    }
                }
            }
        }
    }

    /// Periodic evaluation is needed only while a version is on trial or not converged, and
    /// (slower) to keep checking a health URL.
    fn evaluation_interval(&self) -> Option<Duration> {
        if self.client.is_none() && self.health.is_none() {
            None // nothing to learn by looking again
        } else if self.trial.is_some() || (!self.converged && self.written.is_some()) {
            Some(TRIAL_TICK)
        } else if self.health.is_some() {
            Some(self.args.health_interval)
        } else {
            None
        }
    }

    fn monotonic(&self) -> Duration {
        self.started.elapsed()
    }

    async fn sync(&mut self) {
        self.shared.update(|s| s.sync_started = Some(Instant::now()));
        let result = self.sync_files();
        self.shared.update(|s| s.sync_started = None);
        match result {
            Ok(()) => {
                self.input_error = None;
                let now = SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap_or_default();
                self.shared.metrics.last_sync.set(now.as_secs_f64());
            }
            Err(EngineError::Decommissioned { at, reason, .. }) => {
                // pre-stop decommissioned the component: this pod is on its way out.
                self.input_error = Some(format!("decommissioned at {at} ({reason}): not writing"));
            }
            Err(e) => {
                self.shared.metrics.sync_errors.inc();
                let message = crate::commands::error_chain(&anyhow::Error::from(e));
                tracing::error!(component = %self.component, error = %message, "sync failed; the node keeps what it has");
                self.input_error = Some(format!("sync failed: {message}"));
            }
        }
        self.watch_dirs();
        self.evaluate().await;
    }

    fn sync_files(&mut self) -> Result<(), EngineError> {
        let inputs = Inputs::load(&self.args.config, self.engine.roots())?;
        self.input_dirs = std::iter::once(&self.args.config)
            .chain(inputs.anchor.files.iter().map(|f| &f.source))
            .filter_map(|p| {
                p.parent().map(|d| {
                    if d.as_os_str().is_empty() {
                        PathBuf::from(".")
                    } else {
                        d.to_path_buf()
                    }
                })
            })
            .collect();
        let desired = inputs.desired(&inputs.environment_variables())?;
        let ledger = self.engine.ledger(&self.component)?;
        let (target, held_back) = match ledger.bad_version(&desired.content_hash) {
            Some(bad) => match self.engine.last_known_good(&self.component)? {
                Some(lkg) => {
                    let why = format!(
                        "the inputs are version {} which failed its trial at {} ({}); keeping last-known-good {}",
                        bad.hash, bad.at, bad.reason, lkg.content_hash
                    );
                    (lkg, Some(why))
                }
                None => (desired, None),
            },
            None => (desired, None),
        };
        let previous = ledger.content_hash.clone();
        let report = self.engine.apply(&target, self.args.prune)?;
        let written = report.written.len() as u64;
        if written > 0 {
            if previous.as_deref() == Some(target.content_hash.as_str()) {
                self.shared.metrics.repairs.inc_by(written);
                tracing::warn!(component = %self.component, files = ?report.written.iter().map(|(p, _)| p.to_string()).collect::<Vec<_>>(), "repaired drift");
            } else {
                self.shared.metrics.writes.inc_by(written);
                tracing::info!(component = %self.component, content_hash = %target.content_hash, files = written, "wrote a new version");
            }
        }
        if ledger.last_known_good.as_deref() == Some(target.content_hash.as_str()) {
            self.trial = None;
        } else if self.trial.as_ref().is_none_or(|t| t.hash != target.content_hash) {
            tracing::info!(component = %self.component, content_hash = %target.content_hash, trial = %humantime::format_duration(self.args.trial_period), "version on trial");
            self.trial = Some(Trial::start(&target.content_hash, self.monotonic()));
        }
        self.ensure_mirror_watch(&target);
        self.written = Some(target);
        self.held_back = held_back;
        Ok(())
    }

    fn watch_dirs(&mut self) {
        let mut dirs: BTreeSet<PathBuf> = self.input_dirs.clone();
        if let Some(written) = &self.written {
            for file in &written.files {
                if let Ok(real) = self.engine.fs.resolve(&file.path)
                    && let Some(dir) = real.parent()
                {
                    dirs.insert(dir.to_path_buf());
                }
            }
        }
        self.watcher.ensure(dirs.iter().map(PathBuf::as_path));
    }

    fn ensure_mirror_watch(&mut self, target: &Desired) {
        let (Some(client), Some(node)) = (&self.client, &self.args.identity.node_name) else {
            return;
        };
        let name = format!("{}-{}", target.pod_name, node.to_lowercase());
        if self
            .mirror
            .as_ref()
            .is_some_and(|m| m.name == name && m.namespace == target.pod_namespace)
        {
            return;
        }
        let (rx, task) = kubeapi::watch_mirror_pod(client.clone(), &target.pod_namespace, &name);
        self.mirror = Some(MirrorWatch {
            namespace: target.pod_namespace.clone(),
            name,
            rx,
            task,
        });
    }

    async fn evaluate(&mut self) {
        let Some(written) = self.written.clone() else {
            let reason = self.input_error.clone().unwrap_or_else(|| "nothing written yet".into());
            self.shared.update(|s| (s.ready, s.reason) = (false, reason));
            return;
        };
        let mirror = self.mirror.as_ref().and_then(|m| m.rx.borrow().clone());
        let health = match &self.health {
            Some(h) => Some(h.check().await),
            None => None,
        };
        let observation = Observation {
            api_configured: self.client.is_some(),
            mirror,
            health,
        };
        let assessment = assess(&observation, &written.content_hash, self.args.crash_loop_threshold);
        if let Some(trial) = self.trial.as_mut() {
            match trial.step(&assessment, self.started.elapsed(), self.args.trial_period) {
                TrialOutcome::Pending => {}
                TrialOutcome::Passed => self.promote(&written).await,
                TrialOutcome::Failed(reason) => self.rollback(&written, reason).await,
            }
        }
        self.converged = assessment == Assessment::Converged;
        self.shared.metrics.converged.set(i64::from(self.converged));
        let (ready, reason) = match (&self.input_error, &self.held_back, assessment.reason()) {
            (Some(e), _, _) => (false, e.clone()),
            (_, Some(h), _) => (false, h.clone()),
            (_, _, Some(r)) => (false, r.to_owned()),
            (None, None, None) => (true, String::new()),
        };
        self.shared.update(|s| (s.ready, s.reason) = (ready, reason));
    }

    async fn promote(&mut self, written: &Desired) {
        self.trial = None;
        match self.engine.promote(written) {
            Ok(()) => {
                tracing::info!(component = %self.component, content_hash = %written.content_hash, "survived its trial: now last-known-good");
                self.publish(
                    false,
                    "Promoted",
                    format!("{} is now last-known-good", written.content_hash),
                )
                .await;
            }
            Err(e) => {
                tracing::error!(component = %self.component, error = %e, "could not record the last-known-good version")
            }
        }
    }

    async fn rollback(&mut self, failed: &Desired, reason: String) {
        let lkg = match self.engine.last_known_good(&self.component) {
            Ok(Some(lkg)) if lkg.content_hash != failed.content_hash => lkg,
            Ok(_) => {
                // The first version on a node is never rolled back to nothing.
                tracing::warn!(component = %self.component, content_hash = %failed.content_hash, %reason, "failed its trial, but there is no last-known-good version: kept");
                self.trial = Some(Trial::start(&failed.content_hash, self.monotonic()));
                return;
            }
            Err(e) => {
                tracing::error!(component = %self.component, error = %e, "cannot read the last-known-good version: not rolling back");
                return;
            }
        };
        let bad = BadVersion {
            hash: failed.content_hash.clone(),
            at: now_rfc3339(),
            reason: reason.clone(),
        };
        if let Err(e) = self.engine.update_ledger(&self.component, |l| l.mark_bad(bad)) {
            tracing::error!(component = %self.component, error = %e, "could not record the bad version");
        }
        if let Err(e) = self.engine.apply(&lkg, false) {
            tracing::error!(component = %self.component, error = %e, "rollback to last-known-good failed; will retry at the next sync");
            return;
        }
        self.shared.metrics.rollbacks.inc();
        let note = format!(
            "{} failed its trial ({reason}); rolled back to last-known-good {}",
            failed.content_hash, lkg.content_hash
        );
        tracing::warn!(component = %self.component, "{note}");
        self.publish(true, "RolledBack", note.clone()).await;
        self.trial = None;
        self.held_back = Some(note);
        self.ensure_mirror_watch(&lkg);
        self.written = Some(lkg);
    }

    async fn publish(&self, warning: bool, reason: &str, note: String) {
        if let Some(events) = &self.events {
            events.publish(warning, reason, "Sync", note).await;
        }
    }
}

async fn sleep_opt(d: Option<Duration>) {
    match d {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}
