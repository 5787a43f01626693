//! The low layer's locating: a byte span to `FILE:LINE:COL`, serde's messages turned into the
//! operator's key with a did-you-mean, and never the value itself in a message.

use std::fmt;

use toml::Spanned;

/// A config error, located in its file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file (or [`DEFAULT_CONFIG_NAME`](super::DEFAULT_CONFIG_NAME)).
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column (in characters).
    pub column: usize,
    /// The dotted key, e.g. `admin.listen` or `workload[1].image`.
    pub key: String,
    /// What is wrong, and how to fix it.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}: {}",
            self.file, self.line, self.column, self.key, self.message
        )
    }
}

impl std::error::Error for ConfigError {}

/// A failure to load a config file.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("{file}: cannot read: {source}")]
    Read {
        /// The file.
        file: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a valid config.
    #[error("{0}")]
    Invalid(#[from] ConfigError),
}

/// Converts a byte offset to a 1-based (line, column in characters).
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before.get(line_start..).map_or(0, |s| s.chars().count()) + 1;
    (line, column)
}

pub(super) struct Locator<'a> {
    pub(super) file: &'a str,
    pub(super) text: &'a str,
}

impl Locator<'_> {
    pub(super) fn at(
        &self,
        span: Option<std::ops::Range<usize>>,
        key: &str,
        message: String,
    ) -> ConfigError {
        let (line, column) = span.map_or((1, 1), |s| line_col(self.text, s.start));
        ConfigError {
            file: self.file.to_owned(),
            line,
            column,
            key: if key.is_empty() {
                "(top level)".to_owned()
            } else {
                key.to_owned()
            },
            message: without_value(&message),
        }
    }
}

// i[impl node.config.no-values]
/// `message` without the value serde's "invalid type"/"invalid value" messages quote (a token
/// written in the wrong shape would otherwise be shown back wherever the error goes: the
/// terminal, the log, the unauthenticated fault list): `invalid type: string, expected a
/// sequence`. The kind of value and what was expected stay.
fn without_value(message: &str) -> String {
    for prefix in ["invalid type: ", "invalid value: "] {
        let Some(rest) = message.strip_prefix(prefix) else {
            continue;
        };
        // serde writes `KIND "value"` or `KIND `value``; the value may hold anything, the
        // expectation (the code's own text) comes last.
        let kind = rest.split(['"', '`']).next().unwrap_or_default().trim_end();
        let expected = rest
            .rfind(", expected ")
            .and_then(|at| rest.get(at..))
            .unwrap_or_default();
        return format!("{prefix}{kind}{expected}");
    }
    message.to_owned()
}

/// The keys `serde` lists in an "unknown field" message, and the closest one.
pub(super) fn did_you_mean(message: &str) -> Option<(String, String)> {
    let rest = message.strip_prefix("unknown field `")?;
    let (unknown, rest) = rest.split_once('`')?;
    let expected: Vec<&str> = rest.split('`').skip(1).step_by(2).collect();
    let hint = expected
        .iter()
        .map(|k| (strsim::damerau_levenshtein(unknown, k), *k))
        .filter(|(d, k)| *d <= 2.max(k.len() / 3))
        .min()
        .map(|(_, k)| format!("; did you mean `{k}`?"))
        .unwrap_or_else(|| {
            if expected.is_empty() {
                String::new()
            } else {
                format!("; expected one of {}", expected.join(", "))
            }
        });
    Some((unknown.to_owned(), format!("unknown key `{unknown}`{hint}")))
}

pub(super) fn missing_field(message: &str) -> Option<&str> {
    message.strip_prefix("missing field `")?.strip_suffix('`')
}

pub(super) fn dotted(path: &serde_path_to_error::Path) -> String {
    let mut out = String::new();
    for segment in path.iter() {
        match segment {
            // toml's `Spanned` wraps the value in a private field: not a key the operator wrote.
            serde_path_to_error::Segment::Map { key } if key.starts_with("$__serde_spanned") => {}
            serde_path_to_error::Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            serde_path_to_error::Segment::Map { key }
            | serde_path_to_error::Segment::Enum { variant: key } => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            serde_path_to_error::Segment::Unknown => {}
        }
    }
    out
}

impl super::schema::Workload {
    /// Where `field` (as holdfast-workload's error names it) is written, else the entry's name.
    pub(super) fn span_of(&self, field: &str) -> std::ops::Range<usize> {
        let span = match field {
            "image" => Some(self.image.span()),
            "command" => self.command.as_ref().map(Spanned::span),
            "env" => self.env.as_ref().map(Spanned::span),
            "restart" => self.restart.as_ref().map(Spanned::span),
            "min_run" => self.min_run.as_ref().map(Spanned::span),
            "stop_timeout" => self.stop_timeout.as_ref().map(Spanned::span),
            "ports" => self.ports.as_ref().map(Spanned::span),
            "volumes" => self.volumes.as_ref().map(Spanned::span),
            "network" => self.network.as_ref().map(Spanned::span),
            "user" => self.user.as_ref().map(Spanned::span),
            "workdir" => self.workdir.as_ref().map(Spanned::span),
            "env_file" => self.env_file.as_ref().map(Spanned::span),
            "labels" => self.labels.as_ref().map(Spanned::span),
            "memory" => self.memory.as_ref().map(Spanned::span),
            "cpus" => self.cpus.as_ref().map(Spanned::span),
            "pids_limit" => self.pids_limit.as_ref().map(Spanned::span),
            "read_only" => self.read_only.as_ref().map(Spanned::span),
            "cap_add" => self.cap_add.as_ref().map(Spanned::span),
            "cap_drop" => self.cap_drop.as_ref().map(Spanned::span),
            "init" => self.init.as_ref().map(Spanned::span),
            "log" => self.log.as_ref().map(Spanned::span),
            "health" => self.health.as_ref().map(Spanned::span),
            "depends_on" => self.depends_on.as_ref().map(Spanned::span),
            "credentials_file" => self.credentials_file.as_ref().map(Spanned::span),
            "pull_policy" => self.pull_policy.as_ref().map(Spanned::span),
            "certificates" => self.certificates.as_ref().map(Spanned::span),
            "on_cert_renew" => self.on_cert_renew.as_ref().map(Spanned::span),
            _ => None,
        };
        span.unwrap_or_else(|| self.name.span())
    }
}
