// The inbox watcher's rules (daemon/inbox_settle.h) on a clock the test moves: settle, the group
// window for renamed-in files, grouping of files that settle together, a file still open for
// writing, unannounced files and the rescan after an inotify overflow, refusals, and the parsing
// of inotify's records. No file system, no sleeping.
#include "daemon/inbox_settle.h"

#include <gtest/gtest.h>
#include <sys/inotify.h>

#include <cstring>
#include <map>

namespace llmq {
namespace {

using Clock = InboxSettler::Clock;
using std::chrono::milliseconds;
using Kind = InboxSettler::Kind;

// A fake inbox: the files' sizes and mtimes, a clock, and who holds which file open for writing.
class InboxSettleTest : public ::testing::Test {
 protected:
  InboxSettleTest()
      : settler_({/*settle=*/2.0, /*rescan=*/30.0, /*group_ms=*/100},
                 [this](const std::string& name) { return open_.count(name) > 0; }) {}

  void Write(const std::string& name, int64_t size) {
    files_[name] = {name, Kind::kRegular, size, ++mtime_};
  }
  void Advance(milliseconds d) { now_ += d; }
  InboxSettler::Decision Scan(bool all_announced = false, bool can_accept = true) {
    std::vector<InboxSettler::Entry> listing;
    for (const auto& [name, e] : files_) listing.push_back(e);
    return settler_.Scan(now_, listing, all_announced, skip_, can_accept);
  }
  // Scans at every millisecond from now up to `limit`; the time since the start at which the
  // files were accepted (empty: none within the limit) and which.
  std::pair<milliseconds, std::vector<std::string>> ScanUntilAccepted(milliseconds limit) {
    const Clock::time_point start = now_;
    for (; now_ - start <= limit; now_ += milliseconds(1)) {
      InboxSettler::Decision d = Scan();
      if (!d.accept.empty())
        return {std::chrono::duration_cast<milliseconds>(now_ - start), d.accept};
    }
    return {milliseconds(-1), {}};
  }

  InboxSettler settler_;
  std::map<std::string, InboxSettler::Entry> files_;
  std::set<std::string> open_, skip_;
  Clock::time_point now_ = Clock::time_point() + std::chrono::hours(1);
  int64_t mtime_ = 0;
};

TEST_F(InboxSettleTest, AFileWrittenInPlaceWaitsTheSettleTimeFromItsLastChange) {
  Write("a.jsonl", 10);
  settler_.OnClosedAfterWrite("a.jsonl");
  InboxSettler::Decision d = Scan();
  EXPECT_TRUE(d.accept.empty());
  ASSERT_TRUE(d.next.has_value());
  EXPECT_EQ(*d.next, now_ + milliseconds(2000)) << "looked at again when it is due";
  Advance(milliseconds(1500));
  Write("a.jsonl", 20);  // written again (appended, closed again)
  settler_.OnClosedAfterWrite("a.jsonl");
  EXPECT_TRUE(Scan().accept.empty());
  const auto [at, names] = ScanUntilAccepted(milliseconds(5000));
  EXPECT_EQ(at, milliseconds(2000)) << "the settle time counts from the last change";
  EXPECT_EQ(names, std::vector<std::string>{"a.jsonl"});
}

TEST_F(InboxSettleTest, ARenamedInFileWaitsOnlyTheGroupWindow) {
  Write("quick.jsonl", 10);
  settler_.OnRenamedIn("quick.jsonl");
  const auto [at, names] = ScanUntilAccepted(milliseconds(5000));
  EXPECT_EQ(at, milliseconds(100));
  EXPECT_EQ(names, std::vector<std::string>{"quick.jsonl"});
}

TEST_F(InboxSettleTest, ARenamedInFileChangedAfterTheRenameWaitsTheSettleTime) {
  Write("grown.jsonl", 10);
  settler_.OnRenamedIn("grown.jsonl");
  EXPECT_TRUE(Scan().accept.empty());  // the first look after the rename
  Advance(milliseconds(50));
  Write("grown.jsonl", 30);  // appended after the rename (no close seen yet)
  const auto [at, names] = ScanUntilAccepted(milliseconds(5000));
  EXPECT_EQ(at, milliseconds(2000)) << "a writer that renames first and writes on";
  EXPECT_EQ(names, std::vector<std::string>{"grown.jsonl"});
}

TEST_F(InboxSettleTest, AFileStillOpenForWritingWaitsForItsWriter) {
  Write("held.jsonl", 10);
  settler_.OnRenamedIn("held.jsonl");
  open_.insert("held.jsonl");  // renamed in while its writer holds it open
  EXPECT_TRUE(Scan().accept.empty());
  Advance(milliseconds(100));
  InboxSettler::Decision d = Scan();
  EXPECT_TRUE(d.accept.empty()) << "due, but still open for writing";
  ASSERT_TRUE(d.next.has_value());
  EXPECT_EQ(*d.next, now_ + milliseconds(2000));
  Advance(milliseconds(10000));
  EXPECT_TRUE(Scan().accept.empty()) << "however long the writer pauses";
  open_.clear();  // closed without writing more
  const auto [at, names] = ScanUntilAccepted(milliseconds(5000));
  EXPECT_EQ(at, milliseconds(2000)) << "back under the settle time, from the last look";
  EXPECT_EQ(names, std::vector<std::string>{"held.jsonl"});
}

TEST_F(InboxSettleTest, FilesRenamedInTogetherAreAcceptedTogether) {
  Write("a.jsonl", 10);
  settler_.OnRenamedIn("a.jsonl");
  EXPECT_TRUE(Scan().accept.empty());
  Advance(milliseconds(30));  // the second file's event comes with the next inotify read
  Write("b.jsonl", 10);
  settler_.OnRenamedIn("b.jsonl");
  EXPECT_TRUE(Scan().accept.empty());
  Advance(milliseconds(70));  // a is due; b is due 30 ms later, within a's group window
  EXPECT_TRUE(Scan().accept.empty()) << "a waits for b";
  const auto [at, names] = ScanUntilAccepted(milliseconds(1000));
  EXPECT_EQ(at, milliseconds(30));
  EXPECT_EQ(names, (std::vector<std::string>{"a.jsonl", "b.jsonl"})) << "one ingest plans both";
}

TEST_F(InboxSettleTest, ASteadyStreamOfDropsNeverHoldsAFileLongerThanTwiceItsWait) {
  // A new file renamed in every 60 ms, forever: each is due within the group window of the last.
  int dropped = 0;
  auto drop = [&] {
    const std::string name = "f" + std::to_string(dropped++) + ".jsonl";
    Write(name, 10);
    settler_.OnRenamedIn(name);
  };
  drop();
  const Clock::time_point first = now_;
  std::vector<std::string> accepted;
  for (int ms = 0; ms <= 1000 && accepted.empty(); ++ms, Advance(milliseconds(1))) {
    if (ms > 0 && ms % 60 == 0) drop();
    accepted = Scan().accept;
  }
  ASSERT_FALSE(accepted.empty());
  EXPECT_LE(now_ - first, milliseconds(2 * 100 + 1));
  EXPECT_EQ(accepted.front(), "f0.jsonl");
}

TEST_F(InboxSettleTest, AFileNobodyAnnouncedWaitsARescanPeriodUnlessTheQueueOverflowed) {
  Write("quiet.jsonl", 10);  // no event: found by a rescan only
  const auto [at, names] = ScanUntilAccepted(milliseconds(40000));
  EXPECT_EQ(at, milliseconds(30000)) << "it may still be being written";
  files_.erase("quiet.jsonl");  // accepted
  settler_.Forget("quiet.jsonl");

  // After an inotify overflow the events are lost: every file counts as announced.
  Write("lost.jsonl", 10);
  InboxSettler::Decision d = Scan(/*all_announced=*/true);
  EXPECT_TRUE(d.accept.empty());
  ASSERT_TRUE(d.next.has_value());
  EXPECT_EQ(*d.next, now_ + milliseconds(2000)) << "the settle time, not a rescan period";
}

TEST_F(InboxSettleTest, InotifyRecordsAreParsedInOrderAndOverflowAsksForARescan) {
  std::string buf;
  auto add = [&](uint32_t mask, const std::string& name) {
    inotify_event e{};
    e.mask = mask;
    e.len = name.empty() ? 0 : static_cast<uint32_t>((name.size() + 1 + 15) / 16 * 16);
    buf.append(reinterpret_cast<const char*>(&e), sizeof e);
    std::string padded = name;
    padded.resize(e.len, '\0');
    buf += padded;
  };
  add(IN_MOVED_TO, "a.jsonl");
  add(IN_CLOSE_WRITE, "a.jsonl");
  add(IN_CLOSE_WRITE, "b.jsonl");
  add(IN_Q_OVERFLOW, "");
  InboxEvents e = ParseInboxEvents(buf.data(), buf.size());
  EXPECT_TRUE(e.overflow);
  EXPECT_FALSE(e.gone);
  ASSERT_EQ(e.events.size(), 3u);
  EXPECT_EQ(e.events[0].name, "a.jsonl");
  EXPECT_TRUE(e.events[0].renamed_in);
  EXPECT_FALSE(e.events[1].renamed_in);
  EXPECT_EQ(e.events[2].name, "b.jsonl");

  // Renamed in, then closed after writing in the same read: written in place, the settle time.
  Write("a.jsonl", 10);
  Write("b.jsonl", 10);
  Announce(e, &settler_);
  const auto [at, names] = ScanUntilAccepted(milliseconds(5000));
  EXPECT_EQ(at, milliseconds(2000));
  EXPECT_EQ(names, (std::vector<std::string>{"a.jsonl", "b.jsonl"}));

  add(IN_IGNORED, "");
  EXPECT_TRUE(ParseInboxEvents(buf.data(), buf.size()).gone) << "the watch ended";
  // A record cut short (a short read) is not read past the buffer.
  EXPECT_EQ(ParseInboxEvents(buf.data(), sizeof(inotify_event) + 4).events.size(), 0u);
}

TEST_F(InboxSettleTest, WhatIsNotARegularFileOrHasABadNameIsRefusedAtOnce) {
  files_["link.jsonl"] = {"link.jsonl", Kind::kSymlink, 0, 0};
  files_["dir.jsonl"] = {"dir.jsonl", Kind::kFolder, 0, 0};
  files_["fifo.jsonl"] = {"fifo.jsonl", Kind::kFifo, 0, 0};
  Write(std::string("bad\x01name.jsonl"), 10);
  Write(std::string("bad\xff.jsonl"), 10);
  Write(".hidden.jsonl", 10);  // spool::Ignored: a writer's temporary
  const InboxSettler::Decision d = Scan(/*all_announced=*/true);
  std::map<std::string, std::string> refused(d.refuse.begin(), d.refuse.end());
  ASSERT_EQ(refused.size(), 5u);
  EXPECT_NE(refused["link.jsonl"].find("a symbolic link, not a regular file"), std::string::npos);
  EXPECT_NE(refused["dir.jsonl"].find("a folder"), std::string::npos);
  EXPECT_NE(refused["fifo.jsonl"].find("a FIFO"), std::string::npos);
  EXPECT_FALSE(refused[std::string("bad\x01name.jsonl")].empty());
  EXPECT_FALSE(refused[std::string("bad\xff.jsonl")].empty());
  EXPECT_EQ(settler_.num_watched(), 0u) << "nothing refused is watched";
}

TEST_F(InboxSettleTest, TheIntakesFilesArePassedOverAndSettledFilesWaitForIt) {
  Write("a.jsonl", 10);
  Write("b.jsonl", 10);
  settler_.OnRenamedIn("a.jsonl");
  settler_.OnRenamedIn("b.jsonl");
  skip_ = {"a.jsonl"};  // the intake reads it
  EXPECT_TRUE(Scan().accept.empty());
  Advance(milliseconds(100));
  EXPECT_TRUE(Scan(false, /*can_accept=*/false).accept.empty()) << "the intake is busy";
  EXPECT_EQ(Scan().accept, std::vector<std::string>{"b.jsonl"});
  settler_.Forget("b.jsonl");  // the intake took it
  EXPECT_EQ(settler_.num_watched(), 1u) << "a's candidate is kept while the intake has it";
  files_.erase("b.jsonl");  // archived
  skip_.clear();
  files_.erase("a.jsonl");
  Scan();
  EXPECT_EQ(settler_.num_watched(), 0u) << "files no longer listed are forgotten";
}

TEST(SplitFiles, APieceOfAFileAppendedToInTheInboxIsNamed) {
  SplitFiles split(std::chrono::minutes(10));
  const Clock::time_point t0 = Clock::time_point() + std::chrono::hours(1);
  split.WrittenInPlace("x.jsonl", t0);
  EXPECT_EQ(split.Taken("x.jsonl", "batch_a", t0 + milliseconds(1500)), "") << "the first piece";
  // The next `echo >> inbox/x.jsonl` made a new file, which settled and was taken.
  split.WrittenInPlace("x.jsonl", t0 + milliseconds(2000));
  const std::string w = split.Taken("x.jsonl", "batch_b", t0 + milliseconds(3500));
  EXPECT_EQ(w,
            "inbox/x.jsonl taken as batch_b 2.0 s after a file of that name was taken as "
            "batch_a: a file appended to in inbox/ is split into one job per piece that settled "
            "(each runs on its own, its results under its own name); write the whole file "
            "elsewhere, then rename it into inbox/");
  // Another name, and the same name long after, are other files.
  split.WrittenInPlace("y.jsonl", t0);
  EXPECT_EQ(split.Taken("y.jsonl", "batch_c", t0 + milliseconds(1500)), "");
  split.WrittenInPlace("y.jsonl", t0 + std::chrono::minutes(30));
  EXPECT_EQ(split.Taken("y.jsonl", "batch_d", t0 + std::chrono::minutes(31)), "");
  // Renamed in both times (never written in place): a new version of the job, nothing to say.
  EXPECT_EQ(split.Taken("z.jsonl", "batch_e", t0), "");
  EXPECT_EQ(split.Taken("z.jsonl", "batch_f", t0 + milliseconds(500)), "");
}

}  // namespace
}  // namespace llmq
