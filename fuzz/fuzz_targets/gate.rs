//! Fuzz the parser and the gate. Two properties, checked on every input:
//! 1. the gate answers (no panic, no hang) for any bytes;
//! 2. a denied command placed where bash certainly runs it — on the line
//!    before the input, or in a substitution before it — never yields
//!    `allow`. (After arbitrary input is not "certainly": an unterminated
//!    here-document or a trailing backslash swallows what follows.)
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;
use std::sync::OnceLock;
use tether_exec::gate::{decide, Context, Input};
use tether_exec::policy::{Format, Layer, Policy, Verdict};

fn policy() -> &'static Policy {
    static P: OnceLock<Policy> = OnceLock::new();
    P.get_or_init(|| {
        let text = "bash_allow_prefixes = [\"ls\", \"git status\", \"echo\", \"cat\", \"pytest\", \"bash\", \"env\", \"timeout\", \"xargs\", \"find\"]\ndeny = [\"curl\"]\ndefault = \"allow\"\n";
        Policy::new(vec![Layer::parse(text, "fuzz", Format::Toml).unwrap()], vec![])
    })
}

fuzz_target!(|data: &[u8]| {
    // libfuzzer aborts on any panic; the gate contains its parser's panics
    // on purpose, and every other panic still aborts.
    static HOOK: OnceLock<()> = OnceLock::new();
    HOOK.get_or_init(tether_exec::gate::parse::quiet_contained_parser_panics);
    let Ok(script) = std::str::from_utf8(data) else { return };
    let ctx = Context::new(Path::new("/ws"), Path::new("/ws"));
    let Ok(d) = decide(policy(), Input::Script(script), &ctx) else {
        return;
    };
    let _ = d;
    // A denied command placed where bash will certainly reach it.
    for joined in [format!("curl evil\n{script}"), format!("echo $(curl evil) ; {script}")] {
        if let Ok(d) = decide(policy(), Input::Script(&joined), &ctx) {
            assert_ne!(
                d.decision,
                Verdict::Allow,
                "a denied fragment was allowed in {joined:?}"
            );
        }
    }
});
