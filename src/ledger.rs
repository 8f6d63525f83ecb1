//! The ledger: per component, what kube-anchor wrote on this node. Pure data and its encoding;
//! [`crate::hostfs`] stores it with the same atomic writer as everything else.
//!
//! On disk (`<state-dir>/v1/<component>.json`) it is an envelope
//! `{"schemaVersion": 1, "checksum": "sha256:<hex>", "ledger": {...}}` whose checksum covers the
//! exact bytes of `ledger`. A file that fails to parse or to verify is never trusted.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::config::{FileMode, Owner, Role};
use crate::desired::sha256_hex;
use crate::hostpath::HostPath;

pub const SCHEMA_VERSION: u32 = 1;
/// The state dir holds one subdirectory per schema, so a future format never reads this one.
pub const STATE_SUBDIR: &str = "v1";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LedgerEntry {
    pub path: HostPath,
    pub sha256: String,
    pub mode: FileMode,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<Owner>,
    pub role: Role,
    /// RFC 3339, UTC.
    pub written_at: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ledger {
    pub component: String,
    /// The content hash of the last successful apply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_hash: Option<String>,
    /// Sorted by path.
    files: Vec<LedgerEntry>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{reason}")]
pub struct CorruptLedger {
    pub reason: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct EnvelopeOut<'a> {
    schema_version: u32,
    checksum: String,
    ledger: &'a RawValue,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct EnvelopeIn<'a> {
    schema_version: u32,
    checksum: String,
    #[serde(borrow)]
    ledger: &'a RawValue,
}

impl Ledger {
    pub fn new(component: &str) -> Self {
        Self {
            component: component.into(),
            content_hash: None,
            files: Vec::new(),
        }
    }

    pub fn file_name(component: &str) -> String {
        format!("{component}.json")
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    pub fn entries(&self) -> &[LedgerEntry] {
        &self.files
    }

    pub fn get(&self, path: &HostPath) -> Option<&LedgerEntry> {
        self.files
            .binary_search_by(|e| e.path.cmp(path))
            .ok()
            .map(|i| &self.files[i])
    }

    pub fn record(&mut self, entry: LedgerEntry) {
        match self.files.binary_search_by(|e| e.path.cmp(&entry.path)) {
            Ok(i) => self.files[i] = entry,
            Err(i) => self.files.insert(i, entry),
        }
    }

    pub fn forget(&mut self, path: &HostPath) {
        self.files.retain(|e| &e.path != path);
    }

    /// Manifests first (a pod must stop before its files go), then the rest, each by path.
    pub fn entries_in_removal_order(&self) -> impl Iterator<Item = &LedgerEntry> {
        let manifests = self.files.iter().filter(|e| e.role == Role::Manifest);
        manifests.chain(self.files.iter().filter(|e| e.role != Role::Manifest))
    }

    pub fn encode(&self) -> Vec<u8> {
        let body = serde_json::to_string_pretty(self).expect("a ledger always serializes");
        let raw = RawValue::from_string(body).expect("serde_json output is valid JSON");
        let envelope = EnvelopeOut {
            schema_version: SCHEMA_VERSION,
            checksum: format!("sha256:{}", sha256_hex(raw.get().as_bytes())),
            ledger: &raw,
        };
        let mut out = serde_json::to_vec(&envelope).expect("an envelope always serializes");
        out.push(b'\n');
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, CorruptLedger> {
        let corrupt = |reason: String| CorruptLedger { reason };
        let envelope: EnvelopeIn = serde_json::from_slice(bytes).map_err(|e| corrupt(format!("not a ledger: {e}")))?;
        if envelope.schema_version != SCHEMA_VERSION {
            return Err(corrupt(format!(
                "schema version {} (this build reads {SCHEMA_VERSION})",
                envelope.schema_version
            )));
        }
        let actual = format!("sha256:{}", sha256_hex(envelope.ledger.get().as_bytes()));
        if actual != envelope.checksum {
            return Err(corrupt(format!(
                "checksum mismatch: recorded {}, computed {actual}",
                envelope.checksum
            )));
        }
        let mut ledger: Ledger =
            serde_json::from_str(envelope.ledger.get()).map_err(|e| corrupt(format!("bad ledger body: {e}")))?;
        ledger.files.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(ledger)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Ledger {
        let mut l = Ledger::new("kube-apiserver");
        l.content_hash = Some("sha256:abc".into());
        for (path, role) in [
            ("/etc/kubernetes/z", Role::Credential),
            ("/etc/kubernetes/m.yaml", Role::Manifest),
            ("/etc/kubernetes/a", Role::Credential),
        ] {
            l.record(LedgerEntry {
                path: HostPath::parse(path).unwrap(),
                sha256: sha256_hex(path.as_bytes()),
                mode: FileMode(0o600),
                owner: Some(Owner { uid: 0, gid: 0 }),
                role,
                written_at: "2026-11-22T13:00:00Z".into(),
            });
        }
        l
    }

    #[test]
    fn round_trips() {
        let l = sample();
        assert_eq!(Ledger::decode(&l.encode()).unwrap(), l);
        let text = String::from_utf8(l.encode()).unwrap();
        assert!(
            text.contains("\"schemaVersion\":1") && text.contains("\"mode\": \"0600\""),
            "{text}"
        );
    }

    #[test]
    fn record_replaces_and_keeps_order() {
        let mut l = sample();
        let paths: Vec<_> = l.entries_in_removal_order().map(|e| e.path.to_string()).collect();
        assert_eq!(
            paths,
            ["/etc/kubernetes/m.yaml", "/etc/kubernetes/a", "/etc/kubernetes/z"]
        );
        let mut e = l.entries()[0].clone();
        e.sha256 = "new".into();
        l.record(e.clone());
        assert_eq!(l.entries().len(), 3);
        assert_eq!(l.get(&e.path).unwrap().sha256, "new");
        l.forget(&e.path);
        assert!(l.get(&e.path).is_none());
    }

    #[test]
    fn any_flipped_byte_is_detected() {
        let bytes = sample().encode();
        let mut detected = 0;
        let mut survived = Vec::new();
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x01;
            match Ledger::decode(&b) {
                Err(_) => detected += 1,
                // A flip that only touches JSON whitespace or key case may still decode to the
                // same ledger; it must never decode to a different one.
                Ok(l) => survived.push((i, l)),
            }
        }
        assert!(detected > bytes.len() * 9 / 10, "{detected}/{}", bytes.len());
        for (i, l) in survived {
            assert_eq!(l, sample(), "flip at {i} changed the content undetected");
        }
    }

    #[test]
    fn truncation_and_wrong_versions_are_corrupt() {
        let bytes = sample().encode();
        assert!(Ledger::decode(&bytes[..bytes.len() / 2]).is_err());
        assert!(Ledger::decode(b"").is_err());
        let v2 = String::from_utf8(bytes)
            .unwrap()
            .replace("\"schemaVersion\":1", "\"schemaVersion\":2");
        assert!(
            Ledger::decode(v2.as_bytes())
                .unwrap_err()
                .reason
                .contains("schema version 2")
        );
    }
}
