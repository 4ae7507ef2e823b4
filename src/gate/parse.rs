//! From a bash script to the flat list of simple commands it can run.
//!
//! The parser is `brush-parser` (the parser of the brush shell). We chose it over
//! `tree-sitter-bash` because it is pure Rust (no C grammar to compile, nothing
//! unsafe at the boundary), it yields a typed AST whose words carry bash's own
//! quoting and expansion structure (`word::parse` splits a word into literal,
//! quoted, parameter, command-substitution and arithmetic pieces), and it aims
//! at bash compatibility rather than at editor highlighting, where tree-sitter
//! is built to tolerate and recover from errors. A gate wants the opposite of
//! error recovery: any input the parser does not fully accept becomes `ask`.
//!
//! The walk visits every place bash can run a command from: lists, pipelines,
//! `&`, subshells, groups, if/for/while/until/case bodies, function bodies,
//! coprocesses, and every *word* anywhere (arguments, assignments, redirect
//! targets, case subjects, `[[ ]]` operands, here-document bodies) because any
//! word may hold `$(...)`, backticks or `<(...)` that bash will execute.
//! Whatever we cannot see through becomes an [`Unit::Opaque`], which the gate
//! turns into `ask`.

use brush_parser::ast;
use brush_parser::word::{self, WordPiece, WordPieceWithSource};
use brush_parser::ParserOptions;

/// Largest script the gate analyses (bytes); larger input is an error, not a hang.
pub const MAX_SCRIPT_BYTES: usize = 64 * 1024;
/// Deepest nesting of `bash -c` / `$(...)` the gate follows before answering ask.
pub const MAX_NESTING: usize = 12;
/// Deepest bracket nesting we hand to the parser (it recurses per level).
const MAX_BRACKET_DEPTH: usize = 100;

/// A word after quote removal, as far as it can be known without running anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Word {
    /// Fully literal: quotes and escapes resolved (`'rm'`, `\rm`, `r\m` are `rm`).
    Lit(String),
    /// Literal characters, but unquoted glob or brace syntax: bash may expand it
    /// into other words (`{rm,-rf,x}`, `/???/r?`).
    Pattern(String),
    /// Depends on variables, substitutions, arithmetic or `~` at run time.
    Dynamic(String),
}

impl Word {
    pub fn lit(&self) -> Option<&str> {
        match self {
            Word::Lit(s) => Some(s),
            _ => None,
        }
    }
    /// The text as written (for display).
    pub fn display(&self) -> &str {
        match self {
            Word::Lit(s) | Word::Pattern(s) | Word::Dynamic(s) => s,
        }
    }
}

/// What a redirect does to its target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedirectKind {
    Read,
    Write,
    /// A here-document or here-string on the command's input.
    HereInput,
    /// `>&2`, `2>&1`, `<&0`: duplicates a descriptor, touches no file.
    Dup,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redirect {
    pub kind: RedirectKind,
    pub target: Word,
}

/// Where the shell's working directory is when a command runs, as far as known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cwd {
    /// Relative to the starting directory (`""` is the start itself).
    Known(String),
    Unknown,
}

/// One simple command: assignments, words and redirects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Simple {
    pub assignments: Vec<(String, Word)>,
    /// The names among `assignments` given with `+=`, which build on the
    /// old value.
    pub appended: Vec<String>,
    pub words: Vec<Word>,
    pub redirects: Vec<Redirect>,
    pub cwd: Cwd,
    /// How deep in `bash -c` / substitutions this command sits.
    pub depth: usize,
}

/// A unit of a script the gate judges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unit {
    Command(Simple),
    /// Something the gate cannot see through; always at least `ask`.
    Opaque {
        what: String,
        text: String,
    },
    /// A function the main script surely defines at this point: at its top
    /// level, not in a subshell, a branch, a loop, a pipeline, after `&&` or
    /// `||`, or another function's body. Calls after it run its (separately
    /// judged) body; a call before it, or to a function that may not exist,
    /// runs the program of that name.
    Function(String),
    /// The units that follow, up to the matching `LeaveShell`, run in a shell
    /// of their own (`bash -c`, `eval`'d text judged apart) or are run by
    /// another program (`find -exec`): this shell's functions are not theirs.
    EnterShell,
    LeaveShell,
    /// An array `declare -A` makes associative (its subscripts strings, no
    /// arithmetic) at the main script's top level, surely before what
    /// follows: not in a subshell, a function, a branch or a loop.
    Associative(String),
    /// A shell variable assigned in a way that changes what later commands run
    /// (`for PATH in ...`, `read PATH`): at least `ask`.
    DangerousAssignment {
        name: String,
        how: String,
    },
    /// Text bash evaluates as arithmetic: every variable it reads must be
    /// known to hold an integer (see [`arithmetic_names`]).
    Arithmetic {
        expr: String,
        /// Where it is, in words (`((...))`, a subscript, ...).
        how: String,
        /// The array whose subscript it is (`a` for `${a[i]}`, `a[i]=x`):
        /// an associative array's subscript is no arithmetic.
        subscript_of: Option<String>,
    },
    /// A variable assigned outside a simple command's words: a loop
    /// variable, `${v:=...}`, arithmetic (`((n=1))`, always an integer).
    Assigned {
        name: String,
        /// Whether every value it gets here is a known integer.
        integer: bool,
        /// Whether the value does not build on the old one (`n=1`, not
        /// `n++` or `n+=1`, which read what the environment gave).
        fresh: bool,
    },
}

/// Error for input the gate refuses to analyse at all.
#[derive(Debug, thiserror::Error)]
pub enum GateInputError {
    #[error("the script is {0} bytes; the gate analyses scripts up to {MAX_SCRIPT_BYTES} bytes")]
    TooLarge(usize),
}

fn options() -> ParserOptions {
    ParserOptions {
        tilde_expansion_at_word_start: true,
        ..ParserOptions::default()
    }
}

/// Parse a script into units. Never panics on any input; what cannot be parsed is opaque.
pub fn parse_script(script: &str) -> Result<Vec<Unit>, GateInputError> {
    if script.len() > MAX_SCRIPT_BYTES {
        return Err(GateInputError::TooLarge(script.len()));
    }
    let mut w = Walker {
        units: Vec::new(),
        uncertain: 0,
        top: 0,
        other_shell: None,
    };
    w.script(script, 0, &mut Cwd::Known(String::new()));
    Ok(w.units)
}

struct Walker {
    units: Vec<Unit>,
    /// How many constructs around this point may not run, or run in a
    /// subshell: a function defined inside one is not surely defined after.
    uncertain: usize,
    /// The depth of this walker's own script: functions are those of its
    /// top level (a substitution's are not).
    top: usize,
    /// The shell that reads the script when it is not bash (`sh -c`, where
    /// sh is dash): the parser reads bash's grammar, so what bash alone
    /// reads its own way may mean other commands there.
    other_shell: Option<String>,
}

impl Walker {
    fn opaque(&mut self, what: &str, text: &str) {
        self.units.push(Unit::Opaque {
            what: what.to_string(),
            text: truncate(text, 200),
        });
    }

    /// A construct of bash's own grammar, met in a script another shell
    /// reads: there it may be other commands (dash runs `((sh))` as two
    /// subshells running `sh`, and reads `$'a\' ; cmd` as `$`, then `a\`
    /// in quotes, then `cmd`).
    fn bash_only(&mut self, what: &str, text: &str) {
        if let Some(shell) = &self.other_shell {
            let why = format!("{what}, which `{shell}` reads otherwise than bash (the gate parses bash)");
            self.opaque(&why, text);
        }
    }

    fn script(&mut self, src: &str, depth: usize, cwd: &mut Cwd) {
        if depth > MAX_NESTING {
            self.opaque("nesting deeper than the gate follows", src);
            return;
        }
        if bracket_depth(src) > MAX_BRACKET_DEPTH {
            self.opaque("brackets nested deeper than the gate analyses", src);
            return;
        }
        if comment_inside_arithmetic(src) {
            // Bash reads `#` inside `((...))` as text (and runs the
            // substitutions after it); the parser drops it and the rest
            // of the line as a comment, unseen.
            self.opaque(
                "a `#` after a blank inside `((...))`, which bash reads as text and the parser as a comment",
                src,
            );
        }
        let parsed = guarded(|| {
            let mut parser = brush_parser::Parser::new(std::io::Cursor::new(src.as_bytes()), &options());
            parser.parse_program()
        });
        match parsed {
            Some(Ok(program)) => {
                for cc in &program.complete_commands {
                    self.compound_list(cc, depth, cwd);
                }
            }
            Some(Err(e)) => self.opaque(&format!("the script does not parse ({e})"), src),
            None => self.opaque("the parser failed on this input", src),
        }
    }

    fn compound_list(&mut self, list: &ast::CompoundList, depth: usize, cwd: &mut Cwd) {
        for item in &list.0 {
            let ast::CompoundListItem(and_or, sep) = item;
            // `cmd &` runs in a subshell of its own.
            let background = matches!(sep, ast::SeparatorOperator::Async);
            self.uncertain += usize::from(background);
            self.pipeline(&and_or.first, depth, cwd);
            self.uncertain += 1;
            for next in &and_or.additional {
                match next {
                    ast::AndOr::And(p) | ast::AndOr::Or(p) => self.pipeline(p, depth, cwd),
                }
            }
            self.uncertain -= 1 + usize::from(background);
        }
    }

    /// Walk `f` as code that may not run, or runs in a subshell.
    fn uncertainly(&mut self, f: impl FnOnce(&mut Self)) {
        self.uncertain += 1;
        f(self);
        self.uncertain -= 1;
    }

    fn pipeline(&mut self, p: &ast::Pipeline, depth: usize, cwd: &mut Cwd) {
        // Each element of a multi-command pipeline runs in a subshell: a `cd`
        // there does not move the others.
        let multi = p.seq.len() > 1;
        self.uncertain += usize::from(multi);
        for cmd in &p.seq {
            if multi {
                let mut own = cwd.clone();
                self.command(cmd, depth, &mut own);
            } else {
                self.command(cmd, depth, cwd);
            }
        }
        self.uncertain -= usize::from(multi);
    }

    fn command(&mut self, c: &ast::Command, depth: usize, cwd: &mut Cwd) {
        match c {
            ast::Command::Simple(s) => self.simple(s, depth, cwd),
            ast::Command::Compound(cc, redirects) => {
                // A redirect that fails skips the body.
                if redirects.is_some() {
                    self.uncertain += 1;
                    self.compound(cc, depth, cwd);
                    self.uncertain -= 1;
                } else {
                    self.compound(cc, depth, cwd);
                }
                if let Some(r) = redirects {
                    let redirects = self.redirects(&r.0, depth, cwd);
                    self.bare_redirects(redirects, depth, cwd);
                }
            }
            ast::Command::Function(f) => {
                if depth == self.top && self.uncertain == 0 {
                    self.units.push(Unit::Function(f.fname.value.clone()));
                }
                // The body runs whenever the function is called; judge it as if it ran.
                let mut own = cwd.clone();
                self.uncertainly(|w| {
                    w.compound(&f.body.0, depth, &mut own);
                    if let Some(r) = &f.body.1 {
                        let redirects = w.redirects(&r.0, depth, &own);
                        w.bare_redirects(redirects, depth, &own);
                    }
                });
            }
            ast::Command::ExtendedTest(t, redirects) => {
                self.bash_only("`[[ ... ]]`", &t.to_string());
                self.extended_test(&t.expr, depth, cwd);
                if let Some(r) = redirects {
                    let redirects = self.redirects(&r.0, depth, cwd);
                    self.bare_redirects(redirects, depth, cwd);
                }
            }
        }
    }

    fn bare_redirects(&mut self, redirects: Vec<Redirect>, depth: usize, cwd: &Cwd) {
        if !redirects.is_empty() {
            self.units.push(Unit::Command(Simple {
                assignments: vec![],
                appended: vec![],
                words: vec![],
                redirects,
                cwd: cwd.clone(),
                depth,
            }));
        }
    }

    fn extended_test(&mut self, e: &ast::ExtendedTestExpr, depth: usize, cwd: &mut Cwd) {
        match e {
            ast::ExtendedTestExpr::And(a, b) | ast::ExtendedTestExpr::Or(a, b) => {
                self.extended_test(a, depth, cwd);
                self.extended_test(b, depth, cwd);
            }
            ast::ExtendedTestExpr::Not(a) | ast::ExtendedTestExpr::Parenthesized(a) => {
                self.extended_test(a, depth, cwd)
            }
            ast::ExtendedTestExpr::UnaryTest(op, w) => {
                self.word(&w.value, depth, cwd);
                // `[[ -v a[i] ]]` evaluates the subscript as arithmetic.
                if matches!(op, ast::UnaryPredicate::ShellVariableIsSetAndAssigned) {
                    // A name known only at run time (`[[ -v $x ]]`) may hold
                    // a subscript, which bash evaluates as arithmetic.
                    let name = w.value.split_once('[').map_or(w.value.as_str(), |(n, _)| n);
                    let name = name.trim_matches(|c| c == '"' || c == '\'');
                    if name.is_empty()
                        || name.starts_with(|c: char| c.is_ascii_digit())
                        || !name.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_')
                    {
                        self.opaque("`[[ -v ... ]]` of a name known only at run time", &w.value);
                    }
                    if let Some((array, subscript)) = w.value.split_once('[') {
                        let subscript = subscript.strip_suffix(']').unwrap_or(subscript);
                        self.arithmetic_text(subscript, "a subscript in `[[ -v ... ]]`", Some(array));
                    }
                }
            }
            ast::ExtendedTestExpr::BinaryTest(op, a, b) => {
                self.word(&a.value, depth, cwd);
                self.word(&b.value, depth, cwd);
                // Bash evaluates the operands of `-eq` and its kin as
                // arithmetic, assignments included (`[[ PATH=7 -eq 7 ]]`).
                use ast::BinaryPredicate as P;
                if matches!(
                    op,
                    P::ArithmeticEqualTo
                        | P::ArithmeticNotEqualTo
                        | P::ArithmeticLessThan
                        | P::ArithmeticLessThanOrEqualTo
                        | P::ArithmeticGreaterThan
                        | P::ArithmeticGreaterThanOrEqualTo
                ) {
                    for operand in [a, b] {
                        // `~-` expands to $OLDPWD, whose value is evaluated.
                        let v = &operand.value;
                        if v.starts_with('~') || v.contains("=~") || v.contains(":~") {
                            self.opaque("a tilde in an operand of `[[ ... -eq ... ]]`, which expands to a value the gate cannot know", v);
                        }
                        self.arithmetic_text(&operand.value, "an operand of `[[ ... -eq ... ]]`", None);
                    }
                }
            }
        }
    }

    fn compound(&mut self, cc: &ast::CompoundCommand, depth: usize, cwd: &mut Cwd) {
        // Only a brace group runs its body once, in this shell, for sure.
        if matches!(cc, ast::CompoundCommand::BraceGroup(_)) {
            self.compound_inner(cc, depth, cwd);
        } else {
            self.uncertainly(|w| w.compound_inner(cc, depth, cwd));
        }
    }

    fn compound_inner(&mut self, cc: &ast::CompoundCommand, depth: usize, cwd: &mut Cwd) {
        match cc {
            ast::CompoundCommand::Arithmetic(a) => {
                self.bash_only("`((...))`", &a.expr.value);
                self.arithmetic(&a.expr.value, depth, cwd)
            }
            ast::CompoundCommand::ArithmeticForClause(f) => {
                self.bash_only("`for ((...))`", "for ((");
                for e in [&f.initializer, &f.condition, &f.updater].into_iter().flatten() {
                    self.arithmetic(&e.value, depth, cwd);
                }
                let mut own = cwd.clone();
                self.compound_list(&f.body.list, depth, &mut own);
                *cwd = merge(cwd, &own);
            }
            ast::CompoundCommand::BraceGroup(b) => self.compound_list(&b.list, depth, cwd),
            ast::CompoundCommand::Subshell(s) => {
                let mut own = cwd.clone();
                self.compound_list(&s.list, depth, &mut own);
            }
            ast::CompoundCommand::ForClause(f) => {
                if super::is_dangerous_env(&f.variable_name) {
                    self.units.push(Unit::DangerousAssignment {
                        name: f.variable_name.clone(),
                        how: "for loop variable".into(),
                    });
                }
                // `for i in 1 2 3`, `for i in {1..10}`: an integer each time;
                // without `in`, the positional parameters.
                let integer = f
                    .values
                    .as_ref()
                    .is_some_and(|values| values.iter().all(|v| is_integer_word(&v.value)));
                self.units.push(Unit::Assigned {
                    name: f.variable_name.clone(),
                    integer,
                    fresh: true,
                });
                for v in f.values.iter().flatten() {
                    self.word(&v.value, depth, cwd);
                }
                let mut own = cwd.clone();
                self.compound_list(&f.body.list, depth, &mut own);
                *cwd = merge(cwd, &own);
            }
            ast::CompoundCommand::CaseClause(c) => {
                self.word(&c.value.value, depth, cwd);
                let start = cwd.clone();
                for item in &c.cases {
                    for p in &item.patterns {
                        self.word(&p.value, depth, cwd);
                    }
                    if let Some(body) = &item.cmd {
                        let mut own = start.clone();
                        self.compound_list(body, depth, &mut own);
                        *cwd = merge(cwd, &own);
                    }
                }
            }
            ast::CompoundCommand::IfClause(i) => {
                self.compound_list(&i.condition, depth, cwd);
                let start = cwd.clone();
                let mut own = start.clone();
                self.compound_list(&i.then, depth, &mut own);
                let mut out = merge(&start, &own);
                for e in i.elses.iter().flatten() {
                    let mut own = start.clone();
                    if let Some(c) = &e.condition {
                        self.compound_list(c, depth, &mut own);
                    }
                    self.compound_list(&e.body, depth, &mut own);
                    out = merge(&out, &own);
                }
                *cwd = out;
            }
            ast::CompoundCommand::WhileClause(w) | ast::CompoundCommand::UntilClause(w) => {
                let mut own = cwd.clone();
                self.compound_list(&w.0, depth, &mut own);
                self.compound_list(&w.1.list, depth, &mut own);
                *cwd = merge(cwd, &own);
            }
            ast::CompoundCommand::Coprocess(c) => {
                self.bash_only("`coproc`", "coproc");
                // `coproc NAME cmd` sets the array NAME to the coprocess's
                // descriptors (`coproc PATH { :; }` makes PATH a number).
                if let Some(name) = c.name.as_ref().map(|n| n.value.as_str()) {
                    if super::is_dangerous_env(name) {
                        self.units.push(Unit::DangerousAssignment {
                            name: name.to_string(),
                            how: "`coproc NAME`".into(),
                        });
                    }
                }
                let mut own = cwd.clone();
                self.command(&c.body, depth, &mut own);
            }
        }
    }

    /// Text bash evaluates as arithmetic. It assigns too (`((PATH=1))`,
    /// `((BASH_CMDS[ls]=1))`): a variable that changes what runs asks, and
    /// every variable it assigns gets an integer. What it reads is judged
    /// by the gate, which knows every assignment of the script.
    fn arithmetic_text(&mut self, expr: &str, how: &str, subscript_of: Option<&str>) {
        let names = arithmetic_names(expr);
        if let Some(name) = names.assigned.iter().find(|n| super::is_dangerous_env(n)) {
            self.units.push(Unit::DangerousAssignment {
                name: name.to_string(),
                how: format!("arithmetic in {how}"),
            });
        }
        for name in names.assigned {
            self.units.push(Unit::Assigned {
                name: name.to_string(),
                integer: true,
                fresh: names.initialized.contains(&name),
            });
        }
        self.units.push(Unit::Arithmetic {
            expr: expr.to_string(),
            how: how.to_string(),
            subscript_of: subscript_of.map(str::to_string),
        });
    }

    fn arithmetic(&mut self, expr: &str, depth: usize, cwd: &Cwd) {
        self.arithmetic_in(expr, "`((...))` or `$((...))`", None, depth, cwd);
    }

    /// The subscript of an array element assigned (`a[i]=x`).
    fn arithmetic_subscript(&mut self, expr: &str, array: &str, depth: usize, cwd: &Cwd) {
        self.arithmetic_in(expr, "an array subscript", Some(array), depth, cwd);
    }

    fn arithmetic_in(&mut self, expr: &str, how: &str, subscript_of: Option<&str>, depth: usize, cwd: &Cwd) {
        self.arithmetic_text(expr, how, subscript_of);
        // Two operands side by side (`rm victim`) are no arithmetic: bash runs
        // `((rm victim) )` as two nested subshells, where the parser saw an
        // arithmetic command ending at `) )`.
        if !is_arithmetic_shaped(expr) {
            self.opaque(
                "`((` that bash may run as nested subshells: its text is no arithmetic",
                expr,
            );
        }
        // Bash evaluates array subscripts and substitutions inside arithmetic:
        // `(( a[$(cmd)] ))` runs cmd. Follow substitutions; anything else in
        // arithmetic only computes numbers.
        if expr.contains("$(") || expr.contains('`') {
            let mut own = cwd.clone();
            self.word(expr, depth, &mut own);
        }
    }

    fn redirects(&mut self, items: &[ast::IoRedirect], depth: usize, cwd: &Cwd) -> Vec<Redirect> {
        let mut out = Vec::new();
        let mut cwd = cwd.clone();
        for r in items {
            match r {
                ast::IoRedirect::File(_fd, kind, target) => {
                    let target_word = match target {
                        ast::IoFileRedirectTarget::Filename(w) => self.word(&w.value, depth, &mut cwd),
                        ast::IoFileRedirectTarget::Fd(_) => {
                            out.push(Redirect {
                                kind: RedirectKind::Dup,
                                target: Word::Lit("&".into()),
                            });
                            continue;
                        }
                        ast::IoFileRedirectTarget::Duplicate(w) => {
                            let t = self.word(&w.value, depth, &mut cwd);
                            // `>&-` closes, `>&2` duplicates; `>&file` (bash) writes a file.
                            let is_fd = t.lit().is_some_and(|s| {
                                s == "-" || s.trim_end_matches('-').chars().all(|c| c.is_ascii_digit())
                            });
                            if is_fd {
                                out.push(Redirect {
                                    kind: RedirectKind::Dup,
                                    target: t,
                                });
                            } else {
                                out.push(Redirect {
                                    kind: RedirectKind::Write,
                                    target: t,
                                });
                            }
                            continue;
                        }
                        ast::IoFileRedirectTarget::ProcessSubstitution(_, sub) => {
                            self.bash_only("a process substitution", "<(...)");
                            let mut own = cwd.clone();
                            self.compound_list(&sub.list, depth + 1, &mut own);
                            out.push(Redirect {
                                kind: RedirectKind::Read,
                                target: Word::Dynamic("<(...)".into()),
                            });
                            continue;
                        }
                    };
                    let kind = match kind {
                        ast::IoFileRedirectKind::Read => RedirectKind::Read,
                        ast::IoFileRedirectKind::DuplicateInput | ast::IoFileRedirectKind::DuplicateOutput => {
                            let is_fd = target_word.lit().is_some_and(|s| {
                                s == "-" || s.trim_end_matches('-').chars().all(|c| c.is_ascii_digit())
                            });
                            match (is_fd, kind) {
                                (true, _) => RedirectKind::Dup,
                                (false, ast::IoFileRedirectKind::DuplicateInput) => RedirectKind::Read,
                                (false, _) => RedirectKind::Write,
                            }
                        }
                        _ => RedirectKind::Write,
                    };
                    out.push(Redirect {
                        kind,
                        target: target_word,
                    });
                }
                ast::IoRedirect::HereDocument(_fd, doc) => {
                    // A body line that starts with the delimiter and goes on
                    // (`EOF)` closing a `$(`): bash may end the document there
                    // and run the rest as commands, where the parser read on.
                    let delimiter: String = doc
                        .here_end
                        .value
                        .chars()
                        .filter(|c| !matches!(c, '\'' | '"' | '\\'))
                        .collect();
                    if !delimiter.is_empty()
                        && doc.doc.value.lines().any(|l| {
                            let l = if doc.remove_tabs { l.trim_start_matches('\t') } else { l };
                            l.starts_with(delimiter.as_str()) && l != delimiter
                        })
                    {
                        self.opaque("a here-document line that starts with its delimiter", &doc.doc.value);
                    }
                    if doc.requires_expansion && doc.doc.value.contains("\\\n") {
                        // Bash joins a backslash-newline in an unquoted body
                        // (ending it early, or making `$\` + `(` a substitution);
                        // the parser does not.
                        self.opaque("a here-document with a line continuation in its body", &doc.doc.value);
                    }
                    // Unquoted, `\$(` is text after expansion.
                    let text = if doc.requires_expansion {
                        doc.doc.value.replace("\\$", "$").replace("\\`", "`")
                    } else {
                        doc.doc.value.clone()
                    };
                    if evaluates_a_subscript(&text) {
                        // Read into a variable, it runs if evaluated as a subscript.
                        self.opaque(
                            "a here-document with a command substitution inside `[...]` in its text",
                            &doc.doc.value,
                        );
                    }
                    if doc.requires_expansion {
                        // An unquoted here-document expands `$(...)` in its body.
                        match guarded(|| word::parse_heredoc(&doc.doc.value, &options())) {
                            Some(Ok(pieces)) => {
                                let mut sink = String::new();
                                let mut dynamic = false;
                                self.pieces(
                                    &pieces,
                                    depth,
                                    &mut cwd,
                                    // A body's line breaks are its own, as in quotes.
                                    true,
                                    &mut sink,
                                    &mut dynamic,
                                    &mut String::new(),
                                );
                            }
                            _ => self.opaque("a here-document body the gate cannot parse", &doc.doc.value),
                        }
                    }
                    out.push(Redirect {
                        kind: RedirectKind::HereInput,
                        target: Word::Lit(String::new()),
                    });
                }
                ast::IoRedirect::HereString(_fd, w) => {
                    self.bash_only("a here-string `<<<`", &w.value);
                    let t = self.word(&w.value, depth, &mut cwd);
                    if let Word::Lit(text) = &t {
                        if holds_a_substitution(text) {
                            // Read into a variable, it runs if evaluated again.
                            self.opaque("a here-string with a command substitution in its text", &w.value);
                        }
                    }
                    out.push(Redirect {
                        kind: RedirectKind::HereInput,
                        target: t,
                    });
                }
                ast::IoRedirect::OutputAndError(w, _append) => {
                    self.bash_only("`&>`", &w.value);
                    let t = self.word(&w.value, depth, &mut cwd);
                    out.push(Redirect {
                        kind: RedirectKind::Write,
                        target: t,
                    });
                }
            }
        }
        out
    }

    fn simple(&mut self, s: &ast::SimpleCommand, depth: usize, cwd: &mut Cwd) {
        let mut assignments = Vec::new();
        let mut appended = Vec::new();
        let mut words = Vec::new();
        let mut redirect_items = Vec::new();
        let mut items: Vec<&ast::CommandPrefixOrSuffixItem> = Vec::new();
        if let Some(p) = &s.prefix {
            items.extend(p.0.iter());
        }
        let name_at = items.len();
        if let Some(suffix) = &s.suffix {
            items.extend(suffix.0.iter());
        }
        // `declare -A m`, surely run before what follows: m is associative
        // from here on (its own `m=([k]=v)` included).
        let declares = s
            .word_or_name
            .as_ref()
            .is_some_and(|w| matches!(w.value.as_str(), "declare" | "typeset"));
        if declares && depth == self.top && self.uncertain == 0 && s.prefix.is_none() {
            let suffix: &[ast::CommandPrefixOrSuffixItem] = s.suffix.as_ref().map_or(&[], |x| &x.0);
            let associative = suffix.iter().any(|i| {
                matches!(i, ast::CommandPrefixOrSuffixItem::Word(w)
                    if w.value.starts_with('-') && !w.value.starts_with("--") && w.value.contains('A'))
            });
            for item in suffix.iter().filter(|_| associative) {
                let name = match item {
                    ast::CommandPrefixOrSuffixItem::Word(w) if !w.value.starts_with(['-', '+']) => w.value.as_str(),
                    ast::CommandPrefixOrSuffixItem::AssignmentWord(a, _) => match &a.name {
                        ast::AssignmentName::VariableName(n) | ast::AssignmentName::ArrayElementName(n, _) => n,
                    },
                    _ => continue,
                };
                if name.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_') {
                    self.units.push(Unit::Associative(name.to_string()));
                }
            }
        }
        // The word just before each item, for `{NAME}>file`: a redirection
        // that stores the descriptor it opens in NAME (`{PATH}>f` sets PATH),
        // which the parser reads as a word followed by a redirection.
        let mut word_before: Option<&str> = None;
        for (i, item) in items.iter().enumerate() {
            if i == name_at {
                if let Some(w) = &s.word_or_name {
                    words.push(self.word(&w.value, depth, cwd));
                    word_before = Some(&w.value);
                }
            }
            if let (ast::CommandPrefixOrSuffixItem::IoRedirect(_), Some(w)) = (item, word_before) {
                if is_descriptor_variable(w) {
                    self.opaque(
                        "a redirection that stores its descriptor in a variable (`{NAME}>...`), which the parser reads as a word",
                        w,
                    );
                }
            }
            word_before = match item {
                ast::CommandPrefixOrSuffixItem::Word(w) => Some(&w.value),
                _ => None,
            };
            match item {
                ast::CommandPrefixOrSuffixItem::IoRedirect(r) => redirect_items.push(r.clone()),
                ast::CommandPrefixOrSuffixItem::Word(w) => words.push(self.word(&w.value, depth, cwd)),
                ast::CommandPrefixOrSuffixItem::AssignmentWord(a, raw) => {
                    let value = match &a.value {
                        ast::AssignmentValue::Scalar(w) => self.word(&w.value, depth, cwd),
                        ast::AssignmentValue::Array(items) => {
                            self.bash_only("an array assignment", &raw.value);
                            let array = match &a.name {
                                ast::AssignmentName::VariableName(n) | ast::AssignmentName::ArrayElementName(n, _) => n,
                            };
                            for (k, v) in items {
                                if let Some(k) = k {
                                    self.word(&k.value, depth, cwd);
                                    // `a=([i]=1)`: the key is a subscript, arithmetic.
                                    self.arithmetic_subscript(&k.value, array, depth, cwd);
                                }
                                self.word(&v.value, depth, cwd);
                            }
                            Word::Dynamic(raw.value.clone())
                        }
                    };
                    if let Word::Lit(v) = &value {
                        if holds_a_substitution(v) {
                            self.opaque(
                                "a value with a command substitution in its text, which bash runs if the value is evaluated again (as a subscript, in arithmetic)",
                                &raw.value,
                            );
                        }
                    }
                    let name = match &a.name {
                        ast::AssignmentName::VariableName(n) => n.clone(),
                        ast::AssignmentName::ArrayElementName(n, idx) => {
                            self.bash_only("an array element assignment", &raw.value);
                            self.arithmetic_subscript(idx, n, depth, cwd);
                            n.clone()
                        }
                    };
                    if i < name_at || s.word_or_name.is_none() {
                        if a.append {
                            appended.push(name.clone());
                        }
                        assignments.push((name, value));
                    } else {
                        // `declare X=1` / `export X=1`: an argument that assigns.
                        words.push(Word::Lit(raw.value.clone()));
                        if let Word::Lit(_) = value {
                        } else {
                            let last = words.len() - 1;
                            words[last] = Word::Dynamic(raw.value.clone());
                        }
                    }
                }
                ast::CommandPrefixOrSuffixItem::ProcessSubstitution(_, sub) => {
                    self.bash_only("a process substitution", "<(...)");
                    let mut own = cwd.clone();
                    self.compound_list(&sub.list, depth + 1, &mut own);
                    words.push(Word::Dynamic("<(...)".into()));
                }
            }
        }
        if name_at == items.len() {
            if let Some(w) = &s.word_or_name {
                words.push(self.word(&w.value, depth, cwd));
            }
        }
        let redirects = self.redirects(&redirect_items, depth, cwd);
        let simple = Simple {
            assignments,
            appended,
            words,
            redirects,
            cwd: cwd.clone(),
            depth,
        };
        // Track `cd` so relative redirect targets can be placed.
        if let Some(Word::Lit(prog)) = simple.words.first() {
            if prog == "cd" || prog == "pushd" || prog == "popd" {
                *cwd = match (prog.as_str(), simple.words.get(1), simple.words.len()) {
                    ("cd", Some(Word::Lit(dir)), 2) if !dir.starts_with('-') => join_cwd(cwd, dir),
                    _ => Cwd::Unknown,
                };
            }
        }
        self.units.push(Unit::Command(simple));
    }

    /// Resolve one word, recording nested scripts as units.
    pub(crate) fn word(&mut self, raw: &str, depth: usize, cwd: &mut Cwd) -> Word {
        // Most words are plain (`pytest`, `-q`, `src/main.rs`): characters bash
        // gives no meaning to need no word parser.
        if !raw.is_empty() && raw.bytes().all(is_plain_byte) {
            return Word::Lit(raw.to_string());
        }
        if has_old_arithmetic(raw) {
            self.opaque(
                "`$[...]`, an old spelling of arithmetic that bash evaluates (assignments included) and the parser reads as text",
                raw,
            );
        }
        let pieces = match guarded(|| word::parse(raw, &options())) {
            Some(Ok(p)) => p,
            _ => {
                self.opaque("a word the gate cannot parse", raw);
                return Word::Dynamic(raw.to_string());
            }
        };
        let mut text = String::new();
        let mut dynamic = false;
        let mut skeleton = String::new();
        self.pieces(&pieces, depth, cwd, false, &mut text, &mut dynamic, &mut skeleton);
        // Bash brace-expands and globs the word as a whole, quotes inside it
        // included (`{"rm",x}`, `r[m"x"]`): judged on the unquoted skeleton.
        let pattern = has_expansion_syntax(&skeleton);
        if skeleton.contains("<(") || skeleton.contains(">(") {
            // In an extglob pattern (`@(x|<(cmd))`) bash runs it; the word
            // parser keeps it as text.
            self.opaque("a process substitution inside a pattern", raw);
        }
        if evaluates_a_subscript(&text) || (dynamic && evaluates_a_subscript(raw)) {
            // Text that runs a command if bash ever uses it as a variable name
            // or an arithmetic operand (`unset 'a[$(cmd)]'`, `x='a[$(cmd)]';
            // echo $((x))`): bash evaluates subscripts, substitutions included.
            self.opaque(
                "a command substitution inside `[...]`, which bash runs if it evaluates the text as a subscript",
                raw,
            );
        }
        if dynamic {
            Word::Dynamic(raw.to_string())
        } else if pattern {
            Word::Pattern(text)
        } else {
            Word::Lit(text)
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn pieces(
        &mut self,
        pieces: &[WordPieceWithSource],
        depth: usize,
        cwd: &mut Cwd,
        quoted: bool,
        text: &mut String,
        dynamic: &mut bool,
        skeleton: &mut String,
    ) {
        for (at, p) in pieces.iter().enumerate() {
            // Unquoted text as it is, anything else as one inert character.
            match &p.piece {
                WordPiece::Text(s) if !quoted => skeleton.push_str(s),
                WordPiece::DoubleQuotedSequence(_) | WordPiece::GettextDoubleQuotedSequence(_) => {}
                _ => skeleton.push('q'),
            }
            if let WordPiece::Text(s) = &p.piece {
                // Bash reads every `${` outside single quotes as an
                // expansion; text here is one the parser did not read, as
                // `${ cmd; }` and `${|cmd;}`, which bash 5.3, ksh93 and mksh
                // run as command substitutions.
                let brace_next = match pieces.get(at + 1).map(|n| &n.piece) {
                    Some(WordPiece::Text(next)) if s.ends_with('$') && next.starts_with('{') => Some(next),
                    _ => None,
                };
                if s.contains("${") || brace_next.is_some() {
                    self.opaque(
                        "a `${` the parser does not read as an expansion (bash 5.3, ksh and mksh run `${ cmd; }` as a command substitution)",
                        &format!("{s}{}", brace_next.map_or("", |n| n.as_str())),
                    );
                }
                if !quoted && s.contains('\n') {
                    // No word spans an unquoted line break: the parsers
                    // disagree about where something ended (a here-document
                    // inside `$(`, which bash closes at `EOF)`).
                    self.opaque("a word that runs on past an unquoted line break", s);
                }
            }
            match &p.piece {
                WordPiece::Text(s) => text.push_str(s),
                WordPiece::SingleQuotedText(s) => text.push_str(s),
                WordPiece::AnsiCQuotedText(s) => match decode_ansi_c(s) {
                    _ if self.other_shell.is_some() => {
                        self.bash_only("`$'...'` quoting", s);
                        *dynamic = true;
                    }
                    Some(d) => text.push_str(&d),
                    None => *dynamic = true,
                },
                WordPiece::DoubleQuotedSequence(inner) => self.pieces(inner, depth, cwd, true, text, dynamic, skeleton),
                WordPiece::GettextDoubleQuotedSequence(inner) => {
                    self.bash_only("`$\"...\"` quoting", "$\"");
                    self.pieces(inner, depth, cwd, true, text, dynamic, skeleton)
                }
                WordPiece::EscapeSequence(s) => {
                    let rest = s.strip_prefix('\\').unwrap_or(s);
                    if quoted {
                        // Inside double quotes only \$ \` \" \\ and \newline are escapes.
                        match rest {
                            "$" | "`" | "\"" | "\\" => text.push_str(rest),
                            "\n" => {}
                            _ => text.push_str(s),
                        }
                    } else if rest != "\n" {
                        text.push_str(rest);
                    }
                }
                WordPiece::TildeExpansion(_) => *dynamic = true,
                WordPiece::ParameterExpansion(pe) => {
                    *dynamic = true;
                    use brush_parser::word::{Parameter, ParameterExpr as Pe, ParameterTransformOp as Op};
                    if parameter_of(pe).is_none_or(|(_, indirect)| indirect) {
                        self.bash_only("indirect expansion `${!...}`", &format!("{pe:?}"));
                    }
                    // `${!x}` expands the variable x names at run time, and a
                    // name `a[$(cmd)]` runs cmd as its subscript is evaluated.
                    if parameter_of(pe).is_some_and(|(_, indirect)| indirect) {
                        self.opaque(
                            "indirect expansion `${!x}`, of a variable whose name (a subscript with it, which bash evaluates) is known only at run time",
                            &format!("{:?}", p.piece),
                        );
                    }
                    // A subscript and a substring's offset and length are
                    // arithmetic, assignments included (`${a[PATH=3]}`).
                    for (expr, array) in parameter_arithmetic(pe) {
                        let how = if array.is_some() {
                            "an array subscript"
                        } else {
                            "a substring offset or length"
                        };
                        self.arithmetic_text(expr, how, array);
                    }
                    match pe {
                        // `${x@P}` expands the value as a prompt: substitutions in it run.
                        Pe::Transform {
                            op: Op::PromptExpand, ..
                        } => self.opaque(
                            "`${...@P}` runs the substitutions in a variable's value",
                            &format!("{:?}", p.piece),
                        ),
                        // `${!x:=value}` assigns to the variable whose name `x`
                        // holds at run time: PATH, GIT_SSH_COMMAND, anything.
                        Pe::AssignDefaultValues { indirect: true, .. } => self.opaque(
                            "`${!NAME:=...}` assigns a variable whose name is only known at run time",
                            &format!("{:?}", p.piece),
                        ),
                        // `${PATH:=dir}` assigns as it expands.
                        Pe::AssignDefaultValues { parameter, .. } => {
                            if let Parameter::Named(name) | Parameter::NamedWithIndex { name, .. } = parameter {
                                self.units.push(Unit::Assigned {
                                    name: name.clone(),
                                    integer: false,
                                    fresh: true,
                                });
                            }
                            // The name, however the parameter is shaped
                            // (`Named("PATH")`, `NamedWithIndex { name: "BASH_CMDS", .. }`):
                            // every quoted string in its description.
                            let described = format!("{parameter:?}");
                            let names: Vec<&str> = described.split('"').skip(1).step_by(2).collect();
                            if let Some(name) = names.iter().find(|n| super::is_dangerous_env(n)) {
                                self.units.push(Unit::DangerousAssignment {
                                    name: name.to_string(),
                                    how: "`${NAME:=...}` expansion".into(),
                                });
                            }
                        }
                        _ => {}
                    }
                    // `${x:-$(cmd)}` runs cmd, `${s/a/$((v))}` evaluates v,
                    // `${u:-${v:=x}}` assigns v: every operand (a default,
                    // an alternative, a pattern, a replacement) with an
                    // expansion in it is judged as the word it is, or asks.
                    for operand in parameter_operands(pe) {
                        if !(operand.contains(['$', '`']) || operand.contains("<(") || operand.contains(">(")) {
                            continue;
                        }
                        if walkable_operand(pe, operand) {
                            let mut own = cwd.clone();
                            self.word(operand, depth, &mut own);
                        } else {
                            self.opaque(
                                "an expansion inside a parameter expansion's operand, read differently in and out of double quotes",
                                &format!("{:?}", p.piece),
                            );
                        }
                    }
                }
                WordPiece::CommandSubstitution(s) => {
                    *dynamic = true;
                    if comment_runs_to_the_end(s) {
                        // Bash's comment would swallow the `)` the parser
                        // ended the substitution at: bash runs more than
                        // the parser saw (`$( #)...` + a line break + `cmd )`).
                        self.opaque(
                            "a comment inside `$(...)` that reaches the `)`, where bash's substitution goes on past it",
                            s,
                        );
                    }
                    let mut own = cwd.clone();
                    self.script(s, depth + 1, &mut own);
                }
                WordPiece::BackquotedCommandSubstitution(s) => {
                    *dynamic = true;
                    if quoted && s.contains("\\\"") {
                        // Inside double quotes bash unescapes `\"` in a backquote too.
                        self.opaque(
                            "a backquoted substitution with an escaped quote inside double quotes",
                            s,
                        );
                    }
                    let inner = unescape_backquoted(s);
                    let mut own = cwd.clone();
                    self.script(&inner, depth + 1, &mut own);
                }
                WordPiece::ArithmeticExpression(e) => {
                    *dynamic = true;
                    self.arithmetic(&e.value, depth, cwd);
                }
            }
        }
    }
}

thread_local! {
    static IN_PARSER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Run third-party parser code, turning a panic into `None`: the parser has
/// `unwrap`s on inputs it does not expect (found by fuzzing: a redirect fd
/// number that overflows `i32`), and the gate must answer every input.
fn guarded<T>(f: impl FnOnce() -> T) -> Option<T> {
    IN_PARSER.with(|g| g.set(true));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).ok();
    IN_PARSER.with(|g| g.set(false));
    r
}

/// Keep the default panic report, except for parser panics the gate contains.
/// Call once at program start.
pub fn quiet_contained_parser_panics() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !IN_PARSER.with(|g| g.get()) {
            previous(info);
        }
    }));
}

/// Parse a nested script (from `bash -c`) at a depth, appending its units.
/// Parse a script that runs in a shell of its own (`bash -c`): its units,
/// between `EnterShell` and `LeaveShell`.
///
/// `shell` is the program that reads it (`bash`, `sh`, `zsh`, ...): a shell
/// of another grammar than bash's is not understood where the script uses
/// bash's own syntax, nor at all for a grammar unlike bash's (zsh, fish).
pub fn parse_nested(script: &str, shell: &str, depth: usize, cwd: &Cwd, out: &mut Vec<Unit>) {
    let mut w = Walker {
        units: Vec::new(),
        uncertain: 0,
        top: depth,
        other_shell: (!super::normalize::reads_bash_grammar(shell)).then(|| shell.to_string()),
    };
    if let Some(why) = super::normalize::grammar_unlike_bash(shell) {
        w.opaque(&why, script);
    }
    let mut cwd = cwd.clone();
    w.script(script, depth, &mut cwd);
    out.push(Unit::EnterShell);
    out.extend(w.units);
    out.push(Unit::LeaveShell);
}

fn merge(a: &Cwd, b: &Cwd) -> Cwd {
    if a == b {
        a.clone()
    } else {
        Cwd::Unknown
    }
}

fn join_cwd(cwd: &Cwd, dir: &str) -> Cwd {
    match cwd {
        Cwd::Unknown => Cwd::Unknown,
        Cwd::Known(_) if dir.starts_with('/') => Cwd::Unknown,
        Cwd::Known(base) => {
            let mut parts: Vec<&str> = base.split('/').filter(|s| !s.is_empty()).collect();
            for c in dir.split('/') {
                match c {
                    "" | "." => {}
                    ".." => {
                        // Above the start is still a known place: the gate
                        // resolves it against the workspace.
                        if parts.last().is_none_or(|p| *p == "..") {
                            parts.push("..");
                        } else {
                            parts.pop();
                        }
                    }
                    other => parts.push(other),
                }
            }
            Cwd::Known(parts.join("/"))
        }
    }
}

/// Bytes that are literal in any position of an unquoted word. Not here:
/// quotes, `\`, `$`, `` ` ``, glob and brace characters, `~`, `!`, `#`, `&`,
/// `;`, `|`, `<`, `>`, parentheses, whitespace, and non-ASCII (left to the parser).
fn is_plain_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'-' | b'_' | b'.' | b'/' | b'=' | b':' | b',' | b'+' | b'@' | b'%' | b'^'
        )
}

/// Unquoted characters that make bash expand a word into other words.
fn has_expansion_syntax(s: &str) -> bool {
    let glob_class = s.find('[').is_some_and(|i| s[i + 1..].contains(']'));
    let brace = s.find('{').is_some_and(|i| {
        let rest = &s[i + 1..];
        rest.find('}')
            .is_some_and(|j| rest[..j].contains(',') || rest[..j].contains(".."))
    });
    s.contains(['*', '?']) || glob_class || brace || s.contains("@(") || s.contains("!(") || s.contains("+(")
}

/// Whether the text parses as an arithmetic expression once each expansion
/// in it (`$x`, `${...}`, `$(...)`, `` `...` ``) stands for a number, as bash
/// expands them before it evaluates: a command (`rm -f x`, `"rm" x`,
/// `touch$IFS./x`) does not.
fn is_arithmetic_shaped(expr: &str) -> bool {
    let mut out = String::with_capacity(expr.len());
    let b = expr.as_bytes();
    let mut i = 0;
    // The end of a bracketed expansion starting at `from`, counting nesting.
    let closing = |from: usize, open: u8, close: u8| {
        let mut depth = 0usize;
        for (j, &c) in b.iter().enumerate().skip(from) {
            if c == open {
                depth += 1;
            } else if c == close {
                depth -= 1;
                if depth == 0 {
                    return Some(j);
                }
            }
        }
        None
    };
    while i < b.len() {
        let end = match (b[i], b.get(i + 1)) {
            (b'$', Some(b'{')) => closing(i + 1, b'{', b'}'),
            (b'$', Some(b'(')) => closing(i + 1, b'(', b')'),
            (b'$', Some(c)) if c.is_ascii_alphanumeric() || *c == b'_' => {
                let n = b[i + 1..]
                    .iter()
                    .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_')
                    .count();
                Some(i + n)
            }
            (b'$', Some(b'@' | b'*' | b'#' | b'?' | b'-' | b'$' | b'!')) => Some(i + 1),
            (b'`', _) => b[i + 1..].iter().position(|c| *c == b'`').map(|n| i + 1 + n),
            // Bash removes double quotes in arithmetic (`(( "$n" > 0 ))`).
            (b'"', _) => {
                i += 1;
                continue;
            }
            _ => {
                out.push(b[i] as char);
                i += 1;
                continue;
            }
        };
        let Some(end) = end else {
            return false;
        };
        // Blanks around it: `rm${IFS}x` is two operands, not the name `rm1x`.
        out.push_str(" 1 ");
        i = end + 1;
    }
    guarded(|| brush_parser::arithmetic::parse(&out).is_ok()).unwrap_or(false)
}

/// Whether text holds a command substitution inside `[...]` (`a[$(cmd)]`,
/// ``a[`cmd`]``), which bash runs when it evaluates the text as a
/// subscript: as a variable name (`unset`, `read`, `printf -v`, `test -v`)
/// or as the value of a variable used in arithmetic.
fn evaluates_a_subscript(text: &str) -> bool {
    text.match_indices('[').any(|(i, _)| {
        // A subscript follows a name (`a[...]`); a test's `[ ... ]` does not.
        // (or opens on a substitution, its name joined on later: `printf -v
        // z %s%s a '[$(cmd)]'`).
        let after_name = text[..i]
            .chars()
            .last()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        let rest = &text[i + 1..];
        (after_name || rest.starts_with("$(")) && rest.rfind(']').is_some_and(|end| holds_a_substitution(&rest[..end]))
    })
}

/// Whether literal text holds a command substitution (`$(...)`, a
/// backquote): harmless as an argument, but as a variable's value it runs
/// when bash evaluates the value again (as a subscript, in arithmetic, with
/// `${x@P}`), which the gate cannot follow.
/// Whether `text` (a substitution's, as the parser cut it) holds a `#`
/// that starts a comment, outside quotes, with no line break after it:
/// bash's comment would run on past the end of the text.
fn comment_runs_to_the_end(text: &str) -> bool {
    let (mut single, mut double, mut escaped) = (false, false, false);
    let mut prev: Option<char> = None;
    let mut open_comment = false;
    for c in text.chars() {
        if open_comment {
            if c == '\n' {
                open_comment = false;
            }
        } else if escaped {
            escaped = false;
        } else if single {
            single = c != '\'';
        } else if c == '\\' {
            escaped = true;
        } else if double {
            double = c != '"';
        } else if c == '\'' {
            single = true;
        } else if c == '"' {
            double = true;
        } else if c == '#' && prev.is_none_or(|p| p.is_whitespace() || ";&|()<>".contains(p)) {
            open_comment = true;
        }
        prev = Some(c);
    }
    open_comment
}

/// Whether a `#` after a blank (or at the start) lies between a `((` and the
/// `))` that closes it, or after a `((` never closed. Quotes are not
/// followed: a `((` inside a string makes it ask, never allow.
fn comment_inside_arithmetic(src: &str) -> bool {
    let b = src.as_bytes();
    let mut i = 0;
    while i + 1 < b.len() {
        if b[i] == b'(' && b[i + 1] == b'(' {
            let mut depth = 0usize;
            let mut j = i + 2;
            while j < b.len() {
                match b[j] {
                    b'(' => depth += 1,
                    b')' if depth == 0 => break,
                    b')' => depth -= 1,
                    b'#' if b[j - 1].is_ascii_whitespace() || b"(;&|".contains(&b[j - 1]) => return true,
                    _ => {}
                }
                j += 1;
            }
            i = j;
        } else {
            i += 1;
        }
    }
    false
}

/// The words inside a parameter expansion that bash expands: a default,
/// an alternative, an error message, a pattern, a replacement.
fn parameter_operands(pe: &brush_parser::word::ParameterExpr) -> Vec<&str> {
    use brush_parser::word::ParameterExpr as Pe;
    match pe {
        Pe::UseDefaultValues { default_value: v, .. }
        | Pe::AssignDefaultValues { default_value: v, .. }
        | Pe::IndicateErrorIfNullOrUnset { error_message: v, .. }
        | Pe::UseAlternativeValue {
            alternative_value: v, ..
        }
        | Pe::RemoveSmallestSuffixPattern { pattern: v, .. }
        | Pe::RemoveLargestSuffixPattern { pattern: v, .. }
        | Pe::RemoveSmallestPrefixPattern { pattern: v, .. }
        | Pe::RemoveLargestPrefixPattern { pattern: v, .. }
        | Pe::UppercaseFirstChar { pattern: v, .. }
        | Pe::UppercasePattern { pattern: v, .. }
        | Pe::LowercaseFirstChar { pattern: v, .. }
        | Pe::LowercasePattern { pattern: v, .. } => v.as_deref().into_iter().collect(),
        Pe::ReplaceSubstring {
            pattern, replacement, ..
        } => std::iter::once(pattern.as_str())
            .chain(replacement.as_deref())
            .collect(),
        _ => Vec::new(),
    }
}

/// Whether an operand of a parameter expansion reads the same in and out
/// of double quotes, so the gate can judge it as a word: the parameter is
/// a plain name or number, and the operand holds no single quote, escape,
/// backquote, `#`, line break or process substitution (in a `$(` inside
/// `${...}` the parser and bash disagree about where a comment starts).
fn walkable_operand(pe: &brush_parser::word::ParameterExpr, operand: &str) -> bool {
    use brush_parser::word::Parameter;
    let plain = parameter_of(pe)
        .is_some_and(|(p, indirect)| !indirect && matches!(p, Parameter::Named(_) | Parameter::Positional(_)));
    plain && !operand.contains(['\'', '\\', '`', '#', '\n']) && !operand.contains("<(") && !operand.contains(">(")
}

/// The parameter of an expansion, and whether it is indirect (`${!x}`);
/// `None` for those that only list names or keys (`${!prefix*}`, `${!a[@]}`).
fn parameter_of(pe: &brush_parser::word::ParameterExpr) -> Option<(&brush_parser::word::Parameter, bool)> {
    use brush_parser::word::ParameterExpr as Pe;
    match pe {
        Pe::Parameter { parameter, indirect }
        | Pe::UseDefaultValues {
            parameter, indirect, ..
        }
        | Pe::AssignDefaultValues {
            parameter, indirect, ..
        }
        | Pe::IndicateErrorIfNullOrUnset {
            parameter, indirect, ..
        }
        | Pe::UseAlternativeValue {
            parameter, indirect, ..
        }
        | Pe::ParameterLength { parameter, indirect }
        | Pe::RemoveSmallestSuffixPattern {
            parameter, indirect, ..
        }
        | Pe::RemoveLargestSuffixPattern {
            parameter, indirect, ..
        }
        | Pe::RemoveSmallestPrefixPattern {
            parameter, indirect, ..
        }
        | Pe::RemoveLargestPrefixPattern {
            parameter, indirect, ..
        }
        | Pe::Substring {
            parameter, indirect, ..
        }
        | Pe::Transform {
            parameter, indirect, ..
        }
        | Pe::UppercaseFirstChar {
            parameter, indirect, ..
        }
        | Pe::UppercasePattern {
            parameter, indirect, ..
        }
        | Pe::LowercaseFirstChar {
            parameter, indirect, ..
        }
        | Pe::LowercasePattern {
            parameter, indirect, ..
        }
        | Pe::ReplaceSubstring {
            parameter, indirect, ..
        } => Some((parameter, *indirect)),
        Pe::VariableNames { .. } | Pe::MemberKeys { .. } => None,
    }
}

/// The arithmetic texts bash evaluates in a parameter expansion: an array
/// subscript (`${a[i+1]}`), a substring's offset and length (`${a:n:2}`).
/// Each with the array whose subscript it is.
fn parameter_arithmetic(pe: &brush_parser::word::ParameterExpr) -> Vec<(&str, Option<&str>)> {
    use brush_parser::word::{Parameter, ParameterExpr as Pe};
    let mut arithmetic = Vec::new();
    if let Some((Parameter::NamedWithIndex { name, index }, _)) = parameter_of(pe) {
        // `${a[@]}`, `${a[*]}`: every element, no arithmetic.
        if !matches!(index.as_str(), "@" | "*") {
            arithmetic.push((index.as_str(), Some(name.as_str())));
        }
    }
    if let Pe::Substring { offset, length, .. } = pe {
        arithmetic.push((offset.value.as_str(), None));
        arithmetic.extend(length.as_ref().map(|l| (l.value.as_str(), None)));
    }
    arithmetic
}

pub(crate) fn holds_a_substitution(text: &str) -> bool {
    text.match_indices("$(")
        .any(|(i, _)| !is_arithmetic_expansion(&text[i + 2..]))
        || text.contains('`')
}

/// Whether the text after a `$(` makes it `$((...))`, arithmetic: a second
/// `(` whose match is followed at once by the closing `)`. `$((cmd) )` is a
/// command substitution holding a subshell.
fn is_arithmetic_expansion(after: &str) -> bool {
    let Some(inner) = after.strip_prefix('(') else {
        return false;
    };
    let mut depth = 0usize;
    let b = inner.as_bytes();
    for (j, &c) in b.iter().enumerate() {
        match c {
            b'(' => depth += 1,
            b')' if depth == 0 => return b.get(j + 1) == Some(&b')'),
            b')' => depth -= 1,
            _ => {}
        }
    }
    false
}

/// Backquoted substitutions treat `\$`, `` \` `` and `\\` as escapes.
fn unescape_backquoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(&n) = chars.peek() {
                if n == '$' || n == '`' || n == '\\' {
                    out.push(n);
                    chars.next();
                    continue;
                }
            }
        }
        out.push(c);
    }
    out
}

/// Decode the body of `$'...'`. `None` for escapes we do not decode exactly,
/// and for a NUL, where bash cuts the word short.
pub fn decode_ansi_c(s: &str) -> Option<String> {
    let mut out = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let e = chars.next()?;
        let take_digits = |chars: &mut std::iter::Peekable<std::str::Chars>, radix: u32, max: usize| {
            let mut v = String::new();
            while v.len() < max {
                match chars.peek() {
                    Some(d) if d.is_digit(radix) => {
                        v.push(*d);
                        chars.next();
                    }
                    _ => break,
                }
            }
            v
        };
        match e {
            'n' => out.push('\n'),
            't' => out.push('\t'),
            'r' => out.push('\r'),
            'a' => out.push('\x07'),
            'b' => out.push('\x08'),
            'e' | 'E' => out.push('\x1b'),
            'f' => out.push('\x0c'),
            'v' => out.push('\x0b'),
            '\\' => out.push('\\'),
            '\'' => out.push('\''),
            '"' => out.push('"'),
            '?' => out.push('?'),
            'x' => {
                let v = take_digits(&mut chars, 16, 2);
                let n = u32::from_str_radix(&v, 16).ok()?;
                out.push(char::from_u32(n).filter(|c| c.is_ascii() && *c != '\0')?);
            }
            'u' | 'U' => {
                let v = take_digits(&mut chars, 16, if e == 'u' { 4 } else { 8 });
                out.push(char::from_u32(u32::from_str_radix(&v, 16).ok()?).filter(|c| *c != '\0')?);
            }
            '0'..='7' => {
                let mut v = e.to_string();
                v.push_str(&take_digits(&mut chars, 8, 2));
                let n = u32::from_str_radix(&v, 8).ok()?;
                out.push(char::from_u32(n).filter(|c| c.is_ascii() && *c != '\0')?);
            }
            _ => return None,
        }
    }
    Some(out)
}

/// Maximum nesting of `(`, `{` outside quotes, roughly; only used to refuse to
/// hand pathological input to a recursive parser, never to decide.
fn bracket_depth(s: &str) -> usize {
    let (mut depth, mut max) = (0usize, 0usize);
    for b in s.bytes() {
        match b {
            b'(' | b'{' => {
                depth += 1;
                max = max.max(depth);
            }
            b')' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// `{NAME}`: the spelling of a redirection's descriptor variable.
fn is_descriptor_variable(w: &str) -> bool {
    w.strip_prefix('{').and_then(|r| r.strip_suffix('}')).is_some_and(|n| {
        n.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// `$[` outside single quotes: bash's old arithmetic expansion.
fn has_old_arithmetic(raw: &str) -> bool {
    let (mut single, mut escaped) = (false, false);
    let b = raw.as_bytes();
    for (i, &c) in b.iter().enumerate() {
        match c {
            _ if escaped => escaped = false,
            b'\\' if !single => escaped = true,
            b'\'' => single = !single,
            b'$' if !single && b.get(i + 1) == Some(&b'[') => return true,
            _ => {}
        }
    }
    false
}

/// Whether a word, as written, is an integer whatever runs: a literal
/// number (`5`, `-1`, `0x1f`), a brace range of them (`{1..10}`, in a
/// `for` list, where braces expand), `$((...))`, `${#x}`, `$#`, `$?`, `$$`, `$!`.
pub fn is_integer_word(raw: &str) -> bool {
    let raw = raw
        .strip_prefix('"')
        .and_then(|r| r.strip_suffix('"'))
        .or_else(|| raw.strip_prefix('\'').and_then(|r| r.strip_suffix('\'')))
        .unwrap_or(raw);
    if is_integer_literal(raw) || matches!(raw, "$#" | "$?" | "$$" | "$!" | "${#}") {
        return true;
    }
    if let Some(range) = raw.strip_prefix('{').and_then(|r| r.strip_suffix('}')) {
        let parts: Vec<&str> = range.split("..").collect();
        return (2..=3).contains(&parts.len()) && parts.iter().all(|p| is_integer_literal(p));
    }
    if let Some(name) = raw.strip_prefix("${#").and_then(|r| r.strip_suffix('}')) {
        // A length, whatever its subscript (judged where it is parsed).
        return name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'[' | b']' | b'@' | b'*'));
    }
    // One `$((...))` and nothing else: it closes at the very end.
    raw.strip_prefix("$((").is_some_and(|_| {
        is_arithmetic_expansion(&raw[2..]) && {
            let mut depth = 0usize;
            let mut end = None;
            for (j, c) in raw.bytes().enumerate().skip(1) {
                match c {
                    b'(' => depth += 1,
                    b')' => {
                        depth -= 1;
                        if depth == 0 {
                            end = Some(j);
                            break;
                        }
                    }
                    _ => {}
                }
            }
            end == Some(raw.len() - 1)
        }
    })
}

/// `5`, `-1`, `+3`, `0x1f`: a number, with no name in it.
pub fn is_integer_literal(text: &str) -> bool {
    let digits = text.strip_prefix(['-', '+']).unwrap_or(text);
    match digits.strip_prefix("0x").or_else(|| digits.strip_prefix("0X")) {
        Some(hex) => !hex.is_empty() && hex.bytes().all(|c| c.is_ascii_hexdigit()),
        None => !digits.is_empty() && digits.bytes().all(|c| c.is_ascii_digit()),
    }
}

/// What an arithmetic expression does with the variables it names, as bash
/// evaluates it: the text is expanded first (`$v`, `${v}`, `$(cmd)`), and
/// every name left in it is read as a variable whose value is evaluated as
/// arithmetic in turn (so a value `a[$(cmd)]` runs cmd, `PATH=7` assigns
/// PATH), unless the name is only assigned to (`n = 1`).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ArithmeticNames<'a> {
    /// Variables whose values the expression evaluates (as `$v` or `v`).
    pub read: Vec<&'a str>,
    /// Variables it assigns (`n = 1`, `n += 1`, `n++`, `a[i] = 1`).
    pub assigned: Vec<&'a str>,
    /// Variables it assigns a value built without their old one (`n = 1`,
    /// not `n += 1`, `n++` or `n = n + 1`).
    pub initialized: Vec<&'a str>,
    /// Text in it whose value the gate cannot know: a command
    /// substitution's output, a positional parameter, `$@`, `${!x}`.
    pub unknown: Option<String>,
}

/// Where the bracketed subscript that opens at `b[from]` (a `[`) ends,
/// past its `]`; `None` when it is not closed.
fn past_subscript(b: &[u8], from: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (k, c) in b.iter().enumerate().skip(from) {
        match c {
            b'[' => depth += 1,
            b']' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return Some(k + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// The variables an arithmetic expression reads and assigns; see
/// [`ArithmeticNames`]. Quotes are ignored (bash removes double quotes in
/// arithmetic); what follows a name inside `${...}` (`${x:-PATH=1}`) is read
/// as more arithmetic, which may only over-count.
pub fn arithmetic_names(expr: &str) -> ArithmeticNames<'_> {
    let b = expr.as_bytes();
    let mut out = ArithmeticNames::default();
    let ident_len = |from: usize| {
        b[from..]
            .iter()
            .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_')
            .count()
    };
    let is_ident_start = |c: u8| c.is_ascii_alphabetic() || c == b'_';
    let is_ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    // Where the last expansion (`$x`, `${x}`) ended: text joined to it is
    // the joined expansion's own.
    let mut last_expansion_end = usize::MAX;
    // Whether an identifier character sits next to position `at` (looking
    // left from it, or right from it), quotes skipped: `w$x`, `w"$x"`,
    // `${x}w` build a name at run time.
    let joined_left = |at: usize, last_end: usize| {
        let mut p = at;
        while p > 0 && matches!(b[p - 1], b'"' | b'\'' | b'\\') {
            p -= 1;
        }
        p > 0 && p != last_end && is_ident(b[p - 1])
    };
    let joined_right = |at: usize| {
        let mut p = at;
        while p < b.len() && matches!(b[p], b'"' | b'\'' | b'\\') {
            p += 1;
        }
        p < b.len() && is_ident(b[p])
    };
    let joined = "an expansion joined to a name or number (`w$x`), which builds a name the gate cannot know";
    let subscript_end = |from: usize| past_subscript(b, from);
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'`' {
            out.unknown
                .get_or_insert_with(|| "a backquoted command substitution, whose output bash evaluates".into());
            i += 1;
            continue;
        }
        if c == b'$' {
            let next = b.get(i + 1).copied();
            let expansion = matches!(
                next,
                Some(b'{' | b'(' | b'[' | b'#' | b'?' | b'$' | b'!' | b'@' | b'*' | b'-')
            ) || next.is_some_and(|n| n.is_ascii_alphanumeric() || n == b'_');
            if expansion && joined_left(i, last_expansion_end) {
                out.unknown.get_or_insert_with(|| joined.into());
            }
            match next {
                Some(b'(') if is_arithmetic_expansion(&expr[i + 2..]) => i += 3, // its text is arithmetic too
                Some(b'(') => {
                    out.unknown
                        .get_or_insert_with(|| "a command substitution, whose output bash evaluates".into());
                    i += 2;
                }
                Some(b'[') => {
                    // `$[...]`, arithmetic as well (asked about where it is parsed).
                    i += 2;
                }
                Some(b'{') => {
                    let j = i + 2;
                    // Only `${x}`, `${x[...]}`, `${#x}`, `${#x[...]}`, `${#}`,
                    // `${?}`, `${$}` are known; any operator is not.
                    let (name_at, length) = match b.get(j).copied() {
                        Some(b'#') if b.get(j + 1).is_some_and(|n| is_ident_start(*n)) => (j + 1, true),
                        Some(b'#' | b'?' | b'$') if b.get(j + 1) == Some(&b'}') => {
                            i = j + 2;
                            last_expansion_end = i;
                            if joined_right(i) {
                                out.unknown.get_or_insert_with(|| joined.into());
                            }
                            continue;
                        }
                        Some(n) if is_ident_start(n) => (j, false),
                        _ => (usize::MAX, false),
                    };
                    if name_at == usize::MAX {
                        out.unknown.get_or_insert_with(|| {
                            let shown: String = expr[i..].chars().take(4).collect();
                            format!("`{shown}`, a parameter whose value the gate cannot know")
                        });
                        i = j;
                        continue;
                    }
                    let len = ident_len(name_at);
                    let after = name_at + len;
                    let close = match b.get(after) {
                        Some(b'}') => Some(after),
                        Some(b'[') => subscript_end(after).filter(|e| b.get(*e) == Some(&b'}')),
                        _ => None,
                    };
                    let Some(close) = close else {
                        out.unknown.get_or_insert_with(|| {
                            "a parameter expansion with an operator, whose value the gate cannot know".into()
                        });
                        i = after;
                        continue;
                    };
                    if !length {
                        out.read.push(&expr[name_at..after]);
                    }
                    if joined_right(close + 1) {
                        out.unknown.get_or_insert_with(|| joined.into());
                    }
                    // A subscript is scanned as arithmetic of its own; the
                    // expansion ends at its `}`.
                    last_expansion_end = close + 1;
                    i = after;
                }
                Some(n) if is_ident_start(n) => {
                    let len = ident_len(i + 1);
                    out.read.push(&expr[i + 1..i + 1 + len]);
                    i += 1 + len;
                    last_expansion_end = i;
                    if joined_right(i) {
                        out.unknown.get_or_insert_with(|| joined.into());
                    }
                }
                // `$#`, `$?`, `$$`, `$!`: numbers by construction.
                Some(b'#' | b'?' | b'$' | b'!') => {
                    i += 2;
                    last_expansion_end = i;
                    if joined_right(i) {
                        out.unknown.get_or_insert_with(|| joined.into());
                    }
                }
                Some(n) if n.is_ascii_digit() || matches!(n, b'@' | b'*' | b'-') => {
                    out.unknown.get_or_insert_with(|| {
                        format!("`${}`, a parameter whose value the gate cannot know", n as char)
                    });
                    i += 2;
                }
                _ => i += 1,
            }
            continue;
        }
        if c.is_ascii_digit() {
            // A number, in any base (`16#ff`, `0x1f`, `64#a@_`).
            i += b[i..]
                .iter()
                .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'#' | b'@'))
                .count();
            continue;
        }
        if !is_ident_start(c) {
            i += 1;
            continue;
        }
        let len = ident_len(i);
        let name = &expr[i..i + len];
        // After the name, and its subscript if any: the operator.
        let mut k = i + len;
        if b.get(k) == Some(&b'[') {
            k = past_subscript(b, k).unwrap_or(b.len());
        }
        while b.get(k).is_some_and(u8::is_ascii_whitespace) {
            k += 1;
        }
        let rest = &b[k.min(b.len())..];
        let plain_assignment = rest.first() == Some(&b'=') && rest.get(1) != Some(&b'=');
        let compound = [
            &b"+="[..],
            b"-=",
            b"*=",
            b"/=",
            b"%=",
            b"<<=",
            b">>=",
            b"&=",
            b"^=",
            b"|=",
            b"++",
            b"--",
        ]
        .iter()
        .any(|op| rest.starts_with(op));
        let before = expr[..i].trim_end();
        let prefixed = before.ends_with("++") || before.ends_with("--");
        if plain_assignment || compound || prefixed {
            out.assigned.push(name);
        }
        if plain_assignment && !prefixed {
            // The value, up to the next `,` or `;` outside parentheses.
            let mut depth = 0usize;
            let value_end = b[k + 1..]
                .iter()
                .position(|c| match c {
                    b'(' => {
                        depth += 1;
                        false
                    }
                    b')' if depth > 0 => {
                        depth -= 1;
                        false
                    }
                    b',' | b';' => depth == 0,
                    _ => false,
                })
                .map_or(b.len(), |p| k + 1 + p);
            if !identifiers(&expr[k + 1..value_end]).any(|n| n == name) {
                out.initialized.push(name);
            }
        }
        // `n = 1` only assigns; `n += 1`, `n++` read the old value too.
        if !plain_assignment {
            out.read.push(name);
        }
        i += len; // a subscript is scanned as arithmetic of its own
    }
    out
}

/// The names in an arithmetic expression (or anything else): runs of
/// letters, digits and `_` that do not start with a digit.
pub(crate) fn identifiers(expr: &str) -> impl Iterator<Item = &str> {
    expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|t| t.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(script: &str) -> Vec<Vec<Word>> {
        parse_script(script)
            .unwrap()
            .into_iter()
            .filter_map(|u| match u {
                Unit::Command(s) => Some(s.words),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn quotes_and_escapes_resolve() {
        for s in ["'rm' x", "\\rm x", "r\\m x", "\"rm\" x", "$'\\x72m' x", "r''m x"] {
            assert_eq!(words(s)[0][0], Word::Lit("rm".into()), "{s}");
        }
    }

    #[test]
    fn substitutions_are_walked() {
        let w = words("echo $(rm -rf x) `curl y` <(wget z)");
        let progs: Vec<_> = w.iter().map(|c| c[0].display().to_string()).collect();
        assert!(progs.contains(&"rm".to_string()), "{progs:?}");
        assert!(progs.contains(&"curl".to_string()), "{progs:?}");
        assert!(progs.contains(&"wget".to_string()), "{progs:?}");
    }

    #[test]
    fn braces_and_globs_are_patterns() {
        assert!(matches!(words("{rm,-rf,x}")[0][0], Word::Pattern(_)));
        assert!(matches!(words("/???/r? x")[0][0], Word::Pattern(_)));
        assert!(matches!(words("'{rm,x}'")[0][0], Word::Lit(_)));
    }

    #[test]
    fn parser_panics_are_contained() {
        // Found by `cargo fuzz run gate`: brush-parser unwraps the fd number.
        let units = parse_script("3333333333333333333328>&=").unwrap();
        assert!(units.iter().any(|u| matches!(u, Unit::Opaque { .. })), "{units:?}");
    }

    #[test]
    fn cd_is_tracked() {
        let units = parse_script("cd src && echo hi > out.txt").unwrap();
        let Unit::Command(s) = &units[1] else { panic!() };
        assert_eq!(s.cwd, Cwd::Known("src".into()));
    }
}
