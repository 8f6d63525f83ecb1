//! `reboot-sim`: simulated full-cluster reboots, comparing checkpoint policies.
//!
//!   cargo run --release --bin reboot-sim -- --trajectories 10000 --seed 1 [--nodes 3,5] [--output table|json]
//!
//! `--trajectories` counts per policy and cluster size, spread evenly over the variants.

use clap::{Parser, ValueEnum};
use kube_anchor_sim::{Policy, Summary, Variant, summarize};

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Output {
    Table,
    Json,
    /// A bar chart of recovery rate and median time to recovery (SVG on stdout).
    Svg,
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
        Output::Svg => print!("{}", svg(&rows)),
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

/// Two panels, one bar per policy in each (variant, size) group: recovery rate, and median time
/// to recovery of the recovered runs.
fn svg(rows: &[Summary]) -> String {
    let policies: Vec<String> = Policy::all().iter().map(|p| p.name()).collect();
    let colors = ["#d62728", "#ff7f0e", "#2ca02c", "#1f77b4"];
    let mut groups: Vec<(&str, usize)> = Vec::new();
    for r in rows {
        if !groups.contains(&(r.variant, r.nodes)) {
            groups.push((r.variant, r.nodes));
        }
    }
    let (bar, gap, left, panel_h, top) = (9.0, 14.0, 60.0, 180.0, 40.0);
    let group_w = bar * policies.len() as f64 + gap;
    let width = left + group_w * groups.len() as f64 + 130.0;
    let height = top + 2.0 * (panel_h + 130.0);
    let max_ttr = rows.iter().filter_map(|r| r.ttr_p50_s).max().unwrap_or(1) as f64;
    let mut out = format!(
        "<svg xmlns='http://www.w3.org/2000/svg' width='{width:.0}' height='{height:.0}' font-family='sans-serif' font-size='10'>\n<rect width='100%' height='100%' fill='white'/>\n"
    );
    for (i, p) in policies.iter().enumerate() {
        let x = left + i as f64 * 120.0;
        out += &format!(
            "<rect x='{x}' y='10' width='10' height='10' fill='{}'/><text x='{}' y='19'>{p}</text>\n",
            colors[i],
            x + 14.0
        );
    }
    for (panel, title) in ["recovery rate (%)", "time to recovery, median of recovered runs (s)"]
        .iter()
        .enumerate()
    {
        let base = top + 10.0 + panel as f64 * (panel_h + 130.0) + panel_h;
        out += &format!(
            "<text x='{left}' y='{}' font-size='12'>{title}</text>\n",
            base - panel_h - 6.0
        );
        out += &format!(
            "<line x1='{left}' y1='{base}' x2='{}' y2='{base}' stroke='black'/>\n",
            width - 130.0
        );
        let scale_max = if panel == 0 { 100.0 } else { max_ttr };
        for tick in 0..=4 {
            let v = scale_max * tick as f64 / 4.0;
            let y = base - panel_h * tick as f64 / 4.0;
            out += &format!(
                "<text x='{}' y='{}' text-anchor='end'>{v:.0}</text><line x1='{left}' y1='{y}' x2='{}' y2='{y}' stroke='#ddd'/>\n",
                left - 4.0,
                y + 3.0,
                width - 130.0
            );
        }
        for (g, (variant, nodes)) in groups.iter().enumerate() {
            let gx = left + g as f64 * group_w + gap / 2.0;
            for (i, p) in policies.iter().enumerate() {
                let Some(r) = rows
                    .iter()
                    .find(|r| &r.policy == p && r.variant == *variant && r.nodes == *nodes)
                else {
                    continue;
                };
                let value = if panel == 0 {
                    r.recovery_rate * 100.0
                } else {
                    r.ttr_p50_s.unwrap_or(0) as f64
                };
                let h = panel_h * value / scale_max;
                out += &format!(
                    "<rect x='{:.1}' y='{:.1}' width='{bar}' height='{h:.1}' fill='{}'/>\n",
                    gx + i as f64 * bar,
                    base - h,
                    colors[i]
                );
            }
            out += &format!(
                "<text transform='translate({:.1},{:.1}) rotate(40)'>{variant}, {nodes} nodes</text>\n",
                gx + 4.0,
                base + 12.0
            );
        }
    }
    out + "</svg>\n"
}
