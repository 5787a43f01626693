//! Test evidence fingerprints: a run's results speak for the code they ran on only, so the
//! producer of the results (`cargo xtask test`, through holdfast-test-runner) records every rule's
//! fingerprint ([`super::fingerprint`]) in the tree the tests were built from, beside the results,
//! and every reading of the same results calls a rule whose fingerprint changed since stale rather
//! than passed.
//!
//! A run is told apart by the SHA-256 of its results files' contents (not their times: a copied
//! or touched file is the same run). The engine touches no file and a reader never makes a record:
//! [`record`] and [`render`] give the producer its text; [`take`] reads it, and without a usable
//! one notes why (passes are then judged by file times only).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::Tree;
use super::rules::Rule;
use crate::model::proof::Fingerprint;
use crate::model::tree::Tree as Source;

/// The record's format; a record of another is made anew.
pub const SCHEMA: u32 = 1;

/// What the file beside the results holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// [`SCHEMA`].
    pub schema: u32,
    /// The SHA-256 (hex) of the results files' contents, in the order given.
    pub results: String,
    /// When the results were written (UTC), as the gate's mode line says it.
    pub written: String,
    /// Each rule of the tree (`prefix[base id]`, without its version) and its fingerprint,
    /// `TEXT/IMPL/VERIFY`.
    pub rules: BTreeMap<String, String>,
}

/// Why a rule's test evidence is stale.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Staleness {
    /// These parts (`text`, `impl`, `tests`) changed since the tests ran.
    Changed(Vec<&'static str>),
    /// The record has no such rule: it was added since the tests ran.
    Added,
}

impl Staleness {
    /// `impl changed since the tests ran`, `text and tests changed …`, `the rule was added …`.
    pub fn describe(&self) -> String {
        match self {
            Staleness::Added => "the rule was added since the tests ran".to_owned(),
            Staleness::Changed(parts) => {
                let what = match parts.as_slice() {
                    [] => "nothing".to_owned(),
                    [one] => (*one).to_owned(),
                    [init @ .., last] => format!("{} and {last}", init.join(", ")),
                };
                format!("{what} changed since the tests ran")
            }
        }
    }
}

/// The fingerprints a run's results are judged with: the record its producer wrote beside them,
/// or none (then passes are judged by file times only, and `note` says why).
#[derive(Debug, Clone)]
pub struct Prints {
    /// Where the record lies.
    pub path: PathBuf,
    /// The record of this run, when one was found.
    pub record: Option<Record>,
    /// Why there is no usable record (missing, unreadable, of other results), for the report.
    pub note: Option<String>,
}

/// Where the record of the run whose first results file is `first` lies: beside it, named after
/// it (`junit.xml` → `junit.xml.spec-evidence.json`), so two runs' reports in one directory keep
/// a record each.
pub fn path_for(first: &Path) -> PathBuf {
    let name = first
        .file_name()
        .map_or_else(|| "results".into(), |n| n.to_string_lossy().into_owned());
    first.with_file_name(format!("{name}.spec-evidence.json"))
}

/// The key of a run: the SHA-256 of `texts` (each results file's contents), length-prefixed.
pub fn key<'a>(texts: impl IntoIterator<Item = &'a str>) -> String {
    let mut hasher = Sha256::new();
    for text in texts {
        hasher.update((text.len() as u64).to_le_bytes());
        hasher.update(text.as_bytes());
    }
    hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A rule's key in a record: its prefix and base id, so a version bump is a changed text, not an
/// added rule.
fn rule_key(rule: &Rule) -> String {
    format!("{}[{}]", rule.prefix, rule.id.base)
}

/// Every rule of `tree` with its fingerprint now.
// i[impl spec-check.test-backed.fingerprint+2]
pub fn record(tree: &Tree, results: String, written: SystemTime) -> Record {
    Record {
        schema: SCHEMA,
        results,
        written: crate::model::timestamp::utc(written),
        rules: tree
            .rules()
            .iter()
            .map(|rule| (rule_key(rule), super::fingerprint::of(tree, rule).render()))
            .collect(),
    }
}

/// The prints for the run of `key` whose first results file is `first`: the record beside it
/// when it is of this run. A reader never makes one: a missing, unreadable, malformed or other
/// run's record leaves no fingerprints, and a note says so.
// i[impl spec-check.test-backed.fingerprint+2]
pub fn take(source: &dyn Source, first: &Path, key: &str) -> Prints {
    let path = path_for(first);
    let shown = path.display();
    let (record, note) = match source.read(&path) {
        Err(_) if !source.is_file(&path) => (
            None,
            "no evidence record for these results: passes judged by file times only".to_owned(),
        ),
        Err(error) => (
            None,
            format!(
                "the evidence record {shown} is unreadable ({error}): passes judged by file times only"
            ),
        ),
        Ok(text) => match serde_json::from_str::<Record>(&text) {
            Err(error) => (
                None,
                format!(
                    "the evidence record {shown} is malformed ({error}): passes judged by file times only"
                ),
            ),
            Ok(record) if record.schema != SCHEMA => (
                None,
                format!(
                    "the evidence record {shown} has schema {} (this engine reads {SCHEMA}): passes judged by file times only",
                    record.schema
                ),
            ),
            Ok(record) if record.results != key => (
                None,
                format!(
                    "the evidence record {shown} is of other results: passes judged by file times only"
                ),
            ),
            Ok(record) => {
                return Prints {
                    path,
                    record: Some(record),
                    note: None,
                };
            }
        },
    };
    Prints {
        path,
        record,
        note: Some(note),
    }
}

/// The record as its file holds it: pretty JSON and a newline.
pub fn render(record: &Record) -> String {
    let mut text = serde_json::to_string_pretty(record).unwrap_or_default();
    text.push('\n');
    text
}

impl Prints {
    /// Whether `rule`'s evidence is stale in `tree`: `None` while its fingerprint is the
    /// recorded one, or when there is no record to judge by.
    // i[impl spec-check.test-backed.fingerprint+2]
    pub fn stale(&self, tree: &Tree, rule: &Rule) -> Option<Staleness> {
        let record = self.record.as_ref()?;
        let Some(then) = record.rules.get(&rule_key(rule)) else {
            return Some(Staleness::Added);
        };
        let now = super::fingerprint::of(tree, rule);
        // A cell that is no fingerprint says nothing of the run: every part counts as changed.
        let changed = Fingerprint::parse(then)
            .map_or_else(|| vec!["text", "impl", "tests"], |then| then.changed(&now));
        (!changed.is_empty()).then_some(Staleness::Changed(changed))
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::Memory;
    use crate::spec_check::problem::{Kind, Problem};
    use crate::spec_check::report::Outcome;

    const CONFIG: &str = "specs (\n  {\n    name demo\n    include (docs/spec.md)\n    impls (\n      {\n        name rust\n        include (crates/**/*.rs)\n      }\n    )\n  }\n)\n";

    const SPEC: &str =
        "# Demo\n\n> r[demo.alpha]\n> Alpha holds.\n\n> r[demo.beta level=should]\n> Beta holds.\n";

    const LIB: &str = "// r[impl demo.alpha]\npub fn alpha() -> u32 {\n    1\n}\n\n// r[impl demo.beta]\npub fn beta() {}\n\n#[cfg(test)]\nmod tests {\n    // r[verify demo.alpha]\n    #[test]\n    fn alpha_holds() {\n        assert_eq!(super::alpha(), 1);\n    }\n\n    // r[verify demo.beta]\n    #[test]\n    fn beta_holds() {\n        super::beta();\n    }\n}\n";

    const JUNIT: &str = "<testsuites><testsuite name=\"demo\" tests=\"2\"><testcase name=\"tests::alpha_holds\" classname=\"demo\"/><testcase name=\"tests::beta_holds\" classname=\"demo\"/></testsuite></testsuites>";

    const RESULTS: &str = "target/nextest/ci/junit.xml";

    /// The demo crate, its spec and a run in which both tests passed.
    fn tree(spec: &str, lib: &str) -> Memory {
        Memory::new([
            (".config/tracey/config.styx", CONFIG),
            ("docs/spec.md", spec),
            ("Cargo.toml", "[workspace]\nmembers = [\"crates/demo\"]\n"),
            (
                "crates/demo/Cargo.toml",
                "[package]\nname = \"demo\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
            ),
            ("crates/demo/src/lib.rs", lib),
            (RESULTS, JUNIT),
        ])
    }

    fn check(tree: &Memory) -> Outcome {
        crate::spec_check::check(tree, &[Path::new(RESULTS)], None, &[]).expect("judged")
    }

    /// The record the run's producer writes for `tree`'s results (JUNIT), as its file holds it.
    fn recorded(tree: &Memory) -> String {
        let (_, read) = crate::spec_check::read(tree).expect("read");
        let record = super::record(
            &read,
            super::key([JUNIT]),
            std::time::SystemTime::UNIX_EPOCH,
        );
        assert!(
            super::path_for(Path::new(RESULTS))
                .ends_with("target/nextest/ci/junit.xml.spec-evidence.json")
        );
        super::render(&record)
    }

    /// The problems of a reading of `spec` and `lib` by the run recorded on SPEC and LIB.
    fn later(spec: &str, lib: &str) -> Outcome {
        let record = recorded(&tree(SPEC, LIB));
        let mut now = tree(spec, lib);
        now.insert("target/nextest/ci/junit.xml.spec-evidence.json", record);
        check(&now)
    }

    fn stale(outcome: &Outcome) -> Vec<String> {
        outcome
            .problems
            .iter()
            .filter(|p| p.kind == Kind::EvidenceStale)
            .map(|p| p.message.clone())
            .collect()
    }

    // i[verify spec-check.test-backed.fingerprint+2]
    #[test]
    fn a_later_reading_of_the_same_results_judges_the_evidence_recorded_at_the_first() {
        // Unchanged: the record is read, not made again, and both rules are tested.
        let outcome = later(SPEC, LIB);
        assert_eq!(outcome.problems, Vec::<Problem>::new());
        assert_eq!(
            outcome
                .notes
                .iter()
                .filter(|n| n.contains("evidence record"))
                .count(),
            0
        );
        assert_eq!(outcome.specs[0].tested, Some(2));

        // The body of alpha changed after the run: its pass is stale evidence, not tested,
        // though still judged by the run.
        let outcome = later(SPEC, &LIB.replace("    1\n", "    2\n"));
        assert_eq!(outcome.specs[0].tested, Some(1));
        assert_eq!(outcome.mode.judged, Some(2));
        assert_eq!(outcome.untested, ["r[demo.alpha]"]);
        let [problem] = outcome.problems.as_slice() else {
            panic!("{:?}", outcome.problems);
        };
        assert_eq!(problem.kind, Kind::EvidenceStale);
        assert_eq!(problem.rule.as_deref(), Some("r[demo.alpha]"));
        insta::assert_snapshot!(problem.to_string());
    }

    // i[verify spec-check.test-backed.fingerprint+2]
    #[test]
    fn each_changed_part_is_named_and_formatting_is_no_change() {
        let tests = later(SPEC, &LIB.replace("alpha(), 1)", "alpha(), 1 + 0)"));
        assert!(
            stale(&tests)[0].contains(": tests changed since the tests ran"),
            "{:?}",
            tests.problems
        );
        let text = later(&SPEC.replace("Alpha holds.", "Alpha always holds."), LIB);
        assert!(
            stale(&text)[0].contains(": text changed since the tests ran"),
            "{:?}",
            text.problems
        );
        // Comments, formatting and a version bump's marker alone change no fingerprint.
        let reformatted = LIB
            .replace("    1\n", "    // one\n    1\n")
            .replace("pub fn alpha() -> u32 {", "pub fn alpha()->u32{");
        assert_eq!(later(SPEC, &reformatted).problems, Vec::<Problem>::new());
        // The record keys a rule by its base id: alpha bumped to +2, text unchanged, is neither
        // added nor changed.
        let bumped = later(
            &SPEC.replace("r[demo.alpha]", "r[demo.alpha+2]"),
            &LIB.replace("demo.alpha]", "demo.alpha+2]"),
        );
        assert_eq!(bumped.problems, Vec::<Problem>::new());
        // Both at once: every part named.
        let both = later(
            &SPEC.replace("Alpha holds.", "Alpha always holds."),
            &LIB.replace("    1\n", "    2\n"),
        );
        assert!(
            stale(&both)[0].contains(": text and impl changed since the tests ran"),
            "{:?}",
            both.problems
        );
    }

    // i[verify spec-check.test-backed.fingerprint+2]
    #[test]
    fn a_rule_added_since_the_run_is_stale_and_a_lower_level_is_only_counted() {
        let spec = format!("{SPEC}\n> r[demo.gamma]\n> Gamma holds.\n");
        let lib = LIB.replace(
            "    // r[verify demo.alpha]\n",
            "    // r[verify demo.alpha]\n    // r[verify demo.gamma]\n",
        );
        let lib = format!("// r[impl demo.gamma]\npub fn gamma() {{}}\n\n{lib}");
        let outcome = later(&spec, &lib);
        assert_eq!(
            stale(&outcome),
            [
                "rule r[demo.gamma] has stale test evidence: the rule was added since the tests \
                 ran (results written 1970-01-01 00:00:00 UTC): `demo tests::alpha_holds` \
                 (crates/demo/src/lib.rs:15) passed on the older tree; rerun `cargo xtask test \
                 -- -p demo`"
            ],
            "{:?}",
            outcome.problems
        );
        // beta is SHOULD: its stale evidence is not tested, and fails nothing.
        let outcome = later(
            SPEC,
            &LIB.replace("super::beta();", "super::beta(); super::beta();"),
        );
        assert_eq!(outcome.problems, Vec::<Problem>::new());
        assert_eq!(outcome.untested, ["r[demo.beta]"]);
    }

    /// The notes of `outcome` about its evidence record.
    fn record_notes(outcome: &Outcome) -> Vec<String> {
        outcome
            .notes
            .iter()
            .filter(|n| n.contains("evidence record"))
            .cloned()
            .collect()
    }

    // i[verify spec-check.test-backed.fingerprint+2]
    #[test]
    fn a_reader_never_makes_a_record_and_notes_a_missing_or_unusable_one() {
        let changed = LIB.replace("    1\n", "    2\n");
        let path = "target/nextest/ci/junit.xml.spec-evidence.json";
        // No record: passes judged by file times only, one note, nothing stale.
        let outcome = check(&tree(SPEC, &changed));
        assert_eq!(outcome.problems, Vec::<Problem>::new());
        assert_eq!(
            record_notes(&outcome),
            ["no evidence record for these results: passes judged by file times only"]
        );
        // A record of other results (another run): named, not replaced.
        let record = recorded(&tree(SPEC, LIB));
        let mut now = tree(SPEC, &changed);
        now.insert(
            RESULTS,
            JUNIT.replace("tests=\"2\"", "tests=\"2\" time=\"1\""),
        );
        now.insert(path, record.clone());
        let outcome = check(&now);
        assert_eq!(outcome.problems, Vec::<Problem>::new());
        assert_eq!(
            record_notes(&outcome),
            [format!(
                "the evidence record {path} is of other results: passes judged by file times only"
            )]
        );
        // A record that does not parse, or of another schema: named.
        for (broken, why) in [
            ("{".to_owned(), "is malformed"),
            (
                record.replace("\"schema\": 1", "\"schema\": 2"),
                "has schema 2",
            ),
        ] {
            let mut now = tree(SPEC, &changed);
            now.insert(path, broken);
            let notes = record_notes(&check(&now));
            assert!(notes.len() == 1 && notes[0].contains(why), "{notes:?}");
        }
        // The reviewer's reproduction: a reading after a corrupted record made no record of the
        // tree now, so the run's record put back still calls the edit stale.
        let mut now = tree(SPEC, &changed);
        now.insert(path, "{");
        let _ = check(&now);
        assert_eq!(
            crate::Tree::read(&now, Path::new(path)).ok().as_deref(),
            Some("{")
        );
        now.insert(path, record);
        assert_eq!(stale(&check(&now)).len(), 1);
    }

    /// A tree whose evidence records exist but cannot be read (as a file without read
    /// permission on a disk).
    struct Unreadable(Memory);

    impl crate::Tree for Unreadable {
        fn root(&self) -> &Path {
            self.0.root()
        }

        fn read(&self, path: &Path) -> std::io::Result<String> {
            if path.to_string_lossy().ends_with(".spec-evidence.json") {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    "permission denied",
                ));
            }
            self.0.read(path)
        }

        fn files_under(&self, dir: &Path) -> Vec<std::path::PathBuf> {
            self.0.files_under(dir)
        }

        fn is_file(&self, path: &Path) -> bool {
            self.0.is_file(path)
        }

        fn is_dir(&self, path: &Path) -> bool {
            self.0.is_dir(path)
        }

        fn modified(&self, path: &Path) -> std::io::Result<std::time::SystemTime> {
            self.0.modified(path)
        }

        fn canonical(&self, path: &Path) -> std::path::PathBuf {
            self.0.canonical(path)
        }
    }

    /// A record that is there but cannot be read is named as unreadable, with the reason, not
    /// taken for a missing one.
    // i[verify spec-check.test-backed.fingerprint+2]
    #[test]
    fn an_unreadable_record_is_told_from_a_missing_one() {
        let path = "target/nextest/ci/junit.xml.spec-evidence.json";
        let mut now = tree(SPEC, &LIB.replace("    1\n", "    2\n"));
        now.insert(path, recorded(&tree(SPEC, LIB)));
        let now = Unreadable(now);
        let outcome =
            crate::spec_check::check(&now, &[Path::new(RESULTS)], None, &[]).expect("judged");
        assert_eq!(outcome.problems, Vec::<Problem>::new());
        assert_eq!(
            record_notes(&outcome),
            [format!(
                "the evidence record {path} is unreadable (permission denied): passes judged by \
                 file times only"
            )]
        );
    }

    // i[verify spec-check.test-backed.fingerprint+2]
    #[test]
    fn a_cell_that_is_no_fingerprint_makes_every_part_stale() {
        // A cell that is no fingerprint says nothing of the run: every part is stale.
        let record = recorded(&tree(SPEC, LIB));
        let cell = record
            .lines()
            .find(|l| l.contains("r[demo.alpha]"))
            .expect("alpha recorded")
            .to_owned();
        let mut now = tree(SPEC, LIB);
        now.insert(
            "target/nextest/ci/junit.xml.spec-evidence.json",
            record.replace(&cell, "    \"r[demo.alpha]\": \"no\","),
        );
        assert!(
            stale(&check(&now))[0].contains("text, impl and tests changed"),
            "{record}"
        );
    }
}
