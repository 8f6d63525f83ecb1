//! The checkpoint sanitizer over arbitrary pods (JSON). Never panics; a checkpoint references no
//! API object, serializes, and is recognized as a checkpoint of its owner.
#![no_main]

use k8s_openapi::api::core::v1::Pod;
use kube_anchor_core::{sanitize, staticpod};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(pod) = serde_json::from_slice::<Pod>(data) else {
        return;
    };
    let _ = sanitize::is_parent(&pod);
    let _ = sanitize::controller_key(&pod);
    let _ = sanitize::checkpoint_owner(&pod);
    let Ok(checkpoint) = sanitize::sanitize(&pod, &sanitize::Layout::default()) else {
        return;
    };
    assert!(
        staticpod::api_references(&checkpoint.pod).is_empty(),
        "a checkpoint references API objects"
    );
    let json = checkpoint.to_json();
    let back: Pod = serde_json::from_slice(&json).expect("a checkpoint decodes");
    assert_eq!(back, checkpoint.pod);
    let _ = checkpoint.file_name();
    assert!(
        sanitize::checkpoint_owner(&back).is_some(),
        "a checkpoint without an owner"
    );
});
