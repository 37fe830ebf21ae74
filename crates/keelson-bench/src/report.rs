//! Latency summaries and the bench's output (table and JSON).

use serde::Serialize;

use crate::percentile::nearest_rank;

/// One phase at one client count.
#[derive(Clone, Debug, Serialize)]
pub struct PhaseResult {
    pub clients: usize,
    pub ops: u64,
    pub errors: u64,
    pub ops_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl PhaseResult {
    /// Summarises latencies (microseconds) measured over `secs` seconds.
    pub fn from_latencies(clients: usize, mut lat_us: Vec<u32>, errors: u64, secs: f64) -> Self {
        lat_us.sort_unstable();
        let pct = |p: f64| nearest_rank(lat_us.len(), p).map_or(0.0, |i| f64::from(lat_us[i]) / 1000.0);
        Self {
            clients,
            ops: lat_us.len() as u64,
            errors,
            ops_per_s: lat_us.len() as f64 / secs,
            p50_ms: pct(0.50),
            p99_ms: pct(0.99),
            max_ms: lat_us.last().map(|v| f64::from(*v) / 1000.0).unwrap_or(0.0),
        }
    }
}

/// Everything measured on one system.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SystemReport {
    pub writes: Vec<PhaseResult>,
    pub linearizable_reads: Vec<PhaseResult>,
    pub serializable_reads: Vec<PhaseResult>,
}

impl SystemReport {
    /// The JSON object for this system: headline figures at the largest client count,
    /// then every phase.
    pub fn to_json(&self, params: &serde_json::Value) -> serde_json::Value {
        let last = |v: &Vec<PhaseResult>| v.iter().max_by_key(|p| p.clients).cloned();
        let w = last(&self.writes);
        let r = last(&self.linearizable_reads);
        let s = last(&self.serializable_reads);
        serde_json::json!({
            "write_ops_per_s": w.as_ref().map(|p| p.ops_per_s),
            "write_p50_ms": w.as_ref().map(|p| p.p50_ms),
            "write_p99_ms": w.as_ref().map(|p| p.p99_ms),
            "read_ops_per_s": r.as_ref().map(|p| p.ops_per_s),
            "read_p50_ms": r.as_ref().map(|p| p.p50_ms),
            "read_p99_ms": r.as_ref().map(|p| p.p99_ms),
            "serializable_read_ops_per_s": s.as_ref().map(|p| p.ops_per_s),
            "serializable_read_p99_ms": s.as_ref().map(|p| p.p99_ms),
            "params": params,
            "phases": {
                "write": self.writes,
                "linearizable_read": self.linearizable_reads,
                "serializable_read": self.serializable_reads,
            },
        })
    }
}

/// A human-readable side-by-side table.
pub fn print_table(systems: &[(&str, &SystemReport)]) {
    println!(
        "{:<8} {:<18} {:>7} {:>11} {:>9} {:>9} {:>9} {:>7}",
        "system", "phase", "clients", "ops/s", "p50 ms", "p99 ms", "max ms", "errors"
    );
    for (name, rep) in systems {
        for (phase, results) in [
            ("write", &rep.writes),
            ("linearizable-read", &rep.linearizable_reads),
            ("serializable-read", &rep.serializable_reads),
        ] {
            for p in results {
                println!(
                    "{:<8} {:<18} {:>7} {:>11.0} {:>9.2} {:>9.2} {:>9.2} {:>7}",
                    name, phase, p.clients, p.ops_per_s, p.p50_ms, p.p99_ms, p.max_ms, p.errors
                );
            }
        }
    }
    if let [(a, ka), (b, kb)] = systems {
        println!();
        println!("ratios {a}/{b} (throughput; p99 latency):");
        for (phase, x, y) in [
            ("write", &ka.writes, &kb.writes),
            ("linearizable-read", &ka.linearizable_reads, &kb.linearizable_reads),
            ("serializable-read", &ka.serializable_reads, &kb.serializable_reads),
        ] {
            for (p, q) in x.iter().zip(y.iter()) {
                println!(
                    "  {:<18} clients {:>4}: throughput x{:.2}  p99 x{:.2}",
                    phase,
                    p.clients,
                    p.ops_per_s / q.ops_per_s.max(1e-9),
                    p.p99_ms / q.p99_ms.max(1e-9)
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_known_latencies() {
        let lat: Vec<u32> = (1..=100).map(|i| i * 1000).collect(); // 1..100 ms
        let p = PhaseResult::from_latencies(4, lat, 2, 2.0);
        assert_eq!(p.ops, 100);
        assert_eq!(p.errors, 2);
        assert!((p.ops_per_s - 50.0).abs() < 1e-9);
        assert!((p.p50_ms - 50.0).abs() < 1e-9);
        assert!((p.p99_ms - 99.0).abs() < 1e-9);
        assert!((p.max_ms - 100.0).abs() < 1e-9);
    }

    #[test]
    fn empty_phase_has_zero_figures() {
        let p = PhaseResult::from_latencies(1, vec![], 5, 1.0);
        assert_eq!((p.ops, p.p99_ms, p.ops_per_s), (0, 0.0, 0.0));
    }
}
