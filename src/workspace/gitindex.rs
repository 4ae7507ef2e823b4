//! The submodule entries ("gitlinks") of a git index.
//!
//! `git status` recurses into every gitlink of the index whose directory holds
//! a `.git`, and obeys that repository's config. A sandboxed command can add a
//! gitlink (the index is writable: `git add` must work) and create the nested
//! repository beside it, so the check after a run must know every gitlink,
//! wherever it is; walking the whole workspace for nested `.git` entries would
//! cost a run as much as the secret scan. The index is the list git itself uses.
//!
//! Format (git's `Documentation/gitformat-index`): a `DIRC` header with the
//! version (2, 3 or 4) and the entry count; per entry 40 bytes of stat data,
//! the object id (20 bytes, or 32 in a SHA-256 repository), 16 bits of flags
//! (plus 16 more in version 3 when the extended flag is set), and the path:
//! NUL-terminated and padded to 8 bytes in versions 2 and 3, prefix-compressed
//! in version 4. Then extensions; a split index (`link`) keeps entries in
//! another file, which this reader does not follow: it says so instead.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

/// What identifies one state of an index file whose only name is in its git
/// directory: a write through a name changes its ctime, a rename-over its
/// inode (a write through a shared mapping may not: see [`one_name`]).
type Stamp = (PathBuf, u64, u64, u64, i64, i64, i64, i64);

/// The last index read by this process: a run asks before it plans, when it
/// snapshots, and after it ends; a large repository's index is megabytes.
static LAST: std::sync::Mutex<Option<(Stamp, Option<Vec<PathBuf>>)>> = std::sync::Mutex::new(None);

mod kept;

/// Where reads of indexes are kept between processes (see [`kept`]): set
/// once by the launcher when it knows its state directory; unset, every
/// process reads every index.
static KEPT_IN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// Keep reads of indexes in the state directory `state` from now on.
pub fn keep_reads_in(state: &Path) {
    let _ = KEPT_IN.set(state.join("gitlinks"));
}

/// The gitlink paths of `<git_dir>/index`, relative to the work tree; empty
/// when there is no index. `None`: an index this reader cannot vouch for.
pub fn gitlinks(git_dir: &Path) -> Option<Vec<PathBuf>> {
    let index = git_dir.join("index");
    match KEPT_IN.get() {
        Some(dir) => kept::gitlinks(dir, &index, git_dir),
        None => gitlinks_at(&index, git_dir),
    }
}

/// [`gitlinks`] of the index file `path`, for the repository whose git
/// directory (its config: which hash it uses) is `git_dir`: a run's new
/// index, still in its capture, judged before it lands.
pub fn gitlinks_at(path: &Path, git_dir: &Path) -> Option<Vec<PathBuf>> {
    let m = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Some(Vec::new()),
        Err(_) => return None,
    };
    if m.is_file() && !one_name(&m) {
        return None;
    }
    if let Some(links) = remembered(path, &m) {
        return links;
    }
    let links = if m.is_file() {
        super::open_planted(path).ok().and_then(|f| {
            let hash_len = if sha256_repository(git_dir) { 32 } else { 20 };
            // Streamed through one window: a large repository's index is
            // megabytes, and memory touched for the first time costs a page
            // fault per page.
            parse(f, m.len(), hash_len)
        })
    } else {
        None
    };
    remember(path, &m, links.clone());
    links
}

/// Whether the index file `m` has no name but its own. Through another name
/// (a hard link in the workspace) a writable run would write the index in
/// place instead of in its git directory's overlay, and it could map the
/// file shared: writes through such a mapping set the file's times only at
/// the first write to a clean page, so one made before a read could change
/// the index after it and leave the stamp the read was remembered and kept
/// under. The index of such a file is not vouched for: writable runs are
/// refused until it has a name of its own, and a capture's never lands.
pub(super) fn one_name(m: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    m.nlink() == 1
}

fn stamp_of(path: &Path, m: &std::fs::Metadata) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    (
        path.to_path_buf(),
        m.dev(),
        m.ino(),
        m.size(),
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec(),
    )
}

/// What this process last read of the index `path`, if it is still as it was then.
fn remembered(path: &Path, m: &std::fs::Metadata) -> Option<Option<Vec<PathBuf>>> {
    let last = LAST.lock().unwrap_or_else(|p| p.into_inner());
    match last.as_ref() {
        Some((s, links)) if *s == stamp_of(path, m) => Some(links.clone()),
        _ => None,
    }
}

/// As in a new process: nothing read yet.
#[cfg(test)]
fn forget() {
    *LAST.lock().unwrap_or_else(|p| p.into_inner()) = None;
}

fn remember(path: &Path, m: &std::fs::Metadata, links: Option<Vec<PathBuf>>) {
    *LAST.lock().unwrap_or_else(|p| p.into_inner()) = Some((stamp_of(path, m), links));
}

fn sha256_repository(git_dir: &Path) -> bool {
    // A config that cannot be read (a FIFO the run left) counts as SHA-1:
    // git cannot use such a repository either.
    super::read_planted(&git_dir.join("config"), 1 << 20).is_ok_and(|c| {
        String::from_utf8_lossy(&c).lines().any(|l| {
            let l: String = l.chars().filter(|c| !c.is_whitespace()).collect();
            l.eq_ignore_ascii_case("objectformat=sha256")
        })
    })
}

/// A window over a stream: fields are parsed from a slice, refilled from
/// the reader in large reads (an index has one small entry per file).
struct Window<R> {
    inner: R,
    /// Allocated once; `buf[at..filled]` is what has been read and not used.
    buf: Vec<u8>,
    at: usize,
    filled: usize,
    /// Position in the stream of `buf[at]`.
    pos: u64,
}

impl<R: std::io::Read> Window<R> {
    fn new(inner: R) -> Self {
        Window {
            inner,
            buf: vec![0; 256 * 1024],
            at: 0,
            filled: 0,
            pos: 0,
        }
    }

    /// Makes `n` bytes available at the cursor; `None` at the end.
    fn ensure(&mut self, n: usize) -> Option<&[u8]> {
        if self.filled - self.at < n {
            self.buf.copy_within(self.at..self.filled, 0);
            self.filled -= self.at;
            self.at = 0;
            if self.buf.len() < n {
                self.buf.resize(n, 0);
            }
            while self.filled < n {
                let got = self.inner.read(&mut self.buf[self.filled..]).ok()?;
                if got == 0 {
                    return None;
                }
                self.filled += got;
            }
        }
        Some(&self.buf[self.at..self.at + n])
    }

    fn advance(&mut self, n: usize) {
        self.at += n;
        self.pos += n as u64;
    }

    fn be32_at(&mut self, offset: usize) -> Option<u32> {
        let b = self.ensure(offset + 4)?;
        Some(u32::from_be_bytes(b[offset..offset + 4].try_into().ok()?))
    }

    /// Appends up to and not including the next NUL, which is consumed.
    fn until_nul(&mut self, out: &mut Vec<u8>) -> Option<()> {
        loop {
            self.ensure(1)?;
            let chunk = &self.buf[self.at..self.filled];
            match chunk.iter().position(|b| *b == 0) {
                Some(i) => {
                    out.extend_from_slice(&chunk[..i]);
                    self.advance(i + 1);
                    return Some(());
                }
                None => {
                    let n = chunk.len();
                    out.extend_from_slice(chunk);
                    self.advance(n);
                }
            }
        }
    }

    /// git's offset varint (version 4 path compression).
    fn varint(&mut self) -> Option<usize> {
        let mut c = self.ensure(1)?[0];
        self.advance(1);
        let mut value = usize::from(c & 127);
        while c & 128 != 0 {
            c = self.ensure(1)?[0];
            self.advance(1);
            value = value
                .checked_add(1)?
                .checked_mul(128)?
                .checked_add(usize::from(c & 127))?;
        }
        Some(value)
    }
}

/// Gitlinks beyond this many make the index one this reader does not vouch
/// for; one longer than a path can be is not listed (no system call, git's
/// included, reaches it). Together they bound the memory a hostile index takes.
const MAX_GITLINKS: usize = 10_000;
const MAX_PATH: usize = 4096;

/// Whether git itself would accept `path` as the name of an index entry:
/// relative, no empty, `.`, `..` or `.git` component.
fn acceptable(path: &[u8]) -> bool {
    !path.is_empty()
        && path
            .split(|b| *b == b'/')
            .all(|c| !c.is_empty() && c != b"." && c != b".." && !c.eq_ignore_ascii_case(b".git"))
}

/// Parses as git's `read-cache.c` does: a name's length is the one in its
/// flags unless that says 0xFFF or more, the extended flags follow whenever
/// the flag says so (whatever the version), and the entry's size follows from
/// that length, not from where a NUL happens to be.
fn parse(reader: impl std::io::Read, size: u64, hash_len: usize) -> Option<Vec<PathBuf>> {
    let mut d = Window::new(reader);
    if d.ensure(12)?[..4] != *b"DIRC" {
        return None;
    }
    let version = d.be32_at(4)?;
    if !(2..=4).contains(&version) {
        return None;
    }
    let count = d.be32_at(8)?;
    d.advance(12);
    // Stat data, object id, flags.
    let fixed = 40 + hash_len + 2;
    // The previous entry's name (version 4 shares prefixes with it).
    let mut path: Vec<u8> = Vec::new();
    let mut out: Vec<Vec<u8>> = Vec::new();
    for _ in 0..count {
        let start = d.pos;
        let head = d.ensure(fixed)?;
        let gitlink = u32::from_be_bytes(head[24..28].try_into().ok()?) & 0o170000 == 0o160000;
        let flags = u16::from_be_bytes(head[fixed - 2..fixed].try_into().ok()?);
        d.advance(fixed);
        let mut header = fixed;
        if flags & 0x4000 != 0 {
            d.ensure(2)?;
            d.advance(2);
            header += 2;
        }
        let named = usize::from(flags & 0x0FFF);
        if version == 4 {
            let keep = path.len().checked_sub(d.varint()?)?;
            path.truncate(keep);
            if named == 0x0FFF {
                d.until_nul(&mut path)?;
            } else {
                let suffix = named.checked_sub(keep)?;
                let bytes = d.ensure(suffix + 1)?;
                path.extend_from_slice(&bytes[..suffix]);
                d.advance(suffix + 1);
            }
        } else {
            path.clear();
            let len = if named == 0x0FFF {
                d.until_nul(&mut path)?;
                path.len() + 1
            } else {
                path.extend_from_slice(&d.ensure(named)?[..named]);
                d.advance(named);
                named
            };
            // Padded with NULs to a multiple of eight bytes, at least one.
            let entry = (header + path.len() + 8) & !7;
            let rest = entry.checked_sub(header + len)?;
            d.ensure(rest)?;
            d.advance(rest);
            debug_assert_eq!(d.pos - start, entry as u64);
        }
        if gitlink && path.len() < MAX_PATH {
            if out.len() >= MAX_GITLINKS || !acceptable(&path) {
                return None;
            }
            out.push(path.clone());
        }
    }
    // Extensions, up to the trailing checksum. A split index keeps entries in
    // another file; the offset tables let git parse entries from offsets of
    // their own: this list could differ from what git sees.
    let end = size.checked_sub(hash_len as u64)?;
    while d.pos + 8 <= end {
        let header = d.ensure(8)?;
        if matches!(&header[..4], b"link" | b"EOIE" | b"IEOT") {
            return None;
        }
        let len = u32::from_be_bytes(header[4..8].try_into().ok()?) as usize;
        d.advance(8);
        let mut left = len;
        while left > 0 {
            let step = left.min(64 * 1024);
            d.ensure(step)?;
            d.advance(step);
            left -= step;
        }
    }
    if d.pos != end {
        return None;
    }
    out.sort();
    out.dedup();
    Some(out.into_iter().map(|p| PathBuf::from(OsString::from_vec(p))).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// `git ARGS` in `dir`, which must succeed.
    pub(super) fn git(dir: &Path, args: &[&str]) {
        let ok = Command::new("git")
            .args(["-c", "user.email=t@t", "-c", "user.name=t"])
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap()
            .status
            .success();
        assert!(ok, "git {args:?}");
    }

    #[test]
    fn finds_gitlinks_in_every_index_version() {
        for version in ["2", "3", "4"] {
            let t = tempfile::tempdir().unwrap();
            let d = t.path();
            git(d, &["init", "-q"]);
            std::fs::create_dir_all(d.join("src/deep")).unwrap();
            std::fs::write(d.join("src/deep/a.txt"), "a").unwrap();
            std::fs::write(d.join("b.txt"), "b").unwrap();
            git(d, &["add", "."]);
            let id = "1111111111111111111111111111111111111111";
            git(
                d,
                &["update-index", "--add", "--cacheinfo", &format!("160000,{id},vendor/x")],
            );
            git(
                d,
                &[
                    "update-index",
                    "--add",
                    "--cacheinfo",
                    &format!("160000,{id},src/deep/sub"),
                ],
            );
            // Names of 0xFFF bytes or more: their length is not in the flags.
            // (One beyond PATH_MAX is not listed: nothing can reach it on disk.)
            let long = format!("{}long", "d/".repeat(1000));
            let too_long = format!("{}long", "d/".repeat(2100));
            for entry in [
                format!("100644,{id},{too_long}"),
                format!("160000,{id},{long}-link"),
                format!("160000,{id},{too_long}-link"),
            ] {
                git(d, &["update-index", "--add", "--cacheinfo", &entry]);
            }
            // An extended flag (intent to add) forces version 3 entries.
            std::fs::write(d.join("c.txt"), "c").unwrap();
            git(d, &["add", "-N", "c.txt"]);
            git(d, &["update-index", "--index-version", version]);
            let mut links = gitlinks(&d.join(".git")).unwrap_or_else(|| panic!("index version {version} unreadable"));
            links.sort();
            assert_eq!(
                links,
                vec![
                    PathBuf::from(format!("{long}-link")),
                    PathBuf::from("src/deep/sub"),
                    PathBuf::from("vendor/x")
                ],
                "index version {version}"
            );
        }
    }

    #[test]
    fn finds_gitlinks_in_a_sha256_repository() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        git(d, &["init", "-q", "--object-format=sha256"]);
        std::fs::write(d.join("a.txt"), "a").unwrap();
        git(d, &["add", "."]);
        let id = "1".repeat(64);
        git(
            d,
            &["update-index", "--add", "--cacheinfo", &format!("160000,{id},vendor/x")],
        );
        assert_eq!(gitlinks(&d.join(".git")), Some(vec![PathBuf::from("vendor/x")]));
    }

    /// A repository whose index holds gitlink `name` (and one ordinary file).
    fn repo_with_gitlink(name: &str) -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        git(d, &["init", "-q"]);
        std::fs::write(d.join("a.txt"), "a").unwrap();
        git(d, &["add", "."]);
        let id = "1".repeat(40);
        git(
            d,
            &["update-index", "--add", "--cacheinfo", &format!("160000,{id},{name}")],
        );
        t
    }

    fn parsed(index: &[u8]) -> Option<Vec<PathBuf>> {
        parse(index, index.len() as u64, 20)
    }

    #[test]
    fn reads_entries_as_git_does_where_a_looser_reader_would_miss_one() {
        // The extended flag in a version 2 index: git reads the extra flags
        // anyway, so the name starts two bytes later.
        let t = repo_with_gitlink("evil");
        git(t.path(), &["update-index", "--skip-worktree", "evil"]);
        let mut index = std::fs::read(t.path().join(".git/index")).unwrap();
        assert_eq!(
            &index[4..8],
            &3u32.to_be_bytes(),
            "skip-worktree makes a version 3 index"
        );
        index[4..8].copy_from_slice(&2u32.to_be_bytes());
        assert_eq!(parsed(&index), Some(vec![PathBuf::from("evil")]));
        // A name whose flags say one length while its NUL comes later: git
        // takes the length (`evi`), and so does this reader.
        let t = repo_with_gitlink("evil");
        let mut index = std::fs::read(t.path().join(".git/index")).unwrap();
        let at = index.windows(4).position(|w| w == b"evil").unwrap();
        index[at - 1] = 3;
        assert_eq!(parsed(&index), Some(vec![PathBuf::from("evi")]));
    }

    #[test]
    fn offset_tables_and_names_git_refuses_make_the_index_unvouched_for() {
        // An offset table (EOIE) lets git start reading entries elsewhere.
        let t = repo_with_gitlink("vendor/x");
        let mut index = std::fs::read(t.path().join(".git/index")).unwrap();
        assert_eq!(parsed(&index), Some(vec![PathBuf::from("vendor/x")]));
        let checksum = index.split_off(index.len() - 20);
        index.extend_from_slice(b"EOIE");
        index.extend_from_slice(&24u32.to_be_bytes());
        index.extend_from_slice(&[0; 24]);
        index.extend_from_slice(&checksum);
        assert_eq!(parsed(&index), None);
        // Names git itself refuses (same length as the real one).
        for bad in [b"a/..", b"./ab", b".git", b"/abc"] {
            let t = repo_with_gitlink("abcd");
            let mut index = std::fs::read(t.path().join(".git/index")).unwrap();
            let at = index.windows(4).position(|w| w == b"abcd").unwrap();
            index[at..at + 4].copy_from_slice(bad);
            assert_eq!(parsed(&index), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn an_index_it_cannot_vouch_for_is_none() {
        let bad = |b: &[u8]| parse(b, b.len() as u64, 20);
        assert_eq!(bad(b"DIRX\0\0\0\x02\0\0\0\0"), None);
        assert_eq!(bad(b"DIRC\0\0\0\x02\0\0\0\x05"), None);
        let t = tempfile::tempdir().unwrap();
        assert_eq!(gitlinks(t.path()), Some(Vec::new()), "no index, no gitlinks");
    }
}
