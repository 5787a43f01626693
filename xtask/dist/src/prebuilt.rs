//! What a built `holdfast` says of itself (`holdfast version --json`), and whether the package
//! may hold it: every one of [`FEATURES`], and for a release package not the test-only one.

use std::path::{Path, PathBuf};

use crate::package::{FEATURES, Profile, TEST_ONLY_FEATURE};

/// Why the binary an earlier build left is not packaged. Each names the build that makes one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// There is no binary.
    #[error("dist deb --no-build: there is no {} to package: build it first ({build})", binary.display())]
    Missing {
        /// Where it was looked for.
        binary: PathBuf,
        /// The build that makes one.
        build: String,
    },
    /// `holdfast version --json` failed or named no features.
    #[error("dist deb --no-build: `holdfast version --json` {said}")]
    Unanswered {
        /// What went wrong (`failed (STATUS)`, `named no features`).
        said: String,
    },
    /// A release package of a test build.
    #[error(
        "dist deb --no-build: {} has the test-only feature {TEST_ONLY_FEATURE} (a test build's, \
         e.g. through holdfast-e2e): a release package must not; build it without ({build}) \
         or package a debug build (--debug)",
        binary.display()
    )]
    TestOnly {
        /// The binary.
        binary: PathBuf,
        /// The build that makes one.
        build: String,
    },
    /// Features missing.
    #[error(
        "dist deb --no-build: {} lacks the feature(s) {}: build it with every feature first ({build})",
        binary.display(),
        missing.join(", ")
    )]
    Lacks {
        /// The binary.
        binary: PathBuf,
        /// The features it lacks.
        missing: Vec<&'static str>,
        /// The build that makes one.
        build: String,
    },
}

/// Judges the binary at `binary` by what `holdfast version --json` printed (`json`): it has
/// every one of [`FEATURES`]. More is fine for a debug package (CI's: the test build's binary
/// also has `testing-modules`, inert unless configured), but a release package must not accept a
/// `[testing]` config, so it refuses [`TEST_ONLY_FEATURE`].
///
/// # Errors
///
/// The answer names no features, or the binary lacks some, or a release has the test-only one.
// i[impl dist.deb.no-build]
pub fn judge(binary: &Path, profile: Profile, json: &[u8]) -> Result<(), Refused> {
    let build = profile.build_command();
    let built = features_of(json).ok_or_else(|| Refused::Unanswered {
        said: "named no features".to_owned(),
    })?;
    if profile == Profile::Release && built.iter().any(|f| f == TEST_ONLY_FEATURE) {
        return Err(Refused::TestOnly {
            binary: binary.to_path_buf(),
            build,
        });
    }
    let missing = missing_features(&built);
    if !missing.is_empty() {
        return Err(Refused::Lacks {
            binary: binary.to_path_buf(),
            missing,
            build,
        });
    }
    Ok(())
}

/// The `commit` of `holdfast version --json`'s output, when it names one.
pub fn commit_of(json: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(json).ok()?;
    value.get("commit")?.as_str().map(str::to_owned)
}

/// The `features` of `holdfast version --json`'s output.
pub fn features_of(json: &[u8]) -> Option<Vec<String>> {
    let value: serde_json::Value = serde_json::from_slice(json).ok()?;
    value
        .get("features")?
        .as_array()?
        .iter()
        .map(|f| f.as_str().map(str::to_owned))
        .collect()
}

/// Those of [`FEATURES`] not among `built`.
pub fn missing_features(built: &[String]) -> Vec<&'static str> {
    FEATURES
        .split(',')
        .filter(|f| !built.iter().any(|b| b == f))
        .collect()
}
