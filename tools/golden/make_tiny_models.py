#!/usr/bin/env python3
"""Builds the tiny random Hugging Face models under tests/golden/tiny/ and their golden.json.

Each model is a few hundred kilobytes of random float32 (or bfloat16) weights saved with
save_pretrained (config.json + safetensors), so the C++ loader reads exactly what transformers
writes. The reference logits come from the model re-loaded from those files, so they are what
transformers computes from the committed weights, not from the in-memory originals.

Run from anywhere (needs torch and transformers):
    python tools/golden/make_tiny_models.py            # all models
    python tools/golden/make_tiny_models.py qwen2_gqa  # one model

Everything is seeded; rerunning with the same torch/transformers versions gives the same files.
"""

import json
import math
import shutil
import sys
from pathlib import Path

import numpy as np
import torch
import transformers
from safetensors.torch import load_file
from transformers import (AutoModelForCausalLM, Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig, LlamaForCausalLM,
                          Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig,
                          Qwen3MoeForCausalLM)

REPO = Path(__file__).resolve().parents[2]
OUT_ROOT = REPO / "tests" / "golden" / "tiny"

PROMPT_LEN = 40
LONG_PROMPT_LEN = 100
N_GREEDY = 16
# A greedy step whose top two logits are closer than this would make the C++ comparison depend
# on rounding noise; such a prompt is rejected and the next prompt seed is tried.
MIN_GREEDY_MARGIN = 1e-2
WEIGHT_STD = 0.15  # larger than transformers' 0.02 so logits spread out and greedy text varies

# Shared by every Llama-family model; each entry below overrides what it needs.
BASE = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    max_position_embeddings=256,
    rms_norm_eps=1e-5,
    bos_token_id=1,
    eos_token_id=2,
    initializer_range=WEIGHT_STD,
)

MODELS = {
    "llama_mha_untied": dict(
        cls="llama", seed=101, dtype=torch.float32,
        config=dict(num_attention_heads=4, num_key_value_heads=4, vocab_size=320,
                    tie_word_embeddings=False, rope_theta=10000.0),
    ),
    "llama_gqa_tied": dict(
        cls="llama", seed=102, dtype=torch.float32,
        config=dict(num_attention_heads=8, num_key_value_heads=2, vocab_size=256, num_hidden_layers=3,
                    tie_word_embeddings=True, rope_theta=10000.0, rms_norm_eps=1e-6),
    ),
    # head_dim 32 with hidden 64 and 4 heads: the attention width (128) differs from the hidden
    # size, and with theta 5e5 one frequency pair falls in llama3's smoothed band (wavelength
    # between original/high_freq_factor = 8 and original/low_freq_factor = 32).
    "llama3_rope_scaling": dict(
        cls="llama", seed=103, dtype=torch.float32,
        config=dict(num_attention_heads=4, num_key_value_heads=2, head_dim=32, vocab_size=384,
                    tie_word_embeddings=False, rope_theta=500000.0,
                    rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                      high_freq_factor=4.0, original_max_position_embeddings=32)),
    ),
    "qwen2_gqa": dict(
        cls="qwen2", seed=104, dtype=torch.float32,
        config=dict(num_attention_heads=4, num_key_value_heads=2, vocab_size=448,
                    tie_word_embeddings=False, rope_theta=1000000.0, rms_norm_eps=1e-6,
                    eos_token_id=[2, 3]),
    ),
    "llama_sharded": dict(
        cls="llama", seed=105, dtype=torch.float32, max_shard_size="200KB",
        config=dict(num_attention_heads=4, num_key_value_heads=4, vocab_size=320,
                    tie_word_embeddings=False, rope_theta=10000.0),
    ),
    # Saved in bfloat16; the reference runs those bf16 weights upcast to float32, which is what
    # the C++ side does (f32 arithmetic on bf16 weights).
    "llama_bf16": dict(
        cls="llama", seed=106, dtype=torch.bfloat16,
        config=dict(num_attention_heads=8, num_key_value_heads=2, vocab_size=256, num_hidden_layers=3,
                    tie_word_embeddings=True, rope_theta=10000.0, rms_norm_eps=1e-6),
    ),
    # Gemma 3: a window of 8 against 40- and 100-token prompts (5 and 12 windows), sliding and
    # global layers interleaved, per-type rope bases, query_pre_attn_scalar unlike head_dim.
    "gemma3_sliding": dict(
        cls="gemma3", seed=107, dtype=torch.float32,
        config=dict(num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=256, num_hidden_layers=4,
                    sliding_window=8, query_pre_attn_scalar=24,
                    layer_types=["sliding_attention", "sliding_attention", "full_attention", "sliding_attention"],
                    rope_parameters={"full_attention": dict(rope_type="default", rope_theta=1000000.0),
                                     "sliding_attention": dict(rope_type="default", rope_theta=10000.0)},
                    rms_norm_eps=1e-6, tie_word_embeddings=True),
    ),
    # The Gemma 3 options the 270M model leaves off: final logit soft-capping, linear rope
    # scaling on the global layers only, an untied head, MQA; window 12 with the layer kinds
    # from the default pattern (every 6th layer global).
    "gemma3_softcap_linear": dict(
        cls="gemma3", seed=108, dtype=torch.float32,
        config=dict(num_attention_heads=4, num_key_value_heads=1, head_dim=32, vocab_size=320, num_hidden_layers=7,
                    sliding_window=12, query_pre_attn_scalar=32, final_logit_softcapping=3.0,
                    rope_parameters={"full_attention": dict(rope_type="linear", factor=4.0, rope_theta=1000000.0),
                                     "sliding_attention": dict(rope_type="default", rope_theta=10000.0)},
                    rms_norm_eps=1e-6, tie_word_embeddings=False),
    ),
    "qwen3_gqa": dict(
        cls="qwen3", seed=109, dtype=torch.float32,
        config=dict(num_attention_heads=4, num_key_value_heads=2, head_dim=32, vocab_size=384,
                    tie_word_embeddings=False, rope_theta=1000000.0, rms_norm_eps=1e-6),
    ),
    # 8 experts, 2 per token, renormalised (Qwen3-30B-A3B's setting), experts 32 wide.
    "qwen3_moe": dict(
        cls="qwen3_moe", seed=110, dtype=torch.float32,
        config=dict(num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=320,
                    num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=True,
                    tie_word_embeddings=False, rope_theta=1000000.0, rms_norm_eps=1e-6),
    ),
    # Raw top-k probabilities (norm_topk_prob false), 4 experts, tied head, bf16 weights.
    "qwen3_moe_unnormalized": dict(
        cls="qwen3_moe", seed=111, dtype=torch.bfloat16,
        config=dict(num_attention_heads=4, num_key_value_heads=4, head_dim=16, vocab_size=256,
                    num_experts=4, num_experts_per_tok=2, moe_intermediate_size=48, norm_topk_prob=False,
                    tie_word_embeddings=True, rope_theta=10000.0, rms_norm_eps=1e-6),
    ),
}

CLASSES = {
    "llama": (LlamaConfig, LlamaForCausalLM),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM),
    "gemma3": (Gemma3TextConfig, Gemma3ForCausalLM),
    "qwen3": (Qwen3Config, Qwen3ForCausalLM),
    "qwen3_moe": (Qwen3MoeConfig, Qwen3MoeForCausalLM),
}
# Smallest gap between the k-th and (k+1)-th router logit a prompt may have: closer experts
# would make the routing (and so the output) hinge on rounding noise.
MIN_ROUTER_MARGIN = 1e-3


def make_config(spec):
    kwargs = dict(BASE)
    kwargs.update(spec["config"])
    config_cls, model_cls = CLASSES[spec["cls"]]
    return config_cls(**kwargs), model_cls


@torch.no_grad()
def randomize(model, seed, gemma=False):
    """Every parameter random: norms near 1 (not exactly 1, so a missing norm multiply shows),
    biases nonzero, matrices with WEIGHT_STD."""
    gen = torch.Generator().manual_seed(seed)
    for name, p in sorted(model.named_parameters()):
        noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
        if name.endswith("norm.weight") and gemma:
            p.copy_(0.2 * noise)  # Gemma scales by (1 + w)
        elif name.endswith("norm.weight"):
            p.copy_(1.0 + 0.2 * noise)
        elif name.endswith(".bias"):
            p.copy_(0.2 * noise)
        else:
            p.copy_(WEIGHT_STD * noise)


def rope_inv_freq(cfg, head_dim):
    """Rotary frequencies, llama3 scaling included, written out from the published formula."""
    rp = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    theta = rp.get("rope_theta", cfg.get("rope_theta", 10000.0))
    freq = 1.0 / theta ** (np.arange(0, head_dim, 2) / head_dim)
    if rp.get("rope_type", rp.get("type")) == "llama3":
        factor, low, high = rp["factor"], rp["low_freq_factor"], rp["high_freq_factor"]
        original = rp["original_max_position_embeddings"]
        wavelen = 2 * math.pi / freq
        smooth = np.clip((original / wavelen - low) / (high - low), 0.0, 1.0)
        freq = (1 - smooth) * freq / factor + smooth * freq
    return freq


def layer_rope(cfg, layer, head_dim):
    """(inv_freq, window) of one layer: Gemma 3 picks both by layer type, others use one rope."""
    if cfg["model_type"] != "gemma3_text":
        return rope_inv_freq(cfg, head_dim), 0
    kind = cfg["layer_types"][layer]
    rp = cfg["rope_parameters"][kind]
    freq = 1.0 / rp["rope_theta"] ** (np.arange(0, head_dim, 2) / head_dim)
    if rp.get("rope_type") == "linear":
        freq = freq / rp["factor"]
    return freq, cfg["sliding_window"] if kind == "sliding_attention" else 0


def numpy_logits(model_dir, ids):
    """An independent float64 forward pass over the saved files, written from the architecture
    (not from transformers' code). It pins down the conventions the C++ side must follow:
    rotate-half rope on every head, kv head = head // (n_head / n_head_kv), 1/sqrt(head_dim)
    scaling, q/k/v biases when present, lm_head tied to the embedding when absent; for Gemma 3
    norms scaling by (1 + w), sandwich norms, sqrt(hidden) embedding scale, GeGLU (tanh GELU),
    query_pre_attn_scalar, windows counting the query, soft-capping; QK-norm per head before
    rope (Gemma 3, Qwen3); softmax-then-top-k routing (Qwen3-MoE).
    Returns the logits and the smallest gap between the k-th and (k+1)-th router logit."""
    cfg = json.loads((model_dir / "config.json").read_text())
    w = {}
    for f in sorted(model_dir.glob("*.safetensors")):
        w.update({k: v.double().numpy() for k, v in load_file(f).items()})
    gemma = cfg["model_type"] == "gemma3_text"
    n_embd, n_head, n_head_kv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or n_embd // n_head
    eps = cfg["rms_norm_eps"]
    T = len(ids)
    router_margin = math.inf

    def rope(x, freq):  # [T, heads, hd]: pairs (i, i + hd/2)
        angles = np.arange(T)[:, None] * freq[None, :]
        cos, sin = np.cos(angles)[:, None, :], np.sin(angles)[:, None, :]
        x1, x2 = x[..., : hd // 2], x[..., hd // 2 :]
        return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)

    def rms(x, g):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * ((1.0 + g) if gemma else g)

    def swiglu(h, gate_w, up_w, down_w):
        gate, up = h @ gate_w.T, h @ up_w.T
        if gemma:
            act = 0.5 * gate * (1 + np.tanh(math.sqrt(2 / math.pi) * (gate + 0.044715 * gate**3)))
        else:
            act = gate / (1 + np.exp(-gate))
        return (act * up) @ down_w.T

    scale = cfg["query_pre_attn_scalar"] ** -0.5 if gemma else 1 / math.sqrt(hd)
    x = w["model.embed_tokens.weight"][ids]
    if gemma:
        x = x * np.float32(math.sqrt(n_embd))
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."

        def linear(name, v):
            y = v @ w[p + name + ".weight"].T
            return y + w[p + name + ".bias"] if p + name + ".bias" in w else y

        freq, window = layer_rope(cfg, layer, hd)
        visible = (j <= i) & ((j > i - window) if window else True)
        mask = np.where(visible, 0.0, -np.inf)
        h = rms(x, w[p + "input_layernorm.weight"])
        q = linear("self_attn.q_proj", h).reshape(T, n_head, hd)
        k = linear("self_attn.k_proj", h).reshape(T, n_head_kv, hd)
        if p + "self_attn.q_norm.weight" in w:
            q, k = rms(q, w[p + "self_attn.q_norm.weight"]), rms(k, w[p + "self_attn.k_norm.weight"])
        q, k = rope(q, freq), rope(k, freq)
        v = linear("self_attn.v_proj", h).reshape(T, n_head_kv, hd)
        att = np.zeros((T, n_head, hd))
        for head in range(n_head):
            kv = head // (n_head // n_head_kv)
            s = q[:, head] @ k[:, kv].T * scale + mask
            s = np.exp(s - s.max(-1, keepdims=True))
            att[:, head] = (s / s.sum(-1, keepdims=True)) @ v[:, kv]
        o = linear("self_attn.o_proj", att.reshape(T, n_head * hd))
        if gemma:
            o = rms(o, w[p + "post_attention_layernorm.weight"])
            x = x + o
            h = rms(x, w[p + "pre_feedforward_layernorm.weight"])
        else:
            x = x + o
            h = rms(x, w[p + "post_attention_layernorm.weight"])
        if p + "mlp.gate.weight" in w:
            top_k = cfg["num_experts_per_tok"]
            router = h @ w[p + "mlp.gate.weight"].T  # [T, n_expert]
            order = np.sort(router, -1)[:, ::-1]
            router_margin = min(router_margin, float((order[:, top_k - 1] - order[:, top_k]).min()))
            prob = np.exp(router - router.max(-1, keepdims=True))
            prob /= prob.sum(-1, keepdims=True)
            out = np.zeros_like(h)
            for t in range(T):
                chosen = np.argsort(-prob[t])[:top_k]
                weights = prob[t, chosen] / (prob[t, chosen].sum() if cfg["norm_topk_prob"] else 1.0)
                for e, g in zip(chosen, weights):
                    e = f"{p}mlp.experts.{e}."
                    out[t] += g * swiglu(h[t], w[e + "gate_proj.weight"], w[e + "up_proj.weight"],
                                         w[e + "down_proj.weight"])
        else:
            out = swiglu(h, w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"], w[p + "mlp.down_proj.weight"])
        if gemma:
            out = rms(out, w[p + "post_feedforward_layernorm.weight"])
        x = x + out
    x = rms(x, w["model.norm.weight"])
    logits = x @ w.get("lm_head.weight", w["model.embed_tokens.weight"]).T
    if cfg.get("final_logit_softcapping"):
        cap = cfg["final_logit_softcapping"]
        logits = cap * np.tanh(logits / cap)
    return logits, router_margin


def round_sig(x, digits=6):
    return float(f"{x:.{digits}g}")


@torch.no_grad()
def greedy(model, prompt):
    """Argmax decoding with the KV cache, no stopping at eos. Returns the ids and the smallest
    gap between the best and second-best logit over the steps."""
    ids = torch.tensor([prompt])
    out = model(ids, use_cache=True)
    past = out.past_key_values
    logits = out.logits[0, -1]
    tokens, margin = [], math.inf
    for _ in range(N_GREEDY):
        top = torch.topk(logits, 2)
        margin = min(margin, float(top.values[0] - top.values[1]))
        nxt = int(top.indices[0])
        tokens.append(nxt)
        out = model(torch.tensor([[nxt]]), past_key_values=past, use_cache=True)
        past = out.past_key_values
        logits = out.logits[0, -1]
    # The same continuation recomputed without the cache: both paths must agree.
    full = list(prompt)
    for _ in range(N_GREEDY):
        full.append(int(model(torch.tensor([full])).logits[0, -1].argmax()))
    assert full[len(prompt):] == tokens, "cached and uncached greedy decoding disagree"
    return tokens, margin


@torch.no_grad()
def build(name, spec):
    out_dir = OUT_ROOT / name
    if out_dir.exists():
        shutil.rmtree(out_dir)
    config, cls = make_config(spec)
    torch.manual_seed(spec["seed"])
    model = cls(config).to(torch.float32).eval()
    randomize(model, spec["seed"], gemma=spec["cls"] == "gemma3")
    if spec["dtype"] != torch.float32:
        model = model.to(spec["dtype"])
    save_kwargs = {}
    if "max_shard_size" in spec:
        save_kwargs["max_shard_size"] = spec["max_shard_size"]
    model.save_pretrained(out_dir, **save_kwargs)
    gen_cfg = out_dir / "generation_config.json"
    if gen_cfg.exists():
        gen_cfg.unlink()

    # Reference from the files just written, computed in float32 whatever the stored dtype.
    ref = AutoModelForCausalLM.from_pretrained(out_dir, dtype=torch.float32, attn_implementation="eager")
    ref = ref.float().eval()
    vocab = config.vocab_size

    for attempt in range(20):
        gen = torch.Generator().manual_seed(1000 * spec["seed"] + attempt)
        prompt = torch.randint(0, vocab, (PROMPT_LEN,), generator=gen).tolist()
        tokens, margin = greedy(ref, prompt)
        routing_clear = numpy_logits(out_dir, prompt + tokens)[1] >= MIN_ROUTER_MARGIN
        if margin >= MIN_GREEDY_MARGIN and len(set(tokens)) > 1 and routing_clear:
            break
    else:
        raise RuntimeError(f"{name}: no prompt gave a clear, non-constant greedy continuation")

    logits = ref(torch.tensor([prompt])).logits[0]  # [PROMPT_LEN, vocab]
    for _ in range(20):
        long_prompt = torch.randint(0, vocab, (LONG_PROMPT_LEN,), generator=gen).tolist()
        if numpy_logits(out_dir, long_prompt)[1] >= MIN_ROUTER_MARGIN:
            break
    else:
        raise RuntimeError(f"{name}: no long prompt routed clearly")
    long_last = ref(torch.tensor([long_prompt])).logits[0, -1]  # [vocab]

    # transformers and the independent float64 pass must agree, or the golden data would encode
    # a convention nobody wrote down.
    check = np.abs(numpy_logits(out_dir, prompt)[0] - logits.double().numpy()).max()
    check_long = abs(numpy_logits(out_dir, long_prompt)[0][-1] - long_last.double().numpy()).max()
    assert max(check, check_long) < 1e-4, f"{name}: numpy reference differs from transformers by {check}"

    golden = {
        "model": name,
        "prompt_ids": prompt,
        "logits": [[round_sig(v) for v in row.tolist()] for row in logits],
        "greedy": tokens,
        "greedy_min_margin": round_sig(margin, 4),
        "long_prompt_ids": long_prompt,
        "long_last_logits": [round_sig(v) for v in long_last.tolist()],
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
    }
    with open(out_dir / "golden.json", "w") as f:
        json.dump(golden, f, separators=(",", ":"))
        f.write("\n")
    size = sum(p.stat().st_size for p in out_dir.iterdir())
    std = float(logits.std())
    print(f"{name}: {size / 1024:.0f} KiB, logits std {std:.2f}, greedy margin {margin:.4f}, "
          f"numpy vs transformers {max(check, check_long):.1e}")


def main():
    names = sys.argv[1:] or list(MODELS)
    for name in names:
        if name not in MODELS:
            sys.exit(f"unknown model '{name}'; known: {', '.join(MODELS)}")
        build(name, MODELS[name])


if __name__ == "__main__":
    main()
