// The inbox watcher's decisions: which files of inbox/ have settled (may be accepted now), which
// are refused, and when to look again. Pure logic over what the watcher saw (inotify events and
// listings) at the time the caller gives: no clock, no file system (the one probe it needs, "is
// this file still open for writing", is injected), so every rule is tested directly
// (tests/inbox_settle_test.cpp). The Server (cli_serve.cpp) does the I/O: it lists and stats
// inbox/, reads inotify, calls Scan, refuses and hands the accepted files to the Intake, and arms
// a timer at Decision::next.
//
// How long a file must stay unchanged depends on how it arrived:
//  - renamed in (IN_MOVED_TO, the Maildir way): it is complete, and waits only the group window;
//  - closed after writing in place (IN_CLOSE_WRITE), or present at start-up or after an inotify
//    overflow (`all_announced`): the settle time;
//  - found only by a rescan (nobody announced it): a rescan period at least, since it may still
//    be being written;
//  - changed after its rename, or still open for writing when due: back under the settle time.
// Files that settle close together are accepted together (one ingest plans them as one window,
// so files dropped together that share a system prompt run back to back): a settled file waits
// for the announced files still settling that are due within its own wait of its due time. The
// horizon is anchored at the settled files, so a steady stream of drops never holds a file longer
// than twice its wait.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace llmq {

class InboxSettler {
 public:
  using Clock = std::chrono::steady_clock;

  // spool.settle_seconds, spool.rescan_seconds, spool.group_window_ms (reloadable).
  struct Knobs {
    double settle_seconds = 1;
    double rescan_seconds = 30;
    int group_window_ms = 50;
    // A renamed-in file's wait: the group window, never longer than a file written in place.
    double group_seconds() const;
  };

  enum class Kind { kRegular, kSymlink, kFolder, kFifo, kSocket, kDevice };
  // One entry of a listing of inbox/ (lstat: links are not followed).
  struct Entry {
    std::string name;
    Kind kind = Kind::kRegular;
    int64_t size = 0;
    int64_t mtime_ns = 0;
  };

  struct Decision {
    std::vector<std::pair<std::string, std::string>> refuse;  // (name, reason): to failed/
    std::vector<std::string> accept;        // settled: for the Intake, all in one call
    std::optional<Clock::time_point> next;  // look again then (files still settling)
  };

  // Whether another process still holds inbox/<name> open for writing (unknown: false).
  using OpenForWriting = std::function<bool(const std::string& name)>;

  InboxSettler(const Knobs& knobs, OpenForWriting open_for_writing)
      : knobs_(knobs), open_for_writing_(std::move(open_for_writing)) {}

  void SetKnobs(const Knobs& knobs) { knobs_ = knobs; }
  const Knobs& knobs() const { return knobs_; }

  // inotify: inbox/<name> was renamed in (IN_MOVED_TO) / closed after writing (IN_CLOSE_WRITE).
  // Names spool::Ignored passes over are ignored here too.
  void OnRenamedIn(const std::string& name);
  void OnClosedAfterWrite(const std::string& name);

  // Looks at a listing of inbox/ taken at `now` (names spool::Ignored passes over and names in
  // `skip`, the ones the Intake holds, are passed over). `all_announced`: every file counts as
  // announced (start-up, an inotify overflow). `can_accept`: false while the Intake is busy; the
  // settled files then wait for the next scan. Files no longer listed are forgotten. A refused
  // name is forgotten too (it is the caller's to move).
  Decision Scan(Clock::time_point now, const std::vector<Entry>& listing, bool all_announced,
                const std::set<std::string>& skip, bool can_accept);

  // The Intake is done with `name` (accepted, refused, gone, or to settle again as new).
  void Forget(const std::string& name) { candidates_.erase(name); }
  void Clear() { candidates_.clear(); }
  size_t num_watched() const { return candidates_.size(); }

 private:
  // A regular file seen in inbox/, waiting to settle.
  struct Candidate {
    int64_t size = -1;  // -1: not looked at since it was announced
    int64_t mtime_ns = -1;
    Clock::time_point since;  // when (size, mtime) last changed
    bool announced = false;   // closed after writing / renamed in (or all_announced)
    // Renamed in, and unchanged since the first look after the rename.
    bool renamed = false;
  };

  Knobs knobs_;
  OpenForWriting open_for_writing_;
  std::map<std::string, Candidate> candidates_;
};

// A file of inbox/ written in place and taken soon after a file of the same name was taken: the
// common mistake of appending to a file in inbox/ (`echo line >> inbox/x.jsonl`), which splits it
// into one job per piece that settled. WrittenInPlace() records each close after writing in place
// (IN_CLOSE_WRITE); Taken() each accepted file, returning the warning to log when it is such a
// piece (the first piece of a name taken within `within` after another), else "".
class SplitFiles {
 public:
  using Clock = InboxSettler::Clock;
  explicit SplitFiles(Clock::duration within) : within_(within) {}
  void WrittenInPlace(const std::string& name, Clock::time_point at) { written_[name] = at; }
  std::string Taken(const std::string& name, const std::string& job, Clock::time_point at);

 private:
  struct Take {
    std::string job;
    Clock::time_point at;
  };
  Clock::duration within_;
  std::map<std::string, Take> taken_;
  std::map<std::string, Clock::time_point> written_;
};

// What one read of the inotify descriptor said about inbox/.
struct InboxEvents {
  bool overflow = false;  // IN_Q_OVERFLOW: events were lost, rescan all (all_announced)
  bool gone = false;      // IN_IGNORED: the watch ended (inbox/ removed or replaced)
  struct Event {
    std::string name;
    bool renamed_in = false;  // IN_MOVED_TO; else IN_CLOSE_WRITE
  };
  std::vector<Event> events;  // in the order they came (names spool::Ignored passes over too)
};
// Parses `n` bytes of struct inotify_event records (as read(2) returns them).
InboxEvents ParseInboxEvents(const char* data, size_t n);
// Hands each event of `e` to the settler, in order.
void Announce(const InboxEvents& e, InboxSettler* settler);

// The reason a file of `kind` is refused (anything but a regular file).
std::string NotARegularFileReason(InboxSettler::Kind kind);

}  // namespace llmq
