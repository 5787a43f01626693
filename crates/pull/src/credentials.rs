//! Registry credentials, found the way the Docker CLI finds them, and handed to the daemon with the
//! pull (bollard's `DockerCredentials`, sent as the `X-Registry-Auth` header).
//!
//! Reading a Docker config file's `auths` (base64 `auth`, or `username`/`password`, or
//! `identitytoken`) is the maintained `docker_credential` crate's. Its helper runner waits on the
//! child without a bound, so `credHelpers` per registry and `credsStore` are resolved here (in the
//! CLI's order) and the helper is run here as `docker-credential-NAME get`, killed past a
//! timeout. What this module also adds is where the file is (a configured path, else `$DOCKER_CONFIG/config.json`, else
//! `~/.docker/config.json`), an optional file per image that wins over it, which registry an
//! image reference names, and a [`Credentials`] whose `Debug` shows no secret.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use bollard::auth::DockerCredentials;
use docker_credential::{CredentialRetrievalError, DockerCredential};

pub use crate::reference::DOCKER_HUB;
use crate::reference::{ReferenceError, hub_alias};

/// The key the Docker CLI files Docker Hub's credentials under (and asks helpers for).
pub const DOCKER_HUB_SERVER: &str = "https://index.docker.io/v1/";

// r[impl actuate.image.credentials+2]
/// The registry host an image reference is pulled from, as Docker reads it
/// ([`crate::reference::parse`]): its first component when that holds a `.` or a `:` or is
/// `localhost`, else Docker Hub. A text that is not a reference names no registry.
pub fn registry_host(reference: &str) -> Result<String, ReferenceError> {
    crate::reference::parse(reference).map(|parsed| parsed.registry().to_owned())
}

// r[impl actuate.image.credentials.configured]
/// A registry as an operator names it (`[pull.auth."NAME"]`), or as a Docker config file files
/// it, read as the registry host an image reference names: a scheme and a path are dropped
/// (`https://index.docker.io/v1/` is Docker Hub), and Docker Hub's names (`docker.io`,
/// `index.docker.io`, `registry-1.docker.io`) are one. `None` for a name with no host.
pub fn registry_name(name: &str) -> Option<&str> {
    let name = name.trim();
    let name = name
        .strip_prefix("https://")
        .or_else(|| name.strip_prefix("http://"))
        .unwrap_or(name);
    let host = name.split('/').next().unwrap_or_default();
    if host.is_empty() || host.contains(char::is_whitespace) {
        return None;
    }
    Some(hub_alias(host))
}

/// The server key credentials for `host` are filed under in a Docker config file, and the
/// address a credential helper is asked for: Docker Hub's historic URL, else the host itself.
pub fn server_key(host: &str) -> &str {
    if host == DOCKER_HUB {
        DOCKER_HUB_SERVER
    } else {
        host
    }
}

// r[impl actuate.image.credentials.secret]
/// Credentials for one registry. Its `Debug` names the registry and the user and redacts the
/// secret, so a `{:?}` in a log line or a test failure never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    server: String,
    secret: Secret,
    /// Where they were found, for messages: a file path, or `credential helper NAME`.
    source: String,
}

#[derive(Clone, PartialEq, Eq)]
enum Secret {
    UsernamePassword { username: String, password: String },
    IdentityToken(String),
}

impl Credentials {
    /// A user name and password for `server`.
    pub fn password(
        server: impl Into<String>,
        username: impl Into<String>,
        password: impl Into<String>,
    ) -> Self {
        Credentials {
            server: server.into(),
            secret: Secret::UsernamePassword {
                username: username.into(),
                password: password.into(),
            },
            source: "given".to_owned(),
        }
    }

    /// The registry these are for (as filed: a host, or Docker Hub's server key).
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The user name, when these are a user name and password.
    pub fn username(&self) -> Option<&str> {
        match &self.secret {
            Secret::UsernamePassword { username, .. } => Some(username),
            Secret::IdentityToken(_) => None,
        }
    }

    /// Where they were found (a file, or a credential helper), for messages.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// As bollard sends them to the daemon (`X-Registry-Auth`).
    pub fn to_docker(&self) -> DockerCredentials {
        let mut out = DockerCredentials {
            serveraddress: Some(self.server.clone()),
            ..DockerCredentials::default()
        };
        match &self.secret {
            Secret::UsernamePassword { username, password } => {
                out.username = Some(username.clone());
                out.password = Some(password.clone());
            }
            Secret::IdentityToken(token) => out.identitytoken = Some(token.clone()),
        }
        out
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.secret {
            Secret::UsernamePassword { .. } => "password",
            Secret::IdentityToken(_) => "identity token",
        };
        f.debug_struct("Credentials")
            .field("server", &self.server)
            .field("username", &self.username())
            .field(kind, &"<redacted>")
            .field("source", &self.source)
            .finish()
    }
}

/// Credentials that were configured but could not be read. The message names the registry and
/// the file or helper, never a secret (a helper's output is not repeated: it may hold one).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("credentials for registry {registry}: {message}")]
pub struct CredentialError {
    /// The registry host the pull needed credentials for.
    pub registry: String,
    /// What went wrong.
    pub message: String,
}

/// A user name and a password file configured for one registry (`[pull.auth."NAME"]`).
/// `Debug` shows the file's path, never its content.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Login {
    username: String,
    password_file: PathBuf,
    /// Where it is configured, for messages (`[pull.auth."NAME"]`).
    origin: String,
}

/// Where a node finds registry credentials: a Docker config file, logins per registry that win
/// over it, and files per image reference that win over both. `Debug` shows paths only.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RegistryAuth {
    docker_config: Option<PathBuf>,
    per_image: BTreeMap<String, PathBuf>,
    /// By registry host (as [`registry_host`] gives it).
    logins: BTreeMap<String, Login>,
    /// Where `docker-credential-*` helpers are (`None`: on `PATH`, as the Docker CLI finds
    /// them); set by tests, so they need not change the process's `PATH`.
    helper_dir: Option<PathBuf>,
}

impl RegistryAuth {
    /// The Docker CLI's lookup: `$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`.
    pub fn from_env() -> Self {
        RegistryAuth::default()
    }

    /// Reads the Docker config file at `path` instead of the CLI's default location.
    pub fn with_docker_config(mut self, path: impl Into<PathBuf>) -> Self {
        self.docker_config = Some(path.into());
        self
    }

    /// Credentials for `reference` come from `path` (a file in the Docker config format), not
    /// from the node's Docker config.
    pub fn with_file_for(mut self, reference: impl Into<String>, path: impl Into<PathBuf>) -> Self {
        self.per_image.insert(reference.into(), path.into());
        self
    }

    // r[impl actuate.image.credentials.configured]
    /// Pulls from `registry` (normalised by [`registry_name`]) use `username` and the password
    /// read from `password_file` at each pull, instead of the Docker config's entry for it.
    /// `origin` says where this was configured, for messages (`[pull.auth."NAME"]`).
    pub fn with_login(
        mut self,
        registry: &str,
        username: impl Into<String>,
        password_file: impl Into<PathBuf>,
        origin: impl Into<String>,
    ) -> Self {
        let host = registry_name(registry).unwrap_or(registry).to_owned();
        self.logins.insert(
            host,
            Login {
                username: username.into(),
                password_file: password_file.into(),
                origin: origin.into(),
            },
        );
        self
    }

    /// Helpers are run from `dir` rather than found on `PATH`.
    #[cfg(test)]
    pub(crate) fn with_helper_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.helper_dir = Some(dir.into());
        self
    }

    /// The Docker config file this lookup reads (configured, else the CLI's default), if any
    /// location is known at all.
    pub fn docker_config_path(&self) -> Option<PathBuf> {
        if let Some(path) = &self.docker_config {
            return Some(path.clone());
        }
        let dir = std::env::var_os("DOCKER_CONFIG")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".docker")))?;
        Some(dir.join("config.json"))
    }

    // r[impl actuate.image.credentials+2]
    /// The credentials to pull `reference` with. `Ok(None)` means pull anonymously: no Docker
    /// config file exists, or it has nothing for the registry (as `docker pull` does). A file
    /// configured for this image must exist, must not be readable by group or others, and must
    /// hold the registry. A credential helper is run as a child process that is killed when it
    /// has not answered within `helper_timeout` (or when the lookup is dropped), so a hung
    /// helper holds neither a thread nor a process. The files read are small local ones.
    pub async fn lookup(
        &self,
        reference: &str,
        helper_timeout: std::time::Duration,
    ) -> Result<Option<Credentials>, CredentialError> {
        let host = registry_host(reference).map_err(|e| CredentialError {
            registry: "(none)".to_owned(),
            message: e.to_string(),
        })?;
        let host = host.as_str();
        let server = server_key(host);
        let fail = |message: String| CredentialError {
            registry: host.to_owned(),
            message,
        };
        let (text, path, per_image) = if let Some(path) = self.per_image.get(reference) {
            (read_private(path).map_err(fail)?, path.clone(), true)
        } else if let Some(login) = self.logins.get(host) {
            // r[impl actuate.image.credentials.configured]
            let password = read_password(&login.password_file)
                .map_err(|e| fail(format!("{}: {e}", login.origin)))?;
            return Ok(Some(Credentials {
                server: server.to_owned(),
                secret: Secret::UsernamePassword {
                    username: login.username.clone(),
                    password,
                },
                source: format!(
                    "{} (password_file {})",
                    login.origin,
                    login.password_file.display()
                ),
            }));
        } else {
            let Some(path) = self.docker_config_path() else {
                return Ok(None);
            };
            match std::fs::read_to_string(&path) {
                Ok(text) => (text, path, false),
                // No Docker config: anonymous pulls, as the CLI does.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(e) => {
                    return Err(fail(format!(
                        "cannot read {}: {}",
                        path.display(),
                        e.kind()
                    )));
                }
            }
        };
        let nothing = || {
            if per_image {
                Err(fail(format!(
                    "{} has no credentials for {server}",
                    path.display()
                )))
            } else {
                Ok(None)
            }
        };
        match in_config(&text, server).map_err(|e| fail(describe(&e, &path)))? {
            InConfig::Found(found) => Ok(Some(credentials(server, found, &path))),
            InConfig::Nothing => nothing(),
            InConfig::Helper(helper) => {
                match run_helper(self.helper_dir.as_deref(), &helper, server, helper_timeout).await
                {
                    // r[impl actuate.image.credentials.helper-named]
                    Ok(found) => {
                        let mut found = credentials(server, found, &path);
                        found.source = format!(
                            "credential helper {} (named in {})",
                            helper_program(&helper),
                            path.display()
                        );
                        Ok(Some(found))
                    }
                    // The store has no login for this registry: anonymous, as `docker pull` does
                    // (an error from a per-image file, which must hold the registry).
                    Err(HelperError::NotFound) => nothing(),
                    // r[impl actuate.image.credentials.helper-named]
                    Err(HelperError::Failed(why)) => Err(fail(format!(
                        "credential helper `{}` (named in {}) {why}",
                        helper_program(&helper),
                        path.display()
                    ))),
                }
            }
        }
    }
}

/// What a Docker config file says about one server, without running anything.
enum InConfig {
    Found(DockerCredential),
    Helper(String),
    Nothing,
}

/// The Docker CLI's order: the server's `credHelpers` entry, else its `auths` entry, else the
/// `credsStore`. The `auths` part is the `docker_credential` crate's (the file without its
/// helpers, so that the crate never runs one).
fn in_config(text: &str, server: &str) -> Result<InConfig, CredentialRetrievalError> {
    let mut config: serde_json::Value =
        serde_json::from_str(text).map_err(|_| CredentialRetrievalError::ConfigReadError)?;
    let helper_named = |key: &str, value: &serde_json::Value| {
        value
            .get(key)
            .and_then(serde_json::Value::as_str)
            .filter(|name| !name.is_empty())
            .map(str::to_owned)
    };
    if let Some(helper) = config
        .get("credHelpers")
        .and_then(|helpers| helper_named(server, helpers))
    {
        return Ok(InConfig::Helper(helper));
    }
    let store = helper_named("credsStore", &config);
    if let Some(fields) = config.as_object_mut() {
        fields.remove("credHelpers");
        fields.remove("credsStore");
    }
    let text =
        serde_json::to_vec(&config).map_err(|_| CredentialRetrievalError::ConfigReadError)?;
    match docker_credential::get_credential_from_reader(text.as_slice(), server) {
        Ok(found) => Ok(InConfig::Found(found)),
        Err(CredentialRetrievalError::NoCredentialConfigured) => {
            Ok(store.map_or(InConfig::Nothing, InConfig::Helper))
        }
        Err(e) => Err(e),
    }
}

fn helper_program(helper: &str) -> String {
    format!("docker-credential-{helper}")
}

enum HelperError {
    /// It has nothing for the server.
    NotFound,
    /// Why it gave nothing (never its output, which may hold a secret).
    Failed(String),
}

/// Runs `docker-credential-HELPER get` with `server` on its stdin, as the Docker CLI does; the
/// child is killed if it has not answered within `timeout` or the lookup is dropped.
async fn run_helper(
    dir: Option<&Path>,
    helper: &str,
    server: &str,
    timeout: std::time::Duration,
) -> Result<DockerCredential, HelperError> {
    use tokio::io::AsyncWriteExt as _;
    let program = match dir {
        Some(dir) => dir.join(helper_program(helper)),
        None => PathBuf::from(helper_program(helper)),
    };
    let mut child = tokio::process::Command::new(program)
        .arg("get")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| HelperError::Failed(format!("could not be run: {}", e.kind())))?;
    let stdin = child.stdin.take();
    let talk = async move {
        if let Some(mut stdin) = stdin {
            // A helper that does not read its input still answers (or is timed out).
            let _ = stdin.write_all(server.as_bytes()).await;
        }
        child.wait_with_output().await
    };
    let output = match tokio::time::timeout(timeout, talk).await {
        Ok(Ok(output)) => output,
        Ok(Err(e)) => return Err(HelperError::Failed(format!("failed: {}", e.kind()))),
        Err(_) => {
            return Err(HelperError::Failed(format!(
                "did not answer within {timeout:?}"
            )));
        }
    };
    if !output.status.success() {
        if String::from_utf8_lossy(&output.stdout).trim() == CREDENTIALS_NOT_FOUND {
            return Err(HelperError::NotFound);
        }
        return Err(HelperError::Failed("failed".to_owned()));
    }
    // `{"ServerURL": ..., "Username": ..., "Secret": ...}`
    let answer: serde_json::Value = serde_json::from_slice(&output.stdout)
        .map_err(|_| HelperError::Failed("answered something unreadable".to_owned()))?;
    let field = |key: &str| answer.get(key).and_then(serde_json::Value::as_str);
    let (Some(username), Some(secret)) = (field("Username"), field("Secret")) else {
        return Err(HelperError::Failed(
            "answered something unreadable".to_owned(),
        ));
    };
    // The Docker CLI's convention for an identity token.
    Ok(if username == "<token>" {
        DockerCredential::IdentityToken(secret.to_owned())
    } else {
        DockerCredential::UsernamePassword(username.to_owned(), secret.to_owned())
    })
}

/// What a credential helper prints (exit 1) for a registry it has nothing for; the Docker CLI
/// reads exactly this as "no credentials" (`IsErrCredentialsNotFoundMessage` in
/// docker-credential-helpers' client).
const CREDENTIALS_NOT_FOUND: &str = "credentials not found in native keychain";

fn credentials(server: &str, found: DockerCredential, path: &Path) -> Credentials {
    let secret = match found {
        DockerCredential::UsernamePassword(username, password) => {
            Secret::UsernamePassword { username, password }
        }
        DockerCredential::IdentityToken(token) => Secret::IdentityToken(token),
    };
    Credentials {
        server: server.to_owned(),
        secret,
        source: path.display().to_string(),
    }
}

/// What went wrong, without the helper's output (which may echo a secret).
fn describe(err: &CredentialRetrievalError, path: &Path) -> String {
    let file = path.display();
    match err {
        CredentialRetrievalError::HelperFailure { helper, .. } => {
            format!("credential helper `{helper}` (named in {file}) failed")
        }
        CredentialRetrievalError::HelperCommunicationError => {
            format!("the credential helper named in {file} could not be run")
        }
        CredentialRetrievalError::MalformedHelperResponse => {
            format!("the credential helper named in {file} answered something unreadable")
        }
        CredentialRetrievalError::CredentialDecodingError => {
            format!("an `auth` entry in {file} is not base64 of USER:PASSWORD")
        }
        CredentialRetrievalError::CredentialMismatchError => {
            format!("an `auth` entry in {file} disagrees with its username and password")
        }
        CredentialRetrievalError::ConfigReadError => {
            format!("{file} is not a Docker config file (JSON)")
        }
        CredentialRetrievalError::ConfigNotFound
        | CredentialRetrievalError::NoCredentialConfigured => {
            format!("{file} has no credentials for this registry")
        }
    }
}

// r[impl actuate.image.credentials+2]
/// A per-image credentials file's text, its mode checked on the opened file itself (so the file
/// read is the file checked, whatever replaces the path meanwhile).
fn read_private(path: &Path) -> Result<String, String> {
    let cannot = |e: std::io::Error| format!("cannot read {}: {}", path.display(), e.kind());
    let mut file = std::fs::File::open(path).map_err(cannot)?;
    private(path, &file.metadata().map_err(cannot)?)?;
    let mut text = String::new();
    file.read_to_string(&mut text).map_err(cannot)?;
    Ok(text)
}

/// The longest `password_file` read (a password, not a file to slurp).
const MAX_PASSWORD_FILE: u64 = 4096;

// r[impl actuate.image.credentials.configured]
/// A `password_file`'s password: the file checked as [`check_password_file`] says, on the opened
/// file itself, its content without a final line ending. Errors never hold the content.
fn read_password(path: &Path) -> Result<String, String> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let cannot = |e: std::io::Error| format!("cannot read {}: {}", path.display(), e.kind());
    // Not blocking on a FIFO's open, not following a symlink: what is opened is checked (a
    // regular file of the node's user) before a byte is read.
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(nix::libc::ELOOP) {
                format!("{} is a symbolic link, not a file", path.display())
            } else {
                cannot(e)
            }
        })?;
    owned_private(path, &file.metadata().map_err(cannot)?)?;
    let mut text = String::new();
    (&mut file)
        .take(MAX_PASSWORD_FILE + 1)
        .read_to_string(&mut text)
        .map_err(|_| format!("{} is not UTF-8 text", path.display()))?;
    if text.len() as u64 > MAX_PASSWORD_FILE {
        return Err(format!(
            "{} is longer than {MAX_PASSWORD_FILE} bytes: not a password",
            path.display()
        ));
    }
    let password = text
        .strip_suffix('\n')
        .map(|t| t.strip_suffix('\r').unwrap_or(t))
        .unwrap_or(&text);
    if password.is_empty() {
        return Err(format!("{} is empty", path.display()));
    }
    Ok(password.to_owned())
}

// r[impl actuate.image.credentials.configured]
/// A `password_file` must be a file readable by its owner alone (mode 0600 or stricter). Any
/// process loading the config checks this; who owns it is the node's own check
/// ([`check_password_file_owner`]), since a client loading the node's config (`check-config`,
/// `workloads -c`) runs as another user than the node.
pub fn check_password_file(path: &Path) -> Result<(), String> {
    // Not following a symlink, as the read at every pull does not.
    let meta = std::fs::symlink_metadata(path)
        .map_err(|e| format!("cannot read {}: {}", path.display(), e.kind()))?;
    private(path, &meta)
}

// r[impl actuate.image.credentials.configured]
/// [`check_password_file`], and the file owned by this process's user: what the node checks
/// when it loads (and reloads) its own config.
pub fn check_password_file_owner(path: &Path) -> Result<(), String> {
    let meta = std::fs::symlink_metadata(path)
        .map_err(|e| format!("cannot read {}: {}", path.display(), e.kind()))?;
    owned_private(path, &meta)
}

fn owned_private(path: &Path, meta: &std::fs::Metadata) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt as _;
    private(path, meta)?;
    let node = nix::unistd::geteuid().as_raw();
    if meta.uid() != node {
        return Err(format!(
            "{} is owned by uid {}, not by the node's user (uid {node})",
            path.display(),
            meta.uid()
        ));
    }
    Ok(())
}

// r[impl actuate.image.credentials+2]
/// A secret file must not be readable by group or others (mode 0600 or stricter). (The node's
/// Docker config file is not held to this: the Docker CLI writes it 0600 itself, and refusing
/// a looser one would break pulls `docker pull` makes.)
pub fn check_private(path: &Path) -> Result<(), String> {
    let meta = std::fs::metadata(path)
        .map_err(|e| format!("cannot read {}: {}", path.display(), e.kind()))?;
    private(path, &meta)
}

fn private(path: &Path, meta: &std::fs::Metadata) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt as _;
    if !meta.is_file() {
        return Err(format!("{} is not a file", path.display()));
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "{} has mode {mode:04o}: credentials must be readable by their owner only (0600)",
            path.display()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::os::unix::fs::PermissionsExt as _;

    proptest! {
        // r[verify actuate.image.credentials.configured]
        // A registry named in [pull.auth."NAME"] (bare, as a URL, with a path) is the registry of
        // an image reference under that name: the same code reads both.
        #[test]
        fn a_configured_registry_name_is_the_registry_of_an_image_under_it(
            host in "([a-z0-9]{1,8}\\.){1,3}[a-z]{2,5}(:[0-9]{1,5})?|localhost(:[0-9]{1,5})?",
            scheme in prop_oneof![Just(""), Just("https://"), Just("http://")],
            tail in prop_oneof![Just(""), Just("/"), Just("/v1/"), Just("/v2/org")],
        ) {
            let image = format!("{host}/org/app:1");
            let name = format!("{scheme}{host}{tail}");
            let host = registry_host(&image).unwrap();
            prop_assert_eq!(registry_name(&name), Some(host.as_str()));
        }
    }

    // r[verify actuate.image.credentials.configured]
    #[test]
    fn a_password_file_that_is_a_fifo_a_symlink_or_too_long_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("good");
        std::fs::write(&good, "pw\n").unwrap();
        std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_password(&good).as_deref(), Ok("pw"));
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&good, &link).unwrap();
        let err = read_password(&link).unwrap_err();
        assert!(err.contains("symbolic link"), "{err}");
        assert!(
            check_password_file(&link).is_err(),
            "refused at load as at the read"
        );
        let long = dir.path().join("long");
        std::fs::write(&long, "x".repeat(5000)).unwrap();
        std::fs::set_permissions(&long, std::fs::Permissions::from_mode(0o600)).unwrap();
        let err = read_password(&long).unwrap_err();
        assert!(err.contains("4096") && !err.contains("xxx"), "{err}");
        // A FIFO nobody writes: opened without blocking, refused as not a file.
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let err = read_password(&fifo).unwrap_err();
        assert!(err.contains("not a file"), "{err}");
    }

    fn write(dir: &Path, name: &str, text: &str, mode: u32) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    fn b64(text: &str) -> String {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(text)
    }

    // r[verify actuate.image.credentials+2]
    #[test]
    fn the_registry_host_is_read_as_docker_reads_it() {
        for (reference, host) in [
            ("busybox", "docker.io"),
            ("busybox:1.36", "docker.io"),
            ("library/busybox", "docker.io"),
            ("org/app:1", "docker.io"),
            ("docker.io/org/app", "docker.io"),
            ("index.docker.io/org/app", "docker.io"),
            ("ghcr.io/org/app:1", "ghcr.io"),
            ("127.0.0.1:5000/holdfast/busybox:latest", "127.0.0.1:5000"),
            ("localhost/app", "localhost"),
            (
                "localhost:5000/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
                "localhost:5000",
            ),
        ] {
            assert_eq!(registry_host(reference).unwrap(), host, "{reference}");
        }
        // Docker would read an uppercase first component as a host; no repository may hold one,
        // so such a text is refused rather than given Docker Hub's credentials.
        assert!(registry_host("Registry/app").is_err());
        assert!(registry_host("not a reference").is_err());
        assert_eq!(server_key("docker.io"), "https://index.docker.io/v1/");
        assert_eq!(server_key("ghcr.io"), "ghcr.io");
    }

    // r[verify actuate.image.credentials+2]
    #[test]
    fn auths_entries_give_credentials_for_their_registry_only() {
        let dir = tempfile::tempdir().unwrap();
        let config = write(
            dir.path(),
            "config.json",
            &format!(
                r#"{{"auths": {{
                    "127.0.0.1:5000": {{"auth": "{}"}},
                    "ghcr.io": {{"username": "bot", "password": "s3cret"}},
                    "https://index.docker.io/v1/": {{"identitytoken": "tok"}}
                }}}}"#,
                b64("alice:hunter2")
            ),
            0o600,
        );
        let auth = RegistryAuth::default().with_docker_config(&config);
        let found = look(&auth, "127.0.0.1:5000/a/b:1").unwrap().unwrap();
        assert_eq!(found.server(), "127.0.0.1:5000");
        assert_eq!(found.username(), Some("alice"));
        let sent = found.to_docker();
        assert_eq!(sent.password.as_deref(), Some("hunter2"));
        assert_eq!(sent.serveraddress.as_deref(), Some("127.0.0.1:5000"));
        let ghcr = look(&auth, "ghcr.io/org/app").unwrap().unwrap().to_docker();
        assert_eq!(
            (ghcr.username.as_deref(), ghcr.password.as_deref()),
            (Some("bot"), Some("s3cret"))
        );
        let hub = look(&auth, "busybox").unwrap().unwrap().to_docker();
        assert_eq!(hub.identitytoken.as_deref(), Some("tok"));
        assert_eq!(hub.serveraddress.as_deref(), Some(DOCKER_HUB_SERVER));
        // Another registry: anonymous.
        assert_eq!(look(&auth, "quay.io/x/y").unwrap(), None);
        // No config file at all: anonymous too, as `docker pull` is.
        let none = RegistryAuth::default().with_docker_config(dir.path().join("missing.json"));
        assert_eq!(look(&none, "127.0.0.1:5000/a/b").unwrap(), None);
    }

    // r[verify actuate.image.credentials+2]
    // r[verify actuate.image.credentials.helper-named]
    #[test]
    fn a_credential_helper_is_run_and_a_failing_one_is_an_error_without_its_output() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        // A helper as docker runs it: `get`, the server on stdin, JSON on stdout.
        write(
            &bin,
            "docker-credential-holdfasttest",
            "#!/bin/sh\nread server\n[ \"$1\" = get ] || exit 3\n\
             if [ \"$server\" = reg.example ]; then\n\
               printf '{\"ServerURL\":\"%s\",\"Username\":\"helper-user\",\"Secret\":\"helper-pass\"}' \"$server\"\n\
             else echo 'leaked-secret-in-output'; exit 1; fi\n",
            0o700,
        );
        let config = write(
            dir.path(),
            "config.json",
            r#"{"credHelpers": {"reg.example": "holdfasttest", "bad.example": "holdfasttest"}}"#,
            0o600,
        );
        // (Found on PATH in production, as docker finds it; here in `bin`.)
        let auth = RegistryAuth::default().with_docker_config(&config);
        let found = look(&auth.clone().with_helper_dir(&bin), "reg.example/app:1")
            .unwrap()
            .unwrap();
        assert_eq!(found.username(), Some("helper-user"));
        assert_eq!(found.to_docker().password.as_deref(), Some("helper-pass"));
        assert!(
            found
                .source()
                .starts_with("credential helper docker-credential-holdfasttest (named in ")
                && found.source().contains("config.json"),
            "{found:?}"
        );
        let err = look(&auth.clone().with_helper_dir(&bin), "bad.example/app:1").unwrap_err();
        assert_eq!(err.registry, "bad.example");
        let text = err.to_string();
        assert!(
            text.contains("credential helper `docker-credential-holdfasttest`"),
            "{text}"
        );
        assert!(text.contains("bad.example"), "{text}");
        assert!(!text.contains("leaked-secret"), "{text}");
    }

    // r[verify actuate.image.credentials+2]
    #[test]
    fn a_creds_store_without_a_login_for_the_registry_is_an_anonymous_pull() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        // What docker-credential-pass, -secretservice and -desktop answer for a registry never
        // logged into.
        write(
            &bin,
            "docker-credential-holdfastnone",
            "#!/bin/sh\ncat >/dev/null\necho 'credentials not found in native keychain'\nexit 1\n",
            0o700,
        );
        let config = write(
            dir.path(),
            "config.json",
            r#"{"credsStore": "holdfastnone"}"#,
            0o600,
        );
        let auth = RegistryAuth::default().with_docker_config(&config);
        let found = look(&auth.clone().with_helper_dir(&bin), "busybox:1.36");
        assert!(matches!(found, Ok(None)), "{found:?}");
        // Named for the image itself, the same answer is an error: its file must have them.
        let file = write(
            dir.path(),
            "image.json",
            r#"{"credsStore": "holdfastnone"}"#,
            0o600,
        );
        let auth = RegistryAuth::default().with_file_for("busybox:1.36", &file);
        let err = look(&auth.clone().with_helper_dir(&bin), "busybox:1.36").unwrap_err();
        assert_eq!(err.registry, "docker.io");
    }

    // r[verify actuate.image.credentials+2]
    #[test]
    fn a_helper_that_does_not_answer_is_killed_and_named_as_unauthorized() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let pidfile = dir.path().join("hung.pid");
        write(
            &bin,
            "docker-credential-holdfasthung",
            &format!(
                "#!/bin/sh\necho $$ > {}\nexec sleep 30\n",
                pidfile.display()
            ),
            0o700,
        );
        let config = write(
            dir.path(),
            "config.json",
            r#"{"credsStore": "holdfasthung"}"#,
            0o600,
        );
        let auth = RegistryAuth::default().with_docker_config(&config);
        let auth = auth.with_helper_dir(&bin);
        let err = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(crate::client::credentials_for(
                &auth,
                "busybox:1.36",
                std::time::Duration::from_millis(500),
            ))
            .unwrap_err();
        assert_eq!(err.kind, crate::PullErrorKind::Unauthorized, "{err}");
        assert!(
            err.message
                .contains("credential helper `docker-credential-holdfasthung`")
                && err.message.contains("did not answer within"),
            "{err}"
        );
        // The helper does not outlive the attempt.
        let pid = std::fs::read_to_string(&pidfile).unwrap();
        let proc = std::path::Path::new("/proc").join(pid.trim());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while proc.exists()
            && !std::fs::read_to_string(proc.join("stat"))
                .unwrap_or_default()
                .contains(") Z ")
        {
            assert!(
                std::time::Instant::now() < deadline,
                "helper {pid} still runs"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// `auth.lookup(reference)` from a test that is not async.
    pub(crate) fn look(
        auth: &RegistryAuth,
        reference: &str,
    ) -> Result<Option<Credentials>, CredentialError> {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(auth.lookup(reference, std::time::Duration::from_secs(5)))
    }

    // r[verify actuate.image.credentials.configured]
    #[test]
    fn a_configured_registry_name_is_read_as_an_images_registry_is() {
        for (name, host) in [
            ("docker.io", "docker.io"),
            ("index.docker.io", "docker.io"),
            ("registry-1.docker.io", "docker.io"),
            ("https://index.docker.io/v1/", "docker.io"),
            ("ghcr.io", "ghcr.io"),
            ("https://ghcr.io", "ghcr.io"),
            ("127.0.0.1:5000", "127.0.0.1:5000"),
            ("http://127.0.0.1:5000/v2/", "127.0.0.1:5000"),
        ] {
            assert_eq!(registry_name(name), Some(host), "{name}");
        }
        for none in ["", "https://", "/v2/", "a b"] {
            assert_eq!(registry_name(none), None, "{none:?}");
        }
        // The same answer as for an image of that registry.
        assert_eq!(
            registry_name("index.docker.io").map(str::to_owned),
            Some(registry_host("index.docker.io/org/app").unwrap())
        );
    }

    // r[verify actuate.image.credentials.configured]
    // r[verify actuate.image.credentials.secret]
    #[test]
    fn a_configured_login_wins_over_the_docker_config_and_its_file_is_read_at_each_pull() {
        let dir = tempfile::tempdir().unwrap();
        let node = write(
            dir.path(),
            "config.json",
            &format!(
                r#"{{"auths": {{"ghcr.io": {{"auth": "{}"}}}}, "credsStore": "nope"}}"#,
                b64("from-config:old")
            ),
            0o600,
        );
        let password = write(dir.path(), "ghcr.password", "s3cret\n", 0o600);
        let auth = RegistryAuth::default()
            .with_docker_config(&node)
            .with_login(
                "https://ghcr.io",
                "bot",
                &password,
                "[pull.auth.\"https://ghcr.io\"]",
            );
        let found = look(&auth, "ghcr.io/org/app:1").unwrap().unwrap();
        assert_eq!(found.username(), Some("bot"));
        assert_eq!(
            found.to_docker().password.as_deref(),
            Some("s3cret"),
            "no final newline"
        );
        assert_eq!(found.server(), "ghcr.io");
        assert!(
            found.source().contains("[pull.auth.\"https://ghcr.io\"]"),
            "{found:?}"
        );
        assert!(!format!("{found:?}").contains("s3cret"));
        // Rotated: the next lookup reads the new password.
        std::fs::write(&password, "rotated\r\n").unwrap();
        let found = look(&auth, "ghcr.io/org/app:1").unwrap().unwrap();
        assert_eq!(found.to_docker().password.as_deref(), Some("rotated"));
        // Another registry still goes to the Docker config (its store here cannot run).
        assert!(look(&auth, "quay.io/org/app:1").is_err());
        // Docker Hub by any of its names.
        let hub = RegistryAuth::default().with_login("index.docker.io", "me", &password, "t");
        assert_eq!(
            look(&hub, "busybox").unwrap().unwrap().username(),
            Some("me")
        );
        // A file configured for the image wins over the login.
        let own = write(
            dir.path(),
            "own.json",
            &format!(
                r#"{{"auths": {{"ghcr.io": {{"auth": "{}"}}}}}}"#,
                b64("own:pw")
            ),
            0o600,
        );
        let both = auth.clone().with_file_for("ghcr.io/org/app:1", &own);
        assert_eq!(
            look(&both, "ghcr.io/org/app:1")
                .unwrap()
                .unwrap()
                .username(),
            Some("own")
        );
        // Too open, empty, or missing: refused naming the table and the file, never its content.
        std::fs::set_permissions(&password, std::fs::Permissions::from_mode(0o640)).unwrap();
        let err = look(&auth, "ghcr.io/org/app:1").unwrap_err();
        assert!(
            err.message.contains("0640") && err.message.contains("ghcr.password"),
            "{err}"
        );
        assert!(err.message.contains("[pull.auth."), "{err}");
        assert!(!err.to_string().contains("rotated"), "{err}");
        assert_eq!(
            check_password_file(&password).map_err(|e| e.contains("0640")),
            Err(true)
        );
        std::fs::write(&password, "").unwrap();
        std::fs::set_permissions(&password, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(
            look(&auth, "ghcr.io/org/app:1")
                .unwrap_err()
                .message
                .contains("empty")
        );
        assert_eq!(check_password_file(&password), Ok(()));
        assert!(check_password_file(&dir.path().join("absent")).is_err());
        // Someone else's file (only root can make one here).
        if nix::unistd::geteuid().is_root() {
            std::os::unix::fs::chown(&password, Some(4242), None).unwrap();
            let err = check_password_file_owner(&password).unwrap_err();
            assert!(err.contains("uid 4242"), "{err}");
            // A client (check-config, `workloads -c`) runs as another user: mode only.
            assert_eq!(check_password_file(&password), Ok(()));
        }
    }

    // r[verify actuate.image.credentials+2]
    #[test]
    fn a_file_for_the_image_wins_and_must_be_private_and_hold_the_registry() {
        let dir = tempfile::tempdir().unwrap();
        let node = write(
            dir.path(),
            "config.json",
            &format!(
                r#"{{"auths": {{"reg.example": {{"auth": "{}"}}}}}}"#,
                b64("node:pw")
            ),
            0o600,
        );
        let own = write(
            dir.path(),
            "app.json",
            &format!(
                r#"{{"auths": {{"reg.example": {{"auth": "{}"}}}}}}"#,
                b64("app:pw2")
            ),
            0o600,
        );
        let auth = RegistryAuth::default()
            .with_docker_config(&node)
            .with_file_for("reg.example/app:1", &own);
        assert_eq!(
            look(&auth, "reg.example/app:1")
                .unwrap()
                .unwrap()
                .username(),
            Some("app")
        );
        assert_eq!(
            look(&auth, "reg.example/other:1")
                .unwrap()
                .unwrap()
                .username(),
            Some("node")
        );
        // Readable by others: refused, naming the file and the mode.
        std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = look(&auth, "reg.example/app:1").unwrap_err();
        assert!(err.message.contains("0644"), "{err}");
        // Private but without the registry: an error, not an anonymous pull.
        let elsewhere = write(
            dir.path(),
            "elsewhere.json",
            &format!(
                r#"{{"auths": {{"other.example": {{"auth": "{}"}}}}}}"#,
                b64("x:y")
            ),
            0o600,
        );
        let auth = RegistryAuth::default().with_file_for("reg.example/app:1", &elsewhere);
        let err = look(&auth, "reg.example/app:1").unwrap_err();
        assert!(
            err.message.contains("has no credentials for reg.example"),
            "{err}"
        );
        // Missing: an error naming it.
        let auth =
            RegistryAuth::default().with_file_for("reg.example/app:1", dir.path().join("gone"));
        assert!(
            look(&auth, "reg.example/app:1")
                .unwrap_err()
                .message
                .contains("gone")
        );
    }

    proptest::proptest! {
        // r[verify actuate.image.credentials+2]
        #[test]
        fn a_host_like_first_component_is_the_registry(
            host in "([a-z0-9]{1,8}\\.){1,3}[a-z]{2,5}(:[0-9]{1,5})?|localhost(:[0-9]{1,5})?|[a-z0-9]{1,8}:[0-9]{1,5}",
            path in "[a-z0-9]{1,8}(/[a-z0-9]{1,8}([_.-][a-z0-9]{1,4})?){0,3}",
            tag in proptest::option::of("[A-Za-z0-9_][A-Za-z0-9_.-]{0,20}"),
            digest in proptest::option::of("[0-9a-f]{64}"),
        ) {
            let mut reference = format!("{host}/{path}");
            if let Some(tag) = tag {
                reference = format!("{reference}:{tag}");
            }
            if let Some(digest) = digest {
                reference = format!("{reference}@sha256:{digest}");
            }
            let expected = match host.as_str() {
                "index.docker.io" | "registry-1.docker.io" => DOCKER_HUB,
                host => host,
            };
            proptest::prop_assert_eq!(registry_host(&reference).unwrap(), expected);
        }

        // r[verify actuate.image.credentials+2]
        #[test]
        fn a_plain_first_component_is_docker_hub(
            path in "[a-z0-9]{1,8}([_.-][a-z0-9]{1,4})?(/[a-z0-9]{1,8}([_.-][a-z0-9]{1,4})?){0,3}",
            tag in proptest::option::of("[A-Za-z0-9_][A-Za-z0-9_.-]{0,20}"),
            digest in proptest::option::of("[0-9a-f]{64}"),
        ) {
            proptest::prop_assume!(!path.starts_with("localhost"));
            let mut reference = path;
            if let Some(tag) = tag {
                reference = format!("{reference}:{tag}");
            }
            if let Some(digest) = digest {
                reference = format!("{reference}@sha256:{digest}");
            }
            proptest::prop_assume!(!reference.split('/').next().unwrap_or_default().contains('.'));
            proptest::prop_assert_eq!(registry_host(&reference).unwrap(), DOCKER_HUB);
        }
    }

    // r[verify actuate.image.credentials.secret]
    #[test]
    fn debug_shows_the_registry_and_user_and_never_the_secret() {
        let c = Credentials::password("reg.example", "alice", "hunter2");
        let shown = format!("{c:?}");
        assert!(
            shown.contains("reg.example") && shown.contains("alice"),
            "{shown}"
        );
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("<redacted>"), "{shown}");
        let dir = tempfile::tempdir().unwrap();
        let config = write(
            dir.path(),
            "config.json",
            r#"{"auths": {"reg.example": {"identitytoken": "tok-123"}}}"#,
            0o600,
        );
        let found = look(
            &RegistryAuth::default().with_docker_config(&config),
            "reg.example/a",
        )
        .unwrap()
        .unwrap();
        assert!(!format!("{found:?}").contains("tok-123"));
        // A config that is not JSON: the error names the file, not its content.
        let broken = write(dir.path(), "broken.json", "password=hunter2", 0o600);
        let err = look(
            &RegistryAuth::default().with_docker_config(&broken),
            "reg.example/a",
        )
        .unwrap_err();
        assert!(!err.to_string().contains("hunter2"), "{err}");
        assert!(err.to_string().contains("broken.json"), "{err}");
    }
}
