#include "gateway/usage_journal.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace bmas::gateway {
namespace {

// The file: a header, then kSegments segments of `segment_bytes`.
constexpr char kMagic[8] = {'B', 'M', 'A', 'S', 'U', 'J', '0', '1'};
constexpr size_t kHeaderBytes = 64;
// A record: u32 length (of the whole record, a multiple of 8; written last), three u16 string
// lengths, padding to 16, four i64 (minute, requests, prompt, completion), then the strings.
constexpr size_t kFixedBytes = 48;

struct Header {
  char magic[8];
  uint32_t segments;
  uint32_t reserved;
  uint64_t segment_bytes;
};


std::string Errno(const std::string& what, const std::string& path) {
  return fmt::format("usage journal {}: {}: {}", path, what, std::strerror(errno));
}

}  // namespace

std::string UsageJournalPath(const std::string& store_dir, int port) {
  return fmt::format("{}/gateway-usage-{}.journal", store_dir, port);
}

Result<std::unique_ptr<UsageJournal>> UsageJournal::Open(const std::string& path,
                                                         size_t segment_bytes) {
  segment_bytes = std::max<size_t>(segment_bytes & ~size_t{7}, 4096);
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    return Internal(Errno("cannot open it", path) +
                    " (the gateway's state directory must be its own and writable)");
  }
  auto fail = [&](std::string message) -> Result<std::unique_ptr<UsageJournal>> {
    close(fd);
    return Internal(std::move(message));
  };
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      return fail(fmt::format(
          "usage journal {}: another gateway with this state directory and port holds it: give "
          "each gateway its own port or --state-dir",
          path));
    }
    return fail(Errno("cannot lock it", path));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) return fail(Errno("cannot stat it", path));
  if (!S_ISREG(st.st_mode)) return fail(fmt::format("usage journal {}: not a file", path));
  if ((st.st_mode & 077) != 0 && fchmod(fd, 0600) != 0) {
    return fail(Errno("cannot make it private (0600)", path));
  }
  Header h{};
  if (st.st_size == 0) {
    std::memcpy(h.magic, kMagic, sizeof(kMagic));
    h.segments = kSegments;
    h.segment_bytes = segment_bytes;
    const size_t size = kHeaderBytes + kSegments * segment_bytes;
    if (ftruncate(fd, static_cast<off_t>(size)) != 0 ||
        pwrite(fd, &h, sizeof(h), 0) != static_cast<ssize_t>(sizeof(h))) {
      return fail(Errno("cannot make it", path));
    }
  } else if (pread(fd, &h, sizeof(h), 0) != static_cast<ssize_t>(sizeof(h)) ||
             std::memcmp(h.magic, kMagic, sizeof(kMagic)) != 0 || h.segments != kSegments ||
             h.segment_bytes < 4096 || h.segment_bytes % 8 != 0 || h.segment_bytes > (1u << 30) ||
             static_cast<uint64_t>(st.st_size) != kHeaderBytes + kSegments * h.segment_bytes) {
    return fail(fmt::format(
        "usage journal {}: the file is not a bmas usage journal (or was cut short); it is left "
        "as it is: move it away if it holds nothing of bmas's",
        path));
  }
  const size_t size = kHeaderBytes + kSegments * h.segment_bytes;
  void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) return fail(Errno("cannot map it", path));
  std::unique_ptr<UsageJournal> j(
      new UsageJournal(path, fd, static_cast<char*>(base), size, h.segment_bytes));
  for (int i = 0; i < kSegments; ++i) j->Recover(i, &j->recovered_);
  j->active_ = j->NextEmpty();
  return j;
}

UsageJournal::UsageJournal(std::string path, int fd, char* base, size_t size,
                           size_t segment_bytes)
    : path_(std::move(path)), fd_(fd), base_(base), size_(size), segment_bytes_(segment_bytes) {}

UsageJournal::~UsageJournal() {
  munmap(base_, size_);
  close(fd_);
}

char* UsageJournal::SegmentBase(int i) const {
  return base_ + kHeaderBytes + static_cast<size_t>(i) * segment_bytes_;
}

void UsageJournal::Recover(int i, std::vector<UsageDelta>* out) {
  char* seg = SegmentBase(i);
  size_t p = 0;
  while (p + kFixedBytes <= segment_bytes_) {
    uint32_t len = 0;
    std::memcpy(&len, seg + p, sizeof(len));
    if (len == 0 || len < kFixedBytes || len % 8 != 0 || p + len > segment_bytes_) break;
    uint16_t n[3];
    std::memcpy(n, seg + p + 4, sizeof(n));
    if (kFixedBytes + size_t{n[0]} + n[1] + n[2] > len) break;
    UsageDelta d;
    int64_t v[4];
    std::memcpy(v, seg + p + 16, sizeof(v));
    d.minute = v[0];
    d.requests = v[1];
    d.prompt_tokens = v[2];
    d.completion_tokens = v[3];
    const char* s = seg + p + kFixedBytes;
    d.user.assign(s, n[0]);
    d.model.assign(s + n[0], n[1]);
    d.backend.assign(s + n[0] + n[1], n[2]);
    out->push_back(std::move(d));
    p += len;
  }
  // A record cut short by the kill, or garbage: gone, so that appends start on zeroes.
  if (std::any_of(seg + p, seg + segment_bytes_, [](char c) { return c != 0; })) {
    std::memset(seg + p, 0, segment_bytes_ - p);
  }
  segments_[i].used = p;
  segments_[i].state = p > 0 ? State::kFilling : State::kEmpty;
}

std::vector<UsageDelta> UsageJournal::TakeRecovered() { return std::move(recovered_); }

int UsageJournal::NextEmpty() const {
  for (int i = 0; i < kSegments; ++i) {
    if (segments_[i].state == State::kEmpty) return i;
  }
  return -1;
}

bool UsageJournal::Append(int64_t minute, std::string_view user, std::string_view model,
                          std::string_view backend, int64_t requests, int64_t prompt_tokens,
                          int64_t completion_tokens) {
  constexpr size_t kMaxString = 0xffff;
  if (user.size() > kMaxString || model.size() > kMaxString || backend.size() > kMaxString) {
    return false;
  }
  const size_t bytes = (kFixedBytes + user.size() + model.size() + backend.size() + 7) & ~size_t{7};
  if (bytes > segment_bytes_) return false;
  if (active_ < 0 || segments_[active_].used + bytes > segment_bytes_ ||
      segments_[active_].state == State::kSealed) {
    active_ = NextEmpty();
    if (active_ < 0) return false;
  }
  Segment& s = segments_[active_];
  char* r = SegmentBase(active_) + s.used;
  const uint16_t n[3] = {static_cast<uint16_t>(user.size()), static_cast<uint16_t>(model.size()),
                         static_cast<uint16_t>(backend.size())};
  std::memcpy(r + 4, n, sizeof(n));
  const int64_t v[4] = {minute, requests, prompt_tokens, completion_tokens};
  std::memcpy(r + 16, v, sizeof(v));
  char* strings = r + kFixedBytes;
  std::memcpy(strings, user.data(), user.size());
  std::memcpy(strings + user.size(), model.data(), model.size());
  std::memcpy(strings + user.size() + model.size(), backend.data(), backend.size());
  // The length last: a process killed before this store leaves a record that reads as the end
  // of the segment. A killed process's stores that were made are all in the page cache; only the
  // compiler could move this one ahead of the copies, and the release order forbids it.
  std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(r))
      .store(static_cast<uint32_t>(bytes), std::memory_order_release);
  s.used += bytes;
  s.state = State::kFilling;
  return true;
}

UsageJournal::Sealed UsageJournal::Seal() {
  Sealed sealed;
  for (int i = 0; i < kSegments; ++i) {
    if (segments_[i].state == State::kFilling) {
      segments_[i].state = State::kSealed;
      sealed.push_back(i);
    }
  }
  return sealed;
}

void UsageJournal::Release(const Sealed& sealed) {
  for (int i : sealed) {
    if (i < 0 || i >= kSegments || segments_[i].state != State::kSealed) continue;
    std::memset(SegmentBase(i), 0, segments_[i].used);
    segments_[i] = Segment{};
  }
}

}  // namespace bmas::gateway
