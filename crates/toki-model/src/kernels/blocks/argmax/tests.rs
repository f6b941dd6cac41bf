//! The two stages against the full product: picks, bounds, odd shapes.

use crate::kernels::{HostWeight, RowValues, Stored};
use crate::testing::lcg;

/// [out, inn] Q8-style weights `d·q`, q in -127..=127, d a power of two per block.
fn q8_weights(out: usize, inn: usize, seed: u64) -> Vec<f32> {
    let noise = lcg(out * inn + out * inn / 32, seed);
    let (q, d) = noise.split_at(out * inn);
    q.iter()
        .enumerate()
        .map(|(i, &u)| {
            let scale =
                [1.0 / 512.0, 1.0 / 1024.0, 1.0 / 2048.0][((d[i / 32] + 0.5) * 2.99) as usize];
            ((u * 254.0).round().clamp(-127.0, 127.0)) * scale
        })
        .collect()
}

/// The first index of the largest value of each row of `y` [m, out].
fn first_max(y: &[f32], out: usize) -> Vec<u32> {
    y.chunks(out)
        .map(|r| {
            let max = r.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            r.iter().position(|&v| v == max).unwrap() as u32
        })
        .collect()
}

/// The two stages pick the full product's arg-max, ties to the first index included:
/// a row repeated (an exact tie), a row one step of q away (a near tie), activations
/// that point at those rows, and random ones; 68 activation rows in sets of 1-9 (the
/// product of each set checked through `matmul_argmax` too).
#[test]
fn two_stage_argmax_is_the_full_products() {
    if !super::available() {
        return;
    }
    let (out, inn) = (4096 + 7, 576);
    let mut w = q8_weights(out, inn, 3);
    let row3 = w[3 * inn..4 * inn].to_vec();
    w[10 * inn..11 * inn].copy_from_slice(&row3); // an exact tie with row 3
    let mut near = row3.clone();
    near[100] += 1.0 / 2048.0 * if near[100] > 0.0 { -1.0 } else { 1.0 };
    w[4000 * inn..4001 * inn].copy_from_slice(&near); // a near tie
    // Row 5 starts with a block holding q = -128 (d = 1/1024): the offset arithmetic
    // of stage 1 must take it as the others.
    for (j, v) in w[5 * inn..5 * inn + 32].iter_mut().enumerate() {
        *v = if j == 0 {
            -128.0
        } else {
            ((j * 37) % 255) as f32 - 127.0
        } / 1024.0;
    }
    let row5 = w[5 * inn..6 * inn].to_vec();
    let blocks = HostWeight::compact(w.clone(), out, inn);
    let (Stored::Blocks(b), Some((stats, _))) = (&blocks.w, blocks.row_stats.as_deref()) else {
        panic!("the lm_head-sized Q8 weight takes the two stages");
    };
    let plain = HostWeight::new(w, out, inn);
    let (mut taken, mut taken_together) = (0, 0);
    for m in [1, 2, 5, 9] {
        for seed in 0..4u64 {
            let mut x = lcg(m * inn, 100 + seed * 10 + m as u64);
            // Point every activation row at row 3 (and so at 10 and 4000), or at 5.
            let target = [Some(&row3), None, Some(&row5), None][seed as usize];
            if let Some(t) = target {
                for xi in x.chunks_mut(inn) {
                    xi.iter_mut()
                        .zip(t)
                        .for_each(|(v, w)| *v = *v * 0.05 + w * 400.0);
                }
            }
            let want = first_max(&plain.matmul(&x, m), out);
            match seed {
                0 => assert!(want.iter().all(|&r| r == 3 || r == 4000), "{want:?}"),
                2 => assert!(want.iter().all(|&r| r == 5), "{want:?}"),
                _ => {}
            }
            // Each row alone, and all of them together (stage 1 in groups of 8).
            for (i, xi) in x.chunks(inn).enumerate() {
                if let Some(got) = b.argmax_two_stage(stats, out, xi, 1)[0] {
                    assert_eq!(got, want[i], "m={m} seed={seed} row {i}");
                    taken += 1;
                }
            }
            let together = b.argmax_two_stage(stats, out, &x, m);
            for (i, got) in together.into_iter().enumerate() {
                if let Some(got) = got {
                    assert_eq!(got, want[i], "m={m} seed={seed} row {i} of {m}");
                    taken_together += 1;
                }
            }
            assert_eq!(blocks.matmul_argmax(&x, m), want, "m={m} seed={seed}");
        }
    }
    assert!(taken >= 51, "the two stages ran for {taken} of 68 rows");
    assert_eq!(taken_together, taken, "rows alone and together");
    // Not finite, or all zeros: the full product, for that row only.
    let zeros = vec![0.0; inn];
    assert!(b.argmax_two_stage(stats, out, &zeros, 1)[0].is_none());
    let mut nan = lcg(3 * inn, 7);
    nan[inn + 5] = f32::NAN;
    let picks = b.argmax_two_stage(stats, out, &nan, 3);
    assert!(picks[0].is_some() && picks[1].is_none() && picks[2].is_some());
    assert_eq!(blocks.matmul_argmax(&nan, 3), plain.matmul_argmax(&nan, 3));
    // Two such rows among four: their full products (one pass for both) land in their
    // places; two calls, so that both ways run (the timer alternates while it times).
    let mut mixed = lcg(4 * inn, 9);
    mixed[5] = f32::INFINITY;
    mixed[2 * inn + 100] = f32::NEG_INFINITY;
    let picks = b.argmax_two_stage(stats, out, &mixed, 4);
    assert!(picks[0].is_none() && picks[1].is_some() && picks[2].is_none());
    let want = plain.matmul_argmax(&mixed, 4);
    assert_ne!(
        want[0], want[2],
        "rows 0 and 2 must tell their places apart"
    );
    for _ in 0..2 {
        assert_eq!(blocks.matmul_argmax(&mixed, 4), want);
    }
}

/// Stage 1's bounds hold every value of the full product, rounded once or twice (then
/// 20x tighter at least), and `value` gives the full product's bits; a row the bounds
/// do not apply to (all zeros) gets its values.
#[test]
fn bounds_hold_the_full_products_values() {
    use crate::kernels::Rounding::{Once, Twice};
    if !super::available() {
        return;
    }
    let (out, inn) = (4096 + 7, 17 * 32);
    let blocks = HostWeight::compact(q8_weights(out, inn, 5), out, inn);
    let Some((stats, _)) = blocks.row_stats.as_deref() else {
        panic!("the two stages apply");
    };
    for (m, rounding) in [1, 3, 9].into_iter().flat_map(|m| [(m, Once), (m, Twice)]) {
        let x = lcg(m * inn, 70 + m as u64);
        let full = blocks.matmul(&x, m);
        for (j, row) in blocks.value_bounds(&x, m, rounding).iter().enumerate() {
            let (xj, y) = (&x[j * inn..][..inn], &full[j * out..][..out]);
            let RowValues::Bounds { low, high } = row else {
                panic!("m={m}: no bounds for row {j}");
            };
            // Rounded once: the arg-max's bound; twice: about 38x tighter.
            let max = xj.iter().fold(0.0f32, |a, v| a.max(v.abs()));
            let once = 1.01 * (0.51 * max / 127.0 + 1e-4 * max);
            let most = if rounding == Once { once } else { once / 20.0 };
            for r in 0..out {
                assert!(
                    low[r] <= y[r] && y[r] <= high[r],
                    "m={m} {rounding:?} row {j} value {r}"
                );
                let width = high[r] - low[r];
                assert!(width.is_finite(), "m={m} row {j} value {r}");
                assert!(
                    width <= 2.0 * stats.l1[r] * most,
                    "m={m} {rounding:?} row {j} value {r}"
                );
            }
            for r in [0, 1, 2000, out - 1] {
                assert_eq!(blocks.value(xj, r).to_bits(), y[r].to_bits(), "value {r}");
            }
        }
    }
    let zeros = vec![0.0; inn];
    let rows = blocks.value_bounds(&zeros, 1, Twice);
    assert_eq!(rows, vec![RowValues::Exact(blocks.matmul(&zeros, 1))]);
}

/// Rows of an odd number of blocks (stage 1's last block alone), groups of 1-8
/// activation rows and more than one group.
#[test]
fn two_stage_argmax_takes_odd_blocks_and_many_rows() {
    if !super::available() {
        return;
    }
    let (out, inn) = (4096, 17 * 32);
    let w = q8_weights(out, inn, 11);
    let blocks = HostWeight::compact(w.clone(), out, inn);
    let (Stored::Blocks(b), Some((stats, _))) = (&blocks.w, blocks.row_stats.as_deref()) else {
        panic!("the two stages apply");
    };
    let plain = HostWeight::new(w, out, inn);
    for m in [1, 3, 8, 11] {
        let x = lcg(m * inn, 40 + m as u64);
        let want = first_max(&plain.matmul(&x, m), out);
        let got = b.argmax_two_stage(stats, out, &x, m);
        assert!(got.iter().all(Option::is_some), "m={m}: {got:?}");
        let got: Vec<u32> = got.into_iter().flatten().collect();
        assert_eq!(got, want, "m={m}");
    }
}
