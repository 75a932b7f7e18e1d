//! Convolutions over more than two spatial dims (3-D: video and volumes) as
//! 2-D ones.
//!
//! Over dims `[d.., h, w]`, each output position `o` of the leading dims is a
//! 2-D convolution over `(h, w)` whose input channels are the pairs (channel
//! `c`, leading tap `k`), channel-major, so the weights `[C_out, C_in / group,
//! k.., kh, kw]` already are its `[C_out, C_in / group · taps, kh, kw]`. The
//! *virtual image* `v = (n, o)` has the input planes `x[n, c, read(o, k)]`
//! (zeros where the tap reads padding, see [`Outer`]) and the output planes
//! `y[n, :, o]`. The kernel copies a chunk of virtual images into scratch,
//! runs the 2-D kernel planned for that batch (whichever of its methods suits
//! the 2-D shape: blocked, implicit, im2col, batched) and copies back:
//! - forward: the output planes to `y`;
//! - data gradient: each virtual input plane added to the `dx` plane it was
//!   read from, chunks, images and taps in order;
//! - weight gradient: the chunks' weight gradients added in chunk order.
//!
//! So each output is summed in an order fixed at build time. Pointwise
//! N-d convolutions (all taps 1, stride 1, unpadded) never come here: they are
//! 1-D pointwise convolutions over the flattened positions (see `conv.rs`);
//! float32 3-D ones on AVX-512 that fit its tiles run `direct3d`.

use std::sync::Mutex;

use popart_ir::ops::conv::ConvGeometry;

use super::super::par::{par_split, PAR_MIN_ELEMS};
use super::super::ptr::{slice_mut, SendPtr};
use super::super::spec::{BuildResult, SpecExt, Types};
use super::layout::{copy_row, ConvElem, Geo2, Outer};
use super::{ConvKernel, Pass, PlanCx};
use crate::kernel::{Kernel, KernelArgs, KernelError, KernelResult, KernelSpec};

/// Elements of the scratch copies of one chunk of virtual images (the
/// inputs' and outputs' planes): 8 MiB of f32, a few images of large planes,
/// many of small ones (which the 2-D plan then batches).
const CHUNK_ELEMS: usize = 1 << 21;

/// Scratch of the copies, sized at build time.
struct Bufs<T> {
    /// Virtual input planes of a chunk: `[chunk, C_in · taps, ip]`.
    x: Vec<T>,
    /// Virtual output planes of a chunk: `[chunk, C_out, op]`.
    y: Vec<T>,
    /// A chunk's weight gradient (chunks after the first).
    w: Vec<T>,
}

pub(super) struct NdKernel<T> {
    pass: Pass,
    outer: Outer,
    n: usize,
    ci: usize,
    co: usize,
    ip: usize,
    op: usize,
    /// Virtual images per chunk.
    chunk: usize,
    /// The 2-D kernel of a full chunk and of the shorter last one.
    full: Box<dyn Kernel>,
    last: Option<Box<dyn Kernel>>,
    /// Positions of (x, w, y) in the kernel args (one of them is the output).
    pos: [usize; 3],
    wlen: usize,
    /// Elements of the result.
    out_len: usize,
    bufs: Mutex<Bufs<T>>,
    _t: Types<T>,
}

impl<T: ConvElem> NdKernel<T> {
    /// Plans pass `pass` of the N-d geometry `geo`, already split into its 2-D
    /// part `inner` and leading dims `outer`.
    pub(super) fn plan(
        spec: &KernelSpec<'_>,
        geo: &ConvGeometry,
        inner: &ConvGeometry,
        outer: Outer,
        pass: Pass,
        pos: [usize; 3],
        out_len: usize,
    ) -> BuildResult {
        let overflow = || spec.error("the convolution is too large");
        let (n, ci, co) = (geo.batch, geo.in_channels, geo.out_channels);
        let ip: usize = inner.in_size.iter().product();
        let op: usize = inner.out_size.iter().product();
        let vci = ci.checked_mul(outer.taps).ok_or_else(overflow)?;
        let per_image = vci.checked_mul(ip).and_then(|a| co.checked_mul(op).map(|b| a + b)).ok_or_else(overflow)?;
        let total = n.checked_mul(outer.out).ok_or_else(overflow)?;
        let chunk = (CHUNK_ELEMS / per_image.max(1)).clamp(1, total.max(1));
        let sub = |batch: usize| -> BuildResult {
            let g2 = ConvGeometry { batch, in_channels: vci, ..inner.clone() };
            let geo2 = Geo2::new(&g2).ok_or_else(|| spec.error("the convolution's inner geometry is not 2-d"))?;
            // Arguments of the 2-D kernel: forward and data (x or dy, w), weights (x, dy).
            let pos2 = if pass == Pass::Weights { [0, 0, 1] } else { [0, 1, 0] };
            let out_len = match pass {
                Pass::Forward => batch * co * op,
                Pass::Data => batch * vci * ip,
                Pass::Weights => g2.w_shape().iter().product(),
            };
            ConvKernel::<T>::plan(PlanCx::new(spec, geo2, pass, pos2, g2.macs(), out_len))
        };
        let full = sub(chunk)?;
        let last = if total % chunk != 0 { Some(sub(total % chunk)?) } else { None };
        let wlen: usize = geo.w_shape().iter().product();
        let err = |what: &str| spec.error(format!("cannot allocate the {what}"));
        let zeros = |len: usize, what: &str| -> Result<Vec<T>, KernelError> {
            popart_ir::size::try_zeroed_vec::<T>(len, what).map_err(|_| err(what))
        };
        let bufs = Bufs {
            x: zeros(chunk * vci * ip, "convolution input copies")?,
            y: zeros(chunk * co * op, "convolution output copies")?,
            w: zeros(if pass == Pass::Weights && total > chunk { wlen } else { 0 }, "weight-gradient partials")?,
        };
        Ok(Box::new(NdKernel::<T> {
            pass,
            outer,
            n,
            ci,
            co,
            ip,
            op,
            chunk,
            full,
            last,
            pos,
            wlen,
            out_len,
            bufs: Mutex::new(bufs),
            _t: Types::default(),
        }))
    }

    /// Copies planes over the team when there are enough elements: `units`
    /// pieces of `per_unit` elements each, `f` over a range of units.
    fn split(units: usize, per_unit: usize, f: impl Fn(std::ops::Range<usize>) + Sync + Send) {
        let per_unit = per_unit.max(1);
        par_split(units, PAR_MIN_ELEMS.div_ceil(per_unit), (1usize << 14).div_ceil(per_unit), f);
    }

    /// The virtual input planes of images `vs` from `x` (zeros for padding taps).
    ///
    /// # Safety
    /// `x` holds the convolution's input, `dst` a chunk's input planes.
    unsafe fn gather_x(&self, x: SendPtr<T>, dst: SendPtr<T>, vs: std::ops::Range<usize>) {
        let (ci, taps, ip, inp) = (self.ci, self.outer.taps, self.ip, self.outer.inp);
        Self::split(vs.len() * ci, taps * ip, |r| {
            for u in r {
                let (j, c) = (u / ci, u % ci);
                let (n, o) = ((vs.start + j) / self.outer.out, (vs.start + j) % self.outer.out);
                for k in 0..taps {
                    // SAFETY: plane (j, c, k) of the chunk and plane (n, c, i) of x.
                    unsafe {
                        let d = dst.get().add(((j * ci + c) * taps + k) * ip);
                        match self.outer.read(o, k) {
                            Some(i) => copy_row(x.get().add(((n * ci + c) * inp + i) * ip), d, ip),
                            None => std::ptr::write_bytes(d, 0, ip),
                        }
                    }
                }
            }
        });
    }

    /// Moves the output planes of images `vs` between the chunk `buf` and the
    /// tensor `t`: into `t` when `to_tensor`, else out of it.
    ///
    /// # Safety
    /// `t` holds the convolution's `y`, `buf` a chunk's output planes.
    unsafe fn move_y(&self, t: SendPtr<T>, buf: SendPtr<T>, vs: std::ops::Range<usize>, to_tensor: bool) {
        let (co, op, out) = (self.co, self.op, self.outer.out);
        Self::split(vs.len() * co, op, |r| {
            for u in r {
                let (j, c) = (u / co, u % co);
                let (n, o) = ((vs.start + j) / out, (vs.start + j) % out);
                // SAFETY: plane (n, c, o) of y and plane (j, c) of the chunk.
                unsafe {
                    let (tp, bp) = (t.get().add(((n * co + c) * out + o) * op), buf.get().add(u * op));
                    if to_tensor {
                        copy_row(bp, tp, op);
                    } else {
                        copy_row(tp, bp, op);
                    }
                }
            }
        });
    }

    /// Adds the virtual input planes of images `vs` to the planes of `dx`
    /// they were read from: per channel (one thread each), images then taps in order.
    ///
    /// # Safety
    /// `src` holds a chunk's input planes, `dx` the data gradient.
    unsafe fn scatter_x(&self, src: SendPtr<T>, dx: SendPtr<T>, vs: std::ops::Range<usize>) {
        let (ci, taps, ip, inp) = (self.ci, self.outer.taps, self.ip, self.outer.inp);
        Self::split(ci, vs.len() * taps * ip, |r| {
            for c in r {
                for j in 0..vs.len() {
                    let (n, o) = ((vs.start + j) / self.outer.out, (vs.start + j) % self.outer.out);
                    for (k, i) in self.outer.valid(o) {
                        // SAFETY: plane (j, c, k) of the chunk, plane (n, c, i) of dx.
                        unsafe {
                            let s = std::slice::from_raw_parts(src.get().add(((j * ci + c) * taps + k) * ip), ip);
                            let d = std::slice::from_raw_parts_mut(dx.get().add(((n * ci + c) * inp + i) * ip), ip);
                            d.iter_mut().zip(s).for_each(|(d, &s)| *d += s);
                        }
                    }
                }
            }
        });
    }
}

impl<T: ConvElem> Kernel for NdKernel<T> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let out = SendPtr(args.outputs[0] as *mut T);
        let input = |role: usize| SendPtr(args.inputs[self.pos[role]] as *mut T);
        let mut bufs = self.bufs.lock().unwrap_or_else(|e| e.into_inner());
        let (xb, yb, wb) = (SendPtr(bufs.x.as_mut_ptr()), SendPtr(bufs.y.as_mut_ptr()), SendPtr(bufs.w.as_mut_ptr()));
        let total = self.n * self.outer.out;
        if self.pass == Pass::Data || total == 0 {
            // SAFETY: the output holds the plan's `out_len` elements (this
            // function's contract).
            unsafe { std::ptr::write_bytes(out.get(), 0, self.out_len) };
        }
        for (k, v0) in (0..total).step_by(self.chunk).enumerate() {
            let vs = v0..(v0 + self.chunk).min(total);
            let kernel = match &self.last {
                Some(l) if vs.len() < self.chunk => l,
                _ => &self.full,
            };
            let run = |a: SendPtr<T>, b: SendPtr<T>, o: SendPtr<T>| {
                let ins = [a.get() as *const u8, b.get() as *const u8];
                let outs = [o.get() as *mut u8];
                // SAFETY: the chunk's buffers are sized for the 2-D kernel's batch.
                unsafe { kernel.run(&KernelArgs { inputs: &ins, outputs: &outs }) }
            };
            match self.pass {
                Pass::Forward => {
                    // SAFETY: input 0 is the convolution's `x` and the output its
                    // `y` (this function's contract); `xb`, `yb` are the chunk's
                    // planes, sized at build for `chunk` images, `vs.len() <= chunk`.
                    unsafe { self.gather_x(input(0), xb, vs.clone()) };
                    run(xb, input(1), yb)?;
                    // SAFETY: as above.
                    unsafe { self.move_y(out, yb, vs, true) };
                }
                Pass::Data => {
                    // SAFETY: input 2 is the convolution's `dy` and the output its
                    // `dx` (this function's contract); `xb`, `yb` are the chunk's
                    // planes, sized at build for `chunk` images, `vs.len() <= chunk`.
                    unsafe { self.move_y(input(2), yb, vs.clone(), false) };
                    run(yb, input(1), xb)?;
                    // SAFETY: as above.
                    unsafe { self.scatter_x(xb, out, vs) };
                }
                Pass::Weights => {
                    // SAFETY: inputs 0 and 2 are the convolution's `x` and `dy`
                    // (this function's contract); `xb`, `yb` are the chunk's planes,
                    // sized at build for `chunk` images, `vs.len() <= chunk`.
                    unsafe {
                        self.gather_x(input(0), xb, vs.clone());
                        self.move_y(input(2), yb, vs, false);
                    }
                    if k == 0 {
                        run(xb, yb, out)?;
                    } else {
                        run(xb, yb, wb)?;
                        // SAFETY: the output (the weight gradient) and the partial
                        // `wb` both hold `wlen` elements; they do not overlap.
                        let (o, p) = unsafe { (slice_mut(out.get(), self.wlen), slice_mut(wb.get(), self.wlen)) };
                        o.iter_mut().zip(p.iter()).for_each(|(o, &p)| *o += p);
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
pub(super) mod tests {
    use popart_ir::ops::conv::{conv_geometry, ConvAttrs, ConvGeometry, ConvTransposeAttrs};
    use popart_ir::{Attributes, DataType, HostTensor, OpAttrs};

    use super::super::super::par::Simd;
    use crate::kernels::testutil::{assert_close, infer, run_with_outputs, t, Rng};

    /// An N-d case: batch, groups, input and output channels per group,
    /// spatial input sizes, kernel, strides, dilations, pads (begins then ends).
    pub(in crate::kernels) struct Case {
        pub n: usize,
        pub groups: usize,
        pub ci_g: usize,
        pub co_g: usize,
        pub size: Vec<usize>,
        pub k: Vec<usize>,
        pub s: Vec<usize>,
        pub d: Vec<usize>,
        pub p: Vec<usize>,
    }

    impl Case {
        pub(in crate::kernels) fn out(&self) -> Vec<usize> {
            let nd = self.size.len();
            (0..nd)
                .map(|i| (self.size[i] + self.p[i] + self.p[nd + i] - (self.k[i] - 1) * self.d[i] - 1) / self.s[i] + 1)
                .collect()
        }
        pub(in crate::kernels) fn conv_attrs(&self) -> ConvAttrs {
            let ints = |v: &[usize]| Some(v.iter().map(|&a| a as i64).collect());
            ConvAttrs {
                strides: ints(&self.s),
                pads: ints(&self.p),
                dilations: ints(&self.d),
                group: self.groups as i64,
                auto_pad: None,
            }
        }
        pub(in crate::kernels) fn attrs(&self) -> Attributes {
            self.conv_attrs().to_attrs()
        }
        /// The convolution's geometry (the forward pass's input and weight shapes).
        pub(in crate::kernels) fn geometry(&self) -> ConvGeometry {
            let xs = [vec![self.n, self.groups * self.ci_g], self.size.clone()].concat();
            let ws = [vec![self.groups * self.co_g, self.ci_g], self.k.clone()].concat();
            conv_geometry(&xs, &ws, &self.conv_attrs()).unwrap()
        }
    }

    /// Checks every case's passes against the definition (float32, seeds from
    /// `seed`) and, on CPUs with AVX-512 (where the routes under test exist),
    /// that `taken` gives each case the routes it expects.
    pub(in crate::kernels) fn check_routes<W: PartialEq + std::fmt::Debug>(
        cases: &[(Case, W)],
        taken: impl Fn(&Case) -> W,
        seed: u64,
    ) {
        for (i, (c, want)) in cases.iter().enumerate() {
            if Simd::best() >= Simd::Avx512 {
                assert_eq!(taken(c), *want, "case {i}");
            }
            check(c, DataType::Float32, seed + i as u64);
        }
    }

    /// Row-major digits of `i` in `dims`.
    fn digits(mut i: usize, dims: &[usize]) -> Vec<usize> {
        let mut v = vec![0; dims.len()];
        for d in (0..dims.len()).rev() {
            v[d] = i % dims[d];
            i /= dims[d];
        }
        v
    }

    /// `y`, `dx`, `dw` of case `c` by the definition, in f64.
    fn naive(c: &Case, x: &[f64], w: &[f64], dy: &[f64]) -> [Vec<f64>; 3] {
        let (out, nd) = (c.out(), c.size.len());
        let (ip, op, kk): (usize, usize, usize) = (c.size.iter().product(), out.iter().product(), c.k.iter().product());
        let (ci, co) = (c.groups * c.ci_g, c.groups * c.co_g);
        let (mut y, mut dx, mut dw) = (vec![0.0; c.n * co * op], vec![0.0; x.len()], vec![0.0; w.len()]);
        for b in 0..c.n {
            for o in 0..co {
                for i in 0..c.ci_g {
                    let ch = (o / c.co_g) * c.ci_g + i;
                    for tap in 0..kk {
                        let kt = digits(tap, &c.k);
                        let wi = (o * c.ci_g + i) * kk + tap;
                        for q in 0..op {
                            let ot = digits(q, &out);
                            let mut at = 0usize;
                            let mut inside = true;
                            for dim in 0..nd {
                                let v = (ot[dim] * c.s[dim] + kt[dim] * c.d[dim]) as isize - c.p[dim] as isize;
                                inside &= v >= 0 && (v as usize) < c.size[dim];
                                at = at * c.size[dim] + v.max(0) as usize;
                            }
                            if !inside {
                                continue;
                            }
                            let (xi, yi) = ((b * ci + ch) * ip + at, (b * co + o) * op + q);
                            y[yi] += w[wi] * x[xi];
                            dx[xi] += w[wi] * dy[yi];
                            dw[wi] += x[xi] * dy[yi];
                        }
                    }
                }
            }
        }
        [y, dx, dw]
    }

    /// The inputs `x`, `w` and `dy` of case `c` (values uniform in `[-1, 1]`
    /// from `seed`), as tensors of `dt` and as their values.
    pub(in crate::kernels) struct Data {
        pub x: HostTensor,
        pub w: HostTensor,
        pub dy: HostTensor,
        pub values: [Vec<f64>; 3],
    }

    /// [`Data`] of case `c`.
    pub(in crate::kernels) fn data(c: &Case, dt: DataType, seed: u64) -> Data {
        let mut rng = Rng::new(seed);
        let xs = [vec![c.n, c.groups * c.ci_g], c.size.clone()].concat();
        let ws = [vec![c.groups * c.co_g, c.ci_g], c.k.clone()].concat();
        let ys = [vec![c.n, c.groups * c.co_g], c.out()].concat();
        let xv = rng.vec(xs.iter().product(), -1.0, 1.0);
        let wv = rng.vec(ws.iter().product(), -1.0, 1.0);
        let dyv = rng.vec(ys.iter().product(), -1.0, 1.0);
        let (x, w, dy) = (t(dt, &xs, &xv), t(dt, &ws, &wv), t(dt, &ys, &dyv));
        Data { x, w, dy, values: [xv, wv, dyv] }
    }

    /// `Conv`, `ConvDataGrad` and `ConvWeightsGrad` of case `c` on `d`: `[y, dx, dw]`.
    pub(in crate::kernels) fn run_passes(c: &Case, d: &Data) -> [Vec<f64>; 3] {
        let attrs = c.attrs();
        let (x, w, dy) = (&d.x, &d.w, &d.dy);
        let y_info = infer("Conv", &attrs, &[(0, x.info.clone()), (1, w.info.clone())]).remove(0);
        assert_eq!(y_info.shape, dy.info.shape);
        let y = run_with_outputs("Conv", &attrs, &[(0, x.clone()), (1, w.clone())], std::slice::from_ref(&y_info));
        let dx = run_with_outputs(
            "ConvDataGrad",
            &attrs,
            &[(0, dy.clone()), (1, w.clone()), (2, x.clone())],
            std::slice::from_ref(&x.info),
        );
        let dw = run_with_outputs(
            "ConvWeightsGrad",
            &attrs,
            &[(0, dy.clone()), (1, x.clone()), (2, w.clone())],
            std::slice::from_ref(&w.info),
        );
        [y[0].to_f64_vec(), dx[0].to_f64_vec(), dw[0].to_f64_vec()]
    }

    /// Conv, both gradients and (dilation 1) ConvTranspose of case `c` against [`naive`].
    pub(in crate::kernels) fn check(c: &Case, dt: DataType, seed: u64) {
        let d = data(c, dt, seed);
        let [xv, wv, dyv] = &d.values;
        let [want_y, want_dx, want_dw] = naive(c, xv, wv, dyv);
        let [y, dx, dw] = run_passes(c, &d);
        let (w, dy) = (&d.w, &d.dy);
        let tol = if dt == DataType::Float32 { 1e-4 } else { 1e-10 };
        assert_close(&y, &want_y, tol);
        assert_close(&dx, &want_dx, tol);
        assert_close(&dw, &want_dw, tol * 10.0);
        if c.d.iter().all(|&d| d == 1) {
            // ConvTranspose of dy is the data gradient (output padding: the
            // input positions a stride leaves unread at the end).
            let (out, nd) = (c.out(), c.size.len());
            let extra =
                (0..nd).map(|i| (c.size[i] + c.p[i] + c.p[nd + i] - ((out[i] - 1) * c.s[i] + c.k[i])) as i64).collect();
            let ca = c.conv_attrs();
            let ta = ConvTransposeAttrs {
                strides: ca.strides,
                pads: ca.pads,
                dilations: ca.dilations,
                group: ca.group,
                auto_pad: None,
                output_padding: Some(extra),
                output_shape: None,
            }
            .to_attrs();
            let ins = [(0, dy.clone()), (1, w.clone())];
            let tr = run_with_outputs("ConvTranspose", &ta, &ins, std::slice::from_ref(&d.x.info));
            assert_close(&tr[0].to_f64_vec(), &want_dx, tol);
        }
    }

    pub(in crate::kernels) fn case(n: usize, g: usize, ci_g: usize, co_g: usize, size: &[usize], k: &[usize]) -> Case {
        let nd = size.len();
        Case {
            n,
            groups: g,
            ci_g,
            co_g,
            size: size.to_vec(),
            k: k.to_vec(),
            s: vec![1; nd],
            d: vec![1; nd],
            p: vec![0; 2 * nd],
        }
    }

    #[test]
    fn conv3d_matches_the_definition() {
        // 3x3x3 padded, stride 1 (the blocked 2-D method on AVX-512 where it suits).
        let mut c = case(2, 1, 8, 16, &[5, 9, 10], &[3, 3, 3]);
        c.p = vec![1; 6];
        check(&c, DataType::Float32, 1);
        // Strides, dilations, uneven pads, groups.
        let mut c = case(2, 2, 3, 4, &[7, 8, 9], &[3, 2, 3]);
        (c.s, c.d, c.p) = (vec![2, 1, 2], vec![2, 1, 1], vec![1, 0, 2, 0, 1, 1]);
        check(&c, DataType::Float64, 2);
        // A stem: (3, 7, 7) stride (1, 2, 2).
        let mut c = case(1, 1, 3, 8, &[4, 19, 18], &[3, 7, 7]);
        (c.s, c.p) = (vec![1, 2, 2], vec![1, 3, 3, 1, 3, 3]);
        check(&c, DataType::Float32, 3);
        // Depthwise, and pointwise (flattened to 1-d).
        let mut c = case(3, 6, 1, 1, &[4, 5, 6], &[3, 3, 3]);
        c.p = vec![1, 1, 1, 0, 1, 1];
        check(&c, DataType::Float32, 4);
        check(&case(2, 1, 8, 5, &[3, 4, 5], &[1, 1, 1]), DataType::Float32, 5);
        // 1x1x1 with stride 2 (not pointwise), and many virtual images per chunk.
        let mut c = case(2, 1, 4, 3, &[5, 5, 5], &[1, 1, 1]);
        c.s = vec![2, 2, 2];
        check(&c, DataType::Float64, 6);
        let mut c = case(5, 1, 16, 16, &[6, 4, 4], &[3, 3, 3]);
        c.p = vec![1; 6];
        check(&c, DataType::Float32, 7);
    }

    #[test]
    fn conv4d_and_large_chunks_match_the_definition() {
        // Four spatial dims.
        let mut c = case(2, 1, 2, 3, &[3, 4, 5, 6], &[2, 3, 2, 3]);
        (c.s, c.p) = (vec![1, 2, 1, 1], vec![1, 0, 1, 1, 0, 1, 0, 1]);
        check(&c, DataType::Float64, 8);
        // Several chunks of virtual images (more than CHUNK_ELEMS per batch),
        // a shorter last one: the chunked weight-gradient sums.
        let mut c = case(1, 1, 32, 16, &[7, 40, 40], &[3, 3, 3]);
        c.p = vec![1; 6];
        check(&c, DataType::Float32, 9);
    }
}
