//! The receipt: what was decided, what ran, how it ended, and the isolation
//! actually applied. Written as JSON (`"v": 1`) to `--receipt FILE`, never
//! mixed with the command's own output.

use crate::gate::Judged;
use crate::policy::Verdict;
use crate::sandbox::plan::Plan;
use serde::Serialize;

#[derive(Debug, Serialize, Default)]
pub struct Receipt {
    pub v: u32,
    pub decision: Option<Verdict>,
    pub rules: Vec<Judged>,
    pub pending_id: Option<String>,
    pub session: Option<String>,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub duration_ms: u64,
    /// Workspace changes; `null` when the run was not captured (direct bind mode).
    pub changes: Option<Changes>,
    pub rolled_back: Vec<String>,
    /// Protected names the run tried to make and the create guard refused
    /// (`path: reason`), at most a few.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub refused_to_make: Vec<String>,
    pub isolation: Option<Isolation>,
    pub policy_digest: String,
    pub audit_seq: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Serialize, Default, Clone)]
pub struct Changes {
    pub added: Vec<String>,
    pub modified: Vec<String>,
    pub deleted: Vec<String>,
}

#[derive(Debug, Serialize, Clone)]
pub struct Isolation {
    pub namespaces: Vec<&'static str>,
    pub landlock: LandlockReport,
    pub seccomp: SeccompReport,
    pub network: &'static str,
    pub uid_map: String,
    pub no_new_privs: bool,
    pub capabilities: &'static str,
    pub rlimits: Vec<(String, u64)>,
    /// Tool directories (from PATH, widened to their prefix, and
    /// virtualenvs') not shown inside, and why (absent when none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_shown: Vec<NotShown>,
}

#[derive(Debug, Serialize, Clone)]
pub struct NotShown {
    pub path: String,
    pub why: String,
}

#[derive(Debug, Serialize, Clone)]
pub struct LandlockReport {
    pub abi: u8,
    pub enforcement: &'static str,
    pub scoped: Vec<&'static str>,
    pub writable: Vec<String>,
}

#[derive(Debug, Serialize, Clone)]
pub struct SeccompReport {
    pub refused: usize,
    pub conditional: Vec<&'static str>,
    pub x32_refused: bool,
    /// Calls that make a name, handed to the create guard (a bind-mounted
    /// writable workspace only; empty otherwise).
    pub guarded: Vec<&'static str>,
    /// Refused only with the create guard (see `seccomp::REFUSED_WITH_THE_GUARD`).
    pub refused_with_the_guard: Vec<&'static str>,
}

impl Isolation {
    /// What a plan applies when `apply::run` succeeds (every step is a hard requirement).
    pub fn of(plan: &Plan) -> Isolation {
        let mut namespaces = vec!["user", "mount", "pid", "ipc", "uts"];
        if !plan.host_network {
            namespaces.push("net");
        }
        Isolation {
            namespaces,
            landlock: LandlockReport {
                abi: plan.landlock.abi,
                enforcement: "fully enforced (hard requirement)",
                scoped: if plan.landlock.scoped {
                    vec!["abstract_unix_socket", "signal"]
                } else {
                    vec![]
                },
                writable: plan
                    .landlock
                    .rules
                    .iter()
                    .filter(|(_, a)| *a != crate::sandbox::plan::Access::Read)
                    .map(|(p, _)| p.display().to_string())
                    .collect(),
            },
            seccomp: SeccompReport {
                refused: crate::sandbox::seccomp::REFUSED.len(),
                conditional: crate::sandbox::seccomp::CONDITIONAL.to_vec(),
                x32_refused: cfg!(target_arch = "x86_64"),
                guarded: if plan.create_guard.is_some() {
                    crate::sandbox::seccomp::GUARDED.to_vec()
                } else {
                    Vec::new()
                },
                refused_with_the_guard: if plan.create_guard.is_some() {
                    crate::sandbox::seccomp::REFUSED_WITH_THE_GUARD.to_vec()
                } else {
                    Vec::new()
                },
            },
            network: if plan.host_network {
                "host (policy network = true)"
            } else {
                "none (fresh namespace, loopback only)"
            },
            uid_map: format!("{} -> host {}", plan.inner_uid, plan.outer_uid),
            no_new_privs: true,
            capabilities: "none (all sets and bounding set cleared)",
            rlimits: plan
                .rlimits
                .iter()
                .map(|r| (format!("{:?}", r.resource), r.value))
                .collect(),
            not_shown: plan
                .not_shown
                .iter()
                .map(|(path, why)| NotShown {
                    path: path.clone(),
                    why: why.clone(),
                })
                .collect(),
        }
    }
}

impl Receipt {
    pub fn new(policy_digest: String) -> Receipt {
        Receipt {
            v: 1,
            policy_digest,
            ..Receipt::default()
        }
    }

    /// Write the receipt whole under a temporary name, then rename it into
    /// place, so that a reader never sees half of it: there is the whole new
    /// receipt or none. A receipt left at `path` by an earlier call is
    /// removed first, so that a write that fails leaves no stale one to be
    /// taken for this call's, and so that the rename replaces nothing: ext4
    /// writes a file out to disk when a rename replaces another with it
    /// (`auto_da_alloc`), 0.47 ms on this machine for a harness that passes
    /// the same `--receipt` on every call. Not synced: the harness reads it
    /// right after the call, and a power cut that could lose it ends that
    /// harness too (the audit log is the record that lasts).
    pub fn write(&self, path: &std::path::Path) -> std::io::Result<()> {
        let json = serde_json::to_string_pretty(self).expect("receipt serialises");
        let tmp = path.with_extension("tmp-tether-exec");
        // Whatever stops the removal (a directory there, say) stops the
        // rename too, which says so.
        let _ = std::fs::remove_file(path);
        std::fs::write(&tmp, json + "\n")?;
        std::fs::rename(&tmp, path).inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
    }
}

#[cfg(test)]
mod tests {
    use super::Receipt;

    /// A receipt written where one was: the new one, whole; a write that
    /// fails: none left, never the earlier call's.
    #[test]
    fn a_receipt_replaces_the_last_and_a_failed_write_leaves_none() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.json");
        let mut r = Receipt::new("d".into());
        r.exit_code = Some(1);
        r.write(&path).unwrap();
        r.exit_code = Some(2);
        r.write(&path).unwrap();
        let read: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(read["exit_code"], 2);
        std::fs::create_dir(path.with_extension("tmp-tether-exec")).unwrap();
        assert!(r.write(&path).is_err());
        assert!(!path.exists(), "the last call's receipt would be taken for this one's");
        // A rename that fails (a directory where the receipt goes) leaves no
        // temporary file behind.
        std::fs::remove_dir(path.with_extension("tmp-tether-exec")).unwrap();
        std::fs::create_dir_all(path.join("inside")).unwrap();
        assert!(r.write(&path).is_err());
        assert!(!path.with_extension("tmp-tether-exec").exists());
    }
}
