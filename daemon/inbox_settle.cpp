#include "daemon/inbox_settle.h"

#include <sys/inotify.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "base/text.h"

#include "daemon/spool.h"

namespace llmq {
namespace {

std::chrono::nanoseconds Secs(double s) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(s));
}

}  // namespace

double InboxSettler::Knobs::group_seconds() const {
  return std::min(group_window_ms / 1000.0, settle_seconds);
}

void InboxSettler::OnRenamedIn(const std::string& name) {
  if (spool::Ignored(name)) return;
  Candidate& c = candidates_[name];
  c.announced = true;
  c.renamed = true;
  c.size = -1;  // a new file under this name: its first look starts the window
}

void InboxSettler::OnClosedAfterWrite(const std::string& name) {
  if (spool::Ignored(name)) return;
  Candidate& c = candidates_[name];
  c.announced = true;
  c.renamed = false;  // written in place (after a rename too): the settle time
}

InboxSettler::Decision InboxSettler::Scan(Clock::time_point now, const std::vector<Entry>& listing,
                                          bool all_announced, const std::set<std::string>& skip,
                                          bool can_accept) {
  Decision d;
  std::set<std::string> present;
  std::vector<std::string> ready;
  Clock::time_point next = Clock::time_point::max();
  // Files settling due up to here are waited for by those of `ready` (see the header).
  Clock::time_point horizon = Clock::time_point::max();
  std::vector<Clock::time_point> settling;  // when announced files not yet settled are due
  for (const Entry& e : listing) {
    if (spool::Ignored(e.name)) continue;
    present.insert(e.name);
    if (skip.count(e.name)) continue;  // the Intake has it
    if (std::string why = spool::NameProblem(e.name); !why.empty()) {
      d.refuse.emplace_back(e.name, why);
      candidates_.erase(e.name);
      continue;
    }
    if (e.kind != Kind::kRegular) {
      d.refuse.emplace_back(e.name, NotARegularFileReason(e.kind));
      candidates_.erase(e.name);
      continue;
    }
    Candidate& c = candidates_[e.name];
    if (all_announced) c.announced = true;
    if (c.size != e.size || c.mtime_ns != e.mtime_ns) {
      if (c.size >= 0) c.renamed = false;  // changed after the rename: written in place
      c.size = e.size;
      c.mtime_ns = e.mtime_ns;
      c.since = now;
    }
    const double need = c.renamed     ? knobs_.group_seconds()
                        : c.announced ? knobs_.settle_seconds
                                      : std::max(knobs_.settle_seconds, knobs_.rescan_seconds);
    const auto due = c.since + Secs(need);
    if (due > now) {
      next = std::min(next, due);
      if (c.announced) settling.push_back(due);
    } else if (open_for_writing_ && open_for_writing_(e.name)) {
      c.since = now;  // still open for writing: look again (its close is announced too)
      c.renamed = false;
      next = std::min(next, now + Secs(std::max(knobs_.settle_seconds, 0.25)));
    } else {
      ready.push_back(e.name);
      // A settled file waits at most its own kind's wait for the files settling with it.
      horizon =
          std::min(horizon, due + Secs(c.renamed ? knobs_.group_seconds() : knobs_.settle_seconds));
    }
  }
  for (auto it = candidates_.begin(); it != candidates_.end();)
    it = present.count(it->first) ? std::next(it) : candidates_.erase(it);
  if (!ready.empty() && can_accept &&
      std::none_of(settling.begin(), settling.end(), [&](auto due) { return due <= horizon; }))
    d.accept = std::move(ready);
  if (next != Clock::time_point::max()) d.next = next;
  return d;
}

std::string SplitFiles::Taken(const std::string& name, const std::string& job,
                              Clock::time_point at) {
  // Forget what is too old to matter.
  for (auto it = taken_.begin(); it != taken_.end();)
    it = at - it->second.at > within_ ? taken_.erase(it) : std::next(it);
  for (auto it = written_.begin(); it != written_.end();)
    it = at - it->second > within_ ? written_.erase(it) : std::next(it);
  std::string warning;
  auto before = taken_.find(name);
  if (before != taken_.end() && written_.count(name)) {
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.1f",
                  std::chrono::duration<double>(at - before->second.at).count());
    warning = "inbox/" + Escaped(name) + " taken as " + job + " " + secs +
              " s after a file of that name was taken as " + before->second.job +
              ": a file appended to in inbox/ is split into one job per piece that settled (each "
              "runs on its own, its results under its own name); write the whole file "
              "elsewhere, then rename it into inbox/";
  }
  taken_[name] = Take{job, at};
  return warning;
}

InboxEvents ParseInboxEvents(const char* data, size_t n) {
  InboxEvents out;
  for (size_t off = 0; off + sizeof(inotify_event) <= n;) {
    inotify_event e;
    std::memcpy(&e, data + off, sizeof e);
    if (e.mask & IN_Q_OVERFLOW) out.overflow = true;
    if (e.mask & IN_IGNORED) out.gone = true;
    if (e.len > 0 && off + sizeof e + e.len <= n) {
      const char* name = data + off + sizeof e;
      const std::string s(name, strnlen(name, e.len));  // NUL-padded to e.len
      if (e.mask & IN_MOVED_TO)
        out.events.push_back({s, true});
      else if (e.mask & IN_CLOSE_WRITE)
        out.events.push_back({s, false});
    }
    off += sizeof e + e.len;
  }
  return out;
}

void Announce(const InboxEvents& e, InboxSettler* settler) {
  for (const InboxEvents::Event& ev : e.events) {
    if (ev.renamed_in)
      settler->OnRenamedIn(ev.name);
    else
      settler->OnClosedAfterWrite(ev.name);
  }
}

std::string NotARegularFileReason(InboxSettler::Kind kind) {
  using K = InboxSettler::Kind;
  const char* what = kind == K::kSymlink  ? "a symbolic link"
                     : kind == K::kFolder ? "a folder"
                     : kind == K::kFifo   ? "a FIFO"
                     : kind == K::kSocket ? "a socket"
                                          : "a device";
  return std::string("it is ") + what +
         ", not a regular file: drop job files as regular files (write, then rename into inbox/)";
}

}  // namespace llmq
