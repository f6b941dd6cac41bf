//! The lm_head's greedy pick (`HostWeight::matmul_argmax`) over a demo-sized Q8 block
//! matrix [49152, 576], for 1-16 activation rows: median time per call. Run it with and
//! without `TOKI_NO_TWO_STAGE=1` to compare the two-stage pick with the full product.
//! With `--once` or `--twice` it times a sampler's bounds instead
//! (`HostWeight::value_bounds`, the activations rounded once or twice), with `--full` the
//! full product (`HostWeight::matmul`).
//!
//! `cargo run --release --example lmhead -p toki-model [-- --cold]`: with `--cold`, 256 MB
//! are streamed before each call, as a decoding step's forward pass streams the model's
//! weights before the pick (the lm_head then comes from memory, not from cache).
use std::time::Instant;
use toki_model::Rounding;
use toki_model::kernels::HostWeight;

fn main() {
    toki_model::kernels::join_rayon_pool().expect("rayon's global pool");
    let (out, inn) = (49152usize, 576usize);
    // Q8_0-style values d·q, q in -127..=127, d a power of two per block of 32.
    let w: Vec<f32> = (0..out * inn)
        .map(|j| {
            // splitmix64 of the index: no two rows alike.
            let mut z = (j as u64).wrapping_add(0x9e3779b97f4a7c15);
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
            z ^= z >> 31;
            let d = [1.0 / 512.0, 1.0 / 1024.0][(j / 32) % 2];
            ((z % 255) as f32 - 127.0) * d
        })
        .collect();
    let wc = w.clone();
    let w = HostWeight::compact(w, out, inn);
    let flag = |f: &str| std::env::args().any(|a| a == f);
    let cold = flag("--cold");
    let bounds = [("--once", Rounding::Once), ("--twice", Rounding::Twice)]
        .into_iter()
        .find_map(|(f, r)| flag(f).then_some(r));
    let full = flag("--full");
    let mut flush = vec![1u64; if cold { 32 << 20 } else { 0 }]; // 256 MB
    let rows = [1usize, 2, 3, 4, 6, 8, 16];
    let mut times = vec![vec![]; rows.len()];
    let mut seed = 1u64;
    for _ in 0..40 {
        for (r, &m) in rows.iter().enumerate() {
            // Each activation row leans towards one weight row, so that one logit stands
            // out, as in a model's hidden state.
            let x: Vec<f32> = (0..m * inn)
                .map(|i| {
                    seed = seed
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let noise = (seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
                    let target = (seed >> 8) as usize % 1000 * 37 + (i / inn);
                    noise + wc[target * inn + i % inn] * 40.0
                })
                .collect();
            if cold {
                flush.iter_mut().for_each(|v| *v = v.wrapping_mul(3));
                std::hint::black_box(&flush);
            }
            let start = Instant::now();
            match (bounds, full) {
                (Some(r), _) => drop(std::hint::black_box(w.value_bounds(&x, m, r))),
                (None, true) => drop(std::hint::black_box(w.matmul(&x, m))),
                (None, false) => drop(std::hint::black_box(w.matmul_argmax(&x, m))),
            }
            times[r].push(start.elapsed().as_secs_f64() * 1e3);
        }
    }
    for (t, m) in times.iter_mut().zip(rows) {
        t.sort_by(f64::total_cmp);
        println!("m{m}: {:.3} ms (p25 {:.3})", t[t.len() / 2], t[t.len() / 4]);
    }
}
