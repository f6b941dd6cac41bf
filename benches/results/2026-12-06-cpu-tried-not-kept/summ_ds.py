import sys, collections, statistics as st
rows = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    p = line.split()
    if len(p) < 7: continue
    r, arm, cat = p[0], p[1], p[2]
    rows[(r, cat, len([k for k in rows if k[1]==cat]))] if False else None
data = collections.defaultdict(list)
cur = {}
idx = collections.Counter()
lines = [l.split() for l in open(sys.argv[1]) if len(l.split()) >= 7]
# group consecutive triples
groups = [lines[i:i+3] for i in range(0, len(lines) - len(lines)%3, 3)]
mism = 0
per = collections.defaultdict(lambda: collections.defaultdict(list))
for g in groups:
    d = {x[1]: x for x in g}
    cat = g[0][2]
    if len({x[5] for x in g}) != 1: mism += 1
    pl = float(d['plain'][3])
    for arm in ('none', 'ds'):
        per[cat][arm].append(float(d[arm][3]) / pl)
        per[cat][arm+'_tau'].append(float(d[arm][6]))
        per['overall'][arm].append(float(d[arm][3]) / pl)
        per['overall'][arm+'_tau'].append(float(d[arm][6]))
print('prompts', len(groups), 'output mismatches', mism)
for cat, v in per.items():
    print(f"{cat:20s} none {st.median(v['none']):.3f} (tau {st.mean(v['none_tau']):.2f})  ds {st.median(v['ds']):.3f} (tau {st.mean(v['ds_tau']):.2f})  ds/none geo {st.geometric_mean([a/b for a,b in zip(v['ds'], v['none'])]):.3f}  min none {min(v['none']):.2f} ds {min(v['ds']):.2f}")
