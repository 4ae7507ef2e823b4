//! The files a git configuration includes (`include.path`,
//! `includeIf.<condition>.path`) that lie in the workspace.
//!
//! Why: git obeys an included file as it obeys `.git/config` itself
//! (`core.fsmonitor`, `core.hooksPath`, aliases run programs). Sharing a
//! repository's settings through a file it tracks is a common recipe
//! (`git config include.path ../.gitconfig`), and that file is an ordinary
//! workspace file: a run could write it, and the person's next `git status`
//! on the host (an editor runs one every few seconds) would run what the
//! run put there. So every path git reads on the way to an included file in
//! the workspace is protected like `.git/config`: an existing file is
//! read-only, one that does not exist yet may not be made, and neither may
//! a symlink git follows to it nor any directory above them be replaced.
//!
//! Which configurations: each git directory of the workspace (`config` and
//! `config.worktree`), a git directory outside that the workspace's `.git`
//! file names, and the person's global and system files, whose
//! `includeIf "gitdir:~/work/"` may well name a file in the workspace. Every
//! condition is taken as met (which one holds depends on where git runs),
//! and included files are read for includes of their own, as deep as git
//! goes. A configuration this reader cannot follow is reported, with its
//! file and line, rather than passed over: what it could include would be
//! unprotected.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

/// How deep git follows includes (`MAX_INCLUDE_DEPTH` in git's config.c).
const MAX_DEPTH: usize = 10;
/// Symlinks followed in one path, as the kernel allows.
const MAX_LINKS: usize = 40;
/// A configuration larger than this is not read (git's are a few kB).
const MAX_CONFIG_BYTES: u64 = 4 << 20;

/// What the workspace must protect for the configurations git reads there.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GitIncludes {
    /// Included files that exist in the workspace, as regular files
    /// (absolute, links resolved): read-only in a run.
    pub files: Vec<PathBuf>,
    /// Workspace-relative paths git reads on the way to an included file:
    /// each symlink it follows inside the workspace and the file's own path,
    /// whether it exists or not. No run may make, replace or remove one,
    /// nor any directory above one.
    pub paths: Vec<PathBuf>,
    /// Workspace-relative directories a configuration names as the
    /// repository's hooks (`core.hooksPath`: `.githooks`, husky's
    /// `.husky/_`): git runs what is there on the person's commit,
    /// checkout or fetch, as it runs `.git/hooks`. Nothing in one may be
    /// made, changed or removed (an existing one is also in `files`, and
    /// read-only in a run; its own path, and the links on the way, are in
    /// `paths`).
    pub hook_dirs: Vec<PathBuf>,
}

impl GitIncludes {
    /// Whether a change at `rel` (workspace-relative) could change what git
    /// includes or runs: `rel` is one of [`GitIncludes::paths`] or a
    /// directory above one, or lies in one of [`GitIncludes::hook_dirs`].
    pub fn guards(&self, rel: &Path) -> bool {
        self.paths.iter().any(|p| p.starts_with(rel)) || self.hook_dirs.iter().any(|d| rel.starts_with(d))
    }
}

/// A configuration git would read that this reader cannot follow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}:{line}: {why}", path.display())]
pub struct UnreadableConfig {
    pub path: PathBuf,
    pub line: usize,
    pub why: String,
}

/// The includes of every configuration git reads for the workspace `root`
/// (canonical): those of the git directories `git_dirs` (absolute: the
/// workspace's own, one outside that its `.git` file names, those of
/// repositories around it), the global and system files of each of `homes`,
/// and the includes git is given in its environment (`GIT_CONFIG_COUNT`).
pub fn includes(
    root: &Path,
    git_dirs: &[PathBuf],
    work_trees: &[PathBuf],
    homes: &[PathBuf],
) -> Result<GitIncludes, UnreadableConfig> {
    let mut configs: Vec<PathBuf> = Vec::new();
    for d in git_dirs {
        configs.push(d.join("config"));
        configs.push(d.join("config.worktree"));
        // A linked worktree's settings are its common directory's.
        if let Ok(common) = super::read_planted(&d.join("commondir"), 4096) {
            let common = common.trim_ascii();
            if !common.is_empty() {
                configs.push(d.join(OsStr::from_bytes(common)).join("config"));
            }
        }
    }
    for h in homes {
        configs.push(h.join(".gitconfig"));
        configs.push(h.join(".config/git/config"));
    }
    if let Some(x) = std::env::var_os("XDG_CONFIG_HOME").filter(|x| Path::new(x).is_absolute()) {
        configs.push(Path::new(&x).join("git/config"));
    }
    // Where the person's git is told to read them instead.
    for var in ["GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM"] {
        if let Some(f) = std::env::var_os(var).filter(|f| Path::new(f).is_absolute()) {
            configs.push(PathBuf::from(f));
        }
    }
    // The system file of git as Debian builds it, and as others do.
    for f in SYSTEM_CONFIGS {
        configs.push(PathBuf::from(f));
    }
    let mut seen = Vec::new();
    configs.retain(|c| {
        let new = !seen.contains(c);
        seen.push(c.clone());
        new
    });

    // The work trees hooks run in: the workspace's top, each of its
    // repositories' (a git directory named `.git` is beside its tree), and
    // those the caller knows otherwise (submodules' and linked worktrees').
    let mut trees = vec![root.to_path_buf()];
    let beside = git_dirs
        .iter()
        .filter(|d| d.file_name() == Some(OsStr::new(".git")))
        .filter_map(|d| d.parent());
    for t in beside.chain(work_trees.iter().map(PathBuf::as_path)) {
        if t.starts_with(root) && !trees.iter().any(|x| x == t) {
            trees.push(t.to_path_buf());
        }
    }
    let mut found = GitIncludes::default();
    // The person's homes, for the files their git reads there: not one in
    // the workspace (tether sets `HOME` to the workspace; the person's git
    // runs with their own).
    let person_homes: Vec<PathBuf> = homes.iter().filter(|h| !h.starts_with(root)).cloned().collect();
    // Where git reads the person's global ignore and attributes files when
    // no `core.excludesFile`/`core.attributesFile` names others.
    let xdg =
        std::env::var_os("XDG_CONFIG_HOME").filter(|x| Path::new(x).is_absolute() && !Path::new(x).starts_with(root));
    let config_homes: Vec<PathBuf> = xdg
        .map(PathBuf::from)
        .into_iter()
        .chain(person_homes.iter().map(|h| h.join(".config")))
        .collect();
    for base in &config_homes {
        for name in ["git/ignore", "git/attributes"] {
            found.follow(root, &base.join(name), &base.join(name).to_string_lossy(), 0)?;
        }
    }
    // (the file as git names it, how deep in includes): git takes a relative
    // include from the directory of the file as named, links not resolved.
    let mut stack: Vec<(PathBuf, usize)> = configs.into_iter().rev().map(|c| (c, 0)).collect();
    // Includes git is given as `-c`-style variables in its environment:
    // absolute or from a home only (git refuses relative ones there).
    for (key, value) in environment_includes() {
        for target in expand(&value, Path::new("/"), homes) {
            found.follow(root, &target, &key, 0)?;
            stack.push((target, 1));
        }
    }
    while let Some((config, depth)) = stack.pop() {
        // Where it really is, and what of the workspace git reads on the way
        // (a configuration of the workspace's own repository git names through
        // a symlink into the workspace, an included file anywhere).
        let shown = config.display().to_string();
        let real = if depth == 0 {
            let mut on_the_way = Vec::new();
            let (real, linked) = walk(root, &config, &mut on_the_way).ok_or_else(|| UnreadableConfig {
                path: config.clone(),
                line: 0,
                why: "its path has more symlinks than a lookup follows".into(),
            })?;
            // One of the person's own files git reads that is in the
            // workspace, or reached through it (a dotfiles checkout, a
            // `GIT_CONFIG_GLOBAL` there, `~/.config/git` linked into it),
            // existing or not: protected like an included file. The
            // workspace's own git directories' files are already.
            let own_git_dir = real.strip_prefix(root).is_ok_and(|r| {
                git_dirs
                    .iter()
                    .any(|d| d.strip_prefix(root).is_ok_and(|d| r.starts_with(d)))
            });
            if linked || (real.starts_with(root) && !own_git_dir) {
                found.follow(root, &config, &shown, 0)?;
            }
            real
        } else {
            match walk(root, &config, &mut Vec::new()) {
                Some((real, _)) => real,
                None => continue,
            }
        };
        let Ok(text) = super::read_planted(&real, MAX_CONFIG_BYTES + 1) else {
            // Absent (most of them are), or not a regular file: git reads
            // nothing there either.
            continue;
        };
        if text.len() as u64 > MAX_CONFIG_BYTES {
            return Err(UnreadableConfig {
                path: config,
                line: 0,
                why: format!("larger than {MAX_CONFIG_BYTES} bytes"),
            });
        }
        let base = config.parent().unwrap_or(Path::new("/")).to_path_buf();
        let values = config_values(&text).map_err(|(line, why)| UnreadableConfig {
            path: config.clone(),
            line,
            why,
        })?;
        for (line, value) in values.includes {
            for target in expand(&value, &base, homes) {
                found.follow(root, &target, &format!("{shown}:{line}"), line)?;
                if depth + 1 < MAX_DEPTH {
                    stack.push((target, depth + 1));
                }
            }
        }
        // Read like an included file (protected like one: a FIFO put in its
        // place would hang every git command of the person's).
        // A relative one is taken from the top of the work tree git runs in.
        for (line, value) in values.read_files {
            for tree in &trees {
                for target in expand(&value, tree, &person_homes) {
                    found.follow(root, &target, &format!("{shown}:{line}"), line)?;
                }
            }
        }
        // Relative to where hooks run, the top of a work tree: the
        // workspace's, or any repository's in it (which one this
        // configuration serves is not told here: all of them, to be safe).
        for (line, value) in values.hooks_paths {
            for tree in &trees {
                for target in expand(&value, tree, homes) {
                    found.hooks(root, git_dirs, &target, &format!("{shown}:{line}"), line)?;
                }
            }
        }
    }
    found.paths.sort();
    found.paths.dedup();
    found.hook_dirs.sort();
    found.hook_dirs.dedup();
    Ok(found)
}

/// Where git's system configuration is, as git is built by distributions
/// (`/etc`), from source (`/usr/local/etc`) and by Homebrew.
const SYSTEM_CONFIGS: [&str; 4] = [
    "/etc/gitconfig",
    "/usr/local/etc/gitconfig",
    "/opt/homebrew/etc/gitconfig",
    "/home/linuxbrew/.linuxbrew/etc/gitconfig",
];

impl GitIncludes {
    /// Records what of the workspace git reads to include `target`, named
    /// at `origin` (`line` there).
    fn follow(&mut self, root: &Path, target: &Path, origin: &str, line: usize) -> Result<(), UnreadableConfig> {
        let error = |why: String| UnreadableConfig {
            path: PathBuf::from(origin),
            line,
            why,
        };
        let Some((resolved, _)) = walk(root, target, &mut self.paths) else {
            return Err(error(format!(
                "includes `{}`, whose path has more symlinks than a lookup follows",
                target.display()
            )));
        };
        let meta = std::fs::metadata(&resolved).ok().filter(|m| m.is_file());
        if let Some(m) = meta.filter(|_| resolved.starts_with(root)) {
            // A read-only mount covers one name: through another hard link
            // the run would write the same file.
            if m.nlink() > 1 {
                return Err(error(format!(
                    "includes `{}`, which has other hard links, through which a run could change it; give it a name of its own (`cp F F.new && mv F.new F`)",
                    resolved.display()
                )));
            }
            if !self.files.contains(&resolved) {
                self.files.push(resolved);
            }
        }
        Ok(())
    }
}

impl GitIncludes {
    /// Records a hooks directory named at `origin` (`line` there), if it
    /// is in the workspace and not in one of its git directories (whose
    /// `hooks` are protected already).
    fn hooks(
        &mut self,
        root: &Path,
        git_dirs: &[PathBuf],
        target: &Path,
        origin: &str,
        line: usize,
    ) -> Result<(), UnreadableConfig> {
        let error = |why: String| UnreadableConfig {
            path: PathBuf::from(origin),
            line,
            why,
        };
        let mut on_the_way = Vec::new();
        let Some((resolved, _)) = walk(root, target, &mut on_the_way) else {
            return Err(error(format!(
                "names `{}` as its hooks, whose path has more symlinks than a lookup follows",
                target.display()
            )));
        };
        let Ok(rel) = resolved.strip_prefix(root) else {
            self.paths.extend(on_the_way);
            return Ok(());
        };
        if rel.as_os_str().is_empty() || git_dirs.iter().any(|d| resolved.starts_with(d)) {
            self.paths.extend(on_the_way);
            return Ok(());
        }
        if let Ok(entries) = std::fs::read_dir(&resolved) {
            // A read-only mount covers one name: through another hard link
            // in the workspace the run would write the same hook.
            for e in entries.flatten() {
                if e.metadata().is_ok_and(|m| m.is_file() && m.nlink() > 1) {
                    return Err(error(format!(
                        "names `{}` as its hooks, where `{}` has other hard links, through which a run could change it; give it a name of its own (`cp F F.new && mv F.new F`)",
                        resolved.display(),
                        e.path().display()
                    )));
                }
            }
            if std::fs::symlink_metadata(&resolved).is_ok_and(|m| m.is_dir()) && !self.files.contains(&resolved) {
                self.files.push(resolved.clone());
            }
        }
        self.paths.extend(on_the_way);
        self.hook_dirs.push(rel.to_path_buf());
        Ok(())
    }
}

/// `include.path` and `includeIf.*.path` among the variables git is given
/// in its environment (`GIT_CONFIG_COUNT`, `GIT_CONFIG_KEY_n`,
/// `GIT_CONFIG_VALUE_n`), each with the name of its variable.
fn environment_includes() -> Vec<(String, Vec<u8>)> {
    let count: usize = std::env::var("GIT_CONFIG_COUNT")
        .ok()
        .and_then(|c| c.trim().parse().ok())
        .unwrap_or(0);
    (0..count.min(1000))
        .filter_map(|i| {
            let key = std::env::var(format!("GIT_CONFIG_KEY_{i}")).ok()?.to_ascii_lowercase();
            let include = key == "include.path" || (key.starts_with("includeif.") && key.ends_with(".path"));
            let value = std::env::var_os(format!("GIT_CONFIG_VALUE_{i}"))?;
            include.then(|| (format!("GIT_CONFIG_VALUE_{i}"), value.as_bytes().to_vec()))
        })
        .collect()
}

/// The paths an include's value names: `~/` is each home's, a relative path
/// is the including file's directory's. `%(prefix)/` (git's own
/// installation) is never in a workspace.
fn expand(value: &[u8], base: &Path, homes: &[PathBuf]) -> Vec<PathBuf> {
    if value.starts_with(b"%(prefix)/") || value.is_empty() {
        return Vec::new();
    }
    if value == b"~" || value.starts_with(b"~/") {
        let rest = OsStr::from_bytes(value[1..].strip_prefix(b"/").unwrap_or(&[]));
        return homes.iter().map(|h| h.join(rest)).collect();
    }
    if let Some(named) = value.strip_prefix(b"~") {
        let (user, rest) = match named.iter().position(|c| *c == b'/') {
            Some(i) => (&named[..i], &named[i + 1..]),
            None => (named, &[][..]),
        };
        return std::str::from_utf8(user)
            .ok()
            .and_then(|u| nix::unistd::User::from_name(u).ok().flatten())
            .map(|u| u.dir.join(OsStr::from_bytes(rest)))
            .into_iter()
            .collect();
    }
    vec![base.join(OsStr::from_bytes(value))]
}

/// Resolves `path` as the kernel would, recording (relative to `root`) what
/// of `root` the lookup depends on: each symlink it follows, each directory
/// it steps back out of (`dir/..`: swapped for a symlink, it would lead
/// elsewhere), and where it ends. `None`: too many symlinks. With the end,
/// whether a symlink was followed.
fn walk(root: &Path, path: &Path, seen: &mut Vec<PathBuf>) -> Option<(PathBuf, bool)> {
    let inside = |p: &Path| {
        p.strip_prefix(root)
            .ok()
            .filter(|r| !r.as_os_str().is_empty())
            .map(Path::to_path_buf)
    };
    let mut done = PathBuf::from("/");
    let mut todo: Vec<PathBuf> = path.components().rev().map(|c| c.as_os_str().into()).collect();
    let mut links = 0;
    while let Some(c) = todo.pop() {
        match Path::new(&c).components().next() {
            Some(Component::RootDir) => done = PathBuf::from("/"),
            Some(Component::ParentDir) => {
                seen.extend(inside(&done));
                done.pop();
            }
            Some(Component::Normal(name)) => {
                let next = done.join(name);
                match std::fs::symlink_metadata(&next) {
                    Ok(m) if m.file_type().is_symlink() => {
                        links += 1;
                        if links > MAX_LINKS {
                            return None;
                        }
                        seen.extend(inside(&next));
                        let target = std::fs::read_link(&next).ok()?;
                        todo.extend(target.components().rev().map(|c| c.as_os_str().into()));
                    }
                    _ => done = next,
                }
            }
            _ => {}
        }
    }
    seen.extend(inside(&done));
    Some((done, links > 0))
}

/// The values of `include.path` and `includeIf.*.path` in a configuration's
/// text, with their line numbers, read by git's rules (sections and keys
/// case-insensitive, `[section] key = value` on one line, quotes, escapes,
/// comments, continuation lines). Err: (line, what is wrong).
pub fn include_values(text: &[u8]) -> Result<Vec<(usize, Vec<u8>)>, SyntaxError> {
    config_values(text).map(|v| v.includes)
}

/// What of a configuration names files git reads or runs: its includes and
/// its `core.hooksPath` values, each with its line number.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ConfigValues {
    pub includes: Vec<(usize, Vec<u8>)>,
    pub hooks_paths: Vec<(usize, Vec<u8>)>,
    /// `core.excludesFile` and `core.attributesFile`: files every git
    /// command of the person's reads (a FIFO there hangs them all).
    pub read_files: Vec<(usize, Vec<u8>)>,
}

/// [`include_values`], and the `core.hooksPath` values, read by git's rules.
pub fn config_values(text: &[u8]) -> Result<ConfigValues, SyntaxError> {
    let mut p = Parser { s: text, i: 0, line: 1 };
    if p.s.starts_with(b"\xef\xbb\xbf") {
        p.i = 3;
    }
    let mut section = String::new();
    let mut out = ConfigValues::default();
    loop {
        p.skip_blank();
        let Some(c) = p.peek() else { break };
        match c {
            b'\n' => p.bump(),
            b'#' | b';' => p.skip_line(),
            b'[' => section = p.section()?,
            c if c.is_ascii_alphabetic() => {
                let line = p.line;
                let key = p.key();
                p.skip_blank();
                let value = match p.peek() {
                    Some(b'=') => {
                        p.bump();
                        Some(p.value()?)
                    }
                    None | Some(b'\n' | b'#' | b';') => {
                        p.skip_line();
                        None
                    }
                    Some(_) => return Err((p.line, "a key is followed by something other than `=`".into())),
                };
                let include = section == "include" || section.starts_with("includeif.");
                if let Some(v) = value {
                    if include && key == "path" {
                        out.includes.push((line, v));
                    } else if section == "core" && key == "hookspath" {
                        out.hooks_paths.push((line, v));
                    } else if section == "core" && (key == "excludesfile" || key == "attributesfile") {
                        out.read_files.push((line, v));
                    }
                }
            }
            _ => return Err((p.line, "neither a section, a key nor a comment".into())),
        }
    }
    Ok(out)
}

/// Where a configuration's text breaks git's rules: (line, what is wrong).
pub type SyntaxError = (usize, String);

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
    line: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn bump(&mut self) {
        if self.peek() == Some(b'\n') {
            self.line += 1;
        }
        self.i += 1;
    }

    fn skip_blank(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\r')) {
            self.bump();
        }
    }

    fn skip_line(&mut self) {
        while let Some(c) = self.peek() {
            self.bump();
            if c == b'\n' {
                break;
            }
        }
    }

    /// `[name]`, `[name "subsection"]` or `[name.sub]`: the section's name
    /// lowercased, a subsection after a dot as written.
    fn section(&mut self) -> Result<String, SyntaxError> {
        self.bump(); // [
        let mut name = String::new();
        while let Some(c) = self.peek() {
            if c.is_ascii_alphanumeric() || c == b'-' || c == b'.' {
                name.push(c.to_ascii_lowercase() as char);
                self.bump();
            } else {
                break;
            }
        }
        self.skip_blank();
        match self.peek() {
            Some(b']') => {
                self.bump();
                Ok(name)
            }
            Some(b'"') => {
                self.bump();
                let mut sub = String::new();
                loop {
                    match self.peek() {
                        None | Some(b'\n') => return Err((self.line, "a section's name is not closed".into())),
                        Some(b'"') => {
                            self.bump();
                            break;
                        }
                        Some(b'\\') => {
                            self.bump();
                            match self.peek() {
                                None | Some(b'\n') => return Err((self.line, "a section's name is not closed".into())),
                                Some(c) => {
                                    sub.push(c as char);
                                    self.bump();
                                }
                            }
                        }
                        Some(c) => {
                            sub.push(c as char);
                            self.bump();
                        }
                    }
                }
                if self.peek() != Some(b']') {
                    return Err((self.line, "a section header does not end with `]`".into()));
                }
                self.bump();
                Ok(format!("{name}.{sub}"))
            }
            _ => Err((self.line, "a section header does not end with `]`".into())),
        }
    }

    fn key(&mut self) -> String {
        let mut key = String::new();
        while let Some(c) = self.peek() {
            if c.is_ascii_alphanumeric() || c == b'-' {
                key.push(c.to_ascii_lowercase() as char);
                self.bump();
            } else {
                break;
            }
        }
        key
    }

    /// A value after `=`, to the end of its line (continuations included),
    /// as bytes (a name need not be UTF-8); git, reading it as a C string,
    /// stops at a NUL.
    fn value(&mut self) -> Result<Vec<u8>, SyntaxError> {
        let mut out: Vec<u8> = Vec::new();
        // Whitespace is kept only between other characters, or quoted.
        let mut kept = 0;
        let mut quoted = false;
        loop {
            let Some(c) = self.peek() else {
                if quoted {
                    return Err((self.line, "a quoted value is not closed".into()));
                }
                break;
            };
            match c {
                b'\n' => {
                    if quoted {
                        return Err((self.line, "a quoted value is not closed".into()));
                    }
                    self.bump();
                    break;
                }
                b'#' | b';' if !quoted => {
                    self.skip_line();
                    break;
                }
                b'"' => {
                    quoted = !quoted;
                    self.bump();
                    kept = out.len();
                }
                b'\\' => {
                    self.bump();
                    let e = self.peek();
                    self.bump();
                    match e {
                        // At the very end, as at the end of a line.
                        None => break,
                        Some(b'\n') => continue,
                        Some(b'\r') if self.peek() == Some(b'\n') => {
                            self.bump();
                            continue;
                        }
                        Some(b'\\') => out.push(b'\\'),
                        Some(b'"') => out.push(b'"'),
                        Some(b'n') => out.push(b'\n'),
                        Some(b't') => out.push(b'\t'),
                        Some(b'b') => out.push(0x08),
                        _ => return Err((self.line, "an escape git does not know".into())),
                    }
                    kept = out.len();
                }
                b' ' | b'\t' | b'\r' if !quoted => {
                    if !out.is_empty() {
                        out.push(c);
                    }
                    self.bump();
                }
                c => {
                    out.push(c);
                    kept = out.len();
                    self.bump();
                }
            }
        }
        out.truncate(kept);
        if let Some(nul) = out.iter().position(|c| *c == 0) {
            out.truncate(nul);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hooks_paths_are_read_with_the_includes() {
        let text = b"[core]\n\thooksPath = .githooks\n[Core]\nHOOKSPATH=\"sub dir/_\"\n[include]\npath = x.cfg\n[other]\nhookspath = no\n";
        let v = config_values(text).unwrap();
        assert_eq!(v.includes, vec![(6, b"x.cfg".to_vec())]);
        assert_eq!(
            v.hooks_paths,
            vec![(2, b".githooks".to_vec()), (4, b"sub dir/_".to_vec())]
        );
    }

    #[test]
    fn include_values_follow_gits_syntax() {
        let table: &[(&str, &[(usize, &str)])] = &[
            ("[include]\n\tpath = ../.gitconfig\n", &[(2, "../.gitconfig")]),
            ("[Include]\n  PATH=shared.cfg # team\n", &[(2, "shared.cfg")]),
            ("[include] path = one.cfg\n", &[(1, "one.cfg")]),
            (
                "[includeIf \"gitdir:~/work/\"]\n\tpath = \"~/work/.gitconfig\"\n",
                &[(2, "~/work/.gitconfig")],
            ),
            (
                "[includeif \"onbranch:main\"]\npath=a b.cfg ; note\n",
                &[(2, "a b.cfg")],
            ),
            ("[include]\npath = \"  spaced \"\n", &[(2, "  spaced ")]),
            ("[include]\npath = con\\\ntinued\n", &[(2, "continued")]),
            ("[include]\npath = q\\\"x\n", &[(2, "q\"x")]),
            ("[core]\n\tpath = not-an-include\n[user]\nname = x\n", &[]),
            ("# [include]\n; path = x\n[include \"sub\"]\npath = y\n", &[]),
            ("[include]\npath\n", &[]),
            (
                "[core]\nfsmonitor = x\n[include]\n\tpath = a\n\tpath = b\n",
                &[(4, "a"), (5, "b")],
            ),
            // git reads a value as a C string: a NUL ends it.
            ("[include]\npath = ../shared.cfg\0x\n", &[(2, "../shared.cfg")]),
            // A backslash at the very end is the end of the line.
            ("[include]\npath = last\\", &[(2, "last")]),
            ("[alias]\nx = foo\\", &[]),
        ];
        for (text, want) in table {
            let got = include_values(text.as_bytes()).unwrap_or_else(|e| panic!("{text:?}: {e:?}"));
            let want: Vec<(usize, Vec<u8>)> = want.iter().map(|(l, v)| (*l, v.as_bytes().to_vec())).collect();
            assert_eq!(got, want, "{text:?}");
        }
        // Names are bytes, not text.
        let got = include_values(b"[include]\npath = ../caf\xe9.cfg\n").unwrap();
        assert_eq!(got, [(2, b"../caf\xe9.cfg".to_vec())]);
    }

    #[test]
    fn what_this_reader_cannot_follow_is_reported_with_its_line() {
        for (text, line) in [
            ("[include]\npath = \"open\n", 2),
            ("[include\npath = x\n", 1),
            ("[include]\npath = bad\\q\n", 2),
            ("[core]\n= x\n", 2),
            ("[core]\nkey x\n", 2),
        ] {
            let e = include_values(text.as_bytes()).expect_err(text);
            assert_eq!(e.0, line, "{text:?}: {e:?}");
        }
    }

    #[test]
    fn includes_name_files_links_and_missing_paths_inside_the_workspace() {
        let t = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(t.path()).unwrap().join("ws");
        let home = root.parent().unwrap().join("home");
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::create_dir_all(root.join("conf/real")).unwrap();
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(
            root.join(".git/config"),
            "[include]\n\tpath = ../shared.gitconfig\n\tpath = ../link/x.cfg\n\tpath = ../missing/y.cfg\n\tpath = /etc/hostname\n",
        )
        .unwrap();
        // The shared file includes one more, relative to itself.
        std::fs::write(root.join("shared.gitconfig"), "[include]\npath = conf/nested.cfg\n").unwrap();
        std::fs::write(root.join("conf/nested.cfg"), "").unwrap();
        std::os::unix::fs::symlink("conf/real", root.join("link")).unwrap();
        std::fs::write(root.join("conf/real/x.cfg"), "").unwrap();
        // The person's global file includes one from the workspace too.
        std::fs::write(
            home.join(".gitconfig"),
            "[includeIf \"gitdir:~/ws/\"]\npath = ~/../ws/team.cfg\n",
        )
        .unwrap();
        let found = includes(&root, &[root.join(".git")], &[], std::slice::from_ref(&home)).unwrap();
        let rel: Vec<&str> = found.paths.iter().map(|p| p.to_str().unwrap()).collect();
        assert_eq!(
            rel,
            [
                // Stepped back out of (`../shared.gitconfig` from `.git`).
                ".git",
                "conf/nested.cfg",
                "conf/real/x.cfg",
                "link",
                "missing/y.cfg",
                "shared.gitconfig",
                "team.cfg"
            ]
        );
        let mut files = found.files.clone();
        files.sort();
        assert_eq!(
            files,
            [
                root.join("conf/nested.cfg"),
                root.join("conf/real/x.cfg"),
                root.join("shared.gitconfig")
            ]
        );
        assert!(found.guards(Path::new("conf")));
        assert!(found.guards(Path::new("missing")));
        assert!(found.guards(Path::new("link")));
        assert!(!found.guards(Path::new("conf/other.cfg")));
        assert!(!found.guards(Path::new("src")));
    }

    #[test]
    fn a_config_it_cannot_read_is_an_error_naming_its_file_and_line() {
        let t = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(t.path()).unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::write(
            root.join(".git/config"),
            "[core]\n\tbare = false\n[include]\n\tpath = \"x\n",
        )
        .unwrap();
        let e = includes(&root, &[root.join(".git")], &[], &[]).unwrap_err();
        assert_eq!((e.path, e.line), (root.join(".git/config"), 4));
    }

    #[test]
    fn an_included_file_with_other_hard_links_is_an_error() {
        let t = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(t.path()).unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::write(root.join(".git/config"), "[include]\n\tpath = ../shared.cfg\n").unwrap();
        std::fs::write(root.join("shared.cfg"), "").unwrap();
        assert!(includes(&root, &[root.join(".git")], &[], &[]).is_ok());
        std::fs::hard_link(root.join("shared.cfg"), root.join("alias.cfg")).unwrap();
        let e = includes(&root, &[root.join(".git")], &[], &[]).unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.why.contains("hard links"), "{e}");
    }

    #[test]
    fn a_workspace_without_includes_protects_nothing() {
        let t = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(t.path()).unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::write(root.join(".git/config"), "[core]\n\tbare = false\n").unwrap();
        let found = includes(&root, &[root.join(".git")], &[], &[]).unwrap();
        assert_eq!(found, GitIncludes::default());
    }

    /// git takes a relative include from the directory of the file as it
    /// named it, not from where a symlink leads; and a directory a path steps
    /// back out of decides where it leads.
    #[test]
    fn includes_of_a_linked_file_and_paths_through_dotdot_are_followed_as_git_does() {
        let t = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(t.path()).unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::create_dir_all(root.join("conf")).unwrap();
        std::fs::create_dir_all(root.join("up")).unwrap();
        std::fs::write(
            root.join(".git/config"),
            "[include]\n\tpath = ../team.cfg\n\tpath = ../up/../shared.cfg\n",
        )
        .unwrap();
        std::fs::write(root.join("conf/real.cfg"), "[include]\n\tpath = extra.cfg\n").unwrap();
        std::os::unix::fs::symlink("conf/real.cfg", root.join("team.cfg")).unwrap();
        let found = includes(&root, &[root.join(".git")], &[], &[]).unwrap();
        let rel: Vec<&str> = found.paths.iter().map(|p| p.to_str().unwrap()).collect();
        assert_eq!(
            rel,
            [".git", "conf/real.cfg", "extra.cfg", "shared.cfg", "team.cfg", "up"]
        );
    }

    /// The workspace's own `.git/config` named through a symlink into the
    /// workspace: git obeys the file it leads to.
    #[test]
    fn a_config_that_is_a_symlink_into_the_workspace_is_protected_where_it_leads() {
        let t = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(t.path()).unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::write(root.join("my.gitconfig"), "[core]\n").unwrap();
        std::os::unix::fs::symlink("../my.gitconfig", root.join(".git/config")).unwrap();
        let found = includes(&root, &[root.join(".git")], &[], &[]).unwrap();
        let rel: Vec<&str> = found.paths.iter().map(|p| p.to_str().unwrap()).collect();
        // (`.git` too: the link steps back out of it.)
        assert_eq!(rel, [".git", ".git/config", "my.gitconfig"]);
        assert_eq!(found.files, [root.join("my.gitconfig")]);
    }
}
