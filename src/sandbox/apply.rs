//! Applying a [`Plan`]: the only place with namespace, mount, Landlock and
//! seccomp system calls.
//!
//! Process layout:
//!
//! ```text
//! tether-exec (host)            writes the id maps, makes the pids cgroup (root),
//!                               runs the caller's `before_exec` work, says go;
//!                               waits for init's report, enforces the timeout,
//!                               forwards signals
//!   └─ clone3(NEWUSER|NEWNS|NEWPID|NEWIPC|NEWUTS)
//!        init, pid 1            drops the capability bounding set while it
//!                               waits for its id maps, then
//!                               builds the filesystem while a helper makes the
//!                               network namespace and detaches the host's root,
//!                               joins that namespace, confines itself with
//!                               Landlock, forks the command, starts the create
//!                               guard and sets the hostname meanwhile, then
//!                               reaps and forwards signals. When the command ends
//!                               it kills and reaps everything else and reports
//!                               the status. Dies with tether-exec (PDEATHSIG);
//!                               when it exits the kernel kills the namespace.
//!          ├─ thread: guard     (a workspace bound writable from the host) no
//!          │                    capabilities; makes every name the command
//!          │                    makes, refusing protected ones (see `guard`)
//!          ├─ fork: helper      unshare(NEWNET), loopback up, umount2 of the
//!          │                    old root; killed before the command exists
//!          └─ fork: command     setsid, no_new_privs, caps dropped, fds closed,
//!                               rlimits, Landlock (init's, inherited), seccomp
//!                               (last; its listener goes to the guard), then
//!                               waits for init's ready and the launcher's go,
//!                               execve
//! ```
//!
//! While the sandbox builds itself (mounts, Landlock, seccomp: most of the
//! start-up), the launcher is idle; [`run`] lets the caller use that time for
//! work that must be done before the command starts, such as putting the
//! decision on the audit record. The command process waits for one byte on a
//! pipe right before `execve`; if the caller's work fails, or the launcher
//! dies, the byte never comes and the command never starts.
//!
//! Every setup step that fails is reported through a close-on-exec pipe as
//! `step\treason`, and nothing runs: there is no fallback to less isolation.
//!
//! Code after `clone3` and `fork` runs in a copy of this process. tether-exec is
//! single-threaded when it spawns (nothing in it starts threads before this
//! point), so the copy can allocate and use the Rust runtime like after a plain
//! `fork()` in a single-threaded program.

mod guard;

use super::plan::{Access, Mount, Plan, RlimitKind};
use std::ffi::{CString, OsStr};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("sandbox setup failed at step `{step}`: {reason}")]
    Setup { step: String, reason: String },
    /// The caller's work before `execve` failed: the command never started.
    #[error("{0}")]
    NotStarted(String),
}

fn setup(step: &str, reason: impl std::fmt::Display) -> ApplyError {
    ApplyError::Setup {
        step: step.to_string(),
        reason: reason.to_string(),
    }
}

/// How the command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Exit code (a signal N is reported by init as 128+N).
    Exited(i32),
    /// The timeout fired and the sandbox was killed.
    TimedOut,
    /// The program was not found (127) or could not be executed (126).
    ExecFailed { code: i32 },
}

#[derive(Debug)]
pub struct Outcome {
    pub ended: Ended,
    pub duration: Duration,
    /// What `exec` said when it failed (for 126/127).
    pub exec_error: Option<String>,
    /// init, alone in the sandbox once the command ended, exits when this is
    /// dropped: until then the sandbox's mounts stay, idle. The kernel takes
    /// them down when init exits, and taking down an overlay writes back the
    /// whole upper filesystem, which stalls anyone reading the capture
    /// meanwhile; so the capture is checked and landed first.
    pub hold_init: Option<OwnedFd>,
    /// What the create guard refused to make, as `path\treason` lines (at
    /// most a few; see `guard`), for the launcher to tell.
    pub refused: Vec<String>,
}

/// The kernel release as (major, minor), from `/proc/sys/kernel/osrelease`.
pub fn kernel_version() -> Option<(u32, u32)> {
    let r = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    let mut parts = r.trim().split(['.', '-']);
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// The create guard answers an open with a descriptor put into the caller's
/// table and the call answered at once (`SECCOMP_ADDFD_FLAG_SEND`): Linux 5.14.
pub const GUARD_NEEDS_KERNEL: (u32, u32) = (5, 14);

/// Whether an overlay can be mounted, the way a run mounts one (in a new user
/// and mount namespace, `userxattr`), with its layers in a fresh directory
/// under `dir` (the state directory: a run's upper layers live on its
/// filesystem). For `doctor`: a git repository's `.git` and `overlay = true`
/// need it. The mount happens in a forked child and dies with it.
pub fn probe_overlay(dir: &Path) -> Result<(), String> {
    // A doctor killed midway leaves its probe: removed by the next one. Only
    // a real directory of ours named `overlay-probe-<pid>-<nanos>` whose pid
    // is gone, and nothing followed through a symlink.
    if let Ok(entries) = std::fs::read_dir(dir) {
        use std::os::unix::fs::MetadataExt;
        let euid = nix::unistd::geteuid().as_raw();
        let ours_dir = |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir() && m.uid() == euid);
        for e in entries.flatten() {
            let name = e.file_name();
            let dead = name
                .to_str()
                .and_then(|n| n.strip_prefix("overlay-probe-"))
                .and_then(|rest| rest.split_once('-'))
                .filter(|(_, nanos)| nanos.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|(pid, _)| pid.parse::<u32>().ok())
                .is_some_and(|p| !Path::new(&format!("/proc/{p}")).exists());
            if dead && ours_dir(&e.path()) {
                let work = e.path().join("work/work");
                if ours_dir(&e.path().join("work")) && ours_dir(&work) {
                    let _ = std::fs::set_permissions(&work, std::os::unix::fs::PermissionsExt::from_mode(0o700));
                }
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let base = dir.join(format!("overlay-probe-{}-{nanos}", std::process::id()));
    let made = ["lower", "upper", "work", "merged"]
        .iter()
        .try_for_each(|d| std::fs::create_dir_all(base.join(d)));
    let result = match made {
        Err(e) => Err(format!("cannot make the probe's directories in {}: {e}", dir.display())),
        Ok(()) => mount_overlay_in_child(&base),
    };
    // overlayfs leaves `work/work` unreadable to its owner.
    let _ = std::fs::set_permissions(
        base.join("work/work"),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    );
    let _ = std::fs::remove_dir_all(&base);
    result
}

fn mount_overlay_in_child(base: &Path) -> Result<(), String> {
    let (uid, gid) = (nix::unistd::geteuid().as_raw(), nix::unistd::getegid().as_raw());
    // Layers named relative to `base` (the child's working directory), so
    // that no character of the state directory's path can break the options.
    let options = cstr("lowerdir=lower,upperdir=upper,workdir=work,userxattr");
    let (base_c, merged, overlay, root) = (path_c(base), cstr("merged"), cstr("overlay"), cstr("/"));
    // SAFETY: fork in a single-threaded process (doctor); the child makes
    // system calls and small allocations, then `_exit`s.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", errno()));
    }
    if pid == 0 {
        // 0: mounted; 1–127: the namespace failed (errno); 128+: the mount
        // failed (128 + errno, clamped).
        let code = (|| -> Result<(), (bool, i32)> {
            let os_err = |e: std::io::Error| e.raw_os_error().unwrap_or(1);
            // SAFETY: unshare with namespace flags only.
            if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) } != 0 {
                return Err((false, os_err(errno())));
            }
            let maps = [
                ("/proc/self/uid_map", format!("0 {uid} 1\n")),
                ("/proc/self/setgroups", "deny\n".to_string()),
                ("/proc/self/gid_map", format!("0 {gid} 1\n")),
            ];
            for (file, text) in maps {
                std::fs::write(file, text).map_err(|e| (false, os_err(e)))?;
            }
            // SAFETY: chdir and mount(2) with NUL-terminated strings that
            // outlive the calls: this namespace's mounts made private first,
            // so nothing propagates to the host, then the overlay.
            unsafe {
                if libc::chdir(base_c.as_ptr()) != 0
                    || libc::mount(
                        std::ptr::null(),
                        root.as_ptr(),
                        std::ptr::null(),
                        libc::MS_REC | libc::MS_PRIVATE,
                        std::ptr::null(),
                    ) != 0
                {
                    return Err((false, os_err(errno())));
                }
                if libc::mount(
                    overlay.as_ptr(),
                    merged.as_ptr(),
                    overlay.as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV,
                    options.as_ptr() as *const libc::c_void,
                ) != 0
                {
                    return Err((true, os_err(errno())));
                }
            }
            Ok(())
        })();
        let status = match code {
            Ok(()) => 0,
            Err((false, e)) => e.clamp(1, 127),
            Err((true, e)) => 128 + e.clamp(0, 127),
        };
        // SAFETY: leaving the forked child without running destructors.
        unsafe { libc::_exit(status) };
    }
    match exit_code_of(pid)? {
        0 => Ok(()),
        e @ 1..=127 => Err(format!(
            "cannot make a user and mount namespace to try it in: {}",
            std::io::Error::from_raw_os_error(e)
        )),
        e => Err(format!(
            "the kernel refused the overlay: {}",
            std::io::Error::from_raw_os_error(e - 128)
        )),
    }
}

/// Whether this process can make the namespaces a sandbox is made of, the
/// way a run makes them (`clone3` into new user, mount, pid, ipc and uts
/// namespaces, then the network namespace from inside), for `doctor`: what
/// the sysctls say is not all (an AppArmor or SELinux rule; a container's
/// seccomp filter, which may refuse `clone3` itself). The child exits at
/// once.
pub fn probe_namespaces() -> Result<(), String> {
    let mut args = CloneArgs {
        flags: (libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS)
            as u64,
        exit_signal: libc::SIGCHLD as u64,
        ..CloneArgs::default()
    };
    // SAFETY: no stack (fork semantics) in a single-threaded process
    // (doctor); the child makes one system call and `_exit`s without running
    // destructors.
    let pid = unsafe { clone3(&mut args) };
    if pid < 0 {
        return Err(format!("clone3: {}", errno()));
    }
    if pid == 0 {
        // SAFETY: unshare with a namespace flag only, in the child.
        let code = if unsafe { libc::unshare(libc::CLONE_NEWNET) } == 0 {
            0
        } else {
            errno().raw_os_error().unwrap_or(1).clamp(1, 255)
        };
        // SAFETY: leaving the child without running destructors.
        unsafe { libc::_exit(code) };
    }
    match exit_code_of(pid as libc::pid_t)? {
        0 => Ok(()),
        e => Err(format!(
            "the network namespace: {}",
            std::io::Error::from_raw_os_error(e)
        )),
    }
}

/// The exit code of our child `pid`, once it has exited.
fn exit_code_of(pid: libc::pid_t) -> Result<i32, String> {
    let mut status = 0;
    // SAFETY: waitpid on our own child with a valid status pointer.
    if unsafe { libc::waitpid(pid, &mut status, 0) } != pid || !libc::WIFEXITED(status) {
        return Err("the probe's child did not exit normally".into());
    }
    Ok(libc::WEXITSTATUS(status))
}

/// The Landlock ABI this kernel offers (0 if none).
pub fn landlock_abi() -> u8 {
    // SAFETY: landlock_create_ruleset with a NULL attr, size 0 and the VERSION
    // flag only returns the ABI number; it reads and writes no memory.
    let v = unsafe { libc::syscall(libc::SYS_landlock_create_ruleset, std::ptr::null::<u8>(), 0usize, 1u32) };
    if v < 0 {
        0
    } else {
        v as u8
    }
}

/// `struct clone_args` of clone3(2).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// clone3(2) with `args` (its size passed with it); the child's pid, 0 in
/// the child, or -1 with errno set.
///
/// # Safety
/// With no stack in `args` the child runs on a copy of the caller's, as
/// after fork: the caller must be single-threaded, and the child must not
/// touch state another thread held (there is none) and must end by exiting.
unsafe fn clone3(args: &mut CloneArgs) -> libc::c_long {
    // SAFETY: a valid clone_args of the size passed; the rest is the caller's.
    unsafe {
        libc::syscall(
            libc::SYS_clone3,
            args as *mut CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    }
}

/// `struct mount_attr` of mount_setattr(2).
#[repr(C)]
#[derive(Default)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;
const AT_RECURSIVE: u32 = 0x8000;
const CLOSE_RANGE_CLOEXEC: u32 = 1 << 2;

fn socketpair() -> Result<(OwnedFd, OwnedFd), ApplyError> {
    let mut fds = [0; 2];
    // SAFETY: fds is a valid 2-element array for socketpair to fill.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    } != 0
    {
        return Err(setup("socketpair", std::io::Error::last_os_error()));
    }
    // SAFETY: socketpair succeeded, so both descriptors are open and owned by us alone.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn pipe() -> Result<(OwnedFd, OwnedFd), ApplyError> {
    let mut fds = [0; 2];
    // SAFETY: fds is a valid 2-element array for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(setup("pipe", std::io::Error::last_os_error()));
    }
    // SAFETY: pipe2 succeeded, so both descriptors are open and owned by us alone.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn cstr(p: impl AsRef<OsStr>) -> CString {
    CString::new(p.as_ref().as_bytes()).unwrap_or_else(|_| CString::new("/nonexistent-nul").expect("no nul"))
}

/// Everything the child needs, converted before clone so that the child's
/// setup code does as little as possible.
struct Prepared {
    argv: Vec<CString>,
    envp: Vec<CString>,
    seccomp: Vec<seccompiler::BpfProgram>,
    /// Where the sandbox's own processes run while it builds itself.
    cpus: Option<Cpus>,
}

/// Run the plan: returns when the command (and with it the whole sandbox) has ended.
/// `stdin` replaces the inherited standard input when given (a held action's stored input).
/// `output` sends the command's stdout and stderr to these files instead of
/// the launcher's own (a preview records them).
/// `before_release` runs in the launcher once init exists and its id maps are
/// written, before init goes on to open what the plan names (a capture's
/// directories, which it makes): alongside the kernel's making of init and
/// init's first steps rather than before the clone. Init waits for it once
/// it has emptied its capability bounding set.
/// `before_exec` runs in the launcher while the sandbox is being built; the
/// command starts only after it returns `Ok`. On `Err` from either, the
/// sandbox is killed before the command starts and `run` returns
/// [`ApplyError::NotStarted`].
pub fn run(
    plan: &Plan,
    stdin: Option<&[u8]>,
    output: Option<(&std::fs::File, &std::fs::File)>,
    before_release: &mut dyn FnMut() -> Result<(), String>,
    before_exec: &mut dyn FnMut() -> Result<(), String>,
) -> Result<Outcome, ApplyError> {
    let output = match output {
        Some((o, e)) => Some((
            o.try_clone().map_err(|x| setup("capture output", x))?.into(),
            e.try_clone().map_err(|x| setup("capture output", x))?.into(),
        )),
        None => None,
    };
    if plan.create_guard.is_some() && kernel_version().is_none_or(|v| v < GUARD_NEEDS_KERNEL) {
        return Err(setup(
            "create guard",
            format!(
                "a workspace bound writable from the host needs Linux {}.{} or later (seccomp user notification that can answer with a descriptor); use `overlay = true` in the policy on this kernel",
                GUARD_NEEDS_KERNEL.0, GUARD_NEEDS_KERNEL.1
            ),
        ));
    }
    let prepared = Prepared {
        argv: plan.argv.iter().map(cstr).collect(),
        envp: plan.env.iter().map(|(k, v)| cstr(format!("{k}={v}"))).collect(),
        seccomp: super::seccomp::filters(plan.create_guard.is_some()).map_err(|e| setup("seccomp filter", e))?,
        cpus: Cpus::apart(),
    };
    // The create guard's channel (the command sends it its seccomp listener)
    // and its report of refusals, read once the command has ended.
    let guard_fds = match plan.create_guard {
        Some(_) => {
            let (init_end, command_end) = socketpair()?;
            let (report_r, report_w) = pipe()?;
            for fd in [&report_r, &report_w] {
                // SAFETY: fcntl on a descriptor we own, setting O_NONBLOCK.
                unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) };
            }
            Some((
                GuardFds {
                    init_end,
                    command_end,
                    report: report_w,
                },
                report_r,
            ))
        }
        None => None,
    };
    let (guard_fds, guard_report) = match guard_fds {
        Some((f, r)) => (Some(f), Some(r)),
        None => (None, None),
    };
    let stdin_fd = match stdin {
        Some(data) => Some(memfd_with(data)?),
        None => None,
    };
    let (sync_r, sync_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    let (go_r, go_w) = pipe()?;
    // A socket, not a pipe: init reports the status on it, then waits on it
    // for the launcher to let it go (see `Outcome::hold_init`).
    let (status_r, status_w) = socketpair()?;

    let mut flags =
        (libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS) as u64;
    // No CLONE_NEWNET here: init has the network namespace made by a helper
    // while it builds the filesystem (see `NetnsMaker`).
    flags |= libc::CLONE_PIDFD as u64;
    // As root the sandbox's processes belong to host uid 0, which the kernel
    // exempts from RLIMIT_NPROC: a pids cgroup bounds them instead. It is
    // entered without migrating anyone (see `PidsCgroup`).
    let mut cgroup = if plan.pids_cgroup {
        Some(PidsCgroup::locate(plan.pids_max)?)
    } else {
        None
    };
    let mut pidfd: RawFd = -1;
    let mut args = CloneArgs {
        flags,
        pidfd: &mut pidfd as *mut RawFd as u64,
        exit_signal: libc::SIGCHLD as u64,
        ..CloneArgs::default()
    };
    if let Some(fd) = cgroup.as_ref().and_then(|c| c.v2_fd.as_ref()) {
        args.flags |= CLONE_INTO_CGROUP;
        args.cgroup = fd.as_raw_fd() as u64;
    }
    // v1: init enters the cgroup by a path relative to this directory, which
    // it can still reach after pivot_root.
    let self_attach = cgroup.as_ref().and_then(|c| c.v1_base.as_ref().map(|b| (b, c.name())));
    let started = Instant::now();
    // SAFETY: no stack (fork semantics). The process is single-threaded here
    // (see module doc), so the child may continue running Rust code; it
    // never returns from `init` (it exits).
    let pid = unsafe { clone3(&mut args) };
    if pid < 0 {
        let e = std::io::Error::last_os_error();
        let hint = match e.raw_os_error() {
            Some(libc::ENOSPC) => match super::namespaces_limited_to_zero().as_slice() {
                [] => " (a limit on the number of namespaces was reached: /proc/sys/user/max_*_namespaces count them per user; so the sandbox cannot be built: refusing to run un-isolated; see `tether-exec doctor`)".to_string(),
                zero => format!(
                    " ({}, so the sandbox cannot be built: refusing to run un-isolated; see `tether-exec doctor`)",
                    super::zero_limits_named(zero)
                ),
            },
            Some(libc::EPERM) => {
                " (user namespaces are restricted here, so the sandbox cannot be built: refusing to run un-isolated; see `tether-exec doctor`)".to_string()
            }
            _ => String::new(),
        };
        return Err(setup("clone3 into new namespaces", format!("{e}{hint}")));
    }
    if pid == 0 {
        drop(sync_w);
        drop(err_r);
        drop(go_w);
        drop(status_r);
        init(
            plan,
            &prepared,
            sync_r,
            err_w,
            status_w,
            ChildIo {
                stdin: stdin_fd,
                output,
                go: go_r,
                guard: guard_fds,
            },
            self_attach,
        );
    }
    if let Some(c) = &prepared.cpus {
        c.set(pid as libc::pid_t, &c.others);
    }
    // The sandbox's ends: init and the command hold their own copies.
    drop(guard_fds);
    let pid = pid as libc::pid_t;
    // SAFETY: CLONE_PIDFD made the kernel store a new descriptor in `pidfd`.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    drop(sync_r);
    drop(err_w);
    drop(stdin_fd);
    drop(go_r);
    drop(status_w);

    if let Err(e) = write_id_maps(pid, plan) {
        kill(pid);
        wait_pid(pid);
        return Err(e);
    }
    if let Err(reason) = before_release() {
        kill(pid);
        wait_pid(pid);
        return Err(ApplyError::NotStarted(reason));
    }
    // Release the child: the id maps are in place.
    let mut sync_w = std::fs::File::from(sync_w);
    let _ = sync_w.write_all(b"1");
    // v1: make the cgroup while init builds the filesystem; a second byte
    // says it exists (init enters it before it forks the command).
    if let Some(c) = cgroup.as_mut().filter(|c| c.v1_base.is_some()) {
        if let Err(e) = c.create() {
            kill(pid);
            wait_pid(pid);
            return Err(e);
        }
        let _ = sync_w.write_all(b"1");
    }
    drop(sync_w);

    // The sandbox builds itself meanwhile; the command waits for the go.
    if let Err(reason) = before_exec() {
        kill(pid);
        wait_pid(pid);
        return Err(ApplyError::NotStarted(reason));
    }
    let mut go_w = std::fs::File::from(go_w);
    // A sandbox that already failed has no reader left: the error pipe says why.
    let _ = go_w.write_all(b"1");
    drop(go_w);
    if let Some(c) = &cgroup {
        c.sweep();
    }

    let (status, timed_out, reaped, hold_init) =
        supervise(pid, &pidfd, status_r, plan.timeout_ms.map(Duration::from_millis));
    let duration = started.elapsed();
    if let Some(mut c) = cgroup {
        c.linger = !reaped;
        drop(c);
    }
    let mut refused = Vec::new();
    if let Some(r) = guard_report {
        let mut text = Vec::new();
        let _ = std::fs::File::from(r).read_to_end(&mut text);
        refused = String::from_utf8_lossy(&text).lines().map(str::to_string).collect();
    }
    let mut msg = String::new();
    let _ = std::fs::File::from(err_r).read_to_string(&mut msg);
    if !msg.is_empty() {
        let (step, reason) = msg.split_once('\t').unwrap_or(("setup", msg.as_str()));
        if let Some(code) = step.strip_prefix("exec:") {
            let code = code.parse().unwrap_or(127);
            return Ok(Outcome {
                ended: Ended::ExecFailed { code },
                duration,
                exec_error: Some(reason.to_string()),
                hold_init,
                refused,
            });
        }
        return Err(setup(step, reason));
    }
    let ended = if timed_out {
        Ended::TimedOut
    } else if libc::WIFEXITED(status) {
        Ended::Exited(libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        Ended::Exited(128 + libc::WTERMSIG(status))
    } else {
        Ended::Exited(125)
    };
    Ok(Outcome {
        ended,
        duration,
        exec_error: None,
        hold_init,
        refused,
    })
}

/// A pids cgroup (v1 `pids` hierarchy, or v2 with the pids controller) for one run.
///
/// Moving *another* process into a cgroup takes the kernel's global
/// threadgroup lock, which waits out an RCU grace period (measured: 30 ms on
/// an idle machine). Nothing is moved here: on v2 the sandbox is born in the
/// cgroup (`CLONE_INTO_CGROUP`); on v1 its single-threaded init moves itself by
/// writing `0` to `tasks`, which the kernel does without that lock.
struct PidsCgroup {
    dir: PathBuf,
    max: u64,
    /// The cgroup directory, for CLONE_INTO_CGROUP (v2 only).
    v2_fd: Option<OwnedFd>,
    /// v1: the parent directory, made while the sandbox builds itself.
    v1_base: Option<OwnedFd>,
    /// init may still be exiting: do not wait for the cgroup to empty.
    linger: bool,
    /// The directory exists (and is ours to remove).
    created: bool,
}

const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

const CGROUP_STEP: &str = "pids cgroup (running as root, RLIMIT_NPROC does not apply to host uid 0)";

/// Remove cgroups left by launchers that were killed (SIGKILL skips `Drop`):
/// named after a pid that no longer runs, and empty (rmdir refuses otherwise).
fn sweep_stale(base: &Path) {
    let Ok(rd) = std::fs::read_dir(base) else { return };
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("tether-exec-")) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir(e.path());
        }
    }
}

impl PidsCgroup {
    /// Where this run's cgroup goes. On v2 it is made now (the sandbox is
    /// born in it); on v1 later, by [`PidsCgroup::create`].
    fn locate(max: u64) -> Result<PidsCgroup, ApplyError> {
        let step = CGROUP_STEP;
        let own = std::fs::read_to_string("/proc/self/cgroup").map_err(|e| setup(step, e))?;
        let v1 = own.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, ctrl, path) = (parts.next()?, parts.next()?, parts.next()?);
            ctrl.split(',')
                .any(|c| c == "pids")
                .then(|| Path::new("/sys/fs/cgroup/pids").join(path.trim_start_matches('/')))
        });
        let base = match v1 {
            Some(b) if b.is_dir() => b,
            _ => {
                let path = own.lines().find_map(|l| l.strip_prefix("0::")).unwrap_or("/");
                let b = Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/'));
                let ctrls = std::fs::read_to_string(b.join("cgroup.subtree_control")).unwrap_or_default();
                if !ctrls.split_whitespace().any(|c| c == "pids") {
                    return Err(setup(step, format!("no pids controller is available under {} (enable it in cgroup.subtree_control, or run tether-exec as an unprivileged user)", b.display())));
                }
                b
            }
        };
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir = base.join(format!("tether-exec-{}-{nanos}", std::process::id()));
        let is_v1 = base.join("tasks").exists();
        let mut c = PidsCgroup {
            dir,
            max,
            v2_fd: None,
            v1_base: None,
            linger: false,
            created: false,
        };
        if is_v1 {
            let f = std::fs::File::open(&base).map_err(|e| setup(step, format!("{}: {e}", base.display())))?;
            c.v1_base = Some(f.into());
        } else {
            c.create()?;
            let f = std::fs::File::open(&c.dir).map_err(|e| setup(step, e))?;
            c.v2_fd = Some(f.into());
        }
        Ok(c)
    }

    /// Make the cgroup with its limit.
    fn create(&mut self) -> Result<(), ApplyError> {
        let dir = &self.dir;
        std::fs::create_dir(dir).map_err(|e| setup(CGROUP_STEP, format!("{}: {e}", dir.display())))?;
        self.created = true;
        std::fs::write(dir.join("pids.max"), self.max.to_string()).map_err(|e| setup(CGROUP_STEP, e))?;
        Ok(())
    }

    /// Remove the cgroups of launchers gone (done while the command runs).
    fn sweep(&self) {
        if let Some(base) = self.dir.parent() {
            sweep_stale(base);
        }
    }

    fn name(&self) -> String {
        self.dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }
}

impl Drop for PidsCgroup {
    fn drop(&mut self) {
        // Empty once init has been reaped; retry briefly while the kernel
        // tears down. A run that did not wait for the teardown leaves it to
        // the next run's sweep, which runs while that sandbox builds itself.
        if self.linger || !self.created {
            return;
        }
        for i in 0..400u64 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_micros(20 + i * 5));
        }
    }
}

fn memfd_with(data: &[u8]) -> Result<OwnedFd, ApplyError> {
    let name = cstr("tether-exec-stdin");
    // SAFETY: memfd_create with a valid NUL-terminated name.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(setup("stdin memfd", std::io::Error::last_os_error()));
    }
    // SAFETY: memfd_create returned a fresh descriptor we own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut f = std::fs::File::from(fd);
    f.write_all(data).map_err(|e| setup("stdin memfd", e))?;
    std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(0)).map_err(|e| setup("stdin memfd", e))?;
    Ok(f.into())
}

fn kill(pid: libc::pid_t) {
    // SAFETY: plain kill(2) of our own child.
    unsafe { libc::kill(pid, libc::SIGKILL) };
}

/// The wait status of a process that exited with `code`.
fn exit_status(code: i32) -> i32 {
    (code & 0xff) << 8
}

fn wait_pid(pid: libc::pid_t) -> i32 {
    let mut status = 0;
    loop {
        // SAFETY: waitpid on our own child with a valid status pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::__WALL) };
        if r == pid || (r < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR)) {
            return status;
        }
    }
}

fn write_id_maps(pid: libc::pid_t, plan: &Plan) -> Result<(), ApplyError> {
    let base = PathBuf::from(format!("/proc/{pid}"));
    let write = |file: &str, text: String| {
        std::fs::write(base.join(file), text.as_bytes()).map_err(|e| setup(&format!("write {file}"), e))
    };
    write("uid_map", format!("{} {} 1\n", plan.inner_uid, plan.outer_uid))?;
    write("setgroups", "deny\n".into())?;
    write("gid_map", format!("{} {} 1\n", plan.inner_gid, plan.outer_gid))?;
    Ok(())
}

/// Block or unblock the forwarded signals in this process.
fn set_forwarded_blocked(blocked: bool) {
    // SAFETY: sigset operations on a local, zero-initialised sigset_t.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in FORWARDED_SIGNALS {
            libc::sigaddset(&mut set, s);
        }
        let how = if blocked { libc::SIG_BLOCK } else { libc::SIG_UNBLOCK };
        libc::sigprocmask(how, &set, std::ptr::null_mut());
    }
}

/// Signals passed from the harness to init, and from init to the command.
const FORWARDED_SIGNALS: [libc::c_int; 6] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// Wait for the sandbox to end, killing it at the timeout and forwarding signals.
/// Returns (wait status, timed out, init reaped, the socket init waits on
/// when it reported).
///
/// When the command ends, init kills and reaps every other process of the
/// sandbox, then reports the command's status on `status` before it exits.
/// From then on nothing of the sandbox runs or can touch a file: what is left
/// is the kernel dismantling its namespaces and mounts (0.3 ms to 1 ms, more
/// with an overlay), which the launcher does not wait out. An overlay still
/// mounted in the dying namespace has no user left, so its upper directory
/// can be read and moved meanwhile. init is reaped here if already gone,
/// else by whoever inherits it when the launcher exits.
fn supervise(
    pid: libc::pid_t,
    pidfd: &OwnedFd,
    status: OwnedFd,
    timeout: Option<Duration>,
) -> (i32, bool, bool, Option<OwnedFd>) {
    let mut status = Some(std::fs::File::from(status));
    let mut reported: Option<i32> = None;
    // Forward the signals a harness or a terminal sends us to init, which
    // forwards them to the command. Blocked and read through a signalfd so no
    // handler runs in this process.
    let forwarded = FORWARDED_SIGNALS;
    // SAFETY: sigset operations on a local, zero-initialised sigset_t.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    unsafe {
        libc::sigemptyset(&mut set);
        for s in forwarded {
            libc::sigaddset(&mut set, s);
        }
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
    // SAFETY: signalfd with a valid set; -1 asks for a new descriptor.
    let sfd = unsafe { libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK) };
    let deadline = timeout.map(|t| Instant::now() + t);
    let mut timed_out = false;
    loop {
        let mut fds = [
            libc::pollfd {
                fd: pidfd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                // A negative fd is ignored by poll.
                fd: sfd,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: status.as_ref().map_or(-1, |f| f.as_raw_fd()),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let wait_ms = match deadline {
            Some(d) => d
                .saturating_duration_since(Instant::now())
                .as_millis()
                .min(i32::MAX as u128) as i32,
            None => -1,
        };
        // SAFETY: fds is a valid array of two pollfd structs.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, wait_ms) };
        if n == 0 && deadline.is_some_and(|d| Instant::now() >= d) {
            // Killing init makes the kernel kill every process of its pid namespace.
            timed_out = true;
            kill(pid);
            break;
        }
        if fds[1].revents & libc::POLLIN != 0 {
            // SAFETY: reading one signalfd_siginfo into a correctly sized buffer.
            let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
            let r = unsafe {
                libc::read(
                    sfd,
                    &mut info as *mut _ as *mut libc::c_void,
                    std::mem::size_of::<libc::signalfd_siginfo>(),
                )
            };
            if r > 0 {
                // SAFETY: forwarding a signal to our own child.
                unsafe { libc::kill(pid, info.ssi_signo as i32) };
            }
        }
        if fds[2].revents != 0 {
            let mut code = [0u8; 4];
            if let Some(Ok(())) = status.as_mut().map(|f| f.read_exact(&mut code)) {
                reported = Some(i32::from_le_bytes(code));
                break;
            }
            // EOF: init died without reporting (killed); its wait status tells.
            status = None;
        }
        if fds[0].revents & libc::POLLIN != 0 {
            break;
        }
    }
    let (status_code, reaped) = match reported {
        Some(code) => {
            // Reap init if it is already gone; never wait for it.
            let mut st = 0;
            // SAFETY: non-blocking waitpid on our own child with a valid status pointer.
            let r = unsafe { libc::waitpid(pid, &mut st, libc::__WALL | libc::WNOHANG) };
            (exit_status(code), r == pid)
        }
        None => (wait_pid(pid), true),
    };
    // The signals stay blocked: once the command has ended, the launcher
    // must finish what follows (land a capture, check the protected paths,
    // record the end) rather than die of a SIGTERM halfway; pending ones are
    // dropped when it exits.
    if sfd >= 0 {
        // SAFETY: closing the signalfd we created.
        unsafe { libc::close(sfd) };
    }
    let hold = reported.and(status).map(OwnedFd::from);
    (status_code, timed_out, reaped, hold)
}

/// Report a failed step to the parent and exit. Never returns.
fn fail(err: &OwnedFd, step: &str, reason: impl std::fmt::Display, code: i32) -> ! {
    let msg = format!("{step}\t{reason}");
    // SAFETY: writing a byte buffer to our own pipe, then exiting without
    // running destructors or atexit handlers of the copied parent state.
    unsafe {
        libc::write(err.as_raw_fd(), msg.as_ptr() as *const libc::c_void, msg.len());
        libc::_exit(code)
    }
}

/// Init's own standard streams are the launcher's, which the command has
/// inherited by now: init lets go of them, so that a harness reading the
/// command's output to its end waits for the command and the launcher only,
/// never for init, whose exit (the pid namespace, the mounts, an overlay
/// taken down) comes after the launcher has let it go. `/dev/null` in their
/// place (closed, if even that cannot be opened: init writes nothing to
/// them, it reports on its own pipes).
fn let_go_of_stdio() {
    // SAFETY: open of a constant NUL-terminated path; dup2 of the descriptor
    // we just opened onto 0, 1 and 2, which init does not use; close of our
    // own descriptors.
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
        if null < 0 {
            libc::syscall(libc::SYS_close_range, 0u32, 2u32, 0u32);
            return;
        }
        for n in 0..3 {
            libc::dup2(null, n);
        }
        if null > 2 {
            libc::close(null);
        }
    }
}

fn errno() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// Close every descriptor of this process but those in `keep`.
fn close_all_but(mut keep: Vec<RawFd>) {
    keep.sort_unstable();
    keep.dedup();
    let mut low: u32 = 0;
    for k in keep.into_iter().filter(|k| *k >= 0).map(|k| k as u32) {
        if k > low {
            // SAFETY: close_range over descriptors this process does not use.
            unsafe { libc::syscall(libc::SYS_close_range, low, k - 1, 0) };
        }
        low = k + 1;
    }
    // SAFETY: as above, up to the highest possible descriptor.
    unsafe { libc::syscall(libc::SYS_close_range, low, u32::MAX, 0) };
}

/// Set real, effective and saved gid, then uid, to the sandbox's inner ids.
/// Raw system calls: init is a `clone3` copy with one thread, and glibc's
/// wrappers would try to signal the launcher's other threads.
fn become_inner_ids(plan: &Plan) -> std::io::Result<()> {
    let (g, u) = (plan.inner_gid as libc::c_long, plan.inner_uid as libc::c_long);
    // SAFETY: setresgid/setresuid take integer ids only; they change this
    // process's credentials and nothing in its memory.
    let rc = unsafe { libc::syscall(libc::SYS_setresgid, g, g, g) };
    if rc != 0 {
        return Err(errno());
    }
    // SAFETY: as above.
    let rc = unsafe { libc::syscall(libc::SYS_setresuid, u, u, u) };
    if rc != 0 {
        return Err(errno());
    }
    Ok(())
}

/// pid 1 of the sandbox. Never returns.
/// The command's standard streams when they are not simply inherited.
struct ChildIo {
    stdin: Option<OwnedFd>,
    output: Option<(OwnedFd, OwnedFd)>,
    /// One byte from the launcher here means the command may start.
    go: OwnedFd,
    /// The create guard's descriptors, when the plan has one.
    guard: Option<GuardFds>,
}

/// The create guard's descriptors (see `guard`): a socket pair between init
/// (the guard's end) and the command (which sends its seccomp listener), and
/// the pipe the guard reports refusals on.
struct GuardFds {
    init_end: OwnedFd,
    command_end: OwnedFd,
    report: OwnedFd,
}

fn init(
    plan: &Plan,
    prep: &Prepared,
    sync: OwnedFd,
    err: OwnedFd,
    status: OwnedFd,
    io: ChildIo,
    cgroup_v1: Option<(&OwnedFd, String)>,
) -> ! {
    // Die with tether-exec; then the kernel kills the whole namespace.
    // SAFETY: prctl with integer arguments only.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) };
    // A copy of the launcher, init holds every descriptor the launcher had:
    // the capture's lock (a directory in the state directory), the audit
    // log's... It keeps only its own for the sandbox's whole life.
    let mut keep: Vec<RawFd> = vec![
        0,
        1,
        2,
        sync.as_raw_fd(),
        err.as_raw_fd(),
        status.as_raw_fd(),
        io.go.as_raw_fd(),
    ];
    keep.extend(io.stdin.as_ref().map(|f| f.as_raw_fd()));
    if let Some((o, e)) = &io.output {
        keep.extend([o.as_raw_fd(), e.as_raw_fd()]);
    }
    keep.extend(cgroup_v1.as_ref().map(|(b, _)| b.as_raw_fd()));
    if let Some(g) = &io.guard {
        keep.extend([g.init_end.as_raw_fd(), g.command_end.as_raw_fd(), g.report.as_raw_fd()]);
    }
    close_all_but(keep);
    // As pid 1 without handlers, init would drop the signals the launcher
    // forwards during set-up: hold them until `reap` can pass them on.
    set_forwarded_blocked(true);
    // The capability bounding set goes now, while init waits for its id maps
    // anyway: one system call per capability, which the command (forked from
    // here, inheriting the empty set) no longer makes on its way to execve.
    // Nothing of the sandbox's own execs before the command, and the bounding
    // set limits only what an exec can grant: init keeps the capabilities it
    // has in its namespace for the set-up.
    if let Err(e) = drop_bounding_set() {
        fail(&err, "drop the capability bounding set", e, 125);
    }
    // Wait until the parent has written our id maps (or died: EOF).
    let mut b = [0u8; 1];
    let mut f = std::fs::File::from(sync);
    if !matches!(f.read(&mut b), Ok(1)) {
        // SAFETY: exiting the copied process without destructors.
        unsafe { libc::_exit(125) };
    }
    // Become the sandbox's user before making anything. Run by root for a
    // workspace owned by someone else, init still holds host uid 0, which
    // the namespace does not map: the kernel refuses to create files for an
    // unmapped owner (EOVERFLOW), so not one mount point could be made.
    // Otherwise init is the inner uid already and this changes nothing.
    // Capabilities in the namespace stay: the old ids were not its root.
    // The overlay's directories are opened first, with the launcher's
    // rights: the capture lives in the state directory, which only the
    // launcher may traverse (see `OverlayDirs`).
    let mut overlay_dirs = match OverlayDirs::open(plan) {
        Ok(d) => d,
        Err((step, e)) => fail(&err, &step, e, 125),
    };
    if let Err(e) = become_inner_ids(plan) {
        fail(&err, "switch to the sandbox's uid and gid", e, 125);
    }
    // A change of ids clears the parent-death signal: set it again. The
    // launcher may have died before that; then its end of the status socket
    // is closed. (pid 1 of a namespace cannot ask getppid.)
    // SAFETY: prctl with integer arguments; poll of one pollfd we own.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
        let mut p = libc::pollfd {
            fd: status.as_raw_fd(),
            events: libc::POLLRDHUP,
            revents: 0,
        };
        if libc::poll(&mut p, 1, 0) > 0 && p.revents & (libc::POLLHUP | libc::POLLRDHUP) != 0 {
            libc::_exit(125);
        }
    }
    // A change of ids makes a process undumpable, and the helper's network
    // namespace can then not be joined through its pidfd. Nothing but the
    // sandbox's own user (who owns it already) gains access by this.
    // SAFETY: prctl with integer arguments only.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1 as libc::c_ulong) };
    if let Err((step, e)) = overlay_dirs.open_fd_dir() {
        fail(&err, &step, e, 125);
    }
    // The two slowest steps of the kernel's are left to a helper: making the
    // network namespace, and detaching the host's root (see `Helper`). First
    // to the host's root, so that pivot_root moves the helper's working
    // directory (inherited from here) into the new root too: nothing of the
    // sandbox may keep a handle on the host's tree.
    if let Err(e) = std::env::set_current_dir("/") {
        fail(&err, "chdir /", e, 125);
    }
    let mut helper = Helper::start(&err, !plan.host_network, &overlay_dirs, prep.cpus.as_ref());
    if let Err((step, e)) = build_filesystem(plan, &mut helper, &err) {
        fail(&err, &step, e, 125);
    }
    // The command is forked later, from here: it must not inherit these.
    drop(overlay_dirs);
    helper.detach_old_root(&err);
    if !plan.host_network {
        helper.join_netns(&err);
    }
    if let Err((step, e)) = finish_filesystem(plan, &helper, &err) {
        fail(&err, &step, e, 125);
    }
    helper.end();
    if let Some((base, name)) = cgroup_v1 {
        // Before anything can fork: the whole sandbox descends from here.
        if !matches!(f.read(&mut b), Ok(1)) {
            // SAFETY: exiting the copied process without destructors.
            unsafe { libc::_exit(125) };
        }
        let tasks = cstr(format!("{name}/tasks"));
        // SAFETY: openat relative to a directory descriptor we hold, with a
        // NUL-terminated path; write of a one-byte buffer; close of that fd.
        let entered = unsafe {
            let fd = libc::openat(base.as_raw_fd(), tasks.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            let ok = fd >= 0 && libc::write(fd, b"0".as_ptr() as *const libc::c_void, 1) == 1;
            let e = errno();
            if fd >= 0 {
                libc::close(fd);
            }
            if ok {
                Ok(())
            } else {
                Err(e)
            }
        };
        if let Err(e) = entered {
            fail(&err, "enter the pids cgroup", e, 125);
        }
        // SAFETY: closing init's copy of the directory descriptor: nothing
        // forked from here may hold it.
        unsafe { libc::close(base.as_raw_fd()) };
    }
    drop(f);
    // Landlock for init itself, which the command inherits when it forks:
    // the create guard (a thread of init, started after) then shares the
    // command's domain, without which Landlock would not let it read the
    // command's memory. init makes nothing after this.
    if let Err(e) = landlock(plan) {
        fail(&err, "landlock", e, 125);
    }
    // The command confines itself further (seccomp) while init finishes the
    // namespaces' set-up; it starts only once init says they are ready.
    let (ready_r, ready_w) = match pipe() {
        Ok(p) => p,
        Err(e) => fail(&err, "pipe", e, 125),
    };
    // SAFETY: fork in a single-threaded process (init is a copy of the
    // single-threaded launcher).
    let child = unsafe { libc::fork() };
    if child < 0 {
        fail(&err, "fork the command", errno(), 125);
    }
    let mut io = io;
    let guard_fds = io.guard.take();
    if child == 0 {
        drop(ready_w);
        drop(status);
        let channel = guard_fds.map(|g| g.command_end);
        command(plan, prep, &err, io, ready_r, channel);
    }
    // The command confines itself on the launcher's CPU, idle while it waits
    // for the command's end, while init finishes here (it takes every CPU
    // back once `ready` is written below); init and the create guard (a
    // thread of init's, started below) go wherever the command's processes
    // go (see `Cpus`).
    if let Some(c) = &prep.cpus {
        c.set(child, &c.launchers);
        c.set(0, &c.all);
    }
    drop(ready_r);
    drop(io);
    if let (Some(g), Some(rules)) = (guard_fds, &plan.create_guard) {
        drop(g.command_end);
        if let Err(e) = guard::spawn(rules.clone(), g.init_end, g.report) {
            // The command is waiting for the go; without a guard its calls
            // that make a name would fail (ENOSYS): refuse to run instead.
            kill(child);
            fail(&err, "start the create guard", e, 125);
        }
    }
    let_go_of_stdio();
    // Nothing inside may ptrace or read the memory of init.
    // SAFETY: prctl with integer arguments only.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0) };
    let host = cstr(&plan.hostname);
    // SAFETY: sethostname with a valid buffer and its length, in our own UTS namespace.
    if unsafe { libc::sethostname(host.as_ptr(), plan.hostname.len()) } != 0 {
        fail(&err, "set hostname", errno(), 125);
    }
    let mut ready = std::fs::File::from(ready_w);
    // The command may have died already (a failed step); the error pipe says why.
    let _ = ready.write_all(b"1");
    drop(ready);
    drop(err);
    reap(child, status)
}

/// A child of init that takes the two slowest kernel steps off init's path.
///
/// * The network namespace: creating one costs the kernel about as much as
///   all the mounts. The helper makes it and brings up its loopback while init
///   builds the filesystem; init then joins it (`setns` through a pidfd).
/// * Detaching the host's root after `pivot_root`: `umount2(MNT_DETACH)`
///   takes the old root out of the mount tree at once, then waits for an
///   expedited RCU grace period before it returns (about 0.6 ms here). The
///   helper makes that call; init goes on as soon as the old root is out of
///   the tree, which it sees when `/oldroot` stops being a mount point
///   (`rmdir` no longer fails with EBUSY), and never forks the command before.
///
/// * Making the overlays (see [`make_overlay_mount`]), first of all: init
///   moves each into place when its turn in the plan comes, taking it from
///   the helper with `pidfd_getfd`.
///
/// The helper shares init's user, mount and pid namespaces, runs only this
/// code, and is killed before the command exists; `reap` collects it.
struct Helper {
    pid: libc::pid_t,
    /// The helper writes the number of each overlay mount's descriptor here.
    overlays: Option<OwnedFd>,
    /// The helper's "network namespace ready" byte, when it makes one.
    netns_ready: Option<OwnedFd>,
    /// One byte here tells the helper to detach the old root.
    detach: OwnedFd,
}

/// The helper's exit code after it reported its own failure on the error pipe.
const HELPER_FAILED: i32 = 125;

impl Helper {
    fn start(err: &OwnedFd, make_netns: bool, overlays: &OverlayDirs, cpus: Option<&Cpus>) -> Helper {
        let (ready_r, ready_w) = match pipe() {
            Ok(p) => p,
            Err(e) => fail(err, "pipe", e, 125),
        };
        let (mounts_r, mounts_w) = match pipe() {
            Ok(p) => p,
            Err(e) => fail(err, "pipe", e, 125),
        };
        let (detach_r, detach_w) = match pipe() {
            Ok(p) => p,
            Err(e) => fail(err, "pipe", e, 125),
        };
        // SAFETY: fork in init, which is single-threaded (a copy of the
        // single-threaded launcher).
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            fail(err, "fork init's helper", errno(), 125);
        }
        if let Some(c) = cpus.filter(|_| pid > 0) {
            c.set(pid, &c.launchers);
        }
        if pid == 0 {
            drop(ready_r);
            drop(detach_w);
            drop(mounts_r);
            if let Some(fd_dir) = &overlays.fd_dir {
                // SAFETY: fchdir to a directory descriptor we hold.
                if unsafe { libc::fchdir(fd_dir.as_raw_fd()) } != 0 {
                    fail(
                        err,
                        "overlay: enter init's descriptor directory",
                        errno(),
                        HELPER_FAILED,
                    );
                }
                let mut out = std::fs::File::from(mounts_w);
                for dirs in &overlays.dirs {
                    let m = match make_overlay_mount(dirs) {
                        Ok(m) => m,
                        Err(e) => fail(err, "overlay", e, HELPER_FAILED),
                    };
                    // Kept open (leaked) until init has taken it; the helper dies soon.
                    let n = m.as_raw_fd();
                    std::mem::forget(m);
                    if out.write_all(&n.to_le_bytes()).is_err() {
                        // SAFETY: exiting the copied process without destructors.
                        unsafe { libc::_exit(HELPER_FAILED) };
                    }
                }
                drop(out);
                // Nothing of the sandbox keeps a handle on the host's procfs.
                let _ = std::env::set_current_dir("/");
            } else {
                drop(mounts_w);
            }
            if make_netns {
                // SAFETY: unshare with a namespace flag only.
                if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
                    fail(
                        err,
                        "create the network namespace",
                        format!(
                            "{} (network isolation is unavailable here: refusing to run un-isolated; see `tether-exec doctor`)",
                            errno()
                        ),
                        HELPER_FAILED,
                    );
                }
                if let Err(e) = loopback_up() {
                    fail(err, "bring up loopback", e, HELPER_FAILED);
                }
                let _ = std::fs::File::from(ready_w).write_all(b"1");
            } else {
                drop(ready_w);
            }
            let mut byte = [0u8; 1];
            if std::fs::File::from(detach_r).read_exact(&mut byte).is_ok() {
                let old = path_c(Path::new(OLD));
                // SAFETY: umount2 with a valid path. pivot_root made the new
                // root ours too, so the path names the same mount as for init.
                if unsafe { libc::umount2(old.as_ptr(), libc::MNT_DETACH) } != 0 {
                    fail(err, "detach the host's root", errno(), HELPER_FAILED);
                }
            }
            // Keep the network namespace alive until init has joined it and kills us.
            loop {
                // SAFETY: pause has no arguments; it returns only on a signal.
                unsafe { libc::pause() };
            }
        }
        drop(ready_w);
        drop(detach_r);
        drop(mounts_w);
        Helper {
            pid,
            overlays: Some(mounts_r),
            netns_ready: make_netns.then_some(ready_r),
            detach: detach_w,
        }
    }

    fn detach_old_root(&self, err: &OwnedFd) {
        // SAFETY: a one-byte write from a local buffer to our own pipe.
        if unsafe { libc::write(self.detach.as_raw_fd(), b"1".as_ptr() as *const libc::c_void, 1) } != 1 {
            self.failed(err, "detach the host's root", None);
        }
    }

    /// The next overlay mount the helper made, copied into init.
    fn take_overlay(&mut self, err: &OwnedFd) -> std::io::Result<OwnedFd> {
        let mut n = [0u8; 4];
        let fd = self.overlays.as_ref().map_or(-1, |f| f.as_raw_fd());
        // SAFETY: read into a local 4-byte buffer; the helper writes each
        // number in one 4-byte write, which a pipe keeps whole.
        let got = unsafe { libc::read(fd, n.as_mut_ptr() as *mut libc::c_void, n.len()) } == 4;
        if !got {
            self.failed(err, "overlay", None);
        }
        // SAFETY: pidfd_open of our own child, alive until init kills it.
        let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, self.pid, 0) };
        if pidfd < 0 {
            return Err(errno());
        }
        // SAFETY: a fresh descriptor nobody else owns.
        let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as RawFd) };
        // SAFETY: pidfd_getfd copies the helper's descriptor number `n` into
        // this process; the result is a fresh descriptor owned below.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), i32::from_le_bytes(n), 0) };
        if fd < 0 {
            return Err(errno());
        }
        // SAFETY: as above.
        Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
    }

    /// Joins the helper's network namespace.
    fn join_netns(&mut self, err: &OwnedFd) {
        let mut byte = [0u8; 1];
        let made = self
            .netns_ready
            .take()
            .is_some_and(|fd| std::fs::File::from(fd).read_exact(&mut byte).is_ok());
        if !made {
            self.failed(err, "create the network namespace", None);
        }
        if let Err(e) = join_netns_of(self.pid) {
            fail(err, "join the network namespace", e, 125);
        }
    }

    /// Whether the helper has ended (it reported a failure, or died).
    fn ended(&self) -> Option<i32> {
        let mut status = 0;
        // SAFETY: waitpid of our own child with a valid status pointer.
        let r = unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
        (r == self.pid).then_some(status)
    }

    /// The helper failed at `step`: it said why on the error pipe, unless it
    /// died some other way. `status`: its wait status, if already collected.
    fn failed(&self, err: &OwnedFd, step: &str, status: Option<i32>) -> ! {
        let status = status.unwrap_or_else(|| {
            let mut status = 0;
            // SAFETY: waitpid of our own child with a valid status pointer.
            unsafe { libc::waitpid(self.pid, &mut status, 0) };
            status
        });
        if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == HELPER_FAILED {
            // SAFETY: exiting the copied process without destructors.
            unsafe { libc::_exit(125) }
        }
        fail(
            err,
            step,
            format!("init's helper ended unexpectedly (wait status {status})"),
            125,
        )
    }

    /// Ends the helper; `reap` collects it with the sandbox's other processes.
    fn end(self) {
        // SAFETY: kill of our own child, not yet reaped.
        unsafe { libc::kill(self.pid, libc::SIGKILL) };
    }
}

fn join_netns_of(pid: libc::pid_t) -> std::io::Result<()> {
    // SAFETY: pidfd_open of our own child, not yet reaped (it waits for our
    // SIGKILL), so the pid still names it.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(errno());
    }
    // SAFETY: the kernel just returned this descriptor to us.
    let pidfd = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
    // SAFETY: setns with a pidfd we own and a single namespace flag.
    if unsafe { libc::setns(pidfd.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(errno());
    }
    Ok(())
}

static FORWARD_TO: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

extern "C" fn forward(sig: libc::c_int) {
    let pid = FORWARD_TO.load(std::sync::atomic::Ordering::Relaxed);
    if pid > 0 {
        // SAFETY: kill(2) is async-signal-safe. Sent to the command's process
        // group (it called setsid, so its pgid is its pid) and to the command.
        unsafe {
            libc::kill(-pid, sig);
            libc::kill(pid, sig);
        }
    }
}

/// init's loop: forward signals, reap every child, exit with the command's status.
/// `report` receives the command's status once nothing of the sandbox runs.
fn reap(child: libc::pid_t, report: OwnedFd) -> ! {
    FORWARD_TO.store(child, std::sync::atomic::Ordering::Relaxed);
    for s in FORWARDED_SIGNALS {
        // SAFETY: installing an async-signal-safe handler (it only calls kill).
        unsafe { libc::signal(s, forward as *const () as libc::sighandler_t) };
    }
    // Signals that came during set-up are delivered now, to the command.
    set_forwarded_blocked(false);
    loop {
        let mut status = 0;
        // SAFETY: waitpid(-1) with a valid status pointer.
        let r = unsafe { libc::waitpid(-1, &mut status, libc::__WALL) };
        if r == child {
            let code = if libc::WIFEXITED(status) {
                libc::WEXITSTATUS(status)
            } else if libc::WIFSIGNALED(status) {
                128 + libc::WTERMSIG(status)
            } else {
                continue;
            };
            // The command ended: so does everything it left behind (daemons
            // included). kill(-1) from pid 1 reaches every other process of
            // the namespace; once all are reaped, nothing of the sandbox
            // runs any more and the launcher may go on.
            // SAFETY: kill and waitpid with valid arguments; write of a local buffer.
            unsafe {
                libc::kill(-1, libc::SIGKILL);
                let mut st = 0;
                while libc::waitpid(-1, &mut st, libc::__WALL) > 0 || errno().raw_os_error() == Some(libc::EINTR) {}
                let bytes = code.to_le_bytes();
                libc::write(report.as_raw_fd(), bytes.as_ptr() as *const libc::c_void, bytes.len());
                // Wait, mounts in place, until the launcher lets go (a byte
                // or its end closed, which its death also does).
                let mut b = 0u8;
                while libc::read(report.as_raw_fd(), &mut b as *mut u8 as *mut libc::c_void, 1) < 0
                    && errno().raw_os_error() == Some(libc::EINTR)
                {}
                libc::_exit(code)
            };
        }
        if r < 0 && errno().raw_os_error() == Some(libc::ECHILD) {
            // SAFETY: as above.
            unsafe { libc::_exit(125) };
        }
    }
}

fn path_c(p: &Path) -> CString {
    cstr(p.as_os_str())
}

fn mount_raw(
    src: Option<&Path>,
    dst: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> std::io::Result<()> {
    let src = src.map(path_c);
    let dst = path_c(dst);
    let fstype = fstype.map(cstr);
    let data = data.map(cstr);
    // SAFETY: mount(2) with valid NUL-terminated strings or NULL pointers, in
    // our own (private) mount namespace.
    let r = unsafe {
        libc::mount(
            src.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            dst.as_ptr(),
            fstype.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            flags,
            data.as_ref()
                .map_or(std::ptr::null(), |s| s.as_ptr() as *const libc::c_void),
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(errno())
    }
}

/// A fresh tmpfs at `dst` (never suid, never devices), with extra mount flags and options.
fn mount_tmpfs(dst: &Path, flags: libc::c_ulong, options: &str) -> std::io::Result<()> {
    let tmpfs = Path::new("tmpfs");
    mount_raw(
        Some(tmpfs),
        dst,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV | flags,
        Some(options),
    )
}

/// Set mount attributes recursively on the mount at `dst`.
fn set_attrs(dst: &Path, set: u64) -> std::io::Result<()> {
    let p = path_c(dst);
    mount_setattr(libc::AT_FDCWD, &p, AT_RECURSIVE, set)
}

/// mount_setattr(2): `set` on the mount at `path` from `dirfd`, with `flags`.
fn mount_setattr(dirfd: RawFd, path: &std::ffi::CStr, flags: u32, set: u64) -> std::io::Result<()> {
    let attr = MountAttr {
        attr_set: set,
        ..MountAttr::default()
    };
    // SAFETY: mount_setattr with a descriptor the caller owns (or AT_FDCWD),
    // a NUL-terminated path, a valid mount_attr and its size.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            dirfd,
            path.as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(errno())
    }
}

/// Create `dst` (and parents) as a directory, or as an empty file when `file`.
fn make_mountpoint(dst: &Path, file: bool) -> std::io::Result<()> {
    if let Some(parent) = dst.parent() {
        std::fs::create_dir_all(parent)?;
    }
    // One there already (a file under a directory bound read-only) is not
    // opened for writing: that fails.
    if file && std::fs::symlink_metadata(dst).is_ok() {
        return Ok(());
    }
    if file {
        match std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(dst)
        {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(e),
        }
    } else {
        std::fs::create_dir_all(dst)
    }
}

const OLD: &str = "/oldroot";

/// An empty read-only tmpfs that directory masks inside the workspace are
/// copied from, removed once the mounts are made.
const MASK_DIR: &str = "/.maskdir";

fn old(p: &Path) -> PathBuf {
    Path::new(OLD).join(p.strip_prefix("/").unwrap_or(p))
}

type StepResult<T = ()> = Result<T, (String, std::io::Error)>;

fn step<T>(name: impl Into<String>, r: std::io::Result<T>) -> Result<T, (String, std::io::Error)> {
    r.map_err(|e| (name.into(), e))
}

/// tmpfs root, pivot, then every mount of the plan, then drop the old root.
/// The directories of each overlay mount (lower, upper, work), opened as
/// `O_PATH` descriptors by init before it becomes the sandbox's user, in plan
/// order. The mount names them as `/proc/self/fd/N`, a link the kernel follows
/// to the directory itself without searching the path to it again: as root,
/// for a workspace owned by someone else, the capture sits in root's state
/// directory, which that owner (now init's user) cannot traverse.
struct OverlayDirs {
    dirs: Vec<[OwnedFd; 3]>,
    /// init's `/proc/self/fd` (the host's procfs), through which init's
    /// helper, which makes the overlays, names these descriptors: relative to
    /// it, whether init has already pivoted or not.
    fd_dir: Option<OwnedFd>,
}

impl OverlayDirs {
    fn open(plan: &Plan) -> StepResult<OverlayDirs> {
        let open = |p: &Path| -> StepResult<OwnedFd> {
            crate::workspace::beneath::Dir::root(p)
                .map(|d| d.into_fd())
                .map_err(|e| (format!("open {} for the overlay", p.display()), e))
        };
        // The lower layer is reached from the workspace without following a
        // symlink: another run there cannot have it show a directory elsewhere.
        let lower = |dst: &Path| -> StepResult<OwnedFd> {
            let step = || format!("open {} for the overlay", dst.display());
            let rel = dst
                .strip_prefix(&plan.workspace)
                .map_err(|_| (step(), std::io::Error::other("not inside the workspace")))?;
            crate::workspace::beneath::Dir::root(&plan.workspace)
                .and_then(|ws| ws.dir(rel))
                .map(|d| d.into_fd())
                .map_err(|e| (step(), e))
        };
        let mut dirs = Vec::new();
        for m in &plan.mounts {
            if let Mount::Overlay { dst, upper, work } = m {
                dirs.push([lower(dst)?, open(upper)?, open(work)?]);
            }
        }
        Ok(OverlayDirs { dirs, fd_dir: None })
    }

    /// Opens `fd_dir`, once init is the sandbox's user and dumpable again:
    /// procfs gives a process's `fd` directory the owner it has when looked
    /// up, and the helper (that same user) must be able to enter it.
    fn open_fd_dir(&mut self) -> StepResult {
        if self.dirs.is_empty() {
            return Ok(());
        }
        let fd = crate::workspace::beneath::Dir::root(Path::new("/proc/self/fd"))
            .map_err(|e| ("open /proc/self/fd for the overlay".to_string(), e))?;
        self.fd_dir = Some(fd.into_fd());
        Ok(())
    }
}

/// fsopen/fsconfig/fsmount: an overlay as a detached mount, which init then
/// moves into place. Made by init's helper while init mounts the rest: the
/// kernel checks the upper filesystem's features on every overlay mount
/// (about 0.35 ms here). The layers are named relative to the helper's
/// working directory, init's `/proc/self/fd`.
fn make_overlay_mount(dirs: &[OwnedFd; 3]) -> std::io::Result<OwnedFd> {
    const FSOPEN_CLOEXEC: libc::c_uint = 1;
    const FSCONFIG_SET_FLAG: libc::c_uint = 0;
    const FSCONFIG_SET_STRING: libc::c_uint = 1;
    const FSCONFIG_CMD_CREATE: libc::c_uint = 6;
    const FSMOUNT_CLOEXEC: libc::c_uint = 1;
    let name = cstr("overlay");
    // SAFETY: fsopen with a NUL-terminated name; the descriptor is owned below.
    let fs = unsafe { libc::syscall(libc::SYS_fsopen, name.as_ptr(), FSOPEN_CLOEXEC) };
    if fs < 0 {
        return Err(errno());
    }
    // SAFETY: a fresh descriptor nobody else owns.
    let fs = unsafe { OwnedFd::from_raw_fd(fs as RawFd) };
    // The kernel says why a configuration fails in the context's log.
    let explain = |e: std::io::Error| {
        let mut buf = [0u8; 512];
        // SAFETY: read into a local buffer of the size given.
        let n = unsafe { libc::read(fs.as_raw_fd(), buf.as_mut_ptr() as *mut libc::c_void, buf.len()) };
        match n {
            n if n > 0 => std::io::Error::new(
                e.kind(),
                format!("{e}: {}", String::from_utf8_lossy(&buf[..n as usize]).trim()),
            ),
            _ => e,
        }
    };
    let config = |cmd: libc::c_uint, key: Option<&str>, value: Option<String>| -> std::io::Result<()> {
        let key = key.map(cstr);
        let value = value.map(cstr);
        // SAFETY: fsconfig on our context with NUL-terminated strings (or
        // NULL where the command takes none) that outlive the call.
        let r = unsafe {
            libc::syscall(
                libc::SYS_fsconfig,
                fs.as_raw_fd(),
                cmd,
                key.as_ref().map_or(std::ptr::null(), |k| k.as_ptr()),
                value.as_ref().map_or(std::ptr::null(), |v| v.as_ptr()),
                0,
            )
        };
        if r == 0 {
            Ok(())
        } else {
            Err(explain(errno()))
        }
    };
    let [lower, upper, work] = dirs;
    config(
        FSCONFIG_SET_STRING,
        Some("lowerdir"),
        Some(lower.as_raw_fd().to_string()),
    )?;
    config(
        FSCONFIG_SET_STRING,
        Some("upperdir"),
        Some(upper.as_raw_fd().to_string()),
    )?;
    config(FSCONFIG_SET_STRING, Some("workdir"), Some(work.as_raw_fd().to_string()))?;
    config(FSCONFIG_SET_FLAG, Some("userxattr"), None)?;
    config(FSCONFIG_CMD_CREATE, None, None)?;
    // SAFETY: fsmount of our configured context; the descriptor is owned below.
    let m = unsafe {
        libc::syscall(
            libc::SYS_fsmount,
            fs.as_raw_fd(),
            FSMOUNT_CLOEXEC,
            (MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV) as libc::c_uint,
        )
    };
    if m < 0 {
        return Err(explain(errno()));
    }
    // SAFETY: a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(m as RawFd) })
}

fn build_filesystem(plan: &Plan, helper: &mut Helper, err: &OwnedFd) -> StepResult {
    let base = Path::new("/tmp");
    step(
        "make the host's mounts private",
        mount_raw(None, Path::new("/"), None, libc::MS_REC | libc::MS_PRIVATE, None),
    )?;
    step("mount the root tmpfs", mount_tmpfs(base, 0, "mode=0755,size=16m"))?;
    step("create /oldroot", std::fs::create_dir(base.join("oldroot")))?;
    let (newroot, put_old) = (path_c(base), path_c(&base.join("oldroot")));
    // SAFETY: pivot_root with two valid paths: the tmpfs mount and a directory in it.
    if unsafe { libc::syscall(libc::SYS_pivot_root, newroot.as_ptr(), put_old.as_ptr()) } != 0 {
        return Err(("pivot_root".into(), errno()));
    }
    step("chdir /", std::env::set_current_dir("/"))?;
    // An empty file to bind over masked files.
    step("create the mask file", std::fs::File::create("/.mask"))?;
    step(
        "chmod the mask file",
        std::fs::set_permissions("/.mask", std::os::unix::fs::PermissionsExt::from_mode(0o000)),
    )?;

    pause_for_a_test("before-mounts");
    let mut overlays = || helper.take_overlay(err);
    for m in &plan.mounts {
        let ws = Workspace {
            path: &plan.workspace,
            identities: &plan.workspace_identities,
        };
        apply_mount(m, &ws, &mut overlays)?;
    }
    // The empty directory masked directories were copied from (see
    // `Mount::MaskDir`): its copies stay, it goes.
    if std::fs::symlink_metadata(MASK_DIR).is_ok() {
        // SAFETY: umount2 of a tmpfs we mounted, by a NUL-terminated path.
        if unsafe { libc::umount2(path_c(Path::new(MASK_DIR)).as_ptr(), libc::MNT_DETACH) } != 0 {
            return Err(("unmount the directory mask".into(), errno()));
        }
        step("remove the directory mask", std::fs::remove_dir(MASK_DIR))?;
    }
    Ok(())
}

/// Test hook (debug builds only): at the named point of init's setup, wait
/// while the file TETHER_EXEC_TEST_PAUSE_FILE exists (made here; reached
/// through the host's root, still at `/oldroot`), so that a test can change
/// the workspace meanwhile, as another sandbox running there could.
fn pause_for_a_test(name: &str) {
    if !cfg!(debug_assertions) || !std::env::var("TETHER_EXEC_TEST_PAUSE_AT").is_ok_and(|v| v == name) {
        return;
    }
    let Some(f) = std::env::var_os("TETHER_EXEC_TEST_PAUSE_FILE").map(|f| old(Path::new(&f))) else {
        return;
    };
    let _ = std::fs::write(&f, b"");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while f.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

/// After the helper was told to detach the old root: waits until it is out of
/// the mount tree, then makes the new root read-only.
fn finish_filesystem(plan: &Plan, helper: &Helper, err: &OwnedFd) -> StepResult {
    loop {
        match std::fs::remove_dir(OLD) {
            Ok(()) => break,
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                if let Some(status) = helper.ended() {
                    helper.failed(err, "detach the host's root", Some(status));
                }
                // SAFETY: sched_yield has no arguments.
                unsafe { libc::sched_yield() };
            }
            Err(e) => return Err(("remove /oldroot".into(), e)),
        }
    }
    let _ = std::fs::remove_file("/.mask");
    step(
        "make / read-only",
        mount_raw(
            None,
            Path::new("/"),
            None,
            libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV,
            None,
        ),
    )?;
    step("chdir to the working directory", std::env::set_current_dir(&plan.cwd))?;
    Ok(())
}

/// The kernel's `struct open_how` (libc's is non-exhaustive).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// An `O_PATH` descriptor of `p`, resolved with no symlink on the way.
///
/// A path inside the workspace can change under us: another sandbox running
/// in the same workspace can swap a directory for a symlink between the plan
/// and the mount, and a mount by path would follow it (a writable tree bound
/// from the host's `/tmp`, a read-only mount landing beside what it
/// protects). Mounted through this descriptor, the mount lands on what was
/// checked, or fails.
fn open_no_symlinks(p: &Path) -> std::io::Result<OwnedFd> {
    openat2(None, p, libc::RESOLVE_NO_SYMLINKS)
}

/// [`open_no_symlinks`], except that a symlink inside `root` is followed
/// while it stays inside (a `.git` that is a symlink to the repository is a
/// layout the plan supports); one that leads out is refused (`EXDEV`).
fn open_within(root: &Path, p: &Path) -> std::io::Result<OwnedFd> {
    match open_no_symlinks(p) {
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            let rel = p.strip_prefix(root).map_err(|_| e)?;
            let top = open_no_symlinks(root)?;
            openat2(Some(&top), rel, libc::RESOLVE_BENEATH)
        }
        r => r,
    }
}

/// openat2 to an `O_PATH` descriptor, from `at` (or the working directory),
/// never through a magic link, with the `resolve` flags given.
fn openat2(at: Option<&OwnedFd>, p: &Path, resolve: u64) -> std::io::Result<OwnedFd> {
    let path = path_c(p);
    let how = OpenHow {
        flags: (libc::O_PATH | libc::O_CLOEXEC | libc::O_NOFOLLOW) as u64,
        mode: 0,
        resolve: resolve | libc::RESOLVE_NO_MAGICLINKS,
    };
    // SAFETY: openat2 with a descriptor we own (or AT_FDCWD), a NUL-terminated
    // path and an open_how of the size passed; the descriptor is owned below.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            at.map_or(libc::AT_FDCWD, |d| d.as_raw_fd()),
            path.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if fd < 0 {
        return Err(errno());
    }
    // SAFETY: a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// A detached copy of the mount tree at `at` (with what is mounted below it
/// when `recursive`), with `set` applied to all of it.
fn clone_tree(at: &OwnedFd, recursive: bool, set: u64) -> std::io::Result<OwnedFd> {
    const OPEN_TREE_CLONE: libc::c_uint = 1;
    let empty = cstr("");
    let flags = OPEN_TREE_CLONE
        | libc::O_CLOEXEC as libc::c_uint
        | libc::AT_EMPTY_PATH as libc::c_uint
        | if recursive { AT_RECURSIVE } else { 0 };
    // SAFETY: open_tree on a descriptor we own, the empty path naming it; the
    // new descriptor is owned below.
    let fd = unsafe { libc::syscall(libc::SYS_open_tree, at.as_raw_fd(), empty.as_ptr(), flags) };
    if fd < 0 {
        return Err(errno());
    }
    // SAFETY: a fresh descriptor nobody else owns.
    let tree = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
    mount_setattr(tree.as_raw_fd(), &empty, libc::AT_EMPTY_PATH as u32 | AT_RECURSIVE, set)?;
    Ok(tree)
}

/// Attaches the detached mount `tree` onto what `onto` names.
fn attach(tree: &OwnedFd, onto: &OwnedFd) -> std::io::Result<()> {
    const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 4;
    const MOVE_MOUNT_T_EMPTY_PATH: libc::c_uint = 0x40;
    let empty = cstr("");
    // SAFETY: move_mount of a detached mount we own onto a descriptor we own;
    // both empty paths name the descriptors themselves.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            empty.as_ptr(),
            onto.as_raw_fd(),
            empty.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(errno())
    }
}

/// What init knows of the workspace: where it is, and the (device, inode)
/// the plan found at each path it mounts on there.
struct Workspace<'a> {
    path: &'a Path,
    identities: &'a [(PathBuf, (u64, u64))],
}

impl Workspace<'_> {
    /// [`open_within`] the workspace (`under` it: as init sees it, or as
    /// the host's under the old root), and still what the plan found at
    /// `planned`: renamed or replaced meanwhile, it is refused.
    fn open(&self, p: &Path, planned: &Path) -> std::io::Result<OwnedFd> {
        let root = if p.starts_with(old(self.path)) {
            old(self.path)
        } else {
            self.path.to_path_buf()
        };
        let fd = open_within(&root, p)?;
        if let Some((_, want)) = self.identities.iter().find(|(q, _)| q == planned) {
            // Another file of the workspace's filesystem: renamed or replaced.
            // (One on another device is behind a mount of the sandbox's own,
            // a git directory's overlay, which init made and checked itself.)
            let m = nix::sys::stat::fstat(&fd).map_err(std::io::Error::from)?;
            if m.st_dev == want.0 && m.st_ino != want.1 {
                return Err(std::io::Error::other(
                    "it changed since the sandbox was planned (renamed or replaced, by another run in this workspace?); run again",
                ));
            }
        }
        Ok(fd)
    }
}

/// A mount onto a path inside the workspace (not the workspace itself):
/// through descriptors resolved without leaving it, see [`open_no_symlinks`]
/// and [`open_within`], onto what the plan found there. `source`: the tree to
/// copy (`None`: `dst`'s own); one under the host's workspace (the old root)
/// stays inside that.
fn mount_in_workspace(
    ws: &Workspace,
    source: Option<(&Path, &Path)>,
    dst: &Path,
    recursive: bool,
    set: u64,
) -> std::io::Result<()> {
    let onto = ws.open(dst, dst)?;
    let tree = match source {
        Some((s, planned)) if s.starts_with(old(ws.path)) => clone_tree(&ws.open(s, planned)?, recursive, set)?,
        Some((s, _)) => clone_tree(&open_no_symlinks(s)?, recursive, set)?,
        // Onto itself: one descriptor serves both.
        None => clone_tree(&onto, recursive, set)?,
    };
    attach(&tree, &onto)
}

/// `overlays` gives the next overlay mount the helper made (in plan order).
/// `workspace`: mounts on paths below it go through descriptors.
fn apply_mount(m: &Mount, ws: &Workspace, overlays: &mut dyn FnMut() -> std::io::Result<OwnedFd>) -> StepResult {
    let inside = |p: &Path| p.starts_with(ws.path) && p != ws.path;
    match m {
        Mount::Tmpfs { dst, mode, size_mb } => {
            let name = format!("tmpfs {}", dst.display());
            step(&name, make_mountpoint(dst, false))?;
            step(&name, mount_tmpfs(dst, 0, &format!("mode={mode:o},size={size_mb}m")))
        }
        Mount::Bind { src, dst, writable } => {
            let name = format!(
                "bind {} {}",
                src.display(),
                if *writable { "read-write" } else { "read-only" }
            );
            let source = old(src);
            let mut attrs = MOUNT_ATTR_NOSUID;
            if !*writable {
                attrs |= MOUNT_ATTR_RDONLY;
            }
            if !dst.starts_with("/dev") {
                attrs |= MOUNT_ATTR_NODEV;
            }
            if inside(dst) {
                return step(&name, mount_in_workspace(ws, Some((&source, src)), dst, true, attrs));
            }
            if dst.starts_with("/dev") {
                // The host's device nodes, in root's own /dev: by path.
                let meta = step(&name, std::fs::metadata(&source))?;
                step(&name, make_mountpoint(dst, !meta.is_dir()))?;
                step(
                    &name,
                    mount_raw(Some(&source), dst, None, libc::MS_BIND | libc::MS_REC, None),
                )?;
                return step(&name, set_attrs(dst, attrs));
            }
            // The plan resolved every link of the source on the host: one on
            // its way now was put there since (by a run in another workspace
            // on that path, say), and is refused rather than followed.
            let link_since = || {
                std::io::Error::other(
                    "a symlink is on its way now, which was not there when the sandbox was planned (replaced since?); run again",
                )
            };
            let from = step(
                &name,
                open_no_symlinks(&source).map_err(|e| match e.raw_os_error() {
                    Some(libc::ELOOP) => link_since(),
                    _ => e,
                }),
            )?;
            // A link as the last name opens as itself (O_PATH, O_NOFOLLOW).
            let kind = step(&name, nix::sys::stat::fstat(&from).map_err(std::io::Error::from))?.st_mode & libc::S_IFMT;
            if kind == libc::S_IFLNK {
                return Err((name, link_since()));
            }
            let is_dir = kind == libc::S_IFDIR;
            step(&name, make_mountpoint(dst, !is_dir))?;
            let tree = step(&name, clone_tree(&from, true, attrs))?;
            let onto = step(&name, open_no_symlinks(dst))?;
            step(&name, attach(&tree, &onto))
        }
        Mount::Proc { dst } => {
            step("mount /proc", make_mountpoint(dst, false))?;
            step(
                "mount /proc",
                mount_raw(
                    Some(Path::new("proc")),
                    dst,
                    Some("proc"),
                    libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                    None,
                ),
            )
        }
        Mount::Symlink { target, dst } => {
            let name = format!("symlink {}", dst.display());
            if let Some(parent) = dst.parent() {
                step(&name, std::fs::create_dir_all(parent))?;
            }
            step(&name, std::os::unix::fs::symlink(target, dst))
        }
        Mount::MaskFile { dst } if inside(dst) => {
            let name = format!("hide {}", dst.display());
            let mask = step(&name, open_no_symlinks(Path::new("/.mask")))?;
            let onto = step(&name, ws.open(dst, dst))?;
            let tree = step(
                &name,
                clone_tree(&mask, false, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV),
            )?;
            step(&name, attach(&tree, &onto))
        }
        Mount::MaskFile { dst } => {
            let name = format!("hide {}", dst.display());
            step(
                &name,
                mount_raw(Some(Path::new("/.mask")), dst, None, libc::MS_BIND, None),
            )?;
            step(
                &name,
                set_attrs(dst, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV),
            )
        }
        Mount::MaskDir { dst } if inside(dst) => {
            // An empty read-only directory over it, copied from one tmpfs
            // made for all of them (removed once the mounts are made).
            let name = format!("hide {}", dst.display());
            let empty = Path::new(MASK_DIR);
            if std::fs::symlink_metadata(empty).is_err() {
                step(&name, make_mountpoint(empty, false))?;
                step(&name, mount_tmpfs(empty, libc::MS_RDONLY, "mode=0,size=4k"))?;
            }
            step(
                &name,
                mount_in_workspace(
                    ws,
                    Some((empty, empty)),
                    dst,
                    false,
                    MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                ),
            )
        }
        Mount::MaskDir { dst } => step(
            format!("hide {}", dst.display()),
            mount_tmpfs(dst, libc::MS_RDONLY, "mode=0,size=4k"),
        ),
        Mount::Overlay { dst, .. } => {
            let name = format!("overlay {}", dst.display());
            let mnt = step(&name, overlays())?;
            if inside(dst) {
                let onto = step(&name, ws.open(dst, dst))?;
                return step(&name, attach(&mnt, &onto));
            }
            step(&name, make_mountpoint(dst, false))?;
            let p = path_c(dst);
            let empty = cstr("");
            const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 4;
            // SAFETY: move_mount of a detached mount we own onto a valid
            // NUL-terminated path; the empty path names the descriptor itself.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_move_mount,
                    mnt.as_raw_fd(),
                    empty.as_ptr(),
                    libc::AT_FDCWD,
                    p.as_ptr(),
                    MOVE_MOUNT_F_EMPTY_PATH,
                )
            };
            step(&name, if r == 0 { Ok(()) } else { Err(errno()) })
        }
        Mount::Pin { dst } if inside(dst) => step(
            format!("pin {}", dst.display()),
            mount_in_workspace(ws, None, dst, true, 0),
        ),
        Mount::Pin { dst } => step(
            format!("pin {}", dst.display()),
            mount_raw(Some(dst), dst, None, libc::MS_BIND | libc::MS_REC, None),
        ),
        Mount::ReadOnly { dst } if inside(dst) => step(
            format!("protect {}", dst.display()),
            mount_in_workspace(
                ws,
                None,
                dst,
                true,
                MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
            ),
        ),
        Mount::ReadOnly { dst } => {
            let name = format!("protect {}", dst.display());
            // Of procfs, only what this kernel has (no `bus` without PCI).
            if dst.starts_with("/proc")
                && std::fs::symlink_metadata(dst).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
            {
                return Ok(());
            }
            step(
                &name,
                mount_raw(Some(dst), dst, None, libc::MS_BIND | libc::MS_REC, None),
            )?;
            step(
                &name,
                set_attrs(dst, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV),
            )
        }
    }
}

fn loopback_up() -> std::io::Result<()> {
    // SAFETY: a datagram socket used only for interface ioctls, closed below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(errno());
    }
    // SAFETY: ifreq is plain data; we set the name "lo" and read/write flags.
    let r = unsafe {
        let mut req: libc::ifreq = std::mem::zeroed();
        for (i, b) in b"lo".iter().enumerate() {
            req.ifr_name[i] = *b as libc::c_char;
        }
        let mut r = libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut req);
        if r == 0 {
            req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
            r = libc::ioctl(fd, libc::SIOCSIFFLAGS, &req);
        }
        r
    };
    let e = errno();
    // SAFETY: closing the socket we opened.
    unsafe { libc::close(fd) };
    if r == 0 {
        Ok(())
    } else {
        Err(e)
    }
}

/// The CPUs the sandbox's own processes run on while it builds itself.
///
/// The launcher, init and init's helper work at once (see `Helper`), but a
/// scheduler that packs new processes onto busy CPUs (a virtual machine's,
/// to let the others idle) starts init on the launcher's CPU, where it waits
/// until the launcher blocks: most of the launcher's work after the clone
/// (the capture, the audit record, the protected paths' snapshot) is then on
/// the run's path again. So init runs on the other CPUs, and its helper, made
/// once the launcher has little left to do, on the launcher's, as the
/// command does when it starts (init still has work then, the launcher
/// none); the command, and init once it has forked it, get every CPU back.
/// Only when this process may use more than one CPU.
struct Cpus {
    /// Every CPU this process may use, as `Cpus_allowed` in its status says
    /// (offline ones too, which `sched_getaffinity` leaves out): the command's.
    all: libc::cpu_set_t,
    /// The launcher's CPU when it cloned init: the helper's.
    launchers: libc::cpu_set_t,
    /// The others: init's.
    others: libc::cpu_set_t,
}

impl Cpus {
    fn apart() -> Option<Cpus> {
        // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity
        // writes at most its size; sched_getcpu has no arguments; CPU_* work
        // on local sets.
        unsafe {
            let mut all: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut all) != 0 {
                return None;
            }
            let here = usize::try_from(libc::sched_getcpu()).ok()?;
            if !libc::CPU_ISSET(here, &all) || libc::CPU_COUNT(&all) < 2 {
                return None;
            }
            let mut launchers: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(here, &mut launchers);
            let mut others = all;
            libc::CPU_CLR(here, &mut others);
            let all = allowed_cpus()?;
            Some(Cpus { all, launchers, others })
        }
    }

    /// A hint to the scheduler: a failure changes where `pid` runs, nothing
    /// else (but see `command`: the command's own call is the last).
    fn set(&self, pid: libc::pid_t, cpus: &libc::cpu_set_t) {
        // SAFETY: sched_setaffinity of ourselves or a child with a set in memory.
        unsafe { libc::sched_setaffinity(pid, std::mem::size_of::<libc::cpu_set_t>(), cpus) };
    }
}

/// This process's CPU mask as the kernel keeps it (`Cpus_allowed:` in
/// `/proc/self/status`: hexadecimal words of 32 CPUs, the highest first).
fn allowed_cpus() -> Option<libc::cpu_set_t> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    cpu_mask(status.lines().find_map(|l| l.strip_prefix("Cpus_allowed:"))?.trim())
}

/// A CPU mask as procfs writes it (`ff,00000001`: CPUs 0 and 32 to 39); `None`
/// if it does not read as one, or names no CPU.
fn cpu_mask(hex: &str) -> Option<libc::cpu_set_t> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET on a local set
    // for CPUs below its size only.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let size = 8 * std::mem::size_of::<libc::cpu_set_t>();
    for (i, word) in hex.rsplit(',').enumerate() {
        let bits = u32::from_str_radix(word, 16).ok()?;
        for b in 0..32 {
            let cpu = 32 * i + b;
            if bits & (1 << b) != 0 {
                // More CPUs than a set holds: no placing at all, rather
                // than a command given fewer.
                if cpu >= size {
                    return None;
                }
                unsafe { libc::CPU_SET(cpu, &mut set) };
            }
        }
    }
    (unsafe { libc::CPU_COUNT(&set) } > 0).then_some(set)
}

/// The command process: final confinement, then execve. Never returns.
fn command(plan: &Plan, prep: &Prepared, err: &OwnedFd, io: ChildIo, ready: OwnedFd, guard: Option<OwnedFd>) -> ! {
    // Back to default signal handling and an empty mask: init blocks the
    // signals it forwards, and the Rust runtime ignores SIGPIPE, which an
    // exec would keep (`yes | head -1` must end `yes` by SIGPIPE, as outside).
    // SAFETY: setsid in a fresh child; signal with SIG_DFL; sigprocmask with
    // a zeroed set.
    unsafe {
        if libc::setsid() < 0 {
            fail(err, "setsid", errno(), 125);
        }
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
    }
    if let Some(fd) = io.stdin {
        // SAFETY: dup2 of an fd we own onto 0.
        if unsafe { libc::dup2(fd.as_raw_fd(), 0) } < 0 {
            fail(err, "stdin", errno(), 125);
        }
    }
    if let Some((out, errf)) = io.output {
        // SAFETY: dup2 of fds we own onto 1 and 2.
        if unsafe { libc::dup2(out.as_raw_fd(), 1) } < 0 || unsafe { libc::dup2(errf.as_raw_fd(), 2) } < 0 {
            fail(err, "capture output", errno(), 125);
        }
    }
    for r in &plan.rlimits {
        let res = match r.resource {
            RlimitKind::Cpu => libc::RLIMIT_CPU,
            RlimitKind::AddressSpace => libc::RLIMIT_AS,
            RlimitKind::Processes => libc::RLIMIT_NPROC,
            RlimitKind::FileSize => libc::RLIMIT_FSIZE,
            RlimitKind::OpenFiles => libc::RLIMIT_NOFILE,
            RlimitKind::Core => libc::RLIMIT_CORE,
        };
        let lim = libc::rlimit {
            rlim_cur: r.value,
            rlim_max: r.hard,
        };
        // SAFETY: setrlimit with a valid rlimit struct.
        if unsafe { libc::setrlimit(res, &lim) } != 0 {
            fail(err, &format!("set rlimit {:?}", r.resource), errno(), 125);
        }
    }
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        fail(err, "no_new_privs", errno(), 125);
    }
    if let Err(e) = drop_capabilities() {
        fail(err, "drop capabilities", e, 125);
    }
    // Inherited descriptors other than 0, 1, 2 close at exec (the error pipe too).
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC only sets flags.
    if unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, CLOSE_RANGE_CLOEXEC) } != 0 {
        fail(err, "close inherited descriptors", errno(), 125);
    }
    // Landlock: init's domain, inherited (see `init`).
    for f in &prep.seccomp {
        match load_filter(f, guard.is_some()) {
            Ok(Some(listener)) => {
                let sent = guard
                    .as_ref()
                    .map(|g| guard::send_fd(g.as_raw_fd(), listener.as_raw_fd()));
                if let Some(Err(e)) = sent {
                    fail(err, "hand the seccomp listener to the create guard", e, 125);
                }
            }
            Ok(None) => {}
            Err(e) => fail(err, "seccomp", e, 125),
        }
    }
    drop(guard);
    // Fully confined; start only once init has finished the namespaces and
    // on the launcher's go. EOF on either (a failed step, the launcher's work
    // before exec failed, or it died) means never.
    for fd in [ready, io.go] {
        let mut byte = [0u8; 1];
        if std::fs::File::from(fd).read_exact(&mut byte).is_err() {
            // SAFETY: exiting the copied process without destructors.
            unsafe { libc::_exit(125) };
        }
    }
    // Every CPU the launcher may use, as outside (see `Cpus`). After
    // `ready`, which init writes only once it has placed this process: the
    // last word on where the command runs is this one.
    if let Some(c) = &prep.cpus {
        c.set(0, &c.all);
    }
    exec(plan, prep, err)
}

/// Loads a seccomp program on this process (no_new_privs is set already).
/// With `listener`, its user notifications go to the descriptor returned.
fn load_filter(prog: &seccompiler::BpfProgram, listener: bool) -> std::io::Result<Option<OwnedFd>> {
    let fprog = libc::sock_fprog {
        len: prog.len() as libc::c_ushort,
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    let flags = if listener {
        libc::SECCOMP_FILTER_FLAG_NEW_LISTENER
    } else {
        0
    };
    // SAFETY: seccomp(SET_MODE_FILTER) with a sock_fprog pointing at the
    // program, which outlives the call (the kernel copies it).
    let r = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            flags,
            &fprog as *const libc::sock_fprog,
        )
    };
    if r < 0 {
        return Err(errno());
    }
    // SAFETY: with NEW_LISTENER the kernel returned a new descriptor we own.
    Ok(listener.then(|| unsafe { OwnedFd::from_raw_fd(r as RawFd) }))
}

/// Empties the capability bounding set of init, which every process of the
/// sandbox inherits (see `init`).
fn drop_bounding_set() -> Result<(), caps::errors::CapsError> {
    for c in caps::all() {
        caps::drop(None, caps::CapSet::Bounding, c)?;
    }
    Ok(())
}

/// The command's other capability sets; its bounding set is empty already
/// (init's, inherited: see `drop_bounding_set`).
fn drop_capabilities() -> Result<(), caps::errors::CapsError> {
    use caps::CapSet;
    caps::clear(None, CapSet::Ambient)?;
    caps::clear(None, CapSet::Inheritable)?;
    caps::clear(None, CapSet::Effective)?;
    caps::clear(None, CapSet::Permitted)?;
    Ok(())
}

fn landlock(plan: &Plan) -> Result<(), String> {
    use landlock::{
        Access as _, AccessFs, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr,
        Scope, ABI,
    };
    let abi = ABI::from(i32::from(plan.landlock.abi));
    let all = AccessFs::from_all(abi);
    let read = AccessFs::from_read(abi);
    let mut rw_file = AccessFs::ReadFile | AccessFs::WriteFile;
    if plan.landlock.abi >= 3 {
        rw_file |= AccessFs::Truncate;
    }
    if plan.landlock.abi >= 5 {
        rw_file |= AccessFs::IoctlDev;
    }
    // Hard requirement: the plan chose the ABI the kernel reported; anything
    // less enforced is an error, never a silent downgrade.
    let e = |e: landlock::RulesetError| e.to_string();
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(all)
        .map_err(e)?;
    if plan.landlock.scoped {
        ruleset = ruleset.scope(Scope::from_all(abi)).map_err(e)?;
    }
    let mut created = ruleset.create().map_err(e)?;
    for (path, access) in &plan.landlock.rules {
        let rights = match access {
            Access::Read => read,
            Access::ReadWrite => all,
            Access::ReadWriteFile => rw_file,
        };
        let fd = PathFd::new(path).map_err(|x| format!("{}: {x}", path.display()))?;
        created = created.add_rule(PathBeneath::new(fd, rights)).map_err(e)?;
    }
    let status = created.restrict_self().map_err(e)?;
    if status.ruleset != landlock::RulesetStatus::FullyEnforced {
        return Err(format!(
            "the kernel enforced Landlock only partially ({:?})",
            status.ruleset
        ));
    }
    Ok(())
}

fn exec(plan: &Plan, prep: &Prepared, err: &OwnedFd) -> ! {
    let mut argv: Vec<*const libc::c_char> = prep.argv.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut envp: Vec<*const libc::c_char> = prep.envp.iter().map(|a| a.as_ptr()).collect();
    envp.push(std::ptr::null());
    let prog = &plan.argv[0];
    let candidates: Vec<PathBuf> = if prog.contains('/') {
        vec![PathBuf::from(prog)]
    } else {
        plan.path.iter().map(|d| Path::new(d).join(prog)).collect()
    };
    let mut last = libc::ENOENT;
    for c in candidates {
        let p = path_c(&c);
        // SAFETY: execve with NUL-terminated argv/envp arrays of valid C strings.
        unsafe { libc::execve(p.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
        let e = errno().raw_os_error().unwrap_or(libc::ENOENT);
        if e != libc::ENOENT && e != libc::ENOTDIR {
            last = e;
        }
    }
    let (code, what) = if last == libc::ENOENT {
        (127, "command not found")
    } else {
        (126, "cannot execute")
    };
    let reason = format!("{prog}: {what} ({})", std::io::Error::from_raw_os_error(last));
    fail(err, &format!("exec:{code}"), reason, code)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CPUs a set holds.
    fn listed(set: &libc::cpu_set_t) -> Vec<usize> {
        // SAFETY: CPU_ISSET reads a local set, below its size.
        (0..8 * std::mem::size_of::<libc::cpu_set_t>())
            .filter(|&c| unsafe { libc::CPU_ISSET(c, set) })
            .collect()
    }

    #[test]
    fn cpu_masks_read_as_procfs_writes_them() {
        let cpus = |hex: &str| cpu_mask(hex).map(|s| listed(&s));
        assert_eq!(cpus("3"), Some(vec![0, 1]));
        let mut high: Vec<usize> = vec![0];
        high.extend(32..40);
        assert_eq!(cpus("ff,00000001"), Some(high));
        assert_eq!(cpus("00000000"), None);
        assert_eq!(cpus("zz"), None);
        // This process's own mask, as the kernel keeps it, holds every CPU
        // it may run on now.
        let own = listed(&allowed_cpus().expect("Cpus_allowed in /proc/self/status"));
        // SAFETY: a zeroed set for sched_getaffinity to fill, of its size.
        let mut online: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        assert_eq!(
            unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut online) },
            0
        );
        assert!(listed(&online).iter().all(|c| own.contains(c)), "{own:?}");
    }
}
