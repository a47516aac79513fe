#!/usr/bin/env python3
"""DeepSeek V4: a tiny random model and transformers' DeepseekV4ForCausalLM answer.

Writes tests/golden/dsv4_tiny/ (config.json, model.safetensors, golden.json): hidden 32, six
layers [sliding, CSA, HCA, CSA, HCA, sliding] with MoE everywhere (layers 0-1 hash-routed through
tid2eid, the rest sqrt-softplus top-2 with a correction bias) and a shared expert, 4 query heads
of 32 with one shared K=V head, partial rope (8 trailing channels, interleaved pairs), grouped
low-rank output (2 groups x 16), attention sinks, mHC with 4 streams and 20 Sinkhorn iterations,
a lightning indexer of 8 heads x 16 keeping the top 2 compressed entries, sliding window 8,
compress rates CSA 4 / HCA 8 and YaRN (factor 16, original 65536) on the compress rope. float32,
every weight random under a fixed seed.

A 40-token prompt crosses the window (8) and closes ten CSA and five HCA windows during prefill;
24 greedy tokens close six more CSA and three more HCA windows while decoding.

golden.json holds the prompt, the full-sequence forward's logits at every prompt position
("prefill_logits"), the greedy continuation ("greedy") with the full forward's logits at each
step ("step_logits"), and "self_consistency": transformers' own cached decode (`generate`)
against its full forward over the same tokens. The full forward is the reference: one pass
over the whole sequence, every compressed window closed inside it.

--variant b writes tests/golden/dsv4_tiny_b/ instead: a second configuration with other shapes
everywhere the architecture has a knob: hidden 48, six query heads of 32 in three output groups
of 8, two mHC streams with 10 Sinkhorn iterations, layers [CSA, HCA, sliding, CSA, HCA] with only
layer 0 hash-routed, compress rates 2 and 16, window 6, 6 experts of which 3 are used, an
indexer of 4 heads x 16 keeping 3 entries, YaRN factor 4, a 52-token prompt.

Needs torch and transformers >= 5.8 (models/deepseek_v4):
    python -m venv build/ref-venv && build/ref-venv/bin/pip install torch transformers
    build/ref-venv/bin/python tools/golden/make_dsv4_tiny.py

Seeded: rerunning with the same versions gives the same files.
"""

import json
import math
import shutil
import sys
from pathlib import Path

import torch
import transformers
from safetensors.torch import load_file
from transformers import DeepseekV4Config, DeepseekV4ForCausalLM

OUT = Path(__file__).resolve().parents[2] / "tests" / "golden" / "dsv4_tiny"
SEED = 160
PROMPT_LEN = 40
N_NEW = 24
WEIGHT_STD = 0.15
MIN_MARGIN = 1e-2
# The indexer's top-k is a discrete choice: a query whose k-th and (k+1)-th visible entries
# score within this of each other (relu makes exact ties at 0 common) would let tie-breaking or
# rounding pick the entries, so such a prompt is rejected too.
MIN_INDEX_GAP = 1e-4

CONFIG_A = dict(
    vocab_size=128, hidden_size=32, moe_intermediate_size=32, num_hidden_layers=6,
    num_attention_heads=4, num_key_value_heads=1, head_dim=32, q_lora_rank=24,
    partial_rotary_factor=0.25,
    num_experts_per_tok=2, n_routed_experts=4, n_shared_experts=1, routed_scaling_factor=1.5,
    max_position_embeddings=256, rope_theta=10000.0, compress_rope_theta=160000.0,
    rope_parameters={"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 65536,
                     "beta_fast": 32.0, "beta_slow": 1.0},
    layer_types=["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention",
                 "compressed_sparse_attention", "heavily_compressed_attention", "sliding_attention"],
    compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 8},
    mlp_layer_types=["hash_moe", "hash_moe", "moe", "moe", "moe", "moe"],
    hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6, swiglu_limit=10.0, sliding_window=8,
    o_groups=2, o_lora_rank=16, index_n_heads=8, index_head_dim=16, index_topk=2,
    num_nextn_predict_layers=0, rms_norm_eps=1e-6, tie_word_embeddings=False,
    bos_token_id=0, eos_token_id=1, initializer_range=WEIGHT_STD,
)


# The second configuration (--variant b): other shapes wherever the architecture has a knob.
CONFIG_B = dict(CONFIG_A, hidden_size=48, moe_intermediate_size=24, num_hidden_layers=5, num_attention_heads=6,
                q_lora_rank=20, num_experts_per_tok=3, n_routed_experts=6,
                rope_parameters={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 65536,
                                 "beta_fast": 32.0, "beta_slow": 1.0},
                layer_types=["compressed_sparse_attention", "heavily_compressed_attention", "sliding_attention",
                             "compressed_sparse_attention", "heavily_compressed_attention"],
                compress_rates={"compressed_sparse_attention": 2, "heavily_compressed_attention": 16},
                mlp_layer_types=["hash_moe", "moe", "moe", "moe", "moe"],
                hc_mult=2, hc_sinkhorn_iters=10, sliding_window=6, o_groups=3, o_lora_rank=8, index_n_heads=4,
                index_head_dim=16, index_topk=3)
VARIANT = "b" if "--variant" in sys.argv and sys.argv[sys.argv.index("--variant") + 1] == "b" else "a"
CONFIG = CONFIG_B if VARIANT == "b" else CONFIG_A
if VARIANT == "b":
    OUT = OUT.with_name("dsv4_tiny_b")
    PROMPT_LEN = 52


@torch.no_grad()
def build_model():
    if OUT.exists():
        shutil.rmtree(OUT)
    config = DeepseekV4Config(**CONFIG)
    torch.manual_seed(SEED)
    model = DeepseekV4ForCausalLM(config).float().eval()
    gen = torch.Generator().manual_seed(SEED)
    for name, p in sorted(model.named_parameters()):
        noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
        if name.endswith("norm.weight"):
            p.copy_(1.0 + 0.2 * noise)
        elif name.endswith(".scale") or name.endswith("hc_scale"):
            p.copy_(1.0 + 0.3 * noise)
        elif name.endswith(".base") or name.endswith("hc_base") or name.endswith("sinks"):
            p.copy_(0.5 * noise)
        elif name.endswith("position_bias"):
            p.copy_(0.5 * noise)
        else:
            p.copy_(WEIGHT_STD * noise)
    for name, b in sorted(model.named_buffers()):
        if name.endswith("e_score_correction_bias"):
            b.copy_(0.1 * torch.randn(b.shape, generator=gen))
        elif name.endswith("tid2eid"):
            n_expert = config.n_routed_experts
            rows = [torch.randperm(n_expert, generator=gen)[: b.shape[1]] for _ in range(b.shape[0])]
            b.copy_(torch.stack(rows).to(b.dtype))
    model.save_pretrained(OUT)
    (OUT / "generation_config.json").unlink(missing_ok=True)


def load():
    model = DeepseekV4ForCausalLM.from_pretrained(OUT, dtype=torch.float32).float().eval()
    model.generation_config.eos_token_id = None
    return model


@torch.no_grad()
def full_forward_greedy(model, prompt):
    seq, steps, margin = list(prompt), [], math.inf
    for _ in range(N_NEW):
        logits = model(torch.tensor([seq])).logits[0, -1]
        top = torch.topk(logits, 2)
        margin = min(margin, float(top.values[0] - top.values[1]))
        steps.append(logits)
        seq.append(int(top.indices[0]))
    return seq[len(prompt):], steps, margin


@torch.no_grad()
def index_gap(model, seq):
    """The smallest gap between the k-th and (k+1)-th best visible indexer scores over every
    query of every CSA layer in one full forward over `seq`."""
    from transformers.models.deepseek_v4 import modeling_deepseek_v4 as m
    scores, orig = [], m.DeepseekV4IndexerScorer.forward

    def record(self, q, kv, h):
        s = orig(self, q, kv, h)
        scores.append(s[0].clone())
        return s

    m.DeepseekV4IndexerScorer.forward = record
    try:
        model(torch.tensor([seq]))
    finally:
        m.DeepseekV4IndexerScorer.forward = orig
    k, rate, gap = CONFIG["index_topk"], CONFIG["compress_rates"]["compressed_sparse_attention"], math.inf
    for s in scores:
        for t in range(s.shape[0]):
            visible = (t + 1) // rate
            if visible > k:
                top = torch.sort(s[t, :visible], descending=True).values
                gap = min(gap, float(top[k - 1] - top[k]))
    return gap


@torch.no_grad()
def self_consistency(model, prompt, ref_ids, ref_steps):
    out = model.generate(torch.tensor([prompt]), max_new_tokens=N_NEW, min_new_tokens=N_NEW, do_sample=False,
                         output_logits=True, return_dict_in_generate=True)
    ids = out.sequences[0, len(prompt):].tolist()
    steps = [lg[0] for lg in out.logits]
    diff = max(float((s - r).abs().max()) for s, r in zip(steps, ref_steps)) if ids == ref_ids else None
    return {"generate_same_ids_as_full_forward_greedy": ids == ref_ids,
            "generate_max_abs_diff_vs_full_forward": None if diff is None else float(f"{diff:.3g}")}


def rounded(t):
    return [float(f"{float(v):.7g}") for v in t]


def main():
    build_model()
    names = sorted(load_file(OUT / "model.safetensors").keys())
    model = load()
    rng = torch.Generator().manual_seed(SEED + 1)
    for attempt in range(50):
        prompt = torch.randint(2, CONFIG["vocab_size"], (PROMPT_LEN,), generator=rng).tolist()
        ids, steps, margin = full_forward_greedy(model, prompt)
        if margin >= MIN_MARGIN:
            gap = index_gap(model, prompt + ids)
            if gap >= MIN_INDEX_GAP:
                break
    else:
        raise SystemExit("no prompt with a clear greedy margin")
    with torch.no_grad():
        prefill = model(torch.tensor([prompt])).logits[0]
    consistency = self_consistency(model, prompt, ids, steps)
    golden = {
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "seed": SEED,
        "prompt_ids": prompt,
        "prefill_logits": [rounded(r) for r in prefill],
        "greedy": ids,
        "greedy_min_margin": float(f"{margin:.4g}"),
        "index_min_gap": float(f"{gap:.4g}"),
        "step_logits": [rounded(s) for s in steps],
        "self_consistency": consistency,
        "tensor_names": names,
    }
    (OUT / "golden.json").write_text(json.dumps(golden, indent=None, separators=(",", ":")) + "\n")
    print(f"prompt attempt {attempt}, greedy margin {margin:.4g}, index gap {gap:.4g}, {consistency}")
    print("greedy:", ids)


if __name__ == "__main__":
    main()
