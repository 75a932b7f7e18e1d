//! A stable, human-readable text form of an [`Executable`] (used by snapshot tests).
//!
//! Everything is printed in id order; ids are assigned deterministically by
//! [`crate::lower()`], so the same IR always prints the same text. Names and string
//! attributes are quoted with [`popart_ir::text::quote`], as in the IR text form.

use std::fmt::{self, Write};

use popart_ir::text::quote;
use popart_ir::{StreamDirection, TileSet};

use crate::executable::*;

impl Executable {
    /// The text form (same as `to_string()`).
    pub fn dump(&self) -> String {
        self.to_string()
    }
}

fn dir(d: StreamDirection) -> &'static str {
    match d {
        StreamDirection::HostToDevice => "h2d",
        StreamDirection::DeviceToHost => "d2h",
    }
}

/// The suffix of a transfer on IO tiles (nothing for compute tiles, the default).
fn on(tiles: TileSet) -> &'static str {
    match tiles {
        TileSet::Io => " on io tiles",
        TileSet::Compute => "",
    }
}

fn args(v: &[Arg]) -> String {
    v.iter().map(|a| format!("{}: b{}", a.index, a.buffer.0)).collect::<Vec<_>>().join(", ")
}

impl fmt::Display for Executable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = &self.memory;
        writeln!(
            f,
            "executable (num_host_transfers {}, replication_factor {})",
            self.num_host_transfers, self.replication_factor
        )?;
        writeln!(
            f,
            "memory: arena {} B (planned peak), {} B without reuse, {} B permanent, {} B host-load landing, \
             alignment {}",
            m.arena_bytes, m.no_reuse_bytes, m.permanent_bytes, m.host_load_bytes, m.alignment
        )?;
        writeln!(f, "buffers:")?;
        for b in &self.buffers {
            let names = if b.tensors.is_empty() {
                "(copy temporary)".to_string()
            } else {
                b.tensors.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(", ")
            };
            let ipu = if b.ipu == 0 { String::new() } else { format!(" ipu{}", b.ipu) };
            writeln!(f, "  b{} {} {} @{}+{}{ipu}: {}", b.id.0, b.kind.short_name(), b.info, b.offset, b.size, names)?;
        }
        writeln!(f, "streams:")?;
        for s in &self.streams {
            let kind = match s.kind {
                StreamKind::Data => "data",
                StreamKind::Weight => "weight",
            };
            writeln!(f, "  s{} {} {} {} {}", s.id.0, dir(s.direction), kind, s.info, quote(&s.name))?;
        }
        if !self.remote_buffers.is_empty() {
            writeln!(f, "remote buffers:")?;
            for r in &self.remote_buffers {
                let vars: Vec<String> = self
                    .remote_weights
                    .iter()
                    .filter(|w| w.slot.buffer == r.id)
                    .map(|w| format!("[{}] {}", w.slot.entry, w.tensor.name))
                    .collect();
                let vars = if vars.is_empty() { String::new() } else { format!(": {}", vars.join(", ")) };
                writeln!(f, "  r{} {} x {} entries{vars}", r.id, r.info, r.entries)?;
            }
        }
        if self.code.iter().any(|c| c.loaded) {
            writeln!(f, "code liveness ({} timeline steps):", self.timeline_steps)?;
            for c in &self.code {
                let live = c.live.iter().map(|(a, b)| format!("{a}-{b}")).collect::<Vec<_>>().join(" ");
                if c.loaded {
                    let loads = c.loads.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(" ");
                    writeln!(f, "  f{} {}: loaded at [{loads}], live [{live}]", c.function.0, c.graph)?;
                } else {
                    writeln!(f, "  f{} {}: always live", c.function.0, c.graph)?;
                }
            }
        }
        writeln!(f, "functions:")?;
        for func in &self.functions {
            let ins = func.inputs.iter().map(|b| format!("b{}", b.0)).collect::<Vec<_>>().join(", ");
            let outs = func.outputs.iter().map(|b| format!("b{}", b.0)).collect::<Vec<_>>().join(", ");
            writeln!(f, "  f{} {}({ins}) -> ({outs}):", func.id.0, func.name)?;
            write_program(f, self, &func.body, 4)?;
        }
        writeln!(f, "programs:")?;
        for (name, p) in [
            ("init", &self.programs.init),
            ("weights_from_host", &self.programs.weights_from_host),
            ("weights_to_host", &self.programs.weights_to_host),
            ("main", &self.programs.main),
        ] {
            writeln!(f, "  {name}:")?;
            write_program(f, self, p, 4)?;
        }
        Ok(())
    }
}

fn write_program(f: &mut fmt::Formatter<'_>, exe: &Executable, p: &Program, indent: usize) -> fmt::Result {
    let pad = " ".repeat(indent);
    match p {
        Program::Sequence(v) => {
            for c in v {
                write_program(f, exe, c, indent)?;
            }
            Ok(())
        }
        Program::Execute(k) => {
            let mut attrs = String::new();
            if !k.attrs.is_empty() {
                attrs.push_str(" {");
                for (i, (key, v)) in k.attrs.iter().enumerate() {
                    if i > 0 {
                        attrs.push_str(", ");
                    }
                    let _ = write!(attrs, "{key}={v}");
                }
                attrs.push('}');
            }
            writeln!(
                f,
                "{pad}execute {}{attrs} {} ({}) -> ({})",
                k.def.op_type(),
                quote(&k.name),
                args(&k.inputs),
                args(&k.outputs)
            )
        }
        Program::Copy { src, dst, bytes } => {
            writeln!(f, "{pad}copy b{} -> b{} ({bytes} B)", src.0, dst.0)
        }
        Program::Call(id) => writeln!(f, "{pad}call f{} {}", id.0, exe.functions[id.index()].name),
        Program::Repeat { count, body } => {
            writeln!(f, "{pad}repeat {count}:")?;
            write_program(f, exe, body, indent + 2)
        }
        Program::If { cond, then_branch, else_branch } => {
            writeln!(f, "{pad}if b{}:", cond.0)?;
            writeln!(f, "{pad}  then:")?;
            write_program(f, exe, then_branch, indent + 4)?;
            writeln!(f, "{pad}  else:")?;
            write_program(f, exe, else_branch, indent + 4)
        }
        Program::HostToDevice { stream, dst, tiles } => {
            let (name, io) = (quote(&exe.stream(*stream).name), on(*tiles));
            writeln!(f, "{pad}host_to_device s{} {name} -> b{}{io}", stream.0, dst.0)
        }
        Program::DeviceToHost { src, stream, tiles } => {
            let (name, io) = (quote(&exe.stream(*stream).name), on(*tiles));
            writeln!(f, "{pad}device_to_host b{} -> s{} {name}{io}", src.0, stream.0)
        }
        Program::WriteConstant { constant } => {
            let c = &exe.constants[*constant];
            writeln!(f, "{pad}write_constant {} -> b{}", c.tensor.name, c.buffer.0)
        }
        Program::RemoteLoad { buffer, offset, dst, tiles } => {
            writeln!(f, "{pad}remote_load r{buffer}[{offset}] -> b{}{}", dst.0, on(*tiles))
        }
        Program::RemoteStore { src, buffer, offset, tiles } => {
            writeln!(f, "{pad}remote_store b{} -> r{buffer}[{offset}]{}", src.0, on(*tiles))
        }
        Program::HostToRemote { stream, buffer, entry } => {
            writeln!(f, "{pad}host_to_remote s{} {} -> r{buffer}[{entry}]", stream.0, quote(&exe.stream(*stream).name))
        }
        Program::RemoteToHost { buffer, entry, stream } => {
            writeln!(f, "{pad}remote_to_host r{buffer}[{entry}] -> s{} {}", stream.0, quote(&exe.stream(*stream).name))
        }
        Program::CodeLoad { function, tiles } => {
            let name = exe.functions.get(function.index()).map_or("?", |f| f.name.as_str());
            writeln!(f, "{pad}code_load f{} {name}{}", function.0, on(*tiles))
        }
    }
}
