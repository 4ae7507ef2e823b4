//! The seccomp rule table, compiled to one classic BPF program. Pure:
//! `apply` loads it (through seccompiler's `apply_filter`).
//!
//! The program, in order:
//! 1. a foreign architecture kills the process, and x32 system call numbers
//!    (bit 30 set on x86_64) are refused — without that every rule below
//!    could be sidestepped by calling the x32 twin of a syscall;
//! 2. a binary search over the sorted numbers of the system calls the table
//!    names, so any call is decided after about seven comparisons;
//! 3. the refusals (EPERM): kernel attack surface and escape primitives;
//!    `clone3` answers ENOSYS, so libc falls back to `clone`, whose flags BPF
//!    can inspect (clone3 passes them in memory, out of BPF's reach);
//!    clone and unshare with any namespace flag, TIOCSTI/TIOCLINUX ioctls and
//!    personality changes are refused by their arguments.
//!
//! Why not seccompiler's own compiler (used until the program below was
//! measured): it emits one comparison chain per filter and one filter per
//! action, three filters of 380 instructions in all. The kernel evaluates a
//! loaded filter for every system call number to precompute which ones are
//! always allowed, and walking that chain cost ~0.2 ms on every sandbox
//! start; the search below is about a tenth of it. The tests check the
//! program against the seccompiler-built filters, call by call.
//!
//! Arguments are compared on their low 32 bits, which is all the kernel reads
//! for these calls: ioctl truncates the request to `unsigned int` (so
//! `TIOCSTI | 0xffffffff00000000` is refused too), clone keeps the lower 32
//! bits of its flags, and unshare fails with EINVAL on any bit it does not
//! know; personality(0xffffffff) only queries, PER_LINUX (0) is the default.

use seccompiler::{sock_filter, BpfProgram};

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
/// ioctls that make a directory by name, past every system call the create
/// guard sees: btrfs' subvolume and snapshot creation (`_IOW(0x94, n, 4096
/// bytes)`, n = 1, 14, 23, 24) and bcachefs' (`_IOW(0xbc, 16, 32 bytes)`).
const NAME_MAKING_IOCTLS: &[u32] = &[0x5000_9401, 0x5000_940e, 0x5000_9417, 0x5000_9418, 0x4020_bc10];
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

/// Names of the conditionally refused calls, for reports.
pub const CONDITIONAL: &[&str] = &[
    "clone with namespace flags",
    "unshare with namespace flags",
    "ioctl TIOCSTI/TIOCLINUX (low 32 bits)",
    "personality changes",
    "clone3 (ENOSYS)",
    "chmod/fchmod/fchmodat/fchmodat2, mknod/mknodat and creating opens with a set-user-ID or set-group-ID mode",
    "openat2 (ENOSYS)",
];

/// S_ISUID | S_ISGID. As root for a workspace root owns, the sandbox's user
/// is the host's root on the workspace's files: a set-user-ID file it made
/// there would run as root for anyone on the host who can reach it.
const SETID_BITS: u32 = 0o6000;
/// O_CREAT | __O_TMPFILE: the opens whose mode argument counts.
const CREATING_OPEN: u32 = 0o100 | 0o20000000;
/// O_CREAT alone: the opens that can make a name.
const O_CREAT: u32 = 0o100;
/// O_PATH: the kernel drops O_CREAT with it (and every flag but three), so
/// such an open makes nothing; the flags are in a register, not memory, so
/// nothing can change that after the filter looked.
const O_PATH: u32 = 0o10000000;

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

// Offsets in `struct seccomp_data`; args are u64, their low word first (little endian).
const NR: u32 = 0;
const ARCH: u32 = 4;
const ARG0_LOW: u32 = 16;
const ARG1_LOW: u32 = 24;
const ARG2_LOW: u32 = 32;
const ARG3_LOW: u32 = 40;

// Classic BPF opcodes used here.
const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
const JSET_K: u16 = 0x45; // BPF_JMP | BPF_JSET | BPF_K
const RET_K: u16 = 0x06; // BPF_RET | BPF_K

/// What the search decides for one system call number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Verdict {
    Allow,
    Eperm,
    Enosys,
    /// Refused if any namespace flag is set in argument 0.
    NamespaceFlags,
    /// Refused for TIOCSTI and TIOCLINUX in argument 1.
    Ioctl,
    /// With the create guard: `Ioctl`, and the ioctls that make a directory
    /// by name ([`NAME_MAKING_IOCTLS`]) refused too.
    IoctlGuarded,
    /// Allowed only for personality(0) and personality(0xffffffff).
    Personality,
    /// Refused if the mode in argument 1 (chmod, fchmod, creat, mknod) or 2
    /// (fchmodat, fchmodat2, mknodat) has a set-id bit.
    SetidMode1,
    SetidMode2,
    /// Refused if the flags in argument 1 (open) or 2 (openat) create a file
    /// and the mode after them has a set-id bit.
    CreatingOpen1,
    CreatingOpen2,
    /// With the create guard: handed to the guard (user notification).
    Notify,
    /// With the create guard: as `SetidMode1`/`SetidMode2`, and what is not
    /// refused goes to the guard (creat, mknod, mknodat).
    SetidModeNotify1,
    SetidModeNotify2,
    /// With the create guard: an open whose flags in argument 1 (open) or 2
    /// (openat) have O_CREAT goes to the guard (O_TMPFILE makes no name).
    OpenCreates1,
    OpenCreates2,
}

/// System calls that make a name, which the create guard judges and makes
/// itself (see `sandbox::apply`'s guard) when the plan has one.
pub const GUARDED: &[&str] = &[
    "open/openat/creat with O_CREAT",
    "mkdir/mkdirat",
    "mknod/mknodat",
    "symlink/symlinkat",
    "link/linkat",
    "rename/renameat/renameat2",
    "bind (a unix socket's name)",
];

/// The calls that go to the guard whatever their arguments (the opens,
/// creat and mknod go by their flags and mode; see `table`).
const ALWAYS_GUARDED: &[i64] = &[
    libc::SYS_mkdirat,
    libc::SYS_symlinkat,
    libc::SYS_linkat,
    libc::SYS_renameat,
    libc::SYS_renameat2,
    libc::SYS_bind,
];

/// Refused with the create guard only, with why.
pub const REFUSED_WITH_THE_GUARD: &[&str] = &[
    "btrfs and bcachefs subvolume and snapshot creation (ioctls that make a directory by name, which the guard would not see)",
    "landlock_restrict_self (a domain of the command's own, which the guard, making names for it, could not honour)",
];

/// The system calls the table names, sorted by number.
fn table(guard: bool) -> Vec<(u32, Verdict)> {
    let mut t: Vec<(u32, Verdict)> = REFUSED.iter().map(|(nr, _)| (*nr as u32, Verdict::Eperm)).collect();
    t.push((libc::SYS_clone as u32, Verdict::NamespaceFlags));
    t.push((libc::SYS_unshare as u32, Verdict::NamespaceFlags));
    t.push((libc::SYS_ioctl as u32, Verdict::Ioctl));
    t.push((libc::SYS_personality as u32, Verdict::Personality));
    t.push((libc::SYS_clone3 as u32, Verdict::Enosys));
    // openat2 passes its mode in memory, out of BPF's reach: libc falls back
    // to openat, whose mode it can see.
    t.push((libc::SYS_openat2 as u32, Verdict::Enosys));
    #[cfg(target_arch = "x86_64")]
    {
        t.push((libc::SYS_chmod as u32, Verdict::SetidMode1));
        t.push((libc::SYS_creat as u32, Verdict::SetidMode1));
        t.push((libc::SYS_mknod as u32, Verdict::SetidMode1));
        t.push((libc::SYS_open as u32, Verdict::CreatingOpen1));
    }
    t.push((libc::SYS_fchmod as u32, Verdict::SetidMode1));
    t.push((libc::SYS_fchmodat as u32, Verdict::SetidMode2));
    t.push((libc::SYS_fchmodat2 as u32, Verdict::SetidMode2));
    t.push((libc::SYS_mknodat as u32, Verdict::SetidMode2));
    t.push((libc::SYS_openat as u32, Verdict::CreatingOpen2));
    if guard {
        for (nr, v) in t.iter_mut() {
            let creat_or_mknod = *nr == libc::SYS_mknodat as u32 || {
                #[cfg(target_arch = "x86_64")]
                {
                    *nr == libc::SYS_creat as u32 || *nr == libc::SYS_mknod as u32
                }
                #[cfg(not(target_arch = "x86_64"))]
                false
            };
            if creat_or_mknod {
                *v = match v {
                    Verdict::SetidMode1 => Verdict::SetidModeNotify1,
                    _ => Verdict::SetidModeNotify2,
                };
            }
        }
        for nr in ALWAYS_GUARDED {
            t.push((*nr as u32, Verdict::Notify));
        }
        #[cfg(target_arch = "x86_64")]
        for nr in [libc::SYS_mkdir, libc::SYS_symlink, libc::SYS_link, libc::SYS_rename] {
            t.push((nr as u32, Verdict::Notify));
        }
        t.push((libc::SYS_landlock_restrict_self as u32, Verdict::Eperm));
        for (nr, v) in t.iter_mut() {
            if *nr == libc::SYS_ioctl as u32 {
                *v = Verdict::IoctlGuarded;
            }
        }
    }
    t.sort_unstable_by_key(|e| e.0);
    t
}

/// A jump target while the program is assembled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum To {
    Next,
    Verdict(Verdict),
    /// Index of an instruction emitted later.
    At(usize),
}

/// An instruction with unresolved jumps: opcode, k, jump if true, if false.
type Insn = (u16, u32, To, To);

struct Asm {
    code: Vec<Insn>,
}

impl Asm {
    fn emit(&mut self, op: u16, k: u32, jt: To, jf: To) -> usize {
        self.code.push((op, k, jt, jf));
        self.code.len() - 1
    }

    /// Decide `entries` (sorted) with the accumulator holding the number.
    fn search(&mut self, entries: &[(u32, Verdict)]) {
        if entries.len() <= 3 {
            for (nr, v) in entries {
                self.emit(JEQ_K, *nr, To::Verdict(*v), To::Next);
            }
            // Not in the table: allowed (both branches; classic BPF's `ja`
            // takes its offset in k, which this assembler does not resolve).
            self.emit(JEQ_K, 0, To::Verdict(Verdict::Allow), To::Verdict(Verdict::Allow));
            return;
        }
        let (low, high) = entries.split_at(entries.len() / 2);
        let split = self.emit(JGE_K, high[0].0, To::Next, To::Next);
        self.search(low);
        let right = self.code.len();
        self.code[split].2 = To::At(right);
        self.search(high);
    }
}

/// Refused (EPERM) if the mode in argument `arg` has a set-id bit, else `rest`.
fn setid_mode(arg: u32, rest: Verdict) -> Vec<Insn> {
    vec![
        (LD_W_ABS, arg, To::Next, To::Next),
        (JSET_K, SETID_BITS, To::Verdict(Verdict::Eperm), To::Verdict(rest)),
    ]
}

/// To the guard if the open flags in argument `arg` have O_CREAT (and not
/// O_PATH), else allowed.
fn open_creates(arg: u32) -> Vec<Insn> {
    vec![
        (LD_W_ABS, arg, To::Next, To::Next),
        (JSET_K, O_PATH, To::Verdict(Verdict::Allow), To::Next),
        (
            JSET_K,
            O_CREAT,
            To::Verdict(Verdict::Notify),
            To::Verdict(Verdict::Allow),
        ),
    ]
}

/// The one program: architecture guard, x32 guard, search, verdicts. With
/// `create_guard`, the calls that make a name go to the create guard instead of
/// being allowed ([`GUARDED`]).
pub fn filters(create_guard: bool) -> Result<Vec<BpfProgram>, SeccompError> {
    let mut asm = Asm { code: Vec::new() };
    asm.emit(LD_W_ABS, ARCH, To::Next, To::Next);
    let guard = asm.emit(JEQ_K, AUDIT_ARCH, To::Next, To::Next);
    let kill = asm.emit(RET_K, libc::SECCOMP_RET_KILL_PROCESS, To::Next, To::Next);
    asm.code[guard].2 = To::At(kill + 1);
    asm.code[guard].3 = To::At(kill);
    asm.emit(LD_W_ABS, NR, To::Next, To::Next);
    #[cfg(target_arch = "x86_64")]
    asm.emit(JGE_K, X32_SYSCALL_BIT, To::Verdict(Verdict::Eperm), To::Next);
    let table = table(create_guard);
    if table.windows(2).any(|w| w[0].0 == w[1].0) {
        return Err(SeccompError("a system call appears twice in the table".into()));
    }
    asm.search(&table);
    // The verdict blocks, in this order, each starting where its jumps land.
    let ret = |v: u32| (RET_K, v, To::Next, To::Next);
    let allow = ret(libc::SECCOMP_RET_ALLOW);
    let eperm = ret(libc::SECCOMP_RET_ERRNO | libc::EPERM as u32);
    let enosys = ret(libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32);
    let notify = ret(libc::SECCOMP_RET_USER_NOTIF);
    // What an open that may create, with no set-id bit, becomes.
    let (open1_rest, open2_rest) = if create_guard {
        (To::Verdict(Verdict::OpenCreates1), To::Verdict(Verdict::OpenCreates2))
    } else {
        (To::Verdict(Verdict::Allow), To::Verdict(Verdict::Allow))
    };
    // Blocks that jump to another verdict come before it (BPF jumps only
    // forward): the argument checks first, the returns last.
    let blocks: Vec<(Verdict, Vec<Insn>)> = vec![
        (
            Verdict::NamespaceFlags,
            vec![
                (LD_W_ABS, ARG0_LOW, To::Next, To::Next),
                (
                    JSET_K,
                    NAMESPACE_FLAGS.iter().fold(0u32, |m, f| m | *f as u32),
                    To::Verdict(Verdict::Eperm),
                    To::Verdict(Verdict::Allow),
                ),
            ],
        ),
        (
            Verdict::Ioctl,
            vec![
                (LD_W_ABS, ARG1_LOW, To::Next, To::Next),
                (JEQ_K, TIOCSTI as u32, To::Verdict(Verdict::Eperm), To::Next),
                (
                    JEQ_K,
                    TIOCLINUX as u32,
                    To::Verdict(Verdict::Eperm),
                    To::Verdict(Verdict::Allow),
                ),
            ],
        ),
        (Verdict::IoctlGuarded, {
            let mut b = vec![
                (LD_W_ABS, ARG1_LOW, To::Next, To::Next),
                (JEQ_K, TIOCSTI as u32, To::Verdict(Verdict::Eperm), To::Next),
                (JEQ_K, TIOCLINUX as u32, To::Verdict(Verdict::Eperm), To::Next),
            ];
            for (i, req) in NAME_MAKING_IOCTLS.iter().enumerate() {
                let last = i + 1 == NAME_MAKING_IOCTLS.len();
                let otherwise = if last { To::Verdict(Verdict::Allow) } else { To::Next };
                b.push((JEQ_K, *req, To::Verdict(Verdict::Eperm), otherwise));
            }
            b
        }),
        (
            Verdict::Personality,
            vec![
                (LD_W_ABS, ARG0_LOW, To::Next, To::Next),
                (JEQ_K, 0, To::Verdict(Verdict::Allow), To::Next),
                (
                    JEQ_K,
                    0xffff_ffff,
                    To::Verdict(Verdict::Allow),
                    To::Verdict(Verdict::Eperm),
                ),
            ],
        ),
        (Verdict::SetidMode1, setid_mode(ARG1_LOW, Verdict::Allow)),
        (Verdict::SetidMode2, setid_mode(ARG2_LOW, Verdict::Allow)),
        (
            Verdict::CreatingOpen1,
            vec![
                (LD_W_ABS, ARG1_LOW, To::Next, To::Next),
                (JSET_K, CREATING_OPEN, To::Next, To::Verdict(Verdict::Allow)),
                (LD_W_ABS, ARG2_LOW, To::Next, To::Next),
                (JSET_K, SETID_BITS, To::Verdict(Verdict::Eperm), open1_rest),
            ],
        ),
        (
            Verdict::CreatingOpen2,
            vec![
                (LD_W_ABS, ARG2_LOW, To::Next, To::Next),
                (JSET_K, CREATING_OPEN, To::Next, To::Verdict(Verdict::Allow)),
                (LD_W_ABS, ARG3_LOW, To::Next, To::Next),
                (JSET_K, SETID_BITS, To::Verdict(Verdict::Eperm), open2_rest),
            ],
        ),
        (Verdict::SetidModeNotify1, setid_mode(ARG1_LOW, Verdict::Notify)),
        (Verdict::SetidModeNotify2, setid_mode(ARG2_LOW, Verdict::Notify)),
        (Verdict::OpenCreates1, open_creates(ARG1_LOW)),
        (Verdict::OpenCreates2, open_creates(ARG2_LOW)),
        (Verdict::Allow, vec![allow]),
        (Verdict::Notify, vec![notify]),
        (Verdict::Eperm, vec![eperm]),
        (Verdict::Enosys, vec![enosys]),
    ];
    let mut start = std::collections::HashMap::new();
    let mut at = asm.code.len();
    for (v, b) in &blocks {
        start.insert(*v, at);
        at += b.len();
    }
    for (_, b) in blocks {
        asm.code.extend(b);
    }
    let mut out = Vec::with_capacity(asm.code.len());
    for (i, (code, k, jt, jf)) in asm.code.iter().enumerate() {
        let offset = |to: &To| -> Result<u8, SeccompError> {
            let target = match to {
                To::Next => i + 1,
                To::At(t) => *t,
                To::Verdict(v) => start[v],
            };
            target
                .checked_sub(i + 1)
                .and_then(|d| u8::try_from(d).ok())
                .ok_or_else(|| SeccompError(format!("jump from {i} to {target} does not fit classic BPF")))
        };
        out.push(sock_filter {
            code: *code,
            jt: offset(jt)?,
            jf: offset(jf)?,
            k: *k,
        });
    }
    Ok(vec![out])
}

#[cfg(test)]
mod tests {
    use super::*;
    use seccompiler::{
        SeccompAction, SeccompCmpArgLen as Len, SeccompCmpOp as Op, SeccompCondition as Cond, SeccompFilter,
        SeccompRule, TargetArch,
    };
    use std::collections::BTreeMap;

    #[cfg(target_arch = "x86_64")]
    const ARCH_ID: TargetArch = TargetArch::x86_64;
    #[cfg(target_arch = "aarch64")]
    const ARCH_ID: TargetArch = TargetArch::aarch64;

    /// The same table compiled by seccompiler, as tether-exec loaded it
    /// before: three filters (arch/x32 guard, refusals, clone3). The oracle.
    fn reference() -> Vec<BpfProgram> {
        let mut out = Vec::new();
        #[cfg(target_arch = "x86_64")]
        {
            let s = |code, k| sock_filter { code, jt: 0, jf: 0, k };
            let j = |code, k, jt, jf| sock_filter { code, jt, jf, k };
            out.push(vec![
                s(LD_W_ABS, ARCH),
                j(JEQ_K, AUDIT_ARCH, 1, 0),
                s(RET_K, libc::SECCOMP_RET_KILL_PROCESS),
                s(LD_W_ABS, NR),
                j(JGE_K, X32_SYSCALL_BIT, 0, 1),
                s(RET_K, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),
                s(RET_K, libc::SECCOMP_RET_ALLOW),
            ]);
        }
        let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
        for (nr, _) in REFUSED {
            rules.insert(*nr, vec![]);
        }
        let flags = |arg: u8| -> Vec<SeccompRule> {
            NAMESPACE_FLAGS
                .iter()
                .map(|f| SeccompRule::new(vec![Cond::new(arg, Len::Qword, Op::MaskedEq(*f), *f).unwrap()]).unwrap())
                .collect()
        };
        rules.insert(libc::SYS_unshare, flags(0));
        rules.insert(libc::SYS_clone, flags(0));
        rules.insert(
            libc::SYS_ioctl,
            vec![
                SeccompRule::new(vec![Cond::new(1, Len::Dword, Op::Eq, TIOCSTI).unwrap()]).unwrap(),
                SeccompRule::new(vec![Cond::new(1, Len::Dword, Op::Eq, TIOCLINUX).unwrap()]).unwrap(),
            ],
        );
        rules.insert(
            libc::SYS_personality,
            vec![SeccompRule::new(vec![
                Cond::new(0, Len::Dword, Op::Ne, 0).unwrap(),
                Cond::new(0, Len::Dword, Op::Ne, 0xffff_ffff).unwrap(),
            ])
            .unwrap()],
        );
        // Set-id modes: "any of these bits" is one rule per bit.
        let bits = [0o4000u64, 0o2000];
        let setid = |arg: u8| -> Vec<SeccompRule> {
            bits.iter()
                .map(|b| SeccompRule::new(vec![Cond::new(arg, Len::Dword, Op::MaskedEq(*b), *b).unwrap()]).unwrap())
                .collect()
        };
        let creating = |flags: u8, mode: u8| -> Vec<SeccompRule> {
            let mut v = Vec::new();
            for f in [0o100u64, 0o20000000] {
                for b in bits {
                    v.push(
                        SeccompRule::new(vec![
                            Cond::new(flags, Len::Dword, Op::MaskedEq(f), f).unwrap(),
                            Cond::new(mode, Len::Dword, Op::MaskedEq(b), b).unwrap(),
                        ])
                        .unwrap(),
                    );
                }
            }
            v
        };
        #[cfg(target_arch = "x86_64")]
        {
            rules.insert(libc::SYS_chmod, setid(1));
            rules.insert(libc::SYS_creat, setid(1));
            rules.insert(libc::SYS_mknod, setid(1));
            rules.insert(libc::SYS_open, creating(1, 2));
        }
        rules.insert(libc::SYS_fchmod, setid(1));
        rules.insert(libc::SYS_fchmodat, setid(2));
        rules.insert(libc::SYS_fchmodat2, setid(2));
        rules.insert(libc::SYS_mknodat, setid(2));
        rules.insert(libc::SYS_openat, creating(2, 3));
        let refuse = SeccompFilter::new(
            rules,
            SeccompAction::Allow,
            SeccompAction::Errno(libc::EPERM as u32),
            ARCH_ID,
        )
        .unwrap();
        out.push(refuse.try_into().unwrap());
        let mut clone3 = BTreeMap::new();
        clone3.insert(libc::SYS_clone3, vec![]);
        clone3.insert(libc::SYS_openat2, vec![]);
        let nosys = SeccompFilter::new(
            clone3,
            SeccompAction::Allow,
            SeccompAction::Errno(libc::ENOSYS as u32),
            ARCH_ID,
        )
        .unwrap();
        out.push(nosys.try_into().unwrap());
        out
    }

    /// `struct seccomp_data` for a call.
    fn data(arch: u32, nr: u32, args: [u64; 6]) -> [u8; 64] {
        let mut d = [0u8; 64];
        d[0..4].copy_from_slice(&nr.to_le_bytes());
        d[4..8].copy_from_slice(&arch.to_le_bytes());
        for (i, a) in args.iter().enumerate() {
            d[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_le_bytes());
        }
        d
    }

    /// A classic BPF interpreter for the instructions seccomp programs use.
    fn eval(prog: &[sock_filter], d: &[u8; 64]) -> u32 {
        let (mut a, mut x, mut pc) = (0u32, 0u32, 0usize);
        let word = |k: u32| u32::from_le_bytes(d[k as usize..k as usize + 4].try_into().unwrap());
        loop {
            let i = &prog[pc];
            pc += 1;
            let jump = |cond: bool| if cond { i.jt as usize } else { i.jf as usize };
            match i.code {
                0x20 => a = word(i.k),            // ld [k]
                0x00 => a = i.k,                  // ld #k
                0x01 => x = i.k,                  // ldx #k
                0x07 => x = a,                    // tax
                0x87 => a = x,                    // txa
                0x54 => a &= i.k,                 // and #k
                0x05 => pc += i.k as usize,       // ja
                0x15 => pc += jump(a == i.k),     // jeq #k
                0x25 => pc += jump(a > i.k),      // jgt #k
                0x35 => pc += jump(a >= i.k),     // jge #k
                0x45 => pc += jump(a & i.k != 0), // jset #k
                0x1d => pc += jump(a == x),       // jeq x
                0x06 => return i.k,               // ret #k
                other => panic!("opcode {other:#x} not interpreted"),
            }
        }
    }

    /// What the kernel returns under several filters: the most restrictive
    /// action wins; among equal ones, the most recently loaded.
    fn combined(progs: &[BpfProgram], d: &[u8; 64]) -> u32 {
        let mut result = libc::SECCOMP_RET_ALLOW;
        for p in progs.iter().rev() {
            let r = eval(p, d);
            let action = |v: u32| (v & libc::SECCOMP_RET_ACTION_FULL) as i32;
            if action(r) < action(result) {
                result = r;
            }
        }
        result
    }

    #[test]
    fn the_program_decides_every_call_as_the_seccompiler_filters_did() {
        let ours = filters(false).unwrap();
        assert_eq!(ours.len(), 1, "one program");
        let reference = reference();
        let ns_all = NAMESPACE_FLAGS.iter().fold(0u64, |m, f| m | f);
        let mut values: Vec<u64> = vec![
            0,
            17,          // SIGCHLD: fork
            0x003d_0f00, // the flags pthread_create passes
            ns_all,
            1 << 32,
            (1 << 32) | libc::CLONE_NEWUSER as u64,
            TIOCSTI,
            TIOCLINUX,
            TIOCSTI | 0xffff_ffff_0000_0000,
            0x5413, // TIOCGWINSZ
            8,
            0x0040_0000, // ADDR_NO_RANDOMIZE
            0xffff_ffff,
            0x1_ffff_ffff,
            u64::MAX,
        ];
        values.extend(NAMESPACE_FLAGS.iter().map(|f| f | 17));
        let mut numbers: Vec<u32> = (0..1024).collect();
        #[cfg(target_arch = "x86_64")]
        numbers.extend((0..600).map(|n| n | X32_SYSCALL_BIT));
        numbers.push(u32::MAX);
        let mut checked = 0u64;
        for arch in [AUDIT_ARCH, 0x4000_0003 /* i386 */, 0] {
            for &nr in &numbers {
                let argument_checked = table(false)
                    .iter()
                    .any(|(n, v)| *n == nr && !matches!(v, Verdict::Eperm | Verdict::Enosys));
                let samples: &[u64] = if argument_checked && arch == AUDIT_ARCH {
                    &values
                } else {
                    &[0]
                };
                for &a0 in samples {
                    for &a1 in samples {
                        let d = data(arch, nr, [a0, a1, 0, 0, 0, 0]);
                        assert_eq!(
                            combined(&ours, &d),
                            combined(&reference, &d),
                            "arch {arch:#x} nr {nr} args {a0:#x} {a1:#x}"
                        );
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 4000);
        // The mode and open-flag checks look at arguments 1 to 3.
        let modes_and_flags: [u64; 9] = [
            0,
            0o755,
            0o4755,
            0o2755,
            0o6000 | (1 << 40),
            0o100 | 0o2,    // O_CREAT | O_RDWR
            0o20200000 | 2, // O_TMPFILE | O_RDWR
            0o1 | (0o100 << 32),
            u64::MAX,
        ];
        for &nr in &numbers {
            let mode_checked = table(false).iter().any(|(n, v)| {
                *n == nr
                    && matches!(
                        v,
                        Verdict::SetidMode1 | Verdict::SetidMode2 | Verdict::CreatingOpen1 | Verdict::CreatingOpen2
                    )
            });
            if !mode_checked {
                continue;
            }
            for &a1 in &modes_and_flags {
                for &a2 in &modes_and_flags {
                    for &a3 in &modes_and_flags {
                        let d = data(AUDIT_ARCH, nr, [3, a1, a2, a3, 0, 0]);
                        assert_eq!(
                            combined(&ours, &d),
                            combined(&reference, &d),
                            "nr {nr} args {a1:#o} {a2:#o} {a3:#o}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn the_table_refuses_what_it_names() {
        let ours = filters(false).unwrap();
        let run = |nr: i64, a0: u64, a1: u64| eval(&ours[0], &data(AUDIT_ARCH, nr as u32, [a0, a1, 0, 0, 0, 0]));
        let eperm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
        assert_eq!(run(libc::SYS_ptrace, 0, 0), eperm);
        assert_eq!(
            run(libc::SYS_clone3, 0, 0),
            libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32
        );
        assert_eq!(run(libc::SYS_unshare, libc::CLONE_NEWUSER as u64, 0), eperm);
        assert_eq!(run(libc::SYS_clone, 17, 0), libc::SECCOMP_RET_ALLOW);
        assert_eq!(run(libc::SYS_ioctl, 0, TIOCSTI | (1 << 40)), eperm);
        assert_eq!(run(libc::SYS_personality, 0xffff_ffff, 0), libc::SECCOMP_RET_ALLOW);
        assert_eq!(run(libc::SYS_personality, 0x0040_0000, 0), eperm);
        assert_eq!(run(libc::SYS_read, 0, 0), libc::SECCOMP_RET_ALLOW);
        assert_eq!(run(libc::SYS_fchmod, 3, 0o4755), eperm);
        assert_eq!(run(libc::SYS_fchmod, 3, 0o755), libc::SECCOMP_RET_ALLOW);
        let openat = |flags: u64, mode: u64| {
            eval(
                &ours[0],
                &data(AUDIT_ARCH, libc::SYS_openat as u32, [3, 0, flags, mode, 0, 0]),
            )
        };
        assert_eq!(openat(0o100, 0o4755), eperm);
        assert_eq!(openat(0o100, 0o644), libc::SECCOMP_RET_ALLOW);
        // Without O_CREAT the mode argument is whatever the register held.
        assert_eq!(openat(0, 0o4755), libc::SECCOMP_RET_ALLOW);
        // Short: the kernel walks it for every system call number when it is
        // loaded, and for every call the command makes.
        assert!(ours[0].len() < 200, "{} instructions", ours[0].len());
    }

    #[test]
    fn with_the_guard_every_call_that_makes_a_name_goes_to_it() {
        let ours = filters(true).unwrap();
        let plain = filters(false).unwrap();
        let eperm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
        let notify = libc::SECCOMP_RET_USER_NOTIF;
        let allow = libc::SECCOMP_RET_ALLOW;
        let call = |nr: i64, args: [u64; 6]| eval(&ours[0], &data(AUDIT_ARCH, nr as u32, args));
        // openat: O_CREAT goes to the guard, unless a set-id mode refuses it
        // outright; O_TMPFILE makes no name; plain opens stay in the kernel.
        assert_eq!(call(libc::SYS_openat, [3, 0, 0o100 | 0o1, 0o644, 0, 0]), notify);
        assert_eq!(call(libc::SYS_openat, [3, 0, 0o100 | (1 << 40), 0o644, 0, 0]), notify);
        assert_eq!(call(libc::SYS_openat, [3, 0, 0o100, 0o4755, 0, 0]), eperm);
        assert_eq!(call(libc::SYS_openat, [3, 0, 0o20200002, 0o600, 0, 0]), allow);
        assert_eq!(call(libc::SYS_openat, [3, 0, 0o2, 0o4755, 0, 0]), allow);
        assert_eq!(call(libc::SYS_openat, [3, 0, 0, 0, 0, 0]), allow);
        assert_eq!(call(libc::SYS_openat, [3, 0, 0o10000000 | 0o100, 0, 0, 0]), allow);
        // Directories made by an ioctl, and a Landlock domain of the command's own.
        for req in NAME_MAKING_IOCTLS {
            assert_eq!(call(libc::SYS_ioctl, [3, u64::from(*req), 0, 0, 0, 0]), eperm);
            assert_eq!(
                eval(
                    &plain[0],
                    &data(AUDIT_ARCH, libc::SYS_ioctl as u32, [3, u64::from(*req), 0, 0, 0, 0])
                ),
                allow
            );
        }
        assert_eq!(call(libc::SYS_ioctl, [3, TIOCSTI, 0, 0, 0, 0]), eperm);
        assert_eq!(call(libc::SYS_ioctl, [1, 0x5413, 0, 0, 0, 0]), allow);
        assert_eq!(call(libc::SYS_landlock_restrict_self, [3, 0, 0, 0, 0, 0]), eperm);
        assert_eq!(call(libc::SYS_mknodat, [3, 0, 0o10644, 0, 0, 0]), notify);
        assert_eq!(call(libc::SYS_mknodat, [3, 0, 0o14755, 0, 0, 0]), eperm);
        for &nr in ALWAYS_GUARDED {
            assert_eq!(call(nr, [0; 6]), notify, "nr {nr}");
        }
        #[cfg(target_arch = "x86_64")]
        {
            assert_eq!(call(libc::SYS_open, [0, 0o101, 0o644, 0, 0, 0]), notify);
            assert_eq!(call(libc::SYS_open, [0, 0o1, 0o644, 0, 0, 0]), allow);
            assert_eq!(call(libc::SYS_creat, [0, 0o644, 0, 0, 0, 0]), notify);
            assert_eq!(call(libc::SYS_creat, [0, 0o2644, 0, 0, 0, 0]), eperm);
            assert_eq!(call(libc::SYS_mknod, [0, 0o10644, 0, 0, 0, 0]), notify);
            for nr in [libc::SYS_mkdir, libc::SYS_symlink, libc::SYS_link, libc::SYS_rename] {
                assert_eq!(call(nr, [0; 6]), notify, "nr {nr}");
            }
            assert_eq!(call(libc::SYS_chmod, [0, 0o644, 0, 0, 0, 0]), allow);
        }
        // Everything else is decided as without the guard.
        let guarded: Vec<u32> = table(true)
            .iter()
            .filter(|(n, _)| !table(false).iter().any(|(m, _)| m == n))
            .map(|(n, _)| *n)
            .collect();
        for nr in 0..1024u32 {
            if guarded.contains(&nr) {
                continue;
            }
            for args in [
                [0u64; 6],
                [3, 0o644, 0o2, 0o644, 0, 0],
                [3, 0o4755, 0o4755, 0o4755, 0, 0],
            ] {
                let (with, without) = (call(nr as i64, args), eval(&plain[0], &data(AUDIT_ARCH, nr, args)));
                let creating = [libc::SYS_openat, libc::SYS_mknodat];
                #[cfg(target_arch = "x86_64")]
                let creating = [&creating[..], &[libc::SYS_open, libc::SYS_creat, libc::SYS_mknod]].concat();
                if creating.contains(&(nr as i64)) && with == notify {
                    assert_eq!(without, allow, "nr {nr}");
                } else {
                    assert_eq!(with, without, "nr {nr} {args:?}");
                }
            }
        }
        assert!(ours[0].len() < 220, "{} instructions", ours[0].len());
    }
}
