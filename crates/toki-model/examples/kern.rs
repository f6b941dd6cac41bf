//! The host matmul kernel over one model pass of SmolLM2-135M's projections (30 layers)
//! and its lm_head, for 1-16 activation rows: time per pass and its ratio to one row.
//! Rounds interleave the row counts (this machine's speed drifts); medians are printed.
//!
//! `cargo run --release --example kern -p toki-model`
use std::time::Instant;
use toki_model::kernels::HostWeight;

fn main() {
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
    let ws: Vec<HostWeight> = shapes
        .iter()
        .map(|&(o, i)| {
            let w = (0..o * i).map(|j| ((j * 7919) % 1000) as f32 * 1e-3);
            HostWeight::new(w.collect(), o, i)
        })
        .collect();
    let rows = [1usize, 2, 3, 4, 6, 8, 12, 16];
    let mut times = vec![vec![]; rows.len()];
    for _round in 0..10 {
        for (t, &m) in times.iter_mut().zip(&rows) {
            let start = Instant::now();
            for w in &ws {
                let x: Vec<f32> = vec![0.5; m * w.in_features()];
                std::hint::black_box(w.matmul(&x, m));
            }
            t.push(start.elapsed().as_secs_f64() * 1e3);
        }
    }
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let one = median(&times[0]);
    for (t, m) in times.iter().zip(rows) {
        let ms = median(t);
        println!(
            "m{m:2}: {ms:6.1} ms per model pass, {:.2}x one row",
            ms / one
        );
    }
}
