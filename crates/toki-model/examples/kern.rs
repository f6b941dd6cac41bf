//! The host matmul kernel over one model pass of SmolLM2-135M's projections (30 layers)
//! and its lm_head, for 1-16 activation rows: time per pass and its ratio to one row, for
//! the weights kept in f32 and in lossless blocks (`HostWeight::compact`: Q4_1-style for
//! the projections, Q8_0-style for the lm_head, as the converted demo model loads).
//! Rounds interleave the row counts and both storages (this machine's speed drifts);
//! medians are printed.
//!
//! `cargo run --release --example kern -p toki-model`
use std::time::Instant;
use toki_model::kernels::HostWeight;

/// [o, i] weights that are exact block values: `d·q + m` with q in 0..16 (Q4_1's form) or
/// `d·q` with q in -127..128 (Q8_0's), d and m powers of two.
fn weights(o: usize, i: usize, q8: bool) -> Vec<f32> {
    (0..o * i)
        .map(|j| {
            let h = (j * 7919) % 1000;
            if q8 {
                (h % 255) as f32 / 1024.0 - 127.0 / 1024.0
            } else {
                (h % 16) as f32 / 1024.0 - 1.0 / 128.0
            }
        })
        .collect()
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    // As the `toki` binary does: this thread is one of the pool's, so each product's
    // parallel loop does not wait on the pool's own threads.
    toki_model::kernels::join_rayon_pool().expect("rayon's global pool");
    let mut shapes = vec![];
    for _ in 0..30 {
        shapes.extend([
            (576usize, 576usize),
            (192, 576),
            (192, 576),
            (576, 576),
            (1536, 576),
            (1536, 576),
            (576, 1536),
        ]);
    }
    shapes.push((49152, 576));
    let last = shapes.len() - 1;
    let stores: Vec<(&str, Vec<HostWeight>)> = ["f32", "blocks"]
        .into_iter()
        .map(|name| {
            let ws = shapes
                .iter()
                .enumerate()
                .map(|(k, &(o, i))| {
                    let w = weights(o, i, k == last);
                    match name {
                        "f32" => HostWeight::new(w, o, i),
                        _ => HostWeight::compact(w, o, i),
                    }
                })
                .collect();
            (name, ws)
        })
        .collect();
    let bytes: Vec<f64> = stores
        .iter()
        .map(|(_, ws)| {
            ws.iter()
                .map(|w| w.bytes_per_weight() * (w.out_features() * w.in_features()) as f64)
                .sum::<f64>()
                / 1e6
        })
        .collect();
    let rows = [1usize, 2, 3, 4, 5, 6, 8, 12, 16];
    let mut times = vec![vec![vec![]; rows.len()]; stores.len()];
    for _round in 0..10 {
        for (r, &m) in rows.iter().enumerate() {
            for (s, (_, ws)) in stores.iter().enumerate() {
                let start = Instant::now();
                for w in ws {
                    let x: Vec<f32> = vec![0.5; m * w.in_features()];
                    std::hint::black_box(w.matmul(&x, m));
                }
                times[s][r].push(start.elapsed().as_secs_f64() * 1e3);
            }
        }
    }
    for ((name, _), (t, mb)) in stores.iter().zip(times.iter().zip(&bytes)) {
        let one = median(&t[0]);
        println!("{name} ({mb:.0} MB per pass):");
        for (tm, m) in t.iter().zip(rows) {
            let ms = median(tm);
            println!(
                "  m{m:2}: {ms:6.1} ms per model pass, {:.2}x one row",
                ms / one
            );
        }
    }
}
