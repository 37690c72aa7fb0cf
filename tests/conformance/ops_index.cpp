// Indexing: Gather, GatherElements, GatherND, ScatterElements (and the older Scatter),
// ScatterND, OneHot, Compress. ONNX allows negative indices (counting from the end); they are
// wrapped with a select before prism sees them.
#include "prism/core/error.h"
#include "tests/conformance/node_context.h"

namespace prism::conformance {
namespace {

Tensor wrap_negative(const Tensor& idx, int64_t size) {
  Tensor zero = Tensor::scalar(0, idx.dtype());
  return select(lt(idx, zero), idx + static_cast<double>(size), idx);
}

// Indices relabelled with tags of their own, so gather's result tags do not collide.
Tensor index_tags(const Tensor& idx) {
  std::vector<Dim> dims;
  for (int i = 0; i < idx.rank(); ++i) {
    dims.push_back({Tag(fmt::format("i{}", i)), idx.shape().size(i)});
  }
  return idx.reshape(Shape(idx.dtype(), dims));
}

std::vector<Tensor> gather(const NodeContext& ctx) {
  ctx.expect_attributes({"axis"});
  Tensor x = ctx.input(0);
  int axis = normalize_axis(ctx.attr_int("axis", 0), x.rank());
  Tag tag = axis_tag(axis, x.rank());
  Tensor idx = index_tags(wrap_negative(ctx.input(1), x.size(tag)));
  return {positional(x.gather(tag, idx))};
}

std::vector<Tensor> gather_elements(const NodeContext& ctx) {
  ctx.expect_attributes({"axis"});
  Tensor x = ctx.input(0);
  int axis = normalize_axis(ctx.attr_int("axis", 0), x.rank());
  Tag tag = axis_tag(axis, x.rank());
  return {x.take_along(tag, wrap_negative(ctx.input(1), x.size(tag)))};
}

ir::ScatterReduce scatter_reduction(const NodeContext& ctx) {
  std::string r = ctx.attr_string("reduction", "none");
  if (r == "none") return ir::ScatterReduce::none;
  if (r == "add") return ir::ScatterReduce::add;
  if (r == "mul") return ir::ScatterReduce::mul;
  if (r == "max") return ir::ScatterReduce::max;
  if (r == "min") return ir::ScatterReduce::min;
  unsupported("{}: reduction \"{}\"", ctx.op(), r);
}

std::vector<Tensor> scatter_elements(const NodeContext& ctx) {
  ctx.expect_attributes({"axis", "reduction"});
  Tensor x = ctx.input(0);
  int axis = normalize_axis(ctx.attr_int("axis", 0), x.rank());
  Tag tag = axis_tag(axis, x.rank());
  Tensor idx = wrap_negative(ctx.input(1), x.size(tag));
  return {x.scatter(tag, idx, ctx.input(2), scatter_reduction(ctx))};
}

// The flat row of each index tuple (the last axis of `idx`, k long) into the first k dims of
// `dims`: a dot with the row-major strides.
Tensor flat_rows(const Tensor& idx, const std::vector<int64_t>& dims, int64_t k) {
  std::vector<int64_t> strides(k, 1);
  for (int64_t i = k - 2; i >= 0; --i) strides[i] = strides[i + 1] * dims[i + 1];
  int q = idx.rank();
  Tag last = axis_tag(q - 1, q);
  Tensor wrapped = idx;
  // Wrap negative indices per component: add dims[j] where idx[..., j] < 0.
  Tensor extent = Tensor::constant(HostBuffer::from<int64_t>(
      Shape(DType::i64, {{last, k}}), std::span<const int64_t>(dims.data(), k)));
  Tensor i64 = idx.convert(DType::i64);
  wrapped = select(lt(i64, Tensor::scalar(0, DType::i64)), i64 + extent, i64);
  Tensor stride = Tensor::constant(
      HostBuffer::from<int64_t>(Shape(DType::i64, {{last, k}}), std::span<const int64_t>(strides)));
  return (wrapped * stride).sum(last);
}

// GatherND: the first batch_dims dims are shared; each index tuple picks a slice of the
// following k dims. Merging batch and indexed dims into one makes it a plain gather of rows.
std::vector<Tensor> gather_nd(const NodeContext& ctx) {
  ctx.expect_attributes({"batch_dims"});
  int64_t b = ctx.attr_int("batch_dims", 0);
  std::vector<int64_t> d = ctx.dims(0), q = ctx.dims(1);
  int64_t k = q.back();
  int64_t batch = 1, indexed = 1, rest = 1;
  for (int64_t i = 0; i < b; ++i) batch *= d[i];
  for (int64_t i = b; i < b + k; ++i) indexed *= d[i];
  for (size_t i = b + k; i < d.size(); ++i) rest *= d[i];
  std::vector<int64_t> index_dims(d.begin() + b, d.end());
  Tensor rows = flat_rows(ctx.input(1), index_dims, k);  // q[:-1]
  // Offset each batch's rows: batch number * rows per batch.
  std::vector<int64_t> rows_shape(q.begin(), q.end() - 1);
  int64_t per_batch = 1;
  for (size_t i = b; i < rows_shape.size(); ++i) per_batch *= rows_shape[i];
  Tensor flat = reshape_to(rows, {batch, per_batch});
  Tensor batch_index = Tensor::iota(positional_shape(DType::i64, {batch, per_batch}), "p1");
  flat = flat + batch_index * static_cast<double>(indexed);
  Tensor data = reshape_to(ctx.input(0), {batch * indexed, rest});
  Tensor picked = data.gather("p1", index_tags(reshape_to(flat, {batch * per_batch})));
  std::vector<int64_t> out = rows_shape;
  out.insert(out.end(), d.begin() + b + k, d.end());
  return {reshape_to(picked, out)};
}

// ScatterND: index tuples address rows of the data seen as [rows, rest]; a scatter along rows
// with each row index repeated over `rest`.
std::vector<Tensor> scatter_nd(const NodeContext& ctx) {
  ctx.expect_attributes({"reduction"});
  std::vector<int64_t> d = ctx.dims(0), q = ctx.dims(1);
  int64_t k = q.back(), indexed = 1, rest = 1, updates = 1;
  for (int64_t i = 0; i < k; ++i) indexed *= d[i];
  for (size_t i = k; i < d.size(); ++i) rest *= d[i];
  for (size_t i = 0; i + 1 < q.size(); ++i) updates *= q[i];
  Tensor rows = reshape_to(flat_rows(ctx.input(1), d, k), {updates, 1});
  rows = broadcast_to_sizes(rows, {updates, rest});
  Tensor data = reshape_to(ctx.input(0), {indexed, rest});
  Tensor upd = reshape_to(ctx.input(2), {updates, rest});
  return {reshape_to(data.scatter("p1", rows, upd, scatter_reduction(ctx)), d)};
}

// OneHot: compares the indices with an iota along the new axis.
std::vector<Tensor> one_hot(const NodeContext& ctx) {
  ctx.expect_attributes({"axis"});
  std::vector<int64_t> in = ctx.dims(0);
  auto depth = static_cast<int64_t>(ctx.scalar(1));
  int out_rank = static_cast<int>(in.size()) + 1;
  int axis = normalize_axis(ctx.attr_int("axis", -1), out_rank);
  std::vector<int64_t> out = in, unit = in;
  out.insert(out.begin() + axis, depth);
  unit.insert(unit.begin() + axis, 1);
  Tensor idx = ctx.input(0).convert(DType::i64);
  idx = wrap_negative(idx, depth);
  idx = broadcast_to_sizes(reshape_to(idx, unit), out);
  Tensor hot = eq(idx, Tensor::iota(positional_shape(DType::i64, out), axis_tag(axis, out_rank)));
  Tensor values = positional(ctx.input(2));
  Tensor off = values.slice("p0", 0, 1).reshape(Shape::scalar(values.dtype()));
  Tensor on = values.slice("p0", 1, 1).reshape(Shape::scalar(values.dtype()));
  return {select(hot, on, off)};
}

// Compress: the condition decides the output's shape, so it is read on the host like a shape
// input; the selection itself is a gather of the kept positions.
std::vector<Tensor> compress(const NodeContext& ctx) {
  ctx.expect_attributes({"axis"});
  Tensor x = ctx.input(0);
  if (!ctx.has_attr("axis")) x = reshape_to(x, {ctx.value(0).numel()});
  int rank = x.rank();
  int axis = normalize_axis(ctx.attr_int("axis", 0), rank);
  std::vector<double> condition = ctx.value(1).to_f64();
  std::vector<int64_t> kept;
  for (size_t i = 0; i < condition.size() && int64_t(i) < x.shape().size(axis); ++i) {
    if (condition[i] != 0) kept.push_back(static_cast<int64_t>(i));
  }
  Tensor index = Tensor::constant(HostBuffer::from<int64_t>(
      Shape(DType::i64, {{"kept", int64_t(kept.size())}}), std::span<const int64_t>(kept)));
  return {positional(x.gather(axis_tag(axis, rank), index))};
}

}  // namespace

void register_index_ops(OpTable& t) {
  t["Gather"] = gather;
  t["GatherElements"] = gather_elements;
  t["GatherND"] = gather_nd;
  t["ScatterElements"] = scatter_elements;
  t["Scatter"] = scatter_elements;
  t["ScatterND"] = scatter_nd;
  t["OneHot"] = one_hot;
  t["Compress"] = compress;
}

}  // namespace prism::conformance
