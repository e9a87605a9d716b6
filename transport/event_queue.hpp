// EventQueue<T>: events an application waits for on a file descriptor —
// what ibv_comp_channel (CQ events), ibv_get_async_event (device events)
// and rdma_event_channel (CM events) each are.  One implementation for
// the three.
//
// An eventfd in semaphore mode holds one count per queued event.  push()
// queues the event, then gives its count, so a reader that got a count
// finds an event — unless the event was removed meanwhile (remove_if: its
// CQ or id went away): take() then waits again on a blocking fd and
// returns EAGAIN on a non-blocking one.  The fd is the application's to
// poll(2), epoll or make O_NONBLOCK (fcntl), as with the kernel's
// channels: take() blocks unless it is non-blocking.
//
// Storage is a vector with a read index: push() allocates nothing while
// the capacity reserve() asked for suffices (the engine pushes).
//
// Threads: push() on any thread (the engine's, in practice); take() and
// remove_if() on application threads; all of them under the queue's own
// mutex, never held while blocking.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace uroce::transport {

template <class T>
class EventQueue {
 public:
  EventQueue() : fd_(::eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE)) {}
  ~EventQueue() {
    if (fd_ >= 0) ::close(fd_);
  }
  EventQueue(const EventQueue&) = delete;
  EventQueue& operator=(const EventQueue&) = delete;

  // False when the eventfd could not be made (EMFILE and the like).
  bool valid() const noexcept { return fd_ >= 0; }
  int fd() const noexcept { return fd_; }
  bool nonblocking() const noexcept { return (::fcntl(fd_, F_GETFL) & O_NONBLOCK) != 0; }

  // Room for `n` queued events without allocating.
  void reserve(size_t n) {
    std::lock_guard lock(mu_);
    q_.reserve(q_.size() - head_ + n);
  }

  void push(const T& ev) {
    {
      std::lock_guard lock(mu_);
      if (head_ != 0 && q_.size() == q_.capacity()) compact();
      q_.push_back(ev);
    }
    const uint64_t one = 1;
    while (::write(fd_, &one, sizeof one) < 0 && errno == EINTR) {
    }
  }

  // One count (blocking unless the fd is O_NONBLOCK), then the oldest
  // event.  0; EAGAIN when non-blocking and nothing is queued; else the
  // read's errno: EINTR when a signal whose handler lacks SA_RESTART
  // arrives while blocked, as libibverbs/librdmacm report it (qperf ends a
  // test with an alarm that must get its thread out of ibv_get_cq_event).
  int take(T* out) {
    for (;;) {
      if (const int rc = take_count()) return rc;
      if (pop(out)) return 0;
      if (nonblocking()) return EAGAIN;  // its event was removed
    }
  }

  // The count only (a caller that waits its own way: RdmaCm drives the
  // engine while it waits), then pop() for the event.
  int take_count() {
    if (fd_ < 0) return EBADF;
    uint64_t v = 0;
    const ssize_t n = ::read(fd_, &v, sizeof v);
    if (n == static_cast<ssize_t>(sizeof v)) return 0;
    return n < 0 ? errno : EIO;
  }
  bool pop(T* out) {
    std::lock_guard lock(mu_);
    if (head_ == q_.size()) return false;
    *out = q_[head_++];
    if (head_ == q_.size()) q_.clear(), head_ = 0;
    return true;
  }
  // True when a count is waiting (poll(2) with no timeout).
  bool readable() const noexcept {
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, 0) == 1;
  }

  // Drops every queued event `pred` selects; returns how many.  On a
  // non-blocking fd their counts are taken back; on a blocking one they
  // stay (a reader may hold one already, and a read could block): a count
  // with no event behind it only makes take() wait again.
  template <class Pred>
  size_t remove_if(Pred pred) {
    size_t dropped = 0;
    {
      std::lock_guard lock(mu_);
      size_t w = head_;
      for (size_t r = head_; r < q_.size(); ++r) {
        if (pred(q_[r])) {
          ++dropped;
        } else {
          q_[w++] = q_[r];
        }
      }
      q_.resize(w);
      if (head_ == q_.size()) q_.clear(), head_ = 0;
    }
    if (!nonblocking()) return dropped;
    for (size_t i = 0; i < dropped; ++i) {
      uint64_t v = 0;
      if (::read(fd_, &v, sizeof v) != static_cast<ssize_t>(sizeof v)) break;
    }
    return dropped;
  }

  size_t size() {
    std::lock_guard lock(mu_);
    return q_.size() - head_;
  }

 private:
  void compact() {
    q_.erase(q_.begin(), q_.begin() + static_cast<std::ptrdiff_t>(head_));
    head_ = 0;
  }

  int fd_ = -1;
  std::mutex mu_;
  std::vector<T> q_;
  size_t head_ = 0;  // the oldest event still queued
};

}  // namespace uroce::transport
