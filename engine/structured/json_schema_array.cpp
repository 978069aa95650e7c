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
  const bool contains = s.contains("$llmq_contains") || (s.contains("contains") && !no_contains_);
  if (s.contains("uniqueItems") && s["uniqueItems"] == json(true) && (max < 0 || max >= 2)) {
    const std::string at = ptr + "/uniqueItems";
    if (k > 0) return Refuse("uniqueItems", at, "beside prefix items");
    std::optional<Counted> counted;
    if (contains) LLMQ_RETURN_IF_ERROR(ContainsOf(s, ptr, &counted.emplace()));
    return UniqueArray(rest_schema, counted, ptr, min, max, out);
  }
  constexpr int64_t kMaxCounted = 1000;
  if (std::max(min, max) > kMaxCounted + k)
    return Refuse(max > kMaxCounted + k ? "maxItems" : "minItems",
                  ptr + (max > kMaxCounted + k ? "/maxItems" : "/minItems"),
                  "a bound above " + std::to_string(kMaxCounted) + " items");
  if (contains) {
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

Status Compiler::UniqueArray(const json& items, const std::optional<Counted>& counted,
                             const std::string& ptr, int64_t min, int64_t max, Sym* out) {
  const std::string at = ptr + "/uniqueItems";
  json s;
  LLMQ_RETURN_IF_ERROR(ResolveFlat(items, ptr + "/items", &s));
  if (s == json(false)) s = json{{"enum", json::array()}};  // no item: the empty array
  const auto refuse = [&](const std::string& why) {
    return Refuse("uniqueItems", at,
                  "items other than a few values (an enum, a const, booleans, null): " + why);
  };
  if (!s.is_object()) return refuse("any value");
  for (const char* k : {"anyOf", "oneOf", "not", "if"})
    if (s.contains(k) && !(std::string(k) == "if" && no_conditionals_))
      return refuse(std::string("\"") + k + "\" in them");
  json values = json::array();
  if (s.contains("const") || s.contains("enum")) {
    if (s.contains("enum") && !s["enum"].is_array())
      return Invalid("enum", ptr + "/items/enum", "not an array");
    values = EnumValues(s);
  } else {
    std::vector<std::string> types;
    LLMQ_RETURN_IF_ERROR(Types(s, ptr + "/items", &types));
    for (const std::string& t : types) {
      if (t == "boolean") {
        values.push_back(true);
        values.push_back(false);
      } else if (t == "null") {
        values.push_back(nullptr);
      } else {
        return refuse("of type " + t);
      }
    }
  }
  // Each value once (as JSON Schema compares them: 1 and 1.0 are one, {"a": 1, "b": 2} and
  // {"b": 2, "a": 1} too: either spelling), and only those the items admit.
  std::vector<std::vector<json>> classes;
  for (const json& v : values) {
    auto c = std::find_if(classes.begin(), classes.end(),
                          [&](const std::vector<json>& c) { return SameValue(c[0], v); });
    if (c == classes.end())
      classes.push_back({v});
    else if (std::find(c->begin(), c->end(), v) == c->end())  // another spelling of it
      c->push_back(v);
  }
  std::vector<Sym> item;
  uint64_t matching = 0;  // the items that match contains (by their bit)
  for (const std::vector<json>& c : classes) {
    Sym r;
    LLMQ_RETURN_IF_ERROR(Enum(json(c), s, ptr + "/items", &r));
    if (g_.rules()[static_cast<size_t>(r.id)].alternatives.empty()) continue;
    if (counted.has_value()) {
      const std::optional<bool> m = Holds(c[0], counted->schema);
      if (!m.has_value())
        return Refuse("uniqueItems", at,
                      "beside contains, on a value it cannot tell: " + PythonJsonDumps(c[0]));
      if (*m && item.size() < 64) matching |= uint64_t{1} << item.size();
    }
    item.push_back(r);
  }
  const auto n = static_cast<int64_t>(item.size());
  const int64_t cap = max < 0 ? n : std::min(max, n);
  if (min > cap) return Value(json(false), ptr, out);
  // The sets of at most `cap` of the n values: the rules to write.
  int64_t sets = 0;
  for (int64_t j = 0, c = 1; j <= cap && sets <= kMaxUniqueSets; ++j) {
    sets += c;
    c = c * (n - j) / (j + 1);  // C(n, j + 1), exact: C(n, j) * (n - j) is divisible by j + 1
    if (c > kMaxUniqueSets) c = kMaxUniqueSets + 1;
  }
  if (n > 62 || sets > kMaxUniqueSets)
    return Refuse("uniqueItems", at,
                  std::to_string(n) + " values, more than " + std::to_string(kMaxUniqueSets) +
                      " sets of them to tell apart (maxItems bounds them)");
  // after[set]: what follows the values of `set` written (the empty set: the array's inside).
  std::map<uint64_t, Sym> after;
  std::vector<uint64_t> todo;
  const auto rule = [&](uint64_t set) {
    auto [it, added] = after.try_emplace(set);
    if (added) {
      it->second = g_.NewRule(ptr + "/unique" + std::to_string(set));
      todo.push_back(set);
    }
    return it->second;
  };
  rule(0);
  while (!todo.empty()) {
    const uint64_t set = todo.back();
    todo.pop_back();
    const Sym a = after.at(set);
    const auto written = static_cast<int64_t>(__builtin_popcountll(set));
    const auto contained = static_cast<int64_t>(__builtin_popcountll(set & matching));
    const bool counts = !counted.has_value() || (contained >= counted->min &&
                                                 (counted->max < 0 || contained <= counted->max));
    if (written >= min && written > 0 && counts) g_.AddAlternative(a, {});  // `[]`: the array's
    if (written == cap) continue;
    for (int64_t i = 0; i < n; ++i) {
      const uint64_t bit = uint64_t{1} << i;
      if ((set & bit) || (counted.has_value() && counted->max >= 0 && (matching & bit) &&
                          contained == counted->max))
        continue;  // written, or one past maxContains
      std::vector<Sym> alt;
      if (written > 0) alt.push_back(comma_);
      alt.push_back(item[static_cast<size_t>(i)]);
      alt.push_back(rule(set | bit));
      g_.AddAlternative(a, std::move(alt));
    }
  }
  const Sym arr = g_.NewRule(ptr.empty() ? "/array" : ptr + "/array");
  if (min == 0 && (!counted.has_value() || counted->min == 0))
    g_.AddAlternative(arr, {lbrack_, rbrack_});
  if (cap >= 1) g_.AddAlternative(arr, {lbrack_, after.at(0), rbrack_});
  *out = arr;
  return Status::Ok();
}

}  // namespace llmq::schema
