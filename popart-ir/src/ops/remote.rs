//! Streaming memory: loads and stores between tile memory and a remote buffer
//! ([`crate::RemoteBuffer`]), and code loading.
//!
//! Attributes of the transfers: `remote_buffer: int` (the buffer's id) and
//! `offset: int` (the entry, default 0) unless input 1 is connected: an int32
//! or uint32 scalar (PopXL makes uint32 offsets) holding the entry at run time (checked by the device when it runs).
//! A constant offset is checked here, when the op is created.
//!
//! `RemoteCodeLoad{graph, destination}` loads the code of `graph` from its
//! implicit code buffer into tile memory (`destination = "executable"`). It
//! has no effect on values; it tells the lowering's code-liveness analysis
//! when the graph's code must be live (see `popart_lower`).
//!
//! These ops are lowered to device programs, not kernels (`HOST_IO`). None
//! is differentiable: gradients stop at a remote load.

use super::op_types;
use crate::{
    op_attrs, Alias, AttrSpec, Attributes, DataType, GradRule, GraphId, InferContext, Op, OpAttrs, OpDef, OpFlags,
    Result, TensorInfo,
};

op_attrs! {
    /// Attributes of remote loads and stores.
    #[derive(Clone, Debug, PartialEq)]
    pub struct RemoteAttrs {
        /// The remote buffer's id.
        pub remote_buffer: i64,
        /// The entry (or input 1).
        pub offset: Option<i64> = None,
    }
}

op_attrs! {
    /// Attributes of `RemoteCodeLoad`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct RemoteCodeLoadAttrs {
        /// The graph whose code is loaded.
        pub graph: GraphId,
        /// Where the code goes.
        pub destination: String = "executable".to_string(),
    }
}

op_types!(
    /// `RemoteLoad([_, offset]) -> t`: entry `offset` of buffer `remote_buffer`.
    RemoteLoad,
    /// `RemoteLoadInplace(t[, offset]) -> t'`: overwrite `t` with the entry (output aliases `t`).
    RemoteLoadInplace,
    /// `RemoteStore(t[, offset])`: write `t` to the entry.
    RemoteStore,
    /// `RemoteCodeLoad{graph, destination}`: load `graph`'s code.
    RemoteCodeLoad,
);

/// The attributes of a remote transfer (`RemoteLoad`, `RemoteLoadInplace`,
/// `RemoteStore`); `None` for other ops and attributes that do not decode
/// (which inference rejects).
pub fn transfer_attrs(op: &Op) -> Option<RemoteAttrs> {
    let transfer = op.is::<RemoteLoad>() || op.is::<RemoteLoadInplace>() || op.is::<RemoteStore>();
    transfer.then(|| RemoteAttrs::of(op).ok()).flatten()
}

/// The code-load destinations PopXL offers.
pub const CODE_LOAD_DESTINATIONS: &[&str] = &["executable"];

/// The buffer's entry type, after checking the offset (attribute or input 1).
fn buffer_info<'a>(ctx: &InferContext<'a>, a: &RemoteAttrs) -> Result<&'a TensorInfo> {
    let id = a.remote_buffer;
    let id = u32::try_from(id).map_err(|_| ctx.error(format!("no remote buffer {id}")))?;
    let buf = ctx.ir.remote_buffer(crate::RemoteBufferId(id)).map_err(|e| ctx.error(e.to_string()))?;
    match ctx.optional_input(1) {
        Some(off) => {
            if a.offset.is_some() {
                return Err(ctx.error("an offset tensor and an `offset` attribute: give one"));
            }
            if !matches!(off.dtype, DataType::Int32 | DataType::Uint32) || off.nelms() != 1 {
                return Err(ctx.error(format!("the offset tensor must be an int32 or uint32 scalar, not {off}")));
            }
        }
        None => {
            // No offset attribute and no offset input: entry 0.
            let off = a.offset.unwrap_or(0);
            if off < 0 || off as u128 >= buf.entries as u128 {
                return Err(ctx
                    .error(format!("offset {off} is out of range for remote buffer {id} of {} entries", buf.entries)));
            }
        }
    }
    Ok(&buf.info)
}

/// Check that `t` matches the buffer's entry type.
fn check_entry(ctx: &InferContext<'_>, a: &RemoteAttrs, t: &TensorInfo, entry: &TensorInfo) -> Result<()> {
    if t != entry {
        let id = a.remote_buffer;
        return Err(ctx.error(format!("tensor {t} does not match remote buffer {id} of {entry}")));
    }
    Ok(())
}

impl OpDef for RemoteLoad {
    fn op_type(&self) -> &'static str {
        "RemoteLoad"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        RemoteAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        if ctx.optional_input(0).is_some() {
            return Err(ctx.error("input 0 is not used (RemoteLoadInplace loads into a tensor)"));
        }
        Ok(vec![buffer_info(ctx, &RemoteAttrs::infer(ctx)?)?.clone()])
    }
    fn properties(&self, _: &Attributes) -> OpFlags {
        OpFlags::HOST_IO
    }
    fn grad(&self, _cx: &crate::GradContext<'_>) -> GradRule {
        GradRule::Stop
    }
}

impl OpDef for RemoteLoadInplace {
    fn op_type(&self) -> &'static str {
        "RemoteLoadInplace"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        RemoteAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let a = RemoteAttrs::infer(ctx)?;
        let entry = buffer_info(ctx, &a)?;
        let t = ctx.input(0)?;
        check_entry(ctx, &a, t, entry)?;
        Ok(vec![t.clone()])
    }
    fn properties(&self, _: &Attributes) -> OpFlags {
        OpFlags::HOST_IO
    }
    fn aliases(&self, _: &Attributes) -> Vec<Alias> {
        vec![Alias::modified(0, 0)]
    }
    fn grad(&self, _cx: &crate::GradContext<'_>) -> GradRule {
        GradRule::Stop
    }
}

impl OpDef for RemoteStore {
    fn op_type(&self) -> &'static str {
        "RemoteStore"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        RemoteAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let a = RemoteAttrs::infer(ctx)?;
        let entry = buffer_info(ctx, &a)?;
        check_entry(ctx, &a, ctx.input(0)?, entry)?;
        Ok(vec![])
    }
    fn properties(&self, _: &Attributes) -> OpFlags {
        OpFlags::HOST_IO | OpFlags::SIDE_EFFECT
    }
    fn grad(&self, _cx: &crate::GradContext<'_>) -> GradRule {
        GradRule::Stop
    }
}

impl OpDef for RemoteCodeLoad {
    fn op_type(&self) -> &'static str {
        "RemoteCodeLoad"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        RemoteCodeLoadAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let a = RemoteCodeLoadAttrs::infer(ctx)?;
        let g = ctx.ir.graph(a.graph)?;
        if g.id() == ctx.ir.main_graph_id() {
            return Err(ctx.error("the main graph's code is always live and cannot be loaded"));
        }
        let dest = a.destination;
        if !CODE_LOAD_DESTINATIONS.contains(&dest.as_str()) {
            return Err(ctx.error(format!(
                "unknown destination `{dest}` (expected one of: {})",
                CODE_LOAD_DESTINATIONS.join(", ")
            )));
        }
        Ok(vec![])
    }
    fn properties(&self, _: &Attributes) -> OpFlags {
        // SUBGRAPH: it names a graph (kept reachable, printed by name); it does
        // not run it. SIDE_EFFECT: pruning keeps it.
        OpFlags::HOST_IO | OpFlags::SIDE_EFFECT | OpFlags::SUBGRAPH
    }
    fn grad(&self, _cx: &crate::GradContext<'_>) -> GradRule {
        GradRule::Stop
    }
}

pub(crate) const ALL: &[&dyn OpDef] = &[&RemoteLoad, &RemoteLoadInplace, &RemoteStore, &RemoteCodeLoad];
