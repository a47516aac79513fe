#!/usr/bin/env python3
"""Writes the seed corpora of tokenizer_fuzz and recipe_fuzz (tests/fuzz/corpus-tokenizer/,
tests/fuzz/corpus-recipe/). Recipe seeds are small requests of each protocol taken from
tests/golden/recipe/prompts.json, one per combination of features (tools, images, tool calls,
streaming, rejected); tokenizer seeds are short hard cases written out here.

Usage: python3 tests/fuzz/make_text_seeds.py     (standard library only)
"""
import json
import pathlib

HERE = pathlib.Path(__file__).resolve().parent
GOLDEN = HERE.parent / "golden" / "recipe" / "prompts.json"

TEXT_SEEDS = {
    "english": "The quick brown fox jumps over the lazy dog. It's 3:45pm, isn't it?\n",
    "code": "def f(x):\n\treturn {'a': [1, 2.5e-7, None]}  # comment\n\nint main() { return 0; }\n",
    "cjk": "日本語のテキストと中文混合，한국어도 있습니다。",
    "arabic_hindi": "مرحبا بالعالم — नमस्ते दुनिया",
    "emoji": "👩‍👩‍👧‍👦 👍🏽 🏳️‍🌈 family: 👨‍💻",
    "combining": "e\u0301 a\u0308 n\u0303 Z\u0351\u0352\u0353 \u1100\u1161\u11a8",
    "digits": "1234567890 3.14159265358979 000000000000000000001",
    "whitespace": "a  b   c\t\td\n\n\ne \r\n  \u00a0\u3000end   ",
    "specials": "<|im_start|>user\nhi<|im_end|><｜User｜>x<｜Assistant｜></think><think>"
                "<start_of_turn>model<end_of_turn><｜begin▁of▁sentence｜><s></s><unk><0x0A>",
    "long_word": "Pneumonoultramicroscopicsilicovolcanoconiosis" * 4,
    "segments": "hello\x01Aworld\x01\x7f<｜User｜>\x01",
}
INVALID_SEEDS = {
    "invalid_utf8": b"ok \xff\xfe \xc3 \xed\xa0\x80 \xf0\x9f\x98 end",
    "nul": b"a\x00b\x00\x00c",
}


def recipe_seeds():
    cases = json.loads(GOLDEN.read_text(encoding="utf-8"))["cases"]
    out = []
    for protocol in ("chat", "responses", "messages"):
        seen = set()
        for case in cases:
            if case.get("protocol") != protocol:
                continue
            text = json.dumps(case["request"], ensure_ascii=False, separators=(",", ":"))
            if len(text) > 1500:
                continue
            features = ("tools" in text, "image" in text, "error" in case,
                        any(k in text for k in ("tool_call", "tool_use", "function_call")), "stream" in text)
            if features in seen:
                continue
            seen.add(features)
            out.append((f"{protocol}_{len(seen) - 1:02d}.json", text))
    return out


def main():
    recipe_dir = HERE / "corpus-recipe"
    tokenizer_dir = HERE / "corpus-tokenizer"
    for d in (recipe_dir, tokenizer_dir):
        d.mkdir(exist_ok=True)
        for f in d.iterdir():
            f.unlink()
    for name, text in recipe_seeds():
        (recipe_dir / name).write_text(text, encoding="utf-8")
    for name, text in TEXT_SEEDS.items():
        (tokenizer_dir / f"{name}.txt").write_bytes(text.encode("utf-8"))
    for name, data in INVALID_SEEDS.items():
        (tokenizer_dir / f"{name}.bin").write_bytes(data)


if __name__ == "__main__":
    main()
