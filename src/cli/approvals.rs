//! `pending`, `show`, `approve`, `reject`, `approver`: output formats for the approval store.

use super::error_line;
use crate::approval::{self, ApprovalStore, ApproverKey, HeldAction};
use crate::audit::{AuditEntry, AuditLog, EntryKind};
use crate::exit;
use crate::launch::{refusal_code, HeldContext};
use std::path::Path;

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

fn command_of(a: &HeldAction) -> String {
    a.intent
        .script
        .clone()
        .unwrap_or_else(|| a.intent.argv.clone().unwrap_or_default().join(" "))
}

fn valid_approvals(a: &HeldAction) -> usize {
    a.approvals.iter().filter(|e| !e.superseded).count()
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
                        "{}  {:<11} {}  approvals {}/{}  `{}`",
                        a.id,
                        a.state.as_str(),
                        a.session,
                        valid_approvals(a),
                        a.required_approvals,
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
        println!("  workspace:   {}", c.workspace.display());
        let files: Vec<String> = c.files.iter().map(|f| f.display().to_string()).collect();
        println!(
            "  policy:      {}",
            if files.is_empty() {
                "<embedded default>".to_string()
            } else {
                files.join(" narrowed by ")
            }
        );
    }
    println!("  cwd:         {}", a.intent.cwd);
    println!("  why held:    {}", a.summary);
    println!(
        "  approvals:   {} of {} distinct approvers",
        valid_approvals(&a),
        a.required_approvals
    );
    if let Some(r) = &a.rejection_reason {
        println!("  rejected:    {r}");
    }
    println!("  an approval binds:");
    println!(
        "    session {} (proposal {}), action {}, idempotency key {}",
        a.session, a.position, a.id, a.idempotency_key
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
    println!(
        "    expiry: {} s after approval, or {} proposals of the session; a one-time nonce",
        a.ttl_seconds, a.proposal_window
    );
    0
}

fn audit(state: &Path, kind: EntryKind, id: &str, key_id: &str, detail: Option<String>) -> Result<(), i32> {
    let mut rec = AuditEntry::new(kind);
    rec.actor = Some(format!("approver:{key_id}"));
    rec.approval_id = Some(id.to_string());
    rec.approver_key_ids = Some(vec![key_id.to_string()]);
    rec.detail = detail;
    AuditLog::open(state)
        .and_then(|mut l| l.append(rec))
        .map(|_| ())
        .map_err(|e| {
            error_line(&format!("cannot write the audit record: {e}"));
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

pub fn approve(state: &Path, id: &str) -> i32 {
    let (st, key) = match (store(state), key()) {
        (Ok(s), Ok(k)) => (s, k),
        (Err(c), _) | (_, Err(c)) => return c,
    };
    if let Err(c) = trust_on_first_use(&st, &key) {
        return c;
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    match st.approve(id, &key, now) {
        Ok(a) => {
            if let Err(c) = audit(state, EntryKind::Approved, id, &key.key_id(), None) {
                return c;
            }
            let have = valid_approvals(&a);
            println!(
                "approved {id} as {} ({have} of {} approvals)",
                key.key_id(),
                a.required_approvals
            );
            if have as u32 >= a.required_approvals {
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

pub fn reject(state: &Path, id: &str, reason: &str) -> i32 {
    let (st, key) = match (store(state), key()) {
        (Ok(s), Ok(k)) => (s, k),
        (Err(c), _) | (_, Err(c)) => return c,
    };
    if let Err(c) = trust_on_first_use(&st, &key) {
        return c;
    }
    match st.reject(id, reason, &key) {
        Ok(_) => {
            if let Err(c) = audit(state, EntryKind::Rejected, id, &key.key_id(), Some(reason.to_string())) {
                return c;
            }
            println!("rejected {id}: {reason}");
            0
        }
        Err(e) => {
            error_line(&e.to_string());
            refusal_code(&e)
        }
    }
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
