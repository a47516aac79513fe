#include "server/http_writer.h"

#include <cstdio>

namespace deepinfer::server {

ConnectionWriter::ConnectionWriter(const ServerContext& context, Socket& socket, Options options)
    : context_(context), socket_(socket), options_(std::move(options)), keep_alive_(options_.keep_alive) {}

Headers ConnectionWriter::with_cors(const Headers& extra) const {
  Headers all = options_.cors;
  all.insert(all.end(), extra.begin(), extra.end());
  return all;
}

void ConnectionWriter::send(int status, std::string_view content_type, std::string body, const Headers& extra) {
  if (state_ != State::kNone) return;  // answered already: the contract allows one answer
  state_ = State::kDone;
  status_ = status;
  keep_alive_ = keep_alive_ && !context_.stopping.load() && !socket_.is_cut();
  std::string head;
  append_response_head(head, status, content_type, Framing::kContentLength, body.size(), keep_alive_,
                       with_cors(extra));
  const bool head_only = options_.head_only;
  iovec iov[2] = {{head.data(), head.size()}, {body.data(), head_only ? 0 : body.size()}};
  if (!socket_.send_all(iov, 2, write_deadline())) gone_ = true;
  bytes_ = head_only ? 0 : body.size();
}

bool ConnectionWriter::start_stream(int status, std::string_view content_type, const Headers& extra) {
  if (state_ != State::kNone) return false;
  state_ = State::kStreaming;
  status_ = status;
  // RFC 9112 section 6.1: no chunked to an HTTP/1.0 client; the close ends its body instead.
  stream_framing_ = options_.version >= 11 ? Framing::kChunked : Framing::kUntilClose;
  keep_alive_ = keep_alive_ && !context_.stopping.load() && stream_framing_ == Framing::kChunked;
  std::string head;
  append_response_head(head, status, content_type, stream_framing_, 0, keep_alive_, with_cors(extra));
  if (!socket_.send_all(head.data(), head.size(), write_deadline())) gone_ = true;
  return !gone_;
}

bool ConnectionWriter::send_piece(std::string_view data) {
  if (stream_framing_ == Framing::kUntilClose) return socket_.send_all(data.data(), data.size(), write_deadline());
  char size_line[24];
  int n = std::snprintf(size_line, sizeof(size_line), "%zx\r\n", data.size());
  static const char kCrlf[] = "\r\n";
  iovec iov[3] = {{size_line, static_cast<size_t>(n)},
                  {const_cast<char*>(data.data()), data.size()},
                  {const_cast<char*>(kCrlf), 2}};
  return socket_.send_all(iov, 3, write_deadline());
}

bool ConnectionWriter::write(std::string_view data) {
  if (state_ != State::kStreaming || gone_ || socket_.is_cut()) return false;
  if (options_.head_only || data.empty()) return !client_gone();  // an empty chunk would end the stream
  if (!send_piece(data)) {
    gone_ = true;
    return false;
  }
  bytes_ += data.size();
  return true;
}

void ConnectionWriter::finish() {
  if (state_ != State::kStreaming) return;
  state_ = State::kDone;
  if (options_.head_only || gone_ || stream_framing_ == Framing::kUntilClose) return;
  static const char kLastChunk[] = "0\r\n\r\n";
  if (!socket_.send_all(kLastChunk, 5, write_deadline())) gone_ = true;
}

bool ConnectionWriter::client_gone() {
  if (socket_.is_cut()) return true;  // not the client's doing: gone_ stays as it was
  if (!gone_ && socket_.peer_gone()) gone_ = true;
  return gone_;
}

bool ConnectionWriter::end_cut(int status, std::string_view last_event, std::string body) {
  if (state_ == State::kNone) {
    send(status, "application/json", std::move(body), {});
    return true;
  }
  if (state_ != State::kStreaming) return false;
  keep_alive_ = false;
  if (!options_.head_only && !gone_ && !last_event.empty()) {
    if (send_piece(last_event)) {
      bytes_ += last_event.size();
    } else {
      gone_ = true;
    }
  }
  finish();
  return true;
}

}  // namespace deepinfer::server
