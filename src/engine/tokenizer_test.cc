#include "engine/tokenizer.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

namespace bmas::engine {
namespace {

// The documented id of a piece: 64-bit FNV-1a of its bytes, modulo the vocabulary size.
TokenId Fnv1aId(std::string_view piece) {
  uint64_t h = 1469598103934665603ULL;
  for (char c : piece) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ULL;
  }
  return static_cast<TokenId>(h % kVocabSize);
}

struct PieceCase {
  std::string name;
  std::string text;
  std::vector<std::string> pieces;
};

class TokenizerPieceTest : public testing::TestWithParam<PieceCase> {};

TEST_P(TokenizerPieceTest, FollowsTheDocumentedPieceRule) {
  const PieceCase& c = GetParam();
  std::vector<TokenId> want;
  for (const std::string& piece : c.pieces) want.push_back(Fnv1aId(piece));
  EXPECT_EQ(Tokenize(c.text), want);
  EXPECT_EQ(CountTokens(c.text), c.pieces.size());
}

const std::string k28 = std::string(28, 'a');
const std::string k30 = std::string(30, 'a');

INSTANTIATE_TEST_SUITE_P(
    Rules, TokenizerPieceTest,
    testing::Values(
        PieceCase{"Empty", "", {}}, PieceCase{"ShortWord", "cat", {"cat"}},
        PieceCase{"FourLetterWord", "word", {"word"}},
        PieceCase{"LongWordSplitsEveryFour", "tokenizer", {"toke", "nize", "r"}},
        PieceCase{"SpaceJoinsFollowingWord", " hello", {" hell", "o"}},
        PieceCase{"LettersAndDigitsMix", "abc123def", {"abc1", "23de", "f"}},
        PieceCase{"Sentence", "Hi, there!", {"Hi", ",", " ther", "e", "!"}},
        PieceCase{"DoubleSpace", "a  b", {"a", " ", " b"}},
        PieceCase{"TrailingSpace", "a ", {"a", " "}},
        PieceCase{"Newline", "x\ny", {"x", "\n", "y"}},
        PieceCase{"SpaceBeforePunctuation", "a ,", {"a", " ", ","}},
        PieceCase{"ChatMarker", "<|user|>hi", {"<|user|>", "hi"}},
        PieceCase{"ChatMarkersBackToBack", "<|a|><|b|>", {"<|a|>", "<|b|>"}},
        PieceCase{"ChatMarkerOf32Bytes", "<|" + k28 + "|>", {"<|" + k28 + "|>"}},
        PieceCase{
            "TooLongMarkerIsNotOnePiece",
            "<|" + k30 + "|>",
            {"<", "|", "aaaa", "aaaa", "aaaa", "aaaa", "aaaa", "aaaa", "aaaa", "aa", "|", ">"}},
        PieceCase{"UnclosedMarker", "<|ab", {"<", "|", "ab"}},
        PieceCase{"TwoByteUtf8", "caf\xC3\xA9", {"caf", "\xC3\xA9"}},
        PieceCase{"ThreeByteUtf8", "\xE6\x97\xA5\xE6\x9C\xAC", {"\xE6\x97\xA5", "\xE6\x9C\xAC"}},
        PieceCase{"FourByteUtf8", "\xF0\x9F\x98\x80!", {"\xF0\x9F\x98\x80", "!"}},
        PieceCase{"SpaceBeforeUtf8IsItsOwnPiece", " \xC3\xA9", {" ", "\xC3\xA9"}},
        PieceCase{"TruncatedUtf8", "\xE6\x97", {"\xE6\x97"}}),
    [](const testing::TestParamInfo<PieceCase>& info) { return info.param.name; });

const char kEnglish[] =
    "The scheduler decides, at every step, which requests run and how many of their tokens are "
    "computed. Requests that are already decoding come first; then waiting requests are admitted "
    "while the token budget and the free blocks of the cache allow it. A long prompt is split "
    "into chunks so that decoding requests keep producing tokens at a steady pace.\n";

TEST(TokenizerTest, IsDeterministic) {
  EXPECT_EQ(Tokenize(kEnglish), Tokenize(kEnglish));
  EXPECT_FALSE(Tokenize(kEnglish).empty());
}

TEST(TokenizerTest, CountTokensMatchesTokenize) {
  for (std::string_view text :
       {std::string_view(""), std::string_view(" "), std::string_view(kEnglish),
        std::string_view("<|system|>You are helpful.<|user|>Hello!<|assistant|>"),
        std::string_view("\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E and \xC3\xA9t\xC3\xA9")}) {
    EXPECT_EQ(CountTokens(text), Tokenize(text).size()) << text;
  }
}

TEST(TokenizerTest, AppendTokensAppends) {
  std::vector<TokenId> tokens = {7};
  AppendTokens("hello world", tokens);
  std::vector<TokenId> want = {7};
  for (TokenId t : Tokenize("hello world")) want.push_back(t);
  EXPECT_EQ(tokens, want);
}

TEST(TokenizerTest, IdsAreInsideTheVocabulary) {
  for (TokenId t : Tokenize(kEnglish)) EXPECT_LT(t, kVocabSize);
}

TEST(TokenizerTest, ChatMarkersAreOneTokenEach) {
  for (std::string_view marker : {"<|user|>", "<|assistant|>", "<|system|>", "<|eot_id|>"}) {
    EXPECT_EQ(CountTokens(marker), 1u) << marker;
  }
  std::string chat = "<|user|>hi<|assistant|>";
  EXPECT_EQ(CountTokens(chat), 3u);
}

TEST(TokenizerTest, EnglishTextGivesAboutOneTokenPerFourCharacters) {
  double chars_per_token =
      static_cast<double>(std::string_view(kEnglish).size()) / CountTokens(kEnglish);
  EXPECT_GT(chars_per_token, 3.0);
  EXPECT_LT(chars_per_token, 5.0);
}

TEST(SampleTokenTest, IsDeterministicAndInsideTheVocabulary) {
  for (uint64_t pos = 0; pos < 100; ++pos) {
    EXPECT_EQ(SampleToken(42, pos), SampleToken(42, pos));
    EXPECT_LT(SampleToken(42, pos), kVocabSize);
  }
}

TEST(SampleTokenTest, DependsOnSeedAndPosition) {
  std::vector<TokenId> a, b;
  std::set<TokenId> distinct;
  for (uint64_t pos = 0; pos < 64; ++pos) {
    a.push_back(SampleToken(1, pos));
    b.push_back(SampleToken(2, pos));
    distinct.insert(a.back());
  }
  EXPECT_NE(a, b);
  // A well-mixed generator gives (almost) no repeats in 64 draws from 128k.
  EXPECT_GE(distinct.size(), 60u);
}

TEST(SampleTokenTest, AdvanceSeedShiftsPositions) {
  for (uint64_t k : {0u, 1u, 7u, 1000u}) {
    for (uint64_t pos = 0; pos < 50; ++pos) {
      EXPECT_EQ(SampleToken(AdvanceSeed(77, k), pos), SampleToken(77, k + pos)) << k << " " << pos;
    }
  }
}

TEST(SampleTokenTest, CountSampledTokensFindsHowManyTokensSpellAText) {
  std::string text;
  for (uint64_t pos = 0; pos < 20; ++pos) {
    EXPECT_EQ(CountSampledTokens(5, text), pos);
    text += TokenText(SampleToken(5, pos));
  }
  EXPECT_EQ(CountSampledTokens(5, text), 20u);
  EXPECT_EQ(CountSampledTokens(5, ""), 0u);
  EXPECT_EQ(CountSampledTokens(6, text), std::nullopt);  // another seed's words
  // Cut inside a token: no word of the list is a prefix of " th".
  EXPECT_EQ(CountSampledTokens(5, text + " th"), std::nullopt);
  EXPECT_EQ(CountSampledTokens(5, " written by a person"), std::nullopt);
}

TEST(TokenTextTest, IsAnEnglishWordOrPunctuation) {
  for (uint64_t pos = 0; pos < 100; ++pos) {
    std::string_view text = TokenText(SampleToken(9, pos));
    ASSERT_FALSE(text.empty());
    EXPECT_TRUE(text[0] == ' ' || text == ".") << text;
  }
  EXPECT_EQ(TokenText(SampleToken(3, 5)), TokenText(SampleToken(3, 5)));
}

}  // namespace
}  // namespace bmas::engine
