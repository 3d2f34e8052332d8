// The score modifiers of docs/design.md §2 ("Score modifiers") that are
// facts rather than code: the standard ALiBi slopes. Both backends embed
// them and the reference reads them from here, so all three agree.
#ifndef MHAGEN_SPEC_SCOREMODIFIERS_H
#define MHAGEN_SPEC_SCOREMODIFIERS_H

#include <cstdint>
#include <vector>

namespace mhagen {

/// The ALiBi slopes of Press et al. (and BLOOM's build_alibi_tensor) for
/// h heads: with n the largest power of two <= h, head k < n gets
/// 2^(-8 (k+1) / n); the other h - n heads take every other slope of
/// 2n heads, 2^(-4 (2m+1) / n) for m = 0, 1, ...
std::vector<double> standardAlibiSlopes(int64_t h);

} // namespace mhagen

#endif
