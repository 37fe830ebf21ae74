//! The text of Kubernetes 403 Forbidden responses, byte for byte as the
//! kube-apiserver writes them (so `kubectl` shows the familiar messages).

use crate::types::{Attributes, UserInfo};

/// The `message` of the Status a 403 carries when `user` may not do
/// `attrs`, without an authorizer reason. Examples:
///
/// - `pods is forbidden: User "alice" cannot list resource "pods" in API group "" in the namespace "default"`
/// - `pods "web" is forbidden: User "alice" cannot get resource "pods" in API group "" in the namespace "default"`
/// - `nodes is forbidden: User "x" cannot list resource "nodes" in API group "" at the cluster scope`
/// - `deployments.apps "d" is forbidden: User "x" cannot update resource "deployments/scale" in API group "apps" in the namespace "ns"`
/// - `forbidden: User "x" cannot get path "/metrics"`
///
/// The leading qualified resource is `resource[.group]` without the
/// subresource, followed by the quoted name when the request has one.
pub fn forbidden_message(user: &UserInfo, attrs: &Attributes) -> String {
    forbidden_message_with_reason(user, attrs, "")
}

/// As [`forbidden_message`], with `": " + reason` appended to the inner
/// error when `reason` is non-empty (Kubernetes appends the authorizers'
/// reasons, e.g. a [`crate::Decision::Deny`] reason, this way).
pub fn forbidden_message_with_reason(user: &UserInfo, attrs: &Attributes, reason: &str) -> String {
    let mut inner = inner_message(user, attrs);
    if !reason.is_empty() {
        inner.push_str(": ");
        inner.push_str(reason);
    }
    match attrs {
        Attributes::Resource(r) if !(r.api_group.is_empty() && r.resource.is_empty()) => {
            let qualified = if r.api_group.is_empty() {
                r.resource.clone()
            } else {
                format!("{}.{}", r.resource, r.api_group)
            };
            match r.name() {
                Some(name) => format!("{qualified} {} is forbidden: {inner}", go_quote(name)),
                None => format!("{qualified} is forbidden: {inner}"),
            }
        }
        _ => format!("forbidden: {inner}"),
    }
}

fn inner_message(user: &UserInfo, attrs: &Attributes) -> String {
    let who = go_quote(&user.name);
    match attrs {
        Attributes::NonResource(n) => {
            format!("User {who} cannot {} path {}", n.verb, go_quote(&n.path))
        }
        Attributes::Resource(r) => {
            let resource = go_quote(&r.combined_resource());
            let group = go_quote(&r.api_group);
            match r.namespace() {
                Some(ns) => format!(
                    "User {who} cannot {} resource {resource} in API group {group} in the namespace {}",
                    r.verb,
                    go_quote(ns)
                ),
                None => format!(
                    "User {who} cannot {} resource {resource} in API group {group} at the cluster scope",
                    r.verb
                ),
            }
        }
    }
}

/// Quotes `s` as Go's `%q` / `strconv.Quote` does: double quotes, with `"`
/// and `\` escaped, the usual C escapes for control characters, `\xNN` for
/// other ASCII control bytes and `\uNNNN` for other non-printable characters.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if c.is_control() => {
                let n = c as u32;
                if n <= 0xffff {
                    out.push_str(&format!("\\u{n:04x}"));
                } else {
                    out.push_str(&format!("\\U{n:08x}"));
                }
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
    use crate::types::ResourceAttributes;

    fn alice() -> UserInfo {
        UserInfo::new("alice")
    }

    #[test]
    fn list_in_namespace() {
        let a = ResourceAttributes::new("list", "", "pods").in_namespace("default");
        assert_eq!(
            forbidden_message(&alice(), &a.into()),
            r#"pods is forbidden: User "alice" cannot list resource "pods" in API group "" in the namespace "default""#
        );
    }

    #[test]
    fn get_named_object() {
        let a = ResourceAttributes::new("get", "", "pods")
            .in_namespace("default")
            .named("web");
        assert_eq!(
            forbidden_message(&alice(), &a.into()),
            r#"pods "web" is forbidden: User "alice" cannot get resource "pods" in API group "" in the namespace "default""#
        );
    }

    #[test]
    fn cluster_scope() {
        let a = Attributes::resource("list", "", "nodes");
        assert_eq!(
            forbidden_message(&UserInfo::new("x"), &a),
            r#"nodes is forbidden: User "x" cannot list resource "nodes" in API group "" at the cluster scope"#
        );
    }

    #[test]
    fn subresource_and_group() {
        let a = ResourceAttributes::new("create", "", "pods")
            .in_namespace("default")
            .named("web")
            .with_subresource("eviction");
        assert_eq!(
            forbidden_message(&alice(), &a.into()),
            r#"pods "web" is forbidden: User "alice" cannot create resource "pods/eviction" in API group "" in the namespace "default""#
        );
        let a = ResourceAttributes::new("list", "apps", "deployments");
        assert_eq!(
            forbidden_message(&alice(), &a.into()),
            r#"deployments.apps is forbidden: User "alice" cannot list resource "deployments" in API group "apps" at the cluster scope"#
        );
    }

    #[test]
    fn non_resource_path() {
        assert_eq!(
            forbidden_message(
                &UserInfo::new("x"),
                &Attributes::non_resource("get", "/metrics")
            ),
            r#"forbidden: User "x" cannot get path "/metrics""#
        );
    }

    #[test]
    fn reason_is_appended_to_inner_message() {
        let a = Attributes::non_resource("get", "/metrics");
        assert_eq!(
            forbidden_message_with_reason(&UserInfo::new("x"), &a, "RBAC: boom"),
            r#"forbidden: User "x" cannot get path "/metrics": RBAC: boom"#
        );
    }

    #[test]
    fn go_quote_escapes() {
        assert_eq!(go_quote("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(go_quote("\n\t\u{1}"), r#""\n\t\x01""#);
        assert_eq!(go_quote("ünï"), "\"ünï\"");
        assert_eq!(go_quote("\u{85}"), r#""\u0085""#);
    }
}
