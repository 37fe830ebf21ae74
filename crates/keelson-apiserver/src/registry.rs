//! The generic registry: create, read, update, delete and list of any catalog resource,
//! combining the strategies ([`crate::meta`], [`crate::strategy`]) with [`ObjectStore`].

use rand::Rng;
use serde_json::{json, Value};

use crate::allocator;
use crate::catalog::{self, ResourceDef};
use crate::error::ApiError;
use crate::lease_fence::{self, LeaseFence};
use crate::meta::{self, Minted, UpdateScope};
use crate::storage::{object_key, Fence, ObjectStore, SideWrite, Stored, WriteOutcome};
use crate::strategy;

/// How often a create or a delete retries after losing a race (a fence moved: a picked
/// address taken, the namespace changed; or the object changed under a delete).
const UPDATE_ATTEMPTS: usize = 8;

/// How often an update retries after losing a race with another writer (only when the
/// caller gave no resourceVersion precondition). Kubernetes retries such an update until
/// it lands: every lost race is another writer's win, so many writers of one object (a
/// Lease renewed again while its last renewal is still in flight) all get through; past
/// the first few attempts a short random pause spreads them out.
const CONFLICT_ATTEMPTS: usize = 64;
const CONFLICT_PAUSE_FROM: usize = 4;

#[derive(Clone)]
pub struct Registry {
    pub store: ObjectStore,
    /// The lease fence every write through this registry is conditional on (a request's
    /// `Keelson-Fence` claim), see [`crate::lease_fence`].
    fence: Option<LeaseFence>,
}

/// Options of a DELETE.
#[derive(Clone, Debug, Default)]
pub struct DeleteOptions {
    pub grace_period_seconds: Option<i64>,
    /// `Orphan`, `Background` or `Foreground`.
    pub propagation_policy: Option<String>,
    pub precondition_uid: Option<String>,
    pub precondition_rv: Option<String>,
    pub dry_run: bool,
}

/// What a delete did.
pub enum Deleted {
    /// The object is gone; this is its last state.
    Gone(Value),
    /// The object is marked for deletion (finalizers or grace period pending).
    Pending(Value),
}

pub fn now_rfc3339() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Now as a `MicroTime` (Lease times, Events).
pub fn now_micro_rfc3339() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

fn mint() -> Minted {
    let mut rng = rand::thread_rng();
    let uid = uuid::Uuid::new_v4().to_string();
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let suffix = (0..5).map(|_| ALPHABET[rng.gen_range(0..ALPHABET.len())] as char).collect();
    Minted { now: now_rfc3339(), uid, suffix }
}

fn namespaces() -> &'static ResourceDef {
    catalog::lookup("", "v1", "namespaces").expect("namespaces are served")
}

impl Registry {
    pub fn new(store: ObjectStore) -> Self {
        Self { store, fence: None }
    }

    /// This registry with every write made conditional on `fence` (`None`: unfenced).
    pub fn fenced(&self, fence: Option<LeaseFence>) -> Self {
        Self { store: self.store.clone(), fence }
    }

    /// The store condition of the lease fence, if writes are fenced.
    fn lease_fence(&self) -> Option<Fence> {
        self.fence.as_ref().map(|f| Fence { key: f.key(), mod_revision: f.token })
    }

    /// A refusal if the lease fence no longer holds (linearizable read of its record).
    /// Called after a write failed on one of its conditions, and before answering a
    /// write that needed no store write at all.
    async fn check_lease_fence(&self) -> Result<(), ApiError> {
        let Some(f) = &self.fence else { return Ok(()) };
        let current = self.store.mod_revision(&f.key()).await?;
        if current == f.token {
            Ok(())
        } else {
            Err(f.refused(current))
        }
    }

    pub async fn get(&self, def: &ResourceDef, ns: Option<&str>, name: &str) -> Result<Stored, ApiError> {
        self.store
            .get(&object_key(def, ns, name))
            .await?
            .ok_or_else(|| ApiError::not_found(def.qualified(), name))
    }

    /// The namespace fence of a write into `ns`: it must exist and not be terminating.
    async fn namespace_fence(&self, ns: &str, def: &ResourceDef, name: &str) -> Result<Fence, ApiError> {
        let key = object_key(namespaces(), None, ns);
        match self.store.get(&key).await? {
            None => Err(ApiError::not_found("namespaces", ns)),
            Some(n) if meta::is_deleting(&n.obj) || n.obj.pointer("/status/phase") == Some(&json!("Terminating")) => {
                Err(ApiError::Forbidden(format!(
                    "{} \"{name}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                    def.qualified()
                )))
            }
            Some(n) => Ok(Fence { key, mod_revision: n.rv }),
        }
    }

    /// The default StorageClass (DefaultStorageClass admission), read linearizably.
    async fn default_storage_class(&self) -> Result<Option<String>, ApiError> {
        let Some(def) = crate::catalog::lookup("storage.k8s.io", "v1", "storageclasses") else { return Ok(None) };
        let page = self.store.list_page(&crate::storage::list_prefix(def, None), None, 0, 0, false).await?;
        let classes: Vec<Value> = page.items.into_iter().map(|s| s.obj).collect();
        Ok(crate::admission::default_storage_class(&classes))
    }

    /// Every PriorityClass, read linearizably (Priority admission).
    async fn priority_classes(&self) -> Result<Vec<Value>, ApiError> {
        let Some(def) = crate::catalog::lookup("scheduling.k8s.io", "v1", "priorityclasses") else { return Ok(Vec::new()) };
        let page = self.store.list_page(&crate::storage::list_prefix(def, None), None, 0, 0, false).await?;
        Ok(page.items.into_iter().map(|s| s.obj).collect())
    }

    /// The ServiceAccount plugin's image pull secrets: a new pod naming none gets its
    /// ServiceAccount's (`imagePullSecrets` of the account, when it exists). The account
    /// to copy them from, read linearizably; `None` when the object needs none.
    async fn pull_secrets_account(&self, def: &ResourceDef, obj: &Value) -> Result<Option<Value>, ApiError> {
        if (def.group, def.kind) != ("", "Pod") || obj.pointer("/spec/imagePullSecrets").and_then(Value::as_array).is_some_and(|a| !a.is_empty()) {
            return Ok(None);
        }
        let Some(sa_def) = crate::catalog::lookup("", "v1", "serviceaccounts") else { return Ok(None) };
        let ns = meta::namespace_of(obj).unwrap_or("default");
        let account = obj.pointer("/spec/serviceAccountName").and_then(Value::as_str).unwrap_or("default");
        Ok(self.store.get(&object_key(sa_def, Some(ns), account)).await?.map(|sa| sa.obj))
    }

    /// Whether Priority admission needs the PriorityClasses for this object.
    fn wants_priority_classes(def: &ResourceDef, obj: &Value) -> bool {
        match (def.group, def.kind) {
            ("", "Pod") => true,
            ("scheduling.k8s.io", "PriorityClass") => obj.get("globalDefault").and_then(Value::as_bool) == Some(true),
            _ => false,
        }
    }

    /// Priority admission over the PriorityClasses read for it: a new pod's priority from
    /// its class; a PriorityClass that claims to be the default while another one is.
    fn admit_priority(def: &ResourceDef, obj: &mut Value, classes: &[Value]) -> Result<(), ApiError> {
        use crate::admission::priority;
        let name = meta::name_of(obj).to_string();
        let refuse = |why: String| ApiError::Forbidden(format!("{} \"{name}\" is forbidden: {why}", def.qualified()));
        match (def.group, def.kind) {
            ("", "Pod") => priority::admit_pod_priority(obj, classes).map_err(refuse),
            ("scheduling.k8s.io", "PriorityClass") if Self::wants_priority_classes(def, obj) => priority::check_single_default(obj, classes).map_err(refuse),
            _ => Ok(()),
        }
    }

    /// Creates an object. `ns` is the namespace from the URL.
    #[tracing::instrument(name = "create", skip_all, fields(resource = def.plural))]
    pub async fn create(&self, def: &ResourceDef, ns: Option<&str>, mut obj: Value, dry_run: bool) -> Result<Value, ApiError> {
        meta::prepare_create(def, &mut obj, ns, &mint())?;
        strategy::apply_defaults(def, &mut obj, true);
        crate::admission::admit_create(def, &mut obj, &mint().suffix, keelson_tracecontext::TraceParent::current_sampled());
        let name = meta::name_of(&obj).to_string();
        let ns = meta::namespace_of(&obj).map(str::to_string);
        // What admission and the namespace fence read, read at once: each is a
        // linearizable read, and one after another they were most of a pod create's
        // latency. Their outcomes are then taken in the order the steps run.
        let wants_storage_class = crate::admission::wants_default_storage_class(def, &obj);
        let wants_classes = Self::wants_priority_classes(def, &obj);
        let (storage_class, classes, account, namespace_fence) = tokio::join!(
            async { if wants_storage_class { self.default_storage_class().await } else { Ok(None) } },
            async { if wants_classes { self.priority_classes().await } else { Ok(Vec::new()) } },
            self.pull_secrets_account(def, &obj),
            async {
                match def.namespaced {
                    true => self.namespace_fence(ns.as_deref().unwrap_or("default"), def, &name).await.map(Some),
                    false => Ok(None),
                }
            },
        );
        if wants_storage_class {
            crate::admission::set_default_storage_class(&mut obj, storage_class?.as_deref());
        }
        Self::admit_priority(def, &mut obj, &classes?)?;
        if let Some(sa) = account? {
            crate::admission::copy_service_account_pull_secrets(&mut obj, &sa);
        }
        if name.is_empty() {
            return Err(ApiError::invalid(def.kind, def.group, "", vec![crate::error::Cause::required("metadata.name")]));
        }
        strategy::validate(def, &obj)?;
        let mut namespace_fence = namespace_fence?;
        let key = object_key(def, ns.as_deref(), &name);
        let asked = allocator::requested(def, &obj);
        for _ in 0..UPDATE_ATTEMPTS {
            let mut candidate = obj.clone();
            let mut side = allocator::allocate(def, &key, &mut candidate)?;
            if dry_run {
                return Ok(candidate);
            }
            // Allocated keys must still be free; the namespace and the lease fence unmoved.
            let mut fences: Vec<Fence> = side.iter().map(|(k, _)| Fence { key: k.clone(), mod_revision: 0 }).collect();
            fences.extend(namespace_fence.clone());
            fences.extend(self.lease_fence());
            side.extend(lease_fence::side_writes(def, None, Some(&candidate)));
            match self.store.write(&key, Some(&candidate), 0, &fences, &side).await? {
                WriteOutcome::Written(rv) => {
                    crate::storage::set_resource_version(&mut candidate, rv);
                    return Ok(candidate);
                }
                WriteOutcome::KeyMoved(_) => return Err(ApiError::AlreadyExists { resource: def.qualified(), name }),
                WriteOutcome::Fenced => {
                    // The lease fence moved (final), an address asked for by name is
                    // another's (final), or the namespace changed or a picked address
                    // was taken (re-check and try again).
                    self.check_lease_fence().await?;
                    self.check_requested_free(def, &name, &asked, &side).await?;
                    if def.namespaced {
                        namespace_fence = Some(self.namespace_fence(ns.as_deref().unwrap_or("default"), def, &name).await?);
                    }
                }
            }
        }
        Err(ApiError::Conflict { resource: def.qualified(), name, message: "too many concurrent changes; try again".into() })
    }

    /// Reads, changes and writes an object, retrying when another writer got in between.
    /// A resourceVersion in what `change` returns pins the write to that version: after a
    /// lost race `change` runs again on the new object, so one that derives the object
    /// from it (and its version) simply retries, while one that returns a client's object
    /// of an older version gets 409 Conflict.
    ///
    /// `change` gets the current object (or `None` when absent) and returns the desired
    /// object, or `Ok(None)` to create nothing when absent.
    pub async fn update_with(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        name: &str,
        scope: UpdateScope,
        dry_run: bool,
        mut change: impl FnMut(Option<&Value>) -> Result<Option<Value>, ApiError>,
    ) -> Result<(Value, bool), ApiError> {
        let key = object_key(def, ns, name);
        for attempt in 0..CONFLICT_ATTEMPTS {
            if attempt >= CONFLICT_PAUSE_FROM {
                let pause = rand::thread_rng().gen_range(1..=(attempt as u64).min(20));
                tokio::time::sleep(std::time::Duration::from_millis(pause)).await;
            }
            let current = self.store.get(&key).await?;
            let Some(current) = current else {
                return match change(None)? {
                    // Another writer created it first: update that one instead.
                    Some(obj) => match self.create(def, ns, obj, dry_run).await {
                        Err(ApiError::AlreadyExists { .. }) => continue,
                        created => Ok((created?, true)),
                    },
                    None => Err(ApiError::not_found(def.qualified(), name)),
                };
            };
            let Some(mut desired) = change(Some(&current.obj))? else {
                return Err(ApiError::not_found(def.qualified(), name));
            };
            let pinned = desired.pointer("/metadata/resourceVersion").and_then(Value::as_str).filter(|s| !s.is_empty()).map(String::from);
            if let Some(rv) = &pinned {
                if rv != &current.rv.to_string() {
                    return Err(ApiError::conflict(&def.qualified(), name));
                }
            }
            meta::prepare_update(def, &current.obj, &mut desired, scope)?;
            strategy::apply_defaults(def, &mut desired, false);
            if (def.group, def.kind) == ("", "Pod") {
                crate::admission::priority::keep_pod_priority(&current.obj, &mut desired);
            }
            // A Service keeps what it was given, drops what its type no longer uses and
            // gets what it newly needs, before validation sees it.
            let asked = allocator::requested(def, &desired);
            let allocated = allocator::reallocate(def, &key, &current.obj, &mut desired)?;
            strategy::validate(def, &desired)?;
            strategy::validate_update(def, &current.obj, &desired)?;
            if def.kind == "PriorityClass" && Self::wants_priority_classes(def, &desired) {
                let classes = self.priority_classes().await?;
                Self::admit_priority(def, &mut desired, &classes)?;
            }
            let gone = delete_on_update(def, &current.obj, &desired);
            if dry_run {
                return Ok((desired, false));
            }
            if !gone && unchanged(&current.obj, &desired) {
                // Nothing to write: the object and its resourceVersion stay as they are
                // (a fenced caller still learns that its fence is gone).
                self.check_lease_fence().await?;
                return Ok((current.obj, false));
            }
            let mut side: Vec<SideWrite> = if gone { allocator::release(def, &current.obj) } else { allocated };
            // Newly allocated keys must still be free.
            let mut fences: Vec<Fence> = side.iter().filter(|(_, v)| v.is_some()).map(|(k, _)| Fence { key: k.clone(), mod_revision: 0 }).collect();
            side.extend(lease_fence::side_writes(def, Some(&current.obj), (!gone).then_some(&desired)));
            fences.extend(self.lease_fence());
            let outcome = self.store.write(&key, (!gone).then_some(&desired), current.rv, &fences, &side).await?;
            match outcome {
                WriteOutcome::Written(rv) => {
                    crate::storage::set_resource_version(&mut desired, rv);
                    return Ok((desired, false));
                }
                WriteOutcome::Fenced => {
                    self.check_lease_fence().await?;
                    self.check_requested_free(def, name, &asked, &side).await?;
                    continue;
                }
                _ => continue,
            }
        }
        Err(ApiError::conflict(&def.qualified(), name))
    }

    /// After a fenced write: 422 when an address the object asked for by name (and this
    /// write would have taken) belongs to another object, as Kubernetes answers.
    async fn check_requested_free(&self, def: &ResourceDef, name: &str, asked: &[(Vec<u8>, crate::error::Cause)], side: &[SideWrite]) -> Result<(), ApiError> {
        let mut causes = Vec::new();
        for (k, cause) in asked {
            if side.iter().any(|(s, v)| s == k && v.is_some()) && self.store.mod_revision(k).await? != 0 {
                causes.push(cause.clone());
            }
        }
        if causes.is_empty() {
            Ok(())
        } else {
            Err(ApiError::invalid(def.kind, def.group, name, causes))
        }
    }

    /// Deletes an object: at once, or by marking it (deletionTimestamp) when finalizers
    /// or a graceful pod shutdown must run first.
    #[tracing::instrument(name = "delete", skip_all, fields(resource = def.plural, name))]
    pub async fn delete(&self, def: &ResourceDef, ns: Option<&str>, name: &str, opts: &DeleteOptions) -> Result<Deleted, ApiError> {
        let key = object_key(def, ns, name);
        for _ in 0..UPDATE_ATTEMPTS {
            let current = self.get(def, ns, name).await?;
            if let Some(uid) = &opts.precondition_uid {
                if current.obj.pointer("/metadata/uid").and_then(Value::as_str) != Some(uid) {
                    return Err(ApiError::Conflict {
                        resource: def.qualified(),
                        name: name.into(),
                        message: format!("Precondition failed: UID in precondition: {uid}, UID in object meta: {}", current.obj.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or("")),
                    });
                }
            }
            if let Some(rv) = &opts.precondition_rv {
                if rv != &current.rv.to_string() {
                    return Err(ApiError::Conflict {
                        resource: def.qualified(),
                        name: name.into(),
                        message: format!("Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}", current.rv),
                    });
                }
            }
            let mut obj = current.obj.clone();
            let mut finalizers = meta::finalizers(&obj);
            match opts.propagation_policy.as_deref() {
                Some("Foreground") if !finalizers.iter().any(|f| f == "foregroundDeletion") => finalizers.push("foregroundDeletion".into()),
                Some("Orphan") if !finalizers.iter().any(|f| f == "orphan") => finalizers.push("orphan".into()),
                None | Some("Foreground" | "Orphan" | "Background") => {}
                Some(other) => return Err(ApiError::BadRequest(format!("unsupported propagationPolicy {other:?}: supported values are Orphan, Background, Foreground"))),
            }
            let grace = graceful_period(def, &obj, opts.grace_period_seconds);
            let namespace_cleanup = def.group.is_empty() && def.kind == "Namespace";
            let pending = !finalizers.is_empty() || grace > 0 || namespace_cleanup;
            if pending {
                if meta::is_deleting(&obj) && meta::finalizers(&obj) == finalizers && grace_unchanged(&obj, grace) {
                    self.check_lease_fence().await?;
                    return Ok(Deleted::Pending(obj)); // already marked
                }
                let m = obj["metadata"].as_object_mut().expect("stored objects have metadata");
                if !m.contains_key("deletionTimestamp") {
                    let at = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(grace.max(0));
                    m.insert("deletionTimestamp".into(), json!(at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()));
                }
                m.insert("deletionGracePeriodSeconds".into(), json!(grace.max(0)));
                if !finalizers.is_empty() {
                    m.insert("finalizers".into(), json!(finalizers));
                }
                m.remove("resourceVersion");
                if namespace_cleanup {
                    obj["status"]["phase"] = json!("Terminating");
                }
                if opts.dry_run {
                    return Ok(Deleted::Pending(obj));
                }
                let fences: Vec<Fence> = self.lease_fence().into_iter().collect();
                match self.store.put(&key, &obj, current.rv, &fences).await? {
                    WriteOutcome::Written(rv) => {
                        crate::storage::set_resource_version(&mut obj, rv);
                        return Ok(Deleted::Pending(obj));
                    }
                    WriteOutcome::Fenced => {
                        self.check_lease_fence().await?;
                        continue;
                    }
                    WriteOutcome::KeyMoved(_) => continue,
                }
            }
            if opts.dry_run {
                return Ok(Deleted::Gone(obj));
            }
            let mut side = allocator::release(def, &obj);
            side.extend(lease_fence::side_writes(def, Some(&obj), None));
            let fences: Vec<Fence> = self.lease_fence().into_iter().collect();
            match self.store.write(&key, None, current.rv, &fences, &side).await? {
                WriteOutcome::Written(_) => return Ok(Deleted::Gone(obj)),
                WriteOutcome::Fenced => {
                    self.check_lease_fence().await?;
                    continue;
                }
                WriteOutcome::KeyMoved(_) => continue,
            }
        }
        Err(ApiError::conflict(&def.qualified(), name))
    }
}

/// Whether an update changes nothing but bookkeeping (resourceVersion, the times of
/// field-manager entries): such an update is not written, as in Kubernetes. A change of
/// who owns which field is a change.
fn unchanged(current: &Value, desired: &Value) -> bool {
    let strip = |o: &Value| {
        let mut o = o.clone();
        if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("resourceVersion");
            if let Some(entries) = m.get_mut("managedFields").and_then(Value::as_array_mut) {
                for e in entries.iter_mut().filter_map(Value::as_object_mut) {
                    e.remove("time");
                }
            }
        }
        o
    };
    strip(current) == strip(desired)
}

/// An update of an object marked for deletion that removes its last finalizer deletes it
/// (for namespaces: the last `spec.finalizers` entry, once its content is gone).
fn delete_on_update(def: &ResourceDef, old: &Value, new: &Value) -> bool {
    if !meta::is_deleting(new) || !meta::finalizers(new).is_empty() {
        return false;
    }
    let spec_finalizers = |o: &Value| o.pointer("/spec/finalizers").and_then(Value::as_array).map_or(0, Vec::len);
    if def.group.is_empty() && def.kind == "Namespace" {
        return spec_finalizers(new) == 0;
    }
    !meta::finalizers(old).is_empty()
}

/// Pods bound to a node get a graceful deletion period (their kubelet confirms with 0);
/// everything else is deleted at once.
fn graceful_period(def: &ResourceDef, obj: &Value, requested: Option<i64>) -> i64 {
    if !(def.group.is_empty() && def.kind == "Pod") {
        return 0;
    }
    let bound = obj.pointer("/spec/nodeName").and_then(Value::as_str).is_some_and(|n| !n.is_empty());
    let finished = matches!(obj.pointer("/status/phase").and_then(Value::as_str), Some("Succeeded" | "Failed"));
    if !bound || finished {
        return 0;
    }
    let default = obj.pointer("/spec/terminationGracePeriodSeconds").and_then(Value::as_i64).unwrap_or(30);
    let g = requested.unwrap_or(default).max(0);
    // An already shorter deletion period is never lengthened.
    match obj.pointer("/metadata/deletionGracePeriodSeconds").and_then(Value::as_i64) {
        Some(current) => g.min(current),
        None => g,
    }
}

fn grace_unchanged(obj: &Value, grace: i64) -> bool {
    obj.pointer("/metadata/deletionGracePeriodSeconds").and_then(Value::as_i64) == Some(grace.max(0))
}

#[cfg(test)]
mod tests {
    #[test]
    fn minted_uids_are_random_v4_uuids_and_suffixes_use_the_name_alphabet() {
        let (a, b) = (super::mint(), super::mint());
        let parsed = uuid::Uuid::parse_str(&a.uid).expect("a UUID");
        assert_eq!((parsed.get_version_num(), parsed.get_variant()), (4, uuid::Variant::RFC4122), "{}", a.uid);
        assert_eq!(a.uid, parsed.hyphenated().to_string(), "lower-case, hyphenated");
        assert_ne!(a.uid, b.uid);
        assert_eq!(a.suffix.len(), 5);
        assert!(a.suffix.bytes().all(|c| b"bcdfghjklmnpqrstvwxz2456789".contains(&c)), "{}", a.suffix);
    }
}
