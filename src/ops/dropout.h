// LoRA dropout's mask, y = mask · x / (1 − p), as a pure function of (seed, site, element): the
// backward pass regenerates the mask instead of storing it, a resumed run draws the same masks,
// and a device draws the CPU's masks bit for bit (the same 64-bit integer arithmetic, and one fp32
// product per kept element, which nothing can contract).
//
// Element (row, j) of the whole batch, with `in` columns, draws counter c = row·in + j from the
// stream of its site: bits = splitmix64(base + c), base = splitmix64(seed ^ splitmix64(site));
// the element is dropped when the top 24 bits of `bits`, as a fraction of 2^24, fall below p.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace medtune::ops {

struct DropoutSite {
  float p = 0;        // drop probability; 0 = off
  uint64_t seed = 0;  // per step: mixes the run seed and the optimizer step
  uint64_t site = 0;  // per layer and projection
  // (N): row n of x is row rows[n] of the whole batch, whose mask it takes; null = row n. A pass
  // over a subset of the rows (model/layer.h's LayerCall::out_rows) draws the masks the full pass
  // would. Host memory.
  const int64_t* rows = nullptr;
  // Added to every row index: the batch's first row within a larger batch split by rows
  // (model/train_step.h: row shards), so that each shard draws the masks the whole batch would.
  int64_t row0 = 0;
};

namespace dropout {

// splitmix64: a counter-based generator, so element i's draw needs no state.
MEDTUNE_HOST_DEVICE inline uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
// The start of site d's stream.
inline uint64_t stream_base(const DropoutSite& d) { return mix(d.seed ^ mix(d.site)); }
// p as a count of 2^24ths: element dropped when (bits >> 40) < threshold.
inline uint64_t threshold(float p) { return static_cast<uint64_t>(static_cast<double>(p) * 16777216.0); }
// The scale of a kept element, 1 / (1 − p) rounded once to fp32.
inline float keep_scale(float p) { return 1.0f / (1.0f - p); }
// Whether the element at counter c of the stream starting at `base` is dropped.
MEDTUNE_HOST_DEVICE inline bool dropped(uint64_t base, uint64_t c, uint64_t threshold) {
  return (mix(base + c) >> 40) < threshold;
}

}  // namespace dropout

// x (N, in) -> xd (N, in) with the mask of `d` applied (kept elements scaled by keep_scale(d.p)).
// xd may be x (in place). The CPU op, threaded over rows.
void lora_dropout(float* xd, const float* x, int64_t N, int64_t in, const DropoutSite& d);

}  // namespace medtune::ops
