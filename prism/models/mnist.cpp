#include "prism/models/mnist.h"

#include "prism/core/error.h"

namespace prism::models {
namespace {

Tensor weight(const char* name, std::initializer_list<Dim> dims) {
  return Tensor::parameter(name, Shape(DType::f32, dims));
}

// 2x2 max pooling, stride 2: each spatial tag is split into (half, 2) and the pairs reduced.
Tensor max_pool2(const Tensor& x) {
  return x.split("h", {{"h", x.size("h") / 2}, {"ph", 2}})
      .split("w", {{"w", x.size("w") / 2}, {"pw", 2}})
      .max({"ph", "pw"});
}

// A 5x5 same-padded convolution with bias and relu; output channels become the new "c".
Tensor conv_relu(const Tensor& x, const char* name, int64_t out_channels) {
  std::string w = std::string(name) + ".weight", b = std::string(name) + ".bias";
  Tensor kernel = Tensor::parameter(
      w, Shape(DType::f32, {{"o", out_channels}, {"c", x.size("c")}, {"h", 5}, {"w", 5}}));
  Tensor bias = Tensor::parameter(b, Shape(DType::f32, {{"o", out_channels}}));
  ConvOptions options{.spatial = {"h", "w"}, .pad_low = {2, 2}, .pad_high = {2, 2}};
  return (conv(x, kernel, options) + bias).relu().rename({{"o", "c"}});
}

}  // namespace

Mnist::Kind Mnist::kind_from_name(std::string_view name) {
  if (name == "mlp") return Kind::mlp;
  if (name == "cnn") return Kind::cnn;
  fail("mnist: unknown model '{}' (expected mlp or cnn)", name);
}

Mnist::Mnist(Kind kind) : kind_(kind) {}

Tensor Mnist::forward(const Tensor& images) const {
  Tensor pixels = images.convert(DType::f32) / 255.0;
  Tensor logits = kind_ == Kind::mlp ? mlp(pixels) : cnn(pixels);
  return logits.softmax("class");
}

Tensor Mnist::mlp(const Tensor& pixels) const {
  Tensor x = pixels.merge({"h", "w"}, "pixels");
  Tensor h = (x.dot(weight("fc1.weight", {{"hidden", 256}, {"pixels", 784}}), "pixels") +
              weight("fc1.bias", {{"hidden", 256}}))
                 .relu();
  return h.dot(weight("fc2.weight", {{"class", 10}, {"hidden", 256}}), "hidden") +
         weight("fc2.bias", {{"class", 10}});
}

Tensor Mnist::cnn(const Tensor& pixels) const {
  Tensor x = pixels.insert("c", 1, 1);  // {b, c=1, h, w}
  x = max_pool2(conv_relu(x, "conv1", 16));
  x = max_pool2(conv_relu(x, "conv2", 32));
  Tensor features = x.merge({"c", "h", "w"}, "features");  // PyTorch's flatten order
  return features.dot(weight("fc.weight", {{"class", 10}, {"features", 32 * 7 * 7}}), "features") +
         weight("fc.bias", {{"class", 10}});
}

}  // namespace prism::models
