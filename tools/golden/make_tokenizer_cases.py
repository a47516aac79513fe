#!/usr/bin/env python3
"""Regenerates tests/golden/tokenizer/{smollm2,gemma3}.json: reference token ids for varied texts.

The reference is llama.cpp's tokenizer, reached through llama-cpp-python with vocab_only=True:
it reads the same GGUF vocabulary (tokens, scores, merges, token types) that deepinfer reads, so
the comparison tests our tokenizer and not a difference between two vocabulary files.

Usage:
  python tools/golden/make_tokenizer_cases.py [--models DIR]

DIR defaults to the deepinfer model cache (${XDG_CACHE_HOME:-~/.cache}/deepinfer/models), which
`deepinfer pull smollm2-135m-instruct` and `deepinfer pull gemma3-270m` fill. Needs the Python
package llama-cpp-python.
"""

import argparse
import ctypes
import json
import os
import pathlib

from llama_cpp import Llama
import llama_cpp

REPO = pathlib.Path(__file__).resolve().parents[2]
OUT_DIR = REPO / "tests" / "golden" / "tokenizer"

MODELS = {
    "smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf",
    "gemma3": "gemma-3-270m-q4_k_m.gguf",
}

TEXTS = [
    # English prose and punctuation
    "",
    "Hello world",
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "hello",
    " hello",
    "  hello",
    "hello ",
    "Hello World HELLO world hElLo",
    "What's the weather like today? It's sunny, isn't it?",
    "don't I'll we've they're she'd it's you'm",
    "DON'T I'LL WE'VE",
    "Mr. Smith went to Washington; he said: \"Yes!\" (really) [maybe] {sure}",
    "...!!!???---___***",
    "e-mail: someone@example.com, url: https://example.org/a/b?c=d&e=f#g",
    "Once upon a time, in a land far, far away, there lived a curious little robot named Pixel. "
    "Every morning it rolled down the hill to watch the sun rise over the sea.",
    # numbers
    "1234567",
    "3.14",
    "The year 2024 had 366 days; pi is 3.14159 and e is 2.71828.",
    "1,000,000 and 1_000_000 and 0x1F and 1e-9 and -42",
    "Call 555-0100 at 10:30am on 2024-01-15.",
    # whitespace
    "a  b",
    "a   b    c",
    "   ",
    "\n",
    "\n\n",
    "line one\nline two\n\nline four\n",
    "tab\tseparated\tvalues\t\tend",
    "windows\r\nline\r\nendings",
    "trailing spaces   \nand tabs\t\t\n",
    "  leading and trailing  ",
    # code
    "def add(a, b):\n    return a + b\n",
    "class Foo:\n    def __init__(self):\n        self.x = [1, 2, 3]\n        self.y = {'k': None}\n",
    "int main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
    "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }",
    "{\"name\": \"deepinfer\", \"version\": [0, 1, 0], \"ok\": true}",
    "<table><tr><td>cell</td></tr></table>",
    "if x == 1 and y != 2 or z >= 3:  # comment\n        pass",
    # accented Latin and other scripts
    "café naïve résumé über Straße façade",
    "e\u0301 combining acute vs \u00e9 precomposed",
    "Привет, мир! Как дела?",
    "Γειά σου Κόσμε",
    "こんにちは世界",
    "你好，世界！我们今天去公园吧。",
    "안녕하세요 세계",
    "مرحبا بالعالم",
    "שלום עולם",
    "नमस्ते दुनिया",
    "สวัสดีชาวโลก",
    # emoji and symbols
    "I love 🍕 and 🎉!",
    "👨‍👩‍👧‍👦 family, 👍🏽 thumbs, 🇫🇷 flag",
    "∑ x² ≤ ∞ → ∀ε>0 ∃δ",
    "non\u00a0breaking\u2009thin\u200bzero-width",
    "€100 £50 ¥1000 ₹500",
    # special-token spellings (parse_special on and off)
    "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>",
    "before<|im_start|>after",
    "<start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n",
    "<bos>text<eos>",
    "<|im_start <|im_end|",
    "a<|im_end|>b<end_of_turn>c",
]


def token_piece(llm, token):
    """The bytes llama.cpp renders for one token (special=False: control tokens are empty).

    Llama.detokenize cannot serve here: it renders each token through a 32-byte buffer and so
    truncates long tokens such as runs of spaces.
    """
    size = 64
    while True:
        buf = ctypes.create_string_buffer(size)
        n = llama_cpp.llama_token_to_piece(llm._model.vocab, token, buf, size, 0, False)
        if n >= 0:
            return buf.raw[:n]
        size = -n


def decode(llm, ids):
    return b"".join(token_piece(llm, t) for t in ids).decode("utf-8", "replace")


def sample_ids(n_vocab):
    """Token ids whose pieces are recorded: the first 300 (control and byte tokens live there in
    both vocabularies), about 700 spread over the rest, and the last 20."""
    ids = set(range(min(300, n_vocab)))
    ids.update(range(300, n_vocab, max(1, n_vocab // 700)))
    ids.update(range(max(0, n_vocab - 20), n_vocab))
    return sorted(ids)


def model_dir(arg):
    if arg:
        return pathlib.Path(arg)
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(cache) / "deepinfer" / "models"


def format_doc(doc):
    """JSON with one case per line, so a regenerated file diffs case by case."""
    head = {k: v for k, v in doc.items() if k not in ("cases", "pieces")}
    lines = [json.dumps(head, ensure_ascii=False)[:-1] + ', "pieces": {']
    pieces = list(doc["pieces"].items())
    for i in range(0, len(pieces), 8):
        row = ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in pieces[i:i + 8])
        lines.append("  " + row + ("," if i + 8 < len(pieces) else ""))
    lines.append('}, "cases": [')
    for i, case in enumerate(doc["cases"]):
        comma = "," if i + 1 < len(doc["cases"]) else ""
        lines.append("  " + json.dumps(case, ensure_ascii=False) + comma)
    lines.append("]}")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="directory holding the GGUF files")
    args = parser.parse_args()
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    for name, file in MODELS.items():
        path = model_dir(args.models) / file
        llm = Llama(model_path=str(path), vocab_only=True, verbose=False)
        cases = []
        for text in TEXTS:
            data = text.encode("utf-8")
            ids = llm.tokenize(data, add_bos=False, special=False)
            ids_special = llm.tokenize(data, add_bos=False, special=True)
            cases.append({
                "text": text,
                "ids": ids,
                "ids_special": ids_special,
                # control tokens render as empty text (llama.cpp's default, special=False)
                "decoded_special": decode(llm, ids_special),
            })
        doc = {
            "model": file,
            "reference": f"llama-cpp-python {llama_cpp.__version__} (llama.cpp tokenizer, vocab_only, add_bos=False)",
            "n_vocab": llm.n_vocab(),
            # token id -> the hex of its bytes as decode renders them
            "pieces": {str(t): token_piece(llm, t).hex() for t in sample_ids(llm.n_vocab())},
            "cases": cases,
        }
        out = OUT_DIR / f"{name}.json"
        out.write_text(format_doc(doc), encoding="utf-8")
        print(f"wrote {out.relative_to(REPO)}: {len(cases)} cases")


if __name__ == "__main__":
    main()
