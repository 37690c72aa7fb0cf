#include "prism/core/shape.h"

#include <gtest/gtest.h>

#include "prism/core/error.h"

namespace prism {
namespace {

TEST(Tag, InternsNames) {
  Tag a("seq");
  Tag b(std::string("seq"));
  EXPECT_EQ(a, b);
  EXPECT_NE(a, Tag("d"));
  EXPECT_EQ(a.str(), "seq");
  EXPECT_TRUE(Tag().empty());
}

TEST(Shape, DescribesItself) {
  Shape s(DType::f32, {{"s", 7}, {"d", 4096}});
  EXPECT_EQ(s.rank(), 2);
  EXPECT_EQ(s.numel(), 7 * 4096);
  EXPECT_EQ(s.bytes(), 7 * 4096 * 4);
  EXPECT_EQ(s.axis("d", "test"), 1);
  EXPECT_EQ(s.str(), "f32{s=7,d=4096}");
  EXPECT_EQ(s.strides()[0], 4096);
}

TEST(Shape, RejectsMisuse) {
  try {
    Shape s(DType::f32, {{"a", 2}, {"a", 3}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "shape: duplicate tag \"a\" in {a=2,a=3}");
  }
  try {
    Shape(
        DType::f32,
        {{"a", 1}, {"b", 1}, {"c", 1}, {"d", 1}, {"e", 1}, {"f", 1}, {"g", 1}, {"h", 1}, {"i", 1}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "shape: rank 9 exceeds the maximum of 8 in {a=1,b=1,c=1,d=1,e=1,f=1,g=1,h=1,i=1}");
  }
  Shape s(DType::f32, {{"a", 2}});
  try {
    s.axis("z", "sum");
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "sum: unknown tag \"z\" in {a=2}");
  }
}

TEST(DType, HalfConversionsRoundTrip) {
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f}) {
    EXPECT_EQ(f16_to_f32(f32_to_f16(f)), f) << f;
    EXPECT_EQ(bf16_to_f32(f32_to_bf16(f)), bf16_to_f32(f32_to_bf16(f)));
  }
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(dtype_from_name("bf16"), DType::bf16);
  EXPECT_THROW(dtype_from_name("f8"), Error);
}

}  // namespace
}  // namespace prism
