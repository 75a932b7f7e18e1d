//! Printing an IR as text (see the [format](super)).

use std::borrow::Cow;
use std::fmt::Write as _;

use crate::{AttrValue, DataType, Graph, HostTensor, Ir, OpId, TensorId};

use super::lexer::{is_word_char, quote};
use super::TextOptions;

/// The whole text of `ir`.
pub(super) fn print_ir(ir: &Ir, options: &TextOptions) -> String {
    let mut out = String::new();
    let _ =
        writeln!(out, "ir num_host_transfers={} replication_factor={}", ir.num_host_transfers, ir.replication_factor);
    for b in ir.remote_buffers() {
        let _ = writeln!(out, "remote_buffer {} {} entries={}", b.id, b.info, b.entries);
    }
    for g in ir.graphs() {
        out.push('\n');
        write_graph(&mut out, ir, g, options);
    }
    out
}

fn write_graph(out: &mut String, ir: &Ir, g: &Graph, options: &TextOptions) {
    let tname = |t: TensorId| name(&g.tensors[t].name);
    let _ = writeln!(out, "graph {}", name(g.name()));
    let list = |ts: &[TensorId]| ts.iter().map(|&t| tname(t)).collect::<Vec<_>>().join(", ");
    let _ = writeln!(out, "  inputs [{}]", list(g.inputs()));
    let _ = writeln!(out, "  outputs [{}]", list(g.outputs()));
    for t in g.tensors_in_creation_order() {
        let t = &g.tensors[t];
        let _ = write!(out, "  tensor {} {} {}", name(&t.name), t.kind.short_name(), t.info);
        if let Some(d) = t.kind.data() {
            out.push_str(" = ");
            write_data_or_elided(out, d, options);
        }
        out.push('\n');
    }
    let ops = g.ops_in_creation_order();
    for &o in &ops {
        let op = &g.ops[o];
        let _ = write!(out, "  op {} {}", name(&op.name), name(op.op_type()));
        if !op.attrs.is_empty() {
            out.push_str(" {");
            for (k, (key, v)) in op.attrs.iter().enumerate() {
                if k > 0 {
                    out.push_str(", ");
                }
                let _ = write!(out, "{}=", name(key));
                write_attr(out, ir, v);
            }
            out.push('}');
        }
        let map = |m: &crate::TensorIndexMap| m.iter().map(|(i, t)| format!("{i}={}", tname(t))).collect::<Vec<_>>();
        let _ = write!(out, " in[{}] out[{}]", map(op.inputs()).join(", "), map(op.outputs()).join(", "));
        if !op.placement.is_default() {
            let _ = write!(out, " place[{}]", op.placement);
        }
        out.push('\n');
    }
    for (b, a, tied) in g.topo_cons().sorted_edges(|o| g.ops.get(o).map_or(u64::MAX, |op| op.seq)) {
        let oname = |o: OpId| g.ops.get(o).map_or_else(|| format!("{o:?}"), |op| name(&op.name).into_owned());
        let _ = writeln!(out, "  topocon {} -> {}{}", oname(b), oname(a), if tied { " tied" } else { "" });
    }
    if g.id() == ir.main_graph_id() {
        let mut vars: Vec<_> = ir.remote_variables().filter(|(t, _)| g.tensors.contains_key(*t)).collect();
        vars.sort_by_key(|(t, _)| g.tensors[*t].seq);
        for (t, slot) in vars {
            let _ = writeln!(out, "  remote_variable {} buffer={} entry={}", tname(t), slot.buffer, slot.entry);
        }
        let mut replicated: Vec<_> = ir.variables_settings().filter(|(t, _)| g.tensors.contains_key(*t)).collect();
        replicated.sort_by_key(|(t, _)| g.tensors[*t].seq);
        for (t, s) in replicated {
            let groups = s.grouping.assignment().iter().map(|g| g.to_string()).collect::<Vec<_>>().join(", ");
            let shard = s.shard_over.map_or_else(|| "none".to_string(), |k| k.to_string());
            let _ = write!(
                out,
                "  variable_settings {} groups=[{groups}] retrieval={} shard_over={shard} host {} = ",
                tname(t),
                s.retrieval_mode.name(),
                s.host.info
            );
            write_data_or_elided(out, &s.host, options);
            out.push('\n');
        }
    }
}

/// `d`'s values, or `elided(n)` when [`TextOptions::elide_data_over`] says so.
fn write_data_or_elided(out: &mut String, d: &HostTensor, options: &TextOptions) {
    match options.elide_data_over {
        Some(max) if d.info.nelms() > max => {
            let _ = write!(out, "elided({})", d.info.nelms());
        }
        _ => write_data(out, d),
    }
}

pub(super) fn write_attr(out: &mut String, ir: &Ir, v: &AttrValue) {
    match v {
        AttrValue::Int(i) => {
            let _ = write!(out, "{i}");
        }
        AttrValue::Float(x) => out.push_str(&fmt_f64(*x)),
        AttrValue::Ints(v) => {
            let _ = write!(out, "[{}]", v.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(", "));
        }
        AttrValue::Floats(v) => {
            let _ = write!(out, "floats[{}]", v.iter().map(|x| fmt_f64(*x)).collect::<Vec<_>>().join(", "));
        }
        AttrValue::Str(s) => out.push_str(&quote(s)),
        AttrValue::Bool(b) => {
            let _ = write!(out, "{b}");
        }
        AttrValue::DType(d) => out.push_str(d.name()),
        AttrValue::Graph(g) => match ir.graph(*g) {
            Ok(g) => {
                let _ = write!(out, "@{}", name(g.name()));
            }
            // A dangling graph id (the verifier rejects it): print something readable.
            Err(_) => {
                let _ = write!(out, "@{}", quote(&format!("{g:?}")));
            }
        },
    }
}

fn fmt_f64(x: f64) -> String {
    if x.is_nan() && x.to_bits() != f64::NAN.to_bits() {
        format!("nan:0x{:016x}", x.to_bits())
    } else {
        format!("{x:?}")
    }
}

fn fmt_f32(x: f32) -> String {
    if x.is_nan() && x.to_bits() != f32::NAN.to_bits() {
        format!("nan:0x{:08x}", x.to_bits())
    } else {
        format!("{x:?}")
    }
}

fn write_data(out: &mut String, d: &HostTensor) {
    use DataType::*;
    let sz = d.info.dtype.size_bytes();
    out.push('[');
    for (k, b) in d.bytes.chunks_exact(sz).enumerate() {
        if k > 0 {
            out.push_str(", ");
        }
        let _ = match d.info.dtype {
            Bool => match crate::tensor::le::<1>(b)[0] {
                0 => write!(out, "false"),
                1 => write!(out, "true"),
                other => write!(out, "{other}"),
            },
            Int8 => write!(out, "{}", i8::from_le_bytes(crate::tensor::le(b))),
            Int16 => write!(out, "{}", i16::from_le_bytes(crate::tensor::le(b))),
            Int32 => write!(out, "{}", i32::from_le_bytes(crate::tensor::le(b))),
            Int64 => write!(out, "{}", i64::from_le_bytes(crate::tensor::le(b))),
            Uint8 => write!(out, "{}", crate::tensor::le::<1>(b)[0]),
            Uint16 => write!(out, "{}", u16::from_le_bytes(crate::tensor::le(b))),
            Uint32 => write!(out, "{}", u32::from_le_bytes(crate::tensor::le(b))),
            Uint64 => write!(out, "{}", u64::from_le_bytes(crate::tensor::le(b))),
            Float16 => {
                let h = half::f16::from_le_bytes(crate::tensor::le(b));
                if h.is_nan() && h.to_bits() != half::f16::NAN.to_bits() {
                    write!(out, "nan:0x{:04x}", h.to_bits())
                } else {
                    // f16 -> f32 is exact, and the shortest f32 text reads back to it.
                    write!(out, "{}", fmt_f32(h.to_f32()))
                }
            }
            Float32 => write!(out, "{}", fmt_f32(f32::from_le_bytes(crate::tensor::le(b)))),
            Float64 => write!(out, "{}", fmt_f64(f64::from_le_bytes(crate::tensor::le(b)))),
            // The decoded value (exact in f32), which reads back to the same code.
            Float8_143 | Float8_152 => match crate::float8::Float8Format::of(d.info.dtype) {
                Some(f) => write!(out, "{}", fmt_f32(f.decode_f64(crate::tensor::le::<1>(b)[0]) as f32)),
                None => Ok(()),
            },
        };
    }
    out.push(']');
}

/// `s` bare if it is a word, else quoted.
fn name(s: &str) -> Cow<'_, str> {
    if !s.is_empty() && s.chars().all(is_word_char) && !s.contains("->") {
        Cow::Borrowed(s)
    } else {
        Cow::Owned(quote(s))
    }
}
