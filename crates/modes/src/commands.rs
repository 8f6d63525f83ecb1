//! The CLI verbs: parse flags, call the engine, print results (stdout) and logs (stderr).
//!
//! Exit codes: 0 success; 1 error (nothing on the node changed unless the message says so);
//! 2 bad command line; 3 `status` found the node out of sync.

use crate::output::{out, outln};
use std::process::ExitCode;

use anyhow::Context;
use clap::{CommandFactory, Parser};
use serde_json::json;

use crate::cli::{
    ApplyArgs, BootstrapArgs, CheckExpirationArgs, Cli, Command, ComponentArgs, DefragArgs, ImportArgs, NodeArgs,
    OutputFormat, PauseArgs, ProbeArgs, ProbeEndpoint, RemoveArgs, ResumeArgs, RetryArgs, RollbackArgs, SnapshotArgs,
    StatusArgs,
};
use crate::engine::{ApplyReport, Engine, Inputs, Preview, PreviewAction, PreviewChange, RemoveReport, StatusReport};
use crate::logging;
use kube_anchor_core::history::Outcome;
use kube_anchor_core::import::ImportPlan;
use kube_anchor_core::margin::{Margin, MarginFacts};
use kube_anchor_core::plan::Notice;
use kube_anchor_core::runtime::{ContainerState, RuntimeView};
use kube_anchor_host::hostfs::SetAside;
use kube_anchor_k8s::cri::{RuntimeObserver, StaticPodRef};

use crate::output::{EXIT_ERROR, EXIT_OUT_OF_SYNC};

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    logging::init(
        cli.log_format,
        logging::default_level(cli.log_format, cli.verbose, cli.command.is_daemon()),
    );
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", error_chain(&e));
            if e.is::<crate::shutdown::Aborted>() {
                ExitCode::from(crate::shutdown::ABORT_EXIT_CODE)
            } else {
                ExitCode::from(EXIT_ERROR)
            }
        }
    }
}

use crate::logging::error_chain;

/// The runtime of `run`: one thread. The daemon is one loop whose file work is short and
/// synchronous; the HTTP endpoints and the API watch wait at most one sync. No worker threads
/// (each with its stack and, in glibc, its own malloc arena).
fn daemon_runtime() -> std::io::Result<tokio::runtime::Runtime> {
    kube_anchor_host::memory::limit_malloc_arenas();
    tokio::runtime::Builder::new_current_thread().enable_all().build()
}

pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Apply(args) => apply(args),
        Command::Bootstrap(args) => bootstrap(args),
        Command::Remove(args) => remove(args),
        Command::Import(args) => import(args),
        Command::Status(args) => status(args),
        Command::CheckExpiration(args) => check_expiration(args),
        Command::Fleet(args) => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(crate::fleet::fleet(args)),
        Command::Checkpointer(args) => tokio::runtime::Runtime::new()?.block_on(crate::checkpointer::main(args)),
        Command::PreStop(args) => tokio::runtime::Runtime::new()?.block_on(crate::prestop::run(args)),
        Command::Probe(args) => probe(args),
        Command::Guard => guard(),
        Command::Completion { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "kube-anchor", &mut std::io::stdout());
            Ok(ExitCode::SUCCESS)
        }
        Command::Man { out_dir } => {
            write_man_pages(&out_dir)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Retry(args) => retry(args),
        Command::Pause(args) => pause(args),
        Command::Resume(args) => resume(args),
        Command::Snapshot(args) => snapshot(args),
        Command::Defrag(args) => defrag(args),
        Command::KubeletPreStart(args) => crate::kubelet_pre_start::kubelet_pre_start(args),
        Command::Rollback(args) => rollback(args),
        Command::Run(args) => {
            daemon_runtime()?.block_on(crate::anchor::run(args))?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// kube-anchor.1 and kube-anchor-<verb>.1 for every visible verb.
fn write_man_pages(dir: &std::path::Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("{}: cannot create", dir.display()))?;
    let command = Cli::command();
    let mut pages = vec![("kube-anchor".to_owned(), command.clone())];
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        pages.push((format!("kube-anchor-{}", sub.get_name()), sub.clone()));
    }
    for (name, page) in pages {
        let path = dir.join(format!("{name}.1"));
        let mut out = Vec::new();
        clap_mangen::Man::new(page)
            .title(name.to_uppercase())
            .render(&mut out)?;
        std::fs::write(&path, out).with_context(|| format!("{}: cannot write", path.display()))?;
        outln!("{}", path.display());
    }
    Ok(())
}

/// Waits for SIGTERM or SIGINT and exits 0: a guard pod's kubelet stops it at once.
fn guard() -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        anyhow::Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}

fn probe(args: ProbeArgs) -> anyhow::Result<ExitCode> {
    let path = match args.endpoint {
        ProbeEndpoint::Healthz => "/healthz",
        ProbeEndpoint::Readyz => "/readyz",
    };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let answer = runtime
        .block_on(crate::server::probe(&args.socket, path, args.timeout))
        .with_context(|| format!("{}: GET {path}", args.socket.display()))?;
    out!("{}", answer.body);
    Ok(if (200..300).contains(&answer.status) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_ERROR)
    })
}

fn import(args: ImportArgs) -> anyhow::Result<ExitCode> {
    let nodes = match &args.host_root {
        Some(root) => vec![(None, root.clone())],
        None => args
            .nodes
            .iter()
            .map(|raw| crate::import::parse_node_arg(raw).map(|(name, root)| (Some(name), root)))
            .collect::<Result<Vec<_>, _>>()?,
    };
    let (plan, written) = crate::import::import(&nodes, &args.output_dir)?;
    print_import(&plan, &written, args.output);
    // The cluster's signing keys leave the node for Secrets: whoever reads those reads the CA.
    let mut signing_keys: Vec<&str> = plan
        .components
        .iter()
        .flat_map(|c| &c.files)
        .map(|f| f.name.as_str())
        .filter(|n| SIGNING_KEYS.contains(n))
        .collect();
    signing_keys.sort_unstable();
    signing_keys.dedup();
    if !signing_keys.is_empty() {
        tracing::warn!(
            keys = %signing_keys.join(", "),
            "the values hold the cluster's signing keys ({}); installed, they live in Kubernetes Secrets: \
             enable encryption at rest for Secrets and restrict who may read Secrets in the release \
             namespace before installing",
            signing_keys.join(", ")
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Credential names (as import names them) of the keys that sign the cluster's identities.
const SIGNING_KEYS: &[&str] = &["ca.key", "sa.key", "etcd-ca.key", "front-proxy-ca.key"];

/// Names, paths and flag names only: the values files hold the secrets, stdout never does.
fn print_import(plan: &ImportPlan, written: &[std::path::PathBuf], format: OutputFormat) {
    match format {
        OutputFormat::Json => {
            let components: Vec<serde_json::Value> = plan
                .components
                .iter()
                .zip(written)
                .map(|(c, path)| {
                    let mut v = serde_json::to_value(c).expect("serializes");
                    v["valuesFile"] = json!(path);
                    v
                })
                .collect();
            outln!("{}", json!({"nodes": plan.nodes, "components": components}));
        }
        OutputFormat::Text => {
            for n in &plan.nodes {
                outln!("node {}: ${{NODE_NAME}}={}, ${{NODE_IP}}={}", n.name, n.name, n.ip);
            }
            for (c, path) in plan.components.iter().zip(written) {
                let shared = c.files.iter().filter(|f| f.shared).count();
                outln!(
                    "{}: {} (image {}, version {}; {} flag(s) in extraArgs, {} omitted; {} file(s): {} shared, {} per node)",
                    c.component,
                    path.display(),
                    c.image,
                    c.version,
                    c.extra_args.len(),
                    c.omit_args.len(),
                    c.files.len(),
                    shared,
                    c.files.len() - shared
                );
                for f in &c.files {
                    let place = if f.shared { "credentials" } else { "perNode" };
                    outln!("  file       {} {} ({place}.{})", f.mode, f.path, f.name);
                }
                if !c.omit_args.is_empty() {
                    outln!("  omitted    --{}", c.omit_args.join(", --"));
                }
                for v in &c.extra_volumes {
                    let ro = if v.read_only { ", read-only" } else { "" };
                    outln!(
                        "  volume     {} at {} ({}{ro}; component.extraVolumes)",
                        v.host_path,
                        v.mount_path,
                        v.path_type
                    );
                }
            }
        }
    }
}

fn engine(node: &NodeArgs) -> anyhow::Result<Engine> {
    Ok(node.engine()?)
}

fn apply(args: ApplyArgs) -> anyhow::Result<ExitCode> {
    let engine = engine(&args.node)?;
    let inputs = Inputs::load(&args.config, engine.roots())?;
    let record = join_etcd(&engine, &inputs, args.rejoin)?;
    let desired = inputs.desired(&inputs.variables(record.as_ref()))?;
    engine
        .check_credentials(&desired)
        .with_context(|| format!("applying {}", desired.component))?;
    if args.dry_run {
        let preview = engine.preview(&desired, args.prune)?;
        print_preview(&preview, args.output);
        return Ok(ExitCode::SUCCESS);
    }
    before_etcd_restart(&engine, &inputs, &desired, args.prune, args.force, args.output)?;
    before_skew_break(&engine, &desired, args.prune, args.force, args.output)?;
    before_api_server_restart(
        "apply",
        &engine,
        &desired,
        args.prune,
        args.force,
        &args.api_server_margin,
        args.output,
    )?;
    // An explicit apply takes a decommissioned component back.
    if engine.recommission(&desired.component, None)? {
        tracing::info!(component = %desired.component, "lifted the decommission marker");
    }
    let report = engine
        .apply(&desired, args.prune)
        .with_context(|| format!("applying {}", desired.component))?;
    log_notices(&report.notices, report.set_aside.as_ref());
    tracing::info!(component = %report.component, content_hash = %report.content_hash, written = report.written.len(), removed = report.removed.len(), unchanged = report.unchanged.len(), "applied");
    print_apply(&report, args.output);
    Ok(ExitCode::SUCCESS)
}

fn bootstrap(args: BootstrapArgs) -> anyhow::Result<ExitCode> {
    use crate::bootstrap_node::Progress;
    let mut labels = Vec::new();
    for label in &args.node_labels {
        let (k, v) = label
            .split_once('=')
            .with_context(|| format!("--node-label {label:?}: want key=value"))?;
        labels.push((k.to_owned(), v.to_owned()));
    }
    let request = crate::bootstrap_node::Request {
        sources: args.from.clone(),
        node: kube_anchor_core::bootstrap::ThisNode::new(&args.node_name, &args.node_ip, labels),
        required: args.components.clone(),
        host_root: args.host_root.clone(),
        wait_timeout: args.wait_timeout,
        join: args.join,
    };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(crate::bootstrap_node::bootstrap(
        &request,
        |progress, applied| match args.output {
            OutputFormat::Json => {
                let mut event = serde_json::to_value(progress).expect("serializable");
                if let (Some(r), Some(map)) = (applied, event.as_object_mut()) {
                    map.insert("apply".into(), apply_json(r));
                }
                outln!("{event}");
            }
            OutputFormat::Text => match (progress, applied) {
                (_, Some(r)) => print_apply(r, OutputFormat::Text),
                (Progress::Checked { node, components }, _) => {
                    outln!(
                        "{node}: inputs checked for {}; nothing written yet",
                        components.join(", ")
                    )
                }
                (
                    Progress::Waiting {
                        component,
                        url,
                        timeout_seconds,
                    },
                    _,
                ) => outln!(
                    "{component}: waiting for {url} (up to {})",
                    humantime::format_duration(std::time::Duration::from_secs_f64(*timeout_seconds))
                ),
                (
                    Progress::Healthy {
                        component,
                        after_seconds,
                    },
                    _,
                ) => {
                    outln!("{component}: healthy after {after_seconds:.1}s")
                }
                (
                    Progress::Promoting {
                        component,
                        timeout_seconds,
                    },
                    _,
                ) => outln!(
                    "{component}: added as a learner; waiting for its promotion (up to {})",
                    humantime::format_duration(std::time::Duration::from_secs_f64(*timeout_seconds))
                ),
                (
                    Progress::Promoted {
                        component,
                        after_seconds,
                    },
                    _,
                ) => {
                    outln!("{component}: this node's learner promoted after {after_seconds:.1}s")
                }
                (Progress::NotWaited { component }, _) => {
                    outln!("{component}: no health URL; not waited for")
                }
                (Progress::Done { node, seconds }, _) => outln!("{node}: bootstrapped in {seconds:.1}s"),
                (Progress::Applied { .. }, None) => {}
            },
        },
    ))?;
    Ok(ExitCode::SUCCESS)
}

/// `spec.etcdMember`: one join step before anything is written (the node must be a member
/// first); the record gives the manifest its initial-cluster pair.
fn join_etcd(
    engine: &Engine,
    inputs: &Inputs,
    rejoin_consented: bool,
) -> anyhow::Result<Option<kube_anchor_core::membership::Record>> {
    if inputs.anchor.etcd_member.is_none() {
        return Ok(None);
    }
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(crate::etcd_member::join_before_write(engine, inputs, rejoin_consented))
}

/// `spec.etcdMember`: a manifest about to replace the running one restarts etcd. It is written
/// only where etcd can lose this member ([`kube_anchor_core::membership::restart_margin`]),
/// unless `force`; then a member that leads hands leadership to a caught-up voter first, so the
/// cluster does not wait an election timeout without a leader (the hand-off never stops it).
fn before_etcd_restart(
    engine: &Engine,
    inputs: &Inputs,
    desired: &kube_anchor_core::desired::Desired,
    prune: bool,
    force: bool,
    output: OutputFormat,
) -> anyhow::Result<()> {
    let Some(member) = &inputs.anchor.etcd_member else {
        return Ok(());
    };
    if !restarts_static_pod(engine, desired, prune)? {
        return Ok(());
    }
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let component = &desired.component;
    let margin = runtime
        .block_on(crate::etcd_member::margin_facts(inputs, member))
        .judge();
    restart_if_margin(
        component,
        margin,
        force,
        output,
        "this etcd member",
        "which can cost etcd its quorum",
    )?;
    let report = runtime.block_on(crate::etcd_member::hand_off_leadership(
        inputs,
        member,
        crate::etcd_member::HAND_OFF_BUDGET,
    ));
    if report.still_leads {
        tracing::warn!(component = %desired.component, hand_off = %report.summary, "writing the new manifest while this member leads");
    } else {
        tracing::info!(component = %desired.component, hand_off = %report.summary, "before writing the new manifest");
    }
    if output == OutputFormat::Text {
        outln!("{}: {}", desired.component, report.summary);
    }
    Ok(())
}

/// Whether writing `desired` replaces a manifest the node holds (the kubelet then restarts the
/// static pod).
fn restarts_static_pod(
    engine: &Engine,
    desired: &kube_anchor_core::desired::Desired,
    prune: bool,
) -> anyhow::Result<bool> {
    Ok(engine.preview(desired, prune)?.changes.iter().any(|c| {
        c.role == kube_anchor_core::config::Role::Manifest
            && matches!(c.action, PreviewAction::Write(_))
            && c.before.is_some()
    }))
}

/// A one-shot verb's word on a restart of `what`: written where the cluster affords it or no
/// margin can exist (logged), refused naming why otherwise, unless `force` (said loudly).
fn restart_if_margin(
    component: &str,
    margin: Margin,
    force: bool,
    output: OutputFormat,
    what: &str,
    cost: &str,
) -> anyhow::Result<()> {
    match margin {
        Margin::Affords => Ok(()),
        Margin::CannotExist(why) => {
            tracing::info!(%component, reason = %why, "no restart margin can exist here: writing");
            Ok(())
        }
        Margin::Short(why) if force => {
            tracing::warn!(%component, reason = %why, "--force: restarting {what} although the cluster cannot afford it");
            if output == OutputFormat::Text {
                outln!("{component}: --force: writing although {why}");
            }
            Ok(())
        }
        Margin::Short(why) => anyhow::bail!(
            "{component}: nothing written: the manifest to write restarts {what}, and {why}; wait until the cluster can afford it (or pass --force to restart it anyway, {cost})"
        ),
    }
}

/// Before a manifest that restarts this node's kube-apiserver, with `--api-server-margin` (as
/// the anchor container sets it): the other nodes' API servers are asked as `run` asks them
/// (`margin::api_server_peers`, the anchors listed with this identity's API client). No API
/// client is no margin: refused unless `force`.
/// The version skew policy on this node, as `run --skew-gate` asks it before a turn
/// (`Engine::skew_facts`, `skew::judge`): a Kubernetes version that breaks it beside the node's
/// other components is refused, nothing written, unless `force`.
fn before_skew_break(
    engine: &Engine,
    desired: &kube_anchor_core::desired::Desired,
    prune: bool,
    force: bool,
    output: OutputFormat,
) -> anyhow::Result<()> {
    // Judged first: a version with nothing against it (any version of a component the policy
    // does not speak of) costs no preview of the write.
    let Err(why) = kube_anchor_core::skew::judge(&engine.skew_facts(desired)) else {
        return Ok(());
    };
    if !restarts_static_pod(engine, desired, prune)? {
        return Ok(());
    }
    let component = &desired.component;
    if force {
        tracing::warn!(%component, reason = %why, "--force: writing although the version skew policy does not allow it");
        if output == OutputFormat::Text {
            outln!("{component}: --force: writing although {why}");
        }
        return Ok(());
    }
    anyhow::bail!(
        "{component}: nothing written: {why}; upgrade in the policy's order (or pass --force to write it anyway)"
    )
}

fn before_api_server_restart(
    verb: &str,
    engine: &Engine,
    desired: &kube_anchor_core::desired::Desired,
    prune: bool,
    force: bool,
    args: &crate::cli::ApiServerMarginArgs,
    output: OutputFormat,
) -> anyhow::Result<()> {
    let (true, Some(health_url)) = (args.api_server_margin, args.health_url.as_deref()) else {
        return Ok(());
    };
    if !restarts_static_pod(engine, desired, prune)? {
        return Ok(());
    }
    let component = &desired.component;
    let node = args
        .identity
        .node_name
        .as_deref()
        .context("--api-server-margin: --node-name (NODE_NAME) names this node among the anchors' nodes")?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let facts = runtime.block_on(async {
        let agent = kube_anchor_k8s::kubeapi::user_agent(&format!("{verb} {component}"), Some(node));
        match kube_anchor_k8s::kubeapi::client(args.identity.kubeconfig(), &args.identity.api_servers, &agent).await {
            Ok(Some(client)) => {
                kube_anchor_k8s::margin::api_server_peers(
                    &client,
                    component,
                    node,
                    health_url,
                    args.health_ca_file.as_deref(),
                )
                .await
            }
            Ok(None) => {
                MarginFacts::Unknown("no kubeconfig and not in a cluster: the other anchors cannot be listed".into())
            }
            Err(e) => MarginFacts::Unknown(format!("no API client: {e}")),
        }
    });
    restart_if_margin(
        component,
        facts.judge(),
        force,
        output,
        "this node's kube-apiserver",
        "which can leave the clients without an API",
    )
}

/// The membership record, for rendering without a join step (`status`).
fn etcd_record(engine: &Engine, inputs: &Inputs) -> anyhow::Result<Option<kube_anchor_core::membership::Record>> {
    if inputs.anchor.etcd_member.is_none() {
        return Ok(None);
    }
    match crate::etcd_member::load_record(engine, &inputs.anchor.name)? {
        Some(record) => Ok(Some(record)),
        None => anyhow::bail!(
            "{}: no etcd membership record: this node has not joined yet, so there is no manifest to compare",
            inputs.anchor.name
        ),
    }
}

fn remove(args: RemoveArgs) -> anyhow::Result<ExitCode> {
    let engine = engine(&args.node)?;
    let component = args.component.name(engine.roots())?;
    // A name typed by hand with nothing recorded is likely a typo (as `kubectl delete` of a
    // missing object); a config's name is a real component, and removing it again succeeds.
    let recorded = engine.recorded_components();
    if args.component.component.is_some() && !args.ignore_not_found && !recorded.contains(&component) {
        anyhow::bail!(
            "{component}: nothing recorded for this component in {} (components recorded there: {}); \
             --ignore-not-found to succeed anyway",
            engine.state_dir,
            if recorded.is_empty() {
                "none".into()
            } else {
                recorded.join(", ")
            }
        );
    }
    if let Some(lock) = engine.running_anchor(&component)? {
        if !args.force {
            anyhow::bail!(
                "{component}: nothing removed: an anchor of {component} runs on this node (it holds {lock}) and would write the files back at its next sync; take the node out of the chart's nodeSelector (its pre-stop hook removes the component, with the same guards), or pass --force"
            );
        }
        tracing::warn!(%component, %lock, "--force: removing while an anchor of the component runs on this node; it writes the files back at its next sync");
    }
    let member = crate::etcd_member::load_record(&engine, &component)?
        .filter(|r| r.phase != kube_anchor_core::membership::Phase::Removed);
    let Some(record) = member else {
        let report = engine.remove(&component)?;
        log_notices(&report.notices, report.set_aside.as_ref());
        tracing::info!(component = %report.component, removed = report.removed.len(), "removed");
        print_remove(&report, args.output);
        return Ok(ExitCode::SUCCESS);
    };
    remove_member(&engine, &component, &record, &args)
}

/// The Anchor config a verb on `component` was given (`--config`, or `KUBE_ANCHOR_CONFIG` as the
/// anchor container sets it), loaded; `None` without one, or when it is another component's
/// (`--component` named this one in a container of another).
fn config_of<'a>(
    args: &'a ComponentArgs,
    component: &str,
    engine: &Engine,
) -> anyhow::Result<Option<(&'a std::path::Path, Inputs)>> {
    let Some(config) = &args.config else {
        return Ok(None);
    };
    let inputs = Inputs::load(config, engine.roots())?;
    Ok((inputs.anchor.name == component).then_some((config.as_path(), inputs)))
}

/// `remove` of an etcd member: its files going stops a voter for good, so the member leaves
/// first (the same rule and steps as a proven decommission's pre-stop: `decide_leave`, a
/// leadership hand-off, the removal; then, once etcd has stopped, its database saved and its
/// data dir removed), or, with `--keep-member`, stays listed where etcd can lose it. Refused
/// with nothing removed otherwise.
fn remove_member(
    engine: &Engine,
    component: &str,
    record: &kube_anchor_core::membership::Record,
    args: &RemoveArgs,
) -> anyhow::Result<ExitCode> {
    use kube_anchor_core::prestop_steps::LeaveAnswer;
    let Some((config, inputs)) = config_of(&args.component, component, engine)? else {
        anyhow::bail!(
            "{component}: nothing removed: this node runs etcd member {} ({}), and removing its files without it leaving first stops a voter for good; pass the anchor's --config (its etcd client credentials) to make it leave, or --keep-member to leave it listed",
            record.name,
            record.peer_url
        );
    };
    let member = inputs.anchor.etcd_member.as_ref().with_context(|| {
        format!(
            "{component}: nothing removed: the node has an etcd membership record, but {} has no spec.etcdMember to reach etcd with",
            config.display()
        )
    })?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    if args.keep_member {
        match runtime
            .block_on(crate::etcd_member::margin_facts(&inputs, member))
            .judge()
        {
            Margin::Affords => {}
            // A removal is not a restart: where no margin can exist, losing the member loses quorum.
            Margin::CannotExist(why) | Margin::Short(why) if !args.force => anyhow::bail!(
                "{component}: nothing removed: --keep-member leaves this member listed but stopped, and {why}; let it leave instead (without --keep-member), or pass --force"
            ),
            Margin::CannotExist(why) | Margin::Short(why) => {
                tracing::warn!(%component, reason = %why, "--force: removing a member's files although etcd cannot lose it");
            }
        }
    } else {
        crate::etcd_member::ask_leave(engine, component, None)?;
        let answer = runtime.block_on(crate::etcd_member::leave_within(
            engine,
            &inputs,
            member,
            crate::etcd_member::LEAVE_BUDGET,
        ));
        let refused = match answer {
            LeaveAnswer::Removed { id } => {
                tracing::warn!(%component, member_id = %format!("{id:x}"), "removed this node's etcd member");
                outln!("{component}: member {id:x} left the cluster");
                None
            }
            LeaveAnswer::NotAMember => None,
            LeaveAnswer::Refused { reason, .. } => Some(reason),
            LeaveAnswer::Failed(why) => Some(why),
            LeaveAnswer::NoAnswer { within } => Some(format!(
                "etcd did not answer within {}",
                humantime::format_duration(within)
            )),
        };
        if let Some(why) = refused {
            crate::etcd_member::hold_leave(engine, component, &why)?;
            anyhow::bail!(
                "{component}: nothing removed: this node's etcd member may not leave: {why}; once it may, run remove again (or --keep-member to leave it listed where etcd can lose it)"
            );
        }
    }
    let report = engine.remove(component)?;
    log_notices(&report.notices, report.set_aside.as_ref());
    print_remove(&report, args.output);
    if args.keep_member {
        return Ok(ExitCode::SUCCESS);
    }
    // The data dir goes only once etcd has stopped (the kubelet stops it now that its manifest
    // is gone) and its database is saved.
    let until = std::time::Instant::now() + args.stop_timeout;
    if !runtime.block_on(crate::etcd_member::wait_etcd_stopped(engine, &inputs, member, until)) {
        tracing::warn!(%component, data_dir = %member.data_dir, "etcd still runs: its data dir is kept");
        outln!(
            "{component}: etcd still runs after {}: its data dir {} is kept",
            humantime::format_duration(args.stop_timeout),
            member.data_dir
        );
        return Ok(ExitCode::from(1));
    }
    let saved = crate::etcd_member::save_and_remove_data_dir(engine, component, member)?;
    if let Some(s) = saved {
        outln!("{component}: saved the etcd database at {}", s.snapshot.display());
    }
    outln!("{component}: removed the etcd data dir {}", member.data_dir);
    Ok(ExitCode::SUCCESS)
}

fn rollback(args: RollbackArgs) -> anyhow::Result<ExitCode> {
    let engine = engine(&args.node)?;
    let component = args.component.name(engine.roots())?;
    let read = engine.ledger(&component)?;
    let target = match &args.to {
        Some(wanted) => engine.revision(&component, wanted)?,
        None => engine.last_known_good(&component)?.ok_or_else(|| {
            anyhow::anyhow!(
                "{component}: no last-known-good version is recorded on this node (none has passed a trial here, or its snapshot is gone): nothing to roll back to; the node is left as it is"
            )
        })?,
    };
    // An etcd member goes back only where etcd can lose it while it restarts, as for `apply`;
    // the config (which the anchor container sets) holds etcd's client credentials.
    match config_of(&args.component, &component, &engine)? {
        Some((_, inputs)) => {
            before_etcd_restart(&engine, &inputs, &target, false, args.force, OutputFormat::Text)?;
        }
        None => {
            tracing::info!(%component, "no --config: whether the cluster can afford the restart is not asked");
        }
    }
    before_skew_break(&engine, &target, false, args.force, OutputFormat::Text)?;
    before_api_server_restart(
        "rollback",
        &engine,
        &target,
        false,
        args.force,
        &args.api_server_margin,
        OutputFormat::Text,
    )?;
    let kube_anchor_core::ledger::RollbackPlan {
        mark_bad: bad,
        promote: new_last_known_good,
    } = read.rollback_plan(&target.content_hash);
    if bad.is_some() || new_last_known_good {
        // Under the ledger's lock: an anchor that promoted another version since it was read
        // has changed what there is to go back to.
        let marked = engine.update_ledger(&component, |l| {
            if l.last_known_good != read.last_known_good {
                return false;
            }
            if let Some(bad) = &bad {
                l.mark_bad(kube_anchor_core::ledger::BadVersion {
                    hash: bad.clone(),
                    at: crate::engine::now_rfc3339(),
                    reason: args.reason.clone(),
                });
            }
            true
        })?;
        if !marked {
            anyhow::bail!(
                "{component}: the anchor promoted another version while this ran; nothing changed (run rollback again to go back to the new last-known-good)"
            );
        }
    }
    let report = engine.apply(&target, false)?;
    if new_last_known_good {
        // An older good version gone back to is what the node falls back on from now on.
        engine.promote(&target)?;
    }
    let what = if args.to.is_some() {
        "revision"
    } else {
        "last-known-good"
    };
    match bad {
        Some(bad) => outln!(
            "{component}: rolled back to {what} {} ({} file(s) written); {bad} recorded as bad: {}",
            target.content_hash,
            report.written.len(),
            args.reason
        ),
        None => outln!(
            "{component}: already on {what} {} ({} file(s) repaired); nothing recorded as bad",
            target.content_hash,
            report.written.len()
        ),
    }
    Ok(ExitCode::SUCCESS)
}

fn retry(args: RetryArgs) -> anyhow::Result<ExitCode> {
    let engine = engine(&args.node)?;
    let component = args.component.name(engine.roots())?;
    let forgotten = engine.update_ledger(&component, |ledger| ledger.forget_bad(args.hash.as_deref()))?;
    if forgotten.is_empty() {
        match args.hash.as_deref() {
            Some(hash) => anyhow::bail!("{component}: {hash} is not recorded as bad; nothing to retry"),
            None => anyhow::bail!("{component}: no version is recorded as bad; nothing to retry"),
        }
    }
    for bad in &forgotten {
        outln!(
            "{component}: {} will be tried again (failed its trial at {}: {})",
            bad.hash,
            bad.at,
            bad.reason
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn pause(args: PauseArgs) -> anyhow::Result<ExitCode> {
    let engine = engine(&args.node)?;
    let component = args.component.name(engine.roots())?;
    if args.reason.trim().is_empty() {
        anyhow::bail!("--reason is empty: say why {component}'s anchor is held (status and /readyz show it)");
    }
    match engine.pause(&component, &args.reason)? {
        Some(earlier) => outln!(
            "{component}: already paused on this node since {} ({}); kept as it was",
            earlier.at,
            earlier.reason
        ),
        None => {
            let anchor = match engine.running_anchor(&component)? {
                Some(_) => "the anchor running here writes nothing from now on",
                None => "no anchor of it runs here now; one that starts writes nothing",
            };
            outln!(
                "{component}: paused on this node ({}): {anchor}; `kube-anchor resume --component {component}` lets it go on",
                args.reason
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The config's etcd member, or an error naming the config.
fn etcd_member_of(inputs: &Inputs, config: &std::path::Path) -> anyhow::Result<kube_anchor_core::config::EtcdMember> {
    inputs.anchor.etcd_member.clone().with_context(|| {
        format!(
            "{}: no spec.etcdMember: nothing says how to reach this node's etcd member",
            config.display()
        )
    })
}

fn snapshot(args: SnapshotArgs) -> anyhow::Result<ExitCode> {
    let engine = engine(&args.node)?;
    let inputs = Inputs::load(&args.config, engine.roots())?;
    let mut member = etcd_member_of(&inputs, &args.config)?;
    let keep = args.keep.or(member.snapshot_schedule.map(|s| s.keep)).unwrap_or(7);
    if keep == 0 {
        anyhow::bail!("--keep 0 would remove the snapshot just taken");
    }
    // The schedule's slot is not this verb's: an operator's snapshot is taken now.
    member.snapshot_schedule = Some(kube_anchor_core::etcd_snapshot::Schedule {
        every: std::time::Duration::from_secs(u64::MAX / 4),
        keep,
    });
    let taker = crate::etcd_snapshots::Taker::of(&engine, &inputs, &member)?.expect("a schedule was set");
    let slot = kube_anchor_core::etcd_snapshot::slot(crate::engine::unix_now() as u64, taker.schedule.every);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    match rt.block_on(crate::etcd_snapshots::take(&taker, slot))? {
        Some(taken) => {
            outln!(
                "{}: snapshot {} of member {} (cluster {}, revision {}, {} bytes), etcd's integrity hash verified",
                inputs.anchor.name,
                taken.path.display(),
                taken.record.member,
                taken.record.cluster_id,
                taken.record.revision,
                taken.record.bytes
            );
            for name in &taken.pruned {
                outln!(
                    "{}: removed the older snapshot {name} (keeping {keep})",
                    inputs.anchor.name
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        None => anyhow::bail!("{}: no snapshot taken (try again)", inputs.anchor.name),
    }
}

fn defrag(args: DefragArgs) -> anyhow::Result<ExitCode> {
    let engine = engine(&args.node)?;
    let inputs = Inputs::load(&args.config, engine.roots())?;
    let mut member = etcd_member_of(&inputs, &args.config)?;
    // Thresholds aside (the operator's call), the same settings as the anchors'.
    member.defrag = Some(kube_anchor_core::etcd_defrag::DefragPolicy {
        every: std::time::Duration::from_secs(1),
        min_bytes: 0,
        min_free_percent: 1,
    });
    let defragger = crate::etcd_defrag::Defragger::of(&inputs, &member)?.expect("a policy was set");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let members = rt.block_on(defragger.observe())?;
    let facts = kube_anchor_core::etcd_defrag::Facts {
        me: defragger.member_name.clone(),
        members,
        held: None,
    };
    let component = &inputs.anchor.name;
    match kube_anchor_core::etcd_defrag::on_demand(&facts) {
        kube_anchor_core::etcd_defrag::Decision::Defrag { hand_off } => {
            let d = rt.block_on(crate::etcd_defrag::defragment(&defragger, &inputs, &member, hand_off))?;
            if let Some(h) = &d.hand_off {
                outln!("{component}: {h}");
            }
            outln!(
                "{component}: defragmented member {} in {:.1}s: database {} -> {} bytes ({} in use before)",
                defragger.member_name,
                d.took.as_secs_f64(),
                d.before,
                d.after,
                d.in_use_before
            );
            Ok(ExitCode::SUCCESS)
        }
        kube_anchor_core::etcd_defrag::Decision::Wait(why) => {
            anyhow::bail!(
                "{component}: member {} not defragmented: {why} (a defrag stops the member for a while)",
                defragger.member_name
            )
        }
        kube_anchor_core::etcd_defrag::Decision::NotNeeded => unreachable!("on_demand never says so"),
    }
}

fn resume(args: ResumeArgs) -> anyhow::Result<ExitCode> {
    let engine = engine(&args.node)?;
    let component = args.component.name(engine.roots())?;
    match engine.resume(&component)? {
        Some(lifted) => outln!(
            "{component}: resumed (paused since {}: {}); its anchor syncs again at its next look",
            lifted.at,
            lifted.reason
        ),
        None => outln!("{component}: not paused on this node; nothing to resume"),
    }
    Ok(ExitCode::SUCCESS)
}

fn status(args: StatusArgs) -> anyhow::Result<ExitCode> {
    let engine = engine(&args.node)?;
    let inputs = Inputs::load(&args.config, engine.roots())?;
    let record = etcd_record(&engine, &inputs)?;
    let desired = inputs.desired(&inputs.variables(record.as_ref()))?;
    let report = engine.status(&desired)?;
    let runtime = match RuntimeObserver::new(&args.node.host_root, args.runtime.endpoint()) {
        Some(observer) => {
            let pod = StaticPodRef {
                name: desired.pod_name.clone(),
                namespace: desired.pod_namespace.clone(),
                node: args.node_name.clone(),
            };
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            Some(rt.block_on(observer.observe(&pod)))
        }
        None => None,
    };
    // A learner: how far behind the leader it is (asked of etcd, briefly; the rest is local).
    let learner = match &record {
        Some(r) => {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            rt.block_on(crate::etcd_member::learner_status(
                &inputs,
                r,
                std::time::Duration::from_secs(5),
            ))
        }
        None => None,
    };
    let snapshots = scheduled_snapshots(&engine, &inputs, args.verify_snapshots);
    print_status(
        &report,
        record.as_ref(),
        learner.as_ref(),
        runtime.as_ref(),
        snapshots.as_ref(),
        args.output,
    );
    Ok(if report.in_sync() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_OUT_OF_SYNC)
    })
}

fn check_expiration(args: CheckExpirationArgs) -> anyhow::Result<ExitCode> {
    let engine = engine(&args.node)?;
    let now = crate::engine::unix_now();
    let horizon = now.saturating_add(args.warn_within.as_secs() as i64);
    let mut rows = Vec::new();
    for component in engine.recorded_components() {
        for cert in engine.certificates(&component)? {
            rows.push((component.clone(), cert));
        }
    }
    rows.sort_by_key(|(_, c)| c.not_after_seconds);
    let expiring = rows.iter().any(|(_, c)| c.not_after_seconds <= horizon);
    match args.output {
        OutputFormat::Json => {
            let certificates: Vec<serde_json::Value> = rows
                .iter()
                .map(|(component, c)| {
                    let mut v = json!(c);
                    v["component"] = json!(component);
                    v["expired"] = json!(c.not_after_seconds <= now);
                    v["expiresWithinWarning"] = json!(c.not_after_seconds <= horizon);
                    v
                })
                .collect();
            outln!("{}", json!({"schemaVersion": 1, "certificates": certificates}));
        }
        OutputFormat::Text => {
            outln!(
                "{:<24} {:<21} {:>9}  {:<30} CERTIFICATE",
                "COMPONENT",
                "EXPIRES",
                "RESIDUAL",
                "SUBJECT"
            );
            for (component, c) in &rows {
                let residual = match c.not_after_seconds - now {
                    left if left <= 0 => "expired".to_owned(),
                    left => format!("{}d", left / 86_400),
                };
                outln!(
                    "{component:<24} {:<21} {residual:>9}  {:<30} {}",
                    c.not_after,
                    c.subject,
                    c.place
                );
            }
        }
    }
    Ok(if expiring {
        ExitCode::from(EXIT_OUT_OF_SYNC)
    } else {
        ExitCode::SUCCESS
    })
}

fn notice_text(notice: &Notice) -> String {
    match notice {
        Notice::LeftModified { path } => {
            format!("{path}: changed since kube-anchor wrote it; left in place")
        }
        Notice::Orphaned { path } => {
            format!("{path}: written earlier, no longer in the config; kept (use --prune to remove it)")
        }
        Notice::KeptForManifest { path, manifest } => {
            format!("{path}: kept, because {manifest} was changed by hand and stays, and may need it")
        }
        Notice::OriginalLost { path } => {
            format!(
                "{path}: the file it held before kube-anchor wrote it is gone from the state dir; removed without putting it back"
            )
        }
        Notice::RenewedOnNode { path, detail } => {
            format!(
                "{path}: {detail}; kept, not reverted, until the config carries it (README, \"Certificates renewed on the node\")"
            )
        }
    }
}

fn set_aside_text(s: &SetAside) -> String {
    match &s.moved_to {
        Some(to) => format!(
            "ledger {} was unusable ({}); moved to {to}; nothing it named is trusted as written by kube-anchor",
            s.path, s.reason
        ),
        None => format!("ledger {} is unusable ({}); ignoring it", s.path, s.reason),
    }
}

fn log_notices(notices: &[Notice], set_aside: Option<&SetAside>) {
    for n in notices {
        tracing::warn!("{}", notice_text(n));
    }
    if let Some(s) = set_aside {
        tracing::warn!(ledger = %s.path, reason = %s.reason, "{}", set_aside_text(s));
    }
}

fn warnings(notices: &[Notice], set_aside: Option<&SetAside>) -> Vec<String> {
    notices
        .iter()
        .map(notice_text)
        .chain(set_aside.map(set_aside_text))
        .collect()
}

fn apply_json(r: &ApplyReport) -> serde_json::Value {
    let mut files: Vec<serde_json::Value> = Vec::new();
    files.extend(
        r.written
            .iter()
            .map(|(p, why)| json!({"path": p, "action": "written", "reason": why})),
    );
    files.extend(r.removed.iter().map(|p| json!({"path": p, "action": "removed"})));
    files.extend(r.restored.iter().map(|p| json!({"path": p, "action": "restored"})));
    files.extend(r.unchanged.iter().map(|p| {
        let action = if r.adopted.contains(p) { "adopted" } else { "unchanged" };
        json!({"path": p, "action": action})
    }));
    files.extend(
        r.renewed
            .iter()
            .map(|p| json!({"path": p, "action": "renewed-on-node"})),
    );
    json!({
        "component": r.component,
        "contentHash": r.content_hash,
        "changed": r.changed(),
        "files": files,
        // Among the written: files kube-anchor did not write, kept in the state dir first.
        "keptOriginals": r.replaced,
        "warnings": warnings(&r.notices, r.set_aside.as_ref()),
    })
}

fn print_apply(r: &ApplyReport, format: OutputFormat) {
    match format {
        OutputFormat::Json => outln!("{}", apply_json(r)),
        OutputFormat::Text => {
            let outcome = match (r.changed(), r.adopted.is_empty()) {
                (true, _) => "applied",
                (false, false) => "adopted",
                (false, true) => "unchanged",
            };
            outln!("{}: {outcome} ({})", r.component, r.content_hash);
            for (p, why) in &r.written {
                outln!(
                    "  written    {p} ({})",
                    serde_json::to_value(why).expect("enum").as_str().unwrap_or_default()
                );
            }
            for p in &r.removed {
                outln!("  removed    {p}");
            }
            for p in &r.restored {
                outln!("  restored   {p} (the file it held before kube-anchor wrote it)");
            }
            for p in &r.replaced {
                outln!("  kept       {p}: the file there before, not written by kube-anchor (`remove` puts it back)");
            }
            for p in &r.unchanged {
                if r.adopted.contains(p) {
                    outln!("  adopted    {p} (already held what the config wants; now in the ledger)");
                } else {
                    outln!("  unchanged  {p}");
                }
            }
            for p in &r.renewed {
                outln!("  renewed    {p} (renewed on the node; kept, see the warning)");
            }
            for w in warnings(&r.notices, r.set_aside.as_ref()) {
                outln!("  warning    {w}");
            }
        }
    }
}

/// A file's content may be shown only when it is no secret: a manifest (rendered from a
/// ConfigMap, never from a Secret) or a file everyone on the node may read anyway (a
/// certificate). A key or a kubeconfig never reaches stdout.
fn showable(c: &PreviewChange) -> bool {
    let world_readable = |mode: Option<kube_anchor_core::config::FileMode>| mode.is_none_or(|m| m.0 & 0o004 != 0);
    c.role == kube_anchor_core::config::Role::Manifest
        || (world_readable(c.before_mode) && world_readable(c.after_mode))
}

fn preview_action(c: &PreviewChange) -> String {
    match c.action {
        PreviewAction::Write(reason) => serde_json::to_value(reason)
            .expect("enum")
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        PreviewAction::Remove => "remove".into(),
        PreviewAction::Restore => "restore-original".into(),
    }
}

fn print_preview(p: &Preview, format: OutputFormat) {
    let warnings = warnings(&p.notices, None);
    if format == OutputFormat::Json {
        let changes: Vec<serde_json::Value> = p
            .changes
            .iter()
            .map(|c| json!({"path": c.path, "action": preview_action(c), "keepsOriginal": c.keeps_original}))
            .collect();
        let out = json!({"component": p.component, "contentHash": p.content_hash, "dryRun": true, "changes": changes, "warnings": warnings});
        outln!("{out}");
        return;
    }
    if p.changes.is_empty() {
        outln!("{}: no changes ({}; dry run)", p.component, p.content_hash);
    } else {
        outln!(
            "{}: {} change(s) would be made ({}; dry run, nothing written)",
            p.component,
            p.changes.len(),
            p.content_hash
        );
    }
    for c in &p.changes {
        let mode = |m: Option<kube_anchor_core::config::FileMode>| m.map_or("-".to_owned(), |m| format!("{:04o}", m.0));
        outln!("  {:<17} {}", preview_action(c), c.path);
        if c.before_mode != c.after_mode && c.before_mode.is_some() && c.after_mode.is_some() {
            outln!("    mode {} -> {}", mode(c.before_mode), mode(c.after_mode));
        }
        if c.keeps_original {
            outln!("    the file there was not written by kube-anchor: kept in the state dir, put back by `remove`");
        }
        if c.before == c.after {
            continue;
        }
        if !showable(c) {
            let modes = [c.before_mode, c.after_mode]
                .into_iter()
                .flatten()
                .map(|m| mode(Some(m)));
            outln!(
                "    content differs (not shown: mode {})",
                modes.collect::<Vec<_>>().join(" -> ")
            );
            continue;
        }
        let text = |b: &Option<Vec<u8>>| {
            b.as_deref()
                .map(String::from_utf8_lossy)
                .unwrap_or_default()
                .into_owned()
        };
        let (before, after) = (text(&c.before), text(&c.after));
        let diff = similar::TextDiff::from_lines(&before, &after);
        let path = c.path.to_string();
        out!(
            "{}",
            diff.unified_diff()
                .context_radius(3)
                .header(&format!("{path} (on the node)"), &format!("{path} (wanted)"))
        );
    }
    for w in warnings {
        outln!("  warning    {w}");
    }
}

fn print_remove(r: &RemoveReport, format: OutputFormat) {
    let warnings = warnings(&r.notices, r.set_aside.as_ref());
    match format {
        OutputFormat::Json => outln!(
            "{}",
            json!({"component": r.component, "removed": r.removed, "restored": r.restored,
                   "originalsKept": r.originals_kept.iter().map(|(p, k)| json!({"path": p, "keptAt": k})).collect::<Vec<_>>(),
                   "warnings": warnings})
        ),
        OutputFormat::Text => {
            outln!("{}: {} file(s) removed", r.component, r.removed.len());
            for p in &r.removed {
                outln!("  removed    {p}");
            }
            for p in &r.restored {
                outln!("  restored   {p} (the file it held before kube-anchor wrote it)");
            }
            for (p, kept) in &r.originals_kept {
                outln!(
                    "  kept       {kept}: the manifest {p} held before kube-anchor wrote it (not started again; copy it back to run it)"
                );
            }
            for w in warnings {
                outln!("  warning    {w}");
            }
        }
    }
}

/// The local truth beside the files: what the runtime runs, since when, with how many restarts.
fn print_runtime(view: &RuntimeView) {
    let at = |secs: Option<i64>| {
        secs.and_then(|s| u64::try_from(s).ok())
            .map(|s| {
                humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_secs(s)).to_string()
            })
            .unwrap_or_else(|| "(unknown)".into())
    };
    match view {
        RuntimeView::Unavailable { reason } => outln!("  runtime       cannot be asked ({reason}): no evidence"),
        RuntimeView::NoSandbox => outln!("  runtime       no sandbox of the static pod"),
        RuntimeView::Pod(pod) => {
            outln!(
                "  runtime       runs {}{} (sandbox created {}), {} restart(s)",
                pod.content_hash
                    .as_deref()
                    .unwrap_or("a version kube-anchor did not write"),
                if pod.ready { "" } else { ", sandbox not ready" },
                at(Some(pod.created_at)),
                pod.restarts()
            );
            for c in &pod.containers {
                let when = match c.state {
                    ContainerState::Running => format!(" since {}", at(c.started_at)),
                    ContainerState::Exited => format!(" at {}", at(c.finished_at)),
                    _ => String::new(),
                };
                outln!("  container     {}{when}", c.describe());
            }
        }
    }
}

/// The scheduled etcd snapshots on the node, each checked (`None`: the config schedules none).
struct ScheduledSnapshots {
    schedule: kube_anchor_core::etcd_snapshot::Schedule,
    dir: std::path::PathBuf,
    found: Result<Vec<crate::etcd_snapshots::OnNode>, String>,
}

fn scheduled_snapshots(engine: &Engine, inputs: &Inputs, read_all: bool) -> Option<ScheduledSnapshots> {
    let member = inputs.anchor.etcd_member.as_ref()?;
    let schedule = member.snapshot_schedule?;
    let dir = match crate::etcd_snapshots::snapshot_dir(engine, &inputs.anchor.name) {
        Ok(dir) => dir,
        Err(e) => {
            return Some(ScheduledSnapshots {
                schedule,
                dir: Default::default(),
                found: Err(e.to_string()),
            });
        }
    };
    let found = crate::etcd_snapshots::on_node(&dir, read_all).map_err(|e| e.to_string());
    Some(ScheduledSnapshots { schedule, dir, found })
}

fn print_status(
    r: &StatusReport,
    member: Option<&kube_anchor_core::membership::Record>,
    learner: Option<&Result<kube_anchor_core::membership::LearnerProgress, String>>,
    runtime: Option<&RuntimeView>,
    snapshots: Option<&ScheduledSnapshots>,
    format: OutputFormat,
) {
    let mut warnings = warnings(&[], r.set_aside.as_ref());
    if let Some(s) = snapshots {
        match &s.found {
            Ok(found) => {
                warnings.extend(
                    found
                        .iter()
                        .filter(|f| f.bad())
                        .map(|f| format!("etcd snapshot {} cannot be restored from: {}", f.file, f.integrity)),
                );
            }
            Err(e) => warnings.push(format!("etcd snapshots: {e}")),
        }
    }
    match format {
        OutputFormat::Json => {
            // The document schemas/status.v1.json describes (checked by tests/schema.rs).
            let out = json!({
                "schemaVersion": 1,
                "component": r.component,
                "inSync": r.in_sync(),
                "contentHash": r.content_hash,
                "appliedHash": r.recorded_hash,
                "lastKnownGoodHash": r.last_known_good,
                "badVersions": r.bad,
                "lastKnownGoodFailing": r.last_known_good_failing,
                "paused": r.paused,
                "interrupted": r.interrupted,
                "revisions": r.history,
                "files": r.files,
                "certificates": r.certificates,
                "warnings": warnings,
            });
            let mut out = out;
            if let Some(m) = member {
                out["etcdMember"] = json!(m);
                match learner {
                    Some(Ok(p)) => {
                        out["etcdMember"]["learnerProgress"] = json!({
                            "leaderIndex": p.leader_index,
                            "matchedIndex": p.matched,
                            "behind": p.behind(),
                        })
                    }
                    Some(Err(why)) => out["etcdMember"]["learnerProgress"] = json!({"unknown": why}),
                    None => {}
                }
            }
            if let Some(view) = runtime {
                out["runtime"] = json!(view);
            }
            if let Some(s) = snapshots {
                let found = s.found.as_ref().map(Vec::as_slice).unwrap_or_default();
                out["etcdSnapshots"] = json!({
                    "every": humantime::format_duration(s.schedule.every).to_string(),
                    "keep": s.schedule.keep,
                    "dir": s.dir.display().to_string(),
                    "lastGood": found.iter().find(|f| f.good()),
                    "snapshots": found,
                });
            }
            outln!("{out}");
        }
        OutputFormat::Text => {
            outln!(
                "{}: {}",
                r.component,
                if r.in_sync() { "in sync" } else { "NOT in sync" }
            );
            outln!("  wanted hash   {}", r.content_hash);
            outln!(
                "  applied hash  {}",
                r.recorded_hash.as_deref().unwrap_or("(never applied)")
            );
            if let Some(failing) = &r.last_known_good_failing {
                outln!(
                    "  LAST-KNOWN-GOOD FAILING {} since {}: {}",
                    failing.hash,
                    failing.at,
                    failing.reason
                );
            }
            if let Some(p) = &r.paused {
                outln!(
                    "  PAUSED        since {}: {} (no anchor writes, repairs or rolls back here; `kube-anchor resume --component {}`)",
                    p.at,
                    p.reason,
                    r.component
                );
            }
            if let Some(i) = &r.interrupted {
                outln!("  INTERRUPTED   {} at {}: {}", i.hash, i.at, i.reason);
            }
            for rev in &r.history {
                let outcome = match &rev.outcome {
                    Outcome::Trial => "not judged yet".to_owned(),
                    Outcome::Passed { at } => format!("passed {at}"),
                    Outcome::Failed { at, reason } => format!("failed {at}: {reason}"),
                };
                outln!("  revision      {} applied {}, {outcome}", rev.hash, rev.applied_at);
            }
            if let Some(view) = runtime {
                print_runtime(view);
            }
            for c in &r.certificates {
                outln!("  certificate   {} ({}) expires {}", c.place, c.subject, c.not_after);
            }
            if let Some(m) = member {
                let id = m
                    .member_id
                    .as_deref()
                    .and_then(|id| id.parse::<u64>().ok())
                    .map(|id| format!("{id:x}"))
                    .unwrap_or_else(|| "(not known yet)".into());
                outln!(
                    "  etcd member   {} {} id {id} peer {}",
                    m.name,
                    m.phase.as_str(),
                    m.peer_url
                );
                for (what, o) in [("last join", &m.last_join), ("last leave", &m.last_leave)] {
                    if let Some(o) = o {
                        outln!("  {what:<13} {} at {}: {}", o.action, o.at, o.result);
                    }
                }
                match learner {
                    Some(Ok(p)) => outln!("  learner       {p}"),
                    Some(Err(why)) => outln!("  learner       progress unknown: {why}"),
                    None => {}
                }
                if let Some(l) = &m.leave_pending {
                    outln!(
                        "  leave pending since {} (asked {} time(s){}); the next pre-stop asks again",
                        l.since,
                        l.attempts,
                        l.pod.as_deref().map(|p| format!(" by pod {p}")).unwrap_or_default()
                    );
                }
            }
            if let Some(s) = snapshots {
                outln!(
                    "  etcd snapshots every {}, {} kept on each node, in {}",
                    humantime::format_duration(s.schedule.every),
                    s.schedule.keep,
                    s.dir.display()
                );
                for f in s.found.as_deref().unwrap_or_default() {
                    match &f.record {
                        Some(rec) => outln!(
                            "  snapshot      {} revision {} of cluster {} from {}, {} bytes: {}",
                            rec.taken_at,
                            rec.revision,
                            rec.cluster_id,
                            rec.member,
                            rec.bytes,
                            f.integrity
                        ),
                        None => outln!("  snapshot      {} (no record): {}", f.file, f.integrity),
                    }
                }
            }
            for f in &r.files {
                match &f.detail {
                    Some(d) => outln!("  {:<10} {} ({d})", f.state.as_str(), f.path),
                    None => outln!("  {:<10} {}", f.state.as_str(), f.path),
                }
            }
            for w in warnings {
                outln!("  warning    {w}");
            }
        }
    }
}
