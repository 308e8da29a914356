//! Per-client-address rate limits for the requests anyone may make without signing in that
//! start something stored or sent on: extension pairings and sign-ins (OpenID Connect and
//! GitHub, one bucket). A token bucket per address (an IPv6 address counts by its /64, which one
//! host usually holds whole), in a map of bounded size, so a flood from many addresses costs
//! bounded memory; when it is full, the addresses heard from longest ago are forgotten first.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Most addresses one limiter remembers.
pub const MAX_ADDRESSES: usize = 10_000;

/// One limiter: `burst` at once, then one more every `every`.
pub struct Limiter {
    /// What is limited, in the refusal's words ("pairing starts").
    pub what: &'static str,
    burst: u32,
    every: Duration,
    buckets: Mutex<HashMap<IpAddr, Bucket>>,
}

#[derive(Clone, Copy)]
struct Bucket {
    /// Tokens left at `at`.
    tokens: f64,
    at: Instant,
}

impl Limiter {
    pub fn new(what: &'static str, burst: u32, every: Duration) -> Self {
        Self {
            what,
            burst,
            every,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one token for `addr` at `now`; when there is none, how long until there is.
    pub fn take(&self, addr: IpAddr, now: Instant) -> Result<(), Duration> {
        let key = key_of(addr);
        let rate = 1.0 / self.every.as_secs_f64();
        let burst = f64::from(self.burst);
        let mut map = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if !map.contains_key(&key) && map.len() >= MAX_ADDRESSES {
            // Full buckets are the same as none: drop them, then the stalest if still full.
            map.retain(|_, b| b.tokens + now.duration_since(b.at).as_secs_f64() * rate < burst);
            if map.len() >= MAX_ADDRESSES
                && let Some(stalest) = map.iter().min_by_key(|(_, b)| b.at).map(|(k, _)| *k)
            {
                map.remove(&stalest);
            }
        }
        let b = map.entry(key).or_insert(Bucket {
            tokens: burst,
            at: now,
        });
        let tokens = (b.tokens + now.duration_since(b.at).as_secs_f64() * rate).min(burst);
        if tokens >= 1.0 {
            *b = Bucket {
                tokens: tokens - 1.0,
                at: now,
            };
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - tokens) / rate))
        }
    }

    /// How many addresses it remembers now.
    pub fn len(&self) -> usize {
        self.buckets.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The key an address counts under: IPv4 as is (also when mapped into IPv6), IPv6 by its /64.
fn key_of(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V4(_) => addr,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

/// The server's limiters.
pub struct Limits {
    /// `POST /api/extension/pairings`: a person pairs now and then; 10 at once, then one
    /// every 30 seconds.
    pub pairings: Limiter,
    /// `GET /api/auth/oidc/{id}` and `GET /api/auth/github` together: 20 at once (an office
    /// behind one address signing in at nine), then one every 3 seconds.
    pub sign_in_starts: Limiter,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            pairings: Limiter::new("pairing starts", 10, Duration::from_secs(30)),
            sign_in_starts: Limiter::new("sign-in starts", 20, Duration::from_secs(3)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_one_per_period_per_address() {
        let l = Limiter::new("things", 3, Duration::from_secs(10));
        let t0 = Instant::now();
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        for _ in 0..3 {
            assert!(l.take(a, t0).is_ok());
        }
        let wait = l.take(a, t0).unwrap_err();
        assert!(wait > Duration::from_secs(9) && wait <= Duration::from_secs(10));
        assert!(l.take(b, t0).is_ok(), "another address has its own bucket");
        assert!(l.take(a, t0 + Duration::from_secs(10)).is_ok());
        assert!(l.take(a, t0 + Duration::from_secs(10)).is_err());
    }

    #[test]
    fn one_ipv6_host_is_one_address_and_a_mapped_ipv4_is_the_ipv4() {
        let l = Limiter::new("things", 1, Duration::from_secs(60));
        let t0 = Instant::now();
        assert!(l.take("2001:db8:1:2::1".parse().unwrap(), t0).is_ok());
        assert!(l.take("2001:db8:1:2::ffff".parse().unwrap(), t0).is_err());
        assert!(l.take("2001:db8:1:3::1".parse().unwrap(), t0).is_ok());
        assert!(l.take("192.0.2.7".parse().unwrap(), t0).is_ok());
        assert!(l.take("::ffff:192.0.2.7".parse().unwrap(), t0).is_err());
    }

    #[test]
    fn a_flood_from_many_addresses_stays_within_the_bound() {
        let l = Limiter::new("things", 2, Duration::from_secs(60));
        let t0 = Instant::now();
        for i in 0..(MAX_ADDRESSES as u32 + 500) {
            let _ = l.take(IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + i)), t0);
        }
        assert!(l.len() <= MAX_ADDRESSES);
        // A newcomer still gets its burst.
        assert!(l.take("198.51.100.1".parse().unwrap(), t0).is_ok());
    }
}
