//! Generate the man pages and shell completions from the CLI definition.
//! `scripts/gen-docs.sh` runs it: `cargo run --example gen-docs -- OUT_DIR`.

use clap::CommandFactory;
use std::path::PathBuf;

fn main() -> std::io::Result<()> {
    let out = PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| "target/docs".into()));
    let man = out.join("man");
    let completions = out.join("completions");
    std::fs::create_dir_all(&man)?;
    std::fs::create_dir_all(&completions)?;
    let cmd = tether_exec::cli::Cli::command();
    clap_mangen::generate_to(cmd.clone(), &man)?;
    for shell in [
        clap_complete::Shell::Bash,
        clap_complete::Shell::Zsh,
        clap_complete::Shell::Fish,
    ] {
        clap_complete::generate_to(shell, &mut cmd.clone(), "tether-exec", &completions)?;
    }
    println!(
        "man pages in {}, completions in {}",
        man.display(),
        completions.display()
    );
    Ok(())
}
