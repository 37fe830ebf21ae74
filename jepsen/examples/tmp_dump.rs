use keelson_jepsen::ops::pair_events;
use keelson_jepsen::synth::{generate, SynthConfig, SynthModel};
fn main() {
    let seed: u64 = std::env::args().nth(1).unwrap().parse().unwrap();
    let cfg = SynthConfig { model: SynthModel::Kv, processes: 4, operations: 69, keys: 0, value_range: None, fail_rate: 0.11, info_rate: 0.24, leave_pending: false, reuse_process_after_info: true, seed };
    let events = generate(&cfg);
    for op in pair_events(&events).unwrap() { println!("{op}"); }
}
