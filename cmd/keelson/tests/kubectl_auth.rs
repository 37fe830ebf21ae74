//! Security through the real kubectl: `kubectl create token`, `kubectl auth can-i`,
//! `kubectl auth whoami`, impersonation with `--as`, and 403/401 as kubectl prints them.

mod kubectl_support;

use kubectl_support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_can_i_and_impersonation() {
    let _machine = shared_machine();
    let tc = TestCluster::start().await;
    let k = tc.kubectl();

    // The admin (client certificate in system:masters).
    let who = k.ok(&["auth", "whoami"]);
    assert!(who.contains("kubernetes-admin") && who.contains("system:masters"), "{who}");
    assert_eq!(k.ok(&["auth", "can-i", "create", "pods"]).trim(), "yes");

    // kubectl create token: a ServiceAccount token that authenticates, with no rights yet.
    k.ok(&["create", "serviceaccount", "build"]);
    let token = k.ok(&["create", "token", "build", "--duration=1h"]).trim().to_string();
    assert_eq!(token.split('.').count(), 3, "a JWT: {token}");
    let ca = tc.tmp.path().join("cluster").join("pki").join("ca.crt");
    let as_sa = |args: &[&str]| {
        let mut a = vec!["--kubeconfig=/dev/null".to_string(), format!("--server={}", tc.api_url(1)), format!("--certificate-authority={}", ca.display()), format!("--token={token}")];
        a.extend(args.iter().map(|s| s.to_string()));
        a
    };
    let args = as_sa(&["get", "pods", "-n", "default"]);
    let out = k.fails(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(
        out.stderr.contains("Error from server (Forbidden): pods is forbidden: User \"system:serviceaccount:default:build\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""),
        "{out}"
    );
    let args = as_sa(&["auth", "whoami"]);
    let who = k.ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(who.contains("system:serviceaccount:default:build") && who.contains("system:serviceaccounts:default"), "{who}");

    // A bogus token: 401 as kubectl prints it.
    let args = vec!["--kubeconfig=/dev/null".to_string(), format!("--server={}", tc.api_url(2)), format!("--certificate-authority={}", ca.display()), "--token=nope".to_string(), "get".into(), "pods".into()];
    let out = k.fails(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(out.stderr.contains("Unauthorized") || out.stderr.contains("must be logged in"), "{out}");

    // can-i and --as: nothing for alice until a RoleBinding grants view.
    let no = k.run(&["auth", "can-i", "list", "pods", "--as", "alice"]);
    assert_eq!((no.code, no.stdout.trim()), (1, "no"), "{no}");
    let out = k.fails(&["get", "pods", "--as", "alice"]);
    assert!(out.stderr.contains("User \"alice\" cannot list resource \"pods\""), "{out}");
    k.ok(&["create", "rolebinding", "alice-view", "--clusterrole=view", "--user=alice", "--namespace=default"]);
    assert_eq!(k.ok(&["auth", "can-i", "list", "pods", "--as", "alice"]).trim(), "yes");
    k.ok(&["get", "pods", "--as", "alice"]);
    let no = k.run(&["auth", "can-i", "get", "secrets", "--as", "alice"]);
    assert_eq!(no.stdout.trim(), "no", "view does not read secrets: {no}");
    let list = k.ok(&["auth", "can-i", "--list", "--as", "alice"]);
    assert!(list.contains("pods") && list.contains("[get list watch]"), "{list}");
    // Grants to a ServiceAccount work through kubectl too.
    k.ok(&["create", "rolebinding", "build-edit", "--clusterrole=edit", "--serviceaccount=default:build"]);
    let args = as_sa(&["create", "configmap", "from-sa", "--from-literal=a=b", "-n", "default"]);
    k.ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(k.ok(&["auth", "can-i", "create", "configmaps", "--as", "system:serviceaccount:default:build"]).trim(), "yes");
    tc.stop().await;
}
