//! PEM files into rustls types: certificate chains, private keys (PKCS#8, PKCS#1 or SEC1) and
//! root stores. Runs wherever a configuration is built (main thread, reload thread), never on
//! a shard's request path. Every error names the file and what was wrong with it.

use std::path::Path;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::RootCertStore;

fn read(path: &Path, what: &str) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("cannot read the {what} {}: {e}", path.display()))
}

/// Every certificate in the PEM file at `path`, in order (a leaf then its chain).
pub fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let bytes = read(path, "TLS certificate file")?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("TLS certificate file {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("TLS certificate file {}: no CERTIFICATE in it", path.display()));
    }
    Ok(certs)
}

/// The first private key in the PEM file at `path`.
pub fn key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    let bytes = read(path, "TLS key file")?;
    PrivateKeyDer::from_pem_slice(&bytes)
        .map_err(|e| format!("TLS key file {}: no usable private key: {e}", path.display()))
}

/// A root store of every certificate in the PEM file at `path`.
pub fn roots(path: &Path) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    for cert in certs(path)? {
        store.add(cert).map_err(|e| format!("TLS CA file {}: {e}", path.display()))?;
    }
    Ok(store)
}
