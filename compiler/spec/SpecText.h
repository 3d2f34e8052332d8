// How numbers are read from and written to spec text, shared by the parser,
// the field table and the printers (private to the spec library).
#ifndef MHAGEN_SPEC_SPECTEXT_H
#define MHAGEN_SPEC_SPECTEXT_H

#include <cstdint>
#include <string>

namespace mhagen {

/// The largest token count a spec may name: static sizes, window(W) and
/// sink(N). Kernels index tokens in 32 bits with room for sums of these,
/// and the runtime refuses manifests past it (runtime/src/Manifest.cpp).
constexpr int64_t kMaxTokens = int64_t(1) << 24;
/// The largest head count, head width and model width: every index of
/// every tensor then fits int32 per dimension.
constexpr int64_t kMaxDim = int64_t(1) << 20;

/// A decimal integer >= 0 with an optional '+'; false on anything else or
/// on overflow.
bool parseInt(const std::string &s, int64_t &out);
/// A number as strtod reads it, in range; false otherwise.
bool parseNumber(const std::string &s, double &out);
/// Whether `s` is written as a number, in range or not (1e400 is).
bool numberSyntax(const std::string &s);
/// Kernels hold scale and softcap as f32: a value must be a positive
/// normal f32, or the kernel would compute with infinity or zero.
bool f32Positive(double v);
extern const char *const kF32PositiveRule;

/// The shortest text that reads back as the same double.
std::string formatDouble(double v);
/// Integers as integers (20, not 2e+01), others as formatDouble.
std::string formatValue(double v);
/// A number as part of a C identifier: 30.5 -> 30p5, 1e+30 -> 1e30.
std::string identifierText(const std::string &number);

} // namespace mhagen

#endif
