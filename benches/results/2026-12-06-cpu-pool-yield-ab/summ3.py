import sys, collections, statistics as st, math
rows=[l.split() for l in open(sys.argv[1]) if l[0].isdigit()]
base=sys.argv[2] if len(sys.argv)>2 else 'old'
# key: (mode, cat, promptidx) -> arm -> list of tok/s
d=collections.defaultdict(lambda: collections.defaultdict(list))
hashes=collections.defaultdict(set)
cnt=collections.Counter()
for r,arm,mode,cat,tps,n,h,tau in rows:
    cnt[(r,arm,mode,cat)]+=1
    key=(mode,cat,cnt[(r,arm,mode,cat)])
    d[key][arm].append(float(tps)); hashes[(cat,cnt[(r,arm,mode,cat)])].add(h)
arms=sorted({a for k in d for a in d[k]})
print('distinct outputs per prompt:', max(len(v) for v in hashes.values()))
for mode in ('plain','spec'):
    for arm in arms:
        rat=[st.median(d[k][arm])/st.median(d[k][base]) for k in d if k[0]==mode and d[k][arm] and d[k][base]]
        print(mode, arm, 'median ratio vs', base, round(st.median(rat),3), 'geo', round(math.exp(sum(map(math.log,rat))/len(rat)),3), 'n', len(rat))
