#pragma once

// The simulated engine's tokenizer and output text: cheap, deterministic, documented.
//
// Rule (documented in the README): text splits into pieces, left to right:
//   1. a chat marker "<|...|>" of at most 32 bytes is one piece;
//   2. one optional space followed by 1-4 ASCII letters or digits is one piece
//      (a longer word continues as further pieces of up to 4);
//   3. a UTF-8 encoded character that is not ASCII is one piece;
//   4. any other byte (punctuation, a space not before a letter, newline) is one piece.
// A piece's token id is the 64-bit FNV-1a hash of its bytes modulo kVocabSize. English text
// gives about one token per 4 characters, close to real BPE vocabularies.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace bmas::engine {

using TokenId = uint32_t;

// Llama 3's vocabulary size.
inline constexpr TokenId kVocabSize = 128256;

std::vector<TokenId> Tokenize(std::string_view text);

// Appends the tokens of `text` to `tokens`.
void AppendTokens(std::string_view text, std::vector<TokenId>& tokens);

// Number of tokens `text` has, without building them.
size_t CountTokens(std::string_view text);

// The token a request samples at output position `position` (0-based), from its seed.
TokenId SampleToken(uint64_t seed, uint64_t position);

// The text of a sampled token: a space and a word from a fixed list of English words.
std::string_view TokenText(TokenId token);

// The seed that samples from position 0 what `seed` samples from position `positions`:
// SampleToken(AdvanceSeed(s, k), p) == SampleToken(s, k + p).
uint64_t AdvanceSeed(uint64_t seed, uint64_t positions);

// How many tokens sampled from `seed` (positions 0, 1, ...) spell exactly `text`; nullopt
// when no run of them does (text the engine did not generate, or cut inside a token).
std::optional<size_t> CountSampledTokens(uint64_t seed, std::string_view text);

}  // namespace bmas::engine
