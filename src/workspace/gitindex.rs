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

/// The gitlink paths of `<git_dir>/index`, relative to the work tree; empty
/// when there is no index. `None`: an index this reader cannot vouch for.
pub fn gitlinks(git_dir: &Path) -> Option<Vec<PathBuf>> {
    let data = match std::fs::read(git_dir.join("index")) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Some(Vec::new()),
        Err(_) => return None,
    };
    let hash_len = if sha256_repository(git_dir) { 32 } else { 20 };
    parse(&data, hash_len)
}

fn sha256_repository(git_dir: &Path) -> bool {
    std::fs::read_to_string(git_dir.join("config")).is_ok_and(|c| {
        c.lines().any(|l| {
            let l: String = l.chars().filter(|c| !c.is_whitespace()).collect();
            l.eq_ignore_ascii_case("objectformat=sha256")
        })
    })
}

fn be32(d: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(d.get(at..at + 4)?.try_into().ok()?))
}

/// git's offset varint (version 4 path compression).
fn varint(d: &[u8]) -> Option<(usize, usize)> {
    let mut i = 0;
    let mut c = *d.first()?;
    let mut value = usize::from(c & 127);
    while c & 128 != 0 {
        i += 1;
        c = *d.get(i)?;
        value = value
            .checked_add(1)?
            .checked_mul(128)?
            .checked_add(usize::from(c & 127))?;
    }
    Some((value, i + 1))
}

fn parse(d: &[u8], hash_len: usize) -> Option<Vec<PathBuf>> {
    if d.get(0..4)? != b"DIRC" {
        return None;
    }
    let version = be32(d, 4)?;
    if !(2..=4).contains(&version) {
        return None;
    }
    let count = be32(d, 8)? as usize;
    let mut pos = 12;
    let mut prev: Vec<u8> = Vec::new();
    let mut out = Vec::new();
    for _ in 0..count {
        let start = pos;
        let mode = be32(d, pos + 24)?;
        let flags_at = pos + 40 + hash_len;
        let flags = u16::from_be_bytes(d.get(flags_at..flags_at + 2)?.try_into().ok()?);
        pos = flags_at + 2;
        if version >= 3 && flags & 0x4000 != 0 {
            pos += 2;
        }
        let path = if version == 4 {
            let (strip, n) = varint(d.get(pos..)?)?;
            pos += n;
            let end = pos + d.get(pos..)?.iter().position(|b| *b == 0)?;
            let mut p = prev.get(..prev.len().checked_sub(strip)?)?.to_vec();
            p.extend_from_slice(&d[pos..end]);
            pos = end + 1;
            p
        } else {
            let end = pos + d.get(pos..)?.iter().position(|b| *b == 0)?;
            let p = d[pos..end].to_vec();
            // 1 to 8 NULs pad the entry to a multiple of eight bytes.
            pos = start + ((end - start + 8) & !7);
            p
        };
        if mode & 0o170000 == 0o160000 {
            out.push(PathBuf::from(OsString::from_vec(path.clone())));
        }
        prev = path;
    }
    // Extensions, up to the trailing checksum: a split index keeps entries
    // elsewhere, so this list would be incomplete.
    let end = d.len().checked_sub(hash_len)?;
    while pos + 8 <= end {
        if d.get(pos..pos + 4)? == b"link" {
            return None;
        }
        pos = pos.checked_add(8)?.checked_add(be32(d, pos + 4)? as usize)?;
    }
    (pos == end).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) {
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
            // An extended flag (intent to add) forces version 3 entries.
            std::fs::write(d.join("c.txt"), "c").unwrap();
            git(d, &["add", "-N", "c.txt"]);
            git(d, &["update-index", "--index-version", version]);
            let mut links = gitlinks(&d.join(".git")).expect("a readable index");
            links.sort();
            assert_eq!(
                links,
                vec![PathBuf::from("src/deep/sub"), PathBuf::from("vendor/x")],
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
        git(d, &["update-index", "--add", "--cacheinfo", &format!("160000,{id},vendor/x")]);
        assert_eq!(gitlinks(&d.join(".git")), Some(vec![PathBuf::from("vendor/x")]));
    }

    #[test]
    fn an_index_it_cannot_vouch_for_is_none() {
        assert_eq!(parse(b"DIRX\0\0\0\x02\0\0\0\0", 20), None);
        assert_eq!(parse(b"DIRC\0\0\0\x02\0\0\0\x05", 20), None);
        let t = tempfile::tempdir().unwrap();
        assert_eq!(gitlinks(t.path()), Some(Vec::new()), "no index, no gitlinks");
    }
}
