// C++ convenience over the C runtime API (runtime.h): exceptions instead of
// status codes, and a Kernel value type.
#ifndef MHAGEN_RUNTIME_HPP
#define MHAGEN_RUNTIME_HPP

#include "mhagen/runtime.h"

#include <stdexcept>
#include <string>

namespace mhagen {

class RuntimeError : public std::runtime_error {
public:
  RuntimeError(int code, const std::string &what)
      : std::runtime_error(what), code_(code) {}
  int code() const { return code_; }

private:
  int code_;
};

inline void check(int status) {
  if (status != MHAGEN_OK)
    throw RuntimeError(status, mhagen_last_error());
}

class Kernel {
public:
  Kernel() = default;
  explicit Kernel(const mhagen_kernel *k) : k_(k) {}

  /// The best usable variant for a key (symbol, name, hash, spec text).
  static Kernel find(const std::string &key) {
    const mhagen_kernel *k = nullptr;
    check(mhagen_find(key.c_str(), &k));
    return Kernel(k);
  }
  /// A forced variant: target and/or backend ("" = free).
  static Kernel find(const std::string &key, const std::string &target,
                     const std::string &backend = "") {
    const mhagen_kernel *k = nullptr;
    check(mhagen_find_variant(key.c_str(),
                              target.empty() ? nullptr : target.c_str(),
                              backend.empty() ? nullptr : backend.c_str(), &k));
    return Kernel(k);
  }

  void operator()(const mhagen_call_args &args) const {
    check(mhagen_call(k_, &args));
  }
  /// Status-code form, for callers that do not use exceptions.
  int call(const mhagen_call_args &args) const {
    return mhagen_call(k_, &args);
  }

  std::string symbol() const { return mhagen_kernel_symbol(k_); }
  std::string name() const { return mhagen_kernel_name(k_); }
  std::string target() const { return mhagen_kernel_target(k_); }
  std::string backend() const { return mhagen_kernel_backend(k_); }
  std::string manifest() const { return mhagen_kernel_manifest(k_); }
  const mhagen_kernel *handle() const { return k_; }
  explicit operator bool() const { return k_ != nullptr; }

private:
  const mhagen_kernel *k_ = nullptr;
};

inline void loadLibrary(const std::string &path) {
  mhagen_library *lib = nullptr;
  check(mhagen_load_library(path.c_str(), &lib));
}

inline void setNumThreads(int n) { check(mhagen_set_num_threads(n)); }

/// Call arguments with the ABI version filled in.
inline mhagen_call_args makeCallArgs() {
  mhagen_call_args a{};
  a.abi_version = MHAGEN_ABI_VERSION;
  return a;
}

} // namespace mhagen

#endif
