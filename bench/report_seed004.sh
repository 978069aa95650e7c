#!/usr/bin/env bash
# Issue 29, done-when 2: a 2,000-request job with prompts from 100 to 4,000 tokens through
# `llmq run`, on a generated small model (`llmq make-model`: the tiny shape's layers, its context
# widened to 8,192), writing the job's report; then the report's TTFT-by-prompt-length table (the
# seed-004 table: TTFT rising with the prompt, ITL flat) and the summary's TTFT / ITL percentiles,
# for bench/RESULTS.md. Benchmarks are not timed tests: this prints, it asserts nothing.
# Usage: bench/report_seed004.sh [LLMQ_BINARY] [OUT_DIR] [REQUESTS]
#   (defaults: build/daemon/llmq, /tmp/llmq-report-seed004, 2000)
set -euo pipefail
cd "$(dirname "$0")/.."
llmq=${1:-build/daemon/llmq}
out=${2:-/tmp/llmq-report-seed004}
requests=${3:-2000}
mkdir -p "$out"

# The model: the tiny shape (3 layers, hidden 64, a 512-token vocabulary) with room for 4,000
# tokens of prompt.
model=$out/model
if [ ! -f "$model/model.safetensors" ]; then
  cat >"$out/config.json" <<'EOF'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
 "intermediate_size": 160, "num_hidden_layers": 3, "num_attention_heads": 4,
 "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 512,
 "max_position_embeddings": 8192, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
 "tie_word_embeddings": false, "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2,
 "torch_dtype": "float32"}
EOF
  "$llmq" make-model --config "$out/config.json" --out "$model" --seed 4 >/dev/null
fi

# Tokens per word of this tokenizer, measured on a sample of the words the prompts are made of.
words() {  # words N SEED: N pseudo-random words
  awk -v n="$1" -v seed="$2" 'BEGIN { srand(seed); for (i = 0; i < n; i++)
    printf "%s%s", (i ? " " : ""), "w" int(rand() * 50) "x" int(rand() * 9) }'
}
sample=$(words 400 7)
per_word=$("$llmq" tokenize --model "$model" --text "$sample" | awk '{ print NF / 400 }')

# The job: prompts spread evenly from 100 to 4,000 tokens (in words, by the measured ratio), in a
# shuffled order, 16 completion tokens each (EOS ignored: the work is known).
job=$out/job.jsonl
awk -v n="$requests" -v pw="$per_word" 'BEGIN {
  srand(11)
  for (i = 0; i < n; i++) {
    tokens = 100 + int(3900 * i / (n > 1 ? n - 1 : 1))
    w = int(tokens / pw); if (w < 1) w = 1
    p = ""
    for (k = 0; k < w; k++) p = p (k ? " " : "") "w" int(rand() * 50) "x" int(rand() * 9)
    line[i] = sprintf("{\"custom_id\": \"r%d\", \"method\": \"POST\", \"url\": \"/v1/completions\", \"body\": {\"prompt\": \"%s\", \"max_tokens\": 16, \"ignore_eos\": true}}", i, p)
  }
  for (i = n - 1; i > 0; i--) { j = int(rand() * (i + 1)); t = line[i]; line[i] = line[j]; line[j] = t }
  for (i = 0; i < n; i++) print line[i]
}' >"$job"

echo "--- $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "--- $requests requests, ~$per_word tokens per word; llmq run (the report beside the output)"
rm -rf "$out/.out.jsonl.llmq-run"
/usr/bin/time -f "wall %e s, peak RSS %M KiB" \
  "$llmq" run "$job" -o "$out/out.jsonl" --model "$model" --summary-json "$out/summary.json" \
  --no-progress
echo "--- report: $out/out.report.html"
# The summary's percentiles and the report's TTFT-by-prompt-length table (its rows as text).
tr ',' '\n' <"$out/summary.json" | grep -E '"(requests|completed|failed|prompt_tokens|wall_seconds|output_tokens_per_second|ttft_seconds_p50|ttft_seconds_p95|itl_seconds_p50|itl_seconds_p95)"'
awk '/<section id="ttft-by-prompt">/,/<\/section>/' "$out/out.report.html" | tr -d '\n' |
  sed 's/<\/tr>/\n/g' | grep '<tr>' |
  sed -e 's/.*<tr>//' -e 's/<\/t[dh]><t[dh]>/ | /g' -e 's/<[^>]*>//g' -e 's/^/| /' -e 's/$/ |/'
