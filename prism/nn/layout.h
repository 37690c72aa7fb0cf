// Bringing operands to a composite's IR layout without copying what needs no copy: a decode
// step's tensors have a sequence of 1, and moving a dim of size 1, or adding one, leaves every
// byte where it is. A reshape says so (the CPU backend aliases it); a transpose or a broadcast
// would be a copy on every step.
#pragma once

#include <vector>

#include "prism/tensor/tensor.h"

namespace prism::nn {

// t with its dims in `order`: a reshape when the dims larger than 1 keep their order, else a
// transpose.
inline Tensor arrange(const Tensor& t, const std::vector<Tag>& order) {
  std::vector<Tag> before, after;
  for (const Dim& d : t.shape().dims()) {
    if (d.size != 1) before.push_back(d.tag);
  }
  std::vector<Dim> dims;
  for (Tag tag : order) {
    if (!t.has(tag)) return t.transpose(order);  // let transpose name the error
    dims.push_back({tag, t.size(tag)});
    if (t.size(tag) != 1) after.push_back(tag);
  }
  if (before != after || dims.size() != static_cast<size_t>(t.rank())) return t.transpose(order);
  return t.reshape(Shape(t.dtype(), dims));
}

// t with a new dim `tag` of size 1 in front.
inline Tensor insert_front(const Tensor& t, Tag tag) {
  std::vector<Dim> dims{{tag, 1}};
  dims.insert(dims.end(), t.shape().dims().begin(), t.shape().dims().end());
  return t.reshape(Shape(t.dtype(), dims));
}

}  // namespace prism::nn
