// The integrity digest of a kernel library. mhagen --shared seals every
// library it links: it appends a 32-byte trailer, the 16-byte magic
// "MHAGEN-DIGEST-1\0" and the digest of every byte before the trailer as
// 16 hex digits. Loaders ignore bytes past an ELF file's sections, so the
// library stays a valid shared object. mhagen_load_library recomputes the
// digest before dlopen: a flipped bit, a truncated file or a manifest
// edited after generation is refused before any of the library's code
// runs. The digest detects damage, not tampering: anyone can recompute it
// (that is what a signature is for).
#include "RuntimeInternal.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace mhagen::rt {

namespace {

constexpr char kMagic[16] = "MHAGEN-DIGEST-1"; // 15 characters and a NUL
constexpr size_t kTrailerBytes = 32;

// FNV-1a over 64-bit words (then the tail bytes): every step is a
// bijection of the state, so a change in one word always changes the
// result; 8 bytes per multiply keeps a 20 MB library under ~10 ms.
uint64_t digestOf(const unsigned char *bytes, uint64_t n) {
  uint64_t h = 0xcbf29ce484222325ULL;
  const uint64_t prime = 0x100000001b3ULL;
  uint64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, bytes + i, 8);
    h = (h ^ w) * prime;
  }
  for (; i < n; ++i)
    h = (h ^ bytes[i]) * prime;
  return h;
}

std::string hex16(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

bool hasTrailer(const unsigned char *bytes, uint64_t size) {
  return size >= kTrailerBytes &&
         std::memcmp(bytes + size - kTrailerBytes, kMagic, sizeof kMagic) == 0;
}

} // namespace

std::string checkLibraryDigest(const unsigned char *bytes, uint64_t size) {
  if (!hasTrailer(bytes, size))
    return "it has no mhagen integrity digest (mhagen --shared seals the "
           "libraries it links; one stripped or rewritten afterwards needs "
           "`mhagen seal`)";
  const uint64_t body = size - kTrailerBytes;
  const std::string stored(
      reinterpret_cast<const char *>(bytes + body + sizeof kMagic), 16);
  if (stored != hex16(digestOf(bytes, body)))
    return "its integrity digest does not match its contents (the file was "
           "damaged or changed after mhagen sealed it)";
  return "";
}

} // namespace mhagen::rt

using namespace mhagen::rt;

extern "C" int mhagen_seal_library(const char *path) {
  if (!path)
    return fail(MHAGEN_ERR_INVALID_ARGUMENT, "library path is NULL");
  auto ioError = [&](const std::string &what) {
    return fail(MHAGEN_ERR_LOAD_FAILED, std::string("cannot seal ") + path +
                                            ": " + what + ": " +
                                            std::strerror(errno));
  };
  const int fd = open(path, O_RDWR | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    return ioError("open");
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  struct stat st;
  if (fstat(fd, &st) != 0)
    return ioError("stat");
  if (!S_ISREG(st.st_mode))
    return fail(MHAGEN_ERR_LOAD_FAILED,
                std::string("cannot seal ") + path + ": not a regular file");
  std::vector<unsigned char> bytes(static_cast<size_t>(st.st_size));
  for (size_t got = 0; got < bytes.size();) {
    const ssize_t n = pread(fd, bytes.data() + got, bytes.size() - got,
                            static_cast<off_t>(got));
    if (n <= 0)
      return ioError("read");
    got += static_cast<size_t>(n);
  }
  // Sealing again replaces the old trailer.
  uint64_t body = bytes.size();
  if (hasTrailer(bytes.data(), body))
    body -= kTrailerBytes;
  char trailer[kTrailerBytes];
  std::memcpy(trailer, kMagic, sizeof kMagic);
  std::memcpy(trailer + sizeof kMagic, hex16(digestOf(bytes.data(), body)).data(),
              16);
  if (ftruncate(fd, static_cast<off_t>(body)) != 0)
    return ioError("truncate");
  if (pwrite(fd, trailer, sizeof trailer, static_cast<off_t>(body)) !=
      static_cast<ssize_t>(sizeof trailer))
    return ioError("write");
  clearError();
  return MHAGEN_OK;
}
