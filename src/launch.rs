//! One action, end to end: gate → audit → hold, or plan + apply → audit → receipt.
//!
//! This module only sequences the others; every decision is the gate's, every
//! system call the sandbox's, every record the audit log's or the approval
//! store's. It prints nothing: it returns the exit code, the receipt and the
//! lines for stderr, and the CLI prints them.
//!
//! Fail closed: the decision is recorded in the audit log *before* anything
//! runs, and if that record cannot be written, nothing runs.

use crate::approval::{
    self, ApprovalError, ApprovalStore, Bindings, Current, HoldRequest, Intent, RecordedResult, Resume,
};
#[cfg(feature = "bench-unaudited")]
use crate::audit::unaudited::AuditLog;
#[cfg(not(feature = "bench-unaudited"))]
use crate::audit::AuditLog;
use crate::audit::{AuditEntry, EntryKind};
use crate::exit;
use crate::gate::{self, Context, Decision, Input};
use crate::policy::{Format, Layer, Policy, Profile, Verdict};
use crate::receipt::{Isolation, Receipt};
use crate::sandbox::{self, apply, plan};
use crate::workspace::overlay::{Capture, LandedPreview, PlannedCapture};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// What the CLI prints and returns.
pub struct Finished {
    pub code: i32,
    pub receipt: Receipt,
    /// tether-exec's own lines for stderr (never the command's output).
    pub stderr: Vec<String>,
    /// A previewed command's recorded output, replayed when its effects land.
    pub replay: Option<(Vec<u8>, Vec<u8>)>,
    /// The sandbox's init, idle, waits for this to be dropped before it exits
    /// (see `apply::Outcome::hold_init`): dropped last, once the result is
    /// out, the kernel's dismantling of the sandbox never delays it.
    pub hold_init: Option<HoldInit>,
    /// Work left once the result is out: removing a preview that landed.
    /// See [`LandedPreview::done_after_exit`].
    pub after: Option<LandedPreview>,
    /// Whether the command may have started: its sandbox was set up and let
    /// it go (a timeout during the set-up counts too: on the safe side). A
    /// set-up step that failed, or work owed before the start that failed,
    /// means it never reached `execve`.
    pub command_started: bool,
}

/// See [`Finished::hold_init`].
#[derive(Debug)]
pub struct HoldInit(#[allow(dead_code)] std::os::fd::OwnedFd);

impl Finished {
    fn new(code: i32, receipt: Receipt, line: impl Into<String>) -> Finished {
        Finished {
            code,
            receipt,
            stderr: vec![line.into()],
            replay: None,
            hold_init: None,
            after: None,
            command_started: false,
        }
    }
}

/// What a held action stores besides its intent: enough to rebuild exactly
/// the approved policy and to find the workspace again.
#[derive(Debug, Serialize, Deserialize)]
pub struct HeldContext {
    pub workspace: PathBuf,
    /// Policy files as given (empty: the embedded default).
    pub files: Vec<PathBuf>,
    /// Each layer's source name and text, as loaded when the action was held.
    pub layers: Vec<(String, String)>,
    /// The effects of the command, captured by running it once in an overlay.
    #[serde(default)]
    pub preview: Option<PreviewRecord>,
    /// Why there is no preview, when there is none.
    #[serde(default)]
    pub no_preview: Option<String>,
    /// The sandbox's environment when the action was held, each name with
    /// a short digest of its value (never the value): a resume refused for
    /// a changed environment names the variables that changed. Absent in
    /// actions held by earlier builds.
    #[serde(default)]
    pub env: Vec<(String, String)>,
    /// The salt of those digests.
    #[serde(default)]
    pub env_salt: String,
}

/// A held action's preview, as `show` displays it and `resume` lands it.
#[derive(Debug, Serialize, Deserialize)]
pub struct PreviewRecord {
    pub dir: PathBuf,
    pub digest: String,
    pub exit_code: i32,
    pub added: Vec<String>,
    pub modified: Vec<String>,
    pub deleted: Vec<String>,
    pub violations: Vec<String>,
}

/// Why a held action gets no preview, if it does not.
fn no_preview_reason(policy: &Policy, d: &Decision) -> Option<String> {
    if policy.network() {
        Some("the policy allows network access, whose effects a preview cannot capture".into())
    } else if policy.profile() != Profile::WorkspaceWrite {
        Some("the profile is read-only: the command cannot change the workspace".into())
    } else if !d.preview_allowed {
        Some("the rule that holds it says preview = false".into())
    } else {
        None
    }
}

/// Run the held command once, confined, in an overlay; keep what it did.
/// `before_exec` runs while the preview's sandbox builds itself.
fn make_preview(
    req: &Request,
    policy: &Policy,
    stdin: &[u8],
    before_exec: &mut dyn FnMut() -> Result<(), String>,
) -> Result<(PreviewRecord, Option<HoldInit>), String> {
    // Discarded on every way out but the kept preview.
    let mut capture = UnusedCapture(Some(
        Capture::create(&req.state_dir, &req.workspace)
            .map_err(|e| format!("tether-exec: cannot prepare the preview: {e}"))?,
    ));
    let (plan, _) = plan_for(
        policy,
        &req.workspace,
        &req.cwd,
        req.sandbox_argv(),
        &req.state_dir,
        capture.0.as_ref().map(dirs_of),
        None,
    )?;
    let (out, err) = capture
        .0
        .as_ref()
        .expect("made above")
        .output_files()
        .map_err(|e| format!("tether-exec: {e}"))?;
    let (code, hold_init) = match apply::run(&plan, Some(stdin), Some((&out, &err)), &mut || Ok(()), before_exec) {
        Ok(o) => match o.ended {
            apply::Ended::Exited(c) | apply::Ended::ExecFailed { code: c } => (c, o.hold_init),
            apply::Ended::TimedOut => (exit::TIMEOUT, o.hold_init),
        },
        // The hold's own preparation failed: its message says why.
        Err(apply::ApplyError::NotStarted(why)) => return Err(why),
        Err(e) => return Err(format!("tether-exec: the preview could not run: {e}")),
    };
    // Read while init still holds the overlay (see `apply::Outcome::hold_init`).
    let kept = capture
        .take()
        .expect("made above")
        .keep_as_preview(&req.state_dir, &|| policy.path_globs(), code)
        .map_err(|e| format!("tether-exec: cannot keep the preview (it was discarded), so nothing is held: {e}"))?;
    let record = PreviewRecord {
        dir: kept.dir,
        digest: kept.digest,
        exit_code: kept.exit_code,
        added: kept.outcome.added,
        modified: kept.outcome.modified,
        deleted: kept.outcome.deleted,
        violations: kept.outcome.violations,
    };
    Ok((record, hold_init.map(HoldInit)))
}

/// The workspace binding of a previewed action: the workspace's fingerprint and the preview's digest.
fn with_preview(fingerprint: String, preview: Option<&PreviewRecord>) -> String {
    match preview {
        Some(p) => format!("{fingerprint} preview:{}", p.digest),
        None => fingerprint,
    }
}

/// A command to run, as the CLI parsed it.
pub struct Request {
    pub policies: Vec<PathBuf>,
    pub workspace: PathBuf,
    pub cwd: PathBuf,
    pub script: Option<String>,
    pub argv: Vec<String>,
    pub session: Option<String>,
    pub state_dir: PathBuf,
}

impl Request {
    fn input(&self) -> Input<'_> {
        match &self.script {
            Some(s) => Input::Script(s),
            None => Input::Argv(&self.argv),
        }
    }

    /// The argv the sandbox executes (see [`script_argv`]).
    fn sandbox_argv(&self) -> Vec<String> {
        match &self.script {
            Some(s) => script_argv(s),
            None => self.argv.clone(),
        }
    }

    fn command_text(&self) -> String {
        self.script.clone().unwrap_or_else(|| shell_words(&self.argv))
    }
}

/// How a script runs: bash's command string after `--`, so that one
/// starting with `-` is a command, not bash's options.
fn script_argv(script: &str) -> Vec<String> {
    vec!["bash".into(), "-c".into(), "--".into(), script.to_string()]
}

/// An argv as a shell would need it typed: each word that is not plain
/// quoted, so that word boundaries show (`touch 'a b'` is not `touch a b`).
pub(crate) fn shell_words(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            if !a.is_empty() && a.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c)) {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn rules_of(d: &Decision) -> Vec<String> {
    d.commands
        .iter()
        .map(|j| format!("{}: {} — {}", j.verdict, j.command, j.reason))
        .collect()
}

/// Open the audit log, or say why nothing will run.
fn open_audit(state: &Path) -> Result<AuditLog, String> {
    AuditLog::open(state).map_err(|e| format!("tether-exec: cannot open the audit log, so nothing runs: {e}"))
}

fn append(log: &mut AuditLog, entry: AuditEntry) -> Result<u64, String> {
    log.append(entry)
        .map_err(|e| format!("tether-exec: cannot write the audit record, so nothing runs: {e}"))
}

/// `tether-exec run`.
pub fn run(req: &Request, stdin_is_tty: bool) -> Finished {
    let policy = match crate::load_policy(&req.policies) {
        Ok(p) => p,
        Err(e) => {
            return Finished::new(
                exit::INTERNAL,
                Receipt::new(String::new()),
                format!("tether-exec: invalid policy\n{e}"),
            )
        }
    };
    if let Some(why) = policy_others_can_change(req, &policy.files) {
        return Finished::new(exit::INTERNAL, Receipt::new(String::new()), why);
    }
    let ctx = Context::new(&req.workspace, &req.cwd);
    let d = match gate::decide(&policy, req.input(), &ctx) {
        Ok(d) => d,
        Err(e) => {
            return Finished::new(
                exit::INTERNAL,
                Receipt::new(policy.digest()),
                format!("tether-exec: cannot judge the command: {e}"),
            )
        }
    };
    let digest = policy.digest();
    let mut receipt = Receipt::new(digest.clone());
    receipt.decision = Some(d.decision);
    receipt.rules = d.commands.clone();
    receipt.session = req.session.clone();

    let mut rec = AuditEntry::new(EntryKind::Decision);
    rec.session = req.session.clone();
    rec.actor = Some("harness".into());
    rec.policy_digest = Some(digest.clone());
    rec.command = Some(req.command_text());
    rec.decision = Some(d.decision.to_string());
    rec.rules = Some(rules_of(&d));
    let verdict = d.decision;
    // The decision goes on record before anything runs. For a command that
    // runs, that happens while its sandbox is being built (see `Audit`).
    let on_record = move || -> Result<(AuditLog, u64), String> {
        let mut log = open_audit(&req.state_dir)?;
        let seq = append(&mut log, rec)?;
        if let Some(s) = &req.session {
            if verdict != Verdict::Ask {
                // Every proposal of a session counts toward approvals'
                // proposal expiry (a byte appended; no database opened).
                approval::record_proposal(&req.state_dir, s)
                    .map_err(|e| format!("tether-exec: cannot count the proposal, so nothing runs: {e}"))?;
            }
        }
        Ok((log, seq))
    };

    match d.decision {
        Verdict::Deny | Verdict::Ask => {
            let mut log = match on_record() {
                Ok((log, seq)) => {
                    receipt.audit_seq = Some(seq);
                    log
                }
                Err(e) => return Finished::new(exit::INTERNAL, receipt, e),
            };
            if d.decision == Verdict::Deny {
                Finished::new(exit::REFUSED, receipt, format!("Sandbox violation: {}", d.summary()))
            } else {
                // Counted before its preview runs the command: a hold that
                // fails or is killed midway is still a proposal.
                if let Some(s) = &req.session {
                    if let Err(e) = approval::record_proposal(&req.state_dir, s) {
                        return Finished::new(
                            exit::INTERNAL,
                            receipt,
                            format!("tether-exec: cannot count the proposal, so nothing runs: {e}"),
                        );
                    }
                }
                // The hold's preview runs the command: on a workspace with
                // every interrupted commit finished first, as a run would.
                let recovered = recover(&req.state_dir);
                let mut done = hold(req, &policy, &d, receipt, &mut log, stdin_is_tty);
                done.stderr.splice(0..0, recovered);
                done
            }
        }
        Verdict::Allow => {
            let recovered = recover(&req.state_dir);
            let (capture, git) = match capture_for(&policy, &req.state_dir, &req.workspace) {
                Ok(c) => c,
                Err(e) => return not_started(receipt, e, on_record),
            };
            let (plan, plan_saw) = match plan_for(
                &policy,
                &req.workspace,
                &req.cwd,
                req.sandbox_argv(),
                &req.state_dir,
                capture.as_ref().map(planned_dirs),
                git,
            ) {
                Ok(p) => p,
                Err(e) => return not_started(receipt, e, on_record),
            };
            let mut done = execute(
                &plan,
                &policy,
                None,
                receipt,
                Audit::Deferred(Box::new(on_record)),
                req.session.clone(),
                None,
                &req.state_dir,
                capture,
                plan_saw,
                None,
            );
            done.stderr.splice(0..0, recovered);
            done
        }
    }
}

/// A run that fails before its sandbox exists is still a decision on record
/// and a proposal counted.
fn not_started(
    mut receipt: Receipt,
    why: String,
    on_record: impl FnOnce() -> Result<(AuditLog, u64), String>,
) -> Finished {
    let mut stderr = vec![why];
    match on_record() {
        Ok((_, seq)) => receipt.audit_seq = Some(seq),
        Err(e) => stderr.push(e),
    }
    Finished {
        code: exit::INTERNAL,
        receipt,
        stderr,
        replay: None,
        hold_init: None,
        after: None,
        command_started: false,
    }
}

/// `code`, or the refusal when `who` (the run, the preview) wrote protected
/// paths: said on stderr, and listed as rolled back in the receipt.
fn refused_for_protected_paths(
    code: i32,
    violations: &[String],
    who: &str,
    stderr: &mut Vec<String>,
    receipt: &mut Receipt,
) -> i32 {
    if violations.is_empty() {
        return code;
    }
    stderr.push(format!(
        "Sandbox violation: {who} wrote protected paths: {}",
        violations.join("; ")
    ));
    receipt.rolled_back.extend(violations.iter().cloned());
    exit::REFUSED
}

/// A policy file that sandboxed commands could rewrite, or repoint, for the
/// next run: one in another workspace where they have run (files of this
/// run's own workspace are pinned read-only inside), or one named through a
/// symlink where they write (a link cannot be pinned). `loaded`: the files
/// as `load_policy` resolved them, in the order named.
fn policy_others_can_change(req: &Request, loaded: &[PathBuf]) -> Option<String> {
    use crate::workspace::{LinksOutside, WrittenWorkspaces};
    let written = WrittenWorkspaces::new(&req.workspace, Some(&req.state_dir));
    req.policies.iter().zip(loaded).find_map(|(f, real)| {
        let named = std::path::absolute(f).ok()?;
        // Past the kernel's bound on links (they changed since the policy
        // was read) the answer is the careful one.
        let why = match crate::workspace::resolve_links_outside(&named, &written) {
            LinksOutside::LinkIn(link, by) => format!(
                "is reached through {}, a symlink in {by}, which a sandboxed command could point at a policy of its own (it leads to `{}` now: do not name that file unless you wrote it)",
                link.display(),
                real.display()
            ),
            LinksOutside::Loop => "is reached through more symlinks than the kernel follows".to_string(),
            LinksOutside::Real(r) => match written.others_holding(&r) {
                None => return None,
                Some(by) => format!("lies in {by}, where a sandboxed command could rewrite it"),
            },
            LinksOutside::Missing => return None,
        };
        Some(format!(
            "tether-exec: the policy file `{}` {why}; keep the policy where sandboxed commands do not write, and name it by a path without links there",
            f.display(),
        ))
    })
}

/// A capture's directories as a plan names them: the whole workspace's
/// upper and work directories, or (when there are any) each git directory's.
type CaptureDirs = (PathBuf, PathBuf, Vec<crate::workspace::overlay::Subtree>);

fn dirs_of(c: &Capture) -> CaptureDirs {
    (c.upper(), c.work(), c.subtrees.clone())
}

fn planned_dirs(c: &PlannedCapture) -> CaptureDirs {
    (c.upper(), c.work(), c.subtrees())
}

fn plan_for(
    policy: &Policy,
    ws: &Path,
    cwd: &Path,
    argv: Vec<String>,
    state: &Path,
    capture: Option<CaptureDirs>,
    git: Option<crate::workspace::GitLayout>,
) -> Result<(plan::Plan, PlanSaw), String> {
    let mut facts = sandbox::host_facts(policy, ws, crate::state::account_home().as_deref(), state, git);
    match capture {
        Some((upper, work, subtrees)) if subtrees.is_empty() => facts.overlay = Some((upper, work)),
        Some((_, _, subtrees)) => {
            facts.git_overlays = subtrees
                .into_iter()
                .map(|t| (ws.join(&t.rel), t.upper, t.work))
                .collect()
        }
        None => {}
    }
    let plan = plan::build(policy, &facts, ws, cwd, argv, state)
        .map_err(|e| format!("tether-exec: cannot plan the sandbox: {e}"))?;
    // On record before the command can leave a link here, for later runs
    // elsewhere not to follow (see `workspace::WrittenWorkspaces`); only a
    // workspace the plan accepts (never `/`, a system directory, or one
    // holding the state directory).
    if policy.profile() == Profile::WorkspaceWrite {
        crate::workspace::remember_written(state, ws).map_err(|e| format!("tether-exec: {e}"))?;
    }
    Ok((
        plan,
        PlanSaw {
            env: facts.env_secrets,
            git: facts.git_layout,
        },
    ))
}

/// What the plan saw of the workspace, which the check of the protected
/// paths after the run starts from: the `.env*` secrets its scan found (one
/// walk of the workspace, not two) and the git layout its mounts protect
/// (one reading of it, not a second one while the sandbox builds itself).
struct PlanSaw {
    env: crate::workspace::EnvSecrets,
    git: crate::workspace::GitLayout,
}

/// The environment the sandbox would get, but `PWD` (the cwd is bound on
/// its own).
fn bound_env(policy: &Policy, ws: &Path, cwd: &Path) -> Vec<(String, String)> {
    let host: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    let mut env = plan::environment(policy, &host, ws, cwd);
    env.retain(|(k, _)| k != "PWD");
    env
}

/// Digest of the environment the sandbox would get (names and values).
fn env_digest_of(env: &[(String, String)]) -> String {
    let text: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    approval::sha256_hex(text.join("\0").as_bytes())
}

/// Each variable's name with a short digest of its value, as a held
/// action keeps them (see [`HeldContext::env`]); salted per action, so that
/// a short value (a PIN passed through) cannot be looked up from it.
fn env_names(env: &[(String, String)], salt: &str) -> Vec<(String, String)> {
    env.iter()
        .map(|(k, v)| {
            let salted = [salt.as_bytes(), b"\0", v.as_bytes()].concat();
            (k.clone(), approval::sha256_hex(&salted)[..16].to_string())
        })
        .collect()
}

/// Which variables differ between the environment held (`then`) and the
/// one a resume would give (`now`): `LANG changed; FOO added`.
fn env_changes(then: &[(String, String)], now: &[(String, String)]) -> String {
    let then: std::collections::BTreeMap<_, _> = then.iter().cloned().collect();
    let now: std::collections::BTreeMap<_, _> = now.iter().cloned().collect();
    let mut out = Vec::new();
    for (k, v) in &now {
        match then.get(k) {
            None => out.push(format!("{k} added")),
            Some(old) if old != v => out.push(format!("{k} changed")),
            Some(_) => {}
        }
    }
    out.extend(
        then.keys()
            .filter(|k| !now.contains_key(*k))
            .map(|k| format!("{k} removed")),
    );
    out.join("; ")
}

/// The capture a run writes into: the whole workspace when the policy needs
/// the overlay; else, for a writable run, the workspace's git directories
/// (see `plan`); none for a read-only run.
/// Decided here, made once the sandbox's init exists (see [`PlannedCapture`]).
/// With it, the workspace's git layout when the one read here still holds
/// for the plan: when no checkout was made (one made is no longer missing
/// but without a `.git`, which the plan makes read-only).
fn capture_for(
    policy: &Policy,
    state: &Path,
    ws: &Path,
) -> Result<(Option<PlannedCapture>, Option<crate::workspace::GitLayout>), String> {
    if needs_overlay(policy) {
        return Ok((Some(PlannedCapture::new(state, ws)), None));
    }
    if policy.profile() != Profile::WorkspaceWrite {
        return Ok((None, None));
    }
    let trees = plan::writable_trees(policy).ok().flatten();
    let layout = crate::workspace::git_layout_with(ws, &crate::workspace::scan_before_run(ws, state).repos);
    // Gitlink checkouts that do not exist are made (empty), to be read-only
    // in the run: a `.git` the run put there would be obeyed at once.
    crate::workspace::make_missing_checkouts(ws, &layout).map_err(|e| {
        format!("tether-exec: cannot prepare the checkouts of the repositories the git index names: {e}")
    })?;
    let dirs = crate::workspace::git_overlay_dirs(&layout, ws, trees.as_deref());
    if dirs.len() > crate::workspace::MAX_GIT_OVERLAYS {
        return Err(format!(
            "tether-exec: this workspace holds {} git directories (nested repositories: those the git index names, and those found in the workspace before the run); more than {} cannot each be protected by an overlay of its own, so a writable run is refused. Set `overlay = true` in the policy: one overlay then captures and checks everything",
            dirs.len(),
            crate::workspace::MAX_GIT_OVERLAYS
        ));
    }
    let still_holds = layout.missing_checkouts.is_empty().then_some(layout);
    if dirs.is_empty() {
        return Ok((None, still_holds));
    }
    let mut capture = PlannedCapture::new(state, ws);
    for d in &dirs {
        capture.add_subtree(d);
    }
    Ok((Some(capture), still_holds))
}

/// Whether this policy needs the overlay workspace: it asks for it, or its
/// globs are not all `DIR/**`.
/// Whether the workspace must be an overlay: asked for, or needed for what
/// no mount can enforce on a bind-mounted workspace (writes limited to globs
/// that are not whole trees; protected globs of the policy's own, which
/// match files that do not exist yet as well as those that do).
fn needs_overlay(policy: &Policy) -> bool {
    policy.profile() == Profile::WorkspaceWrite
        && (policy.overlay()
            || policy.layers.iter().any(|l| !l.protected.is_empty())
            || matches!(plan::writable_trees(policy), Err(plan::PlanError::GlobNeedsOverlay(_))))
}

/// Finish interrupted commits and discard dead captures; lines for stderr.
/// Interrupted commits finished first, then the checks of the protected
/// paths their runs still owed, then the landings of approved previews whose
/// launcher died.
fn recover(state: &Path) -> Vec<String> {
    let mut lines: Vec<String> = crate::workspace::overlay::recover(state)
        .into_iter()
        .chain(crate::workspace::recover_pending_checks(state))
        .map(|l| format!("tether-exec: {l}"))
        .collect();
    lines.extend(recover_preview_landings(state));
    lines
}

/// A capture made before it is known whether its run starts: discarded
/// unless taken (a refused or rejected resume leaves none behind, which the
/// next start would otherwise report as an interrupted run's).
struct UnusedCapture(Option<Capture>);

impl UnusedCapture {
    fn take(&mut self) -> Option<Capture> {
        self.0.take()
    }
}

impl Drop for UnusedCapture {
    fn drop(&mut self) {
        if let Some(c) = self.0.take() {
            c.discard();
        }
    }
}

/// What must be done before the command may start, done while the sandbox
/// builds itself (as the deferred audit record is): an error stops the run
/// before the command starts, with that message.
type BeforeStart<'a> = Box<dyn FnOnce() -> Result<(), String> + 'a>;

/// The audit log a run records its end in.
enum Audit<'a> {
    /// Open, and everything before the start is on record (resume).
    Open(&'a mut AuditLog),
    /// Opens the log and records the decision (returning its seq). It runs
    /// while the sandbox builds itself, which takes the log's open and the
    /// record off the critical path; the command starts only after it
    /// succeeded, so nothing runs unrecorded.
    Deferred(Box<dyn FnOnce() -> Result<(AuditLog, u64), String> + 'a>),
}

/// Run a plan, record the outcome, fill the receipt.
#[allow(clippy::too_many_arguments)]
fn execute(
    plan: &plan::Plan,
    policy: &Policy,
    stdin: Option<&[u8]>,
    mut receipt: Receipt,
    audit: Audit<'_>,
    session: Option<String>,
    approval_id: Option<String>,
    state: &Path,
    capture: Option<PlannedCapture>,
    plan_saw: PlanSaw,
    before_start: Option<BeforeStart<'_>>,
) -> Finished {
    let isolation = Isolation::of(plan);
    let writable = policy.profile() == Profile::WorkspaceWrite;
    // The protected paths as they are before the command starts: a few
    // `lstat`s of the layout the plan read, taken before the sandbox builds
    // itself (where they competed with init's helper for the launcher's CPU).
    let protected_before = writable
        .then(|| crate::workspace::snapshot_protected(&plan.workspace, plan_saw.env, &plan.found_trees, plan_saw.git));
    let (mut borrowed, mut deferred) = match audit {
        Audit::Open(log) => (Some(log), None),
        Audit::Deferred(f) => (None, Some(f)),
    };
    let mut opened: Option<AuditLog> = None;
    let mut decision_seq = None;
    // The check of the protected paths is owed from before the command
    // starts, and kept on disk until it is done, even if this launcher is
    // killed in between (the next start does it then).
    let mut pending: Option<crate::workspace::PendingCheck> = None;
    let mut before_start = before_start;
    // `with_start`: false once the sandbox failed before its turn, when
    // only the record is owed (see below), not what the start needs.
    let mut before_exec = |with_start: bool| -> Result<(), String> {
        if let Some(record) = deferred.take() {
            let (log, seq) = record()?;
            opened = Some(log);
            decision_seq = Some(seq);
        }
        if let (Some(before), None) = (&protected_before, &pending) {
            let p = crate::workspace::PendingCheck::record(state, &plan.workspace, before).map_err(|e| {
                format!(
                    "tether-exec: cannot record the check of the protected paths this run owes, so nothing runs: {e}"
                )
            })?;
            pending = Some(p);
        }
        if let Some(f) = before_start.take().filter(|_| with_start) {
            f()?;
        }
        Ok(())
    };
    // The capture is made once init exists (see `PlannedCapture`); a run
    // stopped before that leaves none behind.
    let mut planned = capture;
    let mut capture: Option<Capture> = None;
    let mut make_capture = || -> Result<(), String> {
        if let Some(p) = planned.take() {
            let made = p
                .make()
                .map_err(|e| format!("tether-exec: cannot prepare the overlay workspace, so nothing runs: {e}"))?;
            capture = Some(made);
        }
        Ok(())
    };
    let mut outcome = apply::run(plan, stdin, None, &mut make_capture, &mut || before_exec(true));
    // init waits with the mounts in place while a capture is checked and
    // landed (see `apply::Outcome::hold_init`), and until the result is out.
    let hold_init = outcome.as_mut().ok().and_then(|o| o.hold_init.take());
    // A setup that failed before the launcher's turn: the decision still goes
    // on record, then the failure.
    if let Err(e) = before_exec(false) {
        outcome = Err(apply::ApplyError::NotStarted(e));
    }
    if decision_seq.is_some() {
        receipt.audit_seq = decision_seq;
    }
    let log: &mut AuditLog = match (borrowed.take(), opened.as_mut()) {
        (Some(l), _) => l,
        (None, Some(l)) => l,
        (None, None) => {
            // The decision could not be recorded, so the command never started.
            let why = match outcome {
                Err(apply::ApplyError::NotStarted(why)) => why,
                Err(e) => format!("tether-exec: {e}; nothing ran"),
                Ok(_) => "tether-exec: internal error: the run ended without an audit record".into(),
            };
            if let Some(c) = capture {
                c.discard();
            }
            // Nothing started, so no check is owed: left on disk, the next
            // start would take it for an interrupted run's.
            if let Some(p) = pending {
                p.done();
            }
            return Finished::new(exit::INTERNAL, receipt, why);
        }
    };
    // Generations only matter between a hold and its resume: count them once
    // anything has ever been held in this state directory.
    let held_before = state.join(approval::DB_FILE_NAME).exists();
    // A run stopped before its command started changed nothing: the sandbox
    // reports a failed set-up step only before the command's `execve`, and
    // work owed before the start (`NotStarted`) holds the command back.
    let started = outcome.is_ok();
    if writable && held_before && started {
        // Any writable run may change the workspace: approvals bound to the
        // previous generation no longer hold.
        if let Err(e) = crate::workspace::bump_generation(state, &plan.workspace) {
            receipt.error = Some(e.to_string());
        }
    }
    let mut rec = AuditEntry::new(EntryKind::RunEnd);
    rec.session = session;
    rec.actor = Some("harness".into());
    rec.policy_digest = Some(receipt.policy_digest.clone());
    rec.approval_id = approval_id;
    let mut stderr = Vec::new();
    let mut refused_to_make = Vec::new();
    let code = match outcome {
        Err(e) => {
            rec.kind = EntryKind::SetupFailure;
            rec.detail = Some(e.to_string());
            receipt.error = Some(e.to_string());
            // The launcher's own failures before the start name themselves;
            // the sandbox's set-up steps point at `doctor`.
            stderr.push(match &e {
                apply::ApplyError::NotStarted(why) => why.clone(),
                _ => format!("tether-exec: {e}\nnothing ran; `tether-exec doctor` reports what this kernel offers"),
            });
            exit::INTERNAL
        }
        Ok(o) => {
            receipt.isolation = Some(isolation.clone());
            rec.isolation = serde_json::to_value(&isolation).ok();
            refused_to_make = o.refused.clone();
            receipt.duration_ms = o.duration.as_millis() as u64;
            rec.duration_ms = Some(receipt.duration_ms);
            match o.ended {
                apply::Ended::Exited(c) => {
                    if c > 128 {
                        receipt.signal = Some(c - 128);
                        rec.signal = Some(c - 128);
                    }
                    c
                }
                apply::Ended::TimedOut => {
                    receipt.timed_out = true;
                    rec.timed_out = Some(true);
                    stderr.push(format!(
                        "tether-exec: timed out after {} ms; every process of the sandbox was killed",
                        plan.timeout_ms.unwrap_or(0)
                    ));
                    exit::TIMEOUT
                }
                apply::Ended::ExecFailed { code } => {
                    stderr.push(format!(
                        "tether-exec: {}",
                        o.exec_error.as_deref().unwrap_or("cannot execute")
                    ));
                    code
                }
            }
        }
    };
    // The overlay: check every captured write, then land it or not.
    let mut code = code;
    if let Some(c) = capture {
        let git_only = !c.subtrees.is_empty();
        // In a git directory only the offending paths stay out (as in bind
        // mode): a commit made in the same run is not lost with them.
        let drop = git_only || policy.on_violation() == crate::policy::OnViolation::Drop;
        match c.finish(&|| policy.path_globs(), drop) {
            Ok(o) => {
                let violated = !o.violations.is_empty();
                let conflicted = !o.conflicts.is_empty();
                code = record_outcome(o, &mut receipt, &mut stderr, code);
                if git_only && conflicted {
                    stderr.push(
                        "tether-exec: a git directory is one transaction, so none of the run's changes to it were applied (its commits, index and refs); run the git commands again".into(),
                    );
                }
                if git_only {
                    // The rest of the workspace is bound, its changes are not
                    // listed: neither are git's own. A control file made in a
                    // git directory is refused as in bind mode, whatever landed.
                    receipt.changes = None;
                    if violated {
                        code = exit::REFUSED;
                    }
                }
                if !receipt.rolled_back.is_empty() {
                    rec.kind = EntryKind::Rollback;
                    rec.detail = Some(receipt.rolled_back.join("; "));
                }
            }
            Err(e) => {
                stderr.push(format!(
                    "tether-exec: could not commit the run's writes: {e}; the next run finishes or discards the commit"
                ));
                code = exit::INTERNAL;
            }
        }
    }
    // Protected paths that did not exist yet cannot be mounted read-only; a
    // run that created one (or swapped `.git` by renaming it) does not keep it.
    // After the capture landed: the index it lands may name new repositories.
    let mut violations = Vec::new();
    if let Some(before) = &protected_before {
        match crate::workspace::enforce_protected(&plan.workspace, before, state) {
            Ok(v) => violations = v,
            Err(e) => violations.push(format!("could not check protected paths: {e}")),
        }
    }
    if let Some(p) = pending {
        p.done();
    }
    if !violations.is_empty() {
        rec.detail = Some(format!("protected paths: {}", violations.join("; ")));
    }
    let code = refused_for_protected_paths(code, &violations, "the run", &mut stderr, &mut receipt);
    let code = refused_to_make_protected_paths(code, &refused_to_make, &mut rec, &mut stderr, &mut receipt);
    receipt.exit_code = Some(code);
    rec.exit_code = Some(code);
    match log.append(rec) {
        Ok(seq) => receipt.audit_seq = Some(seq),
        Err(e) => {
            // The command already ran; say loudly that its end is not on record.
            stderr.push(format!(
                "tether-exec: the command ran, but its end could not be written to the audit log: {e}"
            ));
            receipt.error = Some(format!("audit write failed after the run: {e}"));
        }
    }
    Finished {
        code,
        receipt,
        stderr,
        replay: None,
        hold_init: hold_init.map(HoldInit),
        after: None,
        command_started: started,
    }
}

/// The names the create guard refused to make while the command ran (it
/// saw EPERM, and may have gone on regardless): the run is refused (exit 77)
/// as one that wrote protected paths is, and each is said and kept in the
/// receipt and the audit record.
fn refused_to_make_protected_paths(
    code: i32,
    refused: &[String],
    rec: &mut AuditEntry,
    stderr: &mut Vec<String>,
    receipt: &mut Receipt,
) -> i32 {
    if refused.is_empty() {
        return code;
    }
    // `!\treason`: the guard itself failed and stopped the sandbox.
    let (failed, refused): (Vec<&String>, Vec<&String>) = refused.iter().partition(|l| l.starts_with("!\t"));
    if let Some(f) = failed.first() {
        let why = &f[2..];
        stderr.push(format!(
            "tether-exec: the create guard failed ({why}), so every process of the sandbox was killed: a run that cannot have the names it makes judged does not go on"
        ));
        receipt.error = Some(format!("the create guard failed: {why}"));
        rec.detail = Some(format!("create guard failed: {why}"));
        return exit::INTERNAL;
    }
    // `+\tN`: refusals beyond those the guard listed.
    let (more, refused): (Vec<&String>, Vec<&String>) = refused.into_iter().partition(|l| l.starts_with("+\t"));
    let mut said: Vec<String> = refused
        .iter()
        .map(|line| {
            let (path, why) = line.split_once('\t').unwrap_or((line.as_str(), "protected"));
            format!("`{path}` ({why})")
        })
        .collect();
    if let Some(n) = more.first().map(|l| &l[2..]) {
        said.push(format!("and {n} more"));
    }
    stderr.push(format!(
        "Sandbox violation: the run tried to make protected paths, and was refused (the command saw \"Operation not permitted\"): {}",
        said.join("; ")
    ));
    receipt.refused_to_make.extend(said.iter().cloned());
    let detail = format!("refused to make: {}", said.join("; "));
    rec.detail = Some(match rec.detail.take() {
        Some(d) => format!("{d}; {detail}"),
        None => detail,
    });
    exit::REFUSED
}

/// Read standard input for a held action (bounded); a terminal gives none.
fn read_stdin(is_tty: bool) -> Result<Vec<u8>, String> {
    if is_tty {
        return Ok(Vec::new());
    }
    use std::io::Read;
    let mut buf = Vec::new();
    std::io::stdin()
        .take(approval::MAX_STDIN_BYTES as u64 + 1)
        .read_to_end(&mut buf)
        .map_err(|e| format!("tether-exec: cannot read standard input to hold it: {e}"))?;
    if buf.len() > approval::MAX_STDIN_BYTES {
        return Err(format!(
            "tether-exec: standard input is larger than {} bytes; a held action stores its input, so it cannot be held. Pass the data through a file in the workspace instead.",
            approval::MAX_STDIN_BYTES
        ));
    }
    Ok(buf)
}

fn intent_of(script: Option<String>, argv: &[String], stdin: &[u8], cwd: &Path, env_digest: String) -> Intent {
    Intent {
        argv: if script.is_some() { None } else { Some(argv.to_vec()) },
        script,
        stdin_digest: approval::sha256_hex(stdin),
        cwd: cwd.to_string_lossy().into_owned(),
        env_digest,
    }
}

fn bindings(policy: &Policy, ws: &Path, state: &Path) -> Result<Bindings, String> {
    Ok(Bindings {
        policy_digest: policy.digest(),
        env_instance_id: crate::state::env_instance_id(state, ws).map_err(|e| format!("tether-exec: {e}"))?,
        workspace_fingerprint: crate::workspace::fingerprint(ws, &policy.fingerprint_ignore())
            .map_err(|e| format!("tether-exec: {e}"))?,
        workspace_generation: crate::workspace::generation(state, ws),
    })
}

/// Proposals an approval stays valid for, counted from the approval.
pub const PROPOSAL_WINDOW: u64 = 1000;

fn hold(
    req: &Request,
    policy: &Policy,
    d: &Decision,
    mut receipt: Receipt,
    log: &mut AuditLog,
    stdin_is_tty: bool,
) -> Finished {
    let stdin = match read_stdin(stdin_is_tty) {
        Ok(s) => s,
        Err(e) => return Finished::new(exit::INTERNAL, receipt, e),
    };

    // What the hold binds, and the store: made while the preview's sandbox
    // builds itself (the preview runs on an overlay, so the workspace it
    // fingerprints is the one the preview starts from).
    let mut bound: Option<Bindings> = None;
    let mut opened: Option<ApprovalStore> = None;
    let mut prepare = || -> Result<(), String> {
        if bound.is_none() {
            bound = Some(bindings(policy, &req.workspace, &req.state_dir)?);
        }
        if opened.is_none() {
            opened = Some(
                ApprovalStore::open(&req.state_dir).map_err(|e| format!("tether-exec: cannot hold the action: {e}"))?,
            );
        }
        Ok(())
    };
    let no_preview = no_preview_reason(policy, d);
    // The preview's init, let go only once the hold is on record and its
    // result out: the kernel's dismantling of its namespaces and overlay
    // would otherwise compete for the machine with the hold's own work.
    let (preview, preview_init) = match no_preview {
        Some(_) => (None, None),
        None => match make_preview(req, policy, &stdin, &mut prepare) {
            Ok((p, init)) => (Some(p), init),
            Err(e) => return Finished::new(exit::INTERNAL, receipt, e),
        },
    };
    // Nothing is held without its preview, nor a preview kept without a hold.
    let preview_dir = preview.as_ref().map(|p| p.dir.clone());
    let discard_preview = || {
        if let Some(d) = &preview_dir {
            crate::workspace::overlay::discard_preview(d);
        }
    };
    if let Err(e) = prepare() {
        discard_preview();
        return Finished::new(exit::INTERNAL, receipt, e);
    }
    let (Some(mut b), Some(store)) = (bound, opened) else {
        return Finished::new(
            exit::INTERNAL,
            receipt,
            "tether-exec: internal error: the hold was not prepared",
        );
    };
    b.workspace_fingerprint = with_preview(b.workspace_fingerprint, preview.as_ref());
    let has_preview = preview.is_some();
    let env = bound_env(policy, &req.workspace, &req.cwd);
    let env_salt = {
        let mut b = [0u8; 16];
        // Without randomness the digests are merely unsalted.
        let _ = getrandom::fill(&mut b);
        crate::policy::hex(&b)
    };
    let context = HeldContext {
        workspace: req.workspace.clone(),
        files: policy.files.clone(),
        layers: policy
            .layers
            .iter()
            .map(|l| (l.source.clone(), l.text.clone()))
            .collect(),
        preview,
        no_preview,
        env_salt: env_salt.clone(),
        env: env_names(&env, &env_salt),
    };
    let request = HoldRequest {
        session: req.session.clone(),
        intent: intent_of(req.script.clone(), &req.argv, &stdin, &req.cwd, env_digest_of(&env)),
        stdin,
        policy_json: serde_json::to_string(&context).expect("serialisable"),
        bindings: b,
        required_approvals: d.approvals_required,
        ttl_seconds: policy.approval_ttl_seconds(),
        proposal_window: PROPOSAL_WINDOW,
        summary: d.summary(),
        proposal_counted: req.session.is_some(),
    };
    let held = match store.hold(request) {
        Ok(h) => h,
        Err(e) => {
            discard_preview();
            return Finished::new(
                exit::INTERNAL,
                receipt,
                format!("tether-exec: cannot hold the action: {e}"),
            );
        }
    };
    let mut rec = AuditEntry::new(EntryKind::Held);
    rec.session = Some(held.session.clone());
    rec.actor = Some("harness".into());
    rec.policy_digest = Some(held.bindings.policy_digest.clone());
    rec.command = Some(req.command_text());
    rec.stdin_digest = Some(held.intent.stdin_digest.clone());
    rec.decision = Some("ask".into());
    rec.rules = Some(rules_of(d));
    rec.approval_id = Some(held.id.clone());
    if let Err(e) = append(log, rec) {
        return Finished::new(exit::INTERNAL, receipt, e);
    }
    receipt.pending_id = Some(held.id.clone());
    receipt.session = Some(held.session.clone());
    let need = if held.required_approvals > 1 {
        format!(" ({} distinct approvers needed)", held.required_approvals)
    } else {
        String::new()
    };
    let mut held_done = Finished::new(
        exit::HELD,
        receipt,
                format!(
            "[APPROVAL REQUIRED] Session `{}` wants to run: `{}`{need}\nApprove with `tether-exec approve {}` or reject with `tether-exec reject {} --reason \"<reason>\"`.{}",
            held.session,
            req.command_text(),
            held.id,
            held.id,
            if has_preview {
                format!("\nA preview of its effects exists (it ran once, confined; nothing landed): `tether-exec show {}`.", held.id)
            } else {
                String::new()
            }
        ),
    );
    held_done.hold_init = preview_init;
    held_done
}

/// Rebuild the policy a held action was approved under.
pub(crate) fn held_policy(ctx: &HeldContext) -> Result<Policy, String> {
    if ctx.layers.is_empty() {
        return Ok(Policy::embedded_default());
    }
    let mut layers = Vec::new();
    for (source, text) in &ctx.layers {
        let format = Format::guess(Path::new(source), text);
        layers.push(Layer::parse(text, source, format).map_err(|e| format!("the held policy no longer parses: {e}"))?);
    }
    Ok(Policy::new(layers, ctx.files.clone()))
}

/// Exit code for an approval error: 125 when tether-exec failed, 77 when it refuses.
pub fn refusal_code(e: &ApprovalError) -> i32 {
    match e {
        ApprovalError::Io { .. }
        | ApprovalError::Database { .. }
        | ApprovalError::SchemaTooNew { .. }
        | ApprovalError::Randomness { .. }
        | ApprovalError::KeyPermissions { .. }
        | ApprovalError::KeyOwner { .. }
        | ApprovalError::KeyFile { .. }
        | ApprovalError::NoHomeDirectory { .. }
        | ApprovalError::NotFound { .. } => exit::INTERNAL,
        // Not refused: it is running in another process now, and a retry
        // once that ends returns the recorded result (a harness tells the
        // model to wait, not that the action was refused).
        ApprovalError::AlreadyRunning { .. } => exit::HELD,
        _ => exit::REFUSED,
    }
}

/// `tether-exec resume ID`.
pub fn resume(id: &str, state: &Path) -> Finished {
    match ApprovalStore::open(state) {
        Ok(store) => resume_opened(id, state, store),
        Err(e) => {
            let mut receipt = Receipt::new(String::new());
            receipt.pending_id = Some(id.to_string());
            Finished::new(exit::INTERNAL, receipt, format!("tether-exec: {e}"))
        }
    }
}

/// `resume` with the approval store already open: the one `approve --resume`
/// and `reject --resume` decided with, so that the operator's decision and
/// the run it releases are one process, not two. Everything the approval
/// binds is checked here all the same, as for any resume.
pub fn resume_opened(id: &str, state: &Path, store: ApprovalStore) -> Finished {
    let mut receipt = Receipt::new(String::new());
    receipt.pending_id = Some(id.to_string());
    let mut log = match open_audit(state) {
        Ok(l) => l,
        Err(e) => return Finished::new(exit::INTERNAL, receipt, e),
    };
    // Checked before anything is consumed: starting the run spends the
    // approval, and a log that then refused the run's record would leave the
    // action burnt, marked as maybe run, with nothing on record.
    if let Err(e) = log.ready_to_append() {
        return Finished::new(
            exit::INTERNAL,
            receipt,
            format!("tether-exec: cannot write to the audit log, so nothing runs and the approval is not spent: {e}"),
        );
    }
    let refused = |log: &mut AuditLog, receipt: Receipt, code: i32, why: String| {
        let mut rec = AuditEntry::new(EntryKind::ResumeRefused);
        rec.approval_id = Some(id.to_string());
        rec.detail = Some(why.clone());
        if let Err(e) = log.append(rec) {
            return Finished {
                code: exit::INTERNAL,
                receipt,
                stderr: vec![why, format!("tether-exec: and the refusal could not be audited: {e}")],
                replay: None,
                hold_init: None,
                after: None,
                command_started: false,
            };
        }
        Finished::new(code, receipt, why)
    };
    let action = match store.get(id) {
        Ok(a) => a,
        Err(e) => return refused(&mut log, receipt, refusal_code(&e), format!("tether-exec: {e}")),
    };
    receipt.session = Some(action.session.clone());
    let ctx: HeldContext = match serde_json::from_str(&action.policy_json) {
        Ok(c) => c,
        Err(e) => {
            return refused(
                &mut log,
                receipt,
                exit::REFUSED,
                format!("tether-exec: the held action's context is unreadable ({e}); it cannot run"),
            )
        }
    };
    // A resume that died while landing this action's approved preview left
    // its journal: the landing had begun, so it is finished, not approved
    // again (the workspace no longer matches what was approved, half of it
    // landed).
    match finish_landing_if_begun(&store, &mut log, &action, &ctx, id, state) {
        Ok(Some(done)) => return done,
        Ok(None) => {}
        Err(why) => return refused(&mut log, receipt, exit::INTERNAL, why),
    }
    let policy = match held_policy(&ctx) {
        Ok(p) => p,
        Err(e) => return refused(&mut log, receipt, exit::REFUSED, format!("tether-exec: {e}")),
    };
    receipt.policy_digest = policy.digest();
    if policy.digest() != action.bindings.policy_digest {
        return refused(&mut log, receipt, exit::REFUSED, format!("tether-exec: refusing {id}: the stored policy does not match the digest it was held under (the state directory was edited)"));
    }
    // The policy in force now: the same files, re-read. A changed file changes the digest.
    let current_policy = match crate::load_policy(&ctx.files) {
        Ok(p) => p,
        Err(e) => {
            return refused(
                &mut log,
                receipt,
                exit::REFUSED,
                format!("tether-exec: refusing {id}: the policy no longer loads: {e}"),
            )
        }
    };
    let stdin = match store.stdin(id) {
        Ok(s) => s,
        Err(e) => return refused(&mut log, receipt, refusal_code(&e), format!("tether-exec: {e}")),
    };
    let cwd = PathBuf::from(&action.intent.cwd);
    let argv = match (&action.intent.script, &action.intent.argv) {
        (Some(s), _) => script_argv(s),
        (None, Some(a)) => a.clone(),
        (None, None) => {
            return refused(
                &mut log,
                receipt,
                exit::REFUSED,
                format!("tether-exec: {id} has no command"),
            )
        }
    };
    let recovered = recover(state);
    // The workspace as it is, before preparing the run changes anything in
    // it (the empty checkouts `capture_for` may make).
    let mut current_bindings = match bindings(&current_policy, &ctx.workspace, state) {
        Ok(b) => b,
        Err(e) => return refused(&mut log, receipt, exit::INTERNAL, e),
    };
    // A preview lands what was captured: nothing runs, no sandbox is planned.
    let (capture, prepared) = if ctx.preview.is_some() {
        (None, None)
    } else {
        let (capture, git) = match capture_for(&policy, state, &ctx.workspace) {
            Ok(c) => c,
            Err(e) => return refused(&mut log, receipt, exit::INTERNAL, e),
        };
        match plan_for(
            &policy,
            &ctx.workspace,
            &cwd,
            argv,
            state,
            capture.as_ref().map(planned_dirs),
            git,
        ) {
            Ok(p) => (capture, Some(p)),
            Err(e) => return refused(&mut log, receipt, exit::INTERNAL, e),
        }
    };
    current_bindings.policy_digest = current_policy.digest();
    if let Some(pr) = &ctx.preview {
        // The preview as it is now: a byte changed in it changes its digest.
        let now = crate::workspace::overlay::preview_digest(&pr.dir, pr.exit_code).unwrap_or_else(|_| "missing".into());
        current_bindings.workspace_fingerprint = format!("{} preview:{now}", current_bindings.workspace_fingerprint);
    }
    let env_now = bound_env(&policy, &ctx.workspace, &cwd);
    let current = Current {
        session: action.session.clone(),
        intent: intent_of(
            action.intent.script.clone(),
            action.intent.argv.as_deref().unwrap_or(&[]),
            &stdin,
            &cwd,
            env_digest_of(&env_now),
        ),
        bindings: current_bindings,
        writable_run_in_progress: crate::workspace::writable_run_in_progress(state, &ctx.workspace),
        // Unreadable, it refuses: proposal expiry must never read as zero.
        session_proposals: match store.session_proposals(&action.session) {
            Ok(n) => n,
            Err(e) => {
                return refused(
                    &mut log,
                    receipt,
                    refusal_code(&e),
                    format!("tether-exec: refusing to resume {id}: {e}"),
                )
            }
        },
    };
    match store.begin_resume(id, &current, now_ms()) {
        Err(e) => {
            // Which variables changed, where the action kept their names.
            let which = match &e {
                ApprovalError::Changed { .. }
                    if action.intent.env_digest != current.intent.env_digest && !ctx.env.is_empty() =>
                {
                    format!(
                        " (the environment: {})",
                        env_changes(&ctx.env, &env_names(&env_now, &ctx.env_salt))
                    )
                }
                _ => String::new(),
            };
            let mut receipt = receipt;
            if matches!(e, ApprovalError::AlreadyRunning { .. }) {
                // Still held for this caller: it waits, as for a hold.
                receipt.decision = Some(Verdict::Ask);
            }
            refused(
                &mut log,
                receipt,
                refusal_code(&e),
                format!("tether-exec: refusing to resume {id}: {e}{which}"),
            )
        }
        Ok(Resume::Rejected(reason)) => {
            if let Some(pr) = &ctx.preview {
                crate::workspace::overlay::discard_preview(&pr.dir);
            }
            receipt.decision = Some(Verdict::Deny);
            Finished::new(exit::REFUSED, receipt, format!("[ACTION REJECTED BY POLICY]: {reason}"))
        }
        Ok(Resume::Pending { have, need }) => {
            // Still held: the receipt says so, as a hold's does.
            receipt.decision = Some(Verdict::Ask);
            Finished::new(
                exit::HELD,
                receipt,
                format!(
                    "[APPROVAL REQUIRED] {id} has {have} of {need} approvals. Approve with `tether-exec approve {id}`."
                ),
            )
        }
        Ok(Resume::AlreadyRan(r)) => {
            let code = r.exit_code.unwrap_or(exit::INTERNAL);
            let mut out = Finished::new(
                code,
                receipt,
                format!(
                    "tether-exec: {id} already ran (exit {code}); it never runs twice. This is its recorded result."
                ),
            );
            out.receipt.exit_code = r.exit_code;
            out.receipt.signal = r.signal;
            out.receipt.timed_out = r.timed_out;
            out.receipt.duration_ms = r.duration_ms;
            out
        }
        Ok(Resume::Run(ticket)) => {
            receipt.decision = Some(Verdict::Allow);
            let approvers: Vec<String> = ticket
                .action()
                .approvals
                .iter()
                .filter(|e| !e.superseded)
                .map(|e| e.approver_key_id.clone())
                .collect();
            let mut start = AuditEntry::new(EntryKind::RunStart);
            start.session = Some(action.session.clone());
            start.approval_id = Some(id.to_string());
            start.approver_key_ids = Some(approvers);
            start.policy_digest = Some(receipt.policy_digest.clone());
            start.command = Some(
                action
                    .intent
                    .script
                    .clone()
                    .unwrap_or_else(|| shell_words(action.intent.argv.as_deref().unwrap_or(&[]))),
            );
            start.stdin_digest = Some(action.intent.stdin_digest.clone());
            if let Err(e) = append(&mut log, start) {
                // Fail closed: the ticket is dropped unfinished, so the action
                // reads as interrupted and needs a fresh approval.
                return Finished::new(exit::INTERNAL, receipt, e);
            }
            if let Some(pr) = &ctx.preview {
                let run_id = ticket.run_id().to_string();
                let (mut done, landed) = land_preview(
                    pr,
                    &policy,
                    &ctx.workspace,
                    receipt,
                    &mut log,
                    &action.session,
                    id,
                    &run_id,
                    state,
                    &store,
                );
                if let PreviewLanding::NothingLanded = landed {
                    // The ticket is dropped unfinished: the action reads as
                    // interrupted, and a fresh approval lands the preview.
                    done.stderr.splice(0..0, recovered);
                    return done;
                }
                let result = RecordedResult {
                    exit_code: done.receipt.exit_code,
                    signal: None,
                    timed_out: false,
                    duration_ms: 0,
                    receipt_json: serde_json::to_string(&done.receipt).unwrap_or_default(),
                };
                match store.finish(ticket, &result) {
                    Ok(()) => {
                        if let PreviewLanding::Landed(l) = landed {
                            done.after = Some(l);
                        }
                    }
                    // The journal stays: the next resume finds the landing
                    // done and records it.
                    Err(e) => done.stderr.push(format!(
                        "tether-exec: the preview landed, but its result could not be recorded: {e}"
                    )),
                }
                done.stderr.splice(0..0, recovered);
                return done;
            }
            let Some((plan, plan_saw)) = prepared else {
                return Finished::new(
                    exit::INTERNAL,
                    receipt,
                    "tether-exec: internal error: no plan for the run".to_string(),
                );
            };
            // The command's effects are its own, beyond any journal: its start
            // is on disk before it can have any. The sync waits on the disk
            // while the sandbox builds itself, and the command starts only
            // once it succeeded. Failing that, nothing runs and the ticket is
            // dropped unfinished (see below).
            let make_start_durable = || {
                sync_start(&store)
                    .map_err(|e| format!("tether-exec: cannot put the start of {id} on disk, so nothing runs: {e}"))
            };
            let stdin = ticket.stdin().to_vec();
            let mut done = execute(
                &plan,
                &policy,
                Some(&stdin),
                receipt,
                Audit::Open(&mut log),
                Some(action.session.clone()),
                Some(id.to_string()),
                state,
                capture,
                plan_saw,
                Some(Box::new(make_start_durable)),
            );
            done.stderr.splice(0..0, recovered);
            if !done.command_started {
                // Nothing ran (a set-up step failed, or work owed before the
                // start): no result is recorded, which would read as the
                // command's for good. The ticket is dropped unfinished, so
                // the action reads as interrupted, and a deliberate approval,
                // once the cause is fixed, runs it.
                done.stderr.push(format!(
                    "tether-exec: {id} did not start, so no result is recorded for it; once the cause is fixed, approve it again (`tether-exec approve {id}`) and resume it"
                ));
                return done;
            }
            let result = RecordedResult {
                exit_code: done.receipt.exit_code,
                signal: done.receipt.signal,
                timed_out: done.receipt.timed_out,
                duration_ms: done.receipt.duration_ms,
                receipt_json: serde_json::to_string(&done.receipt).unwrap_or_default(),
            };

            if let Err(e) = store.finish(ticket, &result) {
                done.stderr.push(format!(
                    "tether-exec: the action ran, but its result could not be recorded: {e}"
                ));
            }
            done
        }
    }
}

/// Put a resume's start on disk (see [`ApprovalStore::make_commits_durable`]);
/// a debug build's test hook (`TETHER_EXEC_TEST_FAIL_AT=start-sync`) fails it.
fn sync_start(store: &ApprovalStore) -> std::io::Result<()> {
    if cfg!(debug_assertions) && std::env::var("TETHER_EXEC_TEST_FAIL_AT").is_ok_and(|v| v == "start-sync") {
        return Err(std::io::Error::other("the test hook failed the sync"));
    }
    store.make_commits_durable().map_err(std::io::Error::other)
}

/// Land an approved preview: exactly the captured changes, without running the
/// command again; replay its recorded output and exit code. The preview is
/// removed by the caller once the result is on record (see `LandedPreview`).
#[allow(clippy::too_many_arguments)]
fn land_preview(
    pr: &PreviewRecord,
    policy: &Policy,
    ws: &Path,
    mut receipt: Receipt,
    log: &mut AuditLog,
    session: &str,
    id: &str,
    run_id: &str,
    state: &Path,
    store: &ApprovalStore,
) -> (Finished, PreviewLanding) {
    let out = std::fs::read(pr.dir.join("stdout")).unwrap_or_default();
    let err = std::fs::read(pr.dir.join("stderr")).unwrap_or_default();
    let mut stderr = Vec::new();
    let drop = policy.on_violation() == crate::policy::OnViolation::Drop;
    let mut landed = PreviewLanding::Failed;
    let owner = crate::workspace::overlay::LandingOwner {
        action: id.to_string(),
        run: run_id.to_string(),
    };
    let make_start_durable = || sync_start(store);
    // The check a run owes after it (see `execute`), owed by a landing too:
    // what a preview lands can make a `.git` file or a gitlink that git
    // would follow, which the preview's own check of paths does not see.
    let scan = crate::workspace::scan_before_run(ws, state);
    let layout = crate::workspace::git_layout_with(ws, &scan.repos);
    let before = crate::workspace::snapshot_protected(ws, scan.env, &scan.repos, layout);
    let pending = crate::workspace::PendingCheck::record(state, ws, &before);
    let pending = match pending {
        Ok(p) => p,
        Err(e) => {
            receipt.exit_code = Some(exit::INTERNAL);
            let why = format!(
                "tether-exec: cannot record the check of the protected paths the landing owes, so nothing of the preview landed: {e}\nthe preview is kept in {}, and `tether-exec approve {id}` then `tether-exec resume {id}` land it",
                pr.dir.display()
            );
            return (
                Finished::new(exit::INTERNAL, receipt, why),
                PreviewLanding::NothingLanded,
            );
        }
    };
    let code = match crate::workspace::overlay::land_preview(
        state,
        &owner,
        &pr.dir,
        ws,
        &|| policy.path_globs(),
        drop,
        &make_start_durable,
    ) {
        Ok((o, l)) => {
            landed = PreviewLanding::Landed(l);
            record_outcome(o, &mut receipt, &mut stderr, pr.exit_code)
        }
        Err(e) if !crate::workspace::overlay::landing_set_aside(&pr.dir) => {
            // Failed before its journal (the start could not be synced, say):
            // the workspace is as it was, and the run is left unfinished, so
            // the action reads as interrupted and a fresh approval lands the
            // same preview.
            receipt.exit_code = Some(exit::INTERNAL);
            receipt.error = Some(e.to_string());
            let mut rec = AuditEntry::new(EntryKind::SetupFailure);
            rec.session = Some(session.to_string());
            rec.approval_id = Some(id.to_string());
            rec.policy_digest = Some(receipt.policy_digest.clone());
            rec.exit_code = Some(exit::INTERNAL);
            rec.detail = Some(format!(
                "the approved preview {} could not be landed; nothing of it landed: {e}",
                pr.digest
            ));
            if let Ok(seq) = log.append(rec) {
                receipt.audit_seq = Some(seq);
            }
            pending.done();
            let why = format!(
                "tether-exec: could not land the preview: {e}\nnothing of it landed; the preview is kept in {}, and `tether-exec approve {id}` then `tether-exec resume {id}` land it",
                pr.dir.display()
            );
            return (
                Finished::new(exit::INTERNAL, receipt, why),
                PreviewLanding::NothingLanded,
            );
        }
        Err(e) => {
            stderr.push(format!(
                "tether-exec: could not land the preview: {e}\nwhat landed of it stays; the preview is kept in {}, and nothing will retry it",
                pr.dir.display()
            ));
            exit::INTERNAL
        }
    };
    let violations = match crate::workspace::enforce_protected(ws, &before, state) {
        Ok(v) => v,
        Err(e) => vec![format!("could not check protected paths: {e}")],
    };
    pending.done();
    let code = refused_for_protected_paths(code, &violations, "the preview", &mut stderr, &mut receipt);
    if let Err(e) = crate::workspace::bump_generation(state, ws) {
        receipt.error = Some(e.to_string());
    }
    receipt.exit_code = Some(code);
    let mut rec = AuditEntry::new(EntryKind::Commit);
    rec.session = Some(session.to_string());
    rec.approval_id = Some(id.to_string());
    rec.policy_digest = Some(receipt.policy_digest.clone());
    rec.exit_code = Some(code);
    rec.detail = Some(if violations.is_empty() {
        format!("landed the approved preview {}", pr.digest)
    } else {
        format!(
            "landed the approved preview {}; protected paths: {}",
            pr.digest,
            violations.join("; ")
        )
    });
    if let Ok(seq) = log.append(rec) {
        receipt.audit_seq = Some(seq);
    }
    let done = Finished {
        code,
        receipt,
        stderr,
        replay: Some((out, err)),
        hold_init: None,
        after: None,
        // The preview ran the command; its effects are what lands.
        command_started: true,
    };
    (done, landed)
}

/// How a resume's landing of a preview ended.
enum PreviewLanding {
    /// Landed; the preview goes once the result is on record.
    Landed(LandedPreview),
    /// Failed after its journal: what landed stays, the journal is set aside.
    Failed,
    /// Failed before anything landed: the run is left unfinished.
    NothingLanded,
}

/// Finish the landing of `action`'s approved preview if a launcher began it
/// and died (its journal is there). `Some` when it was finished, or given up,
/// here; `None` when there was no such landing, or only a finished one's
/// preview was left to remove. An error, with nothing changed, while another
/// launcher lands it or when the action is not in a state to finish it.
fn finish_landing_if_begun(
    store: &ApprovalStore,
    log: &mut AuditLog,
    action: &approval::HeldAction,
    ctx: &HeldContext,
    id: &str,
    state: &Path,
) -> Result<Option<Finished>, String> {
    use crate::workspace::overlay::{self, PendingLanding};
    use approval::ActionState;
    let Some(pr) = &ctx.preview else {
        return Ok(None);
    };
    if !overlay::landing_begun(&pr.dir) {
        return Ok(None);
    }
    match action.state {
        // Landed and on record; its launcher died before removing the
        // preview. (A landing that failed sets its journal aside first.)
        ActionState::Done => {
            overlay::remove_landed_preview(state, id, &pr.dir);
            return Ok(None);
        }
        ActionState::Running | ActionState::Interrupted => {}
        // Only if the store lost the commit that began the landing (a power
        // cut). Given up once: nothing to finish it for.
        other => {
            overlay::give_up_preview_landing(state, id, &pr.dir);
            return Err(format!(
                "tether-exec: a landing of {id}'s approved preview began and did not finish, but the action is {}, so it is given up: what landed stays, and the preview is kept in {}",
                other.as_str(),
                pr.dir.display()
            ));
        }
    }
    let mut receipt = Receipt::new(action.bindings.policy_digest.clone());
    receipt.pending_id = Some(id.to_string());
    receipt.session = Some(action.session.clone());
    let run = match store.run_of(id) {
        Ok(run) => run,
        Err(e) => {
            return Err(format!(
                "tether-exec: cannot finish the interrupted landing of {id}'s preview: {e}"
            ))
        }
    };
    let ended = match overlay::resume_preview_landing(state, id, run.as_deref(), &pr.dir) {
        Ok(PendingLanding::None) => Ok(None),
        Ok(PendingLanding::Busy) => Err(format!(
            "tether-exec: another tether-exec is landing {id}'s approved preview right now; nothing was changed. Try again once it is done"
        )),
        Ok(PendingLanding::Finished { landed, outcome, run }) => Ok(Some((Ok((landed, outcome)), run))),
        Ok(PendingLanding::Failed { error, run }) => Ok(Some((Err(error), run))),
        Ok(PendingLanding::SetAside(why)) => Err(format!(
            "tether-exec: a landing of {id}'s approved preview began and did not finish, and {why}, so it is given up: what landed stays, and the preview is kept in {}",
            pr.dir.display()
        )),
        Err(e) => Err(format!(
            "tether-exec: cannot finish the interrupted landing of {id}'s preview: {e}"
        )),
    }?;
    Ok(ended.map(|(finished, run)| {
        finish_interrupted_landing(
            finished,
            &run,
            pr,
            store,
            log,
            receipt,
            (&action.session, id),
            (state, &ctx.workspace),
        )
    }))
}

/// At any start: finish the preview landings whose launcher died (see
/// `finish_landing_if_begun`); lines for stderr. The preview's output is not
/// replayed here: `resume` of the action returns its recorded result.
fn recover_preview_landings(state: &Path) -> Vec<String> {
    let ids = crate::workspace::overlay::interrupted_preview_landings(state);
    if ids.is_empty() {
        return Vec::new();
    }
    let opened = ApprovalStore::open(state)
        .map_err(|e| e.to_string())
        .and_then(|store| open_audit(state).map(|log| (store, log)));
    let (store, mut log) = match opened {
        Ok(x) => x,
        Err(e) => {
            return vec![format!(
                "tether-exec: could not finish interrupted preview landings: {e}"
            )]
        }
    };
    let mut lines = Vec::new();
    for id in ids {
        let found = store.get(&id).map_err(|e| e.to_string()).and_then(|action| {
            serde_json::from_str::<HeldContext>(&action.policy_json)
                .map_err(|e| format!("its context is unreadable ({e})"))
                .map(|ctx| (action, ctx))
        });
        let (action, ctx) = match found {
            Ok(x) => x,
            Err(e) => {
                lines.push(format!(
                    "tether-exec: could not finish the interrupted landing of {id}: {e}"
                ));
                continue;
            }
        };
        match finish_landing_if_begun(&store, &mut log, &action, &ctx, &id, state) {
            Ok(Some(done)) => lines.extend(done.stderr),
            Ok(None) => {}
            Err(why) => lines.push(why),
        }
    }
    lines
}

/// An action whose last resume died while landing its approved preview,
/// after the journal showed the landing had begun: record how it ended, the
/// way the landing itself would have (the outcome it had decided is in the
/// journal), and replay the preview's output. The command ran once, as the
/// preview; nothing runs now. A landing whose rest could not be applied is
/// recorded as failed, its journal set aside, the preview kept.
#[allow(clippy::too_many_arguments)]
fn finish_interrupted_landing(
    finished: Result<(LandedPreview, Option<crate::workspace::overlay::Outcome>), crate::workspace::WorkspaceError>,
    run: &str,
    pr: &PreviewRecord,
    store: &ApprovalStore,
    log: &mut AuditLog,
    mut receipt: Receipt,
    (session, id): (&str, &str),
    (state, ws): (&Path, &Path),
) -> Finished {
    receipt.decision = Some(Verdict::Allow);
    let mut stderr = Vec::new();
    let mut rec = AuditEntry::new(EntryKind::Commit);
    let (code, landed) = match finished {
        Ok((landed, outcome)) => {
            stderr.push(format!(
                "tether-exec: finished landing {id}'s approved preview, which an earlier resume began and did not finish; the command did not run again"
            ));
            let code = match outcome {
                Some(o) => record_outcome(o, &mut receipt, &mut stderr, pr.exit_code),
                // A journal of an older build: what the preview held.
                None => {
                    receipt.changes = Some(crate::receipt::Changes {
                        added: pr.added.clone(),
                        modified: pr.modified.clone(),
                        deleted: pr.deleted.clone(),
                    });
                    pr.exit_code
                }
            };
            rec.detail = Some(format!(
                "finished the interrupted landing of the approved preview {}",
                pr.digest
            ));
            (code, Some(landed))
        }
        Err(e) => {
            stderr.push(format!(
                "tether-exec: the landing of {id}'s approved preview, begun by an earlier resume, cannot be finished: {e}. What landed stays; the preview is kept in {}, and nothing will retry it",
                pr.dir.display()
            ));
            rec.detail = Some(format!(
                "gave up the interrupted landing of the approved preview {}: {e}",
                pr.digest
            ));
            (exit::INTERNAL, None)
        }
    };
    // As after any landing: approvals bound to the workspace before it no
    // longer hold.
    if let Err(e) = crate::workspace::bump_generation(state, ws) {
        receipt.error = Some(e.to_string());
    }
    receipt.exit_code = Some(code);
    rec.session = Some(session.to_string());
    rec.approval_id = Some(id.to_string());
    rec.policy_digest = Some(receipt.policy_digest.clone());
    rec.exit_code = Some(code);
    match log.append(rec) {
        Ok(seq) => receipt.audit_seq = Some(seq),
        Err(e) => stderr.push(format!("tether-exec: and this could not be audited: {e}")),
    }
    let out = std::fs::read(pr.dir.join("stdout")).unwrap_or_default();
    let err = std::fs::read(pr.dir.join("stderr")).unwrap_or_default();
    let result = RecordedResult {
        exit_code: Some(code),
        signal: None,
        timed_out: false,
        duration_ms: 0,
        receipt_json: serde_json::to_string(&receipt).unwrap_or_default(),
    };
    match store.finish_interrupted_landing(id, run, &result) {
        Ok(()) => {
            if let Some(l) = landed {
                l.done();
            }
        }
        Err(e) => stderr.push(format!(
            "tether-exec: the landing ended, but its result could not be recorded: {e}"
        )),
    }
    Finished {
        code,
        receipt,
        stderr,
        replay: Some((out, err)),
        hold_init: None,
        after: None,
        // The preview ran the command; its effects are what lands.
        command_started: true,
    }
}

/// Fold a commit's outcome into the receipt and tether-exec's messages; returns
/// the exit code (77 when writes were rolled back or a conflict kept the human's version).
fn record_outcome(
    o: crate::workspace::overlay::Outcome,
    receipt: &mut Receipt,
    stderr: &mut Vec<String>,
    code: i32,
) -> i32 {
    let mut code = code;
    receipt.changes = Some(crate::receipt::Changes {
        added: o.added,
        modified: o.modified,
        deleted: o.deleted,
    });
    if !o.violations.is_empty() {
        receipt.rolled_back = o.violations.clone();
        if o.committed {
            stderr.push(format!(
                "Sandbox violation: these writes were discarded, the allowed ones landed: {}",
                o.violations.join("; ")
            ));
        } else {
            stderr.push(format!(
                "Sandbox violation: the run's writes were rolled back, nothing landed: {}",
                o.violations.join("; ")
            ));
            code = exit::REFUSED;
        }
    }
    if !o.conflicts.is_empty() {
        stderr.push(format!(
            "tether-exec: changed in the workspace meanwhile, so your version stays and the run's change was not applied: {}",
            o.conflicts.join(", ")
        ));
        receipt
            .rolled_back
            .extend(o.conflicts.iter().map(|c| format!("conflict `{c}`")));
        code = exit::REFUSED;
    }
    code
}
