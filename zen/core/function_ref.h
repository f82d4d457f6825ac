// zen/core/function_ref.h — a non-owning reference to a callable, for
// callbacks on hot paths.
//
// std::function may allocate when the callable it stores is larger than its
// small buffer (a lambda capturing a few references already is); a hot path
// that must not allocate per call takes a FunctionRef instead: two words, no
// allocation, no ownership. The callable must outlive every call made
// through the reference (pass a lambda straight into the call that uses it).
//
// Usage:
//   void ForEachMessage(zen::FunctionRef<void(int peer)> on_message);
//   ForEachMessage([&](int peer) { Decode(messages[peer]); });
#pragma once

#include <memory>
#include <type_traits>
#include <utility>

namespace zen {

template <typename Signature>
class FunctionRef;

template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
 public:
  template <typename F,
            typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, FunctionRef> &&
                                        std::is_invocable_r_v<R, F&, Args...>>>
  FunctionRef(F&& f)  // NOLINT(google-explicit-constructor): a lambda converts implicitly
      : object_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* object, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(object))(std::forward<Args>(args)...);
        }) {}

  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  void* object_;
  R (*call_)(void*, Args...);
};

}  // namespace zen
