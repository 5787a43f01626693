//! What this build is: its version, the git commit it was built from, and its features, for
//! `holdfast version` and the `holdfast_build_info` metric.

use serde::Serialize;

/// The build's description.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BuildInfo {
    /// The crate's version.
    pub version: &'static str,
    /// The git commit, when the build was given one (`HOLDFAST_GIT_COMMIT` at build time).
    pub commit: Option<&'static str>,
    /// The cargo features built in, in a fixed order.
    pub features: Vec<&'static str>,
}

// i[impl node.version]
/// This build's description. The commit is whatever `HOLDFAST_GIT_COMMIT` said when the crate was
/// compiled (cargo rebuilds when it changes); nothing is guessed from the source tree, which may
/// not be the one built.
pub fn build_info() -> BuildInfo {
    let mut features = Vec::new();
    if cfg!(feature = "etcd") {
        features.push("etcd");
    }
    if cfg!(feature = "testing-modules") {
        features.push("testing-modules");
    }
    BuildInfo {
        version: env!("CARGO_PKG_VERSION"),
        commit: option_env!("HOLDFAST_GIT_COMMIT").filter(|c| !c.trim().is_empty()),
        features,
    }
}

impl BuildInfo {
    /// The commit as shown: the one given, else `unknown`.
    pub fn commit_text(&self) -> &str {
        self.commit.unwrap_or("unknown")
    }

    /// The features as shown: comma-separated, or `none`.
    pub fn features_text(&self) -> String {
        if self.features.is_empty() {
            "none".to_owned()
        } else {
            self.features.join(",")
        }
    }

    /// `holdfast version`'s output.
    pub fn text(&self) -> String {
        format!(
            "holdfast {}\ncommit: {}\nfeatures: {}\n",
            self.version,
            self.commit_text(),
            self.features_text()
        )
    }

    /// The labels of `holdfast_build_info`.
    pub fn labels(&self) -> Vec<(String, String)> {
        vec![
            ("version".to_owned(), self.version.to_owned()),
            ("commit".to_owned(), self.commit_text().to_owned()),
            ("features".to_owned(), self.features_text()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // i[verify node.version]
    #[test]
    fn the_version_text_names_version_commit_and_features() {
        let info = BuildInfo {
            version: "1.2.3",
            commit: Some("0123456789abcdef0123456789abcdef01234567"),
            features: vec!["etcd", "testing-modules"],
        };
        insta::assert_snapshot!(info.text(), @r"
        holdfast 1.2.3
        commit: 0123456789abcdef0123456789abcdef01234567
        features: etcd,testing-modules
        ");
        let bare = BuildInfo {
            version: "1.2.3",
            commit: None,
            features: vec![],
        };
        insta::assert_snapshot!(bare.text(), @r"
        holdfast 1.2.3
        commit: unknown
        features: none
        ");
        insta::assert_json_snapshot!(bare, @r#"
        {
          "version": "1.2.3",
          "commit": null,
          "features": []
        }
        "#);
        // This build: its own version, and a feature list that matches its cfg.
        let this = build_info();
        assert_eq!(this.version, env!("CARGO_PKG_VERSION"));
        assert_eq!(this.features.contains(&"etcd"), cfg!(feature = "etcd"));
    }
}
