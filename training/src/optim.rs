//! AdamW, the learning-rate schedule and gradient clipping, on host-side f32 parameters.
//!
//! The heads are small (a few MB for the `shared` kind), so their parameters, gradients
//! and moments live on the host: a step is a few vector loops, and a checkpoint holds
//! exactly what resumes the run bit for bit.

/// AdamW (decoupled weight decay, Loshchilov & Hutter), bias-corrected.
#[derive(Debug, Clone, PartialEq)]
pub struct AdamW {
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    pub weight_decay: f32,
    /// First and second moments, one per parameter tensor.
    pub m: Vec<Vec<f32>>,
    pub v: Vec<Vec<f32>>,
    /// Updates applied so far.
    pub t: u64,
}

impl AdamW {
    pub fn new(sizes: &[usize], weight_decay: f32) -> Self {
        Self {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay,
            m: sizes.iter().map(|&n| vec![0.0; n]).collect(),
            v: sizes.iter().map(|&n| vec![0.0; n]).collect(),
            t: 0,
        }
    }

    /// One update of `params` by `grads` at learning rate `lr`. `decay[i]`: whether
    /// tensor i takes weight decay (matrices do, biases do not).
    pub fn step(&mut self, params: &mut [Vec<f32>], grads: &[Vec<f32>], decay: &[bool], lr: f32) {
        self.t += 1;
        let bc1 = 1.0 - self.beta1.powi(self.t as i32);
        let bc2 = 1.0 - self.beta2.powi(self.t as i32);
        for (i, (p, g)) in params.iter_mut().zip(grads).enumerate() {
            let wd = if decay[i] { self.weight_decay } else { 0.0 };
            let (m, v) = (&mut self.m[i], &mut self.v[i]);
            for j in 0..p.len() {
                m[j] = self.beta1 * m[j] + (1.0 - self.beta1) * g[j];
                v[j] = self.beta2 * v[j] + (1.0 - self.beta2) * g[j] * g[j];
                let update = (m[j] / bc1) / ((v[j] / bc2).sqrt() + self.eps);
                p[j] -= lr * (update + wd * p[j]);
            }
        }
    }
}

/// Linear warmup over `warmup` steps to `peak`, then cosine decay to `peak * floor` at
/// `total`.
pub fn learning_rate(step: usize, total: usize, warmup: usize, peak: f32, floor: f32) -> f32 {
    if step < warmup {
        return peak * (step + 1) as f32 / warmup as f32;
    }
    let span = total.saturating_sub(warmup).max(1);
    let progress = ((step - warmup) as f32 / span as f32).min(1.0);
    let cosine = 0.5 * (1.0 + (std::f32::consts::PI * progress).cos());
    peak * (floor + (1.0 - floor) * cosine)
}

/// Scale `grads` so that their global L2 norm is at most `max_norm`; returns the norm
/// before clipping. `max_norm <= 0` leaves them as they are.
pub fn clip_global_norm(grads: &mut [Vec<f32>], max_norm: f32) -> f32 {
    let norm = grads
        .iter()
        .flat_map(|g| g.iter())
        .map(|&x| (x as f64) * (x as f64))
        .sum::<f64>()
        .sqrt() as f32;
    if max_norm > 0.0 && norm > max_norm {
        let s = max_norm / norm;
        grads
            .iter_mut()
            .for_each(|g| g.iter_mut().for_each(|x| *x *= s));
    }
    norm
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_adamw_step_moves_each_weight_by_lr_against_the_gradient_sign() {
        let mut p = vec![vec![1.0, -2.0, 0.5]];
        let g = vec![vec![0.3, -4.0, 0.0]];
        let mut opt = AdamW::new(&[3], 0.0);
        opt.step(&mut p, &g, &[true], 0.1);
        // Bias-corrected first step: update = g / |g| (= sign), 0 where g = 0.
        assert!((p[0][0] - 0.9).abs() < 1e-5);
        assert!((p[0][1] + 1.9).abs() < 1e-5);
        assert_eq!(p[0][2], 0.5);
    }

    #[test]
    fn weight_decay_applies_only_where_asked() {
        let mut p = vec![vec![1.0], vec![1.0]];
        let g = vec![vec![0.0], vec![0.0]];
        let mut opt = AdamW::new(&[1, 1], 0.5);
        opt.step(&mut p, &g, &[true, false], 0.1);
        assert!((p[0][0] - 0.95).abs() < 1e-6);
        assert_eq!(p[1][0], 1.0);
    }

    #[test]
    fn schedule_warms_up_then_decays_to_the_floor() {
        let lr = |s| learning_rate(s, 100, 10, 1.0, 0.1);
        assert!((lr(0) - 0.1).abs() < 1e-6);
        assert!((lr(9) - 1.0).abs() < 1e-6);
        assert!((lr(10) - 1.0).abs() < 1e-6);
        assert!(lr(55) < 1.0 && lr(55) > 0.1);
        assert!((lr(100) - 0.1).abs() < 1e-6);
        assert!((0..99).all(|s| s < 10 || lr(s + 1) <= lr(s)));
    }

    #[test]
    fn clipping_bounds_the_global_norm() {
        let mut g = vec![vec![3.0], vec![4.0]];
        assert_eq!(clip_global_norm(&mut g, 1.0), 5.0);
        assert!((g[0][0] - 0.6).abs() < 1e-6 && (g[1][0] - 0.8).abs() < 1e-6);
        let mut g = vec![vec![0.3, 0.4]];
        clip_global_norm(&mut g, 1.0);
        assert_eq!(g, vec![vec![0.3, 0.4]]);
    }
}
