// The gateway's metering: tokens per (minute, user, model, backend), the limiter's token
// counts, the prompt-size estimate, and the flush of usage to the store.

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <simdjson.h>
#include <spdlog/spdlog.h>

#include "common/backend_identity.h"
#include "common/operator_auth.h"
#include "gateway/backend_source.h"
#include "gateway/gateway.h"
#include "gateway/gateway_internal.h"
#include "gateway/request.h"
#include "gateway/sse.h"
#include "gateway/usage_report.h"

namespace bmas::gateway {

int64_t Gateway::EstimatePromptTokensLocked(const std::string& model, int64_t chars) const {
  auto it = prompt_ratio_.find(model);
  return it != prompt_ratio_.end() ? it->second.Estimate(chars) : CharsPerToken().Estimate(chars);
}

void Gateway::Meter(Request& r, const Backend& b, PromptCount count, int64_t prompt,
                    int64_t completion, int64_t already_charged) {
  const double now = UnixNow();
  const int64_t minute = static_cast<int64_t>(now) / 60;
  const std::tuple<int64_t, std::string_view, std::string_view, std::string_view> key(
      minute, r.user, r.model, b.id);
  std::lock_guard lock(mu_);
  if (count == PromptCount::kBackends) prompt_ratio_[r.model].Learn(r.prompt_chars, prompt);
  auto entry = unflushed_.find(key);
  if (entry == unflushed_.end()) {
    entry = unflushed_
                .emplace(std::make_tuple(minute, r.user, r.model, b.id),
                         UsageDelta{minute, r.user, r.model, b.id, 0, 0, 0})
                .first;
  }
  r.metered += prompt + completion;
  if (options_.usage_journal &&
      !options_.usage_journal->Append(minute, r.user, r.model, b.id, 1, prompt, completion)) {
    JournalFullLocked();
  }
  UsageDelta& d = entry->second;
  d.requests += 1;
  d.prompt_tokens += prompt;
  d.completion_tokens += completion;
  limiter_.OnTokens(r.user, prompt + completion, now);
  // The fair queue was charged the prompt estimate at admission and streamed tokens as they
  // passed; the rest of the true usage is charged now.
  admission_.Charge(r.model, r.user, r.weight,
                    prompt - r.prompt_estimate + completion - already_charged);
  auto counters = tokens_.find(std::tuple<std::string_view, std::string_view>(r.user, r.model));
  if (counters == tokens_.end()) {
    auto counter = [&](std::string_view kind) {
      return &metrics_.AddCounter("bmas_gateway_tokens_total",
                                  "Tokens metered, by user, model and kind.",
                                  fmt::format("user=\"{}\",model=\"{}\",kind=\"{}\"",
                                              EscapeLabelValue(r.user), EscapeLabelValue(r.model),
                                              kind));
    };
    counters = tokens_
                   .emplace(std::make_tuple(r.user, r.model),
                            TokenCounters{counter("prompt"), counter("completion")})
                   .first;
  }
  counters->second.prompt->Inc(static_cast<double>(prompt));
  counters->second.completion->Inc(static_cast<double>(completion));
}

// ---- Background work ----------------------------------------------------------------------

void Gateway::JournalFullLocked() {
  if (journal_full_) return;
  journal_full_ = true;  // said once per run of the store being behind
  spdlog::warn("gateway: usage journal {} is full (the store has not taken usage for several "
               "flushes): new usage is kept in memory only until a flush succeeds",
               options_.usage_journal->path());
}

void Gateway::MergeUnflushedLocked(UsageDelta d) {
  auto key = std::make_tuple(d.minute, d.user, d.model, d.backend);
  auto [entry, fresh] = unflushed_.try_emplace(std::move(key), d);
  if (fresh) return;
  entry->second.requests += d.requests;
  entry->second.prompt_tokens += d.prompt_tokens;
  entry->second.completion_tokens += d.completion_tokens;
}

awaitable<void> Gateway::Flush() {
  std::vector<UsageDelta> deltas;
  UsageJournal::Sealed sealed;
  {
    std::lock_guard lock(mu_);
    for (auto& [key, d] : unflushed_) deltas.push_back(std::move(d));
    unflushed_.clear();
    if (options_.usage_journal) sealed = options_.usage_journal->Seal();
  }
  if (deltas.empty()) {
    if (!sealed.empty()) {
      std::lock_guard lock(mu_);
      options_.usage_journal->Release(sealed);
    }
    co_return;
  }
  auto write = [&deltas](Store& store) { return store.RecordUsage(deltas); };
  Result<void> written = co_await store_.Run(std::move(write));
  std::lock_guard lock(mu_);
  if (!written) {
    // Kept for the next flush, and in the journal, before the sealed batch is let go.
    spdlog::error("gateway: usage not recorded yet (kept for the next flush): {}",
                  written.error().message);
    for (UsageDelta& d : deltas) {
      if (options_.usage_journal && !options_.usage_journal->Append(d)) JournalFullLocked();
      MergeUnflushedLocked(std::move(d));
    }
  } else {
    journal_full_ = false;
  }
  if (options_.usage_journal) options_.usage_journal->Release(sealed);
}

awaitable<void> Gateway::FlushLoop() {
  net::steady_timer timer(io_);
  // At once first: what an earlier gateway left in the usage journal goes to the store now.
  co_await Flush();
  while (!stopping_) {
    timer.expires_after(options_.flush_interval);
    beast::error_code ec;
    co_await timer.async_wait(net::redirect_error(use_awaitable, ec));
    co_await Flush();
  }
}

}  // namespace bmas::gateway
