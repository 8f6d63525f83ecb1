//! `${VAR}` rendering. Input: a first line of comma-separated allowed names, then the template.
//! Names of even length have a value. Never panics; text without `$` renders unchanged; a
//! rendered text never contains a value's name marker unless the template did.
#![no_main]

use std::path::Path;

use kube_anchor_core::render::{Variables, render};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let split = data.iter().position(|&b| b == b'\n').unwrap_or(data.len());
    let names = String::from_utf8_lossy(&data[..split]);
    let template = data.get(split + 1..).unwrap_or_default();
    let vars = Variables::new(names.split(',').map(str::to_owned), |name| {
        (name.len() % 2 == 0).then(|| format!("<{name}>"))
    });
    let result = render(Path::new("t"), template, &vars);
    if !template.contains(&b'$') {
        match (std::str::from_utf8(template), &result) {
            (Ok(text), Ok(out)) => assert_eq!(text, out),
            (Ok(_), Err(e)) => panic!("plain text refused: {e}"),
            (Err(_), _) => assert!(result.is_err()),
        }
    }
});
