"""Median tokens/s per binary and mode over rounds and prompts, and B/A per prompt."""
import statistics, sys
from collections import defaultdict
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
tps = defaultdict(list)
ids = defaultdict(set)
for r, which, mode, cat, t, n, h in rows:
    tps[(which, mode, cat)].append(float(t))
    ids[(mode, cat)].add(h)
for mode in ["plain", "spec"]:
    ratios = []
    for cat in sorted({k[2] for k in tps}):
        a, b = statistics.median(tps[("A", mode, cat)]), statistics.median(tps[("B", mode, cat)])
        ratios.append(b / a)
        print(f"{mode:5} {cat:20} A {a:6.1f} tok/s  B {b:6.1f} tok/s  B/A {b / a:.3f}")
    print(f"{mode:5} median B/A over prompts {statistics.median(ratios):.3f}")
print("outputs identical across binaries and rounds:", all(len(v) == 1 for v in ids.values()))
