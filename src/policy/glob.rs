//! Path globs: `writable_globs` and the always-protected paths.
//!
//! Globs are matched against workspace-relative paths with `/` separators;
//! `*` stays within one name and `**` crosses directories (globset with
//! `literal_separator`), so `src/*.rs` never matches `src/a/b.rs`.

use super::Policy;
use globset::{Glob, GlobBuilder, GlobSet, GlobSetBuilder};

/// Paths inside the workspace that are protected whatever the globs say.
/// `.env*` is handled in code because templates (`.env.example`) are exempt.
/// What, inside a git directory, makes git run code or take its settings from
/// elsewhere: its config (`core.fsmonitor`, `core.hooksPath`, aliases...),
/// per-worktree config, hooks, and `commondir` (which points the repository's
/// config and hooks at another directory).
pub const GIT_CONTROL: [&str; 4] = ["config", "config.worktree", "hooks", "commondir"];

/// Paths inside the workspace that are protected whatever the globs say: the
/// [`GIT_CONTROL`] entries of `.git`, of its submodules' git directories, of
/// linked worktrees' and of their submodules' (git keeps those under
/// `.git/worktrees/<name>/modules`), `.git` itself when it is a file, and `.tether`.
pub fn builtin_protected_globs() -> Vec<String> {
    let mut out = vec![".git".to_string(), ".tether".into(), ".tether/**".into()];
    for dir in [
        ".git",
        ".git/modules/**",
        ".git/worktrees/*",
        ".git/worktrees/*/modules/**",
    ] {
        for c in GIT_CONTROL {
            out.push(format!("{dir}/{c}"));
        }
        out.push(format!("{dir}/hooks/**"));
    }
    out
}

/// Version of what the secret scan takes for a hit: what [`is_env_secret`]
/// and [`is_secret_name`] accept, and (from 2) a `.git` that is not a
/// directory (a repository's pointer, `workspace::scan_secrets`). The scan's
/// cached listings (`workspace::listing`) record which names were hits under
/// these rules and are read only by a build with the same version: change
/// the rules, change this (a test pins the rules to it).
pub const SECRET_NAME_RULES: u32 = 2;

/// Suffixes that make a `.env*` file a committed template, not a secret.
const ENV_TEMPLATE_SUFFIXES: &[&str] = &[".example", ".sample", ".template", ".dist"];

/// Whether a file name is a `.env` secret (`.env`, `.env.local`), not a template.
pub fn is_env_secret(name: &str) -> bool {
    name.starts_with(".env") && !ENV_TEMPLATE_SUFFIXES.iter().any(|s| name.ends_with(s))
}

/// Whether a file name looks like key material that is hidden inside the sandbox.
pub fn is_secret_name(name: &str) -> bool {
    is_env_secret(name)
        || matches!(name, "id_rsa" | "id_ed25519" | "id_ecdsa" | "authorized_keys")
        || name.ends_with(".pem")
        || name.ends_with(".key")
}

fn build(g: &str) -> Result<Glob, globset::Error> {
    GlobBuilder::new(g)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
}

/// Validate one glob as written in a policy.
pub fn check_glob(g: &str) -> Result<(), String> {
    if g.is_empty() {
        return Err("it is empty".into());
    }
    if g.starts_with('/') {
        return Err("it is absolute; globs are relative to the workspace".into());
    }
    if g.split('/').any(|c| c == "..") {
        return Err("it contains `..`; globs cannot reach outside the workspace".into());
    }
    build(g).map(|_| ()).map_err(|e| e.kind().to_string())
}

/// Compiled globs of a policy.
#[derive(Debug, Clone)]
pub struct PathGlobs {
    /// One set per layer that restricts writes; a write must match all of them.
    writable: Vec<GlobSet>,
    /// Compiled at the first path that could match it (see
    /// [`PathGlobs::protected_by`]): about fifty patterns, 0.9 ms to compile
    /// on this project's slow machine, on the path of every hold and resume.
    protected: std::cell::OnceCell<GlobSet>,
    protected_src: Vec<String>,
    /// Some protected pattern does not start with the component `.git` or
    /// `.tether` (a layer's own), so any path may match one.
    anywhere: bool,
}

impl PathGlobs {
    pub fn compile(policy: &Policy) -> PathGlobs {
        let writable = policy
            .layers
            .iter()
            .filter_map(|l| l.writable_globs.as_ref())
            .map(|globs| {
                let mut b = GlobSetBuilder::new();
                for g in globs {
                    // Validated at load; a directory glob `docs/**` also covers `docs` itself.
                    b.add(build(g).expect("validated glob"));
                    if let Some(dir) = g.strip_suffix("/**") {
                        if let Ok(d) = build(dir) {
                            b.add(d);
                        }
                    }
                }
                b.build().expect("validated globs")
            })
            .collect();
        let protected_src = policy.protected_globs();
        let anywhere = protected_src.iter().any(|g| {
            let first = g.split('/').next().unwrap_or_default();
            first != ".git" && first != ".tether"
        });
        PathGlobs {
            writable,
            protected: std::cell::OnceCell::new(),
            protected_src,
            anywhere,
        }
    }

    fn protected_set(&self) -> &GlobSet {
        self.protected.get_or_init(|| {
            let mut b = GlobSetBuilder::new();
            for g in &self.protected_src {
                b.add(build(g).expect("validated glob"));
            }
            b.build().expect("validated globs")
        })
    }

    /// The protected pattern a workspace-relative path falls under, if any.
    pub fn protected_by(&self, rel: &str) -> Option<String> {
        // A pattern that starts with the component `.git` or `.tether`
        // matches no path that starts otherwise: unless some pattern starts
        // elsewhere (the built-in ones do not), other paths need no set.
        let first = rel.split('/').next().unwrap_or_default();
        if self.anywhere || first == ".git" || first == ".tether" {
            if let Some(i) = self.protected_set().matches(rel).first() {
                return Some(self.protected_src[*i].clone());
            }
        }
        if rel.split('/').any(is_env_secret) {
            return Some(".env*".into());
        }
        None
    }

    /// Whether every layer's `writable_globs` (where given) admit the path.
    pub fn writable(&self, rel: &str) -> bool {
        self.writable.iter().all(|set| set.is_match(rel))
    }

    /// Whether any layer restricts writes to globs.
    pub fn restricted(&self) -> bool {
        !self.writable.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use crate::policy::Policy;

    /// `PathGlobs::protected_by` skips the compiled set for paths outside
    /// `.git` and `.tether` unless some pattern starts elsewhere: the
    /// built-in ones never do, so the default policy always takes the
    /// shortcut.
    #[test]
    fn every_built_in_protected_pattern_starts_in_git_or_tether() {
        for g in builtin_protected_globs() {
            let first = g.split('/').next().unwrap();
            assert!(first == ".git" || first == ".tether", "{g}");
        }
    }

    /// The same answers as a set compiled up front, for paths in and out of
    /// the protected places, with and without a layer's own patterns.
    #[test]
    fn protected_by_answers_as_the_whole_set_does() {
        let own = Layer::parse("protected = [\"secrets/**\", \"*.pem\"]", "p.toml", Format::Toml).unwrap();
        let own_in_git = Layer::parse("protected = [\".git/info/**\"]", "p.toml", Format::Toml).unwrap();
        let paths = [
            "",
            ".git/",
            "./.git/config",
            "/.git/config",
            ".git//config",
            ".git/info/exclude",
            ".tether/",
            ".git",
            ".git/config",
            ".git/hooks/pre-commit",
            ".git/objects/ab/cd",
            ".git/modules/x/config",
            ".git/worktrees/w/HEAD",
            ".tether",
            ".tether/policy.toml",
            ".tetherx",
            "src/.git/config",
            "a.txt",
            "docs/x.md",
            "secrets/k",
            "key.pem",
            "sub/key.pem",
            ".env",
            "app/.env.local",
            ".env.example",
            ".gitignore",
        ];
        for layers in [
            vec![Layer::embedded_default()],
            vec![Layer::embedded_default(), own],
            vec![Layer::embedded_default(), own_in_git],
        ] {
            let policy = Policy::new(layers, Vec::new());
            let lazy = PathGlobs::compile(&policy);
            let src = policy.protected_globs();
            let mut b = globset::GlobSetBuilder::new();
            for g in &src {
                b.add(build(g).unwrap());
            }
            let whole = b.build().unwrap();
            for p in paths {
                let by_set = whole.matches(p).first().map(|i| src[*i].clone());
                let expected = by_set.or_else(|| p.split('/').any(super::is_env_secret).then(|| ".env*".into()));
                assert_eq!(lazy.protected_by(p), expected, "{p}");
            }
        }
    }

    /// What the secret-name rules accept, pinned to their version: the
    /// secret scan's cached listings hold hits found under one version of the
    /// rules (see `workspace::listing`). Changing what is accepted here needs
    /// a new `SECRET_NAME_RULES`.
    #[test]
    fn the_secret_name_rules_are_those_of_their_version() {
        let probe = [
            ".env",
            ".env.local",
            ".env.production",
            ".env.example",
            ".env.sample",
            ".env.template",
            ".env.dist",
            ".envrc",
            "env",
            "x.env",
            "id_rsa",
            "id_ed25519",
            "id_ecdsa",
            "id_dsa",
            "id_rsa.pub",
            "authorized_keys",
            "known_hosts",
            "server.pem",
            "server.key",
            "key.pub",
            "a.crt",
            ".netrc",
            "credentials",
            "secrets.json",
        ];
        let secret: Vec<&str> = probe.iter().copied().filter(|n| is_secret_name(n)).collect();
        let env: Vec<&str> = probe.iter().copied().filter(|n| is_env_secret(n)).collect();
        assert_eq!(
            (SECRET_NAME_RULES, secret, env),
            (
                2,
                vec![
                    ".env",
                    ".env.local",
                    ".env.production",
                    ".envrc",
                    "id_rsa",
                    "id_ed25519",
                    "id_ecdsa",
                    "authorized_keys",
                    "server.pem",
                    "server.key"
                ],
                vec![".env", ".env.local", ".env.production", ".envrc"]
            )
        );
    }

    use super::*;
    use crate::policy::{Format, Layer};

    fn globs(toml: &str) -> PathGlobs {
        Policy::new(vec![Layer::parse(toml, "t", Format::Toml).unwrap()], vec![]).path_globs()
    }

    #[test]
    fn star_stays_in_one_directory() {
        let g = globs(r#"writable_globs = ["src/*.rs", "docs/**"]"#);
        assert!(g.writable("src/a.rs"));
        assert!(!g.writable("src/a/b.rs"));
        assert!(g.writable("docs/x/y.md"));
        assert!(g.writable("docs"));
        assert!(!g.writable("README.md"));
    }

    #[test]
    fn protected_paths() {
        let g = globs("");
        for p in [
            ".git/config",
            ".git/hooks/pre-commit",
            ".tether/x",
            ".env",
            "a/.env.local",
        ] {
            assert!(g.protected_by(p).is_some(), "{p}");
        }
        for p in [".env.example", "src/env.rs", ".git/objects/ab", ".gitignore"] {
            assert!(g.protected_by(p).is_none(), "{p}");
        }
    }
}
