//! Depthwise stride-1 convolutions of float32 whose output planes are as
//! wide as their input planes (the "same" padding of MobileNet's layers),
//! with masked loads in place of padded copies: all three passes on
//! AVX-512, forward passes and data gradients of small planes on AVX2 + FMA.
//!
//! With equal widths, output position `q` of a plane (flattened) reads tap
//! `t` at input position `q + shift[t]`, one constant per tap. A plane is
//! swept in vectors (16 lanes, or 8): per tap, one broadcast weight and, per
//! vector, one load of the input at `v·lanes + shift[t]` under a mask of the
//! lanes whose tap lies in the plane (the padding is never written, only
//! masked out), one FMA. The masks depend on the shape alone and are built
//! with the plan, in the form the tier's loads take ([`Masks`]). The data
//! gradient is the same sweep of `dy` with the shifts negated; the weight
//! gradient keeps one vector accumulator per tap over every image of a
//! channel and adds its lanes once. Both tiers run the same generic code
//! over [`Lanes`], compiled in each tier's `#[target_feature]` functions.
//!
//! The blocked kernel of `direct2d` copies each plane into a zero-padded
//! one and copies the result out of a wider grid: on 7x7 and 14x14 planes
//! those copies cost as much as the arithmetic. Each output is summed in
//! the same order whatever the thread count (tasks are runs of planes, or of
//! channels for the weight gradient, each over the whole batch).

use std::any::TypeId;

use super::super::par::{slow_masked_loads, Simd};
use super::layout::{ConvElem, Geo2};
use super::{ConvKernel, Cut, Io, Pass, Task};

/// Vectors of a plane swept at a time (one accumulator each).
const CHUNK: usize = 8;
/// Taps accumulated at a time by the weight gradient (one accumulator each).
const TAPS: usize = 9;
/// Positions per plane up to which this method is taken on AVX-512
/// (measured faster than the blocked kernel's padded copies from 7x7 to
/// 56x56 planes; larger planes, whose masks grow with them, keep the
/// blocked kernel).
const MAX_POSITIONS: usize = 4096;
/// Positions per plane up to which the AVX2 tier takes forward passes and
/// data gradients (measured faster on 7x7 and 14x14 planes, slower on
/// 56x56 ones and in every weight gradient, where each tap is a masked load).
const MAX_POSITIONS_AVX2: usize = 256;
/// Multiply-adds per task, at least (when the team shares the work).
const TASK_MACS: usize = 1 << 16;

/// The lane masks of one pass, in the form of the tier's masked loads:
/// `masks[t · nv + v]` the lanes of vector `v` whose tap `t` lies in the
/// read plane, `tail[v]` those within the written plane.
#[derive(Debug)]
enum Masks {
    /// 16 lanes, one bit each (`k` registers).
    Avx512 { masks: Vec<u16>, tail: Vec<u16> },
    /// 8 lanes, one `i32` each (sign bit set: read or written).
    Avx2 { masks: Vec<[i32; 8]>, tail: Vec<[i32; 8]> },
}

/// The sweep of one pass over planes of `src` values into planes of `dst`
/// values (see the module doc).
#[derive(Debug)]
pub(crate) struct Masked {
    /// Elements of a plane read (`x`; `dy` for the data gradient) and
    /// written (`y`; `dx`).
    src: usize,
    dst: usize,
    /// Vectors of the tier's width covering a written plane.
    nv: usize,
    /// Per tap: read position minus written position.
    shift: Vec<isize>,
    masks: Masks,
}

impl Masked {
    /// The plan of a pass, when the element type is f32, the geometry is
    /// depthwise, stride 1, of equal input and output widths, and the CPU
    /// has AVX-512 (at most [`MAX_POSITIONS`] positions per plane) or AVX2 +
    /// FMA (forward passes and data gradients of at most
    /// [`MAX_POSITIONS_AVX2`] positions: `vmaskmovps` costs more than the
    /// blocked kernel's copies elsewhere, and everywhere on the CPUs of
    /// [`slow_masked_loads`]).
    pub(super) fn plan<T: ConvElem>(g: &Geo2, pass: Pass) -> Option<Self> {
        let simd = Simd::best();
        let positions = g.ip().max(g.op());
        if simd == Simd::Avx2 && (pass == Pass::Weights || positions > MAX_POSITIONS_AVX2 || slow_masked_loads()) {
            return None;
        }
        Self::plan_for::<T>(g, pass, simd)
    }

    /// The sweep of a pass in the tier `simd` (AVX-512 or AVX2 + FMA, at
    /// most [`Simd::best`]), for the geometries of [`Masked::plan`], any pass.
    pub(super) fn plan_for<T: ConvElem>(g: &Geo2, pass: Pass, simd: Simd) -> Option<Self> {
        let suits = cfg!(target_arch = "x86_64")
            && TypeId::of::<T>() == TypeId::of::<f32>()
            && simd >= Simd::Avx2
            && simd <= Simd::best()
            && g.ci_g == 1
            && g.co_g == 1
            && (g.sh, g.sw) == (1, 1)
            && g.iw == g.ow
            && g.ip().max(g.op()) <= MAX_POSITIONS;
        if !suits {
            return None;
        }
        // Tap (ki, kj) of output (r, c) reads input (r + a, c + b).
        let taps: Vec<(isize, isize)> = (0..g.kh)
            .flat_map(|ki| (0..g.kw).map(move |kj| (ki, kj)))
            .map(|(ki, kj)| ((ki * g.dh) as isize - g.ph, (kj * g.dw) as isize - g.pw))
            .collect();
        let width = g.ow;
        let wide = simd == Simd::Avx512;
        Some(match pass {
            Pass::Forward | Pass::Weights => Self::new(width, (g.ih, g.oh), &taps, wide),
            // dx(i) gathers dy(i − shift): the shifts negated, the planes swapped.
            Pass::Data => {
                let flipped: Vec<_> = taps.iter().map(|&(a, b)| (-a, -b)).collect();
                Self::new(width, (g.oh, g.ih), &flipped, wide)
            }
        })
    }

    /// The sweep reading planes of `rows.0` rows into planes of `rows.1`
    /// rows, all `width` wide, tap `t` reading `taps[t]` rows and columns
    /// away, in vectors of 16 lanes (`wide`) or 8.
    fn new(width: usize, (src_rows, dst_rows): (usize, usize), taps: &[(isize, isize)], wide: bool) -> Self {
        let (src, dst) = (src_rows * width, dst_rows * width);
        let lanes = if wide { 16 } else { 8 };
        let nv = dst.div_ceil(lanes);
        let inside = |x: isize, n: usize| x >= 0 && (x as usize) < n;
        // Per (tap, vector), then per vector: whether each lane is read or written.
        let lane_sets = |ok: &dyn Fn(usize) -> bool| -> Vec<Vec<bool>> {
            (0..nv).map(|v| (0..lanes).map(|l| ok(v * lanes + l)).collect()).collect()
        };
        let mut reads = Vec::with_capacity(taps.len() * nv);
        for &(a, b) in taps {
            let ok = |q: usize| {
                q < dst && inside((q / width) as isize + a, src_rows) && inside((q % width) as isize + b, width)
            };
            reads.extend(lane_sets(&ok));
        }
        let writes = lane_sets(&|q| q < dst);
        let bits = |set: &Vec<bool>| set.iter().rev().fold(0u16, |m, &on| m << 1 | on as u16);
        let ints = |set: &Vec<bool>| std::array::from_fn(|l| if set[l] { -1 } else { 0 });
        let masks = if wide {
            Masks::Avx512 { masks: reads.iter().map(bits).collect(), tail: writes.iter().map(bits).collect() }
        } else {
            Masks::Avx2 { masks: reads.iter().map(ints).collect(), tail: writes.iter().map(ints).collect() }
        };
        let shift = taps.iter().map(|&(a, b)| a * width as isize + b).collect();
        Masked { src, dst, nv, shift, masks }
    }

    /// Cuts the tasks: runs `lo..hi` of planes (image-major, as they lie in
    /// memory) for the forward pass and the data gradient, of channels for
    /// the weight gradient, so that the team has a few tasks per thread.
    pub(super) fn cut(&self, g: &Geo2, pass: Pass, want: usize) -> Cut {
        let kk = self.shift.len().max(1);
        let (items, macs_per) = match pass {
            Pass::Weights => (g.groups, g.n * self.dst * kk),
            _ => (g.n * g.groups, self.dst * kk),
        };
        let by_work = (TASK_MACS.div_ceil(macs_per.max(1))).max(1);
        let per = items.div_ceil(4 * want).max(by_work).max(1);
        let tasks = (0..items)
            .step_by(per)
            .map(|lo| Task { n: 0, g: 0, lo, hi: (lo + per).min(items), o0: 0, o1: 1 })
            .collect();
        Cut { tasks, chunks: vec![0, g.n], scratch: 0 }
    }

    /// Runs task `t` of a forward pass or data gradient: planes
    /// `t.lo..t.hi` of `src` into those of `dst`, plane `p` with the
    /// weights of channel `p % groups`.
    ///
    /// # Safety
    /// The CPU runs the plan's tier (AVX-512F + VL, or AVX2 + FMA); `src`
    /// and `dst` hold planes `..t.hi` of this plan's sizes, `w` `groups · kk`
    /// weights; `dst` overlaps neither.
    #[cfg(target_arch = "x86_64")]
    pub(super) unsafe fn planes(&self, t: Task, groups: usize, src: *const f32, w: *const f32, dst: *mut f32) {
        // SAFETY: this function's contract, in the tier the masks were built for.
        unsafe {
            match &self.masks {
                Masks::Avx512 { masks, tail } => planes_avx512(self, masks, tail, t, groups, (src, w, dst)),
                Masks::Avx2 { masks, tail } => planes_avx2(self, masks, tail, t, groups, (src, w, dst)),
            }
        }
    }

    /// Runs task `t` of a weight gradient: channels `t.lo..t.hi` of `dw`
    /// from the `n · groups` planes of `x` and `dy`.
    ///
    /// # Safety
    /// As [`Masked::planes`]: `x` and `dy` hold `n · groups` planes, `dw`
    /// `groups · kk` values and overlaps neither.
    #[cfg(target_arch = "x86_64")]
    pub(super) unsafe fn channels(
        &self,
        t: Task,
        (groups, n): (usize, usize),
        x: *const f32,
        dy: *const f32,
        dw: *mut f32,
    ) {
        let io = (x, dy, dw);
        // SAFETY: this function's contract, in the tier the masks were built for.
        unsafe {
            match &self.masks {
                Masks::Avx512 { masks, tail } => channels_avx512(self, masks, tail, t, (groups, n), io),
                Masks::Avx2 { masks, tail } => channels_avx2(self, masks, tail, t, (groups, n), io),
            }
        }
    }
}

/// The vector operations the sweeps need, in one tier's width.
///
/// Every method runs the tier's instructions: the caller guarantees the
/// CPU has them (the methods are `#[inline(always)]` and called only from
/// the tier's `#[target_feature]` functions below, into which they compile).
#[cfg(target_arch = "x86_64")]
trait Lanes: Copy {
    /// Lanes per vector.
    const N: usize;
    /// A lane mask as the masked loads and stores take it.
    type Mask;
    /// # Safety
    /// The CPU has the tier (as for every method).
    unsafe fn zero() -> Self;
    /// # Safety
    /// The CPU has the tier.
    unsafe fn splat(v: f32) -> Self;
    /// # Safety
    /// The CPU has the tier; the lanes of `m` are readable from `p` on.
    unsafe fn load(m: &Self::Mask, p: *const f32) -> Self;
    /// # Safety
    /// The CPU has the tier.
    unsafe fn fma(a: Self, b: Self, c: Self) -> Self;
    /// # Safety
    /// The CPU has the tier; the lanes of `m` are writable from `p` on.
    unsafe fn store(m: &Self::Mask, p: *mut f32, v: Self);
    /// # Safety
    /// The CPU has the tier; `N` values are writable from `p` on.
    unsafe fn store_all(p: *mut f32, v: Self);
    /// # Safety
    /// The CPU has the tier.
    unsafe fn sum(self) -> f32;
}

#[cfg(target_arch = "x86_64")]
impl Lanes for std::arch::x86_64::__m512 {
    const N: usize = 16;
    type Mask = u16;
    #[inline(always)]
    unsafe fn zero() -> Self {
        // SAFETY: the CPU has AVX-512F (this function's contract).
        unsafe { std::arch::x86_64::_mm512_setzero_ps() }
    }
    #[inline(always)]
    unsafe fn splat(v: f32) -> Self {
        // SAFETY: as above.
        unsafe { std::arch::x86_64::_mm512_set1_ps(v) }
    }
    #[inline(always)]
    unsafe fn load(m: &u16, p: *const f32) -> Self {
        // SAFETY: the masked lanes are readable (this function's contract);
        // the others are not read and do not fault.
        unsafe { std::arch::x86_64::_mm512_maskz_loadu_ps(*m, p) }
    }
    #[inline(always)]
    unsafe fn fma(a: Self, b: Self, c: Self) -> Self {
        // SAFETY: as `zero`.
        unsafe { std::arch::x86_64::_mm512_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    unsafe fn store(m: &u16, p: *mut f32, v: Self) {
        // SAFETY: the masked lanes are writable (this function's contract).
        unsafe { std::arch::x86_64::_mm512_mask_storeu_ps(p, *m, v) }
    }
    #[inline(always)]
    unsafe fn store_all(p: *mut f32, v: Self) {
        // SAFETY: 16 values are writable (this function's contract).
        unsafe { std::arch::x86_64::_mm512_storeu_ps(p, v) }
    }
    #[inline(always)]
    unsafe fn sum(self) -> f32 {
        // SAFETY: as `zero`.
        unsafe { std::arch::x86_64::_mm512_reduce_add_ps(self) }
    }
}

#[cfg(target_arch = "x86_64")]
impl Lanes for std::arch::x86_64::__m256 {
    const N: usize = 8;
    type Mask = [i32; 8];
    #[inline(always)]
    unsafe fn zero() -> Self {
        // SAFETY: the CPU has AVX2 + FMA (this function's contract).
        unsafe { std::arch::x86_64::_mm256_setzero_ps() }
    }
    #[inline(always)]
    unsafe fn splat(v: f32) -> Self {
        // SAFETY: as above.
        unsafe { std::arch::x86_64::_mm256_set1_ps(v) }
    }
    #[inline(always)]
    unsafe fn load(m: &[i32; 8], p: *const f32) -> Self {
        use std::arch::x86_64::*;
        // SAFETY: the masked lanes are readable (this function's contract);
        // the others are not read and do not fault.
        unsafe { _mm256_maskload_ps(p, _mm256_loadu_si256(m.as_ptr() as *const __m256i)) }
    }
    #[inline(always)]
    unsafe fn fma(a: Self, b: Self, c: Self) -> Self {
        // SAFETY: as `zero`.
        unsafe { std::arch::x86_64::_mm256_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    unsafe fn store(m: &[i32; 8], p: *mut f32, v: Self) {
        use std::arch::x86_64::*;
        // SAFETY: the masked lanes are writable (this function's contract).
        unsafe { _mm256_maskstore_ps(p, _mm256_loadu_si256(m.as_ptr() as *const __m256i), v) }
    }
    #[inline(always)]
    unsafe fn store_all(p: *mut f32, v: Self) {
        // SAFETY: 8 values are writable (this function's contract).
        unsafe { std::arch::x86_64::_mm256_storeu_ps(p, v) }
    }
    #[inline(always)]
    unsafe fn sum(self) -> f32 {
        use std::arch::x86_64::*;
        // SAFETY: as `zero`.
        unsafe {
            let s = _mm_add_ps(_mm256_castps256_ps128(self), _mm256_extractf128_ps(self, 1));
            let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
            _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)))
        }
    }
}

/// One tier's entry points: the sweeps of [`Masked::planes`] and
/// [`Masked::channels`] compiled for its instructions.
macro_rules! tier {
    ($planes:ident, $channels:ident, $v:ty, $features:literal) => {
        /// # Safety
        /// As [`Masked::planes`]; `masks` and `tail` are the plan's, of this tier.
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = $features)]
        unsafe fn $planes(
            m: &Masked,
            masks: &[<$v as Lanes>::Mask],
            tail: &[<$v as Lanes>::Mask],
            t: Task,
            groups: usize,
            (src, w, dst): (*const f32, *const f32, *mut f32),
        ) {
            let kk = m.shift.len();
            for p in t.lo..t.hi {
                // SAFETY: plane `p < t.hi` of `src` and `dst`, and the weights of its
                // channel `p % groups < groups` (this function's contract).
                unsafe { plane::<$v>(m, masks, tail, src.add(p * m.src), w.add(p % groups * kk), dst.add(p * m.dst)) };
            }
        }

        /// # Safety
        /// As [`Masked::channels`]; `masks` and `tail` are the plan's, of this tier.
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = $features)]
        unsafe fn $channels(
            m: &Masked,
            masks: &[<$v as Lanes>::Mask],
            tail: &[<$v as Lanes>::Mask],
            t: Task,
            (groups, n): (usize, usize),
            (x, dy, dw): (*const f32, *const f32, *mut f32),
        ) {
            let kk = m.shift.len();
            let (xs, ys) = (groups * m.src, groups * m.dst);
            for c in t.lo..t.hi {
                // SAFETY: channel `c < groups` of the planes and of the weight
                // gradient (this function's contract).
                unsafe {
                    weight_grad::<$v>(
                        m,
                        masks,
                        tail,
                        (x.add(c * m.src), xs),
                        (dy.add(c * m.dst), ys),
                        n,
                        dw.add(c * kk),
                    )
                };
            }
        }
    };
}

tier!(planes_avx512, channels_avx512, std::arch::x86_64::__m512, "avx512f,avx512vl");
tier!(planes_avx2, channels_avx2, std::arch::x86_64::__m256, "avx2,fma");

/// Sweeps one plane: `dst[q] = Σ_t w[t] · src[q + shift[t]]` over the taps in the plane.
///
/// # Safety
/// As [`Masked::planes`], for one plane and its channel's weights.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn plane<L: Lanes>(
    m: &Masked,
    masks: &[L::Mask],
    tail: &[L::Mask],
    src: *const f32,
    w: *const f32,
    dst: *mut f32,
) {
    let mut v = 0;
    while v < m.nv {
        let c = CHUNK.min(m.nv - v);
        let at = (m, masks, tail, v);
        // SAFETY: vectors `v..v + c` of the plane (this function's contract).
        unsafe {
            match c {
                8 => chunk::<L, 8>(at, src, w, dst),
                7 => chunk::<L, 7>(at, src, w, dst),
                6 => chunk::<L, 6>(at, src, w, dst),
                5 => chunk::<L, 5>(at, src, w, dst),
                4 => chunk::<L, 4>(at, src, w, dst),
                3 => chunk::<L, 3>(at, src, w, dst),
                2 => chunk::<L, 2>(at, src, w, dst),
                _ => chunk::<L, 1>(at, src, w, dst),
            }
        }
        v += c;
    }
}

/// The plan, its masks of one tier and the first vector of a chunk.
type At<'a, M> = (&'a Masked, &'a [M], &'a [M], usize);

/// Vectors `v0..v0 + V` of one plane, one accumulator each.
///
/// # Safety
/// As [`plane`]; `v0 + V <= nv`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(clippy::needless_range_loop)] // explicit indices keep the accumulators visible
unsafe fn chunk<L: Lanes, const V: usize>(
    (m, masks, tail, v0): At<'_, L::Mask>,
    src: *const f32,
    w: *const f32,
    dst: *mut f32,
) {
    // SAFETY: the CPU has the tier (this function's contract), as for every
    // `L` call below.
    let zero = unsafe { L::zero() };
    let mut acc = [zero; V];
    for (t, &s) in m.shift.iter().enumerate() {
        let masks = &masks[t * m.nv + v0..t * m.nv + v0 + V];
        // SAFETY: weight `t < kk` of the channel (this function's contract).
        let wv = unsafe { L::splat(*w.add(t)) };
        for j in 0..V {
            // Lanes outside the plane are masked: not read (a masked-out
            // lane does not fault), so the address may lie outside it.
            let at = src.wrapping_offset(((v0 + j) * L::N) as isize + s);
            // SAFETY: the mask's lanes read positions of the plane (built so).
            acc[j] = unsafe { L::fma(L::load(&masks[j], at), wv, acc[j]) };
        }
    }
    for j in 0..V {
        let v = v0 + j;
        // SAFETY: vectors before the last lie in the plane; the tail mask's
        // lanes of the last write positions of the plane. (Masked stores cost
        // 10 times a store on AMD's AVX2 cores.)
        unsafe {
            if v + 1 < m.nv {
                L::store_all(dst.add(v * L::N), acc[j]);
            } else {
                L::store(&tail[v], dst.add(v * L::N), acc[j]);
            }
        }
    }
}

/// The weight gradient of one channel: `dw[t] = Σ_n Σ_q dy_n[q] · x_n[q + shift[t]]`,
/// the planes of image `n` at `x.0 + n · x.1` and `dy.0 + n · dy.1`.
///
/// # Safety
/// As [`Masked::channels`], for one channel.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn weight_grad<L: Lanes>(
    m: &Masked,
    masks: &[L::Mask],
    tail: &[L::Mask],
    x: (*const f32, usize),
    dy: (*const f32, usize),
    n: usize,
    dw: *mut f32,
) {
    let kk = m.shift.len();
    let mut t = 0;
    while t < kk {
        let c = TAPS.min(kk - t);
        let at = (m, masks, tail, t);
        // SAFETY: taps `t..t + c` (this function's contract).
        unsafe {
            match c {
                9 => tap_sums::<L, 9>(at, x, dy, n, dw),
                8 => tap_sums::<L, 8>(at, x, dy, n, dw),
                _ => {
                    for k in t..t + c {
                        tap_sums::<L, 1>((m, masks, tail, k), x, dy, n, dw);
                    }
                }
            }
        }
        t += c;
    }
}

/// Taps `t0..t0 + K` of [`weight_grad`], one accumulator each (`At`'s
/// index is the first tap).
///
/// # Safety
/// As [`weight_grad`]; `t0 + K <= kk`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(clippy::needless_range_loop)] // explicit indices keep the accumulators visible
unsafe fn tap_sums<L: Lanes, const K: usize>(
    (m, masks, tail, t0): At<'_, L::Mask>,
    (x, xs): (*const f32, usize),
    (dy, ys): (*const f32, usize),
    n: usize,
    dw: *mut f32,
) {
    // SAFETY: the CPU has the tier (this function's contract), as for every
    // `L` call below.
    let zero = unsafe { L::zero() };
    let mut acc = [zero; K];
    let mut shift = [0isize; K];
    shift.copy_from_slice(&m.shift[t0..t0 + K]);
    for img in 0..n {
        // SAFETY: image `img < n` of the channel (this function's contract).
        let (xi, di) = unsafe { (x.add(img * xs), dy.add(img * ys)) };
        for v in 0..m.nv {
            // SAFETY: the tail mask's lanes read positions of the `dy` plane.
            let e = unsafe { L::load(&tail[v], di.add(v * L::N)) };
            for k in 0..K {
                let at = xi.wrapping_offset((v * L::N) as isize + shift[k]);
                // SAFETY: the mask's lanes read positions of the `x` plane (built so).
                acc[k] = unsafe { L::fma(e, L::load(&masks[(t0 + k) * m.nv + v], at), acc[k]) };
            }
        }
    }
    for k in 0..K {
        // SAFETY: weight `t0 + k < kk` of the channel.
        unsafe { *dw.add(t0 + k) = acc[k].sum() };
    }
}

impl<T: ConvElem> ConvKernel<T> {
    /// Runs task `t` of the masked plan `m` (no scratch).
    ///
    /// # Safety
    /// As [`Masked::planes`] and [`Masked::channels`] with the tensors of
    /// `io`; `T` is f32 (see [`Masked::plan`]).
    pub(super) unsafe fn masked_task(&self, m: &Masked, t: Task, io: Io<T>) {
        let g = &self.geo;
        let (x, w, y) = (io.x as *mut f32, io.w as *mut f32, io.y as *mut f32);
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `T` is f32 and the CPU has AVX-512 (the plan's conditions);
        // `io` holds the whole tensors (this function's contract).
        unsafe {
            match self.pass {
                Pass::Forward => m.planes(t, g.groups, x, w, y),
                Pass::Data => m.planes(t, g.groups, y, w, x),
                Pass::Weights => m.channels(t, (g.groups, g.n), x, y, w),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (m, t, g, x, w, y);
    }
}
