// LxdClient's transport and its plumbing: the unix-socket round trip, one call with LXD's
// errors mapped to Error codes, and operations (waited for in long polls, started, cancelled).
// The API's methods live by concern in lxd_client_instances.cc, lxd_client_migration.cc,
// lxd_client_exec.cc and lxd_client_server.cc; their JSON in lxd_client_json.cc.

#include "lxd/lxd_client.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include <boost/asio/local/stream_protocol.hpp>

#include "common/asio.h"
#include "common/json_read.h"
#include "lxd/lxd_client_internal.h"
#include "lxd/lxd_internal.h"

namespace bmas::lxd {
namespace {

using rapidjson::Value;
using internal::Int;
using internal::Parse;
using internal::Serialize;

class UnixLxdTransport final : public HttpTransport {
 public:
  UnixLxdTransport(std::string path, std::chrono::milliseconds timeout)
      : path_(std::move(path)), timeout_(timeout) {}

  Result<ClientResponse> RoundTrip(const ClientRequest& request) override {
    using Local = net::local::stream_protocol;
    net::io_context io;
    Local::socket socket(io);
    beast::error_code ec;
    socket.connect(Local::endpoint(path_), ec);
    if (ec) return internal::TransportError("connect", path_, ec, timeout_);
    internal::SetSocketTimeouts(socket.native_handle(), timeout_);
    // Asio's own sync reads would not honour SO_RCVTIMEO (see internal::BoundedSocket).
    internal::BoundedSocket<Local::socket> bounded(socket);
    return internal::Exchange(bounded, request, "lxd", path_, timeout_);
  }

  std::string Where() const override { return path_; }

 private:
  std::string path_;
  std::chrono::milliseconds timeout_;
};

ErrorCode CodeFor(int64_t lxd_code) {
  switch (lxd_code) {
    case 400: return ErrorCode::kInvalidArgument;
    case 403: return ErrorCode::kPermissionDenied;
    case 404: return ErrorCode::kNotFound;
    case 409: return ErrorCode::kAlreadyExists;
    case 503: return ErrorCode::kUnavailable;
    default: return ErrorCode::kInternal;
  }
}

// An operation is waited for in long polls of this many seconds, well inside the transport's
// bound on each read, so that a slow operation is never taken for a dead LXD.
int WaitSlice(std::chrono::milliseconds timeout) {
  return static_cast<int>(std::clamp<int64_t>(timeout.count() / 2000, 1, 30));
}

}  // namespace

HttpTransportPtr NewUnixLxdTransport(std::string path, std::chrono::milliseconds timeout) {
  return std::make_unique<UnixLxdTransport>(std::move(path), timeout);
}

bool IsValidInstanceName(const std::string& name) {
  if (name.empty() || name.size() > 63 || !std::isalpha(static_cast<unsigned char>(name[0])) ||
      name.back() == '-') {
    return false;
  }
  for (unsigned char c : name) {
    if (!std::isalnum(c) && c != '-') return false;
  }
  return true;
}

LxdClient::LxdClient(const std::string& socket, std::chrono::milliseconds timeout)
    : transport_(NewUnixLxdTransport(socket, timeout)), wait_slice_s_(WaitSlice(timeout)) {}

LxdClient::LxdClient(HttpTransportPtr transport, std::chrono::milliseconds timeout)
    : transport_(std::move(transport)), wait_slice_s_(WaitSlice(timeout)) {}

Result<ClientResponse> LxdClient::Call(ClientRequest request, const std::string& what) {
  auto response = transport_->RoundTrip(request);
  if (!response) {
    Error e = response.error();
    e.message = fmt::format("cannot {}: {}. Is LXD running? `bmas lxd up` starts it", what,
                            e.message);
    return e;
  }
  if (response->status >= 200 && response->status < 300) return response;
  auto doc = Parse(response->body, what);
  std::string message = doc ? JsonString(*doc, "error") : std::string();
  int64_t code = doc ? Int(*doc, "error_code", response->status) : response->status;
  if (message.empty()) message = fmt::format("HTTP {}", response->status);
  return Error{CodeFor(code), fmt::format("cannot {}: {}", what, message), {}};
}

Result<std::string> LxdClient::CallAndWait(ClientRequest request, const std::string& what) {
  auto r = Call(std::move(request), what);
  if (!r) return r.error();
  auto doc = Parse(r->body, what);
  if (!doc) return doc.error();
  if (JsonString(*doc, "type") != "async") {
    const Value* m = JsonMember(*doc, "metadata");
    return m != nullptr ? Serialize(*m) : std::string("null");
  }
  const std::string op = JsonString(*doc, "operation");
  if (op.empty()) return Internal(fmt::format("cannot {}: async response without operation", what));
  return WaitOperation(op, what);
}

Result<std::string> LxdClient::WaitOperation(const std::string& op, const std::string& what) {
  // The wait is long-polled in slices so the transport's deadline never cuts it.
  for (;;) {
    auto w = Call(ClientRequest{"GET", fmt::format("{}/wait?timeout={}", op, wait_slice_s_), {}, {}},
                  what);
    if (!w) return w.error();
    auto wd = Parse(w->body, what);
    if (!wd) return wd.error();
    const Value* meta = JsonMember(*wd, "metadata");
    if (meta == nullptr || !meta->IsObject()) {
      return Internal(fmt::format("cannot {}: operation {} has no metadata", what, op));
    }
    const std::string status = JsonString(*meta, "status");
    if (status == "Success") {
      const Value* m = JsonMember(*meta, "metadata");
      return m != nullptr ? Serialize(*m) : std::string("null");
    }
    if (status == "Running" || status == "Pending") continue;
    std::string err = JsonString(*meta, "err");
    if (err.empty()) err = fmt::format("operation ended {}", status);
    ErrorCode code = ErrorCode::kInternal;
    if (err.find("already exists") != std::string::npos) code = ErrorCode::kAlreadyExists;
    if (err.find("not found") != std::string::npos) code = ErrorCode::kNotFound;
    return Error{code, fmt::format("cannot {}: {}", what, err), {}};
  }
}

Result<std::pair<std::string, rapidjson::Document>> LxdClient::StartOperation(
    ClientRequest request, const std::string& what) {
  auto r = Call(std::move(request), what);
  if (!r) return r.error();
  auto doc = Parse(r->body, what);
  if (!doc) return doc.error();
  std::string operation = JsonString(*doc, "operation");
  const Value* op = JsonMember(*doc, "metadata");
  const Value* meta = op != nullptr ? JsonMember(*op, "metadata") : nullptr;
  if (operation.empty() || meta == nullptr) {
    return Internal(fmt::format("cannot {}: LXD's answer has no operation", what));
  }
  rapidjson::Document out;
  out.CopyFrom(*meta, out.GetAllocator());
  return std::make_pair(std::move(operation), std::move(out));
}

Result<void> LxdClient::CancelOperation(const std::string& operation) {
  auto r = Call(ClientRequest{"DELETE", operation, {}, {}}, "cancel operation " + operation);
  if (!r) return r.error();
  return {};
}

}  // namespace bmas::lxd
