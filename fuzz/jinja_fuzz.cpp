// libFuzzer target for the Jinja interpreter (engine/text/jinja.h): the input is a template, parsed
// and, when it parses, rendered with a small fixed chat context. Whatever the bytes, it must not
// crash, leak, overflow the stack or hang (ASan, UBSan, libFuzzer's timeouts), and its errors
// must name the template.
//
// Built with -DLLMQ_FUZZ_SEEDS instead, this file is a small program that writes a seed corpus
// into the directory given as argv[1]: the chat templates of the tokenizer_config.json files
// named after it (those that exist) and a few templates using every construct.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "engine/text/jinja.h"
#include "fuzz/fuzz_check.h"

#ifndef LLMQ_FUZZ_SEEDS

namespace {

const nlohmann::json& Context() {
  static const nlohmann::json ctx = nlohmann::json::parse(R"({
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Hi <think>\n"},
      {"role": "assistant", "content": "<think>\nhm\n</think>\n\nHello",
       "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"a": [1, 2.5, null]}}}]},
      {"role": "tool", "content": "42"},
      {"role": "user", "content": "caf\u00e9 \ud83d\ude00"}
    ],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    "add_generation_prompt": true, "enable_thinking": false,
    "bos_token": "<s>", "eos_token": "</s>"
  })");
  return ctx;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string origin = "/fuzz/chat_template.jinja";
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  std::unique_ptr<llmq::jinja::Template> t;
  const llmq::Status s = llmq::jinja::Template::Parse(source, origin, &t);
  if (!s.ok()) {
    FUZZ_CHECK(s.message().rfind(origin, 0) == 0);
    FUZZ_CHECK(!t);
    return 0;
  }
  std::string out;
  const llmq::Status r = t->Render(Context(), &out);
  if (!r.ok()) {
    FUZZ_CHECK(r.message().rfind(origin, 0) == 0);
    FUZZ_CHECK(out.empty());
  }
  return 0;
}

#else  // LLMQ_FUZZ_SEEDS

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR [TOKENIZER_CONFIG.json...]\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream f(dir + "/" + name + ".jinja", std::ios::binary);
    f << text;
    return static_cast<bool>(f);
  };
  int n = 0;
  for (int i = 2; i < argc; ++i) {
    std::ifstream f(argv[i]);
    if (!f) continue;  // a model that is absent here
    const nlohmann::json cfg = nlohmann::json::parse(f, nullptr, false);
    if (cfg.is_object() && cfg.contains("chat_template") && cfg["chat_template"].is_string())
      n += write("config" + std::to_string(i - 1), cfg["chat_template"].get<std::string>());
  }
  const char* const kSeeds[] = {
      "{%- for m in messages if m.role != 'tool' -%}\n  {{- loop.index ~ m['role'] | upper }}"
      "{% if not loop.last %}, {% else %}.{% endif %}\n{%- endfor %}",
      "{% set ns = namespace(n=0) %}{% for k, v in {'a': 1, 'b': [1, 2]}.items() %}"
      "{% set ns.n = ns.n + 1 %}{{ k }}={{ v | tojson(indent=2) }}{% endfor %}{{ ns.n }}",
      "{% macro f(x, y='d') %}[{{ x }}|{{ y }}]{% endmacro %}{{ f(1) }}{{ f(y=2, x=3) }}"
      "{% set b %}{{ 'a,b'.split(',')[::-1] | join('-') }}{% endset %}{{ b | trim }}",
      "{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | list }}"
      "{{ (tools | first).function.name if tools is defined else raise_exception('no tools') }}",
      "{% for i in range(5) %}{% if i is odd %}{% continue %}{% elif i > 3 %}{% break %}"
      "{% endif %}{{ i * 2 ** 2 // 3 % 5 }}{% endfor %}{{ 'x' ~ none ~ 1.5 ~ [1] }}",
      "{% raw %}{{ raw }}{% endraw %}{# comment #}{{- ' x ' -}} {%+ if true %}y{% endif %}",
  };
  for (size_t k = 0; k < std::size(kSeeds); ++k) n += write("seed" + std::to_string(k), kSeeds[k]);
  std::printf("wrote %d seeds to %s\n", n, dir.c_str());
  return 0;
}

#endif  // LLMQ_FUZZ_SEEDS
