// What the gateway's usage journal adds to a request: one UsageJournal::Append (a copy into the
// memory-mapped file, under the gateway's lock), against the in-memory map update that Meter
// already does for the same usage. A flush (Seal, then Release once the store has it) every
// `batch` appends, as every 0.5 s at that rate.

#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <string>
#include <tuple>

#include "gateway/gateway.h"
#include "gateway/usage_journal.h"

namespace {

using bmas::UsageDelta;
using bmas::gateway::UsageJournal;

constexpr int kBatch = 5000;  // appends between flushes: 10,000 requests/s at 0.5 s

void BM_JournalAppend(benchmark::State& state) {
  char dir[] = "/tmp/bmas-journal-bench-XXXXXX";
  if (mkdtemp(dir) == nullptr) return state.SkipWithError("mkdtemp");
  auto journal = UsageJournal::Open(bmas::gateway::UsageJournalPath(dir, 8000));
  if (!journal) return state.SkipWithError(journal.error().message.c_str());
  const std::string user = "student042", model = "meta-llama/Llama-3.1-8B-Instruct",
                    backend = "https://10.200.0.11:18100";
  int n = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize((*journal)->Append(29500000, user, model, backend, 1, 12, 16));
    if (++n == kBatch) {
      state.PauseTiming();
      (*journal)->Release((*journal)->Seal());
      n = 0;
      state.ResumeTiming();
    }
  }
  journal->reset();
  std::system((std::string("rm -rf ") + dir).c_str());
}
BENCHMARK(BM_JournalAppend);

// The reference: the (minute, user, model, backend) entry Meter updates for every request, found
// as Meter finds it, with a tuple of views (no allocation).
void BM_UnflushedMapUpdate(benchmark::State& state) {
  std::map<std::tuple<int64_t, std::string, std::string, std::string>, UsageDelta,
           bmas::gateway::ViewTupleLess>
      unflushed;
  const std::string user = "student042", model = "meta-llama/Llama-3.1-8B-Instruct",
                    backend = "https://10.200.0.11:18100";
  for (int u = 0; u < 50; ++u) {
    unflushed[{29500000, "student" + std::to_string(u), model, backend}] = UsageDelta{};
  }
  unflushed[{29500000, user, model, backend}] = UsageDelta{};
  for (auto _ : state) {
    const std::tuple<int64_t, std::string_view, std::string_view, std::string_view> key(
        29500000, user, model, backend);
    UsageDelta& d = unflushed.find(key)->second;
    d.requests += 1;
    d.prompt_tokens += 12;
    d.completion_tokens += 16;
    benchmark::DoNotOptimize(d);
  }
}
BENCHMARK(BM_UnflushedMapUpdate);

}  // namespace

BENCHMARK_MAIN();
