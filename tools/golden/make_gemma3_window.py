#!/usr/bin/env python3
"""Gemma 3 decoding past the sliding window: a tiny random model and transformers' answer.

Writes tests/golden/gemma3_window/ (config.json, model.safetensors, golden.json): hidden 96,
7 layers (layer 5 global, the others sliding, the last one too), sliding_window 32, float32,
every weight random under a fixed seed, and a 250-token prompt followed by greedy decoding.

It also answers a question (issue 14, item 8): does transformers' decode-time sliding-window
cache compute what its own full-sequence forward computes at the same positions? For every
generated token it runs `generate` (greedy, the KV cache transformers picks for the model,
eager and sdpa attention, and the static cache) and compares each step's logits with one
forward pass over prompt + generated tokens without a cache. The numbers go into golden.json
("self_consistency") and are printed; tests/golden/gemma3_window_test.cpp holds our decode to
the full-sequence forward.

Needs torch and transformers (see tools/golden/README.md for the versions):
    python tools/golden/make_gemma3_window.py

Seeded: rerunning with the same versions gives the same files.
"""

import json
import math
import shutil
from pathlib import Path

import torch
import transformers
from transformers import AutoModelForCausalLM, Gemma3ForCausalLM, Gemma3TextConfig

OUT = Path(__file__).resolve().parents[2] / "tests" / "golden" / "gemma3_window"
SEED = 140
PROMPT_LEN = 250
N_NEW = 24
WEIGHT_STD = 0.15  # as make_tiny_models.py: logits spread out, greedy text varies
# A step whose top two logits are closer than this would let rounding decide the token; such a
# prompt is rejected and the next one tried.
MIN_MARGIN = 1e-2

CONFIG = dict(
    hidden_size=96, intermediate_size=64, num_hidden_layers=7, num_attention_heads=4,
    num_key_value_heads=2, head_dim=24, query_pre_attn_scalar=24, vocab_size=192,
    sliding_window=32, max_position_embeddings=512, rms_norm_eps=1e-6,
    # Untied: with the head tied to the embedding a random model repeats its last token.
    tie_word_embeddings=False,
    bos_token_id=1, eos_token_id=2, pad_token_id=0, initializer_range=WEIGHT_STD,
    rope_parameters={"full_attention": dict(rope_type="default", rope_theta=1000000.0),
                     "sliding_attention": dict(rope_type="default", rope_theta=10000.0)},
)


@torch.no_grad()
def build_model():
    if OUT.exists():
        shutil.rmtree(OUT)
    config = Gemma3TextConfig(**CONFIG)
    # The default layer pattern: every sixth layer global, so layer 5 is global and layer 6,
    # the last, is sliding.
    assert config.layer_types == ["sliding_attention"] * 5 + ["full_attention", "sliding_attention"]
    torch.manual_seed(SEED)
    model = Gemma3ForCausalLM(config).float().eval()
    gen = torch.Generator().manual_seed(SEED)
    for name, p in sorted(model.named_parameters()):
        noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
        p.copy_(0.2 * noise if name.endswith("norm.weight") else WEIGHT_STD * noise)  # Gemma: 1 + w
    model.save_pretrained(OUT)
    (OUT / "generation_config.json").unlink(missing_ok=True)


def load(attn):
    model = AutoModelForCausalLM.from_pretrained(OUT, dtype=torch.float32, attn_implementation=attn)
    model = model.float().eval()
    model.generation_config.eos_token_id = None  # never stop early: every step is compared
    return model


@torch.no_grad()
def full_forward_greedy(model, prompt):
    """Argmax decoding where every step is one forward pass over the whole sequence, no cache:
    the model's definition with nothing carried between steps. Returns the ids, each step's
    logits and the smallest top-2 gap."""
    seq, steps, margin = list(prompt), [], math.inf
    for _ in range(N_NEW):
        logits = model(torch.tensor([seq])).logits[0, -1]
        top = torch.topk(logits, 2)
        margin = min(margin, float(top.values[0] - top.values[1]))
        steps.append(logits)
        seq.append(int(top.indices[0]))
    return seq[len(prompt):], steps, margin


@torch.no_grad()
def generate_steps(model, prompt, **kwargs):
    out = model.generate(torch.tensor([prompt]), max_new_tokens=N_NEW, min_new_tokens=N_NEW,
                         do_sample=False, output_logits=True, return_dict_in_generate=True, **kwargs)
    ids = out.sequences[0, len(prompt):].tolist()
    return ids, [lg[0] for lg in out.logits], type(out.past_key_values).__name__


@torch.no_grad()
def self_consistency(prompt, ref_ids, ref_steps):
    """generate()'s step logits against the full-sequence forward over the same tokens."""
    report = {}
    for attn in ("eager", "sdpa"):
        model = load(attn)
        for cache in (None, "static"):
            ids, steps, cache_name = generate_steps(model, prompt, **({"cache_implementation": cache} if cache else {}))
            # The full forward over prompt + generate's own tokens, so each step is compared at
            # the same prefix even if the two greedy paths parted.
            seq = torch.tensor([prompt + ids])
            full = model(seq).logits[0, len(prompt) - 1: len(prompt) - 1 + N_NEW]
            diff = max(float((s - f).abs().max()) for s, f in zip(steps, full))
            diff_ref = max(float((s - r).abs().max()) for s, r in zip(steps, ref_steps)) if ids == ref_ids else None
            report[f"{attn}/{cache_name}"] = {"max_abs_diff_vs_full_forward": float(f"{diff:.3g}"),
                                              "same_ids_as_full_forward_greedy": ids == ref_ids,
                                              "max_abs_diff_vs_reference_steps":
                                                  None if diff_ref is None else float(f"{diff_ref:.3g}")}
    return report


def round_sig(x, digits=7):
    return float(f"{x:.{digits}g}")


def main():
    torch.set_num_threads(2)
    build_model()
    ref = load("eager")
    for attempt in range(50):
        gen = torch.Generator().manual_seed(1000 * SEED + attempt)
        prompt = torch.randint(3, CONFIG["vocab_size"], (PROMPT_LEN,), generator=gen).tolist()
        ids, steps, margin = full_forward_greedy(ref, prompt)
        if margin >= MIN_MARGIN and len(set(ids)) > 3:
            break
    else:
        raise RuntimeError("no prompt gave a clear, varied greedy continuation")
    consistency = self_consistency(prompt, ids, steps)
    golden = {
        "prompt_ids": prompt,
        "greedy": ids,
        "greedy_min_margin": round_sig(margin, 4),
        # Logits of the full-sequence forward at each decode position, [N_NEW][vocab]: row k is
        # the prediction after prompt + greedy[:k].
        "step_logits": [[round_sig(v) for v in s.tolist()] for s in steps],
        "self_consistency": consistency,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
    }
    with open(OUT / "golden.json", "w") as f:
        json.dump(golden, f, separators=(",", ":"))
        f.write("\n")
    size = sum(p.stat().st_size for p in OUT.iterdir())
    print(f"{OUT.name}: {size / 1024:.0f} KiB, prompt attempt {attempt}, greedy margin {margin:.4f}, ids {ids}")
    for k, v in consistency.items():
        print(f"  generate {k}: {v}")


if __name__ == "__main__":
    main()
