#include "base/durable_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

namespace llmq {
namespace {

// Appends smaller than this collect in the buffer; larger ones go straight to the file.
constexpr size_t kBufferBytes = size_t{1} << 16;
// Symlink hops followed before giving up (the kernel's own limit, ELOOP).
constexpr int kMaxSymlinkHops = 40;

Status Errno(const std::string& path, const std::string& what, int err) {
  return Status::IoError(path + ": " + what + ": " + std::strerror(err));
}

std::string DirOf(const std::string& p) {
  const size_t slash = p.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : p.substr(0, slash);
}

std::string BaseOf(const std::string& p) {
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

// A name in `target`'s folder that no other writer uses: the pid separates processes, the counter
// objects and calls within one. The leading dot and the ".tmp" keep the spool from picking it up.
// The target's name is cut (never the tag, pid and counter) so that a target whose name is as
// long as a file name may be still has a temporary that is a valid file name.
std::string SiblingName(const std::string& target, const char* tag) {
  static std::atomic<uint64_t> counter{0};
  constexpr size_t kNameMax = 255;
  const std::string dir = DirOf(target);
  const std::string tail = std::string(".") + tag + "-" + std::to_string(::getpid()) + "-" +
                           std::to_string(counter.fetch_add(1));
  const std::string base = BaseOf(target);
  return (dir == "/" ? "" : dir) + "/." + base.substr(0, kNameMax - 1 - tail.size()) + tail;
}

bool IsKernelPath(const std::string& p) {
  return p.rfind("/dev/", 0) == 0 || p.rfind("/proc/", 0) == 0;
}

enum class Kind { kStdout, kInPlace, kReplace };

// Decides how `path` is written. For kReplace, `*target` is the regular file (existing or not)
// that the rename replaces: symlinks are followed one hop at a time so that a dangling link
// still names the file to create, and the link itself is never replaced.
Status Classify(const std::string& path, Kind* kind, std::string* target) {
  if (path.empty()) return Status::InvalidArgument("empty output path");
  if (path == "-") {
    *kind = Kind::kStdout;
    *target = path;
    return Status::Ok();
  }
  if (IsKernelPath(path)) {
    *kind = Kind::kInPlace;
    *target = path;
    return Status::Ok();
  }
  std::string cur = path;
  for (int hop = 0;; ++hop) {
    struct stat st;
    if (::lstat(cur.c_str(), &st) != 0) {
      if (errno != ENOENT)
        return Errno(path, cur == path ? "cannot inspect" : "cannot inspect link target " + cur,
                     errno);
      *kind = Kind::kReplace;  // a new file
      *target = cur;
      return Status::Ok();
    }
    if (S_ISLNK(st.st_mode)) {
      if (hop == kMaxSymlinkHops) return Errno(path, "cannot resolve", ELOOP);
      char buf[4096];
      const ssize_t n = ::readlink(cur.c_str(), buf, sizeof buf);
      if (n < 0) return Errno(path, "cannot read link " + cur, errno);
      if (static_cast<size_t>(n) == sizeof buf)
        return Errno(path, "cannot read link", ENAMETOOLONG);
      const std::string link(buf, static_cast<size_t>(n));
      cur = link[0] == '/' ? link : DirOf(cur) + "/" + link;
      continue;
    }
    if (S_ISDIR(st.st_mode)) return Errno(path, "cannot write", EISDIR);
    *kind = S_ISREG(st.st_mode) ? Kind::kReplace : Kind::kInPlace;
    // In place: writing through the name the caller gave reaches the same device or FIFO.
    *target = S_ISREG(st.st_mode) ? cur : path;
    return Status::Ok();
  }
}

}  // namespace

DurableFile::~DurableFile() {
  CloseFd();
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
}

void DurableFile::CloseFd() {
  if (fd_ >= 0 && owns_fd_) ::close(fd_);
  fd_ = -1;
}

Status DurableFile::Fail(Status s) {
  if (error_.ok()) error_ = std::move(s);
  CloseFd();
  if (!tmp_.empty()) {
    ::unlink(tmp_.c_str());
    tmp_.clear();
  }
  return error_;
}

Status DurableFile::Open(const std::string& path, int mode) {
  LLMQ_CHECK(!opened_);
  opened_ = true;
  path_ = path;
  Kind kind;
  if (Status s = Classify(path, &kind, &target_); !s.ok()) return Fail(std::move(s));
  if (kind == Kind::kStdout) {
    in_place_ = true;
    fd_ = STDOUT_FILENO;
    return Status::Ok();
  }
  owns_fd_ = true;
  if (kind == Kind::kInPlace) {
    in_place_ = true;
    // O_TRUNC is ignored by FIFOs and devices and empties a regular file reached through /proc.
    fd_ = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_NOCTTY | O_CLOEXEC);
    if (fd_ < 0) return Fail(Errno(path, "cannot open for writing", errno));
    return Status::Ok();
  }
  // The mode asked for, else the replacement keeps the permission bits of the file it replaces;
  // else (-1) 0666 less the umask.
  struct stat old;
  if (mode < 0 && ::stat(target_.c_str(), &old) == 0) mode = static_cast<int>(old.st_mode & 07777);
  tmp_ = SiblingName(target_, "tmp");
  // Created 0600 when its mode is set below: nobody else can open it meanwhile.
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode < 0 ? 0666 : 0600);
  if (fd_ < 0) {
    const int err = errno;
    tmp_.clear();  // nothing was created
    return Fail(Errno(path, "cannot create a temporary file in folder " + DirOf(target_), err));
  }
  if (mode >= 0 && ::fchmod(fd_, static_cast<mode_t>(mode)) != 0)
    return Fail(Errno(path, "cannot set the mode of " + tmp_, errno));
  return Status::Ok();
}

Status DurableFile::Append(std::string_view data) {
  LLMQ_CHECK(opened_ && !committed_);
  if (!error_.ok()) return error_;
  if (buf_.size() + data.size() <= kBufferBytes) {
    buf_.append(data);
    return Status::Ok();
  }
  LLMQ_RETURN_IF_ERROR(Flush());
  if (data.size() < kBufferBytes) {
    buf_.append(data);
    return Status::Ok();
  }
  return WriteRaw(data);  // a large append goes straight through, uncopied
}

Status DurableFile::Flush() {
  LLMQ_RETURN_IF_ERROR(WriteRaw(buf_));
  buf_.clear();
  return Status::Ok();
}

Status DurableFile::WriteRaw(std::string_view data) {
  if (!error_.ok()) return error_;
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t w = ::write(fd_, data.data() + done, data.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int err = w < 0 ? errno : EIO;
      return Fail(Errno(path_, in_place_ ? "write failed" : "write to " + tmp_ + " failed", err));
    }
    done += static_cast<size_t>(w);
  }
  return Status::Ok();
}

Status DurableFile::Commit() {
  LLMQ_CHECK(opened_ && !committed_);
  if (!error_.ok()) return error_;
  LLMQ_RETURN_IF_ERROR(Flush());
  if (in_place_) {
    // FIFOs and devices cannot be fsynced (EINVAL) and are not replaced: flushing is all.
    const bool owned = owns_fd_;
    const int fd = fd_;
    fd_ = -1;
    if (owned && ::close(fd) != 0) return Fail(Errno(path_, "close failed", errno));
    committed_ = true;
    return Status::Ok();
  }
  if (::fsync(fd_) != 0) return Fail(Errno(path_, "fsync of " + tmp_ + " failed", errno));
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return Fail(Errno(path_, "close of " + tmp_ + " failed", errno));
  if (::rename(tmp_.c_str(), target_.c_str()) != 0)
    return Fail(Errno(path_, "cannot rename " + tmp_ + " over " + target_, errno));
  tmp_.clear();
  committed_ = true;
  // The rename is durable only once the folder's entry is on disk.
  const std::string dir = DirOf(target_);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return Fail(Errno(path_, "cannot open folder " + dir + " to fsync it", errno));
  const bool synced = ::fsync(dfd) == 0;
  const int err = errno;
  ::close(dfd);
  if (!synced) return Fail(Errno(path_, "fsync of folder " + dir + " failed", err));
  return Status::Ok();
}

Status WriteFileDurably(const std::string& path, std::string_view content, int mode) {
  DurableFile f;
  LLMQ_RETURN_IF_ERROR(f.Open(path, mode));
  LLMQ_RETURN_IF_ERROR(f.Append(content));
  return f.Commit();
}

Status CheckWritable(const std::string& path) {
  Kind kind;
  std::string target;
  LLMQ_RETURN_IF_ERROR(Classify(path, &kind, &target));
  if (kind == Kind::kStdout) return Status::Ok();
  if (kind == Kind::kInPlace) {
    struct stat st;
    if (::stat(path.c_str(), &st) == 0 && S_ISFIFO(st.st_mode)) {
      // Opening a FIFO for writing waits for a reader (or fails with ENXIO when non-blocking).
      if (::access(path.c_str(), W_OK) != 0) return Errno(path, "cannot write", errno);
      return Status::Ok();
    }
    // No O_TRUNC: checking must not change anything.
    const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) return Errno(path, "cannot open for writing", errno);
    ::close(fd);
    return Status::Ok();
  }
  const std::string dir = DirOf(target);
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return Errno(path, "folder " + dir, errno);
  if (!S_ISDIR(st.st_mode)) return Errno(path, "folder " + dir, ENOTDIR);
  const std::string probe = SiblingName(target, "probe");
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return Errno(path, "cannot create a file in folder " + dir, errno);
  ::close(fd);
  ::unlink(probe.c_str());
  return Status::Ok();
}

bool SameFile(const std::string& a, const std::string& b) {
  if (a == b) return true;
  struct stat sa, sb;
  if (::stat(a.c_str(), &sa) != 0 || ::stat(b.c_str(), &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

}  // namespace llmq
