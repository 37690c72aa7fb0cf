#include "prism/quant/ggml_type.h"

#include "prism/core/error.h"

namespace prism::quant {
namespace {

// Bytes per block as the sum of their parts (QK = 256 for the K and most IQ types), so each
// line can be checked against the block's layout.
constexpr int64_t QK = 256;

constexpr GgmlTypeInfo kTypes[] = {
    {GgmlType::F32, "F32", 1, 4},
    {GgmlType::F16, "F16", 1, 2},
    {GgmlType::Q4_0, "Q4_0", 32, 2 + 16},
    {GgmlType::Q4_1, "Q4_1", 32, 2 + 2 + 16},
    {GgmlType::Q5_0, "Q5_0", 32, 2 + 4 + 16},
    {GgmlType::Q5_1, "Q5_1", 32, 2 + 2 + 4 + 16},
    {GgmlType::Q8_0, "Q8_0", 32, 2 + 32},
    {GgmlType::Q8_1, "Q8_1", 32, 4 + 4 + 32},
    {GgmlType::Q2_K, "Q2_K", QK, 2 + 2 + QK / 16 + QK / 4},
    {GgmlType::Q3_K, "Q3_K", QK, 2 + QK / 4 + QK / 8 + 12},
    {GgmlType::Q4_K, "Q4_K", QK, 2 + 2 + 12 + QK / 2},
    {GgmlType::Q5_K, "Q5_K", QK, 2 + 2 + 12 + QK / 8 + QK / 2},
    {GgmlType::Q6_K, "Q6_K", QK, QK / 2 + QK / 4 + QK / 16 + 2},
    {GgmlType::Q8_K, "Q8_K", QK, 4 + QK + QK / 8},
    {GgmlType::IQ2_XXS, "IQ2_XXS", QK, 2 + QK / 4},
    {GgmlType::IQ2_XS, "IQ2_XS", QK, 2 + QK / 4 + QK / 32},
    {GgmlType::IQ3_XXS, "IQ3_XXS", QK, 2 + QK / 4 + QK / 8},
    {GgmlType::IQ1_S, "IQ1_S", QK, 2 + QK / 8 + QK / 16},
    {GgmlType::IQ4_NL, "IQ4_NL", 32, 2 + 16},
    {GgmlType::IQ3_S, "IQ3_S", QK, 2 + QK / 4 + QK / 8 + QK / 32 + 4},
    {GgmlType::IQ2_S, "IQ2_S", QK, 2 + QK / 4 + QK / 16},
    {GgmlType::IQ4_XS, "IQ4_XS", QK, 2 + 2 + QK / 2 + QK / 64},
    {GgmlType::I8, "I8", 1, 1},
    {GgmlType::I16, "I16", 1, 2},
    {GgmlType::I32, "I32", 1, 4},
    {GgmlType::I64, "I64", 1, 8},
    {GgmlType::F64, "F64", 1, 8},
    {GgmlType::IQ1_M, "IQ1_M", QK, QK / 8 + QK / 16 + QK / 32},
    {GgmlType::BF16, "BF16", 1, 2},
    {GgmlType::TQ1_0, "TQ1_0", QK, 2 + 4 * 13},
    {GgmlType::TQ2_0, "TQ2_0", QK, 2 + 64},
    {GgmlType::MXFP4, "MXFP4", 32, 1 + 16},
    {GgmlType::NVFP4, "NVFP4", 64, 4 + 32},
    {GgmlType::Q1_0, "Q1_0", 128, 2 + 16},
};

const GgmlTypeInfo* find(uint32_t id) {
  for (const auto& t : kTypes) {
    if (static_cast<uint32_t>(t.type) == id) return &t;
  }
  return nullptr;
}

}  // namespace

std::optional<GgmlType> ggml_type_from_id(uint32_t id) {
  const GgmlTypeInfo* t = find(id);
  return t ? std::optional(t->type) : std::nullopt;
}

const GgmlTypeInfo& info(GgmlType type) {
  const GgmlTypeInfo* t = find(static_cast<uint32_t>(type));
  PRISM_CHECK(t, "ggml type {} is not a ggml type", static_cast<uint32_t>(type));
  return *t;
}

std::optional<GgmlType> ggml_type_from_name(std::string_view name) {
  for (const auto& t : kTypes) {
    if (t.name == name) return t.type;
  }
  return std::nullopt;
}

}  // namespace prism::quant
