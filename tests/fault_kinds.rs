//! Fault kinds stay in their files (docs/fault-kinds.md): outside a
//! family's folder no code names one of its kinds, by its variant
//! (`Reply::Hang(_)`, through an alias, a `type`, `Self::` or a glob
//! import), its type (`AuthExpired`) or its `NAME` (`"auth_expired"`); the
//! rest of the code asks the family's trait or the kind's `Facts`. The
//! families, their kinds and names are read from each `registry!` list, so a
//! new kind is covered the day it is registered. Test code (`#[cfg(test)]`
//! items, wherever they sit) may name kinds. The scan itself is
//! `support/kind_scan.rs`.

mod common;

#[path = "support/kind_scan.rs"]
mod kind_scan;

use std::path::Path;

use common::repo;

/// Places that name a kind outside its family and stay, as `(file or
/// folder/, what is named, why)`. Most are words a wire or a report uses
/// for itself that happen to be a kind's name too.
const ALLOWED: &[(&str, &str, &str)] = &[
    (
        "src/provider/wire/",
        "\"text\"",
        "the wires' content type and field `text`",
    ),
    (
        "src/provider/wire/",
        "\"error\"",
        "the wires' error object and event `error`",
    ),
    (
        "src/provider/wire/gemini.rs",
        "\"result\"",
        "Gemini's functionResponse `result`",
    ),
    (
        "src/mcp/",
        "\"text\"",
        "MCP's content type `text` (no provider kind)",
    ),
    (
        "src/mcp/",
        "\"error\"",
        "JSON-RPC's `error` member (no provider kind)",
    ),
    ("src/store/", "\"text\"", "agents' stored message parts"),
    (
        "src/store/",
        "\"tool_call\"",
        "agents' stored tool-call item type",
    ),
    ("src/template.rs", "\"text\"", "a template's `text` field"),
    (
        "src/driver/acp/",
        "\"error\"",
        "JSON-RPC's `error` member and a failed prompt's exit reason (no provider kind)",
    ),
    (
        "src/driver/acp/",
        "\"result\"",
        "JSON-RPC's `result` member (no provider kind)",
    ),
    (
        "src/driver/acp/",
        "\"text\"",
        "ACP's content block type `text` (no provider kind)",
    ),
    (
        "src/driver/acp/",
        "\"tool_call\"",
        "ACP's session update `tool_call` (no provider kind)",
    ),
    (
        "src/observe.rs",
        "\"error\"",
        "ACP_PROMPT_ERROR: a refused ACP prompt's exit reason (no provider kind)",
    ),
    (
        "src/oracle/acp_quiet.rs",
        "\"tool_call\"",
        "ACP's `sessionUpdate` kind `tool_call` (no provider kind)",
    ),
    (
        "src/input.rs",
        "\"cassette\"",
        "the cassette file's size cap, named in errors",
    ),
    ("src/oracle/verdict.rs", "\"error\"", "the `error` verdict"),
    ("src/history/", "\"error\"", "the `error` verdict"),
    ("src/report/matrix.rs", "\"error\"", "the `error` verdict"),
    ("src/catalog/steps.rs", "\"error\"", "the `error` verdict"),
    (
        "src/oracle/mcp_abandoned.rs",
        "\"error\"",
        "a tool result's text that starts `error`",
    ),
    (
        "src/provider/upstream/faults/",
        "ErrorReply",
        "the relay fault `error` replaces the answer with an `error` reply (its schema)",
    ),
    (
        "src/explore/schedule.rs",
        "\"error\"",
        "the `error` expectation",
    ),
    (
        "src/explore/schedule.rs",
        "\"text\"",
        "the text reply's `text` field",
    ),
];

/// The scan's findings less the allowed ones.
fn leaks(root: &Path) -> Vec<String> {
    kind_scan::scan(root)
        .into_iter()
        .filter(|v| {
            !ALLOWED.iter().any(|(file, what, _)| {
                let place = if file.ends_with('/') {
                    v.starts_with(file)
                } else {
                    v.starts_with(&format!("{file}:"))
                };
                place && v.split_once(": ").is_some_and(|(_, w)| w.starts_with(what))
            })
        })
        .collect()
}

#[test]
fn no_fault_kind_is_named_outside_its_family() {
    let found = leaks(&repo());
    assert!(
        found.is_empty(),
        "{} place(s) name a fault kind outside its family's folder; ask the family's \
         trait (or the kind's Facts) instead:\n{}",
        found.len(),
        found.join("\n")
    );
}

/// One leak of each way of naming a kind, planted in a copy of src: the
/// scan names all six (the old scan, cut at the first `#[cfg(test)]` and
/// blind to types, globs, `Self::`, `type` aliases and names, found one).
#[test]
fn the_scan_names_each_way_of_naming_a_kind() {
    let d = tempfile::tempdir().unwrap();
    copy_dir(&repo().join("src"), &d.path().join("src"));
    let plant = |file: &str, code: &str| {
        let p = d.path().join(file);
        let mut text = std::fs::read_to_string(&p).unwrap();
        text.push_str(code);
        std::fs::write(&p, text).unwrap();
    };
    // 1. The kind's type (reaches its NAME, constructors, fields).
    plant(
        "src/oracle/credential.rs",
        "\nfn planted() -> &'static str {\n    <crate::provider::replies::AuthExpired as Kind>::NAME\n}\n",
    );
    // 2. A glob import of the kind's module.
    plant(
        "src/report/text.rs",
        "\nuse crate::mcp::replies::crash::*;\n",
    );
    // 3. `Self::` inside an impl of the family's enum.
    plant(
        "src/oracle/mod.rs",
        "\nimpl crate::provider::upstream::faults::Fault {\n    fn planted(&self) -> bool {\n        \
         matches!(self, Self::AnswerThenHang(_))\n    }\n}\n",
    );
    // 4. A `type` alias of the enum.
    plant(
        "src/history/analyze.rs",
        "\ntype Planted = crate::mcp::replies::Reply;\nfn planted(r: &Planted) -> bool {\n    \
         matches!(r, Planted::SchemaSwap(_))\n}\n",
    );
    // 5. The kind's NAME as a string literal.
    plant(
        "src/oracle/exercised.rs",
        "\nfn planted(kind: &str) -> bool {\n    kind == \"stall_mid_stream\"\n}\n",
    );
    // 6. After a test module in the middle of the file.
    plant(
        "src/provider/server/classify.rs",
        "\n#[cfg(test)]\nmod planted_tests {\n    fn t() -> bool { true }\n}\n\n\
         fn planted(r: &Reply) -> bool {\n    matches!(r, Reply::Hang(_))\n}\n",
    );
    let before = leaks(&repo());
    let after: Vec<String> = leaks(d.path())
        .into_iter()
        .filter(|l| !before.contains(l))
        .map(|l| {
            let (place, what) = l.split_once(": ").unwrap();
            let file = place.rsplit_once(':').unwrap().0;
            format!("{file}: {what}")
        })
        .collect();
    assert_eq!(
        after,
        [
            "src/history/analyze.rs: Planted::SchemaSwap",
            "src/oracle/credential.rs: AuthExpired",
            "src/oracle/exercised.rs: \"stall_mid_stream\"",
            "src/oracle/mod.rs: Self::AnswerThenHang",
            "src/provider/server/classify.rs: Reply::Hang",
            "src/report/text.rs: replies::crash::*",
        ],
        "6 planted leaks, each named once"
    );
}

/// The reading: comments, strings and test items, however placed, are
/// left out; test-only module files too.
#[test]
fn test_items_are_cut_by_their_braces() {
    let src = kind_scan::read(
        "fn a() {}\n#[cfg(test)]\nmod t {\n    fn b() { let s = \"}\"; let c = '}'; }\n    // }\n}\n\
         fn c<'a>(x: &'a str) { Reply::Hang }\n#[cfg(test)]\nmod fixtures;\n",
    );
    assert!(!src.code.contains("fn b"), "{}", src.code);
    assert!(
        src.code.contains("fn c<'a>(x: &'a str) { Reply::Hang }"),
        "{}",
        src.code
    );
    assert_eq!(src.code.lines().count(), 9, "line numbers kept");
    assert_eq!(src.test_modules, ["fixtures"]);
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let (p, q) = (e.path(), to.join(e.file_name()));
        if p.is_dir() {
            copy_dir(&p, &q);
        } else {
            std::fs::copy(&p, &q).unwrap();
        }
    }
}
