//! `audit verify` and `audit show`: output formats for the audit trail.

use super::error_line;
use crate::exit;
use std::path::Path;

pub fn verify(state: &Path, json: bool) -> i32 {
    match crate::audit::verify(state) {
        Ok(r) => {
            if json {
                println!("{}", serde_json::to_string(&r).expect("serialisable"));
            } else if let Some(p) = &r.problem {
                println!(
                    "TAMPERED: record {} (line {}): {:?}: {}",
                    p.seq, p.line, p.kind, p.detail
                );
                println!(
                    "{} records intact before it, {} signed checkpoints",
                    r.records, r.checkpoints
                );
            } else {
                println!("intact: {} records, {} signed checkpoints", r.records, r.checkpoints);
            }
            if r.problem.is_some() {
                1
            } else {
                0
            }
        }
        Err(e) => {
            error_line(&format!("cannot verify the audit log: {e}"));
            exit::INTERNAL
        }
    }
}

pub fn show(state: &Path, json: bool, session: Option<&str>, since: Option<u64>) -> i32 {
    match crate::audit::read_readable_records(state, session, since) {
        Ok((records, unreadable)) => {
            for r in &records {
                if json {
                    println!("{}", serde_json::to_string(r).expect("serialisable"));
                } else {
                    println!("{}", crate::audit::format_human(r));
                }
            }
            if unreadable.is_empty() {
                return 0;
            }
            // Every record that can be read is shown; the others named.
            for e in &unreadable {
                error_line(&format!(
                    "{e} (shown: the records that can be read; `tether-exec audit verify` says what happened)"
                ));
            }
            exit::INTERNAL
        }
        Err(e) => {
            error_line(&format!("cannot read the audit log: {e}"));
            exit::INTERNAL
        }
    }
}
