//! Shared helpers for tests that drive the `tether-exec` binary.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The binary under test (`TETHER_EXEC_BIN` overrides, for the unprivileged CI pass).
pub fn bin() -> PathBuf {
    std::env::var_os("TETHER_EXEC_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_tether-exec")))
}

pub const PY: &str = "/usr/bin/python3";

/// A test world: a workspace, a folder outside it, a state directory.
pub struct World {
    pub root: tempfile::TempDir,
    pub ws: PathBuf,
    pub outside: PathBuf,
    pub state: PathBuf,
}

impl World {
    pub fn new() -> World {
        let root = tempfile::Builder::new()
            .prefix("tether-test-")
            .tempdir()
            .expect("tempdir");
        let base = std::fs::canonicalize(root.path()).unwrap();
        let ws = base.join("ws");
        let outside = base.join("outside");
        let state = base.join("state");
        for d in [&ws, &outside, &state] {
            std::fs::create_dir_all(d).unwrap();
        }
        World {
            root,
            ws,
            outside,
            state,
        }
    }

    pub fn write(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.ws.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
        p
    }

    pub fn policy(&self, toml: &str) -> PathBuf {
        let p = self.outside.join(format!("policy-{}.toml", rand_tag()));
        std::fs::write(&p, toml).unwrap();
        p
    }

    /// `tether-exec run [extra] -c script` in the workspace.
    pub fn run_with(&self, extra: &[&str], script: &str) -> Output {
        let mut c = Command::new(bin());
        c.arg("--state-dir")
            .arg(&self.state)
            .arg("run")
            .args(extra)
            .arg("-c")
            .arg(script);
        c.current_dir(&self.ws).stdin(Stdio::null());
        c.output().expect("run tether-exec")
    }

    pub fn run(&self, script: &str) -> Output {
        self.run_with(&[], script)
    }

    pub fn run_policy(&self, toml: &str, script: &str) -> Output {
        let p = self.policy(toml);
        self.run_with(&["--policy", p.to_str().unwrap()], script)
    }

    /// `tether-exec ARGS` in the workspace, with this world's state directory and approver key.
    pub fn tx(&self, args: &[&str]) -> Output {
        Command::new(bin())
            .arg("--state-dir")
            .arg(&self.state)
            .args(args)
            .current_dir(&self.ws)
            .env("TETHER_EXEC_APPROVER_KEY", self.outside.join("approver.key"))
            .stdin(Stdio::null())
            .output()
            .expect("run tether-exec")
    }

    /// [`World::tx`] with a test hook of the debug build set (`var=value`).
    pub fn tx_hooked(&self, args: &[&str], (var, value): (&str, &str)) -> Output {
        self.command(args)
            .env("TETHER_EXEC_APPROVER_KEY", self.outside.join("approver.key"))
            .env(var, value)
            .output()
            .expect("run tether-exec")
    }

    /// `tether-exec ARGS` with this world's state directory, in the
    /// workspace, stdin closed: not started yet (to watch it from the host
    /// while it runs).
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(bin());
        c.arg("--state-dir")
            .arg(&self.state)
            .args(args)
            .current_dir(&self.ws)
            .stdin(Stdio::null());
        c
    }

    /// `tether-exec ARGS` (see [`World::command`]) with init paused before
    /// its mounts (a debug build's test hook) while `meanwhile` changes the
    /// host: what the plan found no longer holds when init mounts.
    pub fn paused_before_mounts(&self, args: &[&str], meanwhile: impl FnOnce()) -> Output {
        let pause = self.root.path().join("paused");
        let child = self
            .command(args)
            .env("TETHER_EXEC_TEST_PAUSE_AT", "before-mounts")
            .env("TETHER_EXEC_TEST_PAUSE_FILE", &pause)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run tether-exec");
        assert!(wait_for(&pause), "init never paused");
        meanwhile();
        std::fs::remove_file(&pause).unwrap();
        child.wait_with_output().expect("wait for tether-exec")
    }

    /// `tether-exec run -c script`, not started yet; output discarded.
    pub fn run_command(&self, script: &str) -> Command {
        let mut c = self.command(&["run", "-c", script]);
        c.stdout(Stdio::null()).stderr(Stdio::null());
        c
    }

    /// The same script without the sandbox: the control.
    pub fn control(&self, script: &str) -> Output {
        Command::new("bash")
            .arg("-c")
            .arg(script)
            .current_dir(&self.ws)
            .stdin(Stdio::null())
            .output()
            .expect("bash")
    }
}

pub fn rand_tag() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "{}-{}-{}",
        std::process::id(),
        t % 1_000_000_000,
        N.fetch_add(1, Ordering::Relaxed)
    )
}

pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc_geteuid() == 0 }
}

extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}

pub fn exists(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok()
}

/// Names of the entries of `dir` that contain `needle` (leftovers, quarantines).
pub fn names_containing(dir: &Path, needle: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(needle))
        .collect()
}

/// The action id in a `[APPROVAL REQUIRED]` message (`tether-exec approve ID`).
pub fn held_id(stderr: &str) -> String {
    stderr
        .split("tether-exec approve ")
        .nth(1)
        .and_then(|rest| rest.split('`').next())
        .unwrap_or_else(|| panic!("no action id in: {stderr}"))
        .to_string()
}

/// git on the host (not confined) in the workspace; panics unless it
/// succeeds; its standard output.
pub fn host_git(w: &World, args: &[&str]) -> String {
    let o = Command::new("git")
        .args(["-c", "user.email=t@t", "-c", "user.name=t"])
        .args(args)
        .current_dir(&w.ws)
        .output()
        .unwrap();
    assert!(o.status.success(), "git {args:?}: {}", text(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// git on the host in `dir` (an identity and local file transport set);
/// panics unless it succeeds.
pub fn git_in(dir: &Path, args: &[&str]) {
    let o = Command::new("git")
        .args([
            "-c",
            "user.email=t@t",
            "-c",
            "user.name=t",
            "-c",
            "protocol.file.allow=always",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "git {args:?} in {}: {}", dir.display(), text(&o));
}

/// An executable file at `path` (its directories made) holding `text`.
pub fn write_program(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
}

/// A program outside the workspace that appends the directory it runs in to
/// a log when git runs it as `core.fsmonitor`: (the `[core]` lines that
/// would have git run it, for `printf`; the log).
pub fn planted_fsmonitor(w: &World) -> (String, PathBuf) {
    let log = w.outside.join("git-ran-the-planted-fsmonitor");
    let program = w.outside.join("fsmonitor.sh");
    write_program(&program, &format!("#!/bin/sh\npwd >> {}\n", log.display()));
    (format!("[core]\\n\\tfsmonitor = {}\\n", program.display()), log)
}

/// Waits (up to 20 s) until `done()` holds; whether it does. For what the
/// launcher leaves to a child once its result is out (removing a landed
/// preview).
pub fn eventually(done: impl Fn() -> bool) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !done() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    done()
}

/// Waits (up to 20 s) until `p` exists; whether it does.
pub fn wait_for(p: &Path) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !exists(p) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    exists(p)
}

/// A path of the host's (a file or a directory tree) a test made outside its
/// own temporary folders: removed when dropped, also when the test fails.
pub struct RemovedOnDrop(pub PathBuf);

impl Drop for RemovedOnDrop {
    fn drop(&mut self) {
        if std::fs::remove_file(&self.0).is_err() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// A temporary directory of the host's outside /tmp (which the sandbox has
/// its own of), for what a policy shows read-only or a run must not reach.
pub fn host_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("tether-test-")
        .tempdir_in("/var/tmp")
        .expect("a directory in /var/tmp")
}

/// [`host_dir`] holding `secret.txt` ("TOPSECRET"), and its real path.
pub fn host_secret_dir() -> (tempfile::TempDir, PathBuf) {
    let d = host_dir();
    std::fs::write(d.path().join("secret.txt"), "TOPSECRET\n").unwrap();
    let real = std::fs::canonicalize(d.path()).unwrap();
    (d, real)
}
