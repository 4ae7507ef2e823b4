//! Gate throughput on realistic agent commands, and time against input length.
//! `cargo bench --bench gate` prints medians of 15 batches; nothing is asserted.

use std::path::Path;
use std::time::Instant;
use tether_exec::gate::{decide, Context, Input};
use tether_exec::policy::{Layer, Policy};

const COMMANDS: &[&str] = &[
    "pytest -q && ruff check .",
    "git diff | head -50",
    "cargo test 2>&1 | tail",
    "cd src && ls",
    "git status --short",
    "grep -rn TODO src/ | wc -l",
    "python3 -m pytest tests/test_api.py -x -k login",
    "timeout 60 npm test",
];

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let policy = Policy::new(
        vec![Layer::load(Path::new("policies/workspace-write.toml")).unwrap()],
        vec![],
    );
    let ctx = Context::new(Path::new("/ws"), Path::new("/ws"));
    let per_batch = 20_000;
    let mut rates = Vec::new();
    for _ in 0..15 {
        let t = Instant::now();
        for i in 0..per_batch {
            let d = decide(&policy, Input::Script(COMMANDS[i % COMMANDS.len()]), &ctx).unwrap();
            std::hint::black_box(d);
        }
        rates.push(per_batch as f64 / t.elapsed().as_secs_f64());
    }
    println!(
        "typical one-line commands: median {:.0} decisions/s (one core)",
        median(rates)
    );
    for n in [1usize, 10, 100, 1000] {
        let script = vec!["git status && ls -la | head"; n].join("; ");
        let reps = (2000 / n).max(5);
        let mut per = Vec::new();
        for _ in 0..7 {
            let t = Instant::now();
            for _ in 0..reps {
                std::hint::black_box(decide(&policy, Input::Script(&script), &ctx).unwrap());
            }
            per.push(t.elapsed().as_secs_f64() * 1e6 / reps as f64);
        }
        let m = median(per);
        println!(
            "{:>5} statements ({:>6} bytes): median {:>10.1} us per decision, {:.2} us per statement",
            n,
            script.len(),
            m,
            m / n as f64
        );
    }
}
