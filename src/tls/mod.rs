//! TLS material and configurations: PEM files read into rustls types ([`pem`]), the HTTPS
//! server's configuration (certificate, key, optional client CA for mutual TLS, ALPN `h2` and
//! `http/1.1`), and the watcher that rebuilds it when the files change or on SIGHUP
//! ([`reload`]).
//!
//! Configurations are built off the shards (the main thread at start-up, the reload thread
//! afterwards) and handed to every shard as an immutable `Arc`; a shard's handshakes read only
//! its own copy. The handshakes themselves run on the shards ([`crate::shard`]).
//!
//! One crypto provider for the whole process: rustls with *ring*.

pub mod pem;
pub mod plane;
pub mod reload;

use std::path::PathBuf;
use std::sync::Arc;

use rustls::server::WebPkiClientVerifier;
use rustls::ServerConfig;

/// The ALPN protocols the HTTPS listener offers, preferred first.
pub const ALPN: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// The crypto provider every configuration uses.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

pub use crate::config::settings::TlsFiles;

/// Every file `files` builds a configuration from (the reload watcher looks at these).
pub fn paths(files: &TlsFiles) -> Vec<PathBuf> {
    let mut v = vec![files.cert.clone(), files.key.clone()];
    v.extend(files.client_ca.clone());
    v
}

/// Read `files` and build the HTTPS server configuration; an error names the file at fault.
pub fn server_config(files: &TlsFiles) -> Result<Arc<ServerConfig>, String> {
    let certs = pem::certs(&files.cert)?;
    let key = pem::key(&files.key)?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let roots = Arc::new(pem::roots(ca)?);
            let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider())
                .build()
                .map_err(|e| format!("TLS client CA file {}: {e}", ca.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| format!("TLS certificate {} with key {}: {e}", files.cert.display(), files.key.display()))?;
    config.alpn_protocols = ALPN.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(config))
}
