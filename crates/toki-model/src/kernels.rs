//! The CPU path of the projections: built for the few rows of a decoding or verification
//! step, and taken by every row count (prefill too), so that a row's product is the same
//! bits whatever step it is computed in (`a_row_is_bit_identical_alone_or_among_others`).
//!
//! A step of 1-16 tokens over f32 weights is bound by reading them from memory, not by
//! arithmetic: the ideal is to stream every weight matrix once per step whatever the number
//! of rows.
//! The flex backend's matrix-matrix path does not do that at these shapes: verifying 2-8
//! tree nodes cost 1.5-1.7x one token (benches/README.md: the host kernel's verification
//! cost curve). [`HostWeight`] keeps a host copy of a projection's `[out, in]` weight and
//! computes `x Wᵀ` reading each block of four weight rows from memory once for all
//! activation rows, prefetched ahead so that the arithmetic overlaps the memory traffic,
//! split over the kernel pool's threads (`kernels/pool.rs`: a worker that spins between
//! loops) by blocks of output rows. Three kernels, picked at run time: AVX-512 for 2+ rows
//! where the CPU has it (each weight row streamed once under up to eight activation rows),
//! AVX2+FMA, portable code otherwise. `TOKI_NO_AVX512=1` turns the first off (for A/B runs).
//!
//! How a copy keeps its values ([`HostWeight::compact`], [`HostWeight::with_precision`]):
//! f32; the exact Q4_1 / Q8_0 blocks a converted model's weights are made of ([`blocks`]:
//! decoded in registers as they are multiplied, on AVX-512 for any row count and with
//! AVX2 for one row, else four rows at a time into an L1 scratch for the f32 kernels; in
//! the f32 kernels' order of sums, so the products are bit-identical; one row then costs
//! its decoding more than its memory, and every extra row its multiply-adds; a wide Q8
//! matrix's arg-max first bounds every row with 8-bit products, `blocks/argmax.rs`); or,
//! for the heads, which only propose, f16 ([`half_kernel`]) or Q8 blocks rounded to nearest.
//!
//! Used only on the flex device in f32 (see `llama.rs`); GPUs keep Burn's own matmul.

use std::sync::Arc;

/// Makes the calling thread one of rayon's global pool, which Burn's own parallel ops and
/// the loading of weights run on (the kernels' loops run on `kernels/pool.rs`): a loop started on
/// it then runs its share there, instead of handing the loop to the pool and sleeping until
/// it is done (benches/README.md, "The main thread in the pool"). Call it
/// once, on the thread that will decode, before anything uses the pool (the `toki` binary
/// and the benches do, first thing). The pool gets `RAYON_NUM_THREADS` threads, else one
/// per CPU, and at least 2, so that loops started on other threads still run. Fails when
/// the global pool exists already.
pub fn join_rayon_pool() -> Result<(), rayon::ThreadPoolBuildError> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(configured_threads().max(2))
        .use_current_thread()
        .build_global()
}

/// Threads for parallel work: `RAYON_NUM_THREADS`, else one per CPU (1 where unknown).
pub(crate) fn configured_threads() -> usize {
    std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .or_else(|| std::thread::available_parallelism().ok().map(|n| n.get()))
        .unwrap_or(1)
}

/// Greedy picks of one size (1, 2, 3-4, 5+ rows) by which the lm_head's arg-max has
/// chosen its way by timing (`kernels/pick.rs`; earlier where one way is clearly faster);
/// what measures step costs runs this many first. 0 where nothing is timed.
#[cfg(target_arch = "x86_64")]
pub const PICK_TIMING_CALLS: usize = pick::CALLS;
#[cfg(not(target_arch = "x86_64"))]
pub const PICK_TIMING_CALLS: usize = 0;

/// A projection weight `[out, in]` (row-major, as HF stores it) on the host.
#[derive(Clone)]
pub struct HostWeight {
    w: Stored,
    out: usize,
    inn: usize,
    /// Per-row sums for the exact two-stage arg-max over Q8 blocks (`blocks::argmax`), and
    /// the timings that choose between it and the full product ([`pick`]); `None` where it
    /// does not apply.
    #[cfg(target_arch = "x86_64")]
    row_stats: Option<Arc<(blocks::argmax::RowStats, pick::PickTimer)>>,
}

/// The precision a host copy keeps its weights in; the arithmetic is f32 either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HostPrecision {
    /// As loaded: what the base verifies with.
    #[default]
    F32,
    /// IEEE half precision ([`half_kernel`]): for the heads, which only propose.
    F16,
    /// Blocks of 32 8-bit values and one scale, GGUF's Q8_0 rounded to nearest ([`blocks`]:
    /// 1.125 bytes a weight, each value within half a step of its block's scale): for the
    /// heads, which only propose.
    Q8,
}

/// How a [`HostWeight`] keeps its values.
#[derive(Clone)]
enum Stored {
    F32(Arc<[f32]>),
    /// IEEE half-precision bits, for weights that only propose ([`half_kernel`]).
    F16(Arc<[u16]>),
    /// Blocks that give back the f32 values bit for bit ([`blocks`]).
    Blocks(blocks::Blocks),
    /// Q8 blocks rounded to nearest, for weights that only propose ([`HostPrecision::Q8`]).
    Rounded(blocks::Blocks),
}

impl std::fmt::Debug for HostWeight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HostWeight[{}, {}]", self.out, self.inn)
    }
}

impl HostWeight {
    /// `w` is `[out, in]` row-major.
    pub fn new(w: Vec<f32>, out: usize, inn: usize) -> Self {
        assert_eq!(w.len(), out * inn, "host weight is not [{out}, {inn}]");
        Self::stored(Stored::F32(w.into()), out, inn)
    }

    /// `w` as it is kept, without the two-stage arg-max's row sums.
    fn stored(w: Stored, out: usize, inn: usize) -> Self {
        Self {
            w,
            out,
            inn,
            #[cfg(target_arch = "x86_64")]
            row_stats: None,
        }
    }

    /// `w` ([out, in] row-major) kept in `precision`. Half precision halves the memory
    /// traffic of a step, rounded Q8 blocks cut it to 1.125 bytes a weight; both are for
    /// weights whose products only propose tokens (the heads), never for what the base
    /// verifies. Where a value does not fit f16's range (or is not finite, or rows are not
    /// whole blocks, for Q8) the weight stays f32; where the weights are exact blocks
    /// ([`HostWeight::compact`]) they are kept so, as small and exact.
    pub fn with_precision(w: Vec<f32>, out: usize, inn: usize, precision: HostPrecision) -> Self {
        assert_eq!(w.len(), out * inn, "host weight is not [{out}, {inn}]");
        let stored = match precision {
            HostPrecision::F32 => None,
            // Exact blocks are as small or smaller and lose nothing (the draft
            // vocabulary's rows of a converted model's lm_head).
            HostPrecision::F16 => blocks::Blocks::encode(&w, inn)
                .map(Stored::Blocks)
                .or_else(|| half_kernel::to_f16(&w).map(|h| Stored::F16(h.into()))),
            HostPrecision::Q8 => blocks::Blocks::encode(&w, inn)
                .map(Stored::Blocks)
                .or_else(|| blocks::Blocks::round_q8(&w, inn).map(Stored::Rounded)),
        };
        match stored {
            Some(stored) => Self::stored(stored, out, inn),
            None => Self::new(w, out, inn),
        }
    }

    /// How the values are kept ([`HostWeight::with_precision`]); block storage gives the
    /// f32 values back exactly.
    pub fn precision(&self) -> HostPrecision {
        match self.w {
            Stored::F32(_) | Stored::Blocks(_) => HostPrecision::F32,
            Stored::F16(_) => HostPrecision::F16,
            Stored::Rounded(_) => HostPrecision::Q8,
        }
    }

    /// `w` ([out, in] row-major) in the smallest storage that gives back every value bit
    /// for bit: Q4_1-style blocks (0.75 bytes a weight) or Q8_0-style blocks (1.125) where
    /// the weights are exactly such blocks' values (a model converted from those GGUF
    /// types), f32 otherwise ([`blocks`]). Products are bit-identical to the f32 copy's.
    pub fn compact(w: Vec<f32>, out: usize, inn: usize) -> Self {
        assert_eq!(w.len(), out * inn, "host weight is not [{out}, {inn}]");
        let hw = match blocks::Blocks::encode(&w, inn) {
            Some(b) => {
                // The exact two-stage arg-max pays on a wide matrix (a vocabulary).
                #[cfg(target_arch = "x86_64")]
                let row_stats = (out >= 4096 && blocks::argmax::available())
                    .then(|| blocks::argmax::row_stats(&b, inn))
                    .flatten()
                    .map(|stats| Arc::new((stats, pick::PickTimer::default())));
                Self {
                    #[cfg(target_arch = "x86_64")]
                    row_stats,
                    ..Self::stored(Stored::Blocks(b), out, inn)
                }
            }
            None => Self::new(w, out, inn),
        };
        tracing::debug!(
            out,
            inn,
            bytes_per_weight = hw.bytes_per_weight(),
            "host weight"
        );
        hw
    }

    /// Bytes the host copy reads per weight in a step: 4 (f32), 2 (f16), 0.75 or 1.125
    /// (blocks, exact or rounded).
    pub fn bytes_per_weight(&self) -> f64 {
        match &self.w {
            Stored::F32(_) => 4.0,
            Stored::F16(_) => 2.0,
            Stored::Blocks(b) | Stored::Rounded(b) => b.bytes_per_weight(),
        }
    }

    pub fn out_features(&self) -> usize {
        self.out
    }

    pub fn in_features(&self) -> usize {
        self.inn
    }

    /// `x` [m, in] row-major -> `x Wᵀ` [m, out] row-major.
    pub fn matmul(&self, x: &[f32], m: usize) -> Vec<f32> {
        let (out, inn) = (self.out, self.inn);
        assert_eq!(x.len(), m * inn, "activations are not [{m}, {inn}]");
        let block = block_rows(out);
        let mut yt = vec![0.0f32; out * m]; // [out, m]: each block owns a contiguous chunk
        pool::for_each_chunk(&mut yt, block * m, |b, chunk| {
            let rows = b * block..(b * block + chunk.len() / m);
            self.w.rows_times_x(inn, rows, x, m, chunk);
        });
        // [out, m] -> [m, out]
        let mut y = vec![0.0f32; m * out];
        for (o, col) in yt.chunks_exact(m).enumerate() {
            for (i, &v) in col.iter().enumerate() {
                y[i * out + o] = v;
            }
        }
        y
    }

    /// For each row of `x` [m, in], the index of the largest value of its row of
    /// `x Wᵀ` [m, out] (the first on ties; the first NaN if any, as Burn's `argmax`),
    /// without the [m, out] buffer: each block of output rows is reduced while it is in
    /// cache. The values compared are
    /// [`HostWeight::matmul`]'s, bit for bit (same blocks, same kernels), so greedy
    /// decoding picks the same token either way. A wide Q8 block matrix (a converted
    /// model's lm_head) on a CPU with AVX-512 VNNI may instead bound every value with 8-bit
    /// integer products and compute exactly only the rows the bounds cannot rule out
    /// (`blocks/argmax.rs`; the same picks): which of the two runs is chosen by timing both
    /// ([`pick`]; `TOKI_NO_TWO_STAGE=1` keeps the full product).
    pub fn matmul_argmax(&self, x: &[f32], m: usize) -> Vec<u32> {
        let inn = self.inn;
        assert_eq!(x.len(), m * inn, "activations are not [{m}, {inn}]");
        #[cfg(target_arch = "x86_64")]
        if let (Stored::Blocks(b), Some(two)) = (&self.w, &self.row_stats) {
            let (stats, timer) = &**two;
            return timer.run(m, |way| match way {
                pick::Way::Full => self.argmax_full(x, m),
                pick::Way::TwoStage => {
                    let mut picks = b.argmax_two_stage(stats, self.out, x, m);
                    // Where the two stages do not apply (too many candidates: a flat row):
                    // those rows' full product, all in one pass over the matrix (a pass
                    // each cost as much as the full way's for every row).
                    let rest: Vec<usize> = (0..m).filter(|&j| picks[j].is_none()).collect();
                    if !rest.is_empty() {
                        let xs: Vec<f32> = rest
                            .iter()
                            .flat_map(|&j| &x[j * inn..][..inn])
                            .copied()
                            .collect();
                        for (&j, t) in rest.iter().zip(self.argmax_full(&xs, rest.len())) {
                            picks[j] = Some(t);
                        }
                    }
                    picks.into_iter().flatten().collect()
                }
            });
        }
        self.argmax_full(x, m)
    }

    /// For each row of `x` [m, in], what a sampler needs of its row of `x Wᵀ` [out]:
    /// bounds on every value where the two stages' first applies (a wide Q8 block matrix on
    /// a CPU with AVX-512 VNNI, the row finite and not all zeros; `blocks/argmax.rs`),
    /// `rounding` as fine as asked, with [`HostWeight::value`] for the values it needs
    /// exactly; else the values themselves.
    pub fn value_bounds(&self, x: &[f32], m: usize, rounding: Rounding) -> Vec<RowValues> {
        let inn = self.inn;
        assert_eq!(x.len(), m * inn, "activations are not [{m}, {inn}]");
        let exact = |j: usize| RowValues::Exact(self.matmul(&x[j * inn..][..inn], 1));
        #[cfg(target_arch = "x86_64")]
        if let (Stored::Blocks(b), Some(two)) = (&self.w, &self.row_stats) {
            let rows = b.bounds(&two.0, self.out, x, m, rounding);
            return (rows.into_iter().enumerate())
                .map(|(j, b)| {
                    b.map_or_else(|| exact(j), |(low, high)| RowValues::Bounds { low, high })
                })
                .collect();
        }
        (0..m).map(exact).collect()
    }

    /// Value `r` of `x Wᵀ` for one activation row `x` [in]: [`HostWeight::matmul`]'s, bit
    /// for bit (the same kernel over one weight row; a row's value does not depend on the
    /// rows around it).
    pub fn value(&self, x: &[f32], r: usize) -> f32 {
        assert_eq!(x.len(), self.inn, "an activation row is not [{}]", self.inn);
        let mut v = [0.0f32; 1];
        self.w.rows_times_x(self.inn, r..r + 1, x, 1, &mut v);
        v[0]
    }

    /// [`HostWeight::matmul_argmax`] over the full product.
    fn argmax_full(&self, x: &[f32], m: usize) -> Vec<u32> {
        let (out, inn) = (self.out, self.inn);
        let block = block_rows(out);
        // Per block: (value, index) of each activation row's maximum over the block.
        thread_local! {
            /// Each thread's block of products, kept between calls (one per step).
            static YT: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        let bests: Vec<Vec<(f32, u32)>> = pool::map(out.div_ceil(block), |b| {
            let rows = b * block..((b + 1) * block).min(out);
            YT.with_borrow_mut(|yt| {
                yt.clear();
                yt.resize(rows.len() * m, 0.0); // [rows, m]
                self.w.rows_times_x(inn, rows.clone(), x, m, yt);
                (0..m)
                    .map(|i| {
                        let col = yt.iter().skip(i).step_by(m);
                        first_max(rows.clone().zip(col.copied()))
                    })
                    .collect()
            })
        });
        (0..m)
            .map(|i| first_max(bests.iter().map(|b| (b[i].1 as usize, b[i].0))).1)
            .collect()
    }
}

/// How finely [`HostWeight::value_bounds`] rounds the activations for its bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rounding {
    /// To 8 bits once, as the greedy pick's stage 1: bounds about `‖w_r‖₁·max|x|/127`
    /// wide (some 9 logits on the demo model), the cheapest pass; they rule out nearly
    /// every token where one arg-max is wanted (a Gumbel draw).
    Once,
    /// Twice (what the first rounding misses, rounded again): bounds some 40x tighter
    /// (0.1-0.3 logits on the demo model) for twice the first stage's arithmetic; what a
    /// top-k set needs.
    Twice,
}

/// One row of `x Wᵀ` for a sampler ([`HostWeight::value_bounds`]).
#[derive(Debug, Clone, PartialEq)]
pub enum RowValues {
    /// The values, as [`HostWeight::matmul`] computes them.
    Exact(Vec<f32>),
    /// `low[r] <= value r <= high[r]`; [`HostWeight::value`] gives a value exactly.
    Bounds { low: Vec<f32>, high: Vec<f32> },
}

/// Of (index, value) pairs, the first holding the largest value, or the first NaN if any,
/// as (value, index).
fn first_max(mut it: impl Iterator<Item = (usize, f32)>) -> (f32, u32) {
    let Some((o, v)) = it.next() else {
        return (f32::NEG_INFINITY, 0);
    };
    let mut best = (v, o as u32);
    for (o, v) in it {
        if !best.0.is_nan() && (v.is_nan() || v > best.0) {
            best = (v, o as u32);
        }
    }
    best
}

/// Output rows per parallel block: a few blocks per thread so uneven blocks even out.
fn block_rows(out: usize) -> usize {
    let threads = pool::threads();
    out.div_ceil(threads * 4).clamp(16, 256).next_multiple_of(2)
}

impl Stored {
    /// `yt[(o - rows.start) * m + i] = W[o] · x[i]` for o in `rows`, i < m.
    fn rows_times_x(
        &self,
        inn: usize,
        rows: std::ops::Range<usize>,
        x: &[f32],
        m: usize,
        yt: &mut [f32],
    ) {
        match self {
            Stored::F32(w) => rows_times_x(w, inn, rows, x, m, yt, Source::Memory),
            Stored::F16(w) => half_kernel::rows_times_x(w, inn, rows, x, m, yt),
            Stored::Blocks(b) | Stored::Rounded(b) => b.rows_times_x(inn, rows, x, m, yt),
        }
    }
}

/// Where the f32 kernels' weights come from, which decides whether they prefetch them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// Streamed from memory once per step: prefetched ahead.
    Memory,
    /// A scratch just written (in L1): a prefetch ahead would fetch unrelated lines.
    Cache,
}

/// `yt[(o - rows.start) * m + i] = W[o] · x[i]` for o in `rows`, i < m.
fn rows_times_x(
    w: &[f32],
    inn: usize,
    rows: std::ops::Range<usize>,
    x: &[f32],
    m: usize,
    yt: &mut [f32],
    source: Source,
) {
    #[cfg(target_arch = "x86_64")]
    let pf = match source {
        Source::Memory => avx2::PREFETCH,
        Source::Cache => 0,
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = source; // the portable code does not prefetch
    #[cfg(target_arch = "x86_64")]
    if m > 1 && has_avx512() {
        // SAFETY: the CPU supports AVX-512F/VL, AVX2 and FMA (checked just above); the
        // function reads and writes only through slices' pointers within their lengths.
        unsafe { avx512::rows_times_x(w, inn, rows, x, m, yt, pf) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU supports AVX2 and FMA (checked just above); the function reads
        // and writes only through bounds-checked slices' pointers within their lengths.
        unsafe { avx2::rows_times_x(w, inn, rows, x, m, yt, pf) };
        return;
    }
    portable_rows_times_x(w, inn, rows, x, m, yt);
}

/// Whether the AVX-512 kernels can run here (the f32 one for 2+ rows, the blocks' one for
/// any row count) and `TOKI_NO_AVX512` is unset.
#[cfg(target_arch = "x86_64")]
pub(crate) fn has_avx512() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        std::env::var_os("TOKI_NO_AVX512").is_none()
            && std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512vl")
            && std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
    })
}

fn portable_rows_times_x(
    w: &[f32],
    inn: usize,
    rows: std::ops::Range<usize>,
    x: &[f32],
    m: usize,
    yt: &mut [f32],
) {
    const L: usize = 8;
    let start = rows.start;
    for o in rows {
        let wr = &w[o * inn..(o + 1) * inn];
        for i in 0..m {
            let xr = &x[i * inn..(i + 1) * inn];
            let mut acc = [0.0f32; L];
            for (wc, xc) in wr.chunks_exact(L).zip(xr.chunks_exact(L)) {
                for l in 0..L {
                    acc[l] += wc[l] * xc[l];
                }
            }
            let tail = inn / L * L;
            let s: f32 = acc.iter().sum::<f32>()
                + wr[tail..]
                    .iter()
                    .zip(&xr[tail..])
                    .map(|(a, b)| a * b)
                    .sum::<f32>();
            yt[(o - start) * m + i] = s;
        }
    }
}

/// The blocking both x86 kernels share: `rows` in blocks of `step` (<= 4) weight rows (a
/// short last block repeats its last row; those results are discarded), and within a block
/// the `m` activation rows in groups of `group(rows left)` (<= 8). `kernel(block, i, g,
/// out)` computes the block's rows times activation rows `i..i + g` into `out[j][..g]`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(clippy::too_many_arguments)] // the kernels' shared walk: its arguments are theirs
fn walk_blocks<'w, T>(
    w: &'w [T],
    inn: usize,
    rows: std::ops::Range<usize>,
    m: usize,
    yt: &mut [f32],
    step: usize,
    group: impl Fn(usize) -> usize,
    mut kernel: impl FnMut([&'w [T]; 4], usize, usize, &mut [[f32; 8]; 4]),
) {
    let mut out = [[0.0f32; 8]; 4];
    let mut o = rows.start;
    while o < rows.end {
        let n = (rows.end - o).min(step);
        let wr: [&[T]; 4] = std::array::from_fn(|j| &w[(o + j.min(n - 1)) * inn..][..inn]);
        let base = (o - rows.start) * m;
        let mut i = 0;
        while i < m {
            let g = group(m - i);
            kernel(wr, i, g, &mut out);
            for (j, r) in out.iter().enumerate().take(n) {
                yt[base + j * m + i..][..g].copy_from_slice(&r[..g]);
            }
            i += g;
        }
        o += n;
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2;

#[cfg(target_arch = "x86_64")]
mod avx512;

mod blocks;
mod half_kernel;
pub(crate) mod math;
#[cfg(target_arch = "x86_64")]
mod pick;
pub(crate) mod pool;
pub use math::silu_times;

#[cfg(test)]
mod tests;
