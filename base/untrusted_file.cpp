#include "base/untrusted_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <streambuf>
#include <vector>

#include "base/text.h"

namespace llmq {
namespace {

int64_t Nanos(const struct timespec& t) {
  return int64_t{t.tv_sec} * 1000000000 + t.tv_nsec;
}

std::string Kind(mode_t m) {
  return S_ISLNK(m)    ? "a symbolic link"
         : S_ISDIR(m)  ? "a folder"
         : S_ISFIFO(m) ? "a FIFO"
         : S_ISSOCK(m) ? "a socket"
         : S_ISCHR(m)  ? "a character device"
         : S_ISBLK(m)  ? "a block device"
                       : "not a regular file";
}

// Reads [0, limit) of a descriptor with pread: the descriptor's offset is never used, so streams
// over one file are independent.
class PreadBuf : public std::streambuf {
 public:
  PreadBuf(int fd, int64_t limit) : fd_(fd), limit_(limit), buf_(size_t{1} << 20) {}

 protected:
  int_type underflow() override {
    if (gptr() < egptr()) return traits_type::to_int_type(*gptr());
    if (pos_ >= limit_) return traits_type::eof();
    const size_t want = static_cast<size_t>(std::min<int64_t>(buf_.size(), limit_ - pos_));
    ssize_t n;
    do n = ::pread(fd_, buf_.data(), want, pos_);
    while (n < 0 && errno == EINTR);
    // The istream's read catches it and sets badbit (Stream() turns its exceptions off).
    if (n < 0) throw std::ios_base::failure("pread failed");  // caught in std::istream
    if (n == 0) return traits_type::eof();                    // shorter than at open
    pos_ += n;
    setg(buf_.data(), buf_.data(), buf_.data() + n);
    return traits_type::to_int_type(*gptr());
  }

 private:
  int fd_;
  int64_t limit_, pos_ = 0;
  std::vector<char> buf_;
};

class PreadStream : public std::istream {
 public:
  PreadStream(int fd, int64_t limit) : std::istream(nullptr), buf_(fd, limit) { rdbuf(&buf_); }

 private:
  PreadBuf buf_;
};

}  // namespace

UntrustedFile::UntrustedFile(UntrustedFile&& o) noexcept {
  *this = std::move(o);
}

UntrustedFile& UntrustedFile::operator=(UntrustedFile&& o) noexcept {
  if (this != &o) {
    Close();
    fd_ = std::exchange(o.fd_, -1);
    size_ = o.size_;
    dev_ = o.dev_;
    ino_ = o.ino_;
    mtime_ns_ = o.mtime_ns_;
    ctime_ns_ = o.ctime_ns_;
    shown_ = std::move(o.shown_);
  }
  return *this;
}

UntrustedFile::~UntrustedFile() {
  Close();
}

void UntrustedFile::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Status UntrustedFile::Open(int dir_fd, const std::string& name, const std::string& shown,
                           int64_t max_bytes, const std::string& limit, UntrustedFile* out) {
  const std::string where = Escaped(shown) + ": ";
  int fd;
  do fd = ::openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return Status::NotFound(where + "it is gone");
    if (err == ELOOP || err == EMLINK)  // O_NOFOLLOW on a symbolic link
      return Status::InvalidArgument(where + "it is a symbolic link, not a regular file");
    if (err == ENXIO || err == ENODEV)  // a socket, or a device without a driver
      return Status::InvalidArgument(where + "it is a socket or a device, not a regular file");
    if (err == EACCES || err == EPERM || err == ENOTDIR)
      return Status::InvalidArgument(where + "cannot open it: " + std::strerror(err));
    return Status::IoError(where + "cannot open it now: " + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return Status::IoError(where + "fstat failed: " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::InvalidArgument(where + "it is " + Kind(st.st_mode) + ", not a regular file");
  }
  if (st.st_size > max_bytes) {
    ::close(fd);
    return Status::InvalidArgument(where + "it is " + std::to_string(st.st_size) + " bytes, over " +
                                   limit + " (" + std::to_string(max_bytes) + ")");
  }
  UntrustedFile f;
  f.fd_ = fd;
  f.size_ = st.st_size;
  f.dev_ = st.st_dev;
  f.ino_ = st.st_ino;
  f.mtime_ns_ = Nanos(st.st_mtim);
  f.ctime_ns_ = Nanos(st.st_ctim);
  f.shown_ = shown;
  *out = std::move(f);
  return Status::Ok();
}

std::unique_ptr<std::istream> UntrustedFile::Stream() const {
  auto s = std::make_unique<PreadStream>(fd_, size_);
  s->exceptions(std::ios::goodbit);
  return s;
}

Status UntrustedFile::ReadAll(std::string* out) const {
  out->resize(static_cast<size_t>(size_));
  for (int64_t at = 0; at < size_;) {
    const ssize_t n = ::pread(fd_, out->data() + at, static_cast<size_t>(size_ - at), at);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::IoError(Escaped(shown_) + ": read failed: " + std::strerror(errno));
    if (n == 0) return Status::IoError(Escaped(shown_) + ": it got shorter while being read");
    at += n;
  }
  return Status::Ok();
}

Status UntrustedFile::Unchanged() const {
  struct stat st {};
  if (::fstat(fd_, &st) != 0)
    return Status::IoError(Escaped(shown_) + ": fstat failed: " + std::strerror(errno));
  if (st.st_nlink == 0)
    return Status::IoError(Escaped(shown_) + ": was removed or replaced while it was being read");
  if (st.st_size != size_ || Nanos(st.st_mtim) != mtime_ns_ || Nanos(st.st_ctim) != ctime_ns_)
    return Status::IoError(Escaped(shown_) + ": changed while it was being read (" +
                           std::to_string(size_) + " bytes when opened, " +
                           std::to_string(st.st_size) + " now)");
  return Status::Ok();
}

bool UntrustedFile::IsAt(int dir_fd, const std::string& name) const {
  struct stat st {};
  return ::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_dev == dev_ &&
         st.st_ino == ino_;
}

}  // namespace llmq
