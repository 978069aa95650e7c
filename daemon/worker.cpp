#include "daemon/worker.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

namespace llmq {

namespace {
constexpr int kMaxWorkerSlots = 1024;
}  // namespace

std::string HostName() {
  std::array<char, 256> host{};
  if (::gethostname(host.data(), host.size() - 1) != 0) return "";
  return host.data();
}

Status TakeWorkerSlot(const std::string& root, int* fd, std::string* id) {
  const std::string dir = root + "/workers";
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    return Status::IoError(dir + ": cannot create: " + std::strerror(errno));
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0) return Status::IoError(dir + ": cannot open: " + std::strerror(errno));
  for (int slot = 0; slot < kMaxWorkerSlots; ++slot) {
    const std::string name = std::to_string(slot) + ".lock";
    const int f = ::openat(dfd, name.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (f < 0) {
      const int err = errno;
      ::close(dfd);
      return Status::IoError(dir + "/" + name + ": cannot open: " + std::strerror(err));
    }
    if (::flock(f, LOCK_EX | LOCK_NB) == 0) {
      ::close(dfd);
      *fd = f;
      std::string host = HostName();
      if (host.empty()) host = "localhost";
      const std::string tail = ":" + root + "#" + std::to_string(slot);
      *id = (host + tail).substr(0, 200);
      return Status::Ok();
    }
    const int err = errno;
    ::close(f);
    if (err != EWOULDBLOCK) {
      ::close(dfd);
      return Status::IoError(dir + "/" + name + ": cannot lock: " + std::strerror(err));
    }
  }
  ::close(dfd);
  return Status::IoError(dir + ": every one of " + std::to_string(kMaxWorkerSlots) +
                         " worker slots is taken by a running llmq serve");
}

Status WorkerPresence::Register(int64_t* released) {
  info_.host = HostName();
  info_.state = "starting";
  LLMQ_RETURN_IF_ERROR(store_->RegisterWorker(info_));
  int64_t n = 0;
  LLMQ_RETURN_IF_ERROR(store_->ReleaseLeases(info_.id, &n));
  if (released != nullptr) *released = n;
  return Status::Ok();
}

Status WorkerPresence::Beat(const std::string& state, const std::string& current_job,
                            double tokens_per_second) {
  LLMQ_RETURN_IF_ERROR(store_->Heartbeat(info_.id, lease_seconds_));
  info_.state = state;
  info_.current_job = current_job;
  info_.tokens_per_second = tokens_per_second;
  return store_->UpdateWorker(info_);
}

Status WorkerPresence::Leave(int64_t* released) {
  int64_t n = 0;
  LLMQ_RETURN_IF_ERROR(store_->ReleaseLeases(info_.id, &n));
  if (released != nullptr) *released = n;
  info_.state = "stopped";
  info_.current_job.clear();
  info_.tokens_per_second = 0;
  return store_->UpdateWorker(info_);
}

Status WorkerPresence::ClaimJob(int64_t job, bool* mine) {
  return store_->ClaimJobFinalize(info_.id, job, lease_seconds_, mine);
}

}  // namespace llmq
