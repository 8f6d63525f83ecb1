//! The layout of kube-anchor's state dir, shared by the ledger, the revision history, the kept
//! originals and the etcd membership record.

/// The state dir holds one subdirectory per schema, so a future format never reads this one.
pub const STATE_SUBDIR: &str = "v1";
