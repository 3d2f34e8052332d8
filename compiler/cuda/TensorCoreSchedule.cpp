// The tensor-core kernel's schedule space (TensorCoreSchedule.h).
#include "TensorCoreSchedule.h"

#include "mhagen/machine/MachineModel.h"

#include <string>

namespace mhagen::cuda {

namespace {

// f32 accumulators a thread holds: the output rows (dk / 2) and the score
// tile (key_tile / 2). Past 140 of them, ptxas spills or runs out of
// its 255 registers for addresses and fragments (measured with ptxas -v on
// sm_80: dk 128 with key_tile 64 uses 236 registers with its Q fragments,
// with 128 it uses 248; dk 256 with 32 keys (144) spills 4-8 bytes on
// sm_80, sm_86 and sm_90 once lse, a GQA group of 4 or padding add their
// registers, so dk 256 takes 16-key tiles).
constexpr int64_t kAccumulatorBudget = 140;

// The sm_90a kernel's consumers hold the same accumulators (wgmma's m64
// fragments spread 64 rows over 128 threads as mma.sync's 16 over 32) with
// more registers: 240 after setmaxnreg with two warpgroups, 255 with one
// (ptxas -v on sm_90a: dk 128 with key_tile 128 and dk 256 with 64, no
// spills).
int64_t accumulatorBudget(const TensorCoreTiles &t) {
  if (!t.wgmma)
    return kAccumulatorBudget;
  return t.warps == 8 ? 160 : 176;
}

} // namespace

TensorCoreTiles tensorCoreTiles(const AttentionSpec &s,
                                const ScheduleParams &p) {
  TensorCoreTiles t;
  t.warps = static_cast<int>(p.at("warps"));
  t.keyTile = static_cast<int>(p.at("key_tile"));
  t.wgmma = s.target.cudaArchSpecific;
  return t;
}

ScheduleSpace tensorCoreScheduleSpace(const AttentionSpec &s) {
  ScheduleSpace space;
  space.params = {
      {"key_tile",
       {16, 32, 64, 128},
       "keys per K/V tile staged in shared memory"},
      {"warps", {4, 8}, "warps per block; each owns 16 packed query rows"}};
  // The widest tile whose accumulators fit the register budget, at most
  // 64 keys (FlashAttention 2's choice for dk <= 128 on sm_80).
  int64_t tile = 64;
  while (tile > 16 && s.d_k / 2 + tile / 2 > kAccumulatorBudget)
    tile /= 2;
  // 4 warps: 64 rows keep a T_q of a few hundred in many blocks, and a
  // decode row block (T_q * group rows) wastes fewer of its rows.
  space.defaults = {{"key_tile", tile}, {"warps", 4}};
  // sm_90a: FlashAttention 3's tiles, two consumer warpgroups of 64 rows
  // and 128-key tiles up to dk 128; one warpgroup with 64 keys for dk 256,
  // whose accumulators need its 255 registers.
  if (s.target.cudaArchSpecific)
    space.defaults = s.d_k <= 128
                         ? ScheduleParams{{"key_tile", 128}, {"warps", 8}}
                         : ScheduleParams{{"key_tile", 64}, {"warps", 4}};
  const int64_t dk = s.d_k;
  const int64_t sharedLimit =
      cudaSharedMemoryPerBlockOptin(s.target.cudaCapability);
  const std::vector<ParamDecl> decls = space.params;
  space.violation = [decls, dk, sharedLimit, s](const ScheduleParams &p) {
    std::string why = declaredViolation(decls, p);
    if (!why.empty())
      return why;
    const TensorCoreTiles t = tensorCoreTiles(s, p);
    if (t.wgmma && t.keyTile < 32)
      return std::string("key_tile ") + std::to_string(t.keyTile) +
             ": the sm_90a kernel's smallest wgmma tile is 32 keys";
    const int64_t budget = accumulatorBudget(t);
    if (dk / 2 + t.keyTile / 2 > budget)
      return "key_tile " + std::to_string(t.keyTile) + " with d_k " +
             std::to_string(dk) + " and " + std::to_string(t.warps) +
             " warps holds " + std::to_string(dk / 2 + t.keyTile / 2) +
             " f32 accumulators a thread (at most " + std::to_string(budget) +
             " fit in registers)";
    if (t.sharedBytes(dk) > sharedLimit)
      return "the tiles need " + std::to_string(t.sharedBytes(dk)) +
             " bytes of shared memory a block; the target allows " +
             std::to_string(sharedLimit);
    return std::string();
  };
  return space;
}

} // namespace mhagen::cuda
