#include "daemon/intake.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "base/json.h"
#include "base/log.h"
#include "base/text.h"
#include "base/untrusted_file.h"
#include "daemon/ingest.h"

namespace llmq {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// TEST ONLY: LLMQ_TEST_SWAP_AFTER_OPEN=<path>: right after inbox/<name> was opened to be
// accepted, <path> (when it exists) is renamed over inbox/<name>, as a hostile writer swapping
// the file at the worst moment would (tests/serve_hostile_test.cpp).
void TestSwapAfterOpen(int inbox_fd, const std::string& name) {
  static const char* swap = std::getenv("LLMQ_TEST_SWAP_AFTER_OPEN");
  if (swap != nullptr && *swap != '\0') ::renameat(AT_FDCWD, swap, inbox_fd, name.c_str());
}

}  // namespace

Status Intake::Refuse(const spool::Paths& paths, int inbox_fd, const std::string& name,
                      const std::string& reason) {
  std::string to;
  LLMQ_RETURN_IF_ERROR(spool::MoveToFailed(paths, inbox_fd, name, "inbox/" + name, reason, &to));
  Log("failed/%s: %s", Escaped(fs::path(to).filename().string()).c_str(), reason.c_str());
  return Status::Ok();
}

void Intake::Refuse(const std::string& name, const std::string& reason, Outcome* out) {
  out->done.push_back(name);
  if (Status st = Refuse(paths_, inbox_fd_, name, reason); !st.ok()) {
    if (refuse_logged_.insert(name).second)
      Log("inbox/%s: refused (%s), and cannot be moved to failed/: %s", Escaped(name).c_str(),
          reason.c_str(), st.message().c_str());
  } else {
    refuse_logged_.erase(name);
  }
}

// A file is read once on the way: ingest hashes it while reading it, and the store refuses a job
// whose name and sha256 are already recorded (the whole ingest is rolled back, InvalidArgument).
// Only then are the files hashed first and looked up one by one, so that the same file dropped
// again is refused naming its job, and one accepted just before a crash has its move finished.
Intake::Outcome Intake::Accept(int inbox_fd, const std::vector<std::string>& names,
                               const Limits& limits) {
  inbox_fd_ = inbox_fd;
  Outcome out;
  if (AcceptFiles(names, /*look_up=*/false, limits, &out).code() ==
      Status::Code::kInvalidArgument) {
    out = Outcome();
    static_cast<void>(AcceptFiles(names, /*look_up=*/true, limits, &out));  // logged there
  }
  return out;
}

// One pass of Accept; its ingest's status (an error is logged here, except the one Accept
// answers with a look-up).
Status Intake::AcceptFiles(const std::vector<std::string>& names, bool look_up,
                           const Limits& limits, Outcome* out) {
  std::vector<UntrustedFile> opened;
  opened.reserve(names.size());  // IngestFile points into it
  std::vector<IngestFile> files;
  std::vector<std::string> archive_to;
  for (const std::string& name : names) {
    UntrustedFile f;
    if (Status st = UntrustedFile::Open(inbox_fd_, name, "inbox/" + name, limits.max_file_bytes,
                                        "spool.max_file_bytes", &f);
        !st.ok()) {
      if (st.code() == Status::Code::kInvalidArgument)
        Refuse(name, st.message(), out);
      else if (st.code() == Status::Code::kNotFound)
        out->done.push_back(name);
      else
        Log("%s (retried at the next rescan)", st.message().c_str());
      continue;
    }
    TestSwapAfterOpen(inbox_fd_, name);  // TEST ONLY (LLMQ_TEST_SWAP_AFTER_OPEN)
    std::string sha;                     // "" = ingest hashes it while reading it
    if (look_up && !LookUp(name, f, &sha, out)) continue;
    if (Status why = spool::WholeFileRefusal(f, name, limits.max_line_bytes, ctx_); !why.ok()) {
      if (f.IsAt(inbox_fd_, name))
        Refuse(name, why.message(), out);
      else  // another file stands there now: it is looked at anew
        out->resettle.push_back(name);
      continue;
    }
    std::string archive = spool::FreeName(paths_.archive, name);
    for (const std::string& a : archive_to)  // two names of one call never share a slot
      if (a == archive) archive = spool::FreeName(paths_.archive, name + ".x");
    opened.push_back(std::move(f));
    IngestFile in;
    in.file = &opened.back();
    in.name = name;
    in.sha256 = sha;
    in.options = DumpJson(json{{"source", "inbox"}, {"archive", archive}});
    in.dir_fd = inbox_fd_;
    in.entry = name;
    files.push_back(std::move(in));
    archive_to.push_back(archive);
  }
  if (files.empty()) return Status::Ok();
  std::vector<IngestedJob> jobs;
  IngestOptions iopt;
  iopt.max_line_bytes = limits.max_line_bytes;
  iopt.cancel = &cancel_;
  size_t changed = files.size();
  const Status st = IngestFiles(store_, ctx_, files, iopt, &jobs, /*timings=*/nullptr, &changed);
  if (!st.ok() && changed < files.size()) {
    // Written to or replaced while it was read: it settles again (as a new file), and the files
    // accepted with it go on without it.
    Log("%s: it is looked at again once it settles", st.message().c_str());
    out->resettle.push_back(files[changed].entry);
    std::vector<std::string> rest;
    for (size_t i = 0; i < files.size(); ++i)
      if (i != changed) rest.push_back(files[i].entry);
    return AcceptFiles(rest, look_up, limits, out);
  }
  if (!st.ok()) {
    if (!look_up && st.code() == Status::Code::kInvalidArgument) return st;
    Log("cannot accept %zu file(s) from inbox/: %s (they stay there; retried at the next rescan)",
        files.size(), st.message().c_str());
    return st;
  }
  if (jobs.size() > 1) Log("accepting %zu files together (planned as one window)", jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    const IngestedJob& j = jobs[i];
    const std::string& name = files[i].entry;
    out->done.push_back(name);
    ++out->accepted;
    out->jobs.emplace_back(name, j.job.public_id);
    Status moved = spool::RenameDurably(inbox_fd_, name, "inbox/" + name, archive_to[i]);
    if (moved.ok()) moved = CheckArchived(name, *files[i].file, archive_to[i]);
    Log("accepted inbox/%s as %s (%lld requests, %lld refused)%s", Escaped(name).c_str(),
        j.job.public_id.c_str(), static_cast<long long>(j.job.total),
        static_cast<long long>(j.refused), moved.ok() ? "" : ("; " + moved.message()).c_str());
  }
  return Status::Ok();
}

// After the move of an accepted file to `archived`: if what was moved is not the file that was
// read (another was renamed over inbox/<name> between the commit and the move), that other file
// is put back into inbox/, to be looked at as the new file it is.
Status Intake::CheckArchived(const std::string& name, const UntrustedFile& read,
                             const std::string& archived) {
  struct stat st {};
  if (::lstat(archived.c_str(), &st) == 0 && st.st_dev == read.device() &&
      st.st_ino == read.inode())
    return Status::Ok();
  if (::renameat2(AT_FDCWD, archived.c_str(), inbox_fd_, name.c_str(), RENAME_NOREPLACE) != 0)
    return Status::IoError("inbox/" + Escaped(name) +
                           " was replaced after it was read; the new file stays in " +
                           Escaped(archived) + " (" + std::strerror(errno) + ")");
  return Status::IoError("inbox/" + Escaped(name) +
                         " was replaced after it was read; the new file is back in inbox/");
}

// Hashes the file and looks its (name, sha256) up in the queue. False when the file is done with
// here: already accepted (refused as a duplicate naming its job, or, accepted just before a crash,
// moved on to archive/), or it cannot be read or looked up now (logged; the next rescan tries
// again). Else *sha is its SHA-256, for the ingest.
bool Intake::LookUp(const std::string& name, const UntrustedFile& file, std::string* sha,
                    Outcome* out) {
  int64_t bytes = 0;
  if (Status st = HashFile(file, sha, &bytes); !st.ok()) {
    Log("%s (retried at the next rescan)", st.message().c_str());
    return false;
  }
  std::optional<jobs::JobRecord> existing;
  if (Status st = store_->FindJob(name, *sha, &existing); !st.ok()) {
    Log("inbox/%s: %s (retried at the next rescan)", Escaped(name).c_str(), st.message().c_str());
    return false;
  }
  if (!existing) return true;
  const json opts = json::parse(existing->options, nullptr, false);
  const std::string archived =
      opts.is_object() ? opts.value("archive", std::string()) : std::string();
  std::error_code ec;
  if (!archived.empty() && !fs::exists(archived, ec)) {
    // Accepted, then interrupted before the move: finish the move, never a second job.
    out->done.push_back(name);
    if (Status st = spool::RenameDurably(inbox_fd_, name, "inbox/" + name, archived); !st.ok())
      Log("%s", st.message().c_str());
    else
      Log("inbox/%s: already accepted as %s; moved to archive/ (the move had been interrupted)",
          Escaped(name).c_str(), existing->public_id.c_str());
    return false;
  }
  Refuse(name,
         "the same file (name and sha256 " + sha->substr(0, 16) +
             "...) was already accepted as job " + existing->public_id + " (" +
             jobs::JobStatusName(existing->status) + "): it is not run twice",
         out);
  return false;
}

}  // namespace llmq
