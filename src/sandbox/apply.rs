//! Applying a [`Plan`]: the only place with namespace, mount, Landlock and
//! seccomp system calls.
//!
//! Process layout:
//!
//! ```text
//! tether-exec (host)            waits on a pidfd, enforces the timeout, forwards signals
//!   └─ clone3(NEWUSER|NEWNS|NEWPID|NEWNET|NEWIPC|NEWUTS)
//!        init, pid 1            builds the filesystem, reaps, forwards signals;
//!                               dies with tether-exec (PDEATHSIG), and when it
//!                               exits the kernel kills everything in the namespace
//!          └─ fork: command     setsid, no_new_privs, caps dropped, fds closed,
//!                               rlimits, Landlock, seccomp (last), execve
//! ```
//!
//! Every setup step that fails is reported through a close-on-exec pipe as
//! `step\treason`, and nothing runs: there is no fallback to less isolation.
//!
//! Code after `clone3` and `fork` runs in a copy of this process. tether-exec is
//! single-threaded when it spawns (nothing in it starts threads before this
//! point), so the copy can allocate and use the Rust runtime like after a plain
//! `fork()` in a single-threaded program.

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

#[derive(Debug, Clone)]
pub struct Outcome {
    pub ended: Ended,
    pub duration: Duration,
    /// What `exec` said when it failed (for 126/127).
    pub exec_error: Option<String>,
}

/// Whether overlayfs marked this upper-layer directory opaque (removed and
/// made again in the run), from its `user.overlay.opaque` attribute.
pub fn overlay_opaque(p: &Path) -> bool {
    let c = path_c(p);
    let name = c"user.overlay.opaque";
    let mut buf = [0u8; 4];
    // SAFETY: lgetxattr with valid NUL-terminated strings and a buffer of the size given.
    let n = unsafe {
        libc::lgetxattr(
            c.as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr() as *mut libc::c_void,
            buf.len(),
        )
    };
    n == 1 && buf[0] == b'y'
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
}

/// Run the plan: returns when the command (and with it the whole sandbox) has ended.
/// `stdin` replaces the inherited standard input when given (a held action's stored input).
/// `output` sends the command's stdout and stderr to these files instead of
/// the launcher's own (a preview records them).
pub fn run(
    plan: &Plan,
    stdin: Option<&[u8]>,
    output: Option<(&std::fs::File, &std::fs::File)>,
) -> Result<Outcome, ApplyError> {
    let output = match output {
        Some((o, e)) => Some((
            o.try_clone().map_err(|x| setup("capture output", x))?.into(),
            e.try_clone().map_err(|x| setup("capture output", x))?.into(),
        )),
        None => None,
    };
    let prepared = Prepared {
        argv: plan.argv.iter().map(cstr).collect(),
        envp: plan.env.iter().map(|(k, v)| cstr(format!("{k}={v}"))).collect(),
        seccomp: super::seccomp::filters().map_err(|e| setup("seccomp filter", e))?,
    };
    let stdin_fd = match stdin {
        Some(data) => Some(memfd_with(data)?),
        None => None,
    };
    let (sync_r, sync_w) = pipe()?;
    let (err_r, err_w) = pipe()?;

    let mut flags =
        (libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS) as u64;
    if !plan.host_network {
        flags |= libc::CLONE_NEWNET as u64;
    }
    flags |= libc::CLONE_PIDFD as u64;
    // As root the sandbox's processes belong to host uid 0, which the kernel
    // exempts from RLIMIT_NPROC: a pids cgroup bounds them instead. It is
    // entered without migrating anyone (see `PidsCgroup`).
    let cgroup = if plan.outer_uid == 0 {
        Some(PidsCgroup::create(plan.pids_max)?)
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
    let self_attach = cgroup
        .as_ref()
        .filter(|c| c.v2_fd.is_none())
        .map(|c| c.dir.join("tasks"));
    let started = Instant::now();
    // SAFETY: clone3 with a valid clone_args of the size we pass and no stack
    // (fork semantics). The process is single-threaded here (see module doc),
    // so the child may continue running Rust code; it never returns from
    // `init` (it exits).
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &mut args as *mut CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    if pid < 0 {
        let e = std::io::Error::last_os_error();
        let hint = match (e.raw_os_error(), plan.host_network) {
            (Some(libc::EPERM | libc::ENOSPC), false) => {
                " (namespaces are restricted here, so network isolation is unavailable: refusing to run un-isolated; see `tether-exec doctor`)"
            }
            (Some(libc::EPERM | libc::ENOSPC), true) => " (user namespaces are restricted here: see `tether-exec doctor`)",
            _ => "",
        };
        return Err(setup("clone3 into new namespaces", format!("{e}{hint}")));
    }
    if pid == 0 {
        drop(sync_w);
        drop(err_r);
        init(
            plan,
            &prepared,
            sync_r,
            err_w,
            ChildIo {
                stdin: stdin_fd,
                output,
            },
            self_attach.as_deref(),
        );
    }
    let pid = pid as libc::pid_t;
    // SAFETY: CLONE_PIDFD made the kernel store a new descriptor in `pidfd`.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    drop(sync_r);
    drop(err_w);
    drop(stdin_fd);

    if let Err(e) = write_id_maps(pid, plan) {
        kill(pid);
        wait_pid(pid);
        return Err(e);
    }
    // Release the child: the id maps are in place.
    let mut sync_w = std::fs::File::from(sync_w);
    let _ = sync_w.write_all(b"1");
    drop(sync_w);

    let (status, timed_out) = supervise(pid, &pidfd, plan.timeout_ms.map(Duration::from_millis));
    let duration = started.elapsed();
    drop(cgroup);
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
    /// The cgroup directory, for CLONE_INTO_CGROUP (v2 only).
    v2_fd: Option<OwnedFd>,
}

const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

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
    fn create(max: u64) -> Result<PidsCgroup, ApplyError> {
        let step = "pids cgroup (running as root, RLIMIT_NPROC does not apply to host uid 0)";
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
        sweep_stale(&base);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir = base.join(format!("tether-exec-{}-{nanos}", std::process::id()));
        std::fs::create_dir(&dir).map_err(|e| setup(step, format!("{}: {e}", dir.display())))?;
        let mut c = PidsCgroup { dir, v2_fd: None };
        std::fs::write(c.dir.join("pids.max"), max.to_string()).map_err(|e| setup(step, e))?;
        if !c.dir.join("tasks").exists() {
            let f = std::fs::File::open(&c.dir).map_err(|e| setup(step, e))?;
            c.v2_fd = Some(f.into());
        }
        Ok(c)
    }
}

impl Drop for PidsCgroup {
    fn drop(&mut self) {
        // Empty once init has been reaped; retry briefly while the kernel tears down.
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

/// Signals passed from the harness to init, and from init to the command.
const FORWARDED_SIGNALS: [libc::c_int; 6] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// Wait for init to exit, killing it at the timeout and forwarding signals.
/// Returns (wait status, timed out).
fn supervise(pid: libc::pid_t, pidfd: &OwnedFd, timeout: Option<Duration>) -> (i32, bool) {
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
                fd: sfd,
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
        let n = unsafe { libc::poll(fds.as_mut_ptr(), if sfd >= 0 { 2 } else { 1 }, wait_ms) };
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
        if fds[0].revents & libc::POLLIN != 0 {
            break;
        }
    }
    let status = wait_pid(pid);
    if sfd >= 0 {
        // SAFETY: closing the signalfd we created; restoring the mask we changed.
        unsafe {
            libc::close(sfd);
            libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        }
    }
    (status, timed_out)
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

fn errno() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// pid 1 of the sandbox. Never returns.
/// The command's standard streams when they are not simply inherited.
struct ChildIo {
    stdin: Option<OwnedFd>,
    output: Option<(OwnedFd, OwnedFd)>,
}

fn init(plan: &Plan, prep: &Prepared, sync: OwnedFd, err: OwnedFd, io: ChildIo, cgroup_tasks: Option<&Path>) -> ! {
    // Die with tether-exec; then the kernel kills the whole namespace.
    // SAFETY: prctl with integer arguments only.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) };
    // Wait until the parent has written our id maps (or died: EOF).
    let mut b = [0u8; 1];
    let mut f = std::fs::File::from(sync);
    if !matches!(f.read(&mut b), Ok(1)) {
        // SAFETY: exiting the copied process without destructors.
        unsafe { libc::_exit(125) };
    }
    drop(f);
    if let Some(tasks) = cgroup_tasks {
        // Before anything can fork: the whole sandbox descends from here.
        if let Err(e) = std::fs::write(tasks, "0") {
            fail(&err, "enter the pids cgroup", e, 125);
        }
    }
    if let Err((step, e)) = build_filesystem(plan) {
        fail(&err, &step, e, 125);
    }
    if !plan.host_network {
        if let Err(e) = loopback_up() {
            fail(&err, "bring up loopback", e, 125);
        }
    }
    let host = cstr(&plan.hostname);
    // SAFETY: sethostname with a valid buffer and its length, in our own UTS namespace.
    if unsafe { libc::sethostname(host.as_ptr(), plan.hostname.len()) } != 0 {
        fail(&err, "set hostname", errno(), 125);
    }
    // Nothing inside may ptrace or read the memory of init.
    // SAFETY: prctl with integer arguments only.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0) };

    // SAFETY: fork in a single-threaded process (init is a copy of the
    // single-threaded launcher).
    let child = unsafe { libc::fork() };
    if child < 0 {
        fail(&err, "fork the command", errno(), 125);
    }
    if child == 0 {
        command(plan, prep, &err, io);
    }
    drop(io);
    drop(err);
    reap(child)
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
fn reap(child: libc::pid_t) -> ! {
    FORWARD_TO.store(child, std::sync::atomic::Ordering::Relaxed);
    for s in FORWARDED_SIGNALS {
        // SAFETY: installing an async-signal-safe handler (it only calls kill).
        unsafe { libc::signal(s, forward as *const () as libc::sighandler_t) };
    }
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
            // Exiting pid 1 kills every other process of the namespace (daemons included).
            // SAFETY: exiting without running destructors of the copied state.
            unsafe { libc::_exit(code) };
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
    let attr = MountAttr {
        attr_set: set,
        ..MountAttr::default()
    };
    // SAFETY: mount_setattr with a valid path, a valid mount_attr and its size.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            p.as_ptr(),
            AT_RECURSIVE,
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

fn old(p: &Path) -> PathBuf {
    Path::new(OLD).join(p.strip_prefix("/").unwrap_or(p))
}

type StepResult = Result<(), (String, std::io::Error)>;

fn step<T>(name: impl Into<String>, r: std::io::Result<T>) -> Result<T, (String, std::io::Error)> {
    r.map_err(|e| (name.into(), e))
}

/// tmpfs root, pivot, then every mount of the plan, then drop the old root.
fn build_filesystem(plan: &Plan) -> StepResult {
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

    for m in &plan.mounts {
        apply_mount(m)?;
    }
    step("detach the host's root", {
        let p = path_c(Path::new(OLD));
        // SAFETY: umount2 of the old root with a valid path.
        if unsafe { libc::umount2(p.as_ptr(), libc::MNT_DETACH) } == 0 {
            Ok(())
        } else {
            Err(errno())
        }
    })?;
    step("remove /oldroot", std::fs::remove_dir(OLD))?;
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

fn apply_mount(m: &Mount) -> StepResult {
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
            let meta = step(&name, std::fs::metadata(&source))?;
            step(&name, make_mountpoint(dst, !meta.is_dir()))?;
            step(
                &name,
                mount_raw(Some(&source), dst, None, libc::MS_BIND | libc::MS_REC, None),
            )?;
            let mut attrs = MOUNT_ATTR_NOSUID;
            if !*writable {
                attrs |= MOUNT_ATTR_RDONLY;
            }
            if !dst.starts_with("/dev") {
                attrs |= MOUNT_ATTR_NODEV;
            }
            step(&name, set_attrs(dst, attrs))
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
        Mount::MaskDir { dst } => step(
            format!("hide {}", dst.display()),
            mount_tmpfs(dst, libc::MS_RDONLY, "mode=0,size=4k"),
        ),
        Mount::Overlay { dst, upper, work } => {
            let name = format!("overlay workspace {}", dst.display());
            let options = format!(
                "lowerdir={},upperdir={},workdir={},userxattr",
                old(dst).display(),
                old(upper).display(),
                old(work).display()
            );
            step(&name, make_mountpoint(dst, false))?;
            step(
                &name,
                mount_raw(
                    Some(Path::new("overlay")),
                    dst,
                    Some("overlay"),
                    libc::MS_NOSUID | libc::MS_NODEV,
                    Some(&options),
                ),
            )
        }
        Mount::ReadOnly { dst } => {
            let name = format!("protect {}", dst.display());
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

/// The command process: final confinement, then execve. Never returns.
fn command(plan: &Plan, prep: &Prepared, err: &OwnedFd, io: ChildIo) -> ! {
    // Back to default signal handling and an empty mask (the parent blocked none
    // yet, but be explicit: the command must see signals normally).
    // SAFETY: setsid in a fresh child; sigprocmask with a zeroed set.
    unsafe {
        if libc::setsid() < 0 {
            fail(err, "setsid", errno(), 125);
        }
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
            rlim_max: r.value,
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
    if let Err(e) = landlock(plan) {
        fail(err, "landlock", e, 125);
    }
    for f in &prep.seccomp {
        if let Err(e) = seccompiler::apply_filter(f) {
            fail(err, "seccomp", e, 125);
        }
    }
    exec(plan, prep, err)
}

fn drop_capabilities() -> Result<(), caps::errors::CapsError> {
    use caps::CapSet;
    for c in caps::all() {
        caps::drop(None, CapSet::Bounding, c)?;
    }
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
