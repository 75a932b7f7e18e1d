//! The tile mapping: where each buffer's bytes and each block of code lie.
//!
//! **Rule.** Buffers are mapped in id order (variables and constants first, then
//! activations in program order). A buffer of `size` bytes is cut into
//! `ceil(size / grain_bytes)` grains, dealt round-robin over the compute tiles
//! starting at the tile after the previous buffer's last grain; so tile `t` holds
//! `grains / n` grains, plus one when it is among the first `grains % n` tiles
//! from the start (`n` compute tiles). Every grain counts as `grain_bytes` (a
//! buffer's size is a multiple of 64, so with the default grain this is exact).
//! The mapping is fixed for the whole program, as Poplar's is; activation
//! buffers that reuse arena memory over time keep their own tiles.
//!
//! A kernel runs where its largest output lives (Poplar's owner-computes
//! rule), so its code lies on that buffer's tiles too.

use popart_ir::SizeError;

/// The tiles of one buffer: `grains` grains dealt round-robin from `start`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TileSpan {
    /// First tile.
    pub start: u32,
    /// Grains.
    pub grains: u64,
}

impl TileSpan {
    /// Tiles holding at least one grain, of `n` compute tiles.
    pub fn tiles(&self, n: u32) -> u32 {
        u32::try_from(self.grains.min(u64::from(n))).unwrap_or(n)
    }

    /// Grains on tile `tile` of `n` compute tiles.
    pub fn grains_on(&self, tile: u32, n: u32) -> u64 {
        if n == 0 {
            return 0;
        }
        let n64 = u64::from(n);
        let (per, extra) = (self.grains / n64, self.grains % n64);
        let from_start = (u64::from(tile) + n64 - u64::from(self.start) % n64) % n64;
        per + u64::from(from_start < extra)
    }
}

/// The spans of buffers of the given sizes, in order (the mapping rule above).
pub(crate) fn map_buffers(sizes: impl Iterator<Item = u64>, grain: u64, n: u32) -> Vec<TileSpan> {
    let n64 = u64::from(n.max(1));
    let mut cursor = 0u64;
    sizes
        .map(|size| {
            let grains = size.div_ceil(grain.max(1));
            let span = TileSpan { start: u32::try_from(cursor).unwrap_or(0), grains };
            cursor = (cursor + grains % n64) % n64;
            span
        })
        .collect()
}

/// Bytes spread over tiles: the same amount on every tile plus contiguous
/// (wrapping) ranges of tiles holding a fixed amount each.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct TileLoad {
    /// Bytes on every tile.
    pub uniform: u64,
    /// (first tile, tiles, bytes on each).
    pub ranges: Vec<(u32, u32, u64)>,
}

impl TileLoad {
    /// Add `bytes` on each of the first `tiles` tiles from `start`.
    pub fn add_range(&mut self, start: u32, tiles: u32, bytes: u64, n: u32) {
        if tiles >= n {
            self.uniform = self.uniform.saturating_add(bytes);
        } else if tiles > 0 && bytes > 0 {
            self.ranges.push((start, tiles, bytes));
        }
    }

    /// Bytes on tile `tile` of `n`.
    pub fn on(&self, tile: u32, n: u32) -> u64 {
        let n64 = u64::from(n.max(1));
        self.ranges.iter().fold(self.uniform, |acc, &(start, tiles, bytes)| {
            let from_start = (u64::from(tile) + n64 - u64::from(start) % n64) % n64;
            if from_start < u64::from(tiles) {
                acc.saturating_add(bytes)
            } else {
                acc
            }
        })
    }

    /// Total bytes over `n` tiles (checked).
    pub fn total(&self, n: u32) -> Result<u64, SizeError> {
        let overflow = || SizeError::Overflow { what: "the code size estimate".to_string() };
        let mut total = self.uniform.checked_mul(u64::from(n)).ok_or_else(overflow)?;
        for &(_, tiles, bytes) in &self.ranges {
            total = bytes.checked_mul(u64::from(tiles)).and_then(|b| total.checked_add(b)).ok_or_else(overflow)?;
        }
        Ok(total)
    }
}

/// Live bytes per tile during the memory sweep.
pub(crate) struct TileCounter {
    n: u32,
    grain: u64,
    uniform: i128,
    per_tile: Vec<i128>,
}

impl TileCounter {
    pub fn new(n: u32, grain: u64) -> Self {
        TileCounter { n, grain, uniform: 0, per_tile: vec![0; n as usize] }
    }

    fn range(&mut self, start: u32, tiles: u32, bytes: i128) {
        let n = self.n as usize;
        let (start, tiles) = (start as usize % n.max(1), (tiles as usize).min(n));
        let first = (n - start).min(tiles);
        self.per_tile[start..start + first].iter_mut().for_each(|b| *b += bytes);
        self.per_tile[..tiles - first].iter_mut().for_each(|b| *b += bytes);
    }

    /// Add (`sign` 1) or remove (`sign` -1) a buffer's grains.
    pub fn span(&mut self, span: TileSpan, sign: i128) {
        let n64 = u64::from(self.n.max(1));
        let grain = i128::from(self.grain);
        self.uniform += sign * i128::from(span.grains / n64) * grain;
        let extra = u32::try_from(span.grains % n64).unwrap_or(0);
        self.range(span.start, extra, sign * grain);
    }

    /// Add or remove a block of code.
    pub fn load(&mut self, load: &TileLoad, sign: i128) {
        self.uniform += sign * i128::from(load.uniform);
        for &(start, tiles, bytes) in &load.ranges {
            self.range(start, tiles, sign * i128::from(bytes));
        }
    }

    /// The most loaded tile (the first of equals) and its bytes.
    pub fn max(&self) -> (u32, u64) {
        let (mut tile, mut most) = (0usize, i128::MIN);
        for (t, &b) in self.per_tile.iter().enumerate() {
            if b > most {
                (tile, most) = (t, b);
            }
        }
        let bytes = u64::try_from((most + self.uniform).max(0)).unwrap_or(u64::MAX);
        (u32::try_from(tile).unwrap_or(0), bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_dealt_round_robin_from_where_the_previous_ended() {
        let spans = map_buffers([64u64 * 3, 64 * 6, 64].into_iter(), 64, 4);
        assert_eq!(spans[0], TileSpan { start: 0, grains: 3 });
        assert_eq!(spans[1], TileSpan { start: 3, grains: 6 });
        assert_eq!(spans[2], TileSpan { start: 1, grains: 1 });
        // 6 grains from tile 3 over 4 tiles: tiles 3 and 0 get two, 1 and 2 one.
        let on: Vec<u64> = (0..4).map(|t| spans[1].grains_on(t, 4)).collect();
        assert_eq!(on, [2, 1, 1, 2]);
        let mut c = TileCounter::new(4, 64);
        c.span(spans[1], 1);
        assert_eq!(c.max(), (0, 128));
        c.span(spans[2], 1);
        c.span(spans[2], 1);
        assert_eq!(c.max(), (1, 192));
    }

    #[test]
    fn tile_loads_wrap_and_sum() {
        let mut l = TileLoad::default();
        l.add_range(3, 2, 10, 4);
        l.add_range(0, 4, 1, 4);
        assert_eq!((0..4).map(|t| l.on(t, 4)).collect::<Vec<_>>(), [11, 1, 1, 11]);
        assert_eq!(l.total(4), Ok(24));
    }
}
