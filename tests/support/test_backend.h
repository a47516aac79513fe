// The backend tests load models on: the CPU backend over a process-wide pool of two threads
// (results do not depend on the thread count: the kernels are batch- and split-invariant).
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"
#include "core/thread_pool.h"
#include "model/model.h"

namespace deepinfer::testing {

inline ThreadPool& test_pool() {
  static ThreadPool pool(2);
  return pool;
}

inline backend::Backend& test_backend() {
  static std::unique_ptr<backend::Backend> backend =
      std::move(backend::create_backend("cpu", backend::BackendOptions{&test_pool()})).value();
  return *backend;
}

inline Result<std::unique_ptr<Model>> load_model(const std::string& path) { return Model::load(path, test_backend()); }

}  // namespace deepinfer::testing
