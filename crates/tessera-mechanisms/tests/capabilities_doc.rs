//! docs/capabilities.md shows the capability matrix of the registry, generated
//! (`tessera builtins --capabilities-markdown`); `TESSERA_BLESS=1` rewrites it.

const BEGIN: &str = "<!-- capabilities:begin -->\n";
const END: &str = "<!-- capabilities:end -->";

#[test]
fn the_doc_shows_the_registry_matrix() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/capabilities.md");
    let text = std::fs::read_to_string(path).expect("docs/capabilities.md");
    let start = text.find(BEGIN).expect("begin marker") + BEGIN.len();
    let end = text.find(END).expect("end marker");
    let matrix = tessera_mechanisms::capabilities::matrix_markdown();
    if std::env::var("TESSERA_BLESS").is_ok_and(|v| v == "1") {
        let fresh = format!("{}{matrix}{}", &text[..start], &text[end..]);
        std::fs::write(path, fresh).expect("write docs/capabilities.md");
        return;
    }
    assert_eq!(
        &text[start..end],
        matrix,
        "docs/capabilities.md differs from the registry: regenerate it with \
         TESSERA_BLESS=1 cargo test -p tessera-mechanisms --test capabilities_doc"
    );
}
