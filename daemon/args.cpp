#include "daemon/args.h"

#include <cerrno>
#include <cstdlib>

namespace llmq::cli {

bool Args::Parse(int argc, char** argv, int first, std::string* error) {
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (auto al = aliases_.find(a); al != aliases_.end()) a = "--" + al->second;
    if (a.rfind("--", 0) != 0 || a == "--") {
      positional_.push_back(a);
      continue;
    }
    std::string name = a.substr(2), value;
    const size_t eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) value = name.substr(eq + 1), name = name.substr(0, eq);
    if (booleans_.count(name)) {
      if (inline_value) return *error = "--" + name + " takes no value", false;
      values_[name] = "1";
    } else if (valued_.count(name)) {
      if (!inline_value) {
        if (i + 1 >= argc) return *error = "--" + name + " needs a value", false;
        value = argv[++i];
      }
      values_[name] = value;
    } else {
      return *error = "unknown option --" + name, false;
    }
  }
  return true;
}

std::optional<std::string> Args::Get(const std::string& flag) const {
  auto it = values_.find(flag);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::string Args::Get(const std::string& flag, const std::string& def) const {
  return Get(flag).value_or(def);
}

bool Args::GetInt(const std::string& flag, long long def, long long* out,
                  std::string* error) const {
  auto v = Get(flag);
  if (!v) return *out = def, true;
  errno = 0;
  char* end = nullptr;
  *out = std::strtoll(v->c_str(), &end, 10);
  if (v->empty() || *end != '\0' || errno)
    return *error = "--" + flag + " must be an integer, got '" + *v + "'", false;
  return true;
}

bool Args::GetDouble(const std::string& flag, double def, double* out, std::string* error) const {
  auto v = Get(flag);
  if (!v) return *out = def, true;
  errno = 0;
  char* end = nullptr;
  *out = std::strtod(v->c_str(), &end);
  if (v->empty() || *end != '\0' || errno)
    return *error = "--" + flag + " must be a number, got '" + *v + "'", false;
  return true;
}

}  // namespace llmq::cli
