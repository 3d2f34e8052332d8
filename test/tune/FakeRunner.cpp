// Stands in for `mhagen run` in tuner tests: same arguments, same JSON, but
// the "time" is a fixed function of the schedule (a landscape with one best
// point), so search behaviour is deterministic and fast. Honors
// --inject-fault like the real command.
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <thread>

int main(int argc, char **argv) {
  std::map<std::string, long> p;
  std::string fault;
  for (int i = 1; i + 1 < argc; ++i) {
    std::string a = argv[i];
    if (a == "--schedule") {
      std::stringstream ss(argv[i + 1]);
      for (std::string kv; std::getline(ss, kv, ',');) {
        size_t eq = kv.find('=');
        p[kv.substr(0, eq)] = std::atol(kv.c_str() + eq + 1);
      }
    }
    if (a == "--inject-fault")
      fault = argv[i + 1];
  }
  // Durability tests slow each trial down so that kills land mid-run.
  if (const char *ms = std::getenv("FAKE_RUNNER_SLEEP_MS"))
    std::this_thread::sleep_for(std::chrono::milliseconds(std::atol(ms)));
  if (fault == "crash")
    std::raise(SIGSEGV);
  if (fault == "hang")
    for (;;)
      std::this_thread::sleep_for(std::chrono::seconds(1));
  // Best at key_tile 64, tokens_per_tile 16, s_keys 8, pv_chans 8.
  double ms = 10.0 + std::fabs(std::log2(p["key_tile"] / 64.0)) * 3 +
              std::fabs(std::log2(p["tokens_per_tile"] / 16.0)) * 2 +
              std::fabs(p["s_keys"] - 8.0) * 0.5 +
              std::fabs(p["pv_chans"] - 8.0) * 0.5 +
              (p["stage_kv"] ? 0.0 : 1.0);
  std::printf("{\n  \"variant\": \"fake\",\n  \"median_ms\": %.6f,\n"
              "  \"min_ms\": %.6f,\n  \"max_abs_err\": %g,\n"
              "  \"within_tolerance\": %s\n}\n",
              ms, ms * 0.98, fault == "wrong" ? 1.0 : 1e-7,
              fault == "wrong" ? "false" : "true");
  return fault == "wrong" ? 1 : 0;
}
