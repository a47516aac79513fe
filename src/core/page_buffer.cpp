#include "core/page_buffer.h"

#include <sys/mman.h>

#include <cstdio>
#include <cstdlib>
#include <utility>

namespace deepinfer {

PageBuffer::PageBuffer(size_t bytes) : size_(bytes) {
  if (bytes == 0) return;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    std::fprintf(stderr, "deepinfer: out of memory: could not map %zu bytes\n", bytes);
    std::abort();
  }
#if defined(MADV_HUGEPAGE)
  // Advice only: a system without transparent huge pages keeps 4 KiB pages.
  madvise(p, bytes, MADV_HUGEPAGE);
#endif
  data_ = static_cast<uint8_t*>(p);
}

PageBuffer::~PageBuffer() { reset(); }

PageBuffer::PageBuffer(PageBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

PageBuffer& PageBuffer::operator=(PageBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void PageBuffer::reset() {
  if (data_ != nullptr) munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace deepinfer
