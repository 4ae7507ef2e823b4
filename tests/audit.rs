//! Black-box tests of the audit log: only the public API, plus editing the
//! files on disk the way an attacker with write access to them would.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Barrier};

use serde::Serialize;
use sha2::{Digest, Sha256};
use tether_exec::audit::{
    format_human, read_records, redact, verify, AuditEntry, AuditLog, AuditRecord, Changes, EntryKind, ProblemKind,
    VerifyReport,
};

fn audit_dir(state: &Path) -> PathBuf {
    state.join("audit")
}

fn log_path(state: &Path) -> PathBuf {
    audit_dir(state).join("log.jsonl")
}

fn db_path(state: &Path) -> PathBuf {
    audit_dir(state).join("audit.sqlite")
}

fn entry(i: u64) -> AuditEntry {
    let kinds = [
        EntryKind::Decision,
        EntryKind::RunStart,
        EntryKind::RunEnd,
        EntryKind::Commit,
    ];
    let mut e = AuditEntry::new(kinds[(i % 4) as usize]);
    e.session = Some(format!("s{}", i % 3));
    e.actor = Some("harness".into());
    e.command = Some(format!("cargo test --package crate{i} -- --nocapture"));
    e.decision = Some("allow".into());
    e.rules = Some(vec!["allow-cargo".into()]);
    e.exit_code = Some((i % 2) as i32);
    e.duration_ms = Some(i * 10);
    e
}

/// A state dir holding `n` records written through the public API.
fn make_log(n: u64) -> tempfile::TempDir {
    let state = tempfile::tempdir().unwrap();
    let mut log = AuditLog::open(state.path()).unwrap();
    for i in 1..=n {
        assert_eq!(log.append(entry(i)).unwrap(), i);
    }
    state
}

fn read_lines(state: &Path) -> Vec<String> {
    fs::read_to_string(log_path(state))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

fn write_lines(state: &Path, lines: &[String]) {
    let mut text = lines.join("\n");
    if !lines.is_empty() {
        text.push('\n');
    }
    fs::write(log_path(state), text).unwrap();
}

fn problem_of(report: &VerifyReport) -> (ProblemKind, u64, u64) {
    let p = report
        .problem
        .as_ref()
        .unwrap_or_else(|| panic!("tampering not detected: {report:?}"));
    (p.kind, p.seq, p.line)
}

/// The attacker's own implementation of the documented chain hash: SHA-256
/// over the record without `hash`, fields in declaration order.
#[derive(Serialize)]
struct Body<'a> {
    seq: u64,
    time: &'a str,
    prev: &'a str,
    #[serde(flatten)]
    entry: &'a AuditEntry,
}

fn chain_hash(rec: &AuditRecord) -> String {
    let body = serde_json::to_string(&Body {
        seq: rec.seq,
        time: &rec.time,
        prev: &rec.prev,
        entry: &rec.entry,
    })
    .unwrap();
    hex::encode(Sha256::digest(body.as_bytes()))
}

/// Re-links records `from..` after an edit, as a careful attacker would.
fn rechain(lines: &mut [String], from: usize) {
    for i in from..lines.len() {
        let mut rec: AuditRecord = serde_json::from_str(&lines[i]).unwrap();
        if i > 0 {
            let before: AuditRecord = serde_json::from_str(&lines[i - 1]).unwrap();
            rec.prev = before.hash;
        }
        rec.hash = chain_hash(&rec);
        lines[i] = serde_json::to_string(&rec).unwrap();
    }
}

/// Points every head (the head file, and the database's where it is ahead)
/// at the last of `lines`, as an attacker who can write the whole audit
/// directory would after editing the log.
fn set_head_to(state: &Path, lines: &[String]) {
    let last: AuditRecord = serde_json::from_str(lines.last().unwrap()).unwrap();
    let len = fs::metadata(log_path(state)).unwrap().len();
    write_head_file(state, last.seq, &last.hash, len);
    let conn = rusqlite::Connection::open(db_path(state)).unwrap();
    conn.execute(
        "UPDATE head SET seq = ?1, hash = ?2, log_len = ?3 WHERE id = 1 AND seq > ?1",
        rusqlite::params![last.seq as i64, last.hash, len as i64],
    )
    .unwrap();
}

/// Writes `audit/head` in its documented layout, check field included, as
/// written in a boot that is not this one.
fn write_head_file(state: &Path, seq: u64, hash: &str, log_len: u64) {
    write_head_file_in_boot(state, seq, hash, log_len, "00000000-0000-0000-0000-000000000000");
}

fn write_head_file_in_boot(state: &Path, seq: u64, hash: &str, log_len: u64, boot: &str) {
    let body = format!("tether-exec audit head v1 seq={seq:020} log_len={log_len:020} hash={hash} boot={boot}");
    let check = hex::encode(&Sha256::digest(body.as_bytes())[..8]);
    fs::write(audit_dir(state).join("head"), format!("{body} check={check}\n")).unwrap();
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

// --- intact logs ------------------------------------------------------------

#[test]
fn intact_log_verifies_with_its_checkpoints() {
    let state = make_log(300);
    AuditLog::open(state.path()).unwrap().checkpoint().unwrap();
    let report = verify(state.path()).unwrap();
    assert_eq!(report.problem, None, "{report:?}");
    assert_eq!(report.records, 300);
    assert_eq!(report.checkpoints, 2, "one every 256 records plus the explicit one");
}

#[test]
fn empty_log_verifies_and_missing_state_is_an_error() {
    let state = tempfile::tempdir().unwrap();
    AuditLog::open(state.path()).unwrap().checkpoint().unwrap();
    let report = verify(state.path()).unwrap();
    assert_eq!((report.records, report.checkpoints, report.problem), (0, 0, None));
    assert!(verify(&state.path().join("nowhere")).is_err());
}

#[test]
fn records_have_the_documented_shape() {
    let state = make_log(2);
    let lines = read_lines(state.path());
    let first: AuditRecord = serde_json::from_str(&lines[0]).unwrap();
    let second: AuditRecord = serde_json::from_str(&lines[1]).unwrap();
    assert_eq!(first.prev, "0".repeat(64));
    assert_eq!(second.prev, first.hash);
    assert_eq!(chain_hash(&first), first.hash);
    // Field order is fixed: seq, time, prev, hash, then the payload.
    assert!(lines[0].starts_with(r#"{"seq":1,"time":""#), "{}", lines[0]);
    let t = first.time.as_bytes();
    assert_eq!(t.len(), 24, "{}", first.time);
    assert_eq!(
        (t[4], t[7], t[10], t[13], t[16], t[19], t[23]),
        (b'-', b'-', b'T', b':', b':', b'.', b'Z')
    );
    assert_eq!(
        serde_json::to_string(&first).unwrap(),
        lines[0],
        "AuditRecord round-trips byte for byte"
    );
}

#[test]
fn key_files_are_created_once_with_private_mode() {
    use std::os::unix::fs::PermissionsExt;
    let state = make_log(1);
    let key = audit_dir(state.path()).join("host.key");
    let meta = fs::metadata(&key).unwrap();
    assert_eq!(meta.len(), 32);
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let before = fs::read(&key).unwrap();
    let pubkey = fs::read_to_string(audit_dir(state.path()).join("host.pub")).unwrap();
    assert_eq!(pubkey.trim().len(), 64);
    drop(AuditLog::open(state.path()).unwrap());
    assert_eq!(fs::read(&key).unwrap(), before, "reopening must not replace the key");
    let dir_mode = fs::metadata(audit_dir(state.path())).unwrap().permissions().mode();
    assert_eq!(dir_mode & 0o777, 0o700);
}

// --- tampering ----------------------------------------------------------------

#[test]
fn editing_one_byte_of_a_payload_is_edited() {
    let state = make_log(20);
    let mut lines = read_lines(state.path());
    let at = lines[6].find("crate7").unwrap() + "crate".len();
    lines[6].replace_range(at..at + 1, "8");
    write_lines(state.path(), &lines);
    let report = verify(state.path()).unwrap();
    assert_eq!(problem_of(&report), (ProblemKind::Edited, 7, 7));
    assert_eq!(report.records, 6);
}

#[test]
fn a_byte_edit_that_breaks_the_json_is_unreadable() {
    let state = make_log(20);
    let mut lines = read_lines(state.path());
    lines[9].replace_range(0..1, "[");
    write_lines(state.path(), &lines);
    assert_eq!(
        problem_of(&verify(state.path()).unwrap()),
        (ProblemKind::Unreadable, 10, 10)
    );
}

#[test]
fn an_added_field_is_edited_even_though_the_hash_ignores_it() {
    let state = make_log(5);
    let mut lines = read_lines(state.path());
    lines[2].insert_str(1, r#""note":"x","#);
    write_lines(state.path(), &lines);
    assert_eq!(problem_of(&verify(state.path()).unwrap()), (ProblemKind::Edited, 3, 3));
}

#[test]
fn an_edit_with_a_recomputed_record_hash_is_edited() {
    let state = make_log(20);
    let mut lines = read_lines(state.path());
    let mut rec: AuditRecord = serde_json::from_str(&lines[4]).unwrap();
    rec.entry.exit_code = Some(0);
    rec.entry.decision = Some("deny".into());
    rec.hash = chain_hash(&rec);
    lines[4] = serde_json::to_string(&rec).unwrap();
    write_lines(state.path(), &lines);
    assert_eq!(problem_of(&verify(state.path()).unwrap()), (ProblemKind::Edited, 5, 5));
}

#[test]
fn deleting_a_record_is_missing() {
    let state = make_log(20);
    let mut lines = read_lines(state.path());
    lines.remove(4);
    write_lines(state.path(), &lines);
    let report = verify(state.path()).unwrap();
    assert_eq!(problem_of(&report), (ProblemKind::Missing, 5, 5));
    assert_eq!(report.records, 4);
}

#[test]
fn swapping_two_records_is_reordered() {
    let state = make_log(20);
    let mut lines = read_lines(state.path());
    lines.swap(7, 8);
    write_lines(state.path(), &lines);
    assert_eq!(
        problem_of(&verify(state.path()).unwrap()),
        (ProblemKind::Reordered, 8, 8)
    );
}

#[test]
fn swapping_and_renumbering_records_is_reordered() {
    // The attacker fixes the seq numbers and hashes but cannot make `prev`
    // of the moved record point at its new neighbour without more edits.
    let state = make_log(20);
    let mut lines = read_lines(state.path());
    lines.swap(7, 8);
    for (i, line) in lines.iter_mut().enumerate().skip(7).take(2) {
        let mut rec: AuditRecord = serde_json::from_str(line).unwrap();
        rec.seq = i as u64 + 1;
        rec.hash = chain_hash(&rec);
        *line = serde_json::to_string(&rec).unwrap();
    }
    write_lines(state.path(), &lines);
    assert_eq!(problem_of(&verify(state.path()).unwrap()).0, ProblemKind::Reordered);
}

#[test]
fn cutting_the_last_three_records_is_truncated() {
    let state = make_log(20);
    let lines = read_lines(state.path());
    write_lines(state.path(), &lines[..17]);
    let report = verify(state.path()).unwrap();
    assert_eq!(problem_of(&report), (ProblemKind::Truncated, 18, 18));
    assert_eq!(report.records, 17);
}

#[test]
fn cutting_the_tail_and_rolling_back_the_head_is_caught_by_an_explicit_checkpoint() {
    let state = make_log(300);
    AuditLog::open(state.path()).unwrap().checkpoint().unwrap();
    let lines = read_lines(state.path());
    write_lines(state.path(), &lines[..297]);
    set_head_to(state.path(), &lines[..297]);
    let report = verify(state.path()).unwrap();
    assert_eq!(problem_of(&report), (ProblemKind::Truncated, 298, 298));
    assert!(report.problem.unwrap().detail.contains("checkpoint"));
}

#[test]
fn cutting_the_tail_and_rolling_back_the_head_is_caught_by_the_automatic_checkpoint() {
    let state = make_log(256);
    let lines = read_lines(state.path());
    write_lines(state.path(), &lines[..253]);
    set_head_to(state.path(), &lines[..253]);
    assert_eq!(
        problem_of(&verify(state.path()).unwrap()),
        (ProblemKind::Truncated, 254, 254)
    );
}

#[test]
fn rewriting_log_and_head_consistently_is_caught_by_the_signature() {
    let state = make_log(300);
    let mut lines = read_lines(state.path());
    let mut rec: AuditRecord = serde_json::from_str(&lines[9]).unwrap();
    rec.entry.command = Some("true".into());
    lines[9] = serde_json::to_string(&rec).unwrap();
    rechain(&mut lines, 9);
    write_lines(state.path(), &lines);
    set_head_to(state.path(), &lines);
    let report = verify(state.path()).unwrap();
    let (kind, seq, _) = problem_of(&report);
    assert_eq!(kind, ProblemKind::Edited);
    assert_eq!(seq, 256, "first point the rewrite is provable");
    assert!(report.problem.unwrap().detail.contains("1..=256"));
}

#[test]
fn appending_a_forged_record_with_a_valid_chain_is_forged_append() {
    let state = make_log(20);
    let mut lines = read_lines(state.path());
    let last: AuditRecord = serde_json::from_str(&lines[19]).unwrap();
    let mut forged = AuditRecord {
        seq: 21,
        time: last.time.clone(),
        prev: last.hash.clone(),
        hash: String::new(),
        entry: AuditEntry::new(EntryKind::Approved),
    };
    forged.entry.actor = Some("approver:deadbeef".into());
    forged.hash = chain_hash(&forged);
    lines.push(serde_json::to_string(&forged).unwrap());
    write_lines(state.path(), &lines);
    let report = verify(state.path()).unwrap();
    assert_eq!(problem_of(&report), (ProblemKind::ForgedAppend, 21, 21));
    assert_eq!(report.records, 20);
    assert!(report.problem.unwrap().detail.contains("killed after writing the line"));
}

#[test]
fn a_tampered_checkpoint_is_bad_checkpoint() {
    let state = make_log(260);
    let conn = rusqlite::Connection::open(db_path(state.path())).unwrap();
    let sig: String = conn
        .query_row("SELECT signature FROM checkpoints WHERE seq = 256", [], |r| r.get(0))
        .unwrap();
    let flipped = if sig.starts_with('0') { "1" } else { "0" };
    conn.execute(
        "UPDATE checkpoints SET signature = ?1 || substr(signature, 2) WHERE seq = 256",
        [flipped],
    )
    .unwrap();
    drop(conn);
    assert_eq!(
        problem_of(&verify(state.path()).unwrap()),
        (ProblemKind::BadCheckpoint, 256, 256)
    );
}

#[test]
fn a_damaged_head_file_is_reported_and_stops_appends() {
    let state = make_log(5);
    let head = audit_dir(state.path()).join("head");
    let mut bytes = fs::read(&head).unwrap();
    let at = bytes.iter().position(|&b| b == b'5').unwrap(); // seq=…05
    bytes[at] = b'9';
    fs::write(&head, &bytes).unwrap();
    let report = verify(state.path()).unwrap();
    let problem = report.problem.clone().unwrap();
    // The walk falls back to the database, which has no head yet: nothing is
    // covered, and the damage is named.
    assert_eq!(problem.kind, ProblemKind::ForgedAppend, "{report:?}");
    assert!(problem.detail.contains("audit/head is damaged"), "{}", problem.detail);
    let err = AuditLog::open(state.path()).unwrap().append(entry(6)).unwrap_err();
    assert!(
        err.to_string().contains("head") && err.to_string().contains("damaged"),
        "{err}"
    );
    assert_eq!(read_lines(state.path()).len(), 5, "nothing was appended");
}

#[test]
fn a_damaged_head_file_past_a_checkpoint_is_still_reported() {
    let state = make_log(300);
    let head = audit_dir(state.path()).join("head");
    fs::write(&head, b"tether-exec audit head v1 seq=300\n").unwrap();
    // The records up to the checkpoint are vouched for by its signature;
    // after it, nothing covers them.
    let report = verify(state.path()).unwrap();
    assert_eq!(problem_of(&report), (ProblemKind::ForgedAppend, 257, 257));
    assert!(report.problem.unwrap().detail.contains("audit/head is damaged"));
    // Put back (as an operator would after review), all is well again.
    let lines = read_lines(state.path());
    set_head_to(state.path(), &lines);
    assert_eq!(verify(state.path()).unwrap().problem, None);
}

#[test]
fn a_deleted_head_file_leaves_the_records_uncovered() {
    let state = make_log(10);
    fs::remove_file(audit_dir(state.path()).join("head")).unwrap();
    let report = verify(state.path()).unwrap();
    assert_eq!(problem_of(&report), (ProblemKind::ForgedAppend, 1, 1));
    assert!(report.problem.unwrap().detail.contains("no head"));
}

#[test]
fn an_append_killed_between_its_checkpoint_and_the_head_file_is_rolled_forward() {
    // Record 256 commits in the database (head and checkpoint) and only then
    // writes the head file. A launcher killed in between leaves the head
    // file at 255: the record is committed, not forged.
    let state = make_log(255);
    let head = audit_dir(state.path()).join("head");
    let before = fs::read(&head).unwrap();
    let mut log = AuditLog::open(state.path()).unwrap();
    assert_eq!(log.append(entry(256)).unwrap(), 256);
    drop(log);
    fs::write(&head, &before).unwrap();
    let report = verify(state.path()).unwrap();
    assert_eq!((report.records, report.checkpoints, report.problem), (256, 1, None));
    let mut log = AuditLog::open(state.path()).unwrap();
    assert_eq!(
        log.append(entry(257)).unwrap(),
        257,
        "continues after 256, nothing quarantined"
    );
    drop(log);
    assert_ne!(fs::read(&head).unwrap(), before, "the head file was brought forward");
    let report = verify(state.path()).unwrap();
    assert_eq!((report.records, report.problem), (257, None));
}

#[test]
fn a_directory_whose_head_is_only_in_the_database_is_carried_over() {
    // Earlier builds kept the head only in audit.sqlite, updated with every
    // record. Such a directory verifies as it is, and the next append starts
    // the head file from it.
    let state = make_log(20);
    AuditLog::open(state.path()).unwrap().checkpoint().unwrap();
    fs::remove_file(audit_dir(state.path()).join("head")).unwrap();
    // The schema those builds wrote.
    let conn = rusqlite::Connection::open(db_path(state.path())).unwrap();
    conn.execute_batch("ALTER TABLE head DROP COLUMN head_file; PRAGMA user_version = 1;")
        .unwrap();
    drop(conn);
    assert_eq!(verify(state.path()).unwrap().problem, None);
    let mut log = AuditLog::open(state.path()).unwrap();
    assert_eq!(log.append(entry(21)).unwrap(), 21);
    drop(log);
    let report = verify(state.path()).unwrap();
    assert_eq!((report.records, report.problem), (21, None));
}

#[test]
fn a_head_file_replaced_under_a_running_writer_is_followed() {
    // A copy renamed over `head` (a restore, an editor, rsync) while a
    // launcher has it open: the launcher must write the file now in place,
    // or the next writer would quarantine its committed records.
    let state = make_log(10);
    let head = audit_dir(state.path()).join("head");
    let mut running = AuditLog::open(state.path()).unwrap();
    let copy = audit_dir(state.path()).join("head.copy");
    fs::copy(&head, &copy).unwrap();
    fs::rename(&copy, &head).unwrap();
    assert_eq!(running.append(entry(11)).unwrap(), 11);
    let mut other = AuditLog::open(state.path()).unwrap();
    assert_eq!(other.append(entry(12)).unwrap(), 12);
    assert_eq!(running.append(entry(13)).unwrap(), 13);
    let report = verify(state.path()).unwrap();
    assert_eq!((report.records, report.problem), (13, None));
    let quarantined = fs::read_dir(audit_dir(state.path()))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("quarantine-")
        })
        .count();
    assert_eq!(quarantined, 0);
}

/// The log and head file of a directory as they were before record 256 (a
/// checkpoint) was appended, then 256 appended: returns what the log and
/// head file held before.
fn state_before_a_checkpoint() -> (tempfile::TempDir, Vec<u8>, Vec<u8>) {
    let state = make_log(255);
    let log_before = fs::read(log_path(state.path())).unwrap();
    let head_before = fs::read(audit_dir(state.path()).join("head")).unwrap();
    assert_eq!(AuditLog::open(state.path()).unwrap().append(entry(256)).unwrap(), 256);
    (state, log_before, head_before)
}

#[test]
fn after_a_power_cut_a_database_ahead_of_the_log_stops_appends() {
    // A power cut kept the checkpoint commit of record 256 but lost record
    // 256's line and head write. The first append of the new boot consults
    // the database and refuses, rather than write another record 256.
    let (state, log_before, _) = state_before_a_checkpoint();
    fs::write(log_path(state.path()), &log_before).unwrap();
    let before: AuditRecord = serde_json::from_str(
        log_before
            .split(|&b| b == b'\n')
            .nth(254)
            .map(|l| std::str::from_utf8(l).unwrap())
            .unwrap(),
    )
    .unwrap();
    write_head_file(state.path(), 255, &before.hash, log_before.len() as u64);
    assert_record_256_refused(state.path(), &log_before, "truncated");
}

/// Appending record 256 again fails, saying `why`, appends nothing, and
/// `verify` reports the log cut short.
fn assert_record_256_refused(state: &Path, log_before: &[u8], why: &str) {
    let err = AuditLog::open(state).unwrap().append(entry(256)).unwrap_err();
    assert!(err.to_string().contains(why), "{err}");
    assert_eq!(fs::read(log_path(state)).unwrap(), log_before, "nothing was appended");
    assert_eq!(problem_of(&verify(state).unwrap()).0, ProblemKind::Truncated);
}

#[test]
fn a_database_ahead_of_a_rolled_back_log_is_not_buried_in_the_same_boot() {
    // The same rollback within one boot (only by hand): the appends up to
    // the next checkpoint cannot see it cheaply, but that checkpoint's
    // commit finds the database further on and refuses.
    let (state, log_before, head_before) = state_before_a_checkpoint();
    fs::write(log_path(state.path()), &log_before).unwrap();
    fs::write(audit_dir(state.path()).join("head"), &head_before).unwrap();
    assert_record_256_refused(state.path(), &log_before, "lost records");
}

#[test]
fn a_fifo_head_is_reported_without_hanging() {
    let state = make_log(3);
    let head = audit_dir(state.path()).join("head");
    fs::remove_file(&head).unwrap();
    let path = std::ffi::CString::new(head.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo with a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
    let (tx, rx) = std::sync::mpsc::channel();
    let dir = state.path().to_path_buf();
    std::thread::spawn(move || tx.send(verify(&dir).unwrap()).unwrap());
    let report = rx
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("verify hung on a FIFO head");
    assert!(
        report.problem.as_ref().unwrap().detail.contains("not a regular file"),
        "{report:?}"
    );
    let err = AuditLog::open(state.path()).map(|_| ()).unwrap_err();
    assert!(err.to_string().contains("not a regular file"), "{err}");
}

#[test]
fn a_head_at_the_largest_seq_is_refused_not_wrapped() {
    let state = make_log(3);
    let lines = read_lines(state.path());
    let last: AuditRecord = serde_json::from_str(&lines[2]).unwrap();
    let len = fs::metadata(log_path(state.path())).unwrap().len();
    write_head_file(state.path(), u64::MAX, &last.hash, len);
    let err = AuditLog::open(state.path()).unwrap().append(entry(4)).unwrap_err();
    assert!(err.to_string().contains("cannot grow"), "{err}");
    assert_eq!(read_lines(state.path()).len(), 3);
}

#[test]
fn a_deleted_head_file_is_damage_once_the_database_knows_of_it() {
    // With 300 records the database's head is at the checkpoint, 256. An
    // emptied or deleted head file with the log cut back to 256 must not
    // pass for a directory carried over from an earlier build.
    let state = make_log(300);
    let lines = read_lines(state.path());
    let head = audit_dir(state.path()).join("head");
    for how in ["emptied", "deleted"] {
        write_lines(state.path(), &lines[..256]);
        if how == "emptied" {
            fs::write(&head, b"").unwrap();
        } else {
            fs::remove_file(&head).unwrap();
        }
        let report = verify(state.path()).unwrap();
        let problem = report.problem.unwrap_or_else(|| panic!("{how}: a clean verify"));
        assert!(problem.detail.contains("it was deleted"), "{how}: {problem:?}");
        let err = AuditLog::open(state.path()).unwrap().append(entry(257)).unwrap_err();
        assert!(err.to_string().contains("it was deleted"), "{how}: {err}");
        assert_eq!(read_lines(state.path()).len(), 256, "{how}: nothing was appended");
    }
}

#[test]
fn a_key_pair_of_the_attackers_own_is_reported() {
    // Rewrite record 1, re-sign the checkpoint with a key of one's own, put
    // its public half in host.pub and take host.key away (so that nothing
    // can be cross-checked): the signatures all verify with host.pub, but
    // host.pub is vouched for by nothing.
    use ed25519_dalek::{Signer, SigningKey};
    let state = make_log(300);
    let mut lines = read_lines(state.path());
    let mut rec: AuditRecord = serde_json::from_str(&lines[0]).unwrap();
    rec.entry.command = Some("true".into());
    lines[0] = serde_json::to_string(&rec).unwrap();
    rechain(&mut lines, 0);
    write_lines(state.path(), &lines);
    set_head_to(state.path(), &lines);
    let mine = SigningKey::from_bytes(&[7u8; 32]);
    let at_256: AuditRecord = serde_json::from_str(&lines[255]).unwrap();
    let signature = mine.sign(format!("tether-exec audit checkpoint v1\n256\n{}", at_256.hash).as_bytes());
    let conn = rusqlite::Connection::open(db_path(state.path())).unwrap();
    conn.execute(
        "UPDATE checkpoints SET hash = ?1, signature = ?2 WHERE seq = 256",
        [at_256.hash.clone(), hex::encode(signature.to_bytes())],
    )
    .unwrap();
    drop(conn);
    let dir = audit_dir(state.path());
    fs::write(dir.join("host.pub"), hex::encode(mine.verifying_key().to_bytes())).unwrap();
    fs::remove_file(dir.join("host.key")).unwrap();
    let report = verify(state.path()).unwrap();
    let problem = report.problem.clone().unwrap_or_else(|| panic!("passed: {report:?}"));
    assert_eq!(problem.kind, ProblemKind::BadCheckpoint, "{problem:?}");
    assert!(problem.detail.contains("host.key"), "{problem:?}");
    // A directory in its place, or (as root) a key file of another owner:
    // the same.
    fs::create_dir(dir.join("host.key")).unwrap();
    assert_eq!(problem_of(&verify(state.path()).unwrap()).0, ProblemKind::BadCheckpoint);
    fs::remove_dir(dir.join("host.key")).unwrap();
    if is_root() {
        fs::write(dir.join("host.key"), mine.to_bytes()).unwrap();
        std::os::unix::fs::chown(dir.join("host.key"), Some(65534), Some(65534)).unwrap();
        let problem = verify(state.path()).unwrap().problem.unwrap();
        assert!(
            problem.detail.contains("not to the audit directory's owner"),
            "{problem:?}"
        );
    }
}

#[test]
fn a_head_whose_length_is_not_a_line_end_is_edited_and_cuts_nothing() {
    let state = make_log(10);
    let lines = read_lines(state.path());
    let last: AuditRecord = serde_json::from_str(&lines[9]).unwrap();
    let len = fs::metadata(log_path(state.path())).unwrap().len();
    write_head_file(state.path(), 10, &last.hash, len - 100);
    let problem = verify(state.path()).unwrap().problem.unwrap();
    assert_eq!((problem.kind, problem.seq), (ProblemKind::Edited, 10), "{problem:?}");
    let err = AuditLog::open(state.path()).unwrap().append(entry(11)).unwrap_err();
    assert!(err.to_string().contains("not the end of a line"), "{err}");
    assert_eq!(read_lines(state.path()), lines, "no record was cut");
}

#[test]
fn a_log_whose_last_newline_is_gone_is_not_intact() {
    let state = make_log(5);
    let path = log_path(state.path());
    let len = fs::metadata(&path).unwrap().len();
    fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(len - 1)
        .unwrap();
    let problem = verify(state.path()).unwrap().problem.unwrap();
    assert_eq!(problem.seq, 5, "{problem:?}");
}

#[test]
fn fifos_in_place_of_the_log_or_the_database_are_refused_without_hanging() {
    let state = make_log(300);
    let dir = audit_dir(state.path());
    let fifo = |p: &Path| {
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo with a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    };
    for name in ["log.jsonl", "audit.sqlite"] {
        let path = dir.join(name);
        let kept = dir.join(format!("{name}.kept"));
        fs::rename(&path, &kept).unwrap();
        fifo(&path);
        let (tx, rx) = std::sync::mpsc::channel();
        let st = state.path().to_path_buf();
        std::thread::spawn(move || tx.send(verify(&st).map(|_| ()).map_err(|e| e.to_string())).unwrap());
        let result = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("verify hung on a FIFO {name}"));
        let err = result.expect_err("a FIFO is not a log");
        assert!(err.contains(name) && err.contains("not a regular file"), "{err}");
        fs::remove_file(&path).unwrap();
        fs::rename(&kept, &path).unwrap();
    }
    assert_eq!(verify(state.path()).unwrap().problem, None);
}

#[test]
fn a_deleted_required_checkpoint_is_bad_checkpoint() {
    let state = make_log(260);
    let conn = rusqlite::Connection::open(db_path(state.path())).unwrap();
    conn.execute("DELETE FROM checkpoints", []).unwrap();
    drop(conn);
    assert_eq!(
        problem_of(&verify(state.path()).unwrap()),
        (ProblemKind::BadCheckpoint, 256, 256)
    );
}

#[test]
fn a_checkpoint_signed_by_another_key_is_bad_checkpoint() {
    let state = make_log(10);
    let other = make_log(10);
    AuditLog::open(state.path()).unwrap().checkpoint().unwrap();
    AuditLog::open(other.path()).unwrap().checkpoint().unwrap();
    // Same records would not be needed: only the key differs.
    let conn = rusqlite::Connection::open(db_path(other.path())).unwrap();
    let (hash, sig): (String, String) = conn
        .query_row("SELECT hash, signature FROM checkpoints WHERE seq = 10", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    let conn = rusqlite::Connection::open(db_path(state.path())).unwrap();
    conn.execute(
        "INSERT OR REPLACE INTO checkpoints(seq, hash, signature) VALUES (10, ?1, ?2)",
        [hash, sig],
    )
    .unwrap();
    drop(conn);
    assert_eq!(problem_of(&verify(state.path()).unwrap()).0, ProblemKind::BadCheckpoint);
}

#[test]
fn an_uncommitted_tail_is_quarantined_by_the_next_append_and_still_reported() {
    let state = make_log(5);
    let mut lines = read_lines(state.path());
    lines.push(r#"{"seq":6,"half a line"#.into());
    let mut text = lines.join("\n");
    text.push('\n');
    text.truncate(text.len() - 1); // a torn write has no newline
    fs::write(log_path(state.path()), text).unwrap();
    assert_eq!(
        problem_of(&verify(state.path()).unwrap()),
        (ProblemKind::ForgedAppend, 6, 6)
    );

    let mut log = AuditLog::open(state.path()).unwrap();
    assert_eq!(log.append(entry(6)).unwrap(), 6, "one crash must not stop the launcher");
    assert_eq!(read_lines(state.path()).len(), 6);
    let report = verify(state.path()).unwrap();
    assert_eq!(report.records, 6, "the chain itself is intact again");
    assert_eq!(problem_of(&report), (ProblemKind::ForgedAppend, 6, 6));
    let quarantined: Vec<_> = fs::read_dir(audit_dir(state.path()))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("quarantine-"))
        .collect();
    assert_eq!(quarantined.len(), 1);
    assert_eq!(fs::read_to_string(&quarantined[0]).unwrap(), r#"{"seq":6,"half a line"#);
    fs::remove_file(&quarantined[0]).unwrap();
    assert_eq!(
        verify(state.path()).unwrap().problem,
        None,
        "operator reviewed and removed it"
    );
}

#[test]
fn append_refuses_to_extend_a_truncated_log() {
    let state = make_log(10);
    let mut log = AuditLog::open(state.path()).unwrap();
    let lines = read_lines(state.path());
    write_lines(state.path(), &lines[..8]);
    assert!(log.append(entry(11)).is_err());
    assert_eq!(read_lines(state.path()).len(), 8, "nothing was appended");
    assert_eq!(problem_of(&verify(state.path()).unwrap()).0, ProblemKind::Truncated);
}

#[test]
fn append_follows_a_log_file_that_was_replaced() {
    // Replacing the file under the launcher must not let records go to the
    // orphaned inode: the append notices and refuses the shorter file.
    let state = make_log(3);
    let mut log = AuditLog::open(state.path()).unwrap();
    let path = log_path(state.path());
    fs::rename(&path, audit_dir(state.path()).join("old.jsonl")).unwrap();
    fs::write(&path, "").unwrap();
    assert!(log.append(entry(4)).is_err());
    assert_eq!(fs::read_to_string(&path).unwrap(), "");
}

// --- fail closed -----------------------------------------------------------------

#[test]
fn open_fails_when_the_state_dir_cannot_exist() {
    // Works as root too: no permission bit lets a directory live under a file.
    let base = tempfile::tempdir().unwrap();
    let file = base.path().join("plain-file");
    fs::write(&file, "x").unwrap();
    assert!(AuditLog::open(&file.join("state")).is_err());
    assert!(AuditLog::open(&file).is_err());
}

#[test]
fn append_fails_when_the_log_path_is_not_writable() {
    let state = make_log(2);
    let mut log = AuditLog::open(state.path()).unwrap();
    let path = log_path(state.path());
    fs::remove_file(&path).unwrap();
    fs::create_dir(&path).unwrap();
    let err = log.append(entry(3)).unwrap_err();
    assert!(err.to_string().contains("log.jsonl"), "{err}");
    assert!(log.checkpoint().is_ok(), "the database is untouched and usable");
}

#[test]
fn read_only_audit_dir_blocks_open_unless_root() {
    use std::os::unix::fs::PermissionsExt;
    let state = tempfile::tempdir().unwrap();
    let dir = audit_dir(state.path());
    fs::create_dir(&dir).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o500)).unwrap();
    let result = AuditLog::open(state.path());
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).unwrap();
    if is_root() {
        // Root ignores mode bits, so the only true statement here is that the
        // directory did not stop it; the root-proof failures are covered by
        // the file-size-limit and not-a-directory tests.
        assert!(result.is_ok(), "root writes through 0500: {:?}", result.err());
    } else {
        assert!(result.is_err(), "a read-only directory must make open fail");
    }
}

const FSIZE_ENV: &str = "AUDIT_FSIZE_CHILD_STATE";
const FSIZE_MARK: &str = "fsize-child-completed";

#[test]
fn append_fails_closed_when_the_disk_refuses_the_write() {
    // RLIMIT_FSIZE makes write() fail with EFBIG part-way through a line, like
    // a full disk, and unlike chmod it binds root as well. It is per process,
    // so the test runs in a child to keep other tests' writes unaffected.
    let state = tempfile::tempdir().unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "fsize_child", "--ignored", "--nocapture", "--test-threads=1"])
        .env(FSIZE_ENV, state.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains(FSIZE_MARK),
        "child failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
#[ignore = "helper: run in a child process by append_fails_closed_when_the_disk_refuses_the_write"]
fn fsize_child() {
    let state = PathBuf::from(std::env::var_os(FSIZE_ENV).expect("run by the parent test"));
    let big = |i: u64| {
        let mut e = entry(i);
        e.detail = Some("x".repeat(64 * 1024));
        e
    };
    let mut log = AuditLog::open(&state).unwrap();
    for i in 1..=10 {
        log.append(big(i)).unwrap();
    }
    let size = fs::metadata(log_path(&state)).unwrap().len();
    let limit = |bytes: u64| {
        let lim = libc::rlimit {
            rlim_cur: bytes,
            rlim_max: libc::RLIM_INFINITY,
        };
        // SAFETY: plain syscalls on this (child) process with valid arguments.
        unsafe {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &lim), 0);
        }
    };
    limit(size + 1000);
    let err = log.append(big(11)).expect_err("a write past the limit must fail");
    assert!(err.to_string().contains("log.jsonl"), "{err}");
    limit(libc::RLIM_INFINITY);
    assert_eq!(
        fs::metadata(log_path(&state)).unwrap().len(),
        size,
        "partial line removed"
    );
    let report = verify(&state).unwrap();
    assert_eq!((report.records, report.problem), (10, None));
    assert_eq!(log.append(big(11)).unwrap(), 11, "usable again once space is back");
    println!("{FSIZE_MARK}");
}

// --- concurrency -------------------------------------------------------------------

#[test]
fn sixteen_writers_lose_nothing_and_keep_the_chain() {
    const WRITERS: u64 = 16;
    const EACH: u64 = 40;
    let state = tempfile::tempdir().unwrap();
    let barrier = Arc::new(Barrier::new(WRITERS as usize));
    let handles: Vec<_> = (0..WRITERS)
        .map(|w| {
            let dir = state.path().to_path_buf();
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                barrier.wait(); // everyone initializes the fresh directory at once
                let mut log = AuditLog::open(&dir).unwrap();
                (0..EACH)
                    .map(|i| {
                        let mut e = AuditEntry::new(EntryKind::Decision);
                        e.session = Some(format!("w{w}"));
                        e.detail = Some(format!("writer {w} entry {i}"));
                        log.append(e).unwrap()
                    })
                    .collect::<Vec<u64>>()
            })
        })
        .collect();
    let mut seqs = BTreeSet::new();
    for h in handles {
        for seq in h.join().unwrap() {
            assert!(seqs.insert(seq), "seq {seq} handed out twice");
        }
    }
    let total = WRITERS * EACH;
    assert_eq!(seqs, (1..=total).collect::<BTreeSet<_>>());
    let report = verify(state.path()).unwrap();
    assert_eq!(report.problem, None, "{report:?}");
    assert_eq!(report.records, total);
    assert_eq!(report.checkpoints, total / 256);
    for w in 0..WRITERS {
        let mine = read_records(state.path(), Some(&format!("w{w}")), None).unwrap();
        let details: Vec<_> = mine.iter().map(|r| r.entry.detail.clone().unwrap()).collect();
        let expected: Vec<_> = (0..EACH).map(|i| format!("writer {w} entry {i}")).collect();
        assert_eq!(details, expected, "writer {w}'s records, in its own order");
    }
}

// --- reading and display ---------------------------------------------------------------

#[test]
fn read_records_filters_by_session_and_seq() {
    let state = make_log(12);
    let all = read_records(state.path(), None, None).unwrap();
    assert_eq!(all.len(), 12);
    let s1 = read_records(state.path(), Some("s1"), None).unwrap();
    assert_eq!(s1.iter().map(|r| r.seq).collect::<Vec<_>>(), [1, 4, 7, 10]);
    let since = read_records(state.path(), Some("s1"), Some(5)).unwrap();
    assert_eq!(since.iter().map(|r| r.seq).collect::<Vec<_>>(), [7, 10]);
    assert!(read_records(state.path(), Some("nobody"), None).unwrap().is_empty());
}

#[test]
fn append_redacts_and_digests_the_command() {
    let state = tempfile::tempdir().unwrap();
    let mut log = AuditLog::open(state.path()).unwrap();
    let command = "curl -H 'Authorization: Bearer abc123' https://u:pw@example.com";
    let mut e = AuditEntry::new(EntryKind::Decision);
    e.command = Some(command.into());
    e.detail = Some("failed with GITHUB_TOKEN=ghp_abcdefghijklmnopqrstuvwxyz0123".into());
    e.stdin_digest = Some("f".repeat(64));
    e.isolation = Some(serde_json::json!({"landlock": true, "seccomp": "strict"}));
    e.changes = Some(Changes {
        count: 2,
        digest: "d".repeat(64),
        rolled_back: vec!["a.txt".into()],
    });
    log.append(e).unwrap();
    let text = fs::read_to_string(log_path(state.path())).unwrap();
    for secret in ["abc123", ":pw@", "ghp_abcdef"] {
        assert!(!text.contains(secret), "{secret} leaked: {text}");
    }
    let rec = &read_records(state.path(), None, None).unwrap()[0];
    assert_eq!(
        rec.entry.command.as_deref(),
        Some("curl -H 'Authorization: Bearer ***' https://u:***@example.com")
    );
    assert_eq!(
        rec.entry.command_digest,
        Some(hex::encode(Sha256::digest(command.as_bytes())))
    );
    assert_eq!(verify(state.path()).unwrap().problem, None);
}

#[test]
fn format_human_is_one_escaped_line() {
    let state = tempfile::tempdir().unwrap();
    let mut log = AuditLog::open(state.path()).unwrap();
    let mut e = AuditEntry::new(EntryKind::RunEnd);
    e.session = Some("abc".into());
    e.command = Some("printf '\x1b[2J'\nrm -rf /tmp/x".into());
    e.exit_code = Some(1);
    e.timed_out = Some(true);
    log.append(e).unwrap();
    let rec = &read_records(state.path(), None, None).unwrap()[0];
    let line = format_human(rec);
    assert!(
        line.starts_with(&format!("#1 {} run_end session=abc", rec.time)),
        "{line}"
    );
    assert!(line.contains("exit=1") && line.contains("timed_out"), "{line}");
    assert!(!line.contains('\n') && !line.contains('\x1b'), "{line:?}");
    assert!(line.contains(r"\n") && line.contains(r"\u{1b}"), "{line}");
}

// --- redaction -----------------------------------------------------------------------------

#[test]
fn redaction_table() {
    let cases: &[(&str, &str)] = &[
        // Must not change.
        ("git status", "git status"),
        ("pytest -k password_test", "pytest -k password_test"),
        ("mysql -psecret db", "mysql -psecret db"),
        ("ls --color=auto", "ls --color=auto"),
        ("echo $TOKEN", "echo $TOKEN"),
        ("export PATH=/usr/bin:$PATH", "export PATH=/usr/bin:$PATH"),
        (
            "git clone git@github.com:org/repo.git",
            "git clone git@github.com:org/repo.git",
        ),
        ("curl https://example.com/a?q=1", "curl https://example.com/a?q=1"),
        ("grep -r AKIA src/", "grep -r AKIA src/"),
        (
            "du -sh disk-aaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            "du -sh disk-aaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        ),
        ("echo sk-short", "echo sk-short"),
        ("tool --token-file ~/.tok", "tool --token-file ~/.tok"),
        ("psql --password --host db", "psql --password --host db"),
        ("[ \"$a\" = b ]", "[ \"$a\" = b ]"),
        ("cargo build --release", "cargo build --release"),
        // Flags.
        ("tool --password=hunter2 x", "tool --password=*** x"),
        ("tool --password hunter2 x", "tool --password *** x"),
        ("tool --token abc", "tool --token ***"),
        ("tool --secret 'a b c' next", "tool --secret *** next"),
        ("tool --api-key=abc --apikey=def", "tool --api-key=*** --apikey=***"),
        ("tool --access-token=abc", "tool --access-token=***"),
        ("tool --auth user:pw", "tool --auth ***"),
        ("tool --db-password=x", "tool --db-password=***"),
        ("tool \"--token=abc\" y", "tool \"--token=***\" y"),
        // Headers.
        (
            "curl -H 'Authorization: Bearer abc.def' https://x",
            "curl -H 'Authorization: Bearer ***' https://x",
        ),
        (
            "curl -H \"authorization: basic dXNlcjpwYXNz\" x",
            "curl -H \"authorization: basic ***\" x",
        ),
        ("curl -H 'X-Api-Key: k123' x", "curl -H 'X-Api-Key: ***' x"),
        (
            "curl -d '{\"password\": \"p w\"}' x",
            "curl -d '{\"password\": \"***\"}' x",
        ),
        // Assignments.
        ("PGPASSWORD=hunter2 psql", "PGPASSWORD=*** psql"),
        (
            "export AWS_SECRET_ACCESS_KEY=abc/def",
            "export AWS_SECRET_ACCESS_KEY=***",
        ),
        ("MY_API_KEY=\"a b\" run", "MY_API_KEY=*** run"),
        (
            "docker run -e \"GITHUB_TOKEN=abc\" img",
            "docker run -e \"GITHUB_TOKEN=***\" img",
        ),
        (
            "bash -c \"export TOKEN=abc; make\"",
            "bash -c \"export TOKEN=***; make\"",
        ),
        (
            "x private_key=k passwd=p db_credentials=c",
            "x private_key=*** passwd=*** db_credentials=***",
        ),
        ("java -Dapp.password=pw -jar a", "java -Dapp.password=*** -jar a"),
        (
            "curl 'https://h/api?token=abc&x=1'",
            "curl 'https://h/api?token=***&x=1'",
        ),
        // URL user info.
        (
            "git clone https://user:s3cret@github.com/o/r",
            "git clone https://user:***@github.com/o/r",
        ),
        (
            "psql postgres://app:p%40ss@db:5432/x",
            "psql postgres://app:***@db:5432/x",
        ),
        // Credential shapes.
        ("echo sk-abcdefghijklmnopqrstuvwx", "echo sk-***"),
        ("gh ghp_abcdefghijklmnopqrstuvwxyz0123456789", "gh ghp_***"),
        ("x github_pat_11ABCDEFG0123456789_abcdefghij", "x github_pat_***"),
        ("slack xoxb-123456789012-abcdef", "slack xoxb-***"),
        ("aws AKIAIOSFODNN7EXAMPLE", "aws AKIA***"),
        ("k=AIzaSyA1234567890abcdefghijklmnopqrstuv", "k=AIza***"),
        (
            "curl -b eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl x",
            "curl -b eyJ*** x",
        ),
        ("héllo --token=ünï x", "héllo --token=*** x"),
    ];
    let mut failures = Vec::new();
    for (input, expected) in cases {
        let got = redact(input);
        if got != *expected {
            failures.push(format!("redact({input:?}) = {got:?}, expected {expected:?}"));
        }
        if redact(&got) != got {
            failures.push(format!("redact is not idempotent on {input:?}"));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn redaction_survives_arbitrary_text() {
    // Deterministic xorshift over an alphabet rich in the characters the
    // scanners branch on, including multi-byte ones next to cut points.
    const ALPHABET: &[&str] = &[
        "a",
        "Z",
        "0",
        "-",
        "--",
        "_",
        "=",
        ":",
        " ",
        "\t",
        "\n",
        "'",
        "\"",
        "\\",
        "@",
        "/",
        "?",
        "&",
        ".",
        "é",
        "ü",
        "😀",
        "token",
        "PASSWORD",
        "--token",
        "sk-",
        "eyJ",
        "AKIA",
        "://",
        "Authorization",
        "Bearer",
        "{",
        "}",
    ];
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..20_000 {
        let len = next() % 40;
        let text: String = (0..len)
            .map(|_| ALPHABET[(next() % ALPHABET.len() as u64) as usize])
            .collect();
        let out = redact(&text);
        // Only ever replaces: every character kept came from the input.
        assert!(out.chars().all(|c| c == '*' || text.contains(c)), "{text:?} -> {out:?}");
        assert!(
            !out.contains("******"),
            "adjacent spans must merge: {text:?} -> {out:?}"
        );
    }
}

#[test]
fn redaction_of_hostile_repetition() {
    // Shapes that would make a scanner that rescans each value quadratic;
    // the scanners resume after each value instead (timed by hand, not
    // asserted here). What we can assert: the secrets are gone.
    let cases = [
        ("--token=x ", "x"),
        ("TOKEN=\"v ", "v"),
        ("sk-aaaaaaaaaaaaaaaaaaaaaaaaa ", "aaaa"),
        ("eyJa.eyJb.c ", "eyJa.eyJb"),
        ("\"password\": \"v9\", ", "v9"),
        ("a://b:p@h ", ":p@"),
    ];
    for (unit, secret) in cases {
        let text = unit.repeat(20_000);
        let out = redact(&text);
        assert!(!out.contains(secret), "{unit:?}: {secret:?} survived");
        assert!(out.len() <= text.len() + 3 * 20_000, "{unit:?}");
    }
}

#[test]
fn the_wal_stays_short_when_every_record_comes_from_a_new_process() {
    // Each command opens the log, appends and closes it; the database is
    // written at checkpoints. SQLite rebuilds the WAL index from the whole
    // WAL at every open and never starts the WAL over by itself; unchecked,
    // opening it grew slower with every command.
    let state = tempfile::tempdir().unwrap();
    let wal = audit_dir(state.path()).join("audit.sqlite-wal");
    let mut largest = 0;
    for i in 1..=300 {
        let mut log = AuditLog::open(state.path()).unwrap();
        log.append(entry(i)).unwrap();
        drop(log);
        largest = largest.max(fs::metadata(&wal).map_or(0, |m| m.len()));
    }
    assert!(largest > 0, "the WAL is in use");
    assert!(largest < 400 * 1024, "the WAL grew to {largest} bytes");
    assert_eq!(read_lines(state.path()).len(), 300);
    let report = tether_exec::audit::verify(state.path()).unwrap();
    assert!(report.problem.is_none(), "{report:?}");
}

/// A copy of the audit directory on read-only media, without SQLite's
/// shared-memory file (`-shm`), which SQLite cannot create there: the
/// checkpoints in its WAL are still read and checked. As root, read-only
/// media is the immutable attribute, which binds root too.
#[test]
fn a_read_only_copy_without_its_wal_index_still_verifies() {
    use std::os::unix::fs::PermissionsExt;
    let state = make_log(3);
    AuditLog::open(state.path()).unwrap().checkpoint().unwrap();
    let copy = tempfile::tempdir().unwrap();
    let (from, to) = (audit_dir(state.path()), audit_dir(copy.path()));
    fs::create_dir(&to).unwrap();
    for e in fs::read_dir(&from).unwrap() {
        let name = e.unwrap().file_name();
        if !name.to_string_lossy().ends_with("-shm") {
            fs::copy(from.join(&name), to.join(&name)).unwrap();
        }
    }
    let wal = to.join("audit.sqlite-wal");
    assert!(fs::metadata(&wal).unwrap().len() > 0, "the checkpoint is in the WAL");
    let chattr = |flag: &str| {
        Command::new("chattr")
            .args([flag, to.to_str().unwrap()])
            .status()
            .is_ok_and(|s| s.success())
    };
    let immutable = is_root() && chattr("+i");
    if is_root() {
        assert!(
            immutable,
            "chattr +i: root needs the immutable attribute to meet read-only media"
        );
    } else {
        fs::set_permissions(&to, fs::Permissions::from_mode(0o500)).unwrap();
    }
    let report = verify(copy.path());
    let shm_made = to.join("audit.sqlite-shm").exists();
    if immutable {
        chattr("-i");
    }
    fs::set_permissions(&to, fs::Permissions::from_mode(0o700)).unwrap();
    let report = report.unwrap();
    assert!(report.problem.is_none(), "{:?}", report.problem);
    assert_eq!((report.records, report.checkpoints), (3, 1));
    assert!(!shm_made, "nothing is written to the copy");
}
