//! kube-anchor's modes, wired from the layers below: [`anchor`] (the `run` daemon), [`prestop`],
//! [`checkpointer`], [`bootstrap_node`] (the first boot of a node), [`import`] (a kubeadm node
//! to chart values) and [`commands`] (the CLI verbs, output, exit codes); [`engine`] (load →
//! decide → execute → record) and [`etcd_member`] (join and leave, carried out) which they share;
//! and the process around them: [`cli`], [`logging`], [`server`], [`metrics`], [`shutdown`].

#![forbid(unsafe_code)]

pub mod anchor;
pub mod bootstrap_node;
pub mod checkpointer;
pub mod cli;
pub mod commands;
pub mod engine;
pub mod etcd_member;
pub mod import;
pub mod logging;
pub mod metrics;
pub mod prestop;
pub mod server;
pub mod shutdown;
