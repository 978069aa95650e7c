// DumpJson: the one way llmq serializes JSON that may hold strings from outside (file and folder
// names, paths, job names). nlohmann's dump() throws (type_error 316) on a string that is not
// UTF-8, and a throw out of the daemon's event loop ends the daemon: here such bytes become
// U+FFFD instead. Names are checked before they become jobs (spool::NameProblem); this is the
// guard behind that check.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace llmq {

// For nlohmann::json and nlohmann::ordered_json alike (the key order is kept).
template <typename Json>
std::string DumpJson(const Json& j, int indent = -1) {
  return j.dump(indent, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
}

// JSON text's brackets outside its strings, byte by byte (a linear scan before a parse: where a
// value ends, or how deep it nests, without building it).
class JsonBracketScan {
 public:
  // +1 for `c` opening a bracket ('[' or '{'), -1 for one closing, 0 for any other byte and for
  // any byte inside a string.
  int Step(char c) {
    if (in_string_) {
      if (escaped_)
        escaped_ = false;
      else if (c == '\\')
        escaped_ = true;
      else if (c == '"')
        in_string_ = false;
      return 0;
    }
    if (c == '"') in_string_ = true;
    return (c == '[' || c == '{') ? 1 : (c == ']' || c == '}') ? -1 : 0;
  }

 private:
  bool in_string_ = false, escaped_ = false;
};

}  // namespace llmq
