//! Alias classes: a union-find with member lists over [`TensorKey`]s.
//!
//! Tensors in one class share one buffer. The passes that merge classes (in-place
//! aliases, elided call copies, views) live in [`super::sharing`].

use super::index::{ClassId, Idx, IndexVec, TensorKey};

/// Union-find with member lists, over dense tensor keys.
pub(super) struct Classes {
    parent: IndexVec<TensorKey, TensorKey>,
    /// Members of each class, at its representative (empty elsewhere).
    members: IndexVec<ClassId, Vec<TensorKey>>,
}

impl Classes {
    /// `n` singleton classes, one per key.
    pub(super) fn new(n: usize) -> Self {
        let parent: IndexVec<TensorKey, TensorKey> = (0..n).map(TensorKey::from_index).collect();
        let members = parent.iter().map(|&k| vec![k]).collect();
        Classes { parent, members }
    }

    /// The class of `key` (union by size keeps chains logarithmic; after
    /// [`Classes::flatten`] it is one step).
    pub(super) fn find(&self, mut key: TensorKey) -> ClassId {
        while self.parent[key] != key {
            key = self.parent[key];
        }
        ClassId::of(key)
    }

    /// Merge the classes of `a` and `b`; returns the merged class.
    pub(super) fn union(&mut self, a: TensorKey, b: TensorKey) -> ClassId {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra == rb {
            return ra;
        }
        let (big, small) = if self.members[ra].len() >= self.members[rb].len() { (ra, rb) } else { (rb, ra) };
        self.parent[small.member()] = big.member();
        let moved = std::mem::take(&mut self.members[small]);
        self.members[big].extend(moved);
        big
    }

    /// Merge two classes, given by ids taken at any time (see [`ClassId::member`]).
    pub(super) fn merge(&mut self, a: ClassId, b: ClassId) -> ClassId {
        self.union(a.member(), b.member())
    }

    /// The members of class `c` (`c` must be current), in merge order.
    pub(super) fn members(&self, c: ClassId) -> &[TensorKey] {
        &self.members[c]
    }

    /// Point every key straight at its representative.
    pub(super) fn flatten(&mut self) {
        for key in self.parent.indices() {
            self.parent[key] = self.find(key).member();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(i: usize) -> TensorKey {
        TensorKey::from_index(i)
    }

    #[test]
    fn union_by_size_keeps_members() {
        let mut c = Classes::new(5);
        c.union(k(0), k(1));
        let big = c.union(k(2), k(1));
        assert_eq!(big, c.find(k(0)), "the larger class keeps its representative");
        assert_eq!(c.find(k(2)), big);
        assert_eq!(c.members(big), &[k(0), k(1), k(2)]);
        assert_ne!(c.find(k(3)), big);
        c.flatten();
        assert_eq!(c.find(k(2)), big);
    }

    #[test]
    fn stale_ids_still_merge() {
        let mut c = Classes::new(4);
        let stale = c.find(k(3));
        c.union(k(0), k(1));
        c.union(k(1), k(3)); // class of 3 joins the bigger class of 0: `stale` is no longer a representative
        let merged = c.merge(stale, c.find(k(2)));
        assert_eq!(c.members(merged).len(), 4);
    }
}
