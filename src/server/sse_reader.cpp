#include "server/sse_reader.h"

namespace deepinfer::server {

std::vector<SseEvent> SseReader::feed(std::string_view bytes) {
  std::vector<SseEvent> out;
  pending_.append(bytes);
  size_t start = 0;
  while (true) {
    const size_t nl = pending_.find('\n', start);
    if (nl == std::string::npos) break;
    std::string_view line(pending_.data() + start, nl - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    take_line(line, out);
    start = nl + 1;
  }
  pending_.erase(0, start);
  return out;
}

std::vector<SseEvent> SseReader::finish() {
  std::vector<SseEvent> out;
  if (!pending_.empty()) {
    std::string line = std::move(pending_);
    pending_.clear();
    take_line(line, out);
  }
  take_line("", out);
  return out;
}

void SseReader::take_line(std::string_view line, std::vector<SseEvent>& out) {
  if (line.empty()) {
    if (has_data_ || !current_.event.empty()) out.push_back(std::move(current_));
    current_ = {};
    has_data_ = false;
    return;
  }
  if (line.front() == ':') return;
  const size_t colon = line.find(':');
  std::string_view field = line.substr(0, colon);
  std::string_view value = colon == std::string_view::npos ? std::string_view() : line.substr(colon + 1);
  if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  if (field == "data") {
    if (has_data_) current_.data.push_back('\n');
    current_.data.append(value);
    has_data_ = true;
  } else if (field == "event") {
    current_.event = std::string(value);
  }
}

}  // namespace deepinfer::server
