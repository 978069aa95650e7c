// The reference for tests/hf_tokenizer_diff_test.cpp: Hugging Face's JavaScript tokenizer
// (@huggingface/tokenizers, pinned by package-lock.json) encodes every string of a corpus.
// Usage: node oracle.mjs MODEL_DIR CORPUS.json OUT.json
//   CORPUS.json: a JSON array of strings. OUT.json: {"with": [[ids]...], "without": [[ids]...]}
//   (encode(text) with and without the post-processor's special tokens).
import { readFileSync, writeFileSync } from "node:fs";
import { Tokenizer } from "@huggingface/tokenizers";

const [dir, corpusPath, outPath] = process.argv.slice(2);
const json = JSON.parse(readFileSync(`${dir}/tokenizer.json`, "utf8"));
const config = JSON.parse(readFileSync(`${dir}/tokenizer_config.json`, "utf8"));
const tok = new Tokenizer(json, config);
const corpus = JSON.parse(readFileSync(corpusPath, "utf8"));
const out = { with: [], without: [] };
for (const text of corpus) {
  out.with.push(tok.encode(text).ids);
  out.without.push(tok.encode(text, { add_special_tokens: false }).ids);
}
writeFileSync(outPath, JSON.stringify(out));
