// The CUDA forwards' argument checks that need no device: x and y alignment,
// x's row stride, and one output.
#include <gtest/gtest.h>

#include "cuda/common/forward_args.h"

namespace mxmoe::smxx {
namespace {

constexpr int64_t kHidden = 32;

TEST(ForwardArgs, NamesTheFirstMisalignedPointer) {
  alignas(16) static uint16_t x[16];
  alignas(16) static float y[8];
  ForwardArgs a;
  a.x = x;
  a.y = y;
  EXPECT_EQ(forward_arg_error(a, kHidden), "");
  a.x = x + 1;  // 2 bytes in
  EXPECT_EQ(forward_arg_error(a, kHidden), "x must be 16-byte aligned");
  a.x = x + 8;  // 16 bytes in
  EXPECT_EQ(forward_arg_error(a, kHidden), "");
  a.y = y + 2;  // 8 bytes in
  EXPECT_EQ(forward_arg_error(a, kHidden), "y must be 16-byte aligned");
  a.x = x + 4;
  EXPECT_EQ(forward_arg_error(a, kHidden), "x must be 16-byte aligned");
}

TEST(ForwardArgs, RowStrideIsAtLeastHAndKeepsRowsAligned) {
  alignas(16) static uint16_t x[16];
  alignas(16) static float y[8];
  ForwardArgs a;
  a.x = x;
  a.y = y;
  EXPECT_EQ(x_row_stride(a, kHidden), kHidden);  // 0 means dense
  a.x_stride = kHidden + 8;
  EXPECT_EQ(forward_arg_error(a, kHidden), "");
  EXPECT_EQ(x_row_stride(a, kHidden), kHidden + 8);
  a.x_stride = kHidden + 4;  // rows 8 bytes apart from 16-byte alignment
  EXPECT_EQ(forward_arg_error(a, kHidden), "x's row stride must be at least H and a multiple of 8 elements");
  a.x_stride = kHidden - 8;  // rows overlap
  EXPECT_EQ(forward_arg_error(a, kHidden), "x's row stride must be at least H and a multiple of 8 elements");
}

TEST(ForwardArgs, ExactlyOneOutput) {
  alignas(16) static uint16_t x[16], yb[16];
  alignas(16) static float y[8];
  ForwardArgs a;
  a.x = x;
  EXPECT_EQ(forward_arg_error(a, kHidden), "exactly one of y (fp32) and y_bf16 must be given");
  a.y = y;
  a.y_bf16 = yb;
  EXPECT_EQ(forward_arg_error(a, kHidden), "exactly one of y (fp32) and y_bf16 must be given");
  a.y = nullptr;
  EXPECT_EQ(forward_arg_error(a, kHidden), "");
  a.y_bf16 = yb + 4;  // 8 bytes in
  EXPECT_EQ(forward_arg_error(a, kHidden), "y must be 16-byte aligned");
}

}  // namespace
}  // namespace mxmoe::smxx
