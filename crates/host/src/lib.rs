//! kube-anchor's adapter to the node: the host filesystem under `--host-root` (observation, the
//! one executor of `plan::Op`s, ledger storage, the state lock), inotify change notification and
//! the process's memory.

#![deny(unsafe_code)] // `memory` alone allows it (mallopt, madvise), and one test (fcntl).

pub mod etcd_data;
pub mod hostfs;
pub mod memory;
pub mod watch;
