//! The fleet simulation's throughput: generated runs (`sim::fleet::generate`) per second on one
//! core and on every core, one node and three.

use std::time::Instant;

use kube_anchor_sim::fleet::{self, World};

use crate::Row;

/// Runs per node count: 1,000 (a smoke run: 10).
fn runs(quick: bool) -> u64 {
    if quick { 10 } else { 1000 }
}

pub fn measure(quick: bool) -> Vec<Row> {
    let mut rows = Vec::new();
    let n = runs(quick);
    for nodes in [1, 3] {
        let started = Instant::now();
        let mut steps = 0;
        for seed in 1..=n {
            steps += World::run(&fleet::generate(nodes, seed), seed).steps;
        }
        let secs = started.elapsed().as_secs_f64();
        rows.push(Row::new(
            format!(
                "fleet sim: {nodes} node(s), one core ({n} runs, {} simulated min each on average)",
                steps / n / 60
            ),
            format!("{:.0} runs/s", n as f64 / secs),
            "",
        ));
    }
    // Both node counts at once, seeds split over every core: what `cargo test` runs.
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get()) as u64;
    let started = Instant::now();
    std::thread::scope(|s| {
        for core in 0..cores {
            s.spawn(move || {
                for seed in (1..=n).filter(|seed| seed % cores == core) {
                    for nodes in [1, 3] {
                        World::run(&fleet::generate(nodes, seed), seed);
                    }
                }
            });
        }
    });
    let per_second = (2 * n) as f64 / started.elapsed().as_secs_f64();
    rows.push(Row::new(
        format!("fleet sim: 1 and 3 nodes, {cores} cores"),
        format!("{per_second:.0} runs/s ({:.0} s for 10,000)", 10_000.0 / per_second),
        "10,000 runs ≤ 120 s on 2 cores",
    ));
    rows
}
