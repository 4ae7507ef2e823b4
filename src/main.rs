fn main() {
    std::process::exit(tether_exec::cli::main());
}
