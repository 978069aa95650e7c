// BoundedStringAutomaton (engine/structured/automaton.h): a JSON string a pattern matches, of
// minLength..maxLength characters, against a brute force over every string of a few characters
// (ASCII, a 2-byte UTF-8 one, an escape): decoded, counted in code points, matched by std::regex.
// Each automaton accepts exactly those strings, and a prefix is dead exactly when none extends it.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "engine/structured/automaton.h"
#include "engine/structured/regex.h"

namespace llmq {
namespace {

struct Unit {
  const char* json;  // as written between the quotes
  const char* text;  // decoded
};

TEST(BoundedStringAutomatonTest, EveryShortStringAgainstBruteForce) {
  const Unit units[] = {
      {"a", "a"}, {"b", "b"}, {"1", "1"}, {"\xc3\xa9", "\xc3\xa9"}, {"\\n", "\n"}};
  constexpr int kMaxUnits = 6;
  struct Str {
    std::string json, text;
    int64_t chars;
  };
  std::vector<Str> all = {{"", "", 0}};
  for (size_t i = 0; i < all.size(); ++i)
    if (all[i].chars < kMaxUnits)
      for (const Unit& u : units)
        all.push_back({all[i].json + u.json, all[i].text + u.text, all[i].chars + 1});
  const char* patterns[] = {"^a*b?$", "a", "^[ab]+$", "1$", "^(ab|1)*$", "\\n"};
  const std::pair<int64_t, int64_t> bounds[] = {{0, 2},  {1, 3}, {2, -1}, {3, 3},
                                                {4, -1}, {0, 0}, {5, 6},  {1, -1}};
  int live = 0;
  for (const char* p : patterns) {
    const std::regex oracle(p, std::regex::ECMAScript);
    std::vector<char> matches(all.size());
    for (size_t i = 0; i < all.size(); ++i) matches[i] = std::regex_search(all[i].text, oracle);
    for (const auto& [min, max] : bounds) {
      std::unique_ptr<Regex> re;
      ASSERT_TRUE(
          Regex::Compile(p, {Regex::Mode::kSearch, /*json_string=*/true, /*quoted=*/true}, &re)
              .ok());
      std::unique_ptr<BoundedStringAutomaton> a;
      ASSERT_TRUE(BoundedStringAutomaton::Build(re.get(), min, max, &a).ok()) << p;
      std::set<std::string> prefixes;  // of the accepted strings
      for (size_t i = 0; i < all.size(); ++i)
        if (matches[i] && all[i].chars >= min && (max < 0 || all[i].chars <= max)) {
          const std::string q = '"' + all[i].json + '"';
          for (size_t n = 0; n <= q.size(); ++n) prefixes.insert(q.substr(0, n));
        }
      live += a->Start() != LexemeAutomaton::kDead;
      for (size_t i = 0; i < all.size(); ++i) {
        const std::string q = '"' + all[i].json + '"';
        const std::string where =
            std::string(p) + " [" + std::to_string(min) + ", " + std::to_string(max) + "] " + q;
        int state = a->Start();
        for (size_t n = 1; n <= q.size(); ++n) {
          state = a->Next(state, static_cast<uint8_t>(q[n - 1]));
          const std::string prefix = q.substr(0, n);
          // Dead: nothing accepted extends it. Live, with room left to extend it within the
          // strings enumerated (3 characters and the quote): something does.
          if (state == LexemeAutomaton::kDead) {
            EXPECT_FALSE(prefixes.count(prefix)) << where << " at " << n;
            break;
          }
          if (n < q.size() && all[i].chars <= kMaxUnits - 3)
            EXPECT_TRUE(prefixes.count(prefix)) << where << " at " << n;
        }
        const bool want = matches[i] && all[i].chars >= min && (max < 0 || all[i].chars <= max);
        EXPECT_EQ(state != LexemeAutomaton::kDead && a->Accepts(state), want) << where;
      }
    }
  }
  EXPECT_GT(live, 30);
}

TEST(BoundedStringAutomatonTest, NoStringOfTheLengthIsADeadStartAndHugeProductsAreRefused) {
  std::unique_ptr<Regex> re;
  ASSERT_TRUE(Regex::Compile("^[0-9]{4}$", {Regex::Mode::kSearch, true, true}, &re).ok());
  std::unique_ptr<BoundedStringAutomaton> a;
  ASSERT_TRUE(BoundedStringAutomaton::Build(re.get(), 5, 10, &a).ok());
  EXPECT_EQ(a->Start(), LexemeAutomaton::kDead);
  ASSERT_TRUE(BoundedStringAutomaton::Build(re.get(), 0, 4, &a).ok());
  int q = a->Start();
  for (const char c : std::string("\"2026\"")) q = a->Next(q, static_cast<uint8_t>(c));
  EXPECT_TRUE(a->Accepts(q));
  // A bound so large that the counts kept would pass kMaxBits.
  ASSERT_TRUE(Regex::Compile("^[a-z]{0,900}x$", {Regex::Mode::kSearch, true, true}, &re).ok());
  const Status st = BoundedStringAutomaton::Build(re.get(), 0, 100000, &a);
  EXPECT_EQ(st.code(), Status::Code::kUnsupported) << st.message();
}

TEST(BoundedStringAutomatonTest, AllAtLeastTellsWhenMinLengthAddsNothing) {
  const struct {
    const char* pattern;
    int64_t min;
    bool all;
  } cases[] = {
      {"^[a-z]{3}", 3, true}, {"^[a-z]{3}", 4, false}, {"^(?:\\S+\\s+){0,99}\\S+$", 1, true},
      {"x?", 1, false},       {"^\\n\\n$", 2, true},   {"^\\n\\n$", 3, false},
      {"^$", 1, false}};
  for (const auto& c : cases) {
    std::unique_ptr<Regex> re;
    ASSERT_TRUE(Regex::Compile(c.pattern, {Regex::Mode::kSearch, true, true}, &re).ok())
        << c.pattern;
    EXPECT_EQ(BoundedStringAutomaton::AllAtLeast(re.get(), c.min), c.all)
        << c.pattern << " " << c.min;
  }
}

}  // namespace
}  // namespace llmq
