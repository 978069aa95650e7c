// jobs/shared_prefixes: the "prefix_groups" key of a job's options (written beside the submitter's
// keys, read back, absent from an older job), and the tally that merges a job's groups over chunks.
#include "jobs/shared_prefixes.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace llmq::jobs {
namespace {

TEST(SharedPrefixes, WrittenBesideTheSubmittersKeysAndReadBack) {
  const std::vector<SharedPrefix> groups = {{800, 40, 2}, {12, 41, 1}};
  const std::string options =
      WithSharedPrefixes(R"({"source":"inbox","archive":"a/b.jsonl"})", groups);
  const auto j = nlohmann::json::parse(options);
  EXPECT_EQ(j["source"], "inbox");
  EXPECT_EQ(j["archive"], "a/b.jsonl");
  EXPECT_EQ(j["prefix_groups"],
            nlohmann::json::parse(R"([{"shared_tokens":800,"requests":40,"depth":2},
                                      {"shared_tokens":12,"requests":41,"depth":1}])"));
  std::vector<SharedPrefix> back;
  ASSERT_TRUE(SharedPrefixesOf(options, &back));
  EXPECT_EQ(back, groups);
  EXPECT_EQ(groups[0].Saved(), 800 * 39);
  // Written again: replaced, not appended.
  ASSERT_TRUE(SharedPrefixesOf(WithSharedPrefixes(options, {}), &back));
  EXPECT_TRUE(back.empty()) << "recorded: no shared prefix";
}

TEST(SharedPrefixes, AbsentOrForeignOptionsAreToldApart) {
  std::vector<SharedPrefix> back = {{1, 2, 1}};
  EXPECT_FALSE(SharedPrefixesOf(R"({"source":"inbox"})", &back)) << "ingested before the key";
  EXPECT_TRUE(back.empty());
  EXPECT_FALSE(SharedPrefixesOf("", &back));
  EXPECT_FALSE(SharedPrefixesOf("not json", &back));
  EXPECT_FALSE(SharedPrefixesOf(R"({"prefix_groups":{}})", &back));
  EXPECT_EQ(WithSharedPrefixes("[1]", {{5, 2, 1}}), "[1]") << "not ours to rewrite";
  EXPECT_EQ(WithSharedPrefixes("", {{5, 2, 1}}),
            R"({"prefix_groups":[{"shared_tokens":5,"requests":2,"depth":1}]})");
  // Malformed entries are skipped, the rest kept.
  ASSERT_TRUE(SharedPrefixesOf(
      R"({"prefix_groups":[7,{"shared_tokens":5,"requests":1,"depth":1},
          {"shared_tokens":"5","requests":2,"depth":1},{"shared_tokens":9,"requests":3,"depth":2}]})",
      &back));
  EXPECT_EQ(back, (std::vector<SharedPrefix>{{9, 3, 2}}));
}

TEST(SharedPrefixTally, MergesTheSamePrefixAndKeepsTheLargestSavings) {
  SharedPrefixTally t;
  t.Add(1, {100, 5, 1});  // saves 400
  t.Add(2, {10, 30, 2});  // saves 290
  t.Add(1, {100, 4, 2});  // the same prefix in another chunk: 9 requests, depth 2, saves 800
  t.Add(3, {290, 2, 1});  // saves 290 too: more shared tokens ranks first
  EXPECT_EQ(t.Top(), (std::vector<SharedPrefix>{{100, 9, 2}, {290, 2, 1}, {10, 30, 2}}));
  // Many small prefixes: the top stays the kSharedPrefixesKept largest, the large one first.
  for (uint64_t p = 10; p < 10 + 4 * SharedPrefixTally::kCarried; ++p) t.Add(p, {int64_t(p), 2, 3});
  const std::vector<SharedPrefix> top = t.Top();
  ASSERT_EQ(top.size(), kSharedPrefixesKept);
  EXPECT_EQ(top[0].shared_tokens, 9 + 4 * int64_t{SharedPrefixTally::kCarried});
  for (size_t i = 1; i < top.size(); ++i) EXPECT_GE(top[i - 1].Saved(), top[i].Saved());
}

}  // namespace
}  // namespace llmq::jobs
