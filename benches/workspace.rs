//! Cost of the workspace fingerprint an approval binds to, at 10,000 and
//! 100,000 files. `cargo bench --bench workspace` prints medians of 5.

use std::time::Instant;

fn main() {
    for n in [10_000usize, 100_000] {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..n {
            let sub = dir.path().join(format!("d{}", i / 1000));
            if i % 1000 == 0 {
                std::fs::create_dir(&sub).unwrap();
            }
            std::fs::write(sub.join(format!("f{i}.txt")), b"x").unwrap();
        }
        let mut times: Vec<f64> = (0..5)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(tether_exec::workspace::fingerprint(dir.path(), &[]).unwrap());
                t.elapsed().as_secs_f64() * 1000.0
            })
            .collect();
        times.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!("fingerprint of {n:>7} files: median {:.1} ms", times[2]);
    }
}
