#include "jobs/shared_prefixes.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "base/json.h"

namespace llmq::jobs {

using ordered_json = nlohmann::ordered_json;

std::string WithSharedPrefixes(const std::string& options,
                               const std::vector<SharedPrefix>& groups) {
  ordered_json j = options.empty()
                       ? ordered_json::object()
                       : ordered_json::parse(options, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return options;
  ordered_json list = ordered_json::array();
  for (const SharedPrefix& g : groups)
    list.push_back(
        {{"shared_tokens", g.shared_tokens}, {"requests", g.requests}, {"depth", g.depth}});
  j[kPrefixGroupsKey] = std::move(list);
  return DumpJson(j);
}

bool SharedPrefixesOf(const std::string& options, std::vector<SharedPrefix>* out) {
  out->clear();
  const ordered_json j = ordered_json::parse(options, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains(kPrefixGroupsKey) || !j[kPrefixGroupsKey].is_array())
    return false;
  for (const ordered_json& e : j[kPrefixGroupsKey]) {
    auto field = [&](const char* key, int64_t min, int64_t* v) {
      if (!e.contains(key) || !e[key].is_number_integer()) return false;
      *v = e[key].get<int64_t>();
      return *v >= min;
    };
    SharedPrefix g;
    if (e.is_object() && field("shared_tokens", 1, &g.shared_tokens) &&
        field("requests", 2, &g.requests) && field("depth", 1, &g.depth))
      out->push_back(g);
  }
  return true;
}

void SharedPrefixTally::Add(uint64_t prefix, const SharedPrefix& g) {
  auto [it, fresh] = by_prefix_.try_emplace(prefix, Entry{g, next_seen_});
  if (fresh) {
    ++next_seen_;
  } else {
    it->second.group.requests += g.requests;
    it->second.group.depth = std::max(it->second.group.depth, g.depth);
  }
  if (by_prefix_.size() <= 2 * kCarried) return;
  std::vector<std::pair<uint64_t, Entry>> ranked = Ranked();
  ranked.resize(kCarried);
  by_prefix_ = {ranked.begin(), ranked.end()};
}

std::vector<std::pair<uint64_t, SharedPrefixTally::Entry>> SharedPrefixTally::Ranked() const {
  std::vector<std::pair<uint64_t, Entry>> ranked(by_prefix_.begin(), by_prefix_.end());
  std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
    const SharedPrefix &x = a.second.group, &y = b.second.group;
    if (x.Saved() != y.Saved()) return x.Saved() > y.Saved();
    if (x.shared_tokens != y.shared_tokens) return x.shared_tokens > y.shared_tokens;
    return a.second.seen < b.second.seen;
  });
  return ranked;
}

std::vector<SharedPrefix> SharedPrefixTally::Top() const {
  std::vector<SharedPrefix> top;
  for (const auto& [prefix, e] : Ranked()) {
    if (top.size() == kSharedPrefixesKept) break;
    top.push_back(e.group);
  }
  return top;
}

}  // namespace llmq::jobs
