//! `toki bench` output: the terminal table, and `--report`'s Markdown file and SVG chart.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};

use super::bench::{PromptResult, Summary};

fn heads(v: &[f64]) -> String {
    let parts: Vec<String> = v.iter().map(|x| format!("{x:.2}")).collect();
    parts.join(" ")
}

/// A Markdown-compatible table: one row per category, then the overall row; with
/// `--control`, the control ratio's median and min and its prompts below 1.00x beside the
/// speedup's.
pub fn table(categories: &BTreeMap<String, Summary>, overall: &Summary) -> String {
    let control = overall.control.is_some();
    let mut s = String::new();
    let _ = write!(
        s,
        "| category | prompts | tau | nodes/step | plain tok/s | spec tok/s | speedup median | min | max | below 1.00x |"
    );
    if control {
        let _ = write!(s, " control median | control min | control below 1.00x |");
    }
    let _ = writeln!(s, " head acceptance |");
    let _ = write!(s, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    if control {
        let _ = write!(s, "---:|---:|---:|");
    }
    let _ = writeln!(s, "---|");
    let rows = categories
        .iter()
        .map(|(c, x)| (c.as_str(), x))
        .chain([("overall", overall)]);
    for (name, x) in rows {
        let _ = write!(
            s,
            "| {name} | {} | {:.2} | {:.2} | {:.1} | {:.1} | {:.2}x | {:.2}x | {:.2}x | {} |",
            x.prompts,
            x.tau,
            x.nodes_per_step,
            x.plain_tokens_per_s,
            x.spec_tokens_per_s,
            x.speedup_median,
            x.speedup_min,
            x.speedup_max,
            x.slower,
        );
        // Every prompt has a control or none does: every row has it where the header does.
        if let Some(c) = &x.control {
            let _ = write!(s, " {:.2}x | {:.2}x | {} |", c.median, c.min, c.slower);
        }
        let _ = writeln!(s, " {} |", heads(&x.head_acceptance));
    }
    s
}

/// Bars of median speedup (with a min-max whisker) and τ per category.
pub fn svg(categories: &BTreeMap<String, Summary>) -> String {
    let (w, h, pad, bar_h) = (720.0, 60.0 + 60.0 * categories.len() as f64, 170.0, 18.0);
    let max_x = categories
        .values()
        .map(|x| {
            x.speedup_max
                .max(x.tau)
                .max(x.control.map_or(0.0, |c| c.max))
        })
        .fold(2.0f64, f64::max)
        .ceil();
    let sx = |v: f64| pad + v / max_x * (w - pad - 30.0);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"13\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    );
    let _ = writeln!(
        s,
        "<text x=\"{pad}\" y=\"20\">speedup over plain decoding (median, min-max) and tau (tokens per base pass)</text>"
    );
    if categories.values().any(|x| x.control.is_some()) {
        let _ = writeln!(
            s,
            "<text x=\"8\" y=\"{}\" fill=\"#888\">grey: control, plain against plain (min-max)</text>",
            h - 30.0
        );
    }
    for t in 0..=max_x as usize {
        let x = sx(t as f64);
        let _ = writeln!(
            s,
            "<line x1=\"{x}\" y1=\"30\" x2=\"{x}\" y2=\"{}\" stroke=\"#ddd\"/><text x=\"{x}\" y=\"{}\" text-anchor=\"middle\">{t}</text>",
            h - 25.0,
            h - 10.0
        );
    }
    let one = sx(1.0);
    let _ = writeln!(
        s,
        "<line x1=\"{one}\" y1=\"30\" x2=\"{one}\" y2=\"{}\" stroke=\"#c33\" stroke-dasharray=\"4 3\"/>",
        h - 25.0
    );
    for (i, (name, x)) in categories.iter().enumerate() {
        let y = 45.0 + 60.0 * i as f64;
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{name}</text>",
            pad - 8.0,
            y + 20.0
        );
        let _ = writeln!(
            s,
            "<rect x=\"{pad}\" y=\"{y}\" width=\"{:.1}\" height=\"{bar_h}\" fill=\"#3a7bd5\"/><text x=\"{:.1}\" y=\"{:.1}\">{:.2}x</text>",
            sx(x.speedup_median) - pad,
            sx(x.speedup_median) + 4.0,
            y + 13.0,
            x.speedup_median
        );
        let wy = y + bar_h / 2.0;
        let _ = writeln!(
            s,
            "<line x1=\"{:.1}\" y1=\"{wy}\" x2=\"{:.1}\" y2=\"{wy}\" stroke=\"black\"/>",
            sx(x.speedup_min),
            sx(x.speedup_max)
        );
        if let Some(c) = &x.control {
            // The control's min-max (plain against plain): the noise band, in grey.
            let cy = y + bar_h - 2.0;
            let _ = writeln!(
                s,
                "<line x1=\"{:.1}\" y1=\"{cy}\" x2=\"{:.1}\" y2=\"{cy}\" stroke=\"#888\" stroke-width=\"3\"><title>control (plain against plain) {:.2}-{:.2}x</title></line>",
                sx(c.min),
                sx(c.max),
                c.min,
                c.max
            );
        }
        let ty = y + bar_h + 4.0;
        let _ = writeln!(
            s,
            "<rect x=\"{pad}\" y=\"{ty}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"#9bc53d\"/><text x=\"{:.1}\" y=\"{:.1}\">tau {:.2}</text>",
            sx(x.tau) - pad,
            bar_h * 0.7,
            sx(x.tau) + 4.0,
            ty + 11.0,
            x.tau
        );
    }
    s.push_str("</svg>\n");
    s
}

/// Creates the report folder (and its parents) if it is not there: `toki bench` calls
/// this before its runs, so a path that cannot be a folder fails at once, not after them.
pub fn prepare(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("--report: creating {}", dir.display()))
}

/// `report.md` (command, tree, table, per-prompt results) and `speedup.svg` into `dir`
/// (other files in it are left alone; those two are replaced).
pub fn write(
    dir: &Path,
    command: &str,
    tree: &str,
    table: &str,
    categories: &BTreeMap<String, Summary>,
    results: &[PromptResult],
) -> Result<()> {
    prepare(dir)?;
    let svg_path = dir.join("speedup.svg");
    super::write_file(&svg_path, svg(categories))?;
    let mut md = format!(
        "# toki bench\n\n```\n{command}\n```\n\ntree: {tree}\n\n{table}\n![speedup and tau by category](speedup.svg)\n\n"
    );
    // The control column only where the run had one (every prompt has it or none does).
    let with_control = results.iter().any(|r| r.control.is_some());
    let (head, rule) = if with_control {
        (" control |", "---:|")
    } else {
        ("", "")
    };
    let _ = writeln!(
        md,
        "| category | prompt | tokens (all repeats) | tau | plain tok/s | spec tok/s | speedup |{head} identical |\n|---|---|---:|---:|---:|---:|---:|{rule}---|"
    );
    for r in results {
        let short: String = r.prompt.chars().take(60).collect();
        let control = r.control.map_or(String::new(), |c| format!(" {c:.2}x |"));
        let _ = writeln!(
            md,
            "| {} | {} | {} | {:.2} | {:.1} | {:.1} | {:.2}x |{control} {} |",
            r.category,
            short.replace('|', "/"),
            r.tokens,
            r.tau,
            r.plain_tokens_per_s,
            r.spec_tokens_per_s,
            r.speedup,
            match r.identical {
                Some(true) => "yes",
                Some(false) => "NO",
                None => "n/a (typical acceptance)",
            }
        );
    }
    let md_path = dir.join("report.md");
    super::write_file(&md_path, md)
}
