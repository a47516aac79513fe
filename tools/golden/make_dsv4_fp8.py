#!/usr/bin/env python3
"""DeepSeek V4 in its release format: tests/golden/dsv4_tiny quantized as DeepSeek ships V4.

Writes tests/golden/dsv4_fp8/:
  config.json, model.safetensors   the tiny model as the official checkpoints store it: the
      official tensor names (layers.N..., attn.kv_norm, embed.weight, head.weight, norm.weight,
      hc_head_*),
      attention and shared-expert projections as FP8 e4m3 with a UE8M0 scale per block
      ("<name>.scale", F8_E8M0), routed experts as FP4 e2m1 packed two per byte (I8, element 2i
      in the low nibble) with a UE8M0 scale per 32 inputs, compressor / indexer / router weights,
      embedding and head in BF16, norms BF16, mHC parameters, sinks, ape and biases F32;
      quantization_config as the release writes it.
  dequantized/                      the same model with every block-scaled weight multiplied out
      here (code value x 2^(scale - 127)) and stored as BF16, which holds each product exactly.

The FP8 blocks are 16 x 8 instead of the release's 128 x 128: the tiny matrices (24 to 128
rows, 24 to 64 columns) then have several blocks a side, partial ones at the edges, and a
row/column mix-up or an off-by-one block changes the weights.

Quantization as DeepSeek's own (per block: scale = 2^ceil(log2(amax / max_code)), codes
rounded to nearest, ties to the even code). This script is the independent reference for the
decoding: tests/golden/dsv4_tiny_test.cpp loads both directories and expects the same logits.

Pure Python (no numpy or torch):
    python3 tools/golden/make_dsv4_fp8.py
Deterministic: the output depends only on tests/golden/dsv4_tiny.
"""

import bisect
import json
import math
import re
import shutil
import struct
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "tests" / "golden" / "dsv4_tiny"
OUT = ROOT / "tests" / "golden" / "dsv4_fp8"
FP8_BLOCK = (16, 8)
FP4_BLOCK = 32

FP8_PROJECTIONS = re.compile(
    r"attn\.(wq_a|wq_b|wkv|wo_a|wo_b|indexer\.wq_b)\.weight$|ffn\.shared_experts\.w[123]\.weight$")
FP4_EXPERTS = re.compile(r"ffn\.experts\.\d+\.w[123]\.weight$")
BF16_MATRICES = re.compile(
    r"(compressor\.(wkv|wgate)|indexer\.weights_proj|ffn\.gate)\.weight$|^(embed|head)\.weight$")
BF16_NORMS = re.compile(r"norm\.weight$")


# ---- safetensors ----

DTYPE_BYTES = {"F32": 4, "BF16": 2, "I64": 8, "I8": 1, "F8_E4M3": 1, "F8_E8M0": 1}


def read_safetensors(path):
    data = path.read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    base = 8 + n
    out = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        out[name] = (info["dtype"], info["shape"], data[base + begin:base + end])
    return out


def write_safetensors(path, tensors):
    header, chunks, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        dtype, shape, raw = tensors[name]
        assert len(raw) == math.prod(shape) * DTYPE_BYTES[dtype], name
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(chunks))


def f32_values(raw):
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))


def bf16_bytes(values):
    """Round to nearest even, as torch does."""
    out = bytearray()
    for v in values:
        bits = struct.unpack("<I", struct.pack("<f", v))[0]
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        out += struct.pack("<H", bits)
    return bytes(out)


def bf16_exact_bytes(values):
    raw = bf16_bytes(values)
    back = [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in struct.unpack(f"<{len(values)}H", raw)]
    assert back == values, "a dequantized weight is not exact in BF16"
    return raw


# ---- the codes ----

def e4m3_value(code):
    sign = -1.0 if code & 0x80 else 1.0
    exponent, mantissa = (code >> 3) & 0xF, code & 0x7
    if exponent == 0:
        return sign * mantissa * 2.0 ** -9
    return sign * (1 + mantissa / 8) * 2.0 ** (exponent - 7)


def e2m1_value(nibble):
    sign = -1.0 if nibble & 0x8 else 1.0
    exponent, mantissa = (nibble >> 1) & 0x3, nibble & 0x1
    if exponent == 0:
        return sign * 0.5 * mantissa
    return sign * (1 + mantissa / 2) * 2.0 ** (exponent - 1)


FP8_CODES = sorted(range(0x7F), key=e4m3_value)  # non-negative finite codes (0x7f is NaN)
FP4_CODES = sorted(range(8), key=e2m1_value)


def nearest(x, codes, value, sign_bit):
    """The code nearest |x| (ties to the even code), with x's sign."""
    magnitudes = [value(c) for c in codes]
    a = abs(x)
    i = bisect.bisect_left(magnitudes, a)
    if i == len(codes):
        best = codes[-1]
    elif i == 0:
        best = codes[0]
    else:
        lo, hi = codes[i - 1], codes[i]
        dlo, dhi = a - value(lo), value(hi) - a
        best = lo if dlo < dhi or (dlo == dhi and lo % 2 == 0) else hi
    return best | (sign_bit if x < 0 and best != 0 else 0)


def block_scale(values, max_code):
    amax = max((abs(v) for v in values), default=0.0)
    if amax == 0:
        return 127
    exponent = math.ceil(math.log2(amax / max_code))
    return max(0, min(254, exponent + 127))


def quantize(values, rows, cols, block, code_value, codes, sign_bit, max_code):
    """Codes (row-major), scales [ceil(rows / br), ceil(cols / bc)], and the dequantized values."""
    br, bc = block
    srows, scols = -(-rows // br), -(-cols // bc)
    scales = [0] * (srows * scols)
    q = [0] * (rows * cols)
    deq = [0.0] * (rows * cols)
    for sr in range(srows):
        for sc in range(scols):
            cells = [(r, c) for r in range(sr * br, min(rows, (sr + 1) * br))
                     for c in range(sc * bc, min(cols, (sc + 1) * bc))]
            s = block_scale([values[r * cols + c] for r, c in cells], max_code)
            scales[sr * scols + sc] = s
            factor = 2.0 ** (s - 127)
            for r, c in cells:
                code = nearest(values[r * cols + c] / factor, codes, code_value, sign_bit)
                q[r * cols + c] = code
                deq[r * cols + c] = code_value(code) * factor
    return q, scales, deq, [srows, scols]


def official_name(name):
    for old, new in (("model.embed_tokens.weight", "embed.weight"), ("model.norm.weight", "norm.weight"),
                     ("model.hc_head.hc_fn", "hc_head_fn"), ("model.hc_head.hc_base", "hc_head_base"),
                     ("model.hc_head.hc_scale", "hc_head_scale")):
        if name == old:
            return new
    name = name[len("model."):] if name.startswith("model.") else name
    # transformers saves the K=V norm as attn.norm; the release calls it attn.kv_norm.
    return re.sub(r"^(layers\.\d+\.attn)\.norm\.weight$", r"\1.kv_norm.weight", name)


def main():
    source = read_safetensors(SRC / "model.safetensors")
    release, reference = {}, {}
    counts = {"fp8": 0, "fp4": 0}
    for hf_name, (dtype, shape, raw) in sorted(source.items()):
        name = official_name(hf_name)
        if dtype != "F32":
            release[name] = reference[name] = (dtype, shape, raw)
            continue
        values = f32_values(raw)
        if FP8_PROJECTIONS.search(name):
            rows, cols = shape
            q, scales, deq, sshape = quantize(values, rows, cols, FP8_BLOCK, e4m3_value, FP8_CODES, 0x80, 448.0)
            release[name] = ("F8_E4M3", shape, bytes(q))
            release[name[:-len(".weight")] + ".scale"] = ("F8_E8M0", sshape, bytes(scales))
            reference[name] = ("BF16", shape, bf16_exact_bytes(deq))
            counts["fp8"] += 1
        elif FP4_EXPERTS.search(name):
            rows, cols = shape
            q, scales, deq, sshape = quantize(values, rows, cols, (1, FP4_BLOCK), e2m1_value, FP4_CODES, 0x8, 6.0)
            packed = bytes(q[i] | (q[i + 1] << 4) for i in range(0, len(q), 2))  # element 2i low
            release[name] = ("I8", [rows, cols // 2], packed)
            release[name[:-len(".weight")] + ".scale"] = ("F8_E8M0", sshape, bytes(scales))
            reference[name] = ("BF16", shape, bf16_exact_bytes(deq))
            counts["fp4"] += 1
        elif BF16_MATRICES.search(name) or BF16_NORMS.search(name):
            release[name] = reference[name] = ("BF16", shape, bf16_bytes(values))
        else:
            release[name] = reference[name] = ("F32", shape, raw)

    config = json.loads((SRC / "config.json").read_text())
    config.pop("dtype", None)
    if OUT.exists():
        shutil.rmtree(OUT)
    (OUT / "dequantized").mkdir(parents=True)
    (OUT / "dequantized" / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    config["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                     "scale_fmt": "ue8m0", "weight_block_size": list(FP8_BLOCK)}
    (OUT / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    write_safetensors(OUT / "model.safetensors", release)
    write_safetensors(OUT / "dequantized" / "model.safetensors", reference)
    print(f"{counts['fp8']} FP8 and {counts['fp4']} FP4 matrices; wrote {OUT}")


if __name__ == "__main__":
    main()
