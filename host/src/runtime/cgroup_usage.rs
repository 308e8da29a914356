//! A local workspace's memory and CPU time, read from its cgroup (`/tandem/<id>`, as the
//! runtime's spec names it): cgroup v1's memory and cpuacct controllers where they are
//! mounted, else cgroup v2's unified hierarchy.

use std::path::Path;

/// What a workspace uses now.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Usage {
    pub memory_bytes: u64,
    pub cpu_seconds: f64,
}

const ROOT: &str = "/sys/fs/cgroup";

fn number(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Workspace `id`'s usage, or `None` where it has no cgroup on this machine (stopped, or run
/// by another runtime).
pub fn of(id: &str) -> Option<Usage> {
    if id.is_empty() || id.contains('/') || id.starts_with('.') {
        return None;
    }
    let root = Path::new(ROOT);
    let v1_memory = root.join("memory/tandem").join(id);
    if v1_memory.is_dir() {
        return Some(Usage {
            memory_bytes: number(&v1_memory.join("memory.usage_in_bytes"))?,
            cpu_seconds: number(&root.join("cpuacct/tandem").join(id).join("cpuacct.usage"))
                .map_or(0.0, |ns| ns as f64 / 1e9),
        });
    }
    let v2 = root.join("tandem").join(id);
    let memory_bytes = number(&v2.join("memory.current"))?;
    let cpu_seconds = std::fs::read_to_string(v2.join("cpu.stat"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("usage_usec "))
                .and_then(|n| n.trim().parse::<u64>().ok())
        })
        .map_or(0.0, |us| us as f64 / 1e6);
    Some(Usage {
        memory_bytes,
        cpu_seconds,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_name_cannot_reach_outside_tandems_cgroups() {
        assert_eq!(super::of("../../memory"), None);
        assert_eq!(super::of(".."), None);
        assert_eq!(super::of(""), None);
    }
}
