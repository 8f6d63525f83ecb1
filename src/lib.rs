//! kube-anchor: keeps Kubernetes control-plane static pods, and their credentials, on the node.
//!
//! Layers, by dependency (nothing imports upward):
//! - pure decisions: [`render`], [`staticpod`], [`config`], [`hostpath`], [`desired`], [`plan`],
//!   [`ledger`], [`trial`], [`decommission`], [`pinned`], [`membership`], [`bootstrap`], [`rollout`] — no filesystem, no
//!   Kubernetes client;
//! - adapters: [`hostfs`] (the node's filesystem and the one executor), [`kubeapi`] (the API,
//!   Events, the health URL), [`failover`] (one client over several API servers), [`etcd`] (etcd's cluster API), [`watch`] (inotify), [`server`]
//!   (HTTP endpoints), [`metrics`], [`shutdown`] (signals), [`memory`] (malloc arenas, resident
//!   code);
//! - wiring: [`engine`] (load, decide, execute, record), [`etcd_member`] (join and leave),
//!   [`bootstrap_node`] (the first boot of a node from `helm template` output),
//!   [`anchor`] (the daemon), [`prestop`], [`import`] (a kubeadm node's manifests to chart
//!   values; its decisions pure, its IO in a thin layer) and
//!   [`commands`] (the CLI verbs).

pub mod anchor;
pub mod bootstrap;
pub mod bootstrap_node;
pub mod checkpoint;
pub mod checkpointer;
pub mod cli;
pub mod commands;
pub mod config;
pub mod decommission;
pub mod desired;
pub mod engine;
pub mod etcd;
pub mod etcd_member;
pub mod failover;
pub mod hostfs;
pub mod hostpath;
pub mod import;
pub mod kubeapi;
pub mod ledger;
pub mod logging;
pub mod membership;
pub mod memory;
pub mod metrics;
pub mod pinned;
pub mod plan;
pub mod prestop;
pub mod render;
pub mod rollout;
pub mod sanitize;
pub mod server;
pub mod shutdown;
pub mod sim;
pub mod staticpod;
#[cfg(test)]
mod test_http;
pub mod trial;
pub mod watch;
