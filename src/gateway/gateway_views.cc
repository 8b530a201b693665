// The gateway's views for operators and the dashboard: /v1/models, /metrics and /load; and a
// user's own /v1/usage.

#include <fmt/format.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/json_object.h"
#include "common/operator_auth.h"
#include "gateway/usage_report.h"
#include "gateway/gateway.h"
#include "gateway/gateway_internal.h"

namespace bmas::gateway {

std::string Gateway::ModelsJson() const {
  std::lock_guard lock(mu_);
  std::string out = R"({"object":"list","data":[)";
  std::vector<std::string> seen;
  for (const auto& b : backends_) {
    const AdmissionBackend& known = *admission_.backend(b->id);
    if (!known.Open()) continue;
    for (size_t i = 0; i < known.models.size() && i < b->model_cards.size(); ++i) {
      if (std::find(seen.begin(), seen.end(), known.models[i]) != seen.end()) continue;
      if (!seen.empty()) out += ',';
      seen.push_back(known.models[i]);
      out += b->model_cards[i];
    }
  }
  // Deployed models with no replica up yet are served too (their first request starts one).
  for (const std::string& model : deployed_) {
    if (std::find(seen.begin(), seen.end(), model) != seen.end()) continue;
    if (!seen.empty()) out += ',';
    seen.push_back(model);
    rapidjson::StringBuffer id;
    rapidjson::Writer<rapidjson::StringBuffer> w(id);
    w.String(model.c_str(), static_cast<rapidjson::SizeType>(model.size()));
    out += fmt::format(R"({{"id":{},"object":"model","created":0,"owned_by":"bmas"}})",
                       id.GetString());
  }
  out += "]}";
  return out;
}

std::string Gateway::RenderMetrics() {
  std::lock_guard lock(mu_);
  std::string text = metrics_.Render();
  auto per_backend = [&](std::string_view name, std::string_view help, auto value) {
    text += fmt::format(
        "# HELP bmas_gateway_backend_{0} {1}\n# TYPE bmas_gateway_backend_{0} gauge\n", name, help);
    for (const auto& b : backends_) {
      text += fmt::format("bmas_gateway_backend_{}{{backend=\"{}\"}} {}\n", name,
                          EscapeLabelValue(b->id), value(*b, *admission_.backend(b->id)));
    }
  };
  per_backend("in_flight", "Requests in flight per backend.",
              [](const Backend&, const AdmissionBackend& a) { return a.state.in_flight; });
  per_backend("healthy", "1 when the backend passes its health checks.",
              [](const Backend&, const AdmissionBackend& a) { return a.state.healthy ? 1 : 0; });
  per_backend("added",
              "1 when the backend came from the store (`bmas gateway backend add`), 0 when the "
              "gateway started with it.",
              [](const Backend& b, const AdmissionBackend&) { return b.from_store ? 1 : 0; });
  per_backend("draining",
              "1 when the backend was removed from the store and its requests in flight finish.",
              [](const Backend&, const AdmissionBackend& a) { return a.state.draining ? 1 : 0; });
  return text;
}


// The load the dashboard and a controller read (the operator listener's /load): the fair
// queue's depth per model, each backend's counts, and the latency histograms as cumulative
// counts, so a reader takes quantiles over its own intervals from two readings.
std::string Gateway::LoadJson() {
  std::lock_guard lock(mu_);
  auto histogram = [](JsonWriter& w, const char* name, const Histogram& h) {
    w.Key(name);
    w.StartObject();
    Member(w, "count", h.count());
    w.Key("sum");
    w.Double(h.sum());
    w.Key("bounds");
    w.StartArray();
    for (double b : h.bounds()) w.Double(b);
    w.EndArray();
    w.Key("counts");  // per bucket, not cumulative; one more than bounds (+Inf)
    w.StartArray();
    for (uint64_t c : h.bucket_counts()) w.Uint64(c);
    w.EndArray();
    w.EndObject();
  };
  return JsonObject([&](JsonWriter& w) {
    w.Key("queued");
    w.StartObject();
    for (const auto& [model, queued] : admission_.QueuedByModel()) {
      w.Key(model.c_str());
      w.Uint64(queued);
    }
    w.EndObject();
    // Seconds the oldest waiting request of each model has waited (the autoscaler's breach).
    w.Key("oldest_wait_s");
    w.StartObject();
    for (const auto& [model, queued] : admission_.QueuedByModel()) {
      w.Key(model.c_str());
      w.Double(queued > 0 ? admission_.OldestWait(model, Now()) : 0.0);
    }
    w.EndObject();
    w.Key("backends");
    w.StartArray();
    for (const auto& known : admission_.backends()) {
      const AdmissionBackend* b = known.get();
      w.StartObject();
      Member(w, "url", b->state.id);
      w.Key("models");
      w.StartArray();
      for (const std::string& m : b->models) w.String(m.c_str());
      w.EndArray();
      Member(w, "healthy", b->state.healthy);
      Member(w, "draining", b->state.draining);
      Member(w, "in_flight", b->state.in_flight);
      Member(w, "capacity", b->state.capacity);
      w.Key("kv_usage");
      w.Double(b->state.kv_usage);
      w.EndObject();
    }
    w.EndArray();
    histogram(w, "ttft_s", ttft_);
    histogram(w, "queue_wait_s", queue_wait_);
  });
}

awaitable<void> Gateway::HandleMetrics(HttpRequest& request, ResponseWriter& writer) {
  if (!co_await RequireOperator(request, writer, options_.operator_secret)) co_return;
  std::string target(request.target().substr(0, request.target().find('?')));
  if (target == "/metrics" && request.method() == http::verb::get) {
    std::string text = RenderMetrics();
    co_await writer.Send(http::status::ok, "text/plain; version=0.0.4; charset=utf-8",
                         std::move(text));
  } else if (target == "/load" && request.method() == http::verb::get) {
    co_await writer.Send(http::status::ok, "application/json", LoadJson());
  } else {
    co_await writer.SendError(http::status::not_found, "no such path: " + target);
  }
}

awaitable<void> Gateway::HandleUsage(const std::string& user, ResponseWriter& writer) {
  // Today (UTC), as tokens_per_day counts, and the caller's own limits.
  const int64_t since = static_cast<int64_t>(UnixNow()) / 86400 * 86400;
  // An optional, not a Result: what the store thread hands back must be default-constructible.
  auto query = [user, since](Store& store) {
    auto found = store.QueryUsage(user, since);
    return found ? std::optional<std::vector<UsageRow>>(std::move(*found)) : std::nullopt;
  };
  std::optional<std::vector<UsageRow>> rows = co_await store_.Run(std::move(query));
  if (!rows) {
    co_await writer.SendError(http::status::service_unavailable,
                              "usage cannot be read right now; try again later");
    co_return;
  }
  UserLimits limits;
  {
    std::lock_guard lock(mu_);
    if (auto it = users_.find(user); it != users_.end()) limits = it->second;
  }
  std::string body = UsageReportJson(user, since, *rows, limits);
  co_await writer.Send(http::status::ok, "application/json", std::move(body));
}

}  // namespace bmas::gateway
