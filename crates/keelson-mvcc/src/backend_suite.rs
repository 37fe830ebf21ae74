//! Conformance checks every [`KvBackend`] must pass. Compiled into the library (not only
//! under `cfg(test)`) so that engine crates run the same checks on their engine:
//!
//! ```text
//! keelson_mvcc::backend_suite::run_all(&mut || MyBackend::new_temp());
//! ```
//!
//! Each check panics with its name on failure.

use std::sync::mpsc;
use std::time::Duration;

use crate::backend::{KvBackend, ReadView, WriteBatch};

type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// Runs every check, each on a fresh backend from `make`.
pub fn run_all<B: KvBackend>(make: &mut dyn FnMut() -> B) {
    type Check<B> = fn(&B);
    let checks: Vec<(&str, Check<B>)> = vec![
        ("get_put_delete", get_put_delete::<B>),
        ("delete_range", delete_range::<B>),
        ("scan_order_and_bounds", scan_order_and_bounds::<B>),
        ("scan_early_stop", scan_early_stop::<B>),
        ("view_isolation", view_isolation::<B>),
        ("batch_order", batch_order::<B>),
        ("batch_atomicity", batch_atomicity::<B>),
        ("large_values_and_sync", large_values_and_sync::<B>),
    ];
    for (name, check) in checks {
        tracing::info!("backend_suite: {name}");
        let backend = make();
        check(&backend);
    }
}

fn write<B: KvBackend>(b: &B, f: impl FnOnce(&mut WriteBatch)) {
    let mut batch = WriteBatch::default();
    f(&mut batch);
    b.write(batch).expect("backend write failed");
}

fn get<B: KvBackend>(b: &B, k: &[u8]) -> Option<Vec<u8>> {
    b.view().get(k).expect("backend get failed")
}

fn scan<B: KvBackend>(b: &B, start: &[u8], end: &[u8]) -> Pairs {
    let mut out = Vec::new();
    b.view()
        .scan(start, end, &mut |k, v| {
            out.push((k.to_vec(), v.to_vec()));
            true
        })
        .expect("backend scan failed");
    out
}

fn keys(p: &Pairs) -> Vec<Vec<u8>> {
    p.iter().map(|(k, _)| k.clone()).collect()
}

fn get_put_delete<B: KvBackend>(b: &B) {
    assert_eq!(get(b, b"a"), None, "get_put_delete: fresh backend not empty");
    write(b, |w| w.put(b"a".to_vec(), b"1".to_vec()));
    assert_eq!(get(b, b"a"), Some(b"1".to_vec()), "get_put_delete: put not visible");
    write(b, |w| w.put(b"a".to_vec(), b"2".to_vec()));
    assert_eq!(get(b, b"a"), Some(b"2".to_vec()), "get_put_delete: overwrite not visible");
    write(b, |w| w.put(b"a".to_vec(), Vec::new()));
    assert_eq!(get(b, b"a"), Some(Vec::new()), "get_put_delete: empty value is not absence");
    write(b, |w| w.delete(b"a".to_vec()));
    assert_eq!(get(b, b"a"), None, "get_put_delete: delete not visible");
    write(b, |w| w.delete(b"never".to_vec()));
    assert_eq!(get(b, b"never"), None, "get_put_delete: deleting a missing key");
    write(b, |w| w.put(vec![0, 0xff, 0], vec![0xff]));
    assert_eq!(get(b, &[0, 0xff, 0]), Some(vec![0xff]), "get_put_delete: binary key");
    assert_eq!(get(b, &[0, 0xff]), None, "get_put_delete: prefix of a key is not the key");
    // An empty batch is fine.
    b.write(WriteBatch::default()).expect("get_put_delete: empty batch failed");
}

fn delete_range<B: KvBackend>(b: &B) {
    write(b, |w| {
        for k in [&b"a"[..], b"b", b"b\0", b"ba", b"c", b"d"] {
            w.put(k.to_vec(), k.to_vec());
        }
    });
    write(b, |w| w.delete_range(b"b".to_vec(), b"c".to_vec()));
    assert_eq!(
        keys(&scan(b, b"", b"")),
        vec![b"a".to_vec(), b"c".to_vec(), b"d".to_vec()],
        "delete_range: [b, c) must go, c stays"
    );
    // An empty or inverted range deletes nothing.
    write(b, |w| w.delete_range(b"c".to_vec(), b"c".to_vec()));
    write(b, |w| w.delete_range(b"d".to_vec(), b"a".to_vec()));
    assert_eq!(scan(b, b"", b"").len(), 3, "delete_range: empty/inverted range deleted something");
    write(b, |w| w.delete_range(Vec::new(), vec![0xff]));
    assert!(scan(b, b"", b"").is_empty(), "delete_range: [\"\", 0xff) must clear everything");
}

fn scan_order_and_bounds<B: KvBackend>(b: &B) {
    let mut all: Vec<Vec<u8>> = vec![
        b"m".to_vec(),
        b"a".to_vec(),
        vec![0],
        vec![],
        b"ab".to_vec(),
        b"a\0".to_vec(),
        vec![0xff],
        vec![0xff, 0xff, 1],
        b"z".to_vec(),
        b"b".to_vec(),
    ];
    write(b, |w| {
        for (i, k) in all.iter().enumerate() {
            w.put(k.clone(), vec![i as u8]);
        }
    });
    all.sort();
    assert_eq!(keys(&scan(b, b"", b"")), all, "scan_order_and_bounds: full scan order");
    let in_range = |s: &[u8], e: &[u8]| -> Vec<Vec<u8>> {
        all.iter()
            .filter(|k| k.as_slice() >= s && (e.is_empty() || k.as_slice() < e))
            .cloned()
            .collect()
    };
    let cases: Vec<(&[u8], &[u8])> = vec![
        (b"a", b"b"),
        (b"a", b"ab"),
        (b"a\0", b"a\x01"),
        (b"b", b""),
        (b"", b"a"),
        (&[0xff], b""),
        (b"c", b"m"),
        (b"m", b"m"),
        (b"z", b"a"),
        (b"zz", b""),
    ];
    for (s, e) in cases {
        assert_eq!(
            keys(&scan(b, s, e)),
            in_range(s, e),
            "scan_order_and_bounds: scan [{s:?}, {e:?})"
        );
    }
    // Values come with their keys.
    for (k, v) in scan(b, b"", b"") {
        assert_eq!(get(b, &k), Some(v), "scan_order_and_bounds: scanned value differs from get");
    }
}

fn scan_early_stop<B: KvBackend>(b: &B) {
    write(b, |w| {
        for i in 0..10u8 {
            w.put(vec![b'k', i], vec![i]);
        }
    });
    let mut seen = Vec::new();
    b.view()
        .scan(b"k", b"", &mut |k, _| {
            seen.push(k.to_vec());
            seen.len() < 3
        })
        .expect("scan failed");
    assert_eq!(seen, vec![vec![b'k', 0], vec![b'k', 1], vec![b'k', 2]], "scan_early_stop");
}

/// A view must not see writes made after it was taken. Writers run on another thread:
/// an engine may make writers wait for open views (the in-memory one does), but the
/// view must still show the old contents.
fn view_isolation<B: KvBackend>(b: &B) {
    write(b, |w| {
        w.put(b"x".to_vec(), b"old".to_vec());
        w.put(b"y".to_vec(), b"old".to_vec());
    });
    let view = b.view();
    let (tx, rx) = mpsc::channel::<()>();
    std::thread::scope(|s| {
        s.spawn(|| {
            write(b, |w| {
                w.put(b"x".to_vec(), b"new".to_vec());
                w.delete(b"y".to_vec());
                w.put(b"z".to_vec(), b"new".to_vec());
            });
            let _ = tx.send(());
        });
        // Give the writer time to finish (or to block on the view).
        let _ = rx.recv_timeout(Duration::from_millis(200));
        assert_eq!(view.get(b"x").expect("get"), Some(b"old".to_vec()), "view_isolation: get");
        assert_eq!(view.get(b"y").expect("get"), Some(b"old".to_vec()), "view_isolation: delete");
        let mut seen = Vec::new();
        view.scan(b"", b"", &mut |k, v| {
            seen.push((k.to_vec(), v.to_vec()));
            true
        })
        .expect("scan");
        assert_eq!(
            seen,
            vec![(b"x".to_vec(), b"old".to_vec()), (b"y".to_vec(), b"old".to_vec())],
            "view_isolation: scan saw a later write"
        );
        drop(view);
    });
    assert_eq!(get(b, b"x"), Some(b"new".to_vec()), "view_isolation: new view misses the write");
    assert_eq!(get(b, b"y"), None, "view_isolation: new view misses the delete");
}

fn batch_order<B: KvBackend>(b: &B) {
    write(b, |w| {
        w.put(b"a".to_vec(), b"1".to_vec());
        w.delete(b"a".to_vec());
        w.put(b"a".to_vec(), b"2".to_vec());
        w.put(b"b".to_vec(), b"1".to_vec());
        w.delete(b"b".to_vec());
    });
    assert_eq!(get(b, b"a"), Some(b"2".to_vec()), "batch_order: put after delete");
    assert_eq!(get(b, b"b"), None, "batch_order: delete after put");
    write(b, |w| {
        w.put(b"r1".to_vec(), b"x".to_vec());
        w.delete_range(b"r".to_vec(), b"s".to_vec());
        w.put(b"r2".to_vec(), b"y".to_vec());
    });
    assert_eq!(get(b, b"r1"), None, "batch_order: delete_range after put");
    assert_eq!(get(b, b"r2"), Some(b"y".to_vec()), "batch_order: put after delete_range");
    assert_eq!(get(b, b"a"), Some(b"2".to_vec()), "batch_order: delete_range out of bounds");
}

fn batch_atomicity<B: KvBackend>(b: &B) {
    // A view taken before a batch sees none of it; one taken after sees all of it.
    write(b, |w| w.put(b"base".to_vec(), b"0".to_vec()));
    let before: Pairs = scan(b, b"", b"");
    write(b, |w| {
        for i in 0..500u32 {
            w.put(format!("k{i:04}").into_bytes(), i.to_be_bytes().to_vec());
        }
        w.delete(b"base".to_vec());
    });
    let after = scan(b, b"", b"");
    assert_eq!(before.len(), 1, "batch_atomicity: setup");
    assert_eq!(after.len(), 500, "batch_atomicity: not every op of the batch is visible");
    assert!(after.iter().all(|(k, _)| k.starts_with(b"k")), "batch_atomicity: delete lost");
    // Concurrent readers see either all of a batch or none of it.
    write(b, |w| {
        for i in 0..50u32 {
            w.put(format!("k{i:04}").into_bytes(), 0u32.to_be_bytes().to_vec());
        }
    });
    std::thread::scope(|s| {
        s.spawn(|| {
            for round in 1..=20u32 {
                write(b, |w| {
                    for i in 0..50u32 {
                        w.put(format!("k{i:04}").into_bytes(), round.to_be_bytes().to_vec());
                    }
                });
            }
        });
        for _ in 0..50 {
            let pairs = scan(b, b"k0000", b"k0050");
            assert_eq!(pairs.len(), 50, "batch_atomicity: scan length");
            let first = &pairs[0].1;
            assert!(
                pairs.iter().all(|(_, v)| v == first),
                "batch_atomicity: a view saw half a batch"
            );
        }
    });
}

fn large_values_and_sync<B: KvBackend>(b: &B) {
    let big: Vec<u8> = (0..(3 << 20)).map(|i: u32| (i % 251) as u8).collect();
    write(b, |w| w.put(b"big".to_vec(), big.clone()));
    b.sync().expect("large_values_and_sync: sync failed");
    assert_eq!(get(b, b"big").as_deref(), Some(big.as_slice()), "large_values_and_sync");
}
