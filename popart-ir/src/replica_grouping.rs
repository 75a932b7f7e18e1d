//! Replica groupings: how the `replication_factor` replicas of a program are
//! partitioned into groups, for the values of grouped variables and for the
//! groups collectives reduce over (PopXL's `ReplicaGrouping`, PopART's
//! `ReplicaGrouping` and `VariableSettings`).
//!
//! A grouping with a constant stride is given by `(stride, group_size)`: group
//! `g` holds the replicas `base(g) + i * stride` for `i < group_size`, where
//! groups fill the replicas in order. Any other partition into equal-sized
//! groups numbered by first appearance is a grouping too
//! ([`ReplicaGrouping::from_assignment`]); such a non-constant grouping can
//! hold variables but cannot be used by collectives.

use std::fmt;

/// Why a replica grouping is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplicaGroupingError {
    /// `stride` is zero, larger than the replication factor or not a factor of it.
    #[error("stride must be a factor of the number of replicas, between 1 and {num_replicas}: got {stride}")]
    BadStride {
        /// The stride given.
        stride: usize,
        /// The replication factor.
        num_replicas: usize,
    },
    /// `group_size` is zero or larger than the replication factor.
    #[error("group size must be between 1 and the number of replicas ({num_replicas}): got {group_size}")]
    BadGroupSize {
        /// The group size given.
        group_size: usize,
        /// The replication factor.
        num_replicas: usize,
    },
    /// `stride * group_size` does not divide the replication factor: the groups
    /// would not partition the replicas.
    #[error(
        "stride ({stride}) x group size ({group_size}) must divide the number of replicas ({num_replicas}) \
         so that the groups partition the replicas"
    )]
    NotAPartition {
        /// The stride.
        stride: usize,
        /// The group size.
        group_size: usize,
        /// The replication factor.
        num_replicas: usize,
    },
    /// An assignment whose length is not the replication factor.
    #[error("the assignment has {got} entries but there are {num_replicas} replicas")]
    AssignmentLength {
        /// Entries given.
        got: usize,
        /// The replication factor.
        num_replicas: usize,
    },
    /// An assignment whose groups differ in size.
    #[error("all groups must have the same size: group {group} has {size} replicas, group 0 has {first}")]
    UnequalGroups {
        /// A group whose size differs from group 0's.
        group: usize,
        /// Its size.
        size: usize,
        /// The size of group 0.
        first: usize,
    },
    /// An assignment whose group numbers are not `0, 1, ...` in order of first appearance.
    #[error("group numbers must start at 0 and increase by one in order of first appearance: replica {replica} is in group {group}, expected at most {expected}")]
    GroupOrder {
        /// The first replica whose group number is out of order.
        replica: usize,
        /// Its group.
        group: usize,
        /// The largest group number allowed there.
        expected: usize,
    },
    /// The operation needs a grouping with a constant stride.
    #[error("replica grouping {grouping} has no constant stride: it cannot be used {what}")]
    NotConst {
        /// The grouping (its assignment).
        grouping: String,
        /// What it was used for.
        what: String,
    },
    /// A grouping made for another replication factor.
    #[error("the replica grouping is for {grouping} replicas but the IR has {num_replicas}")]
    WrongReplicationFactor {
        /// The grouping's number of replicas.
        grouping: usize,
        /// The IR's replication factor.
        num_replicas: usize,
    },
}

/// A partition of `num_replicas` replicas into `num_groups` groups of
/// `group_size` replicas each. Compared by number of replicas and assignment.
///
/// ```
/// use popart_ir::ReplicaGrouping;
/// let a = |s, g| ReplicaGrouping::new(8, s, g).unwrap().assignment().to_vec();
/// assert_eq!(a(1, 2), [0, 0, 1, 1, 2, 2, 3, 3]);
/// assert_eq!(a(2, 4), [0, 1, 0, 1, 0, 1, 0, 1]);
/// assert_eq!(a(4, 2), [0, 1, 2, 3, 0, 1, 2, 3]);
/// assert_eq!(a(2, 2), [0, 1, 0, 1, 2, 3, 2, 3]);
/// let rg = ReplicaGrouping::new(8, 2, 2).unwrap();
/// assert_eq!((rg.num_groups(), rg.group_at(5), rg.replica_at(3, 1)), (4, 3, Some(7)));
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ReplicaGrouping {
    num_replicas: usize,
    /// `Some` for a constant-stride grouping.
    stride: Option<usize>,
    group_size: usize,
    num_groups: usize,
    /// Group of each replica.
    assignment: Vec<usize>,
}

impl ReplicaGrouping {
    /// The grouping with a constant `stride` and `group_size` (PopXL's
    /// `ir.replica_grouping(stride, group_size)`; a `group_size` of 1 makes the
    /// stride 1). Errors: a stride that is not a factor of `num_replicas`, a group
    /// size outside `1..=num_replicas`, or groups that do not partition the
    /// replicas (`stride * group_size` must divide `num_replicas`, as PopART requires).
    pub fn new(num_replicas: usize, stride: usize, group_size: usize) -> Result<Self, ReplicaGroupingError> {
        if stride == 0 || stride > num_replicas || !num_replicas.is_multiple_of(stride) {
            return Err(ReplicaGroupingError::BadStride { stride, num_replicas });
        }
        if group_size == 0 || group_size > num_replicas {
            return Err(ReplicaGroupingError::BadGroupSize { group_size, num_replicas });
        }
        let stride = if group_size == 1 { 1 } else { stride };
        let span = stride.checked_mul(group_size).filter(|s| num_replicas.is_multiple_of(*s));
        if span.is_none() {
            return Err(ReplicaGroupingError::NotAPartition { stride, group_size, num_replicas });
        }
        let num_groups = num_replicas / group_size;
        let assignment = (0..num_replicas).map(|r| r % stride + stride * (r / (stride * group_size))).collect();
        Ok(ReplicaGrouping { num_replicas, stride: Some(stride), group_size, num_groups, assignment })
    }

    /// The grouping of every replica in one group (PopXL's default `ir.replica_grouping()`).
    pub fn all(num_replicas: usize) -> Self {
        let n = num_replicas.max(1);
        ReplicaGrouping { num_replicas: n, stride: Some(1), group_size: n, num_groups: 1, assignment: vec![0; n] }
    }

    /// Every replica in its own group.
    pub fn none(num_replicas: usize) -> Self {
        let n = num_replicas.max(1);
        ReplicaGrouping { num_replicas: n, stride: Some(1), group_size: 1, num_groups: n, assignment: (0..n).collect() }
    }

    /// The grouping whose replica `r` is in group `assignment[r]` (PopXL's
    /// `ir.replica_grouping_from_assignments`). Groups must be equal in size and
    /// numbered `0, 1, ...` in order of first appearance. When the replicas of
    /// every group are evenly spaced by one stride the result is that constant
    /// grouping.
    ///
    /// ```
    /// use popart_ir::ReplicaGrouping;
    /// let rg = ReplicaGrouping::from_assignment(8, &[0, 0, 1, 1, 0, 0, 1, 1]).unwrap();
    /// assert!(!rg.is_const());
    /// assert_eq!(rg.transpose().assignment(), [0, 1, 0, 1, 2, 3, 2, 3]);
    /// let c = ReplicaGrouping::from_assignment(4, &[0, 1, 0, 1]).unwrap();
    /// assert_eq!((c.is_const(), c.stride(), c.group_size()), (true, Some(2), 2));
    /// ```
    pub fn from_assignment(num_replicas: usize, assignment: &[usize]) -> Result<Self, ReplicaGroupingError> {
        if assignment.len() != num_replicas || num_replicas == 0 {
            return Err(ReplicaGroupingError::AssignmentLength { got: assignment.len(), num_replicas });
        }
        let mut next = 0;
        let mut sizes: Vec<usize> = Vec::new();
        for (replica, &group) in assignment.iter().enumerate() {
            if group > next {
                return Err(ReplicaGroupingError::GroupOrder { replica, group, expected: next });
            }
            if group == next {
                next += 1;
                sizes.push(0);
            }
            sizes[group] += 1;
        }
        let first = sizes[0];
        if let Some((group, &size)) = sizes.iter().enumerate().find(|(_, &s)| s != first) {
            return Err(ReplicaGroupingError::UnequalGroups { group, size, first });
        }
        // Constant stride: every pair of consecutive members of every group is
        // the same distance apart.
        let mut strides = std::collections::BTreeSet::new();
        let mut last: Vec<Option<usize>> = vec![None; sizes.len()];
        for (r, &g) in assignment.iter().enumerate() {
            if let Some(p) = last[g] {
                strides.insert(r - p);
            }
            last[g] = Some(r);
        }
        let stride = match strides.len() {
            0 => Some(1),
            1 => strides.first().copied(),
            _ => None,
        };
        if let Some(stride) = stride {
            if let Ok(rg) = ReplicaGrouping::new(num_replicas, stride, first) {
                if rg.assignment == assignment {
                    return Ok(rg);
                }
            }
        }
        Ok(ReplicaGrouping {
            num_replicas,
            stride: None,
            group_size: first,
            num_groups: sizes.len(),
            assignment: assignment.to_vec(),
        })
    }

    /// Number of replicas partitioned.
    pub fn num_replicas(&self) -> usize {
        self.num_replicas
    }

    /// The distance between consecutive replicas of a group; `None` when not constant.
    pub fn stride(&self) -> Option<usize> {
        self.stride
    }

    /// Replicas per group.
    pub fn group_size(&self) -> usize {
        self.group_size
    }

    /// Number of groups.
    pub fn num_groups(&self) -> usize {
        self.num_groups
    }

    /// True when the grouping has a constant stride (usable by collectives).
    pub fn is_const(&self) -> bool {
        self.stride.is_some()
    }

    /// The group of each replica.
    pub fn assignment(&self) -> &[usize] {
        &self.assignment
    }

    /// The group of replica `replica` (`replica < num_replicas`, else the last group).
    pub fn group_at(&self, replica: usize) -> usize {
        self.assignment.get(replica).or(self.assignment.last()).copied().unwrap_or(0)
    }

    /// Replica `index` of group `group`, in increasing replica order; `None` out of range.
    pub fn replica_at(&self, group: usize, index: usize) -> Option<usize> {
        self.assignment.iter().enumerate().filter(|(_, &g)| g == group).nth(index).map(|(r, _)| r)
    }

    /// The replicas of `group`, in increasing order.
    pub fn members(&self, group: usize) -> Vec<usize> {
        self.assignment.iter().enumerate().filter(|(_, &g)| g == group).map(|(r, _)| r).collect()
    }

    /// The index of `replica` within its group.
    pub fn index_in_group(&self, replica: usize) -> usize {
        let g = self.group_at(replica);
        self.assignment[..replica.min(self.num_replicas)].iter().filter(|&&x| x == g).count()
    }

    /// The transpose: the `i`-th members of all groups form group `i` (PopXL's
    /// `ReplicaGrouping.transpose`).
    ///
    /// ```
    /// use popart_ir::ReplicaGrouping;
    /// let t = |s, g| ReplicaGrouping::new(4, s, g).unwrap().transpose().assignment().to_vec();
    /// assert_eq!(t(1, 4), [0, 1, 2, 3]);
    /// assert_eq!(t(2, 2), [0, 0, 1, 1]);
    /// assert_eq!(t(1, 2), [0, 1, 0, 1]);
    /// assert_eq!(t(1, 1), [0, 0, 0, 0]);
    /// ```
    pub fn transpose(&self) -> ReplicaGrouping {
        let mut assignment = vec![0; self.num_replicas];
        for g in 0..self.num_groups {
            for (i, r) in self.members(g).into_iter().enumerate() {
                assignment[r] = i;
            }
        }
        // Renumber by first appearance (the transpose of a valid grouping is a
        // valid grouping, so this cannot fail).
        let mut map: Vec<Option<usize>> = vec![None; self.group_size];
        let mut next = 0;
        for a in assignment.iter_mut() {
            let m = *map[*a].get_or_insert_with(|| {
                next += 1;
                next - 1
            });
            *a = m;
        }
        ReplicaGrouping::from_assignment(self.num_replicas, &assignment).unwrap_or_else(|_| self.clone())
    }

    /// `Ok` for a constant grouping; otherwise [`ReplicaGroupingError::NotConst`] naming `what` it was used for.
    pub fn require_const(&self, what: &str) -> Result<(usize, usize), ReplicaGroupingError> {
        match self.stride {
            Some(s) => Ok((s, self.group_size)),
            None => Err(ReplicaGroupingError::NotConst { grouping: format!("{self}"), what: what.to_string() }),
        }
    }
}

impl fmt::Display for ReplicaGrouping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.stride {
            Some(s) => write!(
                f,
                "ReplicaGrouping(num_replicas={}, stride={s}, group_size={}, num_groups={})",
                self.num_replicas, self.group_size, self.num_groups
            ),
            None => write!(f, "ReplicaGrouping(assignment={:?})", self.assignment),
        }
    }
}

impl fmt::Debug for ReplicaGrouping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Which values `get_tensor_data` returns for a grouped variable (PopXL's `retrieval_mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum RetrievalMode {
    /// One value per group (from the group's first replica): a leading
    /// `num_groups` dim when there is more than one group.
    #[default]
    OnePerGroup,
    /// One value per replica: a leading `replication_factor` dim.
    AllReplicas,
}

impl RetrievalMode {
    /// PopXL's name: `one_per_group` or `all_replicas`.
    pub fn name(self) -> &'static str {
        match self {
            RetrievalMode::OnePerGroup => "one_per_group",
            RetrievalMode::AllReplicas => "all_replicas",
        }
    }

    /// The mode named `name`.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "one_per_group" => Some(RetrievalMode::OnePerGroup),
            "all_replicas" => Some(RetrievalMode::AllReplicas),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// PopART's closed forms: `groupAt(r) = r % stride + stride * (r / (stride * group_size))`,
    /// `replicaAt(g, i) = (g / stride) * stride * group_size + g % stride + i * stride`.
    #[test]
    fn constant_groupings_match_popart_formulas() {
        for rf in [1usize, 2, 4, 6, 8, 12, 16] {
            for stride in 1..=rf {
                for gs in 1..=rf {
                    let Ok(rg) = ReplicaGrouping::new(rf, stride, gs) else { continue };
                    let s = rg.stride().unwrap();
                    for g in 0..rg.num_groups() {
                        for i in 0..gs {
                            let r = (g / s) * s * gs + g % s + i * s;
                            assert_eq!(rg.replica_at(g, i), Some(r), "rf {rf} ({stride},{gs}) g {g} i {i}");
                            assert_eq!(rg.group_at(r), g);
                            assert_eq!(rg.index_in_group(r), i);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn invalid_groupings_are_errors() {
        assert!(matches!(ReplicaGrouping::new(8, 3, 2), Err(ReplicaGroupingError::BadStride { .. })));
        assert!(matches!(ReplicaGrouping::new(8, 0, 2), Err(ReplicaGroupingError::BadStride { .. })));
        assert!(matches!(ReplicaGrouping::new(8, 1, 9), Err(ReplicaGroupingError::BadGroupSize { .. })));
        assert!(matches!(ReplicaGrouping::new(8, 2, 3), Err(ReplicaGroupingError::NotAPartition { .. })));
        assert!(matches!(ReplicaGrouping::new(8, 4, 4), Err(ReplicaGroupingError::NotAPartition { .. })));
        assert!(matches!(
            ReplicaGrouping::from_assignment(4, &[0, 0, 1]),
            Err(ReplicaGroupingError::AssignmentLength { .. })
        ));
        assert!(matches!(
            ReplicaGrouping::from_assignment(4, &[0, 0, 0, 1]),
            Err(ReplicaGroupingError::UnequalGroups { .. })
        ));
        assert!(matches!(
            ReplicaGrouping::from_assignment(4, &[1, 1, 0, 0]),
            Err(ReplicaGroupingError::GroupOrder { .. })
        ));
    }

    #[test]
    fn transposes_match_popxl_examples() {
        let rg = ReplicaGrouping::from_assignment(8, &[0, 1, 0, 1, 2, 3, 2, 3]).unwrap();
        assert_eq!(rg.stride(), Some(2));
        assert_eq!(rg.transpose().assignment(), [0, 0, 1, 1, 0, 0, 1, 1]);
        assert!(!rg.transpose().is_const());
        // Constant-stride cases agree with PopART's closed form where it exists.
        assert_eq!(ReplicaGrouping::new(8, 1, 2).unwrap().transpose(), ReplicaGrouping::new(8, 2, 4).unwrap());
        assert_eq!(ReplicaGrouping::new(8, 4, 2).unwrap().transpose(), ReplicaGrouping::new(8, 1, 4).unwrap());
        for rf in [2usize, 4, 8] {
            for stride in 1..=rf {
                for gs in 1..=rf {
                    if let Ok(rg) = ReplicaGrouping::new(rf, stride, gs) {
                        assert_eq!(rg.transpose().transpose(), rg, "rf {rf} ({stride},{gs})");
                    }
                }
            }
        }
    }
}
