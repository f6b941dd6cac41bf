#!/usr/bin/env python3
"""Greedy ids of `toki bench --json` runs against the transformers oracle or each other.

A reference check for scripts/gpu-check.sh (Python never runs in the engine's path).

  gpu_compare.py prompts ORACLE.json          -> the oracle's prompts as bench JSONL
  gpu_compare.py oracle ORACLE.json RUN.json  -> each prompt's plain ids vs the oracle
  gpu_compare.py runs A.json B.json           -> the plain ids of the prompts two runs share

`RUN.json` is the last line of `toki bench --json` (its "prompts" rows carry the plain
output ids). Against the oracle a prompt passes if its ids are equal, or first differ at
a step where the oracle's top-2 logit gap is under 1e-3 (a near-tie that another float
order may break the other way: tests/tests/demo_oracle.rs uses the same rule). Two runs
of toki are only reported (first differing step), since both sides may break a tie.
Exit status 1 if an oracle prompt fails.
"""
import json
import sys


def cases(oracle):
    return oracle["prompts"] + oracle.get("extras", [])


def first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def load_run(path):
    with open(path) as f:
        lines = [line for line in f if line.strip()]
    return json.loads(lines[-1])


def main(argv):
    if len(argv) == 3 and argv[1] == "prompts":
        for c in cases(json.load(open(argv[2]))):
            row = {"category": c["category"], "prompt": c["prompt"],
                   "chat": bool(c["chat_template_applied"])}
            print(json.dumps(row))
        return 0
    if len(argv) == 4 and argv[1] == "oracle":
        want = cases(json.load(open(argv[2])))
        got = load_run(argv[3])["prompts"]
        if len(got) != len(want):
            print(f"FAIL: {len(got)} prompts in the run, {len(want)} in the oracle")
            return 1
        failed = 0
        for w, g in zip(want, got):
            ours, theirs = g["output_ids"], w["generated_ids"]
            i = first_diff(ours, theirs)
            margins = w.get("top1_top2_margin_per_step", [])
            if i is None:
                verdict = f"identical ({len(ours)} tokens)"
            else:
                gap = margins[i] if i < len(margins) else float("inf")
                ok = gap < 1e-3
                failed += not ok
                verdict = (f"{'near-tie' if ok else 'FAIL'}: first differs at step {i} "
                           f"(oracle top-2 gap {gap:.4g})")
            print(f"  {w['category']:<22} {verdict}")
        print(f"oracle: {len(want) - failed}/{len(want)} prompts pass")
        return 1 if failed else 0
    if len(argv) == 4 and argv[1] == "runs":
        b = {r["prompt"]: r for r in load_run(argv[3])["prompts"]}
        both = [(x, b[x["prompt"]]) for x in load_run(argv[2])["prompts"] if x["prompt"] in b]
        same = 0
        for x, y in both:
            i = first_diff(x["output_ids"], y["output_ids"])
            same += i is None
            if i is not None:
                print(f"  {x['category']:<22} first differs at step {i}: {x['prompt'][:50]!r}")
        print(f"runs: {same}/{len(both)} prompts in both identical")
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
