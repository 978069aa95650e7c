// Intake: accepting the settled files of inbox/ into the queue, on a thread of its own so that
// the daemon's event loop (signals, the inbox watcher, the watchdog) never waits for a large file
// to be read and stored. The watcher (cli_serve.cpp) decides which files have settled; Intake
// takes them from there:
//  - each file is opened once (UntrustedFile: no link followed, nothing that blocks, a regular
//    file within spool.max_file_bytes), and everything after reads that descriptor: the
//    whole-file check, the hash, the ingest;
//  - all the files of one call are ingested in ONE transaction (planned together), the job's
//    file must still be the entry it was opened from when that commits, then each is moved to
//    archive/ (and checked to be the file that was read);
//  - a file that cannot be a job is moved to failed/ with its reason (Refuse);
//  - a file written to or replaced while it was read is handed back to settle again; the other
//    files of the call go on without it.
// Thread-safety: Accept runs on one thread at a time (the intake thread); Cancel may be called
// from any thread; Refuse from any thread (it only renames and writes in failed/).
#pragma once

#include <atomic>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "daemon/request_builder.h"
#include "daemon/spool.h"
#include "jobs/store.h"

namespace llmq {

class Intake {
 public:
  struct Limits {
    int64_t max_file_bytes = int64_t{1} << 30;   // spool.max_file_bytes
    int64_t max_line_bytes = int64_t{16} << 20;  // spool.max_line_bytes
  };
  // What became of the names given to Accept.
  struct Outcome {
    std::vector<std::string> done;      // accepted, refused, or gone: no longer to be watched
    std::vector<std::string> resettle;  // changed or replaced while read: to settle again
    int64_t accepted = 0;               // jobs added to the queue
    std::vector<std::pair<std::string, std::string>> jobs;  // (name, job id) of each accepted
  };

  // `store` is this thread's own connection.
  Intake(const spool::Paths& paths, jobs::Store* store, const BuildContext& ctx)
      : paths_(paths), store_(store), ctx_(ctx) {}

  // Accepts the settled files `names` of inbox/, the folder open as `inbox_fd` (kept open by the
  // caller while Accept runs) (see above). Names neither done nor resettled
  // (the store failed, a file could not be opened now, the call was cancelled) stay in inbox/
  // and are tried again at the watcher's next rescan; why is logged.
  Outcome Accept(int inbox_fd, const std::vector<std::string>& names, const Limits& limits);

  // Ends an Accept in progress at its next chunk of lines: its transaction is rolled back, its
  // files stay in inbox/ (llmq serve is stopping).
  void Cancel() { cancel_.store(true); }

  // Moves inbox/<name> (the entry of `inbox_fd`) to failed/ with `reason`, logged as
  // "failed/<name>: <reason>". The error, when it cannot be moved, is for the caller to log.
  [[nodiscard]] static Status Refuse(const spool::Paths& paths, int inbox_fd,
                                     const std::string& name, const std::string& reason);

 private:
  Status AcceptFiles(const std::vector<std::string>& names, bool look_up, const Limits& limits,
                     Outcome* out);
  bool LookUp(const std::string& name, const UntrustedFile& file, std::string* sha, Outcome* out);
  Status CheckArchived(const std::string& name, const UntrustedFile& read,
                       const std::string& archived);
  void Refuse(const std::string& name, const std::string& reason, Outcome* out);

  spool::Paths paths_;
  int inbox_fd_ = -1;  // Accept's
  jobs::Store* store_;
  const BuildContext& ctx_;
  std::atomic<bool> cancel_{false};
  std::set<std::string> refuse_logged_;  // names whose failed move was logged
};

}  // namespace llmq
