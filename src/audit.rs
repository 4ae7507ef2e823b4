//! Tamper-evident audit log of what the launcher decided and ran.
//!
//! # Threat model
//!
//! The launcher writes every record on the host, into `<state_dir>/audit/`,
//! a directory that sandboxed commands cannot see. Later an operator must be
//! able to prove what happened and to notice any edit. We assume an attacker
//! who can write `log.jsonl` (a bug, a careless backup restore, an agent that
//! escaped its sandbox for a moment, a curious colleague) but who cannot read
//! or write the host signing key `host.key`. Such an attacker must be
//! detected when they edit one byte of a record, delete a record, swap two
//! records, cut the tail of the log, or append a forged record.
//!
//! # Design
//!
//! Three independent pieces of evidence, each covering a gap in the others:
//!
//! * **Hash chain** (`log.jsonl`). Every record carries `hash`, the SHA-256 of
//!   its own canonical serialization without `hash`, and `prev`, the hash of
//!   the record before it (64 zeros for seq 1). Editing, deleting or swapping
//!   records breaks the chain at the first affected record. `verify` hashes
//!   each line's bytes as they stand, minus the `"hash":"…"` member: for a
//!   line we wrote that is exactly the canonical serialization, and this way
//!   every byte is covered, even one a JSON parser would skip. The chain
//!   alone is unkeyed: someone who can write the log can recompute it, and
//!   it says nothing about records cut from the end.
//! * **Head** (`head`, and `audit.sqlite` table `head`). The seq and hash of
//!   the last committed record, and the log's length after it (the length
//!   lets an append see with one `fstat` that the log is not what the head
//!   says). It catches a cut tail (log shorter than the head), a rewritten
//!   last record (hash differs from the head) and forged records appended
//!   after it (log longer than the head). The head file is rewritten with
//!   every record: one fixed-width line with a checksum of its own, written
//!   with one `pwrite` at offset 0, which a killed process either made or
//!   did not make. The database holds the head as of the last checkpoint,
//!   written in the same transaction as the checkpoint; `verify` and an
//!   append take whichever of the two is further on. Why not the database
//!   alone, updated with every record, as the first design had it: every
//!   command is a new process, and opening SQLite there (the WAL index
//!   rebuilt in shared memory, the schema parsed) cost about 0.6 ms of CPU a
//!   launch, competing for the cores with the sandbox being built, where
//!   the whole append protocol on files costs tens of microseconds. The
//!   evidence is the same: both files sit in the same directory with the
//!   same owner, so whoever can rewrite one can rewrite the other.
//! * **Signed checkpoints** (table `checkpoints`). Every 256 records, and on
//!   [`AuditLog::checkpoint`], the host key signs
//!   `"tether-exec audit checkpoint v1\n{seq}\n{hash}"`. Because `hash`
//!   chains over every earlier record, one signature vouches for the whole
//!   prefix. This is what still holds when an attacker rewrites the log *and*
//!   the database consistently: they cannot produce a signature over their
//!   new hashes, and removing a checkpoint that a multiple of 256 requires is
//!   itself reported. Signing per checkpoint instead of per record keeps
//!   appends cheap and verification of 100,000 records well under a second
//!   (SHA-256 per record, Ed25519 only per checkpoint).
//!
//! # Append protocol
//!
//! An exclusive `flock` on the audit directory serializes appends across
//! threads and processes (the directory, because it is the one thing in it
//! that cannot be swapped for another file). Under it we read the head,
//! check that `log.jsonl` is still the file and the length the head
//! describes, compute the record, write the line with one `write` on an
//! `O_APPEND` descriptor, then write the head file, which commits the
//! record. Every 256th record first commits a signed checkpoint and the
//! head to the database, in one transaction, which is then its commit
//! point: a process killed after that commit and before the head file's
//! write leaves the head file one record behind, and the next append rolls
//! it forward from the database. Writing the line before the head means a
//! failure at any step leaves the head describing the old, intact log; we
//! also cut a partially written line back off. A process killed between
//! the write and the commit leaves a line past the head, which `verify`
//! reports as [`ProblemKind::ForgedAppend`] because it cannot tell it from
//! a forgery; the next append moves such a tail to
//! `quarantine-<seq>-<nanos>.jsonl` (kept as evidence, still reported by
//! `verify` until an operator reviews and removes it) so that one crash
//! does not stop all future commands. A log *shorter* than the head is
//! never repaired automatically: appending would bury the gap, so `append`
//! fails closed instead. So does a head file that is not a head (edited,
//! or torn by a power cut); moving it aside makes the next append start
//! from the database's last checkpoint, keeping the later records in a
//! quarantine file.
//!
//! Every failure to write is an error, never a panic or a silent skip: the
//! caller must refuse to run a command it could not record. `verify` takes
//! the lock, shared, just long enough to read the heads, the checkpoints and
//! the log, so that an append caught between its write and its commit is
//! not mistaken for a forgery; the hashing happens after the lock is
//! released.
//!
//! # Durability trade-off
//!
//! We do not fsync the log and the head file with every record: an fsync
//! per record costs milliseconds, which would dominate the launcher's own
//! overhead. The price is that a power loss can drop the last records from
//! the log or the head. Both directions are detected, not hidden: a short
//! log is reported as `Truncated`, a log ahead of the head as
//! `ForgedAppend`. Every 256th record syncs the log, then commits its
//! checkpoint with `synchronous=FULL`: what a signed checkpoint vouches for
//! is on disk, and a power cut never leaves a required checkpoint missing.
//! An operator who needs hard durability can copy checkpoints off the host.
//!
//! # What `verify` reports
//!
//! The first problem found, walking the log from line 1, as a [`Problem`]
//! whose `seq` is the sequence number that should be at that position and
//! `line` the 1-based line in `log.jsonl`:
//!
//! * `Unreadable`: the line is not a record at all (bad UTF-8 or JSON, a
//!   missing field); a one-byte edit that breaks the syntax lands here.
//! * `Edited`: the record's hash does not match its content, the line is not
//!   in canonical form (an added field, changed spacing), the next record
//!   does not link to it although it is self-consistent (rewritten with a
//!   recomputed hash), it differs from the head, or a valid signed
//!   checkpoint vouches for a different hash (log and heads rewritten).
//!   Also a head file that is not a head (its `line` is 0), reported once
//!   nothing else is wrong, after a walk against the database's head.
//! * `Missing`: the seq jumps and the skipped record is nowhere in the log.
//! * `Reordered`: the seq or `prev` points at a record that does exist, but
//!   elsewhere in the log.
//! * `Truncated`: the log ends before the head, or before a validly
//!   signed checkpoint (which still catches a head rolled back with the log).
//! * `ForgedAppend`: records past the head and past every signed
//!   checkpoint, or a quarantined tail (see above for the benign cause).
//! * `BadCheckpoint`: a checkpoint signature does not verify with `host.pub`,
//!   a required checkpoint (every multiple of 256 up to the head) is absent,
//!   or the head lies behind a signed checkpoint.
//!
//! Limits: an attacker who can write the log, the head file and the
//! database can cut the log back to any record, by also deleting the
//! checkpoints after it (nothing on the host tells how many there were),
//! and rewrite or forge every record after that point; the launcher then
//! signs the rewritten chain at its next checkpoint. Without deleting
//! checkpoints, the records after the last one are still open to that.
//! Only checkpoints copied off the host close the window. The key files are
//! checked to belong to the audit directory's owner and to each other, so
//! a key pair put in their place by someone else is reported. Nothing here
//! helps against someone holding the host key, or the owner's account.
//!
//! # Redaction
//!
//! Commands are written after [`redact`]; `command_digest` is the SHA-256 of
//! the command *before* redaction, so an operator holding the real command
//! can still prove it matches. Over-redaction only costs readability (the
//! digest keeps the proof), so the rules lean towards redacting. Replaced by
//! `***`:
//!
//! * the value of `--password`, `--passwd`, `--token`, `--secret`,
//!   `--api-key`, `--apikey`, `--access-token`, `--auth`, and of any long
//!   flag ending in `-password`, `-passwd`, `-token`, `-secret`, `-api-key`
//!   or `-apikey`, as `--flag=value` or `--flag value`. In the second form
//!   a following word that starts with `-` is taken to be the next option,
//!   not a value.
//! * `-p…` is **not** redacted: `-p` means port, parallelism, parents or
//!   print as often as it means password.
//! * the credential of an `Authorization:` or `Proxy-Authorization:` header
//!   (the scheme, e.g. `Bearer`, is kept), and the value of any header-like
//!   `Name: value` whose name ends in `token`, `api-key`, `apikey`, `secret`
//!   or `password`, and the string value of a JSON key that would count as
//!   a secret NAME below (`{"api_key": "…"}`).
//! * the value in `NAME=value` when NAME (letters, digits, `_`, `.`) contains,
//!   ignoring case, SECRET, TOKEN, PASSWORD, PASSWD, API_KEY, APIKEY,
//!   ACCESS_KEY, PRIVATE_KEY or CREDENTIAL. This also covers `-e NAME=…`,
//!   `-Dapp.password=…` and `?token=…` query parameters. Shell quoting is
//!   followed, so `NAME="a b"` hides `a b` whole; inside a quoted string a
//!   value ends at the closing quote or at `;` `&` `|` or a newline. Names
//!   like `MAX_TOKENS` are redacted too, on purpose.
//! * the password in URL user info, `scheme://user:password@host` (the user
//!   name is kept).
//! * strings shaped like credentials, keeping their telltale prefix so the
//!   operator knows what to rotate: `sk-` plus 20 or more characters,
//!   `ghp_` `gho_` `ghs_` `ghu_` `ghr_` plus 20 or more, `github_pat_` plus
//!   20 or more, `xoxb-` `xoxa-` `xoxp-` plus 10 or more, `AKIA` plus exactly
//!   16 of `[0-9A-Z]`, `AIza` plus 35 or more, and JWTs `eyJ….eyJ….…`.
//!
//! Not redacted: words that merely mention a secret without carrying one,
//! such as `pytest -k password_test`, `echo $TOKEN` or `grep -r AKIA src/`.
//!
//! All scanners are small hand-written loops over bytes (no regex engine);
//! every boundary they cut at is an ASCII byte, so the result is valid UTF-8.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use rusqlite::{Connection, OpenFlags};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

const AUDIT_DIR: &str = "audit";
const LOG_FILE: &str = "log.jsonl";
const DB_FILE: &str = "audit.sqlite";
const HEAD_FILE: &str = "head";
const HEAD_MAGIC: &str = "tether-exec audit head v1";
const KEY_FILE: &str = "host.key";
const PUB_FILE: &str = "host.pub";
const QUARANTINE_PREFIX: &str = "quarantine-";
const CHECKPOINT_INTERVAL: u64 = 256;
const CHECKPOINT_CONTEXT: &str = "tether-exec audit checkpoint v1";
const GENESIS_PREV: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// Sixteen launchers appending at once queue on SQLite's write lock; each
/// append holds it for tens of microseconds, so a generous timeout only
/// matters when something is badly stuck, and then failing (closed) is right.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// Schema migrations, applied in order; `PRAGMA user_version` counts how
/// many have run. `head.log_len` lets an append notice, with one `fstat`,
/// that the log is not the file the database describes.
const MIGRATIONS: &[&str] = &[
    "CREATE TABLE head(
         id INTEGER PRIMARY KEY CHECK(id = 1),
         seq INTEGER NOT NULL,
         hash TEXT NOT NULL,
         log_len INTEGER NOT NULL
     );
     INSERT INTO head(id, seq, hash, log_len)
         VALUES (1, 0, '0000000000000000000000000000000000000000000000000000000000000000', 0);
     CREATE TABLE checkpoints(
         seq INTEGER PRIMARY KEY,
         hash TEXT NOT NULL,
         signature TEXT NOT NULL
     );",
    // Set by the first checkpoint of a build that keeps the head file: from
    // then on a missing head file is damage, not a directory to carry over.
    // Earlier builds refuse the newer schema rather than append without the
    // head file.
    "ALTER TABLE head ADD COLUMN head_file INTEGER NOT NULL DEFAULT 0;",
];

/// One error type for writing, reading and verifying the audit log.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
    #[error("audit database: {0}")]
    Db(#[from] rusqlite::Error),
    #[error("audit database {path}: {source}; `tether-exec audit verify` reports what is wrong with the log")]
    DbAt {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error("audit record encoding: {0}")]
    Json(#[from] serde_json::Error),
    #[error("audit host key {path}: {message}")]
    Key { path: PathBuf, message: String },
    #[error(
        "audit database schema version {found} is newer than this build understands ({supported}); upgrade tether-exec"
    )]
    SchemaTooNew { found: i64, supported: i64 },
    #[error("{path}: {message}; refusing to append (run `audit verify`)")]
    LogMismatch { path: PathBuf, message: String },
    #[error("no audit log under {0}")]
    NotFound(PathBuf),
    #[error("{path}:{line}: not an audit record: {message}")]
    Corrupt { path: PathBuf, line: u64, message: String },
}

fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> AuditError {
    let context = context.into();
    move |source| AuditError::Io { context, source }
}

/// What kind of event a record describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    Decision,
    Held,
    Approved,
    Rejected,
    RunStart,
    RunEnd,
    Commit,
    Rollback,
    SetupFailure,
    ResumeRefused,
}

impl EntryKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EntryKind::Decision => "decision",
            EntryKind::Held => "held",
            EntryKind::Approved => "approved",
            EntryKind::Rejected => "rejected",
            EntryKind::RunStart => "run_start",
            EntryKind::RunEnd => "run_end",
            EntryKind::Commit => "commit",
            EntryKind::Rollback => "rollback",
            EntryKind::SetupFailure => "setup_failure",
            EntryKind::ResumeRefused => "resume_refused",
        }
    }
}

/// Workspace changes a run made (or that a rollback undid).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Changes {
    pub count: u64,
    pub digest: String,
    #[serde(default)]
    pub rolled_back: Vec<String>,
}

/// The payload of one record. Field order here is part of the hashed
/// canonical form: append new fields at the end, never reorder.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditEntry {
    pub kind: EntryKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// `"harness"` or `"approver:<key id>"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_digest: Option<String>,
    /// Normalized command text; [`AuditLog::append`] redacts it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// SHA-256 (hex) of the unredacted command; [`AuditLog::append`] sets it
    /// whenever `command` is present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command_digest: Option<String>,
    /// Digest of stdin supplied by the caller; stdin itself is never logged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin_digest: Option<String>,
    /// `"allow"`, `"ask"` or `"deny"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approver_key_ids: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timed_out: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changes: Option<Changes>,
    /// Free text; redacted like `command`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl AuditEntry {
    /// An entry of `kind` with every optional field empty.
    pub fn new(kind: EntryKind) -> AuditEntry {
        AuditEntry {
            kind,
            session: None,
            actor: None,
            policy_digest: None,
            command: None,
            command_digest: None,
            stdin_digest: None,
            decision: None,
            rules: None,
            approval_id: None,
            approver_key_ids: None,
            isolation: None,
            exit_code: None,
            signal: None,
            timed_out: None,
            duration_ms: None,
            changes: None,
            detail: None,
        }
    }
}

/// One line of `log.jsonl`: chain fields, then the flattened payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    pub seq: u64,
    /// RFC 3339, UTC, milliseconds: `2026-01-31T23:59:59.123Z`.
    pub time: String,
    pub prev: String,
    pub hash: String,
    #[serde(flatten)]
    pub entry: AuditEntry,
}

/// The definition of what `hash` covers: the record without `hash`, as
/// `serde_json::to_string` of this struct (fields in this order). [`Encoded`]
/// produces the same bytes faster; a unit test holds the two together.
#[cfg(test)]
#[derive(Serialize)]
struct CanonicalBody<'a> {
    seq: u64,
    time: &'a str,
    prev: &'a str,
    #[serde(flatten)]
    entry: &'a AuditEntry,
}

/// A record split in two so that the hashed body and the written line are
/// the same bytes by construction, and so that verifying needs one payload
/// serialization and no `#[serde(flatten)]` buffering (which would make
/// verifying 100,000 records several times slower):
/// body = `{prefix},{payload without its brace}`,
/// line = `{prefix},"hash":"{hash}",{payload without its brace}`.
struct Encoded {
    /// `{"seq":1,"time":"…","prev":"…"`
    prefix: String,
    /// The payload as its own JSON object, `{"kind":"…",…}`.
    payload: String,
}

impl Encoded {
    fn new(seq: u64, time: &str, prev: &str, entry: &AuditEntry) -> Result<Encoded, serde_json::Error> {
        let mut prefix = String::with_capacity(160);
        prefix.push_str("{\"seq\":");
        prefix.push_str(&seq.to_string());
        prefix.push_str(",\"time\":");
        prefix.push_str(&serde_json::to_string(time)?);
        prefix.push_str(",\"prev\":");
        prefix.push_str(&serde_json::to_string(prev)?);
        Ok(Encoded {
            prefix,
            payload: serde_json::to_string(entry)?,
        })
    }

    /// The payload's fields and closing brace; `kind` is always present, so
    /// the object is never empty.
    fn fields(&self) -> &str {
        &self.payload[1..]
    }

    fn hash(&self) -> String {
        let mut hasher = Sha256::new();
        hasher.update(self.prefix.as_bytes());
        hasher.update(b",");
        hasher.update(self.fields().as_bytes());
        hex::encode(hasher.finalize())
    }

    fn hash_field(hash: &str) -> String {
        format!(",\"hash\":\"{hash}\",")
    }

    fn line(&self, hash: &str) -> Vec<u8> {
        [self.prefix.as_str(), &Self::hash_field(hash), self.fields(), "\n"]
            .concat()
            .into_bytes()
    }
}

fn checkpoint_message(seq: u64, hash: &str) -> String {
    format!("{CHECKPOINT_CONTEXT}\n{seq}\n{hash}")
}

/// Outcome of [`verify`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    /// Records checked and found intact, in order, before the first problem
    /// (all of them when `problem` is `None`).
    pub records: u64,
    /// Signed checkpoints whose signature and hash matched the log.
    pub checkpoints: u64,
    /// The first problem found, if any.
    pub problem: Option<Problem>,
}

/// The first bad spot in the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// The sequence number that belongs at this position.
    pub seq: u64,
    /// 1-based line in `log.jsonl` (one past the end when records are
    /// missing from the end).
    pub line: u64,
    pub kind: ProblemKind,
    pub detail: String,
}

/// How the log differs from what the launcher wrote; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProblemKind {
    Edited,
    Missing,
    Reordered,
    Truncated,
    ForgedAppend,
    BadCheckpoint,
    Unreadable,
}

/// Writer for one state directory. Several may be open on the same
/// directory, in one process or many; appends are serialized by an
/// exclusive `flock` on the audit directory (see "Append protocol").
pub struct AuditLog {
    dir: PathBuf,
    log_path: PathBuf,
    log: File,
    head_path: PathBuf,
    head_file: File,
    /// The audit directory itself, opened for its lock: the one file an
    /// attacker cannot swap for another without replacing the directory.
    dir_handle: File,
    /// Opened when a checkpoint is due or the head must be looked up in it:
    /// once every 256 records, not on every launch (see "Design").
    conn: Option<Connection>,
    /// Loaded when a checkpoint is signed (every 256 records), not on every
    /// open: deriving the public half costs a scalar multiplication per launch.
    key: std::cell::OnceCell<SigningKey>,
    /// This boot's id, read at the first append.
    boot: std::cell::OnceCell<String>,
}

/// The head an append starts from, and whether it was written in this boot
/// (see [`HeadLine`]).
struct CurrentHead {
    head: Head,
    this_boot: bool,
}

impl Drop for AuditLog {
    fn drop(&mut self) {
        if let Some(conn) = &self.conn {
            crate::state::keep_wal_short(conn, &self.dir.join(DB_FILE));
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Head {
    seq: u64,
    hash: String,
    log_len: u64,
}

impl Head {
    fn genesis() -> Head {
        Head {
            seq: 0,
            hash: GENESIS_PREV.to_string(),
            log_len: 0,
        }
    }
}

/// What the head file holds: the head, and the boot it was written in.
/// Within one boot the page cache keeps the head file, the log and the
/// database consistent with each other whatever process dies; across a
/// power cut any of them may have lost writes, so the first append after a
/// reboot also consults the database (see `align_log_with_head`).
struct HeadLine {
    head: Head,
    boot: String,
}

/// Stands for a boot id that could not be read: it never matches, so every
/// append consults the database, which is slower but never wrong.
const UNKNOWN_BOOT: &str = "------------------------------------";

/// This boot's id, as the kernel names it, or [`UNKNOWN_BOOT`].
fn current_boot() -> String {
    fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| s.len() == UNKNOWN_BOOT.len() && s.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-'))
        .unwrap_or_else(|| UNKNOWN_BOOT.to_string())
}

/// The head file's one line: fixed width, so that every update is one
/// `pwrite` of the same length at offset 0, which a killed process either
/// made or did not make, and which fits in one disk sector.
fn encode_head(head: &Head, boot: &str) -> Vec<u8> {
    let body = format!(
        "{HEAD_MAGIC} seq={:020} log_len={:020} hash={} boot={boot}",
        head.seq, head.log_len, head.hash
    );
    let check = hex::encode(&Sha256::digest(body.as_bytes())[..8]);
    format!("{body} check={check}\n").into_bytes()
}

/// Reads a head file's content: `Ok(None)` for an empty file (never
/// written), an error saying what is wrong for anything that is not a line
/// [`encode_head`] wrote.
fn decode_head(bytes: &[u8]) -> Result<Option<HeadLine>, String> {
    if bytes.is_empty() {
        return Ok(None);
    }
    let bad = |what: &str| {
        Err(format!(
            "{what} (expected one line `{HEAD_MAGIC} seq=… log_len=… hash=… boot=… check=…`)"
        ))
    };
    let Ok(text) = std::str::from_utf8(bytes) else {
        return bad("not text");
    };
    let Some(line) = text.strip_suffix('\n').filter(|l| !l.contains('\n')) else {
        return bad("not exactly one line");
    };
    let Some((body, check)) = line.rsplit_once(" check=") else {
        return bad("no check field");
    };
    if hex::encode(&Sha256::digest(body.as_bytes())[..8]) != check {
        return bad("its check does not match its content: it was edited or torn");
    }
    let fields: Vec<&str> = body.strip_prefix(HEAD_MAGIC).unwrap_or("").split(' ').collect();
    let [_, seq, log_len, hash, boot] = fields.as_slice() else {
        return bad("wrong layout");
    };
    let number = |field: &str, name: &str| field.strip_prefix(name).and_then(|v| v.parse::<u64>().ok());
    match (
        number(seq, "seq="),
        number(log_len, "log_len="),
        hash.strip_prefix("hash=")
            .filter(|h| decode_hex32(h.as_bytes()).is_some()),
        boot.strip_prefix("boot="),
    ) {
        (Some(seq), Some(log_len), Some(hash), Some(boot)) => Ok(Some(HeadLine {
            head: Head {
                seq,
                hash: hash.to_string(),
                log_len,
            },
            boot: boot.to_string(),
        })),
        _ => bad("a field is malformed"),
    }
}

/// Holds the audit directory's `flock` until dropped. It keeps the
/// descriptor's number, not a borrow: the handle is owned by the
/// [`AuditLog`] (or the caller) that outlives the guard.
struct DirLock(std::os::fd::RawFd);

impl Drop for DirLock {
    fn drop(&mut self) {
        // SAFETY: flock on a descriptor its owner keeps open for the guard's
        // life; closing it would release the lock too, so a failure here
        // cannot leave the lock held for longer than the descriptor.
        unsafe { libc::flock(self.0, libc::LOCK_UN) };
    }
}

/// Takes the directory's lock, shared (readers) or exclusive (appends).
/// Polls rather than blocks, so that a holder stuck for `BUSY_TIMEOUT`
/// makes this fail (closed) with a message instead of hanging the launcher.
fn lock_dir(handle: &File, dir: &Path, exclusive: bool) -> Result<DirLock, AuditError> {
    let mode = if exclusive { libc::LOCK_EX } else { libc::LOCK_SH };
    let deadline = Instant::now() + BUSY_TIMEOUT;
    let mut pause = Duration::from_micros(20);
    loop {
        // SAFETY: flock on a descriptor we own, with valid flags.
        if unsafe { libc::flock(handle.as_raw_fd(), mode | libc::LOCK_NB) } == 0 {
            return Ok(DirLock(handle.as_raw_fd()));
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::WouldBlock && err.raw_os_error() != Some(libc::EINTR) {
            return Err(io_err(format!("cannot lock {}", dir.display()))(err));
        }
        if Instant::now() >= deadline {
            return Err(AuditError::Io {
                context: format!(
                    "cannot lock {}: another process has held its lock for {} s (`fuser -v {}` names it)",
                    dir.display(),
                    BUSY_TIMEOUT.as_secs(),
                    dir.display()
                ),
                source: err,
            });
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(2));
    }
}

impl AuditLog {
    /// Opens (creating on first use) `<state_dir>/audit/`: the directory
    /// (mode 0700), the log, the head file and the host key. The database
    /// is opened later, only when needed.
    pub fn open(state_dir: &Path) -> Result<AuditLog, AuditError> {
        let dir = state_dir.join(AUDIT_DIR);
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(io_err(format!("cannot create {}", dir.display())))?;
        // First use creates the host key pair; afterwards it is read when needed.
        let key = std::cell::OnceCell::new();
        if !dir.join(KEY_FILE).exists() || !dir.join(PUB_FILE).exists() {
            let _ = key.set(load_or_create_key(&dir)?);
        }
        let dir_handle = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
            .open(&dir)
            .map_err(io_err(format!("cannot open {}", dir.display())))?;
        let log_path = dir.join(LOG_FILE);
        let log = open_log(&log_path)?;
        let head_path = dir.join(HEAD_FILE);
        let head_file = open_head(&head_path)?;
        Ok(AuditLog {
            dir,
            log_path,
            log,
            head_path,
            head_file,
            dir_handle,
            conn: None,
            key,
            boot: std::cell::OnceCell::new(),
        })
    }

    /// Redacts and appends `entry`; returns its seq. An error means nothing
    /// was recorded and the caller must not proceed as if it had been.
    pub fn append(&mut self, mut entry: AuditEntry) -> Result<u64, AuditError> {
        if let Some(command) = entry.command.take() {
            entry.command_digest = Some(hex::encode(Sha256::digest(command.as_bytes())));
            entry.command = Some(redact(&command));
        }
        if let Some(detail) = entry.detail.take() {
            entry.detail = Some(redact(&detail));
        }
        // Rule explanations quote the command they judged: same redaction.
        if let Some(rules) = entry.rules.take() {
            entry.rules = Some(rules.iter().map(|r| redact(r)).collect());
        }
        let _lock = lock_dir(&self.dir_handle, &self.dir, true)?;
        self.append_locked(entry)
    }

    /// Whether an append would find the log as the head describes it (the
    /// checks an append makes before it writes; a crashed append's tail is
    /// quarantined, as the append would). For a caller about to decide
    /// something it must then record: a log that fails here fails before
    /// the decision, not after.
    pub fn ready_to_append(&mut self) -> Result<(), AuditError> {
        let _lock = lock_dir(&self.dir_handle, &self.dir, true)?;
        let current = self.current_head()?;
        self.align_log_with_head(current).map(|_| ())
    }

    fn append_locked(&mut self, entry: AuditEntry) -> Result<u64, AuditError> {
        let current = self.current_head()?;
        let head = self.align_log_with_head(current)?;
        let seq = head.seq.checked_add(1).ok_or_else(|| AuditError::LogMismatch {
            path: self.head_path.clone(),
            message: format!("the head's seq {} cannot grow; it was forged", head.seq),
        })?;
        // Taken under the lock so that time order follows seq order.
        let time = format_rfc3339_millis(SystemTime::now());
        let encoded = Encoded::new(seq, &time, &head.hash, &entry)?;
        let hash = encoded.hash();
        let line = encoded.line(&hash);

        if let Err(source) = (&self.log).write_all(&line) {
            self.cut_log_back(head.log_len);
            return Err(AuditError::Io {
                context: format!("cannot append to {}", self.log_path.display()),
                source,
            });
        }
        let new_head = Head {
            seq,
            hash,
            log_len: head.log_len + line.len() as u64,
        };
        if seq.is_multiple_of(CHECKPOINT_INTERVAL) {
            // The database commit is this record's commit point: once it is
            // in, a launcher killed before the head file's write leaves a
            // head file one behind, which the next append rolls forward.
            // Durable, and the log before it: a power cut can then never
            // leave a head or log further on than a checkpoint the database
            // lost (a required checkpoint missing for good), nor a checkpoint
            // vouching for lines the log lost. Every 256th record pays for
            // the two syncs.
            if let Err(source) = self.log.sync_data() {
                self.cut_log_back(head.log_len);
                return Err(AuditError::Io {
                    context: format!("cannot sync {}", self.log_path.display()),
                    source,
                });
            }
            if let Err(err) = self.commit_checkpoint(&new_head) {
                self.cut_log_back(head.log_len);
                return Err(err);
            }
            // Committed in the database: a head file that could not be
            // written is rolled forward by the next append (see above).
            let _ = self.write_head(&new_head);
            return Ok(seq);
        }
        if let Err(err) = self.write_head(&new_head) {
            self.cut_log_back(head.log_len);
            return Err(err);
        }
        Ok(seq)
    }

    /// The head as the head file at `head` records it (following a file
    /// put in its place since we opened it). A head file never written
    /// means a fresh directory, or one made by a build that kept the head in
    /// the database only: the database's head then. Once the database says
    /// this directory keeps a head file, a missing one is damage.
    fn current_head(&mut self) -> Result<CurrentHead, AuditError> {
        if still_at(&self.head_file, &self.head_path)?.is_none() {
            self.head_file = open_head(&self.head_path)?;
        }
        match read_head_file(&self.head_file, &self.head_path, &self.dir)? {
            Some(line) => {
                let boot = self.boot.get_or_init(current_boot);
                let this_boot = line.boot == *boot && line.boot != UNKNOWN_BOOT;
                Ok(CurrentHead {
                    head: line.head,
                    this_boot,
                })
            }
            None => {
                let (head, keeps_head_file) = self.database_head()?;
                if keeps_head_file {
                    return Err(damaged_head(
                        &self.head_path,
                        &self.dir,
                        "it is missing or empty, but the database says this directory keeps one: it was deleted",
                    ));
                }
                Ok(CurrentHead { head, this_boot: false })
            }
        }
    }

    /// The head the database committed, and whether it says this directory
    /// keeps a head file; the genesis head when there is no database yet
    /// (it is made at the first checkpoint).
    fn database_head(&mut self) -> Result<(Head, bool), AuditError> {
        if self.conn.is_none() && !self.dir.join(DB_FILE).exists() {
            return Ok((Head::genesis(), false));
        }
        read_head(self.db()?)
    }

    fn db(&mut self) -> Result<&Connection, AuditError> {
        if self.conn.is_none() {
            let path = self.dir.join(DB_FILE);
            regular_or_absent(&path)?;
            self.conn = Some(open_db(&path).map_err(at_database(&path))?);
        }
        Ok(self.conn.as_ref().expect("opened above"))
    }

    fn write_head(&self, head: &Head) -> Result<(), AuditError> {
        let boot = self.boot.get_or_init(current_boot);
        self.head_file
            .write_all_at(&encode_head(head, boot), 0)
            .map_err(io_err(format!("cannot write {}", self.head_path.display())))
    }

    /// Updates the database's head and signs a checkpoint at it, in one
    /// transaction. A database whose head is already further on lost the
    /// log's records it vouches for (a power cut): refused, not buried.
    fn commit_checkpoint(&mut self, head: &Head) -> Result<(), AuditError> {
        if self.key.get().is_none() {
            let _ = self.key.set(load_or_create_key(&self.dir)?);
        }
        let signature = self
            .key
            .get()
            .expect("set above")
            .sign(checkpoint_message(head.seq, &head.hash).as_bytes());
        let db_path = self.dir.join(DB_FILE);
        let conn = self.db()?;
        conn.execute_batch("BEGIN IMMEDIATE")?;
        let result = (|| {
            let moved = conn
                .prepare_cached(
                    "UPDATE head SET seq = ?1, hash = ?2, log_len = ?3, head_file = 1 WHERE id = 1 AND seq <= ?1",
                )?
                .execute(rusqlite::params![to_i64(head.seq)?, head.hash, to_i64(head.log_len)?])?;
            if moved != 1 {
                let (db_head, _) = read_head(conn)?;
                return Err(AuditError::LogMismatch {
                    path: db_path.clone(),
                    message: format!(
                        "its head is at seq {}, past the log's seq {}: the log lost records the database committed",
                        db_head.seq, head.seq
                    ),
                });
            }
            let signed = conn
                .prepare_cached("INSERT OR IGNORE INTO checkpoints(seq, hash, signature) VALUES (?1, ?2, ?3)")?
                .execute(rusqlite::params![
                    to_i64(head.seq)?,
                    head.hash,
                    hex::encode(signature.to_bytes())
                ])?;
            let signed_hash: String = conn
                .prepare_cached("SELECT hash FROM checkpoints WHERE seq = ?1")?
                .query_row([to_i64(head.seq)?], |row| row.get(0))?;
            if signed == 0 && signed_hash != head.hash {
                return Err(AuditError::LogMismatch {
                    path: db_path.clone(),
                    message: format!(
                        "a checkpoint at seq {} vouches for another record than the log's: the log lost records the database committed",
                        head.seq
                    ),
                });
            }
            conn.execute_batch("COMMIT")?;
            Ok(())
        })();
        if result.is_err() {
            // May itself fail if SQLite already rolled back; the original
            // error is the one that matters.
            let _ = conn.execute_batch("ROLLBACK");
        }
        result
    }

    /// Best effort after a failed append: removes the partial or uncommitted
    /// line so the log again matches the (unchanged) head. If this fails too,
    /// the next append finds the extra bytes and quarantines them.
    fn cut_log_back(&self, len: u64) {
        let _ = self.log.set_len(len);
    }

    /// Makes sure we are about to append to the file the head describes;
    /// returns the head to append after.
    ///
    /// The database is consulted when the log is not the length the head
    /// file says, and at the first append of a boot. It may know better:
    /// a checkpoint committed whose head file write was cut off by a killed
    /// launcher (rolled forward), or, after a power cut, a head further on
    /// than a log and head file that both lost their last writes (refused:
    /// appending would bury the gap).
    fn align_log_with_head(&mut self, current: CurrentHead) -> Result<Head, AuditError> {
        // Another process, or an attacker, may have renamed a different file
        // into place; appending to our old descriptor would then write to a
        // file nobody reads.
        let len = match still_at(&self.log, &self.log_path)? {
            Some(meta) => meta.len(),
            None => {
                self.log = open_log(&self.log_path)?;
                self.log
                    .metadata()
                    .map_err(io_err(format!("cannot stat {}", self.log_path.display())))?
                    .len()
            }
        };
        let head = current.head;
        if len == head.log_len && current.this_boot {
            return Ok(head);
        }
        let head = match self.database_head()? {
            (db, _) if db.seq > head.seq => {
                self.write_head(&db)?;
                db
            }
            _ => head,
        };
        if len < head.log_len {
            return Err(AuditError::LogMismatch {
                path: self.log_path.clone(),
                message: format!(
                    "the log is {len} bytes but the head (seq {}) says {}; it was truncated or replaced",
                    head.seq, head.log_len
                ),
            });
        }
        if len > head.log_len {
            // Only what follows a whole line: a head whose length falls
            // inside a record (edited) must not cut that record in two.
            let mut last = [0u8; 1];
            let ends_a_line = head.log_len == 0
                || self
                    .log
                    .read_exact_at(&mut last, head.log_len - 1)
                    .is_ok_and(|()| last[0] == b'\n');
            if !ends_a_line {
                return Err(AuditError::LogMismatch {
                    path: self.head_path.clone(),
                    message: format!(
                        "the head says the log ends at byte {} (after seq {}), which is not the end of a line: the head or the log was edited",
                        head.log_len, head.seq
                    ),
                });
            }
            self.quarantine_tail(&head, len)?;
        }
        Ok(head)
    }

    /// Moves bytes past the committed head (a crashed append, or a forgery)
    /// out of the log into a file of their own, so that they are kept as
    /// evidence but never become part of the chain.
    fn quarantine_tail(&mut self, head: &Head, len: u64) -> Result<(), AuditError> {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
            .as_nanos();
        let path = self
            .dir
            .join(format!("{QUARANTINE_PREFIX}{:020}-{nanos}.jsonl", head.seq + 1));
        let context = format!(
            "cannot quarantine the uncommitted tail of {} into {}",
            self.log_path.display(),
            path.display()
        );
        let mut out = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(io_err(context.clone()))?;
        let mut reader = &self.log;
        reader
            .seek(SeekFrom::Start(head.log_len))
            .map_err(io_err(context.clone()))?;
        io::copy(&mut reader.take(len - head.log_len), &mut out).map_err(io_err(context.clone()))?;
        out.sync_all().map_err(io_err(context.clone()))?;
        self.log.set_len(head.log_len).map_err(io_err(context))?;
        Ok(())
    }

    /// Signs the current head now (for example at the end of a session), so
    /// that cutting the log back past this point is detectable even with
    /// write access to the head file and the database. A no-op on an empty
    /// log.
    pub fn checkpoint(&mut self) -> Result<(), AuditError> {
        let _lock = lock_dir(&self.dir_handle, &self.dir, true)?;
        let file = self.current_head()?.head;
        let (db, _) = self.database_head()?;
        let head = if db.seq > file.seq { db } else { file };
        if head.seq == 0 {
            return Ok(());
        }
        self.commit_checkpoint(&head)
    }
}

/// Names the database in an SQLite error.
fn at_database(path: &Path) -> impl FnOnce(AuditError) -> AuditError + '_ {
    move |e| match e {
        AuditError::Db(source) => AuditError::DbAt {
            path: path.to_path_buf(),
            source,
        },
        other => other,
    }
}

fn to_i64(value: u64) -> Result<i64, AuditError> {
    i64::try_from(value).map_err(|_| AuditError::Db(rusqlite::Error::IntegralValueOutOfRange(0, i64::MAX)))
}

/// The database's head, and whether it says this directory keeps a head
/// file (schema 2 on; `verify` reads older databases as they are).
fn read_head(conn: &Connection) -> Result<(Head, bool), AuditError> {
    let (seq, hash, log_len): (i64, String, i64) = conn
        .prepare_cached("SELECT seq, hash, log_len FROM head WHERE id = 1")?
        .query_row([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?;
    let version: i64 = conn.query_row("PRAGMA user_version", [], |row| row.get(0))?;
    let keeps_head_file = version >= 2
        && conn
            .prepare_cached("SELECT head_file FROM head WHERE id = 1")?
            .query_row([], |row| row.get::<_, i64>(0))?
            != 0;
    let head = Head {
        seq: u64::try_from(seq).map_err(|_| rusqlite::Error::IntegralValueOutOfRange(0, seq))?,
        hash,
        log_len: u64::try_from(log_len).map_err(|_| rusqlite::Error::IntegralValueOutOfRange(2, log_len))?,
    };
    Ok((head, keeps_head_file))
}

fn open_log(path: &Path) -> Result<File, AuditError> {
    // O_APPEND makes every write land at the current end even if another
    // descriptor (another process) wrote in between. O_NOFOLLOW refuses a
    // symlink planted to redirect records elsewhere. Read access is for
    // moving an uncommitted tail to quarantine.
    // O_NONBLOCK: a FIFO planted there cannot block the open; it is refused.
    let file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(io_err(format!("cannot open {} for appending", path.display())))?;
    require_regular(&file, path)?;
    Ok(file)
}

/// Refuses anything but a regular file where the audit keeps one (a FIFO
/// would block every reader, a device would take records away).
fn require_regular(file: &File, path: &Path) -> Result<(), AuditError> {
    let meta = file
        .metadata()
        .map_err(io_err(format!("cannot stat {}", path.display())))?;
    if meta.is_file() {
        Ok(())
    } else {
        Err(not_regular(path))
    }
}

fn not_regular(path: &Path) -> AuditError {
    AuditError::LogMismatch {
        path: path.to_path_buf(),
        message: "it is not a regular file; move it aside (`tether-exec audit verify` reports what is left)".into(),
    }
}

/// The database's path, if it holds a regular file (or nothing yet): SQLite
/// itself would block on a FIFO there.
fn regular_or_absent(path: &Path) -> Result<(), AuditError> {
    match fs::symlink_metadata(path) {
        Ok(m) if !m.is_file() => Err(not_regular(path)),
        _ => Ok(()),
    }
}

/// `file`'s metadata if it is still the one at `path`; `None` when another
/// was renamed into its place since it was opened (our writes would go
/// nowhere anyone reads).
fn still_at(file: &File, path: &Path) -> Result<Option<fs::Metadata>, AuditError> {
    let ours = file
        .metadata()
        .map_err(io_err(format!("cannot stat {}", path.display())))?;
    let same = fs::symlink_metadata(path).is_ok_and(|now| now.dev() == ours.dev() && now.ino() == ours.ino());
    Ok(same.then_some(ours))
}

fn open_head(path: &Path) -> Result<File, AuditError> {
    // Written in place with `pwrite`, never renamed over: the descriptor
    // stays the file. O_NOFOLLOW as for the log; O_NONBLOCK so that a FIFO
    // planted there cannot block the open, and it is refused below.
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(io_err(format!("cannot open the audit head {}", path.display())))?;
    require_regular(&file, path)?;
    Ok(file)
}

/// The error for a head file that cannot be trusted, with what to do.
fn damaged_head(path: &Path, dir: &Path, reason: &str) -> AuditError {
    AuditError::LogMismatch {
        path: path.to_path_buf(),
        message: format!(
            "the audit head is damaged: {reason}. Nothing is appended to this log until the file is restored from a copy; `tether-exec audit verify` shows how far the log is vouched for. To go on without it, move {} aside: a new log starts, and the old one stays as evidence",
            dir.display()
        ),
    }
}

/// The head file's head; `None` when it was never written.
fn read_head_file(file: &File, path: &Path, dir: &Path) -> Result<Option<HeadLine>, AuditError> {
    decode_head(&read_head_bytes(file, path)?).map_err(|reason| damaged_head(path, dir, &reason))
}

/// The head file's bytes. Its length is fixed and small; of anything
/// longer, enough is read to say that it is not a head.
fn read_head_bytes(file: &File, path: &Path) -> Result<Vec<u8>, AuditError> {
    let mut bytes = Vec::with_capacity(256);
    let mut buf = [0u8; 512];
    loop {
        let n = file
            .read_at(&mut buf, bytes.len() as u64)
            .map_err(io_err(format!("cannot read {}", path.display())))?;
        bytes.extend_from_slice(&buf[..n]);
        if n == 0 || bytes.len() >= 4096 {
            return Ok(bytes);
        }
    }
}

fn open_db(path: &Path) -> Result<Connection, AuditError> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    // Every run is a new process that opens and closes the log. By default the
    // last connection to close checkpoints the WAL and deletes it, so the next
    // run recreates it and pays a header sync and a directory fsync: keep the
    // WAL between runs instead, and keep it short (`state::keep_wal_short`,
    // when the log is dropped).
    conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)?;
    // WAL: readers (verify, `audit show`) never block the writer, and a
    // commit is an append to the WAL rather than a rewrite of the journal.
    // Many launchers may open a fresh directory at once: these steps can report
    // BUSY without waiting on the busy handler, so they are retried.
    let mode: String = crate::approval::retry_busy(|| conn.query_row("PRAGMA journal_mode", [], |row| row.get(0)))?;
    if !mode.eq_ignore_ascii_case("wal") {
        let _: String =
            crate::approval::retry_busy(|| conn.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0)))?;
    }
    // FULL: the database is written only with a checkpoint, which must be
    // on disk when it commits (see `append_locked`).
    crate::approval::retry_busy(|| conn.execute_batch("PRAGMA synchronous = FULL"))?;
    migrate(&conn)?;
    Ok(conn)
}

/// Brings the schema up to date under the write lock, so that two launchers
/// opening a fresh directory at once do not both create the tables.
fn migrate(conn: &Connection) -> Result<(), AuditError> {
    let supported = MIGRATIONS.len() as i64;
    let current: i64 = crate::approval::retry_busy(|| conn.query_row("PRAGMA user_version", [], |row| row.get(0)))?;
    if current == supported {
        return Ok(());
    }
    crate::approval::retry_busy(|| conn.execute_batch("BEGIN IMMEDIATE"))?;
    let result = (|| {
        let current: i64 = conn.query_row("PRAGMA user_version", [], |row| row.get(0))?;
        if current > supported {
            return Err(AuditError::SchemaTooNew {
                found: current,
                supported,
            });
        }
        for step in MIGRATIONS.iter().skip(current.max(0) as usize) {
            conn.execute_batch(step)?;
        }
        conn.execute_batch(&format!("PRAGMA user_version = {supported}"))?;
        conn.execute_batch("COMMIT")?;
        Ok(())
    })();
    if result.is_err() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    result
}

/// Loads the host key, creating it on first use. The new key is written and
/// synced under a private temporary name, then hard-linked into place: the
/// link fails if another process won the race, and a reader never sees a
/// half-written key (which a plain O_CREAT|O_EXCL on `host.key` would allow).
fn load_or_create_key(dir: &Path) -> Result<SigningKey, AuditError> {
    let key_path = dir.join(KEY_FILE);
    let key_err = |message: String| AuditError::Key {
        path: key_path.clone(),
        message,
    };
    let key = match read_secret_key(&key_path) {
        Ok(key) => key,
        Err(err) if err.kind() == io::ErrorKind::NotFound => {
            let mut secret = [0u8; 32];
            getrandom::fill(&mut secret).map_err(|e| key_err(format!("no randomness for a new key: {e}")))?;
            let mut nonce = [0u8; 8];
            getrandom::fill(&mut nonce).map_err(|e| key_err(format!("no randomness: {e}")))?;
            let tmp = dir.join(format!(".{KEY_FILE}.{}.{}", std::process::id(), hex::encode(nonce)));
            let written = write_new_file(&tmp, &secret, 0o600).and_then(|()| match fs::hard_link(&tmp, &key_path) {
                Ok(()) => Ok(()),
                Err(err) if err.kind() == io::ErrorKind::AlreadyExists => Ok(()),
                Err(err) => Err(err),
            });
            let _ = fs::remove_file(&tmp);
            written.map_err(|e| key_err(format!("cannot create: {e}")))?;
            sync_dir(dir);
            read_secret_key(&key_path).map_err(|e| key_err(e.to_string()))?
        }
        Err(err) => return Err(key_err(err.to_string())),
    };
    let signing = SigningKey::from_bytes(&key);
    let public = format!("{}\n", hex::encode(signing.verifying_key().to_bytes()));
    let pub_path = dir.join(PUB_FILE);
    match fs::read_to_string(&pub_path) {
        Ok(existing) if existing == public => {}
        Ok(_) => {
            return Err(AuditError::Key {
                path: pub_path,
                message: "does not match host.key; checkpoints could not be verified".into(),
            })
        }
        Err(err) if err.kind() == io::ErrorKind::NotFound => {
            let mut nonce = [0u8; 8];
            getrandom::fill(&mut nonce).map_err(|e| key_err(format!("no randomness: {e}")))?;
            let tmp = dir.join(format!(".{PUB_FILE}.{}.{}", std::process::id(), hex::encode(nonce)));
            // Racing writers write identical bytes, so a plain rename is fine.
            let written = write_new_file(&tmp, public.as_bytes(), 0o644).and_then(|()| fs::rename(&tmp, &pub_path));
            if written.is_err() {
                let _ = fs::remove_file(&tmp);
            }
            written.map_err(io_err(format!("cannot write {}", pub_path.display())))?;
        }
        Err(err) => return Err(io_err(format!("cannot read {}", pub_path.display()))(err)),
    }
    Ok(signing)
}

fn read_secret_key(path: &Path) -> io::Result<[u8; 32]> {
    let mut file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() || meta.len() != 32 {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "not a 32-byte regular file"));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "mode {:o} lets others read the signing key; expected 0600",
                meta.mode() & 0o777
            ),
        ));
    }
    let mut key = [0u8; 32];
    file.read_exact(&mut key)?;
    Ok(key)
}

fn write_new_file(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// Makes a new directory entry durable; losing the host key to a power cut
/// would leave every checkpoint unverifiable. Best effort.
fn sync_dir(dir: &Path) {
    if let Ok(handle) = File::open(dir) {
        let _ = handle.sync_all();
    }
}

// ---------------------------------------------------------------------------
// Verification

struct CheckpointRow {
    seq: u64,
    hash: String,
    signature: String,
}

/// Where `verify`'s head came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HeadSource {
    /// The head file, written with every record.
    File,
    /// The database, as of its last checkpoint: the head file is missing,
    /// damaged, or behind it.
    Database,
    /// Neither exists.
    Nothing,
}

/// Everything `verify` needs, read at one instant.
struct Snapshot {
    head: Head,
    head_source: HeadSource,
    /// What is wrong with the head file, when it is not a head.
    head_fault: Option<String>,
    checkpoints: Vec<CheckpointRow>,
    log: Vec<u8>,
    quarantined: Vec<(u64, String)>,
}

impl Snapshot {
    fn take(dir: &Path) -> Result<Snapshot, AuditError> {
        // Holding the lock while we read means no append is half done (line
        // written, head not yet updated), which would otherwise look like a
        // forged append. A shared lock: verifiers do not exclude each other.
        // Without it (a file system that cannot lock) the read still works.
        let handle = File::open(dir).map_err(io_err(format!("cannot open {}", dir.display())))?;
        let _lock = lock_dir(&handle, dir, false).ok();
        let head_path = dir.join(HEAD_FILE);
        let (file_head, mut head_fault) = read_head_for_verify(&head_path)?;
        let db_path = dir.join(DB_FILE);
        let (db_head, checkpoints) = read_database(&db_path).map_err(at_database(&db_path))?;
        if let (None, None, Some((_, true))) = (&file_head, &head_fault, &db_head) {
            head_fault =
                Some("it is missing or empty, but the database says this directory keeps one: it was deleted".into());
        }
        let (head, head_source) = match (file_head, db_head) {
            (Some(file), Some((db, _))) if db.seq > file.seq => (db, HeadSource::Database),
            (Some(file), _) => (file, HeadSource::File),
            (None, Some((db, _))) => (db, HeadSource::Database),
            (None, None) => (Head::genesis(), HeadSource::Nothing),
        };
        Ok(Snapshot {
            head,
            head_source,
            head_fault,
            checkpoints,
            log: read_log_bytes(dir)?,
            quarantined: list_quarantine(dir)?,
        })
    }
}

/// The head file's head, or what is wrong with it; `(None, None)` when it
/// is missing or was never written.
fn read_head_for_verify(path: &Path) -> Result<(Option<Head>, Option<String>), AuditError> {
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(file) => file,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok((None, None)),
        Err(err) if err.raw_os_error() == Some(libc::ELOOP) => {
            return Ok((None, Some("it is a symbolic link".into())));
        }
        Err(err) => return Err(io_err(format!("cannot read {}", path.display()))(err)),
    };
    if !file
        .metadata()
        .map_err(io_err(format!("cannot stat {}", path.display())))?
        .is_file()
    {
        return Ok((None, Some("it is not a regular file".into())));
    }
    Ok(match decode_head(&read_head_bytes(&file, path)?) {
        Ok(line) => (line.map(|l| l.head), None),
        Err(fault) => (None, Some(fault)),
    })
}

/// The database's head (with whether it says a head file is kept) and its
/// checkpoints.
type DatabaseView = (Option<(Head, bool)>, Vec<CheckpointRow>);

/// The database's head and checkpoints; nothing when there is no database.
/// The caller holds the directory's lock, so no append writes meanwhile.
fn read_database(db_path: &Path) -> Result<DatabaseView, AuditError> {
    if !db_path.exists() {
        return Ok((None, Vec::new()));
    }
    regular_or_absent(db_path)?;
    match read_database_in_place(db_path) {
        // On read-only media, SQLite cannot make the WAL index it needs
        // (`-shm`) when the copy came without one: read a private copy.
        Err(AuditError::Db(rusqlite::Error::SqliteFailure(e, _)))
            if matches!(e.code, rusqlite::ErrorCode::CannotOpen | rusqlite::ErrorCode::ReadOnly) =>
        {
            read_database_from_private_copy(db_path)
        }
        other => other,
    }
}

/// [`read_database`] through a copy of the database and its WAL in a new
/// private directory under the temporary directory, removed afterwards.
fn read_database_from_private_copy(db_path: &Path) -> Result<DatabaseView, AuditError> {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let dir = std::env::temp_dir().join(format!("tether-exec-verify-{}-{nanos}", std::process::id()));
    fs::DirBuilder::new().mode(0o700).create(&dir).map_err(io_err(format!(
        "cannot create {} to read a copy of the read-only database",
        dir.display()
    )))?;
    let copy = dir.join(DB_FILE);
    let result = (|| {
        let wal = PathBuf::from(format!("{}-wal", db_path.display()));
        regular_or_absent(&wal)?;
        for (from, to) in [
            (db_path.to_path_buf(), copy.clone()),
            (wal, dir.join(format!("{DB_FILE}-wal"))),
        ] {
            match fs::copy(&from, &to) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound && from != db_path => {}
                Err(e) => return Err(io_err(format!("cannot copy {}", from.display()))(e)),
            }
        }
        read_database_in_place(&copy)
    })();
    let _ = fs::remove_dir_all(&dir);
    result
}

fn read_database_in_place(db_path: &Path) -> Result<DatabaseView, AuditError> {
    // Read-write when we may (SQLite wants to map the WAL index), read-only
    // for a copy on read-only media.
    let conn = match Connection::open_with_flags(
        db_path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    ) {
        Ok(conn) => conn,
        Err(_) => Connection::open_with_flags(
            db_path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?,
    };
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.execute_batch("BEGIN")?;
    let result = (|| {
        let head = read_head(&conn)?;
        let mut statement = conn.prepare("SELECT seq, hash, signature FROM checkpoints ORDER BY seq")?;
        let checkpoints = statement
            .query_map([], |row| {
                let seq: i64 = row.get(0)?;
                Ok(CheckpointRow {
                    seq: u64::try_from(seq).unwrap_or(0),
                    hash: row.get(1)?,
                    signature: row.get(2)?,
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
        Ok((Some(head), checkpoints))
    })();
    let _ = conn.execute_batch("ROLLBACK");
    result
}

fn read_log_bytes(dir: &Path) -> Result<Vec<u8>, AuditError> {
    let path = dir.join(LOG_FILE);
    let mut file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&path)
    {
        Ok(file) => file,
        // A missing log is an empty log; the head tells whether it should be.
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(err) => return Err(io_err(format!("cannot read {}", path.display()))(err)),
    };
    require_regular(&file, &path)?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(io_err(format!("cannot read {}", path.display())))?;
    Ok(bytes)
}

/// Quarantine files as (seq they would have had, file name), oldest first.
fn list_quarantine(dir: &Path) -> Result<Vec<(u64, String)>, AuditError> {
    let mut found = Vec::new();
    let entries = fs::read_dir(dir).map_err(io_err(format!("cannot list {}", dir.display())))?;
    for entry in entries {
        let entry = entry.map_err(io_err(format!("cannot list {}", dir.display())))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(rest) = name.strip_prefix(QUARANTINE_PREFIX) {
            let seq = rest.split('-').next().and_then(|s| s.parse().ok()).unwrap_or(0);
            found.push((seq, name));
        }
    }
    found.sort();
    Ok(found)
}

/// Loads the key that checkpoints must verify with, cross-checked against
/// the private key when we can read it (as the launcher's user can).
fn verifying_key(dir: &Path) -> Result<VerifyingKey, String> {
    // Both key files must be the audit directory owner's: someone else who
    // can write the directory could otherwise put a key pair of their own
    // in place and sign a rewritten chain with it.
    let owner = fs::metadata(dir)
        .map_err(|e| format!("cannot stat {}: {e}", dir.display()))?
        .uid();
    let owned = |name: &str| -> Result<(), String> {
        match fs::symlink_metadata(dir.join(name)) {
            Ok(m) if !m.is_file() => Err(format!("{name} is not a regular file")),
            Ok(m) if m.uid() != owner => Err(format!(
                "{name} belongs to uid {}, not to the audit directory's owner (uid {owner}): it was replaced",
                m.uid()
            )),
            Ok(_) => Ok(()),
            Err(e) => Err(format!("cannot read {name}: {e}")),
        }
    };
    owned(PUB_FILE)?;
    owned(KEY_FILE).map_err(|e| format!("{e}; host.pub cannot be vouched for"))?;
    let text = fs::read_to_string(dir.join(PUB_FILE)).map_err(|e| format!("cannot read host.pub: {e}"))?;
    let mut bytes = [0u8; 32];
    hex::decode_to_slice(text.trim(), &mut bytes).map_err(|e| format!("host.pub is not 32 bytes of hex: {e}"))?;
    let public = VerifyingKey::from_bytes(&bytes).map_err(|e| format!("host.pub is not an Ed25519 key: {e}"))?;
    // Cross-checked whenever it can be read, whatever its mode; an operator's
    // account that may not read it (an auditor) checks the signatures alone.
    match fs::read(dir.join(KEY_FILE)) {
        Ok(secret) => {
            let secret: [u8; 32] = secret
                .try_into()
                .map_err(|_| "host.key is not 32 bytes; host.pub cannot be vouched for".to_string())?;
            if SigningKey::from_bytes(&secret).verifying_key() != public {
                return Err("host.pub does not belong to host.key".into());
            }
        }
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {}
        Err(e) => return Err(format!("cannot read host.key ({e}); host.pub cannot be vouched for")),
    }
    Ok(public)
}

fn checkpoint_signature_ok(key: &Result<VerifyingKey, String>, row: &CheckpointRow) -> Result<(), String> {
    let key = key.as_ref().map_err(Clone::clone)?;
    let mut bytes = [0u8; 64];
    hex::decode_to_slice(&row.signature, &mut bytes).map_err(|_| "signature is not 64 bytes of hex".to_string())?;
    key.verify_strict(
        checkpoint_message(row.seq, &row.hash).as_bytes(),
        &Signature::from_bytes(&bytes),
    )
    .map_err(|_| "signature does not verify with host.pub".to_string())
}

type Digest32 = [u8; 32];

const GENESIS_DIGEST: Digest32 = [0; 32];

/// What the walk needs from one line: its chain fields and the hash we
/// computed. The payload is dropped once checked, so verifying a large log
/// does not hold every record in memory.
struct ParsedLine {
    seq: u64,
    prev: Digest32,
    hash: Digest32,
    computed: Digest32,
}

enum LineFault {
    /// A record, but not laid out as we write records (reformatted, or a
    /// field added in front).
    NonCanonical,
    /// Not a record at all.
    Unreadable(String),
}

/// The chain fields of a line in the exact layout we write:
/// `{"seq":N,"time":"…","prev":"<64 hex>","hash":"<64 hex>",` then the
/// payload fields.
struct ChainPrefix {
    seq: u64,
    prev: Digest32,
    hash: Digest32,
    /// End of `"prev":"…"`: the hashed body is `line[..body_end]`, a comma,
    /// and `line[fields_start..]`.
    body_end: usize,
    fields_start: usize,
}

fn parse_chain_prefix(line: &[u8]) -> Option<ChainPrefix> {
    let mut at = 0;
    let expect = |at: &mut usize, literal: &[u8]| -> Option<()> {
        line.get(*at..*at + literal.len()).filter(|got| *got == literal)?;
        *at += literal.len();
        Some(())
    };
    expect(&mut at, b"{\"seq\":")?;
    let digits = line[at..].iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || (digits > 1 && line[at] == b'0') {
        return None;
    }
    let seq = std::str::from_utf8(&line[at..at + digits]).ok()?.parse().ok()?;
    at += digits;
    expect(&mut at, b",\"time\":\"")?;
    // Our timestamps never need escaping; anything else is not our layout.
    let time_len = line[at..]
        .iter()
        .take_while(|&&b| b != b'"' && b != b'\\' && b >= 0x20)
        .count();
    at += time_len;
    expect(&mut at, b"\",\"prev\":\"")?;
    let prev = decode_hex32(line.get(at..at + 64)?)?;
    at += 64;
    expect(&mut at, b"\"")?;
    let body_end = at;
    expect(&mut at, b",\"hash\":\"")?;
    let hash = decode_hex32(line.get(at..at + 64)?)?;
    at += 64;
    expect(&mut at, b"\",")?;
    Some(ChainPrefix {
        seq,
        prev,
        hash,
        body_end,
        fields_start: at,
    })
}

/// Lowercase hex only, as `hex::encode` writes it; any other spelling of
/// the same bytes is an edit.
fn decode_hex32(text: &[u8]) -> Option<Digest32> {
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    if text.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in text.chunks_exact(2).enumerate() {
        out[i] = nibble(pair[0])? << 4 | nibble(pair[1])?;
    }
    Some(out)
}

/// The chain fields of a line; the payload fields are skipped.
#[derive(Deserialize)]
struct ChainFields {
    seq: u64,
    time: String,
    prev: String,
    hash: String,
}

/// Parses a line in two passes, chain fields then payload (each ignoring
/// the other's keys), which avoids `#[serde(flatten)]`'s buffering.
fn parse_record(line: &[u8]) -> Result<AuditRecord, serde_json::Error> {
    let chain: ChainFields = serde_json::from_slice(line)?;
    let entry: AuditEntry = serde_json::from_slice(line)?;
    Ok(AuditRecord {
        seq: chain.seq,
        time: chain.time,
        prev: chain.prev,
        hash: chain.hash,
        entry,
    })
}

/// Checks one line. The hash is computed over the bytes as they stand,
/// with the `"hash":"…"` member cut out: for a line we wrote these are
/// exactly the canonical body, and this way every byte is covered, even one
/// the JSON parser would skip. The payload is still parsed, so that a line
/// whose hash matches is also a well-formed record.
fn parse_line(line: &[u8], scratch: &mut Vec<u8>) -> Result<ParsedLine, LineFault> {
    let Some(prefix) = parse_chain_prefix(line) else {
        return Err(match parse_record(line) {
            Ok(_) => LineFault::NonCanonical,
            Err(e) => LineFault::Unreadable(e.to_string()),
        });
    };
    let fields = &line[prefix.fields_start..];
    scratch.clear();
    scratch.push(b'{');
    scratch.extend_from_slice(fields);
    serde_json::from_slice::<AuditEntry>(scratch).map_err(|e| LineFault::Unreadable(e.to_string()))?;
    let mut hasher = Sha256::new();
    hasher.update(&line[..prefix.body_end]);
    hasher.update(b",");
    hasher.update(fields);
    Ok(ParsedLine {
        seq: prefix.seq,
        prev: prefix.prev,
        hash: prefix.hash,
        computed: hasher.finalize().into(),
    })
}

/// Parses lines on all cores: hashing and JSON work per line are
/// independent, only the walk over the results has to be in order.
fn parse_lines(lines: &[&[u8]]) -> Vec<Result<ParsedLine, LineFault>> {
    let sequential = |part: &[&[u8]]| {
        let mut scratch = Vec::new();
        part.iter().map(|l| parse_line(l, &mut scratch)).collect::<Vec<_>>()
    };
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get()).min(8);
    if workers < 2 || lines.len() < 4096 {
        return sequential(lines);
    }
    let chunk = lines.len().div_ceil(workers);
    std::thread::scope(|scope| {
        let spawned: Vec<_> = lines
            .chunks(chunk)
            .map(|part| {
                let handle = std::thread::Builder::new().spawn_scoped(scope, move || sequential(part));
                (part, handle)
            })
            .collect();
        let mut out = Vec::with_capacity(lines.len());
        for (part, handle) in spawned {
            match handle.map(|h| h.join()) {
                Ok(Ok(parsed)) => out.extend(parsed),
                Ok(Err(panic)) => std::panic::resume_unwind(panic),
                // No thread to be had: do that share here.
                Err(_) => out.extend(sequential(part)),
            }
        }
        out
    })
}

fn split_lines(log: &[u8]) -> Vec<&[u8]> {
    let mut lines: Vec<&[u8]> = log.split(|&b| b == b'\n').collect();
    // The text ends with a newline, so the last piece is empty; a non-empty
    // last piece is a line cut short.
    if lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    lines
}

/// Checks `<state_dir>/audit/` and reports the first problem.
pub fn verify(state_dir: &Path) -> Result<VerifyReport, AuditError> {
    let dir = state_dir.join(AUDIT_DIR);
    if !dir.is_dir() {
        return Err(AuditError::NotFound(dir));
    }
    let snap = Snapshot::take(&dir)?;
    let key = verifying_key(&dir);
    let lines = split_lines(&snap.log);
    // Where each line ends in the log, its newline included (a last line
    // cut short has none): the head's length must be one of these.
    let ends: Vec<u64> = lines
        .iter()
        .map(|line| {
            let end = line.as_ptr() as usize - snap.log.as_ptr() as usize + line.len();
            (end + usize::from(end < snap.log.len())) as u64
        })
        .collect();
    let parsed = parse_lines(&lines);
    Ok(Verifier {
        snap: &snap,
        key: &key,
        parsed: &parsed,
        ends: &ends,
    }
    .run())
}

struct Verifier<'a> {
    snap: &'a Snapshot,
    key: &'a Result<VerifyingKey, String>,
    parsed: &'a [Result<ParsedLine, LineFault>],
    ends: &'a [u64],
}

impl Verifier<'_> {
    fn run(&self) -> VerifyReport {
        let head = &self.snap.head;
        let checkpoint_ok: Vec<Result<(), String>> = self
            .snap
            .checkpoints
            .iter()
            .map(|row| checkpoint_signature_ok(self.key, row))
            .collect();
        // Records up to here are vouched for by the head or a signature.
        let last_signed = self
            .snap
            .checkpoints
            .iter()
            .zip(&checkpoint_ok)
            .filter(|(_, ok)| ok.is_ok())
            .map(|(row, _)| row.seq)
            .max()
            .unwrap_or(0);
        let trusted_end = head.seq.max(last_signed);

        let mut report = VerifyReport {
            records: 0,
            checkpoints: 0,
            problem: None,
        };
        let fail = |report: &mut VerifyReport, seq: u64, line: u64, kind: ProblemKind, detail: String| {
            report.problem = Some(Problem {
                seq,
                line,
                kind,
                detail,
            });
        };

        let mut next_checkpoint = 0usize;
        let mut prev_hash = GENESIS_DIGEST;
        let head_hash = decode_hex32(head.hash.as_bytes());
        let mut prev_signed = 0u64;
        for (index, parsed) in self.parsed.iter().enumerate() {
            let line = index as u64 + 1;
            let expected = line;
            if expected > trusted_end {
                let detail = self.forged_detail(line, trusted_end);
                fail(&mut report, expected, line, ProblemKind::ForgedAppend, detail);
                return report;
            }
            let record = match parsed {
                Ok(record) => record,
                Err(LineFault::Unreadable(message)) => {
                    fail(
                        &mut report,
                        expected,
                        line,
                        ProblemKind::Unreadable,
                        format!("line {line} is not an audit record: {message}"),
                    );
                    return report;
                }
                Err(LineFault::NonCanonical) => {
                    fail(
                        &mut report,
                        expected,
                        line,
                        ProblemKind::Edited,
                        format!("line {line} is a record but not in the layout we write: a field was added or moved, or the formatting changed"),
                    );
                    return report;
                }
            };
            if record.computed != record.hash {
                fail(
                    &mut report,
                    expected,
                    line,
                    ProblemKind::Edited,
                    format!(
                        "record seq {} on line {line}: content hashes to {} but the record says {}",
                        record.seq,
                        hex::encode(record.computed),
                        hex::encode(record.hash)
                    ),
                );
                return report;
            }
            if record.seq != expected {
                let (kind, detail) = self.classify_seq_jump(expected, record.seq, line);
                fail(&mut report, expected, line, kind, detail);
                return report;
            }
            if record.prev != prev_hash {
                if self.hash_exists(&record.prev) || self.successor_elsewhere(&prev_hash, index) {
                    fail(
                        &mut report,
                        expected,
                        line,
                        ProblemKind::Reordered,
                        format!("record {expected} is not chained to the line before it, but its neighbour in the chain is elsewhere in the log"),
                    );
                } else {
                    // The record before is self-consistent but is not the one
                    // this record was chained to: it was replaced and its hash
                    // recomputed.
                    let seq = expected.saturating_sub(1).max(1);
                    fail(
                        &mut report,
                        seq,
                        line.saturating_sub(1).max(1),
                        ProblemKind::Edited,
                        format!(
                            "record {expected} does not link to the record before it: record {seq} was rewritten with a recomputed hash"
                        ),
                    );
                    report.records = seq - 1;
                }
                return report;
            }

            while next_checkpoint < self.snap.checkpoints.len() && self.snap.checkpoints[next_checkpoint].seq < expected
            {
                // Checkpoint rows for seq 0 (never written by us) or skipped
                // over; handled after the walk.
                next_checkpoint += 1;
            }
            if let Some(row) = self
                .snap
                .checkpoints
                .get(next_checkpoint)
                .filter(|row| row.seq == expected)
            {
                if let Err(message) = &checkpoint_ok[next_checkpoint] {
                    fail(
                        &mut report,
                        expected,
                        line,
                        ProblemKind::BadCheckpoint,
                        format!("checkpoint at seq {expected}: {message}"),
                    );
                    return report;
                }
                if decode_hex32(row.hash.as_bytes()) != Some(record.hash) {
                    fail(
                        &mut report,
                        expected,
                        line,
                        ProblemKind::Edited,
                        format!(
                            "the signed checkpoint at seq {expected} vouches for a different hash: a record in seq {}..={expected} was rewritten and the chain (and head) recomputed",
                            prev_signed + 1
                        ),
                    );
                    return report;
                }
                report.checkpoints += 1;
                prev_signed = expected;
                next_checkpoint += 1;
            } else if expected.is_multiple_of(CHECKPOINT_INTERVAL) && expected <= head.seq {
                fail(
                    &mut report,
                    expected,
                    line,
                    ProblemKind::BadCheckpoint,
                    format!("the checkpoint required at seq {expected} is missing from the database"),
                );
                return report;
            }
            if expected == head.seq && head_hash != Some(record.hash) {
                fail(
                    &mut report,
                    expected,
                    line,
                    ProblemKind::Edited,
                    format!("record {expected} is not the record the head committed (hash differs)"),
                );
                return report;
            }
            if expected == head.seq && self.ends[index] != head.log_len {
                fail(
                    &mut report,
                    expected,
                    line,
                    ProblemKind::Edited,
                    format!(
                        "the head says the log ends at byte {} after record {expected}, but that record (its newline included) ends at byte {}: the head or the log was edited",
                        head.log_len, self.ends[index]
                    ),
                );
                return report;
            }
            prev_hash = record.hash;
            report.records = expected;
        }

        let present = self.parsed.len() as u64;
        if present < trusted_end {
            let detail = if head.seq > present {
                format!("the log ends at seq {present} but the head is at seq {}", head.seq)
            } else {
                format!(
                    "the log ends at seq {present} but a signed checkpoint covers seq {last_signed} (the head, seq {}, was rolled back too)",
                    head.seq
                )
            };
            fail(&mut report, present + 1, present + 1, ProblemKind::Truncated, detail);
            return report;
        }
        if let Some((row, ok)) = self
            .snap
            .checkpoints
            .iter()
            .zip(&checkpoint_ok)
            .find(|(row, ok)| ok.is_err() && (row.seq == 0 || row.seq > present))
        {
            let message = ok.as_ref().err().cloned().unwrap_or_default();
            fail(
                &mut report,
                row.seq,
                row.seq,
                ProblemKind::BadCheckpoint,
                format!("checkpoint at seq {} (not in the log): {message}", row.seq),
            );
            return report;
        }
        if head.seq < last_signed {
            fail(
                &mut report,
                last_signed,
                last_signed,
                ProblemKind::BadCheckpoint,
                format!(
                    "the head (seq {}) is behind the signed checkpoint at seq {last_signed}: the head was rolled back",
                    head.seq
                ),
            );
            return report;
        }
        if let Some(fault) = &self.snap.head_fault {
            // The walk above used the database's head instead; this is
            // still damage an operator must look at.
            fail(
                &mut report,
                head.seq,
                0,
                ProblemKind::Edited,
                format!("audit/head is damaged: {fault}"),
            );
            return report;
        }
        if let Some((seq, name)) = self.snap.quarantined.first() {
            fail(
                &mut report,
                *seq,
                *seq,
                ProblemKind::ForgedAppend,
                format!(
                    "{name} holds bytes that were past the committed head when an append found them (seq {seq} onward); {}",
                    CRASH_NOTE
                ),
            );
        }
        report
    }

    fn forged_detail(&self, line: u64, trusted_end: u64) -> String {
        let seq = self.snap.head.seq;
        let head = match self.snap.head_source {
            HeadSource::File => format!("the head is at seq {seq}"),
            HeadSource::Database => format!(
                "the head is at seq {seq}, the database's last checkpoint ({})",
                self.head_file_state()
            ),
            HeadSource::Nothing => {
                format!(
                    "there is no head ({}, no audit.sqlite), so no record is covered",
                    self.head_file_state()
                )
            }
        };
        format!(
            "line {line} onward is past the committed log ({head}; last trusted seq {trusted_end}) and not covered by a signed checkpoint; {CRASH_NOTE}"
        )
    }

    fn head_file_state(&self) -> String {
        match &self.snap.head_fault {
            Some(fault) => format!("audit/head is damaged: {fault}"),
            None if self.snap.head_source == HeadSource::Database => "audit/head is missing or behind it".into(),
            None => "no audit/head".into(),
        }
    }

    fn classify_seq_jump(&self, expected: u64, found: u64, line: u64) -> (ProblemKind, String) {
        let expected_elsewhere = self.parsed.iter().any(|p| p.as_ref().is_ok_and(|p| p.seq == expected));
        if found > expected && !expected_elsewhere {
            (
                ProblemKind::Missing,
                format!("line {line} holds seq {found}; record {expected} is not in the log (deleted)"),
            )
        } else {
            (
                ProblemKind::Reordered,
                format!("line {line} holds seq {found} where seq {expected} belongs; records were moved or duplicated"),
            )
        }
    }

    /// Whether a record other than the one at `index` names `hash` as its
    /// predecessor, i.e. the real successor of that record was moved.
    fn successor_elsewhere(&self, hash: &Digest32, index: usize) -> bool {
        self.parsed
            .iter()
            .enumerate()
            .any(|(i, p)| i != index && p.as_ref().is_ok_and(|p| p.prev == *hash))
    }

    fn hash_exists(&self, hash: &Digest32) -> bool {
        self.parsed.iter().any(|p| p.as_ref().is_ok_and(|p| p.hash == *hash))
    }
}

const CRASH_NOTE: &str = "this is either a forged record or a launcher that was killed after writing the line and before writing the head (append order: lock, compute, write line, write head); the next append moves such a tail to a quarantine file";

// ---------------------------------------------------------------------------
// Reading and display

/// Records for `audit show`, optionally only one session's and only those
/// with `seq >= since`. Does not verify; run [`verify`] for that.
pub fn read_records(
    state_dir: &Path,
    session: Option<&str>,
    since: Option<u64>,
) -> Result<Vec<AuditRecord>, AuditError> {
    let (records, unreadable) = read_readable_records(state_dir, session, since)?;
    match unreadable.into_iter().next() {
        Some(first) => Err(first),
        None => Ok(records),
    }
}

/// The records [`read_records`] reads, and one error for each line that is
/// not a record (each naming its line): an operator reading the log of a
/// damaged or tampered state directory sees every record that can be read,
/// and where the others were.
pub fn read_readable_records(
    state_dir: &Path,
    session: Option<&str>,
    since: Option<u64>,
) -> Result<(Vec<AuditRecord>, Vec<AuditError>), AuditError> {
    let dir = state_dir.join(AUDIT_DIR);
    if !dir.is_dir() {
        return Err(AuditError::NotFound(dir));
    }
    let bytes = read_log_bytes(&dir)?;
    let (mut records, mut unreadable) = (Vec::new(), Vec::new());
    for (index, line) in split_lines(&bytes).into_iter().enumerate() {
        let record = match parse_record(line) {
            Ok(r) => r,
            Err(e) => {
                unreadable.push(AuditError::Corrupt {
                    path: dir.join(LOG_FILE),
                    line: index as u64 + 1,
                    message: e.to_string(),
                });
                continue;
            }
        };
        if since.is_some_and(|since| record.seq < since) {
            continue;
        }
        if session.is_some_and(|s| record.entry.session.as_deref() != Some(s)) {
            continue;
        }
        records.push(record);
    }
    Ok((records, unreadable))
}

/// One readable line per record. Text that came from the agent (commands,
/// details) is escaped, so control characters cannot rewrite the operator's
/// terminal or fake extra lines.
pub fn format_human(rec: &AuditRecord) -> String {
    let e = &rec.entry;
    // The time too: the log is a file, and a record whose time was edited
    // (which `audit verify` reports) must not rewrite the screen either.
    let mut out = format!("#{} {} {}", rec.seq, quote_if_needed(&rec.time), e.kind.as_str());
    let mut field = |name: &str, value: &str| {
        out.push(' ');
        out.push_str(name);
        out.push('=');
        out.push_str(&quote_if_needed(value));
    };
    if let Some(v) = &e.session {
        field("session", v);
    }
    if let Some(v) = &e.actor {
        field("actor", v);
    }
    if let Some(v) = &e.decision {
        field("decision", v);
    }
    if let Some(v) = &e.rules {
        field("rules", &v.join(","));
    }
    if let Some(v) = &e.approval_id {
        field("approval", v);
    }
    if let Some(v) = &e.approver_key_ids {
        field("approvers", &v.join(","));
    }
    if let Some(v) = e.exit_code {
        field("exit", &v.to_string());
    }
    if let Some(v) = e.signal {
        field("signal", &v.to_string());
    }
    if e.timed_out == Some(true) {
        field("timed_out", "true");
    }
    if let Some(v) = e.duration_ms {
        field("duration", &format!("{v}ms"));
    }
    if let Some(c) = &e.changes {
        field("changes", &c.count.to_string());
        if !c.rolled_back.is_empty() {
            field("rolled_back", &c.rolled_back.join(","));
        }
    }
    if let Some(v) = &e.command {
        field("cmd", v);
    }
    if let Some(v) = &e.detail {
        field("detail", v);
    }
    out
}

fn quote_if_needed(value: &str) -> String {
    let plain = !value.is_empty()
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._:-/@+=,*".contains(&b));
    if plain {
        value.to_string()
    } else {
        format!("{value:?}")
    }
}

// ---------------------------------------------------------------------------
// Time

/// `2026-01-31T23:59:59.123Z`. A clock before 1970 is written as the epoch
/// rather than failing the append.
pub(crate) fn format_rfc3339_millis(time: SystemTime) -> String {
    let since_epoch = time.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    let secs = since_epoch.as_secs();
    let (year, month, day) = civil_from_days((secs / 86_400) as i64);
    let of_day = secs % 86_400;
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60,
        since_epoch.subsec_millis()
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's
/// `civil_from_days`): shift to eras of 400 years starting in March so that
/// the leap day falls at the end of the year.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_index + 2) / 5 + 1) as u32;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

// ---------------------------------------------------------------------------
// Redaction

const REDACTED: &str = "***";

/// Hides credentials in command text; the rules are in the module docs.
pub fn redact(text: &str) -> String {
    let bytes = text.as_bytes();
    let quotes = quote_context(bytes);
    let mut spans = Vec::new();
    scan_flags(bytes, &quotes, &mut spans);
    scan_assignments(bytes, &quotes, &mut spans);
    scan_headers(bytes, &mut spans);
    scan_url_userinfo(bytes, &mut spans);
    scan_key_shapes(bytes, &mut spans);
    apply_spans(text, spans)
}

/// Replaces each (merged) byte range with `***`.
fn apply_spans(text: &str, mut spans: Vec<(usize, usize)>) -> String {
    spans.retain(|(start, end)| start < end);
    if spans.is_empty() {
        return text.to_string();
    }
    spans.sort_unstable();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut index = 0;
    while index < spans.len() {
        let (start, mut end) = spans[index];
        index += 1;
        while index < spans.len() && spans[index].0 <= end {
            end = end.max(spans[index].1);
            index += 1;
        }
        // Spans start after and end before ASCII bytes, so these are char
        // boundaries.
        out.push_str(&text[copied..start]);
        out.push_str(REDACTED);
        copied = end;
    }
    out.push_str(&text[copied..]);
    out
}

/// For each byte, the quote character it is inside of (0 when unquoted),
/// following POSIX shell rules closely enough to find where a value ends.
/// Quote characters themselves are marked as unquoted.
fn quote_context(b: &[u8]) -> Vec<u8> {
    let mut ctx = vec![0u8; b.len()];
    let mut state = 0u8;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        match state {
            0 if c == b'\\' => i += 1,
            0 if c == b'\'' || c == b'"' => state = c,
            b'\'' if c == b'\'' => state = 0,
            b'"' if c == b'"' => state = 0,
            b'"' if c == b'\\' => {
                ctx[i] = state;
                if i + 1 < b.len() {
                    ctx[i + 1] = state;
                }
                i += 1;
            }
            0 => {}
            _ => ctx[i] = state,
        }
        i += 1;
    }
    ctx
}

fn is_shell_break(c: u8) -> bool {
    c.is_ascii_whitespace() || b";&|<>()`".contains(&c)
}

/// End of a value starting at `start`. Inside quotes it runs to the closing
/// quote or to a command separator (`bash -c "export TOKEN=x; make"` keeps
/// `make`); unquoted it runs to the end of the shell word, through any
/// quoted parts (`PASSWORD="a b"c`).
fn value_end(b: &[u8], quotes: &[u8], start: usize) -> usize {
    if start > 0 && start <= b.len() && quotes[start - 1] != 0 {
        let q = quotes[start - 1];
        let mut i = start;
        while i < b.len() && quotes[i] == q && !b";&|\n".contains(&b[i]) {
            i += 1;
        }
        return i;
    }
    let mut i = start;
    while i < b.len() {
        match b[i] {
            q @ (b'\'' | b'"') => {
                i += 1;
                while i < b.len() && b[i] != q {
                    if q == b'"' && b[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
                i = (i + 1).min(b.len());
            }
            b'\\' => i = (i + 2).min(b.len()),
            c if is_shell_break(c) => break,
            _ => i += 1,
        }
    }
    i
}

/// End of a URL query parameter value.
fn query_value_end(b: &[u8], start: usize) -> usize {
    let mut i = start;
    while i < b.len() && !(b"&#'\"".contains(&b[i]) || is_shell_break(b[i])) {
        i += 1;
    }
    i
}

fn is_word_start_boundary(c: u8) -> bool {
    c.is_ascii_whitespace() || b"'\"(;&|=".contains(&c)
}

const SECRET_FLAGS: &[&str] = &[
    "password",
    "passwd",
    "token",
    "secret",
    "api-key",
    "apikey",
    "access-token",
    "auth",
];
const SECRET_FLAG_SUFFIXES: &[&str] = &["-password", "-passwd", "-token", "-secret", "-api-key", "-apikey"];

fn is_secret_flag(name: &str) -> bool {
    SECRET_FLAGS.contains(&name) || SECRET_FLAG_SUFFIXES.iter().any(|s| name.ends_with(s))
}

/// `--flag=value` and `--flag value`.
fn scan_flags(b: &[u8], quotes: &[u8], spans: &mut Vec<(usize, usize)>) {
    let mut i = 0;
    while i + 2 < b.len() {
        if !(b[i] == b'-' && b[i + 1] == b'-' && (i == 0 || is_word_start_boundary(b[i - 1]))) {
            i += 1;
            continue;
        }
        let name_start = i + 2;
        let mut j = name_start;
        while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'-' || b[j] == b'_') {
            j += 1;
        }
        let name = String::from_utf8_lossy(&b[name_start..j])
            .to_ascii_lowercase()
            .replace('_', "-");
        let mut next = j.max(i + 1);
        if is_secret_flag(&name) && j < b.len() {
            if b[j] == b'=' {
                let end = value_end(b, quotes, j + 1);
                spans.push((j + 1, end));
                next = next.max(end);
            } else if b[j] == b' ' || b[j] == b'\t' {
                let k = skip_blanks(b, j);
                if k < b.len() && b[k] != b'-' && !is_shell_break(b[k]) {
                    let end = value_end(b, quotes, k);
                    spans.push((k, end));
                    next = next.max(end);
                }
            }
        }
        // Resuming after the value keeps the scan linear even on hostile
        // input such as thousands of unterminated `--token '`.
        i = next;
    }
}

const SECRET_NAME_PARTS: &[&str] = &[
    "secret",
    "token",
    "password",
    "passwd",
    "api_key",
    "apikey",
    "access_key",
    "private_key",
    "credential",
];

/// `NAME=value`, including `-e NAME=…`, `-Dname.password=…` and `?token=…`.
fn scan_assignments(b: &[u8], quotes: &[u8], spans: &mut Vec<(usize, usize)>) {
    let mut eq = 0;
    while eq < b.len() {
        if b[eq] != b'=' {
            eq += 1;
            continue;
        }
        let here = eq;
        eq += 1;
        let mut start = here;
        while start > 0 && (b[start - 1].is_ascii_alphanumeric() || b[start - 1] == b'_' || b[start - 1] == b'.') {
            start -= 1;
        }
        if start == here || !(b[start].is_ascii_alphabetic() || b[start] == b'_') {
            continue;
        }
        let before = if start == 0 { b' ' } else { b[start - 1] };
        let query = before == b'?' || before == b'&';
        if !(query || is_word_start_boundary(before) || before == b'-' || before == b'{' || before == b',') {
            continue;
        }
        if !is_secret_name(&String::from_utf8_lossy(&b[start..here])) {
            continue;
        }
        let end = if query {
            query_value_end(b, here + 1)
        } else {
            value_end(b, quotes, here + 1)
        };
        spans.push((here + 1, end));
        eq = end.max(eq);
    }
}

const AUTH_SCHEMES: &[&str] = &["bearer", "basic", "token", "digest", "negotiate", "apikey"];
const SECRET_HEADER_SUFFIXES: &[&str] = &["token", "api-key", "apikey", "secret", "password"];

/// End of a header value word: stops at whitespace or a quote.
fn word_end(b: &[u8], start: usize) -> usize {
    let mut i = start;
    while i < b.len() && !b[i].is_ascii_whitespace() && b[i] != b'"' && b[i] != b'\'' {
        i += 1;
    }
    i
}

fn skip_blanks(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && (b[i] == b' ' || b[i] == b'\t') {
        i += 1;
    }
    i
}

fn is_secret_name(name: &str) -> bool {
    let name = name.to_ascii_lowercase().replace('-', "_");
    SECRET_NAME_PARTS.iter().any(|part| name.contains(part))
}

/// `Authorization: Bearer …` and `X-Api-Key: …`-style headers, and JSON
/// keys such as `{"password": "…"}`.
fn scan_headers(b: &[u8], spans: &mut Vec<(usize, usize)>) {
    let mut resume = 0;
    for colon in 0..b.len() {
        if b[colon] != b':' || colon < resume {
            continue;
        }
        let json_key = colon > 0 && b[colon - 1] == b'"';
        let name_end = if json_key { colon - 1 } else { colon };
        let mut start = name_end;
        while start > 0 && (b[start - 1].is_ascii_alphanumeric() || b[start - 1] == b'-' || b[start - 1] == b'_') {
            start -= 1;
        }
        if start == name_end {
            continue;
        }
        let name = String::from_utf8_lossy(&b[start..name_end]).to_ascii_lowercase();
        let value = skip_blanks(b, colon + 1);
        if json_key {
            if is_secret_name(&name) && b.get(value) == Some(&b'"') {
                let mut end = value + 1;
                while end < b.len() && b[end] != b'"' {
                    end += if b[end] == b'\\' { 2 } else { 1 };
                }
                spans.push((value + 1, end.min(b.len())));
                resume = end;
            }
        } else if name == "authorization" || name.ends_with("-authorization") {
            let word_stop = word_end(b, value);
            let scheme = String::from_utf8_lossy(&b[value..word_stop]).to_ascii_lowercase();
            if AUTH_SCHEMES.contains(&scheme.as_str()) {
                let cred = skip_blanks(b, word_stop);
                if cred > word_stop {
                    spans.push((cred, word_end(b, cred)));
                }
            } else {
                spans.push((value, word_stop));
            }
        } else if value > colon + 1 && SECRET_HEADER_SUFFIXES.iter().any(|s| name.ends_with(s)) {
            spans.push((value, word_end(b, value)));
        }
    }
}

/// `scheme://user:password@host`: hides the password.
fn scan_url_userinfo(b: &[u8], spans: &mut Vec<(usize, usize)>) {
    let mut i = 0;
    while i + 3 <= b.len() {
        if &b[i..i + 3] != b"://" || i == 0 || !b[i - 1].is_ascii_alphanumeric() {
            i += 1;
            continue;
        }
        let authority = i + 3;
        let mut end = authority;
        while end < b.len() && !(b"/?#'\"<>".contains(&b[end]) || b[end].is_ascii_whitespace()) {
            end += 1;
        }
        if let Some(at) = b[authority..end].iter().rposition(|&c| c == b'@') {
            let at = authority + at;
            if let Some(colon) = b[authority..at].iter().position(|&c| c == b':') {
                spans.push((authority + colon + 1, at));
            }
        }
        i = end.max(i + 1);
    }
}

fn is_key_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'-'
}

fn run_len(b: &[u8], start: usize, accept: impl Fn(u8) -> bool) -> usize {
    b[start.min(b.len())..].iter().take_while(|&&c| accept(c)).count()
}

/// Well-known credential shapes; keeps the prefix, hides the rest.
fn scan_key_shapes(b: &[u8], spans: &mut Vec<(usize, usize)>) {
    // (prefix, characters allowed after it, minimum count after it)
    type Shape = (&'static [u8], fn(u8) -> bool, usize);
    const SHAPES: &[Shape] = &[
        (b"sk-", is_key_char, 20),
        (b"ghp_", |c| c.is_ascii_alphanumeric(), 20),
        (b"gho_", |c| c.is_ascii_alphanumeric(), 20),
        (b"ghs_", |c| c.is_ascii_alphanumeric(), 20),
        (b"ghu_", |c| c.is_ascii_alphanumeric(), 20),
        (b"ghr_", |c| c.is_ascii_alphanumeric(), 20),
        (b"github_pat_", |c| c.is_ascii_alphanumeric() || c == b'_', 20),
        (b"xoxb-", |c| c.is_ascii_alphanumeric() || c == b'-', 10),
        (b"xoxa-", |c| c.is_ascii_alphanumeric() || c == b'-', 10),
        (b"xoxp-", |c| c.is_ascii_alphanumeric() || c == b'-', 10),
        (b"AIza", is_key_char, 35),
    ];
    // Only the start of a run of key characters can start a key, which also
    // keeps the scan linear: each run is measured once per shape.
    let mut resume = 0;
    for i in 0..b.len() {
        if i < resume || (i > 0 && is_key_char(b[i - 1])) {
            continue;
        }
        let before = spans.len();
        let rest = &b[i..];
        for (prefix, accept, min) in SHAPES {
            if rest.starts_with(prefix) {
                let n = run_len(b, i + prefix.len(), accept);
                if n >= *min {
                    spans.push((i + prefix.len(), i + prefix.len() + n));
                }
            }
        }
        if rest.starts_with(b"AKIA") {
            let n = run_len(b, i + 4, |c| c.is_ascii_digit() || c.is_ascii_uppercase());
            let after = b.get(i + 4 + n).copied().unwrap_or(b' ');
            if n == 16 && !after.is_ascii_alphanumeric() {
                spans.push((i + 4, i + 20));
            }
        }
        if rest.starts_with(b"eyJ") {
            if let Some(end) = jwt_end(b, i) {
                spans.push((i + 3, end));
            }
        }
        if let Some(end) = spans[before..].iter().map(|&(_, end)| end).max() {
            resume = end;
        }
    }
}

/// `eyJ<header>.eyJ<payload>.<signature>`; the signature may be empty
/// (unsigned tokens are still bearer credentials).
fn jwt_end(b: &[u8], start: usize) -> Option<usize> {
    let header = run_len(b, start, is_key_char);
    let dot = start + header;
    if header <= 3 || b.get(dot) != Some(&b'.') || !b[dot + 1..].starts_with(b"eyJ") {
        return None;
    }
    let payload = run_len(b, dot + 1, is_key_char);
    let dot2 = dot + 1 + payload;
    if payload <= 3 || b.get(dot2) != Some(&b'.') {
        return None;
    }
    Some(dot2 + 1 + run_len(b, dot2 + 1, is_key_char))
}

/// Benchmark builds only (`--features bench-unaudited`): a log that records
/// nothing, so `scripts/bench-audit.sh` can measure what recording adds to a
/// run. Every run of such a binary says so on stderr.
#[cfg(feature = "bench-unaudited")]
pub mod unaudited {
    pub struct AuditLog;

    impl AuditLog {
        pub fn open(_state_dir: &std::path::Path) -> Result<AuditLog, super::AuditError> {
            eprintln!("tether-exec: this build records nothing in the audit log (bench-unaudited): benchmarks only");
            Ok(AuditLog)
        }

        pub fn append(&mut self, _entry: super::AuditEntry) -> Result<u64, super::AuditError> {
            Ok(0)
        }

        pub fn ready_to_append(&mut self) -> Result<(), super::AuditError> {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_time_as_rfc3339_utc_millis() {
        let at = |secs: u64, millis: u64| UNIX_EPOCH + Duration::from_millis(secs * 1000 + millis);
        let cases = [
            (at(0, 0), "1970-01-01T00:00:00.000Z"),
            (at(951_782_400, 7), "2000-02-29T00:00:00.007Z"),
            (at(1_700_000_000, 123), "2023-11-14T22:13:20.123Z"),
            (at(4_102_444_799, 999), "2099-12-31T23:59:59.999Z"),
            (at(1_709_251_199, 0), "2024-02-29T23:59:59.000Z"),
        ];
        for (time, expected) in cases {
            assert_eq!(format_rfc3339_millis(time), expected);
        }
    }

    #[test]
    fn encoded_matches_the_serde_definition() {
        let mut entry = AuditEntry::new(EntryKind::RunEnd);
        entry.session = Some("s \"quoted\" \u{1b} ü".into());
        entry.command = Some("echo hi\nthere".into());
        entry.rules = Some(vec!["a".into(), "b".into()]);
        entry.isolation = Some(serde_json::json!({"z": 1.5, "a": [true, null]}));
        entry.exit_code = Some(-1);
        entry.changes = Some(Changes {
            count: 3,
            digest: "d".into(),
            rolled_back: vec!["x".into()],
        });
        let time = "2026-01-01T00:00:00.000Z";
        let encoded = Encoded::new(u64::MAX, time, GENESIS_PREV, &entry).unwrap();
        let body = serde_json::to_string(&CanonicalBody {
            seq: u64::MAX,
            time,
            prev: GENESIS_PREV,
            entry: &entry,
        })
        .unwrap();
        assert_eq!(encoded.hash(), hex::encode(Sha256::digest(body.as_bytes())));
        let hash = encoded.hash();
        let record = AuditRecord {
            seq: u64::MAX,
            time: time.into(),
            prev: GENESIS_PREV.into(),
            hash: hash.clone(),
            entry,
        };
        let line = encoded.line(&hash);
        assert_eq!(
            line,
            format!("{}\n", serde_json::to_string(&record).unwrap()).into_bytes()
        );
        let without_newline = &line[..line.len() - 1];
        assert_eq!(parse_record(without_newline).unwrap(), record);
        let parsed = parse_line(without_newline, &mut Vec::new()).ok().unwrap();
        assert_eq!(parsed.computed, parsed.hash, "raw-byte hash equals the canonical hash");
        assert_eq!(parsed.seq, u64::MAX);
        assert!(parse_line(&line[..line.len() - 2], &mut Vec::new()).is_err());
    }

    #[test]
    fn quote_context_marks_quoted_bytes() {
        let ctx = quote_context(br#"a "b c" 'd'"#);
        assert_eq!(ctx, [0, 0, 0, b'"', b'"', b'"', 0, 0, 0, b'\'', 0]);
    }
}
