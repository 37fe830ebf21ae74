use std::time::Instant;
use keelson_jepsen::linear::{check, ModelKind};
use keelson_jepsen::ops::pair_events;
use keelson_jepsen::synth::{generate, SynthConfig, SynthModel};
fn main() {
    let mut worst = 0u128;
    for seed in 0..20000u64 {
        for model in [SynthModel::Register, SynthModel::Kv] {
            let cfg = SynthConfig { model, processes: 1 + (seed % 5) as usize, operations: (seed * 13 % 150) as usize, keys: (seed / 7 % 4) as usize, value_range: if seed % 3 == 0 { None } else { Some(1 + (seed % 5) as i64) }, fail_rate: (seed / 3 % 30) as f64 / 100.0, info_rate: (seed / 11 % 30) as f64 / 100.0, leave_pending: seed % 2 == 0, reuse_process_after_info: seed % 4 < 2, seed };
            let events = generate(&cfg);
            let ops = pair_events(&events).unwrap();
            let t = Instant::now();
            let r = check(if model == SynthModel::Kv { ModelKind::Kv } else { ModelKind::CasRegister }, &ops).unwrap();
            let el = t.elapsed().as_micros();
            if el > worst || !r.is_linearizable() { worst = worst.max(el); println!("{:?} seed {} {}us lin={} conf={} {:?}", model, seed, el, r.is_linearizable(), r.configurations, cfg); }
        }
    }
}
