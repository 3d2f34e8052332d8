#include "mhagen/support/Process.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stdexcept>

namespace mhagen {

// AddressSanitizer reserves terabytes of address space for its shadow
// memory, so an address-space limit would stop a sanitized child from
// starting (scripts/sanitize.sh); the limit is skipped there.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif
#else
constexpr bool kAddressSanitizer = false;
#endif

ProcessResult runProcess(const std::vector<std::string> &argv,
                         double timeoutSeconds, size_t memoryLimitBytes) {
  ProcessResult r;
  if (argv.empty())
    return r;
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0) {
    r.output = std::string("pipe: ") + std::strerror(errno);
    return r;
  }
  std::vector<char *> args;
  for (const auto &a : argv)
    args.push_back(const_cast<char *>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = fork();
  if (pid < 0) {
    r.output = std::string("fork: ") + std::strerror(errno);
    close(pipefd[0]);
    close(pipefd[1]);
    return r;
  }
  if (pid == 0) {
    setpgid(0, 0); // its own group, so a timeout kills its children too
    // A parent killed with SIGKILL cannot clean up after its children:
    // they get SIGTERM then, which removes their temporary directories.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (memoryLimitBytes && !kAddressSanitizer) {
      rlimit lim{memoryLimitBytes, memoryLimitBytes};
      setrlimit(RLIMIT_AS, &lim);
    }
    dup2(pipefd[1], 1);
    dup2(pipefd[1], 2);
    execvp(args[0], args.data());
    std::fprintf(stderr, "cannot run %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  close(pipefd[1]);
  auto start = std::chrono::steady_clock::now();
  char buf[4096];
  while (true) {
    int waitMs = -1;
    if (timeoutSeconds > 0) {
      double left =
          timeoutSeconds - std::chrono::duration<double>(
                               std::chrono::steady_clock::now() - start)
                               .count();
      if (left <= 0) {
        kill(-pid, SIGKILL);
        r.timedOut = true;
        break;
      }
      waitMs = static_cast<int>(left * 1000) + 1;
    }
    pollfd pfd{pipefd[0], POLLIN, 0};
    int pr = poll(&pfd, 1, waitMs);
    if (pr < 0 && errno == EINTR)
      continue;
    if (pr == 0)
      continue; // timeout re-checked above
    ssize_t n = read(pipefd[0], buf, sizeof buf);
    if (n > 0) {
      if (r.output.size() < (1 << 22))
        r.output.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    break; // EOF
  }
  close(pipefd[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status))
    r.exitCode = WEXITSTATUS(status);
  else if (WIFSIGNALED(status))
    r.exitCode = 128 + WTERMSIG(status);
  return r;
}

namespace {

// Live temporary directories, so a SIGTERM/SIGINT/SIGHUP can remove them
// before the process dies (see removeTempDirsOnSignals). Fixed-size
// storage: the handler must not allocate.
constexpr int kMaxLiveDirs = 64;
constexpr size_t kMaxPath = 512;
char gLiveDirs[kMaxLiveDirs][kMaxPath];
// The process that made each directory: a forked child inherits this
// table but must never remove its parent's directories.
pid_t gLiveOwner[kMaxLiveDirs];
std::mutex gLiveMu;

void track(const std::string &path) {
  if (path.size() >= kMaxPath)
    return;
  std::lock_guard<std::mutex> lock(gLiveMu);
  for (int i = 0; i < kMaxLiveDirs; ++i)
    if (!gLiveDirs[i][0]) {
      std::memcpy(gLiveDirs[i], path.c_str(), path.size() + 1);
      gLiveOwner[i] = getpid();
      return;
    }
}

void untrack(const std::string &path) {
  std::lock_guard<std::mutex> lock(gLiveMu);
  for (auto &slot : gLiveDirs)
    if (path == slot)
      slot[0] = '\0';
}

// Removes a directory tree with system calls only (used from the signal
// handler, where std::filesystem may allocate).
void removeTree(const char *path, int depth) {
  if (depth > 16)
    return;
  if (DIR *d = opendir(path)) {
    while (dirent *e = readdir(d)) {
      if (!std::strcmp(e->d_name, ".") || !std::strcmp(e->d_name, ".."))
        continue;
      char child[kMaxPath];
      int n = std::snprintf(child, sizeof child, "%s/%s", path, e->d_name);
      if (n <= 0 || static_cast<size_t>(n) >= sizeof child)
        continue;
      if (e->d_type == DT_DIR)
        removeTree(child, depth + 1);
      else
        unlink(child);
    }
    closedir(d);
  }
  rmdir(path);
}

void onTerminatingSignal(int sig) {
  const pid_t self = getpid();
  for (int i = 0; i < kMaxLiveDirs; ++i)
    if (gLiveDirs[i][0] && gLiveOwner[i] == self)
      removeTree(gLiveDirs[i], 0);
  signal(sig, SIG_DFL);
  raise(sig);
}

std::string tempBase() {
  const char *base = std::getenv("TMPDIR");
  return base && *base ? base : "/tmp";
}

} // namespace

TempDir::TempDir(const std::string &prefix) {
  // The owner's pid is in the name, so a later run can tell a directory
  // left behind by a killed process (removeStaleTempDirs).
  std::string tmpl =
      tempBase() + "/" + prefix + "." + std::to_string(getpid()) + ".XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data()))
    throw std::runtime_error("cannot create a temporary directory in " +
                             tempBase() + ": " + std::strerror(errno));
  path_ = buf.data();
  track(path_);
}

TempDir::~TempDir() {
  untrack(path_);
  if (keep_)
    return;
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void TempDir::keep() {
  keep_ = true;
  untrack(path_);
}

void removeTempDirsOnSignals() {
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_handler = onTerminatingSignal;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, nullptr);
  }
}

int removeStaleTempDirs() {
  int removed = 0;
  std::error_code ec;
  for (const auto &e : std::filesystem::directory_iterator(tempBase(), ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("mhagen-", 0) != 0 || !e.is_directory(ec))
      continue;
    // mhagen-<what>.<pid>.<XXXXXX>
    size_t dot = name.find('.');
    size_t dot2 = dot == std::string::npos ? dot : name.find('.', dot + 1);
    if (dot2 == std::string::npos)
      continue;
    const std::string pidText = name.substr(dot + 1, dot2 - dot - 1);
    if (pidText.empty() ||
        pidText.find_first_not_of("0123456789") != std::string::npos)
      continue;
    pid_t pid = static_cast<pid_t>(std::stol(pidText));
    if (pid == getpid() || kill(pid, 0) == 0 || errno != ESRCH)
      continue; // its owner still runs (or is not ours to judge)
    std::filesystem::remove_all(e.path(), ec);
    removed += ec ? 0 : 1;
  }
  return removed;
}

std::string readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw std::runtime_error("cannot read " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<char> readBinaryFile(const std::string &path) {
  std::string s = readFile(path);
  return std::vector<char>(s.begin(), s.end());
}

void writeFile(const std::string &path, const std::string &data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out)
    throw std::runtime_error("cannot write " + path);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  out.close();
  if (!out)
    throw std::runtime_error("error writing " + path);
}

void writeFileAtomic(const std::string &path, const std::string &data) {
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  writeFile(tmp, data);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    std::remove(tmp.c_str());
    throw std::runtime_error("cannot rename " + tmp + " to " + path + ": " +
                             std::strerror(e));
  }
}

bool fileExists(const std::string &path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

std::string executableDir() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec)
    return ".";
  return p.parent_path().string();
}

std::string commandLine(const std::vector<std::string> &argv) {
  std::string s;
  for (const auto &a : argv) {
    if (!s.empty())
      s += ' ';
    bool plain =
        !a.empty() && a.find_first_of(" \t'\"\\$") == std::string::npos;
    s += plain ? a : "'" + a + "'";
  }
  return s;
}

} // namespace mhagen
