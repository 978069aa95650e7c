// Ingest: accepting job files into the store. Every line is validated by the shared code path
// (jobs::ParseBatchLine, duplicate custom_ids, PlanKey); the requests of all the files of one call
// get plan ranks from the prefix planner, so files sharing a system prompt are grouped together;
// the jobs and all their requests go in ONE transaction (a crash leaves all or nothing). A refused
// line is stored already finished, with its error output line. Memory is bounded whatever the
// size of the files: lines are read, planned and inserted a chunk at a time (requests sharing a
// prefix across chunks still share its cached KV blocks; they are just not reordered together).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "daemon/request_builder.h"
#include "jobs/store.h"

namespace llmq {

struct IngestFile {
  std::string path;     // the file to read
  std::string name;     // the job's name; messages name lines as "<name>:<line>"
  std::string sha256;   // of the file's bytes (HashFile); "" = hashed while it is read
  std::string options;  // JobRecord::options
};

struct IngestedJob {
  jobs::JobRecord job;
  int64_t refused = 0;  // lines refused at validation
};

struct IngestOptions {
  size_t chunk_lines = 65536;                  // requests planned together at most
  size_t chunk_bytes_max = size_t{64} << 20;   // line bytes held at most
  int64_t max_line_bytes = int64_t{16} << 20;  // longer lines are refused (spool.max_line_bytes)
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

// The SHA-256 (hex) and size of a file. Errors name the path and strerror.
Status HashFile(const std::string& path, std::string* sha256, int64_t* bytes);

// Inserts one job per file (status in_progress), in one transaction. Errors (unreadable file,
// store failure) roll everything back.
Status IngestFiles(jobs::Store* store, const BuildContext& ctx,
                   const std::vector<IngestFile>& files, const IngestOptions& opt,
                   std::vector<IngestedJob>* out, IngestTimings* timings = nullptr);

}  // namespace llmq
