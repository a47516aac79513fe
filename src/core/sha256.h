// SHA-256 of files and buffers (OpenSSL), as lowercase hex.
#pragma once

#include <span>
#include <string>

#include "deepinfer/status.h"

namespace deepinfer {

std::string sha256_hex(std::span<const uint8_t> bytes);
// Streams the file in 1 MiB reads; NOT_FOUND when it does not exist.
Result<std::string> sha256_file_hex(const std::string& path);

}  // namespace deepinfer
