//! Replication on the facade: replica groupings, grouped variables and
//! replicated tensor sharding (RTS) — PopXL's `ir.replica_grouping`,
//! `variable(..., replica_grouping, retrieval_mode)`, `replica_sharded_buffer`,
//! `replica_sharded_variable` and `remote_replica_sharded_variable`.
//!
//! How replicas hold grouped and sharded values is described on
//! [`popart_ir::VariableSettings`]; a session moves them between the host value
//! (`shape_on_host`) and the replicas in `weights_from_host` /
//! `weights_to_host`.

use popart_ir::{DataType, HostTensor, VariableSettings};

pub use popart_ir::{ReplicaGrouping, ReplicaGroupingError, RetrievalMode};

use crate::context;
use crate::{HostArray, Ir, PopXlError, RemoteBuffer, Result, Tensor};

impl Ir {
    /// The grouping of the IR's replicas with a constant `stride` and
    /// `group_size` (PopXL's `ir.replica_grouping(stride=1, group_size=rf // stride)`;
    /// `None` is `replication_factor / stride`). Set the replication factor first.
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// ir.set_replication_factor(8).unwrap();
    /// assert_eq!(ir.replica_grouping(1, Some(2)).unwrap().assignment(), [0, 0, 1, 1, 2, 2, 3, 3]);
    /// assert_eq!(ir.replica_grouping(2, Some(4)).unwrap().assignment(), [0, 1, 0, 1, 0, 1, 0, 1]);
    /// assert_eq!(ir.replica_grouping(4, Some(2)).unwrap().assignment(), [0, 1, 2, 3, 0, 1, 2, 3]);
    /// assert_eq!(ir.replica_grouping(1, None).unwrap().num_groups(), 1);
    /// assert!(ir.replica_grouping(3, None).is_err());
    /// ```
    pub fn replica_grouping(&self, stride: usize, group_size: Option<usize>) -> Result<ReplicaGrouping> {
        let rf = self.replication_factor();
        let group_size = match group_size {
            Some(g) => g,
            None if stride == 0 => 0,
            None => rf / stride,
        };
        Ok(ReplicaGrouping::new(rf, stride, group_size)?)
    }

    /// The grouping whose replica `r` is in group `assignment[r]` (PopXL's
    /// `ir.replica_grouping_from_assignments`); see [`ReplicaGrouping::from_assignment`].
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// ir.set_replication_factor(4).unwrap();
    /// let rg = ir.replica_grouping_from_assignments(&[0, 1, 1, 0]).unwrap();
    /// assert!(!rg.is_const());
    /// ```
    pub fn replica_grouping_from_assignments(&self, assignment: &[usize]) -> Result<ReplicaGrouping> {
        Ok(ReplicaGrouping::from_assignment(self.replication_factor(), assignment)?)
    }
}

/// A variable with one value per group of `grouping` (PopXL's
/// `variable(data, replica_grouping=rg, retrieval_mode=...)`): with more than
/// one group, `data` has a leading `num_groups` dim and the tensor is one
/// group's value. 64-bit data is downcast as for [`crate::variable`].
///
/// ```
/// use popxl::{Ir, RetrievalMode};
/// let ir = Ir::new();
/// ir.set_replication_factor(4).unwrap();
/// let rg = ir.replica_grouping(1, Some(2)).unwrap(); // groups [0, 0, 1, 1]
/// let _g = ir.main_graph().enter();
/// let w = popxl::variable_grouped(ndarray::array![[1.0f32, 2.0], [3.0, 4.0]], "w", &rg, RetrievalMode::OnePerGroup).unwrap();
/// assert_eq!(w.shape(), &[2]);
/// assert_eq!(w.shape_on_host().unwrap(), vec![2, 2]);
/// ```
pub fn variable_grouped(
    data: impl Into<HostArray>,
    name: &str,
    grouping: &ReplicaGrouping,
    retrieval_mode: RetrievalMode,
) -> Result<Tensor> {
    let data = data.into().downcast_for(&format!("data of variable `{name}`"))?;
    let graph = context::try_current_graph().ok_or_else(|| PopXlError::NoGraphContext { what: "variable".into() })?;
    let host = data.host_tensor_for(&format!("data of variable `{name}`"))?;
    let settings = settings_for(name, grouping, retrieval_mode, None, host)?;
    let t = crate::variables::variable_in_main(&graph, replica_zero(&settings)?, name)?;
    attach_settings(&t, settings)?;
    Ok(t)
}

/// Settings for `host`, checked against the grouping: the error names the variable.
fn settings_for(
    name: &str,
    grouping: &ReplicaGrouping,
    retrieval_mode: RetrievalMode,
    shard_over: Option<usize>,
    host: HostTensor,
) -> Result<VariableSettings> {
    let ir = current_ir("variable")?;
    if grouping.num_replicas() != ir.replication_factor() {
        return Err(ReplicaGroupingError::WrongReplicationFactor {
            grouping: grouping.num_replicas(),
            num_replicas: ir.replication_factor(),
        }
        .into());
    }
    let groups = grouping.num_groups();
    if groups > 1 && host.info.shape.first() != Some(&groups) {
        return Err(PopXlError::ShapeMismatch {
            what: format!("variable `{name}`: its data"),
            expected: format!("of a shape with a leading dim of {groups} (one value per group of {grouping})"),
            got: format!("{:?}", host.info.shape),
        });
    }
    if let Some(k) = shard_over {
        check_shard_over(&format!("variable `{name}`"), grouping, k)?;
    }
    Ok(VariableSettings { grouping: grouping.clone(), retrieval_mode, shard_over, host })
}

/// `k` replicas per shard must divide the group size of `grouping`; the error names `what`.
fn check_shard_over(what: &str, grouping: &ReplicaGrouping, k: usize) -> Result<()> {
    if k == 0 || !grouping.group_size().is_multiple_of(k) {
        return Err(PopXlError::NotDivisible {
            what: format!("{what}: the sharding group size must divide the replica group size"),
            len: grouping.group_size(),
            divisor: k,
        });
    }
    Ok(())
}

/// The IR of the current graph context, or [`PopXlError::NoGraphContext`] naming `what`.
fn current_ir(what: &str) -> Result<Ir> {
    let g = context::try_current_graph().ok_or_else(|| PopXlError::NoGraphContext { what: what.to_string() })?;
    g.ir()
}

/// Replica 0's value under `settings`, as a host array.
fn replica_zero(settings: &VariableSettings) -> Result<HostArray> {
    let info = settings.replica_info();
    let mut bytes = vec![0u8; info.nbytes()];
    settings.replica_value(0, &mut bytes);
    HostArray::from_host_tensor(&HostTensor { info, bytes })
}

fn attach_settings(t: &Tensor, settings: VariableSettings) -> Result<()> {
    let graph = t.graph();
    let state = graph.state()?;
    let mut st = state.borrow_mut();
    st.building("variable")?.set_variable_settings(t.tensor_id(), settings)?;
    Ok(())
}

/// The value shape without the group dim, and the grouping to use (all replicas by default).
fn grouping_or_all(grouping: Option<&ReplicaGrouping>) -> Result<ReplicaGrouping> {
    match grouping {
        Some(g) => Ok(g.clone()),
        None => Ok(ReplicaGrouping::all(current_ir("replica_sharded_variable")?.replication_factor())),
    }
}

/// A remote buffer for replica-sharded variables of shape `shape` (including a
/// leading group dim when `grouping` has more than one group): its entries are
/// the 1-D shards, `ceil(nelms / shard_over)` elements (PopXL's
/// `replica_sharded_buffer`; `shard_over` defaults to the group size).
///
/// ```
/// let ir = popxl::Ir::new();
/// ir.set_replication_factor(4).unwrap();
/// let _g = ir.main_graph().enter();
/// let buf = popxl::replica_sharded_buffer(&[3, 3], popxl::float32, None, None, 1).unwrap();
/// assert_eq!(buf.tensor_shape(), &[3]); // 9 elements over 4 replicas
/// ```
pub fn replica_sharded_buffer(
    shape: &[usize],
    dtype: DataType,
    grouping: Option<&ReplicaGrouping>,
    shard_over: Option<usize>,
    entries: usize,
) -> Result<RemoteBuffer> {
    let rg = grouping_or_all(grouping)?;
    let k = shard_over.unwrap_or(rg.group_size());
    check_shard_over("replica_sharded_buffer", &rg, k)?;
    let value = if rg.num_groups() > 1 { shape.get(1..).unwrap_or(&[]) } else { shape };
    let nelms = popart_ir::size::checked_product(value).ok_or_else(|| PopXlError::IntegerOutOfRange {
        what: "replica_sharded_buffer: number of elements".to_string(),
        value: format!("product of {shape:?}"),
        ty: "usize",
    })?;
    crate::remote_buffer([nelms.div_ceil(k)], dtype, entries)
}

/// A remote variable sharded over replicas (PopXL's
/// `remote_replica_sharded_variable`): entry `offset` of `buf` (made by
/// [`replica_sharded_buffer`]) holds, on each replica, its shard of the
/// group's value; `weights_from_host` scatters `data` and `weights_to_host`
/// gathers it back. The replication factor must be above 1.
pub fn remote_replica_sharded_variable(
    data: impl Into<HostArray>,
    buf: &RemoteBuffer,
    offset: usize,
    name: &str,
    grouping: Option<&ReplicaGrouping>,
    retrieval_mode: RetrievalMode,
) -> Result<Tensor> {
    let ir = current_ir("remote_replica_sharded_variable")?;
    if ir.replication_factor() <= 1 {
        return Err(PopXlError::ValueOutOfRange {
            what: format!("remote_replica_sharded_variable `{name}`: the IR's replication factor"),
            expected: "above 1",
            got: ir.replication_factor().to_string(),
        });
    }
    let rg = grouping_or_all(grouping)?;
    let data = data.into().cast_as(buf.tensor_dtype(), &format!("data of variable `{name}`"), true)?;
    let host = data.host_tensor_for(&format!("data of variable `{name}`"))?;
    let nelms: usize =
        (if rg.num_groups() > 1 { &host.info.shape[1.min(host.info.shape.len())..] } else { &host.info.shape[..] })
            .iter()
            .product();
    let shard = buf.tensor_shape().iter().product::<usize>().max(1);
    let k = (1..=rg.group_size()).find(|k| rg.group_size().is_multiple_of(*k) && nelms.div_ceil(*k) == shard);
    let Some(k) = k.filter(|_| buf.tensor_shape().len() == 1) else {
        return Err(PopXlError::ShapeMismatch {
            what: format!("remote_replica_sharded_variable `{name}`: remote buffer {}", buf.id()),
            expected: format!("of shape [n] holding shards of {nelms} elements"),
            got: format!("{:?}", buf.tensor_shape()),
        });
    };
    let settings = settings_for(name, &rg, retrieval_mode, Some(k), host)?;
    let t = crate::remote_variable(replica_zero(&settings)?, buf, offset, name)?;
    attach_settings(&t, settings)?;
    Ok(t)
}

/// A remote variable with one value per group of `grouping` (PopXL's
/// `remote_variable(data, buffer, offset, replica_grouping=rg,
/// retrieval_mode=...)`): entry `offset` of `buf` holds, on each replica, its
/// group's value. With more than one group, `data` has a leading `num_groups`
/// dim and each group's value has the buffer's shape; `weights_from_host`
/// writes each replica's entry from its group's value and `weights_to_host`
/// reads each group's value back from its first member (every member with
/// [`RetrievalMode::AllReplicas`]).
///
/// ```
/// use popxl::{Ir, RetrievalMode};
/// let ir = Ir::new();
/// ir.set_replication_factor(4).unwrap();
/// let rg = ir.replica_grouping(2, Some(2)).unwrap(); // groups [0, 1, 0, 1]
/// let _g = ir.main_graph().enter();
/// let buf = popxl::remote_buffer([2], popxl::float32, 1).unwrap();
/// let data = ndarray::array![[1.0f32, 2.0], [3.0, 4.0]];
/// let w = popxl::remote_variable_grouped(data, &buf, 0, "w", &rg, RetrievalMode::OnePerGroup).unwrap();
/// assert_eq!(w.shape(), &[2]);
/// assert_eq!(w.shape_on_host().unwrap(), vec![2, 2]);
/// ```
pub fn remote_variable_grouped(
    data: impl Into<HostArray>,
    buf: &RemoteBuffer,
    offset: usize,
    name: &str,
    grouping: &ReplicaGrouping,
    retrieval_mode: RetrievalMode,
) -> Result<Tensor> {
    let data = data.into().cast_as(buf.tensor_dtype(), &format!("data of remote variable `{name}`"), true)?;
    let host = data.host_tensor_for(&format!("data of remote variable `{name}`"))?;
    let settings = settings_for(name, grouping, retrieval_mode, None, host)?;
    let t = crate::remote_variable(replica_zero(&settings)?, buf, offset, name)?;
    attach_settings(&t, settings)?;
    Ok(t)
}

/// A variable sharded over the replicas of each group (PopXL's
/// `replica_sharded_variable`): returns `(full, shard)`. `shard` is the 1-D
/// shard each replica holds (`ceil(nelms / shard_over)` elements), the tensor
/// to use in ops; `full` names the whole value for a session's
/// `get_tensor_data` / `write_variable_data` (`shape_on_host`). Here both are
/// the same variable: its device value is the shard, its host value the full
/// tensor (PopXL keeps the full value in a remote buffer it loads the shard
/// from in `weights_from_host`; the observable values are the same).
///
/// ```
/// let ir = popxl::Ir::new();
/// ir.set_replication_factor(2).unwrap();
/// let _g = ir.main_graph().enter();
/// let (full, shard) = popxl::replica_sharded_variable(vec![1.0f32, 2.0, 3.0], "w", None, None, popxl::RetrievalMode::OnePerGroup).unwrap();
/// assert_eq!(shard.shape(), &[2]);
/// assert_eq!(full.shape_on_host().unwrap(), vec![3]);
/// ```
pub fn replica_sharded_variable(
    data: impl Into<HostArray>,
    name: &str,
    grouping: Option<&ReplicaGrouping>,
    shard_over: Option<usize>,
    retrieval_mode: RetrievalMode,
) -> Result<(Tensor, Tensor)> {
    let rg = grouping_or_all(grouping)?;
    let data = data.into().downcast_for(&format!("data of variable `{name}`"))?;
    let graph = context::try_current_graph()
        .ok_or_else(|| PopXlError::NoGraphContext { what: "replica_sharded_variable".into() })?;
    let host = data.host_tensor_for(&format!("data of variable `{name}`"))?;
    let k = shard_over.unwrap_or(rg.group_size());
    let settings = settings_for(name, &rg, retrieval_mode, Some(k), host)?;
    let t = crate::variables::variable_in_main(&graph, replica_zero(&settings)?, name)?;
    attach_settings(&t, settings)?;
    Ok((t.clone(), t))
}

impl Tensor {
    /// The replica settings of a replicated variable (`None` for other tensors).
    pub fn variable_settings(&self) -> Result<Option<VariableSettings>> {
        let state = self.graph().state()?;
        let st = state.borrow();
        Ok(st.ir.variable_settings(self.tensor_id()).cloned())
    }

    /// The variable's replica grouping (PopXL's `Variable.replica_grouping`):
    /// all replicas in one group unless it was created grouped.
    pub fn replica_grouping(&self) -> Result<ReplicaGrouping> {
        let rf = self.graph().ir()?.replication_factor();
        Ok(self.variable_settings()?.map_or_else(|| ReplicaGrouping::all(rf), |s| s.grouping))
    }

    /// The shape of the host value (PopXL's `Variable.shape_on_host`): a
    /// leading `num_groups` dim for grouped variables, the full shape for
    /// sharded ones; the tensor's shape otherwise.
    pub fn shape_on_host(&self) -> Result<Vec<usize>> {
        Ok(self.variable_settings()?.map_or_else(|| self.shape().to_vec(), |s| s.host.info.shape.clone()))
    }

    /// The shape on one replica (PopXL's `Variable.shape_on_replica`): the tensor's shape.
    pub fn shape_on_replica(&self) -> Vec<usize> {
        self.shape().to_vec()
    }

    /// The variable's retrieval mode (one value per group unless set).
    pub fn retrieval_mode(&self) -> Result<RetrievalMode> {
        Ok(self.variable_settings()?.map_or(RetrievalMode::OnePerGroup, |s| s.retrieval_mode))
    }
}
