// llmq serve: the daemon. One Boost.Asio io_context on the main thread runs the inbox watcher
// (inotify, plus a full rescan at start-up, on overflow and on a timer), the queue poll
// (PRAGMA data_version: `llmq submit` and `llmq cancel` from other processes), signals and timers,
// accepts files (IngestFiles for all the files of one scan, then a move to archive/), cancels and
// finalizes jobs. The engine steps on its own thread (JobRunner::Serve); results are committed on
// the ResultCommitter's thread. Each thread has its own Store connection.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

// <utility> first: Boost 1.74's asio/awaitable.hpp uses std::exchange without including it.
#include <utility>

#include <boost/asio.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <thread>

#include "base/durable_file.h"
#include "base/json.h"
#include "base/log.h"
#include "base/text.h"
#include "base/untrusted_file.h"
#include "base/wall_clock.h"
#include "config/knobs.h"
#include "config/run_windows.h"
#include "daemon/cli_common.h"
#include "daemon/commands.h"
#include "daemon/inbox_settle.h"
#include "daemon/ingest.h"
#include "daemon/intake.h"
#include "daemon/job_lifecycle.h"
#include "daemon/job_runner.h"
#include "daemon/metrics.h"
#include "daemon/metrics_http.h"
#include "daemon/notifier.h"
#include "daemon/queue_status.h"
#include "daemon/spool.h"
#include "daemon/status_page.h"
#include "daemon/watchdog.h"
#include "daemon/worker.h"
#include "engine/backends/compute_resources.h"
#include "jobs/finalizer.h"

namespace llmq::cli {
namespace {

namespace fs = std::filesystem;
namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

struct ServeFlags {
  EngineFlags engine;
  std::string state;
  std::vector<std::string> served_names;  // --served-model-name (else model.served_names)
};

// The keys SIGHUP reloads.
struct Reloadable {
  double settle_seconds = 1, rescan_seconds = 30, drain_seconds = 30;
  int group_window_ms = 50, commit_interval_ms = 50;
  int64_t max_file_bytes = int64_t{1} << 30;
  int64_t max_line_bytes = int64_t{16} << 20;
  static Reloadable From(const LlmqConfig& c) {
    return {c.settle_seconds,     c.rescan_seconds, c.drain_seconds, c.group_window_ms,
            c.commit_interval_ms, c.max_file_bytes, c.max_line_bytes};
  }
  InboxSettler::Knobs settle() const { return {settle_seconds, rescan_seconds, group_window_ms}; }
  std::string ToText() const {
    char b[256];
    std::snprintf(b, sizeof b,
                  "settle %gs, group window %dms, rescan %gs, drain %gs, commit interval %dms, "
                  "max file %lld bytes, max line %lld bytes",
                  settle_seconds, group_window_ms, rescan_seconds, drain_seconds,
                  commit_interval_ms, static_cast<long long>(max_file_bytes),
                  static_cast<long long>(max_line_bytes));
    return b;
  }
};

// Whether another process still has `path` open for writing: a read lease cannot be taken then
// (fcntl F_SETLEASE: EAGAIN). A writer that pauses longer than the settle time (or, unannounced,
// a rescan period) must not have its half-written file taken. Unknown (false) where leases are
// not permitted (a file of another user without CAP_LEASE, NFS): the settle time decides there.
// The lease is dropped at once; SIGIO (a lease break) is ignored by the daemon.
bool OpenForWriting(int dir_fd, const std::string& name) {
  const int fd = ::openat(dir_fd, name.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return false;
  const bool busy = ::fcntl(fd, F_SETLEASE, F_RDLCK) != 0 && errno == EAGAIN;
  if (!busy) ::fcntl(fd, F_SETLEASE, F_UNLCK);
  ::close(fd);
  return busy;
}

// Removes a file when it goes out of scope (serve.json: no daemon runs here any more).
class RemovedOnReturn {
 public:
  explicit RemovedOnReturn(std::string path) : path_(std::move(path)) {}
  ~RemovedOnReturn() {
    std::error_code ec;
    fs::remove(path_, ec);
  }
  RemovedOnReturn(const RemovedOnReturn&) = delete;
  RemovedOnReturn& operator=(const RemovedOnReturn&) = delete;

 private:
  std::string path_;
};

std::chrono::nanoseconds Secs(double s) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(s));
}

class Server {
 public:
  Server(const CLI::App* cmd, const ServeFlags& f)
      : cmd_(cmd),
        f_(f),
        inotify_(io_),
        poll_timer_(io_),
        rescan_timer_(io_),
        settle_timer_(io_),
        drain_timer_(io_),
        notify_timer_(io_),
        watchdog_timer_(io_),
        metrics_timer_(io_),
        window_timer_(io_),
        window_drain_timer_(io_),
        beat_timer_(io_),
        signals_(io_, SIGINT, SIGTERM, SIGHUP) {}

  int Main() {
    if (Status st = ResolveEngineConfig(f_.engine, &cfg_); !st.ok())
      return Fail(cmd_, st, st.code() == Status::Code::kInvalidArgument ? 2 : 1);
    if (Status st = FindConfig(f_.engine.config, &config_path_); !st.ok()) return Fail(cmd_, st);
    // The file as it was at start (before flags): a reload names the keys changed since that it
    // cannot apply.
    if (!config_path_.empty())
      if (Status st = LoadConfig(config_path_, &file_cfg_); !st.ok()) return Fail(cmd_, st);
    if (!f_.state.empty()) cfg_.state_dir = f_.state;
    if (!f_.served_names.empty()) cfg_.served_names = f_.served_names;
    knobs_ = Reloadable::From(cfg_);
    settler_.SetKnobs(knobs_.settle());
    windows_ = cfg_.run_windows;  // serve.run_windows (checked by the config's loader)
    paths_ = spool::PathsFor(cfg_.state_dir);
    if (Status st = spool::EnsureLayout(paths_); !st.ok()) return Fail(cmd_, st);
    if (Status st = OpenInbox(); !st.ok()) return Fail(cmd_, st);
    if (Status st = Lock(); !st.ok()) return Fail(cmd_, st);
    // serve.json goes with the spool's owner, however Main returns (a failed start-up too).
    std::optional<RemovedOnReturn> serve_state;
    if (spool_owner_) serve_state.emplace(paths_.serve_state);
    PublishState();  // for llmq status: the run windows in effect
    // The queue before the model: a damaged database is refused at once, naming the file.
    // The first connection checks the whole file; the others skip that second read.
    for (std::unique_ptr<jobs::Store>* s :
         {&io_store_, &intake_store_, &runner_store_, &commit_store_}) {
      const auto check =
          s == &io_store_ ? jobs::Store::Check::kIntegrity : jobs::Store::Check::kSkip;
      if (Status st = jobs::Store::Open(spool::QueueLocation(paths_, cfg_.queue_url), s, check);
          !st.ok())
        return Fail(cmd_, st);
    }
    // Only ingest (intake_store_) gains from a big page cache; the others page through the
    // queue.
    for (jobs::Store* s : {io_store_.get(), runner_store_.get(), commit_store_.get()})
      if (Status st = s->SetCacheBytes(int64_t{8} << 20); !st.ok()) return Fail(cmd_, st);
    // A kill -9 while finalizing or refusing leaves the temporary of the file being written. The
    // spool's owner sweeps them; so does the worker that takes the spool over, and whoever
    // finalizes a job (JobLifecycle::Finalize), for a worker that is not the owner.
    if (spool_owner_) RemoveStaleTemporaries();

    // Every start-up check that needs no model comes before the model loads (a port in use is
    // refused at once, not after a minute of loading).
    if (Status st = OpenMetricsHttp(); !st.ok()) return Fail(cmd_, st);
    {
      // sd_notify: a load longer than TimeoutStartSec= is not ended while it makes progress.
      TimeoutExtender extend(&notifier_, kExtendBy);
      TestSlowLoad();  // TEST ONLY (LLMQ_TEST_SLOW_LOAD_MS)
      if (Status st = LoadServing(cfg_, &model_, &engine_, &ctx_); !st.ok()) return Fail(cmd_, st);
    }
    intake_ = std::make_unique<Intake>(paths_, intake_store_.get(), ctx_);
    // Every llmq serve is a worker on its queue (daemon/worker.h): it claims its work under
    // leases, so any number may share one queue (one state folder, or a PostgreSQL server).
    {
      jobs::WorkerInfo me;
      if (Status st = TakeWorkerSlot(paths_.root, &slot_fd_, &me.id); !st.ok())
        return Fail(cmd_, st);
      me.model = cfg_.model_dir;
      me.served_models = cfg_.served_names;
      me.device = model_.backend_description();
      presence_ = std::make_unique<WorkerPresence>(io_store_.get(), me, cfg_.lease_seconds);
      int64_t released = 0;
      if (Status st = presence_->Register(&released); !st.ok()) return Fail(cmd_, st);
      if (released > 0)
        Log("worker %s: %lld request(s) its last run held are claimable again",
            presence_->id().c_str(), static_cast<long long>(released));
    }

    if (Status st = io_store_->DataVersion(&data_version_); !st.ok()) return Fail(cmd_, st);
    jobs::ResultCommitter::Options copt;
    copt.interval = std::chrono::milliseconds(knobs_.commit_interval_ms);
    // A database locked by another process past the busy timeout (or a full disk) must not
    // drop results: the group is retried until it commits (they would otherwise stay pending
    // until a restart, the job never finishing).
    copt.retry_interval = std::chrono::milliseconds(500);
    copt.worker = presence_->id();  // results under leases, fenced
    committer_ = std::make_unique<jobs::ResultCommitter>(commit_store_.get(), copt);
    // sd_notify: the event loop pings the watchdog while the engine loop ticks (at every step, and
    // every quarter of the interval while idle): ArmWatchdog.
    RunnerOptions ropt;
    ropt.on_tick = [this] { OnEngineTick(); };
    ropt.on_output = [this](const RequestOutput& o) {  // metrics
      if (o.ok()) engine_metrics_.ObserveTtft(o.metrics.ttft_seconds);
    };
    ropt.tick_interval =
        std::chrono::duration_cast<std::chrono::milliseconds>(notifier_.watchdog_usec() / 4);
    ropt.worker = presence_->id();
    ropt.lease_seconds = presence_->lease_seconds();
    ropt.models = cfg_.served_names;
    // A claim is sized to what the engine runs at once, and the engine holds at most one claim's
    // worth waiting besides what it runs: the rest of the queue is left to the other workers (and
    // to this one's next claims), so that workers finish a job together.
    ropt.claim_max = std::max(1, std::min(engine_->max_num_seqs(), ropt.window));
    ropt.window = std::max(8, ropt.claim_max);
    runner_ = std::make_unique<JobRunner>(ctx_, engine_.get(), runner_store_.get(),
                                          committer_.get(), ropt);
    JobLifecycle::Hooks hooks;
    hooks.cancel_in_engine = [this](int64_t job) { runner_->CancelJob(job); };
    hooks.flush_results = [this] { return committer_->Flush(); };
    hooks.unix_now = UnixNow;
    hooks.finished_this_run = [this](int64_t job) { return runner_->FinishedOfJob(job); };
    hooks.claim_job = [this](int64_t job, bool* mine) { return presence_->ClaimJob(job, mine); };
    lifecycle_ = std::make_unique<JobLifecycle>(
        paths_.outbox, io_store_.get(),
        JobLifecycle::Facts{ctx_.model_name, model_.backend_description(), CpuThreads(),
                            cfg_.job_reports},
        std::move(hooks));

    ::signal(SIGIO, SIG_IGN);  // see OpenForWriting: a lease break must not end the daemon
    if (spool_owner_)
      if (Status st = StartWatcher(); !st.ok()) return Fail(cmd_, st);
    signals_.async_wait([this](auto ec, int sig) { OnSignal(ec, sig); });
    std::string serves;
    for (const std::string& n : cfg_.served_names) serves += (serves.empty() ? "" : ", ") + n;
    Log("serving %s (model %s, jobs naming %s; %s; %s; worker %s, leases of %gs%s)",
        paths_.root.c_str(), cfg_.model_dir.c_str(),
        serves.empty() ? "any model" : ("no model or " + serves).c_str(),
        DescribeEngine(cfg_, model_, *engine_).c_str(), knobs_.ToText().c_str(),
        presence_->id().c_str(), presence_->lease_seconds(),
        spool_owner_ ? ""
                     : "; another worker watches this folder's inbox: this one runs the queue "
                       "and takes the inbox over if that one stops");

    // Jobs left unfinished by an earlier run (finalizing, cancelling, complete) first.
    CheckJobs();
    if (spool_owner_) Scan(/*all_announced=*/true);
    ArmPoll();
    if (spool_owner_) ArmRescan();
    Beat();
    if (Status st = StartMetrics(); !st.ok()) return Fail(cmd_, st);
    notifier_.Ready();  // sd_notify
    ArmNotify();
    engine_tick_ = Clock::now().time_since_epoch().count();  // its thread starts below
    ArmWatchdog();
    CheckWindow(/*first=*/true);  // serve.run_windows
    engine_thread_ = std::thread([this, stall_ms = TestStallStepMs()]() mutable {
      engine_status_ = runner_->Serve([this, &stall_ms] {
        engine_metrics_.ObserveStep(runner_->progress().last_step_seconds);
        if (wall_clock::StepDriven()) HoldAtWindowEnd();
        // Out of work: the last results are committed and their jobs finalized at once.
        if (!engine_->HasWork()) asio::post(flusher_, [this] { FlushThenCheckJobs(); });
        if (stall_ms <= 0) return;  // TEST ONLY: see TestStallStepMs
        Log("TEST: the engine thread stalls for %d ms (LLMQ_TEST_STALL_STEP_MS)", stall_ms);
        std::this_thread::sleep_for(std::chrono::milliseconds(std::exchange(stall_ms, 0)));
      });
      asio::post(io_, [this] { OnEngineDone(); });
    });
    io_.run();
    if (engine_thread_.joinable()) engine_thread_.join();
    if (spool_owner_ && !serve_state) ::unlink(paths_.serve_state.c_str());  // taken over
    return exit_code_;
  }

 private:
  // --- Start-up.
  // One daemon per state folder: an flock on the folder itself, held until the process ends. (A
  // lock file could be removed from under a running daemon, and a second one would then lock a
  // new file and run the same queue: every request twice.)
  Status Lock() {
    lock_fd_ = ::open(paths_.root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (lock_fd_ < 0)
      return Status::IoError(paths_.root +
                             ": cannot open the state folder to lock it: " + std::strerror(errno));
    return TryLockSpool();
  }
  // The spool (inbox/ and serve.json) is one worker's: the one holding the folder's lock. The
  // others on the folder run the queue and finalize jobs into outbox/, and try the lock at every
  // poll, so that the inbox is watched again soon after its watcher stops.
  Status TryLockSpool() {
    if (::flock(lock_fd_, LOCK_EX | LOCK_NB) == 0) {
      spool_owner_ = true;
      return Status::Ok();
    }
    if (errno != EWOULDBLOCK)
      return Status::IoError(paths_.root +
                             ": cannot lock the state folder: " + std::strerror(errno));
    return Status::Ok();
  }
  // Removes the temporaries of files being written into outbox/ and failed/ by a process no
  // longer running (spool::RemoveStaleTemporaries).
  void RemoveStaleTemporaries() {
    for (const std::string* d : {&paths_.outbox, &paths_.failed})
      if (const int n = spool::RemoveStaleTemporaries(*d); n > 0)
        Log("%s: removed %d temporary file(s) left by an interrupted write", d->c_str(), n);
  }
  // Another worker's lock went (it stopped): this one watches the inbox from now on.
  void TakeOverSpool() {
    if (Status st = TryLockSpool(); !st.ok() || !spool_owner_) return;
    Log("the worker that watched %s stopped: this one (%s) watches it from now on",
        Escaped(paths_.inbox).c_str(), presence_->id().c_str());
    PublishState();
    RemoveStaleTemporaries();  // the worker that held the spool may have been killed mid-write
    Status st = spool::EnsureLayout(paths_);
    if (st.ok()) st = OpenInbox();
    if (st.ok()) st = StartWatcher();
    if (!st.ok()) Log("%s (tried again at the next rescan)", st.message().c_str());
    Scan(/*all_announced=*/true);
    ArmRescan();
  }

  // inbox/ is opened once: every entry is looked at and opened relative to this descriptor
  // (fstatat, openat, renameat), so a path swapped for another folder cannot redirect the daemon.
  Status OpenInbox() {
    const int fd = ::open(paths_.inbox.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
      return Status::IoError(Escaped(paths_.inbox) +
                             ": cannot open the folder: " + std::strerror(errno));
    if (inbox_fd_ >= 0) ::close(inbox_fd_);
    inbox_fd_ = fd;
    return Status::Ok();
  }

  // inbox/ was removed or replaced by another folder while the daemon ran: a new one is made
  // (EnsureLayout) and watched, so that files dropped there are accepted. True when it was.
  bool InboxReplaced() {
    if (intake_busy_) return false;  // the intake thread reads the old one: looked at later
    struct stat now {
    }, open{};
    if (watching_ && ::stat(paths_.inbox.c_str(), &now) == 0 && ::fstat(inbox_fd_, &open) == 0 &&
        now.st_dev == open.st_dev && now.st_ino == open.st_ino)
      return false;
    Log("%s was removed or replaced while llmq serve ran: watching a new inbox/ there",
        Escaped(paths_.inbox).c_str());
    Status st = spool::EnsureLayout(paths_);
    if (st.ok()) st = OpenInbox();
    if (st.ok()) {
      boost::system::error_code ignored;
      inotify_.close(ignored);
      watching_ = false;
      st = StartWatcher();
    }
    if (!st.ok()) Log("%s (tried again at the next rescan)", st.message().c_str());
    settler_.Clear();
    if (st.ok()) Scan(/*all_announced=*/true);
    return true;
  }

  // The names in inbox/ (the folder open as inbox_fd_).
  std::vector<std::string> ListInbox() {
    std::vector<std::string> names;
    const int fd = ::dup(inbox_fd_);
    DIR* d = fd < 0 ? nullptr : ::fdopendir(fd);
    if (d == nullptr) {
      if (fd >= 0) ::close(fd);
      Log("%s: cannot list: %s", Escaped(paths_.inbox).c_str(), std::strerror(errno));
      return names;
    }
    ::rewinddir(d);  // the duplicate shares the offset of the last listing
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    ::closedir(d);
    return names;
  }

  Status StartWatcher() {
    const int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (fd < 0) return Status::IoError(std::string("inotify_init1: ") + std::strerror(errno));
    if (inotify_add_watch(fd, paths_.inbox.c_str(), IN_CLOSE_WRITE | IN_MOVED_TO) < 0) {
      const int err = errno;
      ::close(fd);
      return Status::IoError(paths_.inbox + ": cannot watch: " + std::strerror(err));
    }
    inotify_.assign(fd);
    watching_ = true;
    ReadEvents();
    return Status::Ok();
  }

  // --- The inbox watcher.
  void ReadEvents() {
    inotify_.async_read_some(asio::buffer(events_), [this](boost::system::error_code ec, size_t n) {
      if (ec) {
        if (ec != asio::error::operation_aborted) Log("inotify: %s", ec.message().c_str());
        return;
      }
      const InboxEvents e = ParseInboxEvents(events_.data(), n);
      Announce(e, &settler_);
      for (const InboxEvents::Event& ev : e.events)
        if (!ev.renamed_in) split_.WrittenInPlace(ev.name, Clock::now());
      if (e.gone && !stopping_ && InboxReplaced()) return;  // a new watch reads from here on
      if (e.overflow) Log("inotify queue overflowed: rescanning %s", paths_.inbox.c_str());
      if ((!e.events.empty() || e.overflow) && !stopping_) Scan(e.overflow);
      ReadEvents();
    });
  }

  void ArmRescan() {
    rescan_timer_.expires_after(Secs(knobs_.rescan_seconds));
    rescan_timer_.async_wait([this](boost::system::error_code ec) {
      if (ec || stopping_) return;
      if (!InboxReplaced()) Scan(false);  // else a new watch, and its first scan, are started
      // A finalization that failed (outbox read-only or full, database locked) is retried
      // here: nothing else would look at the job again until another one changed the queue.
      CheckJobs();
      ArmRescan();
    });
  }

  // Looks at every entry of inbox/ (InboxSettler decides): refuses what is not a regular file,
  // tracks regular files until they settle, and hands those that have to the intake.
  void Scan(bool all_announced) {
    if (stopping_) return;
    std::vector<InboxSettler::Entry> listing;
    for (const std::string& name : ListInbox()) {
      if (spool::Ignored(name) || in_intake_.count(name)) continue;
      struct stat st {};
      if (::fstatat(inbox_fd_, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // gone
      using K = InboxSettler::Kind;
      const K kind = S_ISREG(st.st_mode)    ? K::kRegular
                     : S_ISLNK(st.st_mode)  ? K::kSymlink
                     : S_ISDIR(st.st_mode)  ? K::kFolder
                     : S_ISFIFO(st.st_mode) ? K::kFifo
                     : S_ISSOCK(st.st_mode) ? K::kSocket
                                            : K::kDevice;
      listing.push_back({name, kind, static_cast<int64_t>(st.st_size),
                         int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec});
    }
    // Names the intake holds count as present: their candidates are kept.
    for (const std::string& name : in_intake_) listing.push_back({name});
    const InboxSettler::Decision d =
        settler_.Scan(Clock::now(), listing, all_announced, in_intake_, !intake_busy_);
    for (const auto& [name, why] : d.refuse) Refuse(name, why);
    if (!refused_logged_.empty()) {  // forget the names no longer listed (a set: no n x m scan)
      std::set<std::string> listed;
      for (const InboxSettler::Entry& e : listing) listed.insert(e.name);
      for (auto it = refused_logged_.begin(); it != refused_logged_.end();)
        it = listed.count(*it) ? std::next(it) : refused_logged_.erase(it);
    }
    if (!d.accept.empty()) StartIntake(d.accept);
    if (d.next) {
      settle_timer_.expires_at(*d.next);
      settle_timer_.async_wait([this](boost::system::error_code ec) {
        if (!ec) Scan(false);
      });
    }
  }

  // Moves inbox/<name> to failed/ with its reason; logged once when it cannot be moved.
  void Refuse(const std::string& name, const std::string& reason) {
    settler_.Forget(name);
    if (Status st = Intake::Refuse(paths_, inbox_fd_, name, reason); !st.ok())
      if (refused_logged_.insert(name).second)
        Log("inbox/%s: refused (%s), and cannot be moved to failed/: %s", Escaped(name).c_str(),
            reason.c_str(), st.message().c_str());
  }

  // Hands the settled files of one scan to the intake thread (Intake: read, check, ingest in one
  // transaction, move to archive/ or failed/), one batch at a time: files settling meanwhile wait
  // for the next. The event loop goes on (signals, the watchdog, other files) while a large file
  // is read; IntakeDone picks up what came of it.
  void StartIntake(const std::vector<std::string>& names) {
    intake_busy_ = true;
    in_intake_.insert(names.begin(), names.end());
    Intake::Limits limits{knobs_.max_file_bytes, knobs_.max_line_bytes};
    asio::post(intake_thread_, [this, names, limits, fd = inbox_fd_] {
      Intake::Outcome o = intake_->Accept(fd, names, limits);
      asio::post(io_, [this, o = std::move(o)] { IntakeDone(o); });
    });
  }

  void IntakeDone(const Intake::Outcome& o) {
    intake_busy_ = false;
    in_intake_.clear();
    for (const std::string& n : o.done) settler_.Forget(n);
    for (const auto& [name, job] : o.jobs)
      if (std::string warning = split_.Taken(name, job, Clock::now()); !warning.empty())
        Log("warning: %s", warning.c_str());
    for (const std::string& n : o.resettle) settler_.Forget(n);  // seen anew: settles again
    if (stopping_) return;
    if (o.accepted > 0) {
      runner_->Wake();
      CheckJobs();  // a job whose every line was refused is complete already
    }
    Scan(false);  // files that settled meanwhile
  }

  // --- The queue.
  // The engine ran out of work: its last results would wait up to the commit interval to be
  // committed, and their jobs up to the next queue poll to be finalized. Commits them now, then
  // looks at the jobs. Runs on flusher_: a database locked by another process (the committer
  // retries until it commits) must hold up neither the engine's loop (a drain must still end
  // it) nor the event loop (signals, the inbox).
  void FlushThenCheckJobs() {
    committer_->Flush().IgnoreError();  // its error, if any, is reported when it closes
    asio::post(io_, [this] { CheckJobs(); });
  }

  void ArmPoll() {
    poll_timer_.expires_after(std::chrono::milliseconds(200));
    poll_timer_.async_wait([this](boost::system::error_code ec) {
      if (ec) return;
      // queue.db removed or replaced: everything written from now on would be lost to the next
      // start (and the files it accepted would run again). Stop at once, accepting nothing more.
      if (Status st = io_store_->StillAtLocation(); !st.ok()) {
        queue_lost_ = st;
        Log("%s: stopping (exit 1); nothing more is accepted", st.message().c_str());
        stopping_ = true;                // Scan takes nothing more
        if (intake_) intake_->Cancel();  // a file being accepted stays in inbox/
        rescan_timer_.cancel();
        settle_timer_.cancel();
        runner_->Stop();  // then OnEngineDone
        return;
      }
      int64_t v = 0;
      const Status st = io_store_->DataVersion(&v);
      queue_failing_since_ =  // ArmWatchdog: since when the queue does not answer
          st.ok() ? Clock::time_point::max() : std::min(queue_failing_since_, Clock::now());
      if (!st.ok()) {
        Log("%s", st.message().c_str());
      } else if (v != data_version_) {
        data_version_ = v;
        if (!stopping_) runner_->Wake();  // `llmq submit` may have added jobs
        CheckJobs();
      }
      if (!spool_owner_ && !stopping_) TakeOverSpool();
      ArmPoll();
    });
  }

  // Cancels and finalizes what is due, for every job not yet terminal (JobLifecycle).
  void CheckJobs() { lifecycle_->CheckJobs(stopping_); }

  // --- Signals and shutdown.
  void OnSignal(boost::system::error_code ec, int sig) {
    if (ec) return;
    if (sig == SIGHUP) {
      notifier_.Reloading();  // sd_notify
      Reload();
      notifier_.Ready();
    } else if (!stopping_) {
      stopping_ = true;
      if (intake_) intake_->Cancel();  // a file being accepted stays in inbox/
      drain_end_ = Clock::now() + Secs(knobs_.drain_seconds);
      notifier_.Stopping();  // sd_notify; EXTEND_TIMEOUT_USEC now and every second: ArmNotify
      ExtendStop(Clock::now());
      Log("%s: draining: no new requests start; running ones get up to %gs (what does not "
          "finish runs again after a restart)",
          sig == SIGINT ? "SIGINT" : "SIGTERM", knobs_.drain_seconds);
      rescan_timer_.cancel();
      settle_timer_.cancel();
      runner_->Drain();
      drain_timer_.expires_after(Secs(knobs_.drain_seconds));
      drain_timer_.async_wait([this](boost::system::error_code ec) {
        if (ec) return;
        Log("drain time is up: stopping the engine");
        runner_->Stop();
      });
    } else {
      Log("%s again: stopping now", sig == SIGINT ? "SIGINT" : "SIGTERM");
      runner_->Stop();
    }
    signals_.async_wait([this](auto ec, int sig) { OnSignal(ec, sig); });
  }

  void Reload() {
    if (const int ms = std::exchange(stall_reload_ms_, 0); ms > 0)  // TEST ONLY
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    if (config_path_.empty()) {
      Log("SIGHUP: no config file to reload (%s)", knobs_.ToText().c_str());
      return;
    }
    LlmqConfig c;
    if (Status st = LoadConfig(config_path_, &c); !st.ok()) {
      Log("SIGHUP: %s; keeping %s", st.message().c_str(), knobs_.ToText().c_str());
      return;
    }
    knobs_ = Reloadable::From(c);
    settler_.SetKnobs(knobs_.settle());
    committer_->SetInterval(std::chrono::milliseconds(knobs_.commit_interval_ms));
    windows_ = c.run_windows;
    PublishState();
    if (!stopping_) {
      rescan_timer_.cancel();
      ArmRescan();
    }
    Log("SIGHUP: reloaded %s: %s; %s", config_path_.c_str(), knobs_.ToText().c_str(),
        WindowsText().c_str());
    if (const std::vector<std::string> keys = ChangedKeys(file_cfg_, c, /*restart_only=*/true);
        !keys.empty()) {
      std::string list;
      for (const std::string& k : keys) list += (list.empty() ? "" : ", ") + k;
      Log("SIGHUP: not reloaded, restart needed: %s (changed in %s since the start)", list.c_str(),
          config_path_.c_str());
    }
    // New windows take effect at once: one that closes by the reload holds new requests (and,
    // after spool.drain_seconds, the running ones) as a window's end does.
    if (!stopping_) {
      window_timer_.cancel();
      CheckWindow(/*first=*/false);
    }
  }

  void OnEngineDone() {
    // sd_notify: the last commits and finalizations (a huge job's outbox files) are not ended by
    // TimeoutStopSec= while they make progress.
    TimeoutExtender extend(&notifier_, kExtendBy);
    watchdog_timer_.cancel();  // no engine loop any more: no pings
    if (!engine_status_.ok()) Log("engine: %s", engine_status_.message().c_str());
    // Results computed but not yet in a queue that is out of reach (a PostgreSQL restart, a lock
    // held past the busy timeout) keep being retried, backing off, for spool.drain_seconds more:
    // a stop does not throw away work while there is time left for it.
    const Status committed = committer_->Close(
        queue_lost_.ok() ? Clock::now() + Secs(knobs_.drain_seconds) : Clock::time_point::min());
    flusher_.join();        // a Flush waiting on the committer returned when it closed
    intake_thread_.join();  // an Accept in progress was cancelled by the stop: rolled back
    if (!committed.ok()) Log("committing results: %s", committed.message().c_str());
    // What did not finish goes back to the other workers at once (not after the lease).
    beat_timer_.cancel();
    int64_t released = 0;
    if (Status st = presence_->Leave(&released); !st.ok())
      Log("giving back this worker's leases: %s (they run out after %gs)", st.message().c_str(),
          presence_->lease_seconds());
    if (!stopping_ || !queue_lost_.ok()) {  // a store error, or queue.db gone (ArmPoll)
      exit_code_ = 1;
    } else {
      // Jobs the drain completed are finalized before exiting.
      CheckJobs();
      exit_code_ = engine_status_.ok() && committed.ok() ? 0 : 1;
    }
    Log("worker %s: %lld request(s) finished by this worker", presence_->id().c_str(),
        static_cast<long long>(runner_->progress().finished));
    WriteMetrics();  // the final numbers; they count what is left pending too
    // Counted from the queue now (not the metrics' last refresh); a count that cannot be read
    // says so rather than print 0.
    if (!queue_lost_.ok())
      Log("stopped: %s", queue_lost_.message().c_str());
    else if (Status st = queue_totals_.Refresh(io_store_.get()); !st.ok())
      Log("stopped; the requests left pending could not be counted (%s); they run after a restart",
          st.message().c_str());
    else
      Log("stopped; %lld request(s) left pending, run after a restart",
          static_cast<long long>(queue_totals_.pending()));
    boost::system::error_code ignored;
    inotify_.close(ignored);
    poll_timer_.cancel();
    rescan_timer_.cancel();
    settle_timer_.cancel();
    drain_timer_.cancel();
    notify_timer_.cancel();
    metrics_timer_.cancel();
    window_timer_.cancel();
    window_drain_timer_.cancel();
    signals_.cancel();
    if (http_ != nullptr) http_->Stop();
    io_.stop();
  }

  // --- The worker's heartbeat (daemon/worker.h), every third of queue.lease_seconds: renews
  // this worker's leases and shows its state; then the runner looks at the queue again (the
  // leases of a worker that died may have run out).
  void Beat() {
    const EngineMetrics::Gauges g = engine_metrics_.gauges();
    const char* state = stopping_                  ? "draining"
                        : !in_window_              ? "held"
                        : g.running + g.queued > 0 ? "running"
                                                   : "idle";
    const EngineMetrics::InFlight in_flight = engine_metrics_.in_flight();
    const std::string job = in_flight.empty() ? "" : in_flight.front().first;
    const Status st = presence_->Beat(state, job, published_.tokens_per_second);
    if (st.ok() != beat_ok_)  // logged when it starts failing and when it works again
      Log("heartbeat: %s",
          st.ok() ? "the queue answers again"
                  : (st.message() + " (this worker's leases run out " +
                     std::to_string(presence_->lease_seconds()) + "s after the last heartbeat)")
                        .c_str());
    beat_ok_ = st.ok();
    if (!stopping_ && runner_ != nullptr) runner_->Wake();
    beat_timer_.expires_after(Secs(presence_->beat_seconds()));
    beat_timer_.async_wait([this](boost::system::error_code ec) {
      if (!ec) Beat();
    });
  }
  bool beat_ok_ = true;

  // --- sd_notify (daemon/notifier.h).
  // On the engine thread, at every pass of its loop: its heartbeat (ArmWatchdog), and the
  // progress the STATUS= line shows.
  void OnEngineTick() {
    engine_tick_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
    EngineMetrics::Gauges g;
    g.progress = runner_->progress();
    g.running = static_cast<int64_t>(engine_->num_running());
    g.queued = static_cast<int64_t>(engine_->num_queued() + engine_->num_window());
    const BlockManager& b = engine_->blocks();
    g.kv_blocks_used = b.num_in_use();
    g.kv_blocks_free = b.num_free();
    g.kv_blocks_cached = b.num_available() - b.num_free();
    engine_metrics_.SetGauges(g);
    // The work in flight by job, for llmq status' ETA: a walk over the requests fed, so not at
    // every step.
    if (const auto now = Clock::now(); now >= next_in_flight_) {
      next_in_flight_ = now + std::chrono::milliseconds(50);
      engine_metrics_.SetInFlight(runner_->InFlightTokensByJob());
    }
  }

  // Every second: STATUS= (tokens/s over the last second); while draining, EXTEND_TIMEOUT_USEC=
  // the drain time left plus a margin for committing and finalizing, so that a drain longer than
  // TimeoutStopSec= is not killed.
  void ArmNotify() {
    if (!notifier_.enabled()) return;
    notify_timer_.expires_after(std::chrono::seconds(1));
    notify_timer_.async_wait([this](boost::system::error_code ec) {
      if (ec) return;
      const RunnerProgress p = engine_metrics_.gauges().progress;
      const auto now = Clock::now();
      const double secs = std::chrono::duration<double>(now - last_notify_).count();
      const double rate = secs > 0 ? (p.tokens_generated - last_tokens_) / secs : 0;
      last_notify_ = now;
      last_tokens_ = p.tokens_generated;
      std::vector<jobs::JobRecord> all;
      if (io_store_->ListJobs(&all).ok()) notifier_.SetStatus(ProgressLine(all, p, rate));
      if (stopping_) ExtendStop(now);
      ArmNotify();
    });
  }
  // WATCHDOG=1, from the event loop every quarter of the watchdog interval, and only while the
  // whole daemon is alive (WatchdogMonitor: this loop runs, the engine thread ticks, the queue's
  // 200-ms poll answers).
  void ArmWatchdog() {
    const Clock::duration w = notifier_.watchdog_usec();
    if (w <= Clock::duration::zero()) return;
    if (!watchdog_) watchdog_ = std::make_unique<WatchdogMonitor>(w, paths_.db);
    watchdog_due_ = Clock::now() + watchdog_->period();
    watchdog_timer_.expires_at(watchdog_due_);
    watchdog_timer_.async_wait([this](boost::system::error_code ec) {
      if (ec) return;
      const WatchdogMonitor::Verdict v = watchdog_->Check(
          Clock::now(), watchdog_due_,
          Clock::time_point(Clock::duration(engine_tick_.load(std::memory_order_relaxed))),
          queue_failing_since_);
      for (const std::string& line : v.logs) Log("%s", line.c_str());
      if (v.ping) notifier_.Watchdog();
      ArmWatchdog();
    });
  }
  // EXTEND_TIMEOUT_USEC=: the drain time left plus kExtendBy for committing and finalizing.
  void ExtendStop(Clock::time_point now) {
    notifier_.ExtendTimeout(std::chrono::duration_cast<std::chrono::microseconds>(
                                std::max(drain_end_ - now, Clock::duration::zero())) +
                            kExtendBy);
  }
  // How far each EXTEND_TIMEOUT_USEC= reaches beyond the work known to be left.
  static constexpr std::chrono::microseconds kExtendBy = std::chrono::seconds(30);

  // --- Metrics (daemon/metrics.h): the textfile, at start, every metrics.interval_seconds and at
  // exit; the same text over HTTP when metrics.http_port is set (daemon/metrics_http.h).
  // metrics.http_port: listening before the model loads; answered once the event loop runs.
  Status OpenMetricsHttp() {
    if (cfg_.metrics_http_port <= 0) return Status::Ok();
    MetricsHttp::Options o;
    o.port = cfg_.metrics_http_port;
    http_ = std::make_unique<MetricsHttp>(io_, o);
    http_->SetReportReader(
        [this](const std::string& id, std::string* html) { return ReadReport(id, html); });
    LLMQ_RETURN_IF_ERROR(http_->Start());
    Log("metrics: serving http://127.0.0.1:%d/metrics, the status page at http://127.0.0.1:%d/",
        o.port, o.port);
    return Status::Ok();
  }
  // The status page (daemon/status_page.h), rendered with the metrics: the queue as llmq status
  // shows it, with this daemon's own progress and windows.
  void UpdateStatusPage() {
    QueueSnapshot q;
    const Status read = ReadQueueSnapshot(io_store_.get(), &q, kFinishedShown, cfg_.lease_seconds);
    if (read.ok() != status_page_ok_)  // logged when it starts failing and when it works again
      Log("status page: %s",
          read.ok() ? "rendered again"
                    : (read.message() + " (the last one is served meanwhile)").c_str());
    status_page_ok_ = read.ok();
    if (!read.ok()) return;
    const EtaContext eta = EstimateQueue(q, &published_, windows_);
    StatusPageData d;
    d.now = q.now;
    d.refresh_seconds = cfg_.metrics_interval_seconds;
    std::array<char, 256> host{};
    if (::gethostname(host.data(), host.size() - 1) == 0) d.host = host.data();
    d.backend = model_.backend_description();
    d.model = ctx_.model_name + " (" + cfg_.model_dir + ")";
    std::string line;
    d.daemon = DaemonJson(eta, &line);
    RunWindowsJson(eta, &d.windows_line);
    d.in_engine = published_.in_flight_tokens;
    FillStatusPageJobs(
        q, eta, kFinishedShown,
        [this](const jobs::JobRecord& j) {
          struct stat st {};
          const std::string name = ReportName(j);
          return !name.empty() && ::lstat((paths_.outbox + "/" + name).c_str(), &st) == 0 &&
                 S_ISREG(st.st_mode);
        },
        &d);
    http_->SetStatusPage(RenderStatusPage(d));
  }
  static constexpr size_t kFinishedShown = 50;  // the newest finished jobs on the status page
  bool status_page_ok_ = true;                  // the last UpdateStatusPage read the queue
  // outbox/<name>.report.html of a finished job ("" when it has none: not finished, or a name that
  // is not one file's in outbox/).
  static std::string ReportName(const jobs::JobRecord& j) {
    if (!jobs::IsTerminal(j.status)) return "";
    const json opts = json::parse(j.options, nullptr, false);
    const std::string stem = opts.is_object() ? opts.value("outbox", std::string()) : "";
    if (stem.empty() || stem[0] == '.' || stem.find('/') != std::string::npos) return "";
    return stem + ".report.html";
  }
  // GET /reports/<id>: the job's report as FinalizeJob wrote it to outbox/, opened once there
  // (base/untrusted_file.h: a link is not followed), nothing else.
  Status ReadReport(const std::string& id, std::string* html) {
    jobs::JobRecord j;
    if (Status st = io_store_->GetJobByPublicId(id, &j); !st.ok())
      return st.code() == Status::Code::kNotFound ? Status::NotFound("no job " + id) : st;
    const std::string name = ReportName(j);
    if (name.empty())
      return Status::NotFound(
          id + " has no report: " +
          (jobs::IsTerminal(j.status) ? "no outbox name recorded" : "it is not finished"));
    const int dir = ::open(paths_.outbox.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0) return Status::IoError(paths_.outbox + ": " + std::strerror(errno));
    UntrustedFile file;
    const Status opened = UntrustedFile::Open(dir, name, "outbox/" + name, kMaxReportBytes,
                                              "the status page's limit (64 MiB)", &file);
    ::close(dir);
    if (opened.code() == Status::Code::kNotFound)
      return Status::NotFound(id + ": outbox/" + name + " is absent (metrics.job_reports off? " +
                              "llmq report " + id + " writes one)");
    LLMQ_RETURN_IF_ERROR(opened);
    return file.ReadAll(html);
  }
  static constexpr int64_t kMaxReportBytes = int64_t{64} << 20;
  Status StartMetrics() {
    metrics_path_ = cfg_.metrics_textfile.empty()
                        ? (fs::path(paths_.root) / "metrics" / "llmq.prom").string()
                        : cfg_.metrics_textfile;
    std::error_code ec;
    fs::create_directories(fs::path(metrics_path_).parent_path(), ec);
    WriteMetrics();
    ArmMetrics();
    return Status::Ok();
  }
  void ArmMetrics() {
    metrics_timer_.expires_after(Secs(cfg_.metrics_interval_seconds));
    metrics_timer_.async_wait([this](boost::system::error_code ec) {
      if (ec) return;
      WriteMetrics();
      ArmMetrics();
    });
  }
  // Refreshes the queue's totals (also read by the shutdown log line) and writes the file
  // (metrics_path_ is set by StartMetrics, before the engine thread starts).
  void WriteMetrics() {
    if (metrics_path_.empty()) return;
    const auto now = Clock::now();
    const int64_t tokens = engine_metrics_.gauges().progress.tokens_generated;
    const double secs = std::chrono::duration<double>(now - last_metrics_).count();
    const double rate = secs > 0 ? (tokens - last_metrics_tokens_) / secs : 0;
    last_metrics_ = now;
    last_metrics_tokens_ = tokens;
    Status st = queue_totals_.Refresh(io_store_.get());
    if (st.ok()) {
      std::string text = RenderMetrics(queue_totals_, engine_metrics_, rate);
      // The textfile is the spool owner's (or this worker's own, when metrics.textfile names it).
      if (spool_owner_ || !cfg_.metrics_textfile.empty())
        st = WriteFileDurably(metrics_path_, text);
      if (http_ != nullptr) http_->SetBody(std::move(text));  // the same text, over HTTP
    }
    // Logged when it starts failing and when it works again, not every few seconds.
    PublishState(/*measure=*/true);            // serve.json's progress, for llmq status' ETA
    if (http_ != nullptr) UpdateStatusPage();  // with the progress just published
    if (st.ok() != metrics_ok_)
      Log("metrics: %s",
          st.ok() ? ("writing " + metrics_path_ + " again").c_str() : st.message().c_str());
    metrics_ok_ = st.ok();
  }

  // --- Run windows (serve.run_windows, daemon/run_windows.h).
  // <state>/serve.json (spool::WriteServeState): llmq status shows the windows in effect.
  // `measure`: the rate is measured since the last measuring call (the metrics' interval); else
  // the last one is published again.
  void PublishState(bool measure = false) {
    spool::ServeProgress p;
    const EngineMetrics::Gauges g = engine_metrics_.gauges();
    p.at = wall_clock::Now();
    p.tokens_generated = g.progress.tokens_generated;
    p.running = g.running;
    p.queued = g.queued;
    p.held = !in_window_;
    p.fed_out = g.progress.fed_out;
    p.in_flight_tokens = engine_metrics_.in_flight();
    // Completion tokens per second of the engine's busy time (in seconds of the wall clock:
    // LLMQ_TEST_CLOCK runs faster, or by steps, in tests) over the last kRateIntervals intervals
    // in which tokens were generated: kept while nothing runs (outside the windows, between jobs),
    // so that an ETA can still be told; not lowered by the waits around the work.
    if (measure) {
      const double busy = g.progress.busy_seconds;
      if (busy > state_busy_ && p.tokens_generated > state_tokens_) {
        rate_intervals_.push_back({busy - state_busy_, double(p.tokens_generated - state_tokens_)});
        if (rate_intervals_.size() > kRateIntervals) rate_intervals_.pop_front();
      }
      state_busy_ = busy;
      state_tokens_ = p.tokens_generated;
    }
    double secs = 0, tokens = 0;
    for (const auto& [dt, dtok] : rate_intervals_) {
      secs += dt;
      tokens += dtok;
    }
    p.tokens_per_second = secs > 0 ? tokens / secs : 0;
    published_ = p;
    if (!spool_owner_) return;  // serve.json is the spool owner's
    if (Status st = spool::WriteServeState(paths_, windows_, p); !st.ok())
      Log("%s (llmq status shows the configured run windows instead)", st.message().c_str());
  }

  std::string WindowsText() const {
    if (windows_.empty()) return "no run windows";
    std::string s = "run windows";
    for (const RunWindow& w : windows_) s += " " + FormatRunWindow(w);
    return s;
  }

  // Outside the windows nothing new starts; at a window's end running requests get
  // spool.drain_seconds, then are abandoned (pending again: they run in the next window).
  // Checked when the state next changes (just after that second begins) and every minute, and
  // when a reload changes the windows; on a step-driven test clock, by the engine's thread too
  // (HoldAtWindowEnd).
  void CheckWindow(bool first) {
    if (stopping_) return;
    if (windows_.empty()) {  // none (left by a reload): always open
      window_closes_at_ = kNever;
      if (!in_window_) {
        in_window_ = true;
        window_drain_timer_.cancel();
        runner_->Release();
        Log("no run windows any more: requests start");
      }
      return;
    }
    const double now = wall_clock::Now();  // LLMQ_TEST_CLOCK in tests
    const auto t = static_cast<std::time_t>(now);
    const int sec = LocalSecondOfDay(t);
    const bool in = InRunWindow(windows_, sec);
    const int next = SecondsToNextChange(windows_, sec);
    if (first || in != in_window_) {
      in_window_ = in;
      if (in) {
        window_drain_timer_.cancel();
        runner_->Release();
        Log("run window open: requests start (it closes in %ds)", next);
      } else {
        runner_->Hold(/*running_too=*/false);
        Log("outside the run windows: no new request starts%s (next window in %ds)",
            first ? "" : "; running ones get spool.drain_seconds", next);
        window_drain_timer_.expires_after(Secs(first ? 0 : knobs_.drain_seconds));
        window_drain_timer_.async_wait([this](boost::system::error_code ec) {
          if (ec || in_window_ || stopping_) return;
          runner_->Hold(/*running_too=*/true);
        });
      }
    }
    // For HoldAtWindowEnd: when this window closes, and how.
    window_close_stops_running_ = knobs_.drain_seconds <= 0;
    window_closes_at_ = in && next >= 0 ? static_cast<double>(t + next) : kNever;
    const double into_second = now - static_cast<double>(t);
    const double delay = (next < 0 ? 60 : std::min(next, 60)) - into_second + 0.01;
    window_timer_.expires_after(wall_clock::RealFor(std::max(delay, 0.01)));
    window_timer_.async_wait([this](boost::system::error_code ec) {
      if (!ec) CheckWindow(false);
    });
  }

  // On a step-driven test clock (base/wall_clock.h) the engine's steps move the clock, not the
  // real time the window's timer waits for: after the step that reaches the window's end, the
  // engine's thread holds itself before its next step (the running requests too when
  // spool.drain_seconds is 0) and leaves the rest (the log, the drain's timer) to CheckWindow.
  void HoldAtWindowEnd() {
    if (wall_clock::Now() < window_closes_at_.load()) return;
    window_closes_at_ = kNever;
    runner_->Hold(window_close_stops_running_.load());
    asio::post(io_, [this] {
      window_timer_.cancel();
      CheckWindow(/*first=*/false);
    });
  }

  std::vector<RunWindow> windows_;
  bool in_window_ = true;
  // When the window the daemon is in closes (unix seconds; kNever: outside one), and whether its
  // end stops the running requests at once: set by CheckWindow, read by HoldAtWindowEnd.
  static constexpr double kNever = 1e300;
  std::atomic<double> window_closes_at_{kNever};
  std::atomic<bool> window_close_stops_running_{false};
  // serve.json's progress (PublishState): when it was last measured, the tokens then, and the
  // last intervals with progress (seconds, tokens).
  double state_busy_ = 0;  // the engine's busy time at the last measure (wall-clock seconds)
  int64_t state_tokens_ = 0;
  static constexpr size_t kRateIntervals = 12;
  std::deque<std::pair<double, double>> rate_intervals_;
  spool::ServeProgress published_;  // serve.json's last progress (PublishState)

  Notifier notifier_;
  EngineMetrics engine_metrics_;  // written by the engine thread (OnEngineTick and hooks)
  QueueTotals queue_totals_;
  std::string metrics_path_;
  Clock::time_point last_metrics_ = Clock::now();
  int64_t last_metrics_tokens_ = 0;
  bool metrics_ok_ = true;
  Clock::time_point last_notify_ = Clock::now(), drain_end_;
  // The watchdog (ArmWatchdog): the engine thread's last tick (Clock's count, OnEngineTick), when
  // the queue's poll started failing (max: it answers), when the timer was due, what was stale.
  std::atomic<Clock::rep> engine_tick_{0};
  Clock::time_point next_in_flight_;  // engine thread: when InFlightTokensByJob is next read
  Clock::time_point queue_failing_since_ = Clock::time_point::max(), watchdog_due_;
  std::unique_ptr<WatchdogMonitor> watchdog_;  // WATCHDOG_USEC= set (ArmWatchdog)
  int stall_reload_ms_ = TestStallReloadMs();  // TEST ONLY (LLMQ_TEST_STALL_RELOAD_MS)
  int64_t last_tokens_ = 0;

  const CLI::App* cmd_;
  const ServeFlags& f_;
  LlmqConfig cfg_;
  std::string config_path_;
  LlmqConfig file_cfg_;  // config_path_ as read at start
  Reloadable knobs_;
  spool::Paths paths_;
  int lock_fd_ = -1;
  int slot_fd_ = -1;          // this worker's slot of the folder, locked (TakeWorkerSlot)
  bool spool_owner_ = false;  // this worker holds the folder's lock: it watches inbox/ (Lock)
  std::unique_ptr<WorkerPresence> presence_;  // this worker on the queue, with io_store_
  int inbox_fd_ = -1;                         // inbox/, opened once (OpenInbox)
  bool watching_ = false;                     // inotify watches inbox/ (StartWatcher)
  Model model_;
  std::unique_ptr<LlmEngine> engine_;
  BuildContext ctx_;
  std::unique_ptr<jobs::Store> io_store_, intake_store_, runner_store_, commit_store_;
  std::unique_ptr<Intake> intake_;  // runs on intake_thread_, with intake_store_
  std::unique_ptr<jobs::ResultCommitter> committer_;
  std::unique_ptr<JobRunner> runner_;
  std::unique_ptr<JobLifecycle> lifecycle_;  // with io_store_, on the event loop
  std::thread engine_thread_;
  Status engine_status_;
  int exit_code_ = 0;

  asio::io_context io_;
  asio::posix::stream_descriptor inotify_;
  asio::steady_timer poll_timer_, rescan_timer_, settle_timer_, drain_timer_;
  asio::steady_timer notify_timer_, watchdog_timer_, metrics_timer_, window_timer_,
      window_drain_timer_;
  asio::steady_timer beat_timer_;  // the worker's heartbeat (Beat)
  asio::signal_set signals_;
  std::unique_ptr<MetricsHttp> http_;   // metrics.http_port; after io_: destroyed before it
  asio::thread_pool flusher_{1};        // FlushThenCheckJobs
  asio::thread_pool intake_thread_{1};  // Intake::Accept (StartIntake)
  bool intake_busy_ = false;            // an Accept runs on intake_thread_
  std::set<std::string> in_intake_;     // its names: not looked at by Scan meanwhile
  alignas(inotify_event) std::array<char, 64 * 1024> events_{};
  // The inbox's settling files (Scan); OpenForWriting reads inbox/ as inbox_fd_.
  InboxSettler settler_{InboxSettler::Knobs{}, [this](const std::string& name) {
                          return OpenForWriting(inbox_fd_, name);
                        }};
  std::set<std::string> refused_logged_;
  SplitFiles split_{std::chrono::minutes(10)};  // files appended to in inbox/ (ReadEvents)
  int64_t data_version_ = 0;
  bool stopping_ = false;
  Status queue_lost_;  // queue.db removed or replaced under the daemon (ArmPoll): exit 1
};

}  // namespace

void AddServeCommand(CLI::App* app, int* rc) {
  auto f = std::make_shared<ServeFlags>();
  CLI::App* cmd = app->add_subcommand(
      "serve",
      "Run the daemon: watch <state>/inbox for job files and the queue for llmq submit, run "
      "them, write results to <state>/outbox");
  cmd->add_option("--state", f->state,
                  "State folder: queue.db, inbox/, outbox/, failed/, archive/ (default: "
                  "spool.state_dir of the config)");
  cmd->add_option(
         "--served-model-name", f->served_names,
         "The models this worker serves (as vLLM's): it runs only jobs whose requests name "
         "one of them in body.model, or none (default: model.served_names of the config; "
         "none: any model)")
      ->check([](const std::string& v) -> std::string {
        return !v.empty() && v.size() <= 200 ? "" : "each name must be 1 to 200 bytes";
      });
  AddEngineFlags(cmd, &f->engine);
  cmd->callback([cmd, f, rc] { *rc = Server(cmd, *f).Main(); });
}

}  // namespace llmq::cli
