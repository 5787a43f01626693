//! TLS for `wss://`: a PEM certificate chain and key, re-read when their files change, so a
//! renewed certificate reaches new connections while open ones stay up, and never served once its
//! leaf has expired.

use std::fmt;
use std::io;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock, TryLockError};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt as _, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::acme_alpn::AcmeTlsAlpn;
use crate::stats::Stats;

/// A certificate chain (leaf first) and its private key, as PEM files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The chain, PEM, leaf first.
    pub cert: PathBuf,
    /// The private key, PEM (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// Why a certificate pair cannot be used. Each variant names the file at fault.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// The certificate file holds no certificate.
    #[error("{}: no certificate in the PEM file", path.display())]
    NoCertificate {
        /// The file.
        path: PathBuf,
    },
    /// The key file holds no private key.
    #[error("{}: no private key in the PEM file", path.display())]
    NoKey {
        /// The file.
        path: PathBuf,
    },
    /// A file's content could not be parsed or used.
    #[error("{}: {reason}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The leaf certificate's validity cannot be read, so its expiry cannot be judged.
    #[error("{}: the leaf certificate cannot be parsed: {reason}", path.display())]
    Leaf {
        /// The certificate file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The key is not the one the leaf certificate certifies.
    #[error("{} is not the key of the certificate in {}", key.display(), cert.display())]
    Mismatch {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
    },
}

/// What a check of the TLS files found.
#[derive(Debug)]
pub enum TlsReload {
    /// The gateway serves plain `ws://`.
    Off,
    /// The files have not changed since the last check.
    Unchanged,
    /// The files changed and the new pair is served to new connections.
    Reloaded,
    /// The files changed but the new pair is unusable: the previous one is still served.
    Rejected(TlsError),
}

/// The ring provider, as the workspace's other rustls users pick it.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The largest certificate or key file read (bytes): a chain of a few certificates fits well
/// within it.
pub const MAX_TLS_FILE: u64 = 1 << 20;

/// Reads one certificate or key file as key files are read (`read_key_file`): opened with
/// `O_NONBLOCK`, so a FIFO never blocks the read (nor a check holding the store), checked on the
/// open descriptor to be a regular file of at most [`MAX_TLS_FILE`] bytes, then read from it.
fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let fail = |source: io::Error| TlsError::Read {
        path: path.to_owned(),
        source,
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(fail)?;
    let meta = file.metadata().map_err(fail)?;
    if !meta.file_type().is_file() {
        return Err(fail(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        )));
    }
    let too_large = || {
        fail(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("larger than {MAX_TLS_FILE} bytes"),
        ))
    };
    if meta.len() > MAX_TLS_FILE {
        return Err(too_large());
    }
    let mut bytes = Vec::new();
    file.take(MAX_TLS_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(fail)?;
    if bytes.len() as u64 > MAX_TLS_FILE {
        return Err(too_large());
    }
    Ok(bytes)
}

/// The leaf's notAfter, and as written for the log.
fn not_after(path: &Path, leaf: &CertificateDer<'_>) -> Result<(SystemTime, String), TlsError> {
    let (_, x509) = x509_parser::parse_x509_certificate(leaf).map_err(|e| TlsError::Leaf {
        path: path.to_owned(),
        reason: e.to_string(),
    })?;
    let text = x509.validity().not_after.to_string();
    let secs = x509.validity().not_after.timestamp();
    let at = match u64::try_from(secs) {
        Ok(after) => SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(after)),
        Err(_) => SystemTime::UNIX_EPOCH.checked_sub(Duration::from_secs(secs.unsigned_abs())),
    };
    // Out of the platform's range: before any `now`, or after every one.
    let at = at.unwrap_or(if secs < 0 {
        SystemTime::UNIX_EPOCH
    } else {
        SystemTime::UNIX_EPOCH + Duration::from_secs(u64::from(u32::MAX) * 64)
    });
    Ok((at, text))
}

/// Warns when a pair is loaded (at the start, or re-read) already past its notAfter: it is
/// served as refusals from the first handshake on.
// r[impl gateway.tls.expired]
fn warn_if_expired(files: &TlsFiles, served: &Served, now: SystemTime) {
    if served.expired(now) {
        tracing::warn!(
            cert = %files.cert.display(),
            not_after = %served.not_after_text,
            "TLS certificate loaded already expired: every handshake is refused until renewed \
             files replace it"
        );
    }
}

/// A pair as served: the key, its leaf's notAfter, and whether its expiry was reported.
pub(crate) struct Served {
    key: Arc<CertifiedKey>,
    not_after: SystemTime,
    not_after_text: String,
    /// Set by the first handshake refused because the leaf expired, so it is logged once per
    /// pair, not once per connection.
    reported: AtomicBool,
}

impl Served {
    /// At or past its notAfter, the instant itself included, as `r[issue.expiry+2]` counts it.
    fn expired(&self, now: SystemTime) -> bool {
        now >= self.not_after
    }
}

/// Reads and checks a pair: the chain parses, the key parses and is the leaf's, and the leaf's
/// notAfter can be read.
pub(crate) fn load(files: &TlsFiles, provider: &CryptoProvider) -> Result<Served, TlsError> {
    let cert_pem = read(&files.cert)?;
    let key_pem = read(&files.key)?;
    let invalid = |path: &Path, e: &dyn fmt::Display| TlsError::Invalid {
        path: path.to_owned(),
        reason: e.to_string(),
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| invalid(&files.cert, &e))?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate {
            path: files.cert.clone(),
        });
    }
    let key = match PrivateKeyDer::from_pem_slice(&key_pem) {
        Ok(key) => key,
        Err(rustls_pki_types::pem::Error::NoItemsFound) => {
            return Err(TlsError::NoKey {
                path: files.key.clone(),
            });
        }
        Err(e) => return Err(invalid(&files.key, &e)),
    };
    let (not_after, not_after_text) = not_after(&files.cert, &chain[0])?;
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| invalid(&files.key, &e))?;
    let certified = CertifiedKey::new(chain, signing);
    match certified.keys_match() {
        // A key type whose public half rustls cannot derive is not proof of a mismatch.
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {
            Ok(Served {
                key: Arc::new(certified),
                not_after,
                not_after_text,
                reported: AtomicBool::new(false),
            })
        }
        Err(rustls::Error::InconsistentKeys(_)) => Err(TlsError::Mismatch {
            cert: files.cert.clone(),
            key: files.key.clone(),
        }),
        Err(e) => Err(invalid(&files.cert, &e)),
    }
}

/// What identifies one version of a file without reading it: replaced (new inode), rewritten
/// (mtime, ctime) or resized. `None` when it cannot be stat'ed.
type Stamp = Option<(u64, u64, u64, i64, i64, i64, i64)>;

fn stamp(path: &Path) -> Stamp {
    let m = std::fs::metadata(path).ok()?;
    Some((
        m.dev(),
        m.ino(),
        m.len(),
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec(),
    ))
}

/// When the files were last checked; held by a check for its whole length (file I/O included),
/// so checks never overlap. Nothing else waits on it.
struct Watch {
    last_check: Instant,
}

/// The files served and what was last read of them. Its lock is only ever held for a copy or an
/// assignment, never across I/O: a replace never waits behind a check stuck reading a file.
struct Files {
    files: TlsFiles,
    /// Bumped by each replace: a check read under an older one commits nothing.
    generation: u64,
    /// The stamps of the pair last read (served, or rejected and reported).
    seen: (Stamp, Stamp),
}

/// The wall clock a leaf's expiry is judged by (the system's, or a test's).
pub(crate) type WallClock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// A pair read and checked, not served yet: what [`crate::Gateway::take_tls`] swaps in. Reading
/// it is the slow part (blocking file I/O), so it happens before, and apart from, the swap.
pub struct NewTlsPair {
    files: TlsFiles,
    served: Served,
    seen: (Stamp, Stamp),
}

// The key is a secret: only the file names are printed.
impl fmt::Debug for NewTlsPair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NewTlsPair")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

impl NewTlsPair {
    // r[impl gateway.tls.replace+2]
    /// Reads and checks the pair in `files` as a start does (`r[gateway.tls.serve]`): an error
    /// names the file at fault. An expired leaf is not an error here either. Blocking file I/O:
    /// call it off the async runtime's workers.
    pub fn read(files: TlsFiles) -> Result<Self, TlsError> {
        // Stamped before reading, as a check does: a change while reading is seen next time.
        let seen = (stamp(&files.cert), stamp(&files.key));
        let served = load(&files, &provider())?;
        Ok(Self {
            files,
            served,
            seen,
        })
    }

    /// The files this pair was read from.
    pub fn files(&self) -> &TlsFiles {
        &self.files
    }
}

/// The certificate currently served, and the watch on its files.
pub(crate) struct CertStore {
    /// The files served (replaced by [`CertStore::replace`]), their generation and stamps.
    files: Mutex<Files>,
    provider: Arc<CryptoProvider>,
    current: RwLock<Arc<Served>>,
    watch: Mutex<Watch>,
    interval: Duration,
    clock: WallClock,
}

// The key is a secret: only the file names are printed.
impl fmt::Debug for CertStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertStore")
            .field("files", &self.files())
            .finish_non_exhaustive()
    }
}

/// The certificate one handshake is served: the pair judged servable at its start, or none (an
/// expired leaf), which fails the handshake with an alert. Per handshake, so the certificate
/// shown is the one judged, on the same snapshot and clock reading.
// r[impl gateway.tls.expired]
struct Judged(Option<Arc<CertifiedKey>>);

// The key is a secret: nothing of it is printed.
impl fmt::Debug for Judged {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Judged").field(&self.0.is_some()).finish()
    }
}

impl ResolvesServerCert for Judged {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.0.clone()
    }
}

impl CertStore {
    /// Reads the pair for the first time; a bad pair is an error naming the file. An expired
    /// leaf is not: the start goes on, refusing handshakes until a renewal replaces the files.
    fn open(files: TlsFiles, interval: Duration, clock: WallClock) -> Result<Self, TlsError> {
        let provider = provider();
        let seen = (stamp(&files.cert), stamp(&files.key));
        let served = load(&files, &provider)?;
        warn_if_expired(&files, &served, clock());
        Ok(Self {
            files: Mutex::new(Files {
                files,
                generation: 0,
                seen,
            }),
            provider,
            current: RwLock::new(Arc::new(served)),
            watch: Mutex::new(Watch {
                last_check: Instant::now(),
            }),
            interval,
            clock,
        })
    }

    /// The files served now.
    pub(crate) fn files(&self) -> TlsFiles {
        crate::sync::lock(&self.files).files.clone()
    }

    // r[impl gateway.tls.replace+2]
    /// Serves `new` to every handshake that starts from now on, and watches its files from then
    /// on in place of the previous ones. Handshakes done keep their session.
    /// Never waits for a check under way (which may be stuck reading a file): it bumps the
    /// generation, so that check commits nothing.
    pub(crate) fn replace(&self, new: NewTlsPair, stats: &Stats) {
        let NewTlsPair {
            files,
            served,
            seen,
        } = new;
        warn_if_expired(&files, &served, (self.clock)());
        tracing::info!(cert = %files.cert.display(), key = %files.key.display(),
            "TLS certificate files replaced");
        {
            let mut state = crate::sync::lock(&self.files);
            state.files = files;
            state.generation = state.generation.wrapping_add(1);
            state.seen = seen;
            // Under the files' lock, so a check's commit (also under it) cannot land after this.
            *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(served);
        }
        stats.tls_reloaded();
    }

    /// The pair served now.
    pub(crate) fn current(&self) -> Arc<Served> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The served leaf's notAfter, if it has passed.
    pub(crate) fn expired_since(&self) -> Option<SystemTime> {
        let served = self.current();
        served.expired((self.clock)()).then_some(served.not_after)
    }

    /// The key a handshake is served, judged once on one snapshot. An expired leaf is counted,
    /// and logged once per pair, and refused.
    // r[impl gateway.tls.expired]
    fn check_expiry(&self, stats: &Stats) -> Result<Arc<CertifiedKey>, io::Error> {
        let served = self.current();
        if !served.expired((self.clock)()) {
            return Ok(served.key.clone());
        }
        stats.tls_expired_refused();
        if !served.reported.swap(true, Ordering::Relaxed) {
            tracing::error!(
                cert = %self.files().cert.display(),
                not_after = %served.not_after_text,
                "TLS certificate expired: handshakes are refused until renewed files replace it"
            );
        }
        Err(io::Error::other("the TLS certificate has expired"))
    }

    /// Re-reads the pair if its files changed. Unless `force`, checks at most once per interval;
    /// a check already running elsewhere is not repeated. A changed pair that is unusable is
    /// counted and logged once, and the served one is kept until the files change again.
    // r[impl gateway.tls.reload]
    pub(crate) fn refresh(&self, stats: &Stats, now: Instant, force: bool) -> TlsReload {
        let mut watch = if force {
            // A requested reload must look at the files after the request, so it waits for a
            // check already under way (two stats, at most two non-blocking reads of regular
            // files). Only checks wait here: a replace never does.
            crate::sync::lock(&self.watch)
        } else {
            match self.watch.try_lock() {
                Ok(w) => w,
                Err(TryLockError::Poisoned(p)) => p.into_inner(),
                // Another connection is checking right now: it serves the outcome.
                Err(TryLockError::WouldBlock) => return TlsReload::Unchanged,
            }
        };
        if !force && now.saturating_duration_since(watch.last_check) < self.interval {
            return TlsReload::Unchanged;
        }
        watch.last_check = now;
        let (files, generation) = {
            let state = crate::sync::lock(&self.files);
            (state.files.clone(), state.generation)
        };
        let seen = (stamp(&files.cert), stamp(&files.key));
        {
            let mut state = crate::sync::lock(&self.files);
            if state.generation != generation || seen == state.seen {
                // Unchanged, or replaced meanwhile (the replace read the new files itself).
                return TlsReload::Unchanged;
            }
            // Recorded before reading, so a bad pair is reported once per change, not per check.
            state.seen = seen;
        }
        let loaded = load(&files, &self.provider);
        let state = crate::sync::lock(&self.files);
        if state.generation != generation {
            // Replaced while this read the previous files: what they held is not served.
            return TlsReload::Unchanged;
        }
        match loaded {
            Ok(served) => {
                warn_if_expired(&files, &served, (self.clock)());
                *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(served);
                drop(state);
                stats.tls_reloaded();
                tracing::info!(cert = %files.cert.display(), "TLS certificate reloaded");
                TlsReload::Reloaded
            }
            Err(e) => {
                drop(state);
                stats.tls_reload_failed();
                tracing::warn!(error = %e, "new TLS certificate rejected; still serving the previous one");
                TlsReload::Rejected(e)
            }
        }
    }
}

/// The gateway's TLS side: the server config and the store it takes certificates from.
pub(crate) struct Tls {
    /// The server config, serving no certificate: each handshake gets a copy serving the one
    /// judged for it.
    config: Arc<rustls::ServerConfig>,
    pub(crate) store: Arc<CertStore>,
    /// The TLS-ALPN-01 challenges this listener answers, once the node hands them over.
    alpn: RwLock<Option<Arc<dyn AcmeTlsAlpn>>>,
}

impl Tls {
    /// Loads the pair and builds the server config, judging expiry by the system clock.
    pub(crate) fn new(files: TlsFiles, interval: Duration) -> Result<Self, TlsError> {
        Self::with_clock(files, interval, Arc::new(SystemTime::now))
    }

    /// [`Tls::new`] judging expiry by `clock`.
    // r[impl gateway.tls.serve]
    pub(crate) fn with_clock(
        files: TlsFiles,
        interval: Duration,
        clock: WallClock,
    ) -> Result<Self, TlsError> {
        let store = Arc::new(CertStore::open(files, interval, clock)?);
        let config = rustls::ServerConfig::builder_with_provider(store.provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Invalid {
                path: store.files().cert.clone(),
                reason: e.to_string(),
            })?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(Judged(None)));
        Ok(Self {
            config: Arc::new(config),
            store,
            alpn: RwLock::new(None),
        })
    }

    pub(crate) fn set_alpn(&self, challenges: Arc<dyn AcmeTlsAlpn>) {
        *self.alpn.write().unwrap_or_else(|p| p.into_inner()) = Some(challenges);
    }

    fn challenge_for(&self, hello: &ClientHello<'_>) -> Option<Arc<rustls::ServerConfig>> {
        let alpn = self.alpn.read().unwrap_or_else(|p| p.into_inner());
        crate::acme_alpn::challenge_for(alpn.as_deref()?, hello)
    }

    /// Checks the files (if due), reads the ClientHello, then runs the TLS handshake with the
    /// certificate now served; an expired one fails the handshake (with an alert). A
    /// TLS-ALPN-01 validation gets its challenge certificate and is closed: `Ok(None)`.
    // r[impl gateway.tls.alpn01]
    // r[impl gateway.tls.expired]
    pub(crate) async fn accept(&self, stats: &Stats, tcp: TcpStream) -> io::Result<Option<Stream>> {
        self.store.refresh(stats, Instant::now(), false);
        let start =
            tokio_rustls::LazyConfigAcceptor::new(rustls::server::Acceptor::default(), tcp).await?;
        // Before the expiry check: the validation that renews an expired certificate must pass.
        let challenge = self.challenge_for(&start.client_hello());
        if let Some(challenge) = challenge {
            let mut tls = start.into_stream(challenge).await?;
            stats.tls_alpn_answered();
            // The validator needs nothing after the handshake (RFC 8737 §3). The caller's
            // handshake timeout bounds this close too.
            let _ = tls.shutdown().await;
            return Ok(None);
        }
        let key = match self.store.check_expiry(stats) {
            Ok(key) => key,
            Err(e) => {
                // The config's resolver gives no certificate: rustls sends the alert.
                let _ = start.into_stream(self.config.clone()).await;
                return Err(e);
            }
        };
        // A copy of the config (its session cache shared) serving the key judged above.
        let mut config = (*self.config).clone();
        config.cert_resolver = Arc::new(Judged(Some(key)));
        let tls = start.into_stream(Arc::new(config)).await?;
        Ok(Some(Stream::Tls(Box::new(tls))))
    }
}

/// A client's byte stream: plain TCP or TLS over it.
pub(crate) enum Stream {
    /// `ws://`.
    Plain(TcpStream),
    /// `wss://` (boxed: a TLS session is large, and plain connections should not pay for it).
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn write_pair(files: &TlsFiles, name: &str) {
        write_pair_until(files, name, (4096, 1, 1));
    }

    fn write_pair_until(files: &TlsFiles, name: &str, (y, m, d): (i32, u8, u8)) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec![name.to_owned()]).unwrap();
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(y, m, d);
        let cert = params.self_signed(&key).unwrap();
        std::fs::write(&files.cert, cert.pem()).unwrap();
        std::fs::write(&files.key, key.serialize_pem()).unwrap();
    }

    // The exact boundary: a connection arriving one interval after the last check checks again,
    // one arriving a nanosecond earlier does not.
    // r[verify gateway.tls.reload]
    #[tokio::test(start_paused = true)]
    async fn a_check_is_due_exactly_one_interval_after_the_last() {
        let dir = tempfile::tempdir().unwrap();
        let files = TlsFiles {
            cert: dir.path().join("cert.pem"),
            key: dir.path().join("key.pem"),
        };
        write_pair(&files, "first.test");
        let interval = Duration::from_secs(1);
        let store = CertStore::open(files.clone(), interval, Arc::new(SystemTime::now)).unwrap();
        let opened = store.watch.lock().unwrap().last_check;
        write_pair(&files, "second-and-longer.test");
        let stats = Stats::default();
        let early = opened + interval - Duration::from_nanos(1);
        assert!(matches!(
            store.refresh(&stats, early, false),
            TlsReload::Unchanged
        ));
        assert!(matches!(
            store.refresh(&stats, opened + interval, false),
            TlsReload::Reloaded
        ));
    }

    // A leaf that expires under the (injected) clock: served up to the second before its
    // notAfter, refused from that instant on, counted per handshake and reported once; a renewed
    // pair picked up from the files is served again.
    // r[verify gateway.tls.expired]
    #[tokio::test(start_paused = true)]
    async fn a_leaf_is_refused_from_its_not_after_until_a_renewal_replaces_it() {
        let dir = tempfile::tempdir().unwrap();
        let files = TlsFiles {
            cert: dir.path().join("cert.pem"),
            key: dir.path().join("key.pem"),
        };
        write_pair_until(&files, "soon.test", (2030, 1, 1));
        // 2030-01-01T00:00:00Z.
        let not_after = SystemTime::UNIX_EPOCH + Duration::from_secs(1_893_456_000);
        let now = Arc::new(Mutex::new(not_after - Duration::from_secs(1)));
        let clock = {
            let now = now.clone();
            Arc::new(move || *now.lock().unwrap()) as WallClock
        };
        let interval = Duration::from_secs(1);
        let store = CertStore::open(files.clone(), interval, clock).unwrap();
        let stats = Stats::default();
        assert!(store.check_expiry(&stats).is_ok());
        assert_eq!(store.expired_since(), None);

        *now.lock().unwrap() = not_after;
        assert!(
            store.check_expiry(&stats).is_err(),
            "served at its notAfter"
        );
        assert!(store.check_expiry(&stats).is_err());
        assert_eq!(stats.snapshot().tls_expired_refusals, 2);
        assert!(store.current().reported.load(Ordering::Relaxed), "reported");
        assert_eq!(store.expired_since(), Some(not_after));

        // The renewal lands in the files: the next due check serves it.
        write_pair_until(&files, "soon-renewed.test", (2030, 4, 1));
        tokio::time::advance(interval).await;
        assert!(matches!(
            store.refresh(&stats, Instant::now(), false),
            TlsReload::Reloaded
        ));
        assert!(store.check_expiry(&stats).is_ok());
        assert_eq!(store.expired_since(), None);
        assert_eq!(stats.snapshot().tls_expired_refusals, 2);
    }

    // A replace never waits for a check under way (one stuck reading a file holds the watch):
    // the check's lock is held here as such a check holds it, and the replace still lands.
    // r[verify gateway.tls.replace+2]
    #[test]
    fn a_replace_never_waits_for_a_check_under_way() {
        let dir = tempfile::tempdir().unwrap();
        let first = TlsFiles {
            cert: dir.path().join("cert.pem"),
            key: dir.path().join("key.pem"),
        };
        write_pair(&first, "first.test");
        let second = TlsFiles {
            cert: dir.path().join("cert2.pem"),
            key: dir.path().join("key2.pem"),
        };
        write_pair(&second, "second.test");
        let store = Arc::new(
            CertStore::open(first, Duration::from_secs(3600), Arc::new(SystemTime::now)).unwrap(),
        );
        let pair = NewTlsPair::read(second.clone()).unwrap();
        let held = store.watch.lock().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let replacing = store.clone();
        std::thread::spawn(move || {
            replacing.replace(pair, &Stats::default());
            tx.send(()).unwrap();
        });
        let done = rx.recv_timeout(Duration::from_secs(3));
        drop(held);
        assert!(done.is_ok(), "the replace waited for the check's lock");
        assert_eq!(store.files(), second);
    }

    // A named pipe in place of the certificate is refused at once (no writer is waited for),
    // and the error names it.
    // r[verify gateway.tls.replace+2]
    #[test]
    fn a_fifo_is_refused_without_waiting_for_a_writer() {
        let dir = tempfile::tempdir().unwrap();
        let files = TlsFiles {
            cert: dir.path().join("cert.pem"),
            key: dir.path().join("key.pem"),
        };
        write_pair(&files, "fifo.test");
        std::fs::remove_file(&files.cert).unwrap();
        assert!(
            std::process::Command::new("mkfifo")
                .arg(&files.cert)
                .status()
                .unwrap()
                .success()
        );
        let (tx, rx) = std::sync::mpsc::channel();
        let read = files.clone();
        std::thread::spawn(move || tx.send(NewTlsPair::read(read).map(drop)).unwrap());
        let outcome = rx.recv_timeout(Duration::from_secs(3));
        if outcome.is_err() {
            // Unblock the stuck reader before failing.
            drop(std::fs::OpenOptions::new().write(true).open(&files.cert));
        }
        let outcome = outcome.expect("the read waited for a writer");
        match outcome {
            Err(TlsError::Read { path, source }) => {
                assert_eq!(path, files.cert);
                assert!(
                    source.to_string().contains("not a regular file"),
                    "{source}"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    /// Takes any certificate: the test looks at whether the server served one.
    #[derive(Debug)]
    struct AnyCert;

    impl rustls::client::danger::ServerCertVerifier for AnyCert {
        fn verify_server_cert(
            &self,
            _: &CertificateDer<'_>,
            _: &[CertificateDer<'_>],
            _: &rustls_pki_types::ServerName<'_>,
            _: &[u8],
            _: rustls_pki_types::UnixTime,
        ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
            Ok(rustls::client::danger::ServerCertVerified::assertion())
        }
        fn verify_tls12_signature(
            &self,
            _: &[u8],
            _: &CertificateDer<'_>,
            _: &rustls::DigitallySignedStruct,
        ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
            Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
        }
        fn verify_tls13_signature(
            &self,
            _: &[u8],
            _: &CertificateDer<'_>,
            _: &rustls::DigitallySignedStruct,
        ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
            Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
        }
        fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
            provider()
                .signature_verification_algorithms
                .supported_schemes()
        }
    }

    // One judgement per handshake, on one snapshot of the served pair: a leaf whose notAfter
    // passes while the handshake runs is served (judged at its start), never failed with an
    // alert that no refusal counts.
    // r[verify gateway.tls.expired]
    #[tokio::test]
    async fn a_handshake_judges_expiry_once() {
        let dir = tempfile::tempdir().unwrap();
        let files = TlsFiles {
            cert: dir.path().join("cert.pem"),
            key: dir.path().join("key.pem"),
        };
        write_pair_until(&files, "localhost", (2030, 1, 1));
        // 2030-01-01T00:00:00Z; the first two reads of the clock (the load's, the handshake's)
        // are a second before, every later one at it.
        let not_after = SystemTime::UNIX_EPOCH + Duration::from_secs(1_893_456_000);
        let reads = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let clock = {
            let reads = reads.clone();
            Arc::new(move || {
                if reads.fetch_add(1, Ordering::SeqCst) < 2 {
                    not_after - Duration::from_secs(1)
                } else {
                    not_after
                }
            }) as WallClock
        };
        let tls = Tls::with_clock(files, Duration::from_secs(3600), clock).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = tokio::spawn(async move {
            let config = rustls::ClientConfig::builder_with_provider(provider())
                .with_safe_default_protocol_versions()
                .unwrap()
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyCert))
                .with_no_client_auth();
            let tcp = TcpStream::connect(addr).await.unwrap();
            tokio_rustls::TlsConnector::from(Arc::new(config))
                .connect(
                    rustls_pki_types::ServerName::try_from("localhost").unwrap(),
                    tcp,
                )
                .await
                .map(drop)
        });
        let (tcp, _) = listener.accept().await.unwrap();
        let stats = Stats::default();
        let served = tls.accept(&stats, tcp).await;
        let shown = client.await.unwrap();
        assert!(served.is_ok(), "{:?}", served.err());
        assert!(shown.is_ok(), "{shown:?}");
        assert_eq!(stats.snapshot().tls_expired_refusals, 0);
        assert_eq!(
            reads.load(Ordering::SeqCst),
            2,
            "the handshake read the clock once"
        );
    }

    /// Log lines written by a test's subscriber.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Captured {
        /// How many lines of `level` contain `text`.
        fn count(&self, level: &str, text: &str) -> usize {
            let out = String::from_utf8(self.0.lock().unwrap().clone()).unwrap();
            out.lines()
                .filter(|l| l.trim_start().starts_with(level) && l.contains(text))
                .count()
        }
    }

    // An expired pair is warned about when loaded (at the start and when re-read), and its
    // refusals are logged once per pair however many handshakes it refuses.
    // r[verify gateway.tls.expired]
    #[tokio::test(start_paused = true)]
    async fn an_expired_pair_is_warned_at_load_and_its_refusals_logged_once_per_pair() {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_ansi(false)
            .without_time()
            .with_writer(move || writer.clone())
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);
        let dir = tempfile::tempdir().unwrap();
        let files = TlsFiles {
            cert: dir.path().join("cert.pem"),
            key: dir.path().join("key.pem"),
        };
        write_pair_until(&files, "old.test", (2021, 1, 1));
        let interval = Duration::from_secs(1);
        let store = CertStore::open(files.clone(), interval, Arc::new(SystemTime::now)).unwrap();
        assert_eq!(captured.count("WARN", "loaded already expired"), 1);
        let stats = Stats::default();
        for _ in 0..3 {
            assert!(store.check_expiry(&stats).is_err());
        }
        assert_eq!(captured.count("ERROR", "TLS certificate expired"), 1);

        // Another expired pair re-read: warned again, and its refusals logged once more.
        write_pair_until(&files, "older-and-longer.test", (2021, 2, 1));
        tokio::time::advance(interval).await;
        assert!(matches!(
            store.refresh(&stats, Instant::now(), false),
            TlsReload::Reloaded
        ));
        assert_eq!(captured.count("WARN", "loaded already expired"), 2);
        for _ in 0..3 {
            assert!(store.check_expiry(&stats).is_err());
        }
        assert_eq!(captured.count("ERROR", "TLS certificate expired"), 2);
        assert_eq!(stats.snapshot().tls_expired_refusals, 6);
    }

    /// One pending challenge for `a.example.test`.
    struct OnePending(Arc<rustls::ServerConfig>);

    impl AcmeTlsAlpn for OnePending {
        fn challenge_config(&self, name: &str) -> Option<Arc<rustls::ServerConfig>> {
            (name == "a.example.test").then(|| self.0.clone())
        }
    }

    // An answered validation is its own outcome, not a failed handshake.
    // r[verify gateway.tls.alpn01]
    #[tokio::test]
    async fn an_answered_validation_is_its_own_outcome() {
        let dir = tempfile::tempdir().unwrap();
        let files = TlsFiles {
            cert: dir.path().join("cert.pem"),
            key: dir.path().join("key.pem"),
        };
        write_pair(&files, "localhost");
        let tls = Tls::new(files, Duration::from_secs(3600)).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["a.example.test".to_owned()]).unwrap();
        params.custom_extensions = vec![rcgen::CustomExtension::new_acme_identifier(&[1; 32])];
        let cert = params.self_signed(&key).unwrap();
        let der = rustls_pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
        let signing = provider().key_provider.load_private_key(der).unwrap();
        let certified = CertifiedKey::new(vec![cert.der().clone()], signing);
        let mut challenge = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(Judged(Some(Arc::new(certified)))));
        challenge.alpn_protocols = vec![crate::ACME_TLS_ALPN.to_vec()];
        tls.set_alpn(Arc::new(OnePending(Arc::new(challenge))));

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = tokio::spawn(async move {
            let mut config = rustls::ClientConfig::builder_with_provider(provider())
                .with_safe_default_protocol_versions()
                .unwrap()
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyCert))
                .with_no_client_auth();
            config.alpn_protocols = vec![crate::ACME_TLS_ALPN.to_vec()];
            let tcp = TcpStream::connect(addr).await.unwrap();
            let name = rustls_pki_types::ServerName::try_from("a.example.test").unwrap();
            let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
                .connect(name, tcp)
                .await
                .unwrap();
            tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec)
        });
        let (tcp, _) = listener.accept().await.unwrap();
        let stats = Stats::default();
        let outcome = tls.accept(&stats, tcp).await;
        assert!(
            matches!(outcome, Ok(None)),
            "{:?}",
            outcome.map(|s| s.is_some())
        );
        assert_eq!(client.await.unwrap().as_deref(), Some(crate::ACME_TLS_ALPN));
        assert_eq!(stats.snapshot().tls_alpn_answered, 1);
    }
}
