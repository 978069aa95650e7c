#include "daemon/ingest.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <span>
#include <unordered_map>

#include "engine/prefix_planner.h"
#include "jobs/sha256.h"

namespace llmq {
namespace {

// One validated line waiting for its plan rank.
struct Pending {
  size_t file = 0;  // index into the call's files
  jobs::NewRequest req;
  std::vector<int32_t> key;  // empty for a refused line
};

// FNV-1a 64 of a custom_id: duplicate detection without keeping every id in memory (a hit is
// confirmed against the stored line, so a hash collision never refuses a good line).
uint64_t IdHash(const std::string& s) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

class Ingester {
 public:
  Ingester(jobs::Store* store, const BuildContext& ctx, const IngestOptions& opt)
      : store_(store), ctx_(ctx), opt_(opt) {}

  Status Run(const std::vector<IngestFile>& files, std::vector<IngestedJob>* out) {
    LLMQ_RETURN_IF_ERROR(store_->MaxPlanRank(&next_rank_));
    ++next_rank_;
    out->assign(files.size(), {});
    jobs_ = out;
    files_ = &files;
    for (size_t f = 0; f < files.size(); ++f) {
      jobs::JobRecord& job = (*out)[f].job;
      job.name = files[f].name;
      job.sha256 = files[f].sha256;
      job.options = files[f].options;
      job.status = jobs::JobStatus::kValidating;
      LLMQ_RETURN_IF_ERROR(store_->InsertJob(&job));
      LLMQ_RETURN_IF_ERROR(ReadFile(f));
    }
    LLMQ_RETURN_IF_ERROR(Flush());
    for (IngestedJob& j : *out) {
      // The refused count goes into the options in this same transaction: set by the caller
      // afterwards, a kill -9 between the two commits would lose it for good (the job exists,
      // so the file is never ingested again, and its summary would say "refused": 0).
      auto opts = nlohmann::json::parse(j.job.options, nullptr, false);
      if (opts.is_object()) {
        opts["refused"] = j.refused;
        j.job.options = opts.dump();
        LLMQ_RETURN_IF_ERROR(store_->SetJobOptions(j.job.id, j.job.options));
      }
      LLMQ_RETURN_IF_ERROR(store_->FinishIngest(j.job.id, jobs::JobStatus::kInProgress));
      LLMQ_RETURN_IF_ERROR(store_->GetJob(j.job.id, &j.job));
    }
    return Status::Ok();
  }

 private:
  Status ReadFile(size_t f) {
    const IngestFile& file = (*files_)[f];
    std::ifstream in(file.path, std::ios::binary);
    if (!in) return Status::IoError(file.path + ": cannot open: " + std::strerror(errno));
    std::unordered_map<uint64_t, int64_t> first_line;  // custom_id hash -> line
    std::string text;
    for (int64_t no = 1; std::getline(in, text); ++no) {
      if (!text.empty() && text.back() == '\r') text.pop_back();
      if (text.find_first_not_of(" \t") == std::string::npos)
        continue;  // blank lines carry nothing
      Pending p;
      p.file = f;
      p.req.line = no;
      jobs::BatchRequest r = jobs::ParseBatchLine(text, static_cast<int>(no), file.name);
      p.req.custom_id = r.custom_id;
      if (r.error.empty()) {
        auto [it, fresh] = first_line.emplace(IdHash(r.custom_id), no);
        if (!fresh) {
          bool same = true;
          LLMQ_RETURN_IF_ERROR(SameCustomId((*jobs_)[f].job.id, it->second, r.custom_id, &same));
          if (same)
            r.error = file.name + ":" + std::to_string(no) + ": field 'custom_id': duplicate '" +
                      r.custom_id + "' (first on line " + std::to_string(it->second) + ")";
        }
      }
      if (r.error.empty()) r.error = PlanKey(ctx_, r, file.name, &p.key);
      if (!r.error.empty()) {
        p.key.clear();
        p.req.error_output =
            jobs::ErrorLine(r.custom_id, RequestIdFor((*jobs_)[f].job.public_id, no), r.error);
        ++(*jobs_)[f].refused;
      }
      p.req.body = std::move(text);
      key_bytes_ += p.key.size() * sizeof(int32_t) + p.req.body.size();
      chunk_.push_back(std::move(p));
      if (chunk_.size() >= opt_.chunk_lines || key_bytes_ >= opt_.chunk_key_bytes)
        LLMQ_RETURN_IF_ERROR(Flush());
    }
    if (in.bad()) return Status::IoError(file.path + ": read failed: " + std::strerror(errno));
    return Status::Ok();
  }

  // Whether line `line` of `job`, inserted earlier (this chunk or a flushed one), has `id`.
  Status SameCustomId(int64_t job, int64_t line, const std::string& id, bool* same) {
    for (const Pending& p : chunk_)
      if ((*jobs_)[p.file].job.id == job && p.req.line == line) {
        *same = p.req.custom_id == id;
        return Status::Ok();
      }
    std::string stored;
    LLMQ_RETURN_IF_ERROR(store_->GetCustomId(job, line, &stored));
    *same = stored == id;
    return Status::Ok();
  }

  // Plans the chunk's valid requests (refused ones keep their place after them) and inserts all.
  Status Flush() {
    std::vector<uint32_t> valid;
    std::vector<std::span<const int32_t>> keys;
    for (uint32_t i = 0; i < chunk_.size(); ++i)
      if (!chunk_[i].req.error_output) {
        valid.push_back(i);
        keys.emplace_back(chunk_[i].key);
      }
    const Plan plan = PlanPrefixes(keys, /*block_size=*/1);
    for (uint32_t k : plan.order) {
      Pending& p = chunk_[valid[k]];
      p.req.plan_rank = next_rank_++;
      LLMQ_RETURN_IF_ERROR(store_->InsertRequest((*jobs_)[p.file].job.id, p.req));
    }
    for (Pending& p : chunk_)
      if (p.req.error_output) {
        p.req.plan_rank = next_rank_++;
        LLMQ_RETURN_IF_ERROR(store_->InsertRequest((*jobs_)[p.file].job.id, p.req));
      }
    chunk_.clear();
    key_bytes_ = 0;
    return Status::Ok();
  }

  jobs::Store* store_;
  const BuildContext& ctx_;
  IngestOptions opt_;
  const std::vector<IngestFile>* files_ = nullptr;
  std::vector<IngestedJob>* jobs_ = nullptr;
  std::vector<Pending> chunk_;
  size_t key_bytes_ = 0;
  int64_t next_rank_ = 1;
};

}  // namespace

Status HashFile(const std::string& path, std::string* sha256, int64_t* bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IoError(path + ": cannot open: " + std::strerror(errno));
  jobs::Sha256 h;
  std::vector<char> buf(1 << 20);
  *bytes = 0;
  while (in.read(buf.data(), static_cast<std::streamsize>(buf.size())) || in.gcount() > 0) {
    h.Update(std::string_view(buf.data(), static_cast<size_t>(in.gcount())));
    *bytes += in.gcount();
  }
  if (in.bad()) return Status::IoError(path + ": read failed: " + std::strerror(errno));
  *sha256 = h.HexDigest();
  return Status::Ok();
}

Status IngestFiles(jobs::Store* store, const BuildContext& ctx,
                   const std::vector<IngestFile>& files, const IngestOptions& opt,
                   std::vector<IngestedJob>* out) {
  LLMQ_RETURN_IF_ERROR(store->Begin());
  Ingester ing(store, ctx, opt);
  Status st = ing.Run(files, out);
  if (st.ok()) st = store->Commit();
  if (!st.ok()) store->Rollback();
  return st;
}

}  // namespace llmq
