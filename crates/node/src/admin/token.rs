//! The bearer token that mutating admin calls over TCP need, read from a file only its owner can
//! read. The token is never logged or echoed.

use std::path::Path;

// i[impl node.admin.token]
/// Refuses a token file whose mode lets anyone but its owner read or write it.
pub fn check_mode(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path)
        .map_err(|e| format!("cannot read token file {}: {e}", path.display()))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "token file {} has mode {mode:04o}; it must not be readable by group or others (chmod 600 {})",
            path.display(),
            path.display()
        ));
    }
    Ok(())
}

/// Reads the token (mode checked first), trimmed of surrounding whitespace.
pub fn read(path: &Path) -> Result<Token, String> {
    check_mode(path)?;
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read token file {}: {e}", path.display()))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(format!("token file {} is empty", path.display()));
    }
    Ok(Token(token.to_owned()))
}

/// A bearer token. Its `Debug` hides it.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

// r[impl node.log.no-secrets]
impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

impl Token {
    /// The token text, for an `Authorization` header.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Compares a presented token in time independent of where they differ.
    pub fn matches(&self, presented: &str) -> bool {
        let (a, b) = (self.0.as_bytes(), presented.as_bytes());
        let mut diff = u8::from(a.len() != b.len());
        for (i, x) in a.iter().enumerate() {
            diff |= x ^ b.get(i).copied().unwrap_or(0);
        }
        diff == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    // i[verify node.admin.token]
    #[test]
    fn a_token_file_readable_by_others_is_refused_and_the_token_never_shows_in_debug() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "s3cret-token\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = read(&path).unwrap_err();
        assert!(err.contains("mode 0644"), "{err}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let token = read(&path).unwrap();
        assert!(token.matches("s3cret-token"));
        assert!(!token.matches("s3cret-toke"));
        assert!(!token.matches("s3cret-token2"));
        assert!(!format!("{token:?}").contains("s3cret"));
    }
}
