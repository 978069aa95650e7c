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
#include <utility>
#include <vector>

#include "base/status.h"
#include "base/untrusted_file.h"
#include "config/run_windows.h"
#include "daemon/request_builder.h"
#include "jobs/store.h"

namespace llmq::spool {

struct Paths {
  std::string root, inbox, outbox, failed, archive, db, serve_state;
};
Paths PathsFor(const std::string& state_dir);
// Where the queue is (what jobs::Store::Open takes): `queue_url` (queue.url, a PostgreSQL URL)
// when set, else the SQLite file p.db.
inline std::string QueueLocation(const Paths& p, const std::string& queue_url) {
  return queue_url.empty() ? p.db : queue_url;
}
// Creates the state folder and its four subfolders when absent. Errors name the folder.
Status EnsureLayout(const Paths& p);

// <state>/serve.json: what the running `llmq serve` publishes for `llmq status`: its pid and the
// run windows in effect (serve.run_windows as last loaded: at start and on SIGHUP), written
// durably. The daemon removes it when it stops.
// What the engine is doing, as serve.json tells `llmq status` (refreshed with the metrics).
struct ServeProgress {
  double at = 0;  // when (unix seconds, base/wall_clock.h)
  // Completion tokens per wall-clock second while the engine works (busy time, not waits, not
  // the hours outside the run windows), over its last few measured intervals.
  double tokens_per_second = 0;
  int64_t running = 0;           // requests admitted by the engine
  int64_t queued = 0;            // handed to the engine, not yet admitted
  int64_t tokens_generated = 0;  // completion tokens since the daemon started
  bool held = false;             // outside the run windows: nothing new starts
  bool fed_out = false;          // the queue had nothing more to feed at the runner's last look
  // Completion tokens the engine's unfinished requests already hold, by job public id: work done
  // that the queue's counts do not show yet.
  std::vector<std::pair<std::string, int64_t>> in_flight_tokens;
};
Status WriteServeState(const Paths& p, const std::vector<RunWindow>& windows,
                       const ServeProgress& progress = ServeProgress());
// The run windows the `llmq serve` of `p` has in effect. False when none is running there: no
// serve.json, an unreadable one, or its pid is gone (a daemon killed with kill -9).
bool ReadServeState(const Paths& p, std::vector<RunWindow>* windows,
                    ServeProgress* progress = nullptr);

// Names the watcher never looks at: dotfiles (DurableFile's temporaries), *.tmp, *.part.
bool Ignored(const std::string& name);

// Why a file named `name` cannot be a job, or "" when it can: its name is not UTF-8, or holds a
// control character (a newline, an escape sequence): such a name could not be written in JSON,
// logs and the database as it is. The reason shows the name escaped (base/text.h). The one check
// of names at every entry into the queue (inbox/ and llmq submit).
std::string NameProblem(const std::string& name);

// The longest file name (NAME_MAX): a name and what is appended to it must fit.
inline constexpr size_t kMaxName = 255;

// `name` when `reserve` more bytes still fit in a file name; else its first bytes (cut at a UTF-8
// boundary) + "~" + 16 hex digits of its SHA-256, `reserve` bytes short of kMaxName: distinct
// names stay distinct, and the same name always gives the same result.
std::string FitName(const std::string& name, size_t reserve);

// `dir`/N for the first N of FitName(name, ...), then ".1", ".2", ... appended, such that N plus
// each of `suffixes` is a free name in `dir` (nothing is ever replaced: a refused file and its
// .reason.txt both land on free names, whatever was refused before).
std::string FreeName(const std::string& dir, const std::string& name,
                     const std::vector<std::string>& suffixes = {""});

// OK when at least one line of the file can run; else why the whole file cannot (the message is
// the reason the file is refused with): InvalidArgument when it is empty (no non-blank line), or
// has no line that validates: binary (a NUL byte), not UTF-8, else the first line's error is
// quoted; IoError when reading it failed. Reads the file through its descriptor (it was opened
// within spool.max_file_bytes); memory holds one line of at most `max_line_bytes` (longer lines
// are counted, not kept).
Status WholeFileRefusal(const UntrustedFile& file, const std::string& name, int64_t max_line_bytes,
                        const BuildContext& ctx);

// Renames `from_name` of the folder open as `from_dir` (shown as `from_shown` in messages) into
// failed/ (FreeName with its ".reason.txt") and writes <that name>.reason.txt durably with
// `reason` (one line). On success *moved_to is the new path.
Status MoveToFailed(const Paths& p, int from_dir, const std::string& from_name,
                    const std::string& from_shown, const std::string& reason,
                    std::string* moved_to);

// Removes DurableFile temporaries (".<name>.tmp-<pid>-<n>", and CheckWritable's
// ".<name>.probe-...") in `dir` left by a process that is no longer running (kill -9 or a power cut
// while a file was being written); returns how many. A temporary of a live process is left alone.
// The pid is this host's: a state folder belongs to one host (several workers of one host may share
// it; hosts sharing a PostgreSQL queue each have their own).
int RemoveStaleTemporaries(const std::string& dir);

// Renames `from_name` of the folder open as `from_dir` (renameat: the entry of that very folder,
// even if its path was replaced meanwhile) to `to`, never replacing `to` (it fails when `to`
// exists), then fsyncs both folders. Errors name both (`from_shown` for the source) and strerror.
Status RenameDurably(int from_dir, const std::string& from_name, const std::string& from_shown,
                     const std::string& to);

// The stem of a job's outputs: its name without a trailing ".jsonl" (or ".json"), fitted (FitName)
// so that "<stem>.<public id>.results.jsonl" is a valid file name.
std::string OutputStem(const std::string& name, const std::string& public_id);

// The job with public id `id`, else the only job named `id`. NotFound / InvalidArgument
// (several jobs have that name: their ids are listed).
Status FindJobByIdOrName(jobs::Store* store, const std::string& id, jobs::JobRecord* out);

}  // namespace llmq::spool
