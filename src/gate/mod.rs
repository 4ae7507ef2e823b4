//! The gate: allow, ask or deny a command, deterministically, with the rule that decided.
//!
//! A script is split into every simple command it can run ([`parse`]), each
//! command is seen through its wrappers ([`normalize`]), and each resulting
//! program and argument list is matched against every policy layer. The
//! verdict is the strictest over all commands and all layers (deny > ask >
//! allow): one denied fragment anywhere denies the whole script, and one
//! fragment the gate does not understand makes it ask.
//!
//! Rules match argv *tokens*, never raw text. A token the gate cannot know
//! before running (a variable, a substitution, a glob) never satisfies an
//! allow rule, and where a deny or ask rule expects a word it counts as a
//! possible match, which asks. This module is pure: no I/O, no clock.
//!
//! A program is seen through by its file name wherever it lives
//! (`/usr/bin/../bin/env` is `env`, `/usr/lib/git-core/git-push` is `git
//! push`); allow rules still match only the name as written, or a system
//! one. A function counts from where its shell surely defines it, and only
//! when called by its bare name (`command f`, `env f`, `find -exec f` and a
//! `bash -c` run the program), so that a program of its name is judged as
//! that program. Programs that run a program from their arguments with
//! options the gate does not parse (`taskset`, `strace`, ...) ask unless an
//! allow rule names them, and every program their arguments name meets the
//! deny and ask rules; a command string they hand a shell (`flock -c`, `su
//! -c`, `sg`, `hyperfine`) is judged as a script, and asks where it is run
//! by `$SHELL` or a login shell, which may be any shell.
//!
//! A script given to a shell other than bash (`sh -c`, where sh is dash) is
//! judged by bash's grammar only where the two agree: bash's own syntax in
//! it (`((`, `[[`, `$'...'`, `<<<`, ...) asks, and so does any script for
//! zsh, fish or csh, whose grammars are their own.
//!
//! # What the gate does not see
//!
//! The gate judges what the command line names; the sandbox confines what
//! runs. Beyond the command line, and so not judged:
//! - programs that do a named program's work by other means (`find
//!   -delete`, `python3 -c 'os.remove(...)'`), run commands from their own
//!   scripts (`sed`'s `e`, `awk`'s `system`, a Makefile's recipes), or a
//!   named program under another name (`ln -s /bin/rm x; ./x`): rules name
//!   commands;
//! - the contents of a script file a shell runs (`bash build.sh`), judged by
//!   the rules for the shell as any program is by its own;
//! - startup files a login shell reads (`bash -l` reads `~/.profile`, and
//!   `HOME` is the workspace), and git's configuration in the workspace
//!   (`~/.gitconfig`, `~/.config/git/config`: aliases, `core.fsmonitor`);
//! - values read or put together at run time and then evaluated by a
//!   program (`awk`, `python3`); bash's own arithmetic is seen to: it asks
//!   wherever it reads a variable the script does not surely give an
//!   integer (`p='$'; x="a[${p}(cmd)]"; echo $((x))`, whose `$(` exists
//!   only once `$p` is expanded, and `v=$(<f); echo $((v))` ask);
//! - programs that run code they were given the means to write (`cargo
//!   test` runs the workspace's tests, which the agent may have edited), so
//!   an option of theirs that runs a program is judged only where it adds
//!   nothing else (`cargo --config`).
//!
//! # Asks that look needless and are not
//!
//! - `local dir=$1`, `declare x=$v`: a declaration reads a value shaped like
//!   `([0]=$(cmd))` as a compound assignment, substitutions run, whenever
//!   the variable is already an array in that scope (bash 5.2); whether it
//!   is depends on the rest of the script at run time.
//! - `printf "$fmt" ...`: a format of `-vPATH` makes printf set PATH
//!   (`printf -- "$fmt"` does not ask). `printf -v x '%s' "$y"`, `%b`, an
//!   escape such as `\x24`: the value is text the gate does not see
//!   written, and runs its `a[$(cmd)]` if evaluated.
//! - `sh -c '[[ -f x ]] && ...'`: dash runs `[[` as a program and what
//!   follows `&&` or `||` inside it as commands.
//! - `IFS=... cmd` for any command but `read`, and `xargs -n1 tar -tf`
//!   (xargs adds words to a program whose options may name what it runs).
//! - `(( count > 0 ))`, `echo $((n + 1))` where the script never assigns
//!   the variable, or assigns it `$(wc -l < f)`: arithmetic evaluates the
//!   value as arithmetic again, and the gate cannot tell it is a number.
//! - `sort "$f"`: a quoted word is one word, and one word may be
//!   `--compress-program=sh`; `sort -- "$f"` does not ask.

pub mod normalize;
pub mod parse;

use crate::policy::{Layer, Policy, PolicyError, Profile, RuleList, Verdict};
use normalize::{Program, Unwrapped};
use parse::{Cwd, RedirectKind, Simple, Unit, Word};
use serde::Serialize;
use std::collections::{HashMap, HashSet, VecDeque};
use std::path::{Component, Path, PathBuf};

pub use parse::{GateInputError, MAX_SCRIPT_BYTES};

/// Whether assigning a variable changes what later commands run: the
/// policy's list, which `env_passthrough` refuses too (pagers, man's and
/// perf's among them).
pub fn is_dangerous_env(name: &str) -> bool {
    crate::policy::is_dangerous_env(name)
}

/// Built-ins that change nothing outside the shell and need no rule.
const HARMLESS_BUILTINS: &[&str] = &[
    "cd",
    "pwd",
    "true",
    "false",
    ":",
    "test",
    "[",
    "echo",
    "printf",
    "exit",
    "return",
    "shift",
    "break",
    "continue",
    "set",
    "unset",
    "shopt",
    "wait",
    "read",
    "local",
    "export",
    "declare",
    "typeset",
    "readonly",
    "umask",
    "type",
    "pushd",
    "popd",
    "dirs",
    "let",
    "getopts",
    "mapfile",
    "readarray",
    "ulimit",
    "times",
    "jobs",
    "hash",
    // Reached only as `command -v x`, bare `exec` (redirects only) or bare `builtin`.
    "command",
    "exec",
    "builtin",
];

/// Built-ins that run text as code or change how later words are looked up.
const OPAQUE_BUILTINS: &[(&str, &str)] = &[
    ("eval", "`eval` runs text as a script"),
    ("source", "`source` runs a file the gate cannot see"),
    (".", "`.` runs a file the gate cannot see"),
    ("alias", "`alias` changes what later words run"),
    ("trap", "`trap` runs text as a script later"),
    ("enable", "`enable` can load built-ins from a shared object"),
    ("fc", "`fc` re-runs commands from history"),
    ("coproc", "`coproc` runs a command the gate cannot follow"),
];

/// What the gate is asked about.
#[derive(Debug, Clone, Copy)]
pub enum Input<'a> {
    /// A bash script, as given to `-c`.
    Script(&'a str),
    /// A program and its arguments, run directly (no shell).
    Argv(&'a [String]),
}

/// Where the command would run: redirect targets are judged against it.
#[derive(Debug, Clone)]
pub struct Context {
    /// The workspace root, absolute.
    pub workspace: PathBuf,
    /// The starting directory, relative to the workspace (`""` for the root),
    /// or `None` when it is outside the workspace.
    pub cwd: Option<String>,
}

impl Context {
    pub fn new(workspace: &Path, cwd: &Path) -> Context {
        let cwd = cwd
            .strip_prefix(workspace)
            .ok()
            .map(|p| p.to_string_lossy().into_owned());
        Context {
            workspace: workspace.to_path_buf(),
            cwd,
        }
    }
}

/// The verdict on one simple command, and why.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Judged {
    /// The command as the gate understood it (normalised argv, or what it could not read).
    pub command: String,
    pub verdict: Verdict,
    /// The rule or reason that decided, in words.
    pub reason: String,
    /// The matched rule's text, when a rule decided.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// Which list the rule is in (`deny`, `require_approval_for`, `bash_allow_prefixes`, `default`, ...).
    pub source: String,
    /// The policy file of that rule.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
}

/// The gate's answer for a whole input.
#[derive(Debug, Clone, Serialize)]
pub struct Decision {
    pub decision: Verdict,
    pub commands: Vec<Judged>,
    /// Distinct approvers an `ask` needs (the largest any matched rule requires).
    pub approvals_required: u32,
    /// Whether every ask rule that matched permits a preview.
    pub preview_allowed: bool,
}

impl Decision {
    /// The judged commands that set the overall verdict.
    pub fn deciding(&self) -> impl Iterator<Item = &Judged> {
        self.commands.iter().filter(move |j| j.verdict == self.decision)
    }

    /// One line naming what decided, for messages: `rm -rf x: deny rule "rm" (p.toml)`.
    pub fn summary(&self) -> String {
        match self.deciding().next() {
            Some(j) => format!("`{}`: {}", j.command, j.reason),
            None => "no commands".into(),
        }
    }
}

/// Decide about an input under a policy. Pure and total: every input gets an answer.
pub fn decide(policy: &Policy, input: Input<'_>, ctx: &Context) -> Result<Decision, GateInputError> {
    let units = match input {
        Input::Script(s) => parse::parse_script(s)?,
        Input::Argv(argv) => {
            let total: usize = argv.iter().map(|a| a.len() + 1).sum();
            if total > MAX_SCRIPT_BYTES {
                return Err(GateInputError::TooLarge(total));
            }
            vec![Unit::Command(Simple {
                assignments: vec![],
                appended: vec![],
                words: argv.iter().map(|a| Word::Lit(a.clone())).collect(),
                redirects: vec![],
                cwd: Cwd::Known(String::new()),
                depth: 0,
            })]
        }
    };
    // Every name the script unsets, wherever (a function body is judged
    // where it is defined, before an `unset` that runs before it is called).
    let unset_anywhere: Vec<String> = units
        .iter()
        .filter_map(|u| match u {
            Unit::Command(s) if s.words.first().and_then(Word::lit) == Some("unset") => Some(&s.words[1..]),
            _ => None,
        })
        .flat_map(|args| args.iter().map(|w| w.lit().unwrap_or("*").to_string()))
        .collect();
    // Every assignment of the script, wherever, for what arithmetic reads.
    let mut variables = Variables::default();
    variables.learn(&units);
    // Functions count from their definition on, as the units come in order.
    let mut g = Gate {
        variables,
        functions: Vec::new(),
        outer_functions: Vec::new(),
        unset_anywhere,
        calling_function: false,
        policy,
        globs: std::cell::OnceCell::new(),
        ctx,
        out: Vec::new(),
        approvals: 1,
        preview: true,
    };
    let mut queue: VecDeque<Unit> = units.into();
    while let Some(u) = queue.pop_front() {
        g.unit(u, &mut queue);
    }
    // With no rule anywhere that a construct could hide from (every layer allows
    // every command), "not understood" has nothing to protect: the command is
    // allowed and the kernel confines it, as tether's profile-only policies expect.
    let permissive = policy
        .layers
        .iter()
        .all(|l| l.default == Verdict::Allow && l.deny.is_empty() && l.ask.is_empty());
    if permissive {
        for j in g
            .out
            .iter_mut()
            .filter(|j| j.verdict == Verdict::Ask && (j.source == "parser" || j.source == "assignment"))
        {
            j.verdict = Verdict::Allow;
            j.reason = format!(
                "{}; allowed because no policy layer has rules it could hide from",
                j.reason
            );
        }
    }
    let decision = g.out.iter().map(|j| j.verdict).max().unwrap_or(Verdict::Allow);
    Ok(Decision {
        decision,
        commands: g.out,
        approvals_required: g.approvals,
        preview_allowed: g.preview,
    })
}

/// Check every rule example of every layer: `match` examples must be matched by
/// the rule, `not_match` examples must not be.
pub fn check_examples(policy: &Policy) -> Result<(), PolicyError> {
    for layer in &policy.layers {
        let single = Policy::new(vec![layer.clone()], vec![]);
        let ctx = Context {
            workspace: PathBuf::from("/workspace"),
            cwd: Some(String::new()),
        };
        for list in [
            RuleList::Deny,
            RuleList::RequireApprovalFor,
            RuleList::BashAllowPrefixes,
        ] {
            for rule in layer.rules(list) {
                let text = rule.text();
                for (example, want) in rule
                    .examples_match
                    .iter()
                    .map(|e| (e, true))
                    .chain(rule.examples_not_match.iter().map(|e| (e, false)))
                {
                    let d = decide(&single, Input::Script(example), &ctx)
                        .map_err(|e| example_error(layer, list, example, &e.to_string(), "shorten the example"))?;
                    let matched = d
                        .commands
                        .iter()
                        .any(|j| j.rule.as_deref() == Some(text.as_str()) && j.source == list.key());
                    if matched != want {
                        let msg = if want {
                            format!(
                                "rule `{text}` in {} should match its example `{example}` but does not ({})",
                                list.key(),
                                d.summary()
                            )
                        } else {
                            format!(
                                "rule `{text}` in {} matches `{example}`, listed under not_match",
                                list.key()
                            )
                        };
                        return Err(example_error(layer, list, example, &msg, "correct the rule's prefix or the example; prefixes match whole argv tokens after wrappers such as env/timeout and git's global options are removed"));
                    }
                }
            }
        }
    }
    Ok(())
}

fn example_error(layer: &Layer, list: RuleList, example: &str, msg: &str, fix: &str) -> PolicyError {
    let (line, column) = crate::policy::locate(&layer.text, list.key(), example);
    PolicyError::Invalid {
        file: layer.source.clone(),
        line,
        column,
        message: msg.to_string(),
        fix: fix.to_string(),
    }
}

struct Gate<'a> {
    /// Functions the script defines (their bodies are judged where defined).
    functions: Vec<String>,
    /// Names given to `unset` anywhere so far.
    unset_anywhere: Vec<String>,
    /// What the script assigns to its variables, for arithmetic.
    variables: Variables,
    /// The functions of the shells around the one being judged.
    outer_functions: Vec<Vec<String>>,
    /// The command being judged calls a function: by its bare name, not
    /// through a wrapper (`command f`, `env f` run the program).
    calling_function: bool,
    policy: &'a Policy,
    /// Compiled only when a redirect writes somewhere (most commands never need it).
    globs: std::cell::OnceCell<crate::policy::PathGlobs>,
    ctx: &'a Context,
    out: Vec<Judged>,
    approvals: u32,
    preview: bool,
}

/// What a script assigns to its variables, wherever (in functions,
/// branches, subshells, the scripts it hands `bash -c`), for arithmetic.
///
/// Bash evaluates a variable's value as arithmetic wherever arithmetic
/// reads the variable (`((v))`, `$((v))`, `$(($v))`, `[[ v -eq 0 ]]`, a
/// subscript, a substring offset, `let`), and again for each name in it:
/// a value `a[$(cmd)]` runs cmd, `PATH=7` assigns PATH. Whether a value is
/// such text cannot be told from how it was put together (`x=$;
/// v="a[${x}(cmd)]"`, `v=$(<f)`, `v+=...`), so arithmetic may read only
/// variables every assignment of the script gives an integer (a number,
/// `$((...))`, a loop over numbers, arithmetic itself). A variable the
/// script never assigns asks too: its value comes from the environment or
/// from bash itself (`REPLY`, `OPTARG`, `_`, `BASH_REMATCH` are text the
/// script put there by other means), which the gate does not see; only
/// bash's own counters are numbers by construction.
#[derive(Debug, Default)]
struct Variables {
    /// Every variable assigned, and whether every value it gets is a known integer.
    assigned: HashMap<String, bool>,
    /// Variables declared integers (`declare -i n`): bash evaluates what
    /// is assigned to them as arithmetic.
    integers: HashSet<String>,
    /// A `declare -i` names a variable only known at run time: any may be one.
    integer_unknown: bool,
    /// Arrays declared associative (`declare -A m`), whose subscripts are strings.
    associative: HashSet<String>,
    /// Names declared otherwise somewhere (`local m`, `declare -a m`).
    declared_otherwise: HashSet<String>,
    /// Variables given a value somewhere that does not build on their old
    /// one (`n=0`, not only `((n++))` or `n=$((n+1))`, whose first read is
    /// what the environment gave).
    fresh: HashSet<String>,
    /// Variables assigned a copy of another (`y=$x`), with the ones copied:
    /// an integer if those are.
    copies: HashMap<String, Vec<String>>,
}

impl Variables {
    /// Bash's own variables that hold a number, whatever the script did
    /// (unless it assigns them).
    const NUMBERS_BY_BASH: &'static [&'static str] = &[
        "RANDOM",
        "SRANDOM",
        "LINENO",
        "SECONDS",
        "BASHPID",
        "PPID",
        "UID",
        "EUID",
        "OPTIND",
        "HISTCMD",
        "EPOCHSECONDS",
    ];
    /// Variables bash fills with text (a line read, an option's value, the
    /// last word of the previous command): never known integers.
    const TEXT_BY_BASH: &'static [&'static str] = &[
        "_",
        "REPLY",
        "OPTARG",
        "MAPFILE",
        "BASH_REMATCH",
        "BASH_COMMAND",
        "BASH_ARGV",
        "BASH_ARGV0",
        "BASH_EXECUTION_STRING",
        "BASH_SOURCE",
        "FUNCNAME",
        "READLINE_LINE",
        "COMP_LINE",
        "COMP_WORDS",
    ];

    fn note(&mut self, name: &str, integer: bool) {
        *self.assigned.entry(name.to_string()).or_insert(true) &= integer;
    }

    /// `name=value`: an integer, and a fresh one unless the value reads
    /// the name (`n=$((n+1))`).
    fn note_value(&mut self, name: &str, value: &str) {
        if let Some(from) = copied_name(value) {
            self.note(name, true);
            self.copies.entry(name.to_string()).or_default().push(from.to_string());
            self.fresh.insert(name.to_string());
            return;
        }
        self.note(name, parse::is_integer_word(value));
        if !parse::identifiers(value).any(|n| n == name) {
            self.fresh.insert(name.to_string());
        }
    }

    /// `arr=(3 1 2)`, `arr=([0]=3 [1]=1)` as written (the whole word): an
    /// integer if every element is one (a key is a subscript, judged where
    /// it is parsed).
    fn note_array(&mut self, name: &str, raw: &str) {
        if let Some(items) = raw
            .strip_prefix(name)
            .and_then(|v| v.strip_prefix("=("))
            .and_then(|v| v.strip_suffix(')'))
        {
            let integers = items.split_whitespace().all(|item| {
                let value = match item.strip_prefix('[') {
                    Some(keyed) => keyed.split_once("]=").map_or("", |(_, v)| v),
                    None => item,
                };
                parse::is_integer_word(value)
            });
            self.note(name, integers);
            self.fresh.insert(name.to_string());
        } else {
            self.note(name, false);
        }
    }

    /// Learn every assignment among units about to be judged.
    fn learn(&mut self, units: &[Unit]) {
        for u in units {
            match u {
                Unit::Assigned { name, integer, fresh } => {
                    self.note(name, *integer);
                    if *fresh {
                        self.fresh.insert(name.clone());
                    }
                }
                Unit::Command(s) => self.learn_command(s),
                _ => {}
            }
        }
    }

    fn learn_command(&mut self, s: &Simple) {
        for (name, value) in &s.assignments {
            if s.appended.contains(name) {
                // `n+=1` builds on the old value: no fresh one.
                self.note(name, parse::is_integer_word(value_text(value)));
            } else if matches!(value, Word::Dynamic(raw) if raw.starts_with(&format!("{name}=("))) {
                self.note_array(name, value_text(value));
            } else {
                self.note_value(name, value_text(value));
            }
        }
        let Some(prog) = s.words.first().and_then(Word::lit) else {
            return;
        };
        match prog {
            "declare" | "typeset" | "local" | "export" | "readonly" => {
                let options = Self::declaration_options(&s.words);
                for w in s.words.iter().skip(1).filter(|w| !w.display().starts_with(['-', '+'])) {
                    let text = w.display();
                    let name = Self::declared(text).map_or_else(|| name_of(text), |(n, _)| n);
                    if let Some((left, value)) = text.split_once('=') {
                        if left.ends_with('+') {
                            self.note(name, parse::is_integer_word(value));
                        } else {
                            self.note_value(name, value);
                        }
                    }
                    if options.contains('i') {
                        if w.lit().is_none() {
                            self.integer_unknown = true;
                        }
                        self.integers.insert(name.to_string());
                    }
                    // An associative array counts from its top-level
                    // declaration on (`Unit::Associative`), in order.
                    if prog != "export" && prog != "readonly" && !options.contains('A') {
                        self.declared_otherwise.insert(name.to_string());
                    }
                }
            }
            "let" => {
                for expr in s.words.iter().skip(1).filter_map(Word::lit) {
                    let names = parse::arithmetic_names(expr);
                    for name in names.assigned {
                        self.note(name, true);
                    }
                    for name in names.initialized {
                        self.fresh.insert(name.to_string());
                    }
                }
            }
            "unset" => {}
            _ => {
                for name in normalize::assigned_names(prog, &s.words) {
                    self.note(&name, false);
                }
                // `env v=x bash -c ...`, `sudo v=x ...`, `timeout 5 env v=x
                // ...`: a word that may assign a variable in what runs.
                let takes_assignments = s.words.iter().filter_map(Word::lit).any(|w| {
                    matches!(
                        w.rsplit('/').next().unwrap_or(w),
                        "env" | "sudo" | "doas" | "run0" | "systemd-run" | "flatpak-spawn"
                    )
                });
                for w in s.words.iter().skip(1).filter(|_| takes_assignments) {
                    let left = w.display().split_once('=').map_or("", |(l, _)| l);
                    let left = left.trim_start_matches(['"', '\'']);
                    let name = name_of(left);
                    if name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    {
                        self.note(name, false);
                    }
                }
            }
        }
    }

    /// The letters of a declaration's options (`-ix` gives `ix`).
    fn declaration_options(words: &[Word]) -> String {
        words
            .iter()
            .skip(1)
            .filter_map(Word::lit)
            .filter_map(|w| w.strip_prefix('-'))
            .filter(|w| !w.starts_with('-'))
            .collect()
    }

    /// `NAME=VALUE`, `NAME+=VALUE`, `NAME[i]=VALUE` in a declaration: the
    /// name and the value as written.
    fn declared(text: &str) -> Option<(&str, &str)> {
        let (left, value) = text.split_once('=')?;
        Some((name_of(left), value))
    }

    fn is_integer(&self, name: &str) -> bool {
        self.integer_unknown || self.integers.contains(name)
    }

    fn is_associative(&self, array: &str) -> bool {
        self.associative.contains(array) && !self.declared_otherwise.contains(array)
    }

    /// Whether a variable surely holds an integer when arithmetic reads it.
    fn holds_an_integer(&self, name: &str) -> bool {
        self.holds_an_integer_past(name, &mut Vec::new())
    }

    /// [`Self::holds_an_integer`], through the copies (`y=$x`) not yet
    /// followed: a copy of itself, however far round, is no integer.
    fn holds_an_integer_past<'n>(&'n self, name: &'n str, seen: &mut Vec<&'n str>) -> bool {
        if Self::TEXT_BY_BASH.contains(&name) || seen.contains(&name) {
            return false;
        }
        seen.push(name);
        match self.assigned.get(name) {
            Some(&integer) => {
                integer
                    && self.fresh.contains(name)
                    && self
                        .copies
                        .get(name)
                        .is_none_or(|from| from.iter().all(|f| self.holds_an_integer_past(f, seen)))
            }
            None => Self::NUMBERS_BY_BASH.contains(&name),
        }
    }

    /// Why arithmetic text may evaluate text the gate does not know: a
    /// variable it reads that may hold any text, or a substitution.
    fn arithmetic_reads_unknown(&self, expr: &str) -> Option<String> {
        let names = parse::arithmetic_names(expr);
        if let Some(unknown) = names.unknown {
            return Some(format!(
                "it holds {unknown}, as arithmetic in turn (a value `a[$(cmd)]` runs cmd, `PATH=7` assigns PATH)"
            ));
        }
        let name = names.read.iter().find(|n| !self.holds_an_integer(n))?;
        let whence = if self.assigned.get(*name) == Some(&true) {
            "the script only builds on its old value (`n++`, `n+=1`, `n=$((n+1))`), which comes from elsewhere"
        } else if self.assigned.contains_key(*name) {
            "the script assigns it something other than an integer"
        } else {
            "the script never assigns it, so its value comes from elsewhere"
        };
        Some(format!(
            "it reads `{name}`, whose value bash evaluates as arithmetic in turn (a value `a[$(cmd)]` runs cmd, `PATH=7` assigns PATH); {whence}"
        ))
    }
}

/// The text of an assigned value as written, for [`parse::is_integer_word`]
/// (an assignment expands no braces: `v={1..3}` is that text).
fn value_text(value: &Word) -> &str {
    match value {
        Word::Pattern(_) => "",
        other => other.display(),
    }
}

/// `$x`, `${x}`, `"$x"`: a copy of the variable x.
fn copied_name(value: &str) -> Option<&str> {
    let v = value
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or(value);
    let v = v.strip_prefix('$')?;
    let name = v.strip_prefix('{').and_then(|v| v.strip_suffix('}')).unwrap_or(v);
    (name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_'))
    .then_some(name)
}

/// The variable's name in `NAME`, `NAME+`, `NAME[i]`.
fn name_of(left: &str) -> &str {
    left.split(['+', '[']).next().unwrap_or(left)
}

/// How well a rule's tokens match an argv.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Match {
    No,
    /// A word the gate cannot know stands where the rule expects a literal.
    Maybe,
    Yes,
}

fn words_text(words: &[Word]) -> String {
    words
        .iter()
        .map(|w| quote_for_display(w.display()))
        .collect::<Vec<_>>()
        .join(" ")
}

fn quote_for_display(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%^".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

impl Gate<'_> {
    fn push(&mut self, command: String, verdict: Verdict, reason: String, source: &str) {
        self.out.push(Judged {
            command,
            verdict,
            reason,
            rule: None,
            source: source.to_string(),
            policy: None,
        });
    }

    fn unit(&mut self, u: Unit, queue: &mut VecDeque<Unit>) {
        match u {
            Unit::Opaque { what, text } => self.push(text, Verdict::Ask, format!("not understood: {what}"), "parser"),
            Unit::DangerousAssignment { name, how } => self.push(
                name.clone(),
                Verdict::Ask,
                format!("{how} assigns {name}, which changes what later commands run"),
                "assignment",
            ),
            Unit::Function(name) => {
                if !self.functions.contains(&name) {
                    self.functions.push(name);
                }
            }
            Unit::EnterShell => self.outer_functions.push(std::mem::take(&mut self.functions)),
            Unit::LeaveShell => self.functions = self.outer_functions.pop().unwrap_or_default(),
            Unit::Associative(name) => {
                if self.outer_functions.is_empty() {
                    self.variables.associative.insert(name);
                }
            }
            Unit::Command(s) => {
                // `unset m`: no longer associative; a name only known at
                // run time may be any.
                if s.words.first().and_then(Word::lit) == Some("unset") {
                    for w in &s.words[1..] {
                        match w.lit() {
                            Some(name) => {
                                self.variables.associative.remove(name);
                            }
                            None => self.variables.associative.clear(),
                        }
                    }
                }
                self.simple(s, queue)
            }
            Unit::Arithmetic {
                expr,
                how,
                subscript_of,
            } => {
                if subscript_of.is_some_and(|array| self.variables.is_associative(&array)) {
                    return; // its subscript is a string, no arithmetic
                }
                if let Some(why) = self.variables.arithmetic_reads_unknown(&expr) {
                    self.push(expr, Verdict::Ask, format!("arithmetic in {how}: {why}"), "parser");
                }
            }
            Unit::Assigned { name, integer, .. } => {
                if !integer && self.variables.is_integer(&name) {
                    self.push(
                        name.clone(),
                        Verdict::Ask,
                        format!("`{name}` is an integer variable, so bash evaluates what is assigned to it as arithmetic, and a loop or `${{{name}:=...}}` gives it text"),
                        "assignment",
                    );
                }
            }
        }
    }

    fn simple(&mut self, s: Simple, queue: &mut VecDeque<Unit>) {
        let shown = if s.words.is_empty() {
            s.assignments
                .iter()
                .map(|(n, v)| format!("{n}={}", v.display()))
                .collect::<Vec<_>>()
                .join(" ")
        } else {
            words_text(&s.words)
        };
        // `IFS=, read -r a b`: the assignment lasts for `read` alone (a
        // regular builtin), which uses it only to split the line it reads
        // into the variables it sets; what later commands run is untouched.
        let reads_a_line =
            matches!(s.words.first(), Some(Word::Lit(w)) if w == "read") && !self.functions.iter().any(|f| f == "read");
        for (name, value) in &s.assignments {
            if self.variables.is_integer(name) {
                self.integer_assignment(&shown, name, value);
            }
        }
        for (name, _) in &s.assignments {
            if is_dangerous_env(name) && !(name == "IFS" && reads_a_line) {
                let how = if s.words.is_empty() {
                    "assignment"
                } else {
                    "assignment before the command"
                };
                self.push(
                    shown.clone(),
                    Verdict::Ask,
                    format!("{how} to {name} changes which program runs or what it loads"),
                    "assignment",
                );
            }
        }
        let interpreter_reads_here = s.redirects.iter().any(|r| r.kind == RedirectKind::HereInput);
        for r in &s.redirects {
            if r.kind == RedirectKind::Write {
                self.write_target(&shown, &r.target, &s.cwd);
            }
        }
        if s.words.is_empty() {
            if s.assignments.is_empty() && s.redirects.iter().all(|r| r.kind != RedirectKind::Write) {
                return;
            }
            // Plain assignments and bare redirects need no rule.
            if !self.out.iter().any(|j| j.command == shown) {
                self.push(shown, Verdict::Allow, "assignment or redirect only".into(), "builtin");
            }
            return;
        }
        self.argv(s.words, &s.cwd, s.depth, interpreter_reads_here, queue);
    }

    /// Judge an argv, seeing through wrappers.
    fn argv(&mut self, mut words: Vec<Word>, cwd: &Cwd, depth: usize, here_input: bool, queue: &mut VecDeque<Unit>) {
        let mut via: Vec<String> = Vec::new();
        // What an `xargs -I R` around this command replaces with its input.
        let mut filled_in_by_xargs: Option<String> = None;
        // The command is run by `xargs`, which adds words from its input.
        let mut under_xargs = false;
        loop {
            let shown = words_text(&words);
            let first = match &words[0] {
                Word::Lit(s) => s.clone(),
                other => {
                    self.push(
                        shown,
                        Verdict::Ask,
                        format!(
                            "the program name `{}` is only known when the script runs",
                            other.display()
                        ),
                        "parser",
                    );
                    return;
                }
            };
            // `time -- cmd`: the parser hands bash's `--` after the `time`
            // keyword over as the program; bash runs what follows.
            if first == "--" {
                words.remove(0);
                if words.is_empty() {
                    return;
                }
                continue;
            }
            let filled_in = filled_in_by_xargs
                .as_deref()
                .is_some_and(|r| !r.is_empty() && first.contains(r));
            if first.starts_with('-') || first.contains("{}") || filled_in || normalize::reads_a_stream(&first) {
                self.push(
                    shown,
                    Verdict::Ask,
                    format!("the program name `{first}` is not one bash runs as written (an option, a name filled in at run time, or an open descriptor)"),
                    "parser",
                );
                return;
            }
            let mut prog = normalize::program(&first);
            // `/usr/lib/git-core/git-push` is `git push`.
            // Its directory however spelled (`git-core/./`, `git-core//`;
            // a `..` on the way could lead anywhere, so it counts too).
            let in_gits_dir = first.rsplit_once('/').is_some_and(|(dir, _)| {
                let mut parts = std::path::Path::new(dir).components();
                parts.clone().any(|c| c == std::path::Component::ParentDir)
                    || parts.next_back().is_some_and(|c| c.as_os_str() == "git-core")
                    || prog.name != first
            });
            if let Some(sub) = prog.base.strip_prefix("git-").filter(|s| !s.is_empty() && in_gits_dir) {
                let sub = sub.to_string();
                words.splice(0..1, [Word::Lit("git".into()), Word::Lit(sub)]);
                prog = normalize::Program {
                    name: first.clone(),
                    base: "git".into(),
                };
            }
            // What the program is, for seeing through it: its file name
            // wherever it lives (`/usr/bin/../bin/env` is still `env`; a
            // look-alike elsewhere is judged as itself too, by its own
            // name). Built-ins have no path, so only their bare name counts.
            let role = prog.base.clone();
            if let Some((_, why)) = OPAQUE_BUILTINS.iter().find(|(n, _)| *n == prog.name) {
                // An explicit deny still wins; otherwise ask. Literal code given
                // to eval/trap is judged too, so a denied command in it denies.
                self.rules_only(&prog, &words, &shown);
                let code = match prog.name.as_str() {
                    "eval" => Some(&words[1..]),
                    "trap" if words.len() > 1 => Some(&words[1..2]),
                    _ => None,
                };
                if let Some(code) = code.filter(|c| !c.is_empty() && c.iter().all(|w| w.lit().is_some())) {
                    let script = code.iter().filter_map(Word::lit).collect::<Vec<_>>().join(" ");
                    let mut units = Vec::new();
                    parse::parse_nested(&script, "bash", depth + 1, cwd, &mut units);
                    self.variables.learn(&units);
                    queue.extend(units);
                }
                self.push(shown, Verdict::Ask, format!("not understood: {why}"), "parser");
                return;
            }
            if let Some(w) = normalize::runtime_assigned_name(&prog.name, &words) {
                self.push(
                    shown.clone(),
                    Verdict::Ask,
                    format!(
                        "`{}` sets a variable whose name is only known at run time (`{w}`), which may be PATH or a subscript bash evaluates",
                        prog.name
                    ),
                    "assignment",
                );
            }
            if prog.name == "printf" {
                if let Some(why) = normalize::printf_assigns_unseen_text(&words) {
                    self.push(shown.clone(), Verdict::Ask, why, "assignment");
                }
            }
            let names = normalize::assigned_names(&prog.name, &words);
            // `read n`, `printf -v n`, `mapfile n` of an integer `n`: text
            // bash evaluates as arithmetic (`PATH=7` assigns PATH).
            if !matches!(
                prog.name.as_str(),
                "unset" | "let" | "export" | "declare" | "typeset" | "local" | "readonly"
            ) {
                if let Some(n) = names.iter().find(|n| self.variables.is_integer(n)) {
                    self.push(
                        shown.clone(),
                        Verdict::Ask,
                        format!(
                            "`{}` puts text the gate cannot see into `{n}`, an integer variable: bash evaluates it as arithmetic, which can assign PATH or run a subscript's substitution",
                            prog.name
                        ),
                        "assignment",
                    );
                }
            }
            // A name with a subscript, where a built-in takes a variable's
            // name (`unset 'a[i]'`, `read a[i]`, `test -v a[i]`): bash
            // evaluates the subscript as arithmetic. (`printf -v a[i]` and
            // `wait -p a[i]` are rare enough to be left to the name checks.)
            let takes_names = matches!(
                prog.name.as_str(),
                "unset"
                    | "read"
                    | "mapfile"
                    | "readarray"
                    | "getopts"
                    | "declare"
                    | "typeset"
                    | "local"
                    | "export"
                    | "readonly"
            );
            // `test -v NAME`, `printf -v NAME`, `wait -p NAME`: one name
            // after an option.
            let name_option = match prog.name.as_str() {
                "test" | "[" | "printf" => Some("-v"),
                "wait" => Some("-p"),
                _ => None,
            };
            for (at, w) in words.iter().enumerate().skip(1) {
                let after_option = name_option.is_some_and(|o| words[at - 1].lit() == Some(o));
                let attached = match (name_option, w) {
                    (Some(o), Word::Lit(t) | Word::Pattern(t)) if o != "-v" || prog.name == "printf" => {
                        t.strip_prefix(o).filter(|rest| !rest.is_empty())
                    }
                    _ => None,
                };
                if let Word::Dynamic(text) = w {
                    // A name known only at run time may hold a subscript,
                    // which bash evaluates as arithmetic.
                    if after_option
                        || name_option.is_some_and(|o| text.starts_with(o) && prog.name != "test" && prog.name != "[")
                    {
                        self.push(
                            shown.clone(),
                            Verdict::Ask,
                            format!("`{}` takes a variable's name known only at run time, whose subscript bash evaluates as arithmetic", prog.name),
                            "parser",
                        );
                    }
                    continue;
                }
                let (Word::Lit(text) | Word::Pattern(text)) = w else {
                    continue;
                };
                let text = attached.unwrap_or(text);
                if !(takes_names || after_option || attached.is_some()) {
                    continue;
                }
                let left = text.split_once('=').map_or(text, |(l, _)| l);
                let Some((array, subscript)) = left.split_once('[') else {
                    continue;
                };
                let is_name = array.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                    && array.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                if !is_name || self.variables.is_associative(array) {
                    continue;
                }
                let subscript = subscript.trim_end_matches('+').strip_suffix(']').unwrap_or(subscript);
                if let Some(why) = self.variables.arithmetic_reads_unknown(subscript) {
                    self.push(
                        shown.clone(),
                        Verdict::Ask,
                        format!("arithmetic in the subscript of `{left}`: {why}"),
                        "parser",
                    );
                }
            }
            // Each of `let`'s words is arithmetic.
            if prog.name == "let" {
                for expr in words.iter().skip(1).filter_map(Word::lit) {
                    if let Some(why) = self.variables.arithmetic_reads_unknown(expr) {
                        self.push(
                            shown.clone(),
                            Verdict::Ask,
                            format!("`let` evaluates arithmetic: {why}"),
                            "parser",
                        );
                    }
                }
            }
            if let Some(n) = names.iter().find(|n| is_dangerous_env(n)) {
                self.push(
                    shown.clone(),
                    Verdict::Ask,
                    format!("`{}` assigns {n}, which changes what later commands run", prog.name),
                    "assignment",
                );
            }
            // Where the names sit is known for `read`, `mapfile`, `printf -v`,
            // `unset` and `getopts` (above): their other words are values.
            // Declarations take any word as an assignment.
            if matches!(
                prog.name.as_str(),
                "export" | "declare" | "typeset" | "local" | "readonly"
            ) || (prog.name == "let" && !names.is_empty())
            {
                if let Some(w) = words.iter().skip(1).find(|w| w.lit().is_none()) {
                    self.push(
                        shown.clone(),
                        Verdict::Ask,
                        format!(
                            "`{}` assigns through a word only known at run time (`{}`)",
                            prog.name,
                            w.display()
                        ),
                        "assignment",
                    );
                }
                // `declare -i n=VALUE`, `local n=VALUE` of an integer `n`.
                let declares_integers = Variables::declaration_options(&words).contains('i');
                for w in words.iter().skip(1).filter(|w| !w.display().starts_with(['-', '+'])) {
                    let Some((name, value)) = Variables::declared(w.display()) else {
                        continue;
                    };
                    if declares_integers || self.variables.is_integer(name) {
                        let value = match w {
                            Word::Lit(_) => Word::Lit(value.to_string()),
                            _ => Word::Dynamic(value.to_string()),
                        };
                        self.integer_assignment(&shown, name, &value);
                    }
                }
                if prog.name == "export" && words.iter().any(|w| w.lit() == Some("-f")) {
                    self.push(
                        shown.clone(),
                        Verdict::Ask,
                        "`export -f` exports a function into child shells".into(),
                        "assignment",
                    );
                }
            }
            if under_xargs && normalize::runs_other_programs(&role) && !normalize::takes_appended_words(&role, &words) {
                self.ask_after_rules(
                    &prog,
                    &words,
                    shown,
                    format!(
                        "`xargs` adds words read at run time to `{}`, which may name what it runs",
                        prog.name
                    ),
                );
                return;
            }
            if normalize::hides_an_option(&role, &words) {
                self.ask_after_rules(
                    &prog,
                    &words,
                    shown,
                    format!(
                        "`{}` has a word only known at run time where an option could be",
                        prog.name
                    ),
                );
                return;
            }
            if let Some(why) = normalize::runs_code_from_an_option(&role, &words) {
                self.ask_after_rules(&prog, &words, shown, format!("not understood: {why}"));
                return;
            }
            if prog.name == "hash" && words.iter().any(|w| w.lit() == Some("-p")) {
                self.push(
                    shown,
                    Verdict::Ask,
                    "`hash -p` changes which file a command name runs".into(),
                    "parser",
                );
                return;
            }
            if here_input && normalize::is_interpreter(&role) {
                self.push(
                    shown.clone(),
                    Verdict::Ask,
                    format!("a here-document or here-string feeds code to `{}`", prog.name),
                    "parser",
                );
            }
            let unwrapped = normalize::unwrap(&role, &words);
            if role == "xargs" {
                let own = match unwrapped {
                    Unwrapped::Inner(i) => i,
                    _ => words.len(),
                };
                filled_in_by_xargs = normalize::xargs_replace_string(&words[..own]);
                under_xargs = true;
            }
            match unwrapped {
                Unwrapped::Final => {}
                Unwrapped::Ask(why) => {
                    self.ask_after_rules(&prog, &words, shown, format!("not understood: {why}"));
                    return;
                }
                Unwrapped::Unparsed(why) => {
                    // Every program its arguments name meets the deny and ask
                    // rules, as if it ran (`taskset 1 rm x` denies as `rm x`).
                    for i in 1..words.len() {
                        if let Some(w) = words[i].lit().filter(|w| !w.starts_with('-')) {
                            let inner = normalize::program(w);
                            self.rules_only(&inner, &words[i..], &words_text(&words[i..]));
                        }
                    }
                    // The command strings it runs with a shell (`flock LOCK
                    // -c 'make'`) are scripts, judged as such.
                    match normalize::command_strings(&role, &words) {
                        Ok(strings) => {
                            for script in &strings.scripts {
                                match script {
                                    Word::Lit(script) => {
                                        let mut units = Vec::new();
                                        parse::parse_nested(script, strings.shell, depth + 1, cwd, &mut units);
                                        self.variables.learn(&units);
                                        queue.extend(units);
                                    }
                                    other => self.push(
                                        shown.clone(),
                                        Verdict::Ask,
                                        format!(
                                            "`{}` runs a command string only known at run time (`{}`)",
                                            prog.name,
                                            other.display()
                                        ),
                                        "parser",
                                    ),
                                }
                            }
                        }
                        Err(why) => {
                            self.ask_after_rules(&prog, &words, shown, format!("not understood: {why}"));
                            return;
                        }
                    }
                    // Allowed as it is by a rule, unless its arguments hold
                    // something the suffix scan cannot follow: a shell, a
                    // wrapper, git (its options), a word only known at run time.
                    let plain = words[1..].iter().all(|w| {
                        w.lit()
                            .is_some_and(|w| !normalize::runs_other_programs(&normalize::program(w).base))
                    });
                    if plain && self.allowed_by_rule_in_every_layer(&prog, &words) {
                        self.final_command(&prog, &words, &shown);
                    } else {
                        self.ask_after_rules(&prog, &words, shown, format!("not understood: {why}"));
                    }
                    return;
                }
                Unwrapped::InnerAsk(i, why) => {
                    self.push(shown.clone(), Verdict::Ask, format!("not understood: {why}"), "parser");
                    self.rules_only(&prog, &words, &shown);
                    via.push(prog.name);
                    words = words.split_off(i);
                    continue;
                }
                Unwrapped::Inner(i) => {
                    self.rules_only(&prog, &words, &shown);
                    via.push(prog.name);
                    words = words.split_off(i);
                    continue;
                }
                Unwrapped::InnerWithWrite { inner, file } => {
                    self.write_target(&shown, &words[file].clone(), cwd);
                    self.rules_only(&prog, &words, &shown);
                    via.push(prog.name);
                    words = words.split_off(inner);
                    continue;
                }
                Unwrapped::Script { index } => {
                    self.rules_only(&prog, &words, &shown);
                    let filled_in = |script: &str| {
                        script.trim() == "{}"
                            || filled_in_by_xargs
                                .as_deref()
                                .is_some_and(|r| !r.is_empty() && script.contains(r))
                    };
                    match &words[index] {
                        Word::Lit(script) if filled_in(script) => self.push(
                            shown,
                            Verdict::Ask,
                            format!(
                                "`{} -c` runs a script that find or xargs fills in at run time",
                                prog.name
                            ),
                            "parser",
                        ),
                        Word::Lit(script) => {
                            let mut units = Vec::new();
                            parse::parse_nested(script, &role, depth + 1, cwd, &mut units);
                            self.variables.learn(&units);
                            queue.extend(units);
                        }
                        other => self.push(
                            shown,
                            Verdict::Ask,
                            format!(
                                "`{} -c` runs a script only known at run time (`{}`)",
                                prog.name,
                                other.display()
                            ),
                            "parser",
                        ),
                    }
                    return;
                }
                Unwrapped::JoinedScript { from } => {
                    self.rules_only(&prog, &words, &shown);
                    if words[from..].iter().all(|w| w.lit().is_some()) {
                        let script = words[from..].iter().filter_map(Word::lit).collect::<Vec<_>>().join(" ");
                        let mut units = Vec::new();
                        // watch runs the text with `sh -c`.
                        parse::parse_nested(&script, "sh", depth + 1, cwd, &mut units);
                        self.variables.learn(&units);
                        queue.extend(units);
                    } else {
                        self.push(
                            shown,
                            Verdict::Ask,
                            format!("`{}` runs words only known at run time", prog.name),
                            "parser",
                        );
                    }
                    return;
                }
            }
            // Programs that run other programs from their arguments.
            if role == "find" {
                for (a, b) in normalize::find_exec_ranges(&words) {
                    if a < b {
                        // find puts each path it finds where `{}` stands, in
                        // any word (`git pu{}`): those words are only known
                        // at run time. (The program's own name is judged
                        // for it as it stands.)
                        let mut inner = words[a..b].to_vec();
                        for w in inner.iter_mut().skip(1) {
                            if w.lit().is_some_and(|t| t.contains("{}")) {
                                *w = Word::Dynamic(w.display().to_string());
                            }
                        }
                        queue.push_back(Unit::EnterShell);
                        queue.push_back(Unit::Command(Simple {
                            assignments: vec![],
                            appended: vec![],
                            words: inner,
                            redirects: vec![],
                            cwd: Cwd::Unknown,
                            depth: depth + 1,
                        }));
                        queue.push_back(Unit::LeaveShell);
                    }
                }
            }
            let mut argv = words.clone();
            if role == "git" {
                match normalize::git_subcommand(&words) {
                    Ok(i) => {
                        argv = std::iter::once(Word::Lit("git".into()))
                            .chain(words[i..].iter().cloned())
                            .collect();
                        if let Some(why) = normalize::git_runs_a_program(&argv) {
                            self.ask_after_rules(&prog, &argv, shown, format!("not understood: {why}"));
                            return;
                        }
                    }
                    Err(why) => {
                        self.ask_after_rules(&prog, &words, shown, why);
                        return;
                    }
                }
            }
            let prefix = if via.is_empty() {
                String::new()
            } else {
                format!("{} → ", via.join(" → "))
            };
            // `unset NAME` unsets a function of that name when no variable has it.
            if prog.name == "unset" {
                if words.iter().skip(1).any(|w| w.lit().is_none()) {
                    // A name only known at run time: any function may be gone.
                    self.unset_anywhere.push("*".into());
                }
                self.unset_anywhere
                    .extend(words.iter().skip(1).filter_map(Word::lit).map(str::to_string));
            }
            // A function unset anywhere, even in a body judged before it was
            // defined, may be gone when it is called: the program runs.
            self.calling_function = via.is_empty()
                && !first.contains('/')
                && self.functions.contains(&prog.name)
                && !self.unset_anywhere.iter().any(|n| n == "*" || *n == prog.name);
            self.final_command(&prog, &argv, &format!("{prefix}{}", words_text(&argv)));
            self.calling_function = false;
            return;
        }
    }

    /// A value assigned to an integer variable (`declare -i n`), which bash
    /// evaluates as arithmetic: `n=PATH=7` assigns PATH, `n=v` evaluates
    /// v's value in turn. Text only known at run time asks, unless it is a
    /// number by construction (`$((...))`).
    fn integer_assignment(&mut self, shown: &str, name: &str, value: &Word) {
        let why = match value {
            Word::Lit(text) | Word::Pattern(text) => {
                let assigned = parse::arithmetic_names(text).assigned;
                match assigned.iter().find(|n| is_dangerous_env(n)) {
                    Some(danger) => Some(format!("assigns {danger}")),
                    None => self.variables.arithmetic_reads_unknown(text),
                }
            }
            Word::Dynamic(raw) if parse::is_integer_word(raw) => None,
            Word::Dynamic(raw) => Some(format!("is `{raw}`, only known at run time")),
        };
        if let Some(why) = why {
            self.push(
                shown.to_string(),
                Verdict::Ask,
                format!("`{name}` is an integer variable, so bash evaluates what is assigned to it as arithmetic, and this value {why}"),
                "assignment",
            );
        }
    }

    /// Whether an allow rule (not the default) names this command in every
    /// layer: the person allowed it as it is, arguments and all.
    fn allowed_by_rule_in_every_layer(&self, prog: &Program, argv: &[Word]) -> bool {
        self.policy.layers.iter().all(|layer| {
            layer
                .rules(RuleList::BashAllowPrefixes)
                .iter()
                .any(|rule| rule_match(&rule.tokens, prog, argv, false) == Match::Yes)
        })
    }

    /// Match a program's argv against every layer; record the strictest.
    fn final_command(&mut self, prog: &Program, argv: &[Word], shown: &str) {
        let mut best: Option<Judged> = None;
        for layer in &self.policy.layers {
            let j = self.judge_in_layer(layer, prog, argv, shown, true);
            if best.as_ref().is_none_or(|b| j.verdict > b.verdict) {
                best = Some(j);
            }
        }
        if let Some(j) = best {
            self.out.push(j);
        }
    }

    /// What the gate does not understand asks, but a deny or ask rule naming
    /// the program itself still counts.
    fn ask_after_rules(&mut self, prog: &Program, words: &[Word], shown: String, reason: String) {
        self.rules_only(prog, words, &shown);
        self.push(shown, Verdict::Ask, reason, "parser");
    }

    /// For wrappers: only explicit deny/ask matches count (at least `floor`).
    fn rules_only(&mut self, prog: &Program, words: &[Word], shown: &str) {
        for layer in &self.policy.layers {
            let j = self.judge_in_layer(layer, prog, words, shown, false);
            if j.verdict > Verdict::Allow {
                self.out.push(j);
            }
        }
    }

    fn judge_in_layer(
        &mut self,
        layer: &Layer,
        prog: &Program,
        argv: &[Word],
        shown: &str,
        final_level: bool,
    ) -> Judged {
        let judged = |verdict, reason: String, rule: Option<String>, source: &str| Judged {
            command: shown.to_string(),
            verdict,
            reason,
            rule,
            source: source.to_string(),
            policy: Some(layer.source.clone()),
        };
        for list in [RuleList::Deny, RuleList::RequireApprovalFor] {
            let mut maybe: Option<String> = None;
            for rule in layer.rules(list) {
                match rule_match(&rule.tokens, prog, argv, true) {
                    Match::Yes => {
                        if list == RuleList::RequireApprovalFor {
                            self.approvals = self.approvals.max(rule.approvals);
                            self.preview &= rule.preview;
                        }
                        let what = if list == RuleList::Deny {
                            "deny rule"
                        } else {
                            "approval required by rule"
                        };
                        return judged(
                            list.verdict(),
                            format!("{what} \"{}\" ({})", rule.text(), layer.source),
                            Some(rule.text()),
                            list.key(),
                        );
                    }
                    Match::Maybe => maybe = maybe.or(Some(rule.text())),
                    Match::No => {}
                }
            }
            if let Some(text) = maybe {
                return judged(
                    Verdict::Ask,
                    format!(
                        "a word only known at run time could make this match {} rule \"{text}\" ({})",
                        list.key(),
                        layer.source
                    ),
                    Some(text),
                    list.key(),
                );
            }
        }
        if !final_level {
            return judged(Verdict::Allow, String::new(), None, "wrapper");
        }
        for rule in layer.rules(RuleList::BashAllowPrefixes) {
            if rule_match(&rule.tokens, prog, argv, false) == Match::Yes {
                return judged(
                    Verdict::Allow,
                    format!("allowed by rule \"{}\" ({})", rule.text(), layer.source),
                    Some(rule.text()),
                    RuleList::BashAllowPrefixes.key(),
                );
            }
        }
        if self.calling_function {
            return judged(
                Verdict::Allow,
                format!(
                    "calls `{}`, a function this script defines; its body is judged on its own",
                    prog.name
                ),
                None,
                "function",
            );
        }
        if HARMLESS_BUILTINS.contains(&prog.name.as_str()) {
            return judged(
                Verdict::Allow,
                format!("`{}` is a harmless shell built-in", prog.name),
                None,
                "builtin",
            );
        }
        let why = if layer.default == Verdict::Allow
            && layer.allow.is_empty()
            && layer.ask.is_empty()
            && layer.deny.is_empty()
        {
            format!("no rule lists: every command is allowed, confined ({})", layer.source)
        } else {
            format!(
                "no rule in the allowlist (bash_allow_prefixes) or elsewhere matches; the default is {} ({})",
                layer.default, layer.source
            )
        };
        judged(layer.default, why, None, "default")
    }

    /// A redirect writes `target`: judge where it lands.
    fn write_target(&mut self, shown: &str, target: &Word, cwd: &Cwd) {
        let verdict = self.judge_write(target, cwd);
        if let Some((v, reason)) = verdict {
            self.push(shown.to_string(), v, reason, "redirect");
        }
    }

    fn judge_write(&self, target: &Word, cwd: &Cwd) -> Option<(Verdict, String)> {
        let t = match target {
            Word::Lit(t) => t,
            other => {
                return Some((
                    Verdict::Ask,
                    format!("a redirect writes to `{}`, only known at run time", other.display()),
                ))
            }
        };
        if matches!(
            t.as_str(),
            "/dev/null" | "/dev/stdout" | "/dev/stderr" | "/dev/tty" | "/dev/zero" | "/dev/full"
        ) || t.starts_with("/dev/fd/")
        {
            return None;
        }
        let abs = if t.starts_with('/') {
            lexical(Path::new(t))
        } else {
            let base = match (cwd, &self.ctx.cwd) {
                (Cwd::Known(rel), Some(start)) => self.ctx.workspace.join(start).join(rel),
                _ => {
                    return Some((
                        Verdict::Ask,
                        format!("a redirect writes to `{t}` relative to a directory the gate cannot follow"),
                    ))
                }
            };
            lexical(&base.join(t))
        };
        let Some(abs) = abs else {
            return Some((
                Verdict::Deny,
                format!("a redirect writes to `{t}`, which climbs above /"),
            ));
        };
        let ws = &self.ctx.workspace;
        if let Ok(rel) = abs.strip_prefix(ws) {
            let rel = rel.to_string_lossy();
            let globs = self.globs.get_or_init(|| self.policy.path_globs());
            if let Some(p) = globs.protected_by(&rel) {
                return Some((
                    Verdict::Deny,
                    format!("a redirect writes to protected path `{rel}` ({p})"),
                ));
            }
            if self.policy.profile() == Profile::ReadOnly {
                return Some((
                    Verdict::Deny,
                    format!("a redirect writes to `{rel}`, but the profile is read-only"),
                ));
            }
            if !rel.is_empty() && !globs.writable(&rel) {
                return Some((
                    Verdict::Deny,
                    format!("a redirect writes to `{rel}`, outside writable_globs"),
                ));
            }
            return None;
        }
        if abs.starts_with("/tmp") && abs != Path::new("/tmp") {
            return None; // the sandbox's private /tmp
        }
        Some((
            Verdict::Deny,
            format!("a redirect writes to `{}`, outside the workspace", abs.display()),
        ))
    }
}

/// Normalise `.` and `..` without touching the filesystem; `None` if it climbs above `/`.
fn lexical(p: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::Normal(n) => out.push(n),
        }
    }
    Some(out)
}

/// Does a rule's token list match an argv? `strict` rules (deny, ask) also match
/// a program given by path through its base name (`./rm`, `/tmp/rm`).
fn rule_match(tokens: &[String], prog: &Program, argv: &[Word], strict: bool) -> Match {
    if argv.len() < tokens.len() {
        return Match::No;
    }
    let head = &tokens[0];
    let program_ok = if head.contains('/') {
        argv[0].lit() == Some(head.as_str())
    } else {
        prog.name == *head || (strict && prog.base == *head)
    };
    if !program_ok {
        return Match::No;
    }
    let mut m = Match::Yes;
    for (t, w) in tokens[1..].iter().zip(&argv[1..]) {
        match w {
            Word::Lit(s) if s == t => {}
            Word::Lit(_) => return Match::No,
            Word::Pattern(_) | Word::Dynamic(_) => m = Match::Maybe,
        }
    }
    m
}
