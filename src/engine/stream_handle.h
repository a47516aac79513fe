// StreamHandle: the RequestHandle the engine returns. The engine thread pushes raw events
// (token ids, logprobs, finish); the caller's thread pulls them and turns ids into text and
// matches stop strings there (TextStream), so the engine thread never detokenizes.
//
// Threading: push(), cancelled() and stop_requested() are the engine thread's; next(),
// next_for() and cancel() may be called from any thread (one reader at a time is served, others
// wait). A stop-string match finishes its sequence here at once and raises stop_requested, so
// the engine frees the sequence on its next step; the engine's later events for it are dropped.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "deepinfer/engine.h"
#include "engine/text_stream.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer {

// What the engine thread sleeps on. Shared with the handles so that a handle outliving the
// engine can still signal safely; the engine also guards its submission queue with `mutex`.
struct EngineWakeup {
  std::mutex mutex;
  std::condition_variable cv;
  uint64_t n_signals = 0;  // bumped by every cancel and stop-string match

  void signal() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      ++n_signals;
    }
    cv.notify_all();
  }
};

class StreamHandle final : public RequestHandle {
 public:
  // `tokenizer` null: events carry no text (the engine rejects stop strings then).
  StreamHandle(std::shared_ptr<const Tokenizer> tokenizer, const GenerationRequest& request,
               std::shared_ptr<EngineWakeup> wakeup);

  std::optional<TokenEvent> next() override;
  WaitStatus next_for(std::chrono::milliseconds timeout, TokenEvent* event) override;
  void cancel() override;

  // Engine side.
  void push(TokenEvent event);
  bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }
  bool stop_requested(int32_t index) const { return stop_requested_[static_cast<size_t>(index)].load(); }

 private:
  // Waits for the next event to hand out until `deadline` (none: forever).
  WaitStatus wait_event(std::optional<std::chrono::steady_clock::time_point> deadline, TokenEvent* out);
  // Adds text and applies stop strings; false when the event belongs to a finished sequence.
  bool process(TokenEvent& e);

  std::shared_ptr<const Tokenizer> tokenizer_;
  std::shared_ptr<EngineWakeup> wakeup_;
  std::atomic<bool> cancelled_{false};
  std::unique_ptr<std::atomic<bool>[]> stop_requested_;  // [n]

  std::mutex queue_mutex_;  // guards events_
  std::condition_variable ready_;
  std::deque<TokenEvent> events_;

  std::timed_mutex reader_mutex_;  // one reader at a time; guards what follows
  std::vector<std::optional<TextStream>> text_;  // [n], when detokenizing
  std::vector<bool> finished_;                   // [n] the final event was handed out
  int32_t n_open_ = 0;
};

}  // namespace deepinfer
