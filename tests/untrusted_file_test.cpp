// base/untrusted_file.h and base/text.h: an untrusted path opened once, without following links
// or blocking, and read only through its descriptor; untrusted strings shown escaped.
#include "base/untrusted_file.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "base/text.h"
#include "tests/test_util.h"

namespace llmq {
namespace {

namespace fs = std::filesystem;

class UntrustedFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::CurrentTestDir();
    dir_fd_ = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ASSERT_GE(dir_fd_, 0);
  }
  void TearDown() override { ::close(dir_fd_); }
  Status Open(const std::string& name, UntrustedFile* f, int64_t max = 1 << 20) {
    return UntrustedFile::Open(dir_fd_, name, "inbox/" + name, max, "spool.max_file_bytes", f);
  }
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ + "/" + name, std::ios::binary) << text;
  }
  std::string dir_;
  int dir_fd_ = -1;
};

TEST_F(UntrustedFileTest, ReadsARegularFileThroughItsDescriptor) {
  Write("a.jsonl", "line one\nline two\n");
  UntrustedFile f;
  ASSERT_TRUE(Open("a.jsonl", &f).ok());
  EXPECT_EQ(f.size(), 18);
  // Replaced by another file under the same name: the descriptor still reads the first one.
  Write("b.jsonl", "something else entirely\n");
  fs::rename(dir_ + "/b.jsonl", dir_ + "/a.jsonl");
  EXPECT_FALSE(f.IsAt(dir_fd_, "a.jsonl"));
  std::string all;
  ASSERT_TRUE(f.ReadAll(&all).ok());
  EXPECT_EQ(all, "line one\nline two\n");
  auto s1 = f.Stream(), s2 = f.Stream();  // independent passes
  std::string l1, l2;
  std::getline(*s1, l1);
  std::getline(*s1, l1);
  std::getline(*s2, l2);
  EXPECT_EQ(l1, "line two");
  EXPECT_EQ(l2, "line one");
}

TEST_F(UntrustedFileTest, RefusesLinksFifosFoldersSocketsAndDevicesWithoutBlocking) {
  Write("secret", "top secret\n");
  fs::create_symlink(dir_ + "/secret", dir_ + "/link.jsonl");
  fs::create_symlink("/dev/zero", dir_ + "/zero.jsonl");
  ASSERT_EQ(::mkfifo((dir_ + "/fifo.jsonl").c_str(), 0600), 0);  // no writer: open must not wait
  fs::create_directory(dir_ + "/dir.jsonl");
  const int sock = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strcpy(addr.sun_path, "sock.jsonl");  // relative: the folder's path may be too long
  const fs::path cwd = fs::current_path();
  fs::current_path(dir_);
  const int bound = ::bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  fs::current_path(cwd);
  ASSERT_EQ(bound, 0) << std::strerror(errno);
  const std::pair<const char*, const char*> cases[] = {{"link.jsonl", "a symbolic link"},
                                                       {"zero.jsonl", "a symbolic link"},
                                                       {"fifo.jsonl", "a FIFO"},
                                                       {"dir.jsonl", "a folder"},
                                                       {"sock.jsonl", "not a regular file"}};
  for (const auto& [name, what] : cases) {
    UntrustedFile f;
    const Status st = Open(name, &f);
    EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << name << ": " << st.message();
    EXPECT_NE(st.message().find(std::string("inbox/") + name), std::string::npos) << st.message();
    EXPECT_NE(st.message().find(what), std::string::npos) << st.message();
    EXPECT_FALSE(f.is_open());
  }
  ::close(sock);
  UntrustedFile f;
  EXPECT_EQ(Open("absent.jsonl", &f).code(), Status::Code::kNotFound);
}

TEST_F(UntrustedFileTest, SizeIsCheckedOnTheDescriptorBeforeAnyRead) {
  Write("big.jsonl", std::string(1000, 'x'));
  UntrustedFile f;
  const Status st = Open("big.jsonl", &f, 999);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("1000 bytes, over spool.max_file_bytes (999)"), std::string::npos)
      << st.message();
  EXPECT_TRUE(Open("big.jsonl", &f, 1000).ok());
}

TEST_F(UntrustedFileTest, ReadsStopAtTheSizeSeenAtOpenAndChangesAreSeen) {
  Write("grow.jsonl", "abc\n");
  UntrustedFile f;
  ASSERT_TRUE(Open("grow.jsonl", &f).ok());
  EXPECT_TRUE(f.Unchanged().ok());
  std::ofstream(dir_ + "/grow.jsonl", std::ios::app) << "appended later\n";
  auto s = f.Stream();
  const std::string seen((std::istreambuf_iterator<char>(*s)), std::istreambuf_iterator<char>());
  EXPECT_EQ(seen, "abc\n");
  const Status st = f.Unchanged();
  EXPECT_EQ(st.code(), Status::Code::kIoError);
  EXPECT_NE(st.message().find("changed while it was being read"), std::string::npos);
  // Truncated: ReadAll says so instead of returning a short file.
  UntrustedFile g;
  ASSERT_TRUE(Open("grow.jsonl", &g).ok());
  ASSERT_EQ(::truncate((dir_ + "/grow.jsonl").c_str(), 2), 0);
  std::string all;
  EXPECT_EQ(g.ReadAll(&all).code(), Status::Code::kIoError);
}

TEST_F(UntrustedFileTest, AnOddNameIsShownEscapedInMessages) {
  const std::string name = "bad\xff\xfe\nline.jsonl";
  ASSERT_EQ(::mkfifo((dir_ + "/" + name).c_str(), 0600), 0);
  UntrustedFile f;
  const Status st = Open(name, &f);
  EXPECT_NE(st.message().find("inbox/bad\\xff\\xfe\\nline.jsonl: it is a FIFO"), std::string::npos)
      << st.message();
  EXPECT_EQ(st.message().find('\n'), std::string::npos);
}

TEST(TextTest, EscapedKeepsOrdinaryTextAndShowsTheRest) {
  EXPECT_EQ(Escaped("jobs-2026 été 🌙.jsonl"), "jobs-2026 été 🌙.jsonl");
  EXPECT_EQ(Escaped("a\nb\tc\rd"), "a\\nb\\tc\\rd");
  EXPECT_EQ(Escaped("back\\slash"), "back\\\\slash");
  EXPECT_EQ(Escaped(std::string("nul\0x", 5)), "nul\\x00x");
  EXPECT_EQ(Escaped("\x7f\xc2\x85"), "\\x7f\\xc2\\x85");  // DEL, C1 NEL
  EXPECT_EQ(Escaped("\xff\xfe"), "\\xff\\xfe");           // not UTF-8
  EXPECT_EQ(Escaped("\xc0\xaf"), "\\xc0\\xaf");           // overlong '/'
  EXPECT_EQ(Escaped("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // a surrogate
  EXPECT_EQ(Escaped("\xe2\x82"), "\\xe2\\x82");           // cut short
  for (const std::string s : {"\xff", "a\nb", "\xc2\x85", "ok"}) {
    const std::string e = Escaped(s);
    EXPECT_TRUE(IsUtf8(e)) << e;
    EXPECT_FALSE(HasControlOrInvalid(e)) << e;
  }
  EXPECT_TRUE(HasControlOrInvalid("a\nb"));
  EXPECT_TRUE(HasControlOrInvalid("\xff"));
  EXPECT_FALSE(HasControlOrInvalid("été\\"));
  EXPECT_TRUE(IsUtf8("été"));
  EXPECT_FALSE(IsUtf8("\xe9t\xe9"));
}

}  // namespace
}  // namespace llmq
