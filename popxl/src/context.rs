//! The thread-local building context: current graph stack (`with graph:`),
//! `in_sequence` frames and name scopes.
//!
//! Every guard removes exactly the entry it pushed when dropped, so guards may
//! even be dropped out of order without corrupting the stack.

use std::cell::RefCell;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::rc::Rc;

use popart_ir::{GraphId, OpId, Placement, TileSet};

use crate::{Graph, Ir, PopXlError, Result};

/// Key of a graph across IRs: (IR id, graph id).
type GraphKey = (u64, GraphId);

struct SeqFrame {
    token: u64,
    mode: SequenceMode,
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
    ipus: Vec<(u64, u32)>,
    io_tiles: Vec<u64>,
    hooks: Vec<HookEntry>,
}

/// A function called after each op created in a graph
/// ([`Graph::register_op_created_hook`]): the graph and the new op's id. An
/// error it returns is the error of the op function that created the op (the
/// op stays created).
pub type OpCreatedHook = Rc<dyn Fn(&Graph, OpId) -> Result<()>>;

struct HookEntry {
    handle: u64,
    graph: GraphKey,
    hook: OpCreatedHook,
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

/// The mode of an [`in_sequence`] block (PopXL's `True`, `False` and `'pass'`).
/// `bool`s convert: `in_sequence(true)` is [`SequenceMode::On`].
///
/// ```
/// use popxl::SequenceMode;
/// assert_eq!(SequenceMode::from(false), SequenceMode::Off);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SequenceMode {
    /// Each op created in the block runs after the op created before it.
    On,
    /// No order among the block's ops; inside an [`SequenceMode::On`] block the
    /// whole block is one unit of the outer sequence.
    Off,
    /// PopXL's `'pass'`: creating an op adds no constraint at all (for
    /// transforms that add their own), and the block is not a unit of an
    /// enclosing sequence. Blocks nested inside start a fresh sequence.
    Pass,
}

impl From<bool> for SequenceMode {
    fn from(enabled: bool) -> Self {
        if enabled {
            SequenceMode::On
        } else {
            SequenceMode::Off
        }
    }
}

/// Order ops by creation (PopXL's `in_sequence`).
///
/// While the returned guard lives, every op created in a graph is constrained
/// (by a topological constraint) to run after the op created before it in that
/// graph. An `in_sequence(false)` block inside an `in_sequence(true)` block is
/// one unit: its ops run after the ops before the block and before the ops
/// after it, in any order among themselves. An
/// `in_sequence(SequenceMode::Pass)` block adds no constraints (see
/// [`SequenceMode::Pass`]).
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
pub fn in_sequence(mode: impl Into<SequenceMode>) -> SequenceContext {
    let mode = mode.into();
    let token = with_ctx(|c| {
        let token = c.token();
        let must_follow = match (mode, c.sequences.last()) {
            (SequenceMode::Pass, _) | (_, None) => HashMap::new(),
            (_, Some(p)) => p.must_follow.clone(),
        };
        c.sequences.push(SeqFrame { token, mode, must_follow, tail: HashMap::new() });
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
            if parent.mode == SequenceMode::Pass {
                return;
            }
            for (g, tail) in frame.tail {
                if tail.is_empty() {
                    continue;
                }
                if parent.mode == SequenceMode::On {
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
        match frame.mode {
            SequenceMode::On => {
                frame.must_follow.insert(key, vec![op]);
                frame.tail.insert(key, vec![op]);
            }
            SequenceMode::Off => frame.tail.entry(key).or_default().push(op),
            SequenceMode::Pass => {}
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

/// Guard returned by [`ipu`]; restores the previous IPU when dropped.
///
/// ```
/// let _p = popxl::ipu(1);
/// ```
#[must_use = "the placement applies only while the guard is alive: bind it with `let _p = ...`"]
pub struct IpuContext {
    token: u64,
    _not_send: NotSend,
}

/// Place ops created while the guard lives on IPU `n` (PopXL's `ipu(n)`).
///
/// The placement is an annotation stored on each op ([`popart_ir::Placement`],
/// shown in the text IR and read back by [`crate::Tensor::ipu`]); the `cpu`
/// device runs every op on the host whatever its placement.
///
/// ```
/// use popxl::{ops, Ir};
/// let ir = Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::variable(1.0f32, "x").unwrap();
/// let y = {
///     let _p = popxl::ipu(1);
///     ops::relu(&x).unwrap()
/// };
/// assert_eq!(y.ipu().unwrap(), 1);
/// assert!(ir.to_text().contains("place[ipu=1]"));
/// ```
pub fn ipu(n: u32) -> IpuContext {
    let token = with_ctx(|c| {
        let t = c.token();
        c.ipus.push((t, n));
        t
    });
    IpuContext { token, _not_send: PhantomData }
}

impl Drop for IpuContext {
    fn drop(&mut self) {
        let token = self.token;
        with_ctx(|c| {
            if let Some(i) = c.ipus.iter().rposition(|(t, _)| *t == token) {
                c.ipus.remove(i);
            }
        });
    }
}

/// Guard returned by [`io_tiles`]; leaves the IO tiles when dropped.
///
/// ```
/// let _t = popxl::io_tiles();
/// ```
#[must_use = "the placement applies only while the guard is alive: bind it with `let _t = ...`"]
pub struct IoTilesContext {
    token: u64,
    _not_send: NotSend,
}

/// Run ops created while the guard lives on the IO tiles of the current IPU
/// (PopXL's `io_tiles()`). An annotation like [`ipu`]; see
/// [`crate::Tensor::tile_set`] and [`crate::ops::io_tile_copy`].
///
/// ```
/// use popxl::{ops, Ir, TileSet};
/// let ir = Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::variable(1.0f32, "x").unwrap();
/// let y = {
///     let _t = popxl::io_tiles();
///     ops::io_tile_copy(&x).unwrap()
/// };
/// assert_eq!(y.tile_set().unwrap(), TileSet::Io);
/// ```
pub fn io_tiles() -> IoTilesContext {
    let token = with_ctx(|c| {
        let t = c.token();
        c.io_tiles.push(t);
        t
    });
    IoTilesContext { token, _not_send: PhantomData }
}

impl Drop for IoTilesContext {
    fn drop(&mut self) {
        let token = self.token;
        with_ctx(|c| {
            if let Some(i) = c.io_tiles.iter().rposition(|t| *t == token) {
                c.io_tiles.remove(i);
            }
        });
    }
}

/// The placement of an op created now: the innermost [`ipu`] and whether an
/// [`io_tiles`] guard is alive.
pub(crate) fn current_placement() -> Placement {
    with_ctx(|c| Placement {
        ipu: c.ipus.last().map(|(_, n)| *n),
        tile_set: if c.io_tiles.is_empty() { TileSet::Compute } else { TileSet::Io },
    })
}

/// Register `hook` for ops created in graph `graph` of IR `ir`; returns its handle.
pub(crate) fn register_op_created_hook(ir: u64, graph: GraphId, hook: OpCreatedHook) -> u64 {
    with_ctx(|c| {
        let handle = c.token();
        c.hooks.push(HookEntry { handle, graph: (ir, graph), hook });
        handle
    })
}

/// Remove the hook `handle`; false if there is none.
pub(crate) fn remove_op_created_hook(handle: u64) -> bool {
    with_ctx(|c| {
        let before = c.hooks.len();
        c.hooks.retain(|h| h.handle != handle);
        c.hooks.len() != before
    })
}

/// The hooks of a graph, in registration order (cloned out of the context, so
/// a hook may itself create ops or register hooks).
pub(crate) fn op_created_hooks(ir: u64, graph: GraphId) -> Vec<OpCreatedHook> {
    with_ctx(|c| c.hooks.iter().filter(|h| h.graph == (ir, graph)).map(|h| h.hook.clone()).collect())
}
