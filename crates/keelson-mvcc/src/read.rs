//! Range reads over one backend view: at the current revision (through the `c/` index,
//! optionally overlaid with a transaction's uncommitted changes) and at a past revision
//! (through the `h/` history).

use std::collections::BTreeMap;

use crate::backend::ReadView;
use crate::layout::{self, CurrentRecord, HistRecord, CUR, HIST};
use crate::store::MvccError;
use crate::types::{KeyRange, KeyValue, RangeRequest, RangeResponse, Revision};

/// A transaction's pending changes: key → new current record (`None` = deleted).
pub(crate) type Overlay = BTreeMap<Vec<u8>, Option<CurrentRecord>>;

/// Visitor of live keys: returns `Ok(false)` to stop.
pub(crate) type Visit<'v> = dyn FnMut(&Live<'_>) -> Result<bool, MvccError> + 'v;

/// A live key met by [`scan_current`]; decoding is deferred until asked for, so that
/// counting keys decodes nothing.
pub(crate) enum Live<'a> {
    /// Stored in the `c/` index: backend key and encoded record.
    Stored { index_key: &'a [u8], raw: &'a [u8] },
    /// Written earlier in the running transaction.
    Pending { key: &'a [u8], rec: &'a CurrentRecord },
}

impl Live<'_> {
    pub fn key(&self) -> Result<Vec<u8>, MvccError> {
        match self {
            Live::Stored { index_key, .. } => layout::parse_cur_key(index_key)
                .ok_or_else(|| MvccError::Corrupt(format!("bad index key {index_key:?}"))),
            Live::Pending { key, .. } => Ok(key.to_vec()),
        }
    }

    pub fn record(&self) -> Result<CurrentRecord, MvccError> {
        match self {
            Live::Stored { raw, .. } => decode("current record", raw),
            Live::Pending { rec, .. } => Ok((*rec).clone()),
        }
    }

    pub fn kv(&self) -> Result<KeyValue, MvccError> {
        Ok(self.record()?.to_kv(&self.key()?))
    }
}

pub(crate) fn decode<T: serde::de::DeserializeOwned>(what: &str, b: &[u8]) -> Result<T, MvccError> {
    postcard::from_bytes(b).map_err(|e| MvccError::Corrupt(format!("undecodable {what}: {e}")))
}

pub(crate) fn encode<T: serde::Serialize>(v: &T) -> Result<Vec<u8>, MvccError> {
    postcard::to_allocvec(v).map_err(|e| MvccError::Corrupt(format!("unencodable record: {e}")))
}

/// Reads a big-endian revision meta key (absent = 0).
pub(crate) fn read_rev_meta<V: ReadView>(view: &V, key: &[u8]) -> Result<Revision, MvccError> {
    match view.get(key)? {
        None => Ok(0),
        Some(b) => layout::decode_rev(&b)
            .ok_or_else(|| MvccError::Corrupt(format!("bad revision under {key:?}"))),
    }
}

/// The current record of `key` in the view (ignoring any overlay).
pub(crate) fn get_current<V: ReadView>(
    view: &V,
    key: &[u8],
) -> Result<Option<CurrentRecord>, MvccError> {
    match view.get(&layout::cur_key(key))? {
        None => Ok(None),
        Some(b) => Ok(Some(decode("current record", &b)?)),
    }
}

/// Builds a [`RangeResponse`] honouring limit / keys_only / count_only.
pub(crate) struct Collector<'r> {
    req: &'r RangeRequest,
    pub resp: RangeResponse,
}

impl<'r> Collector<'r> {
    pub fn new(req: &'r RangeRequest) -> Self {
        Self { req, resp: RangeResponse::default() }
    }

    /// Offers the next key in order; `make` is only called if the kv is returned.
    fn offer(
        &mut self,
        make: impl FnOnce() -> Result<KeyValue, MvccError>,
    ) -> Result<(), MvccError> {
        self.resp.count += 1;
        if self.req.count_only {
            return Ok(());
        }
        if self.req.limit > 0 && self.resp.kvs.len() as u64 >= self.req.limit {
            self.resp.more = true;
            return Ok(());
        }
        let mut kv = make()?;
        if self.req.keys_only {
            kv.value.clear();
        }
        self.resp.kvs.push(kv);
        Ok(())
    }
}

/// Visits every live key of `range` at the view's current revision merged with
/// `overlay`, in key order, until `visit` returns `Ok(false)`.
pub(crate) fn scan_current<V: ReadView>(
    view: &V,
    range: &KeyRange,
    overlay: Option<&Overlay>,
    visit: &mut Visit<'_>,
) -> Result<(), MvccError> {
    let Some((start, end)) = layout::scan_bounds(CUR, range) else {
        return Ok(());
    };
    let empty = Overlay::new();
    let overlay = overlay.unwrap_or(&empty);
    let mut pending =
        overlay.range(range.key.clone()..).take_while(|(k, _)| range.contains(k)).peekable();
    let mut err: Option<MvccError> = None;
    let mut stopped = false;
    view.scan(&start, &end, &mut |k, v| {
        let step = (|| -> Result<bool, MvccError> {
            let stored = Live::Stored { index_key: k, raw: v };
            if pending.peek().is_none() {
                return visit(&stored);
            }
            let key = stored.key()?;
            if !drain_overlay(Some(&key), &mut pending, visit)? {
                return Ok(false);
            }
            if let Some((ok, orec)) = pending.peek() {
                if ok.as_slice() == key.as_slice() {
                    let orec = *orec;
                    pending.next();
                    return match orec {
                        Some(rec) => visit(&Live::Pending { key: &key, rec }),
                        None => Ok(true),
                    };
                }
            }
            visit(&stored)
        })();
        match step {
            Ok(true) => true,
            Ok(false) => {
                stopped = true;
                false
            }
            Err(e) => {
                err = Some(e);
                false
            }
        }
    })?;
    if let Some(e) = err {
        return Err(e);
    }
    if !stopped {
        drain_overlay(None, &mut pending, visit)?;
    }
    Ok(())
}

/// Visits the live overlay entries whose key is `< upto` (all if `None`); `Ok(false)` if
/// `visit` asked to stop.
fn drain_overlay<'o, I>(
    upto: Option<&[u8]>,
    pending: &mut std::iter::Peekable<I>,
    visit: &mut Visit<'_>,
) -> Result<bool, MvccError>
where
    I: Iterator<Item = (&'o Vec<u8>, &'o Option<CurrentRecord>)>,
{
    while let Some((k, rec)) = pending.peek() {
        if upto.is_some_and(|u| k.as_slice() >= u) {
            break;
        }
        let (k, rec) = (*k, *rec);
        pending.next();
        if let Some(rec) = rec {
            if !visit(&Live::Pending { key: k, rec })? {
                return Ok(false);
            }
        }
    }
    Ok(true)
}

/// A range read at the current revision of the view, merged with `overlay`.
pub(crate) fn range_current<V: ReadView>(
    view: &V,
    req: &RangeRequest,
    overlay: Option<&Overlay>,
) -> Result<RangeResponse, MvccError> {
    let mut coll = Collector::new(req);
    scan_current(view, &req.range, overlay, &mut |live| {
        coll.offer(|| live.kv())?;
        Ok(true)
    })?;
    Ok(coll.resp)
}

/// A range read at past revision `rev` through the history (which must still hold it).
pub(crate) fn range_at<V: ReadView>(
    view: &V,
    req: &RangeRequest,
    rev: Revision,
) -> Result<RangeResponse, MvccError> {
    let mut coll = Collector::new(req);
    let Some((start, end)) = layout::scan_bounds(HIST, &req.range) else {
        return Ok(coll.resp);
    };
    // The newest entry with revision <= rev of the key being scanned:
    // (encoded key prefix, full backend key, raw record).
    let mut best: Option<(Vec<u8>, Vec<u8>, Vec<u8>)> = None;
    let mut err: Option<MvccError> = None;
    let finish = |best: Option<(Vec<u8>, Vec<u8>, Vec<u8>)>,
                  coll: &mut Collector<'_>|
     -> Result<(), MvccError> {
        let Some((_, full, raw)) = best else { return Ok(()) };
        let (key, r, _) = layout::parse_hist_key(&full)
            .ok_or_else(|| MvccError::Corrupt(format!("bad history key {full:?}")))?;
        let rec: HistRecord = decode("history record", &raw)?;
        if rec.deleted {
            return Ok(());
        }
        coll.offer(|| Ok(rec.to_kv(&key, r)))
    };
    view.scan(&start, &end, &mut |k, v| {
        let step = (|| -> Result<(), MvccError> {
            if k.len() < HIST.len() + 14 {
                return Err(MvccError::Corrupt(format!("bad history key {k:?}")));
            }
            let (head, suffix) = k.split_at(k.len() - 12);
            let (r, _) = layout::parse_rev_suffix(suffix)
                .ok_or_else(|| MvccError::Corrupt(format!("bad history key {k:?}")))?;
            let same_key = best.as_ref().is_some_and(|(h, _, _)| h.as_slice() == head);
            if !same_key {
                finish(best.take(), &mut coll)?;
            }
            if r <= rev {
                best = Some((head.to_vec(), k.to_vec(), v.to_vec()));
            }
            Ok(())
        })();
        match step {
            Ok(()) => true,
            Err(e) => {
                err = Some(e);
                false
            }
        }
    })?;
    if let Some(e) = err {
        return Err(e);
    }
    finish(best, &mut coll)?;
    Ok(coll.resp)
}
