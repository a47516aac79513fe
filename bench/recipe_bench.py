#!/usr/bin/env python3
"""Recipe speed: render + tokenize a long multi-turn conversation with tools, and stream-parse
model output (issue 4's targets: render plus tokenize under 100 ms on 2 threads for a
128K-token conversation; parsing at least 100 MB/s).

Measured through the deepinfer command, best of --reps runs each, loading excluded:
  render   `deepinfer render --protocol chat --tokens --stats --threads N` on a generated Chat
           Completions request (system prompt, 8 tools, user / assistant-with-reasoning /
           tool-call / tool-result turns) of about --tokens DeepSeek V4 tokens, rendered in the
           V4 format and tokenized with the DeepSeek V4 tokenizer from the model cache:
           request conversion, prompt rendering and injection-safe tokenization timed apart
  parse    `deepinfer parse --protocol chat --stats --chunk C` on a generated output (reasoning,
           answer text with unicode, DSML tool calls with nested JSON) of about --parse-mb MB
           (--small-chunk-mb for chunks under 16 characters: the SSE writer, timed in the same
           run, is slow there), for C in --chunk (0: the whole output at once): the output
           parser alone, and parser + Chat Completions SSE writer

The generated text is deterministic (fixed seed). Usage:
  python bench/recipe_bench.py --deepinfer build/bin/deepinfer [--threads 1,2] [--reps 5]
"""

import argparse
import json
import pathlib
import random
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[1]

WORDS = ("the of and to in is that for it as with was on be by this are from at or an which "
         "model token cache request server stream prompt parser thread kernel latency batch "
         "weather Paris 日本語 données naïve café 😀 <｜User｜> <|im_start|> \"quoted\" back\\slash").split()


def text(rng, n_words):
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


def tools(rng):
    out = []
    for i in range(8):
        props = {f"p{j}": {"type": rng.choice(["string", "number", "boolean"]),
                           "description": text(rng, 8)} for j in range(5)}
        out.append({"type": "function", "function": {
            "name": f"tool_{i}", "description": text(rng, 30),
            "parameters": {"type": "object", "properties": props, "required": ["p0"]}}})
    return out


def conversation(rng, target_tokens):
    # About 1.5 V4 tokens per generated word (measured on this vocabulary).
    messages = [{"role": "system", "content": text(rng, 200)}]
    words = 200
    turn = 0
    while words * 1.5 < target_tokens:
        messages.append({"role": "user", "content": text(rng, 300)})
        call_id = f"call_{turn}"
        args = json.dumps({"p0": text(rng, 5), "p1": rng.random(), "p2": [1, {"k": None}]})
        messages.append({"role": "assistant", "content": text(rng, 100), "reasoning_content": text(rng, 150),
                         "tool_calls": [{"id": call_id, "type": "function",
                                         "function": {"name": f"tool_{turn % 8}", "arguments": args}}]})
        messages.append({"role": "tool", "tool_call_id": call_id, "content": text(rng, 250)})
        messages.append({"role": "assistant", "content": text(rng, 200), "reasoning_content": text(rng, 100)})
        words += 1120
        turn += 1
    messages.append({"role": "user", "content": text(rng, 50)})
    # V4 format: the DeepSeek V4 tokenizer in the model cache has no V4.1 <｜System｜> token.
    return {"model": "DeepSeek-V4-Pro", "messages": messages, "tools": tools(rng)}


def model_output(rng, megabytes):
    parts = []
    size = 0
    call = ('<｜DSML｜tool_calls>\n<｜DSML｜invoke name="tool_1">\n'
            '<｜DSML｜parameter name="p0" string="true">{s}</｜DSML｜parameter>\n'
            '<｜DSML｜parameter name="p1" string="false">{{"a": [1, 2.5, {{"b": null}}]}}</｜DSML｜parameter>\n'
            '</｜DSML｜invoke>\n</｜DSML｜tool_calls>')
    # One response is reasoning, an answer and a closing tool call; a long output repeats the
    # reasoning and answer parts (a DSML block ends the output).
    parts.append(text(rng, 100) + "\n</think>\n\n")
    size += len(parts[-1].encode())
    while size < megabytes * 1e6:
        parts.append(text(rng, 200) + "\n\n")
        size += len(parts[-1].encode())
    parts.append(call.format(s=text(rng, 20)))
    return "".join(parts)


def run(cmd, stdin_path):
    with open(stdin_path, "rb") as f:
        out = subprocess.run(cmd, stdin=f, capture_output=True, check=False)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed: {out.stderr.decode()}")
    return json.loads(out.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--deepinfer", default=str(REPO / "build" / "bin" / "deepinfer"))
    ap.add_argument("--tokens", type=int, default=128 * 1024)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--parse-mb", type=float, default=20.0)
    ap.add_argument("--chunk", default="1,4,16,64,0")
    ap.add_argument("--small-chunk-mb", type=float, default=2.0)
    args = ap.parse_args()
    rng = random.Random(20261130)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        req = tmp / "request.json"
        req.write_text(json.dumps(conversation(rng, args.tokens), ensure_ascii=False))
        print(f"request: {req.stat().st_size / 1e6:.2f} MB of JSON")
        for n in args.threads.split(","):
            s = run([args.deepinfer, "render", "--protocol", "chat", "--tokens", "--stats",
                     "--threads", n, "--repeat", str(args.reps)], req)
            print(f"render+tokenize, {n} thread(s): {s['tokens']} tokens, {s['prompt_bytes'] / 1e6:.2f} MB "
                  f"prompt: convert {s['convert_ms']:.1f} ms, render {s['render_ms']:.1f} ms, "
                  f"tokenize {s['tokenize_ms']:.1f} ms, total {s['total_ms']:.1f} ms")
        ids = [run([args.deepinfer, "render", "--protocol", "chat", "--tokens", "--threads", n], req)["token_ids"]
               for n in ("1", args.threads.split(",")[-1])]
        print(f"ids on 1 and {args.threads.split(',')[-1]} thread(s) equal: {ids[0] == ids[1]}")
        out = tmp / "output.txt"
        output = model_output(rng, args.parse_mb)
        out.write_text(output)
        small = tmp / "output_small.txt"
        # A prefix cut at a character, closed by the output's tool-call block.
        block = output.index("<｜DSML｜tool_calls>")
        small.write_text(output[:min(block, int(args.small_chunk_mb * 1e6))] + output[block:])
        parse_req = tmp / "parse_request.json"
        parse_req.write_text(json.dumps({"model": "DeepSeek-V4.1-Flash", "tools": tools(rng)[:2],
                                         "messages": [{"role": "user", "content": "hi"}]}))
        for chunk in args.chunk.split(","):
            s = run([args.deepinfer, "parse", "--protocol", "chat", "--request", str(parse_req), "--stream",
                     "--stats", "--chunk", chunk, "--repeat", str(args.reps)],
                    small if 0 < int(chunk) < 16 else out)
            label = f"{chunk}-character chunks" if int(chunk) > 0 else "whole output"
            print(f"parse, {label}: {s['bytes'] / 1e6:.1f} MB, {s['events']} events: "
                  f"parser {s['parse_mb_per_s']:.1f} MB/s, parser + chat SSE writer "
                  f"{s['respond_mb_per_s']:.1f} MB/s")


if __name__ == "__main__":
    main()
