//! The guards every YAML text passes before it is decoded: a bounded flow depth (libyaml's time
//! is quadratic in it), and no merge keys or tags, which Kubernetes' own decoder (go-yaml under
//! sigs.k8s.io/yaml) reads differently from serde_yaml_ng. Manifests, the config, `helm template`
//! output and imported kubeadm manifests all pass through here.

use serde_yaml_ng::Value;

/// More open `[`/`{` than this refuse a YAML text before it is parsed: libyaml (under
/// serde_yaml_ng) spends time quadratic in the flow depth before any recursion limit applies,
/// and nothing kube-anchor reads nests a tenth as deep.
pub(crate) const MAX_FLOW_DEPTH: usize = 1000;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum YamlError {
    #[error("nests deeper than {MAX_FLOW_DEPTH} levels of [ and {{ (the bracket at byte {offset})")]
    TooDeep { offset: usize },
    #[error("not valid YAML: {0}")]
    Syntax(String),
    #[error("{field}: {}", MERGE_KEY_PROBLEM)]
    MergeKey { field: String },
    #[error("{field}: {}", TAG_PROBLEM)]
    Tag { field: String },
}

pub(crate) const MERGE_KEY_PROBLEM: &str = "a YAML merge key (<<); the kubelet's decoder merges it and this validation \
                                     would not see the result: write the fields out";
pub(crate) const TAG_PROBLEM: &str = "a YAML tag (`!…`); the kubelet's decoder and this one read tagged nodes \
                               differently, and it cannot be written back as it was: remove the tag";

/// `Err(byte offset)` of the first bracket past [`MAX_FLOW_DEPTH`]. Every `[`/`{` counts,
/// quoted or not (a scanner that skips quotes can be fooled into skipping real brackets); a
/// real manifest never comes close.
pub(crate) fn check_flow_depth(text: &str) -> Result<(), usize> {
    let mut depth = 0usize;
    for (offset, byte) in text.bytes().enumerate() {
        match byte {
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_FLOW_DEPTH {
                    return Err(offset);
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

/// Every document of `text` (empty ones as `Null`), after the flow-depth guard; merge keys and
/// tags are left for [`refuse_merge_keys_and_tags`], so a caller may judge the document's shape
/// first.
pub fn documents(text: &str) -> Result<Vec<Value>, YamlError> {
    check_flow_depth(text).map_err(|offset| YamlError::TooDeep { offset })?;
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|document| {
            serde::Deserialize::deserialize(document)
                .map_err(|e: serde_yaml_ng::Error| YamlError::Syntax(e.to_string()))
        })
        .collect()
}

/// One document, every guard applied: what a single-object YAML file is decoded through.
pub fn document(text: &str) -> Result<Value, YamlError> {
    check_flow_depth(text).map_err(|offset| YamlError::TooDeep { offset })?;
    let value: Value = serde_yaml_ng::from_str(text).map_err(|e| YamlError::Syntax(e.to_string()))?;
    refuse_merge_keys_and_tags(&value)?;
    Ok(value)
}

/// The first merge key, else the first tagged node, by its field path.
pub(crate) fn refuse_merge_keys_and_tags(value: &Value) -> Result<(), YamlError> {
    if let Some(field) = first_path(value, String::new(), &|k| k.as_str() == Some("<<"), &|_| false) {
        return Err(YamlError::MergeKey { field });
    }
    // Found by fuzzing: serde_yaml_ng keeps the tag and then cannot emit some of them (a
    // non-specific `!` on a mapping), which made writing a manifest panic.
    let tagged = |v: &Value| matches!(v, Value::Tagged(_));
    if let Some(field) = first_path(value, String::new(), &tagged, &tagged) {
        return Err(YamlError::Tag { field });
    }
    Ok(())
}

/// The path (`spec.containers[0].name`) of the first key for which `key_hit` holds, or of the
/// first value for which `value_hit` holds, depth first; the value inside a tag is searched too.
fn first_path(
    value: &Value,
    path: String,
    key_hit: &dyn Fn(&Value) -> bool,
    value_hit: &dyn Fn(&Value) -> bool,
) -> Option<String> {
    if value_hit(value) {
        return Some(if path.is_empty() { "(top level)".into() } else { path });
    }
    match value {
        Value::Mapping(map) => map.iter().find_map(|(k, v)| {
            let key = k.as_str().map_or_else(|| format!("{k:?}"), str::to_owned);
            let here = if path.is_empty() { key } else { format!("{path}.{key}") };
            if key_hit(k) {
                Some(here)
            } else {
                first_path(v, here, key_hit, value_hit)
            }
        }),
        Value::Sequence(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, v)| first_path(v, format!("{path}[{i}]"), key_hit, value_hit)),
        Value::Tagged(tagged) => first_path(&tagged.value, path, key_hit, value_hit),
        _ => None,
    }
}

/// A decoding error without Rust's type names: `invalid type: string "6443", expected i32`
/// becomes `found string "6443", expected a whole number`.
pub fn in_words(error: &str) -> String {
    let error = error
        .replace("invalid type: ", "found ")
        .replace("invalid value: ", "found ");
    let mut out = String::with_capacity(error.len());
    let mut rest = error.as_str();
    while let Some(at) = rest.find("expected ") {
        out.push_str(&rest[..at + "expected ".len()]);
        rest = &rest[at + "expected ".len()..];
        let end = rest.find([',', ' ', ';']).unwrap_or(rest.len());
        let word = &rest[..end];
        let plain = match word {
            "i8" | "i16" | "i32" | "i64" | "u8" | "u16" | "u32" | "u64" | "usize" => "a whole number",
            "f32" | "f64" => "a number",
            // `struct Foo`, `a map`, `a sequence`: the YAML names.
            "struct" | "a" => {
                let after = rest[end..].trim_start();
                let name_end = after.find([',', ' ', ';']).unwrap_or(after.len());
                let noun = match (word, &after[..name_end]) {
                    ("struct", _) | (_, "map") => "a mapping",
                    (_, "sequence") => "a list",
                    (_, other) => {
                        out.push_str("a ");
                        out.push_str(other);
                        rest = &after[name_end..];
                        continue;
                    }
                };
                out.push_str(noun);
                rest = &after[name_end..];
                continue;
            }
            _ => {
                out.push_str(word);
                rest = &rest[end..];
                continue;
            }
        };
        out.push_str(plain);
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guards() {
        let deep = "[".repeat(MAX_FLOW_DEPTH + 1);
        assert_eq!(document(&deep), Err(YamlError::TooDeep { offset: MAX_FLOW_DEPTH }));
        assert_eq!(documents(&deep), Err(YamlError::TooDeep { offset: MAX_FLOW_DEPTH }));
        assert!(matches!(document("a: [1"), Err(YamlError::Syntax(_))));
        assert_eq!(
            document("a:\n  b: {<<: {c: 1}}\n"),
            Err(YamlError::MergeKey { field: "a.b.<<".into() })
        );
        assert_eq!(document("a:\n  - !x 1\n"), Err(YamlError::Tag { field: "a[0]".into() }));
        assert_eq!(document("a: {b: [1, 2]}\n").unwrap()["a"]["b"][1], Value::from(2));
        assert_eq!(documents("a: 1\n---\n---\nb: 2\n").unwrap().len(), 3);
    }

    #[test]
    fn rust_type_names_become_words() {
        for (from, to) in [
            (
                "invalid type: string \"1\", expected i32",
                "found string \"1\", expected a whole number",
            ),
            ("invalid type: map, expected a sequence", "found map, expected a list"),
            (
                "invalid type: string \"x\", expected struct Container",
                "found string \"x\", expected a mapping",
            ),
            (
                "invalid type: sequence, expected a map",
                "found sequence, expected a mapping",
            ),
            (
                "invalid value: integer `-1`, expected u16",
                "found integer `-1`, expected a whole number",
            ),
            (
                "invalid type: integer `1`, expected a string",
                "found integer `1`, expected a string",
            ),
        ] {
            assert_eq!(in_words(from), to, "{from}");
        }
    }
}
