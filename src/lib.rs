//! kube-anchor: keeps Kubernetes control-plane static pods, and their credentials, on the node.
//!
//! Layers, by dependency (nothing imports upward):
//! - pure decisions: [`render`], [`staticpod`], [`config`], [`hostpath`], [`desired`], [`plan`],
//!   [`ledger`] — no filesystem, no Kubernetes client;
//! - adapters: [`hostfs`] (the node's filesystem and the one executor);
//! - wiring: [`engine`] (load, decide, execute, record) and [`commands`] (the CLI verbs).

pub mod cli;
pub mod commands;
pub mod config;
pub mod desired;
pub mod engine;
pub mod hostfs;
pub mod hostpath;
pub mod ledger;
pub mod logging;
pub mod plan;
pub mod render;
pub mod staticpod;
