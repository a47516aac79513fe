#include "engine/stream_handle.h"

#include <algorithm>

namespace deepinfer {

StreamHandle::StreamHandle(std::shared_ptr<const Tokenizer> tokenizer, const GenerationRequest& request,
                           std::shared_ptr<EngineWakeup> wakeup)
    : tokenizer_(std::move(tokenizer)),
      wakeup_(std::move(wakeup)),
      stop_requested_(new std::atomic<bool>[static_cast<size_t>(request.n)]),
      text_(static_cast<size_t>(request.n)),
      finished_(static_cast<size_t>(request.n), false),
      n_open_(request.n) {
  for (int32_t i = 0; i < request.n; ++i) {
    stop_requested_[static_cast<size_t>(i)].store(false);
    if (tokenizer_ && request.detokenize) {
      text_[static_cast<size_t>(i)].emplace(*tokenizer_, request.stop, request.include_stop_str_in_output);
    }
  }
}

void StreamHandle::cancel() {
  cancelled_.store(true);
  wakeup_->signal();
}

void StreamHandle::push(TokenEvent event) {
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    events_.push_back(std::move(event));
  }
  ready_.notify_all();
}

std::optional<TokenEvent> StreamHandle::next() {
  TokenEvent e;
  if (wait_event(std::nullopt, &e) == WaitStatus::kEnd) return std::nullopt;
  return e;
}

WaitStatus StreamHandle::next_for(std::chrono::milliseconds timeout, TokenEvent* event) {
  return wait_event(std::chrono::steady_clock::now() + timeout, event);
}

WaitStatus StreamHandle::wait_event(std::optional<std::chrono::steady_clock::time_point> deadline,
                                    TokenEvent* out) {
  std::unique_lock<std::timed_mutex> reader(reader_mutex_, std::defer_lock);
  if (!deadline) {
    reader.lock();
  } else if (!reader.try_lock_until(*deadline)) {
    return WaitStatus::kTimeout;
  }
  while (n_open_ > 0) {
    TokenEvent e;
    {
      std::unique_lock<std::mutex> lock(queue_mutex_);
      const auto has_event = [&] { return !events_.empty(); };
      if (!deadline) {
        ready_.wait(lock, has_event);
      } else if (!ready_.wait_until(lock, *deadline, has_event)) {
        return WaitStatus::kTimeout;
      }
      e = std::move(events_.front());
      events_.pop_front();
    }
    if (!process(e)) continue;
    *out = std::move(e);
    return WaitStatus::kEvent;
  }
  return WaitStatus::kEnd;
}

bool StreamHandle::process(TokenEvent& e) {
  const auto i = static_cast<size_t>(e.index);
  if (finished_[i]) return false;
  if (std::optional<TextStream>& text = text_[i]) {
    TextPiece piece = text->push(e.tokens);
    if (!piece.stopped && e.finish != FinishReason::kNone) {
      TextPiece rest = text->finish();
      piece.text += rest.text;
      piece.stopped = rest.stopped;
      piece.stop_string = std::move(rest.stop_string);
    }
    e.text = std::move(piece.text);
    if (piece.stopped) {
      e.tokens.resize(std::min(e.tokens.size(), piece.n_tokens));  // the matching token is the last
      if (e.logprobs.size() > e.tokens.size()) e.logprobs.resize(e.tokens.size());
      e.finish = FinishReason::kStop;
      e.stop_string = std::move(piece.stop_string);
      e.stop_token = -1;
      if (!stop_requested_[i].exchange(true)) wakeup_->signal();
    }
  }
  if (e.finish != FinishReason::kNone) {
    finished_[i] = true;
    --n_open_;
  }
  return true;
}

}  // namespace deepinfer
