//! `kube-anchor kubelet-pre-start`: the step the kubelet runs before it starts
//! (`kube_anchor_core::kubelet_start` decides; this performs). It never keeps the kubelet from
//! starting: every failure is printed and the step goes on with the next component, exit 0.

use std::path::Path;
use std::process::ExitCode;

use kube_anchor_core::config::Role;
use kube_anchor_core::kubelet_start::{self, Decision};
use kube_anchor_core::ledger::{BadVersion, Interrupted};
use kube_anchor_core::trial::ClientAnswer;
use kube_anchor_k8s::client_check::{ClientCheck, ClientCheckSpec};

use crate::cli::KubeletPreStartArgs;
use crate::engine::{Engine, now_rfc3339};
use crate::output::outln;

/// What the kubelet asks first (its pod source): its pods, through its own kubeconfig.
const KUBELET_ASKS: &str = "/api/v1/pods?limit=1";

pub(crate) fn kubelet_pre_start(args: KubeletPreStartArgs) -> anyhow::Result<ExitCode> {
    let engine = args.node.engine()?;
    if args.install {
        return install(&engine, &args);
    }
    let mut api_answer: Option<Result<(), String>> = None;
    for component in engine.recorded_components() {
        if let Err(e) = one(&engine, &component, &args, &mut api_answer) {
            outln!("{component}: {e:#}; left as it is");
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn one(
    engine: &Engine,
    component: &str,
    args: &KubeletPreStartArgs,
    api_answer: &mut Option<Result<(), String>>,
) -> anyhow::Result<()> {
    let ledger = engine.ledger(component)?;
    if kubelet_start::version_on_trial(&ledger).is_none() {
        return Ok(());
    }
    // Only a version on trial costs reading the last-known-good files, and the manifest on the
    // node (the version on trial's).
    let last_known_good = engine.last_known_good(component)?;
    let good_manifest = last_known_good
        .as_ref()
        .and_then(|d| d.files.iter().find(|f| f.role == Role::Manifest))
        .map(|f| f.content.as_slice());
    let trial_manifest = match ledger.entries().iter().find(|e| e.role == Role::Manifest) {
        Some(entry) => engine.fs.read(&entry.path)?,
        None => None,
    };
    let versions = kubelet_start::Versions {
        keeps_the_api_away: good_manifest.is_some_and(kubelet_start::keeps_the_api_away),
        last_known_good_usable: last_known_good.is_some(),
        etcd_minor_up: kubelet_start::etcd_minor_up(trial_manifest.as_deref(), good_manifest),
    };
    let decision = match kubelet_start::on_trial(&ledger, versions) {
        Err(decision) => decision,
        Ok(trial) => {
            let answer = match api_answer {
                Some(answer) => answer.clone(),
                None => api_answer
                    .insert(ask_api(&args.node.host_root, &args.kubelet_kubeconfig))
                    .clone(),
            };
            kubelet_start::decide(trial, answer, engine.running_anchor(component)?.is_some())
        }
    };
    match decision {
        Decision::NoTrial => {}
        Decision::Keep { version, why } => outln!("{component}: {version} on trial, kept: {why}"),
        Decision::Revert {
            version,
            to,
            reason,
            mark_bad,
            boots,
        } => {
            let target = last_known_good.expect("decided with a last-known-good version");
            // Under the ledger's lock: an anchor (a kubelet restart leaves it running) that
            // promoted or rolled back meanwhile has decided already.
            let marked = engine.update_ledger(component, |l| {
                if l.content_hash != ledger.content_hash || l.last_known_good != ledger.last_known_good {
                    return false;
                }
                let (hash, at, reason) = (version.clone(), now_rfc3339(), reason.clone());
                if mark_bad {
                    l.mark_bad(BadVersion { hash, at, reason });
                } else {
                    l.interrupted = Some(Interrupted {
                        hash,
                        at,
                        reason,
                        boots,
                    });
                }
                true
            })?;
            if !marked {
                outln!("{component}: the ledger changed while the step ran; left as it is");
                return Ok(());
            }
            let report = engine.apply(&target, false)?;
            tracing::warn!(%component, %version, last_known_good = %to, %reason, "version on trial put back to last-known-good before the kubelet starts");
            outln!(
                "{component}: {version} put back to last-known-good {to} ({} file(s) written) before the kubelet starts: {reason}",
                report.written.len()
            );
        }
    }
    Ok(())
}

/// Whether an API server answers the kubelet as the kubelet asks (its kubeconfig, its pods).
fn ask_api(host_root: &Path, kubeconfig: &Path) -> Result<(), String> {
    let check = ClientCheck::new(
        ClientCheckSpec {
            name: "the kubelet".into(),
            url: KUBELET_ASKS.into(),
            ca_file: None,
            cert_file: None,
            key_file: None,
            kubeconfig: Some(kubeconfig.to_owned()),
            anchor_credentials: false,
        },
        host_root,
        None,
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("no runtime to ask the API: {e}"))?;
    match runtime.block_on(check.ask()).answer {
        ClientAnswer::Served => Ok(()),
        ClientAnswer::Refused(why) | ClientAnswer::NoAnswer(why) => Err(why),
    }
}

fn install(engine: &Engine, args: &KubeletPreStartArgs) -> anyhow::Result<ExitCode> {
    let exe = std::env::current_exe()?;
    let binary = std::fs::read(&exe).map_err(|e| anyhow::anyhow!("{}: cannot read this binary: {e}", exe.display()))?;
    let [bin, unit] = engine.install_kubelet_pre_start(&binary, crate::cli::VERSION, |bin| {
        kubelet_start::drop_in(
            &bin.to_string(),
            &engine.state_dir.to_string(),
            &args.node.allowed_roots,
            &args.kubelet_kubeconfig.display().to_string(),
        )
    })?;
    outln!(
        "kubelet pre-start step installed: {bin} and {unit}; systemd runs it from the next boot, or after `systemctl daemon-reload`"
    );
    Ok(ExitCode::SUCCESS)
}
