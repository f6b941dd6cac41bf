use burn::tensor::{Device, Distribution, Tensor};
use std::time::Instant;
fn t4(a: [usize; 4], b: [usize; 4], d: &Device) {
    let x = Tensor::<4>::random(a, Distribution::Default, d);
    let w = Tensor::<4>::random(b, Distribution::Default, d);
    let _ = x.clone().matmul(w.clone()).into_data();
    let t = Instant::now();
    for _ in 0..50 {
        let _ = x.clone().matmul(w.clone()).into_data();
    }
    println!(
        "{a:?}x{b:?}: {:.3} ms",
        t.elapsed().as_secs_f64() * 1e3 / 50.0
    );
}
fn main() {
    let d = Device::flex();
    for (m, k, n) in [
        (1usize, 576usize, 1536usize),
        (2, 576, 1536),
        (2, 1536, 576),
        (2, 576, 576),
        (2, 576, 192),
        (8, 576, 576),
        (2, 576, 49152),
    ] {
        let x = Tensor::<2>::random([m, k], Distribution::Default, &d);
        let w = Tensor::<2>::random([k, n], Distribution::Default, &d);
        let _ = x.clone().matmul(w.clone()).into_data();
        let t = Instant::now();
        for _ in 0..20 {
            let _ = x.clone().matmul(w.clone()).into_data();
        }
        println!(
            "{m}x{k}x{n}: {:.3} ms",
            t.elapsed().as_secs_f64() * 1e3 / 20.0
        );
    }
    for t in [1usize, 2] {
        t4([1, 3, 3 * t, 64], [1, 3, 64, 258], &d);
        t4([1, 3, 3 * t, 258], [1, 3, 258, 64], &d);
    }
}
