//! The `Anchor` config parser on arbitrary text: never panics; an accepted config keeps every
//! path inside the allowed root and outside the state dir.
#![no_main]

use std::path::Path;

use kube_anchor_core::hostpath::{AllowedRoots, HostPath};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let state = HostPath::parse("/var/lib/kube-anchor").unwrap();
    let root = HostPath::parse("/etc/kubernetes").unwrap();
    let roots = AllowedRoots::with_state_dir(state.clone(), [root.clone()]).unwrap();
    if let Ok(anchor) = kube_anchor_core::config::parse(Path::new("/cfg/anchor.yaml"), text, &roots) {
        for file in &anchor.files {
            assert!(
                file.path.starts_with(&root) && file.path != root,
                "{} escapes",
                file.path
            );
            assert!(!file.path.starts_with(&state), "{} in the state dir", file.path);
        }
    }
});
