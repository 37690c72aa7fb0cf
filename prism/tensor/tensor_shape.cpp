// Ops that move data by tag: broadcast, transpose, rename/split/merge, slices, gather/scatter,
// pad, concat, cumsum, top_k and convolution.
#include <algorithm>
#include <numeric>

#include "prism/core/error.h"
#include "prism/tensor/tensor.h"
#include "prism/tensor/tracer.h"

namespace prism {

using ir::Node;
using ir::Op;
using ir::ValueId;

namespace {

ValueId use(const Tensor& t, std::string_view op) { return Tracer::current(op).use(t, op); }

Tensor reshape_node(const Tensor& x, const Shape& shape) {
  if (shape == x.shape()) return x;
  return make_node(Node{Op::reshape, shape, {use(x, "reshape")}, {}});
}

// `x` with its dims ordered like the same tags in `reference` (which may hold more tags).
Tensor align_to(const Tensor& x, const Shape& reference, std::string_view op) {
  std::vector<std::pair<int, Tag>> order;
  for (const Dim& d : x.shape().dims()) {
    int a = reference.find(d.tag);
    if (a < 0) {
      fail("{}: tag \"{}\" of {} is missing in {}", op, d.tag.str(), x.shape().dims_str(),
           reference.dims_str());
    }
    order.emplace_back(a, d.tag);
  }
  std::sort(order.begin(), order.end());
  std::vector<Tag> tags;
  for (auto& [a, t] : order) tags.push_back(t);
  return x.transpose(tags);
}

Tensor scalar_index(int64_t value, DType dtype) { return Tensor::scalar(double(value), dtype); }

void check_index_scalar(std::string_view op, const Tensor& t) {
  PRISM_CHECK(t.rank() == 0 && is_integer(t.dtype()),
              "{}: start index must be an integer scalar, got {}", op, t.shape().str());
}

}  // namespace

Tensor Tensor::broadcast_to(const Shape& target) const {
  if (shape_.same_dims(target)) return *this;
  for (const Dim& d : shape_.dims()) {
    int a = target.find(d.tag);
    if (a < 0) {
      fail("broadcast: tag \"{}\" of {} is missing in target {}", d.tag.str(), shape_.dims_str(),
           target.dims_str());
    }
    if (d.size != target.size(a) && d.size != 1) {
      fail("broadcast: tag \"{}\" is {} in {} but {} in target {}", d.tag.str(), d.size,
           shape_.dims_str(), target.size(a), target.dims_str());
    }
  }
  Tensor x = align_to(*this, target, "broadcast");
  ir::AxesAttrs attrs;
  for (const Dim& d : x.shape().dims()) attrs.axes.push_back(target.find(d.tag));
  Shape out(dtype(), target.dims(), "broadcast");
  return make_node(Node{Op::broadcast, out, {use(x, "broadcast")}, std::move(attrs)});
}

Tensor Tensor::insert(Tag tag, int64_t size, int axis) const {
  PRISM_CHECK(axis >= 0 && axis <= rank(), "insert: position {} out of range for {}", axis,
              shape_.dims_str());
  std::vector<Dim> dims(shape_.dims().begin(), shape_.dims().end());
  dims.insert(dims.begin() + axis, Dim{tag, size});
  return broadcast_to(Shape(dtype(), dims, "insert"));
}

Tensor Tensor::transpose(TagList order) const {
  PRISM_CHECK(static_cast<int>(order.size()) == rank(),
              "transpose: order {} does not list the {} tags of {}", order.str(), rank(),
              shape_.dims_str());
  ir::AxesAttrs attrs;
  std::vector<Dim> dims;
  for (Tag t : order) {
    int a = shape_.axis(t, "transpose");
    if (std::find(attrs.axes.begin(), attrs.axes.end(), a) != attrs.axes.end()) {
      fail("transpose: tag \"{}\" given twice in {}", t.str(), order.str());
    }
    attrs.axes.push_back(a);
    dims.push_back(shape_.dim(a));
  }
  bool identity = true;
  for (int i = 0; i < rank(); ++i) identity = identity && attrs.axes[i] == i;
  if (identity) return *this;
  return make_node(
      Node{Op::transpose, Shape(dtype(), dims, "transpose"), {use(*this, "transpose")}, attrs});
}

Tensor Tensor::rename(std::initializer_list<std::pair<Tag, Tag>> renames) const {
  return rename(std::span<const std::pair<Tag, Tag>>(renames.begin(), renames.size()));
}

Tensor Tensor::rename(std::span<const std::pair<Tag, Tag>> renames) const {
  std::vector<Dim> dims(shape_.dims().begin(), shape_.dims().end());
  for (auto& [from, to] : renames) dims[shape_.axis(from, "rename")].tag = to;
  return reshape_node(*this, Shape(dtype(), dims, "rename"));
}

Tensor Tensor::split(Tag tag, std::initializer_list<Dim> parts) const {
  return split(tag, std::span<const Dim>(parts.begin(), parts.size()));
}

Tensor Tensor::split(Tag tag, std::span<const Dim> parts) const {
  int axis = shape_.axis(tag, "split");
  int64_t total = shape_.size(axis), known = 1;
  int inferred = -1;
  std::vector<Dim> pieces(parts.begin(), parts.end());
  for (int i = 0; i < static_cast<int>(pieces.size()); ++i) {
    if (pieces[i].size == -1) {
      PRISM_CHECK(inferred < 0, "split: more than one size -1 splitting \"{}\"", tag.str());
      inferred = i;
    } else {
      known *= pieces[i].size;
    }
  }
  if (inferred >= 0 && known > 0 && total % known == 0) pieces[inferred].size = total / known;
  int64_t product = 1;
  std::string desc;
  for (const Dim& d : pieces) {
    product *= d.size;
    desc += fmt::format("{}{}={}", desc.empty() ? "" : ",", d.tag.str(), d.size);
  }
  if (product != total || (inferred >= 0 && pieces[inferred].size == -1)) {
    fail("split: cannot split tag \"{}\" of size {} in {} into {{{}}}", tag.str(), total,
         shape_.dims_str(), desc);
  }
  std::vector<Dim> dims;
  for (int i = 0; i < rank(); ++i) {
    if (i == axis) {
      dims.insert(dims.end(), pieces.begin(), pieces.end());
    } else {
      dims.push_back(shape_.dim(i));
    }
  }
  return reshape_node(*this, Shape(dtype(), dims, "split"));
}

Tensor Tensor::merge(TagList tags, Tag into) const {
  PRISM_CHECK(tags.size() > 0, "merge: no tags given");
  int first = shape_.axis(tags[0], "merge");
  int64_t size = 1;
  for (size_t i = 0; i < tags.size(); ++i) {
    int a = shape_.axis(tags[i], "merge");
    if (a != first + static_cast<int>(i)) {
      fail("merge: tags {} are not adjacent and in order in {}", tags.str(), shape_.dims_str());
    }
    size *= shape_.size(a);
  }
  std::vector<Dim> dims;
  for (int i = 0; i < rank(); ++i) {
    if (i == first) dims.push_back({into, size});
    if (i < first || i >= first + static_cast<int>(tags.size())) dims.push_back(shape_.dim(i));
  }
  return reshape_node(*this, Shape(dtype(), dims, "merge"));
}

Tensor Tensor::reshape(const Shape& shape) const {
  Shape out = shape.with_dtype(dtype());
  PRISM_CHECK(out.numel() == shape_.numel(), "reshape: {} has {} elements but {} has {}",
              shape_.dims_str(), shape_.numel(), out.dims_str(), out.numel());
  return reshape_node(*this, out);
}

Tensor Tensor::slice(Tag tag, int64_t start, int64_t length, int64_t stride) const {
  int axis = shape_.axis(tag, "slice");
  int64_t size = shape_.size(axis);
  PRISM_CHECK(stride >= 1, "slice: stride {} for tag \"{}\" must be >= 1", stride, tag.str());
  if (start < 0 || length < 0 || (length > 0 && start + (length - 1) * stride >= size)) {
    fail("slice: [{}, +{} step {}) is out of bounds for tag \"{}\" of size {} in {}", start, length,
         stride, tag.str(), size, shape_.dims_str());
  }
  ir::SliceAttrs attrs;
  std::vector<Dim> dims(shape_.dims().begin(), shape_.dims().end());
  for (int i = 0; i < rank(); ++i) {
    bool here = i == axis;
    attrs.starts.push_back(here ? start : 0);
    attrs.limits.push_back(here ? start + std::max<int64_t>(length - 1, 0) * stride + (length > 0)
                                : shape_.size(i));
    attrs.strides.push_back(here ? stride : 1);
  }
  dims[axis].size = length;
  return make_node(
      Node{Op::slice, Shape(dtype(), dims, "slice"), {use(*this, "slice")}, std::move(attrs)});
}

Tensor Tensor::dynamic_slice(Tag tag, const Tensor& start, int64_t length) const {
  int axis = shape_.axis(tag, "dynamic_slice");
  check_index_scalar("dynamic_slice", start);
  PRISM_CHECK(length >= 0 && length <= shape_.size(axis),
              "dynamic_slice: length {} out of bounds for tag \"{}\" of size {} in {}", length,
              tag.str(), shape_.size(axis), shape_.dims_str());
  std::vector<ValueId> inputs{use(*this, "dynamic_slice")};
  for (int i = 0; i < rank(); ++i) {
    inputs.push_back(use(i == axis ? start : scalar_index(0, start.dtype()), "dynamic_slice"));
  }
  std::vector<Dim> dims(shape_.dims().begin(), shape_.dims().end());
  dims[axis].size = length;
  return make_node(Node{Op::dynamic_slice, Shape(dtype(), dims, "dynamic_slice"), inputs, {}});
}

Tensor Tensor::dynamic_update_slice(const Tensor& update,
                                    std::initializer_list<std::pair<Tag, Tensor>> starts) const {
  constexpr std::string_view op = "dynamic_update_slice";
  PRISM_CHECK(update.dtype() == dtype(), "{}: update is {} but operand is {}", op,
              update.shape().str(), shape_.str());
  PRISM_CHECK(update.rank() == rank(), "{}: update {} must have the tags of operand {}", op,
              update.shape().dims_str(), shape_.dims_str());
  Tensor u = align_to(update, shape_, op);
  for (int i = 0; i < rank(); ++i) {
    if (u.shape().size(i) > shape_.size(i)) {
      fail("{}: tag \"{}\" is {} in update {} but {} in operand {}", op, shape_.tag(i).str(),
           u.shape().size(i), u.shape().dims_str(), shape_.size(i), shape_.dims_str());
    }
  }
  std::vector<Tensor> index(rank());
  DType index_dtype = DType::i32;
  for (auto& [tag, start] : starts) {
    check_index_scalar(op, start);
    index[shape_.axis(tag, op)] = start;
    index_dtype = start.dtype();
  }
  std::vector<ValueId> inputs{use(*this, op), use(u, op)};
  for (int i = 0; i < rank(); ++i) {
    inputs.push_back(use(index[i].valid() ? index[i] : scalar_index(0, index_dtype), op));
  }
  return make_node(Node{Op::dynamic_update_slice, shape_, inputs, {}});
}

Tensor Tensor::gather(Tag tag, const Tensor& indices) const {
  int axis = shape_.axis(tag, "gather");
  PRISM_CHECK(is_integer(indices.dtype()), "gather: indices must be integers, got {}",
              indices.shape().str());
  std::vector<Dim> dims;
  for (int i = 0; i < axis; ++i) dims.push_back(shape_.dim(i));
  for (const Dim& d : indices.shape().dims()) dims.push_back(d);
  for (int i = axis + 1; i < rank(); ++i) dims.push_back(shape_.dim(i));
  Tracer& tracer = Tracer::current("gather");
  return make_node(Node{Op::gather,
                        Shape(dtype(), dims, "gather"),
                        {tracer.use(*this, "gather"), tracer.use(indices, "gather")},
                        ir::AxisAttrs{axis}});
}

Tensor Tensor::take_along(Tag tag, const Tensor& indices) const {
  int axis = shape_.axis(tag, "take_along");
  PRISM_CHECK(is_integer(indices.dtype()), "take_along: indices must be integers, got {}",
              indices.shape().str());
  PRISM_CHECK(indices.rank() == rank(), "take_along: indices {} must have the tags of {}",
              indices.shape().dims_str(), shape_.dims_str());
  Tensor idx = align_to(indices, shape_, "take_along");
  for (int i = 0; i < rank(); ++i) {
    if (i != axis && idx.shape().size(i) != shape_.size(i)) {
      fail("take_along: tag \"{}\" is {} in indices {} but {} in operand {}", shape_.tag(i).str(),
           idx.shape().size(i), idx.shape().dims_str(), shape_.size(i), shape_.dims_str());
    }
  }
  Tracer& tracer = Tracer::current("take_along");
  return make_node(Node{Op::take_along,
                        idx.shape().with_dtype(dtype()),
                        {tracer.use(*this, "take_along"), tracer.use(idx, "take_along")},
                        ir::AxisAttrs{axis}});
}

Tensor Tensor::scatter(Tag tag, const Tensor& indices, const Tensor& updates,
                       ir::ScatterReduce reduce) const {
  int axis = shape_.axis(tag, "scatter");
  PRISM_CHECK(is_integer(indices.dtype()), "scatter: indices must be integers, got {}",
              indices.shape().str());
  PRISM_CHECK(updates.dtype() == dtype(), "scatter: updates are {} but operand is {}",
              updates.shape().str(), shape_.str());
  PRISM_CHECK(indices.rank() == rank() && indices.shape().same_dims(updates.shape()),
              "scatter: indices {} and updates {} must have the same tags and sizes as each other "
              "and the tags of {}",
              indices.shape().dims_str(), updates.shape().dims_str(), shape_.dims_str());
  Tensor idx = align_to(indices, shape_, "scatter");
  Tensor upd = align_to(updates, shape_, "scatter");
  for (int i = 0; i < rank(); ++i) {
    if (i != axis && idx.shape().size(i) > shape_.size(i)) {
      fail("scatter: tag \"{}\" is {} in indices {} but {} in operand {}", shape_.tag(i).str(),
           idx.shape().size(i), idx.shape().dims_str(), shape_.size(i), shape_.dims_str());
    }
  }
  Tracer& tracer = Tracer::current("scatter");
  return make_node(
      Node{Op::scatter,
           shape_,
           {tracer.use(*this, "scatter"), tracer.use(idx, "scatter"), tracer.use(upd, "scatter")},
           ir::ScatterAttrs{axis, reduce}});
}

Tensor Tensor::pad(Tag tag, int64_t low, int64_t high, double value, ir::PadMode mode) const {
  int axis = shape_.axis(tag, "pad");
  int64_t size = shape_.size(axis);
  PRISM_CHECK(size + low + high >= 0, "pad: [{}, {}] leaves a negative size for tag \"{}\" in {}",
              low, high, tag.str(), shape_.dims_str());
  PRISM_CHECK(mode == ir::PadMode::constant || (size > 0 && low >= 0 && high >= 0),
              "pad: edge and reflect padding need a non-empty tag \"{}\" and no cropping",
              tag.str());
  PRISM_CHECK(mode != ir::PadMode::reflect || (low < size && high < size),
              "pad: reflect padding of [{}, {}] needs at most {} on each side of tag \"{}\"", low,
              high, size - 1, tag.str());
  ir::PadAttrs attrs;
  attrs.low.assign(rank(), 0);
  attrs.high.assign(rank(), 0);
  attrs.low[axis] = low;
  attrs.high[axis] = high;
  attrs.mode = mode;
  std::vector<Dim> dims(shape_.dims().begin(), shape_.dims().end());
  dims[axis].size = size + low + high;
  Tracer& tracer = Tracer::current("pad");
  Tensor fill = Tensor::scalar(value, dtype());
  return make_node(Node{Op::pad,
                        Shape(dtype(), dims, "pad"),
                        {tracer.use(*this, "pad"), tracer.use(fill, "pad")},
                        std::move(attrs)});
}

Tensor Tensor::cumsum(Tag tag, bool exclusive, bool reverse) const {
  int axis = shape_.axis(tag, "cumsum");
  return make_node(
      Node{Op::cumsum, shape_, {use(*this, "cumsum")}, ir::AxisAttrs{axis, exclusive, reverse}});
}

std::pair<Tensor, Tensor> Tensor::top_k(Tag tag, int64_t k, bool largest, DType index_dtype) const {
  int axis = shape_.axis(tag, "top_k");
  PRISM_CHECK(k >= 0 && k <= shape_.size(axis), "top_k: k={} out of range for tag \"{}\" in {}", k,
              tag.str(), shape_.dims_str());
  PRISM_CHECK(is_integer(index_dtype), "top_k: index dtype must be an integer type, got {}",
              name(index_dtype));
  std::vector<Dim> dims(shape_.dims().begin(), shape_.dims().end());
  dims[axis].size = k;
  Tensor indices = make_node(Node{Op::argsort,
                                  Shape(index_dtype, dims, "top_k"),
                                  {use(*this, "top_k")},
                                  ir::ArgsortAttrs{axis, k, largest}});
  return {take_along(tag, indices), indices};
}

Tensor concat(std::span<const Tensor> tensors, Tag tag) {
  PRISM_CHECK(!tensors.empty(), "concat: no tensors");
  const Shape& first = tensors[0].shape();
  int axis = first.axis(tag, "concat");
  Tracer& tracer = Tracer::current("concat");
  std::vector<ValueId> inputs;
  int64_t total = 0;
  for (const Tensor& t : tensors) {
    PRISM_CHECK(t.dtype() == first.dtype(), "concat: {} and {} differ in dtype", first.str(),
                t.shape().str());
    PRISM_CHECK(t.rank() == first.rank(), "concat: {} and {} have different tags", first.dims_str(),
                t.shape().dims_str());
    Tensor a = align_to(t, first, "concat");
    for (int i = 0; i < first.rank(); ++i) {
      if (i != axis && a.shape().size(i) != first.size(i)) {
        fail("concat: tag \"{}\" is {} in {} but {} in {}", first.tag(i).str(), first.size(i),
             first.dims_str(), a.shape().size(i), a.shape().dims_str());
      }
    }
    total += a.shape().size(axis);
    inputs.push_back(tracer.use(a, "concat"));
  }
  std::vector<Dim> dims(first.dims().begin(), first.dims().end());
  dims[axis].size = total;
  return make_node(
      Node{Op::concatenate, Shape(first.dtype(), dims, "concat"), inputs, ir::AxisAttrs{axis}});
}

Tensor conv(const Tensor& input, const Tensor& kernel, const ConvOptions& o) {
  constexpr std::string_view op = "conv";
  size_t n = o.spatial.size();
  PRISM_CHECK(input.dtype() == kernel.dtype() && is_float(input.dtype()),
              "conv: input {} and kernel {} must share a floating-point dtype", input.shape().str(),
              kernel.shape().str());
  PRISM_CHECK(input.rank() == static_cast<int>(n) + 2 && kernel.rank() == static_cast<int>(n) + 2,
              "conv: input {} and kernel {} must have {} spatial tags besides batch and channels",
              input.shape().dims_str(), kernel.shape().dims_str(), n);
  std::vector<Tag> in_order{o.batch, o.channels}, k_order{o.out_channels, o.channels};
  in_order.insert(in_order.end(), o.spatial.begin(), o.spatial.end());
  k_order.insert(k_order.end(), o.spatial.begin(), o.spatial.end());
  Tensor x = input.transpose(in_order);
  Tensor w = kernel.transpose(k_order);
  int64_t c = x.shape().size(1), kc = w.shape().size(1), oc = w.shape().size(0);
  PRISM_CHECK(o.groups >= 1 && c == kc * o.groups && oc % o.groups == 0,
              "conv: channels \"{}\" are {} in input {} but {} x {} groups in kernel {}",
              o.channels.str(), c, input.shape().dims_str(), kc, o.groups,
              kernel.shape().dims_str());
  auto pick = [n](const std::vector<int64_t>& v, int64_t def, const char* what) {
    if (v.empty()) return std::vector<int64_t>(n, def);
    PRISM_CHECK(v.size() == n, "conv: {} has {} values for {} spatial tags", what, v.size(), n);
    return v;
  };
  ir::ConvAttrs attrs{pick(o.strides, 1, "strides"), pick(o.pad_low, 0, "pad_low"),
                      pick(o.pad_high, 0, "pad_high"), pick(o.dilations, 1, "dilations"), o.groups};
  std::vector<Dim> dims{x.shape().dim(0), Dim{o.out_channels, oc}};
  for (size_t i = 0; i < n; ++i) {
    int64_t in = x.shape().size(2 + i), k = w.shape().size(2 + i);
    int64_t span = attrs.dilations[i] * (k - 1) + 1;
    int64_t padded = in + attrs.pad_low[i] + attrs.pad_high[i];
    PRISM_CHECK(attrs.strides[i] >= 1 && padded >= span,
                "conv: kernel of size {} (dilation {}) does not fit tag \"{}\" of size {} padded "
                "to {}",
                k, attrs.dilations[i], o.spatial[i].str(), in, padded);
    dims.push_back({o.spatial[i], (padded - span) / attrs.strides[i] + 1});
  }
  Tracer& tracer = Tracer::current(op);
  return make_node(Node{Op::convolution,
                        Shape(input.dtype(), dims, op),
                        {tracer.use(x, op), tracer.use(w, op)},
                        std::move(attrs)});
}

}  // namespace prism
