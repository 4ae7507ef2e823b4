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
