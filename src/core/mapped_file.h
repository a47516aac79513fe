// Read-only memory map of a whole file. Model weights are used in place from the map, so a
// MappedFile must outlive every tensor view into it. Movable, not copyable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "deepinfer/status.h"

namespace deepinfer {

class MappedFile {
 public:
  MappedFile() = default;
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  // Errors: NOT_FOUND when the file does not exist, INVALID_ARGUMENT for a directory.
  static Result<MappedFile> open(const std::string& path);

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }

 private:
  void reset();

  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace deepinfer
