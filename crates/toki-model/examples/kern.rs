use std::time::Instant;
use toki_model::kernels::HostWeight;
fn main() {
    // One model pass worth of projections (SmolLM2-135M: 30 layers) + the lm_head.
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
            HostWeight::new(
                (0..o * i)
                    .map(|j| ((j * 7919) % 1000) as f32 * 1e-3)
                    .collect(),
                o,
                i,
            )
        })
        .collect();
    for m in [1usize, 2, 4, 6, 8, 12, 16] {
        let run = || {
            for w in &ws {
                let x: Vec<f32> = vec![0.5; m * w.in_features()];
                std::hint::black_box(w.matmul(&x, m));
            }
        };
        run();
        let t = Instant::now();
        for _ in 0..5 {
            run();
        }
        println!(
            "m{m}: {:.1} ms per model pass (projections + lm_head)",
            t.elapsed().as_secs_f64() * 1e3 / 5.0
        );
    }
}
