#include "core/log.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace deepinfer {

namespace {
LogLevel read_level() {
  const char* env = std::getenv("DEEPINFER_LOG");
  if (env == nullptr) return LogLevel::kWarn;
  if (std::strcmp(env, "error") == 0) return LogLevel::kError;
  if (std::strcmp(env, "info") == 0) return LogLevel::kInfo;
  if (std::strcmp(env, "debug") == 0) return LogLevel::kDebug;
  return LogLevel::kWarn;
}
const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kError: return "error";
    case LogLevel::kWarn: return "warn";
    case LogLevel::kInfo: return "info";
    case LogLevel::kDebug: return "debug";
  }
  return "?";
}
}  // namespace

bool log_enabled(LogLevel level) {
  static const LogLevel threshold = read_level();
  return static_cast<int>(level) <= static_cast<int>(threshold);
}

void log_message(LogLevel level, std::string_view message) {
  std::fprintf(stderr, "deepinfer %s: %.*s\n", level_name(level), static_cast<int>(message.size()),
               message.data());
}

}  // namespace deepinfer
