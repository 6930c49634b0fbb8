//! Generated pages of the manual are current: `docs/network-functions.md` is exactly what
//! `dataplane nfs` prints from the NF registry (behind a fixed heading), so the page cannot
//! drift from the parameters the config checker accepts. After a deliberate change to an NF's
//! registration, rewrite the page with `NMDP_BLESS=1 cargo test --test docs_current`.

use std::path::Path;

/// The heading the page carries above the generated reference.
const HEADING: &str = "# Network functions\n\n\
Generated from the NF registry by `dataplane nfs` (rewrite with \
`NMDP_BLESS=1 cargo test --test docs_current`). Each entry says what the function does, the \
parameters of its `[[pipeline]]` table with their defaults, the drop reasons it adds and the \
profile key of its CPU cost in virtual-time runs. [Adding a network function](adding-an-nf.md) \
walks through writing one.\n\n";

#[test]
fn network_functions_page_is_what_the_registry_prints() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/network-functions.md");
    let want = format!("{HEADING}{}", nfs::reference_markdown());
    if std::env::var_os("NMDP_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&path, &want).expect("write docs/network-functions.md");
        return;
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "docs/network-functions.md differs from `dataplane nfs`; if the registry change is \
         deliberate, rewrite it with NMDP_BLESS=1 cargo test --test docs_current"
    );
}
