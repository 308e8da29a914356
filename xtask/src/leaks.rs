//! `cargo xtask leaks [--clean]`: what Tandem's tests left on this host, and how to clean it;
//! `cargo xtask test` runs it last and fails when anything is left.
//!
//! Only test leftovers count: a test's data dir is `<temp dir>/tandem-test-…` (the harness's
//! `TEST_DIR_PREFIX`), so a developer's own `tandem serve` is never taken for one. Looked at:
//! processes in Tandem's workspace cgroups (`tandem/<id>`, whose root overlay names a test data
//! dir), their cgroups, mounts under test data dirs, loop devices backed by files under them
//! (deleted or not), and the egress networks of those workspaces or of none (network namespaces
//! `tdm-<id>`, host veths `tdmv<n>`, nftables sets `a<n>`/`a6<n>` and rules tagged `tdm-<n>`,
//! as `host/src/runtime/network.rs` names them). The nftables tables themselves are shared by
//! every workspace and kept on purpose.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Result, bail};

/// Where the harness makes test data dirs (`tests/it/harness.rs`, `TEST_DIR_PREFIX`).
const TEST_DIR_PREFIX: &str = "tandem-test-";

/// One thing left behind, and the shell command that removes it.
#[derive(Debug, PartialEq, Eq)]
pub struct Leftover {
    pub what: String,
    pub clean: String,
}

pub fn run(args: &[String]) -> Result<()> {
    let clean = match args {
        [] => false,
        [a] if a == "--clean" => true,
        _ => bail!("usage: cargo xtask leaks [--clean]"),
    };
    if clean {
        // A few rounds: a cgroup empties, and a loop device clears, once the processes killed
        // in the round before have exited.
        for _ in 0..3 {
            let found = scan(&prefix());
            if found.is_empty() {
                break;
            }
            for l in found {
                eprintln!("cleaning: {}", l.what);
                let _ = Command::new("sh").arg("-c").arg(&l.clean).status();
            }
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
    }
    check()
}

/// Fails, listing each leftover and how to clean it, when Tandem's tests left anything.
pub fn check() -> Result<()> {
    let t = crate::run::step("leftovers of the tests (processes, mounts, loop devices, networks)");
    let mut found = scan(&prefix());
    // The kernel lets go of a lazily unmounted disk's loop device in the background, once the
    // last test's processes have exited: a moment's grace before anything counts.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !found.is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
        found = scan(&prefix());
    }
    if found.is_empty() {
        crate::run::done(t);
        return Ok(());
    }
    eprintln!("Tandem's tests left these on this host:");
    for l in &found {
        eprintln!("  - {}", l.what);
    }
    eprintln!("Clean them with `cargo xtask leaks --clean`, or by hand (as root):");
    for l in &found {
        eprintln!("  {}", l.clean);
    }
    bail!(
        "{} leftovers of Tandem's tests (a test that did not stop what it started)",
        found.len()
    )
}

/// `<temp dir>/tandem-test-`: what every test data dir's path starts with.
fn prefix() -> String {
    std::env::temp_dir()
        .join(TEST_DIR_PREFIX)
        .to_string_lossy()
        .to_string()
}

/// Everything left by tests whose data dirs start with `prefix`, in the order to clean it.
pub fn scan(prefix: &str) -> Vec<Leftover> {
    let mut out = Vec::new();
    let mut ids = BTreeSet::new();
    let mounts = mounts();
    // Workspace processes first: killing them frees their mounts and loop devices.
    let mut cgroups = Vec::new();
    for (id, groups) in workspace_cgroups() {
        let pids: Vec<u32> = groups
            .iter()
            .flat_map(|g| {
                read(&g.join("cgroup.procs"))
                    .lines()
                    .filter_map(|l| l.parse().ok())
                    .collect::<Vec<u32>>()
            })
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let ours = pids.iter().any(|p| runs_on_test_layer(*p, prefix));
        if ours && !pids.is_empty() {
            let list: Vec<String> = pids
                .iter()
                .map(|p| format!("{p} ({})", describe(*p)))
                .collect();
            out.push(Leftover {
                what: format!("workspace {id}'s processes: {}", list.join(", ")),
                clean: format!(
                    "kill -9 {}",
                    pids.iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(" ")
                ),
            });
            ids.insert(id.clone());
        }
        cgroups.push((id, groups));
    }
    let mut points: Vec<&Mount> = mounts
        .iter()
        .filter(|m| m.point.starts_with(prefix))
        .collect();
    // Deepest first.
    points.sort_by_key(|m| std::cmp::Reverse(m.point.len()));
    for m in points {
        ids.extend(workspace_of(&m.point));
        out.push(Leftover {
            what: format!("mount {} ({} from {})", m.point, m.fstype, m.source),
            clean: format!("umount -l {}", quote(&m.point)),
        });
    }
    for (dev, file) in loop_devices() {
        if !file.starts_with(prefix) {
            continue;
        }
        ids.extend(workspace_of(&file));
        out.push(Leftover {
            what: format!("loop device {dev} on {file}"),
            clean: format!("losetup -d {dev}"),
        });
    }
    // The cgroups of every test workspace found above (removable once their processes are).
    for (id, groups) in cgroups {
        if ids.contains(&id) {
            for g in groups {
                out.push(Leftover {
                    what: format!("cgroup {}", g.display()),
                    clean: format!("rmdir {}", quote(&g.to_string_lossy())),
                });
            }
        }
    }
    out.extend(networks(prefix, &ids));
    out
}

/// A mount of this host's mount namespace.
struct Mount {
    point: String,
    fstype: String,
    source: String,
}

fn mounts() -> Vec<Mount> {
    read(Path::new("/proc/self/mountinfo"))
        .lines()
        .filter_map(|l| {
            let (head, tail) = l.split_once(" - ")?;
            let point = unescape(head.split(' ').nth(4)?);
            let mut t = tail.split(' ');
            Some(Mount {
                point,
                fstype: t.next()?.to_string(),
                source: unescape(t.next()?),
            })
        })
        .collect()
}

/// The kernel writes spaces, tabs, newlines and backslashes in mount paths as octal escapes.
fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' {
            let code: String = chars.by_ref().take(3).collect();
            if let Ok(b) = u8::from_str_radix(&code, 8) {
                out.push(b as char);
                continue;
            }
            out.push(c);
            out.push_str(&code);
        } else {
            out.push(c);
        }
    }
    out
}

/// `(device, backing file)` of every attached loop device (a deleted file keeps its path).
fn loop_devices() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for d in std::fs::read_dir("/sys/block")
        .into_iter()
        .flatten()
        .flatten()
    {
        let file = read(&d.path().join("loop/backing_file"));
        let file = file.trim().trim_end_matches(" (deleted)");
        if !file.is_empty() {
            out.push((
                format!("/dev/{}", d.file_name().to_string_lossy()),
                file.to_string(),
            ));
        }
    }
    out.sort();
    out
}

/// Tandem's workspace cgroups by workspace id, under every hierarchy (`tandem/<id>`, as
/// `host/src/runtime/spec.rs` sets the cgroups path).
fn workspace_cgroups() -> Vec<(String, Vec<PathBuf>)> {
    let mut roots = vec![PathBuf::from("/sys/fs/cgroup/tandem")];
    for c in std::fs::read_dir("/sys/fs/cgroup")
        .into_iter()
        .flatten()
        .flatten()
    {
        roots.push(c.path().join("tandem"));
    }
    let mut by_id: std::collections::BTreeMap<String, Vec<PathBuf>> = Default::default();
    for root in roots {
        for g in std::fs::read_dir(&root).into_iter().flatten().flatten() {
            if g.path().is_dir() {
                by_id
                    .entry(g.file_name().to_string_lossy().to_string())
                    .or_default()
                    .push(g.path());
            }
        }
    }
    by_id.into_iter().collect()
}

/// The workspace id in a path `…/workspaces/<id>/…`.
fn workspace_of(path: &str) -> Option<String> {
    let mut parts = path.split('/');
    parts.find(|p| *p == "workspaces")?;
    parts.next().filter(|p| !p.is_empty()).map(str::to_string)
}

/// Egress networks of test workspaces (`ids`, or whose processes are a test's) and of no
/// workspace at all: their namespaces, host veths, nftables sets and rules.
fn networks(prefix: &str, ids: &BTreeSet<String>) -> Vec<Leftover> {
    let mut out = Vec::new();
    let mut named = BTreeSet::new();
    for ns in std::fs::read_dir("/var/run/netns")
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = ns.file_name().to_string_lossy().to_string();
        let Some(id) = name.strip_prefix("tdm-") else {
            continue;
        };
        named.insert(name.clone());
        let pids = pids_in_netns(&ns.path());
        let test = ids.contains(id) || pids.iter().any(|p| runs_on_test_layer(*p, prefix));
        if test || pids.is_empty() {
            out.push(Leftover {
                what: format!(
                    "network namespace {name}{}",
                    if test { "" } else { " (nothing runs in it)" }
                ),
                clean: format!("ip netns del {name}"),
            });
        }
    }
    let gone: BTreeSet<String> = out
        .iter()
        .filter_map(|l| l.clean.strip_prefix("ip netns del ").map(str::to_string))
        .collect();
    // Host ends `tdmv<n>`: of a namespace above, or of one no longer named.
    let links = run_text("ip", &["-o", "link", "show"]);
    let mut veths = BTreeSet::new();
    let mut live = BTreeSet::new();
    for line in links.lines() {
        let Some(name) = line
            .split(": ")
            .nth(1)
            .map(|n| n.split('@').next().unwrap_or(n))
        else {
            continue;
        };
        let Some(index) = name.strip_prefix("tdmv") else {
            continue;
        };
        let netns = line
            .split(" link-netns ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .map(str::to_string);
        let orphan = netns
            .as_ref()
            .is_none_or(|n| gone.contains(n) || !named.contains(n));
        if orphan {
            veths.insert(index.to_string());
            out.push(Leftover {
                what: format!("veth {name}"),
                clean: format!("ip link del {name}"),
            });
        } else {
            live.insert(index.to_string());
        }
    }
    // Sets and rules of a veth that is gone or goes.
    for (family, table) in [
        ("inet", "tandem"),
        ("ip", "tandem_nat"),
        ("ip6", "tandem_nat6"),
    ] {
        let listing = run_text("nft", &["-a", "list", "table", family, table]);
        let mut chain = String::new();
        let lines: Vec<&str> = listing.lines().map(str::trim).collect();
        for (i, line) in lines.iter().enumerate() {
            if let Some(c) = line.strip_prefix("chain ") {
                chain = c.split_whitespace().next().unwrap_or_default().to_string();
            } else if let Some(set) = line.strip_prefix("set ") {
                let set = set.split_whitespace().next().unwrap_or_default();
                // `a<n>` holds IPv4 addresses, `a6<n>` IPv6 ones (`a61` may be either).
                let v6 = lines[i..]
                    .iter()
                    .find(|l| l.starts_with("type "))
                    .is_some_and(|l| l.contains("ipv6"));
                let index = set
                    .strip_prefix(if v6 { "a6" } else { "a" })
                    .unwrap_or_default();
                if !live.contains(index) || veths.contains(index) {
                    out.push(Leftover {
                        what: format!("nftables set {family} {table} {set}"),
                        clean: format!("nft delete set {family} {table} {set}"),
                    });
                }
            } else if let Some(tag) = line.split("comment \"tdm-").nth(1) {
                let index = tag.split('"').next().unwrap_or_default();
                let handle = line.rsplit("# handle ").next().unwrap_or_default().trim();
                if !live.contains(index) || veths.contains(index) {
                    out.push(Leftover {
                        what: format!("nftables rule {family} {table} {chain} tdm-{index}"),
                        clean: format!("nft delete rule {family} {table} {chain} handle {handle}"),
                    });
                }
            }
        }
    }
    // Rules go before the sets they name.
    out.sort_by_key(|l| l.what.starts_with("nftables set"));
    out
}

/// Processes in the network namespace bound at `ns`.
fn pids_in_netns(ns: &Path) -> Vec<u32> {
    use std::os::unix::fs::MetadataExt;
    let Ok(want) = std::fs::metadata(ns).map(|m| m.ino()) else {
        return Vec::new();
    };
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| std::fs::metadata(format!("/proc/{p}/ns/net")).is_ok_and(|m| m.ino() == want))
        .collect()
}

/// True when process `pid`'s root is an overlay whose writable layer is under a test data dir
/// (a process joining a workspace, still in a copy of the host's mounts, is not a test's).
fn runs_on_test_layer(pid: u32, prefix: &str) -> bool {
    let upper = format!("upperdir={prefix}");
    read(Path::new(&format!("/proc/{pid}/mountinfo")))
        .lines()
        .any(|l| {
            l.split(' ').nth(4) == Some("/")
                && l.split_once(" - ")
                    .is_some_and(|(_, t)| t.starts_with("overlay ") && t.contains(&upper))
        })
}

/// `name, uid N` of a process.
fn describe(pid: u32) -> String {
    let status = read(Path::new(&format!("/proc/{pid}/status")));
    let field = |k: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .map(|v| v.split_whitespace().next().unwrap_or_default().to_string())
            .unwrap_or_default()
    };
    format!("{}, uid {}", field("Name:"), field("Uid:"))
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

fn run_text(prog: &str, args: &[&str]) -> String {
    Command::new(prog)
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
        .unwrap_or_default()
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names looked for are the ones the runtime makes.
    #[test]
    fn the_names_are_the_runtimes() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let network = read(&root.join("host/src/runtime/network.rs"));
        for name in [
            "format!(\"tdm-{wid}\")",
            "format!(\"tdmv{index}\")",
            "add set inet tandem a{index}",
            "add set inet tandem a6{index}",
            "comment \\\"{tag}\\\"",
            "let tag = format!(\"tdm-{index}\")",
            "add table ip tandem_nat\\n",
            "add table ip6 tandem_nat6\\n",
        ] {
            assert!(network.contains(name), "network.rs no longer has {name}");
        }
        let spec = read(&root.join("host/src/runtime/spec.rs"));
        assert!(spec.contains("format!(\"/tandem/{}\", want.id)"));
        let harness = read(&root.join("tests/it/harness.rs"));
        assert!(harness.contains(&format!("TEST_DIR_PREFIX: &str = \"{TEST_DIR_PREFIX}\"")));
    }

    #[test]
    fn mount_paths_are_unescaped_and_workspace_ids_found() {
        assert_eq!(unescape("/tmp/a\\040b"), "/tmp/a b");
        assert_eq!(
            workspace_of("/tmp/tandem-test-x/data/workspaces/s-1234/disk.img").as_deref(),
            Some("s-1234")
        );
        assert_eq!(workspace_of("/tmp/tandem-test-x/data"), None);
    }
}
