import pickle, collections, sys, json
d = pickle.load(open('/tmp/sim/tok.pkl','rb'))
docs = d['train'] + d['test']
MAXN, MINN, L = 4, 2, 8
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
            chain.append((t, cnt/len(cur), len(cur))); cur = [p+1 for p in cur if corpus[p] == t]
        return n, chain
    return 0, []
# per depth j: accuracy given previous right, binned by share
bins = collections.defaultdict(lambda: [0,0])
for line in open(sys.argv[1]):
    j = json.loads(line); u = j['prompt_ids']; a = j['output_ids']; cat = j['category']
    for t in range(len(a)):
        h = u + a[:t+1]; tgt = a[t+1:]
        n, cc = corpus_chain(h)
        for k, (tok, share, cnt) in enumerate(cc):
            if k >= len(tgt): break
            sb = min(int(share*5), 4)
            cb = 0 if cnt < 2 else 1 if cnt < 5 else 2 if cnt < 20 else 3
            key = (min(k,2), sb)
            bins[key][0] += tok == tgt[k]; bins[key][1] += 1
            key2 = ('n', n, min(k,2))
            bins[key2][0] += tok == tgt[k]; bins[key2][1] += 1
            key3 = ('cnt', cb, sb)
            bins[key3][0] += tok == tgt[k]; bins[key3][1] += 1
            if tok != tgt[k]: break
for k in sorted(bins, key=str):
    h, n = bins[k]
    print(k, n, round(h/n, 2))
