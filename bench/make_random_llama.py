#!/usr/bin/env python3
"""A random-weight GGUF with the exact tensor shapes of Llama-3.2-1B, for prefill benchmarks.

Llama-3.2-1B's shapes: hidden 2048, 16 layers, 32 heads of 64, 8 KV heads, FFN 8192, vocabulary
128256, rope theta 500000 with llama3 rope scaling (factor 32, low/high frequency factors 1 and
4, original context 8192; written as rope_freqs.weight as convert_hf_to_gguf.py writes it),
RMS norm eps 1e-5, tied embeddings (no output.weight: the output projection is token_embd),
context 131072. Matrices are F16 drawn from a normal distribution with std 0.02 (activations
stay finite through the 16 layers), norm weights are 1 (F32). The weights are random, so the
text the model generates means nothing; its speed is the speed of the real model.

The tokenizer is SmolLM2's (the tokenizer.ggml.* keys of the SmolLM2 GGUF in deepinfer's model
cache, found with the same rule as bench/run_vs_llamacpp.py), its 49152 tokens padded to 128256
with "<pad_N>" tokens of type UNUSED (5): both llama.cpp and deepinfer load the padded
vocabulary, and byte-level BPE never produces the padding tokens from text.

    build/bench-venv/bin/pip install gguf                 # once
    build/bench-venv/bin/python bench/make_random_llama.py          # build/models-random/*.gguf
    build/bench-venv/bin/python bench/make_random_llama.py --quantize Q4_0,Q4_K_M,Q8_0

--quantize runs llama.cpp's llama-quantize on the F16 file: the binary built from the
llama-cpp-python sdist's vendor/llama.cpp in build/peers/llama.cpp-0.3.36/build (the tree
bench/serve_vs_llamacpp.py builds llama-server in; `cmake --build ... --target llama-quantize`),
or where that is not built, the same llama_model_quantize() through llama-cpp-python.
"""

import argparse
import math
import os
import pathlib
import subprocess
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from run_vs_llamacpp import model_cache_dir  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]
OUT_DIR = REPO / "build" / "models-random"
PEERS = REPO / "build" / "peers"
LLAMA_CPP_PYTHON_VERSION = "0.3.36"
TOKENIZER_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

HIDDEN = 2048
LAYERS = 16
HEADS = 32
KV_HEADS = 8
HEAD_DIM = 64
FFN = 8192
VOCAB = 128256
ROPE_THETA = 500000.0
RMS_EPS = 1e-5
CONTEXT = 131072
ROPE_SCALING = {"factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_context_length": 8192}


def rope_factors() -> np.ndarray:
    """llama3 rope scaling as convert_hf_to_gguf.py writes it into rope_freqs.weight."""
    s = ROPE_SCALING
    freqs = 1.0 / (ROPE_THETA ** (np.arange(0, HEAD_DIM, 2, dtype=np.float32) / HEAD_DIM))
    low_wavelen = s["original_context_length"] / s["low_freq_factor"]
    high_wavelen = s["original_context_length"] / s["high_freq_factor"]
    out = []
    for f in freqs:
        wavelen = 2 * math.pi / f
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(s["factor"])
        else:
            smooth = (s["original_context_length"] / wavelen - s["low_freq_factor"]) / (
                s["high_freq_factor"] - s["low_freq_factor"])
            out.append(1 / ((1 - smooth) / s["factor"] + smooth))
    return np.array(out, dtype=np.float32)


def copy_tokenizer(gguf, writer, source: pathlib.Path) -> None:
    reader = gguf.GGUFReader(str(source))
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        types = field.types
        value = field.contents()
        if key == "tokenizer.ggml.tokens":
            value = list(value) + [f"<pad_{i}>" for i in range(len(value), VOCAB)]
        elif key == "tokenizer.ggml.token_type":
            value = list(value) + [int(gguf.TokenType.UNUSED)] * (VOCAB - len(value))
        if types[0] == gguf.GGUFValueType.ARRAY:
            writer.add_key_value(key, value, gguf.GGUFValueType.ARRAY, sub_type=types[-1])
        else:
            writer.add_key_value(key, value, types[0])


def tensor_list() -> list[tuple[str, tuple[int, ...], str]]:
    """(name, numpy shape (rows, columns), kind) in the order convert_hf_to_gguf.py writes them."""
    out = [("rope_freqs.weight", (HEAD_DIM // 2,), "rope"), ("token_embd.weight", (VOCAB, HIDDEN), "w")]
    for i in range(LAYERS):
        b = f"blk.{i}."
        out += [
            (b + "attn_norm.weight", (HIDDEN,), "norm"),
            (b + "ffn_down.weight", (HIDDEN, FFN), "w"),
            (b + "ffn_gate.weight", (FFN, HIDDEN), "w"),
            (b + "ffn_up.weight", (FFN, HIDDEN), "w"),
            (b + "ffn_norm.weight", (HIDDEN,), "norm"),
            (b + "attn_k.weight", (KV_HEADS * HEAD_DIM, HIDDEN), "w"),
            (b + "attn_output.weight", (HIDDEN, HEADS * HEAD_DIM), "w"),
            (b + "attn_q.weight", (HEADS * HEAD_DIM, HIDDEN), "w"),
            (b + "attn_v.weight", (KV_HEADS * HEAD_DIM, HIDDEN), "w"),
        ]
    out.append(("output_norm.weight", (HIDDEN,), "norm"))
    return out


def write_f16(gguf, path: pathlib.Path, tokenizer_source: pathlib.Path, seed: int, std: float) -> None:
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("Llama-3.2-1B-shaped random weights")
    writer.add_context_length(CONTEXT)
    writer.add_embedding_length(HIDDEN)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_freq_base(ROPE_THETA)
    writer.add_layer_norm_rms_eps(RMS_EPS)
    writer.add_key_length(HEAD_DIM)
    writer.add_value_length(HEAD_DIM)
    writer.add_rope_dimension_count(HEAD_DIM)
    writer.add_vocab_size(VOCAB)
    writer.add_file_type(int(gguf.LlamaFileType.MOSTLY_F16))
    copy_tokenizer(gguf, writer, tokenizer_source)

    tensors = tensor_list()
    for name, shape, kind in tensors:
        dtype = np.float16 if kind == "w" else np.float32
        writer.add_tensor_info(name, shape, np.dtype(dtype), int(np.prod(shape)) * np.dtype(dtype).itemsize)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    rng = np.random.default_rng(seed)
    for name, shape, kind in tensors:
        if kind == "rope":
            data = rope_factors()
        elif kind == "norm":
            data = np.ones(shape, dtype=np.float32)
        else:
            data = (rng.standard_normal(shape, dtype=np.float32) * std).astype(np.float16)
        writer.write_tensor_data(data)
    writer.close()


def quantize(src: pathlib.Path, out: pathlib.Path, qtype: str) -> None:
    """llama.cpp's llama-quantize where it is built, else the same llama_model_quantize() through
    llama-cpp-python (the library bench/setup_peers.sh builds from the same sources)."""
    binary = PEERS / f"llama.cpp-{LLAMA_CPP_PYTHON_VERSION}" / "build" / "bin" / "llama-quantize"
    if binary.exists():
        subprocess.run([str(binary), str(src), str(out), qtype], check=True)
        return
    import ctypes
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{qtype}")
    params.nthread = os.cpu_count() or 1
    print(f"{binary.relative_to(REPO)} not built; quantizing to {qtype} through llama-cpp-python "
          f"{llama_cpp.__version__}", file=sys.stderr)
    if llama_cpp.llama_model_quantize(str(src).encode(), str(out).encode(), ctypes.byref(params)) != 0:
        sys.exit(f"quantizing {src.name} to {qtype} failed")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out-dir", type=pathlib.Path, default=OUT_DIR)
    ap.add_argument("--tokenizer", type=pathlib.Path, default=None,
                    help=f"GGUF whose tokenizer.* keys are copied (default: {TOKENIZER_FILE} in the model cache)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--std", type=float, default=0.02)
    ap.add_argument("--quantize", default="", help="comma-separated llama-quantize types, e.g. Q4_0,Q4_K_M,Q8_0")
    ap.add_argument("--force", action="store_true", help="write files that exist again")
    args = ap.parse_args()

    import gguf

    tokenizer_source = args.tokenizer or model_cache_dir() / TOKENIZER_FILE
    if not tokenizer_source.is_file():
        sys.exit(f"{tokenizer_source} not found; run `build/bin/deepinfer pull smollm2-135m-instruct`")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    f16 = args.out_dir / "llama-3.2-1b-random.F16.gguf"
    if args.force or not f16.exists():
        tmp = f16.with_suffix(".tmp")
        write_f16(gguf, tmp, tokenizer_source, args.seed, args.std)
        tmp.rename(f16)
    print(f16)
    for qtype in filter(None, args.quantize.split(",")):
        out = args.out_dir / f"llama-3.2-1b-random.{qtype}.gguf"
        if args.force or not out.exists():
            tmp = out.with_suffix(".tmp")
            quantize(f16, tmp, qtype)
            tmp.rename(out)
        print(out)


if __name__ == "__main__":
    main()
