//! What an op's definition declares, checked against its tensors before any
//! buffer is planned: the memory-safety guard against custom `OpDef`s.
//!
//! Buffer sharing trusts [`OpDef::aliases`](popart_ir::OpDef::aliases): an
//! output declared to be an input's memory shares the input's buffer, and a
//! kernel reads and writes each argument's declared info through its pointer.
//! A declaration that does not fit the tensors (an alias with an output naming
//! a port the op does not have, an output larger than the memory it is
//! declared to be, one output declared the memory of two inputs, one input the
//! written or identical memory of two outputs) is refused here, naming the op,
//! rather than trusted or silently repaired. An input declared written without
//! an output (`Alias::written`) may be absent: it is written when connected.

use popart_ir::{Alias, AliasKind, Op, TensorInfo};

use super::Lowerer;
use crate::LowerError;

impl Lowerer<'_> {
    /// Check every scheduled op's alias declaration (see the module docs).
    pub(super) fn check_declarations(&self) -> Result<(), LowerError> {
        for gd in self.graphs.iter() {
            for &o in &gd.sched {
                let op = gd.graph.op(o)?;
                check_op(op, &op.aliases(), |t| gd.graph.tensor(t).map(|x| &x.info)).map_err(|reason| {
                    LowerError::Declaration {
                        graph: gd.graph.name().to_string(),
                        op: op.name.clone(),
                        op_type: op.op_type().to_string(),
                        reason,
                    }
                })?;
            }
        }
        Ok(())
    }
}

/// Why `aliases` does not fit `op`'s tensors (their infos from `info`), if it does not.
fn check_op<'a>(
    op: &Op,
    aliases: &[Alias],
    info: impl Fn(popart_ir::TensorId) -> popart_ir::Result<&'a TensorInfo>,
) -> Result<(), String> {
    let info = |t| info(t).map_err(|e| e.to_string());
    for a in aliases {
        // A written input without an output (`Alias::written`) is written when
        // connected (`AdamUpdater`'s optional step): unconnected, nothing is written.
        let Some(j) = a.output else { continue };
        let x =
            op.input(a.input).ok_or_else(|| format!("alias {a:?} names input {}, which is not connected", a.input))?;
        let y = op.output(j).ok_or_else(|| format!("alias {a:?} names output {j}, which the op does not have"))?;
        let (ix, iy) = (info(x)?, info(y)?);
        let same_bytes = matches!(a.kind, AliasKind::Modified | AliasKind::Identical | AliasKind::Copy);
        if same_bytes && ix.nbytes() != iy.nbytes() {
            return Err(format!(
                "alias {a:?} declares output {j} ({iy}, {} bytes) to hold input {}'s {} bytes ({ix})",
                iy.nbytes(),
                a.input,
                ix.nbytes()
            ));
        }
    }
    // Per output: the memory aliases declaring it (Copy is no alias).
    let mut outputs: Vec<u32> = aliases.iter().filter(|a| a.memory_pair().is_some()).filter_map(|a| a.output).collect();
    outputs.sort_unstable();
    outputs.dedup();
    for j in outputs {
        let decl: Vec<&Alias> = aliases.iter().filter(|a| a.output == Some(j) && a.memory_pair().is_some()).collect();
        if decl.len() > 1 && decl.iter().any(|a| a.kind != AliasKind::Region) {
            let ins: Vec<u32> = decl.iter().map(|a| a.input).collect();
            return Err(format!("output {j} is declared the memory of several inputs {ins:?}, not all as regions"));
        }
        // Regions: the output is made of (parts of) its inputs, so it holds no more bytes than they do.
        let mut region_bytes = 0usize;
        for a in decl.iter().filter(|a| a.kind == AliasKind::Region) {
            if let Some(x) = op.input(a.input) {
                region_bytes = region_bytes.saturating_add(info(x)?.nbytes());
            }
        }
        if let (Some(y), true) = (op.output(j), decl.iter().all(|a| a.kind == AliasKind::Region)) {
            let iy = info(y)?;
            if iy.nbytes() > region_bytes {
                return Err(format!(
                    "output {j} ({iy}, {} bytes) is declared a region of inputs holding {region_bytes} bytes",
                    iy.nbytes()
                ));
            }
        }
    }
    // Per input: written or identical memory of at most one output.
    let mut seen: Vec<u32> = Vec::new();
    for a in
        aliases.iter().filter(|a| matches!(a.kind, AliasKind::Modified | AliasKind::Identical) && a.output.is_some())
    {
        if seen.contains(&a.input) {
            return Err(format!("input {} is declared the memory of several outputs", a.input));
        }
        seen.push(a.input);
    }
    Ok(())
}
