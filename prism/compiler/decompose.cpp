// Decompositions of the composite ops into primitives, written with the Tensor API. The
// composite's operands are renamed to positional tags ("0", "1", ...) first, since the tags a
// model traced with are not known here.
#include <cmath>
#include <limits>
#include <span>
#include <string>

#include "prism/compiler/passes.h"
#include "prism/core/error.h"
#include "prism/quant/ggml_type.h"
#include "prism/tensor/tracer.h"

namespace prism::compiler {
namespace {

using ir::Op;

Tag pos(int i) { return Tag(std::to_string(i)); }

// `t` with the given tags, in order (a reshape that moves no data).
Tensor named(const Tensor& t, std::span<const Tag> tags) {
  std::vector<Dim> dims;
  for (int i = 0; i < t.rank(); ++i) dims.push_back({tags[i], t.shape().size(i)});
  return t.reshape(Shape(t.dtype(), dims));
}
Tensor named(const Tensor& t, std::initializer_list<Tag> tags) {
  return named(t, std::span(tags.begin(), tags.size()));
}

// `t` with tags "0", "1", ...
Tensor positional(const Tensor& t) {
  std::vector<Tag> tags;
  for (int i = 0; i < t.rank(); ++i) tags.push_back(pos(i));
  return named(t, tags);
}

// Computes in f32 when x is a half type, as the CPU kernels do.
DType compute_dtype(DType t) { return t == DType::f16 || t == DType::bf16 ? DType::f32 : t; }

Tensor softmax(const Tensor& x, Tag t, bool log) {
  Tensor xf = x.convert(compute_dtype(x.dtype()));
  Tensor shifted = xf - xf.max(t);
  Tensor y = log ? shifted - shifted.exp().sum(t).log() : shifted.exp() / shifted.exp().sum(t);
  return y.convert(x.dtype());
}

Tensor norm(const Tensor& x, const ir::NormAttrs& a, bool center) {
  std::vector<Tag> tags;
  for (int axis : a.axes) tags.push_back(pos(axis));
  Tensor xf = x.convert(compute_dtype(x.dtype()));
  if (center) xf = xf - xf.mean(tags);
  Tensor y = xf * ((xf * xf).mean(tags) + a.eps).rsqrt();
  return y.convert(x.dtype());
}

Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin, bool interleaved) {
  int last = x.rank() - 1;
  Tag d = pos(last);
  int64_t half = x.shape().size(last) / 2;
  if (!interleaved) {
    Tensor x1 = x.slice(d, 0, half), x2 = x.slice(d, half, half);
    return concat({x1 * cos - x2 * sin, x2 * cos + x1 * sin}, d);
  }
  Tensor pairs = x.split(d, {{d, half}, {"pair", 2}});
  Tensor even = pairs.slice("pair", 0, 1), odd = pairs.slice("pair", 1, 1);
  Tensor c = cos.insert("pair", 1, cos.rank()), s = sin.insert("pair", 1, sin.rank());
  Tensor y = concat({even * c - odd * s, odd * c + even * s}, "pair");
  return y.merge({d, "pair"}, d);
}

// q {b,h,s,d}, k {b,g,t,d}, v {b,g,t,e} with positional tags "0".."3"; mask {b,h,s,t}.
Tensor attention(const std::vector<Tensor>& in, const ir::AttentionAttrs& a) {
  DType ct = compute_dtype(in[0].dtype());
  Tensor q = named(in[0], {"b", "h", "s", "d"}).convert(ct);
  Tensor k = named(in[1], {"b", "g", "t", "d"}).convert(ct);
  Tensor v = named(in[2], {"b", "g", "t", "e"}).convert(ct);
  int64_t hq = q.size("h"), hkv = k.size("g"), sq = q.size("s"), sk = k.size("t");
  q = q.split("h", {{"g", hkv}, {"r", hq / hkv}});
  Tensor scores = q.dot(k, "d") * a.scale;  // {b,g,r,s,t}
  const double inf = std::numeric_limits<double>::infinity();
  size_t next = 3;
  if (a.has_mask) {
    Tensor m = named(in[next++], {"b", "h", "s", "t"}).split("h", {{"g", hkv}, {"r", hq / hkv}});
    scores = m.dtype() == DType::boolean ? select(m, scores, Tensor::scalar(-inf, ct))
                                         : scores + m.convert(ct);
  }
  if (a.causal || a.window > 0) {
    Tensor offset =
        a.has_offset ? in[next].convert(DType::i64) : Tensor::scalar(double(sk - sq), DType::i64);
    Tensor qpos = Tensor::iota(Shape(DType::i64, {{"s", sq}}), "s") + offset;
    Tensor kpos = Tensor::iota(Shape(DType::i64, {{"t", sk}}), "t");
    Tensor visible = Tensor::full(Shape(DType::boolean, {{"s", sq}, {"t", sk}}), 1);
    if (a.causal) visible = logical_and(visible, le(kpos, qpos));
    if (a.window > 0) visible = logical_and(visible, gt(kpos, qpos - double(a.window)));
    scores = select(visible, scores, Tensor::scalar(-inf, ct));
  }
  Tensor p = scores.softmax("t");
  Tensor y = p.dot(v, "t");  // {b,g,r,s,e}
  return positional(y.merge({"g", "r"}, "h").transpose({"b", "h", "s", "e"}))
      .convert(in[0].dtype());
}

// `t` without `tag`, which has size 1.
Tensor drop(const Tensor& t, Tag tag) {
  std::vector<Dim> dims;
  for (const Dim& d : t.shape().dims())
    if (d.tag != tag) dims.push_back(d);
  return t.reshape(Shape(t.dtype(), dims));
}

// The gated delta rule, q/k {b,kh,s,d} v {b,h,s,e} g/beta {b,h,s} state {b,h,d,e} -> {b,h,s+d,e}.
// Value heads are split {kh, r} so each reads its key head by broadcasting. Token by token
// for chunk 0; else the chunked form, with the triangular system of each chunk solved by
// forward substitution one row at a time (for all chunks at once) and the chunks chained.
Tensor gated_delta_rule(const std::vector<Tensor>& in, const ir::GatedDeltaRuleAttrs& a) {
  DType ct = compute_dtype(in[0].dtype());
  Tensor q = named(in[0], {"b", "kh", "s", "d"}).convert(ct);
  Tensor k = named(in[1], {"b", "kh", "s", "d"}).convert(ct);
  const int64_t hk = q.size("kh"), heads = in[2].shape().size(1), rep = heads / hk;
  const int64_t len = q.size("s");
  auto by_key_head = [&](const Tensor& t, std::initializer_list<Tag> tags) {
    return named(t, tags).convert(ct).split("h", {{"kh", hk}, {"r", rep}});
  };
  Tensor v = by_key_head(in[2], {"b", "h", "s", "e"});
  Tensor g = by_key_head(in[3], {"b", "h", "s"});
  Tensor beta = by_key_head(in[4], {"b", "h", "s"});
  Tensor state = by_key_head(in[5], {"b", "h", "d", "e"});  // {b,kh,r,d,e}
  std::vector<Tensor> outs;
  if (a.chunk == 0) {
    for (int64_t t = 0; t < len; ++t) {
      auto at = [&](const Tensor& x) { return drop(x.slice("s", t, 1), "s"); };
      Tensor kt = at(k), bt = at(beta);
      state = state * at(g).exp();
      Tensor delta = (at(v) - state.dot(kt, "d")) * bt;  // {b,kh,r,e}
      state = state + kt * delta;
      outs.push_back(state.dot(at(q), "d").insert("s", 1, 3));  // {b,kh,r,s,e}
    }
  } else {
    const int64_t c = a.chunk, chunks = (len + c - 1) / c, pad = chunks * c - len;
    // Padding tokens (g = 0, beta = 0) leave the state alone; their outputs are dropped.
    auto blocks = [&](const Tensor& x) {
      return x.pad("s", 0, pad).split("s", {{"n", chunks}, {"c", c}});
    };
    Tensor qc = blocks(q).insert("r", rep, 2), kc = blocks(k).insert("r", rep, 2);
    Tensor vc = blocks(v), bc = blocks(beta), gc = blocks(g).cumsum("c");  // {b,kh,r,n,c}
    Tensor ii = Tensor::iota(Shape(DType::i32, {{"i", c}}), "i");
    Tensor jj = Tensor::iota(Shape(DType::i32, {{"j", c}}), "j");
    Tensor zero = Tensor::scalar(0, ct);
    auto decay = [&](bool strict) {  // exp(gc_i - gc_j) where j <= i (j < i), else 0
      Tensor keep = strict ? gt(ii, jj) : ge(ii, jj);
      Tensor diff = gc.rename({{"c", "i"}}) - gc.rename({{"c", "j"}});
      return select(keep, select(keep, diff, zero).exp(), zero);
    };
    Tensor kb = kc * bc;
    Tensor kj = kc.rename({{"c", "j"}});
    Tensor system = kb.rename({{"c", "i"}}).dot(kj, "d") * decay(true);   // {.., n, i, j}
    Tensor scores = qc.rename({{"c", "i"}}).dot(kj, "d") * decay(false);  // {.., n, i, j}
    // inverse = (I + system)^-1, row by row: row_i = e_i - system[i, :i] . rows[:i], for
    // every chunk at once; rows {b,kh,r,n,m,j}.
    std::vector<Dim> row_dims(system.shape().dims().begin(), system.shape().dims().end());
    row_dims[row_dims.size() - 2] = {"m", 1};
    const Shape row_shape(ct, row_dims);
    Tensor inverse;
    for (int64_t i = 0; i < c; ++i) {
      Tensor unit =
          eq(jj, Tensor::scalar(double(i), DType::i32)).convert(ct).broadcast_to(row_shape);
      if (i == 0) {
        inverse = unit;
        continue;
      }
      Tensor coeff = system.slice("i", i, 1).slice("j", 0, i).rename({{"i", "m2"}, {"j", "m"}});
      Tensor row = unit - coeff.dot(inverse, "m").rename({{"m2", "m"}});
      inverse = concat({inverse, row}, "m");
    }
    inverse = inverse.rename({{"m", "i"}});
    Tensor egc = gc.exp();
    Tensor values = inverse.dot((vc * bc).rename({{"c", "j"}}), "j");  // {.., n, i, e}
    Tensor reads = inverse.dot((kb * egc).rename({{"c", "j"}}), "j");  // {.., n, i, d}
    Tensor last = drop(gc.slice("c", c - 1, 1), "c");                  // {b,kh,r,n}
    Tensor kdecayed = kc * (last - gc).exp();                          // {.., n, c, d}
    Tensor qdecayed = qc * egc;                                        // {.., n, c, d}
    for (int64_t n = 0; n < chunks; ++n) {
      auto at = [&](const Tensor& x) { return drop(x.slice("n", n, 1), "n"); };
      Tensor fresh = at(values) - at(reads).dot(state, "d");  // {b,kh,r,i,e}
      Tensor o = at(qdecayed).rename({{"c", "i"}}).dot(state, "d") +
                 at(scores).dot(fresh.rename({{"i", "j"}}), "j");
      state = state * at(last).exp() + at(kdecayed).rename({{"c", "i"}}).dot(fresh, "i");
      outs.push_back(o.transpose({"b", "kh", "r", "i", "e"}).rename({{"i", "s"}}));
    }
  }
  Tensor y = concat(outs, "s").slice("s", 0, len);
  Tensor packed =
      concat({y, state.transpose({"b", "kh", "r", "d", "e"}).rename({{"d", "s"}})}, "s");
  return positional(packed.merge({"kh", "r"}, "h")).convert(in[0].dtype());
}

// x {b,s,c}, state {b,k,c}, weight {k+1,c}: y[t] = sum_j weight[j] * concat(state, x)[t + j].
Tensor short_conv(const Tensor& x, const Tensor& state, const Tensor& weight) {
  DType ct = compute_dtype(x.dtype());
  Tensor window = concat({named(state, {"b", "s", "c"}), named(x, {"b", "s", "c"})}, "s");
  window = window.convert(ct);
  Tensor w = named(weight, {"j", "c"}).convert(ct);
  int64_t taps = w.size("j"), len = x.shape().size(1);
  Tensor y;
  for (int64_t j = 0; j < taps; ++j) {
    Tensor term =
        window.slice("s", j, len) * w.slice("j", j, 1).reshape(Shape(ct, {{"c", w.size("c")}}));
    y = j == 0 ? term : y + term;
  }
  return positional(y).convert(x.dtype());
}

// ggml's blocks in graph ops, for platforms without a kernel of their own, written with
// slices, splits and concatenations of the bytes and integer division and remainder, so that a
// compiler such as XLA fuses the whole of it into one loop over the values: a field of
// elements (x >> shift) & (2^width - 1) is rem(x / 2^shift, 2^width) of a slice of bytes, and
// where one byte holds fields of several elements (nibbles, bits) the fields are concatenated
// along the element axis in the block's order. The f16 scales are assembled from their bits
// with a table of powers of two, one lookup per block, so no platform needs bit casts or
// shifts. Products and differences are rounded as prism::quant::dequantize rounds them.
class Blocks {
 public:
  // bytes: u8 {..., b}, whole blocks of `t` along the last axis.
  Blocks(const Tensor& bytes, const quant::GgmlTypeInfo& t) : rows_(bytes.rank() - 1) {
    std::vector<Dim> dims;
    for (int i = 0; i < rows_; ++i) dims.push_back({pos(i), bytes.shape().size(i)});
    const int64_t bytes_along = bytes.shape().size(rows_);
    dims.push_back({"blk", bytes_along / t.block_bytes});
    dims.push_back({"byte", t.block_bytes});
    blocks_ = bytes.reshape(Shape(DType::u8, dims)).convert(DType::i32);
  }

  // Bytes [first, first + count) of every block, i32 {..., blk, e}.
  Tensor bytes(int64_t first, int64_t count) const {
    return blocks_.slice("byte", first, count).rename({{"byte", "e"}});
  }
  // The nibbles of `count` bytes from `first`, low ones first: {..., blk, e = 2 count}.
  Tensor nibbles(int64_t first, int64_t count) const {
    Tensor x = bytes(first, count);
    const Tensor halves[] = {low(x, 4), x / 16};
    return concat(halves, "e");
  }
  // Fields of `width` bits of x at shifts 0, step, 2 step, ... (`count` of them), along a new
  // axis `tag` inserted at `axis`.
  static Tensor fields(const Tensor& x, int count, int step, int width, Tag tag, int axis) {
    std::vector<Tensor> parts;
    for (int k = 0; k < count; ++k) {
      parts.push_back(low(x / static_cast<double>(1 << (k * step)), width).insert(tag, 1, axis));
    }
    return concat(parts, tag);
  }
  // x & (2^bits - 1), for x >= 0.
  static Tensor low(const Tensor& x, int bits) { return rem(x, scalar(1 << bits)); }
  // A signed byte: its value less 256 from 128 on.
  static Tensor signed_byte(const Tensor& u) { return rem(u + 128, scalar(256)) - 128; }
  // The f16 stored little-endian at bytes `at`, `at` + 1 of each block, as f32 {..., blk}.
  Tensor f16(int at) const {
    Tensor lo = drop(bytes(at, 1), "e"), hi = drop(bytes(at + 1, 1), "e");
    Tensor exponent = rem(hi / 4, scalar(32));
    Tensor mantissa = rem(hi, scalar(4)) * 256 + lo;
    std::vector<float> scale(32);  // the value of mantissa 1 at each exponent
    scale[0] = std::ldexp(1.0f, -24);
    for (int e = 1; e < 31; ++e) scale[e] = std::ldexp(1.0f, e - 25);
    scale[31] = std::numeric_limits<float>::infinity();
    Tensor zero = eq(exponent, scalar(0));
    Tensor significand = select(zero, mantissa, mantissa + 1024).convert(DType::f32);
    Tensor magnitude = significand * table(scale).gather("t", exponent);
    Tensor nan = logical_and(eq(exponent, scalar(31)), ne(mantissa, scalar(0)));
    magnitude = select(nan, Tensor::full(magnitude.shape(), std::nan("")), magnitude);
    return select(ge(hi, scalar(128)), -magnitude, magnitude);
  }
  // The axis after the block axis, where a block's element axes start.
  int element_axis() const { return rows_ + 1; }
  // Values {..., blk, e} f32 as the operand's layout {..., values} in `dtype`.
  Tensor values(const Tensor& v, DType dtype) const {
    return v.merge({"blk", "e"}, pos(rows_)).convert(dtype);
  }

 private:
  static Tensor scalar(int32_t value) { return Tensor::full(Shape::scalar(DType::i32), value); }
  static Tensor table(const std::vector<float>& v) {
    return Tensor::constant(
        HostBuffer::from(Shape(DType::f32, {{"t", int64_t(v.size())}}), std::span<const float>(v)));
  }

  Tensor blocks_;  // i32 {rows..., blk, byte}
  int rows_;
};

Tensor f32(const Tensor& t) { return t.convert(DType::f32); }

// The K-quants' 6-bit scales and offsets of the eight sub-blocks of 32, {..., blk, sub}, from
// the 12 bytes at 4 (quant/dequantize.cpp's k_scale_min): sub-blocks 0-3 take six bits of one
// byte (bytes 4-7 scales, 8-11 offsets); 4-7 four bits of bytes 12-15 and the top two bits of
// the byte of sub-block s - 4.
std::pair<Tensor, Tensor> k_scales(const Blocks& b) {
  Tensor scales = b.bytes(4, 4), offsets = b.bytes(8, 4), last = b.bytes(12, 4);
  const Tensor sc[] = {Blocks::low(scales, 6), Blocks::low(last, 4) + (scales / 64) * 16};
  const Tensor mn[] = {Blocks::low(offsets, 6), last / 16 + (offsets / 64) * 16};
  return {f32(concat(sc, "e").rename({{"e", "sub"}})), f32(concat(mn, "e").rename({{"e", "sub"}}))};
}

// Q4_K's and Q5_K's nibbles {..., blk, sub, l}: run r of 32 bytes from `first` holds sub-block
// 2r in its low nibbles and 2r + 1 in its high ones.
Tensor k_nibbles(const Blocks& b, int64_t first) {
  Tensor x = b.bytes(first, 128).split("e", {{"run", 4}, {"l", 32}});
  const int at = b.element_axis() + 1;
  const Tensor halves[] = {Blocks::low(x, 4).insert("nib", 1, at), (x / 16).insert("nib", 1, at)};
  return concat(halves, "nib").merge({"run", "nib"}, "sub");
}

Tensor dequantize(const Tensor& bytes, quant::GgmlType format, DType dtype) {
  using quant::GgmlType;
  const Blocks b(bytes, quant::info(format));
  // Q5_0's and Q5_1's fifth bits: bit e of the 32-bit word at `first`, {..., blk, e}.
  auto fifth_bits = [&](int64_t first) {
    Tensor x = b.bytes(first, 4).rename({{"e", "byte"}});
    return Blocks::fields(x, 8, 1, 1, "bit", b.element_axis() + 1).merge({"byte", "bit"}, "e");
  };
  // {..., blk, sub, l} as {..., blk, e}.
  auto elements = [](const Tensor& v) { return v.merge({"sub", "l"}, "e"); };
  Tensor v;
  switch (format) {
    case GgmlType::Q4_0:
      v = b.f16(0) * f32(b.nibbles(2, 16) - 8);
      break;
    case GgmlType::Q4_1:
      v = b.f16(0) * f32(b.nibbles(4, 16)) + b.f16(2);
      break;
    case GgmlType::Q5_0:
      v = b.f16(0) * f32(b.nibbles(6, 16) + fifth_bits(2) * 16 - 16);
      break;
    case GgmlType::Q5_1:
      v = b.f16(0) * f32(b.nibbles(8, 16) + fifth_bits(4) * 16) + b.f16(2);
      break;
    case GgmlType::Q8_0:
      v = f32(Blocks::signed_byte(b.bytes(2, 32))) * b.f16(0);
      break;
    case GgmlType::Q4_K: {
      auto [scale, offset] = k_scales(b);
      v = elements(b.f16(0) * scale * f32(k_nibbles(b, 16)) - b.f16(2) * offset);
      break;
    }
    case GgmlType::Q5_K: {
      auto [scale, offset] = k_scales(b);
      // Bit s of byte l of the 32 at 16 is the fifth bit of element l of sub-block s.
      Tensor high =
          Blocks::fields(b.bytes(16, 32).rename({{"e", "l"}}), 8, 1, 1, "sub", b.element_axis());
      v = elements(b.f16(0) * scale * f32(k_nibbles(b, 48) + high * 16) - b.f16(2) * offset);
      break;
    }
    case GgmlType::Q6_K: {
      // Each half of 128 elements reads 64 nibble bytes and 32 bytes of 2-bit pairs; its run j
      // of 32 takes nibble byte (j % 2) * 32 + l (low for j < 2) and bits 2j, 2j + 1 of pair
      // byte l. Each 16 elements have a signed 8-bit scale.
      Tensor ql = b.bytes(0, 128).split("e", {{"half", 2}, {"run", 2}, {"l", 32}});
      const Tensor runs[] = {Blocks::low(ql, 4), ql / 16};
      Tensor low = concat(runs, "run");
      Tensor qh = b.bytes(128, 64).split("e", {{"half", 2}, {"l", 32}});
      Tensor high = Blocks::fields(qh, 4, 2, 2, "run", b.element_axis() + 1);
      Tensor q = (low + high * 16 - 32).merge({"half", "run", "l"}, "e");
      q = q.split("e", {{"g", 16}, {"i", 16}});
      Tensor scale = f32(Blocks::signed_byte(b.bytes(192, 16))).rename({{"e", "g"}});
      v = (b.f16(208) * scale * f32(q)).merge({"g", "i"}, "e");
      break;
    }
    default:
      fail("decompose: no decomposition of dequantize for {}", quant::name(format));
  }
  return b.values(v, dtype);
}

Tensor decompose_node(const ir::Node& n, const std::vector<Tensor>& in) {
  switch (n.op) {
    case Op::softmax:
    case Op::log_softmax:
      return softmax(in[0], pos(n.attr<ir::AxisAttrs>().axis), n.op == Op::log_softmax);
    case Op::rms_norm:
      return norm(in[0], n.attr<ir::NormAttrs>(), false);
    case Op::layer_norm:
      return norm(in[0], n.attr<ir::NormAttrs>(), true);
    case Op::rope:
      return rope(in[0], in[1], in[2], n.attr<ir::RopeAttrs>().interleaved);
    case Op::attention:
      return attention(in, n.attr<ir::AttentionAttrs>());
    case Op::gated_delta_rule:
      return gated_delta_rule(in, n.attr<ir::GatedDeltaRuleAttrs>());
    case Op::short_conv:
      return short_conv(in[0], in[1], in[2]);
    case Op::dequantize:
      return dequantize(in[0], n.attr<ir::DequantizeAttrs>().format, n.shape.dtype());
    default:
      fail("decompose: {} is not a composite", ir::op_name(n.op));
  }
}

}  // namespace

ir::Graph decompose(const ir::Graph& graph, const std::function<bool(const ir::Node&)>& keep) {
  Tracer tracer;
  std::vector<ir::ValueId> map(graph.size());
  bool again = false;  // a decomposition wrote a composite the platform lacks (attention's softmax)
  for (ir::ValueId id = 0; id < graph.size(); ++id) {
    ir::Node n = graph.node(id);
    for (ir::ValueId& in : n.inputs) in = map[in];
    if (ir::op_kind(n.op) != ir::OpKind::composite || keep(n)) {
      map[id] = tracer.graph().add(std::move(n));
      continue;
    }
    std::vector<Tensor> in;
    for (ir::ValueId v : n.inputs) in.push_back(positional(tracer.wrap(v)));
    const ir::ValueId first = tracer.graph().size();
    Tensor y = decompose_node(n, in).reshape(n.shape);
    map[id] = tracer.use(y, "decompose");
    for (ir::ValueId v = first; v < tracer.graph().size(); ++v) {
      const ir::Node& added = tracer.graph().node(v);
      again = again || (ir::op_kind(added.op) == ir::OpKind::composite && !keep(added));
    }
  }
  for (ir::ValueId out : graph.outputs()) tracer.graph().outputs().push_back(map[out]);
  ir::Graph out = std::move(tracer.graph());
  return again ? decompose(out, keep) : out;
}

}  // namespace prism::compiler
