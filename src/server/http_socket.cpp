#include "server/http_socket.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace deepinfer::server {

namespace {

int ms_until(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  // Round a partial millisecond up so that a wait never spins at 0 before the deadline.
  return static_cast<int>(std::clamp<int64_t>(left + 1, 0, 1 << 30));
}

}  // namespace

Socket::Socket(int fd) : fd_(fd) {}

Socket::~Socket() { close(); }

ReadResult Socket::read_some(char* out, size_t capacity, Clock::time_point deadline, int wake_fd) {
  while (true) {
    ssize_t n = ::recv(fd_, out, capacity, MSG_DONTWAIT);
    if (n > 0) return {ReadOutcome::kData, static_cast<size_t>(n)};
    if (n == 0 || aborted()) return {ReadOutcome::kEof};
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return {errno == ECONNRESET ? ReadOutcome::kEof : ReadOutcome::kError};
    }
    pollfd fds[2] = {{fd_, POLLIN, 0}, {wake_fd, POLLIN, 0}};
    int timeout = ms_until(deadline);
    if (timeout == 0) return {ReadOutcome::kTimeout};
    int r = ::poll(fds, wake_fd >= 0 ? 2 : 1, timeout);
    if (r < 0 && errno != EINTR) return {ReadOutcome::kError};
    if (r == 0 && Clock::now() >= deadline) return {ReadOutcome::kTimeout};
    // Data that is already here wins over the wake-up: a request in flight is finished.
    if (wake_fd >= 0 && (fds[1].revents & POLLIN) && !(fds[0].revents & (POLLIN | POLLHUP | POLLERR))) {
      return {ReadOutcome::kWoken};
    }
  }
}

bool Socket::send_all(iovec* iov, int n_iov, Clock::time_point deadline) {
  while (n_iov > 0) {
    if (aborted()) return false;
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(n_iov);
    ssize_t n = ::sendmsg(fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return false;
      pollfd pfd{fd_, POLLOUT, 0};
      int timeout = ms_until(deadline);
      if (timeout == 0) return false;
      int r = ::poll(&pfd, 1, timeout);
      if (r < 0 && errno != EINTR) return false;
      if (pfd.revents & (POLLERR | POLLHUP)) return false;
      continue;
    }
    size_t sent = static_cast<size_t>(n);
    while (n_iov > 0 && sent >= iov->iov_len) {
      sent -= iov->iov_len;
      ++iov;
      --n_iov;
    }
    if (n_iov > 0) {
      iov->iov_base = static_cast<char*>(iov->iov_base) + sent;
      iov->iov_len -= sent;
    }
  }
  return true;
}

bool Socket::send_all(const char* data, size_t size, Clock::time_point deadline) {
  iovec iov{const_cast<char*>(data), size};
  return send_all(&iov, 1, deadline);
}

bool Socket::peer_gone() {
  if (aborted()) return true;
  pollfd pfd{fd_, POLLIN | POLLRDHUP, 0};
  if (::poll(&pfd, 1, 0) <= 0) return false;
  if (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
  if (pfd.revents & POLLIN) {
    // Readable without RDHUP: either a pipelined request (keep it) or end of stream.
    char byte;
    ssize_t n = ::recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return true;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return true;
  }
  return false;
}

void Socket::linger_close(std::chrono::milliseconds max_wait) {
  if (!aborted()) {
    ::shutdown(fd_, SHUT_WR);
    auto deadline = Clock::now() + max_wait;
    char sink[4096];
    while (read_some(sink, sizeof(sink), deadline).outcome == ReadOutcome::kData) {
    }
  }
  close();
}

void Socket::close() {
  std::lock_guard lock(mutex_);
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void Socket::abort() {
  std::lock_guard lock(mutex_);
  aborted_.store(true, std::memory_order_release);
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

}  // namespace deepinfer::server
