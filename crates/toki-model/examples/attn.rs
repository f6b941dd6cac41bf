//! Attention of T new tokens over S cached ones, one layer of the demo model's shape
//! (9 query heads, 3 kv heads, head_dim 64): Burn's tensor ops (flex) against the host
//! kernel (`toki_model::attention`), side by side in one run.
//! `cargo run --example attn -p toki-model`
use burn::tensor::{Device, Distribution, Tensor, activation::softmax};
use std::time::Instant;
use toki_model::attention::{HostAttn, attention};

fn ms(mut f: impl FnMut(), reps: usize) -> f64 {
    f();
    let st = Instant::now();
    for _ in 0..reps {
        f();
    }
    st.elapsed().as_secs_f64() * 1e3 / reps as f64
}

fn main() {
    // As the `toki` binary does: this thread is one of the pool's.
    toki_model::kernels::join_rayon_pool().expect("rayon's global pool");
    let d = Device::flex();
    let (nh, nkv, hd) = (9usize, 3usize, 64usize);
    for s in [128usize, 512, 2048] {
        for t in [1usize, 2, 4, 8, 16] {
            let cap = s + 64;
            let cache = Tensor::<4>::random([1, nkv, cap, hd], Distribution::Default, &d);
            let q = Tensor::<4>::random([1, nkv, (nh / nkv) * t, hd], Distribution::Default, &d);
            let burn = ms(
                || {
                    let k = cache.clone().slice([0..1, 0..nkv, 0..s, 0..hd]);
                    let v = cache.clone().slice([0..1, 0..nkv, 0..s, 0..hd]);
                    let sc = q.clone().matmul(k.swap_dims(2, 3)).mul_scalar(0.125);
                    let p = softmax(sc.reshape([1, nh, t, s]), 3).reshape([1, nkv, 3 * t, s]);
                    let _ = p.matmul(v).into_data();
                },
                50,
            );
            let a = HostAttn {
                n_heads: nh,
                n_kv_heads: nkv,
                head_dim: hd,
                t,
                s,
                capacity: cap,
            };
            let qh: Vec<f32> = (0..nh * t * hd).map(|i| (i % 13) as f32 * 0.01).collect();
            let k: Vec<f32> = (0..nkv * cap * hd)
                .map(|i| (i % 17) as f32 * 0.01)
                .collect();
            let host = ms(
                || {
                    let _ = attention(&qh, &k, &k, a, None);
                },
                50,
            );
            println!(
                "S={s:5} T={t:2}: burn {burn:.3} ms, host {host:.3} ms per layer ({:.1}x)",
                burn / host
            );
        }
    }
}
