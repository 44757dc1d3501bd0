#include "dist/launch.h"

#include <sched.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>

#include "core/error.h"
#include "dist/mpi_communicator.h"

namespace medtune::dist {

namespace {

std::unique_ptr<Communicator> g_world;
std::atomic<double> g_timeout_s{0};  // 0: not set yet (the default or the environment's); read by the watchdog thread

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

// The world size the launcher announced, or 0 when no launcher did.
long launcher_world_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS"})
    if (const char* v = env(name)) {
      // SLURM_NTASKS alone (a batch script without srun) is no launch: srun sets PMI/PMIx too.
      if (std::string(name) == "SLURM_NTASKS" && env("PMI_RANK") == nullptr && env("PMIX_RANK") == nullptr) continue;
      return std::strtol(v, nullptr, 10);
    }
  return env("PMIX_RANK") != nullptr ? 2 : 0;  // PMIx without a size variable: ask MPI
}

}  // namespace

bool launched_by_mpi() { return launcher_world_size() > 0; }

Communicator& world() {
  if (g_world) return *g_world;
  // A launch of one rank works without MPI too (a build without it, or mpirun -np 1).
  if (launched_by_mpi() && launcher_world_size() > 1)
    g_world = make_mpi_world();
#if MEDTUNE_WITH_MPI
  else if (launched_by_mpi())
    g_world = make_mpi_world();
#endif
  else
    g_world = std::make_unique<SingleProcess>();
  return *g_world;
}

bool is_distributed() { return g_world && g_world->size() > 1; }

std::string rank_prefix() {
  if (!is_distributed()) return "";
  return "rank " + std::to_string(g_world->rank()) + " of " + std::to_string(g_world->size()) + ": ";
}

void set_timeout_s(double seconds) {
  if (!(seconds > 0)) throw BadInput("ddp_timeout: expected a positive number of seconds");
  g_timeout_s = seconds;
}

double timeout_s() {
  if (g_timeout_s > 0) return g_timeout_s;
  if (const char* v = env("MEDTUNE_DDP_TIMEOUT_S")) {
    char* end = nullptr;
    const double s = std::strtod(v, &end);
    if (*end == '\0' && s > 0) return s;
  }
  return 1800;
}

int default_threads(int local_size) {
  // Bound by the launcher (mpirun binds to a core or socket by default): the cores it gave.
  cpu_set_t set;
  CPU_ZERO(&set);
  const int available = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : omp_get_num_procs();
  if (available < omp_get_num_procs() || local_size <= 1) return std::max(1, available);
  // Unbound: an equal share of the machine, so that N ranks do not run N x cores threads.
  return std::max(1, available / local_size);
}

void finalize() {
  if (g_world && g_world->backend_name() != "single") {
    g_world.reset();  // stops the watchdog first
    finalize_mpi();
  }
}

void abort_job_if_distributed(int code) {
  if (is_distributed()) g_world->abort_job(code);
}

}  // namespace medtune::dist
