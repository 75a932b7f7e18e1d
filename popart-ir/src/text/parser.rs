//! Parsing text into an IR: lines to statements, statements to graphs, tensors and ops.

use std::collections::HashMap;

use crate::{
    lookup_op, AttrValue, Attributes, DataType, Graph, GraphId, HostTensor, Ir, IrError, Placement, Result,
    StreamDirection, TensorId, TensorInfo, TensorKind, TileSet, MAIN_GRAPH_NAME,
};

use super::lexer::{perr, tokenize, Cursor, Tok};

impl Cursor {
    fn info(&mut self) -> Result<TensorInfo> {
        let d = self.word("a data type")?;
        let dtype = parse_dtype(&d).ok_or_else(|| self.err(format!("unknown data type `{d}`")))?;
        let shape = self.list('[', ']', |c| c.usize("a dimension"))?;
        let info = TensorInfo::new(dtype, shape);
        if info.checked_nbytes().is_none() {
            return Err(self.err(format!("the size of {info} overflows the maximum tensor size")));
        }
        Ok(info)
    }

    /// `place[ipu=N, tiles=compute|io]` (either key may be left out).
    fn placement(&mut self) -> Result<Placement> {
        let mut p = Placement::default();
        let items = self.list('[', ']', |c| {
            let key = c.word("`ipu` or `tiles`")?;
            c.punct('=')?;
            let v = c.word("a placement value")?;
            Ok((key, v))
        })?;
        for (key, v) in items {
            match key.as_str() {
                "ipu" => p.ipu = Some(v.parse().map_err(|_| self.err(format!("expected an IPU number, found `{v}`")))?),
                "tiles" => {
                    p.tile_set = TileSet::parse(&v)
                        .ok_or_else(|| self.err(format!("expected `compute` or `io`, found `{v}`")))?
                }
                _ => return Err(self.err(format!("unknown placement key `{key}` (expected `ipu` or `tiles`)"))),
            }
        }
        Ok(p)
    }

    /// `[INDEX=NAME, ...]`
    fn index_map(&mut self) -> Result<Vec<(u32, String)>> {
        self.list('[', ']', |c| {
            let w = c.word("an index")?;
            let i: u32 = w.parse().map_err(|_| c.err(format!("expected an index, found `{w}`")))?;
            c.punct('=')?;
            Ok((i, c.name("a tensor name")?))
        })
    }
}

fn parse_dtype(s: &str) -> Option<DataType> {
    DataType::ALL.iter().copied().find(|d| d.name() == s)
}

/// An attribute value as written: graph references are still names.
enum AttrAst {
    Value(AttrValue),
    Graph(String),
}

struct TensorAst {
    line: usize,
    name: String,
    kind: String,
    info: TensorInfo,
    data: Option<Vec<String>>,
}

struct OpAst {
    line: usize,
    name: String,
    op_type: String,
    attrs: Vec<(String, AttrAst)>,
    inputs: Vec<(u32, String)>,
    outputs: Vec<(u32, String)>,
    placement: Placement,
}

struct ConAst {
    line: usize,
    before: String,
    after: String,
    tied: bool,
}

struct RemoteVarAst {
    line: usize,
    name: String,
    buffer: usize,
    entry: usize,
}

/// `variable_settings NAME groups=[..] retrieval=MODE shard_over=K|none host INFO = [..]`.
struct SettingsAst {
    line: usize,
    name: String,
    groups: Vec<usize>,
    retrieval: String,
    shard_over: Option<usize>,
    host: TensorInfo,
    data: Vec<String>,
}

struct RemoteBufferAst {
    line: usize,
    id: usize,
    info: TensorInfo,
    entries: usize,
}

/// The parsed lines: header, remote buffers, graphs.
struct IrAst {
    num_host_transfers: usize,
    replication_factor: usize,
    remote_buffers: Vec<RemoteBufferAst>,
    graphs: Vec<GraphAst>,
}

struct GraphAst {
    line: usize,
    remote_vars: Vec<RemoteVarAst>,
    settings: Vec<SettingsAst>,
    name: String,
    inputs: Option<(usize, Vec<String>)>,
    outputs: Option<(usize, Vec<String>)>,
    tensors: Vec<TensorAst>,
    ops: Vec<OpAst>,
    cons: Vec<ConAst>,
}

fn parse_attr(c: &mut Cursor) -> Result<AttrAst> {
    let v = match c.next("an attribute value")? {
        Tok::Str(s) => AttrValue::Str(s),
        Tok::Punct('@') => return Ok(AttrAst::Graph(c.name("a graph name")?)),
        Tok::Punct('[') => {
            c.pos -= 1;
            let items = c.list('[', ']', |c| c.word("an integer"))?;
            let ints = items
                .iter()
                .map(|w| w.parse::<i64>().map_err(|_| c.err(format!("expected an integer, found `{w}`"))))
                .collect::<Result<Vec<_>>>()?;
            AttrValue::Ints(ints)
        }
        Tok::Word(w) if w == "floats" && c.at_punct('[') => {
            let items = c.list('[', ']', |c| c.word("a float"))?;
            let floats = items
                .iter()
                .map(|w| parse_f64(w).ok_or_else(|| c.err(format!("expected a float, found `{w}`"))))
                .collect::<Result<Vec<_>>>()?;
            AttrValue::Floats(floats)
        }
        Tok::Word(w) => match w.as_str() {
            "true" => AttrValue::Bool(true),
            "false" => AttrValue::Bool(false),
            _ => {
                if let Some(d) = parse_dtype(&w) {
                    AttrValue::DType(d)
                } else if let Ok(i) = w.parse::<i64>() {
                    AttrValue::Int(i)
                } else if is_integer_literal(&w) {
                    // Floats always print with a `.`, an exponent or a name
                    // (`inf`, `NaN`): digits alone are an integer, and one
                    // that overflows must not silently become a float.
                    return Err(c.err(format!("integer `{w}` does not fit int64")));
                } else if let Some(x) = parse_f64(&w) {
                    AttrValue::Float(x)
                } else {
                    return Err(c.err(format!("`{w}` is not an attribute value")));
                }
            }
        },
        other => return Err(c.err(format!("expected an attribute value, found {other}"))),
    };
    Ok(AttrAst::Value(v))
}

fn is_integer_literal(w: &str) -> bool {
    let digits = w.strip_prefix(['-', '+']).unwrap_or(w);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

fn parse_f64(w: &str) -> Option<f64> {
    if let Some(hex) = w.strip_prefix("nan:0x") {
        return u64::from_str_radix(hex, 16).ok().map(f64::from_bits).filter(|x| x.is_nan());
    }
    w.parse::<f64>().ok()
}

fn parse_f32(w: &str) -> Option<f32> {
    if let Some(hex) = w.strip_prefix("nan:0x") {
        return u32::from_str_radix(hex, 16).ok().map(f32::from_bits).filter(|x| x.is_nan());
    }
    w.parse::<f32>().ok()
}

/// Encode element words as little-endian bytes of `dtype`.
fn encode_data(line: usize, info: &TensorInfo, words: &[String]) -> Result<Vec<u8>> {
    use DataType::*;
    let nbytes = info.checked_nbytes().ok_or_else(|| perr(line, format!("the size of {info} overflows")))?;
    if Some(words.len()) != info.checked_nelms() {
        return Err(perr(line, format!("{} has {} elements but {} values are given", info, info.nelms(), words.len())));
    }
    let mut bytes = Vec::with_capacity(nbytes);
    for w in words {
        let bad = || perr(line, format!("`{w}` is not a {} value", info.dtype));
        macro_rules! int {
            ($t:ty) => {
                bytes.extend_from_slice(&w.parse::<$t>().map_err(|_| bad())?.to_le_bytes())
            };
        }
        match info.dtype {
            // Only the two values a bool has: `true`/`false`, or `1`/`0`.
            Bool => bytes.push(match w.as_str() {
                "true" | "1" => 1,
                "false" | "0" => 0,
                _ => return Err(bad()),
            }),
            Int8 => int!(i8),
            Int16 => int!(i16),
            Int32 => int!(i32),
            Int64 => int!(i64),
            Uint8 => int!(u8),
            Uint16 => int!(u16),
            Uint32 => int!(u32),
            Uint64 => int!(u64),
            Float16 => {
                let h = if let Some(hex) = w.strip_prefix("nan:0x") {
                    let h = u16::from_str_radix(hex, 16).ok().map(half::f16::from_bits).ok_or_else(bad)?;
                    if !h.is_nan() {
                        return Err(bad());
                    }
                    h
                } else {
                    half::f16::from_f32(parse_f32(w).ok_or_else(bad)?)
                };
                bytes.extend_from_slice(&h.to_le_bytes());
            }
            Float32 => bytes.extend_from_slice(&parse_f32(w).ok_or_else(bad)?.to_le_bytes()),
            Float64 => bytes.extend_from_slice(&parse_f64(w).ok_or_else(bad)?.to_le_bytes()),
            Float8_143 | Float8_152 => {
                let f = crate::float8::Float8Format::of(info.dtype).ok_or_else(bad)?;
                bytes.push(f.encode(parse_f64(w).ok_or_else(bad)?, 0, true));
            }
        }
    }
    Ok(bytes)
}

fn parse_lines(text: &str) -> Result<IrAst> {
    let mut header: Option<(usize, usize)> = None;
    let mut remote_buffers: Vec<RemoteBufferAst> = Vec::new();
    let mut graphs: Vec<GraphAst> = Vec::new();
    for (k, raw) in text.lines().enumerate() {
        let line = k + 1;
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let mut c = Cursor { line, toks: tokenize(line, trimmed)?, pos: 0 };
        let kw = c.word("a statement")?;
        if header.is_none() {
            if kw != "ir" {
                return Err(c.err(format!("expected the `ir` header line, found `{kw}`")));
            }
            let mut fields: HashMap<String, usize> = HashMap::new();
            while c.peek().is_some() {
                let key = c.word("a header field")?;
                c.punct('=')?;
                let v = c.usize("a number")?;
                if fields.insert(key.clone(), v).is_some() {
                    return Err(perr(line, format!("header field `{key}` given twice")));
                }
            }
            let mut get = |k: &str| fields.remove(k).ok_or_else(|| perr(line, format!("the header lacks `{k}`")));
            let (nht, rf) = (get("num_host_transfers")?, get("replication_factor")?);
            if nht == 0 || rf == 0 {
                return Err(perr(line, "`num_host_transfers` and `replication_factor` must be at least 1"));
            }
            header = Some((nht, rf));
            if let Some(k) = fields.keys().next() {
                return Err(perr(line, format!("unknown header field `{k}`")));
            }
            continue;
        }
        if kw == "remote_buffer" {
            if !graphs.is_empty() {
                return Err(c.err("`remote_buffer` after a graph (remote buffers come before the graphs)"));
            }
            let id = c.usize("a remote buffer id")?;
            let info = c.info()?;
            c.keyword("entries")?;
            c.punct('=')?;
            let entries = c.usize("a number of entries")?;
            c.end()?;
            remote_buffers.push(RemoteBufferAst { line, id, info, entries });
            continue;
        }
        if kw == "graph" {
            let name = c.name("a graph name")?;
            c.end()?;
            graphs.push(GraphAst {
                line,
                remote_vars: Vec::new(),
                settings: Vec::new(),
                name,
                inputs: None,
                outputs: None,
                tensors: Vec::new(),
                ops: Vec::new(),
                cons: Vec::new(),
            });
            continue;
        }
        let Some(g) = graphs.last_mut() else {
            return Err(c.err(format!("`{kw}` outside a graph (expected `graph NAME` first)")));
        };
        match kw.as_str() {
            "inputs" | "outputs" => {
                let names = c.list('[', ']', |c| c.name("a tensor name"))?;
                c.end()?;
                let slot = if kw == "inputs" { &mut g.inputs } else { &mut g.outputs };
                if slot.is_some() {
                    return Err(c.err(format!("a second `{kw}` line in graph `{}`", g.name)));
                }
                *slot = Some((line, names));
            }
            "tensor" => {
                let name = c.name("a tensor name")?;
                let kind = c.word("a tensor kind")?;
                let info = c.info()?;
                let data = if c.at_punct('=') {
                    c.pos += 1;
                    if matches!(c.peek(), Some(Tok::Word(w)) if w == "elided") {
                        return Err(c.err(format!(
                            "the data of tensor `{name}` was elided (text printed with `elide_data_over`) and cannot be parsed"
                        )));
                    }
                    Some(c.list('[', ']', |c| c.word("a value"))?)
                } else {
                    None
                };
                c.end()?;
                g.tensors.push(TensorAst { line, name, kind, info, data });
            }
            "op" => {
                let name = c.name("an op name")?;
                let op_type = c.name("an op type")?;
                let attrs = if c.at_punct('{') {
                    c.list('{', '}', |c| {
                        let key = c.name("an attribute name")?;
                        c.punct('=')?;
                        Ok((key, parse_attr(c)?))
                    })?
                } else {
                    Vec::new()
                };
                c.keyword("in")?;
                let inputs = c.index_map()?;
                c.keyword("out")?;
                let outputs = c.index_map()?;
                let placement = if matches!(c.peek(), Some(Tok::Word(w)) if w == "place") {
                    c.keyword("place")?;
                    c.placement()?
                } else {
                    Placement::default()
                };
                c.end()?;
                g.ops.push(OpAst { line, name, op_type, attrs, inputs, outputs, placement });
            }
            "topocon" => {
                let before = c.name("an op name")?;
                match c.next("`->`")? {
                    Tok::Arrow => {}
                    other => return Err(c.err(format!("expected `->`, found {other}"))),
                }
                let after = c.name("an op name")?;
                let tied = match c.peek() {
                    None => false,
                    Some(Tok::Word(w)) if w == "tied" => {
                        c.pos += 1;
                        true
                    }
                    Some(t) => return Err(c.err(format!("expected `tied` or end of line, found {t}"))),
                };
                c.end()?;
                g.cons.push(ConAst { line, before, after, tied });
            }
            "remote_variable" => {
                let name = c.name("a tensor name")?;
                c.keyword("buffer")?;
                c.punct('=')?;
                let buffer = c.usize("a remote buffer id")?;
                c.keyword("entry")?;
                c.punct('=')?;
                let entry = c.usize("an entry")?;
                c.end()?;
                g.remote_vars.push(RemoteVarAst { line, name, buffer, entry });
            }
            "variable_settings" => {
                let name = c.name("a tensor name")?;
                c.keyword("groups")?;
                c.punct('=')?;
                let groups = c.list('[', ']', |c| c.usize("a group index"))?;
                c.keyword("retrieval")?;
                c.punct('=')?;
                let retrieval = c.word("`one_per_group` or `all_replicas`")?;
                c.keyword("shard_over")?;
                c.punct('=')?;
                let shard_over = match c.word("a replica count or `none`")?.as_str() {
                    "none" => None,
                    k => {
                        Some(k.parse().map_err(|_| c.err(format!("expected a replica count or `none`, found `{k}`")))?)
                    }
                };
                c.keyword("host")?;
                let host = c.info()?;
                c.punct('=')?;
                if matches!(c.peek(), Some(Tok::Word(w)) if w == "elided") {
                    return Err(c.err(format!(
                        "the host data of variable `{name}` was elided (text printed with `elide_data_over`) and cannot be parsed"
                    )));
                }
                let data = c.list('[', ']', |c| c.word("a value"))?;
                c.end()?;
                g.settings.push(SettingsAst { line, name, groups, retrieval, shard_over, host, data });
            }
            other => return Err(c.err(format!("unknown statement `{other}`"))),
        }
    }
    let (nht, rf) = header.ok_or_else(|| perr(text.lines().count().max(1), "missing the `ir` header line"))?;
    Ok(IrAst { num_host_transfers: nht, replication_factor: rf, remote_buffers, graphs })
}

/// See [`super::parse`].
pub(super) fn parse(text: &str) -> Result<Ir> {
    let IrAst { num_host_transfers, replication_factor, remote_buffers, graphs } = parse_lines(text)?;
    let mut ir = Ir::new();
    ir.num_host_transfers = num_host_transfers;
    ir.replication_factor = replication_factor;
    for b in &remote_buffers {
        let id = ir.add_remote_buffer(b.info.clone(), b.entries).map_err(|e| perr(b.line, e.to_string()))?;
        if id.0 as usize != b.id {
            return Err(perr(b.line, format!("remote buffer {} out of order (expected id {id})", b.id)));
        }
    }
    // Graphs.
    let mut ids: Vec<GraphId> = Vec::with_capacity(graphs.len());
    for (k, g) in graphs.iter().enumerate() {
        if k == 0 {
            if g.name != MAIN_GRAPH_NAME {
                return Err(perr(g.line, format!("the first graph must be `{MAIN_GRAPH_NAME}`, found `{}`", g.name)));
            }
            ids.push(ir.main_graph_id());
        } else {
            let id = ir.create_graph(&g.name).map_err(|e| perr(g.line, e.to_string()))?;
            ids.push(id);
        }
    }
    if graphs.is_empty() {
        return Err(perr(text.lines().count().max(1), format!("no `graph {MAIN_GRAPH_NAME}`")));
    }
    // Tensors, graph inputs and outputs of every graph (ops may refer to other graphs'
    // signatures, and HostLoad/HostStore to main-graph streams).
    for (g, &gid) in graphs.iter().zip(&ids) {
        let graph = ir.graph_mut(gid)?;
        for t in &g.tensors {
            let data = |t: &TensorAst| -> Result<HostTensor> {
                let words = t
                    .data
                    .as_ref()
                    .ok_or_else(|| perr(t.line, format!("{} tensor `{}` needs `= [..]` data", t.kind, t.name)))?;
                Ok(HostTensor { info: t.info.clone(), bytes: encode_data(t.line, &t.info, words)? })
            };
            let kind = match t.kind.as_str() {
                "act" => TensorKind::ActGrad,
                "var" => TensorKind::Variable(data(t)?),
                "const" => TensorKind::Constant(data(t)?),
                "h2d" => TensorKind::Stream(StreamDirection::HostToDevice),
                "d2h" => TensorKind::Stream(StreamDirection::DeviceToHost),
                other => {
                    return Err(perr(
                        t.line,
                        format!("unknown tensor kind `{other}` (expected act, var, const, h2d or d2h)"),
                    ))
                }
            };
            if kind.data().is_none() && t.data.is_some() {
                return Err(perr(t.line, format!("{} tensor `{}` cannot have data", t.kind, t.name)));
            }
            graph.add_tensor(&t.name, t.info.clone(), kind).map_err(|e| perr(t.line, e.to_string()))?;
        }
        let lookup = |graph: &Graph, line: usize, n: &str| -> Result<TensorId> {
            graph.tensor_id(n).map_err(|e| perr(line, e.to_string()))
        };
        if let Some((line, names)) = &g.inputs {
            for n in names {
                let t = lookup(graph, *line, n)?;
                let len = graph.inputs().len();
                graph.insert_input(len, t).map_err(|e| perr(*line, e.to_string()))?;
            }
        }
        if let Some((line, names)) = &g.outputs {
            for n in names {
                let t = lookup(graph, *line, n)?;
                graph.add_output(t).map_err(|e| perr(*line, e.to_string()))?;
            }
        }
    }
    // Remote variables (main graph only).
    for (k, g) in graphs.iter().enumerate() {
        for v in &g.remote_vars {
            if k != 0 {
                return Err(perr(v.line, "`remote_variable` outside the main graph"));
            }
            let t = ir.main_graph().tensor_id(&v.name).map_err(|e| perr(v.line, e.to_string()))?;
            let buffer = u32::try_from(v.buffer).map_err(|_| perr(v.line, format!("no remote buffer {}", v.buffer)))?;
            ir.set_remote_variable(t, crate::RemoteSlot { buffer: crate::RemoteBufferId(buffer), entry: v.entry })
                .map_err(|e| perr(v.line, e.to_string()))?;
        }
        for v in &g.settings {
            if k != 0 {
                return Err(perr(v.line, "`variable_settings` outside the main graph"));
            }
            let e = |e: String| perr(v.line, e);
            let t = ir.main_graph().tensor_id(&v.name).map_err(|x| e(x.to_string()))?;
            let grouping = crate::ReplicaGrouping::from_assignment(ir.replication_factor, &v.groups)
                .map_err(|x| e(x.to_string()))?;
            let retrieval_mode = crate::RetrievalMode::parse(&v.retrieval)
                .ok_or_else(|| e(format!("expected `one_per_group` or `all_replicas`, found `{}`", v.retrieval)))?;
            let host = HostTensor { info: v.host.clone(), bytes: encode_data(v.line, &v.host, &v.data)? };
            let settings = crate::VariableSettings { grouping, retrieval_mode, shard_over: v.shard_over, host };
            ir.set_variable_settings(t, settings).map_err(|x| e(x.to_string()))?;
        }
    }
    // Ops, in printed (= creation) order.
    for (g, &gid) in graphs.iter().zip(&ids) {
        for o in &g.ops {
            let line = o.line;
            let e = |e: IrError| perr(line, e.to_string());
            let def = lookup_op(&o.op_type).map_err(e)?;
            let mut attrs = Attributes::new();
            for (key, v) in &o.attrs {
                let v = match v {
                    AttrAst::Value(v) => v.clone(),
                    AttrAst::Graph(n) => AttrValue::Graph(ir.graph_by_name(n).map_err(e)?.id()),
                };
                if attrs.get(key).is_some() {
                    return Err(perr(line, format!("attribute `{key}` given twice")));
                }
                attrs.set(key, v);
            }
            let graph = ir.graph(gid)?;
            if graph.op_by_name(&o.name).is_ok() {
                return Err(perr(line, format!("graph `{}` already has an op named `{}`", g.name, o.name)));
            }
            let resolve = |m: &[(u32, String)]| -> Result<Vec<(u32, TensorId)>> {
                m.iter().map(|(i, n)| Ok((*i, graph.tensor_id(n).map_err(e)?))).collect()
            };
            let inputs = resolve(&o.inputs)?;
            let outputs = resolve(&o.outputs)?;
            // Attribute errors stay typed (they name the op and the attribute).
            crate::op::check_attributes(def, &o.name, &attrs)?;
            let inferred = ir.infer_outputs(gid, def, &attrs, &inputs, &o.name).map_err(e)?;
            let declared: Vec<(u32, &TensorInfo)> = outputs.iter().map(|&(i, t)| (i, &graph.tensors[t].info)).collect();
            let agrees = declared.len() == inferred.len()
                && declared.iter().all(|(i, info)| inferred.get(*i as usize) == Some(*info));
            if !agrees {
                return Err(perr(
                    line,
                    format!(
                        "op `{}` declares outputs [{}] but shape inference gives [{}]",
                        o.name,
                        declared.iter().map(|(i, t)| format!("{i}: {t}")).collect::<Vec<_>>().join(", "),
                        inferred.iter().enumerate().map(|(i, t)| format!("{i}: {t}")).collect::<Vec<_>>().join(", ")
                    ),
                ));
            }
            let graph = ir.graph_mut(gid)?;
            let op = graph.add_op(def, attrs, &o.name);
            graph.set_op_placement(op, o.placement)?;
            for &(i, t) in &inputs {
                graph.connect_input(op, i, t).map_err(e)?;
            }
            for &(i, t) in &outputs {
                graph.connect_output(op, i, t).map_err(e)?;
            }
        }
        let graph = ir.graph_mut(gid)?;
        for c in &g.cons {
            // A constraint closing a cycle keeps its typed error (as the verifier
            // would report it); other failures name the line.
            let e = |e: IrError| if matches!(e, IrError::Cycle { .. }) { e } else { perr(c.line, e.to_string()) };
            let b = graph.op_by_name(&c.before).map_err(e)?.id;
            let a = graph.op_by_name(&c.after).map_err(e)?.id;
            if c.tied {
                graph.add_tied_topo_con(b, a).map_err(e)?;
            } else {
                graph.add_topo_con(b, a).map_err(e)?;
            }
        }
    }
    ir.verify()?;
    Ok(ir)
}
