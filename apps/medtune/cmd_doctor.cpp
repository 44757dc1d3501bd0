// medtune doctor [--json] [--full] [--no-op-tests]
// What this build can compute on, and whether it computes right: the CPU backend (threads, SIMD
// compiled for and detected, BLAS library), and with a GPU build (-DMEDTUNE_GPU=cuda|hip) the
// devices the runtime sees, each checked by the GPU op tests against the CPU references
// (tests/gpu, the same registry as test_gpu_ops; --quick cases unless --full).
// Exit code: 0 ok (a CPU-only build is ok), 1 an op test failed or a device could not be queried.
#include <cblas.h>  // OpenBLAS's, which also declares openblas_get_config() and friends
#include <omp.h>

#include <cstdlib>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "backend/device.h"
#include "commands.h"
#include "core/cpu_features.h"
#include "core/int8_gemm.h"
#include "core/quant_int8.h"
#include "ops/cpu/blas_core.h"
#include "ops/cpu/onednn_matmul.h"
#include "ops/linear.h"
#include "ops/ops.h"

#if defined(MEDTUNE_WITH_GPU)
#include "gpu/runtime.h"
#include "op_test.h"  // tests/gpu: the op-test registry (medtune_gpu_optest)
#endif

namespace medtune::cli {

namespace {

using nlohmann::json;

// The instruction set the generic code was compiled for (it needs it), what this CPU has (cpuid,
// at run time), and the kernel path each dispatched op takes here (core/cpu_features.h).
json simd_levels() {
  json compiled = json::array(), detected = json::array();  // compiled: what the binary needs
#if defined(__SSE4_2__)
  compiled.push_back("sse4.2");
#endif
#if defined(__AVX__)
  compiled.push_back("avx");
#endif
#if defined(__AVX2__)
  compiled.push_back("avx2");
#endif
#if defined(__FMA__)
  compiled.push_back("fma");
#endif
#if defined(__F16C__)
  compiled.push_back("f16c");
#endif
#if defined(__AVX512F__)
  compiled.push_back("avx512f");
#endif
#if defined(__AVX512BW__)
  compiled.push_back("avx512bw");
#endif
#if defined(__aarch64__)
  compiled.push_back("neon");
#endif
  for (const std::string& f : cpu_feature_names(cpu_features())) detected.push_back(f);
#if defined(__aarch64__)
  detected.push_back("neon");  // part of AArch64
#endif
  const Isa isa = active_isa();
  json paths = json::array();
  for (Isa p : {Isa::kScalar, Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512Vnni})
    if (cpu_supports(p)) paths.push_back(isa_name(p));
  const std::string fp32_quant = isa >= Isa::kAvx2 ? "avx2 (fused dequantize-dot, dequantize + OpenBLAS sgemm)"
                                                   : "scalar (dequantize + OpenBLAS sgemm)";
  json kernels = {
      {"fp32 F32 weights", "OpenBLAS sgemm/sgemv (its own CPU dispatch)"},
      {"fp32 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K Q4_K Q5_K Q6_K IQ4_NL IQ4_XS F16 BF16 weights",
       fp32_quant},
      {"fp32 NF4 weights", isa >= Isa::kAvx2 ? "avx2" : "scalar"},
      {"int8 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q3_K Q4_K Q5_K Q6_K IQ4_NL IQ4_XS NF4 weights",
       std::string(isa_name(int8::kernel_isa())) +
           " (int8 dot products; NF4 levels rounded to int8; Q8_0 decode's rows prefetched " +
           std::to_string(int8::one_row_prefetch_bytes()) + " bytes ahead)"},
      {"int8 prompts and scoring (16+ tokens; Q4_0 and Q4_1 8+), Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q3_K Q4_K Q5_K Q6_K IQ4_NL IQ4_XS NF4 weights",
       !int8::gemm_available()                 ? "the int8 dot products above (the GEMM needs AVX2)"
       : int8::gemm_isa() == Isa::kAvx512Vnni ? "avx512vnni GEMM (16 tokens x 8 rows per tile)"
       : int8::gemm_isa() == Isa::kAvxVnni
           ? "avxvnni GEMM (16 tokens x 3 rows per tile; never yet run on such a CPU)"
           : "avx2 GEMM (16 tokens x 3 rows per tile)"},
      {"int8 F16 BF16 F32 Q2_K weights", "fp32 path (no int8 kernel)"},
      {"int8 attention (fixed order, half KV cache)", ops::fixed_order_attention_kernel()},
      {"bf16 all weights", ops::bf16_kernel() == ops::Bf16Kernel::kOneDnn
                               ? ops::onednn::kernel_name() + " (native bf16 dot products)"
                               : std::string("widened-sgemm (bf16-rounded values in OpenBLAS sgemm: bf16 results, fp32 "
                                             "speed; no AVX512-BF16/AMX here or MEDTUNE_ISA below avx512vnni)")},
      {"softmax/SiLU exp", ops::vec_exp_compiled() ? "avx2 (compiled into the baseline)" : "std::exp"},
  };
  const char* env = std::getenv("MEDTUNE_ISA");
  const CpuFeatures& f = cpu_features();
  return {{"cpu", {{"vendor", f.amd ? "AMD" : f.intel ? "Intel" : "other"}, {"family", f.family}, {"model", f.model}}},
          {"compiled_baseline", compiled_baseline()},
          {"compiled", compiled},
          {"detected", detected},
          {"kernel_paths", paths},
          {"active_path", isa_name(isa)},
          {"capped_by_MEDTUNE_ISA", env != nullptr && *env != '\0'},
          {"kernels", kernels},
          {"precisions", json::array({"fp32", "bf16", "int8"})},
          // What `--precision auto` gives on this CPU (backend/device.h): eval, train and
          // medtune-parity match transformers; generate and serve take int8 on a quantized base.
          {"precision_auto",
           {{"eval train medtune-parity", backend::precision_name(backend::parse_precision("auto", {}, "auto"))},
            {"generate serve", backend::parse_inference_precision("auto", {}, true, "auto") == backend::Precision::kInt8
                                   ? "int8 on a Q8_0/Q4_0/Q4_1/Q5_0/Q5_1/Q3_K/Q4_K/Q5_K/Q6_K/IQ4_NL/IQ4_XS/NF4 base, else fp32"
                                   : "fp32 (the int8 kernels here are the scalar reference)"}}}};
}

json cpu_backend() {
  const ops::BlasCore& core = ops::blas_core();
  json blas = {{"library", "OpenBLAS"},
               {"config", openblas_get_config()},
               {"core", core.active},
               {"core_detected_by_openblas", core.detected},
               {"core_reselected", core.reason},
               {"core_environment_note", core.environment_note},
               {"threads", openblas_get_num_threads()}};
  return {{"name", "cpu"},
          {"threads", omp_get_max_threads()},
          {"hardware_threads", std::thread::hardware_concurrency()},
          {"simd", simd_levels()},
          {"blas", blas}};
}

#if !defined(MEDTUNE_WITH_GPU)
const char* kNoGpuHint =
    "no GPU backend was compiled into this build. For NVIDIA: cmake -S . -B build-cuda "
    "-DMEDTUNE_GPU=cuda -DCMAKE_CUDA_ARCHITECTURES=90 (CUDA >= 12); for AMD: -DMEDTUNE_GPU=hip "
    "on ROCm 6 with hipBLAS; or docker/cuda.Dockerfile, docker/rocm.Dockerfile. See docs/gpu.md.";
#endif

#if defined(MEDTUNE_WITH_GPU)
// The GPU backend: every visible device, and the op tests on each. Sets `ok` false on a failure.
json gpu_backend(bool run_tests, bool full, bool verbose, bool& ok) {
  json be = {{"name", gpu::backend_name()}, {"devices", json::array()}};
  const int n = gpu::device_count();
  if (n == 0) {
    be["note"] = "no device visible: " + gpu::no_device_reason();
    return be;
  }
  gpu_test::Registry registry;
  gpu_test::register_all_cases(registry);
  for (int i = 0; i < n; ++i) {
    json dev = {{"index", i}};
    try {
      const gpu::DeviceInfo d = gpu::device_info(i);
      dev["name"] = d.name;
      dev["arch"] = d.arch;
      dev["warp_size"] = d.warp_size;
      dev["multiprocessors"] = d.multiprocessors;
      dev["total_bytes"] = d.total_bytes;
      dev["free_bytes"] = d.free_bytes;
      dev["description"] = gpu::describe(d);
      if (run_tests) {
        gpu::set_device(i);
        gpu::Stream stream;  // on device i
        int passed = 0, failed = 0;
        json cases = json::array();
        gpu_test::run_cases(registry, !full, "", stream, [&](const gpu_test::CaseResult& r) {
          (r.ok ? passed : failed) += 1;
          json c = {{"name", r.name}, {"ok", r.ok}, {"ms", r.ms}};
          if (!r.ok) c["checks"] = r.lines;
          cases.push_back(c);
          if (verbose) std::cerr << (r.ok ? "[ OK ] " : "[FAIL] ") << r.name << "\n";
        });
        dev["op_tests"] = {{"passed", passed}, {"failed", failed}, {"quick", !full}, {"cases", cases}};
        if (failed > 0) ok = false;
      }
    } catch (const std::exception& e) {
      dev["error"] = e.what();
      ok = false;
    }
    be["devices"].push_back(dev);
  }
  return be;
}
#endif

std::string join(const json& a) {
  std::string s;
  for (const auto& x : a) s += (s.empty() ? "" : " ") + x.get<std::string>();
  return s.empty() ? "none" : s;
}

void print_text(const json& r) {
  std::cout << "medtune " << r["version"].get<std::string>() << " doctor\n\nbackends:\n";
  for (const auto& be : r["backends"]) {
    const std::string name = be["name"];
    if (name == "cpu") {
      std::cout << "  cpu   " << be["threads"] << " OpenMP threads (" << be["hardware_threads"]
                << " hardware threads)\n"
                << "        compiled for -march=" << be["simd"]["compiled_baseline"].get<std::string>()
                << "; this CPU (" << be["simd"]["cpu"]["vendor"].get<std::string>() << " family "
                << be["simd"]["cpu"]["family"] << " model " << be["simd"]["cpu"]["model"]
                << ") has: " << join(be["simd"]["detected"]) << "\n"
                << "        kernel paths this CPU can take: " << join(be["simd"]["kernel_paths"])
                << "; taking: " << be["simd"]["active_path"].get<std::string>()
                << (be["simd"]["capped_by_MEDTUNE_ISA"].get<bool>() ? " (capped by MEDTUNE_ISA)" : "") << "\n"
                << "        precisions: " << join(be["simd"]["precisions"]) << "\n"
                << "        --precision auto: " << be["simd"]["precision_auto"]["eval train medtune-parity"].get<std::string>()
                << " for eval, train and medtune-parity; for generate and serve "
                << be["simd"]["precision_auto"]["generate serve"].get<std::string>() << "\n";
      for (const auto& [op, path] : be["simd"]["kernels"].items())
        std::cout << "          " << op << ": " << path.get<std::string>() << "\n";
      std::cout
                << "        BLAS: " << be["blas"]["library"].get<std::string>() << " ("
                << be["blas"]["config"].get<std::string>() << "; core "
                << be["blas"]["core"].get<std::string>() << ", " << be["blas"]["threads"]
                << " threads)\n";
      if (!be["blas"]["core_reselected"].get<std::string>().empty())
        std::cout << "        BLAS core: " << be["blas"]["core_reselected"].get<std::string>() << "\n";
      if (!be["blas"]["core_environment_note"].get<std::string>().empty())
        std::cout << "        BLAS core: " << be["blas"]["core_environment_note"].get<std::string>()
                  << "\n";
      continue;
    }
    std::cout << "  " << name << "  " << be["devices"].size() << " device(s)";
    if (be.contains("note")) std::cout << ": " << be["note"].get<std::string>();
    std::cout << "\n";
    for (const auto& d : be["devices"]) {
      std::cout << "        device " << d["index"] << ": "
                << (d.contains("description") ? d["description"].get<std::string>() : std::string("?")) << "\n";
      if (d.contains("error")) std::cout << "          ERROR: " << d["error"].get<std::string>() << "\n";
      if (d.contains("op_tests")) {
        const auto& t = d["op_tests"];
        std::cout << "          op tests vs CPU (" << (t["quick"].get<bool>() ? "quick" : "full")
                  << "): " << t["passed"] << " passed, " << t["failed"] << " failed\n";
        for (const auto& c : t["cases"])
          if (!c["ok"].get<bool>()) {
            std::cout << "          FAIL " << c["name"].get<std::string>() << "\n";
            for (const auto& line : c["checks"]) std::cout << "            " << line.get<std::string>() << "\n";
          }
      }
    }
  }
  if (!r["gpu_compiled"].get<bool>()) std::cout << "  gpu   " << r["gpu_hint"].get<std::string>() << "\n";
  std::cout << "\n" << (r["ok"].get<bool>() ? "ok" : "PROBLEMS FOUND (see above)") << "\n";
}

}  // namespace

void add_doctor_command(CLI::App& app) {
  struct Args {
    bool json = false;
    bool full = false;
    bool no_op_tests = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "doctor", "Backends of this build (CPU, and CUDA/HIP when compiled in), devices, and GPU op tests against the CPU");
  cmd->add_flag("--json", args->json, "Print one JSON object");
  cmd->add_flag("--full", args->full, "GPU op tests: every case, including realistic sizes (default: the quick ones)");
  cmd->add_flag("--no-op-tests", args->no_op_tests, "List backends and devices only");
  cmd->callback([args] {
    bool ok = true;
    json report = {{"version", MEDTUNE_VERSION}, {"backends", json::array({cpu_backend()})}};
#if defined(MEDTUNE_WITH_GPU)
    report["gpu_compiled"] = true;
    report["backends"].push_back(gpu_backend(!args->no_op_tests, args->full, !args->json, ok));
#else
    (void)args->full;
    report["gpu_compiled"] = false;
    report["gpu_hint"] = kNoGpuHint;
#endif
    report["ok"] = ok;
    if (args->json) {
      std::cout << report.dump(2) << "\n";
    } else {
      print_text(report);
    }
    if (!ok) throw ExitWith{1};
  });
}

}  // namespace medtune::cli
