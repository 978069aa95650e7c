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
constexpr const char* kResponsesUrl = "/v1/responses";

const char* UrlOf(Endpoint e) {
  return e == Endpoint::kChatCompletions ? kChatUrl
         : e == Endpoint::kCompletions   ? kCompletionsUrl
                                         : kResponsesUrl;
}
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
// `flat`: the Responses API's shape, the function's fields beside "type" ({"type": "function",
// "name", ...}); its ToolDef::json is still the chat shape, which the templates read.
void ParseTools(const json& v, const nlohmann::ordered_json* ordered, bool flat,
                std::vector<ToolDef>* out) {
  const std::string field = "body.tools";
  const char* shape =
      flat ? "{\"type\": \"function\", \"name\", \"description\", \"parameters\"}"
           : "{\"type\": \"function\", \"function\": {\"name\", \"description\", \"parameters\"}}";
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
    const json* fn = &t;
    std::string ff = tf;  // the function's fields are ff + ".name", ...
    if (flat) {
      OnlyKeys(t, tf, {"type", "name", "description", "parameters", "strict"});
    } else {
      OnlyKeys(t, tf, {"type", "function"});
      fn = Find(t, "function");
      ff = tf + ".function";
      if (!fn) Missing(ff, "expected {\"name\", \"description\", \"parameters\"}");
      if (!fn->is_object())
        Fail(ff, "must be an object {\"name\", \"description\", \"parameters\"}", *fn);
      OnlyKeys(*fn, ff, {"name", "description", "parameters", "strict"});
    }
    ToolDef def;
    const json* name = Find(*fn, "name");
    if (!name) Missing(ff + ".name", "expected a name of a-z, A-Z, 0-9, _ and -, up to 64");
    if (!name->is_string() || !NameOk(name->get_ref<const std::string&>()))
      Fail(ff + ".name", "must be a name of a-z, A-Z, 0-9, _ and -, up to 64 characters", *name);
    def.name = name->get<std::string>();
    for (size_t k = 0; k < out->size(); ++k)
      if ((*out)[k].name == def.name)
        Fail(ff + ".name",
             "repeats the name of body.tools[" + std::to_string(k) + "] (names must be unique)",
             *name);
    if (const json* d = Find(*fn, "description")) {
      if (!d->is_string()) Fail(ff + ".description", "must be a string", *d);
      def.description = d->get<std::string>();
    }
    const nlohmann::ordered_json* written = ordered != nullptr ? &ordered->at(i) : nullptr;
    const nlohmann::ordered_json* written_fn = written == nullptr ? nullptr
                                               : flat             ? written
                                                                  : &written->at("function");
    if (const json* p = Find(*fn, "parameters")) {
      if (!p->is_object()) Fail(ff + ".parameters", "must be a JSON Schema object", *p);
      def.parameters = Written(*p, written_fn != nullptr ? &written_fn->at("parameters") : nullptr);
    }
    if (const json* strict = Find(*fn, "strict")) def.strict = Flag(*strict, ff + ".strict");
    if (flat) {  // the chat shape: {"type": "function", "function": {the rest, as written}}
      nlohmann::ordered_json f =
          written != nullptr ? *written : nlohmann::ordered_json::parse(t.dump());
      f.erase("type");
      def.json = nlohmann::ordered_json{{"type", "function"}, {"function", std::move(f)}}.dump();
    } else {
      def.json = Written(t, written);
    }
    out->push_back(std::move(def));
  }
}

// A reference to a function tool at `field` (a named tool_choice, an allowed_tools entry): chat's
// {"type": "function", "function": {"name"}}, or with `flat` the Responses API's {"type":
// "function", "name"}; its name, which must be one of `tools` when there are any (without tools,
// the caller refuses the whole tool_choice).
std::string FunctionRef(const json& v, const std::string& field, bool flat,
                        const std::vector<ToolDef>& tools) {
  if (!v.is_object()) Fail(field, "must be an object naming a function tool", v);
  const json* type = Find(v, "type");
  if (!type) Missing(field + ".type", "expected \"function\"");
  if (*type != "function")
    Fail(field + ".type", "must be \"function\" (llmq offers function tools only)", *type);
  const json* fn = &v;
  std::string ff = field;
  if (flat) {
    OnlyKeys(v, field, {"type", "name"});
  } else {
    OnlyKeys(v, field, {"type", "function"});
    ff += ".function";
    fn = Find(v, "function");
    if (!fn) Missing(ff, "expected {\"name\": ...}");
    if (!fn->is_object()) Fail(ff, "must be an object {\"name\": ...}", *fn);
    OnlyKeys(*fn, ff, {"name"});
  }
  const json* name = Find(*fn, "name");
  if (!name) Missing(ff + ".name", "expected the name of one of body.tools");
  if (!name->is_string()) Fail(ff + ".name", "must be a string", *name);
  const std::string n = name->get<std::string>();
  if (!tools.empty() &&
      std::none_of(tools.begin(), tools.end(), [&](const ToolDef& t) { return t.name == n; }))
    Fail(ff + ".name", "must name one of body.tools", *name);
  return n;
}

// body.tool_choice {"type": "allowed_tools", ...}: chat's {"allowed_tools": {"mode", "tools":
// [{"type": "function", "function": {"name"}}]}}, or with `flat` the Responses API's {"mode",
// "tools": [{"type": "function", "name"}]}; each name among req->tools (read before).
void ParseAllowedTools(const json& v, bool flat, BatchRequest* req) {
  std::string field = "body.tool_choice";
  const json* spec = &v;
  if (flat) {
    OnlyKeys(v, field, {"type", "mode", "tools"});
  } else {
    OnlyKeys(v, field, {"type", "allowed_tools"});
    field += ".allowed_tools";
    spec = Find(v, "allowed_tools");
    if (!spec) Missing(field, "expected {\"mode\", \"tools\"}");
    if (!spec->is_object()) Fail(field, "must be an object {\"mode\", \"tools\"}", *spec);
    OnlyKeys(*spec, field, {"mode", "tools"});
  }
  const json* mode = Find(*spec, "mode");
  if (!mode) Missing(field + ".mode", "expected \"auto\" or \"required\"");
  if (*mode != "auto" && *mode != "required")
    Fail(field + ".mode", "must be \"auto\" or \"required\"", *mode);
  req->tool_choice = *mode == "auto" ? ToolChoice::kAuto : ToolChoice::kRequired;
  const json* tools = Find(*spec, "tools");
  if (!tools) Missing(field + ".tools", "expected the tools the model may call");
  if (!tools->is_array() || tools->empty())
    Fail(field + ".tools", "must be a non-empty list of the tools the model may call", *tools);
  for (size_t i = 0; i < tools->size(); ++i) {
    const std::string n =
        FunctionRef((*tools)[i], field + ".tools[" + std::to_string(i) + "]", flat, req->tools);
    if (std::find(req->allowed_tools.begin(), req->allowed_tools.end(), n) ==
        req->allowed_tools.end())
      req->allowed_tools.push_back(n);
  }
}

// body.tools, tool_choice and parallel_tool_calls (chat; `flat`: the Responses API's shapes,
// tools as ParseTools reads them and a named function as {"type": "function", "name"}).
void ParseToolFields(const json& body, const nlohmann::ordered_json* ordered, bool flat,
                     BatchRequest* req) {
  if (const json* v = Find(body, "tools"))
    ParseTools(*v, ordered != nullptr ? &ordered->at("tools") : nullptr, flat, &req->tools);
  const bool tools = !req->tools.empty();
  req->tool_choice = tools ? ToolChoice::kAuto : ToolChoice::kNone;
  if (const json* v = Find(body, "tool_choice")) {
    const std::string field = "body.tool_choice";
    const char* forms =
        flat ? "must be \"none\", \"auto\", \"required\", {\"type\": \"function\", \"name\": ...} "
               "or {\"type\": \"allowed_tools\", ...}"
             : "must be \"none\", \"auto\", \"required\", {\"type\": \"function\", \"function\": "
               "{\"name\": ...}} or {\"type\": \"allowed_tools\", ...}";
    if (*v == "none") {
      req->tool_choice = ToolChoice::kNone;
    } else if (*v == "auto") {
      req->tool_choice = ToolChoice::kAuto;
    } else if (*v == "required") {
      req->tool_choice = ToolChoice::kRequired;
    } else if (v->is_object() && Find(*v, "type") != nullptr &&
               *Find(*v, "type") == "allowed_tools") {
      ParseAllowedTools(*v, flat, req);
    } else if (v->is_object()) {
      const json* type = Find(*v, "type");
      if (!type) Missing(field + ".type", "expected \"function\" or \"allowed_tools\"");
      if (*type != "function")
        Fail(field + ".type", "must be \"function\" or \"allowed_tools\"", *type);
      req->tool_choice = ToolChoice::kNamed;
      req->tool_choice_name = FunctionRef(*v, field, flat, req->tools);
    } else {
      Fail(field, forms, *v);
    }
    // The Responses API takes "auto" without tools (its default either way).
    if (!tools && flat && req->tool_choice == ToolChoice::kAuto)
      req->tool_choice = ToolChoice::kNone;
    if (!tools && req->tool_choice != ToolChoice::kNone)
      Fail(field, "is only allowed when body.tools are given (other than \"none\")", *v);
  }
  if (const json* v = Find(body, "parallel_tool_calls")) {
    req->parallel_tool_calls = Flag(*v, "body.parallel_tool_calls");
    // The Responses API takes it without tools (its Response always carries one).
    if (!tools && !flat)
      Fail("body.parallel_tool_calls", "is only allowed when body.tools are given", *v);
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

// An output format at `field` (OpenAI's shapes): {"type": "text"}, {"type": "json_object"}, or
// {"type": "json_schema", "json_schema": {"name", "schema", "strict", "description"}} (chat's
// response_format), those four beside "type" when `flat` (the Responses API's text.format). The
// schema's own key order is read from `written` (the same value from the line read keeping it,
// or null); `v` was parsed with sorted keys.
void ParseFormat(const json& v, const std::string& field, const nlohmann::ordered_json* written,
                 bool flat, BatchRequest* req) {
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
  const json* spec = &v;
  std::string js = field;
  if (flat) {
    OnlyKeys(v, field, {"type", "name", "schema", "strict", "description"});
  } else {
    OnlyKeys(v, field, {"type", "json_schema"});
    js = field + ".json_schema";
    spec = Find(v, "json_schema");
    if (!spec) Missing(js, "expected {\"name\": ..., \"schema\": {...}}");
    if (!spec->is_object()) Fail(js, "must be an object {\"name\": ..., \"schema\": {...}}", *spec);
    OnlyKeys(*spec, js, {"name", "schema", "strict", "description"});
    if (written != nullptr) written = &written->at("json_schema");
  }
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
  req->json_schema = written != nullptr ? written->at("schema").dump() : schema->dump();
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
  if (const json* v = Find(body, "response_format"))
    ParseFormat(*v, "body.response_format",
                ordered != nullptr ? &ordered->at("body").at("response_format") : nullptr,
                /*flat=*/false, req);
  ParseVllmStructured(body, ordered, req);
  if (req->response_format != ResponseFormat::kText) {
    const std::string what =
        req->structured_field == "body.response_format"
            ? "response_format " + Find(body, "response_format")->at("type").get<std::string>()
        : req->structured_field == "body.text.format"
            ? "text.format " + body.at("text").at("format").at("type").get<std::string>()
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

ChatMessage Message(std::string role, std::string content) {
  ChatMessage m;
  m.role = std::move(role);
  m.content = std::move(content);
  return m;
}

// The text of a Responses API content list at `field`: a string, or parts of the types `types`
// ("input_text", "output_text", "reasoning_text", "summary_text"), their texts joined with "\n" as
// chat's parts are.
std::string PartsText(const json& v, const std::string& field,
                      std::initializer_list<const char*> types) {
  if (v.is_string()) return v.get<std::string>();
  std::string kinds;
  for (const char* t : types) kinds += std::string(kinds.empty() ? "" : " or ") + "\"" + t + "\"";
  if (!v.is_array())
    Fail(field, "must be a string or a list of {\"type\": " + kinds + ", \"text\": ...} parts", v);
  std::string text;
  for (size_t i = 0; i < v.size(); ++i) {
    const json& part = v[i];
    const std::string pf = field + "[" + std::to_string(i) + "]";
    if (!part.is_object()) Fail(pf, "must be an object {\"type\": " + kinds + ", \"text\"}", part);
    const json* type = Find(part, "type");
    if (!type) Missing(pf + ".type", "expected " + kinds);
    if (!type->is_string() ||
        std::none_of(types.begin(), types.end(), [&](const char* t) { return *type == t; }))
      Fail(pf + ".type", "must be " + kinds + " (only text content is supported)", *type);
    OnlyKeys(part, pf, {"type", "text", "annotations", "logprobs"});
    const json* t = Find(part, "text");
    if (!t) Missing(pf + ".text", "expected a string");
    if (!t->is_string()) Fail(pf + ".text", "must be a string", *t);
    if (i > 0) text += '\n';
    text += t->get_ref<const std::string&>();
  }
  return text;
}

// body.input of /v1/responses (after body.instructions, a system message): a string (one user
// message) or a list of items: messages (roles user, system, developer = system, assistant),
// function_call items (joined to the assistant message before them, else an assistant message of
// their own, as the model wrote them: text, then calls), function_call_output items (tool
// messages) and reasoning items (the next assistant message's thought).
void ParseInput(const json& body, BatchRequest* req) {
  const json* in = Find(body, "input");
  const char* forms = "must be a string or a non-empty list of input items";
  if (!in) Missing("body.input", "a responses request needs input: a string or a list of items");
  if (in->is_string()) {
    req->messages.push_back(Message("user", in->get<std::string>()));
    return;
  }
  if (!in->is_array() || in->empty()) Fail("body.input", forms, *in);
  std::optional<std::string> thought;  // a reasoning item's, for the next assistant message
  nlohmann::ordered_json calls;        // the calls of the assistant message being written
  bool calls_join_last = false;        // whether function calls may join req->messages.back()
  auto close_calls = [&] {
    if (calls.empty()) return;
    req->messages.back().tool_calls = calls.dump();
    calls = nlohmann::ordered_json();
  };
  for (size_t i = 0; i < in->size(); ++i) {
    const json& item = (*in)[i];
    const std::string itf = "body.input[" + std::to_string(i) + "]";
    if (!item.is_object()) Fail(itf, "must be an input item (an object)", item);
    const json* type = Find(item, "type");
    if (type != nullptr && !type->is_string()) Fail(itf + ".type", "must be a string", *type);
    const std::string kind = type != nullptr ? type->get<std::string>() : "message";
    if (kind == "function_call") {
      OnlyKeys(item, itf, {"type", "call_id", "name", "arguments", "id", "status"});
      std::string call_id, name;
      for (auto [key, out] : {std::pair{"call_id", &call_id}, std::pair{"name", &name}}) {
        const json* x = Find(item, key);
        if (!x) Missing(itf + "." + key, "expected a string");
        if (!x->is_string()) Fail(itf + "." + key, "must be a string", *x);
        *out = x->get<std::string>();
      }
      const json* args = Find(item, "arguments");
      const std::string af = itf + ".arguments";
      if (!args) Missing(af, "expected the arguments as JSON text");
      if (!args->is_string())
        Fail(af, "must be a string (the arguments object as JSON text)", *args);
      nlohmann::ordered_json parsed = nlohmann::ordered_json::parse(
          args->get_ref<const std::string&>(), nullptr, /*allow_exceptions=*/false);
      if (parsed.is_discarded() || !parsed.is_object())
        Fail(af, "must be a JSON object as text (the function's arguments)", *args);
      if (!calls_join_last) {
        ChatMessage m = Message("assistant", "");
        m.content_null = true;
        m.reasoning = std::move(thought);
        thought.reset();
        req->messages.push_back(std::move(m));
        calls_join_last = true;
      }
      calls.push_back({{"id", call_id},
                       {"type", "function"},
                       {"function", {{"name", name}, {"arguments", std::move(parsed)}}}});
      continue;
    }
    close_calls();
    calls_join_last = false;
    if (kind == "function_call_output") {
      OnlyKeys(item, itf, {"type", "call_id", "output", "id", "status"});
      ChatMessage m = Message("tool", "");
      const json* id = Find(item, "call_id");
      if (!id) Missing(itf + ".call_id", "the call this output answers");
      if (!id->is_string()) Fail(itf + ".call_id", "must be a string", *id);
      m.tool_call_id = id->get<std::string>();
      const json* out = Find(item, "output");
      if (!out) Missing(itf + ".output", "expected the function's output, a string");
      m.content = PartsText(*out, itf + ".output", {"input_text"});
      req->messages.push_back(std::move(m));
    } else if (kind == "reasoning") {
      OnlyKeys(item, itf, {"type", "id", "summary", "content", "encrypted_content", "status"});
      if (const json* e = Find(item, "encrypted_content"))
        Fail(itf + ".encrypted_content",
             "is not supported (llmq cannot read an encrypted thought: give its content)", *e);
      const json* content = Find(item, "content");
      const json* summary = Find(item, "summary");
      std::string text =
          content != nullptr   ? PartsText(*content, itf + ".content", {"reasoning_text"})
          : summary != nullptr ? PartsText(*summary, itf + ".summary", {"summary_text"})
                               : "";
      if (!text.empty()) thought = std::move(text);
    } else if (kind == "message") {
      OnlyKeys(item, itf, {"type", "role", "content", "id", "status", "phase"});
      const json* role = Find(item, "role");
      const char* roles = "\"user\", \"system\", \"developer\" or \"assistant\"";
      if (!role) Missing(itf + ".role", std::string("expected ") + roles);
      if (*role != "user" && *role != "system" && *role != "developer" && *role != "assistant")
        Fail(itf + ".role", std::string("must be ") + roles, *role);
      ChatMessage m = Message(*role == "developer" ? "system" : role->get<std::string>(), "");
      const json* content = Find(item, "content");
      if (!content) Missing(itf + ".content", "expected a string or a list of text parts");
      m.content = PartsText(*content, itf + ".content", {"input_text", "output_text"});
      if (m.role == "assistant") {
        m.reasoning = std::move(thought);
        thought.reset();
        calls_join_last = true;
      }
      req->messages.push_back(std::move(m));
    } else {
      Fail(itf + ".type",
           "is not supported (llmq reads message, function_call, function_call_output and "
           "reasoning items)",
           *type);
    }
  }
  close_calls();
}

// body.text of /v1/responses: {"format": ..., "verbosity"}, its format read as response_format is
// (ParseFormat, flat).
void ParseTextFormat(const json& body, const nlohmann::ordered_json* written, BatchRequest* req) {
  const json* text = Find(body, "text");
  if (!text) return;
  if (!text->is_object()) Fail("body.text", "must be an object {\"format\": {...}}", *text);
  OnlyKeys(*text, "body.text", {"format", "verbosity"});
  if (const json* v = Find(*text, "verbosity"); v && *v != "medium")
    Fail("body.text.verbosity",
         "is not supported except \"medium\" (llmq has no verbosity control)", *v);
  const json* f = Find(*text, "format");
  if (!f) return;
  req->structured_field = "body.text.format";
  ParseFormat(*f, req->structured_field,
              written != nullptr ? &written->at("text").at("format") : nullptr, /*flat=*/true, req);
}

// The rest of /v1/responses' own fields: max_output_tokens, include and top_logprobs (logprobs,
// as vLLM reads them: written when include names message.output_text.logprobs), reasoning,
// truncation, background, metadata. Run before ParseSampling and ParsePenalties.
void ParseResponsesFields(const json& body, BatchRequest* req) {
  if (const json* v = Find(body, "max_output_tokens"))
    req->max_tokens =
        static_cast<int>(IntIn(*v, "body.max_output_tokens", 1, std::numeric_limits<int>::max(),
                               "must be a positive integer"));
  bool logprobs = false;
  if (const json* v = Find(body, "include")) {
    if (!v->is_array()) Fail("body.include", "must be a list of strings", *v);
    for (size_t i = 0; i < v->size(); ++i) {
      if ((*v)[i] != "message.output_text.logprobs")
        Fail("body.include[" + std::to_string(i) + "]",
             "is not supported (llmq includes \"message.output_text.logprobs\" only)", (*v)[i]);
      logprobs = true;
    }
  }
  int top = 0;
  if (const json* v = Find(body, "top_logprobs"))
    top = static_cast<int>(
        IntIn(*v, "body.top_logprobs", 0, kMaxTopLogprobs, "must be an integer in [0, 20]"));
  if (logprobs) req->logprobs = top;
  if (const json* v = Find(body, "reasoning")) {
    if (!v->is_object()) Fail("body.reasoning", "must be an object {\"effort\", \"summary\"}", *v);
    for (const auto& [key, x] : v->items()) {
      if (x.is_null()) continue;
      Fail("body.reasoning." + key,
           key == "effort" ? "is not supported (llmq has no reasoning-effort control)"
           : key == "summary" || key == "generate_summary"
               ? "is not supported (llmq writes no reasoning summaries; a thought comes back whole "
                 "with a reasoning parser)"
               : "is not supported (not a field of body.reasoning llmq knows)",
           x);
    }
  }
  if (const json* v = Find(body, "truncation"); v && *v != "disabled")
    Fail("body.truncation",
         "is not supported except \"disabled\" (llmq refuses a prompt too long, it does not cut "
         "it)",
         *v);
  if (const json* v = Find(body, "background"); v && Flag(*v, "body.background"))
    Fail("body.background", "must be false (a batch line runs with its batch)", *v);
  if (const json* v = Find(body, "metadata"); v && !v->is_object())
    Fail("body.metadata", "must be an object of string values", *v);
}

// What the Response repeats of a /v1/responses request (BatchRequest::responses_echo), in the
// Response's shapes; run once the request is read.
std::string ResponsesEcho(const json& body, const nlohmann::ordered_json* written,
                          const BatchRequest& req) {
  using ojson = nlohmann::ordered_json;
  auto as_written = [&](const char* key) -> ojson {
    const json* v = Find(body, key);
    if (v == nullptr) return nullptr;
    return written != nullptr ? written->at(key) : ojson::parse(v->dump());
  };
  ojson e;
  e["instructions"] = as_written("instructions");
  e["max_output_tokens"] = req.max_tokens ? ojson(*req.max_tokens) : ojson(nullptr);
  e["metadata"] = as_written("metadata");
  e["parallel_tool_calls"] = req.parallel_tool_calls;
  e["reasoning"] = {{"effort", nullptr}, {"summary", nullptr}};
  e["temperature"] = req.temperature;
  ojson format = {{"type", "text"}};
  if (const json* t = Find(body, "text"); t != nullptr && Find(*t, "format") != nullptr)
    format = written != nullptr ? written->at("text").at("format")
                                : ojson::parse(t->at("format").dump());
  e["text"] = {{"format", std::move(format)}};
  switch (req.tool_choice) {
    case ToolChoice::kNone:
      e["tool_choice"] = "none";
      break;
    case ToolChoice::kAuto:
    case ToolChoice::kRequired:
      e["tool_choice"] = req.tool_choice == ToolChoice::kAuto ? "auto" : "required";
      if (!req.allowed_tools.empty()) {
        ojson allowed = ojson::array();
        for (const std::string& name : req.allowed_tools)
          allowed.push_back({{"type", "function"}, {"name", name}});
        e["tool_choice"] = {{"type", "allowed_tools"},
                            {"mode", std::move(e["tool_choice"])},
                            {"tools", std::move(allowed)}};
      }
      break;
    case ToolChoice::kNamed:
      e["tool_choice"] = {{"type", "function"}, {"name", req.tool_choice_name}};
      break;
  }
  ojson tools = ojson::array();
  for (size_t i = 0; i < req.tools.size(); ++i) {
    // OpenAI's shape: every field present, strict true unless the request said otherwise.
    const ToolDef& t = req.tools[i];
    const json* strict = Find(body.at("tools").at(i), "strict");
    tools.push_back(
        {{"type", "function"},
         {"name", t.name},
         {"description", t.description.empty() ? ojson(nullptr) : ojson(t.description)},
         {"parameters", t.parameters.empty() ? ojson(nullptr) : ojson::parse(t.parameters)},
         {"strict", strict != nullptr ? strict->get<bool>() : true}});
  }
  e["tools"] = std::move(tools);
  e["top_logprobs"] = req.logprobs >= 0 ? req.logprobs : 0;
  e["top_p"] = req.top_p;
  e["truncation"] = "disabled";
  return e.dump();
}

// Every non-null field of the body is honoured, ignored as OpenAI ignores it, or refused by name.
void CheckBodyFields(const json& body, Endpoint endpoint) {
  for (const auto& [key, value] : body.items()) {
    if (value.is_null()) continue;
    const FieldRule* rule = nullptr;
    for (const FieldRule& r : BodyFieldRules())
      if (key == r.name && (endpoint == Endpoint::kChatCompletions ? r.chat
                            : endpoint == Endpoint::kCompletions   ? r.completions
                                                                   : r.responses))
        rule = &r;
    const std::string field = "body." + key;
    if (!rule)
      Fail(field,
           std::string("is not supported (not a field llmq knows for ") + UrlOf(endpoint) +
               "; the README lists them)",
           value);
    if (rule->use == FieldUse::kRefused)
      Fail(field, std::string("is not supported: ") + rule->why, value);
  }
}

// Whether the body carries what is kept in the order written: a JSON schema, tools, tool calls,
// chat template variables.
bool NeedsOrder(const json& line, const json& body) {
  // A Response repeats its request's tools, schema and metadata as written.
  if (const json* url = Find(line, "url"); url && *url == kResponsesUrl) return true;
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
  const std::string supported =
      std::string("supported: ") + kChatUrl + ", " + kCompletionsUrl + ", " + kResponsesUrl;
  if (!url) Missing("url", supported);
  if (!url->is_string()) Fail("url", "must be a string (" + supported + ")", *url);
  const std::string& u = url->get_ref<const std::string&>();
  if (u == kChatUrl) {
    req->endpoint = Endpoint::kChatCompletions;
  } else if (u == kCompletionsUrl) {
    req->endpoint = Endpoint::kCompletions;
  } else if (u == kResponsesUrl) {
    req->endpoint = Endpoint::kResponses;
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
    ParseToolFields(*body, written, /*flat=*/false, req);
    ParseTemplateKwargs(*body, written, req);
    ParseTurnFields(*body, req);
  } else if (req->endpoint == Endpoint::kResponses) {
    const nlohmann::ordered_json* written = ordered != nullptr ? &ordered->at("body") : nullptr;
    if (const json* v = Find(*body, "instructions")) {
      if (!v->is_string())
        Fail("body.instructions", "must be a string (a system message before the input)", *v);
      req->messages.push_back(Message("system", v->get<std::string>()));
    }
    ParseInput(*body, req);
    ParseToolFields(*body, written, /*flat=*/true, req);
    ParseTemplateKwargs(*body, written, req);
    ParseTextFormat(*body, written, req);
    ParseResponsesFields(*body, req);
  } else {
    ParsePrompt(*body, req);
  }
  ParseSampling(*body, req);
  ParsePenalties(*body, req);
  if (req->endpoint != Endpoint::kResponses) ParseLogprobs(*body, req);
  ParseConditional(*body, ordered, req);
  if (req->endpoint == Endpoint::kResponses)
    req->responses_echo =
        ResponsesEcho(*body, ordered != nullptr ? &ordered->at("body") : nullptr, *req);
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

std::string FieldOn(Endpoint e, const std::string& chat_field) {
  if (e != Endpoint::kResponses) return chat_field;
  if (chat_field.rfind("body.messages", 0) == 0) return "body.input";
  if (chat_field == "body.max_tokens") return "body.max_output_tokens";
  const std::string fn = "].function.";
  if (const size_t at = chat_field.find(fn);
      chat_field.rfind("body.tools[", 0) == 0 && at != std::string::npos)
    return chat_field.substr(0, at + 1) + chat_field.substr(at + fn.size() - 1);
  return chat_field;
}

std::string ParamOfField(const std::string& field) {
  return field.rfind("body.", 0) == 0 ? field.substr(5) : field;
}

const std::vector<FieldRule>& BodyFieldRules() {
  using U = FieldUse;
  static const std::vector<FieldRule> rules = {
      {"model", true, true, true, U::kHonoured,
       "the job's (one per file): workers serving it run it; the output names the model that ran"},
      {"messages", true, false, false, U::kHonoured, "the conversation"},
      {"prompt", false, true, false, U::kHonoured, "a string or token ids"},
      {"max_tokens", true, true, false, U::kHonoured, "completion budget"},
      {"max_completion_tokens", true, true, false, U::kHonoured, "completion budget (wins)"},
      {"temperature", true, true, true, U::kHonoured, "[0, 2]"},
      {"top_p", true, true, true, U::kHonoured, "(0, 1]"},
      {"n", true, true, false, U::kHonoured, "[1, 128] samples"},
      {"stop", true, true, true, U::kHonoured, "up to 4 strings"},
      {"seed", true, true, true, U::kHonoured, "the request's random stream"},
      {"stream", true, true, true, U::kHonoured, "false only"},
      {"presence_penalty", true, true, true, U::kHonoured, "[-2, 2]"},
      {"frequency_penalty", true, true, true, U::kHonoured, "[-2, 2]"},
      {"logit_bias", true, true, true, U::kHonoured, "token id -> [-100, 100]"},
      {"logprobs", true, true, false, U::kHonoured, "chat: true/false; completions: 0-5"},
      {"top_logprobs", true, false, true, U::kHonoured,
       "0-20, with logprobs: true (responses: with include message.output_text.logprobs)"},
      {"response_format", true, true, false, U::kHonoured,
       "text, json_object, json_schema (structured outputs)"},
      {"modalities", true, false, false, U::kHonoured, "[\"text\"] only"},
      {"tools", true, false, true, U::kHonoured, "function tools, given to the chat template"},
      {"tool_choice", true, false, true, U::kHonoured,
       "\"none\", \"auto\", \"required\" or a named function (calls enforced)"},
      {"parallel_tool_calls", true, false, true, U::kHonoured, "a boolean, with tools"},
      {"echo", false, true, false, U::kHonoured, "false only"},
      {"suffix", false, true, false, U::kHonoured, "\"\" only"},
      {"best_of", false, true, false, U::kHonoured, "equal to n only"},
      // vLLM's extensions.
      {"top_k", true, true, true, U::kHonoured, "vLLM: -1/0 off"},
      {"min_p", true, true, true, U::kHonoured, "vLLM: [0, 1]"},
      {"ignore_eos", true, true, true, U::kHonoured, "vLLM"},
      {"repetition_penalty", true, true, true, U::kHonoured, "vLLM: > 0"},
      {"min_tokens", true, true, true, U::kHonoured, "vLLM"},
      {"stop_token_ids", true, true, true, U::kHonoured, "vLLM"},
      {"add_generation_prompt", true, false, false, U::kHonoured,
       "vLLM: the assistant turn's opening ends the prompt (true, the default)"},
      {"continue_final_message", true, false, false, U::kHonoured,
       "vLLM: the final message is continued (with add_generation_prompt false)"},
      {"structured_outputs", true, true, false, U::kHonoured,
       "vLLM: {json | json_object | regex | choice | grammar}"},
      {"guided_json", true, true, false, U::kHonoured, "vLLM (older): a JSON Schema"},
      {"guided_regex", true, true, false, U::kHonoured, "vLLM (older): a regular expression"},
      {"guided_choice", true, true, false, U::kHonoured, "vLLM (older): a list of strings"},
      {"guided_decoding_backend", true, true, false, U::kIgnored,
       "vLLM: llmq has one grammar engine"},
      {"guided_grammar", true, true, false, U::kHonoured, "vLLM (older): a GBNF or Lark grammar"},
      {"grammar", true, true, false, U::kHonoured, "llama.cpp's server: a GBNF grammar (or Lark)"},
      {"guided_whitespace_pattern", true, true, false, U::kRefused,
       "llmq's JSON grammars fix their whitespace"},
      {"chat_template_kwargs", true, false, true, U::kHonoured,
       "vLLM: the chat template's further variables ({\"enable_thinking\": false})"},
      // What OpenAI accepts without changing the completion.
      {"user", true, true, true, U::kIgnored, "an end-user id for abuse monitoring"},
      {"metadata", true, false, false, U::kIgnored, "stored-completion tags"},
      {"store", true, false, true, U::kIgnored, "OpenAI's stored completions"},
      {"service_tier", true, true, true, U::kIgnored, "OpenAI's processing tier"},
      {"prompt_cache_key", true, false, true, U::kIgnored, "OpenAI's cache routing hint"},
      {"safety_identifier", true, false, true, U::kIgnored, "an end-user id for abuse monitoring"},
      // Refused: they would change what is generated in ways llmq does not implement.
      {"functions", true, false, false, U::kRefused, "llmq does not call functions"},
      {"function_call", true, false, false, U::kRefused, "llmq does not call functions"},
      {"stream_options", true, true, true, U::kRefused, "a batch job cannot stream"},
      {"audio", true, false, false, U::kRefused, "llmq generates text only"},
      {"prediction", true, false, false, U::kRefused, "llmq has no predicted outputs"},
      {"reasoning_effort", true, false, false, U::kRefused, "llmq has no reasoning-effort control"},
      {"verbosity", true, false, false, U::kRefused, "llmq has no verbosity control"},
      {"web_search_options", true, false, false, U::kRefused, "llmq does not search the web"},
      // OpenAI's Responses API (/v1/responses).
      {"input", false, false, true, U::kHonoured,
       "the conversation: a string, or message, function_call, function_call_output and "
       "reasoning items"},
      {"instructions", false, false, true, U::kHonoured, "a system message before the input"},
      {"max_output_tokens", false, false, true, U::kHonoured, "completion budget"},
      {"text", false, false, true, U::kHonoured,
       "format: text, json_object, json_schema (structured outputs)"},
      {"include", false, false, true, U::kHonoured, "[\"message.output_text.logprobs\"] only"},
      {"reasoning", false, false, true, U::kHonoured,
       "effort and summary null only (llmq has no reasoning-effort control, writes no summaries)"},
      {"truncation", false, false, true, U::kHonoured, "\"disabled\" only"},
      {"background", false, false, true, U::kHonoured, "false only"},
      {"metadata", false, false, true, U::kIgnored, "tags, repeated in the Response"},
      {"max_tool_calls", false, false, true, U::kIgnored, "a limit on built-in tools' calls"},
      {"prompt_cache_retention", false, false, true, U::kIgnored, "OpenAI's cache retention"},
      {"previous_response_id", false, false, true, U::kRefused,
       "llmq keeps no responses to continue: put the whole conversation in input"},
      {"conversation", false, false, true, U::kRefused,
       "llmq keeps no conversations: put the whole conversation in input"},
      {"prompt", false, false, true, U::kRefused, "llmq has no stored prompt templates"},
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
                         ParseTools(body.at("tools"), &ordered.at("tools"), /*flat=*/false,
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
    if (const json* body = Find(j, "body"); body && body->is_object() && NeedsOrder(j, *body))
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
