// UntrustedFile: a file at a path that someone else may create, replace or swap at any moment (a
// job file in the spool's inbox/, which every member of the llmq group can write; a config file
// read again on SIGHUP), opened ONCE and then read only through that descriptor. This is the one
// way llmq opens such a path:
//   openat(dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)
//     - a symbolic link is refused, never followed (one swapped in for /dev/zero or for a secret
//       file between a check and the open cannot be read through);
//     - a FIFO or a device opens without waiting for a writer (O_NONBLOCK) and is refused by the
//       fstat below; a file under another process's lease fails at once (EWOULDBLOCK) instead of
//       waiting for the lease to break;
//   fstat on the descriptor: a regular file, at most `max_bytes` long, checked before any byte is
//   read (memory and time stay bounded whatever the file claims to be).
// Every later step (validation, hashing, parsing) reads the descriptor with pread, never past the
// size seen at open, so a file appended to meanwhile cannot grow memory or change what one pass
// saw against another; Unchanged() and IsAt() tell the caller whether the file changed or was
// replaced since it was opened.
//
// Thread-safety: the reads are pread(2) calls: several threads may read one UntrustedFile.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <istream>
#include <memory>
#include <string>

#include "base/status.h"

namespace llmq {

class UntrustedFile {
 public:
  UntrustedFile() = default;
  UntrustedFile(UntrustedFile&& o) noexcept;
  UntrustedFile& operator=(UntrustedFile&& o) noexcept;
  UntrustedFile(const UntrustedFile&) = delete;
  UntrustedFile& operator=(const UntrustedFile&) = delete;
  ~UntrustedFile();

  // Opens `name` in the folder open as `dir_fd` (AT_FDCWD: `name` is a path). `shown` names the
  // file in messages (escaped there: it may hold any byte); `limit` names `max_bytes` in them
  // (e.g. "spool.max_file_bytes"). Errors, each message "<shown>: <why>":
  //   NotFound         it is gone (ENOENT): nothing to do
  //   InvalidArgument  it can never be read as a job or config file: a symbolic link, a FIFO,
  //                    socket, device or folder, over `max_bytes`, or not readable (EACCES)
  //   IoError          anything else (EWOULDBLOCK: a lease; EMFILE, EIO): try again later
  [[nodiscard]] static Status Open(int dir_fd, const std::string& name, const std::string& shown,
                                   int64_t max_bytes, const std::string& limit, UntrustedFile* out);

  bool is_open() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  int64_t size() const { return size_; }  // at Open
  dev_t device() const { return dev_; }
  ino_t inode() const { return ino_; }
  const std::string& shown() const { return shown_; }  // as given to Open (not escaped)

  // A stream over bytes [0, size()) of the file, read with pread in 1 MiB blocks; each call gives
  // an independent stream (several passes, several threads). A read error sets badbit.
  std::unique_ptr<std::istream> Stream() const;
  // All size() bytes. IoError naming the file when a read fails or the file got shorter.
  [[nodiscard]] Status ReadAll(std::string* out) const;
  // OK while the file's size, modification and change times are those seen at Open and it still
  // has a name; else IoError "<shown>: changed while it was being read (...)" or "<shown>: was
  // removed or replaced while it was being read".
  [[nodiscard]] Status Unchanged() const;
  // Whether `name` in `dir_fd` is still this file (same device and inode; a link is not followed).
  bool IsAt(int dir_fd, const std::string& name) const;

 private:
  void Close();
  int fd_ = -1;
  int64_t size_ = 0;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
  int64_t mtime_ns_ = 0, ctime_ns_ = 0;
  std::string shown_;
};

}  // namespace llmq
