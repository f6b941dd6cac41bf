import sys, collections, statistics
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
by = collections.defaultdict(list)   # (cat, prompt index) -> [(which, tps, hash)]
idx = collections.Counter()
seen = {}
for r, which, cat, tps, n, h, tau in rows:
    key = (r, which, cat)
    idx[key] += 1
    by[(cat, idx[key], which)].append(float(tps))
    seen.setdefault((cat, idx[key]), set()).add(h)
cats = collections.defaultdict(list)
for (cat, i) in sorted(seen):
    a = statistics.median(by[(cat, i, 'A')]); b = statistics.median(by[(cat, i, 'B')])
    cats[cat].append(b / a)
    print(f"{cat:20s} {i}: A {a:6.1f} B {b:6.1f} tok/s  B/A {b/a:.3f}  same ids: {len(seen[(cat,i)]) == 1}")
allr = []
for c, v in cats.items():
    allr += v
    print(f"{c:20s} median B/A {statistics.median(v):.3f}")
print(f"overall median B/A {statistics.median(allr):.3f} (geomean {statistics.geometric_mean(allr):.3f})")
