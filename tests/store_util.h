// Helpers for tests over a real queue (jobs/store.h): a database per test, jobs ingested with
// one request per rank, results made up.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "jobs/store.h"
#include "tests/test_util.h"

namespace llmq::jobs {

inline std::string DbPath() {
  return testing::CurrentTestDir() + "/state/queue.db";
}

inline std::unique_ptr<Store> OpenOrDie(const std::string& path) {
  std::unique_ptr<Store> s;
  const Status st = Store::Open(path, &s);
  EXPECT_TRUE(st.ok()) << st.message();
  return s;
}

// Ingests a job named `name` with one request per rank (line i + 1 gets ranks[i]); lines listed
// in `bad` are refused at validation.
inline int64_t Ingest(Store* s, const std::string& name, const std::vector<int64_t>& ranks,
                      const std::vector<int64_t>& bad = {},
                      JobStatus status = JobStatus::kInProgress) {
  EXPECT_TRUE(s->Begin().ok());
  JobRecord job;
  job.name = name;
  job.sha256 = "sha-of-" + name;
  Status st = s->InsertJob(&job);
  EXPECT_TRUE(st.ok()) << st.message();
  for (size_t i = 0; i < ranks.size(); ++i) {
    NewRequest r;
    r.line = static_cast<int64_t>(i) + 1;
    r.custom_id = name + "-" + std::to_string(r.line);
    r.body = "{\"custom_id\": \"" + r.custom_id + "\"}";
    r.plan_rank = ranks[i];
    if (std::find(bad.begin(), bad.end(), r.line) != bad.end())
      r.error_output = "{\"error\": \"line " + std::to_string(r.line) + "\"}";
    st = s->InsertRequest(job.id, r);
    EXPECT_TRUE(st.ok()) << st.message();
  }
  st = s->FinishIngest(job.id, status);
  EXPECT_TRUE(st.ok()) << st.message();
  st = s->Commit();
  EXPECT_TRUE(st.ok()) << st.message();
  return job.id;
}

inline Result MakeResult(int64_t job, int64_t line, bool is_error = false) {
  Result r;
  r.job = job;
  r.line = line;
  r.is_error = is_error;
  r.output = "{\"line\": " + std::to_string(line) + (is_error ? ", \"error\": 1}" : "}");
  r.metrics.prompt_tokens = 10 * line;
  r.metrics.completion_tokens = line;
  r.metrics.ttft_seconds = 0.001 * static_cast<double>(line);
  return r;
}

}  // namespace llmq::jobs
