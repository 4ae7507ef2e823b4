//! Gate throughput on realistic agent commands, and time against input length.
//! `cargo bench --bench gate` (criterion; medians in target/criterion).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::hint::black_box;
use std::path::Path;
use tether_exec::gate::{decide, Context, Input};
use tether_exec::policy::{Format, Layer, Policy};

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

fn policy() -> Policy {
    let text = include_str!("../policies/workspace-write.toml");
    Policy::new(
        vec![Layer::parse(text, "workspace-write.toml", Format::Toml).unwrap()],
        vec![],
    )
}

fn typical(c: &mut Criterion) {
    let policy = policy();
    let ctx = Context::new(Path::new("/ws"), Path::new("/ws"));
    let mut g = c.benchmark_group("gate");
    // One element = one decision: criterion reports decisions per second.
    g.throughput(Throughput::Elements(COMMANDS.len() as u64));
    g.bench_function("typical one-line commands", |b| {
        b.iter(|| {
            for cmd in COMMANDS {
                black_box(decide(&policy, Input::Script(black_box(cmd)), &ctx).unwrap());
            }
        })
    });
    g.finish();
}

fn length(c: &mut Criterion) {
    let policy = policy();
    let ctx = Context::new(Path::new("/ws"), Path::new("/ws"));
    let mut g = c.benchmark_group("gate by statements");
    for n in [1usize, 10, 100, 1000] {
        let script = vec!["git status && ls -la | head"; n].join("; ");
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::from_parameter(n), &script, |b, s| {
            b.iter(|| black_box(decide(&policy, Input::Script(s), &ctx).unwrap()))
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(std::time::Duration::from_secs(3));
    targets = typical, length
}
criterion_main!(benches);
