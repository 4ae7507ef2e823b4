//! Where tether-exec keeps its state (approvals, audit): outside every sandbox.
//!
//! tether starts the launcher with `HOME` set to the workspace, so `$HOME`
//! alone must not place the state directory: the default uses the account's
//! home from the password database. A state directory inside the workspace is
//! refused by the planner, because the sandboxed command could reach it.

use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("cannot find a home directory for uid {0} in the password database; pass --state-dir or set TETHER_EXEC_STATE_DIR")]
    NoHome(u32),
    #[error("cannot create the state directory {path}: {source}")]
    Create {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Someone else could write it: what the launcher later acts on from
    /// there (captures it lands or removes, spares, the secret scan's cache,
    /// owed checks) could be planted.
    #[error("the state directory {path} is {why}: another account could plant there what tether-exec acts on (captures it lands or removes, its caches) and tamper with approvals and the audit trail; make it yours and writable by you alone (chown, chmod go-w), or pass another with --state-dir")]
    NotPrivate { path: PathBuf, why: String },
    /// Approvals bind the boot: without its id they could outlive one.
    #[error("cannot read this boot's id from /proc/sys/kernel/random/boot_id ({0}); approvals are bound to it, so none can be held or resumed")]
    NoBootId(std::io::Error),
}

/// The invoking account's home directory, from the password database (not `$HOME`).
///
/// `/etc/passwd` is read directly first: it is what nearly every account
/// uses, it costs one small read instead of loading the NSS configuration
/// (this runs on every command), and it works the same in the statically
/// linked release binary. Accounts that only a network directory knows
/// (sssd, LDAP) fall through to the C library's lookup.
pub fn account_home() -> Option<PathBuf> {
    static HOME: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    HOME.get_or_init(|| {
        let uid = nix::unistd::getuid();
        std::fs::read("/etc/passwd")
            .ok()
            .and_then(|text| home_in_passwd(&text, uid.as_raw()))
            .or_else(|| nix::unistd::User::from_uid(uid).ok().flatten().map(|u| u.dir))
    })
    .clone()
}

/// The home field of `uid`'s line in a passwd(5) file (first match wins, as in glibc).
fn home_in_passwd(text: &[u8], uid: u32) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    text.split(|b| *b == b'\n').find_map(|line| {
        let f: Vec<&[u8]> = line.split(|b| *b == b':').collect();
        if f.len() < 7 || f[0].starts_with(b"+") || f[0].starts_with(b"-") {
            return None;
        }
        let line_uid: u32 = std::str::from_utf8(f[2]).ok()?.parse().ok()?;
        (line_uid == uid && f[5].starts_with(b"/")).then(|| PathBuf::from(std::ffi::OsStr::from_bytes(f[5])))
    })
}

/// The state directory: explicit, else `$XDG_STATE_HOME/tether-exec`, else
/// `<account home>/.local/state/tether-exec`.
pub fn resolve(explicit: Option<PathBuf>) -> Result<PathBuf, StateError> {
    if let Some(p) = explicit {
        return Ok(p);
    }
    if let Some(x) = std::env::var_os("XDG_STATE_HOME").filter(|x| !x.is_empty()) {
        let p = PathBuf::from(x);
        if p.is_absolute() {
            return Ok(p.join("tether-exec"));
        }
    }
    let uid = nix::unistd::getuid().as_raw();
    let home = account_home().ok_or(StateError::NoHome(uid))?;
    Ok(home.join(".local/state/tether-exec"))
}

/// The directory `p` names, every symlink resolved (as `canonicalize`), or
/// `None` if it is not a directory. The kernel resolves the whole path in one
/// `open(O_PATH)` and procfs names what it found: three system calls, not a
/// `readlink` per component and a `stat` (the workspace and the state
/// directory are resolved on every launch). Without procfs, `canonicalize`.
pub fn real_dir(p: &std::path::Path) -> Option<PathBuf> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let dir = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
        .open(p)
        .ok()?;
    match std::fs::read_link(format!("/proc/self/fd/{}", dir.as_raw_fd())) {
        // A directory removed meanwhile reads as "PATH (deleted)", which the
        // `is_dir` turns away (unless a directory of that very name exists).
        Ok(real) if real.is_absolute() => real.is_dir().then_some(real),
        Ok(_) => None,
        Err(_) => std::fs::canonicalize(p).ok().filter(|r| r.is_dir()),
    }
}

/// Create the state directory (mode 0700) if needed and return its canonical
/// path; refused unless it is ours and nobody else can write it.
pub fn ensure(dir: &std::path::Path) -> Result<PathBuf, StateError> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| StateError::Create {
            path: dir.to_path_buf(),
            source: e,
        })?;
    let real = match real_dir(dir) {
        Some(real) => real,
        None => std::fs::canonicalize(dir).map_err(|e| StateError::Create {
            path: dir.to_path_buf(),
            source: e,
        })?,
    };
    let meta = std::fs::metadata(&real).map_err(|e| StateError::Create {
        path: real.clone(),
        source: e,
    })?;
    let euid = nix::unistd::geteuid().as_raw();
    let why = if meta.uid() != euid {
        Some(format!("owned by uid {}, not by uid {euid}", meta.uid()))
    } else if meta.mode() & 0o022 != 0 {
        Some(format!("writable by others (mode {:o})", meta.mode() & 0o7777))
    } else {
        None
    };
    match why {
        Some(why) => Err(StateError::NotPrivate { path: real, why }),
        None => Ok(real),
    }
}

/// This environment's instance id: the machine's boot id, this state
/// directory's own random id (created once) and its identity on disk
/// (inode and birth time), and the workspace path. An approval made here does
/// not work in a copy of the workspace elsewhere, after a reboot, or with
/// another state directory, a copy of this one included (its random id
/// copied along, a copy would hold the approval unspent after the original
/// spent it).
pub fn env_instance_id(state_dir: &std::path::Path, workspace: &std::path::Path) -> Result<String, StateError> {
    use sha2::{Digest, Sha256};
    use std::io::Write;
    use std::os::unix::fs::MetadataExt;
    let file = state_dir.join("instance");
    let id = match std::fs::read_to_string(&file) {
        Ok(s) if s.trim().len() == 32 => s.trim().to_string(),
        _ => {
            let mut b = [0u8; 16];
            getrandom::fill(&mut b).map_err(|e| StateError::Create {
                path: file.clone(),
                source: std::io::Error::other(e.to_string()),
            })?;
            let id = crate::policy::hex(&b);
            let tmp = state_dir.join(format!("instance.tmp{}", std::process::id()));
            let mut f = std::fs::File::create(&tmp).map_err(|e| StateError::Create {
                path: tmp.clone(),
                source: e,
            })?;
            f.write_all(id.as_bytes()).map_err(|e| StateError::Create {
                path: tmp.clone(),
                source: e,
            })?;
            // Two first runs racing: the first link wins and both read it.
            let _ = std::fs::hard_link(&tmp, &file);
            let _ = std::fs::remove_file(&tmp);
            std::fs::read_to_string(&file)
                .map_err(|e| StateError::Create {
                    path: file.clone(),
                    source: e,
                })?
                .trim()
                .to_string()
        }
    };
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").map_err(StateError::NoBootId)?;
    if boot.trim().is_empty() {
        return Err(StateError::NoBootId(std::io::Error::other("it is empty")));
    }
    // Its inode and birth time, not its device: a device number is not
    // kept across an NFS or autofs remount or a container's restart, which
    // would void every approval; a copy gets a new inode and birth time.
    let dir = std::fs::metadata(state_dir).map_err(|e| StateError::Create {
        path: state_dir.to_path_buf(),
        source: e,
    })?;
    let born = dir
        .created()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    let mut h = Sha256::new();
    h.update(boot.trim().as_bytes());
    h.update([0]);
    h.update(id.as_bytes());
    h.update([0]);
    h.update(format!("{}:{born}", dir.ino()).as_bytes());
    h.update([0]);
    h.update(workspace.as_os_str().as_encoded_bytes());
    Ok(format!("env_{}", &crate::policy::hex(&h.finalize())[..24]))
}

/// Make sure the name of a database's write-ahead log is on disk, before a
/// commit that must survive a power cut relies on it.
///
/// `synchronous = FULL` syncs the WAL's bytes at commit, not its entry in
/// the directory. The bundled SQLite is built with `SQLITE_DISABLE_DIRSYNC`
/// (`.cargo/config.toml`): otherwise every process fsyncs the directory the
/// first time it syncs the WAL, because it opened it with `O_CREAT` and
/// cannot tell whether it made it; one more fsync in every durable commit
/// (0.2 to 2 ms here). Here the directory is synced once per WAL file: after the
/// sync, `<db>-wal.synced` is made a hard link to the WAL, and while the WAL
/// is still that file (same device and inode), nothing is synced again. The
/// link keeps the inode alive, so a WAL made since (first use, another
/// SQLite client deleted it on close, a process killed before its sync)
/// cannot have its number: it does not match, and is synced. The caller
/// holds the database open, so SQLite cannot delete and remake the WAL
/// between the sync and the link. Without the link (a filesystem that has
/// none), every call syncs. A copy of the state directory that keeps hard
/// links (`cp -a`, `rsync -H`) brings a matching marker whose sync happened
/// elsewhere: the first durable commit after a restore is then as durable as
/// the filesystem's own commit makes it.
pub fn make_wal_name_durable(db: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let wal = with_suffix(db, "-wal");
    let marker = with_suffix(db, "-wal.synced");
    if let (Ok(w), Ok(m)) = (std::fs::symlink_metadata(&wal), std::fs::symlink_metadata(&marker)) {
        if w.dev() == m.dev() && w.ino() == m.ino() {
            return Ok(());
        }
    }
    std::fs::File::open(db.parent().unwrap_or(Path::new(".")))?.sync_all()?;
    let _ = std::fs::remove_file(&marker);
    let _ = std::fs::hard_link(&wal, &marker);
    Ok(())
}

/// Remove the marker of [`make_wal_name_durable`] when it is the last link
/// to a WAL another SQLite client deleted: it would keep that WAL's bytes
/// (held actions' stdin among them) on disk until the next durable commit.
pub fn drop_stale_wal_marker(db: &Path) {
    use std::os::unix::fs::MetadataExt;
    let marker = with_suffix(db, "-wal.synced");
    if std::fs::symlink_metadata(&marker).is_ok_and(|m| m.is_file() && m.nlink() == 1) {
        let _ = std::fs::remove_file(&marker);
    }
}

fn with_suffix(p: &Path, suffix: &str) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// Past this size a database's WAL is folded back into it when a process closes it.
const WAL_LIMIT_BYTES: u64 = 256 * 1024;

/// Keep a state database's write-ahead log short.
///
/// The databases here keep their WAL between processes: checkpointing it at
/// every close costs two fsyncs per command. But each command is a new
/// process and the first to open the database, so SQLite rebuilds the WAL
/// index by reading every frame of the log, and, having forgotten how much
/// was already copied back, never starts the log over: left alone it grows
/// with every command and so does the cost of opening it. So the process
/// that closes a database whose WAL has passed `WAL_LIMIT_BYTES` copies it
/// back and truncates it (`wal_checkpoint(TRUNCATE)`), without waiting: if
/// another process is using the database, a later one does it.
pub fn keep_wal_short(conn: &rusqlite::Connection, db: &Path) {
    let wal = with_suffix(db, "-wal");
    let long = std::fs::metadata(&wal).is_ok_and(|m| m.len() > WAL_LIMIT_BYTES);
    if long && conn.busy_timeout(std::time::Duration::ZERO).is_ok() {
        let _ = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwd_lines_are_read_like_the_c_library() {
        let text = b"root:x:0:0:root:/root:/bin/bash\n+nis::::::\nbad line\nme:x:1000:1000:Me,,,:/home/me:/bin/sh\ndup:x:1000:1000::/home/dup:/bin/sh\nrel:x:7:7::relative:/bin/sh\n";
        assert_eq!(home_in_passwd(text, 0), Some(PathBuf::from("/root")));
        assert_eq!(home_in_passwd(text, 1000), Some(PathBuf::from("/home/me")));
        assert_eq!(home_in_passwd(text, 7), None);
        assert_eq!(home_in_passwd(text, 4242), None);
    }

    #[test]
    fn a_wal_name_is_synced_once_per_wal_file() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("x.sqlite");
        let (wal, marker) = (dir.path().join("x.sqlite-wal"), dir.path().join("x.sqlite-wal.synced"));
        let ino = |p: &Path| std::fs::symlink_metadata(p).unwrap().ino();
        std::fs::write(&wal, b"").unwrap();
        make_wal_name_durable(&db).unwrap();
        let first = ino(&wal);
        assert_eq!(ino(&marker), first, "the synced WAL is linked");
        // The same file: left as it is. A new WAL cannot take the old one's
        // inode number (the link keeps it): it is synced and linked anew.
        make_wal_name_durable(&db).unwrap();
        assert_eq!(ino(&marker), first);
        std::fs::remove_file(&wal).unwrap();
        std::fs::write(&wal, b"").unwrap();
        assert_ne!(ino(&wal), first, "the freed number is still taken");
        make_wal_name_durable(&db).unwrap();
        assert_eq!(ino(&marker), ino(&wal));
        // A marker that is not a link to the WAL (copied, torn) only costs a sync.
        std::fs::remove_file(&marker).unwrap();
        std::fs::write(&marker, b"").unwrap();
        make_wal_name_durable(&db).unwrap();
        assert_eq!(ino(&marker), ino(&wal));
        // While it links the WAL it stays; the last link to a deleted WAL goes.
        drop_stale_wal_marker(&db);
        assert!(marker.exists());
        std::fs::remove_file(&wal).unwrap();
        drop_stale_wal_marker(&db);
        assert!(!marker.exists(), "a deleted WAL's bytes were kept");
    }

    #[test]
    fn the_account_home_matches_the_password_database() {
        let uid = nix::unistd::getuid();
        let libc_view = nix::unistd::User::from_uid(uid).ok().flatten().map(|u| u.dir);
        assert_eq!(account_home(), libc_view);
    }
}
