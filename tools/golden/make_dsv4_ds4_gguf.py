#!/usr/bin/env python3
"""DeepSeek V4 in antirez/ds4's GGUF layout: tests/golden/dsv4_tiny written as ds4 lays out V4.

Writes tests/golden/dsv4_ds4.gguf: general.architecture "deepseek4", the deepseek4.* keys ds4's
loader reads (ds4.c config_validate_model: block_count, attention.q_lora_rank, ...,
attention.compress_ratios, hash_layer_count, swiglu_clamp_exp per layer, hyper_connection.*,
rope.scaling.* for the compressed layers), and the tensors under ds4's names (ds4.c
weights_bind / gguf-tools/deepseek4-quantize.c: blk.N.attn_q_a.weight, blk.N.hc_attn_fn.weight,
blk.N.indexer.attn_q_b.weight, blk.N.exp_probs_b.bias, ...), each the Hugging Face matrix with its
dimensions reversed (GGUF lists the innermost first), routed experts stacked into one
[n_expert, rows, cols] tensor per projection, tid2eid as I32. The weights stay float32, so the
file must give the safetensors model's logits bit for bit (tests/golden/dsv4_tiny_test.cpp).

ds4 itself stores most matrices quantized (Q8_0, F16, Q2_K / Q4_K / IQ2_XXS experts); the layout,
not the types, is what this file checks.

Pure Python:
    python3 tools/golden/make_dsv4_ds4_gguf.py               # the golden file
    python3 tools/golden/make_dsv4_ds4_gguf.py --ds4-types   # tests/golden/dsv4_ds4_q8.gguf
    python3 tools/golden/make_dsv4_ds4_gguf.py --fuzz-seed   # tests/fuzz/corpus/ds4_layout.gguf
"""

import json
import re
import struct
import sys
from pathlib import Path

from make_dsv4_fp8 import read_safetensors  # the same folder: the tiny model's tensors as raw bytes

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "tests" / "golden" / "dsv4_tiny"
OUT = ROOT / "tests" / "golden" / "dsv4_ds4.gguf"
ALIGN = 32

TOP = {"model.embed_tokens.weight": "token_embd.weight", "head.weight": "output.weight",
       "model.norm.weight": "output_norm.weight", "model.hc_head.hc_fn": "output_hc_fn.weight",
       "model.hc_head.hc_base": "output_hc_base.weight", "model.hc_head.hc_scale": "output_hc_scale.weight"}
LAYER = {
    "hc_attn_fn": "hc_attn_fn.weight", "hc_attn_base": "hc_attn_base.weight", "hc_attn_scale": "hc_attn_scale.weight",
    "hc_ffn_fn": "hc_ffn_fn.weight", "hc_ffn_base": "hc_ffn_base.weight", "hc_ffn_scale": "hc_ffn_scale.weight",
    "attn_norm.weight": "attn_norm.weight", "attn.wq_a.weight": "attn_q_a.weight",
    "attn.q_norm.weight": "attn_q_a_norm.weight", "attn.wq_b.weight": "attn_q_b.weight",
    "attn.wkv.weight": "attn_kv.weight", "attn.norm.weight": "attn_kv_a_norm.weight",
    "attn.attn_sink": "attn_sinks.weight", "attn.wo_a.weight": "attn_output_a.weight",
    "attn.wo_b.weight": "attn_output_b.weight",
    "attn.compressor.wkv.weight": "attn_compressor_kv.weight",
    "attn.compressor.wgate.weight": "attn_compressor_gate.weight",
    "attn.compressor.ape": "attn_compressor_ape.weight", "attn.compressor.norm.weight": "attn_compressor_norm.weight",
    "attn.indexer.wq_b.weight": "indexer.attn_q_b.weight", "attn.indexer.weights_proj.weight": "indexer.proj.weight",
    "attn.indexer.compressor.wkv.weight": "indexer_compressor_kv.weight",
    "attn.indexer.compressor.wgate.weight": "indexer_compressor_gate.weight",
    "attn.indexer.compressor.ape": "indexer_compressor_ape.weight",
    "attn.indexer.compressor.norm.weight": "indexer_compressor_norm.weight",
    "ffn_norm.weight": "ffn_norm.weight", "ffn.gate.weight": "ffn_gate_inp.weight",
    "ffn.gate.bias": "exp_probs_b.bias", "ffn.gate.tid2eid": "ffn_gate_tid2eid.weight",
    "ffn.shared_experts.w1.weight": "ffn_gate_shexp.weight", "ffn.shared_experts.w3.weight": "ffn_up_shexp.weight",
    "ffn.shared_experts.w2.weight": "ffn_down_shexp.weight",
}
EXPERTS = {"w1": "ffn_gate_exps.weight", "w3": "ffn_up_exps.weight", "w2": "ffn_down_exps.weight"}
GGML_F32, GGML_I32 = 0, 26
KV_U32, KV_I32, KV_F32, KV_BOOL, KV_STRING, KV_ARRAY = 4, 5, 6, 7, 8, 9


def gguf_string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def kv(key, kind, value):
    out = gguf_string(key) + struct.pack("<I", kind)
    if kind == KV_U32:
        return out + struct.pack("<I", value)
    if kind == KV_F32:
        return out + struct.pack("<f", value)
    if kind == KV_BOOL:
        return out + struct.pack("<B", 1 if value else 0)
    if kind == KV_STRING:
        return out + gguf_string(value)
    item_kind, items = value
    out += struct.pack("<IQ", item_kind, len(items))
    fmt = {KV_I32: "<i", KV_F32: "<f"}[item_kind]
    return out + b"".join(struct.pack(fmt, v) for v in items)


def tensors(cfg):
    src = read_safetensors(SRC / "model.safetensors")
    out = []  # (name, ggml type, shape outermost first, bytes)
    experts = {}
    for name, (dtype, shape, raw) in sorted(src.items()):
        if name in TOP:
            out.append((TOP[name], GGML_F32, shape, raw))
            continue
        m = re.match(r"model\.layers\.(\d+)\.(.*)$", name)
        layer, rest = int(m.group(1)), m.group(2)
        e = re.match(r"ffn\.experts\.(\d+)\.(w[123])\.weight$", rest)
        if e:
            experts.setdefault((layer, e.group(2)), {})[int(e.group(1))] = (shape, raw)
            continue
        if rest == "ffn.gate.tid2eid":
            assert dtype == "I64"
            ids = struct.unpack(f"<{len(raw) // 8}q", raw)
            out.append((f"blk.{layer}.{LAYER[rest]}", GGML_I32, shape, struct.pack(f"<{len(ids)}i", *ids)))
            continue
        assert dtype == "F32", name
        out.append((f"blk.{layer}.{LAYER[rest]}", GGML_F32, shape, raw))
    for (layer, w), by_expert in sorted(experts.items()):
        shape = by_expert[0][0]
        stacked = b"".join(by_expert[x][1] for x in range(cfg["n_routed_experts"]))
        out.append((f"blk.{layer}.{EXPERTS[w]}", GGML_F32, [cfg["n_routed_experts"]] + shape, stacked))
    return out


def main():
    cfg = json.loads((SRC / "config.json").read_text())
    n_layer = cfg["num_hidden_layers"]
    rates = cfg["compress_rates"]
    ratios = [{"sliding_attention": 0, "compressed_sparse_attention": rates["compressed_sparse_attention"],
               "heavily_compressed_attention": rates["heavily_compressed_attention"]}[t] for t in cfg["layer_types"]]
    n_hash = sum(1 for t in cfg["mlp_layer_types"] if t == "hash_moe")
    assert cfg["mlp_layer_types"][:n_hash] == ["hash_moe"] * n_hash
    yarn = cfg["rope_parameters"]["compress"]
    p = "deepseek4."
    kvs = [
        kv("general.architecture", KV_STRING, "deepseek4"),
        kv("general.name", KV_STRING, "dsv4-tiny-ds4-layout"),
        kv(p + "block_count", KV_U32, n_layer),
        kv(p + "embedding_length", KV_U32, cfg["hidden_size"]),
        kv(p + "vocab_size", KV_U32, cfg["vocab_size"]),
        kv(p + "context_length", KV_U32, cfg["max_position_embeddings"]),
        kv(p + "attention.head_count", KV_U32, cfg["num_attention_heads"]),
        kv(p + "attention.head_count_kv", KV_U32, cfg["num_key_value_heads"]),
        kv(p + "attention.key_length", KV_U32, cfg["head_dim"]),
        kv(p + "attention.value_length", KV_U32, cfg["head_dim"]),
        kv(p + "rope.dimension_count", KV_U32, cfg["qk_rope_head_dim"]),
        kv(p + "attention.q_lora_rank", KV_U32, cfg["q_lora_rank"]),
        kv(p + "attention.output_lora_rank", KV_U32, cfg["o_lora_rank"]),
        kv(p + "attention.output_group_count", KV_U32, cfg["o_groups"]),
        kv(p + "attention.sliding_window", KV_U32, cfg["sliding_window"]),
        kv(p + "attention.indexer.head_count", KV_U32, cfg["index_n_heads"]),
        kv(p + "attention.indexer.key_length", KV_U32, cfg["index_head_dim"]),
        kv(p + "attention.indexer.top_k", KV_U32, cfg["index_topk"]),
        kv(p + "attention.compress_ratios", KV_ARRAY, (KV_I32, ratios)),
        kv(p + "attention.compress_rope_freq_base", KV_F32, cfg["compress_rope_theta"]),
        kv(p + "attention.layer_norm_rms_epsilon", KV_F32, cfg["rms_norm_eps"]),
        kv(p + "rope.freq_base", KV_F32, cfg["rope_theta"]),
        kv(p + "rope.scaling.type", KV_STRING, "yarn"),
        kv(p + "rope.scaling.factor", KV_F32, yarn["factor"]),
        kv(p + "rope.scaling.original_context_length", KV_U32, yarn["original_max_position_embeddings"]),
        kv(p + "rope.scaling.yarn_beta_fast", KV_F32, yarn["beta_fast"]),
        kv(p + "rope.scaling.yarn_beta_slow", KV_F32, yarn["beta_slow"]),
        kv(p + "expert_count", KV_U32, cfg["n_routed_experts"]),
        kv(p + "expert_used_count", KV_U32, cfg["num_experts_per_tok"]),
        kv(p + "expert_shared_count", KV_U32, cfg["n_shared_experts"]),
        kv(p + "expert_feed_forward_length", KV_U32, cfg["moe_intermediate_size"]),
        kv(p + "expert_weights_scale", KV_F32, cfg["routed_scaling_factor"]),
        kv(p + "expert_weights_norm", KV_BOOL, cfg["norm_topk_prob"]),
        kv(p + "hash_layer_count", KV_U32, n_hash),
        kv(p + "swiglu_clamp_exp", KV_ARRAY, (KV_F32, [cfg["swiglu_limit"]] * n_layer)),
        kv(p + "hyper_connection.count", KV_U32, cfg["hc_mult"]),
        kv(p + "hyper_connection.sinkhorn_iterations", KV_U32, cfg["hc_sinkhorn_iters"]),
        kv(p + "hyper_connection.epsilon", KV_F32, cfg["hc_eps"]),
    ]
    if "--ds4-types" in sys.argv:
        # tests/golden/dsv4_ds4_q8.gguf: the types ds4's loader requires (ds4.c
        # weights_validate_layout): F16 embedding, HC fns, compressors, indexer and router; Q8_0
        # attention, shared and routed experts and output (where a row is whole 32-blocks: the
        # tiny q_lora of 24 keeps attn_q_b F32); F32 norms, sinks, biases; I32 tid2eid.
        write_gguf(ROOT / "tests" / "golden" / "dsv4_ds4_q8.gguf", kvs, [ds4_typed(*t) for t in tensors(cfg)])
        return
    if "--fuzz-seed" in sys.argv:
        # gguf_fuzz's seed (tests/fuzz/corpus/ds4_layout.gguf): the keys, and layer 1's stacked
        # experts, tid2eid and indexer cut to a few elements, under libFuzzer's 16 KB input limit.
        ts = [("token_embd.weight", GGML_F32, [4, 2], bytes(32)),
              ("blk.0.ffn_gate_tid2eid.weight", GGML_I32, [4, 2], struct.pack("<8i", 0, 1, 1, 0, 2, 3, 3, 2)),
              ("blk.1.ffn_gate_exps.weight", GGML_F32, [4, 2, 2], bytes(range(64))),
              ("blk.1.indexer.attn_q_b.weight", GGML_F32, [2, 2], bytes(16))]
        write_gguf(ROOT / "tests" / "fuzz" / "corpus" / "ds4_layout.gguf", kvs, ts)
        return
    write_gguf(OUT, kvs, tensors(cfg))


GGML_F16, GGML_Q8_0 = 1, 8
F16_NAMES = ("token_embd.weight", "output_hc_fn.weight", "hc_attn_fn.weight", "hc_ffn_fn.weight",
             "attn_compressor_kv.weight", "attn_compressor_gate.weight", "attn_compressor_ape.weight",
             "indexer.attn_q_b.weight", "indexer.proj.weight", "indexer_compressor_kv.weight",
             "indexer_compressor_gate.weight", "indexer_compressor_ape.weight", "ffn_gate_inp.weight")
Q8_NAMES = ("output.weight", "attn_q_a.weight", "attn_q_b.weight", "attn_kv.weight", "attn_output_a.weight",
            "attn_output_b.weight", "ffn_gate_shexp.weight", "ffn_up_shexp.weight", "ffn_down_shexp.weight",
            "ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight")


def q8_0(values):
    """ggml's Q8_0: per 32 values an F16 scale d = max|x| / 127 and int8 round(x / d)."""
    out = bytearray()
    for i in range(0, len(values), 32):
        block = values[i:i + 32]
        amax = max(abs(v) for v in block)
        d = struct.unpack("<e", struct.pack("<e", amax / 127))[0] if amax else 0.0
        out += struct.pack("<e", d) + bytes((round(v / d) if d else 0) & 0xFF for v in block)
    return bytes(out)


def ds4_typed(name, ggml_type, shape, raw):
    suffix = name.split(".", 2)[2] if name.startswith("blk.") else name
    if ggml_type != GGML_F32:
        return name, ggml_type, shape, raw
    values = list(struct.unpack(f"<{len(raw) // 4}f", raw))
    if suffix in F16_NAMES:
        return name, GGML_F16, shape, struct.pack(f"<{len(values)}e", *values)
    if suffix in Q8_NAMES and shape[-1] % 32 == 0:
        return name, GGML_Q8_0, shape, q8_0(values)
    return name, ggml_type, shape, raw


def write_gguf(path, kvs, ts):
    infos, data, offset = [], [], 0
    for name, ggml_type, shape, raw in ts:
        infos.append(gguf_string(name) + struct.pack("<I", len(shape)) +
                     b"".join(struct.pack("<Q", d) for d in reversed(shape)) + struct.pack("<IQ", ggml_type, offset))
        pad = -len(raw) % ALIGN
        data.append(raw + b"\0" * pad)
        offset += len(raw) + pad
    head = b"GGUF" + struct.pack("<IQQ", 3, len(ts), len(kvs)) + b"".join(kvs) + b"".join(infos)
    head += b"\0" * (-len(head) % ALIGN)
    path.write_bytes(head + b"".join(data))
    print(f"{len(ts)} tensors, {len(kvs)} keys: wrote {path}")


if __name__ == "__main__":
    main()
