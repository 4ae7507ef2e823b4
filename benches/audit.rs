//! Plain timing harness: `cargo bench --bench audit`. Prints medians; asserts
//! nothing about time, since machines differ.

use std::time::{Duration, Instant};

use tether_exec::audit::{verify, AuditEntry, AuditLog, EntryKind};

fn entry(i: u64) -> AuditEntry {
    let mut e = AuditEntry::new(if i.is_multiple_of(2) {
        EntryKind::RunEnd
    } else {
        EntryKind::Decision
    });
    e.session = Some(format!("session-{}", i % 7));
    e.actor = Some("harness".into());
    e.policy_digest = Some("a".repeat(64));
    e.command = Some(format!(
        "cargo test --package crate{i} -- --nocapture && curl -H 'Authorization: Bearer tok{i}' https://example.com"
    ));
    e.decision = Some("allow".into());
    e.rules = Some(vec!["allow-cargo".into(), "allow-curl".into()]);
    e.isolation = Some(serde_json::json!({"landlock": "v4", "seccomp": true, "netns": true}));
    e.exit_code = Some(0);
    e.duration_ms = Some(i);
    e
}

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort_unstable();
    samples[samples.len() / 2]
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p) as usize]
}

fn main() {
    const APPENDS: u64 = 2000;
    const VERIFY_RECORDS: u64 = 100_000;
    const VERIFY_RUNS: usize = 5;

    let state = tempfile::tempdir().expect("tempdir");
    let mut log = AuditLog::open(state.path()).expect("open");
    let mut samples = Vec::with_capacity(APPENDS as usize);
    for i in 1..=APPENDS {
        let e = entry(i);
        let start = Instant::now();
        log.append(e).expect("append");
        samples.push(start.elapsed());
    }
    let med = median(&mut samples);
    println!(
        "append x{APPENDS}: median {:.1} us, p90 {:.1} us, p99 {:.1} us, max {:.1} us",
        med.as_secs_f64() * 1e6,
        percentile(&samples, 0.90).as_secs_f64() * 1e6,
        percentile(&samples, 0.99).as_secs_f64() * 1e6,
        samples.last().unwrap().as_secs_f64() * 1e6,
    );

    let fill = Instant::now();
    for i in APPENDS + 1..=VERIFY_RECORDS {
        log.append(entry(i)).expect("append");
    }
    let per = fill.elapsed() / (VERIFY_RECORDS - APPENDS) as u32;
    println!(
        "filled to {VERIFY_RECORDS} records ({:.1} MB log), mean append {:.1} us",
        std::fs::metadata(state.path().join("audit/log.jsonl")).unwrap().len() as f64 / 1e6,
        per.as_secs_f64() * 1e6
    );
    drop(log);

    let mut runs = Vec::with_capacity(VERIFY_RUNS);
    for _ in 0..VERIFY_RUNS {
        let start = Instant::now();
        let report = verify(state.path()).expect("verify");
        runs.push(start.elapsed());
        assert_eq!(report.problem, None, "bench log must verify");
        assert_eq!(report.records, VERIFY_RECORDS);
    }
    println!(
        "verify {VERIFY_RECORDS} records x{VERIFY_RUNS}: median {:.0} ms (min {:.0} ms)",
        median(&mut runs).as_secs_f64() * 1e3,
        runs[0].as_secs_f64() * 1e3,
    );
}
