// FlatIndex against std::unordered_map under random inserts, replacements and erasures: small key
// sets (so the probe runs collide, wrap around the table's end and are shifted back by erasures)
// and growth through several doublings; after every operation the index holds exactly the
// reference's entries.
#include "base/flat_index.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <unordered_map>

namespace llmq {
namespace {

// Every reference entry is found with its value, and ForEach visits exactly those entries.
void ExpectSame(const FlatIndex& f, const std::unordered_map<uint64_t, int32_t>& ref) {
  ASSERT_EQ(f.size(), ref.size());
  for (const auto& [k, v] : ref) {
    const int32_t* at = f.Find(k);
    ASSERT_NE(at, nullptr) << "key " << k;
    ASSERT_EQ(*at, v) << "key " << k;
  }
  std::map<uint64_t, int32_t> seen;
  f.ForEach([&](uint64_t k, int32_t v) { EXPECT_TRUE(seen.emplace(k, v).second) << k; });
  const std::map<uint64_t, int32_t> want(ref.begin(), ref.end());
  EXPECT_EQ(seen, want);
}

TEST(FlatIndex, EmptyFindsNothing) {
  FlatIndex f;
  EXPECT_EQ(f.Find(0), nullptr);
  EXPECT_FALSE(f.EraseIf(7, 0));
  EXPECT_TRUE(f.empty());
}

TEST(FlatIndex, EmplaceKeepsTheFirstAssignReplacesEraseNeedsTheValue) {
  FlatIndex f;
  EXPECT_TRUE(f.Emplace(5, 1));
  EXPECT_FALSE(f.Emplace(5, 2));
  EXPECT_EQ(*f.Find(5), 1);
  f.Assign(5, 3);
  EXPECT_EQ(*f.Find(5), 3);
  f.Assign(0, 0);  // key 0 and value 0 are ordinary
  EXPECT_EQ(*f.Find(0), 0);
  EXPECT_FALSE(f.EraseIf(5, 1));  // another value: kept
  EXPECT_EQ(f.size(), 2u);
  EXPECT_TRUE(f.EraseIf(5, 3));
  EXPECT_EQ(f.Find(5), nullptr);
  EXPECT_EQ(f.size(), 1u);
}

TEST(FlatIndex, RandomOperationsMatchTheStandardMap) {
  for (uint64_t key_range : {40ull, 200ull, 5000ull, 1ull << 62}) {
    SCOPED_TRACE("keys below " + std::to_string(key_range));
    std::mt19937_64 rng(key_range);
    FlatIndex f;
    std::unordered_map<uint64_t, int32_t> ref;
    for (int op = 0; op < 20000; ++op) {
      const uint64_t k = rng() % key_range;
      const int32_t v = static_cast<int32_t>(rng() % 4);
      switch (rng() % 4) {
        case 0:
          EXPECT_EQ(f.Emplace(k, v), ref.emplace(k, v).second);
          break;
        case 1:
          f.Assign(k, v);
          ref[k] = v;
          break;
        default: {
          auto it = ref.find(k);
          const bool erase = it != ref.end() && it->second == v;
          if (erase) ref.erase(it);
          EXPECT_EQ(f.EraseIf(k, v), erase);
        }
      }
      if (op % 97 == 0 || key_range <= 40) ExpectSame(f, ref);
    }
    ExpectSame(f, ref);
  }
}

TEST(FlatIndex, GrowsThroughDoublingsAndEmptiesAgain) {
  FlatIndex f;
  std::unordered_map<uint64_t, int32_t> ref;
  std::mt19937_64 rng(9);
  for (int i = 0; i < 100000; ++i) {
    const uint64_t k = rng();
    f.Assign(k, i);
    ref[k] = i;
  }
  ExpectSame(f, ref);
  for (const auto& [k, v] : ref) ASSERT_TRUE(f.EraseIf(k, v));
  EXPECT_TRUE(f.empty());
  f.ForEach([](uint64_t k, int32_t) { ADD_FAILURE() << "left: " << k; });
}

}  // namespace
}  // namespace llmq
