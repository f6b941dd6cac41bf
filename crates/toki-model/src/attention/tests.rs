//! The host attention kernel against the formula, and its bit-for-bit guarantees.

use super::*;
use crate::testing::lcg;

/// The textbook formula, one (head, token) at a time, in f64.
fn reference(q: &[f32], k: &[f32], v: &[f32], a: HostAttn, bias: Option<&[f32]>) -> Vec<f32> {
    let (nh, hd, t, s) = (a.n_heads, a.head_dim, a.t, a.s);
    let group = nh / a.n_kv_heads;
    let mut out = vec![0.0f32; t * nh * hd];
    for h in 0..nh {
        let g = h / group;
        for i in 0..t {
            let qi = &q[(h * t + i) * hd..(h * t + i + 1) * hd];
            let scores: Vec<f64> = (0..s)
                .map(|j| {
                    let d: f64 = (0..hd)
                        .map(|c| f64::from(qi[c] * k[(g * hd + c) * a.capacity + j]))
                        .sum();
                    d / (hd as f64).sqrt() + bias.map_or(0.0, |b| f64::from(b[i * s + j]))
                })
                .collect();
            let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = scores.iter().map(|x| (x - max).exp()).collect();
            let sum: f64 = e.iter().sum();
            for c in 0..hd {
                let o: f64 = (0..s)
                    .map(|j| e[j] / sum * f64::from(v[(g * a.capacity + j) * hd + c]))
                    .sum();
                out[(i * nh + h) * hd + c] = o as f32;
            }
        }
    }
    out
}

#[test]
fn matches_the_formula_with_and_without_a_mask() {
    // Small shapes (the blocks' tails only), and the demo model's head size over more
    // keys than a block, not a whole number of blocks (the AVX2 blocks and the tails).
    let small = HostAttn {
        n_heads: 6,
        n_kv_heads: 2,
        head_dim: 12,
        t: 3,
        s: 9,
        capacity: 11,
    };
    let demo = |t: usize| HostAttn {
        n_heads: 9,
        n_kv_heads: 3,
        head_dim: 64,
        t,
        s: 150,
        capacity: 160,
    };
    for a in [small, demo(1), demo(2), demo(5)] {
        matches_the_formula(a);
    }
}

fn matches_the_formula(a: HostAttn) {
    let q = lcg(a.n_heads * a.t * a.head_dim, 1);
    let k = lcg(a.n_kv_heads * a.capacity * a.head_dim, 2);
    let v = lcg(k.len(), 3);
    // New token i (row s - t + i) sees the prefix and new tokens 0 and i only.
    let bias: Vec<f32> = (0..a.t * a.s)
        .map(|x| {
            let (i, j) = (x / a.s, x % a.s);
            let new = j.checked_sub(a.s - a.t);
            if new.is_none_or(|n| n == 0 || n == i) {
                0.0
            } else {
                f32::NEG_INFINITY
            }
        })
        .collect();
    for b in [None, Some(&bias[..])] {
        let got = attention(&q, &k, &v, a, b);
        let want = reference(&q, &k, &v, a, b);
        let diff = got
            .iter()
            .zip(&want)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max);
        assert!(diff < 1e-5, "{a:?}: max difference {diff}");
    }
}

#[test]
fn units_follow_kv_groups_and_thread_shares() {
    assert_eq!(units(9, 3, 2), vec![(0, 3), (3, 2), (5, 1), (6, 3)]);
    assert_eq!(units(9, 3, 1), vec![(0, 3), (3, 3), (6, 3)]);
    assert_eq!(units(8, 8, 2), vec![(0, 4), (4, 4)]);
    assert_eq!(units(4, 1, 2), vec![(0, 1), (1, 1), (2, 1), (3, 1)]);
}

/// Heads that share a kv head and attend together (one pass over the keys and values
/// for all their rows) give the same bits as each head over its own copy of the kv head,
/// for a plain step and tree steps of 2-7 tokens, over full key blocks and a tail.
#[test]
fn grouped_heads_attend_bit_for_bit_as_one_head_each() {
    let (nh, nkv, hd, s, cap) = (9, 3, 64, 150, 160);
    for t in [1, 2, 4, 7] {
        let q = lcg(nh * t * hd, 11);
        let k = lcg(nkv * hd * cap, 12); // [nkv, hd, cap]
        let v = lcg(nkv * cap * hd, 13); // [nkv, cap, hd]
        let bias: Vec<f32> = (0..t * s)
            .map(|x| {
                if (x / s + x % s) % 5 == 1 {
                    f32::NEG_INFINITY
                } else {
                    0.0
                }
            })
            .collect();
        let group = nh / nkv;
        // Each head's own copy of its kv head.
        let copy = |x: &[f32]| -> Vec<f32> {
            (0..nh)
                .flat_map(|h| x[(h / group) * hd * cap..(h / group + 1) * hd * cap].to_vec())
                .collect()
        };
        let (k1, v1) = (copy(&k), copy(&v));
        let grouped = HostAttn {
            n_heads: nh,
            n_kv_heads: nkv,
            head_dim: hd,
            t,
            s,
            capacity: cap,
        };
        let alone = HostAttn {
            n_kv_heads: nh,
            ..grouped
        };
        let got = attention(&q, &k, &v, grouped, Some(&bias));
        let want = attention(&q, &k1, &v1, alone, Some(&bias));
        for (x, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.to_bits(), w.to_bits(), "t {t}, value {x}: {g} vs {w}");
        }
    }
}

/// Where the CPU has AVX-512, its loops (several rows per loaded vector) give the same
/// bits as the AVX2 loops (one row at a time), for 1-13 rows.
#[cfg(target_arch = "x86_64")]
#[test]
fn avx512_and_avx2_loops_agree_bit_for_bit() {
    if !(wide_loops(64)
        && std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("fma"))
    {
        return;
    }
    let (hd, s, cap) = (64, 200, 256);
    let keys = lcg(hd * cap, 21);
    let values = lcg(cap * hd, 22);
    for (rows, t) in [(1, 1), (3, 1), (6, 2), (12, 4), (13, 13)] {
        let q = lcg(rows * hd, 23);
        let bias: Vec<f32> = (0..t * s)
            .map(|x| if x % 7 == 3 { f32::NEG_INFINITY } else { 0.0 })
            .collect();
        let run = |wide: bool| {
            let r = Rows {
                q: &q,
                keys: &keys,
                values: &values[..s * hd],
                capacity: cap,
                bias: Some(&bias),
                t,
                s,
                hd,
                scale: 0.125,
                wide,
            };
            // SAFETY: AVX2 and FMA are present (checked above).
            unsafe { r.run_avx2() }
        };
        let (wide, narrow) = (run(true), run(false));
        for (x, (a, b)) in wide.iter().zip(&narrow).enumerate() {
            assert_eq!(
                a.to_bits(),
                b.to_bits(),
                "{rows} rows, value {x}: {a} vs {b}"
            );
        }
    }
}

/// A token's output is the same bits whether it attends alone over its keys in a row
/// (plain decoding) or as one row of a tree step whose visible keys sit among hidden
/// ones, shifted across a block boundary: tree verification computes exactly what plain
/// decoding would. Head sizes 64 (the AVX2 blocks) and 12 (the tails).
#[test]
fn a_token_attends_bit_for_bit_alone_or_among_hidden_keys() {
    for hd in [64, 12] {
        let (nh, nkv, seen, hidden_at, hidden) = (2, 1, 70, 60, 6);
        // Plain: one token over `seen` keys.
        let k = lcg(nkv * hd * seen, 5); // [hd, seen]
        let v = lcg(nkv * seen * hd, 6); // [seen, hd]
        let q = lcg(nh * hd, 7); // [nh, 1, hd]
        let one = HostAttn {
            n_heads: nh,
            n_kv_heads: nkv,
            head_dim: hd,
            t: 1,
            s: seen,
            capacity: seen,
        };
        let alone = attention(&q, &k, &v, one, None);
        // Tree step: three tokens over the same keys with `hidden` others inserted at
        // `hidden_at`; the middle token (1) is ours and sees all but the inserted ones.
        let s = seen + hidden;
        let at = |j: usize| {
            if j < hidden_at {
                Some(j)
            } else {
                j.checked_sub(hidden)
            }
        };
        let visible = |j: usize| !(hidden_at..hidden_at + hidden).contains(&j);
        let junk = lcg(s * hd * 2, 8);
        let mut kt = vec![0.0; hd * s];
        let mut vt = vec![0.0; s * hd];
        for j in 0..s {
            for c in 0..hd {
                let src = at(j).filter(|_| visible(j));
                kt[c * s + j] = src.map_or(junk[j * hd + c], |jj| k[c * seen + jj]);
                vt[j * hd + c] = src.map_or(junk[s * hd + j * hd + c], |jj| v[jj * hd + c]);
            }
        }
        let others = lcg(nh * 3 * hd, 9);
        let mut qt = vec![0.0; nh * 3 * hd]; // [nh, 3, hd]
        for h in 0..nh {
            for i in 0..3 {
                let dst = &mut qt[(h * 3 + i) * hd..][..hd];
                match i {
                    1 => dst.copy_from_slice(&q[h * hd..][..hd]),
                    _ => dst.copy_from_slice(&others[(h * 3 + i) * hd..][..hd]),
                }
            }
        }
        let bias: Vec<f32> = (0..3 * s)
            .map(|x| match (x / s, visible(x % s)) {
                (1, false) => f32::NEG_INFINITY,
                _ => 0.0,
            })
            .collect();
        let tree = HostAttn {
            t: 3,
            s,
            capacity: s,
            ..one
        };
        let got = attention(&qt, &kt, &vt, tree, Some(&bias));
        let row = &got[nh * hd..2 * nh * hd];
        for (c, (g, w)) in row.iter().zip(&alone).enumerate() {
            assert_eq!(g.to_bits(), w.to_bits(), "hd {hd}, value {c}: {g} vs {w}");
        }
    }
}
