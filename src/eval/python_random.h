// Python's random.Random, bit for bit, for what lm-evaluation-harness uses to draw few-shot
// examples: Random(seed) with an integer seed, getrandbits(k) for k <= 32, _randbelow(n) and
// sample(range(n), k). CPython's algorithms (Lib/random.py and Modules/_randommodule.c, 3.11):
//   seed      init_by_array of MT19937 with the key = |seed| as 32-bit words, least significant
//             first ([0] for 0)
//   getrandbits(k)  genrand_uint32() >> (32 - k)
//   _randbelow(n)   k = n.bit_length(); r = getrandbits(k) until r < n
//   sample    a partial Fisher-Yates over a copy of the population when it is small (n <= setsize),
//             else rejection of repeats through a set; setsize = 21, plus 4^ceil(log4(3k)) when
//             k > 5
// tests/unit/eval/test_python_random.cpp checks it against outputs of Python itself
// (tests/fixtures/eval/python_random.json, written by tools/make_eval_fixtures.py).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace medtune::eval {

class PythonRandom {
 public:
  explicit PythonRandom(uint64_t seed);

  uint32_t genrand_uint32();
  uint32_t getrandbits(int k);  // 1 <= k <= 32
  size_t randbelow(size_t n);   // n >= 1, n < 2^32
  // random.sample(range(n), k): k distinct indices in draw order. Throws BadInput if k > n.
  std::vector<size_t> sample(size_t n, size_t k);

 private:
  void init_genrand(uint32_t s);
  std::array<uint32_t, 624> mt_{};  // the MT19937 state
  size_t mti_ = 625;
};

}  // namespace medtune::eval
