// Encode throughput of Hugging Face's JavaScript tokenizer, for bench/tokenize_bench: prints the
// MB/s (median of 3 passes, one thread) of encoding every document of CORPUS.json.
// Usage: node bench.mjs MODEL_DIR CORPUS.json
import { readFileSync } from "node:fs";
import { Tokenizer } from "@huggingface/tokenizers";

const [dir, corpusPath] = process.argv.slice(2);
const tok = new Tokenizer(JSON.parse(readFileSync(`${dir}/tokenizer.json`, "utf8")),
                          JSON.parse(readFileSync(`${dir}/tokenizer_config.json`, "utf8")));
const docs = JSON.parse(readFileSync(corpusPath, "utf8"));
let bytes = 0;
for (const d of docs) bytes += Buffer.byteLength(d);
const secs = [];
for (let rep = 0; rep < 3; ++rep) {
  const t0 = performance.now();
  for (const d of docs) tok.encode(d, { add_special_tokens: false });
  secs.push((performance.now() - t0) / 1000);
}
secs.sort((a, b) => a - b);
console.log((bytes / secs[1] / 1e6).toFixed(3));
