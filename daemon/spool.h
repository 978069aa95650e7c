// Spool: the state folder of `llmq serve` and of the commands that talk to its queue. Layout:
//   <state>/queue.db   the Store
//   <state>/inbox/     users drop job files here (dotfiles, *.tmp and *.part are ignored)
//   <state>/outbox/    <stem>.results.jsonl, <stem>.errors.jsonl, <stem>.summary.json per job
//   <state>/failed/    files refused whole, each with <name>.reason.txt
//   <state>/archive/   accepted inputs, moved here once their job is in the queue
//   <state>/serve.json what the running llmq serve publishes for llmq status (WriteServeState)
// Everything here is plain functions over paths; the watcher and the event loop are in
// cli_serve.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/run_windows.h"
#include "daemon/request_builder.h"
#include "engine/status.h"
#include "jobs/store.h"

namespace llmq::spool {

struct Paths {
  std::string root, inbox, outbox, failed, archive, db, serve_state;
};
Paths PathsFor(const std::string& state_dir);
// Creates the state folder and its four subfolders when absent. Errors name the folder.
Status EnsureLayout(const Paths& p);

// <state>/serve.json: what the running `llmq serve` publishes for `llmq status`: its pid and the
// run windows in effect (serve.run_windows as last loaded: at start and on SIGHUP), written
// durably. The daemon removes it when it stops.
Status WriteServeState(const Paths& p, const std::vector<RunWindow>& windows);
// The run windows the `llmq serve` of `p` has in effect. False when none is running there: no
// serve.json, an unreadable one, or its pid is gone (a daemon killed with kill -9).
bool ReadServeState(const Paths& p, std::vector<RunWindow>* windows);

// Names the watcher never looks at: dotfiles (DurableFile's temporaries), *.tmp, *.part.
bool Ignored(const std::string& name);

// Why the whole file cannot run, or "" when at least one line of it can: over `max_bytes`,
// empty (no non-blank line), or no line that validates: binary (a NUL byte), not UTF-8, else the
// first line's error is quoted. Reads the file once; memory holds one line of at most
// `max_line_bytes` (longer lines are counted, not kept).
std::string WholeFileRefusal(const std::string& path, const std::string& name, int64_t max_bytes,
                             int64_t max_line_bytes, const BuildContext& ctx);

// `dir`/`name` when free, else `dir`/`name`.1, .2, ... (never replaces anything).
std::string FreePath(const std::string& dir, const std::string& name);

// Renames `from` into failed/ (a free name) and writes <that name>.reason.txt durably. On
// success *moved_to is the new path.
Status MoveToFailed(const Paths& p, const std::string& from, const std::string& name,
                    const std::string& reason, std::string* moved_to);

// Removes DurableFile temporaries (".<name>.tmp-<pid>-<n>", and CheckWritable's
// ".<name>.probe-...") in `dir` left by a process that is no longer running (kill -9 or a power cut
// while a file was being written); returns how many. A temporary of a live process is left alone.
int RemoveStaleTemporaries(const std::string& dir);

// rename(2), then fsync of both folders. Errors name both paths and strerror.
Status RenameDurably(const std::string& from, const std::string& to);

// The stem of a job's outputs: its name without a trailing ".jsonl" (or ".json").
std::string OutputStem(const std::string& name);

// The job with public id `id`, else the only job named `id`. NotFound / InvalidArgument
// (several jobs have that name: their ids are listed).
Status FindJobByIdOrName(jobs::Store* store, const std::string& id, jobs::JobRecord* out);

}  // namespace llmq::spool
