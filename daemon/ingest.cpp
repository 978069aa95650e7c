#include "daemon/ingest.h"

#include <fcntl.h>
#include <omp.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <numeric>
#include <span>
#include <thread>
#include <unordered_map>

#include "base/text.h"
#include "engine/core/claim_groups.h"
#include "engine/core/prefix_planner.h"
#include "jobs/line_reader.h"
#include "jobs/sha256.h"
#include "jobs/shared_prefixes.h"

namespace llmq {
namespace {

// One validated line waiting for its plan rank. Only what the later phases need is kept per line
// (the parsed request lives and dies inside Validate's loop): a chunk of 65,536 lines holds its
// text and keys, not 65,536 parsed requests, so the heap stays small and hot.
struct Pending {
  size_t file = 0;      // index into the call's files
  jobs::FileLine line;  // as read; its text becomes req.body once validated
  jobs::NewRequest req;
  std::vector<int32_t> key;  // empty for a refused line
  std::string error;         // the line's validation error, "" when valid
  std::string error_param;   // with `error`: the field at fault as OpenAI names it, or ""
  std::string model;         // body.model of a valid line ("" when it names none)
};

// FNV-1a 64 of a custom_id: duplicate detection without keeping every id in memory (a hit is
// confirmed against the stored line, so a hash collision never refuses a good line); of a plan
// key's first units: a shared prefix's identity across chunks (jobs::SharedPrefixTally).
uint64_t Fnv1a(std::string_view s) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}
uint64_t KeyPrefixHash(const std::vector<int32_t>& key, size_t units) {
  return Fnv1a(
      std::string_view(reinterpret_cast<const char*>(key.data()), units * sizeof(int32_t)));
}

// Adds the wall time since the last lap to *into.
class Lap {
 public:
  void operator()(double* into) {
    const auto now = std::chrono::steady_clock::now();
    *into += std::chrono::duration<double>(now - t_).count();
    t_ = now;
  }

 private:
  std::chrono::steady_clock::time_point t_ = std::chrono::steady_clock::now();
};

class Ingester {
 public:
  Ingester(jobs::Store* store, const BuildContext& ctx, const IngestOptions& opt,
           IngestTimings* timings, Lap* lap)
      : store_(store), ctx_(ctx), opt_(opt), t_(timings), lap_(lap) {}

  Status Run(const std::vector<IngestFile>& files, std::vector<IngestedJob>* out) {
    LLMQ_RETURN_IF_ERROR(store_->MaxPlanRank(&next_rank_));
    ++next_rank_;
    out->assign(files.size(), {});
    totals_.assign(files.size(), {});
    tallies_.assign(files.size(), {});
    first_line_.assign(files.size(), {});
    model_line_.assign(files.size(), 0);
    jobs_ = out;
    files_ = &files;
    chunk_.reserve(std::max<size_t>(opt_.chunk_lines, 1));
    for (size_t f = 0; f < files.size(); ++f) {
      jobs::JobRecord& job = (*out)[f].job;
      job.name = files[f].name;
      job.sha256 = files[f].sha256;
      job.options = files[f].options;
      job.status = jobs::JobStatus::kValidating;
      LLMQ_RETURN_IF_ERROR(WaitForInsert());  // the store is the insert task's until it ends
      (*lap_)(&t_->read);
      LLMQ_RETURN_IF_ERROR(store_->InsertJob(&job));
      (*lap_)(&t_->insert);
      LLMQ_RETURN_IF_ERROR(ReadFile(f));
    }
    LLMQ_RETURN_IF_ERROR(Flush());
    LLMQ_RETURN_IF_ERROR(WaitForInsert());
    for (size_t f = 0; f < files.size(); ++f) {
      IngestedJob& j = (*out)[f];
      j.job.options = jobs::WithSharedPrefixes(j.job.options, tallies_[f].Top());
      LLMQ_RETURN_IF_ERROR(store_->SetJobOptions(j.job.id, j.job.options));
      LLMQ_RETURN_IF_ERROR(
          store_->FinishIngest(j.job.id, jobs::JobStatus::kInProgress, &totals_[f]));
      if (!totals_[f].sha256.empty()) j.job.sha256 = totals_[f].sha256;
      j.job.status = jobs::JobStatus::kInProgress;
      j.job.model = totals_[f].model;
      j.job.total = totals_[f].total;
      j.job.failed = totals_[f].failed;
      j.job.refused = j.refused;  // every failure at ingest is a refusal
    }
    (*lap_)(&t_->finish);
    return Status::Ok();
  }

 private:
  // Reads file f's lines into the chunk (validation happens a chunk at a time, in Flush), hashing
  // the file on the way unless the caller did. A line over max_line_bytes is counted, not held.
  Status ReadFile(size_t f) {
    const IngestFile& file = (*files_)[f];
    const std::unique_ptr<std::istream> in = file.file->Stream();
    jobs::Sha256 sha;
    jobs::LineReader reader(*in, opt_.max_line_bytes, file.sha256.empty() ? &sha : nullptr,
                            /*check_text=*/false);
    Pending p;
    while (reader.Next(&p.line)) {
      if (opt_.cancel != nullptr && p.line.no % 1024 == 0 && opt_.cancel->load())
        return Status::IoError(Escaped(file.file->shown()) +
                               ": ingest interrupted (llmq serve is stopping)");
      if (!p.line.too_long && p.line.text.find_first_not_of(" \t") == std::string::npos)
        continue;  // blank lines carry nothing
      p.file = f;
      p.req.line = p.line.no;
      ++totals_[f].total;
      chunk_bytes_ += p.line.text.size();
      chunk_.push_back(std::move(p));
      p = Pending();
      if (chunk_.size() - validated_ >= kValidateBatch) SpawnValidation();
      if (chunk_.size() >= opt_.chunk_lines || chunk_bytes_ >= opt_.chunk_bytes_max)
        LLMQ_RETURN_IF_ERROR(Flush());
    }
    if (reader.bad())
      return Status::IoError(Escaped(file.file->shown()) +
                             ": read failed: " + std::strerror(errno));
    totals_[f].sha256 = file.sha256.empty() ? sha.HexDigest() : "";
    return Status::Ok();
  }

  // Parses and validates one line. Lines are independent (the UTF-8 check, ParseBatchLine and
  // PlanKey are pure), so lines are validated on every core while the file is still being read;
  // what depends on order (duplicates) is left to Check.
  void ValidateLine(Pending* p) const {
    const std::string& name = (*files_)[p->file].name;
    jobs::CheckLineText(&p->line);
    p->error = jobs::LineProblem(p->line, name, opt_.max_line_bytes);
    if (p->error.empty()) {
      jobs::BatchRequest r =
          jobs::ParseBatchLine(p->line.text, static_cast<int>(p->req.line), name);
      if (r.error.empty()) {
        if (Status st = PlanKey(ctx_, r, name, &p->key, &r.error_param); !st.ok())
          r.error = st.message();
      }
      p->error = std::move(r.error);
      p->error_param = std::move(r.error_param);
      p->req.custom_id = std::move(r.custom_id);
      p->model = std::move(r.model);
    }
    p->req.body = std::move(p->line.text);
  }

  // Hands the lines read since the last call to validation tasks (IngestFiles runs the Ingester
  // in an OpenMP parallel region: this thread reads on, the others validate). The tasks address
  // chunk_ through data(): chunk_ never reallocates (its capacity is reserved for a whole chunk),
  // and a task touches only its own lines; Flush waits for all of them before reading results.
  void SpawnValidation() {
    Pending* base = chunk_.data();
    for (size_t b = validated_; b < chunk_.size(); b += kValidateBatch) {
      const size_t e = std::min(chunk_.size(), b + kValidateBatch);
#pragma omp task default(none) firstprivate(base, b, e)
      for (size_t i = b; i < e; ++i) ValidateLine(&base[i]);
    }
    validated_ = chunk_.size();
  }

  // In line order: the job's model (the first valid line naming one sets it; a line naming
  // another is refused, as OpenAI's Batch API has one model per file), duplicate custom_ids (the
  // first occurrence wins), and the error output of every refused line.
  Status Check() {
    for (Pending& p : chunk_) {
      IngestedJob& job = (*jobs_)[p.file];
      if (p.error.empty() && !p.model.empty()) {
        std::string& model = totals_[p.file].model;
        if (model.empty()) {
          model = p.model;
          model_line_[p.file] = p.req.line;
        } else if (p.model != model) {
          p.error = (*files_)[p.file].name + ":" + std::to_string(p.req.line) +
                    ": field 'body.model': '" + p.model + "' is not the job's model '" + model +
                    "' (named on line " + std::to_string(model_line_[p.file]) +
                    "; every request of a batch file names the same model)";
          p.error_param = jobs::ParamOfField("body.model");
        }
      }
      if (p.error.empty()) {
        auto [it, fresh] = first_line_[p.file].emplace(Fnv1a(p.req.custom_id), p.req.line);
        if (!fresh) {
          bool same = true;
          LLMQ_RETURN_IF_ERROR(SameCustomId(job.job.id, it->second, p.req.custom_id, &same));
          if (same)
            p.error = (*files_)[p.file].name + ":" + std::to_string(p.req.line) +
                      ": field 'custom_id': duplicate '" + p.req.custom_id + "' (first on line " +
                      std::to_string(it->second) + ")";
          p.error_param = "custom_id";
        }
      }
      if (!p.error.empty()) {
        p.key.clear();
        p.req.error_output =
            jobs::RefusedLine(p.req.custom_id, p.req.line,
                              RequestIdFor(job.job.public_id, p.req.line), p.error, p.error_param);
        ++job.refused;
        ++totals_[p.file].failed;
      }
    }
    return Status::Ok();
  }

  // Whether line `line` of `job`, inserted earlier (this chunk or a flushed one), has `id`.
  Status SameCustomId(int64_t job, int64_t line, const std::string& id, bool* same) {
    for (const Pending& p : chunk_)  // lines of this chunk have their custom_id set by now
      if ((*jobs_)[p.file].job.id == job && p.req.line == line) {
        *same = p.req.custom_id == id;
        return Status::Ok();
      }
    std::string stored;
    LLMQ_RETURN_IF_ERROR(store_->GetCustomId(job, line, &stored));
    *same = stored == id;
    return Status::Ok();
  }

  // Plans the chunk's valid requests (refused ones keep their place after them), gives them their
  // ranks and claim groups (IngestOptions::claim_group_max) and hands the chunk to an insert task:
  // the next chunk is read and validated while this one goes into the store (double buffering:
  // chunk_ fills while inserting_ drains).
  Status Flush() {
    (*lap_)(&t_->read);
    SpawnValidation();
    // Waits for this chunk's validation and for the previous chunk's insert task (Check reads
    // the store: earlier chunks' custom_ids).
#pragma omp taskwait
    (*lap_)(&t_->validate);
    LLMQ_RETURN_IF_ERROR(insert_status_);
    LLMQ_RETURN_IF_ERROR(Check());
    (*lap_)(&t_->check);
    std::vector<uint32_t> valid;
    std::vector<std::span<const int32_t>> keys;
    for (uint32_t i = 0; i < chunk_.size(); ++i)
      if (!chunk_[i].req.error_output) {
        valid.push_back(i);
        keys.emplace_back(chunk_[i].key);
      }
    LLMQ_ASSIGN_OR_RETURN(const Plan plan, PlanPrefixes(keys, /*block_size=*/1));
    insert_order_.clear();
    for (uint32_t k : plan.order) insert_order_.push_back(&chunk_[valid[k]]);
    for (Pending& p : chunk_)
      if (p.req.error_output) insert_order_.push_back(&p);
    for (Pending* p : insert_order_) {
      p->req.plan_rank = next_rank_++;
      totals_[p->file].max_rank = p->req.plan_rank;
    }
    for (const ClaimChunk& c : ClaimChunks(plan, opt_.claim_group_max))
      for (uint32_t k = c.begin; k < c.end; ++k)
        insert_order_[k]->req.plan_group = insert_order_[c.begin]->req.plan_rank;
    TallySharedPrefixes(plan);
    (*lap_)(&t_->plan);
    std::swap(chunk_, inserting_);  // the old inserting_ was inserted: it is the next chunk_
    chunk_.clear();
    chunk_.reserve(std::max<size_t>(opt_.chunk_lines, 1));
    chunk_bytes_ = 0;
    validated_ = 0;
    // The task owns inserting_, insert_order_, insert_status_ and the store until a taskwait.
#pragma omp task default(none)
    {
      const auto t0 = std::chrono::steady_clock::now();
      for (Pending* p : insert_order_) {
        insert_status_ = store_->InsertRequest((*jobs_)[p->file].job.id, p->req);
        if (!insert_status_.ok()) break;
      }
      t_->insert += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    return Status::Ok();
  }

  // The chunk's largest shared-prefix groups, into their jobs' tallies (jobs/shared_prefixes.h).
  // The kCandidates groups that save the most key units are measured in prompt tokens: the common
  // token prefix of the group's first and last request in plan order (at ingest's block size of
  // one they part exactly where the group's prefix ends, or are identical). `plan` orders
  // insert_order_'s first plan.order.size() entries.
  void TallySharedPrefixes(const Plan& plan) {
    const std::vector<PlanGroup>& groups = plan.groups;
    std::vector<int64_t> depth(groups.size());
    for (size_t g = 0; g < groups.size(); ++g)
      depth[g] = groups[g].parent < 0 ? 1 : depth[groups[g].parent] + 1;
    auto units_saved = [&](uint32_t g) {
      return int64_t{groups[g].shared_tokens} * (groups[g].end - groups[g].begin - 1);
    };
    std::vector<uint32_t> ranked(groups.size());
    std::iota(ranked.begin(), ranked.end(), 0u);
    const size_t n = std::min(groups.size(), kCandidates);
    std::partial_sort(
        ranked.begin(), ranked.begin() + n, ranked.end(), [&](uint32_t a, uint32_t b) {
          return units_saved(a) != units_saved(b) ? units_saved(a) > units_saved(b) : a < b;
        });
    std::vector<int64_t> members(files_->size(), 0);
    std::vector<size_t> seen_files;
    for (size_t i = 0; i < n; ++i) {
      const PlanGroup& g = groups[ranked[i]];
      const Pending& first = *insert_order_[g.begin];
      int64_t tokens = 0;
      if (!SharedPromptTokens(first, *insert_order_[g.end - 1], &tokens) || tokens == 0) continue;
      const uint64_t prefix = KeyPrefixHash(first.key, static_cast<size_t>(g.shared_tokens));
      for (uint32_t k = g.begin; k < g.end; ++k)
        if (members[insert_order_[k]->file]++ == 0) seen_files.push_back(insert_order_[k]->file);
      for (size_t f : seen_files) {
        if (members[f] >= 2) tallies_[f].Add(prefix, {tokens, members[f], depth[ranked[i]]});
        members[f] = 0;
      }
      seen_files.clear();
    }
  }

  // The common prompt-token prefix of two valid lines (false when one cannot be tokenized: it
  // fails later, when it runs, with its own message).
  bool SharedPromptTokens(const Pending& a, const Pending& b, int64_t* tokens) const {
    std::vector<int> ids[2];
    const Pending* lines[2] = {&a, &b};
    for (int i = 0; i < 2; ++i) {
      const std::string& name = (*files_)[lines[i]->file].name;
      const jobs::BatchRequest r =
          jobs::ParseBatchLine(lines[i]->req.body, static_cast<int>(lines[i]->req.line), name);
      if (!r.error.empty() || !PromptIds(ctx_, r, name, &ids[i]).ok()) return false;
    }
    const auto [end, unused] =
        std::mismatch(ids[0].begin(), ids[0].end(), ids[1].begin(), ids[1].end());
    *tokens = end - ids[0].begin();
    return true;
  }

  // Waits for the insert task (and any validation) and returns what the insert came to.
  Status WaitForInsert() {
    (*lap_)(&t_->read);
#pragma omp taskwait
    (*lap_)(&t_->insert_wait);
    return insert_status_;
  }

  jobs::Store* store_;
  const BuildContext& ctx_;
  IngestOptions opt_;
  IngestTimings* t_;
  Lap* lap_;
  const std::vector<IngestFile>* files_ = nullptr;
  std::vector<IngestedJob>* jobs_ = nullptr;
  std::vector<jobs::Store::IngestTotals> totals_;  // per file, counted while inserting
  std::vector<std::unordered_map<uint64_t, int64_t>>
      first_line_;                                // per file: custom_id hash -> line
  std::vector<int64_t> model_line_;               // per file: the line that named its model
  static constexpr size_t kValidateBatch = 1024;  // lines per validation task
  static constexpr size_t kCandidates = 32;       // groups per chunk measured in tokens
  std::vector<jobs::SharedPrefixTally> tallies_;  // per file
  std::vector<Pending> chunk_;          // capacity opt_.chunk_lines, reserved: never reallocates
  size_t validated_ = 0;                // chunk_[0, validated_) are handed to validation tasks
  std::vector<Pending> inserting_;      // the previous chunk, being inserted by the task
  std::vector<Pending*> insert_order_;  // into inserting_, in rank order
  Status insert_status_;                // the insert task's outcome
  size_t chunk_bytes_ = 0;
  int64_t next_rank_ = 1;
};

}  // namespace

Status HashFile(const UntrustedFile& file, std::string* sha256, int64_t* bytes) {
  const std::unique_ptr<std::istream> in = file.Stream();
  jobs::Sha256 h;
  std::vector<char> buf(1 << 20);
  *bytes = 0;
  while (in->read(buf.data(), static_cast<std::streamsize>(buf.size())) || in->gcount() > 0) {
    h.Update(std::string_view(buf.data(), static_cast<size_t>(in->gcount())));
    *bytes += in->gcount();
  }
  if (in->bad() || *bytes != file.size())
    return Status::IoError(Escaped(file.shown()) + ": read failed (" + std::to_string(*bytes) +
                           " of " + std::to_string(file.size()) + " bytes)");
  *sha256 = h.HexDigest();
  return Status::Ok();
}

Status OpenJobFile(const std::string& path, int64_t max_bytes, UntrustedFile* out) {
  return UntrustedFile::Open(AT_FDCWD, path, path, max_bytes, "spool.max_file_bytes", out);
}

Status IngestFiles(jobs::Store* store, const BuildContext& ctx,
                   const std::vector<IngestFile>& files, const IngestOptions& opt,
                   std::vector<IngestedJob>* out, IngestTimings* timings, size_t* changed) {
  if (changed != nullptr) *changed = files.size();
  IngestTimings ignored;
  IngestTimings* t = timings ? timings : &ignored;
  Lap lap;
  LLMQ_RETURN_IF_ERROR(store->Begin());
  Ingester ing(store, ctx, opt, t, &lap);
  Status st;
  // On a thread of its own, joined at once: libgomp keeps the pool of worker threads of a thread
  // that ran a parallel region for as long as that thread lives. Left on the caller's thread (the
  // daemon's event loop) its workers plus the engine's outnumber the cores, and libgomp then
  // sleeps at barriers instead of spinning for the rest of the process: every engine step was
  // ~7% slower. The pool of a thread that has ended is gone. (The store is used by one thread at
  // a time: the join orders this thread's use before the caller's.)
  // A new thread starts from OpenMP's initial settings: the caller's thread count is passed on.
  const int threads = omp_get_max_threads();
  std::thread([&] {
  // One thread runs the ingest (reading, the store); the team's others take validation tasks.
  // The region's end waits for every task, also when Run returned early with an error.
#pragma omp parallel num_threads(threads) default(none) shared(ing, files, out, st)
#pragma omp single
    st = ing.Run(files, out);
  }).join();
  // What was read must be what is committed: the file unchanged since it was opened, and still
  // the entry it came from (a file swapped in meanwhile is looked at again later, as a new file).
  for (size_t f = 0; f < files.size() && st.ok(); ++f) {
    const IngestFile& file = files[f];
    st = file.file->Unchanged();
    if (st.ok() && file.dir_fd >= 0 && !file.file->IsAt(file.dir_fd, file.entry))
      st = Status::IoError(Escaped(file.file->shown()) + ": was replaced while it was being read");
    if (!st.ok() && changed != nullptr) *changed = f;
  }
  if (st.ok()) st = store->Commit();
  lap(&t->commit);
  if (!st.ok()) store->Rollback();
  return st;
}

}  // namespace llmq
