//! The `keelson agent` and `keelson server` processes on this machine, read from
//! `/proc`: what the benches report of their memory and CPU.

/// One agent or server process.
#[derive(Clone, Debug)]
pub(crate) struct KeelsonProcess {
    /// Its `--name` (the node or server), when given on the command line.
    pub(crate) name: Option<String>,
    /// Its `--api-listen` (servers), when given on the command line.
    pub(crate) api_listen: Option<String>,
    pub(crate) rss_bytes: u64,
    pub(crate) cpu_seconds: f64,
}

/// Every `keelson agent` process running now.
pub(crate) fn agent_processes() -> Vec<KeelsonProcess> {
    keelson_processes(b"agent")
}

/// Every `keelson server` process running now.
pub(crate) fn server_processes() -> Vec<KeelsonProcess> {
    keelson_processes(b"server")
}

/// Every `keelson SUBCOMMAND` process running now.
fn keelson_processes(subcommand: &[u8]) -> Vec<KeelsonProcess> {
    let ticks = 100.0; // USER_HZ on Linux
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let args: Vec<&[u8]> = cmd.split(|b| *b == 0).collect();
        let is_it = args.len() > 1 && args[0].ends_with(b"keelson") && args[1] == subcommand;
        if !is_it {
            continue;
        }
        let flag = |f: &[u8]| args.windows(2).find(|w| w[0] == f).map(|w| String::from_utf8_lossy(w[1]).to_string());
        let api_listen = flag(b"--api-listen");
        let name = args.windows(2).find(|w| w[0] == b"--name").map(|w| String::from_utf8_lossy(w[1]).to_string());
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let rss_kb: u64 = status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok()).unwrap_or(0);
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
        let f: Vec<&str> = after.split_whitespace().collect();
        let cpu = f.get(11).and_then(|u| u.parse::<f64>().ok()).unwrap_or(0.0) + f.get(12).and_then(|s| s.parse::<f64>().ok()).unwrap_or(0.0);
        out.push(KeelsonProcess { name, api_listen, rss_bytes: rss_kb * 1024, cpu_seconds: cpu / ticks });
    }
    out
}

/// The agent serving node `node`.
pub(crate) fn agent_of(node: &str) -> Option<KeelsonProcess> {
    agent_processes().into_iter().find(|a| a.name.as_deref() == Some(node))
}
