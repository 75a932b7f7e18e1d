//! Replicated variables: the replica grouping of a main-graph variable, its
//! host value (one per group) and replicated tensor sharding (RTS).
//!
//! A variable without settings holds one value, the same on every replica.
//! With [`VariableSettings`]:
//! - each group of its [`ReplicaGrouping`] holds its own value: the host value
//!   (`shape_on_host`) has a leading `num_groups` dim when there is more than
//!   one group;
//! - with `shard_over = Some(k)`, each group's value is split over `k` of its
//!   replicas (members `i` and `i + k`, ... hold the same shard): flattened,
//!   padded with zeros to a multiple of `k`, member `i` of a group holds chunk
//!   `i % k`. The variable's tensor (what ops see on a replica) is then the
//!   1-D shard, `ceil(nelms / k)` elements.
//!
//! The tensor's own data ([`crate::TensorKind::Variable`]) is replica 0's
//! device value, so every single-replica invariant holds unchanged.

use std::collections::BTreeMap;

use crate::{HostTensor, Ir, IrError, ReplicaGrouping, Result, RetrievalMode, TensorId, TensorInfo, TensorKind};

/// How a variable is replicated: see the [module docs](self).
#[derive(Clone, Debug, PartialEq)]
pub struct VariableSettings {
    /// The groups that share a value.
    pub grouping: ReplicaGrouping,
    /// What `get_tensor_data` returns.
    pub retrieval_mode: RetrievalMode,
    /// Replicated tensor sharding: the number of replicas of a group each value is sharded over.
    pub shard_over: Option<usize>,
    /// The value on the host (`shape_on_host`).
    pub host: HostTensor,
}

impl VariableSettings {
    /// The shape of one group's value (the host shape without the group dim).
    pub fn value_shape(&self) -> &[usize] {
        let s = &self.host.info.shape;
        if self.grouping.num_groups() > 1 {
            &s[1.min(s.len())..]
        } else {
            s
        }
    }

    /// Elements of one group's value.
    pub fn value_nelms(&self) -> usize {
        self.value_shape().iter().product()
    }

    /// The info of the variable on one replica: the value's, or the 1-D shard's.
    pub fn replica_info(&self) -> TensorInfo {
        match self.shard_over {
            Some(k) => TensorInfo::new(self.host.info.dtype, [self.value_nelms().div_ceil(k.max(1))]),
            None => TensorInfo::new(self.host.info.dtype, self.value_shape().to_vec()),
        }
    }

    /// The expected host info for a group value of shape `value` (what
    /// `set_variable_settings` checks).
    pub fn host_info_for(grouping: &ReplicaGrouping, dtype: crate::DataType, value: &[usize]) -> TensorInfo {
        let mut shape = Vec::with_capacity(value.len() + 1);
        if grouping.num_groups() > 1 {
            shape.push(grouping.num_groups());
        }
        shape.extend_from_slice(value);
        TensorInfo::new(dtype, shape)
    }

    /// Which part of the host value replica `replica` holds: (byte offset in the
    /// host data, bytes available there). The replica's device value is those
    /// bytes followed by zeros up to its info's size (only the last shard is padded).
    pub fn replica_range(&self, replica: usize) -> (usize, usize) {
        let elem = self.host.info.dtype.size_bytes();
        let value_bytes = self.value_nelms() * elem;
        let group_start = self.grouping.group_at(replica) * value_bytes;
        match self.shard_over {
            None => (group_start, value_bytes),
            Some(k) => {
                let shard = self.replica_info().nbytes();
                let i = self.grouping.index_in_group(replica) % k.max(1);
                let start = (i * shard).min(value_bytes);
                (group_start + start, shard.min(value_bytes - start))
            }
        }
    }

    /// Write replica `replica`'s device value into `out` (its info's bytes).
    pub fn replica_value(&self, replica: usize, out: &mut [u8]) {
        let (start, len) = self.replica_range(replica);
        let len = len.min(out.len());
        out[..len].copy_from_slice(&self.host.bytes[start..start + len]);
        out[len..].fill(0);
    }

    /// The replicas whose device values make up the host value (for
    /// `weights_to_host`): the first member of each group, or the first
    /// `shard_over` members for sharded variables.
    pub fn is_source(&self, replica: usize) -> bool {
        let i = self.grouping.index_in_group(replica);
        i < self.shard_over.unwrap_or(1)
    }
}

/// The settings of the IR's replicated variables.
#[derive(Clone, Debug, Default)]
pub(crate) struct SettingsState {
    pub(crate) variables: BTreeMap<TensorId, VariableSettings>,
}

impl Ir {
    /// Give main-graph variable `tensor` replica settings (PopXL's
    /// `replica_grouping`, `retrieval_mode` and sharding arguments of
    /// `variable`, `remote_variable` and the RTS variables). The variable's data
    /// becomes replica 0's value.
    ///
    /// Errors ([`IrError::VariableSettings`]): `tensor` is not a main-graph variable; the
    /// grouping is for another replication factor; `shard_over` does not divide
    /// the group size; the host data is not `[num_groups,] *value` (the group
    /// dim only when there is more than one group); the variable's info is not
    /// the replica info ([`VariableSettings::replica_info`]).
    pub fn set_variable_settings(&mut self, tensor: TensorId, settings: VariableSettings) -> Result<()> {
        self.check_settings(tensor, &settings)?;
        let mut value = vec![0u8; settings.replica_info().nbytes()];
        settings.replica_value(0, &mut value);
        let info = settings.replica_info();
        let main = self.main_graph_id();
        let g = self.graph_mut(main)?;
        let name = g.name().to_string();
        let t = g
            .tensors
            .get_mut(tensor)
            .ok_or_else(|| IrError::UnknownTensor { graph: name, tensor: format!("{tensor:?}") })?;
        t.kind = TensorKind::Variable(HostTensor { info, bytes: value });
        self.settings.variables.insert(tensor, settings);
        Ok(())
    }

    fn check_settings(&self, tensor: TensorId, s: &VariableSettings) -> Result<()> {
        let t = self.main_graph().tensor(tensor)?;
        let bad = |reason: String| Err(IrError::VariableSettings { tensor: t.name.clone(), reason });
        if !matches!(t.kind, TensorKind::Variable(_)) {
            return bad("not a variable of the main graph".into());
        }
        if s.grouping.num_replicas() != self.replication_factor {
            return bad(format!(
                "its grouping is for {} replicas but replication_factor is {}",
                s.grouping.num_replicas(),
                self.replication_factor
            ));
        }
        if let Some(k) = s.shard_over {
            if k == 0 || !s.grouping.group_size().is_multiple_of(k) {
                return bad(format!("shard_over ({k}) must divide the group size ({})", s.grouping.group_size()));
            }
        }
        let host = VariableSettings::host_info_for(&s.grouping, s.host.info.dtype, s.value_shape());
        if s.host.info != host
            || s.grouping.num_groups() > 1 && s.host.info.shape.first() != Some(&s.grouping.num_groups())
        {
            return bad(format!(
                "host data {} must have a leading dim of {} groups",
                s.host.info,
                s.grouping.num_groups()
            ));
        }
        if let Err(e) = s.host.validate() {
            return bad(e.to_string());
        }
        if t.info != s.replica_info() {
            return bad(format!("its tensor is {} but each replica holds {}", t.info, s.replica_info()));
        }
        Ok(())
    }

    /// The replica settings of main-graph variable `tensor`, if any.
    pub fn variable_settings(&self, tensor: TensorId) -> Option<&VariableSettings> {
        self.settings.variables.get(&tensor)
    }

    /// Every replicated variable, in tensor-id order.
    pub fn variables_settings(&self) -> impl Iterator<Item = (TensorId, &VariableSettings)> + '_ {
        self.settings.variables.iter().map(|(&t, s)| (t, s))
    }

    /// The replicated-variable invariants (part of [`Ir::verify`]): each is a
    /// main-graph variable whose settings are consistent with the IR's
    /// replication factor, its info and its host data.
    pub(crate) fn verify_variable_settings(&self) -> Result<()> {
        for (&t, s) in &self.settings.variables {
            self.check_settings(t, s)?;
        }
        Ok(())
    }
}
