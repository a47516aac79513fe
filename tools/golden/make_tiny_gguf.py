#!/usr/bin/env python3
"""Writes GGUF copies of some tiny Hugging Face models (tests/golden/tiny/) to tests/golden/tiny_gguf/.

The same float32 weights under llama.cpp's names and metadata keys, so the C++ GGUF path of each
architecture can be checked against the transformers golden data of the Hugging Face folder:
Gemma 3 norms stored as 1 + w (llama.cpp's converter adds the 1), Qwen3-MoE experts stacked
into one [n_expert, rows, cols] tensor per projection. Keys llama.cpp has no name for (Gemma's
layer kinds and query_pre_attn_scalar) use the ones deepinfer's Hugging Face loader writes.

    python tools/golden/make_tiny_gguf.py      # needs numpy, safetensors, gguf
"""

import json
from pathlib import Path

import gguf
import numpy as np
from safetensors.numpy import load_file

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tests" / "golden" / "tiny"
OUT = REPO / "tests" / "golden" / "tiny_gguf"
MODELS = {"gemma3_sliding": "gemma3", "qwen3_gqa": "qwen3", "qwen3_moe": "qwen3moe"}

LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    "mlp.gate.weight": "ffn_gate_inp.weight",
}
GEMMA_NAMES = {
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "pre_feedforward_layernorm.weight": "ffn_norm.weight",
    "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
}


def tensors(name, arch, cfg):
    w = load_file(TINY / name / "model.safetensors")
    gemma = arch == "gemma3"
    out = {}
    for hf, t in w.items():
        t = t.astype(np.float32)
        if gemma and hf.endswith("norm.weight"):
            t = t + np.float32(1.0)
        if hf == "model.embed_tokens.weight":
            out["token_embd.weight"] = t
        elif hf == "model.norm.weight":
            out["output_norm.weight"] = t
        elif hf == "lm_head.weight":
            out["output.weight"] = t
        else:
            layer, leaf = hf[len("model.layers."):].split(".", 1)
            names = dict(LAYER_NAMES, **GEMMA_NAMES) if gemma else dict(LAYER_NAMES, **{
                "post_attention_layernorm.weight": "ffn_norm.weight"})
            if leaf.startswith("mlp.experts."):
                continue
            out[f"blk.{layer}.{names[leaf]}"] = t
    if arch == "qwen3moe":
        for layer in range(cfg["num_hidden_layers"]):
            for proj, short in (("gate_proj", "gate"), ("up_proj", "up"), ("down_proj", "down")):
                experts = [w[f"model.layers.{layer}.mlp.experts.{e}.{proj}.weight"].astype(np.float32)
                           for e in range(cfg.get("num_experts", cfg.get("num_local_experts")))]
                out[f"blk.{layer}.ffn_{short}_exps.weight"] = np.stack(experts)
    return out


def write(name, arch):
    cfg = json.loads((TINY / name / "config.json").read_text())
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{name}.gguf"
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(name)
    hd = cfg["head_dim"]
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    if arch == "gemma3":
        rp = cfg["rope_parameters"]
        w.add_rope_freq_base(rp["full_attention"]["rope_theta"])
        w.add_float32(f"{arch}.rope.freq_base_swa", rp["sliding_attention"]["rope_theta"])
        w.add_sliding_window(cfg["sliding_window"])
        w.add_array(f"{arch}.attention.sliding_window_pattern",
                    [t == "sliding_attention" for t in cfg["layer_types"]])
        w.add_float32("deepinfer.query_pre_attn_scalar", float(cfg["query_pre_attn_scalar"]))
    else:
        w.add_rope_freq_base(cfg["rope_parameters"]["rope_theta"])
    if arch == "qwen3moe":
        w.add_expert_count(cfg.get("num_experts", cfg.get("num_local_experts")))
        w.add_expert_used_count(cfg["num_experts_per_tok"])
        w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
        w.add_bool(f"{arch}.expert_weights_norm", bool(cfg["norm_topk_prob"]))
    for tname, t in sorted(tensors(name, arch, cfg).items()):
        w.add_tensor(tname, np.ascontiguousarray(t))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{path.relative_to(REPO)}: {path.stat().st_size / 1024:.0f} KiB")


def main():
    for name, arch in MODELS.items():
        write(name, arch)


if __name__ == "__main__":
    main()
