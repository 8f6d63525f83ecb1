//! Shared helpers for the integration tests.

pub mod background;
pub mod checkpointer;
pub mod cluster;
pub mod daemon;
pub mod fixture;
pub mod helm;
pub mod kubeadm;
pub mod kubectl;
pub mod poll;
pub mod poller;
pub mod selfhosted;
