#pragma once

// StoreWorker: the threads that own the Store, so that SQLite or PostgreSQL never blocks a
// gateway thread. Coroutines on other threads hand it work with Run() and get the result back
// on their own executor.
//
// It keeps a small pool: `connections` threads, each taking one of `connections` handles on the
// store for the length of one piece of work, so a gateway's requests do not
// wait on each other's round trips to a database server. With one connection (the default, and
// SQLite's), work runs one piece at a time in the order handed over.

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/asio.h"
#include "store/store.h"

namespace bmas::gateway {

class StoreWorker {
 public:
  // Opens `connections` - 1 more handles on the same store with `open_another` (called here,
  // on the constructing thread); where one cannot be opened, the pool is smaller (logged).
  explicit StoreWorker(StorePtr store, int connections = 1,
                       const std::function<Result<StorePtr>()>& open_another = {});
  ~StoreWorker();  // stops the threads after the work already handed over

  StoreWorker(const StoreWorker&) = delete;
  StoreWorker& operator=(const StoreWorker&) = delete;

  // Handles on the store in the pool.
  int connections() const { return static_cast<int>(stores_.size()); }

  // Runs fn(Store&) on a store thread; returns its result to the awaiting coroutine.
  template <typename Fn>
  auto Run(Fn fn) -> awaitable<decltype(fn(std::declval<Store&>()))> {
    using T = decltype(fn(std::declval<Store&>()));
    auto task = [this, fn = std::move(fn)]() mutable -> awaitable<T> {
      Lease lease(*this);
      co_return fn(lease.store());
    };
    co_return co_await net::co_spawn(io_, std::move(task), use_awaitable);
  }

  // Runs fn(Store&) on a store thread, not waiting for it.
  template <typename Fn>
  void Post(Fn fn) {
    net::post(io_, [this, fn = std::move(fn)]() mutable {
      Lease lease(*this);
      fn(lease.store());
    });
  }

  // Runs fn(Store&) on a store thread after `delay`, not waiting for it (a retry). Work
  // delayed so still runs before the destructor returns.
  template <typename Fn>
  void PostAfter(std::chrono::milliseconds delay, Fn fn) {
    auto timer = std::make_shared<net::steady_timer>(io_, delay);
    timer->async_wait([this, timer, fn = std::move(fn)](const beast::error_code&) mutable {
      Lease lease(*this);
      fn(lease.store());
    });
  }

 private:
  // One handle, taken from the idle ones for the length of one piece of work. There are as
  // many threads as handles, so one is always idle when a thread asks.
  class Lease {
   public:
    explicit Lease(StoreWorker& worker);
    ~Lease();
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    Store& store() { return *store_; }

   private:
    StoreWorker& worker_;
    Store* store_;
  };

  std::vector<StorePtr> stores_;
  std::mutex mu_;
  std::vector<Store*> idle_;  // guarded by mu_
  net::io_context io_;
  net::executor_work_guard<net::io_context::executor_type> work_;
  std::vector<std::thread> threads_;
};

}  // namespace bmas::gateway
