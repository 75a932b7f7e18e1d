//! The im2col method of `conv` (and its pointwise case): blocks of the
//! im2col matrix written to scratch and multiplied by the `gemm` crate
//! (pointwise convolutions multiply the tensors themselves), a forward pass
//! whose tasks split one image's output channels sharing one matrix built
//! by the whole team, and weight gradients that build the matrix of large
//! planes in column blocks that stay in cache.

use super::super::par::Simd;
use super::super::ptr::SendPtr;
use super::dot;
use super::layout::{col2im, im2col, ConvElem};
use super::{ConvKernel, Im2colSplit, Io, Pass, Plan, Task, WGRAD_COL_ELEMS, WGRAD_MIN_OP};
use crate::team;

impl<T: ConvElem> ConvKernel<T> {
    /// Runs task `t` of the im2col method (`pointwise`: of the pointwise
    /// one, on the tensors) with the scratch `io.col`; `io.wpart` is where
    /// chunk `t.n` of a weight gradient goes, a chunk of the columns of one
    /// image when `col_chunks`, else of the batch.
    ///
    /// # Safety
    /// `io` holds the whole tensors and a scratch of the plan's size; tasks
    /// write disjoint outputs.
    #[inline(always)]
    pub(super) unsafe fn gemm_task(&self, t: Task, pointwise: bool, col_chunks: bool, io: Io<T>) {
        let Io { x, w, y, col, wpart } = io;
        let g = &self.geo;
        let (kk, kdim, ip, op) = (g.kk(), g.kdim(), g.ip(), g.op());
        // Group g of image n: its input planes, output planes and weight rows.
        // SAFETY: image `n < g.n` and group `t.g < groups` of the tensors `io`
        // holds (this function's contract); the task's channels and rows.
        let xg = |n: usize| unsafe { x.add((n * g.groups + t.g) * g.ci_g * ip) };
        // SAFETY: as above.
        let yg = |n: usize| unsafe { y.add((n * g.groups + t.g) * g.co_g * op) };
        // SAFETY: as above.
        let wg = unsafe { w.add(t.g * g.co_g * kdim) };
        match self.pass {
            Pass::Forward => {
                let cols = t.hi - t.lo;
                // SAFETY: the task's columns `lo..hi` of image `n`, output channels
                // `o0..o1` of group `t.g` (rows of `y` and `w`); `col` holds the plan's
                // scratch (`kdim` rows of `hi - lo` columns); tasks write disjoint outputs.
                unsafe {
                    let (rhs, rs) = if pointwise {
                        (xg(t.n).add(t.lo) as *const T, ip)
                    } else {
                        im2col(g, xg(t.n), 0..kdim, t.lo..t.hi, col, cols);
                        (col as *const T, cols)
                    };
                    T::gemm(
                        t.o1 - t.o0,
                        cols,
                        kdim,
                        yg(t.n).add(t.o0 * op + t.lo),
                        op as isize,
                        1,
                        false,
                        wg.add(t.o0 * kdim),
                        kdim as isize,
                        1,
                        rhs,
                        rs as isize,
                        1,
                        T::ONE,
                        T::ONE,
                    );
                }
            }
            Pass::Data => {
                // dcol rows of channels lo..hi = wgᵀ[rows] @ dy.
                // SAFETY: channels `lo..hi` of group `t.g`, image `n` (this task's alone:
                // tasks write disjoint outputs); `col` holds the plan's scratch (the
                // column matrix of one image, `kdim` rows of `op`).
                unsafe {
                    let rows = (t.lo * kk)..(t.hi * kk);
                    let dx = xg(t.n).add(t.lo * ip);
                    let (dst, ld) = if pointwise { (dx, ip) } else { (col, op) };
                    T::gemm(
                        rows.len(),
                        op,
                        g.co_g,
                        dst,
                        ld as isize,
                        1,
                        false,
                        wg.add(rows.start),
                        1,
                        kdim as isize,
                        yg(t.n),
                        op as isize,
                        1,
                        T::ONE,
                        T::ONE,
                    );
                    if !pointwise {
                        std::ptr::write_bytes(dx, 0, (t.hi - t.lo) * ip);
                        col2im(g, col, op, (t.lo * kk)..(t.hi * kk), xg(t.n));
                    }
                }
            }
            Pass::Weights => {
                // dw[:, rows] (+)= dy @ colᵀ over the images of chunk t.n, the
                // im2col matrix built in column blocks that stay in cache.
                // SAFETY: rows `lo·kk..hi·kk` of group `t.g` of `wpart` (the weights or
                // chunk `t.n`'s partial, this task's alone); images of chunk `t.n` and
                // columns of `span`, inside `op`; `col` holds `rows.len() · cb` elements
                // (the plan's scratch).
                unsafe {
                    let rows = (t.lo * kk)..(t.hi * kk);
                    let dst = wpart.add(t.g * g.co_g * kdim + rows.start);
                    let cb = if pointwise || op < WGRAD_MIN_OP {
                        op
                    } else {
                        let cb = (WGRAD_COL_ELEMS / rows.len().max(1)).max(256);
                        op.div_ceil(op.div_ceil(cb))
                    };
                    let chunk = self.chunks[t.n]..self.chunks[t.n + 1];
                    let (images, span) = if col_chunks { (0..1, chunk) } else { (chunk, 0..op) };
                    for (i, n) in images.enumerate() {
                        for lo in (span.start..span.end).step_by(cb.max(1)) {
                            let cols = lo..(lo + cb).min(span.end);
                            let (rhs, cs) = if pointwise {
                                (xg(n).add(t.lo * ip + cols.start) as *const T, ip)
                            } else {
                                im2col(g, xg(n), rows.clone(), cols.clone(), col, cols.len());
                                (col as *const T, cols.len())
                            };
                            T::gemm(
                                g.co_g,
                                rows.len(),
                                cols.len(),
                                dst,
                                kdim as isize,
                                1,
                                i > 0 || lo > span.start,
                                yg(n).add(lo),
                                op as isize,
                                1,
                                rhs,
                                1,
                                cs as isize,
                                T::ONE,
                                T::ONE,
                            );
                        }
                    }
                }
            }
        }
    }

    /// The forward pass with a shared im2col matrix per image (see
    /// [`Im2colSplit::SharedCol`]): the rows are built in parallel, then the output-channel
    /// blocks multiply it in parallel.
    ///
    /// # Safety
    /// `x`, `w`, `y` hold the whole tensors of the plan's geometry.
    pub(super) unsafe fn run_shared_col(&self, x: SendPtr<T>, w: SendPtr<T>, y: SendPtr<T>) {
        let g = &self.geo;
        let (kdim, ip, op) = (g.kdim(), g.ip(), g.op());
        let dot = matches!(self.plan, Plan::Im2col(Im2colSplit::SharedColT));
        let mut col = self.scratch[0].lock().unwrap_or_else(|e| e.into_inner());
        let col = SendPtr(col.as_mut_ptr() as *mut T);
        let threads = team::num_threads().max(1);
        // Rows of the matrix, split over the team: taps, or positions of the positions-major one.
        let rows_all = if dot { op } else { kdim };
        let rb = rows_all.div_ceil(threads);
        let mut start = 0;
        while start < self.tasks.len() {
            let (n, gi) = (self.tasks[start].n, self.tasks[start].g);
            let end = start + self.tasks[start..].iter().take_while(|t| t.n == n && t.g == gi).count();
            // SAFETY: tasks name images `n < g.n` and groups `gi < groups`.
            let xg = SendPtr(unsafe { x.get().add((n * g.groups + gi) * g.ci_g * ip) });
            team::run(rows_all.div_ceil(rb), &|i| {
                let rows = i * rb..((i + 1) * rb).min(rows_all);
                if dot {
                    let (x, c) = (xg.get() as *const f32, col.get() as *mut f32);
                    // SAFETY: each task writes its own positions' rows of the matrix
                    // (`op` rows of `kdim`: the plan's scratch); `dot` plans are f32.
                    unsafe { dot::im2col_t(g, x, rows.clone(), c.add(rows.start * kdim), kdim) };
                    return;
                }
                // SAFETY: each task writes its own rows of the shared matrix.
                Simd::for_cost(1).run_narrow(
                    #[inline(always)]
                    || unsafe { im2col(g, xg.get(), rows.clone(), 0..op, col.get().add(rows.start * op), op) },
                );
            });
            let tasks = &self.tasks[start..end];
            team::run(tasks.len(), &|j| {
                let t = tasks[j];
                // SAFETY: output channels `o0..o1 <= co_g` of group `gi` of image `n`.
                let (yg, wg) =
                    unsafe { (y.get().add((n * g.groups + gi) * g.co_g * op), w.get().add(gi * g.co_g * kdim)) };
                #[cfg(target_arch = "x86_64")]
                if dot {
                    let (w, colt, y) = (wg as *const f32, col.get() as *const f32, yg as *mut f32);
                    // SAFETY: each task writes its own output channels; the matrix is
                    // read only; `dot` plans are f32 on AVX-512 (`dot::suits`).
                    unsafe { dot::Tiles { w, kdim, colt, ldc: kdim, y, op }.forward(t.o0..t.o1) };
                    return;
                }
                // SAFETY: each task writes its own output channels; the matrix is read only.
                unsafe {
                    T::gemm(
                        t.o1 - t.o0,
                        op,
                        kdim,
                        yg.add(t.o0 * op),
                        op as isize,
                        1,
                        false,
                        wg.add(t.o0 * kdim),
                        kdim as isize,
                        1,
                        col.get(),
                        op as isize,
                        1,
                        T::ONE,
                        T::ONE,
                    )
                };
            });
            start = end;
        }
    }
}
