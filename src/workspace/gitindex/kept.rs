//! Reads of git indexes kept between processes, in the state directory.
//!
//! Every run reads the gitlinks of the index of each repository in or around
//! the workspace (see the parent module). A repository of 100,000 files has
//! an index of 8 MB, and reading it costs a run 4 to 5 ms on this machine,
//! every run, though a person's index changes far less often than an agent
//! runs commands. What a run needs of it is tiny: its gitlinks, usually none.
//! So the list is kept here with the index file's identity and times, and
//! used again only while the file still has exactly those.
//!
//! The stamp is the file's device, inode, size, modification time and change
//! time, taken from the very descriptor the list was read from. A write to
//! the file through a name sets its change time to the current time, and no
//! unprivileged process can set a change time (`utimensat` sets the others,
//! and updates it); git writes an index as a new file renamed into place, a
//! new inode. A write through a shared mapping is the exception: the kernel
//! sets the times at the first write to a clean page only, so a mapping made
//! before the stamp was taken can change the file under it until the page is
//! written back. No sandboxed run can hold such a mapping of a real index:
//! its one name is in its git directory, which a writable run sees as an
//! overlay of its own (opened for writing, the file is copied), an index with
//! any other name is not read at all ([`super::one_name`]: writable runs are
//! refused), and a run's index reaches the real one only as a new file its
//! landing renames into place. A file changed in the very tick its stamp was
//! taken could keep that stamp, so a list is kept only if the change time was
//! more than [`RACY_MARGIN`] older than the moment its read began (the scan's
//! listings follow the same rule, as git's own index does for its entries).
//! Only files on a local filesystem stamped by this machine's clock are kept.
//!
//! The state directory is invisible to every sandbox. A cache file that is
//! missing, damaged, written by another version or for another path means
//! the index is read; one that cannot be written costs speed, never a
//! gitlink.

use super::super::cachefile::{Reader, Writer};
use super::super::listing::{local_filesystem, RACY_MARGIN};
use sha2::{Digest, Sha256};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Names the cache file's format. A file written otherwise is not read.
const MAGIC: &[u8] = b"tether-exec gitlinks 1\n";

/// One state of an index file: device, inode, size, mtime and ctime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    pub(super) fn of(m: &std::fs::Metadata) -> Stamp {
        Stamp {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        }
    }

    /// Whether a change after `read_began` could have left this stamp as it is.
    fn racy(&self, read_began: SystemTime) -> bool {
        let Ok(since) = read_began.duration_since(UNIX_EPOCH) else {
            return true;
        };
        let (Ok(secs), Ok(nanos)) = (u64::try_from(self.ctime.0), u32::try_from(self.ctime.1)) else {
            return true;
        };
        Duration::new(secs, nanos) + RACY_MARGIN >= since
    }
}

/// What one cache file says: the index it is about, how its hashes are
/// read, its stamp, its gitlinks.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Kept {
    index: PathBuf,
    hash_len: usize,
    stamp: Stamp,
    links: Vec<PathBuf>,
}

/// The gitlinks of the index file `index` of the repository `git_dir`, from
/// the cache in `dir` while the file is as it was read, else read (and kept
/// when it may be). `None`: an index the reader cannot vouch for.
pub(super) fn gitlinks(dir: &Path, index: &Path, git_dir: &Path) -> Option<Vec<PathBuf>> {
    let read_began = SystemTime::now();
    let file = match super::super::open_planted(index) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Some(Vec::new()),
        Err(_) => return None,
    };
    let m = file.metadata().ok()?;
    if !super::one_name(&m) {
        return None;
    }
    if let Some(links) = super::remembered(index, &m) {
        return links;
    }
    let links = read(dir, index, git_dir, file, &m, read_began);
    super::remember(index, &m, links.clone());
    links
}

fn read(
    dir: &Path,
    index: &Path,
    git_dir: &Path,
    file: std::fs::File,
    m: &std::fs::Metadata,
    read_began: SystemTime,
) -> Option<Vec<PathBuf>> {
    let stamp = Stamp::of(m);
    let hash_len = if super::sha256_repository(git_dir) { 32 } else { 20 };
    let cache = dir.join(&crate::policy::hex(&Sha256::digest(index.as_os_str().as_bytes()))[..32]);
    let kept = std::fs::read(&cache).ok().and_then(|b| decode(&b));
    if let Some(k) = kept {
        if k.index == index && k.hash_len == hash_len && k.stamp == stamp {
            return Some(k.links);
        }
    }
    let links = super::parse(file, m.size(), hash_len)?;
    if !stamp.racy(read_began) && local_filesystem(index).is_some() {
        let k = Kept {
            index: index.to_path_buf(),
            hash_len,
            stamp,
            links,
        };
        super::super::cachefile::write_in_place(dir, &cache, &encode(&k));
        return Some(k.links);
    }
    Some(links)
}

// The file (see `cachefile`): MAGIC, the moment it was written, the index's
// path (a digest collision, or a file copied between state directories,
// must not pass for another index's), the hash length, the stamp, the
// gitlinks.

fn encode(k: &Kept) -> Vec<u8> {
    let mut w = Writer::new(MAGIC);
    w.now();
    w.bytes(k.index.as_os_str().as_bytes());
    w.u32(k.hash_len);
    for n in [k.stamp.dev, k.stamp.ino, k.stamp.size] {
        w.u64(n);
    }
    for n in [k.stamp.mtime.0, k.stamp.mtime.1, k.stamp.ctime.0, k.stamp.ctime.1] {
        w.i64(n);
    }
    w.u32(k.links.len());
    for l in &k.links {
        w.bytes(l.as_os_str().as_bytes());
    }
    w.sealed()
}

fn path(r: &mut Reader) -> Option<PathBuf> {
    r.bytes().map(|b| PathBuf::from(std::ffi::OsStr::from_bytes(b)))
}

fn decode(bytes: &[u8]) -> Option<Kept> {
    let mut r = Reader::open(bytes, MAGIC)?;
    r.written_in_the_past()?;
    let index = path(&mut r)?;
    let hash_len = r.u32()?;
    let stamp = Stamp {
        dev: r.u64()?,
        ino: r.u64()?,
        size: r.u64()?,
        mtime: (r.i64()?, r.i64()?),
        ctime: (r.i64()?, r.i64()?),
    };
    let count = r.count()?;
    let links = (0..count).map(|_| path(&mut r)).collect::<Option<Vec<_>>>()?;
    r.done().then_some(Kept {
        index,
        hash_len,
        stamp,
        links,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Kept {
        Kept {
            index: PathBuf::from("/repo/.git/index"),
            hash_len: 20,
            stamp: Stamp {
                dev: 7,
                ino: 42,
                size: 8_800_104,
                mtime: (1_700_000_000, 4),
                ctime: (1_700_000_000, 5),
            },
            links: vec![
                PathBuf::from("vendor/x"),
                PathBuf::from(std::ffi::OsStr::from_bytes(b"caf\xe9")),
            ],
        }
    }

    #[test]
    fn a_cache_file_reads_back_as_written_and_not_once_damaged() {
        let k = sample();
        let bytes = encode(&k);
        assert_eq!(decode(&bytes), Some(k));
        for i in [0, MAGIC.len() + 3, bytes.len() / 2, bytes.len() - 1] {
            let mut bad = bytes.clone();
            bad[i] ^= 1;
            assert_eq!(decode(&bad), None, "byte {i} flipped");
        }
        assert_eq!(decode(&bytes[..bytes.len() - 1]), None);
        assert_eq!(decode(&[]), None);
    }

    #[test]
    fn a_change_time_within_the_margin_of_the_read_is_racy() {
        let mut s = sample().stamp;
        let at = |secs: u64| UNIX_EPOCH + Duration::from_secs(secs);
        assert!(!s.racy(at(1_700_000_002)));
        assert!(s.racy(at(1_700_000_001)), "less than RACY_MARGIN after the ctime");
        assert!(
            s.racy(at(1_699_999_999)),
            "a read that began before the ctime (clock set back)"
        );
        s.ctime = (-1, 0);
        assert!(s.racy(at(1_700_000_002)), "a ctime before 1970 is not trusted");
    }

    /// The index of a repository made by git in `dir`, whose one entry is
    /// the gitlink `link`.
    fn index_with_gitlink(dir: &Path, link: &str) -> Vec<u8> {
        use super::super::tests::git;
        std::fs::create_dir_all(dir).unwrap();
        git(dir, &["init", "-q"]);
        let id = "1111111111111111111111111111111111111111";
        git(
            dir,
            &["update-index", "--add", "--cacheinfo", &format!("160000,{id},{link}")],
        );
        std::fs::read(dir.join(".git/index")).unwrap()
    }

    /// A repository whose index (just written) names the gitlink
    /// `vendor/x`: (its temporary directory, git directory, index, and the
    /// cache directory beside it).
    fn repository_naming_vendor_x() -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let git_dir = tmp.path().join("repo/.git");
        std::fs::create_dir_all(&git_dir).unwrap();
        let index = git_dir.join("index");
        let cache_dir = tmp.path().join("state/gitlinks");
        std::fs::write(&index, index_with_gitlink(&tmp.path().join("x"), "vendor/x")).unwrap();
        (tmp, git_dir, index, cache_dir)
    }

    /// [`gitlinks`] as a new process calls it: nothing remembered.
    fn in_a_new_process(dir: &Path, index: &Path, git_dir: &Path) -> Option<Vec<PathBuf>> {
        super::super::forget();
        gitlinks(dir, index, git_dir)
    }

    /// Waits until a file written now is older than the racy margin.
    fn age_past_margin() {
        std::thread::sleep(RACY_MARGIN + Duration::from_millis(50));
    }

    #[test]
    fn an_index_is_kept_once_old_enough_and_read_again_once_changed() {
        let (tmp, git_dir, index, cache_dir) = repository_naming_vendor_x();
        // Just written: racy, read but not kept.
        assert_eq!(
            in_a_new_process(&cache_dir, &index, &git_dir),
            Some(vec![PathBuf::from("vendor/x")])
        );
        assert!(!cache_dir.exists(), "a racy index is not kept");
        age_past_margin();
        assert_eq!(
            in_a_new_process(&cache_dir, &index, &git_dir),
            Some(vec![PathBuf::from("vendor/x")])
        );
        let files: Vec<_> = std::fs::read_dir(&cache_dir).unwrap().collect();
        assert_eq!(files.len(), 1, "kept once old enough");
        // The kept list is what answers while the index is unchanged: shown
        // by a cache whose list was replaced (and its digest made again).
        let cache = files[0].as_ref().unwrap().path();
        let mut k = decode(&std::fs::read(&cache).unwrap()).unwrap();
        k.links = vec![PathBuf::from("from/the/cache")];
        std::fs::write(&cache, encode(&k)).unwrap();
        assert_eq!(
            in_a_new_process(&cache_dir, &index, &git_dir),
            Some(vec![PathBuf::from("from/the/cache")])
        );
        // Rewritten in place, with the same size and its modification time
        // put back: the change time moved, so it is read again.
        let before = std::fs::metadata(&index).unwrap();
        std::fs::write(&index, index_with_gitlink(&tmp.path().join("y"), "vendor/y")).unwrap();
        let mtime = filetime_of(&before);
        set_mtime(&index, mtime);
        assert_eq!(std::fs::metadata(&index).unwrap().len(), before.len());
        assert_eq!(
            in_a_new_process(&cache_dir, &index, &git_dir),
            Some(vec![PathBuf::from("vendor/y")])
        );
        // An index gone is an index with no gitlinks.
        std::fs::remove_file(&index).unwrap();
        assert_eq!(in_a_new_process(&cache_dir, &index, &git_dir), Some(vec![]));
    }

    #[test]
    fn an_index_with_another_name_is_neither_kept_nor_read() {
        // Through the other name a run could map the file and change it
        // after this read without moving its times (see the module docs).
        let (tmp, git_dir, index, cache_dir) = repository_naming_vendor_x();
        age_past_margin();
        assert_eq!(
            in_a_new_process(&cache_dir, &index, &git_dir),
            Some(vec![PathBuf::from("vendor/x")])
        );
        assert!(cache_dir.exists(), "kept while it has one name");
        // The same stamp but for the link count (a link moves the change
        // time, so the kept list is put back under the new one).
        let link = tmp.path().join("repo/idx");
        std::fs::hard_link(&index, &link).unwrap();
        let cache = std::fs::read_dir(&cache_dir).unwrap().next().unwrap().unwrap().path();
        let mut k = decode(&std::fs::read(&cache).unwrap()).unwrap();
        k.stamp = Stamp::of(&std::fs::metadata(&index).unwrap());
        std::fs::write(&cache, encode(&k)).unwrap();
        assert_eq!(in_a_new_process(&cache_dir, &index, &git_dir), None, "kept list used");
        // Nor remembered by this process.
        assert_eq!(gitlinks(&cache_dir, &index, &git_dir), None, "remembered");
        assert_eq!(super::super::gitlinks_at(&index, &git_dir), None);
        std::fs::remove_file(&link).unwrap();
        assert_eq!(
            in_a_new_process(&cache_dir, &index, &git_dir),
            Some(vec![PathBuf::from("vendor/x")])
        );
    }

    fn filetime_of(m: &std::fs::Metadata) -> (i64, i64) {
        (m.mtime(), m.mtime_nsec())
    }

    fn set_mtime(p: &Path, (secs, nanos): (i64, i64)) {
        let t = nix::sys::time::TimeSpec::new(secs, nanos);
        nix::sys::stat::utimensat(
            nix::fcntl::AT_FDCWD,
            p,
            &t,
            &t,
            nix::sys::stat::UtimensatFlags::NoFollowSymlink,
        )
        .unwrap();
    }
}
