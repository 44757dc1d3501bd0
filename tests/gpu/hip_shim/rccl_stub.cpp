// Definitions for tests/gpu/hip_shim/rccl/rccl.h so that the HIP compile check links: every call
// fails (ncclInvalidUsage). Nothing in the op tests calls them.
#include "rccl/rccl.h"

extern "C" {
ncclResult_t ncclGetUniqueId(ncclUniqueId*) { return ncclInvalidUsage; }
ncclResult_t ncclCommInitRank(ncclComm_t*, int, ncclUniqueId, int) { return ncclInvalidUsage; }
ncclResult_t ncclCommDestroy(ncclComm_t) { return ncclInvalidUsage; }
ncclResult_t ncclAllReduce(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, hipStream_t) {
  return ncclInvalidUsage;
}
const char* ncclGetErrorString(ncclResult_t) { return "RCCL stub (tests/gpu/hip_shim): no RCCL in this build"; }
}
