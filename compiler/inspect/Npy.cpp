// .npy reading and writing (Npy.h). The format: the magic "\x93NUMPY",
// a major and minor version, the header length (2 bytes in version 1, 4
// in versions 2 and 3), then a Python dict literal
// {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), } padded with
// spaces to a multiple of 64 bytes, then the data.
#include "mhagen/inspect/Npy.h"

#include <cctype>
#include <cstring>
#include <fstream>
#include <sstream>

namespace mhagen::inspect {

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
// A header longer than this is not an array mhagen wrote or reads.
constexpr uint32_t kMaxHeader = 1u << 16;
constexpr int kMaxRank = 8;
constexpr int64_t kMaxElements = int64_t(1) << 32;

// A tiny parser of the header's dict literal.
class HeaderParser {
public:
  HeaderParser(const std::string &text, const std::string &what)
      : s_(text), what_(what) {}

  void parse(std::string &descr, bool &fortran, std::vector<int64_t> &shape) {
    bool haveDescr = false, haveFortran = false, haveShape = false;
    expect('{');
    while (true) {
      skip();
      if (peek() == '}') {
        ++i_;
        break;
      }
      const std::string key = quoted();
      expect(':');
      if (key == "descr") {
        descr = quoted();
        haveDescr = true;
      } else if (key == "fortran_order") {
        fortran = boolean();
        haveFortran = true;
      } else if (key == "shape") {
        shape = tuple();
        haveShape = true;
      } else {
        fail("unknown header key '" + key + "'");
      }
      skip();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      expect('}');
      break;
    }
    if (!haveDescr || !haveFortran || !haveShape)
      fail("the header needs 'descr', 'fortran_order' and 'shape'");
  }

private:
  const std::string &s_;
  const std::string &what_;
  size_t i_ = 0;

  [[noreturn]] void fail(const std::string &why) {
    throw NpyError(what_ + ": not a .npy array mhagen reads: " + why);
  }
  void skip() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_])))
      ++i_;
  }
  char peek() {
    skip();
    return i_ < s_.size() ? s_[i_] : '\0';
  }
  void expect(char c) {
    if (peek() != c)
      fail(std::string("expected '") + c + "' in the header at byte " +
           std::to_string(i_));
    ++i_;
  }
  std::string quoted() {
    const char q = peek();
    if (q != '\'' && q != '"')
      fail("expected a quoted string in the header at byte " +
           std::to_string(i_));
    ++i_;
    std::string out;
    while (i_ < s_.size() && s_[i_] != q)
      out += s_[i_++];
    if (i_ >= s_.size())
      fail("unterminated string in the header");
    ++i_;
    return out;
  }
  bool boolean() {
    skip();
    if (s_.compare(i_, 4, "True") == 0) {
      i_ += 4;
      return true;
    }
    if (s_.compare(i_, 5, "False") == 0) {
      i_ += 5;
      return false;
    }
    fail("fortran_order must be True or False");
  }
  std::vector<int64_t> tuple() {
    std::vector<int64_t> out;
    expect('(');
    while (true) {
      skip();
      if (peek() == ')') {
        ++i_;
        return out;
      }
      int64_t v = 0;
      size_t digits = 0;
      while (i_ < s_.size() &&
             std::isdigit(static_cast<unsigned char>(s_[i_]))) {
        if (v > (int64_t(1) << 40))
          fail("a dimension of the shape is too large");
        v = v * 10 + (s_[i_++] - '0');
        ++digits;
      }
      if (digits == 0)
        fail("the shape must be a tuple of non-negative integers");
      out.push_back(v);
      if (out.size() > static_cast<size_t>(kMaxRank))
        fail("rank above " + std::to_string(kMaxRank));
      skip();
      if (peek() == ',')
        ++i_;
      else if (peek() != ')')
        fail("expected ',' or ')' in the shape");
    }
  }
};

} // namespace

int64_t NpyArray::elements() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::string NpyArray::shapeText() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

NpyArray parseNpy(const std::string &bytes, const std::string &what) {
  auto fail = [&](const std::string &why) -> NpyError {
    return NpyError(what + ": not a .npy array mhagen reads: " + why);
  };
  if (bytes.size() < kMagicLen + 4 ||
      std::memcmp(bytes.data(), kMagic, kMagicLen) != 0)
    throw fail("no \\x93NUMPY magic at the start");
  const int major = static_cast<unsigned char>(bytes[6]);
  size_t pos = 8;
  uint32_t headerLen = 0;
  if (major == 1) {
    headerLen = static_cast<unsigned char>(bytes[8]) |
                (static_cast<unsigned char>(bytes[9]) << 8);
    pos = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12)
      throw fail("truncated header length");
    for (int b = 3; b >= 0; --b)
      headerLen = (headerLen << 8) | static_cast<unsigned char>(bytes[8 + b]);
    pos = 12;
  } else {
    throw fail("format version " + std::to_string(major) +
               " (versions 1, 2 and 3 are read)");
  }
  if (headerLen > kMaxHeader || pos + headerLen > bytes.size())
    throw fail("header length " + std::to_string(headerLen) +
               " runs past the file or above 64 KiB");
  const std::string header = bytes.substr(pos, headerLen);
  NpyArray a;
  bool fortran = false;
  HeaderParser(header, what).parse(a.dtype, fortran, a.shape);
  if (fortran)
    throw fail("fortran_order is True; write it in C order "
               "(numpy.ascontiguousarray)");
  int width = 0;
  if (a.dtype == "<f4")
    width = 4;
  else if (a.dtype == "<f8")
    width = 8;
  else
    throw fail("dtype '" + a.dtype +
               "'; mhagen reads little-endian float32 ('<f4') and float64 "
               "('<f8')");
  int64_t n = 1;
  for (int64_t d : a.shape) {
    n *= d;
    if (n > kMaxElements)
      throw fail("more than 2^32 elements");
  }
  pos += headerLen;
  const uint64_t need = static_cast<uint64_t>(n) * static_cast<uint64_t>(width);
  if (bytes.size() - pos != need)
    throw fail("shape " + a.shapeText() + " of " + a.dtype + " needs " +
               std::to_string(need) + " data bytes, the file holds " +
               std::to_string(bytes.size() - pos));
  a.data.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    if (width == 4) {
      float v;
      std::memcpy(&v, bytes.data() + pos + 4 * i, 4);
      a.data[static_cast<size_t>(i)] = v;
    } else {
      double v;
      std::memcpy(&v, bytes.data() + pos + 8 * i, 8);
      a.data[static_cast<size_t>(i)] = static_cast<float>(v);
    }
  }
  return a;
}

NpyArray readNpy(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw NpyError(path + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  return parseNpy(ss.str(), path);
}

void writeNpy(const std::string &path, const std::vector<int64_t> &shape,
              const float *values) {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
  int64_t n = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    dict += std::to_string(shape[i]) + (shape.size() == 1 ? "," : "");
    if (i + 1 < shape.size())
      dict += ", ";
    n *= shape[i];
  }
  dict += "), }";
  // Magic, version, length, dict, spaces and a newline: a multiple of 64.
  size_t total = kMagicLen + 4 + dict.size() + 1;
  dict.append((64 - total % 64) % 64, ' ');
  dict += '\n';
  std::ofstream out(path, std::ios::binary);
  if (!out)
    throw NpyError(path + ": cannot write");
  out.write(kMagic, kMagicLen);
  const char version[2] = {1, 0};
  out.write(version, 2);
  const uint16_t len = static_cast<uint16_t>(dict.size());
  const char lenBytes[2] = {static_cast<char>(len & 0xff),
                            static_cast<char>(len >> 8)};
  out.write(lenBytes, 2);
  out << dict;
  out.write(reinterpret_cast<const char *>(values),
            static_cast<std::streamsize>(n * 4));
  if (!out)
    throw NpyError(path + ": write failed");
}

} // namespace mhagen::inspect
