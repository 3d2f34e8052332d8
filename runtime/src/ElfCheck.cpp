// Checks a kernel library file before dlopen maps it. A truncated or
// malformed ELF makes dlopen fault (SIGBUS when a segment lies past the end
// of the file), so the file is read with libelf first: a regular file (a
// FIFO would block the open), an ELF object of this machine's class and
// architecture, a shared object, every loadable segment inside the file,
// a dynamic section whose tables lie inside it (ElfDynamicCheck.cpp), and
// the integrity digest mhagen sealed it with (LibraryDigest.cpp).
#include "RuntimeInternal.h"

#include <gelf.h>
#include <libelf.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace mhagen::rt {

namespace {

#if defined(__x86_64__)
constexpr int kMachine = EM_X86_64;
constexpr const char *kMachineName = "x86-64";
constexpr const char *kMultiarchLib = "/lib/x86_64-linux-gnu";
constexpr const char *kMultiarchUsrLib = "/usr/lib/x86_64-linux-gnu";
#elif defined(__aarch64__)
constexpr int kMachine = EM_AARCH64;
constexpr const char *kMachineName = "AArch64";
constexpr const char *kMultiarchLib = "/lib/aarch64-linux-gnu";
constexpr const char *kMultiarchUsrLib = "/usr/lib/aarch64-linux-gnu";
#else
constexpr int kMachine = -1;
constexpr const char *kMachineName = "this machine";
constexpr const char *kMultiarchLib = "/lib";
constexpr const char *kMultiarchUsrLib = "/usr/lib";
#endif

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0)
      close(fd);
  }
};

struct ElfHandle {
  Elf *e = nullptr;
  ~ElfHandle() {
    if (e)
      elf_end(e);
  }
};

// Where dlopen would find a bare file name: $LD_LIBRARY_PATH, then the
// system library directories. "" if none holds it (dlopen may still find
// it through ld.so.cache; such a system library is not checked here).
std::string searchLikeDlopen(const std::string &name) {
  std::vector<std::string> dirs;
  if (const char *env = std::getenv("LD_LIBRARY_PATH")) {
    std::string list = env;
    for (size_t at = 0; at <= list.size();) {
      size_t colon = list.find(':', at);
      if (colon == std::string::npos)
        colon = list.size();
      if (colon > at)
        dirs.push_back(list.substr(at, colon - at));
      at = colon + 1;
    }
  }
  for (const char *d : {kMultiarchLib, kMultiarchUsrLib, "/lib64", "/usr/lib64",
                        "/lib", "/usr/lib"})
    dirs.push_back(d);
  for (const std::string &d : dirs) {
    std::string candidate = d + "/" + name;
    if (access(candidate.c_str(), F_OK) == 0)
      return candidate;
  }
  return "";
}

} // namespace

int checkElfLibrary(const char *path) {
  std::string p = path;
  if (p.find('/') == std::string::npos) { // searched, as dlopen does
    p = searchLikeDlopen(p);
    if (p.empty())
      return MHAGEN_OK; // let dlopen search (and fail) in its own way
  }
  auto refuse = [&](const std::string &why) {
    return fail(MHAGEN_ERR_LOAD_FAILED,
                "cannot load " + p + ": " + why + "; refused before dlopen");
  };
  if (elf_version(EV_CURRENT) == EV_NONE)
    return refuse(std::string("libelf: ") + elf_errmsg(-1));
  Fd fd;
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
  // writer; it is then refused as not a regular file.
  fd.fd = open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd.fd < 0)
    return fail(MHAGEN_ERR_LOAD_FAILED,
                "cannot open " + p + ": " + std::strerror(errno));
  struct stat st;
  if (fstat(fd.fd, &st) != 0 || !S_ISREG(st.st_mode))
    return refuse("not a regular file");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  ElfHandle elf;
  elf.e = elf_begin(fd.fd, ELF_C_READ, nullptr);
  if (!elf.e || elf_kind(elf.e) != ELF_K_ELF)
    return refuse("not an ELF file");
  GElf_Ehdr eh;
  if (!gelf_getehdr(elf.e, &eh))
    return refuse(std::string("unreadable ELF header (") + elf_errmsg(-1) +
                  ")");
  if (gelf_getclass(elf.e) != (sizeof(void *) == 8 ? ELFCLASS64 : ELFCLASS32))
    return refuse("ELF class does not match this process");
  if (kMachine >= 0 && eh.e_machine != kMachine)
    return refuse("built for machine " + std::to_string(eh.e_machine) +
                  ", not " + kMachineName);
  if (eh.e_type != ET_DYN)
    return refuse("not a shared object (ELF type " + std::to_string(eh.e_type) +
                  ")");
  size_t phnum = 0;
  if (elf_getphdrnum(elf.e, &phnum) != 0 || phnum == 0)
    return refuse("no program headers");
  if (eh.e_phoff > size ||
      static_cast<uint64_t>(phnum) * eh.e_phentsize > size - eh.e_phoff)
    return refuse("program headers lie past the end of the file");
  bool loadable = false;
  for (size_t i = 0; i < phnum; ++i) {
    GElf_Phdr ph;
    if (!gelf_getphdr(elf.e, static_cast<int>(i), &ph))
      return refuse("unreadable program header " + std::to_string(i));
    if (ph.p_type != PT_LOAD && ph.p_type != PT_DYNAMIC)
      continue;
    loadable = loadable || ph.p_type == PT_LOAD;
    if (ph.p_offset > size || ph.p_filesz > size - ph.p_offset)
      return refuse("segment " + std::to_string(i) + " (offset " +
                    std::to_string(ph.p_offset) + ", " +
                    std::to_string(ph.p_filesz) +
                    " bytes) lies past the end of the " + std::to_string(size) +
                    "-byte file (truncated?)");
    if (ph.p_filesz > ph.p_memsz)
      return refuse("segment " + std::to_string(i) +
                    " is larger in the file than in memory");
  }
  if (!loadable)
    return refuse("no loadable segment");
  size_t rawSize = 0;
  const char *raw = elf_rawfile(elf.e, &rawSize);
  if (!raw || rawSize != size)
    return refuse("unreadable file contents");
  const auto *bytes = reinterpret_cast<const unsigned char *>(raw);
  if (std::string why = checkElfDynamic(bytes, size); !why.empty())
    return refuse(why);
  // Last: the structure checks above name what is wrong where they can;
  // the digest catches every other change (code, manifest, one bit).
  if (std::string why = checkLibraryDigest(bytes, size); !why.empty())
    return refuse(why);
  return MHAGEN_OK;
}

} // namespace mhagen::rt
