//! The policy document as written (TOML or JSON) and its validation into a [`Layer`].

use super::{line_col, locate, Layer, Limits, OnViolation, PolicyError, Profile, Rule, RuleList, Verdict};
use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use std::path::Path;

/// Which syntax a policy is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Toml,
    Json,
}

impl Format {
    /// `.json` files, or text starting with `{`, are JSON; everything else TOML.
    pub fn guess(path: &Path, text: &str) -> Format {
        let by_ext = path.extension().and_then(|e| e.to_str()) == Some("json");
        if by_ext || text.trim_start().starts_with('{') {
            Format::Json
        } else {
            Format::Toml
        }
    }
}

/// A number of seconds: tether writes `30.0`, people write `30`.
#[derive(Debug, Clone, Copy)]
struct Seconds(f64);

impl<'de> Deserialize<'de> for Seconds {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Seconds;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a number of seconds")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Seconds, E> {
                Ok(Seconds(v as f64))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Seconds, E> {
                Ok(Seconds(v as f64))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Seconds, E> {
                Ok(Seconds(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// A rule as written: a plain prefix string, or a table with examples.
#[derive(Debug, Clone)]
pub struct RuleSpec {
    pub prefix: String,
    pub matches: Vec<String>,
    pub not_match: Vec<String>,
    pub approvals: Option<u32>,
    pub preview: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleTable {
    prefix: String,
    #[serde(default, rename = "match")]
    matches: Vec<String>,
    #[serde(default)]
    not_match: Vec<String>,
    approvals: Option<u32>,
    preview: Option<bool>,
}

impl<'de> Deserialize<'de> for RuleSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RuleSpec;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(
                    "a command prefix string, or a table { prefix = \"...\", match = [...], not_match = [...] }",
                )
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RuleSpec, E> {
                Ok(RuleSpec {
                    prefix: v.to_string(),
                    matches: vec![],
                    not_match: vec![],
                    approvals: None,
                    preview: None,
                })
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RuleSpec, A::Error> {
                let t = RuleTable::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(RuleSpec {
                    prefix: t.prefix,
                    matches: t.matches,
                    not_match: t.not_match,
                    approvals: t.approvals,
                    preview: t.preview,
                })
            }
        }
        d.deserialize_any(V)
    }
}

/// The document exactly as written. Unknown keys are errors.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyDoc {
    version: Option<u32>,
    profile: Option<Profile>,
    network: Option<bool>,
    timeout_seconds: Option<Seconds>,
    writable_globs: Option<Vec<String>>,
    bash_allow_prefixes: Option<Vec<RuleSpec>>,
    require_approval_for: Option<Vec<RuleSpec>>,
    deny: Option<Vec<RuleSpec>>,
    default: Option<Verdict>,
    // tether's sandbox_json keys
    workspace_root: Option<String>,
    max_output_chars: Option<u64>,
    use_kernel_sandbox: Option<bool>,
    verify_commands: Option<Vec<String>>,
    // tether-exec's own
    read_only_paths: Option<Vec<String>>,
    env_passthrough: Option<Vec<String>>,
    protected: Option<Vec<String>>,
    landlock_min_abi: Option<u8>,
    on_violation: Option<OnViolation>,
    overlay: Option<bool>,
    approval_ttl_seconds: Option<u64>,
    fingerprint_ignore: Option<Vec<String>>,
    limits: Option<Limits>,
}

fn invalid(file: &str, at: (usize, usize), message: String, fix: &str) -> PolicyError {
    PolicyError::Invalid {
        file: file.to_string(),
        line: at.0,
        column: at.1,
        message,
        fix: fix.to_string(),
    }
}

const UNKNOWN_KEY_FIX: &str =
    "remove the key or correct its spelling (README.md, section Policy reference, lists every key)";

/// Parse the text into a document; syntax and schema errors carry line and column.
pub fn parse(text: &str, file: &str, format: Format) -> Result<PolicyDoc, PolicyError> {
    match format {
        Format::Toml => toml::from_str::<PolicyDoc>(text).map_err(|e| {
            let at = e.span().map_or((1, 1), |s| line_col(text, s.start));
            let message = e.message().trim().to_string();
            let fix = if message.contains("unknown field") {
                UNKNOWN_KEY_FIX
            } else {
                "see the policy reference in README.md"
            };
            invalid(file, at, message, fix)
        }),
        Format::Json => serde_json::from_str::<PolicyDoc>(text).map_err(|e| {
            let message = e.to_string();
            let message = message
                .rsplit_once(" at line ")
                .map_or(message.clone(), |(m, _)| m.to_string());
            let fix = if message.contains("unknown field") {
                UNKNOWN_KEY_FIX
            } else {
                "see the policy reference in README.md"
            };
            invalid(file, (e.line().max(1), e.column().max(1)), message, fix)
        }),
    }
}

/// Characters that make a rule a script rather than a command prefix.
const SHELL_META: &[char] = &[
    ';', '|', '&', '$', '`', '(', ')', '<', '>', '"', '\'', '\\', '\n', '*', '?', '[',
];

fn rule_from_spec(spec: &RuleSpec, list: RuleList, text: &str, file: &str) -> Result<Rule, PolicyError> {
    let at = || locate(text, list.key(), &spec.prefix);
    if let Some(c) = spec.prefix.chars().find(|c| SHELL_META.contains(c)) {
        return Err(invalid(file,
            at(),
            format!("`{}` in {} contains `{c}`: a rule is a command prefix (program and leading arguments), not a script or a pattern", spec.prefix, list.key()),
            "write the words the command starts with, e.g. \"git status\"; the gate already splits scripts into their simple commands",
        ));
    }
    let tokens: Vec<String> = spec.prefix.split_whitespace().map(str::to_string).collect();
    if tokens.is_empty() {
        return Err(invalid(
            file,
            at(),
            format!("an empty rule in {}", list.key()),
            "remove it, or write the command it should match",
        ));
    }
    if tokens[0].starts_with('-') {
        return Err(invalid(
            file,
            at(),
            format!(
                "`{}` in {} starts with an option, not a program",
                spec.prefix,
                list.key()
            ),
            "start the rule with the program name, e.g. \"rm -rf\"",
        ));
    }
    if spec.approvals == Some(0) || spec.approvals.is_some_and(|n| n > 16) {
        return Err(invalid(
            file,
            at(),
            format!("`approvals` of `{}` must be between 1 and 16", spec.prefix),
            "set approvals = 1 (one human) or 2 (two distinct approvers)",
        ));
    }
    if spec.approvals.is_some() && list != RuleList::RequireApprovalFor {
        return Err(invalid(
            file,
            at(),
            format!(
                "`approvals` on `{}` in {} has no effect: only require_approval_for rules are approved",
                spec.prefix,
                list.key()
            ),
            "move the rule to require_approval_for, or drop `approvals`",
        ));
    }
    Ok(Rule {
        tokens,
        approvals: spec.approvals.unwrap_or(1),
        preview: spec.preview.unwrap_or(true),
        examples_match: spec.matches.clone(),
        examples_not_match: spec.not_match.clone(),
    })
}

/// Turn a parsed document into a validated layer.
pub fn validate(doc: PolicyDoc, text: &str, file: &str) -> Result<Layer, PolicyError> {
    if let Some(v) = doc.version {
        if v != 1 {
            return Err(invalid(
                file,
                locate(text, "version", &v.to_string()),
                format!("policy version {v} is not supported by this tether-exec"),
                "set version = 1",
            ));
        }
    }
    if doc.use_kernel_sandbox == Some(false) {
        // tether's flag to fall back to plain bash. tether-exec never runs a
        // command unconfined, so accepting `false` would promise less isolation
        // than we apply; say so instead of silently ignoring it.
        return Err(invalid(
            file,
            locate(text, "use_kernel_sandbox", "false"),
            "use_kernel_sandbox = false asks for no kernel sandbox; tether-exec always confines the command".into(),
            "remove the key or set it to true",
        ));
    }
    let timeout_ms = match doc.timeout_seconds {
        None => None,
        Some(Seconds(s)) if s.is_finite() && s > 0.0 && s <= 7.0 * 86400.0 => Some((s * 1000.0).round() as u64),
        Some(Seconds(s)) => {
            return Err(invalid(
                file,
                locate(text, "timeout_seconds", ""),
                format!("timeout_seconds = {s} is not a positive number of seconds up to a week"),
                "set e.g. timeout_seconds = 30",
            ))
        }
    };
    if let Some(abi) = doc.landlock_min_abi {
        if !(1..=landlock_max_known_abi()).contains(&abi) {
            return Err(invalid(
                file,
                locate(text, "landlock_min_abi", &abi.to_string()),
                format!(
                    "landlock_min_abi = {abi} is not a Landlock ABI this tether-exec knows (1 to {})",
                    landlock_max_known_abi()
                ),
                "use a value from 1 to the highest ABI you need",
            ));
        }
    }

    let mut lists: Vec<(RuleList, Vec<Rule>)> = Vec::new();
    for (list, specs) in [
        (RuleList::BashAllowPrefixes, &doc.bash_allow_prefixes),
        (RuleList::RequireApprovalFor, &doc.require_approval_for),
        (RuleList::Deny, &doc.deny),
    ] {
        let mut rules = Vec::new();
        for spec in specs.iter().flatten() {
            rules.push(rule_from_spec(spec, list, text, file)?);
        }
        lists.push((list, rules));
    }
    // Contradictions: one prefix in two lists. Precedence would pick one, but
    // the author meant something and we cannot tell what.
    for i in 0..lists.len() {
        for j in (i + 1)..lists.len() {
            for a in &lists[i].1 {
                if lists[j].1.iter().any(|b| b.tokens == a.tokens) {
                    return Err(invalid(
                        file,
                        locate(text, lists[j].0.key(), &a.text()),
                        format!(
                            "`{}` is in both {} and {}",
                            a.text(),
                            lists[i].0.key(),
                            lists[j].0.key()
                        ),
                        "keep the prefix in one list only (deny > require_approval_for > bash_allow_prefixes)",
                    ));
                }
            }
        }
    }

    for (key, globs) in [
        ("writable_globs", doc.writable_globs.as_deref().unwrap_or(&[])),
        ("protected", doc.protected.as_deref().unwrap_or(&[])),
    ] {
        for g in globs {
            super::glob::check_glob(g).map_err(|why| {
                invalid(file,
                    locate(text, key, g),
                    format!("`{g}` in {key} is not a valid glob: {why}"),
                    "globs are relative to the workspace, use `/` separators, `*` within a name and `**` across directories, e.g. \"docs/**\"",
                )
            })?;
        }
    }
    for p in doc.read_only_paths.iter().flatten() {
        if !p.starts_with('/') || p.split('/').any(|c| c == "..") {
            return Err(invalid(
                file,
                locate(text, "read_only_paths", p),
                format!("read_only_paths entry `{p}` must be an absolute path without `..`"),
                "write the absolute host path to expose read-only, e.g. \"/opt/toolchain\"",
            ));
        }
        // The sandbox has its own /tmp, /dev and /proc: a host path there
        // would be covered by them and silently not shown.
        let own = ["/tmp", "/dev", "/proc"]
            .into_iter()
            .find(|d| p == d || p.strip_prefix(d).is_some_and(|rest| rest.starts_with('/')));
        if let Some(d) = own {
            return Err(invalid(
                file,
                locate(text, "read_only_paths", p),
                format!("read_only_paths entry `{p}` is under {d}, which the sandbox has its own of: it would not be visible"),
                "keep what the command needs outside /tmp, /dev and /proc (for example under /opt or /srv), or in the workspace (shown without being named here)",
            ));
        }
    }
    let mut fingerprint_ignore = Vec::new();
    for p in doc.fingerprint_ignore.iter().flatten() {
        let clean = p.strip_suffix('/').unwrap_or(p);
        let plain = !clean.is_empty()
            && !clean.starts_with('/')
            && clean.split('/').all(|c| !c.is_empty() && c != "." && c != "..");
        if !plain {
            return Err(invalid(
                file,
                locate(text, "fingerprint_ignore", p),
                format!("fingerprint_ignore entry `{p}` must be a plain path relative to the workspace: no `/` at the start, no `.`, `..` or empty components, no globs"),
                "name the directory (or file) whose changes should not void an approval, e.g. \"target\" or \"web/node_modules\"",
            ));
        }
        if clean.chars().any(|c| matches!(c, '*' | '?' | '[' | '{')) {
            return Err(invalid(
                file,
                locate(text, "fingerprint_ignore", p),
                format!("fingerprint_ignore entry `{p}` looks like a glob; entries are plain paths"),
                "list each directory by its path from the workspace's top, e.g. \"target\"",
            ));
        }
        // What git and tether-exec keep at the top is what an approval must
        // see change: a commit, a moved branch, a new policy.
        let top = clean.split('/').next().unwrap_or("");
        if top == ".git" || top == ".tether" {
            return Err(invalid(
                file,
                locate(text, "fingerprint_ignore", p),
                format!("fingerprint_ignore entry `{p}` is inside {top}, whose changes an approval must always see"),
                "ignore build output and caches (e.g. \"target\", \"node_modules\"), never .git or .tether",
            ));
        }
        if !fingerprint_ignore.iter().any(|q: &String| q == clean) {
            fingerprint_ignore.push(clean.to_string());
        }
    }
    for name in doc.env_passthrough.iter().flatten() {
        let ok = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok || is_dangerous_env(name) {
            return Err(invalid(file,
                locate(text, "env_passthrough", name),
                format!("env_passthrough entry `{name}` is not a plain variable name, or is one that changes what programs run (PATH, LD_*, BASH_ENV, ...)"),
                "pass only plain data variables through",
            ));
        }
    }

    let any_list = doc.bash_allow_prefixes.is_some() || doc.require_approval_for.is_some() || doc.deny.is_some();
    let default = doc
        .default
        .unwrap_or(if any_list { Verdict::Ask } else { Verdict::Allow });
    let mut lists = lists.into_iter().map(|(_, r)| r);
    Ok(Layer {
        source: file.to_string(),
        text: text.to_string(),
        profile: doc.profile.unwrap_or(Profile::WorkspaceWrite),
        network: doc.network.unwrap_or(false),
        timeout_ms,
        writable_globs: doc.writable_globs,
        allow: lists.next().unwrap_or_default(),
        ask: lists.next().unwrap_or_default(),
        deny: lists.next().unwrap_or_default(),
        default,
        read_only_paths: doc.read_only_paths.unwrap_or_default(),
        env_passthrough: doc.env_passthrough.unwrap_or_default(),
        protected: doc.protected.unwrap_or_default(),
        landlock_min_abi: doc.landlock_min_abi.unwrap_or(1),
        on_violation: doc.on_violation.unwrap_or(OnViolation::Rollback),
        overlay: doc.overlay.unwrap_or(false),
        approval_ttl_seconds: doc.approval_ttl_seconds,
        fingerprint_ignore,
        max_output_chars: doc.max_output_chars,
        workspace_root: doc.workspace_root,
        limits: doc.limits.unwrap_or_default(),
        verify_commands: doc.verify_commands.unwrap_or_default(),
    })
}

/// The highest Landlock ABI this build knows how to use.
pub fn landlock_max_known_abi() -> u8 {
    7
}

/// Environment names that change which program runs or what it loads.
pub fn is_dangerous_env(name: &str) -> bool {
    const EXACT: &[&str] = &[
        "PATH",
        "BASH_ENV",
        "ENV",
        "SHELLOPTS",
        "BASHOPTS",
        "IFS",
        "PS4",
        "PROMPT_COMMAND",
        "CDPATH",
        "PYTHONSTARTUP",
        "PYTHONHOME",
        "PERL5OPT",
        "PERL5LIB",
        "RUBYOPT",
        "NODE_OPTIONS",
        "PAGER",
        // Pagers and programs other tools start from the environment.
        "MANPAGER",
        "MANOPT",
        "MANROFFOPT",
        "SYSTEMD_PAGER",
        "BROWSER",
        "PERF_PAGER",
        "PERF_EXEC_PATH",
        // wget reads its options (`use_askpass` runs a program) from there.
        "WGETRC",
        "EDITOR",
        "VISUAL",
        "HOME",
        "XDG_CONFIG_HOME",
        "SSH_ASKPASS",
        "PROMPT_DIRTRIM",
        // The shell's command hash and alias tables: `BASH_CMDS[ls]=/bin/rm`
        // makes `ls` run rm, `BASH_ALIASES[ls]=...` makes it run any text.
        "BASH_CMDS",
        "BASH_ALIASES",
        // Options a program reads from the environment as if given.
        "TAR_OPTIONS",
        "GREP_OPTIONS",
        "LESSOPEN",
        "MAKEFLAGS",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_BUILD_RUSTC_WRAPPER",
    ];
    EXACT.contains(&name)
        || name.starts_with("LD_")
        || name.starts_with("GIT_")
        || name.starts_with("BASH_FUNC_")
        || (name.starts_with("CARGO_TARGET_") && name.ends_with("_RUNNER"))
        || name.starts_with("DYLD_")
}
