//! Failed authentication, limited per source address: each source has a bucket of
//! [`AuthFailureLimits::burst`] failed attempts, refilled one every
//! [`AuthFailureLimits::refill_every`]. A source whose bucket is empty is locked out:
//! every request it makes that would authenticate with a bearer token (or with nothing)
//! is answered 429 with `Retry-After` until a token refills, without looking at the
//! credential, so guessing tokens costs the guesser time, not the server. Client
//! certificates are never limited: the TLS handshake verified them before any request.
//!
//! Pure over the time it is given; the API server keeps one [`AuthFailures`] per server.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How many failed attempts a source may make, and how fast it earns them back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AuthFailureLimits {
    /// Failed attempts in a row before the source is locked out (0: no limit).
    pub burst: u32,
    /// One more attempt is earned back after this long.
    pub refill_every: Duration,
}

impl Default for AuthFailureLimits {
    /// 10 failures at once, then one every 6 s (10 a minute).
    fn default() -> Self {
        Self { burst: 10, refill_every: Duration::from_secs(6) }
    }
}

/// Sources tracked at most; beyond it those with the most attempts left go first.
const MAX_SOURCES: usize = 10_000;

/// The failure buckets of one API server. Each source's bucket is kept as the time its
/// failures would be paid off (the generic cell rate algorithm): every failure moves it
/// [`AuthFailureLimits::refill_every`] later, and a source is locked out while that time
/// is more than `burst - 1` refills ahead.
#[derive(Debug)]
pub struct AuthFailures {
    limits: AuthFailureLimits,
    paid_off: Mutex<HashMap<IpAddr, Instant>>,
}

impl AuthFailures {
    pub fn new(limits: AuthFailureLimits) -> Self {
        Self { limits, paid_off: Mutex::new(HashMap::new()) }
    }

    /// Whether `source` may try to authenticate at `now`; `Err(wait)` while it is locked
    /// out, `wait` being how long until it may try once more.
    pub fn check(&self, source: IpAddr, now: Instant) -> Result<(), Duration> {
        if self.limits.burst == 0 {
            return Ok(());
        }
        let paid_off = self.paid_off.lock().expect("auth failures lock");
        let Some(at) = paid_off.get(&source_key(source)) else { return Ok(()) };
        let ahead = at.saturating_duration_since(now);
        match ahead.checked_sub(self.allowance()) {
            Some(wait) if !wait.is_zero() => Err(wait),
            _ => Ok(()),
        }
    }

    /// `source` failed to authenticate at `now`.
    pub fn failed(&self, source: IpAddr, now: Instant) {
        if self.limits.burst == 0 {
            return;
        }
        let source = source_key(source);
        let mut paid_off = self.paid_off.lock().expect("auth failures lock");
        let from = paid_off.get(&source).copied().filter(|at| *at > now).unwrap_or(now);
        paid_off.insert(source, from + self.limits.refill_every);
        if paid_off.len() > MAX_SOURCES {
            // Paid off: nothing to remember. Then, if still too many, the least indebted.
            paid_off.retain(|_, at| *at > now);
            if paid_off.len() > MAX_SOURCES {
                let mut by_debt: Vec<(IpAddr, Instant)> = paid_off.iter().map(|(ip, at)| (*ip, *at)).collect();
                by_debt.sort_by_key(|(_, at)| *at);
                // A tenth more than needed, so a stream of new sources sorts once in a while.
                let excess = paid_off.len() - MAX_SOURCES + MAX_SOURCES / 10;
                for (ip, _) in by_debt.into_iter().take(excess) {
                    paid_off.remove(&ip);
                }
            }
        }
    }

    /// How far ahead a source's debt may run before it is locked out.
    fn allowance(&self) -> Duration {
        self.limits.refill_every * self.limits.burst.saturating_sub(1)
    }

    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.paid_off.lock().unwrap().len()
    }
}

/// The address a source is counted under: IPv4 as it is (an IPv4-mapped IPv6 address
/// as its IPv4 address), IPv6 by its /64, which one host usually has whole.
fn source_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(std::net::Ipv6Addr::from(u128::from(v6) & !((1u128 << 64) - 1))),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[test]
    fn a_source_is_locked_out_after_its_burst_and_earns_attempts_back() {
        let f = AuthFailures::new(AuthFailureLimits { burst: 3, refill_every: Duration::from_secs(6) });
        let t0 = Instant::now();
        for _ in 0..3 {
            assert_eq!(f.check(ip(1), t0), Ok(()));
            f.failed(ip(1), t0);
        }
        assert_eq!(f.check(ip(1), t0), Err(Duration::from_secs(6)));
        assert_eq!(f.check(ip(1), t0 + Duration::from_secs(2)), Err(Duration::from_secs(4)));
        // Another source is not affected.
        assert_eq!(f.check(ip(2), t0), Ok(()));
        // One attempt earned back: one more failure locks it out again.
        let t1 = t0 + Duration::from_secs(6);
        assert_eq!(f.check(ip(1), t1), Ok(()));
        f.failed(ip(1), t1);
        assert!(f.check(ip(1), t1).is_err());
        // Never more than the burst, however long it waited.
        let later = t1 + Duration::from_secs(3600);
        for _ in 0..3 {
            assert_eq!(f.check(ip(1), later), Ok(()));
            f.failed(ip(1), later);
        }
        assert!(f.check(ip(1), later).is_err());
    }

    #[test]
    fn an_ipv6_host_counts_by_its_slash_64() {
        let f = AuthFailures::new(AuthFailureLimits { burst: 2, refill_every: Duration::from_secs(6) });
        let t0 = Instant::now();
        f.failed("2001:db8:1:2::1".parse().unwrap(), t0);
        f.failed("2001:db8:1:2:ffff::9".parse().unwrap(), t0);
        assert!(f.check("2001:db8:1:2::77".parse().unwrap(), t0).is_err(), "the same /64");
        assert_eq!(f.check("2001:db8:1:3::1".parse().unwrap(), t0), Ok(()), "another /64");
        f.failed("::ffff:10.0.0.5".parse().unwrap(), t0);
        f.failed(ip(5), t0);
        assert!(f.check(ip(5), t0).is_err(), "an IPv4-mapped address is its IPv4 address");
    }

    #[test]
    fn no_limit_at_zero_burst() {
        let f = AuthFailures::new(AuthFailureLimits { burst: 0, refill_every: Duration::from_secs(6) });
        let t0 = Instant::now();
        for _ in 0..100 {
            f.failed(ip(1), t0);
        }
        assert_eq!(f.check(ip(1), t0), Ok(()));
    }

    #[test]
    fn the_tracked_sources_are_bounded() {
        let f = AuthFailures::new(AuthFailureLimits { burst: 2, refill_every: Duration::from_secs(1) });
        let t0 = Instant::now();
        for i in 0..(MAX_SOURCES as u32 + 50) {
            f.failed(IpAddr::from(i.to_be_bytes()), t0);
        }
        assert!(f.tracked() <= MAX_SOURCES, "{}", f.tracked());
        // Sources whose debts are paid off are forgotten first: going over the bound
        // again later leaves only the new ones.
        let fresh = MAX_SOURCES - f.tracked() + 1;
        for j in 0..fresh as u32 {
            f.failed(IpAddr::from((0xAB00_0000 + j).to_be_bytes()), t0 + Duration::from_secs(10));
        }
        assert_eq!(f.tracked(), fresh);
    }
}
