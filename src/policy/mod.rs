//! Policies: load, validate, layer (narrow) and digest.
//!
//! A policy file is one *layer*. `--policy A --policy B` stacks layers, and the
//! effective policy is their intersection: a command or a write is allowed only
//! if every layer allows it, so a later layer (a child agent's) can only narrow
//! what an earlier one (its parent's) allows. Nothing here merges rule lists,
//! because merging is where widening bugs hide: each layer decides on its own
//! and the gate takes the strictest answer.
//!
//! Errors name the file, the line and the column, and say how to fix it. The
//! same schema loads from TOML and from JSON; the JSON form also accepts the
//! keys of tether's `SandboxPolicy.to_dict()` so one document drives both the
//! harness and the launcher.
//!
//! This module reads files and nothing else: rule *examples* are checked by
//! [`crate::load_policy`], which needs the gate's parser.

mod doc;
mod glob;

pub use doc::{is_dangerous_env, landlock_max_known_abi as doc_max_abi, Format, PolicyDoc};
pub use glob::{builtin_protected_globs, is_env_secret, is_secret_name, PathGlobs, GIT_CONTROL, SECRET_NAME_RULES};

use serde::Serialize;
use sha2::{Digest, Sha256};
use std::fmt;
use std::path::{Path, PathBuf};

/// The embedded default: workspace-write on the current directory, no network,
/// every command allowed (still confined by the kernel).
pub const DEFAULT_POLICY_TOML: &str = include_str!("../../policies/default.toml");

/// Largest policy file we read; a policy is a page of text, not a data set.
pub const MAX_POLICY_BYTES: u64 = 1 << 20;

/// One error type for loading and validating policies.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("{file}:{line}:{column}: {message}\n  fix: {fix}")]
    Invalid {
        file: String,
        line: usize,
        column: usize,
        message: String,
        fix: String,
    },
    #[error("{file}: cannot read the policy: {source}")]
    Read {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{file}: the policy is larger than {MAX_POLICY_BYTES} bytes; a policy is a short list of rules")]
    TooLarge { file: String },
}

/// The sandbox profile, as in tether's `SandboxPolicy(profile=...)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Profile {
    /// The workspace is writable (within `writable_globs`, minus protected paths).
    WorkspaceWrite,
    /// Nothing outside the sandbox's private /tmp is writable.
    ReadOnly,
}

/// What the gate says about a command. Ordered: `Allow < Ask < Deny`, so the
/// strictest of several verdicts is their maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Allow,
    Ask,
    Deny,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::Allow => "allow",
            Verdict::Ask => "ask",
            Verdict::Deny => "deny",
        })
    }
}

/// What happens to a run whose captured writes break `writable_globs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnViolation {
    /// Nothing of the run lands (the default).
    Rollback,
    /// The allowed changes land; the others are discarded and listed.
    Drop,
}

/// Resource limits for the sandboxed command. `None` means "the default".
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    pub cpu_seconds: Option<u64>,
    pub memory_mb: Option<u64>,
    pub processes: Option<u64>,
    pub file_size_mb: Option<u64>,
    pub open_files: Option<u64>,
}

impl Limits {
    /// Field-wise minimum: a narrower layer can only lower a limit.
    fn narrow(&self, other: &Limits) -> Limits {
        fn min(a: Option<u64>, b: Option<u64>) -> Option<u64> {
            match (a, b) {
                (Some(x), Some(y)) => Some(x.min(y)),
                (x, None) => x,
                (None, y) => y,
            }
        }
        Limits {
            cpu_seconds: min(self.cpu_seconds, other.cpu_seconds),
            memory_mb: min(self.memory_mb, other.memory_mb),
            processes: min(self.processes, other.processes),
            file_size_mb: min(self.file_size_mb, other.file_size_mb),
            open_files: min(self.open_files, other.open_files),
        }
    }
}

/// A command rule: a prefix of normalised argv tokens.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rule {
    /// The tokens, e.g. `["git", "status"]`.
    pub tokens: Vec<String>,
    /// Distinct approvers an `ask` under this rule needs (1 unless the rule says).
    pub approvals: u32,
    /// Whether a held action under this rule may be previewed.
    pub preview: bool,
    /// Example scripts this rule must match / must not match (checked at load).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub examples_match: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub examples_not_match: Vec<String>,
}

impl Rule {
    /// The rule as its author wrote it (tokens joined by one space).
    pub fn text(&self) -> String {
        self.tokens.join(" ")
    }
}

/// Which list of a layer a rule sits in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RuleList {
    BashAllowPrefixes,
    RequireApprovalFor,
    Deny,
}

impl RuleList {
    pub fn key(self) -> &'static str {
        match self {
            RuleList::BashAllowPrefixes => "bash_allow_prefixes",
            RuleList::RequireApprovalFor => "require_approval_for",
            RuleList::Deny => "deny",
        }
    }
    pub fn verdict(self) -> Verdict {
        match self {
            RuleList::BashAllowPrefixes => Verdict::Allow,
            RuleList::RequireApprovalFor => Verdict::Ask,
            RuleList::Deny => Verdict::Deny,
        }
    }
}

/// One validated policy file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Layer {
    /// Where it came from (a path, or `<embedded default>`); not part of the digest.
    #[serde(skip)]
    pub source: String,
    /// The source text, kept so example errors can point at a line.
    #[serde(skip)]
    pub text: String,
    pub profile: Profile,
    pub network: bool,
    pub timeout_ms: Option<u64>,
    pub writable_globs: Option<Vec<String>>,
    pub allow: Vec<Rule>,
    pub ask: Vec<Rule>,
    pub deny: Vec<Rule>,
    pub default: Verdict,
    pub read_only_paths: Vec<String>,
    pub env_passthrough: Vec<String>,
    pub protected: Vec<String>,
    pub landlock_min_abi: u8,
    pub on_violation: OnViolation,
    /// Capture every write of a writable run in the overlay workspace, even
    /// when the globs are directory trees (or there are none).
    pub overlay: bool,
    pub approval_ttl_seconds: Option<u64>,
    /// Workspace paths (plain, relative) left out of the fingerprint an
    /// approval binds to: their changes do not void it. Absent when empty,
    /// so that policies without it keep their digest.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fingerprint_ignore: Vec<String>,
    pub max_output_chars: Option<u64>,
    pub workspace_root: Option<String>,
    pub limits: Limits,
    pub verify_commands: Vec<String>,
}

impl Layer {
    /// The rules of one list.
    pub fn rules(&self, list: RuleList) -> &[Rule] {
        match list {
            RuleList::BashAllowPrefixes => &self.allow,
            RuleList::RequireApprovalFor => &self.ask,
            RuleList::Deny => &self.deny,
        }
    }

    /// Parse and validate one layer from text.
    pub fn parse(text: &str, source: &str, format: Format) -> Result<Layer, PolicyError> {
        let parsed = doc::parse(text, source, format)?;
        doc::validate(parsed, text, source)
    }

    /// Read and validate one policy file (TOML, or JSON by extension / content).
    pub fn load(path: &Path) -> Result<Layer, PolicyError> {
        let source = path.display().to_string();
        let meta = std::fs::metadata(path).map_err(|e| PolicyError::Read {
            file: source.clone(),
            source: e,
        })?;
        if meta.len() > MAX_POLICY_BYTES {
            return Err(PolicyError::TooLarge { file: source });
        }
        let text = std::fs::read_to_string(path).map_err(|e| PolicyError::Read {
            file: source.clone(),
            source: e,
        })?;
        let format = Format::guess(path, &text);
        Layer::parse(&text, &source, format)
    }

    /// The embedded default layer.
    pub fn embedded_default() -> Layer {
        Layer::parse(DEFAULT_POLICY_TOML, "<embedded default>", Format::Toml)
            .expect("the embedded default policy is valid (checked by a unit test)")
    }
}

/// The effective policy: an ordered stack of layers, each narrowing the ones before.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    pub layers: Vec<Layer>,
    /// Paths of the policy files, always protected inside the sandbox.
    pub files: Vec<PathBuf>,
}

/// The canonical, merged view of a policy: what `policy narrow` prints and what
/// the digest covers.
#[derive(Debug, Serialize)]
pub struct Effective<'a> {
    pub v: u32,
    pub profile: Profile,
    pub network: bool,
    pub timeout_ms: Option<u64>,
    /// A write must match at least one glob of *every* entry (conjunction of layers).
    pub writable_globs: Vec<&'a [String]>,
    pub protected: Vec<String>,
    pub read_only_paths: Vec<String>,
    pub env_passthrough: Vec<String>,
    pub landlock_min_abi: u8,
    pub on_violation: OnViolation,
    /// Absent when false, so that policies without it keep their digest.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub overlay: bool,
    pub approval_ttl_seconds: u64,
    /// Absent when empty, so that policies without it keep their digest.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fingerprint_ignore: Vec<String>,
    pub max_output_chars: Option<u64>,
    pub limits: Limits,
    /// Command rules stay per layer: the gate takes the strictest layer's verdict.
    pub layers: &'a [Layer],
}

/// Default time an approval stays valid when no layer says otherwise.
pub const DEFAULT_APPROVAL_TTL_SECONDS: u64 = 3600;

impl Policy {
    /// A policy made of the given layers (at least one).
    pub fn new(layers: Vec<Layer>, files: Vec<PathBuf>) -> Policy {
        assert!(!layers.is_empty(), "a policy has at least one layer");
        Policy { layers, files }
    }

    /// The embedded default policy.
    pub fn embedded_default() -> Policy {
        Policy::new(vec![Layer::embedded_default()], Vec::new())
    }

    /// `read-only` if any layer says so.
    pub fn profile(&self) -> Profile {
        self.layers.iter().map(|l| l.profile).max().unwrap_or(Profile::ReadOnly)
    }

    /// Host network only if every layer asks for it.
    pub fn network(&self) -> bool {
        self.layers.iter().all(|l| l.network)
    }

    /// The shortest timeout of any layer.
    pub fn timeout_ms(&self) -> Option<u64> {
        self.layers.iter().filter_map(|l| l.timeout_ms).min()
    }

    pub fn landlock_min_abi(&self) -> u8 {
        self.layers.iter().map(|l| l.landlock_min_abi).max().unwrap_or(1)
    }

    pub fn on_violation(&self) -> OnViolation {
        self.layers
            .iter()
            .map(|l| l.on_violation)
            .min()
            .unwrap_or(OnViolation::Rollback)
    }

    /// Any layer asking for the overlay workspace gets it (narrowing only adds checks).
    pub fn overlay(&self) -> bool {
        self.layers.iter().any(|l| l.overlay)
    }

    pub fn approval_ttl_seconds(&self) -> u64 {
        self.layers
            .iter()
            .filter_map(|l| l.approval_ttl_seconds)
            .min()
            .unwrap_or(DEFAULT_APPROVAL_TTL_SECONDS)
    }

    /// Paths left out of the workspace fingerprint: only those every layer
    /// leaves out (an approval that sees more is the narrower one).
    pub fn fingerprint_ignore(&self) -> Vec<String> {
        let mut out = intersect(self.layers.iter().map(|l| &l.fingerprint_ignore));
        out.sort();
        out
    }

    pub fn max_output_chars(&self) -> Option<u64> {
        self.layers.iter().filter_map(|l| l.max_output_chars).min()
    }

    pub fn limits(&self) -> Limits {
        self.layers
            .iter()
            .fold(Limits::default(), |acc, l| acc.narrow(&l.limits))
    }

    /// Names passed through to the sandbox: only those every layer passes.
    pub fn env_passthrough(&self) -> Vec<String> {
        intersect(self.layers.iter().map(|l| &l.env_passthrough))
    }

    /// Extra read-only paths: only those every layer exposes.
    pub fn read_only_paths(&self) -> Vec<String> {
        intersect(self.layers.iter().map(|l| &l.read_only_paths))
    }

    /// Protected globs: the built-in ones plus every layer's own (union).
    pub fn protected_globs(&self) -> Vec<String> {
        let mut all = builtin_protected_globs();
        for layer in &self.layers {
            all.extend(layer.protected.iter().cloned());
        }
        all.sort();
        all.dedup();
        all
    }

    /// Whether any layer restricts writes to globs.
    pub fn has_writable_globs(&self) -> bool {
        self.layers.iter().any(|l| l.writable_globs.is_some())
    }

    /// Compiled glob sets for write checks.
    pub fn path_globs(&self) -> PathGlobs {
        PathGlobs::compile(self)
    }

    /// The merged, canonical view.
    pub fn effective(&self) -> Effective<'_> {
        Effective {
            v: 1,
            profile: self.profile(),
            network: self.network(),
            timeout_ms: self.timeout_ms(),
            writable_globs: self.layers.iter().filter_map(|l| l.writable_globs.as_deref()).collect(),
            protected: self.protected_globs(),
            read_only_paths: self.read_only_paths(),
            env_passthrough: self.env_passthrough(),
            landlock_min_abi: self.landlock_min_abi(),
            on_violation: self.on_violation(),
            overlay: self.overlay(),
            approval_ttl_seconds: self.approval_ttl_seconds(),
            fingerprint_ignore: self.fingerprint_ignore(),
            max_output_chars: self.max_output_chars(),
            limits: self.limits(),
            layers: &self.layers,
        }
    }

    /// Canonical JSON of the effective policy (stable field order, no whitespace).
    pub fn canonical_json(&self) -> String {
        serde_json::to_string(&self.effective()).expect("policy serialises")
    }

    /// SHA-256 of the canonical JSON, as `sha256:<hex>`; approvals and audit bind to it.
    pub fn digest(&self) -> String {
        let mut h = Sha256::new();
        h.update(self.canonical_json().as_bytes());
        format!("sha256:{}", hex(&h.finalize()))
    }
}

fn intersect<'a>(mut sets: impl Iterator<Item = &'a Vec<String>>) -> Vec<String> {
    let Some(first) = sets.next() else {
        return Vec::new();
    };
    let mut out: Vec<String> = first.clone();
    for s in sets {
        out.retain(|x| s.contains(x));
    }
    out.sort();
    out.dedup();
    out
}

/// Lower-case hex of bytes.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Line and column (1-based) of a byte offset in `text`.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let col = before.rfind('\n').map_or(offset, |nl| offset - nl - 1) + 1;
    (line, col)
}

/// Best-effort location of a value in the source: the first quoted occurrence
/// of `needle` after `key` (or anywhere), else the key, else the top.
pub fn locate(text: &str, key: &str, needle: &str) -> (usize, usize) {
    let key_at = find_key(text, key);
    let from = key_at.unwrap_or(0);
    for quote in ['"', '\''] {
        let q = format!("{quote}{needle}{quote}");
        if let Some(i) = text[from..].find(&q) {
            return line_col(text, from + i + 1);
        }
    }
    match key_at {
        Some(i) => line_col(text, i),
        None => (1, 1),
    }
}

fn find_key(text: &str, key: &str) -> Option<usize> {
    if key.is_empty() {
        return None;
    }
    let mut start = 0;
    while let Some(i) = text[start..].find(key) {
        let at = start + i;
        let before_ok = at == 0 || {
            let c = text.as_bytes()[at - 1];
            c == b'\n' || c == b' ' || c == b'"' || c == b'{' || c == b',' || c == b'\t'
        };
        let rest = text[at + key.len()..].trim_start_matches(['"', ' ', '\t']);
        if before_ok && (rest.starts_with('=') || rest.starts_with(':')) {
            return Some(at);
        }
        start = at + key.len();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_default_is_valid_and_permissive() {
        let p = Policy::embedded_default();
        assert_eq!(p.profile(), Profile::WorkspaceWrite);
        assert!(!p.network());
        assert_eq!(p.layers[0].default, Verdict::Allow);
    }

    #[test]
    fn line_col_counts_from_one() {
        assert_eq!(line_col("ab\ncd", 0), (1, 1));
        assert_eq!(line_col("ab\ncd", 4), (2, 2));
    }

    #[test]
    fn read_only_paths_the_sandbox_would_cover_are_refused_with_the_reason() {
        for p in ["/tmp/x", "/dev/sda", "/proc"] {
            let e = Layer::parse(&format!("read_only_paths = [\"{p}\"]"), "p.toml", Format::Toml).unwrap_err();
            assert!(e.to_string().contains("would not be visible"), "{p}: {e}");
        }
        for p in ["/opt/x", "/tmpfoo", "/srv/dev"] {
            assert!(
                Layer::parse(&format!("read_only_paths = [\"{p}\"]"), "p.toml", Format::Toml).is_ok(),
                "{p}"
            );
        }
    }

    #[test]
    fn fingerprint_ignore_takes_plain_paths_outside_git_and_tether() {
        let table: &[(&str, Option<&str>)] = &[
            ("target", None),
            ("target/", None),
            ("web/node_modules", None),
            (".venv", None),
            ("/target", Some("plain path relative")),
            ("../x", Some("plain path relative")),
            ("a/./b", Some("plain path relative")),
            ("a//b", Some("plain path relative")),
            ("", Some("plain path relative")),
            ("**/node_modules", Some("looks like a glob")),
            ("build-*", Some("looks like a glob")),
            (".git", Some("inside .git")),
            (".git/objects", Some("inside .git")),
            (".tether", Some("inside .tether")),
        ];
        for (entry, refused) in table {
            let text = format!("version = 1\nfingerprint_ignore = [\"{entry}\"]\n");
            match (Layer::parse(&text, "p.toml", Format::Toml), refused) {
                (Ok(l), None) => assert_eq!(l.fingerprint_ignore, vec![entry.trim_end_matches('/').to_string()]),
                (Err(e), Some(why)) => {
                    let e = e.to_string();
                    assert!(e.contains(why) && e.contains("p.toml:2:"), "{entry}: {e}");
                }
                (got, _) => panic!("{entry}: {got:?}"),
            }
        }
    }

    #[test]
    fn fingerprint_ignore_holds_only_where_every_layer_says_it_and_is_in_the_digest() {
        let layer = |t: &str| Layer::parse(t, "x", Format::Toml).unwrap();
        let none = Policy::new(vec![layer("version = 1")], vec![]);
        let both = Policy::new(vec![layer("fingerprint_ignore = [\"target\", \"dist\"]")], vec![]);
        assert_eq!(both.fingerprint_ignore(), ["dist", "target"]);
        let narrowed = Policy::new(
            vec![
                layer("fingerprint_ignore = [\"target\", \"dist\"]"),
                layer("fingerprint_ignore = [\"target\"]"),
            ],
            vec![],
        );
        assert_eq!(narrowed.fingerprint_ignore(), ["target"]);
        let child_without = Policy::new(
            vec![layer("fingerprint_ignore = [\"target\"]"), layer("version = 1")],
            vec![],
        );
        assert!(
            child_without.fingerprint_ignore().is_empty(),
            "a layer that ignores nothing sees everything"
        );
        assert_ne!(none.digest(), both.digest());
        assert_ne!(both.digest(), narrowed.digest());
        // Absent, it leaves the digest as it was before the key existed.
        assert!(!none.canonical_json().contains("fingerprint_ignore"));
    }

    #[test]
    fn digest_is_stable_and_sensitive() {
        let a = Policy::embedded_default();
        let b = Policy::embedded_default();
        assert_eq!(a.digest(), b.digest());
        let c = Policy::new(vec![Layer::parse("network = true", "x", Format::Toml).unwrap()], vec![]);
        assert_ne!(a.digest(), c.digest());
    }
}
