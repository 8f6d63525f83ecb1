//! kube-anchor's decisions. Everything here is a function of data: no filesystem, no Kubernetes
//! client, no async runtime. The adapters (`kube-anchor-host`, `kube-anchor-k8s`) observe and
//! act; the modes (`kube-anchor-modes`) wire observation → decision → execution.

#![forbid(unsafe_code)]

pub mod bootstrap;
pub mod change;
pub mod checkpoint;
pub mod config;
pub mod credentials;
pub mod decommission;
pub mod desired;
pub mod digest;
pub mod drain_guard;
pub mod errors;
pub mod etcd_defrag;
pub mod etcd_snapshot;
pub mod history;
pub mod hostpath;
pub mod import;
pub mod join_steps;
pub mod kubelet_start;
pub mod ledger;
pub mod lifecycle;
pub mod machine;
pub mod margin;
pub mod membership;
pub mod node_status;
pub mod pause;
pub mod pinned;
pub mod plan;
pub mod pod_rules;
pub mod pod_status;
pub mod prestop_steps;
pub mod render;
pub mod rollout;
pub mod runtime;
pub mod sanitize;
pub mod skew;
pub mod state_layout;
pub mod staticpod;
pub mod trial;
pub mod turn;
pub mod yaml;
