#include "core/kv_group_spec.h"

namespace deepinfer {

std::string_view kv_group_kind_name(KvGroupKind kind) {
  switch (kind) {
    case KvGroupKind::kFull: return "full";
    case KvGroupKind::kSlidingWindow: return "sliding_window";
    case KvGroupKind::kCompressed: return "compressed";
    case KvGroupKind::kCompressorState: return "compressor_state";
  }
  return "unknown";
}

}  // namespace deepinfer
