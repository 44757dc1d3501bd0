// Stand-in for ROCm's hip/hip_version.h under HIP-CPU: vendor.h takes the ROCm 5 branch.
#pragma once
#define HIP_VERSION_MAJOR 5
