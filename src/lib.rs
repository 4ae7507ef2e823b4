//! tether-exec: a launcher that gates and kernel-confines every shell command an
//! AI agent runs.
//!
//! Data flows one way: [`policy`] loads and narrows policies, [`gate`] decides
//! allow / ask / deny (pure), [`sandbox::plan`] turns the policy into a mount,
//! Landlock and seccomp plan (pure), and [`sandbox::apply`] is the only place
//! that makes namespace, mount, Landlock and seccomp system calls. [`cli`] only
//! parses arguments and formats output.

pub mod approval;
pub mod audit;
pub mod cli;
pub mod exit;
pub mod gate;
pub mod launch;
pub mod policy;
pub mod receipt;
pub mod sandbox;
pub mod state;
pub mod workspace;

use policy::{Layer, Policy, PolicyError};
use std::path::PathBuf;

/// Load the policy stack from files (or the embedded default when none is
/// given) and check every rule's examples against the real gate.
pub fn load_policy(paths: &[PathBuf]) -> Result<Policy, PolicyError> {
    if paths.is_empty() {
        return Ok(Policy::embedded_default());
    }
    let mut layers = Vec::with_capacity(paths.len());
    let mut files = Vec::with_capacity(paths.len());
    for p in paths {
        layers.push(Layer::load(p)?);
        files.push(std::fs::canonicalize(p).unwrap_or_else(|_| p.clone()));
    }
    let policy = Policy::new(layers, files);
    gate::check_examples(&policy)?;
    Ok(policy)
}
