//! Egress allow-lists: a workspace whose recipe names domains gets a network namespace with a
//! veth pair to the host, NAT out, and nftables rules that let through only packets to the
//! addresses those names resolve to (at start). Everything else, including every service of the
//! host itself, is dropped. Without an allow-list a workspace has only its loopback.
//!
//! Addresses come from 198.18.0.0/16 (RFC 2544, reserved for network testing), a /30 per
//! workspace; names come from `egress_hosts` (static entries) or the host's resolver. The names
//! are written into the workspace's `/etc/hosts`, which is how it resolves them: there is no
//! DNS server to reach.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

use serde::{Deserialize, Serialize};
use tokio::process::Command;

use crate::{Error, Result};

/// What a workspace may reach.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Egress {
    /// Domain names (exact).
    pub allow: Vec<String>,
    /// Static name → addresses entries, used before the host's resolver.
    pub hosts: BTreeMap<String, Vec<IpAddr>>,
    /// A refused name is reported as one to ask a person about ([`super::dns::grant`] then
    /// lets it through for this workspace).
    pub ask: bool,
}

/// A workspace's network, as recorded in its directory (`net.json`) so a stop can undo it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Net {
    pub index: u32,
    pub netns: String,
    pub host_if: String,
    pub host_ip: Ipv4Addr,
    pub ws_ip: Ipv4Addr,
    /// The link's IPv6 ends, when the host has IPv6.
    #[serde(default)]
    pub host_ip6: Option<Ipv6Addr>,
    #[serde(default)]
    pub ws_ip6: Option<Ipv6Addr>,
    /// Resolved name → addresses allowed.
    pub allowed: BTreeMap<String, Vec<IpAddr>>,
    /// The allow-list as given (names and `*.` wildcards) and the static entries: what the
    /// workspace's name server answers from (kept so a restarted server serves it again).
    #[serde(default)]
    pub patterns: Vec<String>,
    #[serde(default)]
    pub hosts: BTreeMap<String, Vec<IpAddr>>,
    #[serde(default)]
    pub workspace: String,
    /// [`Egress::ask`].
    #[serde(default)]
    pub ask: bool,
}

/// The name servers this process runs, by network namespace.
static RESOLVERS: std::sync::LazyLock<
    std::sync::Mutex<std::collections::HashMap<String, tokio::task::JoinHandle<()>>>,
> = std::sync::LazyLock::new(Default::default);

/// Runs an nftables script.
pub async fn nft(script: &str) -> Result<()> {
    run("nft", &["-f", "-"], Some(script)).await.map(|_| ())
}

/// Starts the workspace's name server (answering on the host end of its link) unless it runs.
pub async fn ensure_dns(net: &Net) -> Result<()> {
    let mut running = RESOLVERS.lock().unwrap_or_else(|e| e.into_inner());
    if running.get(&net.netns).is_some_and(|h| !h.is_finished()) {
        return Ok(());
    }
    let std_sock = std::net::UdpSocket::bind((net.host_ip, 53)).map_err(|e| {
        Error::Internal(format!(
            "the workspace's name server cannot listen on {}:53: {e}",
            net.host_ip
        ))
    })?;
    std_sock.set_nonblocking(true)?;
    let sock = tokio::net::UdpSocket::from_std(std_sock)?;
    let resolver = super::dns::Resolver::new(
        net.workspace.clone(),
        net.patterns.clone(),
        net.hosts.clone(),
        format!("a{}", net.index),
        net.ws_ip6.map(|_| format!("a6{}", net.index)),
    )
    .asking(net.ask);
    running.insert(net.netns.clone(), tokio::spawn(resolver.serve(sock)));
    Ok(())
}

/// Serves the name server of the workspace whose directory is `dir` again (after this server
/// restarted), if it has a network.
pub async fn reattach(dir: &Path) -> Result<()> {
    let Ok(bytes) = std::fs::read(dir.join("net.json")) else {
        return Ok(());
    };
    let net: Net =
        serde_json::from_slice(&bytes).map_err(|e| Error::Internal(format!("net.json: {e}")))?;
    if net.patterns.is_empty() {
        return Ok(());
    }
    ensure_dns(&net).await
}

const BASE: u32 = u32::from_be_bytes([198, 18, 0, 0]);
const SLOTS: u32 = 1 << 14;

async fn run(prog: &str, args: &[&str], stdin: Option<&str>) -> Result<String> {
    use tokio::io::AsyncWriteExt;
    let mut c = Command::new(prog);
    c.args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = c.spawn().map_err(|e| {
        Error::Config(format!(
            "cannot run {prog} (install iproute2 and nftables): {e}"
        ))
    })?;
    if let Some(input) = stdin
        && let Some(mut pipe) = child.stdin.take()
    {
        pipe.write_all(input.as_bytes()).await?;
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().await?;
    if !out.status.success() {
        return Err(Error::Internal(format!(
            "{prog} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).to_string())
}

fn valid_name(n: &str) -> bool {
    // `*.example.com`: every subdomain (answered by the workspace's name server).
    let n = n.strip_prefix("*.").unwrap_or(n);
    !n.is_empty()
        && n.len() <= 253
        && n.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
}

/// Addresses a name from the resolver may never open to a workspace (the operator may still
/// list them in `egress_hosts`): loopback, link-local (cloud metadata at 169.254.169.254 and
/// fd00:ec2::254), private (RFC 1918, IPv6 unique-local, where workspace links live), CGNAT,
/// benchmarking (198.18/15), multicast, documentation, reserved; IPv4 inside IPv6 (mapped,
/// NAT64, local-use NAT64) by the IPv4 address it carries.
pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_internal_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_internal_v4(v4);
            }
            let s = v6.segments();
            // 64:ff9b::/96 (NAT64) carries an IPv4 address in its last 32 bits, and so does
            // 64:ff9b:1::/48 (RFC 8215, local-use NAT64) as a DNS64 resolver writes it (a /96
            // within it); another RFC 6052 layout leaves the low bits zero: 0.0.0.0, internal.
            if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] || s[..3] == [0x64, 0xff9b, 1] {
                return is_internal_v4(Ipv4Addr::from((u32::from(s[6]) << 16) | u32::from(s[7])));
            }
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00 // unique local
                || (s[0] & 0xffc0) == 0xfe80 // link-local
                || (s[0] & 0xffc0) == 0xfec0 // site-local (deprecated)
                || s[..2] == [0x2001, 0xdb8] // documentation
                || s[..4] == [0x100, 0, 0, 0] // discard
                || (s[0] == 0x2001 && s[1] < 0x200) // IETF protocol assignments (Teredo, ORCHID, …)
                || s[0] == 0x2002 // 6to4 (carries any IPv4 address)
                || s[..6] == [0, 0, 0, 0, 0, 0] // IPv4-compatible, reserved
        }
    }
}

fn is_internal_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0
        || a >= 240
        || (a == 100 && (64..128).contains(&b))
        || (a == 198 && (b == 18 || b == 19))
        || (a == 192 && b == 0 && ip.octets()[2] == 0)
}

/// The addresses of every exact allowed name (IPv6 ones only when the link has IPv6).
async fn resolve(egress: &Egress, v6: bool) -> Result<BTreeMap<String, Vec<IpAddr>>> {
    let mut out = BTreeMap::new();
    let family = |a: &IpAddr| a.is_ipv4() || v6;
    for name in &egress.allow {
        if !valid_name(name) {
            return Err(Error::Invalid(format!(
                "egress: {name:?} is not a domain name"
            )));
        }
        // Wildcards are answered when asked (the name server), not resolved ahead.
        if name.starts_with("*.") {
            continue;
        }
        let addrs: Vec<IpAddr> = match egress.hosts.get(name) {
            Some(a) => a.iter().copied().filter(family).collect(),
            None => {
                let found: Vec<IpAddr> = tokio::net::lookup_host((name.as_str(), 0))
                    .await
                    .map_err(|e| Error::Invalid(format!("egress: cannot resolve {name}: {e}")))?
                    .map(|a| a.ip())
                    .filter(family)
                    .collect();
                // A name (or a DNS answer someone controls) must not open the host's network
                // or the cloud's metadata service to the workspace.
                let (internal, public): (Vec<IpAddr>, Vec<IpAddr>) =
                    found.into_iter().partition(|a| is_internal(*a));
                if public.is_empty() && !internal.is_empty() {
                    return Err(Error::Invalid(format!(
                        "egress: {name} resolves only to internal addresses ({}); an operator who means it lists them under [egress_hosts] in tandem.toml",
                        internal
                            .iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join(", ")
                    )));
                }
                public
            }
        };
        out.insert(name.clone(), addrs);
    }
    Ok(out)
}

/// True when the host has IPv6 (a workspace link then gets it too).
fn host_has_ipv6() -> bool {
    std::fs::read_to_string("/proc/sys/net/ipv6/conf/all/disable_ipv6")
        .is_ok_and(|v| v.trim() == "0")
}

/// The IPv6 prefix of workspace links (unique local): `fd74:646d:0:<index>::/64`.
fn link6(index: u32, host: u16) -> Ipv6Addr {
    Ipv6Addr::new(0xfd74, 0x646d, 0, index as u16, 0, 0, 0, host)
}

/// Picks a free /30: the first index whose host interface does not exist.
fn free_index(wid: &str) -> u32 {
    let start = wid
        .bytes()
        .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(b as u32))
        % SLOTS;
    (0..SLOTS)
        .map(|i| (start + i) % SLOTS)
        .find(|i| !Path::new(&format!("/sys/class/net/tdmv{i}")).exists())
        .unwrap_or(start)
}

/// The tables and chains every workspace's rules live in (idempotent).
async fn ensure_tables() -> Result<()> {
    run(
        "nft",
        &["-f", "-"],
        Some(
            "add table inet tandem\n\
             add chain inet tandem forward { type filter hook forward priority -10 ; policy accept ; }\n\
             add chain inet tandem input { type filter hook input priority -10 ; policy accept ; }\n\
             add table ip tandem_nat\n\
             add chain ip tandem_nat post { type nat hook postrouting priority 100 ; }\n\
             add table ip6 tandem_nat6\n\
             add chain ip6 tandem_nat6 post { type nat hook postrouting priority 100 ; }\n",
        ),
    )
    .await?;
    Ok(())
}

/// Creates the workspace's network; `dir` is its directory (for `net.json` and `hosts`).
pub async fn setup(wid: &str, dir: &Path, egress: &Egress) -> Result<Net> {
    let v6 = host_has_ipv6();
    let allowed = resolve(egress, v6).await?;
    let index = free_index(wid);
    let base = BASE + index * 4;
    let net = Net {
        index,
        netns: format!("tdm-{wid}"),
        host_if: format!("tdmv{index}"),
        host_ip: Ipv4Addr::from(base + 1),
        ws_ip: Ipv4Addr::from(base + 2),
        host_ip6: v6.then(|| link6(index, 1)),
        ws_ip6: v6.then(|| link6(index, 2)),
        allowed,
        patterns: egress
            .allow
            .iter()
            .map(|p| p.to_ascii_lowercase())
            .collect(),
        hosts: egress.hosts.clone(),
        workspace: wid.to_string(),
        ask: egress.ask,
    };
    // Recorded first, so a failure half-way is still undone by `teardown`.
    std::fs::write(
        dir.join("net.json"),
        serde_json::to_vec(&net).map_err(|e| Error::Internal(e.to_string()))?,
    )?;
    let (ns, hif) = (net.netns.as_str(), net.host_if.as_str());
    let (hip, wip) = (format!("{}/30", net.host_ip), format!("{}/30", net.ws_ip));
    let gw = net.host_ip.to_string();
    run("ip", &["netns", "add", ns], None).await?;
    run(
        "ip",
        &[
            "link", "add", hif, "type", "veth", "peer", "name", "eth0", "netns", ns,
        ],
        None,
    )
    .await?;
    run("ip", &["addr", "add", &hip, "dev", hif], None).await?;
    run("ip", &["link", "set", hif, "up"], None).await?;
    run("ip", &["-n", ns, "addr", "add", &wip, "dev", "eth0"], None).await?;
    run("ip", &["-n", ns, "link", "set", "eth0", "up"], None).await?;
    run("ip", &["-n", ns, "link", "set", "lo", "up"], None).await?;
    run(
        "ip",
        &["-n", ns, "route", "add", "default", "via", &gw],
        None,
    )
    .await?;
    std::fs::write("/proc/sys/net/ipv4/ip_forward", "1")?;
    if let (Some(h6), Some(w6)) = (net.host_ip6, net.ws_ip6) {
        // `nodad`: the link is ours alone, no duplicate to detect (and no seconds to wait).
        let (h6s, w6s) = (format!("{h6}/64"), format!("{w6}/64"));
        run(
            "ip",
            &["-6", "addr", "add", &h6s, "dev", hif, "nodad"],
            None,
        )
        .await?;
        run(
            "ip",
            &["-6", "-n", ns, "addr", "add", &w6s, "dev", "eth0", "nodad"],
            None,
        )
        .await?;
        run(
            "ip",
            &[
                "-6",
                "-n",
                ns,
                "route",
                "add",
                "default",
                "via",
                &h6.to_string(),
            ],
            None,
        )
        .await?;
        std::fs::write("/proc/sys/net/ipv6/conf/all/forwarding", "1")?;
    }
    ensure_tables().await?;
    let (v4s, v6s): (Vec<IpAddr>, Vec<IpAddr>) =
        net.allowed.values().flatten().partition(|a| a.is_ipv4());
    let tag = format!("tdm-{index}");
    // Addresses a DNS answer admitted expire with its TTL; those resolved at start do not.
    let mut script = format!(
        "add set inet tandem a{index} {{ type ipv4_addr ; flags timeout ; }}\n\
         add set inet tandem a6{index} {{ type ipv6_addr ; flags timeout ; }}\n"
    );
    for (set, ips) in [(format!("a{index}"), v4s), (format!("a6{index}"), v6s)] {
        if !ips.is_empty() {
            let ips: Vec<String> = ips.iter().map(ToString::to_string).collect();
            script.push_str(&format!(
                "add element inet tandem {set} {{ {} }}\n",
                ips.join(", ")
            ));
        }
    }
    script.push_str(&format!(
        "add rule inet tandem forward iifname \"{hif}\" ip daddr @a{index} accept comment \"{tag}\"\n\
         add rule inet tandem forward iifname \"{hif}\" ip6 daddr @a6{index} accept comment \"{tag}\"\n\
         add rule inet tandem forward iifname \"{hif}\" drop comment \"{tag}\"\n\
         add rule inet tandem forward oifname \"{hif}\" ct state established,related accept comment \"{tag}\"\n\
         add rule inet tandem forward oifname \"{hif}\" drop comment \"{tag}\"\n\
         add rule inet tandem input iifname \"{hif}\" ip daddr {gw} udp dport 53 accept comment \"{tag}\"\n\
         add rule inet tandem input iifname \"{hif}\" icmpv6 type {{ nd-neighbor-solicit, nd-neighbor-advert }} accept comment \"{tag}\"\n\
         add rule inet tandem input iifname \"{hif}\" drop comment \"{tag}\"\n\
         add rule ip tandem_nat post ip saddr {} masquerade comment \"{tag}\"\n",
        net.ws_ip
    ));
    if let Some(w6) = net.ws_ip6 {
        script.push_str(&format!(
            "add rule ip6 tandem_nat6 post ip6 saddr {w6} masquerade comment \"{tag}\"\n"
        ));
    }
    run("nft", &["-f", "-"], Some(&script)).await?;
    let mut hosts = String::from("127.0.0.1 localhost\n::1 localhost\n");
    for (name, addrs) in &net.allowed {
        for a in addrs {
            hosts.push_str(&format!("{a} {name}\n"));
        }
    }
    std::fs::write(dir.join("hosts"), hosts)?;
    // The server answers the workspace's lookups: allow-listed names only.
    std::fs::write(
        dir.join("resolv.conf"),
        format!(
            "# the egress allow-list's name server (the Tandem server)\nnameserver {gw}\noptions timeout:2 attempts:2\n"
        ),
    )?;
    ensure_dns(&net).await?;
    Ok(net)
}

/// Undoes `setup` from `dir/net.json`; nothing recorded is nothing to do.
pub async fn teardown(dir: &Path) -> Result<()> {
    let Ok(bytes) = std::fs::read(dir.join("net.json")) else {
        return Ok(());
    };
    let net: Net =
        serde_json::from_slice(&bytes).map_err(|e| Error::Internal(format!("net.json: {e}")))?;
    if let Some(h) = RESOLVERS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&net.netns)
    {
        h.abort();
    }
    super::dns::forget(&net.workspace);
    let tag = format!("\"tdm-{}\"", net.index);
    for (family, table, chain) in [
        ("inet", "tandem", "forward"),
        ("inet", "tandem", "input"),
        ("ip", "tandem_nat", "post"),
        ("ip6", "tandem_nat6", "post"),
    ] {
        let Ok(listing) = run("nft", &["-a", "list", "chain", family, table, chain], None).await
        else {
            continue;
        };
        for line in listing.lines().filter(|l| l.contains(&tag)) {
            if let Some(handle) = line.rsplit("# handle ").next().map(str::trim) {
                let _ = run(
                    "nft",
                    &["delete", "rule", family, table, chain, "handle", handle],
                    None,
                )
                .await;
            }
        }
    }
    for set in [format!("a{}", net.index), format!("a6{}", net.index)] {
        let _ = run("nft", &["delete", "set", "inet", "tandem", &set], None).await;
    }
    let _ = run("ip", &["link", "del", &net.host_if], None).await;
    let _ = run("ip", &["netns", "del", &net.netns], None).await;
    let _ = std::fs::remove_file(dir.join("net.json"));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::is_internal;

    #[test]
    fn internal_ranges_are_internal() {
        for ip in [
            "127.0.0.1",
            "169.254.169.254",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "100.64.0.1",
            "198.18.0.2",
            "198.19.3.4",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "192.0.0.8",
            "::1",
            "::",
            "fe80::1",
            "fd00:ec2::254",
            "fd74:646d:0:7::1",
            "ff02::1",
            "::ffff:169.254.169.254",
            "::ffff:10.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "64:ff9b:1::a9fe:a9fe",
            "64:ff9b:1::a00:1",
            "64:ff9b:1:abcd::c0a8:101",
            "64:ff9b:1:a00:0:100::",
            "2001:db8::1",
            "2002:a9fe:a9fe::1",
            "::127.0.0.1",
        ] {
            assert!(is_internal(ip.parse().unwrap()), "{ip}");
        }
        for ip in [
            "1.1.1.1",
            "140.82.112.3",
            "104.16.0.1",
            "100.128.0.1",
            "172.32.0.1",
            "2606:4700::6810:84e5",
            "2a03:2880:f12f:83:face:b00c::25de",
            "::ffff:1.1.1.1",
            "64:ff9b::101:101",
            "64:ff9b:1::101:101",
        ] {
            assert!(!is_internal(ip.parse().unwrap()), "{ip}");
        }
    }
}
