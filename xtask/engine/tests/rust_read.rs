//! The one-parse Rust reader (`spec_check::rust_read`) against tracey-core's own two parses, on
//! every Rust file of this workspace, of the engine's shape fixtures, and on snippets that reach
//! each rule of tracey's comment reading (ignore directives, markdown code, comment groups, block
//! comments, malformed references): the references and the code units must be the same.

// This test reads the workspace's own sources from the disk.
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};

use spec_engine::spec_check::rust_read;
use tracey_core::Reqs;
use tracey_core::code_units;

/// What is compared of a reference: everything tracey-core gives.
type Ref = (String, String, String, PathBuf, usize, usize, usize);
/// What is compared of a code unit: everything but its `req_refs` (not read by the gate).
type Unit = (String, Option<String>, usize, usize, usize, usize);

/// The differences between the one-parse reader and tracey-core on `content`, as `path`.
fn differences(path: &Path, content: &str) -> Vec<String> {
    let ours = rust_read::read(path, content);
    let refs = |refs: Vec<tracey_core::ReqReference>| -> Vec<Ref> {
        refs.into_iter()
            .map(|r| {
                (
                    r.prefix,
                    r.verb.as_str().to_owned(),
                    r.req_id.to_string(),
                    r.file,
                    r.line,
                    r.span.offset,
                    r.span.length,
                )
            })
            .collect()
    };
    let units = |units: Vec<code_units::CodeUnit>| -> Vec<Unit> {
        units
            .into_iter()
            .map(|u| {
                (
                    u.kind.as_str().to_owned(),
                    u.name,
                    u.start_line,
                    u.end_line,
                    u.start_byte,
                    u.end_byte,
                )
            })
            .collect()
    };
    let mut out = Vec::new();
    let (mine, theirs) = (
        refs(ours.refs),
        refs(Reqs::extract_from_content(path, content).references),
    );
    if mine != theirs {
        out.push(format!(
            "{}: references differ:\n  ours   {mine:?}\n  tracey {theirs:?}",
            path.display()
        ));
    }
    let (mine, theirs) = (
        units(ours.units),
        units(code_units::extract_rust(path, content).units),
    );
    if mine != theirs {
        out.push(format!(
            "{}: code units differ:\n  ours   {mine:?}\n  tracey {theirs:?}",
            path.display()
        ));
    }
    out
}

/// Every `.rs` file under `dir`, skipping build output and VCS directories.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if path.is_dir() {
            if name != "target" && name != ".git" {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_rust_file_of_the_workspace_reads_as_tracey_reads_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    assert!(files.len() > 100, "only {} Rust files found", files.len());
    let mut refs = 0;
    let mut problems = Vec::new();
    for path in &files {
        let Ok(content) = std::fs::read_to_string(path) else {
            continue;
        };
        refs += Reqs::extract_from_content(path, &content).references.len();
        problems.extend(differences(path, &content));
    }
    assert!(refs > 500, "only {refs} references read: not the workspace");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_rust_file_of_the_shape_fixtures_reads_as_tracey_reads_it() {
    let mut read = 0;
    let mut problems = Vec::new();
    for shape in spec_engine::shapes::all() {
        for (path, text) in &shape.files {
            if path.ends_with(".rs") {
                read += 1;
                problems.extend(differences(Path::new(path), text));
            }
        }
    }
    assert!(read > 5, "only {read} Rust files in the shapes");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Snippets that reach each of tracey's rules; each must read the same both ways, and together
/// they must find references (so an empty answer on both sides cannot pass unnoticed).
#[test]
fn edge_cases_read_as_tracey_reads_them() {
    let snippets = [
        // Verbs, a bare id, prefixes, versions, a word before the prefix, an identifier index.
        "// r[impl a.b] r[verify a.c+2] h2[depends x.y] r[related q.r] r[define d.e] r[a.f]\n\
         // xr[impl no.pe] slot_count[i] r[unknown a.b] r[impl A.b] r[impl a.] r[a.]\nfn f() {}\n",
        // Markdown code: inline spans, and a fenced block across a `///` group.
        "/// `r[impl in.code]` but r[impl out.code]\n///\n/// ```\n/// r[impl fenced.code]\n/// ```\n\
         /// r[verify after.fence]\nfn g() {}\n",
        // Groups by kind: `//!`, `///` and `//` lines do not join; `////` is plain.
        "//! ```\n// r[impl plain.between]\n//! ```\n//// r[impl four.slashes]\n/// x\nstruct S;\n",
        // Ignore directives.
        "// @tracey:ignore-next-line\n// r[impl ignored.next]\n// r[impl kept.one]\n\
         // @tracey:ignore-start\n// r[impl ignored.block]\n// @tracey:ignore-end\n// r[impl kept.two]\n\
         // @tracey:ignore-next-line\n\n// r[impl kept.three]\nconst C: u8 = 1;\n",
        // Block comments over several lines, nested and doc forms; a reference at the text's end.
        "/* r[impl block.one]\n   r[verify block.two] */\n/** r[impl doc.block] */\n/*! r[impl inner.block] */\n\
         fn h() { /* r[impl in.body] */ }\n// r[impl at.end",
        // Items and their leading comments and attributes: units in modules, impls, macros.
        "#[cfg(test)]\n// r[verify m.t]\nmod tests {\n    use super::*;\n    /// doc\n    #[test]\n    \
         // r[verify m.u]\n    fn t() {}\n}\nimpl<T> Tr for W<T> {\n    // r[impl w.f]\n    fn f(&self) {}\n}\n\
         macro_rules! mac { () => {} }\nstatic X: u8 = 0;\ntype Y = u8;\nenum E { A }\ntrait T {}\nmod child;\n",
        // Strings holding comment-like text, CRLF lines, and a parse error.
        "fn s() { let _ = \"// r[impl in.string]\"; }\r\n// r[impl after.crlf]\r\n// r[impl crlf.two]\r\nfn ( {\n",
        // Unicode before a reference, and one in a non-ASCII comment.
        "// é r[impl after.accent] ü\n/// ß `x` r[verify uni.code]\nfn u() {}\n",
        // Comments whose only references have a prefix other than `r`.
        "// i[impl only.other]\nfn o() {}\n/* h2[verify x.y] */\nfn p() {}\n",
        // Deep in expressions, where the walk skips subtrees with no comment and no item word:
        // items and comments inside closures, blocks and calls; item words inside identifiers
        // and raw identifiers; a file with neither.
        "fn outer() {\n    let f = |x: u8| { const K: u8 = 2; x * K };\n    call(f, { fn inner() {} 1 }, \
         [1, /* r[impl deep.block] */ 2]);\n    if a { b(c(d(// r[impl deep.line]\n e))) }\n    \
         let module_type = r#fn + impls + constant; static_ref(typed);\n}\n",
        "let x = 1 + 2;\n",
    ];
    // Every unit kind nested where only its own word marks it: a kind whose word the walk
    // forgot would be missing here.
    let every_kind = "fn f() {\n    g({ struct A; 1 });  g({ enum B { X } 1 });  g({ trait C {} 1 });\n    \
        g({ impl A {} 1 });  g({ mod d {} 1 });  g({ static E: u8 = 0; 1 });\n    \
        g({ type F = u8; 1 });  g({ macro_rules! h { () => {} } 1 });\n    \
        g({ const G: u8 = 0; 1 });  g({ fn i() {} 1 });\n}\n";
    let path = PathBuf::from("every_kind.rs");
    assert_eq!(
        code_units::extract_rust(&path, every_kind).units.len(),
        11,
        "tracey's count of the snippet's units"
    );
    assert_eq!(differences(&path, every_kind), Vec::<String>::new());
    // Two block comments back to back (`*//*`), inside an expression.
    let adjacent = "fn f() { g(a /* a *//* r[verify adj.two] */); }\n";
    assert_eq!(
        differences(Path::new("adjacent.rs"), adjacent),
        Vec::<String>::new()
    );
    let mut found = 0;
    let mut problems = Vec::new();
    for (n, snippet) in snippets.iter().enumerate() {
        let path = PathBuf::from(format!("snippet{n}.rs"));
        found += Reqs::extract_from_content(&path, snippet).references.len();
        problems.extend(differences(&path, snippet));
    }
    assert!(found > 20, "only {found} references in the snippets");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
