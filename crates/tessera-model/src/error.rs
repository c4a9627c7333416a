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
    #[error("field {field}: {reason}")]
    Invalid {
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
            field: field.to_string(),
            reason,
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
            SpecError::Syntax { line, .. } => *line,
            _ => None,
        }
    }
}
