#!/usr/bin/python3
"""The real job side by side with llama-server (issue 26 done-when 4): 64 requests behind one
1,000-token instruction prefix + a 100-300-token document each, 32 greedy output tokens (run_bench's
shared-instructions job, token-id prompts), run by `llmq run` and sent to llama-server at each
`-np` (parallel slots, with as many requests in flight), in alternated rounds, same weights, same
threads, a 16-bit KV cache on both sides (llmq --kv-dtype bf16, llama.cpp's default F16).

  real_job_vs_llama_server.py --build BUILD --llama-dir LLAMA/build/bin --gguf-py LLAMA/gguf-py \\
      [--shape bench-110m] [--types f32,bf16] [--np 1,4,8,16] [--rounds 3] [--threads 2] \\
      [--requests 64] [--work DIR]

BUILD is llmq's build folder (daemon/llmq and bench/run_bench). run_bench --job-only writes the
model (random weights) and the job; bench/hf_to_gguf.py writes the model as an F32 GGUF with
placeholder vocabulary pieces (llama-server detokenizes what it generates), llama-quantize the BF16
one. Every request's prompt goes to llama-server's /completion as the job's token ids, with
n_predict 32, greedy, ignore_eos and cache_prompt (its slots keep their prompt's KV, and a request
goes to the slot whose cached prompt it shares most: llama-server computes the shared prefix once
per slot, not once per request).

Times: llmq's is the whole `llmq run` process (loading the weights, the queue, the result files);
llama-server's is from the first request sent to the last answer, its start-up and loading left
out (in its favour). Peak RSS: each child's ru_maxrss. The ratio is llama-server's best -np (of
the medians over rounds) against llmq's median. llmq's profile (`--profile`, the last round) says
where its time went. Needs only Python's standard library.
"""
import argparse
import concurrent.futures
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path


def run(cmd, **kw):
    """Runs cmd to completion; (wall seconds, peak RSS bytes). Exits on failure."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, **kw)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.monotonic() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(map(str, cmd))}")
    return wall, ru.ru_maxrss * 1024


def llmq_round(args, model, job, dtype, work):
    out = work / f"llmq-{dtype}"
    for f in work.glob(f"llmq-{dtype}*"):
        subprocess.run(["rm", "-rf", str(f)], check=True)
    summary = work / f"llmq-{dtype}.summary.json"
    wall, rss = run([str(args.build / "daemon/llmq"), "run", str(job), "-o", f"{out}.jsonl",
                     "--model", str(model), "--weight-dtype", dtype, "--kv-dtype", "bf16",
                     "--threads", str(args.threads), "--no-progress", "--no-report", "--profile",
                     "--summary-json", str(summary)],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    s = json.loads(summary.read_text())
    lines = [json.loads(x) for x in Path(f"{out}.jsonl").read_text().splitlines()]
    tokens = sum(x["response"]["body"]["usage"]["completion_tokens"] for x in lines)
    return {"wall": wall, "rss": rss, "completion_tokens": tokens, "summary": s}


def post(port, body, timeout):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/completion",
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def server_round(args, gguf, prompts, n_parallel, port):
    ctx = n_parallel * args.slot_context
    cmd = [str(args.llama_dir / "llama-server"), "-m", str(gguf), "-t", str(args.threads), "-tb",
           str(args.threads), "-np", str(n_parallel), "-c", str(ctx), "--host", "127.0.0.1",
           "--port", str(port), "--no-webui"]
    log = open(args.work / f"llama-server-{n_parallel}.log", "w")
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        t_start = time.monotonic()
        while True:  # ready: /health answers 200 (503 while loading)
            if p.poll() is not None:
                sys.exit(f"llama-server exited ({p.returncode}): see {log.name}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError):
                pass
            if time.monotonic() - t_start > 300:
                sys.exit(f"llama-server not ready after 300 s: see {log.name}")
            time.sleep(0.2)
        load = time.monotonic() - t_start

        def one(prompt):
            r = post(port, {"prompt": prompt, "n_predict": args.max_tokens, "temperature": 0,
                            "ignore_eos": True, "cache_prompt": True}, timeout=3600)
            return r["tokens_predicted"], r.get("timings", {}).get("cache_n", 0)

        t0 = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(max_workers=n_parallel) as pool:
            answers = list(pool.map(one, prompts))
        wall = time.monotonic() - t0
    finally:
        p.send_signal(signal.SIGTERM)
        _, _, ru = os.wait4(p.pid, 0)
        log.close()
    return {"wall": wall, "load": load, "rss": ru.ru_maxrss * 1024,
            "completion_tokens": sum(a[0] for a in answers),
            "cached": sum(a[1] for a in answers)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", type=Path, required=True, help="llmq's build folder")
    ap.add_argument("--llama-dir", type=Path, required=True, help="llama.cpp's bin folder")
    ap.add_argument("--gguf-py", type=Path, required=True, help="llama.cpp's gguf-py folder")
    ap.add_argument("--shape", default="bench-110m")
    ap.add_argument("--types", default="f32,bf16")
    ap.add_argument("--np", default="1,4,8,16")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=32)  # the job's (run_bench writes 32)
    ap.add_argument("--slot-context", type=int, default=2048)
    ap.add_argument("--port", type=int, default=18080)
    ap.add_argument("--work", type=Path, default=Path("bench-models/real-job-vs-llama"))
    args = ap.parse_args()
    args.build, args.llama_dir = args.build.resolve(), args.llama_dir.resolve()
    args.work.mkdir(parents=True, exist_ok=True)
    args.work = args.work.resolve()
    types = args.types.split(",")
    nps = [int(x) for x in args.np.split(",")]

    # The job and the model: run_bench's, written in the work folder.
    made = subprocess.run([str(args.build / "bench/run_bench"), "--shape", args.shape,
                           "--requests", str(args.requests), "--job-only"], cwd=args.work,
                          check=True, capture_output=True, text=True).stdout
    print(made.strip())
    model = args.work / "bench-models/run-bench/model"
    job = args.work / "bench-models/run-bench/in.jsonl"
    prompts = [json.loads(x)["body"]["prompt"] for x in job.read_text().splitlines()]
    ggufs = {"f32": args.work / "model-f32.gguf", "bf16": args.work / "model-bf16.gguf"}
    subprocess.run([sys.executable, str(Path(__file__).parent / "hf_to_gguf.py"), str(model),
                    str(ggufs["f32"]), "--gguf-py", str(args.gguf_py), "--placeholder-vocab"],
                   check=True, stdout=subprocess.DEVNULL)
    if "bf16" in types:
        subprocess.run([str(args.llama_dir / "llama-quantize"), str(ggufs["f32"]),
                        str(ggufs["bf16"]), "BF16"], check=True, capture_output=True)

    llmq, server = {t: [] for t in types}, {(t, n): [] for t in types for n in nps}
    for r in range(args.rounds):
        for t in types:  # alternated: llmq, then llama-server at each -np, per type, per round
            x = llmq_round(args, model, job, t, args.work)
            llmq[t].append(x)
            print(f"round {r + 1} {t}: llmq {x['wall']:.2f} s", flush=True)
            for n in nps:
                y = server_round(args, ggufs[t], prompts, n, args.port)
                server[(t, n)].append(y)
                print(f"round {r + 1} {t}: llama-server -np {n} {y['wall']:.2f} s "
                      f"(+{y['load']:.2f} s start-up)", flush=True)

    total = sum(len(p) for p in prompts)
    print(f"\nthe real job: {len(prompts)} requests, {total} prompt tokens, {args.max_tokens} "
          f"output tokens each; {args.threads} threads; 16-bit KV; {args.rounds} alternated "
          f"rounds (wall s per round, median)\n")
    print("| weights | engine             | rounds (wall s)          | median s | peak RSS | "
          "out tokens | cached prompt tokens |")
    print("|---------|--------------------|--------------------------|----------|----------|"
          "------------|----------------------|")
    for t in types:
        xs = llmq[t]
        walls = " ".join(f"{x['wall']:.2f}" for x in xs)
        print(f"| {t:<7} | llmq run           | {walls:<24} | "
              f"{statistics.median(x['wall'] for x in xs):8.2f} | "
              f"{max(x['rss'] for x in xs) / 1e9:5.2f} GB | {xs[-1]['completion_tokens']:10d} | "
              f"{xs[-1]['summary'].get('cached_prompt_tokens', 0):20d} |")
        for n in nps:
            ys = server[(t, n)]
            walls = " ".join(f"{y['wall']:.2f}" for y in ys)
            print(f"| {t:<7} | llama-server -np {n:<2}| {walls:<24} | "
                  f"{statistics.median(y['wall'] for y in ys):8.2f} | "
                  f"{max(y['rss'] for y in ys) / 1e9:5.2f} GB | {ys[-1]['completion_tokens']:10d} | "
                  f"{ys[-1]['cached']:20d} |")
    print()
    for t in types:
        mine = statistics.median(x["wall"] for x in llmq[t])
        best_n = min(nps, key=lambda n: statistics.median(y["wall"] for y in server[(t, n)]))
        best = statistics.median(y["wall"] for y in server[(t, best_n)])
        print(f"{t}: llama-server's best (-np {best_n}, {best:.2f} s) / llmq ({mine:.2f} s) = "
              f"{best / mine:.2f}x")
    print("\nllmq's profile (s, the last round; the rest of the wall time is start-up, loading, "
          "the queue and the result files)")
    phases = ["schedule", "forward", "prefill_gemm", "decode_gemm", "attention", "other_forward",
              "sample"]
    print("| weights | " + " | ".join(f"{p:>13}" for p in phases) + " |  wall |")
    print("|---------|" + "|".join("-" * 15 for _ in phases) + "|-------|")
    for t in types:
        s = llmq[t][-1]["summary"]
        prof = s.get("profile_seconds", {})
        print(f"| {t:<7} | " + " | ".join(f"{prof.get(p, 0.0):13.2f}" for p in phases) +
              f" | {s['wall_seconds']:5.2f} |")


if __name__ == "__main__":
    main()
