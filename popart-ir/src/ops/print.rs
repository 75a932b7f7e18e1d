//! `PrintTensor`: the identity that prints its input when it runs (PopXL
//! `print_tensor`). The `cpu` device prints to stderr, or to the sink set with
//! `popxl_session::set_print_sink`.

use super::grad::spec;
use super::op_types;
use crate::{
    AttrKind, AttrSpec, AttrValue, Attributes, GradRule, GradSource, InferContext, Op, OpDef, OpFlags, Result,
    TensorInfo,
};

op_types!(
    /// `PrintTensor{title, print_self, print_gradient, <format>}(x) -> x`: prints
    /// `title: <x>` when `print_self` (default true), output = input. Its gradient
    /// is a `PrintTensor` of the incoming gradient titled `<title>_gradient` that
    /// prints only if `print_gradient` (default false); the gradient passes
    /// through unchanged. Format attributes: see [`PrintFormat`]. Has a side
    /// effect (never pruned) when it prints.
    PrintTensor,
);

/// How a float tensor is printed (PopXL's `float_format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FloatFormat {
    /// Fixed or scientific, whichever suits the values (as numpy).
    Auto,
    /// Fixed point, e.g. `-100.25`.
    Fixed,
    /// Scientific, e.g. `-1.0025e+02`.
    Scientific,
    /// Each value in its shortest form, unaligned.
    None,
}

/// The print format of a `PrintTensor` op, read from its attributes (PopXL's
/// keyword arguments, same names and defaults).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrintFormat {
    /// Above this many elements, only the `edge_items` first and last of each
    /// dimension are printed, with `...` between (0: never summarise). Default 1000.
    pub summarise_threshold: usize,
    /// Elements kept at each end of a summarised dimension. Default 3.
    pub edge_items: usize,
    /// Lines are wrapped before this width (0: never). Default 75.
    pub max_line_width: usize,
    /// Significant digits of floats (0: shortest form, unaligned). Default 8.
    pub digits: usize,
    /// Float notation. Default `auto`.
    pub float_format: FloatFormat,
    /// Between elements. Default `' '`.
    pub separator: char,
    /// Opens a dimension. Default `'['`.
    pub open_bracket: char,
    /// Closes a dimension. Default `']'`.
    pub close_bracket: char,
}

impl Default for PrintFormat {
    fn default() -> Self {
        PrintFormat {
            summarise_threshold: 1000,
            edge_items: 3,
            max_line_width: 75,
            digits: 8,
            float_format: FloatFormat::Auto,
            separator: ' ',
            open_bracket: '[',
            close_bracket: ']',
        }
    }
}

/// The attribute keys of the format, in [`PrintFormat`] field order.
pub const PRINT_FORMAT_KEYS: [&str; 8] = [
    "summarise_threshold",
    "edge_items",
    "max_line_width",
    "digits",
    "float_format",
    "separator",
    "open_bracket",
    "close_bracket",
];

impl PrintFormat {
    /// The format of an op's attributes (absent keys take the defaults), or a
    /// message naming the bad attribute.
    ///
    /// ```
    /// use popart_ir::ops::print::{FloatFormat, PrintFormat};
    /// use popart_ir::{AttrValue, Attributes};
    /// let a = Attributes::new().with("float_format", AttrValue::Str("fixed".into()));
    /// assert_eq!(PrintFormat::from_attrs(&a).unwrap().float_format, FloatFormat::Fixed);
    /// let bad = Attributes::new().with("separator", AttrValue::Str(", ".into()));
    /// assert!(PrintFormat::from_attrs(&bad).is_err());
    /// ```
    pub fn from_attrs(attrs: &Attributes) -> std::result::Result<PrintFormat, String> {
        let d = PrintFormat::default();
        let count = |key: &str, default: usize| -> std::result::Result<usize, String> {
            match attrs.get(key) {
                None => Ok(default),
                Some(AttrValue::Int(v)) => {
                    usize::try_from(*v).map_err(|_| format!("`{key}` must be a non-negative integer, got {v}"))
                }
                Some(v) => Err(format!("`{key}` must be an integer, got {v}")),
            }
        };
        let char_attr = |key: &str, default: char| -> std::result::Result<char, String> {
            match attrs.get(key) {
                None => Ok(default),
                Some(AttrValue::Str(s)) => {
                    let mut cs = s.chars();
                    match (cs.next(), cs.next()) {
                        (Some(c), None) => Ok(c),
                        _ => Err(format!("`{key}` must be exactly one character, got {s:?}")),
                    }
                }
                Some(v) => Err(format!("`{key}` must be a one-character string, got {v}")),
            }
        };
        let float_format = match attrs.get("float_format") {
            None => d.float_format,
            Some(AttrValue::Str(s)) => match s.as_str() {
                "auto" => FloatFormat::Auto,
                "fixed" => FloatFormat::Fixed,
                "scientific" => FloatFormat::Scientific,
                "none" => FloatFormat::None,
                other => return Err(format!("`float_format` must be auto, fixed, scientific or none, got {other:?}")),
            },
            Some(v) => Err(format!("`float_format` must be a string, got {v}"))?,
        };
        Ok(PrintFormat {
            summarise_threshold: count("summarise_threshold", d.summarise_threshold)?,
            edge_items: count("edge_items", d.edge_items)?,
            max_line_width: count("max_line_width", d.max_line_width)?,
            digits: count("digits", d.digits)?,
            float_format,
            separator: char_attr("separator", d.separator)?,
            open_bracket: char_attr("open_bracket", d.open_bracket)?,
            close_bracket: char_attr("close_bracket", d.close_bracket)?,
        })
    }
}

/// The attributes of `PrintTensor`: `title`, `print_self`, `print_gradient` and
/// the keys of [`PrintFormat`] ([`PRINT_FORMAT_KEYS`]).
pub const PRINT_TENSOR_SCHEMA: &[AttrSpec] = &[
    AttrSpec { name: "title", kind: AttrKind::Str, required: false },
    AttrSpec { name: "print_self", kind: AttrKind::Bool, required: false },
    AttrSpec { name: "print_gradient", kind: AttrKind::Bool, required: false },
    AttrSpec { name: "summarise_threshold", kind: AttrKind::Int, required: false },
    AttrSpec { name: "edge_items", kind: AttrKind::Int, required: false },
    AttrSpec { name: "max_line_width", kind: AttrKind::Int, required: false },
    AttrSpec { name: "digits", kind: AttrKind::Int, required: false },
    AttrSpec { name: "float_format", kind: AttrKind::Str, required: false },
    AttrSpec { name: "separator", kind: AttrKind::Str, required: false },
    AttrSpec { name: "open_bracket", kind: AttrKind::Str, required: false },
    AttrSpec { name: "close_bracket", kind: AttrKind::Str, required: false },
];

/// `title` (default empty).
pub fn print_title(attrs: &Attributes) -> &str {
    attrs.str("title").unwrap_or("")
}

/// `print_self` (default true).
pub fn prints_self(attrs: &Attributes) -> bool {
    attrs.bool("print_self").unwrap_or(true)
}

impl OpDef for PrintTensor {
    fn op_type(&self) -> &'static str {
        "PrintTensor"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        PRINT_TENSOR_SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        PrintFormat::from_attrs(ctx.attrs).map_err(|m| ctx.error(m))?;
        for key in ["print_self", "print_gradient"] {
            if ctx.attrs.get(key).is_some() && ctx.attrs.bool(key).is_none() {
                return Err(ctx.error(format!("`{key}` must be a bool")));
            }
        }
        if ctx.attrs.get("title").is_some() && ctx.attrs.str("title").is_none() {
            return Err(ctx.error("`title` must be a string"));
        }
        Ok(vec![ctx.input(0)?.clone()])
    }
    /// Printing is a side effect: an op that prints is never pruned.
    fn properties(&self, attrs: &Attributes) -> OpFlags {
        if prints_self(attrs) {
            OpFlags::SIDE_EFFECT
        } else {
            OpFlags::empty()
        }
    }
    /// A `PrintTensor` of the gradient titled `<title>_gradient`, printing if
    /// `print_gradient` (PopART's `PrintTensorOp::getGradOps`).
    fn grad(&self, op: &Op) -> GradRule {
        let print_gradient = op.attrs.bool("print_gradient").unwrap_or(false);
        let title = print_title(&op.attrs);
        let mut attrs = Attributes::new()
            .with("title", AttrValue::Str(format!("{title}_gradient")))
            .with("print_self", AttrValue::Bool(print_gradient))
            .with("print_gradient", AttrValue::Bool(print_gradient));
        for key in PRINT_FORMAT_KEYS {
            if let Some(v) = op.attrs.get(key) {
                attrs.set(key, v.clone());
            }
        }
        GradRule::Ops(vec![spec(&PrintTensor, attrs, &[(0, GradSource::GradOfOutput(0))], &[(0, 0)])])
    }
}

pub(crate) const ALL: &[&dyn OpDef] = &[&PrintTensor];
