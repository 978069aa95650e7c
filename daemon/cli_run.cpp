// llmq run: one OpenAI Batch file through the same pipeline as the daemon, on a private store:
// check the outputs, ingest (validate + plan) into the store, feed the engine from it, commit
// results as they finish, finalize. Interrupted (SIGINT, SIGTERM, a crash), the same command
// resumes: finished results are kept in the store and never computed again.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>

#include "base/durable_file.h"
#include "base/json.h"
#include "base/text.h"
#include "daemon/cli_common.h"
#include "daemon/commands.h"
#include "daemon/ingest.h"
#include "daemon/job_runner.h"
#include "engine/backends/compute_resources.h"
#include "jobs/finalizer.h"

namespace llmq::cli {
namespace {

namespace fs = std::filesystem;

struct RunFlags {
  EngineFlags engine;
  std::string input, output, errors, summary_json, state;
  std::string report;  // --report; "" = beside the output (metrics.job_reports), or none
  bool no_report = false;
  bool progress = false, no_progress = false;
  bool profile = false;  // --profile
};

std::atomic<int> g_signal{0};
constexpr int64_t kFeedCacheBytes = int64_t{8} << 20;
void OnSignal(int sig) {
  g_signal.store(sig);
}

// Where the private store lives unless --state says: beside a regular output, else (standard
// output, a device) under $TMPDIR, keyed by the input and output paths.
std::string DefaultStateDir(const std::string& input, const std::string& output) {
  std::error_code ec;
  const bool in_place = output == "-" || output.rfind("/dev/", 0) == 0 ||
                        output.rfind("/proc/", 0) == 0 ||
                        (fs::exists(output, ec) && !fs::is_regular_file(output, ec));
  if (!in_place) {
    const fs::path out = fs::absolute(output, ec);
    return (out.parent_path() / ("." + out.filename().string() + ".llmq-run")).string();
  }
  const std::string key = (input == "-" ? input : fs::absolute(input, ec).string()) + '\0' +
                          fs::absolute(output, ec).string();
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : key) h = (h ^ c) * 1099511628211ull;
  const char* tmp = std::getenv("TMPDIR");
  char name[64];
  std::snprintf(name, sizeof name, "llmq-run-%u-%016llx", static_cast<unsigned>(getuid()),
                static_cast<unsigned long long>(h));
  return (fs::path(tmp && *tmp ? tmp : "/tmp") / name).string();
}

// Every path the run will write is checked before anything is computed.
Status CheckPaths(const RunFlags& f) {
  if (f.input != "-") {
    std::error_code ec;
    if (!fs::exists(f.input, ec)) return Status::NotFound(f.input + ": no such input file");
    if (fs::is_directory(f.input, ec))
      return Status::InvalidArgument(f.input + ": is a folder, not an input file");
    if (SameFile(f.input, f.output))
      return Status::InvalidArgument("-o " + f.output + " is the input file: it would be replaced");
    if (!f.errors.empty() && SameFile(f.input, f.errors))
      return Status::InvalidArgument("--errors " + f.errors + " is the input file");
    if (!f.summary_json.empty() && SameFile(f.input, f.summary_json))
      return Status::InvalidArgument("--summary-json " + f.summary_json + " is the input file");
  }
  if (!f.errors.empty() && f.errors != "-" && SameFile(f.errors, f.output))
    return Status::InvalidArgument("--errors and -o name the same file: " + f.errors);
  if (!f.summary_json.empty() && f.summary_json != "-" &&
      (SameFile(f.summary_json, f.output) || SameFile(f.summary_json, f.errors)))
    return Status::InvalidArgument("--summary-json names the same file as -o or --errors");
  for (const std::string* p : {&f.output, &f.errors, &f.summary_json})
    if (!p->empty()) LLMQ_RETURN_IF_ERROR(CheckWritable(*p));
  return Status::Ok();
}

// Where the run's report goes: --report when given; else, unless --no-report or
// metrics.job_reports is off, beside a regular output ("out.jsonl" -> "out.report.html"); else
// nowhere ("").
std::string ReportPath(const RunFlags& f, const LlmqConfig& cfg) {
  if (!f.report.empty()) return f.report;
  if (f.no_report || !cfg.job_reports || f.output == "-" || f.output.rfind("/dev/", 0) == 0 ||
      f.output.rfind("/proc/", 0) == 0)
    return "";
  std::string stem = f.output;
  for (const char* ext : {".jsonl", ".json"})
    if (stem.size() > std::strlen(ext) && stem.ends_with(ext)) {
      stem.resize(stem.size() - std::strlen(ext));
      break;
    }
  return stem + ".report.html";
}

// The report's path is checked before anything is computed, as CheckPaths checks the others: not
// the input nor another output, and writable.
Status CheckReportPath(const RunFlags& f, const std::string& report) {
  if (report.empty()) return Status::Ok();
  if (f.input != "-" && SameFile(f.input, report))
    return Status::InvalidArgument("the report " + report +
                                   " is the input file: it would be replaced");
  for (const std::string* p : {&f.output, &f.errors, &f.summary_json})
    if (!p->empty() && *p != "-" && SameFile(*p, report))
      return Status::InvalidArgument("the report " + report +
                                     " names the same file as -o, --errors or --summary-json");
  return CheckWritable(report);
}

// What must match for a stored run to be resumed: the input's bytes and everything that changes
// what is generated (the model, the chat template, the KV capacity that bounds chat max_tokens).
std::string Fingerprint(const LlmqConfig& cfg, const ChatFormat& chat) {
  std::error_code ec;
  const fs::path weights = fs::path(cfg.model_dir) / "model.safetensors";
  nlohmann::json j{{"model", fs::weakly_canonical(cfg.model_dir, ec).string()},
                   {"weights_bytes", fs::exists(weights, ec) ? fs::file_size(weights, ec) : 0},
                   {"chat_template", chat.identity()},
                   {"kv_cache_bytes", cfg.kv_cache_bytes},
                   {"block_size", cfg.block_size}};
  // Named only when set, so that runs begun before the key existed still resume.
  if (!cfg.tool_call_format.empty()) j["tool_call_format"] = cfg.tool_call_format;
  if (!cfg.reasoning_parser.empty()) j["reasoning_parser"] = cfg.reasoning_parser;
  return DumpJson(j);
}

void PrintProgress(int64_t done, int64_t total, int64_t tokens, double tps, double hit,
                   double eta) {
  char eta_s[16] = "--:--";  // unknown until a request finishes
  if (eta >= 0)
    std::snprintf(eta_s, sizeof eta_s, "%d:%02d", static_cast<int>(eta) / 60,
                  static_cast<int>(eta) % 60);
  const int width = 24, fill = total ? static_cast<int>(width * done / total) : width;
  std::fprintf(stderr,
               "\r[%.*s%*s] %lld/%lld requests | %lld tokens | %.1f tok/s | cache hit %.1f%% | "
               "ETA %s ",
               fill, "########################", width - fill, "", static_cast<long long>(done),
               static_cast<long long>(total), static_cast<long long>(tokens), tps, 100 * hit,
               eta_s);
}

class RunCommand {
 public:
  RunCommand(const CLI::App* cmd, const RunFlags& f) : cmd_(cmd), f_(f) {}

  int Main() {
    const auto t0 = std::chrono::steady_clock::now();
    LlmqConfig cfg;
    if (Status st = ResolveEngineConfig(f_.engine, &cfg); !st.ok())
      return Fail(cmd_, st, st.code() == Status::Code::kInvalidArgument ? 2 : 1);
    if (Status st = CheckPaths(f_); !st.ok())
      return Fail(cmd_, st, st.code() == Status::Code::kInvalidArgument ? 2 : 1);
    report_ = ReportPath(f_, cfg);
    if (Status st = CheckReportPath(f_, report_); !st.ok())
      return Fail(cmd_, st, st.code() == Status::Code::kInvalidArgument ? 2 : 1);
    cfg.profile = f_.profile;
    state_ = f_.state.empty() ? DefaultStateDir(f_.input, f_.output) : f_.state;
    max_line_bytes_ = cfg.max_line_bytes;

    Model model;
    std::unique_ptr<LlmEngine> engine;
    if (Status st = LoadServing(cfg, &model, &engine, &ctx_); !st.ok()) return Fail(cmd_, st);
    std::fprintf(stderr, "llmq run: %s\n", DescribeEngine(cfg, model, *engine).c_str());

    if (Status st = OpenJob(Fingerprint(cfg, *ctx_.chat)); !st.ok()) return Fail(cmd_, st);
    const int64_t resumed = job_.completed + job_.failed - job_.refused;
    if (resumed > 0)
      std::fprintf(stderr, "llmq run: resuming %s: %lld of %lld requests already finished\n",
                   state_.c_str(), static_cast<long long>(resumed),
                   static_cast<long long>(job_.total));

    // The committer writes results through its own connection, on its own thread.
    std::unique_ptr<jobs::Store> commit_store;
    if (Status st = jobs::Store::Open(db_path(), &commit_store, jobs::Store::Check::kSkip);
        !st.ok())
      return Fail(cmd_, st);
    // Ingest is done: feeding and committing page through the queue, they keep little cached.
    for (jobs::Store* s : {store_.get(), commit_store.get()})
      if (Status st = s->SetCacheBytes(kFeedCacheBytes); !st.ok()) return Fail(cmd_, st);
    jobs::ResultCommitter committer(commit_store.get(), {});
    JobRunner runner(ctx_, engine.get(), store_.get(), &committer, {});

    struct sigaction sa {};
    sa.sa_handler = OnSignal;
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    const bool progress = f_.progress || (isatty(STDERR_FILENO) && !f_.no_progress);
    const int64_t before = job_.completed + job_.failed;
    auto last = std::chrono::steady_clock::time_point();  // the first step shows at once
    auto show = [&] {
      const auto now = std::chrono::steady_clock::now();
      const double secs = std::chrono::duration<double>(now - t0).count();
      const RunnerProgress& p = runner.progress();
      const double eta = p.finished ? secs * (job_.total - before - p.finished) / p.finished : -1;
      PrintProgress(before + p.finished, job_.total, p.tokens_generated,
                    secs > 0 ? p.tokens_generated / secs : 0,
                    p.prompt_tokens ? double(p.cached_tokens) / p.prompt_tokens : 0, eta);
    };
    Status st = runner.Run([] { return g_signal.load() != 0; },
                           [&] {
                             if (!progress) return;
                             const auto now = std::chrono::steady_clock::now();
                             if (now - last < std::chrono::milliseconds(250)) return;
                             last = now;
                             show();
                           });
    if (progress) {
      show();
      std::fputc('\n', stderr);
    }
    const Status committed = committer.Close();
    if (st.ok()) st = committed;
    if (!st.ok())
      return Fail(cmd_, st.message() + " (finished results are kept in " + state_ + ")");
    if (const int sig = g_signal.load(); sig != 0) return Interrupted(sig);

    jobs::JobSummary sum;
    sum.preemptions = engine->stats().preemptions;
    sum.kv_blocks_peak = engine->stats().peak_blocks_in_use;
    sum.kv_blocks_touched = engine->blocks().num_touched();
    const EngineStats& es = engine->stats();
    sum.constrained_requests = es.constrained_requests;
    sum.forced_tokens = es.forced_tokens;
    if (ctx_.grammars != nullptr) {
      const GrammarCache::Stats gs = ctx_.grammars->stats();
      sum.schemas_compiled = gs.compiled;
      sum.compile_seconds = gs.compile_seconds;
      sum.compile_seconds_max = gs.max_compile_seconds;
    }
    sum.mask_seconds_p50 = engine->mask_times().Quantile(0.5);
    sum.mask_seconds_p99 = engine->mask_times().Quantile(0.99);
    if (f_.profile) sum.profile_seconds = engine->profile().Rows();
    const Status fin = Finalize(t0, resumed, runner.progress(), &sum);
    if (!fin.ok()) return Fail(cmd_, fin.message() + " (results are kept in " + state_ + ")");
    std::fprintf(stderr, "%s\n", sum.ToText().c_str());
    if (!report_.empty()) std::fprintf(stderr, "llmq run: report: %s\n", report_.c_str());
    store_.reset();
    commit_store.reset();
    // Renamed away first: a kill during the removal must not leave a half-removed state (a
    // queue.db without its WAL) under the name a rerun looks at.
    std::error_code ec;
    const std::string doomed = state_ + ".removing-" + std::to_string(getpid());
    fs::rename(state_, doomed, ec);
    fs::remove_all(ec ? state_ : doomed, ec);
    if (sum.requests > 0 && sum.completed == 0)
      return Fail(cmd_, "no request succeeded (" + std::to_string(sum.failed) + " failed); see " +
                            (f_.errors.empty() ? f_.output : f_.errors));
    return 0;
  }

 private:
  std::string db_path() const { return (fs::path(state_) / "queue.db").string(); }

  // Opens the private store and finds the job to resume, or ingests the input as a new one.
  Status OpenJob(const std::string& fingerprint) {
    std::error_code ec;
    fs::create_directories(state_, ec);
    if (ec)
      return Status::IoError(state_ + ": cannot create the run's state folder: " + ec.message());
    std::string input = f_.input;
    struct stat st {};
    if (input == "-" ||
        (::stat(input.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))) {
      // Standard input (or a pipe: `llmq run <(...)`) is kept, so that a rerun can compare it
      // and resume; the job file is then that copy.
      std::ifstream named;
      if (input != "-") named.open(input, std::ios::binary);
      std::istream& from = input == "-" ? std::cin : named;
      std::string all((std::istreambuf_iterator<char>(from)), {});
      input = (fs::path(state_) / "stdin.jsonl").string();
      LLMQ_RETURN_IF_ERROR(WriteFileDurably(input, all));
    } else {
      input = fs::weakly_canonical(input, ec).string();  // the user's own links are followed
    }
    // Opened once, as every job file is; the hash and the ingest read this descriptor.
    UntrustedFile file;
    LLMQ_RETURN_IF_ERROR(OpenJobFile(input, std::numeric_limits<int64_t>::max(), &file));
    LLMQ_RETURN_IF_ERROR(jobs::Store::Open(db_path(), &store_));
    std::vector<jobs::JobRecord> jobs;
    LLMQ_RETURN_IF_ERROR(store_->ListJobs(&jobs));
    if (!jobs.empty()) {  // an earlier run: resume it if it ran this input with these settings
      std::string sha;
      int64_t bytes = 0;
      LLMQ_RETURN_IF_ERROR(HashFile(file, &sha, &bytes));
      const auto opts = nlohmann::json::parse(jobs[0].options, nullptr, false);
      if (jobs.size() == 1 && jobs[0].sha256 == sha && opts.is_object() &&
          opts.value("fingerprint", "") == fingerprint) {
        job_ = jobs[0];
        return Status::Ok();
      }
      // another input or other settings: what is stored cannot be reused
      std::fprintf(stderr,
                   "llmq run: %s holds an interrupted run of another input or other settings; "
                   "starting over\n",
                   state_.c_str());
      store_.reset();
      for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(db_path() + suffix, ec);
      LLMQ_RETURN_IF_ERROR(jobs::Store::Open(db_path(), &store_));
    }
    IngestFile in;  // hashed while it is ingested: one pass over the input
    in.file = &file;
    in.name = f_.input == "-" ? "<stdin>" : Escaped(f_.input);  // named in messages and JSON
    in.options = DumpJson(nlohmann::json{{"fingerprint", fingerprint}});
    std::vector<IngestedJob> out;
    IngestOptions iopt;
    iopt.max_line_bytes = max_line_bytes_;
    LLMQ_RETURN_IF_ERROR(IngestFiles(store_.get(), ctx_, {in}, iopt, &out));
    job_ = out[0].job;
    return Status::Ok();
  }

  Status Finalize(std::chrono::steady_clock::time_point t0, int64_t resumed,
                  const RunnerProgress& p, jobs::JobSummary* sum) {
    // A run killed after finalizing (before its state was removed) finalizes again: the files
    // come out the same.
    jobs::JobRecord now;
    LLMQ_RETURN_IF_ERROR(store_->GetJob(job_.id, &now));
    const bool done_before = now.status == jobs::JobStatus::kCompleted;
    if (!done_before)
      LLMQ_RETURN_IF_ERROR(store_->SetJobStatus(job_.id, jobs::JobStatus::kFinalizing));
    jobs::FinalizeTargets t;
    t.results = f_.output;
    t.errors = f_.errors;
    t.summary = f_.summary_json;
    t.report = report_;
    sum->resumed = resumed;
    sum->refused = job_.refused;
    sum->finished_this_run = p.finished;
    sum->model = ctx_.model_name;
    sum->backend = ctx_.model->backend_description();
    sum->cpu_threads = CpuThreads();
    sum->input = f_.input;
    sum->output = f_.output;
    sum->errors = f_.errors;
    sum->wall_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    sum->output_tokens_per_second =
        sum->wall_seconds > 0 ? p.tokens_generated / sum->wall_seconds : 0;
    LLMQ_RETURN_IF_ERROR(jobs::FinalizeJob(store_.get(), job_.id, t, sum));
    return done_before ? Status::Ok() : store_->SetJobStatus(job_.id, jobs::JobStatus::kCompleted);
  }

  int Interrupted(int sig) {
    jobs::JobRecord now;
    int64_t finished = 0;
    if (store_->GetJob(job_.id, &now).ok()) finished = now.completed + now.failed;
    std::fprintf(stderr,
                 "llmq run: interrupted by %s: %lld of %lld requests finished and kept in %s; run "
                 "the same command again to resume\n",
                 sig == SIGINT ? "SIGINT" : "SIGTERM", static_cast<long long>(finished),
                 static_cast<long long>(job_.total), state_.c_str());
    return 128 + sig;
  }

  const CLI::App* cmd_;
  const RunFlags& f_;
  std::string state_;
  std::string report_;  // ReportPath: "" = none
  BuildContext ctx_;
  std::unique_ptr<jobs::Store> store_;
  jobs::JobRecord job_;
  int64_t max_line_bytes_ = 0;  // spool.max_line_bytes
};

}  // namespace

void AddRunCommand(CLI::App* app, int* rc) {
  auto f = std::make_shared<RunFlags>();
  CLI::App* cmd = app->add_subcommand(
      "run",
      "Run one OpenAI Batch JSONL file to completion, embedded (no daemon); rerun the same "
      "command to resume an interrupted run");
  cmd->add_option("input", f->input, "OpenAI Batch JSONL file ('-': standard input)")->required();
  cmd->add_option("-o,--output", f->output,
                  "One output line per input line, in input order ('-': standard output)")
      ->required();
  cmd->add_option("--errors", f->errors,
                  "Write error lines here instead of in place (OpenAI's split)");
  cmd->add_option("--summary-json", f->summary_json, "Write the run's summary as JSON here");
  cmd->add_option("--report", f->report,
                  "Write the job's report (self-contained HTML with plots) here (default: "
                  "<output stem>.report.html beside a regular output, unless metrics.job_reports "
                  "is false)");
  cmd->add_flag("--no-report", f->no_report, "Write no report");
  cmd->add_option("--state", f->state,
                  "Folder of the run's private queue (default: .<output>.llmq-run beside the "
                  "output); kept until the run completes");
  AddEngineFlags(cmd, &f->engine);
  cmd->add_flag("--progress", f->progress, "Show progress on stderr (default: when a terminal)");
  cmd->add_flag("--no-progress", f->no_progress, "Never show progress");
  cmd->add_flag("--profile", f->profile,
                "Time the engine's phases (scheduling, forward: GEMMs and attention, sampling) "
                "into the summary's profile_seconds");
  cmd->callback([cmd, f, rc] { *rc = RunCommand(cmd, *f).Main(); });
}

}  // namespace llmq::cli
