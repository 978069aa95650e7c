// The durable-queue `llmq run` against its targets, one table per measure, each from one run:
//   1. ingest: a 100,000-line OpenAI Batch job (chat lines with a shared ~300-char system prompt
//      and a distinct ~200-char user document, 1 in 10 a completions line) hashed and committed
//      into a fresh store by IngestFiles (what `llmq run` calls); target <= 2 s. IngestFiles' own
//      phase timers say where the time goes.
//   2. queue vs in-memory: one 2,000-request job (shared instructions, greedy and seeded-sampling
//      lines, max_tokens 4-8) run by the real binary (`llmq run`, queue path) and by the pre-queue
//      in-memory path (bench/inmemory_run.h, same model and engine options) as a process of its
//      own (this binary re-executed with --inmemory-child), both timed exec to exit, as the
//      command the queue path replaced was run; rotated rounds; medians and the ratio queue /
//      in-memory; target <= 1.05x. The in-memory path is also timed inside this process (model
//      load to written file): that row runs on a warm heap and a warm OpenMP team, which no new
//      `llmq run` has, so it is shown beside, not judged. The completions must match.
//   3. memory: peak RSS (wait4 ru_maxrss) of the real binary on a 1,000-request and on a
//      --requests-large (default 1,000,000) request job of the same shape (a few words of prompt,
//      max_tokens 1); target: difference <= 300 MB.
//   4. store: the pieces the suite checks for correctness only (tests bound no wall-clock time):
//      ParseBatchLine over 10,000 lines (batch_request_test's: half chat with a ~450-char user
//      message, half completions; the bound it had: < 0.5 s), and the Store at 100,000 requests
//      (store_test's: 200-byte bodies, shuffled plan ranks): the inserts and FinishIngest of one
//      transaction, its commit, NextPending(1,000) from the middle, CommitResults of 50,000.
//   queue_bench [--only ingest,compare,memory,store] [--requests-large N] [--rounds 5]
//               [--ingest-lines 100000] [--compare-requests 2000] [--dir bench-models/queue-bench]
//               [--kv-cache-memory SIZE]   (engine.kv_cache_memory for both paths; default 1GiB)
#include <fcntl.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "bench/bench_util.h"
#include "bench/inmemory_run.h"
#include "config/config.h"
#include "daemon/cli_common.h"
#include "daemon/ingest.h"
#include "daemon/request_builder.h"
#include "engine/core/prefix_planner.h"
#include "engine/model/model.h"
#include "engine/sampling/sampler.h"
#include "engine/text/chat_format.h"
#include "engine/tools/model_maker.h"
#include "jobs/batch_output.h"
#include "jobs/batch_request.h"
#include "jobs/store.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

using namespace llmq::bench;

// ---------------------------------------------------------------------------------------------
// Child processes. ru_maxrss of a child is at least the resident size of the process it was
// forked from (the copied address space counts until exec, and exec keeps the high-water mark),
// so the real binary is started by a small spawner forked at the very start of main, before this
// process loads a model or builds a job: the figures are the binary's own.

struct ProcResult {
  int status = 0;
  double wall = 0;
  long maxrss_kb = 0;
};

int g_to_spawner = -1, g_from_spawner = -1;

void SpawnerLoop(int in, int out) {
  for (;;) {
    uint32_t len = 0;
    if (read(in, &len, sizeof len) != sizeof len) _exit(0);
    std::string msg(len, '\0');
    for (size_t got = 0; got < len;) {
      const ssize_t r = read(in, msg.data() + got, len - got);
      if (r <= 0) _exit(1);
      got += static_cast<size_t>(r);
    }
    // msg: log path \0 argv[0] \0 argv[1] \0 ...
    std::vector<std::string> parts;
    for (size_t i = 0;;) {
      const size_t end = msg.find('\0', i);
      parts.push_back(msg.substr(i, end == std::string::npos ? end : end - i));
      if (end == std::string::npos) break;
      i = end + 1;
    }
    std::vector<char*> argv;
    for (size_t i = 1; i < parts.size(); ++i) argv.push_back(parts[i].data());
    argv.push_back(nullptr);
    const auto t0 = Clock::now();
    const pid_t pid = fork();
    if (pid == 0) {
      const int fd = open(parts[0].c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
      }
      execv(argv[0], argv.data());
      _exit(127);
    }
    ProcResult res;
    rusage ru{};
    if (pid < 0 || wait4(pid, &res.status, 0, &ru) < 0) res.status = -1;
    res.wall = Since(t0);
    res.maxrss_kb = ru.ru_maxrss;
    if (write(out, &res, sizeof res) != sizeof res) _exit(1);
  }
}

void StartSpawner() {
  int down[2], up[2];
  if (pipe(down) || pipe(up)) Die("pipe failed");
  const pid_t pid = fork();
  if (pid < 0) Die("fork failed");
  if (pid == 0) {
    close(down[1]);
    close(up[0]);
    SpawnerLoop(down[0], up[1]);
  }
  close(down[0]);
  close(up[1]);
  g_to_spawner = down[1];
  g_from_spawner = up[0];
}

// Runs `args` (args[0] a path), stdout and stderr to `log`.
ProcResult Spawn(const std::vector<std::string>& args, const std::string& log) {
  std::string msg = log;
  for (const std::string& a : args) msg += '\0' + a;
  const uint32_t len = static_cast<uint32_t>(msg.size());
  if (write(g_to_spawner, &len, sizeof len) != sizeof len ||
      write(g_to_spawner, msg.data(), len) != static_cast<ssize_t>(len))
    Die("spawner gone");
  ProcResult res;
  if (read(g_from_spawner, &res, sizeof res) != sizeof res) Die("spawner gone");
  return res;
}

ProcResult MustSpawn(const std::vector<std::string>& args, const std::string& log) {
  const ProcResult r = Spawn(args, log);
  if (!WIFEXITED(r.status) || WEXITSTATUS(r.status) != 0) {
    std::ifstream f(log);
    std::string text((std::istreambuf_iterator<char>(f)), {});
    Die(args[0] + " " + args[1] + " failed (status " + std::to_string(r.status) + "): " + text);
  }
  return r;
}

// ---------------------------------------------------------------------------------------------
// Job text.

// The shared system prompt of the ingest job: about 300 characters.
const std::string kSystem =
    "You are a careful assistant for the operations team of a mid-sized logistics company. Read "
    "the document the user gives you and answer in plain English. Keep the answer short, quote "
    "figures exactly as written, never invent facts that are not in the document, and say so "
    "plainly when the document does not answer.";

// Ingest: 9 in 10 chat lines (shared system prompt + distinct document), 1 in 10 completions.
void WriteIngestJob(const std::string& path, int lines) {
  std::ofstream out(path, std::ios::binary);
  llmq::Rng rng(7);
  for (int i = 0; i < lines; ++i) {
    const std::string doc = "Document " + std::to_string(i) + ": " + Words(rng, 190);
    const std::string id = "request-" + std::to_string(i);
    if (i % 10 == 9) {
      out << Line(id, "/v1/completions",
                  {{"model", "tiny"},
                   {"prompt", kSystem + "\n\n" + doc + "\n\nAnswer:"},
                   {"max_tokens", 64},
                   {"temperature", 0}})
                 .dump()
          << '\n';
    } else {
      json body{
          {"model", "tiny"},
          {"messages",
           {{{"role", "system"}, {"content", kSystem}}, {{"role", "user"}, {"content", doc}}}},
          {"max_tokens", 128}};
      if (i % 3 == 0) {
        body["temperature"] = 0.7;
        body["seed"] = i;
      } else {
        body["temperature"] = 0;
      }
      out << Line(id, "/v1/chat/completions", body).dump() << '\n';
    }
  }
}

// Memory: completions of a few words, one token out.
void WriteShortJob(const std::string& path, int64_t requests) {
  std::ofstream out(path, std::ios::binary);
  llmq::Rng rng(13);
  for (int64_t i = 0; i < requests; ++i) {
    const int words = 2 + static_cast<int>(rng.NextU64() % 4);
    std::string prompt = "Classify:";
    for (int w = 0; w < words; ++w) prompt += std::string(" ") + kWords[rng.NextU64() % kNumWords];
    out << Line("r" + std::to_string(i), "/v1/completions",
                {{"model", "tiny"}, {"prompt", prompt}, {"max_tokens", 1}, {"temperature", 0}})
               .dump()
        << '\n';
  }
}

// ---------------------------------------------------------------------------------------------

struct Env {
  std::string dir, model_dir, config, kv;
  llmq::LlmqConfig cfg;
};

void RemoveStore(const std::string& db) {
  std::error_code ec;
  for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(db + suffix, ec);
}

void IngestBench(const Env& env, int lines) {
  const std::string path = env.dir + "/ingest.jsonl";
  WriteIngestJob(path, lines);
  llmq::Model model;
  Check(llmq::LoadModel(env.model_dir, &model), "LoadModel");
  llmq::BuildContext ctx;
  ctx.model = &model;
  Check(llmq::ChatFormat::Load(env.model_dir, "", *model.tokenizer, &ctx.chat), "ChatFormat");
  ctx.capacity =  // kv_cache_memory auto (0): the context bounds it
      env.cfg.kv_cache_bytes > 0 ? std::min(model.cfg.max_position_embeddings,
                                            llmq::KvBlocksFor(model.backend->kv_bytes_per_token(),
                                                              env.cfg.kv_cache_bytes, 16) *
                                                16)
                                 : model.cfg.max_position_embeddings;
  ctx.capacity_setting = "--kv-cache-memory";
  ctx.model_name = "model";

  const std::string db = env.dir + "/ingest.db";
  RemoveStore(db);
  // As `llmq run` ingests a fresh input: the file is hashed while it is read (one pass).
  const int64_t bytes = static_cast<int64_t>(fs::file_size(path));
  const std::string sha;
  const auto t1 = Clock::now();
  std::unique_ptr<llmq::jobs::Store> store;
  Check(llmq::jobs::Store::Open(db, &store), "Store::Open");
  const double open_s = Since(t1);
  llmq::UntrustedFile opened;
  Check(llmq::OpenJobFile(path, bytes, &opened), "OpenJobFile");
  llmq::IngestFile file{&opened, "ingest.jsonl", sha, "{}", -1, ""};
  std::vector<llmq::IngestedJob> out;
  llmq::IngestTimings ph;
  const auto t2 = Clock::now();
  Check(llmq::IngestFiles(store.get(), ctx, {file}, {}, &out, &ph), "IngestFiles");
  const double ingest_s = Since(t2);
  const double total_s = open_s + ingest_s;
  store.reset();
  const int64_t db_bytes = static_cast<int64_t>(fs::file_size(db));

  RemoveStore(db);

  std::printf("\n## 1. Ingest (%s)\n\n", Stamp().c_str());
  std::printf(
      "%d lines, %.1f MB (chat with a shared %zu-char system prompt + a distinct ~200-char "
      "document; 1 in 10 completions), refused %lld, into a fresh store (%.1f MB)\n",
      lines, bytes / 1e6, kSystem.size(), static_cast<long long>(out[0].refused), db_bytes / 1e6);
  std::printf("| %-44s | %9s |\n", "phase", "seconds");
  std::printf("|----------------------------------------------|-----------|\n");
  std::printf("| %-44s | %9.3f |\n", "open the fresh store (Store::Open)", open_s);
  std::printf("| %-44s | %9.3f |\n", "ingest (IngestFiles: read+hash..commit)", ingest_s);
  std::printf("| %-44s | %9.3f |\n", "total", total_s);
  std::printf("lines/s: %.0f | target <= 2 s: %s (%.2fx of the target)\n", lines / total_s,
              total_s <= 2.0 ? "met" : "MISSED", total_s / 2.0);

  std::printf("\nWhere ingest's time goes (IngestFiles' own phase timers, wall seconds):\n");
  std::printf("| %-44s | %9s | %7s | %9s |\n", "phase", "seconds", "share", "us/line");
  std::printf(
      "|----------------------------------------------|-----------|---------|-----------|\n");
  const std::pair<const char*, double> rows[] = {
      {"read lines + SHA-256", ph.read},
      {"validate (UTF-8, ParseBatchLine, PlanKey)", ph.validate},
      {"duplicate custom_ids, error lines", ph.check},
      {"PlanPrefixes (per 65,536-line chunk)", ph.plan},
      {"Store::InsertRequest (task, overlaps reading)", ph.insert},
      {"waiting for the last insert", ph.insert_wait},
      {"FinishIngest", ph.finish},
      {"Store::Commit", ph.commit}};
  for (const auto& [name, s] : rows)
    std::printf("| %-44s | %9.3f | %6.1f%% | %9.2f |\n", name, s, 100 * s / ingest_s,
                1e6 * s / lines);
  std::printf(
      "(rows overlap: reading and validating go on while the previous chunk is inserted)\n");
}

// ---------------------------------------------------------------------------------------------

// custom_id -> the first choice's text, of every successful line; errors counted.
std::map<std::string, std::string> Completions(const std::string& path, int* errors) {
  std::map<std::string, std::string> out;
  std::ifstream in(path);
  std::string text;
  *errors = 0;
  while (std::getline(in, text)) {
    const json j = json::parse(text);
    // A failure outside HTTP (top-level error) or a refused line (its HTTP 400 response).
    if (!j["error"].is_null() || j["response"].is_null() || j["response"]["status_code"] != 200) {
      ++*errors;
      continue;
    }
    const json& c = j["response"]["body"]["choices"][0];
    out[j["custom_id"]] = c.contains("message") ? c["message"]["content"].get<std::string>()
                                                : c["text"].get<std::string>();
  }
  return out;
}

// The in-memory path's options for `cfg`, as the command it replaced set them.
llmq::bench::BatchRunOptions InMemoryOptions(const llmq::LlmqConfig& cfg, const std::string& in,
                                             const std::string& out) {
  llmq::bench::BatchRunOptions opt;
  opt.input = in;
  opt.output = out;
  opt.model_name = fs::path(cfg.model_dir).filename().string();
  bool found = false;
  opt.chat_template = llmq::DetectChatTemplate(cfg.model_dir, &found);
  opt.engine = llmq::cli::EngineOptionsFrom(cfg);
  return opt;
}

void CompareBench(const Env& env, int requests, int rounds) {
  const std::string in = env.dir + "/compare.jsonl";
  WriteCompareJob(in, requests, 11);
  const std::string q_out = env.dir + "/compare-queue.out.jsonl";
  const std::string m_out = env.dir + "/compare-inmemory.out.jsonl";
  const std::vector<std::string> args = {LLMQ_BINARY,
                                         "run",
                                         in,
                                         "-o",
                                         q_out,
                                         "--config",
                                         env.config,
                                         "--no-progress",
                                         "--summary-json",
                                         env.dir + "/compare-queue.summary.json"};
  const llmq::bench::BatchRunOptions opt = InMemoryOptions(env.cfg, in, m_out);

  auto run_queue = [&] {
    const ProcResult r = MustSpawn(args, env.dir + "/compare-queue.log");
    std::ifstream f(env.dir + "/compare-queue.summary.json");
    const json s = json::parse(f);
    return std::pair<double, double>{r.wall, s["wall_seconds"].get<double>()};
  };
  auto run_memory = [&] {
    const auto t0 = Clock::now();  // from model load to the written output
    llmq::Model model;
    Check(llmq::LoadModel(env.cfg.model_dir, &model), "LoadModel");
    llmq::bench::BatchSummary sum;
    Check(llmq::bench::RunBatchFile(model, opt, &sum), "RunBatchFile");
    return Since(t0);
  };
  // The same in-memory path as a process of its own (this binary, re-executed): exec to exit, as
  // the `llmq run` it replaced was run and as the queue path is measured.
  const std::vector<std::string> child_args = {fs::read_symlink("/proc/self/exe").string(),
                                               "--inmemory-child", in, m_out, env.config};
  auto run_memory_process = [&] {
    return MustSpawn(child_args, env.dir + "/compare-inmemory.log").wall;
  };
  // One untimed run of each first (page cache, first-touch of the binary).
  run_queue();
  run_memory();
  run_memory_process();
  std::vector<double> queue, queue_inner, memory, memory_process;
  for (int r = 0; r < rounds; ++r) {
    // Rotated: which path goes first changes from round to round.
    for (int k = 0; k < 3; ++k) {
      switch ((r + k) % 3) {
        case 0: {
          const auto [wall, inner] = run_queue();
          queue.push_back(wall);
          queue_inner.push_back(inner);
          break;
        }
        case 1:
          memory_process.push_back(run_memory_process());
          break;
        default:
          memory.push_back(run_memory());
      }
    }
  }

  int q_err = 0, m_err = 0;
  const auto qc = Completions(q_out, &q_err);
  const auto mc = Completions(m_out, &m_err);
  int greedy = 0, greedy_same = 0, seeded = 0, seeded_same = 0;
  for (int i = 0; i < requests; ++i) {
    const std::string id = "note-" + std::to_string(i);
    const auto a = qc.find(id), b = mc.find(id);
    const bool same = a != qc.end() && b != mc.end() && a->second == b->second;
    (i % 2 == 0 ? greedy : seeded) += 1;
    (i % 2 == 0 ? greedy_same : seeded_same) += same;
  }

  const double qm = Median(queue), mm = Median(memory_process), ratio = qm / mm;
  std::printf("\n## 2. Queue vs in-memory (%s)\n\n", Stamp().c_str());
  std::printf(
      "%d requests (chat, shared instruction + distinct ~120-char note; half greedy, half seeded "
      "sampling; max_tokens 4-8), tiny model, same config (%s); %d rounds each (the order "
      "rotated), after "
      "one untimed run of each; model load included in both\n",
      requests, env.config.c_str(), rounds);
  std::printf("| %-52s | %9s | %9s | %9s |\n", "path", "median s", "min s", "max s");
  std::printf(
      "|------------------------------------------------------|-----------|-----------|----"
      "-------|\n");
  auto row = [](const char* name, const std::vector<double>& v) {
    std::printf("| %-52s | %9.3f | %9.3f | %9.3f |\n", name, Median(v),
                *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end()));
  };
  row("queue: `llmq run` process, exec to exit", queue);
  row("  (its own summary wall_seconds: load..finalized)", queue_inner);
  row("in-memory: its own process, exec to exit", memory_process);
  row("  (in this process: LoadModel + RunBatchFile)", memory);
  std::printf("ratio queue / in-memory, both processes (medians): %.3fx | target <= 1.05x: %s\n",
              ratio, ratio <= 1.05 ? "met" : "MISSED");
  std::printf("ratio of the fastest runs (min / min): %.3fx; against the in-process run: %.3fx\n",
              *std::min_element(queue.begin(), queue.end()) /
                  *std::min_element(memory_process.begin(), memory_process.end()),
              qm / Median(memory));
  std::printf("rounds (queue s / in-memory process s / in-process s):");
  for (int r = 0; r < rounds; ++r)
    std::printf(" %.2f/%.2f/%.2f", queue[r], memory_process[r], memory[r]);
  std::printf("\n");
  std::printf("same completions: greedy %d/%d, seeded %d/%d; error lines: queue %d, in-memory %d\n",
              greedy_same, greedy, seeded_same, seeded, q_err, m_err);
}

// ---------------------------------------------------------------------------------------------

void MemoryBench(const Env& env, int64_t large) {
  struct Row {
    int64_t requests;
    ProcResult r;
    int64_t completed = 0, failed = 0;
  };
  std::vector<Row> rows;
  for (const int64_t n : {int64_t{1000}, large}) {
    const std::string in = env.dir + "/short-" + std::to_string(n) + ".jsonl";
    WriteShortJob(in, n);
    const std::string out = env.dir + "/short.out.jsonl";
    const std::string summary = env.dir + "/short.summary.json";
    Row row{n, MustSpawn({LLMQ_BINARY, "run", in, "-o", out, "--config", env.config,
                          "--no-progress", "--summary-json", summary},
                         env.dir + "/short.log")};
    std::ifstream f(summary);
    const json s = json::parse(f);
    row.completed = s.value("requests", int64_t{0}) - s.value("failed", int64_t{0});
    row.failed = s.value("failed", int64_t{0});
    rows.push_back(row);
    std::error_code ec;
    fs::remove(out, ec);
  }
  const double diff_mb = (rows[1].r.maxrss_kb - rows[0].r.maxrss_kb) * 1024.0 / 1e6;
  std::printf("\n## 3. Peak memory of `llmq run` (%s)\n\n", Stamp().c_str());
  std::printf(
      "completions of a few words (\"Classify: w w w\"), max_tokens 1, greedy, tiny model, same "
      "config (kv_cache_memory %s); peak RSS = wait4 ru_maxrss of the process\n",
      env.kv.empty() ? "default 1GiB" : env.kv.c_str());
  std::printf("| %9s | %9s | %7s | %9s | %12s | %13s |\n", "requests", "completed", "failed",
              "wall s", "requests/s", "peak RSS MB");
  std::printf("|-----------|-----------|---------|-----------|--------------|---------------|\n");
  for (const Row& r : rows)
    std::printf("| %9lld | %9lld | %7lld | %9.1f | %12.0f | %13.1f |\n",
                static_cast<long long>(r.requests), static_cast<long long>(r.completed),
                static_cast<long long>(r.failed), r.r.wall, r.requests / r.r.wall,
                r.r.maxrss_kb * 1024.0 / 1e6);
  std::printf("difference: %.1f MB | target <= 300 MB: %s\n", diff_mb,
              diff_mb <= 300 ? "met" : "MISSED");
}

void StoreBench(const Env& env, int rounds) {
  std::vector<std::string> lines;
  for (int i = 0; i < 10000; ++i) {
    const std::string id = "req-" + std::to_string(i);
    if (i % 2) {
      const std::string text = "Please summarise the following text in two sentences: " +
                               std::string(400, static_cast<char>('a' + i % 26));
      lines.push_back(Line(id, "/v1/chat/completions",
                           {{"model", "m"},
                            {"messages",
                             {{{"role", "system"}, {"content", "Be brief."}},
                              {{"role", "user"}, {"content", text}}}},
                            {"max_tokens", 256},
                            {"temperature", 0}})
                          .dump());
    } else {
      const std::string prompt = "Once upon a time there was a line number " + std::to_string(i);
      lines.push_back(Line(id, "/v1/completions", {{"model", "m"}, {"prompt", prompt}}).dump());
    }
  }
  std::vector<double> parse;
  for (int r = 0; r < rounds; ++r) {
    int ok = 0;
    const auto t0 = Clock::now();
    for (size_t i = 0; i < lines.size(); ++i)
      ok +=
          llmq::jobs::ParseBatchLine(lines[i], static_cast<int>(i + 1), "big.jsonl").error.empty();
    parse.push_back(Since(t0));
    if (ok != static_cast<int>(lines.size())) Die("ParseBatchLine refused a line");
  }

  constexpr int kRequests = 100000;
  const std::string db = env.dir + "/store.db";
  RemoveStore(db);
  std::unique_ptr<llmq::jobs::Store> store;
  Check(llmq::jobs::Store::Open(db, &store), "Store::Open");
  const auto t1 = Clock::now();
  Check(store->Begin(), "Begin");
  llmq::jobs::JobRecord job;
  job.name = "big.jsonl";
  job.sha256 = "big";
  Check(store->InsertJob(&job), "InsertJob");
  llmq::jobs::NewRequest req;
  req.body = std::string(200, 'b');
  for (int i = 1; i <= kRequests; ++i) {
    req.line = i;
    req.custom_id = "req-" + std::to_string(i);
    req.plan_rank = (static_cast<int64_t>(i) * 7919) % kRequests + 1;
    Check(store->InsertRequest(job.id, req), "InsertRequest");
  }
  Check(store->FinishIngest(job.id, llmq::jobs::JobStatus::kInProgress), "FinishIngest");
  const double inserts = Since(t1);
  const auto t2 = Clock::now();
  Check(store->Commit(), "Commit");
  const double commit = Since(t2);
  std::vector<llmq::jobs::PendingRequest> page;
  const auto t3 = Clock::now();
  Check(store->NextPending(kRequests / 2, 1000, &page), "NextPending");
  const double next = Since(t3);
  std::vector<llmq::jobs::Result> results;
  for (int i = 1; i <= kRequests; i += 2) {
    llmq::jobs::Result r;
    r.job = job.id;
    r.line = i;
    r.output = "{\"line\": " + std::to_string(i) + "}";
    r.metrics.completion_tokens = 1;
    results.push_back(std::move(r));
  }
  const auto t4 = Clock::now();
  Check(store->CommitResults(results), "CommitResults");
  const double results_s = Since(t4);
  store.reset();
  RemoveStore(db);

  std::printf("\n## 4. Parsing and the store (%s)\n\n", Stamp().c_str());
  std::printf("| %-58s | %9s | %12s |\n", "operation", "seconds", "per second");
  std::printf(
      "|------------------------------------------------------------|-----------|"
      "--------------|\n");
  const double p = Median(parse);
  std::printf("| %-58s | %9.3f | %12.0f |\n",
              ("ParseBatchLine, 10,000 lines (median of " + std::to_string(rounds) + ")").c_str(),
              p, lines.size() / p);
  std::printf("| %-58s | %9.3f | %12.0f |\n", "InsertRequest x 100,000 + FinishIngest (one txn)",
              inserts, kRequests / inserts);
  std::printf("| %-58s | %9.3f | %12s |\n", "Commit of that transaction", commit, "-");
  std::printf("| %-58s | %9.4f | %12s |\n", "NextPending(1,000) from rank 50,000", next, "-");
  std::printf("| %-58s | %9.3f | %12.0f |\n", "CommitResults, 50,000 results (one txn)", results_s,
              results.size() / results_s);
  std::printf("ParseBatchLine: %s the 0.5 s bound batch_request_test had\n",
              p < 0.5 ? "within" : "OVER");
}

// --inmemory-child INPUT OUTPUT CONFIG: the in-memory baseline as a process of its own.
int InMemoryChild(const std::string& input, const std::string& output, const std::string& config) {
  llmq::LlmqConfig cfg;
  Check(llmq::LoadConfig(config, &cfg), "LoadConfig");
  const llmq::bench::BatchRunOptions opt = InMemoryOptions(cfg, input, output);
  llmq::Model model;
  Check(llmq::LoadModel(cfg.model_dir, &model), "LoadModel");
  llmq::bench::BatchSummary sum;
  Check(llmq::bench::RunBatchFile(model, opt, &sum), "RunBatchFile");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "--inmemory-child")
    return InMemoryChild(argv[2], argv[3], argv[4]);
  StartSpawner();  // first: it must stay small (see Spawn)
  std::string only = "ingest,compare,memory,store", dir = "bench-models/queue-bench";
  int64_t large = 1000000;
  int rounds = 5, ingest_lines = 100000, compare_requests = 2000;
  std::string kv;  // engine.kv_cache_memory for both paths; empty: the default (1GiB)
  Flags(argc, argv,
        "usage: queue_bench [--only ingest,compare,memory,store] [--requests-large 1000000] "
        "[--rounds 5] [--ingest-lines 100000] [--compare-requests 2000] [--kv-cache-memory SIZE] "
        "[--dir bench-models/queue-bench]")
      .Get("--only", &only)
      .Get("--requests-large", &large)
      .Get("--rounds", &rounds)
      .Get("--ingest-lines", &ingest_lines)
      .Get("--compare-requests", &compare_requests)
      .Get("--kv-cache-memory", &kv)
      .Get("--dir", &dir)
      .Done();
  Env env;
  env.dir = fs::absolute(dir).string();
  env.kv = kv;
  fs::create_directories(env.dir);
  env.model_dir = env.dir + "/model";
  llmq::ModelConfig mcfg;
  llmq::DType dtype;
  Check(llmq::ShapeConfig("tiny", &mcfg, &dtype), "ShapeConfig");
  Check(llmq::MakeModel(mcfg, dtype, 1, env.model_dir), "MakeModel");
  // One config for the binary and the in-process baseline: the defaults, model.path set.
  env.config = env.dir + "/llmq.yaml";
  {
    std::ofstream cfg(env.config);
    cfg << "model:\n  path: " << env.model_dir << "\n";
    if (!kv.empty()) cfg << "engine:\n  kv_cache_memory: " << kv << "\n";
  }
  Check(llmq::LoadConfig(env.config, &env.cfg), "LoadConfig");

  std::printf("# queue_bench: %s, binary %s\n", Stamp().c_str(), LLMQ_BINARY);
  std::fflush(stdout);
  if (only.find("ingest") != std::string::npos) IngestBench(env, ingest_lines);
  std::fflush(stdout);
  if (only.find("compare") != std::string::npos) CompareBench(env, compare_requests, rounds);
  std::fflush(stdout);
  if (only.find("memory") != std::string::npos) MemoryBench(env, large);
  std::fflush(stdout);
  if (only.find("store") != std::string::npos) StoreBench(env, rounds);
  return 0;
}
