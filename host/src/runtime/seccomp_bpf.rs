//! A workspace's seccomp profile compiled to BPF for this host's architecture, once per profile
//! in a process (with Firecracker's `seccompiler`), in the file `tandem-confine` installs in
//! every workspace process. The runtime would otherwise compile the profile's ~360 rules for five
//! architectures with libseccomp at every start and every `exec` (40–55 ms each).
//!
//! Only the host's own architecture is allowed: a 32-bit (`int 0x80`) or x32 call from a
//! workspace is refused, and a process making a 32-bit one is killed.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use oci_spec::runtime::{LinuxSeccomp, LinuxSeccompAction, LinuxSeccompOperator};
use serde_json::{Value, json};

use crate::{Error, Result};

/// Profiles compiled so far, by their JSON.
static COMPILED: Mutex<BTreeMap<String, Arc<Vec<u8>>>> = Mutex::new(BTreeMap::new());

/// How many times a profile was compiled in this process.
static COMPILATIONS: AtomicUsize = AtomicUsize::new(0);

/// How many profiles this process compiled (each profile once, however many workspaces start).
pub fn compilations() -> usize {
    COMPILATIONS.load(Ordering::SeqCst)
}

/// `profile` as a `tandem-confine` filter file for this host's architecture.
pub fn for_host(profile: &LinuxSeccomp) -> Result<Arc<Vec<u8>>> {
    let key = serde_json::to_string(profile).map_err(|e| Error::Internal(e.to_string()))?;
    let mut compiled = COMPILED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(bytes) = compiled.get(&key) {
        return Ok(bytes.clone());
    }
    let bytes = Arc::new(compile(profile)?);
    COMPILATIONS.fetch_add(1, Ordering::SeqCst);
    compiled.insert(key, bytes.clone());
    Ok(bytes)
}

fn unsupported(what: String) -> Error {
    Error::Invalid(format!(
        "the seccomp profile cannot be precompiled here: {what}"
    ))
}

fn action(a: LinuxSeccompAction, errno: Option<u32>) -> Result<Value> {
    match a {
        LinuxSeccompAction::ScmpActAllow => Ok(json!("allow")),
        LinuxSeccompAction::ScmpActErrno => Ok(json!({ "errno": errno.unwrap_or(1) })),
        other => Err(unsupported(format!("the action {other:?}"))),
    }
}

/// One filter in seccompiler's JSON: what a call matching none of its rules gets, what a
/// matching one gets, and its rules (a syscall's name and the conditions on its arguments).
struct Filter {
    mismatch: Value,
    matched: Value,
    rules: Vec<(String, Value)>,
}

/// The profile's rules as seccompiler's JSON filters: one whose matches are allowed (everything
/// else refused with the profile's default), then one per errno a rule returns (everything else
/// allowed), installed after it so that rule's errno is what the caller sees.
fn filters(profile: &LinuxSeccomp) -> Result<Vec<Filter>> {
    let default = action(profile.default_action(), profile.default_errno_ret())?;
    if default == json!("allow") {
        return Err(unsupported("a profile that allows by default".into()));
    }
    let mut allowed: Vec<(String, Value)> = Vec::new();
    let mut refused: BTreeMap<u32, Vec<(String, Value)>> = BTreeMap::new();
    for rule in profile.syscalls().as_deref().unwrap_or_default() {
        let mut args = Vec::new();
        for a in rule.args().as_deref().unwrap_or_default() {
            let (op, val) = match a.op() {
                LinuxSeccompOperator::ScmpCmpEq => (json!("eq"), a.value()),
                LinuxSeccompOperator::ScmpCmpNe => (json!("ne"), a.value()),
                LinuxSeccompOperator::ScmpCmpLt => (json!("lt"), a.value()),
                LinuxSeccompOperator::ScmpCmpLe => (json!("le"), a.value()),
                LinuxSeccompOperator::ScmpCmpGt => (json!("gt"), a.value()),
                LinuxSeccompOperator::ScmpCmpGe => (json!("ge"), a.value()),
                // The runtime's masked-equal: `arg & value == value_two`.
                LinuxSeccompOperator::ScmpCmpMaskedEq => (
                    json!({ "masked_eq": a.value() }),
                    a.value_two().unwrap_or_default(),
                ),
            };
            args.push(json!({ "index": a.index(), "type": "qword", "op": op, "val": val }));
        }
        let args = Value::Array(args);
        match rule.action() {
            LinuxSeccompAction::ScmpActAllow => {
                for name in rule.names() {
                    allowed.push((name.clone(), args.clone()));
                }
            }
            LinuxSeccompAction::ScmpActErrno => {
                let errno = rule.errno_ret().unwrap_or(1);
                for name in rule.names() {
                    refused
                        .entry(errno)
                        .or_default()
                        .push((name.clone(), args.clone()));
                }
            }
            other => return Err(unsupported(format!("the action {other:?}"))),
        }
    }
    // A call allowed (or refused) whatever its arguments needs no conditional rule beside it
    // (seccompiler would read the two as "only with these arguments").
    fn merged(rules: &mut Vec<(String, Value)>) {
        let whole: std::collections::HashSet<String> = rules
            .iter()
            .filter(|(_, a)| a.as_array().is_some_and(Vec::is_empty))
            .map(|(n, _)| n.clone())
            .collect();
        rules.retain(|(n, a)| !whole.contains(n) || a.as_array().is_some_and(Vec::is_empty));
        rules.dedup();
    }
    merged(&mut allowed);
    for rules in refused.values_mut() {
        merged(rules);
    }
    // A later filter's errno outranks an earlier one's allow: a call both allowed and refused
    // would be refused here where the runtime might allow it. Left to the runtime.
    if let Some((name, _)) = refused
        .values()
        .flatten()
        .find(|(n, _)| allowed.iter().any(|(a, _)| a == n))
    {
        return Err(unsupported(format!("{name} is both allowed and refused")));
    }
    let mut out = vec![Filter {
        mismatch: default,
        matched: json!("allow"),
        rules: allowed,
    }];
    for (errno, rules) in refused {
        out.push(Filter {
            mismatch: json!("allow"),
            matched: json!({ "errno": errno }),
            rules,
        });
    }
    Ok(out)
}

fn compile(profile: &LinuxSeccomp) -> Result<Vec<u8>> {
    let arch = seccompiler::TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|_| unsupported(format!("no compiler for {}", std::env::consts::ARCH)))?;
    let filters = filters(profile)?;
    // Names this architecture does not have (`chown32` on x86_64) are left out, as the runtime
    // leaves them out: asked one by one, since the compiler refuses a filter naming one.
    let mut known: HashMap<String, bool> = HashMap::new();
    for f in &filters {
        for (name, _) in &f.rules {
            if !known.contains_key(name) {
                let probe = json!({ "probe": {
                    "mismatch_action": "allow",
                    "filter_action": { "errno": 1 },
                    "filter": [{ "syscall": name }],
                }});
                let ok = seccompiler::compile_from_json(probe.to_string().as_bytes(), arch).is_ok();
                known.insert(name.clone(), ok);
            }
        }
    }
    let mut programs = Vec::new();
    for (
        i,
        Filter {
            mismatch,
            matched,
            rules,
        },
    ) in filters.into_iter().enumerate()
    {
        let rules: Vec<Value> = rules
            .into_iter()
            .filter(|(name, _)| known.get(name) == Some(&true))
            .map(
                |(name, args)| match args.as_array().is_some_and(Vec::is_empty) {
                    true => json!({ "syscall": name }),
                    false => json!({ "syscall": name, "args": args }),
                },
            )
            .collect();
        let name = format!("f{i}");
        let doc = json!({ &name: {
            "mismatch_action": mismatch,
            "filter_action": matched,
            "filter": rules,
        }});
        let mut map = seccompiler::compile_from_json(doc.to_string().as_bytes(), arch)
            .map_err(|e| unsupported(e.to_string()))?;
        programs.push(
            map.remove(&name)
                .ok_or_else(|| unsupported("the compiler gave no program".into()))?,
        );
    }
    Ok(tandem_confine::encode(&programs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_profile_compiles_for_this_host_once() {
        let profile = super::super::seccomp::default_profile();
        let a = for_host(&profile).unwrap();
        let b = for_host(&profile).unwrap();
        assert!(
            Arc::ptr_eq(&a, &b),
            "the second start reuses the first's program"
        );
        let programs = tandem_confine::decode(&a).unwrap();
        // Allowed calls, then clone3's ENOSYS.
        assert_eq!(programs.len(), 2);
        assert!(programs[0].len() > 300, "{}", programs[0].len());
    }

    #[test]
    fn a_profile_that_allows_by_default_or_kills_is_left_to_the_runtime() {
        let mut p = super::super::seccomp::default_profile();
        p.set_default_action(LinuxSeccompAction::ScmpActAllow);
        assert!(filters(&p).is_err());
        let mut p = super::super::seccomp::default_profile();
        p.set_default_action(LinuxSeccompAction::ScmpActKillProcess);
        assert!(filters(&p).is_err());
        // clone3 allowed as well as refused: the runtime decides, not a guess here.
        let mut p = super::super::seccomp::default_profile();
        let mut rules = p.syscalls().clone().unwrap();
        rules[0].set_names(vec!["clone3".into()]);
        p.set_syscalls(Some(rules));
        assert!(filters(&p).is_err());
    }
}
