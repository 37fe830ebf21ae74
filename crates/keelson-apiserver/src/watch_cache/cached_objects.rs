//! The current objects of one resource, ordered by key as the store orders them, and the
//! page selection of a list served from them. No I/O: the feed applies changes, lists
//! read pages.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use serde_json::Value;

use crate::storage::Stored;

/// One cached object and what it counts for in the bytes gauge.
#[derive(Clone, Debug)]
struct Entry {
    stored: Arc<Stored>,
    /// Its key's length plus its stored value's length.
    approx_bytes: usize,
}

/// Key → decoded object, shared: a list takes `Arc`s, never copies of the objects.
#[derive(Debug, Default)]
pub struct CachedObjects {
    entries: BTreeMap<Vec<u8>, Entry>,
    approx_bytes: usize,
}

/// A page of a list, read from the cache.
#[derive(Debug)]
pub struct CachedPage {
    pub items: Vec<Arc<Stored>>,
    /// The key of the last item returned, when more keys of the list follow it.
    pub next_after: Option<Vec<u8>>,
}

impl CachedObjects {
    /// Puts (`Some`) or removes (`None`) the object at `key`; `approx_bytes` is what the
    /// object counts for (see [`CachedObjects::approx_bytes`]).
    pub fn apply(&mut self, key: &[u8], object: Option<Arc<Stored>>, approx_bytes: usize) {
        let old = match object {
            Some(stored) => {
                self.approx_bytes += approx_bytes;
                self.entries.insert(key.to_vec(), Entry { stored, approx_bytes })
            }
            None => self.entries.remove(key),
        };
        if let Some(old) = old {
            self.approx_bytes -= old.approx_bytes;
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The sum of the cached keys' and stored values' lengths: the size of the resource
    /// as the store holds it (ciphertext for encrypted resources). The decoded JSON trees
    /// in memory take a few times this, and a listed object also keeps its serialized JSON
    /// (about its stored size again); it is a gauge to compare resources and follow growth,
    /// not an allocator's count.
    pub fn approx_bytes(&self) -> usize {
        self.approx_bytes
    }

    /// Up to `limit` objects (0 = all) whose keys start with `prefix`, after the key
    /// `after` (exclusive), that `matches` accepts, in key order. `next_after` is set when
    /// the limit was reached and more keys of the prefix follow, matching or not: the
    /// store path continues from there.
    pub fn page(&self, prefix: &[u8], after: Option<&[u8]>, limit: usize, matches: impl Fn(&Value) -> bool) -> CachedPage {
        let start = match after {
            Some(k) if k >= prefix => Bound::Excluded(k.to_vec()),
            _ => Bound::Included(prefix.to_vec()),
        };
        let mut in_prefix = self.entries.range((start, Bound::Unbounded)).take_while(|(k, _)| k.starts_with(prefix));
        let mut items = Vec::new();
        let mut last_key: Option<&Vec<u8>> = None;
        for (key, entry) in in_prefix.by_ref() {
            if matches(&entry.stored.obj) {
                items.push(entry.stored.clone());
                last_key = Some(key);
                if limit > 0 && items.len() == limit {
                    break;
                }
            }
        }
        let full = limit > 0 && items.len() == limit;
        let next_after = match (full, in_prefix.next()) {
            (true, Some(_)) => last_key.cloned(),
            _ => None,
        };
        CachedPage { items, next_after }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn stored(name: &str, app: &str, rv: i64) -> Arc<Stored> {
        Arc::new(Stored::new(json!({"metadata": {"name": name, "labels": {"app": app}, "resourceVersion": rv.to_string()}}), rv))
    }

    fn names(p: &CachedPage) -> Vec<&str> {
        p.items.iter().map(|s| s.obj["metadata"]["name"].as_str().unwrap()).collect()
    }

    /// Three namespaces' objects; `b` has web-1..web-4 alternating app=web/db.
    fn sample() -> CachedObjects {
        let mut c = CachedObjects::default();
        c.apply(b"/r/a/x", Some(stored("x", "web", 1)), 10);
        for i in 1..=4 {
            let app = if i % 2 == 1 { "web" } else { "db" };
            c.apply(format!("/r/b/web-{i}").as_bytes(), Some(stored(&format!("web-{i}"), app, i + 1)), 10);
        }
        c.apply(b"/r/c/y", Some(stored("y", "web", 9)), 10);
        c
    }

    #[test]
    fn a_page_is_the_prefix_in_key_order() {
        let c = sample();
        let p = c.page(b"/r/b/", None, 0, |_| true);
        assert_eq!(names(&p), ["web-1", "web-2", "web-3", "web-4"]);
        assert_eq!(p.next_after, None);
        assert_eq!(names(&c.page(b"/r/", None, 0, |_| true)).len(), 6);
        assert!(c.page(b"/r/d/", None, 0, |_| true).items.is_empty());
    }

    #[test]
    fn limit_gives_a_continue_key_only_when_keys_follow() {
        let c = sample();
        let p = c.page(b"/r/b/", None, 2, |_| true);
        assert_eq!(names(&p), ["web-1", "web-2"]);
        assert_eq!(p.next_after.as_deref(), Some(&b"/r/b/web-2"[..]));
        let p = c.page(b"/r/b/", p.next_after.as_deref(), 2, |_| true);
        assert_eq!(names(&p), ["web-3", "web-4"]);
        assert_eq!(p.next_after, None, "the limit was reached on the prefix's last key");
    }

    #[test]
    fn selectors_filter_before_the_limit_counts() {
        let c = sample();
        let web = |o: &Value| o["metadata"]["labels"]["app"] == "web";
        let p = c.page(b"/r/b/", None, 1, web);
        assert_eq!(names(&p), ["web-1"]);
        assert_eq!(p.next_after.as_deref(), Some(&b"/r/b/web-1"[..]));
        let p = c.page(b"/r/b/", p.next_after.as_deref(), 1, web);
        assert_eq!(names(&p), ["web-3"]);
        // web-4 follows but does not match: the store path would still say "more", and so
        // does the cache; the continued page is then empty.
        assert_eq!(p.next_after.as_deref(), Some(&b"/r/b/web-3"[..]));
        let p = c.page(b"/r/b/", p.next_after.as_deref(), 1, web);
        assert!(p.items.is_empty());
        assert_eq!(p.next_after, None);
        assert_eq!(names(&c.page(b"/r/b/", None, 0, web)), ["web-1", "web-3"]);
    }

    #[test]
    fn an_after_key_outside_the_prefix_starts_at_the_prefix() {
        let c = sample();
        assert_eq!(names(&c.page(b"/r/b/", Some(b"/r/a/zzz"), 0, |_| true)).len(), 4);
    }

    #[test]
    fn updates_and_deletes_keep_count_and_bytes() {
        let mut c = sample();
        assert_eq!((c.len(), c.approx_bytes()), (6, 60));
        c.apply(b"/r/b/web-1", Some(stored("web-1", "db", 20)), 25);
        assert_eq!((c.len(), c.approx_bytes()), (6, 75));
        assert_eq!(c.page(b"/r/b/", None, 1, |_| true).items[0].rv, 20);
        c.apply(b"/r/b/web-1", None, 0);
        c.apply(b"/r/b/absent", None, 0);
        assert_eq!((c.len(), c.approx_bytes()), (5, 50));
        assert_eq!(names(&c.page(b"/r/b/", None, 0, |_| true)), ["web-2", "web-3", "web-4"]);
    }
}
