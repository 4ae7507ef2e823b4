//! Command-line contract: input limits, invalid UTF-8, help with examples, exit codes of `check`.

mod common;
use common::*;
use std::os::unix::ffi::OsStrExt;
use std::process::Command;

fn tx(args: &[&std::ffi::OsStr]) -> std::process::Output {
    let w = World::new();
    Command::new(bin())
        .arg("--state-dir")
        .arg(&w.state)
        .args(args)
        .current_dir(&w.ws)
        .output()
        .unwrap()
}

#[test]
fn oversized_scripts_are_a_clear_error_not_a_hang() {
    let big = "a".repeat(70_000);
    let o = tx(&["check".as_ref(), "-c".as_ref(), big.as_ref()]);
    assert_eq!(o.status.code(), Some(125));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.starts_with("tether-exec: cannot judge the command: the script is 70000 bytes; the gate analyses scripts up to 65536 bytes"), "{err}");
}

#[test]
fn invalid_utf8_is_refused_clearly() {
    let bad = std::ffi::OsStr::from_bytes(b"ls \xff\xfe");
    for sub in ["check", "run"] {
        let o = tx(&[sub.as_ref(), "-c".as_ref(), bad]);
        assert_eq!(o.status.code(), Some(125), "{sub}");
        assert!(String::from_utf8_lossy(&o.stderr).contains("invalid UTF-8"), "{sub}");
    }
}

#[test]
fn check_exit_codes_follow_the_decision() {
    let w = World::new();
    let p = w.policy(
        "bash_allow_prefixes = [\"ls\"]\nrequire_approval_for = [\"rm\"]\ndeny = [\"curl\"]\ndefault = \"ask\"\n",
    );
    for (script, code) in [("ls", 0), ("rm x", 75), ("curl x", 77), ("ls; curl x; rm y", 77)] {
        let o = Command::new(bin())
            .args(["check", "--policy"])
            .arg(&p)
            .args(["-c", script])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(code), "{script}: {}", text(&o));
    }
}

#[test]
fn every_subcommand_has_help_with_an_example() {
    for sub in [
        vec!["run"],
        vec!["check"],
        vec!["pending"],
        vec!["show"],
        vec!["approve"],
        vec!["reject"],
        vec!["resume"],
        vec!["approver", "show"],
        vec!["approver", "trust"],
        vec!["audit", "verify"],
        vec!["audit", "show"],
        vec!["policy", "validate"],
        vec!["policy", "narrow"],
        vec!["doctor"],
    ] {
        let o = Command::new(bin()).args(&sub).arg("--help").output().unwrap();
        let out = stdout(&o);
        assert!(o.status.success(), "{sub:?}");
        assert!(out.contains("Example"), "{sub:?} --help has no example:\n{out}");
    }
}

/// Run by root for a workspace someone else owns (a root container with the
/// person's checkout mounted in), the sandbox acts as that owner: what it
/// makes is theirs, in bind and in overlay mode, and a root-owned file in the
/// workspace stays out of its reach. As any other user there is no such case.
#[test]
fn root_runs_a_workspace_it_does_not_own_as_its_owner() {
    if !is_root() {
        eprintln!("not root: a workspace owned by someone else is not writable to begin with");
        return;
    }
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let w = World::new();
    // The owner must be able to reach its workspace, as on any real host.
    std::fs::set_permissions(w.root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // root's state directory is not: the overlay's capture lives there.
    std::fs::set_permissions(&w.state, std::fs::Permissions::from_mode(0o700)).unwrap();
    let nobody = 65534;
    w.write("sub/kept.txt", "kept\n");
    let root_file = w.write("root-owned.txt", "root's\n");
    for p in [w.ws.clone(), w.ws.join("sub"), w.ws.join("sub/kept.txt")] {
        std::os::unix::fs::chown(&p, Some(nobody), Some(nobody)).unwrap();
    }
    let o = w
        .run("id -u; echo made > made.txt; mkdir -p d/e; echo x >> sub/kept.txt; echo evil > root-owned.txt; echo end");
    assert!(stdout(&o).starts_with("65534\n"), "{}", text(&o));
    assert!(stdout(&o).contains("end"), "{}", text(&o));
    for rel in ["made.txt", "d", "d/e"] {
        let m = std::fs::metadata(w.ws.join(rel)).unwrap();
        assert_eq!((m.uid(), m.gid()), (nobody, nobody), "{rel}\n{}", text(&o));
    }
    assert_eq!(std::fs::read_to_string(w.ws.join("sub/kept.txt")).unwrap(), "kept\nx\n");
    assert_eq!(std::fs::read_to_string(&root_file).unwrap(), "root's\n", "{}", text(&o));
    // Control: root itself, outside the sandbox, could write that file.
    let c = w.control("echo evil > root-owned.txt");
    assert!(c.status.success());
    assert_eq!(std::fs::read_to_string(&root_file).unwrap(), "evil\n");

    // The overlay lands as the owner too: files, new directories, and a
    // directory renamed (a copy under overlayfs).
    let p = w.policy("profile = \"workspace-write\"\noverlay = true\n");
    let o = w.run_with(
        &["--policy", p.to_str().unwrap()],
        "echo o > o.txt; mkdir -p od/x; echo y > od/x/f; mv sub sub2; echo end",
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    for rel in ["o.txt", "od", "od/x", "od/x/f", "sub2", "sub2/kept.txt"] {
        let m = std::fs::symlink_metadata(w.ws.join(rel)).unwrap();
        assert_eq!((m.uid(), m.gid()), (nobody, nobody), "{rel}\n{}", text(&o));
    }
    assert!(!exists(&w.ws.join("sub")));

    // Killing the launcher still ends the sandbox: its change of ids must not
    // cost init its parent-death signal.
    let mut child = w
        .run_command("while true; do echo x >> tick.txt; sleep 0.05; done")
        .spawn()
        .unwrap();
    wait_for(&w.ws.join("tick.txt"));
    child.kill().unwrap();
    child.wait().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let size = || std::fs::metadata(w.ws.join("tick.txt")).unwrap().len();
    let before = size();
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert_eq!(size(), before, "the sandbox outlived its launcher");
}

/// A namespace the kernel allows none of (its per-user limit is 0; set here
/// inside a user namespace of the test's own): `run` refuses before anything
/// runs and names the limit, and `doctor` reports it with the fix. Control:
/// without the limit, both are fine.
#[test]
fn a_namespace_limit_of_zero_is_named_by_run_and_doctor() {
    let w = World::new();
    let try_with = |limit: &str| {
        let o = Command::new("unshare")
            .args(["--user", "--map-root-user", "sh", "-c"])
            .arg(format!(
                "{limit} \"$0\" --state-dir {0} run -- touch {1}/ran; echo \"run=$?\"; \"$0\" --state-dir {0} doctor --json",
                w.state.display(),
                w.ws.display()
            ))
            .arg(bin())
            .current_dir(&w.ws)
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        let (first, json) = out.split_once('\n').unwrap_or_else(|| panic!("{}", text(&o)));
        let v: serde_json::Value = serde_json::from_str(json).unwrap_or_else(|_| panic!("{}", text(&o)));
        let ns = v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["check"] == "namespaces")
            .cloned()
            .expect("a namespaces check");
        (first.to_string(), String::from_utf8_lossy(&o.stderr).into_owned(), ns)
    };
    let (run, err, ns) = try_with("echo 0 > /proc/sys/user/max_pid_namespaces &&");
    assert_eq!(run, "run=125", "{err}");
    assert!(err.contains("/proc/sys/user/max_pid_namespaces is 0"), "{err}");
    assert!(!exists(&w.ws.join("ran")), "nothing ran");
    assert_eq!(ns["ok"], false, "{ns}");
    assert!(
        ns["detail"].as_str().unwrap().contains("max_pid_namespaces is 0"),
        "{ns}"
    );
    assert!(ns["advice"].as_str().unwrap().contains("sysctl"), "{ns}");
    let (run, err, ns) = try_with("");
    assert_eq!(run, "run=0", "control: {err}");
    assert!(exists(&w.ws.join("ran")), "control: {err}");
    assert_eq!(ns["ok"], true, "control: {ns}");
}

/// `doctor` mounts an overlay the way a run does, with its layers in the
/// state directory: it says so when that works, and names the problem and
/// the fix when the state directory is on a filesystem overlayfs refuses as
/// an upper layer (here an overlayfs itself, in a private namespace).
#[test]
fn doctor_tries_an_overlay_in_the_state_directory() {
    let w = World::new();
    // Any path, even one that would break a mount's option string.
    let state = w.outside.join("state, odd: name");
    let o = Command::new(bin())
        .arg("--state-dir")
        .arg(&state)
        .args(["doctor", "--json"])
        .current_dir(&w.ws)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let overlay = |v: &serde_json::Value| {
        v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["check"] == "overlayfs in a user namespace")
            .cloned()
            .expect("an overlay check")
    };
    let c = overlay(&v);
    assert_eq!(c["ok"], true, "{c}");
    assert!(std::fs::read_dir(&state).unwrap().all(|e| !e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .starts_with("overlay-probe")));
    // Control: an overlayfs is no upper layer for another.
    for d in ["l", "u", "w", "m"] {
        std::fs::create_dir_all(w.outside.join(d)).unwrap();
    }
    let o = Command::new("unshare")
        .args(["-Urm", "sh", "-c"])
        .arg(format!(
            "mount -t overlay o -o lowerdir={0}/l,upperdir={0}/u,workdir={0}/w,userxattr {0}/m && mkdir {0}/m/ws && cd {0}/m/ws && exec \"$0\" --state-dir {0}/m/state doctor --json",
            w.outside.display()
        ))
        .arg(bin())
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|_| panic!("{}", text(&o)));
    let c = overlay(&v);
    assert_eq!(c["ok"], false, "{c}");
    assert_eq!(v["ok"], false);
    assert!(c["advice"].as_str().unwrap().contains("state directory"), "{c}");
    assert_eq!(o.status.code(), Some(125));
    // The same state directory with a git repository on another filesystem:
    // its runs may keep their layers beside it instead (as root, or where no
    // one else can rename its parents). Whatever doctor says, a run there
    // bears it out.
    host_git(&w, &["init", "-q"]);
    w.write("a.txt", "a\n");
    host_git(&w, &["add", "a.txt"]);
    host_git(&w, &["commit", "-qm", "a"]);
    let o = Command::new("unshare")
        .args(["-Urm", "sh", "-c"])
        .arg(format!(
            "mount -t overlay o -o lowerdir={0}/l,upperdir={0}/u,workdir={0}/w,userxattr {0}/m && cd {1} && \"$0\" --state-dir {0}/m/state doctor --json > {0}/doctor.json; \"$0\" --state-dir {0}/m/state run -- touch made",
            w.outside.display(),
            w.ws.display()
        ))
        .arg(bin())
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(w.outside.join("doctor.json")).unwrap()).unwrap();
    let c = overlay(&v);
    assert_eq!(
        c["ok"] == true,
        o.status.success(),
        "doctor said {c}, a run in the repository said: {}",
        text(&o)
    );
    assert_eq!(exists(&w.ws.join("made")), o.status.success());
}

/// doctor removes the probe a killed doctor left, and nothing else: not an
/// entry that only looks like one (a symlink, followed nowhere), not a
/// directory that is not its user's.
#[test]
fn doctor_sweeps_only_its_own_dead_probes() {
    use std::os::unix::fs::PermissionsExt;
    let w = World::new();
    let state = w.outside.join("state");
    std::fs::create_dir_all(state.join("overlay-probe-4000000-1/work/work")).unwrap();
    std::fs::set_permissions(
        state.join("overlay-probe-4000000-1/work/work"),
        std::fs::Permissions::from_mode(0o0),
    )
    .unwrap();
    let target = w.outside.join("target");
    std::fs::create_dir_all(target.join("work")).unwrap();
    let secret = w.outside.join("secret");
    std::fs::write(&secret, "x").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o640)).unwrap();
    std::os::unix::fs::symlink(&secret, target.join("work/work")).unwrap();
    std::os::unix::fs::symlink(&target, state.join("overlay-probe-4000001-2")).unwrap();
    let theirs = state.join("overlay-probe-4000002-3");
    std::fs::create_dir_all(theirs.join("f")).unwrap();
    if is_root() {
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    }
    let o = Command::new(bin())
        .arg("--state-dir")
        .arg(&state)
        .arg("doctor")
        .current_dir(&w.ws)
        .output()
        .unwrap();
    assert!(text(&o).contains("overlayfs"), "{}", text(&o));
    assert!(
        !state.join("overlay-probe-4000000-1").exists(),
        "a dead probe of ours is removed"
    );
    assert!(target.join("work").exists(), "a symlink is not followed");
    assert_eq!(std::fs::metadata(&secret).unwrap().permissions().mode() & 0o777, 0o640);
    if is_root() {
        assert!(theirs.join("f").exists(), "another user's directory stays");
    }
}

/// Run by root in a root-owned repository whose state directory is
/// set-group-ID with another group (or on a filesystem mounted `grpid`):
/// the git directory's capture is made there and takes that group, which
/// the sandbox does not map. It is given root's ids back, so the overlay
/// mounts and a commit made inside lands.
#[test]
fn a_set_group_id_state_directory_does_not_break_a_git_run() {
    if !is_root() {
        eprintln!("not root: only root's captures are given the workspace's ids");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let w = World::new();
    std::os::unix::fs::chown(&w.state, None, Some(65534)).unwrap();
    std::fs::set_permissions(&w.state, std::fs::Permissions::from_mode(0o2755)).unwrap();
    host_git(&w, &["init", "-q", "-b", "main", "."]);
    host_git(&w, &["commit", "-q", "--allow-empty", "-m", "init"]);
    let o = w.run("git -c user.name=a -c user.email=b@c commit -q --allow-empty -m inside && echo DONE");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        host_git(&w, &["log", "--format=%s"]).starts_with("inside\n"),
        "{}",
        text(&o)
    );
}

/// The processes whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            // `pid (comm) state ppid ...`; comm may hold spaces and parentheses.
            let ppid = stat.rsplit_once(')')?.1.split_whitespace().nth(1)?;
            (ppid.parse::<u32>().ok()? == pid).then(|| e.file_name().to_str()?.parse().ok())?
        })
        .collect()
}

/// Which of `pid`'s descriptors 0, 1 and 2 are `pipe`.
fn holds(pid: u32, pipe: &std::path::Path) -> Vec<u32> {
    (0..3)
        .filter(|fd| std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).is_ok_and(|l| l == pipe))
        .collect()
}

/// A harness reads a command's output until the pipes close. The command and
/// the launcher hold them; the sandbox's init hands them to the command and
/// lets go, so its own exit (after the launcher's: the pid namespace, the
/// mounts and any overlay taken down) never keeps a harness waiting.
#[test]
fn the_sandbox_init_keeps_none_of_the_harness_pipes() {
    // init is not dumpable: reading its descriptors takes CAP_SYS_PTRACE,
    // which only the root pass has. Not a security property: a latency one.
    if !is_root() {
        return;
    }
    let w = World::new();
    let mut launcher = w
        .command(&["run", "-c", "sleep 5"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = launcher.id();
    let (out, err) = (
        std::fs::read_link(format!("/proc/{pid}/fd/1")).unwrap(),
        std::fs::read_link(format!("/proc/{pid}/fd/2")).unwrap(),
    );
    assert!(out.to_string_lossy().starts_with("pipe:"), "{out:?}");
    // Wait for init (the launcher's child whose own child is not the
    // network helper but the command, which holds the pipes) and for the
    // command to be `sleep`: it is executed only after init said it is
    // ready, which is after init let go of its streams.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let is_sleep = |p: u32| std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "sleep");
    let (init, command) = loop {
        let found = children_of(pid).into_iter().find_map(|i| {
            children_of(i)
                .into_iter()
                .find(|c| holds(*c, &out) == [1] && is_sleep(*c))
                .map(|c| (i, c))
        });
        if let Some(f) = found {
            break f;
        }
        assert!(std::time::Instant::now() < deadline, "the command never started");
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    // The control: the check sees the pipes where they are.
    assert_eq!(holds(command, &err), [2]);
    assert_eq!(holds(pid, &out), [1]);
    // Read, not merely not found: a failed read would pass the check above.
    for fd in 0..3 {
        let link = std::fs::read_link(format!("/proc/{init}/fd/{fd}"))
            .unwrap_or_else(|e| panic!("init {init}'s descriptor {fd} cannot be read: {e}"));
        assert_eq!(
            link,
            std::path::Path::new("/dev/null"),
            "init {init} still holds the harness's pipes"
        );
    }
    launcher.kill().unwrap();
    let _ = launcher.wait();
}

/// A state directory another account could write is refused, nothing runs,
/// and the message names it and the fix: what the launcher acts on from
/// there (captures it lands or removes, its caches) could be planted.
#[test]
fn a_state_directory_others_can_write_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let w = World::new();
    let control = w.run("true");
    assert!(
        control.status.success(),
        "control: a private one works: {}",
        text(&control)
    );
    std::fs::set_permissions(&w.state, std::fs::Permissions::from_mode(0o777)).unwrap();
    let o = w.run("touch ran.txt");
    assert_eq!(o.status.code(), Some(125), "{}", text(&o));
    assert!(text(&o).contains("is writable by others (mode 777)"), "{}", text(&o));
    assert!(text(&o).contains("chmod go-w"), "{}", text(&o));
    assert!(!exists(&w.ws.join("ran.txt")), "nothing ran");
    std::fs::set_permissions(&w.state, std::fs::Permissions::from_mode(0o700)).unwrap();
    if is_root() {
        std::os::unix::fs::chown(&w.state, Some(65534), None).unwrap();
        let o = w.run("touch ran.txt");
        assert_eq!(o.status.code(), Some(125), "{}", text(&o));
        assert!(text(&o).contains("owned by uid 65534, not by uid 0"), "{}", text(&o));
        assert!(!exists(&w.ws.join("ran.txt")), "nothing ran");
    }
}

/// A script that starts with `-` is bash's command, not bash's options:
/// `run -c=--version` runs a program named `--version` (not found, 127),
/// where bash would have read the script as its own option.
#[test]
fn a_script_starting_with_a_dash_is_a_command_not_options() {
    let w = World::new();
    let o = w.tx(&["run", "-c=--version"]);
    assert_eq!(o.status.code(), Some(127), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--version: command not found"),
        "{}",
        text(&o)
    );
    // Control: bash reads the same string as an option without `--`.
    let c = Command::new("bash").args(["-c", "--version"]).output().unwrap();
    assert_eq!(c.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&c.stderr).contains("invalid option"),
        "{}",
        text(&c)
    );
}
