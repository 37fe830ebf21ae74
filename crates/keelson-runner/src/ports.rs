//! Choosing loopback ports for servers that bind them later.
//!
//! A port found by binding port 0 comes from the kernel's ephemeral range, the same range
//! outgoing connections take their local ports from: between choosing it and the server
//! binding it, any connection (of this process or another) may take it, and the server
//! then fails with "address in use". Ports chosen here lie below the ephemeral range, where
//! only explicit binds go, and one process never hands out the same port twice.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU32, Ordering};

/// Lowest port handed out.
const FIRST: u32 = 20_000;
/// Where the ephemeral range starts when `/proc` does not say.
const DEFAULT_EPHEMERAL_START: u32 = 32_768;

/// Next port to try, as an offset into the range (starts at a per-process offset so that
/// concurrent processes mostly pick different ports).
static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);

/// First port of the kernel's ephemeral range.
fn ephemeral_start() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|p| p.parse().ok()))
        .unwrap_or(DEFAULT_EPHEMERAL_START)
}

/// The offset the first call starts from: different for every process.
fn process_offset(span: u32) -> u32 {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    (std::process::id().wrapping_mul(7919) ^ nanos) % span
}

/// A 127.0.0.1 port that is free now, outside the ephemeral range (see the module docs).
/// Falls back to a kernel-chosen port when the ephemeral range leaves no room below it.
pub fn free_loopback_port() -> std::io::Result<u16> {
    let end = ephemeral_start().min(u32::from(u16::MAX));
    if end <= FIRST + 100 {
        return Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port());
    }
    let span = end - FIRST;
    let _ = NEXT.compare_exchange(u32::MAX, process_offset(span), Ordering::Relaxed, Ordering::Relaxed);
    match pick(&NEXT, span) {
        Some(p) => Ok(p),
        None => Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port()),
    }
}

/// The first bindable port from offset `next` on (advancing it), within
/// `[FIRST, FIRST + span)`; `None` when all are taken.
fn pick(next: &AtomicU32, span: u32) -> Option<u16> {
    (0..span).find_map(|_| {
        let port = (FIRST + next.fetch_add(1, Ordering::Relaxed) % span) as u16;
        TcpListener::bind(("127.0.0.1", port)).is_ok().then_some(port)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_bindable_distinct_and_below_the_ephemeral_range() {
        let start = ephemeral_start();
        let ports: Vec<u16> = (0..50).map(|_| free_loopback_port().expect("port")).collect();
        let distinct: std::collections::BTreeSet<_> = ports.iter().collect();
        assert_eq!(distinct.len(), ports.len(), "a port was handed out twice: {ports:?}");
        for p in &ports {
            if start > FIRST + 100 {
                assert!(u32::from(*p) >= FIRST && u32::from(*p) < start, "port {p} outside [{FIRST}, {start})");
            }
            TcpListener::bind(("127.0.0.1", *p)).unwrap_or_else(|e| panic!("port {p} not bindable: {e}"));
        }
    }

    #[test]
    fn a_port_in_use_is_skipped() {
        let taken = free_loopback_port().expect("port");
        let _holder = TcpListener::bind(("127.0.0.1", taken)).expect("bind the chosen port");
        // A search that starts at the held port moves past it.
        let span = ephemeral_start().min(u32::from(u16::MAX)).saturating_sub(FIRST).max(u32::from(taken) - FIRST + 2);
        let next = AtomicU32::new(u32::from(taken) - FIRST);
        let got = pick(&next, span).expect("a free port");
        assert_ne!(got, taken, "a port in use was handed out");
    }
}
