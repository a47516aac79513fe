#include "core/page_buffer.h"

#include <sys/mman.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

namespace deepinfer {

namespace {
void* map_pages(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
#if defined(MADV_HUGEPAGE)
  // Advice only: a system without transparent huge pages keeps 4 KiB pages.
  madvise(p, bytes, MADV_HUGEPAGE);
#endif
  return p;
}
}  // namespace

PageBuffer::PageBuffer(size_t bytes) : size_(bytes) {
  if (bytes == 0) return;
  void* p = map_pages(bytes);
  if (p == nullptr) {
    std::fprintf(stderr, "deepinfer: out of memory: could not map %zu bytes\n", bytes);
    std::abort();
  }
  data_ = static_cast<uint8_t*>(p);
}

Result<PageBuffer> PageBuffer::allocate(size_t bytes) {
  PageBuffer b;
  if (bytes == 0) return b;
  void* p = map_pages(bytes);
  if (p == nullptr) return resource_exhausted("out of memory: could not map " + std::to_string(bytes) + " bytes");
  b.data_ = static_cast<uint8_t*>(p);
  b.size_ = bytes;
  return b;
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

void PageBuffer::prefault() {
  if (data_ == nullptr || size_ == 0) return;
#if defined(MADV_POPULATE_WRITE)
  // The kernel faults the pages in itself (Linux 5.14 on), without a trip to user space per page
  // and without touching the contents.
  if (madvise(data_, size_, MADV_POPULATE_WRITE) == 0) return;
#endif
  constexpr size_t kPage = 4096;
  volatile uint8_t* bytes = data_;
  for (size_t at = 0; at < size_; at += kPage) bytes[at] = bytes[at];
}

}  // namespace deepinfer
