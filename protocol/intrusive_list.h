// A doubly linked intrusive list: the caller's objects carry the links, so queueing never
// allocates and removal of a known element is O(1). Used by the tag matcher, whose queue
// elements live inside requests and unexpected-message descriptors owned by the transport.
#pragma once

namespace rdmx::protocol::detail {

template <class T>
struct Links {
  T* prev = nullptr;
  T* next = nullptr;
};

// Head and tail pointers instead of a circular sentinel, so a List can live in a std::vector
// (moving it never leaves an element pointing at the old sentinel address).
template <class T, Links<T> T::*L>
class List {
 public:
  T* front() const noexcept { return head_; }
  bool empty() const noexcept { return head_ == nullptr; }
  static T* next(const T* node) noexcept { return (node->*L).next; }

  void push_back(T* node) noexcept {
    Links<T>& links = node->*L;
    links.prev = tail_;
    links.next = nullptr;
    if (tail_ != nullptr) {
      (tail_->*L).next = node;
    } else {
      head_ = node;
    }
    tail_ = node;
  }

  // Precondition: node is in this list.
  void remove(T* node) noexcept {
    Links<T>& links = node->*L;
    if (links.prev != nullptr) {
      (links.prev->*L).next = links.next;
    } else {
      head_ = links.next;
    }
    if (links.next != nullptr) {
      (links.next->*L).prev = links.prev;
    } else {
      tail_ = links.prev;
    }
    links.prev = nullptr;
    links.next = nullptr;
  }

 private:
  T* head_ = nullptr;
  T* tail_ = nullptr;
};

}  // namespace rdmx::protocol::detail
