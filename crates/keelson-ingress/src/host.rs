//! Host names as the Ingress spec matches them (pure): an exact name, or `*.suffix`
//! matching exactly one more label in front of `suffix` (`*.foo.com` matches
//! `bar.foo.com`, neither `foo.com` nor `baz.bar.foo.com`). Used for rules and for
//! certificates alike.

use std::collections::BTreeMap;

/// A host as a request names it: lowercased, without a port or a final dot.
pub fn normalize(host: &str) -> String {
    let h = host.trim();
    let h = if let Some(rest) = h.strip_prefix('[') {
        // An IPv6 literal: `[::1]:80` → `::1`.
        rest.split(']').next().unwrap_or(rest)
    } else {
        match h.rsplit_once(':') {
            Some((name, port)) if !name.contains(':') && port.chars().all(|c| c.is_ascii_digit()) => name,
            _ => h,
        }
    };
    h.trim_end_matches('.').to_ascii_lowercase()
}

/// Values by host pattern: exact names and `*.` wildcards.
#[derive(Debug, Clone)]
pub struct HostMap<T> {
    exact: BTreeMap<String, T>,
    /// By the suffix after `*.`.
    wildcard: BTreeMap<String, T>,
}

impl<T> Default for HostMap<T> {
    fn default() -> Self {
        Self { exact: BTreeMap::new(), wildcard: BTreeMap::new() }
    }
}

impl<T> HostMap<T> {
    /// The value for `pattern` (`name` or `*.suffix`), made by `make` if absent.
    pub fn entry_or(&mut self, pattern: &str, make: impl FnOnce() -> T) -> &mut T {
        let p = pattern.trim_end_matches('.').to_ascii_lowercase();
        match p.strip_prefix("*.") {
            Some(suffix) => self.wildcard.entry(suffix.to_string()).or_insert_with(make),
            None => self.exact.entry(p).or_insert_with(make),
        }
    }

    /// The value for `host` (already [`normalize`]d): its exact entry, else the wildcard
    /// entry of its parent domain.
    pub fn lookup(&self, host: &str) -> Option<&T> {
        if let Some(v) = self.exact.get(host) {
            return Some(v);
        }
        let (first, parent) = host.split_once('.')?;
        if first.is_empty() {
            return None;
        }
        self.wildcard.get(parent)
    }

    /// Whether a pattern equal to `pattern` has a value.
    pub fn contains_pattern(&self, pattern: &str) -> bool {
        let p = pattern.trim_end_matches('.').to_ascii_lowercase();
        match p.strip_prefix("*.") {
            Some(suffix) => self.wildcard.contains_key(suffix),
            None => self.exact.contains_key(&p),
        }
    }

    /// Calls `f` with every pattern (`name` or `*.suffix`) and its value.
    pub fn for_each_pattern(&self, mut f: impl FnMut(&str, &T)) {
        self.exact.iter().for_each(|(k, v)| f(k, v));
        self.wildcard.iter().for_each(|(k, v)| f(&format!("*.{k}"), v));
    }

    /// Every value, exact entries first.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.exact.values_mut().chain(self.wildcard.values_mut())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_lose_port_case_and_final_dot() {
        assert_eq!(normalize("API.Shop.test:8080"), "api.shop.test");
        assert_eq!(normalize("web.shop.test."), "web.shop.test");
        assert_eq!(normalize("[::1]:443"), "::1");
        assert_eq!(normalize("10.0.0.1"), "10.0.0.1");
    }

    #[test]
    fn a_wildcard_matches_exactly_one_label_and_exact_names_win() {
        let mut m = HostMap::default();
        *m.entry_or("*.foo.com", || 0) = 1;
        *m.entry_or("exact.foo.com", || 0) = 2;
        assert_eq!(m.lookup("bar.foo.com"), Some(&1));
        assert_eq!(m.lookup("exact.foo.com"), Some(&2));
        assert_eq!(m.lookup("baz.bar.foo.com"), None);
        assert_eq!(m.lookup("foo.com"), None);
        assert_eq!(m.lookup(".foo.com"), None);
        assert!(m.contains_pattern("*.FOO.com") && !m.contains_pattern("*.bar.com"));
    }
}
