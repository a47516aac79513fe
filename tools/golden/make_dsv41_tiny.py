#!/usr/bin/env python3
"""DeepSeek V4.1: a tiny random model and NVIDIA NeMo Automodel's DeepseekV41ForCausalLM answer.

transformers has no V4.1; NeMo Automodel (PyPI `nemo-automodel`, 0.7.0) ships a port of the
release (nemo_automodel/components/models/deepseek_v41), with eager CPU paths. This script runs
its full-sequence forward as the reference.

Writes tests/golden/dsv41_tiny/ (config.json, model.safetensors under the release's tensor names,
golden.json): hidden 32, eight layers with compress ratios [0, 0, 2, 2, 2, 1, 1, 1]:
  - layers 0-1 sliding window only;
  - layer 2 a Full CSA2 layer (ratio 2: softmax-gated pairs), the KV source of 3 and 4;
  - layer 3 Reuse (layer 2's selection), layer 4 Reindex (its own queries over layer 2's keys);
  - layer 5 a Full layer of ratio 1 and the candidate source (blocks of 2 entries, 3 kept);
  - layer 6 Reuse, layer 7 Reindex restricted to layer 5's candidate blocks.
Single-pass mHC (4 streams, 20 Sinkhorn iterations, no hyper head), MoE in every layer
(sqrt-softplus top-2 of 4 with a correction bias, a shared expert), 4 query heads of 32, one
K=V head, 8 trailing rope channels (interleaved pairs), grouped low-rank output (2 x 16),
sinks, an indexer of 8 heads x 32 keeping 3 entries, window 8, YaRN on the compress rope. The
release's cache round trips are part of the forward: FP8 window KV (blocks of 32), NVFP4
compressed KV (16), MXFP4 index queries and keys (32). Engram before the attention site of
layers 1 and 4: n-grams of 2 to 4 token classes, 2 hash heads per order over buckets from 31 up,
16-wide table rows. No DSpark layers. float32, every weight random under a fixed seed.

The Engram classes come from the tokenizer: tokenizer.json here is a 128-token byte-level
vocabulary made for it (case, width and accent variants, ligatures, whitespace runs, bytes that
are not UTF-8 alone, special tokens), whose classes golden.json also holds
("engram_token_classes", NeMo's _compressed_token_map over Hugging Face's tokenizers).

golden.json holds the prompt, the full forward's logits at every prompt position
("prefill_logits"), the greedy continuation ("greedy") with the full forward's logits at each
step ("step_logits"), and the smallest gaps of the discrete choices over the whole sequence
(top-k of index scores and of candidate blocks, greedy margins), so that a prompt whose choices
hang on rounding is rejected. NeMo's port has no KV-cache decode: the full forward over the
grown sequence is the reference for every step.

Needs torch, transformers and nemo-automodel (without its dependencies) plus pillow:
    build/ref-venv/bin/pip install torch transformers pillow
    build/ref-venv/bin/pip install --no-deps nemo-automodel==0.7.0
    build/ref-venv/bin/python tools/golden/make_dsv41_tiny.py

Seeded: rerunning with the same versions gives the same files.
"""

import json
import math
import shutil
from importlib import metadata
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from nemo_automodel.components.models.common import BackendConfig
from nemo_automodel.components.models.deepseek_v41.config import DeepseekV41Config
from nemo_automodel.components.models.deepseek_v41.model import DeepseekV41ForCausalLM
from nemo_automodel.components.models.deepseek_v41.quantization import quantize_cache

OUT = Path(__file__).resolve().parents[2] / "tests" / "golden" / "dsv41_tiny"
SEED = 410
PROMPT_LEN = 40
N_NEW = 24
WEIGHT_STD = 0.15
MIN_MARGIN = 1e-2
MIN_TOPK_GAP = 3e-4

TEXT = dict(
    vocab_size=128, hidden_size=32, moe_intermediate_size=32, num_hidden_layers=8,
    num_attention_heads=4, num_key_value_heads=1, head_dim=32, qk_rope_head_dim=8, q_lora_rank=24,
    o_lora_rank=16, o_groups=2, n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2,
    routed_scaling_factor=1.5, swiglu_limit=10.0, sliding_window=8,
    compress_ratios=[0, 0, 2, 2, 2, 1, 1, 1, 0, 0, 0], kv_source_layer_ids=[2, 5],
    index_source_layer_ids=[2, 4, 5, 7], index_n_heads=8, index_head_dim=32, index_topk=3,
    candidate_source_layer_id=5, candidate_topk_blocks=3, candidate_block_size=2,
    hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6, rms_norm_eps=1e-6,
    rope_theta=10000.0, compress_rope_theta=160000.0,
    rope_scaling={"rope_type": "yarn", "factor": 16, "beta_fast": 32, "beta_slow": 1,
                  "original_max_position_embeddings": 65536},
    engram_layer_ids=[1, 4], engram_num_embeddings=[300, 600], engram_max_ngram_size=4, engram_vocab_size=31,
    engram_n_heads=2, engram_head_dim=16, engram_pad_token_id=2,
    num_nextn_predict_layers=3, dspark_block_size=5, dspark_noise_token_id=127, dspark_target_layer_ids=[5, 6, 7],
    dspark_markov_rank=16, dspark_n_routed_experts=4, dspark_num_experts_per_tok=3,
    max_position_embeddings=256, dtype="float32",
    bos_token_id=0, eos_token_id=1, pad_token_id=2, initializer_range=WEIGHT_STD,
)


# The tiny vocabulary: three special tokens, then texts whose Engram classes collide in every
# way the normaliser folds (NFKC, NFD + dropped marks, lowercase, whitespace runs, strip), and
# lone bytes that are not UTF-8 (keyed by their raw token string), then ASCII filler to 128.
SPECIALS = ["<bos>", "<eos>", "<pad>"]
TEXTS = [
    "Hello", "hello", "HELLO", " hello", "hello ", "\thello", "Caf\u00e9", "cafe", "cafe\u0301", "\ufb01", "fi",
    "\uff21", "a", "A", " ", "  ", "\n", "\n\n", "\t", " \n ", "\u00df", "\u0130", "\u01c5", "1", "\uff11",
    "\u4e2d", "\u4e2d ", "\u0915\u093f", "\u0915", "\u00c5", "A\u030a", "\u212b", " x ", "x", "X  ", "\u2460",
]
BYTES = [b"\xc3", b"\xa9", b"\xe2\x82", b"\xff", b"\x80"]


def make_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    # GPT-2's bytes-to-unicode map, which ByteLevel uses.
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) + \
        list(range(ord("\u00ae"), ord("\u00ff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    byte_map = dict(zip(bs, map(chr, cs)))
    pieces = [t.encode() for t in TEXTS] + BYTES
    filler = [a + b for a in "bcdefgjklmnopqrstuvwyz" for b in "aeiou"]
    for f in filler:
        if len(SPECIALS) + len(pieces) >= TEXT["vocab_size"]:
            break
        if f.encode() not in pieces:
            pieces.append(f.encode())
    vocab = {s: i for i, s in enumerate(SPECIALS)}
    for p in pieces:
        vocab["".join(byte_map[b] for b in p)] = len(vocab)
    assert len(vocab) == TEXT["vocab_size"], len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIALS)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>")


def backend():
    return BackendConfig(attn="eager", linear="torch", rms_norm="torch_fp32", experts="torch",
                         dispatcher="torch", enable_hf_state_dict_adapter=True)


@torch.no_grad()
def randomize(module, seed):
    """Every parameter drawn in name order from one generator: norms near 1, mHC scales near 1
    and bases around 0, sinks, Engram's gate weights near 1 and its table, the rest
    N(0, WEIGHT_STD); then the routers' correction biases."""
    gen = torch.Generator().manual_seed(seed)
    for name, p in sorted(module.named_parameters()):
        noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
        if name.endswith("norm.weight"):
            p.copy_(1.0 + 0.2 * noise)
        elif name.endswith("_hc.scale"):
            p.copy_(1.0 + 0.3 * noise)
        elif name.endswith("_hc.base") or name.endswith("sinks_param.weight"):
            p.copy_(0.5 * noise)
        elif name.endswith("engram.q_weight") or name.endswith("engram.k_weight"):
            p.copy_(1.0 + 0.3 * noise)
        elif name.endswith("engram.embed.weight"):
            p.copy_(0.5 * noise)
        else:
            p.copy_(WEIGHT_STD * noise)
    for name, b in sorted(module.named_buffers()):
        if name.endswith("e_score_correction_bias"):
            b.copy_(0.1 * torch.randn(b.shape, generator=gen))


@torch.no_grad()
def build_model(tokenizer):
    from nemo_automodel.components.models.deepseek_v41.engram import _compressed_token_map
    classes, n_classes = _compressed_token_map(tokenizer)
    text = dict(TEXT, engram_compressed_vocab_size=n_classes)
    config = DeepseekV41Config(text_config=text, vision_config=dict(num_hidden_layers=0), dtype="float32")
    torch.manual_seed(SEED)
    model = DeepseekV41ForCausalLM(config, backend=backend(), tokenizer=tokenizer).float().eval()
    randomize(model, SEED)
    return config, model, classes


def save(config, model, tokenizer):
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    tokenizer.save_pretrained(OUT)
    for extra in ("special_tokens_map.json",):
        (OUT / extra).unlink(missing_ok=True)
    tensors = model.state_dict_adapter.to_hf(model.state_dict())
    # bias_vl routes image tokens only (the vision tower is off).
    tensors = {k: v.contiguous() for k, v in tensors.items() if not k.endswith(".gate.bias_vl")}
    save_file(tensors, OUT / "model.safetensors")
    cfg = config.to_dict()
    cfg.pop("vision_config", None)
    (OUT / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    return sorted(tensors)


class TopkGaps:
    """The smallest gap between the k-th and (k+1)-th finite values of every top-k the
    forward takes (index selections and candidate blocks)."""

    def __init__(self):
        self.gap = math.inf
        self.orig = torch.Tensor.topk

    def __enter__(self):
        orig, me = self.orig, self

        def topk(t, k, *args, **kwargs):
            if t.dim() >= 2 and t.is_floating_point():
                rows = t.reshape(-1, t.shape[-1])
                for r in rows:
                    v = torch.sort(r[torch.isfinite(r)], descending=True).values
                    if v.numel() > k:
                        me.gap = min(me.gap, float(v[k - 1] - v[k]))
            return orig(t, k, *args, **kwargs)

        torch.Tensor.topk = topk
        return self

    def __exit__(self, *exc):
        torch.Tensor.topk = self.orig


@torch.no_grad()
def logits_of(model, seq):
    return model(torch.tensor([seq])).logits[0]


@torch.no_grad()
def full_forward_greedy(model, prompt):
    seq, steps, margin = list(prompt), [], math.inf
    for _ in range(N_NEW):
        logits = logits_of(model, seq)[-1]
        top = torch.topk(logits, 2)
        margin = min(margin, float(top.values[0] - top.values[1]))
        steps.append(logits)
        seq.append(int(top.indices[0]))
    return seq[len(prompt):], steps, margin


def round_trips():
    """The release's cache formats through NeMo's quantize_cache: per format, inputs over many
    binades (with exact e2m1 / e4m3 midpoints among them) and what the round trip makes of them."""
    gen = torch.Generator().manual_seed(SEED + 2)
    out = {}
    for fmt, block in (("fp8", 32), ("mxfp4", 32), ("nvfp4", 16)):
        x = torch.randn(8, 64, generator=gen) * torch.exp2(torch.randint(-30, 12, (8, 1), generator=gen).float())
        # Midpoints of the e2m1 grid at scale 1 (a block whose amax is 6), and e4m3 ties.
        x[0, :9] = torch.tensor([6.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.75])
        x[1, :4] = torch.tensor([448.0, 1.0625, 1.1875, -17.0])
        y = quantize_cache(x, format=fmt, block_size=block)
        out[fmt] = {"block": block, "x": [[float(v) for v in r] for r in x], "y": [[float(v) for v in r] for r in y]}
    return out


@torch.no_grad()
def build_dspark(config, model):
    """The three DSpark draft layers (mtp.0..2), random under their own seed (after the target's
    weights, which stay as they are), with the target's embedding and lm_head."""
    from types import SimpleNamespace
    options = SimpleNamespace(num_draft_layers=3, target_layer_ids=[5, 6, 7], block_size=5, num_anchors=1,
                              mask_token_id=TEXT["dspark_noise_token_id"], markov_rank=16, markov_head_type="vanilla",
                              confidence_head_alpha=1.0, confidence_head_with_markov=True,
                              confidence_head_stop_gradient=False)
    torch.manual_seed(SEED + 3)
    draft = config.build_dspark_draft(options).float().eval()
    randomize(draft, SEED + 3)
    return draft


def dspark_tensors(config, draft):
    """The draft layers under the release's names (mtp.N.*, experts one by one), through NeMo's
    own DSpark state-dict adapter; the embedding and lm_head are the target's."""
    from nemo_automodel.components.models.deepseek_v41.state_dict_adapter import DeepseekV41DSparkStateDictAdapter
    adapter = DeepseekV41DSparkStateDictAdapter(config.text_config, draft.moe_config, backend(), dtype=torch.float32)
    tensors = adapter.to_hf(draft.state_dict())
    return {k: v.contiguous() for k, v in tensors.items()
            if k.startswith("mtp.") and not k.endswith(".gate.bias_vl")}


@torch.no_grad()
def dspark_golden(model, draft, seq):
    """The target's features (the residual streams entering attention in layers 5, 6, 7,
    averaged over the streams, as NeMo's DSpark trainer takes them), then for a few anchors the
    draft block: base logits (lm_head of the normed output), the greedy chain with the Markov
    bias (each slot's previous token: the anchor, then the slot before's pick) and the
    confidence logits."""
    taps = {}
    modules = model.get_dspark_target_feature_modules([5, 6, 7])
    hooks = [m.register_forward_pre_hook(lambda mod, args, i=i: taps.__setitem__(i, args[0].mean(dim=2)))
             for i, m in enumerate(modules)]
    model(torch.tensor([seq]))
    for h in hooks:
        h.remove()
    features = torch.cat([taps[i] for i in range(3)], dim=-1)
    block, noise = TEXT["dspark_block_size"], TEXT["dspark_noise_token_id"]
    out = []
    for anchor in (3, 5, 20, 24, 33, 41, 47, 55, 60):
        if len(out) == 4:
            break
        anchors = torch.tensor([[anchor]])
        ids = torch.tensor([[seq[anchor]] + [noise] * (block - 1)])
        embeddings = model.model.embed_tokens(ids)
        positions = draft.build_position_ids(anchors, len(seq))
        mask = draft.build_attention_mask(anchors, torch.tensor([[True]]), len(seq), torch.float32)
        prev = [seq[anchor]]
        result = draft.__class__.__mro__[1].forward(draft, embeddings, features, position_ids=positions,
                                                    attention_mask=mask, previous_token_ids=torch.tensor([prev * block]))
        normed = result.normalized_hidden_states[0]
        base = F.linear(normed, model.lm_head.weight.float())
        last = draft.mtp[-1]
        logits, confidence = [], []
        for k in range(block):
            bias, e = last.markov_head(torch.tensor([prev[k]]))
            row = base[k] + bias[0]
            logits.append(row)
            confidence.append(float(last.confidence_head(normed[k:k + 1], e)[0]))
            if k + 1 < block:
                prev.append(int(row.argmax()))
        margin = min(float(torch.topk(r, 2).values[0] - torch.topk(r, 2).values[1]) for r in logits)
        if margin < MIN_MARGIN:
            continue  # a greedy pick that rounding could flip
        out.append({"anchor": anchor, "drafts": prev[1:] + [int(logits[-1].argmax())],
                    "logits": [rounded(r) for r in logits], "confidence": [float(f"{c:.7g}") for c in confidence],
                    "min_margin": float(f"{margin:.4g}")})
    return out


def rounded(t):
    return [float(f"{float(v):.7g}") for v in t]


def main():
    tokenizer = make_tokenizer()
    config, model, classes = build_model(tokenizer)
    names = save(config, model, tokenizer)
    draft = build_dspark(config, model)
    tensors = load_file(OUT / "model.safetensors")
    tensors.update(dspark_tensors(config, draft))
    save_file(tensors, OUT / "model.safetensors")
    rng = torch.Generator().manual_seed(SEED + 1)
    for attempt in range(200):
        prompt = torch.randint(3, TEXT["vocab_size"], (PROMPT_LEN,), generator=rng).tolist()
        ids, steps, margin = full_forward_greedy(model, prompt)
        if margin < MIN_MARGIN:
            continue
        with TopkGaps() as gaps:
            logits_of(model, prompt + ids)
        if gaps.gap >= MIN_TOPK_GAP:
            break
    else:
        raise SystemExit("no prompt with clear greedy margins and top-k gaps")
    prefill = logits_of(model, prompt)
    golden = {
        "nemo_automodel_version": metadata.version("nemo-automodel"),
        "torch_version": torch.__version__,
        "seed": SEED,
        "prompt_ids": prompt,
        "prefill_logits": [rounded(r) for r in prefill],
        "greedy": ids,
        "greedy_min_margin": float(f"{margin:.4g}"),
        "topk_min_gap": float(f"{gaps.gap:.4g}"),
        "step_logits": [rounded(s) for s in steps],
        "cache_round_trips": round_trips(),
        "engram_token_classes": list(classes),
        "dspark": dspark_golden(model, draft, prompt + ids),
        "tensor_names": names,
    }
    (OUT / "golden.json").write_text(json.dumps(golden, indent=None, separators=(",", ":")) + "\n")
    print(f"prompt attempt {attempt}, greedy margin {margin:.4g}, top-k gap {gaps.gap:.4g}")
    print("greedy:", ids)


if __name__ == "__main__":
    main()
