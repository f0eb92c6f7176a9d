//! TLS of Dynamo's planes, as 1.6.1 sets it up (docs/dynamo/request-plane-tls.md): the TCP
//! request plane's two roles ([`PlaneTls`]: the listener a process serves, the connections
//! it dials) and the NATS client ([`nats_client`]).
//!
//! Configurations are built once, off the request path: the main thread builds the
//! frontend's at start-up and [`install`]s it for the shards, which read it when their
//! request plane is made ([`installed`]) and keep it as an `Arc`; the in-tree mock worker and
//! the event-ingest thread build their own. Handshakes run where the sockets are: on the
//! shards (`transport`), on the mock worker's and the ingest thread's own threads.
//!
//! What 1.6.1 does and this does alike: rustls with *ring*, TLS 1.2 and 1.3, no ALPN; a
//! dialed peer is verified against the CA file under `DYN_TCP_TLS_SERVER_NAME`, else under its
//! IP address (so no SNI is sent), or not verified at all with `DYN_TCP_TLS_INSECURE`; a
//! listener with a client CA requires a client certificate signed by it; a certificate and
//! key rotated on disk (rewritten, renamed or swapped by symlink) are taken by the next
//! handshake without a restart ([`Identity`]: one watcher thread looks at the files every
//! second and swaps a new identity in; handshakes read it lock-free from a per-thread copy).

use std::cell::RefCell;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, SystemTime};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::ResolvesClientCert;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{
    ClientConfig, ClientConnection, DigitallySignedStruct, RootCertStore, ServerConfig, ServerConnection,
    SignatureScheme,
};

use super::{pem, provider};
pub use crate::config::settings::{NatsTlsFiles, PlaneRole, PlaneTlsFiles};

/// How a process dials its peers over TLS: the configuration, the name peers are verified
/// under (`None`: each peer's IP address), the handshake's time limit.
#[derive(Clone, Debug)]
pub struct Dialer {
    config: Arc<ClientConfig>,
    name: Option<ServerName<'static>>,
    pub handshake_timeout: Duration,
}

impl Dialer {
    /// A client session towards `peer`.
    pub fn session(&self, peer: IpAddr) -> Result<ClientConnection, rustls::Error> {
        let name = self.name.clone().unwrap_or_else(|| ServerName::IpAddress(peer.into()));
        ClientConnection::new(self.config.clone(), name)
    }

    /// The name peers are verified under, when it is not their address.
    pub fn server_name(&self) -> Option<&ServerName<'static>> {
        self.name.as_ref()
    }
}

/// How a process's listener serves TLS.
#[derive(Clone, Debug)]
pub struct Acceptor {
    config: Arc<ServerConfig>,
    client_auth: bool,
    pub handshake_timeout: Duration,
}

impl Acceptor {
    /// A server session for one accepted connection.
    pub fn session(&self) -> Result<ServerConnection, rustls::Error> {
        ServerConnection::new(self.config.clone())
    }

    /// Whether clients must present a certificate.
    pub fn requires_client_cert(&self) -> bool {
        self.client_auth
    }
}

/// The TLS of one process's request plane: `None` on either side is plain TCP.
#[derive(Clone, Debug, Default)]
pub struct PlaneTls {
    /// The listener this process serves (a frontend's call-back listener, a worker's
    /// request-plane listener).
    pub acceptor: Option<Acceptor>,
    /// The connections this process dials (a frontend's requests, a worker's call-backs).
    pub dialer: Option<Dialer>,
}

impl PlaneTls {
    /// Read the files of `files` and build both sides, for a process playing `role`: `files`
    /// must pass [`PlaneTlsFiles::check`] (whose messages, 1.6.1's, are returned otherwise).
    /// Errors name the file at fault.
    pub fn build(files: &PlaneTlsFiles, role: PlaneRole) -> Result<PlaneTls, String> {
        files.check(role, &mut Vec::new())?;
        let acceptor = match (&files.cert, &files.key) {
            (Some(cert), Some(key)) => Some(Acceptor {
                config: server_config(cert, key, files.client_ca.as_deref())?,
                client_auth: files.client_ca.is_some(),
                handshake_timeout: files.handshake_timeout,
            }),
            _ => None,
        };
        let dialer = if files.dials_tls() {
            let name = match &files.server_name {
                Some(n) => {
                    Some(ServerName::try_from(n.clone()).map_err(|e| format!("invalid TLS server name {n:?}: {e}"))?)
                }
                None => None,
            };
            let identity = files.client_cert.as_deref().zip(files.client_key.as_deref());
            let roots = match (&files.ca, files.insecure) {
                (_, true) => None,
                (Some(ca), false) => Some(pem::roots(ca)?),
                (None, false) => Some(RootCertStore::empty()),
            };
            Some(Dialer { config: client_config(roots, identity)?, name, handshake_timeout: files.handshake_timeout })
        } else {
            None
        };
        Ok(PlaneTls { acceptor, dialer })
    }

    /// Plain TCP both ways.
    pub fn is_plain(&self) -> bool {
        self.acceptor.is_none() && self.dialer.is_none()
    }
}

/// The request plane's TLS of this process, once [`install`]ed (plain until then).
static INSTALLED: OnceLock<(PlaneTlsFiles, PlaneTls)> = OnceLock::new();

/// Build `files` and make them this process's request-plane TLS, which every shard's
/// request plane takes ([`installed`]) when it is made. Done once, by the main thread,
/// before the shards start; installing the same files again is a no-op, other files are
/// refused (one process has one request-plane TLS, as in 1.6.1).
pub fn install(files: &PlaneTlsFiles) -> Result<(), String> {
    if let Some((have, _)) = INSTALLED.get() {
        return match have == files {
            true => Ok(()),
            false => Err("the request plane's TLS is already set up with other files in this process".into()),
        };
    }
    if files == &PlaneTlsFiles::default() {
        return Ok(());
    }
    let tls = PlaneTls::build(files, PlaneRole::Frontend)?;
    INSTALLED.set((files.clone(), tls)).map_err(|_| "the request plane's TLS was set up twice at once".to_string())
}

/// This process's request-plane TLS (plain TCP unless [`install`] set one up).
pub fn installed() -> &'static PlaneTls {
    static PLAIN: PlaneTls = PlaneTls { acceptor: None, dialer: None };
    INSTALLED.get().map_or(&PLAIN, |(_, tls)| tls)
}

fn server_config(cert: &Path, key: &Path, client_ca: Option<&Path>) -> Result<Arc<ServerConfig>, String> {
    let identity = Identity::load(cert, key)?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(pem::roots(ca)?), provider())
                .build()
                .map_err(|e| format!("TLS client CA file {}: {e}", ca.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    Ok(Arc::new(builder.with_cert_resolver(identity)))
}

/// A client configuration trusting `roots` (`None`: verifying nothing) and showing
/// `identity` (certificate file, key file) when asked for one.
fn client_config(roots: Option<RootCertStore>, identity: Option<(&Path, &Path)>) -> Result<Arc<ClientConfig>, String> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let builder = match roots {
        Some(roots) => builder.with_root_certificates(roots),
        None => builder.dangerous().with_custom_certificate_verifier(Arc::new(Unverified(provider()))),
    };
    let config = match identity {
        Some((cert, key)) => builder.with_client_cert_resolver(Identity::load(cert, key)?),
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

/// How often the watcher looks at the identities' files.
pub const RELOAD_LOOK_EVERY: Duration = Duration::from_secs(1);

/// What identifies a file's content without reading it: modification time, size, inode (of
/// what a symlink points at).
type Stamp = Option<(SystemTime, u64, u64)>;

fn stamp(path: &Path) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len(), m.ino()))
}

/// A certificate chain and key from two PEM files, shown by a listener or a dialer, and
/// reread when either file changes. A pair that fails to load (half written, a key that does
/// not match) is logged and the previous one stays.
#[derive(Debug)]
pub struct Identity {
    /// Unique in the process (per-thread copies are keyed by it).
    id: u64,
    cert: PathBuf,
    key: PathBuf,
    /// Bumped by every swap; a thread whose copy is older takes the new one.
    generation: AtomicU64,
    current: Mutex<Arc<CertifiedKey>>,
    stamps: Mutex<(Stamp, Stamp)>,
}

fn certified(cert: &Path, key: &Path) -> Result<Arc<CertifiedKey>, String> {
    CertifiedKey::from_der(pem::certs(cert)?, pem::key(key)?, &provider())
        .map(Arc::new)
        .map_err(|e| format!("TLS certificate {} with key {}: {e}", cert.display(), key.display()))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Identity {
    /// Read the pair and have the watcher follow it.
    pub fn load(cert: &Path, key: &Path) -> Result<Arc<Identity>, String> {
        static IDS: AtomicU64 = AtomicU64::new(0);
        let stamps = (stamp(cert), stamp(key));
        let identity = Arc::new(Identity {
            id: IDS.fetch_add(1, Ordering::Relaxed),
            cert: cert.to_owned(),
            key: key.to_owned(),
            generation: AtomicU64::new(0),
            current: Mutex::new(certified(cert, key)?),
            stamps: Mutex::new(stamps),
        });
        watch(&identity);
        Ok(identity)
    }

    /// The current pair: this thread's copy unless a swap made it old (then one lock).
    pub fn get(&self) -> Arc<CertifiedKey> {
        thread_local! {
            static COPIES: RefCell<Vec<(u64, u64, Arc<CertifiedKey>)>> = const { RefCell::new(Vec::new()) };
        }
        let generation = self.generation.load(Ordering::Acquire);
        COPIES.with(|copies| {
            let mut copies = copies.borrow_mut();
            if let Some((_, g, key)) = copies.iter().find(|(id, _, _)| *id == self.id) {
                if *g == generation {
                    return key.clone();
                }
            }
            let key = lock(&self.current).clone();
            copies.retain(|(id, _, _)| *id != self.id);
            if copies.len() >= 16 {
                copies.clear();
            }
            copies.push((self.id, generation, key.clone()));
            key
        })
    }

    /// Reread the pair if a file changed.
    fn refresh(&self) {
        let now = (stamp(&self.cert), stamp(&self.key));
        if *lock(&self.stamps) == now {
            return;
        }
        match certified(&self.cert, &self.key) {
            Ok(key) => {
                *lock(&self.current) = key;
                self.generation.fetch_add(1, Ordering::Release);
                *lock(&self.stamps) = now;
                crate::log::info(&format!("TLS: request plane certificate {} reloaded", self.cert.display()));
            }
            // Left as it was: a later change (the rest of the write) is tried again.
            Err(e) => {
                crate::log::warn(&format!("TLS: reload failed, keeping the previous certificate: {e}"));
                *lock(&self.stamps) = now;
            }
        }
    }
}

impl ResolvesServerCert for Identity {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.get())
    }
}

impl ResolvesClientCert for Identity {
    fn resolve(&self, _hints: &[&[u8]], schemes: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        let key = self.get();
        key.key.choose_scheme(schemes).is_some().then_some(key)
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// Have the process's watcher thread (started by the first identity) follow `identity`
/// for as long as it lives.
fn watch(identity: &Arc<Identity>) {
    static WATCHED: Mutex<Vec<Weak<Identity>>> = Mutex::new(Vec::new());
    static STARTED: OnceLock<()> = OnceLock::new();
    lock(&WATCHED).push(Arc::downgrade(identity));
    STARTED.get_or_init(|| {
        let spawned = std::thread::Builder::new().name("tls-plane-reload".into()).spawn(|| loop {
            std::thread::sleep(RELOAD_LOOK_EVERY);
            let live: Vec<Arc<Identity>> = {
                let mut watched = lock(&WATCHED);
                watched.retain(|w| w.strong_count() > 0);
                watched.iter().filter_map(Weak::upgrade).collect()
            };
            for identity in live {
                identity.refresh();
            }
        });
        if let Err(e) = spawned {
            crate::log::warn(&format!("TLS: no certificate reload thread: {e}"));
        }
    });
}

/// The NATS client's TLS configuration for the server list `url` (`NATS_SERVER`): `None`
/// when neither an option nor a `tls://` URL asks for TLS. It trusts the CA file and the
/// system's roots (async-nats, which 1.6.1 uses, trusts the CA file and Mozilla's roots), or
/// nothing with `insecure`, and shows the client identity for mutual TLS.
pub fn nats_client(files: &NatsTlsFiles, url: &str) -> Result<Option<Arc<ClientConfig>>, String> {
    if !files.any() && !url.trim_start().starts_with("tls://") {
        return Ok(None);
    }
    if files.client_cert.is_some() != files.client_key.is_some() {
        return Err(
            "Both NATS_TLS_CLIENT_CERT_PATH and NATS_TLS_CLIENT_KEY_PATH must be set together to enable NATS mTLS"
                .into(),
        );
    }
    let roots = match files.insecure {
        true => None,
        false => {
            let mut roots = system_roots();
            if let Some(ca) = &files.ca {
                for cert in pem::certs(ca)? {
                    roots.add(cert).map_err(|e| format!("TLS CA file {}: {e}", ca.display()))?;
                }
            }
            Some(roots)
        }
    };
    client_config(roots, files.client_cert.as_deref().zip(files.client_key.as_deref())).map(Some)
}

/// The system's trusted roots: `SSL_CERT_FILE`, else the usual bundle paths (Debian, Red
/// Hat). Certificates that do not parse are skipped; no bundle gives an empty store.
fn system_roots() -> RootCertStore {
    let mut roots = RootCertStore::empty();
    let candidates = std::env::var_os("SSL_CERT_FILE").map(std::path::PathBuf::from).into_iter().chain(
        ["/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt"].map(std::path::PathBuf::from),
    );
    for path in candidates {
        if let Ok(certs) = pem::certs(&path) {
            roots.add_parsable_certificates(certs);
            break;
        }
    }
    roots
}

/// The verifier of insecure mode: any certificate is accepted, but the handshake's
/// signatures are still checked (so the peer does hold the key of what it showed).
#[derive(Debug)]
struct Unverified(Arc<CryptoProvider>);

/// [`Unverified`], for other insecure clients (a kubeconfig's `insecure-skip-tls-verify`).
pub(crate) fn unverified() -> Arc<dyn ServerCertVerifier> {
    Arc::new(Unverified(provider()))
}

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl PlaneTls {
        fn build_test(files: &PlaneTlsFiles) -> Result<PlaneTls, String> {
            PlaneTls::build(files, PlaneRole::Frontend)
        }
    }

    fn data(name: &str) -> Option<std::path::PathBuf> {
        Some(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tls").join(name))
    }

    #[test]
    fn sides_follow_the_files() {
        let none = PlaneTls::build_test(&PlaneTlsFiles::default()).unwrap();
        assert!(none.is_plain());
        let serve = PlaneTlsFiles { cert: data("server.pem"), key: data("server.key"), ..Default::default() };
        let t = PlaneTls::build_test(&serve).unwrap();
        assert!(t.acceptor.is_some() && t.dialer.is_none());
        assert!(!t.acceptor.unwrap().requires_client_cert());
        let mtls = PlaneTlsFiles { client_ca: data("ca.pem"), ca: data("ca.pem"), ..serve.clone() };
        let t = PlaneTls::build_test(&mtls).unwrap();
        assert!(t.acceptor.unwrap().requires_client_cert());
        let dialer = t.dialer.unwrap();
        assert!(dialer.server_name().is_none());
        dialer.session("127.0.0.1".parse().unwrap()).unwrap();
        let named = PlaneTlsFiles { insecure: true, server_name: Some("localhost".into()), ..Default::default() };
        let t = PlaneTls::build_test(&named).unwrap();
        assert_eq!(t.dialer.unwrap().server_name(), Some(&ServerName::try_from("localhost").unwrap()));
    }

    #[test]
    fn bad_files_are_named() {
        let missing = PlaneTlsFiles { cert: data("nope.pem"), key: data("server.key"), ..Default::default() };
        let e = PlaneTls::build_test(&missing).unwrap_err();
        assert!(e.contains("nope.pem"), "{e}");
        let not_pem = PlaneTlsFiles { ca: data("../../../Cargo.toml"), ..Default::default() };
        let e = PlaneTls::build_test(&not_pem).unwrap_err();
        assert!(e.contains("Cargo.toml") && e.contains("no CERTIFICATE"), "{e}");
        let mismatch = PlaneTlsFiles { cert: data("server.pem"), key: data("client.key"), ..Default::default() };
        assert!(PlaneTls::build_test(&mismatch).is_err());
    }

    #[test]
    fn nats_needs_a_whole_identity() {
        let url = "tls://127.0.0.1:4443";
        assert!(nats_client(&NatsTlsFiles::default(), "nats://127.0.0.1:4222").unwrap().is_none());
        assert!(nats_client(&NatsTlsFiles::default(), url).unwrap().is_some(), "tls:// alone: the system's roots");
        let half = NatsTlsFiles { ca: data("ca.pem"), client_cert: data("client.pem"), ..Default::default() };
        assert!(nats_client(&half, url).unwrap_err().contains("must be set together to enable NATS mTLS"));
        let whole = NatsTlsFiles { client_key: data("client.key"), ..half };
        assert!(nats_client(&whole, url).unwrap().is_some());
    }
}
