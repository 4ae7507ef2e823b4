//! Seeing through wrappers: what program a simple command really runs.
//!
//! `env FOO=1 timeout 5 nice -n 2 git -C sub status` runs `git status`. Each
//! wrapper's options are parsed exactly (an unknown option stops the unwrap and
//! makes the command ask), and the wrapper's own words are kept too, so a rule
//! that denies `sudo` or `timeout` still fires. Shells given `-c SCRIPT` are
//! parsed again as scripts; `find -exec` and `xargs` contribute the command
//! they run.

use super::parse::Word;

/// Directories whose programs are the system's own: `/usr/bin/git` is `git`.
const SYSTEM_BIN_DIRS: &[&str] = &[
    "/usr/bin",
    "/bin",
    "/usr/sbin",
    "/sbin",
    "/usr/local/bin",
    "/usr/local/sbin",
];

/// Shells that take `-c SCRIPT`.
pub const SHELLS: &[&str] = &[
    "bash", "sh", "dash", "zsh", "ksh", "mksh", "ash", "yash", "rbash", "posh", "fish", "csh", "tcsh",
];

/// Who reads a command string a program hands to `$SHELL -c` (`flock -c`,
/// `script -c`) or to the user's login shell (`su -c`): a shell only known
/// at run time.
pub const RUN_TIME_SHELL: &str = "$SHELL";

/// Whether a shell reads scripts with bash's grammar, the one the gate parses.
pub fn reads_bash_grammar(shell: &str) -> bool {
    matches!(shell, "bash" | "rbash")
}

/// Why a script a shell reads cannot be judged by bash's grammar at all:
/// zsh runs `=rm` as `/usr/bin/rm` and `noglob rm` as rm, fish runs
/// `and rm` and `(rm)`, csh has a grammar of its own; `$SHELL` may be any.
/// POSIX shells (sh, dash, ksh, ...) are judged, asking where the script
/// uses bash's own syntax.
pub fn grammar_unlike_bash(shell: &str) -> Option<String> {
    match shell {
        "zsh" | "fish" | "csh" | "tcsh" => Some(format!(
            "`{shell}` reads scripts with a grammar of its own, which the gate does not parse"
        )),
        RUN_TIME_SHELL => Some(
            "the command string runs with $SHELL or a login shell, a shell only known at run time (zsh and fish read other grammars)"
                .into(),
        ),
        _ => None,
    }
}

/// Programs that execute code they read from standard input.
pub fn is_interpreter(prog: &str) -> bool {
    SHELLS.contains(&prog)
        || matches!(
            prog,
            "python"
                | "python2"
                | "python3"
                | "perl"
                | "ruby"
                | "node"
                | "nodejs"
                | "php"
                | "lua"
                | "tclsh"
                | "fish"
                | "pwsh"
                | "busybox"
                | "deno"
                | "bun"
                | "irb"
                | "R"
                | "Rscript"
                | "ed"
                | "make"
                | "gmake"
        )
        || (prog.starts_with("python3.") && prog[8..].chars().all(|c| c.is_ascii_digit()))
}

/// The program a command word names, normalised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Program {
    /// `git` for `git` and `/usr/bin/git`; the path as written for anything else.
    pub name: String,
    /// The last path component, used by deny/ask rules so `./rm` is still `rm` to them.
    pub base: String,
}

pub fn program(word: &str) -> Program {
    if let Some((dir, base)) = word.rsplit_once('/') {
        let dir = if dir.is_empty() { "/" } else { dir };
        let name = if SYSTEM_BIN_DIRS.contains(&dir) && !base.is_empty() {
            base.to_string()
        } else {
            word.to_string()
        };
        Program {
            name,
            base: base.to_string(),
        }
    } else {
        Program {
            name: word.to_string(),
            base: word.to_string(),
        }
    }
}

/// What unwrapping one level found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unwrapped {
    /// Not a wrapper, or a wrapper with nothing to run (`env` alone prints).
    Final,
    /// The wrapped command starts at this index, and the wrapper itself asks.
    InnerAsk(usize, String),
    /// The wrapped command starts at this index.
    Inner(usize),
    /// The wrapper itself must be asked about, with the reason.
    Ask(String),
    /// A program that can run another from its arguments, whose options the
    /// gate does not parse: it asks unless an allow rule names it, and
    /// every program named in its arguments is held to the deny and ask rules.
    Unparsed(String),
    /// A shell running a script given as a string.
    Script { index: usize },
    /// Words joined and run by `sh -c` (watch).
    JoinedScript { from: usize },
    /// A write the wrapper performs (`time -o FILE`), plus the inner start.
    InnerWithWrite { inner: usize, file: usize },
}

fn lit(words: &[Word], i: usize) -> Option<&str> {
    words.get(i).and_then(Word::lit)
}

/// Parse the options of a wrapper. `flags` take no value, `valued` take one
/// (as the next word or `--opt=value` / `-oVALUE`). Returns the index of the
/// first operand, or an ask reason.
fn skip_options(words: &[Word], start: usize, flags: &[&str], valued: &[&str], who: &str) -> Result<usize, String> {
    skip_options_with_optional(words, start, flags, &[], valued, who)
}

/// [`skip_options`] for a program whose short options in `optional` take a
/// value only attached (`xargs -i`, `-iR`): in a cluster such an option takes
/// the rest of the word, never the next one (`-iI` is `-i` with `I`).
fn skip_options_with_optional(
    words: &[Word],
    start: usize,
    flags: &[&str],
    optional: &[&str],
    valued: &[&str],
    who: &str,
) -> Result<usize, String> {
    parse_options(words, start, flags, optional, valued, who).map(|o| o.operand)
}

/// A wrapper's options as getopt reads them, up to its first operand.
struct Options {
    /// The index of the first operand.
    operand: usize,
    /// Every option given, by the name it is listed under (`-x` for the
    /// `x` of `-bx`, `--exec` for `--exec=...`).
    given: Vec<String>,
}

impl Options {
    fn has(&self, any_of: &[&str]) -> bool {
        self.given.iter().any(|g| any_of.contains(&g.as_str()))
    }
}

/// [`skip_options_with_optional`], keeping the options it read: options
/// count only before the operand where getopt stops (`watch cmd -x`
/// passes `-x` on to the command).
fn parse_options(
    words: &[Word],
    start: usize,
    flags: &[&str],
    optional: &[&str],
    valued: &[&str],
    who: &str,
) -> Result<Options, String> {
    let mut given = Vec::new();
    let mut i = start;
    while i < words.len() {
        let Some(w) = lit(words, i) else {
            return Err(format!(
                "`{who}` has a non-literal option; the gate cannot tell what it runs"
            ));
        };
        if w == "--" {
            return Ok(Options { operand: i + 1, given });
        }
        if !w.starts_with('-') || w == "-" {
            return Ok(Options { operand: i, given });
        }
        if flags.contains(&w) || optional.contains(&w) {
            given.push(w.to_string());
            i += 1;
            continue;
        }
        if valued.contains(&w) {
            given.push(w.to_string());
            i += 2;
            continue;
        }
        if let Some((opt, _)) = w.split_once('=') {
            if valued.contains(&opt) && opt.starts_with("--") {
                given.push(opt.to_string());
                i += 1;
                continue;
            }
        }
        // A cluster of short options, as getopt reads it: flags, then at
        // most one that takes a value, the rest of the word or the next
        // (`-rt`, `-n10`, `-0I{}`, `-rI {}`).
        if !w.starts_with("--") {
            let mut next = None;
            let mut cluster = Vec::new();
            for (at, c) in w.char_indices().skip(1) {
                let opt = format!("-{c}");
                if flags.contains(&opt.as_str()) {
                    cluster.push(opt);
                    continue;
                }
                if optional.contains(&opt.as_str()) {
                    cluster.push(opt);
                    next = Some(i + 1);
                    break;
                }
                if valued.contains(&opt.as_str()) {
                    cluster.push(opt);
                    next = Some(if at + c.len_utf8() < w.len() { i + 1 } else { i + 2 });
                }
                break;
            }
            let all_flags = w[1..].chars().all(|c| flags.contains(&format!("-{c}").as_str()));
            if let Some(n) = next.or(all_flags.then_some(i + 1)) {
                given.extend(cluster);
                i = n;
                continue;
            }
        }
        return Err(format!(
            "`{who}` option `{w}` is not one the gate knows; it cannot tell what runs"
        ));
    }
    Ok(Options { operand: i, given })
}

/// `NAME=VALUE` words from `start` on, which set the environment of the
/// command after them (`env X=1 cmd`, `sudo X=1 cmd`). The command starts
/// after them; one that changes what programs run asks. Every word with an
/// `=` counts, whatever precedes it: env and sudo take `=x` and `==x` as
/// settings too, and run the command after them.
fn after_assignments(words: &[Word], start: usize, who: &str) -> Unwrapped {
    let mut i = start;
    let mut ask = None;
    while let Some((name, _)) = lit(words, i).and_then(|w| w.split_once('=')) {
        if super::is_dangerous_env(name) && ask.is_none() {
            ask = Some(format!("`{who}` sets {name}, which changes what programs run"));
        }
        i += 1;
    }
    match (i < words.len(), ask) {
        (true, Some(why)) => Unwrapped::InnerAsk(i, why),
        (true, None) => Unwrapped::Inner(i),
        (false, Some(why)) => Unwrapped::Ask(why),
        (false, None) => Unwrapped::Final,
    }
}

/// Unwrap one level: is `words[0]` (normalised to `prog`) a wrapper?
pub fn unwrap(prog: &str, words: &[Word]) -> Unwrapped {
    let inner_or_final = |r: Result<usize, String>| match r {
        Ok(i) if i < words.len() => Unwrapped::Inner(i),
        Ok(_) => Unwrapped::Final,
        Err(e) => Unwrapped::Ask(e),
    };
    match prog {
        "env" => {
            let mut i = 1;
            while i < words.len() {
                let Some(w) = lit(words, i) else {
                    return Unwrapped::Ask("`env` has a non-literal argument".into());
                };
                match w {
                    "-i" | "--ignore-environment" | "-0" | "--null" | "-v" | "--debug" | "-" => i += 1,
                    "-u" | "--unset" | "-C" | "--chdir" => i += 2,
                    // Options end here; assignments do not.
                    "--" => return after_assignments(words, i + 1, "env"),
                    "-S" | "--split-string" => {
                        return Unwrapped::Ask("`env -S` splits a string into a command line".into())
                    }
                    _ if w.starts_with("--unset=")
                        || w.starts_with("--chdir=")
                        || (w.starts_with("-u") && w.len() > 2) =>
                    {
                        i += 1
                    }
                    _ if w.starts_with("-S") || w.starts_with("--split-string=") => {
                        return Unwrapped::Ask("`env -S` splits a string into a command line".into())
                    }
                    _ if w.starts_with('-') => {
                        return Unwrapped::Ask(format!("`env` option `{w}` is not one the gate knows"))
                    }
                    _ => break,
                }
            }
            after_assignments(words, i, "env")
        }
        "timeout" => match skip_options(
            words,
            1,
            &["--preserve-status", "--foreground", "-v", "--verbose", "-f", "-p"],
            &["-s", "--signal", "-k", "--kill-after"],
            "timeout",
        ) {
            // The first operand is the duration.
            Ok(i) if i + 1 < words.len() => Unwrapped::Inner(i + 1),
            Ok(_) => Unwrapped::Final,
            Err(e) => Unwrapped::Ask(e),
        },
        "nice" => {
            // `nice -5 cmd` is an old spelling of `-n 5`.
            let start = match lit(words, 1) {
                Some(w) if w.len() > 1 && w.starts_with('-') && w[1..].chars().all(|c| c.is_ascii_digit()) => 2,
                _ => 1,
            };
            inner_or_final(skip_options(words, start, &[], &["-n", "--adjustment"], "nice"))
        }
        "nohup" | "builtin" => inner_or_final(skip_options(words, 1, &[], &[], prog)),
        "setsid" => inner_or_final(skip_options(
            words,
            1,
            &["-c", "--ctty", "-f", "--fork", "-w", "--wait"],
            &[],
            "setsid",
        )),
        "stdbuf" => inner_or_final(skip_options(
            words,
            1,
            &[],
            &["-i", "-o", "-e", "--input", "--output", "--error"],
            "stdbuf",
        )),
        "ionice" => {
            const IDS: &[&str] = &["-p", "--pid", "-P", "--pgid", "-u", "--uid"];
            let mut valued = vec!["-c", "--class", "-n", "--classdata"];
            valued.extend(IDS);
            match parse_options(words, 1, &["-t", "--ignore"], &[], &valued, "ionice") {
                // Given process, group or user ids among its options (it
                // stops at its first operand), ionice runs nothing.
                Ok(o) if o.has(IDS) => Unwrapped::Final,
                r => inner_or_final(r.map(|o| o.operand)),
            }
        }
        "time" => {
            let r = skip_options(
                words,
                1,
                &[
                    "-p",
                    "--portability",
                    "-v",
                    "--verbose",
                    "-a",
                    "--append",
                    "-q",
                    "--quiet",
                ],
                &["-f", "--format", "-o", "--output"],
                "time",
            );
            let out = words.iter().position(|w| matches!(w.lit(), Some("-o" | "--output")));
            match (r, out) {
                (Ok(i), Some(o)) if i < words.len() && o + 1 < i => Unwrapped::InnerWithWrite { inner: i, file: o + 1 },
                (Ok(_), Some(_)) | (Err(_), Some(_)) => {
                    Unwrapped::Ask("`time -o`/`--output=` writes a file the gate cannot place".into())
                }
                (r, None) => inner_or_final(r),
            }
        }
        "command" => {
            if words
                .iter()
                .skip(1)
                .take_while(|w| w.lit().is_some_and(|s| s.starts_with('-')))
                .any(|w| matches!(w.lit(), Some("-v" | "-V")))
            {
                return Unwrapped::Final; // `command -v x` only looks x up
            }
            inner_or_final(skip_options(words, 1, &["-p"], &[], "command"))
        }
        "exec" => inner_or_final(skip_options(words, 1, &["-c", "-l", "-cl", "-lc"], &["-a"], "exec")),
        "xargs" => inner_or_final(skip_options_with_optional(
            words,
            1,
            &[
                "-0",
                "--null",
                "-r",
                "--no-run-if-empty",
                "-t",
                "--verbose",
                "-p",
                "--interactive",
                "-x",
                "--exit",
                "--show-limits",
                "-o",
                "--open-tty",
                // Their values are optional, attached with `=` only.
                "--replace",
                "--eof",
                "--max-lines",
            ],
            // Their values are optional, attached only (`-iR`, `-e`).
            &["-i", "-e", "-l"],
            &[
                "-a",
                "--arg-file",
                "-d",
                "--delimiter",
                "-E",
                "-I",
                "-L",
                "-n",
                "--max-args",
                "-P",
                "--max-procs",
                "-s",
                "--max-chars",
                "--process-slot-var",
            ],
            "xargs",
        )),
        "sudo" | "doas" => {
            let shell_flag = words
                .iter()
                .skip(1)
                .take_while(|w| w.lit().is_some_and(|s| s.starts_with('-')))
                .any(|w| {
                    matches!(w.lit(), Some("-s" | "-i" | "--shell" | "--login"))
                        || w.lit().is_some_and(|s| {
                            !s.starts_with("--")
                                && s.len() > 2
                                && (s.contains('s') || s.contains('i'))
                                && s[1..].chars().all(|c| c.is_ascii_alphabetic())
                        })
                });
            if shell_flag {
                return Unwrapped::Ask(format!("`{prog}` starts a shell"));
            }
            // `sudo FOO=1 cmd`: assignments after the options set the
            // command's environment; the command follows them.
            match skip_options(
                words,
                1,
                &[
                    "-E",
                    "-H",
                    "-n",
                    "-S",
                    "-b",
                    "-k",
                    "-K",
                    "-P",
                    "-A",
                    "-B",
                    "--preserve-env",
                    "--non-interactive",
                    "--stdin",
                    "--background",
                    "--reset-timestamp",
                ],
                &[
                    "-u",
                    "-g",
                    "-h",
                    "-p",
                    "-C",
                    "-r",
                    "-t",
                    "-U",
                    "-D",
                    "-T",
                    "--user",
                    "--group",
                    "--host",
                    "--prompt",
                    "--close-from",
                    "--role",
                    "--type",
                    "--other-user",
                    "--chdir",
                    "--command-timeout",
                ],
                prog,
            ) {
                Ok(i) => after_assignments(words, i, prog),
                Err(e) => Unwrapped::Ask(e),
            }
        }
        "watch" => match parse_options(
            words,
            1,
            &[
                "-b",
                "--beep",
                "-c",
                "--color",
                "-C",
                "--no-color",
                "-d",
                "-e",
                "--errexit",
                "-g",
                "--chgexit",
                "-t",
                "--no-title",
                "-w",
                "--no-wrap",
                "-p",
                "--precise",
                "-r",
                "--no-rerun",
                "-x",
                "--exec",
            ],
            &[],
            &["-n", "--interval", "-q", "--equexit"],
            "watch",
        ) {
            // `-x` counts only among watch's options: after the command
            // it is one more word of the text `sh -c` runs.
            Ok(o) if o.operand < words.len() && o.has(&["-x", "--exec"]) => Unwrapped::Inner(o.operand),
            Ok(o) if o.operand < words.len() => Unwrapped::JoinedScript { from: o.operand },
            Ok(_) => Unwrapped::Final,
            Err(e) => Unwrapped::Ask(e),
        },
        _ if SHELLS.contains(&prog) => shell(prog, words),
        "tar" if tar_runs_a_program(words) => Unwrapped::Ask("`tar` is given an option that runs a program".into()),
        _ if is_dynamic_loader(prog) => Unwrapped::Unparsed(format!(
            "`{prog}`, the dynamic loader, runs the program its arguments name"
        )),
        "npm" if matches!(lit(words, 1), Some("exec" | "x")) => {
            Unwrapped::Unparsed("`npm exec` runs a command or package its arguments name".into())
        }
        _ if UNPARSED_EXEC_WRAPPERS.contains(&prog) => Unwrapped::Unparsed(format!(
            "`{prog}` can run a program given in its arguments, and the gate does not parse its options"
        )),
        _ => Unwrapped::Final,
    }
}

/// `bash [options] -c SCRIPT`, `bash FILE`, or a shell reading stdin.
fn shell(prog: &str, words: &[Word]) -> Unwrapped {
    let mut i = 1;
    let mut command_mode = false;
    while i < words.len() {
        let Some(w) = lit(words, i) else {
            if command_mode {
                break; // the script itself, judged by the caller
            }
            return Unwrapped::Ask(format!("`{prog}` has a non-literal option"));
        };
        if w == "--" || w == "-" {
            i += 1;
            break;
        }
        if let Some(long) = w.strip_prefix("--") {
            match long {
                "norc" | "noprofile" | "login" | "posix" | "verbose" | "noediting" | "debugger" | "dump-strings"
                | "pretty-print" => i += 1,
                "rcfile" | "init-file" => i += 2,
                "restricted" => i += 1,
                _ => return Unwrapped::Ask(format!("`{prog}` option `{w}` is not one the gate knows")),
            }
            continue;
        }
        if (w.starts_with('-') || w.starts_with('+')) && w.len() > 1 {
            let flags = &w[1..];
            if flags.contains('s') || flags.contains('i') {
                return Unwrapped::Ask(format!("`{prog} {w}` reads commands from standard input or a terminal"));
            }
            if flags.contains('k') || flags.contains('H') {
                return Unwrapped::Ask(format!("`{prog} {w}` changes how it reads its commands"));
            }
            if flags.contains('c') {
                command_mode = true;
            }
            // `-o OPTION` / `-O SHOPT` take a value.
            i += 1 + flags.chars().filter(|c| *c == 'o' || *c == 'O').count();
            continue;
        }
        break;
    }
    if command_mode {
        return if i < words.len() {
            Unwrapped::Script { index: i }
        } else {
            Unwrapped::Ask(format!("`{prog} -c` without a script"))
        };
    }
    if i < words.len() {
        // A script read from a pipe or descriptor is code fed on stdin, as
        // `bash -s` is: nothing the gate can read.
        match lit(words, i) {
            Some(f) if reads_a_stream(f) => Unwrapped::Ask(format!(
                "`{prog} {f}` runs commands it reads from a stream the gate cannot see"
            )),
            _ => Unwrapped::Final, // runs a script file; the rules for the shell decide
        }
    } else {
        Unwrapped::Ask(format!("`{prog}` without a script reads commands from standard input"))
    }
}

/// A path that names a stream rather than a file: standard input, an open
/// descriptor (`/dev/fd/3`, `/proc/self/fd/0`, `/proc/1234/fd/3`).
pub fn reads_a_stream(path: &str) -> bool {
    // However it is spelled (`/dev//stdin`, `/dev/./stdin`, `../../dev/stdin`,
    // `/proc/self/root/dev/stdin`, `/proc/self/./fd/0`).
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty() && *p != ".").collect();
    parts.windows(2).any(|w| {
        matches!(w, ["dev", "stdin" | "tty" | "fd" | "tcp" | "udp"])
            || (w[1] == "fd" && (w[0] == "self" || w[0] == "thread-self" || w[0].chars().all(|c| c.is_ascii_digit())))
    })
}

/// Programs that run another program given in their arguments, whose
/// options the gate does not parse: what they run is not understood, so
/// they ask (a deny rule naming the program itself still denies).
pub const UNPARSED_EXEC_WRAPPERS: &[&str] = &[
    "ld.so",
    "x86_64",
    "i386",
    "i686",
    "uname26",
    "npx",
    "taskset",
    "flock",
    "prlimit",
    "setarch",
    "linux32",
    "linux64",
    "setpriv",
    "unshare",
    "nsenter",
    "chrt",
    "fakeroot",
    "fakechroot",
    "valgrind",
    "strace",
    "ltrace",
    "gdb",
    "ssh-agent",
    "dbus-run-session",
    "dbus-launch",
    "sg",
    "newgrp",
    "su",
    "runuser",
    "script",
    "chroot",
    "busybox",
    "numactl",
    "cgexec",
    "systemd-run",
    "firejail",
    "bwrap",
    "proot",
    "torsocks",
    "proxychains",
    "proxychains4",
    "faketime",
    "catchsegv",
    "expect",
    "parallel",
    "entr",
    "pkexec",
    "sudoedit",
    "vim",
    "vi",
    "nvim",
    "ex",
    "emacs",
    "capsh",
    "hyperfine",
    // Others of their kind, and other names of the ones above.
    "perf",
    "tmux",
    "fakeroot-sysv",
    "fakeroot-tcp",
    "valgrind.bin",
    "gdbtui",
    "gdb-multiarch",
    "systemd-inhibit",
    "pg_virtualenv",
    "sem",
    "unbuffer",
    "xvfb-run",
    "chronic",
];

/// Command strings a program of [`UNPARSED_EXEC_WRAPPERS`] runs with a
/// shell (`flock LOCK -c 'make'`), and the shell that reads them.
pub struct CommandStrings {
    /// Each string: literal, or only known at run time.
    pub scripts: Vec<Word>,
    /// `sh`, or [`RUN_TIME_SHELL`].
    pub shell: &'static str,
}

/// How a program reads one of its options, for [`option_strings`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Opt {
    /// Its value is a command string.
    String,
    /// It takes a value that is no command.
    Value,
    Flag,
    /// The gate cannot follow what it makes the program run.
    Refused,
}

/// How a program reads a value attached to a short option.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ShortValue {
    /// getopt's way: the rest of the word, `=` included (`-c=x` is `=x`).
    AsGiven,
    /// clap's way: one `=` right after the letter is dropped (`-p='rm x'`
    /// is `rm x`).
    AfterEquals,
}

/// The command strings among a program's options (and, with
/// `operands_are_strings`, its operands), as getopt reads them: a short
/// option's value is the rest of its word (read as `attached` says) or the
/// next word, a long one's after `=` or the next word. Every word counts,
/// not only those before the first operand: reading more is judging more.
fn option_strings(
    words: &[Word],
    who: &str,
    short: impl Fn(char) -> Opt,
    long: impl Fn(&str) -> Opt,
    operands_are_strings: bool,
    attached: ShortValue,
) -> Result<Vec<Word>, String> {
    let mut out = Vec::new();
    let mut i = 1;
    let refused = |w: &str| Err(format!("`{who}` option `{w}` runs something the gate cannot follow"));
    while let Some(word) = words.get(i) {
        i += 1;
        let Some(w) = word.lit() else {
            return Err(format!(
                "`{who}` has a word only known at run time, which may be a command"
            ));
        };
        if let Some(name) = w.strip_prefix("--").filter(|n| !n.is_empty()) {
            let (name, value) = name.split_once('=').map_or((name, None), |(n, v)| (n, Some(v)));
            match long(name) {
                Opt::Refused => return refused(w),
                Opt::String => match value {
                    Some(v) => out.push(Word::Lit(v.to_string())),
                    None => {
                        out.extend(words.get(i).cloned());
                        i += 1;
                    }
                },
                Opt::Value if value.is_none() => i += 1,
                Opt::Value | Opt::Flag => {}
            }
        } else if let Some(cluster) = w.strip_prefix('-').filter(|c| !c.is_empty() && *c != "-") {
            for (at, c) in cluster.char_indices() {
                let rest = &cluster[at + c.len_utf8()..];
                match short(c) {
                    Opt::Flag => continue,
                    Opt::Refused => return refused(w),
                    Opt::String if !rest.is_empty() => {
                        let value = match attached {
                            ShortValue::AfterEquals => rest.strip_prefix('=').unwrap_or(rest),
                            ShortValue::AsGiven => rest,
                        };
                        out.push(Word::Lit(value.to_string()))
                    }
                    Opt::String => {
                        out.extend(words.get(i).cloned());
                        i += 1;
                    }
                    Opt::Value if rest.is_empty() => i += 1,
                    Opt::Value => {}
                }
                break;
            }
        } else if operands_are_strings && w != "--" {
            out.push(word.clone());
        }
    }
    Ok(out)
}

/// Whether `name` is a long option of `options`, or an abbreviation getopt
/// takes for one (`--com` for `--command`).
fn abbreviates(name: &str, options: &[&str]) -> bool {
    !name.is_empty() && options.iter().any(|o| o.starts_with(name))
}

/// The command strings a wrapper of [`UNPARSED_EXEC_WRAPPERS`] runs with a
/// shell, or why they cannot be picked out reliably. Wrappers that run only
/// a program and its arguments (`taskset 1 make`) have none.
pub fn command_strings(prog: &str, words: &[Word]) -> Result<CommandStrings, String> {
    let strings = |scripts, shell| Ok(CommandStrings { scripts, shell });
    let command_option = |c| if c == 'c' { Opt::String } else { Opt::Flag };
    match prog {
        // `flock LOCK -c COMMAND` (`-c` right after the lock file) runs it with $SHELL.
        "flock" => strings(
            option_strings(
                words,
                prog,
                command_option,
                |n| match n {
                    "command" => Opt::String,
                    _ => Opt::Flag,
                },
                false,
                ShortValue::AsGiven,
            )?,
            RUN_TIME_SHELL,
        ),
        // `script -c COMMAND` runs it with $SHELL; without one, an
        // interactive $SHELL reads commands from its input.
        "script" => {
            let scripts = option_strings(
                words,
                prog,
                command_option,
                |n| {
                    if abbreviates(n, &["command"]) {
                        Opt::String
                    } else {
                        Opt::Flag
                    }
                },
                false,
                ShortValue::AsGiven,
            )?;
            if scripts.is_empty() {
                return Err("`script` without `-c` runs a shell that reads commands from its input".into());
            }
            strings(scripts, RUN_TIME_SHELL)
        }
        // `su -c COMMAND` runs it with the login shell, as do words after
        // the user (`su root -c COMMAND`: they go to the shell); without
        // one, that shell reads commands from its input. `-s` names the shell.
        "su" | "runuser" => {
            let scripts = option_strings(
                words,
                prog,
                |c| match c {
                    'c' => Opt::String,
                    's' => Opt::Refused,
                    _ => Opt::Flag,
                },
                |n| {
                    if abbreviates(n, &["command", "session-command"]) {
                        Opt::String
                    } else if abbreviates(n, &["shell"]) {
                        Opt::Refused
                    } else {
                        Opt::Flag
                    }
                },
                false,
                ShortValue::AsGiven,
            )?;
            // `runuser -u USER cmd args` runs a program and its arguments.
            let runs_argv = prog == "runuser" && words.iter().any(|w| w.lit() == Some("-u"));
            if scripts.is_empty() && !runs_argv {
                return Err(format!(
                    "`{prog}` without `-c` starts a shell that reads commands from its input"
                ));
            }
            strings(scripts, RUN_TIME_SHELL)
        }
        // `sg [-] GROUP [-c] COMMAND` runs COMMAND with /bin/sh.
        "sg" => {
            let mut at = 1 + usize::from(lit(words, 1) == Some("-")) + 1;
            if lit(words, at) == Some("-c") {
                at += 1;
            }
            match words.get(at) {
                Some(command) => strings(vec![command.clone()], "sh"),
                None => Err("`sg` without a command starts a shell that reads commands from its input".into()),
            }
        }
        // Its operands and `--prepare`, `--setup`, ... run with `sh -c`;
        // `-L`/`-P` fill `{NAME}` in them at run time, `-S` names the shell.
        "hyperfine" => {
            let scripts = option_strings(
                words,
                prog,
                |c| match c {
                    's' | 'p' | 'c' => Opt::String,
                    'w' | 'm' | 'M' | 'r' | 'u' | 'n' => Opt::Value,
                    'N' | 'i' | 'h' | 'V' => Opt::Flag,
                    _ => Opt::Refused,
                },
                |n| match n {
                    "setup" | "prepare" | "cleanup" | "conclude" | "reference" => Opt::String,
                    "warmup"
                    | "min-runs"
                    | "max-runs"
                    | "runs"
                    | "time-unit"
                    | "command-name"
                    | "style"
                    | "sort"
                    | "export-asciidoc"
                    | "export-csv"
                    | "export-json"
                    | "export-markdown"
                    | "export-orgmode"
                    | "output"
                    | "input"
                    | "min-benchmarking-time" => Opt::Value,
                    "ignore-failure" | "show-output" | "help" | "version" => Opt::Flag,
                    _ => Opt::Refused,
                },
                true,
                // clap reads `-p=CMD` as `-p CMD`.
                ShortValue::AfterEquals,
            )?;
            strings(scripts, "sh")
        }
        // `perf stat --pre CMD`/`--post CMD` run CMD with `sh -c` (perf
        // takes any unambiguous abbreviation of a long option); `--objdump`,
        // `--addr2line` (report, annotate, top, ...) name a program it runs,
        // `--exec-path` the directory its subcommands are run from. Its
        // short options name no program: read as flags, a value they take
        // is one more word the rules see.
        "perf" => {
            let scripts = option_strings(
                words,
                prog,
                |_| Opt::Flag,
                |n| {
                    if abbreviates(n, &["objdump", "addr2line", "exec-path"]) {
                        Opt::Refused
                    } else if abbreviates(n, &["pre", "post"]) {
                        Opt::String
                    } else {
                        Opt::Flag
                    }
                },
                false,
                ShortValue::AsGiven,
            )?;
            strings(scripts, "sh")
        }
        "parallel" | "sem" => Err(format!(
            "`{prog}` fills its command in from its input and runs it with a shell"
        )),
        "newgrp" => Err("`newgrp` starts a shell that reads commands from its input".into()),
        "tmux" => tmux_only_reads(words).map(|()| CommandStrings {
            scripts: vec![],
            shell: "sh",
        }),
        "entr"
            if words
                .iter()
                .skip(1)
                .any(|w| w.lit().is_none_or(|w| w.starts_with('-') && w.contains('s'))) =>
        {
            Err("`entr -s` runs its command with $SHELL".into())
        }
        "capsh"
            if words
                .iter()
                .skip(1)
                .any(|w| w.lit().is_none_or(|w| w == "--" || w.starts_with("--shell"))) =>
        {
            Err("`capsh --` runs a shell with the words that follow".into())
        }
        "vim" | "vi" | "nvim" | "ex" | "emacs" => Err(format!(
            "`{prog}` runs commands from its options, the files it edits and its input"
        )),
        "expect" => expect_reads_a_file(words).map(|()| CommandStrings {
            scripts: vec![],
            shell: "sh",
        }),
        "gdb" | "gdbtui" | "gdb-multiarch" => gdb_runs_no_commands(prog, words).map(|()| CommandStrings {
            scripts: vec![],
            shell: "sh",
        }),
        _ => strings(vec![], "sh"),
    }
}

/// `tmux ls`, `tmux list-windows`, `tmux display-message -p`, `tmux
/// capture-pane -p`: commands that only report. Anything else asks: tmux
/// runs shell commands from its commands (`new-window CMD`, `run-shell`,
/// `if-shell`), its formats (`#(cmd)`, in `-F` and `display-message`
/// too), its configuration (`-f`, or a server it starts) and the keys it
/// sends; a `;` word chains another command.
fn tmux_only_reads(words: &[Word]) -> Result<(), String> {
    let why = |what: &str| {
        Err(format!(
            "`tmux` runs shell commands from its commands, formats (`#(...)`), configuration and keys; {what}"
        ))
    };
    let mut i = 1;
    // Its own options: flags, and `-L`/`-S`/`-T` with a value (`-f FILE`
    // is a configuration, `-c CMD` a shell command).
    while let Some(w) = words.get(i) {
        let Some(w) = w.lit() else {
            return why("a word is only known at run time");
        };
        if w == "--" {
            i += 1;
            break;
        }
        let Some(cluster) = w.strip_prefix('-').filter(|c| !c.is_empty()) else {
            break;
        };
        let mut next = i + 1;
        for (at, c) in cluster.char_indices() {
            match c {
                '2' | 'D' | 'l' | 'N' | 'u' | 'v' => continue,
                'L' | 'S' | 'T' => {
                    if at + 1 == cluster.len() {
                        next += 1;
                    }
                    break;
                }
                _ => return why(&format!("its option `{w}` is not one the gate lets through")),
            }
        }
        i = next;
    }
    let rest: Vec<&str> = words[i.min(words.len())..].iter().filter_map(Word::lit).collect();
    if rest.len() + i < words.len() {
        return why("a word is only known at run time");
    }
    if rest.iter().any(|w| w.contains("#(") || w.ends_with(';')) {
        return why("a format runs a command (`#(...)`) or a `;` chains another");
    }
    let Some((command, args)) = rest.split_first() else {
        return why("without a command it starts a session");
    };
    let has_flag = |letter: char| {
        args.iter()
            .any(|a| a.starts_with('-') && !a.starts_with("--") && a[1..].contains(letter))
    };
    let reads = match *command {
        "ls" | "list-sessions" | "lsw" | "list-windows" | "lsp" | "list-panes" | "lsc" | "list-clients" | "lsb"
        | "list-buffers" | "lsk" | "list-keys" | "lscm" | "list-commands" | "has" | "has-session" => true,
        "display" | "display-message" | "capturep" | "capture-pane" => has_flag('p'),
        _ => false,
    };
    if reads {
        Ok(())
    } else {
        why(&format!("`{command}` is not a command the gate knows to only report"))
    }
}

/// `expect FILE`: Tcl code from a file, judged by the rules for `expect`
/// as a shell's script file is. `-c CODE`, `-i` and standard input are code
/// the gate cannot read (`spawn`, `exec` run any program).
fn expect_reads_a_file(words: &[Word]) -> Result<(), String> {
    let why =
        || Err("`expect` runs Tcl code the gate cannot read (`-c`, `-i`, its input), which can run any program".into());
    let mut i = 1;
    while let Some(w) = words.get(i) {
        let Some(w) = w.lit() else { return why() };
        match w {
            "-" => return why(),
            "--" | "-f" => {
                return if words
                    .get(i + 1)
                    .is_some_and(|f| f.lit().is_some_and(|f| f != "-" && !reads_a_stream(f)))
                {
                    Ok(())
                } else {
                    why()
                }
            }
            "-D" => i += 2,
            _ if w.starts_with('-') && !w.contains(['c', 'i']) => i += 1,
            _ if w.starts_with('-') => return why(),
            _ => return if reads_a_stream(w) { why() } else { Ok(()) },
        }
    }
    why()
}

/// gdb runs its own commands (`shell CMD`, `python ...`, `pipe`) from
/// `-ex`, `-x FILE` and their kin, and, without `-batch`, from its input.
fn gdb_runs_no_commands(prog: &str, words: &[Word]) -> Result<(), String> {
    // Long ones in any abbreviation of three letters or more, with one dash or two.
    const COMMANDS: &[&str] = &[
        "eval-command",
        "init-eval-command",
        "early-init-eval-command",
        "command",
        "init-command",
        "early-init-command",
        "python",
    ];
    let mut batch = false;
    for w in words.iter().skip(1) {
        let Some(w) = w.lit() else {
            return Err(format!(
                "`{prog}` has a word only known at run time, which may be an option that runs commands"
            ));
        };
        let Some(name) = w.strip_prefix("--").or_else(|| w.strip_prefix('-')) else {
            continue;
        };
        let name = name.split('=').next().unwrap_or("");
        if name == "args" {
            break; // the program to debug and its arguments
        }
        batch |= name == "batch" || name == "batch-silent";
        if matches!(name, "ex" | "iex" | "eiex" | "x" | "ix" | "eix" | "P")
            || (name.len() >= 3 && COMMANDS.iter().any(|c| c.starts_with(name)))
        {
            return Err(format!(
                "`{prog} {w}` runs gdb commands, which can run any program (`shell`, `python`)"
            ));
        }
    }
    if batch {
        Ok(())
    } else {
        Err(format!(
            "`{prog}` without `-batch` runs the gdb commands it reads from its input"
        ))
    }
}

/// `ld-linux-x86-64.so.2`, `ld-2.36.so`, `ld.so`: run the program named after them.
pub fn is_dynamic_loader(prog: &str) -> bool {
    prog == "ld.so" || (prog.starts_with("ld-") && prog.contains(".so"))
}

/// Programs that run another program named in their arguments (or read
/// their options from them), as the gate models them.
pub fn runs_other_programs(prog: &str) -> bool {
    is_interpreter(prog)
        || UNPARSED_EXEC_WRAPPERS.contains(&prog)
        || is_dynamic_loader(prog)
        // `git-push`, `git-upload-pack`: git's own programs, git's options.
        || prog.starts_with("git-")
        || matches!(
            prog,
            "env"
                | "timeout"
                | "nice"
                | "nohup"
                | "builtin"
                | "setsid"
                | "stdbuf"
                | "ionice"
                | "time"
                | "command"
                | "exec"
                | "xargs"
                | "sudo"
                | "doas"
                | "watch"
                | "find"
                | "git"
                | "tar"
                | "eval"
                | "source"
                | "."
        )
}

/// Whether `xargs` may append words to this command harmlessly: `git` with a
/// subcommand that takes only paths and plain options, an interpreter that
/// already has its program (`python3 -m black`, `python3 x.py`): the words
/// become arguments, not the program.
pub fn takes_appended_words(prog: &str, words: &[Word]) -> bool {
    let args: Vec<&str> = words.iter().skip(1).map_while(Word::lit).collect();
    match prog {
        "git" => args.first().is_some_and(|sub| {
            matches!(
                *sub,
                "add"
                    | "rm"
                    | "mv"
                    | "checkout"
                    | "restore"
                    | "diff"
                    | "log"
                    | "show"
                    | "blame"
                    | "status"
                    | "ls-files"
                    | "cat-file"
                    | "rev-parse"
                    | "reset"
                    | "hash-object"
            )
        }),
        _ if is_interpreter(prog) && !SHELLS.contains(&prog) => {
            args.iter().any(|a| !a.starts_with('-')) || args.iter().any(|a| matches!(*a, "-m" | "-c" | "-e"))
        }
        _ => false,
    }
}

/// Programs whose options decide what they run: a word among their
/// arguments that bash fills in (`$(echo -exec)`, `-$(echo k)`,
/// `--to-command=rm\ $x`) or expands from a glob (`{-exec,rm}`, `-exe?`, a
/// `*` matching a file named `-exec`) could be any option. Exempt, narrowly:
/// the value of a `find` test (`-name "$p"`), the words of a command `find`
/// runs (judged as that command), a `tar` option's value, an `env`
/// assignment.
pub fn hides_an_option(prog: &str, words: &[Word]) -> bool {
    const FIND_OPERANDS: &[&str] = &[
        "-name",
        "-iname",
        "-path",
        "-ipath",
        "-wholename",
        "-iwholename",
        "-regex",
        "-iregex",
        "-lname",
        "-ilname",
        "-type",
        "-xtype",
        "-size",
        "-newer",
        "-user",
        "-group",
        "-perm",
        "-mtime",
        "-mmin",
        "-atime",
        "-amin",
        "-ctime",
        "-cmin",
        "-maxdepth",
        "-mindepth",
        "-links",
        "-inum",
        "-samefile",
        "-used",
        "-fstype",
        "-uid",
        "-gid",
        "-printf",
        "-context",
    ];
    const TAR_VALUED: &[&str] = &[
        "-C",
        "--directory",
        "-f",
        "--file",
        "-T",
        "--files-from",
        "-X",
        "--exclude-from",
    ];
    if !matches!(
        prog,
        "find" | "hash" | "tar" | "xargs" | "env" | "set" | "shopt" | "mapfile" | "readarray"
    ) {
        return false;
    }
    // `xargs`'s own options end where the program it runs begins: that
    // program's words are judged as its own (`xargs grep "$pat"`).
    let words = match (prog, unwrap(prog, words)) {
        ("xargs", Unwrapped::Inner(i)) => &words[..i],
        _ => words,
    };
    let exec = if prog == "find" {
        find_exec_ranges(words)
    } else {
        Vec::new()
    };
    // A value is one word unless it can become several at run time: an
    // expansion outside quotes splits, a glob expands to file names (`-exec`
    // among them). Then its words may be options too, or end `-exec`.
    let may_be_several = |w: &Word| match w {
        Word::Lit(_) => false,
        Word::Pattern(_) => true,
        Word::Dynamic(raw) => expands_unquoted(raw),
    };
    let mut operand_next = false;
    for (i, w) in words.iter().enumerate().skip(1) {
        if exec.iter().any(|&(a, b)| i >= a.saturating_sub(1) && i <= b) {
            operand_next = false;
            if may_be_several(w) {
                return true;
            }
            continue; // `-exec`, its command and its terminator
        }
        if std::mem::take(&mut operand_next) {
            if may_be_several(w) {
                return true;
            }
            continue; // a test's or an option's value
        }
        match w {
            Word::Lit(l) => {
                operand_next = match prog {
                    "find" => FIND_OPERANDS.contains(&l.as_str()) || l.starts_with("-newer"),
                    // `-cf FILE`, `-C DIR`: a short cluster ending in a valued letter.
                    "tar" => {
                        TAR_VALUED.contains(&l.as_str())
                            || (l.starts_with('-') && !l.starts_with("--") && l.ends_with(['f', 'C', 'T', 'X']))
                            || (i == 1 && !l.starts_with('-') && l.ends_with(['f', 'C']))
                    }
                    _ => false,
                };
            }
            Word::Pattern(_) => return true,
            Word::Dynamic(raw) => {
                // `NAME=$value` for env; `--opt=` is a value only when its
                // option is known harmless, which the gate does not list.
                let assignment = prog == "env"
                    && raw.split_once('=').is_some_and(|(n, _)| {
                        !n.is_empty() && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                    });
                if !assignment {
                    return true;
                }
            }
        }
    }
    false
}

/// Whether a word's text has an expansion (`$`, a backquote) outside quotes,
/// whose result bash splits into words.
pub fn expands_unquoted(raw: &str) -> bool {
    let (mut single, mut double, mut escaped) = (false, false, false);
    for c in raw.chars() {
        match c {
            _ if escaped => escaped = false,
            '\\' if !single => escaped = true,
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '$' | '`' if !single && !double => return true,
            _ => {}
        }
    }
    false
}

/// `tar` options that make it run a program.
/// A compressor `tar -I`/`--use-compress-program` may name and still be
/// understood: it runs that program on the archive, nothing else.
const COMPRESSORS: &[&str] = &[
    "gzip", "pigz", "bzip2", "pbzip2", "xz", "pixz", "zstd", "pzstd", "lz4", "lzip", "plzip", "lzop", "brotli",
];

fn tar_runs_a_program(words: &[Word]) -> bool {
    const RUNS: &[&str] = &[
        "--checkpoint-action",
        "--to-command",
        "--use-compress-program",
        "--info-script",
        "--new-volume-script",
        "--rsh-command",
    ];
    let known_compressor = |v: Option<&str>| {
        v.and_then(|v| v.split_whitespace().next()).is_some_and(|p| {
            COMPRESSORS.contains(&p) && v.is_some_and(|v| !v.contains([';', '|', '&', '$', '`', '\n', '<', '>']))
        })
    };
    let args: Vec<Option<&str>> = words.iter().skip(1).map(Word::lit).collect();
    args.iter().enumerate().any(|(i, w)| {
        let Some(w) = *w else {
            return false;
        };
        if let Some(long) = w.strip_prefix("--") {
            // GNU tar takes any unambiguous abbreviation of a long option.
            let (name, value) = long.split_once('=').map_or((long, None), |(n, v)| (n, Some(v)));
            // An option's whole name wins over an abbreviation of another.
            if name == "checkpoint" {
                return false;
            }
            let Some(opt) = RUNS.iter().find(|o| name.len() >= 2 && o[2..].starts_with(name)) else {
                return false;
            };
            let value = value.or_else(|| args.get(i + 1).copied().flatten());
            return !(*opt == "--use-compress-program" && known_compressor(value));
        }
        // `-I PROG`, `-IPROG`, `-cIf`, `-F SCRIPT`; the old style (`tar cIf`,
        // first word), whose values follow in the order of its letters, asks.
        let old_style = i == 0 && !w.starts_with('-');
        let Some(short) = w.strip_prefix('-').or(old_style.then_some(w)) else {
            return false;
        };
        if short.contains('F') || (old_style && short.contains('I')) {
            return true;
        }
        match short.find('I') {
            None => false,
            Some(at) if at + 1 < short.len() && w.starts_with('-') => !known_compressor(Some(&short[at + 1..])),
            Some(_) => !known_compressor(args.get(i + 1).copied().flatten()),
        }
    })
}

/// Built-ins given an option that runs text as code or makes later
/// assignments land somewhere else: `mapfile -C CALLBACK`, `compgen -C CMD`
/// / `-F FUNC`, `complete -C` / `-F`, and a name reference (`declare -n`),
/// through which an assignment reaches a variable the gate never sees named.
pub fn runs_code_from_an_option(prog: &str, words: &[Word]) -> Option<String> {
    let options = || {
        words
            .iter()
            .skip(1)
            .filter_map(Word::lit)
            .filter(|w| w.starts_with('-') && w.len() > 1)
    };
    let has = |letters: &[char]| options().any(|w| !w.starts_with("--") && w[1..].contains(letters));
    let set_option = |names: &[&str]| {
        let w: Vec<&str> = words.iter().skip(1).filter_map(Word::lit).collect();
        w.windows(2)
            .any(|p| (p[0] == "-o" || p[0] == "+o") && names.contains(&p[1]))
    };
    match prog {
        "mapfile" | "readarray" if has(&['C']) => Some(format!("`{prog} -C` runs a callback as code")),
        // `-C`/`-F` run commands, `-W` expands its word list (substitutions too).
        "compgen" | "complete" => Some(format!("`{prog}` can run commands and expand words as code")),
        // History expansion rewrites the commands that follow (`!!:2`);
        // `-k` makes `NAME=value` after a command an environment setting.
        "set" if has(&['H', 'k']) || set_option(&["history", "histexpand", "keyword"]) => {
            Some("`set -H`/`-k` changes how bash reads the commands that follow".into())
        }
        "hash" if has(&['p']) => Some("`hash -p` changes which file a command name runs".into()),
        // `-o ProxyCommand=CMD` (and its kin) run CMD here, `-F FILE` reads
        // a configuration that may, `-S PROGRAM` (scp, sftp) runs PROGRAM.
        "ssh" | "scp" | "sftp" | "slogin"
            if words.iter().skip(1).any(|w| match w.lit() {
                None => true,
                Some(w) => {
                    let lower = w.to_ascii_lowercase();
                    [
                        "proxycommand",
                        "localcommand",
                        "knownhostscommand",
                        "permitlocalcommand",
                        "pkcs11provider",
                        "securitykeyprovider",
                        "match",
                    ]
                    .iter()
                    .any(|k| lower.contains(k))
                        || w.starts_with("-F")
                        || (prog != "ssh" && w.starts_with("-S"))
                }
            }) =>
        {
            Some(format!(
                "`{prog}` is given an option that can run a local command, or one only known at run time"
            ))
        }
        // `-e CMD`/`--rsh=CMD` run CMD as the remote shell; `--rsync-path` the other side's program.
        "rsync"
            if words.iter().skip(1).any(|w| {
                w.lit().is_none_or(|w| {
                    w.starts_with("-e")
                        || w.starts_with("--rsh")
                        || (w.starts_with('-') && !w.starts_with("--") && w.contains('e'))
                })
            }) =>
        {
            Some("`rsync -e` runs a program as its remote shell".into())
        }
        // `-TT CMD`/`--unzip-command` run CMD to test the archive.
        "zip"
            if words.iter().skip(1).any(|w| {
                w.lit()
                    .is_some_and(|w| w.starts_with("-TT") || w.starts_with("--unzip-command"))
            }) =>
        {
            Some("`zip -TT` runs a command to test the archive".into())
        }
        "jobs" if has(&['x']) => Some("`jobs -x` runs a command".into()),
        // A word only known at run time, quoted or not, may be any one
        // option: `f=--filter; split $f="rm x" file`, `sort "$f"` with
        // `f=--compress-program=rm` (getopt reads options after operands
        // too). Quotes keep it one word, and one word is enough. Only a
        // literal start that is no `-` (`./"$f"`), or `--` before it,
        // makes it an operand.
        "split" | "sort" | "sdiff" | "diff3" | "gpg" | "gpg2" | "wget" if words.iter().skip(1).take_while(|w| w.lit() != Some("--")).any(may_be_an_option) => {
            Some(format!(
                "`{prog}` has a word only known at run time where an option that runs a program could be (`--` before the operands rules that out)"
            ))
        }
        // man runs its pager (`-P`, `--pager`) and browser (`-H`, `--html`)
        // on the terminal, and a configuration file (`-C`) may name either.
        "man"
            if words.iter().skip(1).any(|w| match w.lit() {
                None => may_be_an_option(w),
                Some(w) => match w.strip_prefix("--") {
                    Some(long) => abbreviates(long.split('=').next().unwrap_or(""), &["pager", "html", "config-file"]),
                    None => w.starts_with('-') && w[1..].contains(['P', 'H', 'C']),
                },
            }) =>
        {
            Some("`man` is given a pager, a browser or a configuration file, or a word only known at run time that may be one".into())
        }
        // GNU long options that name a program to run, in any abbreviation.
        "split" if long_option_given(words, &["filter"]) => {
            Some("`split --filter` runs a command on each piece".into())
        }
        "sort" if long_option_given(words, &["compress-program"]) => {
            Some("`sort --compress-program` runs a program on its temporary files".into())
        }
        // `--use-askpass=PROG` runs PROG; `-e CMD`/`--execute CMD` runs a
        // wgetrc command (`use_askpass=PROG`); `--config` reads a wgetrc.
        "wget"
            if long_option_given(words, &["use-askpass", "execute", "config"])
                || words.iter().skip(1).filter_map(Word::lit).take_while(|w| *w != "--").any(wget_cluster_executes) =>
        {
            Some("`wget` is given an option that runs a program or a wgetrc command".into())
        }
        "sdiff" | "diff3" if long_option_given(words, &["diff-program"]) => {
            Some(format!("`{prog} --diff-program` runs a program in diff's place"))
        }
        "gpg" | "gpg2"
            if long_option_given(
                words,
                &[
                    "photo-viewer",
                    "exec-path",
                    "agent-program",
                    "dirmngr-program",
                    "keyboxd-program",
                ],
            ) =>
        {
            Some(format!("`{prog}` is given an option that names a program to run"))
        }
        "cargo"
            if words
                .iter()
                .skip(1)
                .map_while(|w| w.lit().filter(|w| *w != "--"))
                .any(|w| w.starts_with("--config")) =>
        {
            Some("`cargo --config` can name a program to run (a runner, a wrapper)".into())
        }
        "shopt"
            if has(&['o'])
                && words
                    .iter()
                    .skip(1)
                    .filter_map(Word::lit)
                    .any(|w| matches!(w, "history" | "histexpand" | "keyword")) =>
        {
            Some("`shopt -o` changes how bash reads the commands that follow".into())
        }
        "let" if words.iter().skip(1).any(|w| !matches!(w, Word::Lit(_))) => {
            Some("`let` evaluates text known only at run time, substitutions in subscripts included".into())
        }
        "declare" | "typeset" | "local" if has(&['n']) => Some(format!(
            "`{prog} -n` makes a name reference, through which assignments reach a variable never named"
        )),
        _ => None,
    }
}

/// Whether a cluster of wget's short options holds `-e` (`-qe CMD`): the
/// letters up to the first that takes a value, `-n` taking one more.
fn wget_cluster_executes(w: &str) -> bool {
    let Some(cluster) = w.strip_prefix('-').filter(|c| !c.starts_with('-')) else {
        return false;
    };
    let mut chars = cluster.chars();
    while let Some(c) = chars.next() {
        match c {
            'e' => return true,
            'n' => {
                chars.next();
            }
            'o' | 'a' | 'i' | 'B' | 't' | 'O' | 'T' | 'w' | 'Q' | 'P' | 'l' | 'A' | 'R' | 'D' | 'X' | 'I' | 'U' => {
                return false
            }
            _ => {}
        }
    }
    false
}

/// Whether a word only known at run time could be an option: nothing
/// literal starts it, or what does starts with `-`.
fn may_be_an_option(word: &Word) -> bool {
    match word {
        Word::Lit(_) => false,
        Word::Pattern(text) => {
            let prefix: String = text.chars().take_while(|c| !"*?[{@!+".contains(*c)).collect();
            prefix.is_empty() || prefix.starts_with('-')
        }
        Word::Dynamic(raw) => {
            let prefix = literal_prefix(raw);
            prefix.is_empty() || prefix.starts_with('-')
        }
    }
}

/// The literal text a word starts with, before its first expansion or
/// glob, quotes removed (`./"$f"` starts with `./`, `"$f"` with nothing).
fn literal_prefix(raw: &str) -> String {
    let mut out = String::new();
    let mut chars = raw.chars();
    let (mut single, mut double) = (false, false);
    while let Some(c) = chars.next() {
        match c {
            '\'' if !double => single = !single,
            _ if single => out.push(c),
            '"' => double = !double,
            '\\' => match chars.next() {
                Some(e) => out.push(e),
                None => break,
            },
            '$' | '`' => break,
            '*' | '?' | '[' | '{' | '~' if !double => break,
            _ => out.push(c),
        }
    }
    out
}

/// Whether one of the long `options` is given before `--`, in any
/// abbreviation GNU getopt takes (`--compress-prog=sh`).
fn long_option_given(words: &[Word], options: &[&str]) -> bool {
    words
        .iter()
        .skip(1)
        .filter_map(Word::lit)
        .take_while(|w| *w != "--")
        .filter_map(|w| w.strip_prefix("--"))
        .any(|name| abbreviates(name.split('=').next().unwrap_or(""), options))
}

/// `printf -v NAME FORMAT ARGS...`: why the value it assigns may hold text
/// the gate does not see written (`\x24(cmd)` is `$(cmd)`, `%b` decodes
/// escapes, `%s` of a word only known at run time), which bash runs if it
/// evaluates the value as a subscript or in arithmetic. `None` for plain
/// text (`printf -v n '%05d' "$i"`, `printf -v x '%s' y`).
pub fn printf_assigns_unseen_text(words: &[Word]) -> Option<String> {
    let mut i = 1;
    let mut assigns = false;
    loop {
        match lit(words, i) {
            Some("-v") => i += 2,
            Some(w) if w.starts_with("-v") => i += 1,
            Some("--") => {
                i += 1;
                break;
            }
            _ => break,
        }
        assigns = true;
    }
    if !assigns {
        return None;
    }
    let format = words.get(i)?.lit()?; // one only known at run time asks as a name may
    let why = match printf_output(format, &words[i + 1..]) {
        // Any `$` or backquote, not only a whole `$(`: text joined to the
        // value later (`v+='(cmd)]'`) completes a substitution.
        Ok(text) if text.contains(['$', '`']) => "its value holds a `$` or a backquote".into(),
        Ok(_) => return None,
        Err(why) => why,
    };
    Some(format!(
        "`printf -v` assigns text the gate cannot see written ({why}), which bash runs if it evaluates the value as a subscript"
    ))
}

/// The text printf makes of a format and its arguments, as far as it
/// matters here: numbers stand as `0`. An error names what makes text the
/// gate cannot know (an escape that makes any character, `%b`, `%q`, `%c`,
/// a precision, `%s` of a word only known at run time).
fn printf_output(format: &str, args: &[Word]) -> Result<String, String> {
    let mut out = String::new();
    let mut next = 0;
    let arg_text = |next: &mut usize| -> Result<String, String> {
        let text = match args.get(*next) {
            None => String::new(),
            Some(Word::Lit(a)) => a.clone(),
            Some(other) => return Err(format!("a conversion of `{}`, only known at run time", other.display())),
        };
        *next += 1;
        Ok(text)
    };
    // printf goes through the format again while arguments are left.
    loop {
        let before = next;
        let mut chars = format.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some('n' | 't' | 'r' | 'a' | 'b' | 'f' | 'v') => out.push(' '),
                    Some(e @ ('\\' | '"' | '\'')) => out.push(e),
                    e => {
                        return Err(format!(
                            "the escape `\\{}` in its format",
                            e.map(String::from).unwrap_or_default()
                        ))
                    }
                },
                '%' => {
                    let mut conversion = chars.next();
                    while let Some(f) = conversion.filter(|f| "-+ #0'.123456789*".contains(*f)) {
                        // A precision cuts text (`%.1s` of `$Z` is `$`) and
                        // numbers (`%.0d` of 0 is nothing): what is left is
                        // not what the gate would copy.
                        if f == '.' {
                            return Err("a precision in its format, which cuts what it converts".into());
                        }
                        if f == '*' {
                            next += 1; // a width or precision taken from the arguments
                        }
                        conversion = chars.next();
                    }
                    match conversion {
                        Some('%') => out.push('%'),
                        Some('d' | 'i' | 'o' | 'u' | 'x' | 'X' | 'e' | 'E' | 'f' | 'F' | 'g' | 'G' | 'a' | 'A') => {
                            out.push('0');
                            next += 1;
                        }
                        Some('s') => out.push_str(&arg_text(&mut next)?),
                        // The first character of its argument, whatever it is.
                        Some('c') => return Err("the conversion `%c`, which takes one character of a word".into()),
                        // `%(FORMAT)T`: a time, in a strftime format given literally.
                        Some('(') => {
                            let inner: String = chars.by_ref().take_while(|c| *c != ')').collect();
                            if chars.next() != Some('T') {
                                return Err("a `%(...)` conversion the gate does not read".into());
                            }
                            out.push_str(&inner);
                            next += 1;
                        }
                        other => {
                            return Err(format!(
                                "the conversion `%{}`",
                                other.map(String::from).unwrap_or_default()
                            ))
                        }
                    }
                }
                c => out.push(c),
            }
        }
        if next == before || next >= args.len() {
            return Ok(out);
        }
    }
}

/// The text `xargs` replaces with each input item in the command it runs
/// (`-I R`, `-IR`, `--replace=R`; `-i` and `--replace` mean `{}`).
pub fn xargs_replace_string(words: &[Word]) -> Option<String> {
    let args: Vec<&str> = words.iter().skip(1).map_while(Word::lit).collect();
    // The last one given counts.
    let mut found = None;
    let mut i = 0;
    while let Some(w) = args.get(i) {
        i += 1;
        if matches!(
            *w,
            "--arg-file" | "--delimiter" | "--max-args" | "--max-procs" | "--max-chars" | "--process-slot-var"
        ) {
            i += 1; // its value
        } else if *w == "--replace" {
            found = Some("{}".into());
        } else if let Some(r) = w.strip_prefix("--replace=") {
            found = Some(r.to_string());
        } else if let Some(cluster) = w.strip_prefix('-').filter(|c| !c.starts_with('-')) {
            // As getopt reads a cluster (`-0I{}`, `-riR`): flags, then one
            // option whose value is the rest of the word (or the next word).
            for (at, c) in cluster.char_indices() {
                let rest = &cluster[at + 1..];
                match c {
                    '0' | 'r' | 't' | 'p' | 'x' | 'o' => continue,
                    'i' => found = Some(if rest.is_empty() { "{}".into() } else { rest.to_string() }),
                    'I' if rest.is_empty() => {
                        found = args.get(i).map(|r| r.to_string());
                        i += 1;
                    }
                    'I' => found = Some(rest.to_string()),
                    'a' | 'd' | 'E' | 'L' | 'n' | 'P' | 's' if rest.is_empty() => i += 1,
                    _ => {}
                }
                break;
            }
        }
    }
    found
}

/// git subcommands given an option that runs a program (`git grep -O CMD`,
/// `git rebase --exec CMD`, `git difftool -x CMD`), or that run commands
/// by design (`git bisect run`, `git submodule foreach`).
pub fn git_runs_a_program(argv: &[Word]) -> Option<String> {
    // Long options naming a program to run, in any subcommand; git takes
    // any unambiguous abbreviation (`--ope`, `--ex`).
    const LONG: &[&str] = &[
        "upload-pack",
        "receive-pack",
        "exec",
        "open-files-in-pager",
        "extcmd",
        "tool",
        "config",
        "template",
    ];
    let sub = argv.get(1).and_then(Word::lit)?;
    // Long options naming a program in one subcommand.
    let sub_long: &[&str] = match sub {
        "send-email" => &["sendmail-cmd", "to-cmd", "cc-cmd", "header-cmd", "smtp-server"],
        _ => &[],
    };
    // Short options that take a program, per subcommand.
    let short: &[char] = match sub {
        "grep" => &['O'],
        "rebase" => &['x'],
        "difftool" | "mergetool" => &['x', 't'],
        "clone" | "ls-remote" => &['u'],
        _ => &[],
    };
    let mut args = argv.iter().skip(2);
    let runs = args.clone().any(|a| match a.lit() {
        None => false,
        Some(a) if a.starts_with("--") => {
            let name = a[2..].split('=').next().unwrap_or("");
            name.len() >= 2 && !matches!(name, "to" | "cc") && LONG.iter().chain(sub_long).any(|o| o.starts_with(name))
        }
        Some(a) if a.starts_with('-') && a.len() > 1 => a[1..].contains(short),
        _ => false,
    }) || match sub {
        "bisect" => args.next().and_then(Word::lit) == Some("run"),
        "submodule" => args.any(|a| a.lit() == Some("foreach")),
        "filter-branch" | "filter-repo" => true,
        _ => false,
    };
    // Where an option can name a program, a word only known at run time (or
    // a glob) may turn out to be that option (`git grep $(echo -Orm)`).
    let takes_programs = matches!(
        sub,
        "grep"
            | "rebase"
            | "difftool"
            | "mergetool"
            | "clone"
            | "ls-remote"
            | "fetch"
            | "pull"
            | "push"
            | "send-pack"
            | "archive"
            | "init"
            | "send-email"
    );
    let hidden = takes_programs
        && argv
            .iter()
            .skip(2)
            .take_while(|a| a.lit() != Some("--"))
            .any(|a| !matches!(a, Word::Lit(_)));
    if hidden {
        return Some(format!(
            "`git {sub}` is given a word only known at run time where an option could name a program"
        ));
    }
    runs.then(|| format!("`git {sub}` is given something that runs a program"))
}

/// `git` global options: returns the index of the subcommand, or an ask reason
/// for options that can make git run other programs or act on another repository.
pub fn git_subcommand(words: &[Word]) -> Result<usize, String> {
    let mut i = 1;
    while i < words.len() {
        let Some(w) = lit(words, i) else {
            return Err("`git` has a non-literal word before its subcommand".into());
        };
        match w {
            "-C" => i += 2,
            "--no-pager"
            | "-P"
            | "--bare"
            | "--no-replace-objects"
            | "--literal-pathspecs"
            | "--glob-pathspecs"
            | "--noglob-pathspecs"
            | "--icase-pathspecs"
            | "--no-optional-locks"
            | "--no-advice"
            | "--no-lazy-fetch" => i += 1,
            "--namespace" => i += 2,
            _ if w.starts_with("--namespace=") => i += 1,
            "--version" | "--help" | "-h" | "-v" => return Ok(i),
            "-c" if lit(words, i + 1).is_some_and(inert_git_config) => i += 2,
            _ if w == "-c" || w.starts_with("-c") && w.len() > 2 || w.starts_with("--config-env") => {
                return Err(format!(
                    "`git {w}` sets configuration that can run other programs (core.pager, core.fsmonitor, alias.*)"
                ))
            }
            _ if w.starts_with("--exec-path") => return Err(format!("`git {w}` changes which programs git runs")),
            _ if w.starts_with("--git-dir") || w.starts_with("--work-tree") => {
                return Err(format!(
                    "`git {w}` points git at another repository, whose configuration can run programs"
                ))
            }
            "-p" | "--paginate" => return Err("`git -p` runs a pager".into()),
            _ if w.starts_with('-') => return Err(format!("`git` option `{w}` is not one the gate knows")),
            _ => return Ok(i),
        }
    }
    Ok(i)
}

/// `git -c NAME=VALUE` with a setting no program is ever read from: who
/// commits (`-c user.name=bot commit`), colours, advice. Git reads the name
/// up to the first `=`; sections and keys ignore case.
fn inert_git_config(setting: &str) -> bool {
    const INERT: &[&str] = &[
        "user.name",
        "user.email",
        "author.name",
        "author.email",
        "committer.name",
        "committer.email",
        "init.defaultbranch",
        "core.quotepath",
        "color.ui",
    ];
    let name = setting.split_once('=').map_or(setting, |(n, _)| n).to_ascii_lowercase();
    INERT.contains(&name.as_str())
        || name
            .strip_prefix("advice.")
            .is_some_and(|k| !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphanumeric()))
}

/// `find ... -exec CMD ... ;` and friends: the argument ranges of the commands find runs.
pub fn find_exec_ranges(words: &[Word]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = 1;
    while i < words.len() {
        if matches!(lit(words, i), Some("-exec" | "-execdir" | "-ok" | "-okdir")) {
            let start = i + 1;
            let mut end = start;
            while end < words.len()
                && !(lit(words, end) == Some(";")
                    || (lit(words, end) == Some("+") && lit(words, end - 1) == Some("{}")))
            {
                end += 1;
            }
            out.push((start, end));
            i = end + 1;
        } else {
            i += 1;
        }
    }
    out
}

/// Names a builtin assigns to: `read NAME`, `printf -v NAME`, `export NAME=...`.
/// A word only known at run time where a built-in takes the name of the
/// variable it sets (`read -r "$v"`, `printf -v "$v"`, `unset "$v"`): it may
/// name `PATH`, or hold a subscript bash evaluates. Returns that word.
pub fn runtime_assigned_name<'a>(prog: &str, words: &'a [Word]) -> Option<&'a str> {
    // Options whose value is a name, and those whose value is anything.
    let (named, valued): (&[char], &[char]) = match prog {
        "read" => (&['a'], &['d', 'i', 'n', 'N', 'p', 't', 'u']),
        "mapfile" | "readarray" => (&[], &['d', 'n', 'O', 's', 'u', 'C', 'c']),
        "printf" => (&['v'], &[]),
        "wait" => (&['p'], &[]),
        "unset" | "getopts" => (&[], &[]),
        _ => return None,
    };
    let mut i = 1;
    let mut operands = 0usize;
    let mut options_done = prog == "getopts";
    while let Some(w) = words.get(i) {
        i += 1;
        let Some(text) = w.lit() else {
            // An operand: for getopts only the second is a name; printf's
            // are its format and arguments.
            let is_name = match prog {
                "getopts" => operands == 1,
                "printf" | "wait" => false,
                _ => true,
            };
            // A format only known at run time may be `-vNAME`; `wait
            // "$pid"` is too common to ask about its splitting into `-p NAME`.
            if is_name || (!options_done && prog != "wait") {
                return Some(w.display());
            }
            operands += 1;
            continue;
        };
        if options_done || !text.starts_with('-') || text == "-" {
            options_done = true;
            operands += 1;
            if prog == "printf" {
                return None; // the format: no more options
            }
            continue;
        }
        if text == "--" {
            options_done = true;
            continue;
        }
        // A cluster: flags, then at most one option with a value.
        for (at, c) in text.char_indices().skip(1) {
            let attached = at + c.len_utf8() < text.len();
            if named.contains(&c) || valued.contains(&c) {
                if !attached {
                    match words.get(i) {
                        Some(v) if named.contains(&c) && v.lit().is_none() => return Some(v.display()),
                        _ => i += 1,
                    }
                }
                break;
            }
        }
    }
    None
}

pub fn assigned_names(prog: &str, words: &[Word]) -> Vec<String> {
    // A name with a subscript reads as a glob (`BASH_CMDS[ls]`): its text counts.
    let args = || {
        words.iter().skip(1).filter_map(|w| match w {
            Word::Lit(s) | Word::Pattern(s) => Some(s.as_str()),
            Word::Dynamic(_) => None,
        })
    };
    let name_of = |s: &str| s.split(['=', '+', '[']).next().unwrap_or("").to_string();
    match prog {
        "export" | "declare" | "typeset" | "local" | "readonly" => {
            args().filter(|s| !s.starts_with('-')).map(name_of).collect()
        }
        "read" | "mapfile" | "readarray" => args().filter(|s| !s.starts_with('-')).map(name_of).collect(),
        // `printf -v NAME`, `wait -p NAME` (`-np NAME`).
        "printf" | "wait" => {
            let letter = if prog == "printf" { 'v' } else { 'p' };
            let mut out = vec![];
            let w: Vec<&str> = args().collect();
            for (i, s) in w.iter().enumerate() {
                let Some(cluster) = s.strip_prefix('-').filter(|c| !c.starts_with('-')) else {
                    continue;
                };
                if let Some(at) = cluster.find(letter) {
                    match &cluster[at + 1..] {
                        "" => out.extend(w.get(i + 1).map(|n| name_of(n))),
                        attached => out.push(name_of(attached)),
                    }
                }
            }
            out
        }
        "getopts" => args().nth(1).map(name_of).into_iter().collect(),
        // Unsetting PATH makes bash look for programs in the working directory.
        "unset" => args().filter(|s| !s.starts_with('-')).map(name_of).collect(),
        // Every name in its expressions (`let PATH=1`).
        "let" => args()
            .flat_map(crate::gate::parse::identifiers)
            .map(str::to_string)
            .collect(),
        _ => vec![],
    }
}
