//! Command-line interface: flags as data. Every flag a chart sets has an `env` fallback.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use kube_anchor_core::decommission;

/// `kube-anchor --version`: the crate version and the commit it was built from.
pub(crate) const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("KUBE_ANCHOR_GIT_COMMIT"),
    ")"
);

#[derive(Debug, Parser)]
#[command(
    name = "kube-anchor",
    version = VERSION,
    about = "Keeps control-plane static pods, and their credentials, on the node"
)]
pub struct Cli {
    /// Log line format (logs go to stderr; results to stdout).
    #[arg(long, global = true, env = "KUBE_ANCHOR_LOG_FORMAT", value_enum, default_value_t = LogFormat::Plain)]
    pub log_format: LogFormat,
    /// More logs on stderr: -v info, -vv debug (one-shot verbs log only warnings by default;
    /// daemons and --log-format json log info).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Plain,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Text,
    Json,
}

impl Command {
    /// Runs until stopped, or runs where only a log will ever show what it did.
    pub fn is_daemon(&self) -> bool {
        match self {
            Command::Run(_) | Command::PreStop(_) => true,
            Command::Checkpointer(args) => args.action.is_none(),
            _ => false,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Render the config and write its files and manifest onto the node, once.
    Apply(ApplyArgs),
    /// First boot of a node with no API server anywhere: from the output of `helm template` of
    /// the component charts, apply every component this node's anchors would (etcd,
    /// kube-apiserver, kube-controller-manager, kube-scheduler, then any other), waiting for each
    /// one's health endpoint. The anchors `helm install` starts later find every file in place
    /// and adopt it: nothing is rewritten, no static pod restarts.
    Bootstrap(BootstrapArgs),
    /// Remove what `apply` wrote for a component (only files that still hold what was written).
    Remove(RemoveArgs),
    /// Compare the node with the config; exit 0 when everything is in sync, 3 otherwise.
    Status(StatusArgs),
    /// Every certificate of every component kube-anchor manages on this node (its files and the
    /// certificates embedded in its kubeconfigs) with its expiry, read from disk with no API;
    /// exit 3 when one has expired or expires within --warn-within.
    CheckExpiration(CheckExpirationArgs),
    /// Every node's state of every component, as the anchors publish it (`AnchorStatus`
    /// objects): the version applied and last-known-good, trial state and since when, bad
    /// versions, readiness; and who holds each component's rollout Lease, for how long. Exit 3
    /// when a node is not converged or holds a version back or bad.
    Fleet(FleetArgs),
    /// Put the last-known-good version back on this node, with no API server and no running
    /// anchor: its manifest and credentials are written again and the version the node ran is
    /// recorded as bad, so no anchor writes it again until `retry`.
    Rollback(RollbackArgs),
    /// Forget that a version failed its trial, so `run` tries it again at its next sync (after
    /// fixing what made it fail outside its inputs, e.g. a missing host directory).
    Retry(RetryArgs),
    /// Hold this node's anchor of a component (disaster recovery, work by hand): until `resume`
    /// it writes, repairs, rolls back, joins and removes nothing, with or without an API, and
    /// says so in /readyz, AnchorStatus and the kube_anchor_paused metric. The operator's own
    /// verbs still act. For every component of a node from kubectl: the Node annotation
    /// kube-anchor.io/paused=<reason>.
    Pause(PauseArgs),
    /// Let an anchor held by `pause` go on: its next look (within 10 s) syncs again.
    Resume(ResumeArgs),
    /// Take a snapshot of this node's etcd member now (`spec.etcdMember`): streamed from the
    /// member, checked against etcd's integrity hash, kept beside the scheduled ones with its
    /// record, the oldest beyond the schedule's count removed. Nothing else changes.
    Snapshot(SnapshotArgs),
    /// Defragment this node's etcd member now, whatever its size, when the cluster can spare it
    /// for a while: every other member healthy and caught up, no learner, enough voters left for
    /// a quorum. A leader hands its leadership off first. Refused with the reason otherwise
    /// (exit 1). The rollout Lease is not read: run it between rollouts.
    Defrag(DefragArgs),
    /// The step the kubelet runs before it starts (a systemd drop-in's ExecStartPre, written by
    /// `--install`): a version of etcd or kube-apiserver left on trial, with no API server
    /// answering the kubelet, goes back to last-known-good before the kubelet reads it (a kubelet
    /// that reaches no API server replaces no static pod) and is recorded as bad, not judged.
    /// Always exits 0 unless --install fails: the kubelet must start.
    KubeletPreStart(KubeletPreStartArgs),
    /// Read a kubeadm control plane's static pod manifests and the files they name, and write one
    /// Helm values file per component chart (etcd, kube-apiserver, kube-controller-manager,
    /// kube-scheduler) so that `helm install` takes the components over.
    Import(ImportArgs),
    /// Print a shell completion script (e.g. `source <(kube-anchor completion bash)`).
    Completion {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write man pages (kube-anchor.1 and one per verb) into a directory.
    #[command(hide = true)]
    Man {
        #[arg(long, default_value = ".")]
        out_dir: PathBuf,
    },
    /// Anchor mode (the DaemonSet container): keep the node in sync, prove the static pod runs
    /// what was written, roll back versions that fail their trial.
    Run(RunArgs),
    /// The DaemonSet's preStop hook: remove the component from the node only on a real
    /// decommission (DaemonSet gone, node no longer selected, node deleted).
    PreStop(PreStopArgs),
    /// Ask a running `run` or `checkpointer` over its --health-socket (the chart's exec probes):
    /// exit 0 on 2xx, 1 otherwise, printing the answer.
    Probe(ProbeArgs),
    /// A drain guard's container, which `run` starts beside a quorum component's static pod:
    /// it does nothing until SIGTERM; its readiness probe, the static pod's own, is what counts.
    #[command(hide = true)]
    Guard,
    /// Guarded checkpointer mode (bootkube-compatible): keep local copies of annotated pods so
    /// the kubelet can start them after a reboot with no API server; retire a copy only once its
    /// replacement runs. `checkpointer sanitize` shows what would be written for a pod.
    Checkpointer(CheckpointerArgs),
}

/// Where on the node kube-anchor works.
#[derive(Debug, Clone, Args)]
pub struct NodeArgs {
    /// Prefix for every host path (`/host` inside a container).
    #[arg(long, env = "KUBE_ANCHOR_HOST_ROOT", default_value = "/")]
    pub host_root: PathBuf,
    /// Host path of the state dir (ledgers); resolved under --host-root like every host path.
    #[arg(long, env = "KUBE_ANCHOR_STATE_DIR", default_value = "/var/lib/kube-anchor")]
    pub state_dir: String,
    /// Host directories files may be written below (the state dir, kube-anchor's own, is not one
    /// of them: config paths there are refused).
    #[arg(
        long = "allowed-root",
        env = "KUBE_ANCHOR_ALLOWED_ROOTS",
        value_delimiter = ',',
        default_value = "/etc/kubernetes"
    )]
    pub allowed_roots: Vec<String>,
    /// How many versions that passed their trial, and as many that failed, the revision
    /// history keeps per component (besides the applied and the last-known-good one, which
    /// always stay); each passed one keeps a snapshot of its files for `rollback --to`.
    #[arg(long, env = "KUBE_ANCHOR_KEEP_REVISIONS", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    pub keep_revisions: u32,
}

impl NodeArgs {
    pub fn engine(&self) -> Result<crate::engine::Engine, crate::engine::EngineError> {
        let mut engine = crate::engine::Engine::new(&self.host_root, &self.state_dir, &self.allowed_roots)?;
        engine.retention = kube_anchor_core::history::Retention {
            succeeded: self.keep_revisions as usize,
            failed: self.keep_revisions as usize,
        };
        Ok(engine)
    }
}

/// The node's container runtime, read over the CRI for what runs of a static pod.
#[derive(Debug, Clone, Args)]
pub struct RuntimeArgs {
    /// The CRI socket on the host (resolved under --host-root), `unix:///path` or a path; `none`
    /// to never ask the runtime. Default: the first of containerd's and CRI-O's usual sockets
    /// that exists.
    #[arg(long, env = "KUBE_ANCHOR_RUNTIME_ENDPOINT", value_parser = runtime_endpoint)]
    pub runtime_endpoint: Option<kube_anchor_k8s::cri::RuntimeEndpoint>,
}

impl RuntimeArgs {
    pub fn endpoint(&self) -> kube_anchor_k8s::cri::RuntimeEndpoint {
        self.runtime_endpoint
            .clone()
            .unwrap_or(kube_anchor_k8s::cri::RuntimeEndpoint::Usual)
    }
}

fn runtime_endpoint(value: &str) -> Result<kube_anchor_k8s::cri::RuntimeEndpoint, String> {
    kube_anchor_k8s::cri::RuntimeEndpoint::parse(Some(value))
}

#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// The Anchor config file.
    #[arg(long, env = "KUBE_ANCHOR_CONFIG")]
    pub config: PathBuf,
    #[command(flatten)]
    pub node: NodeArgs,
    /// Also remove files this component wrote earlier that the config no longer lists (only
    /// when they still hold what was written).
    #[arg(long, env = "KUBE_ANCHOR_PRUNE")]
    pub prune: bool,
    /// Show what would change, as a diff, and change nothing. Only files readable by everyone
    /// (before and after) show their content; for the others the diff says only that it differs.
    #[arg(long)]
    pub dry_run: bool,
    /// Write a manifest that restarts an etcd member even where etcd cannot lose it now (another
    /// voter down or behind), or this node's kube-apiserver while no other serves
    /// (--api-server-margin): the restart can cost etcd its quorum, or the clients their API.
    #[arg(long, env = "KUBE_ANCHOR_FORCE")]
    pub force: bool,
    /// etcd (`spec.etcdMember`): this node's data is known to be gone although its membership
    /// record is here (data wiped, a disk lost): its stale member is removed (only while the
    /// voters left keep a healthy quorum) and it joins again as a learner. Without it such a
    /// node waits: its data dir reading empty may be a disk not mounted yet.
    #[arg(long, conflicts_with = "dry_run")]
    pub rejoin: bool,
    #[command(flatten)]
    pub api_server_margin: ApiServerMarginArgs,
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

/// A one-shot verb's kube-apiserver margin: what `run --api-server-margin` asks before a
/// restart, and with what (the anchor container's environment sets each).
#[derive(Debug, Args)]
pub struct ApiServerMarginArgs {
    /// The component is a kube-apiserver: a manifest that restarts it is written only while
    /// another node's API server serves, asked as `run --api-server-margin` asks (the anchors
    /// listed through the API, each node's --health-url port and path); refused otherwise,
    /// unless --force.
    #[arg(long, env = "KUBE_ANCHOR_API_SERVER_MARGIN", requires = "health_url")]
    pub api_server_margin: bool,
    /// The component's health endpoint, whose port and path each other node is asked at.
    #[arg(long, env = "KUBE_ANCHOR_HEALTH_URL")]
    pub health_url: Option<String>,
    /// CA bundle to verify the other nodes' answers with.
    #[arg(long, env = "KUBE_ANCHOR_HEALTH_CA_FILE")]
    pub health_ca_file: Option<PathBuf>,
    #[command(flatten)]
    pub identity: IdentityArgs,
}

#[derive(Debug, Args)]
pub struct BootstrapArgs {
    /// `helm template` output (multi-document YAML) of the component charts, with the values
    /// `helm install` will get; `-` reads stdin. Repeat for several files.
    #[arg(long = "from", required = true)]
    pub from: Vec<PathBuf>,
    /// This node's name, as its Node object will be named.
    #[arg(long, env = "NODE_NAME")]
    pub node_name: String,
    /// This node's address (what the downward API's status.hostIP will give the anchors).
    #[arg(long, env = "NODE_IP")]
    pub node_ip: String,
    /// A label of the node as the DaemonSets' nodeSelectors will see it (`key=value`, repeatable;
    /// kubernetes.io/hostname is always the node's name).
    #[arg(long = "node-label", default_value = "node-role.kubernetes.io/control-plane=")]
    pub node_labels: Vec<String>,
    /// Components that must be among the node's anchors.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "etcd,kube-apiserver,kube-controller-manager,kube-scheduler"
    )]
    pub components: Vec<String>,
    /// Prefix for every host path.
    #[arg(long, env = "KUBE_ANCHOR_HOST_ROOT", default_value = "/")]
    pub host_root: PathBuf,
    /// How long each component may take to answer its health endpoint (and etcd's member, on a
    /// node joining a running cluster, to be promoted).
    #[arg(long, default_value = "5m", value_parser = duration)]
    pub wait_timeout: std::time::Duration,
    /// The node joins a running cluster (the input: `helm get manifest` of its releases): etcd's
    /// member is added to the cluster as a learner and promoted before the next component, and
    /// never starts a new cluster, even when the values name the node in `initialCluster`.
    #[arg(long)]
    pub join: bool,
    /// Progress as text lines, or as one JSON object per line.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// A kubeadm node, NAME=ROOT: its Kubernetes node name and the directory its / is at (its
    /// /etc/kubernetes/manifests is read). Once per control-plane node: files identical on every
    /// node go to the charts' `credentials`, the others to `perNode.<NAME>.credentials`.
    #[arg(long = "node", value_name = "NAME=ROOT", required_unless_present = "host_root")]
    pub nodes: Vec<String>,
    /// The root of a single kubeadm node, instead of --node (its name is etcd's --name).
    #[arg(long, conflicts_with = "nodes")]
    pub host_root: Option<PathBuf>,
    /// Where the values files go (<chart>.yaml each, mode 0600; the directory is created 0700).
    #[arg(long)]
    pub output_dir: PathBuf,
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

/// Which component: from a config file (its metadata.name) or by name.
#[derive(Debug, Clone, Args)]
pub struct ComponentArgs {
    /// The Anchor config file (only its metadata.name is used).
    #[arg(long, env = "KUBE_ANCHOR_CONFIG", required_unless_present = "component")]
    pub config: Option<PathBuf>,
    /// The component name, instead of --config.
    #[arg(long, conflicts_with = "config")]
    pub component: Option<String>,
}

impl ComponentArgs {
    /// The component a verb acts on, from `--component` or the config's metadata.name.
    pub fn name(&self, roots: &kube_anchor_core::hostpath::AllowedRoots) -> anyhow::Result<String> {
        Ok(match (&self.component, &self.config) {
            (Some(name), _) if kube_anchor_core::config::is_component_name(name) => name.clone(),
            (Some(name), _) => anyhow::bail!("--component {name:?} is not a component name (a lowercase DNS label)"),
            (None, Some(path)) => crate::engine::load_config(path, roots)?.name,
            (None, None) => unreachable!("clap requires one of --config and --component"),
        })
    }
}

#[derive(Debug, Args)]
pub struct RollbackArgs {
    #[command(flatten)]
    pub component: ComponentArgs,
    #[command(flatten)]
    pub node: NodeArgs,
    /// Recorded with the version rolled back, as why it is bad.
    #[arg(long, default_value = "rolled back by hand (kube-anchor rollback)")]
    pub reason: String,
    /// Go back to this version of the revision history (a content hash, or a unique prefix of
    /// its hex digits, as `status` lists them) instead of the last-known-good one; it must have
    /// passed a trial on this node. It becomes the last-known-good version.
    #[arg(long, value_name = "REVISION")]
    pub to: Option<String>,
    /// With --config naming `spec.etcdMember` (the anchor container sets it): go back even where
    /// etcd cannot lose this member now (another voter down or behind); with
    /// --api-server-margin, even while no other node's kube-apiserver serves. The restart can
    /// cost etcd its quorum, or the clients their API.
    #[arg(long, env = "KUBE_ANCHOR_FORCE")]
    pub force: bool,
    #[command(flatten)]
    pub api_server_margin: ApiServerMarginArgs,
}

#[derive(Debug, Args)]
pub struct RetryArgs {
    #[command(flatten)]
    pub component: ComponentArgs,
    #[command(flatten)]
    pub node: NodeArgs,
    /// Only this content hash (default: every version recorded as bad).
    #[arg(long)]
    pub hash: Option<String>,
}

#[derive(Debug, Args)]
pub struct PauseArgs {
    #[command(flatten)]
    pub component: ComponentArgs,
    #[command(flatten)]
    pub node: NodeArgs,
    /// Why (status, /readyz and AnchorStatus show it).
    #[arg(long)]
    pub reason: String,
}

#[derive(Debug, Args)]
pub struct SnapshotArgs {
    #[arg(long, env = "KUBE_ANCHOR_CONFIG")]
    pub config: PathBuf,
    #[command(flatten)]
    pub node: NodeArgs,
    /// Snapshots kept on the node, this one included (default: the schedule's `keep`, else 7).
    #[arg(long)]
    pub keep: Option<usize>,
}

#[derive(Debug, Args)]
pub struct DefragArgs {
    #[arg(long, env = "KUBE_ANCHOR_CONFIG")]
    pub config: PathBuf,
    #[command(flatten)]
    pub node: NodeArgs,
}

#[derive(Debug, Args)]
pub struct KubeletPreStartArgs {
    #[command(flatten)]
    pub node: NodeArgs,
    /// The kubelet's kubeconfig (a path on the node): a version on trial stays where an API
    /// server answers it (the kubelet will replace static pods as usual).
    #[arg(
        long,
        env = "KUBE_ANCHOR_KUBELET_KUBECONFIG",
        default_value = "/etc/kubernetes/kubelet.conf"
    )]
    pub kubelet_kubeconfig: PathBuf,
    /// Instead of the step: write this binary to <state-dir>/bin/kube-anchor (the anchors keep
    /// it current from then on) and the kubelet's drop-in
    /// /etc/systemd/system/kubelet.service.d/05-kube-anchor-pre-start.conf that runs it with
    /// these --state-dir, --allowed-root and --kubelet-kubeconfig. systemd reads it at the next
    /// boot, or after `systemctl daemon-reload`.
    #[arg(long)]
    pub install: bool,
}

#[derive(Debug, Args)]
pub struct ResumeArgs {
    #[command(flatten)]
    pub component: ComponentArgs,
    #[command(flatten)]
    pub node: NodeArgs,
}

#[derive(Debug, Args)]
pub struct RemoveArgs {
    #[command(flatten)]
    pub component: ComponentArgs,
    #[command(flatten)]
    pub node: NodeArgs,
    /// With --component: succeed when nothing is recorded for it here (by default a name with
    /// no ledger on this node is refused, as a likely typo).
    #[arg(long)]
    pub ignore_not_found: bool,
    /// An etcd member (a membership record on the node): remove the files and leave the member
    /// in the cluster, which then counts it as down, instead of making it leave first. Refused
    /// where etcd cannot lose it now, unless --force.
    #[arg(long)]
    pub keep_member: bool,
    /// Remove the files although an anchor of the component runs on this node (it writes them
    /// back at its next sync); with --keep-member, also where etcd cannot lose the member now
    /// (this can cost etcd its quorum).
    #[arg(long)]
    pub force: bool,
    /// An etcd member: how long to wait for etcd to stop once its manifest is gone before its
    /// data dir is saved and removed (kept if it still runs then).
    #[arg(long, default_value = "60s", value_parser = duration)]
    pub stop_timeout: std::time::Duration,
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

fn duration(raw: &str) -> Result<std::time::Duration, humantime::DurationError> {
    humantime::parse_duration(raw)
}

/// Where a daemon serves /healthz, /readyz and /metrics.
#[derive(Debug, Clone, Args)]
pub struct EndpointArgs {
    /// Unix socket for the probes (`kube-anchor probe`), in the pod's own emptyDir so that two
    /// daemons on one host network never share it.
    #[arg(long, env = "KUBE_ANCHOR_HEALTH_SOCKET")]
    pub health_socket: Option<PathBuf>,
    /// Also serve on this TCP address (e.g. 127.0.0.1:9090, for metrics scraping); a port
    /// another process holds is retried in the background, never fatal.
    #[arg(long, env = "KUBE_ANCHOR_LISTEN")]
    pub listen: Option<std::net::SocketAddr>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProbeEndpoint {
    Healthz,
    Readyz,
}

#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// Which endpoint to ask.
    #[arg(value_enum)]
    pub endpoint: ProbeEndpoint,
    /// The daemon's --health-socket.
    #[arg(long, env = "KUBE_ANCHOR_HEALTH_SOCKET")]
    pub socket: PathBuf,
    /// Give up (and fail) after this long.
    #[arg(long, default_value = "5s", value_parser = duration)]
    pub timeout: std::time::Duration,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The Anchor config file (from a mounted ConfigMap).
    #[arg(long, env = "KUBE_ANCHOR_CONFIG")]
    pub config: PathBuf,
    #[command(flatten)]
    pub node: NodeArgs,
    #[command(flatten)]
    pub identity: IdentityArgs,
    #[command(flatten)]
    pub endpoints: EndpointArgs,
    #[command(flatten)]
    pub runtime: RuntimeArgs,
    /// Apply only inputs whose revision markers hold these hashes (`PATH=HASH,…`; the chart
    /// passes its pod template's `kube-anchor.io/expect-inputs` annotation through the downward
    /// API). Inputs refreshed under a running pod are then left for its replacement, so a new
    /// version reaches nodes only as fast as the DaemonSet rollout replaces anchor pods.
    #[arg(long, env = "KUBE_ANCHOR_EXPECT_INPUTS")]
    pub expect_inputs: Option<kube_anchor_core::pinned::PinnedInputs>,
    /// Components this one needs that kube-anchor may run on the same node, each with its
    /// health URL (`etcd=http://127.0.0.1:2381/health`, or the name alone). While one of them
    /// does not run or fails its health URL, this component's failures are not held against its
    /// version on trial, and its restarts meanwhile are not counted; and while this anchor runs
    /// on the node, their anchors' pre-stop hooks keep them there (the others read it from this
    /// pod's spec).
    #[arg(long, env = kube_anchor_core::decommission::DEPENDS_ON_ENV, value_delimiter = ',')]
    pub depends_on: Vec<kube_anchor_core::decommission::Dependency>,
    /// The component's clients on this node, as a JSON list: `[{"name", "url", "caFile",
    /// "certFile", "keyFile", "kubeconfig", "anchorCredentials"}]` (files are paths on the
    /// node). Each is asked at every evaluation as that client asks; a version on trial that
    /// refuses one the version before served fails its trial.
    #[arg(long, env = "KUBE_ANCHOR_CLIENT_CHECKS", default_value = "")]
    pub client_checks: kube_anchor_k8s::client_check::ClientChecks,
    /// Full resync as a backstop to change notification.
    #[arg(long, env = "KUBE_ANCHOR_RESYNC_PERIOD", default_value = "1m", value_parser = duration)]
    pub resync_period: std::time::Duration,
    /// How long a newly written version must run converged before it becomes last-known-good.
    #[arg(long, env = "KUBE_ANCHOR_TRIAL_PERIOD", default_value = "5m", value_parser = duration)]
    pub trial_period: std::time::Duration,
    /// A certificate of the component's credentials expiring sooner than this gets a Warning
    /// Event `CertificateExpiresSoon` (once per certificate); every expiry is also the metric
    /// kube_anchor_certificate_expiry_timestamp_seconds.
    #[arg(long, env = "KUBE_ANCHOR_CERTIFICATE_EXPIRY_WARNING", default_value = "30d", value_parser = duration)]
    pub certificate_expiry_warning: std::time::Duration,
    /// Container restarts of the new static pod that count as a crash loop during its trial.
    #[arg(long, env = "KUBE_ANCHOR_CRASH_LOOP_THRESHOLD", default_value_t = 3)]
    pub crash_loop_threshold: u32,
    /// The component's health endpoint (e.g. https://127.0.0.1:6443/readyz); 2xx counts as healthy.
    #[arg(long, env = "KUBE_ANCHOR_HEALTH_URL")]
    pub health_url: Option<String>,
    /// CA bundle to verify --health-url; without it the certificate is not verified.
    #[arg(long, env = "KUBE_ANCHOR_HEALTH_CA_FILE")]
    pub health_ca_file: Option<PathBuf>,
    /// How often --health-url is checked once the version has converged.
    #[arg(long, env = "KUBE_ANCHOR_HEALTH_INTERVAL", default_value = "10s", value_parser = duration)]
    pub health_interval: std::time::Duration,
    /// The component is a kube-apiserver: a new version restarts it only while another node's
    /// API server serves (its `/readyz` at --health-url's port and path on that node's address,
    /// verified with --health-ca-file), so that clients always have one. The nodes are those
    /// this component's anchors run on; with none but this one, it restarts as before.
    #[arg(long, env = "KUBE_ANCHOR_API_SERVER_MARGIN", requires = "health_url")]
    pub api_server_margin: bool,
    /// A new version of kube-apiserver, kube-controller-manager or kube-scheduler (by its
    /// image tag) takes its rollout turn only where the version skew policy holds beside the
    /// other components this node's anchors wrote, as written and as last-known-good; otherwise
    /// it waits and says why. `false` turns the gate off.
    #[arg(long, env = "KUBE_ANCHOR_SKEW_GATE", default_value_t = true, action = clap::ArgAction::Set)]
    pub skew_gate: bool,
    /// The PodDisruptionBudget over this component's drain guards (the chart's). With it the
    /// anchor keeps a guard pod on its node whose readiness probe is the static pod's, brought
    /// back after a drain only once the node is uncordoned, and keeps the budget's minAvailable
    /// one below the nodes the anchor's DaemonSet selects: an eviction-based drain of a second
    /// node waits until the first is back. Empty: no guard.
    #[arg(long, env = "KUBE_ANCHOR_DRAIN_GUARD", requires = "guard_image")]
    pub drain_guard: Option<String>,
    /// The guards' image: the anchor's own (its binary runs `kube-anchor guard`).
    #[arg(long, env = "KUBE_ANCHOR_GUARD_IMAGE")]
    pub guard_image: Option<String>,
    /// Also remove files this component wrote earlier that the config no longer lists.
    #[arg(long, env = "KUBE_ANCHOR_PRUNE")]
    pub prune: bool,
}

#[derive(Debug, Args)]
pub struct PreStopArgs {
    #[command(flatten)]
    pub component: ComponentArgs,
    #[command(flatten)]
    pub node: NodeArgs,
    #[command(flatten)]
    pub identity: IdentityArgs,
    /// guarded: remove only on evidence of a decommission; never; always.
    #[arg(long, env = "KUBE_ANCHOR_CLEANUP", value_enum, default_value_t = Cleanup::Guarded)]
    pub cleanup: Cleanup,
    /// The whole hook finishes within this, whatever happens (keep it below the pod's
    /// terminationGracePeriodSeconds).
    #[arg(long, env = "KUBE_ANCHOR_PRESTOP_TIMEOUT", default_value = "30s", value_parser = duration)]
    pub timeout: std::time::Duration,
    /// A command (run with `sh -c`) for component-specific steps before any file is removed,
    /// only on a decommission (e.g. etcd leaving its cluster). A failure keeps every file.
    #[arg(long, env = "KUBE_ANCHOR_BEFORE_REMOVE")]
    pub before_remove: Option<String>,
    /// The component's health endpoint: once it stops answering the credentials may go (when
    /// the container runtime cannot say so itself).
    #[arg(long, env = "KUBE_ANCHOR_HEALTH_URL")]
    pub health_url: Option<String>,
    #[arg(long, env = "KUBE_ANCHOR_HEALTH_CA_FILE")]
    pub health_ca_file: Option<PathBuf>,
    #[command(flatten)]
    pub runtime: RuntimeArgs,
    /// Refuse to remove while too few other Ready copies would remain, unless the Node or the
    /// DaemonSet is annotated `kube-anchor.io/decommission: "true"`. on: a quorum of them;
    /// last-copy: one; auto: a quorum for etcd and kube-apiserver, one for kube-scheduler and
    /// kube-controller-manager, none needed for anything else.
    #[arg(long, env = "KUBE_ANCHOR_QUORUM_GUARD", value_enum, default_value_t = QuorumGuardFlag::Auto)]
    pub quorum_guard: QuorumGuardFlag,
    /// Evidence of a decommission must hold twice, this far apart.
    #[arg(long, env = "KUBE_ANCHOR_PRESTOP_CONFIRM_INTERVAL", default_value = "2s", value_parser = duration)]
    pub confirm_interval: std::time::Duration,
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct CheckpointerArgs {
    #[command(subcommand)]
    pub action: Option<CheckpointerAction>,
    #[command(flatten)]
    pub run: CheckpointerRunArgs,
}

#[derive(Debug, Subcommand)]
pub enum CheckpointerAction {
    /// Print the checkpoint manifest a pod (YAML or JSON, from FILE or stdin) would become,
    /// touching nothing; the files its secret and configmap volumes become go to stderr.
    Sanitize {
        /// The node the checkpoint would run on (names the mirror pod in the summary).
        #[arg(long)]
        node: Option<String>,
        /// The pod; `-` or nothing reads stdin.
        file: Option<PathBuf>,
    },
    /// The checkpointer DaemonSet's preStop hook: on a proved decommission of the checkpointer
    /// on this node (its DaemonSet gone, the node deselected or deleted), mark it decommissioned
    /// and wait while the running copy retires what it manages, its own checkpoint last. Exits
    /// 0 when everything is gone or nothing is decommissioned, 1 when checkpoints had to be left
    /// (each named in the log and in a Warning Event `CheckpointsLeft`).
    PreStop(Box<CheckpointerPreStopArgs>),
}

#[derive(Debug, Args)]
pub struct CheckpointerPreStopArgs {
    #[command(flatten)]
    pub run: CheckpointerRunArgs,
    /// guarded: only on evidence of a decommission; never; always.
    #[arg(long, env = "KUBE_ANCHOR_CLEANUP", value_enum, default_value_t = Cleanup::Guarded)]
    pub cleanup: Cleanup,
    /// The whole hook finishes within this (keep it below terminationGracePeriodSeconds).
    #[arg(long, env = "KUBE_ANCHOR_PRESTOP_TIMEOUT", default_value = "30s", value_parser = duration)]
    pub timeout: std::time::Duration,
    /// Evidence of a decommission must hold twice, this far apart.
    #[arg(long, env = "KUBE_ANCHOR_PRESTOP_CONFIRM_INTERVAL", default_value = "2s", value_parser = duration)]
    pub confirm_interval: std::time::Duration,
}

#[derive(Debug, Args)]
pub struct CheckpointerRunArgs {
    #[command(flatten)]
    pub node: NodeArgs,
    #[command(flatten)]
    pub identity: IdentityArgs,
    #[command(flatten)]
    pub endpoints: EndpointArgs,
    #[command(flatten)]
    pub runtime: RuntimeArgs,
    /// Inactive checkpoints (kept for the next boot).
    #[arg(
        long,
        env = "KUBE_ANCHOR_INACTIVE_DIR",
        default_value = "/etc/kubernetes/inactive-manifests"
    )]
    pub inactive_dir: String,
    /// The kubelet's static pod directory (active checkpoints).
    #[arg(long, env = "KUBE_ANCHOR_MANIFEST_DIR", default_value = "/etc/kubernetes/manifests")]
    pub manifest_dir: String,
    #[arg(
        long,
        env = "KUBE_ANCHOR_SECRETS_DIR",
        default_value = "/etc/kubernetes/checkpoint-secrets"
    )]
    pub secrets_dir: String,
    #[arg(
        long,
        env = "KUBE_ANCHOR_CONFIGMAPS_DIR",
        default_value = "/etc/kubernetes/checkpoint-configmaps"
    )]
    pub configmaps_dir: String,
    /// The kubelet's API, for the pods that really run here (`/pods`).
    #[arg(long, env = "KUBE_ANCHOR_KUBELET_URL", default_value = "https://127.0.0.1:10250")]
    pub kubelet_url: String,
    /// CA bundle of the kubelet's serving certificate; without it the certificate is not verified.
    #[arg(long, env = "KUBE_ANCHOR_KUBELET_CA_FILE")]
    pub kubelet_ca_file: Option<PathBuf>,
    /// A parent must be Running and Ready this long before it is checkpointed.
    #[arg(long, env = "KUBE_ANCHOR_READY_WINDOW", default_value = "30s", value_parser = duration)]
    pub ready_window: std::time::Duration,
    /// A replacement must run Ready this long before older checkpoints are retired.
    #[arg(long, env = "KUBE_ANCHOR_STABLE_WINDOW", default_value = "2m", value_parser = duration)]
    pub stable_window: std::time::Duration,
    /// How long a hostNetwork replacement gets to become Ready after its checkpoint steps aside.
    #[arg(long, env = "KUBE_ANCHOR_HANDOFF_TIMEOUT", default_value = "1m", value_parser = duration)]
    pub handoff_timeout: std::time::Duration,
    /// The API must say twice, this far apart, that an owner no longer wants this node.
    #[arg(long, env = "KUBE_ANCHOR_RETIRE_GRACE", default_value = "5m", value_parser = duration)]
    pub retire_grace: std::time::Duration,
    /// How often the node is looked at.
    #[arg(long, env = "KUBE_ANCHOR_INTERVAL", default_value = "5s", value_parser = duration)]
    pub interval: std::time::Duration,
    /// Set only in the checkpoint copy (through the downward API, from its `checkpoint-of`
    /// annotation, which only the copy has): the parent it was made from. That copy stands by
    /// while its DaemonSet copy runs.
    #[arg(long, env = "KUBE_ANCHOR_CHECKPOINT_OF")]
    pub checkpoint_of: Option<String>,
    /// Changes at every boot (what has run on the node since it booted).
    #[arg(
        long,
        env = "KUBE_ANCHOR_BOOT_ID_FILE",
        default_value = "/proc/sys/kernel/random/boot_id"
    )]
    pub boot_id_file: PathBuf,
}

/// Who and where this anchor is (downward API), and how it reaches the API.
#[derive(Debug, Clone, Args)]
pub struct IdentityArgs {
    /// The node's name (for the mirror pod `<pod>-<node>`).
    #[arg(long, env = "NODE_NAME")]
    pub node_name: Option<String>,
    /// This anchor pod's name (Events are reported on it).
    #[arg(long, env = "POD_NAME")]
    pub pod_name: Option<String>,
    #[arg(long, env = "POD_NAMESPACE")]
    pub pod_namespace: Option<String>,
    /// Kubeconfig; without it the in-cluster service account is used when present, else no API.
    /// An empty value (`KUBECONFIG=`) is no kubeconfig, as for kubectl.
    #[arg(long = "kubeconfig", id = "kubeconfig", env = "KUBECONFIG", value_parser = maybe_path)]
    kubeconfig_arg: Option<PathBuf>,
    /// Further API servers (`https://host:port`, comma-separated in the env var), tried in turn
    /// when the kubeconfig's or in-cluster address fails, with the same credentials: an anchor
    /// whose API path is its own node's API server must still see the API when that server is
    /// the one a bad push broke.
    #[arg(long = "api-server", env = "KUBE_ANCHOR_API_SERVERS", value_delimiter = ',', value_parser = api_server)]
    pub api_servers: Vec<http::Uri>,
}

/// A path that may be given empty: parsed as the empty path, which means none.
fn maybe_path(raw: &str) -> Result<PathBuf, std::convert::Infallible> {
    Ok(PathBuf::from(raw))
}

impl IdentityArgs {
    /// The kubeconfig, unless none or an empty one was given.
    pub fn kubeconfig(&self) -> Option<&std::path::Path> {
        self.kubeconfig_arg.as_deref().filter(|p| !p.as_os_str().is_empty())
    }

    /// This pod, as the downward API names it (all three are needed to look anything up).
    pub fn this_pod(&self) -> Option<kube_anchor_core::decommission::ThisPod> {
        match (&self.pod_name, &self.pod_namespace, &self.node_name) {
            (Some(name), Some(namespace), Some(node)) => Some(kube_anchor_core::decommission::ThisPod {
                namespace: namespace.clone(),
                name: name.clone(),
                node: node.clone(),
            }),
            _ => None,
        }
    }
}

fn api_server(raw: &str) -> Result<http::Uri, String> {
    let uri: http::Uri = raw.trim().parse().map_err(|e| format!("{raw:?}: {e}"))?;
    match (uri.scheme_str(), uri.host()) {
        (Some("https" | "http"), Some(_)) if uri.path() == "/" || uri.path().is_empty() => Ok(uri),
        _ => Err(format!("{raw:?}: expected https://host:port with no path")),
    }
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    #[arg(long, env = "KUBE_ANCHOR_CONFIG")]
    pub config: PathBuf,
    #[command(flatten)]
    pub node: NodeArgs,
    #[command(flatten)]
    pub runtime: RuntimeArgs,
    /// The node's name, to find its static pod in the runtime (`<name>-<node>`); without it any
    /// static pod of the component's name that kube-anchor wrote matches.
    #[arg(long, env = "NODE_NAME")]
    pub node_name: Option<String>,
    /// Read every scheduled etcd snapshot on the node whole and check its integrity hash (by
    /// default only the newest that checks out is read; the older ones are compared with their
    /// records' sizes).
    #[arg(long)]
    pub verify_snapshots: bool,
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

#[derive(Debug, Args)]
pub struct CheckExpirationArgs {
    #[command(flatten)]
    pub node: NodeArgs,
    /// A certificate expiring sooner than this counts as expiring (exit 3).
    #[arg(long, default_value = "30d", value_parser = humantime::parse_duration)]
    pub warn_within: std::time::Duration,
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

#[derive(Debug, Args)]
pub struct FleetArgs {
    /// Kubeconfig, as for kubectl; without it the in-cluster service account.
    #[arg(long = "kubeconfig", env = "KUBECONFIG", value_parser = maybe_path)]
    pub kubeconfig: Option<PathBuf>,
    /// The namespace of the anchors (where each component's rollout Lease is).
    #[arg(long, short = 'n', default_value = "kube-system")]
    pub namespace: String,
    /// Only the AnchorStatus objects this label selector picks, as for kubectl (their labels:
    /// kube-anchor.io/node, kube-anchor.io/component).
    #[arg(long, short = 'l')]
    pub selector: Option<String>,
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn api_servers_are_urls_without_a_path() {
        assert!(api_server("https://10.0.0.1:6443").is_ok());
        assert!(api_server(" https://cp-2:6443/ ").is_ok());
        for bad in ["10.0.0.1:6443", "https://10.0.0.1:6443/api", "ftp://x:1", "https://"] {
            let err = api_server(bad).unwrap_err();
            assert!(err.contains(bad.trim()), "{bad}: {err}");
        }
    }

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn flags_follow_the_verb() {
        let cli = Cli::try_parse_from([
            "kube-anchor",
            "apply",
            "--config",
            "a.yaml",
            "--host-root",
            "./node",
            "--log-format",
            "json",
        ])
        .unwrap();
        assert_eq!(cli.log_format, LogFormat::Json);
        let Command::Apply(a) = cli.command else { panic!() };
        assert_eq!(a.node.host_root, PathBuf::from("./node"));
        assert_eq!(a.node.allowed_roots, ["/etc/kubernetes"]);
        let cli = Cli::try_parse_from([
            "kube-anchor",
            "remove",
            "--component",
            "etcd",
            "--allowed-root",
            "/etc/kubernetes,/etc/etcd",
        ])
        .unwrap();
        let Command::Remove(r) = cli.command else { panic!() };
        assert_eq!(r.node.allowed_roots, ["/etc/kubernetes", "/etc/etcd"]);
        assert!(Cli::try_parse_from(["kube-anchor", "remove"]).is_err());
    }
}

/// `--cleanup`: the flag's face of [`decommission::CleanupMode`] (the decision itself knows
/// nothing of clap).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Cleanup {
    /// Remove only on positive evidence of a decommission.
    Guarded,
    /// Never remove (files stay until removed by hand).
    Never,
    /// Remove on every termination (the original anchor's behaviour; for tests and teardown).
    Always,
}

impl From<Cleanup> for decommission::CleanupMode {
    fn from(flag: Cleanup) -> Self {
        match flag {
            Cleanup::Guarded => Self::Guarded,
            Cleanup::Never => Self::Never,
            Cleanup::Always => Self::Always,
        }
    }
}

/// `--quorum-guard`: the flag's face of [`decommission::QuorumGuard`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum QuorumGuardFlag {
    /// A quorum for `etcd` and `kube-apiserver`, the last copy for `kube-scheduler` and
    /// `kube-controller-manager`, off otherwise.
    Auto,
    On,
    LastCopy,
    Off,
}

impl From<QuorumGuardFlag> for decommission::QuorumGuard {
    fn from(flag: QuorumGuardFlag) -> Self {
        match flag {
            QuorumGuardFlag::Auto => Self::Auto,
            QuorumGuardFlag::On => Self::On,
            QuorumGuardFlag::LastCopy => Self::LastCopy,
            QuorumGuardFlag::Off => Self::Off,
        }
    }
}
