//! Certificates a workload's container mounts from the node's issuance, and what the container is
//! told when one of them is renewed.
//!
//! The node resolves each name to the directory issuance deploys that certificate into (where
//! its owner, group and modes are the operator's choice); the container sees that directory
//! read-only at [`CERTS_DIR`]`/NAME/`. A directory, never a file: the deploy replaces its files by
//! renaming, and a bind mount of one file would keep showing the replaced one.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use crate::shape::{ShapeError, VolumeSource, VolumeSpec};

/// Where a certificate's files appear in the container: `CERTS_DIR/NAME/`.
pub const CERTS_DIR: &str = "/run/holdfast/certs";

/// The signal names the daemon's kill resolves on Linux (moby's `signal.SignalMap`, without
/// `SIG`), besides `RTMIN+1`..`RTMIN+15` and `RTMAX-14`..`RTMAX-1` ([`known_signal`]).
const SIGNALS: &[&str] = &[
    "ABRT", "ALRM", "BUS", "CHLD", "CLD", "CONT", "FPE", "HUP", "ILL", "INT", "IO", "IOT", "KILL",
    "PIPE", "POLL", "PROF", "PWR", "QUIT", "SEGV", "STKFLT", "STOP", "SYS", "TERM", "TRAP", "TSTP",
    "TTIN", "TTOU", "URG", "USR1", "USR2", "VTALRM", "WINCH", "XCPU", "XFSZ", "RTMIN", "RTMAX",
];

/// Whether the daemon knows `name` (upper case, without `SIG`): a name it does not know is
/// refused by its kill (400 "Invalid signal") only when a renewal comes, months later.
fn known_signal(name: &str) -> bool {
    let offset = |rest: &str, max: u8| {
        !rest.starts_with('0') && rest.parse::<u8>().is_ok_and(|n| (1..=max).contains(&n))
    };
    SIGNALS.contains(&name)
        || name.strip_prefix("RTMIN+").is_some_and(|n| offset(n, 15))
        || name.strip_prefix("RTMAX-").is_some_and(|n| offset(n, 14))
}

// r[impl workload.certs+2]
/// A certificate a workload's container mounts.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CertificateMount {
    /// The certificate's name (its first name in `[[issuance.certificate]]`, or the hostname).
    pub name: String,
    /// The host directory its files are deployed in.
    pub dir: PathBuf,
}

impl CertificateMount {
    /// Where the container sees the files.
    pub fn target(&self) -> String {
        format!("{CERTS_DIR}/{}", self.name)
    }

    /// The read-only bind mount of [`CertificateMount::dir`] at [`CertificateMount::target`].
    pub fn volume(&self) -> VolumeSpec {
        VolumeSpec {
            source: VolumeSource::Bind(self.dir.display().to_string()),
            target: self.target(),
            read_only: true,
        }
    }

    /// What is wrong with it, if anything.
    pub fn problem(&self) -> Option<String> {
        let name = &self.name;
        if name.is_empty()
            || name == "."
            || name == ".."
            || name.contains(['/', '\0', ':', ','])
            || name.contains(char::is_whitespace)
        {
            return Some(format!("{name:?} is not a certificate name"));
        }
        if !self.dir.is_absolute() || self.dir.to_str().is_none_or(|d| d.contains([':', ','])) {
            return Some(format!(
                "{name}: {} is not an absolute path a bind mount can name",
                self.dir.display()
            ));
        }
        None
    }
}

// r[impl workload.certs.renew+2]
/// What a workload's container is told when a certificate it mounts is renewed
/// (`on_cert_renew`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertRenew {
    /// `"restart"`: the container is replaced by a new one of the same spec.
    Restart,
    /// `"signal:NAME"`: the container's main process is sent the signal `SIGNAME` (the name kept
    /// without its `SIG` prefix, upper case).
    Signal(String),
}

impl CertRenew {
    /// The signal as the Engine API's kill takes it (`SIGHUP`), if this is a signal.
    pub fn signal(&self) -> Option<String> {
        match self {
            CertRenew::Restart => None,
            CertRenew::Signal(name) => Some(format!("SIG{name}")),
        }
    }
}

impl fmt::Display for CertRenew {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CertRenew::Restart => f.write_str("restart"),
            CertRenew::Signal(name) => write!(f, "signal:{name}"),
        }
    }
}

impl FromStr for CertRenew {
    type Err = ShapeError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text == "restart" {
            return Ok(CertRenew::Restart);
        }
        let Some(name) = text.strip_prefix("signal:") else {
            return Err(ShapeError(format!(
                "{text:?} is neither \"restart\" nor \"signal:NAME\" (e.g. \"signal:HUP\")"
            )));
        };
        let upper = name.to_ascii_uppercase();
        let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
        // A name the daemon resolves, never a number whose meaning depends on the platform.
        if !known_signal(bare) {
            return Err(ShapeError(format!(
                "{name:?} is not a signal name such as \"HUP\" or \"USR1\""
            )));
        }
        Ok(CertRenew::Signal(bare.to_owned()))
    }
}

impl serde::Serialize for CertRenew {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for CertRenew {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = <String as serde::Deserialize>::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // r[verify workload.certs.renew+2]
    #[test]
    fn on_cert_renew_reads_restart_and_any_signal_name() {
        let p = |t: &str| t.parse::<CertRenew>();
        assert_eq!(p("restart").unwrap(), CertRenew::Restart);
        assert_eq!(p("signal:HUP").unwrap(), CertRenew::Signal("HUP".into()));
        assert_eq!(p("signal:SIGHUP").unwrap(), CertRenew::Signal("HUP".into()));
        assert_eq!(p("signal:usr1").unwrap(), CertRenew::Signal("USR1".into()));
        assert_eq!(
            p("signal:RTMIN+3").unwrap().signal().as_deref(),
            Some("SIGRTMIN+3")
        );
        for bad in [
            "",
            "Restart",
            "signal:",
            "signal:SIG",
            "signal:1",
            "signal:9",
            "signal:HUP ",
            "signal:-HUP",
            "kill",
            "signal:VERYLONGSIGNALNAME",
            // Names the daemon does not know: it answers 400 "Invalid signal".
            "signal:HUPP",
            "signal:FOO",
            "signal:RTMIN+16",
            "signal:RTMAX+1",
            "signal:RTMAX-15",
            "signal:RTMIN+03",
        ] {
            let e = p(bad).unwrap_err().to_string();
            assert!(e.contains("signal") || e.contains("restart"), "{bad}: {e}");
        }
    }

    // r[verify workload.certs.renew+2]
    #[test]
    fn on_cert_renew_reads_every_signal_the_daemon_knows() {
        for name in [
            "winch", "SIGusr2", "RTMIN", "rtmin+15", "RTMAX-14", "SIGRTMAX", "CLD",
        ] {
            let renew = format!("signal:{name}").parse::<CertRenew>();
            assert!(renew.is_ok(), "{name}: {renew:?}");
        }
    }

    // r[verify workload.certs+2]
    #[test]
    fn a_certificate_is_mounted_read_only_at_its_fixed_path() {
        let m = CertificateMount {
            name: "example.org".into(),
            dir: "/etc/holdfast/certs/example.org".into(),
        };
        assert_eq!(m.problem(), None);
        assert_eq!(
            m.volume(),
            VolumeSpec {
                source: VolumeSource::Bind("/etc/holdfast/certs/example.org".into()),
                target: "/run/holdfast/certs/example.org".into(),
                read_only: true,
            }
        );
        let bad = |name: &str, dir: &str| {
            CertificateMount {
                name: name.into(),
                dir: dir.into(),
            }
            .problem()
        };
        assert!(bad("..", "/d").is_some());
        assert!(bad("a/b", "/d").is_some());
        assert!(bad("a", "relative").is_some());
        assert!(bad("a", "/x:y").is_some());
        assert!(bad("*.example.org", "/d").is_none());
    }

    proptest! {
        // r[verify workload.certs.renew+2]
        #[test]
        fn parse_of_display_is_the_identity_and_nothing_panics(text in "\\PC{0,24}") {
            if let Ok(renew) = text.parse::<CertRenew>() {
                prop_assert_eq!(renew.to_string().parse::<CertRenew>(), Ok(renew));
            }
            let signal = format!("signal:{text}");
            if let Ok(renew) = signal.parse::<CertRenew>() {
                prop_assert_eq!(renew.to_string().parse::<CertRenew>(), Ok(renew));
            }
        }
    }
}
