//! Job specs as clients submit them (YAML or JSON), and their validation.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tessera_model::{Bytes, MilliCpu};

use crate::config::is_safe_name;
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
/// cpu: "8"                # optional; default GPU-proportional share
/// memory: 32Gi            # optional; default GPU-proportional share
/// priority: 0
/// env: {EPOCHS: "10"}
/// hints: {model: resnet50, batchSize: 256, iterations: 10000, durationSeconds: 3600}
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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

impl JobSpec {
    /// Parses a spec: JSON when the text starts with `{`, YAML otherwise.
    pub fn parse(text: &str) -> Result<JobSpec, ApiError> {
        let trimmed = text.trim_start();
        let spec: JobSpec = if trimmed.starts_with('{') {
            serde_json::from_str(trimmed)
                .map_err(|e| ApiError::bad_request(format!("malformed JSON: {e}")))?
        } else {
            serde_norway::from_str(text)
                .map_err(|e| ApiError::bad_request(format!("malformed YAML: {e}")))?
        };
        spec.validate()?;
        Ok(spec)
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
        ];
        for (text, needle) in cases {
            let e = JobSpec::parse(text).unwrap_err();
            assert_eq!(e.status, 400);
            assert!(e.message.contains(needle), "{text:?}: {}", e.message);
        }
    }
}
