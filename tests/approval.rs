//! Tests for the approval store through its public API, plus raw SQL edits
//! that play an attacker with write access to the database.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use rusqlite::{params, Connection};
use tempfile::TempDir;
use tether_exec::approval::*;

const T0: u64 = 1_700_000_000_000;
const TTL_SECONDS: u64 = 600;
const CHILD_STATE_ENV: &str = "APPROVAL_TEST_CHILD_STATE";
const CHILD_ACTION_ENV: &str = "APPROVAL_TEST_CHILD_ACTION";

fn intent(argv: &[&str], stdin: &[u8]) -> Intent {
    Intent {
        argv: Some(argv.iter().map(|s| s.to_string()).collect()),
        script: None,
        stdin_digest: sha256_hex(stdin),
        cwd: "/work/repo".into(),
        env_digest: sha256_hex(b"PATH=/usr/bin"),
    }
}

fn bindings() -> Bindings {
    Bindings {
        policy_digest: sha256_hex(b"policy v1"),
        env_instance_id: "env-instance-1".into(),
        workspace_fingerprint: sha256_hex(b"tree 1"),
        workspace_generation: 7,
    }
}

fn request(session: Option<&str>) -> HoldRequest {
    HoldRequest {
        proposal_counted: false,
        session: session.map(str::to_string),
        intent: intent(&["rm", "-rf", "build"], b"yes\n"),
        stdin: b"yes\n".to_vec(),
        policy_json: r#"{"rule":"ask","match":"rm -rf"}"#.into(),
        bindings: bindings(),
        required_approvals: 1,
        ttl_seconds: TTL_SECONDS,
        proposal_window: 10,
        summary: "rule `ask: rm -rf`".into(),
    }
}

fn result(exit: i32) -> RecordedResult {
    RecordedResult {
        exit_code: Some(exit),
        signal: None,
        timed_out: false,
        duration_ms: 42,
        receipt_json: r#"{"receipt":1}"#.into(),
    }
}

struct Fx {
    dir: TempDir,
    store: ApprovalStore,
    key: ApproverKey,
}

impl Fx {
    fn new() -> Fx {
        let dir = tempfile::tempdir().unwrap();
        let store = ApprovalStore::open(&dir.path().join("state")).unwrap();
        let key = ApproverKey::load_or_create(&dir.path().join("keys/alice.key")).unwrap();
        store.trust(&key.public_bytes()).unwrap();
        Fx { dir, store, key }
    }

    fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    fn key(&self, name: &str, trusted: bool) -> ApproverKey {
        let key = ApproverKey::load_or_create(&self.dir.path().join(format!("keys/{name}.key"))).unwrap();
        if trusted {
            self.store.trust(&key.public_bytes()).unwrap();
        }
        key
    }

    /// A separate connection, as an attacker with write access would use.
    fn raw(&self) -> Connection {
        let conn = Connection::open(self.state_dir().join(DB_FILE_NAME)).unwrap();
        conn.busy_timeout(Duration::from_secs(30)).unwrap();
        conn
    }

    fn reopen(&mut self) {
        self.store = ApprovalStore::open(&self.state_dir()).unwrap();
    }

    fn hold_approved(&self, req: HoldRequest) -> HeldAction {
        let held = self.store.hold(req).unwrap();
        self.store.approve(&held.id, &self.key, T0).unwrap()
    }

    fn current(&self, a: &HeldAction) -> Current {
        Current {
            session: a.session.clone(),
            intent: a.intent.clone(),
            bindings: a.bindings.clone(),
            session_proposals: self.store.session_proposals(&a.session).unwrap(),
            writable_run_in_progress: None,
        }
    }

    fn resume(&self, a: &HeldAction) -> Result<Resume, ApprovalError> {
        self.store.begin_resume(&a.id, &self.current(a), T0 + 1)
    }

    fn raw_state(&self, id: &str) -> String {
        self.raw()
            .query_row("SELECT state FROM actions WHERE id = ?1", [id], |r| r.get(0))
            .unwrap()
    }
}

fn run(r: Result<Resume, ApprovalError>) -> ResumeTicket {
    match r {
        Ok(Resume::Run(t)) => t,
        other => panic!("expected Run, got {other:?}"),
    }
}

fn refused(r: Result<Resume, ApprovalError>) -> ApprovalError {
    match r {
        Err(e) => e,
        Ok(other) => panic!("expected a refusal, got {other:?}"),
    }
}

fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Copies every evidence row of `from` onto action `to`, as new rows.
fn copy_evidence(raw: &Connection, from: &str, to: &str) {
    let n = raw
        .execute(
            "INSERT INTO evidence (action, approver_key_id, nonce, payload_json, signature, \
             created_unix_ms, superseded) SELECT ?2, approver_key_id, nonce, payload_json, \
             signature, created_unix_ms, 0 FROM evidence WHERE action = ?1",
            params![from, to],
        )
        .unwrap();
    assert!(n > 0);
}

// ---------------------------------------------------------------------------

#[test]
fn hold_pending_get_stdin_round_trip() {
    let fx = Fx::new();
    let a = fx.store.hold(request(None)).unwrap();
    assert!(a.id.starts_with("apr_") && is_hex(&a.id[4..], 16), "{}", a.id);
    assert!(
        a.session.starts_with("ses_") && is_hex(&a.session[4..], 8),
        "{}",
        a.session
    );
    assert_eq!(a.position, 1);
    assert_eq!(a.state, ActionState::Pending);
    assert!(a.approvals.is_empty());
    assert_eq!(a.summary, "rule `ask: rm -rf`");

    let mut req = request(Some(&a.session));
    req.intent = intent(&["cat"], b"\x00\xffbinary");
    req.stdin = b"\x00\xffbinary".to_vec();
    req.required_approvals = 2;
    let b = fx.store.hold(req.clone()).unwrap();
    assert_eq!(b.session, a.session);
    assert_eq!(b.position, 2, "hold counts as a proposal");
    assert_eq!(fx.store.record_proposal(&a.session).unwrap(), 3);

    let pending = fx.store.pending().unwrap();
    assert_eq!(
        pending.iter().map(|h| h.id.as_str()).collect::<Vec<_>>(),
        vec![a.id.as_str(), b.id.as_str()]
    );
    let got = fx.store.get(&b.id).unwrap();
    assert_eq!(got, b);
    assert_eq!(got.intent, req.intent);
    assert_eq!(got.bindings, req.bindings);
    assert_eq!(got.policy_json, req.policy_json);
    assert_eq!(got.required_approvals, 2);
    assert_eq!(fx.store.stdin(&b.id).unwrap(), b"\x00\xffbinary");
    assert_eq!(fx.store.stdin(&a.id).unwrap(), b"yes\n");

    let err = fx.store.get("apr_0000000000000000").unwrap_err();
    assert!(matches!(err, ApprovalError::NotFound { .. }));
    assert!(err.to_string().contains("apr_0000000000000000"), "{err}");
    assert!(matches!(
        fx.store.stdin("apr_nope"),
        Err(ApprovalError::NotFound { .. })
    ));

    // Survives a reopen, and the serialized form is usable by a CLI.
    let mut fx = fx;
    fx.reopen();
    assert_eq!(fx.store.get(&b.id).unwrap(), b);
    let json = serde_json::to_value(&b).unwrap();
    assert_eq!(json["state"], "pending");
    assert_eq!(json["required_approvals"], 2);
}

#[test]
fn stdin_is_bounded_and_must_match_its_digest() {
    let fx = Fx::new();
    let mut req = request(None);
    req.stdin = vec![b'x'; MAX_STDIN_BYTES];
    req.intent.stdin_digest = sha256_hex(&req.stdin);
    let held = fx.store.hold(req.clone()).unwrap();
    assert_eq!(fx.store.stdin(&held.id).unwrap().len(), MAX_STDIN_BYTES);

    req.stdin.push(b'x');
    req.intent.stdin_digest = sha256_hex(&req.stdin);
    let err = fx.store.hold(req).unwrap_err();
    assert!(
        matches!(err, ApprovalError::StdinTooLarge { size, max } if size == MAX_STDIN_BYTES + 1 && max == MAX_STDIN_BYTES),
        "{err:?}"
    );

    let mut req = request(None);
    req.stdin = b"something else".to_vec();
    let err = fx.store.hold(req).unwrap_err();
    assert!(matches!(err, ApprovalError::InvalidRequest(_)), "{err:?}");
    assert!(err.to_string().contains("stdin_digest"), "{err}");

    let mut req = request(None);
    req.intent.script = Some("echo hi".into());
    assert!(matches!(fx.store.hold(req), Err(ApprovalError::InvalidRequest(_))));
    let mut req = request(None);
    req.required_approvals = 0;
    assert!(matches!(fx.store.hold(req), Err(ApprovalError::InvalidRequest(_))));
    assert_eq!(fx.store.pending().unwrap().len(), 1);
}

#[test]
fn approve_run_finish_then_already_ran() {
    let mut fx = Fx::new();
    let held = fx.store.hold(request(None)).unwrap();
    assert!(matches!(fx.resume(&held), Ok(Resume::Pending { have: 0, need: 1 })));
    let approved = fx.store.approve(&held.id, &fx.key, T0).unwrap();
    assert_eq!(approved.state, ActionState::Approved);
    assert_eq!(approved.approvals.len(), 1);
    assert_eq!(approved.approvals[0].approver_key_id, fx.key.key_id());
    assert_eq!(approved.approvals[0].expires_at_unix_ms, Some(T0 + TTL_SECONDS * 1000));
    assert!(fx.store.pending().unwrap().is_empty());

    let ticket = run(fx.resume(&approved));
    assert_eq!(ticket.action_id(), held.id);
    assert_eq!(ticket.stdin(), b"yes\n");
    assert_eq!(ticket.action().intent, held.intent);
    assert_eq!(fx.store.get(&held.id).unwrap().state, ActionState::Running);
    assert!(fx.store.get(&held.id).unwrap().approvals[0].consumed);

    fx.store.finish(ticket, &result(3)).unwrap();
    assert_eq!(fx.store.get(&held.id).unwrap().state, ActionState::Done);
    match fx.resume(&held) {
        Ok(Resume::AlreadyRan(r)) => assert_eq!(r, result(3)),
        other => panic!("expected AlreadyRan, got {other:?}"),
    }
    fx.reopen();
    match fx.resume(&held) {
        Ok(Resume::AlreadyRan(r)) => assert_eq!(r, result(3)),
        other => panic!("expected AlreadyRan after reopen, got {other:?}"),
    }
    let err = fx.store.approve(&held.id, &fx.key, T0 + 5).unwrap_err();
    assert!(matches!(err, ApprovalError::WrongState { .. }), "{err:?}");
}

/// A resume's start, once made durable, is on disk through the WAL: it
/// syncs, and marks the WAL's name as synced (`state::make_wal_name_durable`).
#[test]
fn a_started_resume_can_be_made_durable() {
    let fx = Fx::new();
    let held = fx.hold_approved(request(None));
    let _ticket = run(fx.resume(&held));
    let db = fx.state_dir().join(DB_FILE_NAME);
    let marker = fx.state_dir().join(format!("{DB_FILE_NAME}-wal.synced"));
    let _ = std::fs::remove_file(&marker);
    fx.store.make_commits_durable().unwrap();
    let wal = std::fs::metadata(format!("{}-wal", db.display())).unwrap();
    let synced = std::fs::metadata(&marker).unwrap();
    assert_eq!((wal.dev(), wal.ino()), (synced.dev(), synced.ino()));
    assert_eq!(fx.raw_state(&held.id), "running");
}

/// Through a linked database file, the sync finds the WAL SQLite keeps
/// beside the file itself.
#[test]
fn a_linked_store_is_made_durable_at_its_own_wal() {
    let dir = tempfile::tempdir().unwrap();
    let (real, state) = (dir.path().join("real"), dir.path().join("state"));
    std::fs::create_dir_all(&real).unwrap();
    std::fs::create_dir_all(&state).unwrap();
    drop(ApprovalStore::open(&real).unwrap());
    std::os::unix::fs::symlink(real.join(DB_FILE_NAME), state.join(DB_FILE_NAME)).unwrap();
    let store = ApprovalStore::open(&state).unwrap();
    store.hold(request(None)).unwrap();
    store.make_commits_durable().unwrap();
    assert!(real.join(format!("{DB_FILE_NAME}-wal.synced")).exists());
    assert!(!state.join(format!("{DB_FILE_NAME}-wal")).exists());
}

#[test]
fn reject_is_final() {
    let fx = Fx::new();
    let held = fx.hold_approved(request(None));
    let rejected = fx.store.reject(&held.id, "deletes the release build", &fx.key).unwrap();
    assert_eq!(rejected.state, ActionState::Rejected);
    assert_eq!(rejected.rejected_by.as_deref(), Some(fx.key.key_id().as_str()));
    match fx.resume(&held) {
        Ok(Resume::Rejected(reason)) => assert_eq!(reason, "deletes the release build"),
        other => panic!("expected Rejected, got {other:?}"),
    }
    assert!(matches!(
        fx.store.approve(&held.id, &fx.key, T0 + 10),
        Err(ApprovalError::WrongState { .. })
    ));
    let stranger = ApproverKey::generate().unwrap();
    let held2 = fx.store.hold(request(None)).unwrap();
    assert!(matches!(
        fx.store.reject(&held2.id, "no", &stranger),
        Err(ApprovalError::UntrustedApprover { .. })
    ));
}

#[test]
fn tampered_signature_payload_or_domain_fails_closed() {
    let fx = Fx::new();
    let raw = fx.raw();

    // One flipped signature byte.
    let a = fx.hold_approved(request(None));
    let sig: Vec<u8> = raw
        .query_row("SELECT signature FROM evidence WHERE action = ?1", [&a.id], |r| {
            r.get(0)
        })
        .unwrap();
    let mut bad = sig.clone();
    bad[10] ^= 0x01;
    raw.execute(
        "UPDATE evidence SET signature = ?2 WHERE action = ?1",
        params![a.id, bad],
    )
    .unwrap();
    let err = refused(fx.resume(&a));
    assert!(matches!(err, ApprovalError::BadSignature { .. }), "{err:?}");
    assert!(err.to_string().contains(&fx.key.key_id()), "{err}");
    assert_eq!(fx.raw_state(&a.id), "approved", "a refusal changes nothing");
    raw.execute(
        "UPDATE evidence SET signature = ?2 WHERE action = ?1",
        params![a.id, sig],
    )
    .unwrap();

    // A widened expiry in the payload text.
    let payload: String = raw
        .query_row("SELECT payload_json FROM evidence WHERE action = ?1", [&a.id], |r| {
            r.get(0)
        })
        .unwrap();
    let mut p: EvidencePayload = serde_json::from_str(&payload).unwrap();
    p.expires_at_unix_ms += 1_000_000;
    raw.execute(
        "UPDATE evidence SET payload_json = ?2 WHERE action = ?1",
        params![a.id, p.to_canonical_json()],
    )
    .unwrap();
    let err = refused(fx.resume(&a));
    assert!(matches!(err, ApprovalError::BadSignature { .. }), "{err:?}");

    // A trusted key's signature over the bare payload (no domain prefix).
    use ed25519_dalek::Signer;
    let secret: Vec<u8> = std::fs::read(fx.dir.path().join("keys/alice.key")).unwrap();
    let signing = ed25519_dalek::SigningKey::from_bytes(&secret.try_into().unwrap());
    let bare = signing.sign(payload.as_bytes()).to_bytes();
    raw.execute(
        "UPDATE evidence SET payload_json = ?2, signature = ?3 WHERE action = ?1",
        params![a.id, payload, bare.as_slice()],
    )
    .unwrap();
    let err = refused(fx.resume(&a));
    assert!(matches!(err, ApprovalError::BadSignature { .. }), "{err:?}");

    // Restored evidence works again: nothing was consumed by the refusals.
    raw.execute(
        "UPDATE evidence SET signature = ?2 WHERE action = ?1",
        params![a.id, sig],
    )
    .unwrap();
    let _ticket = run(fx.resume(&a));
}

#[test]
fn evidence_from_an_untrusted_key_is_refused() {
    let fx = Fx::new();
    let raw = fx.raw();
    let mallory = fx.key("mallory", false);

    // The API refuses an untrusted approver outright.
    let a = fx.store.hold(request(None)).unwrap();
    let err = fx.store.approve(&a.id, &mallory, T0).unwrap_err();
    assert!(matches!(err, ApprovalError::UntrustedApprover { ref key_id } if *key_id == mallory.key_id()));

    // Evidence that Mallory signs herself and inserts raw.
    let template = fx.hold_approved(request(None));
    let payload: String = raw
        .query_row(
            "SELECT payload_json FROM evidence WHERE action = ?1",
            [&template.id],
            |r| r.get(0),
        )
        .unwrap();
    let mut p: EvidencePayload = serde_json::from_str(&payload).unwrap();
    p.action_id = a.id.clone();
    p.session = a.session.clone();
    p.idempotency_key = a.idempotency_key.clone();
    p.position = a.position;
    p.approver_key_id = mallory.key_id();
    p.nonce = "00112233445566778899aabbccddeeff".into();
    let json = p.to_canonical_json();
    let sig = mallory.sign_payload(&json);
    raw.execute(
        "INSERT INTO evidence (action, approver_key_id, nonce, payload_json, signature, \
         created_unix_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![a.id, mallory.key_id(), p.nonce, json, sig.as_slice(), T0 as i64],
    )
    .unwrap();
    let err = refused(fx.resume(&a));
    assert!(
        matches!(err, ApprovalError::UnknownApprover { ref key_id, .. } if *key_id == mallory.key_id()),
        "{err:?}"
    );
    assert!(err.to_string().contains(&mallory.key_id()), "{err}");

    // Relabelling it as Alice's makes the signature check fail instead.
    raw.execute(
        "UPDATE evidence SET approver_key_id = ?2 WHERE action = ?1",
        params![a.id, fx.key.key_id()],
    )
    .unwrap();
    let err = refused(fx.resume(&a));
    assert!(matches!(err, ApprovalError::BadSignature { .. }), "{err:?}");
}

#[test]
fn evidence_replayed_across_actions_and_sessions_fails_closed() {
    let fx = Fx::new();
    let raw = fx.raw();

    // Across action: same session, same command, evidence copied from A to B.
    let a = fx.hold_approved(request(Some("ses_agent1")));
    let b = fx.store.hold(request(Some("ses_agent1"))).unwrap();
    copy_evidence(&raw, &a.id, &b.id);
    let err = refused(fx.resume(&b));
    let msg = err.to_string();
    assert!(matches!(err, ApprovalError::EvidenceMismatch { .. }), "{err:?}");
    assert!(msg.contains("action id"), "{msg}");
    assert!(msg.contains("idempotency key"), "{msg}");
    assert!(!msg.contains("session ("), "{msg}");

    // Across session: same command in another agent session.
    let c = fx.store.hold(request(Some("ses_agent2"))).unwrap();
    copy_evidence(&raw, &a.id, &c.id);
    let msg = refused(fx.resume(&c)).to_string();
    assert!(msg.contains("session (signed ses_agent1, stored ses_agent2)"), "{msg}");
    assert!(msg.contains("action id"), "{msg}");

    // Only the session: the approved action moved into the attacker's session
    // (where the proposal count is low).
    let d = fx.hold_approved(request(Some("ses_agent1")));
    raw.execute(
        "INSERT INTO sessions (id, proposals, created_unix_ms) VALUES ('ses_evil', 0, 0)",
        [],
    )
    .unwrap();
    raw.execute("UPDATE actions SET session = 'ses_evil' WHERE id = ?1", [&d.id])
        .unwrap();
    let moved = fx.store.get(&d.id).unwrap();
    let err = refused(fx.resume(&moved));
    let msg = err.to_string();
    assert!(matches!(err, ApprovalError::EvidenceMismatch { .. }), "{err:?}");
    assert!(msg.contains("session (signed ses_agent1, stored ses_evil)"), "{msg}");
    assert!(!msg.contains("action id"), "{msg}");

    // Only the idempotency key: the row re-created under the same id.
    let e = fx.hold_approved(request(None));
    raw.execute(
        "UPDATE actions SET idempotency_key = 'idk_00000000000000000000000000000000' \
         WHERE id = ?1",
        [&e.id],
    )
    .unwrap();
    let recreated = fx.store.get(&e.id).unwrap();
    let msg = refused(fx.resume(&recreated)).to_string();
    assert!(msg.contains("idempotency key"), "{msg}");
    assert!(!msg.contains("action id") && !msg.contains("policy"), "{msg}");
}

#[test]
fn evidence_replayed_across_policy_fails_closed() {
    let fx = Fx::new();
    let raw = fx.raw();
    // The same command held twice, the second time under a looser policy.
    let strict = fx.hold_approved(request(Some("ses_p")));
    let mut loose_req = request(Some("ses_p"));
    loose_req.bindings.policy_digest = sha256_hex(b"policy v2 (looser)");
    loose_req.policy_json = r#"{"rule":"allow","match":"*"}"#.into();
    let loose = fx.store.hold(loose_req).unwrap();
    copy_evidence(&raw, &strict.id, &loose.id);
    let msg = refused(fx.resume(&loose)).to_string();
    assert!(msg.contains("policy digest"), "{msg}");

    // Only the stored policy swapped under an approved action.
    let f = fx.hold_approved(request(None));
    raw.execute(
        "UPDATE actions SET policy_digest = ?2, policy_json = '{}' WHERE id = ?1",
        params![f.id, sha256_hex(b"policy v2 (looser)")],
    )
    .unwrap();
    let swapped = fx.store.get(&f.id).unwrap();
    let err = refused(fx.resume(&swapped));
    let msg = err.to_string();
    assert!(matches!(err, ApprovalError::EvidenceMismatch { .. }), "{err:?}");
    assert!(msg.contains("policy digest"), "{msg}");
    assert!(!msg.contains("action id"), "{msg}");

    // The stored intent rewritten under an approved action.
    let g = fx.hold_approved(request(None));
    let evil = intent(&["rm", "-rf", "/"], b"yes\n");
    raw.execute(
        "UPDATE actions SET intent_json = ?2 WHERE id = ?1",
        params![g.id, serde_json::to_string(&evil).unwrap()],
    )
    .unwrap();
    let rewritten = fx.store.get(&g.id).unwrap();
    let msg = refused(fx.resume(&rewritten)).to_string();
    assert!(msg.contains("intent digest"), "{msg}");
}

#[test]
fn changed_intent_is_refused_naming_the_part() {
    let fx = Fx::new();
    let held = fx.hold_approved(request(None));
    let parts = ["argv", "stdin", "cwd", "env"];
    for part in parts {
        let mut cur = fx.current(&held);
        match part {
            "argv" => cur.intent.argv = Some(vec!["rm".into(), "-rf".into(), "/".into()]),
            "stdin" => cur.intent.stdin_digest = sha256_hex(b"no\n"),
            "cwd" => cur.intent.cwd = "/".into(),
            "env" => cur.intent.env_digest = sha256_hex(b"LD_PRELOAD=/tmp/x.so"),
            _ => unreachable!(),
        }
        let err = refused(fx.store.begin_resume(&held.id, &cur, T0 + 1));
        let msg = err.to_string();
        assert!(matches!(err, ApprovalError::Changed { .. }), "{err:?}");
        for other in parts {
            assert_eq!(
                msg.contains(&format!("{other} changed")),
                other == part,
                "changing {part}: {msg}"
            );
        }
    }
    let mut cur = fx.current(&held);
    cur.intent.argv = None;
    cur.intent.script = Some("rm -rf build".into());
    let msg = refused(fx.store.begin_resume(&held.id, &cur, T0 + 1)).to_string();
    assert!(msg.contains("argv changed") && msg.contains("script changed"), "{msg}");

    // None of the refusals consumed anything.
    assert_eq!(fx.raw_state(&held.id), "approved");
    let _ticket = run(fx.resume(&held));
}

#[test]
fn changed_bindings_are_refused_naming_the_binding() {
    let fx = Fx::new();
    let held = fx.hold_approved(request(None));
    type Case = (&'static str, fn(&mut Current));
    let cases: [Case; 6] = [
        ("a writable run is in progress", |c| {
            c.writable_run_in_progress = Some("a writable run is in progress in the workspace".into())
        }),
        ("workspace fingerprint changed", |c| {
            c.bindings.workspace_fingerprint = sha256_hex(b"tree 2")
        }),
        ("environment instance id changed", |c| {
            c.bindings.env_instance_id = "env-instance-2".into()
        }),
        ("workspace generation changed", |c| c.bindings.workspace_generation = 8),
        ("policy digest changed", |c| {
            c.bindings.policy_digest = sha256_hex(b"policy v2")
        }),
        ("session changed", |c| c.session = "ses_other".into()),
    ];
    for (expected, change) in cases {
        let mut cur = fx.current(&held);
        change(&mut cur);
        let err = refused(fx.store.begin_resume(&held.id, &cur, T0 + 1));
        let msg = err.to_string();
        if expected == "a writable run is in progress" {
            assert!(matches!(err, ApprovalError::RunInProgress { .. }), "{err:?}");
        } else {
            assert!(matches!(err, ApprovalError::Changed { .. }), "{err:?}");
        }
        assert!(msg.contains(expected), "{msg}");
        for (other, _) in cases {
            if other != expected {
                assert!(!msg.contains(other), "{expected}: {msg}");
            }
        }
    }
    assert_eq!(fx.raw_state(&held.id), "approved");
    let _ticket = run(fx.resume(&held));
}

/// A changed workspace and a run in progress (which may be what changed it)
/// are both named.
#[test]
fn a_change_made_while_a_run_is_in_progress_names_both() {
    let fx = Fx::new();
    let held = fx.hold_approved(request(None));
    let mut cur = fx.current(&held);
    cur.bindings.workspace_fingerprint = sha256_hex(b"tree 2");
    cur.writable_run_in_progress = Some("a writable run is in progress in the workspace".into());
    let err = refused(fx.store.begin_resume(&held.id, &cur, T0 + 1));
    assert!(matches!(err, ApprovalError::Changed { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("workspace fingerprint changed") && msg.contains("a writable run is in progress"),
        "{msg}"
    );
}

#[test]
fn wall_clock_expiry_is_exclusive() {
    let fx = Fx::new();
    let expires = T0 + TTL_SECONDS * 1000;

    let at_instant = fx.hold_approved(request(None));
    let cur = fx.current(&at_instant);
    let err = refused(fx.store.begin_resume(&at_instant.id, &cur, expires));
    assert!(matches!(err, ApprovalError::Expired { .. }), "{err:?}");
    assert!(err.to_string().contains("(unix time "), "{err}");
    assert_eq!(fx.store.get(&at_instant.id).unwrap().state, ActionState::Frozen);
    assert!(fx.store.pending().unwrap().iter().any(|h| h.id == at_instant.id));
    let err = refused(fx.store.begin_resume(&at_instant.id, &cur, expires + 1));
    assert!(matches!(err, ApprovalError::Expired { .. }), "{err:?}");

    let just_before = fx.hold_approved(request(None));
    let cur = fx.current(&just_before);
    let _ticket = run(fx.store.begin_resume(&just_before.id, &cur, expires - 1));
}

#[test]
fn proposal_expiry_includes_the_last_proposal() {
    let fx = Fx::new();
    let mut req = request(Some("ses_prop_ok"));
    req.proposal_window = 2;
    let held = fx.store.hold(req).unwrap(); // proposal 1
    let approved = fx.store.approve(&held.id, &fx.key, T0).unwrap();
    assert_eq!(approved.approvals[0].expires_at_proposal, Some(3));
    assert_eq!(fx.store.record_proposal("ses_prop_ok").unwrap(), 2);
    assert_eq!(fx.store.record_proposal("ses_prop_ok").unwrap(), 3);
    let _ticket = run(fx.resume(&held)); // 3 == expires_at_proposal: still valid

    let mut req = request(Some("ses_prop_late"));
    req.proposal_window = 2;
    let late = fx.store.hold(req).unwrap();
    fx.store.approve(&late.id, &fx.key, T0).unwrap();
    for _ in 0..3 {
        fx.store.record_proposal("ses_prop_late").unwrap();
    }
    let cur = fx.current(&late);
    assert_eq!(cur.session_proposals, 4);
    let err = refused(fx.store.begin_resume(&late.id, &cur, T0 + 1));
    assert!(matches!(err, ApprovalError::Expired { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("valid through proposal 3") && msg.contains("at proposal 4"),
        "{msg}"
    );
    assert_eq!(fx.store.get(&late.id).unwrap().state, ActionState::Frozen);
}

#[test]
fn consumed_nonce_never_works_again_even_after_restart() {
    let mut fx = Fx::new();
    let held = fx.hold_approved(request(None));
    let ticket = run(fx.resume(&held));
    fx.store.finish(ticket, &result(0)).unwrap();

    // The attacker rewinds the action and erases its result.
    let raw = fx.raw();
    raw.execute("UPDATE actions SET state = 'approved' WHERE id = ?1", [&held.id])
        .unwrap();
    raw.execute("DELETE FROM results WHERE action = ?1", [&held.id])
        .unwrap();
    let err = refused(fx.resume(&held));
    assert!(matches!(err, ApprovalError::NonceReplayed { .. }), "{err:?}");
    assert!(err.to_string().contains("already consumed"), "{err}");
    assert_eq!(fx.raw_state(&held.id), "approved", "rolled back, not running");

    // Process restart.
    fx.reopen();
    let err = refused(fx.resume(&held));
    assert!(matches!(err, ApprovalError::NonceReplayed { .. }), "{err:?}");

    // The consumed evidence re-inserted as a brand-new row.
    raw.execute("UPDATE evidence SET superseded = 1 WHERE action = ?1", [&held.id])
        .unwrap();
    raw.execute(
        "INSERT INTO evidence (action, approver_key_id, nonce, payload_json, signature, \
         created_unix_ms, superseded) SELECT action, approver_key_id, \
         'fresh-looking-nonce-column', payload_json, signature, ?2, 0 \
         FROM evidence WHERE action = ?1",
        params![held.id, (T0 + 5_000) as i64],
    )
    .unwrap();
    fx.reopen();
    let err = refused(fx.resume(&held));
    assert!(matches!(err, ApprovalError::NonceReplayed { .. }), "{err:?}");

    // The ledger holds exactly the one spent nonce; nothing new was consumed.
    let nonces: i64 = raw.query_row("SELECT COUNT(*) FROM nonces", [], |r| r.get(0)).unwrap();
    assert_eq!(nonces, 1);
}

/// Helper run in a child process by `running_action_of_a_dead_launcher_is_interrupted`:
/// starts the run and exits without finishing, like a launcher that was killed.
#[test]
fn child_resume_then_exit() {
    let (Some(state), Some(id)) = (std::env::var_os(CHILD_STATE_ENV), std::env::var(CHILD_ACTION_ENV).ok()) else {
        return; // Only does something when spawned by the parent test.
    };
    let store = ApprovalStore::open(Path::new(&state)).unwrap();
    let held = store.get(&id).unwrap();
    let cur = Current {
        session: held.session.clone(),
        intent: held.intent.clone(),
        bindings: held.bindings.clone(),
        session_proposals: store.session_proposals(&held.session).unwrap(),
        writable_run_in_progress: None,
    };
    match store.begin_resume(&id, &cur, T0 + 1) {
        Ok(Resume::Run(_ticket)) => std::process::exit(0),
        other => {
            eprintln!("child expected Run, got {other:?}");
            std::process::exit(3)
        }
    }
}

#[test]
fn running_action_of_a_dead_launcher_is_interrupted() {
    let fx = Fx::new();
    let held = fx.hold_approved(request(None));
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_resume_then_exit", "--test-threads=1"])
        .env(CHILD_STATE_ENV, fx.state_dir())
        .env(CHILD_ACTION_ENV, &held.id)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "child failed: {status}");
    assert_eq!(fx.raw_state(&held.id), "running");

    let err = refused(fx.resume(&held));
    assert!(matches!(err, ApprovalError::Interrupted { .. }), "{err:?}");
    assert!(err.to_string().contains("fresh approval"), "{err}");
    let now = fx.store.get(&held.id).unwrap();
    assert_eq!(now.state, ActionState::Interrupted);
    assert!(now.approvals.iter().all(|e| e.superseded && e.consumed));
    assert!(fx.store.pending().unwrap().iter().any(|h| h.id == held.id));

    // Still interrupted on the next try; nothing ran.
    assert!(matches!(refused(fx.resume(&held)), ApprovalError::Interrupted { .. }));

    // The attacker un-voids the old evidence: it predates the interruption.
    let raw = fx.raw();
    raw.execute("UPDATE evidence SET superseded = 0 WHERE action = ?1", [&held.id])
        .unwrap();
    let err = refused(fx.resume(&held));
    assert!(matches!(err, ApprovalError::Interrupted { .. }), "{err:?}");
    raw.execute("UPDATE evidence SET superseded = 1 WHERE action = ?1", [&held.id])
        .unwrap();

    // The attacker revives the old evidence as a new row: its nonce is spent.
    raw.execute(
        "INSERT INTO evidence (action, approver_key_id, nonce, payload_json, signature, \
         created_unix_ms, superseded) SELECT action, approver_key_id, nonce, payload_json, \
         signature, created_unix_ms, 0 FROM evidence WHERE action = ?1",
        [&held.id],
    )
    .unwrap();
    let err = refused(fx.resume(&held));
    assert!(matches!(err, ApprovalError::NonceReplayed { .. }), "{err:?}");
    raw.execute("UPDATE evidence SET superseded = 1 WHERE action = ?1", [&held.id])
        .unwrap();

    // A fresh approval lets it run again (once).
    let fresh = fx.store.approve(&held.id, &fx.key, T0 + 10).unwrap();
    assert_eq!(fresh.state, ActionState::Approved);
    let ticket = run(fx.resume(&held));
    fx.store.finish(ticket, &result(0)).unwrap();
    assert!(matches!(fx.resume(&held), Ok(Resume::AlreadyRan(_))));
}

#[test]
fn a_live_run_is_not_declared_interrupted() {
    let fx = Fx::new();
    let held = fx.hold_approved(request(None));
    let ticket = run(fx.resume(&held));
    let err = refused(fx.resume(&held));
    assert!(
        matches!(err, ApprovalError::AlreadyRunning { pid, .. } if pid == i64::from(std::process::id())),
        "{err:?}"
    );
    fx.store.finish(ticket, &result(1)).unwrap();
    assert!(matches!(fx.resume(&held), Ok(Resume::AlreadyRan(r)) if r.exit_code == Some(1)));
}

#[test]
fn fresh_approval_replaces_expired_evidence_which_stays_on_record() {
    let fx = Fx::new();
    let held = fx.hold_approved(request(None));
    let expires = T0 + TTL_SECONDS * 1000;
    let cur = fx.current(&held);

    // While the first approval is live, the same key cannot approve again.
    let err = fx.store.approve(&held.id, &fx.key, T0 + 1).unwrap_err();
    assert!(matches!(err, ApprovalError::AlreadyApprovedBy { .. }), "{err:?}");

    let err = refused(fx.store.begin_resume(&held.id, &cur, expires));
    assert!(matches!(err, ApprovalError::Expired { .. }), "{err:?}");
    assert_eq!(fx.store.get(&held.id).unwrap().state, ActionState::Frozen);

    let renewed = fx.store.approve(&held.id, &fx.key, expires + 1_000).unwrap();
    assert_eq!(renewed.state, ActionState::Approved);
    assert_eq!(renewed.approvals.len(), 2);
    assert!(renewed.approvals[0].superseded);
    assert!(!renewed.approvals[1].superseded);
    let rows: i64 = fx
        .raw()
        .query_row("SELECT COUNT(*) FROM evidence WHERE action = ?1", [&held.id], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(rows, 2, "old evidence is never deleted");
    let _ticket = run(fx.store.begin_resume(&held.id, &cur, expires + 2_000));
}

#[test]
fn two_approvals_need_two_distinct_keys() {
    let fx = Fx::new();
    let bob = fx.key("bob", true);
    let mut req = request(None);
    req.required_approvals = 2;
    let held = fx.store.hold(req).unwrap();

    let one = fx.store.approve(&held.id, &fx.key, T0).unwrap();
    assert_eq!(one.state, ActionState::Pending);
    assert!(matches!(fx.resume(&held), Ok(Resume::Pending { have: 1, need: 2 })));
    let err = fx.store.approve(&held.id, &fx.key, T0 + 1).unwrap_err();
    assert!(matches!(err, ApprovalError::AlreadyApprovedBy { .. }), "{err:?}");
    assert!(err.to_string().contains(&fx.key.key_id()), "{err}");

    // A raw duplicate of Alice's evidence still counts as one approver.
    let raw = fx.raw();
    copy_evidence(&raw, &held.id, &held.id);
    assert!(matches!(fx.resume(&held), Ok(Resume::Pending { have: 1, need: 2 })));
    raw.execute("DELETE FROM evidence WHERE id = (SELECT MAX(id) FROM evidence)", [])
        .unwrap();

    let two = fx.store.approve(&held.id, &bob, T0 + 2).unwrap();
    assert_eq!(two.state, ActionState::Approved);
    let ticket = run(fx.resume(&held));
    assert_eq!(ticket.action().approvals.len(), 2);
    assert!(ticket.action().approvals.iter().all(|e| e.consumed));
}

#[test]
fn fifty_concurrent_resumes_yield_exactly_one_run() {
    let fx = Fx::new();
    let held = fx.hold_approved(request(None));
    let cur = fx.current(&held);
    let state_dir = fx.state_dir();
    let barrier = Arc::new(Barrier::new(50));
    let handles: Vec<_> = (0..50)
        .map(|_| {
            let (barrier, state_dir, cur, id) = (barrier.clone(), state_dir.clone(), cur.clone(), held.id.clone());
            std::thread::spawn(move || {
                let store = ApprovalStore::open(&state_dir).unwrap();
                barrier.wait();
                let outcome = store.begin_resume(&id, &cur, T0 + 1);
                (store, outcome)
            })
        })
        .collect();
    let mut runs = Vec::new();
    let mut already_running = 0;
    for h in handles {
        match h.join().unwrap() {
            (store, Ok(Resume::Run(t))) => runs.push((store, t)),
            (_, Err(ApprovalError::AlreadyRunning { .. })) => already_running += 1,
            (_, other) => panic!("unexpected outcome {other:?}"),
        }
    }
    assert_eq!(runs.len(), 1);
    assert_eq!(already_running, 49);
    let (store, ticket) = runs.pop().unwrap();
    store.finish(ticket, &result(0)).unwrap();
    assert!(matches!(fx.resume(&held), Ok(Resume::AlreadyRan(_))));
}

#[test]
fn ten_thousand_pending_actions_stay_fast() {
    let fx = Fx::new();
    let started = Instant::now();
    let mut middle = String::new();
    for i in 0..10_000 {
        let held = fx.store.hold(request(Some("ses_bulk"))).unwrap();
        if i == 5_000 {
            middle = held.id;
        }
    }
    let hold_time = started.elapsed();

    let t = Instant::now();
    let pending = fx.store.pending().unwrap();
    let pending_time = t.elapsed();
    assert_eq!(pending.len(), 10_000);

    let t = Instant::now();
    for _ in 0..100 {
        assert_eq!(fx.store.get(&middle).unwrap().id, middle);
    }
    let get_time = t.elapsed() / 100;

    let plan: Vec<String> = {
        let raw = fx.raw();
        let mut stmt = raw
            .prepare(
                "EXPLAIN QUERY PLAN SELECT id FROM actions \
                 WHERE state IN ('pending','frozen','interrupted') ORDER BY created_unix_ms, rowid",
            )
            .unwrap();
        let rows = stmt.query_map([], |r| r.get::<_, String>(3)).unwrap();
        rows.map(Result::unwrap).collect()
    };
    assert!(
        plan.iter().any(|p| p.contains("actions_awaiting")) && !plan.iter().any(|p| p.contains("TEMP B-TREE")),
        "{plan:?}"
    );
    println!(
        "timing: hold x10000 {hold_time:?}; pending() of 10000 {pending_time:?}; get() {get_time:?} per call; plan {plan:?}"
    );
}

#[test]
fn concurrent_first_opens_create_one_schema() {
    for _ in 0..5 {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("fresh/state");
        let barrier = Arc::new(Barrier::new(8));
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let (barrier, state) = (barrier.clone(), state.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    ApprovalStore::open(&state).map(|s| s.record_proposal("ses_x"))
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap().unwrap().unwrap();
        }
        let store = ApprovalStore::open(&state).unwrap();
        assert_eq!(store.session_proposals("ses_x").unwrap(), 8);
        let mode = std::fs::metadata(&state).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
    }
}

#[test]
fn approver_key_file_is_private_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cfg/tether-exec/approver.key");
    let key = ApproverKey::load_or_create(&path).unwrap();
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert_eq!(meta.len(), 32);
    let parent = std::fs::metadata(path.parent().unwrap()).unwrap();
    assert_eq!(parent.permissions().mode() & 0o777, 0o700);
    assert!(is_hex(&key.key_id(), 16));
    assert_eq!(key.key_id(), key_id_for(&key.public_bytes()));
    let again = ApproverKey::load_or_create(&path).unwrap();
    assert_eq!(again.public_bytes(), key.public_bytes());
    assert!(!format!("{key:?}").contains(&format!("{:?}", std::fs::read(&path).unwrap())));

    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
    let err = ApproverKey::load_or_create(&path).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, ApprovalError::KeyPermissions { .. }), "{err:?}");
    assert!(msg.contains(&format!("chmod 600 {}", path.display())), "{msg}");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o604)).unwrap();
    assert!(matches!(
        ApproverKey::load_or_create(&path),
        Err(ApprovalError::KeyPermissions { .. })
    ));
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();

    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        std::os::unix::fs::chown(&path, Some(4242), None).unwrap();
        let err = ApproverKey::load_or_create(&path).unwrap_err();
        assert!(matches!(err, ApprovalError::KeyOwner { owner: 4242, .. }), "{err:?}");
        assert!(err.to_string().contains("4242"), "{err}");
        std::os::unix::fs::chown(&path, Some(0), None).unwrap();
    }

    let short = dir.path().join("short.key");
    std::fs::write(&short, [1u8; 31]).unwrap();
    std::fs::set_permissions(&short, std::fs::Permissions::from_mode(0o600)).unwrap();
    let err = ApproverKey::load_or_create(&short).unwrap_err();
    assert!(err.to_string().contains("31 bytes"), "{err}");

    let link = dir.path().join("link.key");
    std::os::unix::fs::symlink(&path, &link).unwrap();
    let err = ApproverKey::load_or_create(&link).unwrap_err();
    assert!(err.to_string().contains("symbolic link"), "{err}");
}

#[test]
fn default_key_path_uses_env_then_passwd_home() {
    // The only test that touches this variable.
    std::env::set_var(APPROVER_KEY_ENV, "/somewhere/approver.key");
    assert_eq!(
        default_approver_key_path().unwrap(),
        PathBuf::from("/somewhere/approver.key")
    );
    std::env::remove_var(APPROVER_KEY_ENV);
    let path = default_approver_key_path().unwrap();
    assert!(path.ends_with(".config/tether-exec/approver.key"), "{}", path.display());
    assert!(path.is_absolute());
}

#[test]
fn schema_is_versioned_and_newer_schemas_are_refused() {
    let fx = Fx::new();
    let raw = fx.raw();
    let version: i64 = raw.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
    assert_eq!(version, MIGRATIONS.len() as i64);
    let mode: String = raw.query_row("PRAGMA journal_mode", [], |r| r.get(0)).unwrap();
    assert_eq!(mode, "wal");
    let db_mode = std::fs::metadata(fx.state_dir().join(DB_FILE_NAME))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(db_mode & 0o777, 0o600);

    raw.pragma_update(None, "user_version", 99).unwrap();
    let err = ApprovalStore::open(&fx.state_dir()).unwrap_err();
    assert!(matches!(err, ApprovalError::SchemaTooNew { found: 99, .. }), "{err:?}");
    assert!(err.to_string().contains("upgrade tether-exec"), "{err}");
}

#[test]
fn untrusted_public_keys_and_removed_trust() {
    let fx = Fx::new();
    assert!(matches!(
        fx.store.trust(&[0u8; 32]),
        Err(ApprovalError::InvalidPublicKey { .. })
    ));
    let id = fx.store.trust(&fx.key.public_bytes()).unwrap();
    assert_eq!(id, fx.key.key_id(), "trust is idempotent");

    // Evidence from a key whose trust was withdrawn no longer counts.
    let held = fx.hold_approved(request(None));
    fx.raw().execute("DELETE FROM trusted_approvers", []).unwrap();
    let err = refused(fx.resume(&held));
    assert!(matches!(err, ApprovalError::UnknownApprover { .. }), "{err:?}");
}

#[test]
fn the_wal_stays_short_when_every_write_comes_from_a_new_process() {
    let dir = TempDir::new().unwrap();
    let state = dir.path().join("state");
    let wal = state.join("approvals.sqlite-wal");
    let mut largest = 0;
    for i in 1..=300u64 {
        let store = ApprovalStore::open(&state).unwrap();
        assert_eq!(store.record_proposal("sess_wal").unwrap(), i);
        drop(store);
        largest = largest.max(std::fs::metadata(&wal).map_or(0, |m| m.len()));
    }
    assert!(largest > 0, "the WAL is in use");
    assert!(largest < 400 * 1024, "the WAL grew to {largest} bytes");
    let store = ApprovalStore::open(&state).unwrap();
    assert_eq!(store.session_proposals("sess_wal").unwrap(), 300);
}
