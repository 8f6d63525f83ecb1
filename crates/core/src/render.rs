//! `${NAME}` substitution for manifests and templated files. Pure: no environment, no IO.
//!
//! Only names listed in `spec.variables` may appear; `$${` is a literal `${`. Any other `$` is
//! left alone, so shell snippets in a manifest (`$HOME`, `$(date)`) pass through untouched.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RenderError {
    #[error("{}:{line}: ${{{name}}} is not listed in spec.variables", .file.display())]
    UnknownVariable { file: PathBuf, line: usize, name: String },
    #[error("{}:{line}: ${{{name}}} is listed in spec.variables but not set in the environment", .file.display())]
    UnsetVariable { file: PathBuf, line: usize, name: String },
    #[error("{}:{line}: malformed ${{...}}: expected ${{NAME}} with NAME of letters, digits and _ (write $${{ for a literal ${{)", .file.display())]
    Malformed { file: PathBuf, line: usize },
    #[error("{}: not UTF-8 text, so it cannot be rendered as a template", .file.display())]
    NotUtf8 { file: PathBuf },
}

/// The allow-listed variables and the values they have on this node.
#[derive(Debug, Clone, Default)]
pub struct Variables {
    allowed: BTreeSet<String>,
    values: BTreeMap<String, String>,
}

impl Variables {
    /// `lookup` is asked once for each allowed name (the environment, in production).
    pub fn new<I, S>(allowed: I, mut lookup: impl FnMut(&str) -> Option<String>) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let allowed: BTreeSet<String> = allowed.into_iter().map(Into::into).collect();
        let values = allowed
            .iter()
            .filter_map(|name| lookup(name).map(|v| (name.clone(), v)))
            .collect();
        Self { allowed, values }
    }

    /// The value of an allowed variable on this node.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }
}

pub(crate) fn is_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Renders `bytes` (read from `file`, named in errors) with `vars`.
pub fn render(file: &Path, bytes: &[u8], vars: &Variables) -> Result<String, RenderError> {
    let text = std::str::from_utf8(bytes).map_err(|_| RenderError::NotUtf8 { file: file.into() })?;
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut line = 1;
    while let Some(i) = rest.find('$') {
        let (before, at) = rest.split_at(i);
        out.push_str(before);
        line += before.matches('\n').count();
        if let Some(after) = at.strip_prefix("$${") {
            out.push_str("${");
            rest = after;
        } else if let Some(after) = at.strip_prefix("${") {
            let end = after
                .find(['}', '\n'])
                .filter(|&e| after.as_bytes()[e] == b'}')
                .ok_or_else(|| RenderError::Malformed {
                    file: file.into(),
                    line,
                })?;
            let name = &after[..end];
            if !is_variable_name(name) {
                return Err(RenderError::Malformed {
                    file: file.into(),
                    line,
                });
            }
            if !vars.allowed.contains(name) {
                return Err(RenderError::UnknownVariable {
                    file: file.into(),
                    line,
                    name: name.into(),
                });
            }
            let value = vars.values.get(name).ok_or_else(|| RenderError::UnsetVariable {
                file: file.into(),
                line,
                name: name.into(),
            })?;
            out.push_str(value);
            rest = &after[end + 1..];
        } else {
            out.push('$');
            rest = &at[1..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> Variables {
        Variables::new(["NODE_NAME", "NODE_IP", "UNSET"], |n| match n {
            "NODE_NAME" => Some("cp-1".into()),
            "NODE_IP" => Some("10.0.0.5".into()),
            _ => None,
        })
    }

    fn r(s: &str) -> Result<String, RenderError> {
        render(Path::new("m.yaml"), s.as_bytes(), &vars())
    }

    #[test]
    fn substitutes_allowed_variables() {
        assert_eq!(
            r("a ${NODE_NAME} b ${NODE_IP}${NODE_NAME}").unwrap(),
            "a cp-1 b 10.0.0.5cp-1"
        );
    }

    #[test]
    fn escapes_and_other_dollars_pass_through() {
        assert_eq!(
            r("$${NODE_NAME} $HOME $(date) $ $$").unwrap(),
            "${NODE_NAME} $HOME $(date) $ $$"
        );
        // Scanned left to right: a lone `$`, then the escape.
        assert_eq!(r("$$${NODE_NAME}").unwrap(), "$${NODE_NAME}");
    }

    #[test]
    fn unknown_variable_names_file_line_and_variable() {
        let err = r("a\nb\nc ${SECRET_THING}\n").unwrap_err();
        assert_eq!(
            err,
            RenderError::UnknownVariable {
                file: "m.yaml".into(),
                line: 3,
                name: "SECRET_THING".into()
            }
        );
        assert_eq!(
            err.to_string(),
            "m.yaml:3: ${SECRET_THING} is not listed in spec.variables"
        );
    }

    #[test]
    fn unset_variable_is_an_error() {
        assert_eq!(
            r("x: ${UNSET}").unwrap_err(),
            RenderError::UnsetVariable {
                file: "m.yaml".into(),
                line: 1,
                name: "UNSET".into()
            }
        );
    }

    #[test]
    fn malformed_references_are_errors() {
        for bad in ["${", "${NODE_NAME", "${}", "${1X}", "${A B}", "${NODE_NAME\n}"] {
            assert!(matches!(r(bad), Err(RenderError::Malformed { .. })), "{bad:?}");
        }
    }

    #[test]
    fn line_numbers_count_escaped_and_substituted_lines() {
        let err = r("${NODE_NAME}\n$${X}\n\n${NOPE}").unwrap_err();
        assert!(matches!(err, RenderError::UnknownVariable { line: 4, .. }), "{err:?}");
    }

    #[test]
    fn binary_input_is_refused() {
        assert_eq!(
            render(Path::new("k"), &[0xff, 0xfe], &vars()).unwrap_err(),
            RenderError::NotUtf8 { file: "k".into() }
        );
    }
}
