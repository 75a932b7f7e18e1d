//! [`structural_diff`](super::structural_diff): the first difference between two IRs.

use crate::{AttrValue, Graph, Ir, OpId, TensorId};

use super::printer::write_attr;

/// See [`super::structural_diff`].
pub(super) fn structural_diff(a: &Ir, b: &Ir) -> Option<String> {
    if (a.num_host_transfers, a.replication_factor) != (b.num_host_transfers, b.replication_factor) {
        return Some("num_host_transfers or replication_factor differ".into());
    }
    if a.remote_buffers() != b.remote_buffers() {
        return Some("remote buffers differ".into());
    }
    let remote_vars = |ir: &Ir| {
        let g = ir.main_graph();
        let mut v: Vec<_> = ir
            .remote_variables()
            .map(|(t, s)| (g.tensors.get(t).map_or_else(String::new, |t| t.name.clone()), s.buffer, s.entry))
            .collect();
        v.sort();
        v
    };
    if remote_vars(a) != remote_vars(b) {
        return Some(format!("remote variables differ: {:?} vs {:?}", remote_vars(a), remote_vars(b)));
    }
    fn settings(ir: &Ir) -> Vec<(String, &crate::VariableSettings)> {
        let g = ir.main_graph();
        let mut v: Vec<_> = ir
            .variables_settings()
            .map(|(t, s)| (g.tensors.get(t).map_or_else(String::new, |t| t.name.clone()), s))
            .collect();
        v.sort_by(|x, y| x.0.cmp(&y.0));
        v
    }
    let (sa, sb) = (settings(a), settings(b));
    if sa.len() != sb.len() || sa.iter().zip(&sb).any(|(x, y)| x != y) {
        let names = |v: &[(String, &crate::VariableSettings)]| v.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
        let differing = sa.iter().zip(&sb).find(|(x, y)| x != y).map(|(x, _)| x.0.clone());
        return Some(match differing {
            Some(name) if sa.len() == sb.len() => format!("variable settings of `{name}` differ"),
            _ => format!("replicated variables differ: {:?} vs {:?}", names(&sa), names(&sb)),
        });
    }
    let (ga, gb): (Vec<&Graph>, Vec<&Graph>) = (a.graphs().collect(), b.graphs().collect());
    let names = |gs: &[&Graph]| gs.iter().map(|g| g.name().to_string()).collect::<Vec<_>>();
    if names(&ga) != names(&gb) {
        return Some(format!("graphs differ: {:?} vs {:?}", names(&ga), names(&gb)));
    }
    for (x, y) in ga.iter().zip(&gb) {
        if let Some(d) = graph_diff(a, x, b, y) {
            return Some(format!("graph `{}`: {d}", x.name()));
        }
    }
    None
}

fn graph_diff(ia: &Ir, a: &Graph, ib: &Ir, b: &Graph) -> Option<String> {
    let tn = |g: &Graph, t: TensorId| g.tensors[t].name.clone();
    let on = |g: &Graph, o: OpId| g.ops[o].name.clone();
    let ins = |g: &Graph| g.inputs().iter().map(|&t| tn(g, t)).collect::<Vec<_>>();
    let outs = |g: &Graph| g.outputs().iter().map(|&t| tn(g, t)).collect::<Vec<_>>();
    if ins(a) != ins(b) {
        return Some(format!("inputs {:?} vs {:?}", ins(a), ins(b)));
    }
    if outs(a) != outs(b) {
        return Some(format!("outputs {:?} vs {:?}", outs(a), outs(b)));
    }
    let (ta, tb) = (a.tensors_in_creation_order(), b.tensors_in_creation_order());
    if ta.len() != tb.len() {
        return Some(format!("{} vs {} tensors", ta.len(), tb.len()));
    }
    for (&x, &y) in ta.iter().zip(&tb) {
        let (x, y) = (&a.tensors[x], &b.tensors[y]);
        if x.name != y.name || x.info != y.info || x.kind != y.kind {
            return Some(format!(
                "tensor `{}` ({} {}) vs `{}` ({} {})",
                x.name,
                x.kind.short_name(),
                x.info,
                y.name,
                y.kind.short_name(),
                y.info
            ));
        }
        let prod = |g: &Graph, t: &crate::Tensor| t.producer.map(|p| (on(g, p.op), p.index));
        if prod(a, x) != prod(b, y) {
            return Some(format!("producer of `{}`: {:?} vs {:?}", x.name, prod(a, x), prod(b, y)));
        }
        let cons = |g: &Graph, t: &crate::Tensor| {
            let mut v: Vec<(String, u32)> = t.consumers.iter().map(|p| (on(g, p.op), p.index)).collect();
            v.sort();
            v
        };
        if cons(a, x) != cons(b, y) {
            return Some(format!("consumers of `{}`: {:?} vs {:?}", x.name, cons(a, x), cons(b, y)));
        }
    }
    let (oa, ob) = (a.ops_in_creation_order(), b.ops_in_creation_order());
    if oa.len() != ob.len() {
        return Some(format!("{} vs {} ops", oa.len(), ob.len()));
    }
    let attrs = |ir: &Ir, op: &crate::Op| -> Vec<(String, String)> {
        op.attrs
            .iter()
            .map(|(k, v)| {
                let mut s = String::new();
                write_attr(&mut s, ir, v);
                // Compare values exactly, not through their printing (NaN != NaN aside).
                let exact = match v {
                    AttrValue::Graph(_) => s.clone(),
                    other => format!("{other:?}"),
                };
                (k.to_string(), exact)
            })
            .collect()
    };
    for (&x, &y) in oa.iter().zip(&ob) {
        let (x, y) = (&a.ops[x], &b.ops[y]);
        if x.name != y.name || x.op_type() != y.op_type() {
            return Some(format!("op `{}` ({}) vs `{}` ({})", x.name, x.op_type(), y.name, y.op_type()));
        }
        if attrs(ia, x) != attrs(ib, y) {
            return Some(format!("attributes of op `{}` differ", x.name));
        }
        if x.placement != y.placement {
            return Some(format!("placement of op `{}` differs: [{}] vs [{}]", x.name, x.placement, y.placement));
        }
        let map = |g: &Graph, m: &crate::TensorIndexMap| m.iter().map(|(i, t)| (i, tn(g, t))).collect::<Vec<_>>();
        if map(a, &x.inputs) != map(b, &y.inputs) || map(a, &x.outputs) != map(b, &y.outputs) {
            return Some(format!("connections of op `{}` differ", x.name));
        }
    }
    let cons = |g: &Graph| {
        let mut v: Vec<(String, String, bool)> =
            g.topo_cons().edges().map(|(x, y, t)| (on(g, x), on(g, y), t)).collect();
        v.sort();
        v
    };
    if cons(a) != cons(b) {
        return Some(format!("topological constraints {:?} vs {:?}", cons(a), cons(b)));
    }
    None
}
