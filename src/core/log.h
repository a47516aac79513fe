// Minimal leveled logging to stderr. The level is read once from DEEPINFER_LOG
// (error, warn, info, debug; default warn) so the CLI's stdout stays clean for output.
#pragma once

#include <string_view>

namespace deepinfer {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

bool log_enabled(LogLevel level);
void log_message(LogLevel level, std::string_view message);

}  // namespace deepinfer

#define DI_LOG(level, msg)                                                   \
  do {                                                                       \
    if (::deepinfer::log_enabled(::deepinfer::LogLevel::level))              \
      ::deepinfer::log_message(::deepinfer::LogLevel::level, (msg));         \
  } while (0)
