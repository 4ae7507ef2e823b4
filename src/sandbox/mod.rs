//! Kernel confinement: gather host facts, plan (pure), apply (syscalls).
//!
//! [`plan`] decides every mount, Landlock rule, limit and id map as data;
//! [`seccomp`] holds the system-call rule table; [`apply`] is the only module
//! that makes namespace, mount, Landlock and seccomp calls. This file only
//! reads the host (cheap `stat`s) to feed the planner.

pub mod apply;
pub mod plan;
pub mod seccomp;

use crate::policy::Policy;
use crate::workspace::{resolve_links_outside, LinksOutside, WrittenWorkspaces};
use plan::HostFacts;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Whether uid 0 of this user namespace is the kernel's root user. In the
/// initial namespace it is (`0 0 4294967295`); in a nested one `uid_map` says
/// which uid of the parent it is. A map to 0 of a parent that is itself nested
/// cannot be told apart from host root here, so it counts as root: the pids
/// cgroup is then required rather than silently left out.
fn root_maps_to_host_root() -> bool {
    let Ok(map) = std::fs::read_to_string("/proc/self/uid_map") else {
        return true;
    };
    !map.lines().any(|line| {
        let f: Vec<u64> = line.split_whitespace().filter_map(|x| x.parse().ok()).collect();
        matches!(f[..], [inside, outside, count] if inside == 0 && count >= 1 && outside != 0)
    })
}

/// Read what the planner needs to know about this host and workspace.
/// `state`: where the secret scan keeps its listings (see
/// [`crate::workspace::listing`]).
/// The namespaces a sandbox is made of, by the name of their limit in
/// `/proc/sys/user/max_<name>_namespaces`.
pub const NAMESPACES: [&str; 6] = ["user", "mnt", "pid", "ipc", "uts", "net"];

/// The namespaces of [`NAMESPACES`] whose per-user limit is 0 here: the
/// kernel refuses to make any (clone3 then fails with ENOSPC).
pub fn namespaces_limited_to_zero() -> Vec<&'static str> {
    NAMESPACES
        .into_iter()
        .filter(|n| {
            std::fs::read_to_string(format!("/proc/sys/user/max_{n}_namespaces")).is_ok_and(|v| v.trim() == "0")
        })
        .collect()
}

/// What [`namespaces_limited_to_zero`] found, for a message: which
/// namespaces, and the sysctl files that say so.
pub fn zero_limits_named(zero: &[&str]) -> String {
    let files: Vec<String> = zero
        .iter()
        .map(|n| format!("/proc/sys/user/max_{n}_namespaces"))
        .collect();
    format!(
        "no new {} namespaces are allowed ({} is 0)",
        zero.join(", "),
        files.join(", ")
    )
}

/// `git`: the workspace's git layout, when the caller has read it already
/// (as `workspace::git_layout_with` reads it, after the secret scan).
pub fn host_facts(
    policy: &Policy,
    workspace: &Path,
    home: Option<&Path>,
    state: &Path,
    git: Option<crate::workspace::GitLayout>,
) -> HostFacts {
    // SAFETY-free: geteuid/getegid via nix.
    let uid = nix::unistd::geteuid().as_raw();
    let gid = nix::unistd::getegid().as_raw();
    let owner = std::fs::metadata(workspace)
        .map(|m| (m.uid(), m.gid()))
        .unwrap_or((uid, gid));
    let mut root_symlinks = Vec::new();
    let mut root_dirs = Vec::new();
    for name in plan::SYSTEM_DIRS {
        let p = Path::new("/").join(name);
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => {
                if let Ok(t) = std::fs::read_link(&p) {
                    root_symlinks.push((name.to_string(), t));
                }
            }
            Ok(m) if m.is_dir() => root_dirs.push(name.to_string()),
            _ => {}
        }
    }
    let env: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    let system = |p: &Path| plan::SYSTEM_DIRS.iter().any(|d| p.starts_with(Path::new("/").join(d)));
    // Links there are not followed: sandboxed commands can point them
    // anywhere between two runs.
    let written = WrittenWorkspaces::new(workspace, Some(state));
    let mut extra_tool_dirs = Vec::new();
    let mut tool_dirs_not_shown = Vec::new();
    let mut followed_links = Vec::new();
    // Each PATH directory (real), and the prefix it would be widened to.
    let mut tool_dirs: Vec<(PathBuf, Option<PathBuf>)> = Vec::new();
    if let Some((_, path)) = env.iter().find(|(k, _)| k == "PATH") {
        let mut seen: Vec<&str> = Vec::new();
        for entry in path.split(':') {
            let p = Path::new(entry);
            // Entries inside the system tree are bound already; resolving them
            // costs a readlink per component on every launch.
            if !p.is_absolute() || (system(p) && !entry.contains("..")) || seen.contains(&entry) {
                continue;
            }
            seen.push(entry);
            // Never through a link in the workspace (an activated virtualenv
            // puts one of its directories on PATH), nor in another where
            // sandboxed commands run: a run could point it at any directory
            // of the person's, for the next run to show.
            let mut followed = Vec::new();
            let real = match crate::workspace::resolve_links_outside_tracing(p, &written, &mut followed) {
                LinksOutside::Real(real) => real,
                LinksOutside::LinkIn(link, by) => {
                    tool_dirs_not_shown.push((
                        entry.to_string(),
                        format!(
                            "reached through {}, a link in {by}, which sandboxed commands can point anywhere",
                            link.display()
                        ),
                    ));
                    continue;
                }
                LinksOutside::Loop => {
                    tool_dirs_not_shown.push((
                        entry.to_string(),
                        "its links loop, or nest deeper than the kernel follows".to_string(),
                    ));
                    continue;
                }
                LinksOutside::Missing => continue,
            };
            if !real.is_dir() {
                continue;
            }
            add_links(&mut followed_links, followed);
            let wider = wider_tool_root(&real, home);
            tool_dirs.push((real, wider));
        }
    }
    // Widened to its prefix only where no sandboxed command writes, nor
    // holds this workspace (`~/work/bin` while in `~/work/proj`). The record
    // is read once, after every `lib` that widens was seen: a run that made
    // one was on record before it started.
    let listing = tool_dirs
        .iter()
        .any(|(_, wider)| wider.is_some())
        .then(|| written.listing_with_paths());
    for (real, wider) in tool_dirs {
        let real = match (wider, &listing) {
            (Some(w), Some(l)) if !workspace.starts_with(&w) && !written.holds_written_below(l, &w) => w,
            _ => real,
        };
        if !system(&real) && !real.starts_with(workspace) && !extra_tool_dirs.contains(&real) {
            extra_tool_dirs.push(real);
        }
    }
    // As root, the sandbox acts as the workspace's owner (see `plan`): a tool
    // directory that owner cannot reach on the host (under root's 0700 home,
    // say) is neither shown to it nor reachable by init, which sets the
    // sandbox up as that owner.
    let as_owner = uid == 0 && owner.0 != 0;
    let reachable = |p: &Path| !as_owner || reachable_by(p, owner.0, owner.1);
    // Never a directory that holds the approver's key (`~/.config` is kept
    // out by name in the plan; this is for keys kept elsewhere, and for `~`).
    let approver_key_dir = std::cell::OnceCell::new();
    let holds_key = |d: &Path| {
        approver_key_dir
            .get_or_init(|| {
                // As the directories it is compared with: links resolved.
                crate::approval::approver_key_path_in(|| home.map(Path::to_path_buf))
                    .and_then(|k| k.parent().map(Path::to_path_buf))
                    .map(|d| std::fs::canonicalize(&d).unwrap_or(d))
            })
            .as_ref()
            .is_some_and(|k: &PathBuf| k.starts_with(d))
    };
    // Nested directories are left to the plan, which binds one inside a
    // shown directory no second time: one left out here or there does not
    // take a shown one inside it along, unlisted.
    extra_tool_dirs.retain(|d| {
        let why = if !reachable(d) {
            format!(
                "the workspace's owner (uid {}), whom the sandbox acts as, cannot reach it on the host",
                owner.0
            )
        } else if holds_key(d) {
            "it holds the approver's key".to_string()
        } else {
            return true;
        };
        note_not_shown(&mut tool_dirs_not_shown, d, why);
        false
    });
    // A virtualenv's base interpreter (`home = DIR` in its pyvenv.cfg), when
    // it lives outside the system tree (pyenv, uv): its `bin` and the `lib`
    // and `include` beside it, and nothing else of that prefix. The file is the workspace's, so the run before this one may
    // have written it: `home` counts only where a Python interpreter is,
    // and never shows a directory that holds the approver's key.
    let mut venv_prefixes = Vec::new();
    for name in [".venv", "venv"] {
        let Ok(cfg) = crate::workspace::read_planted(&workspace.join(name).join("pyvenv.cfg"), 1 << 16) else {
            continue;
        };
        for line in String::from_utf8_lossy(&cfg).lines() {
            let Some(v) = line
                .strip_prefix("home")
                .map(str::trim_start)
                .and_then(|r| r.strip_prefix('='))
            else {
                continue;
            };
            // Never through a link where sandboxed commands write: a run
            // could make `home` a directory of its own holding a `python3`,
            // and the `lib` beside it a link to any directory of the
            // person's, for the next run to show.
            let named = Path::new(v.trim());
            if !named.is_absolute() {
                continue;
            }
            let LinksOutside::Real(bin) = resolve_links_outside(named, &written) else {
                continue;
            };
            let interpreter = ["python3", "python"]
                .iter()
                .any(|p| std::fs::metadata(bin.join(p)).is_ok_and(|m| m.is_file() && m.mode() & 0o111 != 0));
            if !bin.ends_with("bin") || !interpreter || system(&bin) {
                continue;
            }
            // `lib`: the standard library and libpython; `include`: its
            // headers, for building extensions.
            // Resolved as `bin` is (a link there, from stow say, would be
            // refused at the bind).
            let beside = ["lib", "include"]
                .into_iter()
                .filter_map(|n| bin.parent().map(|p| p.join(n)))
                .filter_map(|d| match resolve_links_outside(&d, &written) {
                    LinksOutside::Real(r) => Some(r),
                    _ => None,
                })
                .filter(|d| d.is_dir());
            for d in std::iter::once(bin.clone()).chain(beside) {
                if !reachable(&d) {
                    let why = format!(
                        "a virtualenv's interpreter directory the workspace's owner (uid {}), whom the sandbox acts as, cannot reach on the host",
                        owner.0
                    );
                    note_not_shown(&mut tool_dirs_not_shown, &d, why);
                } else if holds_key(&d) {
                    let why = "a virtualenv's interpreter directory that holds the approver's key".to_string();
                    note_not_shown(&mut tool_dirs_not_shown, &d, why);
                } else if !venv_prefixes.contains(&d) {
                    venv_prefixes.push(d);
                }
            }
        }
    }
    let secrets = crate::workspace::scan_before_run(workspace, state);
    let git = git.unwrap_or_else(|| crate::workspace::git_layout_with(workspace, &secrets.repos));
    // Work trees of the repositories below the top (a `.git` directory or
    // file there): see `CreateGuard::nested_trees`.
    let nested_trees: Vec<(PathBuf, bool)> = git
        .dirs
        .iter()
        .chain(&git.pointers)
        .filter(|g| g.file_name() == Some(std::ffi::OsStr::new(".git")))
        .filter_map(|g| g.parent())
        .filter(|t| !t.as_os_str().is_empty())
        .map(|t| {
            let t = workspace.join(t);
            let head = std::fs::symlink_metadata(t.join("HEAD")).is_ok();
            (t, head)
        })
        .collect();
    let protected_present = protected_present(workspace, &git);
    // By where they are, not by how they were named: a policy file named
    // through a symlink outside is still the workspace's to protect.
    let policy_files_in_workspace: Vec<PathBuf> = policy
        .files
        .iter()
        .filter_map(|f| std::fs::canonicalize(f).ok())
        .filter(|f| f.starts_with(workspace))
        .collect();
    // Only a writable run can change what git includes.
    let (git_includes, git_includes_unreadable) = if policy.profile() == crate::policy::Profile::WorkspaceWrite {
        match crate::workspace::git_includes(workspace, &git) {
            Ok(i) => (i, None),
            Err(e) => (Default::default(), Some(e.to_string())),
        }
    } else {
        Default::default()
    };
    let git_control_linked = (policy.profile() == crate::policy::Profile::WorkspaceWrite)
        .then(|| crate::workspace::linked_control_file(workspace, &git.dirs))
        .flatten();
    let mut policy_parents: Vec<PathBuf> = Vec::new();
    for f in policy_files_in_workspace.iter().chain(&git_includes.files) {
        for a in f
            .ancestors()
            .skip(1)
            .take_while(|a| a.starts_with(workspace) && *a != workspace)
        {
            if !policy_parents.iter().any(|p| p == a) {
                policy_parents.push(a.to_path_buf());
            }
        }
    }
    // Outermost first: a pin mounted later on a parent would hide those below.
    policy_parents.sort_by_key(|p| p.components().count());
    let (system_secrets, system_secret_dirs) = if uid == 0 {
        root_only_secrets()
    } else {
        Default::default()
    };
    HostFacts {
        uid,
        gid,
        workspace_owner: owner,
        root_symlinks,
        root_dirs,
        env,
        extra_tool_dirs,
        tool_dirs_not_shown,
        venv_prefixes,
        secret_files: secrets.hidden,
        env_secrets: secrets.env,
        protected_present,
        git_control_linked,
        git_index_unreadable: git.index_unreadable.then(|| {
            // Past the most indexes read, none in particular: the workspace's.
            git.unreadable_indexes
                .first()
                .map_or_else(|| workspace.to_path_buf(), |g| workspace.join(g).join("index"))
        }),
        head_at_top: std::fs::symlink_metadata(workspace.join("HEAD")).is_ok(),
        repo_at_top: std::fs::symlink_metadata(workspace.join(".git")).is_ok(),
        // The directories on the way to a policy file too: renamed away
        // with its read-only file inside, a new one would hold a policy of
        // the run's making for the next run.
        protected_parents: git
            .pins
            .iter()
            .map(|rel| workspace.join(rel))
            .chain(policy_parents)
            .filter(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir()))
            .collect(),
        policy_files_in_workspace,
        found_trees: secrets.repos.clone(),
        nested_trees,
        git_includes,
        git_includes_unreadable,
        system_secrets,
        system_secret_dirs,
        landlock_abi: apply::landlock_abi(),
        cpus: usable_cpus(),
        root_is_host_root: uid == 0 && root_maps_to_host_root(),
        overlay: None,
        git_overlays: Vec::new(),
        writable_trees_present: plan::writable_trees(policy)
            .ok()
            .flatten()
            .unwrap_or_default()
            .into_iter()
            .filter(|t| {
                // Checked before the sandbox exists, so nothing inside can swap a
                // directory for a symlink between this check and the mount.
                let p = workspace.join(t);
                std::fs::canonicalize(&p).is_ok_and(|real| real == p && real.is_dir())
            })
            .collect(),
        read_only_reals: policy
            .read_only_paths()
            .iter()
            .filter_map(|p| {
                let named = PathBuf::from(p);
                let mut followed = Vec::new();
                let real = match crate::workspace::resolve_links_outside_tracing(&named, &written, &mut followed) {
                    LinksOutside::Real(r) => {
                        add_links(&mut followed_links, followed);
                        r
                    }
                    LinksOutside::Missing | LinksOutside::Loop => return Some((named, plan::ResolvedPath::Missing)),
                    LinksOutside::LinkIn(link, by) => {
                        return Some((named, plan::ResolvedPath::ThroughWorkspace { link, by }))
                    }
                };
                (real != named).then_some((named, plan::ResolvedPath::Real(real)))
            })
            .collect(),
        followed_links,
        approver_key: crate::approval::approver_key_path_in(|| home.map(Path::to_path_buf))
            .and_then(|k| std::fs::canonicalize(k).ok())
            .filter(|k| k.is_file()),
        launcher_dirs: workspace
            .parent()
            .map(|p| p.join(crate::workspace::overlay::BESIDE_WORKSPACE))
            .filter(|d| d.is_dir())
            .into_iter()
            .collect(),
        git_layout: git,
    }
}

/// The CPUs this process may run on (its affinity mask), at least 1.
fn usable_cpus() -> u64 {
    use nix::sched::{sched_getaffinity, CpuSet};
    let Ok(set) = sched_getaffinity(nix::unistd::Pid::from_raw(0)) else {
        return 1;
    };
    ((0..CpuSet::count()).filter(|&i| set.is_set(i).unwrap_or(false)).count() as u64).max(1)
}

/// Secrets of the system that only root can read, as (files, directories),
/// for a sandbox whose files map to host root (see `plan`): the password
/// and group shadows, sudoers, SSH host keys, and, where they are not
/// readable by others, the usual places of private keys and credentials
/// (TLS keys, systemd credentials, VPN and Wi-Fi secrets, keytabs). One
/// `stat` each: walking all of /etc for what others cannot read would cost
/// milliseconds a run.
fn root_only_secrets() -> (Vec<PathBuf>, Vec<PathBuf>) {
    const ALWAYS: [&str; 6] = [
        "/etc/shadow",
        "/etc/shadow-",
        "/etc/gshadow",
        "/etc/gshadow-",
        "/etc/security/opasswd",
        "/etc/sudoers",
    ];
    const UNLESS_PUBLIC: [&str; 18] = [
        "/etc/ssl/private",
        "/etc/pki/tls/private",
        "/etc/credstore",
        "/etc/credstore.encrypted",
        "/etc/wireguard",
        "/etc/NetworkManager/system-connections",
        "/etc/ppp/chap-secrets",
        "/etc/ppp/pap-secrets",
        "/etc/ipsec.secrets",
        "/etc/ipsec.d/private",
        "/etc/openvpn",
        "/etc/letsencrypt/archive",
        "/etc/letsencrypt/live",
        "/etc/docker/key.json",
        "/etc/krb5.keytab",
        "/etc/mysql/debian.cnf",
        "/etc/libvirt/secrets",
        "/etc/sudoers.d",
    ];
    let (mut files, mut dirs) = (Vec::new(), Vec::new());
    let ssh_host_keys = std::fs::read_dir("/etc/ssh")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name().is_some_and(|n| {
                let n = n.to_string_lossy();
                n.starts_with("ssh_host_") && n.ends_with("_key")
            })
        });
    for p in ALWAYS.iter().map(PathBuf::from).chain(ssh_host_keys) {
        if p.is_file() {
            files.push(p);
        }
    }
    for p in UNLESS_PUBLIC.iter().map(PathBuf::from) {
        // Not followed: a link is shown as the link it is.
        let Ok(m) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        let others_read = if m.is_dir() { 0o005 } else { 0o004 };
        if m.mode() & others_read == others_read {
            continue;
        }
        if m.is_dir() {
            dirs.push(p);
        } else if m.is_file() {
            files.push(p);
        }
    }
    (files, dirs)
}

/// Whether `uid`/`gid` (no supplementary groups: the sandbox has none) can
/// search every directory from `/` down to `path` and read `path` itself.
fn reachable_by(path: &Path, uid: u32, gid: u32) -> bool {
    let allows = |m: &std::fs::Metadata, bits: u32| {
        let mode = m.mode();
        if m.uid() == uid {
            mode & (bits << 6) == bits << 6
        } else if m.gid() == gid {
            mode & (bits << 3) == bits << 3
        } else {
            mode & bits == bits
        }
    };
    let mut ancestors: Vec<&Path> = path.ancestors().collect();
    ancestors.reverse();
    ancestors.iter().enumerate().all(|(i, a)| {
        let bits = if i + 1 == ancestors.len() { 0o5 } else { 0o1 };
        std::fs::metadata(a).is_ok_and(|m| allows(&m, bits))
    })
}

/// Directories not inside another one of the list: a bind of the outer one
/// already exposes them (and one bound before its ancestor would only end
/// up hidden beneath it). Order kept.
/// Lists a tool directory left out, once.
fn note_not_shown(list: &mut Vec<(String, String)>, dir: &Path, why: String) {
    let path = dir.display().to_string();
    if !list.iter().any(|(p, _)| *p == path) {
        list.push((path, why));
    }
}

/// Adds the links one resolution followed to `all`, each once.
fn add_links(all: &mut Vec<(PathBuf, PathBuf)>, followed: Vec<(PathBuf, PathBuf)>) {
    for link in followed {
        if !all.contains(&link) {
            all.push(link);
        }
    }
}

/// The prefix to show for a PATH directory instead of it, if any:
/// version-manager shims need their manager's root (`~/.pyenv/shims` →
/// `~/.pyenv`), an interpreter's `bin` needs its prefix (`.../3.12/bin` →
/// `.../3.12`, which has a `lib/` directory of its own, not a link). Never the
/// home itself or `~/.local` (which holds the state directory by default).
/// The caller still refuses a prefix where sandboxed commands write (a run
/// could add the `lib` that widens it).
fn wider_tool_root(dir: &Path, home: Option<&Path>) -> Option<PathBuf> {
    let parent = dir.parent()?;
    let too_wide =
        Some(parent) == home || parent.file_name().is_some_and(|n| n == ".local") || parent == Path::new("/");
    if too_wide {
        return None;
    }
    let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let has_lib = || std::fs::symlink_metadata(parent.join("lib")).is_ok_and(|m| m.is_dir());
    (name == "shims" || (name == "bin" && has_lib())).then(|| parent.to_path_buf())
}

/// Existing protected paths of the workspace, protected by a mount: `.tether`
/// (hidden), and read-only the control files of every git directory (config,
/// hooks, `commondir`: see `policy::GIT_CONTROL`) and a `.git` that is a
/// file (a worktree's or submodule's pointer to its git directory). `.env*`
/// files are found by the secret scan; policy files are listed by the policy.
fn protected_present(workspace: &Path, git: &crate::workspace::GitLayout) -> Vec<(PathBuf, bool)> {
    let mut candidates = vec![PathBuf::from(".tether")];
    if git.dirs.is_empty() {
        candidates.push(".git".into());
    }
    for g in &git.dirs {
        candidates.extend(crate::workspace::GIT_CONTROL.iter().map(|c| g.join(c)));
    }
    candidates.extend(git.pointers.iter().cloned());
    candidates.extend(git.checkouts_without_git.iter().cloned());
    let mut out = Vec::new();
    for rel in candidates {
        let p = workspace.join(&rel);
        if let Ok(m) = std::fs::symlink_metadata(&p) {
            if !m.file_type().is_symlink() {
                out.push((p, m.is_dir()));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_only_paths_resolve_like_canonicalize_but_never_through_a_workspace() {
        use crate::workspace::WrittenBy;
        let d = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(d.path()).unwrap();
        let (ws, out, other, state) = (
            base.join("ws"),
            base.join("out"),
            base.join("other"),
            base.join("state"),
        );
        for dir in [ws.join("inner"), out.join("real/sub"), other.clone()] {
            std::fs::create_dir_all(dir).unwrap();
        }
        // Sandboxed commands have run in `other` with this state directory.
        crate::workspace::remember_written(&state, &other).unwrap();
        let link = |target: &Path, at: &Path| std::os::unix::fs::symlink(target, at).unwrap();
        link(&out.join("real"), &out.join("abs"));
        link(Path::new("real"), &out.join("rel"));
        link(Path::new("../out/real/sub/.."), &out.join("up"));
        link(&ws.join("inner"), &out.join("into"));
        link(&out.join("real"), &ws.join("planted"));
        link(&ws.join("planted"), &out.join("via"));
        link(&out.join("real"), &other.join("planted"));
        let real = out.join("real");
        let here = |p: PathBuf| LinksOutside::LinkIn(p, WrittenBy::ThisWorkspace);
        for (named, want) in [
            (out.join("abs/sub"), LinksOutside::Real(real.join("sub"))),
            (out.join("rel"), LinksOutside::Real(real.clone())),
            (out.join("up"), LinksOutside::Real(real.clone())),
            (out.join("into"), LinksOutside::Real(ws.join("inner"))),
            (ws.join("planted/sub"), here(ws.join("planted"))),
            (out.join("via"), here(ws.join("planted"))),
            (
                other.join("planted/sub"),
                LinksOutside::LinkIn(other.join("planted"), WrittenBy::Workspace(other.clone())),
            ),
            (out.join("missing"), LinksOutside::Missing),
        ] {
            let written = WrittenWorkspaces::new(&ws, Some(&state));
            assert_eq!(resolve_links_outside(&named, &written), want, "{}", named.display());
            if let LinksOutside::Real(r) = &want {
                assert_eq!(&std::fs::canonicalize(&named).unwrap(), r, "as canonicalize");
            }
        }
        // Without a state directory, `other` is a directory like any other;
        // with a record that cannot be read, no link outside the workspace
        // is followed.
        let unknown = WrittenWorkspaces::new(&ws, None);
        assert_eq!(
            resolve_links_outside(&other.join("planted/sub"), &unknown),
            LinksOutside::Real(real.join("sub"))
        );
        std::fs::remove_dir_all(state.join("workspaces")).unwrap();
        std::fs::write(state.join("workspaces"), b"not a directory").unwrap();
        let unreadable = WrittenWorkspaces::new(&ws, Some(&state));
        assert_eq!(
            resolve_links_outside(&out.join("abs"), &unreadable),
            LinksOutside::LinkIn(out.join("abs"), WrittenBy::Unrecorded(state.join("workspaces")))
        );
    }

    /// A recorded workspace renamed since (or reached through another mount)
    /// is known by its device and inode; one nested in the run's workspace
    /// is told apart from it (a policy file there is not this run's to
    /// pin); captures of writes count as written.
    #[test]
    fn recorded_workspaces_are_known_after_a_rename_nested_and_by_their_captures() {
        use crate::workspace::{WrittenBy, WrittenWorkspaces};
        let d = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(d.path()).unwrap();
        let (ws, other, moved, state) = (
            base.join("ws"),
            base.join("other"),
            base.join("moved"),
            base.join("state"),
        );
        std::fs::create_dir_all(other.join("real")).unwrap();
        std::fs::create_dir_all(ws.join("nested")).unwrap();
        crate::workspace::remember_written(&state, &other).unwrap();
        crate::workspace::remember_written(&state, &ws.join("nested")).unwrap();
        std::os::unix::fs::symlink(other.join("real"), other.join("link")).unwrap();
        std::fs::rename(&other, &moved).unwrap();
        let written = WrittenWorkspaces::new(&ws, Some(&state));
        assert_eq!(
            resolve_links_outside(&moved.join("link"), &written),
            LinksOutside::LinkIn(moved.join("link"), WrittenBy::Workspace(moved.clone()))
        );
        assert_eq!(
            written.holding(&ws.join("nested/policy.toml")),
            Some(WrittenBy::Workspace(ws.join("nested")))
        );
        assert_eq!(written.holding(&ws.join("policy.toml")), Some(WrittenBy::ThisWorkspace));
        assert_eq!(written.holding(&base.join("elsewhere/policy.toml")), None);
        let beside = base.join(crate::workspace::overlay::BESIDE_WORKSPACE);
        assert_eq!(
            written.holding(&beside.join("previews/x/upper/lib")),
            Some(WrittenBy::Captures(beside))
        );
        assert_eq!(
            written.holding(&state.join("previews/x/upper/lib")),
            Some(WrittenBy::Captures(state.join("previews")))
        );
        assert_eq!(written.holding(&state.join("policies/p.json")), None);
    }

    /// A file of the run's workspace that runs in an enclosing workspace can
    /// rewrite is another's too.
    #[test]
    fn a_workspace_inside_a_recorded_one_is_written_by_the_enclosing_ones_runs() {
        use crate::workspace::{WrittenBy, WrittenWorkspaces};
        let d = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(d.path()).unwrap();
        let (outer, state) = (base.join("proj"), base.join("state"));
        let inner = outer.join("sub");
        std::fs::create_dir_all(&inner).unwrap();
        let written = WrittenWorkspaces::new(&inner, Some(&state));
        let policy = inner.join("tether.toml");
        assert_eq!(written.others_holding(&policy), None);
        crate::workspace::remember_written(&state, &inner).unwrap();
        assert_eq!(written.others_holding(&policy), None, "its own record");
        crate::workspace::remember_written(&state, &outer).unwrap();
        assert_eq!(written.holding(&policy), Some(WrittenBy::ThisWorkspace));
        assert_eq!(
            written.others_holding(&policy),
            Some(WrittenBy::Workspace(outer.clone()))
        );
    }

    /// A generation written by a version before the record of workspaces
    /// names its workspace too.
    #[test]
    fn workspaces_with_a_generation_count_as_written() {
        let d = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(d.path()).unwrap();
        let (ws, other, state) = (base.join("ws"), base.join("other"), base.join("state"));
        std::fs::create_dir_all(other.join("real")).unwrap();
        std::os::unix::fs::symlink(other.join("real"), other.join("link")).unwrap();
        crate::workspace::bump_generation(&state, &other).unwrap();
        let written = WrittenWorkspaces::new(&ws, Some(&state));
        assert_eq!(
            resolve_links_outside(&other.join("link"), &written),
            LinksOutside::LinkIn(
                other.join("link"),
                crate::workspace::WrittenBy::Workspace(other.clone())
            )
        );
    }
}
