//! Errors of trace reading and writing, located at `file:line` and a field.

use std::fmt;

use thiserror::Error;

/// A trace that cannot be read (or written), with where the problem is.
///
/// Displays on one line as `FILE:LINE: field FIELD: reason`; the line and field parts are left
/// out when unknown.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceError {
    /// The file (or other source name) being read.
    pub source: String,
    /// 1-based line of the offending row, when known.
    pub line: Option<u64>,
    /// The column (field) at fault, when one is.
    pub field: Option<String>,
    /// What is wrong.
    pub kind: TraceErrorKind,
}

/// What is wrong with a trace row or file.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum TraceErrorKind {
    /// The file could not be read or written.
    #[error("I/O error: {0}")]
    Io(String),
    /// The text is not valid UTF-8.
    #[error("not valid UTF-8 text")]
    NotUtf8,
    /// The file has no header or no rows where some are required.
    #[error("empty trace: {0}")]
    Empty(&'static str),
    /// The format was not given and could not be recognised.
    #[error("cannot detect the trace format (give one of: {0})")]
    UnknownFormat(String),
    /// The header lacks a required column (the header is quoted with control characters
    /// escaped).
    #[error("missing column (header has: {0})")]
    MissingColumn(String),
    /// A row has fewer fields than the column needs.
    #[error("missing value (row has {got} fields, expected at least {want})")]
    MissingField {
        /// Fields in the row.
        got: usize,
        /// Fields needed.
        want: usize,
    },
    /// A required value is empty.
    #[error("empty value")]
    EmptyValue,
    /// Not a number.
    #[error("not a number: {0:?}")]
    NotANumber(String),
    /// NaN or infinite.
    #[error("not a finite number: {0:?}")]
    NotFinite(String),
    /// A negative value where none is allowed.
    #[error("must not be negative, got {0}")]
    Negative(String),
    /// Zero where a positive value is required (durations, GPU counts, iterations).
    #[error("must be positive, got {0}")]
    NotPositive(String),
    /// More GPUs than any job can ask for.
    #[error("GPU count {0} is larger than the limit of {max}", max = crate::fields::MAX_GPUS)]
    TooManyGpus(String),
    /// A number too large for its type.
    #[error("value out of range: {0}")]
    OutOfRange(String),
    /// A time or duration beyond [`tessera_model::MAX_INPUT_SECS`], the range the engine's
    /// clock can add up without saturating.
    #[error("{0} s is beyond the limit of {max} s (about 31.7 years)", max = tessera_model::MAX_INPUT_SECS)]
    TimeTooLarge(String),
    /// An absolute submit time further after the earliest job's than
    /// [`tessera_model::MAX_INPUT_SECS`].
    #[error(
        "{seconds} s after the earliest job's (line {earliest_line}), beyond the limit of {max} s \
         (about 31.7 years)",
        max = tessera_model::MAX_INPUT_SECS
    )]
    SubmitSpanTooLarge {
        /// Whole seconds after the earliest submit time.
        seconds: u64,
        /// Line of the earliest job.
        earliest_line: u64,
    },
    /// The header names a column twice.
    #[error("column {0:?} appears twice in the header")]
    DuplicateColumn(String),
    /// A data row has more fields than the header has columns.
    #[error("row has {got} fields but the header has {want} columns")]
    ExtraFields {
        /// Fields in the row.
        got: usize,
        /// Columns in the header.
        want: usize,
    },
    /// A GPU model that the catalog does not know.
    #[error("unknown GPU type {name:?} (known: {known})")]
    UnknownGpuType {
        /// The name as given.
        name: String,
        /// Comma-separated known names.
        known: String,
    },
    /// A Kubernetes quantity that does not parse.
    #[error("{0}")]
    BadQuantity(String),
    /// A date-time that does not parse.
    #[error("invalid date-time {0:?} (expected YYYY-MM-DD HH:MM:SS or ISO-8601)")]
    BadTimestamp(String),
    /// A Gavel job type missing from the throughput table.
    #[error("unknown Gavel job type {name:?} at scale factor {scale} (known: {known})")]
    UnknownJobType {
        /// The job type as given.
        name: String,
        /// Its scale factor (GPUs).
        scale: u32,
        /// Comma-separated known job types.
        known: String,
    },
    /// A Pollux application missing from the application table.
    #[error("unknown Pollux application {name:?} (known: {known})")]
    UnknownApplication {
        /// The application as given.
        name: String,
        /// Comma-separated known applications.
        known: String,
    },
    /// A value that is syntactically fine but unusable.
    #[error("{0}")]
    Invalid(String),
    /// Text that is not the JSON a JSON format expects.
    #[error("not valid JSON: {0}")]
    NotJson(String),
}

/// `text` with control characters and other unprintable characters escaped (`\0`, `\u{1b}`),
/// so that quoting binary input in a message cannot garble a terminal.
pub fn printable(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            let escaped: Vec<char> = if c.is_control() || c == '\u{fffd}' {
                c.escape_debug().collect()
            } else {
                vec![c]
            };
            escaped
        })
        .collect()
}

impl TraceError {
    /// An error about the whole source (no line, no field).
    pub fn whole(source: &str, kind: TraceErrorKind) -> TraceError {
        TraceError {
            source: source.to_string(),
            line: None,
            field: None,
            kind,
        }
    }

    /// An error at a line, optionally naming a field.
    pub fn at(source: &str, line: u64, field: Option<&str>, kind: TraceErrorKind) -> TraceError {
        TraceError {
            source: source.to_string(),
            line: Some(line),
            field: field.map(str::to_string),
            kind,
        }
    }
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.source)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        write!(f, ": ")?;
        if let Some(field) = &self.field {
            write!(f, "field {field}: ")?;
        }
        // Values quoted from the input may hold newlines or terminal escapes: keep the message
        // on one line and printable.
        write!(f, "{}", printable(&self.kind.to_string()))
    }
}

impl std::error::Error for TraceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.kind)
    }
}
