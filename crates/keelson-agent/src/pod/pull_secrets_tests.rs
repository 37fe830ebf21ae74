use super::*;
use serde_json::json;

fn docker_config(name: &str, auths: serde_json::Value) -> Secret {
    let cfg = json!({"auths": auths}).to_string();
    serde_json::from_value(json!({"metadata": {"name": name}, "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": base64::engine::general_purpose::STANDARD.encode(cfg)}}))
    .unwrap()
}

fn users(v: &[RegistryAuth]) -> Vec<&str> {
    v.iter().map(|a| a.username.as_str()).collect()
}

#[test]
fn image_references_normalize_as_docker_does() {
    let cases = [
        ("busybox", ("docker.io", "library/busybox")),
        ("busybox:1.36", ("docker.io", "library/busybox")),
        ("team/app:2", ("docker.io", "team/app")),
        ("r.example.com/team/app:2", ("r.example.com", "team/app")),
        ("r.example.com:5000/app", ("r.example.com:5000", "app")),
        ("127.0.0.1:5000/private/app:1", ("127.0.0.1:5000", "private/app")),
        ("localhost/app@sha256:abcd", ("localhost", "app")),
        ("r.example.com:5000/app:1@sha256:abcd", ("r.example.com:5000", "app")),
    ];
    for (image, (host, repo)) in cases {
        assert_eq!(registry_and_repository(image), (host.to_string(), repo.to_string()), "{image}");
    }
}

#[test]
fn keys_match_by_host_glob_and_path_most_specific_first() {
    let secret = docker_config("regcred", json!({
        "r.example.com": {"username": "host"},
        "https://r.example.com/team": {"username": "team"},
        "*.example.com": {"username": "glob"},
        "other.example.org": {"username": "other"},
        "https://index.docker.io/v1/": {"username": "hub"},
        "r.example.com:5000": {"username": "port"},
    }));
    let s = std::slice::from_ref(&secret);
    assert_eq!(users(&credentials_for("r.example.com/team/app:1", s).unwrap()), ["team", "host", "glob"]);
    assert_eq!(users(&credentials_for("r.example.com/solo/app:1", s).unwrap()), ["host", "glob"]);
    assert_eq!(users(&credentials_for("r.example.com/teamx/app", s).unwrap()), ["host", "glob"], "a path matches whole segments");
    assert_eq!(users(&credentials_for("x.example.com/app", s).unwrap()), ["glob"]);
    assert_eq!(users(&credentials_for("a.b.example.com/app", s).unwrap()), Vec::<&str>::new(), "a glob spans one label");
    assert_eq!(users(&credentials_for("busybox", s).unwrap()), ["hub"]);
    assert_eq!(users(&credentials_for("r.example.com:5000/app", s).unwrap()), ["port"], "the port is part of the host");
    assert!(credentials_for("quay.io/app", s).unwrap().is_empty(), "no key: pulled anonymously");
}

#[test]
fn the_auth_field_gives_user_and_password_and_no_server_address_unless_the_entry_has_one() {
    let auth = base64::engine::general_purpose::STANDARD.encode("alice:s3cret:with-colon");
    let secret = docker_config("regcred", json!({"127.0.0.1:5000": {"auth": auth}}));
    let got = credentials_for("127.0.0.1:5000/private/app:1", &[secret]).unwrap();
    assert_eq!(got, [RegistryAuth { username: "alice".into(), password: "s3cret:with-colon".into(), ..Default::default() }]);
    let secret = docker_config("regcred", json!({"r.example.com": {"username": "u", "serveraddress": "https://r.example.com"}}));
    assert_eq!(credentials_for("r.example.com/app", &[secret]).unwrap()[0].server_address, "https://r.example.com");
}

#[test]
fn old_dockercfg_secrets_and_pod_order_among_equals() {
    let old: Secret = serde_json::from_value(json!({"metadata": {"name": "old"}, "type": "kubernetes.io/dockercfg",
        "stringData": {".dockercfg": json!({"r.example.com": {"username": "old", "password": "p"}}).to_string()}})).unwrap();
    let new = docker_config("new", json!({"r.example.com": {"username": "new"}}));
    assert_eq!(users(&credentials_for("r.example.com/app", &[old.clone(), new.clone()]).unwrap()), ["old", "new"]);
    assert_eq!(users(&credentials_for("r.example.com/app", &[new, old]).unwrap()), ["new", "old"]);
}

#[test]
fn secrets_that_are_not_docker_configs_are_refused_with_their_name() {
    let opaque: Secret = serde_json::from_value(json!({"metadata": {"name": "plain"}, "type": "Opaque", "stringData": {"a": "b"}})).unwrap();
    assert_eq!(credentials_for("busybox", &[opaque]), Err(PullSecretError::WrongType { secret: "plain".into(), type_: "Opaque".into() }));
    let empty: Secret = serde_json::from_value(json!({"metadata": {"name": "empty"}, "type": "kubernetes.io/dockerconfigjson"})).unwrap();
    assert_eq!(credentials_for("busybox", &[empty]), Err(PullSecretError::MissingKey { secret: "empty".into(), key: ".dockerconfigjson" }));
    let garbled: Secret = serde_json::from_value(json!({"metadata": {"name": "garbled"}, "type": "kubernetes.io/dockerconfigjson", "stringData": {".dockerconfigjson": "{"}})).unwrap();
    assert!(matches!(credentials_for("busybox", &[garbled]), Err(PullSecretError::Unreadable { .. })));
}
