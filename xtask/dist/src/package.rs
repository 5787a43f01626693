//! What the package holds: the features its binary is built with, the shells' completions, and
//! the cargo profile the binary comes from.

/// The features the package's binary is built with: every one an operator may configure.
pub const FEATURES: &str = "etcd";

/// The feature a test build has and a release package must not (`[testing]` modules).
pub const TEST_ONLY_FEATURE: &str = "testing-modules";

/// The shells whose completions the package installs, and the file each is written to.
pub const COMPLETIONS: [(&str, &str); 3] = [
    ("bash", "holdfast.bash"),
    ("zsh", "_holdfast"),
    ("fish", "holdfast.fish"),
];

/// The cargo profile the package's binary comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// `--release` (the default).
    Release,
    /// cargo's `dev` profile (`--debug`; CI's install test).
    Debug,
}

impl Profile {
    /// The debug profile when `debug`, else the release one.
    pub fn of(debug: bool) -> Self {
        if debug { Self::Debug } else { Self::Release }
    }

    /// The directory under the target dir its products land in.
    pub fn dir(self) -> &'static str {
        match self {
            Self::Release => "release",
            Self::Debug => "debug",
        }
    }

    /// Its name as cargo and cargo-deb's `--profile` take it.
    pub fn cargo_name(self) -> &'static str {
        match self {
            Self::Release => "release",
            Self::Debug => "dev",
        }
    }

    /// The build that makes a binary fit for the package.
    pub fn build_command(self) -> String {
        format!(
            "cargo build -p holdfast --features {FEATURES} --profile {}",
            self.cargo_name()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // i[verify dist.deb+2]
    #[test]
    fn the_debug_package_comes_from_cargo_s_dev_profile() {
        assert_eq!(Profile::of(true).cargo_name(), "dev");
        assert_eq!(Profile::of(true).dir(), "debug");
        assert_eq!(Profile::of(false).cargo_name(), "release");
        assert_eq!(Profile::of(false).dir(), "release");
    }

    // i[verify dist.deb+2]
    #[test]
    fn the_completions_are_the_files_the_package_metadata_installs() {
        let manifest = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../crates/node/Cargo.toml"),
        )
        .expect("crates/node/Cargo.toml");
        for (_, file) in COMPLETIONS {
            assert!(
                manifest.contains(&format!("target/release/dist/completions/{file}")),
                "{file} is not an asset of [package.metadata.deb]"
            );
        }
        assert!(manifest.contains("target/release/dist/man/*.1"));
    }
}
