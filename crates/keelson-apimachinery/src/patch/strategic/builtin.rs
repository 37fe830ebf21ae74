//! Patch strategies of the Kubernetes built-in kinds.
//!
//! Transcribed from the `patchStrategy` / `patchMergeKey` tags of the
//! Kubernetes API types (the same information the OpenAPI document exposes as
//! `x-kubernetes-patch-strategy` / `x-kubernetes-patch-merge-key`). A list
//! without a patch strategy there is replaced, and so it is here; some such
//! lists are still listed as atomic below, to document that the omission is
//! deliberate (`tolerations`, `spec.taints`, `envFrom`, …).

use super::schema::{ListStrategy, PatchSchema};

/// One row of a table: a path relative to some struct, and its strategy.
#[derive(Clone, Copy)]
enum Rule {
    /// Objects merged by this key.
    Key(&'static str),
    /// Primitive set merged by union.
    Set,
    /// Replaced wholesale.
    Atomic,
}

use Rule::{Atomic, Key, Set};

/// `ObjectMeta`, relative to `metadata`.
const OBJECT_META: &[(&str, Rule)] = &[
    ("finalizers", Set),
    ("ownerReferences", Key("uid")),
    ("managedFields", Atomic),
];

/// `Container` (and `EphemeralContainer`), relative to the container.
const CONTAINER: &[(&str, Rule)] = &[
    ("ports", Key("containerPort")),
    ("env", Key("name")),
    ("volumeMounts", Key("mountPath")),
    ("volumeDevices", Key("devicePath")),
    ("envFrom", Atomic),
    ("resizePolicy", Atomic),
    ("command", Atomic),
    ("args", Atomic),
];

/// The container lists of `PodSpec`.
const POD_CONTAINER_LISTS: &[&str] = &["containers", "initContainers", "ephemeralContainers"];

/// `PodSpec`, relative to the pod spec (container lists handled separately).
const POD_SPEC: &[(&str, Rule)] = &[
    ("volumes", Key("name")),
    ("imagePullSecrets", Key("name")),
    ("hostAliases", Key("ip")),
    ("topologySpreadConstraints", Key("topologyKey")),
    ("resourceClaims", Key("name")),
    ("schedulingGates", Key("name")),
    ("tolerations", Atomic),
    ("readinessGates", Atomic),
];

/// `PodStatus`, relative to `status`.
const POD_STATUS: &[(&str, Rule)] = &[
    ("conditions", Key("type")),
    ("podIPs", Key("ip")),
    ("hostIPs", Key("ip")),
    ("resourceClaimStatuses", Key("name")),
];

/// `Node`, from the object root.
const NODE: &[(&str, Rule)] = &[
    ("spec.podCIDRs", Set),
    ("spec.taints", Atomic),
    ("status.conditions", Key("type")),
    ("status.addresses", Key("type")),
];

/// `Service`, from the object root.
const SERVICE: &[(&str, Rule)] = &[
    ("spec.ports", Key("port")),
    ("status.conditions", Key("type")),
];

/// Kinds whose only merged list besides metadata is `status.conditions`.
const STATUS_CONDITIONS: &[(&str, Rule)] = &[("status.conditions", Key("type"))];

/// `Endpoints`, from the object root.
const ENDPOINTS: &[(&str, Rule)] = &[("subsets", Atomic)];

/// `EndpointSlice`, from the object root.
const ENDPOINT_SLICE: &[(&str, Rule)] = &[("endpoints", Atomic), ("ports", Atomic)];

/// `Ingress`, from the object root.
const INGRESS: &[(&str, Rule)] = &[("spec.rules", Atomic), ("spec.tls", Atomic)];

/// `CronJob`, from the object root (besides its pod template).
const CRON_JOB: &[(&str, Rule)] = &[("status.active", Atomic)];

/// `StatefulSet`, from the object root (besides its pod template).
const STATEFUL_SET: &[(&str, Rule)] = &[
    ("spec.volumeClaimTemplates", Atomic),
    ("status.conditions", Key("type")),
];

/// Where a kind keeps its pod spec, and its other tables.
struct KindEntry {
    /// API groups the kind is served from (`""` is the core group).
    groups: &'static [&'static str],
    kind: &'static str,
    /// Path of a `PodTemplateSpec` (`…template`), of a `PodSpec` (Pod), or none.
    pod: PodLocation,
    /// Further rows from the object root.
    rows: &'static [&'static [(&'static str, Rule)]],
}

enum PodLocation {
    None,
    /// The object is a Pod: spec at `spec`, status at `status`.
    Pod,
    /// A `PodTemplateSpec` at this path.
    Template(&'static str),
}

const APPS: &[&str] = &["apps", "extensions"];

const KINDS: &[KindEntry] = &[
    KindEntry {
        groups: &[""],
        kind: "Pod",
        pod: PodLocation::Pod,
        rows: &[],
    },
    KindEntry {
        groups: &[""],
        kind: "PodTemplate",
        pod: PodLocation::Template("template"),
        rows: &[],
    },
    KindEntry {
        groups: &[""],
        kind: "ReplicationController",
        pod: PodLocation::Template("spec.template"),
        rows: &[STATUS_CONDITIONS],
    },
    KindEntry {
        groups: APPS,
        kind: "Deployment",
        pod: PodLocation::Template("spec.template"),
        rows: &[STATUS_CONDITIONS],
    },
    KindEntry {
        groups: APPS,
        kind: "ReplicaSet",
        pod: PodLocation::Template("spec.template"),
        rows: &[STATUS_CONDITIONS],
    },
    KindEntry {
        groups: APPS,
        kind: "DaemonSet",
        pod: PodLocation::Template("spec.template"),
        rows: &[STATUS_CONDITIONS],
    },
    KindEntry {
        groups: &["apps"],
        kind: "StatefulSet",
        pod: PodLocation::Template("spec.template"),
        rows: &[STATEFUL_SET],
    },
    KindEntry {
        groups: &["batch"],
        kind: "Job",
        pod: PodLocation::Template("spec.template"),
        rows: &[STATUS_CONDITIONS],
    },
    KindEntry {
        groups: &["batch"],
        kind: "CronJob",
        pod: PodLocation::Template("spec.jobTemplate.spec.template"),
        rows: &[CRON_JOB],
    },
    KindEntry {
        groups: &[""],
        kind: "Node",
        pod: PodLocation::None,
        rows: &[NODE],
    },
    KindEntry {
        groups: &[""],
        kind: "Service",
        pod: PodLocation::None,
        rows: &[SERVICE],
    },
    KindEntry {
        groups: &[""],
        kind: "Namespace",
        pod: PodLocation::None,
        rows: &[STATUS_CONDITIONS],
    },
    KindEntry {
        groups: &[""],
        kind: "PersistentVolumeClaim",
        pod: PodLocation::None,
        rows: &[STATUS_CONDITIONS],
    },
    KindEntry {
        groups: &[""],
        kind: "Endpoints",
        pod: PodLocation::None,
        rows: &[ENDPOINTS],
    },
    KindEntry {
        groups: &[""],
        kind: "ConfigMap",
        pod: PodLocation::None,
        rows: &[],
    },
    KindEntry {
        groups: &[""],
        kind: "Secret",
        pod: PodLocation::None,
        rows: &[],
    },
    KindEntry {
        groups: &[""],
        kind: "ServiceAccount",
        pod: PodLocation::None,
        rows: &[],
    },
    KindEntry {
        groups: &[""],
        kind: "Event",
        pod: PodLocation::None,
        rows: &[],
    },
    KindEntry {
        groups: &["discovery.k8s.io"],
        kind: "EndpointSlice",
        pod: PodLocation::None,
        rows: &[ENDPOINT_SLICE],
    },
    KindEntry {
        groups: &["networking.k8s.io", "extensions"],
        kind: "Ingress",
        pod: PodLocation::None,
        rows: &[INGRESS],
    },
    KindEntry {
        groups: &["autoscaling"],
        kind: "HorizontalPodAutoscaler",
        pod: PodLocation::None,
        rows: &[STATUS_CONDITIONS],
    },
    KindEntry {
        groups: &["policy"],
        kind: "PodDisruptionBudget",
        pod: PodLocation::None,
        rows: &[STATUS_CONDITIONS],
    },
];

/// The API group of an `apiVersion` (`"apps/v1"` → `"apps"`, `"v1"` → `""`).
fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

fn join(prefix: &str, rel: &str) -> String {
    if prefix.is_empty() {
        rel.to_owned()
    } else {
        format!("{prefix}.{rel}")
    }
}

fn add_rows(schema: &mut PatchSchema, prefix: &str, rows: &[(&str, Rule)]) {
    for (rel, rule) in rows {
        let strategy = match rule {
            Key(k) => ListStrategy::MergeByKey((*k).to_owned()),
            Set => ListStrategy::MergePrimitives,
            Atomic => ListStrategy::Replace,
        };
        schema.insert(join(prefix, rel), strategy);
    }
}

/// Adds the `PodSpec` rows under `prefix` (the path of the spec).
fn add_pod_spec(schema: &mut PatchSchema, prefix: &str) {
    add_rows(schema, prefix, POD_SPEC);
    for list in POD_CONTAINER_LISTS {
        let path = join(prefix, list);
        schema.insert(path.clone(), ListStrategy::MergeByKey("name".to_owned()));
        add_rows(schema, &path, CONTAINER);
    }
}

/// The patch schema of a built-in kind, looked up by the object's
/// `apiVersion` (only the group matters) and `kind`.
///
/// Known kinds get their list strategies (including `metadata.finalizers`
/// and `metadata.ownerReferences`, and those of embedded pod templates).
/// Unknown kinds — custom resources, or a built-in kind name under another
/// group — get an empty schema, in which every list is replaced (JSON merge
/// patch semantics).
pub fn builtin_schema(api_version: &str, kind: &str) -> PatchSchema {
    let group = group_of(api_version);
    let Some(entry) = KINDS
        .iter()
        .find(|e| e.kind == kind && e.groups.contains(&group))
    else {
        return PatchSchema::new();
    };
    let mut schema = PatchSchema::new();
    add_rows(&mut schema, "metadata", OBJECT_META);
    match entry.pod {
        PodLocation::None => {}
        PodLocation::Pod => {
            add_pod_spec(&mut schema, "spec");
            add_rows(&mut schema, "status", POD_STATUS);
        }
        PodLocation::Template(template) => {
            add_rows(&mut schema, &join(template, "metadata"), OBJECT_META);
            add_pod_spec(&mut schema, &join(template, "spec"));
        }
    }
    for rows in entry.rows {
        add_rows(&mut schema, "", rows);
    }
    schema
}
