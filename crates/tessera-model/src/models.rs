//! The model catalogue: one namespace of model names shared by every mechanism's tables.
//!
//! Traces name models in many ways (`res50`, `ResNet-50`, `resnet_train128`, `bert`); each
//! mechanism's tables (sensitivity profiles, throughput matrices, cells, slice tables,
//! latency curves) have keys of their own. The catalogue (built-in data file
//! `data/models.yaml`, listed in docs/models.md) gives each model one canonical name, its
//! aliases, its family and class, and its parameter count when known. A mechanism maps
//! canonical names to its own keys inside its own module; a model its tables lack falls back
//! to its family's default model, then to the mechanism's documented default (never to a
//! throughput of 0).
//!
//! ```
//! use tessera_model::models::{canonical, ModelCatalog};
//! assert_eq!(canonical("ResNet-50"), Some("resnet50"));
//! assert_eq!(canonical("res50"), Some("resnet50"));
//! assert_eq!(canonical("transformer_train32"), Some("transformer"));
//! assert_eq!(canonical("no-such-model"), None);
//! let c = ModelCatalog::builtin();
//! assert_eq!(c.family_default("resnet152").map(|m| m.name.as_str()), Some("resnet50"));
//! ```

use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde::Deserialize;

use crate::error::{locate_field, SpecError};

/// One model of the catalogue.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelEntry {
    /// Canonical name (lower case, `-` separated).
    pub name: String,
    /// Other names it goes by.
    #[serde(default)]
    pub aliases: Vec<String>,
    /// Family (`resnet`, `bert`): a model missing from a table falls back to its family's
    /// default.
    pub family: String,
    /// Workload class (`image`, `language`, `speech`, ...).
    pub class: String,
    /// Parameters, when known.
    #[serde(default)]
    pub params: Option<f64>,
}

/// A family of models and its default model.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelFamily {
    /// Family name.
    pub name: String,
    /// Canonical name of the model standing in for the family's others.
    pub default: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Doc {
    #[allow(dead_code)]
    api_version: Option<String>,
    kind: String,
    families: Vec<ModelFamily>,
    models: Vec<ModelEntry>,
}

/// Models by canonical name and alias.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelCatalog {
    models: Vec<ModelEntry>,
    families: Vec<ModelFamily>,
    /// Normalised name or alias → index into `models`.
    index: BTreeMap<String, usize>,
}

const BUILTIN_YAML: &str = include_str!("../data/models.yaml");

/// How names are compared: trimmed, lower case, `_` and `-` alike.
pub fn normalise(name: &str) -> String {
    name.trim().to_ascii_lowercase().replace('_', "-")
}

/// Splits MISO-style `<model>_train<batch>` (`transformer_train32`) into the model and the
/// batch; other names come back whole with no batch.
pub fn split_batch_suffix(name: &str) -> (&str, Option<u32>) {
    let t = name.trim();
    let lower = t.to_ascii_lowercase();
    for sep in ["_train", "-train"] {
        if let Some(at) = lower.rfind(sep) {
            let digits = &t[at + sep.len()..];
            if at > 0 && !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
                if let Ok(b) = digits.parse::<u32>() {
                    return (&t[..at], Some(b));
                }
            }
        }
    }
    (t, None)
}

impl ModelCatalog {
    /// The built-in catalogue (`data/models.yaml`); an empty one if it failed to parse (a
    /// unit test checks that it parses).
    pub fn builtin() -> &'static ModelCatalog {
        static CATALOG: OnceLock<ModelCatalog> = OnceLock::new();
        CATALOG.get_or_init(|| {
            ModelCatalog::from_yaml(BUILTIN_YAML).unwrap_or_else(|_| ModelCatalog {
                models: Vec::new(),
                families: Vec::new(),
                index: BTreeMap::new(),
            })
        })
    }

    /// Parses a `kind: ModelCatalog` document; names and aliases must be unique (after
    /// normalising), families known, each family's default one of its models.
    pub fn from_yaml(text: &str) -> Result<ModelCatalog, SpecError> {
        let doc: Doc = serde_norway::from_str(text).map_err(|e| {
            let loc = e.location();
            SpecError::Syntax {
                line: loc.as_ref().map(|l| l.line()),
                column: loc.as_ref().map(|l| l.column()),
                message: e.to_string(),
            }
        })?;
        let invalid = |field: String, reason: String| SpecError::Invalid {
            line: locate_field(text, &field),
            field,
            reason,
        };
        if doc.kind != "ModelCatalog" {
            return Err(invalid(
                "kind".into(),
                format!("expected ModelCatalog, got {:?}", doc.kind),
            ));
        }
        let mut index = BTreeMap::new();
        for (i, m) in doc.models.iter().enumerate() {
            if normalise(&m.name) != m.name || m.name.is_empty() {
                return Err(invalid(
                    format!("models[{i}].name"),
                    format!("{:?} is not canonical (lower case, `-` separated)", m.name),
                ));
            }
            if !doc.families.iter().any(|f| f.name == m.family) {
                return Err(invalid(
                    format!("models[{i}].family"),
                    format!("unknown family {:?}", m.family),
                ));
            }
            for name in std::iter::once(&m.name).chain(&m.aliases) {
                let key = normalise(name);
                if key.is_empty() {
                    return Err(invalid(
                        format!("models[{i}].aliases"),
                        "an empty name".into(),
                    ));
                }
                if index.insert(key, i).is_some() {
                    return Err(invalid(
                        format!("models[{i}]"),
                        format!("the name {name:?} is given twice"),
                    ));
                }
            }
        }
        for (i, f) in doc.families.iter().enumerate() {
            let ok = doc
                .models
                .iter()
                .any(|m| m.name == f.default && m.family == f.name);
            if !ok {
                return Err(invalid(
                    format!("families[{i}].default"),
                    format!("{:?} is not a model of family {:?}", f.default, f.name),
                ));
            }
        }
        Ok(ModelCatalog {
            models: doc.models,
            families: doc.families,
            index,
        })
    }

    /// The model `name` names: its canonical name or an alias (case-insensitive, `_` and `-`
    /// alike), also with a `_train<batch>` suffix.
    pub fn get(&self, name: &str) -> Option<&ModelEntry> {
        let find = |n: &str| self.index.get(&normalise(n)).map(|&i| &self.models[i]);
        find(name).or_else(|| match split_batch_suffix(name) {
            (base, Some(_)) => find(base),
            _ => None,
        })
    }

    /// The canonical name of `name`, if the catalogue knows it.
    pub fn canonical(&self, name: &str) -> Option<&str> {
        self.get(name).map(|m| m.name.as_str())
    }

    /// The default model of `name`'s family (itself when it is the default).
    pub fn family_default(&self, name: &str) -> Option<&ModelEntry> {
        let m = self.get(name)?;
        let f = self.families.iter().find(|f| f.name == m.family)?;
        self.get(&f.default)
    }

    /// Canonical names to look up in a mechanism's table for `name`, best first: its own,
    /// then its family default's (no duplicates; empty for a name the catalogue lacks).
    pub fn candidates(&self, name: &str) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::with_capacity(2);
        if let Some(m) = self.get(name) {
            out.push(&m.name);
            if let Some(d) = self.family_default(name) {
                if d.name != m.name {
                    out.push(&d.name);
                }
            }
        }
        out
    }

    /// Every model, in file order.
    pub fn models(&self) -> &[ModelEntry] {
        &self.models
    }

    /// Every family, in file order.
    pub fn families(&self) -> &[ModelFamily] {
        &self.families
    }
}

/// The canonical name of `name` in the built-in catalogue.
pub fn canonical(name: &str) -> Option<&'static str> {
    ModelCatalog::builtin().canonical(name)
}

/// Looks `name` up in a mechanism's table: first as it is (`exact`: the table's own keys),
/// then through the built-in catalogue, each candidate canonical name (its own, then its
/// family default's) mapped to the table's key by `key_of`. `None`: the mechanism's own
/// documented default applies.
pub fn lookup<T>(
    name: &str,
    exact: impl Fn(&str) -> Option<T>,
    key_of: impl Fn(&str) -> Option<&'static str>,
) -> Option<T> {
    if let Some(t) = exact(name) {
        return Some(t);
    }
    ModelCatalog::builtin()
        .candidates(name)
        .into_iter()
        .find_map(|c| key_of(c).and_then(&exact))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_catalogue_parses() {
        let c = ModelCatalog::from_yaml(BUILTIN_YAML).expect("parses");
        assert!(c.models().len() >= 30);
        assert_eq!(ModelCatalog::builtin(), &c);
        for f in c.families() {
            assert!(c.get(&f.default).is_some(), "{}", f.name);
        }
    }

    #[test]
    fn names_resolve_through_aliases_and_suffixes() {
        for (name, want) in [
            ("resnet50", "resnet50"),
            ("ResNet-50", "resnet50"),
            ("res50", "resnet50"),
            ("resnet_train128", "resnet50"),
            ("RES18", "resnet18"),
            ("bert", "bert-base"),
            ("bert_base", "bert-base"),
            ("LLaMA2", "llama2-7b"),
            ("deepspeech2_train8", "deepspeech2"),
            ("lm", "lstm"),
            ("bert-1.3b", "bert-1.3b"),
        ] {
            assert_eq!(canonical(name), Some(want), "{name}");
        }
        assert_eq!(canonical(""), None);
        assert_eq!(canonical("_train8"), None);
        assert_eq!(split_batch_suffix("gnn_train512"), ("gnn", Some(512)));
        assert_eq!(split_batch_suffix("gnn_trainx"), ("gnn_trainx", None));
    }

    #[test]
    fn candidates_add_the_family_default() {
        let c = ModelCatalog::builtin();
        assert_eq!(c.candidates("resnet152"), ["resnet152", "resnet50"]);
        assert_eq!(c.candidates("resnet50"), ["resnet50"]);
        assert!(c.candidates("nope").is_empty());
        // A table keyed by its own names: res50 for resnet50.
        let table = |k: &str| (k == "res50").then_some(7);
        let key = |c: &str| (c == "resnet50").then_some("res50");
        assert_eq!(lookup("res50", table, key), Some(7));
        assert_eq!(lookup("ResNet-152", table, key), Some(7));
        assert_eq!(lookup("vgg", table, key), None);
    }

    #[test]
    fn bad_catalogues_are_refused() {
        let ok = "kind: ModelCatalog\nfamilies:\n  - {name: f, default: a}\nmodels:\n  - {name: a, family: f, class: c}\n";
        assert!(ModelCatalog::from_yaml(ok).is_ok());
        for (bad, field) in [
            (ok.replace("name: a,", "name: A,"), "models[0].name"),
            (ok.replace("family: f,", "family: g,"), "models[0].family"),
            (
                ok.replace("default: a", "default: b"),
                "families[0].default",
            ),
            (
                ok.replace("class: c}", "class: c, aliases: [A]}"),
                "models[0]",
            ),
        ] {
            let e = ModelCatalog::from_yaml(&bad).unwrap_err().to_string();
            assert!(e.contains(field), "{e}");
        }
    }
}
