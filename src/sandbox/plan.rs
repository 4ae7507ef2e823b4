//! The sandbox plan: everything `apply` will do, decided up front, as data.
//!
//! Like bubblewrap's command line, the plan is mechanism without policy: an
//! ordered list of mounts, the Landlock rules, the seccomp rules, the
//! environment, limits and id maps. Building it is a pure function of the
//! effective policy and a few facts about the host gathered beforehand
//! ([`HostFacts`]), so every choice here is unit-testable without a kernel, and
//! `apply` has no decisions left to make.

use crate::policy::{is_dangerous_env, Policy, Profile};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// One filesystem step, applied in order inside the new mount namespace.
/// Every destination is a path inside the sandbox; every source a host path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Mount {
    /// A fresh tmpfs (`mode` octal, `size_mb`).
    Tmpfs { dst: PathBuf, mode: u32, size_mb: u64 },
    /// Bind a host path (file or directory), recursively; read-only unless `writable`.
    Bind { src: PathBuf, dst: PathBuf, writable: bool },
    /// A fresh procfs for the sandbox's own pid namespace.
    Proc { dst: PathBuf },
    /// A symbolic link.
    Symlink { target: PathBuf, dst: PathBuf },
    /// Hide a file: an empty, read-only file is bound over it.
    MaskFile { dst: PathBuf },
    /// Hide a directory: an empty, read-only tmpfs is mounted over it.
    MaskDir { dst: PathBuf },
    /// Make an already visible path read-only (a protected path inside the workspace).
    ReadOnly { dst: PathBuf },
    /// Make a path a mount point of itself, contents unchanged and as
    /// writable as before: a mount point cannot be renamed or removed, so a
    /// protected path's parent stays where its protection is.
    Pin { dst: PathBuf },
    /// The workspace as an overlay: reads from the real workspace (`dst`), every
    /// write captured in `upper` (host paths; `work` is overlayfs' scratch).
    Overlay {
        dst: PathBuf,
        upper: PathBuf,
        work: PathBuf,
    },
}

/// Landlock rights classes for a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Access {
    /// Read files, list directories, execute.
    Read,
    /// Everything Landlock can grant on a tree.
    ReadWrite,
    /// Read and write an existing file (device nodes), no creation.
    ReadWriteFile,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LandlockPlan {
    /// The ABI to enforce exactly (hard requirement, never best effort).
    pub abi: u8,
    pub rules: Vec<(PathBuf, Access)>,
    /// Scope abstract unix sockets and signals to the sandbox (ABI 6+).
    pub scoped: bool,
}

/// A resource limit: (name, value) with soft = hard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Rlimit {
    pub resource: RlimitKind,
    /// The soft limit: what the policy sets.
    pub value: u64,
    /// The hard limit: the same, except for CPU time, where the kernel sends
    /// SIGXCPU at the soft limit (a death the shell names) and kills at this.
    pub hard: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RlimitKind {
    Cpu,
    AddressSpace,
    Processes,
    FileSize,
    OpenFiles,
    Core,
}

/// What an entry about to be made in the workspace is, for [`CreateGuard`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Making {
    /// A new directory (`mkdir`).
    Directory,
    /// A new file, device, FIFO, symlink or hard link.
    Other,
    /// An existing directory renamed to this name: it brings its contents.
    MovedDirectory,
}

/// The names a run may not make in a bind-mounted writable workspace, judged
/// while it runs (see `sandbox::apply`'s guard), before they exist.
///
/// Protected paths that exist are mounts (read-only, masked, overlays); these
/// rules are for the ones that do not exist yet, which no mount can cover in
/// a workspace shared with the host: made, they would exist on the host for
/// as long as the run lasts, for an editor's or the harness's own `git
/// status` to obey. The check after the run still moves aside anything that
/// got past (another sandbox in the same workspace, say).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CreateGuard {
    /// The workspace as the sandbox sees it (at its own path).
    pub workspace: PathBuf,
    /// The git directories the plan knows (absolute), each an overlay of
    /// its own whose control files the check of what lands refuses: the
    /// guard's rule for git directories a run did not make is for the
    /// others (see `sandbox::apply`'s guard).
    pub known_git_dirs: Vec<PathBuf>,
    /// A `HEAD` was at the top of the workspace when the run was planned:
    /// then `objects`, `refs` and `config` beside it would complete a git
    /// directory there too.
    pub head_at_top: bool,
    /// A `.git` was at the top of the workspace when the run was planned
    /// (its git directory is an overlay or read-only). Where there was none,
    /// the run may not make one: an index there naming a repository the run
    /// made below would have the host's `git status` recurse into it and
    /// obey that repository's `config`, while the run lasts.
    pub repo_at_top: bool,
    /// Paths in the workspace git reads on the way to a file a git
    /// configuration includes (`workspace::gitconfig`), absolute: none may be
    /// made, nor anything but an empty directory above one.
    pub include_paths: Vec<PathBuf>,
    /// Work trees of the repositories below the top (absolute), with
    /// whether a `HEAD` was at their top: with a broken `.git`, git takes a
    /// work tree holding `HEAD`, `objects` and `refs` for a git directory and
    /// obeys the `config` beside them. As at the workspace's top: no `HEAD`
    /// may be made there, or, where one was (a file the project tracks),
    /// none of the others.
    pub nested_trees: Vec<(PathBuf, bool)>,
}

/// Files git reads in a work tree whenever it looks at it (`git status`,
/// `git log`): a FIFO by one of these names hangs the person's git (and an
/// editor's, which runs one every few seconds) until someone writes to it.
/// (Symlinks are no matter: git opens these without following one.)
pub const READ_BY_GIT_IN_WORK_TREE: [&str; 4] = [".gitignore", ".gitattributes", ".mailmap", ".gitmodules"];

/// Whether a FIFO may not take `name` in a directory (`in_git_dir`: one
/// that is, or lies in, a git directory: a `.git`, a `*.git` or a folder
/// holding `HEAD`): by a name git reads in a work tree (see
/// [`READ_BY_GIT_IN_WORK_TREE`]), as a `.git` or a `HEAD` (git reads
/// `X/.git/HEAD` of every untracked folder `X` it looks at, and a `.git`
/// file for where it points), or anywhere in a git directory.
pub fn fifo_refused(name: &[u8], in_git_dir: bool) -> Option<&'static str> {
    (in_git_dir || name == b".git" || name == b"HEAD" || READ_BY_GIT_IN_WORK_TREE.iter().any(|n| n.as_bytes() == name))
        .then_some("a FIFO where git reads (`.gitignore`, `.gitattributes`, `.mailmap`, `.gitmodules`, a `.git`, a `HEAD`, anything in a git directory) hangs the person's git")
}

impl CreateGuard {
    /// Why `name`, about to be made in a directory, is refused; `None` if it
    /// may be made. `parent` gives that directory's path in the sandbox (or
    /// `None` when it cannot be told, which refuses), and is asked only for
    /// the few names a rule is about. Pure: the caller resolves the
    /// directory itself, in the process that will make the entry.
    pub fn refuses(
        &self,
        name: &std::ffi::OsStr,
        making: Making,
        parent: impl FnOnce() -> Option<PathBuf>,
    ) -> Option<&'static str> {
        use std::os::unix::ffi::OsStrExt;
        let n = name.as_bytes();
        let env = crate::policy::is_env_secret(&name.to_string_lossy());
        let control = crate::policy::GIT_CONTROL.iter().any(|c| n == c.as_bytes());
        let git_dir_part = matches!(n, b"HEAD" | b"objects" | b"refs" | b"config" | b"commondir");
        let included = self.include_paths.iter().any(|p| {
            p.strip_prefix(&self.workspace)
                .is_ok_and(|r| r.iter().any(|c| c.as_bytes() == n))
        });
        if !(env || control || git_dir_part || included || n == b".tether" || n == b".git") {
            return None;
        }
        let Some(parent) = parent() else {
            return Some("where it would be made could not be told, and the name is one the workspace protects");
        };
        if !parent.starts_with(&self.workspace) {
            return None;
        }
        if env {
            return Some("`.env*` files hold secrets and are protected (templates such as `.env.example` are not)");
        }
        if included {
            let at = parent.join(name);
            if self.include_paths.contains(&at) {
                return Some(
                    "a git configuration includes this path, or names it as the repository's hooks (`include.path`, `core.hooksPath`): git would obey what the run put there",
                );
            }
            // Above one, only an empty directory: a file, a symlink or a
            // directory moved in would decide what git finds below.
            if making != Making::Directory && self.include_paths.iter().any(|p| p.starts_with(&at)) {
                return Some("a git configuration includes a path below this one, or names one as the repository's hooks (`include.path`, `core.hooksPath`): git would obey what the run put there");
            }
        }
        if n == b".tether" && parent == self.workspace {
            return Some("`.tether` is protected");
        }
        // The workspace's own repository, which the host's git at the top
        // obeys. Nested repositories a run makes are its own business, as
        // outside (the index's gitlinks are read-only mounts already).
        let top_git = self.workspace.join(".git");
        // (So nothing can be made in it either: it never exists.)
        if !self.repo_at_top && n == b".git" && parent == self.workspace {
            return Some(
                "the workspace had no repository at its top, and a run may not make one there: the host's git would obey it (run `git init` outside)",
            );
        }
        if n == b".git" && making != Making::Directory && parent == self.workspace {
            return Some(
                "a `.git` that is a file or a symlink, or a directory moved into place, makes git obey a configuration nobody checked",
            );
        }
        // Below the top too, a `.git` is made, never moved in: a git
        // directory this run made and configured, moved over a repository
        // whose gitlink another run landed meanwhile, would be obeyed by the
        // host's `git status` while this run lasts (git makes its own with
        // `mkdir`).
        if n == b".git" && making == Making::MovedDirectory {
            return Some(
                "a directory moved into place as a `.git` makes git obey a configuration nobody checked (git makes a `.git` itself)",
            );
        }
        if control && parent == top_git {
            return Some("`.git/config`, `.git/config.worktree`, `.git/hooks` and `.git/commondir` are protected");
        }
        // On the way to a nested work tree (below the top): git looking for
        // the repository of a file in that tree walks up through these when
        // the tree's own `.git` is broken or gone (`HEAD` overwritten, a
        // `.git` symlink removed), and would obey a repository made there.
        let on_the_way = parent != self.workspace
            && self
                .nested_trees
                .iter()
                .any(|(t, _)| t.starts_with(&parent) && *t != parent);
        if on_the_way && (n == b".git" || n == b"HEAD") {
            return Some(
                "a repository below this folder would be taken over by a repository made here (git walks up from a broken `.git`)",
            );
        }
        if n == b".git" && self.nested_trees.iter().any(|(t, _)| *t == parent) {
            return Some(
                "a repository below the top already has its `.git` here: another one (a file or symlink naming a git directory of the run's making) would have git obey a configuration nobody checked",
            );
        }
        if let Some((_, head)) = self.nested_trees.iter().find(|(t, _)| *t == parent) {
            if (!head && n == b"HEAD") || (*head && git_dir_part && n != b"HEAD") {
                return Some(
                    "`HEAD` at the top of a repository's work tree, with `objects`, `refs` and `config` beside it, makes git take the work tree for a git directory and obey it",
                );
            }
        }
        // git takes any directory with `HEAD`, `objects` and `refs` for a git
        // directory: at the top, the host's git would obey the workspace
        // itself (its `config`'s fsmonitor, say) where there is no `.git`.
        if parent == self.workspace && (n == b"HEAD" || (self.head_at_top && git_dir_part)) {
            return Some(
                "`HEAD` at the top of the workspace (with `objects`, `refs` and `config` beside it) makes the workspace a git directory the host's git obeys",
            );
        }
        None
    }
}

/// The whole plan.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    /// The program and its arguments (`bash -c SCRIPT` for scripts).
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Directories searched for `argv[0]` when it has no `/`.
    pub path: Vec<String>,
    pub cwd: PathBuf,
    pub workspace: PathBuf,
    pub mounts: Vec<Mount>,
    pub landlock: LandlockPlan,
    pub rlimits: Vec<Rlimit>,
    /// `false`: a fresh network namespace with only loopback.
    pub host_network: bool,
    /// uid/gid inside the sandbox and the host ids they map to.
    pub inner_uid: u32,
    pub inner_gid: u32,
    pub outer_uid: u32,
    pub outer_gid: u32,
    pub hostname: String,
    pub timeout_ms: Option<u64>,
    /// Process limit for the whole sandbox (a pids cgroup when running as root).
    pub pids_max: u64,
    /// The sandbox's processes belong to the kernel's root user, which
    /// RLIMIT_NPROC does not bind: `pids_max` is enforced by a pids cgroup.
    pub pids_cgroup: bool,
    /// (device, inode) of each mount's target (and source) inside the
    /// workspace, as planned: init mounts only onto what it finds there
    /// still (another sandbox in the same workspace could rename or swap it
    /// meanwhile).
    #[serde(skip)]
    pub workspace_identities: Vec<(PathBuf, (u64, u64))>,
    /// Set for a writable workspace bound from the host (no overlay of the
    /// whole workspace): the names no run may make there (see [`CreateGuard`]).
    pub create_guard: Option<CreateGuard>,
    /// Work trees of repositories below the top that no index names but
    /// that were there before the run (relative): the check after the run
    /// reads the layout with them.
    #[serde(skip)]
    pub found_trees: Vec<PathBuf>,
    /// Tool directories (PATH entries, virtualenv prefixes) not shown, and
    /// why: [`HostFacts::tool_dirs_not_shown`] and those the plan leaves out.
    #[serde(skip)]
    pub not_shown: Vec<(String, String)>,
}

impl Mount {
    /// The paths this mount acts on: its target, and a bind's source.
    pub fn paths(&self) -> impl Iterator<Item = &Path> {
        let (dst, src): (&Path, Option<&Path>) = match self {
            Mount::Tmpfs { dst, .. }
            | Mount::Proc { dst }
            | Mount::Symlink { dst, .. }
            | Mount::MaskFile { dst }
            | Mount::MaskDir { dst }
            | Mount::ReadOnly { dst }
            | Mount::Pin { dst }
            | Mount::Overlay { dst, .. } => (dst, None),
            Mount::Bind { src, dst, .. } => (dst, Some(src)),
        };
        std::iter::once(dst).chain(src)
    }
}

/// (device, inode) of what `mounts` act on inside `workspace` (not the
/// workspace itself), symlinks inside followed as init will. Not below an
/// overlay: what init finds there is the overlay's own file (its own device),
/// the overlay's mount point having been checked.
fn workspace_identities(mounts: &[Mount], workspace: &Path) -> Vec<(PathBuf, (u64, u64))> {
    use std::os::unix::fs::MetadataExt;
    let overlays: Vec<&Path> = mounts
        .iter()
        .filter_map(|m| match m {
            Mount::Overlay { dst, .. } => Some(dst.as_path()),
            _ => None,
        })
        .collect();
    let mut out: Vec<(PathBuf, (u64, u64))> = Vec::new();
    for p in mounts.iter().flat_map(Mount::paths) {
        let below_overlay = overlays.iter().any(|o| p.starts_with(o) && p != *o);
        if p.starts_with(workspace) && p != workspace && !below_overlay && !out.iter().any(|(q, _)| q == p) {
            if let Ok(m) = std::fs::metadata(p) {
                out.push((p.to_path_buf(), (m.dev(), m.ino())));
            }
        }
    }
    out
}

/// Facts about the host, read before planning (cheap `stat`s and env).
#[derive(Debug, Clone, Default)]
pub struct HostFacts {
    /// The launcher's effective uid/gid.
    pub uid: u32,
    pub gid: u32,
    /// The workspace directory's owner (used when running as root).
    pub workspace_owner: (u32, u32),
    /// Top-level entries of `/` that are symlinks (merged /usr): name → target.
    pub root_symlinks: Vec<(String, PathBuf)>,
    /// Top-level directories of `/` that exist among the system ones we bind.
    pub root_dirs: Vec<String>,
    /// The environment tether-exec was started with.
    pub env: Vec<(String, String)>,
    /// PATH entries that are directories outside the system tree (resolved).
    pub extra_tool_dirs: Vec<PathBuf>,
    /// Tool directories not shown, and why (PATH entries reached through a
    /// link where sandboxed commands write or whose links loop, by their
    /// text; a directory the workspace's owner cannot reach or that holds the
    /// approver's key, from PATH or a virtualenv, by its real path): said in
    /// the receipt, not silently left out.
    pub tool_dirs_not_shown: Vec<(String, String)>,
    /// Interpreter prefixes of workspace virtualenvs (`home =` in pyvenv.cfg).
    pub venv_prefixes: Vec<PathBuf>,
    /// Secret-looking files in the workspace, absolute.
    pub secret_files: Vec<PathBuf>,
    /// The `.env*` secrets found by the same scan, for the check after the
    /// run (not planned: handed back by the caller).
    pub env_secrets: crate::workspace::EnvSecrets,
    /// Protected paths in the workspace that exist: (path, is_dir).
    pub protected_present: Vec<(PathBuf, bool)>,
    /// Every directory from `.git` down to each git directory (submodules',
    /// linked worktrees'): pinned in place (`workspace::GitLayout::pins`).
    pub protected_parents: Vec<PathBuf>,
    /// A git index of the workspace (its own, a nested or an enclosing
    /// repository's; the workspace itself past the most indexes read) that
    /// could not be read with confidence: the repositories it names (which
    /// git obeys) are unknown.
    pub git_index_unreadable: Option<PathBuf>,
    /// A control file of a git directory of the workspace with other hard
    /// links (`workspace::linked_control_file`).
    pub git_control_linked: Option<PathBuf>,
    /// The workspace has a `HEAD` at its top (see [`CreateGuard`]).
    pub head_at_top: bool,
    /// The workspace has a `.git` at its top (a repository, a worktree's or
    /// submodule's `.git` file, a symlink to one).
    pub repo_at_top: bool,
    /// Policy files that sit inside the workspace.
    pub policy_files_in_workspace: Vec<PathBuf>,
    /// Work trees of repositories below the top that no index names but
    /// that were there before the run (`workspace::git_layout_with`), relative.
    pub found_trees: Vec<PathBuf>,
    /// Work trees of every repository below the top, absolute, with whether
    /// a `HEAD` is at their top (see [`CreateGuard::nested_trees`]).
    pub nested_trees: Vec<(PathBuf, bool)>,
    /// What the git configurations read for the workspace include from it
    /// (`workspace::gitconfig`).
    pub git_includes: crate::workspace::gitconfig::GitIncludes,
    /// Why those configurations could not be read (then a writable run is refused).
    pub git_includes_unreadable: Option<String>,
    /// Readable-by-owner-only secrets of the system (/etc/shadow...), masked when running as root.
    pub system_secrets: Vec<PathBuf>,
    /// Directories of such secrets (/etc/ssl/private...), hidden likewise.
    pub system_secret_dirs: Vec<PathBuf>,
    /// Landlock ABI the kernel offers (0: none).
    pub landlock_abi: u8,
    /// CPUs this launcher may run on (at least 1).
    pub cpus: u64,
    /// uid 0 here is the kernel's root user (host uid 0), not the root of a
    /// nested user namespace mapped to an ordinary host uid (a rootless
    /// container, `unshare -r`).
    pub root_is_host_root: bool,
    /// Capture directories (upper, work) prepared for an overlay workspace.
    pub overlay: Option<(PathBuf, PathBuf)>,
    /// Git directories mounted as overlays of their own in a bind-mounted
    /// workspace: (directory, upper, work). See [`Mount::Overlay`].
    pub git_overlays: Vec<(PathBuf, PathBuf, PathBuf)>,
    /// Trees of `writable_trees` that exist as real directories (no symlink on
    /// the way: a symlinked tree must never become a write grant elsewhere).
    pub writable_trees_present: Vec<String>,
    /// tether-exec's own directories outside the state directory that exist
    /// (captures beside the workspace): hidden wherever a bind would show them.
    pub launcher_dirs: Vec<PathBuf>,
    /// The approver's key file as it really is (links resolved), when it
    /// exists: hidden wherever a mount would show it.
    pub approver_key: Option<PathBuf>,
    /// Each of the policy's `read_only_paths` whose real path (links
    /// resolved) differs from it, with that real path: the bind is made
    /// there, and the name links to it.
    pub read_only_reals: Vec<(PathBuf, ResolvedPath)>,
    /// The links followed to resolve those and the PATH directories, as
    /// (where, target as written): made again inside where the host's are
    /// not shown, so that the paths through them (`/opt/jdk` ->
    /// `/srv/jdks/current` -> `21`, sdkman's `candidates/java/current`) lead
    /// where they do on the host.
    pub followed_links: Vec<(PathBuf, PathBuf)>,
    /// The workspace's git layout these facts were read from: the check of
    /// the protected paths after the run starts from the same one (see
    /// `workspace::snapshot_protected`), not from a second reading.
    pub git_layout: crate::workspace::GitLayout,
}

/// Where a path named through links really is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResolvedPath {
    Real(PathBuf),
    /// Its way passes this link where sandboxed commands write (`by`: the
    /// workspace, or another), which they can point anywhere between two
    /// runs: not followed.
    ThroughWorkspace {
        link: PathBuf,
        by: crate::workspace::WrittenBy,
    },
    /// It does not exist, cannot be reached, or its links loop.
    Missing,
}

/// Environment names tether passes into the sandbox (its allowlist).
const ENV_ALLOW: &[&str] = &[
    "PATH",
    "LANG",
    "LANGUAGE",
    "TERM",
    "COLORTERM",
    "NO_COLOR",
    "TZ",
    "USER",
    "LOGNAME",
    "SHELL",
    "TMPDIR",
    "VIRTUAL_ENV",
    "CI",
    "PYTHONPATH",
    "PYTHONIOENCODING",
];

/// System directories bound read-only when present.
pub const SYSTEM_DIRS: &[&str] = &["usr", "etc", "opt", "bin", "sbin", "lib", "lib32", "lib64", "libx32"];

/// Whether `target` (a real host path) shows inside the sandbox, at its own
/// path, through one of the bound paths `shown` (each bound at its real path).
fn shows(shown: &[PathBuf], target: &Path) -> bool {
    shown.iter().any(|p| target.starts_with(p))
}

/// `p` (absolute) with `.` and `..` taken away as written, the way the
/// kernel takes them in a directory that holds no link.
fn lexically(p: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::Normal(n) => out.push(n),
            _ => {}
        }
    }
    out
}

/// The sandbox's own directory (`/tmp`, `/dev`, `/proc`) that would cover
/// a host path bound at `p`.
fn sandbox_own_dir(p: &Path) -> Option<&'static str> {
    ["/tmp", "/dev", "/proc"].into_iter().find(|d| p.starts_with(d))
}

/// What of the sandbox's procfs is made read-only when the command acts as
/// the host's root (those this kernel has).
pub const PROC_READ_ONLY: [&str; 4] = ["sys", "sysrq-trigger", "irq", "bus"];

/// Devices in the minimal /dev.
pub const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

/// Default limits when the policy says nothing.
pub const DEFAULT_PROCESSES: u64 = 4096;
pub const DEFAULT_OPEN_FILES: u64 = 4096;
pub const DEFAULT_MEMORY_MB: u64 = 16 * 1024;
/// CPU seconds per process, for each CPU the launcher may use: an hour of
/// the whole machine. The kernel sums a process's threads, so a per-process
/// hour would end a parallel test binary after minutes; this stops only a
/// runaway in a run with no timeout.
pub const DEFAULT_CPU_SECONDS_PER_CPU: u64 = 3600;
/// After SIGXCPU at the CPU limit, the seconds of CPU before SIGKILL.
pub const CPU_GRACE_SECONDS: u64 = 5;
/// Largest file a process may write: a backstop against one runaway file
/// filling the disk, above any build artefact or log a run makes.
pub const DEFAULT_FILE_SIZE_MB: u64 = 32 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("the kernel offers Landlock ABI {have}, but the policy requires at least ABI {need}; upgrade the kernel or lower landlock_min_abi")]
    LandlockTooOld { have: u8, need: u8 },
    #[error("network = true shares the host's network namespace, and with it the host's abstract unix sockets (a display server's, a session bus's), which only Landlock ABI 6 (Linux 6.12) keeps the command from; this kernel offers ABI {have}, so nothing ran. Use network = false, or a newer kernel")]
    NetworkUnscoped { have: u8 },
    #[error("the state directory {0} is inside the workspace, where the sandboxed command could reach it; choose a state directory outside the workspace (--state-dir)")]
    StateInWorkspace(PathBuf),
    #[error("the workspace {0} is a system directory; choose a project directory")]
    SystemWorkspace(PathBuf),
    #[error("writable_globs entry `{0}` is not a directory glob (`DIR/**`): globs of other shapes need the overlay workspace, which this tether-exec does not have yet, and the kernel cannot enforce them otherwise; nothing ran. Use directory globs such as \"docs/**\"")]
    GlobNeedsOverlay(String),
    #[error("a git configuration of this workspace cannot be read for the files it includes ({0}), so a file it includes from the workspace, which git would obey, cannot be protected; a writable run is refused. Fix that line (`git config --list --show-origin` shows what git reads)")]
    GitConfigUnreadable(String),
    #[error("the git index {} cannot be read with confidence (a split index, offset tables, names git refuses, damage, or other hard links, through which a run could write it in place), so the repositories it names, whose config git obeys, cannot be protected; a writable run is refused. Rewrite it: `git update-index --no-split-index` (or `rm .git/index && git reset`); with other hard links, give it a name of its own (copy it, then rename the copy over it)", .0.display())]
    GitIndexUnreadable(PathBuf),
    #[error("{} has other hard links: a read-only mount covers one name, and through another in the workspace a run would write what git obeys (a hook, its config) in place; a writable run is refused. Give it a name of its own (copy it, then rename the copy over it), or make the other name a symlink", .0.display())]
    GitControlLinked(PathBuf),
    #[error("read_only_paths entry `{}` leads through {}, a link in {by}, which sandboxed commands can point anywhere between two runs; nothing ran. Name the real path it should lead to, without links where sandboxed commands write", named.display(), link.display())]
    ReadOnlyPathThroughWorkspace {
        named: PathBuf,
        link: PathBuf,
        by: crate::workspace::WrittenBy,
    },
    #[error("read_only_paths entry `{}` is in the workspace, which the sandbox shows as the profile says; nothing ran. To keep part of the workspace from being written, list it in `protected` (e.g. \"vendor/**\"), or narrow `writable_globs`", .0.display())]
    ReadOnlyPathInWorkspace(PathBuf),
    #[error("read_only_paths entry `{}` cannot be resolved (it does not exist, a directory on its way cannot be searched, or its links loop), so it cannot be shown; nothing ran. Create it or make it reachable, or take it out of the policy", .0.display())]
    ReadOnlyPathMissing(PathBuf),
    #[error("read_only_paths entry `{}` leads to {}, under {own}, which the sandbox has its own of: it would not be visible there, so nothing ran. Name a path whose real place is outside /tmp, /dev and /proc", named.display(), real.display())]
    ReadOnlyPathCovered {
        named: PathBuf,
        real: PathBuf,
        own: &'static str,
    },
}

/// The directory trees `writable_globs` allow, relative to the workspace
/// (`""` is the whole workspace), intersected across layers: a write must be
/// allowed by every layer. `None` when no layer restricts writes. Landlock
/// grants writes on trees, so only `DIR/**` globs can be enforced by the kernel.
pub fn writable_trees(policy: &Policy) -> Result<Option<Vec<String>>, PlanError> {
    let mut result: Option<Vec<String>> = None;
    for layer in &policy.layers {
        let Some(globs) = &layer.writable_globs else { continue };
        let mut trees = Vec::new();
        for g in globs {
            let dir = if g == "**" { Some("") } else { g.strip_suffix("/**") };
            match dir {
                Some(d) if !d.contains(['*', '?', '[', '{', '\\']) => trees.push(d.trim_end_matches('/').to_string()),
                _ => return Err(PlanError::GlobNeedsOverlay(g.clone())),
            }
        }
        let within =
            |inner: &str, outer: &str| outer.is_empty() || inner == outer || inner.starts_with(&format!("{outer}/"));
        result = Some(match result {
            None => trees,
            Some(prev) => {
                let mut both = Vec::new();
                for a in &prev {
                    for b in &trees {
                        if within(b, a) {
                            both.push(b.clone());
                        } else if within(a, b) {
                            both.push(a.clone());
                        }
                    }
                }
                both
            }
        });
    }
    Ok(result.map(|mut t| {
        t.sort();
        t.dedup();
        t
    }))
}

/// The sandbox's environment: tether's allowlist, `LC_*`, the policy's
/// pass-through names; `HOME` and `PWD` in the workspace; a default `PATH`.
pub fn environment(
    policy: &Policy,
    host_env: &[(String, String)],
    workspace: &Path,
    cwd: &Path,
) -> Vec<(String, String)> {
    let passthrough = policy.env_passthrough();
    let mut env: Vec<(String, String)> = host_env
        .iter()
        .filter(|(k, _)| {
            ENV_ALLOW.contains(&k.as_str()) || k.starts_with("LC_") || (passthrough.contains(k) && !is_dangerous_env(k))
        })
        .cloned()
        .collect();
    env.retain(|(k, _)| k != "HOME" && k != "PWD" && k != "PAGER");
    env.push(("HOME".into(), workspace.to_string_lossy().into_owned()));
    env.push(("PWD".into(), cwd.to_string_lossy().into_owned()));
    env.push(("PAGER".into(), "cat".into()));
    if !env.iter().any(|(k, _)| k == "PATH") {
        env.push(("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()));
    }
    env.sort();
    env
}

/// Directories shown from PATH and virtualenvs, at most.
const MAX_TOOL_DIRS: usize = 16;

/// Build the plan. Pure: every input is an argument.
pub fn build(
    policy: &Policy,
    facts: &HostFacts,
    workspace: &Path,
    cwd: &Path,
    argv: Vec<String>,
    state_dir: &Path,
) -> Result<Plan, PlanError> {
    if state_dir.starts_with(workspace) {
        return Err(PlanError::StateInWorkspace(state_dir.to_path_buf()));
    }
    if workspace == Path::new("/")
        || SYSTEM_DIRS
            .iter()
            .any(|d| workspace.starts_with(Path::new("/").join(d)))
    {
        return Err(PlanError::SystemWorkspace(workspace.to_path_buf()));
    }
    let need = policy.landlock_min_abi();
    if facts.landlock_abi < need {
        return Err(PlanError::LandlockTooOld {
            have: facts.landlock_abi,
            need,
        });
    }
    if policy.network() && facts.landlock_abi.min(crate::policy::doc_max_abi()) < 6 {
        return Err(PlanError::NetworkUnscoped {
            have: facts.landlock_abi,
        });
    }
    let writable = policy.profile() == Profile::WorkspaceWrite;
    if let (Some(index), true) = (&facts.git_index_unreadable, writable) {
        return Err(PlanError::GitIndexUnreadable(index.clone()));
    }
    if let (Some(file), true) = (&facts.git_control_linked, writable) {
        return Err(PlanError::GitControlLinked(file.clone()));
    }
    if let (Some(why), true) = (&facts.git_includes_unreadable, writable) {
        return Err(PlanError::GitConfigUnreadable(why.clone()));
    }
    let includes = &facts.git_includes;
    let mut mounts = Vec::new();

    // The system, read-only. Merged-/usr links are recreated as links.
    for (name, target) in &facts.root_symlinks {
        if SYSTEM_DIRS.contains(&name.as_str()) {
            mounts.push(Mount::Symlink {
                target: target.clone(),
                dst: Path::new("/").join(name),
            });
        }
    }
    for name in &facts.root_dirs {
        let p = Path::new("/").join(name);
        mounts.push(Mount::Bind {
            src: p.clone(),
            dst: p,
            writable: false,
        });
    }
    // Tools on PATH and virtualenv interpreters that live outside the system
    // tree; those left out are listed, with why.
    let mut extra: Vec<PathBuf> = Vec::new();
    let mut not_shown = facts.tool_dirs_not_shown.clone();
    // Outermost first, so that one inside a shown directory counts as shown.
    let mut candidates: Vec<&PathBuf> = facts.extra_tool_dirs.iter().chain(&facts.venv_prefixes).collect();
    candidates.sort_by(|a, b| a.components().count().cmp(&b.components().count()).then(a.cmp(b)));
    candidates.dedup();
    for d in candidates {
        let covered = d.starts_with(workspace)
            || extra.iter().any(|e| d.starts_with(e))
            || SYSTEM_DIRS.iter().any(|s| d.starts_with(Path::new("/").join(s)));
        let private = d.components().any(|c| {
            let c = c.as_os_str().to_string_lossy();
            matches!(
                c.as_ref(),
                ".ssh" | ".gnupg" | ".aws" | ".kube" | ".docker" | ".config" | ".netrc" | ".password-store"
            )
        });
        let why = if covered {
            continue;
        } else if private {
            "its path names a private directory (.ssh, .gnupg, .aws, .kube, .docker, .config, .netrc, .password-store)"
        } else if d.starts_with(state_dir) || state_dir.starts_with(d) {
            "it is, holds or lies in tether-exec's state directory"
        } else if extra.len() >= MAX_TOOL_DIRS {
            "past the 16 directories shown from PATH and virtualenvs"
        } else {
            extra.push(d.clone());
            continue;
        };
        let path = d.display().to_string();
        if !not_shown.iter().any(|(p, _)| *p == path) {
            not_shown.push((path, why.to_string()));
        }
    }
    for d in &extra {
        mounts.push(Mount::Bind {
            src: d.clone(),
            dst: d.clone(),
            writable: false,
        });
    }
    // Everything bound from the host but the workspace: the system, tool
    // directories, read-only paths.
    let mut shown: Vec<PathBuf> = facts.root_dirs.iter().map(|n| Path::new("/").join(n)).collect();
    shown.extend(extra.iter().cloned());
    // A read-only path named through a link is bound at its real path, where
    // the host's absolute links lead (a bind at the name would resolve them
    // in the sandbox's root, where their targets are not); its name becomes
    // a link to it, unless a bind shows the host's link there already.
    let mut named_links = Vec::new();
    for named in policy.read_only_paths() {
        let named = PathBuf::from(named);
        if named.starts_with(state_dir) {
            continue;
        }
        let real = match facts.read_only_reals.iter().find(|(n, _)| *n == named) {
            None => named.clone(),
            Some((_, ResolvedPath::Real(r))) => r.clone(),
            Some((_, ResolvedPath::ThroughWorkspace { link, by })) => {
                return Err(PlanError::ReadOnlyPathThroughWorkspace {
                    named,
                    link: link.clone(),
                    by: by.clone(),
                })
            }
            Some((_, ResolvedPath::Missing)) => return Err(PlanError::ReadOnlyPathMissing(named)),
        };
        if real.starts_with(state_dir) {
            continue;
        }
        if named.starts_with(workspace) || real.starts_with(workspace) {
            return Err(PlanError::ReadOnlyPathInWorkspace(named));
        }
        if let Some(own) = sandbox_own_dir(&real) {
            return Err(PlanError::ReadOnlyPathCovered { named, real, own });
        }
        mounts.push(Mount::Bind {
            src: real.clone(),
            dst: real.clone(),
            writable: false,
        });
        if real != named {
            named_links.push((named, real.clone()));
        }
        shown.push(real);
    }
    // Where the host's own link is there already: in a bound directory,
    // under a merged-/usr link (`/bin` leads into the bound `/usr`), or under
    // another name made a link here.
    let root_links: Vec<PathBuf> = facts
        .root_symlinks
        .iter()
        .map(|(n, _)| Path::new("/").join(n))
        .collect();
    for (named, real) in &named_links {
        let under = |p: &Path| named.starts_with(p) && named != p;
        let shows_the_hosts_link = shown.iter().any(|s| named.starts_with(s))
            || root_links.iter().any(|l| named.starts_with(l))
            || named_links.iter().any(|(other, _)| under(other))
            || mounts.iter().any(|m| m.paths().next() == Some(named.as_path()));
        if !shows_the_hosts_link {
            mounts.push(Mount::Symlink {
                target: real.clone(),
                dst: named.clone(),
            });
        }
    }
    // The links on their way, where nothing shows the host's: a name that
    // is shown already (in a bound directory) leads through them. Not where
    // the sandbox has its own (`/tmp`, `/dev`, `/proc`), nor in the
    // workspace or tether-exec's own directories.
    let mut made: Vec<&Path> = Vec::new();
    for (at, target) in &facts.followed_links {
        let under = |p: &Path| at.starts_with(p);
        let shown_there = shown.iter().any(|s| under(s))
            || root_links.iter().any(|l| under(l))
            || named_links.iter().any(|(named, _)| under(named))
            || mounts
                .iter()
                .any(|m| m.paths().next().is_some_and(|p| under(p) || p.starts_with(at)));
        // Nor one leading into the sandbox's own directories, where the
        // command's files would stand in for the host's.
        let leads_into_own = at
            .parent()
            .is_some_and(|dir| sandbox_own_dir(&lexically(&dir.join(target))).is_some());
        let off_limits = sandbox_own_dir(at).is_some()
            || leads_into_own
            || under(workspace)
            || under(state_dir)
            || facts.launcher_dirs.iter().any(|d| under(d));
        // One link a place: the host's changed between two lookups.
        if !shown_there && !off_limits && !made.contains(&at.as_path()) {
            made.push(at);
            mounts.push(Mount::Symlink {
                target: target.clone(),
                dst: at.clone(),
            });
        }
    }
    if facts.uid == 0 {
        // Running as root the sandbox's files map to host root, who owns
        // /etc/shadow & co: hide them. After every bind of the host's, which
        // would cover a mask made before it (a read-only path of `/etc`).
        for s in &facts.system_secrets {
            mounts.push(Mount::MaskFile { dst: s.clone() });
        }
        for d in &facts.system_secret_dirs {
            mounts.push(Mount::MaskDir { dst: d.clone() });
        }
    }
    // A bound path that holds the state directory or a capture beside the
    // workspace would show held actions, other runs' writes and the trusted
    // keys: hide them, where they show inside.
    for d in std::iter::once(state_dir).chain(facts.launcher_dirs.iter().map(PathBuf::as_path)) {
        if shows(&shown, d) {
            mounts.push(Mount::MaskDir { dst: d.to_path_buf() });
        }
    }

    // A minimal /dev, a fresh /proc, a private /tmp.
    mounts.push(Mount::Tmpfs {
        dst: "/dev".into(),
        mode: 0o755,
        size_mb: 1,
    });
    // The host's own nodes, on read-only mounts: a device stays as usable
    // as its mode says (the kernel checks a read-only mount for regular
    // files, directories and links only), but its mode, owner and times
    // cannot be changed. As root, the command owns them (see the uid below):
    // `chmod 000 /dev/null` would break the host.
    for d in DEVICES {
        let p = Path::new("/dev").join(d);
        mounts.push(Mount::Bind {
            src: p.clone(),
            dst: p,
            writable: false,
        });
    }
    for (name, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        mounts.push(Mount::Symlink {
            target: target.into(),
            dst: Path::new("/dev").join(name),
        });
    }
    mounts.push(Mount::Tmpfs {
        dst: "/dev/shm".into(),
        mode: 0o1777,
        size_mb: 256,
    });
    mounts.push(Mount::Proc { dst: "/proc".into() });
    mounts.push(Mount::Tmpfs {
        dst: "/tmp".into(),
        mode: 0o1777,
        size_mb: 1024,
    });

    // The workspace at its own path; with `writable_globs`, read-only with each
    // writable tree bound read-write on top. Mount flags, not only Landlock,
    // because a workspace under /tmp sits beneath the sandbox's writable /tmp,
    // and Landlock grants follow the path hierarchy across mounts.
    let trees = match (writable_trees(policy), &facts.overlay) {
        // Read-only: nothing in the workspace is writable, whatever the globs say.
        _ if !writable => None,
        (Ok(t), _) => t,
        // Globs the kernel cannot express as trees: capture every write in an
        // overlay and check each path after the run.
        (Err(PlanError::GlobNeedsOverlay(_)), Some(_)) if writable => None,
        (Err(e), _) => return Err(e),
    };
    // Under an overlay every write is captured and checked afterwards: no tree
    // may be bound read-write from the host on top of it.
    let whole = facts.overlay.is_some() || trees.as_ref().is_none_or(|t| t.iter().any(|t| t.is_empty()));
    if let (true, Some((upper, work))) = (writable, &facts.overlay) {
        mounts.push(Mount::Overlay {
            dst: workspace.to_path_buf(),
            upper: upper.clone(),
            work: work.clone(),
        });
    } else {
        mounts.push(Mount::Bind {
            src: workspace.to_path_buf(),
            dst: workspace.to_path_buf(),
            writable: writable && whole,
        });
    }
    if writable && !whole {
        for t in trees
            .iter()
            .flatten()
            .filter(|t| facts.writable_trees_present.contains(t))
        {
            let p = workspace.join(t);
            mounts.push(Mount::Bind {
                src: p.clone(),
                dst: p,
                writable: true,
            });
        }
    }
    // Renaming `.git` away and making a new one would carry its read-only
    // hooks and config along and leave a writable `.git` in its place (caught
    // after the run, but present during it): pinned, it cannot move, nor can
    // any directory on the way to a nested repository. A git directory that
    // is an overlay is its own mount point. An overlay of the whole workspace
    // captures such a rename instead, and checks it before anything lands.
    //
    // In a bind-mounted workspace, each git directory is an overlay of its
    // own: a control file git would obey that does not exist yet (`commondir`,
    // a new submodule's `config`, `hooks` where there were none) would
    // otherwise exist in the real repository while the run lasts, for any
    // `git status` on the host (an editor runs it every few seconds) to obey.
    // Captured, it is checked after the run and never lands. Pins outside
    // the overlays come first (a later bind of a parent would hide them).
    if writable && facts.overlay.is_none() {
        let in_overlay = |p: &Path| facts.git_overlays.iter().any(|(d, _, _)| p.starts_with(d));
        let pin = |p: &PathBuf| Mount::Pin { dst: p.clone() };
        mounts.extend(facts.protected_parents.iter().filter(|p| !in_overlay(p)).map(pin));
        for (dst, upper, work) in &facts.git_overlays {
            mounts.push(Mount::Overlay {
                dst: dst.clone(),
                upper: upper.clone(),
                work: work.clone(),
            });
        }
        mounts.extend(
            facts
                .protected_parents
                .iter()
                .filter(|p| in_overlay(p) && !facts.git_overlays.iter().any(|(d, _, _)| d == *p))
                .map(pin),
        );
    }
    for (p, is_dir) in &facts.protected_present {
        let hidden = p.strip_prefix(workspace).is_ok_and(|r| r.starts_with(".tether"));
        mounts.push(match (hidden, is_dir) {
            (true, true) => Mount::MaskDir { dst: p.clone() },
            (true, false) => Mount::MaskFile { dst: p.clone() },
            (false, _) => Mount::ReadOnly { dst: p.clone() },
        });
    }
    for f in &facts.policy_files_in_workspace {
        mounts.push(Mount::ReadOnly { dst: f.clone() });
    }
    // Files a git configuration includes: git obeys them as it obeys
    // `.git/config` (their directories are pinned, as a policy file's are).
    if writable {
        for f in includes
            .files
            .iter()
            .filter(|f| !facts.policy_files_in_workspace.contains(f))
        {
            mounts.push(Mount::ReadOnly { dst: f.clone() });
        }
    }
    for s in &facts.secret_files {
        mounts.push(Mount::MaskFile { dst: s.clone() });
    }
    // The approver's key, wherever a mount shows it (a system directory, a
    // tool directory, a read-only path, the workspace): nothing inside may
    // read it, or approvals could be forged with it.
    // One in a directory hidden already (the state directory, say) is not
    // there to hide.
    if let Some(k) = &facts.approver_key {
        let hidden = mounts.iter().any(|m| {
            matches!(m, Mount::MaskDir { dst: d } if k.starts_with(d)) || *m == Mount::MaskFile { dst: k.clone() }
        });
        if (shows(&shown, k) || k.starts_with(workspace)) && !hidden {
            mounts.push(Mount::MaskFile { dst: k.clone() });
        }
    }

    let abi = facts.landlock_abi.min(crate::policy::doc_max_abi());
    let mut rules = vec![(PathBuf::from("/"), Access::Read)];
    match (writable, trees) {
        (true, Some(trees)) => {
            // Only the trees the globs name are writable; the rest of the workspace is read-only.
            rules.push((workspace.to_path_buf(), Access::Read));
            for t in trees.iter().filter(|t| facts.writable_trees_present.contains(t)) {
                rules.push((workspace.join(t), Access::ReadWrite));
            }
        }
        (true, None) => rules.push((workspace.to_path_buf(), Access::ReadWrite)),
        (false, _) => rules.push((workspace.to_path_buf(), Access::Read)),
    }
    rules.push(("/tmp".into(), Access::ReadWrite));
    rules.push(("/dev/shm".into(), Access::ReadWrite));
    for d in ["null", "zero", "full", "tty"] {
        rules.push((Path::new("/dev").join(d), Access::ReadWriteFile));
    }

    let env = environment(policy, &facts.env, workspace, cwd);
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.split(':').filter(|s| !s.is_empty()).map(str::to_string).collect())
        .unwrap_or_default();

    let limits = policy.limits();
    let mb = |v: u64| v.saturating_mul(1024 * 1024);
    let soft = |resource: RlimitKind, value: u64| Rlimit {
        resource,
        value,
        hard: value,
    };
    let cpu = limits
        .cpu_seconds
        .unwrap_or(DEFAULT_CPU_SECONDS_PER_CPU.saturating_mul(facts.cpus.max(1)));
    let rlimits = vec![
        soft(RlimitKind::Processes, limits.processes.unwrap_or(DEFAULT_PROCESSES)),
        soft(RlimitKind::OpenFiles, limits.open_files.unwrap_or(DEFAULT_OPEN_FILES)),
        soft(
            RlimitKind::AddressSpace,
            mb(limits.memory_mb.unwrap_or(DEFAULT_MEMORY_MB)),
        ),
        soft(RlimitKind::Core, 0),
        Rlimit {
            resource: RlimitKind::Cpu,
            value: cpu,
            hard: cpu.saturating_add(CPU_GRACE_SECONDS),
        },
        soft(
            RlimitKind::FileSize,
            mb(limits.file_size_mb.unwrap_or(DEFAULT_FILE_SIZE_MB)),
        ),
    ];

    // As root, the sandbox acts as the workspace's owner, inside as an
    // unprivileged uid; otherwise as the caller, with the caller's uid inside.
    let (outer_uid, outer_gid) = if facts.uid == 0 {
        facts.workspace_owner
    } else {
        (facts.uid, facts.gid)
    };
    let inner_uid = if outer_uid == 0 { 1000 } else { outer_uid };
    // As the host's root, the command owns what procfs shows as root's: the
    // kernel's settings (`/proc/sys`, `core_pattern` among them, which names
    // a program the host runs as root), `sysrq-trigger`, interrupt
    // affinities, bus devices; their file modes are all that guards most of
    // them. Landlock refuses every write outside the workspace already;
    // read-only mounts refuse them too, as bubblewrap's do. Otherwise the
    // command's uid is an unprivileged one's on the host, which cannot write
    // them.
    if outer_uid == 0 {
        for p in PROC_READ_ONLY {
            mounts.push(Mount::ReadOnly {
                dst: Path::new("/proc").join(p),
            });
        }
    }
    let inner_gid = if outer_gid == 0 { 1000 } else { outer_gid };

    let workspace_identities = workspace_identities(&mounts, workspace);
    let create_guard = (writable && facts.overlay.is_none()).then(|| CreateGuard {
        workspace: workspace.to_path_buf(),
        head_at_top: facts.head_at_top,
        repo_at_top: facts.repo_at_top,
        include_paths: includes.paths.iter().map(|p| workspace.join(p)).collect(),
        nested_trees: facts.nested_trees.clone(),
        known_git_dirs: facts.git_overlays.iter().map(|(d, _, _)| d.clone()).collect(),
    });
    Ok(Plan {
        workspace_identities,
        create_guard,
        found_trees: facts.found_trees.clone(),
        not_shown,
        argv,
        env,
        path,
        cwd: cwd.to_path_buf(),
        workspace: workspace.to_path_buf(),
        mounts,
        landlock: LandlockPlan {
            abi,
            rules,
            scoped: abi >= 6,
        },
        rlimits,
        host_network: policy.network(),
        inner_uid,
        inner_gid,
        outer_uid,
        outer_gid,
        hostname: "tether-sandbox".into(),
        timeout_ms: policy.timeout_ms(),
        pids_max: limits.processes.unwrap_or(DEFAULT_PROCESSES),
        pids_cgroup: outer_uid == 0 && facts.root_is_host_root,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Format, Layer};

    fn facts() -> HostFacts {
        HostFacts {
            uid: 1000,
            gid: 1000,
            workspace_owner: (1000, 1000),
            cpus: 2,
            root_symlinks: vec![("bin".into(), "usr/bin".into())],
            root_dirs: vec!["usr".into(), "etc".into()],
            env: vec![
                ("PATH".into(), "/usr/bin".into()),
                ("AWS_SECRET_ACCESS_KEY".into(), "x".into()),
                ("LC_ALL".into(), "C".into()),
            ],
            landlock_abi: 7,
            ..HostFacts::default()
        }
    }

    fn policy(t: &str) -> Policy {
        Policy::new(vec![Layer::parse(t, "t", Format::Toml).unwrap()], vec![])
    }

    #[test]
    fn environment_is_an_allowlist() {
        let p = build(
            &policy(""),
            &facts(),
            Path::new("/w"),
            Path::new("/w"),
            vec!["ls".into()],
            Path::new("/s"),
        )
        .unwrap();
        let keys: Vec<_> = p.env.iter().map(|(k, _)| k.as_str()).collect();
        assert!(keys.contains(&"LC_ALL") && keys.contains(&"HOME"));
        assert!(!keys.contains(&"AWS_SECRET_ACCESS_KEY"));
    }

    #[test]
    fn read_only_profile_binds_the_workspace_read_only() {
        let p = build(
            &policy("profile = \"read-only\""),
            &facts(),
            Path::new("/w"),
            Path::new("/w"),
            vec![],
            Path::new("/s"),
        )
        .unwrap();
        assert!(p.mounts.contains(&Mount::Bind {
            src: "/w".into(),
            dst: "/w".into(),
            writable: false
        }));
        assert!(p.landlock.rules.contains(&("/w".into(), Access::Read)));
    }

    #[test]
    fn the_approver_key_and_the_state_directory_are_hidden_wherever_a_mount_shows_them() {
        for (key, shown) in [
            ("/etc/tether/approver.key", true),
            ("/w/keys/approver", true),
            ("/opt/tools/approver", true),
            ("/home/u/.config/tether-exec/approver.key", false),
        ] {
            let mut f = facts();
            f.approver_key = Some(key.into());
            let p = plan_in_w_with_state(&policy("read_only_paths = [\"/opt/tools\"]"), &f, "/etc/tether/state");
            let masked = p.mounts.contains(&Mount::MaskFile { dst: key.into() });
            assert_eq!(masked, shown, "{key}: {:?}", p.mounts);
            assert!(
                p.mounts.contains(&Mount::MaskDir {
                    dst: "/etc/tether/state".into()
                }),
                "a state directory under /etc: {:?}",
                p.mounts
            );
        }
    }

    /// A read-only path named through a link is bound at its real path: a
    /// key there is hidden at that path (the name leads to it). A key in a
    /// directory hidden already is left to that (its path is not there).
    #[test]
    fn the_approver_key_is_hidden_under_a_linked_read_only_path_and_not_twice() {
        let mut f = facts();
        f.approver_key = Some("/var/home/me/.config/tether-exec/approver.key".into());
        f.read_only_reals = vec![("/home/me".into(), ResolvedPath::Real("/var/home/me".into()))];
        let p = plan_in_w(&policy("read_only_paths = [\"/home/me\"]"), &f).unwrap();
        assert!(
            p.mounts.contains(&Mount::MaskFile {
                dst: "/var/home/me/.config/tether-exec/approver.key".into()
            }),
            "{:?}",
            p.mounts
        );
        let mut f = facts();
        f.approver_key = Some("/etc/tether/state/approver.key".into());
        let p = plan_in_w_with_state(&policy(""), &f, "/etc/tether/state");
        assert!(p.mounts.contains(&Mount::MaskDir {
            dst: "/etc/tether/state".into()
        }));
        assert!(
            !p.mounts.iter().any(|m| matches!(m, Mount::MaskFile { .. })),
            "{:?}",
            p.mounts
        );
    }

    /// The host's link in a bound directory leads through the other links
    /// the resolution followed: those are made again, except where a bound
    /// directory or the name's own link shows them, or where the sandbox
    /// has its own directory.
    #[test]
    fn links_followed_to_a_read_only_path_are_made_again_where_nothing_shows_them() {
        let mut f = facts();
        f.read_only_reals = vec![("/usr/local/jdk".into(), ResolvedPath::Real("/srv/jdks/21".into()))];
        f.followed_links = vec![
            ("/usr/local/jdk".into(), "/srv/jdks/current".into()),
            ("/srv/jdks/current".into(), "21".into()),
            ("/tmp/cache".into(), "/srv/jdks".into()),
            // Into the sandbox's own /tmp, where the command's files would stand in.
            ("/srv/a".into(), "../tmp/x".into()),
            // The host's link changed between two lookups: one link a place.
            ("/srv/jdks/current".into(), "22".into()),
        ];
        let p = plan_in_w(&policy("read_only_paths = [\"/usr/local/jdk\"]"), &f).unwrap();
        let links: Vec<_> = p
            .mounts
            .iter()
            .filter_map(|m| match m {
                Mount::Symlink { target, dst }
                    if !dst.starts_with("/dev")
                        && !facts()
                            .root_symlinks
                            .iter()
                            .any(|(n, _)| Path::new("/").join(n) == *dst) =>
                {
                    Some((dst.clone(), target.clone()))
                }
                _ => None,
            })
            .collect();
        assert_eq!(
            links,
            vec![(PathBuf::from("/srv/jdks/current"), PathBuf::from("21"))],
            "{:?}",
            p.mounts
        );
    }

    /// A bind at a linked name would resolve an absolute link in the
    /// sandbox's root, where its target is not: the bind is at the real
    /// path, and the name links there unless a bound directory shows the
    /// host's own link.
    #[test]
    fn a_linked_read_only_path_is_bound_at_its_real_path_and_named_by_a_link() {
        let bind = |p: &str| Mount::Bind {
            src: p.into(),
            dst: p.into(),
            writable: false,
        };
        let mut f = facts();
        f.read_only_reals = vec![
            ("/srv/sdk".into(), ResolvedPath::Real("/data/sdk-1.2".into())),
            ("/usr/local/jdk".into(), ResolvedPath::Real("/data/jdk-21".into())),
        ];
        let p = plan_in_w(
            &policy("read_only_paths = [\"/srv/sdk\", \"/usr/local/jdk\", \"/srv/plain\"]"),
            &f,
        )
        .unwrap();
        for m in [bind("/data/sdk-1.2"), bind("/data/jdk-21"), bind("/srv/plain")] {
            assert!(p.mounts.contains(&m), "{m:?} in {:?}", p.mounts);
        }
        assert!(
            p.mounts.contains(&Mount::Symlink {
                target: "/data/sdk-1.2".into(),
                dst: "/srv/sdk".into()
            }),
            "{:?}",
            p.mounts
        );
        // /usr is bound from the host, with the host's link in it.
        assert!(
            !p.mounts
                .iter()
                .any(|m| m.paths().any(|x| x == Path::new("/usr/local/jdk"))),
            "{:?}",
            p.mounts
        );
    }

    #[test]
    fn a_read_only_path_in_the_workspace_is_refused_with_what_to_use_instead() {
        for (named, real) in [("/w/vendor", None), ("/srv/sdk", Some("/w/.sdk"))] {
            let mut f = facts();
            if let Some(r) = real {
                f.read_only_reals = vec![(named.into(), ResolvedPath::Real(r.into()))];
            }
            let e = plan_in_w(&policy(&format!("read_only_paths = [{named:?}]")), &f).unwrap_err();
            assert!(
                matches!(&e, PlanError::ReadOnlyPathInWorkspace(p) if p == Path::new(named)),
                "{e:?}"
            );
            assert!(e.to_string().contains("`protected`"), "{e}");
        }
    }

    #[test]
    fn a_missing_read_only_path_is_refused_by_name() {
        let mut f = facts();
        f.read_only_reals = vec![("/srv/gone".into(), ResolvedPath::Missing)];
        let e = plan_in_w(&policy("read_only_paths = [\"/srv/gone\"]"), &f).unwrap_err();
        assert!(e.to_string().contains("`/srv/gone` cannot be resolved"), "{e}");
    }

    #[test]
    fn a_read_only_path_leading_through_a_link_in_the_workspace_is_refused() {
        let mut f = facts();
        f.read_only_reals = vec![(
            "/srv/sdk".into(),
            ResolvedPath::ThroughWorkspace {
                link: "/w/vendor/sdk".into(),
                by: crate::workspace::WrittenBy::ThisWorkspace,
            },
        )];
        let e = plan_in_w(&policy("read_only_paths = [\"/srv/sdk\"]"), &f).unwrap_err();
        assert!(
            e.to_string()
                .contains("leads through /w/vendor/sdk, a link in the workspace"),
            "{e}"
        );
    }

    /// Names under a merged-/usr link or under another linked name are
    /// reached through those: no link of their own (one could not be made).
    #[test]
    fn linked_names_already_reached_through_other_links_get_none_of_their_own() {
        let mut f = facts();
        f.read_only_reals = vec![
            ("/bin/java".into(), ResolvedPath::Real("/data/jdk/bin/java".into())),
            ("/srv/a".into(), ResolvedPath::Real("/data/a".into())),
            ("/srv/a/b".into(), ResolvedPath::Real("/data/a/b-2".into())),
        ];
        let p = plan_in_w(
            &policy("read_only_paths = [\"/bin/java\", \"/srv/a\", \"/srv/a/b\"]"),
            &f,
        )
        .unwrap();
        let links: Vec<&Path> = p
            .mounts
            .iter()
            .filter_map(|m| match m {
                Mount::Symlink { dst, .. } if !dst.starts_with("/dev") => Some(dst.as_path()),
                _ => None,
            })
            .collect();
        assert_eq!(links, [Path::new("/bin"), Path::new("/srv/a")], "{:?}", p.mounts);
    }

    /// As root, a read-only path of `/etc` is bound over the system's
    /// `/etc`: the masks of its secrets come after, or it would show them.
    #[test]
    fn the_systems_secrets_are_masked_after_every_bind_that_shows_them() {
        let mut f = facts();
        f.uid = 0;
        f.system_secrets = vec!["/etc/shadow".into()];
        let p = plan_in_w(&policy("read_only_paths = [\"/etc\"]"), &f).unwrap();
        let last_bind = p
            .mounts
            .iter()
            .rposition(|m| matches!(m, Mount::Bind { src, .. } if src == Path::new("/etc")));
        let mask = p.mounts.iter().position(|m| {
            *m == Mount::MaskFile {
                dst: "/etc/shadow".into(),
            }
        });
        assert!(mask.is_some() && mask > last_bind, "{:?}", p.mounts);
    }

    #[test]
    fn a_read_only_path_leading_where_the_sandbox_has_its_own_is_refused() {
        let mut f = facts();
        f.read_only_reals = vec![("/srv/cache".into(), ResolvedPath::Real("/tmp/cache".into()))];
        let e = plan_in_w(&policy("read_only_paths = [\"/srv/cache\"]"), &f).unwrap_err();
        assert!(
            matches!(&e, PlanError::ReadOnlyPathCovered { own: "/tmp", .. }),
            "{e:?}"
        );
        assert!(e.to_string().contains("`/srv/cache` leads to /tmp/cache"), "{e}");
    }

    #[test]
    fn every_limit_has_a_default_and_the_policy_lowers_or_raises_it() {
        let value = |p: &Plan, k: RlimitKind| p.rlimits.iter().find(|r| r.resource == k).map(|r| r.value);
        let mib = 1024 * 1024;
        let p = plan_in_w(&policy(""), &facts()).unwrap();
        for (k, v) in [
            (RlimitKind::Processes, DEFAULT_PROCESSES),
            (RlimitKind::OpenFiles, DEFAULT_OPEN_FILES),
            (RlimitKind::AddressSpace, DEFAULT_MEMORY_MB * mib),
            (RlimitKind::Cpu, DEFAULT_CPU_SECONDS_PER_CPU * 2),
            (RlimitKind::FileSize, DEFAULT_FILE_SIZE_MB * mib),
            (RlimitKind::Core, 0),
        ] {
            assert_eq!(value(&p, k), Some(v), "{k:?}");
        }
        let p = plan_in_w(&policy("[limits]\ncpu_seconds = 7200\nfile_size_mb = 1"), &facts()).unwrap();
        assert_eq!(value(&p, RlimitKind::Cpu), Some(7200));
        assert_eq!(value(&p, RlimitKind::FileSize), Some(mib));
        let hard = |k: RlimitKind| p.rlimits.iter().find(|r| r.resource == k).map(|r| r.hard);
        assert_eq!(hard(RlimitKind::Cpu), Some(7200 + CPU_GRACE_SECONDS), "SIGXCPU first");
        assert_eq!(hard(RlimitKind::FileSize), Some(mib));
    }

    #[test]
    fn a_read_only_path_holding_our_directories_does_not_show_them() {
        let mut f = facts();
        f.launcher_dirs = vec!["/home/u/.tether-exec-captures".into()];
        let p = build(
            &policy("read_only_paths = [\"/home/u\"]"),
            &f,
            Path::new("/home/u/w"),
            Path::new("/home/u/w"),
            vec![],
            Path::new("/home/u/.local/state/tether-exec"),
        )
        .unwrap();
        let bind = p
            .mounts
            .iter()
            .position(|m| matches!(m, Mount::Bind { src, .. } if src == Path::new("/home/u")));
        for d in ["/home/u/.local/state/tether-exec", "/home/u/.tether-exec-captures"] {
            let mask = p.mounts.iter().position(|m| *m == Mount::MaskDir { dst: d.into() });
            assert!(
                mask.is_some() && mask > bind,
                "{d} hidden after the bind: {:?}",
                p.mounts
            );
        }
    }

    #[test]
    fn state_dir_inside_workspace_is_refused() {
        assert!(build(
            &policy(""),
            &facts(),
            Path::new("/w"),
            Path::new("/w"),
            vec![],
            Path::new("/w/.state")
        )
        .is_err());
    }

    #[test]
    fn writable_trees_are_directory_globs_intersected_across_layers() {
        let layers = |ts: &[&str]| {
            Policy::new(
                ts.iter().map(|t| Layer::parse(t, "t", Format::Toml).unwrap()).collect(),
                vec![],
            )
        };
        for (texts, want) in [
            (vec![""], None),
            (vec!["writable_globs = [\"docs/**\"]"], Some(vec!["docs"])),
            (vec!["writable_globs = [\"**\"]"], Some(vec![""])),
            (
                vec![
                    "writable_globs = [\"docs/**\", \"src/**\"]",
                    "writable_globs = [\"docs/api/**\"]",
                ],
                Some(vec!["docs/api"]),
            ),
            (
                vec!["writable_globs = [\"docs/api/**\"]", "writable_globs = [\"docs/**\"]"],
                Some(vec!["docs/api"]),
            ),
            (
                vec!["writable_globs = [\"docs/**\"]", "writable_globs = [\"src/**\"]"],
                Some(vec![]),
            ),
            (
                vec!["writable_globs = [\"**\"]", "writable_globs = [\"src/**\"]"],
                Some(vec!["src"]),
            ),
        ] {
            let got = writable_trees(&layers(&texts)).unwrap();
            assert_eq!(
                got,
                want.map(|v| v.into_iter().map(String::from).collect::<Vec<_>>()),
                "{texts:?}"
            );
        }
        for bad in ["**/*.md", "src/*.rs", "docs/{a,b}/**", "*.txt"] {
            let p = layers(&[&format!("writable_globs = [{bad:?}]")]);
            assert!(
                matches!(writable_trees(&p), Err(PlanError::GlobNeedsOverlay(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn landlock_floor_is_enforced() {
        let mut f = facts();
        f.landlock_abi = 3;
        assert!(matches!(
            build(
                &policy("landlock_min_abi = 4"),
                &f,
                Path::new("/w"),
                Path::new("/w"),
                vec![],
                Path::new("/s")
            ),
            Err(PlanError::LandlockTooOld { have: 3, need: 4 })
        ));
    }

    /// The host's network brings the host's abstract unix sockets along:
    /// without Landlock's scoping (ABI 6) nothing keeps the command from
    /// them, so `network = true` is refused rather than run less confined.
    /// As root the system's root-only secrets are hidden, files and
    /// directories; a caller who is not root cannot read them anyway.
    #[test]
    fn system_secrets_are_hidden_as_root() {
        let mut f = facts();
        f.system_secrets = vec!["/etc/shadow".into()];
        f.system_secret_dirs = vec!["/etc/ssl/private".into()];
        let p = plan_in_w(&policy(""), &f).unwrap();
        assert!(!p
            .mounts
            .iter()
            .any(|m| matches!(m, Mount::MaskFile { dst } | Mount::MaskDir { dst } if dst.starts_with("/etc"))));
        f.uid = 0;
        f.workspace_owner = (0, 0);
        let p = plan_in_w(&policy(""), &f).unwrap();
        assert!(p.mounts.contains(&Mount::MaskFile {
            dst: "/etc/shadow".into()
        }));
        assert!(p.mounts.contains(&Mount::MaskDir {
            dst: "/etc/ssl/private".into()
        }));
    }

    #[test]
    fn the_host_network_needs_abstract_sockets_scoped() {
        for (abi, network, ok) in [(5, true, false), (6, true, true), (5, false, true), (7, true, true)] {
            let mut f = facts();
            f.landlock_abi = abi;
            let p = plan_in_w(&policy(&format!("network = {network}")), &f);
            match p {
                Ok(p) => {
                    assert!(ok, "ABI {abi}, network {network}: ran");
                    assert_eq!(p.landlock.scoped, abi >= 6);
                }
                Err(e) => {
                    assert!(!ok, "ABI {abi}, network {network}: {e}");
                    assert!(matches!(e, PlanError::NetworkUnscoped { have } if have == abi), "{e}");
                }
            }
        }
    }

    #[test]
    fn root_maps_to_the_workspace_owner_and_an_unprivileged_inner_uid() {
        let mut f = facts();
        f.uid = 0;
        f.workspace_owner = (0, 0);
        let p = plan_in_w(&policy(""), &f).unwrap();
        assert_eq!((p.outer_uid, p.inner_uid), (0, 1000));
    }

    /// The plan for a workspace `/w` (cwd too) and state directory `/s`.
    fn plan_in_w(p: &Policy, f: &HostFacts) -> Result<Plan, PlanError> {
        build(p, f, Path::new("/w"), Path::new("/w"), vec![], Path::new("/s"))
    }

    /// [`plan_in_w`] with the state directory at `state`.
    fn plan_in_w_with_state(p: &Policy, f: &HostFacts, state: &str) -> Plan {
        build(p, f, Path::new("/w"), Path::new("/w"), vec![], Path::new(state)).unwrap()
    }

    #[test]
    fn tool_directories_inside_a_shown_one_are_bound_once_and_those_left_out_are_listed_once() {
        let mut f = facts();
        f.extra_tool_dirs = [
            "/root/.pyenv/plugins/pv",
            "/root/.cargo/bin",
            "/root/.pyenv",
            "/srv/t",
            "/srv/t/bin",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        // A virtualenv's prefix that is also on PATH, under a private name.
        f.venv_prefixes = vec![PathBuf::from("/root/.config/py/bin")];
        f.extra_tool_dirs.push(PathBuf::from("/root/.config/py/bin"));
        let plan = plan_in_w_with_state(&Policy::embedded_default(), &f, "/srv/t/state");
        let bound: Vec<&Path> = plan
            .mounts
            .iter()
            .filter_map(|m| match m {
                Mount::Bind { src, .. } if src.starts_with("/root") || src.starts_with("/srv") => Some(src.as_path()),
                _ => None,
            })
            .collect();
        assert_eq!(
            bound,
            [
                Path::new("/root/.pyenv"),
                Path::new("/root/.cargo/bin"),
                Path::new("/srv/t/bin")
            ]
        );
        // `/srv/t` holds the state directory: left out, listed; `/srv/t/bin`
        // inside it holds nothing of it and is shown. The private one once.
        let listed: Vec<&str> = plan.not_shown.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(listed, ["/srv/t", "/root/.config/py/bin"], "{:?}", plan.not_shown);
    }

    #[test]
    fn a_pids_cgroup_only_where_rlimit_nproc_does_not_bind() {
        let plan_with = |uid: u32, owner: u32, host_root: bool| {
            let mut f = facts();
            f.uid = uid;
            f.workspace_owner = (owner, owner);
            f.root_is_host_root = host_root;
            plan_in_w(&policy(""), &f).unwrap().pids_cgroup
        };
        // Host root acting as root: exempt from RLIMIT_NPROC, so a cgroup.
        assert!(plan_with(0, 0, true));
        // Root of a rootless container (uid 0 mapped to an ordinary host uid).
        assert!(!plan_with(0, 0, false));
        // Root acting as the workspace's owner, and an ordinary caller.
        assert!(!plan_with(0, 1000, true));
        assert!(!plan_with(1000, 1000, false));
    }

    #[test]
    fn the_create_guard_refuses_what_it_protects_and_nothing_else() {
        use std::ffi::OsStr;
        let g = CreateGuard {
            known_git_dirs: vec![],
            workspace: "/w".into(),
            head_at_top: false,
            repo_at_top: true,
            include_paths: vec!["/w/shared.gitconfig".into(), "/w/conf/team/x.cfg".into()],
            nested_trees: vec![
                ("/w/proj".into(), false),
                ("/w/tracked".into(), true),
                ("/w/vendor/x".into(), false),
            ],
        };
        let no_repo = CreateGuard {
            repo_at_top: false,
            ..g.clone()
        };
        let with_head = CreateGuard {
            head_at_top: true,
            ..g.clone()
        };
        let (dir, other, moved) = (Making::Directory, Making::Other, Making::MovedDirectory);
        // (guard, parent, name, making, refused)
        let table: &[(&CreateGuard, &str, &str, Making, bool)] = &[
            (&g, "/w", ".env", other, true),
            (&g, "/w/app/deep", ".env.local", other, true),
            (&g, "/w", ".envrc", dir, true),
            (&g, "/w", ".env.example", other, false),
            (&g, "/w", ".env.sample", other, false),
            (&g, "/tmp", ".env", other, false),
            (&g, "/wx", ".env", other, false),
            (&g, "/w", ".tether", dir, true),
            (&g, "/w", ".tether", other, true),
            (&g, "/w/sub", ".tether", dir, false),
            (&g, "/w", ".git", dir, false),
            (&g, "/w", ".git", other, true),
            (&g, "/w", ".git", moved, true),
            (&g, "/w/sub", ".git", other, false),
            (&g, "/w/.git", "config", other, true),
            (&g, "/w/.git", "hooks", dir, true),
            (&g, "/w/.git", "commondir", other, true),
            (&g, "/w/.git", "config.worktree", other, true),
            (&g, "/w/.git", "config.lock", other, false),
            (&g, "/w/.git", "HEAD", other, false),
            (&g, "/w/sub/.git", "config", other, false),
            (&g, "/w", "config", dir, false),
            (&g, "/w", "objects", dir, false),
            (&g, "/w", "HEAD", other, true),
            (&g, "/w/sub", "HEAD", other, false),
            (&with_head, "/w", "config", other, true),
            (&with_head, "/w", "refs", dir, true),
            (&with_head, "/w", "objects", dir, true),
            (&with_head, "/w/src", "config", dir, false),
            (&g, "/w", "main.rs", other, false),
            (&no_repo, "/w", ".git", dir, true),
            (&no_repo, "/w/sub", ".git", dir, false),
            (&no_repo, "/w", "main.rs", other, false),
            // Included by a git configuration, and the directories above.
            (&g, "/w", "shared.gitconfig", other, true),
            (&g, "/w", "shared.gitconfig", dir, true),
            (&g, "/w/sub", "shared.gitconfig", other, false),
            (&g, "/w/conf/team", "x.cfg", other, true),
            (&g, "/w/conf", "team", dir, false),
            (&g, "/w/conf", "team", other, true),
            (&g, "/w/conf", "team", moved, true),
            (&g, "/w", "conf", moved, true),
            (&g, "/w", "conf", other, true),
            (&g, "/w", "conf", dir, false),
            (&g, "/w/conf", "other.cfg", other, false),
            (&g, "/w/conf/team", "y.cfg", other, false),
            // The work tree of a repository below the top.
            (&g, "/w/proj", "HEAD", other, true),
            (&g, "/w/proj/src", "HEAD", other, false),
            (&g, "/w/proj", "config", other, false),
            (&g, "/w/other", "HEAD", other, false),
            // One that tracks a file named `HEAD` keeps it writable.
            (&g, "/w/tracked", "HEAD", other, false),
            (&g, "/w/tracked", "objects", dir, true),
            (&g, "/w/tracked", "config", other, true),
            // A new `.git` where a repository below the top had one.
            (&g, "/w/proj", ".git", other, true),
            (&g, "/w/proj", ".git", dir, true),
            (&g, "/w/proj/src", ".git", dir, false),
            // On the way to a nested work tree.
            (&g, "/w/vendor", ".git", dir, true),
            (&g, "/w/vendor", "HEAD", other, true),
            (&g, "/w/vendor", "config", other, false),
        ];
        for (guard, parent, name, making, refused) in table {
            let got = guard.refuses(OsStr::new(name), *making, || Some(PathBuf::from(parent)));
            assert_eq!(got.is_some(), *refused, "{parent} {name} {making:?}: {got:?}");
        }
        // The directory is asked for only when a rule is about the name, and
        // a directory that cannot be told refuses those names.
        let asked = std::cell::Cell::new(false);
        assert!(g
            .refuses(OsStr::new("lib.rs"), Making::Other, || {
                asked.set(true);
                None
            })
            .is_none());
        assert!(!asked.get());
        assert!(g.refuses(OsStr::new(".env"), Making::Other, || None).is_some());
    }

    #[test]
    fn a_workspace_bound_from_the_host_has_the_guard() {
        let p = plan_in_w(&policy(""), &facts()).unwrap();
        assert_eq!(
            p.create_guard.as_ref().map(|g| g.workspace.as_path()),
            Some(Path::new("/w"))
        );
        let ro = plan_in_w(&policy("profile = \"read-only\""), &facts()).unwrap();
        assert!(ro.create_guard.is_none());
        let overlay = HostFacts {
            overlay: Some(("/s/up".into(), "/s/work".into())),
            ..facts()
        };
        let o = plan_in_w(&policy(""), &overlay).unwrap();
        assert!(o.create_guard.is_none(), "the overlay captures every write instead");
    }

    proptest::proptest! {
        /// Laws of the guard: nothing outside the workspace is ever refused;
        /// inside, a `.env` secret is refused wherever and however it is made,
        /// and an ordinary name never is.
        #[test]
        fn the_guard_judges_by_place_and_name_only(
            parts in proptest::collection::vec(proptest::sample::select(vec!["w", "src", ".git", "a b", "..x", "w2"]), 0..4),
            inside in proptest::bool::ANY,
            name in proptest::sample::select(vec![".env", ".env.local", ".envrc", "main.rs", "notes.txt", ".env.example", "config", "HEAD", ".git", ".tether"]),
            making in proptest::sample::select(vec![Making::Directory, Making::Other, Making::MovedDirectory]),
            head in proptest::bool::ANY,
        ) {
            let g = CreateGuard { workspace: "/w".into(), known_git_dirs: vec![], head_at_top: head, repo_at_top: !head, include_paths: vec![], nested_trees: vec![] };
            let mut parent = PathBuf::from(if inside { "/w" } else { "/elsewhere" });
            parent.extend(&parts);
            let refused = g.refuses(std::ffi::OsStr::new(name), making, || Some(parent.clone())).is_some();
            if !parent.starts_with("/w") {
                proptest::prop_assert!(!refused);
            } else if crate::policy::is_env_secret(name) {
                proptest::prop_assert!(refused);
            } else if matches!(name, "main.rs" | "notes.txt" | ".env.example") {
                proptest::prop_assert!(!refused);
            }
        }
    }
}
