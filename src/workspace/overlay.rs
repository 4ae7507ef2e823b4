//! The overlay workspace: capture every write of a run, check it, then commit
//! it atomically or roll it back.
//!
//! Landlock and bind mounts work on directory trees; `writable_globs` such as
//! `**/*.md` are not trees, and files that do not exist yet must be covered
//! too. So when a policy's globs are not all `DIR/**`, the sandbox sees the
//! workspace as an overlay whose upper layer lives on the workspace's own
//! filesystem (see [`capture_root`]), so that landing a change is a rename:
//! the real workspace is untouched while the command runs. Afterwards the
//! upper layer is walked (files, symlinks, whiteouts = deletions, opaque
//! directories = removed and made again), every changed path is checked
//! against the globs and the protected paths, and then:
//!
//! - on a violation with `on_violation = "rollback"` nothing lands;
//! - otherwise the changes land through a *journal*: the list of operations
//!   is written and synced before the first change, and every operation is
//!   idempotent (a removal first renames the old entry into a trash folder,
//!   a move only moves what is still in the upper layer), so a launcher
//!   killed at any moment leaves either the workspace as it was (no journal
//!   yet: the next start discards the capture) or a journal that the next
//!   start finishes.
//!
//! A path the human changed in the real workspace while the run was going on
//! is a conflict: the human's version stays and the run's change is listed.

use super::{beneath, WorkspaceError};
use crate::policy::PathGlobs;
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// A run's capture directory: `upper/`, `work/`, `lock`, and later `journal.json`.
#[derive(Debug)]
pub struct Capture {
    pub dir: PathBuf,
    pub workspace: PathBuf,
    /// When `dir` is outside the state directory: its entry in
    /// `<state>/overlays`, a symlink through which recovery finds it.
    link: Option<PathBuf>,
    /// Held for the launcher's lifetime so recovery never touches a live capture.
    _lock: nix::fcntl::Flock<std::fs::File>,
    started: SystemTime,
    /// Empty: the overlay covers the whole workspace. Otherwise only these
    /// directories are overlays (git directories in a bind-mounted
    /// workspace), each captured at its own path under `upper`.
    pub subtrees: Vec<Subtree>,
    /// Where its skeleton goes when it is done with, if anywhere (see [`spares_dir`]).
    spares: Option<PathBuf>,
}

/// One directory of the workspace mounted as an overlay of its own.
#[derive(Debug, Clone)]
pub struct Subtree {
    /// Relative to the workspace.
    pub rel: PathBuf,
    /// `upper/<rel>`.
    pub upper: PathBuf,
    /// Its own scratch directory (`work/<n>`): overlayfs needs one per mount.
    pub work: PathBuf,
}

/// One operation of a commit, relative to the workspace. Paths are bytes, so
/// names with newlines or invalid UTF-8 survive.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub enum Op {
    /// Move the existing entry into the trash (removal, or making room).
    Remove(Vec<u8>),
    /// Create a directory with this mode if it does not exist.
    MakeDir(Vec<u8>, u32),
    /// Move the entry from the upper layer into the workspace.
    Move(Vec<u8>),
}

#[derive(Debug, Serialize, Deserialize)]
struct Journal {
    workspace: PathBuf,
    ops: Vec<Op>,
    /// A preview's landing: who began it, and what it decided (replayed when
    /// a later start finishes it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    owner: Option<LandingOwner>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    outcome: Option<Outcome>,
}

impl Journal {
    /// Whether a step moves an entry to the trash.
    fn has_removals(&self) -> bool {
        self.ops.iter().any(|op| matches!(op, Op::Remove(_)))
    }
}

/// What the capture holds, classified.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct Outcome {
    pub added: Vec<String>,
    pub modified: Vec<String>,
    pub deleted: Vec<String>,
    /// Changes that break `writable_globs` or touch a protected path, with why.
    pub violations: Vec<String>,
    /// Changes refused because the human changed the same path meanwhile.
    pub conflicts: Vec<String>,
    /// True when the changes (or the allowed part, in drop mode) landed.
    pub committed: bool,
}

const LOCK: &str = "lock";
const JOURNAL: &str = "journal.json";
/// A preview's journal whose landing failed and was given up.
const FAILED_JOURNAL: &str = "journal.failed.json";
/// A landed journal, renamed so that nothing applies it again while the
/// capture it describes is removed. It is the capture's last entry to go,
/// so a removal cut short is still recognizable (see
/// [`interrupted_preview_landings`]), and it still names the workspace.
const RETIRED_JOURNAL: &str = "journal.landed.json";

fn err(path: &Path, e: std::io::Error) -> WorkspaceError {
    WorkspaceError::Read {
        path: path.to_path_buf(),
        source: e,
    }
}

fn lock_exclusive(f: std::fs::File, wait: bool) -> Option<nix::fcntl::Flock<std::fs::File>> {
    use nix::fcntl::{Flock, FlockArg};
    let arg = if wait {
        FlockArg::LockExclusive
    } else {
        FlockArg::LockExclusiveNonblock
    };
    Flock::lock(f, arg).ok()
}

fn overlays_dir(state: &Path) -> PathBuf {
    state.join("overlays")
}

/// Empty capture skeletons (a directory holding an empty `upper` and an
/// empty `work`) kept for the next capture: `<state>/spare-captures/0` to
/// `3`. On this machine's ext4 making the three directories costs 0.3 to
/// 1.6 ms and removing them 0.6 ms, on the path of every run in a git
/// repository (its git directory is an overlay), where taking a spare and
/// putting it back are one rename each (30 us); a hold's preview takes one
/// too. Only for captures in the state directory (not beside a workspace on
/// another filesystem) that nobody was given (see [`Capture::create`]),
/// and only skeletons that no overlay used as its own upper or work
/// directory (see [`Capture::finish`]); a skeleton goes back only if it
/// holds nothing else (no entry, no extended attribute an overlay left, the
/// modes a new one would have), so a spare is as good as a new one.
fn spares_dir(state: &Path) -> PathBuf {
    state.join("spare-captures")
}

const SPARES: usize = 4;

/// `rename` that never replaces anything.
fn rename_noreplace(from: &Path, to: &Path) -> nix::Result<()> {
    use nix::fcntl::{renameat2, RenameFlags, AT_FDCWD};
    renameat2(AT_FDCWD, from, AT_FDCWD, to, RenameFlags::RENAME_NOREPLACE)
}

/// Take a spare skeleton as `dir` (the new capture's name, not yet made).
/// Checked again once taken, as if someone else could write the state
/// directory (a shared one, a root launcher in a person's): what is not an
/// empty skeleton of ours is removed, and the capture made afresh.
fn take_spare(spares: &Path, dir: &Path) -> bool {
    if !private_dir(spares) {
        return false;
    }
    if !(0..SPARES).any(|k| rename_noreplace(&spares.join(k.to_string()), dir).is_ok()) {
        return false;
    }
    if only_empty_skeleton(dir) {
        return true;
    }
    remove_capture(dir);
    false
}

/// `p` is a directory (not a link to one) of ours that only we can enter.
fn private_dir(p: &Path) -> bool {
    std::fs::symlink_metadata(p)
        .is_ok_and(|m| m.file_type().is_dir() && m.uid() == nix::unistd::geteuid().as_raw() && m.mode() & 0o077 == 0)
}

/// Put the skeleton `dir` back among the spares if it is an empty one and
/// there is room, else remove it. The caller still holds its lock: a run
/// that takes it at once waits for that, nothing else can touch it between
/// the check and the rename.
fn retire_skeleton(dir: &Path, spares: Option<&Path>) {
    if let Some(spares) = spares.filter(|_| only_empty_skeleton(dir)) {
        // The first one back makes the spares' directory; only one of ours
        // that nobody else can enter takes any.
        if !private_dir(spares) {
            use std::os::unix::fs::DirBuilderExt;
            let _ = std::fs::DirBuilder::new().mode(0o700).create(spares);
        }
        if private_dir(spares) && (0..SPARES).any(|k| rename_noreplace(dir, &spares.join(k.to_string())).is_ok()) {
            return;
        }
    }
    for d in [dir.join("upper"), dir.join("work"), dir.to_path_buf()] {
        if std::fs::remove_dir(&d).is_err() {
            remove_capture(dir);
            return;
        }
    }
}

/// `dir` is a directory of ours that only we can enter, and holds `upper`
/// and `work` and nothing else: both directories of ours, empty, with the
/// permissions a new one gets, without an overlay's extended attributes
/// (an overlay's upper layer carries some; others, such as a security
/// module's label, every new directory has too).
fn only_empty_skeleton(dir: &Path) -> bool {
    let names = |p: &Path| -> Option<Vec<std::ffi::OsString>> {
        std::fs::read_dir(p)
            .ok()?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<Result<Vec<_>, _>>()
            .ok()
    };
    // Ours, a directory (not a link), with the mode a new one gets.
    let euid = nix::unistd::geteuid().as_raw();
    if !std::fs::symlink_metadata(dir)
        .is_ok_and(|m| m.file_type().is_dir() && m.uid() == euid && m.mode() & 0o777 == 0o700)
    {
        return false;
    }
    let Some(mut top) = names(dir) else { return false };
    top.sort();
    if top != ["upper", "work"] {
        return false;
    }
    let fresh_mode = 0o777 & !process_umask();
    ["upper", "work"].iter().all(|n| {
        let p = dir.join(n);
        std::fs::symlink_metadata(&p)
            .is_ok_and(|m| m.file_type().is_dir() && m.uid() == euid && m.mode() & 0o777 == fresh_mode)
            && names(&p).is_some_and(|v| v.is_empty())
            && overlay_xattrs(&p) == Some(false)
    })
}

/// Whether `p` (not followed if a link) carries an overlay's extended
/// attributes (`user.overlay.*`, `trusted.overlay.*`); `None` if that cannot
/// be read.
fn overlay_xattrs(p: &Path) -> Option<bool> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).ok()?;
    let mut buf = vec![0u8; 1024];
    loop {
        // SAFETY: llistxattr with a NUL-terminated path, writing at most
        // `buf.len()` bytes into `buf`.
        let n = unsafe { libc::llistxattr(c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            let list = &buf[..n as usize];
            return Some(
                list.split(|b| *b == 0)
                    .any(|name| name.starts_with(b"user.overlay.") || name.starts_with(b"trusted.overlay.")),
            );
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::ERANGE) || buf.len() >= 1 << 16 {
            return None;
        }
        buf.resize(buf.len() * 4, 0);
    }
}

/// Name of the directory, beside a workspace, that holds its captures when
/// the state directory is on another filesystem.
pub const BESIDE_WORKSPACE: &str = ".tether-exec-captures";

/// Where a run's capture goes, and whether that is outside the state
/// directory. Landing a change renames it from the upper layer into the
/// workspace, which only works within one filesystem: the state directory
/// when it shares the workspace's, else a private directory beside the
/// workspace (its parent; invisible in the sandbox, which sees only the
/// workspace itself). That directory must be ours alone: made with mode 0700,
/// or found as a real directory owned by us with no access for others
/// (a parent like /tmp is shared). When neither works, the state directory,
/// and landing copies.
///
/// Every directory from the workspace's parent up to `/` must be one that
/// nobody but us and root can rename entries in (owned by us or root, and not
/// writable by group or others unless sticky, like /tmp): otherwise someone
/// could move our directory away and put theirs, with a journal of their own,
/// in its place.
pub fn capture_root(state: &Path, workspace: &Path) -> (PathBuf, bool) {
    use std::os::unix::fs::DirBuilderExt;
    let dev = |p: &Path| std::fs::metadata(p).map(|m| m.dev()).ok();
    let ws_dev = dev(workspace);
    if ws_dev.is_none() || dev(state) == ws_dev {
        return (overlays_dir(state), false);
    }
    let Some(parent) = workspace
        .parent()
        .filter(|p| dev(p) == ws_dev && p.ancestors().all(only_ours_to_rename_in))
    else {
        return (overlays_dir(state), false);
    };
    let root = parent.join(BESIDE_WORKSPACE);
    let _ = std::fs::DirBuilder::new().mode(0o700).create(&root);
    let ours = std::fs::symlink_metadata(&root)
        .is_ok_and(|m| m.file_type().is_dir() && m.uid() == nix::unistd::geteuid().as_raw() && m.mode() & 0o077 == 0);
    if ours {
        (root, true)
    } else {
        (overlays_dir(state), false)
    }
}

/// Whether only we and root can rename or replace what `dir` holds.
fn only_ours_to_rename_in(dir: &Path) -> bool {
    let me = nix::unistd::geteuid().as_raw();
    std::fs::symlink_metadata(dir).is_ok_and(|m| {
        m.file_type().is_dir() && (m.uid() == me || m.uid() == 0) && (m.mode() & 0o022 == 0 || m.mode() & 0o1000 != 0)
    })
}

/// The process's umask, read once (reading it means setting it and back).
fn process_umask() -> u32 {
    static UMASK: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *UMASK.get_or_init(|| {
        let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o022));
        nix::sys::stat::umask(old);
        old.bits()
    })
}

/// Whether the launcher that made a capture (its name starts with its pid) still runs.
fn maker_alive(name: &std::ffi::OsStr) -> bool {
    let pid = name
        .to_str()
        .and_then(|n| n.split('-').next())
        .and_then(|p| p.parse::<u32>().ok());
    pid.is_some_and(|p| p != std::process::id() && Path::new(&format!("/proc/{p}")).exists())
}

/// A capture decided on, with every path it will have, but not made yet.
///
/// A run's plan names the capture's directories, and init opens them only
/// once the launcher has written its id maps; making them (a spare skeleton
/// taken, its lock, the git directories' own upper and work directories)
/// waits until then, alongside the kernel's making of init and init's first
/// steps, instead of before the sandbox is cloned (see
/// `sandbox::apply::run`'s `before_release`). Its start, which the check of
/// the person's concurrent changes compares times with, is when it was
/// decided, as it was when captures were made then.
#[derive(Debug)]
pub struct PlannedCapture {
    dir: PathBuf,
    name: String,
    workspace: PathBuf,
    state: PathBuf,
    /// In a directory beside the workspace rather than the state directory.
    beside: bool,
    /// Run by root for a workspace someone else owns: the owner's ids.
    owner: Option<(u32, u32)>,
    spares: Option<PathBuf>,
    /// Relative to the workspace: the git directories captured one by one.
    subtrees: Vec<PathBuf>,
    started: SystemTime,
}

impl PlannedCapture {
    /// Decide where one run's capture goes; nothing is made but the
    /// directory beside the workspace that captures there share.
    pub fn new(state: &Path, workspace: &Path) -> PlannedCapture {
        let started = SystemTime::now();
        let nanos = started
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let name = format!("{}-{nanos}", std::process::id());
        let (root, beside) = capture_root(state, workspace);
        // Run by root for a workspace someone else owns, the sandbox acts as
        // that owner, and overlayfs writes both directories with the
        // mounter's rights: they must be the owner's.
        let owner = std::fs::metadata(workspace)
            .ok()
            .map(|m| (m.uid(), m.gid()))
            .filter(|&(u, _)| nix::unistd::geteuid().is_root() && u != 0);
        // A spare skeleton is made by us with our own modes and owner: not
        // for a capture given to someone else, nor one beside the workspace.
        let spares = (!beside && owner.is_none()).then(|| spares_dir(state));
        PlannedCapture {
            dir: root.join(&name),
            name,
            workspace: workspace.to_path_buf(),
            state: state.to_path_buf(),
            beside,
            owner,
            spares,
            subtrees: Vec::new(),
            started,
        }
    }

    /// Capture writes beneath the workspace directory `rel` only (which must
    /// be a real directory when the capture is made).
    pub fn add_subtree(&mut self, rel: &Path) {
        self.subtrees.push(rel.to_path_buf());
    }

    /// The upper and work directories of a whole-workspace overlay.
    pub fn upper(&self) -> PathBuf {
        self.dir.join("upper")
    }

    pub fn work(&self) -> PathBuf {
        self.dir.join("work")
    }

    /// Each git directory's overlay: (relative path, upper, work). Each has
    /// a work directory of its own below `work`, never `work` itself: the
    /// capture's skeleton may serve the next capture while this overlay is
    /// still mounted (see [`spares_dir`]).
    pub fn subtrees(&self) -> Vec<Subtree> {
        self.subtrees
            .iter()
            .enumerate()
            .map(|(n, rel)| Subtree {
                rel: rel.clone(),
                upper: self.upper().join(rel),
                work: self.work().join(n.to_string()),
            })
            .collect()
    }

    /// Make the capture directories (locked for this process).
    pub fn make(self) -> Result<Capture, WorkspaceError> {
        let dir = &self.dir;
        // Ours alone, whatever the umask and whoever may enter the directory
        // above: what another user put in the upper layer would land in the
        // workspace as the run's.
        let private = || {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new().mode(0o700).create(dir)
        };
        if !self.spares.as_deref().is_some_and(|s| take_spare(s, dir)) {
            if let Err(e) = private() {
                if e.kind() != std::io::ErrorKind::NotFound {
                    return Err(err(dir, e));
                }
                if let Some(parent) = dir.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| err(parent, e))?;
                }
                private().map_err(|e| err(dir, e))?;
            }
            for d in [dir.join("upper"), dir.join("work")] {
                let made = std::fs::create_dir(&d).and_then(|()| match self.owner {
                    Some((u, g)) => std::os::unix::fs::chown(&d, Some(u), Some(g)),
                    None => Ok(()),
                });
                if let Err(e) = made {
                    remove_capture(dir);
                    return Err(err(&d, e));
                }
            }
        }
        // Made, but neither locked nor linked: on a failure from here it goes
        // (recovery would never find one beside the workspace without its link).
        let made = |e: WorkspaceError| {
            remove_capture(dir);
            e
        };
        // The lock is on the capture directory itself (flock works on any
        // open file): one file fewer to make and remove on every run.
        let file = std::fs::File::open(dir).map_err(|e| made(err(dir, e)))?;
        let lock = lock_exclusive(file, true)
            .ok_or_else(|| made(err(dir, std::io::Error::other("cannot lock the capture"))))?;
        // Recovery finds a capture beside the workspace through this link.
        // Nothing has been written through the capture yet, so a launcher
        // killed before the link exists leaves only an empty capture behind.
        let link = if self.beside {
            let link = overlays_dir(&self.state).join(&self.name);
            std::fs::create_dir_all(overlays_dir(&self.state)).map_err(|e| made(err(&link, e)))?;
            std::os::unix::fs::symlink(dir, &link).map_err(|e| made(err(&link, e)))?;
            Some(link)
        } else {
            None
        };
        let subtrees = self.subtrees();
        let capture = Capture {
            dir: self.dir,
            workspace: self.workspace,
            link,
            _lock: lock,
            started: self.started,
            subtrees: Vec::new(),
            spares: self.spares,
        };
        capture.make_subtrees(subtrees)
    }
}

impl Capture {
    /// Make the capture directories for one run (locked for this process).
    pub fn create(state: &Path, workspace: &Path) -> Result<Capture, WorkspaceError> {
        PlannedCapture::new(state, workspace).make()
    }

    /// Make each subtree's directories; on a failure the capture goes.
    fn make_subtrees(mut self, subtrees: Vec<Subtree>) -> Result<Capture, WorkspaceError> {
        for t in subtrees {
            if let Err(e) = self.make_subtree(&t) {
                self.discard();
                return Err(e);
            }
            self.subtrees.push(t);
        }
        Ok(self)
    }

    /// A subtree's upper directory takes the mode, and when run by root the
    /// owner, of the directory it covers, since the overlay's root shows the
    /// upper directory's.
    fn make_subtree(&self, t: &Subtree) -> Result<(), WorkspaceError> {
        let lower_path = self.workspace.join(&t.rel);
        let lower = std::fs::symlink_metadata(&lower_path).map_err(|e| err(&lower_path, e))?;
        if !lower.is_dir() {
            return Err(err(&lower_path, std::io::Error::other("not a directory")));
        }
        let (upper, work) = (&t.upper, &t.work);
        std::fs::create_dir(work).map_err(|e| err(work, e))?;
        // A nested git directory needs its parents in the upper layer; the
        // workspace's own `.git` sits right in it.
        if let Some(parent) = upper.parent().filter(|p| *p != self.upper()) {
            std::fs::create_dir_all(parent).map_err(|e| err(parent, e))?;
        }
        let mode = lower.mode() & 0o7777;
        {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .mode(mode)
                .create(upper)
                .map_err(|e| err(upper, e))?;
        }
        // Only if the umask took bits away.
        if mode & process_umask() != 0 {
            std::fs::set_permissions(upper, std::fs::Permissions::from_mode(mode)).map_err(|e| err(upper, e))?;
        }
        // Always, as root: even for ids root has, a directory made in a
        // set-group-ID directory (or on a filesystem mounted `grpid`) takes its
        // parent's group, which the sandbox may not map, and the overlay then
        // refuses to mount.
        if nix::unistd::geteuid().is_root() {
            for d in [upper, work] {
                std::os::unix::fs::lchown(d, Some(lower.uid()), Some(lower.gid())).map_err(|e| err(d, e))?;
            }
        }
        Ok(())
    }

    pub fn upper(&self) -> PathBuf {
        self.dir.join("upper")
    }

    pub fn work(&self) -> PathBuf {
        self.dir.join("work")
    }

    /// Classify the capture and land it, or not, as the policy says.
    pub fn finish(self, globs: &dyn Fn() -> PathGlobs, drop_violations: bool) -> Result<Outcome, WorkspaceError> {
        let rels: Vec<&Path> = self.subtrees.iter().map(|t| t.rel.as_path()).collect();
        let landed = land(
            &self.dir,
            &self.workspace,
            globs,
            drop_violations,
            self.started,
            &rels,
            None,
        );
        // Landed or rolled back, the capture is gone (or only its empty
        // skeleton is left); an error keeps it (and its link) for the next
        // start to finish.
        let Ok(landed) = landed else {
            return landed.map(|l| l.outcome);
        };
        self.unlink();
        if landed.skeleton_left {
            // Only a skeleton whose `upper` and `work` held the overlays'
            // directories (git directories' overlays) and were none
            // themselves: the overlays stay mounted until init is let go,
            // and a directory an overlay still uses must not serve another
            // (overlayfs calls that undefined). A whole-workspace overlay's
            // are its upper and work directories: removed.
            let spares = self.spares.as_deref().filter(|_| !self.subtrees.is_empty());
            // Still locked: a run that takes the spare at once waits the
            // moment until we let go.
            retire_skeleton(&self.dir, spares);
        }
        Ok(landed.outcome)
    }

    fn unlink(&self) {
        if let Some(link) = &self.link {
            let _ = std::fs::remove_file(link);
        }
    }

    /// Throw the capture away unlooked-at (the command never started).
    pub fn discard(self) {
        remove_capture(&self.dir);
        self.unlink();
    }

    /// Files where a preview run's stdout, stderr and exit code are kept.
    pub fn output_files(&self) -> Result<(std::fs::File, std::fs::File), WorkspaceError> {
        let open = |name: &str| {
            let p = self.dir.join(name);
            std::fs::File::create(&p).map_err(|e| err(&p, e))
        };
        Ok((open("stdout")?, open("stderr")?))
    }

    /// Keep this capture as the preview of a held action: classify it (nothing
    /// lands), digest everything it holds, and move it to `previews/<digest>`.
    /// On an error the capture is discarded: nothing of it is kept.
    pub fn keep_as_preview(
        self,
        state: &Path,
        globs: &dyn Fn() -> PathGlobs,
        exit_code: i32,
    ) -> Result<Preview, WorkspaceError> {
        let kept = self.try_keep(state, globs, exit_code);
        match &kept {
            Ok(_) => self.unlink(),
            Err(_) => self.discard(),
        }
        kept
    }

    fn try_keep(&self, state: &Path, globs: &dyn Fn() -> PathGlobs, exit_code: i32) -> Result<Preview, WorkspaceError> {
        let mut outcome = Outcome::default();
        let mut ops = Vec::new();
        Planner {
            ws: &self.workspace,
            git_dirs: &[],
            upper: self.upper(),
            globs: LazyGlobs::new(globs),
            includes: std::cell::OnceCell::new(),
            layout: std::cell::OnceCell::new(),
            out: &mut outcome,
            ops: &mut ops,
            started: SystemTime::now(),
        }
        .walk(Path::new(""))?;
        let digest = preview_digest(&self.dir, exit_code)?;
        // Beside the capture, so that keeping it, and later landing it, are renames.
        let previews = match &self.link {
            Some(_) => self
                .dir
                .parent()
                .map_or_else(|| state.join("previews"), |r| r.join("previews")),
            None => state.join("previews"),
        };
        // One directory per held action, even for two with the same effects
        // (the digest covers only what they wrote and printed): a landing or
        // a discard of one never touches another's. Never replaces anything.
        let mut suffix = [0u8; 8];
        getrandom::fill(&mut suffix).map_err(|e| err(&previews, std::io::Error::other(e.to_string())))?;
        let dest = previews.join(format!("{}-{}", &digest[7..39], crate::policy::hex(&suffix)));
        std::fs::create_dir_all(&previews).map_err(|e| err(&previews, e))?;
        if std::fs::symlink_metadata(&dest).is_ok() {
            return Err(err(&dest, std::io::Error::from(std::io::ErrorKind::AlreadyExists)));
        }
        std::fs::rename(&self.dir, &dest).map_err(|e| err(&self.dir, e))?;
        Ok(Preview {
            dir: dest,
            digest,
            outcome,
            exit_code,
        })
    }
}

/// A kept preview: where it is, what it holds, and its digest.
#[derive(Debug)]
pub struct Preview {
    pub dir: PathBuf,
    pub digest: String,
    pub outcome: Outcome,
    pub exit_code: i32,
}

/// SHA-256 over everything a preview holds: every entry of the upper layer
/// (path, kind, mode, content or link target) and the recorded stdout, stderr
/// and exit code. An approval binds it; a changed byte changes it.
///
/// The exit code is the one the held action records (not a file of its own:
/// one file fewer to make at a hold and to remove at its resume), hashed as
/// the file that held it until then was, so a preview kept by an earlier
/// version keeps its digest.
pub fn preview_digest(dir: &Path, exit_code: i32) -> Result<String, WorkspaceError> {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    let mut stack = vec![PathBuf::new()];
    let upper = dir.join("upper");
    let mut entries = Vec::new();
    while let Some(rel) = stack.pop() {
        let d = upper.join(&rel);
        for e in std::fs::read_dir(&d).map_err(|e| err(&d, e))?.flatten() {
            let r = rel.join(e.file_name());
            let m = std::fs::symlink_metadata(upper.join(&r)).map_err(|e| err(&r, e))?;
            if m.is_dir() {
                stack.push(r.clone());
            }
            entries.push((r, m));
        }
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    for (r, m) in entries {
        let full = upper.join(&r);
        let bytes = r.as_os_str().as_bytes();
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
        h.update(m.mode().to_le_bytes());
        h.update(m.rdev().to_le_bytes());
        if m.file_type().is_symlink() {
            h.update(
                std::fs::read_link(&full)
                    .map_err(|e| err(&full, e))?
                    .as_os_str()
                    .as_bytes(),
            );
        } else if m.is_file() {
            let mut f = super::open_planted(&full).map_err(|e| err(&full, e))?;
            std::io::copy(&mut f, &mut h).map_err(|e| err(&full, e))?;
        }
        h.update([0xff]);
    }
    for name in ["stdout", "stderr"] {
        let p = dir.join(name);
        let data = std::fs::read(&p).map_err(|e| err(&p, e))?;
        h.update((data.len() as u64).to_le_bytes());
        h.update(&data);
    }
    let code = exit_code.to_string();
    h.update((code.len() as u64).to_le_bytes());
    h.update(code.as_bytes());
    Ok(format!("sha256:{}", crate::policy::hex(&h.finalize())))
}

/// A preview being landed, locked against a second lander and against
/// [`resume_preview_landing`]. Its journal stays until [`LandedPreview::done`]:
/// the caller records the action's result first, so that a launcher killed
/// in between leaves a journal that says the landing was decided, and the
/// next start finishes it instead of asking for a fresh approval.
pub struct LandedPreview {
    dir: PathBuf,
    workspace: PathBuf,
    link: PathBuf,
    /// Its journal moves entries to the trash (see [`cleanup`]).
    removals: bool,
    _lock: nix::fcntl::Flock<std::fs::File>,
}

impl LandedPreview {
    /// The result is on record: remove the preview, journal and all.
    pub fn done(self) {
        cleanup(&self.dir, &self.workspace, self.removals);
        let _ = std::fs::remove_file(&self.link);
    }

    /// [`done`](Self::done), in a child of its own, once the caller has said
    /// everything and is about to exit: a harness waits for the launcher's
    /// exit and the end of its output, not for this removal (about a
    /// millisecond of file system metadata on ext4, far more for a landing
    /// that removed many files). The child holds the preview's lock until it
    /// is done, so no other start touches it meanwhile, and removes the
    /// landing link last: a child killed midway leaves a link to a preview
    /// whose retired journal says the rest is to be removed, which the next
    /// start does ([`interrupted_preview_landings`]).
    ///
    /// Done here, before the hand-off, whatever the harness's next command
    /// could see: a trash in the workspace (a landing across filesystems that
    /// removed files). Done here whole when this process is the init of a
    /// pid namespace, whose exit would take the child with it.
    ///
    /// Call only from a single-threaded process (the launcher is, once its
    /// sandbox is gone), right before it exits.
    pub fn done_after_exit(self) {
        use std::io::Write;
        if std::process::id() == 1 {
            self.done();
            return;
        }
        let ws_trash = trash_dir(&self.dir, &self.workspace);
        if std::fs::symlink_metadata(&ws_trash).is_ok() {
            retire_journal(&self.dir, &self.workspace, self.removals);
            let _ = std::fs::remove_dir_all(&ws_trash);
        }
        // The child never writes to them; nothing buffered may be lost or doubled.
        let _ = std::io::stdout().flush();
        let _ = std::io::stderr().flush();
        let lock_fd = std::os::fd::AsRawFd::as_raw_fd(&*self._lock) as u32;
        // SAFETY: fork in a single-threaded process (see above), so the child
        // may go on with Rust code; it leaves through `_exit`, running no
        // destructor or exit handler of the parent's.
        match unsafe { libc::fork() } {
            0 => {
                // Out of the harness's session, off its pipes and off every
                // descriptor it or this launcher left open (a harness waits
                // for the end of a pipe it passed), keeping only the lock.
                // SAFETY: plain system calls on this process's own descriptors.
                unsafe {
                    libc::setsid();
                    let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
                    for fd in 0..3 {
                        if null >= 0 {
                            libc::dup2(null, fd);
                        } else {
                            libc::close(fd);
                        }
                    }
                    if lock_fd > 3 {
                        libc::syscall(libc::SYS_close_range, 3u32, lock_fd - 1, 0u32);
                    }
                    libc::syscall(libc::SYS_close_range, lock_fd + 1, u32::MAX, 0u32);
                }
                self.done();
                // SAFETY: see above.
                unsafe { libc::_exit(0) }
            }
            -1 => self.done(),
            // The lock is the child's now: dropping it here would unlock the
            // descriptor both share. It closes with this process.
            _ => std::mem::forget(self),
        }
    }
}

/// Who began a preview's landing: the action and its run (the resume that
/// consumed the approval). Recovery finishes a landing only for them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LandingOwner {
    pub action: String,
    pub run: String,
}

/// `<state>/landings/<action id>`: a link to each preview being landed, so
/// that any later start finds a landing its launcher did not finish (a
/// preview may live beside its workspace, and there may be thousands of
/// previews waiting for approval: none of them is looked at).
fn landing_link(state: &Path, id: &str) -> PathBuf {
    state.join("landings").join(id)
}

/// Action ids whose preview landing began and was not finished (its journal
/// is there and no launcher holds it). Links left by a landing that died
/// before its journal, or by one that finished, are removed.
pub fn interrupted_preview_landings(state: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let Ok(rd) = std::fs::read_dir(state.join("landings")) else {
        return found;
    };
    for e in rd.flatten() {
        let Some(id) = e.file_name().to_str().map(str::to_string) else {
            continue;
        };
        let Ok(dir) = std::fs::read_link(e.path()) else {
            continue;
        };
        let Ok(file) = std::fs::File::open(&dir) else {
            let _ = std::fs::remove_file(e.path());
            continue;
        };
        // A live launcher is landing it.
        let Some(_lock) = lock_exclusive(file, false) else {
            continue;
        };
        if dir.join(JOURNAL).exists() {
            found.push(id);
            continue;
        }
        // Landed, and its removal cut short (a launcher's child killed
        // midway): the rest of it goes now.
        if let Some(j) = std::fs::read(dir.join(RETIRED_JOURNAL))
            .ok()
            .and_then(|t| serde_json::from_slice::<Journal>(&t).ok())
        {
            cleanup(&dir, &j.workspace, j.has_removals());
        }
        let _ = std::fs::remove_file(e.path());
    }
    found
}

/// Whether a landing of action `id`'s preview may have begun: its link is
/// made before the landing's journal and removed only after it, so without
/// the link no landing is under way (one stat, no store read).
pub fn landing_link_present(state: &Path, id: &str) -> bool {
    std::fs::symlink_metadata(landing_link(state, id)).is_ok()
}

/// Whether a landing of the preview in `dir` began and has not been finished
/// (or given up): its journal is there.
pub fn landing_begun(dir: &Path) -> bool {
    dir.join(JOURNAL).exists()
}

fn lock_preview(dir: &Path, wait: bool) -> Result<Option<nix::fcntl::Flock<std::fs::File>>, WorkspaceError> {
    let file = std::fs::File::open(dir).map_err(|e| err(dir, e))?;
    Ok(lock_exclusive(file, wait))
}

/// A landing that failed after its journal: the journal is set aside (kept
/// in the preview, renamed) so that nothing applies the rest later, unasked,
/// over whatever the person does next; the preview stays for them to see.
fn give_up_landing(dir: &Path, link: &Path) {
    let _ = std::fs::rename(dir.join(JOURNAL), dir.join(FAILED_JOURNAL));
    let _ = std::fs::remove_file(link);
}

/// Whether a landing of the preview in `dir` began and was given up (its
/// journal set aside): then part of it may have landed. After a failed
/// [`land_preview`], false means it failed before anything landed.
pub fn landing_set_aside(dir: &Path) -> bool {
    dir.join(FAILED_JOURNAL).exists()
}

/// Land a kept preview exactly as captured (nothing runs). Always through a
/// journal, even a single rename or nothing at all: its presence is how a
/// later start knows the landing had begun.
#[allow(clippy::too_many_arguments)]
pub fn land_preview(
    state: &Path,
    owner: &LandingOwner,
    dir: &Path,
    workspace: &Path,
    globs: &dyn Fn() -> PathGlobs,
    drop_violations: bool,
    make_start_durable: &dyn Fn() -> std::io::Result<()>,
) -> Result<(Outcome, LandedPreview), WorkspaceError> {
    let lock = lock_preview(dir, true)?.ok_or_else(|| err(dir, std::io::Error::other("cannot lock the preview")))?;
    if landing_begun(dir) {
        return Err(err(
            dir,
            std::io::Error::other("a landing of this preview began before and is not finished"),
        ));
    }
    let link = landing_link(state, &owner.action);
    let links = link.parent().expect("has a parent");
    std::fs::create_dir_all(links).map_err(|e| err(links, e))?;
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(dir, &link).map_err(|e| err(&link, e))?;
    match land(
        dir,
        workspace,
        globs,
        drop_violations,
        SystemTime::now(),
        &[],
        Some((owner, make_start_durable)),
    ) {
        Ok(landed) => Ok((
            landed.outcome,
            LandedPreview {
                dir: dir.to_path_buf(),
                workspace: workspace.to_path_buf(),
                link,
                removals: landed.removals,
                _lock: lock,
            },
        )),
        Err(e) => {
            give_up_landing(dir, &link);
            Err(e)
        }
    }
}

/// What [`resume_preview_landing`] found.
pub enum PendingLanding {
    /// No landing began (no journal), or one finished meanwhile.
    None,
    /// Another launcher holds the preview: it is landing it now.
    Busy,
    /// Finished from the journal: the outcome its lander had decided, and
    /// the run that began it.
    Finished {
        landed: LandedPreview,
        outcome: Option<Outcome>,
        run: String,
    },
    /// The rest could not be applied; the journal is set aside, so nothing
    /// retries it later unasked.
    Failed { error: WorkspaceError, run: String },
    /// The journal does not name this action and its last run on record (an
    /// older build's, another action's, or a run whose start the store lost):
    /// set aside unapplied, with why.
    SetAside(String),
}

/// Finish the landing of a preview whose lander died after writing its
/// journal (the steps left are applied; those done are skipped), if the
/// journal names `id` as the action that began it and `run` (the store's last
/// run of it) as its run.
pub fn resume_preview_landing(
    state: &Path,
    id: &str,
    run: Option<&str>,
    dir: &Path,
) -> Result<PendingLanding, WorkspaceError> {
    let journal_path = dir.join(JOURNAL);
    if !journal_path.exists() {
        return Ok(PendingLanding::None);
    }
    // Gone, or its journal gone: its lander finished meanwhile.
    let lock = match std::fs::File::open(dir) {
        Ok(f) => lock_exclusive(f, false),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(PendingLanding::None),
        Err(e) => return Err(err(dir, e)),
    };
    let Some(lock) = lock else {
        return Ok(PendingLanding::Busy);
    };
    let text = match std::fs::read(&journal_path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(PendingLanding::None),
        Err(e) => return Err(err(&journal_path, e)),
    };
    let link = landing_link(state, id);
    // Unreadable (a power cut kept the rename of a journal written without
    // fsync, not its bytes; or a newer build's): nothing to finish it from.
    let journal: Journal = match serde_json::from_slice(&text) {
        Ok(j) => j,
        Err(e) => {
            give_up_landing(dir, &link);
            return Ok(PendingLanding::SetAside(format!("its journal cannot be read ({e})")));
        }
    };
    let Some(owner) = journal.owner.clone().filter(|o| o.action == id) else {
        give_up_landing(dir, &link);
        return Ok(PendingLanding::SetAside(format!(
            "its journal does not name {id} as the action that began it"
        )));
    };
    // A journal of another run than the store's last (a power cut kept the
    // journal, written without fsync, and lost the start of its run, while
    // an earlier run of the action was on record): it is nobody's to finish,
    // and finishing it would land it again at every start.
    if run != Some(owner.run.as_str()) {
        give_up_landing(dir, &link);
        return Ok(PendingLanding::SetAside(format!(
            "its journal names the run {}, but the last run of {id} on record is {}",
            owner.run,
            run.unwrap_or("none")
        )));
    }
    if let Err(error) = apply(dir, &journal) {
        give_up_landing(dir, &link);
        return Ok(PendingLanding::Failed { error, run: owner.run });
    }
    Ok(PendingLanding::Finished {
        landed: LandedPreview {
            dir: dir.to_path_buf(),
            removals: journal.has_removals(),
            workspace: journal.workspace,
            link,
            _lock: lock,
        },
        outcome: journal.outcome,
        run: owner.run,
    })
}

/// Set aside, unapplied, the journal of a landing that cannot be finished
/// for the action's state (the store lost the commit that began it): what
/// landed stays, the preview is kept, and nothing retries it unasked.
pub fn give_up_preview_landing(state: &Path, id: &str, dir: &Path) {
    if let Ok(Some(_lock)) = lock_preview(dir, false) {
        give_up_landing(dir, &landing_link(state, id));
    }
}

/// A finished landing whose result is on record but whose preview was not
/// removed yet (its launcher died in between): remove it, applying nothing.
pub fn remove_landed_preview(state: &Path, id: &str, dir: &Path) {
    let Ok(Some(lock)) = lock_preview(dir, false) else {
        return;
    };
    let journal = std::fs::read(dir.join(JOURNAL))
        .ok()
        .and_then(|t| serde_json::from_slice::<Journal>(&t).ok());
    if let Some(j) = journal {
        cleanup(dir, &j.workspace, j.has_removals());
    }
    let _ = std::fs::remove_file(landing_link(state, id));
    drop(lock);
}

/// Throw a preview away (a rejected action). Not one being landed, or whose
/// landing began: that one is finished by the next start.
pub fn discard_preview(dir: &Path) {
    let Ok(Some(_lock)) = lock_preview(dir, false) else {
        return;
    };
    if !landing_begun(dir) {
        remove_capture(dir);
    }
}

/// Classify a capture directory and land it, or not.
/// `subtrees`: the directories that were overlays of their own (none: the
/// whole workspace), which tells cleaning up what the capture holds.
/// A preview's journal stays for its caller to remove: the flag says
/// whether it moved entries to the trash (see [`cleanup`]).
fn land(
    dir: &Path,
    workspace: &Path,
    globs: &dyn Fn() -> PathGlobs,
    drop_violations: bool,
    started: SystemTime,
    subtrees: &[&Path],
    preview: Option<(&LandingOwner, &dyn Fn() -> std::io::Result<()>)>,
) -> Result<Landed, WorkspaceError> {
    {
        let mut out = Outcome::default();
        let mut ops = Vec::new();
        let mut plan = Planner {
            ws: workspace,
            git_dirs: subtrees,
            upper: dir.join("upper"),
            globs: LazyGlobs::new(globs),
            includes: std::cell::OnceCell::new(),
            layout: std::cell::OnceCell::new(),
            out: &mut out,
            ops: &mut ops,
            started,
        };
        plan.walk(Path::new(""))?;
        // A git directory is one transaction (an index, the objects it
        // names, the refs that point at them): if the person changed any of
        // it meanwhile, none of the run's changes to it land.
        let ops = if !subtrees.is_empty() && !out.conflicts.is_empty() {
            Vec::new()
        } else if out.violations.is_empty() {
            ops
        } else if drop_violations {
            ops.into_iter().filter(|(_, ok)| *ok).collect()
        } else {
            Vec::new()
        };
        let mut ops: Vec<Op> = ops.into_iter().map(|(op, _)| op).collect();
        objects_first(&mut ops, subtrees);
        if let Some((owner, make_start_durable)) = preview {
            // A preview: the journal, even of nothing, records that the
            // landing began; the caller removes the preview (`LandedPreview`).
            out.committed = out.violations.is_empty() || !ops.is_empty();
            let journal = Journal {
                workspace: workspace.to_path_buf(),
                ops,
                owner: Some(owner.clone()),
                outcome: Some(out.clone()),
            };
            // One rename (or none) is atomic by itself; a move across
            // filesystems is a copy, which is not.
            let durable = journal.ops.len() > 1 || !same_mount(dir, workspace);
            if durable {
                // The journal names the run that began this landing, so the
                // store's record of that start goes to disk first: after a
                // power cut a durable journal is finished only for a run the
                // store still knows.
                make_start_durable().map_err(|e| err(dir, e))?;
            }
            write_journal(dir, &journal, durable)?;
            crash_point("after-journal");
            apply(dir, &journal)?;
            crash_point("after-landing");
            return Ok(Landed {
                outcome: out,
                removals: journal.has_removals(),
                skeleton_left: false,
            });
        }
        if let [Op::Move(r)] = ops.as_slice() {
            // One file or symlink to put in place: a single rename is atomic
            // by itself (a launcher killed around it leaves the workspace as
            // before or as after), so it needs no journal nor its two fsyncs.
            // Across filesystems the move is a copy, which is not atomic:
            // that one goes through the journal below.
            if rename_in_place(dir, workspace, r) {
                crash_point("after-single-rename");
                out.committed = true;
                let skeleton_left = strip_capture(dir, subtrees);
                return Ok(Landed {
                    outcome: out,
                    removals: false,
                    skeleton_left,
                });
            }
        }
        if !ops.is_empty() {
            let journal = Journal {
                workspace: workspace.to_path_buf(),
                ops,
                owner: None,
                outcome: None,
            };
            write_journal(dir, &journal, true)?;
            crash_point("after-journal");
            apply(dir, &journal)?;
            out.committed = true;
            cleanup(dir, workspace, journal.has_removals());
            Ok(Landed {
                outcome: out,
                removals: false,
                skeleton_left: false,
            })
        } else {
            out.committed = out.violations.is_empty();
            let skeleton_left = strip_capture(dir, subtrees);
            Ok(Landed {
                outcome: out,
                removals: false,
                skeleton_left,
            })
        }
    }
}

/// What [`land`] did besides its outcome.
struct Landed {
    outcome: Outcome,
    /// A preview's journal moved entries to the trash (see [`cleanup`]).
    removals: bool,
    /// The capture was stripped to its empty skeleton, for the caller to
    /// retire (see [`strip_capture`]).
    skeleton_left: bool,
}

/// In a git directory, what lands under `objects/` lands first and what is
/// removed there last: an index or a ref never names an object that is not
/// there yet, nor outlives one, at any point of the commit (a launcher killed
/// midway leaves a repository git can read until the next start finishes).
/// Left as it is when a path there is both removed and made (no such case
/// in git's own layout), since order then matters within it.
fn objects_first(ops: &mut [Op], subtrees: &[&Path]) {
    let path = |op: &Op| match op {
        Op::Remove(r) | Op::MakeDir(r, _) | Op::Move(r) => Path::new(std::ffi::OsStr::from_bytes(r)).to_path_buf(),
    };
    // `objects/` of the git directory, or of a submodule's or worktree's
    // beneath it (`modules/<name>/objects/...`).
    let in_objects = |p: &Path| {
        subtrees.iter().any(|d| {
            p.strip_prefix(d).is_ok_and(|inner| {
                inner.starts_with("objects")
                    || ((inner.starts_with("modules") || inner.starts_with("worktrees"))
                        && inner.iter().any(|c| c == "objects"))
            })
        })
    };
    let removed: std::collections::HashSet<PathBuf> = ops
        .iter()
        .filter(|op| matches!(op, Op::Remove(_)))
        .map(path)
        .filter(|p| in_objects(p))
        .collect();
    if ops
        .iter()
        .any(|op| !matches!(op, Op::Remove(_)) && removed.contains(&path(op)))
    {
        return;
    }
    ops.sort_by_key(|op| match (in_objects(&path(op)), op) {
        (true, Op::Remove(_)) => 2,
        (true, _) => 0,
        (false, _) => 1,
    });
}

/// Test hook (debug builds only): abort at a named point of the commit, as if
/// the launcher were killed there.
fn crash_point(name: &str) {
    if cfg!(debug_assertions) && std::env::var("TETHER_EXEC_TEST_CRASH_AT").is_ok_and(|v| v == name) {
        std::process::abort();
    }
    // Or wait there while the file TETHER_EXEC_TEST_PAUSE_FILE exists (a
    // test changes the workspace meanwhile, as another run could).
    if cfg!(debug_assertions) && std::env::var("TETHER_EXEC_TEST_PAUSE_AT").is_ok_and(|v| v == name) {
        if let Some(f) = std::env::var_os("TETHER_EXEC_TEST_PAUSE_FILE") {
            let _ = std::fs::write(&f, b"");
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while Path::new(&f).exists() && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        }
    }
}

/// The policy's globs, compiled on first use: compiling them costs a few
/// hundred microseconds, and most captures (a git directory nothing was
/// written to) never judge a path.
struct LazyGlobs<'a> {
    make: &'a dyn Fn() -> PathGlobs,
    compiled: std::cell::OnceCell<PathGlobs>,
}

impl<'a> LazyGlobs<'a> {
    fn new(make: &'a dyn Fn() -> PathGlobs) -> Self {
        LazyGlobs {
            make,
            compiled: std::cell::OnceCell::new(),
        }
    }

    fn get(&self) -> &PathGlobs {
        self.compiled.get_or_init(|| (self.make)())
    }
}

/// The workspace's git layout before anything of a capture lands, with the
/// repositories this process's scan found before the run.
fn layout_before(ws: &Path) -> super::GitLayout {
    super::git_layout_with(ws, &super::repositories_found_before_run(ws))
}

struct Planner<'a> {
    ws: &'a Path,
    /// Git directories captured as overlays of their own: their control
    /// files, and their submodules', are protected wherever they are.
    git_dirs: &'a [&'a Path],
    upper: PathBuf,
    globs: LazyGlobs<'a>,
    /// What the workspace's git configurations include from it, read at the
    /// first path judged (see `gitconfig`): as they are on the host now,
    /// which is what git will obey once the changes land.
    includes: std::cell::OnceCell<Result<super::gitconfig::GitIncludes, String>>,
    /// The workspace's repositories as they are on the host (its own, its
    /// submodules', nested ones, those found before the run), read at the
    /// first path judged: for a capture of the whole workspace (no
    /// `git_dirs`), a control file made in any of their git directories
    /// never lands (it is not only moved aside after landing).
    layout: std::cell::OnceCell<super::GitLayout>,
    out: &'a mut Outcome,
    /// Operations with whether each is allowed.
    ops: &'a mut Vec<(Op, bool)>,
    started: SystemTime,
}

fn rel_bytes(p: &Path) -> Vec<u8> {
    p.as_os_str().as_bytes().to_vec()
}

fn is_whiteout(m: &std::fs::Metadata) -> bool {
    m.file_type().is_char_device() && m.rdev() == 0
}

/// Whether overlayfs marked this upper-layer directory opaque (removed and
/// made again in the run), from its `user.overlay.opaque` attribute.
fn is_opaque(p: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(p.as_os_str().as_bytes()) else {
        return false;
    };
    let name = c"user.overlay.opaque";
    let mut buf = [0u8; 4];
    // SAFETY: lgetxattr with valid NUL-terminated strings and a buffer of the size given.
    let n = unsafe {
        libc::lgetxattr(
            c.as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr() as *mut libc::c_void,
            buf.len(),
        )
    };
    n == 1 && buf[0] == b'y'
}

impl Planner<'_> {
    /// A git directory is one with a HEAD, before the run or made by it.
    fn has_head(&self, d: &Path) -> bool {
        let head = d.join("HEAD");
        std::fs::symlink_metadata(self.upper.join(&head)).is_ok()
            || std::fs::symlink_metadata(self.ws.join(&head)).is_ok()
    }

    /// The git directories known before the run: those captured as
    /// overlays of their own, else (a capture of the whole workspace) the
    /// workspace's layout, read at the first call.
    fn known_git_dirs(&self) -> impl Iterator<Item = &Path> {
        let known: &[PathBuf] = if self.git_dirs.is_empty() {
            &self.layout.get_or_init(|| layout_before(self.ws)).dirs
        } else {
            &[]
        };
        self.git_dirs.iter().copied().chain(known.iter().map(PathBuf::as_path))
    }

    /// git takes a folder holding `HEAD`, `objects` and `refs` for a git
    /// directory, and one without them for none (it looks further up). So a
    /// run may not make `HEAD` at the top of a work tree (the workspace's,
    /// or a repository's in it), nor, where a `HEAD` was already there (a
    /// file the project tracks), `objects`, `refs` or `config` beside it: with
    /// its `.git` broken, the person's git would take the work tree for the
    /// repository and obey that `config` (its pager, its fsmonitor). Nor
    /// remove a known git directory's own `HEAD`, `objects` or `refs`. The
    /// create guard says the same to a run in a bound workspace.
    fn breaks_or_makes_a_git_dir(&self, rel: &Path, what: &str) -> Option<&'static str> {
        let known: Vec<&Path> = self.known_git_dirs().collect();
        let part = |name: &std::ffi::OsStr, of: &[&[u8]]| of.contains(&name.as_bytes());
        if what == "deletes" {
            let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else {
                return None;
            };
            return (part(name, &[b"HEAD", b"objects", b"refs"]) && known.contains(&parent)).then_some(
                "a git directory without its `HEAD`, `objects` or `refs` is none: git would look further up for a repository and obey what it found",
            );
        }
        let trees = std::iter::once(Path::new("")).chain(
            known
                .iter()
                .filter(|d| d.file_name() == Some(".git".as_ref()))
                .filter_map(|d| d.parent()),
        );
        for tree in trees {
            let Some(first) = rel.strip_prefix(tree).ok().and_then(|i| i.iter().next()) else {
                continue;
            };
            if std::fs::symlink_metadata(self.ws.join(tree).join(first)).is_ok() {
                continue; // there before the run
            }
            let head_before = std::fs::symlink_metadata(self.ws.join(tree).join("HEAD")).is_ok();
            if part(first, &[b"HEAD"]) || (head_before && part(first, &[b"objects", b"refs", b"config"])) {
                return Some(
                    "`HEAD` at the top of a work tree, with `objects`, `refs` and `config` beside it, makes git take the folder for a git directory and obey its `config`",
                );
            }
        }
        None
    }

    fn judge(&mut self, rel: &Path, what: &str) -> bool {
        let r = rel.to_string_lossy();
        if let Some(p) = self.globs.get().protected_by(&r) {
            self.out.violations.push(format!("{what} `{r}`: protected path ({p})"));
            return false;
        }
        if let Some(why) = self.breaks_or_makes_a_git_dir(rel, what) {
            self.out.violations.push(format!("{what} `{r}`: {why}"));
            return false;
        }
        // The object stores a repository borrows from: git reads each one
        // named there, and on from its own list, wherever it is (a FIFO
        // there hangs every git command; a store outside is trusted).
        let alternates = ["objects/info/alternates", "objects/info/http-alternates"];
        let borrows = alternates
            .iter()
            .any(|a| self.known_git_dirs().any(|d| rel == d.join(a)));
        if what != "deletes" && borrows {
            self.out.violations.push(format!(
                "{what} `{r}`: the object stores a repository borrows from (git reads each one it names, wherever it is, and hangs on a FIFO there); what was there before the run stays"
            ));
            return false;
        }
        let ws = self.ws;
        let includes = self.includes.get_or_init(|| {
            super::git_includes(ws, self.layout.get_or_init(|| layout_before(ws))).map_err(|e| e.to_string())
        });
        match includes {
            Ok(i) if i.guards(rel) => {
                self.out.violations.push(format!(
                    "{what} `{r}`: protected path (a git configuration includes it or a path below it, or names its folder as the repository's hooks: `include.path`, `core.hooksPath`)"
                ));
                return false;
            }
            Ok(_) => {}
            Err(e) => {
                self.out.violations.push(format!(
                    "{what} `{r}`: a git configuration cannot be read for the files it includes ({e})"
                ));
                return false;
            }
        }
        let has_head = |d: &Path| self.has_head(d);
        let git_dir = self.known_git_dirs().find_map(|d| {
            rel.strip_prefix(d)
                .ok()
                .filter(|inner| super::is_git_control_path(inner, &|p| has_head(&d.join(p))))
                .map(|_| d.to_path_buf())
        });
        if let Some(d) = git_dir {
            self.out.violations.push(format!(
                "{what} `{r}`: protected path (a control file of the git directory `{}`)",
                d.display()
            ));
            return false;
        }
        // A git index: the gitlinks it names are where git recurses, and the
        // check after the run must know them all. One this reader cannot
        // vouch for (a split index, damage) stays out; the one before stays.
        if let Some(dir) = rel
            .parent()
            .filter(|d| rel.file_name() == Some("index".as_ref()) && has_head(d))
        {
            // Anything but a regular file (a symlink to an index elsewhere)
            // is one it cannot vouch for either.
            let new = self.upper.join(rel);
            let written = std::fs::symlink_metadata(&new);
            if written.is_ok()
                && (!written.is_ok_and(|m| m.is_file())
                    || super::gitindex::gitlinks_at(&new, &self.ws.join(dir)).is_none())
            {
                self.out.violations.push(format!(
                    "{what} `{r}`: a git index tether-exec cannot vouch for (a split index, offset tables, names git refuses, damage, or other hard links), so the gitlinks it names cannot be checked; the index before the run stays"
                ));
                return false;
            }
        }
        if !self.globs.get().writable(&r) {
            self.out
                .violations
                .push(format!("{what} `{r}`: outside writable_globs"));
            return false;
        }
        true
    }

    /// What lands in a git directory is a regular file with a name of its
    /// own, or a directory. Not a file with another name (a hard link the
    /// run made in its capture of the whole workspace): a later run would
    /// write it in place through that name, past its git directory's
    /// overlay and the check of its index. Not a symlink: git follows one
    /// where it appends or writes in place (a reflog, `COMMIT_EDITMSG`), so
    /// the person's next `git commit` would write wherever the run pointed
    /// it, outside the workspace (`.git/logs/HEAD -> ~/.bashrc`). Nor a FIFO
    /// or a device, where git's next write of that file would hang or fail.
    fn lands_in_git_dir(&mut self, rel: &Path, m: &std::fs::Metadata, what: &str) -> bool {
        let why = if m.file_type().is_symlink() {
            "a symlink, through which git would write outside it (git follows one where it appends, as to a reflog, or writes in place)"
        } else if m.file_type().is_fifo() || m.file_type().is_char_device() || m.file_type().is_block_device() {
            // (A socket may stay: git's fsmonitor daemon leaves one, and a
            // connection to it fails at once.)
            "a FIFO or device, on which git's next write of that file would hang or fail"
        } else if m.nlink() > 1 {
            "a file with another hard link, through which a later run could write it in place"
        } else {
            return true;
        };
        // Or one the run made, which is the person's in the next run.
        let git_dir = self
            .known_git_dirs()
            .find(|d| rel.starts_with(d))
            .or_else(|| {
                rel.ancestors()
                    .skip(1)
                    .find(|d| !d.as_os_str().is_empty() && self.has_head(d))
            })
            .map(Path::to_path_buf);
        let Some(d) = git_dir else {
            return true;
        };
        self.out.violations.push(format!(
            "{what} `{}`: in the git directory `{}`, {why}; what was there before the run stays",
            rel.display(),
            d.display()
        ));
        false
    }

    /// The human changed this path in the real workspace after the run started.
    fn conflict(&mut self, rel: &Path) -> bool {
        let Ok(m) = std::fs::symlink_metadata(self.ws.join(rel)) else {
            return false;
        };
        let changed = |t: std::io::Result<SystemTime>| t.is_ok_and(|t| t > self.started);
        let ctime = SystemTime::UNIX_EPOCH + std::time::Duration::new(m.ctime() as u64, m.ctime_nsec() as u32);
        if changed(m.modified()) || ctime > self.started {
            self.out.conflicts.push(rel.to_string_lossy().into_owned());
            return true;
        }
        false
    }

    /// Every path of a lower subtree that a removal would delete must be removable.
    fn judge_removal(&mut self, rel: &Path) -> bool {
        let mut ok = self.judge(rel, "deletes");
        let full = self.ws.join(rel);
        if std::fs::symlink_metadata(&full).is_ok_and(|m| m.is_dir()) {
            if let Ok(rd) = std::fs::read_dir(&full) {
                for e in rd.flatten() {
                    ok &= self.judge_removal(&rel.join(e.file_name()));
                }
            }
        }
        ok
    }

    fn walk(&mut self, rel: &Path) -> Result<bool, WorkspaceError> {
        let dir = self.upper.join(rel);
        let rd = std::fs::read_dir(&dir).map_err(|e| err(&dir, e))?;
        let mut entries: Vec<OsString> = rd.flatten().map(|e| e.file_name()).collect();
        entries.sort();
        let mut any_allowed = false;
        for name in entries {
            let r = rel.join(&name);
            let up = self.upper.join(&r);
            let m = std::fs::symlink_metadata(&up).map_err(|e| err(&up, e))?;
            let lower = std::fs::symlink_metadata(self.ws.join(&r)).ok();
            let shown = r.to_string_lossy().into_owned();
            if is_whiteout(&m) {
                if lower.is_some() && !self.conflict(&r) {
                    let ok = self.judge_removal(&r);
                    self.out.deleted.push(shown);
                    self.ops.push((Op::Remove(rel_bytes(&r)), ok));
                    any_allowed |= ok;
                }
                continue;
            }
            if m.is_dir() {
                let lower_dir = lower.as_ref().is_some_and(|l| l.is_dir());
                let replaced = lower.is_some() && (!lower_dir || is_opaque(&up));
                if replaced {
                    if self.conflict(&r) {
                        continue;
                    }
                    let ok = self.judge_removal(&r);
                    self.out.deleted.push(shown.clone());
                    self.ops.push((Op::Remove(rel_bytes(&r)), ok));
                }
                if lower_dir && !replaced {
                    // A merged directory: only its entries changed.
                    any_allowed |= self.walk(&r)?;
                    continue;
                }
                let at = self.ops.len();
                self.out.added.push(shown);
                let inner = self.walk(&r)?;
                // A new directory is allowed if a glob names it, or if it holds
                // something allowed (it must exist for that to land).
                let r_str = r.to_string_lossy();
                let ok =
                    inner || (self.globs.get().protected_by(&r_str).is_none() && self.globs.get().writable(&r_str));
                if !ok {
                    self.judge(&r, "creates directory");
                }
                self.ops
                    .insert(at, (Op::MakeDir(rel_bytes(&r), m.permissions().mode() & 0o7777), ok));
                any_allowed |= ok;
                continue;
            }
            // A file or a symlink (committed as a symlink, never followed).
            if self.conflict(&r) {
                continue;
            }
            let (what, list) = if lower.is_some() {
                ("modifies", &mut self.out.modified)
            } else {
                ("creates", &mut self.out.added)
            };
            list.push(shown);
            // (In a git directory, `lands_in_git_dir` refuses it.)
            let fifo = m
                .file_type()
                .is_fifo()
                .then(|| crate::sandbox::plan::fifo_refused(name.as_bytes(), false))
                .flatten();
            if let Some(why) = fifo {
                self.out
                    .violations
                    .push(format!("{what} `{shown_again}`: {why}", shown_again = r.display()));
            }
            let ok = fifo.is_none() && self.lands_in_git_dir(&r, &m, what) && self.judge(&r, what);
            if lower.as_ref().is_some_and(|l| l.is_dir()) {
                self.ops.push((Op::Remove(rel_bytes(&r)), ok));
            }
            self.ops.push((Op::Move(rel_bytes(&r)), ok));
            any_allowed |= ok;
        }
        Ok(any_allowed)
    }
}

/// Write the journal, whole or not at all (a rename). `durable`: fsynced
/// before any step, so that a power cut midway leaves a journal to finish
/// the commit from. Not needed when the steps are one rename, which a power
/// cut leaves done or not done: the journal then only has to outlive a
/// killed process, and the page cache does that. A power cut may still keep
/// such a journal and lose what the store knew of the run that wrote it: a
/// preview's journal is finished only for the run the store has
/// ([`resume_preview_landing`]).
fn write_journal(dir: &Path, j: &Journal, durable: bool) -> Result<(), WorkspaceError> {
    let tmp = dir.join("journal.tmp");
    let path = dir.join(JOURNAL);
    let text = serde_json::to_vec(j).expect("journal serialises");
    let f = std::fs::File::create(&tmp).map_err(|e| err(&tmp, e))?;
    std::io::Write::write_all(&mut &f, &text).map_err(|e| err(&tmp, e))?;
    if durable {
        f.sync_all().map_err(|e| err(&tmp, e))?;
    }
    std::fs::rename(&tmp, &path).map_err(|e| err(&path, e))?;
    if durable {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| err(dir, e))?;
    }
    Ok(())
}

/// Whether a journal step's path stays inside the workspace: relative, no `..`.
fn inside_workspace(r: &[u8]) -> bool {
    Path::new(std::ffi::OsStr::from_bytes(r))
        .components()
        .all(|c| matches!(c, std::path::Component::Normal(_)))
}

/// Renames `upper/r` over `workspace/r`; `false` when that did not happen
/// (other filesystems, or any error): the journal then takes over, so that
/// a failure leaves a commit the next start can finish.
fn rename_in_place(dir: &Path, workspace: &Path, r: &[u8]) -> bool {
    if !inside_workspace(r) {
        return false;
    }
    let rel = Path::new(std::ffi::OsStr::from_bytes(r));
    let moved = || -> std::io::Result<()> {
        let (parent, name) = beneath::split(rel)?;
        let ws = beneath::Dir::root(workspace)?;
        let upper = beneath::Dir::root(&dir.join("upper"))?;
        ws.dir(parent)?.rename_from(&upper.dir(parent)?, name, name)
    };
    moved().is_ok()
}

fn trash_dir(dir: &Path, ws: &Path) -> PathBuf {
    // In the workspace, so a removal is a rename on the same filesystem.
    let id = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    ws.join(format!(".tether-exec-trash-{id}"))
}

/// Apply a journal. Every step checks whether it already happened. Every
/// change in the workspace goes through [`beneath`]: another sandbox still
/// running there cannot redirect one outside it by swapping a directory on
/// the way for a symlink.
fn apply(dir: &Path, j: &Journal) -> Result<(), WorkspaceError> {
    // Every step names a path inside the workspace: relative, no `..`.
    if !j.workspace.is_absolute()
        || !j.ops.iter().all(|op| match op {
            Op::Remove(r) | Op::MakeDir(r, _) | Op::Move(r) => inside_workspace(r),
        })
    {
        return Err(err(
            &dir.join(JOURNAL),
            std::io::Error::other("the journal names a path outside the workspace; not applied"),
        ));
    }
    let upper_path = dir.join("upper");
    let ws = beneath::Dir::root(&j.workspace).map_err(|e| err(&j.workspace, e))?;
    let upper = beneath::Dir::root(&upper_path).map_err(|e| err(&upper_path, e))?;
    // Removed entries go to a trash on the workspace's filesystem (a rename):
    // the capture's own `trash` when the capture shares it (invisible to any
    // sandbox, so nothing can plant an entry there that reads as a removal
    // already done), else a folder in the workspace. Made only for a journal
    // that removes something: most remove nothing, and a directory made and
    // removed costs 0.1 to 0.2 ms each way on ext4 here.
    let trash_root = if j.has_removals() {
        Some(if same_mount(dir, &j.workspace) {
            let t = dir.join("trash");
            let _ = std::fs::create_dir(&t);
            beneath::Dir::root(&t).map_err(|e| err(&t, e))?
        } else {
            let name = trash_dir(dir, &j.workspace);
            let name = name.file_name().unwrap_or_default();
            ws.make_dirs(Path::new(name), 0o700, None)
                .map_err(|e| err(&j.workspace.join(name), e))?
        })
    } else {
        None
    };
    let mut copied: Vec<PathBuf> = Vec::new();
    for (i, op) in j.ops.iter().enumerate() {
        if i == 1 {
            crash_point("mid-commit");
        }
        if cfg!(debug_assertions) {
            crash_point(&format!("before-step-{i}"));
        }
        let (Op::Remove(r) | Op::MakeDir(r, _) | Op::Move(r)) = op;
        let rel = Path::new(std::ffi::OsStr::from_bytes(r));
        let at = |e: std::io::Error| err(&j.workspace.join(rel), e);
        let (parent, name) = beneath::split(rel).map_err(at)?;
        match op {
            Op::Remove(_) => {
                let trash_root = trash_root.as_ref().expect("made for a journal with removals");
                let from = ws.dir(parent).map_err(at)?;
                let in_trash = trash_root.dir(parent);
                let done = in_trash.as_ref().is_ok_and(|t| t.has(name));
                if !done && from.has(name) {
                    let to = trash_root.make_dirs(parent, 0o700, None).map_err(at)?;
                    to.rename_from(&from, name, name).map_err(at)?;
                }
            }
            Op::MakeDir(_, mode) => {
                let parent_dir = ws.dir(parent).map_err(at)?;
                if !parent_dir.has(name) {
                    let made = std::fs::symlink_metadata(upper_path.join(rel)).ok();
                    let owner = made.as_ref().and_then(owner_to_give);
                    parent_dir.make_dir(name, *mode, owner).map_err(at)?;
                }
            }
            Op::Move(_) => {
                let from = upper.dir(parent).map_err(|e| err(&upper_path.join(rel), e))?;
                if from.has(name) {
                    let to = ws.dir(parent).map_err(at)?;
                    match to.rename_from(&from, name, name) {
                        Ok(()) => {}
                        Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
                            copy_into(&upper_path.join(rel), &to, name).map_err(at)?;
                            copied.push(upper_path.join(rel));
                        }
                        Err(e) => return Err(at(e)),
                    }
                }
            }
        }
    }
    // Across filesystems, a source goes only once its copy, with its name
    // and every directory made on the way, is on disk: the two filesystems
    // commit independently, and a power cut must not lose both. One `syncfs`
    // of the workspace's filesystem for all of them, not fsyncs per file.
    // Replaying the journal before the sources are gone copies again.
    if !copied.is_empty() {
        ws.sync_filesystem().map_err(|e| err(&j.workspace, e))?;
        for source in copied {
            std::fs::remove_file(&source).map_err(|e| err(&source, e))?;
        }
    }
    Ok(())
}

/// `target` (what a link in `<state>/overlays` names) is a capture of ours
/// beside a workspace: a directory, not a link, owned by us, in a folder
/// named [`BESIDE_WORKSPACE`].
fn is_capture_beside_workspace(target: &Path) -> bool {
    target
        .parent()
        .and_then(|p| p.file_name())
        .is_some_and(|n| n == BESIDE_WORKSPACE)
        && std::fs::symlink_metadata(target)
            .is_ok_and(|m| m.file_type().is_dir() && m.uid() == nix::unistd::geteuid().as_raw())
}

/// Whether a rename can go from one path to the other: the same mount (not
/// only the same device: a bind mount of it is another mount, and rename
/// refuses to cross it).
fn same_mount(a: &Path, b: &Path) -> bool {
    let id = |p: &Path| -> Option<u64> {
        let c = beneath::cstr(p.as_os_str()).ok()?;
        // SAFETY: statx into a zeroed local buffer, NUL-terminated path.
        let mut st: libc::statx = unsafe { std::mem::zeroed() };
        // The raw system call, not glibc's `statx`: the standard library
        // declares that one weak, and a static link leaves a weak symbol
        // nothing else pulls in at address 0 (the shipped binary crashed
        // here on every commit of more than one change).
        let r = unsafe {
            libc::syscall(
                libc::SYS_statx,
                libc::AT_FDCWD,
                c.as_ptr(),
                0,
                libc::STATX_MNT_ID,
                &mut st as *mut libc::statx,
            )
        };
        (r == 0 && st.stx_mask & libc::STATX_MNT_ID != 0).then_some(st.stx_mnt_id)
    };
    id(a).is_some() && id(a) == id(b)
}

/// Across filesystems (state directory elsewhere): copy into `to`/`name`
/// (through a temporary name made exclusively, never followed). The caller
/// drops the source once the copy is on disk ([`apply`]). Re-running after a
/// crash copies again, which is idempotent.
fn copy_into(from: &Path, to: &beneath::Dir, name: &std::ffi::OsStr) -> std::io::Result<()> {
    let m = std::fs::symlink_metadata(from)?;
    if m.file_type().is_symlink() {
        let target = std::fs::read_link(from)?;
        let _ = to.unlink(name);
        to.symlink(&target, name)?;
        if let Some((u, g)) = owner_to_give(&m) {
            to.lchown(name, u, g)?;
        }
    } else {
        let tmp = OsString::from_vec([b".tether-exec-tmp-".as_slice(), name.as_bytes()].concat());
        let _ = to.unlink(&tmp);
        let mut out = to.open_nofollow(&tmp, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL, 0o600)?;
        std::io::copy(&mut super::open_planted(from)?, &mut out)?;
        out.set_permissions(std::fs::Permissions::from_mode(m.permissions().mode() & 0o7777))?;
        if let Some((u, g)) = owner_to_give(&m) {
            std::os::unix::fs::fchown(&out, Some(u), Some(g))?;
        }
        drop(out);
        to.rename_from(to, &tmp, name)?;
    }
    Ok(())
}

/// Run by root, what the launcher makes on landing gets the owner of what
/// the sandbox made (the workspace's owner, see `plan`), not root.
fn owner_to_give(made: &std::fs::Metadata) -> Option<(u32, u32)> {
    (nix::unistd::geteuid().is_root() && made.uid() != 0).then(|| (made.uid(), made.gid()))
}

/// After a journaled commit: the journal goes first, for good (unlinked,
/// its directory synced), and only then the trash. Recovery decides whether
/// a removal was done by looking in the trash; a journal left without its
/// trash would make it move the run's own new entries away.
///
/// Only a journal with removals has anything in the trash to lose, so only
/// its removal is synced (an fsync costs 0.2 to 2 ms on the machine this was
/// measured on, and every resume of a preview pays one), or one whose
/// workspace is on another filesystem than the capture. On one filesystem
/// that orders its metadata (ext4, xfs), a journal of moves and new
/// directories that a power cut brings back finds its moves done (their
/// source in the capture is gone, or was not yet moved) and its directories
/// there; at worst it makes again an empty directory the person removed
/// since. Across filesystems nothing orders the workspace's changes after
/// the landing with the capture's: a journal brought back with its sources
/// would copy them again over the person's later edits.
fn cleanup(dir: &Path, ws: &Path, removals: bool) {
    retire_journal(dir, ws, removals);
    let _ = std::fs::remove_dir_all(trash_dir(dir, ws));
    // Where a removal cut short leaves the retired journal behind (a test hook).
    crash_point("capture-removal");
    remove_capture(dir);
}

/// The first step of [`cleanup`]: the journal is renamed out of the way (and
/// that made durable where a power cut could otherwise bring it back, see
/// above) before anything it refers to is removed. A no-op once done.
fn retire_journal(dir: &Path, ws: &Path, removals: bool) {
    if std::fs::rename(dir.join(JOURNAL), dir.join(RETIRED_JOURNAL)).is_ok() && (removals || !same_mount(dir, ws)) {
        let _ = std::fs::File::open(dir).and_then(|d| d.sync_all());
    }
}

/// Strip a capture whose commit used no trash down to its skeleton (`upper`
/// and `work`, for [`retire_skeleton`]): directory by directory when only
/// the empty directories the overlays used are left (the common case, a run
/// that wrote nothing there: a few `rmdir`s, where walking it costs three
/// calls a directory and, for overlayfs' unreadable `work/work`, a second
/// pass). Whether that is what is left; if not, the capture is removed
/// whole, the slow way.
fn strip_capture(dir: &Path, subtrees: &[&Path]) -> bool {
    let upper = dir.join("upper");
    let work = dir.join("work");
    let mut empty_dirs: Vec<PathBuf> = Vec::new();
    for rel in subtrees {
        // `upper/vendor/x/.git`, then `upper/vendor/x`, then `upper/vendor`.
        empty_dirs.extend(
            rel.ancestors()
                .filter(|a| !a.as_os_str().is_empty())
                .map(|a| upper.join(a)),
        );
    }
    for n in 0..subtrees.len() {
        let w = work.join(n.to_string());
        empty_dirs.push(w.join("work"));
        empty_dirs.push(w);
    }
    // A whole-workspace overlay's own.
    empty_dirs.push(work.join("work"));
    for d in &empty_dirs {
        if let Err(e) = std::fs::remove_dir(d) {
            if e.kind() != std::io::ErrorKind::NotFound {
                remove_capture(dir);
                return false;
            }
        }
    }
    true
}

/// Remove a capture or preview left as a landing leaves one (its upper layer
/// emptied): its output files, then `upper`, overlayfs' `work/work`, `work`
/// and itself, one call each, where walking it costs three calls a
/// directory; and `rmdir` needs no access to the `work/work` that overlayfs
/// leaves with mode 000, where a walk of it fails and access must first be
/// granted. False, with whatever it removed gone, at the first thing that is
/// not that layout (anything left in `upper`): the caller removes the rest.
fn remove_emptied_layout(dir: &Path) -> bool {
    // A link is not followed: it is removed whole, as itself.
    if !std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir()) {
        return false;
    }
    let gone = |r: std::io::Result<()>| r.is_ok() || r.is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound);
    ["stdout", "stderr"]
        .iter()
        .all(|f| gone(std::fs::remove_file(dir.join(f))))
        && ["upper", "work/work", "work"]
            .iter()
            .all(|d| gone(std::fs::remove_dir(dir.join(d))))
        && gone(std::fs::remove_file(dir.join(RETIRED_JOURNAL)))
        && gone(std::fs::remove_dir(dir))
}

/// Prefix of a capture that could not be removed and was set aside.
const UNREMOVABLE: &str = "unremovable-";

/// Remove a capture directory. One that cannot be removed (a tree deeper
/// than a walk can hold open, or whose paths pass PATH_MAX) is renamed aside
/// (`unremovable-<name>`, which no start looks at again) and its new path
/// returned, so that no start trips over it, or says it removed it.
fn remove_capture(dir: &Path) -> Option<PathBuf> {
    if remove_emptied_layout(dir) {
        return None;
    }
    if std::fs::remove_dir_all(dir).is_err() {
        // overlayfs leaves `work/work` with mode 000: root removes it anyway,
        // its owner must give itself access first.
        let _ = grant_owner_access(dir);
        let _ = std::fs::remove_dir_all(dir);
    }
    if std::fs::symlink_metadata(dir).is_err() {
        return None;
    }
    let name = dir.file_name()?.to_string_lossy();
    let aside = dir.with_file_name(format!("{UNREMOVABLE}{name}"));
    std::fs::rename(dir, &aside).ok().map(|()| aside)
}

fn grant_owner_access(dir: &Path) -> std::io::Result<()> {
    let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
        return Ok(());
    };
    match beneath::Dir::root(parent).and_then(|p| p.dir(Path::new(name))) {
        Ok(d) => grant_owner_access_at(&d),
        Err(_) => Ok(()),
    }
}

/// [`grant_owner_access`] on an open directory: only our own directories,
/// each reached from its parent's descriptor and never through a link
/// ([`beneath::Dir::dir`]), and changed through its own descriptor, so
/// nothing swapped in meanwhile redirects a `chmod`.
fn grant_owner_access_at(d: &beneath::Dir) -> std::io::Result<()> {
    // The descriptor's own inode (an O_PATH descriptor takes no fchmod).
    let own = format!("/proc/self/fd/{}", d.fd());
    if std::fs::metadata(&own)?.uid() != nix::unistd::geteuid().as_raw() {
        return Ok(());
    }
    std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o700))?;
    for name in d.names()? {
        if let Ok(child) = d.dir(Path::new(&name)) {
            let _ = grant_owner_access_at(&child);
        }
    }
    Ok(())
}

/// At start: finish commits whose launcher died after writing the journal, and
/// discard captures whose launcher died before it. Live captures are locked.
pub fn recover(state: &Path) -> Vec<String> {
    let mut report = Vec::new();
    let Ok(rd) = std::fs::read_dir(overlays_dir(state)) else {
        return report;
    };
    for e in rd.flatten() {
        // Another launcher's capture, being made or in use (its lock may not
        // be taken yet): not ours to touch. Nor one set aside.
        if maker_alive(&e.file_name()) || e.file_name().to_string_lossy().starts_with(UNREMOVABLE) {
            continue;
        }
        // A capture beside its workspace is listed here as a symlink to it.
        let link = e.file_type().is_ok_and(|t| t.is_symlink()).then(|| e.path());
        let dir = match &link {
            Some(l) => match std::fs::read_link(l) {
                // Only a capture of ours beside a workspace: a link to
                // anywhere else is not followed into (what recovery does to a
                // capture, it must never do to another directory).
                Ok(target) if is_capture_beside_workspace(&target) => target,
                // Its capture is gone (or was never made): nothing to recover.
                _ => {
                    let _ = std::fs::remove_file(l);
                    continue;
                }
            },
            None => e.path(),
        };
        // The lock is the capture directory's own (an older launcher's, its `lock` file).
        let lock_file = match dir.join(LOCK).exists() {
            true => dir.join(LOCK),
            false => dir.clone(),
        };
        let Ok(file) = std::fs::File::open(&lock_file) else {
            continue;
        };
        let Some(_lock) = lock_exclusive(file, false) else {
            continue; // a running launcher owns it
        };
        match std::fs::read(dir.join(JOURNAL))
            .ok()
            .and_then(|b| serde_json::from_slice::<Journal>(&b).ok())
        {
            Some(j) => match apply(&dir, &j) {
                Ok(()) => {
                    report.push(format!("finished an interrupted commit into {}", j.workspace.display()));
                    cleanup(&dir, &j.workspace, j.has_removals());
                    if let Some(l) = &link {
                        let _ = std::fs::remove_file(l);
                    }
                }
                Err(e) => report.push(format!(
                    "could not finish an interrupted commit ({e}); left in {}",
                    dir.display()
                )),
            },
            None => {
                let aside = remove_capture(&dir);
                if let Some(l) = &link {
                    let _ = std::fs::remove_file(l);
                }
                // No journal: the run never began a commit, or its commit was a
                // single rename that either happened or did not; nothing is pending.
                report.push(match aside {
                    None => "discarded the capture of an interrupted run (no commit of it was pending)".into(),
                    Some(p) => format!(
                        "could not remove the capture of an interrupted run (no commit of it was pending); set aside as {}: remove it by hand",
                        p.display()
                    ),
                });
            }
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::{only_empty_skeleton, preview_digest, retire_skeleton, spares_dir, take_spare, SPARES};
    use std::path::Path;

    fn skeleton(at: &Path) {
        for d in [at.to_path_buf(), at.join("upper"), at.join("work")] {
            std::fs::create_dir(&d).unwrap();
            // The modes a new capture gets, whatever this test's umask.
            let mode = 0o777 & !super::process_umask();
            let mode = if d == at { 0o700 } else { mode };
            std::fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
        }
    }

    /// Empty skeletons go back as spares (as many as there are places), are
    /// taken by the next captures, and anything else is removed.
    #[test]
    fn only_empty_skeletons_become_spares_and_spares_are_taken() {
        let state = tempfile::tempdir().unwrap();
        let spares = spares_dir(state.path());
        for i in 0..SPARES + 1 {
            let dir = state.path().join(format!("c{i}"));
            skeleton(&dir);
            assert!(only_empty_skeleton(&dir));
            retire_skeleton(&dir, Some(&spares));
            assert!(!dir.exists(), "retired: kept or removed");
        }
        assert_eq!(
            std::fs::read_dir(&spares).unwrap().count(),
            SPARES,
            "no more than {SPARES} kept"
        );
        let taken = state.path().join("new");
        assert!(take_spare(&spares, &taken));
        assert!(only_empty_skeleton(&taken));
        assert_eq!(std::fs::read_dir(&spares).unwrap().count(), SPARES - 1);

        // Not empty, an entry more, an overlay's attribute, another mode:
        // removed, never kept.
        let not_spare = |name: &str, spoil: &dyn Fn(&Path)| {
            let dir = state.path().join(name);
            skeleton(&dir);
            spoil(&dir);
            assert!(!only_empty_skeleton(&dir), "{name}");
            retire_skeleton(&dir, Some(&spares));
            assert!(!dir.exists(), "{name}: removed");
            assert_eq!(
                std::fs::read_dir(&spares).unwrap().count(),
                SPARES - 1,
                "{name}: not kept"
            );
        };
        not_spare("a-file", &|d| std::fs::write(d.join("upper/left"), "x").unwrap());
        not_spare("a-dir", &|d| std::fs::create_dir(d.join("work/work")).unwrap());
        not_spare("an-entry", &|d| std::fs::write(d.join("stdout"), "").unwrap());
        not_spare("a-mode", &|d| {
            let other = (0o777 & !super::process_umask()) ^ 0o001;
            std::fs::set_permissions(d.join("upper"), std::os::unix::fs::PermissionsExt::from_mode(other)).unwrap()
        });
        not_spare("an-open-top", &|d| {
            std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap()
        });
        let with_xattr = state.path().join("xattr-probe");
        std::fs::create_dir(&with_xattr).unwrap();
        let set = |p: &Path| {
            let c = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(p.as_os_str())).unwrap();
            // SAFETY: setxattr with NUL-terminated name and path and a one-byte value.
            unsafe { libc::setxattr(c.as_ptr(), c"user.overlay.opaque".as_ptr(), c"y".as_ptr().cast(), 1, 0) == 0 }
        };
        if set(&with_xattr) {
            not_spare("an-xattr", &|d| assert!(set(&d.join("upper"))));
        } else {
            eprintln!("no user extended attributes on this filesystem: overlays cannot leave any either");
        }
    }

    /// What sits among the spares is checked once taken, as if someone else
    /// could write the state directory: a link to a directory with a planted
    /// file is not followed, and is not taken; nor is anything from a spares
    /// directory others can enter.
    #[test]
    fn a_planted_spare_is_never_taken() {
        let state = tempfile::tempdir().unwrap();
        let spares = spares_dir(state.path());
        std::fs::create_dir(&spares).unwrap();
        std::fs::set_permissions(&spares, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
        let planted = state.path().join("planted");
        skeleton(&planted);
        std::fs::write(planted.join("upper/hook"), "x").unwrap();
        std::os::unix::fs::symlink(&planted, spares.join("0")).unwrap();
        let taken = state.path().join("new");
        assert!(!take_spare(&spares, &taken));
        assert!(
            std::fs::symlink_metadata(&taken).is_err(),
            "nothing left in the capture's place"
        );
        assert_eq!(
            std::fs::read_to_string(planted.join("upper/hook")).unwrap(),
            "x",
            "not followed"
        );

        // A real, empty skeleton, but in a spares directory others can enter.
        skeleton(&spares.join("1"));
        std::fs::set_permissions(&spares, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        assert!(!take_spare(&spares, &taken));
        assert!(spares.join("1").exists(), "left where it was");
    }

    /// Access is granted back to our own directories in the tree (overlayfs
    /// leaves `work/work` at mode 000), never through a link out of it.
    #[test]
    fn granting_access_stays_in_the_tree() {
        use std::os::unix::fs::PermissionsExt;
        let root = tempfile::tempdir().unwrap();
        let tree = root.path().join("capture");
        std::fs::create_dir_all(tree.join("work/work/inner")).unwrap();
        let outside = root.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o751)).unwrap();
        std::os::unix::fs::symlink(&outside, tree.join("work/link")).unwrap();
        std::fs::set_permissions(tree.join("work/work"), std::fs::Permissions::from_mode(0o000)).unwrap();
        super::grant_owner_access(&tree).unwrap();
        let mode = |p: &Path| std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(&tree.join("work/work")), 0o700);
        assert_eq!(mode(&tree.join("work/work/inner")), 0o700);
        assert_eq!(mode(&outside), 0o751, "not followed out of the tree");
        std::fs::remove_dir_all(&tree).unwrap();
    }

    /// A preview kept before the exit code left its file keeps its digest
    /// (its approval binds it): the bytes hashed are the same. The value is
    /// that earlier digest of a preview with an empty upper layer, stdout
    /// `out`, stderr `err` and an `exit` file holding `3`.
    #[test]
    fn the_exit_code_hashes_as_its_file_did() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("upper")).unwrap();
        std::fs::write(d.path().join("stdout"), "out").unwrap();
        std::fs::write(d.path().join("stderr"), "err").unwrap();
        assert_eq!(
            preview_digest(d.path(), 3).unwrap(),
            "sha256:c568cbd406af01f61d9e02c6cde360c50f3a9d8838967d255db802363be046a3"
        );
        assert_ne!(
            preview_digest(d.path(), 0).unwrap(),
            preview_digest(d.path(), 3).unwrap()
        );
    }

    /// A preview whose run wrote `files` (new files, each in the upper layer).
    fn preview_writing(state: &Path, ws: &Path, files: &[&str]) -> super::Preview {
        let capture = super::Capture::create(state, ws).unwrap();
        for f in files {
            std::fs::write(capture.upper().join(f), f.as_bytes()).unwrap();
        }
        drop(capture.output_files().unwrap());
        let globs = || crate::policy::Policy::embedded_default().path_globs();
        capture.keep_as_preview(state, &globs, 0).unwrap()
    }

    fn owner() -> super::LandingOwner {
        super::LandingOwner {
            action: "apr_test".into(),
            run: "run_test".into(),
        }
    }

    /// The store's record of a resume's start is synced only for a landing
    /// that writes a durable journal (more than one rename), and then before
    /// the journal exists and before anything lands; a landing of one rename
    /// needs no sync.
    #[test]
    fn a_landing_syncs_the_start_only_before_a_durable_journal() {
        let globs = || crate::policy::Policy::embedded_default().path_globs();
        for files in [&["one"][..], &["one", "two", "three"][..]] {
            let state = tempfile::tempdir().unwrap();
            let ws = tempfile::tempdir().unwrap();
            let preview = preview_writing(state.path(), ws.path(), files);
            let calls = std::cell::Cell::new(0);
            let sync = || {
                calls.set(calls.get() + 1);
                assert!(
                    !super::landing_begun(&preview.dir),
                    "synced before the journal is written"
                );
                for f in files {
                    assert!(!ws.path().join(f).exists(), "synced before anything lands");
                }
                Ok(())
            };
            let (_, landed) =
                super::land_preview(state.path(), &owner(), &preview.dir, ws.path(), &globs, false, &sync).unwrap();
            landed.done();
            for f in files {
                assert_eq!(std::fs::read(ws.path().join(f)).unwrap(), f.as_bytes(), "{f} landed");
            }
            assert_eq!(calls.get(), usize::from(files.len() > 1), "syncs for {files:?}");
        }
    }

    /// If the start cannot be made durable, the landing does not begin:
    /// nothing lands and no journal says it began.
    #[test]
    fn a_start_that_cannot_be_synced_lands_nothing() {
        let globs = || crate::policy::Policy::embedded_default().path_globs();
        let state = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let preview = preview_writing(state.path(), ws.path(), &["one", "two"]);
        let sync = || Err(std::io::Error::other("the disk is gone"));
        let landed = super::land_preview(state.path(), &owner(), &preview.dir, ws.path(), &globs, false, &sync);
        let e = landed.err().expect("refused");
        assert!(e.to_string().contains("the disk is gone"), "{e}");
        assert!(!ws.path().join("one").exists() && !ws.path().join("two").exists());
        assert!(!super::landing_begun(&preview.dir));
        assert!(preview.dir.join("upper/one").exists(), "the preview is kept");
    }
}
