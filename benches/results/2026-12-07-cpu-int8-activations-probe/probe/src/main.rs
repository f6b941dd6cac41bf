//! Throughput probe: Q4_1 weights [out, 576] times R activation rows, two ways.
//! f32: each block decoded to f32 in registers (d*q + m), one FMA per weight and row.
//! int: activations rounded to 8-bit blocks (llama.cpp's Q8 activations), weights
//! repacked 16 rows to a vector, VNNI dot products (u8 weights x s8 activations).
use std::arch::x86_64::*;
use std::time::Instant;

const IN: usize = 576;
const NB: usize = IN / 32;

struct Q41 { d: Vec<f32>, m: Vec<f32>, q: Vec<u8> } // per row-block: d, m, 16 bytes (ggml order)

fn make(out: usize, seed: u64) -> Q41 {
    let mut s = seed;
    let mut rnd = || { s ^= s << 13; s ^= s >> 7; s ^= s << 17; s };
    let n = out * NB;
    let d = (0..n).map(|_| 0.001 + (rnd() % 1000) as f32 * 1e-5).collect();
    let m = (0..n).map(|_| -((rnd() % 1000) as f32) * 1e-4).collect();
    let q = (0..n * 16).map(|_| rnd() as u8).collect();
    Q41 { d, m, q }
}

#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn f32_rows(w: &Q41, rows: std::ops::Range<usize>, x: &[f32], r: usize, y: &mut [f32], out: usize) {
    let mask = _mm_set1_epi8(0x0f);
    for o in rows {
        let mut acc = [[_mm512_setzero_ps(); 2]; 8];
        for b in 0..NB {
            let i = o * NB + b;
            let bytes = _mm_loadu_si128(w.q.as_ptr().add(i * 16) as *const __m128i);
            let lo = _mm_and_si128(bytes, mask);
            let hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
            let d = _mm512_set1_ps(w.d[i]);
            let m = _mm512_set1_ps(w.m[i]);
            let w0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(lo)), d, m);
            let w1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(hi)), d, m);
            for k in 0..r {
                let xp = x.as_ptr().add(k * IN + b * 32);
                acc[k][0] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(xp), acc[k][0]);
                acc[k][1] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xp.add(16)), acc[k][1]);
            }
        }
        for k in 0..r {
            y[k * out + o] = _mm512_reduce_add_ps(_mm512_add_ps(acc[k][0], acc[k][1]));
        }
    }
}

/// Repacked: per group of 16 rows and block, 256 bytes (4 x 64): load L, lane j, byte t:
/// low nibble = w[j][8L + t], high nibble = w[j][8L + 4 + t]; and 16 d's, 16 m's.
struct Packed { q: Vec<u8>, d: Vec<f32>, m: Vec<f32> }

fn unpack(w: &Q41, o: usize, b: usize, k: usize) -> u8 {
    let byte = w.q[(o * NB + b) * 16 + (k % 16)];
    if k < 16 { byte & 15 } else { byte >> 4 }
}

fn pack(w: &Q41, out: usize) -> Packed {
    let groups = out / 16;
    let mut q = vec![0u8; groups * NB * 256];
    let mut d = vec![0f32; groups * NB * 16];
    let mut m = vec![0f32; groups * NB * 16];
    for g in 0..groups {
        for b in 0..NB {
            let base = (g * NB + b) * 256;
            for l in 0..4 {
                for j in 0..16 {
                    for t in 0..4 {
                        let o = g * 16 + j;
                        let lo = unpack(w, o, b, 8 * l + t);
                        let hi = unpack(w, o, b, 8 * l + 4 + t);
                        q[base + l * 64 + j * 4 + t] = lo | (hi << 4);
                    }
                }
            }
            for j in 0..16 {
                d[(g * NB + b) * 16 + j] = w.d[(g * 16 + j) * NB + b];
                m[(g * NB + b) * 16 + j] = w.m[(g * 16 + j) * NB + b];
            }
        }
    }
    Packed { q, d, m }
}

/// x rounded per block of 32: q (s8), scale, scale * sum(q).
struct Q8x { q: Vec<i8>, d: Vec<f32>, ds: Vec<f32> }

fn quant(x: &[f32], r: usize) -> Q8x {
    let mut q = vec![0i8; r * IN];
    let mut d = vec![0f32; r * NB];
    let mut ds = vec![0f32; r * NB];
    for k in 0..r {
        for b in 0..NB {
            let blk = &x[k * IN + b * 32..k * IN + b * 32 + 32];
            let amax = blk.iter().fold(0f32, |a, v| a.max(v.abs()));
            let s = amax / 127.0;
            let inv = if s > 0.0 { 1.0 / s } else { 0.0 };
            let mut sum = 0i32;
            for (t, v) in blk.iter().enumerate() {
                let qi = (v * inv).round() as i8;
                q[k * IN + b * 32 + t] = qi;
                sum += qi as i32;
            }
            d[k * NB + b] = s;
            ds[k * NB + b] = s * sum as f32;
        }
    }
    Q8x { q, d, ds }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn int_rows(p: &Packed, groups: std::ops::Range<usize>, x: &Q8x, r: usize, y: &mut [f32], out: usize) {
    let mask = _mm512_set1_epi8(0x0f);
    for g in groups {
        let mut acc = [_mm512_setzero_ps(); 8];
        for b in 0..NB {
            let gb = g * NB + b;
            let qp = p.q.as_ptr().add(gb * 256);
            let mut ws = [_mm512_setzero_si512(); 8];
            for l in 0..4 {
                let v = _mm512_loadu_si512(qp.add(l * 64) as *const _);
                ws[2 * l] = _mm512_and_si512(v, mask);
                ws[2 * l + 1] = _mm512_and_si512(_mm512_srli_epi16(v, 4), mask);
            }
            let dw = _mm512_loadu_ps(p.d.as_ptr().add(gb * 16));
            let mw = _mm512_loadu_ps(p.m.as_ptr().add(gb * 16));
            for k in 0..r {
                let xq = x.q.as_ptr().add(k * IN + b * 32) as *const i32;
                let mut s = _mm512_setzero_si512();
                for (t, wv) in ws.iter().enumerate() {
                    s = _mm512_dpbusd_epi32(s, *wv, _mm512_set1_epi32(xq.add(t).read_unaligned()));
                }
                let dx = _mm512_set1_ps(x.d[k * NB + b]);
                acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, dx), acc[k]);
                acc[k] = _mm512_fmadd_ps(mw, _mm512_set1_ps(x.ds[k * NB + b]), acc[k]);
            }
        }
        for k in 0..r {
            _mm512_storeu_ps(y.as_mut_ptr().add(k * out + g * 16), acc[k]);
        }
    }
}

fn main() {
    let out: usize = std::env::args().nth(1).map(|s| s.parse().unwrap()).unwrap_or(184_320);
    let threads: usize = std::env::args().nth(2).map(|s| s.parse().unwrap()).unwrap_or(2);
    let w = make(out, 7);
    let p = pack(&w, out);
    let mut s = 99u64;
    let x: Vec<f32> = (0..8 * IN)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s % 2001) as f32 - 1000.0) * 1e-3
        })
        .collect();
    // Check the int path against the f32 one, on the rounded x (same sums) and the exact x.
    let xq = quant(&x, 8);
    let xr: Vec<f32> = (0..8 * IN).map(|i| xq.q[i] as f32 * xq.d[i / 32]).collect();
    let (mut yf, mut yi, mut yr) = (vec![0f32; 8 * out], vec![0f32; 8 * out], vec![0f32; 8 * out]);
    unsafe {
        f32_rows(&w, 0..64, &x, 8, &mut yf, out);
        f32_rows(&w, 0..64, &xr, 8, &mut yr, out);
        int_rows(&p, 0..4, &xq, 8, &mut yi, out);
    }
    let (mut e1, mut e2, mut mag) = (0f32, 0f32, 0f32);
    for k in 0..8 {
        for o in 0..64 {
            let i = k * out + o;
            e1 = e1.max((yi[i] - yr[i]).abs());
            e2 = e2.max((yi[i] - yf[i]).abs());
            mag = mag.max(yf[i].abs());
        }
    }
    println!("check: int vs f32 on rounded x max err {e1:.2e}; vs exact x {e2:.2e}; |y| up to {mag:.2e}");
    let groups = out / 16;
    let mut ys: Vec<Vec<f32>> = (0..threads).map(|_| vec![1f32; 8 * out]).collect();
    for r in [1usize, 2, 3, 4, 6, 8] {
        let xq2 = quant(&x[..r * IN], r);
        for way in ["f32", "int"] {
            let mut best = f64::MAX;
            for _ in 0..7 {
                let t = Instant::now();
                std::thread::scope(|sc| {
                    for (th, y) in ys.iter_mut().enumerate() {
                        let (w, p, x, xq2) = (&w, &p, &x, &xq2);
                        sc.spawn(move || {
                            let g0 = groups * th / threads;
                            let g1 = groups * (th + 1) / threads;
                            unsafe {
                                if way == "f32" {
                                    f32_rows(w, g0 * 16..g1 * 16, x, r, y, out)
                                } else {
                                    int_rows(p, g0..g1, xq2, r, y, out)
                                }
                            }
                        });
                    }
                });
                best = best.min(t.elapsed().as_secs_f64());
            }
            println!("rows {r} {way}: {:.3} ms ({:.1} GMAC/s)", best * 1e3, (out * IN * r) as f64 / best / 1e9);
        }
    }
}
