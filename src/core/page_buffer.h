// A large zero-filled buffer straight from the kernel (anonymous mmap), backed by transparent
// huge pages where the system allows them (MADV_HUGEPAGE). For the big arrays the forward pass
// streams through (KV cache, packed weights): with 4 KiB pages, reading a paged KV block or a
// weight matrix costs a TLB miss every 4 KiB, and batched decode attention jumps between
// blocks scattered over a gigabyte. Movable, not copyable.
#pragma once

#include <cstddef>
#include <cstdint>

#include "deepinfer/status.h"

namespace deepinfer {

class PageBuffer {
 public:
  PageBuffer() = default;
  // Aborts when the kernel refuses the memory (as std::vector's allocation would throw).
  explicit PageBuffer(size_t bytes);
  // The same, RESOURCE_EXHAUSTED instead of aborting: for sizes a user chose (a KV cache).
  static Result<PageBuffer> allocate(size_t bytes);
  ~PageBuffer();
  PageBuffer(PageBuffer&& other) noexcept;
  PageBuffer& operator=(PageBuffer&& other) noexcept;
  PageBuffer(const PageBuffer&) = delete;
  PageBuffer& operator=(const PageBuffer&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  // Commits every page now (a write fault each, zeros kept), so that the first use of a page in
  // the forward pass does not stop to have the kernel zero it. A server's KV cache: the pages a
  // step touches first would otherwise cost it a fault per 4 KiB or 2 MiB, for as long as the
  // pool has pages not yet used.
  void prefault();

 private:
  void reset();

  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace deepinfer
