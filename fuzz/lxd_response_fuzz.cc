// Fuzzes LxdClient's reading of LXD's replies, through a transport that answers with the
// input's canned responses. The input is the call to make on its first line, then responses
// separated by "\n====\n", each its HTTP status on one line and then its body:
//
//   instances
//   200
//   {"type":"sync","metadata":[...]}
//
// When the responses run out, the transport fails the way an unreachable LXD does.

#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>

#include "lxd/lxd_client.h"

namespace {

using bmas::Result;
using bmas::ClientRequest;
using bmas::ClientResponse;

class ScriptedTransport final : public bmas::HttpTransport {
 public:
  explicit ScriptedTransport(std::deque<ClientResponse> responses)
      : responses_(std::move(responses)) {}

  Result<ClientResponse> RoundTrip(const ClientRequest&) override {
    if (responses_.empty())
      return bmas::Error{bmas::ErrorCode::kUnavailable, "no response left", {}};
    ClientResponse r = std::move(responses_.front());
    responses_.pop_front();
    return r;
  }
  std::string Where() const override { return "/fuzz/unix.socket"; }

 private:
  std::deque<ClientResponse> responses_;
};

std::string_view Line(std::string_view& text) {
  const size_t end = text.find('\n');
  std::string_view line = text.substr(0, end);
  text.remove_prefix(end == text.npos ? text.size() : end + 1);
  return line;
}

std::deque<ClientResponse> Responses(std::string_view text) {
  constexpr std::string_view kSeparator = "\n====\n";
  std::deque<ClientResponse> out;
  while (!text.empty()) {
    const size_t end = text.find(kSeparator);
    std::string_view chunk = text.substr(0, end);
    text.remove_prefix(end == text.npos ? text.size() : end + kSeparator.size());
    const std::string_view status = Line(chunk);
    ClientResponse r{200, std::string(chunk), "\"etag\""};
    std::from_chars(status.data(), status.data() + status.size(), r.status);
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::string_view call = Line(text);
  bmas::lxd::LxdClient client(std::make_unique<ScriptedTransport>(Responses(text)),
                              std::chrono::seconds(1));
  const bmas::lxd::ExecSpec exec{{"true"}, {}, 0, 0, ""};
  if (call == "server") {
    (void)client.Server();
  } else if (call == "instances") {
    (void)client.Instances();
  } else if (call == "instance") {
    (void)client.GetInstance("c1");
  } else if (call == "create") {
    (void)client.CreateInstance(bmas::lxd::InstanceSpec{"c1", "img", {}, {}, {}});
  } else if (call == "start") {
    (void)client.ChangeState("c1", "start");
  } else if (call == "exec") {
    (void)client.Exec("c1", exec);
  } else if (call == "piped_exec") {
    (void)client.StartPipedExec("c1", exec);
  } else if (call == "exit_code") {
    (void)client.ExecExitCode("/1.0/operations/1");
  } else if (call == "init_pid") {
    (void)client.InitPid("c1");
  } else if (call == "remove_devices") {
    (void)client.RemoveDevices("c1", {"gpu0", "gpu1"});
  } else if (call == "migration_source") {
    (void)client.StartMigrationSource("c1");
  } else if (call == "certificates") {
    (void)client.TrustedCertificates();
  } else if (call == "images") {
    (void)client.Images();
  } else if (call == "import_image") {
    (void)client.ImportImage("tarball", "alias");
  } else if (call == "storage_pools") {
    (void)client.StoragePools();
  } else if (call == "profile") {
    (void)client.GetProfile("default");
  }
  return 0;
}
