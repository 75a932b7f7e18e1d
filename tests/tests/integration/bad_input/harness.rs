//! The runner of the bad-input suite: a table of named cases, each run under
//! `catch_unwind` so that a panic fails that case alone, and a per-category
//! count table.

use std::fmt::{Debug, Display};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The categories of issue 13's bad-input suite.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Category {
    /// Shapes and checked arithmetic.
    Shapes,
    /// Huge tensors: typed size / out-of-memory errors, never an abort.
    Allocation,
    /// Host data, bool bytes, casts and variable writes.
    HostData,
    /// Index semantics of gather and nll at run time.
    Indices,
    /// Constants as in-place targets, streams as op inputs.
    ConstantsStreams,
    /// Axes and reductions.
    AxesReductions,
    /// Autodiff misuse.
    Autodiff,
    /// Graph building.
    GraphBuilding,
    /// Session errors (PopXL section 5) and recovery after a failed run.
    Session,
    /// Text form and loader.
    Text,
}

impl Category {
    /// Every category, in table order.
    pub const ALL: [Category; 10] = [
        Category::Shapes,
        Category::Allocation,
        Category::HostData,
        Category::Indices,
        Category::ConstantsStreams,
        Category::AxesReductions,
        Category::Autodiff,
        Category::GraphBuilding,
        Category::Session,
        Category::Text,
    ];
}

/// Why a case failed (a panic is caught by the runner).
#[derive(Debug)]
pub enum Failure {
    /// An error of the wrong kind, or whose message does not name the culprit,
    /// or a wrong value.
    WrongError(String),
    /// Bad input accepted.
    AcceptedWrongly(String),
}

/// `?` on the setup steps of a case turns their errors into a
/// [`Failure::WrongError`] (setup must succeed).
macro_rules! setup_errors {
    ($($t:ty),*) => {$(
        impl From<$t> for Failure {
            fn from(e: $t) -> Self {
                Failure::WrongError(format!("setup failed: {e}"))
            }
        }
    )*};
}
setup_errors!(popxl::PopXlError, popxl_session::SessionError, popart_ir::IrError, popart_ir::HostDataError);

/// The result of one case.
pub type CaseResult = Result<(), Failure>;

/// One case: a category, a name and the closure.
pub struct Case {
    /// Its category.
    pub category: Category,
    /// Its name (unique in the suite).
    pub name: &'static str,
    /// The case.
    pub run: fn() -> CaseResult,
}

/// A case.
pub fn case(category: Category, name: &'static str, run: fn() -> CaseResult) -> Case {
    Case { category, name, run }
}

/// `Err(e)` with `e` matching `$pat` and its message containing every name.
macro_rules! expect_err {
    ($result:expr, $pat:pat, [$($name:expr),* $(,)?]) => {
        match $result {
            Ok(v) => Err($crate::bad_input::harness::Failure::AcceptedWrongly(format!(
                "expected {}, got Ok({})",
                stringify!($pat),
                std::any::type_name_of_val(&v)
            ))),
            Err(e) => {
                let kind_ok = matches!(&e, $pat);
                $crate::bad_input::harness::check_error(&e, kind_ok, stringify!($pat), &[$(&$name as &dyn std::fmt::Display),*])
            }
        }
    };
}

/// Checks an error's kind and that its message names everything in `names`.
pub fn check_error<E: Display + Debug>(e: &E, kind_ok: bool, pat: &str, names: &[&dyn Display]) -> CaseResult {
    let message = e.to_string();
    if !kind_ok {
        return Err(Failure::WrongError(format!("expected {pat}, got {e:?}: {message}")));
    }
    for name in names {
        let name = name.to_string();
        if !message.contains(&name) {
            return Err(Failure::WrongError(format!("message does not name `{name}`: {message}")));
        }
    }
    Ok(())
}

/// `Ok(())` if `cond`, else a [`Failure::WrongError`] with `what`.
pub fn ensure(cond: bool, what: impl FnOnce() -> String) -> CaseResult {
    if cond {
        Ok(())
    } else {
        Err(Failure::WrongError(what()))
    }
}

/// What happened to one case.
pub enum Outcome {
    /// As expected.
    Passed,
    /// The library panicked (message).
    Panicked(String),
    /// Wrong error kind, message or value.
    WrongError(String),
    /// Bad input accepted.
    AcceptedWrongly(String),
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Passed => f.write_str("passed"),
            Outcome::Panicked(m) => write!(f, "PANICKED: {m}"),
            Outcome::WrongError(m) => write!(f, "wrong error: {m}"),
            Outcome::AcceptedWrongly(m) => write!(f, "accepted wrongly: {m}"),
        }
    }
}

fn run_one(case: &Case) -> Outcome {
    match catch_unwind(AssertUnwindSafe(case.run)) {
        Ok(Ok(())) => Outcome::Passed,
        Ok(Err(Failure::WrongError(m))) => Outcome::WrongError(m),
        Ok(Err(Failure::AcceptedWrongly(m))) => Outcome::AcceptedWrongly(m),
        Err(payload) => {
            let m = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "non-string panic payload".to_string());
            Outcome::Panicked(m)
        }
    }
}

/// Run `cases`, print the count table, and panic listing the failing cases.
pub fn run_and_report(cases: Vec<Case>) {
    let mut names = std::collections::HashSet::new();
    for c in &cases {
        assert!(names.insert(c.name), "duplicate case name {}", c.name);
    }
    let results: Vec<(Case, Outcome)> = cases
        .into_iter()
        .map(|c| {
            let o = run_one(&c);
            (c, o)
        })
        .collect();
    let mut table = String::new();
    table.push_str(&format!(
        "{:<18} {:>6} {:>7} {:>9} {:>12} {:>17}\n",
        "category", "cases", "passed", "panicked", "wrong-error", "accepted-wrongly"
    ));
    let mut failures = Vec::new();
    let mut totals = [0usize; 5];
    for cat in Category::ALL {
        let rows: Vec<&(Case, Outcome)> = results.iter().filter(|(c, _)| c.category == cat).collect();
        if rows.is_empty() {
            continue;
        }
        let mut n = [rows.len(), 0, 0, 0, 0];
        for (c, o) in &rows {
            match o {
                Outcome::Passed => n[1] += 1,
                Outcome::Panicked(_) => n[2] += 1,
                Outcome::WrongError(_) => n[3] += 1,
                Outcome::AcceptedWrongly(_) => n[4] += 1,
            }
            if !matches!(o, Outcome::Passed) {
                failures.push(format!("{:?}/{}: {o}", c.category, c.name));
            }
        }
        for (t, v) in totals.iter_mut().zip(n) {
            *t += v;
        }
        table.push_str(&format!(
            "{:<18} {:>6} {:>7} {:>9} {:>12} {:>17}\n",
            format!("{cat:?}"),
            n[0],
            n[1],
            n[2],
            n[3],
            n[4]
        ));
    }
    table.push_str(&format!(
        "{:<18} {:>6} {:>7} {:>9} {:>12} {:>17}\n",
        "total", totals[0], totals[1], totals[2], totals[3], totals[4]
    ));
    println!("{table}");
    assert!(failures.is_empty(), "{} failing bad-input cases:\n{}\n{table}", failures.len(), failures.join("\n"));
}
