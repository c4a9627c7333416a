//! The built-in mixed cluster and workload. Owned by the world work of issue 37.

use crate::{BuiltinCluster, BuiltinWorkload};

/// Built-in clusters (`--cluster builtin:NAME`).
pub const CLUSTERS: &[BuiltinCluster] = &[];

/// Built-in workloads (`--trace builtin:NAME`).
pub const WORKLOADS: &[BuiltinWorkload] = &[];
