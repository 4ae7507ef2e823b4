//! The workspace's state, as far as approvals need it.
//!
//! An approval is bound to the workspace as it was when the action was held:
//! its *fingerprint* (every entry's relative path, type, size, modification
//! time, mode and inode, hashed in path order; contents are not read, so the
//! cost grows with the number of entries, not their size) and its *generation*
//! (a counter in the state directory that every writable run bumps). Same
//! generation with different content, or the same content after runs, both
//! show as a change. Symlinks are recorded by their target, never followed.

use sha2::{Digest, Sha256};
use std::os::fd::AsFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    #[error("{path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot record the workspace generation in {path}: {source}")]
    Generation {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot record in {path} that sandboxed commands write in this workspace (later runs elsewhere must not follow the links they leave), so nothing ran: {source}")]
    Record {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// One entry of a fingerprint: its path relative to the workspace, its type,
/// size, modification time, mode, inode and link count, and a symlink's target.
type FingerprintEntry = (Vec<u8>, [u64; 6], Vec<u8>);

/// Entries one thread reads before a second is worth starting (starting one
/// costs about what 50 entries do; a workspace of a few hundred files never
/// waits for it).
const ENTRIES_BEFORE_A_HELPER: usize = 1000;

/// SHA-256 over the metadata of every entry below `root` (`sha256:<hex>`).
///
/// Its cost is one `stat` an entry, almost all of it the kernel's, so past
/// [`ENTRIES_BEFORE_A_HELPER`] entries the directories still to read are
/// shared with helper threads, one per further core (at most three). Each
/// entry is looked up by name in its open directory (`fstatat`): threads
/// walking paths from `/` contend on the dentries they share. At 10,000
/// files this halves the time on two cores, at 100,000 it takes a third (see
/// README). The digest does not depend on who read what: entries are hashed
/// in path order.
///
/// `ignore`: plain paths relative to `root` (the policy's
/// `fingerprint_ignore`) whose entries, and everything below them, are left
/// out. The policy's digest, which approvals also bind, covers that list.
pub fn fingerprint(root: &Path, ignore: &[String]) -> Result<String, WorkspaceError> {
    let walk = Walk {
        root,
        ignore,
        todo: std::sync::Mutex::new(Todo {
            dirs: vec![root.to_path_buf()],
            reading: 0,
            failed: None,
        }),
        changed: std::sync::Condvar::new(),
    };
    let mut entries = std::thread::scope(|s| {
        let mut started = Vec::new();
        // Asked only once a helper is worth it (it reads cgroup files).
        let mut helpers: Option<usize> = None;
        let mut mine = walk.read(&mut |read, more_waiting| {
            if read < ENTRIES_BEFORE_A_HELPER || !more_waiting {
                return;
            }
            let most = *helpers
                .get_or_insert_with(|| std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 4) - 1);
            if started.len() < most {
                // No thread to be had (a process limit): the others read on.
                match std::thread::Builder::new().spawn_scoped(s, || walk.read(&mut |_, _| {})) {
                    Ok(h) => started.push(h),
                    Err(_) => helpers = Some(started.len()),
                }
            }
        });
        for h in started {
            mine.extend(h.join().expect("a fingerprint helper does not panic"));
        }
        mine
    });
    if let Some(e) = walk.todo.into_inner().unwrap_or_else(|p| p.into_inner()).failed {
        return Err(e);
    }
    entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let mut h = Sha256::new();
    for (rel, meta, target) in &entries {
        h.update((rel.len() as u64).to_le_bytes());
        h.update(rel);
        for v in meta {
            h.update(v.to_le_bytes());
        }
        h.update((target.len() as u64).to_le_bytes());
        h.update(target);
    }
    Ok(format!("sha256:{}", crate::policy::hex(&h.finalize())))
}

/// The directories a fingerprint has still to read, shared by its threads.
struct Walk<'a> {
    root: &'a Path,
    ignore: &'a [String],
    todo: std::sync::Mutex<Todo>,
    /// Signalled when directories are added, one is done, or a read failed.
    changed: std::sync::Condvar,
}

struct Todo {
    dirs: Vec<PathBuf>,
    /// Directories being read now: their subdirectories may follow.
    reading: usize,
    /// The first failure: every thread stops, and the fingerprint is an error.
    failed: Option<WorkspaceError>,
}

impl Walk<'_> {
    /// Reads directories until none is left or one failed; returns the
    /// entries read. `progress(entries read, directories waiting)` is called
    /// after each directory.
    fn read(&self, progress: &mut dyn FnMut(usize, bool)) -> Vec<FingerprintEntry> {
        let mut entries = Vec::new();
        loop {
            let dir = {
                let mut todo = self.todo.lock().unwrap_or_else(|p| p.into_inner());
                loop {
                    if todo.failed.is_some() {
                        return entries;
                    }
                    if let Some(d) = todo.dirs.pop() {
                        todo.reading += 1;
                        break d;
                    }
                    if todo.reading == 0 {
                        return entries;
                    }
                    todo = self.changed.wait(todo).unwrap_or_else(|p| p.into_inner());
                }
            };
            let mut subdirs = Vec::new();
            let read = self.read_dir(&dir, &mut entries, &mut subdirs);
            let more_waiting = {
                let mut todo = self.todo.lock().unwrap_or_else(|p| p.into_inner());
                todo.reading -= 1;
                match read {
                    Ok(()) => todo.dirs.extend(subdirs),
                    Err(e) => {
                        todo.failed.get_or_insert(e);
                    }
                }
                !todo.dirs.is_empty()
            };
            self.changed.notify_all();
            progress(entries.len(), more_waiting);
        }
    }

    fn read_dir(
        &self,
        dir: &Path,
        entries: &mut Vec<FingerprintEntry>,
        subdirs: &mut Vec<PathBuf>,
    ) -> Result<(), WorkspaceError> {
        use nix::fcntl::{AtFlags, OFlag};
        let read_err = |path: &Path, e: nix::Error| WorkspaceError::Read {
            path: path.to_path_buf(),
            source: e.into(),
        };
        let mut d = nix::dir::Dir::open(
            dir,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .map_err(|e| read_err(dir, e))?;
        let mut names = Vec::new();
        for e in d.iter() {
            let e = e.map_err(|e| read_err(dir, e))?;
            if !matches!(e.file_name().to_bytes(), b"." | b"..") {
                names.push(e.file_name().to_owned());
            }
        }
        let fd = d.as_fd();
        let dir_rel = dir.strip_prefix(self.root).unwrap_or(dir).as_os_str().as_bytes();
        for name in &names {
            let name = name.as_c_str();
            let mut rel = Vec::with_capacity(dir_rel.len() + 1 + name.to_bytes().len());
            if !dir_rel.is_empty() {
                rel.extend_from_slice(dir_rel);
                rel.push(b'/');
            }
            rel.extend_from_slice(name.to_bytes());
            if self.ignore.iter().any(|i| i.as_bytes() == rel.as_slice()) {
                continue;
            }
            let m = nix::sys::stat::fstatat(fd, name, AtFlags::AT_SYMLINK_NOFOLLOW)
                .map_err(|e| read_err(&dir.join(std::ffi::OsStr::from_bytes(name.to_bytes())), e))?;
            let kind = match m.st_mode & libc::S_IFMT {
                libc::S_IFDIR => 1,
                libc::S_IFLNK => 2,
                _ => 0,
            };
            let target = if kind == 2 {
                nix::fcntl::readlinkat(fd, name)
                    .map(|t| t.into_vec())
                    .unwrap_or_default()
            } else {
                Vec::new()
            };
            // Directory sizes and times change with their entries, which are hashed anyway.
            let (size, mtime) = if kind == 1 {
                (0, 0)
            } else {
                (m.st_size as u64, m.st_mtime_nsec as u64 ^ (m.st_mtime as u64) << 30)
            };
            if kind == 1 {
                subdirs.push(dir.join(std::ffi::OsStr::from_bytes(name.to_bytes())));
            }
            entries.push((
                rel,
                [kind, size, mtime, u64::from(m.st_mode), m.st_ino, m.st_nlink as u64],
                target,
            ));
        }
        Ok(())
    }
}

/// Opens for reading a file the sandbox could have planted or replaced
/// (`.git/config`, the index, `pyvenv.cfg`, a captured file): never through
/// a symlink at its last component, never blocking (a FIFO there would
/// hang the launcher, and every later start that finishes its checks), and
/// only a regular file.
pub fn open_planted(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_NOCTTY)
        .open(path)?;
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{}: not a regular file", path.display()),
        ));
    }
    Ok(f)
}

/// [`open_planted`], read to its end, at most `limit` bytes.
pub fn read_planted(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut out = Vec::new();
    open_planted(path)?.take(limit).read_to_end(&mut out)?;
    Ok(out)
}

fn generations_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("generations")
}

/// What names a workspace in the state directory: the first half of the
/// digest of its path.
fn workspace_id(workspace: &Path) -> String {
    let id = crate::policy::hex(&Sha256::digest(workspace.as_os_str().as_bytes()));
    id[..32].to_string()
}

fn generation_file(state_dir: &Path, workspace: &Path) -> PathBuf {
    generations_dir(state_dir).join(workspace_id(workspace))
}

/// Whether a run in one of the workspaces `a` and `b` can change the other:
/// one is the other or holds it.
fn overlap(a: &Path, b: &Path) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// How many writable runs have happened in this workspace or in one that
/// overlaps it (a folder of it, or one holding it: a run there writes here
/// too), 0 if none. Each workspace counts its own runs in a file of its own
/// (see [`bump_generation`]), its path after the count; a file without one
/// (written by an earlier version) counts only for the workspace its name
/// is the digest of.
pub fn generation(state_dir: &Path, workspace: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(generations_dir(state_dir)) else {
        return 0;
    };
    let own = workspace_id(workspace);
    let mut sum: u64 = 0;
    for e in rd {
        let Ok(e) = e else {
            return unreadable_generation();
        };
        let Ok(mut f) = std::fs::File::open(e.path()) else {
            return unreadable_generation();
        };
        // Shared lock: never read a bump half-written.
        if f.lock_shared().is_err() {
            return unreadable_generation();
        }
        let (count, path) = read_generation(&mut f);
        let counts = match path {
            Some(p) => overlap(&p, workspace),
            None => e.file_name() == own.as_str(),
        };
        if counts {
            sum = sum.saturating_add(count);
        }
    }
    sum
}

/// Width of the counter on disk: rewritten in place, always the same length.
const GENERATION_WIDTH: usize = 20;

/// (the count, the workspace it counts runs of). A file that cannot be read
/// counts as unreadable.
fn read_generation(f: &mut std::fs::File) -> (u64, Option<PathBuf>) {
    use std::io::{Read, Seek};
    let mut bytes = Vec::new();
    if f.rewind().is_err() || f.read_to_end(&mut bytes).is_err() {
        return (unreadable_generation(), None);
    }
    let (count, path) = match bytes.iter().position(|&b| b == b'\n') {
        Some(i) => (&bytes[..i], &bytes[i + 1..]),
        None => (&bytes[..], &[][..]),
    };
    let count = match std::str::from_utf8(count).map(str::trim) {
        Ok("") => 0,
        Ok(t) => t.parse().unwrap_or_else(|_| unreadable_generation()),
        Err(_) => unreadable_generation(),
    };
    let path = (!path.is_empty()).then(|| PathBuf::from(std::ffi::OsStr::from_bytes(path)));
    (count, path)
}

/// A damaged counter must never read as an old value an approval could be
/// bound to: it reads as a fresh, far larger one (nanoseconds since the epoch).
fn unreadable_generation() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(u64::MAX / 2, |d| d.as_nanos() as u64)
}

/// Count one more writable run in `workspace`. The counter is rewritten in
/// place under an exclusive lock (a temp file renamed over it made ext4
/// flush the data on every run: ~0.2 ms), the workspace's path after it,
/// written once; a torn write reads as unreadable, hence as new.
pub fn bump_generation(state_dir: &Path, workspace: &Path) -> Result<u64, WorkspaceError> {
    bump_generation_file(&generation_file(state_dir, workspace), Some(workspace))
}

fn bump_generation_file(path: &Path, workspace: Option<&Path>) -> Result<u64, WorkspaceError> {
    use std::os::unix::fs::FileExt;
    let err = |e| WorkspaceError::Generation {
        path: path.to_path_buf(),
        source: e,
    };
    std::fs::create_dir_all(path.parent().expect("has a parent")).map_err(err)?;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(err)?;
    f.lock().map_err(err)?;
    let (count, named) = read_generation(&mut f);
    let next = count.saturating_add(1);
    let line = format!("{next:0GENERATION_WIDTH$}\n");
    f.write_all_at(line.as_bytes(), 0).map_err(err)?;
    if let (None, Some(ws)) = (named, workspace) {
        f.write_all_at(ws.as_os_str().as_bytes(), line.len() as u64)
            .map_err(err)?;
    }
    Ok(next)
}

fn written_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("workspaces")
}

/// Record, before a writable sandbox starts, that sandboxed commands write in
/// `workspace`: two markers in `<state_dir>/workspaces`, one by its path
/// (`path-<digest>`, which survives a reboot that renumbers a filesystem's
/// device) and one by its device and inode numbers (`id-<dev>-<ino>`, which
/// follow it when it is renamed or moved, and show through another mount of
/// it), each holding the path, for people; and the path appended to
/// `paths` (NUL-ended), the list a check for workspaces *below* a directory
/// reads. A run there can leave a link pointing anywhere of the person's; a
/// later run in another workspace whose `PATH` or `read_only_paths` passes
/// through it must not follow it (see [`WrittenWorkspaces`]). Written once
/// per workspace, synced, with the directories that name it (a record lost
/// in a crash would leave its links trusted); a `stat` and two `lstat`s a run
/// after that.
pub fn remember_written(state_dir: &Path, workspace: &Path) -> Result<(), WorkspaceError> {
    use std::io::Write;
    let dir = written_dir(state_dir);
    let err = |path: &Path, e| WorkspaceError::Record {
        path: path.to_path_buf(),
        source: e,
    };
    let m = std::fs::metadata(workspace).map_err(|e| err(workspace, e))?;
    let mut synced_any = false;
    for name in [path_marker(workspace), id_marker(m.dev(), m.ino())] {
        let path = dir.join(&name);
        if std::fs::symlink_metadata(&path).is_ok() {
            continue;
        }
        if !dir.is_dir() {
            std::fs::create_dir_all(&dir).map_err(|e| err(&dir, e))?;
            // The record's directory is a new name in the state directory.
            std::fs::File::open(state_dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| err(state_dir, e))?;
        }
        if name.starts_with("path-") {
            let list = dir.join(PATHS_LIST);
            let mut line = workspace.as_os_str().as_bytes().to_vec();
            line.push(0);
            std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .open(&list)
                .and_then(|mut f| {
                    f.write_all(&line)?;
                    f.sync_all()
                })
                .map_err(|e| err(&list, e))?;
        }
        // Whole or not at all: written aside, synced, renamed into place.
        let aside = dir.join(format!(".{name}-{}", std::process::id()));
        let written = std::fs::File::create(&aside).and_then(|mut f| {
            f.write_all(workspace.as_os_str().as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&aside, &path)
        });
        if let Err(e) = written {
            let _ = std::fs::remove_file(&aside);
            return Err(err(&path, e));
        }
        synced_any = true;
    }
    if synced_any {
        std::fs::File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| err(&dir, e))?;
    }
    Ok(())
}

/// In the record's directory: every recorded path, each ended by a NUL.
const PATHS_LIST: &str = "paths";

fn path_marker(workspace: &Path) -> String {
    path_marker_of(&workspace_id(workspace))
}

fn path_marker_of(id: &str) -> String {
    format!("path-{id}")
}

fn id_marker(dev: u64, ino: u64) -> String {
    format!("id-{dev}-{ino}")
}

/// The directories of the state directory that hold what sandboxed commands
/// wrote (captures, previews, and links to previews being landed).
const STATE_CAPTURE_DIRS: [&str; 4] = ["overlays", "previews", "spare-captures", "landings"];

/// Where sandboxed commands can write between two runs, as far as one state
/// directory knows: the run's own workspace, every workspace recorded by
/// [`remember_written`] (or, by versions before that record, given a
/// generation), and the captures of their writes (in the state directory,
/// and beside each workspace).
pub struct WrittenWorkspaces<'a> {
    current: &'a Path,
    state_dir: Option<&'a Path>,
}

/// The names in the record of written workspaces at one moment (see
/// [`WrittenWorkspaces::listing`]); `Err`: a directory of it that cannot be
/// listed. `None` without a state directory.
pub struct Listing(Option<Result<(MarkerNames, MarkerNames), PathBuf>>, Vec<PathBuf>);

type MarkerNames = std::collections::HashSet<std::ffi::OsString>;

/// Which writable directory a link lies in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WrittenBy {
    /// The run's own workspace.
    ThisWorkspace,
    /// Another workspace where sandboxed commands have run (where it is now).
    Workspace(PathBuf),
    /// Where the writes of sandboxed commands are captured (previews, overlays).
    Captures(PathBuf),
    /// Unknown: the record of workspaces (this directory) cannot be read, so
    /// no link outside the run's workspace is trusted.
    Unrecorded(PathBuf),
}

impl std::fmt::Display for WrittenBy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WrittenBy::ThisWorkspace => write!(f, "the workspace"),
            WrittenBy::Workspace(p) => write!(f, "{}, a workspace where sandboxed commands have run", p.display()),
            WrittenBy::Captures(p) => write!(f, "{}, where tether-exec keeps what sandboxed commands wrote", p.display()),
            WrittenBy::Unrecorded(d) => write!(
                f,
                "a directory that may be a workspace of sandboxed commands, since their record {} cannot be read (make that directory of tether-exec's readable to this user again)",
                d.display()
            ),
        }
    }
}

impl<'a> WrittenWorkspaces<'a> {
    /// `state_dir`: `None` where no state directory is known (only the
    /// current workspace counts).
    pub fn new(current: &'a Path, state_dir: Option<&'a Path>) -> Self {
        WrittenWorkspaces { current, state_dir }
    }

    /// The writable directory `path` (whose directories hold no link: the
    /// link being resolved, or a real path) lies in, if any: walking up from
    /// it, the first of the run's own workspace, a capture directory, or a
    /// recorded workspace (by path or by device and inode). Asked afresh
    /// each time: a link seen now was made by a run whose workspace was on
    /// record before that run's sandbox started. A record that cannot be
    /// read answers `Unrecorded` for every path.
    pub fn holding(&self, path: &Path) -> Option<WrittenBy> {
        self.holding_by(&self.listing(), path, true)
    }

    /// The record as it is now, for several questions at once: read it
    /// after whatever was seen that it must answer for (a link, a `lib`).
    pub fn listing(&self) -> Listing {
        let names = self.state_dir.map(|state_dir| {
            match (
                marker_names(&written_dir(state_dir)),
                marker_names(&generations_dir(state_dir)),
            ) {
                (Ok(w), Ok(g)) => Ok((w, g)),
                (Err(dir), _) | (_, Err(dir)) => Err(dir),
            }
        });
        Listing(names, Vec::new())
    }

    /// [`listing`](Self::listing) with every recorded path too (one more
    /// file read), for [`holds_written_below`](Self::holds_written_below).
    pub fn listing_with_paths(&self) -> Listing {
        let mut listing = self.listing();
        if let (Some(state_dir), Some(Ok(_))) = (self.state_dir, &listing.0) {
            let list = written_dir(state_dir).join(PATHS_LIST);
            match std::fs::read(&list) {
                Ok(bytes) => {
                    listing.1 = bytes
                        .split(|&b| b == 0)
                        .filter(|p| !p.is_empty())
                        .map(|p| PathBuf::from(std::ffi::OsStr::from_bytes(p)))
                        .collect()
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(_) => listing.0 = Some(Err(list)),
            }
        }
        listing
    }

    /// Whether showing the directory `dir` whole would show a place where
    /// sandboxed commands write: a recorded workspace below it (or the
    /// captures beside one), or one it lies in (see
    /// [`holding_in`](Self::holding_in)). `listing`: from
    /// [`listing_with_paths`](Self::listing_with_paths).
    pub fn holds_written_below(&self, listing: &Listing, dir: &Path) -> bool {
        if matches!(listing.0, Some(Err(_))) || self.holding_in(listing, dir).is_some() {
            return true;
        }
        listing.1.iter().any(|w| w.starts_with(dir))
    }

    /// [`holding`](Self::holding), by a listing read already.
    pub fn holding_in(&self, listing: &Listing, path: &Path) -> Option<WrittenBy> {
        self.holding_by(listing, path, true)
    }

    /// Where sandboxed commands other than this workspace's can write
    /// `path`: [`holding`](Self::holding), except that in the run's own
    /// workspace the walk goes on past it, to a recorded workspace that
    /// holds it (a file of this workspace that runs in an enclosing one can
    /// rewrite: this run's pins do not hold there). `None`: only this
    /// workspace's runs, or none.
    pub fn others_holding(&self, path: &Path) -> Option<WrittenBy> {
        self.holding_by(&self.listing(), path, false)
            .filter(|by| *by != WrittenBy::ThisWorkspace)
    }

    fn holding_by(&self, listing: &Listing, path: &Path, stop_at_this_workspace: bool) -> Option<WrittenBy> {
        let (Some(state_dir), Some(markers)) = (self.state_dir, &listing.0) else {
            return path.starts_with(self.current).then_some(WrittenBy::ThisWorkspace);
        };
        // The state directory's captures of sandboxed writes (its other
        // files, policies a harness keeps there say, no sandbox reaches).
        if let Some(std::path::Component::Normal(first)) = path
            .strip_prefix(state_dir)
            .ok()
            .and_then(|rest| rest.components().next())
        {
            if STATE_CAPTURE_DIRS.iter().any(|d| first == std::ffi::OsStr::new(d)) {
                return Some(WrittenBy::Captures(state_dir.join(first)));
            }
        }
        let (by_path_or_id, legacy) = match markers {
            Ok(m) => m,
            Err(dir) => return Some(WrittenBy::Unrecorded(dir.clone())),
        };
        let any_id = by_path_or_id.iter().any(|n| n.as_bytes().starts_with(b"id-"));
        let mut in_this_workspace = false;
        for dir in path.ancestors() {
            if dir == self.current {
                if stop_at_this_workspace {
                    return Some(WrittenBy::ThisWorkspace);
                }
                in_this_workspace = true;
                continue;
            }
            if dir.file_name() == Some(std::ffi::OsStr::new(overlay::BESIDE_WORKSPACE)) {
                return Some(WrittenBy::Captures(dir.to_path_buf()));
            }
            // One digest names both: the marker and a generation.
            let id = workspace_id(dir);
            let named = by_path_or_id.contains(std::ffi::OsStr::new(&path_marker_of(&id)))
                || legacy.contains(std::ffi::OsStr::new(&id));
            // By device and inode: one `lstat` an ancestor, once any is on
            // record (`/` is never renamed).
            let by_id = || {
                any_id
                    && dir != Path::new("/")
                    && std::fs::symlink_metadata(dir).is_ok_and(|m| {
                        m.is_dir() && by_path_or_id.contains(std::ffi::OsStr::new(&id_marker(m.dev(), m.ino())))
                    })
            };
            if named || by_id() {
                return Some(WrittenBy::Workspace(dir.to_path_buf()));
            }
        }
        in_this_workspace.then_some(WrittenBy::ThisWorkspace)
    }
}

/// The names in the record directory `dir` (none when it does not exist);
/// `Err(dir)` when it cannot be listed.
fn marker_names(dir: &Path) -> Result<MarkerNames, PathBuf> {
    let entries = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Default::default()),
        Err(_) => return Err(dir.to_path_buf()),
    };
    entries
        .map(|e| e.map(|e| e.file_name()).map_err(|_| dir.to_path_buf()))
        .collect()
}

/// Where a path leads when it is resolved as the kernel resolves it,
/// component by component, but no link in a writable directory is followed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinksOutside {
    /// The real path: every link on the way lies outside the writable
    /// directories.
    Real(PathBuf),
    /// The way reads this link in a writable directory (also one a link
    /// outside leads to, or one reached by `..`).
    LinkIn(PathBuf, WrittenBy),
    /// A component does not exist or cannot be read.
    Missing,
    /// More links than the kernel follows in one lookup.
    Loop,
}

/// Resolve `path` (absolute) without following a link that lies where
/// sandboxed commands write (`written`: the run's workspace and the others
/// its state directory knows), whose links such a command can point anywhere
/// between two runs. Unlike a lexical comparison, a plain `ws/../x` does not
/// count as passing through `ws`.
pub fn resolve_links_outside(path: &Path, written: &WrittenWorkspaces) -> LinksOutside {
    resolve_links_outside_tracing(path, written, &mut Vec::new())
}

/// [`resolve_links_outside`], adding each link followed to `followed` as
/// (where it is, its target as written): a sandbox that shows only the real
/// path can make the links on the way again.
pub fn resolve_links_outside_tracing(
    path: &Path,
    written: &WrittenWorkspaces,
    followed: &mut Vec<(PathBuf, PathBuf)>,
) -> LinksOutside {
    use std::path::Component;
    // What is left to walk, last component first.
    let mut left: Vec<std::ffi::OsString> = Vec::new();
    let push = |left: &mut Vec<std::ffi::OsString>, p: &Path| {
        for c in p.components().rev() {
            match c {
                Component::Normal(n) => left.push(n.to_os_string()),
                Component::ParentDir => left.push("..".into()),
                Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
            }
        }
    };
    push(&mut left, path);
    let mut at = PathBuf::from("/");
    let mut links = 0;
    while let Some(name) = left.pop() {
        if name == ".." {
            // `at` holds no link: its parent is the real one.
            at.pop();
            continue;
        }
        let next = at.join(&name);
        let Ok(meta) = std::fs::symlink_metadata(&next) else {
            return LinksOutside::Missing;
        };
        if !meta.file_type().is_symlink() {
            at = next;
            continue;
        }
        if let Some(by) = written.holding(&next) {
            return LinksOutside::LinkIn(next, by);
        }
        links += 1;
        if links > 40 {
            return LinksOutside::Loop;
        }
        let Ok(target) = std::fs::read_link(&next) else {
            return LinksOutside::Missing;
        };
        if target.is_absolute() {
            at = PathBuf::from("/");
        }
        push(&mut left, &target);
        followed.push((next, target));
    }
    LinksOutside::Real(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A workspace may hold names that are not UTF-8; the check a run owes is
    /// written to disk all the same, and read back as it was.
    #[test]
    fn a_snapshot_with_names_that_are_not_utf8_survives_its_record() {
        use std::os::unix::ffi::OsStringExt;
        let odd = PathBuf::from(std::ffi::OsString::from_vec(b".env\xff".to_vec()));
        let before = ProtectedSnapshot {
            entries: vec![(odd.join("config"), Some((1, 2))), (PathBuf::from(".git/hooks"), None)],
            git_dirs: vec![odd.clone()],
            pointers: vec![(odd.clone(), None)],
            env_files: EnvSecrets(vec![(odd.clone(), Some((3, 4, 5, 6)))]),
            found: vec![odd.join("proj")],
        };
        let text = serde_json::to_vec(&PendingRecord {
            workspace: path_bytes(&odd),
            before: before.clone(),
        })
        .unwrap();
        let back: PendingRecord = serde_json::from_slice(&text).unwrap();
        assert_eq!(bytes_path(back.workspace), odd);
        assert_eq!(format!("{:?}", back.before), format!("{before:?}"));
    }

    #[test]
    fn repositories_in_tools_caches_under_home_are_not_taken_for_the_persons() {
        for (rel, cached) in [
            (".cache/pre-commit/repoabc", true),
            (".cargo/git/checkouts/x-1/abc", true),
            ("go/pkg/mod/github.com/a/b", true),
            ("go/src/project", false),
            ("vendor/x", false),
            ("src/.cache/x", false),
            ("proj", false),
        ] {
            assert_eq!(in_tool_cache(Path::new(rel)), cached, "{rel}");
        }
    }

    #[test]
    fn fingerprint_sees_content_metadata_and_names() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("a"), "1").unwrap();
        let f1 = fingerprint(d.path(), &[]).unwrap();
        assert_eq!(f1, fingerprint(d.path(), &[]).unwrap());
        std::fs::write(d.path().join("a"), "22").unwrap();
        let f2 = fingerprint(d.path(), &[]).unwrap();
        assert_ne!(f1, f2);
        std::fs::create_dir(d.path().join("sub")).unwrap();
        assert_ne!(f2, fingerprint(d.path(), &[]).unwrap());
    }

    /// The fingerprint as it was first defined, read by one thread: the
    /// shared walk must give the same digest (an action held by an earlier
    /// build resumes under a later one).
    fn fingerprint_alone(root: &Path) -> String {
        let mut entries: Vec<(Vec<u8>, [u64; 6], Vec<u8>)> = Vec::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for e in std::fs::read_dir(&dir).unwrap() {
                let path = e.unwrap().path();
                let m = std::fs::symlink_metadata(&path).unwrap();
                let rel = path.strip_prefix(root).unwrap().as_os_str().as_bytes().to_vec();
                let kind = if m.is_dir() {
                    1
                } else if m.file_type().is_symlink() {
                    2
                } else {
                    0
                };
                let target = if kind == 2 {
                    std::fs::read_link(&path).unwrap().as_os_str().as_bytes().to_vec()
                } else {
                    Vec::new()
                };
                let (size, mtime) = if kind == 1 {
                    (0, 0)
                } else {
                    (m.size(), m.mtime_nsec() as u64 ^ (m.mtime() as u64) << 30)
                };
                entries.push((
                    rel,
                    [kind, size, mtime, u64::from(m.mode()), m.ino(), m.nlink()],
                    target,
                ));
                if kind == 1 {
                    stack.push(path);
                }
            }
        }
        entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut h = Sha256::new();
        for (rel, meta, target) in &entries {
            h.update((rel.len() as u64).to_le_bytes());
            h.update(rel);
            for v in meta {
                h.update(v.to_le_bytes());
            }
            h.update((target.len() as u64).to_le_bytes());
            h.update(target);
        }
        format!("sha256:{}", crate::policy::hex(&h.finalize()))
    }

    #[test]
    fn fingerprint_is_the_digest_it_always_was_whoever_reads_what() {
        use std::os::unix::ffi::OsStringExt;
        let d = tempfile::tempdir().unwrap();
        let odd = std::ffi::OsString::from_vec(b"odd\xff name".to_vec());
        std::fs::create_dir_all(d.path().join("a/b/c")).unwrap();
        std::fs::create_dir_all(d.path().join(&odd)).unwrap();
        std::fs::write(d.path().join("a/b/c/deep.txt"), "deep").unwrap();
        std::fs::write(d.path().join(&odd).join("f"), "x").unwrap();
        std::fs::write(d.path().join("top"), "t").unwrap();
        std::fs::hard_link(d.path().join("top"), d.path().join("a/linked")).unwrap();
        std::os::unix::fs::symlink("../top", d.path().join("a/rel-link")).unwrap();
        std::os::unix::fs::symlink("/nowhere", d.path().join("dangling")).unwrap();
        std::os::unix::fs::symlink("a", d.path().join("dir-link")).unwrap();
        std::fs::create_dir(d.path().join("empty")).unwrap();
        assert_eq!(fingerprint(d.path(), &[]).unwrap(), fingerprint_alone(d.path()));
        // Enough entries in enough directories for helpers to share the walk.
        for i in 0..3000 {
            let sub = d.path().join(format!("many/d{}/e{}", i / 300, i / 30));
            std::fs::create_dir_all(&sub).unwrap();
            std::fs::write(sub.join(format!("f{i}")), i.to_string()).unwrap();
        }
        let shared = fingerprint(d.path(), &[]).unwrap();
        assert_eq!(shared, fingerprint_alone(d.path()));
        std::fs::write(d.path().join("many/d9/e99/f2999"), "changed").unwrap();
        assert_ne!(
            fingerprint(d.path(), &[]).unwrap(),
            shared,
            "one file's change among thousands"
        );
    }

    #[test]
    fn ignored_paths_are_left_out_with_everything_below_them() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("target/debug")).unwrap();
        std::fs::create_dir_all(d.path().join("web/node_modules/x")).unwrap();
        std::fs::write(d.path().join("src.rs"), "fn main() {}").unwrap();
        let ignore = ["target".to_string(), "web/node_modules".to_string()];
        let before = fingerprint(d.path(), &ignore).unwrap();
        let whole_before = fingerprint(d.path(), &[]).unwrap();
        std::fs::write(d.path().join("target/debug/app"), "built").unwrap();
        std::fs::write(d.path().join("web/node_modules/x/index.js"), "1").unwrap();
        assert_eq!(
            fingerprint(d.path(), &ignore).unwrap(),
            before,
            "changes below ignored paths"
        );
        // Control: without the list the same changes show.
        assert_ne!(fingerprint(d.path(), &[]).unwrap(), whole_before);
        // What is not ignored still counts: the same name one level down, a
        // sibling whose name only starts alike, and the rest of `web`.
        for changed in ["web/target", "targets", "web/x.js"] {
            std::fs::write(d.path().join(changed), "n").unwrap();
            assert_ne!(fingerprint(d.path(), &ignore).unwrap(), before, "{changed}");
            std::fs::remove_file(d.path().join(changed)).unwrap();
        }
        assert_eq!(fingerprint(d.path(), &ignore).unwrap(), before);
    }

    #[test]
    fn an_unreadable_directory_is_an_error_that_names_it() {
        // Root reads every directory; as anyone else, a directory of mode 000
        // must fail the fingerprint, never give a digest of less.
        let d = tempfile::tempdir().unwrap();
        for i in 0..2000 {
            let sub = d.path().join(format!("d{}", i / 100));
            std::fs::create_dir_all(&sub).unwrap();
            std::fs::write(sub.join(format!("f{i}")), "x").unwrap();
        }
        std::fs::create_dir_all(d.path().join("d7/locked/inner")).unwrap();
        if nix::unistd::geteuid().is_root() {
            assert!(fingerprint(d.path(), &[]).is_ok());
            return;
        }
        use std::os::unix::fs::PermissionsExt;
        let locked = d.path().join("d7/locked");
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
        let got = fingerprint(d.path(), &[]);
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = got.unwrap_err().to_string();
        assert!(e.contains("d7/locked"), "{e}");
    }

    #[test]
    fn a_run_is_in_progress_while_its_launcher_holds_its_pending_check() {
        let s = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let other = Path::new("/some/other/ws");
        let empty = || ProtectedSnapshot {
            entries: Vec::new(),
            git_dirs: Vec::new(),
            pointers: Vec::new(),
            env_files: EnvSecrets(Vec::new()),
            found: Vec::new(),
        };
        assert!(writable_run_in_progress(s.path(), ws.path()).is_none(), "no run yet");
        let check = PendingCheck::record(s.path(), ws.path(), &empty()).unwrap();
        assert!(writable_run_in_progress(s.path(), ws.path()).is_some());
        assert!(
            writable_run_in_progress(s.path(), other).is_none(),
            "another workspace's run"
        );
        // Renamed to the pid of no process, it is still held: another
        // start's recovery leaves it (and its run stays in progress).
        let dead = format!("4194304-1{}", workspace_tag(ws.path()));
        std::fs::rename(&check.path, pending_dir(s.path()).join(&dead)).unwrap();
        assert!(recover_pending_checks(s.path()).is_empty());
        assert!(
            pending_dir(s.path()).join(&dead).exists(),
            "a live run's check was taken"
        );
        assert!(writable_run_in_progress(s.path(), ws.path()).is_some());
        // Its launcher gone (the lock let go with it), its end never
        // counted: it counts as in progress until the next start does the
        // check, moves the generation on and removes it.
        drop(check);
        assert!(
            writable_run_in_progress(s.path(), ws.path()).is_some(),
            "a dead launcher's run"
        );
        assert_eq!(generation(s.path(), ws.path()), 0);
        recover_pending_checks(s.path());
        assert!(!pending_dir(s.path()).join(&dead).exists());
        assert!(writable_run_in_progress(s.path(), ws.path()).is_none());
        assert_eq!(generation(s.path(), ws.path()), 1, "the interrupted run counted");
        // A run in a folder of the workspace, or in one holding it, can
        // change it too; one beside it cannot.
        let inner = ws.path().join("sub");
        let outer = ws.path().parent().unwrap();
        for (at, counts) in [(inner.as_path(), true), (outer, true), (other, false)] {
            let c = PendingCheck::record(s.path(), at, &empty()).unwrap();
            assert_eq!(
                writable_run_in_progress(s.path(), ws.path()).is_some(),
                counts,
                "{}",
                at.display()
            );
            c.done();
        }
        assert!(writable_run_in_progress(s.path(), ws.path()).is_none(), "finished runs");
    }

    #[test]
    fn a_workspace_counts_the_runs_of_every_workspace_overlapping_it() {
        let s = tempfile::tempdir().unwrap();
        let ws = Path::new("/p/ws");
        assert_eq!(generation(s.path(), ws), 0);
        bump_generation(s.path(), Path::new("/p/ws/sub")).unwrap();
        assert_eq!(generation(s.path(), ws), 1, "a run in a folder of it");
        bump_generation(s.path(), Path::new("/p")).unwrap();
        assert_eq!(generation(s.path(), ws), 2, "a run in one holding it");
        bump_generation(s.path(), Path::new("/p/ws2")).unwrap();
        bump_generation(s.path(), Path::new("/q")).unwrap();
        assert_eq!(generation(s.path(), ws), 2, "runs beside it");
        bump_generation(s.path(), ws).unwrap();
        assert_eq!(generation(s.path(), ws), 3);
        assert_eq!(generation(s.path(), Path::new("/p/ws2")), 2);
        // A counter an earlier version wrote (no path after it) is the
        // workspace's its name says.
        std::fs::write(generation_file(s.path(), Path::new("/p/old")), format!("{:020}\n", 5)).unwrap();
        assert_eq!(generation(s.path(), Path::new("/p/old")), 6, "its own 5 and /p's 1");
        assert_eq!(generation(s.path(), ws), 3, "another's, by name");
        assert_eq!(bump_generation(s.path(), Path::new("/p/old")).unwrap(), 6);
        assert_eq!(generation(s.path(), Path::new("/p/old/x")), 7, "named once bumped");
    }

    #[test]
    fn generations_count_up() {
        let s = tempfile::tempdir().unwrap();
        let w = Path::new("/some/ws");
        assert_eq!(generation(s.path(), w), 0);
        assert_eq!(bump_generation(s.path(), w).unwrap(), 1);
        assert_eq!(generation(s.path(), w), 1);
    }

    #[test]
    fn git_control_paths_inside_any_git_directory() {
        let table = [
            ("config", true),
            ("commondir", true),
            ("config.worktree", true),
            ("hooks", true),
            ("hooks/post-checkout", true),
            ("modules/lib/config", true),
            ("modules/a/b/hooks/pre-commit", true),
            ("modules/lib/modules/inner/commondir", true),
            ("worktrees/wt/commondir", true),
            ("worktrees/wt/modules/sub/config", true),
            ("index", false),
            ("HEAD", false),
            ("objects/ab/cdef", false),
            ("refs/heads/config", false),
            ("logs/refs/heads/hooks", false),
            ("modules/lib/index", false),
            ("worktrees/wt/HEAD", false),
            // A submodule named `config`, a worktree named `hooks`.
            ("modules/config/HEAD", false),
            ("modules/config/refs/heads/main", false),
            ("worktrees/hooks/index", false),
        ];
        // Git directories in this table: those with a HEAD of their own.
        let git_dirs = [
            "modules/lib",
            "modules/a/b",
            "modules/lib/modules/inner",
            "worktrees/wt",
            "worktrees/wt/modules/sub",
        ];
        let is_git_dir = |p: &Path| git_dirs.iter().any(|g| Path::new(g) == p);
        for (p, protected) in table {
            assert_eq!(is_git_control_path(Path::new(p), &is_git_dir), protected, "{p}");
        }
    }
}

pub use crate::policy::GIT_CONTROL;

/// How deep and how many directories the search for submodules' git
/// directories under `.git/modules` goes (names may hold `/`, and submodules nest).
const MODULES_MAX_DEPTH: usize = 8;
const MODULES_MAX_DIRS: usize = 1024;

/// Where a workspace's git directories are, relative to it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GitLayout {
    /// `.git` (when it is a directory, or a symlink to one); under
    /// `.git/modules`, the git directories of its submodules, which git also
    /// obeys (a plain `git status` recurses into submodules and reads their
    /// config); under `.git/worktrees`, those of linked worktrees elsewhere,
    /// whose git obeys their `commondir` and `config.worktree`.
    pub dirs: Vec<PathBuf>,
    /// Every directory from `.git` down to each of those: pinned in bind mode
    /// (a mount point cannot be renamed), because renaming any of them would
    /// carry read-only control files away and leave room for new ones.
    pub pins: Vec<PathBuf>,
    /// `.git` files of the checkouts the index has gitlinks for (a submodule's
    /// pointer to its git directory): git follows them when it recurses.
    pub pointers: Vec<PathBuf>,
    /// The index could not be read (a split index, or damage): the gitlinks,
    /// and so the nested repositories, are unknown.
    pub index_unreadable: bool,
    /// The git directories whose index could not be read.
    pub unreadable_indexes: Vec<PathBuf>,
    /// Checkouts of gitlinks that exist but hold no `.git` (a submodule not
    /// initialised): a `.git` made there would be obeyed by `git status` at
    /// once, so they are read-only in a writable run.
    pub checkouts_without_git: Vec<PathBuf>,
    /// Checkouts of gitlinks that do not exist: a writable run makes them
    /// (empty, as git leaves a submodule it has not initialised) so that
    /// they too can be read-only. See [`make_missing_checkouts`].
    pub missing_checkouts: Vec<PathBuf>,
    /// Git directories outside the workspace that repositories in it use
    /// (absolute): a linked worktree of a checkout elsewhere. Their
    /// configurations may include files of the workspace.
    pub outside: Vec<PathBuf>,
}

/// [`git_layout`], with the repositories below the top that no index names
/// but that were there before the run (`found`: their work trees, relative,
/// as [`scan_before_run`] finds them): a person's clones in a workspace of
/// several, an untracked `vendor/x`. Editors find such repositories and run
/// `git status` in them, obeying their config and hooks, so they are
/// protected as the ones the index names are: their git directories (and
/// their submodules', linked worktrees', and the repositories their own
/// indexes name) are overlays of their own in a writable run, their control
/// files read-only, the directories down to them pinned. A repository the
/// run makes is its own (`git init sub`, `cargo new`), as anywhere else.
pub fn git_layout_with(root: &Path, found: &[PathBuf]) -> GitLayout {
    let mut layout = git_layout(root);
    // Only real directories all the way down to the work tree (git does not
    // look through a symlink on the way either).
    let trees: Vec<&PathBuf> = found
        .iter()
        .filter(|tree| {
            let mut prefix = PathBuf::new();
            tree.components().all(|c| {
                prefix.push(c);
                std::fs::symlink_metadata(root.join(&prefix)).is_ok_and(|m| m.is_dir())
            })
        })
        .collect();
    // Every work tree pinned first, whatever else names its git directory:
    // renamed away, it would carry its protection along.
    for tree in &trees {
        pin_down_to(&mut layout, tree);
    }
    // Then the git directories that are directories, each with its own work
    // tree; then `.git` files and symlinks, which may name one of those (a
    // pointer the run planted must not lay out another's git directory
    // under the wrong work tree, nor hide it).
    for tree in &trees {
        let dotgit = tree.join(".git");
        if std::fs::symlink_metadata(root.join(&dotgit)).is_ok_and(|m| m.is_dir())
            && !layout.dirs.iter().any(|d| dotgit.starts_with(d))
        {
            layout = git_layout_of(root, tree, dotgit, layout);
        }
    }
    for tree in &trees {
        let dotgit = tree.join(".git");
        let Ok(meta) = std::fs::symlink_metadata(root.join(&dotgit)) else {
            continue;
        };
        if meta.is_dir() || layout.pointers.contains(&dotgit) {
            continue;
        }
        // A `.git` file (a linked worktree, `--separate-git-dir`) or a
        // symlink: kept as it is (checked around the run), and the git
        // directory it leads to protected, in the workspace or not.
        let target = if meta.file_type().is_symlink() {
            std::fs::canonicalize(root.join(&dotgit)).ok()
        } else {
            named_git_dir(&root.join(tree), &root.join(&dotgit)).and_then(|g| std::fs::canonicalize(g).ok())
        };
        layout.pointers.push(dotgit);
        let Some(target) = target.filter(|t| looks_like_git_dir(t)) else {
            continue;
        };
        match target.strip_prefix(root).map(Path::to_path_buf) {
            Ok(rel) if !rel.as_os_str().is_empty() && !tree.starts_with(&rel) => {
                if !layout.dirs.iter().any(|d| rel.starts_with(d)) {
                    // A `.git` directory's own work tree is beside it.
                    let own = match rel.file_name() {
                        Some(n) if n == ".git" => rel.parent().map(Path::to_path_buf).unwrap_or_default(),
                        _ => tree.to_path_buf(),
                    };
                    layout = git_layout_of(root, &own, rel.clone(), layout);
                }
                // A linked worktree's settings and hooks are its common
                // directory's (`commondir`): protected as well.
                if let Some(common) = common_dir(&target).and_then(|c| c.strip_prefix(root).map(Path::to_path_buf).ok())
                {
                    if !common.as_os_str().is_empty() && !layout.dirs.iter().any(|d| common.starts_with(d)) {
                        let common_tree = common.parent().map(Path::to_path_buf).unwrap_or_default();
                        layout = git_layout_of(root, &common_tree, common, layout);
                    }
                }
            }
            Ok(_) => {}
            // Outside the workspace (another checkout's worktree): its own
            // index still names checkouts here, whose git git recurses into.
            Err(_) => {
                layout.outside.push(target.clone());
                gitlinks_from(root, &mut layout, vec![(tree.to_path_buf(), target)]);
            }
        }
    }
    // Repositories around the workspace: git recurses from them into the
    // checkouts their indexes name here (an uninitialised submodule of the
    // enclosing repository, say).
    let (checkouts, unreadable) = enclosing_gitlinks(root);
    let mut queue = Vec::new();
    for rel in checkouts {
        checkout_of_gitlink(root, &mut layout, rel, &mut queue);
    }
    if !unreadable.is_empty() {
        // One this reader cannot vouch for (a split index): the checkouts
        // it names here are unknown, as for the workspace's own.
        layout.index_unreadable = true;
        layout.unreadable_indexes.extend(unreadable);
    }
    gitlinks_from(root, &mut layout, queue);
    for list in [&mut layout.dirs, &mut layout.pins, &mut layout.pointers] {
        let mut seen: Vec<PathBuf> = Vec::new();
        list.retain(|p| {
            let new = !seen.contains(p);
            if new {
                seen.push(p.clone());
            }
            new
        });
    }
    layout
}

/// (checkouts, git directories whose index could not be read): see [`enclosing_gitlinks`].
type EnclosingGitlinks = (Vec<PathBuf>, Vec<PathBuf>);

/// The checkouts in `root` (relative) that the indexes of the repositories
/// around it name, and the git directories of those whose index this reader
/// cannot vouch for. Read once a process: those repositories are outside
/// the workspace, where no run writes, and a monorepo's index is large.
fn enclosing_gitlinks(root: &Path) -> EnclosingGitlinks {
    static READ: std::sync::Mutex<Option<(PathBuf, EnclosingGitlinks)>> = std::sync::Mutex::new(None);
    once_per_workspace(&READ, root, || {
        let (mut checkouts, mut unreadable) = (Vec::new(), Vec::new());
        for (around, gitdir) in enclosing_git_dirs(root) {
            if !gitdir.join("index").exists() {
                continue;
            }
            match gitindex::gitlinks(&gitdir) {
                Some(links) => checkouts.extend(links.into_iter().filter_map(|l| {
                    let full = around.join(l);
                    let rel = full.strip_prefix(root).ok()?;
                    (!rel.as_os_str().is_empty()).then(|| rel.to_path_buf())
                })),
                None => unreadable.push(gitdir),
            }
        }
        (checkouts, unreadable)
    })
}

/// Pins every directory from the top of the workspace down to `rel`
/// (renamed, one would carry the protection beneath it away).
fn pin_down_to(layout: &mut GitLayout, rel: &Path) {
    let mut ancestor = PathBuf::new();
    for c in rel.components() {
        ancestor.push(c);
        if !layout.pins.contains(&ancestor) {
            layout.pins.push(ancestor.clone());
        }
    }
}

/// The repositories around the workspace `root`: (the folder holding the
/// `.git`, the git directory it is or names), innermost first.
fn enclosing_git_dirs(root: &Path) -> Vec<(PathBuf, PathBuf)> {
    root.ancestors()
        .skip(1)
        .filter_map(|around| {
            let g = around.join(".git");
            let gitdir = match std::fs::symlink_metadata(&g) {
                Ok(m) if m.is_file() => named_git_dir(around, &g)?,
                Ok(_) => g,
                Err(_) => return None,
            };
            Some((around.to_path_buf(), gitdir))
        })
        .collect()
}

/// Whether `dir` (absolute) is a git directory as git recognises one: a
/// `HEAD` file, and objects of its own or a common directory. A `.git` file
/// a run planted may name anything (`..`, `src`); only a git directory is
/// taken for one.
fn looks_like_git_dir(dir: &Path) -> bool {
    // (A `HEAD` may be a symlink, which git accepts.)
    std::fs::metadata(dir.join("HEAD")).is_ok_and(|m| m.is_file())
        && (std::fs::symlink_metadata(dir.join("objects")).is_ok_and(|m| m.is_dir())
            || std::fs::symlink_metadata(dir.join("commondir")).is_ok_and(|m| m.is_file()))
}

/// The common directory a linked worktree's git directory names
/// (`commondir`, relative to it), resolved.
fn common_dir(git_dir: &Path) -> Option<PathBuf> {
    let text = read_planted(&git_dir.join("commondir"), 4096).ok()?;
    let named = std::ffi::OsStr::from_bytes(text.trim_ascii());
    let common = std::fs::canonicalize(git_dir.join(named)).ok()?;
    looks_like_git_dir(&common).then_some(common)
}

/// Makes the missing gitlink checkouts of `layout` (empty directories, the
/// workspace owner's), through directories of the workspace only.
pub fn make_missing_checkouts(root: &Path, layout: &GitLayout) -> Result<(), WorkspaceError> {
    if layout.missing_checkouts.is_empty() {
        return Ok(());
    }
    let ws = beneath::Dir::root(root).map_err(|e| WorkspaceError::Read {
        path: root.to_path_buf(),
        source: e,
    })?;
    let owner = std::fs::metadata(root)
        .ok()
        .map(|m| (m.uid(), m.gid()))
        .filter(|_| nix::unistd::geteuid().is_root());
    for l in &layout.missing_checkouts {
        ws.make_dirs(l, 0o777, owner).map_err(|e| WorkspaceError::Read {
            path: root.join(l),
            source: e,
        })?;
    }
    Ok(())
}

/// Finds the workspace's git directories (names are bytes: nothing is lost
/// to a name that is not UTF-8).
pub fn git_layout(root: &Path) -> GitLayout {
    let mut layout = GitLayout::default();
    // A `.git` symlink to a directory is a git directory too: git follows it,
    // and so do the mounts made on paths beneath it.
    let git = PathBuf::from(".git");
    if std::fs::symlink_metadata(root.join(&git)).is_ok_and(|m| m.is_file()) {
        // A `.git` file: a linked worktree, or a repository whose git
        // directory is elsewhere (`--separate-git-dir`). Inside the
        // workspace, that directory is the workspace's git directory;
        // outside, only its index matters here: the gitlinks it names are
        // checkouts in the workspace, whose `.git` files git follows.
        match pointed_git_dir(root, Path::new(""), &git) {
            Some(inside) => return git_layout_of(root, Path::new(""), inside, layout),
            None => {
                if let Some(outside) = outside_git_dir(root, &git) {
                    gitlinks_from(root, &mut layout, vec![(PathBuf::new(), outside)]);
                }
                return layout;
            }
        }
    }
    if !std::fs::metadata(root.join(&git)).is_ok_and(|m| m.is_dir()) {
        return layout;
    }
    git_layout_of(root, Path::new(""), git, layout)
}

/// What the git configurations read for the workspace `root` include from
/// it (see [`gitconfig`]): those of its git directories (`layout`), of a git
/// directory outside that its `.git` file names, of every repository around
/// the workspace (git in a workspace without a `.git` of its own uses the
/// enclosing one, and a person at the top of that one obeys its includes
/// too), and the global and system files of the person running git (`HOME`,
/// the account's home, and the workspace owner's when that is someone else).
pub fn git_includes(root: &Path, layout: &GitLayout) -> Result<gitconfig::GitIncludes, gitconfig::UnreadableConfig> {
    // Read once a process: the plan and the judgement of what a capture
    // may land ask for the same files, which no run can change (the
    // workspace's configurations and what they include are protected; the
    // person's own are outside the sandbox).
    static READ: std::sync::Mutex<Option<(PathBuf, GitIncludesRead)>> = std::sync::Mutex::new(None);
    once_per_workspace(&READ, root, || read_git_includes(root, layout))
}

/// `make()` for `workspace`, made once a process and handed out again (each
/// caller says why the value cannot change meanwhile); another workspace's
/// replaces it.
fn once_per_workspace<T: Clone>(
    memo: &std::sync::Mutex<Option<(PathBuf, T)>>,
    workspace: &Path,
    make: impl FnOnce() -> T,
) -> T {
    let mut memo = memo.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((ws, value)) = memo.as_ref() {
        if ws == workspace {
            return value.clone();
        }
    }
    let value = make();
    *memo = Some((workspace.to_path_buf(), value.clone()));
    value
}

type GitIncludesRead = Result<gitconfig::GitIncludes, gitconfig::UnreadableConfig>;

fn read_git_includes(root: &Path, layout: &GitLayout) -> GitIncludesRead {
    let mut dirs: Vec<PathBuf> = layout
        .dirs
        .iter()
        .map(|d| root.join(d))
        .chain(layout.outside.iter().cloned())
        .collect();
    let dotgit = Path::new(".git");
    if std::fs::symlink_metadata(root.join(dotgit)).is_ok_and(|m| m.is_file()) {
        dirs.extend(outside_git_dir(root, dotgit));
    }
    dirs.extend(enclosing_git_dirs(root).into_iter().map(|(_, g)| g));
    let mut homes: Vec<PathBuf> = std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute())
        .into_iter()
        .collect();
    let owner = std::fs::metadata(root)
        .ok()
        .map(|m| m.uid())
        .filter(|uid| *uid != nix::unistd::getuid().as_raw())
        .and_then(|uid| nix::unistd::User::from_uid(uid.into()).ok().flatten())
        .map(|u| u.dir);
    for h in crate::state::account_home().into_iter().chain(owner) {
        if !homes.contains(&h) {
            homes.push(h);
        }
    }
    // Work trees whose git directory is not beside them: submodules'
    // checkouts (their `.git` files), linked worktrees' (their git
    // directory's `gitdir` names their `.git` file).
    let mut trees: Vec<PathBuf> = layout
        .pointers
        .iter()
        .filter_map(|p| p.parent())
        .map(|t| root.join(t))
        .collect();
    for d in &layout.dirs {
        if d.parent().and_then(Path::file_name) == Some(std::ffi::OsStr::new("worktrees")) {
            if let Ok(named) = read_planted(&root.join(d).join("gitdir"), 4096) {
                // Absolute, or (git 2.48's relative worktrees) from the
                // worktree's git directory.
                let named = root.join(d).join(std::ffi::OsStr::from_bytes(named.trim_ascii()));
                trees.extend(named.parent().map(Path::to_path_buf));
            }
        }
    }
    gitconfig::includes(root, &dirs, &trees, &homes)
}

/// The git directory a `.git` file at `dir` names (`gitdir: PATH`, relative
/// to `dir`), wherever it is.
fn named_git_dir(dir: &Path, dotgit: &Path) -> Option<PathBuf> {
    let text = read_planted(dotgit, 4096).ok()?;
    let line = text.split(|b| *b == b'\n').next()?;
    let named = line.strip_prefix(b"gitdir:")?;
    let named = std::ffi::OsStr::from_bytes(named.trim_ascii());
    Some(dir.join(named))
}

/// The directories in `root/rel`, as paths relative to `root`; never
/// through a symlink below `.git`: what it points at is not ours.
fn subdirs(root: &Path, rel: &Path) -> Vec<PathBuf> {
    if !std::fs::symlink_metadata(root.join(rel)).is_ok_and(|m| m.is_dir()) {
        return Vec::new();
    }
    std::fs::read_dir(root.join(rel))
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| rel.join(e.file_name()))
                .collect()
        })
        .unwrap_or_default()
}

/// The git directory a `.git` file names when it is outside the workspace
/// (absolute, as git reads it), if it is a directory.
fn outside_git_dir(root: &Path, dotgit: &Path) -> Option<PathBuf> {
    let text = String::from_utf8(read_planted(&root.join(dotgit), 4096).ok()?).ok()?;
    let named = text.lines().next()?.strip_prefix("gitdir:")?.trim();
    let dir = std::fs::canonicalize(root.join(named)).ok()?;
    (dir.is_dir() && !dir.starts_with(root)).then_some(dir)
}

/// [`git_layout`] of the repository whose work tree is `tree` and git
/// directory `git` (both relative; the workspace's own: `""` and `.git`).
fn git_layout_of(root: &Path, tree: &Path, git: PathBuf, mut layout: GitLayout) -> GitLayout {
    layout.dirs.push(git.clone());
    layout.pins.push(git.clone());
    let subdirs = |rel: &Path| subdirs(root, rel);
    let worktrees = git.join("worktrees");
    let linked = subdirs(&worktrees);
    // Linked worktrees inside the workspace: git in one follows its `.git`
    // file, and recurses into the gitlinks of its own index.
    let mut queue: Vec<(PathBuf, PathBuf)> = vec![(tree.to_path_buf(), git.clone())];
    for l in &linked {
        let Ok(named) = read_planted(&root.join(l).join("gitdir"), 4096) else {
            continue;
        };
        let named = PathBuf::from(String::from_utf8_lossy(&named).trim());
        if let Ok(rel) = named.strip_prefix(root) {
            if rel.file_name() == Some(".git".as_ref()) {
                layout.pointers.push(rel.to_path_buf());
                queue.push((rel.parent().map(Path::to_path_buf).unwrap_or_default(), l.clone()));
            }
        }
    }
    if !linked.is_empty() {
        layout.pins.push(worktrees.clone());
        layout.pins.extend(linked.iter().cloned());
        layout.dirs.extend(linked);
    }
    // Submodule checkouts and nested repositories that the index names: git
    // recurses into them and obeys their config. Their `.git` is a directory
    // (a git directory of its own) or a file pointing at one. Git recurses
    // on through their indexes too, and so does this: (work tree, git
    // directory) pairs, each git directory read once.
    gitlinks_from(root, &mut layout, queue);
    modules_of(root, &git, &worktrees, layout)
}

/// Reads the gitlinks of each (work tree, git directory) of `queue` and of
/// the repositories they lead to, into `layout` (see [`git_layout`]).
fn gitlinks_from(root: &Path, layout: &mut GitLayout, mut queue: Vec<(PathBuf, PathBuf)>) {
    let mut read: Vec<PathBuf> = Vec::new();
    while let Some((tree, gitdir)) = queue.pop() {
        if read.contains(&gitdir) {
            continue;
        }
        if read.len() >= NESTED_INDEXES_MAX {
            // Past it the gitlinks are unknown, as for an index not read.
            layout.index_unreadable = true;
            break;
        }
        read.push(gitdir.clone());
        match gitindex::gitlinks(&root.join(&gitdir)) {
            Some(links) => {
                for l in links {
                    checkout_of_gitlink(root, layout, tree.join(l), &mut queue);
                }
            }
            None => {
                layout.index_unreadable = true;
                layout.unreadable_indexes.push(gitdir);
            }
        }
    }
}

/// One gitlink's checkout `l` (relative to the workspace), into `layout`;
/// its git directory, when it has one, onto `queue` for its own gitlinks.
fn checkout_of_gitlink(root: &Path, layout: &mut GitLayout, l: PathBuf, queue: &mut Vec<(PathBuf, PathBuf)>) {
    // Like git, never through a symlink on the way (git does not
    // recurse into a gitlink behind one either).
    // A symlink or a file on the way: git does not go there. A
    // directory missing on the way: the checkout is missing.
    let mut prefix = PathBuf::new();
    let mut missing = false;
    let mut blocked = false;
    for c in l.components() {
        prefix.push(c);
        match std::fs::symlink_metadata(root.join(&prefix)) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => blocked = true,
            Err(_) => missing = true,
        }
        if blocked || missing {
            break;
        }
    }
    if blocked {
        return;
    }
    if missing {
        layout.missing_checkouts.push(l);
        return;
    }
    let dotgit = l.join(".git");
    // Every directory down to the checkout is pinned: renamed, one
    // would carry the read-only mounts beneath it away and leave
    // room for a checkout with a `.git` of the run's making.
    pin_down_to(layout, &l);
    match std::fs::symlink_metadata(root.join(&dotgit)) {
        Ok(m) if m.is_dir() => {
            queue.push((l.clone(), dotgit.clone()));
            layout.dirs.push(dotgit.clone());
            layout.pins.push(dotgit);
        }
        // A file names the git directory; so does a symlink, which
        // git follows: both are checked around a run. Where it
        // names one inside the workspace, its index is read too.
        Ok(_) => {
            if let Some(target) = pointed_git_dir(root, &l, &dotgit) {
                // Where it is not below a git directory
                // already (`.git/modules/x`, usually): a
                // git directory of its own to protect.
                let git_dir = !target.as_os_str().is_empty() && looks_like_git_dir(&root.join(&target));
                if git_dir && !layout.dirs.iter().any(|d| target.starts_with(d)) {
                    pin_down_to(layout, &target);
                    layout.dirs.push(target.clone());
                }
                queue.push((l.clone(), target));
            }
            layout.pointers.push(dotgit)
        }
        Err(_) => layout.checkouts_without_git.push(l),
    }
}

/// Submodules' git directories: under `.git/modules`, and under each linked
/// worktree's own `modules` (see [`git_layout`]).
fn modules_of(root: &Path, git: &Path, worktrees: &Path, mut layout: GitLayout) -> GitLayout {
    let subdirs = |rel: &Path| subdirs(root, rel);
    let mut stack = vec![(git.join("modules"), 0)];
    for wt in layout.dirs.iter().filter(|d| d.starts_with(worktrees)) {
        stack.push((wt.join("modules"), 0));
    }
    let mut visited = 0;
    while let Some((dir, depth)) = stack.pop() {
        visited += 1;
        if visited > MODULES_MAX_DIRS {
            break;
        }
        if depth > MODULES_MAX_DEPTH {
            continue;
        }
        let entries = subdirs(&dir);
        if entries.is_empty() {
            continue;
        }
        layout.pins.push(dir);
        for rel in entries {
            if std::fs::symlink_metadata(root.join(&rel).join("HEAD")).is_ok() {
                // A submodule's git directory; its own submodules are below.
                stack.push((rel.join("modules"), depth + 1));
                layout.dirs.push(rel.clone());
            } else {
                // A level of a submodule name with `/` in it.
                stack.push((rel.clone(), depth + 1));
            }
            layout.pins.push(rel);
        }
    }
    layout
}

/// At most this many git indexes are read for the gitlinks they name (the
/// workspace's, and those of the repositories they lead to, as many as the
/// gitlinks one index may hold); past it the gitlinks count as unknown.
const NESTED_INDEXES_MAX: usize = 10_000;

/// The git directory a `.git` file (`gitdir: DIR`, DIR relative to the
/// checkout `checkout`) names, relative to `root`, when it is a directory
/// inside the workspace reached without a symlink on the way.
fn pointed_git_dir(root: &Path, checkout: &Path, dotgit: &Path) -> Option<PathBuf> {
    let text = read_planted(&root.join(dotgit), 4096).ok()?;
    let text = String::from_utf8(text).ok()?;
    let named = text.lines().next()?.strip_prefix("gitdir:")?.trim();
    // As git writes it (`../../.git/modules/a`): every `..` first, where the
    // lexical reading below is the one the file system makes.
    let parts: Vec<_> = Path::new(named).components().collect();
    let ups = parts
        .iter()
        .take_while(|c| matches!(c, std::path::Component::ParentDir))
        .count();
    if parts[ups..]
        .iter()
        .any(|c| matches!(c, std::path::Component::ParentDir))
    {
        return None;
    }
    let full = if Path::new(named).is_absolute() {
        PathBuf::from(named)
    } else {
        root.join(checkout).join(named)
    };
    // Lexically: `..` undone, never through the file system.
    let mut rel = PathBuf::new();
    for c in full.strip_prefix(root).ok()?.components() {
        match c {
            std::path::Component::Normal(n) => rel.push(n),
            std::path::Component::ParentDir => {
                if !rel.pop() {
                    return None;
                }
            }
            std::path::Component::CurDir => {}
            _ => return None,
        }
    }
    let mut on_the_way = PathBuf::new();
    for c in rel.components() {
        on_the_way.push(c);
        if !std::fs::symlink_metadata(root.join(&on_the_way)).is_ok_and(|m| m.is_dir()) {
            return None;
        }
    }
    Some(rel)
}

/// At most this many git directories become overlays of their own; past it
/// (a workspace of many nested repositories) a writable run is refused, and
/// `overlay = true` (one overlay for everything) is the way.
pub const MAX_GIT_OVERLAYS: usize = 64;

/// The git directories to mount as overlays of their own in a writable,
/// bind-mounted workspace: real directories (never through a symlink: what
/// it points at is not the workspace's), outermost only (`.git/modules/x` is
/// inside `.git`'s), and writable under `trees` (`None` or `""`: everywhere).
pub fn git_overlay_dirs(layout: &GitLayout, root: &Path, trees: Option<&[String]>) -> Vec<PathBuf> {
    let writable = |d: &Path| {
        trees.is_none_or(|t| {
            t.iter()
                .any(|t| t.is_empty() || d.starts_with(Path::new(std::ffi::OsStr::new(t))))
        })
    };
    let real = |d: &Path| {
        let mut prefix = PathBuf::new();
        d.components().all(|c| {
            prefix.push(c);
            std::fs::symlink_metadata(root.join(&prefix)).is_ok_and(|m| m.is_dir())
        })
    };
    let mut out: Vec<PathBuf> = Vec::new();
    for d in &layout.dirs {
        // A git directory reached through a symlink inside the workspace (a
        // `.git` that links to the repository): the overlay goes where the
        // link leads, which is what git writes through it.
        let d = if real(d) {
            d.clone()
        } else {
            match std::fs::canonicalize(root.join(d))
                .ok()
                .and_then(|c| c.strip_prefix(root).ok().map(Path::to_path_buf))
            {
                Some(target) if !target.as_os_str().is_empty() && real(&target) => target,
                _ => continue,
            }
        };
        if writable(&d) && !out.iter().any(|o| d.starts_with(o)) {
            // Outermost only, whatever the order they were found in.
            out.retain(|o| !o.starts_with(&d));
            out.push(d);
        }
    }
    out
}

/// Whether `inner`, a path inside a git directory, is one of its control
/// files ([`GIT_CONTROL`], hooks and all beneath) or one of its submodules'
/// or linked worktrees' (`modules/**/config`, `worktrees/*/commondir`...).
/// Beneath `modules/` and `worktrees/` a control name counts only where the
/// path before it is itself a git directory (`is_git_dir`, relative to the
/// same git directory), so a submodule or worktree *named* `config` or
/// `hooks` is not mistaken for one. The built-in protected globs say the
/// same for the workspace's own `.git`; this covers every git directory.
pub fn is_git_control_path(inner: &Path, is_git_dir: &dyn Fn(&Path) -> bool) -> bool {
    let names: Vec<&std::ffi::OsStr> = inner.iter().collect();
    let control = |n: &std::ffi::OsStr| GIT_CONTROL.iter().any(|c| n == std::ffi::OsStr::new(c));
    match names.first() {
        Some(first) if control(first) => true,
        Some(first) if *first == "modules" || *first == "worktrees" => {
            (1..names.len()).any(|i| control(names[i]) && i >= 2 && is_git_dir(&names[..i].iter().collect::<PathBuf>()))
        }
        _ => false,
    }
}

/// Protected paths whose identity is checked around a run (relative to the
/// workspace): `.git`, `.tether`, and the [`GIT_CONTROL`] entries of every git
/// directory. Existing ones are also read-only inside the sandbox; these
/// checks cover the ones that did not exist yet.
pub fn protected_identities(git_dirs: &[PathBuf]) -> Vec<PathBuf> {
    let git = PathBuf::from(".git");
    let mut out = vec![git.clone(), PathBuf::from(".tether")];
    for g in git_dirs.iter().chain(std::iter::once(&git)) {
        for c in GIT_CONTROL {
            let p = g.join(c);
            if !out.contains(&p) {
                out.push(p);
            }
        }
    }
    out
}

/// Directories the secret scan does not descend into (as tether's own launcher).
pub const SCAN_SKIP_DIRS: &[&str] = &[
    ".git",
    "node_modules",
    ".venv",
    "venv",
    "__pycache__",
    ".tether",
    "target",
];
/// How deep the secret scan goes.
pub const SCAN_MAX_DEPTH: usize = 8;

/// Where tools keep clones of their own under `HOME`, which in the sandbox
/// is the workspace (pre-commit's hooks, cargo's git dependencies, package
/// managers' caches): repositories there are not taken for the person's
/// (see [`git_layout_with`]). Dozens of them would each cost an overlay, and
/// past 64 refuse every writable run; no editor looks for repositories there.
const TOOL_CACHES: &[&str] = &[
    ".cache",
    ".cargo",
    ".rustup",
    ".npm",
    ".pnpm-store",
    ".yarn",
    ".gradle",
    ".m2",
    ".local",
    ".nvm",
    ".pyenv",
    ".bun",
    ".deno",
];

/// Whether the workspace-relative `rel` is in one of the [`TOOL_CACHES`] at
/// the top of the workspace, or in Go's module cache (`go/pkg/mod`).
pub fn in_tool_cache(rel: &Path) -> bool {
    let mut parts = rel.components().map(|c| c.as_os_str());
    let first = parts.next().unwrap_or_default();
    TOOL_CACHES.iter().any(|c| first == *c) || (first == "go" && parts.next() == Some("pkg".as_ref()))
}

/// What one walk of the workspace finds before a run (bounded depth,
/// skipping dependency and VCS directories): the secret-looking files to
/// hide inside the sandbox, and the `.env*` secrets the check after the run
/// compares against.
#[derive(Debug, Clone, Default)]
pub struct SecretScan {
    pub hidden: Vec<PathBuf>,
    pub env: EnvSecrets,
    /// Work trees below the top with a `.git` directory (relative): see
    /// [`add_found_repositories`].
    pub repos: Vec<PathBuf>,
}

/// The `.env*` secrets (files, symlinks: anything a loader would read but a
/// directory), relative to the workspace, with their identities.
#[derive(Debug, Clone, Default)]
pub struct EnvSecrets(Vec<(PathBuf, Option<EnvIdentity>)>);

pub fn scan_secrets(workspace: &Path, state: &Path) -> SecretScan {
    let (mut found, mut repos) = scan(workspace, state, |name, kind| {
        (kind == listing::EntryKind::File && crate::policy::is_secret_name(name))
            || crate::policy::is_env_secret(name)
            || (name == ".git" && kind != listing::EntryKind::Dir)
    });
    // A `.git` that is not a directory (a file naming the git directory, a
    // symlink): a repository too, not a secret.
    found.retain(|p| {
        if p.file_name() != Some(std::ffi::OsStr::new(".git")) {
            return true;
        }
        if let Some(tree) = p.parent().and_then(|t| t.strip_prefix(workspace).ok()) {
            if !tree.as_os_str().is_empty() {
                repos.push(tree.to_path_buf());
            }
        }
        false
    });
    repos.sort();
    repos.dedup();
    let env = env_secrets(workspace, &found);
    // A `.env` that is a symlink is read through to its target, whatever
    // that file's name: the target (inside the workspace) is the secret.
    let root = std::fs::canonicalize(workspace).unwrap_or_else(|_| workspace.to_path_buf());
    let mut hidden: Vec<PathBuf> = found
        .into_iter()
        .filter_map(|p| match std::fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => std::fs::canonicalize(&p)
                .ok()
                .filter(|t| t.starts_with(&root) && t.is_file()),
            Ok(m) if m.is_file() => Some(p),
            _ => None,
        })
        .collect();
    hidden.sort();
    hidden.dedup();
    SecretScan { hidden, env, repos }
}

/// The secret scan of the workspace as it was before this process's run
/// changed it (see [`scan_before_run`]).
static SCANNED_BEFORE_RUN: std::sync::Mutex<Option<(PathBuf, SecretScan)>> = std::sync::Mutex::new(None);

/// The secret scan of `workspace` as it was before this process's run
/// changed it: made once, then handed out again (a run needs it for its
/// capture, its plan and the checks around it; one walk, not three).
pub fn scan_before_run(workspace: &Path, state: &Path) -> SecretScan {
    once_per_workspace(&SCANNED_BEFORE_RUN, workspace, || scan_secrets(workspace, state))
}

/// The repositories below the top that [`scan_before_run`] found in
/// `workspace`, if this process made that scan; none otherwise.
pub fn repositories_found_before_run(workspace: &Path) -> Vec<PathBuf> {
    let memo = SCANNED_BEFORE_RUN.lock().unwrap_or_else(|e| e.into_inner());
    match memo.as_ref() {
        Some((ws, scan)) if ws == workspace => scan.repos.clone(),
        _ => Vec::new(),
    }
}

/// Entries (never directories) whose name and type `want` accepts, found
/// as the secret scan looks: bounded depth, skipping [`SCAN_SKIP_DIRS`];
/// and the directories below the top that hold a `.git` directory.
/// Directories unchanged since an earlier scan are not read again (see
/// [`listing`]); `state` is the state directory, which holds those listings.
fn scan(
    workspace: &Path,
    state: &Path,
    want: impl Fn(&str, listing::EntryKind) -> bool,
) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let mut listings = listing::Listings::load(state, workspace);
    let mut out = Vec::new();
    let mut repos = Vec::new();
    let mut stack = vec![(PathBuf::new(), 0usize)];
    while let Some((rel, depth)) = stack.pop() {
        let dir = workspace.join(&rel);
        let Some(l) = listings.list(&rel, &dir, &want) else {
            continue;
        };
        for name in &l.hits {
            out.push(dir.join(std::ffi::OsStr::from_bytes(name)));
        }
        if !rel.as_os_str().is_empty() && !in_tool_cache(&rel) && l.subdirs.iter().any(|n| n == b".git") {
            repos.push(rel.clone());
        }
        if depth < SCAN_MAX_DEPTH {
            for name in &l.subdirs {
                let name = std::ffi::OsStr::from_bytes(name);
                if !SCAN_SKIP_DIRS.contains(&name.to_string_lossy().as_ref()) {
                    stack.push((rel.join(name), depth + 1));
                }
            }
        }
    }
    listings.save();
    out.sort();
    repos.sort();
    (out, repos)
}

/// (device, inode) of each protected path before a run; `None` where absent.
/// Kept on disk with its paths as bytes (see [`SnapshotRecord`]).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(into = "SnapshotRecord", from = "SnapshotRecord")]
pub struct ProtectedSnapshot {
    entries: Vec<(PathBuf, Option<(u64, u64)>)>,
    git_dirs: Vec<PathBuf>,
    pointers: Vec<(PathBuf, Option<(u64, u64)>)>,
    /// `.env*` secrets (templates excepted) as the secret scan found them.
    env_files: EnvSecrets,
    /// Work trees of the repositories below the top that no index named
    /// (see [`git_layout_with`]): the layout after the run is read with them.
    found: Vec<PathBuf>,
}

/// A [`ProtectedSnapshot`] as written to disk: every path as its bytes,
/// because serde refuses a path that is not UTF-8, and a file in the
/// workspace (`.env\xff`) may have such a name: its check could then not be
/// recorded, and no writable run could start.
#[derive(serde::Serialize, serde::Deserialize)]
struct SnapshotRecord {
    entries: Vec<IdentityRecord>,
    git_dirs: Vec<Vec<u8>>,
    pointers: Vec<IdentityRecord>,
    env_files: Vec<(Vec<u8>, Option<EnvIdentity>)>,
    /// Absent from records an older build wrote: none found then.
    #[serde(default)]
    found: Vec<Vec<u8>>,
}

/// A path's bytes and its (device, inode), if it existed.
type IdentityRecord = (Vec<u8>, Option<(u64, u64)>);

fn path_bytes(p: &Path) -> Vec<u8> {
    p.as_os_str().as_bytes().to_vec()
}

fn bytes_path(b: Vec<u8>) -> PathBuf {
    use std::os::unix::ffi::OsStringExt;
    PathBuf::from(std::ffi::OsString::from_vec(b))
}

impl From<ProtectedSnapshot> for SnapshotRecord {
    fn from(s: ProtectedSnapshot) -> SnapshotRecord {
        let pairs = |v: Vec<(PathBuf, Option<(u64, u64)>)>| v.iter().map(|(p, id)| (path_bytes(p), *id)).collect();
        SnapshotRecord {
            entries: pairs(s.entries),
            git_dirs: s.git_dirs.iter().map(|p| path_bytes(p)).collect(),
            pointers: pairs(s.pointers),
            env_files: s.env_files.0.iter().map(|(p, id)| (path_bytes(p), *id)).collect(),
            found: s.found.iter().map(|p| path_bytes(p)).collect(),
        }
    }
}

impl From<SnapshotRecord> for ProtectedSnapshot {
    fn from(r: SnapshotRecord) -> ProtectedSnapshot {
        let pairs = |v: Vec<IdentityRecord>| v.into_iter().map(|(p, id)| (bytes_path(p), id)).collect();
        ProtectedSnapshot {
            entries: pairs(r.entries),
            git_dirs: r.git_dirs.into_iter().map(bytes_path).collect(),
            pointers: pairs(r.pointers),
            env_files: EnvSecrets(r.env_files.into_iter().map(|(p, id)| (bytes_path(p), id)).collect()),
            found: r.found.into_iter().map(bytes_path).collect(),
        }
    }
}

fn identity(p: &Path) -> Option<(u64, u64)> {
    std::fs::symlink_metadata(p).ok().map(|m| (m.dev(), m.ino()))
}

/// Record the protected paths' identities (a few `lstat`s), with the `.env*`
/// secrets of the scan made for the plan (see [`scan_secrets`]) and the git
/// layout read with it (`git_layout_with(root, found)`, which walks a
/// repository's submodules and linked worktrees): a run's check then starts
/// from the layout its mounts protect.
pub fn snapshot_protected(root: &Path, env: EnvSecrets, found: &[PathBuf], layout: GitLayout) -> ProtectedSnapshot {
    let with_identity = |rel: PathBuf| {
        let id = identity(&root.join(&rel));
        (rel, id)
    };
    ProtectedSnapshot {
        entries: protected_identities(&layout.dirs)
            .into_iter()
            .map(with_identity)
            .collect(),
        pointers: layout.pointers.into_iter().map(with_identity).collect(),
        git_dirs: layout.dirs,
        env_files: env,
        found: found.to_vec(),
    }
}

/// (device, inode, and for a symlink its change time): a symlink is not
/// masked, so the run may remove it and make another, which the filesystem
/// may give the freed inode; a masked file cannot be removed.
type EnvIdentity = (u64, u64, i64, i64);

/// The `.env*` secrets among `found` (paths under `root`), with identities.
fn env_secrets(root: &Path, found: &[PathBuf]) -> EnvSecrets {
    let env = found
        .iter()
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| crate::policy::is_env_secret(&n.to_string_lossy()))
        })
        .filter_map(|p| {
            let id = std::fs::symlink_metadata(p)
                .ok()
                .map(|m| match m.file_type().is_symlink() {
                    true => (m.dev(), m.ino(), m.ctime(), m.ctime_nsec()),
                    false => (m.dev(), m.ino(), 0, 0),
                });
            p.strip_prefix(root).ok().map(|r| (r.to_path_buf(), id))
        })
        .collect();
    EnvSecrets(env)
}

/// A check of the protected paths that a run still owes: written before the
/// command starts, removed once the check after it is done. A launcher
/// killed in between (after its capture landed, say) leaves it for the next
/// start, which does the check ([`recover_pending_checks`]).
///
/// It is also the mark of a writable run in progress in its workspace: the
/// launcher holds an exclusive `flock` on the file from before the command
/// starts until the check after it (and the generation's count) is done,
/// and the kernel lets go of it whenever the launcher dies. See
/// [`writable_run_in_progress`].
pub struct PendingCheck {
    path: PathBuf,
    _locked: std::fs::File,
}

/// A control file of one of the git directories `dirs` (relative to the
/// workspace `root`) with other hard links: `config`, `config.worktree`,
/// `commondir`, a hook. A read-only mount covers one name; through another
/// in the workspace a writable run would write the file in place.
pub fn linked_control_file(root: &Path, dirs: &[PathBuf]) -> Option<PathBuf> {
    let linked = |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file() && m.nlink() > 1);
    for d in dirs {
        let d = root.join(d);
        for c in GIT_CONTROL.iter().filter(|c| **c != "hooks") {
            let p = d.join(c);
            if linked(&p) {
                return Some(p);
            }
        }
        if let Ok(rd) = std::fs::read_dir(d.join("hooks")) {
            for e in rd.flatten() {
                if e.metadata().is_ok_and(|m| m.is_file() && m.nlink() > 1) {
                    return Some(e.path());
                }
            }
        }
    }
    None
}

/// How the file name of a pending check of `workspace` ends (its
/// generation file's name: a check whose record cannot be read still says
/// whose generation its recovery moves on).
fn workspace_tag(workspace: &Path) -> String {
    format!("-{}.json", workspace_id(workspace))
}

/// A pending check being written: not yet under its name.
const PENDING_TEMP_PREFIX: &str = "tmp-";

/// Whether a writable run that can change `workspace` (in it, in a folder
/// of it, or in one holding it) is in progress now: its launcher still
/// holds its pending check. One whose launcher died and whose check is not
/// done yet counts too: its recovery moves the generation on.
///
/// An approval binds the workspace as one `stat` of every entry sees it,
/// and a run that ends moves the workspace's generation on. A run still in
/// progress can change a file without either seeing it: through a shared
/// mapping made before the hold (the kernel sets a file's times at the
/// first write to a clean page only), or by writing it and setting its
/// modification time back. So no approval is used while one is in
/// progress. A pending check that cannot be read counts as such a run.
///
/// `None` when there is none; else what stands in the way, naming the
/// pending check, for the refusal to say.
pub fn writable_run_in_progress(state: &Path, workspace: &Path) -> Option<String> {
    let dir = pending_dir(state);
    // A check no start can read is never counted: its run, if it ended
    // with its launcher killed, never moved the generation on.
    let unreadable = |path: &Path, e: &dyn std::fmt::Display| {
        Some(format!(
            "the pending check {} cannot be read ({e}): a writable run may be in progress, or may have ended uncounted (its launcher killed); make the file readable to tether-exec, and the next start counts that run, or remove it",
            path.display()
        ))
    };
    let dir_unreadable = |e: &dyn std::fmt::Display| {
        Some(format!(
            "the directory of pending checks {} cannot be read ({e}), so whether a writable run is in progress cannot be told; make it readable to tether-exec",
            dir.display()
        ))
    };
    let rd = match std::fs::read_dir(&dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => return dir_unreadable(&e),
    };
    for e in rd {
        let e = match e {
            Ok(e) => e,
            Err(e) => return dir_unreadable(&e),
        };
        if e.file_name().as_bytes().starts_with(PENDING_TEMP_PREFIX.as_bytes()) {
            // Not yet under its name: that run's command has not started.
            continue;
        }
        let path = e.path();
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            // Done meanwhile.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return unreadable(&path, &e),
        };
        #[derive(serde::Deserialize)]
        struct Whose {
            workspace: Vec<u8>,
        }
        match serde_json::from_slice::<Whose>(&bytes) {
            Ok(r) => {
                if overlap(Path::new(std::ffi::OsStr::from_bytes(&r.workspace)), workspace) {
                    return Some(format!(
                        "a writable run is in progress in the workspace or one overlapping it (its pending check: {})",
                        path.display()
                    ));
                }
            }
            Err(e) => return unreadable(&path, &e),
        }
    }
    None
}

#[derive(serde::Serialize, serde::Deserialize)]
struct PendingRecord {
    /// As bytes (see [`SnapshotRecord`]).
    workspace: Vec<u8>,
    before: ProtectedSnapshot,
}

fn pending_dir(state: &Path) -> PathBuf {
    state.join("pending-checks")
}

impl PendingCheck {
    pub fn record(state: &Path, workspace: &Path, before: &ProtectedSnapshot) -> Result<PendingCheck, WorkspaceError> {
        let dir = pending_dir(state);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let name = format!("{}-{nanos}{}", std::process::id(), workspace_tag(workspace));
        let path = dir.join(&name);
        let temp = dir.join(format!("{PENDING_TEMP_PREFIX}{name}"));
        let text = serde_json::to_vec(&PendingRecord {
            workspace: path_bytes(workspace),
            before: before.clone(),
        })
        .map_err(|e| WorkspaceError::Read {
            path: path.clone(),
            source: std::io::Error::other(e),
        })?;
        let write = || -> std::io::Result<std::fs::File> {
            use std::io::Write;
            use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
            std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir)?;
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&temp)?;
            // Locked and whole before it is under its name: no start takes
            // it for a dead launcher's (see `recover_pending_checks`). The
            // run is in progress from here (its command starts only after
            // this returns).
            f.lock()?;
            f.write_all(&text)?;
            std::fs::rename(&temp, &path)?;
            Ok(f)
        };
        let locked = write().map_err(|e| WorkspaceError::Read {
            path: path.clone(),
            source: e,
        })?;
        Ok(PendingCheck { path, _locked: locked })
    }

    /// The check was done.
    pub fn done(self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// At start: the checks that launchers now gone still owed, done. Lines for stderr.
pub fn recover_pending_checks(state: &Path) -> Vec<String> {
    let mut report = Vec::new();
    let Ok(rd) = std::fs::read_dir(pending_dir(state)) else {
        return report;
    };
    for e in rd.flatten() {
        let name = e.file_name();
        // Its launcher holds it while it lives (a pid says less: it can be
        // reused, or of another namespace's process); held here, another
        // start skips it.
        let Ok(mut file) = std::fs::File::open(e.path()) else {
            continue;
        };
        if file.try_lock().is_err() {
            continue;
        }
        if name.as_bytes().starts_with(PENDING_TEMP_PREFIX.as_bytes()) {
            // A launcher killed while writing it: its command never started.
            let old = e
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t.elapsed().is_ok_and(|d| d > std::time::Duration::from_secs(60)));
            if old {
                let _ = std::fs::remove_file(e.path());
            }
            continue;
        }
        let mut bytes = Vec::new();
        let record = std::io::Read::read_to_end(&mut file, &mut bytes)
            .ok()
            .and_then(|_| serde_json::from_slice::<PendingRecord>(&bytes).ok());
        // Its run ended without its launcher: approvals bound to the
        // workspace before it no longer hold (its end never counted it).
        let generation = match &record {
            Some(r) => bump_generation(state, &bytes_path(r.workspace.clone())),
            None => {
                let id = name.as_bytes().rsplit(|&b| b == b'-').next().unwrap_or_default();
                let id = id.strip_suffix(b".json").unwrap_or(id);
                if id.len() == 32 && id.iter().all(u8::is_ascii_hexdigit) {
                    bump_generation_file(&generations_dir(state).join(std::ffi::OsStr::from_bytes(id)), None)
                } else {
                    Ok(0)
                }
            }
        };
        if let Err(err) = generation {
            // Left for the next start: until then it counts as in progress.
            report.push(format!("could not count an interrupted run: {err}"));
            continue;
        }
        if let Some(r) = record {
            let workspace = bytes_path(r.workspace);
            match enforce_protected(&workspace, &r.before, state) {
                Ok(v) if v.is_empty() => {}
                Ok(v) => report.push(format!(
                    "an interrupted run in {} wrote protected paths: {}",
                    workspace.display(),
                    v.join("; ")
                )),
                Err(err) => report.push(format!(
                    "could not check the protected paths of an interrupted run in {}: {err}",
                    workspace.display()
                )),
            }
        }
        let _ = std::fs::remove_file(e.path());
    }
    report
}

fn quarantine_name(p: &Path) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let name = p
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    p.with_file_name(format!("{name}.tether-quarantine-{nanos}"))
}

/// After a run: a protected path the run created is moved aside (never
/// deleted: the operator may want to see it), and a `.git` that was replaced
/// is put back from where the run moved it. Returns one line per violation.
pub fn enforce_protected(root: &Path, before: &ProtectedSnapshot, state: &Path) -> Result<Vec<String>, WorkspaceError> {
    let mut violations = Vec::new();
    // Git directories the run created: their control files are protected
    // paths that did not exist before.
    let mut entries = before.entries.clone();
    let after = git_layout_with(root, &before.found);
    for g in after.dirs.iter().filter(|g| !before.git_dirs.contains(g)) {
        for c in GIT_CONTROL {
            let rel = g.join(c);
            if !entries.iter().any(|(r, _)| *r == rel) {
                entries.push((rel, None));
            }
        }
    }
    let shown = |p: &Path| p.strip_prefix(root).unwrap_or(p).display().to_string();
    // Moves `rel` aside within its own directory, which is resolved without
    // ever leaving the workspace (the run may have planted a symlink to make
    // us rename a file of the host's, and another sandbox may still be
    // running here): every failure is reported and the others still go on.
    let move_aside = |rel: &Path, p: &Path, what: &str, violations: &mut Vec<String>| {
        let q = quarantine_name(p);
        match rename_beneath(root, rel, q.file_name().unwrap_or_default()) {
            Ok(()) => violations.push(format!("{what} `{}`; moved aside to `{}`", rel.display(), shown(&q))),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EXDEV | libc::ELOOP)) => violations.push(format!(
                "{what} `{}`, reached through a symlink that leads out of the workspace; left where it is",
                rel.display()
            )),
            Err(e) => violations.push(format!(
                "{what} `{}`, and it could not be moved aside: {e}",
                rel.display()
            )),
        }
    };
    let git = Path::new(".git");
    for (rel, was) in &entries {
        let rel = rel.as_path();
        let p = root.join(rel);
        let now = identity(&p);
        if now == *was {
            continue;
        }
        match (was, now) {
            (None, Some(_)) => {
                // Created by the run (past the create guard, which refuses
                // them while it runs: another writer, or a kernel feature it
                // does not see). A `.git` at the top of a workspace that had
                // none goes too, whatever it is: an index there names
                // repositories whose config the host's git obeys.
                move_aside(rel, &p, "created protected path", &mut violations);
            }
            (Some(id), _) if rel == git => {
                // The repository was renamed away (and maybe replaced): find the
                // original by its inode at the top of the workspace and put it back.
                let original = std::fs::read_dir(root)
                    .map(|rd| rd.flatten().map(|e| e.path()).find(|c| identity(c) == Some(*id)))
                    .unwrap_or(None);
                if now.is_some() {
                    move_aside(rel, &p, "replaced", &mut violations);
                }
                match original {
                    Some(o) => match std::fs::rename(&o, &p) {
                        Ok(()) => violations.push(format!("the original `.git` was put back from `{}`", shown(&o))),
                        Err(e) => violations.push(format!(
                            "the original `.git` is at `{}` and could not be put back: {e}",
                            shown(&o)
                        )),
                    },
                    None => violations
                        .push("`.git` was renamed away; the original is no longer at the top of the workspace".into()),
                }
            }
            // Existing control files and `.tether` are read-only mounts inside
            // the sandbox, and their directories are pinned.
            _ => {}
        }
    }
    // A submodule's `.git` file that the run created, or replaced (its
    // checkout renamed away and made again): git would follow it anywhere.
    for ptr in &after.pointers {
        let was = before.pointers.iter().find(|(r, _)| r == ptr).and_then(|(_, id)| *id);
        let p = root.join(ptr);
        if identity(&p) != was {
            move_aside(ptr, &p, "created or replaced the submodule pointer", &mut violations);
        }
    }
    // A new `.env*` (existing ones are masked, read-only mount points): in a
    // bind-mounted workspace it cannot be refused while the run lasts, but
    // it does not stay. Where the secret scan looks (see `SCAN_MAX_DEPTH`).
    // New by identity, not by path: a directory renamed away carries its
    // `.env` along (that one is the person's), and a `.env` made where the
    // renamed one was is new.
    for (rel, id) in scan_secrets(root, state).env.0 {
        if id.is_none() || !before.env_files.0.iter().any(|(_, b)| *b == id) {
            let p = root.join(&rel);
            move_aside(&rel, &p, "created protected path", &mut violations);
        }
    }
    // An index the reader cannot vouch for in a repository the run made (a
    // split index): the gitlinks it names would go unchecked. The run's own
    // index, moved aside (`git reset` makes a new one there).
    let mut unreadable_left = false;
    for g in &after.unreadable_indexes {
        if before.git_dirs.contains(g) {
            unreadable_left = true;
        } else {
            move_aside(
                &g.join("index"),
                &root.join(g).join("index"),
                "left an index that cannot be checked in the new repository",
                &mut violations,
            );
        }
    }
    if after.index_unreadable && unreadable_left {
        violations.push(
            "the run left a git index that tether-exec cannot vouch for (a split index, offset tables, names git refuses, damage, or other hard links): the repositories it names were not checked, and writable runs here are refused until it is rewritten (`git update-index --no-split-index`, or `rm .git/index && git reset`)".into(),
        );
    }
    Ok(violations)
}

/// Renames `root/rel` to `new_name` in the same directory. The directory is
/// opened with `openat2(RESOLVE_BENEATH)`: symlinks on the way are followed
/// only while they stay inside `root` (EXDEV otherwise), and the rename then
/// happens relative to that descriptor, so nothing swapped on the path
/// meanwhile can redirect it.
fn rename_beneath(root: &Path, rel: &Path, new_name: &std::ffi::OsStr) -> std::io::Result<()> {
    let (parent, name) = beneath::split(rel)?;
    let dir = beneath::Dir::root(root)?.dir_within(parent)?;
    dir.rename_from(&dir, name, new_name)
}
pub mod beneath;
mod cachefile;
pub mod gitconfig;
pub mod gitindex;
pub mod listing;
pub mod overlay;
