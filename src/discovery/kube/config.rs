//! Where the Kubernetes API is and who this process is, found the way Dynamo 1.6.1 finds them
//! (its Kubernetes client's defaults): a kubeconfig first (`KUBECONFIG`, else
//! `~/.kube/config`), else the in-cluster service account
//! (`KUBERNETES_SERVICE_HOST`/`_PORT`, `/var/run/secrets/kubernetes.io/serviceaccount/`);
//! `KUBE_RS_DEBUG_OVERRIDE_URL` replaces the server address. The pod identity comes from the
//! Downward API files under `/etc/podinfo/`, else `POD_NAME`, `POD_UID`, `POD_NAMESPACE`.
//! Read once at start-up on the control thread.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use serde_json::Value;

use crate::discovery::etcd::wire::b64_decode;

const SERVICE_ACCOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
const PODINFO: &str = "/etc/podinfo";

/// How requests are authorised.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Token {
    None,
    Static(String),
    /// Read anew for every request (service-account tokens are rotated).
    File(PathBuf),
}

impl Token {
    /// The `Authorization` header's value, if any.
    pub fn bearer(&self) -> Option<String> {
        match self {
            Token::None => None,
            Token::Static(t) => Some(format!("Bearer {t}")),
            Token::File(p) => std::fs::read_to_string(p).ok().map(|t| format!("Bearer {}", t.trim())),
        }
    }
}

/// The API server and how to reach it.
#[derive(Clone)]
pub struct Cluster {
    /// `host:port` to connect to (and the `Host` header).
    pub authority: String,
    /// TLS settings and the name the certificate must carry; `None` for `http://`.
    pub tls: Option<(Arc<ClientConfig>, ServerName<'static>)>,
    pub token: Token,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        write!(f, "{scheme}://{}", self.authority)
    }
}

/// This process's pod, as discovery names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodInfo {
    pub name: String,
    pub uid: String,
    pub namespace: String,
}

/// `DYN_KUBE_DISCOVERY_MODE`: readiness from EndpointSlices (`pod`) or Pods (`container`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Pod,
    Container,
}

impl Mode {
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<Mode, String> {
        match env("DYN_KUBE_DISCOVERY_MODE").as_deref() {
            None | Some("pod") => Ok(Mode::Pod),
            Some("container") => Ok(Mode::Container),
            Some(other) => {
                Err(format!("Invalid DYN_KUBE_DISCOVERY_MODE value '{other}'. Valid values: 'pod', 'container'"))
            }
        }
    }
}

impl PodInfo {
    /// From `/etc/podinfo/{pod_name,pod_uid,pod_namespace}`, else the environment.
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<PodInfo, String> {
        Self::read(Path::new(PODINFO), env)
    }

    fn read(dir: &Path, env: &dyn Fn(&str) -> Option<String>) -> Result<PodInfo, String> {
        let value = |file: &str, var: &str| {
            std::fs::read_to_string(dir.join(file))
                .ok()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .or_else(|| env(var).filter(|s| !s.is_empty()))
        };
        let name = value("pod_name", "POD_NAME").ok_or("POD_NAME not available from file or environment")?;
        let uid = value("pod_uid", "POD_UID").ok_or("POD_UID not available from file or environment")?;
        let namespace = value("pod_namespace", "POD_NAMESPACE").unwrap_or_else(|| {
            crate::log::warn("POD_NAMESPACE not set, defaulting to 'default'");
            "default".to_string()
        });
        Ok(PodInfo { name, uid, namespace })
    }
}

impl Cluster {
    /// The cluster this process is configured for (see the module doc).
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<Cluster, String> {
        let kubeconfig = env("KUBECONFIG")
            .and_then(|v| v.split(':').find(|p| !p.is_empty()).map(PathBuf::from))
            .or_else(|| env("HOME").map(|h| Path::new(&h).join(".kube/config")).filter(|p| p.exists()));
        let mut cluster = match kubeconfig {
            Some(path) => {
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| format!("Failed to create Kubernetes client: kubeconfig {}: {e}", path.display()))?;
                Self::from_kubeconfig(&text, path.parent().unwrap_or(Path::new(".")))
                    .map_err(|e| format!("Failed to create Kubernetes client: kubeconfig {}: {e}", path.display()))?
            }
            None => Self::in_cluster(env, Path::new(SERVICE_ACCOUNT))?,
        };
        if let Some(url) = env("KUBE_RS_DEBUG_OVERRIDE_URL") {
            let (https, authority) = split_url(&url)?;
            if https != cluster.tls.is_some() {
                return Err(format!("KUBE_RS_DEBUG_OVERRIDE_URL {url}: another scheme than the configured cluster's"));
            }
            cluster.authority = authority;
        }
        Ok(cluster)
    }

    /// The service account's view (https only, as the in-cluster configuration is).
    fn in_cluster(env: &dyn Fn(&str) -> Option<String>, dir: &Path) -> Result<Cluster, String> {
        let (Some(host), Some(port)) = (env("KUBERNETES_SERVICE_HOST"), env("KUBERNETES_SERVICE_PORT")) else {
            return Err("Failed to create Kubernetes client: no kubeconfig (KUBECONFIG, ~/.kube/config) and not in a \
                        cluster (KUBERNETES_SERVICE_HOST / KUBERNETES_SERVICE_PORT unset)"
                .into());
        };
        let authority = if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") };
        let ca = std::fs::read(dir.join("ca.crt"))
            .map_err(|e| format!("Failed to create Kubernetes client: {}/ca.crt: {e}", dir.display()))?;
        let tls = tls_config(&host, Some(&ca), false, None, None)?;
        Ok(Cluster { authority, tls: Some(tls), token: Token::File(dir.join("token")) })
    }

    /// From a kubeconfig's text (its current context); relative file names are relative to
    /// `dir`.
    pub fn from_kubeconfig(text: &str, dir: &Path) -> Result<Cluster, String> {
        let doc = crate::util::yaml::parse(text)?;
        let named = |list: &str, name: &str, field: &str| -> Option<Value> {
            doc[list].as_array()?.iter().find(|e| e["name"].as_str() == Some(name)).map(|e| e[field].clone())
        };
        let current = doc["current-context"].as_str().ok_or("no current-context")?;
        let ctx = named("contexts", current, "context").ok_or_else(|| format!("no context {current:?}"))?;
        let cluster_name = ctx["cluster"].as_str().ok_or("the context names no cluster")?;
        let cluster =
            named("clusters", cluster_name, "cluster").ok_or_else(|| format!("no cluster {cluster_name:?}"))?;
        let user = match ctx["user"].as_str() {
            Some(u) => named("users", u, "user").ok_or_else(|| format!("no user {u:?}"))?,
            None => Value::Null,
        };
        for unsupported in ["exec", "auth-provider", "username", "password"] {
            if !user[unsupported].is_null() {
                return Err(format!(
                    "user authentication by {unsupported:?} is not supported; use a token or a client certificate"
                ));
            }
        }
        let file = |v: &Value| v.as_str().map(|p| dir.join(p));
        let bytes = |data: &Value, path: &Value, what: &str| -> Result<Option<Vec<u8>>, String> {
            if let Some(d) = data.as_str() {
                return b64_decode(d).map(Some).map_err(|e| format!("{what}: {e}"));
            }
            match file(path) {
                Some(p) => std::fs::read(&p).map(Some).map_err(|e| format!("{what} {}: {e}", p.display())),
                None => Ok(None),
            }
        };
        let server = cluster["server"].as_str().ok_or("the cluster has no server")?;
        let (https, authority) = split_url(server)?;
        let token = match (user["token"].as_str(), file(&user["tokenFile"])) {
            (Some(t), _) => Token::Static(t.to_string()),
            (None, Some(p)) => Token::File(p),
            (None, None) => Token::None,
        };
        let tls = if https {
            let ca = bytes(
                &cluster["certificate-authority-data"],
                &cluster["certificate-authority"],
                "certificate-authority",
            )?;
            let cert = bytes(&user["client-certificate-data"], &user["client-certificate"], "client-certificate")?;
            let key = bytes(&user["client-key-data"], &user["client-key"], "client-key")?;
            let insecure = cluster["insecure-skip-tls-verify"].as_bool() == Some(true);
            let host = cluster["tls-server-name"].as_str().map_or_else(|| host_of(&authority), str::to_string);
            Some(tls_config(&host, ca.as_deref(), insecure, cert.as_deref(), key.as_deref())?)
        } else {
            None
        };
        Ok(Cluster { authority, tls, token })
    }
}

/// `(https, host:port)` of an `http(s)://host[:port][/]` URL.
fn split_url(url: &str) -> Result<(bool, String), String> {
    let (https, rest) = match (url.strip_prefix("https://"), url.strip_prefix("http://")) {
        (Some(r), _) => (true, r),
        (None, Some(r)) => (false, r),
        _ => return Err(format!("server {url:?}: not an http:// or https:// URL")),
    };
    let host = rest.trim_end_matches('/');
    if host.contains('/') {
        return Err(format!("server {url:?}: a path prefix is not supported"));
    }
    let has_port = host.rsplit_once(':').is_some_and(|(h, p)| !h.ends_with(':') && p.parse::<u16>().is_ok());
    let authority = if has_port { host.to_string() } else { format!("{host}:{}", if https { 443 } else { 80 }) };
    Ok((https, authority))
}

fn host_of(authority: &str) -> String {
    let host = authority.rsplit_once(':').map_or(authority, |(h, _)| h);
    host.trim_start_matches('[').trim_end_matches(']').to_string()
}

/// A TLS client configuration: the cluster's CA (else none: every server is refused),
/// optionally no verification at all, optionally a client certificate.
fn tls_config(
    host: &str,
    ca: Option<&[u8]>,
    insecure: bool,
    cert: Option<&[u8]>,
    key: Option<&[u8]>,
) -> Result<(Arc<ClientConfig>, ServerName<'static>), String> {
    let name = ServerName::try_from(host.to_string()).map_err(|e| format!("server name {host:?}: {e}"))?;
    let builder = ClientConfig::builder_with_provider(crate::tls::provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = if insecure {
        builder.dangerous().with_custom_certificate_verifier(crate::tls::plane::unverified())
    } else {
        let mut roots = RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(ca.unwrap_or_default()) {
            roots.add(c.map_err(|e| format!("certificate authority: {e}"))?).map_err(|e| e.to_string())?;
        }
        if roots.is_empty() {
            return Err("no certificate authority for an https:// server (certificate-authority[-data], or \
                        insecure-skip-tls-verify)"
                .into());
        }
        builder.with_root_certificates(roots)
    };
    let config = match (cert, key) {
        (Some(cert), Some(key)) => {
            let chain = CertificateDer::pem_slice_iter(cert)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("client-certificate: {e}"))?;
            let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| format!("client-key: {e}"))?;
            builder.with_client_auth_cert(chain, key).map_err(|e| format!("client certificate: {e}"))?
        }
        (None, None) => builder.with_no_client_auth(),
        _ => return Err("a client certificate needs its key and the key its certificate".into()),
    };
    Ok((Arc::new(config), name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
    }

    const KUBECONFIG: &str = "apiVersion: v1
kind: Config
current-context: stand-in
contexts:
- name: other
  context: {cluster: nowhere, user: nobody}
- name: stand-in
  context:
    cluster: local
    user: tester
clusters:
- name: local
  cluster:
    server: http://127.0.0.1:18700
users:
- name: tester
  user:
    token: abc
";

    #[test]
    fn a_kubeconfig_names_the_server_and_the_token() {
        let c = Cluster::from_kubeconfig(KUBECONFIG, Path::new("/")).unwrap();
        assert_eq!(c.authority, "127.0.0.1:18700");
        assert!(c.tls.is_none());
        assert_eq!(c.token.bearer().as_deref(), Some("Bearer abc"));
        let e = Cluster::from_kubeconfig(&KUBECONFIG.replace("token: abc", "exec: {command: aws}"), Path::new("/"))
            .unwrap_err();
        assert!(e.contains("\"exec\" is not supported"), "{e}");
        let e = Cluster::from_kubeconfig(&KUBECONFIG.replace("http://", "https://"), Path::new("/")).unwrap_err();
        assert!(e.contains("no certificate authority"), "{e}");
        let insecure = KUBECONFIG.replace("server: http://", "insecure-skip-tls-verify: true\n    server: https://");
        let c = Cluster::from_kubeconfig(&insecure, Path::new("/")).unwrap();
        assert_eq!((c.authority.as_str(), c.tls.is_some()), ("127.0.0.1:18700", true));
        assert_eq!(split_url("https://k8s.example").unwrap(), (true, "k8s.example:443".into()));
        assert!(split_url("https://k8s.example/prefix").is_err());
    }

    #[test]
    fn the_environment_picks_kubeconfig_then_the_cluster_and_names_the_pod() {
        let dir = std::env::temp_dir().join(format!("switchyard-kube-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("config");
        std::fs::write(&path, KUBECONFIG).unwrap();
        let p = path.to_str().unwrap();
        let c = Cluster::from_env(&env(&[("KUBECONFIG", p), ("KUBE_RS_DEBUG_OVERRIDE_URL", "http://127.0.0.1:1")]))
            .unwrap();
        assert_eq!(c.authority, "127.0.0.1:1");
        let e = Cluster::from_env(&env(&[])).unwrap_err();
        assert!(e.contains("not in a cluster"), "{e}");
        let e = Cluster::in_cluster(
            &env(&[("KUBERNETES_SERVICE_HOST", "10.0.0.1"), ("KUBERNETES_SERVICE_PORT", "443")]),
            &dir,
        )
        .unwrap_err();
        assert!(e.contains("ca.crt"), "{e}");
        let pod = PodInfo::read(&dir, &env(&[("POD_NAME", "w0"), ("POD_UID", "u")])).unwrap();
        assert_eq!(pod, PodInfo { name: "w0".into(), uid: "u".into(), namespace: "default".into() });
        std::fs::write(dir.join("pod_name"), "from-file\n").unwrap();
        assert_eq!(PodInfo::read(&dir, &env(&[("POD_NAME", "w0"), ("POD_UID", "u")])).unwrap().name, "from-file");
        let e = PodInfo::read(&dir, &env(&[("POD_NAME", "w0")])).unwrap_err();
        assert_eq!(e, "POD_UID not available from file or environment");
        assert_eq!(Mode::from_env(&env(&[])), Ok(Mode::Pod));
        assert!(Mode::from_env(&env(&[("DYN_KUBE_DISCOVERY_MODE", "node")]))
            .unwrap_err()
            .contains("'pod', 'container'"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
