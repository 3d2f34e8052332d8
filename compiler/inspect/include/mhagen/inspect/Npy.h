// NumPy .npy arrays, read and written by mhagen itself (the `heads`
// command's inputs and outputs): little-endian f32 or f64, C order, any
// rank. Everything else is refused with a message naming the file and
// what is wrong -- a header is bounded and parsed field by field, and the
// data must fill the file exactly.
#ifndef MHAGEN_INSPECT_NPY_H
#define MHAGEN_INSPECT_NPY_H

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace mhagen::inspect {

struct NpyError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// An array read from a .npy file, converted to f32.
struct NpyArray {
  std::vector<int64_t> shape; ///< outermost first; empty for a scalar
  std::vector<float> data;    ///< C order
  std::string dtype;          ///< as stored: "<f4" or "<f8"
  int64_t elements() const;
  /// "[8, 64]"
  std::string shapeText() const;
};

/// Reads `path`; throws NpyError ("x.npy: ...") for anything but a
/// version 1-3 .npy of '<f4'/'<f8' in C order whose data fills the file.
NpyArray readNpy(const std::string &path);
/// The same from bytes already in memory (`what` names them in errors).
NpyArray parseNpy(const std::string &bytes, const std::string &what);

/// Writes values as a version 1.0 '<f4' C-order array; throws NpyError.
void writeNpy(const std::string &path, const std::vector<int64_t> &shape,
              const float *values);

} // namespace mhagen::inspect

#endif
