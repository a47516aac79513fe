// One accepted TCP connection, driven with poll() and non-blocking recv/send so that every wait
// has a deadline. The owning connection thread does all I/O; any other thread may only abort(),
// which wakes that thread (its reads see end of stream, its writes fail).
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <mutex>

namespace deepinfer::server {

using Clock = std::chrono::steady_clock;

enum class ReadOutcome {
  kData,     // `n` bytes arrived
  kEof,      // the peer closed (or the socket was aborted)
  kTimeout,  // nothing arrived before the deadline
  kWoken,    // `wake_fd` became readable first (the server is shutting down)
  kError,
};

struct ReadResult {
  ReadOutcome outcome;
  size_t n = 0;
};

class Socket {
 public:
  explicit Socket(int fd);
  ~Socket();
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  // Waits for data until `deadline` (and for `wake_fd`, when not -1), then reads what is there.
  ReadResult read_some(char* out, size_t capacity, Clock::time_point deadline, int wake_fd = -1);
  // Sends every byte of `iov` or fails (peer gone, aborted, or no progress before `deadline`).
  // Never raises SIGPIPE.
  bool send_all(iovec* iov, int n_iov, Clock::time_point deadline);
  bool send_all(const char* data, size_t size, Clock::time_point deadline);
  // Non-blocking: has the peer closed its side or reset? Data waiting to be read (a pipelined
  // request) is left in place.
  bool peer_gone();
  // Server-initiated close that does not lose the response to a reset: stop sending, discard
  // what the peer still sends for a moment, then close.
  void linger_close(std::chrono::milliseconds max_wait);
  void close();

  // Any thread: shuts the socket down so that the owner's blocking calls return.
  void abort();
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }

  // Any thread: asks the owner to end the answer in progress (shutdown past its grace). The
  // socket stays open, so that the owner can end a stream with a last event before closing;
  // abort() is the backstop for an owner that does not notice.
  void cut() { cut_.store(true, std::memory_order_release); }
  bool is_cut() const { return cut_.load(std::memory_order_acquire); }

 private:
  std::mutex mutex_;  // guards fd_ against abort() racing close() (and fd reuse)
  int fd_;
  std::atomic<bool> aborted_{false};
  std::atomic<bool> cut_{false};
};

}  // namespace deepinfer::server
