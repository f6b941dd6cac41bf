import json, glob, random, collections, sys
sys.path.insert(0,'/tmp/pyt')
from tokenizers import Tokenizer
tok = Tokenizer.from_file('/work/main/models/smollm2-135m-instruct/tokenizer.json')
docs = []
for f in sorted(glob.glob('/work/main/training/data/distilled*.jsonl')):
    for line in open(f):
        j = json.loads(line)
        u = j['messages'][0]['content']; a = j['messages'][1]['content']
        docs.append((u, a))
print(len(docs), 'answers')
bench = [json.loads(l)['prompt'] for l in open('/work/main/benches/prompts.jsonl')]
bp = set(bench)
print('bench prompts in training:', sum(1 for u,a in docs if u in bp))
random.seed(0)
random.shuffle(docs)
test = docs[:300]; train = docs[300:]
enc = lambda s: tok.encode(s, add_special_tokens=False).ids
import pickle
pickle.dump({'train':[(enc(u),enc(a)) for u,a in train], 'test':[(enc(u),enc(a)) for u,a in test]}, open('/tmp/sim/tok.pkl','wb'))
