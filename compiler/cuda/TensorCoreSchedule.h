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
  int warps = 4;      ///< warps per block (consumer warps for wgmma), 16
                      ///< packed query rows each
  int keyTile = 64;   ///< keys per K/V tile (BN)
  bool wgmma = false; ///< the sm_90a kernel (wgmma_attention.cuh)
  static constexpr int kWgmmaStages = 2;  ///< its K/V ring (Sm90Layout)
  int rows() const { return 16 * warps; } ///< BM
  /// The sm_90a kernel adds its producer warpgroup.
  int threads() const { return 32 * warps + (wgmma ? 128 : 0); }
  /// mma.sync: the Q tile plus one K and one V tile, 16-bit elements.
  /// wgmma: 1024 bytes of alignment slack, Q, the ring of K and V
  /// stages, 7 mbarriers (Sm90Layout::SHARED_BYTES).
  int64_t sharedBytes(int64_t dk) const {
    if (!wgmma)
      return (rows() + 2 * keyTile) * dk * 2;
    return 1024 + (rows() + 2 * kWgmmaStages * keyTile) * dk * 2 +
           8 * (3 * kWgmmaStages + 1);
  }
};

TensorCoreTiles tensorCoreTiles(const AttentionSpec &s,
                                const ScheduleParams &p);
ScheduleSpace tensorCoreScheduleSpace(const AttentionSpec &s);

} // namespace mhagen::cuda

#endif
