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
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

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
}


def make_config(spec):
    kwargs = dict(BASE)
    kwargs.update(spec["config"])
    if spec["cls"] == "qwen2":
        return Qwen2Config(**kwargs), Qwen2ForCausalLM
    return LlamaConfig(**kwargs), LlamaForCausalLM


@torch.no_grad()
def randomize(model, seed):
    """Every parameter random: norms near 1 (not exactly 1, so a missing norm multiply shows),
    biases nonzero, matrices with WEIGHT_STD."""
    gen = torch.Generator().manual_seed(seed)
    for name, p in sorted(model.named_parameters()):
        noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
        if name.endswith("norm.weight"):
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


def numpy_logits(model_dir, ids):
    """An independent float64 forward pass over the saved files, written from the architecture
    (not from transformers' code). It pins down the conventions the C++ side must follow:
    rotate-half rope on every head, kv head = head // (n_head / n_head_kv), 1/sqrt(head_dim)
    scaling, q/k/v biases when present, lm_head tied to the embedding when absent."""
    cfg = json.loads((model_dir / "config.json").read_text())
    w = {}
    for f in sorted(model_dir.glob("*.safetensors")):
        w.update({k: v.double().numpy() for k, v in load_file(f).items()})
    n_embd, n_head, n_head_kv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or n_embd // n_head
    eps = cfg["rms_norm_eps"]
    angles = np.arange(len(ids))[:, None] * rope_inv_freq(cfg, hd)[None, :]  # [T, hd/2]
    cos, sin = np.cos(angles)[:, None, :], np.sin(angles)[:, None, :]
    T = len(ids)

    def rope(x):  # [T, heads, hd]: pairs (i, i + hd/2)
        x1, x2 = x[..., : hd // 2], x[..., hd // 2 :]
        return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)

    def rms(x, g):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g

    mask = np.triu(np.full((T, T), -np.inf), 1)
    x = w["model.embed_tokens.weight"][ids]
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."

        def linear(name, v):
            y = v @ w[p + name + ".weight"].T
            return y + w[p + name + ".bias"] if p + name + ".bias" in w else y

        h = rms(x, w[p + "input_layernorm.weight"])
        q = rope(linear("self_attn.q_proj", h).reshape(T, n_head, hd))
        k = rope(linear("self_attn.k_proj", h).reshape(T, n_head_kv, hd))
        v = linear("self_attn.v_proj", h).reshape(T, n_head_kv, hd)
        att = np.zeros((T, n_head, hd))
        for head in range(n_head):
            kv = head // (n_head // n_head_kv)
            s = q[:, head] @ k[:, kv].T / math.sqrt(hd) + mask
            s = np.exp(s - s.max(-1, keepdims=True))
            att[:, head] = (s / s.sum(-1, keepdims=True)) @ v[:, kv]
        x = x + linear("self_attn.o_proj", att.reshape(T, n_head * hd))
        h = rms(x, w[p + "post_attention_layernorm.weight"])
        gate, up = linear("mlp.gate_proj", h), linear("mlp.up_proj", h)
        x = x + linear("mlp.down_proj", gate / (1 + np.exp(-gate)) * up)
    x = rms(x, w["model.norm.weight"])
    return x @ w.get("lm_head.weight", w["model.embed_tokens.weight"]).T


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
    randomize(model, spec["seed"])
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
        if margin >= MIN_GREEDY_MARGIN and len(set(tokens)) > 1:
            break
    else:
        raise RuntimeError(f"{name}: no prompt gave a clear, non-constant greedy continuation")

    logits = ref(torch.tensor([prompt])).logits[0]  # [PROMPT_LEN, vocab]
    long_prompt = torch.randint(0, vocab, (LONG_PROMPT_LEN,), generator=gen).tolist()
    long_last = ref(torch.tensor([long_prompt])).logits[0, -1]  # [vocab]

    # transformers and the independent float64 pass must agree, or the golden data would encode
    # a convention nobody wrote down.
    check = np.abs(numpy_logits(out_dir, prompt) - logits.double().numpy()).max()
    check_long = abs(numpy_logits(out_dir, long_prompt)[-1] - long_last.double().numpy()).max()
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
