#include "agent/gpu_sampler.h"

#include <pwd.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/json_object.h"
#include "gpu/dcgm_metrics.h"
#include "gpu/gpu_holders.h"

namespace bmas {
namespace {

// The job and user of process `pid`, from its cgroup and its owner.
std::optional<GpuHolder> HolderOfProcess(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/cgroup", pid));
  std::stringstream text;
  text << in.rdbuf();
  const std::optional<int64_t> job = JobOfCgroup(text.str());
  if (!job) return std::nullopt;
  struct stat st;
  if (stat(fmt::format("/proc/{}", pid).c_str(), &st) != 0) return std::nullopt;
  passwd pwd{}, *pw = nullptr;
  std::vector<char> buf(16384);
  std::string user = std::to_string(st.st_uid);
  if (getpwuid_r(st.st_uid, &pwd, buf.data(), buf.size(), &pw) == 0 && pw != nullptr) {
    user = pw->pw_name;
  }
  return GpuHolder{*job, user};
}

}  // namespace

GpuSampler::GpuSampler(Env& env, std::shared_ptr<GpuTelemetry> gpus, std::string node,
                       std::chrono::milliseconds interval, SampleHook on_sample)
    : env_(env),
      gpus_(std::move(gpus)),
      node_(std::move(node)),
      on_sample_(std::move(on_sample)),
      interval_(interval) {}

GpuSampler::~GpuSampler() { Stop(); }

void GpuSampler::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void GpuSampler::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::string GpuSampler::Metrics() {
  std::lock_guard lock(mu_);
  return fmt::format(
      "# HELP bmas_agent_gpu_telemetry_up Whether the last read of this node's GPUs (NVML) "
      "succeeded\n# TYPE bmas_agent_gpu_telemetry_up gauge\nbmas_agent_gpu_telemetry_up {}\n"
      "# HELP bmas_agent_gpu_sample_seconds How long the last read of every GPU took\n"
      "# TYPE bmas_agent_gpu_sample_seconds gauge\nbmas_agent_gpu_sample_seconds {}\n{}",
      up_ ? 1 : 0, sample_seconds_, up_ ? text_ : "");
}

std::string GpuSampler::Json() {
  std::lock_guard lock(mu_);
  return JsonObject([&](JsonWriter& w) {
    Member(w, "up", up_);
    Member(w, "error", last_error_);
    w.Key("sample");
    if (up_) {
      w.RawValue(json_.data(), json_.size(), rapidjson::kObjectType);
    } else {
      w.Null();
    }
  });
}

void GpuSampler::Loop() {
  while (true) {
    SampleOnce();
    std::unique_lock lock(mu_);
    if (wake_.wait_for(lock, interval_, [&] { return stopping_; })) return;
  }
}

void GpuSampler::SampleOnce() {
  const TimePoint start = env_.Now();
  auto gpus = gpus_->Read();
  std::string text, json;
  std::map<int, GpuHolder> holders;
  MigHolders mig_holders;
  if (gpus) {
    holders = HoldersOf(*gpus, HolderOfProcess);
    mig_holders = MigHoldersOf(*gpus, HolderOfProcess);
    text = RenderDcgmMetrics(*gpus, node_, holders, mig_holders);
    json = RenderGpuJson(*gpus, node_, holders, mig_holders);
  }
  const double took = (env_.Now() - start).count();
  if (gpus && on_sample_) on_sample_(*gpus, holders, mig_holders);
  std::lock_guard lock(mu_);
  sample_seconds_ = took;
  up_ = gpus.has_value();
  if (up_) {
    text_ = std::move(text);
    json_ = std::move(json);
    if (!last_error_.empty()) spdlog::info("bmas agent: GPU telemetry is back");
    last_error_.clear();
  } else if (gpus.error().message != last_error_) {
    last_error_ = gpus.error().message;
    spdlog::warn("bmas agent: GPU telemetry: {}", last_error_);
  }
}

}  // namespace bmas
