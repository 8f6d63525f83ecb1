//! `kube-anchor checkpointer`: the guarded, bootkube-compatible pod checkpointer.
//!
//! Every `--interval` (and on pod changes) it observes, per owner of annotated parent pods on
//! this node: the parents in the API (one watch, `spec.nodeName=<node>`), the pods the kubelet
//! really runs (`/pods`), whether the owner still wants this node, and the checkpoints on disk;
//! feeds them to [`checkpoint::decide`]; and carries out the actions with the same atomic
//! writer as every other mode. One process at a time acts: an exclusive lock on the host.

use std::collections::{BTreeMap, BTreeSet};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret};
use kube::api::Api;
use kube::runtime::{WatchStreamExt, reflector, watcher};

use crate::checkpoint::{self, Action, Generation, Local, Observation, Parent, State};
use crate::cli::{CheckpointerAction, CheckpointerArgs, CheckpointerRunArgs};
use crate::config::{FileMode, Owner, Role};
use crate::decommission::{self, Lookup};
use crate::desired::{DesiredFile, sha256_hex};
use crate::hostfs::HostFs;
use crate::hostpath::{AllowedRoots, HostPath};
use crate::kubeapi::{self, API_TIMEOUT, KubeletClient};
use crate::plan::{Op, WriteReason};
use crate::sanitize::{self, CHECKPOINT_OF_ANNOTATION, CHECKPOINT_OWNER_ANNOTATION, Layout, SourceKind};

/// Checkpoint data is private: 0700 directories.
const DIR_MODE: u32 = 0o700;
const MANIFEST_MODE: FileMode = FileMode(0o600);

pub async fn main(args: CheckpointerArgs) -> anyhow::Result<ExitCode> {
    match args.action {
        Some(CheckpointerAction::Sanitize { node, file }) => sanitize_command(node.as_deref(), file.as_deref()),
        None => run(args.run).await.map(|()| ExitCode::SUCCESS),
    }
}

fn sanitize_command(node: Option<&str>, file: Option<&std::path::Path>) -> anyhow::Result<ExitCode> {
    let text = match file {
        Some(p) if p.as_os_str() != "-" => {
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?
        }
        _ => std::io::read_to_string(std::io::stdin()).context("reading stdin")?,
    };
    let source = file.map(|p| p.display().to_string()).unwrap_or_else(|| "stdin".into());
    let pod: Pod = serde_yaml_ng::from_str(&text).with_context(|| format!("{source}: not a Pod"))?;
    let checkpoint =
        sanitize::sanitize(&pod, &Layout::default()).with_context(|| format!("{source}: cannot be checkpointed"))?;
    print!("{}", String::from_utf8_lossy(&checkpoint.to_json()));
    eprintln!("# file: {}", checkpoint.file_name());
    if let Some(node) = node {
        eprintln!(
            "# runs as mirror pod {}-{}",
            checkpoint.pod.metadata.name.as_deref().unwrap_or_default(),
            node.to_lowercase()
        );
    }
    for m in &checkpoint.materials {
        let sources: Vec<String> = m.sources.iter().map(|s| format!("{:?} {}", s.kind, s.name)).collect();
        eprintln!(
            "# volume {}: {} (mode {:04o}, owner {}:{}) from {}",
            m.volume,
            m.dir,
            m.mode,
            m.owner.0,
            m.owner.1,
            sources.join(", ")
        );
    }
    Ok(ExitCode::SUCCESS)
}

struct Paths {
    inactive: HostPath,
    manifests: HostPath,
    layout: Layout,
}

impl Paths {
    fn inactive_file(&self, stem: &str) -> HostPath {
        self.inactive
            .join(&format!("{stem}.json"))
            .expect("a checkpoint file name")
    }
    fn active_file(&self, stem: &str) -> HostPath {
        self.manifests
            .join(&format!("{stem}.json"))
            .expect("a checkpoint file name")
    }
}

/// What the checkpointer remembers about one generation beyond the state machine's view.
#[derive(Debug, Clone)]
struct GenerationFiles {
    namespace: String,
    pod: String,
}

async fn run(args: CheckpointerRunArgs) -> anyhow::Result<()> {
    let node = args
        .identity
        .node_name
        .clone()
        .context("--node-name (NODE_NAME) is required")?;
    let state_dir = HostPath::parse(&args.node.state_dir)?;
    let paths = Paths {
        inactive: HostPath::parse(&args.inactive_dir)?,
        manifests: HostPath::parse(&args.manifest_dir)?,
        layout: Layout {
            secrets: HostPath::parse(&args.secrets_dir)?,
            configmaps: HostPath::parse(&args.configmaps_dir)?,
        },
    };
    let mut roots = vec![state_dir.clone()];
    for r in &args.node.allowed_roots {
        roots.push(HostPath::parse(r)?);
    }
    let fs = HostFs::new(&args.node.host_root, AllowedRoots::new(roots))?.with_dir_mode(DIR_MODE);
    for dir in [
        &paths.inactive,
        &paths.manifests,
        &paths.layout.secrets,
        &paths.layout.configmaps,
    ] {
        fs.roots().check(&dir.join("x")?)?;
    }
    // The DaemonSet copy and the static copy of the checkpointer never act at the same time.
    let lock_fs = fs.clone();
    let lock_dir = state_dir.clone();
    tracing::info!("waiting for the checkpointer lock");
    let _lock = tokio::task::spawn_blocking(move || lock_fs.lock(&lock_dir, "checkpointer")).await??;
    tracing::info!(%node, "checkpointer lock held; starting");

    let mut draining = crate::shutdown::install()?;
    let client = kubeapi::client(args.identity.kubeconfig.as_deref()).await?;
    let kubelet = KubeletClient::new(
        &args.kubelet_url,
        kubeapi::bearer_token(args.identity.kubeconfig.as_deref()).await,
        args.kubelet_ca_file.as_deref(),
    )?;
    let cfg = checkpoint::Config {
        ready_window: args.ready_window,
        stable_window: args.stable_window,
        handoff_timeout: args.handoff_timeout,
        retire_grace: args.retire_grace,
        max_backoff: args.handoff_timeout.saturating_mul(10),
    };

    // The watch on this node's pods, as a reflector store; `api_ok` follows the stream.
    let (store, writer) = reflector::store::<Pod>();
    let (api_ok_tx, api_ok) = tokio::sync::watch::channel(false);
    let (wake_tx, mut wake) = tokio::sync::mpsc::channel::<()>(1);
    if let Some(client) = &client {
        let pods: Api<Pod> = Api::all(client.clone());
        let config = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
        let stream = reflector(writer, watcher(pods, config).default_backoff());
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                let _ = api_ok_tx.send(event.is_ok());
                let _ = wake_tx.try_send(());
            }
        });
    }

    let started = Instant::now();
    let mut machine = Machine {
        fs,
        paths,
        states: BTreeMap::new(),
        files: BTreeMap::new(),
        local_ready_since: BTreeMap::new(),
        refused: BTreeSet::new(),
    };
    machine.load_from_disk(started.elapsed());
    loop {
        let api_reachable = *api_ok.borrow() && futures::FutureExt::now_or_never(store.wait_until_ready()).is_some();
        machine
            .step(
                &cfg,
                started.elapsed(),
                api_reachable,
                &store,
                client.as_ref(),
                &kubelet,
                &node,
            )
            .await;
        tokio::select! {
            _ = tokio::time::sleep(args.interval) => {}
            Some(()) = wake.recv() => {}
            _ = draining.changed() => {
                tracing::info!("checkpointer draining; checkpoints stay on disk");
                return Ok(());
            }
        }
    }
}

struct Machine {
    fs: HostFs,
    paths: Paths,
    /// By owner key.
    states: BTreeMap<String, State>,
    /// By generation (file stem `<ns>-<pod>`).
    files: BTreeMap<String, GenerationFiles>,
    /// Pod uid -> when the kubelet was first seen running it Ready.
    local_ready_since: BTreeMap<String, Duration>,
    /// Parents (file stems) that cannot be made a valid static pod: reported once.
    refused: BTreeSet<String>,
}

impl Machine {
    /// Rebuilds the per-owner state from the checkpoints on disk (after a restart or a reboot).
    fn load_from_disk(&mut self, now: Duration) {
        let Ok(dir) = self
            .fs
            .resolve(&self.paths.inactive_file("x"))
            .map(|p| p.parent().expect("dir").to_path_buf())
        else {
            return;
        };
        let Ok(entries) = std::fs::read_dir(&dir) else { return };
        let mut found: Vec<(SystemTime, String, String, GenerationFiles, bool)> = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(stem) = name.strip_suffix(".json").filter(|_| !name.starts_with('.')) else {
                continue;
            };
            let Ok(pod) = std::fs::read(entry.path())
                .map_err(|_| ())
                .and_then(|b| serde_json::from_slice::<Pod>(&b).map_err(|_| ()))
            else {
                tracing::warn!(file = %entry.path().display(), "unreadable checkpoint left alone");
                continue;
            };
            let annotations = pod.metadata.annotations.clone().unwrap_or_default();
            let Some(of) = annotations.get(CHECKPOINT_OF_ANNOTATION) else {
                continue;
            };
            let namespace = pod.metadata.namespace.clone().unwrap_or_else(|| "default".into());
            // A bootkube checkpoint has no owner annotation: keyed as a bare pod of that name.
            let owner = annotations
                .get(CHECKPOINT_OWNER_ANNOTATION)
                .cloned()
                .unwrap_or_else(|| format!("Pod/{namespace}/{of}/unknown"));
            let host_network = pod.spec.as_ref().and_then(|s| s.host_network).unwrap_or(false);
            let mtime = entry
                .metadata()
                .and_then(|m| m.modified())
                .unwrap_or(SystemTime::UNIX_EPOCH);
            let files = GenerationFiles {
                namespace: pod.metadata.namespace.clone().unwrap_or_default(),
                pod: of.clone(),
            };
            found.push((mtime, owner, stem.to_owned(), files, host_network));
        }
        found.sort_by_key(|f| f.0);
        for (_, owner, stem, files, host_network) in found {
            let active = self
                .fs
                .observe(&self.paths.active_file(&stem))
                .is_ok_and(|o| o != crate::plan::Observed::Missing);
            self.states.entry(owner).or_default().generations.push(Generation {
                uid: stem.clone(),
                name: stem.clone(),
                active,
                host_network,
            });
            self.files.insert(stem, files);
        }
        tracing::info!(owners = self.states.len(), generations = self.files.len(), at = ?now, "checkpoints found on disk");
    }

    #[allow(clippy::too_many_arguments)]
    async fn step(
        &mut self,
        cfg: &checkpoint::Config,
        now: Duration,
        api_reachable: bool,
        store: &reflector::Store<Pod>,
        client: Option<&kube::Client>,
        kubelet: &KubeletClient,
        node: &str,
    ) {
        // What the kubelet really runs: pods of an owner, never checkpoint copies.
        let local_pods = match kubelet.pods().await {
            Ok(pods) => pods,
            Err(e) => {
                tracing::warn!(error = %e, "kubelet /pods unavailable; assuming nothing of ours runs here");
                Vec::new()
            }
        };
        let mut local: BTreeMap<String, Vec<Local>> = BTreeMap::new();
        let mut seen = BTreeSet::new();
        for pod in local_pods.iter().filter(|p| !is_checkpoint_or_static(p)) {
            let (Some(key), Some(uid)) = (sanitize::controller_key(pod), pod.metadata.uid.clone()) else {
                continue;
            };
            seen.insert(uid.clone());
            let ready_since = running_ready(pod).then(|| *self.local_ready_since.entry(uid.clone()).or_insert(now));
            if ready_since.is_none() {
                self.local_ready_since.remove(&uid);
            }
            local.entry(key).or_default().push(Local { uid, ready_since });
        }
        self.local_ready_since.retain(|uid, _| seen.contains(uid));

        let mut parents: BTreeMap<String, Vec<(Parent, Pod)>> = BTreeMap::new();
        if api_reachable {
            for pod in store.state().iter().filter(|p| sanitize::is_parent(p)) {
                let Some(key) = sanitize::controller_key(pod) else {
                    continue;
                };
                let stem = file_stem(pod);
                let ready_since = ready_for(pod).map(|d| now.saturating_sub(d));
                let host_network = pod.spec.as_ref().and_then(|s| s.host_network).unwrap_or(false);
                parents.entry(key).or_default().push((
                    Parent {
                        uid: stem.clone(),
                        name: stem,
                        ready_since,
                        host_network,
                    },
                    (**pod).clone(),
                ));
            }
        }
        let node_facts = match (api_reachable, client) {
            (true, Some(c)) => match kubeapi::lookup(&Api::<Node>::all(c.clone()), node, API_TIMEOUT).await {
                Lookup::Found(n) => Some(decommission::node_facts(&n)),
                _ => None,
            },
            _ => None,
        };

        let keys: BTreeSet<String> = self.states.keys().chain(parents.keys()).cloned().collect();
        for key in keys {
            let wants = match (api_reachable, client) {
                (true, Some(c)) => owner_wants_node(c, &key, node_facts.as_ref(), store).await,
                _ => None,
            };
            let obs = Observation {
                now,
                api_reachable,
                parents: parents
                    .get(&key)
                    .map(|p| p.iter().map(|(p, _)| p.clone()).collect())
                    .unwrap_or_default(),
                local: local.get(&key).cloned().unwrap_or_default(),
                owner_wants_node: wants,
            };
            let state = self.states.get(&key).cloned().unwrap_or_default();
            let (mut next, actions) = checkpoint::decide(&state, &obs, cfg);
            for action in actions {
                tracing::info!(owner = %key, ?action, "checkpoint action");
                let result = match &action {
                    Action::Checkpoint { name, .. } => {
                        let parent = parents
                            .get(&key)
                            .and_then(|ps| ps.iter().find(|(p, _)| &p.name == name))
                            .map(|(_, pod)| pod.clone());
                        match (parent, client) {
                            (Some(_), Some(_)) if self.refused.contains(name) => {
                                Err(anyhow::anyhow!("parent {name} cannot be checkpointed (reported)"))
                            }
                            (Some(pod), Some(c)) => match sanitize::sanitize(&pod, &self.paths.layout) {
                                Err(e) => {
                                    // A parent that cannot run as a static pod: tell its owner's
                                    // operator where they look (an Event on the pod), once.
                                    tracing::error!(parent = %name, error = %e, "not checkpointable");
                                    let sink = kubeapi::EventSink::new(
                                        c.clone(),
                                        pod.metadata.namespace.as_deref().unwrap_or("default"),
                                        pod.metadata.name.as_deref().unwrap_or_default(),
                                    );
                                    sink.publish(true, "NotCheckpointable", "Checkpoint", e.to_string())
                                        .await;
                                    self.refused.insert(name.clone());
                                    Err(e.into())
                                }
                                Ok(_) => self.checkpoint(c, &pod).await,
                            },
                            _ => Err(anyhow::anyhow!("parent {name} vanished")),
                        }
                    }
                    Action::Activate { name } => self.activate(name),
                    Action::Deactivate { name } => self.remove_file(&self.paths.active_file(name)),
                    Action::Retire { name } => self.retire(name),
                };
                if let Err(e) = result {
                    let reported = matches!(&action, Action::Checkpoint { name, .. } if self.refused.contains(name));
                    if reported {
                        tracing::debug!(owner = %key, ?action, "parent not checkpointable (already reported)");
                    } else {
                        tracing::error!(owner = %key, ?action, error = %crate::commands::error_chain(&e), "checkpoint action failed; will retry");
                    }
                    // Undo the state machine's belief so the next step tries again.
                    match &action {
                        Action::Checkpoint { name, .. } => next.generations.retain(|g| &g.name != name),
                        Action::Activate { name } => next
                            .generations
                            .iter_mut()
                            .filter(|g| &g.name == name)
                            .for_each(|g| g.active = false),
                        Action::Deactivate { name } => next
                            .generations
                            .iter_mut()
                            .filter(|g| &g.name == name)
                            .for_each(|g| g.active = true),
                        Action::Retire { .. } => next = state.clone(),
                    }
                }
            }
            if next.generations.is_empty() && next.unwanted_since.is_none() {
                self.states.remove(&key);
            } else {
                self.states.insert(key, next);
            }
        }
    }

    /// Writes a new generation: the secret and configmap files first, the inactive manifest last.
    async fn checkpoint(&mut self, client: &kube::Client, parent: &Pod) -> anyhow::Result<()> {
        let checkpoint = sanitize::sanitize(parent, &self.paths.layout)?;
        let ns = parent.metadata.namespace.clone().unwrap_or_default();
        let mut fetched = BTreeMap::new();
        for m in &checkpoint.materials {
            for s in &m.sources {
                let data = match s.kind {
                    SourceKind::Secret => {
                        match kubeapi::lookup(&Api::<Secret>::namespaced(client.clone(), &ns), &s.name, API_TIMEOUT)
                            .await
                        {
                            Lookup::Found(secret) => Some(
                                secret
                                    .data
                                    .unwrap_or_default()
                                    .into_iter()
                                    .map(|(k, v)| (k, v.0))
                                    .collect(),
                            ),
                            Lookup::NotFound => None,
                            Lookup::Unavailable(e) => anyhow::bail!("reading Secret {ns}/{}: {e}", s.name),
                        }
                    }
                    SourceKind::ConfigMap => {
                        match kubeapi::lookup(&Api::<ConfigMap>::namespaced(client.clone(), &ns), &s.name, API_TIMEOUT)
                            .await
                        {
                            Lookup::Found(cm) => {
                                let mut data: BTreeMap<String, Vec<u8>> = cm
                                    .data
                                    .unwrap_or_default()
                                    .into_iter()
                                    .map(|(k, v)| (k, v.into_bytes()))
                                    .collect();
                                data.extend(cm.binary_data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)));
                                Some(data)
                            }
                            Lookup::NotFound => None,
                            Lookup::Unavailable(e) => anyhow::bail!("reading ConfigMap {ns}/{}: {e}", s.name),
                        }
                    }
                };
                fetched.insert((s.kind, s.name.clone()), data);
            }
        }
        let mut ops = Vec::new();
        for m in &checkpoint.materials {
            for (path, content) in sanitize::materialize(m, &fetched)? {
                ops.push(write_op(
                    path,
                    content,
                    FileMode(m.mode),
                    Some(Owner {
                        uid: m.owner.0,
                        gid: m.owner.1,
                    }),
                    Role::Credential,
                ));
            }
        }
        let stem = file_stem(parent);
        ops.push(write_op(
            self.paths.inactive_file(&stem),
            checkpoint.to_json(),
            MANIFEST_MODE,
            None,
            Role::Manifest,
        ));
        self.fs.execute(&ops).map_err(|(e, _)| e)?;
        self.files.insert(
            stem,
            GenerationFiles {
                namespace: ns,
                pod: parent.metadata.name.clone().unwrap_or_default(),
            },
        );
        Ok(())
    }

    fn activate(&self, stem: &str) -> anyhow::Result<()> {
        let content = self
            .fs
            .read(&self.paths.inactive_file(stem))?
            .with_context(|| format!("inactive checkpoint {stem} is missing"))?;
        let op = write_op(
            self.paths.active_file(stem),
            content,
            MANIFEST_MODE,
            None,
            Role::Manifest,
        );
        self.fs.execute(std::slice::from_ref(&op)).map_err(|(e, _)| e)?;
        Ok(())
    }

    fn remove_file(&self, path: &HostPath) -> anyhow::Result<()> {
        let sha256 = match self.fs.observe(path)? {
            crate::plan::Observed::File { sha256, .. } => sha256,
            crate::plan::Observed::Missing => return Ok(()),
            other => anyhow::bail!("{path}: {other:?} where a checkpoint was expected"),
        };
        let op = Op::Remove {
            path: path.clone(),
            role: Role::Manifest,
            expected_sha256: sha256,
        };
        self.fs.execute(std::slice::from_ref(&op)).map_err(|(e, _)| e)?;
        Ok(())
    }

    /// The manifest first, then the inactive copy, then its secrets and configmaps.
    fn retire(&mut self, stem: &str) -> anyhow::Result<()> {
        self.remove_file(&self.paths.active_file(stem))?;
        self.remove_file(&self.paths.inactive_file(stem))?;
        if let Some(files) = self.files.remove(stem) {
            for base in [&self.paths.layout.secrets, &self.paths.layout.configmaps] {
                let dir = base.join(&format!("{}/{}", files.namespace, files.pod))?;
                self.fs.remove_tree(&dir)?;
            }
        }
        Ok(())
    }
}

fn write_op(path: HostPath, content: Vec<u8>, mode: FileMode, owner: Option<Owner>, role: Role) -> Op {
    let sha256 = sha256_hex(&content);
    Op::Write {
        file: DesiredFile {
            path,
            content,
            mode,
            owner,
            role,
        },
        sha256,
        reason: WriteReason::Content,
    }
}

fn file_stem(pod: &Pod) -> String {
    format!(
        "{}-{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

fn is_checkpoint_or_static(pod: &Pod) -> bool {
    let a = pod.metadata.annotations.as_ref();
    a.is_some_and(|a| {
        a.contains_key(CHECKPOINT_OF_ANNOTATION)
            || a.get(sanitize::CONFIG_SOURCE_ANNOTATION).is_some_and(|s| s == "file")
    })
}

fn running_ready(pod: &Pod) -> bool {
    let status = pod.status.as_ref();
    status.and_then(|s| s.phase.as_deref()) == Some("Running")
        && status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// How long the API has shown the pod Running and Ready (from its Ready condition).
fn ready_for(pod: &Pod) -> Option<Duration> {
    if !running_ready(pod) {
        return None;
    }
    let since = pod
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")?
        .last_transition_time
        .as_ref()?;
    let since: SystemTime = since.0.into();
    Some(SystemTime::now().duration_since(since).unwrap_or_default())
}

/// Does the owner still want a pod on this node? Only DaemonSets (by their node selection) and
/// bare pods (by existing) can be judged; anything else is unknown and never retired this way.
async fn owner_wants_node(
    client: &kube::Client,
    key: &str,
    node: Option<&decommission::NodeFacts>,
    store: &reflector::Store<Pod>,
) -> Option<bool> {
    let mut parts = key.splitn(4, '/');
    let (kind, namespace, name, uid) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    match kind {
        "DaemonSet" => {
            match kubeapi::lookup(
                &Api::<DaemonSet>::namespaced(client.clone(), namespace),
                name,
                API_TIMEOUT,
            )
            .await
            {
                Lookup::NotFound => Some(false),
                Lookup::Found(ds) if ds.metadata.uid.as_deref() != Some(uid) => Some(false),
                Lookup::Found(ds) => {
                    let facts = decommission::daemonset_facts(&ds);
                    let node = node?;
                    Some(!facts.deleting && decommission::matches_node(&facts.selection, &node.labels, &node.name))
                }
                Lookup::Unavailable(_) => None,
            }
        }
        "Pod" => Some(store.state().iter().any(|p| {
            p.metadata.uid.as_deref() == Some(uid)
                || (uid == "unknown"
                    && p.metadata.name.as_deref() == Some(name)
                    && p.metadata.namespace.as_deref() == Some(namespace))
        })),
        _ => None,
    }
}
