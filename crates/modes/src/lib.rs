//! kube-anchor's modes, wired from the layers below: [`anchor`] (the `run` daemon), [`prestop`],
//! [`checkpointer`], [`bootstrap_node`] (the first boot of a node), [`import`] (a kubeadm node
//! to chart values) and [`commands`] (the CLI verbs, output, exit codes); [`engine`] (load →
//! decide → execute → record), [`etcd_member`] (join and leave, carried out), [`etcd_snapshots`]
//! (scheduled snapshots) and [`etcd_defrag`] (rolling defragmentation) which they share;
//! and the process around them: [`cli`], [`logging`], [`server`], [`metrics`], [`shutdown`].

#![forbid(unsafe_code)]
#![warn(unreachable_pub)]

mod anchor;
mod bootstrap_node;
mod checkpointer;
mod cli;
pub mod commands;
pub mod engine;
mod etcd_defrag;
mod etcd_member;
mod etcd_snapshots;
mod fleet;
mod import;
mod kubelet_pre_start;
mod logging;
mod metrics;
mod output;
mod prestop;
mod server;
mod shutdown;
