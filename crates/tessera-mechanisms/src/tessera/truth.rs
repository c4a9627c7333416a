//! The composed truth (`--perf tessera`). Owned by the truth work of issue 37.

use crate::{Truth, TruthInfo, TruthOptions};

/// The truths this module registers.
pub const TRUTHS: &[TruthInfo] = &[];

/// Builds one of [`TRUTHS`] by name.
pub fn build(_name: &str, _options: &TruthOptions) -> Option<Truth> {
    None
}
