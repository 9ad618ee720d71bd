// Explicit<T>: a struct member the caller must set. It has no default constructor, so a
// designated initializer that leaves it out does not compile. Used for the QP attributes whose
// "obvious" default is a trap (min_rnr_timer 0 means 655 ms per RNR retry, timeout 0 means wait
// for ever, a forgotten psn or mtu silently mismatches the peer).
#pragma once

namespace rdmx::verbs {

template <typename T>
class Explicit {
 public:
  Explicit(T value) : value_(value) {}  // NOLINT(google-explicit-constructor): `.x = 5` must work
  operator T() const noexcept { return value_; }  // NOLINT(google-explicit-constructor)
  T get() const noexcept { return value_; }

 private:
  T value_;
};

}  // namespace rdmx::verbs
