// The spool under attack (issue 21): a member of the llmq group, who can write to inbox/, must not
// be able to stop, hang or fool `llmq serve`. Everything here runs the real binary.
//  - ServeHostileRowsTest: the table of the issue, one test per row that concerns the inbox
//    (rows 1, 2, 5, 6, 8; the state-folder rows are in serve_state_test.cpp).
//  - ServeHostileCorpusTest: one daemon for a corpus of hostile drops, one case after the other;
//    after each, the daemon is alive, the case's outcome is named (failed/ with a reason, results,
//    a log line) and its peak RSS is printed.
//  - ServeHostileNamesTest: 1,000 random file names (random bytes, lengths 1-255) with valid
//    content: each ends in archive/ with its results in outbox/, or in failed/ with a reason, and
//    the daemon never restarts.
// Test-only hook: LLMQ_TEST_SWAP_AFTER_OPEN=<path> makes the daemon rename <path> over the inbox
// file it has just opened to accept, as a hostile writer swapping the file at the worst moment.
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>

#include "base/text.h"
#include "tests/serve_fixture.h"
#include "tests/test_util.h"

namespace llmq::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

class ServeHostileRowsTest : public ServeFixture {};

// Row 1: a name that is not UTF-8 aborted the daemon (nlohmann type_error 316 in AcceptFiles) and,
// left in inbox/, killed every restart at its first scan.
TEST_F(ServeHostileRowsTest, Row1NameNotUtf8IsRefusedAndTheDaemonGoesOn) {
  Start();
  const std::string bad = std::string("bad") + "\xff\xfe" + ".jsonl";
  Drop(bad, GoodLine("b1"));
  const std::string reason = WaitRefused(bad);
  EXPECT_NE(reason.find("bad\\xff\\xfe.jsonl"), std::string::npos) << reason;
  EXPECT_NE(reason.find("not UTF-8"), std::string::npos) << reason;
  EXPECT_TRUE(IsUtf8(reason)) << "the reason names the file safely";
  ASSERT_TRUE(Alive()) << Log();
  EXPECT_TRUE(LogLineHas({"failed/bad\\xff\\xfe.jsonl", "not UTF-8"})) << Log();
  Drop("after.jsonl", GoodLine("a1"));
  EXPECT_EQ(WaitResults("after"), (std::multiset<std::string>{"a1"})) << Log();
  EXPECT_EQ(Stop(), 0) << Log();
}

// Row 2: a valid file swapped for a FIFO between the daemon's check and its ingest made ingest
// reopen the path and block in open() inside the write transaction: the queue locked, SIGTERM
// ignored. The file is now opened once and read through that descriptor; the entry that replaced
// it is looked at as the new file it is (a FIFO: refused).
TEST_F(ServeHostileRowsTest, Row2FileSwappedForAFifoAfterItWasOpenedHangsNothing) {
  const std::string fifo = dir_ + "/swap-fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0660), 0);
  Start({"LLMQ_TEST_SWAP_AFTER_OPEN=" + fifo});
  Drop("swap.jsonl", GoodLine("s1") + GoodLine("s2"));
  const std::string reason = WaitRefused("swap.jsonl");
  EXPECT_NE(reason.find("a FIFO, not a regular file"), std::string::npos) << reason << Log();
  EXPECT_FALSE(Exists(fifo)) << "the hook swapped it in";
  // The queue is not locked: another process writes to it, and the daemon runs its jobs.
  const std::string mine = Staged(GoodLine("m1"));
  fs::rename(mine, dir_ + "/mine.jsonl");
  const auto submit = RunLlmqWith({}, {"submit", "--config", config_, dir_ + "/mine.jsonl"});
  EXPECT_EQ(submit.exit_code, 0) << submit.err;
  EXPECT_EQ(WaitResults("mine"), (std::multiset<std::string>{"m1"})) << Log();
  // What was read from the swapped file never became a job: a FIFO was what stood in inbox/.
  const auto list = RunLlmqWith({}, {"list", "--json", "--config", config_});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  for (const json& j : json::parse(list.out)) EXPECT_NE(j["name"], "swap.jsonl") << list.out;
  EXPECT_EQ(Stop(), 0) << "SIGTERM is answered\n" << Log();
}

// Row 5: a 249-byte name was accepted and computed, then its outbox files could not be written
// (File name too long) and the job stayed `finalizing` for ever. Its outputs now get a shortened
// stem with a hash.
TEST_F(ServeHostileRowsTest, Row5LongNameGetsAShortenedOutboxStem) {
  Start();
  const std::string name = std::string(243, 'n') + ".jsonl";  // 249 bytes
  Drop(name, GoodLine("l1"));
  std::string results;
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const std::string& n : Names(outbox()))
          if (n.size() > 20 && n.compare(n.size() - 14, 14, ".results.jsonl") == 0 &&
              n.rfind("nnnn", 0) == 0 &&
              Exists(outbox(n.substr(0, n.size() - 14) + ".summary.json")))
            results = n;
        return !results.empty();
      },
      30))
      << Log();
  EXPECT_LE(results.size(), 255u);
  EXPECT_NE(results.find('~'), std::string::npos) << results;
  const auto lines = ReadJsonl(outbox(results));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["custom_id"], "l1");
  const auto status = RunLlmqWith({}, {"list", "--json", "--config", config_});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  const json jobs = json::parse(status.out);
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0]["status"], "completed") << status.out;
  EXPECT_TRUE(Exists(archive(name)));
  EXPECT_EQ(Stop(), 0) << Log();
}

// Row 6: `x.reason.txt` refused, then `x` refused: the second reason file replaced the first
// refused file. Both the file and its .reason.txt now land on free names.
TEST_F(ServeHostileRowsTest, Row6ARefusedFileNeverReplacesAnother) {
  Start();
  const std::string first = std::string("\0first file's bytes\n", 20);
  Drop("x.reason.txt", first);
  ASSERT_NE(WaitRefused("x.reason.txt").find("binary"), std::string::npos) << Log();
  Drop("x", "");
  ASSERT_TRUE(WaitFor([&] { return LogLineHas({"failed/x.1: ", "empty"}); }, 30)) << Log();
  EXPECT_EQ(ReadText(failed("x.reason.txt")), first) << "the first refused file is intact";
  EXPECT_NE(ReadText(failed("x.1.reason.txt")).find("empty"), std::string::npos);
  EXPECT_FALSE(Exists(failed("x")));
  EXPECT_EQ(Stop(), 0) << Log();
}

// Row 8: a name with a newline split each event over two log lines (a member of the group could
// forge log lines). Names are escaped in the log, and such a name is refused.
TEST_F(ServeHostileRowsTest, Row8NewlineInANameCannotForgeALogLine) {
  Start();
  const std::string name = "two\nllmq: stopped; 0 request(s) left pending.jsonl";
  Drop(name, GoodLine("n1"));
  const std::string reason = WaitRefused(name);
  EXPECT_NE(reason.find("control character"), std::string::npos) << reason << Log();
  EXPECT_EQ(reason.find('\n'), reason.size() - 1) << "one line";
  std::istringstream log(Log());
  for (std::string l; std::getline(log, l);)
    EXPECT_NE(l.rfind("llmq: stopped; 0 request(s) left pending.jsonl", 0), 0u)
        << "a forged line:\n"
        << Log();
  EXPECT_TRUE(LogLineHas({"two\\nllmq: stopped; 0 request(s) left pending.jsonl"})) << Log();
  EXPECT_EQ(Stop(), 0) << Log();
}

// --- The corpus: one daemon, one case after the other.

class ServeHostileCorpusTest : public ServeFixture {
 protected:
  // A case: what it drops and checks (gtest assertions), run with its name traced; then the daemon
  // must be alive, and its peak RSS is printed.
  struct Case {
    std::string name;
    std::function<void()> run;
  };
  // What the hook of LLMQ_TEST_SWAP_AFTER_OPEN renames over the next inbox file opened.
  std::string swap_in() const { return dir_ + "/swap-in"; }
  // The queue's jobs (llmq list --json).
  json JobList() {
    const auto list = RunLlmqWith({}, {"list", "--json", "--config", config_});
    EXPECT_EQ(list.exit_code, 0) << list.err;
    return list.exit_code == 0 ? json::parse(list.out) : json::array();
  }
  // The jobs' names in the queue.
  std::multiset<std::string> JobNames() {
    std::multiset<std::string> names;
    for (const json& j : JobList()) names.insert(j["name"].get<std::string>());
    return names;
  }
  json JobNamed(const std::string& name) {
    const auto st = RunLlmqWith({}, {"status", "--json", "--config", config_, name});
    EXPECT_EQ(st.exit_code, 0) << st.err;
    return st.exit_code == 0 ? json::parse(st.out) : json();
  }
  std::multiset<std::string> Ids(const std::string& prefix, int n) {
    std::multiset<std::string> ids;
    for (int i = 0; i < n; ++i) ids.insert(prefix + std::to_string(i));
    return ids;
  }
  std::string Lines(const std::string& prefix, int n, int max_tokens = 2) {
    std::string text;
    for (int i = 0; i < n; ++i) text += GoodLine(prefix + std::to_string(i), max_tokens);
    return text;
  }
};

TEST_F(ServeHostileCorpusTest, EveryCaseLeavesTheDaemonUpAndNamesWhatHappened) {
  WriteConfig("  max_file_bytes: 64MiB\n");
  Start({"LLMQ_TEST_SWAP_AFTER_OPEN=" + swap_in()});
  const std::string secret = dir_ + "/secret.txt";
  std::ofstream(secret) << "SECRET-TOKEN-8c1f\n";
  std::vector<Case> cases = {
      {"a sparse 2 GiB file, over spool.max_file_bytes: refused from its size alone",
       [&] {
         const std::string big = Staged("");
         ASSERT_EQ(::truncate(big.c_str(), int64_t{2} << 30), 0);
         fs::rename(big, inbox("huge.jsonl"));
         EXPECT_NE(WaitRefused("huge.jsonl").find("2147483648 bytes, over spool.max_file_bytes"),
                   std::string::npos)
             << Log();
       }},
      {"a 100,000-line job",
       [&] {
         Drop("lines100k.jsonl", Lines("k", 100000, 1));
         const auto got = WaitResults("lines100k", 600);
         EXPECT_EQ(got.size(), 100000u);
         EXPECT_EQ(got, Ids("k", 100000));
       }},
      {"one 16 MiB line nested 8 million levels deep among good lines",
       [&] {
         const int64_t depth = (int64_t{16} << 20) / 2 - 200;
         std::string text = GoodLine("d0");
         text += R"({"custom_id": "deep", "method": "POST", "url": "/v1/completions", "body": )" +
                 std::string(depth, '[') + std::string(depth, ']') + "}\n";
         text += GoodLine("d1");
         Drop("deep.jsonl", text);
         EXPECT_EQ(WaitResults("deep"), (std::multiset<std::string>{"d0", "d1"})) << Log();
         const auto errors = ReadJsonl(outbox("deep.errors.jsonl"));
         ASSERT_EQ(errors.size(), 1u);
         EXPECT_NE(
             testing::ErrorMessage(errors[0]).find("deep.jsonl:2: nested deeper than 512 levels"),
             std::string::npos)
             << errors[0].dump();
       }},
      {"a line whose JSON Schema merges bounds that are no numbers (it threw from the compiler: "
       "the daemon went down, and again on each restart)",
       [&] {
         const nlohmann::json bad = {
             {"custom_id", "bad-schema"},
             {"method", "POST"},
             {"url", "/v1/chat/completions"},
             {"body",
              {{"messages", {{{"role", "user"}, {"content", "list"}}}},
               {"max_tokens", 4},
               {"response_format",
                {{"type", "json_schema"},
                 {"json_schema",
                  {{"name", "x"},
                   {"schema", nlohmann::json::parse(
                                  R"({"allOf": [{"minItems": "x"}, {"minItems": 2}]})")}}}}}}}};
         Drop("schema.jsonl", GoodLine("s0") + bad.dump() + "\n" + GoodLine("s1"));
         const auto got = WaitResults("schema");
         EXPECT_TRUE(got.count("s0") && got.count("s1")) << Log();
         std::string said;
         for (const char* kind : {".results.jsonl", ".errors.jsonl"})
           for (const json& r : ReadJsonl(outbox(std::string("schema") + kind)))
             if (r["custom_id"] == "bad-schema") said += r.dump();
         EXPECT_NE(said.find("keyword \\\"minItems\\\""), std::string::npos) << said << Log();
       }},
      {"a file appended to slowly, past the settle time, while its writer keeps it open",
       [&] {
         // The slow writer is the scenario: it pauses three settle times between its lines.
         std::ofstream w(inbox("slow.jsonl"), std::ios::binary);
         w << GoodLine("w0") << std::flush;
         std::this_thread::sleep_for(std::chrono::milliseconds(600));
         w << GoodLine("w1") << std::flush;
         std::this_thread::sleep_for(std::chrono::milliseconds(600));
         w << GoodLine("w2");
         w.close();
         EXPECT_EQ(WaitResults("slow"), Ids("w", 3)) << "nothing taken half-written\n" << Log();
       }},
      {"a file truncated after it was accepted",
       [&] {
         Drop("trunc.jsonl", Lines("t", 3));
         ASSERT_TRUE(WaitFor([&] { return Exists(archive("trunc.jsonl")); }, 30)) << Log();
         ASSERT_EQ(::truncate(archive("trunc.jsonl").c_str(), 0), 0);
         EXPECT_EQ(WaitResults("trunc"), Ids("t", 3)) << "the queue holds what was accepted";
       }},
      {"a file replaced under its name after it was accepted",
       [&] {
         Drop("repl.jsonl", Lines("r", 1));
         ASSERT_TRUE(WaitFor([&] { return Exists(archive("repl.jsonl")); }, 30)) << Log();
         Drop("repl.jsonl", Lines("q", 2));
         ASSERT_TRUE(WaitFor(
             [&] {
               int done = 0;
               for (const json& j : JobList())
                 done += j["name"] == "repl.jsonl" && j["status"] == "completed";
               return done == 2;
             },
             30))
             << Log();
         // Two jobs, each with its own outputs (which of them got the plain stem depends on
         // which finished first).
         std::set<std::multiset<std::string>> got;
         for (const std::string& n : Names(outbox()))
           if (n.rfind("repl", 0) == 0 && n.find(".results.jsonl") != std::string::npos)
             got.insert(WaitResults(n.substr(0, n.size() - 14)));
         EXPECT_EQ(got, (std::set<std::multiset<std::string>>{Ids("r", 1), Ids("q", 2)}));
       }},
      {"a file replaced by another between its open and its commit",
       [&] {
         fs::rename(Staged(Lines("new", 2)), swap_in());
         Drop("swapped.jsonl", Lines("old", 2));
         EXPECT_EQ(WaitResults("swapped"), Ids("new", 2))
             << "only the file that stood in inbox/ when accepted runs\n"
             << Log();
         EXPECT_FALSE(Exists(swap_in()));
         EXPECT_EQ(JobNames().count("swapped.jsonl"), 1u);
       }},
      {"a symbolic link to /dev/zero swapped in between the check and the open",
       [&] {
         fs::create_symlink("/dev/zero", swap_in());
         Drop("zero.jsonl", Lines("z", 1));
         EXPECT_NE(WaitRefused("zero.jsonl").find("symbolic link"), std::string::npos) << Log();
         EXPECT_TRUE(fs::is_symlink(fs::symlink_status(failed("zero.jsonl"))));
         EXPECT_EQ(JobNames().count("zero.jsonl"), 0u);
       }},
      {"a symbolic link to a secret file swapped in between the check and the open",
       [&] {
         fs::create_symlink(secret, swap_in());
         Drop("secret.jsonl", Lines("sec", 1));
         EXPECT_NE(WaitRefused("secret.jsonl").find("symbolic link"), std::string::npos) << Log();
         for (const std::string& n : Names(outbox()))
           EXPECT_EQ(ReadText(outbox(n)).find("SECRET-TOKEN"), std::string::npos) << n;
         EXPECT_EQ(Log().find("SECRET-TOKEN"), std::string::npos);
         EXPECT_EQ(ReadText(state_ + "/queue.db").find("SECRET-TOKEN"), std::string::npos);
         EXPECT_EQ(ReadText(state_ + "/queue.db-wal").find("SECRET-TOKEN"), std::string::npos);
       }},
      {"8 concurrent llmq submit",
       [&] {
         std::vector<std::thread> ts;
         std::vector<RunResult> rs(8);
         for (int i = 0; i < 8; ++i) {
           const std::string f = dir_ + "/sub" + std::to_string(i) + ".jsonl";
           std::ofstream(f) << Lines("s" + std::to_string(i) + "-", 3);
           ts.emplace_back([&, i, f] {
             rs[i] = RunLlmqWith({}, {"submit", "--config", config_, f});
           });
         }
         for (std::thread& t : ts) t.join();
         std::set<std::string> ids;
         for (const auto& r : rs) {
           EXPECT_EQ(r.exit_code, 0) << r.err;
           ids.insert(r.out);
         }
         EXPECT_EQ(ids.size(), 8u);
         for (int i = 0; i < 8; ++i)
           EXPECT_EQ(WaitResults("sub" + std::to_string(i)), Ids("s" + std::to_string(i) + "-", 3));
       }},
      {"llmq cancel of an unknown job",
       [&] {
         const auto r = RunLlmqWith({}, {"cancel", "--config", config_, "batch_nope"});
         EXPECT_NE(r.exit_code, 0);
         EXPECT_NE(r.err.find("batch_nope: no such job"), std::string::npos) << r.err;
       }},
      {"llmq cancel of a finished job",
       [&] {
         const auto r = RunLlmqWith({}, {"cancel", "--config", config_, "sub0.jsonl"});
         EXPECT_NE(r.exit_code, 0);
         EXPECT_NE(r.err.find("is already completed: nothing to cancel"), std::string::npos)
             << r.err;
       }},
      {"llmq cancel of a job already cancelled",
       [&] {
         const std::string f = dir_ + "/long.jsonl";
         std::ofstream(f) << Lines("c", 20000, 1);
         const auto sub = RunLlmqWith({}, {"submit", "--config", config_, f});
         ASSERT_EQ(sub.exit_code, 0) << sub.err;
         const auto c1 = RunLlmqWith({}, {"cancel", "--config", config_, "long.jsonl"});
         EXPECT_EQ(c1.exit_code, 0) << c1.err;
         ASSERT_TRUE(WaitFor([&] { return JobNamed("long.jsonl")["status"] == "cancelled"; }, 60))
             << Log();
         const auto c2 = RunLlmqWith({}, {"cancel", "--config", config_, "long.jsonl"});
         EXPECT_NE(c2.exit_code, 0);
         EXPECT_NE(c2.err.find("is already cancelled: nothing to cancel"), std::string::npos)
             << c2.err;
         const auto results = ReadJsonl(outbox("long.results.jsonl")),
                    errors = ReadJsonl(outbox("long.errors.jsonl"));
         EXPECT_EQ(results.size() + errors.size(), 20000u) << "every request once";
       }},
      {"llmq status and list while another process holds a long write transaction",
       [&] {
         sqlite3* db = nullptr;
         ASSERT_EQ(sqlite3_open((state_ + "/queue.db").c_str(), &db), SQLITE_OK);
         ASSERT_EQ(sqlite3_exec(db, "BEGIN IMMEDIATE; UPDATE jobs SET options = options", nullptr,
                                nullptr, nullptr),
                   SQLITE_OK)
             << sqlite3_errmsg(db);
         const auto st = RunLlmqWith({}, {"status", "--config", config_});
         const auto ls = RunLlmqWith({}, {"list", "--config", config_});
         EXPECT_EQ(sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr), SQLITE_OK);
         sqlite3_close(db);
         EXPECT_EQ(st.exit_code, 0) << st.err;
         EXPECT_NE(st.out.find("sub0.jsonl"), std::string::npos) << st.out;
         EXPECT_EQ(ls.exit_code, 0) << ls.err;
       }},
      {"inbox/ removed while the daemon runs",
       [&] {
         fs::remove_all(inbox());
         ASSERT_TRUE(WaitFor(
             [&] {
               return LogLineHas({"inbox", "was removed or replaced"});
             },
             30))
             << Log();
         ASSERT_TRUE(WaitFor([&] { return fs::is_directory(inbox()); }, 30)) << Log();
         Drop("after-rm.jsonl", Lines("ar", 2));
         EXPECT_EQ(WaitResults("after-rm"), Ids("ar", 2)) << Log();
       }},
      {"a name with an ANSI escape sequence",
       [&] {
         const std::string name = "\x1b[31mred\x1b[0m.jsonl";
         Drop(name, Lines("e", 1));
         EXPECT_NE(WaitRefused(name).find("control character"), std::string::npos) << Log();
         EXPECT_TRUE(LogLineHas({"\\x1b[31mred\\x1b[0m.jsonl"})) << Log();
         EXPECT_EQ(Log().find('\x1b'), std::string::npos) << "no raw escape reaches the log";
       }},
      {"a 255-byte name",
       [&] {
         const std::string name = std::string(249, 'm') + ".jsonl";
         Drop(name, Lines("n", 1));
         ASSERT_TRUE(WaitFor([&] { return Exists(archive(name)); }, 30)) << Log();
         ASSERT_TRUE(WaitFor([&] { return JobNamed(name)["status"] == "completed"; }, 30));
         int found = 0;
         for (const std::string& n : Names(outbox()))
           found += n.rfind("mmmmmmmm", 0) == 0 && n.find('~') != std::string::npos;
         EXPECT_EQ(found, 4) << "results, errors, report and summary, each under a shortened stem";
       }},
      {"names that differ only in case",
       [&] {
         Drop("Case.jsonl", Lines("U", 1));
         Drop("case.jsonl", Lines("l", 1));
         EXPECT_EQ(WaitResults("Case"), Ids("U", 1));
         EXPECT_EQ(WaitResults("case"), Ids("l", 1));
       }},
      {"names that differ only in Unicode normalization",
       [&] {
         const std::string nfc = "caf\xc3\xa9.jsonl", nfd = "cafe\xcc\x81.jsonl";
         Drop(nfc, Lines("nfc", 1));
         Drop(nfd, Lines("nfd", 1));
         EXPECT_EQ(WaitResults("caf\xc3\xa9"), Ids("nfc", 1));
         EXPECT_EQ(WaitResults("cafe\xcc\x81"), Ids("nfd", 1));
       }},
      {"a name of quotes, spaces and shell syntax",
       [&] {
         const std::string name = "a \"b\" 'c' $(touch pwned) `x` ;|&.jsonl";
         Drop(name, Lines("sh", 1));
         EXPECT_EQ(WaitResults("a \"b\" 'c' $(touch pwned) `x` ;|&"), Ids("sh", 1)) << Log();
         EXPECT_FALSE(Exists(dir_ + "/pwned"));
       }},
  };
  ASSERT_GE(cases.size(), 20u);
  int64_t before = HighWaterKb();
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i + 1) + ": " + cases[i].name);
    cases[i].run();
    ASSERT_TRUE(Alive()) << Log();
    const int64_t hwm = HighWaterKb();
    std::printf("case %2zu  peak RSS %6.1f MiB (%+6.1f)  %s\n", i + 1, hwm / 1024.0,
                (hwm - before) / 1024.0, cases[i].name.c_str());
    before = hwm;
  }
  // Memory stayed bounded: no file was ever held whole (the 100,000-line job is the largest).
  EXPECT_LT(HighWaterKb(), 1024 * 1024) << "peak RSS over 1 GiB";
  EXPECT_EQ(Stop(), 0) << Log();
}

// --- Corpus cases that need a daemon (or a state folder) of their own.

TEST_F(ServeHostileCorpusTest, SigtermDuringAHugeIngestLosesAndRepeatsNothing) {
  Start();
  constexpr int kLines = 100000;
  Drop("huge.jsonl", Lines("h", kLines, 1));
  // The daemon has the file open: it is being read (or already accepted).
  const std::string fd_dir = "/proc/" + std::to_string(pid_) + "/fd";
  WaitFor(
      [&] {
        std::error_code ec;
        for (const auto& e : fs::directory_iterator(fd_dir, ec))
          if (fs::read_symlink(e.path(), ec).filename() == "huge.jsonl") return true;
        return Exists(archive("huge.jsonl"));
      },
      30, 1);
  EXPECT_EQ(Stop(), 0) << Log();
  // Accepted whole or not at all: after a restart every line has one result.
  Start();
  const auto got = WaitResults("huge", 900);
  EXPECT_EQ(got.size(), static_cast<size_t>(kLines));
  EXPECT_EQ(got, Ids("h", kLines));
  PrintPeakRss("SIGTERM during a huge ingest (after the restart)");
  EXPECT_EQ(Stop(), 0) << Log();
}

TEST_F(ServeHostileCorpusTest, CorruptWriteAheadLogAtStartKeepsTheQueue) {
  Start();
  Drop("kept.jsonl", Lines("kp", 2));
  ASSERT_EQ(WaitResults("kept"), Ids("kp", 2));
  ASSERT_EQ(Stop(), 0);
  std::string junk;
  for (int i = 0; i < 4096; ++i) junk += "not a WAL frame ";
  std::ofstream(state_ + "/queue.db-wal", std::ios::binary) << junk;
  Start();
  EXPECT_EQ(JobNamed("kept.jsonl")["status"], "completed");
  Drop("next.jsonl", Lines("nx", 1));
  EXPECT_EQ(WaitResults("next"), Ids("nx", 1)) << Log();
  PrintPeakRss("a corrupt write-ahead log at start");
  EXPECT_EQ(Stop(), 0) << Log();
}

TEST_F(ServeHostileCorpusTest, DiskFullOnTheDatabaseKeepsTheFileUntilThereIsRoom) {
  fs::create_directories(state_);
  if (::mount("tmpfs", state_.c_str(), "tmpfs", 0, "size=1536k") != 0)
    GTEST_SKIP() << "cannot mount a tmpfs on " << state_ << ": " << std::strerror(errno)
                 << " (needs root)";
  struct Unmount {
    std::string at;
    ~Unmount() { ::umount2(at.c_str(), MNT_DETACH); }
  } unmount{state_};
  Start();
  staging_ = state_;  // renamed in from the same file system
  // 800 KB of lines: the file fits, its requests in the database and its WAL do not.
  Drop("full.jsonl", Lines("f", 6000));
  ASSERT_TRUE(WaitFor([&] { return LogLineHas({"cannot accept", "full"}); }, 60)) << Log();
  EXPECT_TRUE(Alive()) << Log();
  EXPECT_TRUE(Exists(inbox("full.jsonl"))) << "it stays in inbox/ until it can be accepted";
  ASSERT_EQ(::mount("tmpfs", state_.c_str(), "tmpfs", MS_REMOUNT, "size=64m"), 0)
      << std::strerror(errno);
  EXPECT_EQ(WaitResults("full", 120), Ids("f", 6000)) << Log();
  PrintPeakRss("disk full on the database");
  EXPECT_EQ(Stop(), 0) << Log();
}

TEST_F(ServeHostileCorpusTest, AbsurdAndNegativeConfigValuesAreRefusedNamingTheKey) {
  for (const auto& [line, key] : std::vector<std::pair<std::string, std::string>>{
           {"  rescan_seconds: 1e300\n", "spool.rescan_seconds"},
           {"  settle_seconds: -1\n", "spool.settle_seconds"},
           {"  max_file_bytes: -5\n", "spool.max_file_bytes"},
           {"  max_line_bytes: 99999999999999999999999\n", "spool.max_line_bytes"},
           {"  commit_interval_ms: 0\n", "spool.commit_interval_ms"}}) {
    SCOPED_TRACE(line);
    WriteConfig(line);
    const auto r = RunLlmqWith({}, {"serve", "--config", config_});
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find(config_), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(key), std::string::npos) << r.err;
  }
  // On SIGHUP, the same values keep the settings in effect.
  WriteConfig();
  Start();
  WriteConfig("  settle_seconds: -1\n");
  kill(pid_, SIGHUP);
  ASSERT_TRUE(WaitFor(
      [&] {
        return LogLineHas({"SIGHUP", "spool.settle_seconds", "keeping"});
      },
      30))
      << Log();
  Drop("still.jsonl", Lines("st", 1));
  EXPECT_EQ(WaitResults("still"), Ids("st", 1)) << Log();
  PrintPeakRss("absurd and negative config values (SIGHUP)");
  EXPECT_EQ(Stop(), 0) << Log();
}

TEST_F(ServeHostileCorpusTest, RelativePathsInTheConfigAreTakenBesideIt) {
  MakeTinyModel(dir_ + "/model");  // `path: model`, beside the config
  std::ofstream(config_) << "model:\n  path: model\nspool:\n  state_dir: rel-state\n"
                            "  settle_seconds: 0.2\n  rescan_seconds: 1\n"
                            "engine:\n  kv_cache_memory: 64MiB\n";
  state_ = dir_ + "/rel-state";
  Start();
  Drop("rel.jsonl", Lines("rl", 2));
  EXPECT_EQ(WaitResults("rel"), Ids("rl", 2)) << Log();
  PrintPeakRss("relative paths in the config");
  EXPECT_EQ(Stop(), 0) << Log();
}

TEST_F(ServeHostileCorpusTest, SubmitOfAFileWhoseNameIsNotUtf8IsRefusedNamingIt) {
  fs::create_directories(state_);
  const std::string name = dir_ + "/sub\xe9.jsonl";
  std::ofstream(name) << Lines("u", 1);
  const auto r = RunLlmqWith({}, {"submit", "--config", config_, name});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("sub\\xe9.jsonl"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("not UTF-8"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("nothing was submitted"), std::string::npos) << r.err;
  EXPECT_TRUE(IsUtf8(r.err));
  EXPECT_TRUE(JobList().empty());
}

// --- 1,000 random names, one daemon.

class ServeHostileNamesTest : public ServeFixture {};

TEST_F(ServeHostileNamesTest, ThousandRandomNamesEachEndInArchiveOrFailed) {
  Start();
  const pid_t pid = pid_;
  std::mt19937 rng(20261201);
  std::set<std::string> names;
  auto random_name = [&] {
    std::uniform_int_distribution<int> len(1, 255), byte(1, 255), kind(0, 9);
    for (;;) {
      std::string n;
      const int k = kind(rng), l = len(rng);
      for (int i = 0; i < l; ++i) {
        int b = byte(rng);
        if (k < 4)
          b = 'a' + b % 26;  // plain
        else if (k < 6 && b >= 0x80)
          b = 'A' + b % 26;  // ASCII with controls and newlines
        if (b == '/') b = '_';
        n += static_cast<char>(b);
      }
      if (k == 6 && !names.empty()) {  // a name already used, in another case
        n = *std::next(names.begin(),
                       std::uniform_int_distribution<size_t>(0, names.size() - 1)(rng));
        for (char& c : n) c = std::islower(static_cast<unsigned char>(c)) ? std::toupper(c) : c;
      }
      if (k == 7)
        n = "caf" + std::string(rng() % 2 ? "\xc3\xa9" : "e\xcc\x81") +
            std::to_string(rng() % 40);  // NFC or NFD
      // Names the spool ignores by design (temporaries) are not job files.
      if (n.empty() || n[0] == '.' || n.size() > 255) continue;
      auto ends = [&](const std::string& x) {
        return n.size() >= x.size() && n.compare(n.size() - x.size(), x.size(), x) == 0;
      };
      if (ends(".tmp") || ends(".part") || !names.insert(n).second) continue;
      return n;
    }
  };
  std::vector<std::string> dropped;
  for (int i = 0; i < 1000; ++i) {
    const std::string n = random_name();
    Drop(n, GoodLine("r" + std::to_string(i), 1));
    dropped.push_back(n);
  }
  // Each dropped file leaves inbox/: into archive/ (a job) or failed/ (with a reason).
  ASSERT_TRUE(WaitFor([&] { return Names(inbox()).empty(); }, 600))
      << Names(inbox()).size() << " left in inbox/\n"
      << Log();
  const auto archived = Names(archive());
  std::vector<std::string> refused;
  for (const std::string& n : Names(failed()))
    if (n.size() < 11 || n.compare(n.size() - 11, 11, ".reason.txt") != 0) refused.push_back(n);
  EXPECT_EQ(archived.size() + refused.size(), 1000u);
  for (const std::string& n : refused) EXPECT_TRUE(Exists(failed(n + ".reason.txt"))) << Escaped(n);
  // Every archived file is a job whose results are in outbox/, once.
  ASSERT_TRUE(WaitFor(
      [&] {
        const auto l = RunLlmqWith({}, {"list", "--json", "--config", config_});
        if (l.exit_code != 0) return false;
        const json jobs = json::parse(l.out);
        if (jobs.size() != archived.size()) return false;
        for (const json& j : jobs)
          if (j["status"] != "completed") return false;
        return true;
      },
      600))
      << Log();
  std::multiset<std::string> ids;
  int summaries = 0;
  for (const std::string& n : Names(outbox())) {
    if (n.size() > 14 && n.compare(n.size() - 14, 14, ".results.jsonl") == 0)
      for (const json& r : ReadJsonl(outbox(n))) ids.insert(r["custom_id"].get<std::string>());
    summaries += n.size() > 13 && n.compare(n.size() - 13, 13, ".summary.json") == 0;
  }
  EXPECT_EQ(summaries, static_cast<int>(archived.size()));
  EXPECT_EQ(ids.size(), archived.size()) << "one result per accepted file";
  EXPECT_EQ(std::set<std::string>(ids.begin(), ids.end()).size(), ids.size()) << "none twice";
  std::printf("1,000 random names: %zu accepted, %zu refused; peak RSS %.1f MiB\n", archived.size(),
              refused.size(), HighWaterKb() / 1024.0);
  EXPECT_TRUE(Alive()) << "the daemon never restarted\n" << Log();
  EXPECT_EQ(pid_, pid);
  EXPECT_EQ(Stop(), 0) << Log();
}

}  // namespace
}  // namespace llmq::testing
