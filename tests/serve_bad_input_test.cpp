// `llmq serve` against a corpus of bad input, end to end on the real binary, with ONE daemon for
// the whole table: every case drops its files, then the daemon must still be running, every good
// line of a case's file must have its result, and every bad thing must be named (an error line
// naming file, line and field; failed/<name> + <name>.reason.txt naming the reason; or a log
// line naming the path and the reason for environment failures). Environment cases (a database
// locked by another connection, a read-only or full outbox) run one after the other at the end;
// a corrupt database at start-up runs a second daemon that must refuse to start.
#include <signal.h>
#include <sqlite3.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "tests/serve_fixture.h"
#include "tests/test_util.h"

namespace llmq::testing {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// A completions line with `body` fields merged over a good one's.
std::string With(const std::string& id, const json& body) {
  json b = {{"prompt", "Hello " + id}, {"max_tokens", 2}, {"ignore_eos", true}};
  for (const auto& [k, v] : body.items()) b[k] = v;
  return json{{"custom_id", id}, {"method", "POST"}, {"url", "/v1/completions"}, {"body", b}}
             .dump() +
         "\n";
}

// What a case must produce.
struct Expect {
  // A job: the stem of its outbox files, the custom_ids that must have results (exactly), and
  // one substring per error line (each must be in a different error line's message).
  std::string stem = {};
  std::vector<std::string> good = {};
  std::vector<std::string> errors = {};
  // A whole-file refusal: failed/<failed> and a reason containing `reason`.
  std::string failed = {}, reason = {};
  // Names that must stay in inbox/ (ignored), or must never become a job.
  std::vector<std::string> left_in_inbox = {}, no_job = {};
};

class ServeBadInputTest : public ServeFixture {
 protected:
  void SetUp() override {
    ServeFixture::SetUp();
    WriteConfig("  max_line_bytes: 1MiB\n");
  }
  void TearDown() override {
    for (const std::string& m : mounts_) umount2(m.c_str(), MNT_DETACH);
    ServeFixture::TearDown();
  }

  // Checks one case's outcome (waiting up to `seconds` for it).
  void Check(const std::string& name, const Expect& e, double seconds) {
    SCOPED_TRACE("case " + name);
    if (!e.failed.empty()) {
      const std::string reason = state_ + "/failed/" + e.failed + ".reason.txt";
      ASSERT_TRUE(WaitFor([&] { return fs::exists(reason); }, seconds)) << Log();
      EXPECT_NE(ReadText(reason).find(e.reason), std::string::npos) << ReadText(reason);
      EXPECT_TRUE(fs::exists(fs::symlink_status(state_ + "/failed/" + e.failed)));
      // The log line follows the reason file.
      EXPECT_TRUE(WaitFor(
          [&] { return Log().find("failed/" + e.failed + ": ") != std::string::npos; }, seconds))
          << Log();
    }
    if (!e.stem.empty()) {
      ASSERT_TRUE(Finalized(e.stem, seconds)) << Log();
      std::multiset<std::string> got, want(e.good.begin(), e.good.end());
      for (const json& r : ReadJsonl(outbox(e.stem + ".results.jsonl"))) {
        got.insert(r["custom_id"].get<std::string>());
        EXPECT_EQ(r["response"]["status_code"], 200) << r.dump();
      }
      EXPECT_EQ(got, want) << "every good line has its result, once";
      const auto errors = ReadJsonl(outbox(e.stem + ".errors.jsonl"));
      ASSERT_EQ(errors.size(), e.errors.size()) << ReadText(outbox(e.stem + ".errors.jsonl"));
      std::vector<bool> used(errors.size());
      for (const std::string& want_msg : e.errors) {
        bool found = false;
        for (size_t i = 0; i < errors.size() && !found; ++i) {
          const std::string m = testing::ErrorMessage(errors[i]);
          if (!used[i] && m.find(want_msg) != std::string::npos) used[i] = found = true;
        }
        EXPECT_TRUE(found) << "no error line says '" << want_msg << "' in\n"
                           << ReadText(outbox(e.stem + ".errors.jsonl"));
      }
      const json sum = json::parse(ReadText(outbox(e.stem + ".summary.json")));
      EXPECT_EQ(sum["failed"], e.errors.size()) << sum.dump();
      EXPECT_EQ(sum["completed"], e.good.size()) << sum.dump();
    }
    for (const std::string& n : e.left_in_inbox)
      EXPECT_TRUE(fs::exists(inbox(n))) << n << " should have been ignored";
  }

  std::vector<std::string> mounts_;
};

struct Case {
  std::string name;
  std::function<void()> drop;
  Expect want;
};

TEST_F(ServeBadInputTest, CorpusLeavesTheDaemonRunningAndLosesNothing) {
  Start();
  const int64_t hwm_before = HighWaterKb();
  const std::string kHugeHead = "{\"custom_id\": \"h2\", \"body\": {\"prompt\": \"",
                    kHugeTail = "\"}}";
  const int64_t kHugeBytes =
      static_cast<int64_t>(kHugeHead.size() + kHugeTail.size()) + (100 << 20);
  const auto t0 = Clock::now();
  std::vector<std::thread> writers;  // cases that take time to write
  const std::string target = dir_ + "/target.jsonl";
  std::ofstream(target) << GoodLine("t1");

  std::vector<Case> cases = {
      {"malformed JSON",
       [&] { Drop("malformed.jsonl", GoodLine("m1") + "{not json\n" + GoodLine("m2")); },
       {.stem = "malformed", .good = {"m1", "m2"}, .errors = {"malformed.jsonl:2: invalid JSON"}}},
      {"invalid UTF-8 in one line",
       [&] {
         std::string bad = With("u2", {{"prompt", "cafe"}});
         bad.replace(bad.find("cafe"), 4, "caf\xe9");
         Drop("utf8.jsonl", GoodLine("u1") + bad + GoodLine("u3"));
       },
       {.stem = "utf8", .good = {"u1", "u3"}, .errors = {"utf8.jsonl:2: not UTF-8: invalid byte"}}},
      {"a whole Latin-1 file",
       [&] {
         Drop("latin1.jsonl",
              "{\"custom_id\": \"l1\", \"url\": \"/v1/completions\", \"method\": "
              "\"POST\", \"body\": {\"prompt\": \"caf\xe9\"}}\n"
              "{\"custom_id\": \"l2\", \"url\": \"/v1/completions\", \"method\": "
              "\"POST\", \"body\": {\"prompt\": \"na\xefve\"}}\n");
       },
       {.failed = "latin1.jsonl", .reason = "not UTF-8: invalid byte 0xe9 at offset"}},
      {"a 100 MB line among good ones",
       [&] {
         const std::string tmp = dir_ + "/huge.staging";
         {
           std::ofstream f(tmp, std::ios::binary);
           f << GoodLine("h1") << kHugeHead;
           const std::string mb(1 << 20, 'x');
           for (int i = 0; i < 100; ++i) f << mb;
           f << kHugeTail << "\n" << GoodLine("h3");
         }
         fs::rename(tmp, inbox("huge.jsonl"));
       },
       {.stem = "huge",
        .good = {"h1", "h3"},
        .errors = {"huge.jsonl:2: the line is " + std::to_string(kHugeBytes) +
                   " bytes, over spool.max_line_bytes (1048576)"}}},
      {"an empty file",
       [&] { Drop("empty.jsonl", ""); },
       {.failed = "empty.jsonl", .reason = "empty"}},
      {"blank lines only",
       [&] { Drop("blank.jsonl", "\n \r\n\t\n"); },
       {.failed = "blank.jsonl", .reason = "empty"}},
      {"a binary file",
       [&] {
         Drop("binary.jsonl", std::string("\x7f"
                                          "ELF\x02\x01\x01\0\0\0\0",
                                          12));
       },
       {.failed = "binary.jsonl", .reason = "binary: a NUL byte at offset 7"}},
      {"a symlink",
       [&] { fs::create_symlink(target, inbox("link.jsonl")); },
       {.failed = "link.jsonl", .reason = "symbolic link"}},
      {"a folder",
       [&] { fs::create_directory(inbox("folder.jsonl")); },
       {.failed = "folder.jsonl", .reason = "a folder"}},
      {"a FIFO",
       [&] { ASSERT_EQ(mkfifo(inbox("fifo.jsonl").c_str(), 0644), 0); },
       {.failed = "fifo.jsonl", .reason = "a FIFO"}},
      {"no line valid",
       [&] { Drop("allbad.jsonl", "{nope\n[1, 2]\n\"x\"\n"); },
       {.failed = "allbad.jsonl",
        .reason = "no valid request line (the first error: allbad.jsonl:1"}},
      {"a file still being written (open, paused longer than a rescan period)",
       [&] {
         writers.emplace_back([this] {
           std::ofstream f(inbox("slow.jsonl"), std::ios::binary);
           const std::string all = GoodLine("s1") + GoodLine("s2") + GoodLine("s3");
           f << all.substr(0, 70) << std::flush;
           std::this_thread::sleep_for(std::chrono::milliseconds(2500));
           f << all.substr(70) << std::flush;
         });
       },
       {.stem = "slow", .good = {"s1", "s2", "s3"}}},
      {"a file deleted right after it appears",
       [&] {
         Drop("gone.jsonl", GoodLine("g1"));
         fs::remove(inbox("gone.jsonl"));
       },
       {.no_job = {"gone.jsonl"}}},
      {"a file renamed over another in the inbox",
       [&] {
         Drop("over.jsonl", GoodLine("o-old1") + GoodLine("o-old2"));
         Drop("over.jsonl", GoodLine("o-new1") + GoodLine("o-new2") + GoodLine("o-new3"));
       },
       {.stem = "over", .good = {"o-new1", "o-new2", "o-new3"}}},
      {"duplicate custom_id",
       [&] { Drop("dup.jsonl", GoodLine("d1") + GoodLine("d2") + GoodLine("d1")); },
       {.stem = "dup",
        .good = {"d1", "d2"},
        .errors = {"dup.jsonl:3: field 'custom_id': duplicate 'd1' (first on line 1)"}}},
      {"wrong types",
       [&] {
         Drop("types.jsonl", With("w1", {{"max_tokens", "many"}}) +
                                 With("w2", {{"temperature", "hot"}}) + GoodLine("w3") +
                                 With("w4", {{"prompt", json::object()}}));
       },
       {.stem = "types",
        .good = {"w3"},
        .errors = {"types.jsonl:1: field 'body.max_tokens'",
                   "types.jsonl:2: field 'body.temperature'",
                   "types.jsonl:4: field 'body.prompt'"}}},
      {"unknown url",
       [&] {
         Drop("url.jsonl", GoodLine("r1") +
                               "{\"custom_id\": \"r2\", \"method\": \"POST\", \"url\": "
                               "\"/v1/embeddings\", \"body\": {\"input\": \"x\"}}\n");
       },
       {.stem = "url", .good = {"r1"}, .errors = {"url.jsonl:2: field 'url'"}}},
      {"an over-long prompt",
       [&] {
         std::string words;
         for (int i = 0; i < 3000; ++i) words += "word" + std::to_string(i) + " ";
         Drop("long.jsonl", GoodLine("p1") + With("p2", {{"prompt", words}}));
       },
       {.stem = "long", .good = {"p1"}, .errors = {"long.jsonl:2: "}}},
      {"n 0",
       [&] {
         Drop("n0.jsonl", With("n1", {{"n", 0}}) + GoodLine("n2"));
       },
       {.stem = "n0", .good = {"n2"}, .errors = {"n0.jsonl:1: field 'body.n'"}}},
      {"max_tokens negative",
       [&] {
         Drop("neg.jsonl", With("x1", {{"max_tokens", -5}}) + GoodLine("x2"));
       },
       {.stem = "neg", .good = {"x2"}, .errors = {"neg.jsonl:1: field 'body.max_tokens'"}}},
      {"messages empty",
       [&] {
         Drop("chat.jsonl", GoodLine("c1") +
                                "{\"custom_id\": \"c2\", \"method\": \"POST\", \"url\": "
                                "\"/v1/chat/completions\", \"body\": {\"messages\": []}}\n");
       },
       {.stem = "chat", .good = {"c1"}, .errors = {"chat.jsonl:2: field 'body.messages'"}}},
      {"prompt ids outside the vocabulary",
       [&] {
         Drop("ids.jsonl",
              With("i1", {{"prompt", {1, 2, 99999}}}) + With("i2", {{"prompt", {1, 2, 3}}}));
       },
       {.stem = "ids",
        .good = {"i2"},
        .errors = {"ids.jsonl:1: field 'body.prompt': token id 99999 is outside the vocabulary"}}},
      {"custom_id a number",
       [&] {
         Drop("idnum.jsonl", GoodLine("k1") +
                                 "{\"custom_id\": 17, \"method\": \"POST\", \"url\": "
                                 "\"/v1/completions\", \"body\": {\"prompt\": \"x\"}}\n");
       },
       {.stem = "idnum", .good = {"k1"}, .errors = {"idnum.jsonl:2: field 'custom_id'"}}},
      {"stream true",
       [&] {
         Drop("stream.jsonl", With("st1", {{"stream", true}}) + GoodLine("st2"));
       },
       {.stem = "stream", .good = {"st2"}, .errors = {"stream.jsonl:1: field 'body.stream'"}}},
      {"a JSON array line",
       [&] { Drop("array.jsonl", "[1, 2]\n" + GoodLine("a2")); },
       {.stem = "array", .good = {"a2"}, .errors = {"array.jsonl:1: expected a JSON object"}}},
      {"CRLF line endings",
       [&] {
         std::string t = GoodLine("cr1") + GoodLine("cr2") + "\r\n" + GoodLine("cr3");
         for (size_t at = 0; (at = t.find('\n', at)) != std::string::npos; at += 2)
           if (at == 0 || t[at - 1] != '\r') t.insert(at, "\r");
         Drop("crlf.jsonl", t);
       },
       {.stem = "crlf", .good = {"cr1", "cr2", "cr3"}}},
      {"a BOM at the start",
       [&] { Drop("bom.jsonl", "\xEF\xBB\xBF" + GoodLine("bo1") + GoodLine("bo2")); },
       {.stem = "bom", .good = {"bo1", "bo2"}}},
      {"a last line without newline",
       [&] {
         std::string t = GoodLine("e1") + GoodLine("e2");
         t.pop_back();
         Drop("nonl.jsonl", t);
       },
       {.stem = "nonl", .good = {"e1", "e2"}}},
      {"a name with spaces",
       [&] { Drop("my job.jsonl", GoodLine("sp1")); },
       {.stem = "my job", .good = {"sp1"}}},
      {"a non-ASCII name",
       [&] { Drop("données-日本.jsonl", GoodLine("na1") + "{\n"); },
       {.stem = "données-日本", .good = {"na1"}, .errors = {"données-日本.jsonl:2: invalid JSON"}}},
      {"a .part written slowly, then renamed to .jsonl",
       [&] {
         writers.emplace_back([this] {
           {
             std::ofstream f(inbox("parted.jsonl.part"), std::ios::binary);
             f << GoodLine("pa1") << std::flush;
             std::this_thread::sleep_for(std::chrono::milliseconds(1500));
             f << GoodLine("pa2");
           }
           fs::rename(inbox("parted.jsonl.part"), inbox("parted.jsonl"));
         });
       },
       {.stem = "parted", .good = {"pa1", "pa2"}}},
      {"temporaries and dotfiles are ignored",
       [&] {
         Drop("x.jsonl.tmp", GoodLine("tmp1"));
         Drop(".hidden.jsonl", GoodLine("hid1"));
       },
       {.left_in_inbox = {"x.jsonl.tmp", ".hidden.jsonl"}}},
  };
  ASSERT_GE(cases.size() + 4, 30u);  // + the four environment cases below
  for (Case& c : cases) c.drop();
  for (const Case& c : cases) Check(c.name, c.want, 30);
  for (std::thread& t : writers) t.join();
  ASSERT_TRUE(Alive()) << Log();
  // Memory stays sane: the 100 MB line was never held whole.
  EXPECT_LT(HighWaterKb() - hwm_before, 48 * 1024) << "peak RSS grew by more than 48 MiB";
  const auto list = RunLlmqWith({}, {"list", "--json", "--config", config_});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  std::multiset<std::string> names;
  for (const json& j : json::parse(list.out)) names.insert(j["name"].get<std::string>());
  for (const Case& c : cases) {
    for (const std::string& n : c.want.no_job) EXPECT_EQ(names.count(n), 0u) << c.name;
    if (!c.want.stem.empty()) {
      EXPECT_EQ(names.count(c.want.stem + ".jsonl"), 1u) << c.name;
    }
  }
  std::printf("table of %zu cases: %.1fs\n", cases.size(),
              std::chrono::duration<double>(Clock::now() - t0).count());

  // --- Environment cases, one at a time.
  {
    SCOPED_TRACE("the same file dropped again");
    Drop("malformed.jsonl", GoodLine("m1") + "{not json\n" + GoodLine("m2"));
    Check("again", {.failed = "malformed.jsonl", .reason = "was already accepted as job batch_"},
          10);
  }
  {
    SCOPED_TRACE("a database locked by another process past the busy timeout");
    std::string big;
    for (int i = 0; i < 60; ++i)
      big +=
          json{
              {"custom_id", "lk" + std::to_string(i)},
              {"method", "POST"},
              {"url", "/v1/completions"},
              {"body",
               {{"prompt", "Lock " + std::to_string(i)}, {"max_tokens", 24}, {"ignore_eos", true}}}}
              .dump() +
          "\n";
    Drop("locked-a.jsonl", big);
    ASSERT_TRUE(WaitFor([&] { return fs::exists(state_ + "/archive/locked-a.jsonl"); }, 10))
        << Log();
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((state_ + "/queue.db").c_str(), &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 10000);
    ASSERT_EQ(sqlite3_exec(db, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK)
        << sqlite3_errmsg(db);
    Drop("locked-b.jsonl", GoodLine("lb1") + GoodLine("lb2"));
    std::this_thread::sleep_for(std::chrono::milliseconds(6500));  // > the 5 s busy timeout
    EXPECT_TRUE(Alive()) << Log();
    EXPECT_EQ(sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
    EXPECT_NE(Log().find("busy timeout"), std::string::npos) << "the wait is logged\n" << Log();
    Expect a{.stem = "locked-a"};
    for (int i = 0; i < 60; ++i) a.good.push_back("lk" + std::to_string(i));
    Check("locked-a", a, 30);
    Check("locked-b", {.stem = "locked-b", .good = {"lb1", "lb2"}}, 30);
  }
  const std::string out = state_ + "/outbox";
  struct Env {
    std::string what;
    unsigned long flags;
    std::string errtext, stem;
    int lines;
  };
  for (const Env& env : {Env{"a read-only outbox", MS_RDONLY, "Read-only file system", "ro", 3},
                         Env{"a full outbox", 0, "No space left on device", "full", 300}}) {
    const std::string& what = env.what;
    const std::string& stem = env.stem;
    SCOPED_TRACE(what);
    if (mount("tmpfs", out.c_str(), "tmpfs", env.flags, "size=64k") != 0) {
      std::printf("SKIPPED case '%s': cannot mount a tmpfs on %s: %s (needs root)\n", what.c_str(),
                  out.c_str(), std::strerror(errno));
      continue;
    }
    mounts_.push_back(out);
    Expect e{.stem = stem};
    std::string text;
    for (int i = 0; i < env.lines; ++i) {
      e.good.push_back(stem + std::to_string(i));
      text += GoodLine(stem + std::to_string(i));
    }
    Drop(stem + ".jsonl", text);
    EXPECT_TRUE(WaitFor(
        [&] {
          return LogLineHas({env.errtext, stem + ".jsonl", out});
        },
        30))
        << "a log line names the outbox path and the reason\n"
        << Log();
    EXPECT_TRUE(Alive()) << Log();
    // The daemon may still hold the file it failed to write open for a moment (EBUSY).
    ASSERT_TRUE(WaitFor([&] { return umount2(out.c_str(), 0) == 0; }, 30)) << std::strerror(errno);
    mounts_.pop_back();
    Check(what, e, 15);  // retried once the outbox works again
  }

  // After all that: a good job still runs, and the daemon is still alive and stops cleanly.
  Drop("final.jsonl", GoodLine("f1") + GoodLine("f2"));
  Check("final", {.stem = "final", .good = {"f1", "f2"}}, 20);
  ASSERT_TRUE(Alive()) << Log();
  kill(pid_, SIGTERM);
  EXPECT_EQ(WaitExit(pid_), 0) << Log();
  pid_ = -1;
}

TEST_F(ServeBadInputTest, CorruptDatabaseAtStartUpIsRefusedNamingTheFile) {
  fs::create_directories(state_);
  std::string junk;
  for (int i = 0; i < 512; ++i) junk += "this is not an SQLite database\n";
  std::ofstream(state_ + "/queue.db") << junk;
  pid_ = SpawnLlmq({"serve", "--config", config_}, dir_ + "/serve.out", err_file());
  int rc = -1;
  ASSERT_TRUE(WaitFor(
      [&] {
        int st = 0;
        if (waitpid(pid_, &st, WNOHANG) != pid_) return false;
        rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        return true;
      },
      20))
      << "it must refuse to start\n"
      << Log();
  pid_ = -1;
  EXPECT_NE(rc, 0);
  EXPECT_NE(Log().find(state_ + "/queue.db"), std::string::npos) << Log();
  EXPECT_NE(Log().find("not an llmq database or is damaged"), std::string::npos) << Log();
  EXPECT_EQ(ReadText(state_ + "/queue.db"), junk) << "a damaged queue is never written to";
}

}  // namespace
}  // namespace llmq::testing
