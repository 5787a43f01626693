use super::*;

use std::collections::HashSet;

use jsonwebtoken::EncodingKey;

const NOW: u64 = 2_000_000_000;

fn now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(NOW)
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/keys")
        .join(name)
}

fn read(name: &str) -> Vec<u8> {
    std::fs::read(fixture(name)).unwrap()
}

fn claims(user: &str) -> serde_json::Value {
    serde_json::json!({"sub": user, "exp": NOW + 60, "iat": NOW - 1})
}

fn sign(
    alg: Algorithm,
    kid: Option<&str>,
    key: &EncodingKey,
    claims: &serde_json::Value,
) -> String {
    let mut h = Header::new(alg);
    h.kid = kid.map(str::to_owned);
    jsonwebtoken::encode(&h, claims, key).unwrap()
}

fn hs(claims: &serde_json::Value) -> String {
    sign(
        Algorithm::HS256,
        None,
        &EncodingKey::from_secret(SECRET),
        claims,
    )
}

const SECRET: &[u8] = b"0123456789abcdef-secret";

fn key() -> TokenKey {
    TokenKey::new(SECRET.to_vec())
}

/// A private (0600) copy of `bytes` in `dir`, as a secret file must be.
fn secret_file(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    p
}

fn pems() -> TokenKey {
    let dir = tempfile::tempdir().unwrap();
    let secret = secret_file(dir.path(), "hs256.secret", &read("hs256.secret"));
    TokenKey::from_sources(
        vec![
            KeySource::public(fixture("rsa.pub")),
            KeySource::public(fixture("ec.pub")),
            KeySource::public(fixture("ed.pub")),
            KeySource::secret(secret),
        ],
        AuthSettings::default(),
    )
    .unwrap()
}

fn user(r: Result<Claims, TokenError>) -> Result<String, TokenError> {
    r.map(|c| c.user)
}

// r[verify gateway.auth.token+2]
#[test]
fn each_algorithm_verifies_from_pem_files_and_the_user_is_sub() {
    let k = pems();
    let c = claims("ann");
    let rs = sign(
        Algorithm::RS256,
        None,
        &EncodingKey::from_rsa_pem(&read("rsa.key")).unwrap(),
        &c,
    );
    let es = sign(
        Algorithm::ES256,
        None,
        &EncodingKey::from_ec_pem(&read("ec.key")).unwrap(),
        &c,
    );
    let ed = sign(
        Algorithm::EdDSA,
        None,
        &EncodingKey::from_ed_pem(&read("ed.key")).unwrap(),
        &c,
    );
    let secret = String::from_utf8(read("hs256.secret")).unwrap();
    let hs = sign(
        Algorithm::HS256,
        None,
        &EncodingKey::from_secret(secret.trim().as_bytes()),
        &c,
    );
    for t in [&rs, &es, &ed, &hs] {
        assert_eq!(user(k.verify_auth(t, now())), Ok("ann".into()), "{t}");
    }
    // A key of another pair: no key verifies it.
    let other = sign(
        Algorithm::RS256,
        None,
        &EncodingKey::from_rsa_pem(&read("rsa-other.key")).unwrap(),
        &c,
    );
    assert_eq!(k.verify_auth(&other, now()), Err(TokenError::Signature));
    // An algorithm no key is for.
    assert_eq!(key().verify_auth(&rs, now()), Err(TokenError::UnknownKey));
    assert!(!format!("{k:?}").contains("fixture-hs256-secret"));
    assert!(!format!("{:?}", key()).contains("0123456789abcdef"));
}

// r[verify gateway.auth.token+2]
#[test]
fn claims_are_checked_with_the_leeway() {
    let k = key();
    let t = |c: serde_json::Value| user(k.verify_auth(&hs(&c), now()));
    assert_eq!(t(claims("ann")), Ok("ann".into()));
    // exp is required, and holds until exp + leeway.
    assert_eq!(
        t(serde_json::json!({"sub": "ann"})),
        Err(TokenError::MissingClaim("exp"))
    );
    assert_eq!(
        t(serde_json::json!({"sub": "ann", "exp": NOW - 29})),
        Ok("ann".into())
    );
    assert_eq!(
        t(serde_json::json!({"sub": "ann", "exp": NOW - 30})),
        Err(TokenError::Expired)
    );
    assert_eq!(
        t(serde_json::json!({"sub": "ann", "exp": NOW + 60, "nbf": NOW + 30})),
        Ok("ann".into())
    );
    assert_eq!(
        t(serde_json::json!({"sub": "ann", "exp": NOW + 60, "nbf": NOW + 31})),
        Err(TokenError::NotYetValid)
    );
    assert_eq!(
        t(serde_json::json!({"sub": "ann", "exp": NOW + 60, "iat": NOW + 31})),
        Err(TokenError::IssuedInFuture)
    );
    // sub is required and not empty.
    assert_eq!(
        t(serde_json::json!({"exp": NOW + 60})),
        Err(TokenError::MissingClaim("sub"))
    );
    assert_eq!(
        t(serde_json::json!({"sub": "", "exp": NOW + 60})),
        Err(TokenError::MissingClaim("sub"))
    );
    // Not JSON numbers where numbers belong.
    assert_eq!(
        t(serde_json::json!({"sub": "ann", "exp": "soon"})),
        Err(TokenError::Malformed)
    );
    // A forged token: the claims of one, the signature of another.
    let good = hs(&claims("ann"));
    let bob = hs(&claims("bob"));
    let forged = format!(
        "{}.{}",
        bob.rsplit_once('.').unwrap().0,
        good.rsplit_once('.').unwrap().1
    );
    assert_eq!(k.verify_auth(&forged, now()), Err(TokenError::Signature));
    assert_eq!(k.verify_auth("", now()), Err(TokenError::Malformed));
    assert_eq!(k.verify_auth("a.b.c", now()), Err(TokenError::Malformed));
    // `none` is never accepted.
    let none = format!(
        "{}.{}.",
        base64_url(br#"{"alg":"none","typ":"JWT"}"#),
        base64_url(serde_json::to_string(&claims("ann")).unwrap().as_bytes())
    );
    assert_eq!(k.verify_auth(&none, now()), Err(TokenError::Algorithm));
}

fn base64_url(b: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
}

// r[verify gateway.auth.token+2]
#[test]
fn configured_audience_and_issuer_are_required() {
    let k = TokenKey::with_secret(
        SECRET.to_vec(),
        AuthSettings {
            audience: vec!["chat".into(), "feed".into()],
            issuer: Some("https://backend.example".into()),
            leeway: Duration::from_secs(5),
            ..AuthSettings::default()
        },
    );
    let t = |c: serde_json::Value| user(k.verify_auth(&hs(&c), now()));
    let base = |extra: serde_json::Value| {
        let mut c = claims("ann");
        for (k, v) in extra.as_object().unwrap() {
            c[k] = v.clone();
        }
        c
    };
    let iss = "https://backend.example";
    assert_eq!(
        t(base(serde_json::json!({"aud": "feed", "iss": iss}))),
        Ok("ann".into())
    );
    assert_eq!(
        t(base(serde_json::json!({"aud": ["x", "chat"], "iss": iss}))),
        Ok("ann".into())
    );
    assert_eq!(
        t(base(serde_json::json!({"aud": "other", "iss": iss}))),
        Err(TokenError::Audience)
    );
    assert_eq!(
        t(base(serde_json::json!({"iss": iss}))),
        Err(TokenError::MissingClaim("aud"))
    );
    assert_eq!(
        t(base(serde_json::json!({"aud": "chat", "iss": "evil"}))),
        Err(TokenError::Issuer)
    );
    assert_eq!(
        t(base(serde_json::json!({"aud": "chat"}))),
        Err(TokenError::MissingClaim("iss"))
    );
    // The leeway is the configured one.
    assert_eq!(
        t(base(
            serde_json::json!({"aud": "chat", "iss": iss, "exp": NOW - 5})
        )),
        Err(TokenError::Expired)
    );
}

// r[verify gateway.auth.expiry-range+2]
#[test]
fn an_expiry_past_what_the_clock_can_hold_is_refused_not_a_panic() {
    let c = serde_json::json!({"sub": "ann", "exp": u64::MAX});
    assert_eq!(
        key().verify_auth(&hs(&c), now()),
        Err(TokenError::ExpiryOutOfRange)
    );
    assert_eq!(
        TokenError::ExpiryOutOfRange.to_string(),
        "token expiry out of range"
    );
    let far = serde_json::json!({"sub": "ann", "exp": 1u64 << 40});
    assert_eq!(user(key().verify_auth(&hs(&far), now())), Ok("ann".into()));
}

proptest::proptest! {
    // r[verify gateway.auth.expiry-range+2]
    #[test]
    fn every_expiry_is_accepted_expired_or_refused_never_a_panic(exp in proptest::prelude::any::<u64>(), now_secs in 0u64..(1 << 40)) {
        let c = serde_json::json!({"sub": "ann", "exp": exp});
        let r = user(key().verify_auth(&hs(&c), UNIX_EPOCH + Duration::from_secs(now_secs)));
        match UNIX_EPOCH.checked_add(Duration::from_secs(exp)) {
            None => proptest::prop_assert_eq!(r, Err(TokenError::ExpiryOutOfRange)),
            Some(_) if now_secs >= exp.saturating_add(30) => proptest::prop_assert_eq!(r, Err(TokenError::Expired)),
            Some(_) => proptest::prop_assert_eq!(r, Ok("ann".to_owned())),
        }
    }

    // r[verify gateway.auth.token+2]
    #[test]
    fn any_text_is_refused_or_verified_never_a_panic(s in ".{0,200}") {
        let _ = pems().verify_auth(&s, now());
    }
}

/// A JWKS of the RSA fixtures' public halves, `kid` their names.
fn rsa_jwks(dir: &Path) -> PathBuf {
    let jwks = dir.join("keys.json");
    let n = |name: &str| {
        let enc = EncodingKey::from_rsa_pem(&read(&format!("{name}.key"))).unwrap();
        let mut jwk = jsonwebtoken::jwk::Jwk::from_encoding_key(&enc, Algorithm::RS256).unwrap();
        jwk.common.key_id = Some(name.to_owned());
        jwk
    };
    let set = jsonwebtoken::jwk::JwkSet {
        keys: vec![n("rsa"), n("rsa-other")],
    };
    std::fs::write(&jwks, serde_json::to_string(&set).unwrap()).unwrap();
    jwks
}

fn rs(name: &str, kid: Option<&str>) -> String {
    let enc = EncodingKey::from_rsa_pem(&read(&format!("{name}.key"))).unwrap();
    sign(Algorithm::RS256, kid, &enc, &claims("ann"))
}

// r[verify gateway.auth.keys]
#[test]
fn a_jwks_chooses_keys_by_kid() {
    let dir = tempfile::tempdir().unwrap();
    let jwks = rsa_jwks(dir.path());
    let k = TokenKey::from_sources(vec![KeySource::public(jwks)], AuthSettings::default()).unwrap();
    for kid in ["rsa", "rsa-other"] {
        assert_eq!(
            user(k.verify_auth(&rs(kid, Some(kid)), now())),
            Ok("ann".into())
        );
    }
    // A kid the set does not hold.
    assert_eq!(
        k.verify_auth(&rs("rsa", Some("gone")), now()),
        Err(TokenError::UnknownKey)
    );
    // The right kid with another key's signature.
    assert_eq!(
        k.verify_auth(&rs("rsa-other", Some("rsa")), now()),
        Err(TokenError::Signature)
    );
}

// r[verify gateway.auth.keys]
#[test]
fn rotation_tries_every_key_of_the_algorithm_and_a_public_key_is_never_a_secret() {
    let dir = tempfile::tempdir().unwrap();
    let old = secret_file(dir.path(), "old", b"old-secret-0123456789");
    let new = secret_file(dir.path(), "new", b"new-secret-0123456789");
    let k = TokenKey::from_sources(
        vec![
            KeySource::secret(old),
            KeySource::secret(new),
            KeySource::public(fixture("rsa-other.pub")),
            KeySource::public(fixture("rsa.pub")),
        ],
        AuthSettings::default(),
    )
    .unwrap();
    let with = |s: &[u8]| {
        sign(
            Algorithm::HS256,
            None,
            &EncodingKey::from_secret(s),
            &claims("ann"),
        )
    };
    // Signed by the second secret and by the second RSA key: found past the first.
    assert_eq!(
        user(k.verify_auth(&with(b"new-secret-0123456789"), now())),
        Ok("ann".into())
    );
    assert_eq!(
        user(k.verify_auth(&rs("rsa", None), now())),
        Ok("ann".into())
    );
    // A key without kid meets a token with one: still tried.
    assert_eq!(
        user(k.verify_auth(&rs("rsa", Some("k1")), now())),
        Ok("ann".into())
    );
    // The classic confusion: HS256 with the public key's bytes as the secret.
    assert_eq!(
        k.verify_auth(&with(&read("rsa.pub")), now()),
        Err(TokenError::Signature)
    );
    assert_eq!(
        pems_public_only().verify_auth(&with(&read("rsa.pub")), now()),
        Err(TokenError::UnknownKey)
    );
}

fn pems_public_only() -> TokenKey {
    TokenKey::from_sources(
        vec![KeySource::public(fixture("rsa.pub"))],
        AuthSettings::default(),
    )
    .unwrap()
}

// r[verify gateway.auth.keys]
#[test]
fn a_public_key_with_a_comment_or_a_bom_is_a_public_key_or_an_error_never_a_secret() {
    let dir = tempfile::tempdir().unwrap();
    let pem = String::from_utf8(read("rsa.pub")).unwrap();
    for (name, text) in [
        ("bom.pub", format!("\u{feff}{pem}")),
        ("comment.pub", format!("# backend key\n{pem}")),
        (
            "bag.pub",
            format!("Bag Attributes\n    friendlyName: x\n{pem}"),
        ),
    ] {
        let p = dir.path().join(name);
        std::fs::write(&p, &text).unwrap();
        // As a public key: an RSA key, or an error; HS256 with its text never verifies.
        if let Ok(k) = TokenKey::from_sources(vec![KeySource::public(&p)], AuthSettings::default())
        {
            let t = sign(
                Algorithm::HS256,
                None,
                &EncodingKey::from_secret(text.trim().as_bytes()),
                &claims("m"),
            );
            assert_eq!(
                k.verify_auth(&t, now()),
                Err(TokenError::UnknownKey),
                "{name}"
            );
        }
        // Declared a secret: refused.
        let s = secret_file(dir.path(), &format!("{name}.secret"), text.as_bytes());
        let e = TokenKey::from_sources(vec![KeySource::secret(&s)], AuthSettings::default())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("not an HS256 secret") || e.contains("byte order mark"),
            "{e}"
        );
    }
    // Neither a JWKS nor a PEM key: an error, not a secret.
    let p = dir.path().join("text.pub");
    std::fs::write(&p, "just-some-long-text-0123456789").unwrap();
    let e =
        TokenKey::from_sources(vec![KeySource::public(&p)], AuthSettings::default()).unwrap_err();
    assert!(e.to_string().contains("neither a JWKS nor"), "{e}");
}

// r[verify gateway.auth.keys]
#[test]
fn secret_files_must_be_private_regular_files_not_links() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let good = secret_file(dir.path(), "good", b"a-good-secret-0123456789");
    assert!(
        TokenKey::from_sources(vec![KeySource::secret(&good)], AuthSettings::default()).is_ok()
    );
    let open = secret_file(dir.path(), "open", b"a-good-secret-0123456789");
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&good, &link).unwrap();
    for (p, want) in [(&open, "chmod 600"), (&link, "symlink")] {
        let e = TokenKey::from_sources(vec![KeySource::secret(p)], AuthSettings::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{e}");
        assert!(read_secret(p).is_err());
    }
    // On reload too: a secret file turned world-readable is a fault, the keys stay.
    let k =
        TokenKey::from_sources(vec![KeySource::secret(&good)], AuthSettings::default()).unwrap();
    std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o640)).unwrap();
    assert!(matches!(
        k.reload(),
        KeyReload::Failed(KeyError::Read { .. })
    ));
    assert!(read_secret(&good).is_err());
    // A FIFO or a device is not read (no blocking, no endless read).
    let fifo = dir.path().join("fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    for p in [fifo.as_path(), Path::new("/dev/zero")] {
        for src in [KeySource::secret(p), KeySource::public(p)] {
            let e = read_key_file(&src).unwrap_err().to_string();
            assert!(e.contains("not a regular file"), "{e}");
        }
    }
    // Larger than the cap.
    let big = dir.path().join("big.pub");
    std::fs::write(&big, vec![b'a'; (MAX_KEY_FILE + 1) as usize]).unwrap();
    assert!(
        read_key_file(&KeySource::public(&big))
            .unwrap_err()
            .to_string()
            .contains("larger")
    );
}

// r[verify gateway.auth.keys]
#[test]
fn jwks_keys_must_fit_their_algorithm_and_be_for_signing() {
    let dir = tempfile::tempdir().unwrap();
    let rsa = {
        let enc = EncodingKey::from_rsa_pem(&read("rsa.key")).unwrap();
        serde_json::to_value(
            jsonwebtoken::jwk::Jwk::from_encoding_key(&enc, Algorithm::RS256).unwrap(),
        )
        .unwrap()
    };
    let oct = serde_json::json!({"kty": "oct", "k": "c2VjcmV0LXNlY3JldC1zZWNyZXQ", "alg": "HS256"});
    let mut rsa_hs = rsa.clone();
    rsa_hs["alg"] = "HS256".into();
    let mut rsa_enc = rsa.clone();
    rsa_enc["use"] = "enc".into();
    rsa_enc.as_object_mut().unwrap().remove("alg");
    let p384 = serde_json::json!({"kty": "EC", "crv": "P-384", "alg": "ES256",
        "x": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "y": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"});
    for (name, key, want) in [
        ("oct", oct, "oct"),
        ("rsa-hs", rsa_hs, "does not fit"),
        ("rsa-enc", rsa_enc, "use is not sig"),
        ("p384", p384, "curve"),
    ] {
        let p = dir.path().join(format!("{name}.json"));
        std::fs::write(
            &p,
            serde_json::json!({"keys": [rsa.clone(), key]}).to_string(),
        )
        .unwrap();
        let e = TokenKey::from_sources(vec![KeySource::public(&p)], AuthSettings::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("key 1") && e.contains(want), "{name}: {e}");
    }
    // An error names the position, never the file's text.
    let p = dir.path().join("leak.json");
    std::fs::write(&p, r#"{"keys":"hunter2-secret-value"}"#).unwrap();
    let e =
        TokenKey::from_sources(vec![KeySource::public(&p)], AuthSettings::default()).unwrap_err();
    assert!(
        !e.to_string().contains("hunter2") && e.to_string().contains("line 1"),
        "{e}"
    );
}

// r[verify gateway.auth.key-reload+2]
#[test]
fn a_changed_file_is_reloaded_and_a_broken_one_keeps_the_previous_keys() {
    let dir = tempfile::tempdir().unwrap();
    let path = secret_file(dir.path(), "secret", b"first-secret-0123456789");
    let k =
        TokenKey::from_sources(vec![KeySource::secret(&path)], AuthSettings::default()).unwrap();
    let with = |s: &str| {
        sign(
            Algorithm::HS256,
            None,
            &EncodingKey::from_secret(s.as_bytes()),
            &claims("ann"),
        )
    };
    assert!(
        k.verify_auth(&with("first-secret-0123456789"), now())
            .is_ok()
    );
    assert_eq!(k.reload(), KeyReload::Unchanged);
    std::fs::write(&path, "second-secret-0123456789").unwrap();
    assert_eq!(k.reload(), KeyReload::Reloaded);
    assert!(
        k.verify_auth(&with("second-secret-0123456789"), now())
            .is_ok()
    );
    assert_eq!(
        k.verify_auth(&with("first-secret-0123456789"), now()),
        Err(TokenError::Signature)
    );
    // A broken file: the previous keys stay, with a fault, until a good file comes.
    std::fs::write(&path, "short").unwrap();
    assert!(matches!(
        k.reload(),
        KeyReload::Failed(KeyError::Parse { .. })
    ));
    assert!(k.fault().is_some());
    assert!(
        k.verify_auth(&with("second-secret-0123456789"), now())
            .is_ok()
    );
    // Back to the content the keys came from: the fault is over.
    std::fs::write(&path, "second-secret-0123456789").unwrap();
    assert_eq!(k.reload(), KeyReload::Unchanged);
    assert_eq!(k.fault(), None);
    std::fs::remove_file(&path).unwrap();
    assert!(matches!(
        k.reload(),
        KeyReload::Failed(KeyError::Read { .. })
    ));
    assert!(
        k.verify_auth(&with("second-secret-0123456789"), now())
            .is_ok()
    );
    secret_file(dir.path(), "secret", b"third-secret-0123456789");
    assert_eq!(k.reload(), KeyReload::Reloaded);
    assert_eq!(k.fault(), None);
    assert!(
        k.verify_auth(&with("third-secret-0123456789"), now())
            .is_ok()
    );
    assert_eq!(key().reload(), KeyReload::Off);
}

#[test]
fn the_signer_mints_what_the_key_verifies() {
    let t = Signer::new(SECRET)
        .token("ann", SystemTime::now() + Duration::from_secs(60))
        .unwrap();
    assert_eq!(
        user(key().verify_auth(&t, SystemTime::now())),
        Ok("ann".into())
    );
    assert_eq!(format!("{:?}", Signer::new(SECRET)), "Signer(<redacted>)");
}

#[test]
fn every_reason_has_its_own_label() {
    let all = [
        TokenError::Malformed,
        TokenError::Algorithm,
        TokenError::UnknownKey,
        TokenError::Signature,
        TokenError::MissingClaim("exp"),
        TokenError::Expired,
        TokenError::NotYetValid,
        TokenError::IssuedInFuture,
        TokenError::Audience,
        TokenError::Issuer,
        TokenError::ExpiryOutOfRange,
        TokenError::WrongKind,
    ];
    let labels: HashSet<_> = all.iter().map(TokenError::reason).collect();
    assert_eq!(labels.len(), TokenError::REASONS.len());
}

// r[verify gateway.rooms.permissions]
#[test]
fn auth_and_subscription_tokens_are_not_interchangeable_and_rooms_default_to_none() {
    let sub = serde_json::json!({"sub": "ann", "exp": NOW + 60, "room": "support:ann"});
    assert_eq!(
        key().verify_auth(&hs(&sub), now()),
        Err(TokenError::WrongKind)
    );
    for c in [
        serde_json::json!({"sub": "ann", "exp": NOW + 60}),
        serde_json::json!({"sub": "ann", "exp": NOW + 60, "room": "r", "rooms": ["r"]}),
        serde_json::json!({"sub": "ann", "exp": NOW + 60, "room": "r", "rooms": null}),
    ] {
        assert_eq!(
            key().verify_subscription(&hs(&c), now()),
            Err(TokenError::WrongKind),
            "{c}"
        );
    }
    // Without `rooms` (or with null): no room by default, any room when configured so.
    for c in [
        serde_json::json!({"sub": "ann", "exp": NOW + 60}),
        serde_json::json!({"sub": "ann", "exp": NOW + 60, "rooms": null}),
    ] {
        assert_eq!(
            key().verify_auth(&hs(&c), now()).unwrap().rooms,
            Some(vec![])
        );
        let any = TokenKey::with_secret(
            SECRET.to_vec(),
            AuthSettings {
                rooms_default: RoomsDefault::Any,
                ..AuthSettings::default()
            },
        );
        assert_eq!(any.verify_auth(&hs(&c), now()).unwrap().rooms, None);
    }
}

// r[verify gateway.rooms.permissions]
#[test]
fn rooms_are_names_or_prefixes_and_travel_in_the_token() {
    let rooms: Vec<String> = vec!["lobby".into(), "chat:*".into()];
    assert!(
        room_allowed(&rooms, "lobby")
            && room_allowed(&rooms, "chat:")
            && room_allowed(&rooms, "chat:x*")
    );
    assert!(
        !room_allowed(&rooms, "lobby2")
            && !room_allowed(&rooms, "chat")
            && !room_allowed(&rooms, "Lobby")
    );
    assert!(!room_allowed(&[], "lobby"));
    assert!(room_allowed(&["*".into()], "anything"));
    let c = serde_json::json!({"sub": "ann", "exp": NOW + 60, "rooms": ["a", "b:*"]});
    let got = key().verify_auth(&hs(&c), now()).unwrap();
    assert_eq!(got.rooms, Some(vec!["a".to_owned(), "b:*".to_owned()]));
    let c = serde_json::json!({"sub": "ann", "exp": NOW + 60, "room": "s"});
    let got = key().verify_subscription(&hs(&c), now()).unwrap();
    assert_eq!(got.room.as_deref(), Some("s"));
    // Not a list of names: the token is malformed.
    let c = serde_json::json!({"sub": "ann", "exp": NOW + 60, "rooms": "a"});
    assert_eq!(
        key().verify_auth(&hs(&c), now()),
        Err(TokenError::Malformed)
    );
}

proptest::proptest! {
    // r[verify gateway.rooms.permissions]
    #[test]
    fn a_name_allows_only_itself_and_a_prefix_every_extension(name in "[a-z:]{0,12}", tail in "[a-z:*]{0,6}") {
        let exact = vec![name.clone()];
        let longer = format!("{name}{tail}");
        proptest::prop_assert!(room_allowed(&exact, &name));
        proptest::prop_assert_eq!(room_allowed(&exact, &longer), tail.is_empty());
        let prefix = vec![format!("{name}*")];
        proptest::prop_assert!(room_allowed(&prefix, &longer));
    }
}

use proptest::strategy::Strategy as _;

proptest::proptest! {
    // r[verify gateway.auth.keys]
    #[test]
    fn any_bytes_as_a_key_file_parse_or_fail_and_a_public_file_never_yields_a_secret(
        bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400),
        pre in "[ -~\n]{0,40}",
    ) {
        let path = Path::new("k");
        if let Ok(keys) = parse(&KeySource::public(path), &bytes) {
            proptest::prop_assert!(keys.iter().all(|k| k.alg != Algorithm::HS256));
        }
        let _ = parse(&KeySource::secret(path), &bytes);
        // Text holding a PEM boundary is never a secret, whatever precedes it.
        let text = format!("{pre}-----BEGIN PUBLIC KEY-----\n{}", String::from_utf8_lossy(&bytes));
        proptest::prop_assert!(parse(&KeySource::secret(path), text.as_bytes()).is_err());
    }

    // r[verify gateway.auth.token+2]
    #[test]
    fn well_formed_tokens_with_any_header_and_claims_are_verified_or_refused_never_a_panic(
        alg in "(HS256|RS256|ES256|EdDSA|none|HS512|PS256|[A-Za-z0-9]{0,6})",
        kid in proptest::option::of("[ -~]{0,12}"),
        claims in proptest::collection::btree_map(
            "(sub|exp|nbf|iat|aud|iss|rooms|room|[a-z]{1,4})",
            proptest::prop_oneof![
                proptest::prelude::any::<i64>().prop_map(serde_json::Value::from),
                proptest::prelude::any::<f64>().prop_map(serde_json::Value::from),
                "[ -~]{0,10}".prop_map(serde_json::Value::from),
                proptest::collection::vec("[a-z:*]{0,5}", 0..3).prop_map(serde_json::Value::from),
                proptest::strategy::Just(serde_json::Value::Null),
            ],
            0..8,
        ),
        sig in "[A-Za-z0-9_-]{0,60}",
    ) {
        let mut header = serde_json::json!({"alg": alg, "typ": "JWT"});
        if let Some(kid) = &kid {
            header["kid"] = kid.clone().into();
        }
        let body = serde_json::to_string(&claims).unwrap_or_default();
        let unsigned = format!("{}.{}", base64_url(header.to_string().as_bytes()), base64_url(body.as_bytes()));
        // An arbitrary signature: never accepted.
        let forged = format!("{unsigned}.{sig}");
        proptest::prop_assert!(pems().verify_auth(&forged, now()).is_err());
        let r = key().verify_subscription(&forged, now());
        proptest::prop_assert!(r.is_err());
        if !["HS256", "RS256", "ES256", "EdDSA"].contains(&alg.as_str()) {
            proptest::prop_assert_eq!(key().verify_auth(&forged, now()).unwrap_err(), TokenError::Algorithm);
        }
        // Signed with the secret: accepted only with a non-empty sub, an exp and no room.
        if alg == "HS256" {
            let t = jsonwebtoken::encode(
                &{
                    let mut h = Header::new(Algorithm::HS256);
                    h.kid = kid.clone();
                    h
                },
                &claims,
                &EncodingKey::from_secret(SECRET),
            )
            .unwrap();
            if let Ok(c) = key().verify_auth(&t, now()) {
                proptest::prop_assert!(!c.user.is_empty());
                proptest::prop_assert!(claims.contains_key("exp") && !claims.contains_key("room"));
            }
        }
    }
}

// r[verify gateway.auth.token+2]
#[test]
fn times_are_whole_seconds_and_none_is_an_algorithm() {
    let c = serde_json::json!({"sub": "ann", "exp": NOW as f64 + 60.5});
    assert_eq!(
        key().verify_auth(&hs(&c), now()),
        Err(TokenError::Malformed)
    );
    let none = format!(
        "{}.{}.",
        base64_url(br#"{"alg":"none"}"#),
        base64_url(serde_json::to_string(&claims("ann")).unwrap().as_bytes())
    );
    assert_eq!(key().verify_auth(&none, now()), Err(TokenError::Algorithm));
}

// A reload whose read overlaps a replace commits nothing: not the keys it read, even when the
// replace went S, T, then S again with newer content (what was read of the first S is not the
// second's), and not its failure (no fault, no `Failed`: the files it failed on are not in use).
// r[verify gateway.auth.key-reload+2]
// r[verify gateway.auth.key-replace]
#[test]
fn a_reload_read_before_a_replace_commits_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let s = secret_file(dir.path(), "s", b"first-secret-0123456789");
    let t = secret_file(dir.path(), "t", b"other-secret-0123456789");
    let k = TokenKey::from_sources(vec![KeySource::secret(&s)], AuthSettings::default()).unwrap();
    let with = |secret: &str| {
        sign(
            Algorithm::HS256,
            None,
            &EncodingKey::from_secret(secret.as_bytes()),
            &claims("ann"),
        )
    };
    std::fs::write(&s, "rotated-secret-0123456789").unwrap();
    let stale = k.read_keys().unwrap();
    k.replace(NewKeys::read(vec![KeySource::secret(&t)]).unwrap());
    std::fs::write(&s, "newest-secret-0123456789").unwrap();
    k.replace(NewKeys::read(vec![KeySource::secret(&s)]).unwrap());
    assert_eq!(k.commit(stale), KeyReload::Unchanged);
    assert!(
        k.verify_auth(&with("newest-secret-0123456789"), now())
            .is_ok()
    );
    assert_eq!(
        k.verify_auth(&with("rotated-secret-0123456789"), now()),
        Err(TokenError::Signature)
    );

    // A read that failed on the files a replace then left.
    std::fs::remove_file(&s).unwrap();
    let failed = k.read_keys().unwrap();
    assert!(matches!(failed.read, Err(KeyError::Read { .. })));
    k.replace(NewKeys::read(vec![KeySource::secret(&t)]).unwrap());
    assert_eq!(k.commit(failed), KeyReload::Unchanged);
    assert_eq!(k.fault(), None);
    assert!(
        k.verify_auth(&with("other-secret-0123456789"), now())
            .is_ok()
    );
}
