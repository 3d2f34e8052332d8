#include "mhagen/support/Process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace mhagen {

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
    if (memoryLimitBytes) {
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

TempDir::TempDir(const std::string &prefix) {
  const char *base = std::getenv("TMPDIR");
  std::string tmpl =
      std::string(base && *base ? base : "/tmp") + "/" + prefix + ".XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data()))
    throw std::runtime_error("cannot create a temporary directory in " +
                             std::string(base ? base : "/tmp") + ": " +
                             std::strerror(errno));
  path_ = buf.data();
}

TempDir::~TempDir() {
  if (keep_)
    return;
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
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
