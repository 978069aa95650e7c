// Ingest: every line validated, duplicates found across chunks, requests of several files planned
// together, all in one transaction; the file hashed while it is read.
#include "daemon/ingest.h"

#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <omp.h>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "jobs/batch_request.h"
#include "jobs/sha256.h"
#include "jobs/shared_prefixes.h"
#include "tests/pg_server.h"
#include "tests/test_util.h"
#include "tests/tiny_context.h"

namespace llmq {
namespace {

using json = nlohmann::json;

std::string Line(const std::string& id, const std::string& system, const std::string& user) {
  return json{
      {"custom_id", id},
      {"method", "POST"},
      {"url", "/v1/chat/completions"},
      {"body",
       {{"max_tokens", 2},
        {"messages",
         {{{"role", "system"}, {"content", system}}, {{"role", "user"}, {"content", user}}}}}}}
      .dump();
}

// A job file opened as every one is (OpenJobFile: base/untrusted_file.h).
UntrustedFile Opened(const std::string& path) {
  UntrustedFile f;
  const Status st = OpenJobFile(path, int64_t{1} << 30, &f);
  EXPECT_TRUE(st.ok()) << st.message();
  return f;
}

class IngestTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = new Model;
    testing::LoadTinyModel("ingest_model", model_);
  }
  static void TearDownTestSuite() { delete model_; }
  BuildContext Context() const { return testing::TinyContext(model_); }
  // Ingests the one job file dir/name (options "{}") as every job file is.
  Status IngestOne(jobs::Store* store, const std::string& dir, const std::string& name,
                   const IngestOptions& opt, std::vector<IngestedJob>* out) const {
    const UntrustedFile file = Opened(dir + "/" + name);
    return IngestFiles(store, Context(), {{&file, name, "", "{}", -1, ""}}, opt, out);
  }
  static Model* model_;
};
Model* IngestTest::model_ = nullptr;

TEST_F(IngestTest, DuplicatesAcrossChunksAndFilesPlannedTogetherInOneTransaction) {
  const std::string dir = testing::CurrentTestDir();
  // Two files sharing system prompts, interleaved; a duplicate custom_id three chunks after its
  // first use, and one within a chunk; a bad line.
  std::ofstream a(dir + "/a.jsonl"), b(dir + "/b.jsonl");
  for (int i = 0; i < 12; ++i) {
    a << Line("a" + std::to_string(i), i % 2 ? "Rules one." : "Rules two.",
              "doc " + std::to_string(i))
      << "\n";
    b << Line("b" + std::to_string(i), i % 2 ? "Rules two." : "Rules one.",
              "doc " + std::to_string(i))
      << "\n";
  }
  a << Line("a1", "Rules one.", "again") << "\n"  // line 13: duplicate of line 2
    << "{broken\n"                                // line 14
    << Line("a12", "Rules one.", "x") << "\n"
    << Line("a12", "Rules one.", "y") << "\n";  // line 16: duplicate of line 15
  a.close();
  b.close();
  std::unique_ptr<jobs::Store> store;
  ASSERT_TRUE(jobs::Store::Open(dir + "/q.db", &store).ok());
  IngestOptions opt;
  opt.chunk_lines = 5;  // several chunks per file
  std::vector<IngestedJob> out;
  const UntrustedFile fa = Opened(dir + "/a.jsonl"), fb = Opened(dir + "/b.jsonl");
  const Status st = IngestFiles(
      store.get(), Context(),
      {{&fa, "a.jsonl", "", "{}", -1, ""}, {&fb, "b.jsonl", "", "{}", -1, ""}}, opt, &out);
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].job.total, 16);
  EXPECT_EQ(out[0].refused, 3);
  EXPECT_EQ(out[1].job.total, 12);
  EXPECT_EQ(out[1].refused, 0);
  // Hashed while read: the same digest as a separate pass.
  std::string sha;
  int64_t bytes = 0;
  ASSERT_TRUE(HashFile(fa, &sha, &bytes).ok());
  EXPECT_EQ(out[0].job.sha256, sha);
  std::optional<jobs::JobRecord> found;
  ASSERT_TRUE(store->FindJob("a.jsonl", sha, &found).ok());
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->refused, 3);
  // The error lines name the line and the field, and the first use wins.
  std::map<int64_t, std::string> errors;
  ASSERT_TRUE(store
                  ->ForEachResult(out[0].job.id,
                                  [&](int64_t line, bool is_error, std::string_view o,
                                      const jobs::ResultMetrics&) {
                                    if (is_error)
                                      errors[line] = testing::ErrorMessage(json::parse(o));
                                    return Status::Ok();
                                  })
                  .ok());
  ASSERT_EQ(errors.size(), 3u);
  EXPECT_NE(errors[13].find("a.jsonl:13: field 'custom_id': duplicate 'a1' (first on line 2)"),
            std::string::npos)
      << errors[13];
  EXPECT_NE(errors[14].find("a.jsonl:14"), std::string::npos) << errors[14];
  EXPECT_NE(errors[16].find("first on line 15"), std::string::npos) << errors[16];
  // Pending requests of both files come back in plan order; within one 5-line chunk those
  // sharing a system prompt are adjacent.
  std::vector<jobs::PendingRequest> pending;
  ASSERT_TRUE(store->NextPending(0, 100, &pending).ok());
  EXPECT_EQ(pending.size(), 12u + 13u);
  for (size_t i = 1; i < pending.size(); ++i)
    EXPECT_LT(pending[i - 1].plan_rank, pending[i].plan_rank);
}

// Issue 27: a job names the model its requests name (OpenAI's Batch API: one model per file). A
// line naming another is refused with an error naming file, line and field (the rest run), and
// does not take its custom_id; a line naming none is anyone's; a file naming none, a job of none.
TEST_F(IngestTest, AJobNamesItsRequestsModelAndALineNamingAnotherIsRefused) {
  const std::string dir = testing::CurrentTestDir();
  const auto with_model = [](const std::string& id, const std::string& model) {
    json j = json::parse(Line(id, "Rules.", "doc " + id));
    j["body"]["model"] = model;
    return j.dump();
  };
  std::ofstream(dir + "/m.jsonl") << Line("a", "Rules.", "doc a") << "\n"  // names none
                                  << with_model("b", "m1") << "\n"         // the job's model
                                  << with_model("c", "m2") << "\n"         // refused
                                  << with_model("d", "m1") << "\n"
                                  << with_model("c", "m1") << "\n";  // c is free: line 3 failed
  std::ofstream(dir + "/none.jsonl") << Line("x", "Rules.", "doc x") << "\n";
  std::unique_ptr<jobs::Store> store;
  ASSERT_TRUE(jobs::Store::Open(dir + "/q.db", &store).ok());
  IngestOptions opt;
  opt.chunk_lines = 2;  // the model is the job's across chunks
  std::vector<IngestedJob> out;
  ASSERT_TRUE(IngestOne(store.get(), dir, "m.jsonl", opt, &out).ok());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].job.model, "m1");
  EXPECT_EQ(out[0].refused, 1);
  jobs::JobRecord job;
  ASSERT_TRUE(store->GetJob(out[0].job.id, &job).ok());
  EXPECT_EQ(job.model, "m1");
  std::map<int64_t, json> errors;
  ASSERT_TRUE(store
                  ->ForEachResult(out[0].job.id,
                                  [&](int64_t line, bool is_error, std::string_view o,
                                      const jobs::ResultMetrics&) {
                                    if (is_error) errors[line] = json::parse(o);
                                    return Status::Ok();
                                  })
                  .ok());
  ASSERT_EQ(errors.size(), 1u);
  ASSERT_EQ(errors.count(3), 1u);
  EXPECT_NE(testing::ErrorMessage(errors[3]).find(
                "m.jsonl:3: field 'body.model': 'm2' is not the job's model 'm1' (named on line 2"),
            std::string::npos)
      << errors[3];
  EXPECT_NE(errors[3].dump().find("body.model"), std::string::npos) << errors[3];
  // A worker serving m2 has nothing to claim; one serving m1 claims the job.
  jobs::Claim c;
  ASSERT_TRUE(store->ClaimNextGroup("w2", 3600, 100, {"m2"}, &c).ok());
  EXPECT_TRUE(c.requests.empty());
  ASSERT_TRUE(store->ClaimNextGroup("w1", 3600, 100, {"m1"}, &c).ok());
  EXPECT_FALSE(c.requests.empty());

  ASSERT_TRUE(IngestOne(store.get(), dir, "none.jsonl", opt, &out).ok());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].job.model, "");
  ASSERT_TRUE(store->ClaimNextGroup("w2", 3600, 100, {"m2"}, &c).ok());
  EXPECT_EQ(c.requests.size(), 1u) << "a job naming no model is anyone's";
}

// Lines are validated by tasks on every thread while the file is read: the rows, ranks and error
// lines must not depend on how many threads there are (ctest runs tests on one OpenMP thread, so
// this test sets its own counts).
TEST_F(IngestTest, ValidationOnSeveralThreadsStoresWhatOneThreadStores) {
  const std::string dir = testing::CurrentTestDir();
  std::ofstream f(dir + "/big.jsonl");
  for (int i = 0; i < 5000; ++i) {
    if (i % 997 == 5)
      f << "{not json " << i << "\n";
    else if (i % 1301 == 7)  // a duplicate of an id 1,000 lines back: another task, another chunk
      f << Line("id" + std::to_string(i - 1000), "Rules.", "dup") << "\n";
    else
      f << Line("id" + std::to_string(i), i % 3 ? "Rules one." : "Rules two.",
                "doc " + std::to_string(i * 7919 % 5000))
        << "\n";
  }
  f.close();
  struct Row {
    int64_t line, rank;
    std::string custom_id, body;
    bool operator==(const Row&) const = default;
  };
  auto ingest = [&](int threads, std::vector<Row>* rows, std::map<int64_t, std::string>* errors) {
    omp_set_num_threads(threads);
    std::unique_ptr<jobs::Store> store;
    ASSERT_TRUE(jobs::Store::Open(dir + "/t" + std::to_string(threads) + ".db", &store).ok());
    IngestOptions opt;
    opt.chunk_lines = 3000;
    std::vector<IngestedJob> out;
    const Status st = IngestOne(store.get(), dir, "big.jsonl", opt, &out);
    omp_set_num_threads(1);
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(out[0].job.total, 5000);
    std::vector<jobs::PendingRequest> pending;
    ASSERT_TRUE(store->NextPending(0, 10000, &pending).ok());
    for (const jobs::PendingRequest& p : pending)
      rows->push_back({p.line, p.plan_rank, p.custom_id, p.body});
    ASSERT_TRUE(store
                    ->ForEachResult(out[0].job.id,
                                    [&](int64_t line, bool is_error, std::string_view o,
                                        const jobs::ResultMetrics&) {
                                      if (is_error) (*errors)[line] = std::string(o);
                                      return Status::Ok();
                                    })
                    .ok());
  };
  std::vector<Row> one, four;
  std::map<int64_t, std::string> errors_one, errors_four;
  ingest(1, &one, &errors_one);
  ingest(4, &four, &errors_four);
  // 6 broken lines (i % 997 == 5) and 3 duplicates (i = 1308, 2609, 3910; i = 7 has a new id).
  EXPECT_EQ(errors_one.size(), 6u + 3u);
  EXPECT_EQ(one.size(), 5000u - errors_one.size());
  EXPECT_TRUE(one == four);
  // The error lines carry request ids made from the job's id, which differs per store.
  ASSERT_EQ(errors_four.size(), errors_one.size());
  for (const auto& [line, o] : errors_one) {
    const json a = json::parse(o), b = json::parse(errors_four.at(line));
    EXPECT_EQ(a["custom_id"], b["custom_id"]) << line;
    EXPECT_EQ(a["error"], b["error"]) << line;
    EXPECT_EQ(a["response"]["body"], b["response"]["body"]) << line;
  }
}

// A job of nested shared prefixes, its lines interleaved: one system prompt over two templates
// (12 requests of "Translate", t2-*, and 6 of "Summarize", t1-*), a second system prompt over 3
// requests (s2-*) and a third over 1 (s3); documents differ from their first letter. Line 6 is
// refused. Returns the valid lines by custom_id.
std::map<std::string, std::string> WriteNestedJob(const std::string& path) {
  std::map<std::string, std::string> lines;
  std::ofstream f(path);
  auto add = [&](const std::string& id, const std::string& system, const std::string& user) {
    lines[id] = Line(id, system, user);
    f << lines[id] << "\n";
    if (lines.size() == 5) f << "{refused\n";
  };
  const std::string letters = "abcdefghijkl";
  for (int i = 0; i < 12; ++i) {
    const std::string doc = std::string(1, letters[i]) + " is the document.";
    add("t2-" + std::to_string(i), "Alpha rules.", "Translate: " + doc);
    if (i < 6) add("t1-" + std::to_string(i), "Alpha rules.", "Summarize: " + doc);
    if (i < 3) add("s2-" + std::to_string(i), "Beta rules.", "Count: " + doc);
  }
  add("s3", "Gamma rules.", "Hello.");
  return lines;
}

// The nested job (WriteNestedJob) ingested into the queue at `location` with claim groups of at
// most 8 requests, then checked: its claim groups, and its shared prefixes in its options.
class NestedJobTest : public IngestTest {
 protected:
  void SetUp() override { dir_ = testing::CurrentTestDir(); }
  void Ingest(const std::string& location) {
    lines_ = WriteNestedJob(dir_ + "/nested.jsonl");
    ASSERT_TRUE(jobs::Store::Open(location, &store_).ok());
    IngestOptions opt;
    opt.claim_group_max = 8;
    std::vector<IngestedJob> out;
    const Status st = IngestOne(store_.get(), dir_, "nested.jsonl", opt, &out);
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(out[0].refused, 1);
    job_ = out[0].job;
  }

  // Claim groups (issue 27): the stored plan groups, claimed one after another by a worker, are
  // the planned chunk cut along its prefix tree into groups of at most 8 requests: the 12
  // "Translate" requests in 8 + 4, the 6 "Summarize" ones whole, the small second and third system
  // prompts packed into one claim.
  void ExpectClaimGroups() {
    jobs::WorkerInfo w;
    w.id = "w1";
    ASSERT_TRUE(store_->RegisterWorker(w).ok());
    std::vector<std::vector<std::string>> claims;
    for (;;) {
      jobs::Claim c;
      ASSERT_TRUE(store_->ClaimNextGroup("w1", 600, 1000, &c).ok());
      if (c.requests.empty()) break;
      EXPECT_EQ(c.plan_group, c.requests[0].plan_rank) << "named by its first request's rank";
      claims.emplace_back();
      for (const jobs::PendingRequest& r : c.requests) claims.back().push_back(r.custom_id);
    }
    auto ids = [](const std::string& stem, int from, int to) {
      std::vector<std::string> v;
      for (int i = from; i < to; ++i) v.push_back(stem + std::to_string(i));
      return v;
    };
    std::vector<std::string> small = ids("s2-", 0, 3);
    small.push_back("s3");
    // The larger template first (the planner's order), then the smaller, then the small groups.
    EXPECT_EQ(claims, (std::vector<std::vector<std::string>>{ids("t2-", 0, 8), ids("t2-", 8, 12),
                                                             ids("t1-", 0, 6), small}));
  }

  // The job's largest shared-prefix groups, in prompt tokens, are recorded in its options
  // (jobs/shared_prefixes.h, issue 29).
  void ExpectSharedPrefixes() {
    jobs::JobRecord job;
    ASSERT_TRUE(store_->GetJob(job_.id, &job).ok());
    EXPECT_EQ(job.options, job_.options);
    std::vector<jobs::SharedPrefix> groups;
    ASSERT_TRUE(jobs::SharedPrefixesOf(job.options, &groups)) << job.options;
    const int64_t header = Shared("t2-0", "s3"), alpha = Shared("t2-0", "t1-0");
    const int64_t translate = Shared("t2-0", "t2-11"), summarize = Shared("t1-0", "t1-5");
    EXPECT_LT(header, alpha);
    EXPECT_LT(alpha, translate);
    // Every valid request shares the chat format's opening; then the system prompts, then the
    // templates inside the first one.
    std::vector<jobs::SharedPrefix> expected = {{header, 22, 1},
                                                {alpha, 18, 2},
                                                {translate, 12, 3},
                                                {summarize, 6, 3},
                                                {Shared("s2-0", "s2-2"), 3, 2}};
    std::sort(expected.begin(), expected.end(),
              [](const auto& x, const auto& y) { return x.Saved() > y.Saved(); });
    EXPECT_EQ(groups, expected);
  }

  // The prompt tokens two lines share, as the engine gets them.
  int64_t Shared(const std::string& a, const std::string& b) const {
    std::vector<int> ids[2];
    for (int i = 0; i < 2; ++i) {
      const jobs::BatchRequest r = jobs::ParseBatchLine(lines_.at(i ? b : a), 1, "nested.jsonl");
      EXPECT_TRUE(PromptIds(Context(), r, "nested.jsonl", &ids[i]).ok());
    }
    return int64_t(std::mismatch(ids[0].begin(), ids[0].end(), ids[1].begin(), ids[1].end()).first -
                   ids[0].begin());
  }

  std::string dir_;
  std::map<std::string, std::string> lines_;
  std::unique_ptr<jobs::Store> store_;
  jobs::JobRecord job_;
};

TEST_F(NestedJobTest, ClaimGroupsFollowTheNestedPrefixes) {
  Ingest(dir_ + "/q.db");
  ExpectClaimGroups();
}

TEST_F(NestedJobTest, TheLargestSharedPrefixesAreRecordedInTheJobsOptions) {
  Ingest(dir_ + "/q.db");
  ExpectSharedPrefixes();
}

// The same on a PostgreSQL queue (the options set inside the ingest's transaction; claims taken
// with FOR UPDATE SKIP LOCKED).
TEST_F(NestedJobTest, PostgresQueueStoresTheSameClaimGroupsAndSharedPrefixes) {
  testing::PgTestDatabase db;
  LLMQ_SKIP_WITHOUT_POSTGRES(db);
  Ingest(db.url());
  ExpectSharedPrefixes();
  ExpectClaimGroups();
}

TEST_F(IngestTest, AFileChangedWhileReadRollsEverythingBackAndIsNamed) {
  const std::string dir = testing::CurrentTestDir();
  std::ofstream(dir + "/a.jsonl") << Line("a", "s", "u") << "\n";
  std::ofstream(dir + "/b.jsonl") << Line("b", "s", "u") << "\n";
  std::unique_ptr<jobs::Store> store;
  ASSERT_TRUE(jobs::Store::Open(dir + "/q.db", &store).ok());
  const UntrustedFile fa = Opened(dir + "/a.jsonl"), fb = Opened(dir + "/b.jsonl");
  // Appended to after it was opened: what was read is not the file any more.
  std::ofstream(dir + "/b.jsonl", std::ios::app) << Line("b2", "s", "u") << "\n";
  std::vector<IngestedJob> out;
  size_t changed = 99;
  Status st = IngestFiles(store.get(), Context(),
                          {{&fa, "a.jsonl", "", "{}", -1, ""}, {&fb, "b.jsonl", "", "{}", -1, ""}},
                          {}, &out, nullptr, &changed);
  EXPECT_EQ(st.code(), Status::Code::kIoError);
  EXPECT_NE(st.message().find("b.jsonl: changed while it was being read"), std::string::npos)
      << st.message();
  EXPECT_EQ(changed, 1u);
  std::vector<jobs::JobRecord> jobs;
  ASSERT_TRUE(store->ListJobs(&jobs).ok());
  EXPECT_TRUE(jobs.empty()) << "all or nothing";

  // Replaced under its name (the inbox's entry is another file now): refused as well.
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(dir_fd, 0);
  const UntrustedFile fa2 = Opened(dir + "/a.jsonl");
  std::ofstream(dir + "/new.jsonl") << Line("n", "s", "u") << "\n";
  ASSERT_EQ(::rename((dir + "/new.jsonl").c_str(), (dir + "/a.jsonl").c_str()), 0);
  IngestFile in{&fa2, "a.jsonl", "", "{}", dir_fd, "a.jsonl"};
  st = IngestFiles(store.get(), Context(), {in}, {}, &out, nullptr, &changed);
  EXPECT_NE(st.message().find("a.jsonl: was removed or replaced while it was being read"),
            std::string::npos)
      << st.message();
  EXPECT_EQ(changed, 0u);
  ASSERT_TRUE(store->ListJobs(&jobs).ok());
  EXPECT_TRUE(jobs.empty());
  // The same entry, unchanged: accepted.
  const UntrustedFile fa3 = Opened(dir + "/a.jsonl");
  in.file = &fa3;
  st = IngestFiles(store.get(), Context(), {in}, {}, &out, nullptr, &changed);
  EXPECT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(changed, 1u);
  ::close(dir_fd);
}

}  // namespace
}  // namespace llmq
