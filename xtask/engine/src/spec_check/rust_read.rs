//! One tree-sitter parse of a Rust file for both things the gate reads from it: the references in
//! its comments ([`super::comment_refs`]) and its code units (functions, structs, impls, modules,
//! …), each as tracey-core 1.3.0 finds them. tracey-core offers the two only as separate calls
//! that each parse the file (`Reqs::extract_from_content`, `code_units::extract_rust`), and
//! parsing is most of a run's time; this reads the same grammar (tracey-core's own, arborium's
//! Rust) into one tree and walks it once.
//!
//! A code unit is what tracey-core makes of it: its kind by node kind, its name from the node's
//! `name` field (an impl's from its `type`), its first line moved up to the first of the comments
//! and attributes right before it. Its references are not gathered: the gate reads references
//! from the comments above, not from units.

use std::cell::RefCell;
use std::path::Path;

use arborium_tree_sitter::{Language, Node, Parser, TreeCursor};
use tracey_core::ReqReference;
use tracey_core::code_units::{CodeUnit, CodeUnitKind};

use super::comment_refs::CommentRefs;

/// A Rust file's references and code units, in the tree's order.
pub struct RustRead {
    /// Every reference in the file's comments, as `Reqs::extract_from_content` gives them.
    pub refs: Vec<ReqReference>,
    /// Every code unit, as `code_units::extract_rust` gives them but without their `req_refs`.
    pub units: Vec<CodeUnit>,
}

thread_local! {
    /// Each parse thread's parser, set to the Rust grammar once, and that grammar's kinds.
    static PARSER: RefCell<Option<(Parser, Kinds)>> = const { RefCell::new(None) };
}

/// What the walk needs to know of each node kind of the grammar, by kind id: the walk meets every
/// node of the file, and comparing each one's kind name with some thirty names was a fifth of
/// the walk's time. Made from the same names ([`is_comment`], [`is_comment_like`],
/// [`unit_kind`]), so it classifies as they do.
struct Kinds(Vec<Kind>);

#[derive(Clone, Copy, Default)]
struct Kind {
    comment: bool,
    comment_like: bool,
    unit: Option<CodeUnitKind>,
}

impl Kind {
    /// The kind named `name`.
    fn named(name: &str) -> Self {
        Kind {
            comment: is_comment(name),
            comment_like: is_comment_like(name),
            unit: unit_kind(name),
        }
    }
}

impl Kinds {
    fn of(language: &Language) -> Self {
        let count = u16::try_from(language.node_kind_count()).unwrap_or(u16::MAX);
        Kinds(
            (0..count)
                .map(|id| {
                    language
                        .node_kind_for_id(id)
                        .map_or(Kind::default(), Kind::named)
                })
                .collect(),
        )
    }

    /// The kind of `node`; an id the grammar did not list (none should be) is looked up by name.
    fn get(&self, node: Node<'_>) -> Kind {
        self.0
            .get(usize::from(node.kind_id()))
            .copied()
            .unwrap_or_else(|| Kind::named(node.kind()))
    }
}

/// Reads `content`, the Rust file at `path`, with one parse.
pub fn read(path: &Path, content: &str) -> RustRead {
    let parsed = PARSER.with(|cell| {
        let mut cell = cell.borrow_mut();
        if cell.is_none() {
            let language: Language = arborium_rust::language().into();
            let mut parser = Parser::new();
            parser.set_language(&language).ok()?;
            *cell = Some((parser, Kinds::of(&language)));
        }
        let (parser, kinds) = cell.as_mut()?;
        let tree = parser.parse(content, None)?;
        let mut walk = Walk {
            path,
            source: content,
            kinds,
            marks: marks(content),
            line_starts: None,
            comments: CommentRefs::new(path, content),
            units: Vec::new(),
        };
        walk.visit(&mut tree.walk(), None);
        Some(RustRead {
            refs: walk.comments.finish(),
            units: walk.units,
        })
    });
    let Some(read) = parsed else {
        // The grammar would not load, or the parse gave up: tracey-core's own calls say what
        // such a file holds.
        return RustRead {
            refs: tracey_core::Reqs::extract_from_content(path, content).references,
            units: tracey_core::code_units::extract_rust(path, content).units,
        };
    };
    read
}

/// The walk's state: what it has found so far.
struct Walk<'a> {
    path: &'a Path,
    source: &'a str,
    kinds: &'a Kinds,
    /// Where something the walk looks for may start ([`marks`]), in order.
    marks: Vec<usize>,
    /// The byte each line starts at, made when a unit first needs it.
    line_starts: Option<Vec<usize>>,
    comments: CommentRefs<'a>,
    units: Vec<CodeUnit>,
}

impl Walk<'_> {
    /// Visits the cursor's node and, in order, its descendants; `comments_from` is the first line
    /// of the comments and attributes right before the node among its siblings.
    fn visit(&mut self, cursor: &mut TreeCursor<'_>, comments_from: Option<usize>) {
        let node = cursor.node();
        let kind = self.kinds.get(node);
        if kind.comment {
            self.comments.comment(
                node.start_byte(),
                node.end_byte(),
                node.start_position().row + 1,
            );
        }
        if let Some(unit_kind) = kind.unit {
            let unit = self.unit(node, unit_kind, comments_from);
            self.units.push(unit);
        }
        // A node whose text holds no mark holds no comment and no unit: its subtree is skipped,
        // which spares the walk most of a function body's expressions.
        if self.may_hold(node) && cursor.goto_first_child() {
            // The first line of the run of comment-like siblings just passed.
            let mut run: Option<usize> = None;
            loop {
                let child = cursor.node();
                self.visit(cursor, run);
                run = self.kinds.get(child).comment_like.then(|| {
                    let line = child.start_position().row + 1;
                    run.map_or(line, |first| first.min(line))
                });
                if !cursor.goto_next_sibling() {
                    break;
                }
            }
            cursor.goto_parent();
        }
    }

    fn unit(
        &mut self,
        node: Node<'_>,
        kind: CodeUnitKind,
        comments_from: Option<usize>,
    ) -> CodeUnit {
        let start_line = comments_from.unwrap_or(node.start_position().row + 1);
        let start_byte = match comments_from {
            Some(line) => self.line_start(line),
            None => node.start_byte(),
        };
        CodeUnit {
            kind,
            name: name(node).and_then(|n| self.source.get(n.byte_range()).map(str::to_owned)),
            file: self.path.to_path_buf(),
            start_line,
            end_line: node.end_position().row + 1,
            start_byte,
            end_byte: node.end_byte(),
            req_refs: Vec::new(),
        }
    }

    /// Whether `node`'s bytes hold one of [`Walk::marks`].
    fn may_hold(&self, node: Node<'_>) -> bool {
        let after = self.marks.partition_point(|&at| at < node.start_byte());
        self.marks
            .get(after)
            .is_some_and(|&at| at < node.end_byte())
    }

    /// The byte 1-based `line` starts at, or 0 when the source has no character there.
    fn line_start(&mut self, line: usize) -> usize {
        let source = self.source;
        let starts = self.line_starts.get_or_insert_with(|| {
            std::iter::once(0)
                .chain(source.match_indices('\n').map(|(at, _)| at + 1))
                .collect()
        });
        line.checked_sub(1)
            .and_then(|index| starts.get(index))
            .copied()
            .filter(|&at| at < source.len())
            .unwrap_or(0)
    }
}

/// The words a node of one of [`unit_kind`]'s kinds holds in its text (`fn` for a function, `impl`
/// for an impl, ...).
const UNIT_WORDS: [&[u8]; 10] = [
    b"fn",
    b"struct",
    b"enum",
    b"trait",
    b"impl",
    b"mod",
    b"const",
    b"static",
    b"type",
    b"macro_rules",
];

/// Every byte of `source` where a comment (`//`, `/*`) or a word of [`UNIT_WORDS`] starts, in
/// order: a node without one in its bytes holds no comment and no code unit. More than that (a
/// word in a string, `//` in a URL) only costs a visit.
fn marks(source: &str) -> Vec<usize> {
    let bytes = source.as_bytes();
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut marks = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let b = bytes[at];
        if b == b'/' && matches!(bytes.get(at + 1), Some(b'/' | b'*')) {
            marks.push(at);
            // One byte on, not two: in `*//*` the second comment's `/*` starts at the first's
            // closing `/`, and gets its own mark.
            at += 1;
        } else if word(b) {
            let end = bytes[at..]
                .iter()
                .position(|&b| !word(b))
                .map_or(bytes.len(), |n| at + n);
            if UNIT_WORDS.contains(&&bytes[at..end]) {
                marks.push(at);
            }
            at = end;
        } else {
            at += 1;
        }
    }
    marks
}

/// The node kinds whose text tracey-core reads references from.
fn is_comment(kind: &str) -> bool {
    matches!(
        kind,
        "line_comment"
            | "block_comment"
            | "comment"
            | "multiline_comment"
            | "bracket_comment"
            | "documentation_comment"
            | "line_outer_doc_comment"
            | "line_inner_doc_comment"
            | "block_outer_doc_comment"
            | "block_inner_doc_comment"
    )
}

/// The node kinds tracey-core counts into the code unit that follows them.
fn is_comment_like(kind: &str) -> bool {
    matches!(
        kind,
        "line_comment"
            | "block_comment"
            | "comment"
            | "attribute_item"
            | "decorator"
            | "multiline_comment"
            | "bracket_comment"
            | "documentation_comment"
    )
}

/// The code unit a Rust node kind is. A kind added here needs its word in [`UNIT_WORDS`], or the
/// walk skips the subtrees that hold it.
fn unit_kind(kind: &str) -> Option<CodeUnitKind> {
    Some(match kind {
        "function_item" => CodeUnitKind::Function,
        "struct_item" => CodeUnitKind::Struct,
        "enum_item" => CodeUnitKind::Enum,
        "trait_item" => CodeUnitKind::Trait,
        "impl_item" => CodeUnitKind::Impl,
        "mod_item" => CodeUnitKind::Module,
        "const_item" => CodeUnitKind::Const,
        "static_item" => CodeUnitKind::Static,
        "type_item" => CodeUnitKind::TypeAlias,
        "macro_definition" => CodeUnitKind::Macro,
        _ => return None,
    })
}

/// The node naming a unit, looked for as tracey-core looks: the `name` field, an identifier in a
/// `declarator` chain, the `type` field (an impl's), the first identifier child, then an
/// identifier in a `signature` or `type_head` child (or in a call there).
fn name(node: Node<'_>) -> Option<Node<'_>> {
    node.child_by_field_name("name")
        .or_else(|| node.child_by_field_name("declarator").and_then(declared))
        .or_else(|| node.child_by_field_name("type"))
        .or_else(|| first_child(node, &["identifier", "type_identifier"]))
        .or_else(|| {
            let wrapper = node
                .child_by_field_name("signature")
                .or_else(|| first_child(node, &["signature", "type_head"]))?;
            first_child(wrapper, &["identifier"]).or_else(|| {
                let call = first_child(wrapper, &["call_expression"])?;
                first_child(call, &["identifier"])
            })
        })
}

/// The first child of `of` of one of `kinds`.
fn first_child<'t>(of: Node<'t>, kinds: &[&str]) -> Option<Node<'t>> {
    let mut cursor = of.walk();
    of.children(&mut cursor).find(|c| kinds.contains(&c.kind()))
}

/// The identifier a declarator chain (`*name`, `(name)`, `name(...)`) declares.
fn declared(node: Node<'_>) -> Option<Node<'_>> {
    match node.kind() {
        "identifier" | "field_identifier" | "qualified_identifier" | "type_identifier" => {
            Some(node)
        }
        "function_declarator"
        | "pointer_declarator"
        | "parenthesized_declarator"
        | "reference_declarator" => node.child_by_field_name("declarator").and_then(declared),
        _ => None,
    }
}
