//! The batched im2col method of the convolution kernels: several small
//! planes side by side in one GEMM.

use super::layout::{col2im, im2col, ConvElem};
#[cfg(doc)]
use super::Plan;
use super::{ConvKernel, Cut, Io, Pass, PlanCx, Task, BLOCK_ELEMS};

impl<T: ConvElem> ConvKernel<T> {
    /// Cuts the tasks of the batched im2col method: forward tasks are (image block, group,
    /// output-channel block); gradient tasks (image block or batch chunk,
    /// group, input-channel block).
    pub(super) fn cut_batched(cx: &PlanCx<'_, '_>, images: usize) -> Cut {
        let (g, pass, want) = (&cx.g, cx.pass, cx.want);
        let (kk, op) = (g.kk(), g.op());
        let cols = images * op;
        let blocks = g.n.div_ceil(images);
        let task = |n, g, lo, hi, o0, o1| Task { n, g, lo, hi, o0, o1 };
        let mut tasks = Vec::new();
        let mut chunks = vec![0, g.n];
        let block_elems = match pass {
            Pass::Forward => {
                let pieces = blocks * g.groups;
                let ob =
                    if pieces < want { g.co_g.div_ceil(want.div_ceil(pieces)).next_multiple_of(8) } else { g.co_g };
                for b in 0..blocks {
                    for gi in 0..g.groups {
                        for o0 in (0..g.co_g).step_by(ob.max(1)) {
                            tasks.push(task(b * images, gi, 0, op, o0, (o0 + ob).min(g.co_g)));
                        }
                    }
                }
                g.kdim() * cols + ob.min(g.co_g) * cols
            }
            Pass::Data | Pass::Weights => {
                let per = if pass == Pass::Data { blocks * g.groups } else { g.groups };
                let mut cb = (BLOCK_ELEMS / (kk * cols).max(1)).min(g.ci_g).max(1);
                if g.ci_g.div_ceil(cb) * per < want {
                    cb = g.ci_g.div_ceil(want.div_ceil(per)).max(1);
                }
                let nb = g.ci_g.div_ceil(cb);
                if pass == Pass::Weights && nb * per < want && blocks > 1 {
                    // Chunks of whole image blocks, reduced in order at the end.
                    let c = want.div_ceil(nb * per).min(blocks);
                    chunks = (0..=c).map(|i| (i * blocks / c * images).min(g.n)).collect();
                }
                let outer: Vec<usize> = if pass == Pass::Data {
                    (0..blocks).map(|b| b * images).collect()
                } else {
                    (0..chunks.len() - 1).collect()
                };
                for &n in &outer {
                    for gi in 0..g.groups {
                        for lo in (0..g.ci_g).step_by(cb) {
                            tasks.push(task(n, gi, lo, (lo + cb).min(g.ci_g), 0, g.co_g));
                        }
                    }
                }
                g.co_g * cols + cb * kk * cols
            }
        };
        Cut { tasks, chunks, scratch: block_elems }
    }

    /// Runs a task of the batched im2col method (see [`Plan::Batched`]);
    /// inlined into `ConvKernel::task`, so it compiles inside the SIMD tier's build.
    ///
    /// # Safety
    /// `io` holds the whole tensors and a scratch of the plan's size; tasks
    /// write disjoint outputs.
    #[inline(always)]
    pub(super) unsafe fn batched_task(&self, t: Task, images: usize, io: Io<T>) {
        let Io { x, w, y, col, wpart } = io;
        let g = &self.geo;
        let (kk, kdim, ip, op) = (g.kk(), g.kdim(), g.ip(), g.op());
        // SAFETY: images `n < g.n` and group `t.g < groups` of the tensors `io`
        // holds (this function's contract).
        let xg = |n: usize| unsafe { x.add((n * g.groups + t.g) * g.ci_g * ip) };
        // SAFETY: as above.
        let yg = |n: usize| unsafe { y.add((n * g.groups + t.g) * g.co_g * op) };
        // SAFETY: as above.
        let wg = unsafe { w.add(t.g * g.co_g * kdim) };
        // dy of images n0.. side by side: [co_g, nimg · op].
        let gather = |n0: usize, nimg: usize, dst: *mut T| {
            for i in 0..nimg {
                for o in 0..g.co_g {
                    // SAFETY: `nimg` images from `n0` of the task's batch, inside `g.n`;
                    // `dst` holds `co_g · nimg · op` elements of the scratch.
                    unsafe {
                        std::ptr::copy_nonoverlapping(yg(n0 + i).add(o * op), dst.add(o * nimg * op + i * op), op);
                    }
                }
            }
        };
        match self.pass {
            Pass::Forward => {
                let nimg = images.min(g.n - t.n);
                let ld = nimg * op;
                // SAFETY: images `t.n..t.n + nimg` (inside `g.n`), output channels
                // `o0..o1` of group `t.g`, this task's alone; the scratch holds the
                // `kdim × images·op` column matrix and then the `ob × images·op` result.
                unsafe {
                    for i in 0..nimg {
                        im2col(g, xg(t.n + i), 0..kdim, 0..op, col.add(i * op), ld);
                    }
                    let ob = t.o1 - t.o0;
                    let ybuf = col.add(kdim * images * op);
                    T::gemm(
                        ob,
                        ld,
                        kdim,
                        ybuf,
                        ld as isize,
                        1,
                        false,
                        wg.add(t.o0 * kdim),
                        kdim as isize,
                        1,
                        col,
                        ld as isize,
                        1,
                        T::ONE,
                        T::ONE,
                    );
                    for i in 0..nimg {
                        for o in 0..ob {
                            std::ptr::copy_nonoverlapping(
                                ybuf.add(o * ld + i * op),
                                yg(t.n + i).add((t.o0 + o) * op),
                                op,
                            );
                        }
                    }
                }
            }
            Pass::Data => {
                let nimg = images.min(g.n - t.n);
                let ld = nimg * op;
                // SAFETY: images `t.n..t.n + nimg` (inside `g.n`), input channels
                // `lo..hi` of group `t.g`, this task's alone; the scratch holds
                // `co_g × images·op` of `dy` and then the `kdim × images·op` columns.
                unsafe {
                    let (dys, dcol) = (col, col.add(g.co_g * images * op));
                    gather(t.n, nimg, dys);
                    let rows = (t.lo * kk)..(t.hi * kk);
                    T::gemm(
                        rows.len(),
                        ld,
                        g.co_g,
                        dcol,
                        ld as isize,
                        1,
                        false,
                        wg.add(rows.start),
                        1,
                        kdim as isize,
                        dys,
                        ld as isize,
                        1,
                        T::ONE,
                        T::ONE,
                    );
                    for i in 0..nimg {
                        if g.pointwise() {
                            // The columns are the planes: copied, not zeroed and added to.
                            for (r, c) in (t.lo..t.hi).enumerate() {
                                std::ptr::copy_nonoverlapping(dcol.add(r * ld + i * op), xg(t.n + i).add(c * ip), op);
                            }
                        } else {
                            std::ptr::write_bytes(xg(t.n + i).add(t.lo * ip), 0, (t.hi - t.lo) * ip);
                            col2im(g, dcol.add(i * op), ld, rows.clone(), xg(t.n + i));
                        }
                    }
                }
            }
            Pass::Weights => {
                let rows = (t.lo * kk)..(t.hi * kk);
                // SAFETY: rows `lo·kk..hi·kk` of group `t.g` of `wpart` (the weights or
                // chunk `t.n`'s partial, this task's alone); the scratch holds
                // `co_g × images·op` of `dy` and then `rows × images·op` columns.
                let (dst, dys, cols) =
                    unsafe { (wpart.add(t.g * g.co_g * kdim + rows.start), col, col.add(g.co_g * images * op)) };
                let (start, end) = (self.chunks[t.n], self.chunks[t.n + 1]);
                for (k, n0) in (start..end).step_by(images).enumerate() {
                    let nimg = images.min(end - n0);
                    let ld = nimg * op;
                    gather(n0, nimg, dys);
                    // SAFETY: images `n0..n0 + nimg` of chunk `t.n`, inside `g.n`; the
                    // scratch and the rows of `wpart` as above.
                    unsafe {
                        for i in 0..nimg {
                            im2col(g, xg(n0 + i), rows.clone(), 0..op, cols.add(i * op), ld);
                        }
                        T::gemm(
                            g.co_g,
                            rows.len(),
                            ld,
                            dst,
                            kdim as isize,
                            1,
                            k > 0,
                            dys,
                            ld as isize,
                            1,
                            cols,
                            1,
                            ld as isize,
                            T::ONE,
                            T::ONE,
                        );
                    }
                }
            }
        }
    }
}
