//! Static pod validation of arbitrary YAML/JSON. Never panics; a manifest it accepts is written
//! (with the hash annotation) as YAML that it accepts again as the same pod.
#![no_main]

use std::path::Path;

use kube_anchor_core::staticpod;
use libfuzzer_sys::fuzz_target;

const HASH: &str = "sha256:0000000000000000000000000000000000000000000000000000000000000000";

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(pod) = staticpod::parse(Path::new("pod.yaml"), text) else {
        return;
    };
    let written = pod.to_yaml_with_hash(HASH);
    let written = String::from_utf8(written).expect("written YAML is UTF-8");
    let again = staticpod::parse(Path::new("written.yaml"), &written)
        .unwrap_or_else(|e| panic!("the written manifest is refused: {e}\n{written}"));
    assert_eq!((&again.name, &again.namespace), (&pod.name, &pod.namespace));
    assert_eq!(
        again.to_yaml_with_hash(HASH),
        written.as_bytes(),
        "writing is not stable"
    );
});
