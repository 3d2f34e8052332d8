// Real generated kernels through the runtime: dlopen of a shared library
// with several target variants, best-variant choice, forced variants, the
// missing-feature refusal, and a many-thread stress test that checks every
// concurrent result against a single-threaded run.
//   mhagen_library_tests LIB.so
#include "mhagen/harness/KernelHarness.h"
#include "mhagen/manifest.hpp"
#include "mhagen/runtime.h"
#include "mhagen/spec/SpecParser.h"
#include "mhagen/support/Process.h"

#include <gtest/gtest.h>

#include <elf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <set>
#include <thread>

using namespace mhagen;

static const char *gLibPath = nullptr;
static const char *gWrongAbiLibPath = nullptr;

static AttentionSpec specOf(const mhagen_kernel *k) {
  KernelManifest m;
  std::string err;
  EXPECT_TRUE(KernelManifest::fromJson(mhagen_kernel_manifest(k), m, &err));
  return parseSpecs(m.spec.canonical, m.symbol).at(0);
}

class Library : public testing::Test {
protected:
  static void SetUpTestSuite() {
    ASSERT_EQ(mhagen_load_library(gLibPath, &lib_), MHAGEN_OK)
        << mhagen_last_error();
  }
  static mhagen_library *lib_;
};
mhagen_library *Library::lib_ = nullptr;

TEST_F(Library, HoldsEveryVariant) {
  std::set<std::string> symbols;
  for (int i = 0; i < mhagen_library_kernel_count(lib_); ++i)
    symbols.insert(mhagen_kernel_symbol(mhagen_library_kernel(lib_, i)));
  for (const char *s :
       {"rt_variants_avx2", "rt_variants_avx512", "rt_variants_avx512_bf16",
        "rt_layer_avx2", "rt_layer_avx512", "rt_layer_avx512_bf16"})
    EXPECT_TRUE(symbols.count(s)) << s;
  // Loading the same library again is harmless.
  mhagen_library *again = nullptr;
  EXPECT_EQ(mhagen_load_library(gLibPath, &again), MHAGEN_OK);
}

TEST_F(Library, BestVariantForcedVariantAndRefusal) {
  const mhagen_kernel *k = nullptr;
  ASSERT_EQ(mhagen_find("rt_variants", &k), MHAGEN_OK) << mhagen_last_error();
  const bool bf16Cpu = mhagen_cpu_has("avx512_bf16");
  const bool avx512Cpu = mhagen_cpu_has("avx512f");
  EXPECT_STREQ(mhagen_kernel_target(k), bf16Cpu     ? "avx512_bf16"
                                        : avx512Cpu ? "avx512"
                                                    : "avx2");
  // Every usable variant gives the reference answer.
  for (const char *target : {"avx2", "avx512", "avx512_bf16"}) {
    const mhagen_kernel *v = nullptr;
    int rc = mhagen_find_variant("rt_variants", target, nullptr, &v);
    if (rc == MHAGEN_ERR_UNSUPPORTED_CPU)
      continue; // this machine cannot run it
    ASSERT_EQ(rc, MHAGEN_OK) << mhagen_last_error();
    Problem p(specOf(v), {3, 50, 77}, {});
    mhagen_call_args a = p.args();
    ASSERT_EQ(mhagen_call(v, &a), MHAGEN_OK) << mhagen_last_error();
    EXPECT_TRUE(p.check({}).ok()) << target;
  }
  // A CPU with AVX2 only: the avx2 variant is chosen, the others refused.
  mhagen_override_cpu_features("sse41 avx avx2 fma f16c");
  ASSERT_EQ(mhagen_find("rt_variants", &k), MHAGEN_OK);
  EXPECT_STREQ(mhagen_kernel_target(k), "avx2");
  const mhagen_kernel *forced = nullptr;
  EXPECT_EQ(mhagen_find_variant("rt_variants", "avx512_bf16", nullptr, &forced),
            MHAGEN_ERR_UNSUPPORTED_CPU);
  EXPECT_NE(std::strstr(mhagen_last_error(), "avx512_bf16"), nullptr);
  mhagen_override_cpu_features(nullptr);
  // Even a direct call to a variant the CPU lacks is checked. The kernel is
  // taken from the library's list, which holds every variant whatever this
  // machine runs.
  forced = nullptr;
  for (int i = 0; i < mhagen_library_kernel_count(lib_); ++i)
    if (std::strcmp(mhagen_kernel_symbol(mhagen_library_kernel(lib_, i)),
                    "rt_variants_avx512") == 0)
      forced = mhagen_library_kernel(lib_, i);
  ASSERT_NE(forced, nullptr);
  const mhagen_kernel *found = nullptr;
  EXPECT_EQ(mhagen_find_variant("rt_variants", "avx512", nullptr, &found),
            avx512Cpu ? MHAGEN_OK : MHAGEN_ERR_UNSUPPORTED_CPU);
  mhagen_override_cpu_features("sse41 avx avx2 fma f16c");
  Problem p(specOf(forced), {1, 4, 4}, {});
  mhagen_call_args a = p.args();
  EXPECT_EQ(mhagen_call(forced, &a), MHAGEN_ERR_UNSUPPORTED_CPU);
  EXPECT_NE(std::strstr(mhagen_last_error(), "avx512"), nullptr)
      << mhagen_last_error();
  mhagen_override_cpu_features(nullptr);
}

TEST_F(Library, ManyThreadsCallingConcurrently) {
  const mhagen_kernel *k = nullptr;
  ASSERT_EQ(mhagen_find("rt_layer", &k), MHAGEN_OK);
  AttentionSpec spec = specOf(k);
  // Expected outputs, one problem per thread, computed one at a time.
  const int kThreads = 12;
  std::vector<std::unique_ptr<Problem>> problems;
  std::vector<std::vector<float>> expected;
  for (int t = 0; t < kThreads; ++t) {
    ProblemOptions po;
    po.seed = 100 + t;
    problems.push_back(std::make_unique<Problem>(
        spec, ProblemSize{1 + t % 2, 17 + t, 17 + t}, po));
    mhagen_call_args a = problems.back()->args();
    ASSERT_EQ(mhagen_call(k, &a), MHAGEN_OK) << mhagen_last_error();
    ASSERT_TRUE(problems.back()->check({}).ok());
    expected.push_back(problems.back()->output());
  }
  std::atomic<int> mismatches{0}, failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 20; ++rep) {
        problems[t]->clearOutput();
        mhagen_call_args a = problems[t]->args();
        if (mhagen_call(k, &a) != MHAGEN_OK)
          ++failures;
        else if (problems[t]->output() != expected[t])
          ++mismatches;
      }
    });
  for (auto &th : threads)
    th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(mismatches.load(), 0);
}

// The pool really has the size asked for: lowering the count stops the
// extra workers (Halide's own pool would keep them busy), raising it starts
// them. Counted as threads of this process.
static int processThreads() {
  int n = 0;
  std::error_code ec;
  for (auto &e : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    (void)e;
    ++n;
  }
  return n;
}

TEST_F(Library, ThreadCountChangesTakeEffect) {
  const mhagen_kernel *k = nullptr;
  ASSERT_EQ(mhagen_find("rt_layer", &k), MHAGEN_OK);
  Problem p(specOf(k), {2, 40, 40}, {});
  mhagen_call_args a = p.args();
  ASSERT_EQ(mhagen_set_num_threads(1), MHAGEN_OK);
  ASSERT_EQ(mhagen_call(k, &a), MHAGEN_OK);
  const int base = processThreads(); // no pool workers with one thread
  ASSERT_EQ(mhagen_set_num_threads(4), MHAGEN_OK);
  ASSERT_EQ(mhagen_call(k, &a), MHAGEN_OK) << mhagen_last_error();
  EXPECT_EQ(processThreads(), base + 3);
  ASSERT_EQ(mhagen_set_num_threads(1), MHAGEN_OK);
  ASSERT_EQ(mhagen_call(k, &a), MHAGEN_OK);
  EXPECT_EQ(processThreads(), base);
  EXPECT_TRUE(p.check({}).ok());
  ASSERT_EQ(mhagen_set_num_threads(2), MHAGEN_OK);
}

// Libraries that must be refused before anything in them runs.
namespace {
std::string copyTruncated(const std::string &from, const std::string &to,
                          double fraction) {
  namespace fs = std::filesystem;
  fs::copy_file(from, to, fs::copy_options::overwrite_existing);
  auto size = fs::file_size(to);
  fs::resize_file(to, static_cast<uintmax_t>(size * fraction));
  return to;
}
} // namespace

TEST(HostileLibrary, TruncatedElfIsRefusedBeforeDlopen) {
  const std::string dir = testing::TempDir();
  for (double fraction : {0.9, 0.5, 0.1, 0.001}) {
    std::string p = copyTruncated(
        gLibPath, dir + "/truncated_" + std::to_string(fraction) + ".so",
        fraction);
    mhagen_library *lib = nullptr;
    EXPECT_EQ(mhagen_load_library(p.c_str(), &lib), MHAGEN_ERR_LOAD_FAILED)
        << fraction;
    EXPECT_EQ(lib, nullptr);
    EXPECT_NE(std::strstr(mhagen_last_error(), "refused before dlopen"),
              nullptr)
        << mhagen_last_error();
  }
}

TEST(HostileLibrary, NotAnElfFileIsRefused) {
  const std::string p = testing::TempDir() + "/not_elf.so";
  FILE *f = std::fopen(p.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("this is not a shared library\n", f);
  std::fclose(f);
  mhagen_library *lib = nullptr;
  EXPECT_EQ(mhagen_load_library(p.c_str(), &lib), MHAGEN_ERR_LOAD_FAILED);
  EXPECT_NE(std::strstr(mhagen_last_error(), "not an ELF file"), nullptr)
      << mhagen_last_error();
}

TEST(HostileLibrary, FifoIsRefusedWithoutBlocking) {
  const std::string p = testing::TempDir() + "/fifo.so";
  ::unlink(p.c_str());
  ASSERT_EQ(::mkfifo(p.c_str(), 0600), 0) << std::strerror(errno);
  alarm(20); // an open that waits for a writer ends the test here
  mhagen_library *lib = nullptr;
  EXPECT_EQ(mhagen_load_library(p.c_str(), &lib), MHAGEN_ERR_LOAD_FAILED);
  alarm(0);
  EXPECT_NE(std::strstr(mhagen_last_error(), "not a regular file"), nullptr)
      << mhagen_last_error();
  ::unlink(p.c_str());
}

namespace {
// A file's bytes, and bytes written as a file in the test's temporary
// folder (mhagen/support/Process.h does the I/O).
std::vector<unsigned char> fileBytes(const std::string &path) {
  const std::string s = readFile(path);
  return {s.begin(), s.end()};
}
std::string writeBytes(const std::string &name,
                       const std::vector<unsigned char> &bytes) {
  const std::string p = testing::TempDir() + "/" + name;
  writeFile(p, std::string(bytes.begin(), bytes.end()));
  return p;
}
} // namespace

namespace {
// A shared object's bytes, with its dynamic entries and loadable segments
// found, for corrupting one field at a time.
struct ElfImage {
  std::vector<unsigned char> bytes;
  explicit ElfImage(const char *path) : bytes(fileBytes(path)) {}
  Elf64_Ehdr ehdr() const {
    Elf64_Ehdr h;
    std::memcpy(&h, bytes.data(), sizeof(h));
    return h;
  }
  Elf64_Phdr *phdr(size_t i) {
    return reinterpret_cast<Elf64_Phdr *>(bytes.data() + ehdr().e_phoff +
                                          i * ehdr().e_phentsize);
  }
  Elf64_Dyn *dynamic() {
    for (size_t i = 0; i < ehdr().e_phnum; ++i)
      if (phdr(i)->p_type == PT_DYNAMIC)
        return reinterpret_cast<Elf64_Dyn *>(bytes.data() + phdr(i)->p_offset);
    return nullptr;
  }
  Elf64_Dyn *entry(int64_t tag) {
    for (Elf64_Dyn *d = dynamic(); d && d->d_tag != DT_NULL; ++d)
      if (d->d_tag == tag)
        return d;
    return nullptr;
  }
  unsigned char *at(uint64_t vaddr) {
    for (size_t i = 0; i < ehdr().e_phnum; ++i) {
      const Elf64_Phdr *ph = phdr(i);
      if (ph->p_type == PT_LOAD && vaddr >= ph->p_vaddr &&
          vaddr < ph->p_vaddr + ph->p_filesz)
        return bytes.data() + ph->p_offset + (vaddr - ph->p_vaddr);
    }
    return nullptr;
  }
  std::string write(const std::string &name) const {
    return writeBytes(name + ".so", bytes);
  }
};
} // namespace

// Each corruption alone makes ld.so read or write outside the file (most
// fault inside dlopen); each must be refused before dlopen runs.
TEST(HostileLibrary, CorruptDynamicSectionIsRefusedBeforeDlopen) {
  const std::vector<
      std::pair<const char *, std::function<bool(ElfImage &)>>>
      corruptions = {
          {"strtab_outside",
           [](ElfImage &e) {
             Elf64_Dyn *d = e.entry(DT_STRTAB);
             return d && (d->d_un.d_ptr += uint64_t{1} << 40, true);
           }},
          {"strsz_huge",
           [](ElfImage &e) {
             Elf64_Dyn *d = e.entry(DT_STRSZ);
             return d && (d->d_un.d_val = uint64_t{1} << 40, true);
           }},
          {"symtab_outside",
           [](ElfImage &e) {
             Elf64_Dyn *d = e.entry(DT_SYMTAB);
             return d && (d->d_un.d_ptr = uint64_t{1} << 40, true);
           }},
          {"needed_past_strtab",
           [](ElfImage &e) {
             // The library needs nothing: its RELACOUNT hint becomes a
             // DT_NEEDED naming a string past the table.
             Elf64_Dyn *d = e.entry(DT_NEEDED);
             if (!d && (d = e.entry(DT_RELACOUNT)))
               d->d_tag = DT_NEEDED;
             return d && (d->d_un.d_val = uint64_t{1} << 32, true);
           }},
          {"gnu_hash_buckets_huge",
           [](ElfImage &e) {
             Elf64_Dyn *d = e.entry(DT_GNU_HASH);
             unsigned char *h = d ? e.at(d->d_un.d_ptr) : nullptr;
             const uint32_t huge = 0x7fffffff;
             return h && (std::memcpy(h, &huge, 4), true);
           }},
          {"gnu_hash_chain_past_file",
           [](ElfImage &e) {
             Elf64_Dyn *d = e.entry(DT_GNU_HASH);
             unsigned char *h = d ? e.at(d->d_un.d_ptr) : nullptr;
             if (!h)
               return false;
             uint32_t bloom;
             std::memcpy(&bloom, h + 8, 4);
             const uint32_t far = 0x40000000; // first bucket's symbol
             std::memcpy(h + 16 + 8 * bloom, &far, 4);
             return true;
           }},
          {"relocation_symbol_past_table",
           [](ElfImage &e) {
             Elf64_Dyn *d = e.entry(DT_RELA);
             unsigned char *r = d ? e.at(d->d_un.d_ptr) : nullptr;
             if (!r)
               return false;
             Elf64_Rela rela;
             std::memcpy(&rela, r, sizeof(rela));
             rela.r_info = ELF64_R_INFO(0xffffffu, ELF64_R_TYPE(rela.r_info));
             std::memcpy(r, &rela, sizeof(rela));
             return true;
           }},
          {"relocation_target_unmapped",
           [](ElfImage &e) {
             Elf64_Dyn *d = e.entry(DT_RELA);
             unsigned char *r = d ? e.at(d->d_un.d_ptr) : nullptr;
             if (!r)
               return false;
             const uint64_t far = uint64_t{1} << 44;
             std::memcpy(r + offsetof(Elf64_Rela, r_offset), &far, 8);
             return true;
           }},
          {"init_array_unmapped",
           [](ElfImage &e) {
             Elf64_Dyn *d = e.entry(DT_INIT_ARRAYSZ);
             return d && (d->d_un.d_val = uint64_t{1} << 40, true);
           }},
          {"no_dt_null",
           [](ElfImage &e) {
             Elf64_Dyn *d = e.dynamic();
             size_t n = 0;
             for (size_t i = 0; i < e.ehdr().e_phnum; ++i)
               if (e.phdr(i)->p_type == PT_DYNAMIC)
                 n = e.phdr(i)->p_filesz / sizeof(Elf64_Dyn);
             for (size_t i = 0; i < n; ++i)
               if (d[i].d_tag == DT_NULL)
                 d[i].d_tag = DT_DEBUG;
             return n > 0;
           }},
      };
  for (const auto &[name, corrupt] : corruptions) {
    ElfImage image(gWrongAbiLibPath);
    ASSERT_TRUE(corrupt(image)) << name << ": the field is not in the file";
    const std::string p = image.write(name);
    mhagen_library *lib = nullptr;
    EXPECT_EQ(mhagen_load_library(p.c_str(), &lib), MHAGEN_ERR_LOAD_FAILED)
        << name << ": " << mhagen_last_error();
    EXPECT_NE(std::strstr(mhagen_last_error(), "refused before dlopen"),
              nullptr)
        << name << ": " << mhagen_last_error();
    // The structural check names the damage (the digest would only say
    // that the file changed).
    EXPECT_NE(std::strstr(mhagen_last_error(), "dynamic section"), nullptr)
        << name << ": " << mhagen_last_error();
  }
}

// A library mhagen did not seal (built by hand, or stripped afterwards) is
// refused before dlopen; `mhagen seal` makes it loadable.
TEST(HostileLibrary, UnsealedLibraryIsRefusedUntilSealed) {
  const std::string p =
      writeBytes("unsealed.so", fileBytes(gWrongAbiLibPath));
  mhagen_library *lib = nullptr;
  EXPECT_EQ(mhagen_load_library(p.c_str(), &lib), MHAGEN_ERR_LOAD_FAILED);
  EXPECT_NE(std::strstr(mhagen_last_error(), "no mhagen integrity digest"),
            nullptr)
      << mhagen_last_error();
  ASSERT_EQ(mhagen_seal_library(p.c_str()), MHAGEN_OK) << mhagen_last_error();
  ASSERT_EQ(mhagen_seal_library(p.c_str()), MHAGEN_OK); // replaces, not adds
  EXPECT_EQ(fileBytes(p).size(), fileBytes(gWrongAbiLibPath).size() + 32);
  // Past the checks: the library's own ABI version is what refuses it now.
  EXPECT_EQ(mhagen_load_library(p.c_str(), &lib), MHAGEN_ERR_ABI_MISMATCH);
}

// A sealed library damaged by random bit flips, or whose manifest was
// edited in place (the same length: f32 -> f16, as a hand edit or a
// corrupting copy would), is refused before dlopen: without the digest
// these loaded and then faulted or hit SIGILL on a call.
TEST(HostileLibrary, DamagedOrEditedLibraryIsRefusedBeforeDlopen) {
  const std::vector<unsigned char> good = fileBytes(gLibPath);
  ASSERT_GT(good.size(), 4096u);
  std::mt19937_64 rng(42);
  for (int copy = 0; copy < 20; ++copy) {
    std::vector<unsigned char> bad = good;
    for (int flip = 0; flip < 8; ++flip) {
      // Past the ELF header, before the digest trailer.
      const size_t at = 64 + rng() % (good.size() - 64 - 32);
      bad[at] ^= static_cast<unsigned char>(1u << (rng() % 8));
    }
    const std::string p =
        writeBytes("flipped_" + std::to_string(copy) + ".so", bad);
    mhagen_library *lib = nullptr;
    EXPECT_EQ(mhagen_load_library(p.c_str(), &lib), MHAGEN_ERR_LOAD_FAILED)
        << "copy " << copy;
    EXPECT_EQ(lib, nullptr);
    EXPECT_NE(std::strstr(mhagen_last_error(), "refused before dlopen"),
              nullptr)
        << mhagen_last_error();
  }
  std::vector<unsigned char> edited = good;
  const std::string from = R"("dtype": "f32")", to = R"("dtype": "f16")";
  auto at = std::search(edited.begin(), edited.end(), from.begin(), from.end());
  ASSERT_NE(at, edited.end()) << "no f32 manifest in " << gLibPath;
  std::copy(to.begin(), to.end(), at);
  const std::string p = writeBytes("edited_manifest.so", edited);
  mhagen_library *lib = nullptr;
  EXPECT_EQ(mhagen_load_library(p.c_str(), &lib), MHAGEN_ERR_LOAD_FAILED);
  EXPECT_NE(std::strstr(mhagen_last_error(),
                        "integrity digest does not match its contents"),
            nullptr)
      << mhagen_last_error();
}

TEST(HostileLibrary, OtherAbiVersionIsAbiMismatch) {
  const std::string p =
      writeBytes("wrong_abi_sealed.so", fileBytes(gWrongAbiLibPath));
  ASSERT_EQ(mhagen_seal_library(p.c_str()), MHAGEN_OK) << mhagen_last_error();
  mhagen_library *lib = nullptr;
  EXPECT_EQ(mhagen_load_library(p.c_str(), &lib), MHAGEN_ERR_ABI_MISMATCH);
  EXPECT_NE(std::strstr(mhagen_last_error(), "was built for ABI version"),
            nullptr)
      << mhagen_last_error();
}

int main(int argc, char **argv) {
  testing::InitGoogleTest(&argc, argv);
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s LIB.so WRONG_ABI_LIB.so\n", argv[0]);
    return 2;
  }
  gLibPath = argv[1];
  gWrongAbiLibPath = argv[2];
  return RUN_ALL_TESTS();
}
