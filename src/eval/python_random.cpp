#include "eval/python_random.h"

#include <bit>
#include <cmath>
#include <string>
#include <unordered_set>

#include "core/error.h"

namespace medtune::eval {
namespace {

constexpr size_t kN = 624;  // MT19937 state words
constexpr size_t kM = 397;
constexpr uint32_t kMatrixA = 0x9908b0dfu;
constexpr uint32_t kUpper = 0x80000000u;
constexpr uint32_t kLower = 0x7fffffffu;

}  // namespace

void PythonRandom::init_genrand(uint32_t s) {
  mt_[0] = s;
  for (size_t i = 1; i < kN; ++i) mt_[i] = 1812433253u * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + static_cast<uint32_t>(i);
  mti_ = kN;
}

// MT19937's init_by_array, which CPython's Random.seed(int) uses.
PythonRandom::PythonRandom(uint64_t seed) {
  std::vector<uint32_t> key{static_cast<uint32_t>(seed)};
  if (seed >> 32) key.push_back(static_cast<uint32_t>(seed >> 32));
  init_genrand(19650218u);
  size_t i = 1, j = 0;
  for (size_t k = std::max(kN, key.size()); k > 0; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1664525u)) + key[j] + static_cast<uint32_t>(j);
    ++i;
    ++j;
    if (i >= kN) {
      mt_[0] = mt_[kN - 1];
      i = 1;
    }
    if (j >= key.size()) j = 0;
  }
  for (size_t k = kN - 1; k > 0; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1566083941u)) - static_cast<uint32_t>(i);
    ++i;
    if (i >= kN) {
      mt_[0] = mt_[kN - 1];
      i = 1;
    }
  }
  mt_[0] = 0x80000000u;  // the state is never all zero
}

uint32_t PythonRandom::genrand_uint32() {
  if (mti_ >= kN) {
    auto twist = [&](size_t at, size_t next, size_t from) {
      const uint32_t y = (mt_[at] & kUpper) | (mt_[next] & kLower);
      mt_[at] = mt_[from] ^ (y >> 1) ^ ((y & 1u) ? kMatrixA : 0u);
    };
    for (size_t k = 0; k < kN - kM; ++k) twist(k, k + 1, k + kM);
    for (size_t k = kN - kM; k < kN - 1; ++k) twist(k, k + 1, k + kM - kN);
    twist(kN - 1, 0, kM - 1);
    mti_ = 0;
  }
  uint32_t y = mt_[mti_++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

uint32_t PythonRandom::getrandbits(int k) {
  if (k < 1 || k > 32) throw Internal("PythonRandom::getrandbits: k = " + std::to_string(k) + " outside 1..32");
  return genrand_uint32() >> (32 - k);
}

size_t PythonRandom::randbelow(size_t n) {
  if (n == 0 || n > 0xFFFFFFFFu) throw Internal("PythonRandom::randbelow: n = " + std::to_string(n));
  const int k = std::bit_width(n);  // n.bit_length(), not (n - 1)'s: as CPython
  size_t r = getrandbits(k);
  while (r >= n) r = getrandbits(k);
  return r;
}

std::vector<size_t> PythonRandom::sample(size_t n, size_t k) {
  if (k > n) {
    throw BadInput("cannot draw " + std::to_string(k) + " distinct examples from a pool of " + std::to_string(n));
  }
  std::vector<size_t> result(k);
  size_t setsize = 21;  // CPython: a list is used while it is smaller than the set would be
  if (k > 5) {
    // 4 ** _ceil(_log(k * 3, 4)): math.log(x, 4) is log(x) / log(4) in doubles, as here.
    const double e = std::ceil(std::log(static_cast<double>(k * 3)) / std::log(4.0));
    setsize += static_cast<size_t>(std::llround(std::pow(4.0, e)));
  }
  if (n <= setsize) {
    std::vector<size_t> pool(n);
    for (size_t i = 0; i < n; ++i) pool[i] = i;
    for (size_t i = 0; i < k; ++i) {
      const size_t j = randbelow(n - i);
      result[i] = pool[j];
      pool[j] = pool[n - i - 1];  // move the last unselected item into the vacancy
    }
  } else {
    std::unordered_set<size_t> selected;
    for (size_t i = 0; i < k; ++i) {
      size_t j = randbelow(n);
      while (selected.count(j)) j = randbelow(n);
      selected.insert(j);
      result[i] = j;
    }
  }
  return result;
}

}  // namespace medtune::eval
