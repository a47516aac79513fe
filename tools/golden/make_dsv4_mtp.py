#!/usr/bin/env python3
"""DeepSeek V4's MTP layer (num_nextn_predict_layers = 1): a reference built from transformers'
V4 blocks, composed as vLLM's DeepSeekV4MultiTokenPredictorLayer composes them.

transformers' DeepseekV4ForCausalLM ignores the MTP weights, so the reference here is the
composition vLLM runs (model_executor/models/deepseek_v4_mtp.py), over transformers' own
DeepseekV4DecoderLayer, DeepseekV4HyperHead and DeepseekV4RMSNorm. For a row at position p:

    e = enorm(embed(t[p+1]))            zero where p == 0
    h = hnorm(H[p])                     per stream; H = the main model's streams before hc_head
    x = h_proj(h) + e_proj(e)           e_proj broadcast over the hc_mult streams
    x = block(x, position p)            one V4 block: sliding-window attention, MoE
    logits = head(norm(hc_head(x)))     the MTP's own hc_head and norm, the main lm_head

and x (the streams) is the next chained row's H. The rope position is p, the position of H,
not of the token.

Writes tests/golden/dsv4_mtp/: the tiny model of tests/golden/dsv4_tiny (same main weights)
with one MTP layer under the release's names (mtp.0.*), config.json saying
num_nextn_predict_layers 1, and golden.json:
  "sequence"     the dsv4_tiny prompt and its greedy continuation (64 tokens);
  "mtp_logits"   the MTP's logits for rows 0..62 of that sequence, each from the main model's
                 full-forward streams (the row at p predicts t[p+2]);
  "chain"        drafting after the prompt and the first greedy token (context n = 41): the
                 row at n-2 gives draft 1, then rows n-1.. chain on the MTP's own streams and
                 draft tokens; "chain_tokens" and "chain_logits" (one row per draft).
The sliding window (8) is crossed many times by both.

Needs torch and transformers >= 5.8 (build/ref-venv as tools/golden/make_dsv4_tiny.py says):
    build/ref-venv/bin/python tools/golden/make_dsv4_mtp.py
Seeded: rerunning with the same versions gives the same files.
"""

import json
import shutil
import tempfile
from pathlib import Path

import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import DeepseekV4Config, DeepseekV4ForCausalLM
from transformers.masking_utils import create_sliding_window_causal_mask
from transformers.models.deepseek_v4 import modeling_deepseek_v4 as m

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "golden" / "dsv4_tiny"
OUT = ROOT / "tests" / "golden" / "dsv4_mtp"
SEED = 161
WEIGHT_STD = 0.15
N_CHAIN = 4


def init_(name, p, gen):
    noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
    if name.endswith("norm.weight") or name in ("enorm", "hnorm", "norm"):
        p.copy_(1.0 + 0.2 * noise)
    elif name.endswith("scale"):
        p.copy_(1.0 + 0.3 * noise)
    elif name.endswith("base") or name.endswith("sinks"):
        p.copy_(0.5 * noise)
    else:
        p.copy_(WEIGHT_STD * noise)


class Mtp(torch.nn.Module):
    def __init__(self, config):
        super().__init__()
        block_config = DeepseekV4Config(**{**config.to_dict(), "num_hidden_layers": 1,
                                           "layer_types": ["sliding_attention"], "mlp_layer_types": ["moe"]})
        block_config._attn_implementation = config._attn_implementation
        block_config._experts_implementation = getattr(config, "_experts_implementation", None)
        self.block_config = block_config
        d = config.hidden_size
        self.enorm = m.DeepseekV4RMSNorm(d, eps=config.rms_norm_eps)
        self.hnorm = m.DeepseekV4RMSNorm(d, eps=config.rms_norm_eps)
        self.e_proj = torch.nn.Linear(d, d, bias=False)
        self.h_proj = torch.nn.Linear(d, d, bias=False)
        self.block = m.DeepseekV4DecoderLayer(block_config, 0)
        self.hc_head = m.DeepseekV4HyperHead(config)
        self.norm = m.DeepseekV4RMSNorm(d, eps=config.rms_norm_eps)

    @torch.no_grad()
    def streams(self, model, tokens_next, positions, hidden):
        """tokens_next[i] = t[p_i + 1], hidden[i] = H[p_i] ([S, hc, D]); one causal pass."""
        e = model.model.embed_tokens(torch.tensor([tokens_next]))
        e = torch.where(torch.tensor(positions).view(1, -1, 1) == 0, torch.zeros_like(e), e)
        e = self.enorm(e)
        x = self.h_proj(self.hnorm(hidden.unsqueeze(0))) + self.e_proj(e).unsqueeze(-2)
        pos = torch.tensor([positions])
        rope = {"main": model.model.rotary_emb(e, position_ids=pos, layer_type="main"),
                "compress": model.model.rotary_emb(e, position_ids=pos, layer_type="compress")}
        mask = create_sliding_window_causal_mask(config=self.block_config, inputs_embeds=e, attention_mask=None,
                                                 cache=None, position_ids=pos)
        return self.block(x, position_embeddings=rope, position_ids=pos, attention_mask=mask, input_ids=None,
                          cache=None)[0]

    @torch.no_grad()
    def block_alone(self, model, x, positions):
        """self.block over streams x [S, hc, D], called as streams() calls it."""
        e = torch.zeros(1, x.shape[0], x.shape[-1])
        pos = torch.tensor([positions])
        rope = {"main": model.model.rotary_emb(e, position_ids=pos, layer_type="main"),
                "compress": model.model.rotary_emb(e, position_ids=pos, layer_type="compress")}
        mask = create_sliding_window_causal_mask(config=self.block_config, inputs_embeds=e, attention_mask=None,
                                                 cache=None, position_ids=pos)
        return self.block(x.unsqueeze(0), position_embeddings=rope, position_ids=pos, attention_mask=mask,
                          input_ids=None, cache=None)[0]

    @torch.no_grad()
    def logits(self, model, streams):
        return model.lm_head(self.norm(self.hc_head(streams.unsqueeze(0))))[0]


def release_names(mtp, config):
    """The MTP block's tensors under the release's names: a one-layer model holding the block is
    saved by transformers (which writes the release's layer names) and layers.0 becomes mtp.0."""
    one = DeepseekV4ForCausalLM(mtp.block_config).float()
    one.model.layers[0].load_state_dict(mtp.block.state_dict())
    with tempfile.TemporaryDirectory() as tmp:
        one.save_pretrained(tmp)
        saved = load_file(Path(tmp) / "model.safetensors")
    out = {}
    for name, t in saved.items():
        if name.startswith("model.layers.0."):
            rest = name[len("model.layers.0."):]
            # The release spells the K=V norm attn.kv_norm (transformers saves attn.norm).
            rest = rest.replace("attn.norm.weight", "attn.kv_norm.weight")
            out["mtp.0." + rest] = t.contiguous()
    out["mtp.0.enorm.weight"] = mtp.enorm.weight.detach().clone()
    out["mtp.0.hnorm.weight"] = mtp.hnorm.weight.detach().clone()
    out["mtp.0.e_proj.weight"] = mtp.e_proj.weight.detach().clone()
    out["mtp.0.h_proj.weight"] = mtp.h_proj.weight.detach().clone()
    out["mtp.0.norm.weight"] = mtp.norm.weight.detach().clone()
    out["mtp.0.hc_head_fn"] = mtp.hc_head.hc_fn.detach().clone()
    out["mtp.0.hc_head_base"] = mtp.hc_head.hc_base.detach().clone()
    out["mtp.0.hc_head_scale"] = mtp.hc_head.hc_scale.detach().clone()
    return out


def rounded(t):
    return [float(f"{float(v):.7g}") for v in t]


@torch.no_grad()
def main():
    model = DeepseekV4ForCausalLM.from_pretrained(TINY, dtype=torch.float32).float().eval()
    tiny = json.loads((TINY / "golden.json").read_text())
    seq = tiny["prompt_ids"] + tiny["greedy"]
    config = model.config

    torch.manual_seed(SEED)
    mtp = Mtp(config).float().eval()
    gen = torch.Generator().manual_seed(SEED)
    for name, p in sorted(mtp.named_parameters()):
        init_(name, p, gen)
    for name, b in sorted(mtp.named_buffers()):
        if name.endswith("e_score_correction_bias"):
            b.copy_(0.1 * torch.randn(b.shape, generator=gen))

    captured = []
    hook = model.model.hc_head.register_forward_hook(lambda mod, args, out: captured.append(args[0][0].clone()))
    main_logits = model(torch.tensor([seq])).logits[0]
    hook.remove()
    H = captured[0]  # [S, hc, D]
    check = max(float((main_logits[len(tiny["prompt_ids"]) - 1 + i] - torch.tensor(tiny["step_logits"][i])).abs().max())
                for i in range(len(tiny["greedy"])))
    print(f"main model against dsv4_tiny's golden: max abs diff {check:.3g}")

    # The standalone call is the model's own: the main model's last layer (sliding, biased
    # router, like the MTP block) run through it gives the model's own result.
    last = len(config.layer_types) - 1
    assert config.layer_types[last] == "sliding_attention" and config.mlp_layer_types[last] == "moe"
    io = []
    hook = model.model.layers[last].register_forward_hook(lambda mod, args, out: io.append((args[0][0], out[0])))
    model(torch.tensor([seq]))
    hook.remove()
    saved_block = {k: v.clone() for k, v in mtp.block.state_dict().items()}
    mtp.block.load_state_dict(model.model.layers[last].state_dict())
    alone = float((mtp.block_alone(model, io[0][0], list(range(len(seq)))) - io[0][1]).abs().max())
    mtp.block.load_state_dict(saved_block)
    print(f"block called alone against the model's own layer {last}: max abs diff {alone:.3g}")
    assert alone < 1e-5

    S = len(seq)
    rows = list(range(S - 1))
    x = mtp.streams(model, [seq[p + 1] for p in rows], rows, H[: S - 1])
    mtp_logits = mtp.logits(model, x)

    # Chain after context n = prompt + first greedy token.
    n = len(tiny["prompt_ids"]) + 1
    ctx = seq[:n]
    tokens_next = [ctx[p + 1] for p in range(n - 1)]
    hidden = [H[p] for p in range(n - 1)]
    chain_tokens, chain_logits = [], []
    for j in range(N_CHAIN):
        positions = list(range(len(tokens_next)))
        streams = mtp.streams(model, tokens_next, positions, torch.stack(hidden))
        last = mtp.logits(model, streams[-1:])[0]
        chain_logits.append(last)
        token = int(torch.argmax(last))
        chain_tokens.append(token)
        tokens_next.append(token)
        hidden.append(streams[-1])

    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    cfg = json.loads((TINY / "config.json").read_text())
    cfg["num_nextn_predict_layers"] = 1
    (OUT / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    tensors = load_file(TINY / "model.safetensors")
    tensors.update(release_names(mtp, config))
    save_file(tensors, OUT / "model.safetensors", metadata={"format": "pt"})
    golden = {
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "seed": SEED,
        "sequence": seq,
        "mtp_logits": [rounded(r) for r in mtp_logits],
        "chain_context": n,
        "chain_tokens": chain_tokens,
        "chain_logits": [rounded(r) for r in chain_logits],
        "main_model_check_max_abs_diff": float(f"{check:.3g}"),
        "mtp_tensor_names": sorted(k for k in tensors if k.startswith("mtp.")),
    }
    (OUT / "golden.json").write_text(json.dumps(golden, indent=None, separators=(",", ":")) + "\n")
    print("chain:", chain_tokens, "mtp argmax of the first rows:", mtp_logits.argmax(-1)[:10].tolist())


if __name__ == "__main__":
    main()
