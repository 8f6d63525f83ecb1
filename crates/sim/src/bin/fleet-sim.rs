//! Runs the fleet simulation: the named scenarios, or seeded generated runs with each violation
//! shrunk to a scenario to paste into a test.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use kube_anchor_sim::fleet::{self, Invariant, Setup, World};
use kube_anchor_sim::scenarios;

#[derive(Parser)]
#[command(about = "kube-anchor's fleet simulation: the project's decisions in a modelled control plane")]
struct Args {
    /// Run the named scenarios (with the seeds 1..=SEEDS) instead of generated runs.
    #[arg(long)]
    scenarios: bool,
    /// Generated runs per node count.
    #[arg(long, default_value_t = 1000)]
    runs: u64,
    /// The first seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Node counts to run.
    #[arg(long, value_delimiter = ',', default_value = "1,3")]
    nodes: Vec<usize>,
    /// Shrink the first run that shows each invariant and print it as a scenario.
    #[arg(long)]
    shrink: bool,
    /// Seeds per named scenario (and per run of --bed).
    #[arg(long, default_value_t = 3)]
    seeds: u64,
    /// Run the lifecycle plan the bed ran (`scenarios::lifecycle_seed_28`) with the bed's setup
    /// and print each waited-on operation's settle time beside the bed's.
    #[arg(long)]
    bed: bool,
}

/// The bed's settle times beside the simulation's (over `seeds` seeds) for each operation the
/// bed waited on.
fn compare_with_bed(seeds: u64) {
    let run = scenarios::lifecycle_seed_28();
    let scenario = run.scenario();
    let reports: Vec<_> = (1..=seeds)
        .map(|seed| World::run_on(&scenario, seed, Setup::LIFECYCLE_BED))
        .collect();
    println!("{} beside {seeds} simulated runs (Setup::LIFECYCLE_BED):", run.replay);
    println!("| operation | bed: settled after | simulation: p50 / min / max | not settled in the simulation |");
    println!("|---|---|---|---|");
    for (step, index) in run.settle_indices() {
        let step = &run.steps[step];
        let mut times: Vec<u64> = reports
            .iter()
            .filter_map(|r| r.settled_after.get(&index).copied())
            .collect();
        times.sort_unstable();
        let sim = match times.as_slice() {
            [] => "–".to_owned(),
            t => format!("{} / {} / {} s", t[t.len() / 2], t[0], t[t.len() - 1]),
        };
        println!(
            "| {} | {} s | {sim} | {} of {seeds} |",
            step.what,
            step.bed_settled_after.unwrap_or_default(),
            reports.len() - times.len()
        );
    }
    let mut seen: BTreeMap<Invariant, String> = BTreeMap::new();
    for (seed, report) in (1..=seeds).zip(&reports) {
        for (invariant, v) in &report.violations {
            seen.entry(*invariant).or_insert(format!("seed {seed}: {v}"));
        }
    }
    for v in seen.values() {
        println!("violation: {v}");
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.bed {
        compare_with_bed(args.seeds);
        return ExitCode::SUCCESS;
    }
    if args.scenarios {
        for named in scenarios::all() {
            let scenario = (named.scenario)();
            let mut seen: BTreeMap<Invariant, String> = BTreeMap::new();
            for seed in 1..=args.seeds {
                for (invariant, v) in World::run(&scenario, seed).violations {
                    seen.entry(invariant).or_insert(format!("seed {seed}: {v}"));
                }
            }
            println!("{}: {}", named.name, named.story);
            if seen.is_empty() {
                println!("    no violation");
            }
            for detail in seen.values() {
                println!("    {detail}");
            }
        }
        return ExitCode::SUCCESS;
    }
    let started = Instant::now();
    let mut first: BTreeMap<(usize, Invariant), u64> = BTreeMap::new();
    let mut counts: BTreeMap<(usize, Invariant), u64> = BTreeMap::new();
    let mut runs = 0;
    for &nodes in &args.nodes {
        for seed in args.seed..args.seed + args.runs {
            let report = World::run(&fleet::generate(nodes, seed), seed);
            runs += 1;
            for invariant in report.violations.keys() {
                first.entry((nodes, *invariant)).or_insert(seed);
                *counts.entry((nodes, *invariant)).or_default() += 1;
            }
        }
    }
    let elapsed = started.elapsed();
    println!(
        "{runs} runs in {:.1} s ({:.0} runs/s)",
        elapsed.as_secs_f64(),
        runs as f64 / elapsed.as_secs_f64()
    );
    println!("| nodes | invariant | runs showing it | first seed |");
    println!("|---|---|---|---|");
    for ((nodes, invariant), count) in &counts {
        println!(
            "| {nodes} | {invariant:?} | {count} | {} |",
            first[&(*nodes, *invariant)]
        );
    }
    if args.shrink {
        for ((nodes, invariant), seed) in &first {
            let scenario = fleet::generate(*nodes, *seed);
            let shrunk = fleet::shrink(&scenario, *seed, *invariant);
            let report = World::run(&shrunk, *seed);
            println!(
                "\n{invariant:?}, {nodes} node(s), seed {seed}, {} of {} operations:",
                shrunk.ops.len(),
                scenario.ops.len()
            );
            println!("    {}", report.violations[invariant]);
            println!("{shrunk}");
        }
    }
    ExitCode::SUCCESS
}
