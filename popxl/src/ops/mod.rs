//! Every op as a fallible function (PopXL's `popxl.ops`).
//!
//! Ops are created in the current graph (see [`crate::Graph::enter`]); outside
//! any graph context they go into the graph of their tensor inputs. Every tensor
//! input must belong to that graph. Each function maps to one op type of the
//! `popart-ir` catalogue with its attributes; the op is named after its type
//! (made unique, prefixed by the name scope) and its outputs `<op>:<index>`.
//!
//! | family | functions |
//! |---|---|
//! | unary, binary | every function of [`elementwise`] ([`negate`] [`exp`] [`log1p`] ... [`cast`]; [`add`] ... [`select`] (`where`)), also re-exported here |
//! | elementwise (more) | [`log2`] [`geluerf`] [`swish`] [`clip`] [`clamp`] [`increment_mod`] [`fmod`] [`maximum`] [`minimum`] (n-ary) [`scaled_add`] |
//! | in place (elementwise) | [`exp_`] [`relu_`] [`gelu_`] [`geluerf_`] [`swish_`] [`detach_`] [`increment_mod_`] |
//! | logical | [`isnan`] [`isinf`] [`isfinite`] [`logical_not`] [`logical_and`] [`logical_or`] |
//! | print | [`print_tensor`] ([`PrintTensorOptions`]) |
//! | nn | [`matmul`] [`softmax`] [`nll_loss`] [`nll_loss_with`] [`nll_loss_with_softmax_grad`] [`nll_loss_with_softmax_grad_with`] |
//! | nn (convolution) | [`conv`] [`conv_with`] ([`ConvOptions`], [`PadType`]) [`conv_transpose`] ([`ConvTransposeOptions`]) |
//! | nn (pooling) | [`max_pool`] [`max_pool_with`] [`average_pool`] [`average_pool_with`] ([`PoolOptions`], [`StorageOrder`]) |
//! | nn (normalisation) | [`group_norm`] [`layer_norm`] [`batch_norm_inference`] [`batch_norm`] (training, beyond PopXL) |
//! | nn (resizing) | [`interpolate`] ([`InterpolateOptions`]) [`roi_align`] |
//! | reduce | [`sum`] [`mean`] [`max`] [`min`] [`prod`] [`median`] [`l1`] [`l2`] [`logsum`] [`logsumexp`] [`sumsquare`] [`cumsum`] [`cumsum_with`] [`lamb_square`] |
//! | sort | [`argmax`] [`argmin`] [`topk`] [`histogram`] |
//! | shape | [`reshape`] [`flatten`] [`transpose`] [`slice()`] [`index`] [`concat()`] [`squeeze`] [`gather`] [`gather_with`] |
//! | indexing | [`subsample`] [`split`] [`scatter`] [`scatter_reduce`] [`dynamic_slice`] [`dynamic_update`] [`dynamic_update_`] [`onehot`] [`gather_with_options`] [`tied_gather`] [`groupedgather`] [`init`] |
//! | in place | [`add_`] [`accumulate_`] [`scaled_add_`] [`copy_var_update_`] |
//! | views (in place) | [`reshape_`] [`flatten_`] [`transpose_`] [`slice_`] [`concat_`] (aliases of their inputs) |
//! | in place (accumulators) | [`accumulate_square_`] [`accumulate_mean_`] [`accumulate_moving_average_`] [`accumulate_moving_average_square_`] [`accumulator_scale_`] [`accumulator_zero_`] [`sparse_accumulate_`] |
//! | optimizers | [`adam_updater`] [`lamb_updater`] [`adamax_updater`] [`adam_var_update`] |
//! | random | [`random_uniform`] [`random_normal`] [`dropout`] |
//! | random (seeds) | [`shaped_dropout`] [`create_random_seed`] [`split_random_seed`] (host seeds: [`crate::create_seeds`]) |
//! | host IO | [`host_load`] [`host_store`] |
//! | placement | [`io_tile_copy`] [`ipu_copy`] |
//! | collectives | [`collectives::replicated_all_reduce`] [`collectives::replicated_all_reduce_`] [`collectives::replicated_all_gather`] [`collectives::replicated_reduce_scatter`] [`collectives::replica_sharded_slice`] [`collectives::replicated_slice`] [`collectives::all_reduce`] [`collectives::all_reduce_identical_inputs`] [`collectives::all_reduce_identical_grad_inputs`] (in the `collectives` module, as in PopXL) |
//! | control | [`call`] [`call_with_info`] [`repeat`] [`repeat_with_info`] [`conditional`] [`conditional_branches`] [`conditional_with_info`] |

pub mod collectives;
mod conditional;
mod control;
mod conv;
pub mod elementwise;
mod float8;
mod indexing;
mod io;
mod logical;
mod nn;
mod norm;
mod optimizer;
mod pool;
mod print;
mod random;
mod reduce;
mod remote;
mod resize;
mod roi_align;
mod shape;
mod sort;
mod var_update;
mod view;

pub use conditional::{conditional, conditional_branches, conditional_with_info, Branch, ConditionalSiteInfo};
pub use control::{call, call_with_info, repeat, repeat_with_info, CallSiteInfo};
pub use conv::{conv, conv_transpose, conv_with, ConvOptions, ConvTransposeOptions, PadType};
pub use elementwise::*;
pub use float8::{
    conv_pow2scaled, conv_transpose_pow2scaled, matmul_pow2scaled, pow2scale_cast_from_fp8, pow2scale_cast_to_fp8,
};
pub use indexing::{
    dynamic_slice, dynamic_update, dynamic_update_, gather_with_options, groupedgather, init, onehot, scatter,
    scatter_reduce, split, subsample, tied_gather, GatherOptions, GroupedGatherOptions, InitType, ScatterReduceOptions,
    Splits,
};
pub use io::{host_load, host_store, io_tile_copy, ipu_copy};
pub use logical::{isfinite, isinf, isnan, logical_and, logical_not, logical_or};
pub use nn::{
    attention, matmul, nll_loss, nll_loss_with, nll_loss_with_softmax_grad, nll_loss_with_softmax_grad_with, softmax,
    NllLossOptions, Reduction,
};
pub use norm::{
    batch_norm, batch_norm_inference, batch_norm_with, group_norm, layer_norm, BatchNormOptions, BatchNormOutputs,
};
pub use optimizer::{adam_updater, adam_var_update, adamax_updater, lamb_updater, AdamUpdaterOptions};
pub use pool::{average_pool, average_pool_with, max_pool, max_pool_with, PoolOptions, StorageOrder};
pub use print::{print_tensor, FloatFormat, PrintTensorOptions};
pub use random::{create_random_seed, dropout, random_normal, random_uniform, shaped_dropout, split_random_seed};
pub use reduce::{
    cumsum, cumsum_with, l1, l2, lamb_square, logsum, logsumexp, max, mean, median, min, prod, sum, sumsquare,
    CumSumOptions,
};
pub use remote::{remote_code_load, remote_load, remote_load_, remote_store, RemoteOffset};
pub use resize::{interpolate, InterpolateOptions};
pub use roi_align::roi_align;
pub use shape::{
    concat, flatten, gather, gather_with, index, index_with, reshape, slice, squeeze, transpose, SliceIndex,
};
pub use sort::{argmax, argmin, histogram, topk};
pub use var_update::{
    accumulate_, accumulate_mean_, accumulate_moving_average_, accumulate_moving_average_square_, accumulate_square_,
    accumulator_scale_, accumulator_zero_, add_, copy_var_update_, scaled_add_, sparse_accumulate_, Scalar,
    SparseAccumulateOptions,
};
pub use view::{concat_, flatten_, reshape_, slice_, transpose_};

use popart_ir::{Attributes, OpDef, OpFlags, OpId, TensorId};

use crate::tensor::check_in_graph;
use crate::{context, Graph, PopXlError, Result, Tensor};

/// One op to create: its definition, attributes, inputs and optional output names.
/// Every function of this module is one; custom ops use it directly:
///
/// ```
/// use popart_ir::ops::all::Relu;
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::constant(vec![-1.0f32, 2.0], "x").unwrap();
/// let y = popxl::ops::OpBuilder::new("my_relu", &Relu).input(0, &x).create1().unwrap();
/// assert_eq!(y.shape(), vec![2]);
/// ```
pub struct OpBuilder<'a> {
    /// The popxl function, for error messages.
    what: &'static str,
    def: &'static dyn OpDef,
    attrs: Attributes,
    inputs: Vec<(u32, &'a Tensor)>,
    /// Names of the outputs (scoped and made unique); missing ones default to `<op>:<i>`.
    output_names: Vec<String>,
    /// Graph to create the op in; default: the current graph, else the inputs' graph.
    graph: Option<Graph>,
    /// Whether the inputs must be on one IPU and one tile set (PopXL's
    /// `check_tensor_ipu_and_tile_set`); off for copies between IPUs or tile
    /// sets, transfers and calls.
    check_placement: bool,
}

impl<'a> OpBuilder<'a> {
    /// An op of type `def`, created by the function `what` (named in errors).
    pub fn new(what: &'static str, def: &'static dyn OpDef) -> Self {
        OpBuilder {
            what,
            def,
            attrs: Attributes::new(),
            inputs: Vec::new(),
            output_names: Vec::new(),
            graph: None,
            check_placement: true,
        }
    }

    /// Accept inputs on different IPUs or tile sets (an op that moves data
    /// between them, such as `ipu_copy` or an `all_reduce` over IPUs). By
    /// default, as PopXL's ops, inputs whose IPU or tile set is known must agree:
    /// else [`PopXlError::PlacementMismatch`].
    pub fn mixed_placement(mut self) -> Self {
        self.check_placement = false;
        self
    }

    /// Connect `t` at input `index`.
    pub fn input(mut self, index: u32, t: &'a Tensor) -> Self {
        self.inputs.push((index, t));
        self
    }

    /// Set an attribute.
    pub fn attr(mut self, key: &str, value: popart_ir::AttrValue) -> Self {
        self.attrs.set(key, value);
        self
    }

    /// Set the op's typed attributes (its type's `XAttrs` struct, declared with
    /// [`popart_ir::op_attrs!`]), encoded into the attribute map.
    pub fn typed<A: popart_ir::OpAttrs>(mut self, attrs: &A) -> Self {
        for (key, value) in attrs.to_attrs().iter() {
            self.attrs.set(key, value.clone());
        }
        self
    }

    /// Name the next output (scoped by the current name scope and made unique).
    pub fn output_name(mut self, name: &str) -> Self {
        self.output_names.push(name.to_string());
        self
    }

    /// Create the op in graph `g` rather than the current graph.
    pub fn in_graph(mut self, g: Graph) -> Self {
        self.graph = Some(g);
        self
    }

    /// Create the op and return all its outputs, in output index order.
    pub fn create_all(self) -> Result<Vec<Tensor>> {
        Ok(self.create()?.outputs)
    }

    /// Create the op; returns it with its outputs.
    pub(crate) fn create(self) -> Result<CreatedOp> {
        let refs: Vec<&Tensor> = self.inputs.iter().map(|(_, t)| *t).collect();
        let graph = match self.graph {
            Some(g) => g,
            None => target_graph(&refs, self.what)?,
        };
        for t in &refs {
            check_in_graph(t, &graph, self.what)?;
        }
        if self.check_placement && !self.def.flags(&self.attrs).intersects(OpFlags::SUBGRAPH | OpFlags::HOST_IO) {
            check_same_placement(&self.inputs, self.what)?;
        }
        let state = graph.state()?;
        let mut st = state.borrow_mut();
        let ir = st.building(self.what)?;
        let ids: Vec<(u32, TensorId)> = self.inputs.iter().map(|(i, t)| (*i, t.tensor_id())).collect();
        let name = context::scoped(self.def.op_type());
        let def = self.def;
        let infos = ir.infer_outputs(graph.id, def, &self.attrs, &ids, &name)?;
        let out_names: Vec<String> = self.output_names.iter().map(|n| context::scoped(n)).collect();
        let op = ir.create_op_with_outputs(graph.id, def, self.attrs, &ids, infos, &out_names, &name)?;
        let g = ir.graph_mut(graph.id)?;
        let placement = context::current_placement();
        if !placement.is_default() {
            g.set_op_placement(op, placement)?;
        }
        for before in context::on_op_created(graph.ir_id, graph.id, op) {
            g.add_topo_con(before, op)?;
        }
        let outputs = g
            .op(op)?
            .outputs()
            .tensors()
            .map(|t| Ok(Tensor::from_core(&graph, g.tensor(t)?)))
            .collect::<Result<_>>()?;
        // Hooks run with the IR released: they may read it or create ops.
        drop(st);
        for hook in context::op_created_hooks(graph.ir_id, graph.id) {
            hook(&graph, op)?;
        }
        Ok(CreatedOp { graph, op, outputs })
    }

    /// Create the op and return its first output (an op without outputs is a
    /// [`PopXlError::IndexOutOfRange`] naming it; use [`OpBuilder::create_all`]).
    pub fn create1(self) -> Result<Tensor> {
        let c = self.create()?;
        let op = c.graph.read(|g| g.op(c.op).map(|o| o.name.clone()))??;
        c.outputs.into_iter().next().ok_or(PopXlError::IndexOutOfRange {
            what: format!("output of op `{op}`"),
            index: 0,
            len: 0,
        })
    }
}

/// PopXL's `check_tensor_ipu_and_tile_set`: the inputs whose IPU (or tile set)
/// is defined must all agree; the first that differs from the first input with
/// one is a [`PopXlError::PlacementMismatch`] naming both tensors.
fn check_same_placement(inputs: &[(u32, &Tensor)], what: &str) -> Result<()> {
    if inputs.len() < 2 {
        return Ok(());
    }
    let mut first_ipu: Option<(&Tensor, u32)> = None;
    let mut first_tiles: Option<(&Tensor, popart_ir::TileSet)> = None;
    for (_, t) in inputs {
        let Some(p) = t.placement()? else { continue };
        let mismatch = |first: &Tensor, kind: &'static str, a: String, b: String| PopXlError::PlacementMismatch {
            what: what.to_string(),
            kind,
            first: first.name().to_string(),
            second: t.name().to_string(),
            places: format!("{a} != {b}"),
        };
        if let Some(ipu) = p.ipu {
            match first_ipu {
                None => first_ipu = Some((t, ipu)),
                Some((f, i)) if i != ipu => return Err(mismatch(f, "IPUs", i.to_string(), ipu.to_string())),
                Some(_) => {}
            }
        }
        match first_tiles {
            None => first_tiles = Some((t, p.tile_set)),
            Some((f, s)) if s != p.tile_set => {
                return Err(mismatch(f, "tile sets", s.name().to_string(), p.tile_set.name().to_string()))
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// An op just created.
pub(crate) struct CreatedOp {
    pub graph: Graph,
    pub op: OpId,
    pub outputs: Vec<Tensor>,
}

/// Op input index `i` as the IR's `u32`, or an error naming `what`.
pub(crate) fn input_index(i: usize, what: &str) -> Result<u32> {
    u32::try_from(i).map_err(|_| PopXlError::IntegerOutOfRange {
        what: format!("input index of `{what}`"),
        value: i.to_string(),
        ty: "u32",
    })
}

/// A user `usize` as the IR's `i64`, or an error naming `what`.
pub(crate) fn to_i64(value: usize, what: impl FnOnce() -> String) -> Result<i64> {
    i64::try_from(value).map_err(|_| PopXlError::IntegerOutOfRange {
        what: what(),
        value: value.to_string(),
        ty: "i64",
    })
}

/// The graph an op goes into: the current graph, else the graph of its inputs.
pub(crate) fn target_graph(inputs: &[&Tensor], what: &str) -> Result<Graph> {
    if let Some(g) = context::try_current_graph() {
        return Ok(g);
    }
    inputs.first().map(|t| t.graph()).ok_or_else(|| PopXlError::NoGraphContext { what: what.to_string() })
}
