// Runtime cases: device query, buffers, copies, errors (gpu/runtime.h).
#include <string>
#include <vector>

#include "core/error.h"
#include "op_test.h"

namespace medtune::gpu_test {

void register_runtime_cases(Registry& r) {
  r.add("runtime/device_info", true, [](Checks& c, const gpu::Stream&) {
    const gpu::DeviceInfo d = gpu::device_info(0);
    c.record(!d.name.empty() && !d.arch.empty(), "name '" + d.name + "', arch '" + d.arch + "'");
    c.record(d.warp_size == 32 || d.warp_size == 64,
             "warp size " + std::to_string(d.warp_size) + " is 32 or 64 (and matches the compiled one)");
    c.record(d.total_bytes > 0 && d.free_bytes > 0 && d.free_bytes <= d.total_bytes,
             "memory: " + std::to_string(d.free_bytes) + " free of " + std::to_string(d.total_bytes));
    c.record(d.multiprocessors > 0, std::to_string(d.multiprocessors) + " multiprocessors");
  });

  // Host -> device -> device -> host round trip of an odd number of bytes, with guards.
  r.add("runtime/copies", true, [](Checks& c, const gpu::Stream& s) {
    const std::vector<uint8_t> host = random_bytes(1000003, 1);
    GuardedDevice<uint8_t> a(host.size(), s), b(host.size(), s);
    gpu::copy_to_device(a.data(), host.data(), host.size(), s);
    gpu::copy_device_to_device(b.data(), a.data(), host.size(), s);
    const std::vector<uint8_t> back = b.download(s);
    c.record(back == host, "round trip of 1000003 bytes is identical");
    c.guards("copy destination", b, s);
  });

  r.add("runtime/fill_and_move", true, [](Checks& c, const gpu::Stream& s) {
    gpu::DeviceBuffer a(4096);
    gpu::fill_bytes(a.data(), 0x3C, a.bytes(), s);
    gpu::DeviceBuffer b(std::move(a));
    c.record(a.data() == nullptr && a.bytes() == 0 && b.bytes() == 4096, "a moved-from buffer is empty");
    std::vector<uint8_t> back(4096);
    gpu::copy_to_host_sync(back.data(), b.data(), back.size(), s);
    bool all = true;
    for (uint8_t v : back) all = all && v == 0x3C;
    c.record(all, "fill_bytes wrote every byte");
    gpu::DeviceBuffer empty(0);
    c.record(empty.data() == nullptr, "a 0-byte buffer holds no memory");
  });

  // An allocation larger than the device throws OutOfMemory (which the backend turns into a
  // message with the numbers), not the Internal of other runtime failures; the device is usable
  // afterwards (the runtime's sticky error was cleared).
  r.add("runtime/out_of_memory", true, [](Checks& c, const gpu::Stream&) {
    const gpu::DeviceInfo d = gpu::device_info(0);
    bool oom = false;
    try {
      gpu::DeviceBuffer huge(static_cast<size_t>(d.total_bytes) * 2);
    } catch (const gpu::OutOfMemory&) {
      oom = true;
    } catch (const Internal&) {
    }
    c.record(oom, "allocating twice the device's memory throws gpu::OutOfMemory");
    gpu::DeviceBuffer after(4096);
    c.record(after.data() != nullptr, "a 4 KiB allocation succeeds after it");
  });

  // copy_rows_2d: rows of a block into a strided destination (the KV-cache append). The rest of
  // the destination (other positions, the other rows' tails) must keep its values. Bit-exact (a
  // copy). Shapes: (B, T, KVD) appended at `past` into (B, Smax, KVD).
  const auto copy_2d_case = [&r](int64_t B, int64_t T, int64_t KVD, int64_t Smax, int64_t past,
                                 bool quick) {
    const std::string dims =
        shape({{"B", B}, {"T", T}, {"KVD", KVD}, {"Smax", Smax}, {"past", past}});
    r.add("runtime/copy_rows_2d/" + dims, quick, [=](Checks& c, const gpu::Stream& s) {
      const std::vector<float> k = random_normals(static_cast<size_t>(B * T * KVD), 2);
      std::vector<float> cache = random_normals(static_cast<size_t>(B * Smax * KVD), 3);
      GuardedDevice<float> d_k(k, s), d_cache(cache, s);
      gpu::copy_rows_2d(d_cache.data() + past * KVD, Smax * KVD, d_k.data(), T * KVD, B,
                        T * KVD, s);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t e = 0; e < T * KVD; ++e)
          cache[static_cast<size_t>(b * Smax * KVD + past * KVD + e)] =
              k[static_cast<size_t>(b * T * KVD + e)];
      const std::vector<float> got = d_cache.download(s);
      c.guards("cache", d_cache, s);
      c.bit_exact("cache", got, cache);
    });
  };
  copy_2d_case(1, 1, 1, 1, 0, true);
  copy_2d_case(3, 5, 33, 17, 7, true);           // odd sizes, appended in the middle
  copy_2d_case(2, 4, 40, 10, 6, true);           // up to the cache's end
  copy_2d_case(8, 512, 1024, 2048, 100, false);  // Llama-3-8B: 8 kv heads of 128
  r.add("runtime/copy_rows_2d/bad_stride_throws", true, [](Checks& c, const gpu::Stream& s) {
    bool threw = false;
    try {
      gpu::copy_rows_2d(nullptr, 10, nullptr, 20, 2, 11, s);
    } catch (const Internal&) {
      threw = true;
    }
    c.record(threw, "cols wider than the destination stride throws Internal");
  });

  // Errors become medtune::Internal naming the call, file and line (check.h).
  r.add("runtime/errors", true, [](Checks& c, const gpu::Stream&) {
    std::string msg;
    try {
      gpu::set_device(1 << 20);
    } catch (const Internal& e) {
      msg = e.what();
    }
    gpu::set_device(0);
    c.record(msg.find("SetDevice") != std::string::npos && msg.find("runtime.cu:") != std::string::npos,
             "a failing call throws Internal with expression, file and line: '" + msg + "'");
    std::string alloc;
    try {
      gpu::DeviceBuffer huge(size_t{1} << 60);
    } catch (const Internal& e) {
      alloc = e.what();
    }
    c.record(!alloc.empty(), "an impossible allocation throws Internal: '" + alloc + "'");
  });
}

}  // namespace medtune::gpu_test
