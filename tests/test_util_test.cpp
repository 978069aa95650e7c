// The rule for missing references (tests/test_util.h): a test without one skips, naming it, and
// fails instead under LLMQ_REQUIRE_REFERENCES=1.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "tests/test_util.h"

namespace llmq {
namespace {

// Sets (or, with nullptr, unsets) an environment variable for a scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_, old_->c_str(), 1);
    else
      unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// A test body whose reference is missing.
void NeedsAbsentModel() {
  const std::string dir = testing::SharedModel("no-such-model");
  LLMQ_SKIP_WITHOUT_SHARED(dir, "no-such-model");
  ADD_FAILURE() << "not reached: the model is absent";
}

// A test body whose reference is there.
void NeedsReadme() {
  LLMQ_SKIP_WITHOUT_FILE(std::string(LLMQ_SOURCE_DIR) + "/README.md");
}

struct Reported {
  ::testing::TestPartResult::Type type;
  std::string message;
};

// What `body` reports, with LLMQ_REQUIRE_REFERENCES set to `require` (unset for nullptr).
std::vector<Reported> ReportsOf(void (*body)(), const char* require) {
  ScopedEnv env("LLMQ_REQUIRE_REFERENCES", require);
  ::testing::TestPartResultArray results;
  {
    ::testing::ScopedFakeTestPartResultReporter reporter(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &results);
    body();
  }
  std::vector<Reported> out;
  for (int i = 0; i < results.size(); ++i)
    out.push_back({results.GetTestPartResult(i).type(), results.GetTestPartResult(i).message()});
  return out;
}

bool Says(const Reported& r, const std::string& text) {
  return r.message.find(text) != std::string::npos;
}

TEST(TestUtilTest, MissingReferenceSkipsNamingIt) {
  for (const char* require : {static_cast<const char*>(nullptr), "", "0"}) {
    const std::vector<Reported> r = ReportsOf(NeedsAbsentModel, require);
    ASSERT_EQ(r.size(), 1u) << (require ? require : "unset");
    EXPECT_EQ(r[0].type, ::testing::TestPartResult::kSkip);
    EXPECT_TRUE(Says(r[0], "/models/no-such-model is absent")) << r[0].message;
  }
}

TEST(TestUtilTest, MissingReferenceFailsUnderRequireReferences) {
  const std::vector<Reported> r = ReportsOf(NeedsAbsentModel, "1");
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].type, ::testing::TestPartResult::kFatalFailure);
  EXPECT_TRUE(Says(r[0], "missing reference (LLMQ_REQUIRE_REFERENCES=1): ")) << r[0].message;
  EXPECT_TRUE(Says(r[0], "/models/no-such-model is absent")) << r[0].message;
}

TEST(TestUtilTest, PresentReferenceNeitherSkipsNorFails) {
  EXPECT_TRUE(ReportsOf(NeedsReadme, "1").empty());
  EXPECT_TRUE(ReportsOf(NeedsReadme, nullptr).empty());
}

}  // namespace
}  // namespace llmq
