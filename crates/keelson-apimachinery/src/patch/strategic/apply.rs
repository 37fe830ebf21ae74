//! Applying a strategic merge patch.

use std::collections::{BTreeMap, VecDeque};

use serde_json::{Map, Value};

use super::error::{json_type, StrategicMergeError as E};
use super::schema::{ListStrategy, PatchSchema};

/// `$patch`: replace / delete / merge the enclosing map, or (as a list item)
/// replace the list or delete one item.
const PATCH: &str = "$patch";
/// `$retainKeys`: keep only these keys of the enclosing map.
const RETAIN_KEYS: &str = "$retainKeys";
/// `$setElementOrder/<field>`: the order of the merged list `<field>`.
const SET_ORDER: &str = "$setElementOrder/";
/// `$deleteFromPrimitiveList/<field>`: values to remove from `<field>`.
const DELETE_PRIMITIVES: &str = "$deleteFromPrimitiveList/";

fn is_directive(key: &str) -> bool {
    key == PATCH
        || key == RETAIN_KEYS
        || key.starts_with(SET_ORDER)
        || key.starts_with(DELETE_PRIMITIVES)
}

/// Applies the strategic merge patch `patch` to `original`, with the list
/// strategies of `schema`, and returns the patched object.
///
/// - Maps merge recursively; a `null` value deletes the key.
/// - Lists follow [`PatchSchema::list_strategy`]: merged by key, merged as a
///   primitive set, or replaced.
/// - A merged list is ordered as Kubernetes orders it: by
///   `$setElementOrder/<field>` when given, else patch items first in patch
///   order; items only the original had keep their relative order and are
///   slotted in by their original position.
/// - Directives (`$patch`, `$retainKeys`, `$setElementOrder/…`,
///   `$deleteFromPrimitiveList/…`) are obeyed and never copied into the result.
///
/// An `original` that is not an object is treated as `{}`. A top-level
/// `"$patch": "delete"` yields `{}`.
///
/// # Errors
///
/// [`StrategicMergeError`](E) when `patch` is not an object or a directive
/// is malformed (see the variants).
pub fn apply(original: &Value, patch: &Value, schema: &PatchSchema) -> Result<Value, E> {
    let Value::Object(patch) = patch else {
        return Err(E::PatchNotObject {
            found: json_type(patch),
        });
    };
    let base = match original {
        Value::Object(m) => m.clone(),
        _ => Map::new(),
    };
    let merged = Merger { schema }.merge_map(base, patch, "")?;
    Ok(Value::Object(merged.unwrap_or_default()))
}

fn child(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.to_owned()
    } else {
        format!("{path}.{field}")
    }
}

fn shown(path: &str) -> String {
    if path.is_empty() {
        "(root)".to_owned()
    } else {
        path.to_owned()
    }
}

/// An item of a list being merged, with its index in the original list
/// (`None` for items that came from the patch).
type Item = (Value, Option<usize>);

struct Merger<'a> {
    schema: &'a PatchSchema,
}

impl Merger<'_> {
    /// Merges `patch` into the map `original` found at `path`.
    /// `Ok(None)` means the map is deleted (`"$patch": "delete"`).
    fn merge_map(
        &self,
        mut original: Map<String, Value>,
        patch: &Map<String, Value>,
        path: &str,
    ) -> Result<Option<Map<String, Value>>, E> {
        if let Some(directive) = patch.get(PATCH) {
            match directive.as_str() {
                Some("delete") => return Ok(None),
                // The rest of the patch is merged into nothing, which strips
                // nulls and obeys nested directives.
                Some("replace") => original = Map::new(),
                Some("merge") => {}
                _ => {
                    return Err(E::UnknownPatchDirective {
                        path: shown(path),
                        value: directive.to_string(),
                    })
                }
            }
        }
        if let Some(keys) = patch.get(RETAIN_KEYS) {
            retain_keys(&mut original, keys, patch, path)?;
        }
        // Deletions from primitive lists happen before the patch's own list
        // is merged, so a value both deleted and listed ends up present.
        for (key, values) in patch {
            if let Some(field) = key.strip_prefix(DELETE_PRIMITIVES) {
                delete_from_primitive_list(&mut original, field, values, path)?;
            }
        }
        let mut orders: BTreeMap<&str, &[Value]> = BTreeMap::new();
        for (key, order) in patch {
            if let Some(field) = key.strip_prefix(SET_ORDER) {
                let Value::Array(order) = order else {
                    return Err(E::SetElementOrderNotList {
                        path: shown(path),
                        field: field.to_owned(),
                        found: json_type(order),
                    });
                };
                orders.insert(field, order);
            }
        }
        for (key, value) in patch.iter().filter(|(k, _)| !is_directive(k)) {
            let order = orders.remove(key.as_str());
            let merged =
                self.merge_field(original.remove(key), Some(value), order, &child(path, key))?;
            if let Some(v) = merged {
                original.insert(key.clone(), v);
            }
        }
        // `$setElementOrder` for lists the patch does not otherwise touch.
        for (field, order) in orders {
            if let Some(current) = original.remove(field) {
                if let Some(v) =
                    self.merge_field(Some(current), None, Some(order), &child(path, field))?
                {
                    original.insert(field.to_owned(), v);
                }
            }
        }
        Ok(Some(original))
    }

    /// Merges one field. `patch == None` only reorders (`$setElementOrder`
    /// without a patch list). `Ok(None)` means the field is removed.
    fn merge_field(
        &self,
        original: Option<Value>,
        patch: Option<&Value>,
        order: Option<&[Value]>,
        path: &str,
    ) -> Result<Option<Value>, E> {
        match patch {
            Some(Value::Null) => Ok(None),
            Some(Value::Object(patch)) => {
                let base = match original {
                    Some(Value::Object(m)) => m,
                    _ => Map::new(),
                };
                Ok(self.merge_map(base, patch, path)?.map(Value::Object))
            }
            Some(Value::Array(patch)) => self.merge_list(original, patch, order, path).map(Some),
            Some(scalar) => Ok(Some(scalar.clone())),
            None => match original {
                Some(Value::Array(_))
                    if order.is_some()
                        && *self.schema.list_strategy(path) != ListStrategy::Replace =>
                {
                    self.merge_list(original, &[], order, path).map(Some)
                }
                other => Ok(other),
            },
        }
    }

    /// A patch value taken as-is (nothing to merge into), with nulls
    /// dropped and directives obeyed.
    fn fresh_map(&self, patch: &Map<String, Value>, path: &str) -> Result<Option<Value>, E> {
        Ok(self.merge_map(Map::new(), patch, path)?.map(Value::Object))
    }

    fn merge_list(
        &self,
        original: Option<Value>,
        patch: &[Value],
        order: Option<&[Value]>,
        path: &str,
    ) -> Result<Value, E> {
        let original = match original {
            Some(Value::Array(items)) => Some(items),
            _ => None,
        };
        match self.schema.list_strategy(path) {
            ListStrategy::Replace => self.replace_list(patch, path),
            ListStrategy::MergeByKey(key) => self.merge_keyed(original, patch, key, order, path),
            ListStrategy::MergePrimitives => merge_primitives(original, patch, order, path),
        }
    }

    /// An atomic list: the patch's items, with `{"$patch": "replace"}`
    /// markers dropped and directives inside items obeyed.
    fn replace_list(&self, patch: &[Value], path: &str) -> Result<Value, E> {
        let mut out = Vec::with_capacity(patch.len());
        for item in patch {
            match item {
                Value::Object(m) => {
                    if let Some(d) = m.get(PATCH) {
                        if list_directive(d, path)? == ListDirective::Replace {
                            continue;
                        }
                        return Err(E::UnsupportedListDirective {
                            path: shown(path),
                            directive: "delete".to_owned(),
                        });
                    }
                    if let Some(v) = self.fresh_map(m, path)? {
                        out.push(v);
                    }
                }
                Value::Array(inner) => out.push(self.replace_list(inner, path)?),
                other => out.push(other.clone()),
            }
        }
        Ok(Value::Array(out))
    }

    fn merge_keyed(
        &self,
        original: Option<Vec<Value>>,
        patch: &[Value],
        key: &str,
        order: Option<&[Value]>,
        path: &str,
    ) -> Result<Value, E> {
        // Items of a list that exists must carry the key; a list created by
        // the patch is taken as given (as Kubernetes does).
        let strict = original.is_some();
        let mut items: Vec<Item> = original
            .unwrap_or_default()
            .into_iter()
            .enumerate()
            .map(|(i, v)| (v, Some(i)))
            .collect();
        let missing_key = |item: &Value| E::MissingMergeKey {
            path: shown(path),
            key: key.to_owned(),
            item: item.to_string(),
        };
        let mut replace = false;
        let mut regular = Vec::with_capacity(patch.len());
        for item in patch {
            let Value::Object(m) = item else {
                return Err(E::ListItemNotObject {
                    path: shown(path),
                    key: key.to_owned(),
                    item: item.to_string(),
                });
            };
            let Some(d) = m.get(PATCH) else {
                regular.push(m);
                continue;
            };
            match list_directive(d, path)? {
                ListDirective::Replace => replace = true,
                ListDirective::Delete => {
                    let value = m.get(key).ok_or_else(|| missing_key(item))?;
                    items.retain(|(v, _)| v.get(key) != Some(value));
                }
            }
        }
        if replace {
            items.clear();
        }
        for m in &regular {
            let Some(value) = m.get(key) else {
                if strict && !replace {
                    return Err(missing_key(&Value::Object((*m).clone())));
                }
                if let Some(v) = self.fresh_map(m, path)? {
                    items.push((v, None));
                }
                continue;
            };
            match items.iter().position(|(v, _)| v.get(key) == Some(value)) {
                Some(pos) => {
                    let base = match std::mem::take(&mut items[pos].0) {
                        Value::Object(b) => b,
                        _ => Map::new(),
                    };
                    match self.merge_map(base, m, path)? {
                        Some(merged) => items[pos].0 = Value::Object(merged),
                        None => {
                            items.remove(pos);
                        }
                    }
                }
                None => {
                    if let Some(v) = self.fresh_map(m, path)? {
                        items.push((v, None));
                    }
                }
            }
        }
        let order_ids: Vec<Value> = match order {
            Some(order) => order
                .iter()
                .map(|o| match o {
                    Value::Object(m) => m.get(key).cloned().ok_or_else(|| missing_key(o)),
                    _ => Err(E::ListItemNotObject {
                        path: shown(path),
                        key: key.to_owned(),
                        item: o.to_string(),
                    }),
                })
                .collect::<Result<_, _>>()?,
            None => regular.iter().filter_map(|m| m.get(key).cloned()).collect(),
        };
        Ok(Value::Array(reorder(items, Some(key), &order_ids)))
    }
}

#[derive(Debug, PartialEq, Eq)]
enum ListDirective {
    Replace,
    Delete,
}

/// Reads a `$patch` found on a list item.
fn list_directive(d: &Value, path: &str) -> Result<ListDirective, E> {
    match d.as_str() {
        Some("replace") => Ok(ListDirective::Replace),
        Some("delete") => Ok(ListDirective::Delete),
        Some("merge") => Err(E::UnsupportedListDirective {
            path: shown(path),
            directive: "merge".to_owned(),
        }),
        _ => Err(E::UnknownPatchDirective {
            path: shown(path),
            value: d.to_string(),
        }),
    }
}

/// A primitive set: union without duplicates.
fn merge_primitives(
    original: Option<Vec<Value>>,
    patch: &[Value],
    order: Option<&[Value]>,
    path: &str,
) -> Result<Value, E> {
    let mut items: Vec<Item> = Vec::new();
    for (i, v) in original.unwrap_or_default().into_iter().enumerate() {
        if !items.iter().any(|(x, _)| *x == v) {
            items.push((v, Some(i)));
        }
    }
    let mut replace = false;
    let mut values = Vec::with_capacity(patch.len());
    for item in patch {
        if let Some(d) = item.as_object().and_then(|m| m.get(PATCH)) {
            match list_directive(d, path)? {
                ListDirective::Replace => replace = true,
                ListDirective::Delete => {
                    return Err(E::UnsupportedListDirective {
                        path: shown(path),
                        directive: "delete".to_owned(),
                    })
                }
            }
        } else {
            values.push(item);
        }
    }
    if replace {
        items.clear();
    }
    for v in &values {
        if !items.iter().any(|(x, _)| x == *v) {
            items.push(((*v).clone(), None));
        }
    }
    let order_ids: Vec<Value> = match order {
        Some(order) => order.to_vec(),
        None => values.into_iter().cloned().collect(),
    };
    Ok(Value::Array(reorder(items, None, &order_ids)))
}

/// Orders a merged list the way Kubernetes does.
///
/// Items whose identity appears in `order_ids` (the `$setElementOrder` list,
/// or else the patch list) come in that order. The remaining items — those
/// only the server knew about — keep their original relative order and are
/// slotted in among the others by their original position: such an item goes
/// before an ordered item exactly when both were in the original list and it
/// came first there. Items new in the patch but absent from `order_ids` go
/// last.
///
/// An item's identity is its value at `key`, or the item itself for a list
/// of primitives (`key == None`).
fn reorder(items: Vec<Item>, key: Option<&str>, order_ids: &[Value]) -> Vec<Value> {
    let position = |v: &Value| {
        let id = match key {
            Some(k) => v.get(k)?,
            None => v,
        };
        order_ids.iter().position(|o| o == id)
    };
    let mut ordered: Vec<(usize, Item)> = Vec::new();
    let mut server: Vec<Item> = Vec::new();
    for item in items {
        match position(&item.0) {
            Some(pos) => ordered.push((pos, item)),
            None => server.push(item),
        }
    }
    ordered.sort_by_key(|(pos, _)| *pos);
    server.sort_by_key(|(_, orig)| orig.unwrap_or(usize::MAX));
    let mut ordered: VecDeque<Item> = ordered.into_iter().map(|(_, it)| it).collect();
    let mut server: VecDeque<Item> = server.into();
    let mut out = Vec::with_capacity(ordered.len() + server.len());
    while let (Some(s), Some(o)) = (server.front(), ordered.front()) {
        let server_first = matches!((s.1, o.1), (Some(a), Some(b)) if a < b);
        let next = if server_first {
            server.pop_front()
        } else {
            ordered.pop_front()
        };
        out.extend(next.map(|(v, _)| v));
    }
    out.extend(server.into_iter().map(|(v, _)| v));
    out.extend(ordered.into_iter().map(|(v, _)| v));
    out
}

/// `$retainKeys`: validates the directive against the patch, then drops the
/// keys of `original` it does not list.
fn retain_keys(
    original: &mut Map<String, Value>,
    keys: &Value,
    patch: &Map<String, Value>,
    path: &str,
) -> Result<(), E> {
    let Value::Array(list) = keys else {
        return Err(E::RetainKeysInvalid {
            path: shown(path),
            found: json_type(keys).to_owned(),
        });
    };
    let keys = list
        .iter()
        .map(|k| {
            k.as_str().ok_or_else(|| E::RetainKeysInvalid {
                path: shown(path),
                found: k.to_string(),
            })
        })
        .collect::<Result<Vec<&str>, _>>()?;
    for (field, value) in patch {
        if value.is_null() || is_directive(field) {
            continue;
        }
        if !keys.contains(&field.as_str()) {
            return Err(E::FieldNotInRetainKeys {
                path: shown(path),
                field: field.clone(),
            });
        }
    }
    original.retain(|k, _| keys.contains(&k.as_str()));
    Ok(())
}

/// `$deleteFromPrimitiveList/<field>`: removes every occurrence of the
/// listed values from the list `field` of `original`, if it is a list.
fn delete_from_primitive_list(
    original: &mut Map<String, Value>,
    field: &str,
    values: &Value,
    path: &str,
) -> Result<(), E> {
    let invalid = |found: String| E::DeleteFromPrimitiveListInvalid {
        path: shown(path),
        field: field.to_owned(),
        found,
    };
    let Value::Array(values) = values else {
        return Err(invalid(json_type(values).to_owned()));
    };
    if let Some(bad) = values.iter().find(|v| v.is_object() || v.is_array()) {
        return Err(invalid(bad.to_string()));
    }
    if let Some(Value::Array(list)) = original.get_mut(field) {
        list.retain(|v| !values.contains(v));
    }
    Ok(())
}
