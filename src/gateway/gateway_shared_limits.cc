// Limits shared through the store (GatewayOptions::shared_limits): a request reserves its worst
// case with Store::Reserve before it queues, and settles to what was metered when it ends. And
// token fairness across the gateways sharing the store: FairnessLoop publishes this gateway's
// report and applies FairShare's decisions from everyone's (fair_share.h).

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "gateway/gateway.h"
#include "gateway/gateway_internal.h"

namespace bmas::gateway {

namespace {

constexpr int kSettleTries = 6;  // 0.1 s, doubled each time: about 6 s in all
constexpr std::chrono::milliseconds kFirstSettleRetry{100};

}  // namespace

std::string Gateway::MakeInstanceId(const std::string& given) {
  std::random_device random;
  const uint64_t bits = (uint64_t{random()} << 32) | random();
  return fmt::format("{}-{:016x}", given.empty() ? "gw" : given, bits);
}

awaitable<std::optional<Gateway::Refusal>> Gateway::ReserveShared(Request& r, int64_t max_tokens) {
  std::string id =
      fmt::format("{}-{}", instance_id_, reservations_.fetch_add(1, std::memory_order_relaxed));
  const int64_t worst = r.prompt_estimate + max_tokens;
  const int64_t now = static_cast<int64_t>(UnixNow());
  // Wrapped in an optional: what the store thread hands back must be default-constructible.
  auto reserve = [id, user = r.user, worst, now](Store& store) {
    return std::optional<Result<Reservation>>(store.Reserve(id, user, worst, now));
  };
  Result<Reservation> reserved = std::move(*co_await store_.Run(std::move(reserve)));
  if (!reserved) {
    if (options_.open_when_store_down) {
      spdlog::warn(
          "gateway: shared limits: the store is unreachable ({}); {} is admitted on this "
          "gateway's own limits",
          reserved.error().message, r.user);
      co_return std::nullopt;
    }
    LimitDecision down;
    down.allowed = false;
    down.message = fmt::format(
        "the store that shares limits between gateways cannot be reached ({}), so no request is "
        "admitted; bring the store back, or set [gateway] limits_when_store_down = \"open\" to "
        "fall back on each gateway's own limits",
        reserved.error().message);
    co_return Refusal{http::status::service_unavailable, std::move(down)};
  }
  if (!reserved->admitted) {
    UserLimits limits;
    {
      std::lock_guard lock(mu_);
      auto it = users_.find(r.user);
      if (it != users_.end()) limits = it->second;
    }
    if (reserved->refused_by == "user") {
      LimitDecision unknown;
      unknown.allowed = false;
      unknown.message = fmt::format(
          "user {} is not in the store; an admin adds them with `bmas "
          "user add {}`",
          r.user, r.user);
      co_return Refusal{http::status::forbidden, std::move(unknown)};
    }
    co_return Refusal{http::status::too_many_requests,
                      SharedLimitRefusal(r.user, limits, reserved->refused_by, UnixNow())};
  }
  r.reservation = std::move(id);
  co_return std::nullopt;
}

awaitable<void> Gateway::FairnessLoop() {
  net::steady_timer timer(io_);
  int64_t last_at_ms = 0;
  bool failing = false;
  while (!stopping_) {
    GatewayReport mine;
    mine.gateway = instance_id_;
    {
      std::lock_guard lock(mu_);
      mine.body = EncodeFairReport(admission_.Report());
    }
    // A new at_ms on every put: readers judge a gateway live by its report changing.
    last_at_ms = std::max(last_at_ms + 1, static_cast<int64_t>(UnixNow() * 1000));
    mine.at_ms = last_at_ms;
    auto exchange = [mine = std::move(mine)](Store& store) {
      std::optional<Result<std::vector<GatewayReport>>> out;
      if (auto put = store.PutGatewayReport(mine); !put) {
        out.emplace(put.error());
      } else {
        out.emplace(store.ListGatewayReports());
      }
      return out;
    };
    Result<std::vector<GatewayReport>> reports = std::move(*co_await store_.Run(std::move(exchange)));
    {
      std::lock_guard lock(mu_);
      // Unreadable: everyone's reports are forgotten, and each gateway fills every slot again
      // (as without shared limits) until the store answers.
      const std::vector<GatewayReport> none;
      for (const RemoteCharge& c : fair_share_.Update(reports ? *reports : none, Now())) {
        admission_.ChargeRemote(c);
      }
      for (const auto& b : admission_.backends()) {
        admission_.SetSlotLimit(b->state.id,
                                fair_share_.Slots(b->state.id, admission_.Capacity(*b), b->models));
      }
      DispatchAllLocked();
    }
    if (!reports && !failing) {
      spdlog::warn(
          "gateway: fairness across gateways: cannot exchange reports through the store ({}); "
          "this gateway fills every backend slot until the store answers",
          reports.error().message);
    }
    failing = !reports;
    timer.expires_after(options_.fair_interval);
    beast::error_code ec;
    co_await timer.async_wait(net::redirect_error(use_awaitable, ec));
  }
}

void Gateway::SettleShared(Store& store, const std::string& id, int64_t used, int attempt) {
  Result<void> settled = store.Settle(id, used);
  if (settled) return;
  if (settled.error().code == ErrorCode::kNotFound || attempt + 1 >= kSettleTries) {
    spdlog::error(
        "gateway: shared limits: reservation {} not settled to {} tokens: {}; it counts "
        "its worst case until it leaves the window",
        id, used, settled.error().message);
    return;
  }
  store_.PostAfter(kFirstSettleRetry * (1 << attempt),
                   [this, id, used, attempt](Store& s) { SettleShared(s, id, used, attempt + 1); });
}

}  // namespace bmas::gateway
