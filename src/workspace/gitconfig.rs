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
}

impl GitIncludes {
    /// Whether a change at `rel` (workspace-relative) could change what git
    /// includes: `rel` is one of [`GitIncludes::paths`] or a directory above one.
    pub fn guards(&self, rel: &Path) -> bool {
        self.paths.iter().any(|p| p.starts_with(rel))
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
/// (canonical): its git directories `git_dirs` (relative to `root`), a git
/// directory outside it (`outside`), and the global and system files of
/// each of `homes`.
pub fn includes(
    root: &Path,
    git_dirs: &[PathBuf],
    outside: Option<&Path>,
    homes: &[PathBuf],
) -> Result<GitIncludes, UnreadableConfig> {
    let mut configs: Vec<PathBuf> = Vec::new();
    for d in git_dirs
        .iter()
        .map(|d| root.join(d))
        .chain(outside.map(Path::to_path_buf))
    {
        configs.push(d.join("config"));
        configs.push(d.join("config.worktree"));
        // A linked worktree's settings are its common directory's.
        if let Ok(common) = super::read_planted(&d.join("commondir"), 4096) {
            let common = String::from_utf8_lossy(&common).trim().to_string();
            if !common.is_empty() {
                configs.push(d.join(common).join("config"));
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
    configs.push(PathBuf::from("/etc/gitconfig"));
    configs.dedup();

    let mut found = GitIncludes::default();
    let mut stack: Vec<(PathBuf, usize)> = configs.into_iter().map(|c| (c, 0)).collect();
    stack.reverse();
    while let Some((config, depth)) = stack.pop() {
        let Ok(text) = super::read_planted(&config, MAX_CONFIG_BYTES + 1) else {
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
        for (line, value) in include_values(&text).map_err(|(line, why)| UnreadableConfig {
            path: config.clone(),
            line,
            why,
        })? {
            for target in expand(&value, &base, homes) {
                let Some(resolved) = walk(root, &target, &mut found.paths) else {
                    return Err(UnreadableConfig {
                        path: config.clone(),
                        line,
                        why: format!("includes `{value}`, whose path has more symlinks than a lookup follows"),
                    });
                };
                let meta = std::fs::metadata(&resolved).ok().filter(|m| m.is_file());
                if let Some(m) = meta.filter(|_| resolved.starts_with(root)) {
                    // A read-only mount covers one name: through another
                    // hard link the run would write the same file.
                    if std::os::unix::fs::MetadataExt::nlink(&m) > 1 {
                        return Err(UnreadableConfig {
                            path: config.clone(),
                            line,
                            why: format!(
                                "includes `{}`, which has other hard links, through which a run could change it; give it a name of its own (`cp F F.new && mv F.new F`)",
                                resolved.display()
                            ),
                        });
                    }
                    if !found.files.contains(&resolved) {
                        found.files.push(resolved.clone());
                    }
                }
                if depth + 1 < MAX_DEPTH {
                    stack.push((resolved, depth + 1));
                }
            }
        }
    }
    found.paths.sort();
    found.paths.dedup();
    Ok(found)
}

/// The paths an include's value names: `~/` is each home's, a relative path
/// is the including file's directory's. `%(prefix)/` (git's own
/// installation) is never in a workspace.
fn expand(value: &str, base: &Path, homes: &[PathBuf]) -> Vec<PathBuf> {
    if value.starts_with("%(prefix)/") || value.is_empty() {
        return Vec::new();
    }
    if value == "~" || value.starts_with("~/") {
        let rest = value.trim_start_matches('~').trim_start_matches('/');
        return homes.iter().map(|h| h.join(rest)).collect();
    }
    if let Some(named) = value.strip_prefix('~') {
        let (user, rest) = named.split_once('/').unwrap_or((named, ""));
        return nix::unistd::User::from_name(user)
            .ok()
            .flatten()
            .map(|u| u.dir.join(rest))
            .into_iter()
            .collect();
    }
    vec![base.join(value)]
}

/// Resolves `path` as the kernel would, recording (relative to `root`) each
/// symlink inside `root` it follows and, when it ends inside `root`, where
/// it ends. `None`: too many symlinks.
fn walk(root: &Path, path: &Path, seen: &mut Vec<PathBuf>) -> Option<PathBuf> {
    let mut done = PathBuf::from("/");
    let mut todo: Vec<PathBuf> = path.components().rev().map(|c| c.as_os_str().into()).collect();
    let mut links = 0;
    while let Some(c) = todo.pop() {
        match Path::new(&c).components().next() {
            Some(Component::RootDir) => done = PathBuf::from("/"),
            Some(Component::ParentDir) => {
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
                        if let Ok(rel) = next.strip_prefix(root) {
                            seen.push(rel.to_path_buf());
                        }
                        let target = std::fs::read_link(&next).ok()?;
                        todo.extend(target.components().rev().map(|c| c.as_os_str().into()));
                    }
                    _ => done = next,
                }
            }
            _ => {}
        }
    }
    if let Ok(rel) = done.strip_prefix(root) {
        if !rel.as_os_str().is_empty() {
            seen.push(rel.to_path_buf());
        }
    }
    Some(done)
}

/// The values of `include.path` and `includeIf.*.path` in a configuration's
/// text, with their line numbers, read by git's rules (sections and keys
/// case-insensitive, `[section] key = value` on one line, quotes, escapes,
/// comments, continuation lines). Err: (line, what is wrong).
pub fn include_values(text: &[u8]) -> Result<Vec<(usize, String)>, (usize, String)> {
    let text = String::from_utf8_lossy(text);
    let mut p = Parser {
        s: text.as_bytes(),
        i: 0,
        line: 1,
    };
    if p.s.starts_with(b"\xef\xbb\xbf") {
        p.i = 3;
    }
    let mut section = String::new();
    let mut out = Vec::new();
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
                if include && key == "path" {
                    if let Some(v) = value {
                        out.push((line, v));
                    }
                }
            }
            _ => return Err((p.line, "neither a section, a key nor a comment".into())),
        }
    }
    Ok(out)
}

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
    fn section(&mut self) -> Result<String, (usize, String)> {
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

    /// A value after `=`, to the end of its line (continuations included).
    fn value(&mut self) -> Result<String, (usize, String)> {
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
        Ok(String::from_utf8_lossy(&out).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        ];
        for (text, want) in table {
            let got = include_values(text.as_bytes()).unwrap_or_else(|e| panic!("{text:?}: {e:?}"));
            let want: Vec<(usize, String)> = want.iter().map(|(l, v)| (*l, v.to_string())).collect();
            assert_eq!(got, want, "{text:?}");
        }
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
        let found = includes(&root, &[PathBuf::from(".git")], None, std::slice::from_ref(&home)).unwrap();
        let rel: Vec<&str> = found.paths.iter().map(|p| p.to_str().unwrap()).collect();
        assert_eq!(
            rel,
            [
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
        let e = includes(&root, &[PathBuf::from(".git")], None, &[]).unwrap_err();
        assert_eq!((e.path, e.line), (root.join(".git/config"), 4));
    }

    #[test]
    fn an_included_file_with_other_hard_links_is_an_error() {
        let t = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(t.path()).unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::write(root.join(".git/config"), "[include]\n\tpath = ../shared.cfg\n").unwrap();
        std::fs::write(root.join("shared.cfg"), "").unwrap();
        assert!(includes(&root, &[PathBuf::from(".git")], None, &[]).is_ok());
        std::fs::hard_link(root.join("shared.cfg"), root.join("alias.cfg")).unwrap();
        let e = includes(&root, &[PathBuf::from(".git")], None, &[]).unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.why.contains("hard links"), "{e}");
    }

    #[test]
    fn a_workspace_without_includes_protects_nothing() {
        let t = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(t.path()).unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::write(root.join(".git/config"), "[core]\n\tbare = false\n").unwrap();
        let found = includes(&root, &[PathBuf::from(".git")], None, &[]).unwrap();
        assert_eq!(found, GitIncludes::default());
    }
}
