//! The `paths` section of a group version's OpenAPI v3 document.
//!
//! What clients read from it:
//! - `kubectl explain` finds a resource's kind through the
//!   `x-kubernetes-group-version-kind` of the operations on
//!   `.../<plural>`, `.../<plural>/{name}` (namespaced or not).
//! - kubectl's query-parameter verifier looks for a `fieldValidation` (and
//!   `dryRun`) query parameter on the kind's `patch` operation before it sends
//!   `fieldValidation=Strict`.
//! - `kubectl apply` computes strategic merge patches from the OpenAPI v3
//!   schema only when the kind's `patch` operation accepts
//!   `application/strategic-merge-patch+json`. The k8s-openapi schemas carry
//!   no `x-kubernetes-patch-strategy`/`-merge-key` extensions, so patches built
//!   from them would replace lists such as `containers` wholesale. That media
//!   type is therefore left out of [`PATCH_CONTENT_TYPES`], which makes kubectl
//!   fall back to its compiled-in Go types, whose merge keys are correct.

use serde_json::{json, Map, Value};

use crate::catalog::{resources_in, GroupVersion, ResourceDef, Subresource, SubresourceDef};
use crate::schemas::{list_schema_name, schema_ref};
use crate::types::find_type;

/// Request media types advertised for `patch` operations (see module docs).
pub const PATCH_CONTENT_TYPES: &[&str] = &[
    "application/apply-patch+yaml",
    "application/json-patch+json",
    "application/merge-patch+json",
];

const STATUS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Status";
const DELETE_OPTIONS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions";
const PATCH: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Patch";

/// Naming shared by all operations of one group version.
struct Naming {
    /// `/api/v1` or `/apis/apps/v1`.
    prefix: String,
    /// `CoreV1`, `AppsV1`, `RbacAuthorizationV1`: the operationId infix.
    op_infix: String,
    /// `core_v1`, `apps_v1`, `rbacAuthorization_v1`.
    tag: String,
}

fn upper_first(word: &str) -> String {
    let mut chars = word.chars();
    match chars.next() {
        Some(first) => first.to_ascii_uppercase().to_string() + chars.as_str(),
        None => String::new(),
    }
}

impl Naming {
    fn new(gv: GroupVersion) -> Naming {
        let short = if gv.group.is_empty() {
            "core"
        } else {
            gv.group.strip_suffix(".k8s.io").unwrap_or(gv.group)
        };
        let mut words = short.split('.');
        let mut camel = words.next().unwrap_or_default().to_owned();
        for word in words {
            camel.push_str(&upper_first(word));
        }
        Naming {
            prefix: format!("/{}", gv.path()),
            op_infix: format!("{}{}", upper_first(&camel), upper_first(gv.version)),
            tag: format!("{camel}_{}", gv.version),
        }
    }
}

fn gvk_of(group: &str, version: &str, kind: &str) -> Value {
    json!({ "group": group, "kind": kind, "version": version })
}

fn kind_schema(group: &str, version: &str, kind: &str) -> Option<String> {
    find_type(group, version, kind).map(|t| (t.schema_name)().into_owned())
}

fn query(name: &str, ty: &str, description: &str) -> Value {
    json!({ "name": name, "in": "query", "description": description, "schema": { "type": ty } })
}

fn path_param(name: &str, description: String) -> Value {
    json!({
        "name": name, "in": "path", "required": true, "description": description,
        "schema": { "type": "string" },
    })
}

fn pretty() -> Value {
    query(
        "pretty",
        "string",
        "If 'true', the output is pretty printed.",
    )
}

fn dry_run() -> Value {
    query(
        "dryRun",
        "string",
        "When present, modifications are not persisted. The only valid value is All: every dry-run stage is processed.",
    )
}

fn field_manager() -> Value {
    query(
        "fieldManager",
        "string",
        "Name of the actor or entity making these changes; at most 128 printable characters. Required for apply patches.",
    )
}

fn field_validation() -> Value {
    query(
        "fieldValidation",
        "string",
        "How to handle unknown or duplicate fields in the request body: Ignore drops them silently, Warn drops them and returns a warning header per field, Strict fails the request.",
    )
}

fn write_params() -> Vec<Value> {
    vec![dry_run(), field_manager(), field_validation()]
}

fn list_params() -> Vec<Value> {
    vec![
        query("allowWatchBookmarks", "boolean", "Request BOOKMARK watch events; servers may ignore this."),
        query("continue", "string", "Continue token from a previous paginated list response."),
        query("fieldSelector", "string", "Restrict the returned objects by their fields."),
        query("labelSelector", "string", "Restrict the returned objects by their labels."),
        query("limit", "integer", "Maximum number of objects to return; a continue token is returned if there are more."),
        query("resourceVersion", "string", "Constrain which resource version the list or watch is served from."),
        query("resourceVersionMatch", "string", "How resourceVersion is applied: Exact or NotOlderThan."),
        query("sendInitialEvents", "boolean", "With watch=true, start the watch with synthetic events for the current state."),
        query("timeoutSeconds", "integer", "Timeout for the list or watch call."),
        query("watch", "boolean", "Watch for changes and return them as a stream of add, update and remove notifications."),
    ]
}

fn delete_params() -> Vec<Value> {
    vec![
        dry_run(),
        query(
            "gracePeriodSeconds",
            "integer",
            "Seconds before the object is deleted; zero means immediately.",
        ),
        query(
            "orphanDependents",
            "boolean",
            "Deprecated: use propagationPolicy. Orphan the dependents if true.",
        ),
        query(
            "propagationPolicy",
            "string",
            "Garbage collection policy: Orphan, Background or Foreground.",
        ),
    ]
}

fn json_content(schema_name: &str) -> Value {
    json!({ "application/json": { "schema": schema_ref(schema_name) } })
}

fn responses(codes: &[(&str, &str)], schema_name: &str) -> Value {
    let mut out = Map::new();
    for (code, description) in codes {
        out.insert(
            (*code).to_owned(),
            json!({ "description": description, "content": json_content(schema_name) }),
        );
    }
    out.insert("401".into(), json!({ "description": "Unauthorized" }));
    Value::Object(out)
}

const OK: &[(&str, &str)] = &[("200", "OK")];
const CREATED: &[(&str, &str)] = &[("200", "OK"), ("201", "Created"), ("202", "Accepted")];
const REPLACED: &[(&str, &str)] = &[("200", "OK"), ("201", "Created")];
const DELETED: &[(&str, &str)] = &[("200", "OK"), ("202", "Accepted")];

/// One operation of a path.
struct Op<'a> {
    naming: &'a Naming,
    gvk: Value,
    action: &'static str,
    operation_id: String,
    description: String,
    params: Vec<Value>,
    body: Option<Value>,
    responses: Value,
}

impl Op<'_> {
    fn into_value(self) -> Value {
        let mut op = json!({
            "tags": [self.naming.tag],
            "description": self.description,
            "operationId": self.operation_id,
            "responses": self.responses,
            "x-kubernetes-action": self.action,
            "x-kubernetes-group-version-kind": self.gvk,
        });
        if !self.params.is_empty() {
            op["parameters"] = Value::Array(self.params);
        }
        if let Some(body) = self.body {
            op["requestBody"] = body;
        }
        op
    }
}

fn object_body(schema_name: &str) -> Value {
    json!({ "content": { "*/*": { "schema": schema_ref(schema_name) } }, "required": true })
}

fn patch_body() -> Value {
    let mut content = Map::new();
    for media_type in PATCH_CONTENT_TYPES {
        content.insert(
            (*media_type).to_owned(),
            json!({ "schema": schema_ref(PATCH) }),
        );
    }
    json!({ "content": content, "required": true })
}

fn delete_body() -> Value {
    json!({ "content": { "*/*": { "schema": schema_ref(DELETE_OPTIONS) } } })
}

/// Inserts a path item unless it has no operations.
fn insert_path(
    paths: &mut Map<String, Value>,
    path: String,
    params: Vec<Value>,
    ops: Vec<(&str, Value)>,
) {
    if ops.is_empty() {
        return;
    }
    let mut item = Map::new();
    for (method, op) in ops {
        item.insert(method.to_owned(), op);
    }
    item.insert("parameters".into(), Value::Array(params));
    paths.insert(path, Value::Object(item));
}

/// The paths of every resource in `gv`.
pub(crate) fn group_version_paths(gv: GroupVersion) -> Map<String, Value> {
    let naming = Naming::new(gv);
    let mut paths = Map::new();
    for info in resources_in(gv.group, gv.version) {
        resource_paths(&naming, info, &mut paths);
    }
    paths
}

fn resource_paths(naming: &Naming, info: &ResourceDef, paths: &mut Map<String, Value>) {
    let Some(schema) = kind_schema(info.group, info.version, info.kind) else {
        return;
    };
    let kind = info.kind;
    let scope = if info.namespaced { "Namespaced" } else { "" };
    let infix = &naming.op_infix;
    let base = if info.namespaced {
        format!("{}/namespaces/{{namespace}}/{}", naming.prefix, info.plural)
    } else {
        format!("{}/{}", naming.prefix, info.plural)
    };
    let mut scope_params = Vec::new();
    if info.namespaced {
        scope_params.push(path_param(
            "namespace",
            "object name and auth scope, such as for teams and projects".into(),
        ));
    }
    scope_params.push(pretty());
    let mut item_params = vec![path_param("name", format!("name of the {kind}"))];
    item_params.extend(scope_params.iter().cloned());

    let op = |action, verb: &str, suffix: &str, description: String| Op {
        naming,
        gvk: gvk_of(info.group, info.version, kind),
        action,
        operation_id: format!("{verb}{infix}{suffix}{scope}{kind}"),
        description,
        params: Vec::new(),
        body: None,
        responses: Value::Null,
    };
    let list_schema = info.list_kind.map(|lk| list_schema_name(&schema, lk));

    // Collection: list, create, deletecollection.
    let mut ops = Vec::new();
    if let (true, Some(list_schema)) = (info.supports("list"), &list_schema) {
        let mut o = op(
            "list",
            "list",
            "",
            format!("list or watch objects of kind {kind}"),
        );
        o.params = list_params();
        o.responses = responses(OK, list_schema);
        ops.push(("get", o.into_value()));
    }
    if info.supports("create") {
        let mut o = op("post", "create", "", format!("create a {kind}"));
        o.params = write_params();
        o.body = Some(object_body(&schema));
        o.responses = responses(CREATED, &schema);
        ops.push(("post", o.into_value()));
    }
    if info.supports("deletecollection") {
        let mut o = op(
            "deletecollection",
            "delete",
            "Collection",
            format!("delete collection of {kind}"),
        );
        o.params = delete_params();
        o.params.extend(list_params());
        o.body = Some(delete_body());
        o.responses = responses(OK, STATUS);
        ops.push(("delete", o.into_value()));
    }
    insert_path(paths, base.clone(), scope_params.clone(), ops);

    // Item: read, replace, patch, delete.
    let mut ops = Vec::new();
    if info.supports("get") {
        let mut o = op("get", "read", "", format!("read the specified {kind}"));
        o.responses = responses(OK, &schema);
        ops.push(("get", o.into_value()));
    }
    if info.supports("update") {
        let mut o = op(
            "put",
            "replace",
            "",
            format!("replace the specified {kind}"),
        );
        o.params = write_params();
        o.body = Some(object_body(&schema));
        o.responses = responses(REPLACED, &schema);
        ops.push(("put", o.into_value()));
    }
    if info.supports("patch") {
        ops.push((
            "patch",
            patch_op(
                op(
                    "patch",
                    "patch",
                    "",
                    format!("partially update the specified {kind}"),
                ),
                &schema,
            ),
        ));
    }
    if info.supports("delete") {
        let mut o = op("delete", "delete", "", format!("delete a {kind}"));
        o.params = delete_params();
        o.body = Some(delete_body());
        o.responses = responses(DELETED, &schema);
        ops.push(("delete", o.into_value()));
    }
    let item_path = format!("{base}/{{name}}");
    insert_path(paths, item_path.clone(), item_params.clone(), ops);

    // Cluster-wide list of a namespaced resource.
    if let (true, true, Some(list_schema)) = (info.namespaced, info.supports("list"), &list_schema)
    {
        let mut o = op(
            "list",
            "list",
            "",
            format!("list or watch objects of kind {kind}"),
        );
        o.operation_id = format!("list{infix}{kind}ForAllNamespaces");
        o.params = list_params();
        o.responses = responses(OK, list_schema);
        let path = format!("{}/{}", naming.prefix, info.plural);
        insert_path(paths, path, vec![pretty()], vec![("get", o.into_value())]);
    }

    for sub in info.subresources.iter().filter(|s| described(s.which)) {
        subresource_path(naming, info, sub, &item_path, &item_params, paths);
    }
}

fn patch_op(mut o: Op<'_>, schema: &str) -> Value {
    o.params = write_params();
    o.params.push(query(
        "force",
        "boolean",
        "Force apply requests: re-acquire fields owned by other managers. Must be unset for non-apply patches.",
    ));
    o.body = Some(patch_body());
    o.responses = responses(REPLACED, schema);
    o.into_value()
}

/// Subresources whose bodies are the objects their kind names. The streaming ones (log,
/// exec, attach, portforward), `finalize` and `token` are not described here.
fn described(sub: Subresource) -> bool {
    matches!(sub, Subresource::Status | Subresource::Scale | Subresource::Eviction | Subresource::Binding)
}

fn subresource_path(
    naming: &Naming,
    parent: &ResourceDef,
    sub: &SubresourceDef,
    item_path: &str,
    item_params: &[Value],
    paths: &mut Map<String, Value>,
) {
    let Some(schema) = kind_schema(sub.group, sub.version, sub.kind) else {
        return;
    };
    let scope = if parent.namespaced { "Namespaced" } else { "" };
    let infix = &naming.op_infix;
    let suffix = upper_first(sub.name());
    let what = format!("{} of the specified {}", sub.name(), parent.kind);
    let op = |action, verb: &str, description: String| Op {
        naming,
        gvk: gvk_of(sub.group, sub.version, sub.kind),
        action,
        operation_id: format!("{verb}{infix}{scope}{}{suffix}", parent.kind),
        description,
        params: Vec::new(),
        body: None,
        responses: Value::Null,
    };
    let supports = |verb: &str| sub.verbs.contains(&verb);
    let mut ops = Vec::new();
    if supports("get") {
        let mut o = op("get", "read", format!("read {what}"));
        o.responses = responses(OK, &schema);
        ops.push(("get", o.into_value()));
    }
    if supports("create") {
        let mut o = op("post", "create", format!("create {what}"));
        o.params = write_params();
        o.body = Some(object_body(&schema));
        o.responses = responses(CREATED, &schema);
        ops.push(("post", o.into_value()));
    }
    if supports("update") {
        let mut o = op("put", "replace", format!("replace {what}"));
        o.params = write_params();
        o.body = Some(object_body(&schema));
        o.responses = responses(REPLACED, &schema);
        ops.push(("put", o.into_value()));
    }
    if supports("patch") {
        ops.push((
            "patch",
            patch_op(
                op("patch", "patch", format!("partially update {what}")),
                &schema,
            ),
        ));
    }
    let path = format!("{item_path}/{}", sub.name());
    insert_path(paths, path, item_params.to_vec(), ops);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn core() -> Map<String, Value> {
        group_version_paths(GroupVersion {
            group: "",
            version: "v1",
        })
    }

    #[test]
    fn naming() {
        let n = Naming::new(GroupVersion {
            group: "rbac.authorization.k8s.io",
            version: "v1",
        });
        assert_eq!(
            (n.prefix.as_str(), n.op_infix.as_str(), n.tag.as_str()),
            (
                "/apis/rbac.authorization.k8s.io/v1",
                "RbacAuthorizationV1",
                "rbacAuthorization_v1"
            )
        );
        let n = Naming::new(GroupVersion {
            group: "",
            version: "v1",
        });
        assert_eq!(
            (n.prefix.as_str(), n.op_infix.as_str(), n.tag.as_str()),
            ("/api/v1", "CoreV1", "core_v1")
        );
    }

    #[test]
    fn namespaced_collection_item_and_all_namespaces_paths() {
        let paths = core();
        let coll = &paths["/api/v1/namespaces/{namespace}/pods"];
        assert_eq!(coll["get"]["operationId"], "listCoreV1NamespacedPod");
        assert_eq!(coll["get"]["x-kubernetes-action"], "list");
        assert_eq!(
            coll["get"]["x-kubernetes-group-version-kind"],
            gvk_of("", "v1", "Pod")
        );
        assert_eq!(
            coll["get"]["responses"]["200"]["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/io.k8s.api.core.v1.PodList"
        );
        assert_eq!(
            coll["post"]["requestBody"]["content"]["*/*"]["schema"]["$ref"],
            "#/components/schemas/io.k8s.api.core.v1.Pod"
        );
        assert_eq!(coll["delete"]["x-kubernetes-action"], "deletecollection");
        let item = &paths["/api/v1/namespaces/{namespace}/pods/{name}"];
        for method in ["get", "put", "patch", "delete"] {
            assert_eq!(
                item[method]["x-kubernetes-group-version-kind"]["kind"], "Pod",
                "{method}"
            );
        }
        assert_eq!(
            paths["/api/v1/pods"]["get"]["operationId"],
            "listCoreV1PodForAllNamespaces"
        );
        assert!(paths.contains_key("/api/v1/nodes/{name}"));
        assert!(!paths.contains_key("/api/v1/namespaces/{namespace}/nodes"));
    }

    #[test]
    fn write_operations_advertise_field_validation() {
        let paths = core();
        let item = &paths["/api/v1/namespaces/{namespace}/configmaps/{name}"];
        let coll = &paths["/api/v1/namespaces/{namespace}/configmaps"];
        for op in [&item["put"], &item["patch"], &coll["post"]] {
            let params = op["parameters"].as_array().unwrap();
            assert!(params
                .iter()
                .any(|p| p["name"] == "fieldValidation" && p["in"] == "query"));
            assert!(params
                .iter()
                .any(|p| p["name"] == "dryRun" && p["in"] == "query"));
        }
        let patch_types: Vec<&String> = item["patch"]["requestBody"]["content"]
            .as_object()
            .unwrap()
            .keys()
            .collect();
        assert!(patch_types
            .iter()
            .any(|t| *t == "application/merge-patch+json"));
        assert!(!patch_types
            .iter()
            .any(|t| *t == "application/strategic-merge-patch+json"));
    }

    #[test]
    fn subresources_and_create_only_resources() {
        let paths = core();
        let eviction = &paths["/api/v1/namespaces/{namespace}/pods/{name}/eviction"]["post"];
        assert_eq!(
            eviction["x-kubernetes-group-version-kind"],
            gvk_of("policy", "v1", "Eviction")
        );
        assert_eq!(eviction["operationId"], "createCoreV1NamespacedPodEviction");
        let status = &paths["/api/v1/namespaces/{namespace}/pods/{name}/status"];
        assert!(
            status["get"].is_object() && status["put"].is_object() && status["patch"].is_object()
        );
        assert!(status.get("post").is_none());
        let bindings = &paths["/api/v1/namespaces/{namespace}/bindings"];
        assert!(bindings["post"].is_object() && bindings.get("get").is_none());
        assert!(!paths.contains_key("/api/v1/namespaces/{namespace}/bindings/{name}"));

        let apps = group_version_paths(GroupVersion {
            group: "apps",
            version: "v1",
        });
        let scale = &apps["/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale"];
        assert_eq!(
            scale["patch"]["x-kubernetes-group-version-kind"],
            gvk_of("autoscaling", "v1", "Scale")
        );
        assert_eq!(
            scale["get"]["operationId"],
            "readAppsV1NamespacedDeploymentScale"
        );
    }

    #[test]
    fn path_parameters_match_the_template() {
        for (path, item) in core() {
            let names: Vec<&str> = item["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|p| p["in"] == "path")
                .map(|p| p["name"].as_str().unwrap())
                .collect();
            assert_eq!(names.contains(&"name"), path.contains("{name}"), "{path}");
            assert_eq!(
                names.contains(&"namespace"),
                path.contains("{namespace}"),
                "{path}"
            );
        }
    }
}
