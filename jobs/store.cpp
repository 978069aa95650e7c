#include "jobs/store.h"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>

#include "base/wall_clock.h"
#include "jobs/pg_store.h"
#include "jobs/sqlite_store.h"
#include "jobs/store_schema.h"

namespace llmq::jobs {

namespace store_internal {

Status RandomPublicId(std::string* out) {
  unsigned char b[8];
  size_t got = 0;
  while (got < sizeof b) {
    const ssize_t n = ::getrandom(b + got, sizeof b - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::IoError(std::string("getrandom failed: ") + std::strerror(errno));
    got += static_cast<size_t>(n);
  }
  static const char kHex[] = "0123456789abcdef";
  *out = "batch_";
  for (unsigned char c : b) {
    *out += kHex[c >> 4];
    *out += kHex[c & 15];
  }
  return Status::Ok();
}

double Now() {
  return wall_clock::Now();  // LLMQ_TEST_CLOCK in tests
}

double LeaseNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

namespace {

Status CheckMigration(const std::string& location, const char* engine, int version, bool foreign,
                      const Store::OpenOptions& options) {
  if (options.found_version != nullptr) *options.found_version = version;
  if (foreign)
    return Status::InvalidArgument(location + ": " + engine +
                                   " that is not llmq's (it has tables but no meta table); "
                                   "refusing to touch it");
  if (version > schema::kLatestVersion)
    return Status::Unsupported(location + ": schema_version " + std::to_string(version) +
                               " is newer than this llmq knows (" +
                               std::to_string(schema::kLatestVersion) +
                               "); refusing to open it: use a newer llmq");
  if (version == 0 && !options.create)
    return Status::NotFound(location + ": no llmq queue here (" + engine +
                            " without llmq's tables; `llmq queue init` creates them)");
  return Status::Ok();
}

}  // namespace

Status RunMigrations(const std::string& location, const Store::OpenOptions& options,
                     const MigrationSteps& steps) {
  int version = 0;
  bool foreign = false;
  LLMQ_RETURN_IF_ERROR(steps.read_version(&version, &foreign));
  if (version == schema::kLatestVersion)
    return CheckMigration(location, steps.engine, version, foreign, options);
  // Checked again under the write lock: another connection may be migrating the same queue now.
  return steps.write_transaction([&]() -> Status {
    LLMQ_RETURN_IF_ERROR(steps.read_version(&version, &foreign));
    LLMQ_RETURN_IF_ERROR(CheckMigration(location, steps.engine, version, foreign, options));
    LLMQ_RETURN_IF_ERROR(steps.exec(schema::kCreateMeta, "cannot create the meta table"));
    for (int v = version; v < schema::kLatestVersion; ++v) {
      const schema::Migration& m = schema::kMigrations[v];
      LLMQ_RETURN_IF_ERROR(
          steps.exec(m.*steps.dialect, "migration to schema_version " + std::to_string(v + 1)));
      LLMQ_RETURN_IF_ERROR(steps.write_version(v + 1));
    }
    return Status::Ok();
  });
}

Status CommitResultGroup(const std::string& location, const std::vector<const Result*>& results,
                         const std::string* worker, const std::vector<int64_t>& generations,
                         int64_t* added, int64_t* dropped, const ResultSteps& steps) {
  if (added != nullptr) *added = 0;
  if (dropped != nullptr) *dropped = 0;
  if (results.empty()) return Status::Ok();
  // (job, line) order, each line once: the first of a line given twice is the one weighed.
  std::vector<size_t> order(results.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  const auto key = [&](size_t i) { return std::tie(results[i]->job, results[i]->line); };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return key(a) < key(b); });
  order.erase(
      std::unique(order.begin(), order.end(), [&](size_t a, size_t b) { return key(a) == key(b); }),
      order.end());
  std::vector<const Result*> rs;
  std::vector<int64_t> gens;
  for (size_t i : order) {
    rs.push_back(results[i]);
    gens.push_back(worker != nullptr ? generations[i] : 0);
  }
  int64_t fresh = 0;
  const auto body = [&]() -> Status {
    std::vector<char> finished;
    int64_t inserted = -1;  // -1: not yet
    const bool in_one = static_cast<bool>(steps.finish_insert_bump);
    if (in_one)
      LLMQ_RETURN_IF_ERROR(steps.finish_insert_bump(rs, worker, gens, Now(), &finished, &inserted));
    else
      LLMQ_RETURN_IF_ERROR(steps.finish(rs, worker, gens, &finished));
    std::vector<const Result*> done, not_done;
    for (size_t i = 0; i < rs.size(); ++i) (finished[i] ? done : not_done).push_back(rs[i]);
    if (!not_done.empty()) {  // already finished, or fenced: unless it is no request at all
      int64_t first = -1;
      LLMQ_RETURN_IF_ERROR(steps.missing(not_done, &first));
      if (first >= 0)
        return Status::InvalidArgument(
            location + ": a result for job " + std::to_string(not_done[first]->job) + " line " +
            std::to_string(not_done[first]->line) + ", which is no request");
    }
    if (done.empty()) return Status::Ok();
    if (!in_one) LLMQ_RETURN_IF_ERROR(steps.insert(done, Now(), &inserted));
    // A pending request has no result (it stops being pending in the transaction that adds it).
    if (inserted != static_cast<int64_t>(done.size()))
      return Status::Corruption(
          location + ": " + std::to_string(done.size() - inserted) + " of " +
          std::to_string(done.size()) + " pending requests already have a result (job " +
          std::to_string(done.front()->job) + ", lines " + std::to_string(done.front()->line) +
          " to " + std::to_string(done.back()->line) + ")");
    fresh = static_cast<int64_t>(done.size());
    if (in_one) return Status::Ok();
    // The invariant "counted once": only a request really finished moves its job's counts.
    std::map<int64_t, AddedToJob> counts;
    for (const Result* r : done) counts[r->job].Add(*r);
    for (const auto& [job, c] : counts) LLMQ_RETURN_IF_ERROR(steps.bump(job, c));
    return Status::Ok();
  };
  LLMQ_RETURN_IF_ERROR(worker != nullptr ? steps.leased_transaction(body)
                                         : steps.write_transaction(body));
  if (added != nullptr) *added = fresh;
  if (dropped != nullptr) *dropped = static_cast<int64_t>(results.size()) - fresh;
  return Status::Ok();
}

Status CheckWorkerId(const std::string& location, const std::string& id) {
  if (id.empty() || id.size() > 200)
    return Status::InvalidArgument(location + ": a worker id must be 1 to 200 bytes, got " +
                                   std::to_string(id.size()));
  return Status::Ok();
}

Status CheckWorkerInfo(const std::string& location, const WorkerInfo& w) {
  LLMQ_RETURN_IF_ERROR(CheckWorkerId(location, w.id));
  if (w.state.size() > 32)
    return Status::InvalidArgument(location + ": worker " + w.id +
                                   ": a state must be at most 32 bytes, got " +
                                   std::to_string(w.state.size()));
  for (const std::string& m : w.served_models)
    if (m.empty() || m.size() > 200)
      return Status::InvalidArgument(location + ": worker " + w.id +
                                     ": a served model name must be 1 to 200 bytes, got " +
                                     std::to_string(m.size()));
  return Status::Ok();
}

std::string ServedModelsJson(const std::vector<std::string>& models) {
  return nlohmann::json(models).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::vector<std::string> ParseServedModels(std::string_view text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  std::vector<std::string> out;
  if (!j.is_array()) return out;
  for (const nlohmann::json& m : j)
    if (m.is_string()) out.push_back(m.get<std::string>());
  return out;
}

void SortClaimed(std::vector<PendingRequest>* requests) {
  std::sort(requests->begin(), requests->end(),
            [](const PendingRequest& a, const PendingRequest& b) {
              return std::tie(a.plan_rank, a.job, a.line) < std::tie(b.plan_rank, b.job, b.line);
            });
}

Status ParseSchemaVersion(const std::string& location, const std::string& text, int* version) {
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < 0 || v > schema::kMaxPlausibleVersion)
    return Status::Corruption(location + ": meta.schema_version is \"" + text +
                              "\", not a version number");
  *version = static_cast<int>(v);
  return Status::Ok();
}

void AddedToJob::Add(const Result& r) {
  if (r.is_error)
    ++failed;
  else
    ++completed;
  prompt += r.metrics.prompt_tokens;
  cached += r.metrics.cached_tokens;
  computed += r.metrics.computed_tokens;
  completion += r.metrics.completion_tokens;
}

}  // namespace store_internal

const char* JobStatusName(JobStatus s) {
  switch (s) {
    case JobStatus::kValidating:
      return "validating";
    case JobStatus::kInProgress:
      return "in_progress";
    case JobStatus::kFinalizing:
      return "finalizing";
    case JobStatus::kCompleted:
      return "completed";
    case JobStatus::kFailed:
      return "failed";
    case JobStatus::kCancelling:
      return "cancelling";
    case JobStatus::kCancelled:
      return "cancelled";
    case JobStatus::kExpired:
      return "expired";
  }
  LLMQ_CHECK(false);
  return "";
}

bool ParseJobStatus(std::string_view name, JobStatus* out) {
  for (JobStatus s : {JobStatus::kValidating, JobStatus::kInProgress, JobStatus::kFinalizing,
                      JobStatus::kCompleted, JobStatus::kFailed, JobStatus::kCancelling,
                      JobStatus::kCancelled, JobStatus::kExpired}) {
    if (name == JobStatusName(s)) {
      *out = s;
      return true;
    }
  }
  return false;
}

bool IsTerminal(JobStatus s) {
  return s == JobStatus::kCompleted || s == JobStatus::kFailed || s == JobStatus::kCancelled ||
         s == JobStatus::kExpired;
}

int Store::SchemaVersion() {
  return schema::kLatestVersion;
}

Status Store::CommitResults(const std::vector<Result>& results, int64_t* added) {
  std::vector<const Result*> rs;
  rs.reserve(results.size());
  for (const Result& r : results) rs.push_back(&r);
  return store_internal::CommitResultGroup(location(), rs, nullptr, {}, added, nullptr,
                                           ResultStepsFor());
}

Status Store::CommitLeasedResults(const std::string& worker,
                                  const std::vector<LeasedResult>& results, int64_t* added,
                                  int64_t* fenced) {
  std::vector<const Result*> rs;
  std::vector<int64_t> generations;
  rs.reserve(results.size());
  generations.reserve(results.size());
  for (const LeasedResult& lr : results) {
    rs.push_back(&lr.result);
    generations.push_back(lr.lease_generation);
  }
  return store_internal::CommitResultGroup(location(), rs, &worker, generations, added, fenced,
                                           ResultStepsFor());
}

bool Store::IsPostgresUrl(std::string_view location) {
  return location.starts_with("postgresql://") || location.starts_with("postgres://");
}

Status Store::Open(const std::string& location, std::unique_ptr<Store>* out, Check check) {
  OpenOptions o;
  o.check = check;
  return Open(location, out, o);
}

Status Store::Open(const std::string& location, std::unique_ptr<Store>* out,
                   const OpenOptions& options) {
  if (IsPostgresUrl(location)) return PgStore::Open(location, out, options);
  return SqliteStore::Open(location, out, options);
}

}  // namespace llmq::jobs
