import pickle, collections, sys, json
sys.path.insert(0, '/tmp/sim')
d = pickle.load(open('/tmp/sim/tok.pkl','rb'))
docs = d['train'] + d['test']
MAXN, MINN, L = int(sys.argv[3]) if len(sys.argv)>3 else 4, int(sys.argv[2]) if len(sys.argv)>2 else 2, 8
EOS = 2
corpus = []
for u,a in docs:
    corpus.extend(a); corpus.append(EOS); corpus.append(-1)
idx = {n: collections.defaultdict(list) for n in range(1, MAXN+1)}
for n in range(1, MAXN+1):
    for i in range(len(corpus)-n):
        g = tuple(corpus[i:i+n])
        if -1 in g: continue
        idx[n][g].append(i+n)
def corpus_chain(h):
    for n in range(MAXN, MINN-1, -1):
        if len(h) < n: continue
        pos = idx[n].get(tuple(h[-n:]))
        if not pos: continue
        chain = []; cur = pos
        for k in range(L):
            c = collections.Counter(corpus[p] for p in cur if p < len(corpus) and corpus[p] != -1)
            if not c: break
            t, cnt = c.most_common(1)[0]
            chain.append(t); cur = [p+1 for p in cur if corpus[p] == t]
        return n, chain
    return 0, []
def prompt_chain(h):
    ln = len(h)
    for n in range(4, 1, -1):
        if ln <= n: continue
        suf = h[-n:]
        for i in range(ln-n-1, -1, -1):
            if h[i:i+n] == suf:
                fr = i+n; toks = []
                for k in range(fr, fr+L):
                    toks.append(h[k] if k < ln else toks[k-ln])
                return n, toks
    return 0, []
def acc(chain, target):
    k = 0
    while k < len(chain) and k < len(target) and chain[k] == target[k]: k += 1
    return k
per = collections.defaultdict(collections.Counter)
for line in open(sys.argv[1]):
    j = json.loads(line); u = j['prompt_ids']; a = j['output_ids']; cat = j['category']
    for t in range(len(a)):
        h = u + a[:t+1]; tgt = a[t+1:]
        pn, pc = prompt_chain(h); cn, cc = corpus_chain(h)
        ap = acc(pc, tgt); ac = acc(cc, tgt)
        for key in (cat, 'all'):
            s = per[key]; s['n'] += 1; s['p'] += ap; s['c'] += ac; s['best'] += max(ap, ac)
            s['rule'] += ap if (pn >= cn and pn > 0) else ac
            s['c1'] += ac >= 1; s['p1'] += ap >= 1
for k, s in per.items():
    n = s['n']
    print(f"{k:20s} pos {n:5d}: accepted per position: prompt {s['p']/n:.2f} corpus {s['c']/n:.2f} rule {s['rule']/n:.2f} best {s['best']/n:.2f} | >=1 right: prompt {s['p1']/n:.2f} corpus {s['c1']/n:.2f}")
print('--- step simulation (lookup only, no heads): tau')
st = collections.defaultdict(collections.Counter)
for line in open(sys.argv[1]):
    j = json.loads(line); u = j['prompt_ids']; a = j['output_ids']; cat = j['category']
    for mode in ('prompt', 'corpus', 'rule'):
        t = 0
        while t < len(a):
            h = u + a[:t+1]; tgt = a[t+1:]
            pn, pc = prompt_chain(h); cn, cc = corpus_chain(h)
            if mode == 'prompt': k = acc(pc, tgt)
            elif mode == 'corpus': k = acc(cc, tgt)
            else: k = acc(pc, tgt) if (pn >= cn and pn > 0) else acc(cc, tgt)
            for key in (cat, 'all'):
                st[key][mode+'_steps'] += 1; st[key][mode+'_tok'] += k + 1
            t += k + 1
for k, s in st.items():
    print(f"{k:20s} " + ' '.join(f"{m} {s[m+'_tok']/s[m+'_steps']:.2f}" for m in ('prompt','corpus','rule')))
