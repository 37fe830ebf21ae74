//! What the machine offers and how it is doing: capacity from `/proc` and the data
//! directory's filesystem, node info, and the pressure conditions with the kubelet's
//! default eviction thresholds (memory.available < 100Mi, nodefs.available < 10%).

use std::path::Path;

use crate::status::{NodeCapacity, NodeHealth};

pub const MEMORY_AVAILABLE_MIN_BYTES: u64 = 100 << 20;
pub const NODEFS_AVAILABLE_MIN_PERCENT: u64 = 10;

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
pub fn health(data_dir: &Path) -> NodeHealth {
    let (_, available) = parse_meminfo(&read("/proc/meminfo"));
    let (total, free) = filesystem(data_dir);
    pressure(available, total, free)
}

/// The pressure conditions for the given readings (pure).
pub fn pressure(mem_available: u64, disk_total: u64, disk_available: u64) -> NodeHealth {
    NodeHealth {
        not_ready: None,
        memory_pressure: mem_available > 0 && mem_available < MEMORY_AVAILABLE_MIN_BYTES,
        disk_pressure: disk_total > 0 && disk_available * 100 < disk_total * NODEFS_AVAILABLE_MIN_PERCENT,
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
        assert!(pressure(avail, 100, 50).memory_pressure, "under 100Mi available is memory pressure");
        assert!(!pressure(1 << 30, 100, 50).memory_pressure);
        assert!(pressure(1 << 30, 100, 9).disk_pressure && !pressure(1 << 30, 100, 10).disk_pressure);
    }
}
