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
//!   bools, floats in the shortest decimal that reads back to the same bits (`1.0`,
//!   `-0.0`, `1e-8`, `inf`, `-inf`, `NaN`; a NaN other than the canonical quiet NaN
//!   prints its bits as `nan:0x7fc00001`).
//! - `op NAME TYPE {KEY=VALUE, ..} in[INDEX=TENSOR, ..] out[INDEX=TENSOR, ..]`: the
//!   attribute block is left out when empty; attributes are in key order. Values:
//!   integers (`3`), floats (always with a `.` or exponent: `1.0`, `1e-7`), integer
//!   lists (`[0, -1]`), float lists (`floats[0.5, 1.0]`), strings (`"mean"`), booleans
//!   (`true`), data types (`float16`) and called graphs (`@body`).
//! - `topocon BEFORE -> AFTER`, with a trailing `tied` for tied constraints, sorted by
//!   the creation order of `BEFORE` then `AFTER`.
//! - A name (of a graph, tensor, op, op type or attribute) is printed bare when it is
//!   made only of ASCII letters, digits and `_ . : / + -` and does not contain `->`;
//!   otherwise it is quoted like a string: `"my tensor"`, with `\"`, `\\`, `\n`, `\r`,
//!   `\t` and `\u{..}` escapes.
//!
//! [`parse`] re-creates tensors and ops in the printed order (so creation order is
//! kept), looks op types up in the registry ([`crate::lookup_op`]), checks that
//! shape inference agrees with every declared output, and finally runs
//! [`Ir::verify`]. Syntax and reference errors are [`IrError::Parse`] with the
//! 1-based line; a parsed IR that fails verification returns the verifier's error.

use std::collections::HashMap;
use std::fmt::{self, Write as _};

use crate::{
    lookup_op, AttrValue, Attributes, DataType, Graph, GraphId, HostTensor, Ir, IrError, OpId, Result, StreamDirection,
    TensorId, TensorInfo, TensorKind, MAIN_GRAPH_NAME,
};

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
    let mut out = String::new();
    let _ =
        writeln!(out, "ir num_host_transfers={} replication_factor={}", ir.num_host_transfers, ir.replication_factor);
    for g in ir.graphs() {
        out.push('\n');
        write_graph(&mut out, ir, g, options);
    }
    out
}

impl fmt::Display for Ir {
    /// The [text form](crate::text).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&to_text(self))
    }
}

fn write_graph(out: &mut String, ir: &Ir, g: &Graph, options: &TextOptions) {
    let tname = |t: TensorId| name(&g.tensors[t].name);
    let _ = writeln!(out, "graph {}", name(g.name()));
    let list = |ts: &[TensorId]| ts.iter().map(|&t| tname(t)).collect::<Vec<_>>().join(", ");
    let _ = writeln!(out, "  inputs [{}]", list(g.inputs()));
    let _ = writeln!(out, "  outputs [{}]", list(g.outputs()));
    for t in g.tensors_in_creation_order() {
        let t = &g.tensors[t];
        let _ = write!(out, "  tensor {} {} {}", name(&t.name), t.kind.short_name(), t.info);
        if let Some(d) = t.kind.data() {
            out.push_str(" = ");
            match options.elide_data_over {
                Some(max) if d.info.nelms() > max => {
                    let _ = write!(out, "elided({})", d.info.nelms());
                }
                _ => write_data(out, d),
            }
        }
        out.push('\n');
    }
    let ops = g.ops_in_creation_order();
    for &o in &ops {
        let op = &g.ops[o];
        let _ = write!(out, "  op {} {}", name(&op.name), name(op.op_type()));
        if !op.attrs.is_empty() {
            out.push_str(" {");
            for (k, (key, v)) in op.attrs.iter().enumerate() {
                if k > 0 {
                    out.push_str(", ");
                }
                let _ = write!(out, "{}=", name(key));
                write_attr(out, ir, v);
            }
            out.push('}');
        }
        let map = |m: &crate::TensorIndexMap| m.iter().map(|(i, t)| format!("{i}={}", tname(t))).collect::<Vec<_>>();
        let _ = writeln!(out, " in[{}] out[{}]", map(op.inputs()).join(", "), map(op.outputs()).join(", "));
    }
    for (b, a, tied) in g.topo_cons().sorted_edges(|o| g.ops.get(o).map_or(u64::MAX, |op| op.seq)) {
        let oname = |o: OpId| g.ops.get(o).map_or_else(|| format!("{o:?}"), |op| name(&op.name).into_owned());
        let _ = writeln!(out, "  topocon {} -> {}{}", oname(b), oname(a), if tied { " tied" } else { "" });
    }
}

fn write_attr(out: &mut String, ir: &Ir, v: &AttrValue) {
    match v {
        AttrValue::Int(i) => {
            let _ = write!(out, "{i}");
        }
        AttrValue::Float(x) => out.push_str(&fmt_f64(*x)),
        AttrValue::Ints(v) => {
            let _ = write!(out, "[{}]", v.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(", "));
        }
        AttrValue::Floats(v) => {
            let _ = write!(out, "floats[{}]", v.iter().map(|x| fmt_f64(*x)).collect::<Vec<_>>().join(", "));
        }
        AttrValue::Str(s) => out.push_str(&quote(s)),
        AttrValue::Bool(b) => {
            let _ = write!(out, "{b}");
        }
        AttrValue::DType(d) => out.push_str(d.name()),
        AttrValue::Graph(g) => match ir.graph(*g) {
            Ok(g) => {
                let _ = write!(out, "@{}", name(g.name()));
            }
            // A dangling graph id (the verifier rejects it): print something readable.
            Err(_) => {
                let _ = write!(out, "@{}", quote(&format!("{g:?}")));
            }
        },
    }
}

fn fmt_f64(x: f64) -> String {
    if x.is_nan() && x.to_bits() != f64::NAN.to_bits() {
        format!("nan:0x{:016x}", x.to_bits())
    } else {
        format!("{x:?}")
    }
}

fn fmt_f32(x: f32) -> String {
    if x.is_nan() && x.to_bits() != f32::NAN.to_bits() {
        format!("nan:0x{:08x}", x.to_bits())
    } else {
        format!("{x:?}")
    }
}

fn write_data(out: &mut String, d: &HostTensor) {
    use DataType::*;
    let sz = d.info.dtype.size_bytes();
    out.push('[');
    for (k, b) in d.bytes.chunks_exact(sz).enumerate() {
        if k > 0 {
            out.push_str(", ");
        }
        let _ = match d.info.dtype {
            Bool => match b[0] {
                0 => write!(out, "false"),
                1 => write!(out, "true"),
                other => write!(out, "{other}"),
            },
            Int8 => write!(out, "{}", i8::from_le_bytes([b[0]])),
            Int16 => write!(out, "{}", i16::from_le_bytes([b[0], b[1]])),
            Int32 => write!(out, "{}", i32::from_le_bytes(b.try_into().expect("4 bytes"))),
            Int64 => write!(out, "{}", i64::from_le_bytes(b.try_into().expect("8 bytes"))),
            Uint8 => write!(out, "{}", b[0]),
            Uint16 => write!(out, "{}", u16::from_le_bytes([b[0], b[1]])),
            Uint32 => write!(out, "{}", u32::from_le_bytes(b.try_into().expect("4 bytes"))),
            Uint64 => write!(out, "{}", u64::from_le_bytes(b.try_into().expect("8 bytes"))),
            Float16 => {
                let h = half::f16::from_le_bytes([b[0], b[1]]);
                if h.is_nan() && h.to_bits() != half::f16::NAN.to_bits() {
                    write!(out, "nan:0x{:04x}", h.to_bits())
                } else {
                    // f16 -> f32 is exact, and the shortest f32 text reads back to it.
                    write!(out, "{}", fmt_f32(h.to_f32()))
                }
            }
            Float32 => write!(out, "{}", fmt_f32(f32::from_le_bytes(b.try_into().expect("4 bytes")))),
            Float64 => write!(out, "{}", fmt_f64(f64::from_le_bytes(b.try_into().expect("8 bytes")))),
        };
    }
    out.push(']');
}

fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '/' | '+' | '-')
}

/// `s` bare if it is a word, else quoted.
fn name(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.is_empty() && s.chars().all(is_word_char) && !s.contains("->") {
        std::borrow::Cow::Borrowed(s)
    } else {
        std::borrow::Cow::Owned(quote(s))
    }
}

fn quote(s: &str) -> String {
    let mut q = String::with_capacity(s.len() + 2);
    q.push('"');
    for c in s.chars() {
        match c {
            '"' => q.push_str("\\\""),
            '\\' => q.push_str("\\\\"),
            '\n' => q.push_str("\\n"),
            '\r' => q.push_str("\\r"),
            '\t' => q.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(q, "\\u{{{:x}}}", c as u32);
            }
            c => q.push(c),
        }
    }
    q.push('"');
    q
}

// ---------------------------------------------------------------------------
// Parsing
// ---------------------------------------------------------------------------

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    /// A bare word.
    Word(String),
    /// A quoted string, unescaped.
    Str(String),
    /// One of `[ ] { } ( ) = , @`.
    Punct(char),
    /// `->`
    Arrow,
}

impl fmt::Display for Tok {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tok::Word(w) => write!(f, "`{w}`"),
            Tok::Str(s) => write!(f, "string {}", quote(s)),
            Tok::Punct(c) => write!(f, "`{c}`"),
            Tok::Arrow => f.write_str("`->`"),
        }
    }
}

fn perr(line: usize, message: impl Into<String>) -> IrError {
    IrError::Parse { line, message: message.into() }
}

fn tokenize(line: usize, s: &str) -> Result<Vec<Tok>> {
    let mut toks = Vec::new();
    let mut chars = s.char_indices().peekable();
    while let Some(&(start, c)) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
        } else if c == '-' && s[start..].starts_with("->") {
            chars.next();
            chars.next();
            toks.push(Tok::Arrow);
        } else if is_word_char(c) {
            let mut end = start;
            while let Some(&(i, c)) = chars.peek() {
                if !is_word_char(c) || (c == '-' && s[i..].starts_with("->")) {
                    break;
                }
                end = i + c.len_utf8();
                chars.next();
            }
            toks.push(Tok::Word(s[start..end].to_string()));
        } else if c == '"' {
            chars.next();
            let mut v = String::new();
            loop {
                let Some((_, c)) = chars.next() else {
                    return Err(perr(line, "unterminated string"));
                };
                match c {
                    '"' => break,
                    '\\' => match chars.next().map(|(_, c)| c) {
                        Some('"') => v.push('"'),
                        Some('\\') => v.push('\\'),
                        Some('n') => v.push('\n'),
                        Some('r') => v.push('\r'),
                        Some('t') => v.push('\t'),
                        Some('u') => {
                            if chars.next().map(|(_, c)| c) != Some('{') {
                                return Err(perr(line, "expected `{` after `\\u`"));
                            }
                            let mut hex = String::new();
                            loop {
                                match chars.next().map(|(_, c)| c) {
                                    Some('}') => break,
                                    Some(h) if h.is_ascii_hexdigit() && hex.len() < 6 => hex.push(h),
                                    _ => return Err(perr(line, "bad `\\u{..}` escape")),
                                }
                            }
                            let ch = u32::from_str_radix(&hex, 16)
                                .ok()
                                .and_then(char::from_u32)
                                .ok_or_else(|| perr(line, format!("`\\u{{{hex}}}` is not a character")))?;
                            v.push(ch);
                        }
                        Some(other) => return Err(perr(line, format!("unknown escape `\\{other}`"))),
                        None => return Err(perr(line, "unterminated string")),
                    },
                    c => v.push(c),
                }
            }
            toks.push(Tok::Str(v));
        } else if "[]{}()=,@".contains(c) {
            chars.next();
            toks.push(Tok::Punct(c));
        } else {
            return Err(perr(line, format!("unexpected character `{c}`")));
        }
    }
    Ok(toks)
}

/// Tokens of one line, consumed from the front.
struct Cursor {
    line: usize,
    toks: Vec<Tok>,
    pos: usize,
}

impl Cursor {
    fn err(&self, message: impl Into<String>) -> IrError {
        perr(self.line, message)
    }

    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos)
    }

    fn next(&mut self, what: &str) -> Result<Tok> {
        let t =
            self.toks.get(self.pos).cloned().ok_or_else(|| self.err(format!("expected {what}, found end of line")))?;
        self.pos += 1;
        Ok(t)
    }

    fn at_punct(&self, c: char) -> bool {
        self.peek() == Some(&Tok::Punct(c))
    }

    fn punct(&mut self, c: char) -> Result<()> {
        match self.next(&format!("`{c}`"))? {
            Tok::Punct(p) if p == c => Ok(()),
            other => Err(self.err(format!("expected `{c}`, found {other}"))),
        }
    }

    fn keyword(&mut self, kw: &str) -> Result<()> {
        match self.next(&format!("`{kw}`"))? {
            Tok::Word(w) if w == kw => Ok(()),
            other => Err(self.err(format!("expected `{kw}`, found {other}"))),
        }
    }

    fn word(&mut self, what: &str) -> Result<String> {
        match self.next(what)? {
            Tok::Word(w) => Ok(w),
            other => Err(self.err(format!("expected {what}, found {other}"))),
        }
    }

    /// A bare or quoted name.
    fn name(&mut self, what: &str) -> Result<String> {
        match self.next(what)? {
            Tok::Word(w) => Ok(w),
            Tok::Str(s) => Ok(s),
            other => Err(self.err(format!("expected {what}, found {other}"))),
        }
    }

    fn end(&self) -> Result<()> {
        match self.peek() {
            None => Ok(()),
            Some(t) => Err(self.err(format!("unexpected {t} at end of line"))),
        }
    }

    /// `open item (, item)* close`, possibly empty.
    fn list<T>(&mut self, open: char, close: char, mut item: impl FnMut(&mut Self) -> Result<T>) -> Result<Vec<T>> {
        self.punct(open)?;
        let mut v = Vec::new();
        if self.at_punct(close) {
            self.pos += 1;
            return Ok(v);
        }
        loop {
            v.push(item(self)?);
            match self.next(&format!("`,` or `{close}`"))? {
                Tok::Punct(',') => {}
                Tok::Punct(c) if c == close => return Ok(v),
                other => return Err(self.err(format!("expected `,` or `{close}`, found {other}"))),
            }
        }
    }

    fn usize(&mut self, what: &str) -> Result<usize> {
        let w = self.word(what)?;
        w.parse().map_err(|_| self.err(format!("expected {what}, found `{w}`")))
    }

    fn info(&mut self) -> Result<TensorInfo> {
        let d = self.word("a data type")?;
        let dtype = parse_dtype(&d).ok_or_else(|| self.err(format!("unknown data type `{d}`")))?;
        let shape = self.list('[', ']', |c| c.usize("a dimension"))?;
        Ok(TensorInfo::new(dtype, shape))
    }

    /// `[INDEX=NAME, ...]`
    fn index_map(&mut self) -> Result<Vec<(u32, String)>> {
        self.list('[', ']', |c| {
            let w = c.word("an index")?;
            let i: u32 = w.parse().map_err(|_| c.err(format!("expected an index, found `{w}`")))?;
            c.punct('=')?;
            Ok((i, c.name("a tensor name")?))
        })
    }
}

fn parse_dtype(s: &str) -> Option<DataType> {
    DataType::ALL.iter().copied().find(|d| d.name() == s)
}

/// An attribute value as written: graph references are still names.
enum AttrAst {
    Value(AttrValue),
    Graph(String),
}

struct TensorAst {
    line: usize,
    name: String,
    kind: String,
    info: TensorInfo,
    data: Option<Vec<String>>,
}

struct OpAst {
    line: usize,
    name: String,
    op_type: String,
    attrs: Vec<(String, AttrAst)>,
    inputs: Vec<(u32, String)>,
    outputs: Vec<(u32, String)>,
}

struct ConAst {
    line: usize,
    before: String,
    after: String,
    tied: bool,
}

struct GraphAst {
    line: usize,
    name: String,
    inputs: Option<(usize, Vec<String>)>,
    outputs: Option<(usize, Vec<String>)>,
    tensors: Vec<TensorAst>,
    ops: Vec<OpAst>,
    cons: Vec<ConAst>,
}

fn parse_attr(c: &mut Cursor) -> Result<AttrAst> {
    let v = match c.next("an attribute value")? {
        Tok::Str(s) => AttrValue::Str(s),
        Tok::Punct('@') => return Ok(AttrAst::Graph(c.name("a graph name")?)),
        Tok::Punct('[') => {
            c.pos -= 1;
            let items = c.list('[', ']', |c| c.word("an integer"))?;
            let ints = items
                .iter()
                .map(|w| w.parse::<i64>().map_err(|_| c.err(format!("expected an integer, found `{w}`"))))
                .collect::<Result<Vec<_>>>()?;
            AttrValue::Ints(ints)
        }
        Tok::Word(w) if w == "floats" && c.at_punct('[') => {
            let items = c.list('[', ']', |c| c.word("a float"))?;
            let floats = items
                .iter()
                .map(|w| parse_f64(w).ok_or_else(|| c.err(format!("expected a float, found `{w}`"))))
                .collect::<Result<Vec<_>>>()?;
            AttrValue::Floats(floats)
        }
        Tok::Word(w) => match w.as_str() {
            "true" => AttrValue::Bool(true),
            "false" => AttrValue::Bool(false),
            _ => {
                if let Some(d) = parse_dtype(&w) {
                    AttrValue::DType(d)
                } else if let Ok(i) = w.parse::<i64>() {
                    AttrValue::Int(i)
                } else if let Some(x) = parse_f64(&w) {
                    AttrValue::Float(x)
                } else {
                    return Err(c.err(format!("`{w}` is not an attribute value")));
                }
            }
        },
        other => return Err(c.err(format!("expected an attribute value, found {other}"))),
    };
    Ok(AttrAst::Value(v))
}

fn parse_f64(w: &str) -> Option<f64> {
    if let Some(hex) = w.strip_prefix("nan:0x") {
        return u64::from_str_radix(hex, 16).ok().map(f64::from_bits).filter(|x| x.is_nan());
    }
    w.parse::<f64>().ok()
}

fn parse_f32(w: &str) -> Option<f32> {
    if let Some(hex) = w.strip_prefix("nan:0x") {
        return u32::from_str_radix(hex, 16).ok().map(f32::from_bits).filter(|x| x.is_nan());
    }
    w.parse::<f32>().ok()
}

/// Encode element words as little-endian bytes of `dtype`.
fn encode_data(line: usize, info: &TensorInfo, words: &[String]) -> Result<Vec<u8>> {
    use DataType::*;
    if words.len() != info.nelms() {
        return Err(perr(line, format!("{} has {} elements but {} values are given", info, info.nelms(), words.len())));
    }
    let mut bytes = Vec::with_capacity(info.nbytes());
    for w in words {
        let bad = || perr(line, format!("`{w}` is not a {} value", info.dtype));
        macro_rules! int {
            ($t:ty) => {
                bytes.extend_from_slice(&w.parse::<$t>().map_err(|_| bad())?.to_le_bytes())
            };
        }
        match info.dtype {
            Bool => bytes.push(match w.as_str() {
                "true" => 1,
                "false" => 0,
                _ => w.parse::<u8>().map_err(|_| bad())?,
            }),
            Int8 => int!(i8),
            Int16 => int!(i16),
            Int32 => int!(i32),
            Int64 => int!(i64),
            Uint8 => int!(u8),
            Uint16 => int!(u16),
            Uint32 => int!(u32),
            Uint64 => int!(u64),
            Float16 => {
                let h = if let Some(hex) = w.strip_prefix("nan:0x") {
                    let h = u16::from_str_radix(hex, 16).ok().map(half::f16::from_bits).ok_or_else(bad)?;
                    if !h.is_nan() {
                        return Err(bad());
                    }
                    h
                } else {
                    half::f16::from_f32(parse_f32(w).ok_or_else(bad)?)
                };
                bytes.extend_from_slice(&h.to_le_bytes());
            }
            Float32 => bytes.extend_from_slice(&parse_f32(w).ok_or_else(bad)?.to_le_bytes()),
            Float64 => bytes.extend_from_slice(&parse_f64(w).ok_or_else(bad)?.to_le_bytes()),
        }
    }
    Ok(bytes)
}

fn parse_lines(text: &str) -> Result<(usize, usize, Vec<GraphAst>)> {
    let mut header: Option<(usize, usize)> = None;
    let mut graphs: Vec<GraphAst> = Vec::new();
    for (k, raw) in text.lines().enumerate() {
        let line = k + 1;
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let mut c = Cursor { line, toks: tokenize(line, trimmed)?, pos: 0 };
        let kw = c.word("a statement")?;
        if header.is_none() {
            if kw != "ir" {
                return Err(c.err(format!("expected the `ir` header line, found `{kw}`")));
            }
            let mut fields: HashMap<String, usize> = HashMap::new();
            while c.peek().is_some() {
                let key = c.word("a header field")?;
                c.punct('=')?;
                let v = c.usize("a number")?;
                fields.insert(key, v);
            }
            let mut get = |k: &str| fields.remove(k).ok_or_else(|| perr(line, format!("the header lacks `{k}`")));
            header = Some((get("num_host_transfers")?, get("replication_factor")?));
            if let Some(k) = fields.keys().next() {
                return Err(perr(line, format!("unknown header field `{k}`")));
            }
            continue;
        }
        if kw == "graph" {
            let name = c.name("a graph name")?;
            c.end()?;
            graphs.push(GraphAst {
                line,
                name,
                inputs: None,
                outputs: None,
                tensors: Vec::new(),
                ops: Vec::new(),
                cons: Vec::new(),
            });
            continue;
        }
        let Some(g) = graphs.last_mut() else {
            return Err(c.err(format!("`{kw}` outside a graph (expected `graph NAME` first)")));
        };
        match kw.as_str() {
            "inputs" | "outputs" => {
                let names = c.list('[', ']', |c| c.name("a tensor name"))?;
                c.end()?;
                let slot = if kw == "inputs" { &mut g.inputs } else { &mut g.outputs };
                if slot.is_some() {
                    return Err(c.err(format!("a second `{kw}` line in graph `{}`", g.name)));
                }
                *slot = Some((line, names));
            }
            "tensor" => {
                let name = c.name("a tensor name")?;
                let kind = c.word("a tensor kind")?;
                let info = c.info()?;
                let data = if c.at_punct('=') {
                    c.pos += 1;
                    if matches!(c.peek(), Some(Tok::Word(w)) if w == "elided") {
                        return Err(c.err(format!(
                            "the data of tensor `{name}` was elided (text printed with `elide_data_over`) and cannot be parsed"
                        )));
                    }
                    Some(c.list('[', ']', |c| c.word("a value"))?)
                } else {
                    None
                };
                c.end()?;
                g.tensors.push(TensorAst { line, name, kind, info, data });
            }
            "op" => {
                let name = c.name("an op name")?;
                let op_type = c.name("an op type")?;
                let attrs = if c.at_punct('{') {
                    c.list('{', '}', |c| {
                        let key = c.name("an attribute name")?;
                        c.punct('=')?;
                        Ok((key, parse_attr(c)?))
                    })?
                } else {
                    Vec::new()
                };
                c.keyword("in")?;
                let inputs = c.index_map()?;
                c.keyword("out")?;
                let outputs = c.index_map()?;
                c.end()?;
                g.ops.push(OpAst { line, name, op_type, attrs, inputs, outputs });
            }
            "topocon" => {
                let before = c.name("an op name")?;
                match c.next("`->`")? {
                    Tok::Arrow => {}
                    other => return Err(c.err(format!("expected `->`, found {other}"))),
                }
                let after = c.name("an op name")?;
                let tied = match c.peek() {
                    None => false,
                    Some(Tok::Word(w)) if w == "tied" => {
                        c.pos += 1;
                        true
                    }
                    Some(t) => return Err(c.err(format!("expected `tied` or end of line, found {t}"))),
                };
                c.end()?;
                g.cons.push(ConAst { line, before, after, tied });
            }
            other => return Err(c.err(format!("unknown statement `{other}`"))),
        }
    }
    let (nht, rf) = header.ok_or_else(|| perr(text.lines().count().max(1), "missing the `ir` header line"))?;
    Ok((nht, rf, graphs))
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
    let (num_host_transfers, replication_factor, graphs) = parse_lines(text)?;
    let mut ir = Ir::new();
    ir.num_host_transfers = num_host_transfers;
    ir.replication_factor = replication_factor;
    // Graphs.
    let mut ids: Vec<GraphId> = Vec::with_capacity(graphs.len());
    for (k, g) in graphs.iter().enumerate() {
        if k == 0 {
            if g.name != MAIN_GRAPH_NAME {
                return Err(perr(g.line, format!("the first graph must be `{MAIN_GRAPH_NAME}`, found `{}`", g.name)));
            }
            ids.push(ir.main_graph_id());
        } else {
            let id = ir.create_graph(&g.name).map_err(|e| perr(g.line, e.to_string()))?;
            ids.push(id);
        }
    }
    if graphs.is_empty() {
        return Err(perr(text.lines().count().max(1), format!("no `graph {MAIN_GRAPH_NAME}`")));
    }
    // Tensors, graph inputs and outputs of every graph (ops may refer to other graphs'
    // signatures, and HostLoad/HostStore to main-graph streams).
    for (g, &gid) in graphs.iter().zip(&ids) {
        let graph = ir.graph_mut(gid)?;
        for t in &g.tensors {
            let data = |t: &TensorAst| -> Result<HostTensor> {
                let words = t
                    .data
                    .as_ref()
                    .ok_or_else(|| perr(t.line, format!("{} tensor `{}` needs `= [..]` data", t.kind, t.name)))?;
                Ok(HostTensor { info: t.info.clone(), bytes: encode_data(t.line, &t.info, words)? })
            };
            let kind = match t.kind.as_str() {
                "act" => TensorKind::ActGrad,
                "var" => TensorKind::Variable(data(t)?),
                "const" => TensorKind::Constant(data(t)?),
                "h2d" => TensorKind::Stream(StreamDirection::HostToDevice),
                "d2h" => TensorKind::Stream(StreamDirection::DeviceToHost),
                other => {
                    return Err(perr(
                        t.line,
                        format!("unknown tensor kind `{other}` (expected act, var, const, h2d or d2h)"),
                    ))
                }
            };
            if kind.data().is_none() && t.data.is_some() {
                return Err(perr(t.line, format!("{} tensor `{}` cannot have data", t.kind, t.name)));
            }
            graph.add_tensor(&t.name, t.info.clone(), kind).map_err(|e| perr(t.line, e.to_string()))?;
        }
        let lookup = |graph: &Graph, line: usize, n: &str| -> Result<TensorId> {
            graph.tensor_id(n).map_err(|e| perr(line, e.to_string()))
        };
        if let Some((line, names)) = &g.inputs {
            for n in names {
                let t = lookup(graph, *line, n)?;
                let len = graph.inputs().len();
                graph.insert_input(len, t).map_err(|e| perr(*line, e.to_string()))?;
            }
        }
        if let Some((line, names)) = &g.outputs {
            for n in names {
                let t = lookup(graph, *line, n)?;
                graph.add_output(t).map_err(|e| perr(*line, e.to_string()))?;
            }
        }
    }
    // Ops, in printed (= creation) order.
    for (g, &gid) in graphs.iter().zip(&ids) {
        for o in &g.ops {
            let line = o.line;
            let e = |e: IrError| perr(line, e.to_string());
            let def = lookup_op(&o.op_type).map_err(e)?;
            let mut attrs = Attributes::new();
            for (key, v) in &o.attrs {
                let v = match v {
                    AttrAst::Value(v) => v.clone(),
                    AttrAst::Graph(n) => AttrValue::Graph(ir.graph_by_name(n).map_err(e)?.id()),
                };
                if attrs.get(key).is_some() {
                    return Err(perr(line, format!("attribute `{key}` given twice")));
                }
                attrs.set(key, v);
            }
            let graph = ir.graph(gid)?;
            if graph.op_by_name(&o.name).is_ok() {
                return Err(perr(line, format!("graph `{}` already has an op named `{}`", g.name, o.name)));
            }
            let resolve = |m: &[(u32, String)]| -> Result<Vec<(u32, TensorId)>> {
                m.iter().map(|(i, n)| Ok((*i, graph.tensor_id(n).map_err(e)?))).collect()
            };
            let inputs = resolve(&o.inputs)?;
            let outputs = resolve(&o.outputs)?;
            let inferred = ir.infer_outputs(gid, def, &attrs, &inputs, &o.name).map_err(e)?;
            let declared: Vec<(u32, &TensorInfo)> = outputs.iter().map(|&(i, t)| (i, &graph.tensors[t].info)).collect();
            let agrees = declared.len() == inferred.len()
                && declared.iter().all(|(i, info)| inferred.get(*i as usize) == Some(*info));
            if !agrees {
                return Err(perr(
                    line,
                    format!(
                        "op `{}` declares outputs [{}] but shape inference gives [{}]",
                        o.name,
                        declared.iter().map(|(i, t)| format!("{i}: {t}")).collect::<Vec<_>>().join(", "),
                        inferred.iter().enumerate().map(|(i, t)| format!("{i}: {t}")).collect::<Vec<_>>().join(", ")
                    ),
                ));
            }
            let graph = ir.graph_mut(gid)?;
            let op = graph.add_op(def, attrs, &o.name);
            for &(i, t) in &inputs {
                graph.connect_input(op, i, t).map_err(e)?;
            }
            for &(i, t) in &outputs {
                graph.connect_output(op, i, t).map_err(e)?;
            }
        }
        let graph = ir.graph_mut(gid)?;
        for c in &g.cons {
            let e = |e: IrError| perr(c.line, e.to_string());
            let b = graph.op_by_name(&c.before).map_err(e)?.id;
            let a = graph.op_by_name(&c.after).map_err(e)?.id;
            if c.tied {
                graph.add_tied_topo_con(b, a).map_err(e)?;
            } else {
                graph.add_topo_con(b, a).map_err(e)?;
            }
        }
    }
    ir.verify()?;
    Ok(ir)
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
    if (a.num_host_transfers, a.replication_factor) != (b.num_host_transfers, b.replication_factor) {
        return Some("num_host_transfers or replication_factor differ".into());
    }
    let (ga, gb): (Vec<&Graph>, Vec<&Graph>) = (a.graphs().collect(), b.graphs().collect());
    let names = |gs: &[&Graph]| gs.iter().map(|g| g.name().to_string()).collect::<Vec<_>>();
    if names(&ga) != names(&gb) {
        return Some(format!("graphs differ: {:?} vs {:?}", names(&ga), names(&gb)));
    }
    for (x, y) in ga.iter().zip(&gb) {
        if let Some(d) = graph_diff(a, x, b, y) {
            return Some(format!("graph `{}`: {d}", x.name()));
        }
    }
    None
}

fn graph_diff(ia: &Ir, a: &Graph, ib: &Ir, b: &Graph) -> Option<String> {
    let tn = |g: &Graph, t: TensorId| g.tensors[t].name.clone();
    let on = |g: &Graph, o: OpId| g.ops[o].name.clone();
    let ins = |g: &Graph| g.inputs().iter().map(|&t| tn(g, t)).collect::<Vec<_>>();
    let outs = |g: &Graph| g.outputs().iter().map(|&t| tn(g, t)).collect::<Vec<_>>();
    if ins(a) != ins(b) {
        return Some(format!("inputs {:?} vs {:?}", ins(a), ins(b)));
    }
    if outs(a) != outs(b) {
        return Some(format!("outputs {:?} vs {:?}", outs(a), outs(b)));
    }
    let (ta, tb) = (a.tensors_in_creation_order(), b.tensors_in_creation_order());
    if ta.len() != tb.len() {
        return Some(format!("{} vs {} tensors", ta.len(), tb.len()));
    }
    for (&x, &y) in ta.iter().zip(&tb) {
        let (x, y) = (&a.tensors[x], &b.tensors[y]);
        if x.name != y.name || x.info != y.info || x.kind != y.kind {
            return Some(format!(
                "tensor `{}` ({} {}) vs `{}` ({} {})",
                x.name,
                x.kind.short_name(),
                x.info,
                y.name,
                y.kind.short_name(),
                y.info
            ));
        }
        let prod = |g: &Graph, t: &crate::Tensor| t.producer.map(|p| (on(g, p.op), p.index));
        if prod(a, x) != prod(b, y) {
            return Some(format!("producer of `{}`: {:?} vs {:?}", x.name, prod(a, x), prod(b, y)));
        }
        let cons = |g: &Graph, t: &crate::Tensor| {
            let mut v: Vec<(String, u32)> = t.consumers.iter().map(|p| (on(g, p.op), p.index)).collect();
            v.sort();
            v
        };
        if cons(a, x) != cons(b, y) {
            return Some(format!("consumers of `{}`: {:?} vs {:?}", x.name, cons(a, x), cons(b, y)));
        }
    }
    let (oa, ob) = (a.ops_in_creation_order(), b.ops_in_creation_order());
    if oa.len() != ob.len() {
        return Some(format!("{} vs {} ops", oa.len(), ob.len()));
    }
    let attrs = |ir: &Ir, op: &crate::Op| -> Vec<(String, String)> {
        op.attrs
            .iter()
            .map(|(k, v)| {
                let mut s = String::new();
                write_attr(&mut s, ir, v);
                // Compare values exactly, not through their printing (NaN != NaN aside).
                let exact = match v {
                    AttrValue::Graph(_) => s.clone(),
                    other => format!("{other:?}"),
                };
                (k.to_string(), exact)
            })
            .collect()
    };
    for (&x, &y) in oa.iter().zip(&ob) {
        let (x, y) = (&a.ops[x], &b.ops[y]);
        if x.name != y.name || x.op_type() != y.op_type() {
            return Some(format!("op `{}` ({}) vs `{}` ({})", x.name, x.op_type(), y.name, y.op_type()));
        }
        if attrs(ia, x) != attrs(ib, y) {
            return Some(format!("attributes of op `{}` differ", x.name));
        }
        let map = |g: &Graph, m: &crate::TensorIndexMap| m.iter().map(|(i, t)| (i, tn(g, t))).collect::<Vec<_>>();
        if map(a, &x.inputs) != map(b, &y.inputs) || map(a, &x.outputs) != map(b, &y.outputs) {
            return Some(format!("connections of op `{}` differ", x.name));
        }
    }
    let cons = |g: &Graph| {
        let mut v: Vec<(String, String, bool)> =
            g.topo_cons().edges().map(|(x, y, t)| (on(g, x), on(g, y), t)).collect();
        v.sort();
        v
    };
    if cons(a) != cons(b) {
        return Some(format!("topological constraints {:?} vs {:?}", cons(a), cons(b)));
    }
    None
}
