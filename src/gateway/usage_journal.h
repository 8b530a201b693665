#pragma once

// UsageJournal: the gateway's metered usage that is not yet in the store, in a memory-mapped
// file, so that a gateway killed between two flushes (SIGKILL, the OOM killer, a crash) loses
// none of it. Appending is a copy into shared memory under the gateway's lock: no system call
// per request. The kernel's page cache keeps what was copied when the process dies; a crash of
// the machine itself may lose what the kernel had not written back yet.
//
// The file holds kSegments segments. Appends fill the active segment, then the next empty one.
// A flush seals the segments written since the last flush (Seal) and, once the store has their
// usage, empties them (Release). A gateway that opens a journal its predecessor left takes the
// usage in it (TakeRecovered) and keeps those records until its first flush releases them.
//
// A record: a 4-byte length written last, so a record whose write was cut short reads as the
// end of its segment; then the usage (minute, requests, tokens, user, model, backend).
//
// Exactly once, with one window: a gateway killed after the store committed a flush and before
// Release zeroed the segments (a memset) counts that flush again when it restarts.
//
// Not thread-safe: the gateway calls it under its own lock.

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "store/store.h"

namespace bmas::gateway {

class UsageJournal {
 public:
  static constexpr int kSegments = 4;
  static constexpr size_t kDefaultSegmentBytes = 1 << 20;

  // Opens or creates `path` (mode 0600) with segments of `segment_bytes`, and takes an exclusive
  // lock on it: a second gateway on the same file is refused, naming the file and the fix. A
  // file that is not a journal (another magic, or cut short) is refused, not overwritten.
  static Result<std::unique_ptr<UsageJournal>> Open(const std::string& path,
                                                    size_t segment_bytes = kDefaultSegmentBytes);
  ~UsageJournal();
  UsageJournal(const UsageJournal&) = delete;
  UsageJournal& operator=(const UsageJournal&) = delete;

  // What the previous gateway on this file left unflushed; the second call returns nothing.
  std::vector<UsageDelta> TakeRecovered();

  // Copies `d` into the journal. False when no segment has room (the store has been down for
  // several flushes): the usage is then only in memory, as without a journal.
  bool Append(int64_t minute, std::string_view user, std::string_view model,
              std::string_view backend, int64_t requests, int64_t prompt_tokens,
              int64_t completion_tokens);
  bool Append(const UsageDelta& d) {
    return Append(d.minute, d.user, d.model, d.backend, d.requests, d.prompt_tokens,
                  d.completion_tokens);
  }

  // The segments written since the last Seal (their records are in the batch being flushed);
  // appends go on in empty segments.
  using Sealed = std::vector<int>;
  Sealed Seal();
  // The batch sealed as `sealed` is in the store: zeroes those segments for reuse.
  void Release(const Sealed& sealed);

  const std::string& path() const { return path_; }

 private:
  enum class State : uint8_t { kEmpty, kFilling, kSealed };
  struct Segment {
    State state = State::kEmpty;
    size_t used = 0;  // bytes of records from the segment's start
  };

  UsageJournal(std::string path, int fd, char* base, size_t size, size_t segment_bytes);
  char* SegmentBase(int i) const;
  // Reads the records of segment `i` into `out`; zeroes what follows the last whole one.
  void Recover(int i, std::vector<UsageDelta>* out);
  // An empty segment to append to, or -1.
  int NextEmpty() const;

  std::string path_;
  int fd_ = -1;
  char* base_ = nullptr;
  size_t size_ = 0;
  size_t segment_bytes_ = 0;
  std::array<Segment, kSegments> segments_{};
  int active_ = -1;
  std::vector<UsageDelta> recovered_;
};

// The journal of the gateway whose users' listener is on `port`, beside the store's file.
std::string UsageJournalPath(const std::string& store_dir, int port);

}  // namespace bmas::gateway
