//! What the machine offers and how it is doing: capacity from `/proc` and the data
//! directory's filesystem, node info, and the pressure conditions against hard eviction
//! thresholds — the kubelet's defaults (memory.available < 100Mi, nodefs.available < 10%)
//! unless `--eviction-hard` says otherwise (`nodefs.available<0%` turns disk pressure off,
//! as kind does for its nodes).

use std::path::Path;

use crate::status::{NodeCapacity, NodeHealth};

/// Hard eviction thresholds: below these the node reports pressure.
#[derive(Clone, Debug, PartialEq)]
pub struct EvictionThresholds {
    pub memory_available_bytes: u64,
    pub nodefs_available_percent: f64,
}

impl Default for EvictionThresholds {
    fn default() -> Self {
        Self { memory_available_bytes: 100 << 20, nodefs_available_percent: 10.0 }
    }
}

impl std::str::FromStr for EvictionThresholds {
    type Err = String;

    /// `memory.available<100Mi,nodefs.available<10%` (the kubelet's `--eviction-hard`);
    /// signals not named keep their defaults.
    fn from_str(s: &str) -> Result<Self, String> {
        let mut t = Self::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (signal, value) = part.split_once('<').ok_or_else(|| format!("{part:?}: expected SIGNAL<VALUE"))?;
            match signal.trim() {
                "memory.available" => {
                    let milli = keelson_apimachinery::quantity::parse_quantity_milli(value.trim()).ok_or_else(|| format!("{part:?}: not a quantity"))?;
                    t.memory_available_bytes = (milli.max(0) / 1000) as u64;
                }
                "nodefs.available" => {
                    let pct = value.trim().strip_suffix('%').ok_or_else(|| format!("{part:?}: nodefs.available takes a percentage"))?;
                    t.nodefs_available_percent = pct.parse::<f64>().map_err(|_| format!("{part:?}: not a percentage"))?;
                }
                other => return Err(format!("unsupported eviction signal {other:?} (memory.available, nodefs.available)")),
            }
        }
        Ok(t)
    }
}

/// `MemTotal` and `MemAvailable` of `/proc/meminfo`, in bytes.
pub fn parse_meminfo(text: &str) -> (u64, u64) {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kb| kb * 1024)
            .unwrap_or(0)
    };
    (field("MemTotal:"), field("MemAvailable:"))
}

/// Total and available bytes of the filesystem holding `path`.
pub fn filesystem(path: &Path) -> (u64, u64) {
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else { return (0, 0) };
    // SAFETY: statvfs fills the struct we pass; c is a valid NUL-terminated path.
    unsafe {
        let mut s: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(c.as_ptr(), &mut s) != 0 {
            return (0, 0);
        }
        (s.f_blocks * s.f_frsize, s.f_bavail * s.f_frsize)
    }
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path).map(|s| s.trim().to_string()).unwrap_or_default()
}

/// The node's capacity: its CPUs, memory, the data directory's disk, `max_pods`.
pub fn capacity(data_dir: &Path, max_pods: u32) -> NodeCapacity {
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let (mem, _) = parse_meminfo(&read("/proc/meminfo"));
    let (disk, _) = filesystem(data_dir);
    NodeCapacity { cpu: cpus.to_string(), memory: format!("{}Ki", mem / 1024), pods: max_pods, ephemeral_storage: format!("{}Ki", disk / 1024) }
}

/// Pressure from available memory and disk.
pub fn health(data_dir: &Path, thresholds: &EvictionThresholds) -> NodeHealth {
    let (_, available) = parse_meminfo(&read("/proc/meminfo"));
    let (total, free) = filesystem(data_dir);
    pressure(available, total, free, thresholds)
}

/// The pressure conditions for the given readings (pure).
pub fn pressure(mem_available: u64, disk_total: u64, disk_available: u64, t: &EvictionThresholds) -> NodeHealth {
    NodeHealth {
        not_ready: None,
        memory_pressure: mem_available > 0 && mem_available < t.memory_available_bytes,
        disk_pressure: disk_total > 0 && (disk_available as f64) * 100.0 < (disk_total as f64) * t.nodefs_available_percent,
        pid_pressure: false,
    }
}

/// machine-id, boot id, kernel release and the OS's pretty name.
pub fn identity() -> (String, String, String, String) {
    let os = read("/etc/os-release")
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME=").map(|v| v.trim_matches('"').to_string()))
        .unwrap_or_else(|| "Linux".into());
    (read("/etc/machine-id"), read("/proc/sys/kernel/random/boot_id"), read("/proc/sys/kernel/osrelease"), os)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_and_thresholds() {
        let (total, avail) = parse_meminfo("MemTotal:       24000000 kB\nMemFree: 1 kB\nMemAvailable:    50000 kB\n");
        assert_eq!((total, avail), (24_000_000 * 1024, 50_000 * 1024));
        let d = EvictionThresholds::default();
        assert!(pressure(avail, 100, 50, &d).memory_pressure, "under 100Mi available is memory pressure");
        assert!(!pressure(1 << 30, 100, 50, &d).memory_pressure);
        assert!(pressure(1 << 30, 100, 9, &d).disk_pressure && !pressure(1 << 30, 100, 10, &d).disk_pressure);
        let off: EvictionThresholds = "nodefs.available<0%".parse().unwrap();
        assert!(!pressure(1 << 30, 100, 0, &off).disk_pressure, "0% turns disk pressure off");
        assert_eq!(off.memory_available_bytes, 100 << 20, "unnamed signals keep their defaults");
        let t: EvictionThresholds = "memory.available<1Gi, nodefs.available<5%".parse().unwrap();
        assert_eq!(t, EvictionThresholds { memory_available_bytes: 1 << 30, nodefs_available_percent: 5.0 });
        assert!("imagefs.available<5%".parse::<EvictionThresholds>().is_err());
        assert!("nodefs.available<5".parse::<EvictionThresholds>().is_err());
    }
}
