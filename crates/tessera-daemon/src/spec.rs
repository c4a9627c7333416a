//! Job specs as clients submit them (YAML or JSON), and their validation.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tessera_model::{Bytes, MigRequest, MilliCpu};

use crate::config::{is_safe_name, MAX_CPU, MAX_MEMORY};
use crate::error::ApiError;

/// Most arguments in `command`.
pub const MAX_ARGS: usize = 256;
/// Longest argument or environment value, in bytes.
pub const MAX_ARG_BYTES: usize = 4096;
/// Longest `script`, in bytes.
pub const MAX_SCRIPT_BYTES: usize = 48 * 1024;
/// Most environment variables.
pub const MAX_ENV: usize = 64;

/// A job as submitted.
///
/// ```yaml
/// name: resnet-a          # letters, digits, - _ . (max 63)
/// queue: research         # optional, default: the tenant's name
/// command: [python, train.py, --epochs, "10"]   # or `script: |` (exactly one)
/// gpus: 2
/// gpuType: a100           # GRES type or catalog name; optional = any
/// mig: nvidia.com/mig-3g.20gb   # optional: one MIG instance of this profile, or
///                               # nvidia.com/mig-any (the policy chooses); needs gpus: 1
/// cpu: "8"                # optional; default GPU-proportional share
/// memory: 32Gi            # optional; default GPU-proportional share
/// priority: 0
/// env: {EPOCHS: "10"}
/// hints: {model: resnet50, batchSize: 256, iterations: 10000, durationSeconds: 3600}
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JobSpec {
    /// Optional, must be `tessera/v1` when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Optional, must be `Job` when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Job name.
    pub name: String,
    /// Queue label (default: the tenant's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// Tenant; must be the caller's own unless the caller is an admin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// Argument vector to run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// Script to run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script: Option<String>,
    /// Whole GPUs.
    pub gpus: u32,
    /// GPU type (GRES type such as `a100` or `a100_3g.40gb`, or a catalog name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_type: Option<String>,
    /// One MIG instance: `nvidia.com/mig-3g.20gb` (exactly that profile; `3g.20gb` too) or
    /// `nvidia.com/mig-any` (the policy chooses the slice). Needs `gpus: 1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig: Option<String>,
    /// CPU for the whole job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<MilliCpu>,
    /// Memory for the whole job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Bytes>,
    /// Larger first under priority-aware policies (-1000..=1000).
    #[serde(default)]
    pub priority: i32,
    /// Extra environment.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// What the scheduler may assume about the job.
    #[serde(default)]
    pub hints: Hints,
}

/// Optional model and profile hints.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Hints {
    /// Model name (a key into performance tables).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Global batch size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_size: Option<u32>,
    /// Total iterations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iterations: Option<u64>,
    /// Expected run time in seconds on the requested allocation (default 3600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_seconds: Option<f64>,
}

/// Largest spec text accepted, in bytes (checked before parsing, whatever the body limit).
pub const MAX_SPEC_BYTES: usize = 64 * 1024;
/// Deepest nesting of collections accepted (a valid spec needs 3), checked before parsing:
/// the YAML parser's cost grows much faster than the text with deeply nested flow collections.
pub const MAX_SPEC_DEPTH: usize = 32;

/// Most alias uses (`*name`) accepted, checked before parsing: each one copies its anchor's
/// value, so a 64 KiB spec of aliases to one long string would otherwise become tens of MB.
pub const MAX_SPEC_ALIASES: usize = 64;

/// A conservative, linear pre-scan of YAML or JSON text that bounds how deeply collections
/// nest: flow brackets (`[`, `{`) outside quotes and comments, plus block structure (one level
/// per indentation step and per `- ` entry marker). Block scalars (`|`, `>`) are skipped, so
/// brackets in scripts do not count. It may over-count odd but valid layouts; it never
/// under-counts what the parser would nest.
/// `text` cut at every line break the YAML parser may honour: LF, CR and CRLF (YAML 1.2), and
/// NEL, LS and PS (YAML 1.1, which libyaml still reads as breaks). `str::lines` splits on LF
/// only, so a comment ending in a lone CR would hide the line after it from the pre-scan. A
/// CRLF yields an extra empty line, which the pre-scan skips; cutting where the parser does
/// not can only make the pre-scan count more, never less.
fn yaml_lines(text: &str) -> impl Iterator<Item = &str> {
    text.split(['\n', '\r', '\u{85}', '\u{2028}', '\u{2029}'])
}

pub(crate) fn check_shape(text: &str) -> Result<(), ApiError> {
    let limit = MAX_SPEC_DEPTH;
    let too_deep = || {
        Err(ApiError::bad_request(format!(
            "spec nests collections more than {MAX_SPEC_DEPTH} levels deep"
        )))
    };
    let mut aliases = 0usize;
    let mut flow = 0usize;
    let mut indents: Vec<usize> = Vec::new();
    // (indentation of the node owning a block scalar, content indentation once known)
    let mut block_scalar: Option<(usize, Option<usize>)> = None;
    for line in yaml_lines(text) {
        let indent = line.len() - line.trim_start_matches(' ').len();
        let rest = &line[indent..];
        if let Some((owner, content)) = block_scalar {
            if rest.trim().is_empty() {
                continue;
            }
            match content {
                None if indent > owner => {
                    block_scalar = Some((owner, Some(indent)));
                    continue;
                }
                Some(c) if indent >= c => continue,
                _ => block_scalar = None,
            }
        }
        let bytes = rest.as_bytes();
        if bytes.is_empty() || bytes[0] == b'#' {
            continue;
        }
        let mut depth_here = 0usize;
        let mut node_indent = indent;
        if flow == 0 {
            while indents.last().is_some_and(|&top| top >= indent) {
                indents.pop();
            }
            indents.push(indent);
            // `- - - x`: each entry marker opens one more level.
            let mut j = 0;
            while j < bytes.len()
                && bytes[j] == b'-'
                && (j + 1 == bytes.len() || bytes[j + 1] == b' ')
            {
                depth_here += 1;
                j += 1;
                while j < bytes.len() && bytes[j] == b' ' {
                    j += 1;
                }
            }
            node_indent = indent + j;
        }
        if indents.len() + depth_here + flow > limit {
            return too_deep();
        }
        let (mut quote, mut prev) = (None::<u8>, b' ');
        // Last non-blank byte outside quotes: a quote opens a quoted scalar only where a
        // scalar can start (`a 'b` is one plain scalar, and must not hide what follows).
        let mut last_sig: Option<u8> = None;
        let mut k = 0;
        while k < bytes.len() {
            let b = bytes[k];
            match quote {
                Some(b'"') if b == b'\\' => k += 1,
                Some(q) if b == q => {
                    if q == b'\'' && bytes.get(k + 1) == Some(&b'\'') {
                        k += 1;
                    } else {
                        quote = None;
                    }
                }
                Some(_) => {}
                None => match b {
                    b'#' if prev == b' ' || prev == b'\t' => break,
                    b'"' | b'\''
                        if matches!(prev, b' ' | b'\t' | b'[' | b'{' | b',' | b':')
                            && last_sig.is_none_or(|c| b":[{,-?".contains(&c)) =>
                    {
                        quote = Some(b)
                    }
                    b'[' | b'{' => {
                        flow += 1;
                        if indents.len() + depth_here + flow > limit {
                            return too_deep();
                        }
                    }
                    b']' | b'}' => flow = flow.saturating_sub(1),
                    // Counted wherever a scalar could start (over-counting is safe).
                    b'*' if matches!(prev, b' ' | b'\t' | b'[' | b'{' | b',' | b':')
                        && last_sig.is_none_or(|c| b":[{,-?".contains(&c)) =>
                    {
                        aliases += 1;
                        if aliases > MAX_SPEC_ALIASES {
                            return Err(ApiError::bad_request(format!(
                                "spec uses more than {MAX_SPEC_ALIASES} YAML aliases"
                            )));
                        }
                    }
                    _ => {}
                },
            }
            if quote.is_none() && b != b' ' && b != b'\t' {
                last_sig = Some(b);
            }
            prev = b;
            k += 1;
        }
        // `key: |`, `- >-`, `key: |2`: the following more-indented lines are text.
        if flow == 0 && quote.is_none() {
            let t = rest.split(" #").next().unwrap_or("").trim_end();
            let head = t.trim_end_matches(|c: char| c == '+' || c == '-' || c.is_ascii_digit());
            if (head.ends_with('|') || head.ends_with('>'))
                && (head.len() == 1 || head[..head.len() - 1].ends_with([' ', ':', '-']))
            {
                block_scalar = Some((node_indent.min(indent), None));
            }
        }
    }
    Ok(())
}

fn check_text(field: &str, s: &str, max: usize) -> Result<(), ApiError> {
    if s.len() > max {
        return Err(ApiError::bad_request(format!(
            "{field}: longer than {max} bytes"
        )));
    }
    if s.contains('\0') {
        return Err(ApiError::bad_request(format!(
            "{field}: contains a NUL byte"
        )));
    }
    Ok(())
}

/// The answer to a service document (`kind: Workload`) sent as a job spec.
pub const SERVICE_DOCUMENT: &str = "this is a service document (kind: Workload), not a job spec: \
submit it with `tessera services submit FILE` (POST /v1/services)";

impl JobSpec {
    /// Parses a spec: JSON when the text starts with `{`, YAML otherwise.
    ///
    /// Text larger than [`MAX_SPEC_BYTES`], nested deeper than [`MAX_SPEC_DEPTH`] or with
    /// more than [`MAX_SPEC_ALIASES`] aliases is refused before any parsing.
    pub fn parse(text: &str) -> Result<JobSpec, ApiError> {
        if text.len() > MAX_SPEC_BYTES {
            return Err(ApiError::new(
                413,
                "body_too_large",
                format!("a job spec may be at most {MAX_SPEC_BYTES} bytes"),
            ));
        }
        check_shape(text)?;
        let trimmed = text.trim_start();
        let parsed: Result<JobSpec, ApiError> = if trimmed.starts_with('{') {
            serde_json::from_str(trimmed)
                .map_err(|e| ApiError::bad_request(format!("malformed JSON: {e}")))
        } else {
            serde_norway::from_str(text)
                .map_err(|e| ApiError::bad_request(format!("malformed YAML: {e}")))
        };
        // A service document sent as a job fails on its first unknown field (`metadata`):
        // say what it is instead.
        let spec = parsed.map_err(|e| {
            if Self::kind_of(text).as_deref() == Some("Workload") {
                ApiError::bad_request(SERVICE_DOCUMENT)
            } else {
                e
            }
        })?;
        if spec.kind.as_deref() == Some("Workload") {
            return Err(ApiError::bad_request(SERVICE_DOCUMENT));
        }
        spec.validate()?;
        Ok(spec)
    }

    /// The top-level `kind` of a document, if it parses as a mapping with a string `kind`
    /// (the text has passed the depth and alias checks).
    fn kind_of(text: &str) -> Option<String> {
        let trimmed = text.trim_start();
        let value: serde_json::Value = if trimmed.starts_with('{') {
            serde_json::from_str(trimmed).ok()?
        } else {
            serde_norway::from_str(text).ok()?
        };
        value.get("kind")?.as_str().map(String::from)
    }

    /// Checks names, sizes and ranges.
    pub fn validate(&self) -> Result<(), ApiError> {
        let bad = |m: String| Err(ApiError::bad_request(m));
        if let Some(v) = &self.api_version {
            if v != "tessera/v1" {
                return bad(format!("apiVersion: expected tessera/v1, got {v:?}"));
            }
        }
        if let Some(k) = &self.kind {
            if k != "Job" {
                return bad(format!("kind: expected Job, got {k:?}"));
            }
        }
        for (field, v) in [
            ("name", Some(&self.name)),
            ("queue", self.queue.as_ref()),
            ("tenant", self.tenant.as_ref()),
        ] {
            if let Some(v) = v {
                if !is_safe_name(v) {
                    return bad(format!(
                        "{field}: {:?} must be 1-63 letters, digits, '-', '_' or '.', starting with a letter or digit",
                        v.chars().take(80).collect::<String>()
                    ));
                }
            }
        }
        match (&self.command, &self.script) {
            (Some(_), Some(_)) | (None, None) => {
                return bad("exactly one of command and script is required".into())
            }
            (Some(argv), None) => {
                if argv.is_empty() || argv.len() > MAX_ARGS {
                    return bad(format!("command: needs 1 to {MAX_ARGS} arguments"));
                }
                for a in argv {
                    check_text("command", a, MAX_ARG_BYTES)?;
                }
                if argv[0].is_empty() {
                    return bad("command: the program is empty".into());
                }
            }
            (None, Some(s)) => {
                check_text("script", s, MAX_SCRIPT_BYTES)?;
                if s.trim().is_empty() {
                    return bad("script: empty".into());
                }
            }
        }
        if self.gpus == 0 {
            return bad("gpus: at least 1 GPU is required".into());
        }
        if let Some(t) = &self.gpu_type {
            if t.is_empty()
                || t.len() > 63
                || !t
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
            {
                return bad(format!(
                    "gpuType: {:?} is not a valid GPU type name",
                    t.chars().take(80).collect::<String>()
                ));
            }
        }
        if let Some(m) = &self.mig {
            let m: String = m.chars().take(80).collect();
            if let Err(e) = MigRequest::parse(&m) {
                return bad(format!("mig: {e}"));
            }
            if self.gpus != 1 {
                return bad(format!(
                    "mig: a MIG instance is part of one GPU: needs gpus 1, got {}",
                    self.gpus
                ));
            }
        }
        if !(-1000..=1000).contains(&self.priority) {
            return bad("priority: must be within -1000..=1000".into());
        }
        if self.env.len() > MAX_ENV {
            return bad(format!("env: more than {MAX_ENV} variables"));
        }
        for (k, v) in &self.env {
            let valid = !k.is_empty()
                && k.len() <= 128
                && (k.as_bytes()[0].is_ascii_alphabetic() || k.as_bytes()[0] == b'_')
                && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
            if !valid {
                return bad(format!(
                    "env: {:?} is not a valid variable name",
                    k.chars().take(80).collect::<String>()
                ));
            }
            let upper = k.to_ascii_uppercase();
            if upper.starts_with("TESSERA_")
                || upper.starts_with("SLURM_")
                || upper == "CUDA_VISIBLE_DEVICES"
            {
                return bad(format!("env: {k} is reserved"));
            }
            check_text("env", v, MAX_ARG_BYTES)?;
        }
        if let Some(m) = &self.hints.model {
            if !is_safe_name(m) {
                return bad("hints.model: not a safe name".into());
            }
        }
        if let Some(d) = self.hints.duration_seconds {
            if !(d.is_finite() && d > 0.0 && d < 1e9) {
                return bad("hints.durationSeconds: must be positive".into());
            }
        }
        if self.hints.iterations == Some(0) {
            return bad("hints.iterations: must be positive".into());
        }
        // The store keeps integers as signed 64-bit: larger values would come back wrong.
        if self.hints.iterations.is_some_and(|i| i > i64::MAX as u64) {
            return bad(format!("hints.iterations: must be at most {}", i64::MAX));
        }
        if let Some(m) = self.memory {
            if m > MAX_MEMORY {
                return bad(format!(
                    "memory: {} is more than the limit of {MAX_MEMORY}",
                    m.0
                ));
            }
        }
        if let Some(c) = self.cpu {
            if c > MAX_CPU {
                return bad(format!("cpu: {c} is more than the limit of {MAX_CPU}"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str =
        "name: train-1\ncommand: [sleep, '1']\ngpus: 2\ngpuType: a100\ncpu: 500m\nmemory: 16Gi\n";

    #[test]
    fn parses_yaml_and_json() {
        let s = JobSpec::parse(GOOD).unwrap();
        assert_eq!(s.cpu, Some(MilliCpu(500)));
        assert_eq!(s.memory, Some(Bytes(16 << 30)));
        let j =
            JobSpec::parse(r#"{"name":"x","script":"echo hi","gpus":1,"hints":{"iterations":5}}"#)
                .unwrap();
        assert_eq!(j.hints.iterations, Some(5));
    }

    /// Issue 41: a service document sent as a job said `unknown field metadata`.
    #[test]
    fn a_service_document_is_named_as_such() {
        let doc = "apiVersion: tessera/v1\nkind: Workload\nmetadata:\n  command: [serve]\nspec:\n  services: []\n";
        let e = JobSpec::parse(doc).unwrap_err();
        assert!(
            e.message.contains("tessera services submit"),
            "{}",
            e.message
        );
        let json = r#"{"kind": "Workload", "metadata": {}}"#;
        let e = JobSpec::parse(json).unwrap_err();
        assert!(e.message.contains("service document"), "{}", e.message);
        // Other documents keep their own error.
        let e = JobSpec::parse("name: x\nmetadata: {}\n").unwrap_err();
        assert!(e.message.contains("unknown field"), "{}", e.message);
    }

    #[test]
    fn rejects_bad_specs_with_reasons() {
        let cases = [
            ("name: [", "malformed YAML"),
            ("{\"name\": ", "malformed JSON"),
            ("name: 'a;b'\ncommand: [x]\ngpus: 1\n", "name"),
            ("name: a\ngpus: 1\n", "exactly one"),
            ("name: a\ncommand: [x]\nscript: y\ngpus: 1\n", "exactly one"),
            ("name: a\ncommand: [x]\ngpus: 0\n", "gpus"),
            (
                "name: a\ncommand: [x]\ngpus: 1\ncpu: lots\n",
                "invalid quantity",
            ),
            (
                "name: a\ncommand: [x]\ngpus: 1\ncolour: red\n",
                "unknown field",
            ),
            (
                "name: a\ncommand: [x]\ngpus: 1\nenv: {SLURM_X: y}\n",
                "reserved",
            ),
            (
                "name: a\ncommand: [x]\ngpus: 1\nenv: {'A B': y}\n",
                "variable name",
            ),
            (
                "name: a\ncommand: [x]\ngpus: 1\npriority: 5000\n",
                "priority",
            ),
            (
                "name: a\ncommand: [x]\ngpus: 1\ngpuType: 'a100 --x'\n",
                "gpuType",
            ),
            ("name: a\ncommand: [x]\ngpus: -1\n", "gpus"),
            (
                "name: a\ncommand: [x]\ngpus: 1\nmig: nvidia.com/gpu\n",
                "mig: \"nvidia.com/gpu\" is not a MIG request",
            ),
            (
                "name: a\ncommand: [x]\ngpus: 2\nmig: nvidia.com/mig-3g.20gb\n",
                "mig: a MIG instance is part of one GPU: needs gpus 1, got 2",
            ),
        ];
        for (text, needle) in cases {
            let e = JobSpec::parse(text).unwrap_err();
            assert_eq!(e.status, 400);
            assert!(e.message.contains(needle), "{text:?}: {}", e.message);
        }
    }

    #[test]
    fn mig_requests_parse_in_both_spellings() {
        for (text, want) in [
            ("mig: nvidia.com/mig-3g.20gb", "nvidia.com/mig-3g.20gb"),
            ("mig: 1g.5gb", "1g.5gb"),
            ("mig: nvidia.com/mig-any", "nvidia.com/mig-any"),
        ] {
            let s = JobSpec::parse(&format!("name: a\ncommand: [x]\ngpus: 1\n{text}\n")).unwrap();
            assert_eq!(s.mig.as_deref(), Some(want));
        }
        let s =
            JobSpec::parse(r#"{"name": "a", "command": ["x"], "gpus": 1, "mig": "any"}"#).unwrap();
        assert_eq!(s.mig.as_deref(), Some("any"));
    }

    #[test]
    fn deep_nesting_and_huge_specs_are_refused_before_parsing() {
        let head = "name: a\ncommand: [x]\ngpus: 1\nhints: ";
        let mut block = String::from("name: a\ncommand: [x]\ngpus: 1\nhints:\n");
        for i in 0..40 {
            block.push_str(&" ".repeat(i + 1));
            block.push_str("k:\n");
        }
        for text in [
            format!("{head}{}", "[".repeat(60_000)),
            format!("{head}{}", "{a: ".repeat(15_000)),
            format!(
                "name: a\ncommand: [x]\ngpus: 1\nhints:\n{}x\n",
                "- ".repeat(60)
            ),
            format!(
                "{{\"name\": \"a\", \"gpus\": 1, \"hints\": {}",
                "[".repeat(50_000)
            ),
            // A quote inside a plain scalar opens nothing, and hides nothing after it.
            format!("{head}[a 'b, {}", "[".repeat(50_000)),
            format!("{head}[a \"b, {}", "{x: ".repeat(10_000)),
            block,
        ] {
            let e = JobSpec::parse(&text).unwrap_err();
            assert!(e.message.contains("levels deep"), "{}", e.message);
        }
        let huge = format!("name: a\ncommand: [x]\ngpus: 1\n#{}\n", "x".repeat(70_000));
        assert_eq!(JobSpec::parse(&huge).unwrap_err().status, 413);
    }

    #[test]
    fn nesting_after_a_comment_ended_by_any_yaml_line_break_is_counted() {
        let deep = format!("{}x{}", "[".repeat(100), "]".repeat(100));
        for brk in ["\r", "\n", "\r\n", "\u{85}", "\u{2028}", "\u{2029}"] {
            for text in [
                format!("name: a # comment{brk}hints: {deep}\n"),
                format!("# comment{brk}{deep}"),
                format!("a: 'q'{brk}b: {deep}"),
            ] {
                let e = check_shape(&text).unwrap_err();
                assert!(e.message.contains("levels deep"), "{text:?}: {}", e.message);
            }
        }
    }

    mod prop {
        use super::super::{check_shape, MAX_SPEC_DEPTH};
        use proptest::prelude::*;

        fn depth(v: &serde_norway::Value) -> usize {
            match v {
                serde_norway::Value::Sequence(s) => 1 + s.iter().map(depth).max().unwrap_or(0),
                serde_norway::Value::Mapping(m) => {
                    1 + m
                        .iter()
                        .map(|(k, v)| depth(k).max(depth(v)))
                        .max()
                        .unwrap_or(0)
                }
                serde_norway::Value::Tagged(t) => depth(&t.value),
                _ => 0,
            }
        }

        fn line() -> impl Strategy<Value = String> {
            prop_oneof![
                Just("k: x".to_string()),
                Just("# c".to_string()),
                Just("k: x # c".to_string()),
                Just("k: 'q' # c".to_string()),
                Just("k: \"q # c\"".to_string()),
                Just("- x".to_string()),
                Just("- - x".to_string()),
                Just("a: &a x".to_string()),
                Just("b: *a".to_string()),
                Just("c: |".to_string()),
                Just("  [[[[ x".to_string()),
                Just("".to_string()),
                Just("  ".to_string()),
                Just("k: [x, {a: y}]".to_string()),
            ]
        }

        fn brk() -> impl Strategy<Value = &'static str> {
            prop_oneof![Just("\n"), Just("\r"), Just("\r\n")]
        }

        /// A nested value (`depth` levels of flow sequences and mappings), written as a line
        /// of its own, as a key's value, or after a comment on the same physical line.
        fn deep() -> impl Strategy<Value = String> {
            (1usize..50, any::<bool>(), 0usize..3).prop_map(|(depth, maps, form)| {
                let (open, close) = if maps { ("{a: ", "}") } else { ("[", "]") };
                let value = format!("{}x{}", open.repeat(depth), close.repeat(depth));
                match form {
                    0 => value,
                    1 => format!("d: {value}"),
                    _ => format!("- {value}"),
                }
            })
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(1000))]
            /// Whatever mix of CR, LF and CRLF, comments, anchors, quotes and block scalars
            /// surrounds it: a document the pre-scan lets through never parses into something
            /// nested deeper than the limit.
            #[test]
            fn the_pre_scan_never_under_counts(
                lines in proptest::collection::vec((line(), brk()), 0..12),
                at in 0usize..12,
                nested in deep(),
                nested_brk in brk(),
            ) {
                let mut text = String::new();
                for (i, (l, b)) in lines.iter().enumerate() {
                    if i == at.min(lines.len()) {
                        text.push_str(&nested);
                        text.push_str(nested_brk);
                    }
                    text.push_str(l);
                    text.push_str(b);
                }
                if at >= lines.len() {
                    text.push_str(&nested);
                }
                if check_shape(&text).is_ok() {
                    if let Ok(v) = serde_norway::from_str::<serde_norway::Value>(&text) {
                        prop_assert!(depth(&v) <= MAX_SPEC_DEPTH, "{text:?} nests {}", depth(&v));
                    }
                }
            }
        }
    }

    #[test]
    fn alias_amplification_is_refused_before_parsing() {
        let long = "x".repeat(4000);
        let bomb = format!(
            "name: a\ngpus: 1\ncommand: [&s {long}{}]\n",
            ", *s".repeat(14_000)
        );
        let e = JobSpec::parse(&bomb).unwrap_err();
        assert!(e.message.contains("aliases"), "{}", e.message);
        // A few aliases are fine, and `*` inside scalars or scripts is no alias.
        let ok = "name: a\ngpus: 1\ncommand: [&s echo, *s, 'a*b', \"*\", x*y]\nscript_note: 0\n";
        let e = JobSpec::parse(ok).unwrap_err();
        assert!(e.message.contains("script_note"), "{}", e.message);
        let s = JobSpec::parse(&format!(
            "name: a\ngpus: 1\nscript: |\n{}",
            "  ls *.txt */x\n".repeat(200)
        ))
        .unwrap();
        assert!(s.script.unwrap().contains("*.txt"));
    }

    #[test]
    fn brackets_in_scripts_and_strings_do_not_count_as_nesting() {
        let deep = "[".repeat(200);
        let script = format!(
            "name: a\ngpus: 1\nscript: |\n  echo '{deep}'\n  if [ -f x ]; then echo {{}}; fi\n    {deep}\nenv: {{A: \"{deep}\", B: '{deep}'}}\n# {deep}\n"
        );
        let s = JobSpec::parse(&script).unwrap();
        assert!(s.script.unwrap().contains(&deep));
        let folded = format!("name: a\ngpus: 1\nscript: >-\n  {deep}\n\n  {deep}\n");
        JobSpec::parse(&folded).unwrap();
        let json =
            format!("{{\"name\":\"a\",\"gpus\":1,\"command\":[\"echo\",\"{deep}\\\"{deep}\"]}}");
        JobSpec::parse(&json).unwrap();
    }

    #[test]
    fn out_of_range_quantities_are_refused() {
        for (field, value) in [
            ("memory", "18446744073709551615"),
            ("memory", "2Pi"),
            ("cpu", "18446744073709551"),
        ] {
            let text = format!("name: a\ncommand: [x]\ngpus: 1\n{field}: {value}\n");
            let e = JobSpec::parse(&text).unwrap_err();
            assert!(e.message.contains(field), "{value}: {}", e.message);
        }
        let e = JobSpec::parse(
            "name: a\ncommand: [x]\ngpus: 1\nhints: {iterations: 9223372036854775808}\n",
        )
        .unwrap_err();
        assert!(e.message.contains("iterations"), "{}", e.message);
    }
}
