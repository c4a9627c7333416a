//! Helpers shared by the test modules.

use std::path::PathBuf;

use tessera_model::{GpuCatalog, Workload};
use tessera_trace::{
    parse_trace, write_tessera_csv, LoadedTrace, ReadOptions, TraceError, TraceFormat,
};

/// `tests/data/NAME`.
pub fn data_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

pub fn catalog() -> GpuCatalog {
    GpuCatalog::builtin()
}

/// Parses `text` as `format`, failing on the first bad row.
pub fn parse(text: &str, format: Option<TraceFormat>) -> Result<LoadedTrace, TraceError> {
    parse_trace(text, "t.csv", format, &catalog(), &ReadOptions::default())
}

/// Parses `text` as `format`, skipping bad rows.
pub fn parse_skipping(text: &str, format: TraceFormat) -> Result<LoadedTrace, TraceError> {
    parse_trace(
        text,
        "t.csv",
        Some(format),
        &catalog(),
        &ReadOptions { skip_invalid: true },
    )
}

/// The canonical CSV of a workload.
pub fn canonical(w: &Workload) -> String {
    let mut out = Vec::new();
    write_tessera_csv(&mut out, w, &catalog()).expect("writing to memory");
    String::from_utf8(out).expect("the writer emits UTF-8")
}

/// Compares the canonical CSV of `w` with `tests/data/expected/NAME.csv`; with
/// `TESSERA_BLESS=1` (re)writes that file instead.
pub fn assert_golden(name: &str, w: &Workload) {
    let path = data_path("expected").join(format!("{name}.csv"));
    let actual = canonical(w);
    if std::env::var("TESSERA_BLESS").is_ok_and(|v| v == "1") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with TESSERA_BLESS=1 to create it)",
            path.display()
        )
    });
    assert_eq!(
        actual,
        expected,
        "canonical CSV differs from {} (re-bless with TESSERA_BLESS=1 if intended)",
        path.display()
    );
}
