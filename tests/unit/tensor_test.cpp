// The tag rules of the Tensor API and their error messages.
#include "prism/backends/registry.h"
#include "prism/tensor/tracer.h"
#include "tests/unit/test_util.h"

namespace prism {
namespace {

using testing::error_of;
using testing::expect_values;
using testing::f32;
using testing::run1;
using testing::S;

TEST(Tensor, ElementwiseBroadcastsByTag) {
  auto x = f32(S({{"s", 2}, {"d", 3}}), {1, 2, 3, 4, 5, 6});
  auto b = f32(S({{"d", 3}}), {10, 20, 30});
  auto y = run1([](Tensor x, Tensor b) { return x + b; }, {x, b});
  EXPECT_EQ(y.shape().str(), "f32{s=2,d=3}");
  expect_values(y, {11, 22, 33, 14, 25, 36});
  // rhs tags missing in lhs come after lhs's.
  auto col = f32(S({{"s", 2}}), {100, 200});
  auto z = run1([](Tensor b, Tensor c) { return b * c; }, {b, col});
  EXPECT_EQ(z.shape().str(), "f32{d=3,s=2}");
  expect_values(z, {1000, 2000, 2000, 4000, 3000, 6000});
}

TEST(Tensor, ElementwiseRejectsSizeMismatch) {
  auto msg = error_of([] {
    run1([](Tensor a, Tensor b) { return a + b; },
         {f32(S({{"s", 7}, {"d", 4}}), std::vector<float>(28)), f32(S({{"d", 2}}), {1, 2})});
  });
  EXPECT_EQ(msg, "add: tag \"d\" is 4 in lhs {s=7,d=4} but 2 in rhs {d=2}");
  msg = error_of([] {
    run1(
        [](Tensor a, Tensor b) { return a * b; },
        {f32(S({{"d", 2}}), {1, 2}), HostBuffer::from<int32_t>(S({{"d", 2}}, DType::i32), {1, 2})});
  });
  EXPECT_EQ(msg, "mul: dtype f32 in lhs {d=2} but i32 in rhs {d=2}");
}

TEST(Tensor, DotContractsByTagAndBatchesSharedTags) {
  // x {b=2, s=1, d=2} . w {b=2, d=2, o=3}: batch b, contract d -> {b, s, o}
  auto x = f32(S({{"b", 2}, {"s", 1}, {"d", 2}}), {1, 2, 3, 4});
  auto w = f32(S({{"b", 2}, {"d", 2}, {"o", 3}}), {1, 0, 1, 0, 1, 1, 2, 0, 0, 0, 2, 1});
  auto y = run1([](Tensor x, Tensor w) { return x.dot(w, "d"); }, {x, w});
  EXPECT_EQ(y.shape().str(), "f32{b=2,s=1,o=3}");
  expect_values(y, {1, 2, 3, 6, 8, 4});
}

TEST(Tensor, DotErrorsNameTagsAndSizes) {
  auto msg = error_of([] {
    run1([](Tensor a, Tensor b) { return a.dot(b, "d"); },
         {f32(S({{"s", 7}, {"d", 4}}), std::vector<float>(28)),
          f32(S({{"dout", 5}, {"d", 2}}), std::vector<float>(10))});
  });
  EXPECT_EQ(msg, "dot: tag \"d\" is 4 in lhs {s=7,d=4} but 2 in rhs {dout=5,d=2}");
  msg = error_of([] {
    run1([](Tensor a, Tensor b) { return a.dot(b, "k"); },
         {f32(S({{"d", 2}}), {1, 2}), f32(S({{"d", 2}}), {1, 2})});
  });
  EXPECT_EQ(msg, "dot: contracting tag \"k\" missing in lhs {d=2}");
}

TEST(Tensor, ReductionsByTag) {
  auto x = f32(S({{"a", 2}, {"b", 3}}), {1, 2, 3, 4, 5, 6});
  expect_values(run1([](Tensor x) { return x.sum("b"); }, {x}), {6, 15});
  expect_values(run1([](Tensor x) { return x.sum("a"); }, {x}), {5, 7, 9});
  expect_values(run1([](Tensor x) { return x.max({"a", "b"}); }, {x}), {6});
  expect_values(run1([](Tensor x) { return x.mean("b"); }, {x}), {2, 5});
  expect_values(run1([](Tensor x) { return x.prod("a"); }, {x}), {4, 10, 18});
  expect_values(run1([](Tensor x) { return x.argmax("b"); }, {x}), {2, 2});
  EXPECT_EQ(error_of([&] { run1([](Tensor x) { return x.sum("z"); }, {x}); }),
            "reduce_sum: unknown tag \"z\" in {a=2,b=3}");
}

TEST(Tensor, RenameSplitMergeTranspose) {
  auto x = f32(S({{"s", 2}, {"d", 6}}), {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  auto y = run1([](Tensor x) { return x.split("d", {{"h", 2}, {"hd", -1}}); }, {x});
  EXPECT_EQ(y.shape().str(), "f32{s=2,h=2,hd=3}");
  auto t = run1(
      [](Tensor x) {
        return x.split("d", {{"h", 2}, {"hd", 3}}).transpose({"h", "s", "hd"});
      },
      {x});
  EXPECT_EQ(t.shape().str(), "f32{h=2,s=2,hd=3}");
  expect_values(t, {0, 1, 2, 6, 7, 8, 3, 4, 5, 9, 10, 11});
  auto m = run1(
      [](Tensor x) {
        return x.split("d", {{"h", 2}, {"hd", 3}}).merge({"h", "hd"}, "e");
      },
      {x});
  EXPECT_EQ(m.shape().str(), "f32{s=2,e=6}");
  auto r = run1([](Tensor x) { return x.rename({{"s", "k"}}); }, {x});
  EXPECT_EQ(r.shape().str(), "f32{k=2,d=6}");
  EXPECT_EQ(error_of([&] {
              run1([](Tensor x) { return x.split("d", {{"h", 4}, {"hd", -1}}); }, {x});
            }),
            "split: cannot split tag \"d\" of size 6 in {s=2,d=6} into {h=4,hd=-1}");
  EXPECT_EQ(error_of([&] {
              run1([](Tensor x) { return x.merge({"d", "s"}, "e"); }, {x});
            }),
            "merge: tags {\"d\",\"s\"} are not adjacent and in order in {s=2,d=6}");
  EXPECT_EQ(error_of([&] {
              run1([](Tensor x) { return x.rename({{"d", "s"}}); }, {x});
            }),
            "rename: duplicate tag \"s\" in {s=2,s=6}");
}

TEST(Tensor, RankAboveEightIsAnError) {
  EXPECT_EQ(error_of([] {
              run1(
                  [](Tensor x) {
                    return x.split("a", {{"b", 1},
                                         {"c", 1},
                                         {"d", 1},
                                         {"e", 1},
                                         {"f", 1},
                                         {"g", 1},
                                         {"h", 1},
                                         {"i", 1},
                                         {"j", 1}});
                  },
                  {f32(S({{"a", 1}}), {1})});
            }),
            "split: rank 9 exceeds the maximum of 8 in {b=1,c=1,d=1,e=1,f=1,g=1,h=1,i=1,j=1}");
}

TEST(Tensor, OpsOutsideATraceSayWhy) {
  Tensor w = Tensor::parameter("w", S({{"d", 2}}));
  EXPECT_EQ(
      error_of([&] { w.exp(); }),
      "exp: no trace is active (tensor ops are recorded inside prism::compile or prism::run)");
}

TEST(Tensor, ParametersAreBoundByName) {
  Platform& cpu = get_platform("cpu");
  Tensor w = Tensor::parameter("layer.w", S({{"d", 2}, {"o", 2}}));
  Executable exe = compile(cpu, [&](Tensor x) { return x.dot(w, "d"); }, {S({{"d", 2}})});
  ASSERT_EQ(exe.parameters().size(), 1u);
  EXPECT_EQ(exe.parameters()[0].name, "layer.w");
  std::map<std::string, Buffer, std::less<>> params{
      {"layer.w", cpu.upload(f32(S({{"d", 2}, {"o", 2}}), {1, 2, 3, 4}))}};
  std::vector<Buffer> in{cpu.upload(f32(S({{"d", 2}}), {1, 1}))};
  expect_values(exe.call(params, in)[0].to_host(), {4, 6});
  EXPECT_EQ(error_of([&] { exe.call(std::map<std::string, Buffer, std::less<>>{}, in); }),
            "call: no buffer for parameter \"layer.w\" (f32{d=2,o=2})");
  std::map<std::string, Buffer, std::less<>> wrong{
      {"layer.w", cpu.upload(f32(S({{"d", 3}, {"o", 2}}), {1, 2, 3, 4, 5, 6}))}};
  EXPECT_EQ(error_of([&] { exe.call(wrong, in); }),
            "call: parameter \"layer.w\" is f32{d=3,o=2} but the executable expects f32{d=2,o=2}");
}

TEST(Tensor, CompilesAreCachedWhereTheCallerKeepsACache) {
  Platform& cpu = get_platform("cpu");
  auto fn = [](Tensor x) { return (x * 2.0).exp(); };
  CompileCache cache;
  Executable a = compile(cpu, fn, {S({{"n", 5}})}, {.cache = &cache});
  Executable b = compile(cpu, fn, {S({{"n", 5}})}, {.cache = &cache});
  EXPECT_EQ(&a.graph(), &b.graph());
  Executable c = compile(cpu, fn, {S({{"n", 5}})});
  EXPECT_NE(&a.graph(), &c.graph());
}

}  // namespace
}  // namespace prism

namespace prism {
namespace {

TEST(Tensor, ManyParametersBindToTheirOwnBuffers) {
  Platform& cpu = get_platform("cpu");
  Tensor a = Tensor::parameter("a", testing::S({{"n", 2}}));
  Tensor b = Tensor::parameter("b", testing::S({{"n", 2}}));
  Tensor c = Tensor::parameter("c", testing::S({{"n", 2}}));
  Executable exe =
      compile(cpu, [&](Tensor x) { return (x + a) * b - c; }, {testing::S({{"n", 2}})});
  std::map<std::string, Buffer, std::less<>> params{
      {"a", cpu.upload(testing::f32(testing::S({{"n", 2}}), {1, 2}))},
      {"b", cpu.upload(testing::f32(testing::S({{"n", 2}}), {10, 100}))},
      {"c", cpu.upload(testing::f32(testing::S({{"n", 2}}), {5, 7}))}};
  std::vector<Buffer> in{cpu.upload(testing::f32(testing::S({{"n", 2}}), {0, 1}))};
  testing::expect_values(exe.call(params, in)[0].to_host(), {5, 293});
}

}  // namespace
}  // namespace prism
