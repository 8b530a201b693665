#include "gateway/store_worker.h"

namespace bmas::gateway {

StoreWorker::StoreWorker(StorePtr store)
    : store_(std::move(store)), work_(net::make_work_guard(io_)), thread_([this] { io_.run(); }) {}

StoreWorker::~StoreWorker() {
  work_.reset();
  thread_.join();
}

}  // namespace bmas::gateway
