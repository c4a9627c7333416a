//! docs/models.md lists the model catalogue and each mechanism's keys as the code has them.

#[test]
fn docs_models_md_matches_the_catalogue() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/models.md");
    let doc = std::fs::read_to_string(path).expect("docs/models.md");
    let table = tessera_mechanisms::models_markdown();
    assert!(
        doc.contains(&table),
        "docs/models.md is out of date; its table should read:\n{table}"
    );
}

/// Every model of the catalogue resolves to itself, and every alias to its model.
#[test]
fn every_name_of_the_catalogue_resolves() {
    let c = tessera_model::models::ModelCatalog::builtin();
    for m in c.models() {
        assert_eq!(c.canonical(&m.name), Some(m.name.as_str()));
        for a in &m.aliases {
            assert_eq!(c.canonical(a), Some(m.name.as_str()), "{a}");
        }
    }
}
