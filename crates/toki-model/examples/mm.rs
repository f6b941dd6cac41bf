use burn::tensor::{Device, Distribution, Tensor};
use std::time::Instant;
fn bench(name: &str, a: &Tensor<2>, b: &Tensor<2>) {
    let _ = a.clone().matmul(b.clone()).into_data();
    let t = Instant::now();
    for _ in 0..10 {
        let _ = a.clone().matmul(b.clone()).into_data();
    }
    println!("{name}: {:.3} ms", t.elapsed().as_secs_f64() * 1e3 / 10.0);
}
fn main() {
    let d = Device::flex();
    let (k, n) = (576usize, 1536usize);
    let w = Tensor::<2>::random([k, n], Distribution::Default, &d);
    let wt = Tensor::<2>::random([n, k], Distribution::Default, &d);
    for m in [1usize, 2, 4, 8] {
        let x = Tensor::<2>::random([m, k], Distribution::Default, &d);
        let xt = Tensor::<2>::random([k, m], Distribution::Default, &d);
        bench(&format!("x[{m},{k}] @ W[{k},{n}]"), &x, &w);
        bench(&format!("Wt[{n},{k}] @ xt[{k},{m}]"), &wt, &xt);
    }
}
