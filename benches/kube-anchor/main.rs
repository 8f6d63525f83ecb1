//! `cargo bench`: kube-anchor's performance figures in one table.
//!
//! - `apply`: the file engine in-process (no-op apply, full rewrite of 100 files);
//! - `daemon`: `kube-anchor run` (release build) on a temp dir: change → host file, deletion →
//!   restored, idle RSS and CPU, with and without a watch open;
//! - `api`: what `run` and `checkpointer` cost the real API server in steady state, counted from
//!   its audit log, on a control plane with three nodes;
//! - `fleet`: the fleet simulation's generated runs per second.
//!
//! `cargo bench -- daemon api` runs only the named parts. Under `cargo test --all-targets` (no
//! `--bench` argument) every part runs as a short smoke run, so CI checks that each still works.

#[path = "../../tests/support/mod.rs"]
#[allow(dead_code)]
mod support;

mod api;
mod apply;
mod daemon;
mod fleet;

use std::time::Duration;

/// One line of the table.
pub struct Row {
    pub what: String,
    pub value: String,
    /// The goal the figure is held to, if any.
    pub target: &'static str,
}

impl Row {
    pub fn new(what: impl Into<String>, value: impl Into<String>, target: &'static str) -> Self {
        Self {
            what: what.into(),
            value: value.into(),
            target,
        }
    }
}

/// p50 and p99 (nearest rank).
pub fn percentiles(mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    let at = |p: f64| samples[((samples.len() - 1) as f64 * p).round() as usize];
    (at(0.5), at(0.99))
}

pub fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = !args.iter().any(|a| a == "--bench");
    // Names of parts; flags (and the value of libtest's `--skip`, which `cargo test` passes on to
    // every target) are not names.
    let mut named: Vec<&str> = Vec::new();
    let mut rest = args.iter().map(String::as_str);
    while let Some(arg) = rest.next() {
        match arg {
            "--skip" => {
                rest.next();
            }
            flag if flag.starts_with('-') => {}
            part => named.push(part),
        }
    }
    let wanted = |part: &str| named.is_empty() || named.contains(&part);
    let mut rows = Vec::new();
    if wanted("apply") {
        rows.extend(apply::measure(quick));
    }
    if wanted("daemon") {
        rows.extend(daemon::measure(quick));
    }
    if wanted("fleet") {
        rows.extend(fleet::measure(quick));
    }
    if wanted("api") {
        rows.extend(api::measure(quick));
    }
    let width = |f: fn(&Row) -> usize| rows.iter().map(f).max().unwrap_or(0);
    let (w1, w2) = (width(|r| r.what.chars().count()), width(|r| r.value.chars().count()));
    println!();
    println!(
        "kube-anchor {}{}, {} CPUs",
        env!("CARGO_PKG_VERSION"),
        if quick {
            " (smoke run: figures not meaningful)"
        } else {
            ""
        },
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!("| {:w1$} | {:w2$} | target", "measurement", "value");
    println!("|-{}-|-{}-|-------", "-".repeat(w1), "-".repeat(w2));
    for r in &rows {
        println!("| {:w1$} | {:w2$} | {}", r.what, r.value, r.target);
    }
}
