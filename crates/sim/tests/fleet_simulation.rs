//! The fleet simulation's ratchets: the named scenarios and 10,000 generated runs show exactly the
//! violations their lists name (no new one, none already fixed), and a seed replays exactly.

use std::collections::{BTreeMap, BTreeSet};

use kube_anchor_sim::fleet::{self, DaemonSets, Invariant, World};
use kube_anchor_sim::scenarios::{self, GENERATED_KNOWN, KNOWN, SEEDS};

/// Generated runs per node count (1 and 3): 10,000 in all.
const GENERATED_RUNS: u64 = 5000;

#[test]
fn each_named_scenario_shows_exactly_its_known_violations() {
    let mut wrong = Vec::new();
    let named = scenarios::all();
    assert_eq!(named.len(), KNOWN.len(), "one ratchet entry per named scenario");
    for n in named {
        let known: BTreeSet<Invariant> = KNOWN
            .iter()
            .find(|(name, _)| *name == n.name)
            .unwrap_or_else(|| panic!("{} has no entry in scenarios::KNOWN", n.name))
            .1
            .iter()
            .copied()
            .collect();
        let scenario = (n.scenario)();
        let mut seen = BTreeMap::new();
        for seed in SEEDS {
            for (invariant, v) in World::run(&scenario, seed).violations {
                seen.entry(invariant).or_insert(format!("seed {seed}: {v}"));
            }
        }
        for (invariant, v) in &seen {
            if !known.contains(invariant) {
                wrong.push(format!("{}: a violation not on the list: {v}", n.name));
            }
        }
        for invariant in known.iter().filter(|i| !seen.contains_key(i)) {
            wrong.push(format!(
                "{}: {invariant:?} no longer occurs: remove it from scenarios::KNOWN",
                n.name
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Runs `seeds` of `nodes` nodes on two threads; the first seed showing each invariant.
fn sweep(nodes: usize, seeds: std::ops::Range<u64>) -> BTreeMap<Invariant, u64> {
    let mid = seeds.start + (seeds.end - seeds.start) / 2;
    let half = |range: std::ops::Range<u64>| {
        move || {
            let mut first = BTreeMap::new();
            for seed in range {
                for invariant in World::run(&fleet::generate(nodes, seed), seed).violations.into_keys() {
                    first.entry(invariant).or_insert(seed);
                }
            }
            first
        }
    };
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(half(seeds.start..mid));
        let b = s.spawn(half(mid..seeds.end));
        (a.join().expect("a sweep thread"), b.join().expect("a sweep thread"))
    });
    let mut first = a;
    for (invariant, seed) in b {
        first.entry(invariant).or_insert(seed);
    }
    first
}

#[test]
fn generated_runs_show_only_the_known_violations() {
    let mut wrong = Vec::new();
    for nodes in [1, 3] {
        let first = sweep(nodes, 1..GENERATED_RUNS + 1);
        let known: BTreeSet<Invariant> = GENERATED_KNOWN
            .iter()
            .filter(|(n, _)| *n == nodes)
            .map(|(_, i)| *i)
            .collect();
        for (invariant, seed) in &first {
            if !known.contains(invariant) {
                let scenario = fleet::shrink(&fleet::generate(nodes, *seed), *seed, *invariant);
                let report = World::run(&scenario, *seed);
                wrong.push(format!(
                    "{nodes} node(s), seed {seed}: {}\nshrunk:\n{scenario}",
                    report.violations[invariant]
                ));
            }
        }
        for invariant in known.iter().filter(|i| !first.contains_key(i)) {
            wrong.push(format!(
                "{nodes} node(s): {invariant:?} no longer occurs in {GENERATED_RUNS} runs: remove it from scenarios::GENERATED_KNOWN"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn a_seed_replays_exactly() {
    for nodes in [1, 3] {
        let scenario = fleet::generate(nodes, 42);
        let a = World::run(&scenario, 42);
        let b = World::run(&scenario, 42);
        assert_eq!(format!("{:?}", a), format!("{:?}", b));
        assert!(a.writes > 0, "a generated run writes versions");
        // Other seeds draw other timings (a run can end the same way for a few: a re-imaged
        // single node whose cluster is gone stops everything that follows).
        let outcome = |r: &fleet::Report| {
            (
                r.writes,
                r.last_write_at,
                r.rollbacks,
                r.promotions,
                format!("{:?}", r.violations),
            )
        };
        assert!(
            (43..=50).any(|seed| outcome(&World::run(&scenario, seed)) != outcome(&a)),
            "seeds 43 to 50 all ran as 42 did: {:?}",
            outcome(&a)
        );
    }
}

#[test]
fn a_shrunk_scenario_still_shows_its_violation() {
    let named = scenarios::all();
    let n = named
        .iter()
        .find(|n| n.name == "apply-fanned-out")
        .expect("the scenario");
    let mut scenario = (n.scenario)();
    // Padding an operator would not notice: a kubelet restart on cp-1 and a later good push.
    scenario.ops.insert(0, (20, fleet::Op::KubeletRestart { node: 0 }));
    scenario.ops.push((
        3000,
        fleet::Op::Push {
            component: fleet::APISERVER,
            fault: None,
            minor_up: false,
        },
    ));
    assert!(World::run(&scenario, 1).violations.contains_key(&Invariant::QuorumLost));
    let shrunk = fleet::shrink(&scenario, 1, Invariant::QuorumLost);
    assert!(World::run(&shrunk, 1).violations.contains_key(&Invariant::QuorumLost));
    assert!(shrunk.ops.len() < scenario.ops.len() - 1, "{shrunk}");
    let printed = shrunk.to_string();
    assert!(
        !printed.contains("KubeletRestart") && !printed.contains("APISERVER"),
        "{printed}"
    );
    assert!(printed.contains("Op::Verb"), "{printed}");
    // Shorter: the padding push at 3000 s is gone.
    assert!(shrunk.end() < scenario.end() / 2, "{shrunk}");
}

/// A violation one node shows alone is printed on one node: the others' operations go, and a
/// power cut keeps only the nodes it needs.
#[test]
fn shrinking_drops_the_nodes_a_violation_does_not_need() {
    let push = |component, minor_up| fleet::Op::Push {
        component,
        fault: None,
        minor_up,
    };
    let scenario = fleet::Scenario {
        nodes: 3,
        daemonsets: DaemonSets::PerNode,
        ops: vec![
            (0, push(fleet::ETCD, true)),
            (300, fleet::Op::KubeletRestart { node: 2 }),
            (
                400,
                fleet::Op::PowerCut {
                    nodes: vec![1, 2],
                    down_for: 30,
                },
            ),
            (900, fleet::Op::HelmRollback { component: fleet::ETCD }),
        ],
    };
    // An etcd rollback below the cluster version its minor upgrade raised: on the ratchet's list
    // (scenarios::KNOWN) while the skew policy is not enforced; its fix takes another violation here.
    assert!(
        World::run(&scenario, 1)
            .violations
            .contains_key(&Invariant::SkewWritten)
    );
    let shrunk = fleet::shrink(&scenario, 1, Invariant::SkewWritten);
    assert!(World::run(&shrunk, 1).violations.contains_key(&Invariant::SkewWritten));
    assert_eq!(shrunk.nodes, 1, "{shrunk}");
    assert_eq!(shrunk.ops.len(), 2, "{shrunk}");
    assert!(shrunk.ops[1].0 < 900, "the rollback comes sooner: {shrunk}");
}

/// The named scenario `name`.
fn named(name: &str) -> fleet::Scenario {
    let n = scenarios::all()
        .into_iter()
        .find(|n| n.name == name)
        .expect("a named scenario");
    (n.scenario)()
}

/// The preStop hook's machine (`prestop_steps::Hook`) and its looks (`decommission::Looks`) run
/// in the world: a node leaving the control plane takes every component and its etcd member
/// with it; with another member off, or cut off by the network, the quorum guard keeps etcd and
/// kube-apiserver on it, while kube-controller-manager and kube-scheduler (the last-copy guard)
/// go, a copy of each running Ready elsewhere. A node cut off itself runs its hooks once its
/// kubelet hears of the deletion, after the network is back, and then leaves.
#[test]
fn a_node_leaves_the_control_plane_only_with_a_quorum_to_spare() {
    // (scenario, how the four hooks end, the members left)
    let everything: &[(&str, u64)] = &[("remove", 4)];
    let quorum_held: &[(&str, u64)] = &[("held", 2), ("remove", 2)];
    let expected = [
        ("a-node-leaves-the-control-plane", everything, 2),
        ("a-node-leaves-while-another-is-off", quorum_held, 3),
        ("a-node-leaves-while-another-is-cut-off", quorum_held, 3),
        ("a-cut-off-node-leaves", everything, 2),
    ];
    for seed in SEEDS {
        for (name, exits, members) in expected {
            let report = World::run(&named(name), seed);
            let exits: BTreeMap<&str, u64> = exits.iter().copied().collect();
            assert_eq!(report.hook_exits, exits, "{name}, seed {seed}: how the hooks ended");
            assert_eq!(report.members, members, "{name}, seed {seed}: the members left");
        }
    }
}

/// `kube-anchor pause` holds an anchor in the world as on a node (`Ledger::paused`, read by the
/// machine at each sync and evaluation): a bad kube-apiserver version on trial on a paused node
/// is rolled back only once resumed, and no other node tries it meanwhile; a push while every
/// etcd anchor is paused is written nowhere before the first resume.
#[test]
fn a_paused_anchor_acts_only_once_resumed() {
    for seed in SEEDS {
        let report = World::run(&named("a-bad-trial-paused-then-resumed"), seed);
        // Paused from 80 s to 680 s; the version and the return to last-known-good written once.
        assert!(
            report.first_write_at.is_some_and(|at| at < 80),
            "seed {seed}: {report:?}"
        );
        assert_eq!(
            (report.writes, report.rolled_back_at.len()),
            (2, 1),
            "seed {seed}: {report:?}"
        );
        assert!(
            report.rolled_back_at[0] >= 680,
            "seed {seed}: rolled back while paused: {report:?}"
        );
        let report = World::run(&named("etcd-paused-everywhere-through-a-push"), seed);
        // Paused from 30 s; cp-1 resumed at 930 s.
        assert!(
            report.first_write_at.is_some_and(|at| at >= 930),
            "seed {seed}: written while paused: {report:?}"
        );
        assert!(report.violations.is_empty(), "seed {seed}: {report:?}");
    }
}

/// The etcd anchor's join step (`join_steps::JoinStep`) runs in the world: a re-imaged node's
/// stale member is removed, a learner added, promoted once it has caught up (etcd refuses it
/// before), and the cluster has its three voters again. The bootstrap node does the same: it
/// founds a cluster only when the member list does not answer.
#[test]
fn a_re_imaged_node_rejoins_as_a_learner() {
    for seed in SEEDS {
        for name in ["a-node-is-re-imaged", "the-bootstrap-node-is-re-imaged"] {
            let report = World::run(&named(name), seed);
            let ends = |decision: &str| report.join_ends.get(decision).copied().unwrap_or(0);
            let context = format!("{name}, seed {seed}: {:?}", report.join_ends);
            assert_eq!(ends("rejoin"), 1, "{context}");
            assert_eq!(ends("add-learner"), 1, "{context}");
            assert_eq!(ends("bootstrap"), 0, "{context}");
            // The first promotion comes before the learner has caught up, and is refused.
            assert!(ends("promote") >= 2, "{context}");
            assert_eq!(report.members, 3, "{context}: the voters at the end");
        }
    }
}

/// The operator's one-shot verbs decide as their commands do (`Ledger::rollback_to`,
/// `history::find_passed`, `Ledger::forget_bad`): `retry` only where a version was recorded bad,
/// and the anchor then tries it again (and rolls it back again); `rollback --to` a version that
/// passed its trial on every node (where etcd can afford the restart), and refused for one that
/// never ran there; `apply` the mounted inputs' version where etcd can afford the restart.
#[test]
fn the_one_shot_verbs_decide_as_their_commands_do() {
    for seed in SEEDS {
        let report = World::run(&named("a-retried-bad-version-fails-again-on-its-node"), seed);
        let context = format!("seed {seed}: {:?}, {} rollbacks", report.verbs, report.rollbacks);
        assert_eq!(report.verbs.get("retried"), Some(&1), "{context}");
        assert_eq!(report.verbs.get("refused"), Some(&2), "{context}");
        assert_eq!(
            report.rollbacks, 2,
            "{context}: the bad version tried twice on its node"
        );

        // Each written, or refused where etcd cannot lose its member (the first always written).
        let report = World::run(&named("rollback-to-the-first-version-fanned-out"), seed);
        let (rolled_back, refused) = (
            report.verbs.get("rolled-back").copied().unwrap_or(0),
            report.verbs.get("refused").copied().unwrap_or(0),
        );
        assert!(
            rolled_back >= 1 && rolled_back + refused == 3,
            "seed {seed}: {:?}",
            report.verbs
        );

        // `apply` writes what the mounted inputs name, trial or not, unless it restarts a
        // member etcd cannot lose: the first always; each later one written or refused.
        let report = World::run(&named("apply-fanned-out"), seed);
        let (applied, refused) = (
            report.verbs.get("applied").copied().unwrap_or(0),
            report.verbs.get("refused").copied().unwrap_or(0),
        );
        assert!(
            applied >= 1 && applied + refused == 3,
            "seed {seed}: {:?}",
            report.verbs
        );
        assert_eq!(report.rollbacks, 0, "seed {seed}: the version is good");

        // `rollback --to` the release's current version: it failed twice on its node and never
        // ran elsewhere.
        let mut to_failed = named("a-retried-bad-version-fails-again-on-its-node");
        to_failed.ops.extend((0..3).map(|node| {
            (
                2000,
                fleet::Op::Verb {
                    node,
                    component: fleet::ETCD,
                    verb: fleet::Verb::RollbackTo { releases_back: 0 },
                },
            )
        }));
        let report = World::run(&to_failed, seed);
        assert_eq!(report.verbs.get("refused"), Some(&5), "seed {seed}: {:?}", report.verbs);
        assert_eq!(report.verbs.get("rolled-back"), None, "seed {seed}: {:?}", report.verbs);
    }
}

/// The lifecycle plan the bed ran settles in the simulation too, with the bed's setup: after
/// each operation the bed waited on, within the bound the bed gives it (tests/selfhosted/
/// lifecycle.rs: 480 s, 780 s for a kube-apiserver change), and with no violation, as on the
/// bed. `fleet-sim --bed` prints the times side by side.
#[test]
fn the_lifecycle_plan_the_bed_ran_settles_in_the_simulation() {
    let run = scenarios::lifecycle_seed_28();
    let scenario = run.scenario();
    for seed in SEEDS {
        let report = World::run_on(&scenario, seed, fleet::Setup::LIFECYCLE_BED);
        assert!(report.violations.is_empty(), "seed {seed}: {:?}", report.violations);
        for (step, index) in run.settle_indices() {
            let step = &run.steps[step];
            let bound = step.settle_bound();
            let settled = report.settled_after.get(&index);
            assert!(
                settled.is_some_and(|s| *s <= bound),
                "seed {seed}: {}: settled after {settled:?} s (the bed: {:?} s, its bound {bound} s)",
                step.what,
                step.bed_settled_after
            );
        }
    }
}

/// The README's runbook replaces a node: the hooks take every component off cp-3 and its member
/// leaves; the fresh machine's `bootstrap --join` adds a learner, waits for its promotion and every
/// component's health; back in the nodeSelector, its anchors take over. A running node whose Node
/// object is deleted keeps everything: podgc force-deletes its anchor pods, and their hooks find
/// neither the pod nor the Node, which is no evidence.
#[test]
fn a_node_is_replaced_by_the_runbook_and_a_deleted_node_keeps_its_components() {
    for seed in SEEDS {
        let report = World::run(&named("a-node-replaced-by-the-runbook"), seed);
        let context = format!("seed {seed}: verbs {:?}, joins {:?}", report.verbs, report.join_ends);
        assert_eq!(report.verbs.get("bootstrapped"), Some(&1), "{context}");
        assert_eq!(report.join_ends.get("bootstrap"), None, "{context}: no new cluster");
        assert!(report.join_ends.contains_key("add-learner"), "{context}");
        assert_eq!(report.members, 3, "{context}: the voters at the end");
        assert_eq!(
            report.hook_exits.get("remove"),
            Some(&4),
            "{context}: {:?}",
            report.hook_exits
        );

        let report = World::run(&named("a-running-node-deleted"), seed);
        assert_eq!(
            report.hook_exits.get("keep"),
            Some(&4),
            "seed {seed}: every hook keeps: {:?}",
            report.hook_exits
        );
        assert_eq!(report.members, 3, "seed {seed}: the member stays");
    }
}

/// A node that comes back alone heals itself: with every node's kubelet running
/// `kube-anchor kubelet-pre-start` first, a reboot or a kubelet restart during an etcd or
/// kube-apiserver trial ends with the node on a good version and no violation, the step having
/// acted (the version recorded as interrupted and tried again once the kubelet replaces static
/// pods: after a reboot by the anchor that starts, after a kubelet restart by the one still
/// running); a good version interrupted either way still rolls out. Without the step a single
/// node stays down after a bad trial.
#[test]
fn a_node_that_comes_back_alone_heals_itself() {
    let without = fleet::Setup {
        kubelet_pre_start: false,
        ..fleet::Setup::SERVERS
    };
    let cases = [
        (
            "single-node-reboot-in-a-bad-trial",
            "kubelet-pre-start-interrupted",
            true,
        ),
        (
            "single-node-reboot-in-a-bad-etcd-trial",
            "kubelet-pre-start-interrupted",
            true,
        ),
        (
            "single-node-kubelet-restart-in-a-bad-trial",
            "kubelet-pre-start-interrupted",
            true,
        ),
        (
            "single-node-kubelet-restart-in-a-bad-etcd-trial",
            "kubelet-pre-start-interrupted",
            true,
        ),
        // The restart meets the new version starting with no API server answering in most seeds
        // (the step puts it back), or just after it answers (kept).
        (
            "single-node-kubelet-restart-in-a-good-trial",
            "kubelet-pre-start-",
            false,
        ),
        (
            "single-node-kubelet-restart-in-a-good-etcd-trial",
            "kubelet-pre-start-",
            false,
        ),
        (
            "single-node-reboot-in-a-good-trial",
            "kubelet-pre-start-interrupted",
            false,
        ),
        // The world's kubelets reach any node's API server (a load balancer in front): cp-1's
        // kubelet reaches cp-2's and cp-3's once their members have quorum again, so without the
        // step its anchor rolls the version back too, later.
        // (Where cp-1 boots after the others, its step finds an API answering and keeps it.)
        ("every-node-reboots-in-a-bad-etcd-trial", "kubelet-pre-start-", false),
    ];
    for (name, acted, down_without) in cases {
        let scenario = named(name);
        for seed in SEEDS {
            let report = World::run(&scenario, seed);
            assert!(report.violations.is_empty(), "{name}, seed {seed}: {report:?}");
            assert!(
                report.verbs.keys().any(|verb| verb.starts_with(acted)),
                "{name}, seed {seed}: the step did not act ({acted}): {:?}",
                report.verbs
            );
            let before = World::run_on(&scenario, seed, without);
            assert_eq!(
                before.invariants().contains(&Invariant::NotRecovered),
                down_without,
                "{name}, seed {seed}, without the step: {before:?}"
            );
        }
    }
}

/// Drain protection (`drain_guard::decide` run by each etcd and kube-apiserver anchor of the
/// world, the Eviction API judging their budget): a drain of cp-2 while cp-1 reboots after its
/// own drain waits until cp-1 is back and uncordoned, and the control plane loses nothing. Without
/// the guards (the charts' `anchor.drainGuard: false`) the second drain goes at once and leaves
/// etcd and the API servers short. Drains one at a time, each once the one before is back, wait
/// for nothing.
#[test]
fn a_second_drain_waits_until_the_first_node_is_back() {
    let without = fleet::Setup {
        drain_guard: false,
        ..fleet::Setup::SERVERS
    };
    let scenario = named("a-second-drain-while-the-first-node-reboots");
    for seed in SEEDS {
        let report = World::run(&scenario, seed);
        assert_eq!(
            report.invariants(),
            BTreeSet::new(),
            "seed {seed}: {:?}",
            report.violations
        );
        let [first, second] = report.drain_waits[..] else {
            panic!("seed {seed}: drains {:?}", report.drain_waits);
        };
        // kubectl tries again every 5 s; cp-1 (drained at 60 s, cp-2 at 180 s) is off for 300 s
        // and boots in 20 to 120 s.
        assert!(first <= 5, "seed {seed}: the first drain waited {first} s");
        assert!(
            second >= 60 + 300 + 20 - 180,
            "seed {seed}: the second drain went after {second} s, before cp-1 was back"
        );
        let unguarded = World::run_on(&scenario, seed, without);
        assert!(
            unguarded.invariants().contains(&Invariant::DrainedBelowQuorum),
            "seed {seed}: without guards {:?}",
            unguarded.violations
        );
        assert!(
            unguarded.drain_waits.iter().all(|&w| w <= 5),
            "seed {seed}: {:?}",
            unguarded.drain_waits
        );
        let one_at_a_time = World::run(&named("one-drain-at-a-time"), seed);
        assert_eq!(one_at_a_time.invariants(), BTreeSet::new(), "seed {seed}");
        assert_eq!(one_at_a_time.drain_waits.len(), 3, "seed {seed}");
    }
}
