// The schedule space of the tensor-core kernel: how many keys a tile holds
// and how many warps (16 query rows each) a block runs, and what that
// costs in registers and shared memory on the target's GPU.
#ifndef MHAGEN_CUDA_TENSORCORESCHEDULE_H
#define MHAGEN_CUDA_TENSORCORESCHEDULE_H

#include "mhagen/spec/AttentionSpec.h"
#include "mhagen/spec/ScheduleParams.h"

#include <cstdint>

namespace mhagen::cuda {

/// One point of the space and what follows from it.
struct TensorCoreTiles {
  int warps = 4;    ///< warps per block, 16 packed query rows each
  int keyTile = 64; ///< keys per K/V tile (BN)
  int rows() const { return 16 * warps; } ///< BM
  /// Q tile plus one K and one V tile, 16-bit elements.
  int64_t sharedBytes(int64_t dk) const {
    return (rows() + 2 * keyTile) * dk * 2;
  }
};

TensorCoreTiles tensorCoreTiles(const ScheduleParams &p);
ScheduleSpace tensorCoreScheduleSpace(const AttentionSpec &s);

} // namespace mhagen::cuda

#endif
