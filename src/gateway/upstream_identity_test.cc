// ConnectionPool's identity challenge against an in-process backend (common/http_server.h).

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "common/backend_identity.h"
#include "common/http_server.h"
#include "gateway/upstream.h"

namespace bmas::gateway {
namespace {

// A backend on 127.0.0.1 that answers the challenge with `answer_key` ("" = 404) and records
// each request's target and Authorization header.
class FakeBackend {
 public:
  FakeBackend(net::io_context& io, std::string answer_key)
      : answer_key_(std::move(answer_key)),
        server_(io, HttpServerOptions{}, [this](HttpRequest& r, ResponseWriter& w) {
          return Handle(r, w);
        }) {
    auto port = server_.Listen();
    EXPECT_TRUE(port);
    port_ = port ? *port : 0;
    server_.Start();
  }
  BackendUrl url() const { return *ParseBackendUrl("http://127.0.0.1:" + std::to_string(port_)); }
  std::vector<std::string> seen;

 private:
  awaitable<void> Handle(HttpRequest& r, ResponseWriter& w) {
    seen.push_back(std::string(r.target()) + " auth=" + std::string(r[http::field::authorization]));
    std::string_view target = r.target();
    const size_t at = target.find("nonce=");
    if (answer_key_.empty() || at == std::string_view::npos) {
      co_await w.SendError(http::status::not_found, "no such path");
      co_return;
    }
    co_await w.Send(http::status::ok, "text/plain",
                    ChallengeAnswer(answer_key_, target.substr(at + 6)));
  }

  std::string answer_key_;
  HttpServer server_;
  uint16_t port_ = 0;
};

// Acquires one connection from a pool with `identity` to `backend`; the error when it fails.
std::optional<Error> AcquireFrom(net::io_context& io, FakeBackend& backend,
                                 BackendIdentity identity) {
  ConnectionPool pool(io, backend.url(), std::move(identity));
  std::optional<Error> error;
  bool finished = false;
  net::co_spawn(
      io,
      [&]() -> awaitable<void> {
        bool reused = false;
        auto got = co_await pool.Acquire(std::chrono::milliseconds(5000), reused);
        if (!got) error = got.error();
        finished = true;
      },
      net::detached);
  while (!finished) io.run_one();
  return error;
}

TEST(UpstreamIdentityTest, ABackendWithItsKeyIsConnectedAfterTheChallenge) {
  net::io_context io;
  FakeBackend backend(io, "key-of-this-backend");
  auto error = AcquireFrom(io, backend, {"key-of-this-backend", true});
  EXPECT_FALSE(error) << error->message;
  ASSERT_EQ(backend.seen.size(), 1u);
  EXPECT_EQ(backend.seen[0].find("/bmas/challenge?nonce="), 0u) << backend.seen[0];
  EXPECT_NE(backend.seen[0].find("auth="), std::string::npos);
  EXPECT_EQ(backend.seen[0].substr(backend.seen[0].find("auth=")), "auth=");  // no key sent
}

TEST(UpstreamIdentityTest, AnotherKeyOrNoAnswerIsRefused) {
  net::io_context io;
  FakeBackend other(io, "key-of-another-backend");
  auto error = AcquireFrom(io, other, {"key-of-this-backend", true});
  ASSERT_TRUE(error);
  EXPECT_EQ(error->param, kIdentityParam);
  EXPECT_NE(error->message.find("did not prove its identity"), std::string::npos)
      << error->message;
  FakeBackend vllm(io, "");
  error = AcquireFrom(io, vllm, {"key-of-this-backend", true});
  ASSERT_TRUE(error);
  EXPECT_EQ(error->param, kIdentityParam);
  EXPECT_NE(error->message.find("--unverified-backend"), std::string::npos) << error->message;
}

TEST(UpstreamIdentityTest, AnUnverifiedBackendIsNotChallenged) {
  net::io_context io;
  FakeBackend vllm(io, "");
  auto error = AcquireFrom(io, vllm, {"key", false});
  EXPECT_FALSE(error) << error->message;
  EXPECT_TRUE(vllm.seen.empty());
}

}  // namespace
}  // namespace bmas::gateway
