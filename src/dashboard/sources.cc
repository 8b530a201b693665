#include "dashboard/sources.h"

#include <fmt/format.h>
#include <rapidjson/document.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "common/json_read.h"

namespace bmas::dashboard {
namespace {

Result<rapidjson::Document> Parse(std::string_view body, std::string_view what) {
  rapidjson::Document d;
  d.Parse(body.data(), body.size());
  if (d.HasParseError() || !d.IsObject()) {
    return Error{ErrorCode::kUnavailable, fmt::format("{} did not answer with a JSON object", what)};
  }
  return d;
}

int64_t Int(const rapidjson::Value& v, const char* key) {
  const rapidjson::Value* m = JsonMember(v, key);
  return m != nullptr && m->IsInt64() ? m->GetInt64() : 0;
}

double Double(const rapidjson::Value& v, const char* key) {
  const rapidjson::Value* m = JsonMember(v, key);
  return m != nullptr && m->IsNumber() ? m->GetDouble() : 0;
}

// A count from another daemon, kept in a range that sums of many cannot overflow.
int Count(int64_t n) { return static_cast<int>(std::clamp<int64_t>(n, 0, 1 << 24)); }

bool Bool(const rapidjson::Value& v, const char* key) {
  const rapidjson::Value* m = JsonMember(v, key);
  return m != nullptr && m->IsBool() && m->GetBool();
}

template <typename F>
void EachOf(const rapidjson::Value& v, const char* key, F f) {
  const rapidjson::Value* m = JsonMember(v, key);
  if (m == nullptr || !m->IsArray()) return;
  for (const rapidjson::Value& e : m->GetArray()) f(e);
}

LatencyHistogram ReadHistogram(const rapidjson::Value& v) {
  LatencyHistogram h;
  if (!v.IsObject()) return h;
  h.count = static_cast<uint64_t>(Int(v, "count"));
  h.sum = Double(v, "sum");
  EachOf(v, "bounds", [&](const rapidjson::Value& b) { h.bounds.push_back(b.IsNumber() ? b.GetDouble() : 0); });
  EachOf(v, "counts", [&](const rapidjson::Value& c) {
    h.counts.push_back(c.IsUint64() ? c.GetUint64() : 0);
  });
  if (h.counts.size() != h.bounds.size() + 1) h = LatencyHistogram{};  // not one we can read
  return h;
}

}  // namespace

Result<GatewayLoad> ParseGatewayLoad(std::string_view body) {
  auto d = Parse(body, "the gateway's /load");
  if (!d) return d.error();
  GatewayLoad load;
  load.reachable = true;
  if (const rapidjson::Value* q = JsonMember(*d, "queued"); q != nullptr && q->IsObject()) {
    for (const auto& m : q->GetObject()) {
      load.queued[std::string(m.name.GetString(), m.name.GetStringLength())] =
          m.value.IsInt() ? Count(m.value.GetInt()) : 0;
    }
  }
  if (const rapidjson::Value* o = JsonMember(*d, "oldest_wait_s"); o != nullptr && o->IsObject()) {
    for (const auto& m : o->GetObject()) {
      const double s = m.value.IsNumber() ? m.value.GetDouble() : 0;
      load.oldest_wait_s[std::string(m.name.GetString(), m.name.GetStringLength())] =
          std::isfinite(s) ? std::clamp(s, 0.0, 1e9) : 0.0;
    }
  }
  EachOf(*d, "backends", [&](const rapidjson::Value& b) {
    BackendLoad bl;
    bl.url = JsonString(b, "url");
    EachOf(b, "models", [&](const rapidjson::Value& m) {
      if (m.IsString()) bl.models.emplace_back(m.GetString(), m.GetStringLength());
    });
    bl.healthy = Bool(b, "healthy");
    bl.draining = Bool(b, "draining");
    bl.in_flight = Count(Int(b, "in_flight"));
    bl.capacity = Count(Int(b, "capacity"));
    bl.kv_usage = Double(b, "kv_usage");
    load.backends.push_back(std::move(bl));
  });
  if (const rapidjson::Value* h = JsonMember(*d, "ttft_s")) load.ttft = ReadHistogram(*h);
  if (const rapidjson::Value* h = JsonMember(*d, "queue_wait_s")) load.queue_wait = ReadHistogram(*h);
  return load;
}

Result<NodeTelemetry> ParseAgentGpus(std::string_view body, const std::string& node) {
  auto d = Parse(body, fmt::format("the agent on {}'s /gpus", node));
  if (!d) return d.error();
  NodeTelemetry t;
  t.node = node;
  t.up = Bool(*d, "up");
  t.error = JsonString(*d, "error");
  const rapidjson::Value* sample = JsonMember(*d, "sample");
  if (sample == nullptr || !sample->IsObject()) return t;
  if (std::string n = JsonString(*sample, "node"); !n.empty()) t.node = n;
  EachOf(*sample, "gpus", [&](const rapidjson::Value& g) {
    GpuTelemetryRow r;
    r.index = static_cast<int>(Int(g, "index"));
    r.util = static_cast<unsigned>(Int(g, "util"));
    r.mem_used_mb = static_cast<uint64_t>(Int(g, "mem_used_mb"));
    r.mem_total_mb = static_cast<uint64_t>(Int(g, "mem_total_mb"));
    r.job_id = Int(g, "job_id");
    r.user = JsonString(g, "user");
    t.gpus.push_back(std::move(r));
  });
  return t;
}

namespace {

void AddHistogram(LatencyHistogram& into, const LatencyHistogram& h) {
  if (into.bounds.empty() && into.count == 0) {
    into = h;
    return;
  }
  if (h.bounds != into.bounds || h.counts.size() != into.counts.size()) return;
  for (size_t i = 0; i < h.counts.size(); ++i) into.counts[i] += h.counts[i];
  into.count += h.count;
  into.sum += h.sum;
}

}  // namespace

GatewayLoad MergeGatewayLoads(const std::vector<GatewayLoad>& loads) {
  GatewayLoad out;
  std::map<std::string, size_t> at;  // backend URL -> index in out.backends
  for (const GatewayLoad& g : loads) {
    out.reachable = true;
    for (const auto& [model, n] : g.queued) out.queued[model] += n;
    for (const auto& [model, w] : g.oldest_wait_s) {
      double& oldest = out.oldest_wait_s[model];
      oldest = std::max(oldest, w);
    }
    for (const BackendLoad& b : g.backends) {
      auto [it, fresh] = at.emplace(b.url, out.backends.size());
      if (fresh) {
        out.backends.push_back(b);
        continue;
      }
      BackendLoad& m = out.backends[it->second];
      m.healthy = m.healthy || b.healthy;
      m.draining = m.draining && b.draining;
      m.in_flight += b.in_flight;
      m.capacity = std::max(m.capacity, b.capacity);
      m.kv_usage = std::max(m.kv_usage, b.kv_usage);
      for (const std::string& model : b.models) {
        if (std::find(m.models.begin(), m.models.end(), model) == m.models.end()) {
          m.models.push_back(model);
        }
      }
    }
    AddHistogram(out.ttft, g.ttft);
    AddHistogram(out.queue_wait, g.queue_wait);
  }
  return out;
}

}  // namespace bmas::dashboard
