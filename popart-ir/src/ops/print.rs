//! `PrintTensor`: the identity that prints its input when it runs (PopXL
//! `print_tensor`). The `cpu` device prints to stderr, or to the sink set with
//! `popxl_session::set_print_sink`.

use super::grad::spec;
use super::op_types;
use crate::{
    op_attrs, AttrSpec, Attributes, GradRule, GradSource, InferContext, OpAttrs, OpDef, OpFlags, Result, TensorInfo,
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

crate::attr_enum! {
    /// How a float tensor is printed (PopXL's `float_format`).
    pub enum FloatFormat {
        /// Fixed or scientific, whichever suits the values (as numpy).
        Auto = "auto",
        /// Fixed point, e.g. `-100.25`.
        Fixed = "fixed",
        /// Scientific, e.g. `-1.0025e+02`.
        Scientific = "scientific",
        /// Each value in its shortest form, unaligned.
        None = "none",
    }
}

op_attrs! {
    /// Attributes of `PrintTensor` (PopXL's keyword arguments, same names and
    /// defaults): what is printed and the [`PrintFormat`].
    ///
    /// ```
    /// use popart_ir::ops::print::{FloatFormat, PrintTensorAttrs};
    /// use popart_ir::{AttrValue, Attributes, OpAttrs};
    /// let a = Attributes::new().with("float_format", AttrValue::Str("fixed".into()));
    /// assert_eq!(PrintTensorAttrs::from_attrs(&a).unwrap().format().float_format, FloatFormat::Fixed);
    /// let bad = Attributes::new().with("separator", AttrValue::Str(", ".into()));
    /// assert!(PrintTensorAttrs::from_attrs(&bad).is_err());
    /// assert_eq!(PrintTensorAttrs::defaults().unwrap(), PrintTensorAttrs::default());
    /// ```
    #[derive(Clone, Debug, PartialEq)]
    pub struct PrintTensorAttrs {
        /// Printed before the tensor (the facade's `print_tensor` titles an
        /// empty one `print_<tensor name>`, PopXL's default).
        pub title: String = PrintTensorAttrs::DEFAULT.title,
        /// Print the tensor.
        pub print_self: bool = PrintTensorAttrs::DEFAULT.print_self,
        /// The gradient op prints the gradient.
        pub print_gradient: bool = PrintTensorAttrs::DEFAULT.print_gradient,
        /// See [`PrintFormat::summarise_threshold`].
        pub summarise_threshold: usize = PrintTensorAttrs::DEFAULT.summarise_threshold,
        /// See [`PrintFormat::edge_items`].
        pub edge_items: usize = PrintTensorAttrs::DEFAULT.edge_items,
        /// See [`PrintFormat::max_line_width`].
        pub max_line_width: usize = PrintTensorAttrs::DEFAULT.max_line_width,
        /// See [`PrintFormat::digits`].
        pub digits: usize = PrintTensorAttrs::DEFAULT.digits,
        /// Float notation.
        pub float_format: FloatFormat = PrintTensorAttrs::DEFAULT.float_format,
        /// Between elements.
        pub separator: char = PrintTensorAttrs::DEFAULT.separator,
        /// Opens a dimension.
        pub open_bracket: char = PrintTensorAttrs::DEFAULT.open_bracket,
        /// Closes a dimension.
        pub close_bracket: char = PrintTensorAttrs::DEFAULT.close_bracket,
    }
}

impl PrintTensorAttrs {
    /// PopXL's defaults (`print_tensor`'s keyword arguments), the value of
    /// every absent attribute: written once, here.
    pub const DEFAULT: PrintTensorAttrs = PrintTensorAttrs {
        title: String::new(),
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
    };
}

/// [`PrintTensorAttrs::DEFAULT`].
impl Default for PrintTensorAttrs {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// The print format of a `PrintTensor` op (see [`PrintTensorAttrs::format`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrintFormat {
    /// Above this many elements, only the `edge_items` first and last of each
    /// dimension are printed, with `...` between (0: never summarise).
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

impl PrintTensorAttrs {
    /// The print format.
    pub fn format(&self) -> PrintFormat {
        PrintFormat {
            summarise_threshold: self.summarise_threshold,
            edge_items: self.edge_items,
            max_line_width: self.max_line_width,
            digits: self.digits,
            float_format: self.float_format,
            separator: self.separator,
            open_bracket: self.open_bracket,
            close_bracket: self.close_bracket,
        }
    }
}

impl OpDef for PrintTensor {
    fn op_type(&self) -> &'static str {
        "PrintTensor"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        PrintTensorAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        PrintTensorAttrs::infer(ctx)?;
        Ok(vec![ctx.input(0)?.clone()])
    }
    /// Printing is a side effect: an op that prints is never pruned.
    fn properties(&self, attrs: &Attributes) -> OpFlags {
        if PrintTensorAttrs::from_attrs(attrs).is_ok_and(|a| a.print_self) {
            OpFlags::SIDE_EFFECT
        } else {
            OpFlags::empty()
        }
    }
    /// A `PrintTensor` of the gradient titled `<title>_gradient`, printing if
    /// `print_gradient` (PopART's `PrintTensorOp::getGradOps`).
    fn grad(&self, cx: &crate::GradContext<'_>) -> GradRule {
        let op = cx.op;
        let Ok(a) = PrintTensorAttrs::of(op) else { return GradRule::None };
        let grad = PrintTensorAttrs {
            title: format!("{}_gradient", a.title),
            print_self: a.print_gradient,
            print_gradient: a.print_gradient,
            ..a
        };
        GradRule::Ops(vec![spec(&PrintTensor, grad.to_attrs(), &[(0, GradSource::GradOfOutput(0))], &[(0, 0)])])
    }
}

pub(crate) const ALL: &[&dyn OpDef] = &[&PrintTensor];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AttrError, AttrValue};

    #[test]
    fn counts_and_characters_are_checked() {
        let negative = Attributes::new().with("edge_items", AttrValue::Int(-1));
        let err = PrintTensorAttrs::from_attrs(&negative).unwrap_err();
        assert!(matches!(err, AttrError::OutOfRange { ref attr, .. } if attr == "edge_items"), "{err:?}");
        assert!(err.to_string().contains("non-negative"), "{err}");
        let long = Attributes::new().with("open_bracket", AttrValue::Str("((".into()));
        let err = PrintTensorAttrs::from_attrs(&long).unwrap_err();
        assert!(matches!(err, AttrError::OutOfRange { ref attr, .. } if attr == "open_bracket"), "{err:?}");
        let d = PrintTensorAttrs::defaults().unwrap();
        assert_eq!((d.edge_items, d.separator, d.print_self, d.float_format), (3, ' ', true, FloatFormat::Auto));
        assert_eq!(PrintTensorAttrs::from_attrs(&d.to_attrs()).unwrap(), d);
    }
}
