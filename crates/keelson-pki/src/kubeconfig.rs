//! kubeconfig files (YAML), written by hand: the format is small and stable.

use base64::Engine;

use crate::IssuedCert;

/// One context of a kubeconfig: a name and the API server URL it points at.
#[derive(Clone, Debug)]
pub struct KubeconfigContext {
    pub name: String,
    pub server: String,
}

/// A kubeconfig with one cluster+context per entry of `contexts` (all trusting `ca_pem`),
/// one user holding `client`'s certificate, and the first context current.
pub fn kubeconfig(contexts: &[KubeconfigContext], ca_pem: &str, user: &str, client: &IssuedCert) -> String {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s.as_bytes());
    let mut out = String::from("apiVersion: v1\nkind: Config\nclusters:\n");
    for c in contexts {
        out += &format!(
            "- name: {name}\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\n",
            name = quote(&c.name),
            server = quote(&c.server),
            ca = b64(ca_pem)
        );
    }
    out += "contexts:\n";
    for c in contexts {
        out += &format!(
            "- name: {name}\n  context:\n    cluster: {name}\n    user: {user}\n    namespace: default\n",
            name = quote(&c.name),
            user = quote(user)
        );
    }
    if let Some(first) = contexts.first() {
        out += &format!("current-context: {}\n", quote(&first.name));
    }
    out += &format!(
        "users:\n- name: {user}\n  user:\n    client-certificate-data: {cert}\n    client-key-data: {key}\n",
        user = quote(user),
        cert = b64(&client.cert_pem),
        key = b64(&client.key_pem)
    );
    out
}

/// Double-quotes a YAML scalar (names like `y` or `on` would otherwise parse as booleans).
fn quote(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}
