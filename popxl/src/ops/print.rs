//! `print_tensor` (op `PrintTensor`).

use popart_ir::ops::all as ir_ops;
pub use popart_ir::ops::print::FloatFormat;
use popart_ir::ops::print::PrintTensorAttrs;

use super::OpBuilder;
use crate::{Result, Tensor};

/// The keyword arguments of PopXL's `print_tensor`, with its defaults.
///
/// ```
/// use popxl::ops::{FloatFormat, PrintTensorOptions};
/// let o = PrintTensorOptions { title: Some("w".into()), float_format: FloatFormat::Fixed, ..Default::default() };
/// assert!(o.print_self && !o.print_gradient);
/// assert_eq!(o.summarise_threshold, 1000);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct PrintTensorOptions {
    /// Printed before the tensor; default `print_<tensor name>`.
    pub title: Option<String>,
    /// Print the tensor (default true).
    pub print_self: bool,
    /// Also print its gradient, titled `<title>_gradient`, when autodiff makes one
    /// (default false).
    pub print_gradient: bool,
    /// Above this many elements only the edges are printed (0: never summarise).
    pub summarise_threshold: usize,
    /// Elements kept at each end of a summarised dimension.
    pub edge_items: usize,
    /// Lines are wrapped before this width (0: never).
    pub max_line_width: usize,
    /// Significant digits of floats (0: shortest form, unaligned).
    pub digits: usize,
    /// Float notation.
    pub float_format: FloatFormat,
    /// Between elements.
    pub separator: char,
    /// Opens a dimension.
    pub open_bracket: char,
    /// Closes a dimension.
    pub close_bracket: char,
}

impl Default for PrintTensorOptions {
    fn default() -> Self {
        PrintTensorOptions {
            title: None,
            print_self: true,
            print_gradient: false,
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

/// Print `t` when the op runs and return it unchanged (op `PrintTensor`; PopXL's
/// `print_tensor`). The `cpu` device writes `<title>: <tensor>` to stderr in
/// schedule order (or to the sink of `popxl_session::set_print_sink`), numpy
/// style. The op is never pruned, even if its output is unused; its gradient
/// passes through unchanged and is printed as `<title>_gradient` when
/// `print_gradient` is set (the output must then be on the gradient path).
///
/// ```
/// use popxl::ops::{print_tensor, PrintTensorOptions};
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::constant(vec![1.0f32, 2.0], "x").unwrap();
/// let y = print_tensor(&x, &PrintTensorOptions::default()).unwrap();
/// assert_eq!(y.shape(), x.shape());
/// ```
pub fn print_tensor(t: &Tensor, options: &PrintTensorOptions) -> Result<Tensor> {
    let o = options;
    let attrs = PrintTensorAttrs {
        title: o.title.clone().unwrap_or_else(|| format!("print_{}", t.name())),
        print_self: o.print_self,
        print_gradient: o.print_gradient,
        summarise_threshold: o.summarise_threshold,
        edge_items: o.edge_items,
        max_line_width: o.max_line_width,
        digits: o.digits,
        float_format: o.float_format,
        separator: o.separator,
        open_bracket: o.open_bracket,
        close_bracket: o.close_bracket,
    };
    OpBuilder::new("print_tensor", &ir_ops::PrintTensor).input(0, t).typed(&attrs).create1()
}
