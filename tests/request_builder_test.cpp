// Tests for daemon/request_builder.h's TokenPieces: the bytes each chosen id added to its
// completion's text, on a generated model's real tokenizer (sentencepiece with byte fallback),
// for completions as the engine reports them (text, and where each id's text begins).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "daemon/request_builder.h"
#include "engine/text/tokenizer.h"
#include "tests/test_util.h"

namespace llmq {
namespace {

class TokenPiecesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string model = testing::TmpDir("token_pieces_model");
    ASSERT_EQ(testing::RunLlmq({"make-model", "--shape", "tiny", "--out", model, "--seed", "4"})
                  .exit_code,
              0);
    ASSERT_TRUE(Tokenizer::Load(model, &tok_).ok());
  }
  static void TearDownTestSuite() { tok_.reset(); }

  // The byte-fallback piece of byte `b`.
  static int Byte(int b) {
    char piece[8];
    std::snprintf(piece, sizeof piece, "<0x%02X>", b);
    const int id = tok_->PieceToId(piece);
    EXPECT_GE(id, 0) << piece;
    return id;
  }
  // A completion of `ids` whose text is `text`, id i's text beginning at text_begin[i].
  static Completion Made(const std::vector<int>& ids, const std::string& text,
                         const std::vector<int32_t>& text_begin) {
    Completion c;
    c.text = text;
    for (int id : ids) {
      c.ids.push_back(id);
      c.logprobs.push_back({id, -1.0f, {}});
    }
    c.text_begin = text_begin;
    return c;
  }
  static std::unique_ptr<Tokenizer> tok_;
};
std::unique_ptr<Tokenizer> TokenPiecesTest::tok_;

TEST_F(TokenPiecesTest, EachIdGetsTheTextItAdded) {
  const int bos = tok_->PieceToId("<s>"), a = tok_->PieceToId("a");
  ASSERT_GE(bos, 0);
  ASSERT_GE(a, 0);
  // A control id adds nothing; the id after it its own text.
  EXPECT_EQ(TokenPieces(*tok_, Made({bos, a, bos}, "a", {0, 0, 1})),
            (std::vector<std::string>{"", "a", ""}));
  // A stop string cut the text inside the second id (the engine clamps its begin to the text).
  EXPECT_EQ(TokenPieces(*tok_, Made({a, a, a}, "aa", {0, 1, 2})),
            (std::vector<std::string>{"a", "a", ""}));
}

TEST_F(TokenPiecesTest, PartsOfACharacterGetTheirOwnBytes) {
  // "€" = E2 82 AC over three byte pieces: the decoder released it with the third.
  EXPECT_EQ(
      TokenPieces(*tok_, Made({Byte(0xE2), Byte(0x82), Byte(0xAC)}, "\xe2\x82\xac", {0, 0, 0})),
      (std::vector<std::string>{"\xe2", "\x82", "\xac"}));
}

TEST_F(TokenPiecesTest, BytesThatNeverMadeACharacterAreTheirReplacementCharacters) {
  // Two lone E2 bytes: the text shows each as U+FFFD, released together.
  EXPECT_EQ(TokenPieces(*tok_, Made({Byte(0xE2), Byte(0xE2)}, "\xef\xbf\xbd\xef\xbf\xbd", {0, 0})),
            (std::vector<std::string>{"\xef\xbf\xbd", "\xef\xbf\xbd"}));
}

TEST_F(TokenPiecesTest, ATextItsIdsDoNotSpellGoesToTheLastOne) {
  // Held back, then a text neither their bytes nor their replacements spell: the last id gets it
  // (still joined the text).
  const std::vector<std::string> p =
      TokenPieces(*tok_, Made({Byte(0xE2), Byte(0x82)}, "xyz", {0, 0}));
  EXPECT_EQ(p, (std::vector<std::string>{"", "xyz"}));
}

TEST_F(TokenPiecesTest, WithoutTextBeginEachIdsOwnBytes) {
  const int a = tok_->PieceToId("a");
  Completion c = Made({a, Byte(0xE2)}, "a\xef\xbf\xbd", {});
  EXPECT_EQ(TokenPieces(*tok_, c), (std::vector<std::string>{"a", "\xe2"}));
}

}  // namespace
}  // namespace llmq
