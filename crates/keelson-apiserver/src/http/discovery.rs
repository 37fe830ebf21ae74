//! `/version` and API discovery (`/api`, `/apis`, per group-version resource lists).

use serde_json::{json, Value};

use crate::catalog::{group_versions, resources_in};


/// The Kubernetes version this server speaks. kubectl's dispatcher picks its own minor
/// version from this.
pub const KUBE_MINOR: &str = "33";

pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": KUBE_MINOR,
        "gitVersion": format!("v1.{KUBE_MINOR}.0+keelson-{}", env!("CARGO_PKG_VERSION")),
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "",
        "goVersion": "",
        "compiler": "rustc",
        "platform": "linux/amd64",
    })
}

/// Served group versions: the catalog's and the resource metrics API (served here as
/// metrics-server's aggregated API would be).
fn all_group_versions() -> Vec<(&'static str, &'static str)> {
    let mut gvs: Vec<_> = group_versions().into_iter().map(|gv| (gv.group, gv.version)).collect();
    gvs.push((METRICS.0, METRICS.1));
    gvs
}

const METRICS: (&str, &str) = (crate::resource_metrics::GROUP, crate::resource_metrics::VERSION);

/// The resource metrics API's resources: (plural, kind, namespaced).
const METRICS_RESOURCES: &[(&str, &str, bool)] = &[("nodes", "NodeMetrics", false), ("pods", "PodMetrics", true)];

fn group_json(group: &str) -> Value {
    let versions: Vec<Value> = all_group_versions()
        .into_iter()
        .filter(|(g, _)| *g == group)
        .map(|(g, v)| json!({"groupVersion": format!("{g}/{v}"), "version": v}))
        .collect();
    json!({"name": group, "versions": versions, "preferredVersion": versions[0]})
}

pub fn group_list(legacy: bool, advertise: &str) -> Value {
    if legacy {
        return json!({
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": advertise}],
        });
    }
    let mut groups: Vec<&str> = Vec::new();
    for (g, _) in all_group_versions() {
        if !g.is_empty() && !groups.contains(&g) {
            groups.push(g);
        }
    }
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups.iter().map(|g| group_json(g)).collect::<Vec<_>>()})
}

pub fn group(name: &str) -> Option<Value> {
    if name.is_empty() || !all_group_versions().iter().any(|(g, _)| *g == name) {
        return None;
    }
    let mut g = group_json(name);
    g["kind"] = json!("APIGroup");
    g["apiVersion"] = json!("v1");
    Some(g)
}

pub fn resource_list(group: &str, version: &str) -> Option<Value> {
    if (group, version) == METRICS {
        let resources: Vec<Value> = METRICS_RESOURCES
            .iter()
            .map(|(plural, kind, namespaced)| json!({"name": plural, "singularName": "", "namespaced": namespaced, "kind": kind, "verbs": ["get", "list"]}))
            .collect();
        return Some(json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": format!("{group}/{version}"), "resources": resources}));
    }
    let defs: Vec<_> = resources_in(group, version).collect();
    if defs.is_empty() {
        return None;
    }
    let mut resources = Vec::new();
    for d in defs {
        let mut r = json!({
            "name": d.plural,
            "singularName": d.singular(),
            "namespaced": d.namespaced,
            "kind": d.kind,
            "verbs": d.verbs,
        });
        if !d.short_names.is_empty() {
            r["shortNames"] = json!(d.short_names);
        }
        if !d.categories.is_empty() {
            r["categories"] = json!(d.categories);
        }
        resources.push(r);
        for s in d.subresources {
            let mut sr = json!({
                "name": format!("{}/{}", d.plural, s.name()),
                "singularName": "",
                "namespaced": d.namespaced,
                "kind": s.kind,
                "verbs": s.verbs,
            });
            if s.group != d.group || s.version != d.version {
                sr["group"] = json!(s.group);
                sr["version"] = json!(s.version);
            }
            resources.push(sr);
        }
    }
    let gv = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
    Some(json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}))
}

/// The aggregated discovery version a client asked for (`v2` or `v2beta1`), if any: the
/// first `as=APIGroupDiscoveryList` entry of its Accept header.
pub fn aggregated_version(accept: &str) -> Option<&'static str> {
    for part in accept.split(',') {
        let params: Vec<String> = part.split(';').map(|p| p.trim().to_ascii_lowercase()).collect();
        if params.first().map(String::as_str) != Some("application/json") {
            continue;
        }
        let has = |p: &str| params.iter().any(|x| x == p);
        if has("as=apigroupdiscoverylist") && has("g=apidiscovery.k8s.io") {
            if has("v=v2") {
                return Some("v2");
            }
            if has("v=v2beta1") {
                return Some("v2beta1");
            }
        }
    }
    None
}

/// The Content-Type of an aggregated discovery answer.
pub fn aggregated_content_type(version: &str) -> String {
    format!("application/json;g=apidiscovery.k8s.io;v={version};as=APIGroupDiscoveryList")
}

/// `APIGroupDiscoveryList` for `/api` (legacy) or `/apis`.
pub fn aggregated(legacy: bool, version: &str) -> Value {
    let mut groups: Vec<&str> = Vec::new();
    for (g, _) in all_group_versions() {
        if (g.is_empty() == legacy) && !groups.contains(&g) {
            groups.push(g);
        }
    }
    let items: Vec<Value> = groups
        .iter()
        .map(|g| {
            let versions: Vec<Value> = all_group_versions()
                .into_iter()
                .filter(|(gg, _)| gg == g)
                .map(|(_, v)| json!({"version": v, "freshness": "Current", "resources": aggregated_resources(g, v)}))
                .collect();
            json!({"metadata": {"name": g}, "versions": versions})
        })
        .collect();
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": format!("apidiscovery.k8s.io/{version}"), "metadata": {}, "items": items})
}

fn aggregated_resources(group: &str, version: &str) -> Vec<Value> {
    let mut out = Vec::new();
    if (group, version) == METRICS {
        for (plural, kind, namespaced) in METRICS_RESOURCES {
            out.push(json!({
                "resource": plural, "responseKind": {"group": group, "version": version, "kind": kind},
                "scope": if *namespaced { "Namespaced" } else { "Cluster" }, "singularResource": "", "verbs": ["get", "list"],
            }));
        }
    }
    for d in resources_in(group, version) {
        let mut r = json!({
            "resource": d.plural,
            "responseKind": {"group": d.group, "version": d.version, "kind": d.kind},
            "scope": if d.namespaced { "Namespaced" } else { "Cluster" },
            "singularResource": d.singular(),
            "verbs": d.verbs,
        });
        if !d.short_names.is_empty() {
            r["shortNames"] = json!(d.short_names);
        }
        if !d.categories.is_empty() {
            r["categories"] = json!(d.categories);
        }
        let subs: Vec<Value> = d
            .subresources
            .iter()
            .map(|s| json!({"subresource": s.name(), "responseKind": {"group": s.group, "version": s.version, "kind": s.kind}, "verbs": s.verbs}))
            .collect();
        if !subs.is_empty() {
            r["subresources"] = json!(subs);
        }
        out.push(r);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aggregated_discovery_is_negotiated() {
        let kubectl = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert_eq!(aggregated_version(kubectl), Some("v2"));
        assert_eq!(aggregated_version("application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"), Some("v2beta1"));
        assert_eq!(aggregated_version("application/json"), None);
        let apis = aggregated(false, "v2");
        let apps = apis["items"].as_array().unwrap().iter().find(|i| i["metadata"]["name"] == "apps").unwrap();
        let deploy = apps["versions"][0]["resources"].as_array().unwrap().iter().find(|r| r["resource"] == "deployments").unwrap();
        assert_eq!(deploy["scope"], "Namespaced");
        assert_eq!(deploy["subresources"].as_array().unwrap().iter().find(|s| s["subresource"] == "scale").unwrap()["responseKind"]["group"], "autoscaling");
        let core = aggregated(true, "v2");
        assert_eq!(core["items"].as_array().unwrap().len(), 1);
        assert_eq!(core["items"][0]["metadata"]["name"], "");
    }

    #[test]
    fn the_resource_metrics_api_is_discoverable() {
        let l = group_list(false, "x");
        let m = l["groups"].as_array().unwrap().iter().find(|g| g["name"] == "metrics.k8s.io").expect("metrics.k8s.io listed");
        assert_eq!(m["preferredVersion"]["groupVersion"], "metrics.k8s.io/v1beta1");
        let r = resource_list("metrics.k8s.io", "v1beta1").unwrap();
        let pods = r["resources"].as_array().unwrap().iter().find(|r| r["name"] == "pods").unwrap();
        assert_eq!((pods["kind"].as_str(), pods["namespaced"].as_bool()), (Some("PodMetrics"), Some(true)));
        let apis = aggregated(false, "v2");
        let m = apis["items"].as_array().unwrap().iter().find(|i| i["metadata"]["name"] == "metrics.k8s.io").unwrap();
        assert_eq!(m["versions"][0]["version"], "v1beta1");
        let nodes = m["versions"][0]["resources"].as_array().unwrap().iter().find(|r| r["resource"] == "nodes").unwrap();
        assert_eq!((nodes["responseKind"]["kind"].as_str(), nodes["scope"].as_str()), (Some("NodeMetrics"), Some("Cluster")));
        assert_eq!(group("metrics.k8s.io").unwrap()["kind"], "APIGroup");
    }

    #[test]
    fn core_list_has_pods_with_subresources() {
        let l = resource_list("", "v1").unwrap();
        let names: Vec<&str> = l["resources"].as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap()).collect();
        for n in ["pods", "pods/log", "pods/exec", "pods/attach", "pods/portforward", "pods/eviction", "pods/status", "services", "nodes", "namespaces/finalize"] {
            assert!(names.contains(&n), "{n} missing");
        }
        let apps = resource_list("apps", "v1").unwrap();
        let scale = apps["resources"].as_array().unwrap().iter().find(|r| r["name"] == "deployments/scale").unwrap();
        assert_eq!(scale["group"], "autoscaling");
        assert!(resource_list("apps", "v2").is_none());
    }

    #[test]
    fn group_list_names_every_group_once() {
        let l = group_list(false, "x");
        let names: Vec<&str> = l["groups"].as_array().unwrap().iter().map(|g| g["name"].as_str().unwrap()).collect();
        assert!(names.contains(&"apps") && names.contains(&"rbac.authorization.k8s.io"));
        let mut d = names.clone();
        d.dedup();
        assert_eq!(d.len(), names.len());
        assert!(group("").is_none());
        assert_eq!(group("batch").unwrap()["preferredVersion"]["groupVersion"], "batch/v1");
    }
}
