// Splitting a kernel's work over XLA:CPU's intra-op thread pool (xla::ffi::ThreadPool).
#ifndef HLOPT_RUNTIME_NATIVE_PARALLEL_H_
#define HLOPT_RUNTIME_NATIVE_PARALLEL_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <utility>

#include "xla/ffi/api/ffi.h"

namespace hlopt {

// Calls `f(block)` once for every block in [0, n_blocks), on the calling thread and on up to
// `pool.num_threads() - 1` pool threads (one thread a core, the caller's included), and returns
// when every call has returned.
//
// Blocks are taken from a shared counter, so the caller never waits for a task that has not
// started: a task that starts late (its pool busy, or running the caller) finds no block left
// and returns without touching `f`, whose captures may be gone by then. Without a pool
// (Schedule runs the task inline) the blocks run on the caller in order.
template <typename F>
void parallel_for(xla::ffi::ThreadPool& pool, int64_t n_blocks, F& f) {
  if (n_blocks <= 0) return;
  const int64_t helpers = std::min<int64_t>(pool.num_threads() - 1, n_blocks - 1);
  if (helpers <= 0) {
    for (int64_t b = 0; b < n_blocks; ++b) f(b);
    return;
  }
  struct State {
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> done{0};
  };
  auto state = std::make_shared<State>();
  F* body = &f;
  auto work = [state, body, n_blocks]() {
    for (;;) {
      const int64_t b = state->next.fetch_add(1, std::memory_order_relaxed);
      if (b >= n_blocks) return;
      (*body)(b);
      state->done.fetch_add(1, std::memory_order_release);
    }
  };
  for (int64_t i = 0; i < helpers; ++i) {
    auto task = work;  // Schedule takes its task by value (an rvalue)
    pool.Schedule(std::move(task));
  }
  work();
  while (state->done.load(std::memory_order_acquire) < n_blocks) std::this_thread::yield();
}

}  // namespace hlopt

#endif  // HLOPT_RUNTIME_NATIVE_PARALLEL_H_
