#include "gateway/store_worker.h"

#include <spdlog/spdlog.h>

namespace bmas::gateway {
namespace {

std::vector<StorePtr> OpenPool(StorePtr first, int connections,
                               const std::function<Result<StorePtr>()>& open_another) {
  std::vector<StorePtr> stores;
  stores.push_back(std::move(first));
  while (static_cast<int>(stores.size()) < connections && open_another) {
    auto another = open_another();
    if (!another) {
      spdlog::warn("gateway: {} of {} store connections opened; the others: {}", stores.size(),
                   connections, another.error().message);
      break;
    }
    stores.push_back(std::move(*another));
  }
  return stores;
}

}  // namespace

StoreWorker::StoreWorker(StorePtr store, int connections,
                         const std::function<Result<StorePtr>()>& open_another)
    : stores_(OpenPool(std::move(store), connections, open_another)),
      io_(static_cast<int>(stores_.size())),
      work_(net::make_work_guard(io_)) {
  for (const StorePtr& s : stores_) idle_.push_back(s.get());
  for (size_t i = 0; i < stores_.size(); ++i) threads_.emplace_back([this] { io_.run(); });
}

StoreWorker::~StoreWorker() {
  work_.reset();
  for (std::thread& t : threads_) t.join();
}

StoreWorker::Lease::Lease(StoreWorker& worker) : worker_(worker) {
  std::lock_guard lock(worker_.mu_);
  store_ = worker_.idle_.back();
  worker_.idle_.pop_back();
}

StoreWorker::Lease::~Lease() {
  std::lock_guard lock(worker_.mu_);
  worker_.idle_.push_back(store_);
}

}  // namespace bmas::gateway
