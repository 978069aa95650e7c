#!/usr/bin/env python3
"""The whole product on a backend (issue 28 done-when 1): the real `llmq` binary, not the GPU test
target set. Run on the GPU machine by `scripts/gpu-check run` over the carried binary; here, with
`--backend cpu`, by tests/gpu_e2e_script_test.sh, so that the script is known to work before a
GPU lease spends minutes on it. Python's standard library only (the GPU machine has no other).

  e2e.py --llmq BIN --models DIR --work DIR [--backend cuda|cpu] [--models-list a,b]
         [--serve-requests N] [--serve-max-tokens N] [--phases references,serve] [--json FILE]

1. References. For each model folder of --models-list that has reference/*.json: a job of every
   reference (chat ones through the model's own template, plain ones as their prompt text), each
   line twice (the second a prefix-cache hit), greedy, with logprobs, run by `llmq run` on the CPU
   backend in fp32 (--weight-dtype f32 --kv-dtype f32: the exact engine CI checks) and on
   --backend: fp32, then bf16 when it is cuda. Every completion of the exact runs must equal its
   reference (text, finish_reason, token count); bf16's agreement is printed, not asserted. The
   per-token logprobs are compared with the CPU run's (max |difference| over the tokens before
   the first differing one).
2. Serve, killed and restarted. `llmq serve --backend B` (fp32 on cuda) on a state folder, a job
   of --serve-requests greedy completions on the first model (two bad lines among them) dropped in
   its inbox; when a tenth of it is done (`llmq status --json`), kill -9; a restart finishes it.
   Asserted: every good line has exactly one result and the bad lines their errors, the file was
   archived once, and the daemon stops cleanly on SIGTERM. Printed: how many completions equal the
   CPU backend's `llmq run` of the same file, and whether the kill landed mid-job.

Exit status 0 when every assertion held. Every command's stderr is kept under --work.
"""
import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path


def log(msg):
    print(msg, flush=True)


class Check:
    """Assertions: each failure is printed at once and counted."""

    def __init__(self):
        self.failures = []

    def expect(self, ok, what):
        if not ok:
            self.failures.append(what)
            log(f"  FAIL: {what}")
        return ok


def run_llmq(llmq, args, work, name, timeout=600):
    err = work / f"{name}.stderr"
    with open(err, "w") as e:
        t0 = time.monotonic()
        r = subprocess.run([str(llmq)] + args, stdout=subprocess.DEVNULL, stderr=e, timeout=timeout)
    return r.returncode, time.monotonic() - t0, err


def tail(path, lines=15):
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError as e:
        return f"({path}: {e})"


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def precision_flags(backend, precision):
    if backend == "cpu":  # the CPU backend's exact engine
        return ["--backend", "cpu", "--weight-dtype", "f32", "--kv-dtype", "f32"]
    return ["--backend", backend, "--precision", precision]


def completion(line):
    """(text, finish_reason, completion tokens, [(token, logprob)]) of one result line, or None."""
    resp = line.get("response") or {}
    if line.get("error") is not None or resp.get("status_code") != 200:
        return None
    body = resp["body"]
    c = body["choices"][0]
    lp = c.get("logprobs") or {}
    if "message" in c:
        text = c["message"]["content"]
        tokens = [(t["token"], t["logprob"]) for t in lp.get("content") or []]
    else:
        text = c["text"]
        tokens = list(zip(lp.get("tokens") or [], lp.get("token_logprobs") or []))
    return text, c["finish_reason"], body["usage"]["completion_tokens"], tokens


def by_id(lines):
    return {line["custom_id"]: completion(line) for line in lines}


def compare(got, want):
    """Agreement of two runs' completions, by custom_id (want's ids): how many are equal, and the
    largest |logprob difference| over the tokens both chose, up to where they part, and how many
    tokens that was."""
    equal, max_lp, tokens = 0, 0.0, 0
    for cid, w in want.items():
        g = got.get(cid)
        if g is None or w is None:
            continue
        equal += g[:3] == w[:3]
        for (tg, lg), (tw, lw) in zip(g[3], w[3]):
            if tg != tw:
                break
            max_lp = max(max_lp, abs(lg - lw))
            tokens += 1
    return equal, max_lp, tokens


def reference_job(model_dir, path):
    # A request's prompt + max_tokens must fit the context (as vLLM's check); a reference made with
    # a longer budget that stopped inside it (stories260K's full_512) asks for what fits.
    context = json.loads((model_dir / "config.json").read_text()).get("max_position_embeddings")
    refs = []
    for f in sorted((model_dir / "reference").glob("*.json")):
        refs.append((f.stem, json.loads(f.read_text())))
    with open(path, "w") as out:
        for name, r in refs:
            for copy in range(2):
                max_tokens = r["max_tokens"]
                if context:
                    max_tokens = min(max_tokens, context - len(r["prompt_ids"]))
                body = {"model": "any", "max_tokens": max_tokens, "temperature": 0}
                if "messages" in r:
                    url = "/v1/chat/completions"
                    body.update(messages=r["messages"], logprobs=True)
                else:
                    url = "/v1/completions"
                    body.update(prompt=r["prompt"], logprobs=1)
                line = {"custom_id": f"{name}-{copy}", "method": "POST", "url": url, "body": body}
                out.write(json.dumps(line) + "\n")
    return refs


def references(args, check, report):
    log("== 1. references: llmq run per model, the CPU backend's exact engine beside --backend")
    runs = [("cpu", "fp32")] + (
        [(args.backend, "fp32"), (args.backend, "bf16")] if args.backend != "cpu" else []
    )
    log(f"| model | backend | precision | s | equal to reference | equal to cpu | max dlogprob over tokens |")
    log(f"|-------|---------|-----------|---|--------------------|--------------|--------------------------|")
    for model in args.models_list:
        mdir = args.models / model
        if not (mdir / "reference").is_dir():
            check.expect(False, f"{mdir}/reference is missing")
            continue
        job = args.work / f"ref-{model}.jsonl"
        refs = reference_job(mdir, job)
        cpu = None
        for backend, precision in runs:
            tag = f"ref-{model}-{backend}-{precision}"
            out = args.work / f"{tag}.results.jsonl"
            rc, secs, err = run_llmq(
                args.llmq,
                ["run", str(job), "-o", str(out), "--model", str(mdir), "--no-report",
                 "--no-progress", "--state", str(args.work / f"{tag}.state")]
                + precision_flags(backend, precision),
                args.work, tag)
            if not check.expect(rc == 0, f"{tag}: llmq run exited {rc}:\n{tail(err)}"):
                continue
            got = by_id(read_jsonl(out))
            matches = 0
            for name, r in refs:
                for copy in range(2):
                    g = got.get(f"{name}-{copy}")
                    ok = g is not None and g[0] == r["completion_text"] and \
                        g[1] == r["finish_reason"] and g[2] == len(r["completion_ids"])
                    matches += ok
                    if not ok and precision == "fp32":
                        check.expect(False, f"{tag}: {name}-{copy} differs from its reference: "
                                     f"{g[:3] if g else None!r} against "
                                     f"{(r['completion_text'], r['finish_reason'], len(r['completion_ids']))!r}")
            if cpu is None:
                cpu = got
            equal, max_lp, tokens = compare(got, cpu)
            log(f"| {model} | {backend} | {precision} | {secs:.1f} | {matches}/{2 * len(refs)} | "
                f"{equal}/{len(cpu)} | {max_lp:.2e} over {tokens} |")
            report.setdefault("references", []).append(dict(
                model=model, backend=backend, precision=precision, seconds=secs,
                equal_to_reference=matches, lines=2 * len(refs), equal_to_cpu=equal,
                max_abs_logprob_diff=max_lp, tokens_compared=tokens))


def serve_job(path, n, max_tokens, seed=7):
    words = ("the cat dog sun girl boy tree ball park little big happy sad ran jumped saw found "
             "wanted played said was very one day mom friend red blue toy box water bird").split()
    rng = random.Random(seed)
    bad = {n // 3, 2 * n // 3}  # two lines a job file may hold: refused, the rest still run
    good = []
    with open(path, "w") as out:
        for i in range(n):
            cid = f"req-{i}"
            if i in bad:
                out.write('{"custom_id": "%s", "method": "POST", "url": "/v1/completions", '
                          '"body": {"prompt": 12}}\n' % cid)
                continue
            prompt = "Once upon a time " + " ".join(rng.choice(words) for _ in range(rng.randint(1, 40)))
            body = {"model": "any", "prompt": prompt, "temperature": 0,
                    "max_tokens": rng.randint(max_tokens // 2, max_tokens)}
            out.write(json.dumps({"custom_id": cid, "method": "POST", "url": "/v1/completions",
                                  "body": body}) + "\n")
            good.append(cid)
    return good, [f"req-{i}" for i in sorted(bad)]


def status(llmq, state):
    r = subprocess.run([str(llmq), "status", "--state", str(state), "--json"],
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        return None
    jobs = json.loads(r.stdout)
    return jobs[0] if jobs else None


def start_serve(args, state, flags, name):
    err = open(args.work / f"{name}.stderr", "w")
    p = subprocess.Popen([str(args.llmq), "serve", "--state", str(state),
                          "--model", str(args.models / args.models_list[0])] + flags,
                         stdout=err, stderr=subprocess.STDOUT)
    return p, err


def serve(args, check, report):
    model = args.models / args.models_list[0]
    precision = "fp32"
    log(f"== 2. llmq serve --backend {args.backend} ({precision}) on {model.name}: "
        f"{args.serve_requests} requests, kill -9 mid-job, restart")
    job = args.work / "serve-job.jsonl"
    good, bad = serve_job(job, args.serve_requests, args.serve_max_tokens)
    expected_out = args.work / "serve-cpu.results.jsonl"
    rc, secs, err = run_llmq(args.llmq, ["run", str(job), "-o", str(expected_out), "--model",
                                         str(model), "--no-report", "--no-progress", "--errors",
                                         str(args.work / "serve-cpu.errors.jsonl"), "--state",
                                         str(args.work / "serve-cpu.state")]
                             + precision_flags("cpu", "fp32"), args.work, "serve-cpu")
    if not check.expect(rc == 0, f"serve-cpu: llmq run exited {rc}:\n{tail(err)}"):
        return
    expected = by_id(read_jsonl(expected_out))
    log(f"  the CPU backend's llmq run of the same file: {secs:.1f} s")

    state = args.work / "serve-state"
    flags = precision_flags(args.backend, precision)
    p, e = start_serve(args, state, flags, "serve-1")
    deadline = time.monotonic() + args.timeout
    while not (state / "inbox").is_dir() and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    if not check.expect(p.poll() is None and (state / "inbox").is_dir(),
                        f"serve did not start:\n{tail(e.name)}"):
        p.kill()
        return
    staged = state / "job.jsonl.part"
    staged.write_bytes(job.read_bytes())
    os.rename(staged, state / "inbox" / "serve-job.jsonl")
    t0 = time.monotonic()
    want, done_at_kill, st = max(1, len(good) // 10), 0, None
    while time.monotonic() < deadline and p.poll() is None:
        st = status(args.llmq, state)
        done_at_kill = st["request_counts"]["completed"] if st else 0
        if done_at_kill >= want or (st and st["status"] in ("completed", "failed")):
            break
        time.sleep(0.02)
    if p.poll() is not None:
        e.close()
        check.expect(False, f"serve died by itself (status {p.returncode}):\n{tail(e.name)}")
        return
    p.send_signal(signal.SIGKILL)
    p.wait()
    e.close()
    mid_job = bool(st) and st["status"] not in ("completed", "failed") and done_at_kill < len(good)
    log(f"  killed {time.monotonic() - t0:.2f} s after the drop with {done_at_kill} of "
        f"{len(good)} done ({'mid-job' if mid_job else 'NOT mid-job: the job was too short'})")
    check.expect(mid_job, "the kill did not land mid-job")

    p, e = start_serve(args, state, flags, "serve-2")
    t1 = time.monotonic()
    finished = None
    while time.monotonic() < deadline and p.poll() is None:
        st = status(args.llmq, state)
        if st and st["status"] in ("completed", "failed", "cancelled"):
            finished = st
            break
        time.sleep(0.05)
    p.send_signal(signal.SIGTERM)
    try:
        rc2 = p.wait(timeout=120)
    except subprocess.TimeoutExpired:
        p.kill()
        rc2 = p.wait()
    e.close()
    check.expect(rc2 == 0, f"serve did not stop cleanly on SIGTERM (status {rc2}):\n{tail(e.name)}")
    if not check.expect(finished is not None, f"the job did not finish:\n{tail(e.name)}"):
        return
    log(f"  restarted: finished {time.monotonic() - t1:.2f} s later, status {finished['status']}, "
        f"counts {finished['request_counts']}")
    results = read_jsonl(state / "outbox" / "serve-job.results.jsonl")
    errors = read_jsonl(state / "outbox" / "serve-job.errors.jsonl")
    ids = [r["custom_id"] for r in results]
    check.expect(len(ids) == len(set(ids)), f"{len(ids) - len(set(ids))} custom_ids repeated")
    check.expect(sorted(set(ids)) == sorted(good),
                 f"results hold {len(set(ids))} ids, {len(set(good) - set(ids))} missing, "
                 f"{len(set(ids) - set(good))} unexpected")
    check.expect(sorted(x["custom_id"] for x in errors) == sorted(bad),
                 f"errors hold {[x['custom_id'] for x in errors]}, want {bad}")
    archived = sorted(x.name for x in (state / "archive").iterdir())
    check.expect(archived == ["serve-job.jsonl"], f"archive holds {archived}")
    got = by_id(results)
    check.expect(all(got[c] is not None for c in good if c in got), "a good line failed")
    equal, _, _ = compare(got, expected)
    log(f"  every good line once ({len(set(ids))}), the bad ones as errors ({len(errors)}); "
        f"equal to the CPU backend's: {equal}/{len(good)}")
    report["serve"] = dict(requests=len(good), done_at_kill=done_at_kill, mid_job=mid_job,
                           equal_to_cpu=equal, status=finished["status"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llmq", type=Path, required=True)
    ap.add_argument("--models", type=Path, required=True, help="folder of the model folders")
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--backend", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--models-list", default="stories260K,tiny-llama3,tiny-qwen3,tiny-qwen2,tiny-llama32")
    ap.add_argument("--serve-requests", type=int, default=2000)
    ap.add_argument("--serve-max-tokens", type=int, default=200)
    ap.add_argument("--timeout", type=float, default=300, help="seconds for the serve phase")
    ap.add_argument("--phases", default="references,serve", help="references, serve or both")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args()
    args.models_list = [m for m in args.models_list.split(",") if (args.models / m).is_dir()]
    args.work.mkdir(parents=True, exist_ok=True)
    check, report = Check(), {"backend": args.backend}
    if not args.models_list:
        check.expect(False, f"none of the models is in {args.models}")
    else:
        phases = args.phases.split(",")
        if "references" in phases:
            references(args, check, report)
        if "serve" in phases:
            serve(args, check, report)
    report["failures"] = check.failures
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    log(f"e2e: {len(check.failures)} failure(s)")
    return 1 if check.failures else 0


if __name__ == "__main__":
    sys.exit(main())
