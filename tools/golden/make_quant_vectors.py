#!/usr/bin/env python3
"""Regenerates tests/golden/quant/<type>.txt: random blocks of each GGUF block format and the
floats that gguf-py's numpy dequantizer (gguf.quants.dequantize) makes of them.

The blocks are random bytes except their half-float scales, which are set to sane values
(random magnitudes between 2^-10 and 2^-2, mins of either sign), so every code path of the
format (all nibbles, high bits, 6-bit scales) is exercised without infinities or NaNs.
F16 and BF16 rows are random normal values. Q8_1 and Q8_K have no dequantizer in gguf-py;
tests/unit/backend/quant_ref_test.cpp checks them with hand-built blocks.

File format (read by quant_golden_test.cpp):
  # comment lines
  type <name as ggml spells it>
  n_blocks <blocks>
  block_bytes <bytes per block>
  bytes <hex of all blocks>
  values <n_blocks * block size floats, 9 significant digits, exact for float32>

Usage:
  python tools/golden/make_quant_vectors.py        # needs numpy and gguf (pip install gguf)
"""

import pathlib

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize

REPO = pathlib.Path(__file__).resolve().parents[2]
OUT_DIR = REPO / "tests" / "golden" / "quant"

# type -> (file name, byte offsets of half-float scales that must be positive, offsets of
# half-float mins that may take either sign)
FORMATS = {
    T.Q4_0: ("q4_0", [0], []),
    T.Q4_1: ("q4_1", [0], [2]),
    T.Q5_0: ("q5_0", [0], []),
    T.Q5_1: ("q5_1", [0], [2]),
    T.Q8_0: ("q8_0", [0], []),
    T.Q2_K: ("q2_K", [80, 82], []),
    T.Q3_K: ("q3_K", [108], []),
    T.Q4_K: ("q4_K", [0, 2], []),
    T.Q5_K: ("q5_K", [0, 2], []),
    T.Q6_K: ("q6_K", [208], []),
}


def half_bytes(value: float) -> bytes:
    return np.array([value], dtype=np.float16).tobytes()


def random_blocks(rng: np.random.Generator, qtype: T, n_blocks: int) -> bytes:
    _, scale_offsets, min_offsets = FORMATS[qtype]
    block_size, type_size = gguf.GGML_QUANT_SIZES[qtype]
    out = bytearray()
    for _ in range(n_blocks):
        block = bytearray(rng.integers(0, 256, type_size, dtype=np.uint8).tobytes())
        for off in scale_offsets:
            block[off : off + 2] = half_bytes(2.0 ** rng.uniform(-10, -2))
        for off in min_offsets:
            block[off : off + 2] = half_bytes(rng.choice([-1, 1]) * 2.0 ** rng.uniform(-10, -2))
        out += block
    return bytes(out)


def write(name: str, n_blocks: int, block_bytes: int, data: bytes, values: np.ndarray) -> None:
    lines = [
        f"# Golden dequantization vectors for {name}; regenerate with tools/golden/make_quant_vectors.py.",
        f"# Reference: gguf-py {gguf_version()} (gguf.quants.dequantize).",
        f"type {name}",
        f"n_blocks {n_blocks}",
        f"block_bytes {block_bytes}",
        f"bytes {data.hex()}",
        "values",
    ]
    vals = [f"{float(v):.9g}" for v in values.astype(np.float32).ravel()]
    for i in range(0, len(vals), 8):
        lines.append(" ".join(vals[i : i + 8]))
    (OUT_DIR / f"{name}.txt").write_text("\n".join(lines) + "\n")


def gguf_version() -> str:
    try:
        from importlib.metadata import version

        return version("gguf")
    except Exception:  # noqa: BLE001 - only for the comment line
        return "unknown"


def main() -> None:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(20240601)
    for qtype, (name, _, _) in FORMATS.items():
        block_size, type_size = gguf.GGML_QUANT_SIZES[qtype]
        n_blocks = 4 if block_size == 32 else 2
        data = random_blocks(rng, qtype, n_blocks)
        values = dequantize(np.frombuffer(data, dtype=np.uint8).reshape(n_blocks, type_size), qtype)
        write(name, n_blocks, type_size, data, values.reshape(-1))

    n = 64
    f16 = rng.normal(0.0, 2.0, n).astype(np.float16)
    write("f16", n, 2, f16.tobytes(), f16.astype(np.float32))
    # bf16: the upper half of float32 values (truncation is as good as any rounding here).
    f32 = rng.normal(0.0, 2.0, n).astype(np.float32)
    bf16 = (f32.view(np.uint32) >> 16).astype(np.uint16)
    write("bf16", n, 2, bf16.tobytes(), (bf16.astype(np.uint32) << 16).view(np.float32))
    print(f"wrote {len(FORMATS) + 2} files to {OUT_DIR}")


if __name__ == "__main__":
    main()
