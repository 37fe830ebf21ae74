//! A read view with not-yet-written changes layered over it, so several transactions
//! can be applied in one backend write while each sees the ones before it.

use std::collections::BTreeMap;

use crate::backend::{BackendError, BatchOp, ReadView, WriteBatch};

/// `base` as it will read once the absorbed batches are written.
pub(crate) struct PendingView<'a, V: ReadView> {
    base: &'a V,
    /// Raw backend key → value, or `None` for a pending delete.
    pending: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
}

impl<'a, V: ReadView> PendingView<'a, V> {
    pub fn new(base: &'a V) -> Self {
        Self { base, pending: BTreeMap::new() }
    }

    /// Layers `batch` over the view. Returns `false` (absorbing nothing) if the batch has
    /// a range delete, which this view cannot represent; the caller must write first.
    pub fn absorb(&mut self, batch: &WriteBatch) -> bool {
        if batch.ops.iter().any(|op| matches!(op, BatchOp::DeleteRange { .. })) {
            return false;
        }
        for op in &batch.ops {
            match op {
                BatchOp::Put { key, value } => {
                    self.pending.insert(key.clone(), Some(value.clone()));
                }
                BatchOp::Delete { key } => {
                    self.pending.insert(key.clone(), None);
                }
                BatchOp::DeleteRange { .. } => unreachable!("checked above"),
            }
        }
        true
    }
}

impl<V: ReadView> ReadView for PendingView<'_, V> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, BackendError> {
        match self.pending.get(key) {
            Some(v) => Ok(v.clone()),
            None => self.base.get(key),
        }
    }

    fn scan(&self, start: &[u8], end: &[u8], visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<(), BackendError> {
        let mut pending = self
            .pending
            .range(start.to_vec()..)
            .take_while(|(k, _)| end.is_empty() || k.as_slice() < end)
            .peekable();
        let mut stopped = false;
        {
            let mut merged = |k: &[u8], v: &[u8]| -> bool {
                // Pending keys before this stored key come first.
                while let Some((pk, pv)) = pending.peek() {
                    if pk.as_slice() >= k {
                        break;
                    }
                    if let Some(val) = pv {
                        if !visit(pk, val) {
                            stopped = true;
                            return false;
                        }
                    }
                    pending.next();
                }
                // A pending change of this very key replaces the stored value.
                if let Some((pk, pv)) = pending.peek() {
                    if pk.as_slice() == k {
                        let keep_going = match pv {
                            Some(val) => visit(pk, val),
                            None => true,
                        };
                        pending.next();
                        stopped = !keep_going;
                        return keep_going;
                    }
                }
                let keep_going = visit(k, v);
                stopped = !keep_going;
                keep_going
            };
            self.base.scan(start, end, &mut merged)?;
        }
        if !stopped {
            for (pk, pv) in pending {
                if let Some(val) = pv {
                    if !visit(pk, val) {
                        break;
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::KvBackend;
    use crate::MemBackend;

    fn scan_all(v: &impl ReadView, start: &[u8], end: &[u8], limit: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        v.scan(start, end, &mut |k, val| {
            out.push((k.to_vec(), val.to_vec()));
            out.len() < limit
        })
        .expect("scan");
        out
    }

    #[test]
    fn pending_changes_merge_with_stored_keys_in_order() {
        let backend = MemBackend::new();
        let mut base = WriteBatch::default();
        for k in ["b", "d", "f", "h"] {
            base.put(k, format!("stored-{k}"));
        }
        backend.write(base).expect("write");
        let view = backend.view();
        let mut pv = PendingView::new(&view);
        let mut b = WriteBatch::default();
        b.put("a", "new-a");
        b.put("d", "new-d");
        b.delete("f");
        b.put("g", "new-g");
        b.put("z", "new-z");
        assert!(pv.absorb(&b));
        let keys: Vec<(Vec<u8>, Vec<u8>)> = scan_all(&pv, b"", b"", usize::MAX);
        let expect: Vec<(Vec<u8>, Vec<u8>)> = [("a", "new-a"), ("b", "stored-b"), ("d", "new-d"), ("g", "new-g"), ("h", "stored-h"), ("z", "new-z")]
            .iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect();
        assert_eq!(keys, expect);
        // Bounds and early stop.
        let mid = scan_all(&pv, b"c", b"h", usize::MAX);
        assert_eq!(mid.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(), vec![b"d".to_vec(), b"g".to_vec()]);
        assert_eq!(scan_all(&pv, b"", b"", 2).len(), 2);
        assert_eq!(pv.get(b"f").expect("get"), None);
        assert_eq!(pv.get(b"d").expect("get"), Some(b"new-d".to_vec()));
        assert_eq!(pv.get(b"h").expect("get"), Some(b"stored-h".to_vec()));
    }

    #[test]
    fn range_deletes_are_refused() {
        let backend = MemBackend::new();
        let view = backend.view();
        let mut pv = PendingView::new(&view);
        let mut b = WriteBatch::default();
        b.put("a", "1");
        b.delete_range("a", "z");
        assert!(!pv.absorb(&b));
        assert_eq!(pv.get(b"a").expect("get"), None, "a refused batch must leave no trace");
    }
}
