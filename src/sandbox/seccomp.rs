//! The seccomp rule table, compiled to BPF. Pure: `apply` loads the programs.
//!
//! Three small filters, because one seccompiler filter has one match action:
//! 1. an architecture guard: a foreign architecture kills the process, and
//!    x32 system call numbers (bit 30 set on x86_64) are refused — seccompiler
//!    checks the audit arch but not the x32 bit, and without this guard every
//!    rule below could be sidestepped by calling the x32 twin of a syscall;
//! 2. the refusals (EPERM): kernel attack surface and escape primitives;
//! 3. `clone3` answers ENOSYS, so libc falls back to `clone`, whose flags
//!    filter 2 can inspect (clone3 passes them in memory, out of BPF's reach).
//!
//! The ioctl rule compares only the low 32 bits of the request (the kernel
//! truncates it to `unsigned int`), so `TIOCSTI | 0xffffffff00000000` is
//! refused too.

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen as Len, SeccompCmpOp as Op, SeccompCondition as Cond, SeccompFilter,
    SeccompRule, TargetArch,
};
use std::collections::BTreeMap;

/// System calls refused outright, with why (shown by `doctor` and the receipt).
pub const REFUSED: &[(i64, &str)] = &[
    (libc::SYS_ptrace, "ptrace"),
    (libc::SYS_process_vm_readv, "process_vm_readv"),
    (libc::SYS_process_vm_writev, "process_vm_writev"),
    (libc::SYS_pidfd_getfd, "pidfd_getfd"),
    (libc::SYS_process_madvise, "process_madvise"),
    (libc::SYS_kcmp, "kcmp"),
    (libc::SYS_keyctl, "keyctl"),
    (libc::SYS_add_key, "add_key"),
    (libc::SYS_request_key, "request_key"),
    (libc::SYS_bpf, "bpf"),
    (libc::SYS_perf_event_open, "perf_event_open"),
    (libc::SYS_userfaultfd, "userfaultfd"),
    (libc::SYS_io_uring_setup, "io_uring_setup"),
    (libc::SYS_io_uring_enter, "io_uring_enter"),
    (libc::SYS_io_uring_register, "io_uring_register"),
    (libc::SYS_kexec_load, "kexec_load"),
    (libc::SYS_kexec_file_load, "kexec_file_load"),
    (libc::SYS_mount, "mount"),
    (libc::SYS_umount2, "umount2"),
    (libc::SYS_pivot_root, "pivot_root"),
    (libc::SYS_chroot, "chroot"),
    (libc::SYS_open_tree, "open_tree"),
    (libc::SYS_move_mount, "move_mount"),
    (libc::SYS_fsopen, "fsopen"),
    (libc::SYS_fsconfig, "fsconfig"),
    (libc::SYS_fsmount, "fsmount"),
    (libc::SYS_fspick, "fspick"),
    (libc::SYS_mount_setattr, "mount_setattr"),
    (libc::SYS_setns, "setns"),
    (libc::SYS_open_by_handle_at, "open_by_handle_at"),
    (libc::SYS_name_to_handle_at, "name_to_handle_at"),
    (libc::SYS_init_module, "init_module"),
    (libc::SYS_finit_module, "finit_module"),
    (libc::SYS_delete_module, "delete_module"),
    (libc::SYS_acct, "acct"),
    (libc::SYS_swapon, "swapon"),
    (libc::SYS_swapoff, "swapoff"),
    (libc::SYS_reboot, "reboot"),
    (libc::SYS_syslog, "syslog"),
    (libc::SYS_iopl, "iopl"),
    (libc::SYS_ioperm, "ioperm"),
    (libc::SYS_quotactl, "quotactl"),
    (libc::SYS_lookup_dcookie, "lookup_dcookie"),
    (libc::SYS_uselib, "uselib"),
    (libc::SYS_vhangup, "vhangup"),
    (libc::SYS_settimeofday, "settimeofday"),
    (libc::SYS_clock_settime, "clock_settime"),
    (libc::SYS_clock_adjtime, "clock_adjtime"),
    (libc::SYS_adjtimex, "adjtimex"),
];

const TIOCSTI: u64 = 0x5412;
const TIOCLINUX: u64 = 0x541C;
const NAMESPACE_FLAGS: &[u64] = &[
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWCGROUP as u64,
    0x80, // CLONE_NEWTIME
];

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SeccompError(String);

fn err(e: impl std::fmt::Display) -> SeccompError {
    SeccompError(e.to_string())
}

fn arch() -> TargetArch {
    #[cfg(target_arch = "x86_64")]
    return TargetArch::x86_64;
    #[cfg(target_arch = "aarch64")]
    return TargetArch::aarch64;
}

/// Names of the conditionally refused calls, for reports.
pub const CONDITIONAL: &[&str] = &[
    "clone with namespace flags",
    "unshare with namespace flags",
    "ioctl TIOCSTI/TIOCLINUX (low 32 bits)",
    "personality changes",
    "clone3 (ENOSYS)",
];

/// Build the filters, in the order they must be loaded.
pub fn filters() -> Result<Vec<BpfProgram>, SeccompError> {
    let mut out = Vec::new();
    #[cfg(target_arch = "x86_64")]
    out.push(x32_guard());

    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for (nr, _) in REFUSED {
        rules.insert(*nr, vec![]);
    }
    // Every namespace flag lives in the low 32 bits, and those are all the
    // kernel reads: clone(2) keeps only the lower 32 bits of its flags, and
    // unshare(2) fails with EINVAL on any bit it does not know. Comparing one
    // word instead of two halves the filter (and the kernel's cost to load
    // it and to run it on every system call).
    let flag_rules = |arg: u8| -> Result<Vec<SeccompRule>, SeccompError> {
        NAMESPACE_FLAGS
            .iter()
            .map(|f| {
                SeccompRule::new(vec![Cond::new(arg, Len::Dword, Op::MaskedEq(*f), *f).map_err(err)?]).map_err(err)
            })
            .collect()
    };
    rules.insert(libc::SYS_unshare, flag_rules(0)?);
    rules.insert(libc::SYS_clone, flag_rules(0)?);
    rules.insert(
        libc::SYS_ioctl,
        vec![
            SeccompRule::new(vec![Cond::new(1, Len::Dword, Op::Eq, TIOCSTI).map_err(err)?]).map_err(err)?,
            SeccompRule::new(vec![Cond::new(1, Len::Dword, Op::Eq, TIOCLINUX).map_err(err)?]).map_err(err)?,
        ],
    );
    // personality(0xffffffff) only queries; PER_LINUX (0) is the default.
    rules.insert(
        libc::SYS_personality,
        vec![SeccompRule::new(vec![
            Cond::new(0, Len::Dword, Op::Ne, 0).map_err(err)?,
            Cond::new(0, Len::Dword, Op::Ne, 0xffff_ffff).map_err(err)?,
        ])
        .map_err(err)?],
    );
    let refuse = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch(),
    )
    .map_err(err)?;
    out.push(refuse.try_into().map_err(err)?);

    let mut clone3 = BTreeMap::new();
    clone3.insert(libc::SYS_clone3, vec![]);
    let nosys = SeccompFilter::new(
        clone3,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch(),
    )
    .map_err(err)?;
    out.push(nosys.try_into().map_err(err)?);
    Ok(out)
}

/// Kill on a foreign architecture; EPERM for x32 syscall numbers.
#[cfg(target_arch = "x86_64")]
fn x32_guard() -> BpfProgram {
    use seccompiler::sock_filter;
    const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    const JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
    const RET_K: u16 = 0x06; // BPF_RET | BPF_K
    const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    let s = |code, k| sock_filter { code, jt: 0, jf: 0, k };
    let j = |code, k, jt, jf| sock_filter { code, jt, jf, k };
    vec![
        s(LD_W_ABS, 4), // seccomp_data.arch
        j(JEQ_K, AUDIT_ARCH_X86_64, 1, 0),
        s(RET_K, libc::SECCOMP_RET_KILL_PROCESS),
        s(LD_W_ABS, 0), // seccomp_data.nr
        j(JGE_K, X32_SYSCALL_BIT, 0, 1),
        s(RET_K, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),
        s(RET_K, libc::SECCOMP_RET_ALLOW),
    ]
}

#[cfg(test)]
mod tests {
    #[test]
    fn filters_compile() {
        let f = super::filters().unwrap();
        assert!(f.len() >= 2);
        assert!(f.iter().all(|p| !p.is_empty()));
    }
}
