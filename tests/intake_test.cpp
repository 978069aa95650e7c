// Intake (daemon/intake.h), directly: settled inbox files accepted into a real SQLite store,
// refused into failed/, handed back when they changed while read, left alone when cancelled.
// No daemon, no clock: each test calls Accept and looks at the folders and the store.
#include "daemon/intake.h"

#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/serve_fixture.h"
#include "tests/test_util.h"
#include "tests/tiny_context.h"

namespace llmq {
namespace {

namespace fs = std::filesystem;
using testing::GoodLine;

class IntakeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = new Model;
    testing::LoadTinyModel("intake_model", model_);
  }
  static void TearDownTestSuite() { delete model_; }

  void SetUp() override {
    paths_ = spool::PathsFor(testing::CurrentTestDir() + "/state");
    ASSERT_TRUE(spool::EnsureLayout(paths_).ok());
    inbox_fd_ = ::open(paths_.inbox.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ASSERT_GE(inbox_fd_, 0);
    ASSERT_TRUE(jobs::Store::Open(paths_.db, &store_).ok());
    ctx_ = testing::TinyContext(model_);
    intake_ = std::make_unique<Intake>(paths_, store_.get(), ctx_);
  }
  void TearDown() override { ::close(inbox_fd_); }

  void Put(const std::string& name, const std::string& text) {
    std::ofstream(paths_.inbox + "/" + name, std::ios::binary) << text;
  }
  std::vector<jobs::JobRecord> Jobs() {
    std::vector<jobs::JobRecord> all;
    EXPECT_TRUE(store_->ListJobs(&all).ok());
    return all;
  }
  bool Exists(const std::string& p) { return fs::exists(fs::symlink_status(p)); }

  static Model* model_;
  spool::Paths paths_;
  int inbox_fd_ = -1;
  std::unique_ptr<jobs::Store> store_;
  BuildContext ctx_;
  std::unique_ptr<Intake> intake_;
};
Model* IntakeTest::model_ = nullptr;

TEST_F(IntakeTest, AcceptsTogetherRefusesWholeFilesAndMovesEachOnce) {
  Put("a.jsonl", GoodLine("a1") + GoodLine("a2"));
  Put("b.jsonl", GoodLine("b1") + "{broken\n");
  Put("empty.jsonl", "");
  fs::create_symlink("/etc/passwd", paths_.inbox + "/link.jsonl");
  const Intake::Outcome o = intake_->Accept(
      inbox_fd_, {"a.jsonl", "b.jsonl", "empty.jsonl", "link.jsonl", "gone.jsonl"}, {});
  EXPECT_EQ(o.accepted, 2);
  EXPECT_EQ(
      std::set<std::string>(o.done.begin(), o.done.end()),
      (std::set<std::string>{"a.jsonl", "b.jsonl", "empty.jsonl", "link.jsonl", "gone.jsonl"}));
  EXPECT_TRUE(o.resettle.empty());
  const auto jobs = Jobs();
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0].total + jobs[1].total, 4);
  EXPECT_TRUE(Exists(paths_.archive + "/a.jsonl"));
  EXPECT_TRUE(Exists(paths_.archive + "/b.jsonl"));
  EXPECT_NE(testing::ReadText(paths_.failed + "/empty.jsonl.reason.txt").find("empty"),
            std::string::npos);
  EXPECT_NE(testing::ReadText(paths_.failed + "/link.jsonl.reason.txt").find("symbolic link"),
            std::string::npos);
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(paths_.failed + "/link.jsonl")));
  EXPECT_TRUE(testing::Names(paths_.inbox).empty());
  // The same file dropped again is refused, naming its job: never a second job.
  Put("a.jsonl", GoodLine("a1") + GoodLine("a2"));
  const Intake::Outcome again = intake_->Accept(inbox_fd_, {"a.jsonl"}, {});
  EXPECT_EQ(again.accepted, 0);
  EXPECT_NE(testing::ReadText(paths_.failed + "/a.jsonl.reason.txt").find("already accepted"),
            std::string::npos);
  EXPECT_EQ(Jobs().size(), 2u);
}

TEST_F(IntakeTest, AFileOverTheLimitIsRefusedFromItsSize) {
  Put("big.jsonl", std::string(5000, ' ') + GoodLine("x"));
  Intake::Limits limits;
  limits.max_file_bytes = 4096;
  const Intake::Outcome o = intake_->Accept(inbox_fd_, {"big.jsonl"}, limits);
  EXPECT_EQ(o.accepted, 0);
  EXPECT_NE(testing::ReadText(paths_.failed + "/big.jsonl.reason.txt")
                .find("bytes, over spool.max_file_bytes (4096)"),
            std::string::npos);
}

TEST_F(IntakeTest, ACancelledAcceptLeavesItsFilesInTheInbox) {
  std::string text;
  for (int i = 0; i < 3000; ++i) text += GoodLine("c" + std::to_string(i));
  Put("c.jsonl", text);
  intake_->Cancel();
  const Intake::Outcome o = intake_->Accept(inbox_fd_, {"c.jsonl"}, {});
  EXPECT_EQ(o.accepted, 0);
  EXPECT_TRUE(o.done.empty());
  EXPECT_TRUE(Exists(paths_.inbox + "/c.jsonl"));
  EXPECT_TRUE(Jobs().empty()) << "rolled back";
}

TEST_F(IntakeTest, ANameTooLongForItsOutputsKeepsItsArchiveAndFailedNamesValid) {
  const std::string name = std::string(252, 'z') + ".x";  // 254 bytes
  Put(name, "");                                          // refused: empty
  ASSERT_EQ(intake_->Accept(inbox_fd_, {name}, {}).accepted, 0);
  int reasons = 0;
  for (const std::string& n : testing::Names(paths_.failed)) {
    EXPECT_LE(n.size(), 255u);
    reasons += n.size() > 11 && n.compare(n.size() - 11, 11, ".reason.txt") == 0;
  }
  EXPECT_EQ(reasons, 1);
  EXPECT_EQ(testing::Names(paths_.failed).size(), 2u);
}

}  // namespace
}  // namespace llmq
