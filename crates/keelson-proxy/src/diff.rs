//! The `nft -f` script that turns the table of one [`Model`] into the table of the next,
//! touching only what changed: the chains, sets and map elements of the Services whose
//! rules differ (and `nodeport-ips` if the node's addresses changed). Pure; the empty
//! string when nothing changed. The table's fixed chains and maps are never named: they
//! are written by a full sync ([`Model::table`]), which comes first.
//!
//! # Guarantees
//! The script is one transaction whose commands are ordered so that nothing is referenced
//! before it exists or deleted while referenced:
//! 1. new sets and new (empty) chains are added;
//! 2. chains whose rules changed, and chains that are gone, are flushed (which drops their
//!    jumps and set references);
//! 3. map elements that are gone or whose verdict changed are deleted;
//! 4. sets whose declaration changed are deleted and added again (every chain of that
//!    Service was flushed in step 2, so none refers to them);
//! 5. the rules of new and changed chains are added;
//! 6. new and changed map elements are added;
//! 7. chains that are gone are deleted (nothing jumps to them any more: their elements
//!    were deleted in 3 and the chains that jumped to them flushed in 2), then gone sets.
//!
//! # Assumptions
//! The kernel holds exactly `prev`'s table (the caller falls back to a full sync when it
//! cannot be sure, e.g. after a failed apply), and chains only jump to chains of their own
//! Service or to the fixed chains, as [`crate::render`] renders them.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::render::{Map, Model, ServiceRules, TABLE};

/// The table a step names: `ip keelson-proxy` or `ip6 keelson-proxy`.
fn table(f: &str) -> String {
    format!("{f} {TABLE}")
}

/// The commands of each step, in the order of the module's guarantees.
#[derive(Default)]
struct Steps {
    /// The family's nft keyword.
    family: &'static str,
    add: Vec<String>,
    flush: Vec<String>,
    delete_elements: BTreeMap<Map, Vec<String>>,
    redeclare: Vec<String>,
    rules: Vec<String>,
    add_elements: BTreeMap<Map, Vec<String>>,
    delete: Vec<String>,
}

fn set_decl(f: &str, name: &str, decl: &[String]) -> String {
    let mut s = format!("add set {} {name} {{ ", table(f));
    for line in decl {
        let _ = write!(s, "{line}; ");
    }
    s.push('}');
    s
}

fn fill(steps: &mut Steps, name: &str, rules: &[String]) {
    let t = table(steps.family);
    steps.rules.extend(rules.iter().map(|r| format!("add rule {t} {name} {r}")));
}

fn diff_service(steps: &mut Steps, prev: &ServiceRules, next: &ServiceRules) {
    let (f, t) = (steps.family, table(steps.family));
    // A set whose declaration changed is re-made: every chain of the Service is rewritten.
    let mut rewrite_all = false;
    for (name, decl) in &next.sets {
        match prev.sets.get(name) {
            None => steps.add.push(set_decl(f, name, decl)),
            Some(old) if old != decl => {
                rewrite_all = true;
                steps.redeclare.push(format!("delete set {t} {name}"));
                steps.redeclare.push(set_decl(f, name, decl));
            }
            Some(_) => {}
        }
    }
    for (name, rules) in &next.chains {
        match prev.chains.get(name) {
            None => {
                steps.add.push(format!("add chain {t} {name}"));
                fill(steps, name, rules);
            }
            Some(old) if old != rules || rewrite_all => {
                steps.flush.push(format!("flush chain {t} {name}"));
                fill(steps, name, rules);
            }
            Some(_) => {}
        }
    }
    for name in prev.chains.keys().filter(|n| !next.chains.contains_key(*n)) {
        steps.flush.push(format!("flush chain {t} {name}"));
        steps.delete.push(format!("delete chain {t} {name}"));
    }
    for name in prev.sets.keys().filter(|n| !next.sets.contains_key(*n)) {
        steps.delete.push(format!("delete set {t} {name}"));
    }
    for ((map, key), verdict) in &next.elements {
        match prev.elements.get(&(*map, key.clone())) {
            Some(old) if old == verdict => continue,
            Some(_) => steps.delete_elements.entry(*map).or_default().push(key.clone()),
            None => {}
        }
        steps.add_elements.entry(*map).or_default().push(format!("{key} : {verdict}"));
    }
    for (map, key) in prev.elements.keys().filter(|k| !next.elements.contains_key(*k)) {
        steps.delete_elements.entry(*map).or_default().push(key.clone());
    }
}

fn elements(out: &mut String, f: &str, verb: &str, set: &str, items: &[String]) {
    if !items.is_empty() {
        let _ = writeln!(out, "{verb} element {} {set} {{ {} }}", table(f), items.join(", "));
    }
}

/// The script taking the kernel from `prev`'s table to `next`'s; empty when they are equal.
pub fn diff(prev: &Model, next: &Model) -> String {
    let mut steps = Steps { family: next.family.nft(), ..Default::default() };
    let empty = ServiceRules::default();
    let mut keys: Vec<&String> = prev.services.keys().chain(next.services.keys()).collect();
    keys.sort();
    keys.dedup();
    for key in keys {
        let (a, b) = (prev.services.get(key).map(|r| r.as_ref()).unwrap_or(&empty), next.services.get(key).map(|r| r.as_ref()).unwrap_or(&empty));
        // Rules of an unchanged Service are most often the very same (cached) object.
        if !std::ptr::eq(a, b) && a != b {
            diff_service(&mut steps, a, b);
        }
    }
    let mut out = String::new();
    let gone: Vec<String> = prev.node_ips.difference(&next.node_ips).map(|ip| ip.to_string()).collect();
    let new: Vec<String> = next.node_ips.difference(&prev.node_ips).map(|ip| ip.to_string()).collect();
    for line in steps.add.iter().chain(&steps.flush) {
        let _ = writeln!(out, "{line}");
    }
    for (map, keys) in &steps.delete_elements {
        elements(&mut out, steps.family, "delete", map.name(), keys);
    }
    elements(&mut out, steps.family, "delete", "nodeport-ips", &gone);
    for line in steps.redeclare.iter().chain(&steps.rules) {
        let _ = writeln!(out, "{line}");
    }
    for (map, items) in &steps.add_elements {
        elements(&mut out, steps.family, "add", map.name(), items);
    }
    elements(&mut out, steps.family, "add", "nodeport-ips", &new);
    for line in &steps.delete {
        let _ = writeln!(out, "{line}");
    }
    out
}

#[cfg(test)]
#[path = "diff_tests.rs"]
mod tests;
