#!/usr/bin/env python3
"""The real job on a backend (issue 28 done-when 3), through the real `llmq run`: a Llama-3-8B-shaped
model with random bf16 weights made where it runs (`llmq make-model --config`, 16 GB), N requests
behind one shared instruction prefix of P tokens, each with its own document of D tokens, M output
tokens (ignore_eos), token-id prompts. Run three times: as users run it, with the shared-prefix
attention (cascade on the GPU) off, and with the prefix cache off. Printed per run: wall time,
output tokens/s, computed / unique prompt tokens, and from the engine's profile (`--profile`):
its time (schedule + forward + sample), the device's busy time (the steps' spans on the GPU,
StepProfile::device_s) and the rest, the device's idle time between steps, as a share of the
engine's time (done-when 3 asks for at most 5%). Standard library only.

  real_job.py --llmq BIN --work DIR [--backend cuda|cpu] [--shape llama3-8b|small]
              [--requests N] [--prefix P] [--doc D] [--max-tokens M]
              [--runs default,no-cascade,no-cache,small-batch]
              [--tokenizer-from MODEL_DIR] [--json FILE]

`--shape small --backend cpu` is the same job on a 2-layer model: how tests/gpu_e2e_script_test.sh
checks this script on a machine without a GPU.
"""
import argparse
import json
import random
import subprocess
import sys
import time
from pathlib import Path

SHAPES = {
    # Llama-3-8B's config.json (Meta-Llama-3-8B), bf16.
    "llama3-8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                      max_position_embeddings=8192, rope_theta=500000.0),
    # The same architecture, small enough for a CPU test.
    "small": dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, vocab_size=1024,
                  max_position_embeddings=1024, rope_theta=500000.0),
}

RUNS = {"default": [], "no-cascade": ["--no-shared-prefix-attention"],
        "no-cache": ["--no-prefix-cache"],
        # The CPU's step limits, beside a GPU's default 1,024 sequences and 8,192 tokens (measured
        # as "big-batch" against the then-default 256 / 2,048 on 2026-12-04: 1.14x).
        "small-batch": ["--max-num-seqs", "256", "--max-num-batched-tokens", "2048"]}


def log(msg):
    print(msg, flush=True)


def make_model(llmq, shape, out, tokenizer_from):
    if (out / "config.json").exists():
        return 0.0
    cfg = dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_act="silu",
               rms_norm_eps=1e-5, tie_word_embeddings=False, torch_dtype="bfloat16",
               **SHAPES[shape])
    out.parent.mkdir(parents=True, exist_ok=True)
    cfg_path = out.parent / f"{shape}.config.json"
    cfg_path.write_text(json.dumps(cfg, indent=1))
    t0 = time.monotonic()
    # A tokenizer of another model (Llama 3's, from tiny-llama32) rather than one trained for
    # 128,256 pieces, which takes minutes.
    extra = ["--tokenizer-from", str(tokenizer_from)] if tokenizer_from and shape == "llama3-8b" else []
    subprocess.run([str(llmq), "make-model", "--config", str(cfg_path), "--out", str(out),
                    "--dtype", "bf16", "--seed", "1"] + extra, check=True)
    return time.monotonic() - t0


def write_job(path, n, prefix, doc, max_tokens, vocab, seed=5):
    """The job file; returns its unique prompt tokens (the prefix once, every document)."""
    rng = random.Random(seed)
    shared = [rng.randrange(3, vocab) for _ in range(prefix)]
    with open(path, "w") as f:
        for i in range(n):
            prompt = shared + [rng.randrange(3, vocab) for _ in range(doc)]
            body = {"model": "any", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                    "ignore_eos": True}
            f.write(json.dumps({"custom_id": f"doc-{i}", "method": "POST",
                                "url": "/v1/completions", "body": body}) + "\n")
    return prefix + n * doc


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llmq", type=Path, required=True)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--backend", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--shape", default="llama3-8b", choices=sorted(SHAPES))
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--prefix", type=int, default=1000)
    ap.add_argument("--doc", type=int, default=200)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--runs", default="default,no-cascade,no-cache")
    ap.add_argument("--tokenizer-from", type=Path,
                    help="a model folder whose tokenizer the llama3-8b model takes (make-model)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    model = args.work / f"model-{args.shape}"
    made = make_model(args.llmq, args.shape, model, args.tokenizer_from)
    if made:
        log(f"made {model} in {made:.1f} s")
    job = args.work / "job.jsonl"
    unique = write_job(job, args.requests, args.prefix, args.doc, args.max_tokens,
                       SHAPES[args.shape]["vocab_size"])
    log(f"the job: {args.requests} requests, a {args.prefix}-token shared prefix + {args.doc}-token "
        f"documents, {args.max_tokens} output tokens each; {unique} unique prompt tokens")
    # outside the engine: the wall time less the engine's (loading the model, reading the job,
    # writing the results).
    log("| run | wall s | output tok/s | computed / unique | engine s | device busy s | idle between steps | outside the engine s |")
    log("|-----|--------|--------------|-------------------|----------|---------------|--------------------|----------------------|")
    report, failed = {"shape": args.shape, "backend": args.backend, "unique_prompt_tokens": unique,
                      "runs": {}}, 0
    for name in args.runs.split(","):
        out = args.work / f"{name}.results.jsonl"
        summary = args.work / f"{name}.summary.json"
        state = args.work / f"{name}.state"
        for p in (out, summary):
            p.unlink(missing_ok=True)
        subprocess.run(["rm", "-rf", str(state)], check=True)
        err = args.work / f"{name}.stderr"
        with open(err, "w") as e:
            r = subprocess.run([str(args.llmq), "run", str(job), "-o", str(out), "--model",
                                str(model), "--backend", args.backend, "--profile", "--no-report",
                                "--no-progress", "--summary-json", str(summary), "--state",
                                str(state)] + RUNS[name], stdout=e, stderr=e)
        if r.returncode != 0:
            failed += 1
            log(f"| {name} | FAILED (exit {r.returncode}): "
                + " / ".join(err.read_text(errors="replace").splitlines()[-3:]) + " |")
            continue
        s = json.loads(summary.read_text())
        prof = s.get("profile_seconds", {})
        engine_s = sum(prof.get(k, 0.0) for k in ("schedule", "forward", "sample"))
        device_s = prof.get("device")  # a GPU backend's only
        idle = (f"{engine_s - device_s:.2f} s = {(engine_s - device_s) / engine_s:.1%}"
                if device_s and engine_s else "-")
        busy = f"{device_s:.2f}" if device_s else "-"
        ratio = s["computed_prompt_tokens"] / unique
        log(f"| {name} | {s['wall_seconds']:.2f} | {s['output_tokens_per_second']:.0f} | "
            f"{s['computed_prompt_tokens']} / {unique} = {ratio:.3f} | {engine_s:.2f} | "
            f"{busy} | {idle} | {s['wall_seconds'] - engine_s:.2f} |")
        report["runs"][name] = dict(wall_seconds=s["wall_seconds"],
                                    output_tokens_per_second=s["output_tokens_per_second"],
                                    computed_prompt_tokens=s["computed_prompt_tokens"],
                                    completed=s["completed"], profile_seconds=prof,
                                    backend=s["backend"])
        if s["completed"] != args.requests or s["completion_tokens"] != args.requests * args.max_tokens:
            failed += 1
            log(f"  FAIL: {name}: {s['completed']} completed, {s['completion_tokens']} tokens")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
