// The MNIST models that tools/train_mnist.py trains: a 2-layer MLP and a small CNN (two
// convolution + max-pool layers, then a dense layer). Images are bytes {b, h=28, w=28}; the
// forward pass returns class probabilities {b, class=10}.
#pragma once

#include <string_view>

#include "prism/tensor/tensor.h"

namespace prism::models {

class Mnist {
 public:
  enum class Kind { mlp, cnn };
  static Kind kind_from_name(std::string_view name);  // "mlp" or "cnn"

  explicit Mnist(Kind kind);
  Tensor forward(const Tensor& images) const;
  Kind kind() const { return kind_; }

 private:
  Tensor mlp(const Tensor& pixels) const;
  Tensor cnn(const Tensor& pixels) const;

  Kind kind_;
};

}  // namespace prism::models
