//! `status --output json` is a documented, versioned interface: every document it prints, in
//! every file state, validates against schemas/status.v1.json.

mod support;

use std::fs;

use support::fixture::*;

fn status(f: &Fixture) -> serde_json::Value {
    let out = f.run("status", &["--output", "json"]);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(&out)))
}

fn assert_valid(doc: &serde_json::Value, what: &str) {
    let (schemas, index) = status_schema();
    if let Err(e) = schemas.validate(doc, index) {
        panic!("{what}: {doc:#}\ndoes not match schemas/status.v1.json: {e:#}");
    }
}

#[test]
fn every_status_document_matches_the_schema() {
    let f = Fixture::new();
    // Nothing applied yet: missing files, no applied hash.
    let never = status(&f);
    assert_eq!(never["appliedHash"], serde_json::Value::Null);
    assert_valid(&never, "never applied");
    assert_success(&f.apply());
    let in_sync = status(&f);
    assert_eq!(in_sync["inSync"], true);
    assert_eq!(in_sync["schemaVersion"], 1);
    assert_valid(&in_sync, "in sync");
    // Drifted and missing files.
    fs::write(f.host("/etc/kubernetes/pki/ca.crt"), "edited").unwrap();
    fs::remove_file(f.host("/etc/kubernetes/pki/apiserver.key")).unwrap();
    let drifted = status(&f);
    let states: Vec<&str> = drifted["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["state"].as_str().unwrap())
        .collect();
    assert!(states.contains(&"drifted") && states.contains(&"missing"), "{states:?}");
    assert_valid(&drifted, "drifted");
}

#[test]
fn the_schema_rejects_what_status_never_prints() {
    let f = Fixture::new();
    assert_success(&f.apply());
    let mut doc = status(&f);
    doc["files"][0]["state"] = "half-written".into();
    let (schemas, index) = status_schema();
    assert!(
        schemas.validate(&doc, index).is_err(),
        "an unknown state must not validate"
    );
    let mut doc = status(&f);
    doc["contentHash"] = "md5:abc".into();
    assert!(
        schemas.validate(&doc, index).is_err(),
        "a malformed hash must not validate"
    );
    let mut doc = status(&f);
    doc.as_object_mut().unwrap().remove("schemaVersion");
    assert!(schemas.validate(&doc, index).is_err(), "the version is required");
}
