//! Errors of spec parsing and validation.

use thiserror::Error;

/// A cluster, catalog or job spec that cannot be used. Messages name the offending field so
/// that the CLI can print `file:line: field: reason`.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum SpecError {
    /// The document is not valid YAML/JSON of the expected shape.
    #[error("{}{message}", location_prefix(*.line, *.column))]
    Syntax {
        /// 1-based line, when the parser knows it.
        line: Option<usize>,
        /// 1-based column, when the parser knows it.
        column: Option<usize>,
        /// The parser's message.
        message: String,
    },
    /// A field has a value that is out of range or inconsistent.
    #[error("{}field {field}: {reason}", location_prefix(*.line, None))]
    Invalid {
        /// 1-based line of the field in the source text, when known.
        line: Option<usize>,
        /// Dotted path of the field, e.g. `spec.nodeGroups[1].gpusPerNode`.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// A GPU model that the catalog does not know.
    #[error("unknown GPU model {name:?} (known: {known})")]
    UnknownGpu {
        /// The name as given.
        name: String,
        /// Comma-separated known names.
        known: String,
    },
}

fn location_prefix(line: Option<usize>, column: Option<usize>) -> String {
    match (line, column) {
        (Some(l), Some(c)) => format!("line {l}, column {c}: "),
        (Some(l), None) => format!("line {l}: "),
        _ => String::new(),
    }
}

impl SpecError {
    pub(crate) fn invalid(field: &str, reason: String) -> SpecError {
        SpecError::Invalid {
            line: None,
            field: field.to_string(),
            reason,
        }
    }

    /// Fills in the line of an `Invalid` field by looking its path up in the YAML source.
    pub(crate) fn located_in(self, text: &str) -> SpecError {
        match self {
            SpecError::Invalid {
                line: None,
                field,
                reason,
            } => SpecError::Invalid {
                line: locate_field(text, &field),
                field,
                reason,
            },
            other => other,
        }
    }

    pub(crate) fn from_yaml(e: serde_norway::Error) -> SpecError {
        let loc = e.location();
        SpecError::Syntax {
            line: loc.as_ref().map(|l| l.line()),
            column: loc.as_ref().map(|l| l.column()),
            message: e.to_string(),
        }
    }

    /// The 1-based line the error points at, if known.
    pub fn line(&self) -> Option<usize> {
        match self {
            SpecError::Syntax { line, .. } | SpecError::Invalid { line, .. } => *line,
            SpecError::UnknownGpu { .. } => None,
        }
    }
}

/// Best-effort line of a dotted field path (`spec.nodeGroups[1].gpu`) in block- or flow-style
/// YAML: each key is searched from where its parent was found, and `[i]` steps to the i-th
/// list item after it. Good enough to point a user at the right line; `None` if not found.
pub fn locate_field(text: &str, path: &str) -> Option<usize> {
    let lines: Vec<&str> = text.lines().collect();
    let has_key = |line: &str, key: &str| {
        let pat = format!("{key}:");
        line.match_indices(&pat).any(|(at, _)| {
            at == 0 || matches!(line.as_bytes()[at - 1], b' ' | b'{' | b',' | b'-' | b'\t')
        })
    };
    let mut pos = 0;
    for segment in path.split('.') {
        let (key, index) = match segment.split_once('[') {
            Some((k, rest)) => (k, rest.trim_end_matches(']').parse::<usize>().ok()),
            None => (segment, None),
        };
        pos = (pos..lines.len()).find(|&l| has_key(lines[l], key))?;
        if let Some(i) = index {
            let items: Vec<usize> = (pos + 1..lines.len())
                .filter(|&l| lines[l].trim_start().starts_with('-'))
                .collect();
            pos = *items.get(i)?;
        }
    }
    Some(pos + 1)
}
