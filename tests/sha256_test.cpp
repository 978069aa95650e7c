// Tests for jobs/sha256: the FIPS 180-4 / NIST example vectors, whole and streamed in every split.
#include "jobs/sha256.h"

#include <gtest/gtest.h>
#include <string>

namespace llmq::jobs {
namespace {

constexpr char kAbc[] = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
constexpr char k448[] = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
constexpr char k448Digest[] = "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1";

TEST(Sha256, EmptyMessage) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256().HexDigest(), Sha256Hex(""));
}

TEST(Sha256, Abc) {
  EXPECT_EQ(Sha256Hex("abc"), kAbc);
}

TEST(Sha256, FourHundredFortyEightBits) {
  // 56 bytes: the padding needs a second block.
  EXPECT_EQ(Sha256Hex(k448), k448Digest);
}

TEST(Sha256, FourBlockMessage) {
  EXPECT_EQ(
      Sha256Hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmno"
                "pqklmnopqrlmnopqrsmnopqrstnopqrstu"),
      "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
}

TEST(Sha256, OneMillionAs) {
  Sha256 h;
  const std::string chunk(1000, 'a');
  for (int i = 0; i < 1000; ++i) h.Update(chunk);
  const std::string expected = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";
  EXPECT_EQ(h.HexDigest(), expected);
  EXPECT_EQ(Sha256Hex(std::string(1000000, 'a')), expected);
}

TEST(Sha256, EverySplitGivesTheSameDigest) {
  const std::string msg = std::string(k448) + std::string(k448) + "tail";  // 116 bytes
  const std::string whole = Sha256Hex(msg);
  for (size_t a = 0; a <= msg.size(); ++a) {
    for (size_t b = a; b <= msg.size(); b += 7) {
      Sha256 h;
      h.Update(std::string_view(msg).substr(0, a));
      h.Update(std::string_view(msg).substr(a, b - a));
      h.Update(std::string_view(msg).substr(b));
      ASSERT_EQ(h.HexDigest(), whole) << "split at " << a << ", " << b;
    }
  }
}

TEST(Sha256, DigestDoesNotDisturbARunningHash) {
  Sha256 h;
  h.Update("ab");
  EXPECT_EQ(h.HexDigest(), Sha256Hex("ab"));
  h.Update("c");
  EXPECT_EQ(h.HexDigest(), kAbc);
  h.Reset();
  h.Update("abc");
  EXPECT_EQ(h.HexDigest(), kAbc);
}

}  // namespace
}  // namespace llmq::jobs
