// The reference for tests/jinja_diff_test.cpp: Hugging Face's JavaScript Jinja
// (@huggingface/jinja, pinned by package-lock.json), which applies the options transformers'
// apply_chat_template uses (trim_blocks, lstrip_blocks, raise_exception, tojson...).
// Usage: node oracle.mjs <IN.json >OUT.json
//   IN: {"template": "...", "contexts": [{...}, ...]}
//   OUT: [{"ok": true, "text": "..."} | {"ok": false, "error": "..."}, ...], one per context.
import { readFileSync } from "node:fs";
import { Template } from "@huggingface/jinja";

const input = JSON.parse(readFileSync(0, "utf8"));
const template = new Template(input.template);
const out = input.contexts.map((context) => {
  try {
    return { ok: true, text: template.render(context) };
  } catch (e) {
    return { ok: false, error: String(e && e.message ? e.message : e) };
  }
});
process.stdout.write(JSON.stringify(out));
