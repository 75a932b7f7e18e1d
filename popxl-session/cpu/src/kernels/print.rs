//! `PrintTensor`: copies its input to its output and, when the op prints
//! (`print_self`), writes `<title>: <tensor>` and a newline to stderr when the
//! kernel runs (in schedule order), or to the sink set on the running thread with
//! [`set_print_sink`] (tests capture it with [`capture_prints`]).
//!
//! The text is numpy-like (`numpy.array2string`): nested brackets, elements
//! aligned to a common width, rows of a matrix on their own lines indented by
//! their depth, a blank line between blocks of rank 3 and above, lines wrapped
//! before `max_line_width`, and above `summarise_threshold` elements only
//! `edge_items` at each end of every dimension with `...` between. Integers are
//! right-aligned; bools print as `True`/`False`; floats follow `float_format`:
//! `fixed` with up to `digits` significant digits, trailing zeros trimmed and
//! padded with spaces so the points align (`[1.  2.5]`); `scientific` (`1.5e-05`);
//! `auto` picks scientific when the finite non-zero magnitudes reach 1e8, go
//! below 1e-4 or span more than a factor 1000 (numpy's rule), fixed otherwise;
//! `none` (or `digits == 0`) prints each value in its shortest form, unaligned.
//! A separator other than a space is followed by a space (`[1, 2]`).
//!
//! Printing formats text, so this kernel allocates when it prints (the one
//! kernel that does; an op that does not print only copies).

use std::cell::RefCell;

use half::f16;
use popart_ir::ops::all as ir;
use popart_ir::ops::print::{FloatFormat, PrintFormat, PrintTensorAttrs};
use popart_ir::{DataType, TensorInfo};

use super::ptr::slice;
use super::spec::{BuildResult, SpecExt};
use super::KernelEntry;
use crate::kernel::{Kernel, KernelArgs, KernelResult, KernelSpec};

/// Every kernel of this file.
pub(crate) const KERNELS: &[KernelEntry] = &[(&ir::PrintTensor, build_print)];

/// Where the text of `PrintTensor` ops run on one thread goes.
pub type PrintSink = Box<dyn FnMut(&str)>;

thread_local! {
    static SINK: RefCell<Option<PrintSink>> = const { RefCell::new(None) };
}

/// Send the text that `print_tensor` ops print while sessions run on this thread
/// to `sink` instead of stderr (`None`: back to stderr). Returns the previous
/// sink. Each call of `sink` receives one tensor's text, ending with a newline.
///
/// ```
/// use std::sync::{Arc, Mutex};
/// let seen = Arc::new(Mutex::new(String::new()));
/// let s = seen.clone();
/// let old = popxl_cpu::kernels::set_print_sink(Some(Box::new(move |t: &str| s.lock().unwrap().push_str(t))));
/// assert!(old.is_none());
/// popxl_cpu::kernels::set_print_sink(None);
/// ```
pub fn set_print_sink(sink: Option<PrintSink>) -> Option<PrintSink> {
    SINK.with(|s| std::mem::replace(&mut *s.borrow_mut(), sink))
}

/// Run `f` with the text of `print_tensor` ops on this thread collected instead of
/// printed; returns `f`'s result and the text. The previous sink is restored.
///
/// ```
/// let ((), text) = popxl_cpu::kernels::capture_prints(|| ());
/// assert_eq!(text, "");
/// ```
pub fn capture_prints<R>(f: impl FnOnce() -> R) -> (R, String) {
    let buf = std::rc::Rc::new(RefCell::new(String::new()));
    let b = buf.clone();
    let old = set_print_sink(Some(Box::new(move |t: &str| b.borrow_mut().push_str(t))));
    let r = f();
    set_print_sink(old);
    let text = buf.borrow().clone();
    (r, text)
}

/// Print `text` to this thread's sink, or stderr.
fn emit(text: &str) {
    let written = SINK.with(|s| match s.try_borrow_mut() {
        Ok(mut guard) => match guard.as_mut() {
            Some(sink) => {
                sink(text);
                true
            }
            None => false,
        },
        // A sink that runs a printing session itself: its prints go to stderr.
        Err(_) => false,
    });
    if !written {
        eprint!("{text}");
    }
}

struct PrintKernel {
    title: String,
    fmt: PrintFormat,
    info: TensorInfo,
    print: bool,
}

impl Kernel for PrintKernel {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let (src, dst) = (args.inputs[0], args.outputs[0]);
        let nbytes = self.info.nbytes();
        if self.print {
            // SAFETY: input 0 holds the spec's `nbytes` (`KernelArgs`).
            let text = format_tensor(&self.title, &self.info, unsafe { slice(src, nbytes) }, &self.fmt);
            emit(&text);
        }
        if nbytes > 0 && !std::ptr::eq(src, dst) {
            // SAFETY: both buffers hold `nbytes`; an output overlaps an input only as the
            // same pointer, excluded here (`KernelArgs`).
            unsafe { std::ptr::copy_nonoverlapping(src, dst, nbytes) };
        }
        Ok(())
    }
}

fn build_print(spec: &KernelSpec<'_>) -> BuildResult {
    let (x, y) = (spec.input(0)?, spec.output(0)?);
    if x.info != y.info {
        return Err(spec.error(format!("output {} differs from input {}", y.info, x.info)));
    }
    let a = spec.typed::<PrintTensorAttrs>()?;
    Ok(Box::new(PrintKernel { fmt: a.format(), print: a.print_self, title: a.title, info: x.info.clone() }))
}

/// The values of a tensor, widened.
enum Values {
    Bool(Vec<bool>),
    Int(Vec<i128>),
    /// Values and the source dtype (for the shortest form of `none`).
    Float(Vec<f64>, DataType),
}

fn read_values(dtype: DataType, bytes: &[u8]) -> Values {
    macro_rules! ints {
        ($t:ty) => {
            Values::Int(
                bytes
                    .chunks_exact(std::mem::size_of::<$t>())
                    .map(|c| <$t>::from_le_bytes(c.try_into().unwrap_or_default()) as i128)
                    .collect(),
            )
        };
    }
    match dtype {
        DataType::Bool => Values::Bool(bytes.iter().map(|&b| b != 0).collect()),
        DataType::Int8 => ints!(i8),
        DataType::Int16 => ints!(i16),
        DataType::Int32 => ints!(i32),
        DataType::Int64 => ints!(i64),
        DataType::Uint8 => ints!(u8),
        DataType::Uint16 => ints!(u16),
        DataType::Uint32 => ints!(u32),
        DataType::Uint64 => ints!(u64),
        DataType::Float16 => {
            Values::Float(bytes.chunks_exact(2).map(|c| f16::from_le_bytes([c[0], c[1]]).to_f64()).collect(), dtype)
        }
        DataType::Float32 => Values::Float(
            bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap_or_default()) as f64).collect(),
            dtype,
        ),
        DataType::Float64 => Values::Float(
            bytes.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap_or_default())).collect(),
            dtype,
        ),
        // Printed as their (unscaled) values, shortest as float16 is.
        DataType::Float8_143 | DataType::Float8_152 => match popart_ir::float8::Float8Format::of(dtype) {
            Some(f) => Values::Float(bytes.iter().map(|&c| f.decode_f64(c)).collect(), DataType::Float16),
            None => Values::Int(Vec::new()),
        },
    }
}

/// `title: <tensor>\n` for a tensor of `info` held in `bytes` (little endian).
///
/// Formats as described in the module docs.
pub(crate) fn format_tensor(title: &str, info: &TensorInfo, bytes: &[u8], fmt: &PrintFormat) -> String {
    let values = read_values(info.dtype, bytes);
    let shape = &info.shape;
    let n = info.nelms();
    let summarise = fmt.summarise_threshold > 0 && n > fmt.summarise_threshold;
    let mut strides = vec![1usize; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * shape[d + 1];
    }
    let p = Printer { shape, strides: &strides, summarise, fmt };
    let mut shown = Vec::new();
    p.collect(0, 0, &mut shown);
    let elem = ElemFormat::new(&values, &shown, fmt);
    let body = p.render(0, 0, &|i| elem.format(&values, i));
    format!("{title}: {body}\n")
}

struct Printer<'a> {
    shape: &'a [usize],
    strides: &'a [usize],
    summarise: bool,
    fmt: &'a PrintFormat,
}

/// One position along a dimension: an index or the summary gap.
#[derive(Clone, Copy)]
enum Pos {
    At(usize),
    Gap,
}

impl Printer<'_> {
    /// The positions printed along dimension `d`.
    fn positions(&self, d: usize) -> Vec<Pos> {
        let len = self.shape[d];
        let e = self.fmt.edge_items;
        if self.summarise && len > 2 * e {
            (0..e).map(Pos::At).chain([Pos::Gap]).chain((len - e..len).map(Pos::At)).collect()
        } else {
            (0..len).map(Pos::At).collect()
        }
    }

    /// Flat indices of every printed element.
    fn collect(&self, d: usize, base: usize, out: &mut Vec<usize>) {
        if d == self.shape.len() {
            out.push(base);
            return;
        }
        for pos in self.positions(d) {
            if let Pos::At(i) = pos {
                self.collect(d + 1, base + i * self.strides[d], out);
            }
        }
    }

    fn render(&self, d: usize, base: usize, elem: &dyn Fn(usize) -> String) -> String {
        let rank = self.shape.len();
        if d == rank {
            return elem(base);
        }
        let sep = self.fmt.separator;
        let (open, close) = (self.fmt.open_bracket, self.fmt.close_bracket);
        let sep_str = if sep == ' ' { " ".to_string() } else { format!("{sep} ") };
        let sep_end = sep_str.trim_end();
        let indent = " ".repeat(d + 1);
        let items: Vec<String> = self
            .positions(d)
            .into_iter()
            .map(|pos| match pos {
                Pos::At(i) => self.render(d + 1, base + i * self.strides[d], elem),
                Pos::Gap => "...".to_string(),
            })
            .collect();
        let mut s = String::new();
        s.push(open);
        if d + 1 == rank {
            // Innermost: elements on lines wrapped before `max_line_width`.
            let mut col = d + 1;
            for (k, item) in items.iter().enumerate() {
                if k > 0 {
                    let wrap = self.fmt.max_line_width > 0
                        && col + sep_str.len() + item.len() + 1 > self.fmt.max_line_width
                        && col > d + 1;
                    if wrap {
                        s.push_str(sep_end);
                        s.push('\n');
                        s.push_str(&indent);
                        col = d + 1;
                    } else {
                        s.push_str(&sep_str);
                        col += sep_str.len();
                    }
                }
                s.push_str(item);
                col += item.len();
            }
        } else {
            let joiner = format!("{sep_end}{}{indent}", "\n".repeat(rank - d - 1));
            s.push_str(&items.join(&joiner));
        }
        s.push(close);
        s
    }
}

/// How every element of one printed tensor is formatted.
enum ElemFormat {
    /// Right-aligned to `width` (bools, integers, and floats in fixed or
    /// scientific notation with `frac` digits after the point).
    Aligned { width: usize, float: Option<FloatNotation> },
    /// Shortest form, unaligned.
    Plain,
}

#[derive(Clone, Copy)]
enum FloatNotation {
    /// Fixed point: `frac` digits at most (trimmed, space padded), `digits` significant.
    Fixed { frac: usize, digits: usize },
    /// Scientific: `frac` mantissa digits (zero padded).
    Scientific { frac: usize, digits: usize },
}

/// Fixed-point text of `v` with `digits` significant digits, trailing zeros
/// trimmed (`1.`, `2.5`).
fn fixed_trimmed(v: f64, digits: usize) -> String {
    let int_digits = if v.abs() >= 1.0 { v.abs().log10().floor() as usize + 1 } else { 1 };
    let prec = digits.saturating_sub(int_digits);
    let s = format!("{v:.prec$}");
    let s = if s.contains('.') { s.trim_end_matches('0').to_string() } else { format!("{s}.") };
    s
}

/// Mantissa and exponent of `v` in scientific notation with `digits` significant
/// digits, the mantissa's trailing zeros trimmed.
fn sci_parts(v: f64, digits: usize) -> (String, i32) {
    let prec = digits.saturating_sub(1);
    let s = format!("{v:.prec$e}");
    let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
    let m = if m.contains('.') { m.trim_end_matches('0').to_string() } else { format!("{m}.") };
    (m, e.parse().unwrap_or(0))
}

fn frac_len(s: &str) -> usize {
    s.split_once('.').map_or(0, |(_, f)| f.len())
}

fn non_finite(v: f64) -> Option<&'static str> {
    if v.is_nan() {
        Some("nan")
    } else if v == f64::INFINITY {
        Some("inf")
    } else if v == f64::NEG_INFINITY {
        Some("-inf")
    } else {
        None
    }
}

impl ElemFormat {
    fn new(values: &Values, shown: &[usize], fmt: &PrintFormat) -> ElemFormat {
        match values {
            Values::Bool(v) => {
                let all_true = shown.iter().all(|&i| v[i]);
                ElemFormat::Aligned { width: if all_true { 4 } else { 5 }, float: None }
            }
            Values::Int(v) => {
                let width = shown.iter().map(|&i| v[i].to_string().len()).max().unwrap_or(1);
                ElemFormat::Aligned { width, float: None }
            }
            Values::Float(v, _) => {
                if fmt.digits == 0 || fmt.float_format == FloatFormat::None {
                    return ElemFormat::Plain;
                }
                let digits = fmt.digits;
                let finite: Vec<f64> = shown.iter().map(|&i| v[i]).filter(|x| x.is_finite()).collect();
                let nonzero = finite.iter().map(|x| x.abs()).filter(|&x| x > 0.0);
                let (lo, hi) = nonzero.fold((f64::INFINITY, 0.0f64), |(lo, hi), x| (lo.min(x), hi.max(x)));
                let sci = match fmt.float_format {
                    FloatFormat::Scientific => true,
                    FloatFormat::Fixed => false,
                    _ => hi > 0.0 && (hi >= 1e8 || lo < 1e-4 || hi / lo > 1e3),
                };
                let notation = if sci {
                    let frac = finite.iter().map(|&x| frac_len(&sci_parts(x, digits).0)).max().unwrap_or(0);
                    FloatNotation::Scientific { frac, digits }
                } else {
                    let frac = finite.iter().map(|&x| frac_len(&fixed_trimmed(x, digits))).max().unwrap_or(0);
                    FloatNotation::Fixed { frac, digits }
                };
                let mut e = ElemFormat::Aligned { width: 0, float: Some(notation) };
                let width = shown.iter().map(|&i| e.raw_float(v[i]).len()).max().unwrap_or(0);
                if let ElemFormat::Aligned { width: w, .. } = &mut e {
                    *w = width;
                }
                e
            }
        }
    }

    /// A float in this format's notation, before alignment.
    fn raw_float(&self, v: f64) -> String {
        if let Some(s) = non_finite(v) {
            return s.to_string();
        }
        match self {
            ElemFormat::Aligned { float: Some(FloatNotation::Fixed { frac, digits }), .. } => {
                let s = fixed_trimmed(v, *digits);
                let pad = frac.saturating_sub(frac_len(&s));
                format!("{s}{}", " ".repeat(pad))
            }
            ElemFormat::Aligned { float: Some(FloatNotation::Scientific { frac, digits }), .. } => {
                let (m, e) = sci_parts(v, *digits);
                let pad = frac.saturating_sub(frac_len(&m));
                let sign = if e < 0 { '-' } else { '+' };
                format!("{m}{}e{sign}{:02}", "0".repeat(pad), e.unsigned_abs())
            }
            _ => v.to_string(),
        }
    }

    fn format(&self, values: &Values, i: usize) -> String {
        let raw = match values {
            Values::Bool(v) => if v[i] { "True" } else { "False" }.to_string(),
            Values::Int(v) => v[i].to_string(),
            Values::Float(v, dt) => match self {
                ElemFormat::Plain => match dt {
                    DataType::Float16 => f16::from_f64(v[i]).to_string(),
                    DataType::Float32 => (v[i] as f32).to_string(),
                    _ => v[i].to_string(),
                },
                ElemFormat::Aligned { .. } => self.raw_float(v[i]),
            },
        };
        match self {
            ElemFormat::Aligned { width, .. } => format!("{raw:>width$}"),
            ElemFormat::Plain => raw,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use popart_ir::{HostTensor, OpAttrs};

    fn defaults() -> PrintTensorAttrs {
        PrintTensorAttrs::defaults().unwrap()
    }

    fn show(dtype: DataType, shape: &[usize], xs: &[f64], fmt: &PrintFormat) -> String {
        let t = HostTensor::from_f64_values(dtype, shape, xs);
        format_tensor("t", &t.info, &t.bytes, fmt)
    }

    #[test]
    fn integers_align_like_numpy() {
        let d = defaults().format();
        assert_eq!(show(DataType::Int32, &[3], &[6.0, 9.0, 12.0], &d), "t: [ 6  9 12]\n");
        assert_eq!(show(DataType::Int8, &[2, 2], &[1.0, -2.0, 3.0, 4.0], &d), "t: [[ 1 -2]\n [ 3  4]]\n");
        assert_eq!(show(DataType::Int64, &[], &[7.0], &d), "t: 7\n");
        assert_eq!(show(DataType::Uint8, &[2, 1, 2], &[1.0, 2.0, 3.0, 4.0], &d), "t: [[[1 2]]\n\n [[3 4]]]\n");
        assert_eq!(show(DataType::Bool, &[2], &[1.0, 0.0], &d), "t: [ True False]\n");
    }

    #[test]
    fn floats_fixed_scientific_and_plain() {
        let d = defaults().format();
        assert_eq!(show(DataType::Float32, &[3], &[1.0, 2.5, -0.125], &d), "t: [ 1.     2.5   -0.125]\n");
        assert_eq!(show(DataType::Float64, &[2], &[1.5e-5, 2e10], &d), "t: [1.5e-05 2.0e+10]\n");
        assert_eq!(show(DataType::Float64, &[3], &[f64::NAN, 1.0, f64::NEG_INFINITY], &d), "t: [ nan   1. -inf]\n");
        let none = PrintFormat { float_format: FloatFormat::None, ..d.clone() };
        assert_eq!(show(DataType::Float32, &[2], &[0.1, 2.0], &none), "t: [0.1 2]\n");
        let brackets = PrintFormat { separator: ',', open_bracket: '(', close_bracket: ')', ..d };
        assert_eq!(show(DataType::Int32, &[2, 2], &[1.0, 2.0, 3.0, 4.0], &brackets), "t: ((1, 2),\n (3, 4))\n");
    }

    #[test]
    fn summarises_and_wraps() {
        let fmt = PrintFormat { summarise_threshold: 5, edge_items: 2, ..defaults().format() };
        let xs: Vec<f64> = (0..10).map(f64::from).collect();
        assert_eq!(show(DataType::Int32, &[10], &xs, &fmt), "t: [0 1 ... 8 9]\n");
        let narrow = PrintFormat { max_line_width: 10, ..defaults().format() };
        assert_eq!(show(DataType::Int32, &[6], &xs[..6], &narrow), "t: [0 1 2 3\n 4 5]\n");
    }
}
