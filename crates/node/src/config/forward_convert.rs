//! The high layer's conversion of `[forward]`: the forward module's settings (its listen address,
//! its access as written, its connection bounds with every default filled in) from the validated
//! section, once, for the module and for the reload's comparison. The token files are read by
//! [`AccessSpec::read`] when the module starts or a reload takes the access live, never here.

use std::net::SocketAddr;
use std::path::PathBuf;

use holdfast_forward::{Access, AllowList, Credential, ServerConfig};

use super::convert::read_forward_tokens;
use super::schema::{ForwardSection, Secret};

/// The access part of `[forward]`: `token_file`, `tokens`, `allow` and `[[forward.client]]`, as
/// written (the token files not read yet).
#[derive(Clone, Default, PartialEq)]
pub struct AccessSpec {
    /// A token file (one token a line, mode 0600), read at each start and each live update.
    pub token_file: Option<PathBuf>,
    /// Inline tokens.
    pub tokens: Vec<Credential>,
    /// The targets forwards may reach.
    pub allow: AllowList,
    /// Clients with their own allow-list (`[[forward.client]]`).
    pub clients: Vec<ClientGrant>,
}

impl std::fmt::Debug for AccessSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // No credential in any output.
        f.debug_struct("AccessSpec")
            .field("token_file", &self.token_file)
            .field("tokens", &self.tokens.len())
            .field("allow", &self.allow.rules().len())
            .field("clients", &self.clients)
            .finish()
    }
}

impl AccessSpec {
    /// The access of a validated `[forward]` section.
    pub fn of(section: &ForwardSection) -> Self {
        AccessSpec {
            token_file: section.token_file.as_ref().map(|f| f.get_ref().clone()),
            tokens: credentials(&section.tokens),
            allow: allow_list(section.allow.get_ref()),
            clients: section
                .client
                .iter()
                .map(|client| {
                    let client = client.get_ref();
                    ClientGrant {
                        token_file: client.token_file.as_ref().map(|f| f.get_ref().clone()),
                        tokens: credentials(&client.tokens),
                        allow: allow_list(client.allow.get_ref()),
                    }
                })
                .collect(),
        }
    }

    // r[impl node.forward.module+2]
    // r[impl node.reload.live-forward]
    /// holdfast-forward's access: the credentials read now (the token files again), the
    /// node-wide allow-list and each client's own. No credential at all is an error (every
    /// client would be refused).
    pub fn read(&self) -> Result<Access, String> {
        let mut credentials = self.tokens.clone();
        if let Some(path) = &self.token_file {
            credentials.extend(read_forward_tokens(path)?);
        }
        let mut scoped = Vec::new();
        for client in &self.clients {
            let mut tokens = client.tokens.clone();
            if let Some(path) = &client.token_file {
                tokens.extend(read_forward_tokens(path)?);
            }
            scoped.extend(tokens.into_iter().map(|t| (t, client.allow.clone())));
        }
        if credentials.is_empty() && scoped.is_empty() {
            return Err("no forward credentials: every client would be refused".to_owned());
        }
        Ok(Access {
            credentials,
            allow: self.allow.clone(),
            scoped,
        })
    }
}

/// The connection bounds of `[forward]` (validated: none is 0); each unset one keeps
/// holdfast-forward's default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bounds {
    /// `max_connections`: authenticated connections in all.
    pub max_connections: Option<usize>,
    /// `max_connections_per_token`: authenticated connections of one token.
    pub max_connections_per_token: Option<usize>,
    /// `max_unauthenticated`: connections not yet authenticated, in all.
    pub max_unauthenticated: Option<usize>,
    /// `max_unauthenticated_per_source`: the same, from one source.
    pub max_unauthenticated_per_source: Option<usize>,
}

impl Bounds {
    /// Sets on `config` the bounds that are set.
    // r[impl node.forward.config+3]
    pub fn apply(&self, config: &mut ServerConfig) {
        let fields = [
            (self.max_connections, &mut config.max_authenticated),
            (
                self.max_connections_per_token,
                &mut config.max_per_credential,
            ),
            (self.max_unauthenticated, &mut config.max_unauthenticated),
            (
                self.max_unauthenticated_per_source,
                &mut config.max_unauthenticated_per_source,
            ),
        ];
        for (set, field) in fields {
            if let Some(value) = set {
                *field = value;
            }
        }
    }
}

/// A `[[forward.client]]` as the node runs it: its tokens reach only its own targets.
#[derive(Clone, PartialEq)]
pub struct ClientGrant {
    /// A token file (one token a line, mode 0600), read at each start.
    pub token_file: Option<PathBuf>,
    /// Inline tokens.
    pub tokens: Vec<Credential>,
    /// The only targets this client's tokens reach.
    pub allow: AllowList,
}

impl std::fmt::Debug for ClientGrant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // No credential in any output.
        f.debug_struct("ClientGrant")
            .field("token_file", &self.token_file)
            .field("tokens", &self.tokens.len())
            .field("allow", &self.allow.rules().len())
            .finish()
    }
}

/// The inline tokens of a section, as credentials.
fn credentials(tokens: &[Secret]) -> Vec<Credential> {
    tokens
        .iter()
        .filter(|t| !t.expose().is_empty())
        .map(|t| Credential::new(t.expose().to_owned()))
        .collect()
}

/// A validated allow-list (validated when the config was parsed).
fn allow_list(entries: &[String]) -> AllowList {
    AllowList::parse(entries.iter().map(String::as_str)).unwrap_or_default()
}

// r[impl node.reload.diff+4]
/// `[forward]` converted, its token files not read: what the module is built from, and what a
/// reload compares (two are equal exactly when the module would be built the same).
#[derive(Debug, Clone, PartialEq)]
pub struct ForwardSettings {
    /// The UDP address the QUIC endpoint listens on.
    pub listen: SocketAddr,
    /// Who may connect and where their forwards may go.
    pub access: AccessSpec,
    /// The connection bounds.
    pub bounds: Bounds,
}

impl ForwardSettings {
    /// The settings of a validated `[forward]` section.
    pub fn of(section: &ForwardSection) -> Self {
        ForwardSettings {
            listen: *section.listen.get_ref(),
            access: AccessSpec::of(section),
            // Each unset one as holdfast-forward's default: a default written out is the same.
            bounds: Bounds {
                max_connections: Some(
                    section
                        .max_connections
                        .as_ref()
                        .map_or(holdfast_forward::DEFAULT_MAX_AUTHENTICATED, |b| {
                            *b.get_ref()
                        }),
                ),
                max_connections_per_token: Some(
                    section
                        .max_connections_per_token
                        .as_ref()
                        .map_or(holdfast_forward::DEFAULT_MAX_PER_CREDENTIAL, |b| {
                            *b.get_ref()
                        }),
                ),
                max_unauthenticated: Some(
                    section
                        .max_unauthenticated
                        .as_ref()
                        .map_or(holdfast_forward::DEFAULT_MAX_UNAUTHENTICATED, |b| {
                            *b.get_ref()
                        }),
                ),
                max_unauthenticated_per_source: Some(
                    section.max_unauthenticated_per_source.as_ref().map_or(
                        holdfast_forward::DEFAULT_MAX_UNAUTHENTICATED_PER_SOURCE,
                        |b| *b.get_ref(),
                    ),
                ),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::config::Config;

    // i[verify node.config.layers+5]
    /// `[forward]` is converted by the config's high layer: its address, its access as written
    /// (inline tokens, the token file's path, not read), and each connection bound as set or, left
    /// out, as holdfast-forward's default.
    #[test]
    fn the_forward_section_converts_with_every_default_filled_in() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let tokens = dir.path().join("forward.tokens");
        std::fs::write(&tokens, "forward-convert-file-token-0123456789\n").unwrap();
        std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600)).unwrap();
        let config = Config::parse(
            "forward.toml",
            &format!(
                "[node]\n[forward]\nlisten = \"127.0.0.1:4433\"\n\
                 tokens = [\"forward-convert-token-0123456789abcdef\"]\n\
                 token_file = \"{}\"\n\
                 allow = [\"127.0.0.1:53\", \"10.0.0.0/8:80\"]\nmax_connections = 7\n",
                tokens.display()
            ),
        )
        .unwrap();
        // Validated (validation reads the file); gone before the conversion, which must not read
        // it.
        std::fs::remove_file(&tokens).unwrap();
        let settings = ForwardSettings::of(config.forward.as_ref().unwrap().get_ref());
        assert_eq!(settings.listen, "127.0.0.1:4433".parse().unwrap());
        assert_eq!(settings.access.tokens.len(), 1);
        // The path as written: the file is read when the module starts, not by the conversion.
        assert_eq!(settings.access.token_file, Some(tokens));
        assert_eq!(settings.access.allow.rules().len(), 2);
        assert!(settings.access.clients.is_empty());
        assert_eq!(
            settings.bounds,
            Bounds {
                max_connections: Some(7),
                max_connections_per_token: Some(holdfast_forward::DEFAULT_MAX_PER_CREDENTIAL),
                max_unauthenticated: Some(holdfast_forward::DEFAULT_MAX_UNAUTHENTICATED),
                max_unauthenticated_per_source: Some(
                    holdfast_forward::DEFAULT_MAX_UNAUTHENTICATED_PER_SOURCE
                ),
            }
        );
    }
}
