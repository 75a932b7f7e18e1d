//! Program building: graph bodies (kernel calls, host stream copies, call sites
//! with their planned copies), one [`Function`] per subgraph, and the engine's
//! programs.

use popart_ir::ops::control::RepeatAttrs;
use popart_ir::ops::io::{HostLoad, HostStore, StreamAttrs};
use popart_ir::ops::remote::{
    RemoteAttrs, RemoteCodeLoad, RemoteCodeLoadAttrs, RemoteLoad, RemoteLoadInplace, RemoteStore,
};
use popart_ir::{Op, OpAttrs, RemoteBufferId, StreamDirection, TensorId, TileSet};

use super::buffers::BufferTable;
use super::copies::{Loc, PlannedCopy, SitePlan};
use super::host::HostIo;
use super::index::{GraphIndex, IndexVec, SiteId};
use super::sites::{SiteKind, SiteRange};
use super::Lowerer;
use crate::executable::{Arg, BufferId, Function, FunctionId, KernelCall, Program, Programs, RemoteOffset, StreamId};
use crate::LowerError;

/// Builds programs once buffers and streams are known.
pub(super) struct Emitter<'l, 'a> {
    pub(super) l: &'l Lowerer<'a>,
    pub(super) plans: &'l IndexVec<SiteId, SitePlan>,
    pub(super) buffers: &'l BufferTable,
    pub(super) host: &'l HostIo<'a>,
}

fn internal(msg: String) -> LowerError {
    LowerError::Internal(msg)
}

impl Emitter<'_, '_> {
    /// The buffer of tensor `t` of graph `g`.
    fn buf(&self, g: GraphIndex, t: TensorId) -> Result<BufferId, LowerError> {
        let c = self.l.class(g, t)?;
        self.buffers.class_buffer[c].ok_or_else(|| {
            internal(format!("tensor {t:?} of graph `{}` is used but has no buffer", self.l.graphs[g].graph.name()))
        })
    }

    fn loc(&self, l: Loc) -> Result<BufferId, LowerError> {
        match l {
            Loc::Class(c) => self.buffers.class_buffer[c]
                .ok_or_else(|| internal(format!("a planned copy uses class {c:?}, which has no buffer"))),
            Loc::Temp(t) => Ok(self.buffers.temp_buffer[t]),
        }
    }

    fn copies(&self, v: &[PlannedCopy], out: &mut Vec<Program>) -> Result<(), LowerError> {
        for c in v {
            out.push(Program::Copy { src: self.loc(c.src)?, dst: self.loc(c.dst)?, bytes: c.bytes });
        }
        Ok(())
    }

    /// The function of graph `g`.
    fn function_id(&self, g: GraphIndex) -> Result<FunctionId, LowerError> {
        g.function_id().ok_or_else(|| internal("the main graph is called".to_string()))
    }

    fn stream(&self, g: GraphIndex, op: &Op, direction: StreamDirection) -> Result<StreamId, LowerError> {
        let name = StreamAttrs::of(op)?.stream;
        let name = name.as_str();
        self.host.data_streams.get(&(direction, name)).copied().ok_or_else(|| LowerError::UnknownStream {
            graph: self.l.graphs[g].graph.name().to_string(),
            op: op.name.clone(),
            stream: name.to_string(),
        })
    }

    /// The remote buffer and entry of a remote load or store.
    fn remote_target(&self, g: GraphIndex, op: &Op) -> Result<(RemoteBufferId, RemoteOffset), LowerError> {
        let a = RemoteAttrs::of(op)?;
        let id = u32::try_from(a.remote_buffer).map_err(|_| internal(format!("`{}` has no remote buffer", op.name)))?;
        let offset = match op.input(1) {
            Some(t) => RemoteOffset::Tensor(self.buf(g, t)?),
            // No offset input and no offset attribute: entry 0.
            None => RemoteOffset::Entry(usize::try_from(a.offset.unwrap_or(0)).unwrap_or(usize::MAX)),
        };
        Ok((RemoteBufferId(id), offset))
    }

    /// One function per subgraph, in reachable-graph order.
    pub(super) fn functions(&self) -> Result<Vec<Function>, LowerError> {
        let mut functions = Vec::new();
        for (g, gd) in self.l.graphs.iter_enumerated().skip(1) {
            let inputs = gd.graph.inputs().iter().map(|&t| self.buf(g, t)).collect::<Result<_, _>>()?;
            let outputs = gd.graph.outputs().iter().map(|&t| self.buf(g, t)).collect::<Result<_, _>>()?;
            functions.push(Function {
                id: self.function_id(g)?,
                name: gd.graph.name().to_string(),
                graph: gd.id,
                inputs,
                outputs,
                body: self.graph_body(g)?,
            });
        }
        Ok(functions)
    }

    /// The engine's programs: the main graph's body, constants for init, and the
    /// weight transfers.
    pub(super) fn programs(&self) -> Result<Programs, LowerError> {
        let (weights, constants, remote) = (&self.host.weights, &self.host.constants, &self.host.remote_weights);
        let from_host = weights
            .iter()
            .map(|w| Program::HostToDevice { stream: w.from_host, dst: w.buffer, tiles: TileSet::Compute })
            .chain(remote.iter().map(|w| Program::HostToRemote {
                stream: w.from_host,
                buffer: w.slot.buffer,
                entry: w.slot.entry,
            }));
        let to_host = weights
            .iter()
            .map(|w| Program::DeviceToHost { src: w.buffer, stream: w.to_host, tiles: TileSet::Compute })
            .chain(remote.iter().map(|w| Program::RemoteToHost {
                buffer: w.slot.buffer,
                entry: w.slot.entry,
                stream: w.to_host,
            }));
        Ok(Programs {
            init: Program::Sequence((0..constants.len()).map(|constant| Program::WriteConstant { constant }).collect()),
            weights_from_host: Program::Sequence(from_host.collect()),
            weights_to_host: Program::Sequence(to_host.collect()),
            main: self.graph_body(GraphIndex::MAIN)?,
        })
    }

    /// The body of graph `g`: its ops in schedule order.
    fn graph_body(&self, g: GraphIndex) -> Result<Program, LowerError> {
        let gd = &self.l.graphs[g];
        let mut seq = Vec::new();
        for &o in &gd.sched {
            if gd.shared_views.contains_key(o) {
                continue; // the output shares the input's buffer: nothing to run
            }
            let op = gd.graph.op(o)?;
            let sites = self.l.op_sites(g, o);
            let tiles = op.placement.tile_set;
            match op.def() {
                def if def.is::<HostLoad>() => {
                    let stream = self.stream(g, op, StreamDirection::HostToDevice)?;
                    let out = op.output(0).ok_or_else(|| internal(format!("`{}` has no output", op.name)))?;
                    seq.push(Program::HostToDevice { stream, dst: self.buf(g, out)?, tiles });
                }
                def if def.is::<HostStore>() => {
                    let stream = self.stream(g, op, StreamDirection::DeviceToHost)?;
                    let t = op.input(0).ok_or_else(|| internal(format!("`{}` has no input", op.name)))?;
                    seq.push(Program::DeviceToHost { src: self.buf(g, t)?, stream, tiles });
                }
                def if def.is::<RemoteLoad>() || def.is::<RemoteLoadInplace>() => {
                    let (buffer, offset) = self.remote_target(g, op)?;
                    let out = op.output(0).ok_or_else(|| internal(format!("`{}` has no output", op.name)))?;
                    seq.push(Program::RemoteLoad { buffer, offset, dst: self.buf(g, out)?, tiles });
                }
                def if def.is::<RemoteStore>() => {
                    let (buffer, offset) = self.remote_target(g, op)?;
                    let t = op.input(0).ok_or_else(|| internal(format!("`{}` has no input", op.name)))?;
                    seq.push(Program::RemoteStore { src: self.buf(g, t)?, buffer, offset, tiles });
                }
                def if def.is::<RemoteCodeLoad>() => {
                    // A graph with no function (never called, or inlined) has no code to load.
                    let target = self.l.graph_index(RemoteCodeLoadAttrs::of(op)?.graph);
                    if let Some(function) = target.and_then(|t| t.function_id()) {
                        seq.push(Program::CodeLoad { function, tiles });
                    }
                }
                _ => match sites.first() {
                    Some(first) => self.call_op(op, first, sites, &mut seq)?,
                    None => seq.push(Program::Execute(self.kernel_call(g, op)?)),
                },
            }
        }
        Ok(Program::Sequence(seq))
    }

    /// An op calling graphs through `sites` (`first` is the first of them).
    fn call_op(&self, op: &Op, first: SiteId, sites: SiteRange, seq: &mut Vec<Program>) -> Result<(), LowerError> {
        let site = &self.l.sites[first];
        let plan = &self.plans[first];
        match site.kind {
            SiteKind::Call => {
                self.copies(&plan.copy_in, seq)?;
                seq.push(Program::Call(self.function_id(site.callee)?));
                self.copies(&plan.copy_out, seq)?;
                self.copies(&plan.copy_back, seq)?;
            }
            SiteKind::Repeat => {
                let count = Some(RepeatAttrs::of(op)?.count)
                    .filter(|&c| c >= 1)
                    .ok_or_else(|| internal(format!("repeat op `{}` has no count >= 1", op.name)))?
                    as u64;
                self.copies(&plan.copy_in, seq)?;
                let mut body = vec![Program::Call(self.function_id(site.callee)?)];
                self.copies(&plan.loop_copies, &mut body)?;
                seq.push(Program::Repeat { count, body: Box::new(Program::Sequence(body)) });
                self.copies(&plan.copy_out, seq)?;
                self.copies(&plan.copy_back, seq)?;
            }
            SiteKind::IfThen | SiteKind::IfElse => {
                let cond_t = op.input(0).ok_or_else(|| internal(format!("if op `{}` has no condition", op.name)))?;
                let cond = self.buf(site.caller, cond_t)?;
                let mut branches = Vec::new();
                for s in sites.iter() {
                    let (site, plan) = (&self.l.sites[s], &self.plans[s]);
                    let mut b = Vec::new();
                    self.copies(&plan.copy_in, &mut b)?;
                    b.push(Program::Call(self.function_id(site.callee)?));
                    self.copies(&plan.copy_out, &mut b)?;
                    branches.push(Program::Sequence(b));
                }
                let else_branch = branches.pop().unwrap_or_else(Program::empty);
                let then_branch = branches.pop().unwrap_or_else(Program::empty);
                seq.push(Program::If { cond, then_branch: Box::new(then_branch), else_branch: Box::new(else_branch) });
            }
        }
        Ok(())
    }

    /// The kernel call of op `op` of graph `g`, checking the kernel contract:
    /// outputs share memory only with declared aliases.
    fn kernel_call(&self, g: GraphIndex, op: &Op) -> Result<KernelCall, LowerError> {
        let graph = self.l.graphs[g].graph;
        let arg = |(index, t): (u32, TensorId)| -> Result<Arg, LowerError> {
            Ok(Arg { index, buffer: self.buf(g, t)?, info: graph.tensor(t)?.info.clone() })
        };
        let inputs: Vec<Arg> = op.inputs().iter().map(arg).collect::<Result<_, _>>()?;
        let outputs: Vec<Arg> = op.outputs().iter().map(arg).collect::<Result<_, _>>()?;
        let aliases = op.alias_pairs();
        for (n, o) in outputs.iter().enumerate() {
            let declared = |b: BufferId| {
                aliases.iter().any(|&(i, j)| j == o.index && inputs.iter().any(|a| a.index == i && a.buffer == b))
            };
            let clash_out = outputs[..n].iter().any(|p| p.buffer == o.buffer);
            let clash_in = inputs.iter().any(|a| a.buffer == o.buffer && !declared(a.buffer));
            if clash_out || clash_in {
                return Err(internal(format!(
                    "op `{}` of graph `{}`: output {} shares buffer b{} with another argument",
                    op.name,
                    graph.name(),
                    o.index,
                    o.buffer.0
                )));
            }
        }
        Ok(KernelCall {
            def: op.def(),
            name: format!("{}/{}", graph.name(), op.name),
            attrs: op.attrs.clone(),
            inputs,
            outputs,
            weight_invariant: false,
        })
    }
}
