"""How far 8-bit activations (llama.cpp's Q8 rounding of each projection's input, blocks of
32, scale amax/127, round to nearest) move SmolLM2-135M's logits and greedy tokens from the
f32 reference (the HF oracle). Reference check only (numpy, float32), never in the engine.

  python3 sim.py [MODEL_DIR] [ORACLE_JSON] [MODES]
  MODES: comma-separated of f32 (no rounding), q8 (one 8-bit part), q8x2 / q8x3 (the input
  split into two / three 8-bit parts, each rounding what the ones before it left).
Per oracle prompt: the largest difference from the oracle's top-5 logits at the first
generated position, and the first step where greedy decoding (fed the oracle's tokens)
picks another token than the oracle, with the oracle's top-2 gap there."""
import json, struct, sys
import numpy as np

M = sys.argv[1] if len(sys.argv) > 1 else 'models/smollm2-135m-instruct'
ORACLE = sys.argv[2] if len(sys.argv) > 2 else '../shared/oracle/oracle.json'
f = open(M + '/model.safetensors', 'rb'); n = struct.unpack('<Q', f.read(8))[0]
hdr = json.loads(f.read(n)); base = 8 + n
raw = open(M + '/model.safetensors', 'rb').read()
W = {}
for k, v in hdr.items():
    if k == '__metadata__': continue
    a, b = v['data_offsets']
    W[k] = np.frombuffer(raw, dtype=np.float32, count=(b - a) // 4, offset=base + a).reshape(v['shape'])
L, D, H, KV, HD = 30, 576, 9, 3, 64
eps, theta = 1e-5, 100000.0

def q8(x):  # [R, in] -> rounded copy (per row, blocks of 32)
    r, i = x.shape
    b = x.reshape(r, i // 32, 32)
    s = np.abs(b).max(axis=2, keepdims=True) / 127.0
    inv = np.where(s > 0, 1.0 / np.where(s > 0, s, 1), 0)
    return (np.round(b * inv) * s).reshape(r, i).astype(np.float32)

def lin(x, w, mode):
    if mode == 'q8': x = q8(x)
    elif mode == 'q8x2': a = q8(x); x = a + q8(x - a)
    elif mode == 'q8x3': a = q8(x); b = q8(x - a); x = a + b + q8(x - a - b)
    return x @ w.T

def rms(x, w):
    return (x / np.sqrt((x.astype(np.float64) ** 2).mean(-1, keepdims=True) + eps)).astype(np.float32) * w

inv_freq = 1.0 / theta ** (np.arange(0, HD, 2) / HD)
def rope(x, pos):  # x [T, nh, HD]
    ang = np.outer(pos, inv_freq); cos = np.cos(np.concatenate([ang, ang], -1))[:, None, :].astype(np.float32)
    sin = np.sin(np.concatenate([ang, ang], -1))[:, None, :].astype(np.float32)
    x1, x2 = x[..., :HD // 2], x[..., HD // 2:]
    return x * cos + np.concatenate([-x2, x1], -1) * sin

def forward(ids, pos0, cache, mode):
    x = W['model.embed_tokens.weight'][ids]
    T = len(ids); pos = np.arange(pos0, pos0 + T)
    for l in range(L):
        p = f'model.layers.{l}.'
        h = rms(x, W[p + 'input_layernorm.weight'])
        q = lin(h, W[p + 'self_attn.q_proj.weight'], mode).reshape(T, H, HD)
        k = lin(h, W[p + 'self_attn.k_proj.weight'], mode).reshape(T, KV, HD)
        v = lin(h, W[p + 'self_attn.v_proj.weight'], mode).reshape(T, KV, HD)
        q, k = rope(q, pos), rope(k, pos)
        ck, cv = cache[l]
        ck = k if ck is None else np.concatenate([ck, k]); cv = v if cv is None else np.concatenate([cv, v])
        cache[l] = (ck, cv)
        S = ck.shape[0]
        kk = np.repeat(ck, H // KV, axis=1); vv = np.repeat(cv, H // KV, axis=1)
        att = np.einsum('thd,shd->hts', q, kk) / np.sqrt(HD)
        mask = (np.arange(S)[None, :] <= (pos[:, None]))
        att = np.where(mask[None], att, -np.inf)
        att = np.exp(att - att.max(-1, keepdims=True)); att /= att.sum(-1, keepdims=True)
        o = np.einsum('hts,shd->thd', att.astype(np.float32), vv).reshape(T, D)
        x = x + lin(o, W[p + 'self_attn.o_proj.weight'], mode)
        h = rms(x, W[p + 'post_attention_layernorm.weight'])
        g = lin(h, W[p + 'mlp.gate_proj.weight'], mode); u = lin(h, W[p + 'mlp.up_proj.weight'], mode)
        x = x + lin((g / (1 + np.exp(-g))) * u, W[p + 'mlp.down_proj.weight'], mode)
    h = rms(x, W['model.norm.weight'])
    return h @ W['model.embed_tokens.weight'].T  # the lm_head exact in both modes

o = json.load(open(ORACLE))
MODES = sys.argv[3].split(',') if len(sys.argv) > 3 else ['f32', 'q8', 'q8x2', 'q8x3']
for ci, c in enumerate(o['prompts']):
    ids, gen, margins = c['input_ids'], c['generated_ids'], c['top1_top2_margin_per_step']
    line = [f"case {ci} ({c['category']})"]
    for mode in MODES:
        cache = [(None, None)] * L
        logits = forward(np.array(ids), 0, cache, mode)[-1]
        # top-5 logits at the first generated position against the oracle
        top = c['top5_first3'][0]
        err = max(abs(float(logits[t]) - w) for t, w in zip(top['top5_ids'], top['top5_logits']))
        out = []; pos = len(ids); div = None
        for s in range(len(gen)):
            t = int(np.argmax(logits)); out.append(t)
            if div is None and t != gen[s]: div = s
            if div is not None: break
            logits = forward(np.array([gen[s]]), pos, cache, mode)[-1]; pos += 1
        d = 'none' if div is None else f'step {div} (oracle gap {margins[div]:.4f})'
        line.append(f"{mode}: top5 err {err:.5f}, diverges: {d}")
    print('; '.join(line), flush=True)
