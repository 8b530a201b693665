#include "engine/tokenizer.h"

#include <array>

namespace bmas::engine {
namespace {

constexpr uint64_t kFnvOffset = 1469598103934665603ULL;
constexpr uint64_t kFnvPrime = 1099511628211ULL;

bool IsAlnum(unsigned char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

// Length of the piece that starts at text[i].
size_t PieceLength(std::string_view text, size_t i) {
  const size_t n = text.size();
  const auto c = static_cast<unsigned char>(text[i]);
  if (c == '<' && i + 1 < n && text[i + 1] == '|') {
    size_t end = text.find("|>", i + 2);
    if (end != std::string_view::npos && end + 2 - i <= 32) return end + 2 - i;
  }
  size_t j = i;
  if (c == ' ' && i + 1 < n && IsAlnum(static_cast<unsigned char>(text[i + 1]))) ++j;
  if (IsAlnum(static_cast<unsigned char>(text[j]))) {
    size_t k = j;
    while (k < n && k - j < 4 && IsAlnum(static_cast<unsigned char>(text[k]))) ++k;
    return k - i;
  }
  if (c >= 0xC0) {  // lead byte of a multi-byte UTF-8 character
    size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    size_t k = i + 1;
    while (k < n && k - i < len && (static_cast<unsigned char>(text[k]) & 0xC0) == 0x80) ++k;
    return k - i;
  }
  return 1;
}

TokenId HashPiece(std::string_view piece) {
  uint64_t h = kFnvOffset;
  for (char ch : piece) {
    h ^= static_cast<unsigned char>(ch);
    h *= kFnvPrime;
  }
  return static_cast<TokenId>(h % kVocabSize);
}

constexpr std::array<std::string_view, 64> kWords = {
    " the",     " model",  " cluster", " of",      " a",       " GPU",     " and",    " to",
    " token",   " is",     " in",      " that",    " batch",   " for",     " data",   " it",
    " with",    " as",     " on",      " request", " cache",   " be",      " by",     " this",
    " node",    " are",    " from",    " at",      " or",      " an",      " which",  " memory",
    " time",    " we",     " can",     " more",    " each",    " step",    " one",    " their",
    " block",   " all",    " when",    " users",   " will",    " not",     " has",    " job",
    " also",    " was",    " new",     " into",    " other",   " some",    " these",  " than",
    " learning", " then",  " train",   " its",     " first",   " over",    " work",   "."};

}  // namespace

void AppendTokens(std::string_view text, std::vector<TokenId>& tokens) {
  for (size_t i = 0; i < text.size();) {
    size_t len = PieceLength(text, i);
    tokens.push_back(HashPiece(text.substr(i, len)));
    i += len;
  }
}

std::vector<TokenId> Tokenize(std::string_view text) {
  std::vector<TokenId> tokens;
  tokens.reserve(text.size() / 3 + 1);
  AppendTokens(text, tokens);
  return tokens;
}

size_t CountTokens(std::string_view text) {
  size_t count = 0;
  for (size_t i = 0; i < text.size(); i += PieceLength(text, i)) ++count;
  return count;
}

namespace {
constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ULL;
}  // namespace

TokenId SampleToken(uint64_t seed, uint64_t position) {
  // splitmix64 of the pair: cheap and well mixed.
  uint64_t z = seed + kGolden * (position + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return static_cast<TokenId>(z % kVocabSize);
}

std::string_view TokenText(TokenId token) { return kWords[token % kWords.size()]; }

uint64_t AdvanceSeed(uint64_t seed, uint64_t positions) { return seed + kGolden * positions; }

std::optional<size_t> CountSampledTokens(uint64_t seed, std::string_view text) {
  size_t count = 0;
  // Every token's text is at least one byte, so this ends within text.size() steps.
  while (!text.empty()) {
    std::string_view word = TokenText(SampleToken(seed, count));
    if (!text.starts_with(word)) return std::nullopt;
    text.remove_prefix(word.size());
    ++count;
  }
  return count;
}

}  // namespace bmas::engine
