//! Directory listings the secret scan keeps between runs.
//!
//! Every writable run scans the workspace for `.env*` and key files twice:
//! before, to hide them, and after, to move new ones aside (see
//! [`super::scan_secrets`]). Reading a directory costs the kernel about half a
//! microsecond per entry on ext4 (its hashed-directory walk), so in a
//! workspace of a few thousand files the two scans cost more than building
//! the sandbox. What the scan needs of a directory is small: the names of its
//! subdirectories and of its entries that look like secrets. That is kept
//! here for each directory, with the directory's identity and change time as
//! they were when it was read, and used again only while the directory still
//! has exactly that identity and change time: one `stat` instead of a read.
//!
//! The stamp is the directory's device, inode, change time and modification
//! time. Why the change time: adding, removing or renaming an entry sets a
//! directory's ctime to the current time, and no unprivileged process can set
//! a ctime (`utimensat` sets mtime and atime, and *updates* ctime). A run in a
//! sandbox that makes a `.env` changes its directory's ctime like anyone else.
//! What could still repeat a stamp, and is therefore never cached: an
//! encrypted directory (fscrypt: adding or removing its key changes the names
//! it lists, not its times), a filesystem that keeps whole seconds (its
//! ctimes have no fraction; a clock set back could meet a cached second), an
//! entry whose type only a lookup gives. A cache written "later" than now (the
//! clock was set back since) is not read. What remains assumed: that the
//! clock is not set back by more than [`RACY_MARGIN`] and a directory then
//! changed within the very tick a cached stamp holds; nothing in a sandbox can
//! set the clock.
//!
//! Racy listings: file times come from a clock that advances in ticks, so a
//! change made in the same tick as our read could leave the ctime as we saw
//! it. A listing is kept only if the directory's ctime was more than
//! [`RACY_MARGIN`] older than the moment its read began: any later change then
//! carries a later ctime. (Git's index has the same rule for the same
//! reason.) Only directories on the workspace's own filesystem are kept, and
//! only when that is a local filesystem stamped by this machine's clock.
//!
//! The cache lives in the state directory, which no sandbox can see. Anything
//! wrong with it (missing, unreadable, damaged, written by another version)
//! means the directories are read; a cache that cannot be written costs speed,
//! never a missed secret.

use super::cachefile::{Reader, Writer};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How much older than the start of its read a directory's ctime must be for
/// the listing to be kept: far more than any filesystem's timestamp tick.
pub const RACY_MARGIN: Duration = Duration::from_secs(1);

/// Names the cache's format; the version of the rules that chose its hits
/// follows it (`SECRET_NAME_RULES`). A cache written otherwise is not read.
const MAGIC: &[u8] = b"tether-exec secret-scan listings 2\n";

/// Filesystems whose directory ctimes this machine's clock stamps, and which
/// nothing but this kernel changes (not NFS, FUSE or overlayfs), with
/// whether they can encrypt a directory (fscrypt). On those a directory is
/// cached only if `statx` says whether it is encrypted, and it is not.
const LOCAL_FILESYSTEMS: &[(i64, bool)] = &[
    (0xEF53, true),       // ext2/3/4
    (0xF2F5_2010, true),  // f2fs
    (0x9123_683E, true),  // btrfs (its statx does not report encryption yet: never cached)
    (0x5846_5342, false), // xfs
    (0x0102_1994, false), // tmpfs
];

/// An entry's kind, by its directory entry (a symlink is `Other`, whatever
/// it points at).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    Dir,
    File,
    Other,
}

/// What the scan needs of one directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing {
    stamp: Stamp,
    /// Names of the entries that are directories (by their directory entry
    /// type: a symlink to a directory is not one).
    pub subdirs: Vec<Vec<u8>>,
    /// Names of the entries the scan wants.
    pub hits: Vec<Vec<u8>>,
}

/// A directory's identity and times when it was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    ctime: (i64, i64),
    mtime: (i64, i64),
}

impl Stamp {
    /// Whether a change after `read_began` could have left this stamp as it is.
    fn racy(&self, read_began: SystemTime) -> bool {
        let Ok(since) = read_began.duration_since(UNIX_EPOCH) else {
            return true;
        };
        let (secs, nanos) = self.ctime;
        let Ok(secs) = u64::try_from(secs) else { return true };
        let ctime = Duration::new(secs, u32::try_from(nanos).unwrap_or(0));
        ctime + RACY_MARGIN >= since
    }
}

/// The listings of one workspace: those read from the cache, and those this
/// scan saw (which replace them when it is saved).
pub struct Listings {
    workspace: PathBuf,
    file: Option<PathBuf>,
    root_dev: Option<u64>,
    /// The workspace's filesystem has no fscrypt.
    never_encrypted: bool,
    old: HashMap<Vec<u8>, Listing>,
    seen: HashMap<Vec<u8>, Listing>,
}

impl Listings {
    /// The cached listings of `workspace` in the state directory `state`
    /// (none where its filesystem is not cached: see [`LOCAL_FILESYSTEMS`]).
    pub fn load(state: &Path, workspace: &Path) -> Listings {
        let local = local_filesystem(workspace);
        let root_dev = std::fs::metadata(workspace)
            .ok()
            .filter(|_| local.is_some())
            .map(|m| m.dev());
        let file = root_dev.map(|_| cache_file(state, workspace));
        let old = file
            .as_deref()
            .and_then(|f| std::fs::read(f).ok())
            .and_then(|bytes| decode(&bytes, workspace))
            .unwrap_or_default();
        Listings {
            workspace: workspace.to_path_buf(),
            file,
            root_dev,
            never_encrypted: local == Some(false),
            old,
            seen: HashMap::new(),
        }
    }

    /// The listing of `dir` (at `rel` in the workspace): the cached one if
    /// the directory is unchanged since, else read now. `None` if it cannot
    /// be read. `want` chooses the hits from an entry's name and kind.
    ///
    /// The directory is opened once and its stamp, its entries and the type
    /// of any entry the filesystem does not type all come from that
    /// descriptor: a directory swapped for another between a lookup by path
    /// and the read could otherwise lend its stamp to the other's entries.
    ///
    /// Never kept: an encrypted directory (fscrypt: adding or removing its
    /// key changes the names it lists, not its times); one whose change time
    /// has no fraction of a second (a filesystem that keeps whole seconds,
    /// where a clock set back can repeat a stamp); one with an entry the
    /// filesystem does not type; one read only in part.
    pub fn list(&mut self, rel: &Path, dir: &Path, want: &dyn Fn(&str, EntryKind) -> bool) -> Option<Listing> {
        let key = rel.as_os_str().as_bytes().to_vec();
        let read_began = SystemTime::now();
        let mut handle = nix::dir::Dir::open(
            dir,
            nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_DIRECTORY | nix::fcntl::OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .ok()?;
        let fd = std::os::fd::AsRawFd::as_raw_fd(&handle);
        let st = statx_at(fd, c"", libc::AT_EMPTY_PATH).ok()?;
        let stamp = Stamp {
            dev: libc::makedev(st.stx_dev_major, st.stx_dev_minor),
            ino: st.stx_ino,
            ctime: (st.stx_ctime.tv_sec, i64::from(st.stx_ctime.tv_nsec)),
            mtime: (st.stx_mtime.tv_sec, i64::from(st.stx_mtime.tv_nsec)),
        };
        let unencrypted = (self.never_encrypted || st.stx_attributes_mask & ATTR_ENCRYPTED != 0)
            && st.stx_attributes & ATTR_ENCRYPTED == 0;
        let cacheable = self.root_dev == Some(stamp.dev) && unencrypted && stamp.ctime.1 != 0;
        if cacheable {
            if let Some(l) = self.old.get(&key).filter(|l| l.stamp == stamp) {
                let l = l.clone();
                self.seen.insert(key, l.clone());
                return Some(l);
            }
        }
        let mut listing = Listing {
            stamp,
            subdirs: Vec::new(),
            hits: Vec::new(),
        };
        // A read that fails midway keeps what it found, and is not kept.
        let mut complete = true;
        for e in handle.iter() {
            let Ok(e) = e else {
                complete = false;
                break;
            };
            let name = e.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            use nix::dir::Type;
            let kind = match e.file_type() {
                Some(Type::Directory) => EntryKind::Dir,
                Some(Type::File) => EntryKind::File,
                Some(_) => EntryKind::Other,
                // Filesystems that do not fill in the type: ask, relative to
                // the directory read, and keep no listing of it.
                None => {
                    complete = false;
                    match statx_at(fd, e.file_name(), libc::AT_SYMLINK_NOFOLLOW) {
                        Ok(m) if u32::from(m.stx_mode) & libc::S_IFMT == libc::S_IFDIR => EntryKind::Dir,
                        Ok(m) if u32::from(m.stx_mode) & libc::S_IFMT == libc::S_IFREG => EntryKind::File,
                        Ok(_) => EntryKind::Other,
                        Err(_) => continue,
                    }
                }
            };
            if kind == EntryKind::Dir {
                listing.subdirs.push(name.to_vec());
            } else if want(&String::from_utf8_lossy(name), kind) {
                listing.hits.push(name.to_vec());
            }
        }
        if cacheable && complete && !stamp.racy(read_began) {
            self.seen.insert(key, listing.clone());
        }
        Some(listing)
    }

    /// Writes what this scan saw, if it differs from what was cached (best
    /// effort: see the module docs).
    pub fn save(self) {
        let Some(file) = &self.file else { return };
        if self.seen == self.old {
            return;
        }
        let Some(dir) = file.parent() else { return };
        super::cachefile::write_in_place(dir, file, &encode(&self.workspace, &self.seen));
    }
}

/// `STATX_ATTR_ENCRYPTED` (linux/stat.h).
const ATTR_ENCRYPTED: u64 = 0x800;

/// statx(2) of `name` relative to the directory `dirfd`, by the raw system
/// call: the standard library declares glibc's `statx` weak, and a static
/// link can leave it at address 0 (see `overlay::same_mount`).
fn statx_at(dirfd: std::os::fd::RawFd, name: &std::ffi::CStr, flags: libc::c_int) -> std::io::Result<libc::statx> {
    // SAFETY: statx into a zeroed local buffer with a NUL-terminated name;
    // the kernel writes at most size_of::<statx>() bytes.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    let r = unsafe {
        libc::syscall(
            libc::SYS_statx,
            dirfd,
            name.as_ptr(),
            flags,
            libc::STATX_BASIC_STATS,
            &mut st as *mut libc::statx,
        )
    };
    if r == 0 {
        Ok(st)
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Whether `path` is on one of [`LOCAL_FILESYSTEMS`] (`None` if not), and
/// whether that one can encrypt.
// `f_type`'s type differs between architectures.
#[allow(clippy::unnecessary_cast)]
pub(super) fn local_filesystem(path: &Path) -> Option<bool> {
    let kind = nix::sys::statfs::statfs(path).ok()?.filesystem_type().0 as i64;
    LOCAL_FILESYSTEMS
        .iter()
        .find(|(k, _)| *k == kind)
        .map(|&(_, can_encrypt)| can_encrypt)
}

/// `<state>/scan/<digest of the workspace path>`.
fn cache_file(state: &Path, workspace: &Path) -> PathBuf {
    let digest = Sha256::digest(workspace.as_os_str().as_bytes());
    state.join("scan").join(&crate::policy::hex(&digest)[..32])
}

// The file (see `cachefile`): MAGIC, the version of the rules that chose
// its hits, the moment it was written, the workspace path (a digest
// collision, or a file copied between state directories, must not pass for
// another workspace's), the listings.

fn encode(workspace: &Path, listings: &HashMap<Vec<u8>, Listing>) -> Vec<u8> {
    let mut w = Writer::new(MAGIC);
    w.u32(crate::policy::SECRET_NAME_RULES as usize);
    w.now();
    w.bytes(workspace.as_os_str().as_bytes());
    w.u32(listings.len());
    for (rel, l) in listings {
        w.bytes(rel);
        let s = &l.stamp;
        w.u64(s.dev);
        w.u64(s.ino);
        for n in [s.ctime.0, s.ctime.1, s.mtime.0, s.mtime.1] {
            w.i64(n);
        }
        for names in [&l.subdirs, &l.hits] {
            w.u32(names.len());
            for n in names {
                w.bytes(n);
            }
        }
    }
    w.sealed()
}

fn names(r: &mut Reader) -> Option<Vec<Vec<u8>>> {
    let n = r.count()?;
    (0..n).map(|_| r.bytes().map(<[u8]>::to_vec)).collect()
}

fn decode(bytes: &[u8], workspace: &Path) -> Option<HashMap<Vec<u8>, Listing>> {
    let mut r = Reader::open(bytes, MAGIC)?;
    if r.u32()? != crate::policy::SECRET_NAME_RULES as usize {
        return None;
    }
    r.written_in_the_past()?;
    if r.bytes()? != workspace.as_os_str().as_bytes() {
        return None;
    }
    let count = r.u32()?;
    let mut out = HashMap::new();
    for _ in 0..count {
        let rel = r.bytes()?.to_vec();
        let stamp = Stamp {
            dev: r.u64()?,
            ino: r.u64()?,
            ctime: (r.i64()?, r.i64()?),
            mtime: (r.i64()?, r.i64()?),
        };
        let subdirs = names(&mut r)?;
        let hits = names(&mut r)?;
        out.insert(rel, Listing { stamp, subdirs, hits });
    }
    r.done().then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> HashMap<Vec<u8>, Listing> {
        let stamp = Stamp {
            dev: 7,
            ino: 42,
            ctime: (1_700_000_000, 5),
            mtime: (1_700_000_000, 4),
        };
        HashMap::from([
            (
                Vec::new(),
                Listing {
                    stamp,
                    subdirs: vec![b"app".to_vec(), b"caf\xe9".to_vec()],
                    hits: vec![b".env".to_vec()],
                },
            ),
            (
                b"app".to_vec(),
                Listing {
                    stamp: Stamp { ino: 43, ..stamp },
                    subdirs: Vec::new(),
                    hits: Vec::new(),
                },
            ),
        ])
    }

    #[test]
    fn listings_survive_the_file_and_nothing_damaged_is_read() {
        let ws = Path::new("/work/ws");
        let bytes = encode(ws, &sample());
        assert_eq!(decode(&bytes, ws), Some(sample()));
        // Another workspace's file, one changed byte anywhere, a cut end, an
        // empty file: none is read.
        assert_eq!(decode(&bytes, Path::new("/work/other")), None);
        for i in [0, MAGIC.len() + 3, bytes.len() / 2, bytes.len() - 1] {
            let mut bad = bytes.clone();
            bad[i] ^= 1;
            assert_eq!(decode(&bad, ws), None, "byte {i}");
        }
        assert_eq!(decode(&bytes[..bytes.len() - 1], ws), None);
        assert_eq!(decode(b"", ws), None);
        // Written under other secret-name rules, or "after" now (the clock
        // was set back since): not read either, digest and all in order.
        let patched = |offset: usize, field: &[u8]| {
            let mut b = bytes[..bytes.len() - 32].to_vec();
            b[offset..offset + field.len()].copy_from_slice(field);
            let digest = Sha256::digest(&b);
            b.extend_from_slice(&digest);
            b
        };
        let rules = MAGIC.len();
        let written_at = rules + 4;
        assert_eq!(decode(&patched(written_at, &0u64.to_le_bytes()), ws), Some(sample()));
        assert_eq!(
            decode(
                &patched(rules, &(crate::policy::SECRET_NAME_RULES + 1).to_le_bytes()),
                ws
            ),
            None
        );
        assert_eq!(decode(&patched(written_at, &u64::MAX.to_le_bytes()), ws), None);
    }

    /// The cache is rewritten in place: a shorter cache over a longer one
    /// leaves exactly the shorter one, and a file cut or mixed midway (a
    /// killed launcher, two saves at once) is not read.
    #[test]
    fn a_cache_rewritten_in_place_reads_back_whole_or_not_at_all() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        let file = tmp.path().join("scan").join("cache");
        let save = |seen: HashMap<Vec<u8>, Listing>| {
            Listings {
                workspace: ws.clone(),
                file: Some(file.clone()),
                root_dev: None,
                never_encrypted: false,
                old: HashMap::new(),
                seen,
            }
            .save()
        };
        let long = sample();
        let short: HashMap<_, _> = long.clone().into_iter().filter(|(k, _)| k.is_empty()).collect();
        save(long.clone());
        let long_bytes = std::fs::read(&file).unwrap();
        assert_eq!(decode(&long_bytes, &ws), Some(long));
        save(short.clone());
        let short_bytes = std::fs::read(&file).unwrap();
        assert!(short_bytes.len() < long_bytes.len());
        assert_eq!(decode(&short_bytes, &ws), Some(short));
        // What two saves at once can leave: one's start over the other's end.
        let mut mixed = short_bytes.clone();
        mixed.extend_from_slice(&long_bytes[short_bytes.len()..]);
        assert_eq!(decode(&mixed, &ws), None);
        let mut mixed = long_bytes.clone();
        mixed[..short_bytes.len()].copy_from_slice(&short_bytes);
        assert_eq!(decode(&mixed, &ws), None);
        // A symlink or a hard link in the cache's place is not written
        // through, and a FIFO there does not block: each is removed instead.
        let elsewhere = tmp.path().join("elsewhere");
        std::fs::write(&elsewhere, "keep").unwrap();
        std::fs::remove_file(&file).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &file).unwrap();
        save(sample());
        assert_eq!(std::fs::read_to_string(&elsewhere).unwrap(), "keep");
        assert!(!file.exists(), "the link is gone");
        std::fs::hard_link(&elsewhere, &file).unwrap();
        save(sample());
        assert_eq!(std::fs::read_to_string(&elsewhere).unwrap(), "keep");
        assert!(!file.exists(), "the second name is gone");
        nix::unistd::mkfifo(&file, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        save(sample());
        assert!(!file.exists(), "the FIFO is gone");
        save(sample());
        assert_eq!(
            decode(&std::fs::read(&file).unwrap(), &ws),
            Some(sample()),
            "made afresh"
        );
    }

    #[test]
    fn a_listing_is_racy_until_its_ctime_is_a_margin_older_than_the_read() {
        let at = |secs: u64, nanos: u32| UNIX_EPOCH + Duration::new(secs, nanos);
        let stamp = Stamp {
            dev: 1,
            ino: 1,
            ctime: (1_000, 500),
            mtime: (1_000, 500),
        };
        assert!(stamp.racy(at(1_000, 500)), "read in the same instant");
        assert!(stamp.racy(at(1_001, 500)), "exactly the margin later");
        assert!(!stamp.racy(at(1_001, 501)), "more than the margin later");
        assert!(stamp.racy(at(999, 0)), "a ctime in the future (the clock went back)");
        let negative = Stamp {
            ctime: (-5, 0),
            ..stamp
        };
        assert!(negative.racy(at(1_000, 0)), "a ctime before 1970 is not trusted");
    }

    /// A directory read now is never kept (its ctime is fresh); once it is
    /// old enough it is, and a change to it is seen at the next scan.
    #[test]
    fn fresh_directories_are_read_every_time_and_old_ones_until_they_change() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        let state = tmp.path().join("state");
        std::fs::create_dir_all(ws.join("app")).unwrap();
        std::fs::write(ws.join("app/.env"), "x").unwrap();
        let want = |name: &str, _: EntryKind| name.starts_with(".env");
        let scan = |expect_cached: bool| {
            let mut l = Listings::load(&state, &ws);
            local_filesystem(&ws)?;
            assert_eq!(l.old.contains_key(b"app".as_slice()), expect_cached);
            let root = l.list(Path::new(""), &ws, &want).unwrap();
            let app = l.list(Path::new("app"), &ws.join("app"), &want).unwrap();
            l.save();
            Some((root, app))
        };
        let Some((root, app)) = scan(false) else {
            eprintln!("the temporary directory is not on a local filesystem: nothing is cached there");
            return;
        };
        assert_eq!(root.subdirs, vec![b"app".to_vec()]);
        assert_eq!(app.hits, vec![b".env".to_vec()]);
        scan(false);
        std::thread::sleep(RACY_MARGIN + Duration::from_millis(100));
        scan(false);
        let (_, app) = scan(true).unwrap();
        assert_eq!(app.hits, vec![b".env".to_vec()]);
        std::fs::write(ws.join("app/.env.local"), "y").unwrap();
        let mut l = Listings::load(&state, &ws);
        let mut hits = l.list(Path::new("app"), &ws.join("app"), &want).unwrap().hits;
        hits.sort();
        assert_eq!(hits, vec![b".env".to_vec(), b".env.local".to_vec()]);
    }
}
