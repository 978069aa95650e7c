#include "engine/structured/json_schema_compiler.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace llmq::schema {

Status Compiler::Array(const json& s, const std::string& ptr, Sym* out) {
  std::vector<Sym> prefix;
  std::optional<Sym> rest = Any();
  std::vector<json> prefix_schemas;  // under contains: each item's schema
  json rest_schema = true;
  const auto each = [&](const json& list, const std::string& p) -> Status {
    for (size_t i = 0; i < list.size(); ++i) {
      Sym v;
      LLMQ_RETURN_IF_ERROR(Value(list[i], p + "/" + std::to_string(i), &v));
      prefix.push_back(v);
      prefix_schemas.push_back(list[i]);
    }
    return Status::Ok();
  };
  const auto tail = [&](const char* k) -> Status {
    if (!s.contains(k)) return Status::Ok();
    rest_schema = s[k];
    if (s[k] == json(false)) {
      rest.reset();
      return Status::Ok();
    }
    Sym v;
    LLMQ_RETURN_IF_ERROR(Value(s[k], ptr + "/" + k, &v));
    rest = v;
    return Status::Ok();
  };
  if (s.contains("prefixItems")) {
    if (!s["prefixItems"].is_array())
      return Invalid("prefixItems", ptr + "/prefixItems", "not an array");
    LLMQ_RETURN_IF_ERROR(each(s["prefixItems"], ptr + "/prefixItems"));
    LLMQ_RETURN_IF_ERROR(tail("items"));
  } else if (s.contains("items") && s["items"].is_array()) {
    LLMQ_RETURN_IF_ERROR(each(s["items"], ptr + "/items"));
    LLMQ_RETURN_IF_ERROR(tail("additionalItems"));
  } else {
    LLMQ_RETURN_IF_ERROR(tail("items"));
  }
  int64_t min = 0, max = -1;
  LLMQ_RETURN_IF_ERROR(NonNegative(s, "minItems", ptr, &min));
  LLMQ_RETURN_IF_ERROR(NonNegative(s, "maxItems", ptr, &max));
  const auto k = static_cast<int64_t>(prefix.size());
  if (!rest.has_value()) max = max < 0 ? k : std::min(max, k);
  if (max >= 0 && max < min) {
    *out = Nothing();
    return Status::Ok();
  }
  constexpr int64_t kMaxCounted = 1000;
  if (std::max(min, max) > kMaxCounted + k)
    return Refuse(max > kMaxCounted + k ? "maxItems" : "minItems",
                  ptr + (max > kMaxCounted + k ? "/maxItems" : "/minItems"),
                  "a bound above " + std::to_string(kMaxCounted) + " items");
  if (s.contains("$llmq_contains") || (s.contains("contains") && !no_contains_)) {
    Counted c;
    LLMQ_RETURN_IF_ERROR(ContainsOf(s, ptr, &c));
    return Contains(c, ptr, prefix_schemas, rest_schema, min, max, out);
  }
  // after[n]: what follows the n-th element (n >= 1): the end, or a comma and element n+1.
  const auto elem = [&](int64_t n) { return n <= k ? prefix[static_cast<size_t>(n - 1)] : *rest; };
  const int64_t last = max >= 0 ? max : std::max(min, k) + 1;  // after[last] loops if unbounded
  std::vector<Sym> after(static_cast<size_t>(last + 1));
  for (int64_t n = 1; n <= last; ++n)
    after[static_cast<size_t>(n)] = g_.NewRule(ptr + "/after" + std::to_string(n));
  for (int64_t n = 1; n <= last; ++n) {
    const Sym a = after[static_cast<size_t>(n)];
    if (n >= min) g_.AddAlternative(a, {});
    if (max < 0 && n == last) {
      g_.AddAlternative(a, {comma_, *rest, a});  // beyond the prefix and minItems: a loop
    } else if (n < last && (n < k || rest.has_value())) {
      g_.AddAlternative(a, {comma_, elem(n + 1), after[static_cast<size_t>(n + 1)]});
    }
  }
  const Sym arr = g_.NewRule(ptr.empty() ? "/array" : ptr + "/array");
  if (min == 0) g_.AddAlternative(arr, {lbrack_, rbrack_});
  if (last >= 1 && (k >= 1 || rest.has_value()))
    g_.AddAlternative(arr, {lbrack_, elem(1), after[1], rbrack_});
  *out = arr;
  return Status::Ok();
}

Status Compiler::ContainsOf(const json& s, const std::string& ptr, Counted* out) {
  const bool own = s.contains("$llmq_contains");
  if (own && s.contains("contains") && !no_contains_)
    return Refuse("contains", ptr + "/contains", "beside not {items}");
  out->schema = own ? s["$llmq_contains"] : s["contains"];
  if (own || !legacy_ref_) {  // minContains and maxContains are keywords from 2019-09 on
    const char* lo = own ? "$llmq_min_contains" : "minContains";
    const char* hi = own ? "$llmq_max_contains" : "maxContains";
    LLMQ_RETURN_IF_ERROR(NonNegative(s, lo, ptr, &out->min));
    LLMQ_RETURN_IF_ERROR(NonNegative(s, hi, ptr, &out->max));
    if (!s.contains(lo)) out->min = 1;
  }
  return Status::Ok();
}

Status Compiler::Contains(const Counted& counted, const std::string& ptr,
                          const std::vector<json>& prefix, const json& rest, int64_t min,
                          int64_t max, Sym* out) {
  const json& c = counted.schema;
  const int64_t min_c = counted.min, max_c = counted.max;
  if (max_c >= 0 && max_c < min_c) return Value(json(false), ptr, out);
  const bool exact = max_c >= 0;
  const int64_t cap = exact ? max_c : min_c;
  const auto k = static_cast<int64_t>(prefix.size());
  const int64_t last = max >= 0 ? max : std::max({min, k, cap}) + 1;  // loops there if unbounded
  if ((last + 1) * (cap + 1) > 4096)
    return Refuse("contains", ptr + "/contains",
                  "more than 4096 counts of items and of those matching it");
  // The n-th item's symbols: matching contains, and not matching it (exact) or any.
  std::map<int64_t, std::pair<Sym, Sym>> items;  // by min(n, k + 1)
  const auto item = [&](int64_t n, std::pair<Sym, Sym>* pair) -> Status {
    const int64_t key = std::min(n, k + 1);
    if (const auto it = items.find(key); it != items.end()) {
      *pair = it->second;
      return Status::Ok();
    }
    const json& base = n <= k ? prefix[static_cast<size_t>(n - 1)] : rest;
    const std::string at = n <= k ? ptr + "/prefixItems/" + std::to_string(n - 1) : ptr + "/items";
    const json yes = json{{"allOf", json::array({base, c})}};
    const json no = exact ? json{{"allOf", json::array({base, json{{"not", c}}})}} : base;
    LLMQ_RETURN_IF_ERROR(Value(yes, at, &pair->first));
    LLMQ_RETURN_IF_ERROR(Value(no, at, &pair->second));
    items.emplace(key, *pair);
    return Status::Ok();
  };
  std::vector<std::vector<Sym>> after(static_cast<size_t>(last + 1));
  for (int64_t n = 0; n <= last; ++n)
    for (int64_t cnt = 0; cnt <= cap; ++cnt)
      after[static_cast<size_t>(n)].push_back(
          g_.NewRule(ptr + "/after" + std::to_string(n) + "/" + std::to_string(cnt)));
  const bool more = rest != json(false);  // items past the prefix
  for (int64_t n = 0; n <= last; ++n)
    for (int64_t cnt = 0; cnt <= cap; ++cnt) {
      const Sym a = after[static_cast<size_t>(n)][static_cast<size_t>(cnt)];
      if (n >= min && cnt >= min_c) g_.AddAlternative(a, {});
      const bool loop = max < 0 && n == last;
      if (!loop && (n == last || (n >= k && !more))) continue;
      std::pair<Sym, Sym> it;
      LLMQ_RETURN_IF_ERROR(item(n + 1, &it));
      const Sym next_matching =
          after[static_cast<size_t>(loop ? n : n + 1)][static_cast<size_t>(std::min(cnt + 1, cap))];
      const Sym next_other = after[static_cast<size_t>(loop ? n : n + 1)][static_cast<size_t>(cnt)];
      std::vector<Sym> lead;
      if (n > 0) lead.push_back(comma_);
      if (!(exact && cnt == max_c)) {  // past maxContains: no way on
        std::vector<Sym> alt = lead;
        alt.insert(alt.end(), {it.first, next_matching});
        g_.AddAlternative(a, alt);
      }
      std::vector<Sym> alt = lead;
      alt.insert(alt.end(), {it.second, next_other});
      g_.AddAlternative(a, alt);
    }
  const Sym arr = g_.NewRule(ptr.empty() ? "/array" : ptr + "/array");
  g_.AddAlternative(arr, {lbrack_, after[0][0], rbrack_});
  *out = arr;
  return Status::Ok();
}

}  // namespace llmq::schema
