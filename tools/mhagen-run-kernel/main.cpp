// mhagen-run-kernel LIB.so KEY [--T --Tkv --B --reps --threads --seed]:
// runs one kernel of a shared library on
// seeded data, checks it against the reference, times it, prints JSON.
// It holds no compiler: `mhagen run` uses it for GPU kernels, because an
// OpenCL driver built on another LLVM (PoCL) must not share a process with
// Halide's LLVM 14.
#include "mhagen/harness/RunCheck.h"

#include <CLI/CLI.hpp>

#include <iostream>
#include <sstream>

int main(int argc, char **argv) {
  CLI::App app{"Run one generated kernel against the reference",
               "mhagen-run-kernel"};
  std::string lib, key;
  int64_t B = 1, T = 512, Tkv = 0;
  int reps = 10, threads = 0;
  uint32_t seed = 1;
  app.add_option("library", lib, "kernel library (mhagen --shared)")
      ->required()
      ->check(CLI::ExistingFile);
  app.add_option("kernel", key, "symbol, name or spec hash")->required();
  app.add_option("--B", B)->capture_default_str();
  app.add_option("--T", T)->capture_default_str();
  app.add_option("--Tkv", Tkv);
  app.add_option("--reps", reps)->capture_default_str();
  app.add_option("--threads", threads);
  app.add_option("--seed", seed)->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  nlohmann::ordered_json js;
  try {
    mhagen_library *l = nullptr;
    if (mhagen_load_library(lib.c_str(), &l) != MHAGEN_OK)
      throw std::runtime_error(mhagen_last_error());
    const mhagen_kernel *k = nullptr;
    if (mhagen_find(key.c_str(), &k) != MHAGEN_OK)
      throw std::runtime_error(mhagen_last_error());
    mhagen::RunCheckOptions o;
    o.size = {B, T, Tkv ? Tkv : T};
    o.reps = reps;
    o.threads = threads;
    o.seed = seed;
    std::ostringstream text;
    int rc = mhagen::runAndCheck(k, mhagen::specOfKernel(k), o, js, text);
    js["text"] = text.str();
    std::cout << js.dump(2) << "\n";
    return rc;
  } catch (const std::exception &e) {
    js["error"] = e.what();
    std::cout << js.dump(2) << "\n";
    return 1;
  }
}
