//! Property tests for the gate's two laws:
//! 1. narrowing never widens: a child layer never allows a command or a write
//!    that its parent does not;
//! 2. a denied fragment anywhere reachable means the script is not allowed.

use proptest::prelude::*;
use std::path::Path;
use tether_exec::gate::{decide, Context, Input};
use tether_exec::policy::{Format, Layer, Policy, Verdict};

const VOCAB: &[&str] = &[
    "ls",
    "cat",
    "git status",
    "git push",
    "git",
    "rm",
    "rm -rf",
    "pytest",
    "curl",
    "echo",
    "make test",
    "python3",
];
const COMMANDS: &[&str] = &[
    "ls -la",
    "cat a",
    "git status",
    "git push origin",
    "git log",
    "rm -rf x",
    "rm x",
    "pytest -q",
    "curl x",
    "echo hi",
    "make test",
    "make",
    "python3 x.py",
    "timeout 5 git push",
    "env rm x",
    "bash -c 'curl x'",
    "ls > out.txt",
    "echo > docs/a.md",
    "echo > src/a.rs",
    "find . -exec rm {} \\;",
];
const GLOBS: &[&str] = &["docs/**", "src/*.rs", "**/*.md", "tests/**", "*.txt"];
const PATHS: &[&str] = &[
    "docs/a.md",
    "src/a.rs",
    "src/x/b.rs",
    "README.md",
    "tests/t.py",
    "out.txt",
    "a/b/c.txt",
];

fn layer_strategy() -> impl Strategy<Value = String> {
    let list = || proptest::sample::subsequence(VOCAB.to_vec(), 0..4);
    (
        list(),
        list(),
        list(),
        0..3u8,
        proptest::option::of(proptest::sample::subsequence(GLOBS.to_vec(), 0..3)),
        any::<bool>(),
    )
        .prop_map(|(allow, ask, deny, default, globs, ro)| {
            // A prefix sits in one list only (contradictions are load errors).
            let ask: Vec<_> = ask.into_iter().filter(|r| !allow.contains(r)).collect();
            let deny: Vec<_> = deny
                .into_iter()
                .filter(|r| !allow.contains(r) && !ask.contains(r))
                .collect();
            let q = |v: &[&str]| v.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(", ");
            let mut t = format!(
                "bash_allow_prefixes = [{}]\nrequire_approval_for = [{}]\ndeny = [{}]\ndefault = {:?}\n",
                q(&allow),
                q(&ask),
                q(&deny),
                ["allow", "ask", "deny"][default as usize]
            );
            if let Some(g) = globs {
                t.push_str(&format!("writable_globs = [{}]\n", q(&g)));
            }
            if ro {
                t.push_str("profile = \"read-only\"\n");
            }
            t
        })
}

fn ctx() -> Context {
    Context::new(Path::new("/ws"), Path::new("/ws"))
}

fn layer(t: &str) -> Layer {
    Layer::parse(t, "gen", Format::Toml).unwrap_or_else(|e| panic!("{e}\n{t}"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn narrowing_never_widens(parent in layer_strategy(), child in layer_strategy(), cmd in proptest::sample::select(COMMANDS), path in proptest::sample::select(PATHS)) {
        let p = Policy::new(vec![layer(&parent)], vec![]);
        let pc = Policy::new(vec![layer(&parent), layer(&child)], vec![]);
        let dp = decide(&p, Input::Script(cmd), &ctx()).unwrap().decision;
        let dpc = decide(&pc, Input::Script(cmd), &ctx()).unwrap().decision;
        prop_assert!(dpc >= dp, "{cmd}: parent {dp}, narrowed {dpc}");
        if pc.path_globs().writable(path) {
            prop_assert!(p.path_globs().writable(path), "{path} writable only after narrowing");
        }
        prop_assert!(pc.profile() >= p.profile());
        prop_assert!(!pc.network() || p.network());
    }

    #[test]
    fn a_denied_fragment_anywhere_is_never_allowed(
        base in proptest::sample::subsequence(vec!["ls -la", "git status", "pytest -q", "echo hi", "cat a | head"], 1..4),
        wrap in 0..14usize,
        pos in 0..4usize,
    ) {
        let policy = Policy::new(vec![layer("bash_allow_prefixes = [\"ls\", \"git status\", \"pytest\", \"echo\", \"cat\", \"head\", \"bash\", \"timeout\", \"env\", \"xargs\", \"find\"]\ndeny = [\"curl\"]\ndefault = \"allow\"")], vec![]);
        let denied = "curl evil";
        let fragment = match wrap {
            0 => denied.to_string(),
            1 => format!("echo $({denied})"),
            2 => format!("echo `{denied}`"),
            3 => format!("bash -c '{denied}'"),
            4 => format!("({denied})"),
            5 => format!("{{ {denied}; }}"),
            6 => format!("timeout 5 {denied}"),
            7 => format!("env A=1 {denied}"),
            8 => format!("if true; then {denied}; fi"),
            9 => format!("cat <({denied})"),
            10 => format!("f() {{ {denied}; }}"),
            11 => format!("find . -exec {denied} \\;"),
            12 => format!("echo x | xargs {denied}"),
            _ => format!("for i in 1; do {denied}; done"),
        };
        let mut parts: Vec<String> = base.iter().map(|s| s.to_string()).collect();
        let at = pos.min(parts.len());
        parts.insert(at, fragment);
        for sep in [" ; ", " && ", " || ", " | ", " & ", "\n"] {
            let script = parts.join(sep);
            let d = decide(&policy, Input::Script(&script), &ctx()).unwrap();
            prop_assert!(d.decision != Verdict::Allow, "allowed: {script:?}");
        }
    }

    #[test]
    fn arithmetic_never_reads_a_value_put_together_at_run_time(
        pieces in proptest::sample::subsequence(vec!["'a[$'", "\"$x\"", "'(curl evil)]'", "$(cat f)", "PATH=7", "${y}"], 1..4),
        append in any::<bool>(),
        context in 0..9usize,
    ) {
        // However a value is built, arithmetic that reads it may evaluate
        // `a[$(cmd)]` or assign PATH: only integers are let through.
        let policy = Policy::new(vec![layer("deny = [\"curl\"]\ndefault = \"allow\"")], vec![]);
        let build = if append {
            let mut s = String::from("v=");
            s.push_str(&pieces.join("; v+="));
            s
        } else {
            format!("v={}", pieces.concat())
        };
        let used = match context {
            0 => "(( v ))",
            1 => "echo $(( v ))",
            2 => "echo $(( $v ))",
            3 => "[[ v -eq 0 ]]",
            4 => "echo ${b[v]}",
            5 => "echo ${s:v}",
            6 => "let n=v",
            7 => "declare -i n; n=$v",
            _ => "for ((i=v; i<1; i++)); do :; done",
        };
        let script = format!("x=$; {build}; {used}; ls");
        let d = decide(&policy, Input::Script(&script), &ctx()).unwrap();
        prop_assert!(d.decision != Verdict::Allow, "allowed: {script:?}");
    }

    #[test]
    fn arithmetic_never_reads_a_name_put_together_at_run_time(
        join in 0..6usize,
        context in 0..10usize,
    ) {
        // `w$x` with x=1 is the name w1 once expanded, whose value bash
        // evaluates in turn: a name built at run time is never let through.
        let policy = Policy::new(vec![layer("deny = [\"curl\"]\ndefault = \"allow\"")], vec![]);
        let name = ["w$x", "w\"$x\"", "w''$x", "${x/#/w}", "$'w'$x", "w${x}"][join];
        let used = match context {
            0 => format!("(( {name} ))"),
            1 => format!("echo $(( {name} ))"),
            2 => format!("[[ {name} -eq 0 ]]"),
            3 => format!("echo ${{b[{name}]}}"),
            4 => format!("echo ${{s:{name}}}"),
            5 => format!("let \"n={name}\""),
            6 => format!("[[ -v b[{name}] ]]"),
            7 => format!("b=([{name}]=1)"),
            8 => format!("echo ${{s/a/$(( {name} ))}}"),
            _ => format!("for ((i={name}; i<1; i++)); do :; done"),
        };
        let script = format!("p=\"\\$\"; w1=\"a[${{p}}(curl evil)]\"; w=0; x=1; s=abc; {used}; ls");
        let d = decide(&policy, Input::Script(&script), &ctx()).unwrap();
        prop_assert!(d.decision != Verdict::Allow, "allowed: {script:?}");
    }

    #[test]
    fn the_gate_is_total_on_arbitrary_input(s in "\\PC{0,200}") {
        let policy = Policy::new(vec![layer("deny = [\"curl\"]\ndefault = \"allow\"")], vec![]);
        let _ = decide(&policy, Input::Script(&s), &ctx());
    }
}
