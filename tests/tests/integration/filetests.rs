//! Text filetests of the transforms, the Cranelift way: every file under
//! `tests/filetests/` (any depth, ending in `.ir`) holds a pass to run, an input IR
//! in the text form of [`popart_ir::text`], and the text the pass must produce.
//!
//! ```text
//! ; run: prune
//! ; Any other line starting with `;` is a comment.
//! ir num_host_transfers=1 replication_factor=1
//!
//! graph main
//!   ...
//! ; ---- expected ----
//! # removed ops: main/dead
//! ...
//! ```
//!
//! - The one `; run: PASS [OPTIONS]` line names the pass. Passes (see
//!   `tests/filetests/README.md` for their options and output):
//!   `prune` (`popart_transforms::prune::prune`), `autodiff graph=NAME [provided=T,..]
//!   [required=T,..] [all]` (`popart_transforms::autodiff`), `fuse_weight_update`
//!   (`popart_transforms::patterns::fuse_weight_updates`), `prepare [no_patterns]`
//!   (`popart_transforms::prepare::prepare_with`), `lower` (`popart_lower::lower`,
//!   whose output is the lowered program's dump), and `pass NAME`: any pass of the
//!   preparation pipeline (or `merge-exchange`) looked up by its name.
//! - The input is every line before the separator `; ---- expected ----`, with
//!   `;` lines blanked (so parse errors give the line of the file).
//! - The expected output is everything after the separator. Passes that change the
//!   IR print what they report as `#` lines, then the IR's text: the expected output
//!   is itself valid IR text. A pass that fails prints `error: MESSAGE`.
//!
//! Comparison ignores trailing whitespace on lines and trailing blank lines. On a
//! mismatch the test fails with a line diff (`-` expected, `+` actual) of every
//! failing file.
//!
//! **Blessing**: run with `BLESS=1` (`BLESS=1 cargo test -p tests --test integration filetests::`)
//! to rewrite the expected section of every file with what the pass now produces
//! (a file without a separator gets one). Read the rewritten expectations before
//! committing them: a filetest only checks what its expectation says.
//!
//! Problems of the file itself (no `run` line, an unknown pass or option, an input
//! that does not parse) fail the test even when blessing.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use popart_ir::{text, GraphId, Ir, TensorId};
use popart_transforms::autodiff::{autodiff, GradGraphInfo, GradGraphInfos};
use popart_transforms::prepare::{prepare_with, PrepareOptions};

/// The line between the input and the expected output.
const SEPARATOR: &str = "; ---- expected ----";

/// A filetest split into its parts.
struct FileTest<'a> {
    /// The words after `; run:`.
    command: &'a str,
    /// The input IR text, `;` lines blanked.
    input: String,
    /// The expected output and its first line's number in the file; `None` without a separator.
    expected: Option<(&'a str, usize)>,
}

fn split(file: &str) -> Result<FileTest<'_>, String> {
    let (head, expected) = match file.find(&format!("\n{SEPARATOR}")) {
        Some(i) => {
            let rest = &file[i + 1 + SEPARATOR.len()..];
            let rest = rest.strip_prefix("\r\n").or_else(|| rest.strip_prefix('\n')).unwrap_or(rest);
            let line = file[..i].lines().count() + 2;
            (&file[..i + 1], Some((rest, line)))
        }
        None => (file, None),
    };
    let mut command = None;
    let mut input = String::new();
    for (k, line) in head.lines().enumerate() {
        let t = line.trim_start();
        if let Some(c) = t.strip_prefix("; run:") {
            if command.replace(c.trim()).is_some() {
                return Err(format!("line {}: a second `; run:` line", k + 1));
            }
        }
        if !t.starts_with(';') {
            input.push_str(line);
        }
        input.push('\n');
    }
    let command = command.ok_or("no `; run: PASS` line")?;
    Ok(FileTest { command, input, expected })
}

/// Why a file could not be run at all (not something to bless).
#[derive(Debug)]
struct SetupError(String);

/// Run the file's pass on its input; the text it produces.
fn run(command: &str, input: &str) -> Result<String, SetupError> {
    let mut words = command.split_whitespace();
    let pass = words.next().ok_or_else(|| SetupError("`; run:` names no pass".into()))?;
    let opts = Options::parse(words);
    let mut ir = text::parse(input).map_err(|e| SetupError(format!("the input does not parse: {e}")))?;
    let out = match pass {
        "prune" => {
            opts.allow(&[])?;
            run_prune(&mut ir)
        }
        "autodiff" => {
            opts.allow(&["graph", "provided", "required", "all"])?;
            run_autodiff(&mut ir, &opts)?
        }
        "fuse_weight_update" => {
            opts.allow(&[])?;
            popart_transforms::patterns::fuse_weight_updates(&mut ir)
                .map_err(|e| e.to_string())
                .and_then(|fused| ir_output(&[format!("fused: {}", list(&fused))], &ir))
        }
        "prepare" => {
            opts.allow(&["no_patterns"])?;
            let options = PrepareOptions { patterns: !opts.flag("no_patterns"), ..PrepareOptions::default() };
            prepare_with(&mut ir, options).map_err(|e| e.to_string()).and_then(|r| {
                let mut report = prune_report(&r.pruned);
                report.push(format!("fused: {}", list(&r.fused_weight_updates)));
                ir_output(&report, &ir)
            })
        }
        "lower" => {
            opts.allow(&[])?;
            popart_lower::lower(&ir).map(|exe| exe.dump()).map_err(|e| e.to_string())
        }
        "pass" => run_named_pass(&mut ir, &opts)?,
        other => {
            return Err(SetupError(format!(
                "unknown pass `{other}` (expected prune, autodiff, fuse_weight_update, prepare, lower or pass NAME)"
            )))
        }
    };
    Ok(out.unwrap_or_else(|e| format!("error: {e}\n")))
}

/// Every pass a `; run: pass NAME` line can name: the default preparation pipeline with
/// everything on (patterns, in-place ambiguity check, call inlining), then `merge-exchange`.
fn named_passes() -> popart_transforms::Pipeline {
    let all = PrepareOptions { patterns: true, check_inplace_ambiguity: true, inline_calls: true };
    popart_transforms::Pipeline::default_for(all).with_pass(popart_transforms::merge_exchange::MergeExchange)
}

/// `pass NAME`: the pass of that name, looked up in [`named_passes`], run once. Its
/// output: `# changed: yes|no`, a `# note:` line per note, then the IR.
fn run_named_pass(ir: &mut Ir, opts: &Options<'_>) -> Result<Result<String, String>, SetupError> {
    let names = named_passes();
    let [(name, None)] = opts.0[..] else {
        let known: Vec<&str> = names.names().collect();
        return Err(SetupError(format!("`pass` takes one pass name, one of {known:?}")));
    };
    let Some(at) = names.position(name) else {
        let known: Vec<&str> = names.names().collect();
        return Err(SetupError(format!("no pass named `{name}` (known: {known:?})")));
    };
    let pass = &names.passes()[at];
    Ok(pass.run(ir).map_err(|e| e.to_string()).and_then(|outcome| {
        let mut report = vec![format!("changed: {}", if outcome.changed { "yes" } else { "no" })];
        report.extend(outcome.notes.iter().map(|n| format!("note: {n}")));
        ir_output(&report, ir)
    }))
}

/// `key=value` and flag options of a `run` line.
struct Options<'a>(Vec<(&'a str, Option<&'a str>)>);

impl<'a> Options<'a> {
    fn parse(words: impl Iterator<Item = &'a str>) -> Self {
        Options(words.map(|w| w.split_once('=').map_or((w, None), |(k, v)| (k, Some(v)))).collect())
    }

    fn allow(&self, keys: &[&str]) -> Result<(), SetupError> {
        match self.0.iter().find(|(k, _)| !keys.contains(k)) {
            Some((k, _)) => Err(SetupError(format!("unknown option `{k}` (this pass takes {keys:?})"))),
            None => Ok(()),
        }
    }

    fn value(&self, key: &str) -> Option<&'a str> {
        self.0.iter().find(|(k, _)| *k == key).and_then(|(_, v)| *v)
    }

    fn flag(&self, key: &str) -> bool {
        self.0.iter().any(|(k, v)| *k == key && v.is_none())
    }
}

fn list(items: &[String]) -> String {
    if items.is_empty() {
        "(none)".to_string()
    } else {
        items.join(", ")
    }
}

/// `#` lines of `report`, then the text of `ir`, after checking that the IR verifies
/// and that its text parses back to the same text.
fn ir_output(report: &[String], ir: &Ir) -> Result<String, String> {
    ir.verify().map_err(|e| format!("the pass left an invalid IR: {e}"))?;
    let t = text::to_text(ir);
    let again = text::parse(&t).map(|ir| text::to_text(&ir));
    if again.as_ref() != Ok(&t) {
        return Err(format!("the text of the result does not parse back to itself: {again:?}"));
    }
    let mut out = String::new();
    for line in report {
        let _ = writeln!(out, "# {line}");
    }
    if !report.is_empty() {
        out.push('\n');
    }
    out.push_str(&t);
    Ok(out)
}

fn prune_report(r: &popart_transforms::prune::PruneReport) -> Vec<String> {
    vec![
        format!("removed ops: {}", list(&r.removed_ops)),
        format!("removed tensors: {}", r.removed_tensors),
        format!("removed outputs: {}", list(&r.removed_outputs)),
    ]
}

/// Prune, and check that pruning again removes nothing.
fn run_prune(ir: &mut Ir) -> Result<String, String> {
    let report = popart_transforms::prune::prune(ir).map_err(|e| e.to_string())?;
    let again = popart_transforms::prune::prune(&mut ir.clone()).map_err(|e| e.to_string())?;
    if !again.is_empty() {
        return Err(format!("pruning is not idempotent: a second prune removed {again:?}"));
    }
    ir_output(&prune_report(&report), ir)
}

fn run_autodiff(ir: &mut Ir, opts: &Options<'_>) -> Result<Result<String, String>, SetupError> {
    let name = opts.value("graph").ok_or_else(|| SetupError("autodiff needs `graph=NAME`".into()))?;
    let graph = ir.graph_by_name(name).map_err(|e| SetupError(e.to_string()))?.id();
    let tensors = |key: &str| -> Result<Option<Vec<TensorId>>, SetupError> {
        let Some(v) = opts.value(key) else { return Ok(None) };
        let g = ir.graph(graph).map_err(|e| SetupError(e.to_string()))?;
        let ids = v.split(',').filter(|n| !n.is_empty()).map(|n| g.tensor_id(n).map_err(|e| SetupError(e.to_string())));
        ids.collect::<Result<Vec<_>, _>>().map(Some)
    };
    let (provided, required) = (tensors("provided")?, tensors("required")?);
    let all = opts.flag("all");
    let out = autodiff(ir, graph, provided.as_deref(), required.as_deref(), &GradGraphInfos::new(), all);
    Ok(out.map_err(|e| e.to_string()).and_then(|out| {
        let mut infos: Vec<&GradGraphInfo> = if all { out.all.values().collect() } else { vec![&out.grad_info] };
        // In the order of the forward graphs in the IR.
        let position = |g: GraphId| ir.graphs().position(|x| x.id() == g);
        infos.sort_by_key(|i| position(i.forward_graph));
        let mut report = Vec::new();
        for info in infos {
            report.extend(describe(ir, info).map_err(|e| e.to_string())?);
        }
        ir_output(&report, ir)
    }))
}

/// A gradient graph info in three lines, tensors by name.
fn describe(ir: &Ir, info: &GradGraphInfo) -> popart_ir::Result<Vec<String>> {
    let fwd = ir.graph(info.forward_graph)?;
    let conns = |v: &[popart_transforms::ExpectedConnection]| -> popart_ir::Result<String> {
        let names: Vec<String> = v
            .iter()
            .map(|c| Ok(format!("{:?} {}", c.connection_type, fwd.tensor(c.fwd_tensor)?.name)))
            .collect::<popart_ir::Result<_>>()?;
        Ok(format!("[{}]", names.join(", ")))
    };
    Ok(vec![
        format!("grad graph {} of {}", ir.graph(info.graph)?.name(), fwd.name()),
        format!("  inputs: {}", conns(&info.expected_inputs)?),
        format!("  outputs: {}", conns(&info.expected_outputs)?),
    ])
}

/// `text` without trailing whitespace on its lines and without trailing blank lines.
fn normalize(text: &str) -> String {
    let mut lines: Vec<&str> = text.lines().map(str::trim_end).collect();
    while lines.last() == Some(&"") {
        lines.pop();
    }
    lines.join("\n")
}

/// Check one file's text: `Ok(actual output)` if it matches its expectation, else
/// the reason (with a diff). Setup errors are `Err` too.
fn check(file: &str) -> Result<String, String> {
    let t = split(file)?;
    let actual = run(t.command, &t.input).map_err(|e| e.0)?;
    match t.expected {
        None => Err(format!("no `{SEPARATOR}` line (run with BLESS=1 to add the expected output)")),
        Some((expected, first_line)) if normalize(expected) != normalize(&actual) => {
            Err(format!("output differs from the expectation:\n{}", diff(expected, &actual, first_line)))
        }
        Some(_) => Ok(actual),
    }
}

/// The file with its expected section replaced by `actual`.
fn blessed(file: &str, actual: &str) -> String {
    let head = match file.find(&format!("\n{SEPARATOR}")) {
        Some(i) => &file[..i + 1],
        None if file.ends_with('\n') || file.is_empty() => file,
        None => return format!("{file}\n{SEPARATOR}\n{}\n", normalize(actual)),
    };
    format!("{head}{SEPARATOR}\n{}\n", normalize(actual))
}

/// A line diff of `expected` (whose first line is line `first_line` of its file)
/// and `actual`: changed lines with two lines of context, `-` expected, `+` actual.
fn diff(expected: &str, actual: &str, first_line: usize) -> String {
    let a: Vec<String> = normalize(expected).lines().map(str::to_string).collect();
    let b: Vec<String> = normalize(actual).lines().map(str::to_string).collect();
    // lcs[i][j]: length of the longest common subsequence of a[i..] and b[j..].
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] { lcs[i + 1][j + 1] + 1 } else { lcs[i + 1][j].max(lcs[i][j + 1]) };
        }
    }
    // (tag, index of the expected line at or after it, text)
    let mut ops: Vec<(char, usize, &str)> = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            ops.push((' ', i, &a[i]));
            i += 1;
            j += 1;
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            ops.push(('-', i, &a[i]));
            i += 1;
        } else {
            ops.push(('+', i, &b[j]));
            j += 1;
        }
    }
    const CONTEXT: usize = 2;
    let changed: Vec<usize> = (0..ops.len()).filter(|&k| ops[k].0 != ' ').collect();
    let near = |k: usize| changed.iter().any(|&c| c.abs_diff(k) <= CONTEXT);
    let mut out = String::new();
    let mut gap = true;
    for (k, &(tag, line, text)) in ops.iter().enumerate() {
        if !near(k) {
            gap = true;
            continue;
        }
        if gap {
            let _ = writeln!(out, "@@ line {} @@", first_line + line);
            gap = false;
        }
        let _ = writeln!(out, "{tag} {text}");
    }
    out
}

/// Every `.ir` file under `dir`, sorted.
fn discover(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "ir") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

fn filetests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("filetests")
}

#[test]
fn filetests() {
    let dir = filetests_dir();
    let bless = std::env::var_os("BLESS").is_some_and(|v| v == "1");
    let files = discover(&dir);
    let mut failures = Vec::new();
    let mut blessed_files = Vec::new();
    for path in &files {
        let name = path.strip_prefix(&dir).unwrap_or(path).display().to_string();
        let file = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{name}: {e}"));
        if bless {
            let t = split(&file).unwrap_or_else(|e| panic!("{name}: {e}"));
            let actual = run(t.command, &t.input).unwrap_or_else(|e| panic!("{name}: {}", e.0));
            let new = blessed(&file, &actual);
            if new != file {
                std::fs::write(path, new).unwrap_or_else(|e| panic!("{name}: {e}"));
                blessed_files.push(name);
            }
        } else if let Err(e) = check(&file) {
            failures.push(format!("---- {name}: {e}"));
        }
    }
    if !blessed_files.is_empty() {
        eprintln!("BLESS=1 rewrote the expectations of:\n  {}", blessed_files.join("\n  "));
    }
    assert!(
        failures.is_empty(),
        "{} of {} filetests failed (BLESS=1 rewrites the expectations):\n\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
    // Every pass keeps its filetests.
    for pass in ["prune", "autodiff", "fuse_weight_update", "prepare", "lower"] {
        let n = files
            .iter()
            .filter(|p| {
                let f = std::fs::read_to_string(p).unwrap_or_default();
                split(&f).is_ok_and(|t| t.command.split_whitespace().next() == Some(pass))
            })
            .count();
        assert!(n > 0, "no filetest runs `{pass}`");
    }
}

// ----- the runner itself -----

/// A small file of every kind of section.
const SAMPLE: &str = "; run: prune
; a comment
ir num_host_transfers=1 replication_factor=1

graph main
  inputs []
  outputs []
  tensor c const float32[1] = [1.0]
  tensor e:0 act float32[1]
  op e Exp in[0=c] out[0=e:0]
; ---- expected ----
# removed ops: main/e
# removed tensors: 1
# removed outputs: (none)

ir num_host_transfers=1 replication_factor=1

graph main
  inputs []
  outputs []
  tensor c const float32[1] = [1.0]
";

#[test]
fn a_correct_expectation_passes() {
    check(SAMPLE).unwrap();
    // Trailing whitespace and blank lines do not matter.
    check(&format!("{}  \n\n\n", SAMPLE.trim_end())).unwrap();
}

#[test]
fn a_wrong_expectation_fails_with_a_diff() {
    let wrong = SAMPLE.replace("# removed tensors: 1", "# removed tensors: 2");
    let err = check(&wrong).unwrap_err();
    assert!(err.contains("output differs"), "{err}");
    assert!(err.contains("@@ line 12 @@"), "hunks give the line of the file: {err}");
    assert!(err.contains("- # removed tensors: 2\n+ # removed tensors: 1\n"), "{err}");
    assert!(err.contains("  # removed ops: main/e\n"), "context lines: {err}");
    assert!(!err.contains("inputs []"), "lines far from the change are left out: {err}");
    // A missing line, and an expectation of a real file mutated the same way.
    let cut = SAMPLE.rfind("  tensor c const").unwrap();
    let err = check(&SAMPLE[..cut]).unwrap_err();
    assert!(err.contains("+   tensor c const float32[1] = [1.0]"), "{err}");
    let path = filetests_dir().join("prune/dead_chain.ir");
    let file = std::fs::read_to_string(&path).unwrap();
    check(&file).unwrap();
    let (head, expected) = file.split_once(SEPARATOR).unwrap();
    let mutated = format!("{head}{SEPARATOR}{}", expected.replacen("Exp", "Sin", 1));
    assert!(check(&mutated).is_err());
}

#[test]
fn bless_rewrites_only_the_expected_section() {
    let wrong = SAMPLE.replace("# removed tensors: 1", "# removed tensors: 2");
    let t = split(&wrong).unwrap();
    let actual = run(t.command, &t.input).unwrap();
    assert_eq!(blessed(&wrong, &actual), SAMPLE);
    // A file without expectation gets a separator and the output.
    let (head, _) = SAMPLE.split_once(SEPARATOR).unwrap();
    assert_eq!(blessed(head, &actual), SAMPLE);
    assert!(check(head).unwrap_err().contains("no `; ---- expected ----` line"));
}

#[test]
fn setup_errors_are_not_blessable() {
    let no_run = SAMPLE.replace("; run: prune\n", "");
    assert!(check(&no_run).unwrap_err().contains("no `; run: PASS` line"));
    let twice = format!("; run: prune\n{SAMPLE}");
    assert!(check(&twice).unwrap_err().contains("a second `; run:` line"));
    let unknown = SAMPLE.replace("; run: prune", "; run: simplify");
    assert!(check(&unknown).unwrap_err().contains("unknown pass `simplify`"));
    let option = SAMPLE.replace("; run: prune", "; run: prune fast");
    assert!(check(&option).unwrap_err().contains("unknown option `fast`"));
    let bad = SAMPLE.replace("op e Exp", "op e Nope");
    let err = check(&bad).unwrap_err();
    assert!(err.contains("the input does not parse") && err.contains("line 10"), "{err}");
    let t = split(&bad).unwrap();
    assert!(run(t.command, &t.input).is_err());
}

/// A pass that fails produces `error: MESSAGE` as its output (something a file can
/// expect), unlike a file that cannot be run.
#[test]
fn pass_errors_are_output() {
    let file = SAMPLE.replace("; run: prune", "; run: autodiff graph=main required=c");
    let t = split(&file).unwrap();
    let out = run(t.command, &t.input).unwrap();
    assert!(out.starts_with("error: ") && out.contains("`c`"), "{out}");
    let err = check(&file).unwrap_err();
    assert!(err.contains("- # removed ops: main/e"), "{err}");
    assert!(err.contains("+ error: "), "{err}");
}

/// Every pass `; run: pass NAME` can name has a filetest where it acts (changes the IR,
/// or refuses it) and one where it must not (`# changed: no`). The verifier passes are
/// the exception: the text parser runs the verifier on what it reads, so an IR that
/// `verify` refuses cannot be a filetest's input (`popart-ir`'s tests cover its errors).
#[test]
fn every_pass_has_a_filetest_where_it_acts_and_one_where_it_does_not() {
    let mut acts = std::collections::BTreeSet::new();
    let mut quiet = std::collections::BTreeSet::new();
    for path in discover(&filetests_dir()) {
        let file = std::fs::read_to_string(&path).unwrap_or_default();
        let Ok(t) = split(&file) else { continue };
        let Some(name) = t.command.strip_prefix("pass ").map(str::trim) else { continue };
        let expected = t.expected.map_or("", |(e, _)| e);
        if expected.contains("# changed: yes") || expected.trim_start().starts_with("error:") {
            acts.insert(name.to_string());
        }
        if expected.contains("# changed: no") {
            quiet.insert(name.to_string());
        }
    }
    for name in named_passes().names() {
        let checks_only_parsed_text =
            name == popart_transforms::Pipeline::VERIFY || name == popart_transforms::Pipeline::VERIFY_FINAL;
        assert!(
            checks_only_parsed_text || acts.contains(name),
            "no filetest where pass `{name}` changes or refuses the IR"
        );
        assert!(quiet.contains(name), "no filetest where pass `{name}` leaves the IR unchanged");
    }
}
