//! Matrix multiplication with numpy `matmul` semantics.

use super::grad::simple;
use super::grad::{MatMulLhsGrad, MatMulRhsGrad};
use super::{broadcast_shapes, op_types};
use crate::{GradRule, GradSource, InferContext, OpDef, Result, TensorInfo};

op_types!(
    /// `a @ b`: batched over leading dims with broadcasting; a 1-D lhs is a row vector and a
    /// 1-D rhs a column vector, the promoted dim being removed from the output (numpy rules).
    MatMul,
    /// `a @ b + c (+ r)` with `c` of shape `[n]` added to every row and the
    /// optional `r` (input 3) of the result's shape added after it: a linear
    /// layer with its bias and residual (made by the `fuse-matmul-bias` pattern
    /// from `MatMul` and `Add`s; no gradient)
    MatMulAdd,
);

/// Output shape of `a @ b` under numpy rules, or a message saying why not.
pub fn matmul_shape(a: &[usize], b: &[usize]) -> std::result::Result<Vec<usize>, String> {
    if a.is_empty() || b.is_empty() {
        return Err("matmul operands must have rank >= 1".into());
    }
    let a2: Vec<usize> = if a.len() == 1 { vec![1, a[0]] } else { a.to_vec() };
    let b2: Vec<usize> = if b.len() == 1 { vec![b[0], 1] } else { b.to_vec() };
    let (m, k) = (a2[a2.len() - 2], a2[a2.len() - 1]);
    let (k2, n) = (b2[b2.len() - 2], b2[b2.len() - 1]);
    if k != k2 {
        return Err(format!("inner dimensions differ: {a:?} @ {b:?}"));
    }
    let mut out = broadcast_shapes(&a2[..a2.len() - 2], &b2[..b2.len() - 2])
        .ok_or_else(|| format!("batch dimensions of {a:?} and {b:?} cannot be broadcast"))?;
    if a.len() > 1 {
        out.push(m);
    }
    if b.len() > 1 {
        out.push(n);
    }
    Ok(out)
}

impl OpDef for MatMul {
    fn op_type(&self) -> &'static str {
        "MatMul"
    }
    /// Output elements x the contracted size (`a`'s last dimension) multiply-adds.
    fn cost(&self, ctx: &crate::CostContext<'_>) -> crate::OpCost {
        ctx.matrix(ctx.output_elements(0).saturating_mul(ctx.input_last_dim(0)))
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let (a, b) = (ctx.input(0)?, ctx.input(1)?);
        if a.dtype != b.dtype {
            return Err(ctx.error(format!("operands have different dtypes: {} and {}", a.dtype, b.dtype)));
        }
        if a.dtype == crate::DataType::Bool {
            return Err(ctx.error("matmul of bool tensors"));
        }
        if a.dtype.is_float8() {
            return Err(ctx.error(format!("matmul of {} tensors (use matmul_pow2scaled)", a.dtype)));
        }
        let shape = matmul_shape(&a.shape, &b.shape).map_err(|m| ctx.error(m))?;
        Ok(vec![TensorInfo::new(a.dtype, shape)])
    }
    /// `MatMulLhsGrad(g, a, b)` and `MatMulRhsGrad(g, a, b)`, each already reduced to its operand's shape.
    fn grad(&self, _cx: &crate::GradContext<'_>) -> GradRule {
        let ins = [(0, GradSource::GradOfOutput(0)), (1, GradSource::FwdInput(0)), (2, GradSource::FwdInput(1))];
        GradRule::Ops(vec![simple(&MatMulLhsGrad, &ins, 0), simple(&MatMulRhsGrad, &ins, 1)])
    }
}

impl OpDef for MatMulAdd {
    fn op_type(&self) -> &'static str {
        "MatMulAdd"
    }
    /// As `MatMul` (the bias add is not counted).
    fn cost(&self, ctx: &crate::CostContext<'_>) -> crate::OpCost {
        ctx.matrix(ctx.output_elements(0).saturating_mul(ctx.input_last_dim(0)))
    }
    /// `MatMulAdd(a, b, c, r?)`: `MatMul(a, b)`'s info; `c` is `[n]`, `n` the
    /// result's last dim; `r`, when connected, has the result's info.
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let y = MatMul.infer(ctx)?.remove(0);
        let c = ctx.input(2)?;
        if c.dtype != y.dtype
            || !y.dtype.is_floating_point()
            || y.shape.last().map(|&n| vec![n]) != Some(c.shape.clone())
        {
            return Err(ctx.error(format!("the addend {c} must be a {}[n] vector, n the last dim of {y}", y.dtype)));
        }
        if let Some(r) = ctx.optional_input(3) {
            if r != &y {
                return Err(ctx.error(format!("the residual {r} must have the result's info {y}")));
            }
        }
        Ok(vec![y])
    }
}

pub(crate) const ALL: &[&dyn OpDef] = &[&MatMul, &MatMulAdd];
