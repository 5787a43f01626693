//! The bearer token that mutating admin calls over TCP need, read from a file only its owner can
//! read. The token is never logged or echoed.

use std::path::Path;

// i[impl node.admin.token+2]
/// Reads a secret file through [`holdfast_keyfile::read_secret_file`] (opened once, never through
/// a symlink, the open file checked: regular, owner-only), its errors named as a token file's.
pub fn read_secret_file(path: &Path) -> Result<String, String> {
    use holdfast_keyfile::SecretFileError;
    let shown = path.display();
    holdfast_keyfile::read_secret_file(path).map_err(|err| match err {
        SecretFileError::Io { source, .. } => format!("cannot read token file {shown}: {source}"),
        other => format!("token file {other}"),
    })
}

/// Checks a token file as [`read`] would (mode, a regular file, not a symlink, readable and not
/// empty), without keeping the token.
pub fn check_mode(path: &Path) -> Result<(), String> {
    read(path).map(drop)
}

/// Reads the token (the file checked as [`read_secret_file`] does), trimmed of surrounding
/// whitespace.
pub fn read(path: &Path) -> Result<Token, String> {
    let text = read_secret_file(path)?;
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
        holdfast_keyfile::secret_eq(&self.0, presented)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    // i[verify node.admin.token+2]
    // r[verify node.log.no-secrets]
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
        // Debug says what it hides (so a struct holding a token still shows it has one).
        assert_eq!(format!("{token:?}"), "Token(<redacted>)");
    }

    // i[verify node.admin.token+2]
    #[test]
    fn a_symlinked_empty_or_non_regular_token_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::write(&real, "s3cret-token\n").unwrap();
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o600)).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let err = read(&link).unwrap_err();
        assert!(err.contains("symlink"), "{err}");
        assert!(check_mode(&link).is_err());
        let empty = dir.path().join("empty");
        std::fs::write(&empty, "\n").unwrap();
        std::fs::set_permissions(&empty, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(check_mode(&empty).unwrap_err().contains("is empty"));
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(read(&sub).is_err());
        assert!(check_mode(&real).is_ok());
    }
}
