//! Shared helpers for the integration tests.

pub mod background;
pub mod checkpointed;
pub mod checkpointer;
pub mod control_plane;
pub mod daemon;
pub mod fixture;
pub mod helm;
pub mod kubeadm;
pub mod kubectl;
pub mod nodes;
pub mod pki;
pub mod poll;
pub mod poller;
pub mod processes;
pub mod registry;
pub mod selfhosted;
pub mod severable;
