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
pub const SHELLS: &[&str] = &["bash", "sh", "dash", "zsh", "ksh", "mksh", "ash", "yash", "rbash"];

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
    let mut i = start;
    while i < words.len() {
        let Some(w) = lit(words, i) else {
            return Err(format!(
                "`{who}` has a non-literal option; the gate cannot tell what it runs"
            ));
        };
        if w == "--" {
            return Ok(i + 1);
        }
        if !w.starts_with('-') || w == "-" {
            return Ok(i);
        }
        if flags.contains(&w) || optional.contains(&w) {
            i += 1;
            continue;
        }
        if valued.contains(&w) {
            i += 2;
            continue;
        }
        if let Some((opt, _)) = w.split_once('=') {
            if valued.contains(&opt) && opt.starts_with("--") {
                i += 1;
                continue;
            }
        }
        // A cluster of short options, as getopt reads it: flags, then at
        // most one that takes a value, the rest of the word or the next
        // (`-rt`, `-n10`, `-0I{}`, `-rI {}`).
        if !w.starts_with("--") {
            let mut next = None;
            for (at, c) in w.char_indices().skip(1) {
                let opt = format!("-{c}");
                if flags.contains(&opt.as_str()) {
                    continue;
                }
                if optional.contains(&opt.as_str()) {
                    next = Some(i + 1);
                    break;
                }
                if valued.contains(&opt.as_str()) {
                    next = Some(if at + c.len_utf8() < w.len() { i + 1 } else { i + 2 });
                }
                break;
            }
            let all_flags = w[1..].chars().all(|c| flags.contains(&format!("-{c}").as_str()));
            if let Some(n) = next.or(all_flags.then_some(i + 1)) {
                i = n;
                continue;
            }
        }
        return Err(format!(
            "`{who}` option `{w}` is not one the gate knows; it cannot tell what runs"
        ));
    }
    Ok(i)
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
            let mut ask: Option<String> = None;
            while i < words.len() {
                let Some(w) = lit(words, i) else {
                    return Unwrapped::Ask("`env` has a non-literal argument".into());
                };
                match w {
                    "-i" | "--ignore-environment" | "-0" | "--null" | "-v" | "--debug" | "-" => i += 1,
                    "-u" | "--unset" | "-C" | "--chdir" => i += 2,
                    "--" => {
                        // Options end here; assignments do not.
                        i += 1;
                        while let Some((name, _)) = lit(words, i).and_then(|w| w.split_once('=')) {
                            if crate::policy::is_dangerous_env(name) && ask.is_none() {
                                ask = Some(format!("`env` sets {name}, which changes what programs run"));
                            }
                            i += 1;
                        }
                        break;
                    }
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
                    _ => {
                        if let Some((name, _)) = w.split_once('=') {
                            if crate::policy::is_dangerous_env(name) && ask.is_none() {
                                ask = Some(format!("`env` sets {name}, which changes what programs run"));
                            }
                            i += 1;
                        } else {
                            break;
                        }
                    }
                }
            }
            match (i < words.len(), ask) {
                (true, Some(why)) => Unwrapped::InnerAsk(i, why),
                (true, None) => Unwrapped::Inner(i),
                (false, Some(why)) => Unwrapped::Ask(why),
                (false, None) => Unwrapped::Final,
            }
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
            if words.iter().any(|w| matches!(w.lit(), Some("-p" | "-P" | "-u"))) {
                return Unwrapped::Final;
            }
            inner_or_final(skip_options(
                words,
                1,
                &["-t", "--ignore"],
                &["-c", "--class", "-n", "--classdata"],
                "ionice",
            ))
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
            inner_or_final(skip_options(
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
            ))
        }
        "watch" => match skip_options(
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
            ],
            &["-n", "--interval", "-q", "--equexit"],
            "watch",
        ) {
            Ok(i) if i < words.len() => {
                if words.iter().any(|w| matches!(w.lit(), Some("-x" | "--exec"))) {
                    Unwrapped::Inner(i)
                } else {
                    Unwrapped::JoinedScript { from: i }
                }
            }
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
];

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
            name.len() >= 2 && !matches!(name, "to" | "cc") && LONG.iter().any(|o| o.starts_with(name))
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
                "printf" => false,
                _ => true,
            };
            if is_name || !options_done {
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
        "printf" => {
            let mut out = vec![];
            let w: Vec<&str> = args().collect();
            for (i, s) in w.iter().enumerate() {
                if *s == "-v" {
                    if let Some(n) = w.get(i + 1) {
                        out.push(name_of(n));
                    }
                } else if let Some(n) = s.strip_prefix("-v") {
                    out.push(name_of(n));
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
