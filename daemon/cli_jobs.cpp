// The commands that talk to the daemon's queue (<state>/queue.db) without running the engine:
// llmq submit FILE... [--wait], llmq status [JOB] [--json], llmq list [--json], llmq cancel JOB,
// llmq report JOB [-o DIR], llmq results JOB [-o DIR], llmq workers [--json].
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "base/durable_file.h"
#include "base/json.h"
#include "base/text.h"
#include "base/untrusted_file.h"
#include "base/wall_clock.h"
#include "config/run_windows.h"
#include "daemon/cli_common.h"
#include "daemon/commands.h"
#include "daemon/eta.h"
#include "daemon/ingest.h"
#include "daemon/job_runner.h"
#include "daemon/queue_status.h"
#include "daemon/spool.h"
#include "engine/model/model_config.h"
#include "engine/text/tokenizer.h"
#include "jobs/finalizer.h"
#include "jobs/report/job_report.h"

namespace llmq::cli {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

struct QueueFlags {
  std::string config, state, queue;
  CLI::App* cmd = nullptr;
};

void AddQueueFlags(CLI::App* cmd, QueueFlags* f) {
  f->cmd = cmd;
  cmd->add_option("--config", f->config,
                  "YAML config file (default: $LLMQ_CONFIG, else " +
                      std::string(kSystemConfigPath) + " when it exists)");
  cmd->add_option("--state", f->state,
                  "The daemon's state folder (default: spool.state_dir of the config)");
  cmd->add_option("--queue", f->queue,
                  "The queue's PostgreSQL URL (default: queue.url of the config, else the state "
                  "folder's queue.db)");
}

// The config (for spool.state_dir and the model) and the queue of an existing state folder.
Status OpenQueue(const QueueFlags& f, LlmqConfig* cfg, std::unique_ptr<jobs::Store>* store) {
  std::string path;
  LLMQ_RETURN_IF_ERROR(FindConfig(f.config, &path));
  *cfg = LlmqConfig();
  if (!path.empty()) LLMQ_RETURN_IF_ERROR(LoadConfig(path, cfg));
  if (!f.state.empty()) cfg->state_dir = f.state;
  if (!f.queue.empty()) cfg->queue_url = f.queue;
  // Looked at every few seconds by scripts, while the daemon (which checked it) runs: no read of
  // the whole file each time.
  if (!cfg->queue_url.empty())
    return jobs::Store::Open(cfg->queue_url, store, jobs::Store::Check::kSkip);
  const spool::Paths p = spool::PathsFor(cfg->state_dir);
  std::error_code ec;
  if (!fs::exists(p.db, ec))
    return Status::NotFound(p.db + ": no llmq queue here (start llmq serve --state " + p.root +
                            ", or give --state / spool.state_dir)");
  return jobs::Store::Open(p.db, store, jobs::Store::Check::kSkip);
}

// --- submit
struct SubmitFlags {
  QueueFlags q;
  std::vector<std::string> files;
  std::string model, chat_template;
  bool wait = false;
};

int Submit(const CLI::App* cmd, const SubmitFlags& f) {
  LlmqConfig cfg;
  std::string cpath;
  if (Status st = FindConfig(f.q.config, &cpath); !st.ok()) return Fail(cmd, st);
  if (!cpath.empty())
    if (Status st = LoadConfig(cpath, &cfg); !st.ok()) return Fail(cmd, st, 2);
  if (!f.q.state.empty()) cfg.state_dir = f.q.state;
  if (!f.q.queue.empty()) cfg.queue_url = f.q.queue;
  if (!f.model.empty()) cfg.model_dir = f.model;
  if (!f.chat_template.empty()) cfg.chat_template = f.chat_template;
  if (cfg.model_dir.empty())
    return Fail(cmd,
                "--model DIR (or model.path in the config) is required: requests are "
                "validated with the model's tokenizer and chat template",
                2);
  const spool::Paths paths = spool::PathsFor(cfg.state_dir);
  std::error_code ec;
  if (!fs::is_directory(paths.root, ec))
    return Fail(cmd, paths.root + ": no llmq state folder (start llmq serve --state " + paths.root +
                         ", or give --state / spool.state_dir)");
  // Validation needs the tokenizer and the chat template only: the weights are not loaded.
  Model model;
  if (Status st = LoadModelConfig(cfg.model_dir, &model.cfg); !st.ok()) return Fail(cmd, st);
  if (Status st = Tokenizer::Load(cfg.model_dir, &model.tokenizer); !st.ok()) return Fail(cmd, st);
  BuildContext ctx;
  ctx.model = &model;
  ctx.grammars = std::make_shared<GrammarCache>(model.tokenizer.get());
  ctx.grammars->BuildTrieInBackground();  // beside the chat template's load
  if (Status st = LoadChatFormat(cfg, *model.tokenizer, &ctx.chat); !st.ok()) return Fail(cmd, st);
  SetOutputFormatsFrom(cfg, &ctx);
  ctx.model_name = ServedModelName(cfg);

  std::unique_ptr<jobs::Store> store;
  if (Status st = jobs::Store::Open(spool::QueueLocation(paths, cfg.queue_url), &store); !st.ok())
    return Fail(cmd, st);
  std::vector<UntrustedFile> opened;
  opened.reserve(f.files.size());  // IngestFile points into it
  std::vector<IngestFile> files;
  for (const std::string& path : f.files) {
    const std::string name = fs::path(path).filename().string();
    // The name becomes the job's name, in JSON and logs: checked as the inbox checks it.
    if (std::string why = spool::NameProblem(name); !why.empty())
      return Fail(cmd, Escaped(path) + ": refused: " + why + " (rename it); nothing was submitted",
                  2);
    UntrustedFile file;  // opened once; the hash, the check and the ingest read this descriptor
    if (Status st = OpenJobFile(fs::weakly_canonical(path, ec).string(), cfg.max_file_bytes, &file);
        !st.ok())
      return Fail(cmd, Escaped(path) + ": refused: " + st.message() + "; nothing was submitted",
                  st.code() == Status::Code::kInvalidArgument ? 2 : 1);
    IngestFile in;
    int64_t bytes = 0;
    if (Status st = HashFile(file, &in.sha256, &bytes); !st.ok()) return Fail(cmd, st);
    std::optional<jobs::JobRecord> existing;
    if (Status st = store->FindJob(name, in.sha256, &existing); !st.ok()) return Fail(cmd, st);
    if (existing)
      return Fail(cmd, Escaped(path) +
                           ": the same file (name and content) was already submitted as " +
                           existing->public_id + " (" + jobs::JobStatusName(existing->status) +
                           "); nothing was submitted");
    if (Status why = spool::WholeFileRefusal(file, name, cfg.max_line_bytes, ctx); !why.ok())
      return Fail(cmd, Escaped(path) + ": refused: " + why.message() + "; nothing was submitted",
                  1);
    for (const IngestFile& other : files)
      if (other.name == name && other.sha256 == in.sha256)
        return Fail(cmd, Escaped(path) + ": given twice", 2);
    opened.push_back(std::move(file));
    in.file = &opened.back();
    in.name = name;
    in.options = DumpJson(json{{"source", "submit"}, {"path", fs::absolute(path, ec).string()}});
    files.push_back(std::move(in));
  }
  std::vector<IngestedJob> jobs;
  IngestOptions iopt;
  iopt.max_line_bytes = cfg.max_line_bytes;
  if (Status st = IngestFiles(store.get(), ctx, files, iopt, &jobs); !st.ok()) return Fail(cmd, st);
  for (size_t i = 0; i < jobs.size(); ++i) {
    json opts = json::parse(files[i].options);
    opts["refused"] = jobs[i].refused;
    if (Status st = store->SetJobOptions(jobs[i].job.id, DumpJson(opts)); !st.ok())
      return Fail(cmd, st);
    std::printf("%s\n", jobs[i].job.public_id.c_str());
    std::fprintf(stderr, "llmq submit: %s as %s (%lld requests, %lld refused)\n",
                 Escaped(f.files[i]).c_str(), jobs[i].job.public_id.c_str(),
                 static_cast<long long>(jobs[i].job.total),
                 static_cast<long long>(jobs[i].refused));
  }
  std::fflush(stdout);
  if (!f.wait) return 0;
  for (;;) {
    bool all = true, ok = true;
    for (const IngestedJob& j : jobs) {
      jobs::JobRecord now;
      if (Status st = store->GetJob(j.job.id, &now); !st.ok()) return Fail(cmd, st);
      all = all && jobs::IsTerminal(now.status);
      ok = ok && now.status == jobs::JobStatus::kCompleted;
    }
    if (all) {
      for (const IngestedJob& j : jobs) {
        jobs::JobRecord now;
        if (store->GetJob(j.job.id, &now).ok())
          std::fprintf(stderr, "llmq submit: %s\n",
                       JobStatusLine(JobStatusJson(now, nullptr, nullptr, UnixNow())).c_str());
      }
      return ok ? 0 : 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

// --- status / list / cancel
struct ShowFlags {
  QueueFlags q;
  std::string job;
  bool json = false;
};

int Status_(const CLI::App* cmd, const ShowFlags& f, bool list) {
  LlmqConfig cfg;
  std::unique_ptr<jobs::Store> store;
  if (Status st = OpenQueue(f.q, &cfg, &store); !st.ok()) return Fail(cmd, st);
  int64_t asked = -1;  // the job asked for, by id
  if (!f.job.empty()) {
    jobs::JobRecord j;
    if (Status st = spool::FindJobByIdOrName(store.get(), f.job, &j); !st.ok())
      return Fail(cmd, st);
    asked = j.id;
  }
  // Every job and its totals, read once: `llmq status` tells an ETA for the one asked for from
  // all ahead of it (list: no totals but the unfinished jobs', none shown).
  QueueSnapshot q;
  if (Status st = ReadQueueSnapshot(store.get(), &q, list ? 0 : SIZE_MAX, cfg.lease_seconds);
      !st.ok())
    return Fail(cmd, st);
  // status (not list): the run windows, a line before the jobs, and in each job's object; what
  // the daemon is doing (or that none serves this queue), likewise. The daemon's progress and
  // windows from its serve.json, else the config's windows.
  std::string windows_line, daemon_line;
  EtaContext eta;
  if (!list) {
    std::vector<RunWindow> windows = cfg.run_windows;
    spool::ServeProgress progress;
    const bool serving = spool::ReadServeState(spool::PathsFor(cfg.state_dir), &windows, &progress);
    eta = EstimateQueue(q, serving ? &progress : nullptr, std::move(windows));
  }
  const json windows = list ? json(nullptr) : RunWindowsJson(eta, &windows_line);
  const json daemon = DaemonJson(eta, &daemon_line);
  json arr = json::array();
  for (const jobs::JobRecord& j : q.all) {
    if (asked >= 0 && j.id != asked) continue;
    const auto t = q.totals.find(j.id);
    const bool shown = !list && t != q.totals.end();
    arr.push_back(JobStatusJson(j, shown ? &t->second : nullptr, list ? nullptr : &eta, q.now));
    AddWaiting(q, j.id, &arr.back());
    if (!windows.is_null()) arr.back()["run_windows"] = windows;
    if (!list) arr.back()["daemon"] = daemon;
  }
  if (asked >= 0 && arr.empty()) return Fail(cmd, f.job + ": removed from the queue meanwhile");
  if (f.json) {
    std::printf("%s\n", DumpJson(f.job.empty() ? arr : arr[0], 2).c_str());
  } else {
    if (!list) std::printf("%s\n", daemon_line.c_str());
    if (!windows_line.empty()) std::printf("%s\n", windows_line.c_str());
    for (const json& o : arr) std::printf("%s\n", JobStatusLine(o).c_str());
  }
  return 0;
}

// OpenQueue, then the job named `job` (its batch_ id or name) in it.
Status OpenQueueAtJob(const QueueFlags& f, const std::string& job, LlmqConfig* cfg,
                      std::unique_ptr<jobs::Store>* store, jobs::JobRecord* j) {
  LLMQ_RETURN_IF_ERROR(OpenQueue(f, cfg, store));
  return spool::FindJobByIdOrName(store->get(), job, j);
}

int Cancel(const CLI::App* cmd, const ShowFlags& f) {
  LlmqConfig cfg;
  std::unique_ptr<jobs::Store> store;
  jobs::JobRecord j;
  if (Status st = OpenQueueAtJob(f.q, f.job, &cfg, &store, &j); !st.ok()) return Fail(cmd, st);
  if (jobs::IsTerminal(j.status))
    return Fail(cmd, j.public_id + " (" + j.name + ") is already " + jobs::JobStatusName(j.status) +
                         ": nothing to cancel");
  if (Status st = store->RequestCancel(j.id); !st.ok()) return Fail(cmd, st);
  std::printf("%s\n", j.public_id.c_str());
  std::fprintf(stderr,
               "llmq cancel: %s (%s): cancel requested; the daemon writes its finished results "
               "and marks the rest cancelled\n",
               j.public_id.c_str(), j.name.c_str());
  return 0;
}

struct ReportFlags {
  QueueFlags q;
  std::string job, out_dir = ".";
};

// `llmq report JOB`: the job's report computed from the queue as the finalizer computes the
// summary (jobs::SummarizeJob); the facts only the finalizing process knew (wall time, model,
// backend, profile) are read from the job's outbox summary when it has one.
int Report(const CLI::App* cmd, const ReportFlags& f) {
  LlmqConfig cfg;
  std::unique_ptr<jobs::Store> store;
  jobs::JobRecord j;
  if (Status st = OpenQueueAtJob(f.q, f.job, &cfg, &store, &j); !st.ok()) return Fail(cmd, st);
  const json opts = json::parse(j.options, nullptr, false);
  std::string stem = opts.is_object() ? opts.value("outbox", std::string()) : std::string();
  jobs::JobSummary sum;
  if (!stem.empty()) {
    const std::string path = spool::PathsFor(cfg.state_dir).outbox + "/" + stem + ".summary.json";
    UntrustedFile file;
    std::string text;
    if (UntrustedFile::Open(AT_FDCWD, path, path, int64_t{16} << 20, "16 MiB", &file).ok() &&
        file.ReadAll(&text).ok() && !jobs::ReadSummaryFacts(text, &sum).ok())
      std::fprintf(stderr, "llmq report: %s: not a summary; its facts are left out\n",
                   Escaped(path).c_str());
  } else {
    stem = spool::OutputStem(j.name, j.public_id);
  }
  if (sum.wall_seconds == 0 && j.started_at > 0)
    sum.wall_seconds = (j.finished_at > 0 ? j.finished_at : UnixNow()) - j.started_at;
  if (sum.input.empty()) sum.input = j.name;
  jobs::report::ReportCollector data;
  const Status walked = jobs::SummarizeJob(
      store.get(), j.id, &sum,
      [&](int64_t, bool is_error, std::string_view line, const jobs::ResultMetrics& m) {
        data.Add(is_error, line, m);
        return Status::Ok();
      });
  if (!walked.ok()) return Fail(cmd, walked);
  std::error_code ec;
  fs::create_directories(f.out_dir, ec);
  const std::string path = (fs::path(f.out_dir) / (stem + ".report.html")).string();
  if (Status st = WriteFileDurably(
          path, jobs::report::RenderJobReport(sum, data, j.public_id, j.name, j.options));
      !st.ok())
    return Fail(cmd, st);
  if (!jobs::IsTerminal(j.status))
    std::fprintf(stderr, "llmq report: %s is %s: the report shows the %lld results so far\n",
                 j.public_id.c_str(), jobs::JobStatusName(j.status),
                 static_cast<long long>(sum.completed + sum.failed));
  std::printf("%s\n", path.c_str());
  return 0;
}

// --- results
// `llmq results JOB -o DIR`: a finished job's files written again from the queue, as the worker
// that finalized it wrote them into its outbox: on any host that reaches the queue, so that no
// shared folder is needed (issue 27). The summary's facts only the finalizing worker knew (its
// model, backend, threads) are left out.
int Results(const CLI::App* cmd, const ReportFlags& f) {
  LlmqConfig cfg;
  std::unique_ptr<jobs::Store> store;
  jobs::JobRecord j;
  if (Status st = OpenQueueAtJob(f.q, f.job, &cfg, &store, &j); !st.ok()) return Fail(cmd, st);
  if (!jobs::IsTerminal(j.status))
    return Fail(cmd, j.public_id + " (" + j.name + ") is " + jobs::JobStatusName(j.status) + ": " +
                         std::to_string(j.completed + j.failed) + " of " + std::to_string(j.total) +
                         " results so far; its files are written once it is finished (llmq "
                         "status " +
                         j.public_id + ")");
  const json opts = json::parse(j.options, nullptr, false);
  std::string stem = opts.is_object() ? opts.value("outbox", std::string()) : std::string();
  if (stem.empty() || stem[0] == '.' || stem.find('/') != std::string::npos)
    stem = spool::OutputStem(j.name, j.public_id);
  std::error_code ec;
  fs::create_directories(f.out_dir, ec);
  const fs::path base = fs::path(f.out_dir) / stem;
  jobs::FinalizeTargets t;
  t.results = base.string() + ".results.jsonl";
  t.errors = base.string() + ".errors.jsonl";
  t.summary = base.string() + ".summary.json";
  jobs::JobSummary sum;
  sum.refused = j.refused;
  sum.resumed = std::max<int64_t>(0, j.completed + j.failed - j.refused);
  sum.input = opts.is_object() ? opts.value("archive", opts.value("path", j.name)) : j.name;
  if (j.started_at > 0 && j.finished_at > 0) sum.wall_seconds = j.finished_at - j.started_at;
  if (Status st = jobs::FinalizeJob(store.get(), j.id, t, &sum); !st.ok()) return Fail(cmd, st);
  std::printf("%s\n%s\n%s\n", t.results.c_str(), t.errors.c_str(), t.summary.c_str());
  return 0;
}

// --- workers
// Every worker that ever registered on the queue, by id: where it runs, what it does, and whether
// its heartbeat is recent (within queue.lease_seconds: its leases hold) or not (it stopped, or is
// cut off: its unfinished requests have gone back to the others).
int Workers(const CLI::App* cmd, const ShowFlags& f) {
  LlmqConfig cfg;
  std::unique_ptr<jobs::Store> store;
  if (Status st = OpenQueue(f.q, &cfg, &store); !st.ok()) return Fail(cmd, st);
  std::vector<jobs::WorkerInfo> all;
  if (Status st = store->ListWorkers(&all); !st.ok()) return Fail(cmd, st);
  const double now = jobs::store_internal::LeaseNow();  // heartbeats are on the real clock
  json arr = json::array();
  for (const jobs::WorkerInfo& w : all) {
    const double age = std::max(0.0, now - w.heartbeat_at);
    const bool alive = w.state != "stopped" && age <= cfg.lease_seconds;
    arr.push_back({{"id", w.id},
                   {"host", w.host},
                   {"device", w.device},
                   {"model", w.model},
                   {"served_models", w.served_models},  // [] = any
                   {"state", alive || w.state == "stopped" ? w.state : "lost"},
                   {"current_job", w.current_job.empty() ? json(nullptr) : json(w.current_job)},
                   {"tokens_per_second", w.tokens_per_second},
                   {"started_at", w.started_at},
                   {"heartbeat_at", w.heartbeat_at},
                   {"heartbeat_age_seconds", age}});
  }
  if (f.json) {
    std::printf("%s\n", arr.dump(2).c_str());
    return 0;
  }
  if (arr.empty()) {
    std::printf("no worker has registered on this queue (start llmq serve)\n");
    return 0;
  }
  std::printf("%-40s %-10s %-24s %-9s %10s %12s  %s\n", "WORKER", "STATE", "JOB", "TOKENS/S",
              "HEARTBEAT", "HOST", "DEVICE / MODEL");
  for (const json& w : arr) {
    char beat[32];
    std::snprintf(beat, sizeof beat, "%.0fs ago", w["heartbeat_age_seconds"].get<double>());
    std::string serves;
    for (const json& m : w["served_models"])
      serves += (serves.empty() ? " (serves " : ", ") + m.get<std::string>();
    if (!serves.empty()) serves += ")";
    std::printf("%-40s %-10s %-24s %9.1f %10s %12s  %s / %s%s\n",
                w["id"].get<std::string>().c_str(), w["state"].get<std::string>().c_str(),
                w["current_job"].is_null() ? "-" : w["current_job"].get<std::string>().c_str(),
                w["tokens_per_second"].get<double>(), beat, w["host"].get<std::string>().c_str(),
                w["device"].get<std::string>().c_str(), w["model"].get<std::string>().c_str(),
                serves.c_str());
  }
  return 0;
}

}  // namespace

void AddQueueCommands(CLI::App* app, int* rc) {
  {
    auto f = std::make_shared<SubmitFlags>();
    CLI::App* cmd = app->add_subcommand(
        "submit",
        "Validate job files and add them to the daemon's queue in one transaction; "
        "prints each job's id");
    cmd->add_option("files", f->files, "OpenAI Batch JSONL files")
        ->required()
        ->check(CLI::ExistingFile);
    AddQueueFlags(cmd, &f->q);
    cmd->add_option("--model", f->model,
                    "Model folder whose tokenizer and chat template validate the requests "
                    "(default: model.path of the config; weights are not loaded)");
    cmd->add_option("--chat-template", f->chat_template,
                    "llama-2|mistral|chatml|zephyr (default: the model's own, else llama-2)");
    cmd->add_flag("--wait", f->wait,
                  "Wait until every job is finished (exit 0 when all completed, else 1)");
    cmd->callback([cmd, f, rc] { *rc = Submit(cmd, *f); });
  }
  {
    auto f = std::make_shared<ShowFlags>();
    CLI::App* cmd = app->add_subcommand(
        "status",
        "Show jobs: status, request counts, tokens/s, cache hit rate, ETA; and the run windows "
        "(serve.run_windows) in effect, with when the next opens or closes");
    cmd->add_option("job", f->job, "A job's batch_ id or name (default: every job)");
    AddQueueFlags(cmd, &f->q);
    cmd->add_flag("--json", f->json, "Print JSON (an object for JOB, else an array)");
    cmd->callback([cmd, f, rc] { *rc = Status_(cmd, *f, false); });
  }
  {
    auto f = std::make_shared<ShowFlags>();
    CLI::App* cmd = app->add_subcommand("list", "List every job with its status and counts");
    AddQueueFlags(cmd, &f->q);
    cmd->add_flag("--json", f->json, "Print a JSON array");
    cmd->callback([cmd, f, rc] { *rc = Status_(cmd, *f, true); });
  }
  {
    auto f = std::make_shared<ShowFlags>();
    CLI::App* cmd = app->add_subcommand(
        "cancel", "Cancel a job: finished results are kept, the rest end as cancelled errors");
    cmd->add_option("job", f->job, "The job's batch_ id or name")->required();
    AddQueueFlags(cmd, &f->q);
    cmd->callback([cmd, f, rc] { *rc = Cancel(cmd, *f); });
  }
  {
    auto f = std::make_shared<ReportFlags>();
    CLI::App* cmd = app->add_subcommand(
        "report",
        "Write a job's report: one self-contained HTML file with plots (throughput, latency "
        "distributions, TTFT by prompt length, ITL by batch size, cache savings, failures); "
        "prints its path");
    cmd->add_option("job", f->job, "The job's batch_ id or name")->required();
    cmd->add_option("-o,--output-dir", f->out_dir,
                    "Folder to write <name>.report.html into (default: the current folder)");
    AddQueueFlags(cmd, &f->q);
    cmd->callback([cmd, f, rc] { *rc = Report(cmd, *f); });
  }
  {
    auto f = std::make_shared<ReportFlags>();
    CLI::App* cmd = app->add_subcommand(
        "results",
        "Write a finished job's files (<name>.results.jsonl, .errors.jsonl, .summary.json) from "
        "the queue, as its outbox has them: on any host that reaches the queue; prints their "
        "paths");
    cmd->add_option("job", f->job, "The job's batch_ id or name")->required();
    cmd->add_option("-o,--output-dir", f->out_dir,
                    "Folder to write the files into (default: the current folder)");
    AddQueueFlags(cmd, &f->q);
    cmd->callback([cmd, f, rc] { *rc = Results(cmd, *f); });
  }
  {
    auto f = std::make_shared<ShowFlags>();
    CLI::App* cmd = app->add_subcommand(
        "workers",
        "List the workers (llmq serve processes) on the queue: host, device, model, state, the "
        "job each works on, tokens/s and the last heartbeat");
    AddQueueFlags(cmd, &f->q);
    cmd->add_flag("--json", f->json, "Print a JSON array");
    cmd->callback([cmd, f, rc] { *rc = Workers(cmd, *f); });
  }
}

}  // namespace llmq::cli
