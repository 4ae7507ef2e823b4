//! Held actions, approvals and resume through the command line, judged from the
//! host (files in the workspace, the store's state). The library tests in
//! `tests/approval.rs` cover the full tamper matrix of the signed evidence; these
//! show the launcher binds what it says it binds and runs an action at most once.

mod common;
use common::*;
use std::path::Path;
use std::process::{Command, Stdio};

const POLICY: &str = "require_approval_for = [\"rm\", \"tee\"]\nbash_allow_prefixes = [\"ls\", \"touch\", \"echo\", \"cat\"]\ndefault = \"ask\"\n";

/// Hold `script` under POLICY; returns the action id.
fn hold(w: &World, policy: &Path, script: &str) -> String {
    let o = w.tx(&[
        "run",
        "--policy",
        policy.to_str().unwrap(),
        "--session",
        "ses_test",
        "-c",
        script,
    ]);
    assert_eq!(o.status.code(), Some(75), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        err.starts_with("[APPROVAL REQUIRED] Session `ses_test` wants to run:"),
        "{err}"
    );
    held_id(&err)
}

#[test]
fn held_action_runs_once_after_approval() {
    let w = World::new();
    let p = w.policy(POLICY);
    w.write("build/out.o", "x");
    let id = hold(&w, &p, "rm -rf build && echo ran >> runs.log");
    assert!(exists(&w.ws.join("build/out.o")), "held actions do not run");
    let pending = w.tx(&["pending", "--json"]);
    assert!(stdout(&pending).contains(&id));
    assert_eq!(w.tx(&["resume", &id]).status.code(), Some(75), "not approved yet");
    let o = w.tx(&["approve", &id]);
    assert!(o.status.success(), "{}", text(&o));
    let o = w.tx(&["resume", &id]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(!exists(&w.ws.join("build")), "the approved command ran");
    // A second resume returns the recorded result without running again.
    let o = w.tx(&["resume", &id]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("already ran"));
    assert_eq!(
        std::fs::read_to_string(w.ws.join("runs.log")).unwrap(),
        "ran\n",
        "ran exactly once"
    );
    assert!(!stdout(&w.tx(&["pending"])).contains(&id));
}

#[test]
fn rejection_is_reported_as_the_agents_observation() {
    let w = World::new();
    let p = w.policy(POLICY);
    w.write("build/x", "x");
    let id = hold(&w, &p, "rm -rf build");
    assert!(w.tx(&["reject", &id, "--reason", "use make clean"]).status.success());
    let o = w.tx(&["resume", &id]);
    assert_eq!(o.status.code(), Some(77));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr).trim(),
        "[ACTION REJECTED BY POLICY]: use make clean"
    );
    assert!(exists(&w.ws.join("build/x")));
}

#[test]
fn held_stdin_is_what_runs() {
    let w = World::new();
    let p = w.policy(POLICY);
    let mut c = Command::new(bin())
        .arg("--state-dir")
        .arg(&w.state)
        .args(["run", "--policy", p.to_str().unwrap(), "-c", "tee got.txt"])
        .current_dir(&w.ws)
        .env("TETHER_EXEC_APPROVER_KEY", w.outside.join("approver.key"))
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    c.stdin.take().unwrap().write_all(b"held input").unwrap();
    let o = c.wait_with_output().unwrap();
    let id = held_id(&String::from_utf8_lossy(&o.stderr));
    assert!(w.tx(&["approve", &id]).status.success());
    let o = w.tx(&["resume", &id]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(w.ws.join("got.txt")).unwrap(), "held input");
}

#[test]
fn a_changed_workspace_invalidates_the_approval() {
    let w = World::new();
    let p = w.policy(POLICY);
    w.write("build/x", "x");
    let id = hold(&w, &p, "rm -rf build");
    assert!(w.tx(&["approve", &id]).status.success());
    w.write("new-file.txt", "changed after approval");
    let o = w.tx(&["resume", &id]);
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(
        text(&o).contains("workspace"),
        "the refusal names what changed: {}",
        text(&o)
    );
    assert!(exists(&w.ws.join("build/x")));
}

#[test]
fn changes_where_the_policy_ignores_them_leave_the_approval_standing() {
    // `fingerprint_ignore = ["target"]`: a build writing there between the
    // hold and the resume does not void the approval; a change anywhere else
    // still does, also in a directory that only starts like it.
    let w = World::new();
    let p = w.policy(&format!("{POLICY}fingerprint_ignore = [\"target\"]\n"));
    w.write("target/debug/app", "old build");
    w.write("build/x", "x");
    let id = hold(&w, &p, "rm -rf build");
    let shown = stdout(&w.tx(&["show", &id]));
    assert!(shown.contains("(not covering, as the policy says: target)"), "{shown}");
    assert!(w.tx(&["approve", &id]).status.success());
    w.write("target/debug/app", "a new build");
    w.write("target/debug/deps/more.rlib", "more");
    let o = w.tx(&["resume", &id]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(!exists(&w.ws.join("build")), "the approved command ran");
    // Control: the same policy, a change outside `target`.
    w.write("build/x", "x");
    let id = hold(&w, &p, "rm -rf build");
    assert!(w.tx(&["approve", &id]).status.success());
    w.write("targets/notes.txt", "not ignored");
    let o = w.tx(&["resume", &id]);
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(text(&o).contains("workspace"), "{}", text(&o));
    assert!(exists(&w.ws.join("build/x")), "nothing ran");
}

#[test]
fn a_changed_policy_invalidates_the_approval() {
    let w = World::new();
    let p = w.policy(POLICY);
    w.write("build/x", "x");
    let id = hold(&w, &p, "rm -rf build");
    assert!(w.tx(&["approve", &id]).status.success());
    std::fs::write(&p, format!("{POLICY}network = true\n")).unwrap();
    let o = w.tx(&["resume", &id]);
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(text(&o).contains("policy"), "{}", text(&o));
    assert!(exists(&w.ws.join("build/x")));
}

#[test]
fn an_edited_command_in_the_store_is_refused() {
    let w = World::new();
    let p = w.policy(POLICY);
    w.write("build/x", "x");
    let id = hold(&w, &p, "rm -rf build");
    assert!(w.tx(&["approve", &id]).status.success());
    // The attacker with write access to the database swaps the command.
    let db = rusqlite::Connection::open(w.state.join("approvals.sqlite")).unwrap();
    let intent: String = db
        .query_row("SELECT intent_json FROM actions WHERE id = ?1", [&id], |r| r.get(0))
        .unwrap();
    let edited = intent.replace("rm -rf build", "touch pwned");
    assert_ne!(intent, edited);
    db.execute("UPDATE actions SET intent_json = ?1 WHERE id = ?2", [&edited, &id])
        .unwrap();
    drop(db);
    let o = w.tx(&["resume", &id]);
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        !exists(&w.ws.join("pwned")) && exists(&w.ws.join("build/x")),
        "{}",
        text(&o)
    );
}

#[test]
fn an_expired_approval_leaves_the_action_frozen() {
    let w = World::new();
    let p = w.policy(&format!("{POLICY}approval_ttl_seconds = 1\n"));
    w.write("build/x", "x");
    let id = hold(&w, &p, "rm -rf build");
    assert!(w.tx(&["approve", &id]).status.success());
    std::thread::sleep(std::time::Duration::from_millis(1100));
    // On record, but counted as what it is.
    let shown = stdout(&w.tx(&["show", &id]));
    assert!(shown.contains("0 of 1 distinct approvers; 1 expired"), "{shown}");
    let o = w.tx(&["resume", &id]);
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(text(&o).contains("approval_ttl_seconds"), "{}", text(&o));
    assert!(exists(&w.ws.join("build/x")));
    // Frozen: waiting for a human again.
    let listed = stdout(&w.tx(&["pending"]));
    assert!(
        listed.contains("frozen") && listed.contains("approvals 0 of 1; 1 expired"),
        "{listed}"
    );
    // A fresh approval for the same intent replaces the expired one.
    let o = w.tx(&["approve", &id]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(stdout(&o).contains("(1 of 1 approvals)"), "{}", text(&o));
    let o = w.tx(&["resume", &id]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(!exists(&w.ws.join("build")));
}

#[test]
fn concurrent_resumes_run_the_action_once() {
    let w = World::new();
    let p = w.policy(POLICY);
    let counter = w.ws.join("runs.log");
    let id = hold(&w, &p, "tee -a runs.log < /dev/null; echo run >> runs.log");
    assert!(w.tx(&["approve", &id]).status.success());
    let children: Vec<_> = (0..20)
        .map(|_| {
            Command::new(bin())
                .arg("--state-dir")
                .arg(&w.state)
                .args(["resume", &id])
                .current_dir(&w.ws)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        let _ = c.wait();
    }
    let runs = std::fs::read_to_string(&counter).unwrap_or_default();
    assert_eq!(runs.lines().count(), 1, "the action ran {} times", runs.lines().count());
}

#[test]
fn nothing_inside_the_sandbox_can_approve() {
    let w = World::new();
    let p = w.policy(POLICY);
    w.write("build/x", "x");
    let id = hold(&w, &p, "rm -rf build");
    // Give the sandbox the launcher binary itself, and let it try with the real state dir.
    std::fs::copy(bin(), w.ws.join("tx")).unwrap();
    let attempt = format!(
        "./tx --state-dir {} approve {id}; ./tx approve {id}; ls {}",
        w.state.display(),
        w.state.display()
    );
    let o = w.run(&attempt);
    let st = w.tx(&["show", &id, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
    assert_eq!(
        v["action"]["approvals"].as_array().unwrap().len(),
        0,
        "approved from inside: {}",
        text(&o)
    );
    assert_eq!(v["action"]["state"], "pending");
    // Control: the same command on the host approves.
    let c = Command::new(w.ws.join("tx"))
        .arg("--state-dir")
        .arg(&w.state)
        .args(["approve", &id])
        .env("TETHER_EXEC_APPROVER_KEY", w.outside.join("approver.key"))
        .output()
        .unwrap();
    assert!(c.status.success(), "control: {}", text(&c));
}

/// The approver's key is invisible inside wherever it is kept where a mount
/// would show it: in the workspace under a name no secret scan knows, or (as
/// root, who can make one there) in a system directory. Copied out, it would
/// sign approvals.
#[test]
fn the_approver_key_is_invisible_inside_wherever_it_is_kept() {
    let w = World::new();
    let mut places = vec![w.ws.join("keys/approver")];
    let system = RemovedOnDrop(std::path::PathBuf::from(format!("/opt/tether-test-{}", rand_tag())));
    if is_root() && std::path::Path::new("/opt").is_dir() {
        places.push(system.0.join("signer"));
    }
    for key in places {
        std::fs::create_dir_all(key.parent().unwrap()).unwrap();
        let shown = w
            .command(&["approver", "show"])
            .env("TETHER_EXEC_APPROVER_KEY", &key)
            .output()
            .unwrap();
        assert!(shown.status.success(), "{}", text(&shown));
        let secret = std::fs::read(&key).unwrap();
        assert!(!secret.is_empty());
        let steal = format!("cat {} > stolen; echo ran", key.display());
        let o = w
            .command(&["run", "-c", &steal])
            .env("TETHER_EXEC_APPROVER_KEY", &key)
            .output()
            .unwrap();
        let stolen = std::fs::read(w.ws.join("stolen")).unwrap_or_default();
        let taken = stolen.windows(secret.len()).any(|x| x == secret.as_slice());
        let _ = std::fs::remove_dir_all(&system.0);
        assert_eq!(stdout(&o), "ran\n", "the attack ran: {}", text(&o));
        assert!(!taken, "{}: the key was read from inside: {}", key.display(), text(&o));
        // Control: the same copy on the host takes the key.
        if key.starts_with(&w.ws) {
            let c = w.control(&steal);
            assert_eq!(
                std::fs::read(w.ws.join("stolen")).unwrap(),
                secret,
                "control: {}",
                text(&c)
            );
            std::fs::remove_file(&key).unwrap();
        }
        std::fs::remove_file(w.ws.join("stolen")).unwrap();
    }
}

#[test]
fn receipts_carry_the_pending_id_and_the_isolation() {
    let w = World::new();
    let p = w.policy(POLICY);
    let r = w.outside.join("r.json");
    let run = |script: &str| {
        w.tx(&[
            "run",
            "--policy",
            p.to_str().unwrap(),
            "--receipt",
            r.to_str().unwrap(),
            "-c",
            script,
        ])
    };
    let o = run("rm x");
    assert_eq!(o.status.code(), Some(75));
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&r).unwrap()).unwrap();
    assert!(v["pending_id"].as_str().unwrap().starts_with("apr_"));
    assert_eq!(v["decision"], "ask");
    let o = run("ls");
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&r).unwrap()).unwrap();
    assert_eq!(v["v"], 1);
    assert_eq!(v["exit_code"], 0);
    assert_eq!(
        v["isolation"]["landlock"]["enforcement"],
        "fully enforced (hard requirement)"
    );
    assert!(v["policy_digest"].as_str().unwrap().starts_with("sha256:"));
    assert!(v["audit_seq"].as_u64().unwrap() >= 1);
}

/// Every run of a session counts as one of its proposals, held or not, and
/// concurrent runs lose none: a hold after them has the next position, and
/// the count an approval's proposal expiry is measured against includes them.
#[test]
fn every_run_of_a_session_is_counted_as_a_proposal() {
    let w = World::new();
    let p = w.policy(POLICY);
    let runs: Vec<_> = (0..8)
        .map(|_| {
            w.command(&[
                "run",
                "--policy",
                p.to_str().unwrap(),
                "--session",
                "ses_test",
                "--",
                "ls",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
        })
        .collect();
    for mut r in runs {
        assert!(r.wait().unwrap().success());
    }
    let id = hold(&w, &p, "rm -rf build");
    let v: serde_json::Value = serde_json::from_slice(&w.tx(&["show", &id, "--json"]).stdout).unwrap();
    assert_eq!(v["action"]["position"], 9, "{v}");
    // Another session's runs are its own.
    let o = w.tx(&[
        "run",
        "--policy",
        p.to_str().unwrap(),
        "--session",
        "ses_other",
        "--",
        "ls",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let id = hold(&w, &p, "rm -rf build2");
    let v: serde_json::Value = serde_json::from_slice(&w.tx(&["show", &id, "--json"]).stdout).unwrap();
    assert_eq!(v["action"]["position"], 10, "{v}");
}

/// In a git repository a run's git directory is captured; a resume that does
/// not run (here: not approved yet), or lands a preview instead of running,
/// leaves no capture behind, which the next start would report as an
/// interrupted run's.
#[test]
fn a_resume_that_runs_nothing_leaves_no_capture_behind() {
    let w = World::new();
    host_git(&w, &["init", "-q"]);
    w.write("a.txt", "a\n");
    host_git(&w, &["add", "a.txt"]);
    host_git(&w, &["commit", "-qm", "a"]);
    let overlays = |w: &World| {
        std::fs::read_dir(w.state.join("overlays"))
            .map(|d| d.count())
            .unwrap_or(0)
    };
    for policy in [
        "require_approval_for = [{ prefix = \"touch\", preview = false }]\ndefault = \"allow\"\n",
        "require_approval_for = [\"touch\"]\ndefault = \"allow\"\n",
    ] {
        let p = w.policy(policy);
        let o = w.tx(&["run", "--policy", p.to_str().unwrap(), "-c", "touch held"]);
        assert_eq!(o.status.code(), Some(75), "{}", text(&o));
        let id = held_id(&String::from_utf8_lossy(&o.stderr));
        assert_eq!(w.tx(&["resume", &id]).status.code(), Some(75), "not approved yet");
        assert_eq!(overlays(&w), 0, "{policy}: a refused resume");
        assert!(w.tx(&["approve", &id]).status.success());
        let o = w.tx(&["resume", &id]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        assert_eq!(overlays(&w), 0, "{policy}: a resume that ran or landed");
        let next = w.tx(&["run", "--", "true"]);
        assert!(!text(&next).contains("discarded"), "{}", text(&next));
        std::fs::remove_file(w.ws.join("held")).unwrap();
    }
}

/// `tether-exec ARGS` in the world's workspace with the approver key `key`.
fn as_approver(w: &World, key: &Path, args: &[&str]) -> std::process::Output {
    w.command(args).env("TETHER_EXEC_APPROVER_KEY", key).output().unwrap()
}

/// The public key `approver show` prints.
fn public_key_of(shown: &std::process::Output) -> String {
    stdout(shown)
        .lines()
        .find_map(|l| l.strip_prefix("public key:").map(|k| k.trim().to_string()))
        .expect("approver show prints the public key")
}

/// The audit log's entries of one kind, as `audit show --json` lists them.
fn audited(w: &World, kind: &str) -> usize {
    let o = w.tx(&["audit", "show", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    stdout(&o)
        .lines()
        .filter(|l| l.contains(&format!("\"kind\":\"{kind}\"")))
        .count()
}

#[test]
fn approve_with_resume_runs_the_action_once_in_one_call() {
    let w = World::new();
    let p = w.policy(POLICY);
    w.write("build/x", "x");
    let id = hold(
        &w,
        &p,
        "rm -rf build; echo ran >> runs.log; echo out; echo err >&2; exit 3",
    );
    let receipt = w.outside.join("r.json");
    let o = w.tx(&["approve", &id, "--resume", "--receipt", receipt.to_str().unwrap()]);
    // The output and the exit code are the command's, nothing of approve's.
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert_eq!(stdout(&o), "out\n");
    assert_eq!(String::from_utf8_lossy(&o.stderr), "err\n");
    assert!(!exists(&w.ws.join("build")), "the approved command landed");
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&receipt).unwrap()).unwrap();
    assert_eq!(r["pending_id"], id.as_str());
    assert_eq!(r["exit_code"], 3);
    assert_eq!(r["decision"], "allow");
    // A retry (a harness that lost the answer) is the same call: the recorded
    // result, no second run, no second approval on record.
    let o = w.tx(&["approve", &id, "--resume"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(text(&o).contains("already ran"), "{}", text(&o));
    assert_eq!(
        std::fs::read_to_string(w.ws.join("runs.log")).unwrap(),
        "ran\n",
        "ran exactly once"
    );
    assert_eq!(audited(&w, "approved"), 1);
    assert_eq!(audited(&w, "run_start"), 1);
}

#[test]
fn approve_with_resume_of_an_action_held_without_preview_runs_it_confined() {
    let w = World::new();
    let p = w.policy("require_approval_for = [{ prefix = \"tee\", preview = false }]\ndefault = \"allow\"\n");
    let secret = w.outside.join("secret.txt");
    std::fs::write(&secret, "host secret").unwrap();
    let script = format!(
        "cat {} > seen.txt; ls /proc/self/fd > fds.txt; echo done | tee out.txt",
        secret.display()
    );
    let id = hold(&w, &p, &script);
    assert!(
        !exists(&w.ws.join("out.txt")),
        "held without a preview: nothing ran yet"
    );
    let o = w.tx(&["approve", &id, "--resume"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(stdout(&o), "done\n");
    assert_eq!(std::fs::read_to_string(w.ws.join("out.txt")).unwrap(), "done\n");
    // The run the approval released is as confined as any: the host's file
    // outside the workspace was not there to read.
    assert_eq!(std::fs::read_to_string(w.ws.join("seen.txt")).unwrap(), "");
    // Nor did the approving process's open files (the store, its WAL) reach
    // the command: 0, 1, 2 and the one `ls` opened to list them.
    assert_eq!(std::fs::read_to_string(w.ws.join("fds.txt")).unwrap(), "0\n1\n2\n3\n");
    // Control: the same script unconfined reads it.
    let c = w.control(&script);
    assert!(c.status.success(), "{}", text(&c));
    assert_eq!(std::fs::read_to_string(w.ws.join("seen.txt")).unwrap(), "host secret");
}

#[test]
fn approve_with_resume_waits_for_every_approver_the_rule_needs() {
    let w = World::new();
    let p = w.policy("require_approval_for = [{ prefix = \"rm\", approvals = 2 }]\ndefault = \"allow\"\n");
    w.write("build/x", "x");
    let id = hold(&w, &p, "rm -rf build");
    let o = w.tx(&["approve", &id, "--resume"]);
    assert_eq!(o.status.code(), Some(75), "{}", text(&o));
    assert!(text(&o).contains("1 of 2 approvals"), "{}", text(&o));
    assert!(exists(&w.ws.join("build/x")), "one approval of two runs nothing");
    // The second approver, trusted by the first, releases it.
    let second_key = w.outside.join("second.key");
    let public = public_key_of(&as_approver(&w, &second_key, &["approver", "show"]));
    assert!(w.tx(&["approver", "trust", &public]).status.success());
    let o = as_approver(&w, &second_key, &["approve", &id, "--resume"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(!exists(&w.ws.join("build")));
}

#[test]
fn approve_with_resume_still_checks_what_the_approval_binds() {
    let w = World::new();
    let p = w.policy(POLICY);
    w.write("build/x", "x");
    let id = hold(&w, &p, "rm -rf build");
    w.write("new-file.txt", "changed after the hold");
    let o = w.tx(&["approve", &id, "--resume"]);
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(
        text(&o).contains("workspace"),
        "the refusal names what changed: {}",
        text(&o)
    );
    assert!(exists(&w.ws.join("build/x")), "nothing ran");
}

#[test]
fn approve_with_resume_by_an_untrusted_key_runs_nothing() {
    let w = World::new();
    let p = w.policy(POLICY);
    w.write("build/x", "x");
    let id = hold(&w, &p, "rm -rf build");
    // The world's key is trusted; another key is not.
    let public = public_key_of(&w.tx(&["approver", "show"]));
    assert!(w.tx(&["approver", "trust", &public]).status.success());
    let o = as_approver(&w, &w.outside.join("stranger.key"), &["approve", &id, "--resume"]);
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("not trusted"), "{}", text(&o));
    assert!(exists(&w.ws.join("build/x")), "nothing ran");
    // Control: the trusted key's call runs it.
    assert_eq!(w.tx(&["approve", &id, "--resume"]).status.code(), Some(0));
    assert!(!exists(&w.ws.join("build")));
}

#[test]
fn reject_with_resume_hands_the_agent_its_observation() {
    let w = World::new();
    let p = w.policy(POLICY);
    w.write("build/x", "x");
    let id = hold(&w, &p, "rm -rf build");
    for _ in 0..2 {
        // The second call is a retry: the same observation.
        let o = w.tx(&["reject", &id, "--reason", "use make clean", "--resume"]);
        assert_eq!(o.status.code(), Some(77), "{}", text(&o));
        assert_eq!(stdout(&o), "");
        assert_eq!(
            String::from_utf8_lossy(&o.stderr).trim(),
            "[ACTION REJECTED BY POLICY]: use make clean"
        );
    }
    assert!(exists(&w.ws.join("build/x")));
    assert_eq!(audited(&w, "rejected"), 1);
    // Without --resume a second rejection is an error, as before.
    assert_eq!(w.tx(&["reject", &id, "--reason", "again"]).status.code(), Some(77));
}

#[test]
fn concurrent_approvals_with_resume_run_the_action_once() {
    let w = World::new();
    let p = w.policy("require_approval_for = [{ prefix = \"tee\", preview = false }]\ndefault = \"allow\"\n");
    let id = hold(&w, &p, "tee -a runs.log < /dev/null; echo run >> runs.log");
    let children: Vec<_> = (0..12)
        .map(|_| {
            w.command(&["approve", &id, "--resume"])
                .env("TETHER_EXEC_APPROVER_KEY", w.outside.join("approver.key"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let codes: Vec<_> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap().status.code())
        .collect();
    let runs = std::fs::read_to_string(w.ws.join("runs.log")).unwrap_or_default();
    assert_eq!(
        runs.lines().count(),
        1,
        "the action ran {} times ({codes:?})",
        runs.lines().count()
    );
    assert_eq!(audited(&w, "run_start"), 1);
}

/// `approve --resume` killed while the command it released runs: the same
/// call sent again (a harness that lost the answer) never runs the action a
/// second time. Running an interrupted action again takes a deliberate
/// `approve`, and then it runs.
#[test]
fn a_retried_approve_with_resume_never_runs_an_interrupted_action_again() {
    let w = World::new();
    // The log is outside what the approval binds, so that only the
    // interruption, not the changed workspace, stands in the way.
    let p = tee_held_logs_unbound(&w);
    let id = hold(
        &w,
        &p,
        "tee -a logs/runs.log < /dev/null; echo run >> logs/runs.log; sleep 30",
    );
    let mut first = w
        .command(&["approve", &id, "--resume"])
        .env("TETHER_EXEC_APPROVER_KEY", w.outside.join("approver.key"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        eventually(|| std::fs::read_to_string(w.ws.join("logs/runs.log")).is_ok_and(|l| l == "run\n")),
        "the command started"
    );
    first.kill().unwrap();
    first.wait().unwrap();
    for _ in 0..2 {
        let o = w.tx(&["approve", &id, "--resume"]);
        assert_eq!(o.status.code(), Some(77), "{}", text(&o));
        assert!(text(&o).contains("interrupted"), "{}", text(&o));
    }
    assert_eq!(std::fs::read_to_string(w.ws.join("logs/runs.log")).unwrap(), "run\n");
    assert_eq!(audited(&w, "run_start"), 1);
    // A deliberate approval is taken, but the interrupted run was a
    // writable run like any other: the workspace's generation moved on (at
    // the next start, its launcher being gone), so the approval no longer
    // applies, and the command is proposed again.
    assert!(w.tx(&["approve", &id]).status.success());
    let o = w.tx(&["resume", &id]);
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(text(&o).contains("workspace generation changed"), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(w.ws.join("logs/runs.log")).unwrap(), "run\n");
    // Control: proposed again and approved, it runs.
    let again = hold(&w, &p, "echo again | tee -a logs/runs.log");
    let o = w.tx(&["approve", &again, "--resume"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(
        std::fs::read_to_string(w.ws.join("logs/runs.log")).unwrap(),
        "run\nagain\n"
    );
}

/// A resume whose start cannot be put on disk runs nothing: the sync is
/// waited for while the sandbox builds itself, and the command starts only
/// after it. The action then reads as interrupted, and a deliberate approval
/// runs it (nothing ran, so the workspace's generation stands).
#[test]
fn a_resume_whose_start_cannot_be_synced_runs_nothing_until_approved_again() {
    let w = World::new();
    let p = w.policy("require_approval_for = [{ prefix = \"touch\", preview = false }]\ndefault = \"allow\"\n");
    let id = hold(&w, &p, "touch made");
    assert!(w.tx(&["approve", &id]).status.success());
    let o = w.tx_hooked(&["resume", &id], ("TETHER_EXEC_TEST_FAIL_AT", "start-sync"));
    assert_eq!(o.status.code(), Some(125), "{}", text(&o));
    assert!(text(&o).contains("cannot put the start of"), "{}", text(&o));
    assert!(!exists(&w.ws.join("made")), "nothing ran: {}", text(&o));
    let o = w.tx(&["resume", &id]);
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(text(&o).contains("interrupted"), "{}", text(&o));
    assert!(!exists(&w.ws.join("made")), "not without a fresh approval");
    // Control: approved again, it runs.
    assert!(w.tx(&["approve", &id]).status.success());
    let o = w.tx(&["resume", &id]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(exists(&w.ws.join("made")), "{}", text(&o));
}

/// A resume whose sandbox cannot be set up ran nothing: no result is
/// recorded (it would read as the command's, for good). The action reads
/// as interrupted, and once the cause is fixed a deliberate approval runs it.
#[test]
fn a_resume_whose_sandbox_cannot_be_set_up_records_no_result_and_runs_once_fixed() {
    let w = World::new();
    // A read-only path the policy names (outside /tmp, which the sandbox has
    // its own of), swapped for a link while the resume's sandbox waits
    // before its mounts (a debug build's test hook): the bind refuses the
    // link the plan did not see, and the set-up fails.
    let tools = host_dir();
    let (sdk, kept, other) = (
        tools.path().join("sdk"),
        tools.path().join("sdk.kept"),
        tools.path().join("other"),
    );
    std::fs::create_dir(&sdk).unwrap();
    std::fs::create_dir(&other).unwrap();
    let p = w.policy(&format!(
        "require_approval_for = [{{ prefix = \"touch\", preview = false }}]\ndefault = \"allow\"\nread_only_paths = [{sdk:?}]\n"
    ));
    let id = hold(&w, &p, "touch made");
    assert!(w.tx(&["approve", &id]).status.success());
    let o = w.paused_before_mounts(&["resume", &id], || {
        std::fs::rename(&sdk, &kept).unwrap();
        std::os::unix::fs::symlink(&other, &sdk).unwrap();
    });
    assert_eq!(o.status.code(), Some(125), "{}", text(&o));
    assert!(text(&o).contains("sandbox setup failed"), "{}", text(&o));
    assert!(text(&o).contains("did not start"), "{}", text(&o));
    assert!(!exists(&w.ws.join("made")), "nothing ran: {}", text(&o));
    let o = w.tx(&["resume", &id]);
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(text(&o).contains("interrupted"), "{}", text(&o));
    assert!(text(&o).contains("could not be set up and nothing ran"), "{}", text(&o));
    assert!(!text(&o).contains("already ran"), "{}", text(&o));
    // Control: fixed and approved again, it runs, once.
    std::fs::remove_file(&sdk).unwrap();
    std::fs::rename(&kept, &sdk).unwrap();
    assert!(w.tx(&["approve", &id]).status.success());
    let o = w.tx(&["resume", &id]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(exists(&w.ws.join("made")), "{}", text(&o));
    let o = w.tx(&["resume", &id]);
    assert!(text(&o).contains("already ran"), "{}", text(&o));
}

#[test]
fn a_failed_decision_with_resume_still_writes_its_receipt() {
    let w = World::new();
    let receipt = w.outside.join("r.json");
    std::fs::write(&receipt, "an older receipt").unwrap();
    let o = w.tx(&[
        "approve",
        "apr_0000000000000000",
        "--resume",
        "--receipt",
        receipt.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(125), "{}", text(&o));
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&receipt).unwrap()).unwrap();
    assert_eq!(r["pending_id"], "apr_0000000000000000");
    assert!(r["exit_code"].is_null(), "nothing ran: {r}");
}

#[test]
fn a_run_in_progress_cannot_change_what_an_approval_binds_unseen() {
    // The fingerprint an approval binds is one `stat` of every entry, and a
    // run that ends moves the generation on. A run still in progress, which
    // mapped a file shared and wrote to it once before the hold, writes the
    // rest after it without moving the file's times (the kernel sets them at
    // the first write to a clean page only): the approved `bash deploy.sh`
    // would run a script the person never saw.
    use std::io::{BufRead, Write};
    let w = World::new();
    let p =
        w.policy("require_approval_for = [{ prefix = \"bash deploy.sh\", preview = false }]\ndefault = \"allow\"\n");
    let fine = "echo fine ################\n";
    let evil = format!("{:<width$}\n", "touch pwned", width = fine.len() - 1);
    w.write("deploy.sh", fine);
    let swap = format!(
        "import mmap, os, sys\n\
         m = mmap.mmap(os.open('deploy.sh', os.O_RDWR), 0, mmap.MAP_SHARED)\n\
         m[0:1] = m[0:1]\n\
         print('mapped', flush=True)\n\
         sys.stdin.readline()\n\
         m[:] = {evil:?}.encode()\n\
         print('swapped', flush=True)\n\
         sys.stdin.readline()\n"
    );
    let mut run = w
        .command(&["run", "--", "python3", "-c", &swap])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut to_run = run.stdin.take().unwrap();
    let mut from_run = std::io::BufReader::new(run.stdout.take().unwrap());
    let mut line = String::new();
    from_run.read_line(&mut line).unwrap();
    assert_eq!(line, "mapped\n");
    let o = w.tx(&["run", "--policy", p.to_str().unwrap(), "--", "bash", "deploy.sh"]);
    assert_eq!(o.status.code(), Some(75), "{}", text(&o));
    let id = held_id(&String::from_utf8_lossy(&o.stderr));
    to_run.write_all(b"go\n").unwrap();
    line.clear();
    from_run.read_line(&mut line).unwrap();
    assert_eq!(line, "swapped\n");
    let o = w.tx(&["approve", &id, "--resume"]);
    assert!(!exists(&w.ws.join("pwned")), "the swapped script ran: {}", text(&o));
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(text(&o).contains("a writable run is in progress"), "{}", text(&o));
    assert!(
        text(&o).contains(&w.state.join("pending-checks").display().to_string()),
        "the refusal names the run's pending check: {}",
        text(&o)
    );
    // Once the run has ended, the generation has moved on: still refused.
    drop(to_run);
    assert!(run.wait().unwrap().success());
    let o = w.tx(&["resume", &id]);
    assert!(!exists(&w.ws.join("pwned")), "the swapped script ran: {}", text(&o));
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(text(&o).contains("workspace generation changed"), "{}", text(&o));
    // A fresh proposal of the command, approved, runs what is there now.
    let again = w.tx(&["run", "--policy", p.to_str().unwrap(), "--", "bash", "deploy.sh"]);
    let id2 = held_id(&String::from_utf8_lossy(&again.stderr));
    let o = w.tx(&["approve", &id2, "--resume"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // Control: what the run swapped in is what bash would have run.
    std::fs::remove_file(w.ws.join("pwned")).unwrap();
    let c = w.control("bash deploy.sh");
    assert!(c.status.success(), "control: {}", text(&c));
    assert!(exists(&w.ws.join("pwned")), "control: {}", text(&c));
}

/// A pending check that cannot be read keeps approvals from being used, as
/// the run in progress it may be would; the refusal names the file and what
/// to do. Removed, its run can no longer be counted: the command is proposed
/// again.
#[test]
fn an_unreadable_pending_check_is_named_in_the_refusal() {
    let w = World::new();
    w.write("deploy.sh", "echo fine\n");
    let id = held_deploy_as_is(&w);
    // A directory where a check's file would be: reading it fails.
    let odd = w.state.join("pending-checks/1-2-unreadable.json");
    std::fs::create_dir_all(&odd).unwrap();
    let o = w.tx(&["resume", &id]);
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(text(&o).contains(&odd.display().to_string()), "{}", text(&o));
    assert!(text(&o).contains("make the file readable"), "{}", text(&o));
    // Control: removed, a fresh proposal of the command runs.
    std::fs::remove_dir(&odd).unwrap();
    let again = held_deploy_as_is(&w);
    let o = w.tx(&["resume", &again]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

/// `file` rewritten in place to `touch pwned`, same size, its modification
/// time put back: unseen by a `stat` of it.
fn swap_unseen(file: &str) -> String {
    format!("touch -r {file} /tmp/ref && printf '%-26s\\n' 'touch pwned' 1<> {file} && touch -r /tmp/ref {file}")
}

/// After a run swapped what `bash deploy.sh` runs: the approval `id` no
/// longer applies (the generation moved on) and nothing of the swap ran;
/// the control shows the swap is what bash would have run.
fn resume_refuses_the_swap(w: &World, id: &str) {
    let o = w.tx(&["resume", id]);
    assert!(!exists(&w.ws.join("pwned")), "the swapped script ran: {}", text(&o));
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(text(&o).contains("workspace generation changed"), "{}", text(&o));
    let c = w.control("bash deploy.sh");
    assert!(c.status.success(), "control: {}", text(&c));
    assert!(exists(&w.ws.join("pwned")), "control: {}", text(&c));
}

/// `bash deploy.sh` held (no preview) and approved, `deploy.sh` as it is.
fn held_deploy_as_is(w: &World) -> String {
    let p =
        w.policy("require_approval_for = [{ prefix = \"bash deploy.sh\", preview = false }]\ndefault = \"allow\"\n");
    let o = w.tx(&["run", "--policy", p.to_str().unwrap(), "--", "bash", "deploy.sh"]);
    assert_eq!(o.status.code(), Some(75), "{}", text(&o));
    let id = held_id(&String::from_utf8_lossy(&o.stderr));
    let a = w.tx(&["approve", &id]);
    assert!(a.status.success(), "{}", text(&a));
    id
}

#[test]
fn a_run_whose_launcher_was_killed_still_voids_the_approval() {
    // The run's end moves the generation on; killed (SIGKILL, as a
    // harness's timeout does), its launcher never got there. The next start
    // finds its pending check no longer held and counts the run then.
    use std::io::{BufRead, Write};
    let w = World::new();
    w.write("deploy.sh", "echo fine ################\n");
    let mut run = w
        .command(&[
            "run",
            "-c",
            &format!("read go; {} && echo swapped && sleep 300", swap_unseen("deploy.sh")),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let id = held_deploy_as_is(&w);
    let mut to_run = run.stdin.take().unwrap();
    to_run.write_all(b"go\n").unwrap();
    let mut line = String::new();
    std::io::BufReader::new(run.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "swapped\n");
    run.kill().unwrap();
    run.wait().unwrap();
    resume_refuses_the_swap(&w, &id);
}

#[test]
fn a_run_in_a_folder_of_the_workspace_voids_its_approvals() {
    // The generation is the workspace's and every overlapping one's: a run
    // whose workspace is a folder of it (or one holding it) writes there too.
    let w = World::new();
    std::fs::create_dir(w.ws.join("sub")).unwrap();
    std::fs::write(w.ws.join("sub/lib.sh"), "echo fine ################\n").unwrap();
    std::fs::write(w.ws.join("deploy.sh"), "source sub/lib.sh #########\n").unwrap();
    let id = held_deploy_as_is(&w);
    let swap = swap_unseen("lib.sh");
    let o = w.tx(&["run", "--workspace", w.ws.join("sub").to_str().unwrap(), "-c", &swap]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    resume_refuses_the_swap(&w, &id);
}

/// `show` and `pending` print an argv word by word as a shell would need
/// it typed, and a workspace path escaped: two different actions never
/// read alike, and no escape sequence in a path redraws the lines above.
#[test]
fn show_quotes_argv_words_and_escapes_the_workspace_path() {
    let w = World::new();
    let p = w.policy("require_approval_for = [\"touch\", \"sh\"]\ndefault = \"allow\"\n");
    let held = |cwd: &Path, argv: &[&str]| {
        let mut args = vec!["run", "--policy", p.to_str().unwrap(), "--"];
        args.extend_from_slice(argv);
        let o = w.command(&args).current_dir(cwd).output().unwrap();
        assert_eq!(o.status.code(), Some(75), "{}", text(&o));
        held_id(&String::from_utf8_lossy(&o.stderr))
    };
    let one = held(&w.ws, &["touch", "a b"]);
    let two = held(&w.ws, &["touch", "a", "b"]);
    let three = held(&w.ws, &["sh", "-c", "touch pwned", "harmless"]);
    assert!(stdout(&w.tx(&["show", &one])).contains("would run:   touch 'a b'\n"));
    assert!(stdout(&w.tx(&["show", &two])).contains("would run:   touch a b\n"));
    assert!(stdout(&w.tx(&["show", &three])).contains("would run:   sh -c 'touch pwned' harmless\n"));
    assert!(stdout(&w.tx(&["pending"])).contains("`touch 'a b'`"));
    // A workspace whose name redraws the line above it.
    let odd = w.outside.join("p\x1b[1A\r\x1b[2K  would run:   ls -la");
    std::fs::create_dir(&odd).unwrap();
    let id = held(&odd, &["touch", "x"]);
    let shown = w.tx(&["show", &id]);
    assert!(!shown.stdout.contains(&0x1b), "{}", text(&shown));
    assert!(stdout(&shown).contains("\\x1b[1A\\x0d\\x1b[2K"), "{}", text(&shown));
}

/// A copy of the state directory is another state directory: an approval
/// spent in the original is not there to spend again in the copy, which
/// holds it unspent.
#[test]
fn a_copied_state_directory_does_not_run_a_spent_approval_again() {
    let w = World::new();
    let p = tee_held_logs_unbound(&w);
    let id = hold(&w, &p, "tee -a logs/runs.log < /dev/null; echo run >> logs/runs.log");
    assert!(w.tx(&["approve", &id]).status.success());
    let copy = w.outside.join("state-copy");
    let c = Command::new("cp").arg("-a").arg(&w.state).arg(&copy).output().unwrap();
    assert!(c.status.success(), "{}", text(&c));
    let o = w.tx(&["resume", &id]);
    assert_eq!(o.status.code(), Some(0), "the original runs it: {}", text(&o));
    let o = Command::new(bin())
        .arg("--state-dir")
        .arg(&copy)
        .args(["resume", &id])
        .current_dir(&w.ws)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(text(&o).contains("environment"), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(w.ws.join("logs/runs.log")).unwrap(), "run\n");
}

/// A resume while the action runs in another process is told to wait
/// (exit 75), not refused: once that run ends, a resume returns its result.
#[test]
fn a_resume_while_the_action_runs_elsewhere_is_told_to_wait() {
    let w = World::new();
    let p = tee_held_logs_unbound(&w);
    let id = hold(
        &w,
        &p,
        "tee -a logs/runs.log < /dev/null; echo run >> logs/runs.log; while [ ! -e logs/go ]; do sleep 0.05; done",
    );
    assert!(w.tx(&["approve", &id]).status.success());
    let first = w
        .command(&["resume", &id])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        eventually(|| std::fs::read_to_string(w.ws.join("logs/runs.log")).is_ok_and(|l| l == "run\n")),
        "the command started"
    );
    let receipt = w.outside.join("waiting.json");
    let o = w.tx(&["resume", "--receipt", receipt.to_str().unwrap(), &id]);
    assert_eq!(o.status.code(), Some(75), "{}", text(&o));
    assert!(text(&o).contains("already running"), "{}", text(&o));
    // Its receipt says so as a hold's does: the harness waits.
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&receipt).unwrap()).unwrap();
    assert_eq!(r["decision"], "ask", "{r}");
    std::fs::write(w.ws.join("logs/go"), "").unwrap();
    assert!(first.wait_with_output().unwrap().status.success());
    let o = w.tx(&["resume", &id]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("already ran"), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(w.ws.join("logs/runs.log")).unwrap(), "run\n");
}

/// A resume refused because the environment the command would get changed
/// names the variables, never their values; the same environment runs it.
#[test]
fn a_changed_environment_is_named_variable_by_variable() {
    let w = World::new();
    let p = tee_held_logs_unbound(&w);
    let o = w
        .command(&[
            "run",
            "--policy",
            p.to_str().unwrap(),
            "-c",
            "echo run | tee -a logs/runs.log",
        ])
        .env("LANG", "C.UTF-8")
        .env("TZ", "UTC")
        .env_remove("NO_COLOR")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(75), "{}", text(&o));
    let id = held_id(&String::from_utf8_lossy(&o.stderr));
    assert!(w.tx(&["approve", &id]).status.success());
    let o = w
        .command(&["resume", &id])
        .env("LANG", "xx_SECRET_VALUE")
        .env_remove("TZ")
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    let said = text(&o);
    assert!(
        said.contains("LANG changed") && said.contains("TZ removed") && said.contains("NO_COLOR added"),
        "{said}"
    );
    assert!(!said.contains("SECRET_VALUE"), "{said}");
    assert!(!exists(&w.ws.join("logs/runs.log")));
    // Control: the environment it was held with runs it.
    let o = w
        .command(&["resume", &id])
        .env("LANG", "C.UTF-8")
        .env("TZ", "UTC")
        .env_remove("NO_COLOR")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(w.ws.join("logs/runs.log")).unwrap(), "run\n");
}

/// A policy holding `tee` without a preview, and `logs/` (made here) out of
/// what an approval binds: only what a test changes stands in the way.
fn tee_held_logs_unbound(w: &World) -> std::path::PathBuf {
    std::fs::create_dir_all(w.ws.join("logs")).unwrap();
    w.policy(
        "require_approval_for = [{ prefix = \"tee\", preview = false }]\ndefault = \"allow\"\nfingerprint_ignore = [\"logs\"]\n",
    )
}
