#!/usr/bin/env python3
"""Reference next-token distributions from llama.cpp on the real GGUF models.

For each model and each of a fixed set of varied texts, tokenizes the text with llama.cpp,
evaluates it with logits for every position, and stores per position p (which predicts
ids[p+1]): the top-32 (id, logprob) pairs of the full-vocabulary log-softmax and the logprob of
the actual next token. The C++ golden tests feed the same ids to `deepinfer score` and compare
top-1 agreement and KL divergence.

Needs llama-cpp-python (bench/setup_peers.sh builds it into build/bench-venv) and the models
in the deepinfer cache (`deepinfer pull smollm2-135m-instruct`, `deepinfer pull gemma3-270m`).

    build/bench-venv/bin/python tools/golden/make_llamacpp_golden.py            # both models
    build/bench-venv/bin/python tools/golden/make_llamacpp_golden.py --model smollm2
"""

import argparse
import ctypes
import hashlib
import json
import os
import pathlib
import sys

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[2]
OUT_DIR = REPO / "tests" / "golden" / "llamacpp"
TOP_K = 32
GGML_TYPE_F32 = 0
N_THREADS = 2
N_CTX = 1024
N_BATCH = 512
# Gemma 3 attends through a 512-token sliding window in 5 of every 6 layers; one text longer
# than the window makes the golden data cover the window's edge.
LONG_TEXT_TOKENS = 768

# Varied on purpose: prose, dialogue, code, digits, a recipe, a rendered chat with the model's
# control tokens, and two non-English texts, so that tokenizer paths and attention over both
# short and long contexts are exercised.
COMMON_TEXTS = [
    ("prose",
     "The lighthouse keeper had not seen a ship in eleven days. Each evening he climbed the spiral "
     "stairs, trimmed the wick, and polished the great lens until it caught the last of the sunset. "
     "The sea was calm and grey, and the gulls had gone quiet. He wrote in his logbook that the "
     "weather was fair, the light was burning, and that he expected the supply boat on Thursday."),
    ("dialogue",
     "\"Are you coming to the market tomorrow?\" asked Maria.\n"
     "\"Only if it doesn't rain,\" said Tom. \"Last week I got soaked on the way home.\"\n"
     "\"Then bring an umbrella. The apples are cheaper in the morning.\"\n"
     "\"Fine. Eight o'clock at the bridge?\"\n"
     "\"Eight o'clock. Don't be late this time.\""),
    ("code",
     "def fibonacci(n: int) -> list[int]:\n"
     "    \"\"\"Return the first n Fibonacci numbers.\"\"\"\n"
     "    result = []\n"
     "    a, b = 0, 1\n"
     "    for _ in range(n):\n"
     "        result.append(a)\n"
     "        a, b = b, a + b\n"
     "    return result\n"
     "\n"
     "if __name__ == \"__main__\":\n"
     "    print(fibonacci(10))\n"),
    ("numbers",
     "Prime numbers below one hundred: 2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, "
     "59, 61, 67, 71, 73, 79, 83, 89, 97. Powers of two: 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024."),
    ("recipe",
     "Pancakes (serves 4)\n"
     "Ingredients:\n"
     "- 200 g flour\n"
     "- 2 eggs\n"
     "- 300 ml milk\n"
     "- 1 tbsp sugar and a pinch of salt\n"
     "Method: whisk the eggs and milk, then stir in the flour, sugar and salt until smooth. "
     "Rest the batter for 20 minutes. Heat a little butter in a pan and cook each pancake for "
     "about a minute on each side."),
    ("french",
     "Le petit village se trouve au bord d'une rivière tranquille. Chaque matin, les habitants se "
     "retrouvent au café de la place pour boire un café et discuter des nouvelles du jour."),
    ("german",
     "Gestern Abend haben wir im Garten gegrillt. Das Wetter war schön, und die Kinder haben bis "
     "spät in die Nacht Fußball gespielt. Über Fragen wie „Wer hat gewonnen?“ wird noch gestritten."),
]

CHAT_TEXTS = {
    # ChatML, as SmolLM2's template renders it; the <|im_start|>/<|im_end|> markers become their
    # control tokens (tokenized with special=True).
    "smollm2": ("chat",
                "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
                "<|im_start|>user\nWhat is the capital of France, and what river runs through it?<|im_end|>\n"
                "<|im_start|>assistant\nThe capital of France is Paris. The Seine river runs through the "
                "city, dividing it into the Left Bank and the Right Bank.<|im_end|>\n"),
    # Gemma's turn markers (the 270M base model has no chat template in its metadata).
    "gemma3": ("chat",
               "<start_of_turn>user\nWhat is the capital of France, and what river runs through it?<end_of_turn>\n"
               "<start_of_turn>model\nThe capital of France is Paris. The Seine river runs through the city, "
               "dividing it into the Left Bank and the Right Bank.<end_of_turn>\n"),
}

MODELS = {
    "smollm2": {
        "file": "SmolLM2-135M-Instruct.Q4_1.gguf",
        "out": "smollm2_q4_1.json",
        "sha256": "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        "long_text": False,
    },
    "gemma3": {
        "file": "gemma-3-270m-q4_k_m.gguf",
        "out": "gemma3_270m_q4_k_m.json",
        "sha256": "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        "long_text": True,
    },
}


def model_cache_dir() -> pathlib.Path:
    """The same rule as deepinfer's model_cache_dir() (src/model/catalog.cpp)."""
    if os.environ.get("DEEPINFER_MODEL_DIR"):
        return pathlib.Path(os.environ["DEEPINFER_MODEL_DIR"])
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = pathlib.Path(xdg) if xdg.startswith("/") else pathlib.Path.home() / ".cache"
    return base / "deepinfer" / "models"


def sha256_file(path: pathlib.Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def llama_cpp_versions(llama_cpp) -> dict:
    out = {"llama_cpp_python": llama_cpp.__version__,
           "llama_cpp": llama_cpp.llama_version().decode()}
    # ggml's commit identifies the vendored llama.cpp source exactly.
    lib_dir = pathlib.Path(llama_cpp.__file__).parent / "lib"
    try:
        lib = ctypes.CDLL(str(lib_dir / "libggml-base.so"))
        for name in ("ggml_version", "ggml_commit"):
            fn = getattr(lib, name)
            fn.restype = ctypes.c_char_p
            out[name] = fn().decode()
    except (OSError, AttributeError):
        pass
    return out


def log_softmax(logits: np.ndarray) -> np.ndarray:
    x = logits.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def make_golden(key: str, model_path: pathlib.Path) -> dict:
    import llama_cpp

    spec = MODELS[key]
    digest = sha256_file(model_path)
    if digest != spec["sha256"]:
        sys.exit(f"{model_path}: sha256 {digest}, expected {spec['sha256']}")
    llm = llama_cpp.Llama(model_path=str(model_path), n_ctx=N_CTX, n_batch=N_BATCH, n_ubatch=N_BATCH,
                          n_threads=N_THREADS, n_threads_batch=N_THREADS, logits_all=True,
                          verbose=False,
                          # f32 KV cache and no flash attention: llama.cpp's most exact
                          # configuration, like for like with deepinfer's f32 KV cache. Its
                          # default f16 cache alone moves top-1 on ~2% of SmolLM2 positions.
                          type_k=GGML_TYPE_F32, type_v=GGML_TYPE_F32, flash_attn=False)
    add_bos = bool(llm._model.add_bos_token())
    texts = COMMON_TEXTS[:5] + [CHAT_TEXTS[key]] + COMMON_TEXTS[5:]
    if MODELS[key]["long_text"]:
        texts.append(("long", "\n\n".join(t for _, t in COMMON_TEXTS * 3)))
    cases = []
    for name, text in texts:
        special = name == "chat"
        ids = llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=special)
        if name == "long":
            ids = ids[:LONG_TEXT_TOKENS]
            text = llm.detokenize(ids[1:] if add_bos else ids).decode("utf-8", errors="replace")
        if len(ids) > N_CTX:
            sys.exit(f"text {name} has {len(ids)} tokens, more than n_ctx {N_CTX}")
        llm.reset()
        llm.eval(ids)
        logp = log_softmax(np.asarray(llm.scores[: len(ids)], dtype=np.float32))
        positions = []
        for p in range(len(ids) - 1):
            row = logp[p]
            top = np.argpartition(-row, TOP_K)[:TOP_K]
            top = top[np.argsort(-row[top], kind="stable")]
            positions.append({
                "next": round(float(row[ids[p + 1]]), 5),
                "top": [[int(i), round(float(row[i]), 5)] for i in top],
            })
        cases.append({"name": name, "text": text, "special_tokens": special, "ids": [int(i) for i in ids],
                      "positions": positions})
        print(f"  {name}: {len(ids)} tokens", file=sys.stderr)
    return {
        "description": "llama.cpp next-token log-probabilities: positions[p] predicts ids[p+1]; "
                       "top = the top-32 (id, logprob) of the full-vocabulary log-softmax, "
                       "next = logprob of ids[p+1]",
        "model_file": spec["file"],
        "model_sha256": digest,
        "add_bos": add_bos,
        "n_threads": N_THREADS,
        "n_batch": N_BATCH,
        "n_ctx": N_CTX,
        "kv_cache_type": "f32",
        "flash_attn": False,
        "top_k": TOP_K,
        "generator": "tools/golden/make_llamacpp_golden.py",
        "versions": llama_cpp_versions(llama_cpp),
        "n_positions": sum(len(c["positions"]) for c in cases),
        "cases": cases,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=sorted(MODELS) + ["all"], default="all")
    ap.add_argument("--model-dir", type=pathlib.Path, default=None,
                    help="where the GGUF files are (default: the deepinfer model cache)")
    args = ap.parse_args()
    model_dir = args.model_dir or model_cache_dir()
    keys = sorted(MODELS) if args.model == "all" else [args.model]
    for key in keys:
        path = model_dir / MODELS[key]["file"]
        if not path.is_file():
            sys.exit(f"{path} not found; run `build/bin/deepinfer pull` for it first")
        print(f"{key}: {path}", file=sys.stderr)
        golden = make_golden(key, path)
        out = OUT_DIR / MODELS[key]["out"]
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(golden, ensure_ascii=False, separators=(",", ":")) + "\n", encoding="utf-8")
        print(f"wrote {out.relative_to(REPO)}: {golden['n_positions']} positions, "
              f"{out.stat().st_size / 1e6:.2f} MB", file=sys.stderr)


if __name__ == "__main__":
    main()
