//! Errors of the planner: bad graphs, bad cluster descriptions, solver failures.

use thiserror::Error;

/// Why a graph, a cluster or a synthesis was rejected.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum PlanError {
    /// The text is not valid JSON/YAML of the expected shape.
    #[error("{what}: {message}")]
    Syntax {
        /// `graph` or `cluster`.
        what: &'static str,
        /// The parser's message (with line and column when known).
        message: String,
    },
    /// A field is out of range or inconsistent.
    #[error("field {field}: {reason}")]
    Invalid {
        /// Dotted path of the field, e.g. `ops[3].dims`.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// A GPU model the catalog does not know.
    #[error(transparent)]
    Spec(#[from] tessera_model::SpecError),
    /// A built-in graph name that does not exist.
    #[error("unknown built-in model {name:?} (known: {known})")]
    UnknownModel {
        /// The name as given.
        name: String,
        /// Comma-separated built-in names.
        known: String,
    },
    /// A search needed more states than allowed (a graph with many tensors live at once).
    #[error(
        "the search for graph {graph:?} needed more than {max_states} states (the graph is too \
         wide: too many tensors live at once); raise --max-search-states \
         (tessera_plan::MAX_SEARCH_STATES) or narrow the graph"
    )]
    SearchBudget {
        /// Graph name.
        graph: String,
        /// The budget.
        max_states: u64,
    },
    /// No program of the kind asked for fits in the devices' memory.
    #[error(
        "{what} of graph {graph:?} does not fit in {limit_gib:.1} GiB per device (parameters \
         with gradients and Adam state, plus activations kept for the backward pass); use \
         devices with more memory, more devices, or a smaller batch"
    )]
    DoesNotFit {
        /// Graph name.
        graph: String,
        /// `data parallelism` or `no plan`.
        what: &'static str,
        /// The smallest device memory, GiB.
        limit_gib: f64,
    },
    /// The search found no program (the graph admits no valid sharding; a bug in a rule set).
    #[error("no valid program for graph {graph:?}")]
    NoProgram {
        /// Graph name.
        graph: String,
    },
}

pub(crate) fn invalid(field: impl Into<String>, reason: impl Into<String>) -> PlanError {
    PlanError::Invalid {
        field: field.into(),
        reason: reason.into(),
    }
}
