//! Offset assignment for buffers with (possibly several) live intervals.
//!
//! Buffers are placed in order of their first live step (larger first on ties) at
//! the lowest aligned offset that does not overlap any already placed buffer
//! whose lifetime intersects theirs. Buffers whose lifetime ended before the
//! current start can never conflict again and leave the active set, so a long
//! chain of short-lived tensors is planned in near-linear time.

/// Inclusive step intervals, sorted and non-overlapping.
pub(crate) type Intervals = Vec<(u64, u64)>;

/// Sort and merge inclusive intervals (touching intervals merge too: steps are integers).
pub(crate) fn normalize(mut v: Intervals) -> Intervals {
    v.sort_unstable();
    let mut out: Intervals = Vec::with_capacity(v.len());
    for (a, b) in v {
        match out.last_mut() {
            Some((_, e)) if a <= e.saturating_add(1) => *e = (*e).max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// True if two normalized interval lists share a step.
pub(crate) fn overlaps(x: &[(u64, u64)], y: &[(u64, u64)]) -> bool {
    let (mut i, mut j) = (0, 0);
    while i < x.len() && j < y.len() {
        let (a, b) = x[i];
        let (c, d) = y[j];
        if a <= d && c <= b {
            return true;
        }
        if b < d {
            i += 1;
        } else {
            j += 1;
        }
    }
    false
}

/// Round `n` up to a multiple of `align` (a power of two).
pub(crate) fn align_up(n: usize, align: usize) -> usize {
    (n + align - 1) & !(align - 1)
}

/// Assign offsets (relative to `base`) to items of `sizes[i]` bytes live over
/// `lives[i]` (normalized, non-empty). Sizes must be multiples of `align`.
/// Returns the offsets and the end of the highest placed item.
pub(crate) fn assign_offsets(
    sizes: &[usize],
    lives: &[Intervals],
    base: usize,
) -> (Vec<usize>, usize) {
    let n = sizes.len();
    let mut order: Vec<usize> = (0..n)
        .filter(|&i| sizes[i] > 0 && !lives[i].is_empty())
        .collect();
    order.sort_by_key(|&i| (lives[i][0].0, std::cmp::Reverse(sizes[i]), i));
    let mut offsets = vec![base; n];
    let mut end = base;
    // Active items: (hull end, index).
    let mut active: Vec<(u64, usize)> = Vec::new();
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    for &i in &order {
        let start = lives[i][0].0;
        active.retain(|&(hull_end, _)| hull_end >= start);
        ranges.clear();
        for &(_, j) in &active {
            if overlaps(&lives[i], &lives[j]) {
                ranges.push((offsets[j], offsets[j] + sizes[j]));
            }
        }
        ranges.sort_unstable();
        let mut candidate = base;
        for &(a, b) in &ranges {
            if candidate + sizes[i] <= a {
                break;
            }
            candidate = candidate.max(b);
        }
        offsets[i] = candidate;
        end = end.max(candidate + sizes[i]);
        let hull_end = lives[i].last().expect("non-empty").1;
        active.push((hull_end, i));
    }
    (offsets, end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_merges_touching_and_overlapping() {
        assert_eq!(
            normalize(vec![(5, 6), (0, 2), (3, 3), (10, 12), (11, 11)]),
            vec![(0, 3), (5, 6), (10, 12)]
        );
    }

    #[test]
    fn overlap_of_interval_lists() {
        assert!(overlaps(&[(0, 2), (8, 9)], &[(9, 12)]));
        assert!(!overlaps(&[(0, 2), (8, 9)], &[(3, 7), (10, 11)]));
    }

    #[test]
    fn chain_reuses_two_slots() {
        // t_k live over [k, k+1]: each overlaps only its neighbours, two slots suffice.
        let n = 100;
        let sizes = vec![64; n];
        let lives: Vec<Intervals> = (0..n as u64).map(|k| vec![(k, k + 1)]).collect();
        let (offs, end) = assign_offsets(&sizes, &lives, 128);
        assert_eq!(end, 128 + 128);
        for k in 0..n - 1 {
            assert_ne!(offs[k], offs[k + 1]);
        }
    }

    #[test]
    fn multi_interval_items_block_both_ranges() {
        // Item 0 is live twice (two call sites); item 1 lives between them; item 2
        // overlaps the second range only.
        let sizes = vec![64, 64, 64];
        let lives = vec![vec![(0, 1), (6, 7)], vec![(2, 5)], vec![(7, 8)]];
        let (offs, end) = assign_offsets(&sizes, &lives, 0);
        assert_eq!(offs[0], 0);
        assert_eq!(offs[1], 0, "item 1 fits between item 0's lifetimes");
        assert_eq!(offs[2], 64);
        assert_eq!(end, 128);
    }

    #[test]
    fn never_overlaps_live_items_randomised() {
        // Deterministic pseudo-random items; check the invariant exhaustively.
        let mut s = 12345u64;
        let mut next = || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            s >> 33
        };
        let n = 200;
        let mut sizes = Vec::new();
        let mut lives = Vec::new();
        for _ in 0..n {
            sizes.push(64 * (1 + (next() % 4) as usize));
            let k = 1 + next() % 3;
            let v: Intervals = (0..k)
                .map(|_| {
                    let a = next() % 500;
                    (a, a + next() % 30)
                })
                .collect();
            lives.push(normalize(v));
        }
        let (offs, end) = assign_offsets(&sizes, &lives, 0);
        let no_reuse: usize = sizes.iter().sum();
        assert!(end < no_reuse);
        for i in 0..n {
            for j in i + 1..n {
                if overlaps(&lives[i], &lives[j]) {
                    let disjoint = offs[i] + sizes[i] <= offs[j] || offs[j] + sizes[j] <= offs[i];
                    assert!(disjoint, "items {i} and {j} overlap in time and memory");
                }
            }
        }
    }
}
