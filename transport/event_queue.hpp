// EventQueue<T>: events an application waits for on a file descriptor —
// what ibv_comp_channel (CQ events), ibv_get_async_event (device events)
// and rdma_event_channel (CM events) each are.  One implementation for
// the three.
//
// An eventfd in semaphore mode holds one count per queued event.  push()
// queues the event, then gives its count, so a reader that got a count
// finds an event — unless the event was removed meanwhile (remove_if: its
// CQ or id went away): take() then waits again on a blocking fd and
// returns EAGAIN on a non-blocking one.  remove_if takes the removed
// events' counts back, so that poll(2) on the fd says what the queue
// holds (as the kernel's event files do once an object is destroyed); on
// a blocking fd it makes the fd non-blocking for those reads, and a
// take() that meets EAGAIN in that window waits again.  The fd is the application's to
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
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
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
      if (const int rc = take_count()) {
        if (rc != EAGAIN || !borrowed_nonblocking()) return rc;
        sched_yield();  // remove_if's reads: wait for the fd to block again
        continue;
      }
      if (pop(out)) return 0;
      if (nonblocking() && !borrowed_nonblocking()) return EAGAIN;  // its event was removed
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
    if (dropped == 0) return dropped;
    // Non-blocking reads whatever the application chose (a reader may have
    // taken a removed event's count already: then there is one less).
    std::lock_guard flags_lock(flags_mu_);
    const int flags = ::fcntl(fd_, F_GETFL);
    const bool borrow = flags >= 0 && (flags & O_NONBLOCK) == 0;
    if (borrow) {
      borrowing_.store(true, std::memory_order_release);
      ::fcntl(fd_, F_SETFL, flags | O_NONBLOCK);
    }
    for (size_t i = 0; i < dropped; ++i) {
      uint64_t v = 0;
      if (::read(fd_, &v, sizeof v) != static_cast<ssize_t>(sizeof v)) break;
    }
    if (borrow) {
      ::fcntl(fd_, F_SETFL, flags);
      borrowing_.store(false, std::memory_order_release);
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

  bool borrowed_nonblocking() const noexcept { return borrowing_.load(std::memory_order_acquire); }

  int fd_ = -1;
  std::mutex mu_;
  std::mutex flags_mu_;              // one remove_if at a time changes the fd's flags
  std::atomic<bool> borrowing_{false};  // remove_if made a blocking fd non-blocking
  std::vector<T> q_;
  size_t head_ = 0;  // the oldest event still queued
};

}  // namespace uroce::transport
