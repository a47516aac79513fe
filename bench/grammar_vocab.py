"""The vocabulary that `deepinfer bench grammar --tokenizer` uses, for the grammar peers.

deepinfer reads SmolLM2's vocabulary from the GGUF file's metadata (tokenizer.ggml.*), and the
DeepSeek V4 one from its Hugging Face directory (tokenizer.json). The peers need both as token
bytes (their token tries) and as an encoder that gives the same ids as deepinfer's tokenizer,
so a GGUF vocabulary is written out once as a tokenizer.json (under build/, never committed)
with the pre-tokenizer deepinfer applies for it (src/tokenizer/regex_split.cpp).

Needs the `tokenizers` package, and `gguf` for a GGUF file (both on PyPI).
"""

import dataclasses
import hashlib
import json
import pathlib

REPO = pathlib.Path(__file__).resolve().parents[1]
VOCAB_CACHE = REPO / "build" / "peers" / "vocab"

# Byte-level BPE: pre-tokenizers by GGUF `tokenizer.ggml.pre`, as deepinfer splits. StarCoder's
# family (SmolLM) isolates every digit before the GPT-2 pattern; HF's Digits does the same.
_BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
_PRE_TOKENIZERS = {
    "gpt2": _BYTE_LEVEL,
    "smollm": {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True}, _BYTE_LEVEL]},
}
_GGUF_CONTROL = 3  # tokenizer.ggml.token_type of a control token


@dataclasses.dataclass
class Vocab:
    name: str
    tokenizer_json: pathlib.Path
    token_bytes: list  # bytes per id; a special token's bytes are its spelling
    special_ids: list  # control tokens: never produced by grammar text
    eos_id: int
    stop_ids: list  # allowed exactly where the grammar may end

    def encoder(self):
        """An encoder of instance text: no BOS, and special-token spellings stay plain text
        (deepinfer's encode without --special)."""
        import tokenizers

        tok = tokenizers.Tokenizer.from_file(str(self.tokenizer_json))
        tok.encode_special_tokens = True
        return lambda text: tok.encode(text, add_special_tokens=False).ids


def _byte_decoder() -> dict:
    """GPT-2's byte-to-printable-character table, inverted."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars = {b: b for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = 256 + extra
            extra += 1
    return {chr(c): b for b, c in chars.items()}


def _piece_bytes(piece: str, decoder: dict) -> bytes:
    if all(ch in decoder for ch in piece):
        return bytes(decoder[ch] for ch in piece)
    return piece.encode("utf-8")


def _gguf_to_tokenizer_json(gguf_path: pathlib.Path) -> tuple:
    import gguf

    reader = gguf.GGUFReader(str(gguf_path))

    def field(key):
        f = reader.fields.get(key)
        return None if f is None else f.contents()

    model, pre = field("tokenizer.ggml.model"), field("tokenizer.ggml.pre") or "gpt2"
    if model != "gpt2" or pre not in _PRE_TOKENIZERS:
        raise SystemExit(f"{gguf_path}: vocabulary {model}/{pre} is not one this converter writes (byte-level BPE: "
                         f"{', '.join(_PRE_TOKENIZERS)})")
    tokens, types, merges = field("tokenizer.ggml.tokens"), field("tokenizer.ggml.token_type"), field("tokenizer.ggml.merges")
    control = [i for i, t in enumerate(types) if t == _GGUF_CONTROL]
    doc = {
        "version": "1.0", "truncation": None, "padding": None, "normalizer": None, "post_processor": None,
        "added_tokens": [{"id": i, "content": tokens[i], "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for i in control],
        "pre_tokenizer": _PRE_TOKENIZERS[pre],
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {t: i for i, t in enumerate(tokens)}, "merges": list(merges)},
    }
    eos = int(field("tokenizer.ggml.eos_token_id"))
    return doc, eos


def _eos_of_hf_dir(directory: pathlib.Path, doc: dict) -> int:
    config = json.loads((directory / "tokenizer_config.json").read_text())
    eos = config.get("eos_token")
    eos = eos.get("content") if isinstance(eos, dict) else eos
    for added in doc.get("added_tokens", []):
        if added["content"] == eos:
            return added["id"]
    if eos in doc["model"]["vocab"]:
        return doc["model"]["vocab"][eos]
    raise SystemExit(f"{directory}: eos_token {eos!r} is not in the vocabulary")


def _vocab_from_doc(name: str, path: pathlib.Path, doc: dict, eos: int) -> Vocab:
    decoder = _byte_decoder()
    pieces = dict((i, p) for p, i in doc["model"]["vocab"].items())
    special = []
    for added in doc.get("added_tokens", []):
        pieces[added["id"]] = added["content"]
        if added.get("special"):
            special.append(added["id"])
    n_vocab = max(pieces) + 1
    special_set = set(special)
    token_bytes = []
    for i in range(n_vocab):
        piece = pieces.get(i, "")
        token_bytes.append(piece.encode("utf-8") if i in special_set else _piece_bytes(piece, decoder))
    return Vocab(name=name, tokenizer_json=path, token_bytes=token_bytes, special_ids=sorted(special_set),
                 eos_id=eos, stop_ids=[eos])


def load_vocab(path_arg: str) -> Vocab:
    """A GGUF file, a tokenizer.json, or a directory holding tokenizer.json (+ tokenizer_config.json)."""
    path = pathlib.Path(path_arg).expanduser()
    if path.is_dir():
        tj = path / "tokenizer.json"
        doc = json.loads(tj.read_text())
        return _vocab_from_doc(path.name, tj, doc, _eos_of_hf_dir(path, doc))
    if path.suffix == ".json":
        doc = json.loads(path.read_text())
        return _vocab_from_doc(path.parent.name, path, doc, _eos_of_hf_dir(path.parent, doc))
    doc, eos = _gguf_to_tokenizer_json(path)
    text = json.dumps(doc, ensure_ascii=False)
    VOCAB_CACHE.mkdir(parents=True, exist_ok=True)
    out = VOCAB_CACHE / f"{path.stem}-{hashlib.sha256(text.encode()).hexdigest()[:12]}.tokenizer.json"
    if not out.exists():
        out.write_text(text)
    return _vocab_from_doc(path.stem, out, doc, eos)
