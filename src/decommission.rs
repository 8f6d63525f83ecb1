//! Is this pod's termination a real decommission of the component on this node? Pure.
//!
//! Removal needs positive evidence: the owning DaemonSet is gone (a 404, nothing else) or being
//! deleted, the Node is being deleted, or the Node no longer matches the DaemonSet's node
//! selection. Everything else — a rolling update, an eviction, a reboot, an API that cannot be
//! reached, times out or refuses us — keeps the files.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, NodeSelectorRequirement, NodeSelectorTerm, Pod};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CleanupMode {
    /// Remove only on positive evidence of a decommission.
    Guarded,
    /// Never remove (files stay until removed by hand).
    Never,
    /// Remove on every termination (the original anchor's behaviour; for tests and teardown).
    Always,
}

/// The answer to one API lookup.
#[derive(Debug, Clone, PartialEq)]
pub enum Lookup<T> {
    Found(T),
    /// The API answered 404.
    NotFound,
    /// Anything else: unreachable, timeout, 403, 5xx... never evidence.
    Unavailable(String),
}

impl<T> Lookup<T> {
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Lookup<U> {
        match self {
            Lookup::Found(t) => Lookup::Found(f(t)),
            Lookup::NotFound => Lookup::NotFound,
            Lookup::Unavailable(r) => Lookup::Unavailable(r),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub name: String,
    pub uid: String,
}

/// Node selection of a DaemonSet's pods: `nodeSelector` AND any one of the required
/// node-affinity terms (when there are terms).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeSelection {
    pub node_selector: BTreeMap<String, String>,
    pub required_terms: Vec<NodeSelectorTerm>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct DaemonSetFacts {
    pub uid: String,
    pub deleting: bool,
    pub selection: NodeSelection,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFacts {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub deleting: bool,
}

/// What the API said, lookup by lookup. `daemonset` is `None` when it was not looked up (the
/// pod could not be read or has no DaemonSet owner).
#[derive(Debug, Clone, PartialEq)]
pub struct Evidence {
    pub owner: Lookup<Option<Owner>>,
    pub daemonset: Option<Lookup<DaemonSetFacts>>,
    pub node: Lookup<NodeFacts>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Remove(String),
    Keep(String),
}

pub fn decide(mode: CleanupMode, evidence: &Evidence) -> Decision {
    match mode {
        CleanupMode::Never => return Decision::Keep("--cleanup never".into()),
        CleanupMode::Always => return Decision::Remove("--cleanup always".into()),
        CleanupMode::Guarded => {}
    }
    // The node itself going away is evidence on its own.
    if let Lookup::Found(node) = &evidence.node
        && node.deleting
    {
        return Decision::Remove(format!("node {} is being deleted", node.name));
    }
    let owner = match &evidence.owner {
        Lookup::Found(Some(owner)) => owner,
        Lookup::Found(None) => return Decision::Keep("this pod has no DaemonSet owner".into()),
        Lookup::NotFound => return Decision::Keep("this pod is not found; cannot tell its owner".into()),
        Lookup::Unavailable(why) => return Decision::Keep(format!("cannot read this pod ({why}): not evidence")),
    };
    let ds = match &evidence.daemonset {
        None => return Decision::Keep("the owning DaemonSet was not looked up".into()),
        Some(Lookup::NotFound) => return Decision::Remove(format!("DaemonSet {} is gone", owner.name)),
        Some(Lookup::Unavailable(why)) => {
            return Decision::Keep(format!("cannot read DaemonSet {} ({why}): not evidence", owner.name));
        }
        Some(Lookup::Found(ds)) => ds,
    };
    if ds.deleting && ds.uid == owner.uid {
        return Decision::Remove(format!("DaemonSet {} is being deleted", owner.name));
    }
    let node = match &evidence.node {
        Lookup::Found(node) => node,
        Lookup::NotFound => return Decision::Keep("this node is not found in the API: not evidence".into()),
        Lookup::Unavailable(why) => return Decision::Keep(format!("cannot read this node ({why}): not evidence")),
    };
    // A DaemonSet of the same name but another UID replaced ours: it decides by its selection.
    let replaced = if ds.uid == owner.uid {
        ""
    } else {
        " (a new DaemonSet of that name)"
    };
    if ds.deleting {
        return Decision::Keep(format!(
            "DaemonSet {}{replaced} is being deleted, but it is not this pod's owner",
            owner.name
        ));
    }
    if !matches_node(&ds.selection, &node.labels, &node.name) {
        return Decision::Remove(format!(
            "node {} is no longer selected by DaemonSet {}{replaced}",
            node.name, owner.name
        ));
    }
    Decision::Keep(format!(
        "DaemonSet {}{replaced} still selects node {}: an update, eviction, reboot or restart",
        owner.name, node.name
    ))
}

/// Whether a node with `labels` and `name` satisfies `selection` (the scheduler's rules for
/// `nodeSelector` and `requiredDuringSchedulingIgnoredDuringExecution`).
pub fn matches_node(selection: &NodeSelection, labels: &BTreeMap<String, String>, name: &str) -> bool {
    let selector_ok = selection.node_selector.iter().all(|(k, v)| labels.get(k) == Some(v));
    let terms_ok =
        selection.required_terms.is_empty() || selection.required_terms.iter().any(|t| term_matches(t, labels, name));
    selector_ok && terms_ok
}

fn term_matches(term: &NodeSelectorTerm, labels: &BTreeMap<String, String>, name: &str) -> bool {
    let expressions = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    // A term with no requirements matches nothing (as in the scheduler).
    if expressions.is_empty() && fields.is_empty() {
        return false;
    }
    expressions
        .iter()
        .all(|r| requirement_matches(r, labels.get(&r.key).map(String::as_str)))
        && fields
            .iter()
            .all(|r| r.key == "metadata.name" && requirement_matches(r, Some(name)))
}

fn requirement_matches(r: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = r.values.as_deref().unwrap_or_default();
    let number = |s: &str| s.parse::<i64>().ok();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| !values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" => matches!((value.and_then(number), values.first().and_then(|x| number(x))), (Some(v), Some(x)) if v > x),
        "Lt" => matches!((value.and_then(number), values.first().and_then(|x| number(x))), (Some(v), Some(x)) if v < x),
        _ => false,
    }
}

/// The controlling DaemonSet of a pod, if any.
pub fn daemonset_owner(pod: &Pod) -> Option<Owner> {
    pod.metadata.owner_references.as_ref()?.iter().find_map(|r| {
        (r.kind == "DaemonSet" && r.controller == Some(true)).then(|| Owner {
            name: r.name.clone(),
            uid: r.uid.clone(),
        })
    })
}

pub fn daemonset_facts(ds: &DaemonSet) -> DaemonSetFacts {
    let pod_spec = ds.spec.as_ref().and_then(|s| s.template.spec.as_ref());
    let node_selector = pod_spec
        .and_then(|s| s.node_selector.clone())
        .unwrap_or_default()
        .into_iter()
        .collect();
    let required_terms = pod_spec
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| n.required_during_scheduling_ignored_during_execution.as_ref())
        .map(|r| r.node_selector_terms.clone())
        .unwrap_or_default();
    DaemonSetFacts {
        uid: ds.metadata.uid.clone().unwrap_or_default(),
        deleting: ds.metadata.deletion_timestamp.is_some(),
        selection: NodeSelection {
            node_selector,
            required_terms,
        },
    }
}

pub fn node_facts(node: &Node) -> NodeFacts {
    NodeFacts {
        name: node.metadata.name.clone().unwrap_or_default(),
        labels: node.metadata.labels.clone().unwrap_or_default().into_iter().collect(),
        deleting: node.metadata.deletion_timestamp.is_some(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner() -> Lookup<Option<Owner>> {
        Lookup::Found(Some(Owner {
            name: "kube-apiserver".into(),
            uid: "ds-1".into(),
        }))
    }

    fn ds(uid: &str, deleting: bool, selector: &[(&str, &str)]) -> Option<Lookup<DaemonSetFacts>> {
        Some(Lookup::Found(DaemonSetFacts {
            uid: uid.into(),
            deleting,
            selection: NodeSelection {
                node_selector: selector.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
                required_terms: vec![],
            },
        }))
    }

    fn node(labels: &[(&str, &str)], deleting: bool) -> Lookup<NodeFacts> {
        Lookup::Found(NodeFacts {
            name: "cp-1".into(),
            labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            deleting,
        })
    }

    fn unavailable<T>() -> Lookup<T> {
        Lookup::Unavailable("connection refused".into())
    }

    const SEL: &[(&str, &str)] = &[("kubernetes-apiserver", "enabled")];

    fn ev(
        owner: Lookup<Option<Owner>>,
        daemonset: Option<Lookup<DaemonSetFacts>>,
        node: Lookup<NodeFacts>,
    ) -> Evidence {
        Evidence { owner, daemonset, node }
    }

    fn is_remove(d: &Decision) -> bool {
        matches!(d, Decision::Remove(_))
    }

    /// Every combination of the inputs: removal exactly when there is positive evidence.
    #[test]
    fn exhaustive_guarded_table() {
        let owners = vec![
            ("owned", owner()),
            ("no owner", Lookup::Found(None)),
            ("pod 404", Lookup::NotFound),
            ("pod unreadable", unavailable()),
        ];
        let daemonsets = vec![
            ("ds present, selects", ds("ds-1", false, SEL)),
            ("ds present, other selector", ds("ds-1", false, &[("other", "x")])),
            ("ds deleting", ds("ds-1", true, SEL)),
            ("ds replaced, selects", ds("ds-2", false, SEL)),
            ("ds replaced, other selector", ds("ds-2", false, &[("other", "x")])),
            ("ds replaced and deleting", ds("ds-2", true, SEL)),
            ("ds 404", Some(Lookup::NotFound)),
            ("ds unreadable", Some(unavailable())),
            ("ds not looked up", None),
        ];
        let nodes = vec![
            ("node labelled", node(SEL, false)),
            ("node unlabelled", node(&[], false)),
            ("node deleting", node(SEL, true)),
            ("node 404", Lookup::NotFound),
            ("node unreadable", unavailable()),
        ];
        let mut removals = 0;
        for (o_name, o) in &owners {
            for (d_name, d) in &daemonsets {
                for (n_name, n) in &nodes {
                    let decision = decide(CleanupMode::Guarded, &ev(o.clone(), d.clone(), n.clone()));
                    let owned = *o_name == "owned";
                    let expected = *n_name == "node deleting"
                        || (owned && (*d_name == "ds 404" || *d_name == "ds deleting"))
                        || (owned
                            && matches!(
                                *d_name,
                                "ds present, selects"
                                    | "ds present, other selector"
                                    | "ds replaced, selects"
                                    | "ds replaced, other selector"
                            )
                            && matches!(*n_name, "node labelled" | "node unlabelled")
                            && (d_name.ends_with("other selector") || *n_name == "node unlabelled"));
                    assert_eq!(
                        is_remove(&decision),
                        expected,
                        "{o_name} / {d_name} / {n_name}: {decision:?}"
                    );
                    removals += usize::from(expected);
                }
            }
        }
        assert!(removals > 0 && removals < owners.len() * daemonsets.len() * nodes.len());
    }

    #[test]
    fn an_unreachable_api_is_never_evidence() {
        let d = decide(CleanupMode::Guarded, &ev(unavailable(), None, unavailable()));
        assert!(matches!(&d, Decision::Keep(r) if r.contains("not evidence")), "{d:?}");
    }

    #[test]
    fn modes_override() {
        let e = ev(owner(), ds("ds-1", false, SEL), node(SEL, false));
        assert!(!is_remove(&decide(CleanupMode::Guarded, &e)));
        assert!(is_remove(&decide(CleanupMode::Always, &e)));
        let gone = ev(owner(), Some(Lookup::NotFound), node(SEL, false));
        assert!(!is_remove(&decide(CleanupMode::Never, &gone)));
    }

    fn req(key: &str, op: &str, values: &[&str]) -> NodeSelectorRequirement {
        NodeSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
        }
    }

    #[test]
    fn node_affinity_operators() {
        let labels: BTreeMap<String, String> = [
            ("role".to_string(), "cp".to_string()),
            ("gen".to_string(), "5".to_string()),
        ]
        .into();
        let cases = [
            (req("role", "In", &["cp", "x"]), true),
            (req("role", "In", &["worker"]), false),
            (req("role", "NotIn", &["worker"]), true),
            (req("missing", "NotIn", &["x"]), true),
            (req("role", "Exists", &[]), true),
            (req("missing", "Exists", &[]), false),
            (req("missing", "DoesNotExist", &[]), true),
            (req("gen", "Gt", &["4"]), true),
            (req("gen", "Lt", &["4"]), false),
            (req("role", "Gt", &["4"]), false),
            (req("role", "Bogus", &["cp"]), false),
        ];
        for (r, want) in cases {
            let sel = NodeSelection {
                node_selector: BTreeMap::new(),
                required_terms: vec![NodeSelectorTerm {
                    match_expressions: Some(vec![r.clone()]),
                    match_fields: None,
                }],
            };
            assert_eq!(matches_node(&sel, &labels, "cp-1"), want, "{r:?}");
        }
        // Terms are ORed; an empty term matches nothing; matchFields on metadata.name.
        let by_name = NodeSelectorTerm {
            match_expressions: None,
            match_fields: Some(vec![req("metadata.name", "In", &["cp-1"])]),
        };
        let never = NodeSelectorTerm::default();
        let sel = NodeSelection {
            node_selector: BTreeMap::new(),
            required_terms: vec![never.clone(), by_name],
        };
        assert!(matches_node(&sel, &labels, "cp-1"));
        assert!(!matches_node(&sel, &labels, "cp-2"));
        let sel = NodeSelection {
            node_selector: BTreeMap::new(),
            required_terms: vec![never],
        };
        assert!(!matches_node(&sel, &labels, "cp-1"));
    }

    #[test]
    fn facts_from_real_objects() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "x"},
                {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "kube-apiserver", "uid": "ds-1", "controller": true}
            ]}
        }))
        .unwrap();
        assert_eq!(
            daemonset_owner(&pod),
            Some(Owner {
                name: "kube-apiserver".into(),
                uid: "ds-1".into()
            })
        );
        let d: DaemonSet = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "kube-apiserver", "uid": "ds-1", "deletionTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"selector": {}, "template": {"spec": {"containers": [], "nodeSelector": {"a": "b"},
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "Exists"}]}]}}}}}}
        }))
        .unwrap();
        let f = daemonset_facts(&d);
        assert!(f.deleting);
        assert_eq!(f.selection.node_selector.get("a").map(String::as_str), Some("b"));
        assert_eq!(f.selection.required_terms.len(), 1);
    }
}
