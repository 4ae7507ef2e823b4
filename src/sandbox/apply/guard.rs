//! The create guard: a thread of init that makes, on the command's behalf,
//! every name the command asks the kernel to make while the workspace is
//! bound writable from the host, and refuses the names the workspace
//! protects ([`CreateGuard::refuses`]) before they exist.
//!
//! Why: a protected path that exists is a mount (read-only, masked, an
//! overlay). One that does not exist yet (`.env`, `.tether`, a `.git` file,
//! the `config` of a repository the run makes) cannot be covered by a mount
//! in a directory shared with the host; made, it exists on the host while
//! the run lasts, for an editor's or the harness's `git status` to obey.
//!
//! How: the seccomp filter hands every call that makes a name (open with
//! `O_CREAT`, mkdir, mknod, symlink, link, rename; see
//! `seccomp::GUARDED`) to this thread as a user notification. The command
//! waits in the kernel while the guard
//! 1. copies the path out of the command's memory once (another thread of
//!    the command may rewrite it at any moment, so the kernel must never
//!    read it again: the guard never answers "continue");
//! 2. resolves it itself, the way the kernel would for the command: from the
//!    command's working directory or descriptor (`/proc/TID/cwd`,
//!    `/proc/TID/fd/N`), symlinks read one at a time, `/proc/self` and
//!    `/proc/thread-self` meaning the command, never the guard; and refuses
//!    to walk into init's own `/proc` entries (init holds capabilities);
//! 3. judges the last name in the directory it reached, and makes the entry
//!    there itself (relative to that directory's descriptor, so nothing
//!    swapped on the path meanwhile can redirect it), answering with the
//!    result, or with a new descriptor put straight into the command's table
//!    (`SECCOMP_IOCTL_NOTIF_ADDFD`).
//!
//! The guard makes entries with the command's rights, no more: the same uid
//! and gid, the same Landlock domain (init confines itself before it forks
//! the command, and this thread is started after), the command's umask at
//! that moment, and no capability but CAP_SYS_PTRACE, to read a caller that
//! made itself undumpable (ssh-agent). That one reaches only the caller:
//! `/proc` entries of any other process are refused, which also keeps init's
//! (this thread's own process) out of reach. A domain the command would add
//! for itself could not bind what the guard makes for it, so
//! `landlock_restrict_self` is refused with the guard (seccomp), as are the
//! ioctls that make a directory by name (btrfs and bcachefs subvolumes). If
//! the guard fails, it stops the sandbox and says why: nothing is made
//! unjudged, and nothing waits forever.
//!
//! Cost: a round trip to this thread per name made, tens of microseconds;
//! opens without `O_CREAT`, reads and writes never come here.

use super::{cstr, errno};
use crate::sandbox::plan::{CreateGuard, Making};
use std::collections::VecDeque;
use std::ffi::{CStr, CString, OsStr};
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// Symlinks followed in one resolution, as the kernel allows (ELOOP beyond).
const MAX_LINKS: u32 = 40;
/// The longest path the kernel accepts, terminating NUL included.
const PATH_MAX: usize = 4096;
/// Refusals reported to the launcher, at most (the count goes on).
const REPORTED_MAX: usize = 20;

/// Starts the guard thread. It receives the seccomp listener on `channel`
/// (sent by the command once its filter is loaded) and writes one line per
/// refusal to `report`.
pub(super) fn spawn(guard: CreateGuard, channel: OwnedFd, report: OwnedFd) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("create-guard".into())
        .stack_size(256 * 1024)
        .spawn(move || {
            block_signals();
            // This thread only: init's main thread keeps what it needs for
            // the namespaces. capset acts on the calling thread.
            let mut report = std::fs::File::from(report);
            // All but CAP_SYS_PTRACE, for this thread only (capset acts on
            // the calling thread): with it the guard reads the memory, the
            // working directory and the descriptors of a caller that made
            // itself undumpable (ssh-agent does), as that caller could
            // itself. It reaches no other process: `/proc` entries of any
            // process but the caller are refused (see `is_foreign_proc`).
            use caps::{CapSet, Capability};
            let keep: caps::CapsHashSet = [Capability::CAP_SYS_PTRACE].into_iter().collect();
            let dropped = caps::set(None, CapSet::Effective, &keep)
                .and_then(|()| caps::set(None, CapSet::Permitted, &keep))
                .and_then(|()| caps::clear(None, CapSet::Inheritable));
            if let Err(e) = dropped {
                return stop_the_sandbox(&mut report, &format!("dropping its capabilities: {e}"));
            }
            // A working directory (and umask) of its own: `bind` names a
            // socket relative to it (see `Guard::bind`).
            // SAFETY: unshare(CLONE_FS) of this thread's filesystem context.
            if unsafe { libc::unshare(libc::CLONE_FS) } != 0 {
                return stop_the_sandbox(&mut report, &format!("unshare(CLONE_FS): {}", errno()));
            }
            // EOF: the command failed before its seccomp filter; it says why.
            let Some(listener) = receive_fd(&channel) else {
                return;
            };
            drop(channel);
            // The command waits in the kernel while the guard works: wake
            // each on the other's CPU at once rather than through the
            // scheduler (Linux 6.6; a round trip costs several times more
            // without, on a VM most of all). Not there: the same, slower.
            const SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP: u64 = 1;
            // SAFETY: ioctl on the listener we own with an integer argument.
            unsafe {
                libc::ioctl(
                    listener.as_raw_fd(),
                    libc::SECCOMP_IOCTL_NOTIF_SET_FLAGS as _,
                    SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP,
                )
            };
            let root = match open_path(None, c"/", libc::O_DIRECTORY) {
                Ok(r) => r,
                Err(e) => return stop_the_sandbox(&mut report, &format!("open /: errno {e}")),
            };
            let mut g = Guard {
                guard,
                listener,
                root,
                report,
                reported: 0,
                own: [std::process::id() as i32, gettid()],
                made_dirs: std::collections::HashSet::new(),
            };
            let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| g.serve()));
            let failure = match served {
                Ok(Ok(())) => return,
                Ok(Err(e)) => e,
                Err(_) => "it panicked".to_string(),
            };
            stop_the_sandbox(&mut g.report, &failure);
        })
        .map(drop)
}

/// The guard cannot go on: every process of the sandbox but init is killed
/// (the command ends with SIGKILL), and the launcher is told why on the
/// report pipe (a line `!\treason`). Without the guard, calls that make a
/// name would fail or wait forever; the run must not go on half-served.
fn stop_the_sandbox(report: &mut std::fs::File, reason: &str) {
    let _ = report.write_all(format!("!\t{}\n", reason.replace(['\t', '\n'], " ")).as_bytes());
    // SAFETY: kill(-1) from init's thread group reaches every other process
    // of its pid namespace; init itself is not signalled.
    unsafe { libc::kill(-1, libc::SIGKILL) };
}

fn gettid() -> i32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

/// Every signal blocked in this thread: they are init's main thread's to
/// handle (it forwards them to the command).
fn block_signals() {
    // SAFETY: a zeroed sigset filled by sigfillset, then pthread_sigmask on
    // the calling thread with valid pointers.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, std::ptr::null_mut());
    }
}

fn one_byte(byte: &mut [u8; 1]) -> libc::iovec {
    libc::iovec {
        iov_base: byte.as_mut_ptr() as *mut libc::c_void,
        iov_len: 1,
    }
}

/// A message of one byte (`iov`) with room for one descriptor (`space`,
/// aligned for a cmsghdr), as the channel carries the seccomp listener.
fn message(iov: &mut libc::iovec, space: &mut [u64; 8]) -> libc::msghdr {
    // SAFETY: msghdr is plain data; all-zero is its empty value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov;
    msg.msg_iovlen = 1;
    msg.msg_control = space.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = std::mem::size_of_val(space);
    msg
}

/// Receives one descriptor sent with SCM_RIGHTS; `None` at EOF or on error.
fn receive_fd(channel: &OwnedFd) -> Option<OwnedFd> {
    let mut byte = [0u8; 1];
    let mut iov = one_byte(&mut byte);
    let mut space = [0u64; 8];
    // SAFETY: a msghdr pointing at our iovec and control buffer, both alive
    // for the call; CMSG_* read within the control length the kernel set.
    unsafe {
        let mut msg = message(&mut iov, &mut space);
        loop {
            let n = libc::recvmsg(channel.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC);
            if n < 0 && errno().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            if n <= 0 {
                return None;
            }
            break;
        }
        let c = libc::CMSG_FIRSTHDR(&msg);
        if c.is_null() || (*c).cmsg_level != libc::SOL_SOCKET || (*c).cmsg_type != libc::SCM_RIGHTS {
            return None;
        }
        let fd = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const RawFd);
        Some(OwnedFd::from_raw_fd(fd))
    }
}

/// Sends `fd` with SCM_RIGHTS (the command, to the guard).
pub(super) fn send_fd(channel: RawFd, fd: RawFd) -> std::io::Result<()> {
    let mut byte = [1u8; 1];
    let mut iov = one_byte(&mut byte);
    let mut space = [0u64; 8];
    // SAFETY: as in `receive_fd`; the control buffer holds one cmsghdr with
    // one int (CMSG_SPACE of 4 bytes is well under its 64).
    unsafe {
        let mut msg = message(&mut iov, &mut space);
        msg.msg_controllen = libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) as usize;
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut RawFd, fd);
        if libc::sendmsg(channel, &msg, 0) != 1 {
            return Err(errno());
        }
    }
    Ok(())
}

/// An errno to answer the command with.
type Errno = i32;

fn last() -> Errno {
    errno().raw_os_error().unwrap_or(libc::EIO)
}

/// What the command's system call returns.
enum Answer {
    Value(i64),
    Error(Errno),
    /// A descriptor to install in the command's table (open).
    Fd {
        fd: OwnedFd,
        cloexec: bool,
    },
    /// Answered by another thread (an open that waits, see `open_waiting`).
    Later,
}

impl From<Result<i64, Errno>> for Answer {
    fn from(r: Result<i64, Errno>) -> Answer {
        match r {
            Ok(v) => Answer::Value(v),
            Err(e) => Answer::Error(e),
        }
    }
}

struct Guard {
    guard: CreateGuard,
    listener: OwnedFd,
    root: OwnedFd,
    report: std::fs::File,
    reported: usize,
    /// init's pid and this thread's id: their `/proc` entries are init's.
    own: [i32; 2],
    /// (device, inode, birth time) of every directory this run made (`mkdir`), wherever
    /// it has moved since: a git directory is the run's own to configure
    /// only if it is one of them (see [`Guard::judge`]).
    made_dirs: std::collections::HashSet<(u64, u64, i64, u32)>,
}

/// Answers notification `id` on `listener`.
fn respond(listener: &OwnedFd, id: u64, answer: Answer) {
    let send = |val: i64, error: i32| {
        let resp = libc::seccomp_notif_resp {
            id,
            val,
            error,
            flags: 0,
        };
        // SAFETY: ioctl on the listener with a valid seccomp_notif_resp. It
        // fails (ENOENT) if the caller died meanwhile: nothing to do then.
        unsafe { libc::ioctl(listener.as_raw_fd(), libc::SECCOMP_IOCTL_NOTIF_SEND as _, &resp) };
    };
    match answer {
        Answer::Fd { fd, cloexec } => {
            let add = libc::seccomp_notif_addfd {
                id,
                flags: libc::SECCOMP_ADDFD_FLAG_SEND as u32,
                srcfd: fd.as_raw_fd() as u32,
                newfd: 0,
                newfd_flags: if cloexec { libc::O_CLOEXEC as u32 } else { 0 },
            };
            // SAFETY: ioctl on the listener with a valid seccomp_notif_addfd;
            // with FLAG_SEND the kernel answers the call with the new fd.
            let r = unsafe { libc::ioctl(listener.as_raw_fd(), libc::SECCOMP_IOCTL_NOTIF_ADDFD as _, &add) };
            if r < 0 {
                // The command's table is full (EMFILE), or the caller died.
                send(0, -last());
            }
        }
        Answer::Value(v) => send(v, 0),
        Answer::Error(e) => send(0, -e),
        Answer::Later => {}
    }
}

/// The calling thread, as the guard sees it while answering one notification.
struct Caller {
    id: u64,
    tid: i32,
    tgid: i32,
    /// Its umask when the call came (shared by its threads).
    umask: u32,
}

/// What an open gave: a descriptor now, or a file whose open may wait (a
/// FIFO), to be opened by a thread of its own (see `Guard::open_waiting`).
enum Opened {
    Now(OwnedFd),
    Waits(OwnedFd),
}

/// Where a name is to be made: the directory (an `O_PATH` descriptor) and the
/// last component, with a trailing slash kept apart.
struct Place {
    dir: OwnedFd,
    name: Vec<u8>,
    trailing_slash: bool,
}

impl Place {
    /// The name as passed to the `*at` call: with its trailing slash, so the
    /// kernel answers as it would have to the command ("x/" makes no file).
    fn c_name(&self) -> CString {
        let mut n = self.name.clone();
        if self.trailing_slash {
            n.push(b'/');
        }
        CString::new(n).unwrap_or_default()
    }
}

impl Guard {
    fn serve(&mut self) -> Result<(), String> {
        loop {
            // SAFETY: a zeroed seccomp_notif (the kernel requires it zeroed),
            // filled by the ioctl on our listener.
            let mut n: libc::seccomp_notif = unsafe { std::mem::zeroed() };
            let r = unsafe { libc::ioctl(self.listener.as_raw_fd(), libc::SECCOMP_IOCTL_NOTIF_RECV as _, &mut n) };
            if r < 0 {
                match last() {
                    libc::EINTR => continue,
                    // The caller died before we read it, or nothing uses the
                    // filter any more (the command and all it started have
                    // ended): the listener then says so (POLLHUP), and the
                    // guard is done. Without this check it would spin.
                    libc::ENOENT => {
                        if self.nobody_left() {
                            if self.reported > REPORTED_MAX {
                                // `+\tN`: refusals not listed.
                                let more = self.reported - REPORTED_MAX;
                                let _ = self.report.write_all(format!("+\t{more}\n").as_bytes());
                            }
                            return Ok(());
                        }
                        continue;
                    }
                    e => return Err(format!("reading a notification: errno {e}")),
                }
            }
            let tid = n.pid as i32;
            let Some((tgid, umask)) = status_of(tid) else {
                // Gone already (killed while it waited): nothing to answer.
                continue;
            };
            let caller = Caller {
                id: n.id,
                tid,
                tgid,
                umask,
            };
            let answer = self.answer(&caller, n.data.nr as i64, n.data.args);
            respond(&self.listener, caller.id, answer);
        }
    }

    /// Whether no process uses the filter any more (it will never notify again).
    fn nobody_left(&self) -> bool {
        let mut p = libc::pollfd {
            fd: self.listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll of one pollfd we own, without waiting.
        let n = unsafe { libc::poll(&mut p, 1, 0) };
        n > 0 && p.revents & libc::POLLHUP != 0 && p.revents & libc::POLLIN == 0
    }

    /// Whether the caller is still in the call this notification is about
    /// (its tid may have been reused otherwise).
    fn still_waiting(&self, caller: &Caller) -> bool {
        let id = caller.id;
        // SAFETY: ioctl on our listener with a pointer to a u64.
        unsafe { libc::ioctl(self.listener.as_raw_fd(), libc::SECCOMP_IOCTL_NOTIF_ID_VALID as _, &id) == 0 }
    }

    fn answer(&mut self, c: &Caller, nr: i64, a: [u64; 6]) -> Answer {
        const CWD: i32 = libc::AT_FDCWD;
        let fd = |v: u64| v as i32;
        match nr {
            libc::SYS_openat => self.open(c, fd(a[0]), a[1], a[2] as i32, a[3] as u32),
            libc::SYS_mkdirat => self.mkdir(c, fd(a[0]), a[1], a[2] as u32).into(),
            libc::SYS_mknodat => self.mknod(c, fd(a[0]), a[1], a[2] as u32, a[3]).into(),
            libc::SYS_symlinkat => self.symlink(c, a[0], fd(a[1]), a[2]).into(),
            libc::SYS_linkat => self.link(c, (fd(a[0]), a[1]), (fd(a[2]), a[3]), a[4] as i32).into(),
            libc::SYS_renameat => self.rename(c, (fd(a[0]), a[1]), (fd(a[2]), a[3]), 0).into(),
            libc::SYS_renameat2 => self.rename(c, (fd(a[0]), a[1]), (fd(a[2]), a[3]), a[4] as u32).into(),
            libc::SYS_bind => self.bind(c, fd(a[0]), a[1], a[2] as u32).into(),
            #[cfg(target_arch = "x86_64")]
            libc::SYS_open => self.open(c, CWD, a[0], a[1] as i32, a[2] as u32),
            #[cfg(target_arch = "x86_64")]
            libc::SYS_creat => self.open(
                c,
                CWD,
                a[0],
                libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC,
                a[1] as u32,
            ),
            #[cfg(target_arch = "x86_64")]
            libc::SYS_mkdir => self.mkdir(c, CWD, a[0], a[1] as u32).into(),
            #[cfg(target_arch = "x86_64")]
            libc::SYS_mknod => self.mknod(c, CWD, a[0], a[1] as u32, a[2]).into(),
            #[cfg(target_arch = "x86_64")]
            libc::SYS_symlink => self.symlink(c, a[0], CWD, a[1]).into(),
            #[cfg(target_arch = "x86_64")]
            libc::SYS_link => self.link(c, (CWD, a[0]), (CWD, a[1]), 0).into(),
            #[cfg(target_arch = "x86_64")]
            libc::SYS_rename => self.rename(c, (CWD, a[0]), (CWD, a[1]), 0).into(),
            _ => Answer::Error(libc::ENOSYS),
        }
    }

    // ---- the calls ----

    fn open(&mut self, c: &Caller, dirfd: i32, path: u64, flags: i32, mode: u32) -> Answer {
        let cloexec = flags & libc::O_CLOEXEC != 0;
        match self.open_inner(c, dirfd, path, flags, mode) {
            Ok(Opened::Now(fd)) => Answer::Fd { fd, cloexec },
            Ok(Opened::Waits(via)) => self.open_waiting(c, via, flags, cloexec),
            Err(e) => Answer::Error(e),
        }
    }

    /// An open that may wait indefinitely (a FIFO without its other end):
    /// made and answered by a thread of its own, so that the guard goes on
    /// serving the rest of the sandbox meanwhile. `via` is an `O_PATH`
    /// descriptor of the file, checked already; nothing is made.
    fn open_waiting(&self, c: &Caller, via: OwnedFd, flags: i32, cloexec: bool) -> Answer {
        static WAITING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        use std::sync::atomic::Ordering::Relaxed;
        const WAITING_MAX: usize = 64;
        let Ok(listener) = self.listener.try_clone() else {
            return Answer::Error(libc::EMFILE);
        };
        if WAITING.fetch_add(1, Relaxed) >= WAITING_MAX {
            WAITING.fetch_sub(1, Relaxed);
            return Answer::Error(libc::EAGAIN);
        }
        let id = c.id;
        let opener = move || {
            let again = cstr(format!("/proc/self/fd/{}", via.as_raw_fd()));
            let answer = match openat_plain(None, &again, flags & !libc::O_CREAT, 0) {
                Ok(fd) => Answer::Fd { fd, cloexec },
                Err(e) => Answer::Error(e),
            };
            respond(&listener, id, answer);
            WAITING.fetch_sub(1, Relaxed);
        };
        // Started from the guard: the same credentials, Landlock domain and
        // blocked signals.
        match std::thread::Builder::new().stack_size(64 * 1024).spawn(opener) {
            Ok(_) => Answer::Later,
            Err(_) => {
                WAITING.fetch_sub(1, Relaxed);
                Answer::Error(libc::EAGAIN)
            }
        }
    }

    /// Opens what a magic link at `place` names (an open file of a process
    /// of the sandbox, or its working directory): through an `O_PATH`
    /// descriptor the guard checked, never init's own entries.
    fn open_magic(&self, c: &Caller, place: &Place, flags: i32, mode: u64) -> Result<Opened, Errno> {
        let via = open_path(Some(&place.dir), &place.c_name(), 0)?;
        if self.is_foreign_proc(c, &via) {
            return Err(libc::EACCES);
        }
        if is_fifo(&via) {
            return Ok(Opened::Waits(via));
        }
        let again = cstr(format!("/proc/self/fd/{}", via.as_raw_fd()));
        // Without waiting here: a lease to break waits in a thread of its own.
        let asked_nonblock = flags & libc::O_NONBLOCK != 0;
        match openat_plain(None, &again, (flags & !libc::O_CREAT) | libc::O_NONBLOCK, mode) {
            Ok(fd) => {
                if !asked_nonblock {
                    // SAFETY: fcntl on a descriptor we own: the caller's flags.
                    unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK) };
                }
                Ok(Opened::Now(fd))
            }
            Err(libc::EAGAIN) if !asked_nonblock => Ok(Opened::Waits(via)),
            Err(e) => Err(e),
        }
    }

    /// Opens `place` with `flags` (which may make it), as the kernel would;
    /// never waits: an existing FIFO is handed to `open_waiting`.
    fn open_here(&self, place: &Place, flags: i32, mode: u64) -> Result<Opened, Errno> {
        // O_PATH opens nothing that could wait (and takes no O_NONBLOCK).
        let asked_nonblock = flags & (libc::O_NONBLOCK | libc::O_PATH) != 0;
        let ours = if asked_nonblock { 0 } else { libc::O_NONBLOCK };
        let r = openat2_fd(
            &place.dir,
            &place.c_name(),
            flags | ours,
            mode,
            libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS,
        );
        match r {
            Ok(fd) if is_fifo(&fd) && !asked_nonblock => Ok(Opened::Waits(fd)),
            Ok(fd) => {
                if !asked_nonblock {
                    // SAFETY: fcntl on a descriptor we own: the flags the
                    // caller asked for (O_NONBLOCK was ours, to never wait).
                    unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK) };
                }
                Ok(Opened::Now(fd))
            }
            // A FIFO opened for writing with no reader yet.
            Err(libc::ENXIO) if !asked_nonblock => {
                let via = openat2_path(&place.dir, &place.c_name(), libc::RESOLVE_NO_SYMLINKS)?;
                if is_fifo(&via) {
                    Ok(Opened::Waits(via))
                } else {
                    Err(libc::ENXIO)
                }
            }
            // A lease someone holds, which the kernel would wait to break.
            Err(libc::EAGAIN) if !asked_nonblock => {
                openat2_path(&place.dir, &place.c_name(), libc::RESOLVE_NO_SYMLINKS).map(Opened::Waits)
            }
            Err(e) => Err(e),
        }
    }

    fn open_inner(&mut self, c: &Caller, dirfd: i32, path: u64, flags: i32, mode: u32) -> Result<Opened, Errno> {
        let path = self.read_path(c, path)?;
        let start = self.start(c, dirfd, &path)?;
        take_umask(c);
        let mut links = 0;
        let mut place = self.place(c, &start, &path, &mut links)?;
        // What openat2 accepts of what open(2) would (it refuses unknown bits
        // and a mode beyond 07777); O_NOCTTY: the guard must not gain a
        // controlling terminal.
        let known = libc::O_ACCMODE
            | libc::O_CREAT
            | libc::O_EXCL
            | libc::O_TRUNC
            | libc::O_APPEND
            | libc::O_NONBLOCK
            | libc::O_DSYNC
            | libc::O_SYNC
            | libc::O_DIRECT
            | libc::O_DIRECTORY
            | libc::O_NOFOLLOW
            | libc::O_NOATIME
            | libc::O_LARGEFILE
            | libc::O_ASYNC;
        // O_PATH: the kernel ignores O_CREAT (and every flag but these).
        let makes = flags & libc::O_PATH == 0;
        let flags = if makes {
            (flags & known) | libc::O_NOCTTY | libc::O_CLOEXEC
        } else {
            libc::O_PATH | libc::O_CLOEXEC | (flags & (libc::O_DIRECTORY | libc::O_NOFOLLOW))
        };
        let mode = if makes { u64::from(mode & 0o7777) } else { 0 };
        loop {
            if place.trailing_slash {
                // A trailing slash never makes a file: the kernel answers.
                return self.open_here(&place, flags & !libc::O_CREAT, 0);
            }
            let name = OsStr::from_bytes(&place.name).to_owned();
            let refused = if makes { self.judge(&place, Making::Other) } else { None };
            if let Some(why) = refused {
                // Refused to make; an entry that exists already (a read-only
                // mount, say) opens as the kernel would open it.
                let existing = flags & !(libc::O_CREAT | libc::O_EXCL);
                return match self.open_here(&place, existing, 0) {
                    Ok(_) if flags & libc::O_EXCL != 0 => Err(libc::EEXIST),
                    Ok(opened) => Ok(opened),
                    Err(libc::ENOENT) => {
                        self.refused(&place, &name, why);
                        Err(libc::EPERM)
                    }
                    Err(libc::ELOOP) if flags & (libc::O_NOFOLLOW | libc::O_EXCL) == 0 => {
                        place = self.follow(c, place, &mut links)?;
                        continue;
                    }
                    Err(e) => Err(e),
                };
            }
            match self.open_here(&place, flags, mode) {
                Err(libc::ELOOP) if flags & (libc::O_NOFOLLOW | libc::O_EXCL) == 0 => {
                    if self.magic_link(&place)? {
                        // A /proc magic link: it names an open file, nothing is made.
                        return self.open_magic(c, &place, flags, mode);
                    }
                    place = self.follow(c, place, &mut links)?;
                }
                r => return r,
            }
        }
    }

    /// The place the caller's path at `addr` names, from `dirfd`.
    fn placed(&self, c: &Caller, dirfd: i32, addr: u64) -> Result<Place, Errno> {
        let path = self.read_path(c, addr)?;
        let start = self.start(c, dirfd, &path)?;
        self.place(c, &start, &path, &mut 0)
    }

    fn mkdir(&mut self, c: &Caller, dirfd: i32, path: u64, mode: u32) -> Result<i64, Errno> {
        let place = self.placed(c, dirfd, path)?;
        take_umask(c);
        self.refuse_if_protected(&place, Making::Directory)?;
        let name = place.c_name();
        // SAFETY: mkdirat relative to a descriptor we own, NUL-terminated name.
        let made = check(unsafe { libc::mkdirat(place.dir.as_raw_fd(), name.as_ptr(), mode & 0o7777) })?;
        if let Some(id) = identity_at(&place.dir, &name) {
            self.made_dirs.insert(id);
        }
        Ok(made)
    }

    fn mknod(&mut self, c: &Caller, dirfd: i32, path: u64, mode: u32, dev: u64) -> Result<i64, Errno> {
        let place = self.placed(c, dirfd, path)?;
        take_umask(c);
        self.refuse_if_protected(&place, Making::Other)?;
        if mode & libc::S_IFMT == libc::S_IFIFO {
            self.refuse_fifo(&place)?;
        }
        let name = place.c_name();
        // SAFETY: mknodat relative to a descriptor we own, NUL-terminated name.
        check(unsafe { libc::mknodat(place.dir.as_raw_fd(), name.as_ptr(), mode, dev as libc::dev_t) })
    }

    fn symlink(&mut self, c: &Caller, target: u64, dirfd: i32, path: u64) -> Result<i64, Errno> {
        let target = CString::new(self.read_path(c, target)?).map_err(|_| libc::EINVAL)?;
        let place = self.placed(c, dirfd, path)?;
        self.refuse_if_protected(&place, Making::Other)?;
        let name = place.c_name();
        // SAFETY: symlinkat with two NUL-terminated strings and a descriptor we own.
        check(unsafe { libc::symlinkat(target.as_ptr(), place.dir.as_raw_fd(), name.as_ptr()) })
    }

    fn link(&mut self, c: &Caller, old: (i32, u64), new: (i32, u64), flags: i32) -> Result<i64, Errno> {
        if flags & !(libc::AT_SYMLINK_FOLLOW | libc::AT_EMPTY_PATH) != 0 {
            return Err(libc::EINVAL);
        }
        let old_path = self.read_path_or_empty(c, old.1, flags & libc::AT_EMPTY_PATH != 0)?;
        let new_path = self.read_path(c, new.1)?;
        let new_start = self.start(c, new.0, &new_path)?;
        let to = self.place(c, &new_start, &new_path, &mut 0)?;
        self.refuse_if_protected(&to, Making::Other)?;
        let to_name = to.c_name();
        if old_path.is_empty() {
            // linkat(fd, "", ..., AT_EMPTY_PATH): the open file itself (an
            // O_TMPFILE, say), reached through the caller's descriptor.
            let via = if old.0 == libc::AT_FDCWD {
                cstr(format!("/proc/{}/cwd", c.tid))
            } else {
                cstr(format!("/proc/{}/fd/{}", c.tid, old.0))
            };
            let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
            // SAFETY: stat of a NUL-terminated path into a buffer it fills on
            // success (read only then).
            if unsafe { libc::stat(via.as_ptr(), st.as_mut_ptr()) } == 0
                // SAFETY: stat succeeded: the buffer is initialised.
                && unsafe { st.assume_init() }.st_mode & libc::S_IFMT == libc::S_IFIFO
            {
                self.refuse_fifo(&to)?;
            }
            // SAFETY: linkat with NUL-terminated paths and a descriptor we own.
            return check(unsafe {
                libc::linkat(
                    libc::AT_FDCWD,
                    via.as_ptr(),
                    to.dir.as_raw_fd(),
                    to_name.as_ptr(),
                    libc::AT_SYMLINK_FOLLOW,
                )
            });
        }
        let old_start = self.start(c, old.0, &old_path)?;
        let mut links = 0;
        let mut from = self.place(c, &old_start, &old_path, &mut links)?;
        if flags & libc::AT_SYMLINK_FOLLOW != 0 && !from.trailing_slash {
            // Follow the last symlinks here, not in the kernel (a symlink to
            // /proc/self/... must mean the caller).
            while is_symlink(&from) {
                if self.magic_link(&from)? {
                    // Linked through the O_PATH descriptor the guard checked.
                    let via = open_path(Some(&from.dir), &from.c_name(), 0)?;
                    if self.is_foreign_proc(c, &via) {
                        return Err(libc::EACCES);
                    }
                    if fstat(&via).is_some_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFIFO) {
                        self.refuse_fifo(&to)?;
                    }
                    let again = cstr(format!("/proc/self/fd/{}", via.as_raw_fd()));
                    // SAFETY: linkat with NUL-terminated paths and a descriptor we own.
                    return check(unsafe {
                        libc::linkat(
                            libc::AT_FDCWD,
                            again.as_ptr(),
                            to.dir.as_raw_fd(),
                            to_name.as_ptr(),
                            libc::AT_SYMLINK_FOLLOW,
                        )
                    });
                }
                from = self.follow(c, from, &mut links)?;
            }
        }
        if is_fifo_at(&from) {
            self.refuse_fifo(&to)?;
        }
        let from_name = from.c_name();
        // SAFETY: linkat relative to descriptors we own, NUL-terminated names.
        check(unsafe {
            libc::linkat(
                from.dir.as_raw_fd(),
                from_name.as_ptr(),
                to.dir.as_raw_fd(),
                to_name.as_ptr(),
                0,
            )
        })
    }

    fn rename(&mut self, c: &Caller, old: (i32, u64), new: (i32, u64), flags: u32) -> Result<i64, Errno> {
        let old_path = self.read_path(c, old.1)?;
        let new_path = self.read_path(c, new.1)?;
        let old_start = self.start(c, old.0, &old_path)?;
        let new_start = self.start(c, new.0, &new_path)?;
        let from = self.place(c, &old_start, &old_path, &mut 0)?;
        let to = self.place(c, &new_start, &new_path, &mut 0)?;
        let kind = |p: &Place| match is_dir(p) {
            true => Making::MovedDirectory,
            false => Making::Other,
        };
        self.refuse_if_protected(&to, kind(&from))?;
        if is_fifo_at(&from) {
            self.refuse_fifo(&to)?;
        }
        if flags & libc::RENAME_EXCHANGE != 0 {
            self.refuse_if_protected(&from, kind(&to))?;
            if is_fifo_at(&to) {
                self.refuse_fifo(&from)?;
            }
        }
        let (a, b) = (from.c_name(), to.c_name());
        // SAFETY: renameat2 relative to descriptors we own, NUL-terminated names.
        check(unsafe {
            libc::syscall(
                libc::SYS_renameat2,
                from.dir.as_raw_fd(),
                a.as_ptr(),
                to.dir.as_raw_fd(),
                b.as_ptr(),
                flags,
            ) as libc::c_int
        })
    }

    /// bind: a unix socket's name is made like a file's. The guard binds the
    /// caller's own socket (a copy of its descriptor, `pidfd_getfd`) to the
    /// address it copied; a pathname is judged like every other name and
    /// bound relative to the directory the guard resolved.
    fn bind(&mut self, c: &Caller, sockfd: i32, addr: u64, len: u32) -> Result<i64, Errno> {
        let len = len as usize;
        if len > std::mem::size_of::<libc::sockaddr_storage>() {
            return Err(libc::EINVAL);
        }
        let raw = self.copy_bytes(c, addr, len)?;
        let sock = self.their_fd(c, sockfd)?;
        if fstat(&sock).is_none_or(|st| st.st_mode & libc::S_IFMT != libc::S_IFSOCK) {
            return Err(libc::ENOTSOCK);
        }
        let family = raw.get(..2).map(|f| u16::from_ne_bytes([f[0], f[1]]));
        let path = match family {
            Some(f) if f == libc::AF_UNIX as u16 && raw.len() > 2 && raw[2] != 0 => {
                if len > std::mem::size_of::<libc::sockaddr_un>() {
                    return Err(libc::EINVAL);
                }
                let p = &raw[2..];
                &p[..p.iter().position(|b| *b == 0).unwrap_or(p.len())]
            }
            // Abstract names, other families: no name in the filesystem.
            // SAFETY: bind on our copy of the caller's socket with the bytes
            // copied from it, of their length.
            _ => {
                return check(unsafe {
                    libc::bind(sock.as_raw_fd(), raw.as_ptr() as *const libc::sockaddr, len as u32)
                })
            }
        };
        let start = self.start(c, libc::AT_FDCWD, path)?;
        take_umask(c);
        let place = self.place(c, &start, path, &mut 0)?;
        self.refuse_if_protected(&place, Making::Other)?;
        let name = place.c_name();
        let name = name.as_bytes();
        // bind() takes no directory descriptor: the socket is named relative
        // to the guard's own working directory (its own: unshare(CLONE_FS)),
        // moved to the directory resolved. `getsockname` then reads NAME.
        // SAFETY: fchdir to a descriptor we own; a zeroed sockaddr_un, its
        // path filled within its size (checked); bind on our copy of the
        // caller's socket.
        unsafe {
            if libc::fchdir(place.dir.as_raw_fd()) != 0 {
                return Err(last());
            }
            let mut sun: libc::sockaddr_un = std::mem::zeroed();
            // As the kernel: a name may fill sun_path, NUL-less.
            if name.len() > sun.sun_path.len() {
                return Err(libc::ENAMETOOLONG);
            }
            sun.sun_family = libc::AF_UNIX as libc::sa_family_t;
            for (d, b) in sun.sun_path.iter_mut().zip(name) {
                *d = *b as libc::c_char;
            }
            let used = std::mem::size_of::<libc::sa_family_t>() + (name.len() + 1).min(sun.sun_path.len());
            let r = check(libc::bind(
                sock.as_raw_fd(),
                &sun as *const libc::sockaddr_un as *const libc::sockaddr,
                used as u32,
            ));
            libc::fchdir(self.root.as_raw_fd());
            r
        }
    }

    /// A copy of the caller's descriptor `fd`.
    fn their_fd(&self, c: &Caller, fd: i32) -> Result<OwnedFd, Errno> {
        // The calling thread's own table (it may have unshared it):
        // PIDFD_THREAD (Linux 6.9). Older kernels: the process's, which is
        // the thread's only for the process's first thread.
        const PIDFD_THREAD: libc::c_int = libc::O_EXCL;
        // SAFETY: pidfd_open of the calling thread; the descriptor is owned below.
        let mut pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, c.tid, PIDFD_THREAD) };
        if pidfd < 0 && last() == libc::EINVAL {
            // The process's table is the thread's unless it unshared it.
            const KCMP_FILES: libc::c_int = 2;
            // SAFETY: kcmp of two tasks' file tables, integer arguments only.
            let same =
                c.tid == c.tgid || unsafe { libc::syscall(libc::SYS_kcmp, c.tid, c.tgid, KCMP_FILES, 0, 0) } == 0;
            if !same {
                return Err(libc::EPERM);
            }
            // SAFETY: as above, for the process.
            pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, c.tgid, 0) };
        }
        if pidfd < 0 {
            return Err(libc::ESRCH);
        }
        // SAFETY: a fresh descriptor nobody else owns.
        let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as RawFd) };
        // SAFETY: pidfd_getfd with a pidfd we own; the copy is owned below.
        let copy = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
        if copy < 0 {
            return Err(last());
        }
        // SAFETY: a fresh descriptor nobody else owns.
        let copy = unsafe { OwnedFd::from_raw_fd(copy as RawFd) };
        if !self.still_waiting(c) {
            return Err(libc::ESRCH);
        }
        Ok(copy)
    }

    /// Exactly `len` bytes of the caller's memory at `addr`.
    fn copy_bytes(&self, c: &Caller, addr: u64, len: usize) -> Result<Vec<u8>, Errno> {
        let mut buf = vec![0u8; len];
        if len == 0 {
            return Ok(buf);
        }
        if read_memory(c.tid, addr, &mut buf) != len as isize {
            return Err(libc::EFAULT);
        }
        if !self.still_waiting(c) {
            return Err(libc::ESRCH);
        }
        Ok(buf)
    }

    // ---- judging ----

    fn judge(&self, place: &Place, making: Making) -> Option<&'static str> {
        let name = OsStr::from_bytes(&place.name);
        let parent = std::cell::OnceCell::new();
        let path = || parent.get_or_init(|| dir_path(&place.dir)).clone();
        if let Some(why) = self.guard.refuses(name, making, path) {
            return Some(why);
        }
        // A control file of a git directory in the workspace that this run
        // did not make: another run's repository (one that run made below,
        // whose gitlink it landed in the index while this one ran), or one
        // made meanwhile. The plan could not know it, and the host's git at
        // the top recurses into it now and obeys its `config`.
        let control = crate::policy::GIT_CONTROL.iter().any(|c| place.name == c.as_bytes());
        if !control
            || self
                .made_dirs
                .contains(&identity_at(&place.dir, c".").unwrap_or_default())
        {
            return None;
        }
        // Known ones are overlays, whose landing refuses control files
        // anyway; clones tools keep under `HOME` (the workspace) are theirs.
        let unknown = path().is_some_and(|p| {
            p.strip_prefix(&self.guard.workspace)
                .is_ok_and(|r| !crate::workspace::in_tool_cache(r))
                && !self.guard.known_git_dirs.contains(&p)
        });
        let git_dir = path().is_some_and(|p| p.file_name() == Some(OsStr::new(".git")))
            || identity_at(&place.dir, c"HEAD").is_some();
        (unknown && git_dir).then_some(
            "a control file of a git directory this run did not make (another run's, or one made while this run lasted): the host's git may obey it at once",
        )
    }

    fn refuse_if_protected(&mut self, place: &Place, making: Making) -> Result<(), Errno> {
        match self.judge(place, making) {
            Some(why) => {
                let name = OsStr::from_bytes(&place.name).to_owned();
                self.refused(place, &name, why);
                Err(libc::EPERM)
            }
            None => Ok(()),
        }
    }

    /// A FIFO may not take a name git reads in a work tree (see
    /// `plan::fifo_refused`).
    fn refuse_fifo(&mut self, place: &Place) -> Result<(), Errno> {
        let in_git_dir = identity_at(&place.dir, c"HEAD").is_some()
            || dir_path(&place.dir).is_some_and(|p| {
                p.strip_prefix(&self.guard.workspace).is_ok_and(|r| {
                    r.iter()
                        .any(|c| c.as_bytes() == b".git" || c.as_bytes().ends_with(b".git"))
                })
            });
        match crate::sandbox::plan::fifo_refused(&place.name, in_git_dir) {
            Some(why) => {
                let name = OsStr::from_bytes(&place.name).to_owned();
                self.refused(place, &name, why);
                Err(libc::EPERM)
            }
            None => Ok(()),
        }
    }

    /// One line for the launcher: `path\treason`.
    fn refused(&mut self, place: &Place, name: &OsStr, why: &str) {
        self.reported += 1;
        if self.reported > REPORTED_MAX {
            return;
        }
        let mut p = dir_path(&place.dir).unwrap_or_default();
        p.push(name);
        let shown = p
            .strip_prefix(&self.guard.workspace)
            .unwrap_or(&p)
            .to_string_lossy()
            .replace(['\t', '\n'], " ");
        // Non-blocking: a launcher that stopped reading must not stall the command.
        let mut shown = shown;
        if shown.len() > 400 {
            let mut cut = 400;
            while !shown.is_char_boundary(cut) {
                cut -= 1;
            }
            shown.truncate(cut);
            shown.push('…');
        }
        let _ = self.report.write_all(format!("{shown}\t{why}\n").as_bytes());
    }

    // ---- resolving, as the kernel would for the caller ----

    /// Copies a NUL-terminated path out of the caller's memory, a page at a
    /// time (a page beyond may be unmapped), then checks that the caller is
    /// still waiting in this call (so the tid was not reused).
    fn read_path(&self, c: &Caller, addr: u64) -> Result<Vec<u8>, Errno> {
        self.read_path_or_empty(c, addr, false)
    }

    fn read_path_or_empty(&self, c: &Caller, addr: u64, empty_ok: bool) -> Result<Vec<u8>, Errno> {
        if addr == 0 {
            return if empty_ok { Ok(Vec::new()) } else { Err(libc::EFAULT) };
        }
        let path = self.copy_path(c, addr)?;
        if path.is_empty() && !empty_ok {
            return Err(libc::ENOENT);
        }
        Ok(path)
    }

    fn copy_path(&self, c: &Caller, addr: u64) -> Result<Vec<u8>, Errno> {
        let mut out = Vec::new();
        let mut at = addr;
        let mut buf = [0u8; PATH_MAX];
        while out.len() < PATH_MAX {
            let page_left = 4096 - (at % 4096) as usize;
            let want = page_left.min(PATH_MAX - out.len());
            let n = read_memory(c.tid, at, &mut buf[..want]);
            if n <= 0 {
                return Err(match last() {
                    libc::ESRCH => libc::ESRCH,
                    _ => libc::EFAULT,
                });
            }
            let got = &buf[..n as usize];
            if let Some(end) = got.iter().position(|b| *b == 0) {
                out.extend_from_slice(&got[..end]);
                if !self.still_waiting(c) {
                    return Err(libc::ESRCH);
                }
                return Ok(out);
            }
            out.extend_from_slice(got);
            at += n as u64;
        }
        Err(libc::ENAMETOOLONG)
    }

    /// Where a relative path starts: the caller's working directory or the
    /// descriptor it passed. Absolute paths start at the root.
    fn start(&self, c: &Caller, dirfd: i32, path: &[u8]) -> Result<OwnedFd, Errno> {
        if path.first() == Some(&b'/') {
            return dup(&self.root);
        }
        let p = if dirfd == libc::AT_FDCWD {
            cstr(format!("/proc/{}/cwd", c.tid))
        } else if dirfd < 0 {
            return Err(libc::EBADF);
        } else {
            cstr(format!("/proc/{}/fd/{}", c.tid, dirfd))
        };
        let fd = open_path(None, &p, 0).map_err(|e| if e == libc::ENOENT { libc::EBADF } else { e })?;
        if !self.still_waiting(c) {
            return Err(libc::ESRCH);
        }
        Ok(fd)
    }

    /// Resolves all of `path` but its last component, from `start`.
    fn place(&self, c: &Caller, start: &OwnedFd, path: &[u8], links: &mut u32) -> Result<Place, Errno> {
        let trimmed_len = path.iter().rposition(|b| *b != b'/').map_or(0, |i| i + 1);
        if trimmed_len == 0 {
            // "/" (or "///"): no name to make; the kernel answers for the root.
            return Ok(Place {
                dir: dup(&self.root)?,
                name: b".".to_vec(),
                trailing_slash: false,
            });
        }
        let trimmed = &path[..trimmed_len];
        let trailing_slash = trimmed_len < path.len();
        let (dir_part, name) = match trimmed.iter().rposition(|b| *b == b'/') {
            // "/x": the directory part is the root itself.
            Some(0) => (&b"/"[..], &trimmed[1..]),
            Some(i) => (&trimmed[..i], &trimmed[i + 1..]),
            None => (&b"."[..], trimmed),
        };
        let dir = self.walk(c, start, dir_part, links)?;
        if self.is_foreign_proc(c, &dir) {
            return Err(libc::EACCES);
        }
        Ok(Place {
            dir,
            name: name.to_vec(),
            trailing_slash,
        })
    }

    /// Whether `fd` is in procfs below another process than the caller
    /// (`/proc/PID/...` whose PID is not of the caller's thread group, or a
    /// procfs the sandbox does not know). The guard (a thread of init, with
    /// CAP_SYS_PTRACE) could reach what the caller may not: init's memory
    /// and descriptors, an undumpable process's. Nothing the guard is asked
    /// to open or make there makes sense for another process anyway.
    fn is_foreign_proc(&self, c: &Caller, fd: &OwnedFd) -> bool {
        if !is_procfs(fd) {
            return false;
        }
        let Some(p) = dir_path(fd) else {
            return true;
        };
        let mut parts = p.components().skip(1);
        let (Some(top), pid) = (parts.next(), parts.next()) else {
            return true;
        };
        if top.as_os_str() != "proc" {
            // procfs mounted elsewhere: the sandbox has one, at /proc.
            return true;
        }
        match pid.map(|p| p.as_os_str().to_str().and_then(|s| s.parse::<i32>().ok())) {
            Some(Some(n)) => !self.of_caller(c, n),
            // /proc itself, /proc/sys...: no process's.
            _ => false,
        }
    }

    /// Whether `pid` is the caller's process or one of its threads (never init's).
    fn of_caller(&self, c: &Caller, pid: i32) -> bool {
        !self.own.contains(&pid) && (pid == c.tgid || tgid_of(pid) == Some(c.tgid))
    }

    /// The place a symlink at `place` leads to (its target read here,
    /// resolved from the symlink's directory).
    fn follow(&self, c: &Caller, place: Place, links: &mut u32) -> Result<Place, Errno> {
        *links += 1;
        if *links > MAX_LINKS {
            return Err(libc::ELOOP);
        }
        // /proc/self and /proc/thread-self mean the caller (readlink would
        // answer for the guard).
        let target = match place.name.as_slice() {
            b"self" if is_proc_root(&place.dir) => c.tgid.to_string().into_bytes(),
            b"thread-self" if is_proc_root(&place.dir) => format!("{}/task/{}", c.tgid, c.tid).into_bytes(),
            _ => readlinkat(&place.dir, &place.c_name())?,
        };
        let start = if target.first() == Some(&b'/') {
            dup(&self.root)?
        } else {
            place.dir
        };
        self.place(c, &start, &target, links)
    }

    /// Whether the symlink at `place` is one of procfs' magic links
    /// (`/proc/PID/fd/N`, `cwd`, `root`, `exe`...), which name an open file or
    /// directory rather than a path: only the kernel can follow them, and
    /// following one makes nothing. The PID there is explicit (never "self",
    /// see `walk`) and never init's.
    fn magic_link(&self, place: &Place) -> Result<bool, Errno> {
        if !is_procfs(&place.dir) {
            return Ok(false);
        }
        let target = readlinkat(&place.dir, &place.c_name())?;
        let plain_proc_symlink = target.starts_with(b"self")
            || target.starts_with(b"thread-self")
            || target.first().is_some_and(u8::is_ascii_digit);
        Ok(!plain_proc_symlink)
    }

    /// Resolves `path` from `start` to a directory, as the kernel would for
    /// the caller. Fast: one openat2 with no symlink allowed; if that meets a
    /// symlink, or ends in procfs, component by component.
    fn walk(&self, c: &Caller, start: &OwnedFd, path: &[u8], links: &mut u32) -> Result<OwnedFd, Errno> {
        let p = CString::new(path).map_err(|_| libc::EINVAL)?;
        match openat2_path(start, &p, libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS) {
            Ok(fd) if !is_procfs(&fd) => return Ok(fd),
            Ok(_) | Err(libc::ELOOP) => {}
            Err(e) => return Err(e),
        }
        let mut cur = if path.first() == Some(&b'/') {
            dup(&self.root)?
        } else {
            dup(start)?
        };
        let mut queue: VecDeque<Vec<u8>> = components(path);
        while let Some(part) = queue.pop_front() {
            if part == b"." {
                continue;
            }
            if is_proc_root(&cur) {
                // /proc/self and /proc/thread-self mean the caller here.
                if part == b"self" {
                    queue.push_front(c.tgid.to_string().into_bytes());
                    continue;
                }
                if part == b"thread-self" {
                    for p in [c.tid.to_string(), "task".into(), c.tgid.to_string()] {
                        queue.push_front(p.into_bytes());
                    }
                    continue;
                }
                // init's own entries: init holds capabilities in the namespace.
                if let Some(pid) = std::str::from_utf8(&part).ok().and_then(|s| s.parse::<i32>().ok()) {
                    if !self.of_caller(c, pid) {
                        return Err(libc::EACCES);
                    }
                }
            }
            let name = CString::new(part.clone()).map_err(|_| libc::EINVAL)?;
            match openat2_path(&cur, &name, libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS) {
                Ok(fd) => {
                    if self.is_foreign_proc(c, &fd) {
                        return Err(libc::EACCES);
                    }
                    cur = fd
                }
                Err(libc::ELOOP) => {
                    *links += 1;
                    if *links > MAX_LINKS {
                        return Err(libc::ELOOP);
                    }
                    let here = Place {
                        dir: dup(&cur)?,
                        name: part.clone(),
                        trailing_slash: false,
                    };
                    if self.magic_link(&here)? {
                        cur = open_path(Some(&cur), &name, 0)?;
                        if self.is_foreign_proc(c, &cur) {
                            return Err(libc::EACCES);
                        }
                        continue;
                    }
                    let target = readlinkat(&cur, &name)?;
                    if target.first() == Some(&b'/') {
                        cur = dup(&self.root)?;
                    }
                    for p in components(&target).into_iter().rev() {
                        queue.push_front(p);
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Ok(cur)
    }
}

/// Reads `buf.len()` bytes at `addr` in thread `tid`'s memory: the count
/// read (fewer at an unmapped page), or -1.
fn read_memory(tid: i32, addr: u64, buf: &mut [u8]) -> isize {
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: reads at most `buf.len()` bytes into `buf`; the remote range
    // is the caller's, checked by the kernel.
    unsafe { libc::process_vm_readv(tid, &local, 1, &remote, 1, 0) }
}

/// The caller's umask, made the guard's for the next entry (the guard's
/// own: it unshared its filesystem context).
fn take_umask(c: &Caller) {
    // SAFETY: umask takes a mode and cannot fail.
    unsafe { libc::umask(c.umask as libc::mode_t) };
}

fn components(path: &[u8]) -> VecDeque<Vec<u8>> {
    path.split(|b| *b == b'/')
        .filter(|p| !p.is_empty())
        .map(<[u8]>::to_vec)
        .collect()
}

/// A thread's process id and umask, from `/proc/TID/status`.
fn status_of(tid: i32) -> Option<(i32, u32)> {
    // One read of a page: the file is about 1.5 KiB, and procfs renders it
    // again for every read call (`fs::read` would make eight).
    let path = cstr(format!("/proc/{tid}/status"));
    let mut buf = [0u8; 4096];
    // SAFETY: open of a NUL-terminated path; read into our buffer of its
    // length; close of the descriptor we opened.
    let n = unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return None;
        }
        let n = libc::read(fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len());
        libc::close(fd);
        n
    };
    let status = buf.get(..usize::try_from(n).ok()?)?;
    let field = |name: &[u8]| {
        status
            .split(|b| *b == b'\n')
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| std::str::from_utf8(v).ok())
            .map(str::trim)
    };
    let tgid = field(b"Tgid:")?.parse().ok()?;
    let umask = u32::from_str_radix(field(b"Umask:")?, 8).ok()?;
    Some((tgid, umask))
}

fn tgid_of(tid: i32) -> Option<i32> {
    status_of(tid).map(|(t, _)| t)
}

fn check(r: libc::c_int) -> Result<i64, Errno> {
    if r < 0 {
        Err(last())
    } else {
        Ok(i64::from(r))
    }
}

fn dup(fd: &OwnedFd) -> Result<OwnedFd, Errno> {
    fd.try_clone().map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))
}

/// An `O_PATH` descriptor of `p` (from `at`, or absolute), symlinks followed
/// by the kernel: only for paths whose process is named explicitly.
fn open_path(at: Option<&OwnedFd>, p: &CStr, extra: i32) -> Result<OwnedFd, Errno> {
    // SAFETY: openat with a descriptor we own (or AT_FDCWD) and a
    // NUL-terminated path; the new descriptor is owned below.
    let fd = unsafe {
        libc::openat(
            at.map_or(libc::AT_FDCWD, |d| d.as_raw_fd()),
            p.as_ptr(),
            libc::O_PATH | libc::O_CLOEXEC | extra,
        )
    };
    if fd < 0 {
        return Err(last());
    }
    // SAFETY: a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn openat2_path(at: &OwnedFd, p: &CStr, resolve: u64) -> Result<OwnedFd, Errno> {
    openat2_fd(at, p, libc::O_PATH, 0, resolve)
}

fn openat2_fd(at: &OwnedFd, p: &CStr, flags: i32, mode: u64, resolve: u64) -> Result<OwnedFd, Errno> {
    let how = super::OpenHow {
        flags: (flags | libc::O_CLOEXEC) as u64,
        mode,
        resolve,
    };
    // SAFETY: openat2 with a descriptor we own, a NUL-terminated path and an
    // open_how of the size passed; the new descriptor is owned below.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            at.as_raw_fd(),
            p.as_ptr(),
            &how as *const super::OpenHow,
            std::mem::size_of::<super::OpenHow>(),
        )
    };
    if fd < 0 {
        return Err(last());
    }
    // SAFETY: a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// openat with the kernel following what it meets: for the guard's own
/// `/proc/self/fd/N` of a descriptor it checked.
fn openat_plain(at: Option<&OwnedFd>, p: &CStr, flags: i32, mode: u64) -> Result<OwnedFd, Errno> {
    let at = at.map_or(libc::AT_FDCWD, |d| d.as_raw_fd());
    // SAFETY: openat with a descriptor we own (or AT_FDCWD) and a NUL-terminated path.
    let fd = unsafe { libc::openat(at, p.as_ptr(), flags | libc::O_CLOEXEC, mode as libc::c_uint) };
    if fd < 0 {
        return Err(last());
    }
    // SAFETY: a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn readlinkat(at: &OwnedFd, name: &CStr) -> Result<Vec<u8>, Errno> {
    let mut buf = vec![0u8; PATH_MAX];
    // SAFETY: readlinkat into our buffer of its length.
    let n = unsafe {
        libc::readlinkat(
            at.as_raw_fd(),
            name.as_ptr(),
            buf.as_mut_ptr() as *mut libc::c_char,
            buf.len(),
        )
    };
    if n < 0 {
        return Err(last());
    }
    buf.truncate(n as usize);
    Ok(buf)
}

fn stat_at(place: &Place) -> Option<libc::stat> {
    let name = CString::new(place.name.clone()).ok()?;
    // SAFETY: fstatat into a zeroed stat, relative to a descriptor we own.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        (libc::fstatat(place.dir.as_raw_fd(), name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) == 0).then_some(st)
    }
}

fn is_dir(place: &Place) -> bool {
    stat_at(place).is_some_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR)
}

fn is_fifo_at(place: &Place) -> bool {
    stat_at(place).is_some_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFIFO)
}

fn is_symlink(place: &Place) -> bool {
    stat_at(place).is_some_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFLNK)
}

fn fstat(fd: &OwnedFd) -> Option<libc::stat> {
    // SAFETY: fstat into a zeroed stat for a descriptor we own.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        (libc::fstat(fd.as_raw_fd(), &mut st) == 0).then_some(st)
    }
}

fn is_fifo(fd: &OwnedFd) -> bool {
    fstat(fd).is_some_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFIFO)
}

fn is_procfs(fd: &OwnedFd) -> bool {
    // SAFETY: fstatfs into a zeroed statfs for a descriptor we own.
    unsafe {
        let mut s: libc::statfs = std::mem::zeroed();
        libc::fstatfs(fd.as_raw_fd(), &mut s) == 0 && s.f_type == libc::PROC_SUPER_MAGIC
    }
}

fn is_proc_root(fd: &OwnedFd) -> bool {
    // procfs' root directory is inode 1.
    is_procfs(fd) && fstat(fd).is_some_and(|st| st.st_ino == 1)
}

/// (device, inode, birth time) of `name` in the directory `dir`, not
/// following a final symlink; `None` if there is nothing there. The birth
/// time tells an inode number used again (a directory removed, another
/// made) from the one first seen.
fn identity_at(dir: &OwnedFd, name: &std::ffi::CStr) -> Option<(u64, u64, i64, u32)> {
    let mut stx = std::mem::MaybeUninit::<libc::statx>::uninit();
    // SAFETY: statx relative to a descriptor we own, with a NUL-terminated
    // name, into a buffer it fills on success (read only then).
    let r = unsafe {
        libc::statx(
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
            libc::STATX_INO | libc::STATX_BTIME,
            stx.as_mut_ptr(),
        )
    };
    (r == 0).then(|| {
        // SAFETY: statx succeeded, so the buffer is initialised.
        let stx = unsafe { stx.assume_init() };
        let dev = libc::makedev(stx.stx_dev_major, stx.stx_dev_minor);
        (dev, stx.stx_ino, stx.stx_btime.tv_sec, stx.stx_btime.tv_nsec)
    })
}

/// The path of an open directory, as this mount namespace shows it.
fn dir_path(fd: &OwnedFd) -> Option<PathBuf> {
    let p = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()?;
    // A directory removed meanwhile: where it was (nothing can be made in
    // it; the kernel answers ENOENT).
    let b = p.as_os_str().as_bytes();
    Some(match b.strip_suffix(b" (deleted)") {
        Some(kept) => PathBuf::from(OsStr::from_bytes(kept)),
        None => p,
    })
}
