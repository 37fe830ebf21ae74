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

/// Double-quotes a YAML scalar (names like `y` or `on` would otherwise parse as booleans),
/// escaping what a double-quoted scalar cannot hold as it is: `"` and `\`, control
/// characters (a raw line break would be folded into a space), YAML's other line breaks
/// (U+0085, U+2028, U+2029), the byte-order mark and the non-characters U+FFFE/U+FFFF.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}' | '\u{feff}' | '\u{fffe}' | '\u{ffff}') => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issued() -> IssuedCert {
        IssuedCert { cert_pem: "-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n".into(), key_pem: "-----BEGIN PRIVATE KEY-----\nAA==\n-----END PRIVATE KEY-----\n".into() }
    }

    /// What kube-rs (the CLI's, the agents' and the components' reader) makes of a
    /// kubeconfig written for `name`, `server` and `user`.
    fn read_back(name: &str, server: &str, user: &str) -> (String, Option<String>, String, Option<String>, String) {
        let yaml = kubeconfig(&[KubeconfigContext { name: name.into(), server: server.into() }], "CA", user, &issued());
        let kc = kube::config::Kubeconfig::from_yaml(&yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
        let ctx = kc.contexts[0].context.clone().expect("the context");
        (kc.clusters[0].name.clone(), kc.clusters[0].cluster.as_ref().and_then(|c| c.server.clone()), ctx.cluster, ctx.user, kc.auth_infos[0].name.clone())
    }

    #[test]
    fn names_round_trip_whatever_they_hold() {
        for name in ["keelson", "y", "on", "null", "~", "123", "a: b", "- x", "#c", "\"q\"", "back\\slash", "two\nlines", "tab\there", "nul\u{0}", "del\u{7f}", "nel\u{85}", "ls\u{2028}ps\u{2029}", "\u{feff}bom", "ünïcødé ✓", " lead", "trail ", ""] {
            let server = format!("https://{name}:6443");
            let user = format!("system:node:{name}");
            assert_eq!(read_back(name, &server, &user), (name.to_string(), Some(server.clone()), name.to_string(), Some(user.clone()), user.clone()), "{name:?}");
        }
    }

    #[test]
    fn contexts_and_credentials() {
        let contexts = [KubeconfigContext { name: "keelson-1".into(), server: "https://127.0.0.1:1".into() }, KubeconfigContext { name: "keelson-2".into(), server: "https://127.0.0.1:2".into() }];
        let kc = kube::config::Kubeconfig::from_yaml(&kubeconfig(&contexts, "CA", "admin", &issued())).unwrap();
        assert_eq!(kc.current_context.as_deref(), Some("keelson-1"));
        assert_eq!(kc.contexts.len(), 2);
        let auth = kc.auth_infos[0].auth_info.as_ref().expect("credentials");
        use base64::Engine;
        let data = auth.client_certificate_data.as_deref().expect("certificate data");
        assert_eq!(base64::engine::general_purpose::STANDARD.decode(data).unwrap(), issued().cert_pem.as_bytes());
    }

    use proptest::prelude::{any, Strategy};

    /// Strings of any characters, control characters and line breaks included (the default
    /// `String` strategy draws printable ones only).
    fn any_text() -> impl Strategy<Value = String> {
        proptest::collection::vec(any::<char>(), 0..24).prop_map(String::from_iter)
    }

    proptest::proptest! {
        /// Any name, server and user, however odd, reads back as written.
        #[test]
        fn any_text_round_trips(name in any_text(), server in any_text(), user in any_text()) {
            proptest::prop_assert_eq!(read_back(&name, &server, &user), (name.clone(), Some(server.clone()), name.clone(), Some(user.clone()), user.clone()));
        }
    }
}
