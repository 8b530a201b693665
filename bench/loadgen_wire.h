#pragma once

// What bmas_loadgen sends and how it reads what comes back: its options, the target URL, the
// prompts and request bodies it makes, and the readers of server-sent events and of each JSON
// chunk. No I/O here; loadgen.cc drives the connections.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace bmas::loadgen {

struct Options {
  std::string url;
  std::vector<std::string> api_keys;  // client i sends api_keys[i % n] as a Bearer token
  std::string endpoint = "completions";
  std::string model;
  int concurrency = 1;
  double duration_s = 0;  // > 0: run for this long instead of a fixed request count
  int requests_per_client = 4;
  int prompt_words = 100;
  std::string prompt_file;
  std::string system_prompt_dir;
  double think_ms = 0;   // pause between the end of a client's request and its next one
  double ramp_up_s = 0;  // clients start evenly over this; requests sent in it are not counted
  int max_tokens = 128;
  bool no_stream = false;
  bool json = false;
  uint64_t seed = 0;
  int connect_timeout_ms = 5000;
  double request_timeout_s = 300;
  int threads = 1;
};

// Where requests go, from --url and --endpoint.
struct Target {
  std::string host;
  std::string port;
  std::string host_header;
  std::string path;  // e.g. "/v1/completions"
};

// Parses "http://host[:port][/prefix]". The request path is the prefix, "/v1" (unless the
// prefix already ends with it), then "/completions" or "/chat/completions".
// Throws std::invalid_argument on a URL it cannot use.
Target ParseTarget(std::string_view url, std::string_view endpoint);

// A small, fast, seedable generator (SplitMix64).
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

 private:
  uint64_t state_;
};

// `words` random lowercase words of 2-4 letters separated by spaces. With bmas's tokenizer
// (and most BPE vocabularies) that is about one token per word. Different seeds give prompts
// that differ from the first word, so they share no cacheable prefix.
std::string MakePrompt(uint64_t seed, int words);

// `system_prompt` (chat only; may be null) comes before the user message `prompt`.
std::string BuildRequestBody(const Options& options, std::string_view prompt,
                             const std::string* system_prompt);

// Splits a text/event-stream into events, fed in arbitrary pieces. Calls on_data(string_view)
// with the data of each event that has "data:" lines (joined by '\n'); other fields and
// comments are ignored. Lines end with "\n" or "\r\n".
class SseParser {
 public:
  template <typename OnData>
  void Feed(std::string_view bytes, OnData&& on_data) {
    while (!bytes.empty()) {
      size_t newline = bytes.find('\n');
      if (newline == std::string_view::npos) {
        line_.append(bytes);
        return;
      }
      line_.append(bytes.substr(0, newline));
      bytes.remove_prefix(newline + 1);
      std::string_view line = line_;
      if (line.ends_with('\r')) line.remove_suffix(1);
      if (line.empty()) {
        if (has_data_) on_data(std::string_view(data_));
        data_.clear();
        has_data_ = false;
      } else if (line.starts_with("data:")) {
        line.remove_prefix(5);
        if (line.starts_with(' ')) line.remove_prefix(1);
        if (has_data_) data_ += '\n';
        data_.append(line);
        has_data_ = true;
      }
      line_.clear();
    }
  }

  void Reset() {
    line_.clear();
    data_.clear();
    has_data_ = false;
  }

 private:
  std::string line_;  // the incomplete line so far
  std::string data_;  // the data of the event so far
  bool has_data_ = false;
};

// What one streamed event or one whole non-streamed response says.
struct ParsedChunk {
  bool has_token = false;  // non-empty choices[0].text or choices[0].delta.content
  std::optional<int64_t> completion_tokens;
  std::optional<int64_t> prompt_tokens;
  std::string error;  // a JSON parse failure or an "error" object from the server
};

// Parses one JSON chunk. Small chunks parse without touching the heap.
ParsedChunk ParseChunk(std::string_view json);

}  // namespace bmas::loadgen
