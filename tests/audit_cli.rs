//! The audit trail through the command line: every decision is recorded,
//! tampering is detected by `audit verify`, secrets are redacted, and a run
//! whose record cannot be written does not run.

mod common;
use common::*;
use std::process::{Command, Stdio};

fn populate(w: &World, n: usize) {
    for i in 0..n {
        assert!(w.run(&format!("echo {i} > f{i}.txt")).status.success());
    }
}

fn log_lines(w: &World) -> Vec<String> {
    std::fs::read_to_string(w.state.join("audit/log.jsonl"))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

fn write_lines(w: &World, lines: &[String]) {
    std::fs::write(w.state.join("audit/log.jsonl"), lines.join("\n") + "\n").unwrap();
}

fn verify(w: &World) -> (i32, String) {
    let o = w.tx(&["audit", "verify"]);
    (o.status.code().unwrap(), stdout(&o))
}

#[test]
fn every_run_is_recorded_and_the_chain_verifies() {
    let w = World::new();
    populate(&w, 3);
    w.tx(&["run", "-c", "true"]);
    let (code, out) = verify(&w);
    assert_eq!(code, 0, "{out}");
    // decision + run_end per run
    assert_eq!(log_lines(&w).len(), 8, "{out}");
    let show = stdout(&w.tx(&["audit", "show", "--json"]));
    assert_eq!(show.lines().count(), 8);
    assert!(show.contains("\"kind\":\"decision\"") && show.contains("\"kind\":\"run_end\""));
}

#[test]
fn editing_one_byte_is_detected() {
    let w = World::new();
    populate(&w, 3);
    let mut lines = log_lines(&w);
    // The second run's end: seq 4. One byte: its exit code 0 becomes 1.
    let i = 3;
    lines[i] = lines[i].replacen("\"exit_code\":0", "\"exit_code\":1", 1);
    assert!(lines[i].contains("\"exit_code\":1"), "the record to edit: {}", lines[i]);
    write_lines(&w, &lines);
    let (code, out) = verify(&w);
    assert_eq!(code, 1);
    assert!(out.contains("Edited") && out.contains("record 4"), "{out}");
}

#[test]
fn deleting_swapping_truncating_and_forging_are_detected() {
    let w = World::new();
    populate(&w, 4);
    let orig = log_lines(&w);
    let cases: Vec<(&str, Vec<String>)> = vec![
        ("Missing", [&orig[..3], &orig[4..]].concat()),
        ("Reordered", {
            let mut l = orig.clone();
            l.swap(3, 4);
            l
        }),
        ("Truncated", orig[..5].to_vec()),
        ("ForgedAppend", {
            let mut l = orig.clone();
            // A forged record with a correct-looking chain link: copy the last one, bump seq.
            let last: serde_json::Value = serde_json::from_str(orig.last().unwrap()).unwrap();
            let mut forged = last.clone();
            forged["seq"] = serde_json::json!(last["seq"].as_u64().unwrap() + 1);
            forged["prev"] = last["hash"].clone();
            l.push(forged.to_string());
            l
        }),
    ];
    for (kind, lines) in cases {
        write_lines(&w, &lines);
        let (code, out) = verify(&w);
        assert_eq!(code, 1, "{kind} not detected: {out}");
        assert!(out.contains(kind), "{kind} expected: {out}");
        write_lines(&w, &orig);
        assert_eq!(verify(&w).0, 0, "restored log verifies again");
    }
}

#[test]
fn a_damaged_head_is_reported_and_nothing_runs_until_it_is_dealt_with() {
    let w = World::new();
    populate(&w, 2);
    let head = w.state.join("audit/head");
    let kept = std::fs::read(&head).unwrap();
    let line = String::from_utf8(kept.clone()).unwrap();
    // Rolled back by hand without its check field matching.
    std::fs::write(
        &head,
        line.replace("seq=00000000000000000004", "seq=00000000000000000002"),
    )
    .unwrap();
    let (code, out) = verify(&w);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("audit/head is damaged"), "{out}");
    let o = w.tx(&["run", "-c", "touch ran.txt"]);
    assert_eq!(o.status.code(), Some(125), "{}", text(&o));
    assert!(
        text(&o).contains("audit head is damaged") && text(&o).contains("audit/head"),
        "the message names the file: {}",
        text(&o)
    );
    assert!(!exists(&w.ws.join("ran.txt")), "it ran without a record");
    // Control: the head put back, the same command runs and the chain verifies.
    std::fs::write(&head, &kept).unwrap();
    assert!(w.tx(&["run", "-c", "touch ran.txt"]).status.success());
    assert!(exists(&w.ws.join("ran.txt")));
    assert_eq!(verify(&w).0, 0);
}

#[test]
fn secrets_in_command_text_are_redacted() {
    let w = World::new();
    w.tx(&[
        "run",
        "-c",
        "echo --password=hunter2 AWS_SECRET_ACCESS_KEY=abc123xyz 'Authorization: Bearer tok_live_9f8e7d'",
    ]);
    let log = std::fs::read_to_string(w.state.join("audit/log.jsonl")).unwrap();
    for secret in ["hunter2", "abc123xyz", "tok_live_9f8e7d"] {
        assert!(!log.contains(secret), "{secret} reached the audit log: {log}");
    }
    assert!(log.contains("echo"), "the command is still recorded: {log}");
}

#[test]
fn an_unwritable_audit_log_means_nothing_runs() {
    let w = World::new();
    // The audit directory is a regular file: nothing can be written there, root or not.
    std::fs::write(w.state.join("audit"), "not a directory").unwrap();
    let o = w.tx(&["run", "-c", "touch ran.txt"]);
    assert_eq!(o.status.code(), Some(125), "{}", text(&o));
    assert!(text(&o).contains("audit"), "{}", text(&o));
    assert!(
        !exists(&w.ws.join("ran.txt")),
        "the command ran without an audit record"
    );
    // Nothing started, so no check of the protected paths is owed: one left
    // behind would be taken by the next start for an interrupted run's (the
    // workspace's generation moved on, an old snapshot enforced).
    let owed = std::fs::read_dir(w.state.join("pending-checks")).map_or(0, |d| d.count());
    assert_eq!(owed, 0, "a check was left owed for a run that never started");
    // Control: with a working log the same command runs.
    std::fs::remove_file(w.state.join("audit")).unwrap();
    assert!(w.tx(&["run", "-c", "touch ran.txt"]).status.success());
    assert!(exists(&w.ws.join("ran.txt")));
}

#[test]
fn concurrent_runs_keep_the_chain() {
    let w = World::new();
    let children: Vec<_> = (0..16)
        .map(|i| {
            Command::new(bin())
                .arg("--state-dir")
                .arg(&w.state)
                .args(["run", "-c", &format!("echo {i}")])
                .current_dir(&w.ws)
                .stdout(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let (code, out) = verify(&w);
    assert_eq!(code, 0, "{out}");
    assert_eq!(log_lines(&w).len(), 32);
}

#[test]
fn an_unwritable_audit_log_means_nothing_is_held_or_previewed() {
    // An *ask*: its decision is recorded while the preview's sandbox builds
    // itself. If that fails, the preview's command never starts, nothing is
    // held, and no capture is left behind.
    let w = World::new();
    let policy = w.policy("require_approval_for = [\"touch\"]\ndefault = \"allow\"\n");
    std::fs::write(w.state.join("audit"), "not a directory").unwrap();
    let o = w.tx(&["run", "--policy", policy.to_str().unwrap(), "-c", "touch held.txt"]);
    assert_eq!(o.status.code(), Some(125), "{}", text(&o));
    assert!(
        text(&o).contains("cannot open the audit log, so nothing runs"),
        "{}",
        text(&o)
    );
    let entries = |d: &str| std::fs::read_dir(w.state.join(d)).map_or(0, |r| r.count());
    assert_eq!(entries("overlays"), 0, "a capture was left behind");
    assert_eq!(entries("previews"), 0, "a preview was kept");
    std::fs::remove_file(w.state.join("audit")).unwrap();
    let pending = w.tx(&["pending", "--json"]);
    assert!(
        !String::from_utf8_lossy(&pending.stdout).contains("apr_"),
        "{}",
        text(&pending)
    );
    // Control: with a working log the same command is held, with its preview.
    let o = w.tx(&["run", "--policy", policy.to_str().unwrap(), "-c", "touch held.txt"]);
    assert_eq!(o.status.code(), Some(75), "{}", text(&o));
    assert_eq!(entries("previews"), 1);
}

/// `touch held.txt` held for approval in `w`; its id.
fn hold_touch(w: &World) -> String {
    let policy = w.policy("require_approval_for = [\"touch\"]\ndefault = \"allow\"\n");
    let o = w.tx(&["run", "--policy", policy.to_str().unwrap(), "-c", "touch held.txt"]);
    assert_eq!(o.status.code(), Some(75), "{}", text(&o));
    held_id(&String::from_utf8_lossy(&o.stderr))
}

#[test]
fn an_audit_log_that_cannot_take_the_record_approves_and_rejects_nothing() {
    let w = World::new();
    let id = hold_touch(&w);
    let log = w.state.join("audit/log.jsonl");
    let kept = std::fs::read(&log).unwrap();
    // Two ways to break it: the log's file made a directory (it cannot be
    // opened, as root too), and the log cut short behind the database's back
    // (it opens, but an append must refuse).
    let breakages: [(&str, &dyn Fn()); 2] = [
        ("a directory", &|| {
            std::fs::remove_file(&log).unwrap();
            std::fs::create_dir(&log).unwrap();
        }),
        ("cut short", &|| std::fs::write(&log, b"").unwrap()),
    ];
    for (how, brk) in breakages {
        brk();
        for (verb, args) in [
            ("approved", vec!["approve", &id]),
            ("rejected", vec!["reject", &id, "--reason", "no"]),
        ] {
            let o = w.tx(&args);
            assert_eq!(o.status.code(), Some(125), "{how}: {}", text(&o));
            assert!(
                text(&o).contains(&format!("cannot write to the audit log, so nothing was {verb}")),
                "{how}: {}",
                text(&o)
            );
        }
        if log.is_dir() {
            std::fs::remove_dir(&log).unwrap();
        }
        std::fs::write(&log, &kept).unwrap();
        // Still pending: neither the approval nor the rejection happened.
        let o = w.tx(&["resume", &id]);
        assert_eq!(o.status.code(), Some(75), "{how}: {}", text(&o));
    }
    // Control: with the log as it was, the approval goes through and is on record.
    let o = w.tx(&["approve", &id]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(std::fs::read_to_string(&log).unwrap().contains("\"approved\""));
}

#[test]
fn a_resume_with_an_audit_log_cut_short_spends_nothing() {
    let w = World::new();
    let id = hold_touch(&w);
    assert!(w.tx(&["approve", &id]).status.success());
    let log = w.state.join("audit/log.jsonl");
    let kept = std::fs::read(&log).unwrap();
    std::fs::write(&log, &kept[..100]).unwrap();
    let o = w.tx(&["resume", &id]);
    assert_eq!(o.status.code(), Some(125), "{}", text(&o));
    assert!(
        text(&o).contains("cannot write to the audit log, so nothing runs and the approval is not spent"),
        "{}",
        text(&o)
    );
    assert!(!exists(&w.ws.join("held.txt")), "it ran without a record");
    // The log put back, the same approval still works, once.
    std::fs::write(&log, &kept).unwrap();
    let o = w.tx(&["resume", &id]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(exists(&w.ws.join("held.txt")));
    let (code, out) = verify(&w);
    assert_eq!(code, 0, "{out}");
}

#[test]
fn a_run_that_cannot_be_planned_is_still_on_record() {
    let w = World::new();
    // The planner refuses a state directory the command could reach.
    let inside = w.ws.join("state-inside");
    let o = Command::new(bin())
        .arg("--state-dir")
        .arg(&inside)
        .args(["run", "-c", "touch ran.txt"])
        .current_dir(&w.ws)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(125), "{}", text(&o));
    assert!(!exists(&w.ws.join("ran.txt")), "nothing ran");
    let log = std::fs::read_to_string(inside.join("audit/log.jsonl")).unwrap();
    let kinds: Vec<&str> = log
        .lines()
        .map(|l| {
            if l.contains("\"kind\":\"decision\"") {
                "decision"
            } else {
                "other"
            }
        })
        .collect();
    assert_eq!(kinds, ["decision"], "{log}");
}

/// A hold whose preview cannot even be prepared (here its capture cannot be
/// made) runs nothing, and its decision is on record all the same.
#[test]
fn a_hold_whose_preview_cannot_start_is_still_on_record() {
    let w = World::new();
    std::fs::write(w.state.join("overlays"), "not a directory").unwrap();
    let policy = w.policy("require_approval_for = [\"touch\"]\ndefault = \"allow\"\n");
    let o = w.tx(&["run", "--policy", policy.to_str().unwrap(), "-c", "touch held.txt"]);
    assert_eq!(o.status.code(), Some(125), "{}", text(&o));
    assert!(text(&o).contains("cannot prepare the preview"), "{}", text(&o));
    assert!(!exists(&w.ws.join("held.txt")), "nothing ran");
    let log = std::fs::read_to_string(w.state.join("audit/log.jsonl")).unwrap();
    assert!(
        log.lines()
            .any(|l| l.contains("\"kind\":\"decision\"") && l.contains("\"decision\":\"ask\"")),
        "{log}"
    );
}

#[test]
fn a_reader_that_stops_early_ends_audit_show_quietly() {
    let w = World::new();
    populate(&w, 2);
    // As `| head -0` would: the reading end is gone before anything is
    // written (closed before the process starts, not raced with it).
    let (read_end, write_end) = nix::unistd::pipe().unwrap();
    drop(read_end);
    let mut c = w.command(&["audit", "show", "--json"]);
    let o = c
        .stdout(Stdio::from(write_end))
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(err, "", "nothing to say about a reader that had enough");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        o.status.signal(),
        Some(13),
        "ends by SIGPIPE, as cat would: {:?}",
        o.status
    );
}

/// `audit show` on a log someone edited: an escape sequence put in a
/// record's time is shown escaped, and a line that is no record hides none
/// of the others (each one it cannot read is named, and it exits 125).
#[test]
fn audit_show_escapes_an_edited_time_and_shows_every_readable_record() {
    let w = World::new();
    populate(&w, 2);
    let mut lines = log_lines(&w);
    let mut v: serde_json::Value = serde_json::from_str(&lines[1]).unwrap();
    v["time"] = serde_json::Value::from("2026-01-01T00:00:00.000Z\u{1b}[1A\u{1b}[2K\r#1 fake");
    lines[1] = serde_json::to_string(&v).unwrap();
    lines.insert(2, "[".repeat(100_000));
    write_lines(&w, &lines);
    let o = w.tx(&["audit", "show"]);
    assert!(!o.stdout.contains(&0x1b), "{}", text(&o));
    assert!(!o.stderr.contains(&0x1b), "{}", text(&o));
    let shown = stdout(&o);
    assert_eq!(shown.lines().count(), lines.len() - 1, "every readable record: {shown}");
    assert!(shown.contains("\\u{1b}[1A"), "{shown}");
    assert_eq!(o.status.code(), Some(125), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("log.jsonl:3: not an audit record"),
        "{}",
        text(&o)
    );
    // Control: verify reports both.
    let (code, out) = verify(&w);
    assert_ne!(code, 0, "{out}");
}
