//! The thread-local building context: current graph stack (`with graph:`),
//! `in_sequence` frames and name scopes.
//!
//! Every guard removes exactly the entry it pushed when dropped, so guards may
//! even be dropped out of order without corrupting the stack.

use std::cell::RefCell;
use std::collections::HashMap;
use std::marker::PhantomData;

use popart_ir::{GraphId, OpId};

use crate::{Graph, Ir, PopXlError, Result};

/// Key of a graph across IRs: (IR id, graph id).
type GraphKey = (u64, GraphId);

#[derive(Default)]
struct SeqFrame {
    token: u64,
    enabled: bool,
    /// Ops that the next op created in this frame (per graph) must follow.
    must_follow: HashMap<GraphKey, Vec<OpId>>,
    /// The frame's "sink" ops (per graph): what the op created after the frame
    /// must follow. For an enabled frame its last op, for a disabled frame all its ops.
    tail: HashMap<GraphKey, Vec<OpId>>,
}

#[derive(Default)]
struct Context {
    next_token: u64,
    graphs: Vec<(u64, Graph)>,
    sequences: Vec<SeqFrame>,
    scopes: Vec<(u64, String)>,
}

impl Context {
    fn token(&mut self) -> u64 {
        self.next_token += 1;
        self.next_token
    }
}

thread_local! {
    static CONTEXT: RefCell<Context> = RefCell::new(Context::default());
}

fn with_ctx<R>(f: impl FnOnce(&mut Context) -> R) -> R {
    CONTEXT.with(|c| f(&mut c.borrow_mut()))
}

/// Guards are tied to the thread whose context they changed.
type NotSend = PhantomData<*const ()>;

/// Guard returned by [`Graph::enter`]: the graph is the current graph until the
/// guard is dropped (Python's `with graph:`).
///
/// ```
/// let ir = popxl::Ir::new();
/// let main = ir.main_graph();
/// {
///     let _g = main.enter();
///     assert_eq!(popxl::current_graph().unwrap(), main);
/// }
/// assert!(popxl::current_graph().is_err());
/// ```
#[must_use = "the graph is current only while the guard is alive: bind it with `let _g = ...`"]
pub struct GraphContext {
    token: u64,
    _not_send: NotSend,
}

impl Drop for GraphContext {
    fn drop(&mut self) {
        let token = self.token;
        with_ctx(|c| {
            if let Some(i) = c.graphs.iter().rposition(|(t, _)| *t == token) {
                c.graphs.remove(i);
            }
        });
    }
}

pub(crate) fn enter_graph(g: &Graph) -> GraphContext {
    let token = with_ctx(|c| {
        let t = c.token();
        c.graphs.push((t, g.clone()));
        t
    });
    GraphContext { token, _not_send: PhantomData }
}

/// The innermost current graph, if any graph context is active.
pub(crate) fn try_current_graph() -> Option<Graph> {
    with_ctx(|c| c.graphs.last().map(|(_, g)| g.clone()))
}

/// The current graph (PopXL's `gcg()`): the graph of the innermost active
/// [`Graph::enter`] / [`Graph::with`] context.
///
/// ```
/// let ir = popxl::Ir::new();
/// let sub = ir.create_empty_graph("sub").unwrap();
/// ir.main_graph().with(|| {
///     assert_eq!(popxl::current_graph().unwrap().name(), "main");
///     sub.with(|| assert_eq!(popxl::current_graph().unwrap().name(), "sub"));
/// });
/// ```
pub fn current_graph() -> Result<Graph> {
    try_current_graph().ok_or_else(|| PopXlError::NoGraphContext { what: "current_graph".into() })
}

/// The main graph of the current graph's IR (PopXL's `gmg()`).
///
/// ```
/// let ir = popxl::Ir::new();
/// let sub = ir.create_empty_graph("sub").unwrap();
/// let _g = sub.enter();
/// assert_eq!(popxl::current_main_graph().unwrap(), ir.main_graph());
/// ```
pub fn current_main_graph() -> Result<Graph> {
    Ok(current_ir()?.main_graph())
}

/// The IR of the current graph (PopXL's `gir()`).
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// assert_eq!(popxl::current_ir().unwrap().id(), ir.id());
/// ```
pub fn current_ir() -> Result<Ir> {
    let g = try_current_graph().ok_or_else(|| PopXlError::NoGraphContext { what: "current_ir".into() })?;
    g.ir()
}

/// Guard returned by [`in_sequence`]; restores the previous sequencing mode when dropped.
///
/// ```
/// let _s = popxl::in_sequence(true);
/// ```
#[must_use = "sequencing applies only while the guard is alive: bind it with `let _s = ...`"]
pub struct SequenceContext {
    token: u64,
    _not_send: NotSend,
}

/// Order ops by creation (PopXL's `in_sequence`).
///
/// While the returned guard lives, every op created in a graph is constrained
/// (by a topological constraint) to run after the op created before it in that
/// graph. An `in_sequence(false)` block inside an `in_sequence(true)` block is
/// one unit: its ops run after the ops before the block and before the ops
/// after it, in any order among themselves.
///
/// ```
/// use popxl::{ops, Ir};
/// let ir = Ir::new();
/// let main = ir.main_graph();
/// let _g = main.enter();
/// let _s = popxl::in_sequence(true);
/// let a = popxl::variable(1.0f32, "a").unwrap();
/// let b = ops::relu(&a).unwrap();
/// let _c = ops::exp(&a).unwrap(); // independent of b, but ordered after it
/// ir.with_ir(|ir| {
///     let g = ir.main_graph();
///     let ops = g.ops_in_creation_order();
///     assert!(g.topo_cons().contains(ops[0], ops[1]));
/// });
/// # let _ = b;
/// ```
pub fn in_sequence(enabled: bool) -> SequenceContext {
    let token = with_ctx(|c| {
        let token = c.token();
        let must_follow = c.sequences.last().map(|p| p.must_follow.clone()).unwrap_or_default();
        c.sequences.push(SeqFrame { token, enabled, must_follow, tail: HashMap::new() });
        token
    });
    SequenceContext { token, _not_send: PhantomData }
}

impl Drop for SequenceContext {
    fn drop(&mut self) {
        let token = self.token;
        with_ctx(|c| {
            let Some(i) = c.sequences.iter().rposition(|f| f.token == token) else {
                return;
            };
            let frame = c.sequences.remove(i);
            // The parent is the frame below the removed one (if it was the innermost).
            if i == 0 || i != c.sequences.len() {
                return;
            }
            let parent = &mut c.sequences[i - 1];
            for (g, tail) in frame.tail {
                if tail.is_empty() {
                    continue;
                }
                if parent.enabled {
                    parent.must_follow.insert(g, tail.clone());
                    parent.tail.insert(g, tail);
                } else {
                    parent.tail.entry(g).or_default().extend(tail);
                }
            }
        });
    }
}

/// Record the creation of `op` in graph `(ir, graph)`; returns the ops it must follow.
pub(crate) fn on_op_created(ir: u64, graph: GraphId, op: OpId) -> Vec<OpId> {
    with_ctx(|c| {
        let Some(frame) = c.sequences.last_mut() else {
            return Vec::new();
        };
        let key = (ir, graph);
        let before = frame.must_follow.get(&key).cloned().unwrap_or_default();
        if frame.enabled {
            frame.must_follow.insert(key, vec![op]);
            frame.tail.insert(key, vec![op]);
        } else {
            frame.tail.entry(key).or_default().push(op);
        }
        before
    })
}

/// Guard returned by [`name_scope`]; leaves the scope when dropped.
///
/// ```
/// let _s = popxl::name_scope("layer0");
/// ```
#[must_use = "the scope applies only while the guard is alive: bind it with `let _s = ...`"]
pub struct NameScope {
    token: u64,
    _not_send: NotSend,
}

/// Prefix the names of tensors and ops created while the guard lives with
/// `name/` (PopXL's `name_scope`). Scopes nest: `outer/inner/x`.
///
/// ```
/// use popxl::Ir;
/// let ir = Ir::new();
/// let _g = ir.main_graph().enter();
/// let w = {
///     let _s = popxl::name_scope("layer0");
///     popxl::variable(1.0f32, "w").unwrap()
/// };
/// assert_eq!(w.name(), "layer0/w");
/// ```
pub fn name_scope(name: &str) -> NameScope {
    let token = with_ctx(|c| {
        let t = c.token();
        c.scopes.push((t, name.to_string()));
        t
    });
    NameScope { token, _not_send: PhantomData }
}

impl Drop for NameScope {
    fn drop(&mut self) {
        let token = self.token;
        with_ctx(|c| {
            if let Some(i) = c.scopes.iter().rposition(|(t, _)| *t == token) {
                c.scopes.remove(i);
            }
        });
    }
}

/// `name` with the current name-scope prefix (`a/b/name`).
pub(crate) fn scoped(name: &str) -> String {
    with_ctx(|c| {
        let mut s = String::new();
        for (_, scope) in &c.scopes {
            if !scope.is_empty() {
                s.push_str(scope);
                s.push('/');
            }
        }
        s.push_str(name);
        s
    })
}

/// The current name-scope prefix, without a trailing slash (empty outside any scope).
///
/// ```
/// let _a = popxl::name_scope("a");
/// let _b = popxl::name_scope("b");
/// assert_eq!(popxl::current_name_scope(), "a/b");
/// ```
pub fn current_name_scope() -> String {
    let s = scoped("");
    s.trim_end_matches('/').to_string()
}
