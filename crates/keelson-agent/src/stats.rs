//! Resource usage of the node and its containers, as the kubelet's Summary API
//! (`/stats/summary`) and resource metrics endpoint (`/metrics/resource`) report it.
//!
//! The node's figures come from `/proc` (CPU time of `/proc/stat`, memory of
//! `/proc/meminfo`) and `statvfs` of the data directory; the containers' from the
//! runtime's cgroup measurements (CRI `ListContainerStats`). A [`StatsCollector`] samples
//! every [`SAMPLE_INTERVAL`] — the kubelet's housekeeping interval — and keeps the last
//! sample per node and container, so `usageNanoCores` is the rate between the last two
//! samples ([`CpuRates`]); the endpoints serve the latest summary. The summary and the
//! Prometheus text are pure functions of the samples ([`summary`], [`resource_metrics`]).
//!
//! Pod figures are the sums of their containers' (the kubelet reads the pod cgroup; the
//! sandbox's pause process adds next to nothing). Network and volume figures are not
//! reported.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::runtime::{ContainerState, ContainerStats, Runtime};

/// How often usage is sampled (the kubelet's `--housekeeping-interval`). The CPU rate of
/// a summary is over the last such window.
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(10);

/// CPU cores used between two cumulative samples `(time ns, CPU ns)`, in nanocores;
/// `None` when time did not advance or the counter went back (a restarted container).
pub fn rate(prev: (i64, u64), cur: (i64, u64)) -> Option<u64> {
    let dt = cur.0.checked_sub(prev.0).filter(|d| *d > 0)?;
    let used = cur.1.checked_sub(prev.1)?;
    Some((used as u128 * 1_000_000_000 / dt as u128) as u64)
}

/// The last cumulative CPU sample of every node or container (by key), for rates.
#[derive(Debug, Default)]
pub struct CpuRates {
    last: HashMap<String, (i64, u64)>,
}

impl CpuRates {
    /// Records `key`'s sample and returns the rate since its previous one (none for the
    /// first sample of a key).
    pub fn observe(&mut self, key: &str, time_ns: i64, total_ns: u64) -> Option<u64> {
        let prev = self.last.insert(key.to_string(), (time_ns, total_ns));
        prev.and_then(|p| rate(p, (time_ns, total_ns)))
    }

    /// Forgets keys not in `live` (containers that are gone).
    pub fn retain(&mut self, live: &HashSet<String>) {
        self.last.retain(|k, _| live.contains(k));
    }
}

/// Cumulative CPU time the machine spent busy (user, nice, system, irq, softirq, steal of
/// `/proc/stat`'s `cpu` line) in nanoseconds, and its boot time (`btime`, Unix seconds).
pub fn parse_proc_stat(text: &str, ticks_per_second: u64) -> (u64, i64) {
    let mut busy = 0u64;
    let mut btime = 0i64;
    for line in text.lines() {
        let mut f = line.split_whitespace();
        match f.next() {
            Some("cpu") => {
                let v: Vec<u64> = f.map(|x| x.parse().unwrap_or(0)).collect();
                // user nice system idle iowait irq softirq steal
                busy = [0, 1, 2, 5, 6, 7].iter().filter_map(|i| v.get(*i)).sum();
            }
            Some("btime") => btime = f.next().and_then(|x| x.parse().ok()).unwrap_or(0),
            _ => {}
        }
    }
    let hz = ticks_per_second.max(1);
    ((busy as u128 * 1_000_000_000 / hz as u128) as u64, btime)
}

/// `MemTotal`, `MemFree` and `MemAvailable` of `/proc/meminfo`, in bytes.
pub fn parse_meminfo(text: &str) -> (u64, u64, u64) {
    let field = |name: &str| text.lines().find_map(|l| l.strip_prefix(name)).and_then(|r| r.trim().trim_end_matches("kB").trim().parse::<u64>().ok()).unwrap_or(0) * 1024;
    (field("MemTotal:"), field("MemFree:"), field("MemAvailable:"))
}

/// A filesystem's size and use.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FsSample {
    pub capacity_bytes: u64,
    pub available_bytes: u64,
    pub used_bytes: u64,
    pub inodes: u64,
    pub inodes_free: u64,
}

/// One sample of the node.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeSample {
    pub time_ns: i64,
    pub boot_time_s: i64,
    pub cpu_total_ns: u64,
    pub memory_total: u64,
    pub memory_free: u64,
    pub memory_available: u64,
    pub fs: Option<FsSample>,
}

/// One sample of a running container, with its rate and start.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ContainerSample {
    pub stats: ContainerStats,
    pub started_at_ns: i64,
    pub usage_nano_cores: Option<u64>,
}

fn rfc3339(ns: i64) -> String {
    jiff::Timestamp::from_nanosecond(ns as i128).map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()).unwrap_or_default()
}

fn cpu_json(time_ns: i64, nano_cores: Option<u64>, total: Option<u64>) -> Value {
    let mut v = json!({"time": rfc3339(time_ns)});
    if let Some(n) = nano_cores {
        v["usageNanoCores"] = json!(n);
    }
    if let Some(t) = total {
        v["usageCoreNanoSeconds"] = json!(t);
    }
    v
}

fn memory_json(time_ns: i64, working_set: Option<u64>, usage: Option<u64>, rss: Option<u64>, available: Option<u64>) -> Value {
    let mut v = json!({"time": rfc3339(time_ns)});
    for (k, x) in [("availableBytes", available), ("usageBytes", usage), ("workingSetBytes", working_set), ("rssBytes", rss)] {
        if let Some(x) = x {
            v[k] = json!(x);
        }
    }
    v
}

fn fs_json(time_ns: i64, fs: &FsSample) -> Value {
    json!({"time": rfc3339(time_ns), "availableBytes": fs.available_bytes, "capacityBytes": fs.capacity_bytes, "usedBytes": fs.used_bytes,
        "inodesFree": fs.inodes_free, "inodes": fs.inodes, "inodesUsed": fs.inodes.saturating_sub(fs.inodes_free)})
}

/// The kubelet's Summary (`stats/v1alpha1`) from one sample of the node (with its CPU
/// rate) and of its running containers. Pods are in namespace/name order, containers by
/// name. Pure.
pub fn summary(node_name: &str, node: &NodeSample, node_nano_cores: Option<u64>, containers: &[ContainerSample]) -> Value {
    // The node's working set as the kubelet's eviction manager sees it: what is not
    // available; available = capacity - working set.
    let working_set = node.memory_total.saturating_sub(node.memory_available);
    let mut node_json = json!({
        "nodeName": node_name,
        "startTime": rfc3339(node.boot_time_s * 1_000_000_000),
        "cpu": cpu_json(node.time_ns, node_nano_cores, Some(node.cpu_total_ns)),
        "memory": memory_json(node.time_ns, Some(working_set), Some(node.memory_total.saturating_sub(node.memory_free)), None, Some(node.memory_available)),
    });
    if let Some(fs) = &node.fs {
        node_json["fs"] = fs_json(node.time_ns, fs);
        node_json["runtime"] = json!({"imageFs": fs_json(node.time_ns, fs)});
    }
    let mut pods: BTreeMap<(String, String, String), Vec<&ContainerSample>> = BTreeMap::new();
    for c in containers {
        pods.entry((c.stats.pod_namespace.clone(), c.stats.pod_name.clone(), c.stats.pod_uid.clone())).or_default().push(c);
    }
    let pods: Vec<Value> = pods
        .into_iter()
        .map(|((namespace, name, uid), mut cs)| {
            cs.sort_by(|a, b| a.stats.name.cmp(&b.stats.name));
            let time = cs.iter().map(|c| c.stats.cpu_timestamp_ns).max().unwrap_or(node.time_ns);
            let start = cs.iter().map(|c| c.started_at_ns).filter(|t| *t > 0).min().unwrap_or(node.time_ns);
            let sum = |f: &dyn Fn(&ContainerSample) -> Option<u64>| cs.iter().map(|c| f(c)).sum::<Option<u64>>();
            let containers: Vec<Value> = cs
                .iter()
                .map(|c| {
                    let s = &c.stats;
                    let mut v = json!({
                        "name": s.name,
                        "startTime": rfc3339(c.started_at_ns),
                        "cpu": cpu_json(s.cpu_timestamp_ns, c.usage_nano_cores, s.cpu_usage_core_nanos),
                        "memory": memory_json(s.memory_timestamp_ns, s.memory_working_set_bytes, s.memory_usage_bytes, s.memory_rss_bytes, s.memory_available_bytes),
                    });
                    if let Some(used) = s.writable_layer_bytes {
                        v["rootfs"] = json!({"time": rfc3339(s.cpu_timestamp_ns), "usedBytes": used, "inodesUsed": s.writable_layer_inodes.unwrap_or(0)});
                    }
                    v
                })
                .collect();
            json!({
                "podRef": {"name": name, "namespace": namespace, "uid": uid},
                "startTime": rfc3339(start),
                "containers": containers,
                "cpu": cpu_json(time, sum(&|c| c.usage_nano_cores), sum(&|c| c.stats.cpu_usage_core_nanos)),
                "memory": memory_json(time, sum(&|c| c.stats.memory_working_set_bytes), sum(&|c| c.stats.memory_usage_bytes), sum(&|c| c.stats.memory_rss_bytes), None),
            })
        })
        .collect();
    json!({"node": node_json, "pods": pods})
}

/// The kubelet's `/metrics/resource` (Prometheus text format 0.0.4) from a Summary:
/// cumulative CPU seconds and working-set bytes of the node, pods and containers, each
/// with its sample time in milliseconds. Pure.
pub fn resource_metrics(summary: &Value) -> String {
    fn ms(t: &Value) -> i64 {
        t.as_str().and_then(|s| s.parse::<jiff::Timestamp>().ok()).map(|t| t.as_millisecond()).unwrap_or(0)
    }
    fn esc(s: &str) -> String {
        s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
    }
    let secs = |v: &Value| v["usageCoreNanoSeconds"].as_u64().map(|n| n as f64 / 1e9);
    let mut out = String::new();
    let mut family = |name: &str, kind: &str, help: &str, samples: Vec<(String, f64, i64)>| {
        out.push_str(&format!("# HELP {name} [STABLE] {help}\n# TYPE {name} {kind}\n"));
        for (labels, v, t) in samples {
            out.push_str(&format!("{name}{labels} {v} {t}\n"));
        }
    };
    let node = &summary["node"];
    let pods = summary["pods"].as_array().cloned().unwrap_or_default();
    let pod_labels = |p: &Value| format!("namespace=\"{}\",pod=\"{}\"", esc(p["podRef"]["namespace"].as_str().unwrap_or("")), esc(p["podRef"]["name"].as_str().unwrap_or("")));
    let per_container = |f: &dyn Fn(&Value) -> Option<(f64, i64)>| -> Vec<(String, f64, i64)> {
        pods.iter()
            .flat_map(|p| {
                p["containers"].as_array().cloned().unwrap_or_default().into_iter().filter_map(move |c| {
                    let (v, t) = f(&c)?;
                    Some((format!("{{container=\"{}\",{}}}", esc(c["name"].as_str().unwrap_or("")), pod_labels(p)), v, t))
                })
            })
            .collect()
    };
    let cpu = |c: &Value| secs(&c["cpu"]).map(|v| (v, ms(&c["cpu"]["time"])));
    let mem = |c: &Value| c["memory"]["workingSetBytes"].as_u64().map(|v| (v as f64, ms(&c["memory"]["time"])));
    family("container_cpu_usage_seconds_total", "counter", "Cumulative cpu time consumed by the container in core-seconds", per_container(&cpu));
    family("container_memory_working_set_bytes", "gauge", "Current working set of the container in bytes", per_container(&mem));
    let start = |c: &Value| c["startTime"].as_str().map(|_| (ms(&c["startTime"]) as f64 / 1000.0, ms(&c["cpu"]["time"])));
    family("container_start_time_seconds", "gauge", "Start time of the container since unix epoch in seconds", per_container(&start));
    family("node_cpu_usage_seconds_total", "counter", "Cumulative cpu time consumed by the node in core-seconds", cpu(node).map(|(v, t)| (String::new(), v, t)).into_iter().collect());
    family("node_memory_working_set_bytes", "gauge", "Current working set of the node in bytes", mem(node).map(|(v, t)| (String::new(), v, t)).into_iter().collect());
    let per_pod = |f: &dyn Fn(&Value) -> Option<(f64, i64)>| -> Vec<(String, f64, i64)> { pods.iter().filter_map(|p| f(p).map(|(v, t)| (format!("{{{}}}", pod_labels(p)), v, t))).collect() };
    family("pod_cpu_usage_seconds_total", "counter", "Cumulative cpu time consumed by the pod in core-seconds", per_pod(&cpu));
    family("pod_memory_working_set_bytes", "gauge", "Current working set of the pod in bytes", per_pod(&mem));
    family("resource_scrape_error", "gauge", "1 if there was an error while getting container metrics, 0 otherwise", vec![(String::new(), 0.0, 0)]);
    // The scrape error sample carries no timestamp.
    out.replace("resource_scrape_error 0 0\n", "resource_scrape_error 0\n")
}

/// Samples the node and the runtime's containers every [`SAMPLE_INTERVAL`] and keeps the
/// latest summary.
pub struct StatsCollector {
    node_name: String,
    data_dir: PathBuf,
    runtime: Arc<dyn Runtime>,
    rates: Mutex<CpuRates>,
    latest: Mutex<Option<Value>>,
}

impl StatsCollector {
    pub fn new(node_name: &str, data_dir: PathBuf, runtime: Arc<dyn Runtime>) -> Arc<Self> {
        Arc::new(Self { node_name: node_name.into(), data_dir, runtime, rates: Mutex::default(), latest: Mutex::default() })
    }

    /// Samples now and every [`SAMPLE_INTERVAL`] until `shutdown`.
    pub fn spawn(self: &Arc<Self>, shutdown: CancellationToken) -> tokio::task::JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(SAMPLE_INTERVAL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tick.tick() => { this.sample().await; }
                }
            }
        })
    }

    /// The latest summary, sampling once if there is none yet.
    pub async fn summary(&self) -> Value {
        if let Some(v) = self.latest.lock().expect("lock").clone() {
            return v;
        }
        self.sample().await
    }

    /// Takes one sample of the node and its running containers, records it for the rates
    /// and keeps the summary.
    pub async fn sample(&self) -> Value {
        let node = node_sample(&self.data_dir);
        let stats = match self.runtime.container_stats().await {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(error = %e, "container stats");
                Vec::new()
            }
        };
        let started: HashMap<String, i64> = match self.runtime.list_containers().await {
            Ok(cs) => cs.into_iter().filter_map(|c| match c.state {
                ContainerState::Running { started_at_ns } => Some((c.id, started_at_ns)),
                _ => None,
            }).collect(),
            Err(_) => HashMap::new(),
        };
        let summary = {
            let mut rates = self.rates.lock().expect("lock");
            let node_rate = rates.observe("", node.time_ns, node.cpu_total_ns);
            let containers: Vec<ContainerSample> = stats
                .into_iter()
                .filter_map(|s| {
                    let started_at_ns = *started.get(&s.id)?;
                    let usage_nano_cores = s.cpu_usage_core_nanos.and_then(|t| rates.observe(&s.id, s.cpu_timestamp_ns, t));
                    Some(ContainerSample { stats: s, started_at_ns, usage_nano_cores })
                })
                .collect();
            let live: HashSet<String> = containers.iter().map(|c| c.stats.id.clone()).chain([String::new()]).collect();
            rates.retain(&live);
            summary(&self.node_name, &node, node_rate, &containers)
        };
        *self.latest.lock().expect("lock") = Some(summary.clone());
        summary
    }
}

fn node_sample(data_dir: &std::path::Path) -> NodeSample {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    let (cpu_total_ns, boot_time_s) = parse_proc_stat(&read("/proc/stat"), hz);
    let (memory_total, memory_free, memory_available) = parse_meminfo(&read("/proc/meminfo"));
    NodeSample { time_ns: jiff::Timestamp::now().as_nanosecond() as i64, boot_time_s, cpu_total_ns, memory_total, memory_free, memory_available, fs: filesystem(data_dir) }
}

fn filesystem(path: &std::path::Path) -> Option<FsSample> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: statvfs fills the struct we pass; c is a valid NUL-terminated path.
    let s = unsafe {
        let mut s: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(c.as_ptr(), &mut s) != 0 {
            return None;
        }
        s
    };
    let capacity_bytes = s.f_blocks * s.f_frsize;
    Some(FsSample {
        capacity_bytes,
        available_bytes: s.f_bavail * s.f_frsize,
        used_bytes: capacity_bytes.saturating_sub(s.f_bfree * s.f_frsize),
        inodes: s.f_files,
        inodes_free: s.f_ffree,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_is_cpu_time_over_wall_time() {
        // Half a core over 10 s.
        assert_eq!(rate((0, 1_000), (10_000_000_000, 5_000_001_000)), Some(500_000_000));
        assert_eq!(rate((5, 100), (5, 200)), None, "no time passed");
        assert_eq!(rate((0, 500), (1_000_000_000, 100)), None, "a restarted counter");
        // Large counters do not overflow.
        assert_eq!(rate((0, 0), (1_000_000_000, u64::MAX / 2)), Some(u64::MAX / 2));
    }

    #[test]
    fn rates_need_two_samples_per_key_and_forget_gone_keys() {
        let mut r = CpuRates::default();
        assert_eq!(r.observe("c1", 0, 0), None);
        assert_eq!(r.observe("c2", 0, 0), None);
        assert_eq!(r.observe("c1", 2_000_000_000, 1_000_000_000), Some(500_000_000));
        assert_eq!(r.observe("c1", 4_000_000_000, 5_000_000_000), Some(2_000_000_000));
        r.retain(&["c1".to_string()].into());
        assert_eq!(r.observe("c2", 4_000_000_000, 4_000_000_000), None, "c2 was forgotten");
    }

    #[test]
    fn proc_stat_and_meminfo() {
        let stat = "cpu  100 20 30 1000 50 5 5 10 0 0\ncpu0 50 10 15 500 25 2 2 5 0 0\nbtime 1700000000\n";
        // user+nice+system+irq+softirq+steal = 170 ticks at 100 Hz = 1.7 s.
        assert_eq!(parse_proc_stat(stat, 100), (1_700_000_000, 1_700_000_000));
        assert_eq!(parse_meminfo("MemTotal: 4 kB\nMemFree: 1 kB\nMemAvailable: 3 kB\n"), (4096, 1024, 3072));
    }

    fn container(pod: &str, name: &str, cpu: u64, mem: u64, rate: Option<u64>) -> ContainerSample {
        ContainerSample {
            stats: ContainerStats {
                id: format!("{pod}-{name}"),
                name: name.into(),
                pod_uid: format!("uid-{pod}"),
                pod_name: pod.into(),
                pod_namespace: "default".into(),
                cpu_timestamp_ns: 1_700_000_010_000_000_000,
                cpu_usage_core_nanos: Some(cpu),
                memory_timestamp_ns: 1_700_000_010_000_000_000,
                memory_working_set_bytes: Some(mem),
                memory_usage_bytes: Some(mem + 4096),
                ..Default::default()
            },
            started_at_ns: 1_700_000_000_000_000_000,
            usage_nano_cores: rate,
        }
    }

    #[test]
    fn the_summary_has_the_kubelets_shape() {
        let node = NodeSample {
            time_ns: 1_700_000_010_000_000_000,
            boot_time_s: 1_600_000_000,
            cpu_total_ns: 9_000,
            memory_total: 8 << 30,
            memory_free: 2 << 30,
            memory_available: 6 << 30,
            fs: Some(FsSample { capacity_bytes: 100, available_bytes: 40, used_bytes: 50, inodes: 10, inodes_free: 4 }),
        };
        let cs = [container("web", "b", 20, 2048, Some(7)), container("web", "a", 10, 1024, Some(3)), container("db", "main", 5, 512, None)];
        let s = summary("n1", &node, Some(250_000_000), &cs);
        let n = &s["node"];
        assert_eq!(n["nodeName"], "n1");
        assert_eq!(n["startTime"], "2020-09-13T12:26:40Z");
        assert_eq!(n["cpu"], json!({"time": "2023-11-14T22:13:30Z", "usageNanoCores": 250_000_000u64, "usageCoreNanoSeconds": 9_000}));
        assert_eq!(n["memory"]["workingSetBytes"], json!(2u64 << 30));
        assert_eq!(n["memory"]["availableBytes"], json!(6u64 << 30));
        assert_eq!(n["memory"]["usageBytes"], json!(6u64 << 30));
        assert_eq!(n["fs"]["inodesUsed"], 6);
        assert_eq!(n["runtime"]["imageFs"]["capacityBytes"], 100);
        let pods = s["pods"].as_array().unwrap();
        assert_eq!(pods.len(), 2);
        assert_eq!(pods[0]["podRef"], json!({"name": "db", "namespace": "default", "uid": "uid-db"}));
        // A container without a rate yet gives its pod none either.
        assert!(pods[0]["cpu"].get("usageNanoCores").is_none());
        assert!(pods[0]["containers"][0]["cpu"].get("usageNanoCores").is_none());
        let web = &pods[1];
        assert_eq!(web["containers"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(web["cpu"]["usageNanoCores"], 10);
        assert_eq!(web["cpu"]["usageCoreNanoSeconds"], 30);
        assert_eq!(web["memory"]["workingSetBytes"], 3072);
        assert_eq!(web["startTime"], "2023-11-14T22:13:20Z");
        assert_eq!(web["containers"][1]["memory"]["usageBytes"], 2048 + 4096);
    }

    #[test]
    fn resource_metrics_in_prometheus_text() {
        let node = NodeSample { time_ns: 1_700_000_010_000_000_000, cpu_total_ns: 2_500_000_000, memory_total: 1000, memory_available: 400, ..Default::default() };
        let text = resource_metrics(&summary("n1", &node, None, &[container("web", "app", 1_500_000_000, 2048, Some(1))]));
        for line in [
            "# TYPE node_cpu_usage_seconds_total counter",
            "node_cpu_usage_seconds_total 2.5 1700000010000",
            "node_memory_working_set_bytes 600 1700000010000",
            "container_cpu_usage_seconds_total{container=\"app\",namespace=\"default\",pod=\"web\"} 1.5 1700000010000",
            "container_memory_working_set_bytes{container=\"app\",namespace=\"default\",pod=\"web\"} 2048 1700000010000",
            "container_start_time_seconds{container=\"app\",namespace=\"default\",pod=\"web\"} 1700000000 1700000010000",
            "pod_cpu_usage_seconds_total{namespace=\"default\",pod=\"web\"} 1.5 1700000010000",
            "pod_memory_working_set_bytes{namespace=\"default\",pod=\"web\"} 2048 1700000010000",
            "resource_scrape_error 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} missing from\n{text}");
        }
    }
}
