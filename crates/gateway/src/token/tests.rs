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

fn pems() -> TokenKey {
    TokenKey::from_files(
        vec![
            fixture("rsa.pub"),
            fixture("ec.pub"),
            fixture("ed.pub"),
            fixture("hs256.secret"),
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
        assert_eq!(user(k.verify(t, now())), Ok("ann".into()), "{t}");
    }
    // A key of another pair: no key verifies it.
    let other = sign(
        Algorithm::RS256,
        None,
        &EncodingKey::from_rsa_pem(&read("rsa-other.key")).unwrap(),
        &c,
    );
    assert_eq!(k.verify(&other, now()), Err(TokenError::Signature));
    // An algorithm no key is for.
    assert_eq!(key().verify(&rs, now()), Err(TokenError::UnknownKey));
    assert!(!format!("{k:?}").contains("fixture-hs256-secret"));
    assert!(!format!("{:?}", key()).contains("0123456789abcdef"));
}

// r[verify gateway.auth.token+2]
#[test]
fn claims_are_checked_with_the_leeway() {
    let k = key();
    let t = |c: serde_json::Value| user(k.verify(&hs(&c), now()));
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
    assert_eq!(k.verify(&forged, now()), Err(TokenError::Signature));
    assert_eq!(k.verify("", now()), Err(TokenError::Malformed));
    assert_eq!(k.verify("a.b.c", now()), Err(TokenError::Malformed));
    // `none` is never accepted.
    let none = format!(
        "{}.{}.",
        base64_url(br#"{"alg":"none","typ":"JWT"}"#),
        base64_url(serde_json::to_string(&claims("ann")).unwrap().as_bytes())
    );
    assert_ne!(k.verify(&none, now()).map(|c| c.user), Ok("ann".into()));
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
        },
    );
    let t = |c: serde_json::Value| user(k.verify(&hs(&c), now()));
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
        key().verify(&hs(&c), now()),
        Err(TokenError::ExpiryOutOfRange)
    );
    assert_eq!(
        TokenError::ExpiryOutOfRange.to_string(),
        "token expiry out of range"
    );
    let far = serde_json::json!({"sub": "ann", "exp": 1u64 << 40});
    assert_eq!(user(key().verify(&hs(&far), now())), Ok("ann".into()));
}

proptest::proptest! {
    // r[verify gateway.auth.expiry-range+2]
    #[test]
    fn every_expiry_is_accepted_expired_or_refused_never_a_panic(exp in proptest::prelude::any::<u64>(), now_secs in 0u64..(1 << 40)) {
        let c = serde_json::json!({"sub": "ann", "exp": exp});
        let r = user(key().verify(&hs(&c), UNIX_EPOCH + Duration::from_secs(now_secs)));
        match UNIX_EPOCH.checked_add(Duration::from_secs(exp)) {
            None => proptest::prop_assert_eq!(r, Err(TokenError::ExpiryOutOfRange)),
            Some(_) if now_secs >= exp.saturating_add(30) => proptest::prop_assert_eq!(r, Err(TokenError::Expired)),
            Some(_) => proptest::prop_assert_eq!(r, Ok("ann".to_owned())),
        }
    }

    // r[verify gateway.auth.token+2]
    #[test]
    fn any_text_is_refused_or_verified_never_a_panic(s in ".{0,200}") {
        let _ = pems().verify(&s, now());
    }
}

// r[verify gateway.auth.keys]
#[test]
fn a_jwks_chooses_keys_by_kid() {
    let dir = tempfile::tempdir().unwrap();
    let jwks = dir.path().join("keys.json");
    let n = |k: &str| {
        let enc = EncodingKey::from_secret(k.as_bytes());
        let mut jwk = jsonwebtoken::jwk::Jwk::from_encoding_key(&enc, Algorithm::HS256).unwrap();
        jwk.common.key_id = Some(k.to_owned());
        jwk
    };
    let set = jsonwebtoken::jwk::JwkSet {
        keys: vec![n("old-key-0123456789"), n("new-key-0123456789")],
    };
    std::fs::write(&jwks, serde_json::to_string(&set).unwrap()).unwrap();
    let k = TokenKey::from_files(vec![jwks], AuthSettings::default()).unwrap();
    for kid in ["old-key-0123456789", "new-key-0123456789"] {
        let t = sign(
            Algorithm::HS256,
            Some(kid),
            &EncodingKey::from_secret(kid.as_bytes()),
            &claims("ann"),
        );
        assert_eq!(user(k.verify(&t, now())), Ok("ann".into()));
    }
    // A kid the set does not hold.
    let t = sign(
        Algorithm::HS256,
        Some("gone"),
        &EncodingKey::from_secret(b"gone"),
        &claims("ann"),
    );
    assert_eq!(k.verify(&t, now()), Err(TokenError::UnknownKey));
    // The right kid with another key's signature.
    let t = sign(
        Algorithm::HS256,
        Some("old-key-0123456789"),
        &EncodingKey::from_secret(b"new-key-0123456789"),
        &claims("ann"),
    );
    assert_eq!(k.verify(&t, now()), Err(TokenError::Signature));
}

// r[verify gateway.auth.keys]
#[test]
fn key_files_that_cannot_be_used_are_refused_with_their_path() {
    let dir = tempfile::tempdir().unwrap();
    let f = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let cases = [
        (f("short", "tooshort\n"), "at least 16"),
        (
            f("private.pem", &String::from_utf8(read("rsa.key")).unwrap()),
            "private key",
        ),
        (
            f(
                "junk.pem",
                "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n",
            ),
            "not an RSA",
        ),
        (f("bad.json", "{\"keys\": 3}"), "not a JWKS"),
        (f("empty.json", "{\"keys\": []}"), "no keys"),
    ];
    for (path, want) in cases {
        let e = TokenKey::from_files(vec![path.clone()], AuthSettings::default()).unwrap_err();
        let s = e.to_string();
        assert!(
            s.contains(&path.display().to_string()) && s.contains(want),
            "{s}"
        );
    }
    assert_eq!(
        TokenKey::from_files(vec![], AuthSettings::default()).unwrap_err(),
        KeyError::Empty
    );
}

// r[verify gateway.auth.key-reload]
#[test]
fn a_changed_file_is_reloaded_and_a_broken_one_keeps_the_previous_keys() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("secret");
    std::fs::write(&path, "first-secret-0123456789").unwrap();
    let k = TokenKey::from_files(vec![path.clone()], AuthSettings::default()).unwrap();
    let with = |s: &str| {
        sign(
            Algorithm::HS256,
            None,
            &EncodingKey::from_secret(s.as_bytes()),
            &claims("ann"),
        )
    };
    assert!(k.verify(&with("first-secret-0123456789"), now()).is_ok());
    assert_eq!(k.reload(), KeyReload::Unchanged);
    std::fs::write(&path, "second-secret-0123456789").unwrap();
    assert_eq!(k.reload(), KeyReload::Reloaded);
    assert!(k.verify(&with("second-secret-0123456789"), now()).is_ok());
    assert_eq!(
        k.verify(&with("first-secret-0123456789"), now()),
        Err(TokenError::Signature)
    );
    // A broken file: the previous keys stay, with a fault, until a good file comes.
    std::fs::write(&path, "short").unwrap();
    assert!(matches!(
        k.reload(),
        KeyReload::Failed(KeyError::Parse { .. })
    ));
    assert!(k.fault().is_some());
    assert!(k.verify(&with("second-secret-0123456789"), now()).is_ok());
    std::fs::remove_file(&path).unwrap();
    assert!(matches!(
        k.reload(),
        KeyReload::Failed(KeyError::Read { .. })
    ));
    assert!(k.verify(&with("second-secret-0123456789"), now()).is_ok());
    std::fs::write(&path, "third-secret-0123456789").unwrap();
    assert_eq!(k.reload(), KeyReload::Reloaded);
    assert_eq!(k.fault(), None);
    assert!(k.verify(&with("third-secret-0123456789"), now()).is_ok());
    assert_eq!(key().reload(), KeyReload::Off);
}

#[test]
fn the_signer_mints_what_the_key_verifies() {
    let t = Signer::new(SECRET)
        .token("ann", SystemTime::now() + Duration::from_secs(60))
        .unwrap();
    assert_eq!(user(key().verify(&t, SystemTime::now())), Ok("ann".into()));
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
    ];
    let labels: HashSet<_> = all.iter().map(TokenError::reason).collect();
    assert_eq!(labels.len(), TokenError::REASONS.len());
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
    let c = serde_json::json!({"sub": "ann", "exp": NOW + 60, "rooms": ["a", "b:*"], "room": "s"});
    let got = key().verify(&hs(&c), now()).unwrap();
    assert_eq!(got.rooms, Some(vec!["a".to_owned(), "b:*".to_owned()]));
    assert_eq!(got.room.as_deref(), Some("s"));
    // Not a list of names: the token is malformed.
    let c = serde_json::json!({"sub": "ann", "exp": NOW + 60, "rooms": "a"});
    assert_eq!(key().verify(&hs(&c), now()), Err(TokenError::Malformed));
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
