//! What the state directory's caches of workspace facts share: the scan's
//! directory listings ([`super::listing`]) and the gitlinks of git indexes
//! ([`super::gitindex`]).
//!
//! A cache file is its body followed by a SHA-256 of it, so that a torn or
//! interleaved write (a launcher killed midway, two runs saving at once, a
//! run reading while another writes) reads as no cache, which costs one read
//! of what it stood for. Bodies record when they were written; a file
//! written "later" than now means the clock was set back since, and a change
//! made after that could carry a stamp the cache already holds, so it is not
//! read. Integers are little-endian; byte strings a u32 length and the bytes.

use sha2::{Digest, Sha256};
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

fn now_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// A body being written.
pub(super) struct Writer(Vec<u8>);

impl Writer {
    pub(super) fn new(magic: &[u8]) -> Writer {
        Writer(magic.to_vec())
    }

    pub(super) fn u32(&mut self, n: usize) {
        self.0.extend_from_slice(&(n as u32).to_le_bytes());
    }

    pub(super) fn u64(&mut self, n: u64) {
        self.0.extend_from_slice(&n.to_le_bytes());
    }

    pub(super) fn i64(&mut self, n: i64) {
        self.0.extend_from_slice(&n.to_le_bytes());
    }

    pub(super) fn bytes(&mut self, b: &[u8]) {
        self.u32(b.len());
        self.0.extend_from_slice(b);
    }

    /// The moment of writing (see [`Reader::written_in_the_past`]).
    pub(super) fn now(&mut self) {
        self.u64(now_nanos());
    }

    /// The file's bytes: the body and its digest.
    pub(super) fn sealed(mut self) -> Vec<u8> {
        let digest = Sha256::digest(&self.0);
        self.0.extend_from_slice(&digest);
        self.0
    }
}

/// A body being read; every read is `None` past its end.
pub(super) struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    /// The body of the file `bytes`, past `magic`, if its digest holds and
    /// it starts with `magic`.
    pub(super) fn open(bytes: &'a [u8], magic: &[u8]) -> Option<Reader<'a>> {
        let (body, digest) = bytes.split_at_checked(bytes.len().checked_sub(32)?)?;
        if Sha256::digest(body).as_slice() != digest {
            return None;
        }
        let mut r = Reader(body);
        (r.take(magic.len())? == magic).then_some(r)
    }

    pub(super) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(head)
    }

    pub(super) fn u32(&mut self) -> Option<usize> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?) as usize)
    }

    pub(super) fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    pub(super) fn i64(&mut self) -> Option<i64> {
        Some(i64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    pub(super) fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.u32()?;
        self.take(n)
    }

    /// A count of byte strings to follow: `None` if there cannot be that
    /// many left (each takes at least its 4-byte length), so that a damaged
    /// count allocates nothing huge.
    pub(super) fn count(&mut self) -> Option<usize> {
        let n = self.u32()?;
        (n <= self.0.len() / 4).then_some(n)
    }

    /// Reads the moment [`Writer::now`] wrote: `Some` if it is not later
    /// than now.
    pub(super) fn written_in_the_past(&mut self) -> Option<()> {
        (self.u64()? <= now_nanos()).then_some(())
    }

    /// Whether everything was read.
    pub(super) fn done(&self) -> bool {
        self.0.is_empty()
    }
}

/// Writes `bytes` as the cache file `file` (in the directory `dir`, made
/// owner-only if missing). In place, not as a new file renamed over the old
/// one: the digest makes a torn write read as no cache, and a new file costs
/// an inode, and ext4 flushes a file renamed over another (`auto_da_alloc`):
/// 0.3 to 0.4 ms a save on this machine, against 12 us in place. Only into a
/// regular file of ours with no other name (as if someone else could write
/// the state directory: a link in the cache's place is not written through,
/// a FIFO does not block the run); anything else there is removed, and the
/// next save makes the file. A cache that cannot be written costs speed.
pub(super) fn write_in_place(dir: &Path, file: &Path, bytes: &[u8]) {
    if std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .is_err()
    {
        return;
    }
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(file)
        .and_then(|f| {
            let m = f.metadata()?;
            if !m.file_type().is_file() || m.nlink() != 1 || m.uid() != nix::unistd::geteuid().as_raw() {
                return Err(std::io::Error::other("not a cache file of ours"));
            }
            f.write_all_at(bytes, 0)?;
            f.set_len(bytes.len() as u64)
        });
    if written.is_err() {
        let _ = std::fs::remove_file(file);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_body_reads_back_and_not_once_damaged() {
        let mut w = Writer::new(b"magic\n");
        w.now();
        w.bytes(b"name");
        w.i64(-5);
        let bytes = w.sealed();
        let mut r = Reader::open(&bytes, b"magic\n").unwrap();
        assert_eq!(r.written_in_the_past(), Some(()));
        assert_eq!(r.bytes(), Some(&b"name"[..]));
        assert_eq!(r.i64(), Some(-5));
        assert!(r.done());
        assert!(Reader::open(&bytes, b"other\n").is_none());
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 1;
            assert!(Reader::open(&bad, b"magic\n").is_none(), "byte {i} flipped");
        }
        assert!(Reader::open(&bytes[..bytes.len() - 1], b"magic\n").is_none());
    }

    #[test]
    fn a_file_written_later_than_now_is_not_read() {
        let mut w = Writer::new(b"m");
        w.u64(now_nanos() + 60_000_000_000);
        let bytes = w.sealed();
        assert_eq!(Reader::open(&bytes, b"m").unwrap().written_in_the_past(), None);
    }

    #[test]
    fn a_damaged_count_allocates_nothing() {
        let mut w = Writer::new(b"m");
        w.u32(1_000_000);
        let bytes = w.sealed();
        assert_eq!(Reader::open(&bytes, b"m").unwrap().count(), None);
    }

    #[test]
    fn only_a_regular_file_of_ours_is_written_through() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("cache");
        let file = dir.join("f");
        write_in_place(&dir, &file, b"long contents");
        write_in_place(&dir, &file, b"short");
        assert_eq!(std::fs::read(&file).unwrap(), b"short");
        // A link in the cache's place is removed, not written through.
        let target = t.path().join("target");
        std::fs::write(&target, b"theirs").unwrap();
        std::fs::remove_file(&file).unwrap();
        std::os::unix::fs::symlink(&target, &file).unwrap();
        write_in_place(&dir, &file, b"mine");
        assert_eq!(std::fs::read(&target).unwrap(), b"theirs");
        assert!(std::fs::symlink_metadata(&file).is_err());
    }
}
