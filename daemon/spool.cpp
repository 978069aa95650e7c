#include "daemon/spool.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "engine/durable_file.h"
#include "jobs/batch_request.h"
#include "jobs/line_reader.h"

namespace llmq::spool {
namespace fs = std::filesystem;

Paths PathsFor(const std::string& state_dir) {
  const fs::path r(state_dir);
  return Paths{r.string(),
               (r / "inbox").string(),
               (r / "outbox").string(),
               (r / "failed").string(),
               (r / "archive").string(),
               (r / "queue.db").string(),
               (r / "serve.json").string()};
}

Status WriteServeState(const Paths& p, const std::vector<RunWindow>& windows) {
  nlohmann::json w = nlohmann::json::array();
  for (const RunWindow& rw : windows) w.push_back(FormatRunWindow(rw));
  return WriteFileDurably(p.serve_state,
                          nlohmann::json{{"pid", getpid()}, {"run_windows", w}}.dump() + "\n");
}

bool ReadServeState(const Paths& p, std::vector<RunWindow>* windows) {
  std::ifstream in(p.serve_state);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("pid") || !j["pid"].is_number_integer() ||
      !j.contains("run_windows") || !j["run_windows"].is_array())
    return false;
  const pid_t pid = j["pid"].get<pid_t>();
  if (pid <= 0 || (::kill(pid, 0) != 0 && errno == ESRCH)) return false;
  std::vector<RunWindow> out;
  for (const nlohmann::json& w : j["run_windows"]) {
    RunWindow rw;
    if (!w.is_string() || !ParseRunWindow(w.get<std::string>(), &rw).ok()) return false;
    out.push_back(rw);
  }
  *windows = std::move(out);
  return true;
}

Status EnsureLayout(const Paths& p) {
  for (const std::string* d : {&p.root, &p.inbox, &p.outbox, &p.failed, &p.archive}) {
    std::error_code ec;
    fs::create_directories(*d, ec);
    if (ec) return Status::IoError(*d + ": cannot create the folder: " + ec.message());
    if (!fs::is_directory(*d, ec)) return Status::IoError(*d + ": is not a folder");
  }
  return Status::Ok();
}

bool Ignored(const std::string& name) {
  auto ends = [&](const char* s) {
    const size_t n = std::strlen(s);
    return name.size() >= n && name.compare(name.size() - n, n, s) == 0;
  };
  return name.empty() || name[0] == '.' || ends(".tmp") || ends(".part");
}

std::string WholeFileRefusal(const std::string& path, const std::string& name, int64_t max_bytes,
                             int64_t max_line_bytes, const BuildContext& ctx) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) return "cannot read it: " + ec.message();
  if (static_cast<int64_t>(size) > max_bytes)
    return "it is " + std::to_string(size) + " bytes, over spool.max_file_bytes (" +
           std::to_string(max_bytes) + ")";
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::string("cannot open it: ") + std::strerror(errno);
  // A file is refused whole only when no line of it can run: one line with a stray Latin-1
  // byte, or one huge line, must not sink the good lines around it (they become error lines).
  // The reason quoted is the first line's problem; a NUL byte anywhere before the first good
  // line makes it a binary file, a byte that is not UTF-8 a file in another encoding.
  jobs::LineReader reader(in, max_line_bytes);
  jobs::FileLine line;
  std::string first_error, encoding;
  bool any_line = false;
  while (reader.Next(&line)) {
    if (line.has_nul)
      return "binary: a NUL byte at offset " + std::to_string(line.offset + line.nul_at) +
             " (line " + std::to_string(line.no) + "); a job file is UTF-8 JSONL text";
    if (line.bad_utf8 >= 0 && encoding.empty()) {
      char h[3];
      std::snprintf(h, sizeof h, "%02x", static_cast<unsigned char>(line.text[line.bad_utf8]));
      encoding = std::string("not UTF-8: invalid byte 0x") + h + " at offset " +
                 std::to_string(line.offset + line.bad_utf8) + " (line " + std::to_string(line.no) +
                 ")";
    }
    if (!line.too_long && line.text.find_first_not_of(" \t") == std::string::npos) continue;
    any_line = true;
    std::string error = jobs::LineProblem(line, name, max_line_bytes);
    if (error.empty()) {
      jobs::BatchRequest r = jobs::ParseBatchLine(line.text, static_cast<int>(line.no), name);
      std::vector<int32_t> key;
      if (r.error.empty()) r.error = PlanKey(ctx, r, name, &key);
      if (r.error.empty()) return "";  // one line can run: the file is accepted
      error = r.error;
    }
    if (first_error.empty()) first_error = error;
  }
  if (reader.bad()) return std::string("read failed: ") + std::strerror(errno);
  if (!encoding.empty()) return encoding;
  if (!any_line) return "empty: no request line";
  return "no valid request line (the first error: " + first_error + ")";
}

std::string FreePath(const std::string& dir, const std::string& name) {
  std::error_code ec;
  std::string p = (fs::path(dir) / name).string();
  for (int n = 1; fs::symlink_status(p, ec).type() != fs::file_type::not_found; ++n)
    p = (fs::path(dir) / (name + "." + std::to_string(n))).string();
  return p;
}

namespace {
Status FsyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::IoError(dir + ": cannot open the folder: " + std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return Status::IoError(dir + ": fsync failed: " + std::strerror(err));
  return Status::Ok();
}
}  // namespace

Status RenameDurably(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0)
    return Status::IoError("cannot move " + from + " to " + to + ": " + std::strerror(errno));
  const std::string a = fs::path(from).parent_path().string();
  const std::string b = fs::path(to).parent_path().string();
  LLMQ_RETURN_IF_ERROR(FsyncDir(b));
  return a == b ? Status::Ok() : FsyncDir(a);
}

int RemoveStaleTemporaries(const std::string& dir) {
  int removed = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    size_t at = std::string::npos, len = 0;
    for (const char* tag : {".tmp-", ".probe-"})  // the file being written; CheckWritable's probe
      if (const size_t i = name.rfind(tag); i != std::string::npos) at = i, len = std::strlen(tag);
    if (name.empty() || name[0] != '.' || at == std::string::npos) continue;
    const std::string tail = name.substr(at + len);  // "<pid>-<n>"
    const size_t dash = tail.find('-');
    if (dash == 0 || dash == std::string::npos || dash + 1 == tail.size() ||
        tail.find_first_not_of("0123456789-") != std::string::npos)
      continue;
    const long pid = std::strtol(tail.c_str(), nullptr, 10);
    if (pid <= 0 || pid == ::getpid() || ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH)
      continue;
    std::error_code rm;
    if (fs::remove(it->path(), rm)) ++removed;
  }
  return removed;
}

Status MoveToFailed(const Paths& p, const std::string& from, const std::string& name,
                    const std::string& reason, std::string* moved_to) {
  const std::string to = FreePath(p.failed, name);
  LLMQ_RETURN_IF_ERROR(RenameDurably(from, to));
  *moved_to = to;
  return WriteFileDurably(to + ".reason.txt", reason + "\n");
}

std::string OutputStem(const std::string& name) {
  for (const char* ext : {".jsonl", ".json"}) {
    const size_t n = std::strlen(ext);
    if (name.size() > n && name.compare(name.size() - n, n, ext) == 0)
      return name.substr(0, name.size() - n);
  }
  return name;
}

Status FindJobByIdOrName(jobs::Store* store, const std::string& id, jobs::JobRecord* out) {
  if (store->GetJobByPublicId(id, out).ok()) return Status::Ok();
  std::vector<jobs::JobRecord> all;
  LLMQ_RETURN_IF_ERROR(store->ListJobs(&all));
  std::vector<jobs::JobRecord> named;
  for (jobs::JobRecord& j : all)
    if (j.name == id) named.push_back(std::move(j));
  if (named.empty()) return Status::NotFound(id + ": no such job (give its batch_ id or name)");
  if (named.size() > 1) {
    std::string ids;
    for (const jobs::JobRecord& j : named) ids += (ids.empty() ? "" : ", ") + j.public_id;
    return Status::InvalidArgument(id + ": several jobs have this name (" + ids +
                                   "): give the batch_ id");
  }
  *out = std::move(named[0]);
  return Status::Ok();
}

}  // namespace llmq::spool
