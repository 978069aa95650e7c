// `llmq serve` end to end on the real binary: files dropped into inbox/ (written slowly in place,
// renamed in, with bad lines), the same file dropped again, `llmq submit`, `llmq status`,
// `llmq cancel`, SIGTERM with a restart, and files refused whole. Every test stops its daemon,
// on failure too.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <span>
#include <thread>

#include "daemon/request_builder.h"
#include "engine/model/model.h"
#include "tests/serve_fixture.h"
#include "tests/test_util.h"

namespace llmq::testing {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

std::string Job(const std::string& prefix, int count, int max_tokens) {
  std::string s;
  for (int i = 0; i < count; ++i)
    s += CompletionLine(prefix + "-" + std::to_string(i),
                        "Summarize: " + prefix + " " + std::to_string(i), max_tokens);
  return s;
}

class ServeTest : public ServeCase {
 protected:
  void SetUp() override {
    ServeCase::SetUp();
    WriteConfig(5);
  }

  // `max_num_seqs` small: a job runs long enough to be interrupted. `spool` is appended to the
  // spool section (other keys, e.g. "  group_window_ms: 1000\n").
  void WriteConfig(double drain_seconds, int max_num_seqs = 256, int block_size = 16,
                   double settle_seconds = 0.2, const std::string& spool = "") {
    WriteServeConfig(config_, {.model = model_,
                               .state = state_,
                               .settle_seconds = settle_seconds,
                               .drain_seconds = drain_seconds,
                               .spool_extra = spool,
                               .engine = "  max_num_seqs: " + std::to_string(max_num_seqs) +
                                         "\n  block_size: " + std::to_string(block_size) + "\n"});
  }

  void Start() {
    ASSERT_EQ(pid_, -1);
    fs::remove(err_file());  // a restart must not take the last start's "serving" for its own
    pid_ = SpawnLlmq({"serve", "--config", config_}, dir_ + "/serve.out", err_file());
    // Up when its folders exist and it has said so.
    ASSERT_TRUE(
        WaitFor([&] { return ReadText(err_file()).find("serving") != std::string::npos; }, 20))
        << ReadText(err_file());
  }

  // SIGTERM; the exit status (or -1 when it did not exit within `seconds`).
  int Stop(double seconds) {
    if (pid_ < 0) return -1;
    kill(pid_, SIGTERM);
    int status = -1;
    const bool exited = ExitedWithin(pid_, seconds, &status);
    if (exited) pid_ = -1;
    return exited ? status : -1;
  }

  RunResult Cli(std::vector<std::string> args) {
    args.push_back("--config");
    args.push_back(config_);
    return RunLlmqWith({}, args);
  }

  int64_t Completed(const std::string& job) {
    const json j = StatusOf(job);
    return j.contains("request_counts") ? j["request_counts"]["completed"].get<int64_t>() : -1;
  }
};

TEST_F(ServeTest, SlowRenamedAndBadFilesRunOnceAndSubmitRunsToo) {
  Start();
  // Written in place in pieces, with pauses shorter than a rescan period, then closed.
  const std::string slow = Job("slow", 12, 4);
  {
    std::ofstream f(inbox("slow.jsonl"), std::ios::binary);
    for (size_t at = 0; at < slow.size(); at += slow.size() / 3 + 1) {
      f << slow.substr(at, slow.size() / 3 + 1) << std::flush;
      std::this_thread::sleep_for(std::chrono::milliseconds(150));
    }
  }
  Drop("renamed.jsonl", Job("renamed", 8, 4));
  std::string bad = Job("bad", 10, 4);
  bad += "{not json\n";
  bad += "{\"custom_id\": \"b1\", \"method\": \"POST\"}\n";
  bad += CompletionLine("bad-3", "duplicate id", 4);  // custom_id already on line 4
  bad +=
      "{\"custom_id\": \"b2\", \"method\": \"POST\", \"url\": \"/v1/embeddings\", \"body\": {}}\n";
  bad +=
      "{\"custom_id\": \"b3\", \"method\": \"POST\", \"url\": \"/v1/completions\", "
      "\"body\": {\"prompt\": \"x\", \"max_tokens\": \"many\"}}\n";
  Drop("bad.jsonl", bad);

  ASSERT_TRUE(Finalized("slow") && Finalized("renamed") && Finalized("bad"))
      << ReadText(err_file());
  EXPECT_EQ(ReadJsonl(outbox("slow.results.jsonl")).size(), 12u);
  EXPECT_EQ(ReadJsonl(outbox("slow.errors.jsonl")).size(), 0u);
  EXPECT_EQ(ReadJsonl(outbox("renamed.results.jsonl")).size(), 8u);
  EXPECT_EQ(ReadJsonl(outbox("bad.results.jsonl")).size(), 10u);
  const auto errors = ReadJsonl(outbox("bad.errors.jsonl"));
  ASSERT_EQ(errors.size(), 5u);
  for (const json& e : errors)
    EXPECT_NE(testing::ErrorMessage(e).find("bad.jsonl:1"), std::string::npos) << e.dump();
  const json sum = json::parse(ReadText(outbox("bad.summary.json")));
  EXPECT_EQ(sum["requests"], 15);
  EXPECT_EQ(sum["failed"], 5);
  EXPECT_TRUE(fs::exists(state_ + "/archive/slow.jsonl"));
  EXPECT_EQ(ReadText(state_ + "/archive/slow.jsonl"), slow) << "taken before it was complete";

  // The same file again: refused, naming the job, never run twice.
  const std::string slow_id = StatusOf("slow.jsonl")["id"];
  const std::string results_before = ReadText(outbox("slow.results.jsonl"));
  Drop("slow.jsonl", slow);
  ASSERT_TRUE(WaitFor([&] { return fs::exists(state_ + "/failed/slow.jsonl.reason.txt"); }, 10))
      << ReadText(err_file());
  EXPECT_NE(ReadText(state_ + "/failed/slow.jsonl.reason.txt").find(slow_id), std::string::npos);
  EXPECT_EQ(ReadText(outbox("slow.results.jsonl")), results_before);

  // A fourth job through llmq submit.
  const std::string sub = dir_ + "/submitted.jsonl";
  std::ofstream(sub) << Job("sub", 6, 4);
  const auto r = Cli({"submit", sub});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string sub_id = r.out.substr(0, r.out.find('\n'));
  EXPECT_EQ(sub_id.rfind("batch_", 0), 0u) << r.out;
  ASSERT_TRUE(Finalized("submitted")) << ReadText(err_file());
  EXPECT_EQ(ReadJsonl(outbox("submitted.results.jsonl")).size(), 6u);
  // The summary is written before the job's status is set: its log line says it is.
  ASSERT_TRUE(WaitFor(
      [&] { return ReadText(err_file()).find("finalized " + sub_id) != std::string::npos; }, 30))
      << ReadText(err_file());

  // llmq status --json: every job with its counts.
  const auto st = Cli({"status", "--json"});
  ASSERT_EQ(st.exit_code, 0) << st.err;
  const json all = json::parse(st.out);
  ASSERT_EQ(all.size(), 4u) << st.out;
  std::map<std::string, json> by_name;
  for (const json& j : all) by_name[j["name"]] = j;
  EXPECT_EQ(by_name["slow.jsonl"]["request_counts"],
            (json{{"total", 12}, {"completed", 12}, {"failed", 0}}));
  EXPECT_EQ(by_name["bad.jsonl"]["request_counts"],
            (json{{"total", 15}, {"completed", 10}, {"failed", 5}}));
  EXPECT_EQ(by_name["submitted.jsonl"]["id"], sub_id);
  for (const json& j : all) EXPECT_EQ(j["status"], "completed") << j.dump();
  const auto list = Cli({"list"});
  EXPECT_EQ(list.exit_code, 0);
  EXPECT_NE(list.out.find(sub_id), std::string::npos) << list.out;

  EXPECT_EQ(Stop(10), 0) << ReadText(err_file());
  const std::string log = ReadText(err_file());
  EXPECT_NE(log.find("accepted inbox/bad.jsonl as batch_"), std::string::npos) << log;
  EXPECT_NE(log.find("5 refused"), std::string::npos) << log;
}

// A file renamed in is complete: it waits the group window, not the settle time. One that is
// written to after the rename (appended, or still open for writing) waits the settle time from
// its last change, and is taken whole. (How long each waits: tests/inbox_settle_test.cpp, on a
// clock the test moves; here, through the binary, that nothing is taken half-written.)
TEST_F(ServeTest, RenamedInFilesWaitOnlyTheGroupWindow) {
  WriteConfig(5, 256, 16, /*settle_seconds=*/5, "  group_window_ms: 1000\n");
  Start();
  auto archived = [&](const std::string& name) { return fs::exists(state_ + "/archive/" + name); };
  Drop("quick.jsonl", Job("quick", 3, 2));
  ASSERT_TRUE(WaitFor([&] { return archived("quick.jsonl"); }, 20)) << ReadText(err_file());

  // Renamed in, then appended to (a writer that renames first and writes on).
  const std::string first = Job("grown", 2, 2), rest = Job("grown-more", 3, 2);
  Drop("grown.jsonl", first);
  {
    std::ofstream f(inbox("grown.jsonl"), std::ios::app | std::ios::binary);
    f << rest;
  }
  // Renamed in while its writer still holds it open, written to after the rename.
  const std::string held_text = Job("held", 4, 2);
  const std::string staging = dir_ + "/held.jsonl.staging";
  {
    std::ofstream f(staging, std::ios::binary);
    f << held_text.substr(0, 10) << std::flush;
    fs::rename(staging, inbox("held.jsonl"));
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // past the group window
    f << held_text.substr(10);
  }
  ASSERT_TRUE(WaitFor([&] { return archived("grown.jsonl") && archived("held.jsonl"); }, 30))
      << ReadText(err_file());
  EXPECT_EQ(ReadText(state_ + "/archive/grown.jsonl"), first + rest) << "taken half-written";
  EXPECT_EQ(ReadText(state_ + "/archive/held.jsonl"), held_text) << "taken half-written";
  ASSERT_TRUE(Finalized("quick") && Finalized("grown") && Finalized("held"))
      << ReadText(err_file());
  EXPECT_EQ(ReadJsonl(outbox("grown.results.jsonl")).size(), 5u);
  EXPECT_EQ(ReadJsonl(outbox("held.results.jsonl")).size(), 4u);
  EXPECT_EQ(Stop(10), 0) << ReadText(err_file());
}

// Ingest reads a file once and leaves it to the queue to spot a file it has accepted before;
// then the files are looked up one by one: the duplicate is refused naming its job, a file
// dropped with it runs all the same, and a file whose job was stored just before a crash (its
// move to archive/ interrupted) is moved on, never run as a second job.
TEST_F(ServeTest, DuplicatesAreRefusedAmongNewFilesAndAnInterruptedMoveIsFinished) {
  Start();
  const std::string a = Job("a", 3, 2), b = Job("b", 2, 2), c = Job("c", 4, 2);
  Drop("a.jsonl", a);
  Drop("b.jsonl", b);
  ASSERT_TRUE(Finalized("a") && Finalized("b")) << ReadText(err_file());
  const std::string a_id = StatusOf("a.jsonl")["id"], b_id = StatusOf("b.jsonl")["id"];

  Drop("a.jsonl", a);  // again, with a new file
  Drop("c.jsonl", c);
  ASSERT_TRUE(Finalized("c")) << ReadText(err_file());
  ASSERT_TRUE(WaitFor([&] { return fs::exists(state_ + "/failed/a.jsonl.reason.txt"); }, 10))
      << ReadText(err_file());
  EXPECT_NE(ReadText(state_ + "/failed/a.jsonl.reason.txt").find(a_id), std::string::npos);
  EXPECT_EQ(ReadJsonl(outbox("c.results.jsonl")).size(), 4u);

  // As if the daemon had died between storing b's job and moving b.jsonl to archive/.
  ASSERT_EQ(Stop(10), 0) << ReadText(err_file());
  fs::rename(state_ + "/archive/b.jsonl", inbox("b.jsonl"));
  Start();
  const std::string moved_on = "inbox/b.jsonl: already accepted as " + b_id;
  ASSERT_TRUE(WaitFor([&] { return ReadText(err_file()).find(moved_on) != std::string::npos; }, 10))
      << ReadText(err_file());
  EXPECT_TRUE(fs::exists(state_ + "/archive/b.jsonl"));
  EXPECT_FALSE(fs::exists(inbox("b.jsonl")));

  const auto all = json::parse(Cli({"list", "--json"}).out);
  std::multiset<std::string> names;
  for (const json& j : all) names.insert(j["name"].get<std::string>());
  EXPECT_EQ(names, (std::multiset<std::string>{"a.jsonl", "b.jsonl", "c.jsonl"}));
  EXPECT_EQ(Stop(10), 0) << ReadText(err_file());
}

TEST_F(ServeTest, CancelEndsARunningJobWithItsFinishedResults) {
  WriteConfig(5, 1);
  Start();
  // One request at a time, long enough that the cancel (a CLI process away) lands mid-job.
  constexpr size_t kCount = 2000;
  Drop("long.jsonl", Job("long", kCount, 64));
  // Wait until some requests are finished, then cancel.
  ASSERT_TRUE(WaitFor([&] { return Completed("long.jsonl") >= 4; }, 20)) << ReadText(err_file());
  const auto c = Cli({"cancel", "long.jsonl"});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  ASSERT_TRUE(WaitFor([&] { return StatusOf("long.jsonl")["status"] == "cancelled"; }, 20))
      << ReadText(err_file());
  ASSERT_TRUE(Finalized("long", 5));
  const json s = StatusOf("long.jsonl");
  const auto results = ReadJsonl(outbox("long.results.jsonl"));
  const auto errors = ReadJsonl(outbox("long.errors.jsonl"));
  EXPECT_GE(results.size(), 4u);
  EXPECT_GT(errors.size(), 0u) << "the job should still have been running";
  EXPECT_EQ(results.size() + errors.size(), kCount);
  EXPECT_EQ(s["request_counts"]["completed"].get<size_t>(), results.size());
  std::set<std::string> ids;
  for (const auto* v : {&results, &errors})
    for (const json& o : *v) EXPECT_TRUE(ids.insert(o["custom_id"]).second) << o.dump();
  for (const json& e : errors) {  // a failure outside HTTP: top-level error, OpenAI's code
    EXPECT_NE(testing::ErrorMessage(e).find("cancelled"), std::string::npos);
    EXPECT_TRUE(e["response"].is_null()) << e;
    EXPECT_EQ(e["error"]["code"], "batch_cancelled") << e;
  }
  // Cancelling a finished job is refused.
  EXPECT_NE(Cli({"cancel", "long.jsonl"}).exit_code, 0);
  EXPECT_EQ(Stop(10), 0) << ReadText(err_file());
}

TEST_F(ServeTest, SigtermDrainsAndARestartCompletesWithNothingLostOrDuplicated) {
  WriteConfig(1, 1);
  Start();
  Drop("big.jsonl", Job("big", 100, 64));
  ASSERT_TRUE(
      WaitFor([&] { return StatusOf("big.jsonl")["request_counts"]["completed"] >= 5; }, 20))
      << ReadText(err_file());
  EXPECT_EQ(Stop(10), 0) << ReadText(err_file());
  // One request at a time (max_num_seqs 1): the drain lets the admitted one finish and starts no
  // other, so the job is left in progress whatever the machine's speed.
  const json mid = StatusOf("big.jsonl");
  ASSERT_EQ(mid["status"], "in_progress") << ReadText(err_file());
  const int64_t kept = mid["request_counts"]["completed"];
  EXPECT_NE(ReadText(err_file()).find("SIGTERM: draining: no new requests start"),
            std::string::npos);
  EXPECT_NE(ReadText(err_file())
                .find("stopped; " + std::to_string(100 - kept) +
                      " request(s) left pending, run after a restart"),
            std::string::npos)
      << "the queue's count\n"
      << ReadText(err_file());

  Start();
  ASSERT_TRUE(Finalized("big", 25)) << ReadText(err_file());
  const auto results = ReadJsonl(outbox("big.results.jsonl"));
  ASSERT_EQ(results.size(), 100u);
  EXPECT_EQ(ReadJsonl(outbox("big.errors.jsonl")).size(), 0u);
  std::set<std::string> ids;
  for (const json& o : results) EXPECT_TRUE(ids.insert(o["custom_id"]).second) << o.dump();
  // The summary is written just before the job becomes completed (JobLifecycle::Finalize): a
  // status read in between says finalizing.
  json end;
  EXPECT_TRUE(WaitFor(
      [&] {
        end = StatusOf("big.jsonl");
        return end["status"] == "completed";
      },
      20))
      << end.dump();
  EXPECT_EQ(end["request_counts"]["completed"], 100);
  EXPECT_GE(end["request_counts"]["completed"].get<int64_t>(), kept);
  EXPECT_EQ(Stop(10), 0) << ReadText(err_file());
}

TEST_F(ServeTest, RefusesWholeFilesThatCannotRunAndIgnoresTemporaries) {
  Start();
  Drop("empty.jsonl", "");
  Drop("blank.jsonl", "\n  \n");
  Drop("binary.jsonl", std::string("{\"a\": 1}\n\0\x01\x02", 12));
  Drop("latin1.jsonl",
       "{\"custom_id\": \"x\", \"method\": \"POST\", \"url\": \"/v1/completions\", "
       "\"body\": {\"prompt\": \"caf\xe9\"}}\n");
  Drop("allbad.jsonl", "{nope\n[1, 2]\n");
  const std::string target = dir_ + "/target.jsonl";
  std::ofstream(target) << Job("t", 2, 4);
  fs::create_symlink(target, inbox("link.jsonl"));
  fs::create_directory(inbox("folder.jsonl"));
  ASSERT_EQ(mkfifo(inbox("fifo.jsonl").c_str(), 0644), 0);
  Drop(".hidden.jsonl", Job("h", 2, 4));
  Drop("partial.jsonl.tmp", Job("p", 2, 4));
  Drop("partial.jsonl.part", Job("p", 2, 4));
  Drop("good.jsonl", Job("good", 3, 4));
  ASSERT_TRUE(Finalized("good")) << ReadText(err_file());
  const std::map<std::string, std::string> want = {
      {"empty.jsonl", "empty"},      {"blank.jsonl", "empty"},     {"binary.jsonl", "NUL"},
      {"latin1.jsonl", "not UTF-8"}, {"allbad.jsonl", "no valid"}, {"link.jsonl", "symbolic link"},
      {"folder.jsonl", "folder"},    {"fifo.jsonl", "FIFO"}};
  for (const auto& [name, why] : want) {
    const std::string reason = state_ + "/failed/" + name + ".reason.txt";
    ASSERT_TRUE(WaitFor([&] { return fs::exists(reason); }, 5)) << name << "\n"
                                                                << ReadText(err_file());
    EXPECT_NE(ReadText(reason).find(why), std::string::npos) << name << ": " << ReadText(reason);
    EXPECT_TRUE(fs::exists(fs::symlink_status(state_ + "/failed/" + name))) << name;
    EXPECT_FALSE(fs::exists(fs::symlink_status(inbox(name)))) << name;
  }
  EXPECT_TRUE(fs::exists(target)) << "a refused symlink's target is left alone";
  for (const char* name : {".hidden.jsonl", "partial.jsonl.tmp", "partial.jsonl.part"})
    EXPECT_TRUE(fs::exists(inbox(name))) << name << " should be ignored";
  const auto st = Cli({"list", "--json"});
  ASSERT_EQ(st.exit_code, 0) << st.err;
  EXPECT_EQ(json::parse(st.out).size(), 1u) << st.out;  // only good.jsonl became a job
  EXPECT_NE(ReadText(err_file()).find("failed/empty.jsonl: empty"), std::string::npos)
      << ReadText(err_file());
  EXPECT_EQ(Stop(10), 0) << ReadText(err_file());
}

TEST_F(ServeTest, SighupReloadsTheSpoolKeysAndSubmitWaitWaitsForTheResults) {
  Start();
  WriteConfig(7);
  kill(pid_, SIGHUP);
  ASSERT_TRUE(WaitFor(
      [&] { return ReadText(err_file()).find("SIGHUP: reloaded") != std::string::npos; }, 5))
      << ReadText(err_file());
  EXPECT_NE(ReadText(err_file()).find("drain 7s"), std::string::npos) << ReadText(err_file());

  const std::string sub = dir_ + "/waited.jsonl";
  std::ofstream(sub) << Job("w", 4, 4);
  const auto r = Cli({"submit", sub, "--wait"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(StatusOf("waited.jsonl")["status"], "completed");
  EXPECT_TRUE(fs::exists(outbox("waited.summary.json")));
  // Submitting the same file again is refused, naming the job.
  const auto again = Cli({"submit", sub});
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_NE(again.err.find(r.out.substr(0, r.out.find('\n'))), std::string::npos) << again.err;
  EXPECT_EQ(Stop(10), 0) << ReadText(err_file());
}

// Three files sharing one long system prompt, dropped together: one scan accepts them (one ingest
// plans them as one window), and the engine computes their shared prefix once. The prompt tokens
// computed, read from the three summaries, are within 1.05x of the unique tokens of the prompts'
// prefix tree, counted here independently: every prompt tokenized through the library (the
// daemon's own line -> request path), the set of distinct prefixes counted.
TEST_F(ServeTest, FilesDroppedTogetherShareTheirSystemPromptAcrossJobs) {
  std::string system = "You are a careful assistant for the archive office.";
  for (int i = 0; i < 4; ++i)
    system += " Rule " + std::to_string(i + 1) +
              ": keep every name, date and number exactly as written, and answer in one line.";
  const char* tasks[] = {"Summarize", "Translate to plain words", "List the people named in"};
  std::vector<std::string> lines;
  std::string texts[3];
  for (int f = 0; f < 3; ++f)
    for (int i = 0; i < 24; ++i) {
      const std::string user = std::string(tasks[f]) + " record " + std::to_string(f * 100 + i) +
                               ": the parcel " + std::to_string(i * 37 % 91) +
                               " left the north depot on day " + std::to_string(i + 3) +
                               " with clerk number " + std::to_string(i * 13 % 29) + ".";
      const std::string line = json{
          {"custom_id", "r" + std::to_string(f) + "-" + std::to_string(i)},
          {"method", "POST"},
          {"url", "/v1/chat/completions"},
          {"body",
           {{"messages",
             {{{"role", "system"}, {"content", system}}, {{"role", "user"}, {"content", user}}}},
            {"max_tokens", 2},
            {"temperature", 0}}}}.dump();
      texts[f] += line + "\n";
      lines.push_back(line);
    }

  // The unique tokens of the combined prefix tree.
  Model model;
  ASSERT_TRUE(LoadModel(model_, &model).ok());
  BuildContext ctx;
  ctx.model = &model;
  ASSERT_TRUE(ChatFormat::Load(model_, "", *model.tokenizer, &ctx.chat).ok());
  ctx.capacity = model.cfg.max_position_embeddings;
  std::vector<std::vector<int32_t>> prompts;
  for (const std::string& line : lines) {
    const jobs::BatchRequest b = jobs::ParseBatchLine(line, 1, "x.jsonl");
    ASSERT_TRUE(b.error.empty()) << b.error;
    Request r;
    const Status st = BuildRequest(ctx, b, "x.jsonl", "batch_x", &r);
    ASSERT_TRUE(st.ok()) << st.message();
    prompts.push_back(r.prompt_ids);
  }
  // The prefix tree's tokens: the distinct prefixes of every length.
  std::set<std::vector<int32_t>> prefixes;
  for (const auto& p : prompts)
    for (size_t n = 1; n <= p.size(); ++n) prefixes.emplace(p.begin(), p.begin() + n);
  const int64_t unique = static_cast<int64_t>(prefixes.size());
  int64_t prompt_tokens = 0;
  for (const auto& p : prompts) prompt_tokens += static_cast<int64_t>(p.size());
  size_t shared = 0;
  while (shared < prompts[0].size() && prompts[0][shared] == prompts.back()[shared]) ++shared;
  ASSERT_GT(shared, 150u) << "the system prompt should be long";

  // Block 16 (the default) and block 4: the shared prefix is computed once across the three jobs,
  // and reuse is token-granular (the prompts diverge inside a block, not at its boundary), so the
  // computed tokens are within 1.05x of the prefix tree's whatever the block size.
  for (const int block : {16, 4}) {
    state_ = dir_ + "/state" + std::to_string(block);
    WriteConfig(5, 256, block);
    Start();
    // Renamed in back to back: the watcher sees them within milliseconds of each other.
    for (int f = 0; f < 3; ++f) Drop("shared" + std::to_string(f) + ".jsonl", texts[f]);
    for (int f = 0; f < 3; ++f)
      ASSERT_TRUE(Finalized("shared" + std::to_string(f))) << ReadText(err_file());
    int64_t computed = 0, prompt = 0;
    for (int f = 0; f < 3; ++f) {
      const json s = json::parse(ReadText(outbox("shared" + std::to_string(f) + ".summary.json")));
      computed += s["computed_prompt_tokens"].get<int64_t>();
      prompt += s["prompt_tokens"].get<int64_t>();
    }
    EXPECT_EQ(prompt, prompt_tokens);
    const std::string log = ReadText(err_file());
    EXPECT_NE(log.find("accepting 3 files together"), std::string::npos) << log;
    std::printf("block %d: prompt tokens %lld, unique (prefix tree) %lld, computed %lld (%.3fx)\n",
                block, static_cast<long long>(prompt), static_cast<long long>(unique),
                static_cast<long long>(computed), static_cast<double>(computed) / unique);
    EXPECT_LE(static_cast<double>(computed), 1.05 * static_cast<double>(unique)) << log;
    EXPECT_GE(computed, unique) << "every distinct prefix is computed at least once";
    EXPECT_EQ(Stop(10), 0) << log;
  }
}

}  // namespace
}  // namespace llmq::testing
