//! Approving effects, not just words: a held command runs once in an overlay,
//! the human sees what it changed, and resume lands exactly that — without
//! running it again. Judged from the host.

mod common;
use common::*;
use std::process::Output;

const POLICY: &str = "require_approval_for = [\"sed\", \"head\"]\ndefault = \"allow\"\n";
const SCRIPT: &str =
    "sed -i s/two/CHANGED/ notes.txt && head -c 32 /dev/urandom > rnd.bin && echo run >> runs.log && echo done";

fn hold(w: &World, policy: &str) -> (String, Output) {
    w.write("notes.txt", "one\ntwo\n");
    let p = w.policy(policy);
    let o = w.tx(&["run", "--policy", p.to_str().unwrap(), "-c", SCRIPT]);
    assert_eq!(o.status.code(), Some(75), "{}", text(&o));
    let id = held_id(&String::from_utf8_lossy(&o.stderr));
    (id, o)
}

fn preview_dir(w: &World, id: &str) -> std::path::PathBuf {
    let v: serde_json::Value = serde_json::from_slice(&w.tx(&["show", id, "--json"]).stdout).unwrap();
    std::path::PathBuf::from(v["context"]["preview"]["dir"].as_str().expect("a preview"))
}

#[test]
fn what_lands_is_byte_for_byte_what_was_previewed_and_it_ran_once() {
    let w = World::new();
    let (id, o) = hold(&w, POLICY);
    assert!(String::from_utf8_lossy(&o.stderr).contains("A preview of its effects exists"));
    assert_eq!(
        std::fs::read_to_string(w.ws.join("notes.txt")).unwrap(),
        "one\ntwo\n",
        "nothing landed at hold"
    );
    assert!(!exists(&w.ws.join("rnd.bin")));
    let shown = stdout(&w.tx(&["show", &id]));
    assert!(
        shown.contains("-two") && shown.contains("+CHANGED"),
        "show has the diff:\n{shown}"
    );
    assert!(shown.contains("rnd.bin (32 bytes, binary)"), "{shown}");
    let previewed = std::fs::read(preview_dir(&w, &id).join("upper/rnd.bin")).unwrap();
    assert!(w.tx(&["approve", &id]).status.success());
    let o = w.tx(&["resume", &id]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(stdout(&o), "done\n", "the recorded output is replayed");
    assert_eq!(
        std::fs::read(w.ws.join("rnd.bin")).unwrap(),
        previewed,
        "random bytes: it did not run again"
    );
    assert_eq!(
        std::fs::read_to_string(w.ws.join("notes.txt")).unwrap(),
        "one\nCHANGED\n"
    );
    assert_eq!(
        std::fs::read_to_string(w.ws.join("runs.log")).unwrap(),
        "run\n",
        "one run overall"
    );
    assert!(!preview_dir_exists(&w), "the preview is gone once it landed");
    let again = w.tx(&["resume", &id]);
    assert!(text(&again).contains("already ran"));
    assert_eq!(std::fs::read_to_string(w.ws.join("runs.log")).unwrap(), "run\n");
}

fn preview_dir_exists(w: &World) -> bool {
    std::fs::read_dir(w.state.join("previews"))
        .map(|mut d| d.next().is_some())
        .unwrap_or(false)
}

#[test]
fn a_stale_preview_is_refused() {
    let w = World::new();
    let (id, _) = hold(&w, POLICY);
    assert!(w.tx(&["approve", &id]).status.success());
    w.write("other.txt", "the workspace moved on");
    let o = w.tx(&["resume", &id]);
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(text(&o).contains("workspace"), "{}", text(&o));
    assert!(!exists(&w.ws.join("rnd.bin")) && !exists(&w.ws.join("runs.log")));
}

#[test]
fn a_tampered_preview_is_refused() {
    let w = World::new();
    let (id, _) = hold(&w, POLICY);
    assert!(w.tx(&["approve", &id]).status.success());
    std::fs::write(preview_dir(&w, &id).join("upper/rnd.bin"), b"swapped after approval").unwrap();
    let o = w.tx(&["resume", &id]);
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(!exists(&w.ws.join("rnd.bin")));
}

#[test]
fn a_rejected_preview_leaves_nothing() {
    let w = World::new();
    let (id, _) = hold(&w, POLICY);
    assert!(w.tx(&["reject", &id, "--reason", "no"]).status.success());
    assert!(!preview_dir_exists(&w), "the capture is discarded");
    let o = w.tx(&["resume", &id]);
    assert_eq!(o.status.code(), Some(77));
    assert!(!exists(&w.ws.join("rnd.bin")) && !exists(&w.ws.join("runs.log")));
    assert_eq!(std::fs::read_to_string(w.ws.join("notes.txt")).unwrap(), "one\ntwo\n");
}

#[test]
fn show_says_why_there_is_no_preview() {
    for (policy, why) in [
        (format!("{POLICY}network = true\n"), "network"),
        (
            "require_approval_for = [{ prefix = \"sed\", preview = false }, \"head\"]\ndefault = \"allow\"\n"
                .to_string(),
            "preview = false",
        ),
    ] {
        let w = World::new();
        let (id, o) = hold(&w, &policy);
        assert!(
            !String::from_utf8_lossy(&o.stderr).contains("A preview"),
            "{}",
            text(&o)
        );
        let shown = stdout(&w.tx(&["show", &id]));
        assert!(shown.contains("preview:     none") && shown.contains(why), "{shown}");
        // Without a preview, resume runs the command, once.
        assert!(w.tx(&["approve", &id]).status.success());
        assert!(w.tx(&["resume", &id]).status.success());
        assert_eq!(std::fs::read_to_string(w.ws.join("runs.log")).unwrap(), "run\n");
    }
}

#[test]
fn a_missing_submodule_checkout_does_not_stale_a_held_action() {
    // Preparing a writable run makes a missing gitlink checkout (empty, to be
    // read-only): resume compares the workspace before it does so, or every
    // approval there would read as stale.
    let w = World::new();
    host_git(&w, &["init", "-q"]);
    host_git(
        &w,
        &[
            "update-index",
            "--add",
            "--cacheinfo",
            "160000,1111111111111111111111111111111111111111,deps/gone",
        ],
    );
    let (id, _) = hold(&w, POLICY);
    assert!(w.tx(&["approve", &id]).status.success());
    let o = w.tx(&["resume", &id]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(
        std::fs::read_to_string(w.ws.join("notes.txt")).unwrap(),
        "one\nCHANGED\n"
    );
}

/// A resume killed while landing its preview (after the journal, midway, or
/// after the last step but before the result is on record) leaves a
/// half-landed workspace that no fresh approval could match. The next resume
/// finishes the landing from the journal and records the result: everything
/// the preview held is in place, nothing ran again, and it never lands twice.
#[test]
fn a_landing_killed_midway_is_finished_by_the_next_resume_and_the_command_never_runs_again() {
    for at in ["after-journal", "mid-commit", "after-landing"] {
        let w = World::new();
        let (id, _) = hold(&w, POLICY);
        let previewed = std::fs::read(preview_dir(&w, &id).join("upper/rnd.bin")).unwrap();
        assert!(w.tx(&["approve", &id]).status.success());
        let killed = w
            .command(&["resume", &id])
            .env("TETHER_EXEC_APPROVER_KEY", w.outside.join("approver.key"))
            .env("TETHER_EXEC_TEST_CRASH_AT", at)
            .output()
            .unwrap();
        assert_eq!(killed.status.code(), None, "{at}: the launcher died: {}", text(&killed));
        // Control: the kill left the landing unfinished (the workspace not
        // wholly landed, or the result not on record).
        let landed = |w: &World| {
            std::fs::read_to_string(w.ws.join("notes.txt")).unwrap() == "one\nCHANGED\n"
                && std::fs::read(w.ws.join("rnd.bin")).ok().as_deref() == Some(&previewed[..])
                && std::fs::read_to_string(w.ws.join("runs.log")).ok().as_deref() == Some("run\n")
        };
        let state = |w: &World| {
            let v: serde_json::Value = serde_json::from_slice(&w.tx(&["show", &id, "--json"]).stdout).unwrap();
            v["action"]["state"].as_str().unwrap_or_default().to_string()
        };
        assert!(
            !landed(&w) || state(&w) != "done",
            "{at}: the kill left something to finish"
        );
        let o = w.tx(&["resume", &id]);
        assert_eq!(o.status.code(), Some(0), "{at}: {}", text(&o));
        assert!(text(&o).contains("finished landing"), "{at}: {}", text(&o));
        assert_eq!(stdout(&o), "done\n", "{at}: the preview's output is replayed");
        assert!(landed(&w), "{at}: everything the preview held landed");
        assert_eq!(state(&w), "done", "{at}");
        assert!(!preview_dir_exists(&w), "{at}: the preview is gone once it landed");
        let again = w.tx(&["resume", &id]);
        assert!(text(&again).contains("already ran"), "{at}: {}", text(&again));
        assert_eq!(
            std::fs::read_to_string(w.ws.join("runs.log")).unwrap(),
            "run\n",
            "{at}: one run overall"
        );
    }
}

/// The same interruption, followed by another command instead of a resume:
/// any start finishes the landing first, so the agent's next command never
/// sees a half-landed workspace; the action is then done.
#[test]
fn any_next_start_finishes_a_landing_killed_midway() {
    let w = World::new();
    let (id, _) = hold(&w, POLICY);
    assert!(w.tx(&["approve", &id]).status.success());
    let killed = w
        .command(&["resume", &id])
        .env("TETHER_EXEC_APPROVER_KEY", w.outside.join("approver.key"))
        .env("TETHER_EXEC_TEST_CRASH_AT", "mid-commit")
        .output()
        .unwrap();
    assert_eq!(killed.status.code(), None, "the launcher died: {}", text(&killed));
    let notes = || std::fs::read_to_string(w.ws.join("notes.txt")).unwrap();
    let logged = || std::fs::read_to_string(w.ws.join("runs.log")).ok();
    // Control: half landed.
    assert!(
        notes() != "one\nCHANGED\n" || !exists(&w.ws.join("rnd.bin")) || logged().is_none(),
        "the kill left the landing unfinished"
    );
    let o = w.tx(&["run", "--", "cat", "notes.txt", "runs.log"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(stdout(&o), "one\nCHANGED\nrun\n", "the command saw the whole landing");
    assert!(text(&o).contains("finished landing"), "{}", text(&o));
    assert!(exists(&w.ws.join("rnd.bin")));
    assert!(!preview_dir_exists(&w));
    let again = w.tx(&["resume", &id]);
    assert_eq!(again.status.code(), Some(0), "{}", text(&again));
    assert!(text(&again).contains("already ran"), "{}", text(&again));
    assert_eq!(logged().as_deref(), Some("run\n"), "one run overall");
}
