#!/bin/sh
# scripts/gpu/e2e.py, the GPU machine's end-to-end run of the real binary (issue 28), run here on
# the CPU backend, so that a GPU lease never spends its minutes on a broken script:
#   1. on stories260K and tiny-llama3 (../shared) every reference through `llmq run`, then
#      `llmq serve` killed with -9 mid-job and restarted: no failure;
#   2. on a copy of stories260K whose reference the_cat.json says another completion: the script
#      fails, naming that line;
#   3. scripts/gpu/real_job.py, the real job's script, on a 2-layer model of the same architecture:
#      its three runs complete, the prefix computed once except with the prefix cache off;
#   4. `scripts/gpu-check all` over a stand-in for its parts: every part runs though one fails, the
#      archive holds what each left, and the exit status is the failing part's.
# Usage: gpu_e2e_script_test.sh SOURCE_ROOT LLMQ TMP. Exits 77 (skipped) when ../shared or python3
# is missing, 1 instead under LLMQ_REQUIRE_REFERENCES=1.
set -eu
src=$1 llmq=$2 tmp=$3
models=$src/../shared/models
missing() {
  echo "gpu_e2e_script_test: $1 is missing"
  [ "${LLMQ_REQUIRE_REFERENCES:-0}" = 1 ] && exit 1
  exit 77
}
[ -d "$models/stories260K/reference" ] || missing "$models/stories260K"
[ -d "$models/tiny-llama3/reference" ] || missing "$models/tiny-llama3"
command -v python3 >/dev/null || missing python3
rm -rf "$tmp" && mkdir -p "$tmp"

# 1. Everything holds on the exact engine.
python3 "$src/scripts/gpu/e2e.py" --backend cpu --llmq "$llmq" --models "$models" \
  --models-list stories260K,tiny-llama3 --serve-requests 200 --serve-max-tokens 48 \
  --work "$tmp/ok" --json "$tmp/ok.json" >"$tmp/ok.log" 2>&1 || {
  cat "$tmp/ok.log"
  echo "gpu_e2e_script_test: the run on the CPU backend failed"
  exit 1
}
grep -q '^| stories260K | cpu | fp32 | .* | 10/10 | 10/10 |' "$tmp/ok.log" &&
  grep -q '^| tiny-llama3 | cpu | fp32 | .* | 8/8 | 8/8 |' "$tmp/ok.log" &&
  grep -q '(mid-job)' "$tmp/ok.log" &&
  grep -q 'every good line once (198), the bad ones as errors (2); equal to the CPU backend.s: 198/198' "$tmp/ok.log" &&
  grep -q '^e2e: 0 failure(s)' "$tmp/ok.log" || {
  cat "$tmp/ok.log"
  echo "gpu_e2e_script_test: the CPU run's report is not as expected"
  exit 1
}

# 2. A reference that the engine does not reproduce fails the run and is named.
mkdir -p "$tmp/models/stories260K/reference"
cp "$models/stories260K"/*.json "$models/stories260K/tokenizer.model" \
  "$models/stories260K/model.safetensors" "$tmp/models/stories260K/"
cp "$models/stories260K/reference"/*.json "$tmp/models/stories260K/reference/"
python3 - "$tmp/models/stories260K/reference/the_cat.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
r["completion_text"] = r["completion_text"].replace(" park", " garden", 1)
json.dump(r, open(sys.argv[1], "w"))
PY
if python3 "$src/scripts/gpu/e2e.py" --backend cpu --llmq "$llmq" --models "$tmp/models" \
  --models-list stories260K --phases references --work "$tmp/bad" >"$tmp/bad.log" 2>&1; then
  cat "$tmp/bad.log"
  echo "gpu_e2e_script_test: a wrong reference passed"
  exit 1
fi
grep -q 'FAIL: ref-stories260K-cpu-fp32: the_cat-0 differs from its reference' "$tmp/bad.log" &&
  grep -q '^| stories260K | cpu | fp32 | .* | 8/10 |' "$tmp/bad.log" || {
  cat "$tmp/bad.log"
  echo "gpu_e2e_script_test: the failure is not named as expected"
  exit 1
}
# 3. The real job's script, small.
python3 "$src/scripts/gpu/real_job.py" --backend cpu --shape small --llmq "$llmq" --work "$tmp/rj" \
  --requests 24 --prefix 64 --doc 16 --max-tokens 4 >"$tmp/rj.log" 2>&1 || {
  cat "$tmp/rj.log"
  echo "gpu_e2e_script_test: real_job.py failed"
  exit 1
}
# Unique: 64 + 24 x 16 = 448 tokens. Every run computes at most those (a document's first token
# can repeat another's: token-granular reuse), but 24 x 80 = 1920 without the cache.
grep -Eq '^\| default \| .* \| (44[0-8]) / 448 = ' "$tmp/rj.log" &&
  grep -Eq '^\| no-cascade \| .* \| (44[0-8]) / 448 = ' "$tmp/rj.log" &&
  grep -q '^| no-cache | .* | 1920 / 448 = 4.286 |' "$tmp/rj.log" || {
  cat "$tmp/rj.log"
  echo "gpu_e2e_script_test: real_job.py's table is not as expected"
  exit 1
}
# 4. gpu-check all: the parts' order, the archive, the status (a stand-in for run, e2e, realjob).
printf '%s\n' '#!/bin/sh' 'mkdir -p "$OUT" && echo "$1 ran" >"$OUT/$1.log"' \
  '[ "$1" = e2e ] && exit 3' 'exit 0' >"$tmp/part.sh"
chmod +x "$tmp/part.sh"
rc=0
GPU_CHECK_SELF="$tmp/part.sh" OUT="$tmp/all-out" TMPDIR="$tmp" "$src/scripts/gpu-check" all >"$tmp/all.log" 2>&1 ||
  rc=$?
mkdir -p "$tmp/all-x" && tar xzf "$tmp/all-out/gpu-check.tgz" -C "$tmp/all-x"
[ "$rc" = 3 ] && [ "$(ls "$tmp/all-out")" = gpu-check.tgz ] &&
  grep -q 'run ran' "$tmp/all-x/gpu-check-all/run/run.log" &&
  grep -q 'e2e ran' "$tmp/all-x/gpu-check-all/e2e/e2e.log" &&
  grep -q 'realjob ran' "$tmp/all-x/gpu-check-all/realjob/realjob.log" &&
  grep -q '== gpu-check e2e: exit 3' "$tmp/all.log" || {
  cat "$tmp/all.log"
  echo "gpu_e2e_script_test: gpu-check all did not run every part into one archive (exit $rc)"
  exit 1
}
echo "gpu_e2e_script_test: passed"
