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

#include "base/durable_file.h"
#include "base/json.h"
#include "base/text.h"
#include "jobs/batch_request.h"
#include "jobs/line_reader.h"
#include "jobs/sha256.h"

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

Status WriteServeState(const Paths& p, const std::vector<RunWindow>& windows,
                       const ServeProgress& progress) {
  nlohmann::json w = nlohmann::json::array();
  for (const RunWindow& rw : windows) w.push_back(FormatRunWindow(rw));
  nlohmann::json pr{{"at", progress.at},
                    {"tokens_per_second", progress.tokens_per_second},
                    {"running", progress.running},
                    {"queued", progress.queued},
                    {"tokens_generated", progress.tokens_generated},
                    {"held", progress.held},
                    {"fed_out", progress.fed_out},
                    {"in_flight_tokens", nlohmann::json::object()}};
  for (const auto& [job, tokens] : progress.in_flight_tokens) pr["in_flight_tokens"][job] = tokens;
  return WriteFileDurably(
      p.serve_state,
      DumpJson(nlohmann::json{{"pid", getpid()}, {"run_windows", w}, {"progress", pr}}) + "\n");
}

bool ReadServeState(const Paths& p, std::vector<RunWindow>* windows, ServeProgress* progress) {
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
  if (progress != nullptr && j.contains("progress") && j["progress"].is_object()) {
    const nlohmann::json& pr = j["progress"];
    const auto num = [&](const char* k) {
      return pr.contains(k) && pr[k].is_number() ? pr[k].get<double>() : 0.0;
    };
    progress->at = num("at");
    progress->tokens_per_second = num("tokens_per_second");
    progress->running = static_cast<int64_t>(num("running"));
    progress->queued = static_cast<int64_t>(num("queued"));
    progress->tokens_generated = static_cast<int64_t>(num("tokens_generated"));
    const auto flag = [&](const char* k) {
      return pr.contains(k) && pr[k].is_boolean() && pr[k].get<bool>();
    };
    progress->held = flag("held");
    progress->fed_out = flag("fed_out");
    progress->in_flight_tokens.clear();
    if (pr.contains("in_flight_tokens") && pr["in_flight_tokens"].is_object())
      for (const auto& [job, tokens] : pr["in_flight_tokens"].items())
        if (tokens.is_number_integer())
          progress->in_flight_tokens.emplace_back(job, tokens.get<int64_t>());
  }
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

std::string NameProblem(const std::string& name) {
  if (!IsUtf8(name))
    return "its name (" + Escaped(name) +
           ") is not UTF-8: name job files in UTF-8 (the name is written in JSON and logs)";
  if (HasControlOrInvalid(name))
    return "its name (" + Escaped(name) +
           ") holds a control character: name job files without newlines, tabs or escapes";
  return "";
}

std::string FitName(const std::string& name, size_t reserve) {
  if (name.size() + reserve <= kMaxName) return name;
  const std::string hash = "~" + jobs::Sha256Hex(name).substr(0, 16);
  size_t keep = kMaxName - std::min(kMaxName, reserve + hash.size());
  // Cut at a sequence boundary: never half of a UTF-8 character.
  while (keep > 0 && keep < name.size() && (static_cast<unsigned char>(name[keep]) & 0xC0) == 0x80)
    --keep;
  return name.substr(0, keep) + hash;
}

std::string FreeName(const std::string& dir, const std::string& name,
                     const std::vector<std::string>& suffixes) {
  size_t longest = 0;
  for (const std::string& x : suffixes) longest = std::max(longest, x.size());
  auto free = [&](const std::string& n) {
    std::error_code ec;
    for (const std::string& x : suffixes)
      if (fs::symlink_status(fs::path(dir) / (n + x), ec).type() != fs::file_type::not_found)
        return false;
    return true;
  };
  const std::string base = FitName(name, longest);
  if (free(base)) return (fs::path(dir) / base).string();
  for (int k = 1;; ++k) {
    const std::string counter = "." + std::to_string(k);
    const std::string n = FitName(name, longest + counter.size()) + counter;
    if (free(n)) return (fs::path(dir) / n).string();
  }
}

Status WholeFileRefusal(const UntrustedFile& file, const std::string& name, int64_t max_line_bytes,
                        const BuildContext& ctx) {
  const std::unique_ptr<std::istream> in = file.Stream();
  // A file is refused whole only when no line of it can run: one line with a stray Latin-1
  // byte, or one huge line, must not sink the good lines around it (they become error lines).
  // The reason quoted is the first line's problem; a NUL byte anywhere before the first good
  // line makes it a binary file, a byte that is not UTF-8 a file in another encoding.
  jobs::LineReader reader(*in, max_line_bytes);
  jobs::FileLine line;
  std::string first_error, encoding;
  bool any_line = false;
  while (reader.Next(&line)) {
    if (line.has_nul)
      return Status::InvalidArgument("binary: a NUL byte at offset " +
                                     std::to_string(line.offset + line.nul_at) + " (line " +
                                     std::to_string(line.no) + "); a job file is UTF-8 JSONL text");
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
      const Status st =
          r.error.empty() ? PlanKey(ctx, r, name, &key) : Status::InvalidArgument(r.error);
      if (st.ok()) return Status::Ok();  // one line can run: the file is accepted
      error = st.message();
    }
    if (first_error.empty()) first_error = error;
  }
  if (reader.bad()) return Status::IoError(std::string("read failed: ") + std::strerror(errno));
  if (!encoding.empty()) return Status::InvalidArgument(encoding);
  if (!any_line) return Status::InvalidArgument("empty: no request line");
  return Status::InvalidArgument("no valid request line (the first error: " + first_error + ")");
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

Status RenameDurably(int from_dir, const std::string& from_name, const std::string& from_shown,
                     const std::string& to) {
  if (::renameat2(from_dir, from_name.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) != 0)
    return Status::IoError("cannot move " + Escaped(from_shown) + " to " + Escaped(to) + ": " +
                           std::strerror(errno));
  LLMQ_RETURN_IF_ERROR(FsyncDir(fs::path(to).parent_path().string()));
  if (::fsync(from_dir) != 0)
    return Status::IoError(Escaped(from_shown) +
                           ": fsync of its folder failed: " + std::strerror(errno));
  return Status::Ok();
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

Status MoveToFailed(const Paths& p, int from_dir, const std::string& from_name,
                    const std::string& from_shown, const std::string& reason,
                    std::string* moved_to) {
  std::string to;
  for (int tries = 0;; ++tries) {  // a name taken between FreeName and the rename: another
    to = FreeName(p.failed, from_name, {"", ".reason.txt"});
    const Status st = RenameDurably(from_dir, from_name, from_shown, to);
    if (st.ok()) break;
    std::error_code ec;
    if (tries == 8 || fs::symlink_status(to, ec).type() == fs::file_type::not_found) return st;
  }
  *moved_to = to;
  return WriteFileDurably(to + ".reason.txt", OneLine(reason) + "\n");
}

std::string OutputStem(const std::string& name, const std::string& public_id) {
  std::string stem = name;
  for (const char* ext : {".jsonl", ".json"}) {
    const size_t n = std::strlen(ext);
    if (name.size() > n && name.compare(name.size() - n, n, ext) == 0) {
      stem = name.substr(0, name.size() - n);
      break;
    }
  }
  return FitName(stem, std::strlen(".results.jsonl") + 1 + public_id.size());
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
