//! kube-anchor's adapters to the cluster: the Kubernetes API (one client over several API
//! servers, mirror pods, Events, the rollout Lease, the removal evidence), the kubelet and health
//! URLs, and etcd's cluster API.

#![forbid(unsafe_code)]

pub mod anchor_status;
pub mod client_check;
pub mod cri;
pub mod direct;
pub mod drain_guard;
pub mod etcd;
pub mod evidence;
pub mod failover;
pub mod kubeapi;
pub mod margin;
#[cfg(test)]
mod test_http;
