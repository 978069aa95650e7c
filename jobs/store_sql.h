// The statements both engines run as they are (internal to jobs/): standard SQL that SQLite and
// PostgreSQL read alike, with PostgreSQL's numbered parameters $1, $2, ... (SqliteStore::Prepare
// writes them as SQLite's ?1, ?2, ...). What the dialects say differently stays in each engine's
// file (sqlite_store.cpp, pg_store.cpp). Columns as jobs/store_rows.h reads them.
#pragma once

#include "jobs/store_rows.h"

namespace llmq::jobs::sql {

inline constexpr const char* kInsertRequest =
    "INSERT INTO requests (job, line, custom_id, body, plan_rank, status, plan_group) "
    "VALUES ($1, $2, $3, $4, $5, $6, $7)";
// ON CONFLICT DO NOTHING: a second result for a line is dropped (the count of changed rows tells),
// never an overwrite; a result for no request still fails (the foreign key).
inline constexpr const char* kInsertResult =
    "INSERT INTO results (job, line, is_error, output, prompt_tokens, cached_tokens, "
    "computed_tokens, completion_tokens, queue_seconds, ttft_seconds, itl_seconds, "
    "latency_seconds, committed_at, finished_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, "
    "$11, $12, $13, $14) ON CONFLICT (job, line) DO NOTHING";
inline constexpr const char* kFinishRequest =
    "UPDATE requests SET status = $3 WHERE job = $1 AND line = $2 AND status = 'pending'";
inline constexpr const char* kBumpCounts =
    "UPDATE jobs SET completed = completed + $2, failed = failed + $3, "
    "prompt_tokens = prompt_tokens + $4, cached_tokens = cached_tokens + $5, "
    "computed_tokens = computed_tokens + $6, completion_tokens = completion_tokens + $7 "
    "WHERE id = $1";
// The ingester's own counts: no scan over the job's rows; its model ($5, '' = keep InsertJob's).
inline constexpr const char* kFinishIngestCounted =
    "UPDATE jobs SET total = $2, completed = 0, failed = $3, refused = $3, "
    "sha256 = coalesce($4, sha256), model = CASE WHEN $5 = '' THEN model ELSE $5 END "
    "WHERE id = $1";
inline constexpr const char* kFindJob =
    "SELECT " LLMQ_JOB_COLUMNS " FROM jobs WHERE name = $1 AND sha256 = $2";
inline constexpr const char* kGetJob = "SELECT " LLMQ_JOB_COLUMNS " FROM jobs WHERE id = $1";
inline constexpr const char* kGetJobByPublicId =
    "SELECT " LLMQ_JOB_COLUMNS " FROM jobs WHERE public_id = $1";
inline constexpr const char* kListJobs = "SELECT " LLMQ_JOB_COLUMNS " FROM jobs ORDER BY id";
inline constexpr const char* kMarkStarted =
    "UPDATE jobs SET started_at = $2 WHERE id = $1 AND started_at = 0";
inline constexpr const char* kRequestCancel = "UPDATE jobs SET cancel_requested = 1 WHERE id = $1";
inline constexpr const char* kSetJobOptions = "UPDATE jobs SET options = $2 WHERE id = $1";
inline constexpr const char* kGetCustomId =
    "SELECT custom_id FROM requests WHERE job = $1 AND line = $2";
inline constexpr const char* kMarkAttempted =
    "UPDATE requests SET attempts = attempts + 1 WHERE job = $1 AND line = $2";
inline constexpr const char* kCountPending =
    "SELECT count(*) FROM requests WHERE job = $1 AND status = 'pending'";
inline constexpr const char* kPendingOfJob =
    "SELECT job, line, plan_rank, attempts, custom_id, body FROM requests "
    "WHERE job = $1 AND line > $2 AND status = 'pending' ORDER BY line LIMIT $3";
inline constexpr const char* kJobTotals =
    "SELECT prompt_tokens, cached_tokens, completion_tokens, computed_tokens FROM jobs "
    "WHERE id = $1";
inline constexpr const char* kReadVersion = "SELECT value FROM meta WHERE key = 'schema_version'";
inline constexpr const char* kWriteVersion =
    "INSERT INTO meta (key, value) VALUES ('schema_version', $1) "
    "ON CONFLICT (key) DO UPDATE SET value = excluded.value";

// --- Workers and leases (schema 4).
// $9: served_models, a JSON array of names (schema 6).
inline constexpr const char* kRegisterWorker =
    "INSERT INTO workers (id, host, device, model, started_at, heartbeat_at, state, current_job, "
    "tokens_per_second, served_models) VALUES ($1, $2, $3, $4, $5, $5, $6, $7, $8, $9) "
    "ON CONFLICT (id) DO UPDATE "
    "SET host = excluded.host, device = excluded.device, model = excluded.model, "
    "heartbeat_at = excluded.heartbeat_at, state = excluded.state, "
    "current_job = excluded.current_job, tokens_per_second = excluded.tokens_per_second, "
    "served_models = excluded.served_models";
inline constexpr const char* kUpdateWorker =
    "UPDATE workers SET host = $2, device = $3, model = $4, heartbeat_at = $5, state = $6, "
    "current_job = $7, tokens_per_second = $8, served_models = $9 WHERE id = $1";
inline constexpr const char* kTouchWorker = "UPDATE workers SET heartbeat_at = $2 WHERE id = $1";
// A lease released (expiring at 0) is not renewed.
inline constexpr const char* kRenewLeases =
    "UPDATE requests SET lease_expires_at = $2 WHERE lease_worker = $1 AND status = 'pending' "
    "AND lease_expires_at <> 0";
inline constexpr const char* kReleaseLeases =
    "UPDATE requests SET lease_expires_at = 0 WHERE lease_worker = $1 AND status = 'pending' "
    "AND lease_expires_at <> 0";
// The worker's leased pending requests (ReleaseLeases with some kept): PostgreSQL locks them in
// (job, line) order (FOR UPDATE appended there), then each not kept is released by its key.
inline constexpr const char* kLeasedRequests =
    "SELECT job, line FROM requests WHERE lease_worker = $1 AND status = 'pending' "
    "AND lease_expires_at <> 0 ORDER BY job, line";
inline constexpr const char* kReleaseLease =
    "UPDATE requests SET lease_expires_at = 0 WHERE job = $1 AND line = $2 AND lease_worker = $3 "
    "AND status = 'pending' AND lease_expires_at <> 0";
inline constexpr const char* kListWorkers =
    "SELECT id, host, device, model, started_at, heartbeat_at, state, current_job, "
    "tokens_per_second, served_models FROM workers ORDER BY id";
// Job finalize leases ($1 job, $2 worker, $3 now, $4 when it expires): taken when free, expired
// or the worker's own; renewed by the worker's heartbeat; given back by the holder only.
inline constexpr const char* kClaimFinalize =
    "UPDATE jobs SET finalize_worker = $2, finalize_expires_at = $4 WHERE id = $1 AND "
    "(finalize_worker IS NULL OR finalize_worker = $2 OR finalize_expires_at <= $3)";
inline constexpr const char* kRenewFinalize =
    "UPDATE jobs SET finalize_expires_at = $2 WHERE finalize_worker = $1";
inline constexpr const char* kReleaseFinalize =
    "UPDATE jobs SET finalize_worker = NULL, finalize_expires_at = 0 "
    "WHERE id = $1 AND finalize_worker = $2";
// A leased result's request is finished only under its lease (the fence): pending, this worker's,
// this generation. The row it changes is locked until the commit, so no claim takes it meanwhile.
inline constexpr const char* kFencedFinish =
    "UPDATE requests SET status = $3 WHERE job = $1 AND line = $2 AND status = 'pending' "
    "AND lease_worker = $4 AND lease_generation = $5";
// The columns a claim returns: PendingFromRow's, then plan_group and lease_generation.
#define LLMQ_CLAIM_COLUMNS \
  "job, line, plan_rank, attempts, custom_id, body, plan_group, lease_generation"
// Leases up to $5 claimable requests of group $4 to worker $1 ($2: now, $3: when it expires).
// LLMQ_LEASE_GROUP_HEAD, a condition on the rows (`AND ...`: an engine's model filter; a group
// planned over several files at once may span jobs of several models), LLMQ_LEASE_GROUP_TAIL.
#define LLMQ_LEASE_GROUP_HEAD                                                                   \
  "UPDATE requests SET lease_worker = $1, lease_generation = lease_generation + 1, "            \
  "lease_expires_at = $3 WHERE (job, line) IN (SELECT job, line FROM requests "                 \
  "WHERE plan_group = $4 AND status = 'pending' AND (lease_worker IS NULL OR lease_expires_at " \
  "<= $2) "
#define LLMQ_LEASE_GROUP_TAIL "ORDER BY plan_rank LIMIT $5) RETURNING " LLMQ_CLAIM_COLUMNS
inline constexpr const char* kLeaseGroup = LLMQ_LEASE_GROUP_HEAD LLMQ_LEASE_GROUP_TAIL;

}  // namespace llmq::jobs::sql
