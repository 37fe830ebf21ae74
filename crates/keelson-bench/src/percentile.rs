//! Nearest-rank percentiles: the one formula every bench reports its latencies with.

use std::time::Duration;

/// The index of the `p`th percentile (0..=1), by nearest rank, in a sorted slice of `len`
/// values; `None` when there are none.
pub fn nearest_rank(len: usize, p: f64) -> Option<usize> {
    (len > 0).then(|| ((len as f64 * p).ceil() as usize).clamp(1, len) - 1)
}

/// The `p`th percentile (0..=1) of `v`, in any order; 0 for none.
pub fn percentile(v: &[f64], p: f64) -> f64 {
    let mut sorted = v.to_vec();
    sorted.sort_by(f64::total_cmp);
    nearest_rank(sorted.len(), p).map_or(0.0, |i| sorted[i])
}

/// The `p`th percentile (0..=1) of sorted durations, in milliseconds; 0 for none.
pub fn percentile_ms(sorted: &[Duration], p: f64) -> f64 {
    nearest_rank(sorted.len(), p).map_or(0.0, |i| sorted[i].as_secs_f64() * 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_of_known_values() {
        assert_eq!(percentile(&[3.0, 1.0, 2.0], 0.5), 2.0);
        assert_eq!(percentile(&[3.0, 1.0, 2.0], 1.0), 3.0);
        assert_eq!(percentile(&[3.0, 1.0, 2.0], 0.0), 1.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
        let hundred: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&hundred, 0.5), 50.0);
        assert_eq!(percentile(&hundred, 0.99), 99.0);
        assert_eq!(nearest_rank(0, 0.5), None);
        assert_eq!(nearest_rank(10, 0.99), Some(9));
    }

    #[test]
    fn durations_in_milliseconds() {
        let d: Vec<Duration> = (1..=4).map(|ms| Duration::from_millis(ms * 10)).collect();
        assert_eq!(percentile_ms(&d, 0.5), 20.0);
        assert_eq!(percentile_ms(&d, 0.99), 40.0);
        assert_eq!(percentile_ms(&[], 0.99), 0.0);
    }
}
