use std::time::Instant;
use burn::tensor::{Device, Int, Tensor, TensorData};
use toki_model::AttnMask;
mod common;
fn main() {
    common::join_rayon_pool();
    let device = Device::flex();
    let engine = common::load_engine(&device).unwrap();
    let model = engine.model();
    let rope = toki_model::RopeTables::new(model.config(), 512, &device);
    let ids = |v: Vec<i64>| { let n = v.len(); Tensor::<1, Int>::from_data(TensorData::new(v, [n]), &device) };
    let mut cache = model.new_cache(512);
    let h = model.forward(ids((0..200).map(|i| (i * 7919 % 49152) as i64).collect()), ids((0..200).collect()), &AttnMask::Causal, &mut cache, &rope);
    let _ = h.into_data();
    let mut line = String::new();
    for t in [1usize, 2, 4] {
        let mut times = vec![];
        for r in 0..300 {
            let st = Instant::now();
            let h = model.forward(ids((0..t).map(|i| ((i + r) * 31 % 49152) as i64).collect()), ids((200..200 + t as i64).collect()), &AttnMask::Causal, &mut cache, &rope);
            toki_decode::greedy_tokens(model, h).unwrap();
            times.push(st.elapsed().as_secs_f64() * 1e3);
            cache.truncate(200);
        }
        times.sort_by(f64::total_cmp);
        line += &format!("T={t} {:.3} ", times[150]);
    }
    println!("{line}");
}
