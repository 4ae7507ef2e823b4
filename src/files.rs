//! Replacing a small file the launcher rewrites on every run, cheaply.
//!
//! The receipt and the secret scan's cache are written whole to a temporary
//! name and renamed over the old file, so that a reader never sees half of
//! one. On ext4 (the default `auto_da_alloc` mount option) a `rename` that
//! *replaces* a file starts writeback of the new file's data before it
//! returns, for the sake of programs that forget to fsync. Here that costs
//! 0.2 to 0.7 ms a run, on the path every run waits on, for two files whose
//! loss in a power cut costs nothing: a receipt belongs to the run that just
//! ended (its harness reads it at once), and a cache that does not check out
//! is read again from the directories.
//!
//! [`replace`] gets the same result for a reader without that flush: it
//! exchanges the two names (`renameat2(RENAME_EXCHANGE)`, which ext4 does
//! not treat as a replacement) and then unlinks the old file, now under the
//! temporary name. The target's name never goes missing, as with `rename`.
//! Where the exchange does not apply (no old file, a directory on either
//! side, a filesystem without it), it is a plain `rename`, with `rename`'s
//! errors.
//!
//! Not for files whose content must survive a power cut: the writeback
//! ext4 skips here is what makes a naive rename-over safe against one.

use nix::errno::Errno;
use nix::fcntl::{renameat2, RenameFlags, AT_FDCWD};
use nix::sys::stat::{lstat, SFlag};
use std::path::Path;

/// Put the file at `from` in place of `to`, as `rename(from, to)` does.
pub fn replace(from: &Path, to: &Path) -> std::io::Result<()> {
    let not_dir =
        |p: &Path| lstat(p).is_ok_and(|st| SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFDIR);
    if not_dir(to) && not_dir(from) && renameat2(AT_FDCWD, from, AT_FDCWD, to, RenameFlags::RENAME_EXCHANGE).is_ok() {
        // `from` names the old file now.
        match nix::unistd::unlink(from) {
            Ok(()) => return Ok(()),
            // Someone put a directory at `to` between the check and the
            // exchange: put both back, and let `rename` refuse as it would.
            Err(Errno::EISDIR | Errno::EPERM) => {
                renameat2(AT_FDCWD, from, AT_FDCWD, to, RenameFlags::RENAME_EXCHANGE)?;
            }
            // The new file is in place; only the old one is left over.
            Err(e) => return Err(e.into()),
        }
    }
    std::fs::rename(from, to)
}

#[cfg(test)]
mod tests {
    use super::replace;
    use std::fs;

    #[test]
    fn replaces_an_existing_file_and_leaves_no_temporary() {
        let d = tempfile::tempdir().unwrap();
        let (tmp, to) = (d.path().join("t"), d.path().join("r.json"));
        fs::write(&to, "old").unwrap();
        fs::write(&tmp, "new").unwrap();
        replace(&tmp, &to).unwrap();
        assert_eq!(fs::read_to_string(&to).unwrap(), "new");
        assert!(!tmp.exists());
    }

    #[test]
    fn makes_the_file_when_there_was_none() {
        let d = tempfile::tempdir().unwrap();
        let (tmp, to) = (d.path().join("t"), d.path().join("r.json"));
        fs::write(&tmp, "new").unwrap();
        replace(&tmp, &to).unwrap();
        assert_eq!(fs::read_to_string(&to).unwrap(), "new");
        assert!(!tmp.exists());
    }

    #[test]
    fn replaces_a_symlink_itself_not_what_it_points_at() {
        let d = tempfile::tempdir().unwrap();
        let (tmp, to, elsewhere) = (d.path().join("t"), d.path().join("r.json"), d.path().join("elsewhere"));
        fs::write(&elsewhere, "keep").unwrap();
        std::os::unix::fs::symlink(&elsewhere, &to).unwrap();
        fs::write(&tmp, "new").unwrap();
        replace(&tmp, &to).unwrap();
        assert!(!fs::symlink_metadata(&to).unwrap().file_type().is_symlink());
        assert_eq!(fs::read_to_string(&to).unwrap(), "new");
        assert_eq!(fs::read_to_string(&elsewhere).unwrap(), "keep");
    }

    #[test]
    fn a_directory_in_the_way_is_refused_as_rename_refuses_it_and_kept() {
        let d = tempfile::tempdir().unwrap();
        let (tmp, to) = (d.path().join("t"), d.path().join("r.json"));
        fs::create_dir(&to).unwrap();
        fs::write(to.join("inside"), "kept").unwrap();
        fs::write(&tmp, "new").unwrap();
        let e = replace(&tmp, &to).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EISDIR), "{e}");
        assert_eq!(fs::read_to_string(to.join("inside")).unwrap(), "kept");
        assert_eq!(fs::read_to_string(&tmp).unwrap(), "new");
    }
}
