// The CUDA forwards' argument checks that need no device: which of x and y is
// not 16-byte aligned.
#include <gtest/gtest.h>

#include "cuda/common/forward_args.h"

namespace mxmoe::smxx {
namespace {

TEST(ForwardArgs, NamesTheFirstMisalignedPointer) {
  alignas(16) static uint16_t x[16];
  alignas(16) static float y[8];
  ForwardArgs a;
  a.x = x;
  a.y = y;
  EXPECT_EQ(misaligned_arg(a), "");
  a.x = x + 1;  // 2 bytes in
  EXPECT_EQ(misaligned_arg(a), "x");
  a.x = x + 8;  // 16 bytes in
  EXPECT_EQ(misaligned_arg(a), "");
  a.y = y + 2;  // 8 bytes in
  EXPECT_EQ(misaligned_arg(a), "y");
  a.x = x + 4;
  EXPECT_EQ(misaligned_arg(a), "x");
}

}  // namespace
}  // namespace mxmoe::smxx
