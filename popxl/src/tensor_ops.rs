//! The tensor operators (PopXL's dunder methods): `+ - * / %` with tensors or
//! scalars on either side, `&` `|` `!` (logical), unary `-`, and `+=` (`add_`).
//!
//! Operators cannot return a `Result`, so they panic with the failing op's
//! error; the fallible functions of [`crate::ops`] are the alternative.

use std::ops::{Add, AddAssign, BitAnd, BitOr, Div, Mul, Neg, Not, Rem, Sub};

use crate::host::Wide;
use crate::{ops, Result, Tensor};

fn expect_op(r: Result<Tensor>, what: &str, lhs: &str, rhs: &str) -> Tensor {
    match r {
        Ok(t) => t,
        Err(e) => {
            panic!("popxl: `{lhs} {what} {rhs}` failed: {e} (use the fallible `popxl::ops` functions to handle this)")
        }
    }
}

/// A scalar constant of `like`'s data type holding `value` (converted exactly,
/// or an error naming it), in the current graph (or `like`'s graph).
fn scalar_like(like: &Tensor, value: Wide) -> Result<Tensor> {
    let what = format!("scalar operand {value} of tensor `{}`", like.name());
    let data = crate::HostArray::scalar_of(like.dtype(), value, &what)?;
    crate::variables::constant_in_graph_of(like, data, "scalar")
}

/// A scalar operand of the operators, widened without loss.
trait OperandScalar: Copy + std::fmt::Display {
    fn wide(self) -> Wide;
}

impl OperandScalar for f64 {
    fn wide(self) -> Wide {
        Wide::Float(self)
    }
}

impl OperandScalar for i64 {
    fn wide(self) -> Wide {
        Wide::Int(i128::from(self))
    }
}

impl OperandScalar for bool {
    fn wide(self) -> Wide {
        Wide::Int(i128::from(self))
    }
}

macro_rules! binary_operator {
    ($trait:ident, $method:ident, $op:path, $sym:literal) => {
        binary_operator!($trait, $method, $op, $sym, [f64, i64]);
    };
    ($trait:ident, $method:ident, $op:path, $sym:literal, [$($s:ty),*]) => {
        impl $trait<&Tensor> for &Tensor {
            type Output = Tensor;
            fn $method(self, rhs: &Tensor) -> Tensor {
                expect_op($op(self, rhs), $sym, self.name(), rhs.name())
            }
        }
        impl $trait<Tensor> for Tensor {
            type Output = Tensor;
            fn $method(self, rhs: Tensor) -> Tensor {
                (&self).$method(&rhs)
            }
        }
        impl $trait<&Tensor> for Tensor {
            type Output = Tensor;
            fn $method(self, rhs: &Tensor) -> Tensor {
                (&self).$method(rhs)
            }
        }
        impl $trait<Tensor> for &Tensor {
            type Output = Tensor;
            fn $method(self, rhs: Tensor) -> Tensor {
                self.$method(&rhs)
            }
        }
        $(binary_operator!(@scalar $trait, $method, $op, $sym, $s);)*
    };
    (@scalar $trait:ident, $method:ident, $op:path, $sym:literal, $s:ty) => {
        impl $trait<$s> for &Tensor {
            type Output = Tensor;
            fn $method(self, rhs: $s) -> Tensor {
                let r = scalar_like(self, rhs.wide()).and_then(|c| $op(self, &c));
                expect_op(r, $sym, self.name(), &rhs.to_string())
            }
        }
        impl $trait<$s> for Tensor {
            type Output = Tensor;
            fn $method(self, rhs: $s) -> Tensor {
                (&self).$method(rhs)
            }
        }
        impl $trait<&Tensor> for $s {
            type Output = Tensor;
            fn $method(self, rhs: &Tensor) -> Tensor {
                let r = scalar_like(rhs, self.wide()).and_then(|c| $op(&c, rhs));
                expect_op(r, $sym, &self.to_string(), rhs.name())
            }
        }
        impl $trait<Tensor> for $s {
            type Output = Tensor;
            fn $method(self, rhs: Tensor) -> Tensor {
                self.$method(&rhs)
            }
        }
    };
}

binary_operator!(Add, add, ops::add, "+");
binary_operator!(Sub, sub, ops::sub, "-");
binary_operator!(Mul, mul, ops::mul, "*");
binary_operator!(Div, div, ops::div, "/");
binary_operator!(Rem, rem, ops::fmod, "%");
binary_operator!(BitAnd, bitand, ops::logical_and, "&", [bool, f64, i64]);
binary_operator!(BitOr, bitor, ops::logical_or, "|", [bool, f64, i64]);

impl Neg for &Tensor {
    type Output = Tensor;
    fn neg(self) -> Tensor {
        match ops::negate(self) {
            Ok(t) => t,
            Err(e) => panic!("popxl: `-{}` failed: {e}", self.name()),
        }
    }
}

impl Neg for Tensor {
    type Output = Tensor;
    fn neg(self) -> Tensor {
        -&self
    }
}

/// `!t` is PopXL's `~t`: [`ops::logical_not`] (non-bool tensors are cast to bool).
impl Not for &Tensor {
    type Output = Tensor;
    fn not(self) -> Tensor {
        match ops::logical_not(self) {
            Ok(t) => t,
            Err(e) => panic!("popxl: `!{}` failed: {e}", self.name()),
        }
    }
}

impl Not for Tensor {
    type Output = Tensor;
    fn not(self) -> Tensor {
        !&self
    }
}

/// `t += x` is PopXL's `__iadd__`: the in-place [`ops::add_`], after which `t`
/// still names the same tensor (PopXL returns `self`), so later reads of `t`
/// (ordered after the write, as with any in-place op) see the sum and
/// `Session::get_tensor_data(&t)` still finds a variable. `x` is a tensor or an
/// `f64`/`i64` scalar (a constant of `t`'s data type). Panics like the other
/// operators; see [`ops::add_`].
impl AddAssign<&Tensor> for Tensor {
    fn add_assign(&mut self, rhs: &Tensor) {
        expect_op(ops::add_(self, rhs), "+=", self.name(), rhs.name());
    }
}

impl AddAssign<Tensor> for Tensor {
    fn add_assign(&mut self, rhs: Tensor) {
        *self += &rhs;
    }
}

macro_rules! add_assign_scalar {
    ($($s:ty),*) => {$(
        impl AddAssign<$s> for Tensor {
            fn add_assign(&mut self, rhs: $s) {
                let r = scalar_like(self, rhs.wide()).and_then(|c| ops::add_(self, &c));
                expect_op(r, "+=", self.name(), &rhs.to_string());
            }
        }
    )*};
}

add_assign_scalar!(f64, i64);
