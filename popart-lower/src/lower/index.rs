//! Typed dense indices of the lowering and a vector indexed by them.
//!
//! Every table of the lowering is dense: reachable graphs, tensors with a buffer,
//! alias classes, call sites and copy temporaries are numbered from 0. Each kind
//! of number has its own newtype ([`GraphIndex`], [`TensorKey`], [`ClassId`],
//! [`SiteId`], [`TempId`]) and tables are [`IndexVec`]s keyed by one of them, so
//! a site can never index the tensor table. "No value" is always an `Option`.

use std::fmt;
use std::marker::PhantomData;
use std::ops::{Index, IndexMut};

use crate::FunctionId;

/// A dense index: a `u32` newtype usable as an [`IndexVec`] key.
pub(crate) trait Idx: Copy {
    /// The index for position `i` (panics if `i` does not fit in `u32`, which a
    /// table of that many entries could not fit in memory anyway).
    fn from_index(i: usize) -> Self;
    /// The position, as a vector index.
    fn index(self) -> usize;
}

macro_rules! dense_index {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub(crate) struct $name(u32);

        impl Idx for $name {
            // More than 2^32 entries would need more than 2^32 tensors or ops
            // in memory, which no IR can hold.
            #[allow(clippy::expect_used)]
            fn from_index(i: usize) -> Self {
                $name(u32::try_from(i).expect(concat!(stringify!($name), " overflows u32")))
            }
            fn index(self) -> usize {
                self.0 as usize
            }
        }
    };
}

dense_index!(
    /// A reachable graph: its position in `Lowerer::graphs` (main is
    /// [`GraphIndex::MAIN`], the others in discovery order).
    GraphIndex
);
dense_index!(
    /// A tensor that has a buffer (every tensor of a reachable graph but streams),
    /// numbered graph by graph.
    TensorKey
);
dense_index!(
    /// An alias class (a set of tensors sharing one buffer), named by its
    /// representative [`TensorKey`] when the id was taken.
    ///
    /// Tables keyed by `ClassId` have one entry per tensor key; only the entries of
    /// current representatives are meaningful.
    ClassId
);
dense_index!(
    /// A call site: a position in `Lowerer::sites`.
    SiteId
);
dense_index!(
    /// A copy temporary (staging of a repeat's loop-carried copies).
    TempId
);

impl GraphIndex {
    /// The main graph.
    pub(crate) const MAIN: GraphIndex = GraphIndex(0);

    /// The function a subgraph lowers to (functions are numbered like the reachable
    /// graphs, without main); `None` for the main graph.
    pub(crate) fn function_id(self) -> Option<FunctionId> {
        self.0.checked_sub(1).map(FunctionId)
    }
}

impl ClassId {
    /// The class whose representative is `key`.
    pub(crate) fn of(key: TensorKey) -> Self {
        ClassId(key.0)
    }

    /// The representative when the id was taken. Later merges may elect another
    /// representative, but this key stays a member of the (grown) class, so
    /// `Classes::find(id.member())` is the class's current id.
    pub(crate) fn member(self) -> TensorKey {
        TensorKey(self.0)
    }
}

/// A `Vec<T>` indexed by `I` instead of `usize`.
pub(crate) struct IndexVec<I, T> {
    raw: Vec<T>,
    _index: PhantomData<fn(I) -> I>,
}

impl<I: Idx, T> IndexVec<I, T> {
    /// An empty vector.
    pub(crate) fn new() -> Self {
        IndexVec { raw: Vec::new(), _index: PhantomData }
    }

    /// An empty vector with room for `n` entries.
    pub(crate) fn with_capacity(n: usize) -> Self {
        IndexVec { raw: Vec::with_capacity(n), _index: PhantomData }
    }

    /// `n` copies of `value`.
    pub(crate) fn from_elem(value: T, n: usize) -> Self
    where
        T: Clone,
    {
        IndexVec { raw: vec![value; n], _index: PhantomData }
    }

    /// Number of entries.
    pub(crate) fn len(&self) -> usize {
        self.raw.len()
    }

    /// The index the next [`IndexVec::push`] returns.
    pub(crate) fn next_index(&self) -> I {
        I::from_index(self.raw.len())
    }

    /// Append `value`; returns its index.
    pub(crate) fn push(&mut self, value: T) -> I {
        let i = I::from_index(self.raw.len());
        self.raw.push(value);
        i
    }

    /// Entries in index order.
    pub(crate) fn iter(&self) -> std::slice::Iter<'_, T> {
        self.raw.iter()
    }

    /// Every index, in order.
    pub(crate) fn indices(&self) -> impl Iterator<Item = I> {
        (0..self.raw.len()).map(I::from_index)
    }

    /// (index, entry) pairs in index order.
    pub(crate) fn iter_enumerated(&self) -> impl Iterator<Item = (I, &T)> {
        self.raw.iter().enumerate().map(|(i, x)| (I::from_index(i), x))
    }

    /// (index, entry) pairs in index order.
    pub(crate) fn iter_enumerated_mut(&mut self) -> impl Iterator<Item = (I, &mut T)> {
        self.raw.iter_mut().enumerate().map(|(i, x)| (I::from_index(i), x))
    }
}

impl<I: Idx, T> Default for IndexVec<I, T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<I, T: Clone> Clone for IndexVec<I, T> {
    fn clone(&self) -> Self {
        IndexVec { raw: self.raw.clone(), _index: PhantomData }
    }
}

impl<I, T: fmt::Debug> fmt::Debug for IndexVec<I, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.raw.fmt(f)
    }
}

impl<I: Idx, T> Index<I> for IndexVec<I, T> {
    type Output = T;

    fn index(&self, i: I) -> &T {
        &self.raw[i.index()]
    }
}

impl<I: Idx, T> IndexMut<I> for IndexVec<I, T> {
    fn index_mut(&mut self, i: I) -> &mut T {
        &mut self.raw[i.index()]
    }
}

impl<I: Idx, T> FromIterator<T> for IndexVec<I, T> {
    fn from_iter<It: IntoIterator<Item = T>>(iter: It) -> Self {
        IndexVec { raw: iter.into_iter().collect(), _index: PhantomData }
    }
}

impl<'v, I: Idx, T> IntoIterator for &'v IndexVec<I, T> {
    type Item = &'v T;
    type IntoIter = std::slice::Iter<'v, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.raw.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_returns_typed_indices() {
        let mut v: IndexVec<SiteId, &str> = IndexVec::new();
        let a = v.push("a");
        let b = v.push("b");
        assert_eq!((a.index(), b.index()), (0, 1));
        assert_eq!(v[b], "b");
        assert_eq!(v.indices().collect::<Vec<_>>(), vec![a, b]);
        assert_eq!(v.next_index().index(), 2);
    }

    #[test]
    fn functions_skip_main() {
        assert_eq!(GraphIndex::MAIN.function_id(), None);
        assert_eq!(GraphIndex::from_index(3).function_id(), Some(FunctionId(2)));
    }

    #[test]
    fn class_ids_name_their_representative() {
        let k = TensorKey::from_index(7);
        assert_eq!(ClassId::of(k).member(), k);
        assert_eq!(ClassId::of(k).index(), 7);
    }
}
