// Tests for engine/durable_file: real files in a scratch folder, a real FIFO with a reader thread,
// /dev/null, symlinks, and every refusal (a folder, a missing folder, a path under a regular file).
#include "base/durable_file.h"
#include "tests/test_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace llmq {
namespace {

namespace fs = std::filesystem;

std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// The names in `dir`, sorted.
std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(DurableFile, RoundTripsSmallAndLargeAppends) {
  const std::string dir = testing::CurrentTestDir();
  const std::string path = dir + "/out.jsonl";
  std::string expected;
  DurableFile f;
  ASSERT_TRUE(f.Open(path).ok());
  EXPECT_FALSE(f.in_place());
  for (int i = 0; i < 1000; ++i) {
    const std::string line = "line " + std::to_string(i) + "\n";
    ASSERT_TRUE(f.Append(line).ok());
    expected += line;
  }
  const std::string big(300000, 'x');  // larger than the buffer: written straight through
  ASSERT_TRUE(f.Append(big).ok());
  expected += big;
  ASSERT_TRUE(f.Append("tail").ok());
  expected += "tail";
  EXPECT_FALSE(fs::exists(path)) << "the target appears only at Commit";
  ASSERT_TRUE(f.Commit().ok());
  EXPECT_EQ(ReadAll(path), expected);
  EXPECT_EQ(Names(dir), std::vector<std::string>{"out.jsonl"}) << "no temporary file left";
}

TEST(DurableFile, ATargetWithTheLongestNameHasAValidTemporary) {
  const std::string dir = testing::TmpDir("durable_long_name");
  const std::string name(255, 'n');  // NAME_MAX: ".<name>.tmp-..." would be too long whole
  ASSERT_TRUE(WriteFileDurably(dir + "/" + name, "content\n").ok());
  EXPECT_EQ(ReadAll(dir + "/" + name), "content\n");
  EXPECT_EQ(Names(dir), std::vector<std::string>{name});
}

TEST(DurableFile, EmptyFileIsWritten) {
  const std::string path = testing::CurrentTestDir() + "/empty";
  ASSERT_TRUE(WriteFileDurably(path, "").ok());
  ASSERT_TRUE(fs::is_regular_file(path));
  EXPECT_EQ(fs::file_size(path), 0u);
}

TEST(DurableFile, ReplacesTheTargetAtomically) {
  const std::string dir = testing::CurrentTestDir();
  const std::string path = dir + "/results";
  ASSERT_TRUE(WriteFileDurably(path, "old content").ok());
  const int reader = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(reader, 0);
  ASSERT_TRUE(WriteFileDurably(path, "new content, longer").ok());
  // The reader holds the old inode: it still reads every old byte, never a mix.
  char buf[64] = {};
  const ssize_t n = ::pread(reader, buf, sizeof buf, 0);
  ::close(reader);
  EXPECT_EQ(std::string(buf, n > 0 ? static_cast<size_t>(n) : 0), "old content");
  EXPECT_EQ(ReadAll(path), "new content, longer");
  EXPECT_EQ(Names(dir), std::vector<std::string>{"results"});
}

TEST(DurableFile, ReplacementKeepsThePermissionBits) {
  const std::string path = testing::CurrentTestDir() + "/private";
  ASSERT_TRUE(WriteFileDurably(path, "a").ok());
  fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write);
  ASSERT_TRUE(WriteFileDurably(path, "b").ok());
  EXPECT_EQ(fs::status(path).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
}

TEST(DurableFile, AModeAskedForIsTheFilesWhateverTheUmaskAndTheFileReplaced) {
  const std::string dir = testing::CurrentTestDir();
  const auto mode = [](const std::string& p) {
    return fs::status(p).permissions() & fs::perms::all;
  };
  const fs::perms group_read =
      fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read;
  const mode_t old = ::umask(077);  // would make a new file 0600
  const Status made = WriteFileDurably(dir + "/new", "a", 0640);
  ::umask(022);
  const std::string wide = dir + "/wide";
  const Status first = WriteFileDurably(wide, "a");  // 0644
  const Status replaced = WriteFileDurably(wide, "b", 0640);
  ::umask(old);
  ASSERT_TRUE(made.ok()) << made.message();
  ASSERT_TRUE(first.ok()) << first.message();
  ASSERT_TRUE(replaced.ok()) << replaced.message();
  EXPECT_EQ(mode(dir + "/new"), group_read);
  EXPECT_EQ(mode(wide), group_read);
  EXPECT_EQ(ReadAll(wide), "b");
}

TEST(DurableFile, UncommittedWriterLeavesTargetUntouchedAndRemovesItsTemp) {
  const std::string dir = testing::CurrentTestDir();
  const std::string path = dir + "/keep";
  ASSERT_TRUE(WriteFileDurably(path, "original").ok());
  {
    DurableFile f;
    ASSERT_TRUE(f.Open(path).ok());
    ASSERT_TRUE(f.Append("half of a new").ok());
    EXPECT_EQ(Names(dir).size(), 2u) << "the temporary file exists while writing";
  }
  EXPECT_EQ(ReadAll(path), "original");
  EXPECT_EQ(Names(dir), std::vector<std::string>{"keep"});
}

TEST(DurableFile, FailedCommitRemovesItsTempAndReportsAgain) {
  const std::string dir = testing::CurrentTestDir();
  const std::string path = dir + "/target";
  DurableFile f;
  ASSERT_TRUE(f.Open(path).ok());
  ASSERT_TRUE(f.Append("data").ok());
  // A non-empty folder appears where the file should go: the rename must fail.
  fs::create_directories(path + "/inside");
  const Status s = f.Commit();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(path), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("rename"), std::string::npos) << s.message();
  EXPECT_EQ(Names(dir), std::vector<std::string>{"target"}) << "temporary file removed";
  EXPECT_TRUE(fs::is_directory(path + "/inside"));
  // Dead after an error: the same error again, nothing written.
  EXPECT_EQ(f.Append("more").message(), s.message());
}

TEST(DurableFile, DevNullIsWrittenInPlace) {
  DurableFile f;
  ASSERT_TRUE(f.Open("/dev/null").ok());
  EXPECT_TRUE(f.in_place());
  ASSERT_TRUE(f.Append("discarded").ok());
  ASSERT_TRUE(f.Commit().ok());
  struct stat st;
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode)) << "/dev/null must never be replaced";
}

TEST(DurableFile, StandardOutputIsInPlace) {
  DurableFile f;
  ASSERT_TRUE(f.Open("-").ok());
  EXPECT_TRUE(f.in_place());
  ASSERT_TRUE(f.Commit().ok());  // nothing appended: nothing printed
  EXPECT_NE(::fcntl(STDOUT_FILENO, F_GETFD), -1) << "standard output stays open";
}

TEST(DurableFile, FifoIsWrittenInPlace) {
  const std::string dir = testing::CurrentTestDir();
  const std::string fifo = dir + "/pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  std::string got;
  std::thread reader([&] { got = ReadAll(fifo); });
  const std::string payload(200000, 'p');  // more than a pipe holds: the reader must drain it
  DurableFile f;
  Status s = f.Open(fifo);  // waits for the reader to open its end
  if (s.ok()) s = f.Append(payload);
  if (s.ok()) s = f.Commit();
  if (!s.ok()) {
    // Unblock the reader before failing the test.
    const int fd = ::open(fifo.c_str(), O_WRONLY);
    if (fd >= 0) ::close(fd);
  }
  reader.join();
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(f.in_place());
  EXPECT_EQ(got, payload);
  EXPECT_TRUE(fs::is_fifo(fifo));
  EXPECT_EQ(Names(dir), std::vector<std::string>{"pipe"});
}

TEST(DurableFile, SymlinkTargetIsReplacedAndTheLinkKept) {
  const std::string dir = testing::CurrentTestDir();
  fs::create_directories(dir + "/real");
  ASSERT_TRUE(WriteFileDurably(dir + "/real/file", "old").ok());
  fs::create_symlink("real/file", dir + "/link");  // relative, resolved against the link's folder
  ASSERT_TRUE(WriteFileDurably(dir + "/link", "new").ok());
  EXPECT_TRUE(fs::is_symlink(dir + "/link"));
  EXPECT_EQ(fs::read_symlink(dir + "/link"), "real/file");
  EXPECT_EQ(ReadAll(dir + "/real/file"), "new");
  EXPECT_EQ(Names(dir + "/real"), std::vector<std::string>{"file"});
  EXPECT_EQ(Names(dir), (std::vector<std::string>{"link", "real"}));
}

TEST(DurableFile, DanglingSymlinkCreatesTheFileItNames) {
  const std::string dir = testing::CurrentTestDir();
  fs::create_symlink(dir + "/created", dir + "/dangling");
  ASSERT_TRUE(WriteFileDurably(dir + "/dangling", "made").ok());
  EXPECT_TRUE(fs::is_symlink(dir + "/dangling"));
  EXPECT_EQ(ReadAll(dir + "/created"), "made");
}

TEST(DurableFile, FolderAsTargetIsRefused) {
  const std::string dir = testing::CurrentTestDir();
  DurableFile f;
  const Status s = f.Open(dir);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(dir), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(std::strerror(EISDIR)), std::string::npos) << s.message();
  EXPECT_TRUE(Names(dir).empty());
}

TEST(DurableFile, MissingFolderIsRefusedWithTheReason) {
  const std::string dir = testing::CurrentTestDir();
  const std::string path = dir + "/no/such/folder/out.jsonl";
  const Status s = WriteFileDurably(path, "x");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kIoError);
  EXPECT_NE(s.message().find(path), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(std::strerror(ENOENT)), std::string::npos) << s.message();
}

TEST(DurableFile, PathUnderARegularFileIsRefused) {
  // Fails for root too: no permission bit can make /etc/passwd a folder.
  const Status s = WriteFileDurably("/etc/passwd/x", "x");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("/etc/passwd/x"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(std::strerror(ENOTDIR)), std::string::npos) << s.message();
}

TEST(DurableFile, UnwritableKernelPathIsRefused) {
  const Status s = WriteFileDurably("/proc/llmq-no-such-entry", "x");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("/proc/llmq-no-such-entry"), std::string::npos) << s.message();
}

TEST(CheckWritable, AcceptsWhatDurableFileCanWrite) {
  const std::string dir = testing::CurrentTestDir();
  EXPECT_TRUE(CheckWritable(dir + "/new.jsonl").ok());
  ASSERT_TRUE(WriteFileDurably(dir + "/existing", "x").ok());
  EXPECT_TRUE(CheckWritable(dir + "/existing").ok());
  EXPECT_TRUE(CheckWritable("-").ok());
  EXPECT_TRUE(CheckWritable("/dev/null").ok());
  ASSERT_EQ(::mkfifo((dir + "/pipe").c_str(), 0600), 0);
  EXPECT_TRUE(CheckWritable(dir + "/pipe").ok()) << "a FIFO without a reader is still writable";
  fs::create_symlink("existing", dir + "/link");
  EXPECT_TRUE(CheckWritable(dir + "/link").ok());
  EXPECT_EQ(Names(dir), (std::vector<std::string>{"existing", "link", "pipe"}))
      << "the probe file is removed; nothing is created or truncated";
  EXPECT_EQ(ReadAll(dir + "/existing"), "x");
}

TEST(CheckWritable, RefusesWhatDurableFileCannotWrite) {
  const std::string dir = testing::CurrentTestDir();
  const struct {
    std::string path;
    int err;
  } cases[] = {
      {dir, EISDIR},
      {dir + "/missing/out", ENOENT},
      {"/etc/passwd/x", ENOTDIR},
      {"/proc/llmq-no-such-entry/x", ENOENT},
  };
  for (const auto& c : cases) {
    const Status s = CheckWritable(c.path);
    ASSERT_FALSE(s.ok()) << c.path;
    EXPECT_NE(s.message().find(c.path), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(std::strerror(c.err)), std::string::npos) << s.message();
  }
  EXPECT_FALSE(CheckWritable("").ok());
}

TEST(CheckWritable, RefusesAFolderWithoutWritePermission) {
  if (::geteuid() == 0) GTEST_SKIP() << "running as root: permissions do not apply to root";
  const std::string dir = testing::CurrentTestDir();
  fs::create_directories(dir + "/ro");
  fs::permissions(dir + "/ro", fs::perms::owner_read | fs::perms::owner_exec);
  const Status s = CheckWritable(dir + "/ro/out");
  fs::permissions(dir + "/ro", fs::perms::owner_all);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(std::strerror(EACCES)), std::string::npos) << s.message();
}

TEST(SameFile, ComparesByIdentity) {
  const std::string dir = testing::CurrentTestDir();
  ASSERT_TRUE(WriteFileDurably(dir + "/a", "1").ok());
  ASSERT_TRUE(WriteFileDurably(dir + "/b", "1").ok());
  fs::create_hard_link(dir + "/a", dir + "/hard");
  fs::create_symlink("a", dir + "/soft");
  EXPECT_TRUE(SameFile(dir + "/a", dir + "/a"));
  EXPECT_TRUE(SameFile(dir + "/a", dir + "/./a"));
  EXPECT_TRUE(SameFile(dir + "/a", dir + "/hard"));
  EXPECT_TRUE(SameFile(dir + "/soft", dir + "/a"));
  EXPECT_FALSE(SameFile(dir + "/a", dir + "/b")) << "same content, different files";
  EXPECT_FALSE(SameFile(dir + "/a", dir + "/missing"));
  EXPECT_TRUE(SameFile(dir + "/missing", dir + "/missing")) << "equal names";
}

}  // namespace
}  // namespace llmq
