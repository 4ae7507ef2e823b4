//! Held actions and signed human approvals.
//!
//! When the policy answers "ask" for a command, the launcher does not run it.
//! It *holds* the action here, a human looks at it and approves (or rejects)
//! it with their own key, and a later `resume` runs it — at most once. This
//! module stores, signs, verifies and enforces that; it never executes
//! anything itself (the caller runs the sandbox between [`ApprovalStore::begin_resume`]
//! and [`ApprovalStore::finish`]), it prints nothing and keeps no global state.
//!
//! # Why approvals are signatures
//!
//! An approval is *evidence created outside the sandbox*: an Ed25519 signature
//! by an approver's private key, which lives in the approver's home directory
//! (`0600`, refused if anyone else can read it). The launcher only holds
//! public keys (`trusted_approvers`), so anything that can read the launcher's
//! state — including a confined agent that should never see it, or an attacker
//! who copied the database — still cannot mint an approval. A shared-secret MAC
//! would put the forging key right next to the verifier; an asymmetric
//! signature does not.
//!
//! # What an approval binds, and why
//!
//! The signed payload ([`EvidencePayload`]) is canonical JSON with a fixed
//! field order, prefixed by the domain string [`EVIDENCE_DOMAIN`] so a
//! signature made for anything else can never be mistaken for an approval. It
//! names the session, action id, random idempotency key and position (so
//! evidence cannot be moved to another action, session or re-created row), the
//! intent digest (normalised argv or script, stdin digest, cwd, env digest — the
//! *exact* command the human saw), the policy digest (a loosened policy
//! invalidates it), the environment instance id, the workspace fingerprint and
//! generation (the workspace the human judged is the one it runs against), two
//! expiries and a one-time nonce:
//!
//! * wall clock: `expires_at_unix_ms = approved_at + ttl_seconds * 1000`; the
//!   expiry instant itself is already invalid (`now >= expires_at` expires);
//! * proposals: `expires_at_proposal = session proposals at approval time +
//!   proposal_window`; the approval is valid up to *and including* that
//!   proposal number, so an agent that keeps proposing other things cannot
//!   cash in an old approval much later.
//!
//! At resume every field is compared with the stored action (a mismatch means
//! the evidence was copied or the row altered: fail closed) and with what the
//! launcher observes *now* ([`Current`]). Every refusal names what differs —
//! for the intent, which part (argv, script, stdin, cwd, env).
//!
//! # Exactly once
//!
//! [`ApprovalStore::begin_resume`] runs inside one `BEGIN IMMEDIATE`
//! transaction, so concurrent resumes from any number of processes serialise
//! on the database write lock: exactly one sees a runnable action, consumes
//! the nonces and marks it `running`; everybody after it sees `running` or
//! `done`. Nonces are consumed by `INSERT` into a table whose primary key is
//! the nonce, and that table is never cleaned (it does not even reference the
//! action row), so a consumed approval fails even after a restart, after the
//! evidence row is re-inserted, or after the action row is re-created.
//!
//! States: `pending` → `approved` (enough valid evidence) → `running` → `done`;
//! `pending`/`approved`/`frozen`/`interrupted` → `rejected`; `approved` whose
//! evidence expired → `frozen` until fresh evidence; `running` found by a later
//! resume whose runner process is gone → `interrupted`. An interrupted action
//! may have partly executed, so it never runs again on the old evidence: its
//! evidence is superseded and only evidence created after the interruption
//! counts. A resume that finds `running` while the recorded runner process
//! (pid + start time + boot id) is still alive is refused with
//! [`ApprovalError::AlreadyRunning`] and changes nothing — without that check a
//! second concurrent resume would declare a healthy run "interrupted".
//!
//! Evidence is never deleted: a fresh approval marks the same key's older
//! evidence `superseded`, and the old row stays as the audit trail.
//!
//! # Storage
//!
//! A session's proposals are counted in two places whose sum is the count:
//! holds in the database, in the hold's own transaction (its position), and
//! every other run as one byte appended to `<state_dir>/proposals/<digest>`
//! ([`record_proposal`]), so that a run with a session opens no database.
//!
//! `<state_dir>/approvals.sqlite` (directory `0700`, file `0600`), WAL mode,
//! a busy timeout so writers queue instead of failing, `synchronous=NORMAL`,
//! and a schema versioned by
//! `PRAGMA user_version` with an append-only [`MIGRATIONS`] list. A partial
//! index over the awaiting states keeps [`ApprovalStore::pending`] proportional
//! to the awaiting actions, not to history; lookups by id use the primary key.
//!
//! Most commits do not wait for an fsync. With `NORMAL` a commit survives the
//! death of the process that made it, killed or crashed, at any point; only
//! the operating system going down (a power cut, a kernel panic) can undo the
//! last commits. That always ends in a new boot, and every approval is bound
//! to the environment instance, which names the boot (`/proc/sys/kernel/
//! random/boot_id`, required): after it no held action can be resumed, with
//! or without the lost commits. A nonce whose consumption was lost belongs to
//! evidence that can never match again; so do proposal counts that went
//! back. An fsync there would buy nothing, at 0.15–0.4 ms each. Two commits are
//! made durable, because durable state outside the store depends on them:
//! trusting a key (trust on first use must not pass to the next key after a
//! crash), fsynced as it commits; and a resume's start
//! ([`ApprovalStore::make_commits_durable`]), before an ordinary resume's
//! command can have effects, and before a preview landing writes a durable
//! journal naming its run (several renames, or a copy across filesystems). A
//! landing of one rename is atomic and writes no durable journal: after a
//! power cut, whatever of it survived is consistent, its action, bound to the
//! old boot, cannot be resumed, and a journal that survived its run's start
//! is given up, not finished.
//! Before a sync the WAL's own name is made durable, once per WAL file
//! (`state::make_wal_name_durable`: the bundled SQLite no longer syncs the
//! directory in every process).
//!
//! # Limits of the threat model
//!
//! Someone with write access to the database can always *deny* service
//! (reject, corrupt, delete), and can add their own key to `trusted_approvers`
//! or delete consumed nonces — the trust list and the nonce ledger are only as
//! strong as the file permissions of the state directory, which therefore must
//! never be writable from inside the sandbox. What such an attacker cannot do
//! with trusted keys they do not hold is forge, move, widen or replay approvals.

use std::collections::BTreeSet;

use std::fmt;
use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{Read, Write};

use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use rusqlite::{params, Connection, OptionalExtension, Transaction, TransactionBehavior};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The largest standard input that can be held with an action.
pub const MAX_STDIN_BYTES: usize = 1 << 20;

/// Prefix of every signed approval message (domain separation).
pub const EVIDENCE_DOMAIN: &str = "tether-exec approval v1\n";

/// Version number inside [`EvidencePayload::version`].
pub const EVIDENCE_VERSION: u32 = 1;

/// Name of the database file inside the state directory.
pub const DB_FILE_NAME: &str = "approvals.sqlite";

/// Environment variable that overrides [`default_approver_key_path`].
pub const APPROVER_KEY_ENV: &str = "TETHER_EXEC_APPROVER_KEY";

const BUSY_TIMEOUT: Duration = Duration::from_secs(30);
const MAX_REQUIRED_APPROVALS: u32 = 64;
const MAX_SESSION_ID_LEN: usize = 128;

/// Schema migrations; entry `i` brings the schema from version `i` to `i + 1`.
/// Never edit a released entry — append a new one.
pub const MIGRATIONS: &[&str] = &[SCHEMA_V1];

const SCHEMA_V1: &str = "
CREATE TABLE sessions (
    id              TEXT PRIMARY KEY NOT NULL,
    proposals       INTEGER NOT NULL DEFAULT 0 CHECK (proposals >= 0),
    created_unix_ms INTEGER NOT NULL
);
CREATE TABLE actions (
    id                    TEXT PRIMARY KEY NOT NULL,
    session               TEXT NOT NULL REFERENCES sessions(id),
    position              INTEGER NOT NULL,
    idempotency_key       TEXT NOT NULL UNIQUE,
    state                 TEXT NOT NULL CHECK (state IN
        ('pending','approved','running','done','rejected','interrupted','frozen')),
    intent_json           TEXT NOT NULL,
    intent_digest         TEXT NOT NULL,
    stdin                 BLOB NOT NULL,
    policy_json           TEXT NOT NULL,
    policy_digest         TEXT NOT NULL,
    env_instance_id       TEXT NOT NULL,
    workspace_fingerprint TEXT NOT NULL,
    workspace_generation  INTEGER NOT NULL,
    required_approvals    INTEGER NOT NULL CHECK (required_approvals >= 1),
    ttl_seconds           INTEGER NOT NULL,
    proposal_window       INTEGER NOT NULL,
    summary               TEXT NOT NULL,
    created_unix_ms       INTEGER NOT NULL,
    updated_unix_ms       INTEGER NOT NULL,
    rejection_reason      TEXT,
    rejected_by           TEXT,
    evidence_floor        INTEGER NOT NULL DEFAULT 0,
    interrupted_unix_ms   INTEGER,
    run_id                TEXT,
    runner_pid            INTEGER,
    runner_start          TEXT,
    runner_boot           TEXT,
    run_started_unix_ms   INTEGER
);
CREATE INDEX actions_awaiting ON actions(created_unix_ms)
    WHERE state IN ('pending','frozen','interrupted');
CREATE INDEX actions_by_session ON actions(session, position);
CREATE TABLE evidence (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    action          TEXT NOT NULL REFERENCES actions(id),
    approver_key_id TEXT NOT NULL,
    nonce           TEXT NOT NULL,
    payload_json    TEXT NOT NULL,
    signature       BLOB NOT NULL,
    created_unix_ms INTEGER NOT NULL,
    superseded      INTEGER NOT NULL DEFAULT 0 CHECK (superseded IN (0, 1))
);
CREATE INDEX evidence_by_action ON evidence(action, id);
CREATE TABLE nonces (
    nonce            TEXT PRIMARY KEY NOT NULL,
    action           TEXT NOT NULL,
    evidence_id      INTEGER NOT NULL,
    consumed_unix_ms INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE results (
    action           TEXT PRIMARY KEY NOT NULL REFERENCES actions(id),
    run_id           TEXT NOT NULL,
    exit_code        INTEGER,
    signal           INTEGER,
    timed_out        INTEGER NOT NULL,
    duration_ms      INTEGER NOT NULL,
    receipt_json     TEXT NOT NULL,
    finished_unix_ms INTEGER NOT NULL
);
CREATE TABLE trusted_approvers (
    key_id        TEXT PRIMARY KEY NOT NULL,
    public_key    BLOB NOT NULL CHECK (length(public_key) = 32),
    added_unix_ms INTEGER NOT NULL
);
";

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

/// Everything that can go wrong while holding, approving or resuming an action.
/// Every message is a complete sentence that tells the operator what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApprovalError {
    #[error("Could not {action} {}: {source}.", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },

    #[error("The approval database failed while {context}: {source}. Check that the state directory is writable and has free space, then retry.")]
    Database {
        context: &'static str,
        source: rusqlite::Error,
    },

    #[error("The approval database {} has schema version {found}, but this tether-exec understands only up to version {supported}; upgrade tether-exec or use another state directory.", path.display())]
    SchemaTooNew { path: PathBuf, found: i64, supported: i64 },

    #[error("The approval database holds a corrupt record: {what}. Nothing was run; inspect or restore {DB_FILE_NAME} before retrying.")]
    Corrupt { what: String },

    #[error("The operating system's random number generator failed ({detail}); no identifiers or keys could be created, so retry once the system has entropy.")]
    Randomness { detail: String },

    #[error("The request is invalid: {0}")]
    InvalidRequest(String),

    #[error("The command's standard input is {size} bytes, more than the {max} bytes that can be held for approval; pass large inputs through a file in the workspace instead.")]
    StdinTooLarge { size: usize, max: usize },

    #[error(
        "No held action with id `{id}` exists in the approval store; check the id against the list of pending actions."
    )]
    NotFound { id: String },

    #[error("Action {id} is {state}, so it can no longer be {verb}.")]
    WrongState {
        id: String,
        state: ActionState,
        verb: &'static str,
    },

    #[error("Approver key {key_id} is not trusted by this approval store; trust it first with `tether-exec approver trust PUBLIC_KEY` (the key's public half: `tether-exec approver show`, run with that key as $TETHER_EXEC_APPROVER_KEY).")]
    UntrustedApprover { key_id: String },

    #[error("A different public key with id {key_id} is already trusted; refusing to trust or use this key. Remove the conflicting entry from trusted_approvers first.")]
    TrustConflict { key_id: String },

    #[error("The public key {key_hex} is not a usable Ed25519 public key, so it cannot be trusted.")]
    InvalidPublicKey { key_hex: String },

    #[error("Action {id} already carries a valid approval from key {key_id}; the same key approving twice counts once, so a different approver must approve it.")]
    AlreadyApprovedBy { id: String, key_id: String },

    #[error("Evidence #{evidence} on action {id} is signed by key {key_id}, which is not a trusted approver; the action was not run. If the key is legitimate, trust it and approve the action again.")]
    UnknownApprover { id: String, evidence: i64, key_id: String },

    #[error("Evidence #{evidence} on action {id} has a signature that does not verify with approver key {key_id}; it was altered or forged, and the action was not run.")]
    BadSignature { id: String, evidence: i64, key_id: String },

    #[error("Evidence #{evidence} on action {id} is malformed ({problem}); the action was not run.")]
    MalformedEvidence { id: String, evidence: i64, problem: String },

    #[error("Evidence #{evidence} was signed for another action than the stored action {id}: {mismatches}. It was copied from elsewhere or the action was altered, so the action was not run.")]
    EvidenceMismatch {
        id: String,
        evidence: i64,
        mismatches: String,
    },

    #[error("Action {id} was approved under different circumstances: {changes}. The approval does not apply and the command was not run; propose the command again to get a new approval.")]
    Changed { id: String, changes: String },

    #[error("Action {id} cannot run now: {why}. What such a run writes (through a memory mapping, or with a file's times set back) the workspace fingerprint cannot see, so no approval is used while it lasts; the command was not run. Once it ends, the workspace generation moves on and the command must be proposed again.")]
    RunInProgress { id: String, why: String },

    #[error("The approval of action {id} has expired: {detail}. The action is frozen and will not run until an approver approves it again.")]
    Expired { id: String, detail: String },

    #[error("The approval nonce {nonce} from key {key_id} on action {id} was already consumed by an earlier run; a consumed approval never works again, so the action was not run. Approve it afresh if it really should run again.")]
    NonceReplayed { id: String, key_id: String, nonce: String },

    #[error("Action {id} was interrupted: a resume began and never recorded a result. Either its launcher died mid-run, so the command may have partly executed, or its sandbox could not be set up and nothing ran (that resume said so, and the audit log has it). It needs a fresh approval before it can run again: `tether-exec approve {id}`.")]
    Interrupted { id: String },

    #[error(
        "Action {id} is already running in process {pid}; an action executes at most once, so this resume did not run it: resume it again once that run has ended to get its recorded result."
    )]
    AlreadyRunning { id: String, pid: i64 },

    #[error(
        "The resume ticket for action {id} no longer matches the stored run ({detail}); the result was not recorded."
    )]
    StaleTicket { id: String, detail: String },

    #[error("The approver key file {} is readable or writable by group or others (mode {mode:04o}); a signing key must be private to its owner. Fix it with `chmod 600 {}` and try again.", path.display(), path.display())]
    KeyPermissions { path: PathBuf, mode: u32 },

    #[error("The approver key file {} is owned by uid {owner}, but this process runs as uid {uid}; an approver key must belong to the person approving. Run as its owner, or fix it with `chown {uid} {}` and `chmod 600 {}`.", path.display(), path.display(), path.display())]
    KeyOwner { path: PathBuf, owner: u32, uid: u32 },

    #[error("The approver key file {} {problem}.", path.display())]
    KeyFile { path: PathBuf, problem: String },

    #[error("Could not find the home directory of uid {uid} in the user database; set {APPROVER_KEY_ENV} to the path of the approver key.")]
    NoHomeDirectory { uid: u32 },
}

type Result<T, E = ApprovalError> = std::result::Result<T, E>;

trait DbContext<T> {
    fn db(self, context: &'static str) -> Result<T>;
}

impl<T> DbContext<T> for rusqlite::Result<T> {
    fn db(self, context: &'static str) -> Result<T> {
        self.map_err(|source| ApprovalError::Database { context, source })
    }
}

fn is_busy(err: &rusqlite::Error) -> bool {
    matches!(err, rusqlite::Error::SqliteFailure(e, _)
        if matches!(e.code, rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked))
}

/// Retries `f` while the database is busy, for up to [`BUSY_TIMEOUT`].
/// Retry an SQLite call that reports BUSY without consulting the busy handler
/// (switching to WAL while another process creates the database); shared with `audit`.
pub(crate) fn retry_busy<T>(mut f: impl FnMut() -> rusqlite::Result<T>) -> rusqlite::Result<T> {
    let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
    let mut pause = Duration::from_millis(2);
    loop {
        match f() {
            Err(e) if is_busy(&e) && std::time::Instant::now() < deadline => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            other => return other,
        }
    }
}

fn is_constraint(err: &rusqlite::Error) -> bool {
    matches!(err, rusqlite::Error::SqliteFailure(e, _)
        if e.code == rusqlite::ErrorCode::ConstraintViolation)
}

// ---------------------------------------------------------------------------
// Public data types
// ---------------------------------------------------------------------------

/// What exactly is to run. Exactly one of `argv` and `script` is set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Intent {
    pub argv: Option<Vec<String>>,
    pub script: Option<String>,
    /// Lowercase hex SHA-256 of the standard input ([`sha256_hex`]).
    pub stdin_digest: String,
    pub cwd: String,
    pub env_digest: String,
}

impl Intent {
    /// SHA-256 (lowercase hex) of the canonical JSON of this intent.
    pub fn digest(&self) -> String {
        sha256_hex(canonical_json(self).as_bytes())
    }

    /// Human-readable list of the parts of `now` that differ from `self`,
    /// naming each part (argv, script, stdin, cwd, env).
    pub fn changes_to(&self, now: &Intent) -> Vec<String> {
        let mut out = Vec::new();
        if self.argv != now.argv {
            out.push(format!(
                "argv changed from {} to {}",
                clip(&canonical_json(&self.argv)),
                clip(&canonical_json(&now.argv))
            ));
        }
        if self.script != now.script {
            out.push(format!(
                "script changed from {} to {}",
                clip(&canonical_json(&self.script)),
                clip(&canonical_json(&now.script))
            ));
        }
        if self.stdin_digest != now.stdin_digest {
            out.push(format!(
                "stdin changed (digest {} is now {})",
                short(&self.stdin_digest),
                short(&now.stdin_digest)
            ));
        }
        if self.cwd != now.cwd {
            out.push(format!(
                "cwd changed from {} to {}",
                clip(&canonical_json(&self.cwd)),
                clip(&canonical_json(&now.cwd))
            ));
        }
        if self.env_digest != now.env_digest {
            out.push(format!(
                "env changed (digest {} is now {})",
                short(&self.env_digest),
                short(&now.env_digest)
            ));
        }
        out
    }

    fn validate(&self) -> Result<()> {
        match (&self.argv, &self.script) {
            (Some(argv), None) if argv.is_empty() => Err(ApprovalError::InvalidRequest(
                "the intent's argv is empty; give the program to run.".into(),
            )),
            (Some(_), None) | (None, Some(_)) => Ok(()),
            _ => Err(ApprovalError::InvalidRequest(
                "an intent needs exactly one of argv and script.".into(),
            )),
        }
    }
}

/// The circumstances an approval is bound to besides the intent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bindings {
    pub policy_digest: String,
    pub env_instance_id: String,
    pub workspace_fingerprint: String,
    pub workspace_generation: u64,
}

/// A request to hold an action until it is approved.
#[derive(Debug, Clone)]
pub struct HoldRequest {
    /// The agent session; a new `ses_…` id is created when `None`.
    pub session: Option<String>,
    pub intent: Intent,
    /// At most [`MAX_STDIN_BYTES`]; its digest must equal `intent.stdin_digest`.
    pub stdin: Vec<u8>,
    pub policy_json: String,
    pub bindings: Bindings,
    /// Distinct trusted approvers needed (at least 1).
    pub required_approvals: u32,
    /// Wall-clock lifetime of each approval, counted from the approval.
    pub ttl_seconds: u64,
    /// Session proposals an approval stays valid for, counted from the approval.
    pub proposal_window: u64,
    /// Why it was held, e.g. the matched rule.
    pub summary: String,
    /// The caller already counted this proposal ([`record_proposal`], before
    /// the hold's preview ran): the hold does not count it again.
    pub proposal_counted: bool,
}

/// Lifecycle of a held action (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ActionState {
    Pending,
    Approved,
    Running,
    Done,
    Rejected,
    Interrupted,
    Frozen,
}

impl ActionState {
    pub fn as_str(self) -> &'static str {
        match self {
            ActionState::Pending => "pending",
            ActionState::Approved => "approved",
            ActionState::Running => "running",
            ActionState::Done => "done",
            ActionState::Rejected => "rejected",
            ActionState::Interrupted => "interrupted",
            ActionState::Frozen => "frozen",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "pending" => ActionState::Pending,
            "approved" => ActionState::Approved,
            "running" => ActionState::Running,
            "done" => ActionState::Done,
            "rejected" => ActionState::Rejected,
            "interrupted" => ActionState::Interrupted,
            "frozen" => ActionState::Frozen,
            _ => return None,
        })
    }
}

impl fmt::Display for ActionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One evidence row as shown to operators. The authoritative content is the
/// signed payload; expiry fields are `None` when the payload is unreadable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EvidenceInfo {
    pub evidence_id: i64,
    pub approver_key_id: String,
    pub created_unix_ms: u64,
    pub expires_at_unix_ms: Option<u64>,
    pub expires_at_proposal: Option<u64>,
    /// Replaced by a later approval or voided by an interruption.
    pub superseded: bool,
    /// Its nonce has been spent by a run.
    pub consumed: bool,
}

/// A held action as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HeldAction {
    pub id: String,
    pub session: String,
    pub position: u64,
    pub idempotency_key: String,
    pub state: ActionState,
    pub intent: Intent,
    pub bindings: Bindings,
    pub required_approvals: u32,
    /// All evidence ever recorded for this action, oldest first.
    pub approvals: Vec<EvidenceInfo>,
    pub created_unix_ms: u64,
    pub rejection_reason: Option<String>,
    pub rejected_by: Option<String>,
    pub summary: String,
    pub policy_json: String,
    pub ttl_seconds: u64,
    pub proposal_window: u64,
}

/// What the launcher observes at resume time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Current {
    /// The session doing the resume; must be the action's session.
    pub session: String,
    pub intent: Intent,
    pub bindings: Bindings,
    /// The session's proposal count now (see [`ApprovalStore::record_proposal`]).
    pub session_proposals: u64,
    /// A writable run is in progress in the workspace now
    /// (`workspace::writable_run_in_progress`): what it writes, the
    /// fingerprint may not see until it ends, and then the generation moves
    /// on. No approval is used meanwhile. What stands in the way, naming
    /// the run's pending check; `None`: no such run.
    pub writable_run_in_progress: Option<String>,
}

/// Outcome of a completed run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedResult {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub duration_ms: u64,
    pub receipt_json: String,
}

/// Permission to run an action exactly once. Hand it back to
/// [`ApprovalStore::finish`] with the result. Dropping it without finishing
/// leaves the action `running`; once this process has exited, the next resume
/// marks it `interrupted` (it may have partly run, so it needs a fresh approval).
#[must_use = "the action is marked running; run it and pass the ticket to finish()"]
pub struct ResumeTicket {
    action: Box<HeldAction>,
    stdin: Vec<u8>,
    run_id: String,
}

impl ResumeTicket {
    pub fn action_id(&self) -> &str {
        &self.action.id
    }
    /// This run's id (it owns the action while it runs).
    pub fn run_id(&self) -> &str {
        &self.run_id
    }
    /// The stored action, as verified (its intent equals [`Current::intent`]).
    pub fn action(&self) -> &HeldAction {
        &self.action
    }
    /// The standard input that was approved.
    pub fn stdin(&self) -> &[u8] {
        &self.stdin
    }
}

impl fmt::Debug for ResumeTicket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResumeTicket")
            .field("action", &self.action.id)
            .field("run_id", &self.run_id)
            .field("stdin_len", &self.stdin.len())
            .finish()
    }
}

/// The answer of [`ApprovalStore::begin_resume`].
#[derive(Debug)]
pub enum Resume {
    /// Run it now, then call [`ApprovalStore::finish`].
    Run(ResumeTicket),
    /// It already ran; this is what happened. It never runs again.
    AlreadyRan(RecordedResult),
    /// A human rejected it, for this reason.
    Rejected(String),
    /// Not enough valid approvals yet.
    Pending { have: u32, need: u32 },
}

/// The signed content of one approval. Serialized with this field order, it
/// is the canonical JSON that follows [`EVIDENCE_DOMAIN`] in the signed message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvidencePayload {
    pub version: u32,
    pub session: String,
    pub action_id: String,
    pub idempotency_key: String,
    pub position: u64,
    pub intent_digest: String,
    pub policy_digest: String,
    pub env_instance_id: String,
    pub workspace_fingerprint: String,
    pub workspace_generation: u64,
    pub approver_key_id: String,
    pub issued_at_unix_ms: u64,
    pub expires_at_unix_ms: u64,
    pub expires_at_proposal: u64,
    pub nonce: String,
}

impl EvidencePayload {
    /// The canonical JSON text that is signed and stored.
    pub fn to_canonical_json(&self) -> String {
        canonical_json(self)
    }
}

/// The exact bytes an approver signs for a payload's canonical JSON.
pub fn signing_message(payload_json: &str) -> Vec<u8> {
    let mut msg = Vec::with_capacity(EVIDENCE_DOMAIN.len() + payload_json.len());
    msg.extend_from_slice(EVIDENCE_DOMAIN.as_bytes());
    msg.extend_from_slice(payload_json.as_bytes());
    msg
}

/// Lowercase hex SHA-256 of `bytes` (the format of digests in this module).
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Key id of an Ed25519 public key: the first 16 hex digits of its SHA-256.
pub fn key_id_for(public_key: &[u8; 32]) -> String {
    let mut id = sha256_hex(public_key);
    id.truncate(16);
    id
}

// ---------------------------------------------------------------------------
// Approver keys
// ---------------------------------------------------------------------------

/// An approver's Ed25519 signing key. Its secret never leaves this value.
pub struct ApproverKey {
    signing: SigningKey,
}

impl fmt::Debug for ApproverKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApproverKey")
            .field("key_id", &self.key_id())
            .finish_non_exhaustive()
    }
}

impl ApproverKey {
    /// Loads the key at `path`, or creates it (32 random raw secret bytes,
    /// `O_CREAT|O_EXCL`, mode 0600, parent directory 0700) when it is missing.
    /// Refuses key files that are symlinks, not regular, the wrong size, not
    /// owned by the current user, or accessible by group or others.
    pub fn load_or_create(path: &Path) -> Result<Self> {
        if let Some(key) = load_key_file(path)? {
            return Ok(key);
        }
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)
                .map_err(|source| ApprovalError::Io {
                    action: "create the approver key directory",
                    path: parent.to_path_buf(),
                    source,
                })?;
        }
        let mut secret = [0u8; 32];
        fill_random(&mut secret)?;
        let opened = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path);
        let mut file = match opened {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                // Someone created it concurrently: use theirs.
                wipe(&mut secret);
                return load_key_file(path)?.ok_or_else(|| ApprovalError::KeyFile {
                    path: path.to_path_buf(),
                    problem: "vanished while it was being created; retry".into(),
                });
            }
            Err(source) => {
                wipe(&mut secret);
                return Err(ApprovalError::Io {
                    action: "create the approver key file",
                    path: path.to_path_buf(),
                    source,
                });
            }
        };
        let written = file.write_all(&secret).and_then(|()| file.sync_all());
        let key = ApproverKey {
            signing: SigningKey::from_bytes(&secret),
        };
        wipe(&mut secret);
        if let Err(source) = written {
            let _ = std::fs::remove_file(path);
            return Err(ApprovalError::Io {
                action: "write the approver key file",
                path: path.to_path_buf(),
                source,
            });
        }
        Ok(key)
    }

    /// A fresh key that exists only in memory.
    pub fn generate() -> Result<Self> {
        let mut secret = [0u8; 32];
        fill_random(&mut secret)?;
        let key = ApproverKey {
            signing: SigningKey::from_bytes(&secret),
        };
        wipe(&mut secret);
        Ok(key)
    }

    /// First 16 hex digits of the SHA-256 of the public key.
    pub fn key_id(&self) -> String {
        key_id_for(&self.public_bytes())
    }

    pub fn public_bytes(&self) -> [u8; 32] {
        self.signing.verifying_key().to_bytes()
    }

    /// Signs `EVIDENCE_DOMAIN || payload_json`.
    pub fn sign_payload(&self, payload_json: &str) -> [u8; 64] {
        self.signing.sign(&signing_message(payload_json)).to_bytes()
    }
}

fn load_key_file(path: &Path) -> Result<Option<ApproverKey>> {
    let key_err = |problem: &str| ApprovalError::KeyFile {
        path: path.to_path_buf(),
        problem: problem.to_string(),
    };
    let mut file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(key_err(
                "is a symbolic link; point the key path at the real file instead",
            ))
        }
        Err(source) => {
            return Err(ApprovalError::Io {
                action: "open the approver key file",
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let meta = file.metadata().map_err(|source| ApprovalError::Io {
        action: "inspect the approver key file",
        path: path.to_path_buf(),
        source,
    })?;
    if !meta.is_file() {
        return Err(key_err("is not a regular file; move it aside and retry"));
    }
    let uid = nix::unistd::geteuid().as_raw();
    if meta.uid() != uid {
        return Err(ApprovalError::KeyOwner {
            path: path.to_path_buf(),
            owner: meta.uid(),
            uid,
        });
    }
    if meta.mode() & 0o077 != 0 {
        return Err(ApprovalError::KeyPermissions {
            path: path.to_path_buf(),
            mode: meta.mode() & 0o7777,
        });
    }
    if meta.len() != 32 {
        return Err(key_err(&format!(
            "holds {} bytes, but an approver key is exactly 32 raw secret bytes; restore it from a backup or move it aside so a new key is created",
            meta.len()
        )));
    }
    let mut secret = [0u8; 32];
    let read = file.read_exact(&mut secret);
    if let Err(source) = read {
        wipe(&mut secret);
        return Err(ApprovalError::Io {
            action: "read the approver key file",
            path: path.to_path_buf(),
            source,
        });
    }
    let key = ApproverKey {
        signing: SigningKey::from_bytes(&secret),
    };
    wipe(&mut secret);
    Ok(Some(key))
}

/// `$TETHER_EXEC_APPROVER_KEY` if set and non-empty, otherwise
/// `<home>/.config/tether-exec/approver.key` where `<home>` comes from the
/// user database (`getpwuid_r`), never from `$HOME`, which the agent controls.
pub fn default_approver_key_path() -> Result<PathBuf> {
    let uid = nix::unistd::geteuid().as_raw();
    // The account's home from the password database, never `$HOME` (which a
    // harness sets to the workspace).
    approver_key_path_in(crate::state::account_home).ok_or(ApprovalError::NoHomeDirectory { uid })
}

/// [`default_approver_key_path`] with the account's home given (when the
/// caller has it already): the environment's choice, else under `home`.
pub fn approver_key_path_in(home: impl FnOnce() -> Option<PathBuf>) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(APPROVER_KEY_ENV).filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    Some(home()?.join(".config").join("tether-exec").join("approver.key"))
}

// ---------------------------------------------------------------------------
// The store
// ---------------------------------------------------------------------------

/// The approval database of one state directory. Not `Sync`: give each thread
/// its own store; concurrent stores (and processes) coordinate through SQLite.
pub struct ApprovalStore {
    conn: Connection,
    path: PathBuf,
}

impl Drop for ApprovalStore {
    fn drop(&mut self) {
        crate::state::keep_wal_short(&self.conn, &self.path);
    }
}

impl fmt::Debug for ApprovalStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApprovalStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// A stored action row (everything but the stdin blob).
struct ActionRow {
    held: HeldAction,
    evidence_floor: i64,
    run_id: Option<String>,
    runner_pid: Option<i64>,
    runner_start: Option<String>,
    runner_boot: Option<String>,
}

struct EvidenceRow {
    id: i64,
    key_id: String,
    payload_json: String,
    signature: Vec<u8>,
    created_unix_ms: u64,
    superseded: bool,
    consumed: bool,
}

const ACTION_COLUMNS: &str = "id, session, position, idempotency_key, state, intent_json, \
     policy_json, policy_digest, env_instance_id, workspace_fingerprint, workspace_generation, \
     required_approvals, ttl_seconds, proposal_window, summary, created_unix_ms, \
     rejection_reason, rejected_by, evidence_floor, run_id, runner_pid, runner_start, runner_boot";

const EVIDENCE_QUERY: &str = "SELECT e.id, e.approver_key_id, e.payload_json, e.signature, \
     e.created_unix_ms, e.superseded, \
     EXISTS (SELECT 1 FROM nonces n WHERE n.nonce = e.nonce) \
     FROM evidence e WHERE e.action = ?1 ORDER BY e.id";

impl ApprovalStore {
    /// Opens (creating and migrating as needed) `<state_dir>/approvals.sqlite`.
    pub fn open(state_dir: &Path) -> Result<Self> {
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(state_dir)
            .map_err(|source| ApprovalError::Io {
                action: "create the state directory",
                path: state_dir.to_path_buf(),
                source,
            })?;
        let path = state_dir.join(DB_FILE_NAME);
        // Create the file ourselves so it (and SQLite's -wal/-shm files, which
        // copy its mode) is private from the first byte.
        match OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(source) => {
                return Err(ApprovalError::Io {
                    action: "create the approval database",
                    path,
                    source,
                })
            }
        }
        crate::state::drop_stale_wal_marker(&path);
        let conn = Connection::open(&path).db("opening the approval database")?;
        conn.busy_timeout(BUSY_TIMEOUT).db("setting the busy timeout")?;
        // Switching to WAL needs a moment of exclusive access and, unlike
        // ordinary locking, can report SQLITE_BUSY without consulting the busy
        // handler while another process creates the database; so retry here.
        retry_busy(|| conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get::<_, String>(0)))
            .db("switching the approval database to WAL mode")?;
        // No fsync per commit (see "Storage" in the module docs): every
        // commit survives the death of the process that made it, and a power
        // loss voids everything it could undo.
        conn.execute_batch("PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;")
            .db("configuring the approval database")?;
        // Every command is a new process that opens and closes the store. By
        // default the last connection to close checkpoints the WAL (two
        // fsyncs) and deletes it, so the next one recreates it: keep the WAL
        // between processes, short (`state::keep_wal_short`, on drop).
        conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
            .db("configuring the approval database")?;
        let store = ApprovalStore { conn, path };
        let current: i64 = retry_busy(|| store.conn.query_row("PRAGMA user_version", [], |r| r.get(0)))
            .db("reading the schema version")?;
        if current != MIGRATIONS.len() as i64 {
            store.migrate()?;
        }
        Ok(store)
    }

    /// Path of the database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn migrate(&self) -> Result<()> {
        let tx = self.immediate("starting the schema migration")?;
        let found: i64 = tx
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .db("reading the schema version")?;
        let supported = MIGRATIONS.len() as i64;
        if found > supported || found < 0 {
            return Err(ApprovalError::SchemaTooNew {
                path: self.path.clone(),
                found,
                supported,
            });
        }
        for (index, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
            tx.execute_batch(sql).db("migrating the schema")?;
            tx.pragma_update(None, "user_version", index as i64 + 1)
                .db("recording the schema version")?;
        }
        tx.commit().db("committing the schema migration")
    }

    /// A write transaction (taking the write lock at once, so that a check
    /// and the write it allows are one step), not fsynced (see "Storage").
    fn immediate(&self, context: &'static str) -> Result<Transaction<'_>> {
        self.conn.execute_batch("PRAGMA synchronous = NORMAL").db(context)?;
        Transaction::new_unchecked(&self.conn, TransactionBehavior::Immediate).db(context)
    }

    /// A write transaction on disk before it returns (fsync), for the first
    /// trusted key (trust on first use must not pass to the next key).
    fn immediate_durable(&self, context: &'static str) -> Result<Transaction<'_>> {
        self.make_wal_name_durable()?;
        self.conn.execute_batch("PRAGMA synchronous = FULL").db(context)?;
        Transaction::new_unchecked(&self.conn, TransactionBehavior::Immediate).db(context)
    }

    /// The database file SQLite has open: `path` with any link resolved,
    /// which is where SQLite keeps the WAL.
    fn db_file(&self) -> PathBuf {
        self.conn
            .path()
            .filter(|p| !p.is_empty())
            .map_or_else(|| self.path.clone(), PathBuf::from)
    }

    fn make_wal_name_durable(&self) -> Result<()> {
        let db = self.db_file();
        crate::state::make_wal_name_durable(&db).map_err(|source| ApprovalError::Io {
            action: "sync the directory holding",
            path: db,
            source,
        })
    }

    /// Puts every commit made so far on disk (fsync of the WAL, where a
    /// `NORMAL` commit waits: SQLite finds a synced commit frame after a power
    /// cut as it finds one `FULL` synced; a commit a checkpoint has since
    /// copied back was synced into the database by that checkpoint). For a
    /// resume's start, and only once a preview landing's journal is about to
    /// be made durable: that journal names the run, and after a power cut a
    /// durable journal whose run the store lost is given up rather than
    /// finished. A landing of one rename writes no durable journal, and then
    /// the start needs no fsync (see "Storage").
    pub fn make_commits_durable(&self) -> Result<()> {
        self.make_wal_name_durable()?;
        let wal = {
            let mut p = self.db_file().into_os_string();
            p.push("-wal");
            PathBuf::from(p)
        };
        File::open(&wal)
            .and_then(|f| f.sync_data())
            .map_err(|source| ApprovalError::Io {
                action: "sync",
                path: wal,
                source,
            })
    }

    /// Holds an action until it is approved. Counts as one proposal of its
    /// session; the action's `position` is that proposal number.
    pub fn hold(&self, req: HoldRequest) -> Result<HeldAction> {
        if req.stdin.len() > MAX_STDIN_BYTES {
            return Err(ApprovalError::StdinTooLarge {
                size: req.stdin.len(),
                max: MAX_STDIN_BYTES,
            });
        }
        req.intent.validate()?;
        let actual = sha256_hex(&req.stdin);
        if req.intent.stdin_digest != actual {
            return Err(ApprovalError::InvalidRequest(format!(
                "the intent's stdin_digest {} is not the SHA-256 of the {} stdin bytes supplied ({}).",
                short(&req.intent.stdin_digest),
                req.stdin.len(),
                short(&actual)
            )));
        }
        if req.required_approvals == 0 || req.required_approvals > MAX_REQUIRED_APPROVALS {
            return Err(ApprovalError::InvalidRequest(format!(
                "required_approvals must be between 1 and {MAX_REQUIRED_APPROVALS}, not {}.",
                req.required_approvals
            )));
        }
        if req.ttl_seconds == 0 {
            return Err(ApprovalError::InvalidRequest(
                "ttl_seconds must be at least 1, or every approval would expire at once.".into(),
            ));
        }
        if let Some(session) = &req.session {
            validate_session(session)?;
        }
        let intent_json = canonical_json(&req.intent);
        let intent_digest = req.intent.digest();
        let now = now_unix_ms();

        let tx = self.immediate("holding an action")?;
        let session = match req.session {
            Some(s) => s,
            None => new_session_id(&tx)?,
        };
        let counted = if req.proposal_counted {
            // The session's row, which the action refers to, without a count.
            tx.execute(
                "INSERT INTO sessions (id, proposals, created_unix_ms) VALUES (?1, 0, ?2) \
                 ON CONFLICT(id) DO NOTHING",
                params![session, u2i(now)],
            )
            .db("recording the session")?;
            proposals_of(&tx, &session)?
        } else {
            bump_proposals(&tx, &session, now)?
        };
        let position = counted + appended_proposals(self.state_dir(), &session)?;
        let mut attempt = 0;
        let id = loop {
            let id = random_id("apr_", 8)?;
            let idempotency_key = random_id("idk_", 16)?;
            let inserted = tx.execute(
                "INSERT INTO actions (id, session, position, idempotency_key, state, intent_json, \
                 intent_digest, stdin, policy_json, policy_digest, env_instance_id, \
                 workspace_fingerprint, workspace_generation, required_approvals, ttl_seconds, \
                 proposal_window, summary, created_unix_ms, updated_unix_ms) \
                 VALUES (?1, ?2, ?3, ?4, 'pending', ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, \
                 ?15, ?16, ?17, ?17)",
                params![
                    id,
                    session,
                    u2i(position),
                    idempotency_key,
                    intent_json,
                    intent_digest,
                    req.stdin,
                    req.policy_json,
                    req.bindings.policy_digest,
                    req.bindings.env_instance_id,
                    req.bindings.workspace_fingerprint,
                    u2i(req.bindings.workspace_generation),
                    i64::from(req.required_approvals),
                    u2i(req.ttl_seconds),
                    u2i(req.proposal_window),
                    req.summary,
                    u2i(now),
                ],
            );
            match inserted {
                Ok(_) => break id,
                Err(e) if is_constraint(&e) && attempt < 4 => attempt += 1,
                Err(source) => {
                    return Err(ApprovalError::Database {
                        context: "storing the held action",
                        source,
                    })
                }
            }
        };
        let held = load_held(&tx, &id)?;
        tx.commit().db("committing the held action")?;
        Ok(held)
    }

    /// Counts one proposal (one run, held or not) in `session` (see
    /// [`record_proposal`]) and returns the session's new proposal count.
    /// Unknown sessions start at zero.
    pub fn record_proposal(&self, session: &str) -> Result<u64> {
        record_proposal(self.state_dir(), session)?;
        self.session_proposals(session)
    }

    /// The session's proposal count (0 for an unknown session): holds,
    /// counted in the database, and the other runs, in the session's file.
    pub fn session_proposals(&self, session: &str) -> Result<u64> {
        Ok(proposals_of(&self.conn, session)? + appended_proposals(self.state_dir(), session)?)
    }

    fn state_dir(&self) -> &Path {
        self.path.parent().unwrap_or(Path::new("."))
    }

    /// Actions waiting for a human: pending, frozen (approval expired) and
    /// interrupted (needs a fresh approval), oldest first.
    pub fn pending(&self) -> Result<Vec<HeldAction>> {
        let mut stmt = self
            .conn
            .prepare_cached(&format!(
                "SELECT {ACTION_COLUMNS} FROM actions \
                 WHERE state IN ('pending','frozen','interrupted') \
                 ORDER BY created_unix_ms, rowid"
            ))
            .db("listing pending actions")?;
        let rows = stmt.query_map([], read_action_columns).db("listing pending actions")?;
        let mut out = Vec::new();
        for row in rows {
            let mut action = row.db("reading a pending action")??;
            action.held.approvals = evidence_infos(&self.conn, &action.held.id)?;
            out.push(action.held);
        }
        Ok(out)
    }

    /// One action by id.
    pub fn get(&self, id: &str) -> Result<HeldAction> {
        load_held(&self.conn, id)
    }

    /// The run that last began action `id` (the resume that spent its
    /// approval), if one did: a preview landing's journal is finished only
    /// for that run.
    pub fn run_of(&self, id: &str) -> Result<Option<String>> {
        Ok(load_action(&self.conn, id)?.run_id)
    }

    /// The held standard input of an action.
    pub fn stdin(&self, id: &str) -> Result<Vec<u8>> {
        self.conn
            .query_row("SELECT stdin FROM actions WHERE id = ?1", [id], |r| {
                r.get::<_, Vec<u8>>(0)
            })
            .optional()
            .db("reading the held stdin")?
            .ok_or_else(|| ApprovalError::NotFound { id: id.to_string() })
    }

    /// Trusts an approver's public key; returns its key id. Idempotent.
    /// Key ids of the trusted approvers, oldest first.
    pub fn trusted(&self) -> Result<Vec<String>> {
        let mut stmt = self
            .conn
            .prepare("SELECT key_id FROM trusted_approvers ORDER BY added_unix_ms, key_id")
            .db("listing trusted approvers")?;
        let rows = stmt
            .query_map([], |r| r.get::<_, String>(0))
            .db("listing trusted approvers")?;
        rows.collect::<std::result::Result<Vec<_>, _>>()
            .db("listing trusted approvers")
    }

    pub fn trust(&self, public_key: &[u8; 32]) -> Result<String> {
        let usable = VerifyingKey::from_bytes(public_key)
            .map(|k| !k.is_weak())
            .unwrap_or(false);
        if !usable {
            return Err(ApprovalError::InvalidPublicKey {
                key_hex: hex(public_key),
            });
        }
        let key_id = key_id_for(public_key);
        let tx = self.immediate_durable("trusting an approver")?;
        match trusted_key(&tx, &key_id)? {
            Some(existing) if existing == *public_key => {}
            Some(_) => return Err(ApprovalError::TrustConflict { key_id }),
            None => {
                tx.execute(
                    "INSERT INTO trusted_approvers (key_id, public_key, added_unix_ms) \
                     VALUES (?1, ?2, ?3)",
                    params![key_id, public_key.as_slice(), u2i(now_unix_ms())],
                )
                .db("storing the trusted approver")?;
            }
        }
        tx.commit().db("committing the trusted approver")?;
        Ok(key_id)
    }

    /// Signs an approval of action `id` with `key` at `now_unix_ms`.
    ///
    /// The key must be trusted. A key that already holds a live (unspent,
    /// unexpired) approval for this action is refused; its expired or spent
    /// approvals are superseded (kept on record) by the new one.
    /// An interrupted action (its run may have had effects) is approved
    /// afresh: that is how it runs again.
    pub fn approve(&self, id: &str, key: &ApproverKey, now_unix_ms: u64) -> Result<HeldAction> {
        self.approve_in(id, key, now_unix_ms, true)
    }

    /// [`approve`](Self::approve), except that an interrupted action is
    /// refused ([`ApprovalError::WrongState`]) in the same transaction: for
    /// `approve --resume`, whose repetition after a lost answer must never
    /// run an action a second time. Running an interrupted action again
    /// takes a deliberate `approve`.
    pub fn approve_unless_interrupted(&self, id: &str, key: &ApproverKey, now_unix_ms: u64) -> Result<HeldAction> {
        self.approve_in(id, key, now_unix_ms, false)
    }

    fn approve_in(
        &self,
        id: &str,
        key: &ApproverKey,
        now_unix_ms: u64,
        again_after_interruption: bool,
    ) -> Result<HeldAction> {
        let key_id = key.key_id();
        let tx = self.immediate("approving an action")?;
        require_trusted(&tx, key)?;
        let action = load_action(&tx, id)?;
        let state = action.held.state;
        let approvable = match state {
            ActionState::Pending | ActionState::Approved | ActionState::Frozen => true,
            ActionState::Interrupted => again_after_interruption,
            ActionState::Running | ActionState::Done | ActionState::Rejected => false,
        };
        if !approvable {
            return Err(ApprovalError::WrongState {
                id: id.to_string(),
                state,
                verb: "approved",
            });
        }
        let proposals_now =
            proposals_of(&tx, &action.held.session)? + appended_proposals(self.state_dir(), &action.held.session)?;
        for ev in current_evidence(&tx, &action)? {
            if ev.key_id != key_id {
                continue;
            }
            let live = verify_evidence(&tx, id, &ev)
                .map(|p| !ev.consumed && now_unix_ms < p.expires_at_unix_ms && proposals_now <= p.expires_at_proposal)
                .unwrap_or(false);
            if live {
                return Err(ApprovalError::AlreadyApprovedBy {
                    id: id.to_string(),
                    key_id,
                });
            }
            tx.execute("UPDATE evidence SET superseded = 1 WHERE id = ?1", [ev.id])
                .db("superseding old evidence")?;
        }

        let held = &action.held;
        let payload = EvidencePayload {
            version: EVIDENCE_VERSION,
            session: held.session.clone(),
            action_id: held.id.clone(),
            idempotency_key: held.idempotency_key.clone(),
            position: held.position,
            intent_digest: held.intent.digest(),
            policy_digest: held.bindings.policy_digest.clone(),
            env_instance_id: held.bindings.env_instance_id.clone(),
            workspace_fingerprint: held.bindings.workspace_fingerprint.clone(),
            workspace_generation: held.bindings.workspace_generation,
            approver_key_id: key_id.clone(),
            issued_at_unix_ms: now_unix_ms,
            expires_at_unix_ms: now_unix_ms.saturating_add(held.ttl_seconds.saturating_mul(1000)),
            expires_at_proposal: proposals_now.saturating_add(held.proposal_window),
            nonce: random_id("", 16)?,
        };
        let payload_json = payload.to_canonical_json();
        let signature = key.sign_payload(&payload_json);
        tx.execute(
            "INSERT INTO evidence (action, approver_key_id, nonce, payload_json, signature, \
             created_unix_ms, superseded) VALUES (?1, ?2, ?3, ?4, ?5, ?6, 0)",
            params![
                id,
                key_id,
                payload.nonce,
                payload_json,
                signature.as_slice(),
                u2i(now_unix_ms)
            ],
        )
        .db("storing the approval evidence")?;
        let stored = tx.last_insert_rowid();

        // The state is informative; begin_resume re-verifies everything. The
        // evidence just signed here is counted as it is (a verification of
        // it, in a fresh process, costs about as much as the rest of this).
        let mut approvers = BTreeSet::from([key_id.clone()]);
        for ev in current_evidence(&tx, &action)? {
            if ev.id == stored {
                continue;
            }
            if let Ok(p) = verify_evidence(&tx, id, &ev) {
                if !ev.consumed && now_unix_ms < p.expires_at_unix_ms && proposals_now <= p.expires_at_proposal {
                    approvers.insert(p.approver_key_id);
                }
            }
        }
        let new_state = if approvers.len() >= held.required_approvals as usize {
            ActionState::Approved
        } else {
            ActionState::Pending
        };
        set_state(&tx, id, new_state)?;
        let out = load_held(&tx, id)?;
        tx.commit().db("committing the approval")?;
        Ok(out)
    }

    /// Rejects action `id` on behalf of `key` (which must be trusted). Only
    /// actions that have not started can be rejected.
    pub fn reject(&self, id: &str, reason: &str, key: &ApproverKey) -> Result<HeldAction> {
        let tx = self.immediate("rejecting an action")?;
        require_trusted(&tx, key)?;
        let action = load_action(&tx, id)?;
        let state = action.held.state;
        if !matches!(
            state,
            ActionState::Pending | ActionState::Approved | ActionState::Frozen | ActionState::Interrupted
        ) {
            return Err(ApprovalError::WrongState {
                id: id.to_string(),
                state,
                verb: "rejected",
            });
        }
        let reason = reason.trim();
        let reason = if reason.is_empty() { "no reason given" } else { reason };
        tx.execute(
            "UPDATE actions SET state = 'rejected', rejection_reason = ?2, rejected_by = ?3, \
             updated_unix_ms = ?4 WHERE id = ?1",
            params![id, reason, key.key_id(), u2i(now_unix_ms())],
        )
        .db("recording the rejection")?;
        let out = load_held(&tx, id)?;
        tx.commit().db("committing the rejection")?;
        Ok(out)
    }

    /// Decides, atomically, whether action `id` may run now. See the module
    /// documentation; at most one caller ever receives [`Resume::Run`] for a
    /// given set of approvals.
    pub fn begin_resume(&self, id: &str, current: &Current, now_unix_ms: u64) -> Result<Resume> {
        // Not fsynced: see `make_commits_durable`.
        let tx = self.immediate("resuming an action")?;
        let action = load_action(&tx, id)?;

        // 1. Terminal and in-flight states.
        if let Some(result) = load_result(&tx, id)? {
            return Ok(Resume::AlreadyRan(result));
        }
        match action.held.state {
            ActionState::Rejected => {
                let reason = action
                    .held
                    .rejection_reason
                    .clone()
                    .unwrap_or_else(|| "no reason given".into());
                return Ok(Resume::Rejected(reason));
            }
            ActionState::Done => {
                return Err(ApprovalError::Corrupt {
                    what: format!("action {id} is marked done but has no recorded result; it will not run again"),
                })
            }
            ActionState::Running => {
                refuse_if_runner_alive(&action, id)?;
                tx.execute(
                    "UPDATE actions SET state = 'interrupted', interrupted_unix_ms = ?2, \
                     evidence_floor = (SELECT COALESCE(MAX(id), 0) FROM evidence), \
                     runner_pid = NULL, runner_start = NULL, runner_boot = NULL, \
                     updated_unix_ms = ?2 WHERE id = ?1",
                    params![id, u2i(now_unix_ms)],
                )
                .db("marking the action interrupted")?;
                tx.execute(
                    "UPDATE evidence SET superseded = 1 WHERE action = ?1 AND superseded = 0",
                    [id],
                )
                .db("voiding the interrupted run's evidence")?;
                tx.commit().db("committing the interruption")?;
                return Err(ApprovalError::Interrupted { id: id.to_string() });
            }
            ActionState::Interrupted => {
                if current_evidence(&tx, &action)?.is_empty() {
                    return Err(ApprovalError::Interrupted { id: id.to_string() });
                }
            }
            ActionState::Pending | ActionState::Approved | ActionState::Frozen => {}
        }

        // 2a. Every piece of evidence must be authentic and signed for exactly
        //     this stored action; anything else fails closed.
        let held = &action.held;
        let stored_intent_digest = held.intent.digest();
        let evidence = current_evidence(&tx, &action)?;
        let mut payloads = Vec::with_capacity(evidence.len());
        for ev in &evidence {
            let payload = verify_evidence(&tx, id, ev)?;
            let mismatches = stored_mismatches(held, &stored_intent_digest, &payload);
            if !mismatches.is_empty() {
                return Err(ApprovalError::EvidenceMismatch {
                    id: id.to_string(),
                    evidence: ev.id,
                    mismatches: mismatches.join("; "),
                });
            }
            payloads.push((ev.id, payload));
        }

        // 2b. What the launcher sees now must be what was approved.
        let mut changes = current_changes(held, current);
        if !changes.is_empty() {
            // A run in progress may be what changed it: say so too.
            if let Some(why) = &current.writable_run_in_progress {
                changes.push(why.clone());
            }
            return Err(ApprovalError::Changed {
                id: id.to_string(),
                changes: changes.join("; "),
            });
        }
        if let Some(why) = &current.writable_run_in_progress {
            return Err(ApprovalError::RunInProgress {
                id: id.to_string(),
                why: why.clone(),
            });
        }
        let current_intent_digest = current.intent.digest();

        // 2c. Expiry, then 3. count distinct approvers.
        let mut expired = Vec::new();
        let mut usable = Vec::new();
        let mut approvers = BTreeSet::new();
        for (evidence_id, p) in payloads {
            if p.intent_digest != current_intent_digest
                || p.policy_digest != current.bindings.policy_digest
                || p.env_instance_id != current.bindings.env_instance_id
                || p.workspace_fingerprint != current.bindings.workspace_fingerprint
                || p.workspace_generation != current.bindings.workspace_generation
                || p.session != current.session
            {
                // Unreachable unless the checks above are wrong; fail closed.
                return Err(ApprovalError::Changed {
                    id: id.to_string(),
                    changes: format!("evidence #{evidence_id} does not match the current launch"),
                });
            }
            if now_unix_ms >= p.expires_at_unix_ms {
                let at = |ms: u64| {
                    crate::audit::format_rfc3339_millis(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))
                };
                expired.push(format!(
                    "the approval by key {} expired at {} (unix time {} ms; the rule's approval_ttl_seconds) and it is now {} ({} ms)",
                    p.approver_key_id,
                    at(p.expires_at_unix_ms),
                    p.expires_at_unix_ms,
                    at(now_unix_ms),
                    now_unix_ms
                ));
                continue;
            }
            if current.session_proposals > p.expires_at_proposal {
                expired.push(format!(
                    "the approval by key {} was valid through proposal {} of session {}, and the session is at proposal {}",
                    p.approver_key_id, p.expires_at_proposal, p.session, current.session_proposals
                ));
                continue;
            }
            approvers.insert(p.approver_key_id.clone());
            usable.push((evidence_id, p));
        }
        let have = approvers.len() as u32;
        let need = held.required_approvals;
        if have < need {
            if !expired.is_empty() {
                if matches!(
                    held.state,
                    ActionState::Pending | ActionState::Approved | ActionState::Interrupted
                ) {
                    set_state(&tx, id, ActionState::Frozen)?;
                    tx.commit().db("freezing the action")?;
                }
                return Err(ApprovalError::Expired {
                    id: id.to_string(),
                    detail: expired.join("; "),
                });
            }
            return Ok(Resume::Pending { have, need });
        }

        // 4. Spend every nonce; a replayed nonce aborts the whole transaction.
        for (evidence_id, p) in &usable {
            let spent = tx.execute(
                "INSERT INTO nonces (nonce, action, evidence_id, consumed_unix_ms) \
                 VALUES (?1, ?2, ?3, ?4)",
                params![p.nonce, id, evidence_id, u2i(now_unix_ms)],
            );
            match spent {
                Ok(_) => {}
                Err(e) if is_constraint(&e) => {
                    return Err(ApprovalError::NonceReplayed {
                        id: id.to_string(),
                        key_id: p.approver_key_id.clone(),
                        nonce: p.nonce.clone(),
                    })
                }
                Err(source) => {
                    return Err(ApprovalError::Database {
                        context: "consuming the approval nonce",
                        source,
                    })
                }
            }
        }
        let run_id = random_id("run_", 16)?;
        let (pid, start, boot) = runner_identity();
        tx.execute(
            "UPDATE actions SET state = 'running', run_id = ?2, runner_pid = ?3, \
             runner_start = ?4, runner_boot = ?5, run_started_unix_ms = ?6, updated_unix_ms = ?6 \
             WHERE id = ?1",
            params![id, run_id, pid, start, boot, u2i(now_unix_ms)],
        )
        .db("marking the action running")?;
        let held = load_held(&tx, id)?;
        let stdin: Vec<u8> = tx
            .query_row("SELECT stdin FROM actions WHERE id = ?1", [id], |r| r.get(0))
            .db("reading the held stdin")?;
        tx.commit().db("committing the resume")?;
        Ok(Resume::Run(ResumeTicket {
            action: Box::new(held),
            stdin,
            run_id,
        }))
    }

    /// Records the outcome of a run started by [`Self::begin_resume`] and marks
    /// the action done. A ticket can be used once.
    pub fn finish(&self, ticket: ResumeTicket, result: &RecordedResult) -> Result<()> {
        if serde_json::from_str::<serde_json::Value>(&result.receipt_json).is_err() {
            return Err(ApprovalError::InvalidRequest(
                "the run receipt is not valid JSON, so it was not recorded.".into(),
            ));
        }
        let id = ticket.action.id.as_str();
        let tx = self.immediate("recording a run result")?;
        let action = load_action(&tx, id)?;
        let stale = |detail: String| ApprovalError::StaleTicket {
            id: id.to_string(),
            detail,
        };
        if action.run_id.as_deref() != Some(ticket.run_id.as_str()) {
            return Err(stale("a different run owns the action now".into()));
        }
        // Any other state with our run id means a later resume wrongly judged
        // this run dead (and perhaps someone re-approved or rejected it since).
        // The command did run, so the truth is recorded and it never runs again.
        if action.held.state == ActionState::Done {
            return Err(stale("the action is already done".into()));
        }
        match record_result(&tx, id, &ticket.run_id, result) {
            Err(ApprovalError::Database { source, .. }) if is_constraint(&source) => {
                Err(stale("a result is already recorded".into()))
            }
            other => other,
        }?;
        tx.commit().db("committing the run result")
    }
}

impl ApprovalStore {
    /// Records the result of a resume (run `run_id`) whose launcher died while
    /// landing an approved preview, once the caller has finished that landing
    /// from its journal, or given it up. The command ran exactly once (as the
    /// preview), so the action is done and never runs again. Only for a run
    /// that is over: `running` with its runner gone, or `interrupted` (its
    /// evidence was voided then; nothing is approved by this).
    pub fn finish_interrupted_landing(&self, id: &str, run_id: &str, result: &RecordedResult) -> Result<()> {
        if serde_json::from_str::<serde_json::Value>(&result.receipt_json).is_err() {
            return Err(ApprovalError::InvalidRequest(
                "the run receipt is not valid JSON, so it was not recorded.".into(),
            ));
        }
        let tx = self.immediate("recording an interrupted landing's result")?;
        let action = load_action(&tx, id)?;
        match action.held.state {
            ActionState::Running => refuse_if_runner_alive(&action, id)?,
            ActionState::Interrupted => {}
            other => {
                return Err(ApprovalError::InvalidRequest(format!(
                    "action {id} is {}, not an interrupted run; its landing is not recorded as finished.",
                    other.as_str()
                )))
            }
        }
        // The landing must be the one this action's last run began.
        if action.run_id.as_deref() != Some(run_id) {
            return Err(ApprovalError::StaleTicket {
                id: id.to_string(),
                detail: "the landing was begun by another run of the action".into(),
            });
        }
        record_result(&tx, id, run_id, result)?;
        tx.commit().db("committing the interrupted landing's result")
    }
}

// ---------------------------------------------------------------------------
// Row access
// ---------------------------------------------------------------------------

type RawResult<T> = std::result::Result<T, ApprovalError>;

fn read_action_columns(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawResult<ActionRow>> {
    let id: String = r.get(0)?;
    let state: String = r.get(4)?;
    let intent_json: String = r.get(5)?;
    let required: i64 = r.get(11)?;
    let Some(state) = ActionState::parse(&state) else {
        return Ok(Err(ApprovalError::Corrupt {
            what: format!("action {id} has the unknown state {state:?}"),
        }));
    };
    let intent: Intent = match serde_json::from_str(&intent_json) {
        Ok(intent) => intent,
        Err(e) => {
            return Ok(Err(ApprovalError::Corrupt {
                what: format!("action {id} has an unreadable intent ({e})"),
            }))
        }
    };
    let Ok(required_approvals) = u32::try_from(required) else {
        return Ok(Err(ApprovalError::Corrupt {
            what: format!("action {id} requires {required} approvals"),
        }));
    };
    Ok(Ok(ActionRow {
        held: HeldAction {
            session: r.get(1)?,
            position: i2u(r.get(2)?),
            idempotency_key: r.get(3)?,
            state,
            intent,
            policy_json: r.get(6)?,
            bindings: Bindings {
                policy_digest: r.get(7)?,
                env_instance_id: r.get(8)?,
                workspace_fingerprint: r.get(9)?,
                workspace_generation: i2u(r.get(10)?),
            },
            required_approvals,
            ttl_seconds: i2u(r.get(12)?),
            proposal_window: i2u(r.get(13)?),
            summary: r.get(14)?,
            created_unix_ms: i2u(r.get(15)?),
            rejection_reason: r.get(16)?,
            rejected_by: r.get(17)?,
            approvals: Vec::new(),
            id,
        },
        evidence_floor: r.get(18)?,
        run_id: r.get(19)?,
        runner_pid: r.get(20)?,
        runner_start: r.get(21)?,
        runner_boot: r.get(22)?,
    }))
}

fn load_action(conn: &Connection, id: &str) -> Result<ActionRow> {
    let mut stmt = conn
        .prepare_cached(&format!("SELECT {ACTION_COLUMNS} FROM actions WHERE id = ?1"))
        .db("reading an action")?;
    stmt.query_row([id], read_action_columns)
        .optional()
        .db("reading an action")?
        .ok_or_else(|| ApprovalError::NotFound { id: id.to_string() })?
}

fn load_held(conn: &Connection, id: &str) -> Result<HeldAction> {
    let mut action = load_action(conn, id)?;
    action.held.approvals = evidence_infos(conn, id)?;
    Ok(action.held)
}

fn evidence_rows(conn: &Connection, action: &str) -> Result<Vec<EvidenceRow>> {
    let mut stmt = conn.prepare_cached(EVIDENCE_QUERY).db("reading approval evidence")?;
    let rows = stmt
        .query_map([action], |r| {
            Ok(EvidenceRow {
                id: r.get(0)?,
                key_id: r.get(1)?,
                payload_json: r.get(2)?,
                signature: r.get(3)?,
                created_unix_ms: i2u(r.get(4)?),
                superseded: r.get::<_, i64>(5)? != 0,
                consumed: r.get(6)?,
            })
        })
        .db("reading approval evidence")?;
    rows.collect::<rusqlite::Result<Vec<_>>>()
        .db("reading approval evidence")
}

/// Evidence that can still count: not superseded and newer than the last
/// interruption.
fn current_evidence(conn: &Connection, action: &ActionRow) -> Result<Vec<EvidenceRow>> {
    Ok(evidence_rows(conn, &action.held.id)?
        .into_iter()
        .filter(|ev| !ev.superseded && ev.id > action.evidence_floor)
        .collect())
}

fn evidence_infos(conn: &Connection, action: &str) -> Result<Vec<EvidenceInfo>> {
    Ok(evidence_rows(conn, action)?
        .into_iter()
        .map(|ev| {
            let payload = serde_json::from_str::<EvidencePayload>(&ev.payload_json).ok();
            EvidenceInfo {
                evidence_id: ev.id,
                approver_key_id: ev.key_id,
                created_unix_ms: ev.created_unix_ms,
                expires_at_unix_ms: payload.as_ref().map(|p| p.expires_at_unix_ms),
                expires_at_proposal: payload.as_ref().map(|p| p.expires_at_proposal),
                superseded: ev.superseded,
                consumed: ev.consumed,
            }
        })
        .collect())
}

fn load_result(conn: &Connection, id: &str) -> Result<Option<RecordedResult>> {
    conn.query_row(
        "SELECT exit_code, signal, timed_out, duration_ms, receipt_json FROM results \
         WHERE action = ?1",
        [id],
        |r| {
            Ok(RecordedResult {
                exit_code: r.get(0)?,
                signal: r.get(1)?,
                timed_out: r.get(2)?,
                duration_ms: i2u(r.get(3)?),
                receipt_json: r.get(4)?,
            })
        },
    )
    .optional()
    .db("reading the recorded result")
}

fn set_state(conn: &Connection, id: &str, state: ActionState) -> Result<()> {
    conn.execute(
        "UPDATE actions SET state = ?2, updated_unix_ms = ?3 WHERE id = ?1",
        params![id, state.as_str(), u2i(now_unix_ms())],
    )
    .db("updating the action state")?;
    Ok(())
}

fn bump_proposals(conn: &Connection, session: &str, now: u64) -> Result<u64> {
    let n: i64 = conn
        .query_row(
            "INSERT INTO sessions (id, proposals, created_unix_ms) VALUES (?1, 1, ?2) \
             ON CONFLICT(id) DO UPDATE SET proposals = proposals + 1 RETURNING proposals",
            params![session, u2i(now)],
            |r| r.get(0),
        )
        .db("counting a proposal")?;
    Ok(i2u(n))
}

/// `<state>/proposals/<digest of the session id>`: one byte per proposal.
fn proposal_file(state_dir: &Path, session: &str) -> PathBuf {
    state_dir.join("proposals").join(&sha256_hex(session.as_bytes())[..32])
}

/// Counts one proposal of `session` that is not a hold (holds are counted in
/// the database, in the hold's own transaction): one byte appended to the
/// session's file. A run with a session counts its proposal this way, with
/// no database to open: `O_APPEND` makes concurrent runs each add their
/// byte, and, like every commit of the store, the byte survives a killed
/// process and only a new boot could lose it, after which no approval holds.
pub fn record_proposal(state_dir: &Path, session: &str) -> Result<()> {
    validate_session(session)?;
    let path = proposal_file(state_dir, session);
    let io = |source| ApprovalError::Io {
        action: "count the proposal",
        path: path.clone(),
        source,
    };
    let open = || {
        OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
    };
    let mut f = match open() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(path.parent().expect("has a parent"))
                .map_err(io)?;
            open()
        }
        other => other,
    }
    .map_err(io)?;
    f.write_all(b"1").map_err(io)
}

fn appended_proposals(state_dir: &Path, session: &str) -> Result<u64> {
    let path = proposal_file(state_dir, session);
    match std::fs::symlink_metadata(&path) {
        Ok(m) => Ok(m.len()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(source) => Err(ApprovalError::Io {
            action: "read the proposal count",
            path,
            source,
        }),
    }
}

/// Stores `run_id`'s result for the action and marks it done (within the
/// caller's transaction). An action has one result: a second is a
/// constraint error.
fn record_result(tx: &Connection, id: &str, run_id: &str, result: &RecordedResult) -> Result<()> {
    let now = now_unix_ms();
    tx.execute(
        "INSERT INTO results (action, run_id, exit_code, signal, timed_out, duration_ms, \
         receipt_json, finished_unix_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        params![
            id,
            run_id,
            result.exit_code,
            result.signal,
            result.timed_out,
            u2i(result.duration_ms),
            result.receipt_json,
            u2i(now)
        ],
    )
    .db("storing the run result")?;
    tx.execute(
        "UPDATE actions SET state = 'done', runner_pid = NULL, runner_start = NULL, \
         runner_boot = NULL, updated_unix_ms = ?2 WHERE id = ?1",
        params![id, u2i(now)],
    )
    .db("marking the action done")?;
    Ok(())
}

fn proposals_of(conn: &Connection, session: &str) -> Result<u64> {
    let n: Option<i64> = conn
        .query_row("SELECT proposals FROM sessions WHERE id = ?1", [session], |r| r.get(0))
        .optional()
        .db("reading the session's proposal count")?;
    Ok(n.map(i2u).unwrap_or(0))
}

fn new_session_id(conn: &Connection) -> Result<String> {
    loop {
        let id = random_id("ses_", 4)?;
        let taken: bool = conn
            .query_row("SELECT EXISTS (SELECT 1 FROM sessions WHERE id = ?1)", [&id], |r| {
                r.get(0)
            })
            .db("choosing a session id")?;
        if !taken {
            return Ok(id);
        }
    }
}

fn trusted_key(conn: &Connection, key_id: &str) -> Result<Option<[u8; 32]>> {
    let bytes: Option<Vec<u8>> = conn
        .query_row(
            "SELECT public_key FROM trusted_approvers WHERE key_id = ?1",
            [key_id],
            |r| r.get(0),
        )
        .optional()
        .db("looking up a trusted approver")?;
    match bytes {
        None => Ok(None),
        Some(bytes) => {
            let key: [u8; 32] = bytes.try_into().map_err(|_| ApprovalError::Corrupt {
                what: format!("the trusted public key {key_id} is not 32 bytes"),
            })?;
            if key_id_for(&key) != key_id {
                return Err(ApprovalError::Corrupt {
                    what: format!("the trusted public key stored as {key_id} has another key id"),
                });
            }
            Ok(Some(key))
        }
    }
}

fn require_trusted(conn: &Connection, key: &ApproverKey) -> Result<()> {
    let key_id = key.key_id();
    match trusted_key(conn, &key_id)? {
        Some(pk) if pk == key.public_bytes() => Ok(()),
        Some(_) => Err(ApprovalError::TrustConflict { key_id }),
        None => Err(ApprovalError::UntrustedApprover { key_id }),
    }
}

// ---------------------------------------------------------------------------
// Verification
// ---------------------------------------------------------------------------

/// Checks that `ev` was signed by a trusted key over its stored payload and
/// returns the parsed payload. Says nothing yet about what it is bound to.
fn verify_evidence(conn: &Connection, action: &str, ev: &EvidenceRow) -> Result<EvidencePayload> {
    let public = trusted_key(conn, &ev.key_id)?.ok_or_else(|| ApprovalError::UnknownApprover {
        id: action.to_string(),
        evidence: ev.id,
        key_id: ev.key_id.clone(),
    })?;
    let bad_signature = || ApprovalError::BadSignature {
        id: action.to_string(),
        evidence: ev.id,
        key_id: ev.key_id.clone(),
    };
    let verifying = VerifyingKey::from_bytes(&public).map_err(|_| bad_signature())?;
    let signature = Signature::from_slice(&ev.signature).map_err(|_| bad_signature())?;
    verifying
        .verify_strict(&signing_message(&ev.payload_json), &signature)
        .map_err(|_| bad_signature())?;

    let malformed = |problem: String| ApprovalError::MalformedEvidence {
        id: action.to_string(),
        evidence: ev.id,
        problem,
    };
    let payload: EvidencePayload =
        serde_json::from_str(&ev.payload_json).map_err(|e| malformed(format!("unreadable payload: {e}")))?;
    if payload.to_canonical_json() != ev.payload_json {
        return Err(malformed("the payload is not in canonical form".into()));
    }
    if payload.version != EVIDENCE_VERSION {
        return Err(malformed(format!(
            "payload version {} is not supported",
            payload.version
        )));
    }
    if payload.approver_key_id != ev.key_id {
        return Err(ApprovalError::EvidenceMismatch {
            id: action.to_string(),
            evidence: ev.id,
            mismatches: format!(
                "approver key id (signed {}, stored {})",
                payload.approver_key_id, ev.key_id
            ),
        });
    }
    Ok(payload)
}

fn stored_mismatches(held: &HeldAction, intent_digest: &str, p: &EvidencePayload) -> Vec<String> {
    let mut out = Vec::new();
    let mut check = |name: &str, signed: &str, stored: &str| {
        if signed != stored {
            out.push(format!("{name} (signed {}, stored {})", clip(signed), clip(stored)));
        }
    };
    check("action id", &p.action_id, &held.id);
    check("session", &p.session, &held.session);
    check("idempotency key", &p.idempotency_key, &held.idempotency_key);
    check("position", &p.position.to_string(), &held.position.to_string());
    check("intent digest", &p.intent_digest, intent_digest);
    check("policy digest", &p.policy_digest, &held.bindings.policy_digest);
    check(
        "environment instance id",
        &p.env_instance_id,
        &held.bindings.env_instance_id,
    );
    check(
        "workspace fingerprint",
        &p.workspace_fingerprint,
        &held.bindings.workspace_fingerprint,
    );
    check(
        "workspace generation",
        &p.workspace_generation.to_string(),
        &held.bindings.workspace_generation.to_string(),
    );
    out
}

fn current_changes(held: &HeldAction, current: &Current) -> Vec<String> {
    let mut out = Vec::new();
    if current.session != held.session {
        out.push(format!(
            "session changed from {} to {}",
            clip(&held.session),
            clip(&current.session)
        ));
    }
    out.extend(held.intent.changes_to(&current.intent));
    let (a, b) = (&held.bindings, &current.bindings);
    if a.policy_digest != b.policy_digest {
        out.push(format!(
            "policy digest changed from {} to {} (the rules of a policy file changed)",
            short(&a.policy_digest),
            short(&b.policy_digest)
        ));
    }
    if a.env_instance_id != b.env_instance_id {
        out.push(format!(
            "environment instance id changed from {} to {} (another boot, state directory or workspace path)",
            clip(&a.env_instance_id),
            clip(&b.env_instance_id)
        ));
    }
    if a.workspace_fingerprint != b.workspace_fingerprint {
        out.push(format!(
            "workspace fingerprint changed from {} to {} (an entry of the workspace was added, removed or written since the hold)",
            short(&a.workspace_fingerprint),
            short(&b.workspace_fingerprint)
        ));
    }
    if a.workspace_generation != b.workspace_generation {
        out.push(format!(
            "workspace generation changed from {} to {} (a writable run in the workspace, or one overlapping it, ended since)",
            a.workspace_generation, b.workspace_generation
        ));
    }
    out
}

// ---------------------------------------------------------------------------
// Runner liveness
// ---------------------------------------------------------------------------

/// (pid, start time in clock ticks since boot, boot id) of this process.
fn runner_identity() -> (i64, Option<String>, Option<String>) {
    let pid = std::process::id();
    (i64::from(pid), proc_stat(pid).map(|(_, start)| start), boot_id())
}

fn proc_stat(pid: u32) -> Option<(char, String)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    // Field 3 was the state; field 22 is the start time.
    let start = fields.nth(18)?;
    Some((state, start.to_string()))
}

fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// Whether the process recorded as running an action still exists. Errs
/// towards "dead", which only ever makes an action need a fresh approval.
/// A running action's runner still alive: nobody else may touch it.
fn refuse_if_runner_alive(action: &ActionRow, id: &str) -> Result<()> {
    let pid = action.runner_pid.unwrap_or(0);
    if runner_alive(pid, &action.runner_start, &action.runner_boot) {
        return Err(ApprovalError::AlreadyRunning {
            id: id.to_string(),
            pid,
        });
    }
    Ok(())
}

fn runner_alive(pid: i64, start: &Option<String>, boot: &Option<String>) -> bool {
    let Ok(pid) = u32::try_from(pid) else {
        return false;
    };
    if pid == 0 {
        return false;
    }
    if let (Some(recorded), Some(now)) = (boot, boot_id()) {
        if *recorded != now {
            return false;
        }
    }
    match proc_stat(pid) {
        Some((state, started)) => !matches!(state, 'Z' | 'X') && start.as_ref().is_none_or(|s| *s == started),
        None if Path::new("/proc/self/stat").exists() => false,
        None => {
            let Ok(pid) = libc::pid_t::try_from(pid) else {
                return false;
            };
            // Signal 0 only checks for existence and permission.
            match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) {
                Ok(()) | Err(nix::errno::Errno::EPERM) => true,
                Err(_) => false,
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Small helpers
// ---------------------------------------------------------------------------

fn canonical_json<T: Serialize + ?Sized>(value: &T) -> String {
    // Serializing these plain structs of strings and integers cannot fail.
    serde_json::to_string(value).expect("serializing plain data cannot fail")
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

fn fill_random(buf: &mut [u8]) -> Result<()> {
    getrandom::fill(buf).map_err(|e| ApprovalError::Randomness { detail: e.to_string() })
}

fn random_id(prefix: &str, bytes: usize) -> Result<String> {
    let mut buf = vec![0u8; bytes];
    fill_random(&mut buf)?;
    Ok(format!("{prefix}{}", hex(&buf)))
}

fn wipe(secret: &mut [u8; 32]) {
    secret.fill(0);
    // Keep the compiler from dropping the zeroing as a dead store.
    std::hint::black_box(&secret);
    std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
}

fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

fn validate_session(session: &str) -> Result<()> {
    if session.is_empty() || session.len() > MAX_SESSION_ID_LEN || session.chars().any(char::is_control) {
        return Err(ApprovalError::InvalidRequest(format!(
            "a session id must be 1 to {MAX_SESSION_ID_LEN} bytes without control characters, not {}.",
            clip(&canonical_json(session))
        )));
    }
    Ok(())
}

/// SQLite integers are signed; u64 values round-trip through a bit cast.
fn u2i(v: u64) -> i64 {
    v as i64
}

fn i2u(v: i64) -> u64 {
    v as u64
}

/// At most 120 characters of `s`, for messages.
fn clip(s: &str) -> String {
    const MAX: usize = 120;
    if s.chars().count() <= MAX {
        s.to_string()
    } else {
        let mut out: String = s.chars().take(MAX).collect();
        out.push('…');
        out
    }
}

/// The first 16 characters of a digest, for messages.
fn short(s: &str) -> String {
    if s.chars().count() <= 16 {
        s.to_string()
    } else {
        let mut out: String = s.chars().take(16).collect();
        out.push('…');
        out
    }
}
