#!/usr/bin/env python3
"""Writes the seed corpora of every fuzz target but gguf_fuzz (whose seeds come from the tests'
GGUF writer, make_seeds.cpp, and, for antirez/ds4's DeepSeek V4 layout, corpus/ds4_layout.gguf from
tools/golden/make_dsv4_ds4_gguf.py --fuzz-seed), each from the repository's test data or short hard
cases written out here:
  corpus-tokenizer/        tokenizer_fuzz: texts
  corpus-recipe/           recipe_fuzz: small requests of each protocol from
                           tests/golden/recipe/prompts.json, one per combination of features
  corpus-http/             http_fuzz: a configuration byte, then what a client sends
  corpus-safetensors/      safetensors_fuzz: a layout byte, then the files (the tiny models of
                           tests/golden/tiny with every dimension cut to 1)
  corpus-tokenizer-json/   tokenizer_json_fuzz: the tokenizer.json fixtures of
                           tests/golden/tokenizer/hf_fixtures cut to their first tokens
  corpus-jinja/            jinja_fuzz: the chat templates of tests/golden/templates up to 8 KB
                           and the snippets of snippets.json
  corpus-grammar/          grammar_fuzz: a dialect byte, then a GBNF, Lark, regex or JSON Schema text
Inputs that fuzzing found (a failure once fixed, a case worth keeping) are added to the same
folders by hand; this script leaves every file it does not write alone.

Usage: python3 tests/fuzz/make_corpora.py     (standard library only)
"""
import json
import pathlib
import struct

HERE = pathlib.Path(__file__).resolve().parent
TESTS = HERE.parent
GOLDEN = TESTS / "golden" / "recipe" / "prompts.json"

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


# http_fuzz's first byte: bit 0 an API key, bit 1 no public paths, bit 2 small limits (256-byte
# headers, 64-byte bodies), bit 3 an error_body callback; bits 4-7 how the bytes are cut (index
# into 1, 2, 3, 4, 5, 7, 8, 11, 16, 17, 31, 64, 100, 128, 511, 1024). Requests name the host
# "localhost", which a server on loopback answers whatever its Host check.
HTTP_KEY = "fuzz-key-1"
HOST = "Host: localhost\r\n"
CHUNKED = "Transfer-Encoding: chunked\r\n"
HTTP_SEEDS = {
    "get_health": (0x00, "GET /health HTTP/1.1\r\n" + HOST + "\r\n"),
    "head_models": (0x60, "HEAD /v1/models HTTP/1.1\r\n" + HOST + "\r\n"),
    "echo_keep_alive_pipelined": (0x61, "POST /v1/echo HTTP/1.1\r\n" + HOST + "Authorization: Bearer " + HTTP_KEY +
                                  "\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n{\"a\": [1, 2]}"
                                  "GET /v1/models HTTP/1.1\r\n" + HOST + "x-api-key: " + HTTP_KEY + "\r\n\r\n"),
    "stream_chunked": (0x20, "POST /v1/stream HTTP/1.1\r\n" + HOST + CHUNKED + "\r\n"
                       "5;ext=1\r\nhello\r\nA\r\n, chunked!\r\n0\r\nTrailer-Field: v\r\n\r\n"),
    "expect_continue": (0xb1, "POST /v1/echo HTTP/1.1\r\n" + HOST + "Authorization: bearer  " + HTTP_KEY +
                        "  \r\nExpect: 100-continue\r\nContent-Length: 20\r\n\r\n01234567890123456789"),
    "preflight": (0x08, "OPTIONS /v1/echo HTTP/1.1\r\n" + HOST + "Origin: https://app.example\r\n"
                  "Access-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: authorization, content-type"
                  "\r\n\r\n"),
    "no_key": (0x01, "POST /v1/echo HTTP/1.1\r\n" + HOST + "Authorization: Bearer wrong\r\nContent-Length: 2\r\n\r\nhi"),
    "wrong_method": (0x40, "DELETE /health HTTP/1.1\r\n" + HOST + "\r\n"
                     "PUT /v1/echo HTTP/1.1\r\n" + HOST + "Content-Length: 0\r\n\r\n"),
    "unknown_path": (0x02, "GET /nowhere?x=1 HTTP/1.1\r\n" + HOST + "Connection: close\r\n\r\n"),
    "http10": (0x30, "GET /health HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /v1/models HTTP/1.0\r\n\r\n"),
    "header_over_small_limit": (0x04, "GET /health HTTP/1.1\r\n" + HOST + "X-Big: " + "a" * 300 + "\r\n\r\n"),
    "body_over_small_limit": (0x74, "POST /v1/echo HTTP/1.1\r\n" + HOST + "Content-Length: 100\r\n\r\n" + "b" * 100),
    "chunked_over_small_limit": (0x14, "POST /v1/stream HTTP/1.1\r\n" + HOST + CHUNKED + "\r\n"
                                 "40\r\n" + "c" * 64 + "\r\n1\r\nd\r\n0\r\n\r\n"),
    "transfer_encoding_gzip": (0x00, "POST /v1/echo HTTP/1.1\r\n" + HOST + "Transfer-Encoding: gzip\r\n\r\n"
                               "GET /health HTTP/1.1\r\n" + HOST + "\r\n"),
    "content_length_twice": (0x50, "POST /v1/echo HTTP/1.1\r\n" + HOST +
                             "Content-Length: 3\r\nContent-Length: 4\r\n\r\nabcd"),
    "chunked_and_length": (0x50, "POST /v1/echo HTTP/1.1\r\n" + HOST + "Content-Length: 3\r\n" + CHUNKED + "\r\n"
                           "3\r\nabc\r\n0\r\n\r\n"),
    "bad_chunk_size": (0x10, "POST /v1/stream HTTP/1.1\r\n" + HOST + CHUNKED + "\r\nzz\r\nabc\r\n0\r\n\r\n"),
    "obs_fold": (0x00, "OPTIONS /v1/echo HTTP/1.1\r\n" + HOST + "Access-Control-Request-Headers: a,\r\n b\r\n\r\n"),
    "bare_lf": (0x00, "GET /health HTTP/1.1\nHost: localhost\n\n"),
    "truncated": (0x10, "POST /v1/echo HTTP/1.1\r\n" + HOST + "Content-Length: 10\r\n\r\nabc"),
    "e2e_chat_head": (0x01, "POST /v1/chat/completions HTTP/1.1\r\n" + HOST + "Authorization: Bearer " + HTTP_KEY +
                      "\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"),
}


def http_seeds():
    return [(f"{name}.bin", bytes([mode]) + text.encode("latin-1")) for name, (mode, text) in HTTP_SEEDS.items()]


# safetensors_fuzz's first byte: layout in bits 0-1 (0: model.safetensors; 1: the index, a NUL,
# then the shard written as a.safetensors and b.safetensors; 2: config.json, a NUL, then
# model.safetensors), in bits 2-3 the committed config.json used when the input has none.
TINY_MODELS = ["llama_gqa_tied", "llama_mha_untied", "gemma3_sliding", "qwen3_moe_unnormalized"]
ELEMENT_BYTES = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
                 "F8_E4M3": 1, "F8_E8M0": 1}


def safetensors_bytes(tensors, metadata=None):
    """tensors: [(name, dtype, shape)], data filled with a counting byte pattern."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape in tensors:
        n = ELEMENT_BYTES[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + n]}
        data += bytes((len(data) + i) % 251 for i in range(n))
    text = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(text)) + text + data


def tiny_tensors(model):
    raw = (TESTS / "golden" / "tiny" / model / "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    metadata = header.pop("__metadata__", None)
    return [(name, info["dtype"], [1] * len(info["shape"])) for name, info in header.items()], metadata


def safetensors_seeds():
    out = []
    for index, model in enumerate(TINY_MODELS):
        tensors, metadata = tiny_tensors(model)
        out.append((f"{model}.bin", bytes([index << 2]) + safetensors_bytes(tensors, metadata)))
        config = (TESTS / "golden" / "tiny" / model / "config.json").read_bytes()
        out.append((f"{model}_config.bin", bytes([2]) + config + b"\0" + safetensors_bytes(tensors)))
    tensors, _ = tiny_tensors("llama_gqa_tied")
    weight_map = {name: "a.safetensors" for name, _, _ in tensors}
    index = json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}).encode()
    out.append(("sharded.bin", bytes([1]) + index + b"\0" + safetensors_bytes(tensors)))
    split = dict(weight_map, **{name: "b.safetensors" for name, _, _ in tensors[::2]})
    out.append(("sharded_split.bin", bytes([1]) + json.dumps({"weight_map": split}).encode() + b"\0" +
                safetensors_bytes(tensors)))
    odd = [("model.embed_tokens.weight", "F16", [2, 3]), ("model.norm.weight", "BF16", [3]),
           ("model.layers.0.self_attn.rotary_emb.inv_freq", "F32", [2]), ("extra.counts", "I64", [0, 4])]
    out.append(("dtypes.bin", bytes([0]) + safetensors_bytes(odd, {"format": "pt"})))
    whole = safetensors_bytes(tensors)
    out.append(("truncated.bin", bytes([0]) + whole[:len(whole) - 3]))
    # Block-scaled weights (block_scaled.h): FP8 codes with F32 block scales, FP4 pairs in I8
    # with UE8M0 scales, each multiplied out to BF16 by the loader.
    scaled = [("model.layers.0.self_attn.q_proj.weight", "F8_E4M3", [4, 4]),
              ("model.layers.0.self_attn.q_proj.weight_scale_inv", "F32", [2, 1]),
              ("model.layers.0.mlp.gate_proj.weight", "I8", [8, 2]),
              ("model.layers.0.mlp.gate_proj.scale", "F8_E8M0", [8, 2]),
              ("model.embed_tokens.weight", "F32", [2, 2])]
    out.append(("block_scaled.bin", bytes([0]) + safetensors_bytes(scaled)))
    # DeepSeek V4.1's config (nested text_config: the CSA2 schedule, candidates, Engram).
    dsv41 = (TESTS / "golden" / "dsv41_tiny" / "config.json").read_bytes()
    out.append(("dsv41_config.bin", bytes([2]) + dsv41 + b"\0" + safetensors_bytes([("embed.weight", "F32", [2, 2])])))
    return out


# tokenizer_json_fuzz: each fixture keeps its pipeline and its first tokens.
TOKENIZER_FIXTURES = ["fixture_affixes", "fixture_bytelevel_added", "fixture_metaspace", "fixture_spm_fallback"]
KEPT_TOKENS = 240


def cut_tokenizer(tokenizer):
    model = tokenizer["model"]
    vocab = {text: i for text, i in model["vocab"].items() if i < KEPT_TOKENS}
    prefix = model.get("continuing_subword_prefix") or ""
    merges = []
    for merge in model.get("merges", []):
        left, right = merge if isinstance(merge, list) else merge.split(" ", 1)
        merged = left + (right[len(prefix):] if prefix and right.startswith(prefix) else right)
        if left in vocab and right in vocab and merged in vocab:
            merges.append(merge)
    model["vocab"], model["merges"] = vocab, merges
    added, next_id = [], len(vocab)
    for token in tokenizer["added_tokens"]:
        if token["id"] >= KEPT_TOKENS:
            token = dict(token, id=next_id)
            next_id += 1
        added.append(token)
    tokenizer["added_tokens"] = added
    return tokenizer


def tokenizer_json_seeds():
    out = []
    for name in TOKENIZER_FIXTURES:
        path = TESTS / "golden" / "tokenizer" / "hf_fixtures" / name / "tokenizer.json"
        tokenizer = cut_tokenizer(json.loads(path.read_text(encoding="utf-8")))
        out.append((f"{name}.json", json.dumps(tokenizer, ensure_ascii=False, separators=(",", ":")).encode()))
    return out


MAX_TEMPLATE = 8000


def jinja_seeds():
    templates = TESTS / "golden" / "templates"
    out = []
    for path in sorted(templates.glob("*.jinja")):
        if path.stat().st_size <= MAX_TEMPLATE:
            out.append((path.name, path.read_bytes()))
    snippets = json.loads((templates / "snippets.json").read_text(encoding="utf-8"))["cases"]
    for i, case in enumerate(snippets):
        out.append((f"snippet_{i:02d}.jinja", case["template"].encode()))
    return out


# A dialect byte (grammar_fuzz.cpp: 0 GBNF, 1 Lark, 2 regex, 3 JSON Schema, 4 EBNF detection), then
# the grammar text.
GRAMMAR_SEEDS = {
    "gbnf_json": (0, 'root ::= "{" ws pair ("," ws pair)* "}"\npair ::= "\\"" [a-z]+ "\\":" ws value\n'
                     'value ::= [0-9]{1,3} | "true" | "[" (value ("," value)*)? "]"\nws ::= [ \\t\\n]*  # space\n'),
    "gbnf_extensions": (0, 'root ::= "<args>" %json {"type": "object", "required": ["a"]} "</args>" | %pattern "^x[0-9]+$"'),
    "lark_calc": (1, "?start: sum\n?sum: product | sum \"+\" product -> add\n     | sum \"-\" product\n"
                     "?product: atom | product \"*\" atom\n?atom: NUMBER | \"(\" sum \")\" | NAME~1..2\n"
                     "NAME: /[a-z_]+/\n%import common.NUMBER\n%import common (WS, CNAME)\n%ignore WS\n"),
    "lark_strings": (1, 'start: ESCAPED_STRING ("," ESCAPED_STRING)* ["."]\nTEXT.2: "ab"i | "a".."z"\n'
                        '%import common.ESCAPED_STRING -> ESCAPED_STRING\n'),
    "regex": (2, r"(\([0-9]{3}\) )?[0-9]{3}-[0-9]{4}|[A-Z][a-z]*\s\w+\d{2,}|\u00e9+|[^\x00-\x1f]{0,5}"),
    "schema_object": (3, json.dumps({"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 20}, "age": {"type": "integer", "minimum": 0, "maximum": 130},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3},
        "when": {"type": "string", "format": "date-time"}, "score": {"type": "number"},
        "ref": {"$ref": "#/$defs/node"}}, "required": ["name"], "additionalProperties": {"type": "boolean"},
        "$defs": {"node": {"anyOf": [{"type": "null"}, {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}}}]}}})),
    "schema_long_string": (3, json.dumps({"type": "string", "minLength": 2, "maxLength": 1500, "pattern": "^[a-z ]+$"})),
    "ebnf_lark": (4, 'start: "a" b*\nb: "b" | "c"\n'),
}


def grammar_seeds():
    return [(name, bytes([kind]) + text.encode("utf-8")) for name, (kind, text) in GRAMMAR_SEEDS.items()]


def write_corpus(directory, seeds):
    """(Re)writes the generated seeds; other files (inputs fuzzing found) stay."""
    directory.mkdir(exist_ok=True)
    for name, data in seeds:
        (directory / name).write_bytes(data)


def main():
    write_corpus(HERE / "corpus-recipe", [(name, text.encode("utf-8")) for name, text in recipe_seeds()])
    write_corpus(HERE / "corpus-tokenizer",
                 [(f"{name}.txt", text.encode("utf-8")) for name, text in TEXT_SEEDS.items()] +
                 [(f"{name}.bin", data) for name, data in INVALID_SEEDS.items()])
    write_corpus(HERE / "corpus-http", http_seeds())
    write_corpus(HERE / "corpus-safetensors", safetensors_seeds())
    write_corpus(HERE / "corpus-tokenizer-json", tokenizer_json_seeds())
    write_corpus(HERE / "corpus-jinja", jinja_seeds())
    write_corpus(HERE / "corpus-grammar", grammar_seeds())


if __name__ == "__main__":
    main()
