#include "core/dtype.h"

namespace medtune {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::F64: return "F64";
    case DType::I64: return "I64";
    case DType::I32: return "I32";
    case DType::Q8_0: return "Q8_0";
    case DType::Q4_0: return "Q4_0";
    case DType::Q4_1: return "Q4_1";
    case DType::Q4_K: return "Q4_K";
    case DType::Q6_K: return "Q6_K";
    case DType::Q5_0: return "Q5_0";
    case DType::Q5_1: return "Q5_1";
    case DType::Q5_K: return "Q5_K";
    case DType::Q2_K: return "Q2_K";
    case DType::Q3_K: return "Q3_K";
    case DType::IQ4_NL: return "IQ4_NL";
    case DType::IQ4_XS: return "IQ4_XS";
    case DType::NF4: return "NF4";
  }
  return "?";
}

int64_t dtype_block_elems(DType t) {
  switch (t) {
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::IQ4_NL: return 32;
    case DType::Q4_K:
    case DType::Q6_K:
    case DType::Q5_K:
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::IQ4_XS: return 256;
    case DType::NF4: return 64;
    default: return 1;
  }
}

int64_t dtype_block_bytes(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::F64: return 8;
    case DType::I64: return 8;
    case DType::I32: return 4;
    case DType::Q8_0: return 2 + 32;           // d, qs[32]
    case DType::Q4_0: return 2 + 16;           // d, qs[16]
    case DType::Q4_1: return 2 + 2 + 16;       // d, m, qs[16]
    case DType::Q4_K: return 2 + 2 + 12 + 128; // d, dmin, scales[12], qs[128]
    case DType::Q6_K: return 128 + 64 + 16 + 2;// ql[128], qh[64], scales[16], d
    case DType::Q5_0: return 2 + 4 + 16;       // d, qh[4], qs[16]
    case DType::Q5_1: return 2 + 2 + 4 + 16;   // d, m, qh[4], qs[16]
    case DType::Q5_K: return 2 + 2 + 12 + 32 + 128; // d, dmin, scales[12], qh[32], qs[128]
    case DType::Q2_K: return 16 + 64 + 2 + 2;  // scales[16], qs[64], d, dmin
    case DType::Q3_K: return 32 + 64 + 12 + 2; // hmask[32], qs[64], scales[12], d
    case DType::IQ4_NL: return 2 + 16;         // d, qs[16]
    case DType::IQ4_XS: return 2 + 2 + 4 + 128; // d, scales_h, scales_l[4], qs[128]
    case DType::NF4: return 4 + 32;            // absmax f32, qs[32]
  }
  return 0;
}

}  // namespace medtune
