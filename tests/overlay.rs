//! The overlay workspace (globs the kernel cannot express as trees): every write
//! is captured, checked, then lands atomically or not at all. Judged from the host.

mod common;
use common::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::{Command, Stdio};
use std::time::Duration;

const MD: &str = "writable_globs = [\"**/*.md\"]\n";

fn world() -> World {
    let w = World::new();
    w.write("docs/a.md", "old\n");
    w.write("src/x.rs", "code\n");
    w
}

#[test]
fn one_bad_write_means_nothing_lands() {
    let w = world();
    let o = w.run_policy(
        MD,
        "printf new > docs/b.md; cp src/x.rs src/y.rs; echo more >> docs/a.md",
    );
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(
        text(&o).contains("src/y.rs"),
        "the offending path is named: {}",
        text(&o)
    );
    assert!(
        !exists(&w.ws.join("docs/b.md")) && !exists(&w.ws.join("src/y.rs")),
        "{}",
        text(&o)
    );
    assert_eq!(std::fs::read_to_string(w.ws.join("docs/a.md")).unwrap(), "old\n");
    // Control: unconfined, all of it lands.
    w.control("printf new > docs/b.md; cp src/x.rs src/y.rs");
    assert!(exists(&w.ws.join("src/y.rs")));
}

#[test]
fn allowed_changes_land_and_are_listed() {
    let w = world();
    w.write("docs/old.md", "bye\n");
    let r = w.outside.join("r.json");
    let o = w.run_with(
        &[
            "--policy",
            w.policy(MD).to_str().unwrap(),
            "--receipt",
            r.to_str().unwrap(),
        ],
        "cp docs/a.md docs/b.md; echo new >> docs/a.md; mkdir -p notes && echo n > notes/c.md; rm docs/old.md",
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(w.ws.join("docs/a.md")).unwrap(), "old\nnew\n");
    assert!(exists(&w.ws.join("docs/b.md")) && exists(&w.ws.join("notes/c.md")) && !exists(&w.ws.join("docs/old.md")));
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&r).unwrap()).unwrap();
    assert_eq!(v["changes"]["modified"], serde_json::json!(["docs/a.md"]));
    assert_eq!(v["changes"]["deleted"], serde_json::json!(["docs/old.md"]));
    assert!(v["changes"]["added"]
        .as_array()
        .unwrap()
        .contains(&serde_json::json!("notes/c.md")));
    assert!(
        std::fs::read_dir(w.state.join("overlays")).unwrap().next().is_none(),
        "the capture is cleaned up"
    );
}

#[test]
fn drop_mode_lands_the_allowed_part() {
    let w = world();
    let o = w.run_policy(
        &format!("{MD}on_violation = \"drop\"\n"),
        "printf new > docs/b.md; cp src/x.rs src/y.rs",
    );
    assert!(
        text(&o).contains("discarded") && text(&o).contains("src/y.rs"),
        "{}",
        text(&o)
    );
    assert!(exists(&w.ws.join("docs/b.md")) && !exists(&w.ws.join("src/y.rs")));
}

#[test]
fn protected_paths_under_the_overlay_never_land() {
    let w = world();
    let o = w.run_policy(
        "writable_globs = [\"**/*\"]\n",
        "mkdir -p .git/hooks && printf evil | tee .git/hooks/pre-commit; printf x | tee .env",
    );
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(
        !exists(&w.ws.join(".git")) && !exists(&w.ws.join(".env")),
        "{}",
        text(&o)
    );
    assert!(text(&o).contains("protected"), "{}", text(&o));
}

#[test]
fn symlinks_modes_empty_dirs_hard_links_and_odd_names_survive() {
    let w = world();
    let o = w.run_policy(
        "writable_globs = [\"**/*\"]\n",
        "ln -s /etc/passwd docs/link.md; printf '#!/bin/sh\\n' > docs/run.sh && chmod 750 docs/run.sh; \
         mkdir docs/empty; ln docs/a.md docs/hard.md; printf x > $'docs/new\\nline.md'",
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        std::fs::read_link(w.ws.join("docs/link.md")).unwrap(),
        std::path::Path::new("/etc/passwd"),
        "kept as a symlink"
    );
    assert_eq!(
        std::fs::metadata(w.ws.join("docs/run.sh"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o750
    );
    assert!(w.ws.join("docs/empty").is_dir());
    assert!(exists(&w.ws.join("docs/new\nline.md")));
    let (a, h) = (
        std::fs::metadata(w.ws.join("docs/a.md")).unwrap(),
        std::fs::metadata(w.ws.join("docs/hard.md")).unwrap(),
    );
    assert_eq!(std::fs::read_to_string(w.ws.join("docs/hard.md")).unwrap(), "old\n");
    // The overlay copies a file up before linking it, so the landed pair shares an inode.
    assert_eq!(a.ino(), h.ino(), "hard link kept");
}

fn run_crashing(w: &World, at: &str, script: &str) -> std::process::Output {
    Command::new(bin())
        .arg("--state-dir")
        .arg(&w.state)
        .args(["run", "--policy", w.policy(MD).to_str().unwrap(), "-c", script])
        .current_dir(&w.ws)
        .env("TETHER_EXEC_TEST_CRASH_AT", at)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn a_commit_killed_after_its_journal_is_finished_by_the_next_start() {
    for point in ["after-journal", "mid-commit"] {
        let w = world();
        let o = run_crashing(
            &w,
            point,
            "printf 1 > docs/one.md; printf 2 > docs/two.md; rm docs/a.md",
        );
        assert!(!o.status.success(), "{point}: the launcher was meant to die");
        // Whatever state it died in, the next start completes the commit.
        let n = w.run("true");
        assert!(n.status.success(), "{}", text(&n));
        assert!(
            text(&n).contains("finished an interrupted commit"),
            "{point}: {}",
            text(&n)
        );
        assert_eq!(
            std::fs::read_to_string(w.ws.join("docs/one.md")).unwrap(),
            "1",
            "{point}"
        );
        assert_eq!(
            std::fs::read_to_string(w.ws.join("docs/two.md")).unwrap(),
            "2",
            "{point}"
        );
        assert!(!exists(&w.ws.join("docs/a.md")), "{point}");
        let leftovers: Vec<_> = std::fs::read_dir(&w.ws)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert!(
            !leftovers
                .iter()
                .any(|n| n.to_string_lossy().starts_with(".tether-exec-trash")),
            "{point}: {leftovers:?}"
        );
    }
}

#[test]
fn a_run_killed_before_its_commit_lands_nothing() {
    let w = world();
    let policy = w.policy(MD);
    let mut child = w
        .command(&[
            "run",
            "--policy",
            policy.to_str().unwrap(),
            "-c",
            "printf x > docs/q.md; sleep 30",
        ])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    child.kill().unwrap();
    let _ = child.wait();
    let n = w.run("true");
    assert!(text(&n).contains("discarded the capture"), "{}", text(&n));
    assert!(!exists(&w.ws.join("docs/q.md")));
    assert!(std::fs::read_dir(w.state.join("overlays")).unwrap().next().is_none());
}

#[test]
fn the_humans_concurrent_change_wins() {
    let w = world();
    let policy = w.policy(MD);
    let child = w
        .command(&[
            "run",
            "--policy",
            policy.to_str().unwrap(),
            "-c",
            "sleep 1; printf agent > docs/a.md; printf b > docs/b.md",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(w.ws.join("docs/a.md"), "human\n").unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(77), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read_to_string(w.ws.join("docs/a.md")).unwrap(), "human\n");
    assert!(String::from_utf8_lossy(&o.stderr).contains("docs/a.md"));
    assert!(exists(&w.ws.join("docs/b.md")), "the run's other change landed");
}

#[test]
fn invalid_utf8_names_and_moved_directories_land() {
    let w = world();
    w.write("docs/sub/inner.md", "in\n");
    // A name that is not UTF-8 (made by a program: the gate asks about $'\xff' redirects),
    // and `mv` of a directory that existed before the run (EXDEV inside the overlay: mv copies).
    let script = format!("{PY} -c \"open(b'docs/\\\\xff.md', 'wb').write(b'x')\"; mv docs/sub docs/moved");
    let o = w.run_policy("writable_globs = [\"**/*\"]\n", &script);
    assert!(o.status.success(), "{}", text(&o));
    use std::os::unix::ffi::OsStrExt;
    let names: Vec<Vec<u8>> = std::fs::read_dir(w.ws.join("docs"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().as_bytes().to_vec())
        .collect();
    assert!(names.contains(&b"\xff.md".to_vec()), "{names:?}");
    assert_eq!(
        std::fs::read_to_string(w.ws.join("docs/moved/inner.md")).unwrap(),
        "in\n"
    );
    assert!(!exists(&w.ws.join("docs/sub")));
}

#[test]
fn captures_live_on_the_workspaces_filesystem_so_landing_is_a_rename() {
    // The state directory (under /tmp) and this workspace (under /dev/shm, a
    // tmpfs) are on different filesystems: the capture goes beside the
    // workspace, and what the run wrote lands by rename (same inode).
    let w = World::new();
    let shm = tempfile::Builder::new()
        .prefix("tether-test-")
        .tempdir_in("/dev/shm")
        .unwrap();
    let ws = shm.path().join("ws");
    std::fs::create_dir_all(ws.join("docs")).unwrap();
    let dev = |p: &std::path::Path| std::fs::metadata(p).unwrap().dev();
    assert_ne!(dev(&ws), dev(&w.state), "the test needs two filesystems");
    let policy = w.policy(MD);
    let run = |script: &str, crash: Option<&str>| {
        let mut c = Command::new(bin());
        c.arg("--state-dir")
            .arg(&w.state)
            .args(["run", "--policy", policy.to_str().unwrap(), "-c", script])
            .current_dir(&ws)
            .stdin(Stdio::null());
        if let Some(at) = crash {
            c.env("TETHER_EXEC_TEST_CRASH_AT", at);
        }
        c.output().unwrap()
    };
    // Two files, so the commit goes through its journal (one file is a single rename).
    let o = run(
        "printf 1 > docs/one.md; printf 3 > docs/three.md",
        Some("after-journal"),
    );
    assert!(!o.status.success(), "the launcher was meant to die: {}", text(&o));
    let captures = shm.path().join(".tether-exec-captures");
    assert_eq!(
        std::fs::metadata(&captures).unwrap().permissions().mode() & 0o777,
        0o700
    );
    let capture = std::fs::read_dir(&captures).unwrap().flatten().next().unwrap().path();
    let written = std::fs::metadata(capture.join("upper/docs/one.md")).unwrap().ino();
    let link = std::fs::read_dir(w.state.join("overlays"))
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path();
    assert_eq!(
        std::fs::read_link(&link).unwrap(),
        capture,
        "recovery finds it through the state directory"
    );
    // The next start finishes the commit, through the link.
    let n = run("true", None);
    assert!(text(&n).contains("finished an interrupted commit"), "{}", text(&n));
    assert_eq!(std::fs::read_to_string(ws.join("docs/one.md")).unwrap(), "1");
    assert_eq!(std::fs::read_to_string(ws.join("docs/three.md")).unwrap(), "3");
    assert_eq!(
        std::fs::metadata(ws.join("docs/one.md")).unwrap().ino(),
        written,
        "landed by rename, not copied"
    );
    assert_eq!(std::fs::read_dir(&captures).unwrap().count(), 0, "capture removed");
    assert_eq!(
        std::fs::read_dir(w.state.join("overlays")).unwrap().count(),
        0,
        "link removed"
    );
    // An ordinary run leaves nothing behind either.
    let o = run("printf 2 > docs/two.md", None);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(ws.join("docs/two.md")).unwrap(), "2");
    assert_eq!(std::fs::read_dir(&captures).unwrap().count(), 0);
    assert_eq!(std::fs::read_dir(w.state.join("overlays")).unwrap().count(), 0);
}

#[test]
fn a_one_file_commit_is_a_single_rename_and_needs_no_journal() {
    // Killed right after the rename: the change is in place, the next start
    // has nothing to finish, and nothing is left behind. Killed by the same
    // hook with two files, the journal is there and the next start finishes it.
    let w = world();
    w.write("docs/a.md", "old\n");
    let o = run_crashing(&w, "after-single-rename", "printf new > docs/a.md");
    assert!(!o.status.success(), "the launcher was meant to die: {}", text(&o));
    assert_eq!(std::fs::read_to_string(w.ws.join("docs/a.md")).unwrap(), "new");
    let n = w.run("true");
    assert!(n.status.success(), "{}", text(&n));
    assert!(!text(&n).contains("interrupted commit"), "{}", text(&n));
    assert!(text(&n).contains("no commit of it was pending"), "{}", text(&n));
    assert_eq!(std::fs::read_dir(w.state.join("overlays")).unwrap().count(), 0);
    let leftovers = names_containing(&w.ws, ".tether-exec");
    assert!(leftovers.is_empty(), "{leftovers:?}");
    // The hook is only on the single-rename path: two files never reach it.
    let o = run_crashing(
        &w,
        "after-single-rename",
        "printf 1 > docs/one.md; printf 2 > docs/two.md",
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(w.ws.join("docs/two.md")).unwrap(), "2");
}

#[test]
fn overlay_true_keeps_protected_paths_that_do_not_exist_yet_from_ever_appearing() {
    // `overlay = true` captures every write even without globs: a protected
    // path the run creates never exists in the real workspace, not even
    // while the run goes on, and the whole run is all-or-nothing.
    let w = world();
    // `tee`, not a redirect: the gate refuses redirects into protected paths.
    let script = "echo fine > notes.txt; mkdir -p .tether && echo x | tee .tether/planted >/dev/null; sleep 1";
    let during = |toml: &str| {
        let p = w.policy(toml);
        let child = Command::new(bin())
            .arg("--state-dir")
            .arg(&w.state)
            .args(["run", "--policy", p.to_str().unwrap(), "-c", script])
            .current_dir(&w.ws)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(600));
        let seen = exists(&w.ws.join(".tether/planted"));
        (seen, child.wait_with_output().unwrap())
    };
    let (seen, o) = during("overlay = true\n");
    assert!(!seen, "the planted file appeared in the workspace during the run");
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(text(&o).contains(".tether"), "{}", text(&o));
    assert!(
        !exists(&w.ws.join(".tether")) && !exists(&w.ws.join("notes.txt")),
        "nothing lands"
    );
    // Bind mode keeps it from appearing too: the create guard refuses to
    // make it (the command sees EPERM), and the rest of the run stays.
    let (seen, o) = during("profile = \"workspace-write\"\n");
    assert!(!seen, "the planted file appeared in bind mode: {}", text(&o));
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(!exists(&w.ws.join(".tether")), "{}", text(&o));
    assert!(exists(&w.ws.join("notes.txt")), "{}", text(&o));
    // Control: without the sandbox the file is made.
    let c = w.control(script);
    assert!(exists(&w.ws.join(".tether/planted")), "control: {}", text(&c));
}

#[test]
fn captures_never_go_where_someone_else_could_swap_them() {
    // A workspace whose parent anyone may write into (no sticky bit): a
    // capture beside it could be moved away and replaced, so it stays in
    // the state directory (and lands by copy across filesystems).
    let w = World::new();
    let shm = tempfile::Builder::new()
        .prefix("tether-test-")
        .tempdir_in("/dev/shm")
        .unwrap();
    let open = shm.path().join("shared");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let ws = open.join("ws");
    std::fs::create_dir_all(ws.join("docs")).unwrap();
    let policy = w.policy(MD);
    let o = Command::new(bin())
        .arg("--state-dir")
        .arg(&w.state)
        .args([
            "run",
            "--policy",
            policy.to_str().unwrap(),
            "-c",
            "printf 1 > docs/one.md",
        ])
        .current_dir(&ws)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(ws.join("docs/one.md")).unwrap(), "1");
    assert!(
        !exists(&open.join(".tether-exec-captures")),
        "no capture beside a shared parent"
    );
}

#[test]
fn a_journal_naming_a_path_outside_the_workspace_is_not_applied() {
    let w = world();
    // An interrupted capture (its launcher is long gone) whose journal was
    // tampered with to move a file out of the workspace.
    let capture = w.state.join("overlays").join("99999999-1");
    std::fs::create_dir_all(capture.join("upper")).unwrap();
    std::fs::write(capture.join("lock"), "").unwrap();
    std::fs::write(capture.join("escaped.txt"), "x").unwrap();
    let rel: Vec<u8> = b"../escaped.txt".to_vec();
    let journal = serde_json::json!({ "workspace": w.ws, "ops": [ { "Move": rel } ] });
    std::fs::write(capture.join("journal.json"), journal.to_string()).unwrap();
    let o = w.run("true");
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("outside the workspace"), "{}", text(&o));
    assert!(
        !exists(&w.ws.parent().unwrap().join("escaped.txt")),
        "nothing left the workspace"
    );
    assert!(
        exists(&capture.join("escaped.txt")),
        "the capture is kept for a human to look at"
    );
}

#[test]
fn landing_never_follows_a_directory_swapped_for_a_symlink() {
    // Another run in the same workspace can swap a directory for a symlink
    // to anywhere while this one lands its capture (as root, perhaps): every
    // step resolves its directory beneath the workspace without following
    // a symlink. The landing is paused after its first step, the swap made,
    // and nothing may arrive at the symlink's target.
    let w = World::new();
    std::fs::create_dir_all(w.ws.join("sub")).unwrap();
    let target = w.outside.join("target");
    std::fs::create_dir_all(&target).unwrap();
    let (child, pause) = spawn_paused(
        &w,
        "mid-commit",
        "echo a > sub/a; echo b > sub/b; echo c > sub/c; echo d > sub/d",
    );
    assert!(exists(&pause), "the landing never paused");
    std::fs::rename(w.ws.join("sub"), w.ws.join("sub-real")).unwrap();
    std::os::unix::fs::symlink(&target, w.ws.join("sub")).unwrap();
    std::fs::remove_file(&pause).unwrap();
    let o = child.wait_with_output().unwrap();
    let arrived: Vec<_> = std::fs::read_dir(&target)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(
        arrived.is_empty(),
        "landed outside the workspace: {arrived:?}\n{}",
        text(&o)
    );
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    // Control: a rename by path goes through the symlink.
    let f = w.ws.join("loose");
    std::fs::write(&f, "x").unwrap();
    std::fs::rename(&f, w.ws.join("sub/loose")).unwrap();
    assert!(exists(&target.join("loose")), "control");
}

#[test]
fn a_git_commit_killed_midway_leaves_a_repository_git_can_read() {
    // The capture of a git directory lands its objects before the index and
    // refs that name them: killed after any step, the repository on the host
    // is whole (git fsck), before the next start finishes the commit.
    let w = World::new();
    let git = |args: &[&str]| host_git(&w, args);
    git(&["init", "-q"]);
    w.write("a.txt", "a\n");
    git(&["add", "a.txt"]);
    git(&["commit", "-qm", "one"]);
    let steps: Vec<String> = (1..12).map(|i| format!("before-step-{i}")).collect();
    for at in steps.iter().map(String::as_str).chain(["after-journal"]) {
        let o = w
            .command(&[
                "run",
                "-c",
                "echo more >> a.txt && git add a.txt && git -c user.email=t@t -c user.name=t commit -qm more",
            ])
            .env("TETHER_EXEC_TEST_CRASH_AT", at)
            .output()
            .unwrap();
        // (A commit of fewer steps is not killed: it simply lands.)
        let _ = o;
        git(&["fsck", "--no-dangling"]);
        // The next start finishes the commit.
        assert!(w.run("true").status.success());
        git(&["fsck", "--no-dangling"]);
    }
    assert_eq!(git(&["log", "--format=%s"]).lines().count(), 13);
}

#[test]
fn a_submodule_commit_killed_midway_leaves_it_readable() {
    // The same order for a submodule's git directory inside `.git/modules`.
    let w = World::new();
    let src = w.outside.join("subsrc");
    std::fs::create_dir_all(&src).unwrap();
    git_in(&src, &["init", "-q"]);
    std::fs::write(src.join("s.txt"), "s\n").unwrap();
    git_in(&src, &["add", "s.txt"]);
    git_in(&src, &["commit", "-qm", "s"]);
    host_git(&w, &["init", "-q"]);
    git_in(&w.ws, &["submodule", "add", "-q", src.to_str().unwrap(), "sub"]);
    host_git(&w, &["commit", "-qm", "with sub"]);
    for i in 1..12 {
        let o = w
            .command(&[
                "run",
                "-c",
                "cd sub && echo more >> s.txt && git add s.txt && git -c user.email=t@t -c user.name=t commit -qm more",
            ])
            .env("TETHER_EXEC_TEST_CRASH_AT", format!("before-step-{i}"))
            .output()
            .unwrap();
        let _ = o;
        git_in(&w.ws.join("sub"), &["fsck", "--no-dangling"]);
        assert!(w.run("true").status.success());
        git_in(&w.ws.join("sub"), &["fsck", "--no-dangling"]);
    }
}

#[test]
fn a_signal_after_the_run_does_not_stop_the_landing() {
    // A SIGTERM to the launcher once the command has ended (a harness giving
    // up) must not stop it halfway through landing, nor before the check of
    // the protected paths that follows: the commit completes.
    let w = World::new();
    std::fs::create_dir_all(w.ws.join("sub")).unwrap();
    let (child, pause) = spawn_paused(&w, "after-journal", "echo a > sub/a; echo b > sub/b; echo c > sub/c");
    assert!(exists(&pause), "the landing never paused");
    // SAFETY: kill of our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    std::thread::sleep(Duration::from_millis(50));
    std::fs::remove_file(&pause).unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "the launcher finished its work: {}", text(&o));
    for f in ["a", "b", "c"] {
        assert!(exists(&w.ws.join("sub").join(f)), "{f} landed: {}", text(&o));
    }
}

#[test]
fn removals_land_in_a_bind_mounted_workspace() {
    // A workspace reached through a bind mount (a container's) is on the
    // state directory's device but on another mount, which rename does not
    // cross: removals then go to a trash in the workspace. Needs a mount
    // namespace of its own, so root only.
    if !is_root() {
        eprintln!("not root: no mount namespace to bind the workspace in");
        return;
    }
    let w = World::new();
    let src = w.root.path().join("src");
    let mnt = w.root.path().join("mnt");
    std::fs::create_dir_all(src.join("ws/sub")).unwrap();
    std::fs::create_dir_all(&mnt).unwrap();
    std::fs::write(src.join("ws/sub/old.txt"), "old\n").unwrap();
    let p = w.policy("profile = \"workspace-write\"\noverlay = true\n");
    let inner = format!(
        "mount --bind {src} {mnt} && cd {mnt}/ws && exec {bin} --state-dir {state} run --policy {p} -c 'rm sub/old.txt; echo new > sub/new.txt'",
        src = src.display(),
        mnt = mnt.display(),
        bin = bin().display(),
        state = w.state.display(),
        p = p.display()
    );
    let o = Command::new("unshare")
        .args(["-m", "sh", "-c", &inner])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        !exists(&src.join("ws/sub/old.txt")),
        "the removal did not land: {}",
        text(&o)
    );
    assert_eq!(std::fs::read_to_string(src.join("ws/sub/new.txt")).unwrap(), "new\n");
}

/// Starts `script` in an overlay run whose landing pauses at `at` (a debug
/// build's test hook) and returns once it has paused; removing the returned
/// file lets it go on.
fn spawn_paused(w: &World, at: &str, script: &str) -> (std::process::Child, std::path::PathBuf) {
    let pause = w.root.path().join("paused");
    let p = w.policy("profile = \"workspace-write\"\noverlay = true\n");
    let child = Command::new(bin())
        .arg("--state-dir")
        .arg(&w.state)
        .args(["run", "--policy", p.to_str().unwrap(), "-c", script])
        .current_dir(&w.ws)
        .env("TETHER_EXEC_TEST_PAUSE_AT", at)
        .env("TETHER_EXEC_TEST_PAUSE_FILE", &pause)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(&pause);
    (child, pause)
}

/// With a umask of 000 and a state directory others may enter, another user
/// cannot put a file into a running capture's upper layer (it would land in
/// the workspace as the run's own): the capture directory is the launcher's
/// alone. Control: the same capture opened up lets the planted file land.
#[test]
fn another_user_cannot_plant_files_in_a_running_capture() {
    if !is_root() {
        eprintln!("not root: planting as another user needs setpriv as root");
        return;
    }
    use std::os::unix::process::CommandExt;
    let w = world();
    for d in [w.root.path(), w.state.as_path()] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let p = w.policy(MD);
    let attempt = |open_up: bool| {
        let mut cmd = w.command(&[
            "run",
            "--policy",
            p.to_str().unwrap(),
            "-c",
            "sleep 2; echo run > docs/run.md",
        ]);
        // SAFETY: umask is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                libc::umask(0);
                Ok(())
            })
        };
        let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let overlays = w.state.join("overlays");
        let start = std::time::Instant::now();
        let capture = loop {
            let found = std::fs::read_dir(&overlays)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path())
                .find(|c| c.join("upper").is_dir());
            if let Some(c) = found {
                break c;
            }
            assert!(start.elapsed() < Duration::from_secs(10), "no capture appeared");
            std::thread::sleep(Duration::from_millis(20));
        };
        let mode = std::fs::metadata(&capture).unwrap().mode() & 0o777;
        if open_up {
            std::fs::set_permissions(&capture, std::fs::Permissions::from_mode(0o755)).unwrap();
            std::fs::set_permissions(capture.join("upper"), std::fs::Permissions::from_mode(0o777)).unwrap();
            std::fs::create_dir_all(capture.join("upper/docs")).unwrap();
            std::fs::set_permissions(capture.join("upper/docs"), std::fs::Permissions::from_mode(0o777)).unwrap();
        }
        let planted = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "sh", "-c"])
            .arg(format!(
                "mkdir -p {0}/upper/docs; echo planted > {0}/upper/docs/planted.md",
                capture.display()
            ))
            .output()
            .unwrap();
        let o = child.wait_with_output().unwrap();
        (mode, planted.status.success(), o)
    };
    let (mode, planted, o) = attempt(false);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(mode & 0o077, 0, "the capture directory is {mode:o}");
    assert!(!planted, "another user wrote into the capture");
    assert!(!exists(&w.ws.join("docs/planted.md")), "a planted file landed");
    assert!(exists(&w.ws.join("docs/run.md")));
    // Control: opened up, the capture takes the other user's file, and it lands.
    let (_, planted, o) = attempt(true);
    assert!(planted, "control: the plant failed: {}", text(&o));
    assert!(
        exists(&w.ws.join("docs/planted.md")),
        "control: nothing landed: {}",
        text(&o)
    );
}

/// Entries of a directory of the state directory (none if it is not there).
fn entries(w: &World, dir: &str) -> Vec<String> {
    std::fs::read_dir(w.state.join(dir)).map_or_else(
        |_| Vec::new(),
        |d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        },
    )
}

/// A run in a repository keeps its capture's empty skeleton as a spare,
/// which the next capture takes; a whole-workspace overlay's skeleton and a
/// preview's (their upper and work directories are the overlay's own, which
/// may still be mounted) are never kept. No capture is left behind.
#[test]
fn only_skeletons_no_overlay_used_as_its_own_become_spares() {
    let w = world();
    host_git(&w, &["init", "-q"]);
    let o = w.run("git status --short >/dev/null");
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        entries(&w, "spare-captures").len(),
        1,
        "the repository run's skeleton is kept"
    );
    assert!(entries(&w, "overlays").is_empty(), "no capture left behind");
    let o = w.run("git status --short >/dev/null");
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(entries(&w, "spare-captures").len(), 1, "taken and put back");

    let o = w.run_policy("overlay = true", "echo x > docs/new.md");
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(w.ws.join("docs/new.md")).unwrap(), "x\n");
    assert!(
        entries(&w, "spare-captures").is_empty(),
        "a whole-workspace overlay took the spare and did not put its own skeleton back"
    );
    assert!(entries(&w, "overlays").is_empty(), "no capture left behind");

    let o = w.run("git status --short >/dev/null");
    assert!(o.status.success(), "{}", text(&o));
    let held = w.run_policy("require_approval_for = [\"touch\"]\ndefault = \"allow\"", "touch held");
    assert_eq!(held.status.code(), Some(75), "{}", text(&held));
    assert!(entries(&w, "spare-captures").is_empty(), "the preview took the spare");
    let id = held_id(&String::from_utf8_lossy(&held.stderr));
    let approve = w.tx(&["approve", &id]);
    assert!(approve.status.success(), "{}", text(&approve));
    let resume = w.tx(&["resume", &id]);
    assert!(resume.status.success(), "{}", text(&resume));
    assert!(exists(&w.ws.join("held")));
    // The landed preview is removed by a child of the launcher once the
    // result is out.
    assert!(eventually(|| entries(&w, "previews").is_empty()));
    assert!(
        entries(&w, "spare-captures").is_empty(),
        "the preview's skeleton is not kept"
    );
    assert!(entries(&w, "overlays").is_empty());
}

/// A run's capture is made once its sandbox's init exists (off the run's
/// path); one that cannot be made then still runs nothing, and says why.
/// Judged from the host: the file the command would make is not there; the
/// control, the same run with a state directory that can hold captures, makes it.
#[test]
fn a_capture_that_cannot_be_made_runs_nothing() {
    for policy in ["", "overlay = true\n"] {
        let control = world();
        git_in(&control.ws, &["init", "-q"]);
        let o = control.run_policy(policy, "touch made-by-the-run");
        assert_eq!(o.status.code(), Some(0), "{policy:?}: {}", text(&o));
        assert!(
            exists(&control.ws.join("made-by-the-run")),
            "{policy:?}: the control made nothing"
        );

        let w = world();
        git_in(&w.ws, &["init", "-q"]);
        // Where captures go, a file: no capture directory can be made there.
        std::fs::write(w.state.join("overlays"), "not a directory\n").unwrap();
        let o = w.run_policy(policy, "touch made-by-the-run");
        assert_eq!(o.status.code(), Some(125), "{policy:?}: {}", text(&o));
        assert!(
            text(&o).contains("cannot prepare the overlay workspace, so nothing runs"),
            "{policy:?}: {}",
            text(&o)
        );
        assert!(!exists(&w.ws.join("made-by-the-run")), "{policy:?}: the command ran");
    }
}
