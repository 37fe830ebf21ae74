//! What a fault cost the writers: pure arithmetic over the writes' start and
//! acknowledgement times (seconds since the round began), tested without a cluster.

/// One acknowledged write: when it was sent and when its acknowledgement arrived.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ack {
    pub sent: f64,
    pub acked: f64,
}

/// The writers' unavailability around one fault.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Outage {
    /// The largest gap between consecutive acknowledgements (of any writer) from the last
    /// acknowledgement before the fault to the first one after it, in milliseconds.
    pub gap_ms: f64,
    /// From the fault to the first acknowledgement of a write sent after it, in ms.
    pub first_after_ms: f64,
}

/// The outage caused by a fault at `fault` (same clock as the acks). `None` when no write
/// sent after the fault was acknowledged, or none before it was (nothing to measure from).
pub fn outage(acks: &[Ack], fault: f64) -> Option<Outage> {
    let mut times: Vec<f64> = acks.iter().map(|a| a.acked).collect();
    times.sort_by(f64::total_cmp);
    let first_after = acks.iter().filter(|a| a.sent >= fault).map(|a| a.acked).min_by(f64::total_cmp)?;
    let last_before = times.iter().copied().rfind(|t| *t < fault)?;
    // Every gap between consecutive acks from the last one before the fault up to the
    // first ack of a write sent after it.
    let window: Vec<f64> = times.into_iter().filter(|t| *t >= last_before && *t <= first_after).collect();
    let gap = window.windows(2).map(|w| w[1] - w[0]).fold(0.0, f64::max);
    Some(Outage { gap_ms: gap * 1000.0, first_after_ms: (first_after - fault) * 1000.0 })
}


#[cfg(test)]
mod tests {
    use super::*;

    fn ack(sent: f64, acked: f64) -> Ack {
        Ack { sent, acked }
    }

    #[test]
    fn the_gap_spans_the_fault_and_the_first_write_after_it() {
        // Acks every 10 ms until 1.0; the fault at 1.005; writes in flight at the fault
        // are answered late (1.9), and the first write sent after it at 2.1.
        let mut acks: Vec<Ack> = (0..=100).map(|i| ack(i as f64 / 100.0 - 0.005, i as f64 / 100.0)).collect();
        acks.push(ack(1.0, 1.9));
        acks.push(ack(1.95, 2.1));
        acks.push(ack(2.1, 2.11));
        let o = outage(&acks, 1.005).unwrap();
        assert!((o.gap_ms - 900.0).abs() < 1e-6, "{o:?}");
        assert!((o.first_after_ms - 1095.0).abs() < 1e-6, "{o:?}");
    }

    #[test]
    fn a_harmless_fault_costs_about_one_interval() {
        let acks: Vec<Ack> = (0..200).map(|i| ack(i as f64 / 100.0, i as f64 / 100.0 + 0.004)).collect();
        let o = outage(&acks, 1.0).unwrap();
        assert!(o.gap_ms <= 10.0 + 1e-6 && o.first_after_ms <= 4.0 + 1e-6, "{o:?}");
    }

    #[test]
    fn nothing_to_measure_without_acks_on_both_sides() {
        assert_eq!(outage(&[ack(0.0, 0.5)], 1.0), None, "no write after the fault was acknowledged");
        assert_eq!(outage(&[ack(1.5, 1.6)], 1.0), None, "no ack before the fault");
    }
}
