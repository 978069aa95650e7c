#include "jobs/batch_request.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include "base/json.h"

namespace llmq::jobs {
namespace {

// Deeper JSON is refused unparsed (TooDeep): real requests nest a handful of levels (a JSON schema
// a few dozen).
constexpr int kMaxJsonDepth = 512;

using nlohmann::json;

constexpr const char* kChatUrl = "/v1/chat/completions";
constexpr const char* kCompletionsUrl = "/v1/completions";
constexpr size_t kMaxStop = 4;  // OpenAI's limit on "stop"
constexpr int kMaxN = 128;
constexpr int kMaxTopLogprobs = 20;  // OpenAI's limit for chat's top_logprobs
constexpr int kMaxLogprobs = 5;      // OpenAI's limit for completions' logprobs
constexpr double kMaxBias = 100.0;   // logit_bias values lie in [-100, 100]
constexpr double kMaxPenalty = 2.0;  // presence / frequency penalties lie in [-2, 2]

// The first problem found, with the field it concerns already in the message. Thrown by Refuse
// inside the parser only: ParseBatchLine and ParseFlagList (under ParseChatMessages and
// ParseChatTools), the parser's only entries, catch it (no exception leaves this file).
struct LineError {
  std::string message;
  std::string field;  // the field at fault, as the message names it ("body.max_tokens")
};

// Refuses the line for `field`: the message is "field '<field>'" followed by `rest`.
[[noreturn]] void Refuse(const std::string& field, const std::string& rest) {
  LineError e{"field '" + field + "'" + rest, field};
  throw e;  // caught in ParseBatchLine and ParseFlagList
}

// A short rendering of a JSON value for messages: `got -3`, `got "abc"`, `got an object`.
std::string Got(const json& v) {
  switch (v.type()) {
    case json::value_t::object:
      return "got an object";
    case json::value_t::array:
      return v.empty() ? "got an empty list" : "got a list of " + std::to_string(v.size());
    case json::value_t::null:
      return "got null";
    default:
      break;
  }
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return "got " + s;
}

[[noreturn]] void Fail(const std::string& field, const std::string& what, const json& v) {
  Refuse(field, " " + what + ", " + Got(v));
}

[[noreturn]] void Missing(const std::string& field, const std::string& what) {
  Refuse(field, " is missing (" + what + ")");
}

// `obj[key]` or nullptr when absent or null (OpenAI treats an explicit null as "not given").
const json* Find(const json& obj, const char* key) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

// An integer, also accepted when written as an integral float ("16.0"), as OpenAI's servers do.
bool AsInt64(const json& v, int64_t* out) {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned()) {
      const uint64_t u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
      *out = static_cast<int64_t>(u);
    } else {
      *out = v.get<int64_t>();
    }
    return true;
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) >= 9.2e18) return false;
    *out = static_cast<int64_t>(d);
    return true;
  }
  return false;
}

// An integer in [lo, hi] or Fail with `what`.
int64_t IntIn(const json& v, const std::string& field, int64_t lo, int64_t hi, const char* what) {
  int64_t x = 0;
  if (!AsInt64(v, &x) || x < lo || x > hi) Fail(field, what, v);
  return x;
}

// A number (booleans are not numbers) checked by `ok`.
template <typename Pred>
double NumberWhere(const json& v, const std::string& field, Pred ok, const char* what) {
  if (!v.is_number() || !std::isfinite(v.get<double>()) || !ok(v.get<double>()))
    Fail(field, what, v);
  return v.get<double>();
}

// A message's content: a string, or OpenAI's list of content parts of which only text parts are
// supported; their texts are joined with "\n", as vLLM does.
std::string Content(const json& v, const std::string& field) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array())
    Fail(field, "must be a string or a list of {\"type\": \"text\", \"text\": ...} parts", v);
  std::string text;
  for (size_t i = 0; i < v.size(); ++i) {
    const json& part = v[i];
    const std::string pf = field + "[" + std::to_string(i) + "]";
    if (!part.is_object()) Fail(pf, "must be an object {\"type\": \"text\", \"text\": ...}", part);
    const json* type = Find(part, "type");
    if (!type) Missing(pf + ".type", "expected \"text\"");
    if (!type->is_string() || type->get_ref<const std::string&>() != "text")
      Fail(pf + ".type", "must be \"text\" (only text content is supported)", *type);
    const json* t = Find(part, "text");
    if (!t) Missing(pf + ".text", "expected a string");
    if (!t->is_string()) Fail(pf + ".text", "must be a string", *t);
    if (i > 0) text += '\n';
    text += t->get_ref<const std::string&>();
  }
  return text;
}

bool Flag(const json& v, const std::string& field) {
  if (!v.is_boolean()) Fail(field, "must be true or false", v);
  return v.get<bool>();
}

// Only the keys `allowed` (each "name" or null) in the object `v` at `field`.
void OnlyKeys(const json& v, const std::string& field, std::initializer_list<const char*> allowed) {
  for (const auto& [key, value] : v.items()) {
    if (value.is_null()) continue;
    if (std::none_of(allowed.begin(), allowed.end(), [&](const char* a) { return key == a; }))
      Fail(field + "." + key, "is not supported (not a field of " + field + ")", value);
  }
}

// A name of a-z, A-Z, 0-9, _ and -, 1 to 64 long (OpenAI's rule for schema and function names).
bool NameOk(const std::string& n) {
  return !n.empty() && n.size() <= 64 && std::all_of(n.begin(), n.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
}

// `v` (read with sorted keys) as its ordered twin `ordered` has it, when there is one.
std::string Written(const json& v, const nlohmann::ordered_json* ordered) {
  return ordered != nullptr ? ordered->dump() : v.dump();
}

// An assistant message's tool_calls, checked; the JSON array text the template gets: the calls as
// written (`ordered`, when given) with each function.arguments parsed from its JSON text.
std::string ToolCalls(const json& v, const nlohmann::ordered_json* ordered,
                      const std::string& field) {
  if (!v.is_array() || v.empty())
    Fail(field,
         "must be a non-empty list of {\"id\", \"type\": \"function\", \"function\": {\"name\", "
         "\"arguments\"}}",
         v);
  nlohmann::ordered_json out =
      ordered != nullptr ? *ordered : nlohmann::ordered_json::parse(v.dump());
  for (size_t j = 0; j < v.size(); ++j) {
    const json& call = v[j];
    const std::string cf = field + "[" + std::to_string(j) + "]";
    if (!call.is_object())
      Fail(cf, "must be an object {\"id\", \"type\": \"function\", \"function\": {...}}", call);
    OnlyKeys(call, cf, {"id", "type", "function"});
    const json* id = Find(call, "id");
    if (!id) Missing(cf + ".id", "expected the call's id, a string");
    if (!id->is_string()) Fail(cf + ".id", "must be a string", *id);
    const json* type = Find(call, "type");
    if (!type) Missing(cf + ".type", "expected \"function\"");
    if (*type != "function") Fail(cf + ".type", "must be \"function\"", *type);
    const json* fn = Find(call, "function");
    if (!fn) Missing(cf + ".function", "expected {\"name\", \"arguments\"}");
    if (!fn->is_object())
      Fail(cf + ".function", "must be an object {\"name\", \"arguments\"}", *fn);
    OnlyKeys(*fn, cf + ".function", {"name", "arguments"});
    const json* name = Find(*fn, "name");
    if (!name) Missing(cf + ".function.name", "expected the function's name");
    if (!name->is_string()) Fail(cf + ".function.name", "must be a string", *name);
    const json* args = Find(*fn, "arguments");
    if (!args) Missing(cf + ".function.arguments", "expected the arguments as JSON text");
    const std::string af = cf + ".function.arguments";
    if (!args->is_string()) Fail(af, "must be a string (the arguments object as JSON text)", *args);
    nlohmann::ordered_json parsed = nlohmann::ordered_json::parse(
        args->get_ref<const std::string&>(), nullptr, /*allow_exceptions=*/false);
    if (parsed.is_discarded() || !parsed.is_object())
      Fail(af, "must be a JSON object as text (the function's arguments)", *args);
    out[j]["function"]["arguments"] = std::move(parsed);
  }
  return out.dump();
}

// body.messages. `ordered`: the messages as written (key order kept) when the line was read so.
void ParseMessages(const json& body, const nlohmann::ordered_json* ordered, BatchRequest* req) {
  const json* msgs = Find(body, "messages");
  if (!msgs) Missing("body.messages", "a chat request needs a non-empty list of messages");
  if (!msgs->is_array()) Fail("body.messages", "must be a non-empty list of messages", *msgs);
  if (msgs->empty()) Fail("body.messages", "must be a non-empty list of messages", *msgs);
  req->messages.reserve(msgs->size());
  const char* roles = "\"system\", \"user\", \"assistant\" or \"tool\"";
  for (size_t i = 0; i < msgs->size(); ++i) {
    const json& m = (*msgs)[i];
    const std::string mf = "body.messages[" + std::to_string(i) + "]";
    if (!m.is_object()) Fail(mf, "must be an object with \"role\" and \"content\"", m);
    ChatMessage msg;
    const json* role = Find(m, "role");
    if (!role) Missing(mf + ".role", std::string("expected ") + roles);
    if (!role->is_string()) Fail(mf + ".role", "must be a string", *role);
    msg.role = role->get<std::string>();
    // OpenAI's newer name for the system role.
    if (msg.role == "developer") msg.role = "system";
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" && msg.role != "tool")
      Fail(mf + ".role", std::string("must be ") + roles, *role);
    if (const json* name = Find(m, "name")) {
      if (!name->is_string()) Fail(mf + ".name", "must be a string", *name);
      msg.name = name->get<std::string>();
    }
    if (const json* calls = Find(m, "tool_calls")) {
      if (msg.role != "assistant")
        Fail(mf + ".tool_calls", "is only for assistant messages (role " + msg.role + ")", *calls);
      const nlohmann::ordered_json* written = nullptr;
      if (ordered != nullptr) written = &ordered->at(i).at("tool_calls");
      msg.tool_calls = ToolCalls(*calls, written, mf + ".tool_calls");
    }
    if (const json* id = Find(m, "tool_call_id")) {
      if (msg.role != "tool")
        Fail(mf + ".tool_call_id", "is only for tool messages (role " + msg.role + ")", *id);
      if (!id->is_string()) Fail(mf + ".tool_call_id", "must be a string", *id);
      msg.tool_call_id = id->get<std::string>();
    } else if (msg.role == "tool") {
      Missing(mf + ".tool_call_id", "a tool message names the call it answers");
    }
    if (msg.role == "assistant") {
      for (const char* key : {"reasoning", "reasoning_content"}) {
        const json* v = Find(m, key);
        if (v == nullptr || v->is_null()) continue;
        if (!v->is_string()) Fail(mf + "." + key, "must be a string", *v);
        if (!msg.reasoning && !v->get_ref<const std::string&>().empty())
          msg.reasoning = v->get<std::string>();
      }
    }
    const json* content = Find(m, "content");
    if (content) {
      msg.content = Content(*content, mf + ".content");
    } else if (!msg.tool_calls.empty()) {
      msg.content_null = true;  // OpenAI: content may be left out when the message calls tools
    } else {
      Missing(mf + ".content", "expected a string");
    }
    req->messages.push_back(std::move(msg));
  }
}

// body.tools. `ordered`: the list as written (key order kept), when the line was read so.
void ParseTools(const json& v, const nlohmann::ordered_json* ordered, std::vector<ToolDef>* out) {
  const std::string field = "body.tools";
  const char* shape =
      "{\"type\": \"function\", \"function\": {\"name\", \"description\", \"parameters\"}}";
  if (!v.is_array() || v.empty())
    Fail(field, std::string("must be a non-empty list of ") + shape, v);
  for (size_t i = 0; i < v.size(); ++i) {
    const json& t = v[i];
    const std::string tf = field + "[" + std::to_string(i) + "]";
    if (!t.is_object()) Fail(tf, std::string("must be an object ") + shape, t);
    const json* type = Find(t, "type");
    if (!type) Missing(tf + ".type", "expected \"function\"");
    if (*type != "function")
      Fail(tf + ".type", "must be \"function\" (llmq offers function tools only)", *type);
    OnlyKeys(t, tf, {"type", "function"});
    const json* fn = Find(t, "function");
    if (!fn) Missing(tf + ".function", "expected {\"name\", \"description\", \"parameters\"}");
    if (!fn->is_object())
      Fail(tf + ".function", "must be an object {\"name\", \"description\", \"parameters\"}", *fn);
    OnlyKeys(*fn, tf + ".function", {"name", "description", "parameters", "strict"});
    ToolDef def;
    const json* name = Find(*fn, "name");
    if (!name)
      Missing(tf + ".function.name", "expected a name of a-z, A-Z, 0-9, _ and -, up to 64");
    if (!name->is_string() || !NameOk(name->get_ref<const std::string&>()))
      Fail(tf + ".function.name", "must be a name of a-z, A-Z, 0-9, _ and -, up to 64 characters",
           *name);
    def.name = name->get<std::string>();
    for (size_t k = 0; k < out->size(); ++k)
      if ((*out)[k].name == def.name)
        Fail(tf + ".function.name",
             "repeats the name of body.tools[" + std::to_string(k) + "] (names must be unique)",
             *name);
    if (const json* d = Find(*fn, "description")) {
      if (!d->is_string()) Fail(tf + ".function.description", "must be a string", *d);
      def.description = d->get<std::string>();
    }
    const nlohmann::ordered_json* written = ordered != nullptr ? &ordered->at(i) : nullptr;
    if (const json* p = Find(*fn, "parameters")) {
      if (!p->is_object()) Fail(tf + ".function.parameters", "must be a JSON Schema object", *p);
      def.parameters =
          Written(*p, written != nullptr ? &written->at("function").at("parameters") : nullptr);
    }
    if (const json* strict = Find(*fn, "strict"))
      def.strict = Flag(*strict, tf + ".function.strict");
    def.json = Written(t, written);
    out->push_back(std::move(def));
  }
}

// body.tools, tool_choice and parallel_tool_calls (chat).
void ParseToolFields(const json& body, const nlohmann::ordered_json* ordered, BatchRequest* req) {
  if (const json* v = Find(body, "tools"))
    ParseTools(*v, ordered != nullptr ? &ordered->at("tools") : nullptr, &req->tools);
  const bool tools = !req->tools.empty();
  req->tool_choice = tools ? ToolChoice::kAuto : ToolChoice::kNone;
  if (const json* v = Find(body, "tool_choice")) {
    const std::string field = "body.tool_choice";
    const char* forms =
        "must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": "
        "{\"name\": ...}}";
    if (*v == "none") {
      req->tool_choice = ToolChoice::kNone;
    } else if (*v == "auto") {
      req->tool_choice = ToolChoice::kAuto;
    } else if (*v == "required") {
      req->tool_choice = ToolChoice::kRequired;
    } else if (v->is_object()) {
      OnlyKeys(*v, field, {"type", "function"});
      const json* type = Find(*v, "type");
      if (!type) Missing(field + ".type", "expected \"function\"");
      if (*type != "function") Fail(field + ".type", "must be \"function\"", *type);
      const json* fn = Find(*v, "function");
      if (!fn) Missing(field + ".function", "expected {\"name\": ...}");
      if (!fn->is_object()) Fail(field + ".function", "must be an object {\"name\": ...}", *fn);
      OnlyKeys(*fn, field + ".function", {"name"});
      const json* name = Find(*fn, "name");
      if (!name) Missing(field + ".function.name", "expected the name of one of body.tools");
      if (!name->is_string()) Fail(field + ".function.name", "must be a string", *name);
      req->tool_choice = ToolChoice::kNamed;
      req->tool_choice_name = name->get<std::string>();
      if (tools && std::none_of(req->tools.begin(), req->tools.end(),
                                [&](const ToolDef& t) { return t.name == req->tool_choice_name; }))
        Fail(field + ".function.name", "must name one of body.tools", *name);
    } else {
      Fail(field, forms, *v);
    }
    if (!tools && req->tool_choice != ToolChoice::kNone)
      Fail(field, "is only allowed when body.tools are given (other than \"none\")", *v);
  }
  if (const json* v = Find(body, "parallel_tool_calls")) {
    req->parallel_tool_calls = Flag(*v, "body.parallel_tool_calls");
    if (!tools) Fail("body.parallel_tool_calls", "is only allowed when body.tools are given", *v);
  }
}

// body.chat_template_kwargs (chat, vLLM's extension).
void ParseTemplateKwargs(const json& body, const nlohmann::ordered_json* ordered,
                         BatchRequest* req) {
  const json* v = Find(body, "chat_template_kwargs");
  if (!v) return;
  const std::string field = "body.chat_template_kwargs";
  if (!v->is_object())
    Fail(field, "must be an object of the chat template's variables ({\"enable_thinking\": false})",
         *v);
  static const char* const kReserved[] = {"messages",
                                          "tools",
                                          "documents",
                                          "add_generation_prompt",
                                          "bos_token",
                                          "eos_token",
                                          "unk_token",
                                          "pad_token",
                                          "chat_template",
                                          "tokenize",
                                          "continue_final_message"};
  for (const char* key : kReserved)
    if (const json* r = Find(*v, key))
      Fail(field + "." + key,
           "is not a variable a request may set (llmq renders the messages, tools and generation "
           "prompt itself, with the model's special tokens and template)",
           *r);
  if (v->empty()) return;
  req->chat_template_kwargs =
      Written(*v, ordered != nullptr ? &ordered->at("chat_template_kwargs") : nullptr);
}

// body.add_generation_prompt and continue_final_message (chat, vLLM's extensions).
void ParseTurnFields(const json& body, BatchRequest* req) {
  if (const json* v = Find(body, "add_generation_prompt"))
    req->add_generation_prompt = Flag(*v, "body.add_generation_prompt");
  const json* v = Find(body, "continue_final_message");
  if (!v) return;
  req->continue_final_message = Flag(*v, "body.continue_final_message");
  if (!req->continue_final_message) return;
  if (req->add_generation_prompt)
    Fail("body.continue_final_message",
         "cannot be true with add_generation_prompt true (its default): set "
         "add_generation_prompt to false",
         *v);
  const ChatMessage& last = req->messages.back();
  if (last.content_null)
    Fail("body.continue_final_message",
         "needs a final message with text content to continue (messages[" +
             std::to_string(req->messages.size() - 1) + "] has none)",
         *v);
}

void ParsePrompt(const json& body, BatchRequest* req) {
  const json* p = Find(body, "prompt");
  const char* what = "must be a string or a list of token ids";
  if (!p) Missing("body.prompt", "a completions request needs a prompt: a string or token ids");
  if (p->is_string()) {
    req->prompt = p->get<std::string>();
    return;
  }
  if (!p->is_array()) Fail("body.prompt", what, *p);
  if (p->empty()) Fail("body.prompt", "must not be an empty list", *p);
  // ["text"]: one prompt in a list, as the OpenAI client sometimes writes it.
  if ((*p)[0].is_string()) {
    if (p->size() != 1)
      Fail("body.prompt", "must be a single prompt (a batch file takes one prompt per line)", *p);
    req->prompt = (*p)[0].get<std::string>();
    return;
  }
  if ((*p)[0].is_array())
    Fail("body.prompt", "must be a single prompt (a batch file takes one prompt per line)", *p);
  req->prompt_token_ids.reserve(p->size());
  for (size_t i = 0; i < p->size(); ++i) {
    req->prompt_token_ids.push_back(static_cast<int32_t>(
        IntIn((*p)[i], "body.prompt[" + std::to_string(i) + "]", 0,
              std::numeric_limits<int32_t>::max(), "must be a token id (a non-negative integer)")));
  }
  req->prompt_is_ids = true;
}

void ParseSampling(const json& body, BatchRequest* req) {
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  // vLLM: max_completion_tokens (the newer name) wins when both are given.
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    if (const json* v = Find(body, key))
      req->max_tokens = static_cast<int>(
          IntIn(*v, std::string("body.") + key, 1, kIntMax, "must be a positive integer"));
  }
  if (const json* v = Find(body, "temperature"))
    req->temperature = NumberWhere(
        *v, "body.temperature", [](double x) { return x >= 0 && x <= 2; },
        "must be a number in [0, 2]");
  if (const json* v = Find(body, "top_p"))
    req->top_p = NumberWhere(
        *v, "body.top_p", [](double x) { return x > 0 && x <= 1; }, "must be a number in (0, 1]");
  if (const json* v = Find(body, "top_k")) {
    // vLLM: -1 (and 0) mean "all tokens".
    const int64_t k =
        IntIn(*v, "body.top_k", -1, kIntMax, "must be an integer >= 1 (or 0 / -1 for no limit)");
    req->top_k = k < 0 ? 0 : static_cast<int>(k);
  }
  if (const json* v = Find(body, "min_p"))
    req->min_p = NumberWhere(
        *v, "body.min_p", [](double x) { return x >= 0 && x <= 1; }, "must be a number in [0, 1]");
  if (const json* v = Find(body, "seed")) {
    int64_t s = 0;
    if (!AsInt64(*v, &s)) Fail("body.seed", "must be an integer", *v);
    req->seed = s;
  }
  if (const json* v = Find(body, "stop")) {
    if (v->is_string()) {
      if (v->get_ref<const std::string&>().empty())
        Fail("body.stop", "must be a non-empty string", *v);
      req->stop.push_back(v->get<std::string>());
    } else if (v->is_array()) {
      if (v->size() > kMaxStop) Fail("body.stop", "must hold at most 4 strings", *v);
      for (size_t i = 0; i < v->size(); ++i) {
        const json& s = (*v)[i];
        if (!s.is_string() || s.get_ref<const std::string&>().empty())
          Fail("body.stop[" + std::to_string(i) + "]", "must be a non-empty string", s);
        req->stop.push_back(s.get<std::string>());
      }
    } else {
      Fail("body.stop", "must be a string or a list of up to 4 strings", *v);
    }
  }
  if (const json* v = Find(body, "n"))
    req->n = static_cast<int>(IntIn(*v, "body.n", 1, kMaxN, "must be an integer in [1, 128]"));
  if (const json* v = Find(body, "ignore_eos")) {
    if (!v->is_boolean()) Fail("body.ignore_eos", "must be true or false", *v);
    req->ignore_eos = v->get<bool>();
  }
  if (const json* v = Find(body, "stream")) {
    if (!v->is_boolean()) Fail("body.stream", "must be true or false", *v);
    if (v->get<bool>()) Fail("body.stream", "must be false: a batch job cannot stream", *v);
  }
}

// A list of token ids (non-negative int32); the vocabulary is checked where it is known.
std::vector<int32_t> TokenIds(const json& v, const std::string& field) {
  if (!v.is_array()) Fail(field, "must be a list of token ids", v);
  std::vector<int32_t> ids;
  for (size_t i = 0; i < v.size(); ++i)
    ids.push_back(static_cast<int32_t>(IntIn(v[i], field + "[" + std::to_string(i) + "]", 0,
                                             std::numeric_limits<int32_t>::max(),
                                             "must be a token id (a non-negative integer)")));
  return ids;
}

void ParsePenalties(const json& body, BatchRequest* req) {
  auto penalty = [&](const char* key, double* out) {
    if (const json* v = Find(body, key))
      *out = NumberWhere(
          *v, std::string("body.") + key, [](double x) { return std::fabs(x) <= kMaxPenalty; },
          "must be a number in [-2, 2]");
  };
  penalty("presence_penalty", &req->presence_penalty);
  penalty("frequency_penalty", &req->frequency_penalty);
  if (const json* v = Find(body, "repetition_penalty"))
    req->repetition_penalty = NumberWhere(
        *v, "body.repetition_penalty", [](double x) { return x > 0; },
        "must be a number greater than 0 (1: off)");
  if (const json* v = Find(body, "logit_bias")) {
    if (!v->is_object())
      Fail("body.logit_bias", "must be an object of token id -> bias in [-100, 100]", *v);
    for (const auto& [key, bias] : v->items()) {
      const std::string field = "body.logit_bias." + key;
      int64_t id = -1;
      const bool digits = !key.empty() && key.size() <= 10 &&
                          key.find_first_not_of("0123456789") == std::string::npos;
      if (digits) id = std::stoll(key);
      if (id < 0 || id > std::numeric_limits<int32_t>::max())
        Refuse(field, ": the key must be a token id (a non-negative integer)");
      if (bias.is_null()) continue;
      req->logit_bias.push_back(
          {id, NumberWhere(
                   bias, field, [](double x) { return std::fabs(x) <= kMaxBias; },
                   "must be a number in [-100, 100]")});
    }
    std::sort(req->logit_bias.begin(), req->logit_bias.end());
  }
  if (const json* v = Find(body, "min_tokens")) {
    req->min_tokens =
        static_cast<int>(IntIn(*v, "body.min_tokens", 0, std::numeric_limits<int>::max(),
                               "must be a non-negative integer"));
    if (req->max_tokens && req->min_tokens > *req->max_tokens)
      Fail("body.min_tokens",
           "must not exceed max_tokens (" + std::to_string(*req->max_tokens) + ")", *v);
  }
  if (const json* v = Find(body, "stop_token_ids"))
    req->stop_token_ids = TokenIds(*v, "body.stop_token_ids");
}

void ParseLogprobs(const json& body, BatchRequest* req) {
  const json* lp = Find(body, "logprobs");
  if (req->endpoint == Endpoint::kChatCompletions) {
    const bool on = lp && Flag(*lp, "body.logprobs");
    if (const json* top = Find(body, "top_logprobs")) {
      const int k = static_cast<int>(
          IntIn(*top, "body.top_logprobs", 0, kMaxTopLogprobs, "must be an integer in [0, 20]"));
      if (!on) Fail("body.top_logprobs", "needs \"logprobs\": true", *top);
      req->logprobs = k;
    } else if (on) {
      req->logprobs = 0;
    }
    return;
  }
  if (lp)
    req->logprobs = static_cast<int>(
        IntIn(*lp, "body.logprobs", 0, kMaxLogprobs, "must be an integer in [0, 5]"));
}

// body.response_format (OpenAI's shape). The schema's own key order is read from `ordered` (the
// line parsed keeping it); `v` was parsed with sorted keys.
void ParseResponseFormat(const json& v, const nlohmann::ordered_json* ordered, BatchRequest* req) {
  const std::string field = "body.response_format";
  const char* kinds = "\"text\", \"json_object\" or \"json_schema\"";
  if (!v.is_object()) Fail(field, std::string("must be an object {\"type\": ") + kinds + "}", v);
  const json* type = Find(v, "type");
  if (!type) Missing(field + ".type", std::string("expected ") + kinds);
  if (*type == "text" || *type == "json_object") {
    OnlyKeys(v, field, {"type"});
    req->response_format = *type == "text" ? ResponseFormat::kText : ResponseFormat::kJsonObject;
    return;
  }
  if (*type != "json_schema") Fail(field + ".type", std::string("must be ") + kinds, *type);
  OnlyKeys(v, field, {"type", "json_schema"});
  const std::string js = field + ".json_schema";
  const json* spec = Find(v, "json_schema");
  if (!spec) Missing(js, "expected {\"name\": ..., \"schema\": {...}}");
  if (!spec->is_object()) Fail(js, "must be an object {\"name\": ..., \"schema\": {...}}", *spec);
  OnlyKeys(*spec, js, {"name", "schema", "strict", "description"});
  const json* name = Find(*spec, "name");
  if (!name) Missing(js + ".name", "expected a name of a-z, A-Z, 0-9, _ and -, up to 64");
  if (!name->is_string() || !NameOk(name->get_ref<const std::string&>()))
    Fail(js + ".name", "must be a name of a-z, A-Z, 0-9, _ and -, up to 64 characters", *name);
  if (const json* strict = Find(*spec, "strict"); strict && !strict->is_boolean())
    Fail(js + ".strict", "must be a boolean (llmq always enforces the schema)", *strict);
  if (const json* d = Find(*spec, "description"); d && !d->is_string())
    Fail(js + ".description", "must be a string", *d);
  const json* schema = Find(*spec, "schema");
  if (!schema) Missing(js + ".schema", "expected the JSON Schema the output must satisfy");
  if (!schema->is_object() && !schema->is_boolean())
    Fail(js + ".schema", "must be a JSON Schema (an object or a boolean)", *schema);
  req->response_format = ResponseFormat::kJsonSchema;
  req->json_schema_name = name->get<std::string>();
  req->json_schema =
      ordered != nullptr
          ? ordered->at("body").at("response_format").at("json_schema").at("schema").dump()
          : schema->dump();
}

// A JSON Schema given by vLLM's structured_outputs.json / guided_json (`field`): an object or a
// boolean, or its JSON text; kept in the key order written (`written`: the same value from the line
// read keeping it, or null).
void ParseVllmSchema(const json& v, const nlohmann::ordered_json* written, const std::string& field,
                     BatchRequest* req) {
  nlohmann::ordered_json schema = written != nullptr ? *written : nlohmann::ordered_json(v);
  if (schema.is_string()) {
    schema = nlohmann::ordered_json::parse(schema.get<std::string>(), nullptr, false);
    if (schema.is_discarded())
      Fail(field, "must be a JSON Schema (an object, or its JSON text): the text is not JSON", v);
  }
  if (!schema.is_object() && !schema.is_boolean())
    Fail(field, "must be a JSON Schema (an object or a boolean, or its JSON text)", v);
  req->response_format = ResponseFormat::kJsonSchema;
  req->json_schema = schema.dump();
}

// vLLM's regex (`field`): a non-empty string.
void ParseVllmRegex(const json& v, const std::string& field, BatchRequest* req) {
  if (!v.is_string() || v.get_ref<const std::string&>().empty())
    Fail(field, "must be a non-empty regular expression (a string)", v);
  req->response_format = ResponseFormat::kRegex;
  req->regex = v.get<std::string>();
}

// vLLM's grammar (`field`): the text of a GBNF or a Lark grammar (compiled by the daemon).
void ParseVllmGrammar(const json& v, const std::string& field, BatchRequest* req) {
  if (!v.is_string() || v.get_ref<const std::string&>().empty())
    Fail(field, "must be a GBNF or Lark grammar (a non-empty string)", v);
  req->response_format = ResponseFormat::kGrammar;
  req->grammar = v.get<std::string>();
}

// vLLM's choice (`field`): a non-empty list of distinct non-empty strings.
void ParseVllmChoice(const json& v, const std::string& field, BatchRequest* req) {
  if (!v.is_array() || v.empty()) Fail(field, "must be a non-empty list of strings", v);
  std::vector<std::string> choices;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string f = field + "[" + std::to_string(i) + "]";
    if (!v[i].is_string() || v[i].get_ref<const std::string&>().empty())
      Fail(f, "must be a non-empty string", v[i]);
    if (std::find(choices.begin(), choices.end(), v[i].get<std::string>()) != choices.end())
      Fail(f, "repeats an earlier choice", v[i]);
    choices.push_back(v[i].get<std::string>());
  }
  req->response_format = ResponseFormat::kChoice;
  req->choices = std::move(choices);
}

// vLLM's structured outputs: structured_outputs {json | json_object | regex | choice | grammar} or
// one of guided_json, guided_regex, guided_choice, guided_grammar (and llama.cpp's grammar); at
// most one, and not beside a response_format.
void ParseVllmStructured(const json& body, const nlohmann::ordered_json* ordered,
                         BatchRequest* req) {
  const char* keys[] = {"structured_outputs", "guided_json",    "guided_regex",
                        "guided_choice",      "guided_grammar", "grammar"};
  const char* given = nullptr;
  for (const char* k : keys) {
    const json* v = Find(body, k);
    if (v == nullptr) continue;
    const std::string field = std::string("body.") + k;
    if (given != nullptr)
      Fail(field, std::string("cannot be combined with body.") + given + ": one grammar per output",
           *v);
    if (req->response_format != ResponseFormat::kText)
      Fail(field, "cannot be combined with body.response_format: one grammar per output", *v);
    given = k;
  }
  if (given == nullptr) return;
  const std::string key = given;
  const json* x = Find(body, given);
  std::string field = "body." + key;
  const nlohmann::ordered_json* written =
      ordered != nullptr ? &ordered->at("body").at(key) : nullptr;
  // guided_json -> json, ..., llama.cpp's grammar -> grammar; structured_outputs names its kind
  // inside.
  std::string kind = key == "structured_outputs" ? ""
                     : key == "grammar"          ? key
                                                 : key.substr(std::string("guided_").size());
  if (key == "structured_outputs") {  // {"json" | "json_object" | "regex" | "choice" | ...: ...}
    const char* kinds = "must be an object with one of json, json_object, regex, choice or grammar";
    if (!x->is_object()) Fail(field, kinds, *x);
    if (const json* g = Find(*x, "structural_tag"))
      Fail(field + ".structural_tag",
           "is not supported (llmq enforces JSON Schemas, regular expressions, choices, GBNF and "
           "Lark "
           "grammars)",
           *g);
    OnlyKeys(*x, field, {"json", "json_object", "regex", "choice", "grammar"});
    for (const char* k : {"json", "json_object", "regex", "choice", "grammar"}) {
      const json* y = Find(*x, k);
      if (y == nullptr) continue;
      if (!kind.empty())
        Fail(field + "." + k,
             "cannot be combined with " + field + "." + kind + ": one grammar per output", *y);
      kind = k;
    }
    if (kind.empty()) Fail(field, kinds, *x);
    field += "." + kind;
    x = Find(*x, kind.c_str());
    if (written != nullptr) written = &written->at(kind);
  }
  if (kind == "json_object") {
    if (!x->is_boolean()) Fail(field, "must be a boolean", *x);
    if (x->get<bool>()) req->response_format = ResponseFormat::kJsonObject;
  } else if (kind == "json") {
    ParseVllmSchema(*x, written, field, req);
  } else if (kind == "regex") {
    ParseVllmRegex(*x, field, req);
  } else if (kind == "grammar") {
    ParseVllmGrammar(*x, field, req);
  } else {
    ParseVllmChoice(*x, field, req);
  }
  req->structured_field = field;
}

// The fields whose support depends on their value.
void ParseConditional(const json& body, const nlohmann::ordered_json* ordered, BatchRequest* req) {
  if (const json* v = Find(body, "response_format")) ParseResponseFormat(*v, ordered, req);
  ParseVllmStructured(body, ordered, req);
  if (req->response_format != ResponseFormat::kText) {
    const std::string what =
        req->structured_field == "body.response_format"
            ? "response_format " + Find(body, "response_format")->at("type").get<std::string>()
            : req->structured_field;
    if (const json* m = Find(body, "min_tokens"); m && req->min_tokens > 0)
      Fail("body.min_tokens",
           "cannot be combined with " + what +
               " (the end of the document decides where the output ends)",
           *m);
    // A stop would end the output inside the document with finish_reason "stop", which promises
    // a complete one: refused rather than a cut document reported as finished.
    for (const char* k : {"stop", "stop_token_ids"})
      if (const json* x = Find(body, k);
          x && (k[4] == '\0' ? !req->stop.empty() : !req->stop_token_ids.empty()))
        Fail(std::string("body.") + k,
             "cannot be combined with " + what +
                 " (a stop would cut the document; the output ends where the document is "
                 "complete)",
             *x);
  }
  if (const json* v = Find(body, "modalities")) {
    if (*v != json::array({"text"}))
      Fail("body.modalities", "is not supported except [\"text\"] (llmq generates text only)", *v);
  }
  if (const json* v = Find(body, "echo")) {
    if (Flag(*v, "body.echo"))
      Fail("body.echo", "is not supported: must be false (llmq does not echo the prompt)", *v);
  }
  if (const json* v = Find(body, "suffix")) {
    if (!v->is_string() || !v->get_ref<const std::string&>().empty())
      Fail("body.suffix", "is not supported (llmq does not insert text before a suffix)", *v);
  }
  if (const json* v = Find(body, "best_of")) {
    const int64_t b = IntIn(*v, "body.best_of", 1, kMaxN, "must be an integer in [1, 128]");
    if (b != req->n)
      Fail("body.best_of",
           "is not supported unless it equals n (" + std::to_string(req->n) +
               "): llmq returns every sample, it does not rank them",
           *v);
  }
}

// Every non-null field of the body is honoured, ignored as OpenAI ignores it, or refused by name.
void CheckBodyFields(const json& body, Endpoint endpoint) {
  const bool chat = endpoint == Endpoint::kChatCompletions;
  for (const auto& [key, value] : body.items()) {
    if (value.is_null()) continue;
    const FieldRule* rule = nullptr;
    for (const FieldRule& r : BodyFieldRules())
      if (key == r.name) rule = &r;
    const std::string field = "body." + key;
    if (!rule || !(chat ? rule->chat : rule->completions))
      Fail(field,
           std::string("is not supported (not a field llmq knows for ") +
               (chat ? kChatUrl : kCompletionsUrl) + "; the README lists them)",
           value);
    if (rule->use == FieldUse::kRefused)
      Fail(field, std::string("is not supported: ") + rule->why, value);
  }
}

// Whether the body carries what is kept in the order written: a JSON schema, tools, tool calls,
// chat template variables.
bool NeedsOrder(const json& body) {
  const json* rf = Find(body, "response_format");
  if (rf && rf->is_object() && rf->contains("json_schema")) return true;
  const json* so = Find(body, "structured_outputs");
  if (Find(body, "guided_json") || (so && so->is_object() && so->contains("json"))) return true;
  if (Find(body, "tools") || Find(body, "chat_template_kwargs")) return true;
  const json* msgs = Find(body, "messages");
  return msgs && msgs->is_array() && std::any_of(msgs->begin(), msgs->end(), [](const json& m) {
           return m.is_object() && Find(m, "tool_calls") != nullptr;
         });
}

// Everything after custom_id; throws LineError at the first problem.
void ParseRest(const json& j, const nlohmann::ordered_json* ordered, BatchRequest* req) {
  const json* method = Find(j, "method");
  if (!method) Missing("method", "expected \"POST\"");
  if (!method->is_string() || method->get_ref<const std::string&>() != "POST")
    Fail("method", "must be \"POST\"", *method);

  const json* url = Find(j, "url");
  const std::string supported = std::string("supported: ") + kChatUrl + ", " + kCompletionsUrl;
  if (!url) Missing("url", supported);
  if (!url->is_string()) Fail("url", "must be a string (" + supported + ")", *url);
  const std::string& u = url->get_ref<const std::string&>();
  if (u == kChatUrl) {
    req->endpoint = Endpoint::kChatCompletions;
  } else if (u == kCompletionsUrl) {
    req->endpoint = Endpoint::kCompletions;
  } else {
    Fail("url", "is not a supported endpoint (" + supported + ")", *url);
  }

  const json* body = Find(j, "body");
  if (!body) Missing("body", "expected the request object");
  if (!body->is_object()) Fail("body", "must be an object", *body);

  if (const json* model = Find(*body, "model")) {
    if (!model->is_string()) Fail("body.model", "must be a string", *model);
    req->model = model->get<std::string>();
  }
  CheckBodyFields(*body, req->endpoint);
  if (req->endpoint == Endpoint::kChatCompletions) {
    const nlohmann::ordered_json* written = ordered != nullptr ? &ordered->at("body") : nullptr;
    const auto msgs =
        written != nullptr ? written->find("messages") : nlohmann::ordered_json::const_iterator();
    ParseMessages(*body, written != nullptr && msgs != written->end() ? &*msgs : nullptr, req);
    ParseToolFields(*body, written, req);
    ParseTemplateKwargs(*body, written, req);
    ParseTurnFields(*body, req);
  } else {
    ParsePrompt(*body, req);
  }
  ParseSampling(*body, req);
  ParsePenalties(*body, req);
  ParseLogprobs(*body, req);
  ParseConditional(*body, ordered, req);
  // OpenAI's (and vLLM's) default for completions; chat defaults to "up to the context".
  if (req->endpoint == Endpoint::kCompletions && !req->max_tokens) req->max_tokens = 16;
}

// The offset of the first bracket that opens level `limit` + 1 of nesting in JSON text (brackets
// inside strings do not count), or -1. A linear scan before parsing: a line of millions of '['
// would otherwise become millions of nested values (hundreds of MB) before it is refused.
int64_t TooDeep(std::string_view text, int limit) {
  JsonBracketScan scan;
  int depth = 0;
  for (size_t i = 0; i < text.size(); ++i)
    if ((depth += scan.Step(text[i])) > limit) return static_cast<int64_t>(i);
  return -1;
}

// "[json.exception.parse_error.101] parse error at line 1, column 5: syntax error ..." ->
// "column 5: syntax error ..." (the line is always 1: the text is one line of the file).
std::string ParseErrorText(std::string_view text) {
  try {
    const json discarded = json::parse(text);
    (void)discarded;
  } catch (const json::exception& e) {
    std::string m = e.what();
    const size_t bracket = m.find("] ");
    if (m.rfind("[json.exception.", 0) == 0 && bracket != std::string::npos)
      m.erase(0, bracket + 2);
    for (const char* prefix : {"parse error at line 1, ", "parse error at "}) {
      if (m.rfind(prefix, 0) == 0) {
        m.erase(0, std::string(prefix).size());
        break;
      }
    }
    return m;
  } catch (...) {
  }
  return "malformed";
}

}  // namespace

std::string ParamOfField(const std::string& field) {
  return field.rfind("body.", 0) == 0 ? field.substr(5) : field;
}

const std::vector<FieldRule>& BodyFieldRules() {
  using U = FieldUse;
  static const std::vector<FieldRule> rules = {
      {"model", true, true, U::kHonoured,
       "the job's (one per file): workers serving it run it; the output names the model that ran"},
      {"messages", true, false, U::kHonoured, "the conversation"},
      {"prompt", false, true, U::kHonoured, "a string or token ids"},
      {"max_tokens", true, true, U::kHonoured, "completion budget"},
      {"max_completion_tokens", true, true, U::kHonoured, "completion budget (wins)"},
      {"temperature", true, true, U::kHonoured, "[0, 2]"},
      {"top_p", true, true, U::kHonoured, "(0, 1]"},
      {"n", true, true, U::kHonoured, "[1, 128] samples"},
      {"stop", true, true, U::kHonoured, "up to 4 strings"},
      {"seed", true, true, U::kHonoured, "the request's random stream"},
      {"stream", true, true, U::kHonoured, "false only"},
      {"presence_penalty", true, true, U::kHonoured, "[-2, 2]"},
      {"frequency_penalty", true, true, U::kHonoured, "[-2, 2]"},
      {"logit_bias", true, true, U::kHonoured, "token id -> [-100, 100]"},
      {"logprobs", true, true, U::kHonoured, "chat: true/false; completions: 0-5"},
      {"top_logprobs", true, false, U::kHonoured, "0-20, with logprobs: true"},
      {"response_format", true, true, U::kHonoured,
       "text, json_object, json_schema (structured outputs)"},
      {"modalities", true, false, U::kHonoured, "[\"text\"] only"},
      {"tools", true, false, U::kHonoured, "function tools, given to the chat template"},
      {"tool_choice", true, false, U::kHonoured,
       "\"none\", \"auto\", \"required\" or a named function (calls enforced)"},
      {"parallel_tool_calls", true, false, U::kHonoured, "a boolean, with tools"},
      {"echo", false, true, U::kHonoured, "false only"},
      {"suffix", false, true, U::kHonoured, "\"\" only"},
      {"best_of", false, true, U::kHonoured, "equal to n only"},
      // vLLM's extensions.
      {"top_k", true, true, U::kHonoured, "vLLM: -1/0 off"},
      {"min_p", true, true, U::kHonoured, "vLLM: [0, 1]"},
      {"ignore_eos", true, true, U::kHonoured, "vLLM"},
      {"repetition_penalty", true, true, U::kHonoured, "vLLM: > 0"},
      {"min_tokens", true, true, U::kHonoured, "vLLM"},
      {"stop_token_ids", true, true, U::kHonoured, "vLLM"},
      {"add_generation_prompt", true, false, U::kHonoured,
       "vLLM: the assistant turn's opening ends the prompt (true, the default)"},
      {"continue_final_message", true, false, U::kHonoured,
       "vLLM: the final message is continued (with add_generation_prompt false)"},
      {"structured_outputs", true, true, U::kHonoured,
       "vLLM: {json | json_object | regex | choice | grammar}"},
      {"guided_json", true, true, U::kHonoured, "vLLM (older): a JSON Schema"},
      {"guided_regex", true, true, U::kHonoured, "vLLM (older): a regular expression"},
      {"guided_choice", true, true, U::kHonoured, "vLLM (older): a list of strings"},
      {"guided_decoding_backend", true, true, U::kIgnored, "vLLM: llmq has one grammar engine"},
      {"guided_grammar", true, true, U::kHonoured, "vLLM (older): a GBNF or Lark grammar"},
      {"grammar", true, true, U::kHonoured, "llama.cpp's server: a GBNF grammar (or Lark)"},
      {"guided_whitespace_pattern", true, true, U::kRefused,
       "llmq's JSON grammars fix their whitespace"},
      {"chat_template_kwargs", true, false, U::kHonoured,
       "vLLM: the chat template's further variables ({\"enable_thinking\": false})"},
      // What OpenAI accepts without changing the completion.
      {"user", true, true, U::kIgnored, "an end-user id for abuse monitoring"},
      {"metadata", true, false, U::kIgnored, "stored-completion tags"},
      {"store", true, false, U::kIgnored, "OpenAI's stored completions"},
      {"service_tier", true, true, U::kIgnored, "OpenAI's processing tier"},
      {"prompt_cache_key", true, false, U::kIgnored, "OpenAI's cache routing hint"},
      {"safety_identifier", true, false, U::kIgnored, "an end-user id for abuse monitoring"},
      // Refused: they would change what is generated in ways llmq does not implement.
      {"functions", true, false, U::kRefused, "llmq does not call functions"},
      {"function_call", true, false, U::kRefused, "llmq does not call functions"},
      {"stream_options", true, true, U::kRefused, "a batch job cannot stream"},
      {"audio", true, false, U::kRefused, "llmq generates text only"},
      {"prediction", true, false, U::kRefused, "llmq has no predicted outputs"},
      {"reasoning_effort", true, false, U::kRefused, "llmq has no reasoning-effort control"},
      {"verbosity", true, false, U::kRefused, "llmq has no verbosity control"},
      {"web_search_options", true, false, U::kRefused, "llmq does not search the web"},
  };
  return rules;
}

namespace {

// A JSON list given on the command line, read as the body's `key` by `parse` (which throws
// LineError at the first problem).
template <typename Parse>
Status ParseFlagList(std::string_view text, const std::string& what, const char* key, Parse parse) {
  const nlohmann::ordered_json ordered =
      nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (ordered.is_discarded())
    return Status::InvalidArgument(what + ": invalid JSON: " + ParseErrorText(text));
  try {
    const nlohmann::ordered_json body = {{key, ordered}};
    parse(json::parse(body.dump()), body);
  } catch (const LineError& e) {
    return Status::InvalidArgument(what + ": " + e.message);
  } catch (const std::exception& e) {  // not expected: every access is type-checked
    return Status::InvalidArgument(what + ": cannot read " + key + ": " + e.what());
  }
  return Status::Ok();
}

}  // namespace

Status ParseChatMessages(std::string_view text, const std::string& what,
                         std::vector<ChatMessage>* out) {
  out->clear();
  BatchRequest req;
  LLMQ_RETURN_IF_ERROR(ParseFlagList(
      text, what, "messages", [&](const json& body, const nlohmann::ordered_json& ordered) {
        ParseMessages(body, &ordered.at("messages"),
                      &req);  // throws LineError: caught in ParseFlagList
      }));
  *out = std::move(req.messages);
  return Status::Ok();
}

Status ParseChatTools(std::string_view text, const std::string& what, std::vector<ToolDef>* out) {
  out->clear();
  return ParseFlagList(text, what, "tools",
                       [&](const json& body, const nlohmann::ordered_json& ordered) {
                         ParseTools(body.at("tools"), &ordered.at("tools"),
                                    out);  // throws LineError: caught in ParseFlagList
                       });
}

Status ParseChatTemplateKwargs(std::string_view text, const std::string& what, std::string* out) {
  out->clear();
  return ParseFlagList(text, what, "chat_template_kwargs",
                       [&](const json& body, const nlohmann::ordered_json& ordered) {
                         BatchRequest req;
                         ParseTemplateKwargs(body, &ordered, &req);  // throws LineError
                         *out = std::move(req.chat_template_kwargs);
                       });
}

BatchRequest ParseBatchLine(std::string_view text, int line, const std::string& file) {
  BatchRequest req;
  req.line = line;
  const std::string where = (file.empty() ? "line " : file + ":") + std::to_string(line) + ": ";
  try {
    if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) {
      req.error = where + "empty line (expected a JSON object)";
      return req;
    }
    if (const int64_t at = TooDeep(text, kMaxJsonDepth); at >= 0) {
      req.error = where + "nested deeper than " + std::to_string(kMaxJsonDepth) +
                  " levels at column " + std::to_string(at + 1) + " (no request is): not parsed";
      return req;
    }
    const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) {
      req.error = where + "invalid JSON: " + ParseErrorText(text);
      return req;
    }
    if (!j.is_object()) {
      req.error = where + "expected a JSON object, " + Got(j);
      return req;
    }
    // custom_id first, so that it is kept whatever else is wrong.
    const json* id = Find(j, "custom_id");
    if (!id) {
      req.error = where + "field 'custom_id' is missing (expected a non-empty string)";
      req.error_param = "custom_id";
    } else if (!id->is_string() || id->get_ref<const std::string&>().empty()) {
      req.error = where + "field 'custom_id' must be a non-empty string, " + Got(*id);
      req.error_param = "custom_id";
    } else {
      req.custom_id = id->get<std::string>();
    }
    // A schema's key order is its properties' order, and the template gets tools and tool calls
    // as written: the line is read again keeping the order, when it carries any of them.
    nlohmann::ordered_json ordered;
    if (const json* body = Find(j, "body"); body && body->is_object() && NeedsOrder(*body))
      ordered = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
    try {
      ParseRest(j, ordered.is_object() ? &ordered : nullptr, &req);
    } catch (const LineError& e) {
      if (req.error.empty()) {
        req.error = where + e.message;
        req.error_param = ParamOfField(e.field);
      }
    }
  } catch (const std::exception& e) {
    // Not expected (every access is type-checked): refuse the line rather than throw.
    if (req.error.empty()) req.error = where + "cannot read the request: " + e.what();
  } catch (...) {
    if (req.error.empty()) req.error = where + "cannot read the request";
  }
  return req;
}

}  // namespace llmq::jobs
