// Small process and file helpers the compiler stages share: running a tool
// (llc, cc, ld) without a shell, temporary directories, whole-file I/O and
// atomic writes (write to a temporary name, rename on success).
#ifndef MHAGEN_SUPPORT_PROCESS_H
#define MHAGEN_SUPPORT_PROCESS_H

#include <string>
#include <vector>

namespace mhagen {

struct ProcessResult {
  int exitCode = -1;  ///< -1 if it could not start; 128+N if killed by N
  std::string output; ///< stdout and stderr together
  bool timedOut = false;
};

/// Runs argv[0] (searched in PATH) with the arguments; no shell. Kills it
/// after timeoutSeconds (0 = no limit); limits its address space to
/// memoryLimitBytes (0 = no limit), so a runaway child fails to allocate
/// instead of exhausting the machine.
ProcessResult runProcess(const std::vector<std::string> &argv,
                         double timeoutSeconds = 0,
                         size_t memoryLimitBytes = 0);

/// Makes SIGTERM, SIGINT and SIGHUP remove every live TempDir before the
/// process dies of the signal (long-running commands: tune, run).
void removeTempDirsOnSignals();
/// Removes mhagen's temporary directories whose owning process is gone
/// (left by a kill -9); returns how many. TempDir names carry the pid.
int removeStaleTempDirs();

/// A directory removed (recursively) when this object dies.
class TempDir {
public:
  explicit TempDir(const std::string &prefix = "mhagen");
  ~TempDir();
  TempDir(const TempDir &) = delete;
  TempDir &operator=(const TempDir &) = delete;
  const std::string &path() const { return path_; }
  std::string file(const std::string &name) const { return path_ + "/" + name; }
  /// Keep the directory (for debugging); it is then not removed.
  void keep();

private:
  std::string path_;
  bool keep_ = false;
};

std::string readFile(const std::string &path);             ///< throws on error
std::vector<char> readBinaryFile(const std::string &path); ///< throws
void writeFile(const std::string &path, const std::string &data); ///< throws
/// Writes to path + ".tmp.<pid>" and renames over path: readers never see
/// a partial file.
void writeFileAtomic(const std::string &path, const std::string &data);
bool fileExists(const std::string &path);
/// Directory of the running executable (from /proc/self/exe).
std::string executableDir();
/// Quotes argv for display in error messages.
std::string commandLine(const std::vector<std::string> &argv);

} // namespace mhagen

#endif
