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
//!
//! **Several IPUs.** Each buffer lies on the tiles of its IPU
//! ([`crate::Buffer::ipu`]); the round-robin cursor is kept per IPU, so the
//! buffers of IPU 0 are mapped exactly as they would be alone. Tiles are
//! numbered per IPU (`(ipu, tile)`); control code is on every tile of every IPU.

use popart_ir::SizeError;

/// The tiles of one buffer: `grains` grains dealt round-robin over the tiles
/// of IPU `ipu` from `start`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TileSpan {
    /// The IPU.
    pub ipu: u32,
    /// First tile (of that IPU).
    pub start: u32,
    /// Grains.
    pub grains: u64,
}

impl TileSpan {
    /// Tiles holding at least one grain, of `n` compute tiles.
    pub fn tiles(&self, n: u32) -> u32 {
        u32::try_from(self.grains.min(u64::from(n))).unwrap_or(n)
    }

    /// Grains on tile `tile` of `n` compute tiles of the span's IPU.
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

/// The spans of buffers of the given sizes and IPUs, in order (the mapping
/// rule above; one cursor per IPU).
pub(crate) fn map_buffers(buffers: impl Iterator<Item = (u64, u32)>, grain: u64, n: u32) -> Vec<TileSpan> {
    let n64 = u64::from(n.max(1));
    let mut cursors: Vec<u64> = Vec::new();
    buffers
        .map(|(size, ipu)| {
            let grains = size.div_ceil(grain.max(1));
            let i = ipu as usize;
            if cursors.len() <= i {
                cursors.resize(i + 1, 0);
            }
            let span = TileSpan { ipu, start: u32::try_from(cursors[i]).unwrap_or(0), grains };
            cursors[i] = (cursors[i] + grains % n64) % n64;
            span
        })
        .collect()
}

/// Bytes spread over tiles: the same amount on every tile of every IPU, the
/// same amount on every tile of one IPU, and contiguous (wrapping) ranges of
/// one IPU's tiles holding a fixed amount each.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct TileLoad {
    /// Bytes on every tile of every IPU.
    pub uniform: u64,
    /// Bytes on every tile of IPU `i`, at index `i` (missing: none).
    pub ipu_uniform: Vec<u64>,
    /// (IPU, first tile, tiles, bytes on each).
    pub ranges: Vec<(u32, u32, u32, u64)>,
}

impl TileLoad {
    /// Add `bytes` on each of the first `tiles` tiles of IPU `ipu` from `start`.
    pub fn add_range(&mut self, ipu: u32, start: u32, tiles: u32, bytes: u64, n: u32) {
        if tiles >= n {
            let i = ipu as usize;
            if self.ipu_uniform.len() <= i {
                self.ipu_uniform.resize(i + 1, 0);
            }
            self.ipu_uniform[i] = self.ipu_uniform[i].saturating_add(bytes);
        } else if tiles > 0 && bytes > 0 {
            self.ranges.push((ipu, start, tiles, bytes));
        }
    }

    /// Bytes on every tile of IPU `ipu`.
    fn uniform_on(&self, ipu: u32) -> u64 {
        self.uniform.saturating_add(self.ipu_uniform.get(ipu as usize).copied().unwrap_or(0))
    }

    /// Bytes on tile `tile` of IPU `ipu` (`n` tiles per IPU).
    pub fn on(&self, ipu: u32, tile: u32, n: u32) -> u64 {
        let n64 = u64::from(n.max(1));
        self.ranges.iter().filter(|r| r.0 == ipu).fold(self.uniform_on(ipu), |acc, &(_, start, tiles, bytes)| {
            let from_start = (u64::from(tile) + n64 - u64::from(start) % n64) % n64;
            if from_start < u64::from(tiles) {
                acc.saturating_add(bytes)
            } else {
                acc
            }
        })
    }

    /// Total bytes over the `n` tiles of IPU `ipu` (checked).
    pub fn total_on(&self, ipu: u32, n: u32) -> Result<u64, SizeError> {
        let overflow = || SizeError::Overflow { what: "the code size estimate".to_string() };
        let mut total = self.uniform_on(ipu).checked_mul(u64::from(n)).ok_or_else(overflow)?;
        for &(_, _, tiles, bytes) in self.ranges.iter().filter(|r| r.0 == ipu) {
            total = bytes.checked_mul(u64::from(tiles)).and_then(|b| total.checked_add(b)).ok_or_else(overflow)?;
        }
        Ok(total)
    }

    /// Total bytes over `ipus` IPUs of `n` tiles (checked).
    pub fn total(&self, n: u32, ipus: u32) -> Result<u64, SizeError> {
        let overflow = || SizeError::Overflow { what: "the code size estimate".to_string() };
        (0..ipus).try_fold(0u64, |acc, i| acc.checked_add(self.total_on(i, n)?).ok_or_else(overflow))
    }

    /// The most bytes on one tile of `ipus` IPUs of `n` tiles.
    pub fn max_tile(&self, n: u32, ipus: u32) -> u64 {
        (0..ipus).flat_map(|i| (0..n).map(move |t| (i, t))).map(|(i, t)| self.on(i, t, n)).max().unwrap_or(0)
    }
}

/// Live bytes per tile during the memory sweep, over `ipus` IPUs of `n` tiles.
pub(crate) struct TileCounter {
    n: u32,
    grain: u64,
    /// Bytes on every tile of every IPU.
    uniform: i128,
    /// Bytes on every tile of each IPU.
    ipu_uniform: Vec<i128>,
    /// Bytes on each tile, IPU after IPU.
    per_tile: Vec<i128>,
}

impl TileCounter {
    pub fn new(n: u32, ipus: u32, grain: u64) -> Self {
        let ipus = ipus.max(1) as usize;
        TileCounter { n, grain, uniform: 0, ipu_uniform: vec![0; ipus], per_tile: vec![0; n as usize * ipus] }
    }

    /// The tiles of IPU `ipu` (empty for an IPU out of range, which the
    /// counter's IPU count excludes by construction).
    fn tiles_of(&mut self, ipu: u32) -> &mut [i128] {
        let n = self.n as usize;
        let start = (ipu as usize).saturating_mul(n).min(self.per_tile.len());
        let end = start.saturating_add(n).min(self.per_tile.len());
        &mut self.per_tile[start..end]
    }

    fn range(&mut self, ipu: u32, start: u32, tiles: u32, bytes: i128) {
        let n = self.n as usize;
        let (start, tiles) = (start as usize % n.max(1), (tiles as usize).min(n));
        let first = (n - start).min(tiles);
        let per_tile = self.tiles_of(ipu);
        if per_tile.len() < n {
            return;
        }
        per_tile[start..start + first].iter_mut().for_each(|b| *b += bytes);
        per_tile[..tiles - first].iter_mut().for_each(|b| *b += bytes);
    }

    fn add_ipu_uniform(&mut self, ipu: u32, bytes: i128) {
        if let Some(u) = self.ipu_uniform.get_mut(ipu as usize) {
            *u += bytes;
        }
    }

    /// Add (`sign` 1) or remove (`sign` -1) a buffer's grains.
    pub fn span(&mut self, span: TileSpan, sign: i128) {
        let n64 = u64::from(self.n.max(1));
        let grain = i128::from(self.grain);
        self.add_ipu_uniform(span.ipu, sign * i128::from(span.grains / n64) * grain);
        let extra = u32::try_from(span.grains % n64).unwrap_or(0);
        self.range(span.ipu, span.start, extra, sign * grain);
    }

    /// Add or remove a block of code.
    pub fn load(&mut self, load: &TileLoad, sign: i128) {
        self.uniform += sign * i128::from(load.uniform);
        for (i, &bytes) in load.ipu_uniform.iter().enumerate() {
            self.add_ipu_uniform(u32::try_from(i).unwrap_or(u32::MAX), sign * i128::from(bytes));
        }
        for &(ipu, start, tiles, bytes) in &load.ranges {
            self.range(ipu, start, tiles, sign * i128::from(bytes));
        }
    }

    /// The most loaded tile of IPU `ipu` (the first of equals) and its bytes.
    pub fn max_on(&self, ipu: u32) -> (u32, u64) {
        let n = self.n as usize;
        let tiles = self.per_tile.get(ipu as usize * n..(ipu as usize + 1) * n).unwrap_or(&[]);
        let (mut tile, mut most) = (0usize, i128::MIN);
        for (t, &b) in tiles.iter().enumerate() {
            if b > most {
                (tile, most) = (t, b);
            }
        }
        let most = if tiles.is_empty() { 0 } else { most };
        let base = self.uniform + self.ipu_uniform.get(ipu as usize).copied().unwrap_or(0);
        let bytes = u64::try_from((most + base).max(0)).unwrap_or(u64::MAX);
        (u32::try_from(tile).unwrap_or(0), bytes)
    }

    /// The most loaded tile over every IPU (the first of equals, lowest IPU
    /// first): its IPU, tile and bytes.
    pub fn max(&self) -> (u32, u32, u64) {
        let mut best = (0, 0, 0);
        for ipu in 0..u32::try_from(self.ipu_uniform.len()).unwrap_or(u32::MAX) {
            let (tile, bytes) = self.max_on(ipu);
            if ipu == 0 || bytes > best.2 {
                best = (ipu, tile, bytes);
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_dealt_round_robin_from_where_the_previous_ended() {
        let spans = map_buffers([(64u64 * 3, 0), (64 * 6, 0), (64, 0)].into_iter(), 64, 4);
        assert_eq!(spans[0], TileSpan { ipu: 0, start: 0, grains: 3 });
        assert_eq!(spans[1], TileSpan { ipu: 0, start: 3, grains: 6 });
        assert_eq!(spans[2], TileSpan { ipu: 0, start: 1, grains: 1 });
        // 6 grains from tile 3 over 4 tiles: tiles 3 and 0 get two, 1 and 2 one.
        let on: Vec<u64> = (0..4).map(|t| spans[1].grains_on(t, 4)).collect();
        assert_eq!(on, [2, 1, 1, 2]);
        let mut c = TileCounter::new(4, 1, 64);
        c.span(spans[1], 1);
        assert_eq!(c.max(), (0, 0, 128));
        c.span(spans[2], 1);
        c.span(spans[2], 1);
        assert_eq!(c.max(), (0, 1, 192));
    }

    #[test]
    fn each_ipu_keeps_its_own_cursor_and_tiles() {
        let spans = map_buffers([(64u64 * 3, 0), (64 * 6, 1), (64, 0)].into_iter(), 64, 4);
        assert_eq!(spans[0], TileSpan { ipu: 0, start: 0, grains: 3 });
        assert_eq!(spans[1], TileSpan { ipu: 1, start: 0, grains: 6 });
        assert_eq!(spans[2], TileSpan { ipu: 0, start: 3, grains: 1 });
        let mut c = TileCounter::new(4, 2, 64);
        for s in &spans {
            c.span(*s, 1);
        }
        // IPU 1: 6 grains from tile 0, tiles 0 and 1 hold two.
        assert_eq!(c.max_on(1), (0, 128));
        assert_eq!(c.max_on(0), (0, 64));
        assert_eq!(c.max(), (1, 0, 128));
        let mut code = TileLoad { uniform: 8, ..TileLoad::default() };
        code.add_range(1, 2, 4, 100, 4);
        code.add_range(0, 3, 2, 1, 4);
        c.load(&code, 1);
        assert_eq!(c.max(), (1, 0, 236));
        assert_eq!(code.total_on(1, 4), Ok(4 * 108));
        assert_eq!(code.total(4, 2), Ok(4 * 108 + 4 * 8 + 2));
        assert_eq!(code.max_tile(4, 2), 108);
    }

    #[test]
    fn tile_loads_wrap_and_sum() {
        let mut l = TileLoad::default();
        l.add_range(0, 3, 2, 10, 4);
        l.add_range(0, 0, 4, 1, 4);
        assert_eq!((0..4).map(|t| l.on(0, t, 4)).collect::<Vec<_>>(), [11, 1, 1, 11]);
        assert_eq!(l.total(4, 1), Ok(24));
    }
}
