//! Graph transforms (PopXL's `popxl.transforms`): [`autodiff`] and the
//! [`GradGraphInfo`] that says how to call the gradient graph it makes.
//!
//! The transform itself is `popart_transforms::autodiff`; this module speaks in
//! [`Graph`], [`Tensor`] and [`CallSiteInfo`] handles.

use std::collections::HashMap;
use std::fmt;

use popart_ir::TensorId;
use popart_transforms::autodiff as core;

use crate::ops::CallSiteInfo;
use crate::{Graph, Ir, PopXlError, Result, Tensor};

pub use popart_transforms::autodiff::{AutodiffError, ExpectedConnectionType};

/// One input or output of a gradient graph, described by a tensor of the forward
/// graph (PopXL's `ExpectedConnection`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpectedConnection {
    fwd_tensor: Tensor,
    connection_type: ExpectedConnectionType,
}

impl ExpectedConnection {
    /// The tensor of the forward graph.
    pub fn fwd_tensor(&self) -> &Tensor {
        &self.fwd_tensor
    }

    /// Whether the gradient graph expects that tensor ([`ExpectedConnectionType::Fwd`])
    /// or its gradient ([`ExpectedConnectionType::FwdGrad`]).
    pub fn connection_type(&self) -> ExpectedConnectionType {
        self.connection_type
    }
}

/// What [`autodiff`] made for one forward graph (PopXL's `GradGraphInfo`).
///
/// Gradient graph input `k` is `expected_inputs()[k]`: first the gradients of the
/// forward outputs (`FwdGrad`, in `grads_provided` order), then forward tensors
/// (`Fwd`), each an input or output of the forward graph and so available at every
/// call site ([`GradGraphInfo::inputs_dict`]). Output `k` is `expected_outputs()[k]`,
/// the gradient of a forward input.
#[derive(Clone, PartialEq, Eq)]
pub struct GradGraphInfo {
    graph: Graph,
    forward_graph: Graph,
    info: core::GradGraphInfo,
}

impl fmt::Debug for GradGraphInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GradGraphInfo({} differentiates {})", self.graph.name(), self.forward_graph.name())
    }
}

/// What [`autodiff`] returns.
#[derive(Clone, Debug)]
pub struct AutodiffOutput {
    /// The gradient graph info of the differentiated graph.
    pub grad_info: GradGraphInfo,
    /// With `return_all_grad_graphs`: the info of every graph whose gradient graph
    /// was used (the graph itself, the graphs it calls, the infos passed in), keyed
    /// by forward graph, to pass to later `autodiff` calls. Empty otherwise.
    pub all: HashMap<Graph, GradGraphInfo>,
}

impl GradGraphInfo {
    fn wrap(ir: &Ir, info: core::GradGraphInfo) -> Self {
        GradGraphInfo { graph: ir.graph_handle(info.graph), forward_graph: ir.graph_handle(info.forward_graph), info }
    }

    /// The gradient graph.
    pub fn graph(&self) -> Graph {
        self.graph.clone()
    }

    /// The forward graph it differentiates.
    pub fn forward_graph(&self) -> Graph {
        self.forward_graph.clone()
    }

    /// The same information in terms of the IR core's ids.
    pub fn core(&self) -> &core::GradGraphInfo {
        &self.info
    }

    fn connections(&self, list: &[core::ExpectedConnection]) -> Result<Vec<ExpectedConnection>> {
        let st = self.forward_graph.state()?;
        let st = st.borrow();
        let g = st.ir.graph(self.forward_graph.id)?;
        list.iter()
            .map(|e| {
                Ok(ExpectedConnection {
                    fwd_tensor: Tensor::from_core(&self.forward_graph, g.tensor(e.fwd_tensor)?),
                    connection_type: e.connection_type,
                })
            })
            .collect()
    }

    /// One entry per gradient graph input, in order.
    pub fn expected_inputs(&self) -> Result<Vec<ExpectedConnection>> {
        self.connections(&self.info.expected_inputs)
    }

    /// One entry per gradient graph output, in order.
    pub fn expected_outputs(&self) -> Result<Vec<ExpectedConnection>> {
        self.connections(&self.info.expected_outputs)
    }

    /// Run `f` on the IR core, turning the (graph, tensor id) pairs it returns into handles.
    fn pairs(
        &self,
        f: impl FnOnce(&popart_ir::Ir) -> std::result::Result<Vec<(TensorId, TensorId)>, AutodiffError>,
        key_graph: &Graph,
        value_graph: &Graph,
    ) -> Result<Vec<(Tensor, Tensor)>> {
        let st = self.graph.state()?;
        let st = st.borrow();
        let pairs = f(&st.ir)?;
        let (kg, vg) = (st.ir.graph(key_graph.id)?, st.ir.graph(value_graph.id)?);
        pairs
            .into_iter()
            .map(|(k, v)| {
                Ok((Tensor::from_core(key_graph, kg.tensor(k)?), Tensor::from_core(value_graph, vg.tensor(v)?)))
            })
            .collect()
    }

    fn check_site(&self, site: &CallSiteInfo, called: &Graph, what: &str) -> Result<core::CallSite> {
        if site.called_graph() != *called {
            return Err(PopXlError::WrongCalledGraph {
                what: what.to_string(),
                expected: called.name().to_string(),
                got: site.called_graph().name().to_string(),
            });
        }
        Ok(core::CallSite { graph: site.graph().id, op: site.op_id() })
    }

    /// The inputs of a call of the gradient graph that come from the forward call
    /// `fwd_call_info`: `(gradient graph input, tensor of the caller)` for every
    /// `Fwd` input. Pass them as `inputs_dict` of [`crate::ops::call`]; the output
    /// gradients (the first inputs) are given positionally.
    pub fn inputs_dict(&self, fwd_call_info: &CallSiteInfo) -> Result<Vec<(Tensor, Tensor)>> {
        let site = self.check_site(fwd_call_info, &self.forward_graph, "fwd_call_info")?;
        self.pairs(|ir| self.info.inputs_dict(ir, site), &self.graph, &fwd_call_info.graph())
    }

    /// Forward graph input -> tensor of the gradient call's caller holding its
    /// gradient (`grad_call_info` is the call of the gradient graph).
    pub fn fwd_graph_ins_to_grad_parent_outs(&self, grad_call_info: &CallSiteInfo) -> Result<HashMap<Tensor, Tensor>> {
        let site = self.check_site(grad_call_info, &self.graph, "grad_call_info")?;
        let pairs = self.pairs(
            |ir| self.info.fwd_graph_ins_to_grad_parent_outs(ir, site),
            &self.forward_graph,
            &grad_call_info.graph(),
        )?;
        Ok(pairs.into_iter().collect())
    }

    /// Input of the forward call -> tensor of the gradient call's caller holding
    /// its gradient: the gradient of each forward call argument.
    pub fn fwd_parent_ins_to_grad_parent_outs(
        &self,
        fwd_call_info: &CallSiteInfo,
        grad_call_info: &CallSiteInfo,
    ) -> Result<HashMap<Tensor, Tensor>> {
        let fwd_site = self.check_site(fwd_call_info, &self.forward_graph, "fwd_call_info")?;
        let grad_site = self.check_site(grad_call_info, &self.graph, "grad_call_info")?;
        let pairs = self.pairs(
            |ir| self.info.fwd_parent_ins_to_grad_parent_outs(ir, fwd_site, grad_site),
            &fwd_call_info.graph(),
            &grad_call_info.graph(),
        )?;
        Ok(pairs.into_iter().collect())
    }
}

/// Tensor ids of `ts`, which must be tensors of `graph`.
fn ids_in(graph: &Graph, ts: &[Tensor], not_here: impl Fn(&Tensor) -> AutodiffError) -> Result<Vec<TensorId>> {
    ts.iter()
        .map(|t| if t.graph() == *graph { Ok(t.tensor_id()) } else { Err(PopXlError::Autodiff(not_here(t))) })
        .collect()
}

/// Differentiate `graph` (PopXL's `transforms.autodiff`): create its gradient graph.
///
/// - `grads_provided`: outputs of `graph` whose gradients the caller supplies, in
///   the order of the gradient graph's first inputs (`None`: every floating point output);
/// - `grads_required`: inputs of `graph` whose gradients the gradient graph returns,
///   in this order (`None`: every floating point input a provided gradient reaches);
/// - `called_graphs_grad_info`: gradient graphs already made for graphs `graph`
///   calls (from an earlier `return_all_grad_graphs` result), reused instead of made again;
/// - `return_all_grad_graphs`: also return the infos of the called graphs.
///
/// Forward intermediates the gradient graph reads become extra outputs of `graph`;
/// existing call sites get the matching outputs, so call sites made before or after
/// `autodiff` work with [`GradGraphInfo::inputs_dict`].
///
/// PopXL's Listing 10.1:
///
/// ```
/// use std::collections::HashMap;
/// use popxl::{ops, transforms, Ir, Module, Tensor};
///
/// struct Linear { w: Option<Tensor>, b: Option<Tensor> }
///
/// impl Module for Linear {
///     type Inputs = Tensor;
///     type Outputs = Tensor;
///     fn build(&mut self, x: Tensor) -> popxl::Result<Tensor> {
///         let w = popxl::graph_input([x.shape()[1], 2], popxl::float32, "W")?;
///         let b = popxl::graph_input([2], popxl::float32, "b")?;
///         let y = &x.matmul(&w)? + &b;
///         (self.w, self.b) = (Some(w), Some(b));
///         Ok(y)
///     }
/// }
///
/// let ir = Ir::new();
/// let _g = ir.main_graph().enter();
/// let input = popxl::h2d_stream([2, 2], popxl::float32, "input_stream")?;
/// let x = ops::host_load(&input, "x")?;
/// let w = popxl::variable(ndarray::array![[0.1f32, -0.2], [0.3, 0.05]], "W")?;
/// let b = popxl::variable(vec![0.2f32, -0.1], "b")?;
///
/// let mut linear = Linear { w: None, b: None };
/// let linear_graph = ir.create_graph(&mut linear, &x)?;
/// let fwd_call_info = ops::call_with_info(
///     &linear_graph,
///     &[&x],
///     &[(linear.w.as_ref().unwrap(), &w), (linear.b.as_ref().unwrap(), &b)],
/// )?;
///
/// let bwd_graph_info = transforms::autodiff(&linear_graph, None, None, &HashMap::new(), false)?.grad_info;
/// let grad_seed = popxl::constant(ndarray::Array2::<f32>::ones((2, 2)), "grad_seed")?;
/// let activations = bwd_graph_info.inputs_dict(&fwd_call_info)?;
/// let activations: Vec<(&Tensor, &Tensor)> = activations.iter().map(|(k, v)| (k, v)).collect();
/// let grads = ops::call(&bwd_graph_info.graph(), &[&grad_seed], &activations)?;
/// let (grads_x, grads_w, grads_b) = (&grads[0], &grads[1], &grads[2]);
/// assert_eq!((grads_x.shape(), grads_w.shape(), grads_b.shape()), (&[2, 2][..], &[2, 2][..], &[2][..]));
/// # Ok::<(), popxl::PopXlError>(())
/// ```
pub fn autodiff(
    graph: &Graph,
    grads_provided: Option<&[Tensor]>,
    grads_required: Option<&[Tensor]>,
    called_graphs_grad_info: &HashMap<Graph, GradGraphInfo>,
    return_all_grad_graphs: bool,
) -> Result<AutodiffOutput> {
    let ir = graph.ir()?;
    let provided = grads_provided
        .map(|ts| {
            ids_in(graph, ts, |t| AutodiffError::ProvidedNotOutput {
                graph: graph.name().to_string(),
                tensor: t.name().to_string(),
            })
        })
        .transpose()?;
    let required = grads_required
        .map(|ts| {
            ids_in(graph, ts, |t| AutodiffError::RequiredNotInput {
                graph: graph.name().to_string(),
                tensor: t.name().to_string(),
            })
        })
        .transpose()?;
    let mut infos = core::GradGraphInfos::new();
    for (fwd, info) in called_graphs_grad_info {
        if fwd.ir_id() != ir.id() || info.graph.ir_id() != ir.id() {
            return Err(PopXlError::ForeignIr { name: fwd.name().to_string(), what: "autodiff".to_string() });
        }
        infos.insert(fwd.id, info.info.clone());
    }
    let out = ir.with_ir_mut(|core_ir| {
        core::autodiff(core_ir, graph.id, provided.as_deref(), required.as_deref(), &infos, return_all_grad_graphs)
    })??;
    let all = out
        .all
        .into_values()
        .map(|info| (ir.graph_handle(info.forward_graph), GradGraphInfo::wrap(&ir, info)))
        .collect();
    Ok(AutodiffOutput { grad_info: GradGraphInfo::wrap(&ir, out.grad_info), all })
}

/// Make the host and remote transfers of the current graph adjacent in its
/// schedule where data dependencies allow (PopXL's
/// `popxl.transforms.merge_exchange()`), so the device merges each run of
/// adjacent transfers into one exchange paying one latency (see
/// `popart_transforms::merge_exchange` for the rule). Values are unchanged:
/// only topological constraints are added. Returns the number of groups of two
/// or more transfers made adjacent.
///
/// ```
/// use popxl::{ops, transforms};
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let (a, b) = (popxl::h2d_stream([4], popxl::float32, "a")?, popxl::h2d_stream([4], popxl::float32, "b")?);
/// let out = popxl::d2h_stream([4], popxl::float32, "out")?;
/// let x = ops::relu(&ops::host_load(&a, "a")?)?;
/// let y = &x + &ops::host_load(&b, "b")?;
/// ops::host_store(&out, &y)?;
/// assert_eq!(transforms::merge_exchange()?, 1); // the two host loads
/// # Ok::<(), popxl::PopXlError>(())
/// ```
pub fn merge_exchange() -> Result<usize> {
    let graph = crate::current_graph()?;
    let ir = graph.ir()?;
    let report = ir.with_ir_mut(|core| popart_transforms::merge_exchange::merge_exchange(core, graph.id))??;
    Ok(report.groups.len())
}

/// Decompose each `Sum` of more than two tensors in `graph` (autodiff's sums of
/// gradient contributions) into a chain of two-input additions in the order the
/// contributions are produced, so each can be freed once added (PopXL's
/// `popxl.transforms.decompose_sum`; see `popart_transforms::decompose_sum`).
/// Returns the number of sums decomposed.
///
/// ```
/// use popxl::{ops, transforms, Tensor};
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::variable(vec![1.0f32, 2.0], "x").unwrap();
/// // x is used three times: its gradient sums three contributions.
/// let fwd = ir.create_graph(|x: Tensor| ops::mul(&ops::mul(&x, &x).unwrap(), &x).unwrap(), &x).unwrap();
/// let grad = transforms::autodiff(&fwd, None, None, &Default::default(), false).unwrap();
/// assert_eq!(transforms::decompose_sum(&grad.grad_info.graph()).unwrap(), 1);
/// assert_eq!(transforms::decompose_sum(&grad.grad_info.graph()).unwrap(), 0);
/// ```
pub fn decompose_sum(graph: &Graph) -> Result<usize> {
    let ir = graph.ir()?;
    Ok(ir.with_ir_mut(|core| popart_transforms::decompose_sum::decompose_sum(core, graph.id))??)
}
