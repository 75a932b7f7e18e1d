//! `print_tensor` (op `PrintTensor`).

use popart_ir::ops::all as ir_ops;
pub use popart_ir::ops::print::FloatFormat;
use popart_ir::ops::print::PrintTensorAttrs;

use super::OpBuilder;
use crate::{Result, Tensor};

/// The keyword arguments of PopXL's `print_tensor`, with its defaults: the
/// IR's typed attributes of `PrintTensor` ([`PrintTensorAttrs`], one
/// definition). An empty `title` is PopXL's `None`: `print_<tensor name>`.
///
/// ```
/// use popxl::ops::{FloatFormat, PrintTensorOptions};
/// let o = PrintTensorOptions { title: "w".into(), float_format: FloatFormat::Fixed, ..Default::default() };
/// assert!(o.print_self && !o.print_gradient);
/// assert_eq!(o.summarise_threshold, 1000);
/// ```
pub use popart_ir::ops::print::PrintTensorAttrs as PrintTensorOptions;

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
    let title = if options.title.is_empty() { format!("print_{}", t.name()) } else { options.title.clone() };
    let attrs = PrintTensorAttrs { title, ..options.clone() };
    OpBuilder::new("print_tensor", &ir_ops::PrintTensor).input(0, t).typed(&attrs).create1()
}
