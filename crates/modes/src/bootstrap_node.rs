//! `kube-anchor bootstrap`, carried out on one node with no API server anywhere: stage what each
//! of the node's anchor pods would mount ([`kube_anchor_core::bootstrap`]), check everything, then apply the
//! components one by one in boot order through the same engine, ledger and state dir the anchors
//! use, waiting for each one's health endpoint before the next.
//!
//! Nothing is written to the node's managed paths before every component's inputs are read and
//! rendered, the input revision markers checked and no two anchors claim one host path with
//! different content. etcd with `spec.etcdMember` records its membership first (that record is
//! what its manifest renders with).

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::engine::{ApplyReport, Engine, Inputs};
use kube_anchor_core::bootstrap::{BootstrapError, Objects, PlannedAnchor, ThisNode, boot_order};
use kube_anchor_core::config::Role;
use kube_anchor_core::membership::{Founding, Phase};
use kube_anchor_core::pinned::PinnedInputs;
use kube_anchor_k8s::direct::HealthCheck;

/// Longest `helm template` output read from one file.
const MAX_TEMPLATE_BYTES: u64 = 64 << 20;
/// How often a health endpoint is asked while waiting.
const HEALTH_POLL: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub(crate) enum BootNodeError {
    #[error("{}: cannot read: {source}", .path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Input(#[from] BootstrapError),
    #[error("{}: cannot stage the anchor inputs: {source}", .path.display())]
    Stage { path: PathBuf, source: std::io::Error },
    #[error("DaemonSet {daemonset}: {problem}")]
    Anchor { daemonset: String, problem: String },
    #[error("{component}: no anchor DaemonSet in the input selects node {node}; the input holds anchors for: {found}")]
    MissingComponent {
        component: String,
        node: String,
        found: String,
    },
    #[error("{component}: two anchor DaemonSets select node {node}: {first} and {second}")]
    TwoAnchors {
        component: String,
        node: String,
        first: String,
        second: String,
    },
    #[error("{path}: claimed by {first} and by {second} with {difference}")]
    Conflict {
        path: String,
        first: String,
        second: String,
        difference: &'static str,
    },
    #[error("{component}: not healthy within {}: waited for {url}; last answer: {last}", humantime::format_duration(*.waited))]
    Unhealthy {
        component: String,
        url: String,
        waited: Duration,
        last: String,
    },
    #[error("{component}: this node's etcd learner was not promoted within {}; last: {last}", humantime::format_duration(*.waited))]
    NotPromoted {
        component: String,
        waited: Duration,
        last: String,
    },
}

/// What bootstrap is asked to do.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    /// `helm template` outputs: (name for messages, path; `-` is stdin).
    pub sources: Vec<PathBuf>,
    pub node: ThisNode,
    /// Components that must be among the node's anchors.
    pub required: Vec<String>,
    pub host_root: PathBuf,
    pub wait_timeout: Duration,
    /// The node joins a running cluster: etcd never starts a new one.
    pub join: bool,
}

/// One step of the progress, printed as it happens.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(tag = "event", rename_all = "camelCase")]
pub(crate) enum Progress {
    /// Every input read, rendered and checked; nothing written yet.
    #[serde(rename_all = "camelCase")]
    Checked { node: String, components: Vec<String> },
    /// Written (or found in place and adopted); the apply report goes with it.
    #[serde(rename_all = "camelCase")]
    Applied { component: String },
    #[serde(rename_all = "camelCase")]
    Waiting {
        component: String,
        url: String,
        timeout_seconds: f64,
    },
    #[serde(rename_all = "camelCase")]
    Healthy { component: String, after_seconds: f64 },
    /// This node's etcd member was added as a learner (a node joining a running cluster):
    /// waiting until it is promoted.
    #[serde(rename_all = "camelCase")]
    Promoting { component: String, timeout_seconds: f64 },
    /// This node's etcd member, added as a learner, is a voter.
    #[serde(rename_all = "camelCase")]
    Promoted { component: String, after_seconds: f64 },
    /// No health URL in the anchor's environment: nothing to wait for.
    #[serde(rename_all = "camelCase")]
    NotWaited { component: String },
    #[serde(rename_all = "camelCase")]
    Done { node: String, seconds: f64 },
}

/// An anchor pod staged on disk, its inputs loaded.
struct Staged {
    pod: PlannedAnchor,
    root: PathBuf,
    engine: Engine,
    inputs: Inputs,
}

impl Staged {
    /// Where a path of the container lies in the staging dir.
    fn staged(&self, container_path: &Path) -> PathBuf {
        staged_path(&self.root, container_path)
    }

    fn component(&self) -> &str {
        &self.inputs.anchor.name
    }
}

/// Reads the sources, picks the node's anchors and checks them all, then applies and waits for
/// each component in boot order. `report` receives each step as it happens.
pub(crate) async fn bootstrap(
    request: &Request,
    mut report: impl FnMut(&Progress, Option<&ApplyReport>),
) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut objects = Objects::default();
    for path in &request.sources {
        let text = read_source(path)?;
        objects.add_yaml(&path.display().to_string(), &text)?;
    }
    let pods = objects.anchors_for(&request.node)?;
    // Secrets are staged in a private temporary directory (0700), removed when done.
    let stage = tempfile::Builder::new()
        .prefix("kube-anchor-bootstrap.")
        .tempdir()
        .map_err(|source| BootNodeError::Stage {
            path: std::env::temp_dir(),
            source,
        })?;
    let mut staged = Vec::new();
    for (i, pod) in pods.into_iter().enumerate() {
        let mut s = stage_pod(stage.path().join(i.to_string()), pod, &request.node, &request.host_root)?;
        // A joining node may be named in the values' initial cluster (every node is, when the
        // values list them all): without one, a cluster that does not answer is an error to
        // wait on, never a reason to start a second cluster.
        if request.join
            && let Some(member) = s.inputs.anchor.etcd_member.as_mut()
        {
            member.initial_cluster = None;
        }
        staged.push(s);
    }
    let by_component = check_components(&staged, request)?;
    check_claims(&staged)?;
    let order = boot_order(&by_component.keys().cloned().collect::<Vec<_>>());
    // Render every component that needs no membership record now: a bad template or a missing
    // variable stops here, before anything is written.
    for s in &staged {
        if s.inputs.anchor.etcd_member.is_none() {
            s.inputs
                .desired(&s.inputs.variables(None))
                .with_context(|| format!("{}: rendering", s.component()))?;
        }
    }
    report(
        &Progress::Checked {
            node: request.node.name.clone(),
            components: order.clone(),
        },
        None,
    );
    for component in &order {
        let s = &staged[by_component[component]];
        let record = join_until_recorded(s, request.wait_timeout).await?;
        let desired = s
            .inputs
            .desired(&s.inputs.variables(record.as_ref()))
            .with_context(|| format!("{component}: rendering"))?;
        s.engine
            .check_credentials(&desired)
            .with_context(|| format!("applying {component}"))?;
        // Bootstrap is an explicit apply: it takes a decommissioned component back.
        s.engine.recommission(&desired.component, None)?;
        let applied = s
            .engine
            .apply(&desired, false)
            .with_context(|| format!("applying {component}"))?;
        report(
            &Progress::Applied {
                component: component.clone(),
            },
            Some(&applied),
        );
        // A learner first becomes a voter: its health then means what a voter's does.
        if record.as_ref().is_some_and(|r| r.phase == Phase::Learner) {
            wait_voter(s, request.wait_timeout, &mut report).await?;
        }
        wait_healthy(s, request.wait_timeout, &mut report).await?;
    }
    report(
        &Progress::Done {
            node: request.node.name.clone(),
            seconds: started.elapsed().as_secs_f64(),
        },
        None,
    );
    Ok(())
}

/// etcd's membership record, once there is one to render with: a join step that cannot record
/// one yet (the cluster not answering yet, or a stale member of this node removed first, as on a
/// re-imaged node) is taken again, within `timeout`. `None` without `spec.etcdMember`.
async fn join_until_recorded(
    s: &Staged,
    timeout: Duration,
) -> anyhow::Result<Option<kube_anchor_core::membership::Record>> {
    let started = Instant::now();
    loop {
        match crate::etcd_member::join_before_write(&s.engine, &s.inputs, false).await {
            Err(e)
                if started.elapsed() < timeout
                    && matches!(
                        e.downcast_ref::<crate::engine::EngineError>(),
                        Some(crate::engine::EngineError::MembershipPending { .. })
                    ) =>
            {
                tracing::info!(component = %s.component(), reason = %e, "etcd membership pending; trying again");
                tokio::time::sleep(HEALTH_POLL).await;
            }
            other => return other,
        }
    }
}

/// Until this node's etcd learner is a voter: a node joining a running cluster starts its
/// kube-apiserver next, which reaches etcd at this member, and a learner refuses its requests.
/// Each step is the anchor's own ([`crate::etcd_member::join_step`]): it promotes the learner once
/// it has caught up with the leader.
async fn wait_voter(
    s: &Staged,
    timeout: Duration,
    report: &mut impl FnMut(&Progress, Option<&ApplyReport>),
) -> anyhow::Result<()> {
    let component = s.component().to_owned();
    report(
        &Progress::Promoting {
            component: component.clone(),
            timeout_seconds: timeout.as_secs_f64(),
        },
        None,
    );
    let started = Instant::now();
    loop {
        let last = match crate::etcd_member::join_step(&s.engine, &s.inputs, Founding::WhenNoneAnswers, false).await {
            Ok(step) if step.record.as_ref().is_some_and(|r| r.phase == Phase::Voter) => {
                report(
                    &Progress::Promoted {
                        component,
                        after_seconds: started.elapsed().as_secs_f64(),
                    },
                    None,
                );
                return Ok(());
            }
            Ok(step) => step.summary,
            Err(e) => e.to_string(),
        };
        if started.elapsed() >= timeout {
            return Err(BootNodeError::NotPromoted {
                component,
                waited: timeout,
                last,
            }
            .into());
        }
        tokio::time::sleep(HEALTH_POLL).await;
    }
}

/// Where a path of the anchor container lies under a staging root.
fn staged_path(root: &Path, container_path: &Path) -> PathBuf {
    root.join(container_path.strip_prefix("/").unwrap_or(container_path))
}

fn read_source(path: &Path) -> Result<String, BootNodeError> {
    let unreadable = |source| BootNodeError::Read {
        path: path.into(),
        source,
    };
    let bytes = if path == Path::new("-") {
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut std::io::Read::take(std::io::stdin(), MAX_TEMPLATE_BYTES), &mut buf)
            .map_err(unreadable)?;
        buf
    } else {
        kube_anchor_host::hostfs::read_regular(path, MAX_TEMPLATE_BYTES, kube_anchor_host::hostfs::Follow::Yes)
            .map_err(unreadable)?
    };
    String::from_utf8(bytes)
        .map_err(|e| unreadable(std::io::Error::new(std::io::ErrorKind::InvalidData, e.utf8_error())))
}

/// Writes the pod's volume files under `root` (as the container would see them) and loads its
/// config as `run` would, with the node's name and address as variables.
fn stage_pod(root: PathBuf, pod: PlannedAnchor, node: &ThisNode, host_root: &Path) -> anyhow::Result<Staged> {
    let to_staged = |p: &Path| staged_path(&root, p);
    for file in &pod.files {
        let path = to_staged(&file.path);
        let stage_err = |source| BootNodeError::Stage {
            path: path.clone(),
            source,
        };
        let dir = path.parent().expect("a file in a mount dir");
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(stage_err)?;
        let mut out = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(stage_err)?;
        out.write_all(&file.content).map_err(stage_err)?;
    }
    let anchor_err = |problem: String| BootNodeError::Anchor {
        daemonset: format!("{}/{}", pod.namespace, pod.daemonset),
        problem,
    };
    let state_dir = pod
        .env("KUBE_ANCHOR_STATE_DIR")
        .unwrap_or("/var/lib/kube-anchor")
        .to_owned();
    let allowed: Vec<String> = pod
        .env("KUBE_ANCHOR_ALLOWED_ROOTS")
        .unwrap_or("/etc/kubernetes")
        .split(',')
        .map(str::to_owned)
        .collect();
    let engine = Engine::new(host_root, &state_dir, &allowed)?;
    // The pod applies only inputs whose revision markers match its template (`kube_anchor_core::pinned`):
    // a `helm template` output mixing revisions would fail the same way on the node.
    if let Some(spec) = pod.env("KUBE_ANCHOR_EXPECT_INPUTS") {
        let pinned: PinnedInputs = spec.parse().map_err(|e| anchor_err(format!("{e}")))?;
        pinned
            .check(|p| fs::read_to_string(to_staged(p)).map_err(|e| e.to_string()))
            .map_err(|e| anchor_err(e.to_string()))?;
    }
    // Errors name paths as the anchor container sees them, not the staging dir.
    let mut inputs = Inputs::load(&to_staged(pod.config_path()), engine.roots()).map_err(|e| match e {
        crate::engine::EngineError::Source { path, field, .. } if !path.exists() => {
            let key = path.file_name().unwrap_or_default().to_string_lossy().into_owned();
            let path = path.display().to_string().replace(&root.display().to_string(), "");
            anchor_err(format!(
                "its config's {field} is {path}, but no volume of the pod holds {key} (it mounts {})",
                pod.sources.join(", ")
            ))
        }
        e => {
            let message = crate::logging::error_chain(&anyhow::Error::from(e));
            anchor_err(message.replace(&root.display().to_string(), ""))
        }
    })?;
    inputs.given = pod.env.clone();
    inputs.given.insert("NODE_NAME".into(), node.name.clone());
    inputs.given.insert("NODE_IP".into(), node.ip.clone());
    Ok(Staged {
        pod,
        root,
        engine,
        inputs,
    })
}

/// One anchor per component, and every required component present.
fn check_components(staged: &[Staged], request: &Request) -> Result<BTreeMap<String, usize>, BootNodeError> {
    let mut by_component: BTreeMap<String, usize> = BTreeMap::new();
    for (i, s) in staged.iter().enumerate() {
        if let Some(&first) = by_component.get(s.component()) {
            let name = |s: &Staged| format!("{}/{}", s.pod.namespace, s.pod.daemonset);
            return Err(BootNodeError::TwoAnchors {
                component: s.component().into(),
                node: request.node.name.clone(),
                first: name(&staged[first]),
                second: name(s),
            });
        }
        by_component.insert(s.component().into(), i);
    }
    for component in &request.required {
        if !by_component.contains_key(component) {
            return Err(BootNodeError::MissingComponent {
                component: component.clone(),
                node: request.node.name.clone(),
                found: by_component.keys().cloned().collect::<Vec<_>>().join(", "),
            });
        }
    }
    Ok(by_component)
}

/// Components may share a credential (the cluster CA is written by several charts) only with the
/// same content and mode; a manifest path belongs to one component.
fn check_claims(staged: &[Staged]) -> Result<(), BootNodeError> {
    let mut claims: BTreeMap<String, (&str, Role, &[u8], u32, bool)> = BTreeMap::new();
    for s in staged {
        for (spec, bytes) in s.inputs.anchor.files.iter().zip(&s.inputs.sources) {
            let claim = (s.component(), spec.role, bytes.as_slice(), spec.mode.0, spec.template);
            let path = spec.path.to_string();
            let Some(first) = claims.get(&path) else {
                claims.insert(path, claim);
                continue;
            };
            let difference = if first.1 == Role::Manifest || claim.1 == Role::Manifest {
                "a static pod manifest each"
            } else if first.2 != claim.2 || first.4 != claim.4 {
                "different content"
            } else if first.3 != claim.3 {
                "different modes"
            } else {
                continue;
            };
            return Err(BootNodeError::Conflict {
                path,
                first: first.0.into(),
                second: claim.0.into(),
                difference,
            });
        }
    }
    Ok(())
}

async fn wait_healthy(
    s: &Staged,
    timeout: Duration,
    report: &mut impl FnMut(&Progress, Option<&ApplyReport>),
) -> anyhow::Result<()> {
    let component = s.component().to_owned();
    let Some(url) = s.pod.env("KUBE_ANCHOR_HEALTH_URL") else {
        report(&Progress::NotWaited { component }, None);
        return Ok(());
    };
    let ca = s.pod.env("KUBE_ANCHOR_HEALTH_CA_FILE").map(|p| s.staged(Path::new(p)));
    let check = HealthCheck::new(url, ca.as_deref())?;
    report(
        &Progress::Waiting {
            component: component.clone(),
            url: url.into(),
            timeout_seconds: timeout.as_secs_f64(),
        },
        None,
    );
    let started = Instant::now();
    loop {
        let last = match check.check().await {
            Ok(()) => {
                report(
                    &Progress::Healthy {
                        component,
                        after_seconds: started.elapsed().as_secs_f64(),
                    },
                    None,
                );
                return Ok(());
            }
            Err(e) => e.reason,
        };
        if started.elapsed() >= timeout {
            return Err(BootNodeError::Unhealthy {
                component,
                url: url.into(),
                waited: timeout,
                last,
            }
            .into());
        }
        tokio::time::sleep(HEALTH_POLL).await;
    }
}
