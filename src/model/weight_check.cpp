#include "model/weight_check.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/nf4.h"
#include "core/quant.h"

namespace medtune::model {

namespace {

// Every stored type the model computes with (io/checkpoint.h's weight types, and NF4 from
// bitsandbytes checkpoints); integer tensors hold no floats.
bool checkable(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || dtype_is_quantized(t);
}

// A row decoded as the model decodes it (ops/cpu/linear.cpp): NF4 has its own kernels, every
// other stored type goes through core/quant.h.
void decode_row(DType t, const uint8_t* src, float* out, int64_t n) {
  if (t == DType::NF4) nf4::dequantize_blocks(src, out, n);
  else dequantize_row(t, src, out, n);
}

struct FirstBad {
  int64_t element = -1;  // -1: every element is finite
  float value = 0.0f;
};

// The first non-finite element of tensor `t`. Rows are decoded in parallel; the smallest bad row
// wins, so the answer does not depend on the thread count.
FirstBad first_nonfinite(const RawTensor& t) {
  const int64_t n = t.numel();
  if (n == 0) return {};
  const int64_t row = t.shape.empty() ? n : t.shape.back();
  const int64_t rows = n / row;
  const int64_t row_bytes = dtype_row_bytes(t.dtype, row);
  std::atomic<int64_t> bad_row{rows};
#pragma omp parallel
  {
    std::vector<float> buf(static_cast<size_t>(row));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      if (r > bad_row.load(std::memory_order_relaxed)) continue;
      decode_row(t.dtype, t.data + r * row_bytes, buf.data(), row);
      bool finite = true;
      for (float x : buf) finite &= std::isfinite(x);
      if (!finite) {
        int64_t cur = bad_row.load();
        while (r < cur && !bad_row.compare_exchange_weak(cur, r)) {
        }
      }
    }
  }
  const int64_t r = bad_row.load();
  if (r == rows) return {};
  std::vector<float> buf(static_cast<size_t>(row));
  decode_row(t.dtype, t.data + r * row_bytes, buf.data(), row);
  const auto it = std::find_if(buf.begin(), buf.end(), [](float x) { return !std::isfinite(x); });
  return {r * row + (it - buf.begin()), *it};
}

}  // namespace

std::optional<NonFiniteWeight> find_nonfinite_weight(const io::Checkpoint& ckpt) {
  for (const auto& [name, t] : ckpt.tensors) {
    if (!checkable(t.dtype) || t.data == nullptr) continue;
    const FirstBad bad = first_nonfinite(t);
    if (bad.element < 0) continue;
    const int64_t e = bad.element;
    NonFiniteWeight w;
    w.tensor = name;
    w.file_name = t.name != name ? t.name : "";
    w.element = e;
    const int64_t be = dtype_block_elems(t.dtype);
    w.block = be > 1 ? e / be : -1;
    w.value = bad.value;
    return w;
  }
  return std::nullopt;
}

void check_weights_finite(const io::Checkpoint& ckpt) {
  const auto w = find_nonfinite_weight(ckpt);
  if (!w) return;
  const RawTensor& t = ckpt.tensors.at(w->tensor);
  std::string msg =
      ckpt.path + ": tensor '" + (w->file_name.empty() ? w->tensor : w->file_name) + "'";
  if (!w->file_name.empty()) msg += " (" + w->tensor + ")";
  msg += " holds " +
         std::string(std::isnan(w->value) ? "NaN"
                     : w->value > 0       ? "+Inf"
                                          : "-Inf") +
         " at element " + std::to_string(w->element);
  if (w->block >= 0)
    msg += ", " + std::string(dtype_name(t.dtype)) + " block " + std::to_string(w->block) +
           " (its scale or values)";
  throw BadInput(
      msg + ": the model file is damaged; every output computed from it would be NaN or wrong");
}

}  // namespace medtune::model
