// Durable writes: the one helper every writer of a result, a model file or a state file uses.
// A reader sees the old content or the new, never a part: the data goes to a temporary file in the
// target's folder (".<name>.tmp-<pid>-<n>", <name> cut to keep it a valid file name: dotfiles and
// *.tmp are ignored by the spool), is
// fsynced, renamed over the target, and the folder is fsynced. A replaced file keeps its
// permission bits and a new one gets 0666 less the umask, unless the writer asks for a mode
// (Open's `mode`: then the file has exactly that mode, whatever the umask and the file replaced).
// The temporary file is created 0600 when it will not get the umask's mode, so nobody can open it
// before it has its final mode.
// Targets that are not regular files are written in place, never replaced by a rename:
//   "-" (standard output), an existing FIFO, socket, character or block device (/dev/stdout,
//   /dev/null), and anything under /dev/ or /proc/.
// A symlink to a regular file (or a dangling one): the file it points to is replaced, the link
// stays.
// Every error names the target path, what failed and why (strerror).
//
// Thread-safety: a DurableFile is used by one thread at a time; distinct objects are independent
// (temporary names are unique per process and object).
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"

namespace llmq {

class DurableFile {
 public:
  DurableFile() = default;
  DurableFile(const DurableFile&) = delete;
  DurableFile& operator=(const DurableFile&) = delete;
  ~DurableFile();  // not committed: the temporary file is removed, the target untouched

  // Open's default mode: a replaced file keeps its permission bits, a new one gets 0666 less the
  // umask.
  static constexpr int kUmaskMode = -1;

  // Starts writing `path` (temporary file created now, so an unwritable folder fails here).
  // A folder as target is refused. Called once per object. `mode` (e.g. 0640), when given, is
  // the file's permission bits, whatever the umask; a target written in place (standard output,
  // a FIFO, a device) is left as it is.
  Status Open(const std::string& path, int mode = kUmaskMode);
  // Appends (buffered; large appends go straight through). After any error the object is dead:
  // its temporary file is gone and every later call returns that first error again.
  Status Append(std::string_view data);
  // Flushes, fsyncs, renames over the target and fsyncs its folder (in place: flushes only).
  // Called at most once, after a successful Open.
  Status Commit();
  bool in_place() const { return in_place_; }
  const std::string& path() const { return path_; }

 private:
  Status Flush();                          // writes and empties buf_
  Status WriteRaw(std::string_view data);  // all of `data` to fd_, retrying short writes
  Status Fail(Status s);  // records the first error, closes and removes the temporary file
  void CloseFd();
  std::string path_;    // as given
  std::string target_;  // the file the rename replaces (symlinks resolved); in place: path_
  std::string tmp_;     // the temporary file; empty in place, or once renamed or removed
  std::string buf_;
  Status error_;  // the first error; once set the object is dead
  int fd_ = -1;
  bool owns_fd_ = false;  // false for "-" (standard output is never closed)
  bool in_place_ = false;
  bool opened_ = false;
  bool committed_ = false;
};

// The whole file at once through DurableFile (`mode`: as DurableFile::Open's).
Status WriteFileDurably(const std::string& path, std::string_view content,
                        int mode = DurableFile::kUmaskMode);

// Checks, before any work is done, that `path` can be written as DurableFile would: its folder
// exists, is a folder and takes a new file (a probe file is created and removed); the path is not
// a folder; an in-place target can be opened for writing (a FIFO: write permission only, since
// opening it would wait for a reader). Errors name the path and the reason.
Status CheckWritable(const std::string& path);

// True when `a` and `b` name the same existing file (same device and inode), or are equal.
bool SameFile(const std::string& a, const std::string& b);

}  // namespace llmq
