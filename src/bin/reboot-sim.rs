//! `reboot-sim`: simulated full-cluster reboots, comparing checkpoint policies.
//!
//!   cargo run --release --bin reboot-sim -- --trajectories 10000 --seed 1 [--nodes 3,5] [--output table|json]
//!
//! `--trajectories` counts per policy and cluster size, spread evenly over the variants.

use clap::{Parser, ValueEnum};
use kube_anchor::sim::{Policy, Summary, Variant, summarize};

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Output {
    Table,
    Json,
}

#[derive(Debug, Parser)]
#[command(about = "Simulated full-cluster reboots: bootkube's timer-only checkpointer vs kube-anchor")]
struct Args {
    #[arg(long, default_value_t = 1000)]
    trajectories: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long, value_delimiter = ',', default_values_t = [3, 5])]
    nodes: Vec<usize>,
    #[arg(long, value_enum, default_value_t = Output::Table)]
    output: Output,
}

fn main() {
    let args = Args::parse();
    let variants = Variant::all();
    let per_variant = args.trajectories.div_ceil(variants.len());
    let mut rows: Vec<Summary> = Vec::new();
    for policy in Policy::all() {
        for &nodes in &args.nodes {
            for variant in variants {
                rows.push(summarize(policy, nodes, variant, per_variant, args.seed));
            }
        }
    }
    match args.output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&rows).expect("rows serialize")),
        Output::Table => {
            println!(
                "{:<12} {:>5} {:<19} {:>6} {:>9} {:>8} {:>8} {:>8} {:>9}  first lost (failed runs)",
                "policy", "nodes", "variant", "runs", "recovered", "rate", "ttr p50", "ttr p99", "ttr/bound"
            );
            for r in &rows {
                let lost: Vec<String> = r.first_lost.iter().map(|(c, n)| format!("{c}: {n}")).collect();
                println!(
                    "{:<12} {:>5} {:<19} {:>6} {:>9} {:>7.2}% {:>7} {:>8} {:>9}  {}",
                    r.policy,
                    r.nodes,
                    r.variant,
                    r.trajectories,
                    r.recovered,
                    r.recovery_rate * 100.0,
                    r.ttr_p50_s.map(|s| format!("{s}s")).unwrap_or_else(|| "-".into()),
                    r.ttr_p99_s.map(|s| format!("{s}s")).unwrap_or_else(|| "-".into()),
                    r.ttr_over_lower_bound_p50
                        .map(|x| format!("{x:.3}"))
                        .unwrap_or_else(|| "-".into()),
                    lost.join(", ")
                );
            }
        }
    }
}
