#include "zen/core/function_ref.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace zen {
namespace {

int Apply(FunctionRef<int(int, const std::string&)> f, int x, const std::string& s) {
  return f(x, s);
}

TEST(FunctionRef, CallsTheReferencedCallableWithItsState) {
  int calls = 0;
  const int base = 40;
  auto add = [&](int x, const std::string& s) {
    ++calls;
    return base + x + static_cast<int>(s.size());
  };
  EXPECT_EQ(Apply(add, 1, "a"), 42);
  EXPECT_EQ(Apply(add, 0, ""), 40);
  EXPECT_EQ(calls, 2);  // the lambda itself was called, not a copy of it
}

TEST(FunctionRef, TakesMutableCallablesAndMoveOnlyArguments) {
  int total = 0;
  auto sink = [&total](std::unique_ptr<int> p) mutable { total += *p; };
  FunctionRef<void(std::unique_ptr<int>)> f(sink);
  f(std::make_unique<int>(3));
  f(std::make_unique<int>(4));
  EXPECT_EQ(total, 7);
}

}  // namespace
}  // namespace zen
