//! The stable, readable text form of a whole IR, and its parser.
//!
//! [`to_text`] prints an [`Ir`]; [`parse`] reads the text back into an equal IR
//! (`to_text(&parse(&to_text(ir))?) == to_text(ir)`). `Ir` implements
//! [`Display`](std::fmt::Display) with the same text. Snapshot tests and debugging
//! use this form.
//!
//! # Format
//!
//! One statement per line; indentation is cosmetic, blank lines and lines starting
//! with `#` are ignored.
//!
//! ```text
//! ir num_host_transfers=1 replication_factor=1
//!
//! graph main
//!   inputs [x]
//!   outputs [add:0]
//!   tensor x act float32[2]
//!   tensor w var float32[2] = [0.5, -1.0]
//!   tensor relu:0 act float32[2]
//!   tensor add:0 act float32[2]
//!   op relu Relu in[0=x] out[0=relu:0]
//!   op add Add in[0=relu:0, 1=w] out[0=add:0]
//!   topocon relu -> add tied
//! ```
//!
//! - The header line gives `num_host_transfers` and `replication_factor`.
//! - Graphs follow, the main graph first, then subgraphs in creation order. Each
//!   starts with `graph NAME`, then `inputs [..]` and `outputs [..]` (tensor names in
//!   index order), then its tensors in creation order, then its ops in creation
//!   order, then its topological constraints.
//! - `tensor NAME KIND TYPE` where `KIND` is `act` (activation or gradient), `var`,
//!   `const`, `h2d` or `d2h` (host streams) and `TYPE` is `dtype[d0,d1,..]`
//!   (`float32[]` for a scalar). Variables and constants end with `= [v, ..]`: their
//!   elements in row-major order, exactly: integers in decimal, `true`/`false` for
//!   bools (`1`/`0` are read too; any other value is a parse error), floats in the shortest decimal that reads back to the same bits (`1.0`,
//!   `-0.0`, `1e-8`, `inf`, `-inf`, `NaN`; a NaN other than the canonical quiet NaN
//!   prints its bits as `nan:0x7fc00001`).
//! - `op NAME TYPE {KEY=VALUE, ..} in[INDEX=TENSOR, ..] out[INDEX=TENSOR, ..]`: the
//!   attribute block is left out when empty; attributes are in key order. Values:
//!   integers (`3`), floats (always with a `.` or exponent: `1.0`, `1e-7`), integer
//!   lists (`[0, -1]`), float lists (`floats[0.5, 1.0]`), strings (`"mean"`), booleans
//!   (`true`), data types (`float16`) and called graphs (`@body`).
//! - An op placed by PopXL's `ipu(n)` / `io_tiles()` ends with
//!   `place[ipu=N, tiles=io]` (each key only when set; see [`crate::Placement`]).
//! - `topocon BEFORE -> AFTER`, with a trailing `tied` for tied constraints, sorted by
//!   the creation order of `BEFORE` then `AFTER`.
//! - In the main graph, `remote_variable NAME buffer=B entry=E` for each remote
//!   variable, then `variable_settings NAME groups=[..] retrieval=MODE
//!   shard_over=K|none host INFO = [..]` for each replicated variable
//!   ([`crate::VariableSettings`]): the group of every replica (any grouping,
//!   constant stride or not), the retrieval mode, the sharding and the host value
//!   (one per group); the variable's own `= [..]` data is replica 0's value.
//! - A name (of a graph, tensor, op, op type or attribute) is printed bare when it is
//!   made only of ASCII letters, digits and `_ . : / + -` and does not contain `->`;
//!   otherwise it is quoted like a string ([`quote`]): `"my tensor"`, with `\"`,
//!   `\\`, `\n`, `\r`, `\t` and `\u{..}` escapes.
//!
//! Numbers that overflow their type (a dimension beyond `usize`, an index beyond
//! `u32`, an integer attribute beyond `i64`, an element beyond its dtype) and shapes
//! whose byte size exceeds [`MAX_TENSOR_BYTES`](crate::size::MAX_TENSOR_BYTES) are
//! parse errors naming the line; no input makes the parser panic (see the
//! `fuzz_text` tests and the `fuzz/` cargo-fuzz target).
//!
//! [`parse`] re-creates tensors and ops in the printed order (so creation order is
//! kept), looks op types up in the registry ([`crate::lookup_op`]), checks that
//! shape inference agrees with every declared output, and finally runs
//! [`Ir::verify`]. Syntax and reference errors are [`IrError::Parse`] with the
//! 1-based line; a parsed IR that fails verification returns the verifier's error.
//!
//! The module is split by concept: `lexer` (tokens, names and the string escapes
//! of [`quote`]), `parser` (statements to an IR), `printer` (an IR to text) and
//! `diff` ([`structural_diff`]).

mod diff;
mod lexer;
mod parser;
mod printer;

use std::fmt;

#[cfg(doc)]
use crate::IrError;
use crate::{Ir, Result};

pub use lexer::quote;

/// Options of [`to_text_with`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TextOptions {
    /// Print `= elided(N)` instead of the data of variables and constants with more
    /// than this many elements. Such text is for reading and snapshots only: [`parse`]
    /// rejects it. `None` (the default) prints all data.
    pub elide_data_over: Option<usize>,
}

/// The text form of a whole IR (see the [module documentation](self) for the format).
///
/// ```
/// use popart_ir::{text, Attributes, DataType, Ir, TensorInfo};
/// let mut ir = Ir::new();
/// let main = ir.main_graph_id();
/// let x = ir.main_graph_mut().add_input("x", TensorInfo::new(DataType::Float32, [2])).unwrap();
/// let r = ir.create_op(main, "Relu", Attributes::new(), &[(0, x)], "relu").unwrap();
/// let y = ir.main_graph().op(r).unwrap().output(0).unwrap();
/// ir.main_graph_mut().add_output(y).unwrap();
/// let s = text::to_text(&ir);
/// assert!(s.contains("op relu Relu in[0=x] out[0=relu:0]"));
/// assert_eq!(text::to_text(&text::parse(&s).unwrap()), s);
/// ```
pub fn to_text(ir: &Ir) -> String {
    to_text_with(ir, &TextOptions::default())
}

/// [`to_text`] with options.
pub fn to_text_with(ir: &Ir, options: &TextOptions) -> String {
    printer::print_ir(ir, options)
}

impl fmt::Display for Ir {
    /// The [text form](crate::text).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&to_text(self))
    }
}

/// Read the [text form](self) back into an IR.
///
/// Errors: [`IrError::Parse`] (with the 1-based line) for syntax errors, unknown
/// names, op types or data types, duplicate names, and ops whose declared outputs
/// disagree with shape inference; otherwise the error of [`Ir::verify`] on the result.
///
/// ```
/// use popart_ir::{text, IrError};
/// let ir = text::parse("ir num_host_transfers=1 replication_factor=1\n\ngraph main\n  inputs [x]\n  outputs [y]\n  tensor x act float32[3]\n  tensor y act float32[3]\n  op neg Neg in[0=x] out[0=y]\n").unwrap();
/// assert_eq!(ir.main_graph().num_ops(), 1);
/// let err = text::parse("ir num_host_transfers=1 replication_factor=1\ngraph main\n  op neg Nope in[] out[]\n").unwrap_err();
/// assert!(matches!(err, IrError::Parse { line: 3, .. }));
/// ```
pub fn parse(text: &str) -> Result<Ir> {
    parser::parse(text)
}

/// The first structural difference between two IRs, or `None` if they are equal up
/// to ids: same settings, graphs (by name, in order) with the same inputs, outputs,
/// tensors (name, kind, data, type, producer, consumers), ops in creation order
/// (name, type, attributes with called graphs by name, index maps) and topological
/// constraints. Tensor and op creation order are compared too.
///
/// ```
/// use popart_ir::{text, Ir};
/// let a = Ir::new();
/// let mut b = Ir::new();
/// assert_eq!(text::structural_diff(&a, &b), None);
/// b.replication_factor = 2;
/// assert!(text::structural_diff(&a, &b).is_some());
/// ```
pub fn structural_diff(a: &Ir, b: &Ir) -> Option<String> {
    diff::structural_diff(a, b)
}
