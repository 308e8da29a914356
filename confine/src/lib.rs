//! The file a workspace's seccomp filter travels in, from the host (which compiles it once per
//! profile) to `tandem-confine` inside the workspace (which installs it): `TSB1`, then the number
//! of programs, then each program's length and instructions (`code` u16, `jt` u8, `jf` u8, `k`
//! u32), all little-endian. Programs are installed in order; where two refuse the same call with
//! different errors, the later one's error is what the caller sees.

pub use seccompiler::sock_filter;

const MAGIC: &[u8; 4] = b"TSB1";

/// How `tandem-confine --in-mount-ns` exits when the runtime's mount namespace cannot be used
/// (the command never ran): the host tells this apart from the runtime's own failures.
pub const LAUNCHER_BROKEN: i32 = 125;

/// Most programs a file holds.
pub const MAX_PROGRAMS: usize = 8;

/// Most instructions a program holds (the kernel's own limit, `BPF_MAXINSNS`).
pub const MAX_INSTRUCTIONS: usize = 4096;

/// What is wrong with a filter file.
#[derive(Debug, PartialEq, Eq)]
pub struct Malformed(pub &'static str);

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "not a seccomp filter file: {}", self.0)
    }
}

impl std::error::Error for Malformed {}

/// The file holding `programs`.
pub fn encode(programs: &[Vec<sock_filter>]) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.extend((programs.len() as u32).to_le_bytes());
    for p in programs {
        out.extend((p.len() as u32).to_le_bytes());
        for i in p {
            out.extend(i.code.to_le_bytes());
            out.push(i.jt);
            out.push(i.jf);
            out.extend(i.k.to_le_bytes());
        }
    }
    out
}

/// The next little-endian u32 of `rest`, which moves past it.
fn u32_at(rest: &mut &[u8], what: &'static str) -> Result<usize, Malformed> {
    let (n, tail) = rest.split_first_chunk::<4>().ok_or(Malformed(what))?;
    *rest = tail;
    Ok(u32::from_le_bytes(*n) as usize)
}

/// The programs in `bytes`; anything but a whole, bounded file is refused.
pub fn decode(bytes: &[u8]) -> Result<Vec<Vec<sock_filter>>, Malformed> {
    let mut rest = bytes.strip_prefix(MAGIC).ok_or(Malformed("wrong magic"))?;
    let count = u32_at(&mut rest, "no program count")?;
    if count == 0 || count > MAX_PROGRAMS {
        return Err(Malformed("a program count out of bounds"));
    }
    let mut programs = Vec::with_capacity(count);
    for _ in 0..count {
        let len = u32_at(&mut rest, "a program cut short")?;
        if len == 0 || len > MAX_INSTRUCTIONS {
            return Err(Malformed("a program length out of bounds"));
        }
        let mut p = Vec::with_capacity(len);
        for _ in 0..len {
            let (i, tail) = rest
                .split_first_chunk::<8>()
                .ok_or(Malformed("a program cut short"))?;
            rest = tail;
            p.push(sock_filter {
                code: u16::from_le_bytes([i[0], i[1]]),
                jt: i[2],
                jf: i[3],
                k: u32::from_le_bytes([i[4], i[5], i[6], i[7]]),
            });
        }
        programs.push(p);
    }
    if !rest.is_empty() {
        return Err(Malformed("bytes after the last program"));
    }
    Ok(programs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn program(n: u32) -> Vec<sock_filter> {
        (0..n)
            .map(|k| sock_filter {
                code: 0x15,
                jt: 1,
                jf: 2,
                k: k * 7,
            })
            .collect()
    }

    #[test]
    fn programs_round_trip() {
        let programs = vec![program(3), program(1)];
        assert_eq!(decode(&encode(&programs)).unwrap(), programs);
    }

    #[test]
    fn a_cut_padded_or_unbounded_file_is_refused() {
        let bytes = encode(&[program(3)]);
        assert!(decode(&bytes[..bytes.len() - 1]).is_err());
        let mut padded = bytes.clone();
        padded.push(0);
        assert!(decode(&padded).is_err());
        assert!(decode(b"TSB1\0\0\0\0").is_err(), "no programs");
        assert!(decode(b"ELF!").is_err());
        let mut huge = b"TSB1\x01\0\0\0".to_vec();
        huge.extend(((MAX_INSTRUCTIONS + 1) as u32).to_le_bytes());
        assert!(decode(&huge).is_err());
    }
}
