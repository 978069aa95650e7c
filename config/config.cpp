// LlmqConfig from YAML (yaml-cpp). Strict: unknown and duplicate keys, wrong types and values out
// of range are errors naming the file, the line and the dotted key.
#include "config/config.h"

#include <fcntl.h>
#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <limits>
#include <set>
#include <string_view>
#include <vector>

#include "base/untrusted_file.h"
#include "config/knobs.h"

namespace llmq {
namespace {

constexpr const char* kChatTemplates[] = {"llama-2", "mistral", "chatml", "zephyr"};
// engine/structured/tool_calls.h's formats (config links nothing of the engine; tool_calls_test
// checks that each is a name ToolCallFormatByName knows).
constexpr const char* kToolCallFormats[] = {"hermes", "llama3_json", "mistral"};
// engine/text/reasoning.h's parsers (reasoning_test checks each against ReasoningFormatByName).
constexpr const char* kReasoningParsers[] = {"qwen3", "deepseek_r1"};

// "file:line: what", or "file: what" when yaml-cpp has no position.
Status ErrorAt(const std::string& file, const YAML::Mark& mark, const std::string& what) {
  std::string loc = file;
  if (!mark.is_null() && mark.line >= 0) loc += ":" + std::to_string(mark.line + 1);
  return Status::InvalidArgument(loc + ": " + what);
}

// What a node is, for "got ..." in messages.
std::string Describe(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Null:
      return "no value";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Scalar:
      return n.Tag() == "!" ? "the quoted string \"" + n.Scalar() + "\"" : "'" + n.Scalar() + "'";
    default:
      return "nothing";
  }
}

// A plain (unquoted) scalar: quoted "16" or "true" is a string, not a number or a boolean.
bool IsPlainScalar(const YAML::Node& n) {
  return n.IsScalar() && n.Tag() != "!";
}

// One key: value pair of the file, with everything a message needs.
struct Leaf {
  const std::string& file;
  YAML::Mark mark;  // the key's position
  std::string key;  // dotted: "engine.block_size"
  YAML::Node value;

  Status Fail(const std::string& what) const { return ErrorAt(file, mark, key + ": " + what); }
};

Status GetString(const Leaf& l, std::string* out) {
  if (!l.value.IsScalar()) return l.Fail("must be a string, got " + Describe(l.value));
  *out = l.value.Scalar();
  return Status::Ok();
}

// One of `names`, or "" (`empty_means` says what it means, for the error).
template <size_t N>
Status GetName(const Leaf& l, const char* const (&names)[N], const char* empty_means,
               std::string* out) {
  std::string name;
  LLMQ_RETURN_IF_ERROR(GetString(l, &name));
  bool known = name.empty();
  std::string list;
  for (const char* n : names) {
    known = known || name == n;
    list += (list.empty() ? "" : ", ") + std::string(n);
  }
  if (!known)
    return l.Fail("must be one of " + list + " (or \"\" " + empty_means + "), got " +
                  Describe(l.value));
  *out = name;
  return Status::Ok();
}

// A path: a non-empty string (*out is left alone on an error).
Status GetPath(const Leaf& l, std::string* out) {
  std::string path;
  LLMQ_RETURN_IF_ERROR(GetString(l, &path));
  if (path.empty()) return l.Fail("must not be empty");
  *out = path;
  return Status::Ok();
}

// A decimal integer in [lo, hi] (YAML 1.2 core: [-+]?[0-9]+).
Status GetInt(const Leaf& l, int64_t lo, int64_t hi, int64_t* out) {
  const std::string range =
      lo == 1 && hi == std::numeric_limits<int>::max()
          ? "a positive integer"
          : "an integer between " + std::to_string(lo) + " and " + std::to_string(hi);
  if (!IsPlainScalar(l.value)) return l.Fail("must be " + range + ", got " + Describe(l.value));
  std::string_view s = l.value.Scalar();
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || v < lo || v > hi) {
    return l.Fail("must be " + range + ", got " + Describe(l.value));
  }
  *out = v;
  return Status::Ok();
}

Status GetInt(const Leaf& l, int lo, int hi, int* out) {
  int64_t v = 0;
  LLMQ_RETURN_IF_ERROR(GetInt(l, int64_t{lo}, int64_t{hi}, &v));
  *out = static_cast<int>(v);
  return Status::Ok();
}

Status GetPositiveInt(const Leaf& l, int* out) {
  return GetInt(l, 1, std::numeric_limits<int>::max(), out);
}

// A positive integer, or auto (0: the backend chooses).
Status GetPositiveIntOrAuto(const Leaf& l, int* out) {
  if (IsPlainScalar(l.value) && l.value.Scalar() == "auto") {
    *out = 0;
    return Status::Ok();
  }
  if (GetPositiveInt(l, out).ok()) return Status::Ok();
  return l.Fail("must be a positive integer or auto, got " + Describe(l.value));
}

// YAML 1.2 core booleans only: yes/no/on/off (YAML 1.1) are rejected rather than guessed at.
Status GetBool(const Leaf& l, bool* out) {
  if (IsPlainScalar(l.value)) {
    const std::string& s = l.value.Scalar();
    if (s == "true" || s == "True" || s == "TRUE") {
      *out = true;
      return Status::Ok();
    }
    if (s == "false" || s == "False" || s == "FALSE") {
      *out = false;
      return Status::Ok();
    }
  }
  return l.Fail("must be true or false, got " + Describe(l.value));
}

// A positive byte size (ParseByteSize); `examples` go into the message.
Status GetByteSize(const Leaf& l, const char* examples, int64_t* out) {
  std::optional<int64_t> bytes;
  if (l.value.IsScalar()) bytes = ParseByteSize(l.value.Scalar());
  if (!bytes || *bytes <= 0)
    return l.Fail(std::string("must be a positive size such as ") + examples + ", got " +
                  Describe(l.value));
  *out = *bytes;
  return Status::Ok();
}

// A number of seconds (decimal, fractions allowed) in [lo, hi].
Status GetSeconds(const Leaf& l, double lo, double hi, double* out) {
  const auto fail = [&] {
    char range[96];
    std::snprintf(range, sizeof range, "a number of seconds between %g and %g", lo, hi);
    return l.Fail(std::string("must be ") + range + ", got " + Describe(l.value));
  };
  if (!IsPlainScalar(l.value)) return fail();
  const std::string& s = l.value.Scalar();
  if (s.empty() || s.find_first_not_of("0123456789.+") != std::string::npos) return fail();
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || !(v >= lo && v <= hi)) return fail();
  *out = v;
  return Status::Ok();
}

// A number in (0, 1], such as 0.9.
Status GetFraction(const Leaf& l, double* out) {
  const auto fail = [&] {
    return l.Fail("must be a number greater than 0 and at most 1, such as 0.9, got " +
                  Describe(l.value));
  };
  if (!IsPlainScalar(l.value)) return fail();
  const std::string& s = l.value.Scalar();
  if (s.empty() || s.find_first_not_of("0123456789.") != std::string::npos) return fail();
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || !(v > 0 && v <= 1)) return fail();
  *out = v;
  return Status::Ok();
}

// One of `names` (a plain string); `parse` turns it into the value.
template <typename T>
Status GetChoice(const Leaf& l, std::initializer_list<const char*> names,
                 bool (*parse)(std::string_view, T*), T* out) {
  std::string list;
  for (const char* n : names) list += (list.empty() ? "" : ", ") + std::string(n);
  if (!l.value.IsScalar() || !parse(l.value.Scalar(), out))
    return l.Fail("must be one of " + list + ", got " + Describe(l.value));
  return Status::Ok();
}

// A key of a section: its name and how to parse its value.
struct Field {
  const char* name;
  std::function<Status(const Leaf&)> parse;
};

std::string KnownKeys(const std::vector<Field>& fields) {
  std::string s;
  for (const Field& f : fields) s += (s.empty() ? "" : ", ") + std::string(f.name);
  return s;
}

// Parses mapping `map` (whose own dotted name is `prefix`, "" at the top) field by field.
Status ParseMap(const std::string& file, const YAML::Node& map, const std::string& prefix,
                const std::vector<Field>& fields) {
  std::set<std::string> seen;
  for (auto it = map.begin(); it != map.end(); ++it) {
    const YAML::Node key = it->first;
    if (!key.IsScalar()) {
      return ErrorAt(
          file, key.Mark(),
          (prefix.empty() ? "" : prefix + ": ") + "keys must be strings, got " + Describe(key));
    }
    const std::string dotted = prefix.empty() ? key.Scalar() : prefix + "." + key.Scalar();
    const Field* field = nullptr;
    for (const Field& f : fields) {
      if (key.Scalar() == f.name) field = &f;
    }
    if (field == nullptr) {
      return ErrorAt(file, key.Mark(),
                     "unknown key '" + dotted + "' (" +
                         (prefix.empty() ? "sections are " : "keys of " + prefix + " are ") +
                         KnownKeys(fields) + ")");
    }
    if (!seen.insert(key.Scalar()).second) {
      return ErrorAt(file, key.Mark(), "duplicate key '" + dotted + "'");
    }
    LLMQ_CHECK(prefix.empty() || IsKnob(dotted));  // every key is in config/knobs.h's table
    LLMQ_RETURN_IF_ERROR(field->parse(Leaf{file, key.Mark(), dotted, it->second}));
  }
  return Status::Ok();
}

// A section's value: a mapping, or nothing at all ("engine:" with every key commented out).
Field Section(const std::string& file, const char* name, std::vector<Field> fields) {
  return Field{name, [&file, fields = std::move(fields)](const Leaf& l) -> Status {
                 if (l.value.IsNull()) return Status::Ok();
                 if (!l.value.IsMap()) {
                   return l.Fail("must be a mapping of keys (" + KnownKeys(fields) + "), got " +
                                 Describe(l.value));
                 }
                 return ParseMap(file, l.value, l.key, fields);
               }};
}

Status ParseRoot(const std::string& text, const std::string& file, LlmqConfig* c) {
  const std::vector<YAML::Node> docs = YAML::LoadAll(text);
  if (docs.size() > 1) {
    return ErrorAt(file, docs[1].Mark(), "only one YAML document is allowed, found a second");
  }
  if (docs.empty() || docs[0].IsNull()) return Status::Ok();  // empty, or comments only
  const YAML::Node& root = docs[0];
  if (!root.IsMap()) {
    return ErrorAt(file, root.Mark(),
                   "the top level must be a mapping of sections (model, engine, spool), got " +
                       Describe(root));
  }

  std::vector<Field> model = {
      {"path", [c](const Leaf& l) { return GetString(l, &c->model_dir); }},
      {"name", [c](const Leaf& l) { return GetString(l, &c->model_name); }},
      {"served_names",
       [c](const Leaf& l) -> Status {
         if (l.value.IsNull()) return Status::Ok();
         if (!l.value.IsSequence())
           return l.Fail("must be a list such as [\"llama-3.1-8b\"], got " + Describe(l.value));
         std::vector<std::string> names;
         for (const YAML::Node& n : l.value) {
           if (!n.IsScalar() || n.Scalar().empty() || n.Scalar().size() > 200)
             return ErrorAt(
                 l.file, n.Mark(),
                 l.key + ": each name must be a string of 1 to 200 bytes, got " + Describe(n));
           names.push_back(n.Scalar());
         }
         c->served_names = std::move(names);
         return Status::Ok();
       }},
      {"chat_template",
       [c](const Leaf& l) {
         return GetName(l, kChatTemplates, "for the model's own", &c->chat_template);
       }},
      {"tool_call_format",
       [c](const Leaf& l) {
         return GetName(l, kToolCallFormats, "to recognise it from the chat template",
                        &c->tool_call_format);
       }},
      {"reasoning_parser",
       [c](const Leaf& l) {
         return GetName(l, kReasoningParsers, "for none", &c->reasoning_parser);
       }},
  };
  std::vector<Field> engine = {
      {"block_size",
       [c](const Leaf& l) -> Status {
         int64_t v = 0;
         if (!GetInt(l, 1, 256, &v).ok() || (v & (v - 1)) != 0) {
           return l.Fail("must be a power of two between 1 and 256, got " + Describe(l.value));
         }
         c->block_size = static_cast<int>(v);
         return Status::Ok();
       }},
      {"max_num_seqs", [c](const Leaf& l) { return GetPositiveIntOrAuto(l, &c->max_num_seqs); }},
      {"max_num_batched_tokens",
       [c](const Leaf& l) { return GetPositiveIntOrAuto(l, &c->max_num_batched_tokens); }},
      {"kv_cache_memory",
       [c](const Leaf& l) {
         if (l.value.IsScalar() && l.value.Scalar() == "auto") {
           c->kv_cache_bytes = 0;
           return Status::Ok();
         }
         return GetByteSize(l, "4GiB, 512MB, 1073741824 or auto", &c->kv_cache_bytes);
       }},
      {"enable_prefix_caching",
       [c](const Leaf& l) { return GetBool(l, &c->enable_prefix_caching); }},
      {"enable_planner", [c](const Leaf& l) { return GetBool(l, &c->enable_planner); }},
      {"shared_prefix_attention",
       [c](const Leaf& l) { return GetBool(l, &c->shared_prefix_attention); }},
      {"backend",
       [c](const Leaf& l) {
         return GetChoice(l, {"auto", "cpu", "cuda"}, &ParseBackendKind, &c->backend);
       }},
      {"precision",
       [c](const Leaf& l) {
         return GetChoice(l, {"bf16", "fp32", "fp8"}, &ParsePrecision, &c->precision);
       }},
      {"weight_dtype",
       [c](const Leaf& l) {
         return GetChoice(l, {"auto", "f32", "bf16", "int8"}, &ParseWeightDtype, &c->weight_dtype);
       }},
      {"kv_dtype",
       [c](const Leaf& l) {
         return GetChoice(l, {"auto", "f32", "bf16"}, &ParseKvDtype, &c->kv_dtype);
       }},
      {"gpu_memory_utilization",
       [c](const Leaf& l) { return GetFraction(l, &c->gpu_memory_utilization); }},
      {"device", [c](const Leaf& l) { return GetInt(l, 0, kMaxDevice, &c->device); }},
      {"cpu_threads",
       [c](const Leaf& l) -> Status {
         LLMQ_RETURN_IF_ERROR(GetInt(l, 1, kMaxCpuThreads, &c->cpu_threads));
         c->cpu_threads_source = "engine.cpu_threads";
         return Status::Ok();
       }},
  };
  std::vector<Field> spool = {
      {"state_dir", [c](const Leaf& l) { return GetPath(l, &c->state_dir); }},
      {"settle_seconds", [c](const Leaf& l) { return GetSeconds(l, 0, 3600, &c->settle_seconds); }},
      {"group_window_ms", [c](const Leaf& l) { return GetInt(l, 0, 60000, &c->group_window_ms); }},
      {"rescan_seconds",
       [c](const Leaf& l) { return GetSeconds(l, 0.05, 86400, &c->rescan_seconds); }},
      {"max_file_bytes",
       [c](const Leaf& l) { return GetByteSize(l, "1GiB, 500MB or 1048576", &c->max_file_bytes); }},
      {"max_line_bytes",
       [c](const Leaf& l) -> Status {
         int64_t v = 0;
         LLMQ_RETURN_IF_ERROR(GetByteSize(l, "16MiB, 1MB or 1048576", &v));
         if (v < 1024) return l.Fail("must be at least 1KiB, got " + Describe(l.value));
         c->max_line_bytes = v;
         return Status::Ok();
       }},
      {"drain_seconds", [c](const Leaf& l) { return GetSeconds(l, 0, 86400, &c->drain_seconds); }},
      {"commit_interval_ms",
       [c](const Leaf& l) { return GetInt(l, 1, 60000, &c->commit_interval_ms); }},
  };
  std::vector<Field> queue = {
      {"url",
       [c](const Leaf& l) -> Status {
         std::string url;
         LLMQ_RETURN_IF_ERROR(GetString(l, &url));
         // The value is not repeated: a URL may hold a password.
         if (!url.starts_with("postgresql://") && !url.starts_with("postgres://"))
           return l.Fail(
               "must be a PostgreSQL URL (postgresql://[user@]host[:port]/database[?sslmode=...]); "
               "leave it out for the SQLite queue in spool.state_dir");
         c->queue_url = std::move(url);
         return Status::Ok();
       }},
      {"lease_seconds",
       [c](const Leaf& l) { return GetSeconds(l, 0.3, 86400, &c->lease_seconds); }},
  };
  std::vector<Field> metrics = {
      {"textfile", [c](const Leaf& l) { return GetPath(l, &c->metrics_textfile); }},
      {"interval_seconds",
       [c](const Leaf& l) { return GetSeconds(l, 0.1, 3600, &c->metrics_interval_seconds); }},
      {"http_port", [c](const Leaf& l) { return GetInt(l, 0, 65535, &c->metrics_http_port); }},
      {"job_reports", [c](const Leaf& l) { return GetBool(l, &c->job_reports); }},
  };
  std::vector<Field> serve = {
      {"run_windows",
       [c](const Leaf& l) -> Status {
         if (l.value.IsNull()) return Status::Ok();
         if (!l.value.IsSequence())
           return l.Fail("must be a list such as [\"22:00-06:00\"], got " + Describe(l.value));
         std::vector<RunWindow> windows;
         for (const YAML::Node& w : l.value) {
           if (!w.IsScalar()) return l.Fail("each window must be a string, got " + Describe(w));
           RunWindow rw;
           if (Status st = ParseRunWindow(w.Scalar(), &rw); !st.ok())
             return ErrorAt(l.file, w.Mark(), l.key + ": " + st.message());
           windows.push_back(rw);
         }
         c->run_windows = std::move(windows);
         return Status::Ok();
       }},
  };
  const std::vector<Field> sections = {
      Section(file, "model", std::move(model)),     Section(file, "engine", std::move(engine)),
      Section(file, "spool", std::move(spool)),     Section(file, "queue", std::move(queue)),
      Section(file, "metrics", std::move(metrics)), Section(file, "serve", std::move(serve)),
  };
  return ParseMap(file, root, "", sections);
}

}  // namespace

std::optional<int64_t> ParseByteSize(const std::string& s) {
  size_t digits = 0;
  while (digits < s.size() && s[digits] >= '0' && s[digits] <= '9') ++digits;
  if (digits == 0) return std::nullopt;
  int64_t value = 0;
  if (std::from_chars(s.data(), s.data() + digits, value).ec != std::errc()) return std::nullopt;
  std::string_view unit = std::string_view(s).substr(digits);
  while (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);  // "4 GiB"
  if (unit.empty()) return unit.size() == s.size() - digits ? std::optional(value) : std::nullopt;
  if (unit == "B") return value;
  int power = 0;
  switch (unit.front()) {
    case 'K':
    case 'k':
      power = 1;
      break;
    case 'M':
    case 'm':
      power = 2;
      break;
    case 'G':
    case 'g':
      power = 3;
      break;
    case 'T':
    case 't':
      power = 4;
      break;
    default:
      return std::nullopt;
  }
  unit.remove_prefix(1);
  int64_t base = 0;
  if (unit.empty() || unit == "iB") {
    base = 1024;  // bare K/M/G/T are binary, as in -Xmx4g and docker --memory 4g
  } else if (unit == "B") {
    base = 1000;
  } else {
    return std::nullopt;
  }
  for (int i = 0; i < power; ++i) {
    if (value > std::numeric_limits<int64_t>::max() / base) return std::nullopt;
    value *= base;
  }
  return value;
}

Status ParseConfig(const std::string& yaml_text, const std::string& file, LlmqConfig* out) {
  LlmqConfig c;
  try {
    LLMQ_RETURN_IF_ERROR(ParseRoot(yaml_text, file, &c));
  } catch (const YAML::Exception& e) {
    return ErrorAt(file, e.mark, "invalid YAML: " + e.msg);
  }
  *out = std::move(c);
  return Status::Ok();
}

Status LoadConfig(const std::string& path, LlmqConfig* out) {
  // Opened once, without waiting (a FIFO put in its place must not block SIGHUP's reload): a
  // regular file within kMaxConfigBytes, read through that descriptor.
  UntrustedFile f;
  if (Status st = UntrustedFile::Open(AT_FDCWD, path, path, kMaxConfigBytes,
                                      "the config size limit (1 MiB)", &f);
      !st.ok()) {
    if (st.code() == Status::Code::kNotFound)
      return Status::NotFound(path + ": no such config file");
    return st;
  }
  std::string text;
  LLMQ_RETURN_IF_ERROR(f.ReadAll(&text));
  LlmqConfig c;
  LLMQ_RETURN_IF_ERROR(ParseConfig(text, path, &c));
  // Relative paths in a config file mean "beside the config file", wherever llmq was started.
  const std::filesystem::path base = std::filesystem::path(path).parent_path();
  for (std::string* p : {&c.model_dir, &c.state_dir, &c.metrics_textfile})
    if (!p->empty() && std::filesystem::path(*p).is_relative()) *p = (base / *p).lexically_normal();
  *out = std::move(c);
  return Status::Ok();
}

Status FindConfig(const std::string& flag, std::string* path) {
  if (!flag.empty()) {
    *path = flag;
    return Status::Ok();
  }
  if (const char* env = std::getenv("LLMQ_CONFIG"); env && *env) {
    std::error_code ec;  // without it, a path that cannot be looked at (EACCES) throws
    const bool exists = std::filesystem::exists(env, ec);
    if (ec) return Status::IoError(std::string(env) + ": " + ec.message() + " (from $LLMQ_CONFIG)");
    if (!exists)
      return Status::NotFound(std::string(env) + ": no such config file (from $LLMQ_CONFIG)");
    *path = env;
    return Status::Ok();
  }
  std::error_code ec;
  *path = std::filesystem::exists(kSystemConfigPath, ec) ? kSystemConfigPath : "";
  return Status::Ok();
}

}  // namespace llmq
