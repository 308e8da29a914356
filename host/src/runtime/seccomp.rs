//! The seccomp profile of a workspace: Docker's default (moby `profiles/seccomp/default.json`)
//! for Docker's default capability set, so that what runs under `docker run` runs here, with a
//! few more syscalls refused that no workspace needs and that widen the kernel's attack surface.

use oci_spec::runtime::{
    Arch, LinuxSeccomp, LinuxSeccompAction, LinuxSeccompArg, LinuxSeccompArgBuilder,
    LinuxSeccompBuilder, LinuxSeccompOperator, LinuxSyscall, LinuxSyscallBuilder,
};

/// What every syscall not listed returns: "not permitted", as Docker does, so callers take it for
/// a privilege they lack rather than a kernel that lacks the call.
const EPERM: u32 = 1;

/// What `clone3` returns: "no such call", so glibc falls back to `clone`, whose flags (unlike
/// `clone3`'s, which sit behind a pointer) the filter can read.
const ENOSYS: u32 = 38;

/// `AF_VSOCK`: sockets to the hypervisor and its other guests, which Docker refuses.
const AF_VSOCK: u64 = 40;

/// `CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET |
/// CLONE_NEWCGROUP`: new namespaces are where most container escapes start (a user namespace
/// hands out every capability inside it), so `clone` may create none.
const CLONE_NAMESPACE_FLAGS: u64 = 0x7E02_0000;

/// The `personality` values Docker allows: `PER_LINUX`, `PER_LINUX32`, `UNAME26`,
/// `PER_LINUX32 | UNAME26` and the query `0xffffffff`; the rest (`ADDR_NO_RANDOMIZE`,
/// `READ_IMPLIES_EXEC`, ...) weaken the process's own hardening.
const PERSONALITIES: &[u64] = &[0x0, 0x8, 0x2_0000, 0x2_0008, 0xffff_ffff];

/// Syscalls a test calls inside a workspace and expects refused.
pub const DENIED_PROBES: &[&str] = &["keyctl", "unshare", "mount", "bpf", "add_key"];

/// Allowed whatever their arguments. Docker's unconditional list, less `adjtimex`,
/// `clock_adjtime*`, `name_to_handle_at` and `io_uring_*`; plus what Docker allows for
/// `CAP_SYS_CHROOT` (`chroot`), for kernels from 4.8 (`ptrace`: gdb and strace in a workspace)
/// and per architecture. Names an architecture lacks are skipped by the runtime for it.
const ALLOWED: &[&str] = &[
    "accept",
    "accept4",
    "access",
    "alarm",
    "bind",
    "brk",
    "cachestat",
    "capget",
    "capset",
    "chdir",
    "chmod",
    "chown",
    "chown32",
    "chroot",
    "clock_getres",
    "clock_getres_time64",
    "clock_gettime",
    "clock_gettime64",
    "clock_nanosleep",
    "clock_nanosleep_time64",
    "close",
    "close_range",
    "connect",
    "copy_file_range",
    "creat",
    "dup",
    "dup2",
    "dup3",
    "epoll_create",
    "epoll_create1",
    "epoll_ctl",
    "epoll_ctl_old",
    "epoll_pwait",
    "epoll_pwait2",
    "epoll_wait",
    "epoll_wait_old",
    "eventfd",
    "eventfd2",
    "execve",
    "execveat",
    "exit",
    "exit_group",
    "faccessat",
    "faccessat2",
    "fadvise64",
    "fadvise64_64",
    "fallocate",
    "fanotify_mark",
    "fchdir",
    "fchmod",
    "fchmodat",
    "fchmodat2",
    "fchown",
    "fchown32",
    "fchownat",
    "fcntl",
    "fcntl64",
    "fdatasync",
    "fgetxattr",
    "flistxattr",
    "flock",
    "fork",
    "fremovexattr",
    "fsetxattr",
    "fstat",
    "fstat64",
    "fstatat64",
    "fstatfs",
    "fstatfs64",
    "fsync",
    "ftruncate",
    "ftruncate64",
    "futex",
    "futex_requeue",
    "futex_time64",
    "futex_wait",
    "futex_waitv",
    "futex_wake",
    "futimesat",
    "getcpu",
    "getcwd",
    "getdents",
    "getdents64",
    "getegid",
    "getegid32",
    "geteuid",
    "geteuid32",
    "getgid",
    "getgid32",
    "getgroups",
    "getgroups32",
    "getitimer",
    "getpeername",
    "getpgid",
    "getpgrp",
    "getpid",
    "getppid",
    "getpriority",
    "getrandom",
    "getresgid",
    "getresgid32",
    "getresuid",
    "getresuid32",
    "getrlimit",
    "get_robust_list",
    "getrusage",
    "getsid",
    "getsockname",
    "getsockopt",
    "get_thread_area",
    "gettid",
    "gettimeofday",
    "getuid",
    "getuid32",
    "getxattr",
    "inotify_add_watch",
    "inotify_init",
    "inotify_init1",
    "inotify_rm_watch",
    "io_cancel",
    "ioctl",
    "io_destroy",
    "io_getevents",
    "io_pgetevents",
    "io_pgetevents_time64",
    "ioprio_get",
    "ioprio_set",
    "io_setup",
    "io_submit",
    "ipc",
    "kill",
    "landlock_add_rule",
    "landlock_create_ruleset",
    "landlock_restrict_self",
    "lchown",
    "lchown32",
    "lgetxattr",
    "link",
    "linkat",
    "listen",
    "listxattr",
    "llistxattr",
    "_llseek",
    "lremovexattr",
    "lseek",
    "lsetxattr",
    "lstat",
    "lstat64",
    "madvise",
    "map_shadow_stack",
    "membarrier",
    "memfd_create",
    "memfd_secret",
    "mincore",
    "mkdir",
    "mkdirat",
    "mknod",
    "mknodat",
    "mlock",
    "mlock2",
    "mlockall",
    "mmap",
    "mmap2",
    "mprotect",
    "mq_getsetattr",
    "mq_notify",
    "mq_open",
    "mq_timedreceive",
    "mq_timedreceive_time64",
    "mq_timedsend",
    "mq_timedsend_time64",
    "mq_unlink",
    "mremap",
    "msgctl",
    "msgget",
    "msgrcv",
    "msgsnd",
    "msync",
    "munlock",
    "munlockall",
    "munmap",
    "nanosleep",
    "newfstatat",
    "_newselect",
    "open",
    "openat",
    "openat2",
    "pause",
    "pidfd_open",
    "pidfd_send_signal",
    "pipe",
    "pipe2",
    "pkey_alloc",
    "pkey_free",
    "pkey_mprotect",
    "poll",
    "ppoll",
    "ppoll_time64",
    "prctl",
    "pread64",
    "preadv",
    "preadv2",
    "prlimit64",
    "process_mrelease",
    "pselect6",
    "pselect6_time64",
    "ptrace",
    "pwrite64",
    "pwritev",
    "pwritev2",
    "read",
    "readahead",
    "readlink",
    "readlinkat",
    "readv",
    "recv",
    "recvfrom",
    "recvmmsg",
    "recvmmsg_time64",
    "recvmsg",
    "remap_file_pages",
    "removexattr",
    "rename",
    "renameat",
    "renameat2",
    "restart_syscall",
    "rmdir",
    "rseq",
    "rt_sigaction",
    "rt_sigpending",
    "rt_sigprocmask",
    "rt_sigqueueinfo",
    "rt_sigreturn",
    "rt_sigsuspend",
    "rt_sigtimedwait",
    "rt_sigtimedwait_time64",
    "rt_tgsigqueueinfo",
    "sched_getaffinity",
    "sched_getattr",
    "sched_getparam",
    "sched_get_priority_max",
    "sched_get_priority_min",
    "sched_getscheduler",
    "sched_rr_get_interval",
    "sched_rr_get_interval_time64",
    "sched_setaffinity",
    "sched_setattr",
    "sched_setparam",
    "sched_setscheduler",
    "sched_yield",
    "seccomp",
    "select",
    "semctl",
    "semget",
    "semop",
    "semtimedop",
    "semtimedop_time64",
    "send",
    "sendfile",
    "sendfile64",
    "sendmmsg",
    "sendmsg",
    "sendto",
    "setfsgid",
    "setfsgid32",
    "setfsuid",
    "setfsuid32",
    "setgid",
    "setgid32",
    "setgroups",
    "setgroups32",
    "setitimer",
    "setpgid",
    "setpriority",
    "setregid",
    "setregid32",
    "setresgid",
    "setresgid32",
    "setresuid",
    "setresuid32",
    "setreuid",
    "setreuid32",
    "setrlimit",
    "set_robust_list",
    "setsid",
    "setsockopt",
    "set_thread_area",
    "set_tid_address",
    "setuid",
    "setuid32",
    "setxattr",
    "shmat",
    "shmctl",
    "shmdt",
    "shmget",
    "shutdown",
    "sigaltstack",
    "signalfd",
    "signalfd4",
    "sigprocmask",
    "sigreturn",
    // `socketcall` is not here: the old x86 multiplexer would reach `socket(AF_VSOCK, …)`
    // past the rule on `socket`; glibc calls the socket syscalls directly.
    "socketpair",
    "splice",
    "stat",
    "stat64",
    "statfs",
    "statfs64",
    "statx",
    "symlink",
    "symlinkat",
    "sync",
    "sync_file_range",
    "syncfs",
    "sysinfo",
    "tee",
    "tgkill",
    "time",
    "timer_create",
    "timer_delete",
    "timer_getoverrun",
    "timer_gettime",
    "timer_gettime64",
    "timer_settime",
    "timer_settime64",
    "timerfd_create",
    "timerfd_gettime",
    "timerfd_gettime64",
    "timerfd_settime",
    "timerfd_settime64",
    "times",
    "tkill",
    "truncate",
    "truncate64",
    "ugetrlimit",
    "umask",
    "uname",
    "unlink",
    "unlinkat",
    "utime",
    "utimensat",
    "utimensat_time64",
    "utimes",
    "vfork",
    "vmsplice",
    "wait4",
    "waitid",
    "waitpid",
    "write",
    "writev",
    // x86_64 and x32: setting the FS/GS base (thread-local storage).
    "arch_prctl",
    // x86: 16-bit segments (Wine, some JITs).
    "modify_ldt",
    // 32-bit arm.
    "arm_fadvise64_64",
    "arm_sync_file_range",
    "sync_file_range2",
    "breakpoint",
    "cacheflush",
    "set_tls",
];

/// The profile a workspace's container runs under.
pub fn default_profile() -> LinuxSeccomp {
    let mut syscalls = vec![allow(ALLOWED, Vec::new())];
    syscalls.push(allow(
        &["socket"],
        vec![arg(0, LinuxSeccompOperator::ScmpCmpNe, AF_VSOCK)],
    ));
    // One rule per value: the conditions of one rule must all hold.
    for &p in PERSONALITIES {
        syscalls.push(allow(
            &["personality"],
            vec![arg(0, LinuxSeccompOperator::ScmpCmpEq, p)],
        ));
    }
    // Masked-equal compares `flags & value` with `value_two`.
    syscalls.push(allow(
        &["clone"],
        vec![
            LinuxSeccompArgBuilder::default()
                .index(0usize)
                .value(CLONE_NAMESPACE_FLAGS)
                .value_two(0u64)
                .op(LinuxSeccompOperator::ScmpCmpMaskedEq)
                .build()
                .expect("every field is set"),
        ],
    ));
    syscalls.push(
        LinuxSyscallBuilder::default()
            .names(vec!["clone3".to_string()])
            .action(LinuxSeccompAction::ScmpActErrno)
            .errno_ret(ENOSYS)
            .build()
            .expect("every field is set"),
    );
    LinuxSeccompBuilder::default()
        .default_action(LinuxSeccompAction::ScmpActErrno)
        .default_errno_ret(EPERM)
        .architectures(vec![
            Arch::ScmpArchX86_64,
            Arch::ScmpArchX86,
            Arch::ScmpArchX32,
            Arch::ScmpArchAarch64,
            Arch::ScmpArchArm,
        ])
        .syscalls(syscalls)
        .build()
        .expect("every field is set")
}

/// Every syscall some rule allows, with or without conditions on its arguments, once each.
pub fn allowed_names() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = ALLOWED.to_vec();
    names.extend(["socket", "personality", "clone"]);
    names
}

fn allow(names: &[&str], args: Vec<LinuxSeccompArg>) -> LinuxSyscall {
    let mut b = LinuxSyscallBuilder::default()
        .names(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
        .action(LinuxSeccompAction::ScmpActAllow);
    if !args.is_empty() {
        b = b.args(args);
    }
    b.build().expect("every field is set")
}

fn arg(index: usize, op: LinuxSeccompOperator, value: u64) -> LinuxSeccompArg {
    LinuxSeccompArgBuilder::default()
        .index(index)
        .value(value)
        .op(op)
        .build()
        .expect("every field is set")
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    /// Refused by Docker for its default capabilities, or refused here on purpose.
    const DANGEROUS: &[&str] = &[
        "mount",
        "umount",
        "umount2",
        "pivot_root",
        "unshare",
        "setns",
        "keyctl",
        "add_key",
        "request_key",
        "bpf",
        "kexec_load",
        "kexec_file_load",
        "init_module",
        "finit_module",
        "delete_module",
        "open_by_handle_at",
        "name_to_handle_at",
        "perf_event_open",
        "reboot",
        "swapon",
        "swapoff",
        "syslog",
        "acct",
        "settimeofday",
        "stime",
        "clock_settime",
        "clock_settime64",
        "clock_adjtime",
        "clock_adjtime64",
        "adjtimex",
        "userfaultfd",
        "quotactl",
        "quotactl_fd",
        "iopl",
        "ioperm",
        "lookup_dcookie",
        "vm86",
        "vm86old",
        "uselib",
        "ustat",
        "sysfs",
        "_sysctl",
        "nfsservctl",
        "create_module",
        "get_kernel_syms",
        "query_module",
        "kcmp",
        "pidfd_getfd",
        "process_madvise",
        "process_vm_readv",
        "process_vm_writev",
        "fanotify_init",
        "mbind",
        "move_pages",
        "set_mempolicy",
        "set_mempolicy_home_node",
        "get_mempolicy",
        "migrate_pages",
        "io_uring_setup",
        "io_uring_enter",
        "io_uring_register",
        "fsopen",
        "fsconfig",
        "fsmount",
        "fspick",
        "move_mount",
        "open_tree",
        "mount_setattr",
        "sethostname",
        "setdomainname",
        "vhangup",
    ];

    fn rules_for<'a>(p: &'a LinuxSeccomp, name: &str) -> Vec<&'a LinuxSyscall> {
        p.syscalls()
            .as_ref()
            .expect("the profile has rules")
            .iter()
            .filter(|r| r.names().iter().any(|n| n == name))
            .collect()
    }

    #[test]
    fn refuses_by_default_with_eperm() {
        let p = default_profile();
        assert_eq!(p.default_action(), LinuxSeccompAction::ScmpActErrno);
        assert_eq!(p.default_errno_ret(), Some(1));
        let arches = p.architectures().as_ref().expect("architectures");
        for a in [
            Arch::ScmpArchX86_64,
            Arch::ScmpArchX86,
            Arch::ScmpArchX32,
            Arch::ScmpArchAarch64,
            Arch::ScmpArchArm,
        ] {
            assert!(arches.contains(&a), "{a:?}");
        }
    }

    #[test]
    fn allows_none_of_the_dangerous_ones() {
        let p = default_profile();
        for &name in DANGEROUS.iter().chain(DENIED_PROBES) {
            assert!(rules_for(&p, name).is_empty(), "{name} has a rule");
            assert!(!allowed_names().contains(&name), "{name} is allowed");
        }
    }

    #[test]
    fn allows_the_ordinary_ones() {
        let p = default_profile();
        for name in [
            "read",
            "write",
            "execve",
            "clone",
            "openat",
            "mmap",
            "futex",
            "socket",
            "connect",
            "epoll_wait",
            "statx",
            "getrandom",
            "rseq",
            "ptrace",
            "chroot",
            "ioctl",
        ] {
            assert!(allowed_names().contains(&name), "{name}");
            assert!(
                rules_for(&p, name)
                    .iter()
                    .any(|r| r.action() == LinuxSeccompAction::ScmpActAllow),
                "{name} has no allow rule"
            );
        }
    }

    #[test]
    fn clone3_says_enosys() {
        let p = default_profile();
        let rules = rules_for(&p, "clone3");
        assert_eq!(rules.len(), 1);
        assert_eq!(rules[0].action(), LinuxSeccompAction::ScmpActErrno);
        assert_eq!(rules[0].errno_ret(), Some(38));
        assert!(!allowed_names().contains(&"clone3"));
    }

    #[test]
    fn clone_may_not_create_namespaces() {
        let p = default_profile();
        let rules = rules_for(&p, "clone");
        assert_eq!(rules.len(), 1, "no unconditional clone rule");
        let args = rules[0]
            .args()
            .as_ref()
            .expect("clone's rule has a condition");
        assert_eq!(args.len(), 1);
        assert_eq!(args[0].index(), 0);
        assert_eq!(args[0].op(), LinuxSeccompOperator::ScmpCmpMaskedEq);
        assert_eq!(args[0].value(), 0x7E02_0000);
        assert_eq!(args[0].value_two(), Some(0));
    }

    #[test]
    fn personality_and_socket_are_conditional() {
        let p = default_profile();
        let values: Vec<u64> = rules_for(&p, "personality")
            .iter()
            .map(|r| {
                let args = r.args().as_ref().expect("a condition");
                assert_eq!(args.len(), 1);
                assert_eq!(args[0].op(), LinuxSeccompOperator::ScmpCmpEq);
                args[0].value()
            })
            .collect();
        assert_eq!(values, [0x0, 0x8, 0x20000, 0x20008, 0xffff_ffff]);
        let socket = rules_for(&p, "socket");
        assert_eq!(socket.len(), 1);
        let args = socket[0].args().as_ref().expect("a condition");
        assert_eq!(args[0].op(), LinuxSeccompOperator::ScmpCmpNe);
        assert_eq!(args[0].value(), 40);
    }

    #[test]
    fn names_are_listed_once() {
        let names = allowed_names();
        let unique: HashSet<_> = names.iter().collect();
        assert_eq!(unique.len(), names.len());
    }

    #[test]
    fn serializes_as_the_runtime_expects() {
        let json = serde_json::to_string(&default_profile()).expect("serializes");
        assert!(
            json.contains(r#""defaultAction":"SCMP_ACT_ERRNO""#),
            "{json}"
        );
        assert!(json.contains(r#""defaultErrnoRet":1"#), "{json}");
        assert!(json.contains(r#""SCMP_ARCH_X86_64""#), "{json}");
        assert!(json.contains(r#""op":"SCMP_CMP_MASKED_EQ""#), "{json}");
        assert!(json.contains(r#""errnoRet":38"#), "{json}");
    }
}
