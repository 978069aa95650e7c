// Ingest: accepting job files into the store. Every line is validated by the shared code path
// (jobs::ParseBatchLine, duplicate custom_ids, PlanKey); the requests of all the files of one call
// get plan ranks from the prefix planner, so files sharing a system prompt are grouped together,
// and claim groups cut along its prefix tree (IngestOptions::claim_group_max); each job's largest
// shared-prefix groups are recorded in its options ("prefix_groups", jobs/shared_prefixes.h);
// the jobs and all their requests go in ONE transaction (a crash leaves all or nothing). A refused
// line is stored already finished, with its error output line. Memory is bounded whatever the
// size of the files: lines are read, planned and inserted a chunk at a time (requests sharing a
// prefix across chunks still share its cached KV blocks; they are just not reordered together).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "base/untrusted_file.h"
#include "daemon/request_builder.h"
#include "engine/core/claim_groups.h"
#include "jobs/store.h"

namespace llmq {

struct IngestFile {
  const UntrustedFile* file = nullptr;  // the file, opened once (base/untrusted_file.h): read here
  std::string name;                     // the job's name; messages name lines as "<name>:<line>"
  std::string sha256;   // of the file's bytes (HashFile); "" = hashed while it is read
  std::string options;  // JobRecord::options
  // Where the file must still be when its job is committed (the spool's inbox/): `entry` in the
  // folder open as `dir_fd` must be this very file (UntrustedFile::IsAt). -1: not checked.
  int dir_fd = -1;
  std::string entry;
};

struct IngestedJob {
  jobs::JobRecord job;
  int64_t refused = 0;  // lines refused at validation
};

struct IngestOptions {
  size_t chunk_lines = 65536;                  // requests planned together at most
  size_t chunk_bytes_max = size_t{64} << 20;   // line bytes held at most
  int64_t max_line_bytes = int64_t{16} << 20;  // longer lines are refused (spool.max_line_bytes)
  // The requests one claim takes at most (Store::ClaimNextGroup, issue 27): each planned chunk
  // is cut into claim groups along its prefix tree (engine/core/claim_groups.h), and every valid
  // request's plan_group is the plan rank of its claim group's first request (refused lines keep
  // 0). Smaller: work is balanced across workers more finely; larger: fewer claims.
  uint32_t claim_group_max = kDefaultClaimGroupRequests;
  // When set and true, the ingest stops within 1,024 lines: IoError "interrupted", all rolled
  // back (llmq serve is stopping).
  const std::atomic<bool>* cancel = nullptr;
};

// Where one IngestFiles call spent its time (wall seconds), for benchmarks and logs.
struct IngestTimings {
  double read = 0;         // reading lines (and hashing the file)
  double validate = 0;     // UTF-8, ParseBatchLine, PlanKey: on every core
  double check = 0;        // duplicate custom_ids, error lines: in line order
  double plan = 0;         // PlanPrefixes per chunk
  double insert = 0;       // Store::InsertJob / InsertRequest (a task: overlaps the next chunk)
  double insert_wait = 0;  // waiting for the last insert task
  double finish = 0;       // FinishIngest (counts, hash)
  double commit = 0;       // the one commit (WAL write and fsync)
};

// The SHA-256 (hex) and size of a file, read through its descriptor. Errors name the file.
Status HashFile(const UntrustedFile& file, std::string* sha256, int64_t* bytes);

// Opens a job file the user names on the command line (llmq run, llmq submit) as every job file
// is opened: UntrustedFile::Open, within `max_bytes` (spool.max_file_bytes).
Status OpenJobFile(const std::string& path, int64_t max_bytes, UntrustedFile* out);

// Inserts one job per file (status in_progress), in one transaction. Errors (unreadable file,
// store failure) roll everything back. Each file is read through its descriptor only; a file that
// changed while it was read (UntrustedFile::Unchanged) or is no longer at its dir_fd/entry fails
// the call (IoError naming it), and *changed (when given) is then its index in `files`; else
// *changed is files.size(). Nothing here blocks on another process: the files are regular files,
// opened before the transaction begins.
Status IngestFiles(jobs::Store* store, const BuildContext& ctx,
                   const std::vector<IngestFile>& files, const IngestOptions& opt,
                   std::vector<IngestedJob>* out, IngestTimings* timings = nullptr,
                   size_t* changed = nullptr);

}  // namespace llmq
