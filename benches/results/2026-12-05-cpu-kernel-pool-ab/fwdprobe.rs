// scratch probe (not committed): forward of N rows over a 200-token prefix, repeated.
use burn::tensor::{Device, Int, Tensor, TensorData};
use std::time::Instant;
use toki_decode::{Engine, EngineOptions};
use toki_model::AttnMask;
fn main() {
    toki_model::kernels::join_rayon_pool().unwrap();
    let n: usize = std::env::var("N").unwrap().parse().unwrap();
    let reps: usize = std::env::var("REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let device = Device::flex();
    let engine = Engine::load(
        std::path::Path::new("models/smollm2-135m-instruct"),
        &device,
        &EngineOptions::default(),
    )
    .unwrap();
    let model = engine.model();
    let rope = toki_model::RopeTables::new(model.config(), 512, &device);
    let ids = |n: usize, s: usize| {
        let v: Vec<i64> = (s..s + n).map(|i| ((i * 7919) % 49152) as i64).collect();
        let p: Vec<i64> = (s..s + n).map(|i| i as i64).collect();
        (
            Tensor::<1, Int>::from_data(TensorData::new(v, [n]), &device),
            Tensor::<1, Int>::from_data(TensorData::new(p, [n]), &device),
        )
    };
    let prefix = 200;
    let mut cache = model.new_cache(prefix + 64);
    let (t, p) = ids(prefix, 0);
    let _ = model
        .forward(t, p, &AttnMask::Causal, &mut cache, &rope)
        .into_data();
    let mut times = vec![];
    for _ in 0..reps {
        cache.truncate(prefix);
        let (t, p) = ids(n, prefix);
        let st = Instant::now();
        let h = model.forward(t, p, &AttnMask::Causal, &mut cache, &rope);
        let _ = h.into_data();
        times.push(st.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    eprintln!("N={n} median {:.2} ms", times[reps / 2]);
}
