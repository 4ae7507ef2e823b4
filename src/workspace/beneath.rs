//! Reaching into the workspace without ever leaving it.
//!
//! The launcher changes the real workspace after a run (landing a capture,
//! moving a protected path aside), possibly as root, while other sandboxes
//! may still be running in the same workspace and swapping a directory on
//! the way for a symlink to somewhere else. Every such change therefore
//! resolves the *directory* it works in with `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS)` from a descriptor of the workspace, and then acts
//! on one name relative to that descriptor (`renameat`, `mkdirat`,
//! `openat(O_NOFOLLOW)`): nothing swapped on the path meanwhile can redirect
//! it, and a final name is never followed.

use std::ffi::{CString, OsStr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

/// The kernel's `struct open_how` (libc's is non-exhaustive).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

fn invalid() -> std::io::Error {
    std::io::Error::from_raw_os_error(libc::EINVAL)
}

pub fn cstr(name: &OsStr) -> std::io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| invalid())
}

fn check(r: libc::c_int) -> std::io::Result<()> {
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// A directory of the workspace, opened `O_PATH`.
pub struct Dir(OwnedFd);

impl Dir {
    /// A directory by its path, as given (the workspace itself, or one of
    /// the launcher's own).
    pub fn root(ws: &Path) -> std::io::Result<Dir> {
        let c = cstr(ws.as_os_str())?;
        // SAFETY: open with a NUL-terminated path; the descriptor is owned below.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor nobody else owns.
        Ok(Dir(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    pub fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    pub fn into_fd(self) -> OwnedFd {
        self.0
    }

    /// Everything written on this directory's filesystem, on disk
    /// (`syncfs`), through a readable descriptor: the kernel refuses one
    /// opened `O_PATH`.
    pub fn sync_filesystem(&self) -> std::io::Result<()> {
        let dir = self.readable()?;
        // SAFETY: syncfs on a descriptor we own.
        if unsafe { libc::syncfs(dir.as_raw_fd()) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// The names this directory holds (`.` and `..` left out), read
    /// through a readable descriptor of this very directory.
    pub fn names(&self) -> std::io::Result<Vec<std::ffi::OsString>> {
        use std::os::unix::ffi::OsStrExt;
        let mut d = nix::dir::Dir::from_fd(self.readable()?)?;
        Ok(d.iter()
            .flatten()
            .map(|e| OsStr::from_bytes(e.file_name().to_bytes()).to_os_string())
            .filter(|n| n != "." && n != "..")
            .collect())
    }

    /// This directory again, readable (an `O_PATH` descriptor lists and
    /// syncs nothing).
    fn readable(&self) -> std::io::Result<OwnedFd> {
        // SAFETY: openat of "." relative to a descriptor we own; the result
        // is owned below.
        let fd = unsafe {
            libc::openat(
                self.fd(),
                c".".as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor nobody else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// `rel` (relative, no `..`), beneath this directory, through real
    /// directories only. `""` is this directory again.
    pub fn dir(&self, rel: &Path) -> std::io::Result<Dir> {
        self.open_dir(rel, libc::RESOLVE_NO_SYMLINKS)
    }

    /// `rel` beneath this directory, following symlinks only while they stay
    /// beneath it (EXDEV otherwise): a `.git` that is a link to a directory
    /// of the workspace is still reached.
    pub fn dir_within(&self, rel: &Path) -> std::io::Result<Dir> {
        self.open_dir(rel, 0)
    }

    fn open_dir(&self, rel: &Path, extra: u64) -> std::io::Result<Dir> {
        if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
            return Err(invalid());
        }
        let path = if rel.as_os_str().is_empty() {
            cstr(OsStr::new("."))?
        } else {
            cstr(rel.as_os_str())?
        };
        let how = OpenHow {
            flags: (libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) as u64,
            mode: 0,
            resolve: libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS | extra,
        };
        // SAFETY: openat2 with a directory fd we own, a NUL-terminated path
        // and an open_how of the size passed; the descriptor is owned below.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                self.fd(),
                path.as_ptr(),
                &how as *const OpenHow,
                std::mem::size_of::<OpenHow>(),
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor nobody else owns.
        Ok(Dir(unsafe { OwnedFd::from_raw_fd(fd as RawFd) }))
    }

    /// `rel`'s directories made where missing (`mode`, less the umask; and
    /// `owner`'s when given), then opened.
    pub fn make_dirs(&self, rel: &Path, mode: u32, owner: Option<(u32, u32)>) -> std::io::Result<Dir> {
        let mut cur = self.dir(Path::new(""))?;
        for c in rel.components() {
            let Component::Normal(name) = c else {
                return Err(invalid());
            };
            let n = cstr(name)?;
            // SAFETY: mkdirat relative to a directory fd we own, NUL-terminated name.
            let made = unsafe { libc::mkdirat(cur.fd(), n.as_ptr(), mode) } == 0;
            if !made {
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() != Some(libc::EEXIST) {
                    return Err(e);
                }
            }
            if let (true, Some((u, g))) = (made, owner) {
                cur.lchown(name, u, g)?;
            }
            cur = cur.dir(Path::new(name))?;
        }
        Ok(cur)
    }

    /// Whether `name` exists here (never followed).
    pub fn has(&self, name: &OsStr) -> bool {
        let Ok(n) = cstr(name) else { return false };
        // SAFETY: fstatat into a local stat buffer, NUL-terminated name.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        unsafe { libc::fstatat(self.fd(), n.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) == 0 }
    }

    /// renameat from `from`/`name` to here/`to`.
    pub fn rename_from(&self, from: &Dir, name: &OsStr, to: &OsStr) -> std::io::Result<()> {
        let (a, b) = (cstr(name)?, cstr(to)?);
        // SAFETY: renameat between two directory fds we own, NUL-terminated names.
        check(unsafe { libc::renameat(from.fd(), a.as_ptr(), self.fd(), b.as_ptr()) })
    }

    /// A new directory `name` here with `mode` (exactly: the umask is undone
    /// on the directory's own descriptor), owned by `owner` when given.
    pub fn make_dir(&self, name: &OsStr, mode: u32, owner: Option<(u32, u32)>) -> std::io::Result<()> {
        let n = cstr(name)?;
        // SAFETY: mkdirat relative to a directory fd we own, NUL-terminated name.
        check(unsafe { libc::mkdirat(self.fd(), n.as_ptr(), 0o700) })?;
        let f = self.open_nofollow(name, libc::O_RDONLY | libc::O_DIRECTORY, 0)?;
        // SAFETY: fchmod/fchown on a descriptor we own.
        check(unsafe { libc::fchmod(f.as_raw_fd(), mode) })?;
        if let Some((u, g)) = owner {
            check(unsafe { libc::fchown(f.as_raw_fd(), u, g) })?;
        }
        Ok(())
    }

    /// openat(`name`, flags | O_NOFOLLOW | O_CLOEXEC).
    pub fn open_nofollow(&self, name: &OsStr, flags: libc::c_int, mode: u32) -> std::io::Result<std::fs::File> {
        let n = cstr(name)?;
        // SAFETY: openat relative to a directory fd we own; the descriptor is owned below.
        let fd = unsafe { libc::openat(self.fd(), n.as_ptr(), flags | libc::O_NOFOLLOW | libc::O_CLOEXEC, mode) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor nobody else owns.
        Ok(unsafe { std::fs::File::from_raw_fd(fd) })
    }

    /// unlinkat(`name`), a file or symlink (never followed).
    pub fn unlink(&self, name: &OsStr) -> std::io::Result<()> {
        let n = cstr(name)?;
        // SAFETY: unlinkat relative to a directory fd we own.
        check(unsafe { libc::unlinkat(self.fd(), n.as_ptr(), 0) })
    }

    /// symlinkat(`target`, here/`name`).
    pub fn symlink(&self, target: &Path, name: &OsStr) -> std::io::Result<()> {
        let (t, n) = (cstr(target.as_os_str())?, cstr(name)?);
        // SAFETY: symlinkat with NUL-terminated strings and a directory fd we own.
        check(unsafe { libc::symlinkat(t.as_ptr(), self.fd(), n.as_ptr()) })
    }

    /// fchownat(`name`, AT_SYMLINK_NOFOLLOW).
    pub fn lchown(&self, name: &OsStr, uid: u32, gid: u32) -> std::io::Result<()> {
        let n = cstr(name)?;
        // SAFETY: fchownat relative to a directory fd we own, never following.
        check(unsafe { libc::fchownat(self.fd(), n.as_ptr(), uid, gid, libc::AT_SYMLINK_NOFOLLOW) })
    }
}

/// `rel` split into its directory and its last name.
pub fn split(rel: &Path) -> std::io::Result<(&Path, &OsStr)> {
    let name = rel.file_name().ok_or_else(invalid)?;
    Ok((rel.parent().unwrap_or(Path::new("")), name))
}
