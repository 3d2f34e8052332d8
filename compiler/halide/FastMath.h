// Vector math the attention algorithm needs and Halide 14 does not do well:
// exp of a non-positive score at the accuracy its consumer needs, and tanh
// as a rational function. Each is a plain Halide Expr, so it vectorises
// with the stage that calls it.
#ifndef MHAGEN_HALIDE_FASTMATH_H
#define MHAGEN_HALIDE_FASTMATH_H

#include <Halide.h>

namespace mhagen::hl {

/// How accurate an exp must be: to f32 (it feeds f32 sums), or to what a
/// bf16 rounding of the result keeps (8 significant bits).
enum class ExpAccuracy { F32, Bf16 };

/// A bound on the relative error of expNonPositive on [-80, 0] against
/// std::exp in double (test/halide/FastMathTest.cpp checks it on every
/// 37th f32 of that range and its edges: 3.9e-6 and 7.9e-5 measured).
double expMaxRelativeError(ExpAccuracy accuracy);

/// exp(x) for x <= 0, and 0 below -80 (a softmax term that small is below
/// f32's precision of the row's largest term, 1). Range reduction to
/// 2^k * 2^f with f in [-0.5, 0.5]; a minimax polynomial for 2^f of
/// degree 5 (F32) or 3 (Bf16).
Halide::Expr expNonPositive(const Halide::Expr &x,
                            ExpAccuracy accuracy = ExpAccuracy::F32);

/// tanh(x) in f32 as a rational function (max error 3.3e-7 absolute).
Halide::Expr tanhRational(const Halide::Expr &x);

} // namespace mhagen::hl

#endif
