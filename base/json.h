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

}  // namespace llmq
