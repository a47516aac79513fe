// Server-sent events from a byte stream that arrives in arbitrary pieces (the client side of
// what http_writer streams): lines end in LF or CRLF, a blank line ends an event, "data:" lines
// are joined with LF, "event:" names the event, lines starting with ':' are comments.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace deepinfer::server {

struct SseEvent {
  std::string event;  // "" when the server named none
  std::string data;
};

class SseReader {
 public:
  // Appends `bytes` and returns the events they complete, in order.
  std::vector<SseEvent> feed(std::string_view bytes);
  // The last event when the stream ended without its blank line (or nothing).
  std::vector<SseEvent> finish();

 private:
  void take_line(std::string_view line, std::vector<SseEvent>& out);

  std::string pending_;  // bytes of an unfinished line
  SseEvent current_;
  bool has_data_ = false;
};

}  // namespace deepinfer::server
