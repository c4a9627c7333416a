//! Errors of the daemon library and of its HTTP API.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Why the daemon could not start or had to stop.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum DaemonError {
    /// The config file could not be read.
    #[error("cannot read config {path}: {source}")]
    ConfigRead {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The config file is not valid.
    #[error("invalid config: {0}")]
    Config(String),
    /// The SQLite store failed.
    #[error("store: {0}")]
    Store(#[from] rusqlite::Error),
    /// Another process (a second daemon) holds the store.
    #[error("store {path} is in use by another tessera daemon{}; stop it first, or give this daemon its own store", holder.map(|p| format!(" (pid {p})")).unwrap_or_default())]
    StoreLocked {
        /// The database file.
        path: PathBuf,
        /// The holder's pid, as written in the lock file.
        holder: Option<u32>,
    },
    /// The store file cannot be opened or is not a tessera store.
    #[error("store {path}: {message}")]
    StoreOpen {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The store holds data this version cannot read.
    #[error("store is corrupt or from another version: {0}")]
    StoreFormat(String),
    /// The resource-manager backend failed.
    #[error("backend: {0}")]
    Backend(#[from] BackendError),
    /// The inventory could not be turned into a cluster.
    #[error("inventory: {0}")]
    Inventory(String),
    /// The policy name is unknown.
    #[error("policy: {0}")]
    Policy(#[from] tessera_sched::PolicyError),
    /// Binding or serving the HTTP listener failed.
    #[error("http: {0}")]
    Io(#[from] std::io::Error),
    /// The scheduling engine thread stopped unexpectedly.
    #[error("engine stopped: {0}")]
    Engine(String),
    /// The daemon failed before it served anything (bad policy, backend, store, address):
    /// nothing ran, nothing stopped.
    #[error("the daemon could not start: {0}")]
    NotStarted(Box<DaemonError>),
}

/// A failure of a resource-manager backend command.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackendError {
    /// A command could not be started.
    #[error("cannot run {program}: {message}")]
    Spawn {
        /// The program.
        program: String,
        /// The OS error.
        message: String,
    },
    /// A command ran and failed.
    #[error("{program} failed ({status}): {stderr}")]
    Command {
        /// The program.
        program: String,
        /// Exit status as text.
        status: String,
        /// Its standard error, trimmed.
        stderr: String,
    },
    /// A command did not finish in time and was killed.
    #[error("{program} timed out after {seconds} s")]
    Timeout {
        /// The program.
        program: String,
        /// The limit.
        seconds: u64,
    },
    /// Output that could not be parsed.
    #[error("cannot parse {what}: {detail}")]
    Parse {
        /// What was being parsed.
        what: &'static str,
        /// The offending text or reason.
        detail: String,
    },
    /// A placement the backend cannot express.
    #[error("unsupported placement: {0}")]
    Unsupported(String),
    /// The machine ran out of something that comes back (file descriptors, processes,
    /// memory, disk space): the operation is retried later and never counts against the job.
    #[error("{what}: out of resources, will retry: {message}")]
    Exhausted {
        /// The program or path.
        what: String,
        /// The OS error.
        message: String,
    },
    /// The backend does not carry out this action in place (Slurm cannot retune or
    /// reconfigure a running allocation); the daemon falls back (a restart for a retune; the
    /// GPU keeps its layout for a reconfiguration).
    #[error("the {backend} backend does not {action} in place")]
    Declined {
        /// `retune` or `reconfigure`.
        action: &'static str,
        /// The backend's kind.
        backend: &'static str,
    },
    /// The launch was withdrawn before the backend started anything (its job was cancelled,
    /// or its attempt given up, while the launch waited for the backend): nothing ran.
    #[error("launch withdrawn before it started")]
    Withdrawn,
    /// A file operation failed.
    #[error("{path}: {message}")]
    File {
        /// The path.
        path: String,
        /// The OS error.
        message: String,
    },
}

/// True for OS errors that go away by themselves (descriptor, process, memory or disk
/// exhaustion).
pub(crate) fn is_exhaustion(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(
            libc::EMFILE | libc::ENFILE | libc::EAGAIN | libc::ENOMEM | libc::ENOSPC | libc::EDQUOT
        )
    )
}

impl BackendError {
    pub(crate) fn file(path: &std::path::Path, e: std::io::Error) -> BackendError {
        if is_exhaustion(&e) {
            return BackendError::Exhausted {
                what: path.display().to_string(),
                message: e.to_string(),
            };
        }
        BackendError::File {
            path: path.display().to_string(),
            message: e.to_string(),
        }
    }

    /// An I/O failure of `what` (a program or a path): [`BackendError::Exhausted`] when the
    /// machine ran out of resources, else [`BackendError::Spawn`].
    pub fn from_io(what: &str, e: &std::io::Error) -> BackendError {
        if is_exhaustion(e) {
            BackendError::Exhausted {
                what: what.to_string(),
                message: e.to_string(),
            }
        } else {
            BackendError::Spawn {
                program: what.to_string(),
                message: e.to_string(),
            }
        }
    }

    /// True when retrying later may succeed without anything changing: such failures must
    /// not fail a job.
    pub fn is_transient(&self) -> bool {
        matches!(self, BackendError::Exhausted { .. })
    }
}

/// The JSON body of every 4xx/5xx answer: `{"error": {"code": "...", "message": "..."}}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// Code and message of an API error.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDetail {
    /// Stable machine-readable code, e.g. `unauthorized`, `invalid_spec`, `not_found`.
    pub code: String,
    /// Human-readable explanation.
    pub message: String,
}

/// An API request that failed: an HTTP status with a code and message.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("{status} {code}: {message}")]
pub struct ApiError {
    /// HTTP status code.
    pub status: u16,
    /// Stable code (see [`ErrorDetail::code`]).
    pub code: &'static str,
    /// Explanation.
    pub message: String,
}

impl ApiError {
    /// A new error.
    pub fn new(status: u16, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }
    pub(crate) fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(400, "invalid_spec", message)
    }
    pub(crate) fn unauthorized() -> ApiError {
        ApiError::new(401, "unauthorized", "missing or invalid bearer token")
    }
    pub(crate) fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(403, "forbidden", message)
    }
    pub(crate) fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(404, "not_found", message)
    }
    pub(crate) fn conflict(message: impl Into<String>) -> ApiError {
        ApiError::new(409, "conflict", message)
    }
    pub(crate) fn too_many(message: impl Into<String>) -> ApiError {
        ApiError::new(429, "limit_exceeded", message)
    }
    pub(crate) fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(500, "internal", message)
    }
    /// The JSON body of this error.
    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            error: ErrorDetail {
                code: self.code.to_string(),
                message: self.message.clone(),
            },
        }
    }
}
