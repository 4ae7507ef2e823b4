//! Command line: argument parsing and output formats only; no policy logic.
//!
//! Every decision is made by `gate`, every side effect by the module that owns
//! it. tether-exec's own messages go to stderr as one line first, detail after;
//! the command's stdout and stderr are never mixed with them.

use crate::exit;
use crate::gate::{self, Context, Decision, Input};
use crate::policy::{Layer, Policy, Verdict};
use clap::{Args, Parser, Subcommand};

mod approvals;
mod audit;
use std::path::{Path, PathBuf};

#[derive(Parser, Debug)]
#[command(
    name = "tether-exec",
    version,
    about = "Gate and kernel-confine every shell command an AI agent runs",
    long_about = "tether-exec decides, outside the model, whether a command may run now (allow), must wait for a human (ask), or is refused (deny); when it runs, the Linux kernel confines it (user/mount/pid/net/ipc/uts namespaces, Landlock, seccomp).",
    after_help = "Exit codes: the command's own (128+N for signal N); 75 held for approval; 77 refused by policy; 124 timed out; 125 tether-exec failed; 126/127 cannot execute / not found."
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// Options every subcommand takes.
#[derive(Args, Debug, Clone)]
pub struct GlobalArgs {
    /// State directory (approvals, audit). Default: $XDG_STATE_HOME/tether-exec, else ~/.local/state/tether-exec (home from the password database).
    #[arg(long, global = true, env = STATE_DIR_ENV, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
}

const STATE_DIR_ENV: &str = "TETHER_EXEC_STATE_DIR";

/// The usual shapes of a `run` command line (`args` without the program
/// name), read without building a parser: every agent command is a `run`, and
/// clap's share of a launch was still 0.2 ms with `RunCli`. Only long options
/// given as `--name VALUE` or `--name=VALUE` (`--state-dir` before `run` too,
/// see [`leading_global`]), `-c SCRIPT`, and the program
/// after `--`; `None` for anything else (help, an unknown or repeated option,
/// a value that is missing, empty or starts with `-`, text that is not
/// UTF-8, `-c` together with `--`), which `RunCli` then parses, with its
/// errors and help. A property test holds every command line this accepts to
/// `RunCli`'s reading of it. `env_state_dir`: `TETHER_EXEC_STATE_DIR`.
fn parse_run_fast(
    args: &[std::ffi::OsString],
    env_state_dir: Option<&std::ffi::OsStr>,
) -> Option<(GlobalArgs, RunArgs)> {
    let (before_verb, args) = leading_global(args)?;
    let mut it = args.iter();
    if it.next()? != "run" {
        return None;
    }
    let mut spec = CommandSpec {
        policies: Vec::new(),
        workspace: None,
        script: None,
        argv: Vec::new(),
    };
    let (mut session, mut receipt, mut state_dir) = (None, None, before_verb.map(PathBuf::from));
    let mut program = false;
    while let Some(arg) = it.next() {
        let arg = arg.to_str()?;
        if arg == "--" {
            program = true;
            for a in it.by_ref() {
                spec.argv.push(a.to_str()?.to_string());
            }
            break;
        }
        let (name, value, inline) = option_and_value(arg, &mut it)?;
        match name {
            "--policy" => spec.policies.push(PathBuf::from(value)),
            "--workspace" => set_once(&mut spec.workspace, PathBuf::from(value))?,
            "--session" => set_once(&mut session, value.to_string())?,
            "--receipt" => set_once(&mut receipt, PathBuf::from(value))?,
            "--state-dir" => set_once(&mut state_dir, PathBuf::from(value))?,
            "-c" if !inline => set_once(&mut spec.script, value.to_string())?,
            _ => return None,
        }
    }
    if spec.script.is_some() && program {
        return None;
    }
    let global = global_args(state_dir, env_state_dir)?;
    Some((global, RunArgs { spec, session, receipt }))
}

/// `--state-dir DIR` (or `--state-dir=DIR`) before the subcommand, where
/// tether-sdk puts it, read by hand as the subcommand's options are: its
/// value (if given there) and the rest of the line. `None` when the line
/// starts with the option but its value is one for clap to judge (see
/// [`option_and_value`]).
fn leading_global(args: &[std::ffi::OsString]) -> Option<(Option<&str>, &[std::ffi::OsString])> {
    let first = args.first().and_then(|a| a.to_str());
    let Some(first) = first.filter(|a| *a == "--state-dir" || a.starts_with("--state-dir=")) else {
        return Some((None, args));
    };
    let mut rest = args[1..].iter();
    let (_, value, _) = option_and_value(first, &mut rest)?;
    Some((Some(value), rest.as_slice()))
}

/// One option of a command line read by hand: `--name=VALUE`, or `NAME
/// VALUE` with the value taken from `rest`. `None` when the value is missing,
/// empty, starts with `-` or is not UTF-8 (clap's reading then decides). The
/// flag: the value was given inline.
fn option_and_value<'a>(
    arg: &'a str,
    rest: &mut std::slice::Iter<'a, std::ffi::OsString>,
) -> Option<(&'a str, &'a str, bool)> {
    let (name, value, inline) = match arg.split_once('=') {
        Some((name, value)) if name.starts_with("--") => (name, value, true),
        _ => (arg, rest.next()?.to_str()?, false),
    };
    (!value.is_empty() && !value.starts_with('-')).then_some((name, value, inline))
}

/// A value given at most once; `None` (clap decides) the second time.
fn set_once<T>(slot: &mut Option<T>, value: T) -> Option<()> {
    slot.replace(value).is_none().then_some(())
}

/// The global options as clap reads them: `--state-dir`, else
/// `TETHER_EXEC_STATE_DIR`; `None` for an empty variable, which clap refuses
/// even when the option is given.
fn global_args(state_dir: Option<PathBuf>, env_state_dir: Option<&std::ffi::OsStr>) -> Option<GlobalArgs> {
    if env_state_dir.is_some_and(|e| e.is_empty()) {
        return None;
    }
    Some(GlobalArgs {
        state_dir: state_dir.or_else(|| env_state_dir.map(PathBuf::from)),
    })
}

/// `approve ID`, `reject ID --reason TEXT` (each optionally with `--resume
/// [--receipt FILE]`) and `resume ID [--receipt FILE]`, each with
/// `--state-dir DIR` anywhere (before the subcommand too), read without building the whole
/// command tree (about 0.3 ms of each of the three processes a held action
/// costs). Same rules as [`parse_run_fast`]: long options as `--name VALUE`
/// or `--name=VALUE`, each at most once; one id that does not start with
/// `-`; `None` for anything else, which [`Cli`] then parses.
fn parse_approval_fast(
    args: &[std::ffi::OsString],
    env_state_dir: Option<&std::ffi::OsStr>,
) -> Option<(GlobalArgs, Command)> {
    let (before_verb, args) = leading_global(args)?;
    let mut it = args.iter();
    let verb = it.next()?.to_str()?;
    if !matches!(verb, "approve" | "reject" | "resume") {
        return None;
    }
    let (mut id, mut reason, mut receipt, mut state_dir) = (None, None, None, before_verb.map(str::to_string));
    let mut then_resume = false;
    while let Some(arg) = it.next() {
        let arg = arg.to_str()?;
        if !arg.starts_with('-') {
            set_once(&mut id, arg.to_string())?;
            continue;
        }
        if arg == "--resume" && verb != "resume" {
            if std::mem::replace(&mut then_resume, true) {
                return None;
            }
            continue;
        }
        let (name, value, _) = option_and_value(arg, &mut it)?;
        let slot = match (verb, name) {
            (_, "--state-dir") => &mut state_dir,
            ("reject", "--reason") => &mut reason,
            (_, "--receipt") => &mut receipt,
            _ => return None,
        };
        set_once(slot, value.to_string())?;
    }
    let id = id?;
    // A receipt is a resume's: without --resume, clap says so.
    if receipt.is_some() && verb != "resume" && !then_resume {
        return None;
    }
    let global = global_args(state_dir.map(PathBuf::from), env_state_dir)?;
    let receipt = receipt.map(PathBuf::from);
    let command = match verb {
        "approve" => Command::Approve {
            id,
            resume: then_resume,
            receipt,
        },
        "reject" => Command::Reject {
            id,
            reason: reason?,
            resume: then_resume,
            receipt,
        },
        _ => Command::Resume { id, receipt },
    };
    Some((global, command))
}

/// The command line when it starts with `run`: [`Cli`] with that one
/// subcommand. Every agent command is a `run`, and building the whole command
/// tree (every subcommand's arguments and help) before parsing costs a launch
/// about 0.1 ms; this parses the same `run` arguments with the same global
/// options (a test compares both parsers and their help).
#[derive(Parser, Debug)]
#[command(name = "tether-exec", version)]
pub struct RunCli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: RunOnly,
}

#[derive(Subcommand, Debug)]
pub enum RunOnly {
    #[command(about = RUN_ABOUT, after_help = RUN_EXAMPLES)]
    Run(RunArgs),
}

const RUN_ABOUT: &str =
    "Gate the command, then run it confined (exit: the command's own; 75 held; 77 refused; 124 timeout; 125 failure)";

const RUN_EXAMPLES: &str = "Examples:\n  tether-exec run -c 'pytest -q && ruff check .'\n  tether-exec run --policy policies/workspace-write.toml --receipt /tmp/r.json -- cargo test\n  echo data | tether-exec run -- wc -c";

/// `run`'s arguments.
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    #[command(flatten)]
    pub spec: CommandSpec,
    /// Session this action belongs to (approvals bind to it).
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// Write the JSON receipt here.
    #[arg(long, value_name = "FILE")]
    pub receipt: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
pub struct CommandSpec {
    /// Policy file (TOML or JSON); repeat to narrow: `--policy A --policy B` means B narrows A.
    #[arg(long = "policy", value_name = "FILE")]
    pub policies: Vec<PathBuf>,
    /// The workspace (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// A bash script; every simple command in it is gated.
    #[arg(short = 'c', value_name = "SCRIPT", conflicts_with = "argv")]
    pub script: Option<String>,
    /// A program and its arguments, run directly without a shell.
    #[arg(last = true, value_name = "PROG [ARG]...")]
    pub argv: Vec<String>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    #[command(about = RUN_ABOUT, after_help = RUN_EXAMPLES)]
    Run(RunArgs),
    /// Decide about a command without running it (exit 0 allow, 75 ask, 77 deny).
    #[command(
        after_help = "Examples:\n  tether-exec check --policy policies/ci-runner.toml -c 'pytest -q && ruff check .'\n  tether-exec check --json -- git push origin main"
    )]
    Check {
        #[command(flatten)]
        spec: CommandSpec,
        /// Print the decision as JSON.
        #[arg(long)]
        json: bool,
    },
    /// List held actions waiting for a human.
    #[command(after_help = "Example:\n  tether-exec pending --json")]
    Pending {
        #[arg(long)]
        json: bool,
    },
    /// Show exactly what a held action would run, where, under which policy, and what an approval binds.
    #[command(after_help = "Example:\n  tether-exec show apr_0123456789abcdef --json")]
    Show {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Approve a held action with your Ed25519 key (created on first use, outside the state directory).
    #[command(
        after_help = "Examples:\n  tether-exec approve apr_0123456789abcdef\n  tether-exec approve apr_0123456789abcdef --resume --receipt /tmp/r.json   (approve, then run it now)\nThe key lives at $TETHER_EXEC_APPROVER_KEY, else ~/.config/tether-exec/approver.key (home from the password database).\nThe first approver key used with a state directory is trusted automatically; add more with `tether-exec approver trust`."
    )]
    Approve {
        id: String,
        /// Then resume it in this same process, once it has every approval it
        /// needs: its output and exit code are then the command's, as from
        /// `resume` (75 while it still needs another approver).
        #[arg(long)]
        resume: bool,
        /// With --resume: write the JSON receipt of the resume here.
        #[arg(long, value_name = "FILE", requires = "resume")]
        receipt: Option<PathBuf>,
    },
    /// Reject a held action; its resume then reports the reason to the agent.
    #[command(
        after_help = "Example:\n  tether-exec reject apr_0123456789abcdef --reason \"delete build/ with make clean instead\""
    )]
    Reject {
        id: String,
        #[arg(long)]
        reason: String,
        /// Then resume it in this same process: it prints the rejection as the
        /// agent's observation (`[ACTION REJECTED BY POLICY]: REASON`) and exits 77.
        #[arg(long)]
        resume: bool,
        /// With --resume: write the JSON receipt of the resume here.
        #[arg(long, value_name = "FILE", requires = "resume")]
        receipt: Option<PathBuf>,
    },
    /// Run an approved action exactly once (exit: its code; 75 still pending; 77 rejected or no longer valid).
    #[command(after_help = "Example:\n  tether-exec resume apr_0123456789abcdef --receipt /tmp/r.json")]
    Resume {
        id: String,
        #[arg(long, value_name = "FILE")]
        receipt: Option<PathBuf>,
    },
    /// Manage approver keys.
    #[command(subcommand)]
    Approver(ApproverCommand),
    /// Verify or show the tamper-evident audit trail.
    #[command(subcommand)]
    Audit(AuditCommand),
    /// Report what this kernel offers for confinement, and what to do about what is missing.
    #[command(after_help = "Example:\n  tether-exec doctor --json")]
    Doctor {
        #[arg(long)]
        json: bool,
    },
    /// Validate and combine policy files.
    #[command(subcommand)]
    Policy(PolicyCommand),
}

#[derive(Subcommand, Debug)]
pub enum ApproverCommand {
    /// Print your approver key id and public key (hex), creating the key if needed.
    #[command(after_help = "Example:\n  tether-exec approver show")]
    Show,
    /// Trust another approver's public key (64 hex characters) in this state directory.
    #[command(
        after_help = "Example (the second approver runs `tether-exec approver show` and sends you the key):\n  tether-exec approver trust 3b6a27bcceb6a42d62a3a8d02a6f0d73653215771de243a63ac048a18b59da29"
    )]
    Trust { public_key: String },
}

#[derive(Subcommand, Debug)]
pub enum AuditCommand {
    /// Check the hash chain and signed checkpoints; exit 0 intact, 1 tampered (naming the first bad record).
    #[command(after_help = "Example:\n  tether-exec audit verify --json")]
    Verify {
        #[arg(long)]
        json: bool,
    },
    /// Print records, for a person or as JSON lines.
    #[command(
        after_help = "Examples:\n  tether-exec audit show --session ses_demo\n  tether-exec audit show --json --since 100"
    )]
    Show {
        #[arg(long)]
        json: bool,
        #[arg(long)]
        session: Option<String>,
        /// Only records with a sequence number at or above N.
        #[arg(long, value_name = "N")]
        since: Option<u64>,
    },
}

#[derive(Subcommand, Debug)]
pub enum PolicyCommand {
    /// Check policy files: syntax, keys, globs, contradictions, rule examples.
    #[command(after_help = "Example:\n  tether-exec policy validate policies/*.toml")]
    Validate {
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
    },
    /// Print the effective policy of PARENT narrowed by CHILD, and its digest.
    #[command(
        after_help = "Example:\n  tether-exec policy narrow policies/workspace-write.toml policies/docs-writer.toml"
    )]
    Narrow { parent: PathBuf, child: PathBuf },
}

/// Print tether-exec's own error: one line first, detail after.
pub fn error_line(msg: &str) {
    let mut lines = msg.lines();
    if let Some(first) = lines.next() {
        eprintln!("tether-exec: {first}");
    }
    for l in lines {
        eprintln!("{l}");
    }
}

/// For the commands that only print (`pending`, `show`, `audit show`, ...):
/// `tether-exec audit show | head` ends quietly when `head` has read
/// enough, as `cat` would, instead of panicking on the closed pipe (Rust
/// ignores SIGPIPE, so each write would fail instead). Not for `run` or
/// `resume`: a harness that stops reading must not kill the launcher
/// in the middle of a run it has to record.
fn end_quietly_on_a_closed_pipe() {
    use nix::sys::signal::{signal, SigHandler, Signal};
    // SAFETY: restores the default disposition of one signal before any
    // thread starts; no handler of ours is involved.
    unsafe {
        let _ = signal(Signal::SIGPIPE, SigHandler::SigDfl);
    }
}

/// Entry point: returns the process exit code.
pub fn main() -> i32 {
    crate::gate::parse::quiet_contained_parser_panics();
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let verb = leading_global(&args).and_then(|(_, rest)| rest.first());
    if verb.is_some_and(|a| a == "run") {
        let env_state_dir = std::env::var_os(STATE_DIR_ENV);
        if let Some((global, r)) = parse_run_fast(&args, env_state_dir.as_deref()) {
            return run(&r.spec, r.session, r.receipt.as_deref(), global.state_dir);
        }
        return match RunCli::try_parse() {
            Ok(RunCli {
                global,
                command: RunOnly::Run(r),
            }) => run(&r.spec, r.session, r.receipt.as_deref(), global.state_dir),
            Err(e) => parse_error(e),
        };
    }
    let cli = match parse_approval_fast(&args, std::env::var_os(STATE_DIR_ENV).as_deref()) {
        Some((global, command)) => Cli { global, command },
        None => match Cli::try_parse() {
            Ok(c) => c,
            Err(e) => return parse_error(e),
        },
    };
    if matches!(
        cli.command,
        Command::Pending { .. }
            | Command::Show { .. }
            | Command::Audit(_)
            | Command::Check { .. }
            | Command::Doctor { .. }
            | Command::Policy(_)
            | Command::Approver(ApproverCommand::Show)
    ) {
        end_quietly_on_a_closed_pipe();
    }
    match cli.command {
        Command::Run(r) => run(&r.spec, r.session, r.receipt.as_deref(), cli.global.state_dir),
        Command::Pending { json } => with_state(cli.global.state_dir, |s| approvals::pending(s, json)),
        Command::Show { id, json } => with_state(cli.global.state_dir, |s| approvals::show(s, &id, json)),
        Command::Approve { id, resume: false, .. } => with_state(cli.global.state_dir, |s| approvals::approve(s, &id)),
        Command::Approve {
            id,
            resume: true,
            receipt,
        } => with_state(cli.global.state_dir, |s| match approvals::approve_for_resume(s, &id) {
            Ok(store) => resume(&id, s, Some(store), receipt.as_deref()),
            Err(code) => not_resumed(&id, code, receipt.as_deref()),
        }),
        Command::Reject {
            id,
            reason,
            resume: false,
            ..
        } => with_state(cli.global.state_dir, |s| approvals::reject(s, &id, &reason)),
        Command::Reject {
            id,
            reason,
            resume: true,
            receipt,
        } => with_state(cli.global.state_dir, |s| {
            match approvals::reject_for_resume(s, &id, &reason) {
                Ok(store) => resume(&id, s, Some(store), receipt.as_deref()),
                Err(code) => not_resumed(&id, code, receipt.as_deref()),
            }
        }),
        Command::Resume { id, receipt } => {
            with_state(cli.global.state_dir, |s| resume(&id, s, None, receipt.as_deref()))
        }
        Command::Approver(ApproverCommand::Show) => with_state(cli.global.state_dir, approvals::approver_show),
        Command::Approver(ApproverCommand::Trust { public_key }) => {
            with_state(cli.global.state_dir, |s| approvals::approver_trust(s, &public_key))
        }
        Command::Audit(AuditCommand::Verify { json }) => with_state(cli.global.state_dir, |s| audit::verify(s, json)),
        Command::Audit(AuditCommand::Show { json, session, since }) => with_state(cli.global.state_dir, |s| {
            audit::show(s, json, session.as_deref(), since)
        }),
        Command::Check { spec, json } => check(&spec, json),
        Command::Doctor { json } => doctor(json, cli.global.state_dir),
        Command::Policy(PolicyCommand::Validate { files }) => policy_validate(&files),
        Command::Policy(PolicyCommand::Narrow { parent, child }) => policy_narrow(&parent, &child),
    }
}

fn parse_error(e: clap::Error) -> i32 {
    let code = if e.use_stderr() { exit::INTERNAL } else { 0 };
    let _ = e.print();
    code
}

/// Resolve the workspace and the current directory, absolute and canonical.
pub fn workspace_and_cwd(spec: &CommandSpec) -> Result<(PathBuf, PathBuf), String> {
    let cwd = std::env::current_dir().map_err(|e| format!("cannot read the current directory: {e}"))?;
    let given = spec.workspace.clone();
    let ws = given.clone().unwrap_or_else(|| cwd.clone());
    let ws = match crate::state::real_dir(&ws) {
        Some(real) => real,
        None => {
            let ws = std::fs::canonicalize(&ws).map_err(|e| format!("workspace {}: {e}", ws.display()))?;
            if !ws.is_dir() {
                return Err(format!("workspace {} is not a directory", ws.display()));
            }
            ws
        }
    };
    // Without --workspace the current directory is the workspace: resolved once.
    let cwd = match given {
        None => ws.clone(),
        Some(_) => std::fs::canonicalize(&cwd).unwrap_or(cwd),
    };
    let cwd = if cwd.starts_with(&ws) { cwd } else { ws.clone() };
    Ok((ws, cwd))
}

fn input(spec: &CommandSpec) -> Result<Input<'_>, String> {
    match (&spec.script, spec.argv.is_empty()) {
        (Some(s), true) => Ok(Input::Script(s)),
        (None, false) => Ok(Input::Argv(&spec.argv)),
        (None, true) => Err("nothing to run: give -c SCRIPT or -- PROG [ARG]...".into()),
        (Some(_), false) => Err("give either -c SCRIPT or -- PROG [ARG]..., not both".into()),
    }
}

/// Load the policy stack of a command, printing the error on failure.
pub fn load(spec: &CommandSpec) -> Result<Policy, i32> {
    crate::load_policy(&spec.policies).map_err(|e| {
        error_line(&format!("invalid policy\n{e}"));
        exit::INTERNAL
    })
}

/// Decide, printing input errors. Ok((policy, workspace, cwd, decision)).
pub fn decide(spec: &CommandSpec) -> Result<(Policy, PathBuf, PathBuf, Decision), i32> {
    let policy = load(spec)?;
    let (ws, cwd) = workspace_and_cwd(spec).map_err(|e| {
        error_line(&e);
        exit::INTERNAL
    })?;
    let inp = input(spec).map_err(|e| {
        error_line(&e);
        exit::INTERNAL
    })?;
    let ctx = Context::new(&ws, &cwd);
    let d = gate::decide(&policy, inp, &ctx).map_err(|e| {
        error_line(&format!("cannot judge the command: {e}"));
        exit::INTERNAL
    })?;
    Ok((policy, ws, cwd, d))
}

pub fn verdict_exit(v: Verdict) -> i32 {
    match v {
        Verdict::Allow => 0,
        Verdict::Ask => exit::HELD,
        Verdict::Deny => exit::REFUSED,
    }
}

fn check(spec: &CommandSpec, json: bool) -> i32 {
    let (policy, _ws, _cwd, d) = match decide(spec) {
        Ok(x) => x,
        Err(code) => return code,
    };
    if json {
        let v = serde_json::json!({
            "v": 1,
            "decision": d.decision,
            "commands": d.commands,
            "approvals_required": d.approvals_required,
            "policy_digest": policy.digest(),
        });
        println!("{v}");
    } else {
        println!("{}", render_decision(&d));
    }
    verdict_exit(d.decision)
}

/// The decision for a person: the verdict, then one line per simple command.
pub fn render_decision(d: &Decision) -> String {
    let mut s = format!("decision: {}", d.decision);
    for j in &d.commands {
        s.push_str(&format!(
            "\n  {:<5}  {}\n         {}",
            j.verdict.to_string(),
            j.command,
            j.reason
        ));
    }
    s
}

fn policy_validate(files: &[PathBuf]) -> i32 {
    let mut failed = false;
    for f in files {
        match crate::load_policy(std::slice::from_ref(f)) {
            Ok(p) => println!("{}: ok ({})", f.display(), p.digest()),
            Err(e) => {
                failed = true;
                eprintln!("{e}");
            }
        }
    }
    if failed {
        exit::INTERNAL
    } else {
        0
    }
}

fn policy_narrow(parent: &Path, child: &Path) -> i32 {
    match crate::load_policy(&[parent.to_path_buf(), child.to_path_buf()]) {
        Ok(p) => {
            let mut v = serde_json::to_value(p.effective()).expect("serialisable");
            v["digest"] = serde_json::Value::String(p.digest());
            v["sources"] = serde_json::json!(p.layers.iter().map(|l: &Layer| l.source.clone()).collect::<Vec<_>>());
            println!("{}", serde_json::to_string_pretty(&v).expect("serialisable"));
            0
        }
        Err(e) => {
            error_line(&format!("invalid policy\n{e}"));
            exit::INTERNAL
        }
    }
}

fn read_trim(p: &str) -> Option<String> {
    std::fs::read_to_string(p).ok().map(|s| s.trim().to_string())
}

fn doctor(json: bool, state_dir: Option<PathBuf>) -> i32 {
    use serde_json::json;
    let mut checks = Vec::new();
    let mut ok_all = true;
    let mut check = |name: &str, ok: bool, detail: String, advice: &str| {
        ok_all &= ok;
        checks.push(json!({"check": name, "ok": ok, "detail": detail, "advice": if ok { "" } else { advice }}));
    };
    let kernel = read_trim("/proc/sys/kernel/osrelease").unwrap_or_default();
    check("kernel", true, kernel, "");
    let max_ns = read_trim("/proc/sys/user/max_user_namespaces").unwrap_or_else(|| "?".into());
    let clone_sysctl = read_trim("/proc/sys/kernel/unprivileged_userns_clone");
    let apparmor = read_trim("/proc/sys/kernel/apparmor_restrict_unprivileged_userns");
    let userns_ok = max_ns != "0"
        && clone_sysctl.as_deref() != Some("0")
        && (apparmor.as_deref() != Some("1") || nix::unistd::geteuid().is_root());
    check(
        "user namespaces",
        userns_ok,
        format!("max_user_namespaces={max_ns}, unprivileged_userns_clone={}, apparmor_restrict_unprivileged_userns={}", clone_sysctl.as_deref().unwrap_or("absent"), apparmor.as_deref().unwrap_or("absent")),
        "enable unprivileged user namespaces: sysctl user.max_user_namespaces=15000; on Debian sysctl kernel.unprivileged_userns_clone=1; on Ubuntu 24.04+ install the AppArmor profile in packaging/apparmor/tether-exec (it grants userns to tether-exec only)",
    );
    let zero = crate::sandbox::namespaces_limited_to_zero();
    let made = crate::sandbox::apply::probe_namespaces();
    check(
        "namespaces",
        zero.is_empty() && made.is_ok(),
        match (&made, zero.as_slice()) {
            (Ok(()), []) => format!("made new {} namespaces", crate::sandbox::NAMESPACES.join(", ")),
            (_, []) => format!("cannot make new {} namespaces: {}", crate::sandbox::NAMESPACES.join(", "), made.as_ref().err().map_or("", String::as_str)),
            (_, zero) => crate::sandbox::zero_limits_named(zero),
        },
        "raise the zero limits (sysctl user.max_<name>_namespaces=15000); otherwise a security module or a container's seccomp filter refuses them: allow unshare/clone3 of namespaces for tether-exec",
    );
    let abi = crate::sandbox::apply::landlock_abi();
    let unscoped = if (1..6).contains(&abi) {
        "; policies with network = true are refused here (the host's abstract unix sockets cannot be scoped before ABI 6)"
    } else {
        ""
    };
    check("landlock", abi >= 1, format!("ABI {abi} (this build uses up to {}){unscoped}", crate::policy::doc_max_abi()), "boot a kernel with CONFIG_SECURITY_LANDLOCK=y and landlock in the lsm= list (5.13+; ABI 6+ for signal and abstract-socket scoping)");
    let seccomp = std::fs::read_to_string("/proc/self/status")
        .map(|s| s.contains("Seccomp:"))
        .unwrap_or(false);
    check(
        "seccomp",
        seccomp,
        if seccomp {
            "seccomp-bpf filters available".into()
        } else {
            "no Seccomp field in /proc/self/status".into()
        },
        "boot a kernel with CONFIG_SECCOMP_FILTER=y",
    );
    let need = crate::sandbox::apply::GUARD_NEEDS_KERNEL;
    let have = crate::sandbox::apply::kernel_version();
    check(
        "create guard",
        have.is_some_and(|v| v >= need),
        format!(
            "seccomp user notification answering with a descriptor (Linux {}.{}+): a writable workspace bound from the host has every name the command makes judged before it exists",
            need.0, need.1
        ),
        "boot Linux 5.14 or later, or run with `overlay = true` (every write captured and checked after the run)",
    );
    let filters = crate::sandbox::seccomp::filters(true);
    check(
        "seccomp rules",
        filters.is_ok(),
        format!(
            "{} refused system calls, {} conditional rules",
            crate::sandbox::seccomp::REFUSED.len(),
            crate::sandbox::seccomp::CONDITIONAL.len()
        ),
        "report a bug: the filter failed to compile",
    );
    // Where a run in this directory keeps its overlays' upper layers: the
    // state directory, or beside the workspace when that is on another
    // filesystem.
    let state = crate::state::resolve(state_dir).and_then(|s| crate::state::ensure(&s));
    let overlay = match &state {
        Ok(s) => {
            let cwd = std::env::current_dir().unwrap_or_else(|_| s.clone());
            // Not in `overlays/` itself, which every start scans for captures.
            let (root, beside) = crate::workspace::overlay::capture_root(s, &cwd);
            let root = if beside { root } else { s.clone() };
            let made = std::fs::create_dir_all(&root).map_err(|e| format!("cannot create {}: {e}", root.display()));
            made.and_then(|()| crate::sandbox::apply::probe_overlay(&root))
                .map(|()| {
                    format!(
                        "mounted one with its layers in {}, where runs here keep theirs",
                        root.display()
                    )
                })
                .map_err(|e| format!("{e} (layers in {}, where runs here keep theirs)", root.display()))
        }
        Err(e) => Err(e.to_string()),
    };
    check(
        "overlayfs in a user namespace",
        overlay.is_ok(),
        overlay.unwrap_or_else(|e| e),
        "needed for a writable run in a git repository (its .git is an overlay) and for overlay = true: Linux 5.11+, and upper layers on a filesystem overlayfs takes (ext4, xfs, btrfs; tmpfs on 6.6+; not overlayfs itself). They live in the state directory (--state-dir or TETHER_EXEC_STATE_DIR), or beside the workspace when the workspace is on another filesystem",
    );
    let v1 = std::path::Path::new("/sys/fs/cgroup/pids").is_dir();
    let v2 = read_trim("/sys/fs/cgroup/cgroup.controllers").is_some_and(|c| c.split_whitespace().any(|x| x == "pids"));
    let root = nix::unistd::geteuid().is_root();
    check(
        "pids cgroup (needed only when running as root)",
        !root || v1 || v2,
        format!("cgroup v1 pids: {v1}, cgroup v2 pids: {v2}"),
        "as root, process limits need a pids cgroup; mount the pids controller or run tether-exec as an unprivileged user",
    );
    if json {
        println!("{}", json!({"v": 1, "ok": ok_all, "checks": checks}));
    } else {
        for c in &checks {
            let mark = if c["ok"].as_bool() == Some(true) {
                "ok  "
            } else {
                "MISSING"
            };
            println!(
                "{mark} {}: {}",
                c["check"].as_str().unwrap_or(""),
                c["detail"].as_str().unwrap_or("")
            );
            if let Some(a) = c["advice"].as_str().filter(|a| !a.is_empty()) {
                println!("     fix: {a}");
            }
        }
    }
    if ok_all {
        0
    } else {
        exit::INTERNAL
    }
}

/// Resolve and create the state directory, then run `f` with it.
fn with_state(explicit: Option<PathBuf>, f: impl FnOnce(&Path) -> i32) -> i32 {
    match crate::state::resolve(explicit).and_then(|s| crate::state::ensure(&s)) {
        Ok(s) => {
            // A large repository's index is read once while it is unchanged,
            // not once a run (see `workspace::gitindex::kept`).
            crate::workspace::gitindex::keep_reads_in(&s);
            f(&s)
        }
        Err(e) => {
            error_line(&e.to_string());
            exit::INTERNAL
        }
    }
}

/// `resume ID`, with the approval store `approve --resume` or `reject
/// --resume` already opened when there is one.
fn resume(id: &str, state: &Path, opened: Option<crate::approval::ApprovalStore>, receipt: Option<&Path>) -> i32 {
    let terminal = TerminalModes::save();
    let done = match opened {
        Some(store) => crate::launch::resume_opened(id, state, store),
        None => crate::launch::resume(id, state),
    };
    terminal.restore();
    finish(done, receipt)
}

/// An `approve --resume` or `reject --resume` whose decision failed (its
/// message is out) and so resumed nothing: its receipt names the action and
/// holds no result, as a resume's that ran nothing does, so that a harness
/// never reads an older receipt in its place.
fn not_resumed(id: &str, code: i32, receipt_path: Option<&Path>) -> i32 {
    let Some(p) = receipt_path else { return code };
    let mut receipt = crate::receipt::Receipt::new(String::new());
    receipt.pending_id = Some(id.to_string());
    match receipt.write(p) {
        Ok(()) => code,
        Err(e) => {
            error_line(&format!("cannot write the receipt to {}: {e}", p.display()));
            exit::INTERNAL
        }
    }
}

/// Print tether-exec's lines, write the receipt, return the exit code.
fn finish(mut done: crate::launch::Finished, receipt_path: Option<&Path>) -> i32 {
    if let Some((out, err)) = &done.replay {
        use std::io::Write;
        let _ = std::io::stdout().write_all(out);
        let _ = std::io::stderr().write_all(err);
    }
    // Our lines, but they name what the agent chose (its files, its
    // command): control characters shown escaped, as `show` does.
    for line in &done.stderr {
        eprintln!("{}", approvals::visible(line));
    }
    let mut code = done.code;
    if let Some(p) = receipt_path {
        if let Err(e) = done.receipt.write(p) {
            error_line(&format!("cannot write the receipt to {}: {e}", p.display()));
            code = exit::INTERNAL;
        }
    }
    // Everything is said: what is left is housekeeping nobody waits for.
    if let Some(landed) = done.after.take() {
        landed.done_after_exit();
    }
    code
}

fn run(spec: &CommandSpec, session: Option<String>, receipt_path: Option<&Path>, state_dir: Option<PathBuf>) -> i32 {
    let (workspace, cwd) = match workspace_and_cwd(spec) {
        Ok(x) => x,
        Err(e) => {
            error_line(&e);
            return exit::INTERNAL;
        }
    };
    if let Err(e) = input(spec) {
        error_line(&e);
        return exit::INTERNAL;
    }
    with_state(state_dir, |state| {
        let req = crate::launch::Request {
            policies: spec.policies.clone(),
            workspace,
            cwd,
            script: spec.script.clone(),
            argv: spec.argv.clone(),
            session,
            state_dir: state.to_path_buf(),
        };
        let tty = nix::unistd::isatty(std::io::stdin()).unwrap_or(false);
        let terminal = TerminalModes::save();
        let done = crate::launch::run(&req, tty);
        terminal.restore();
        finish(done, receipt_path)
    })
}

/// The modes of the terminal the command shares with the person (echo,
/// canonical input, ...), as they were before it ran: a command that turns
/// echo off, or leaves the terminal raw, does not leave it so for them.
struct TerminalModes(Option<(usize, nix::sys::termios::Termios)>);

impl TerminalModes {
    /// Standard stream `i` (0, 1, 2), as a descriptor.
    fn with_stream<T>(i: usize, f: impl FnOnce(std::os::fd::BorrowedFd<'_>) -> T) -> T {
        use std::os::fd::AsFd;
        match i {
            0 => f(std::io::stdin().as_fd()),
            1 => f(std::io::stdout().as_fd()),
            _ => f(std::io::stderr().as_fd()),
        }
    }

    fn save() -> TerminalModes {
        TerminalModes((0..3).find_map(|i| {
            Self::with_stream(i, |fd| {
                nix::unistd::isatty(fd)
                    .unwrap_or(false)
                    .then(|| nix::sys::termios::tcgetattr(fd).ok())
                    .flatten()
            })
            .map(|t| (i, t))
        }))
    }

    fn restore(self) {
        if let Some((i, modes)) = self.0 {
            Self::with_stream(i, |fd| {
                let _ = nix::sys::termios::tcsetattr(fd, nix::sys::termios::SetArg::TCSANOW, &modes);
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a parser made of a command line: the run's arguments, or the
    /// message it printed (help and version are "errors" too).
    fn parsed(full: bool, args: &[&str]) -> Result<String, String> {
        let argv = std::iter::once("tether-exec").chain(args.iter().copied());
        let shown = |global: GlobalArgs, r: RunArgs| format!("{global:?} {r:?}");
        if full {
            match Cli::try_parse_from(argv) {
                Ok(Cli {
                    global,
                    command: Command::Run(r),
                }) => Ok(shown(global, r)),
                Ok(other) => panic!("not a run: {other:?}"),
                Err(e) => Err(format!("{:?} {}", e.kind(), e.render())),
            }
        } else {
            match RunCli::try_parse_from(argv) {
                Ok(RunCli {
                    global,
                    command: RunOnly::Run(r),
                }) => Ok(shown(global, r)),
                Err(e) => Err(format!("{:?} {}", e.kind(), e.render())),
            }
        }
    }

    /// `RunCli`'s reading of `args`, without the environment variable.
    fn clap_reading(args: &[std::ffi::OsString]) -> Option<String> {
        use clap::{CommandFactory, FromArgMatches};
        let cmd = RunCli::command().mut_arg("state_dir", |a| a.env(None::<&str>));
        let argv = std::iter::once(std::ffi::OsString::from("tether-exec")).chain(args.iter().cloned());
        let m = cmd.try_get_matches_from(argv).ok()?;
        let c = RunCli::from_arg_matches(&m).ok()?;
        let RunOnly::Run(r) = c.command;
        Some(format!("{:?} {r:?}", c.global))
    }

    /// How the whole [`Cli`] reads `args`, the state directory variable unset.
    fn full_clap_reading(args: &[std::ffi::OsString]) -> Option<String> {
        use clap::{CommandFactory, FromArgMatches};
        let cmd = Cli::command().mut_arg("state_dir", |a| a.env(None::<&str>));
        let argv = std::iter::once(std::ffi::OsString::from("tether-exec")).chain(args.iter().cloned());
        let m = cmd.try_get_matches_from(argv).ok()?;
        let c = Cli::from_arg_matches(&m).ok()?;
        Some(format!("{:?} {:?}", c.global, c.command))
    }

    fn os(args: &[&str]) -> Vec<std::ffi::OsString> {
        args.iter().map(std::ffi::OsString::from).collect()
    }

    proptest::proptest! {
        /// Whatever the fast reading of a `run` command line accepts, clap
        /// reads the same way. Lines are built from whole options (mostly
        /// valid ones, so that many are accepted), some noise, and a program
        /// after `--`.
        #[test]
        fn the_fast_reading_of_run_agrees_with_clap(
            options in proptest::collection::vec(proptest::sample::select(vec![
                &["-c", "ls -la"][..], &["--policy", "p.toml"], &["--policy=q.toml"], &["--workspace", "/w"],
                &["--workspace=/w2"], &["--session", "s1"], &["--session=s2"], &["--receipt", "r.json"],
                &["--state-dir", "/st"], &["--state-dir=/st2"], &["-c", "echo a=b"],
                &["--bogus"], &[""], &["-"], &["--help"], &["-h"], &["--version"], &["word"], &["-cls"],
                &["-c=ls"], &["--session"], &["--policy="], &["--session=-x"], &["--=x"], &["-c", "-x"],
            ]), 0..5),
            program in proptest::option::of(proptest::collection::vec(
                proptest::sample::select(vec!["ls", "-la", "--", "x y", ""]), 0..3)),
            // The global option, sometimes, before the subcommand.
            lead in proptest::sample::select(vec![
                &[][..], &["--state-dir", "/lead"], &["--state-dir=/lead2"], &["--state-dir"],
                &["--state-dir="], &["--state-dir", "-x"], &["--bogus"], &["--state-dirx=/y"],
            ]),
        ) {
            let mut args = os(lead);
            args.push("run".into());
            for o in &options {
                args.extend(o.iter().map(std::ffi::OsString::from));
            }
            if let Some(p) = &program {
                args.push("--".into());
                args.extend(p.iter().map(std::ffi::OsString::from));
            }
            if let Some((global, r)) = parse_run_fast(&args, None) {
                let fast = format!("{global:?} {r:?}");
                proptest::prop_assert_eq!(Some(fast), clap_reading(&args), "{:?}", args);
            }
        }
    }

    proptest::proptest! {
        /// Whatever the fast reading of `approve`, `reject` or `resume`
        /// accepts, the whole parser reads the same way.
        #[test]
        fn the_fast_reading_of_approvals_agrees_with_clap(
            verb in proptest::sample::select(vec!["approve", "reject", "resume", "pending", "show"]),
            words in proptest::collection::vec(proptest::sample::select(vec![
                &["apr_0123456789abcdef"][..], &["apr_x"], &["--reason", "use make clean"], &["--reason=no"],
                &["--receipt", "/tmp/r.json"], &["--receipt=r.json"], &["--state-dir", "/st"],
                &["--state-dir=/st2"], &["--json"], &["--bogus"], &[""], &["-"], &["--"], &["--help"], &["-h"],
                &["--version"], &["--reason"], &["--receipt="], &["--reason=-x"], &["--=x"], &["-x=1"],
                &["--reason", "-x"], &["a=b"], &["--resume"], &["--resume=yes"], &["--resume", "--receipt", "r.json"],
            ]), 0..5),
            lead in proptest::sample::select(vec![
                &[][..], &["--state-dir", "/lead"], &["--state-dir=/lead2"], &["--state-dir"],
                &["--state-dir="], &["--state-dir", "-x"], &["--bogus"],
            ]),
        ) {
            let mut args = os(lead);
            args.push(verb.into());
            for w in &words {
                args.extend(w.iter().map(std::ffi::OsString::from));
            }
            if let Some((global, command)) = parse_approval_fast(&args, None) {
                let fast = format!("{global:?} {command:?}");
                proptest::prop_assert_eq!(Some(fast), full_clap_reading(&args), "{:?}", args);
            }
        }
    }

    #[test]
    fn the_usual_approval_command_lines_take_the_fast_reading() {
        for args in [
            &["approve", "apr_0123456789abcdef"][..],
            &["approve", "apr_0123456789abcdef", "--resume"],
            &[
                "approve",
                "apr_0123456789abcdef",
                "--resume",
                "--receipt",
                "/tmp/r.json",
            ],
            &[
                "reject",
                "apr_0123456789abcdef",
                "--reason",
                "no",
                "--resume",
                "--receipt=/tmp/r.json",
            ],
            &["resume", "apr_0123456789abcdef", "--receipt", "/tmp/r.json"],
            &[
                "reject",
                "apr_0123456789abcdef",
                "--reason",
                "delete build/ with make clean instead",
            ],
            // The global option before the subcommand, as tether-sdk gives it.
            &["--state-dir", "/st", "approve", "apr_1"],
            &[
                "--state-dir=/st",
                "approve",
                "apr_1",
                "--resume",
                "--receipt",
                "/tmp/r.json",
            ],
            &["--state-dir", "/st", "resume", "apr_1", "--receipt", "/tmp/r.json"],
        ] {
            let args = os(args);
            let fast = parse_approval_fast(&args, None).map(|(g, c)| format!("{g:?} {c:?}"));
            assert!(fast.is_some(), "{args:?}");
            assert_eq!(fast, full_clap_reading(&args), "{args:?}");
        }
        // Given twice, before and after the subcommand, or with a value clap
        // must judge: clap decides.
        for args in [
            &["--state-dir", "/a", "approve", "apr_1", "--state-dir", "/b"][..],
            &["--state-dir", "approve", "apr_1"],
            &["--state-dir=", "approve", "apr_1"],
            &["--state-dir", "-x", "approve", "apr_1"],
        ] {
            assert!(parse_approval_fast(&os(args), None).is_none(), "{args:?}");
        }
        // The variable is read as clap reads it: an option given wins over it.
        let args = os(&["approve", "apr_1", "--state-dir", "/flag"]);
        let (g, _) = parse_approval_fast(&args, Some(std::ffi::OsStr::new("/env"))).unwrap();
        assert_eq!(g.state_dir, Some(PathBuf::from("/flag")));
        let (g, _) = parse_approval_fast(&os(&["approve", "apr_1"]), Some(std::ffi::OsStr::new("/env"))).unwrap();
        assert_eq!(g.state_dir, Some(PathBuf::from("/env")));
        assert!(parse_approval_fast(&os(&["approve", "apr_1"]), Some(std::ffi::OsStr::new(""))).is_none());
        // A receipt belongs to a resume: without --resume, clap refuses it.
        assert!(parse_approval_fast(&os(&["approve", "apr_1", "--receipt", "r.json"]), None).is_none());
        assert!(full_clap_reading(&os(&["approve", "apr_1", "--receipt", "r.json"])).is_none());
    }

    #[test]
    fn the_usual_run_command_lines_take_the_fast_reading() {
        for args in [
            &["run", "--", "/bin/true"][..],
            &["run", "-c", "pytest -q && ruff check ."],
            &["run", "--session", "ses_1", "--receipt", "/tmp/r.json", "-c", "ls"],
            &[
                "run",
                "--policy",
                "a.toml",
                "--policy=b.toml",
                "--workspace",
                "/w",
                "--",
                "cargo",
                "test",
                "--",
                "-q",
            ],
            &["run", "--state-dir", "/s", "--", "ls", "-la"],
            // The global option before the subcommand, as tether-sdk gives it.
            &["--state-dir", "/s", "run", "--receipt", "/tmp/r.json", "-c", "ls"],
            &["--state-dir=/s", "run", "--", "ls"],
        ] {
            let args = os(args);
            let fast = parse_run_fast(&args, None).map(|(g, r)| format!("{g:?} {r:?}"));
            assert!(fast.is_some(), "{args:?}");
            assert_eq!(fast, clap_reading(&args), "{args:?}");
        }
        // The environment names the state directory unless the option does;
        // an empty one is left to clap (which refuses
        // it even beside the option).
        let env = Some(std::ffi::OsStr::new("/from-env"));
        let (g, _) = parse_run_fast(&os(&["run", "--", "ls"]), env).unwrap();
        assert_eq!(g.state_dir, Some(PathBuf::from("/from-env")));
        let (g, _) = parse_run_fast(&os(&["run", "--state-dir", "/flag", "--", "ls"]), env).unwrap();
        assert_eq!(g.state_dir, Some(PathBuf::from("/flag")));
        let empty = Some(std::ffi::OsStr::new(""));
        assert!(parse_run_fast(&os(&["run", "--", "ls"]), empty).is_none());
        assert!(parse_run_fast(&os(&["run", "--state-dir", "/s", "--", "ls"]), empty).is_none());
        // Not UTF-8: clap's to refuse.
        use std::os::unix::ffi::OsStringExt;
        let mut bad = os(&["run", "--"]);
        bad.push(std::ffi::OsString::from_vec(vec![0xff]));
        assert!(parse_run_fast(&bad, None).is_none());
    }

    #[test]
    fn the_run_fast_path_parses_errs_and_helps_like_the_full_command_line() {
        let cases: &[&[&str]] = &[
            &["run", "--", "/bin/true"],
            &["run", "-c", "pytest -q && ruff check ."],
            &[
                "run",
                "--policy",
                "a.toml",
                "--policy",
                "b.toml",
                "--workspace",
                "/w",
                "--session",
                "s1",
                "--receipt",
                "/r.json",
                "--",
                "cargo",
                "test",
                "--",
                "--nocapture",
            ],
            &["run", "--state-dir", "/s", "-c", "ls"],
            &["run", "-c", "ls", "--", "ls"],
            &["run", "--bogus", "--", "ls"],
            &["run", "--session"],
            &["run", "--help"],
            &["run", "-h"],
            &["run"],
            // The global option first, as tether-sdk gives it: `main` hands
            // what the fast reading refuses of these to `RunCli` too.
            &["--state-dir", "/s", "run", "--", "/bin/true"],
            &["--state-dir", "/s", "run", "--bogus"],
            &["--state-dir", "/s", "run", "--help"],
            &["--state-dir=/s", "run"],
            &["--state-dir", "/s", "run", "--state-dir", "/t", "-c", "ls"],
            &["--state-dir", "run", "-c", "ls"],
        ];
        for args in cases {
            assert_eq!(parsed(true, args), parsed(false, args), "{args:?}");
        }
        assert!(parsed(false, &["run", "--help"]).unwrap_err().contains("Examples:"));
    }
}
