#pragma once

// StoreWorker: the thread that owns the Store, so that SQLite never blocks a gateway thread.
// Coroutines on other threads hand it work with Run() and get the result back on their own
// executor.

#include <chrono>
#include <memory>
#include <thread>

#include "common/asio.h"
#include "store/store.h"

namespace bmas::gateway {

class StoreWorker {
 public:
  explicit StoreWorker(StorePtr store);
  ~StoreWorker();  // stops the thread after the work already handed over

  StoreWorker(const StoreWorker&) = delete;
  StoreWorker& operator=(const StoreWorker&) = delete;

  // Runs fn(Store&) on the store thread; returns its result to the awaiting coroutine.
  template <typename Fn>
  auto Run(Fn fn) -> awaitable<decltype(fn(std::declval<Store&>()))> {
    using T = decltype(fn(std::declval<Store&>()));
    auto task = [this, fn = std::move(fn)]() mutable -> awaitable<T> { co_return fn(*store_); };
    co_return co_await net::co_spawn(io_, std::move(task), use_awaitable);
  }

  // Runs fn(Store&) on the store thread, not waiting for it.
  template <typename Fn>
  void Post(Fn fn) {
    net::post(io_, [this, fn = std::move(fn)]() mutable { fn(*store_); });
  }

  // Runs fn(Store&) on the store thread after `delay`, not waiting for it (a retry). Work
  // delayed so still runs before the destructor returns.
  template <typename Fn>
  void PostAfter(std::chrono::milliseconds delay, Fn fn) {
    auto timer = std::make_shared<net::steady_timer>(io_, delay);
    timer->async_wait(
        [this, timer, fn = std::move(fn)](const beast::error_code&) mutable { fn(*store_); });
  }

 private:
  StorePtr store_;
  net::io_context io_{1};
  net::executor_work_guard<net::io_context::executor_type> work_;
  std::thread thread_;
};

}  // namespace bmas::gateway
